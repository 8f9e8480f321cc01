//! Redlock: one lock over N independent Redis masters, held when a majority granted it.
//!
//! The layer above `store.rs`: [`Nodes`] implements its [`Store`] trait over N servers, with the
//! one-server calls of `lock.rs`; `acquire.rs` and `backend.rs` are above it. The decisions are
//! pure functions with table tests: [`decide`] reads an attempt's answers, counted into a
//! [`Tally`], and [`verdict`] the nodes' states for `status`; the methods around them do the
//! I/O.
//!
//! Every operation runs the one-server scripts of `lock.rs` on all nodes in parallel (a thread
//! per node, each bounded by `--connect-timeout` and `--io-timeout`) and counts the answers. It
//! does not wait for a slow node once the others have settled the outcome: after that, a node
//! gets as long again as the others took (plus 2 ms, and at least a quarter of `--io-timeout`),
//! so that healthy nodes all take part, and a frozen node costs a fraction of a timeout, its
//! answer counted as a failure. A waiter's attempt also waits for the queue node, which keeps
//! its place.
//!
//! Invariants:
//! - Held iff at least Q = N/2+1 nodes granted the same token in one attempt *and* the attempt
//!   left a positive validity: `ttl - elapsed - drift`, with `drift = ttl/100 + 2ms` for the
//!   servers' clocks running at slightly different rates. The lock is ours until
//!   `sent + ttl - drift` on our monotonic clock ([`Lock::valid_until`]).
//! - A failed attempt is undone on every node, including those that did not answer (their reply
//!   may have been lost after they granted it): `leave.lua` gives back our token, a reservation
//!   for us, and our queue entry.
//! - Fences: each node keeps its own counter and grants with max(counter + 1, its clock in µs)
//!   (see `acquire.lua`). The holder's fence is the highest of its granting nodes' values; when
//!   they differ (nearly always, the clocks being microseconds apart) it is written back
//!   (counter = max(counter, fence)) to a majority before the lock counts as taken. Successive
//!   holders' majorities share a node, on which the later grant happened after the earlier
//!   holder's write-back (its key was there until then), so the later fence is strictly larger.
//!   This rests on Redlock's assumptions: keys expire at about the same rate on every node, and a
//!   node does not forget a key it granted (see the README on persistence and restarts). A node
//!   that forgot its counter grants with its clock, above every earlier fence if the nodes'
//!   clocks agree to better than the time between the two acquisitions.
//! - Waiting: the first node keeps the queue. Waiters queue and block there; a release frees the
//!   first node (which picks the next waiter without waking it), then, in the same script that
//!   releases them, reserves the lock on the other nodes for that same waiter, and only then wakes
//!   it: no newcomer can slip in between, and the waiter finds a majority reserved for it. A
//!   reservation on the queue node vetoes a majority elsewhere, and so does the queue node's
//!   grant to the waiter whose turn it is until that waiter has its majority (the `turn` mark of
//!   `acquire.lua`), so the order also holds when a lock expires. A holder whose majority did
//!   not include the queue node still gets the next waiter from it (`release.lua` names the
//!   waiter whose turn is next where our token is not), so every release wakes the next waiter.
//!   Each attempt of a waiter uses a fresh token that takes over the previous one's
//!   place and reservation (a late undo must never match a later attempt). The tokens of one
//!   waiter share its id (their first half, see `acquire.rs`), and a node gives the waiter a
//!   reservation or grant made for any of them: a release whose reservation reaches a node after
//!   the waiter's next attempt passed there reserves it for a token the waiter has replaced, and
//!   the waiter, holding the queue node (its turn), still claims it at once rather than after the
//!   claim window (the hand-over took 2 s under load). With the first node
//!   down, waiters retry when the holder's TTL runs out (at most every few seconds).
//! - A node that answers only after the outcome was settled (frozen, or far slower than the
//!   others) may apply a failed attempt after its undo. So the undo on a node whose answer was
//!   missing leaves a tombstone for the token (`leave.lua`, [`lock::TOMBSTONE`]): the late
//!   attempt does nothing there.
//! - A node's connection outlives a late or timed-out answer: the call that was not waited for
//!   hands it back when it ends (see [`Nodes::late`]), and a reply later than `--io-timeout`
//!   leaves it in place, resynchronised before its next command (`client.rs`). So a slow node
//!   costs no new connection, which a node full of clients (`maxclients`) may refuse.
//! - Extend needs a majority within the validity; a majority that can no longer be reached
//!   (enough nodes say free or another token) means the lock is lost.
//!
//! Layer 8 of the list in `lib.rs`.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::client::Redis;
use crate::config::{Config, Endpoint};
use crate::error::{Kind, failure, kind_of};
use crate::lock::{
    self, Attempt, Doubt, HandOver, Join, Keys, Lock, Queue, QuorumVerdict, QuorumView, Releaser,
    Reply, Request, State, Verdict,
};
use crate::store::Store;

/// A majority of `n`.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// What a lock's validity allows for the servers' clocks drifting apart: 1% of the TTL + 2 ms.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The nodes of a quorum, each with a connection made when first needed.
pub struct Nodes {
    config: Arc<Config>,
    endpoints: Vec<Endpoint>,
    cons: Vec<Option<Redis>>,
    /// For a node that had not answered when the others had: where its call, still running on
    /// its own thread (within its timeouts), hands its connection back when it ends. The next
    /// call on that node waits for it there (up to `--io-timeout`, so that calls on a frozen node
    /// do not queue up behind each other) rather than opening another connection, which a full
    /// server may refuse.
    late: Vec<Option<mpsc::Receiver<Option<Redis>>>>,
    /// run_ids seen when the lock was taken, and whether a restart was reported already.
    run_ids: Vec<Option<String>>,
    reported: Vec<bool>,
    /// Attempts in a row that had our turn on the queue node but no majority (see `TURN_RETRY`).
    turn_retries: u32,
}

/// The first wait before looking again when the queue node gave us our turn but the others were
/// still held; it doubles with every such attempt, up to `lock::BLOCK_CAP` and a third of the TTL.
const TURN_RETRY: Duration = Duration::from_millis(25);

/// One node's answer: `None` if it was not asked.
type Answers<T> = Vec<Option<Result<T>>>;

/// The failed nodes' descriptions, for a message.
fn joined(failed: &[(Kind, String)]) -> String {
    let list: Vec<&str> = failed.iter().map(|(_, s)| s.as_str()).collect();
    list.join(", ")
}

/// How many nodes answered without an error.
fn answered<T>(answers: &Answers<T>) -> usize {
    answers.iter().filter(|a| matches!(a, Some(Ok(_)))).count()
}

impl Nodes {
    pub fn new(config: &Config) -> Nodes {
        let endpoints = config.servers.endpoints().to_vec();
        let n = endpoints.len();
        Nodes {
            config: Arc::new(config.clone()),
            endpoints,
            cons: (0..n).map(|_| None).collect(),
            late: (0..n).map(|_| None).collect(),
            run_ids: vec![None; n],
            reported: vec![false; n],
            turn_retries: 0,
        }
    }

    fn n(&self) -> usize {
        self.endpoints.len()
    }

    fn q(&self) -> usize {
        quorum(self.n())
    }

    /// The least time the other nodes get after the outcome is settled: a quarter of
    /// `--io-timeout`, so that a healthy node that is merely a little slower (a fresh connection,
    /// a busy CPU) still takes part, and a frozen one costs a fraction of a timeout.
    fn grace_floor(&self) -> Duration {
        self.config.io_timeout / 4
    }

