//! Redlock: one lock over N independent Redis masters, held when a majority granted it.
//!
//! The layer above `store.rs`: [`Nodes`] implements its [`Store`] trait over N servers, with the
//! one-server calls of `lock/`; `acquire.rs` and `backend.rs` are above it. The decisions are
//! pure functions with table tests (in `verdict.rs`): [`decide`] reads an attempt's answers,
//! counted into a [`Tally`], and [`verdict()`] the nodes' states for `status`; the methods around
//! them do the I/O. `fan.rs` runs one call on many nodes at once ([`Nodes::fan_out`]).
//!
//! Every operation runs the one-server scripts of `lock/` on all nodes in parallel (a thread
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
//!   leaves it in place, resynchronised before its next command (`client/`). So a slow node
//!   costs no new connection, which a node full of clients (`maxclients`) may refuse.
//! - Extend needs a majority within the validity; a majority that can no longer be reached
//!   (enough nodes say free or another token) means the lock is lost.
//!
//! Layer 9 of the list in `lib.rs`.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::client::Redis;
use crate::config::{Config, Endpoint};
use crate::error::{Kind, failure, kind_of};
use crate::lock::{
    self, Attempt, Doubt, HandOver, Join, Keys, Lock, Queue, Releaser, Reply, Request, State,
    Verdict,
};
use crate::store::Store;

mod fan;
mod verdict;

use fan::{Answers, answered, take_back};
use verdict::{Cleanup, Decision, Miss, Round, Tally, decide, turn_delay, verdict};
pub use verdict::{drift, quorum};

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

/// The failed nodes' descriptions, for a message.
fn joined(failed: &[(Kind, String)]) -> String {
    let list: Vec<&str> = failed.iter().map(|(_, s)| s.as_str()).collect();
    list.join(", ")
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

    /// What a release that reached enough nodes ([`Nodes::released_too_few`]) returns, from the
    /// nodes' `verdicts` (`failed`: the nodes that did not answer): released (with nodes down),
    /// held by none.
    fn release_verdict(
        &self,
        keys: &Keys,
        by: &Releaser,
        verdicts: &[Verdict],
        failed: &[(Kind, String)],
    ) -> Result<Verdict> {
        let n = self.n();
        let conditional = matches!(by, Releaser::Force(_, Some(_)));
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
                        joined(failed)
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
                failed,
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
                        // Never: a majority grants, not one node.
                        grant: false,
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
                        lease: ttl,
                        taken: Instant::now(),
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
    /// ([`Nodes::released_too_few`]), released (with nodes down), held by none
    /// ([`Nodes::release_verdict`]).
    fn release(&mut self, keys: &Keys, by: &Releaser) -> Result<Verdict> {
        // Every node gets the same releaser: a forced release records the same forcer on each.
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
        self.release_verdict(keys, by, &verdicts, &failed)
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

/// What a give-back ends: the whole wait, or one attempt of a wait that goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GiveUp {
    ForGood,
    ThisAttempt,
}
