//! Safe wrappers of the OS calls that the safe crates leave to us, on every Unix: who we are,
//! signal dispositions and masks, a terminal's size, the clocks two processes share. (What Linux
//! has and other systems lack is in `platform`.)
//!
//! Everything here is a thin, safe function; callers hold no `unsafe`. rustix (raw system calls,
//! no errno) does what it can; the few calls it lacks are libc's, each behind one `unsafe`
//! block whose safety comment says why it holds: signal dispositions and masks (rustix has none
//! outside its unstable runtime module), the passwd lookup (NSS is libc's), and a process's group
//! and session (rustix asserts that the kernel's answer is a pid, but a group or session begun
//! outside our pid namespace is 0: see [`process_group_of`]). Where a call fails,
//! the wrapper says so (`io::Result`) or gives the same fallback its callers used before.
//!
//! Starting the command (async-signal-safe code only) is `platform`'s; the watchdog's life
//! after its fork stays in `spawn.rs`.
//!
//! Layer 0 of the list in `lib.rs`.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, poll};
use rustix::process::{Pid, Signal};

/// `raw` as a pid: `None` for 0 and below (rustix's `Pid` is a positive number; a negative one
/// would name a process group).
fn pid_of(raw: i32) -> Option<Pid> {
    if raw > 0 { Pid::from_raw(raw) } else { None }
}

/// Our pid.
pub fn pid() -> i32 {
    rustix::process::getpid().as_raw_nonzero().get()
}

/// Our parent's pid (0 when we have none in our pid namespace).
pub fn parent_pid() -> i32 {
    rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get())
}

/// Whether we lead our process group (its id is our pid).
pub fn leads_process_group() -> bool {
    process_group_of(0) == Some(pid())
}

/// Whether we lead our session.
pub fn leads_session() -> bool {
    // SAFETY: getsid takes a number and has no memory-safety preconditions.
    let sid = unsafe { libc::getsid(0) };
    sid > 0 && sid == pid()
}

/// The process group of process `pid` (0: ours); `None` when there is no such process, or when
/// the group began outside our pid namespace (the kernel answers 0 then: a container entered
/// with `docker exec`). Not rustix's `getpgid`/`getsid`: they take that 0 for a pid, which
/// their `Pid` (a non-zero number) cannot be.
pub fn process_group_of(pid: i32) -> Option<i32> {
    if pid < 0 {
        return None;
    }
    // SAFETY: getpgid takes a number and has no memory-safety preconditions.
    let group = unsafe { libc::getpgid(pid) };
    (group > 0).then_some(group)
}

