//! Redlock: one lock over N independent Redis masters, held when a majority granted it.
//!
//! Every operation runs the one-server scripts of `lock.rs` on all nodes in parallel (a thread
//! per node, each bounded by `--connect-timeout` and `--io-timeout`) and counts the answers.
//!
//! Invariants:
//! - Held iff at least Q = N/2+1 nodes granted the same token in one attempt *and* the attempt
//!   left a positive validity: `ttl - elapsed - drift`, with `drift = ttl/100 + 2ms` for the
//!   servers' clocks running at slightly different rates. The lock is ours until
//!   `sent + ttl - drift` on our monotonic clock ([`Lock::valid_until`]).
//! - A failed attempt is undone on every node, including those that did not answer (their reply
//!   may have been lost after they granted it): `leave.lua` gives back our token, a reservation
//!   for us, and our queue entry.
//! - Fences: each node keeps its own counter. The holder's fence is the highest of its granting
//!   nodes' counters (each just incremented); when they differ it is written back
//!   (counter = max(counter, fence)) to a majority before the lock counts as taken. Successive
//!   holders' majorities share a node, on which the later grant happened after the earlier
//!   holder's write-back (its key was there until then), so the later fence is strictly larger.
//!   This rests on Redlock's assumptions: keys expire at about the same rate on every node, and a
//!   node does not forget a key it granted (see the README on persistence and restarts).
//! - Waiting: the first node keeps the queue. Waiters queue and block there; a release frees
//!   every node, learns from the first which waiter is next, reserves the lock for that same
//!   waiter on the other nodes (unless a newcomer took one in between), and only then wakes it,
//!   so the nodes agree on who goes next. With the first node down, waiters retry when the
//!   holder's TTL runs out (at most every few seconds).
//! - Extend needs a majority within the validity; a majority that can no longer be reached
//!   (enough nodes say free or another token) means the lock is lost.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::client::Redis;
use crate::config::{Config, Endpoint, Servers};
use crate::error::{Kind, failure};
use crate::lock::{self, Attempt, Keys, Lock, Owner, QuorumView, State, Verdict, fingerprint};
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
    config: Config,
    endpoints: Vec<Endpoint>,
    cons: Vec<Option<Redis>>,
    /// run_ids seen when the lock was taken, and whether a restart was reported already.
    run_ids: Vec<Option<String>>,
    reported: Vec<bool>,
}

/// One node's answer: `None` if it was not asked.
type Answers<T> = Vec<Option<Result<T>>>;

impl Nodes {
    pub fn new(config: &Config) -> Nodes {
        let endpoints = match &config.servers {
            Servers::Quorum(eps) => eps.clone(),
            other => other.endpoints().to_vec(),
        };
        let n = endpoints.len();
        Nodes {
            config: config.clone(),
            endpoints,
            cons: (0..n).map(|_| None).collect(),
            run_ids: vec![None; n],
            reported: vec![false; n],
        }
    }

    fn n(&self) -> usize {
        self.endpoints.len()
    }

    /// Runs `f` on the nodes `ask` selects, in parallel, connecting first where needed. A node
    /// whose call fails loses its connection (it may still have a reply on its way).
    fn each<T: Send>(
        &mut self,
        ask: impl Fn(usize) -> bool,
        f: impl Fn(usize, &mut Redis) -> Result<T> + Sync,
    ) -> Answers<T> {
        let config = &self.config;
        let f = &f;
        std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .cons
                .iter_mut()
                .enumerate()
                .map(|(i, slot)| {
                    ask(i).then(|| {
                        std::thread::Builder::new()
                            .name(format!("node-{i}"))
                            .spawn_scoped(scope, move || on_node(config, i, slot, f))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.map(|h| match h {
                        Ok(h) => h.join().unwrap_or_else(|_| {
                            Err(failure(
                                Kind::Protocol,
                                "internal error: a node thread panicked",
                            ))
                        }),
                        Err(e) => Err(failure(
                            Kind::Unavailable,
                            format!("cannot start a thread for a server: {e}"),
                        )),
                    })
                })
                .collect()
        })
    }

    /// "URL (why)" for every node that failed, from the first part of its error.
    fn failures<T>(&self, answers: &Answers<T>) -> Vec<String> {
        answers
            .iter()
            .zip(&self.endpoints)
            .filter_map(|(a, ep)| match a {
                Some(Err(e)) => Some(short_error(e, &ep.display)),
                _ => None,
            })
            .collect()
    }

