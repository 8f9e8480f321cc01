//! Taking a lock and waiting for it, over any [`Store`]: the layer above both stores.
//!
//! Waiting: wake on release, first come first served.
//! - A failed attempt joins the queue (`:q`, ordered by a ticket) in the same script, with a lease
//!   (`:leases`) that covers the wait it is about to do, and a record of who waits and until when
//!   (in the same hash, for `status`; it goes with the lease). The waiter then blocks with BLPOP
//!   on its own wake list `:w:TOKEN`, for at most the holder's remaining TTL (capped at
//!   [`BLOCK_CAP`]), so a holder that dies without releasing is picked up when its key expires.
//! - Release, in the script that deletes the lock, hands it to the first waiter whose lease is
//!   live, and wakes exactly that waiter with one push to its wake list (no herd). One server,
//!   a plain lock: the release *grants* it (the direct hand-over): the key becomes the waiter's
//!   token, with the waiter's holder record and fence, for
//!   [`CLAIM_WINDOW`](crate::lock::CLAIM_WINDOW), and the push says so ([`Grant`]): the waiter
//!   wakes up holding the lock and sends no attempt of its own. Otherwise (a quorum, a waiter
//!   that did not record how it would hold the lock: an older client, a shared lock's reader)
//!   it reserves it: the key becomes `~TOKEN` for the claim window, and the waiter's next
//!   attempt claims the reservation. Newcomers see the key and queue up behind: nobody overtakes
//!   the queue.
//! - A grant is the waiter's from when its last busy attempt was sent (the grant came after that
//!   attempt ran), for the expiry the push states (the claim window); a holder that renews it
//!   (`exec`) uses it at once and renews it to its TTL
//!   [`GRANT_RENEWAL`](crate::renew::GRANT_RENEWAL) later, off the critical path (a shorter
//!   command never renews it; until then a stall of more than the claim window loses it, as one
//!   past its TTL loses a lock taken otherwise); one that does not (`acquire`, which hands the
//!   token to a script) extends it first; and a waiter that reads its grant more than a third of
//!   the window after its last attempt (it was stopped or starved) extends it before it uses it,
//!   which tells it whether the grant is still its own (a forced release or a restart may have
//!   taken it). The push expires with the grant, and every later attempt of the waiter clears an
//!   unread one, so a push read is never older than the waiter's last attempt. A waiter that
//!   never reads it (dead, frozen) holds the queue up for the claim window, no longer than an
//!   unclaimed reservation did.
//! - No lost wake-ups: the waiter is queued before it blocks, and a push that arrives before the
//!   BLPOP stays in the list until the BLPOP takes it.
//! - A waiter that gives up runs `leave.lua` (and passes on a grant or reservation made for it).
//!   One that dies is dropped when its lease runs out; if its turn comes first, the grant (or
//!   reservation) expires unused after [`CLAIM_WINDOW`](crate::lock::CLAIM_WINDOW) and the next
//!   waiter, whose wait is capped, takes over.
//! - A waiter says what it waits for ([`Park::report`]) once the wait has lasted
//!   [`FIRST_REPORT`], then every [`Park::report_every`]: a status read (the holder's record and
//!   our place in the queue, on the queue node) made only when a line is due, so a wait shorter
//!   than [`FIRST_REPORT`] costs no extra round trip. A line is said when the waiter wakes up
//!   anyway (at most [`BLOCK_CAP`] apart), unless [`Park::redraw`] asks for it on time (a
//!   terminal): then the park is cut into ticks that Redis ends itself (BLPOP's own timeout, see
//!   `park.rs`), so the connection stays usable and a push cannot be lost between two ticks.
//! - A waiter that loses Redis (refused, reset, timed out) keeps waiting while its wait lasts: it
//!   looks again with backoff and then goes on with the same token, so its queue entry keeps its
//!   place if its lease is still live (or nobody looked at the queue meanwhile); otherwise it
//!   queues again. See [`ride_out`].
//!
//! The protocol steps (one script call each) are in `lock/`; a quorum counts them in
//! `quorum/`. This module decides only when to ask again and how to give up cleanly.
//!
//! Layer 9 of the list in `lib.rs`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::client::Redis;
use crate::error::{Failure, Kind, failure, kind_of};
use crate::events::Backoff;
use crate::lock::{
    Attempt, BLOCK_CAP, Grant, Keys, Lock, Queue, QuorumVerdict, Releaser, Reply, Request, State,
    Verdict,
};
use crate::store::Store;

