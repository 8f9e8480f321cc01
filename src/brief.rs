//! What `acquire --while-pid` and its keeper agree on, and starting one: the [`Brief`] acquire
//! hands the keeper on its stdin, the [`Pid`] it watches (through a pidfd on Linux), the
//! readiness pipe on which the keeper says it runs (or why not) and acquire's word that the
//! token was printed, and the keeper's start-up ([`start`] in acquire, [`detach`] in the keeper). `commands` (acquire)
//! and `keeper` both use it, and neither imports the other.
//!
//! Invariants: acquire prints the token only once the keeper said it runs ([`RUNNING`] on the
//! readiness pipe); the keeper keeps the lock only once acquire's word came ([`awaited_word`]),
//! and gives it back otherwise. The keeper is a re-exec of our own binary, never a fork without
//! exec (acquire has threads), and inherits exactly two descriptors: the pidfd and the pipe's
//! write end (on macOS the pipe's alone: the brief names the pid by its start time instead;
//! [`Brief::read`] closes every other one). The brief is in the keeper's stdin before
//! the keeper exists: an acquire killed at any moment leaves a keeper that knows its lock (and
//! gives it back), never one that read half a brief. See `keeper.rs` for why and how it keeps
//! the lock.
//!
//! Layer 8 of the list in `lib.rs`.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::cli::PidOnLost;
use crate::config::Config;
use crate::error::{Kind, exit_code, failure, usage};
use crate::lock::{Keys, Lock, Slot};
use crate::messages;
use crate::os;
use crate::output::human_ms;
use crate::platform;
use crate::work;

/// The keeper's `argv[0]`, by which `main` knows it (`ps` shows `redlock-keeper --pid PID -- KEY`).
pub const ARGV0: &str = work::KEEPER_ARGV0;

/// How long `acquire` waits for the keeper's word, beyond the connection it makes (a process
/// start and a pipe read take milliseconds; a machine that slow would not renew in time anyway).
pub const READY_GRACE: Duration = Duration::from_secs(5);

/// The byte the keeper sends once it runs (anything else is the exit status of its error).
pub const RUNNING: u8 = 0;

/// Warns (one line, on acquire's stderr) when the keeper cannot know all the work `pid` starts:
/// `pid` does not lead its process group, so its descendants are what scans of the process table find.
/// Also when `pid` is an interactive shell (it leads a session with a terminal): its jobs have
/// groups of their own, and a loss or preemption stops the operator's shell itself.
pub fn warn_unless_group(config: &Config, pid: i32) {
    if work::is_interactive_shell(pid) {
        messages::warning(
            config,
            format_args!(
                "--while-pid {pid} is an interactive shell: its jobs have process groups of \
                 their own, so the keeper covers them only as the descendants it finds every {}, \
                 best effort; on a loss or preemption the shell itself gets SIGTERM, then \
                 SIGKILL after --kill-after (take the lock inside a script instead)",
                human_ms(work::SCAN_EVERY)
            ),
        );
        return;
    }
    if work::leads_its_group(pid) {
        return;
    }
    messages::warning(
        config,
        format_args!(
            "--while-pid {pid} does not lead its process group, so the keeper cannot know all the \
             work it starts: it waits for and stops the descendants of pid {pid} it finds every \
             {}, best effort (one started and orphaned in between is missed); start the script \
             as a group leader (setsid SCRIPT) for the full guarantee",
            human_ms(work::SCAN_EVERY)
        ),
    );
}

/// A process watched through a pidfd (`--while-pid`; its pid and start time on macOS).
pub struct Pid {
    pub pid: i32,
    fd: platform::Process,
}

