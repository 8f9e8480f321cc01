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
//!   own ([`Releaser::keeper`]: nobody is left to read one; a kept place's marker goes too).
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
//! Layer 12 of the list in `lib.rs`.

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};

use crate::backend;
use crate::brief::{Brief, Pid, READY_GRACE, RUNNING, awaited_word, detach};
use crate::cli::{AcquireArgs, PidOnLost};
use crate::config::Config;
use crate::error::exit_code;
use crate::exit;
use crate::lock::{self, Befell, Lock, Preemption, Releaser, Verdict, human_ms};
use crate::messages;
use crate::notify;
use crate::os;
use crate::signals::{self, Signal};
use crate::store::{Store, loss_reason};
use crate::tell;
use crate::wait::Event;
use crate::work::{self, Stop, Work};

/// How often the keeper looks whether PID's work has ended, while it waits for that: first,
/// then at most (doubling in between). A look is one `kill(-pgid, 0)` once the group is empty.
const FIRST_LOOK: Duration = Duration::from_millis(20);
const LAST_LOOK: Duration = Duration::from_millis(250);

/// "1 process", "2 processes".
fn processes(n: usize) -> String {
    if n == 1 {
        "1 process".to_string()
    } else {
        format!("{n} processes")
    }
}

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
            None if os::peer_gone(ready, false) || Instant::now() >= bound => break false,
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
        deadline: lock.valid_until(lock.sent),
        next_renewal: lock.sent + lock.renewal_interval(),
        lock,
        store: Some(store),
        last_error: None,
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

struct Keeper<'a> {
    config: &'a Config,
    on_lost: PidOnLost,
    pid: Pid,
    lock: Lock,
    /// `None` after a connection failed and could not be recovered: opened again at the next
    /// renewal.
    store: Option<Box<dyn Store>>,
    /// The lock is surely ours until then (monotonic clock).
    deadline: Instant,
    next_renewal: Instant,
    last_error: Option<String>,
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

/// The keeper waits for PID's work to end, then releases the lock.
struct Drain {
    /// The SIGTERM that made the keeper stop it, if one did.
    signal: Option<Signal>,
    next_look: Instant,
    look: Duration,
    /// The processes left when PID ended were said.
    said: bool,
    /// The keeper let go of the pipe on its stderr, which a process left of the work read.
    let_go: bool,
}