/// How long to wait for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    No,
    For(Duration),
    Forever,
}

/// What [`acquire`] is asked for: how long to wait, and what each attempt asks for (its `prev`,
/// `wait`, `waited` and `reply` are the waiter's to fill in, attempt by attempt).
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    pub wait: Wait,
    pub request: Request<'a>,
    /// The lock must last its whole TTL when it is handed back: a release's grant (for the claim
    /// window) is extended first. Not for a holder that renews it from the start (`exec`),
    /// unless it waits for replicas (WAIT counts the client's own writes: the extension is one,
    /// made after the grant).
    pub whole_ttl: bool,
}

/// The outcome of [`acquire`]. (One per command, moved once: not worth a box.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Acquired {
    Held(Lock),
    /// Not acquired: busy when we gave up. The last known holder is included.
    Busy(Option<State>),
    /// A signal stopped the wait; nothing of ours is left in Redis.
    Interrupted(i32),
    /// A later `--supersede` waiter made us leave the queue: who ('user@host (pid N)'); the
    /// script took us out of it, nothing of ours is left.
    Superseded(String),
}

/// How a waiter's block on its wake list ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parked {
    /// Something was pushed: the lock was granted to us (`Some`: the release made us the holder),
    /// or reserved for us or may be free (`None`: the next attempt claims it).
    Woken(Option<Grant>),
    /// The timeout passed: look again (the holder may have died).
    TimedOut,
    /// A signal asks us to stop waiting.
    Interrupted(i32),
    /// A tick ([`Park::park`] with `tick`) ended with nothing pushed, by the server's own timeout:
    /// the connection is free and nothing can have been lost; park again after a status line.
    Ticked,
}

/// What a waiter tells about its wait in a status line.
#[derive(Debug)]
pub struct Waiting<'a> {
    pub keys: &'a Keys,
    /// The lock as the (queue) server sees it; `None` when the read failed.
    pub state: Option<&'a State>,
    /// Waiters ahead of us in the queue; `None` when we are not (or no longer) queued.
    pub ahead: Option<usize>,
    /// Since `acquire` started.
    pub waited: Duration,
    /// We asked for `--preempt`: the line says whether the holder declined.
    pub preempt: bool,
}

/// How long a wait lasts before the waiter says what it waits for: a shorter one says nothing
/// and costs no extra round trip.
pub const FIRST_REPORT: Duration = Duration::from_secs(1);

/// Blocking on a wake list while staying responsive to signals; see `park.rs`.
pub trait Park {
    /// Blocks on the wake list of `token` in the queue of `keys` until it gets a push, `timeout`
    /// passes, or a stop signal arrives. May replace `redis` with a fresh connection.
    /// With `tick`, the server ends the block at `timeout` ([`Parked::Ticked`]), which keeps the
    /// connection (less punctual than our own clock, but a tick only paces status lines).
    fn park(
        &mut self,
        redis: &mut Redis,
        keys: &Keys,
        token: &str,
        timeout: Duration,
        tick: bool,
    ) -> Result<Parked>;
    /// Waits `timeout` without Redis (nobody will wake us), unless a stop signal comes first.
    fn sleep(&mut self, timeout: Duration) -> Result<Parked>;
    /// A stop signal that arrived since the last look, without blocking.
    fn interrupted(&mut self) -> Option<i32>;
    /// Says (once per wait: the caller makes sure) that Redis stopped answering and that we go on
    /// trying until the wait runs out (`forever`: until Redis answers again).
    fn outage(&mut self, keys: &Keys, error: &anyhow::Error, forever: bool);
    /// How often a waiter says what it waits for, after [`FIRST_REPORT`]; `None`: never.
    fn report_every(&self) -> Option<Duration> {
        None
    }
    /// Whether a line must come on time (a redrawn terminal line), cutting the block into ticks;
    /// otherwise it waits for the next wake-up, and the waiter makes no extra block.
    fn redraw(&self) -> bool {
        false
    }
    /// Says what the waiter waits for.
    fn report(&mut self, _waiting: &Waiting) {}
    /// The wait that was reported on is over: `acquired` says after how long, if it was.
    fn end_report(&mut self, _keys: &Keys, _acquired: Option<Duration>) {}
}

