//! The portable implementation (see `mod.rs`): POSIX calls, `ps` for the process table, and
//! kqueue's `EVFILT_PROC` on macOS. Compiled for every target but Linux, and on Linux with
//! `--features portable`, where its tests run.
//!
//! Layer 1 of the list in `lib.rs` (a part of `platform`).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use super::{Plan, Proc, StartFailed};

/// Nothing stops `exec`'s command when redlock dies but a watchdog process of ours.
pub const DEATH_SIGNAL: bool = false;

/// [`command_line`] gives a process's arguments joined into one line (as `ps` shows them).
pub const EXACT_ARGS: bool = false;

/// How often [`Process::wait_ended`] asks whether the process still exists where there is no
/// kqueue; every [`CHECK_EVERY`]th time it also reads its state and start time (a `ps`).
const POLL: Duration = Duration::from_millis(50);
const CHECK_EVERY: u32 = 20;

/// `raw` as a pid: `None` for 0 and below.
fn pid_of(raw: i32) -> Option<Pid> {
    if raw > 0 { Pid::from_raw(raw) } else { None }
}

/// `kill(pid, 0)`: `Ok` when the process exists and we may signal it.
fn probe(pid: i32) -> io::Result<()> {
    let p = pid_of(pid).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::test_kill_process(p)?)
}

/// A process named by its pid and its start time (as `ps` tells it), so that a later process
/// given its pid does not pass for it (unless it started within the same second).
#[derive(Debug, Clone)]
pub struct Process {
    pid: i32,
    /// `None` where `ps` could not tell.
    start: Option<u64>,
}

impl Process {
    /// The process `pid`. The raw OS error says why not: ESRCH (no such process), EINVAL (not a
    /// pid).
    pub fn open(pid: i32) -> io::Result<Process> {
        match probe(pid) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            Err(e) => return Err(e),
        }
        Ok(Process {
            pid,
            start: process(pid).map(|p| p.start),
        })
    }

    /// The process that a process started by us names by `pid` and `start` (see
    /// [`Process::start`]); no descriptor is inherited here.
    pub fn inherited(pid: i32, _fd: Option<OwnedFd>, start: Option<u64>) -> io::Result<Process> {
        Ok(Process { pid, start })
    }

    /// No descriptor names a process here.
    pub fn inheritable(&self) -> Option<RawFd> {
        None
    }

    /// Its start time, which a process we start needs to name it.
    pub fn start(&self) -> Option<u64> {
        self.start
    }

    /// Whether the process has ended: no process has its pid, or the one that has is a zombie
    /// or started at another time.
    pub fn ended(&self) -> bool {
        if probe(self.pid).is_err_and(|e| e.raw_os_error() == Some(libc::ESRCH)) {
            return true;
        }
        match process(self.pid) {
            Some(p) => !p.living() || self.start.is_some_and(|s| s != p.start),
            // `ps` failed, or the process ended meanwhile.
            None => probe(self.pid).is_err_and(|e| e.raw_os_error() == Some(libc::ESRCH)),
        }
    }

    /// Blocks until the process has ended: kqueue's `EVFILT_PROC` on macOS, else a poll of
    /// `kill(pid, 0)` every [`POLL`], with a look at its state every second.
    pub fn wait_ended(&self) -> io::Result<()> {
        #[cfg(target_os = "macos")]
        if let Some(done) = self.wait_ended_kqueue() {
            return done;
        }
        let mut n = 0u32;
        loop {
            n += 1;
            let gone = if n % CHECK_EVERY == 1 {
                self.ended()
            } else {
                probe(self.pid).is_err_and(|e| e.raw_os_error() == Some(libc::ESRCH))
            };
            if gone {
                return Ok(());
            }
            std::thread::sleep(POLL);
        }
    }

    /// [`Process::wait_ended`] with a kqueue; `None` when one cannot be used.
    #[cfg(target_os = "macos")]
    fn wait_ended_kqueue(&self) -> Option<io::Result<()>> {
        use rustix::event::kqueue::{
            Event, EventFilter, EventFlags, ProcessEvents, kevent, kqueue,
        };
        let pid = pid_of(self.pid)?;
        let kq = kqueue().ok()?;
        let watch = Event::new(
            EventFilter::Proc {
                pid,
                flags: ProcessEvents::EXIT,
            },
            EventFlags::ADD | EventFlags::ONESHOT,
            std::ptr::null_mut(),
        );
        let mut out: Vec<Event> = Vec::with_capacity(1);
        // SAFETY: the only event names a process, not a descriptor: nothing in it can be closed
        // while the kqueue lives.
        match unsafe { kevent(&kq, &[watch], &mut out, Some(Duration::ZERO)) } {
            Ok(_) => {}
            // Gone before it could be watched.
            Err(rustix::io::Errno::SRCH) => return Some(Ok(())),
            Err(_) => return None,
        }
        // Ended (or its pid given to another) before the watch began.
        if self.ended() {
            return Some(Ok(()));
        }
        loop {
            out.clear();
            // SAFETY: as above.
            match unsafe { kevent(&kq, &[], &mut out, None) } {
                Ok(_) if !out.is_empty() => return Some(Ok(())),
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Some(Err(e.into())),
            }
        }
    }

    /// Sends `signo` to the process, unless it has ended (its pid may be another's by then); 0
    /// only checks that we may.
    pub fn signal(&self, signo: i32) -> io::Result<()> {
        if self.ended() {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        if signo == 0 {
            return probe(self.pid);
        }
        let sig = Signal::from_named_raw(signo)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let pid = pid_of(self.pid).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(rustix::process::kill_process(pid, sig)?)
    }

    /// Another handle on the same process.
    pub fn try_clone(&self) -> io::Result<Process> {
        Ok(self.clone())
    }

    /// No descriptor to close here.
    pub fn set_cloexec(&self) {}
}

