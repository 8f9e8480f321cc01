//! The Linux implementation (see `mod.rs`): pidfds, `PR_SET_PDEATHSIG` set between a vfork-style
//! clone and the exec, `PR_SET_CHILD_SUBREAPER`, sealed memfds, `/proc`, abstract unix sockets
//! and a signal's `si_code`.
//!
//! Layer 1 of the list in `lib.rs` (a part of `platform`).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use rustix::process::{Pid, Signal};

use super::{Plan, Proc, StartFailed};
use crate::os;

/// The kernel stops `exec`'s command when redlock dies (`PR_SET_PDEATHSIG`).
pub const DEATH_SIGNAL: bool = true;

/// [`command_line`] gives a process's arguments one by one.
pub const EXACT_ARGS: bool = true;

/// `raw` as a pid: `None` for 0 and below.
fn pid_of(raw: i32) -> Option<Pid> {
    if raw > 0 { Pid::from_raw(raw) } else { None }
}

/// A process named by a pidfd: a pid reused after it ended never passes for it.
#[derive(Debug)]
pub struct Process(OwnedFd);

impl Process {
    /// Opens a pidfd for `pid` (close-on-exec). The raw OS error says why not: ESRCH (no such
    /// process), ENOSYS (Linux before 5.3), EINVAL or ENOENT (not a process).
    pub fn open(pid: i32) -> io::Result<Process> {
        let pid = pid_of(pid).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?;
        Ok(Process(fd))
    }

    /// The process that a process started by us names with `fd`, inherited (see
    /// [`Process::inheritable`]); `start` is not needed here.
    pub fn inherited(_pid: i32, fd: Option<OwnedFd>, _start: Option<u64>) -> io::Result<Process> {
        fd.map(Process)
            .ok_or_else(|| io::Error::other("no pidfd was inherited"))
    }

    /// The descriptor a process we start must inherit to name the process (its pidfd).
    pub fn inheritable(&self) -> Option<RawFd> {
        Some(self.0.as_raw_fd())
    }

    /// What else a process we start needs to name it: nothing (the pidfd says it all).
    pub fn start(&self) -> Option<u64> {
        None
    }

    /// Whether the process has ended (its pidfd is readable then, zombie or reaped).
    pub fn ended(&self) -> bool {
        os::readable_within(self.0.as_fd(), Some(Duration::ZERO)).unwrap_or(false)
    }

    /// Blocks until the process has ended; an error when the pidfd cannot be polled.
    pub fn wait_ended(&self) -> io::Result<()> {
        os::readable_within(self.0.as_fd(), None).map(|_| ())
    }

    /// Sends `signo` to the process, never to a later holder of its pid; 0 only checks that we
    /// may. A signal without a name is refused (EINVAL).
    pub fn signal(&self, signo: i32) -> io::Result<()> {
        if signo == 0 {
            // SAFETY: pidfd_send_signal on a pidfd we own, signal 0, no siginfo, no flags: it
            // only checks the process and our permission, and touches no memory of ours.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    self.0.as_raw_fd(),
                    0,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                )
            };
            return if rc == -1 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            };
        }
        let sig = Signal::from_named_raw(signo)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(rustix::process::pidfd_send_signal(&self.0, sig)?)
    }

    /// Another handle on the same process.
    pub fn try_clone(&self) -> io::Result<Process> {
        self.0.try_clone().map(Process)
    }

    /// Makes the descriptor close-on-exec (an inherited one is not).
    pub fn set_cloexec(&self) {
        let _ = rustix::io::fcntl_setfd(&self.0, rustix::io::FdFlags::CLOEXEC);
    }
}

/// How a watchdog process names the command it stops (see `spawn::Watchdog`): made before the
/// fork, used in the forked child, where only async-signal-safe calls are allowed.
pub struct Watched {
    pid: i32,
    /// The command's pidfd; none before Linux 5.3.
    pidfd: Option<Process>,
}

impl Watched {
    pub fn new(pid: i32) -> Watched {
        Watched {
            pid,
            pidfd: Process::open(pid).ok(),
        }
    }