/// The first pause before a waiter (of `acquire` or `wait`) that lost Redis tries again; it
/// doubles up to [`OUTAGE_RETRY_CAP`], so a short outage costs little and a long one few
/// connection attempts.
pub const OUTAGE_RETRY: Duration = Duration::from_millis(100);
pub const OUTAGE_RETRY_CAP: Duration = Duration::from_secs(2);

/// A fresh random token (uuid v4: 122 random bits, 32 hex digits).
pub fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// How many leading characters the tokens of one waiter share: its id (`WAITER_ID` in
/// `acquire.lua`, which must agree).
const WAITER_ID: usize = 16;

/// The token of a waiter's next attempt, when each attempt needs its own (a quorum): the
/// waiter's id (the first [`WAITER_ID`] characters of `prev`, its first token's) and 16 fresh
/// random hex digits (64 bits: an undo of one attempt never matches another). The nodes know the
/// waiter by its id, so it claims a reservation made for any of its earlier tokens: a release
/// crossing its attempts reserves the lock for a token it has since replaced.
fn next_token(prev: &str) -> String {
    let fresh = new_token();
    format!("{}{}", &prev[..WAITER_ID], &fresh[WAITER_ID..])
}

/// Takes the lock, waiting as `wait` says.
///
/// A busy attempt queues us up; we then block on our wake list until the lock is handed to us,
/// the holder's TTL runs out (a holder that died is picked up when its key expires), or
/// [`BLOCK_CAP`] passes. A stop signal ends the wait at once. On every way out that does not
/// return the lock, we leave the queue (and pass on a reservation made for us), so nothing of
/// ours stays in Redis; a lock taken in the same instant as a signal is released again.
///
/// Once Redis has answered an attempt (we are a waiter), losing it does not end the wait: see
/// [`ride_out`]. Before that, an unreachable server is an error at once (most likely a wrong URL).
pub fn acquire(
    store: &mut dyn Store,
    keys: &Keys,
    wanted: &Wanted,
    park: &mut dyn Park,
) -> Result<Acquired> {
    let wait = wanted.wait;
    let started = Instant::now();
    let every = park.report_every();
    let mut waiter = Waiter {
        started,
        report: Reporting {
            every,
            // A preemptor says at once whether the holder was asked to stop or declined.
            next: every.and_then(|_| {
                started.checked_add(if wanted.request.queue.preempt {
                    Duration::ZERO
                } else {
                    FIRST_REPORT
                })
            }),
            redraw: park.redraw(),
            told: false,
        },
        keys,
        wanted: *wanted,
        deadline: match wait {
            Wait::For(d) => Instant::now().checked_add(d),
            Wait::No | Wait::Forever => None,
        },
        token: new_token(),
        prev: None,
        queued: false,
        waiting: false,
        outage: Outage::default(),
        unsure: false,
        busy_sent: None,
    };
    let outcome = waiter.wait(store, park);
    let outcome = waiter.clean_up(store, outcome);
    if waiter.report.told {
        let acquired = matches!(outcome, Ok(Acquired::Held(_))).then(|| started.elapsed());
        park.end_report(keys, acquired);
    }
    outcome
}

/// When a waiter says what it waits for next.
struct Reporting {
    every: Option<Duration>,
    /// When the next line is due; `None`: never.
    next: Option<Instant>,
    /// Lines come on time: the block is cut into ticks (see [`Park::redraw`]).
    redraw: bool,
    /// A line was shown (so the end of the wait is told too).
    told: bool,
}

/// How early an attempt asks for what a status line says ([`Reply::state`]): a line due just
/// after the attempt is said with what the attempt brought rather than with a read of its own.
const TELL_AHEAD: Duration = Duration::from_millis(100);

impl Reporting {
    /// Whether a line is due at `at`.
    fn due(&self, at: Instant) -> bool {
        self.next.is_some_and(|due| due <= at)
    }

    /// A line was said now: the next is due one interval later.
    fn schedule(&mut self) {
        let every = self.every.unwrap_or(Duration::MAX);
        self.next = Instant::now().checked_add(every.max(Duration::from_millis(1)));
    }
}