/// How a watchdog process names the command it stops (see `spawn::Watchdog`): by pid, used in
/// the forked child, where only async-signal-safe calls are allowed. Once redlock has died the
/// command is init's child, reaped as soon as it exits, so its pid is free to be given to
/// another process only after it has ended: a signal in between may, rarely, hit that one.
pub struct Watched {
    pid: i32,
}

impl Watched {
    pub fn new(pid: i32) -> Watched {
        Watched { pid }
    }

    /// No descriptor to keep.
    pub fn fd(&self) -> Option<RawFd> {
        None
    }

    /// Sends `sig` by pid. Async-signal-safe.
    pub fn signal(&self, sig: Signal) {
        if let Some(pid) = pid_of(self.pid) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    }

    /// Whether the command has exited within `wait` (no process has its pid), asked every 10
    /// ms. Async-signal-safe (nanosleep, clock_gettime, kill).
    pub fn exited_within(&self, wait: Duration) -> Option<bool> {
        let deadline = Instant::now() + wait;
        loop {
            if probe(self.pid).is_err_and(|e| e.raw_os_error() == Some(libc::ESRCH)) {
                return Some(true);
            }
            if Instant::now() >= deadline {
                return Some(false);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A pipe, both ends close-on-exec: (read, write). (Set after the pipe is made: a process
/// started from another thread in between inherits both ends.)
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = rustix::pipe::pipe()?;
    for fd in [&read, &write] {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
    }
    Ok((read, write))
}

/// The least a pipe holds before its writer blocks, on every system redlock runs on (macOS
/// starts its pipes at 16 KiB).
const PIPE_HOLDS: usize = 16 * 1024;

/// Whether the pipe whose write end is `fd` holds `len` bytes, so that writing them cannot block
/// while nobody reads yet: an error for a longer text (a pipe's size cannot be set here).
pub fn hold_in_pipe(_fd: BorrowedFd<'_>, len: usize) -> io::Result<()> {
    if len > PIPE_HOLDS {
        return Err(io::Error::other(format!(
            "{len} bytes do not fit in a pipe here ({PIPE_HOLDS} at most)"
        )));
    }
    Ok(())
}

/// A file holding `bytes` that a command started next inherits (not close-on-exec, numbered 3
/// or more): a temporary file made readable by its owner alone (0600 while written, 0400 after)
/// and unlinked at once, so that only a process holding the descriptor reaches it. The
/// descriptor given is opened for reading only, and at the file's start: on macOS `/dev/fd/N`
/// duplicates it, offset included, so a reader of that path starts where it stands (redlock's
/// own reads do not move it: `config.rs`). `name` names the file while it exists.
pub fn password_file(name: &CStr, bytes: &[u8]) -> io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Write;
    let dir = std::env::temp_dir();
    let mut last = None;
    for _ in 0..8 {
        let path = dir.join(format!(
            "{}-{}",
            name.to_string_lossy(),
            uuid::Uuid::new_v4().simple()
        ));
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
        match rustix::fs::open(&path, flags | OFlags::CLOEXEC, Mode::RUSR | Mode::WUSR) {
            Ok(write) => {
                let read = rustix::fs::open(
                    &path,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                );
                let unlinked = std::fs::remove_file(&path);
                let read = read?;
                unlinked?;
                // (The very file made above: nobody put another in its place meanwhile.)
                let (w, r) = (rustix::fs::fstat(&write)?, rustix::fs::fstat(&read)?);
                if (w.st_dev, w.st_ino) != (r.st_dev, r.st_ino) {
                    return Err(io::Error::other("the password file was replaced"));
                }
                let read = at_least_3(read)?;
                let mut file = std::fs::File::from(write);
                file.write_all(bytes)?;
                rustix::fs::fchmod(&file, Mode::RUSR)?;
                return Ok(read);
            }
            Err(rustix::io::Errno::EXIST) => last = Some(rustix::io::Errno::EXIST),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.unwrap_or(rustix::io::Errno::EXIST).into())
}

/// `fd` numbered 3 or more, and inherited by a command started next (not close-on-exec).
fn at_least_3(fd: OwnedFd) -> io::Result<OwnedFd> {
    let fd = if fd.as_raw_fd() < 3 {
        // The low one closes when the first `fd` drops.
        rustix::io::fcntl_dupfd_cloexec(&fd, 3)?
    } else {
        fd
    };
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::empty())?;
    Ok(fd)
}

/// Where a process lists its open descriptors (for [`super::take_inherited`]).
pub const FD_DIR: &str = "/dev/fd";

/// Closes the descriptors `from..=to`, one by one up to a bound. Async-signal-safe.
///
/// # Safety
/// Nothing may use those descriptors afterwards: for a forked child that drops what it
/// inherited.
pub unsafe fn close_range(from: RawFd, to: RawFd) {
    for fd in from..=to.min(4095) {
        // SAFETY: the caller owns the range; close touches no memory.
        unsafe {
            libc::close(fd);
        }
    }
}

/// There is no child subreaper here: an orphan goes to init. What the command leaves in our
/// process group is found by [`children`] all the same.
pub fn adopt_orphans() -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no child subreaper on this system: only what stays in redlock's process group is found",
    ))
}

