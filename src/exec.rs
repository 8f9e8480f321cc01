//! `redlock exec`: take the lock, run a command while renewing it, release it after the command.
//!
//! The top layer (14): it takes its lock as the `acquire` command does ([`take_lock`]) and says
//! everything through [`messages`]. [`run`] reads as its steps: the command line, the signals,
//! the lock, the spawn, the [`Supervisor`], then [`conclude`] (release, and the exit status).
//!
//! One supervisor loop owns every decision. It blocks on a single channel that carries signals
//! (from the signal thread), renewal results (from the renewal thread) and child exits (SIGCHLD),
//! with a timeout at the next deadline: the lock's deadline or the SIGKILL escalation.
//!
//! Invariants:
//! - The child runs only while we believe we hold the lock. The lock's deadline is
//!   `sent + ttl` of the last successful acquire/renewal, on the monotonic clock; when it passes
//!   without a renewal, or a renewal finds another token or no key, the lock is lost and
//!   `--on-lost` acts on the child.
//! - A holder opens no connection it needs once its command runs: renewal runs on its own
//!   thread on the connection the lock was taken on, which it hands back for the release when
//!   it stops (the child exited: its channel is dropped). So waiters filling a server's
//!   `maxclients` cannot starve the holder of the renewal. One connection per server, then (a
//!   waiter's is the same one); the forced-release subscription (one more per server), the
//!   history's notes (`--warn-after`, `--max-runtime`) and a `--preemptible` holder's look at
//!   its record open theirs for a moment and are best effort: refused, the holder runs on with
//!   the renewal, which finds any loss within TTL/3.
//! - The child shares our process group, so terminal signals (Ctrl-C) reach it directly; signals
//!   sent to redlock alone are forwarded. It gets SIGTERM if redlock dies (PR_SET_PDEATHSIG), so it
//!   never runs on unlocked after a `kill -9` of redlock. A command that switches users
//!   (`setpriv`, `gosu`, `su-exec`, `sudo` run by another user) has that signal cleared by the
//!   kernel: exec looks at its credentials (10 ms after the start, then less and less often, up
//!   to every second) and, when they changed, starts a [`spawn::Watchdog`], a process that
//!   outlives redlock and stops the command when redlock dies, and warns with the form that
//!   needs none (`sudo -u USER redlock exec ...`). A watchdog rather than a refusal: the
//!   wrappers are the usual way to drop root in containers, and with one the guarantee holds
//!   again wherever redlock may signal the command (as root, or as the user who ran `sudo`).
//!   What it cannot cover: a kill of redlock before the switch was seen (up to a second), and
//!   a command that redlock's user may not signal.
//! - What the command started dies with redlock too when redlock leads its process group (a
//!   terminal's job, cron's `sh -c` that execs it, `setsid`): a watchdog is started with every
//!   command then, leaves the group, and at redlock's death signals the whole group (SIGTERM,
//!   SIGKILL after --kill-after), so that a shell's step does not run on past the TTL beside
//!   the next holder. When redlock does not lead its group (one line of a script: the group is
//!   the script's), the group is never signalled, and only the command stops: run redlock
//!   under `setsid`, or make the command exec its last step.
//! - Release happens after the child has been reaped, then redlock exits with the child's status,
//!   unless the lock was not provably ours for the command's whole run: lost while it ran, its
//!   deadline passed by the time the child was reaped (redlock stopped or starved: nothing
//!   checked it meanwhile), or the release found another token or no key (a command shorter than
//!   a renewal interval is checked by nothing else), or failed. Then redlock says so on stderr whatever
//!   `-q` says (an alert, see [`messages`]), and exits 75 (`--on-lost ignore`
//!   keeps a success: see [`exit_status`]).
//!
//! `--report` notes what happened as the steps go ([`Facts`]) and writes one JSON line at the
//! end, whatever the outcome ([`Report`]); never the token, only its fingerprint.
//!
//! Layer 14 of the list in `lib.rs`.

use std::ffi::{OsStr, OsString};
use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use signal_hook::consts::signal::*;

use crate::backend;
use crate::cli::{ExecArgs, OnLost};
use crate::config::{Config, Servers};
use crate::error::{Kind, failure};
use crate::exit;
use crate::lock::{self, Befell, Keys, Lock, Preemption, Releaser, Verdict};
use crate::messages;
use crate::notify;
use crate::output::human_ms;
use crate::owner;
use crate::signals::{self, Signal};
use crate::spawn::{self, Child, SpawnError};
use crate::store::{Store, loss_reason};
use crate::take::{GaveUp, take_lock};
use crate::wait::{self, Event};

/// The longest the loop sleeps without looking at the child (a safety net under SIGCHLD).
const POLL_CAP: Duration = Duration::from_secs(1);

/// How long after the command started `exec` first looks whether it switched users (a wrapper
/// such as `setpriv` does it just after its exec); then 4 times later each time, up to every
/// [`POLL_CAP`].
const FIRST_LOOK: Duration = Duration::from_millis(10);

/// How long after the command started `exec` begins to listen for a forced release. A command
/// over by then (cron's and CI's short steps, `exec -- true`) never pays for the thread, the
/// connection and the SUBSCRIBE, which made such a run a quarter slower; a forced release in that
/// first moment is found by the renewal instead, as any announcement missed (within TTL/3).
const LISTEN_AFTER: Duration = Duration::from_millis(50);

/// Runs `exec`: takes the lock, runs the command under a [`Supervisor`], then releases the lock
/// and returns the command's exit status (or 75: see [`conclude`]).
///
/// With `--report`, the report is opened first (an unwritable file is a usage error before
/// anything else happens) and gets one line whatever the outcome, errors included.
pub fn run(config: &Config, args: &ExecArgs) -> Result<u8> {
    let report = args.report.as_deref().map(Report::open).transpose()?;
    let mut facts = Facts::new();
    if let Some(report) = &report {
        // A stop signal while waiting for the lock ends the process from the signal thread
        // (see `wait.rs`): the report's line is written there.
        let (report, key, started) = (report.try_clone()?, args.key.clone(), facts.started);
        wait::before_exit(Some(Box::new(move |sig, code| {
            let mut facts = Facts::new();
            facts.started = started;
            facts.signal = Some(sig);
            report.write(&facts.json(&key, code));
        })));
    }
    let result = supervise(config, args, &mut facts);
    wait::before_exit(None);
    if let Some(report) = report {
        let code = match &result {
            Ok(code) => *code,
            Err(e) => crate::error::exit_code(e),
        };
        report.write(&facts.json(&args.key, code));
    }
    result
}