    /// Runs `f` on the nodes `ask` selects, in parallel (a thread each), connecting first where
    /// needed. Returns when every asked node has answered, or when `settled` says the answers so
    /// far decide the outcome and the others have had as long again as that took (plus 2 ms), and
    /// at least [`Nodes::grace_floor`].
    /// A node that has not answered by then counts as failed; its thread finishes on its own
    /// (within its timeouts) and hands its connection to the node's next call (see
    /// [`Nodes::late`]).
    fn fan_out<T: Send + 'static>(
        &mut self,
        ask: impl Fn(usize) -> bool,
        f: impl Fn(usize, &mut Redis) -> Result<T> + Send + Sync + 'static,
        settled: impl Fn(&Answers<T>) -> bool,
    ) -> Answers<T> {
        let start = Instant::now();
        let f = Arc::new(f);
        let (tx, rx) = mpsc::channel();
        let mut answers: Answers<T> = (0..self.n()).map(|_| None).collect();
        let mut pending = Vec::new();
        let mut handed: Vec<Option<mpsc::Receiver<Option<Redis>>>> =
            (0..self.n()).map(|_| None).collect();
        for i in (0..self.n()).filter(|&i| ask(i)) {
            let (f, node_tx, config) = (Arc::clone(&f), tx.clone(), Arc::clone(&self.config));
            let con = self.cons[i].take();
            // A connection of our own wins; else the one a late call still has, once it ends.
            let late = if con.is_some() {
                None
            } else {
                self.late[i].take()
            };
            let (hand_back, handed_back) = mpsc::sync_channel(1);
            let wait = self.config.io_timeout;
            let spawned = std::thread::Builder::new()
                .name(format!("node-{i}"))
                .spawn(move || {
                    let con = con.or_else(|| late.and_then(|rx| take_back(&rx, wait)));
                    let (result, con) = on_node(&config, i, con, |i, con| f(i, con));
                    // The connection first: whoever hears the result finds it there.
                    let _ = hand_back.send(con);
                    let _ = node_tx.send((i, result));
                });
            match spawned {
                Ok(_) => {
                    pending.push(i);
                    handed[i] = Some(handed_back);
                }
                Err(e) => {
                    answers[i] = Some(Err(failure(
                        Kind::Unavailable,
                        format!(
                            "cannot start a thread for {}: {e}",
                            self.endpoints[i].display
                        ),
                    )))
                }
            }
        }
        drop(tx);
        let mut grace: Option<Instant> = None;
        while !pending.is_empty() {
            if grace.is_none() && settled(&answers) {
                let extra = (start.elapsed() + Duration::from_millis(2)).max(self.grace_floor());
                grace = Some(Instant::now() + extra);
            }
            let next = match grace {
                Some(until) => rx.recv_timeout(until.saturating_duration_since(Instant::now())),
                None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            };
            let Ok((i, result)) = next else {
                break;
            };
            answers[i] = Some(result);
            self.cons[i] = handed[i].take().and_then(|rx| rx.try_recv().ok().flatten());
            pending.retain(|&p| p != i);
        }
        for i in pending {
            self.late[i] = handed[i].take();
            answers[i] = Some(Err(failure(
                Kind::Unavailable,
                format!(
                    "{} had not answered when the others had (slow or frozen)",
                    self.endpoints[i].display
                ),
            )));
        }
        answers
    }

    /// Runs `f` on every node and waits for all of them (each within its timeouts).
    fn all<T: Send + 'static>(
        &mut self,
        f: impl Fn(usize, &mut Redis) -> Result<T> + Send + Sync + 'static,
    ) -> Answers<T> {
        self.fan_out(|_| true, f, |_| false)
    }

    /// "URL (why)" for every node that failed, from the first part of its error, with the kind.
    fn failures<T>(&self, answers: &Answers<T>) -> Vec<(Kind, String)> {
        answers
            .iter()
            .zip(&self.endpoints)
            .filter_map(|(a, ep)| match a {
                Some(Err(e)) => Some((kind_of(e), short_error(e, &ep.display))),
                _ => None,
            })
            .collect()
    }

    /// The error for an operation without a majority. Credentials or permissions refused by a
    /// node are that (exit 77), and so is a node refused for its eviction policy (exit 2), not an
    /// outage: retrying will not help.
    fn no_quorum(&self, keys: &Keys, what: String, failed: &[(Kind, String)]) -> anyhow::Error {
        let mut msg = format!("no quorum for '{}': {what}", keys.name);
        let kind = if failed.iter().any(|(k, _)| *k == Kind::Auth) {
            Kind::Auth
        } else if failed.iter().any(|(k, _)| *k == Kind::Usage) {
            // A server refused for what it is (one that may evict locks): the operator decides.
            Kind::Usage
        } else if !failed.is_empty() && failed.iter().all(|(k, _)| *k == Kind::Protocol) {
            Kind::Protocol
        } else {
            Kind::Unavailable
        };
        if !failed.is_empty() {
            let label = if failed.iter().all(|(k, _)| *k == Kind::Unavailable) {
                "unreachable"
            } else {
                "failed"
            };
            msg.push_str(&format!("; {label}: {}", joined(failed)));
        }
        failure(kind, msg)
    }

    /// Tells about a node whose run_id changed since the lock was taken: it restarted, and
    /// without persistence it forgot our key and may grant the lock to someone else.
    fn check_restart(&mut self, i: usize, run_id: Option<String>, keys: &Keys) {
        let (Some(before), Some(now)) = (&self.run_ids[i], &run_id) else {
            if self.run_ids[i].is_none() {
                self.run_ids[i] = run_id;
            }
            return;
        };
        if before != now && !self.reported[i] {
            self.reported[i] = true;
            // An alert, not a notice: the lock may no longer be exclusive (see `messages`).
            crate::messages::alert(format_args!(
                "{} restarted while '{}' was held (its run_id changed); without appendonly + \
                 appendfsync always it may have forgotten the lock",
                self.endpoints[i].display, keys.name
            ));
        }
    }

    /// Undoes a failed attempt on the nodes `ask` selects (best effort: what a node missed
    /// expires with the TTL).
    ///
    /// A node whose answer is `missing` (none, or an error) may apply the attempt later, after
    /// this undo: the undo leaves a tombstone there, which makes the late attempt do nothing.
    fn undo(&mut self, keys: &Keys, token: &str, ask: impl Fn(usize) -> bool, missing: Vec<bool>) {
        let (k, t, q) = (keys.clone(), token.to_string(), self.q());
        // A node left out (the queue node, where we keep our place) counts as settled.
        let skipped = (0..self.n()).filter(|&i| !ask(i)).count();
        self.fan_out(
            ask,
            move |i, con| {
                let doubt = match missing.get(i) {
                    Some(true) => Doubt::Unsure,
                    _ => Doubt::Sure,
                };
                lock::leave_to(con, &k, &t, HandOver::Wake, doubt)
            },
            move |a| answered(a) + skipped >= q,
        );
    }

    /// Leaves the queue and gives back what `token` holds or has reserved, on every node, the
    /// way a release does (see [`Nodes::hand_on`]), so no newcomer slips in when a waiter gives up
    /// its turn.
    /// [`Store::leave`] and [`Store::abandon`]: an error only when no node answered.
    /// A release that reached fewer nodes than it needed, as an error; the nodes it reached are
    /// released all the same. A holder's token that more than N−Q of the answering nodes no longer
    /// had was lost before this release (deleted, flushed, expired, taken by another client): that
    /// is not the owner's release. A conditional `--force` (the operator's "only if it is still
    /// the lock I saw") that matched on fewer than Q nodes found a leftover copy, not the lock,
    /// which is someone else's now.
    fn released_too_few(
        &self,
        keys: &Keys,
        by: &Releaser,
        verdicts: &[Verdict],
    ) -> Option<anyhow::Error> {
        let (n, q) = (self.n(), self.q());
        let matched = verdicts
            .iter()
            .filter(|v| matches!(v, Verdict::Done(_) | Verdict::Deferred))
            .count();
        let others = || {
            verdicts.iter().filter_map(|v| match v {
                Verdict::HeldByOther(h) => Some(h),
                _ => None,
            })
        };
        match by {
            _ if matched == 0 => None,
            Releaser::Holder { .. } if verdicts.len() - matched > n - q => {
                let now = match others().next() {
                    Some(Some(h)) => format!("{} holds it now", h.who()),
                    Some(None) => "another token holds it now".to_string(),
                    None => "it is free now".to_string(),
                };
                Some(failure(
                    Kind::NotOwner,
                    format!(
                        "not the owner: only {matched} of {n} servers still had the token ({q} \
                         needed), so the lock was lost before this release; {now} (released \
                         where it was left)"
                    ),
                ))
            }
            Releaser::Force(_, Some(_)) if matched < q => {
                let now = match others().flatten().max_by_key(|h| h.fence) {
                    Some(h) => format!("{} holds it now with fence {}", h.who(), h.fence),
                    None => "another token holds it now, or nobody".to_string(),
                };
                Some(failure(
                    Kind::NotOwner,
                    format!(
                        "not released: the lock '{}' the condition names was on {matched} of {n} \
                         servers only ({q} needed); {now} (released where it matched)",
                        keys.name
                    ),
                ))
            }
            _ => None,
        }
    }

    /// Every lock under `prefix` that some node holds (SCAN on every node); an error when fewer
    /// than Q nodes answer.
    fn scan(&mut self, prefix: &str) -> Result<Vec<Keys>> {
        let (n, q) = (self.n(), self.q());
        let p = prefix.to_string();
        let answers = self.all(move |_, con| lock::scan(con, &p));
        let failed = self.failures(&answers);
        if failed.len() > n - q {
            return Err(failure(
                Kind::Unavailable,
                format!(
                    "no quorum: {} of {n} servers answered, {q} needed; unreachable: {}",
                    n - failed.len(),
                    joined(&failed)
                ),
            ));
        }
        let mut all: Vec<Keys> = answers
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .flatten()
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all.dedup();
        Ok(all)
    }

    fn leave_with(&mut self, keys: &Keys, token: &str, doubt: Doubt) -> Result<()> {
        let answers = self.give_back(keys, token, doubt, GiveUp::ForGood);
        if answered(&answers) > 0 {
            return Ok(());
        }
        let failed = self.failures(&answers);
        Err(self.no_quorum(keys, "no server answered".to_string(), &failed))
    }

    /// With [`Doubt::Unsure`], every node gets a tombstone for `token` (see [`Nodes::undo`]).
    /// [`GiveUp::ForGood`] also passes on a reservation for an earlier token of the waiter (see
    /// `leave.lua`); an attempt given back while the wait goes on leaves it, to claim it.
    fn give_back(
        &mut self,
        keys: &Keys,
        token: &str,
        doubt: Doubt,
        give_up: GiveUp,
    ) -> Answers<Option<String>> {
        let (k, t) = (keys.clone(), token.to_string());
        self.hand_on(
            keys,
            move |con, hand_over| match give_up {
                GiveUp::ForGood => lock::give_up_to(con, &k, &t, hand_over, doubt),
                GiveUp::ThisAttempt => lock::leave_to(con, &k, &t, hand_over, doubt),
            },
            Option::clone,
        )
    }

    /// Runs `step` (a release or a leave) so that the lock passes to the next waiter on every
    /// node at once: the queue node first, [`HandOver::Quietly`] (it picks the next waiter
    /// without waking it; the other nodes only connect meanwhile), then the others with
    /// [`HandOver::To`] that waiter, which reserve the lock for it in the same script as their own
    /// step (no newcomer in between), and only then the waiter is woken. `next_of` reads the
    /// waiter from the queue node's answer.
    fn hand_on<T: Send + 'static>(
        &mut self,
        keys: &Keys,
        step: impl Fn(&mut Redis, HandOver) -> Result<T> + Clone + Send + Sync + 'static,
        next_of: impl Fn(&T) -> Option<String>,
    ) -> Answers<T> {
        let q = self.q();
        let first_step = step.clone();
        let first = self.fan_out(
            |_| true,
            move |i, con| match i {
                0 => first_step(con, HandOver::Quietly).map(Some),
                _ => Ok(None),
            },
            move |a| a[0].is_some() && answered(a) >= q,
        );
        let next = match &first[0] {
            Some(Ok(Some(answer))) => next_of(answer),
            _ => None,
        };
        let first_ok = matches!(first[0], Some(Ok(_)));
        let to = next.clone();
        let mut answers = self.fan_out(
            |i| i != 0,
            // No waiter named: the other nodes keep no queue, so there the lock just goes free.
            move |_, con| step(con, to.as_deref().map_or(HandOver::Wake, HandOver::To)),
            move |a| answered(a) + usize::from(first_ok) >= q,
        );
        if let Some(waiter) = next {
            // If this fails, the waiter looks again when its wait times out.
            let k = keys.clone();
            self.fan_out(
                |i| i == 0,
                move |_, con| lock::wake(con, &k, &waiter),
                |_| false,
            );
        }
        answers[0] = match first.into_iter().next().flatten() {
            Some(Ok(answer)) => answer.map(Ok),
            Some(Err(e)) => Some(Err(e)),
            None => None,
        };
        answers
    }

    /// Sends one attempt to every node (see [`Store::try_acquire`]); returns when a majority
    /// granted it or can no longer grant it, and a waiter also has the queue node's answer (it
    /// keeps our place in the queue).
    fn attempt(&mut self, keys: &Keys, token: &str, req: &Request) -> Answers<Attempt> {
        let (n, q, join) = (self.n(), self.q(), req.queue.join.queues());
        let (ttl, queue, tell, kept, wait, waited) = (
            req.ttl,
            req.queue,
            req.reply.state,
            req.kept,
            req.wait,
            req.waited,
        );
        let is_grant = |a: &Option<Result<Attempt>>| matches!(a, Some(Ok(Attempt::Granted(_))));
        let (k, t, o) = (keys.clone(), token.to_string(), req.owner.clone());
        let p = req.prev.map(str::to_string);
        self.fan_out(
            |_| true,
            move |i, con| {
                let req = Request {
                    ttl,
                    owner: &o,
                    mode: &lock::EXCLUSIVE,
                    queue: Queue {
                        // Only the queue node keeps waiters (and --supersede is refused).
                        join: if join && i == 0 {
                            Join::Queue
                        } else {
                            Join::No
                        },
                        // Recorded on every node, and asked of the holder on every node: its
                        // renewal hears of it from any of them (its majority need not include
                        // the queue node).
                        ..queue
                    },
                    reply: Reply {
                        run_id: true,
                        // A waiter's status line shows the queue node's view.
                        state: tell && i == 0,
                    },
                    kept,
                    prev: p.as_deref(),
                    wait,
                    waited,
                };
                lock::try_acquire(con, &k, &t, &req)
            },
            move |a| {
                let granted = a.iter().filter(|a| is_grant(a)).count();
                let other = a.iter().flatten().count() - granted;
                (granted >= q || other > n - q) && (!join || a[0].is_some())
            },
        )
    }

    /// Writes the holder's fence back to the nodes that granted it (counter = max(counter,
    /// fence)), which also tell and count the acquisition there (see `fence.lua`); returns how
    /// many recorded it. One more round trip per acquisition, the price of fences that a node's
    /// lost counter cannot take back (see the module doc).
    fn record_fence(&mut self, keys: &Keys, token: &str, tally: &Tally, req: &Request) -> usize {
        let q = self.q();
        let (k, t, fence) = (keys.clone(), token.to_string(), tally.fence());
        let told = lock::Told {
            owner: req.owner.clone(),
            waited: req.waited,
            ttl: req.ttl,
        };
        let granted = tally.granted.clone();
        let raised = self.fan_out(
            |i| granted[i],
            move |_, con| lock::raise_fence(con, &k, &t, fence, &told),
            move |a| a.iter().filter(|a| matches!(a, Some(Ok(true)))).count() >= q,
        );
        raised
            .iter()
            .filter(|a| matches!(a, Some(Ok(true))))
            .count()
    }

    /// Leaves the queue node's queue after taking the lock without the queue node, or it would
    /// hand us the lock again later. Best effort: the lease runs out by itself.
    fn leave_queue(&mut self, keys: &Keys, token: &str) {
        let (k, t) = (keys.clone(), token.to_string());
        self.fan_out(
            |i| i == 0,
            move |_, con| lock::leave(con, &k, &t),
            |_| false,
        );
    }

    /// What an attempt that is not ours returns, once it was undone or given back: busy, or the
    /// error that says why no majority was had.
    fn not_ours(&self, keys: &Keys, tally: &Tally, why: Miss, round: &Round) -> Result<Attempt> {
        let (n, q, ttl, failed) = (round.n, round.q, round.ttl, &tally.failed);
        let what = match why {
            Miss::Busy { queued, reserved } => {
                return Ok(Attempt::Busy {
                    // A majority answered but the lock was taken or split: look again when it
                    // expires.
                    pttl_ms: tally.busy_pttl.unwrap_or(-2),
                    queued,
                    reserved,
                    seen: tally.seen.clone(),
                });
            }
            Miss::TooSlow => format!(
                "{} of {n} servers granted it, but that took {} of the {} TTL ({} allowed for \
                 clock drift); lower the latency or raise --ttl",
                tally.grants(),
                human(round.elapsed),
                human(ttl),
                human(drift(ttl))
            ),
            Miss::FenceNotRecorded { recorded } => {
                format!("the fence could be recorded on {recorded} of {n} servers, {q} needed")
            }
            Miss::NoMajority { answered } => {
                format!("{answered} of {n} servers answered, {q} needed")
            }
        };
        Err(self.no_quorum(keys, what, failed))
    }
}