/// The pids of the living children of `me`, and of the living members of its process group
/// when `me` leads it (what the command left there: its orphans are init's), `except` and
/// `me` left out. A member that our own parent started beside us (the `tee` of `redlock exec
/// ... | tee log`, in a shell with job control) is not the command's: it is left out.
pub fn children(me: i32, except: i32) -> Vec<i32> {
    let table = processes();
    let Some(parent) = table.iter().find(|p| p.pid == me).map(|p| p.ppid) else {
        return Vec::new();
    };
    let leads = table.iter().any(|p| p.pid == me && p.pgrp == me);
    let parents: std::collections::HashMap<i32, i32> =
        table.iter().map(|p| (p.pid, p.ppid)).collect();
    table
        .iter()
        .filter(|p| p.pid != me && p.pid != except && p.living())
        .filter(|p| p.ppid == me || (leads && p.pgrp == me && ours(p.pid, me, parent, &parents)))
        .map(|p| p.pid)
        .collect()
}

/// Whether the member `pid` of our process group is the command's: it descends from `me`, or
/// its line of parents ends (an orphan: init's) without passing through `parent`, ours, which
/// started it beside us. Where our parent is init, every orphan counts as the command's.
fn ours(pid: i32, me: i32, parent: i32, parents: &std::collections::HashMap<i32, i32>) -> bool {
    let mut at = pid;
    // (Bounded: a table read while processes come and go could hold a loop.)
    for _ in 0..parents.len() {
        match parents.get(&at) {
            Some(&up) if up == me => return true,
            Some(&up) if up == parent && parent > 1 => return false,
            Some(&up) if up > 0 && up != at => at = up,
            _ => return true,
        }
    }
    true
}