/// [`run`] without the report: the steps, noting in `facts` what the report says.
fn supervise(config: &Config, args: &ExecArgs, facts: &mut Facts) -> Result<u8> {
    let keys = Keys::new(&config.prefix, &args.key)?;
    let argv = command_line(args)?;
    let owner = owner::owner(std::process::id(), args.lock.note.as_deref(), || {
        owner::join_args(&argv)
    });

    let (tx, rx) = mpsc::channel::<Event>();
    let mut watched = signals::FORWARD.to_vec();
    watched.push(SIGCHLD);
    let handled = signals::deliver(&watched, tx.clone(), wait::signal_event)?;

    crate::take::check_lock_args(config, &args.lock)?;
    crate::take::warn_short_ttl(config, args.lock.ttl);
    let mut store = backend::open(config)?;
    let taken = take_lock(
        config,
        store.as_mut(),
        &keys,
        &args.lock,
        &owner,
        lock::Kept::ByHolder,
        &rx,
    );
    facts.waited = Some(facts.started.elapsed());
    let lock = match taken? {
        ControlFlow::Continue(lock) => lock,
        ControlFlow::Break(gave_up) => {
            match gave_up {
                GaveUp::Busy(_) => facts.busy = true,
                GaveUp::Signal(sig) => facts.signal = Some(sig),
            }
            return Ok(gave_up.code());
        }
    };
    facts.held = Some((lock.fence, lock::fingerprint(&lock.token), Instant::now()));

    // From here on the lock is ours: every way out goes through `release_after` or `conclude`.
    if let Some(sig) = pending_stop(&rx, &tx) {
        messages::notice(
            config,
            format_args!("{} before the command started", signals::name(sig)),
        );
        facts.signal = Some(sig);
        return release_after(config, store.as_mut(), &lock, Ok(exit::signal(sig)), facts);
    }
    // With a time limit, or preemptible, what the command leaves running stays ours, to stop it
    // with the command (see `stop_leftovers`): the lock goes to someone else as soon as we
    // release it, and a script's child must not run on beside the next holder.
    if adopts_orphans(args)
        && let Err(e) = spawn::adopt_orphans()
    {
        messages::log(config, || {
            format!("cannot adopt the command's orphans: {e}")
        });
    }
    let child = match spawn(&argv, &lock, config, &handled) {
        Ok(child) => child,
        Err(e) => return release_after(config, store.as_mut(), &lock, Err(e), facts),
    };
    messages::log(config, || {
        let place = match &lock.slot {
            Some(s) => match &s.resource {
                Some(r) => format!(", slot {} '{r}'", s.index),
                None => format!(", slot {}", s.index),
            },
            None => String::new(),
        };
        format!(
            "holding '{}' (fence {}{place}); started pid {}",
            keys.name,
            lock.fence,
            child.id()
        )
    });
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    // The connection the lock was taken on renews it, and comes back for the release: a holder
    // needs no new connection while its command runs, which a server full of waiters
    // (maxclients) could refuse.
    let mut supervisor = Supervisor::new(config, args, &lock, child, tx, stop_rx, store);
    let status = supervisor.run(&rx);
    // What a command stopped by redlock left running is stopped too, while the renewals still
    // keep the lock (it may take --kill-after and more); then the renewals stop, before the
    // release.
    if adopts_orphans(args) && supervisor.stopped_the_command() {
        supervisor.renew_from_now();
        stop_leftovers(config, args.kill_after);
    }
    // (A group's watchdog stayed for that: a kill -9 meanwhile stops what is left.)
    supervisor.dismiss_watchdog();
    drop(stop_tx);
    let mut store = supervisor.connection_back()?;
    match status {
        Ok(status) => {
            facts.command = Some(exit_code(status));
            facts.signal = status.signal();
            let code = conclude(store.as_mut(), supervisor, exit_code(status), facts);
            facts.released = Some(Instant::now());
            Ok(code)
        }
        Err(e) => release_after(config, store.as_mut(), &lock, Err(e), facts),
    }
}

/// Whether exec adopts the command's orphans, to stop them with it (`--max-runtime`,
/// `--preemptible`: the two ways redlock stops a command and hands the lock on while it may
/// have children).
fn adopts_orphans(args: &ExecArgs) -> bool {
    args.max_runtime.is_some() || args.lock.preemptible
}

/// The command to run: CMD [ARGS...], or `/bin/sh -c SHELL-COMMAND`; a usage error if none.
fn command_line(args: &ExecArgs) -> Result<Vec<OsString>> {
    let argv: Vec<OsString> = match &args.shell_command {
        Some(c) => vec!["/bin/sh".into(), "-c".into(), c.into()],
        None => args.cmd.clone(),
    };
    if argv.is_empty() || argv[0].is_empty() {
        return Err(crate::error::usage(
            "no command to run: give it after the key and -- (redlock exec KEY -- CMD [ARGS...]), \
             or as a shell command with -c 'SHELL-COMMAND'",
        ));
    }
    Ok(argv)
}

/// Once the command ended with `child_code` under `supervisor`: releases the lock, unless it was
/// lost while the command ran, and returns `exec`'s exit status. When the lock was not provably
/// ours for the command's whole run, says so whatever `-q` says (see [`unprotected`]).
fn conclude(
    store: &mut dyn Store,
    supervisor: Supervisor<'_>,
    child_code: u8,
    facts: &mut Facts,
) -> u8 {
    let timed_out = supervisor.timed_out_first();
    let stopped = supervisor.timed_out.is_some();
    let Supervisor {
        lock,
        args,
        lost,
        lost_unseen,
        telling,
        preempted,
        ..
    } = supervisor;
    for thread in telling {
        let _ = thread.join();
    }
    facts.timed_out = stopped;
    let limited = |code: u8| if timed_out { exit::TIMED_OUT } else { code };
    if let Some(why) = &lost {
        // Said when it happened. Another client may hold the lock now; there is nothing of ours
        // to release. The history and the watchers are told.
        tell_lost(store, lock, why);
        facts.lost = lost;
        return limited(exit_status(child_code, true, args.on_lost));
    }
    // Released even when the deadline passed: the lock may still be ours, and the release
    // deletes it only if it is.
    let mut why: Vec<String> = lost_unseen.into_iter().collect();
    // A lock known lost, or one whose release failed: nothing shows it was held to the end.
    let mut known = !why.is_empty();
    match release(store, lock, Some(child_code)) {
        Released::Lost(lost) => {
            known = true;
            why.push(format!("at release, {lost}"));
            tell_lost(store, lock, &why.join("; "));
        }
        Released::Unconfirmed(unconfirmed) => why.push(format!("at release, {unconfirmed}")),
        Released::Ours => {}
    }
    if why.is_empty() {
        if let Some((preemption, _)) = preempted {
            // Stopped for the preemptor, as for a lost lock (75), though the lock was ours to
            // the end: the release handed it to them.
            facts.preempted_by = Some(preemption.by);
            return limited(exit_status(child_code, true, args.on_lost));
        }
        return limited(child_code);
    }
    facts.lost = Some(why.join("; "));
    let code = limited(exit_status(child_code, true, args.on_lost));
    // An alert, not a notice: a command that ran without its lock must not pass for a success
    // unnoticed.
    messages::alert(unprotected(&lock.keys.name, known, &why, code == exit::OK));
    code
}