    /// The descriptor the watchdog keeps open (its pidfd).
    pub fn fd(&self) -> Option<RawFd> {
        self.pidfd.as_ref().map(|p| p.0.as_raw_fd())
    }

    /// Sends `sig` through the pidfd, so that a pid reused meanwhile is never hit; without one,
    /// by pid. Async-signal-safe.
    pub fn signal(&self, sig: Signal) {
        match (&self.pidfd, pid_of(self.pid)) {
            (Some(p), _) => drop(rustix::process::pidfd_send_signal(&p.0, sig)),
            (None, Some(pid)) => drop(rustix::process::kill_process(pid, sig)),
            (None, None) => {}
        }
    }

    /// Whether the command has exited within `wait` (its pidfd became readable); `None` when
    /// that cannot be told (no pidfd: then it is never sent SIGKILL, which could hit a reused
    /// pid). Async-signal-safe.
    pub fn exited_within(&self, wait: Duration) -> Option<bool> {
        let p = self.pidfd.as_ref()?;
        Some(os::readable_within(p.0.as_fd(), Some(wait)).unwrap_or(false))
    }
}

/// A pipe, both ends close-on-exec: (read, write).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Makes the pipe whose write end is `fd` hold `len` bytes, so that writing them cannot block
/// while nobody reads yet: a pipe holds 64 KiB (one page for a user over
/// `pipe-user-pages-soft`); only a longer text asks for a larger pipe (up to `pipe-max-size`).
pub fn hold_in_pipe(fd: BorrowedFd<'_>, len: usize) -> io::Result<()> {
    if len > rustix::pipe::fcntl_getpipe_size(fd)? {
        rustix::pipe::fcntl_setpipe_size(fd, len)?;
    }
    Ok(())
}

/// A sealed, read-only memory file named `name` holding `bytes`, which a command started next
/// inherits: not close-on-exec, and numbered 3 or more, so that it never stands in for a closed
/// stdin, stdout or stderr. `/dev/fd/N` opens it anew for each reader.
pub fn password_file(name: &CStr, bytes: &[u8]) -> io::Result<OwnedFd> {
    use rustix::fs::{MemfdFlags, SealFlags};
    use std::io::Write;
    let fd = rustix::fs::memfd_create(name, MemfdFlags::ALLOW_SEALING)?;
    let fd = if fd.as_raw_fd() < 3 {
        // The low one closes when the first `fd` drops.
        let dup = rustix::io::fcntl_dupfd_cloexec(&fd, 3)?;
        rustix::io::fcntl_setfd(&dup, rustix::io::FdFlags::empty())?;
        dup
    } else {
        fd
    };
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    rustix::fs::fchmod(&file, rustix::fs::Mode::RUSR)?;
    let seals = SealFlags::SEAL | SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE;
    rustix::fs::fcntl_add_seals(&file, seals)?;
    Ok(OwnedFd::from(file))
}

/// Where a process lists its open descriptors (for [`super::take_inherited`]).
pub const FD_DIR: &str = "/proc/self/fd";

/// Closes the descriptors `from..=to` (close_range, Linux 5.9; before it, one by one up to a
/// bound). Async-signal-safe.
///
/// # Safety
/// Nothing may use those descriptors afterwards: for a forked child that drops what it
/// inherited.
pub unsafe fn close_range(from: RawFd, to: RawFd) {
    // SAFETY: the caller owns the range; close_range and close touch no memory.
    unsafe {
        if libc::syscall(libc::SYS_close_range, from, to, 0) == -1 {
            for fd in from..=to.min(4095) {
                libc::close(fd);
            }
        }
    }
}

/// Makes this process the reaper of its orphaned descendants (`PR_SET_CHILD_SUBREAPER`): a
/// process the command started and left behind (its parent died) becomes our child instead of
/// init's, so that [`children`] finds it.
pub fn adopt_orphans() -> io::Result<()> {
    Ok(rustix::process::set_child_subreaper(Some(
        rustix::process::getpid(),
    ))?)
}

/// The pids of the living children of `me` (read from `/proc`; the adopted orphans among them),
/// `except` left out.
pub fn children(me: i32, except: i32) -> Vec<i32> {
    pids_of_children(me, except, |state| state != "Z")
}

