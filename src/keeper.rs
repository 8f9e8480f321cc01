//! `acquire --while-pid PID`: the keeper, a detached process that keeps the lock alive while PID
//! and the work it started run, and releases it once they have all ended; and [`start`], which
//! `acquire` calls to leave one running.
//!
//! Why a re-exec: `acquire` runs its own binary again (`/proc/self/exe`: the very file, even if
//! it was replaced or deleted since) with `argv[0]` [`ARGV0`], rather than forking
//! itself: acquire has threads (the signal thread), and the child of a fork without exec may only
//! call async-signal-safe functions, which a Redis client is not. The keeper's brief comes on a
//! pipe on its stdin ([`Brief`]): acquire's own command line, so that the keeper makes the same
//! `Config` from the same flags and the environment it inherits (so no password is in its argv,
//! nor in its environment unless the user's own environment had it), and the lock (token, fence,
//! TTL, slot, when the winning attempt was sent, on the monotonic clock both processes share).
//! Two descriptors are inherited: a pidfd for PID, opened by acquire before it took the lock (a
//! pid reused after PID ended cannot pass for it: the pidfd names that one process), and the
//! write end of a pipe on which the keeper confirms with one byte that it runs (and listens: it
//! says so once subscribed to the lock's announcements, once refused, or after the connect and
//! I/O timeouts at most, so that a release right after acquire returned is heard), or says with
//! another why it could not start. acquire prints the token only after the confirmation, and
//! gives the lock back otherwise.
//!
//! The keeper leads a session of its own in `/`, with stdin and stdout on /dev/null, so that
//! `T=$(redlock acquire ...)` returns at once; stderr stays for its warnings unless it is the same
//! open file as stdout (`2>&1` inside `$(...)`: the capture would last until PID ends, and PID is
//! the shell waiting for it). It ignores SIGINT, SIGHUP and SIGPIPE (it outlives the terminal
//! and the pipeline it started in); SIGTERM stops PID and its work (below) and releases the lock
//! once they have ended. Being a session leader, it is never in PID's process group.
//!
//! PID's work ([`Work`], `work.rs`): PID's process group when PID leads it (cron, CI runners,
//! `setsid` and terminals start a script so; a non-interactive script's steps and background jobs
//! stay in it), and PID's descendants as scans of /proc every 500 ms find them (remembered by pid
//! and start time once seen): for a group, those catch the steps that leave it (`timeout`, `set
//! -m` jobs); without a group they are all the keeper knows, best effort (a process started and
//! orphaned between two scans is missed), which `acquire` says in a one-line warning, pointing
//! to `setsid`. An interactive shell as PID (it leads a session with a terminal) is warned of
//! too: its jobs have groups of their own, so they are covered only as descendants, and a loss
//! or preemption stops the shell itself (SIGTERM, which it ignores, then SIGKILL after
//! `--kill-after`): the keeper does what the user asked, and says so at `acquire` time. A process
//! whose main thread has exited while other threads run is work, not a zombie. Measured: a scan
//! costs about 4.5 µs of CPU time per process (2 ms for 450), so 0.4 % of a core at that period,
//! while PID lives; once PID has ended, a look is one `kill(-pgid, 0)` (20 ms, doubling up to
//! 250 ms) when no descendant is left outside the group, else a scan. The `acquire` process is in
//! the group and a descendant, but has exited (or is a zombie, which counts as ended) before the
//! keeper acts: it is confirmed only once the token is printed.
//!
//! Once PID has ended, a pipe or FIFO the keeper kept on its stderr (PID's own) is let go of
//! when a process left of the work reads it: the reader of `SCRIPT 2>&1 | tee`, in PID's group
//! under job control, waits for its end. Read by someone else (a CI log), it stays for the
//! keeper's later warnings.
//!
//! One loop decides everything, a small cousin of exec's supervisor. It blocks on one channel for
//! PID's end (a thread polls the pidfd), the lock's announcements (`notify::listen`: the owner's
//! release, a forced release, a preemption), the owner's word on this host and SIGTERM, with a
//! timeout at the next renewal (every TTL/3, on the loop's own connection) or at the lock's
//! deadline (`sent + TTL` of the last successful renewal), and, when due, at the next look at
//! PID's work, scan for its descendants, or SIGKILL after `--kill-after`. Invariants:
//! - The lock is released only once PID and its work have ended (no living member: zombies have
//!   ended), whatever ended PID; until then it stays ours, renewed. PID ending on its own (a
//!   normal exit, `kill -9`, the OOM killer) with members left is said, and they are not
//!   stopped: the keeper waits for them.
//! - PID and its work are acted on (`--on-lost`) only once the lock is known lost or preempted,
//!   or the keeper got SIGTERM, and once: `term` sends SIGTERM to the group PID leads, if it
//!   does, and to each descendant found outside it (found by a scan made just before, while
//!   they can still be traced to PID), then SIGKILL after `--kill-after` (or at a second
//!   SIGTERM to the keeper) if any still runs (as `exec`); `kill` sends SIGKILL. A group PID
//!   does not lead is never signalled (it may be a CI runner's).
//! - `--on-lost ignore` (the user chose that PID never be stopped): a loss only warns; a
//!   preemption keeps the lock until PID and its work end on their own; SIGTERM to the keeper
//!   releases the lock at once, and says that PID runs on without it.
//! - After a loss there is no lock to keep: the keeper still escalates its SIGTERM to SIGKILL
//!   after `--kill-after`, then ends.
//! - Only positive evidence ends the keeper quietly: the owner's release, marked
//!   (`mark_released` in `common.lua`, for a kept lock or a kept place: a renewal that finds the
//!   mark answers [`Verdict::Released`] and takes it away). An announced release only makes
//!   the keeper renew at once. A lock gone for any other reason (a restart, a flush, an
//!   eviction, a forced release, another holder) is a loss: PID is acted on and the history
//!   told. The mark lasts the lock's TTL and 2 s: as long as the keeper may still renew after a
//!   release (until its deadline, a TTL after its last renewal, which came before the release).
//!   The owner's `release` also tells the keeper on the same host directly (`tell.rs`: an
//!   abstract unix socket, a peer of our uid or root only); once it has, a loss found later (the
//!   mark gone with a restart, the deadline passed in a stall) is that release's, a quiet end.
//!   The keeper's own release (PID and its work ended) finds an owner's release it had not heard
//!   of by the same mark (answered [`Verdict::Released`], a quiet end), and leaves no mark of its
//!   own ([`crate::lock::Releaser::keeper`]: nobody is left to read one; a kept place's marker
//!   goes too).
//! - Once the keeper has started to stop PID's work while the lock is ours (a preemption, its
//!   SIGTERM), the owner's release does not hand the lock on: before any signal the keeper records
//!   in Redis that it stops the work ([`Keeper::mark_stopping`]: a plain lock's meta, on every
//!   node of a quorum; a kept place's marker), and `release.lua` (`slots_release.lua`) then only notes that the owner asked, answering
//!   [`Verdict::Deferred`] (a bash EXIT trap runs the release at once on SIGTERM, while the
//!   foreground step runs on). The keeper goes on escalating to SIGKILL, and releases once the
//!   work has ended.
//! - An announcement acts only once one read of the lock's keys bears it out (see `notify.rs`):
//!   anyone who may PUBLISH can send one.
//! - Preempted, the lock stays ours, renewed, until PID and its work have ended; the release
//!   then hands it to the preemptor, who queued first.
//!
//! Over every store: renewals and releases go through [`Store`]; announcements come from the
//! server that keeps the lock's channel. On a quorum (several --url) that is the first URL only:
//! a release announced nowhere else is found by the next renewal instead, within TTL/3.
//!
//! Its parts: `keeper/stop.rs` (acting on PID's work and waiting for it to end) and
//! `keeper/end.rs` (the loss, the abandon, the release). The renewal is the one all holders
//! share (`renew.rs`).
//!
//! Layer 12 of the list in `lib.rs`.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::backend;
use crate::cli::{AcquireArgs, PidOnLost};
use crate::config::Config;
use crate::error::{Kind, exit_code, failure, usage};
use crate::events::Event;
use crate::exit;
use crate::lock::{self, Keys, Lock, Slot, Verdict};
use crate::messages;
use crate::notify;
use crate::output::human_ms;
use crate::renew::{Renewal, Renewed};
use crate::signals::{self, Signal};
use crate::store::{Store, loss_reason};
use crate::tell;
use crate::work::{self, Work};