/// Once redlock stopped a command run with `--max-runtime` (the limit, a lost lock, a signal it
/// passed on): whatever the command left running (adopted by redlock, see
/// `spawn::adopt_orphans`) gets SIGTERM, SIGKILL after `kill_after`, and is reaped, while the
/// renewals still keep the lock and before it is released, so that nothing of the command runs
/// on once another client may hold the lock (timeout(1) stops the whole process group for the
/// same reason). Bounded: what still runs 2 s after the SIGKILL is said, and left.
///
/// A keeper among them (the lock of an `acquire --while-pid` inside the command, see
/// [`Leftover`]) gets SIGTERM only, which tells it to stop its work and then release its lock:
/// it waits for the same processes that get SIGKILL here, so it is given [`keeper_grace`] more
/// to see them gone and release, and SIGKILL only past that (its lock then stays held until its
/// TTL). A keeper that keeps a lock for redlock itself (`--while-pid $PPID`) is left alone: it
/// releases once redlock has ended.
fn stop_leftovers(config: &Config, kill_after: Duration) {
    // Durations are at most 100 years (`cli::MAX_DURATION`): these sums cannot overflow.
    let kill_at = Instant::now() + kill_after;
    let keepers_kill_at = kill_at + keeper_grace(config);
    let give_up = |keepers: bool| {
        let kill_at = if keepers { keepers_kill_at } else { kill_at };
        kill_at + Duration::from_secs(2)
    };
    let mut seen = std::collections::HashSet::new();
    let mut keepers_killed = false;
    loop {
        spawn::reap_exited();
        let left: Vec<(libc::pid_t, Leftover)> = spawn::children()
            .into_iter()
            .map(|pid| (pid, Leftover::of(pid)))
            .filter(|(_, kind)| *kind != Leftover::OurKeeper)
            .collect();
        if left.is_empty() {
            break;
        }
        let now = Instant::now();
        let keepers: Vec<libc::pid_t> = pids(&left, Leftover::Keeper);
        if now >= give_up(!keepers.is_empty()) {
            messages::alert(format_args!(
                "{} process{} the command left running could not be stopped (pids {:?})",
                left.len(),
                if left.len() == 1 { "" } else { "es" },
                left.iter().map(|(pid, _)| *pid).collect::<Vec<_>>()
            ));
            break;
        }
        let new: Vec<libc::pid_t> = left
            .iter()
            .map(|(pid, _)| *pid)
            .filter(|p| seen.insert(*p))
            .collect();
        spawn::signal_all(&new, SIGTERM);
        if now >= kill_at {
            spawn::signal_all(&pids(&left, Leftover::Other), SIGKILL);
        }
        if now >= keepers_kill_at && !keepers.is_empty() {
            if !keepers_killed {
                messages::alert(format_args!(
                    "the keeper{} of a lock taken inside the command (pids {keepers:?}) had not \
                     released it {} after the command's processes were killed: sending SIGKILL; \
                     its lock stays held until its TTL",
                    if keepers.len() == 1 { "" } else { "s" },
                    human_ms(keeper_grace(config))
                ));
                keepers_killed = true;
            }
            spawn::signal_all(&keepers, SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !seen.is_empty() {
        messages::notice(
            config,
            format_args!(
                "stopped {} process{} the command left running",
                seen.len(),
                if seen.len() == 1 { "" } else { "es" }
            ),
        );
    }
}

/// What a process the command left running is, for [`stop_leftovers`].
#[derive(Clone, Copy, Debug, PartialEq)]
enum Leftover {
    /// The keeper of an `acquire --while-pid` (its `argv[0]` is `work::KEEPER_ARGV0`): it stops its
    /// work and releases on SIGTERM.
    Keeper,
    /// A keeper whose pid is redlock's own (`redlock-keeper --pid OURS`): it releases once we end.
    OurKeeper,
    /// Anything else.
    Other,
}

impl Leftover {
    /// What `pid` is, from its command line (`redlock-keeper --pid PID -- KEY` for a keeper).
    /// A process gone, or one that cannot be read, counts as any other.
    fn of(pid: libc::pid_t) -> Leftover {
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            return Leftover::Other;
        };
        let mut args = raw.split(|&b| b == 0);
        if args.next() != Some(crate::work::KEEPER_ARGV0.as_bytes()) {
            return Leftover::Other;
        }
        let kept_for = match (args.next(), args.next()) {
            (Some(b"--pid"), Some(pid)) => std::str::from_utf8(pid).ok(),
            _ => None,
        };
        if kept_for == Some(std::process::id().to_string().as_str()) {
            Leftover::OurKeeper
        } else {
            Leftover::Keeper
        }
    }
}

/// The pids of `left` of kind `kind`.
fn pids(left: &[(libc::pid_t, Leftover)], kind: Leftover) -> Vec<libc::pid_t> {
    left.iter()
        .filter(|(_, k)| *k == kind)
        .map(|(pid, _)| *pid)
        .collect()
}

/// How long a keeper among the command's leftovers is given, after the others got SIGKILL, to
/// release its lock: the processes it waits for are gone by then, and it looks every 250 ms;
/// its release is at most two attempts, the second on a new connection (`keeper.rs`), so two
/// connects and replies, each counted with the larger of our own timeouts and the defaults
/// (2 s: the keeper's own unless the script gave it others); and 1 s for the look and a loaded
/// machine. 9 s with the default timeouts.
fn keeper_grace(config: &Config) -> Duration {
    const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
    let connect = config.connect_timeout.max(DEFAULT_TIMEOUT);
    let io = config.io_timeout.max(DEFAULT_TIMEOUT);
    (connect + io) * 2 + Duration::from_secs(1)
}

/// Tells the lock's history and watchers that `lock` was lost (`lost.lua`), on the queue node of
/// a quorum. Best effort: the loss was said on stderr already, and a server that cannot be
/// reached now cannot be told.
fn tell_lost(store: &mut dyn Store, lock: &Lock, why: &str) {
    if let Some(redis) = store.parking() {
        let _ = lock::report_lost(redis, &lock.keys, &lock.token, lock.fence, why);
    }
}

/// What `exec` says when lock `name` was not provably held for the command's whole run: `known`
/// lost, or not confirmed, for the reasons `why`; `kept` when `--on-lost ignore` kept a success.
fn unprotected(name: &str, known: bool, why: &[String], kept: bool) -> String {
    let what = if known {
        format!("lost the lock '{name}' during the command (found after it ended)")
    } else {
        format!("cannot confirm that '{name}' was held to the end of the command")
    };
    let kept = if kept {
        " (exit status 0 kept: --on-lost ignore)"
    } else {
        ""
    };
    format!(
        "{what}: {}; it may have run without the lock{kept}",
        why.join("; ")
    )
}

/// The exit status of `exec` once the command has ended with `child_code`: the command's own,
/// unless the lock was `lost` (not provably ours for the command's whole run); then 75, except
/// that `--on-lost ignore` keeps a success, since the user asked for the command to run on.
fn exit_status(child_code: u8, lost: bool, on_lost: OnLost) -> u8 {
    if lost && !(on_lost == OnLost::Ignore && child_code == exit::OK) {
        exit::LOCK_LOST
    } else {
        child_code
    }
}

/// A stop signal already delivered, if any. The other events go back on the channel (`tx` is
/// its sender) for the supervisor: a forced release of the lock we have just taken may be among
/// them, and dropping it would leave the loss to the next renewal.
fn pending_stop(rx: &Receiver<Event>, tx: &Sender<Event>) -> Option<i32> {
    let mut stop = None;
    for event in rx.try_iter().collect::<Vec<_>>() {
        match wait::stop_signal(&event) {
            Some(sig) if stop.is_none() => stop = Some(sig),
            _ => {
                let _ = tx.send(event);
            }
        }
    }
    stop
}

/// Releases the lock (the command never ran, or cannot be waited for), then passes `result` on.
fn release_after(
    config: &Config,
    store: &mut dyn Store,
    lock: &Lock,
    result: Result<u8>,
    facts: &mut Facts,
) -> Result<u8> {
    if let Released::Lost(why) | Released::Unconfirmed(why) = release(store, lock, None) {
        messages::notice(
            config,
            format_args!("'{}' was no longer ours at release: {why}", lock.keys.name),
        );
        facts.lost = Some(format!("at release, {why}"));
    }
    facts.released = Some(Instant::now());
    result
}

/// Where `--report` goes: a file opened for appending before the lock is taken, or stdout.
enum Report {
    Stdout,
    File(std::path::PathBuf, std::fs::File),
}

impl Report {
    /// Opens `path` for appending (created if missing), `-` meaning stdout; an error names the
    /// file and is a usage error (exit 2), before anything else happened.
    fn open(path: &std::path::Path) -> Result<Report> {
        if path.as_os_str() == "-" {
            return Ok(Report::Stdout);
        }
        // O_APPEND: each run's line, written in one call, lands whole at the end, so runs may
        // share a file. Close-on-exec (Rust's default): the command does not inherit it.
        // O_NONBLOCK for the open only: a FIFO nobody reads fails (ENXIO) instead of hanging
        // before the lock is even asked for; the writes block as usual.
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .and_then(|file| {
                use std::os::fd::AsRawFd as _;
                let fd = file.as_raw_fd();
                // SAFETY: fcntl on a descriptor we own, with flags it just returned.
                let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
                if flags == -1
                    || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } == -1
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(file)
            })
            .map(|file| Report::File(path.to_path_buf(), file))
            .map_err(|e| {
                let why = if e.raw_os_error() == Some(libc::ENXIO) {
                    "it is a FIFO that nobody reads".to_string()
                } else {
                    e.to_string()
                };
                crate::error::usage(format!(
                    "cannot open the report file '{}': {why}",
                    crate::printable::printable(&path.to_string_lossy())
                ))
            })
    }

    /// A second handle on the same report.
    fn try_clone(&self) -> Result<Report> {
        match self {
            Report::Stdout => Ok(Report::Stdout),
            Report::File(path, file) => Ok(Report::File(
                path.clone(),
                file.try_clone()
                    .context("cannot duplicate the report file")?,
            )),
        }
    }

    /// Writes `line` and a newline in one call. A failure does not change the exit status (the
    /// command has run); it is said whatever `-q` says, since a CI job relies on the file.
    fn write(self, line: &serde_json::Value) {
        use std::io::Write as _;
        let text = format!("{line}\n");
        let (to, written) = match self {
            Report::Stdout => {
                let mut out = std::io::stdout().lock();
                let w = out.write_all(text.as_bytes()).and_then(|()| out.flush());
                match w {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return,
                    w => ("stdout".to_string(), w),
                }
            }
            Report::File(path, mut file) => (
                format!("'{}'", crate::printable::printable(&path.to_string_lossy())),
                file.write_all(text.as_bytes()),
            ),
        };
        if let Err(e) = written {
            messages::alert(format_args!("cannot write the report to {to}: {e}"));
        }
    }
}

/// What `--report` says about one run, noted as it goes.
struct Facts {
    started: Instant,
    /// How long taking the lock took (set once it was taken or given up).
    waited: Option<Duration>,
    /// The lock's fence, token fingerprint and when it was taken.
    held: Option<(i64, String, Instant)>,
    /// When the lock was released (or found lost) after the command.
    released: Option<Instant>,
    /// The lock stayed busy (`-n`, or `--wait` ran out).
    busy: bool,
    /// The command's own exit status (128 + N for signal N).
    command: Option<u8>,
    /// The signal that ended the command, or the wait for the lock.
    signal: Option<i32>,
    /// Why the lock was not provably held to the end of the command.
    lost: Option<String>,
    /// `--max-runtime` ran out (before any loss of the lock) and the command was stopped.
    timed_out: bool,
    /// Who preempted the command (`--preemptible`), while it ran.
    preempted_by: Option<String>,
}

impl Facts {
    fn new() -> Facts {
        Facts {
            started: Instant::now(),
            waited: None,
            held: None,
            released: None,
            busy: false,
            command: None,
            signal: None,
            lost: None,
            timed_out: false,
            preempted_by: None,
        }
    }

    /// The report's line for lock `key`, `exit` being the status redlock exits with. Never the
    /// token: its fingerprint, as `status` shows it.
    fn json(&self, key: &str, exit: u8) -> serde_json::Value {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let held = self.held.as_ref();
        let end = self.released.unwrap_or_else(Instant::now);
        serde_json::json!({
            "key": key,
            "acquired": held.is_some(),
            "busy": self.busy,
            "fence": held.map(|h| h.0),
            "token_fingerprint": held.map(|h| h.1.as_str()),
            "waited_ms": ms(self.waited.unwrap_or_else(|| self.started.elapsed())),
            "held_ms": held.map(|h| ms(end.saturating_duration_since(h.2))),
            "exit": exit,
            "command_status": self.command,
            "lost": self.lost.is_some(),
            "lost_reason": self.lost,
            "timed_out": self.timed_out,
            "preempted_by": self.preempted_by,
            "signal": self.signal.map(signals::name),
        })
    }
}

/// What a release found.
enum Released {
    /// The lock was ours to the end, and is released.
    Ours,
    /// It was no longer ours: why.
    Lost(String),
    /// The release failed (the server gone, restarted, demoted, the key no longer a lock), so
    /// nothing shows the lock was still held: why. That counts as a loss too; if the lock was
    /// still ours, it expires by its TTL.
    Unconfirmed(String),
}

/// Releases the lock; `status`: the command's exit status, for the lock's history.
fn release(store: &mut dyn Store, lock: &Lock, status: Option<u8>) -> Released {
    let by = Releaser::of(lock, status);
    let released = store.release(&lock.keys, &by).or_else(|first| {
        // The main connection may have gone stale during a long run: try once on a fresh one.
        store
            .recover()
            .and_then(|()| store.release(&lock.keys, &by))
            .map_err(|_| first)
    });
    match released {
        Ok(Verdict::Done(_)) => Released::Ours,
        Ok(other) => Released::Lost(loss_reason(store, lock, &other)),
        Err(e) if crate::error::kind_of(&e) == crate::error::Kind::NotOwner => {
            Released::Lost(format!("{e:#}"))
        }
        Err(e) => Released::Unconfirmed(format!(
            "the release failed, so nothing shows the lock was still held ({e:#}); if it was, \
             it expires within {}",
            human_ms(lock.ttl)
        )),
    }
}

/// Starts the command with the lock's variables, tied to our lifetime (see `spawn.rs`).
///
/// The command gets what a `redlock` it runs needs to reach the same servers, and no secret in
/// its environment: `REDLOCK_URL` without passwords, `REDLOCK_PREFIX`, the TLS files, and the
/// password in a sealed memory file it inherits (`REDLOCK_PASSWORD_FILE=/dev/fd/N`) instead of
/// `REDLOCK_PASSWORD`, which is removed. `REDIS_URL` is the user's own and is left as it is.
fn spawn(argv: &[OsString], lock: &Lock, config: &Config, handled: &[i32]) -> Result<Child> {
    let fence = lock.fence.to_string();
    let slot = lock.slot.as_ref().map(|s| s.index.to_string());
    let resource = lock.slot.as_ref().and_then(|s| s.resource.as_deref());
    let urls = config.servers.public_urls();
    let files = &config.for_child;
    let password = files
        .password
        .as_deref()
        .and_then(|pw| match password_fd(pw) {
            Ok(fd) => Some(fd),
            Err(e) => {
                messages::notice(
                    config,
                    format_args!(
                        "cannot hand the password to the command ({e}): a redlock it runs needs \
                         --password-file"
                    ),
                );
                None
            }
        });
    let mut passwords = config.servers.endpoints().iter();
    if files.password.is_none() && passwords.any(|e| e.info.redis_settings().password().is_some()) {
        messages::log(config, || {
            "the servers have different passwords: the command gets none (one password file \
             cannot carry them all)"
        });
    }
    let password_file = password
        .as_ref()
        .map(|fd| format!("/dev/fd/{}", fd.as_raw_fd()));
    fn path(p: &Option<std::path::PathBuf>) -> Option<&OsStr> {
        p.as_deref().map(std::path::Path::as_os_str)
    }
    let mut env = vec![
        ("REDLOCK_KEY", Some(OsStr::new(&lock.keys.name))),
        ("REDLOCK_TOKEN", Some(OsStr::new(&lock.token))),
        ("REDLOCK_FENCE", Some(OsStr::new(&fence))),
        // A lock with more than one holder: our place (and its name, in a pool). Removed
        // otherwise, so that an exec inside another's command does not pass on the outer place.
        ("REDLOCK_SLOT", slot.as_deref().map(OsStr::new)),
        ("REDLOCK_RESOURCE", resource.map(OsStr::new)),
        ("REDLOCK_URL", Some(OsStr::new(&urls))),
        ("REDLOCK_PREFIX", Some(OsStr::new(&config.prefix))),
        ("REDLOCK_PASSWORD", None),
        (
            "REDLOCK_PASSWORD_FILE",
            password_file.as_deref().map(OsStr::new),
        ),
        ("REDLOCK_TLS_CA", path(&files.tls_ca)),
        ("REDLOCK_TLS_CERT", path(&files.tls_cert)),
        ("REDLOCK_TLS_KEY", path(&files.tls_key)),
    ];
    // So that `redlock extend "$REDLOCK_KEY"` in the command reaches the same servers.
    match &config.servers {
        Servers::Cluster(_) => env.push(("REDLOCK_CLUSTER", Some(OsStr::new("1")))),
        Servers::Sentinel { master, .. } => {
            env.push(("REDLOCK_SENTINEL", Some(OsStr::new(master))));
        }
        _ => {}
    }
    let shown = argv[0].to_string_lossy();
    // The command has exec'd when this returns (see `spawn.rs`): it holds its own copy of the
    // password's descriptor, and ours closes when `password` drops.
    spawn::spawn(argv, &env, handled).map_err(|e| match e {
        SpawnError::NotFound => failure(Kind::NotFound, format!("command not found: {shown}")),
        SpawnError::NotExecutable(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            failure(
                Kind::NotExecutable,
                format!("cannot execute {shown}: permission denied"),
            )
        }
        SpawnError::NotExecutable(e) => {
            failure(Kind::NotExecutable, format!("cannot execute {shown}: {e}"))
        }
    })
}

/// A sealed, read-only memory file holding `password`, which the command inherits: the
/// descriptor is not close-on-exec. It is made just before the spawn and closed by the caller
/// right after, and nothing else in redlock starts a process meanwhile, so only the command gets
/// it. It is at least 3, so that it never stands in for a closed stdin, stdout or stderr.
fn password_fd(password: &str) -> std::io::Result<OwnedFd> {
    use std::io::{Error, Write};
    if password.contains('\n') {
        // A password file gives its first line only.
        return Err(Error::other("the password holds a line break"));
    }
    // SAFETY: the name is a NUL-terminated literal; memfd_create returns a new descriptor or -1.
    let raw = unsafe { libc::memfd_create(c"redlock-password".as_ptr(), libc::MFD_ALLOW_SEALING) };
    if raw == -1 {
        return Err(Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor we own from here on.
    let mut fd = unsafe { OwnedFd::from_raw_fd(raw) };
    if raw < 3 {
        // SAFETY: F_DUPFD returns a new descriptor, at least 3, or -1.
        let dup = unsafe { libc::fcntl(raw, libc::F_DUPFD, 3) };
        if dup == -1 {
            return Err(Error::last_os_error());
        }
        // SAFETY: as above; the low one closes when the old `fd` drops.
        fd = unsafe { OwnedFd::from_raw_fd(dup) };
    }
    let mut file = std::fs::File::from(fd);
    file.write_all(password.as_bytes())?;
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: fchmod and fcntl act on a descriptor we own.
    unsafe {
        if libc::fchmod(file.as_raw_fd(), 0o400) == -1
            || libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) == -1
        {
            return Err(Error::last_os_error());
        }
    }
    Ok(OwnedFd::from(file))
}

/// The renewal thread, not started yet: a command that ends within TTL/3 never needs it.
struct PendingRenewal {
    at: Instant,
    stop: Receiver<()>,
    tx: Sender<Event>,
}

/// The connection the lock was taken on (a store: one server's, or a quorum's): the
/// supervisor's until the renewals start, the renewal thread's while they run, and the
/// supervisor's again for the release once they stopped.
enum Connection {
    Here(Box<dyn Store>),
    Renewing(std::thread::JoinHandle<Box<dyn Store>>),
    /// Lost with a renewal thread that could not start or panicked.
    Gone,
}

/// Renews the lock now and then every TTL/3 on `store`, the connection it was taken on, until
/// `stop` is dropped or the lock is lost; the thread gives `store` back when it ends. `None`
/// when the thread cannot start (then the store is gone too).
///
/// No new connection: a failed renewal reconnects the same store (a one-server store that
/// cannot reconnect tries again before its next call; a quorum reconnects the nodes that
/// failed), so that a holder keeps its lock as long as the servers answer on the connections it
/// has, even when waiters fill every other place the server has (maxclients).
fn start_renewal(
    lock: Lock,
    mut store: Box<dyn Store>,
    stop: Receiver<()>,
    tx: Sender<Event>,
) -> Option<std::thread::JoinHandle<Box<dyn Store>>> {
    let interval = lock.renewal_interval();
    let retry = (interval / 3).max(Duration::from_millis(1));
    let spawned = std::thread::Builder::new()
        .name("renewal".into())
        .spawn(move || {
            // A renewal tells of a server restarted since the acquisition (its run_id changed).
            store.track_restarts(&lock.run_ids);
            let mut next = Duration::ZERO;
            loop {
                if stop.recv_timeout(next) != Err(RecvTimeoutError::Timeout) {
                    return store;
                }
                let sent = Instant::now();
                let place = lock.slot.is_some();
                let event = match store.extend(&lock.keys, &lock.token, lock.ttl, place, false) {
                    Ok(Verdict::Done(_)) => {
                        // Counted from when this one was sent, so that slow renewals (a quorum
                        // giving a frozen node its grace) do not push the next ones later.
                        next = interval.saturating_sub(sent.elapsed());
                        Event::Renewed(sent)
                    }
                    Ok(Verdict::Preempted(preemption)) => {
                        // Still ours, and renewed until the command has stopped.
                        next = interval.saturating_sub(sent.elapsed());
                        let token = lock.token.clone();
                        if tx.send(Event::Renewed(sent)).is_err() {
                            return store;
                        }
                        Event::Preempted { token, preemption }
                    }
                    Ok(lost) => Event::Lost(loss_reason(store.as_mut(), &lock, &lost)),
                    Err(e) => {
                        // A fresh connection next time: this one may still have a reply on its
                        // way. A reconnection that fails now is tried again before the next
                        // call (see `Redis::reconnect`).
                        let _ = store.recover();
                        next = retry;
                        Event::RenewFailed(format!("{e:#}"))
                    }
                };
                let done = matches!(event, Event::Lost(_));
                if tx.send(event).is_err() || done {
                    return store;
                }
            }
        });
    match spawned {
        Ok(thread) => Some(thread),
        Err(e) => {
            // Without renewal the deadline check still stops the child when the TTL runs out.
            messages::alert(format_args!("cannot start the renewal thread: {e}"));
            None
        }
    }
}

/// The child's status as an exit code: its code, or 128+N if signal N killed it.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::INTERNAL),
        (None, Some(sig)) => exit::signal(sig),
        (None, None) => exit::INTERNAL,
    }
}