/// The pids of the children of `me` that are zombies, `except` left out.
pub fn zombie_children(me: i32, except: i32) -> Vec<i32> {
    pids_of_children(me, except, |state| state == "Z")
}

fn pids_of_children(me: i32, except: i32, state_is: impl Fn(&str) -> bool) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != except)
        .filter(|&pid| parent_and_state(pid).is_some_and(|(p, s)| p == me && state_is(&s)))
        .collect()
}

/// The parent pid and the state letter of process `pid`, from `/proc/PID/stat` ("PID (COMM)
/// STATE PPID ...", COMM may hold spaces and parentheses).
fn parent_and_state(pid: i32) -> Option<(i32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.to_string();
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state))
}

/// How the credentials of process `pid` differ from ours, if they do ("uid 0 → 65534"): the
/// kernel clears a process's parent-death signal when its effective or filesystem uid or gid
/// changes, and when it execs a set-user-ID, set-group-ID or file-capability binary (prctl(2)),
/// which shows as another uid or gid, or an effective capability set that gained one (a set
/// that only lost some keeps the signal: the kernel clears it only when the new permitted set
/// is not a subset of the old, as after `setpriv --bounding-set=-net_raw`, which gives no
/// warning). `/proc/PID/status` cannot say
/// whether the signal is still set, only that such a change happened; `None` also when the
/// process is gone or unreadable.
pub fn credentials_changed(pid: i32) -> Option<String> {
    let theirs = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ours = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |status: &str, name: &str| -> Option<String> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
    };
    // The effective one: the second of real, effective, saved, filesystem.
    let effective = |ids: &str| ids.split(' ').nth(1).unwrap_or(ids).to_string();
    for (name, shown) in [
        ("Uid:", "uid"),
        ("Gid:", "gid"),
        ("CapEff:", "capabilities"),
    ] {
        let (mine, now) = (field(&ours, name)?, field(&theirs, name)?);
        // Capabilities only dropped keep the signal (the kernel clears it when the new set is
        // not a subset of the old): a change counts only when one was gained.
        let changed = match name {
            "CapEff:" => gained_capabilities(&mine, &now),
            _ => mine != now,
        };
        if changed {
            let (mine, now) = match name {
                "CapEff:" => (mine, now),
                _ => (effective(&mine), effective(&now)),
            };
            return Some(format!("{shown} {mine} → {now}"));
        }
    }
    None
}

/// Whether the effective capability set `now` holds one that `before` lacks (both as
/// `/proc/PID/status` shows them: hexadecimal masks); an unreadable mask counts as a gain.
fn gained_capabilities(before: &str, now: &str) -> bool {
    match (
        u64::from_str_radix(before, 16),
        u64::from_str_radix(now, 16),
    ) {
        (Ok(before), Ok(now)) => now & !before != 0,
        _ => before != now,
    }
}

/// Every process in `/proc` (those that end while it is read are left out).
pub fn processes() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut buf = String::new();
    dir.flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let pid = name.to_str()?;
            if !pid.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            buf.clear();
            let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
            std::io::Read::read_to_string(&mut file, &mut buf).ok()?;
            parse_stat(&buf)
        })
        .collect()
}