mod end;
mod stop;

use stop::Drain;

/// The keeper's `argv[0]`, by which `main` knows it (`ps` shows `redlock-keeper --pid PID -- KEY`).
pub const ARGV0: &str = work::KEEPER_ARGV0;

/// How long `acquire` waits for the keeper's word, beyond the connection it makes (a process
/// start and a pipe read take milliseconds; a machine that slow would not renew in time anyway).
const READY_GRACE: Duration = Duration::from_secs(5);

/// The byte the keeper sends once it runs (anything else is the exit status of its error).
const RUNNING: u8 = 0;

/// Warns (one line, on acquire's stderr) when the keeper cannot know all the work `pid` starts:
/// `pid` does not lead its process group, so its descendants are what scans of /proc find.
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

/// A process watched through a pidfd (`--while-pid`).
pub struct Pid {
    pid: i32,
    fd: OwnedFd,
}

impl Pid {
    /// Opens a pidfd for `pid`. No such process is a usage error, as is one we could not signal
    /// when `on_lost` would have to.
    pub fn open(pid: i32, on_lost: PidOnLost) -> Result<Pid> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor (close-on-exec)
        // or -1; it touches no memory of ours.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if raw == -1 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ESRCH) => usage(format!("--while-pid {pid}: no such process")),
                Some(libc::ENOSYS) => usage("--while-pid needs Linux 5.3 or later (pidfd_open)"),
                Some(libc::ENOENT | libc::EINVAL) => usage(format!(
                    "--while-pid {pid}: not a process (a thread's id?), or cannot be watched: {e}"
                )),
                _ => usage(format!("--while-pid {pid}: cannot watch the process: {e}")),
            });
        }
        let fd = RawFd::try_from(raw).context("pidfd_open returned no descriptor")?;
        // SAFETY: a descriptor pidfd_open just returned, owned by nobody else.
        let watched = Pid {
            pid,
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
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
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd that we own, no wait; poll only writes `revents`.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    /// Sends `signo` to the process (0: only checks that we may), never to a later holder of its
    /// pid.
    fn signal(&self, signo: i32) -> std::io::Result<()> {
        // SAFETY: pidfd_send_signal on our pidfd, with no siginfo and no flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                signo,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if rc == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Sends [`Wake::PidEnded`] on `tx` once the process has ended (a pidfd becomes readable
    /// then, zombie or reaped), from a thread of its own.
    fn watch(&self, tx: Sender<Wake>) -> Result<()> {
        let fd = self.fd.try_clone().context("cannot duplicate the pidfd")?;
        std::thread::Builder::new()
            .name("pid".into())
            .spawn(move || {
                let watched = Pid { pid: 0, fd };
                loop {
                    let mut p = libc::pollfd {
                        fd: watched.fd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd that we own; poll only writes `revents`.
                    let n = unsafe { libc::poll(&mut p, 1, -1) };
                    if n == 1 {
                        break;
                    }
                    if n == -1
                        && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
                    {
                        // Cannot poll (never seen): ask the process itself, once a second.
                        while watched.signal(0).is_ok() {
                            std::thread::sleep(Duration::from_secs(1));
                        }
                        break;
                    }
                }
                let _ = tx.send(Wake::PidEnded);
            })
            .context("cannot start the thread that watches the pid")?;
        Ok(())
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
    /// The inherited pidfd for `pid`, and the write end of the readiness pipe.
    pub pidfd: RawFd,
    pub ready: RawFd,
    /// The password acquire resolved, if any: the keeper cannot read a `--password-file` again
    /// when it was a pipe (`<(vault read ...)`). On this private pipe only, never in argv.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

impl Brief {
    /// Reads the brief from stdin: one line. (The pipe stays open: acquire's word that it
    /// printed the token comes on it later, see [`start`].)
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
        serde_json::from_slice(&text)
            .map_err(|e| usage(format!("the keeper's brief is not one: {e}")))
    }

    /// The lock it describes, `sent` brought onto this process's clock.
    fn lock(&self, keys: Keys) -> Lock {
        let age = Duration::from_nanos(monotonic_ns().saturating_sub(self.sent_ns));
        let now = Instant::now();
        Lock {
            keys,
            token: self.token.clone(),
            fence: self.fence,
            acquired_ms: self.acquired_ms,
            ttl: Duration::from_nanos(self.ttl_ns),
            sent: now.checked_sub(age).unwrap_or(now),
            drift: Duration::from_nanos(self.drift_ns),
            run_ids: self.run_ids.clone(),
            slot: self.slot.map(|index| Slot {
                index,
                resource: self.resource.clone(),
            }),
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on the host (an `Instant` cannot
/// cross a process boundary).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// A keeper that runs and waits for acquire's word that the token reached its reader: without it
/// (acquire failed to print it, or was killed first), the keeper releases the lock and ends.
pub struct Started {
    word: std::process::ChildStdin,
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
    let args = std::env::args_os()
        .map(|a| a.into_string())
        .collect::<Result<Vec<String>, _>>()
        .map_err(|_| {
            usage("--while-pid: the command line is not UTF-8, so the keeper cannot be told it")
        })?;
    let (ready_r, ready_w) = pipe().context("cannot make the keeper's pipe")?;
    let sent_ns = monotonic_ns()
        .saturating_sub(u64::try_from(lock.sent.elapsed().as_nanos()).unwrap_or(u64::MAX));
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let brief = Brief {
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
        pidfd: pid.fd.as_raw_fd(),
        ready: ready_w.as_raw_fd(),
        password: config.for_child.password.clone(),
    };
    let inherited = [brief.pidfd, brief.ready];
    let mut cmd = Command::new("/proc/self/exe");
    // The arguments are for `ps` only: what the keeper acts on is in its brief.
    cmd.arg0(ARGV0)
        .args(["--pid", &pid.pid.to_string(), "--", &lock.keys.name])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(if stderr_may_stay(pid.pid) {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
    // SAFETY: the closure runs in the child between fork and exec and calls only setsid and
    // fcntl, which are async-signal-safe, on descriptors open in the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            for fd in inherited {
                if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| failure(Kind::Io, format!("cannot start the keeper: {e}")))?;
    // Ours closed, the keeper's end is the only one: its exit reads as EOF.
    drop(ready_w);
    drop(pid);
    let told = child
        .stdin
        .take()
        .context("no pipe to the keeper")
        .and_then(|mut stdin| {
            let mut text = serde_json::to_vec(&brief)?;
            text.push(b'\n');
            stdin
                .write_all(&text)
                .context("cannot hand the keeper its brief")?;
            Ok(stdin)
        });
    let confirmed = told.and_then(|stdin| {
        let bound = config.io_timeout * 4 + READY_GRACE;
        await_ready(ready_r, bound)?;
        Ok(stdin)
    });
    match confirmed {
        Ok(word) => Ok(Started { word }),
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
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let deadline = Instant::now() + bound;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd that we own; poll only writes `revents`.
        match unsafe { libc::poll(&mut p, 1, ms) } {
            0 => return Heard::TimedOut,
            -1 if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => break,
        }
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

/// A pipe, both ends close-on-exec.
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own, or fails.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: two new descriptors, owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Whether the keeper may keep acquire's stderr for its warnings: a terminal, a file or
/// /dev/null; a pipe, FIFO or socket only if it is PID's own stderr too. Someone may wait for a
/// pipe to close (a `$(... 2>&1)` capture, `2>&1 | tee`, a capture of the block around the
/// acquire), and the keeper holds it as long as PID lives, and PID is often the shell that
/// waits; a pipe PID holds itself (a CI job's log, the script's own stderr) closes no later
/// with the keeper on it. (A loss is also told to the lock's history.)
fn stderr_may_stay(pid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: fstat writes into a zeroed struct we own.
    let ours = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(libc::STDERR_FILENO, &mut st) != 0 {
            return false;
        }
        st
    };
    if matches!(ours.st_mode & libc::S_IFMT, libc::S_IFREG | libc::S_IFCHR) {
        return true;
    }
    std::fs::metadata(format!("/proc/{pid}/fd/2"))
        .is_ok_and(|theirs| theirs.dev() == ours.st_dev && theirs.ino() == ours.st_ino)
}

/// Once PID has ended, the keeper lets go of a pipe or FIFO it kept on its stderr (PID's own, see
/// [`stderr_may_stay`]: /dev/null in its place) when one of the processes left (`left`) reads
/// it: that reader (`SCRIPT 2>&1 | tee` under job control puts `tee` in PID's group) waits for
/// the pipe's end, and the keeper would wait for the reader, for ever. A pipe read by someone
/// outside the work (a CI log, a test harness) is kept for the keeper's later warnings. Returns
/// whether it let go. (A loss is also told to the lock's history.)
fn let_go_of_stderr_read_by(left: &[i32]) -> bool {
    // SAFETY: fstat writes into a zeroed struct we own.
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(libc::STDERR_FILENO, &mut st) != 0 {
            return false;
        }
        st
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFIFO || !work::one_reads(left, st.st_dev, st.st_ino) {
        return false;
    }
    let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") else {
        return false;
    };
    // SAFETY: dup2 onto stderr, which we own; `null` is closed when dropped.
    unsafe { libc::dup2(null.as_raw_fd(), libc::STDERR_FILENO) != -1 }
}

/// Closes every descriptor the keeper inherited but `keep` (and stdin, stdout, stderr): a
/// caller's `5>&1`, a file it locked with flock(1) on fd 3, a pipe someone waits on, would
/// otherwise stay open as long as PID lives.
pub fn close_inherited(keep: &[RawFd]) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let open: Vec<RawFd> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open {
        if fd > 2 && !keep.contains(&fd) {
            // SAFETY: closing a descriptor nothing in this process uses yet (the keeper has
            // opened none; the directory's own is closed already, and closing it again fails
            // harmlessly).
            unsafe { libc::close(fd) };
        }
    }
}

/// What the keeper's loop wakes up for.
enum Wake {
    Signal(Signal),
    PidEnded,
    Notice(Event),
    /// The owner's `release` on this host said that it released the lock (see `tell.rs`).
    OwnerSaid,
}

/// How the keeper ends.
enum End {
    /// PID and its work ended (stopped by the keeper after this SIGTERM, if any): release the
    /// lock.
    Release(Option<Signal>),
    /// The owner released it: nothing left to do.
    Released,
    /// The lock was lost, for this reason.
    Lost(String),
}

/// The keeper: keeps the lock of `brief` for its pid, as `args` (acquire's
/// own) say, until the pid ends, the owner releases the lock, or it is lost. Returns the
/// keeper's exit status, which nobody waits for.
pub fn keep(config: &Config, args: &AcquireArgs, brief: Brief) -> Result<u8> {
    // SAFETY: descriptors acquire opened for us and we inherited; nothing else owns them.
    let (pidfd, ready) = unsafe {
        (
            OwnedFd::from_raw_fd(brief.pidfd),
            OwnedFd::from_raw_fd(brief.ready),
        )
    };
    let mut ready = std::fs::File::from(ready);
    let pid = Pid {
        pid: brief.pid,
        fd: pidfd,
    };
    // acquire's word comes on stdin, which `detach` puts on /dev/null: kept aside first.
    // SAFETY: dup of stdin, which we own; the copy is ours.
    let word = unsafe { libc::fcntl(libc::STDIN_FILENO, libc::F_DUPFD_CLOEXEC, 3) };
    let (tx, rx) = mpsc::channel::<Wake>();
    let keeper = match prepare(config, args, &brief, pid, &tx, ready.as_raw_fd()) {
        Ok(keeper) => keeper,
        Err(e) => {
            let _ = ready.write_all(&[exit_code(&e).max(1)]);
            return Err(e);
        }
    };
    let said = ready.write_all(&[RUNNING]);
    drop(ready);
    // acquire prints the token, then says so; if it was killed, or could not print it, nobody
    // has the token: give the lock back at once rather than keep it for PID.
    // SAFETY: `word` is the descriptor dup'd above, or -1 (then there is no word to wait for).
    let word = (word >= 0).then(|| unsafe { OwnedFd::from_raw_fd(word) });
    let bound = config.io_timeout * 4 + READY_GRACE;
    if said.is_err() || !word.is_some_and(|w| awaited_word(w, bound)) {
        return Ok(keeper.abandon());
    }
    Ok(keeper.run(&rx))
}

/// Whether nobody reads the pipe whose write end is `fd` any more (acquire died): a pipe's
/// writer is told so by POLLERR.
fn reader_gone(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd that we own, no wait; poll only writes `revents`.
    unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLERR != 0 }
}

/// Waits up to `bound` for acquire's word on `word`: true when it came.
fn awaited_word(word: OwnedFd, bound: Duration) -> bool {
    matches!(byte_within(word, bound), Heard::Byte(b'1'))
}

/// Everything before the keeper says it runs: detached, the signals, the watchers, a connection.
fn prepare<'a>(
    config: &'a Config,
    args: &AcquireArgs,
    brief: &Brief,
    pid: Pid,
    tx: &Sender<Wake>,
    ready: RawFd,
) -> Result<Keeper<'a>> {
    set_cloexec(pid.fd.as_raw_fd());
    detach()?;
    let keys = lock::Keys::new(&config.prefix, &args.key)?;
    let lock = brief.lock(keys);
    signals::deliver(&[libc::SIGTERM], tx.clone(), Wake::Signal)?;
    pid.watch(tx.clone())?;
    let (events, heard) = mpsc::channel::<Event>();
    let forward = tx.clone();
    std::thread::Builder::new()
        .name("forward".into())
        .spawn(move || {
            for event in heard {
                if forward.send(Wake::Notice(event)).is_err() {
                    return;
                }
            }
        })
        .context("cannot start the keeper's threads")?;
    // A --preemptible holder also reads the lock once it listens: a request made between the
    // acquisition and the subscription was announced to nobody.
    let subscribed = notify::listen(
        config,
        &lock.keys,
        &lock.token,
        events,
        args.lock.preemptible,
    );
    let owner_said = hear_the_owner(config, &lock.token, tx.clone());
    // Before acquire exits: a pid that does not lead its group has its children traced now.
    let work = Work::of(pid.pid);
    let mut store = backend::open(config)?;
    store.track_restarts(&lock.run_ids);
    // "Running" means listening: a release right after acquire returned is heard. Not forever: a
    // user without the channel is refused at once, and a subscription still on its way when
    // the bound passes only makes the release's mark the way the keeper learns of it.
    // Nor longer than acquire waits: killed meanwhile, it has closed the readiness pipe, and the
    // lock whose token nobody received is given back at once (see `keep`).
    let bound = Instant::now() + config.connect_timeout + config.io_timeout;
    let listening = loop {
        match subscribed.settled_within(Duration::from_millis(50)) {
            Some(subscribed) => break subscribed,
            None if reader_gone(ready) || Instant::now() >= bound => break false,
            None => {}
        }
    };
    if !listening {
        messages::log(config, || {
            format!(
                "not subscribed to {}: the keeper learns of a release at its next renewal",
                lock.keys.events()
            )
        });
    }
    Ok(Keeper {
        config,
        on_lost: args.on_lost,
        pid,
        renewal: Renewal::new(&lock),
        lock,
        store: Some(store),
        preempted: false,
        preemptible: args.lock.preemptible,
        next_scan: Some(Instant::now() + work::SCAN_EVERY),
        work,
        kill_after: args.kill_after,
        told: false,
        kill_at: None,
        hurried: false,
        draining: None,
        stopping: false,
        owner_said,
    })
}

/// Listens for the owner's word on this host (see `tell.rs`) on a thread of its own: the flag
/// is set before `release` hears back, and the loop is woken. Without the socket (its name is
/// taken), the keeper learns of a release from Redis alone.
fn hear_the_owner(config: &Config, token: &str, tx: Sender<Wake>) -> Arc<AtomicBool> {
    let said = Arc::new(AtomicBool::new(false));
    let listener = match tell::listen(token) {
        Ok(listener) => listener,
        Err(e) => {
            messages::log(config, || {
                format!("not listening for the owner's word on this host: {e}")
            });
            return said;
        }
    };
    let (flag, token) = (said.clone(), token.to_string());
    let spawned = std::thread::Builder::new()
        .name("tell".into())
        .spawn(move || {
            if tell::await_released(&listener, &token, || flag.store(true, Ordering::SeqCst)) {
                let _ = tx.send(Wake::OwnerSaid);
            }
        });
    if let Err(e) = spawned {
        messages::log(config, || {
            format!("cannot start the thread that hears the owner: {e}")
        });
    }
    said
}

/// Leaves the caller's world behind: stdin on /dev/null, `/` as the working directory (no
/// mount kept busy), terminal and pipe signals ignored, SIGTERM back to its default so that the
/// signal thread takes it (an ignored signal stays ignored across exec).
fn detach() -> Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .open("/dev/null")
        .context("cannot open /dev/null")?;
    // SAFETY: dup2 onto stdin, which we own; signal() with SIG_IGN/SIG_DFL installs no handler.
    unsafe {
        if libc::dup2(null.as_raw_fd(), libc::STDIN_FILENO) == -1 {
            return Err(std::io::Error::last_os_error()).context("cannot detach stdin");
        }
        for signo in [libc::SIGINT, libc::SIGHUP, libc::SIGPIPE] {
            libc::signal(signo, libc::SIG_IGN);
        }
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
    }
    std::env::set_current_dir("/").context("cannot change to /")?;
    Ok(())
}

fn set_cloexec(fd: RawFd) {
    // SAFETY: fcntl on a descriptor we own.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
}

struct Keeper<'a> {
    config: &'a Config,
    on_lost: PidOnLost,
    pid: Pid,
    lock: Lock,
    /// `None` after a connection failed and could not be recovered: opened again at the next
    /// renewal.
    store: Option<Box<dyn Store>>,
    /// When the next renewal is due, and until when the lock is surely ours.
    renewal: Renewal,
    /// A `--preempt` waiter asked for the lock, and PID was acted on.
    preempted: bool,
    /// Taken `--preemptible`: only then is an announced preemption ours to act on.
    preemptible: bool,
    /// What PID started: released only once it has ended too.
    work: Work,
    /// The grace between the keeper's SIGTERM to the work and its SIGKILL (`--kill-after`).
    kill_after: Duration,
    /// The keeper signalled the work (`--on-lost`, on a preemption, a loss or its SIGTERM).
    told: bool,
    /// When the work gets SIGKILL if it still runs (after the keeper's SIGTERM).
    kill_at: Option<Instant>,
    /// A second SIGTERM to the keeper brought the SIGKILL forward.
    hurried: bool,
    /// While PID lives, when to look for its new descendants.
    next_scan: Option<Instant>,
    /// PID has ended, or the keeper stops it: the lock is released once the work has ended.
    draining: Option<Drain>,
    /// The owner's `release` on this host said it released the lock (`tell.rs`): a loss found
    /// from then on is that release's doing (its mark may be gone with a restart, or the keeper's
    /// deadline passed during a stall), and ends the keeper quietly.
    owner_said: Arc<AtomicBool>,
    /// The keeper stops PID's work while the lock is ours: its renewals record so in the lock's
    /// meta (see [`Keeper::mark_stopping`]).
    stopping: bool,
}

/// The store, opened again if the last connection failed.
fn connected<'s>(
    store: &'s mut Option<Box<dyn Store>>,
    config: &Config,
    lock: &Lock,
) -> Result<&'s mut dyn Store> {
    if store.is_none() {
        let mut opened = backend::open(config)?;
        opened.track_restarts(&lock.run_ids);
        *store = Some(opened);
    }
    Ok(store.as_mut().expect("opened above").as_mut())
}