/// The pids of the children of `me` that are zombies, `except` left out.
pub fn zombie_children(me: i32, except: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|p| p.ppid == me && p.pid != except && !p.living())
        .map(|p| p.pid)
        .collect()
}

/// Without a parent-death signal there is none to clear: a change of credentials matters
/// only to the watchdog, which `exec` starts with every command here.
pub fn credentials_changed(_pid: i32) -> Option<String> {
    None
}

/// `ps` with `args`, in the C locale: its output, and the pid of the `ps` that wrote it (which
/// lists itself, a child of ours that has ended and been reaped by now: never to be taken for
/// a process of the table, let alone signalled); `None` when it could not run or failed.
fn ps(args: &[&str]) -> Option<(String, i32)> {
    let program = if std::path::Path::new("/bin/ps").exists() {
        "/bin/ps"
    } else {
        "ps"
    };
    let child = Command::new(program)
        .args(args)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let own = i32::try_from(child.id()).unwrap_or(0);
    let out = child.wait_with_output().ok()?;
    // (`ps -p PID` exits 1 when there is no such process.)
    out.status
        .success()
        .then(|| (String::from_utf8_lossy(&out.stdout).into_owned(), own))
}

/// The columns [`parse_ps`] reads: the start time last, as it holds spaces.
const COLUMNS: &str = "pid=,ppid=,pgid=,stat=,tty=,lstart=";

/// Every process, as `ps` lists them.
pub fn processes() -> Vec<Proc> {
    ps(&["-A", "-o", COLUMNS])
        .map(|(out, own)| {
            out.lines()
                .filter_map(|l| parse_ps(l).map(|(p, _)| p))
                .filter(|p| p.pid != own)
                .collect()
        })
        .unwrap_or_default()
}

/// Process `pid`, if there is one.
pub fn process(pid: i32) -> Option<Proc> {
    process_and_tty(pid).map(|(p, _)| p)
}

fn process_and_tty(pid: i32) -> Option<(Proc, bool)> {
    let pid = pid.to_string();
    let (out, _) = ps(&["-p", &pid, "-o", COLUMNS])?;
    out.lines().find_map(parse_ps)
}

/// One line of `ps -o pid=,ppid=,pgid=,stat=,tty=,lstart=`, and whether the process has a
/// controlling terminal (`?` or `??` for none). The start time, `Mon Apr 14 10:00:00 2026`,
/// becomes a count of seconds; a zombie may have none (0).
fn parse_ps(line: &str) -> Option<(Proc, bool)> {
    let mut fields = line.split_whitespace();
    let mut number = || fields.next()?.parse::<i32>().ok();
    let (pid, ppid, pgrp) = (number()?, number()?, number()?);
    let stat = fields.next()?;
    let state = stat.chars().next()?;
    let tty = fields.next()?;
    let rest: Vec<&str> = fields.collect();
    Some((
        Proc {
            pid,
            state,
            ppid,
            pgrp,
            // `l`: more than one thread (Linux's ps says so; macOS's has no such flag), so
            // that a process whose main thread exited while others run is not taken for a
            // zombie.
            threads: if stat.contains('l') { 2 } else { 1 },
            start: start_seconds(&rest).unwrap_or(0),
        },
        !tty.chars().all(|c| c == '?'),
    ))
}

