//! A pseudo-terminal for tests that run redlock on a terminal (`exec::tty`, `waiting::status`,
//! `inspect::watch`).

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A pseudo-terminal: the master (the user's side) and the slave (the program's terminal).
pub struct Pty {
    pub master: File,
    pub slave: OwnedFd,
}

/// Opens a pseudo-terminal, `columns` wide if given (else the system's default size). Neither
/// side is inherited by the processes this (or a parallel) test starts: a hangup needs the
/// master closed everywhere.
pub fn pty(columns: Option<u16>) -> Pty {
    // Both sides are opened close-on-exec (not made so afterwards, as openpty would need): a
    // process another test starts in between would inherit them.
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: posix_openpt takes flags and returns a descriptor we own from here on.
    let master = unsafe { libc::posix_openpt(flags) };
    assert_ne!(
        master,
        -1,
        "posix_openpt: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: the descriptor was just opened and is not owned elsewhere.
    let master = unsafe { File::from_raw_fd(master) };
    let fd = master.as_raw_fd();
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: grantpt, unlockpt and ptsname_r act on the master we own; ptsname_r writes at most
    // `name.len()` bytes, a NUL-terminated path, into the buffer we own.
    unsafe {
        assert_eq!(
            libc::grantpt(fd),
            0,
            "grantpt: {}",
            std::io::Error::last_os_error()
        );
        assert_eq!(
            libc::unlockpt(fd),
            0,
            "unlockpt: {}",
            std::io::Error::last_os_error()
        );
        assert_eq!(
            libc::ptsname_r(fd, name.as_mut_ptr(), name.len()),
            0,
            "ptsname_r"
        );
    }
    // SAFETY: `name` is NUL-terminated (ptsname_r succeeded); open returns a descriptor we own.
    let slave = unsafe { libc::open(name.as_ptr(), flags) };
    assert_ne!(
        slave,
        -1,
        "open the pty slave: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: the descriptor was just opened and is not owned elsewhere.
    let slave = unsafe { OwnedFd::from_raw_fd(slave) };
    if let Some(ws_col) = columns {
        let size = libc::winsize {
            ws_row: 24,
            ws_col,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads the winsize we own.
        let rc = unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCSWINSZ, &size) };
        assert_eq!(rc, 0, "TIOCSWINSZ: {}", std::io::Error::last_os_error());
    }
    Pty { master, slave }
}