impl Pid {
    /// Opens a pidfd for `pid`. No such process is a usage error, as is one we could not signal
    /// when `on_lost` would have to.
    pub fn open(pid: i32, on_lost: PidOnLost) -> Result<Pid> {
        let watched = match platform::Process::open(pid) {
            Ok(fd) => Pid { pid, fd },
            Err(e) => {
                return Err(match e.raw_os_error() {
                    Some(libc::ESRCH) => usage(format!("--while-pid {pid}: no such process")),
                    Some(libc::ENOSYS) => {
                        usage("--while-pid needs Linux 5.3 or later (pidfd_open)")
                    }
                    Some(libc::ENOENT | libc::EINVAL) => usage(format!(
                        "--while-pid {pid}: not a process (a thread's id?), or cannot be watched: \
                         {e}"
                    )),
                    _ => usage(format!("--while-pid {pid}: cannot watch the process: {e}")),
                });
            }
        };
        if watched.ended() {
            return Err(usage(format!(
                "--while-pid {pid}: the process has ended (a zombie nobody reaped yet)"
            )));
        }
        if on_lost != PidOnLost::Ignore
            && let Err(e) = watched.signal(0)
        {
            return Err(usage(format!(
                "--while-pid {pid}: cannot signal the process ({e}), as --on-lost would have to; \
                 with --on-lost ignore the keeper only warns"
            )));
        }
        Ok(watched)
    }

    /// Whether the process has ended (its pidfd is readable then, zombie or reaped).
    pub fn ended(&self) -> bool {
        self.fd.ended()
    }

    /// Sends `signo` to the process (0: only checks that we may), never to a later holder of its
    /// pid.
    pub fn signal(&self, signo: i32) -> std::io::Result<()> {
        self.fd.signal(signo)
    }

    /// Sends `ended` on `tx` once the process has ended (a pidfd becomes readable then, zombie
    /// or reaped), from a thread of its own.
    pub fn watch<T: Send + 'static>(&self, tx: Sender<T>, ended: T) -> Result<()> {
        let fd = self.fd.try_clone().context("cannot duplicate the pidfd")?;
        std::thread::Builder::new()
            .name("pid".into())
            .spawn(move || {
                if fd.wait_ended().is_err() {
                    // Cannot poll (never seen): ask the process itself, once a second.
                    while fd.signal(0).is_ok() {
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
                let _ = tx.send(ended);
            })
            .context("cannot start the thread that watches the pid")?;
        Ok(())
    }

    /// Makes the pidfd close-on-exec (the keeper inherited it, so it is not): nothing the keeper
    /// might start should hold it.
    pub fn set_cloexec(&self) {
        self.fd.set_cloexec();
    }
}

/// What `acquire` tells the keeper, as JSON on its stdin.
#[derive(Debug, Serialize, Deserialize)]
pub struct Brief {
    /// acquire's command line, program name first.
    pub args: Vec<String>,
    token: String,
    fence: i64,
    acquired_ms: i64,
    ttl_ns: u64,
    drift_ns: u64,
    /// When the winning attempt was sent, on CLOCK_MONOTONIC (nanoseconds).
    sent_ns: u64,
    run_ids: Vec<Option<String>>,
    slot: Option<u32>,
    resource: Option<String>,
    pid: i32,
    /// The inherited pidfd for `pid` (none on macOS), and the write end of the readiness pipe.
    pidfd: Option<RawFd>,
    /// When `pid` started, where that names it (macOS: see `platform::Process`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started: Option<u64>,
    ready: RawFd,
    /// The password acquire resolved, if any: the keeper cannot read a `--password-file` again
    /// when it was a pipe (`<(vault read ...)`). On this private pipe only, never in argv.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The pidfd (if any) and the pipe's write end, once [`Brief::read`] took them.
    #[serde(skip)]
    inherited: Option<(Option<OwnedFd>, OwnedFd)>,
}

impl Brief {
    /// The brief for the keeper of `lock` for `pid`, whose readiness pipe's write end is
    /// `ready`: our own command line (UTF-8 only), the lock, the password we resolved.
    fn of(config: &Config, lock: &Lock, pid: &Pid, ready: RawFd) -> Result<Brief> {
        let args = std::env::args_os()
            .map(|a| a.into_string())
            .collect::<Result<Vec<String>, _>>()
            .map_err(|_| {
                usage("--while-pid: the command line is not UTF-8, so the keeper cannot be told it")
            })?;
        let sent_ns = os::monotonic_ns()
            .saturating_sub(u64::try_from(lock.sent.elapsed().as_nanos()).unwrap_or(u64::MAX));
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Ok(Brief {
            args,
            token: lock.token.clone(),
            fence: lock.fence,
            acquired_ms: lock.acquired_ms,
            ttl_ns: ns(lock.ttl),
            drift_ns: ns(lock.drift),
            sent_ns,
            run_ids: lock.run_ids.clone(),
            slot: lock.slot.as_ref().map(|s| s.index),
            resource: lock.slot.as_ref().and_then(|s| s.resource.clone()),
            pid: pid.pid,
            pidfd: pid.fd.inheritable(),
            started: pid.fd.start(),
            ready,
            password: config.for_child.password.clone(),
            inherited: None,
        })
    }