/// Our real user id.
pub fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// Sends `signo` to process `pid`, best effort (a signal without a name, or a pid not above 0,
/// sends nothing).
pub fn signal(pid: i32, signo: i32) {
    if let (Some(pid), Some(sig)) = (pid_of(pid), Signal::from_named_raw(signo)) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// Whether process `pid` exists (`kill(pid, 0)` succeeds, or is refused with EPERM: it is
/// someone else's).
pub fn exists(pid: i32) -> bool {
    pid_of(pid).is_some_and(|p| {
        let tried = rustix::process::test_kill_process(p);
        tried.is_ok() || tried == Err(rustix::io::Errno::PERM)
    })
}

/// Whether we may signal process `pid` (`kill(pid, 0)` is not refused with EPERM).
pub fn may_signal(pid: i32) -> bool {
    pid_of(pid)
        .is_none_or(|p| rustix::process::test_kill_process(p) != Err(rustix::io::Errno::PERM))
}

/// Waits for child `pid` (any child: `None`) to change state: its pid and raw wait status, or
/// `None` when `block` is false and none has exited, or when interrupted by a signal.
pub fn wait_child(pid: Option<i32>, block: bool) -> io::Result<Option<(i32, i32)>> {
    use rustix::process::WaitOptions;
    let options = if block {
        WaitOptions::empty()
    } else {
        WaitOptions::NOHANG
    };
    let waited = match pid {
        Some(pid) => {
            let pid = pid_of(pid).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
            rustix::process::waitpid(Some(pid), options)
        }
        None => rustix::process::wait(options),
    };
    match waited {
        Ok(done) => Ok(done.map(|(p, status)| (p.as_raw_nonzero().get(), status.as_raw()))),
        Err(rustix::io::Errno::INTR) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Waits up to `timeout` (`None`: for ever) until `fd` is readable (or its writer closed it, or
/// it failed): true then, false at the timeout. A signal does not cut the wait short.
pub fn readable_within(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<bool> {
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        let left = left.map(|l| rustix::time::Timespec::try_from(l).unwrap_or(FOREVER));
        let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
        match poll(&mut fds, left.as_ref()) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// A timeout too long to matter (about 68 years).
const FOREVER: rustix::time::Timespec = rustix::time::Timespec {
    tv_sec: i32::MAX as i64,
    tv_nsec: 0,
};

/// Whether the other end of `fd` is gone, without waiting: for the write end of a pipe, POLLERR
/// (its reader closed it); with `hangup` also POLLHUP (a socket's peer).
pub fn peer_gone(fd: BorrowedFd<'_>, hangup: bool) -> bool {
    let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::empty())];
    let gone = if hangup {
        PollFlags::ERR | PollFlags::HUP
    } else {
        PollFlags::ERR
    };
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    poll(&mut fds, Some(&zero)) == Ok(1) && fds[0].revents().intersects(gone)
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on the host (an `Instant` cannot
/// cross a process boundary).
pub fn monotonic_ns() -> u64 {
    nanos(rustix::time::clock_gettime(
        rustix::time::ClockId::Monotonic,
    ))
}

/// The CPU time the calling thread has used.
#[cfg(test)]
pub fn thread_cpu_time() -> Duration {
    Duration::from_nanos(nanos(rustix::time::clock_gettime(
        rustix::time::ClockId::ThreadCPUTime,
    )))
}

fn nanos(ts: rustix::time::Timespec) -> u64 {
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// This host's name (the kernel's node name, which `gethostname` returns).
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// The name of user `uid` in the passwd database (an NSS lookup), if it has one.
pub fn user_name(uid: u32) -> Option<String> {
    // SAFETY: getpwuid returns NULL or a pointer to static storage that stays valid until the
    // next getpw* call, and we copy the name out before returning (redlock looks up no user
    // elsewhere).
    unsafe {
        let pw = libc::getpwuid(uid);
        if pw.is_null() || (*pw).pw_name.is_null() {
            None
        } else {
            Some(CStr::from_ptr((*pw).pw_name).to_string_lossy().into_owned())
        }
    }
}

/// The size of the terminal on `fd` as (rows, columns); 0 where it does not say.
pub fn terminal_size(fd: impl AsFd) -> (u16, u16) {
    rustix::termios::tcgetwinsize(fd).map_or((0, 0), |ws| (ws.ws_row, ws.ws_col))
}

/// What an open file is, as `fstat` tells: its type, device and inode, and the device it stands
/// for (a character device's `st_rdev`).
#[derive(Debug, Clone, Copy)]
pub struct FileId {
    pub kind: rustix::fs::FileType,
    pub dev: u64,
    pub ino: u64,
    pub rdev: u64,
}

/// What `fd` is open on.
pub fn file_id(fd: impl AsFd) -> io::Result<FileId> {
    let st = rustix::fs::fstat(fd)?;
    // (Device numbers are i32 on macOS.)
    #[allow(clippy::unnecessary_cast)]
    Ok(FileId {
        kind: rustix::fs::FileType::from_raw_mode(st.st_mode),
        dev: st.st_dev as u64,
        ino: st.st_ino,
        rdev: st.st_rdev as u64,
    })
}

/// How `fd` is open: for reading only, writing only, or both.
pub fn access_mode(fd: impl AsFd) -> io::Result<rustix::fs::OFlags> {
    Ok(rustix::fs::fcntl_getfl(fd)? & rustix::fs::OFlags::RWMODE)
}

/// Clears O_NONBLOCK on `fd` (a file opened non-blocking so that the open could not hang).
pub fn set_blocking(fd: impl AsFd) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    Ok(rustix::fs::fcntl_setfl(
        &fd,
        flags - rustix::fs::OFlags::NONBLOCK,
    )?)
}

/// Puts `fd` on stdin (dup2).
pub fn set_stdin(fd: impl AsFd) -> io::Result<()> {
    Ok(rustix::stdio::dup2_stdin(fd)?)
}

/// Puts `fd` on stderr (dup2).
pub fn set_stderr(fd: impl AsFd) -> io::Result<()> {
    Ok(rustix::stdio::dup2_stderr(fd)?)
}

/// A copy of `fd`, close-on-exec, numbered 3 or more.
pub fn dup_cloexec(fd: impl AsFd) -> io::Result<OwnedFd> {
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, 3)?)
}

/// Whether `signo` is ignored (SIG_IGN) in this process.
pub fn signal_ignored(signo: i32) -> bool {
    // SAFETY: with a null new action, sigaction only reads the current one into `old`, a zeroed
    // struct we own.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signo, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Ignores the signals `ignore` and gives `default` their default action again (an ignored
/// signal stays ignored across exec).
pub fn set_dispositions(ignore: &[i32], default: &[i32]) {
    // SAFETY: SIG_IGN and SIG_DFL install no handler of ours: no code of ours runs at a signal.
    unsafe {
        for &signo in ignore {
            libc::signal(signo, libc::SIG_IGN);
        }
        for &signo in default {
            libc::signal(signo, libc::SIG_DFL);
        }
    }
}

/// Blocks (`block`) or unblocks `signals` in the calling thread, and so in the threads it
/// starts from now on.
pub fn mask_signals(block: bool, signals: &[i32]) -> io::Result<()> {
    let how = if block {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    // SAFETY: the set is initialised by sigemptyset before use; pthread_sigmask only changes the
    // calling thread's mask, and reads the set we own.
    let rc = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &signo in signals {
            libc::sigaddset(&mut set, signo);
        }
        libc::pthread_sigmask(how, &set, std::ptr::null_mut())
    };
    match rc {
        0 => Ok(()),
        rc => Err(io::Error::from_raw_os_error(rc)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_is_readable_once_written_or_closed() {
        let pipe = rustix::pipe::pipe;
        let (r, w) = pipe().unwrap();
        assert!(!readable_within(r.as_fd(), Some(Duration::ZERO)).unwrap());
        assert!(!peer_gone(w.as_fd(), false));
        drop(r);
        assert!(peer_gone(w.as_fd(), false));
        let (r, w) = pipe().unwrap();
        drop(w);
        assert!(readable_within(r.as_fd(), None).unwrap());
    }
}
