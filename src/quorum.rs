//! Redlock: one lock over N independent Redis masters, held when a majority granted it.
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
//!   waiter whose turn is next where our token is not), so every release wakes the next waiter. Each attempt of a waiter uses a fresh token that takes over the previous one's
//!   place and reservation (a late undo must never match a later attempt). With the first node
//!   down, waiters retry when the holder's TTL runs out (at most every few seconds).
//! - A node that answers only after the outcome was settled (frozen, or far slower than the
//!   others) may apply a failed attempt after its undo. So the undo on a node whose answer was
//!   missing leaves a tombstone for the token (`leave.lua`, [`lock::TOMBSTONE`]): the late
//!   attempt does nothing there.
//! - Extend needs a majority within the validity; a majority that can no longer be reached
//!   (enough nodes say free or another token) means the lock is lost.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::client::Redis;
use crate::config::{Config, Endpoint};
use crate::error::{Kind, failure, kind_of};
use crate::lock::{
    self, Attempt, Doubt, Keys, Lock, QuorumView, Releaser, Request, State, Verdict,
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
    /// (within its timeouts) and its connection is replaced next time.
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
        for i in (0..self.n()).filter(|&i| ask(i)) {
            let (f, node_tx, config, con) = (
                Arc::clone(&f),
                tx.clone(),
                Arc::clone(&self.config),
                self.cons[i].take(),
            );
            let spawned = std::thread::Builder::new()
                .name(format!("node-{i}"))
                .spawn(move || {
                    let (result, con) = on_node(&config, i, con, |i, con| f(i, con));
                    let _ = node_tx.send((i, result, con));
                });
            match spawned {
                Ok(_) => pending.push(i),
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
            let Ok((i, result, con)) = next else {
                break;
            };
            answers[i] = Some(result);
            self.cons[i] = con;
            pending.retain(|&p| p != i);
        }
        for i in pending {
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
                lock::leave_to(con, &k, &t, false, None, doubt)
            },
            move |a| answered(a) + skipped >= q,
        );
    }

    /// Leaves the queue and gives back what `token` holds or has reserved, on every node, the
    /// way a release does (see [`Nodes::hand_on`]), so no newcomer slips in when a waiter gives up
    /// its turn.
    /// [`Store::leave`] and [`Store::abandon`]: an error only when no node answered.
    fn leave_with(&mut self, keys: &Keys, token: &str, doubt: Doubt) -> Result<()> {
        let answers = self.give_back(keys, token, doubt);
        if answered(&answers) > 0 {
            return Ok(());
        }
        let failed = self.failures(&answers);
        Err(self.no_quorum(keys, "no server answered".to_string(), &failed))
    }

    /// With [`Doubt::Unsure`], every node gets a tombstone for `token` (see [`Nodes::undo`]).
    fn give_back(&mut self, keys: &Keys, token: &str, doubt: Doubt) -> Answers<Option<String>> {
        let (k, t) = (keys.clone(), token.to_string());
        self.hand_on(
            keys,
            move |con, quiet, to| lock::leave_to(con, &k, &t, quiet, to, doubt),
            Option::clone,
        )
    }

    /// Runs `step` (a release or a leave) so that the lock passes to the next waiter on every
    /// node at once: the queue node first, quietly (it picks the next waiter without waking it;
    /// the other nodes only connect meanwhile), then the others with that waiter as `to`, which
    /// reserve the lock for it in the same script as their own step (no newcomer in between),
    /// and only then the waiter is woken. `next_of` reads the waiter from the queue node's answer.
    fn hand_on<T: Send + 'static>(
        &mut self,
        keys: &Keys,
        step: impl Fn(&mut Redis, bool, Option<&str>) -> Result<T> + Clone + Send + Sync + 'static,
        next_of: impl Fn(&T) -> Option<String>,
    ) -> Answers<T> {
        let q = self.q();
        let first_step = step.clone();
        let first = self.fan_out(
            |_| true,
            move |i, con| match i {
                0 => first_step(con, true, None).map(Some),
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
            move |_, con| step(con, false, to.as_deref()),
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

    /// Two node addresses that turned out to be one server (the same run_id), if any.
    fn same_server(&self, run_ids: &[Option<String>]) -> Option<(usize, usize)> {
        for (i, a) in run_ids.iter().enumerate() {
            for (j, b) in run_ids.iter().enumerate().skip(i + 1) {
                if a.is_some() && a == b {
                    return Some((i, j));
                }
            }
        }
        None
    }
}

/// Runs `f` on node `i`, connecting first if `con` is `None`. Returns the connection to keep:
/// none after a failure (it may still have a reply on its way).
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
    let keep = result.is_ok().then_some(con);
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
    lock::human_ms(d)
}

impl Store for Nodes {
    fn try_acquire(&mut self, keys: &Keys, token: &str, req: &Request) -> Result<Attempt> {
        let (ttl, join) = (req.ttl, req.join);
        let (n, q) = (self.n(), self.q());
        let sent = Instant::now();
        let is_grant = |a: &Option<Result<Attempt>>| matches!(a, Some(Ok(Attempt::Granted(_))));
        let answers = {
            let (k, t, o) = (keys.clone(), token.to_string(), req.owner.clone());
            let p = req.prev.map(str::to_string);
            self.fan_out(
                |_| true,
                move |i, con| {
                    let req = Request {
                        ttl,
                        owner: &o,
                        // Only the queue node keeps waiters.
                        join: join && i == 0,
                        run_id: true,
                        prev: p.as_deref(),
                    };
                    lock::try_acquire(con, &k, &t, &req)
                },
                // A majority granted it, or can no longer grant it; a waiter also needs the queue
                // node's answer (it keeps our place in the queue).
                move |a| {
                    let granted = a.iter().filter(|a| is_grant(a)).count();
                    let other = a.iter().flatten().count() - granted;
                    (granted >= q || other > n - q) && (!join || a[0].is_some())
                },
            )
        };
        // Nodes that may still apply this attempt (no answer, or a lost one): see `undo`.
        let missing: Vec<bool> = answers
            .iter()
            .map(|a| match a {
                Some(Ok(_)) => false,
                // Refused (credentials, a script error, a replica): the node did not run the
                // attempt.
                Some(Err(e)) => kind_of(e) == Kind::Unavailable && !crate::error::was_refused(e),
                None => true,
            })
            .collect();
        let unsure = if missing.contains(&true) {
            Doubt::Unsure
        } else {
            Doubt::Sure
        };
        let mut granted = vec![false; n];
        let mut fences = Vec::new();
        let mut run_ids = vec![None; n];
        let mut acquired_ms = 0;
        let mut busy_pttl: Option<i64> = None;
        let mut queued = false;
        for (i, a) in answers.iter().enumerate() {
            match a {
                Some(Ok(Attempt::Granted(l))) => {
                    granted[i] = true;
                    fences.push(l.fence);
                    run_ids[i] = l.run_ids.first().cloned().flatten();
                    acquired_ms = acquired_ms.max(l.acquired_ms);
                }
                // The queue node's view decides when to look again; else the longest TTL.
                Some(Ok(Attempt::Busy {
                    pttl_ms,
                    queued: in_queue,
                    ..
                })) => {
                    if i == 0 {
                        queued = *in_queue;
                        busy_pttl = Some(*pttl_ms);
                    } else if !matches!(answers[0], Some(Ok(Attempt::Busy { .. }))) {
                        busy_pttl = Some(busy_pttl.map_or(*pttl_ms, |p| p.max(*pttl_ms)));
                    }
                }
                _ => {}
            }
        }
        let failed = self.failures(&answers);
        let grants = fences.len();
        let fence = fences.iter().copied().max().unwrap_or(0);
        if let Some((a, b)) = self.same_server(&run_ids) {
            self.undo(keys, token, |_| true, missing);
            return Err(crate::error::usage(format!(
                "{} and {} are the same Redis server (same run_id); a quorum needs independent \
                 servers",
                self.endpoints[a].display, self.endpoints[b].display
            )));
        }
        // The fence goes back to the granting nodes before the lock counts as ours, unless they
        // all agree already (rare now that a node's value is at least its clock in µs: this is
        // one more round trip per acquisition, the price of fences that a node's lost counter
        // cannot take back).
        let mut recorded = grants;
        // The queue node decides whose turn it is: when it has the lock reserved for another
        // waiter, or granted to the waiter whose turn it is and who has no majority yet (its
        // other grants are on their way), a majority of the others does not count, or a newcomer
        // or a later waiter could overtake the queue when a lock expires. (A lock otherwise held
        // there by someone else does not veto: the majority decides who holds it.)
        let vetoed = matches!(answers[0], Some(Ok(Attempt::Busy { reserved: true, .. })));
        if grants >= q && !vetoed && fences.iter().any(|&f| f != fence) {
            let (k, t) = (keys.clone(), token.to_string());
            let raised = self.fan_out(
                |i| granted[i],
                move |_, con| lock::raise_fence(con, &k, &t, fence),
                move |a| a.iter().filter(|a| matches!(a, Some(Ok(true)))).count() >= q,
            );
            recorded = raised
                .iter()
                .filter(|a| matches!(a, Some(Ok(true))))
                .count();
        }
        let elapsed = sent.elapsed();
        let allowed = drift(ttl);
        let valid = ttl > elapsed + allowed;
        if grants >= q && recorded >= q && valid && !vetoed {
            if queued && !granted[0] {
                // Taken without the queue node: leave its queue, or it would hand us the lock
                // again later. Best effort: the lease runs out by itself.
                let (k, t) = (keys.clone(), token.to_string());
                self.fan_out(
                    |i| i == 0,
                    move |_, con| lock::leave(con, &k, &t),
                    |_| false,
                );
            }
            return Ok(Attempt::Granted(Lock {
                keys: keys.clone(),
                token: token.to_string(),
                fence,
                acquired_ms,
                ttl,
                sent,
                drift: allowed,
                run_ids,
            }));
        }
        // Not ours: undo it everywhere, except our place in the queue while we wait on. What the
        // queue node granted us goes to the next waiter, on every node, as in a release.
        let keep_place = queued && !granted[0];
        // Our turn on the queue node, but not a majority yet: the other nodes are held by
        // someone, often a contender whose vetoed attempt is being undone right now. Keep the
        // queue node (our next attempt, with a fresh token, takes it over) and look again soon,
        // backing off, instead of handing our turn to the next waiter.
        let our_turn = granted[0] && grants < q && failed.len() <= n - q;
        if our_turn && join {
            self.undo(keys, token, |i| i != 0, missing);
            // Never longer than a third of the TTL: the queue node's grant, which is our turn,
            // lasts one TTL from this attempt, and the next attempt renews it. Waiting past it
            // lost the turn to the next waiter, and we went to the back of the queue (finding 13
            // of issue 11: with --ttl 1s the backoff reached 1.6s while the other nodes were
            // still reserved for our previous attempt's token by a release that crossed it).
            let delay = TURN_RETRY
                .saturating_mul(1 << self.turn_retries.min(8))
                .min(lock::BLOCK_CAP)
                .min(ttl / 3);
            self.turn_retries += 1;
            // "Queued": something of ours is on the queue node, which giving up must undo.
            return Ok(Attempt::Busy {
                pttl_ms: i64::try_from(delay.as_millis()).unwrap_or(i64::MAX),
                queued: true,
                reserved: false,
            });
        }
        self.turn_retries = 0;
        if granted[0] {
            self.give_back(keys, token, unsure);
        } else {
            self.undo(keys, token, |i| !(i == 0 && keep_place), missing);
        }
        if grants >= q && !valid && !vetoed {
            return Err(self.no_quorum(
                keys,
                format!(
                    "{grants} of {n} servers granted it, but that took {} of the {} TTL \
                     ({} allowed for clock drift); lower the latency or raise --ttl",
                    human(elapsed),
                    human(ttl),
                    human(allowed)
                ),
                &failed,
            ));
        }
        if grants >= q && !vetoed {
            return Err(self.no_quorum(
                keys,
                format!("the fence could be recorded on {recorded} of {n} servers, {q} needed"),
                &failed,
            ));
        }
        if failed.len() > n - q {
            return Err(self.no_quorum(
                keys,
                format!("{} of {n} servers answered, {q} needed", n - failed.len()),
                &failed,
            ));
        }
        Ok(Attempt::Busy {
            // A majority answered but the lock was taken or split: look again when it expires.
            pttl_ms: busy_pttl.unwrap_or(-2),
            queued: keep_place,
            reserved: vetoed,
        })
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

    fn release(&mut self, keys: &Keys, by: &Releaser) -> Result<Verdict> {
        let n = self.n();
        // Every node gets the same releaser: a forced release records the same forcer on each.
        let holder_release = matches!(by, Releaser::Holder(_));
        let (k, by) = (keys.clone(), by.clone());
        let answers = self.hand_on(
            keys,
            move |con, quiet, to| lock::release(con, &k, &by, quiet, to),
            |(_, next): &(Verdict, Option<String>)| next.clone(),
        );
        let failed = self.failures(&answers);
        let verdicts: Vec<Verdict> = answers
            .into_iter()
            .filter_map(|a| a.and_then(Result::ok).map(|(v, _)| v))
            .collect();
        let done = verdicts.iter().find(|v| matches!(v, Verdict::Done(_)));
        // Released where our token was; but if more than N−Q of the nodes that answered did not
        // have it, a majority never kept it to the end (deleted, flushed, expired, taken by
        // another client): that is not the owner's release, it is a lock lost before it. The
        // nodes that had it are released all the same.
        let not_ours = verdicts.len()
            - verdicts
                .iter()
                .filter(|v| matches!(v, Verdict::Done(_)))
                .count();
        if done.is_some() && holder_release && not_ours > n - self.q() {
            let now = match verdicts.iter().find_map(|v| match v {
                Verdict::HeldByOther(h) => Some(h),
                _ => None,
            }) {
                Some(Some(h)) => format!("{} holds it now", h.who()),
                Some(None) => "another token holds it now".to_string(),
                None => "it is free now".to_string(),
            };
            return Err(failure(
                Kind::NotOwner,
                format!(
                    "not the owner: only {} of {n} servers still had the token ({} needed), so \
                     the lock was lost before this release; {now} (released where it was left)",
                    verdicts.len() - not_ours,
                    self.q()
                ),
            ));
        }
        if let Some(done) = done {
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
        Ok(verdicts
            .iter()
            .find(|v| matches!(v, Verdict::HeldByOther(_)))
            .cloned()
            .unwrap_or(Verdict::Free))
    }

    fn extend(&mut self, keys: &Keys, token: &str, ttl: Duration) -> Result<Verdict> {
        let (n, q) = (self.n(), self.q());
        let sent = Instant::now();
        let is_done = |a: &Option<Result<(Verdict, Option<String>)>>| {
            matches!(a, Some(Ok((Verdict::Done(_), _))))
        };
        let answers = {
            let (k, t) = (keys.clone(), token.to_string());
            self.fan_out(
                |_| true,
                move |_, con| lock::extend(con, &k, &t, ttl, true),
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
        for (i, a) in answers.into_iter().enumerate() {
            if let Some(Ok((verdict, run_id))) = a {
                // Above all a node that restarted empty: it says "free" and could grant the lock
                // to someone else.
                self.check_restart(i, run_id, keys);
                match verdict {
                    Verdict::Done(_) => done += 1,
                    other => refused.push(other),
                }
            }
        }
        if done >= q && ttl > elapsed + drift(ttl) {
            return Ok(Verdict::Done(None));
        }
        if refused.len() > n - q {
            // A majority can no longer agree: the lock is gone.
            return Ok(refused
                .iter()
                .find(|v| matches!(v, Verdict::HeldByOther(_)))
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

    fn parking(&mut self) -> Option<&mut Redis> {
        if self.cons[0].is_none() {
            self.cons[0] = Redis::connect_node(&self.config, 0).ok();
        }
        self.cons[0].as_mut()
    }

    fn recover(&mut self) -> Result<()> {
        // Nothing to do: a node whose call failed lost its connection already, and gets a fresh
        // one when it is asked again.
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
    // The token on the most nodes, and the nodes holding it.
    let mut best: Option<(&str, Vec<&State>)> = None;
    for s in &answered {
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
    let fence = answered.iter().map(|s| s.fence).max().unwrap_or(0);
    let waiters = nodes
        .first()
        .and_then(|(_, s)| s.as_ref().ok())
        .map_or(0, |s| s.waiters);
    let mut state = State {
        keys: keys.clone(),
        token: None,
        pttl_ms: -2,
        now_ms: answered.first().map_or(0, |s| s.now_ms),
        fence,
        holder: None,
        last: None,
        waiters,
        // The latest forced release any node recorded (a forced release records it on each).
        forced: answered
            .iter()
            .filter_map(|s| s.forced.clone())
            .max_by_key(|f| f.at_ms),
        quorum: None,
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
            ("held", with.len())
        }
        _ if free >= q => {
            // The most recent record any node kept.
            state.last = answered
                .iter()
                .filter_map(|s| s.last.as_ref())
                .max_by_key(|h| h.fence)
                .cloned();
            ("free", free)
        }
        _ if answered.len() < q => ("unknown", answered.len()),
        Some((_, with)) => ("split", with.len()),
        None => ("split", free),
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