/// One call of [`acquire`]: what it asked for and what it left in Redis so far.
struct Waiter<'a> {
    started: Instant,
    report: Reporting,
    keys: &'a Keys,
    wanted: Wanted<'a>,
    deadline: Option<Instant>,
    token: String,
    /// The token of the attempt before, when each attempt takes a fresh one (see `Store`).
    prev: Option<String>,
    /// The last attempt queued us up.
    queued: bool,
    /// Redis answered a busy attempt that queued us: from then on an outage does not end the wait.
    waiting: bool,
    outage: Outage,
    /// An attempt's reply was lost: it may still reach the server, even after we give up, so
    /// giving up leaves a tombstone for its token (see `leave.lua`).
    unsure: bool,
    /// When the last attempt that found the lock busy was sent: a grant popped after it was
    /// made after it ran (see [`Grant`]).
    busy_sent: Option<Instant>,
}

impl Waiter<'_> {
    /// Attempts and parks until the lock is ours, the wait runs out, a signal comes, or an error
    /// ends it. Leaves cleaning up to [`Waiter::clean_up`].
    fn wait(&mut self, store: &mut dyn Store, park: &mut dyn Park) -> Result<Acquired> {
        let keys = self.keys;
        let join = self.wanted.request.queue.join.queues();
        let mut first = true;
        loop {
            if !first && store.fresh_token_per_attempt() {
                let next = next_token(&self.token);
                self.prev = Some(std::mem::replace(&mut self.token, next));
            }
            first = false;
            if let Some(sig) = park.interrupted() {
                return Ok(Acquired::Interrupted(sig));
            }
            let req = Request {
                prev: self.prev.as_deref(),
                wait: Some(self.remaining()).filter(|r| *r != Duration::MAX),
                waited: self.started.elapsed(),
                queue: Queue {
                    again: self.busy_sent.is_some(),
                    ..self.wanted.request.queue
                },
                reply: Reply {
                    run_id: false,
                    state: join && self.report.due(Instant::now() + TELL_AHEAD),
                    grant: false,
                },
                ..self.wanted.request
            };
            let sent = Instant::now();
            let attempt = match store.try_acquire(keys, &self.token, &req) {
                Ok(attempt) => attempt,
                Err(e) if self.waiting => {
                    self.unsure = true;
                    // The same token again once Redis is back: our queue entry (if still there)
                    // keeps our place, and an attempt whose reply was lost finds its own grant.
                    match ride_out(store, keys, park, self.deadline, e, &mut self.outage)? {
                        Some(sig) => return Ok(Acquired::Interrupted(sig)),
                        None => continue,
                    }
                }
                Err(e) => {
                    self.unsure |= !crate::error::was_refused(&e);
                    return Err(e);
                }
            };
            self.outage.backoff.reset();
            let (pttl_ms, seen) = match attempt {
                Attempt::Granted(lock) => {
                    self.queued = false;
                    return self.held(store, park, lock);
                }
                Attempt::Superseded { by } => {
                    self.queued = false;
                    return Ok(Acquired::Superseded(by));
                }
                Attempt::Busy {
                    pttl_ms,
                    queued,
                    seen,
                    ..
                } => {
                    self.queued = queued;
                    self.waiting = join;
                    self.busy_sent = Some(sent);
                    (pttl_ms, seen)
                }
            };
            // The wait is over (at once for `-n`). Otherwise, however short the rest is, the
            // park is followed by one more attempt: a waiter woken at its deadline claims the
            // lock handed to it.
            let remaining = self.remaining();
            if remaining.is_zero() {
                return Ok(Acquired::Busy(None));
            }
            match self.park(store, park, pttl_ms, remaining, seen)? {
                Parked::Interrupted(sig) => return Ok(Acquired::Interrupted(sig)),
                Parked::Woken(Some(grant)) if store.grants() => {
                    if let Some(lock) = self.granted(store, grant) {
                        self.queued = false;
                        return self.held(store, park, lock);
                    }
                }
                _ => {}
            }
        }
    }

    /// The lock a release granted us (see [`Grant`]): ours from when our last busy attempt was
    /// sent, for the claim window. Extended to its TTL first when [`Wanted::whole_ttl`] asks,
    /// or when we read the push late; `None` if it is no longer ours by then (the next attempt
    /// queues us again, or finds it ours after all).
    fn granted(&mut self, store: &mut dyn Store, grant: Grant) -> Option<Lock> {
        let request = &self.wanted.request;
        let sent = self.busy_sent?;
        let mut lock = Lock {
            keys: self.keys.clone(),
            token: self.token.clone(),
            fence: grant.fence,
            acquired_ms: grant.acquired_ms,
            ttl: request.ttl,
            sent,
            lease: grant.lease.min(request.ttl),
            taken: Instant::now(),
            drift: Duration::ZERO,
            run_ids: vec![None],
            slot: None,
        };
        // Used as it is only by a holder that renews it from the start (`exec`), and before its
        // first renewal is due (a third of the window: see `Renewal::new`). Later, the waiter
        // was slow to read the push (stopped, starved): it makes sure the lock is still its own
        // (a forced release or a restart may have taken it meanwhile) before it uses it.
        let late = Instant::now() >= lock.sent + lock.lease / 3;
        if (late || self.wanted.whole_ttl) && !extend_grant(store, &mut lock) {
            return None;
        }
        Some(lock)
    }

    /// The lock is ours: handed to the caller, unless a stop signal came meanwhile (then given
    /// back).
    fn held(&self, store: &mut dyn Store, park: &mut dyn Park, lock: Lock) -> Result<Acquired> {
        if let Some(sig) = park.interrupted() {
            store
                .release(&lock.keys, &Releaser::keeper(&lock))
                .context("interrupted right after acquiring; releasing failed")?;
            return Ok(Acquired::Interrupted(sig));
        }
        Ok(Acquired::Held(lock))
    }

    /// What is left of the wait.
    fn remaining(&self) -> Duration {
        match (self.wanted.wait, self.deadline) {
            (Wait::No, _) => Duration::ZERO,
            (Wait::For(_), Some(d)) => d.saturating_duration_since(Instant::now()),
            _ => Duration::MAX,
        }
    }

    /// After a busy attempt: blocks on our wake list (or sleeps, when nobody will wake us) until
    /// just past the holder's expiry, at most `remaining` (the rest of the wait). `seen`: the
    /// lock as the attempt saw it, when it was asked for (a status line is due).
    fn park(
        &mut self,
        store: &mut dyn Store,
        park: &mut dyn Park,
        pttl_ms: i64,
        remaining: Duration,
        seen: Option<Box<State>>,
    ) -> Result<Parked> {
        let timeout = block_time(pttl_ms).min(remaining);
        // Not queued (a quorum whose queue node is down): nobody will wake us; look again
        // when the holder's TTL has run out, or after the cap.
        let parked = if self.queued && store.parking().is_some() {
            self.park_reporting(store, park, timeout, seen)
        } else {
            park.sleep(timeout)
        };
        match parked {
            Ok(parked) => Ok(parked),
            // The block failed and no fresh connection could be made: Redis is gone.
            Err(e) if self.waiting => {
                match ride_out(store, self.keys, park, self.deadline, e, &mut self.outage)? {
                    Some(sig) => Ok(Parked::Interrupted(sig)),
                    None => Ok(Parked::TimedOut),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Blocks on our wake list for `timeout`, saying what we wait for first if a line is due
    /// (from `seen`, what the attempt before returned, when it was asked for); with
    /// [`Park::redraw`], in ticks that end when the next line is due.
    fn park_reporting(
        &mut self,
        store: &mut dyn Store,
        park: &mut dyn Park,
        timeout: Duration,
        mut seen: Option<Box<State>>,
    ) -> Result<Parked> {
        let end = Instant::now().checked_add(timeout);
        // Bounded: each round either returns or moves `next` a report interval (≥ 1 ms) ahead.
        loop {
            let now = Instant::now();
            if let Some(state) = seen.take() {
                self.tell(park, Some(*state));
            } else if self.report.due(now) {
                self.report(store, park);
            }
            let left = end.map_or(Duration::MAX, |e| e.saturating_duration_since(now));
            let tick = self
                .report
                .next
                .filter(|_| self.report.redraw)
                .map(|due| due.saturating_duration_since(now))
                .filter(|&d| d < left);
            let Some(redis) = store.parking() else {
                return park.sleep(left);
            };
            match tick {
                None => return park.park(redis, self.keys, &self.token, left, false),
                Some(d) => match park.park(redis, self.keys, &self.token, d, true)? {
                    Parked::Ticked => {}
                    other => return Ok(other),
                },
            }
        }
    }

    /// Reads who holds the lock and how many wait ahead of us, on the connection we park on,
    /// and says it: a status line due when no attempt brought what it says (a tick of a redrawn
    /// line, between attempts).
    fn report(&mut self, store: &mut dyn Store, park: &mut dyn Park) {
        let Some(redis) = store.parking() else {
            self.report.schedule();
            return;
        };
        // One round trip.
        let state = match crate::lock::inspect(redis, self.keys) {
            Ok(state) => Some(state),
            Err(_) => {
                // A reply may still be on its way: the block must not read it. (A failed
                // reconnect marks the connection stale; the next call tries again.)
                let _ = redis.reconnect();
                None
            }
        };
        self.tell(park, state);
    }

    /// Says what we wait for, as `state` (the queue server's view; `None` if it could not be
    /// read) shows it; schedules the next line.
    fn tell(&mut self, park: &mut dyn Park, state: Option<State>) {
        self.report.schedule();
        // Our place is in the queue the state lists (live waiters only, as `status` counts them;
        // none past the first hundred).
        let ahead = state
            .as_ref()
            .and_then(|s| s.queue.iter().position(|w| w.token == self.token));
        park.report(&Waiting {
            keys: self.keys,
            state: state.as_ref(),
            ahead,
            waited: self.started.elapsed(),
            preempt: self.wanted.request.queue.preempt,
        });
        self.report.told = true;
    }

    /// Leaves nothing of ours in Redis unless the lock is ours, and names the holder of a busy
    /// lock.
    fn clean_up(&self, store: &mut dyn Store, outcome: Result<Acquired>) -> Result<Acquired> {
        let keys = self.keys;
        // With a fresh token per attempt, an earlier token stays queued if the last attempt never
        // reached the queue node to take its place over: give that back too, best effort.
        let give_up = |store: &mut dyn Store, token: &str| {
            if self.unsure {
                store.abandon(keys, token)
            } else {
                store.leave(keys, token)
            }
        };
        if !matches!(outcome, Ok(Acquired::Held(_)))
            && let Some(prev) = &self.prev
        {
            let _ = give_up(&mut *store, prev);
        }
        match &outcome {
            Ok(Acquired::Held(_)) => {}
            // A signal in the middle of an outage: leave if Redis is back, else our lease runs
            // out by itself (within BLOCK_CAP + LEASE_MARGIN) and the queue goes on without us.
            // (A frozen server runs the leave when it thaws: the tombstone stops our attempt
            // queued there from taking the lock after it.)
            Ok(_) if self.outage.down => {
                let _ = store
                    .fresh()
                    .and_then(|()| store.abandon(keys, &self.token));
            }
            // Queued, or perhaps queued by an attempt whose reply was lost.
            Ok(_) if self.queued || self.unsure => give_up(&mut *store, &self.token)
                .with_context(|| format!("cannot leave the queue of '{}'", keys.name))?,
            Ok(_) => {}
            // An attempt may have run without our reading its reply, and the connection may
            // still have a reply pending: clean up on a fresh one, best effort, and report the
            // first error. Refused by the server (a replica, an evicting server) before it ran:
            // nothing to undo.
            Err(e) if crate::error::was_refused(e) && !self.unsure && !self.queued => {}
            Err(_) => {
                let _ = store
                    .fresh()
                    .and_then(|()| store.abandon(keys, &self.token));
            }
        }
        match outcome {
            // Who holds it, for the message: read after leaving, so we are not among the waiters.
            Ok(Acquired::Busy(None)) => Ok(Acquired::Busy(store.inspect(keys).ok())),
            other => other,
        }
    }
}

/// Extends a lock granted for the claim window to its TTL (see [`Waiter::granted`]); whether
/// it is still ours (the renewal succeeded, sent in time).
fn extend_grant(store: &mut dyn Store, lock: &mut Lock) -> bool {
    let sent = Instant::now();
    let renewed = store.extend(&lock.keys, &lock.token, lock.ttl, false, false);
    if matches!(renewed, Ok(Verdict::Done(_) | Verdict::Preempted(_)))
        && sent < lock.acquired_until()
    {
        lock.renewed_at(sent);
        return true;
    }
    // A renewal that failed may have reached the server, or come too late: the next attempt
    // finds the lock ours (and extends it), or queues us again.
    let _ = store.recover();
    false
}

/// A waiter's view of a Redis outage (`redlock wait`'s too).
pub struct Outage {
    /// The notice was printed.
    pub told: bool,
    /// Redis has not answered since the outage began.
    pub down: bool,
    /// The pauses before looking again; back to the first after an answered attempt.
    pub backoff: Backoff,
}

impl Default for Outage {
    fn default() -> Self {
        Outage {
            told: false,
            down: false,
            backoff: Backoff::new(OUTAGE_RETRY, OUTAGE_RETRY_CAP),
        }
    }
}

/// Rides out a failure that leaves a waiter without Redis (refused, reset, timed out: what
/// [`Kind::Unavailable`] covers). Pauses with capped exponential backoff (a stop signal ends the
/// pause) and looks again, read-only, until Redis answers: `Ok(None)`, and the caller goes on.
/// `Ok(Some(signal))` when a stop signal came. Gives up with the last error when the wait runs
/// out, and at once for any other kind of error (credentials, protocol: waiting cannot help).
///
/// The look is a status read, not a new attempt: an attempt sent to a frozen server would run
/// when it thaws, perhaps after we gave up, and take the lock for a token nobody knows.
fn ride_out(
    store: &mut dyn Store,
    keys: &Keys,
    park: &mut dyn Park,
    deadline: Option<Instant>,
    error: anyhow::Error,
    outage: &mut Outage,
) -> Result<Option<i32>> {
    let mut error = error;
    outage.down = true;
    loop {
        if kind_of(&error) != Kind::Unavailable {
            return Err(error);
        }
        let left = deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        if left.is_zero() {
            return Err(ran_out(keys, error));
        }
        if !outage.told {
            park.outage(keys, &error, deadline.is_none());
            outage.told = true;
        }
        if let Parked::Interrupted(sig) = park.sleep(outage.backoff.pause().min(left))? {
            return Ok(Some(sig));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(ran_out(keys, error));
        }
        match store.recover().and_then(|()| store.inspect(keys)) {
            // A quorum's look succeeds with fewer than a majority answering: not back yet.
            Ok(state) if state.quorum_verdict() == Some(QuorumVerdict::Unknown) => {
                error = failure(
                    Kind::Unavailable,
                    format!("no quorum for '{}': too few servers answered", keys.name),
                );
            }
            Ok(_) => {
                outage.down = false;
                return Ok(None);
            }
            Err(e) => error = e,
        }
    }
}

/// The error a wait that ran out during an outage ends with. A timeout names the step that timed
/// out (`status`: our own look, which the user never ran): say what the user was doing instead.
fn ran_out(keys: &Keys, error: anyhow::Error) -> anyhow::Error {
    let Some(f) = error.downcast_ref::<Failure>() else {
        return error;
    };
    let timed_out = f
        .message
        .split_once(" did not answer ")
        .and_then(|(server, step)| Some((server, step.rsplit_once(" within ")?.1)))
        .filter(|(_, bound)| bound.ends_with(" (--io-timeout)"));
    match timed_out {
        Some((server, bound)) => failure(
            f.kind,
            format!(
                "{server} did not answer within {bound} while waiting for '{}'",
                keys.name
            ),
        ),
        None => error,
    }
}

/// How long to block after a busy attempt: until just past the holder's expiry, at most
/// [`BLOCK_CAP`].
fn block_time(pttl_ms: i64) -> Duration {
    match u64::try_from(pttl_ms) {
        Ok(ms) => Duration::from_millis(ms + 1).min(BLOCK_CAP),
        // -2: the key vanished between our reads; look again at once. -1: no expiry at all.
        Err(_) if pttl_ms == -2 => Duration::from_millis(1),
        Err(_) => BLOCK_CAP,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiters_tokens_share_its_id_and_differ_after_it() {
        let first = new_token();
        let (second, third) = (next_token(&first), next_token(&next_token(&first)));
        for t in [&second, &third] {
            assert_eq!(t.len(), 32, "{t}");
            assert!(t.chars().all(|c| c.is_ascii_hexdigit()), "{t}");
            assert_eq!(t[..WAITER_ID], first[..WAITER_ID]);
        }
        assert_ne!(second, first);
        assert_ne!(third, second);
        assert_ne!(new_token()[..WAITER_ID], first[..WAITER_ID]);
    }

    #[test]
    fn waiters_block_until_just_past_expiry_at_most_the_cap() {
        assert_eq!(block_time(5), Duration::from_millis(6));
        assert_eq!(block_time(30_000), BLOCK_CAP);
        assert_eq!(block_time(-1), BLOCK_CAP);
        assert_eq!(block_time(-2), Duration::from_millis(1));
    }
}