    /// Reads the brief from stdin: one line, and takes the two descriptors it names, closing
    /// every other one the keeper inherited (see [`platform::take_inherited`]). (The pipe stays open:
    /// acquire's word that it printed the token comes on it later, see [`start`].)
    pub fn read() -> Result<Brief> {
        let mut text = Vec::new();
        let mut byte = [0u8; 1];
        // Byte by byte: nothing past the line may be read here (a buffer would swallow it).
        loop {
            match std::io::stdin().lock().read(&mut byte) {
                Ok(0) => break,
                Ok(_) if byte[0] == b'\n' => break,
                Ok(_) => text.push(byte[0]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("cannot read the keeper's brief"),
            }
        }
        let mut brief: Brief = serde_json::from_slice(&text)
            .map_err(|e| usage(format!("the keeper's brief is not one: {e}")))?;
        let mut inherited = platform::take_inherited(&brief.inherited_fds())
            .context("the keeper's brief names descriptors it did not inherit")?;
        let ready = inherited.pop().context("no readiness pipe was inherited")?;
        brief.inherited = Some((inherited.pop(), ready));
        Ok(brief)
    }

    /// The descriptors the keeper inherits: the pidfd (if any), then the pipe's write end.
    fn inherited_fds(&self) -> Vec<RawFd> {
        self.pidfd.into_iter().chain([self.ready]).collect()
    }

    /// The watched pid and the readiness pipe's write end, which [`Brief::read`] took; once.
    pub fn inherited(&mut self) -> Result<(Pid, std::fs::File)> {
        let (pidfd, ready) = self
            .inherited
            .take()
            .context("the keeper's descriptors were taken already")?;
        let fd = platform::Process::inherited(self.pid, pidfd, self.started)
            .context("the keeper's brief names no process")?;
        let pid = Pid { pid: self.pid, fd };
        Ok((pid, std::fs::File::from(ready)))
    }

    /// The lock it describes, `sent` brought onto this process's clock.
    pub fn lock(&self, keys: Keys) -> Lock {
        let age = Duration::from_nanos(os::monotonic_ns().saturating_sub(self.sent_ns));
        let now = Instant::now();
        Lock {
            keys,
            token: self.token.clone(),
            fence: self.fence,
            acquired_ms: self.acquired_ms,
            ttl: Duration::from_nanos(self.ttl_ns),
            sent: now.checked_sub(age).unwrap_or(now),
            // `acquire` extends a grant before it hands the lock to its keeper.
            lease: Duration::from_nanos(self.ttl_ns),
            taken: now.checked_sub(age).unwrap_or(now),
            drift: Duration::from_nanos(self.drift_ns),
            run_ids: self.run_ids.clone(),
            slot: self.slot.map(|index| Slot {
                index,
                resource: self.resource.clone(),
            }),
        }
    }
}

/// A keeper that runs and waits for acquire's word that the token reached its reader: without it
/// (acquire failed to print it, or was killed first), the keeper releases the lock and ends.
pub struct Started {
    word: std::fs::File,
}

impl Started {
    /// The token was printed: the keeper keeps the lock from here on.
    pub fn confirm(mut self) {
        let _ = self.word.write_all(b"1");
    }
}

/// Starts the keeper of `lock` for `pid` and waits until it says it runs. An error leaves no
/// keeper behind (the lock is the caller's to give back).
pub fn start(config: &Config, lock: &Lock, pid: Pid) -> Result<Started> {
    let (ready_r, ready_w) = platform::pipe().context("cannot make the keeper's pipe")?;
    let brief = Brief::of(config, lock, &pid, ready_w.as_raw_fd())?;
    // The brief is in the keeper's stdin before the keeper exists: an acquire killed at any
    // moment after the spawn leaves a keeper that knows its lock (and gives it back when nobody
    // reads its word), never one that reads half a brief and ends with the lock still held.
    let (brief_r, word) = platform::pipe().context("cannot make the keeper's pipe")?;
    let mut word = std::fs::File::from(word);
    let mut text = serde_json::to_vec(&brief)?;
    text.push(b'\n');
    platform::hold_in_pipe(word.as_fd(), text.len())
        .and_then(|()| word.write_all(&text))
        .context("cannot hand the keeper its brief")?;
    let inherited = brief.inherited_fds();
    let own = platform::own_binary().context("cannot find redlock's own binary")?;
    let mut cmd = Command::new(own);
    // The arguments are for `ps` only: what the keeper acts on is in its brief.
    cmd.arg0(ARGV0)
        .args(["--pid", &pid.pid.to_string(), "--", &lock.keys.name])
        .stdin(Stdio::from(brief_r))
        .stdout(Stdio::null())
        .stderr(if stderr_may_stay(pid.pid) {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
    // SAFETY: the closure runs in the child between fork and exec and makes only two system
    // calls (rustix's, async-signal-safe: no allocation, no lock): setsid, and fcntl on the two
    // descriptors, which `pid` and `ready_w` keep open in the parent until the spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
            for &fd in &inherited {
                let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| failure(Kind::Io, format!("cannot start the keeper: {e}")))?;
    // Ours closed, the keeper's end is the only one: its exit reads as EOF.
    drop(ready_w);
    // (Our pidfd, which the keeper has its own of; nothing to close on macOS.)
    #[allow(clippy::drop_non_drop)]
    drop(pid);
    let bound = config.io_timeout * 4 + READY_GRACE;
    match await_ready(ready_r, bound) {
        Ok(()) => Ok(Started { word }),
        Err(e) => {
            // Our own child: gone before the lock is given back.
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// Waits up to `bound` for the keeper's byte on `ready`.
fn await_ready(ready: OwnedFd, bound: Duration) -> Result<()> {
    match byte_within(ready, bound) {
        Heard::Byte(RUNNING) => Ok(()),
        Heard::Byte(code) => Err(failure(
            kind_of_code(code),
            "the keeper could not start (its error is above, unless stderr is stdout)",
        )),
        Heard::Closed => Err(failure(
            Kind::Io,
            "the keeper ended before it ran (its error is above, unless stderr is stdout)",
        )),
        Heard::TimedOut => Err(failure(
            Kind::Unavailable,
            format!("the keeper did not say it runs within {}", human_ms(bound)),
        )),
    }
}

/// What [`byte_within`] heard on a pipe.
enum Heard {
    Byte(u8),
    /// The other end closed (or the pipe failed) with nothing said.
    Closed,
    TimedOut,
}

/// Waits up to `bound` for one byte on the pipe `fd` (the two words acquire and its keeper say to
/// each other: [`await_ready`], [`awaited_word`]).
fn byte_within(fd: OwnedFd, bound: Duration) -> Heard {
    // An error: the read below says what it is.
    if matches!(os::readable_within(fd.as_fd(), Some(bound)), Ok(false)) {
        return Heard::TimedOut;
    }
    let mut byte = [0u8; 1];
    match std::fs::File::from(fd).read(&mut byte) {
        Ok(1) => Heard::Byte(byte[0]),
        _ => Heard::Closed,
    }
}

/// The error kind behind an exit status the keeper sent, so that acquire exits the same way.
fn kind_of_code(code: u8) -> Kind {
    [
        Kind::Usage,
        Kind::Unavailable,
        Kind::Auth,
        Kind::Protocol,
        Kind::NotOwner,
    ]
    .into_iter()
    .find(|&k| exit_code(&failure(k, "")) == code)
    .unwrap_or(Kind::Io)
}

/// Whether the keeper may keep acquire's stderr for its warnings: a terminal, a file or
/// /dev/null; a pipe, FIFO or socket only if it is PID's own stderr too. Someone may wait for a
/// pipe to close (a `$(... 2>&1)` capture, `2>&1 | tee`, a capture of the block around the
/// acquire), and the keeper holds it as long as PID lives, and PID is often the shell that
/// waits; a pipe PID holds itself (a CI job's log, the script's own stderr) closes no later
/// with the keeper on it. (A loss is also told to the lock's history.)
fn stderr_may_stay(pid: i32) -> bool {
    use rustix::fs::FileType;
    let Ok(ours) = os::file_id(std::io::stderr()) else {
        return false;
    };
    if matches!(ours.kind, FileType::RegularFile | FileType::CharacterDevice) {
        return true;
    }
    // Where PID's descriptors cannot be read (macOS), a pipe is let go of: a keeper that held
    // one that a process of the work reads (`SCRIPT 2>&1 | tee`) would wait for it for ever.
    platform::holds_file(pid, 2, ours.dev, ours.ino).unwrap_or(false)
}

/// Waits up to `bound` for acquire's word on `word`: true when it came.
pub fn awaited_word(word: OwnedFd, bound: Duration) -> bool {
    matches!(byte_within(word, bound), Heard::Byte(b'1'))
}

/// Leaves the caller's world behind: stdin on /dev/null, `/` as the working directory (no
/// mount kept busy), terminal and pipe signals ignored, SIGTERM back to its default so that the
/// signal thread takes it (an ignored signal stays ignored across exec).
pub fn detach() -> Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .open("/dev/null")
        .context("cannot open /dev/null")?;
    os::set_stdin(&null).context("cannot detach stdin")?;
    os::set_dispositions(
        &[libc::SIGINT, libc::SIGHUP, libc::SIGPIPE],
        &[libc::SIGTERM],
    );
    std::env::set_current_dir("/").context("cannot change to /")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit;

    /// Fails if the clock hand-over moves `sent`: the keeper's deadline would be later than the
    /// lock's.
    #[test]
    fn the_brief_keeps_when_the_lock_was_taken() {
        let sent_ns = os::monotonic_ns() - 2_000_000_000;
        let brief = Brief {
            args: vec![],
            token: "t".into(),
            fence: 1,
            acquired_ms: 0,
            ttl_ns: 3_000_000_000,
            drift_ns: 0,
            sent_ns,
            run_ids: vec![],
            slot: None,
            resource: None,
            pid: 1,
            pidfd: None,
            started: None,
            ready: -1,
            password: None,
            inherited: None,
        };
        let lock = brief.lock(Keys::new("p", "k").unwrap());
        let age = lock.sent.elapsed();
        assert!(
            age >= Duration::from_secs(2) && age < Duration::from_millis(2500),
            "{age:?}"
        );
    }

    /// A pid with no process is refused; our own can be watched and signalled.
    #[test]
    fn a_pid_is_watched_only_while_it_exists() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id() as i32;
        child.wait().unwrap();
        let err = Pid::open(gone, PidOnLost::Term).err().unwrap();
        assert_eq!(exit_code(&err), exit::USAGE);
        assert!(format!("{err:#}").contains("no such process"), "{err:#}");
        let me = Pid::open(std::process::id() as i32, PidOnLost::Term).unwrap();
        me.signal(0).unwrap();
    }

    #[test]
    fn an_exit_status_from_the_keeper_gives_back_its_kind() {
        for kind in [Kind::Usage, Kind::Unavailable, Kind::Auth] {
            let code = exit_code(&failure(kind, ""));
            assert_eq!(kind_of_code(code), kind);
        }
    }
}