/// How long a waiter whose turn the queue node gave, but who found the other nodes still held,
/// waits before it looks again: [`TURN_RETRY`], doubling with every such attempt in a row
/// (`retries`), up to [`lock::BLOCK_CAP`].
///
/// Never longer than a third of the TTL: the queue node's grant, which is our turn, lasts one TTL
/// from this attempt, and the next attempt renews it. Waiting past it lost the turn to the next
/// waiter, and we went to the back of the queue (finding 13 of issue 11: with --ttl 1s the
/// backoff reached 1.6s while the other nodes were still reserved for our previous attempt's
/// token by a release that crossed it).
fn turn_delay(retries: u32, ttl: Duration) -> Duration {
    TURN_RETRY
        .saturating_mul(1 << retries.min(8))
        .min(lock::BLOCK_CAP)
        .min(ttl / 3)
}

/// Two node addresses that turned out to be one server (the same run_id), if any.
fn same_server(run_ids: &[Option<String>]) -> Option<(usize, usize)> {
    for (i, a) in run_ids.iter().enumerate() {
        for (j, b) in run_ids.iter().enumerate().skip(i + 1) {
            if a.is_some() && a == b {
                return Some((i, j));
            }
        }
    }
    None
}

/// The nodes' answers to one attempt, counted: what [`decide`] decides on.
#[derive(Debug)]
struct Tally {
    /// Which nodes granted the lock to our token.
    granted: Vec<bool>,
    /// The granting nodes' fences.
    fences: Vec<i64>,
    /// The granting nodes' run_ids (`None` for the others).
    run_ids: Vec<Option<String>>,
    /// The latest grant, by the granting servers' clocks.
    acquired_ms: i64,
    /// When to look again if the lock is busy: the queue node's view decides; else the longest
    /// TTL among the others.
    busy_pttl: Option<i64>,
    /// The queue node has us in its queue.
    queued: bool,
    /// The queue node's view of the lock, when the attempt asked for it (see `Reply::state`).
    seen: Option<Box<State>>,
    /// The queue node vetoes a majority of the others (see [`Tally::of`]).
    vetoed: bool,
    /// The nodes that failed: the kind of error, and "URL (why)".
    failed: Vec<(Kind, String)>,
    /// Nodes that may still apply this attempt (no answer, or a lost one): see [`Nodes::undo`].
    missing: Vec<bool>,
}