struct Supervisor<'a> {
    config: &'a Config,
    args: &'a ExecArgs,
    lock: &'a Lock,
    child: Child,
    /// When to start listening for a forced release ([`LISTEN_AFTER`]), and where to report it.
    listening: Option<(Instant, Sender<Event>)>,
    /// Started when the first renewal is due.
    renewal: Option<PendingRenewal>,
    /// The connection the lock was taken on, which renews it (see [`Connection`]).
    connection: Connection,
    /// The lock is surely ours until then (monotonic clock).
    deadline: Instant,
    /// When to send SIGKILL, after a SIGTERM we sent or forwarded.
    kill_at: Option<Instant>,
    /// SIGINT/SIGTERM received so far: the second escalates to SIGKILL.
    terminations: u32,
    /// We lead our session, so a terminal hangup reached us alone.
    session_leader: bool,
    /// Why the lock was lost while the command ran (said, and acted on, at once).
    lost: Option<String>,
    /// Why the lock was not provably ours when the command's exit was seen, although no loss had
    /// been noticed while it ran: its deadline had passed, or a loss was still on the channel.
    lost_unseen: Option<String>,
    last_renew_error: Option<String>,
    /// When the loss in `lost` was noticed.
    lost_at: Option<Instant>,
    /// A `--preempt` waiter asked us to stop (`--preemptible`), and when we heard of it: the
    /// command is stopped as on a lost lock, but the lock is still ours, renewed and released.
    preempted: Option<(Preemption, Instant)>,
    /// `--warn-after`: when the warning is due (counted from the acquisition); `None` once said.
    warn_at: Option<Instant>,
    /// `--max-runtime`: when the command is stopped (counted from the acquisition).
    limit_at: Option<Instant>,
    /// When `--max-runtime` ran out and the command was told to stop.
    timed_out: Option<Instant>,
    /// When to look next whether the command changed its credentials (see
    /// [`spawn::credentials_changed`]), and the pause after; `None` once it did.
    credentials_check: Option<(Instant, Duration)>,
    /// Stops the command if redlock dies, when its parent-death signal was cleared.
    watchdog: Option<spawn::Watchdog>,
    /// The threads telling the lock's history of the warning or the limit, joined before the
    /// release (so that the history has them in order).
    telling: Vec<std::thread::JoinHandle<()>>,
}