impl Keeper<'_> {
    /// The loop: returns the keeper's exit status.
    fn run(mut self, rx: &Receiver<Wake>) -> u8 {
        let end = loop {
            let now = Instant::now();
            if now >= self.renewal.deadline {
                break End::Lost(self.renewal.ran_out());
            }
            if now >= self.renewal.next {
                match self.renew() {
                    Some(end) => break end,
                    None => continue,
                }
            }
            if self.kill_at.is_some_and(|at| now >= at) {
                self.escalate();
            }
            if let Some(at) = self.next_scan
                && now >= at
            {
                self.work.scan();
                self.next_scan = Some(now + work::SCAN_EVERY);
            }
            if let Some(drain) = &self.draining
                && now >= drain.next_look
            {
                let signal = drain.signal;
                match self.drain(signal) {
                    Some(end) => break end,
                    None => continue,
                }
            }
            let wake = [
                self.kill_at,
                self.next_scan,
                self.draining.as_ref().map(|d| d.next_look),
            ]
            .into_iter()
            .flatten()
            .fold(self.renewal.next.min(self.renewal.deadline), Instant::min);
            match rx.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(wake) => {
                    if let Some(end) = self.handle(wake) {
                        break end;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                // The signal thread keeps a sender for the life of the process.
                Err(RecvTimeoutError::Disconnected) => break End::Release(None),
            }
        };
        match end {
            End::Release(signal) => self.release(signal),
            End::Released => {
                messages::log(self.config, || {
                    format!(
                        "'{}' was released by its owner; the keeper of pid {} ends",
                        self.lock.keys.name, self.pid.pid
                    )
                });
                exit::OK
            }
            End::Lost(_) if self.owner_said.load(Ordering::SeqCst) => {
                messages::log(self.config, || {
                    format!(
                        "'{}' was released by its owner (its word on this host); the keeper of \
                         pid {} ends",
                        self.lock.keys.name, self.pid.pid
                    )
                });
                exit::OK
            }
            End::Lost(why) => self.lose(&why),
        }
    }

    fn handle(&mut self, wake: Wake) -> Option<End> {
        let ours = |token: &str| token == self.lock.token;
        match wake {
            Wake::PidEnded => {
                self.next_scan = None;
                self.drain(None)
            }
            Wake::Signal(s) if s.signo == libc::SIGTERM => self.terminated(s),
            Wake::Signal(_) => None,
            Wake::OwnerSaid => self.owner_said_released(),
            // Borne out (the token holds the lock no more, see notify.rs): one renewal now
            // takes the release's mark away and answers that the owner released it (see
            // `Verdict::Released`); a lock gone without the mark is a loss.
            Wake::Notice(Event::Released { token }) if ours(&token) => self.renew(),
            Wake::Notice(Event::TakenAway { token, why }) if ours(&token) => Some(End::Lost(why)),
            // Only a holder that opted in is ever asked (anyone who may publish on the channel
            // could send this).
            Wake::Notice(Event::Preempted { token, preemption })
                if ours(&token) && self.preemptible =>
            {
                self.preempt(&preemption);
                None
            }
            Wake::Notice(_) => None,
        }
    }

    /// The owner's word that it released the lock: one renewal, best effort, takes the release's
    /// mark away; only a lock still ours (the word was false) keeps the keeper going.
    fn owner_said_released(&mut self) -> Option<End> {
        match self.renew() {
            None if self.renewal.last_error.is_none() => {
                self.owner_said.store(false, Ordering::SeqCst);
                messages::log(self.config, || {
                    "a word on this host that the owner released the lock is not borne out: the \
                     lock is still ours"
                        .to_string()
                });
                None
            }
            _ => Some(End::Released),
        }
    }

    /// The store, opened again if the last connection failed.
    fn store(&mut self) -> Result<&mut dyn Store> {
        connected(&mut self.store, self.config, &self.lock)
    }

    /// Renews the lock once; `Some` when it turned out not to be ours any more.
    fn renew(&mut self) -> Option<End> {
        let renewed = match connected(&mut self.store, self.config, &self.lock) {
            Ok(store) => self.renewal.renew(store, self.stopping),
            Err(error) => {
                self.renewal.retry_soon();
                Renewed::Failed {
                    error,
                    recovered: false,
                }
            }
        };
        match renewed {
            Renewed::Ours { sent, asked } => {
                self.renewed(sent);
                // Still ours, and renewed until PID has ended.
                if let Some(preemption) = asked
                    && !self.preempted
                {
                    self.preempt(&preemption);
                }
                None
            }
            // Its mark says the owner released it (an announcement we missed).
            Renewed::Gone(Verdict::Released) => Some(End::Released),
            // Anything else is a loss, however it came (a restart, a flush, an eviction, a
            // forced release): PID must hear of it.
            Renewed::Gone(other) => {
                let store = self.store.as_mut().expect("it answered");
                Some(End::Lost(loss_reason(store.as_mut(), &self.lock, &other)))
            }
            Renewed::Failed { error, recovered } => {
                // A fresh connection next time: this one may still have a reply on its way.
                if !recovered {
                    self.store = None;
                }
                let why = format!("{error:#}");
                if self.renewal.last_error.is_none() {
                    let whom = format!(" for pid {}", self.pid.pid);
                    self.renewal.say_failed(self.config, &whom, &why);
                }
                self.renewal.failed(why);
                None
            }
        }
    }

    /// The keeper starts to stop PID's work while the lock is ours (a preemption, or its
    /// SIGTERM): before any signal, the lock's meta says so (one renewal that records it, see
    /// `extend.lua`; the later ones record it again), so that the owner's release (a bash EXIT
    /// trap runs at once on SIGTERM, while its foreground step runs on) leaves the lock to the
    /// keeper, which releases it once the work has ended (`release.lua`). Best effort: a renewal
    /// that fails here is retried as any other.
    fn mark_stopping(&mut self) {
        if self.stopping || self.on_lost == PidOnLost::Ignore {
            return;
        }
        self.stopping = true;
        let Ok(store) = connected(&mut self.store, self.config, &self.lock) else {
            return;
        };
        if let (sent, Ok(Verdict::Done(_) | Verdict::Preempted(_))) = self.renewal.send(store, true)
        {
            self.renewed(sent);
        }
    }

    /// The renewal sent at `sent` succeeded.
    fn renewed(&mut self, sent: Instant) {
        self.renewal.renewed(sent);
        self.renewal.last_error = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails if the clock hand-over moves `sent`: the keeper's deadline would be later than the
    /// lock's.
    #[test]
    fn the_brief_keeps_when_the_lock_was_taken() {
        let sent_ns = monotonic_ns() - 2_000_000_000;
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
            pidfd: -1,
            ready: -1,
            password: None,
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