impl Tally {
    /// Counts the answers (the queue node's first); `failed` describes the failed ones.
    fn of(answers: &Answers<Attempt>, failed: Vec<(Kind, String)>) -> Tally {
        let n = answers.len();
        let mut t = Tally {
            granted: vec![false; n],
            fences: Vec::new(),
            run_ids: vec![None; n],
            acquired_ms: 0,
            busy_pttl: None,
            queued: false,
            seen: None,
            // The queue node decides whose turn it is: when it has the lock reserved for another
            // waiter, or granted to the waiter whose turn it is and who has no majority yet (its
            // other grants are on their way), a majority of the others does not count, or a
            // newcomer or a later waiter could overtake the queue when a lock expires. (A lock
            // otherwise held there by someone else does not veto: the majority decides who
            // holds it.)
            vetoed: matches!(answers[0], Some(Ok(Attempt::Busy { reserved: true, .. }))),
            failed,
            missing: answers
                .iter()
                .map(|a| match a {
                    Some(Ok(_)) => false,
                    // Refused (credentials, a script error, a replica): the node did not run the
                    // attempt.
                    Some(Err(e)) => {
                        kind_of(e) == Kind::Unavailable && !crate::error::was_refused(e)
                    }
                    None => true,
                })
                .collect(),
        };
        let queue_node_busy = matches!(answers[0], Some(Ok(Attempt::Busy { .. })));
        for (i, a) in answers.iter().enumerate() {
            match a {
                Some(Ok(Attempt::Granted(l))) => {
                    t.granted[i] = true;
                    t.fences.push(l.fence);
                    t.run_ids[i] = l.run_ids.first().cloned().flatten();
                    t.acquired_ms = t.acquired_ms.max(l.acquired_ms);
                }
                Some(Ok(Attempt::Busy {
                    pttl_ms,
                    queued,
                    seen,
                    ..
                })) => {
                    if i == 0 {
                        t.queued = *queued;
                        t.seen = seen.clone();
                        t.busy_pttl = Some(*pttl_ms);
                    } else if !queue_node_busy {
                        t.busy_pttl = Some(t.busy_pttl.map_or(*pttl_ms, |p| p.max(*pttl_ms)));
                    }
                }
                _ => {}
            }
        }
        t
    }

    fn grants(&self) -> usize {
        self.fences.len()
    }

    /// The holder's fence: the highest of the granting nodes' values.
    fn fence(&self) -> i64 {
        self.fences.iter().copied().max().unwrap_or(0)
    }

    /// Whether a node may still apply this attempt after we give it back.
    fn doubt(&self) -> Doubt {
        if self.missing.contains(&true) {
            Doubt::Unsure
        } else {
            Doubt::Sure
        }
    }
}

/// What [`decide`] needs besides the tally.
#[derive(Debug, Clone, Copy)]
struct Round {
    n: usize,
    q: usize,
    /// A waiter's attempt: it queues on the queue node.
    join: bool,
    ttl: Duration,
    /// From sending the attempt until now (after the fence write-back, if there was one).
    elapsed: Duration,
    /// How many of the granting nodes recorded the fence: `None` until it is written back.
    recorded: Option<usize>,
}

/// What to do with an attempt, from its tally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// Two node addresses are one server: undo the attempt everywhere and refuse the
    /// configuration.
    SameServer(usize, usize),
    /// A majority granted it, with different fences: write the highest back to the granting
    /// nodes, then decide again with how many recorded it ([`Round::recorded`]). The write-back
    /// is a side effect between "a majority granted it" and "held", so the decision comes in two
    /// steps rather than taking a callback.
    RecordFence,
    /// Ours. `leave_queue`: we are in the queue node's queue, and it did not grant the lock: leave
    /// its queue.
    Held { leave_queue: bool },
    /// Our turn on the queue node, but no majority yet: the other nodes are held by someone,
    /// often a contender whose vetoed attempt is being undone right now. Undo the attempt on the
    /// others, keep the queue node (our next attempt, with a fresh token, takes it over) and look
    /// again soon ([`turn_delay`]), instead of handing our turn to the next waiter.
    RetryTurn,
    /// Not ours: clean up, then say why.
    NotOurs { cleanup: Cleanup, why: Miss },
}

/// How a failed attempt is taken back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cleanup {
    /// The queue node granted it: what it granted us goes to the next waiter, on every node, as
    /// in a release ([`Nodes::give_back`]).
    GiveBack,
    /// Undo it on every node, except the queue node when `keep_place`: we wait on in its queue.
    Undo { keep_place: bool },
}

/// Why an attempt is not ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Miss {
    /// A majority answered, but the lock is taken, split or reserved for another waiter (the
    /// queue node's veto): look again later. As [`Attempt::Busy`].
    Busy { queued: bool, reserved: bool },
    /// A majority granted it, but too late: no validity was left.
    TooSlow,
    /// A majority granted it, but fewer recorded its fence.
    FenceNotRecorded { recorded: usize },
    /// More than N−Q nodes failed: `answered` is how many did not.
    NoMajority { answered: usize },
}