impl<'a> Supervisor<'a> {
    /// A supervisor for `child`, just started under `lock`. It starts listening for a forced
    /// release [`LISTEN_AFTER`] from now and the renewals at TTL/3, both reporting on `tx`;
    /// dropping the sender of `stop` ends the renewals.
    fn new(
        config: &'a Config,
        args: &'a ExecArgs,
        lock: &'a Lock,
        child: Child,
        tx: Sender<Event>,
        stop: Receiver<()>,
        store: Box<dyn Store>,
    ) -> Self {
        let watchdog = group_watchdog(&child, args.kill_after);
        Supervisor {
            config,
            args,
            lock,
            child,
            // A forced release while the command runs reaches us at once (else at the next
            // renewal).
            listening: Some((Instant::now() + LISTEN_AFTER, tx.clone())),
            renewal: Some(PendingRenewal {
                at: lock.sent + lock.renewal_interval(),
                stop,
                tx,
            }),
            connection: Connection::Here(store),
            deadline: lock.valid_until(lock.sent),
            kill_at: None,
            terminations: 0,
            // SAFETY: getsid(0) and getpid have no preconditions.
            session_leader: unsafe { libc::getsid(0) == libc::getpid() },
            lost: None,
            lost_unseen: None,
            last_renew_error: None,
            lost_at: None,
            preempted: None,
            // The wait for the lock does not count: the clock starts when it was taken.
            warn_at: args.warn_after.and_then(|d| lock.sent.checked_add(d)),
            limit_at: args.max_runtime.and_then(|d| lock.sent.checked_add(d)),
            timed_out: None,
            credentials_check: Some((Instant::now() + FIRST_LOOK, FIRST_LOOK)),
            watchdog,
            telling: Vec::new(),
        }
    }
}