/// Process `pid`, if there is one.
pub fn process(pid: i32) -> Option<Proc> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses a `/proc/PID/stat` line. The command name, in parentheses, may hold spaces and
/// parentheses itself: the fields start after the last `)`.
fn parse_stat(line: &str) -> Option<Proc> {
    let (head, rest) = line.rsplit_once(')')?;
    let pid = head.split_once(" (")?.0.trim().parse().ok()?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Proc {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        // Field 20 of stat.
        threads: fields.get(17)?.parse().ok()?,
        // Field 22 of stat (clock ticks after boot); the state is field 3.
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Whether `pid` leads a session that has a controlling terminal (a terminal's login shell, an
/// ssh session's; `setsid SCRIPT` leads a session without one).
pub fn session_with_terminal(pid: i32) -> bool {
    let Ok(line) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    stat_session_with_terminal(pid, &line)
}

/// The test of [`session_with_terminal`] on a `/proc/PID/stat` line: session id (field 6) is the
/// pid, and the terminal (field 7) is not 0.
fn stat_session_with_terminal(pid: i32, line: &str) -> bool {
    let Some((_, rest)) = line.rsplit_once(')') else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let session = fields.get(3).and_then(|f| f.parse::<i32>().ok());
    let tty = fields.get(4).and_then(|f| f.parse::<i64>().ok());
    session == Some(pid) && tty.is_some_and(|t| t != 0)
}

/// The arguments of process `pid` (from `/proc/PID/cmdline`, not UTF-8 replaced), or `None`
/// where unreadable.
pub fn command_line(pid: i32) -> Option<Vec<String>> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .map(|raw| split_cmdline(&raw))
}

/// Every process's arguments, as [`command_line`] gives them.
pub fn command_lines() -> Vec<(i32, Vec<String>)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse().ok()?;
            let raw = std::fs::read(entry.path().join("cmdline")).ok()?;
            Some((pid, split_cmdline(&raw)))
        })
        .collect()
}

fn split_cmdline(raw: &[u8]) -> Vec<String> {
    let raw = raw.strip_suffix(b"\0").unwrap_or(raw);
    if raw.is_empty() {
        return Vec::new();
    }
    raw.split(|&b| b == 0)
        .map(|part| String::from_utf8_lossy(part).into_owned())
        .collect()
}

/// Our pid namespace: the inode in `/proc/self/ns/pid` (`pid:[4026531836]`).
pub fn pid_namespace() -> Option<String> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let link = link.to_str()?;
    let inode = link.strip_prefix("pid:[")?.strip_suffix(']')?;
    inode
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| inode.to_string())
}

/// Whether one of `pids` holds the file `(dev, ino)` (a pipe or FIFO) open for reading only.
pub fn one_reads(pids: &[i32], dev: u64, ino: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    pids.iter().any(|pid| {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.flatten().any(|fd| {
            let is_it =
                std::fs::metadata(fd.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino);
            is_it && read_only(*pid, &fd.file_name().to_string_lossy())
        })
    })
}

/// Whether descriptor `fd` of `pid` was opened for reading only (`flags:` in its fdinfo, octal).
fn read_only(pid: i32, fd: &str) -> bool {
    let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else {
        return false;
    };
    info.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| i64::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|flags| flags & i64::from(libc::O_ACCMODE) == i64::from(libc::O_RDONLY))
}

/// Whether descriptor `fd` of process `pid` is open on the file `(dev, ino)` (false where that
/// cannot be read); always told here.
pub fn holds_file(pid: i32, fd: i32, dev: u64, ino: u64) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::metadata(format!("/proc/{pid}/fd/{fd}"));
    Some(file.is_ok_and(|m| m.dev() == dev && m.ino() == ino))
}

/// Our own binary, to run again: `/proc/self/exe`, the very file, even if it was replaced or
/// deleted since.
pub fn own_binary() -> io::Result<PathBuf> {
    Ok(PathBuf::from("/proc/self/exe"))
}

/// The address of the unix socket named `name` (abstract: no file to clean up, gone when its
/// listener is).
pub fn socket_address(name: &str) -> io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name)
}

/// The uid of the peer on `stream` (SO_PEERCRED, which the kernel fills in).
pub fn peer_uid(stream: &std::os::unix::net::UnixStream) -> Option<u32> {
    rustix::net::sockopt::socket_peercred(stream.as_fd())
        .ok()
        .map(|cred| cred.uid.as_raw())
}

/// Signals as they arrive, with whether the kernel raised each for a terminal (its `si_code`:
/// Ctrl-C, Ctrl-\, a hangup).
pub struct Signals(
    signal_hook::iterator::SignalsInfo<signal_hook::iterator::exfiltrator::WithOrigin>,
);

impl Signals {
    /// Installs the handlers for `signals`.
    pub fn new(signals: &[i32]) -> io::Result<Signals> {
        signal_hook::iterator::SignalsInfo::new(signals).map(Signals)
    }