/// The pure decision of [`Nodes::try_acquire`]: no I/O, no clock. Held iff a majority granted
/// it, the queue node does not veto, a majority recorded the fence, and validity is left
/// (`ttl > elapsed + drift`).
fn decide(t: &Tally, r: &Round) -> Decision {
    let (n, q, grants) = (r.n, r.q, t.grants());
    if let Some((a, b)) = same_server(&t.run_ids) {
        return Decision::SameServer(a, b);
    }
    let majority = grants >= q && !t.vetoed;
    let fence = t.fence();
    let recorded = match r.recorded {
        Some(recorded) => recorded,
        // Unless they all agree already: rare now that a node's value is at least its clock in µs.
        None if majority && t.fences.iter().any(|&f| f != fence) => {
            return Decision::RecordFence;
        }
        None => grants,
    };
    let valid = r.ttl > r.elapsed + drift(r.ttl);
    // In our queue on the queue node, which did not grant it.
    let keep_place = t.queued && !t.granted[0];
    if majority && recorded >= q && valid {
        return Decision::Held {
            leave_queue: keep_place,
        };
    }
    let failed = t.failed.len();
    if r.join && t.granted[0] && grants < q && failed <= n - q {
        return Decision::RetryTurn;
    }
    let cleanup = if t.granted[0] {
        Cleanup::GiveBack
    } else {
        Cleanup::Undo { keep_place }
    };
    let why = if majority && !valid {
        Miss::TooSlow
    } else if majority {
        Miss::FenceNotRecorded { recorded }
    } else if failed > n - q {
        Miss::NoMajority {
            answered: n - failed,
        }
    } else {
        Miss::Busy {
            queued: keep_place,
            reserved: t.vetoed,
        }
    };
    Decision::NotOurs { cleanup, why }
}

/// The connection a late call hands back on `rx` when it ends, if it ends within `wait` and
/// kept it; else `None` (a new connection, as before the call was late).
fn take_back(rx: &mpsc::Receiver<Option<Redis>>, wait: Duration) -> Option<Redis> {
    rx.recv_timeout(wait).ok().flatten()
}

/// Runs `f` on node `i`, connecting first if `con` is `None`. Returns the connection to keep:
/// none after a failure, unless only its reply was late (it is resynchronised before its next
/// command: see `client.rs`), so that a slow node does not cost us our place on it.
fn on_node<T>(
    config: &Config,
    i: usize,
    con: Option<Redis>,
    f: impl Fn(usize, &mut Redis) -> Result<T>,
) -> (Result<T>, Option<Redis>) {
    let reused = con.is_some();
    let mut con = match con {
        Some(con) => con,
        None => match Redis::connect_node(config, i) {
            Ok(con) => con,
            Err(e) => return (Err(e), None),
        },
    };
    let mut result = f(i, &mut con);
    // The node had closed an idle connection (it restarted): the command did not run; once more
    // on a fresh connection.
    if result.is_err() && reused && con.was_dropped() && con.reconnect().is_ok() {
        result = f(i, &mut con);
    }
    let keep = (result.is_ok() || con.is_late()).then_some(con);
    (result, keep)
}

/// The first part of an error message, naming the server: "cannot connect to URL (refused)".
fn short_error(e: &anyhow::Error, display: &str) -> String {
    let text = format!("{e:#}");
    let first = text.split("; ").next().unwrap_or(&text).to_string();
    if first.contains(display) {
        first
    } else {
        format!("{display} ({first})")
    }
}

fn human(d: Duration) -> String {
    crate::output::human_ms(d)
}

impl Store for Nodes {
    /// One attempt on every node: the answers are counted ([`Tally::of`]), [`decide`] says what
    /// they mean, and the one `match` below does what it says.
    fn try_acquire(&mut self, keys: &Keys, token: &str, req: &Request) -> Result<Attempt> {
        let (n, q, ttl) = (self.n(), self.q(), req.ttl);
        let sent = Instant::now();
        let answers = self.attempt(keys, token, req);
        let tally = Tally::of(&answers, self.failures(&answers));
        let mut round = Round {
            n,
            q,
            join: req.queue.join.queues(),
            ttl,
            elapsed: sent.elapsed(),
            recorded: None,
        };
        // Twice at most: `decide` asks for the fence write-back only while `recorded` is `None`;
        // the validity it checks the second time includes the write-back's round trip.
        loop {
            match decide(&tally, &round) {
                Decision::SameServer(a, b) => {
                    self.undo(keys, token, |_| true, tally.missing);
                    return Err(crate::error::usage(format!(
                        "{} and {} are the same Redis server (same run_id); a quorum needs \
                         independent servers",
                        self.endpoints[a].display, self.endpoints[b].display
                    )));
                }
                Decision::RecordFence => {
                    round.recorded = Some(self.record_fence(keys, token, &tally, req));
                    round.elapsed = sent.elapsed();
                }
                Decision::Held { leave_queue } => {
                    if round.recorded.is_none() {
                        // The nodes agreed on the fence (rare): the write-back was not needed,
                        // but it is what tells the acquisition to the nodes' histories.
                        self.record_fence(keys, token, &tally, req);
                    }
                    if leave_queue {
                        self.leave_queue(keys, token);
                    }
                    return Ok(Attempt::Granted(Lock {
                        keys: keys.clone(),
                        token: token.to_string(),
                        fence: tally.fence(),
                        acquired_ms: tally.acquired_ms,
                        ttl,
                        sent,
                        drift: drift(ttl),
                        run_ids: tally.run_ids,
                        slot: None,
                    }));
                }
                Decision::RetryTurn => {
                    self.undo(keys, token, |i| i != 0, tally.missing);
                    let delay = turn_delay(self.turn_retries, ttl);
                    self.turn_retries += 1;
                    // "Queued": something of ours is on the queue node, which giving up must
                    // undo.
                    return Ok(Attempt::Busy {
                        pttl_ms: i64::try_from(delay.as_millis()).unwrap_or(i64::MAX),
                        queued: true,
                        reserved: false,
                        seen: None,
                    });
                }
                Decision::NotOurs { cleanup, why } => {
                    self.turn_retries = 0;
                    match cleanup {
                        Cleanup::GiveBack => {
                            self.give_back(keys, token, tally.doubt(), GiveUp::ThisAttempt);
                        }
                        Cleanup::Undo { keep_place } => {
                            let missing = tally.missing.clone();
                            self.undo(keys, token, |i| !(i == 0 && keep_place), missing);
                        }
                    }
                    return self.not_ours(keys, &tally, why, &round);
                }
            }
        }
    }

    fn fresh_token_per_attempt(&self) -> bool {
        true
    }

    fn leave(&mut self, keys: &Keys, token: &str) -> Result<()> {
        self.leave_with(keys, token, Doubt::Sure)
    }

    fn abandon(&mut self, keys: &Keys, token: &str) -> Result<()> {
        self.leave_with(keys, token, Doubt::Unsure)
    }

    /// Releases on every node, passing the lock on as [`Nodes::hand_on`] does. The checks of what
    /// the nodes said decide in this order: released on too few of them
    /// ([`Nodes::released_too_few`]), released (with nodes down), held by none.
    fn release(&mut self, keys: &Keys, by: &Releaser) -> Result<Verdict> {
        let n = self.n();
        // Every node gets the same releaser: a forced release records the same forcer on each.
        let conditional = matches!(by, Releaser::Force(_, Some(_)));
        let answers = {
            let (k, by) = (keys.clone(), by.clone());
            self.hand_on(
                keys,
                move |con, hand_over| lock::release(con, &k, &by, hand_over),
                |(_, next): &(Verdict, Option<String>)| next.clone(),
            )
        };
        let failed = self.failures(&answers);
        let verdicts: Vec<Verdict> = answers
            .into_iter()
            .filter_map(|a| a.and_then(Result::ok).map(|(v, _)| v))
            .collect();
        if let Some(error) = self.released_too_few(keys, by, &verdicts) {
            return Err(error);
        }
        let matched = verdicts
            .iter()
            .filter(|v| matches!(v, Verdict::Done(_) | Verdict::Deferred))
            .count();
        let unmatched = verdicts.len() - matched;
        if conditional && matched > 0 && unmatched > 0 {
            crate::messages::notice(
                &self.config,
                format_args!(
                    "released '{}' on {matched} of {n} servers; on {unmatched} the lock did not \
                     match the condition (another holder, or a fence not written back there) and \
                     stays until its TTL",
                    keys.name
                ),
            );
        }
        // The owner's release of a lock its keeper is stopping: the keeper releases it (on every
        // node) once the work has ended.
        if verdicts.contains(&Verdict::Deferred) {
            return Ok(Verdict::Deferred);
        }
        if let Some(done) = verdicts.iter().find(|v| matches!(v, Verdict::Done(_))) {
            if !failed.is_empty() {
                crate::messages::notice(
                    &self.config,
                    format_args!(
                        "released '{}' where it was held; {}: the lock expires there by its TTL",
                        keys.name,
                        joined(&failed)
                    ),
                );
            }
            // With --force, name a holder if any node recorded one.
            let holder = verdicts.iter().find_map(|v| match v {
                Verdict::Done(Some(h)) => Some(h.clone()),
                _ => None,
            });
            return Ok(match (done, holder) {
                (_, Some(h)) => Verdict::Done(Some(h)),
                (d, None) => d.clone(),
            });
        }
        // A keeper's release, after its owner's (a node kept the release's mark).
        if verdicts.contains(&Verdict::Released) {
            return Ok(Verdict::Released);
        }
        if !failed.is_empty() {
            return Err(self.no_quorum(
                keys,
                format!(
                    "{} of {n} servers answered and none held the token",
                    verdicts.len()
                ),
                &failed,
            ));
        }
        // Held by another token (or, for a conditional --force, by another holder than the one
        // named): name the holder with the highest fence, the one `status` shows.
        Ok(verdicts
            .iter()
            .filter(|v| matches!(v, Verdict::HeldByOther(_)))
            .max_by_key(|v| match v {
                Verdict::HeldByOther(Some(h)) => Some(h.fence),
                _ => None,
            })
            .cloned()
            .unwrap_or(Verdict::Free))
    }

