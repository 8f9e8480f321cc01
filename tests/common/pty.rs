//! A pseudo-terminal for tests that run redlock on a terminal (`exec_tty`, `waiting_status`).

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};

/// A pseudo-terminal: the master (the user's side) and the slave (the program's terminal).
pub struct Pty {
    pub master: File,
    pub slave: OwnedFd,
}

/// Opens a pseudo-terminal, `columns` wide if given (else the system's default size). Neither
/// side is inherited by the processes this (or a parallel) test starts: a hangup needs the
/// master closed everywhere.
pub fn pty(columns: Option<u16>) -> Pty {
    let (mut master, mut slave) = (0, 0);
    let size = columns.map(|ws_col| libc::winsize {
        ws_row: 24,
        ws_col,
        ws_xpixel: 0,
        ws_ypixel: 0,
    });
    // SAFETY: openpty writes two descriptors into the integers we pass and reads the window size
    // we own, if any; the other arguments may be null. We own the descriptors from here on.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            size.as_ref()
                .map_or(std::ptr::null(), |s| s as *const libc::winsize),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    for fd in [master, slave] {
        // SAFETY: fcntl on a descriptor we own.
        assert_ne!(
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) },
            -1
        );
    }
    // SAFETY: both descriptors were just opened by openpty and are not owned elsewhere.
    unsafe {
        Pty {
            master: File::from_raw_fd(master),
            slave: OwnedFd::from_raw_fd(slave),
        }
    }
}
