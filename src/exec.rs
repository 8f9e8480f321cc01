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
//!   a command that redlock's user may not signal. Where there is no parent-death signal
//!   (macOS: see `platform`), a watchdog is started with every command instead, and a kill of
//!   both redlock and its watchdog leaves the command running.
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
//!   keeps a success: see [`end::exit_status`]).
//!
//! `--report` notes what happened as the steps go ([`Facts`]) and writes one JSON line at the
//! end, whatever the outcome ([`Report`]); never the token, only its fingerprint.
//!
//! Its parts, each with one reason to change: `exec/command.rs` (the command's words, its start
//! with the lock's variables, its status), `exec/end.rs` (the release and the exit status),
//! `exec/facts.rs` (what `--report` says), `exec/leftovers.rs` (what a stopped command left
//! running). The renewal is the one all holders share (`renew.rs`).
//!
//! Layer 13 of the list in `lib.rs`.

mod command;
mod end;
mod facts;
mod leftovers;

use std::ops::ControlFlow;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use signal_hook::consts::signal::*;

use crate::backend;
use crate::cli::{ExecArgs, OnLost};
use crate::config::Config;
use crate::events::{self, Event};
use crate::exit;
use crate::lock::{self, Befell, Keys, Lock, Preemption};
use crate::messages;
use crate::notify;
use crate::output::human_ms;
use crate::owner;
use crate::park;
use crate::renew::{Renewal, Renewed};
use crate::signals::{self, Signal};
use crate::spawn::{self, Child};
use crate::store::{Store, loss_reason};
use crate::take::{GaveUp, take_lock};

use command::{command_line, exit_code, spawn};
use end::{conclude, release_after};
use facts::Facts;
use leftovers::stop_leftovers;

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
        // (see `park.rs`): the report's line is written there.
        let (report, key, started) = (report.try_clone()?, args.key.clone(), facts.started);
        park::before_exit(Some(Box::new(move |sig, code| {
            let mut facts = Facts::new();
            facts.started = started;
            facts.signal = Some(sig);
            report.write(&facts.json(&key, code));
        })));
    }
    let result = supervise(config, args, &mut facts);
    park::before_exit(None);
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
    let handled = signals::deliver(&watched, tx.clone(), park::signal_event)?;

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
    messages::log(config, || holding(&lock, child.id()));
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    // The connection the lock was taken on renews it, and comes back for the release: a holder
    // needs no new connection while its command runs, which a server full of waiters
    // (maxclients) could refuse.
    let mut supervisor = Supervisor::new(config, args, &lock, child, tx, stop_rx, store);
    let status = supervisor.run(&rx);
    after(config, args, supervisor, status, stop_tx, facts)
}

/// What `exec -v` says once the command started as `pid` under `lock`.
fn holding(lock: &Lock, pid: u32) -> String {
    let place = match &lock.slot {
        Some(s) => match &s.resource {
            Some(r) => format!(", slot {} '{r}'", s.index),
            None => format!(", slot {}", s.index),
        },
        None => String::new(),
    };
    format!(
        "holding '{}' (fence {}{place}); started pid {pid}",
        lock.keys.name, lock.fence
    )
}

/// Once the command ended with `status` under `supervisor`: stops what it left running, stops
/// the renewals (by dropping `stop`), and releases the lock; returns `exec`'s exit status.
fn after(
    config: &Config,
    args: &ExecArgs,
    mut supervisor: Supervisor<'_>,
    status: Result<ExitStatus>,
    stop: Sender<()>,
    facts: &mut Facts,
) -> Result<u8> {
    // What a command stopped by redlock left running is stopped too, while the renewals still
    // keep the lock (it may take --kill-after and more); then the renewals stop, before the
    // release.
    if adopts_orphans(args) && supervisor.stopped_the_command() {
        supervisor.renew_from_now();
        stop_leftovers(config, args.kill_after);
    }
    // (A group's watchdog stayed for that: a kill -9 meanwhile stops what is left.)
    supervisor.dismiss_watchdog();
    drop(stop);
    let mut store = supervisor.connection_back()?;
    match status {
        Ok(status) => {
            facts.command = Some(exit_code(status));
            facts.signal = status.signal();
            let code = conclude(store.as_mut(), supervisor, exit_code(status), facts);
            facts.released = Some(Instant::now());
            Ok(code)
        }
        Err(e) => release_after(config, store.as_mut(), supervisor.lock, Err(e), facts),
    }
}