    fn extend(
        &mut self,
        keys: &Keys,
        token: &str,
        ttl: Duration,
        _place: bool,
        draining: bool,
    ) -> Result<Verdict> {
        let (n, q) = (self.n(), self.q());
        let sent = Instant::now();
        let is_done = |a: &Option<Result<(Verdict, Option<String>)>>| {
            matches!(a, Some(Ok((Verdict::Done(_) | Verdict::Preempted(_), _))))
        };
        let answers = {
            let (k, t) = (keys.clone(), token.to_string());
            self.fan_out(
                |_| true,
                move |_, con| lock::extend(con, &k, &t, ttl, true, draining),
                move |a| {
                    let done = a.iter().filter(|a| is_done(a)).count();
                    let other = a.iter().flatten().count() - done;
                    done >= q || other > n - q
                },
            )
        };
        let elapsed = sent.elapsed();
        let failed = self.failures(&answers);
        let mut done = 0;
        let mut refused = Vec::new();
        // A node's word that a --preempt waiter asked us to stop (each node was asked).
        let mut preempted = None;
        for (i, a) in answers.into_iter().enumerate() {
            if let Some(Ok((verdict, run_id))) = a {
                // Above all a node that restarted empty: it says "free" and could grant the lock
                // to someone else.
                self.check_restart(i, run_id, keys);
                match verdict {
                    Verdict::Done(_) => done += 1,
                    Verdict::Preempted(p) => {
                        done += 1;
                        preempted.get_or_insert(p);
                    }
                    other => refused.push(other),
                }
            }
        }
        if done >= q && ttl > elapsed + drift(ttl) {
            return Ok(preempted.map_or(Verdict::Done(None), Verdict::Preempted));
        }
        if refused.len() > n - q {
            // A majority can no longer agree: the lock is gone (released by its holder, if a
            // node says so: see `Verdict::Released`).
            return Ok(refused
                .iter()
                .find(|v| matches!(v, Verdict::Released))
                .or_else(|| {
                    refused
                        .iter()
                        .find(|v| matches!(v, Verdict::HeldByOther(_)))
                })
                .cloned()
                .unwrap_or(Verdict::Free));
        }
        let what = if done >= q {
            format!(
                "extending took {} of the {} TTL",
                human(elapsed),
                human(ttl)
            )
        } else {
            format!("{done} of {n} servers extended it, {q} needed")
        };
        Err(self.no_quorum(keys, what, &failed))
    }

    fn inspect(&mut self, keys: &Keys) -> Result<State> {
        let (n, q) = (self.n(), self.q());
        let k = keys.clone();
        let answers = self.all(move |_, con| lock::inspect(con, &k));
        let nodes: Vec<(String, std::result::Result<State, String>)> = answers
            .into_iter()
            .zip(&self.endpoints)
            .map(|(a, ep)| {
                let view = match a {
                    Some(Ok(state)) => Ok(state),
                    Some(Err(e)) => Err(short_error(&e, &ep.display)),
                    None => Err("not asked".to_string()),
                };
                (ep.display.clone(), view)
            })
            .collect();
        Ok(verdict(keys, nodes, n, q))
    }

    /// One scan ([`Nodes::scan`]), then every node reads all the locks found, in
    /// batches (the nodes in parallel), and each lock gets its verdict as [`Store::inspect`]
    /// gives it.
    fn inspect_all(&mut self, prefix: &str) -> Result<Vec<State>> {
        let keys = Arc::new(self.scan(prefix)?);
        let (n, q) = (self.n(), self.q());
        let all = Arc::clone(&keys);
        let answers = self.all(move |_, con| lock::inspect_many(con, &all));
        let mut views: Vec<(
            String,
            std::result::Result<std::vec::IntoIter<State>, String>,
        )> = answers
            .into_iter()
            .zip(&self.endpoints)
            .map(|(a, ep)| {
                let view = match a {
                    Some(Ok(states)) => Ok(states.into_iter()),
                    Some(Err(e)) => Err(short_error(&e, &ep.display)),
                    None => Err("not asked".to_string()),
                };
                (ep.display.clone(), view)
            })
            .collect();
        Ok(keys
            .iter()
            .map(|k| {
                let nodes = views
                    .iter_mut()
                    .map(|(display, view)| {
                        let state = match view {
                            // inspect_many answers every key, in order.
                            Ok(states) => states.next().ok_or_else(|| "no answer".to_string()),
                            Err(e) => Err(e.clone()),
                        };
                        (display.clone(), state)
                    })
                    .collect();
                verdict(k, nodes, n, q)
            })
            .collect())
    }

    fn parking(&mut self) -> Option<&mut Redis> {
        if self.cons[0].is_none() {
            // The connection a late call still has (it ends within its timeouts), else a new one.
            let late = (self.late[0].take()).and_then(|rx| take_back(&rx, self.config.io_timeout));
            self.cons[0] = late.or_else(|| Redis::connect_node(&self.config, 0).ok());
        }
        self.cons[0].as_mut()
    }

    fn recover(&mut self) -> Result<()> {
        // Nothing to do: a node whose call failed lost its connection already, and gets a fresh
        // one when it is asked again, unless its reply was only late (kept, and resynchronised
        // before its next command).
        Ok(())
    }

    fn wait_replicas(&mut self, _keys: &Keys, _replicas: u32, _timeout: Duration) -> Result<i64> {
        Err(crate::error::usage(
            "--wait-replicas does not apply to a quorum of independent masters",
        ))
    }

    fn track_restarts(&mut self, run_ids: &[Option<String>]) {
        for (mine, theirs) in self.run_ids.iter_mut().zip(run_ids) {
            *mine = theirs.clone();
        }
    }
}