/// `ps`'s `lstart` (`Mon Apr 14 10:00:00 2026`, in the C locale) as a number that grows with the
/// time (not seconds since an epoch: only compared for equality).
fn start_seconds(words: &[&str]) -> Option<u64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let [_, month, day, time, year] = words else {
        return None;
    };
    let month = MONTHS.iter().position(|m| m == month)? as u64;
    let day: u64 = day.parse().ok()?;
    let year: u64 = year.parse().ok()?;
    let mut hms = time.split(':').map(|n| n.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    Some(((((year * 12 + month) * 31 + day) * 24 + h) * 60 + m) * 60 + s)
}

/// Whether `pid` leads a session that has a controlling terminal (`getsid`, and `ps`'s tty).
pub fn session_with_terminal(pid: i32) -> bool {
    // SAFETY: getsid takes a number and has no memory-safety preconditions.
    let sid = unsafe { libc::getsid(pid) };
    sid == pid && process_and_tty(pid).is_some_and(|(_, tty)| tty)
}

/// The command line of process `pid`, as one line (`ps -o args=`), or `None` where unreadable.
pub fn command_line(pid: i32) -> Option<Vec<String>> {
    let (out, _) = ps(&["-p", &pid.to_string(), "-o", "args="])?;
    let line = out.lines().next()?.trim();
    Some(vec![line.to_string()])
}

/// Every process's command line, as [`command_line`] gives them.
pub fn command_lines() -> Vec<(i32, Vec<String>)> {
    let Some((out, own)) = ps(&["-A", "-o", "pid=,args="]) else {
        return Vec::new();
    };
    out.lines()
        .filter_map(|l| {
            let (pid, args) = l.trim_start().split_once(' ')?;
            Some((pid.parse().ok()?, vec![args.trim().to_string()]))
        })
        .filter(|(pid, _)| *pid != own)
        .collect()
}

/// No pid namespace is recorded here: `status` cannot tell whether a holder is gone.
pub fn pid_namespace() -> Option<String> {
    None
}

/// Whose descriptors are open on what cannot be read here: never known.
pub fn one_reads(_pids: &[i32], _dev: u64, _ino: u64) -> bool {
    false
}

/// Whose descriptors are open on what cannot be read here: `None`, never known.
pub fn holds_file(_pid: i32, _fd: i32, _dev: u64, _ino: u64) -> Option<bool> {
    None
}

/// Our own binary, to run again (its path when we started: a binary replaced since runs anew).
pub fn own_binary() -> io::Result<PathBuf> {
    std::env::current_exe()
}

/// No abstract socket here: a keeper does not listen, and hears of a release from Redis.
pub fn socket_address(_name: &str) -> io::Result<std::os::unix::net::SocketAddr> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no abstract unix sockets on this system",
    ))
}

/// Never asked: no socket is made (see [`socket_address`]).
pub fn peer_uid(_stream: &std::os::unix::net::UnixStream) -> Option<u32> {
    None
}

/// Signals as they arrive; whether a terminal raised one cannot be told here (macOS leaves its
/// `si_code` at 0), so none is taken for a terminal's.
pub struct Signals(signal_hook::iterator::Signals);

impl Signals {
    /// Installs the handlers for `signals`.
    pub fn new(signals: &[i32]) -> io::Result<Signals> {
        signal_hook::iterator::Signals::new(signals).map(Signals)
    }

    /// Each signal as it arrives: its number, and false.
    pub fn forever(&mut self) -> impl Iterator<Item = (i32, bool)> + '_ {
        self.0.forever().map(|signo| (signo, false))
    }
}

