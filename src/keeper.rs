//! `acquire --while-pid PID`: the keeper, a detached process that keeps the lock alive while PID
//! and the work it started run, and releases it once they have all ended. (`acquire` starts it
//! with [`start`](crate::brief::start), in `brief.rs`.)
//!
//! Why a re-exec: `acquire` runs its own binary again (`/proc/self/exe`: the very file, even if
//! it was replaced or deleted since) with `argv[0]` [`ARGV0`](crate::brief::ARGV0), rather than forking
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
//! Layer 13 of the list in `lib.rs`.

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::backend;
use crate::brief::{Brief, Pid, READY_GRACE, RUNNING, awaited_word, detach};
use crate::cli::{AcquireArgs, PidOnLost};
use crate::config::Config;
use crate::error::exit_code;
use crate::events::Event;
use crate::exit;
use crate::lock::{self, Lock, Verdict};
use crate::messages;
use crate::notify;
use crate::os;
use crate::renew::{Renewal, Renewed};
use crate::signals::{self, Signal};
use crate::store::{Store, loss_reason};
use crate::tell;
use crate::work::{self, Work};

mod end;
mod stop;

use stop::Drain;

/// Once PID has ended, the keeper lets go of a pipe or FIFO it kept on its stderr (PID's own, see
/// `brief::stderr_may_stay`: /dev/null in its place) when one of the processes left (`left`) reads
/// it: that reader (`SCRIPT 2>&1 | tee` under job control puts `tee` in PID's group) waits for
/// the pipe's end, and the keeper would wait for the reader, for ever. A pipe read by someone
/// outside the work (a CI log, a test harness) is kept for the keeper's later warnings. Returns
/// whether it let go. (A loss is also told to the lock's history.)
fn let_go_of_stderr_read_by(left: &[i32]) -> bool {
    let Ok(st) = os::file_id(std::io::stderr()) else {
        return false;
    };
    if st.kind != rustix::fs::FileType::Fifo || !work::one_reads(left, st.dev, st.ino) {
        return false;
    }
    let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") else {
        return false;
    };
    os::set_stderr(&null).is_ok()
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
pub fn keep(config: &Config, args: &AcquireArgs, mut brief: Brief) -> Result<u8> {
    let (pid, mut ready) = brief.inherited()?;
    // acquire's word comes on stdin, which `detach` puts on /dev/null: kept aside first.
    let word = os::dup_cloexec(std::io::stdin()).ok();
    let (tx, rx) = mpsc::channel::<Wake>();
    let keeper = match prepare(config, args, &brief, pid, &tx, ready.as_fd()) {
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
    let bound = config.io_timeout * 4 + READY_GRACE;
    if said.is_err() || !word.is_some_and(|w| awaited_word(w, bound)) {
        return Ok(keeper.abandon());
    }
    Ok(keeper.run(&rx))
}

/// Everything before the keeper says it runs: detached, the signals, the watchers, a connection.
fn prepare<'a>(
    config: &'a Config,
    args: &AcquireArgs,
    brief: &Brief,
    pid: Pid,
    tx: &Sender<Wake>,
    ready: BorrowedFd<'_>,
) -> Result<Keeper<'a>> {
    pid.set_cloexec();
    detach()?;
    let keys = lock::Keys::new(&config.prefix, &args.key)?;
    let lock = brief.lock(keys);
    signals::deliver(&[libc::SIGTERM], tx.clone(), Wake::Signal)?;
    pid.watch(tx.clone(), Wake::PidEnded)?;
    let events = forward_notices(tx.clone())?;
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
    await_listening(config, &lock.keys, &subscribed, ready);
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

/// A thread that passes the announcements `notify` hears on as the keeper's wakes; the sender
/// to give `notify`.
fn forward_notices(tx: Sender<Wake>) -> Result<Sender<Event>> {
    let (events, heard) = mpsc::channel::<Event>();
    std::thread::Builder::new()
        .name("forward".into())
        .spawn(move || {
            for event in heard {
                if tx.send(Wake::Notice(event)).is_err() {
                    return;
                }
            }
        })
        .context("cannot start the keeper's threads")?;
    Ok(events)
}

/// "Running" means listening: a release right after acquire returned is heard. Not forever: a
/// user without the channel is refused at once, and a subscription still on its way when the
/// bound passes only makes the release's mark the way the keeper learns of it. Nor longer than
/// acquire waits: killed meanwhile, it has closed the readiness pipe (`ready`), and the lock
/// whose token nobody received is given back at once (see `keep`).
fn await_listening(
    config: &Config,
    keys: &lock::Keys,
    subscribed: &notify::Subscribed,
    ready: BorrowedFd<'_>,
) {
    let bound = Instant::now() + config.connect_timeout + config.io_timeout;
    let listening = loop {
        match subscribed.settled_within(Duration::from_millis(50)) {
            Some(subscribed) => break subscribed,
            None if os::peer_gone(ready, false) || Instant::now() >= bound => break false,
            None => {}
        }
    };
    if !listening {
        messages::log(config, || {
            format!(
                "not subscribed to {}: the keeper learns of a release at its next renewal",
                keys.events()
            )
        });
    }
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
        // Counted from before a lost connection is opened again, as before the shared renewal:
        // the time a reconnection takes moves neither the deadline nor the next renewal later.
        let started = Instant::now();
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
            Renewed::Ours { asked, .. } => {
                self.renewed(started);
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
        // (Counted from before a connection is opened again, as in `renew`.)
        let started = Instant::now();
        let Ok(store) = connected(&mut self.store, self.config, &self.lock) else {
            return;
        };
        if let (_, Ok(Verdict::Done(_) | Verdict::Preempted(_))) = self.renewal.send(store, true) {
            self.renewed(started);
        }
    }

    /// The renewal sent at `sent` succeeded: the next is due a TTL/3 after it, whether it was
    /// a scheduled one or the one that marks the lock `draining` ([`Keeper::mark_stopping`]).
    fn renewed(&mut self, sent: Instant) {
        self.renewal.renewed(sent);
        self.renewal.last_error = None;
        self.renewal.due_after(sent);
    }
}