/// The quorum's verdict on one lock from each node's state.
fn verdict(
    keys: &Keys,
    nodes: Vec<(String, std::result::Result<State, String>)>,
    n: usize,
    q: usize,
) -> State {
    let answered: Vec<&State> = nodes.iter().filter_map(|(_, s)| s.as_ref().ok()).collect();
    let free = answered.iter().filter(|s| !s.held()).count();
    let best = most_held(&answered);
    let fence = answered.iter().map(|s| s.fence).max().unwrap_or(0);
    // Only the queue node keeps waiters.
    let queue_node = nodes.first().and_then(|(_, s)| s.as_ref().ok());
    let waiters = queue_node.map_or(0, |s| s.waiters);
    let queue = queue_node.map(|s| s.queue.clone()).unwrap_or_default();
    let mut state = State {
        keys: keys.clone(),
        token: None,
        pttl_ms: -2,
        now_ms: answered.first().map_or(0, |s| s.now_ms),
        fence,
        holder: None,
        last: None,
        waiters,
        queue,
        stale: None,
        // The latest forced release any node recorded (a forced release records it on each).
        forced: answered
            .iter()
            .filter_map(|s| s.forced.clone())
            .max_by_key(|f| f.at_ms),
        quorum: None,
        slots: None,
        // Each node counts the acquisitions that ran on it (`status --format prometheus` shows
        // each node's); these are the counters of the node that counted the most.
        counters: answered
            .iter()
            .map(|s| s.counters)
            .max_by_key(|c| c.acquisitions)
            .unwrap_or_default(),
    };
    let (verdict, agree) = match best {
        Some((token, with)) if with.len() >= q => {
            // The lock lasts while a majority keeps it: the q-th longest TTL among its nodes.
            let mut ttls: Vec<i64> = with.iter().map(|s| s.pttl_ms).collect();
            ttls.sort_unstable_by(|a, b| b.cmp(a));
            let holder_node = with.iter().find(|s| s.holder.is_some()).unwrap_or(&with[0]);
            state.token = Some(token.to_string());
            // The holder's fence is the highest among its own nodes; another node's counter
            // may be higher from attempts that failed.
            state.fence = with.iter().map(|s| s.fence).max().unwrap_or(fence);
            state.pttl_ms = ttls[q - 1];
            state.now_ms = holder_node.now_ms;
            state.holder = holder_node.holder.clone();
            (QuorumVerdict::Held, with.len())
        }
        _ if free >= q => {
            // The most recent record any node kept.
            state.last = answered
                .iter()
                .filter_map(|s| s.last.as_ref())
                .max_by_key(|h| h.fence)
                .cloned();
            (QuorumVerdict::Free, free)
        }
        _ if answered.len() < q => (QuorumVerdict::Unknown, answered.len()),
        Some((_, with)) => (QuorumVerdict::Split, with.len()),
        None => (QuorumVerdict::Split, free),
    };
    state.quorum = Some(QuorumView {
        verdict,
        needed: q,
        agree,
        nodes,
    });
    debug_assert!(n >= q);
    state
}

/// The token on the most nodes (the first found, on a tie), and the nodes holding it.
fn most_held<'a>(answered: &[&'a State]) -> Option<(&'a str, Vec<&'a State>)> {
    let mut best: Option<(&str, Vec<&State>)> = None;
    for s in answered {
        if let Some(t) = s.token.as_deref() {
            let with: Vec<&State> = answered
                .iter()
                .copied()
                .filter(|o| o.token.as_deref() == Some(t))
                .collect();
            if best.as_ref().is_none_or(|(_, b)| with.len() > b.len()) {
                best = Some((t, with));
            }
        }
    }
    best
}