    /// Each signal as it arrives: its number, and whether a terminal raised it.
    pub fn forever(&mut self) -> impl Iterator<Item = (i32, bool)> + '_ {
        use signal_hook::low_level::siginfo::Cause;
        self.0
            .forever()
            .map(|origin| (origin.signal, matches!(origin.cause, Cause::Kernel)))
    }
}

/// Starts the command of `plan`, stdio inherited, so that it gets SIGTERM if redlock dies, even
/// by SIGKILL (`PR_SET_PDEATHSIG`), and cheaply.
///
/// That signal has to be set in the child between fork and exec. `std::process::Command` can do
/// that with `pre_exec`, but then it falls back from `posix_spawn` to a full `fork`, which copies
/// redlock's page tables and costs a few hundred microseconds per run (measured: +25% on a spawn
/// of `/bin/true`; on a whole `redlock exec k -- true`, release build, hyperfine -N, 20
/// interleaved rounds of 100: 4.04 ms median with `Command` + `pre_exec` against 3.83 ms here,
/// faster in every round, 0.2 ms less system time). So this does what glibc's `posix_spawn`
/// does: `clone(CLONE_VM | CLONE_VFORK)` on a small separate stack, where the child only makes
/// async-signal-safe calls (reset signal handlers and mask, `prctl`, `execve`) while the
/// parent's thread waits for the exec. Everything the child needs (the argument and environment
/// arrays) is built before.
///
/// Signals: all are blocked in the parent around the clone, so that no handler of ours can run
/// in the child (it shares our memory until it execs); the child resets the handled signals to
/// their defaults and unblocks everything, as `std` does for its children.
pub fn start(plan: &Plan<'_>) -> Result<i32, StartFailed> {
    let nul_terminated = |v: &[std::ffi::CString]| {
        let mut p: Vec<*const libc::c_char> = v.iter().map(|s| s.as_ptr()).collect();
        p.push(std::ptr::null());
        p
    };
    let child = ChildPlan {
        path: plan.path.as_ptr(),
        argv: nul_terminated(plan.argv),
        sh_argv: nul_terminated(plan.sh_argv),
        envp: nul_terminated(plan.envp),
        parent: rustix::process::getpid().as_raw_nonzero().get(),
        reset: plan.reset,
        error: AtomicI32::new(0),
    };
    let mut stack = vec![0u8; CHILD_STACK];
    // The stack grows down: pass its 16-byte aligned top.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
    // SAFETY: we block every signal in this thread around the clone and restore the old mask
    // after. The child runs `child_main` on `stack`, which outlives it (CLONE_VFORK suspends this
    // thread until the child has exec'd or exited); it reads `child`, which also outlives it,
    // and writes only `child.error`, an atomic.
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child_main,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &child as *const ChildPlan<'_> as *mut libc::c_void,
        );
        let clone_error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid == -1 {
            return Err(StartFailed::Fork(clone_error));
        }
        pid
    };
    drop(stack);
    match child.error.load(Ordering::SeqCst) {
        0 => Ok(pid),
        errno => {
            // The child has exited already (exec failed): reap it.
            if let Some(pid) = pid_of(pid) {
                while let Err(rustix::io::Errno::INTR) =
                    rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty())
                {
                }
            }
            Err(StartFailed::Exec(errno))
        }
    }
}

/// Everything the child reads, prepared by the parent (the child must not allocate).
struct ChildPlan<'a> {
    path: *const libc::c_char,
    argv: Vec<*const libc::c_char>,
    sh_argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    parent: libc::pid_t,
    reset: &'a [i32],
    /// The child's errno when exec failed (0: the exec happened).
    error: AtomicI32,
}

/// The child's stack: it only makes a few system calls before exec.
const CHILD_STACK: usize = 64 * 1024;