/// Starts the command of `plan` with `posix_spawn`, stdio inherited, the signals of `reset` at
/// their defaults and none blocked. Nothing ties it to our life here: see `DEATH_SIGNAL`.
pub fn start(plan: &Plan<'_>) -> Result<i32, StartFailed> {
    let nul_terminated = |v: &[std::ffi::CString]| {
        let mut p: Vec<*mut libc::c_char> = v.iter().map(|s| s.as_ptr().cast_mut()).collect();
        p.push(std::ptr::null_mut());
        p
    };
    let (argv, sh_argv, envp) = (
        nul_terminated(plan.argv),
        nul_terminated(plan.sh_argv),
        nul_terminated(plan.envp),
    );
    // SAFETY: the attribute and the signal sets are initialised before use and destroyed after;
    // posix_spawn reads the NUL-terminated arrays, whose strings `plan` keeps alive, and writes
    // only `pid`.
    unsafe {
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        if libc::posix_spawnattr_init(&mut attr) != 0 {
            return Err(StartFailed::Fork(io::Error::last_os_error()));
        }
        let mut defaults: libc::sigset_t = std::mem::zeroed();
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut defaults);
        libc::sigemptyset(&mut none);
        for &signo in plan.reset {
            libc::sigaddset(&mut defaults, signo);
        }
        let flags = (libc::POSIX_SPAWN_SETSIGDEF | libc::POSIX_SPAWN_SETSIGMASK) as libc::c_short;
        let set = libc::posix_spawnattr_setsigdefault(&mut attr, &defaults) == 0
            && libc::posix_spawnattr_setsigmask(&mut attr, &none) == 0
            && libc::posix_spawnattr_setflags(&mut attr, flags) == 0;
        let mut pid: libc::pid_t = 0;
        let mut rc = if set {
            libc::posix_spawn(
                &mut pid,
                plan.path.as_ptr(),
                std::ptr::null(),
                &attr,
                argv.as_ptr(),
                envp.as_ptr(),
            )
        } else {
            libc::EINVAL
        };
        if rc == libc::ENOEXEC {
            rc = libc::posix_spawn(
                &mut pid,
                sh_argv[0],
                std::ptr::null(),
                &attr,
                sh_argv.as_ptr(),
                envp.as_ptr(),
            );
        }
        libc::posix_spawnattr_destroy(&mut attr);
        match rc {
            0 => Ok(pid),
            libc::EAGAIN | libc::ENOMEM => Err(StartFailed::Fork(io::Error::from_raw_os_error(rc))),
            errno => Err(StartFailed::Exec(errno)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_ps_line_parses_and_its_start_names_a_second() {
        let (p, tty) =
            parse_ps("  4242    17  4242 Ss   ?        Mon Apr 14 10:00:00 2026").unwrap();
        assert_eq!(
            (p.pid, p.ppid, p.pgrp, p.state, tty),
            (4242, 17, 4242, 'S', false)
        );
        let (q, tty) = parse_ps("4242 17 4242 S+ ttys001 Mon Apr 14 10:00:01 2026").unwrap();
        assert!(tty && q.start == p.start + 1, "{q:?}");
        let (q, _) = parse_ps("4242 17 4242 S ?? Tue Apr  1 00:00:00 2026").unwrap();
        assert!(q.start < p.start);
        let (z, _) = parse_ps("77 1 77 Z ?").unwrap();
        assert!(!z.living() && z.start == 0);
        // A main thread that exited while another runs.
        let (z, _) = parse_ps("77 1 77 Zl ? Mon Apr 14 10:00:00 2026").unwrap();
        assert!(z.living());
        assert!(parse_ps("garbage").is_none());
    }

    /// Fails if the table misses a process, its parent or group, or a zombie passes for living.
    #[test]
    fn the_table_and_a_process_end_as_ps_tells_them() {
        let mut child = Command::new("sleep").arg("10").spawn().unwrap();
        let pid = child.id() as i32;
        let me = std::process::id() as i32;
        let listed = processes().into_iter().find(|p| p.pid == pid).unwrap();
        assert_eq!(listed.ppid, me);
        assert!(listed.living() && listed.start > 0);
        assert!(children(me, 0).contains(&pid));
        let watched = Process::open(pid).unwrap();
        assert_eq!(watched.start(), Some(listed.start));
        assert!(!watched.ended());
        watched.signal(0).unwrap();
        watched.signal(libc::SIGKILL).unwrap();
        // A zombie until reaped: ended all the same.
        let waiting = std::thread::spawn({
            let w = watched.clone();
            move || w.wait_ended()
        });
        waiting.join().unwrap().unwrap();
        assert!(watched.ended());
        assert!(zombie_children(me, 0).contains(&pid) || child.try_wait().unwrap().is_some());
        child.wait().unwrap();
        assert_eq!(
            watched.signal(0).unwrap_err().raw_os_error(),
            Some(libc::ESRCH)
        );
        assert!(Process::open(pid).is_err());
    }

    /// A process with another start time is another process, though it has the pid.
    #[test]
    fn another_start_is_another_process() {
        let me = Process::open(std::process::id() as i32).unwrap();
        assert!(!me.ended());
        let other = Process::inherited(me.pid, None, me.start().map(|s| s + 1)).unwrap();
        assert!(other.ended());
        assert!(other.signal(0).is_err());
    }

    /// Fails if the command could write the password, or if a reader of the descriptor as
    /// inherited (macOS's `/dev/fd/N` duplicates it, offset included) does not read it from the
    /// start: found by review (the offset stood at the end, and the descriptor could write).
    #[test]
    fn a_password_file_is_unlinked_private_read_only_and_inherited() {
        let fd = password_file(c"redlock-test", b"secret").unwrap();
        assert!(fd.as_raw_fd() >= 3);
        assert!(rustix::io::fcntl_getfd(&fd).unwrap().is_empty());
        let st = rustix::fs::fstat(&fd).unwrap();
        assert_eq!(st.st_nlink, 0);
        assert_eq!(st.st_mode & 0o777, 0o400);
        let mut file = std::fs::File::from(fd);
        assert!(std::io::Write::write_all(&mut file, b"x").is_err());
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        assert_eq!(text, "secret");
    }

    #[test]
    fn a_command_line_is_one_line() {
        let mut child = Command::new("sleep").arg("10").spawn().unwrap();
        let pid = child.id() as i32;
        assert_eq!(command_line(pid).unwrap(), ["sleep 10"]);
        assert!(command_lines().contains(&(pid, vec!["sleep 10".to_string()])));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(command_line(pid), None);
    }

    #[test]
    fn a_watched_command_is_signalled_by_pid() {
        let mut child = Command::new("sleep").arg("10").spawn().unwrap();
        let watched = Watched::new(child.id() as i32);
        assert_eq!(watched.exited_within(Duration::ZERO), Some(false));
        watched.signal(Signal::KILL);
        child.wait().unwrap();
        assert_eq!(watched.exited_within(Duration::from_secs(1)), Some(true));
    }

    /// Fails if a member of our group that our parent started beside us counts as ours, or an
    /// orphan of the command or its descendant does not.
    #[test]
    fn a_group_member_is_ours_unless_our_parent_started_it() {
        // 1 init, 10 our parent (a shell), 20 us, 21 the command, 22 its child, 30 a `tee`
        // beside us, 31 its child, 40 an orphan of the command, 41 its child.
        let parents: std::collections::HashMap<i32, i32> = [
            (1, 0),
            (10, 1),
            (20, 10),
            (21, 20),
            (22, 21),
            (30, 10),
            (31, 30),
            (40, 1),
            (41, 40),
        ]
        .into();
        let ours = |pid| ours(pid, 20, 10, &parents);
        assert!(ours(21) && ours(22) && ours(40) && ours(41));
        assert!(!ours(30) && !ours(31));
        // Started by init: every orphan in the group is the command's.
        assert!(super::ours(30, 20, 1, &[(30, 1)].into()));
    }

    #[test]
    fn a_long_text_does_not_fit_in_a_pipe() {
        let (_r, w) = pipe().unwrap();
        use std::os::fd::AsFd;
        hold_in_pipe(w.as_fd(), 4096).unwrap();
        assert!(hold_in_pipe(w.as_fd(), 1 << 20).is_err());
    }
}