/// What a give-back ends: the whole wait, or one attempt of a wait that goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GiveUp {
    ForGood,
    ThisAttempt,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::Holder;

    #[test]
    fn majorities() {
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10)), Duration::from_millis(102));
    }

    const TTL: Duration = Duration::from_secs(1);

    fn keys() -> Keys {
        Keys::new("redlock:", "job").unwrap()
    }

    /// One node's answer per letter, the queue node first: `G` granted (fence 100 + node, so
    /// the fences differ), `g` granted (fence 100), `B` busy, held by someone else (TTL 100 ms ×
    /// (node + 1)), `Q` busy with us in the queue, `R` busy and reserved for another waiter (the
    /// queue node's veto), `V` the same with us in the queue, `F` no answer in time (it may still
    /// apply the attempt), `X` refused (credentials: it did not run the attempt).
    fn answers(spec: &str) -> Answers<Attempt> {
        let busy = |i: i64, queued, reserved| Attempt::Busy {
            pttl_ms: 100 * (i + 1),
            queued,
            reserved,
            seen: None,
        };
        spec.chars()
            .zip(0i64..)
            .map(|(c, i)| {
                Some(Ok(match c {
                    'G' | 'g' => Attempt::Granted(Lock {
                        keys: keys(),
                        token: "t".to_string(),
                        fence: if c == 'G' { 100 + i } else { 100 },
                        acquired_ms: 1000 + i,
                        ttl: TTL,
                        sent: Instant::now(),
                        drift: Duration::ZERO,
                        run_ids: vec![Some(format!("run{i}"))],
                        slot: None,
                    }),
                    'B' => busy(i, false, false),
                    'Q' => busy(i, true, false),
                    'R' => busy(i, false, true),
                    'V' => busy(i, true, true),
                    'F' => return Some(Err(failure(Kind::Unavailable, format!("node {i} slow")))),
                    'X' => return Some(Err(failure(Kind::Auth, format!("node {i} refused")))),
                    other => panic!("unknown answer {other:?}"),
                }))
            })
            .collect()
    }

    fn tally(spec: &str) -> Tally {
        let answers = answers(spec);
        let failed = answers
            .iter()
            .filter_map(|a| match a {
                Some(Err(e)) => Some((kind_of(e), format!("{e}"))),
                _ => None,
            })
            .collect();
        Tally::of(&answers, failed)
    }

    fn round(n: usize, join: bool, elapsed_ms: u64, recorded: Option<usize>) -> Round {
        Round {
            n,
            q: quorum(n),
            join,
            ttl: TTL,
            elapsed: Duration::from_millis(elapsed_ms),
            recorded,
        }
    }

    #[test]
    fn tally_counts_the_answers() {
        let t = tally("GGB");
        assert_eq!(t.granted, [true, true, false]);
        assert_eq!((t.grants(), t.fence(), t.acquired_ms), (2, 101, 1001));
        assert_eq!(t.run_ids[1].as_deref(), Some("run1"));
        assert_eq!(t.run_ids[2], None);
        // The queue node granted it: the longest TTL among the others decides when to look again.
        assert_eq!(t.busy_pttl, Some(300));
        assert!(!t.queued && !t.vetoed);
        assert_eq!(t.doubt(), Doubt::Sure);
        // The queue node's view decides when to look again.
        let t = tally("QBB");
        assert_eq!((t.busy_pttl, t.queued, t.vetoed), (Some(100), true, false));
        assert_eq!((tally("RGG").vetoed, tally("BGG").vetoed), (true, false));
        // Only a node that may still apply the attempt is missing: a refusal did not run it.
        let t = tally("FXG");
        assert_eq!(t.missing, [true, false, false]);
        assert_eq!(
            (t.failed.len(), t.doubt(), t.busy_pttl),
            (2, Doubt::Unsure, None)
        );
        assert_eq!(tally("FBB").busy_pttl, Some(300));
    }

    #[test]
    fn decisions() {
        use Cleanup::{GiveBack, Undo};
        use Decision::{Held, NotOurs, RecordFence, RetryTurn};
        use Miss::{Busy, FenceNotRecorded, NoMajority, TooSlow};
        let busy = |queued, reserved| Busy { queued, reserved };
        let undo = |keep_place| Undo { keep_place };
        let not_ours = |cleanup, why| NotOurs { cleanup, why };
        let held = Held { leave_queue: false };
        // (what, answers, a waiter's attempt, ms elapsed, fence recorded on, decision)
        #[rustfmt::skip]
        let cases = [
            ("3: all granted, fences differ", "GGG", false, 10, None, RecordFence),
            ("3: all granted, fence recorded", "GGG", false, 10, Some(3), held),
            ("3: fences agree: no write-back", "ggB", false, 10, None, held),
            ("3: majority with the queue node", "GGB", false, 10, Some(2), held),
            ("3: majority elsewhere, queue node held", "BGG", false, 10, Some(2), held),
            ("3: majority elsewhere, queue node refused", "XGG", false, 10, Some(2), held),
            ("3: majority elsewhere, we queued there", "QGG", true, 10, Some(2),
                Held { leave_queue: true }),
            ("3: veto: reserved for another", "RGG", false, 10, None,
                not_ours(undo(false), busy(false, true))),
            ("3: veto while we wait in the queue", "VGG", true, 10, None,
                not_ours(undo(true), busy(true, true))),
            ("3: our turn, no majority, waiting", "GBB", true, 10, None, RetryTurn),
            ("3: our turn, no majority, not waiting", "GBB", false, 10, None,
                not_ours(GiveBack, busy(false, false))),
            ("3: validity left at the edge", "GGB", false, 987, Some(2), held),
            ("3: no validity left", "GGB", false, 988, Some(2), not_ours(GiveBack, TooSlow)),
            ("3: no validity left, queue node held", "BGG", false, 990, Some(2),
                not_ours(undo(false), TooSlow)),
            ("3: fence recorded on fewer than Q", "GGB", false, 10, Some(1),
                not_ours(GiveBack, FenceNotRecorded { recorded: 1 })),
            ("3: more than N-Q failed, our turn", "GFF", true, 10, None,
                not_ours(GiveBack, NoMajority { answered: 1 })),
            ("3: more than N-Q failed, queued", "QFF", true, 10, None,
                not_ours(undo(true), NoMajority { answered: 1 })),
            ("3: more than N-Q failed, busy", "BFX", false, 10, None,
                not_ours(undo(false), NoMajority { answered: 1 })),
            ("3: busy, keeping our place", "QBB", true, 10, None,
                not_ours(undo(true), busy(true, false))),
            ("3: busy, no place", "BBB", false, 10, None, not_ours(undo(false), busy(false, false))),
            ("3: split", "BGB", false, 10, None, not_ours(undo(false), busy(false, false))),
            ("5: majority, fences differ", "GGGBB", false, 10, None, RecordFence),
            ("5: majority with the queue node", "GGGBB", false, 10, Some(3), held),
            ("5: majority elsewhere", "BBGGG", false, 10, Some(3), held),
            ("5: majority elsewhere, we queued there", "QGGGB", true, 10, Some(3),
                Held { leave_queue: true }),
            ("5: veto: reserved for another", "RGGGG", false, 10, None,
                not_ours(undo(false), busy(false, true))),
            ("5: our turn, no majority, waiting", "GGBBB", true, 10, None, RetryTurn),
            ("5: our turn, N-Q failed, waiting", "GGBFF", true, 10, None, RetryTurn),
            ("5: our turn, no majority, not waiting", "GGBBB", false, 10, None,
                not_ours(GiveBack, busy(false, false))),
            ("5: no validity left", "GGGBB", false, 990, Some(3), not_ours(GiveBack, TooSlow)),
            ("5: fence recorded on fewer than Q", "GGGBB", false, 10, Some(2),
                not_ours(GiveBack, FenceNotRecorded { recorded: 2 })),
            ("5: more than N-Q failed, our turn", "GGFFF", true, 10, None,
                not_ours(GiveBack, NoMajority { answered: 2 })),
            ("5: more than N-Q failed, busy", "BBFFF", false, 10, None,
                not_ours(undo(false), NoMajority { answered: 2 })),
            ("5: busy, keeping our place", "QBBFF", true, 10, None,
                not_ours(undo(true), busy(true, false))),
            ("5: busy, no place", "BBBFF", false, 10, None,
                not_ours(undo(false), busy(false, false))),
        ];
        // Every wrong case at once, so that a change shows all it breaks.
        let wrong: Vec<String> = cases
            .into_iter()
            .filter_map(|(what, spec, join, elapsed_ms, recorded, want)| {
                let got = decide(&tally(spec), &round(spec.len(), join, elapsed_ms, recorded));
                (got != want).then(|| format!("{what} ({spec}): {got:?}, expected {want:?}"))
            })
            .collect();
        assert!(wrong.is_empty(), "wrong decisions:\n{}", wrong.join("\n"));
    }

    #[test]
    fn one_server_twice_is_refused_first() {
        let mut t = tally("RGG");
        t.run_ids[2] = t.run_ids[1].clone();
        assert_eq!(
            decide(&t, &round(3, false, 10, None)),
            Decision::SameServer(1, 2)
        );
    }

    #[test]
    fn turn_delay_doubles_up_to_a_third_of_the_ttl() {
        let ms = Duration::from_millis;
        assert_eq!(turn_delay(0, TTL), ms(25));
        assert_eq!(turn_delay(3, TTL), ms(200));
        assert_eq!(turn_delay(5, TTL), TTL / 3);
        assert_eq!(turn_delay(30, Duration::from_secs(60)), lock::BLOCK_CAP);
    }

    fn holder(token: &str, fence: i64, user: &str) -> Holder {
        Holder {
            token: token.to_string(),
            fence,
            host: "web1".to_string(),
            pid: "42".to_string(),
            user: user.to_string(),
            note: String::new(),
            acquired_ms: Some(1000),
            ttl_ms: Some(1000),
            expires_ms: None,
            released_ms: None,
            pidns: String::new(),
            ..Holder::default()
        }
    }

    /// A node's state: `token` held with `pttl_ms` left (its holder record names `user`), or
    /// free (`None`) with a last holder whose fence is `fence`.
    fn node(token: Option<&str>, pttl_ms: i64, fence: i64, user: &str) -> State {
        State {
            keys: keys(),
            token: token.map(str::to_string),
            pttl_ms,
            now_ms: 5000 + fence,
            fence,
            holder: token.map(|t| holder(t, fence, user)),
            last: token
                .is_none()
                .then(|| Box::new(holder("old", fence, user))),
            waiters: fence,
            queue: Vec::new(),
            stale: None,
            forced: None,
            quorum: None,
            counters: Default::default(),
            slots: None,
        }
    }

    fn look(nodes: Vec<std::result::Result<State, String>>) -> State {
        let n = nodes.len();
        let nodes = nodes
            .into_iter()
            .enumerate()
            .map(|(i, s)| (format!("redis://node{i}"), s))
            .collect();
        verdict(&keys(), nodes, n, quorum(n))
    }

    fn view(s: &State) -> (QuorumVerdict, usize, Option<&str>) {
        let q = s.quorum.as_ref().unwrap();
        (q.verdict, q.agree, s.token.as_deref())
    }

    #[test]
    fn verdict_held_reports_the_holders_nodes() {
        let free = || Ok(node(None, -2, 20, "old"));
        let s = look(vec![
            Ok(node(Some("A"), 900, 10, "alice")),
            Ok(node(Some("A"), 500, 12, "alice")),
            free(),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Held, 2, Some("A")));
        // The lock lasts while a majority keeps it: the Q-th longest TTL of the holder's nodes.
        assert_eq!(s.pttl_ms, 500);
        // The holder's fence is the highest among its own nodes, not the free node's counter.
        assert_eq!(s.fence, 12);
        assert_eq!(s.holder.as_ref().map(|h| h.user.as_str()), Some("alice"));
        // The queue node (the first) counts the waiters.
        assert_eq!(s.waiters, 10);
        let s = look(vec![
            Ok(node(Some("B"), 1000, 30, "bob")),
            Ok(node(Some("A"), 900, 10, "alice")),
            Ok(node(Some("A"), 700, 11, "alice")),
            Ok(node(Some("A"), 800, 12, "alice")),
            Ok(node(Some("A"), 500, 13, "alice")),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Held, 4, Some("A")));
        assert_eq!((s.pttl_ms, s.fence, s.now_ms), (700, 13, 5010));
        assert_eq!(s.holder.as_ref().map(|h| h.user.as_str()), Some("alice"));
        assert_eq!(QuorumVerdict::Held.as_str(), "held");
    }

    #[test]
    fn verdict_free_split_unknown() {
        let s = look(vec![
            Ok(node(None, -2, 7, "old")),
            Ok(node(Some("A"), 900, 10, "alice")),
            Ok(node(None, -2, 9, "older")),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Free, 2, None));
        assert_eq!(s.pttl_ms, -2);
        // The most recent record any node kept (the highest fence), and the highest counter.
        assert_eq!(s.last.as_ref().map(|h| h.user.as_str()), Some("older"));
        assert_eq!((s.fence, s.holder.is_none()), (10, true));
        let s = look(vec![
            Ok(node(Some("A"), 900, 10, "alice")),
            Ok(node(Some("B"), 800, 11, "bob")),
            Ok(node(None, -2, 9, "old")),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Split, 1, None));
        assert_eq!(s.pttl_ms, -2);
        let s = look(vec![
            Ok(node(Some("A"), 900, 10, "alice")),
            Ok(node(Some("A"), 900, 10, "alice")),
            Ok(node(Some("B"), 800, 11, "bob")),
            Ok(node(Some("B"), 800, 11, "bob")),
            Ok(node(None, -2, 9, "old")),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Split, 2, None));
        let s = look(vec![
            Ok(node(Some("A"), 900, 10, "alice")),
            Err("redis://node1 (refused)".to_string()),
            Err("redis://node2 (timed out)".to_string()),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Unknown, 1, None));
        let s = look(vec![
            Err("down".to_string()),
            Ok(node(None, -2, 9, "old")),
            Err("down".to_string()),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Unknown, 1, None));
        // Every node's view is kept, in order, for `status`.
        let nodes = &s.quorum.as_ref().unwrap().nodes;
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].0, "redis://node0");
        assert_eq!(nodes[0].1.as_ref().err().map(String::as_str), Some("down"));
        assert_eq!(s.waiters, 0);
    }
}