    fn no_quorum(&self, keys: &Keys, what: String, failed: &[String]) -> anyhow::Error {
        let mut msg = format!("no quorum for '{}': {what}", keys.name);
        if !failed.is_empty() {
            msg.push_str(&format!("; unreachable: {}", failed.join(", ")));
        }
        failure(Kind::Unavailable, msg)
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
            eprintln!(
                "redlock: {} restarted while '{}' was held (its run_id changed); without \
                 appendonly + appendfsync always it may have forgotten the lock",
                self.endpoints[i].display, keys.name
            );
        }
    }
}

/// Runs `f` on node `i`, connecting first where needed. A failed call drops the connection (it
/// may still have a reply on its way).
fn on_node<T>(
    config: &Config,
    i: usize,
    slot: &mut Option<Redis>,
    f: impl Fn(usize, &mut Redis) -> Result<T>,
) -> Result<T> {
    let reused = slot.is_some();
    let con = match slot {
        Some(con) => con,
        None => slot.insert(Redis::connect_node(config, i)?),
    };
    let mut result = f(i, con);
    // The node had closed an idle connection (it restarted): the command did not run; once more
    // on a fresh connection.
    if result.is_err() && reused && con.was_dropped() && con.reconnect().is_ok() {
        result = f(i, con);
    }
    if result.is_err() {
        *slot = None;
    }
    result
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
    fn try_acquire(
        &mut self,
        keys: &Keys,
        token: &str,
        ttl: Duration,
        owner: &Owner,
        join: bool,
    ) -> Result<Attempt> {
        let (n, q) = (self.n(), quorum(self.n()));
        let sent = Instant::now();
        let answers = self.each(
            |_| true,
            |i, con| lock::try_acquire(con, keys, token, ttl, owner, join && i == 0, true),
        );
        let mut granted = vec![false; n];
        let mut fences = Vec::new();
        let mut run_ids = vec![None; n];
        let mut acquired_ms = 0;
        let mut busy_pttl: Option<i64> = None;
        let mut queued = false;
        for (i, a) in answers.iter().enumerate() {
            match a {
                Some(Ok(Attempt::Acquired(l))) => {
                    granted[i] = true;
                    fences.push(l.fence);
                    run_ids[i] = l.run_ids.first().cloned().flatten();
                    acquired_ms = acquired_ms.max(l.acquired_ms);
                }
                // The queue node's view decides when to look again; else the longest TTL.
                Some(Ok(Attempt::Busy {
                    pttl_ms,
                    queued: in_queue,
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
        // The fence goes back to the granting nodes before the lock counts as ours, unless they
        // all agree already.
        let mut recorded = grants;
        if grants >= q && fences.iter().any(|&f| f != fence) {
            let raised = self.each(
                |i| granted[i],
                |_, con| lock::raise_fence(con, keys, token, fence),
            );
            recorded = raised
                .iter()
                .filter(|a| matches!(a, Some(Ok(true))))
                .count();
        }
        let elapsed = sent.elapsed();
        let allowed = drift(ttl);
        let valid = ttl > elapsed + allowed;
        if grants >= q && recorded >= q && valid {
            if queued && !granted[0] {
                // Taken without the queue node: leave its queue, or it would hand us the lock
                // again later. Best effort: the lease runs out by itself.
                let _ = self.each(|i| i == 0, |_, con| lock::leave(con, keys, token));
            }
            return Ok(Attempt::Acquired(Lock {
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
        // Not ours: undo it everywhere, except our place in the queue while we wait on.
        let keep_place = queued && !granted[0] && grants < q;
        let _ = self.each(
            |i| !(i == 0 && keep_place),
            |_, con| lock::leave(con, keys, token),
        );
        if grants >= q && !valid {
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
        if grants >= q {
            return Err(self.no_quorum(
                keys,
                format!("the fence could be recorded on {recorded} of {n} servers, {q} needed"),
                &failed,
            ));
        }
        let answered = n - failed.len();
        if answered < q {
            return Err(self.no_quorum(
                keys,
                format!("{answered} of {n} servers answered, {q} needed"),
                &failed,
            ));
        }
        Ok(Attempt::Busy {
            // Everyone answered but the lock was taken or split: look again when it expires.
            pttl_ms: busy_pttl.unwrap_or(-2),
            queued: keep_place,
        })
    }

    fn leave(&mut self, keys: &Keys, token: &str) -> Result<()> {
        let answers = self.each(|_| true, |_, con| lock::leave(con, keys, token));
        if answers.iter().any(|a| matches!(a, Some(Ok(())))) {
            return Ok(());
        }
        let failed = self.failures(&answers);
        Err(self.no_quorum(keys, "no server answered".to_string(), &failed))
    }

    fn release(&mut self, keys: &Keys, token: Option<&str>) -> Result<Verdict> {
        // Every node at once; the queue node picks the next waiter but does not wake it yet.
        let answers = self.each(|_| true, |i, con| lock::release(con, keys, token, i == 0));
        if let Some(Some(Ok((_, Some(waiter))))) = answers.first() {
            // Reserve the lock for that waiter on the other nodes too (where nobody took it in
            // the meantime), and only then wake it: its attempt finds every node agreeing. If
            // the wake-up fails, the waiter looks again when its wait times out.
            let waiter = waiter.clone();
            let _ = self.each(|i| i != 0, |_, con| lock::reserve(con, keys, &waiter));
            let _ = self.each(|i| i == 0, |_, con| lock::wake(con, keys, &waiter));
        }
        let failed = self.failures(&answers);
        let verdicts: Vec<Verdict> = answers
            .into_iter()
            .filter_map(|a| a.and_then(Result::ok).map(|(v, _)| v))
            .collect();
        let done = verdicts.iter().find(|v| matches!(v, Verdict::Done(_)));
        if let Some(done) = done {
            if !failed.is_empty() && !self.config.quiet {
                eprintln!(
                    "redlock: released '{}' where it was held; {}: the lock expires there by \
                     its TTL",
                    keys.name,
                    failed.join(", ")
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
                    "{} of {} servers answered and none held the token",
                    verdicts.len(),
                    self.n()
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
        let (n, q) = (self.n(), quorum(self.n()));
        let sent = Instant::now();
        let answers = self.each(|_| true, |_, con| lock::extend(con, keys, token, ttl, true));
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
        let (n, q) = (self.n(), quorum(self.n()));
        let answers = self.each(|_| true, |_, con| lock::inspect(con, keys));
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
        let (n, q) = (self.n(), quorum(self.n()));
        let answers = self.each(|_| true, |_, con| lock::scan(con, prefix));
        let failed = self.failures(&answers);
        let mut all: Vec<Keys> = answers
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .flatten()
            .collect();
        if n - failed.len() < q {
            return Err(failure(
                Kind::Unavailable,
                format!(
                    "no quorum: {} of {n} servers answered, {q} needed; unreachable: {}",
                    n - failed.len(),
                    failed.join(", ")
                ),
            ));
        }
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
        // Nothing to do: `each` already dropped the connection of every node whose call failed,
        // and reconnects it when it is asked again.
        Ok(())
    }

    fn wait_replicas(&mut self, _replicas: u32, _timeout: Duration) -> Result<i64> {
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
        waiters,
        quorum: None,
    };
    let (verdict, agree) = match best {
        Some((token, with)) if with.len() >= q => {
            // The lock lasts while a majority keeps it: the q-th longest TTL among its nodes.
            let mut ttls: Vec<i64> = with.iter().map(|s| s.pttl_ms).collect();
            ttls.sort_unstable_by(|a, b| b.cmp(a));
            let holder_node = with.iter().find(|s| s.holder.is_some()).unwrap_or(&with[0]);
            state.token = Some(token.to_string());
            state.pttl_ms = ttls[q - 1];
            state.now_ms = holder_node.now_ms;
            state.holder = holder_node.holder.clone();
            ("held", with.len())
        }
        _ if free >= q => ("free", free),
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

/// One node's line for `status`: "held by 3f2a1b4c (fence 12, expires in 28s): ci@web1 (pid 4)".
pub fn node_line(view: &std::result::Result<State, String>) -> String {
    match view {
        Err(why) => format!("unreachable: {why}"),
        Ok(s) if !s.held() => "free".to_string(),
        Ok(s) => {
            let token = s.token.as_deref().unwrap_or_default();
            let what = if s.handing_over() {
                format!(
                    "reserved for waiter {}",
                    fingerprint(token.trim_start_matches('~'))
                )
            } else {
                format!("held by {}", fingerprint(token))
            };
            let expires = match s.pttl_ms {
                ms if ms >= 0 => {
                    format!(", expires in {}", human(Duration::from_millis(ms as u64)))
                }
                _ => String::new(),
            };
            let who = s
                .holder
                .as_ref()
                .map(|h| format!(": {}", h.who()))
                .unwrap_or_default();
            format!("{what} (fence {}{expires}){who}", s.fence)
        }
    }
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