impl Keeper<'_> {
    /// The loop: returns the keeper's exit status.
    fn run(mut self, rx: &Receiver<Wake>) -> u8 {
        let end = loop {
            let now = Instant::now();
            if now >= self.deadline {
                let why = match &self.last_error {
                    Some(e) => format!("no renewal succeeded before the lock's TTL ran out ({e})"),
                    None => "no renewal succeeded before the lock's TTL ran out".to_string(),
                };
                break End::Lost(why);
            }
            if now >= self.next_renewal {
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
            .fold(self.next_renewal.min(self.deadline), Instant::min);
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
            None if self.last_error.is_none() => {
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
    fn store(&mut self) -> Result<&mut Box<dyn Store>> {
        if self.store.is_none() {
            let mut store = backend::open(self.config)?;
            store.track_restarts(&self.lock.run_ids);
            self.store = Some(store);
        }
        Ok(self.store.as_mut().expect("opened above"))
    }

    /// Renews the lock once; `Some` when it turned out not to be ours any more.
    fn renew(&mut self) -> Option<End> {
        let interval = self.lock.renewal_interval();
        let sent = Instant::now();
        let (keys, token, ttl) = (
            self.lock.keys.clone(),
            self.lock.token.clone(),
            self.lock.ttl,
        );
        let (place, draining) = (self.lock.slot.is_some(), self.stopping);
        let verdict = self
            .store()
            .and_then(|store| store.extend(&keys, &token, ttl, place, draining));
        match verdict {
            Ok(Verdict::Done(_)) => {
                self.renewed(sent, interval);
                None
            }
            Ok(Verdict::Preempted(preemption)) => {
                // Still ours, and renewed until PID has ended.
                self.renewed(sent, interval);
                if !self.preempted {
                    self.preempt(&preemption);
                }
                None
            }
            // Its mark says the owner released it (an announcement we missed).
            Ok(Verdict::Released) => Some(End::Released),
            // Anything else is a loss, however it came (a restart, a flush, an eviction, a
            // forced release): PID must hear of it.
            Ok(other) => {
                let store = self.store.as_mut().expect("it answered");
                Some(End::Lost(loss_reason(store.as_mut(), &self.lock, &other)))
            }
            Err(e) => {
                // A fresh connection next time: this one may still have a reply on its way.
                if let Some(store) = self.store.as_mut()
                    && store.recover().is_err()
                {
                    self.store = None;
                }
                if self.last_error.is_none() {
                    messages::notice(
                        self.config,
                        format_args!(
                            "renewing '{}' for pid {} failed: {e:#}; retrying while the lock \
                             lasts ({} left)",
                            self.lock.keys.name,
                            self.pid.pid,
                            human_ms(self.deadline.saturating_duration_since(Instant::now()))
                        ),
                    );
                }
                self.last_error = Some(format!("{e:#}"));
                self.next_renewal = Instant::now() + (interval / 3).max(Duration::from_millis(1));
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
        let interval = self.lock.renewal_interval();
        let sent = Instant::now();
        let (keys, token, ttl) = (
            self.lock.keys.clone(),
            self.lock.token.clone(),
            self.lock.ttl,
        );
        let place = self.lock.slot.is_some();
        if let Ok(Verdict::Done(_) | Verdict::Preempted(_)) = self
            .store()
            .and_then(|store| store.extend(&keys, &token, ttl, place, true))
        {
            self.renewed(sent, interval);
        }
    }

    fn renewed(&mut self, sent: Instant, interval: Duration) {
        if sent < self.deadline {
            self.deadline = self.deadline.max(self.lock.valid_until(sent));
        }
        self.last_error = None;
        // From when this one was sent, so that slow renewals do not push the next ones later.
        self.next_renewal = sent + interval;
    }

    /// What `--on-lost` does to PID and its work, said; and does it (SIGTERM: SIGKILL follows
    /// after `--kill-after`, see [`Keeper::escalate`]), once: told already, it says so.
    fn stop_work(&mut self) -> String {
        if self.told {
            return format!("pid {} was told already", self.pid.pid);
        }
        let pid = self.pid.pid;
        let stop = match self.on_lost {
            PidOnLost::Term => Stop::Term,
            PidOnLost::Kill => Stop::Kill,
            PidOnLost::Ignore => {
                return format!("pid {pid} runs on (--on-lost ignore), with what it started");
            }
        };
        self.told = true;
        if self.pid.ended() && self.work.living().is_empty() {
            return format!("pid {pid} and its work have ended");
        }
        self.signal_work(stop);
        if stop == Stop::Term {
            self.kill_at = Instant::now().checked_add(self.kill_after);
        }
        let signal = signals::name(match stop {
            Stop::Term => libc::SIGTERM,
            Stop::Kill => libc::SIGKILL,
        });
        let found = processes(self.work.known());
        if self.work.is_group() {
            format!(
                "sending {signal} to pid {pid}, its process group and its descendants ({found} \
                 found)"
            )
        } else {
            format!("sending {signal} to pid {pid} and its descendants ({found} found)")
        }
    }

    /// Sends `stop` to PID's work: its group, or its descendants and PID itself (through its
    /// pidfd: never to a later holder of its pid).
    fn signal_work(&mut self, stop: Stop) {
        // Descendants first, while PID's children can still be traced to it.
        self.work.signal(stop);
        if !self.work.is_group() {
            let _ = self.pid.signal(match stop {
                Stop::Term => libc::SIGTERM,
                Stop::Kill => libc::SIGKILL,
            });
        }
    }

    /// `--kill-after` after the keeper's SIGTERM (or a second SIGTERM to the keeper, `hurried`):
    /// what still runs of the work gets SIGKILL.
    fn escalate(&mut self) {
        self.kill_at = None;
        let left = self.work.living();
        if left.is_empty() && self.pid.ended() {
            return;
        }
        self.signal_work(Stop::Kill);
        let why = if self.hurried {
            "the keeper got a second SIGTERM".to_string()
        } else {
            format!(
                "pid {} or its work still ran {} after SIGTERM (--kill-after)",
                self.pid.pid,
                human_ms(self.kill_after)
            )
        };
        messages::alert(format_args!("{why}: sending SIGKILL (pids {left:?})"));
    }

    /// PID has ended, or the keeper stops it (`signal`: the SIGTERM that made it): `Some` (the
    /// release) once PID's work has ended too. Until then the lock stays ours, renewed, and the
    /// loop looks again, less and less often.
    fn drain(&mut self, signal: Option<Signal>) -> Option<End> {
        let now = Instant::now();
        let ended = self.pid.ended();
        let left = self.work.living();
        let drain = self.draining.get_or_insert(Drain {
            signal,
            next_look: now,
            look: FIRST_LOOK,
            said: false,
            let_go: false,
        });
        if signal.is_some() {
            drain.signal = signal;
        }
        if ended && left.is_empty() {
            return Some(End::Release(drain.signal));
        }
        if ended && !drain.let_go {
            drain.let_go = let_go_of_stderr_read_by(&left);
        }
        if ended && !drain.said && !self.told {
            drain.said = true;
            let what = if self.work.is_group() {
                "its process group and descendants"
            } else {
                "its descendants"
            };
            messages::notice(
                self.config,
                format_args!(
                    "pid {} has ended; keeping '{}' until the {} left of {what} {} ended (pids \
                     {left:?})",
                    self.pid.pid,
                    self.lock.keys.name,
                    processes(left.len()),
                    if left.len() == 1 { "has" } else { "have" }
                ),
            );
        }
        drain.next_look = now + drain.look;
        drain.look = (drain.look * 2).min(LAST_LOOK);
        None
    }

    /// SIGTERM came: PID and its work are stopped as `--on-lost` says, and the lock released
    /// once they have ended. With `--on-lost ignore` (PID is never stopped) it is released at
    /// once, and PID runs on without it; a second SIGTERM sends SIGKILL at once.
    fn terminated(&mut self, s: Signal) -> Option<End> {
        if self.on_lost == PidOnLost::Ignore {
            return Some(End::Release(Some(s)));
        }
        if self.draining.as_ref().is_some_and(|d| d.signal.is_some()) {
            self.kill_at = Some(Instant::now());
            self.hurried = true;
            return None;
        }
        self.mark_stopping();
        let action = self.stop_work();
        messages::alert(format_args!(
            "the keeper of '{}' got {}: {action}; releasing the lock once they have ended",
            self.lock.keys.name,
            signals::name(s.signo)
        ));
        self.drain(Some(s))
    }

    /// After a loss, the work the keeper sent SIGTERM gets its SIGKILL after `--kill-after` if it
    /// still runs, as it would have with the lock kept.
    fn finish_stopping(&mut self) {
        let mut look = FIRST_LOOK;
        while let Some(at) = self.kill_at {
            if self.pid.ended() && self.work.living().is_empty() {
                return;
            }
            let now = Instant::now();
            if now >= at {
                self.escalate();
                return;
            }
            std::thread::sleep(look.min(at - now));
            look = (look * 2).min(LAST_LOOK);
        }
    }

    /// A `--preempt` waiter asked for the lock: PID and its work are acted on as on a loss, once;
    /// the lock stays ours, renewed, until they have ended.
    fn preempt(&mut self, preemption: &Preemption) {
        if self.preempted {
            return;
        }
        self.preempted = true;
        self.mark_stopping();
        let action = self.stop_work();
        messages::alert(format_args!(
            "'{}' was {} after {}; {action}, then releasing the lock to them once they have ended",
            self.lock.keys.name,
            preemption.reason(),
            human_ms(self.lock.sent.elapsed()),
        ));
    }

    /// The lock is lost: PID is acted on (unless it was already, preempted), the loss said and
    /// told to the lock's history.
    fn lose(&mut self, why: &str) -> u8 {
        let action = self.stop_work();
        messages::alert(format_args!(
            "lost the lock '{}' at {} after holding it {} for pid {}: {why}; {action}",
            self.lock.keys.name,
            humantime::format_rfc3339_seconds(SystemTime::now()),
            human_ms(self.lock.sent.elapsed()),
            self.pid.pid,
        ));
        self.tell_lost(why);
        self.finish_stopping();
        exit::LOCK_LOST
    }

    /// Tells the lock's history and watchers (`lost.lua`, on the queue node of a quorum). Best
    /// effort: the loss was said on stderr already.
    fn tell_lost(&mut self, why: &str) {
        let lock = self.lock.clone();
        if let Ok(store) = self.store()
            && let Some(redis) = store.parking()
        {
            let _ = lock::report(
                redis,
                &lock.keys,
                &lock.token,
                lock.fence,
                Befell::Lost,
                why,
            );
        }
    }

    /// acquire never said that it printed the token (it was killed, or could not print it):
    /// nobody has the token, so the lock is given back at once.
    fn abandon(mut self) -> u8 {
        messages::log(self.config, || {
            format!(
                "acquire did not hand the token of '{}' on: the keeper releases it",
                self.lock.keys.name
            )
        });
        let by = Releaser::keeper(&self.lock);
        let keys = self.lock.keys.clone();
        match self.store().and_then(|s| s.release(&keys, &by)) {
            Ok(_) => exit::OK,
            Err(e) => exit_code(&e),
        }
    }

    /// PID ended, or SIGTERM came (`signal`): releases the lock, as its keeper (no mark is
    /// left; an owner's release that came first, unheard, is found by its mark).
    fn release(&mut self, signal: Option<Signal>) -> u8 {
        let by = Releaser::keeper(&self.lock);
        let keys = self.lock.keys.clone();
        let released = self
            .store()
            .and_then(|s| s.release(&keys, &by))
            .or_else(|first| {
                // The connection may have gone stale during a long hold: once more on a fresh one.
                self.store = None;
                self.store()
                    .and_then(|s| s.release(&keys, &by))
                    .map_err(|_| first)
            });
        let (name, pid) = (&self.lock.keys.name, self.pid.pid);
        let code = match released {
            Ok(Verdict::Done(_)) => exit::OK,
            // Its owner released it first (PID's end came before the announcement).
            Ok(Verdict::Released) => {
                messages::log(self.config, || {
                    format!("'{name}' was released by its owner; the keeper of pid {pid} ends")
                });
                return exit::OK;
            }
            Ok(other) => {
                let store = self.store.as_mut().expect("it answered");
                let why = loss_reason(store.as_mut(), &self.lock, &other);
                messages::notice(
                    self.config,
                    format_args!("'{name}' was no longer ours at release: {why}"),
                );
                exit::LOCK_LOST
            }
            Err(e) => {
                messages::alert(format_args!(
                    "cannot release '{name}' ({e:#}); it expires within {}",
                    human_ms(self.lock.ttl)
                ));
                exit_code(&e)
            }
        };
        match signal {
            // PID runs on without the lock: the user chose so.
            Some(s) if self.on_lost == PidOnLost::Ignore => messages::alert(format_args!(
                "the keeper of '{name}' got {}: released the lock; pid {pid} runs on without it, \
                 with what it started (--on-lost ignore)",
                signals::name(s.signo)
            )),
            Some(_) => messages::log(self.config, || {
                format!("pid {pid} and its work were stopped: released '{name}'")
            }),
            None => messages::log(self.config, || {
                format!("pid {pid} and its work have ended: released '{name}'")
            }),
        }
        code
    }
}