/// A watchdog over our whole process group when we lead it (a terminal's job, cron's `sh -c`
/// that execs us, `setsid`): at a `kill -9` of redlock it stops what the command started too,
/// which the parent-death signal (the command's alone) leaves running beside the next holder.
/// When we do not lead our group (one line of a script: the group is the script's), the group
/// is never signalled and only the command is stopped. It is started with the command, not
/// later, so that no kill is missed; a fork costs little (measured on `exec -- true`).
fn group_watchdog(child: &Child, grace: Duration) -> Option<spawn::Watchdog> {
    // SAFETY: getpgid(0) and getpid have no preconditions.
    let me = unsafe { libc::getpid() };
    if unsafe { libc::getpgid(0) } != me {
        return None;
    }
    match spawn::Watchdog::start(child.id() as libc::pid_t, Some(me), grace) {
        Ok(watchdog) => Some(watchdog),
        Err(e) => {
            messages::alert(format_args!("cannot start a watchdog process: {e}"));
            None
        }
    }
}

impl Supervisor<'_> {
    /// Supervises the child until it exits; returns its status.
    fn run(&mut self, rx: &Receiver<Event>) -> Result<ExitStatus> {
        loop {
            if let Some(status) = self
                .child
                .try_wait()
                .context("cannot wait for the command")?
            {
                self.settle(rx, Instant::now());
                return Ok(status);
            }
            let now = Instant::now();
            self.act_on_time(now);
            match rx.recv_timeout(self.next_wake(now).saturating_duration_since(now)) {
                Ok(event) => self.handle(event),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    // Cannot happen while we hold a sender's clone in the signal thread; wait
                    // for the child the plain way rather than spin.
                    let status = self.child.wait().context("cannot wait for the command")?;
                    self.settle(rx, Instant::now());
                    return Ok(status);
                }
            }
        }
    }

    /// Does what is due at `now`: the lock is lost when its deadline passed, SIGKILL follows an
    /// unheeded SIGTERM, and the renewals and the listening for a forced release start.
    fn act_on_time(&mut self, now: Instant) {
        if self.lost.is_none() && now >= self.deadline {
            let why = match &self.last_renew_error {
                Some(e) => format!("no renewal succeeded before the lock's TTL ran out ({e})"),
                None => "no renewal succeeded before the lock's TTL ran out".to_string(),
            };
            // Due at the deadline, however late this pass noticed it.
            let at = self.deadline;
            self.lose(why, at);
        }
        if self.kill_at.is_some_and(|t| now >= t) {
            self.kill_at = None;
            self.send(SIGKILL);
        }
        if let Some(due) = self.renewal.take_if(|r| now >= r.at)
            && self.lost.is_none()
        {
            self.start_renewal(due);
        }
        if let Some((_, tx)) = self.listening.take_if(|(at, _)| now >= *at)
            && self.lost.is_none()
        {
            let preemptible = self.args.lock.preemptible;
            notify::listen(
                self.config,
                &self.lock.keys,
                &self.lock.token,
                tx,
                preemptible,
            );
        }
        if let Some(due) = self.limit_at.take_if(|at| now >= *at) {
            // A warning not said yet has no point once the command is being stopped.
            self.warn_at = None;
            // Being stopped already (its lock lost, or a SIGINT/SIGTERM passed on): the limit
            // adds nothing, and the first cause decides.
            let stopping = self.terminations > 0 || self.stopping_for_the_lock();
            if !stopping {
                self.time_out(due);
            }
        }
        if self.warn_at.take_if(|at| now >= *at).is_some() {
            self.overran();
        }
        if let Some((at, pause)) = self.credentials_check
            && now >= at
        {
            self.credentials_check = Some((now + pause, (pause * 4).min(POLL_CAP)));
            self.look_at_credentials();
        }
    }

    /// Whether the command switched users (`setpriv`, `gosu`, `su-exec`, `sudo`...), which
    /// cleared the signal that stops it when redlock dies: then a [`spawn::Watchdog`] does that
    /// in its place, and a warning names the form that needs none.
    fn look_at_credentials(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        let Some(change) = spawn::credentials_changed(pid) else {
            return;
        };
        self.credentials_check = None;
        let unprotected = "it would run on without the lock if redlock were killed";
        let stopped_by = if !spawn::may_signal(pid) {
            // A watchdog with our credentials could not stop it either.
            format!("redlock's user may not signal it, so {unprotected}")
        } else if self.watchdog.is_some() {
            // The group's watchdog (see `group_watchdog`) stops it with the rest of the group.
            "a watchdog process stops it if redlock dies".to_string()
        } else {
            match spawn::Watchdog::start(pid, None, self.args.kill_after) {
                Ok(watchdog) => {
                    self.watchdog = Some(watchdog);
                    "a watchdog process stops it if redlock dies".to_string()
                }
                Err(e) => {
                    messages::alert(format_args!("cannot start a watchdog process: {e}"));
                    unprotected.to_string()
                }
            }
        };
        messages::warning(
            self.config,
            format_args!(
                "the command under '{}' changed its credentials ({change}), which cleared the \
                 signal that stops it when redlock dies; {stopped_by}. Switch users before \
                 redlock instead: sudo -u USER redlock exec ...",
                self.lock.keys.name
            ),
        );
    }

    /// The command was reaped (and its leftovers stopped): a watchdog has nothing left to watch.
    fn dismiss_watchdog(&mut self) {
        self.watchdog = None;
    }

    /// When [`act_on_time`](Self::act_on_time) has something to do next, or [`POLL_CAP`] from
    /// `now` at the latest.
    fn next_wake(&self, now: Instant) -> Instant {
        let mut wake = now + POLL_CAP;
        if let Some(r) = &self.renewal {
            wake = wake.min(r.at);
        }
        if let Some((at, _)) = &self.listening {
            wake = wake.min(*at);
        }
        if self.lost.is_none() {
            wake = wake.min(self.deadline);
        }
        let credentials = self.credentials_check.map(|(at, _)| at);
        for t in [self.kill_at, self.warn_at, self.limit_at, credentials]
            .into_iter()
            .flatten()
        {
            wake = wake.min(t);
        }
        wake
    }

    /// Reacts to one event while the command runs: forwards a signal, moves the deadline on a
    /// renewal, or loses the lock.
    fn handle(&mut self, event: Event) {
        match event {
            // With a limit, the command's orphans are ours (see `stop_leftovers`): reap those that
            // exited, so that they do not stay zombies for the whole run.
            Event::Signal(s) if s.signo == SIGCHLD => {
                if adopts_orphans(self.args) {
                    spawn::reap_adopted(self.child.id() as libc::pid_t);
                }
            }
            Event::Signal(s) => self.forward(s),
            Event::Renewed(sent) => {
                // A renewal sent after the deadline comes too late: the lock counted as lost.
                if self.lost.is_none() && sent < self.deadline {
                    self.deadline = self.deadline.max(self.lock.valid_until(sent));
                    self.last_renew_error = None;
                }
            }
            Event::RenewFailed(e) => {
                if self.lost.is_none() && self.last_renew_error.is_none() {
                    messages::notice(
                        self.config,
                        format_args!(
                            "renewing '{}' failed: {e}; retrying while the lock lasts ({} left)",
                            self.lock.keys.name,
                            human_ms(self.deadline.saturating_duration_since(Instant::now()))
                        ),
                    );
                }
                self.last_renew_error = Some(e);
            }
            Event::Lost(why) => {
                if self.lost.is_none() {
                    self.lose(why, Instant::now());
                }
            }
            Event::TakenAway { token, why } => {
                if self.lost.is_none() && token == self.lock.token {
                    self.lose(why, Instant::now());
                }
            }
            // Only a holder that opted in is ever asked (anyone who may publish on the channel
            // could send this).
            Event::Preempted { token, preemption } => {
                if self.args.lock.preemptible
                    && self.lost.is_none()
                    && self.preempted.is_none()
                    && token == self.lock.token
                {
                    self.preempt(preemption);
                }
            }
            // Ours is released after the command, never while it runs.
            Event::Released { .. } => {}
        }
    }

    /// Once the command was reaped at `reaped`: takes in what is still on the channel (a renewal
    /// or a loss that came in meanwhile), then records in `lost_unseen` whether the lock had
    /// stopped being provably ours. Its deadline having passed means nothing renewed it for a
    /// whole TTL before the exit was seen (redlock stopped or starved, or Redis silent): it may
    /// have expired, and another client may have held it, while the command ran.
    fn settle(&mut self, rx: &Receiver<Event>, reaped: Instant) {
        if self.lost.is_some() {
            return;
        }
        for event in rx.try_iter() {
            match event {
                Event::Renewed(sent) if sent < self.deadline => {
                    self.deadline = self.deadline.max(self.lock.valid_until(sent));
                    self.last_renew_error = None;
                }
                Event::RenewFailed(e) => self.last_renew_error = Some(e),
                Event::Lost(why) => {
                    self.lost_unseen.get_or_insert(why);
                }
                Event::TakenAway { token, why } if token == self.lock.token => {
                    self.lost_unseen.get_or_insert(why);
                }
                // The command is gone: nothing to forward a signal to.
                _ => {}
            }
        }
        if self.lost_unseen.is_none() && reaped >= self.deadline {
            let why = match &self.last_renew_error {
                Some(e) => format!("no renewal succeeded before the lock's TTL ran out ({e})"),
                None => "no renewal succeeded before the lock's TTL ran out (redlock was stopped \
                         or starved meanwhile)"
                    .to_string(),
            };
            self.lost_unseen = Some(why);
        }
    }

    fn forward(&mut self, s: Signal) {
        // Ctrl-C and Ctrl-\ from a terminal go to its whole foreground process group. A hangup
        // goes to the session leader only, so it reached the child too unless we lead the session
        // (ssh -t, script -c): then only we got it.
        let group_wide = match s.signo {
            SIGINT | SIGQUIT => true,
            SIGHUP => !self.session_leader,
            _ => false,
        };
        let terminating = matches!(s.signo, SIGINT | SIGTERM);
        if terminating {
            self.terminations += 1;
        }
        if self.terminations >= 2 && terminating {
            messages::notice(
                self.config,
                format_args!("second {}: killing the command", signals::name(s.signo)),
            );
            self.send(SIGKILL);
            return;
        }
        // Sending what the child got already would deliver it twice.
        if !(s.from_terminal && group_wide) {
            self.send(s.signo);
        }
        // A request to stop (SIGINT, SIGTERM) is escalated after --kill-after; a hangup or SIGQUIT
        // is passed on and left to the command.
        if terminating && self.kill_at.is_none() {
            self.kill_at = Instant::now().checked_add(self.args.kill_after);
        }
    }

    /// The lock is lost, as it was due `at` (its deadline, or when the news came).
    fn lose(&mut self, why: String, at: Instant) {
        // Being stopped already (the limit, a preemption, a signal passed on): a second SIGTERM
        // would cut the command's cleanup short, and the SIGKILL stays when it was due.
        let stopping = self.stopped_the_command();
        let action = match self.args.on_lost {
            OnLost::Term if stopping => "the command is being stopped already".to_string(),
            OnLost::Term => format!(
                "sending SIGTERM to the command (SIGKILL after {})",
                human_ms(self.args.kill_after)
            ),
            OnLost::Kill => "killing the command".to_string(),
            OnLost::Ignore => "letting the command run unprotected (--on-lost ignore)".to_string(),
        };
        messages::alert(format_args!(
            "lost the lock '{}' at {} after holding it {}: {why}; {action}",
            self.lock.keys.name,
            humantime::format_rfc3339_seconds(SystemTime::now()),
            human_ms(self.lock.sent.elapsed()),
        ));
        self.lost = Some(why);
        self.lost_at = Some(at);
        match self.args.on_lost {
            OnLost::Term if stopping => {}
            OnLost::Term => {
                self.send(SIGTERM);
                self.kill_at = Instant::now().checked_add(self.args.kill_after);
            }
            OnLost::Kill => self.send(SIGKILL),
            OnLost::Ignore => {}
        }
    }

    /// A `--preempt` waiter asked for the lock, which we took `--preemptible`: the command is
    /// stopped as `--on-lost` says, as on a lost lock, while the lock stays ours (renewed) until
    /// it has stopped; then the release hands it to the preemptor, first in line.
    fn preempt(&mut self, preemption: Preemption) {
        if self.stopped_the_command() {
            // Being stopped already (the limit, a signal passed on): nothing to add but the
            // news; the release after it hands the lock to the preemptor.
            messages::notice(
                self.config,
                format_args!(
                    "'{}' was {}; the command is being stopped already",
                    self.lock.keys.name,
                    preemption.reason()
                ),
            );
            self.preempted = Some((preemption, Instant::now()));
            return;
        }
        let action = match self.args.on_lost {
            OnLost::Term => format!(
                "sending SIGTERM to the command (SIGKILL after {})",
                human_ms(self.args.kill_after)
            ),
            OnLost::Kill => "killing the command".to_string(),
            OnLost::Ignore => "letting the command finish (--on-lost ignore)".to_string(),
        };
        messages::alert(format_args!(
            "'{}' was {} after {}; {action}, then releasing the lock to them",
            self.lock.keys.name,
            preemption.reason(),
            human_ms(self.lock.sent.elapsed()),
        ));
        self.preempted = Some((preemption, Instant::now()));
        match self.args.on_lost {
            OnLost::Term => {
                self.send(SIGTERM);
                if self.kill_at.is_none() {
                    self.kill_at = Instant::now().checked_add(self.args.kill_after);
                }
            }
            OnLost::Kill => self.send(SIGKILL),
            OnLost::Ignore => {}
        }
    }

    /// Whether the command is being stopped because the lock was lost or preempted (not with
    /// `--on-lost ignore`).
    fn stopping_for_the_lock(&self) -> bool {
        (self.lost.is_some() || self.preempted.is_some()) && self.args.on_lost != OnLost::Ignore
    }

    fn send(&mut self, signo: i32) {
        self.child.signal(signo);
    }

    /// `--warn-after` is due: said on stderr, and told to the lock's history on a connection of
    /// its own (the command runs on).
    fn overran(&mut self) {
        let after = self.args.warn_after.unwrap_or_default();
        let reason = format!("has held the lock for {} (--warn-after)", human_ms(after));
        messages::warning(
            self.config,
            format_args!("the command under '{}' {reason}", self.lock.keys.name),
        );
        self.tell(Befell::Overran, reason);
    }

    /// Tells the lock's history what befell the holder, on a thread and connection of its own:
    /// the command runs on (or is being stopped) meanwhile.
    fn tell(&mut self, what: Befell, reason: String) {
        let (config, lock) = (self.config.clone(), self.lock.clone());
        let spawned = std::thread::Builder::new()
            .name("tell".into())
            .spawn(move || {
                if let Ok(mut store) = backend::open(&config)
                    && let Some(redis) = store.parking()
                {
                    let (keys, token, fence) = (&lock.keys, &lock.token, lock.fence);
                    let _ = lock::report(redis, keys, token, fence, what, &reason);
                }
            });
        if let Ok(thread) = spawned {
            self.telling.push(thread);
        }
    }

    /// `--max-runtime` ran out (it was due at `due`): the command is stopped as on a lost lock
    /// (SIGTERM, SIGKILL after --kill-after; what it leaves running is stopped after it, see
    /// [`stop_leftovers`]); exec exits 124 unless the lock was lost before.
    fn time_out(&mut self, due: Instant) {
        let now = Instant::now();
        let limit = self.args.max_runtime.unwrap_or_default();
        messages::alert(format_args!(
            "the command under '{}' has held the lock for {} (--max-runtime); sending SIGTERM \
             (SIGKILL after {})",
            self.lock.keys.name,
            human_ms(limit),
            human_ms(self.args.kill_after)
        ));
        self.timed_out = Some(due);
        self.send(SIGTERM);
        if self.kill_at.is_none() {
            self.kill_at = now.checked_add(self.args.kill_after);
        }
        let reason = format!(
            "held the lock for {} (--max-runtime): stopped",
            human_ms(limit)
        );
        self.tell(Befell::Timeout, reason);
    }

    /// Starts the renewals now if they had not started yet (a command stopped before its first
    /// renewal was due), so that the lock lasts while its leftovers are stopped.
    fn renew_from_now(&mut self) {
        if let Some(due) = self.renewal.take()
            && self.lost.is_none()
        {
            self.start_renewal(due);
        }
    }

    /// Hands the connection to a renewal thread, started now.
    fn start_renewal(&mut self, due: PendingRenewal) {
        if let Connection::Here(store) = std::mem::replace(&mut self.connection, Connection::Gone)
            && let Some(thread) = start_renewal(self.lock.clone(), store, due.stop, due.tx)
        {
            self.connection = Connection::Renewing(thread);
        }
    }

    /// The connection the lock was taken on, back from the renewal thread once the renewals
    /// were told to stop (waiting for one in flight); a new one if the thread lost it.
    fn connection_back(&mut self) -> Result<Box<dyn Store>> {
        match std::mem::replace(&mut self.connection, Connection::Gone) {
            Connection::Here(store) => Ok(store),
            Connection::Renewing(thread) => match thread.join() {
                Ok(store) => Ok(store),
                Err(_) => backend::open(self.config),
            },
            Connection::Gone => backend::open(self.config),
        }
    }

    /// Whether redlock itself told the command to stop: the limit ran out, the lock was lost
    /// (unless `--on-lost ignore`), or a SIGINT/SIGTERM was passed on.
    fn stopped_the_command(&self) -> bool {
        self.timed_out.is_some() || self.terminations > 0 || self.stopping_for_the_lock()
    }

    /// Whether `--max-runtime` ran out before any loss of the lock was noticed: it decides the
    /// exit status (124) then.
    fn timed_out_first(&self) -> bool {
        let preempted_at = self.preempted.as_ref().map(|p| p.1);
        let first = match (self.lost_at, preempted_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.timed_out
            .is_some_and(|t| first.is_none_or(|other| t < other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(255 << 8)), 255);
        assert_eq!(exit_code(ExitStatus::from_raw(SIGSEGV)), 139);
        assert_eq!(exit_code(ExitStatus::from_raw(SIGKILL)), 137);
    }

    /// Lost or not, and what `--on-lost` says, decide between the command's status and 75.
    #[test]
    fn a_lost_lock_is_75_unless_ignore_keeps_a_success() {
        use OnLost::*;
        for (child, lost, on_lost, expected) in [
            (0, false, Term, 0),
            (3, false, Term, 3),
            (0, false, Ignore, 0),
            (0, true, Term, 75),
            (0, true, Kill, 75),
            (143, true, Term, 75),
            (0, true, Ignore, 0),
            (3, true, Ignore, 75),
            (130, true, Ignore, 75),
        ] {
            assert_eq!(
                exit_status(child, lost, on_lost),
                expected,
                "child {child}, lost {lost}, --on-lost {on_lost:?}"
            );
        }
    }

    /// The command line is CMD [ARGS...] or `sh -c` with `-c`; none, or an empty CMD, is a usage
    /// error.
    #[test]
    fn the_command_is_its_words_or_a_shell_command() {
        use clap::Parser;
        let argv = |words: &[&str]| {
            let cli = crate::cli::Cli::try_parse_from(["redlock", "exec", "k"].iter().chain(words))
                .unwrap();
            let crate::cli::Command::Exec(args) = cli.command else {
                panic!("not exec")
            };
            command_line(&args)
        };
        assert_eq!(argv(&["--", "echo", "a b"]).unwrap(), ["echo", "a b"]);
        assert_eq!(
            argv(&["-c", "echo hi"]).unwrap(),
            ["/bin/sh", "-c", "echo hi"]
        );
        for none in [&["--", ""][..], &[]] {
            let err = argv(none).unwrap_err();
            assert_eq!(crate::error::exit_code(&err), exit::USAGE, "{none:?}");
        }
    }

    /// What `exec` says when the lock was not provably held to the end, word for word.
    #[test]
    fn an_unprotected_run_is_said_with_its_reasons() {
        let why = [
            "at release, the lock key is gone".to_string(),
            "b".to_string(),
        ];
        assert_eq!(
            unprotected("k", true, &why[..1], false),
            "lost the lock 'k' during the command (found after it ended): at release, the lock \
             key is gone; it may have run without the lock"
        );
        assert_eq!(
            unprotected("k", false, &why, true),
            "cannot confirm that 'k' was held to the end of the command: at release, the lock \
             key is gone; b; it may have run without the lock (exit status 0 kept: --on-lost \
             ignore)"
        );
    }

    /// Fails if looking for a stop signal before the command starts throws away the announcement
    /// of a forced release that arrived meanwhile (the supervisor would learn it only at the next
    /// renewal).
    #[test]
    fn looking_for_a_stop_keeps_the_other_events() {
        let (tx, rx) = mpsc::channel();
        let taken = || Event::TakenAway {
            token: "t".into(),
            why: "forced".into(),
        };
        let signal = |signo| {
            Event::Signal(Signal {
                signo,
                from_terminal: false,
            })
        };
        tx.send(taken()).unwrap();
        assert_eq!(pending_stop(&rx, &tx), None);
        assert!(matches!(rx.try_recv(), Ok(Event::TakenAway { .. })));

        tx.send(taken()).unwrap();
        tx.send(signal(libc::SIGUSR1)).unwrap();
        tx.send(signal(SIGTERM)).unwrap();
        assert_eq!(pending_stop(&rx, &tx), Some(SIGTERM));
        assert!(matches!(rx.try_recv(), Ok(Event::TakenAway { .. })));
        assert!(matches!(rx.try_recv(), Ok(Event::Signal(s)) if s.signo == libc::SIGUSR1));
        assert!(rx.try_recv().is_err());
    }
}