/// Whether exec adopts the command's orphans, to stop them with it (`--max-runtime`,
/// `--preemptible`: the two ways redlock stops a command and hands the lock on while it may
/// have children).
fn adopts_orphans(args: &ExecArgs) -> bool {
    args.max_runtime.is_some() || args.lock.preemptible
}

/// A stop signal already delivered, if any. The other events go back on the channel (`tx` is
/// its sender) for the supervisor: a forced release of the lock we have just taken may be among
/// them, and dropping it would leave the loss to the next renewal.
fn pending_stop(rx: &Receiver<Event>, tx: &Sender<Event>) -> Option<i32> {
    let mut stop = None;
    for event in rx.try_iter().collect::<Vec<_>>() {
        match events::stop_signal(&event) {
            Some(sig) if stop.is_none() => stop = Some(sig),
            _ => {
                let _ = tx.send(event);
            }
        }
    }
    stop
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
            .and_then(|file| crate::os::set_blocking(&file).map(|()| file))
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

/// A sealed, read-only memory file holding `password` (an unlinked temporary file readable by
/// its owner alone on macOS), which the command inherits: the
/// descriptor is not close-on-exec. It is made just before the spawn and closed by the caller
/// right after, and nothing else in redlock starts a process meanwhile, so only the command gets
/// it. It is at least 3, so that it never stands in for a closed stdin, stdout or stderr.
fn password_fd(password: &str) -> std::io::Result<OwnedFd> {
    if password.contains('\n') {
        // A password file gives its first line only.
        return Err(std::io::Error::other("the password holds a line break"));
    }
    crate::platform::password_file(c"redlock-password", password.as_bytes())
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
    let spawned = std::thread::Builder::new()
        .name("renewal".into())
        .spawn(move || {
            // A renewal tells of a server restarted since the acquisition (its run_id changed).
            store.track_restarts(&lock.run_ids);
            let mut renewal = Renewal::new(&lock);
            let mut next = Duration::ZERO;
            loop {
                if stop.recv_timeout(next) != Err(RecvTimeoutError::Timeout) {
                    return store;
                }
                let event = match renewal.renew(store.as_mut(), false) {
                    Renewed::Ours { sent, asked: None } => Event::Renewed(sent),
                    Renewed::Ours {
                        sent,
                        asked: Some(preemption),
                    } => {
                        // Still ours, and renewed until the command has stopped.
                        if tx.send(Event::Renewed(sent)).is_err() {
                            return store;
                        }
                        let token = lock.token.clone();
                        Event::Preempted { token, preemption }
                    }
                    Renewed::Gone(lost) => Event::Lost(loss_reason(store.as_mut(), &lock, &lost)),
                    Renewed::Failed { error, .. } => Event::RenewFailed(format!("{error:#}")),
                };
                next = renewal.due_in();
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

/// The supervisor of one command: the lock it runs under, and what it keeps track of, by
/// concern.
struct Supervisor<'a> {
    config: &'a Config,
    args: &'a ExecArgs,
    lock: &'a Lock,
    child: Child,
    keeping: Keeping,
    stopping: Stopping,
    fate: Fate,
    limits: Limits,
    guard: Guard,
}

/// How the lock is kept while the command runs.
struct Keeping {
    /// When to start listening for a forced release ([`LISTEN_AFTER`]), and where to report it.
    listening: Option<(Instant, Sender<Event>)>,
    /// Started when the first renewal is due.
    renewal: Option<PendingRenewal>,
    /// The connection the lock was taken on, which renews it (see [`Connection`]).
    connection: Connection,
    /// Until when the lock is surely ours, and why the last renewal failed, as the renewal
    /// thread's events tell.
    lease: Renewal,
}

/// How the command is being stopped, by us or by signals passed on.
struct Stopping {
    /// When to send SIGKILL, after a SIGTERM we sent or forwarded.
    kill_at: Option<Instant>,
    /// SIGINT/SIGTERM received so far: the second escalates to SIGKILL.
    terminations: u32,
    /// We lead our session, so a terminal hangup reached us alone.
    session_leader: bool,
}

/// What befell the lock and the command while it ran.
#[derive(Default)]
struct Fate {
    /// Why the lock was lost while the command ran (said, and acted on, at once).
    lost: Option<String>,
    /// Why the lock was not provably ours when the command's exit was seen, although no loss had
    /// been noticed while it ran: its deadline had passed, or a loss was still on the channel.
    lost_unseen: Option<String>,
    /// When the loss in `lost` was noticed.
    lost_at: Option<Instant>,
    /// A `--preempt` waiter asked us to stop (`--preemptible`), and when we heard of it: the
    /// command is stopped as on a lost lock, but the lock is still ours, renewed and released.
    preempted: Option<(Preemption, Instant)>,
    /// When `--max-runtime` ran out and the command was told to stop.
    timed_out: Option<Instant>,
}

/// `--warn-after` and `--max-runtime`, counted from the acquisition.
struct Limits {
    /// When the warning is due; `None` once said.
    warn_at: Option<Instant>,
    /// When the command is stopped.
    limit_at: Option<Instant>,
    /// The threads telling the lock's history of the warning or the limit, joined before the
    /// release (so that the history has them in order).
    telling: Vec<std::thread::JoinHandle<()>>,
}

/// What stops the command if redlock dies.
struct Guard {
    /// When to look next whether the command changed its credentials (see
    /// [`spawn::credentials_changed`]), and the pause after; `None` once it did.
    credentials_check: Option<(Instant, Duration)>,
    /// Stops the command if redlock dies, when its parent-death signal was cleared.
    watchdog: Option<spawn::Watchdog>,
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
        let lease = Renewal::new(lock);
        Supervisor {
            config,
            args,
            lock,
            child,
            keeping: Keeping {
                // A forced release while the command runs reaches us at once (else at the next
                // renewal).
                listening: Some((Instant::now() + LISTEN_AFTER, tx.clone())),
                renewal: Some(PendingRenewal {
                    at: lease.next,
                    stop,
                    tx,
                }),
                connection: Connection::Here(store),
                lease,
            },
            stopping: Stopping {
                kill_at: None,
                terminations: 0,
                session_leader: crate::os::leads_session(),
            },
            fate: Fate::default(),
            limits: Limits {
                // The wait for the lock does not count: the clock starts when it was taken.
                warn_at: args.warn_after.and_then(|d| lock.taken.checked_add(d)),
                limit_at: args.max_runtime.and_then(|d| lock.taken.checked_add(d)),
                telling: Vec::new(),
            },
            guard: Guard {
                credentials_check: Some((Instant::now() + FIRST_LOOK, FIRST_LOOK)),
                watchdog,
            },
        }
    }
}

/// A watchdog over our whole process group when we lead it (a terminal's job, cron's `sh -c`
/// that execs us, `setsid`): at a `kill -9` of redlock it stops what the command started too,
/// which the parent-death signal (the command's alone) leaves running beside the next holder.
/// When we do not lead our group (one line of a script: the group is the script's), the group
/// is never signalled and only the command is stopped. It is started with the command, not
/// later, so that no kill is missed; a fork costs little (measured on `exec -- true`).
///
/// Where the kernel has no parent-death signal (macOS: see `platform`), a watchdog over the
/// command alone is started otherwise, since nothing else would stop it.
fn group_watchdog(child: &Child, grace: Duration) -> Option<spawn::Watchdog> {
    let group = crate::os::leads_process_group().then(crate::os::pid);
    if group.is_none() && crate::platform::DEATH_SIGNAL {
        return None;
    }
    match spawn::Watchdog::start(child.id() as libc::pid_t, group, grace) {
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
        if self.fate.lost.is_none() && now >= self.keeping.lease.deadline {
            let why = self.keeping.lease.ran_out();
            // Due at the deadline, however late this pass noticed it.
            let at = self.keeping.lease.deadline;
            self.lose(why, at);
        }
        if self.stopping.kill_at.is_some_and(|t| now >= t) {
            self.stopping.kill_at = None;
            self.send(SIGKILL);
        }
        if let Some(due) = self.keeping.renewal.take_if(|r| now >= r.at)
            && self.fate.lost.is_none()
        {
            self.start_renewal(due);
        }
        if let Some((_, tx)) = self.keeping.listening.take_if(|(at, _)| now >= *at)
            && self.fate.lost.is_none()
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
        if let Some(due) = self.limits.limit_at.take_if(|at| now >= *at) {
            // A warning not said yet has no point once the command is being stopped.
            self.limits.warn_at = None;
            // Being stopped already (its lock lost, or a SIGINT/SIGTERM passed on): the limit
            // adds nothing, and the first cause decides.
            let stopping = self.stopping.terminations > 0 || self.stopping_for_the_lock();
            if !stopping {
                self.time_out(due);
            }
        }
        if self.limits.warn_at.take_if(|at| now >= *at).is_some() {
            self.overran();
        }
        if let Some((at, pause)) = self.guard.credentials_check
            && now >= at
        {
            self.guard.credentials_check = Some((now + pause, (pause * 4).min(POLL_CAP)));
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
        self.guard.credentials_check = None;
        let unprotected = "it would run on without the lock if redlock were killed";
        let stopped_by = if !spawn::may_signal(pid) {
            // A watchdog with our credentials could not stop it either.
            format!("redlock's user may not signal it, so {unprotected}")
        } else if self.guard.watchdog.is_some() {
            // The group's watchdog (see `group_watchdog`) stops it with the rest of the group.
            "a watchdog process stops it if redlock dies".to_string()
        } else {
            match spawn::Watchdog::start(pid, None, self.args.kill_after) {
                Ok(watchdog) => {
                    self.guard.watchdog = Some(watchdog);
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
        self.guard.watchdog = None;
    }

    /// When [`act_on_time`](Self::act_on_time) has something to do next, or [`POLL_CAP`] from
    /// `now` at the latest.
    fn next_wake(&self, now: Instant) -> Instant {
        let mut wake = now + POLL_CAP;
        if let Some(r) = &self.keeping.renewal {
            wake = wake.min(r.at);
        }
        if let Some((at, _)) = &self.keeping.listening {
            wake = wake.min(*at);
        }
        if self.fate.lost.is_none() {
            wake = wake.min(self.keeping.lease.deadline);
        }
        let credentials = self.guard.credentials_check.map(|(at, _)| at);
        for t in [
            self.stopping.kill_at,
            self.limits.warn_at,
            self.limits.limit_at,
            credentials,
        ]
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
                if self.fate.lost.is_none() {
                    self.keeping.lease.renewed(sent);
                }
            }
            Event::RenewFailed(e) => {
                if self.fate.lost.is_none() && self.keeping.lease.last_error.is_none() {
                    self.keeping.lease.say_failed(self.config, "", &e);
                }
                self.keeping.lease.failed(e);
            }
            Event::Lost(why) => {
                if self.fate.lost.is_none() {
                    self.lose(why, Instant::now());
                }
            }
            Event::TakenAway { token, why } => {
                if self.fate.lost.is_none() && token == self.lock.token {
                    self.lose(why, Instant::now());
                }
            }
            // Only a holder that opted in is ever asked (anyone who may publish on the channel
            // could send this).
            Event::Preempted { token, preemption } => {
                if self.args.lock.preemptible
                    && self.fate.lost.is_none()
                    && self.fate.preempted.is_none()
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
        if self.fate.lost.is_some() {
            return;
        }
        for event in rx.try_iter() {
            match event {
                Event::Renewed(sent) => {
                    self.keeping.lease.renewed(sent);
                }
                Event::RenewFailed(e) => {
                    self.keeping.lease.failed(e);
                }
                Event::Lost(why) => {
                    self.fate.lost_unseen.get_or_insert(why);
                }
                Event::TakenAway { token, why } if token == self.lock.token => {
                    self.fate.lost_unseen.get_or_insert(why);
                }
                // The command is gone: nothing to forward a signal to.
                _ => {}
            }
        }
        if self.fate.lost_unseen.is_none() && reaped >= self.keeping.lease.deadline {
            let why = match &self.keeping.lease.last_error {
                Some(e) => format!("no renewal succeeded before the lock's TTL ran out ({e})"),
                None => "no renewal succeeded before the lock's TTL ran out (redlock was stopped \
                         or starved meanwhile)"
                    .to_string(),
            };
            self.fate.lost_unseen = Some(why);
        }
    }

    fn forward(&mut self, s: Signal) {
        // Ctrl-C and Ctrl-\ from a terminal go to its whole foreground process group. A hangup
        // goes to the session leader only, so it reached the child too unless we lead the session
        // (ssh -t, script -c): then only we got it.
        let group_wide = match s.signo {
            SIGINT | SIGQUIT => true,
            SIGHUP => !self.stopping.session_leader,
            _ => false,
        };
        let terminating = matches!(s.signo, SIGINT | SIGTERM);
        if terminating {
            self.stopping.terminations += 1;
        }
        if self.stopping.terminations >= 2 && terminating {
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
        if terminating && self.stopping.kill_at.is_none() {
            self.stopping.kill_at = Instant::now().checked_add(self.args.kill_after);
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
            human_ms(self.lock.taken.elapsed()),
        ));
        self.fate.lost = Some(why);
        self.fate.lost_at = Some(at);
        match self.args.on_lost {
            OnLost::Term if stopping => {}
            OnLost::Term => {
                self.send(SIGTERM);
                self.stopping.kill_at = Instant::now().checked_add(self.args.kill_after);
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
            self.fate.preempted = Some((preemption, Instant::now()));
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
            human_ms(self.lock.taken.elapsed()),
        ));
        self.fate.preempted = Some((preemption, Instant::now()));
        match self.args.on_lost {
            OnLost::Term => {
                self.send(SIGTERM);
                if self.stopping.kill_at.is_none() {
                    self.stopping.kill_at = Instant::now().checked_add(self.args.kill_after);
                }
            }
            OnLost::Kill => self.send(SIGKILL),
            OnLost::Ignore => {}
        }
    }

    /// Whether the command is being stopped because the lock was lost or preempted (not with
    /// `--on-lost ignore`).
    fn stopping_for_the_lock(&self) -> bool {
        (self.fate.lost.is_some() || self.fate.preempted.is_some())
            && self.args.on_lost != OnLost::Ignore
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
            self.limits.telling.push(thread);
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
        self.fate.timed_out = Some(due);
        self.send(SIGTERM);
        if self.stopping.kill_at.is_none() {
            self.stopping.kill_at = now.checked_add(self.args.kill_after);
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
        if let Some(due) = self.keeping.renewal.take()
            && self.fate.lost.is_none()
        {
            self.start_renewal(due);
        }
    }

    /// Hands the connection to a renewal thread, started now.
    fn start_renewal(&mut self, due: PendingRenewal) {
        if let Connection::Here(store) =
            std::mem::replace(&mut self.keeping.connection, Connection::Gone)
            && let Some(thread) = start_renewal(self.lock.clone(), store, due.stop, due.tx)
        {
            self.keeping.connection = Connection::Renewing(thread);
        }
    }

    /// The connection the lock was taken on, back from the renewal thread once the renewals
    /// were told to stop (waiting for one in flight); a new one if the thread lost it.
    fn connection_back(&mut self) -> Result<Box<dyn Store>> {
        match std::mem::replace(&mut self.keeping.connection, Connection::Gone) {
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
        self.fate.timed_out.is_some()
            || self.stopping.terminations > 0
            || self.stopping_for_the_lock()
    }

    /// Whether `--max-runtime` ran out before any loss of the lock was noticed: it decides the
    /// exit status (124) then.
    fn timed_out_first(&self) -> bool {
        let preempted_at = self.fate.preempted.as_ref().map(|p| p.1);
        let first = match (self.fate.lost_at, preempted_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.fate
            .timed_out
            .is_some_and(|t| first.is_none_or(|other| t < other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