/// Runs in the child, on its own stack, in our memory: async-signal-safe calls only.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildPlan`, alive until we exec or exit (CLONE_VFORK).
    // Every call below is async-signal-safe and touches only our own stack and the plan.
    unsafe {
        let plan = &*(arg as *const ChildPlan<'_>);
        for &signo in plan.reset {
            libc::signal(signo, libc::SIG_DFL);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // If redlock dies (even by SIGKILL), the command gets SIGTERM: it must not go on
        // running without the lock, whose renewal died with us.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
            plan.error.store(errno(), Ordering::SeqCst);
            libc::_exit(127);
        }
        // redlock died between clone and prctl: the death signal was missed.
        if libc::getppid() != plan.parent {
            plan.error.store(libc::ESRCH, Ordering::SeqCst);
            libc::_exit(127);
        }
        libc::execve(plan.path, plan.argv.as_ptr(), plan.envp.as_ptr());
        let mut error = errno();
        if error == libc::ENOEXEC {
            libc::execve(plan.sh_argv[0], plan.sh_argv.as_ptr(), plan.envp.as_ptr());
            error = errno();
        }
        plan.error.store(error.max(1), Ordering::SeqCst);
        libc::_exit(127)
    }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pidfd_sees_its_process_end() {
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let fd = Process::open(child.id() as i32).unwrap();
        assert!(!fd.ended());
        assert!(fd.signal(0).is_ok());
        fd.signal(libc::SIGKILL).unwrap();
        fd.wait_ended().unwrap();
        assert!(fd.ended());
        child.wait().unwrap();
    }

    #[test]
    fn a_sealed_memfd_holds_its_bytes_and_is_inherited() {
        use std::io::Read;
        let fd = password_file(c"test", b"secret").unwrap();
        assert!(fd.as_raw_fd() >= 3);
        assert!(rustix::io::fcntl_getfd(&fd).unwrap().is_empty());
        let mut text = String::new();
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        std::fs::File::open(path)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "secret");
    }

    /// Dropping capabilities keeps the parent-death signal: only a gain is a change.
    #[test]
    fn only_a_gained_capability_counts_as_a_change() {
        assert_eq!(credentials_changed(std::process::id() as i32), None);
        assert!(!gained_capabilities("000001ffffffffff", "000001ffffffdfff"));
        assert!(!gained_capabilities("000001ffffffffff", "0000000000000000"));
        assert!(!gained_capabilities("0000000000003000", "0000000000003000"));
        assert!(gained_capabilities("0000000000000000", "0000000000002000"));
        assert!(gained_capabilities("0000000000001000", "0000000000002000"));
    }

    #[test]
    fn a_stat_line_with_a_hostile_name_parses() {
        let line = "4242 (a) b (c) R) S 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 \
                    987654 1 2 3\n";
        let p = parse_stat(line).unwrap();
        assert_eq!(
            p,
            Proc {
                pid: 4242,
                state: 'S',
                ppid: 17,
                pgrp: 4242,
                threads: 1,
                start: 987654,
            }
        );
        assert!(parse_stat("12 (x").is_none());
        // A main thread that has exited while another runs: still living.
        let p = parse_stat(
            &line
                .replace(") S ", ") Z ")
                .replace(" 20 0 1 0 ", " 20 0 2 0 "),
        )
        .unwrap();
        assert_eq!((p.state, p.threads), ('Z', 2));
        assert!(p.living());
        let p = parse_stat(&line.replace(") S ", ") Z ")).unwrap();
        assert!(!p.living());
    }

    #[test]
    fn an_interactive_shell_leads_a_session_with_a_terminal() {
        let stat = |session: i32, tty: i32| {
            format!("4242 (bash) S 17 4242 {session} {tty} 4242 4194560 1 0 0 0 0 0 0 0 20 0 1 0 9")
        };
        assert!(stat_session_with_terminal(4242, &stat(4242, 34816)));
        // setsid SCRIPT: a session without a terminal.
        assert!(!stat_session_with_terminal(4242, &stat(4242, 0)));
        // A script started from a terminal: in the terminal shell's session.
        assert!(!stat_session_with_terminal(4242, &stat(17, 34816)));
        assert!(!stat_session_with_terminal(4242, "garbage"));
    }

    #[test]
    fn a_command_line_is_split_at_its_nuls() {
        assert_eq!(split_cmdline(b"a\0b c\0\0d\0"), ["a", "b c", "", "d"]);
        assert!(split_cmdline(b"").is_empty());
        let me = command_line(std::process::id() as i32).unwrap();
        assert!(!me.is_empty());
    }
}
