//! Where locks live: the [`Store`] trait, and its one-server implementation (standalone,
//! Sentinel's master, a Redis Cluster), which runs the protocol of `lock/` directly.
//!
//! The layer above `lock/`. A quorum of independent masters implements the same trait above it
//! (`quorum/`); `backend.rs` picks one for the configuration, and the waiting loop
//! (`acquire.rs`), the commands and `exec` talk to a [`Store`] without caring which.
//!
//! Layer 8 of the list in `lib.rs`.

use std::time::Duration;

use anyhow::Result;

use crate::client::{Redis, unexpected_reply};
use crate::lock::{
    self, Attempt, HandOver, Keys, Lock, Mode, Releaser, Reply, Request, State, Verdict, slots,
};
use crate::output::forced_reason;

/// The lock operations, on whatever servers the configuration names.
pub trait Store: Send {
    /// One attempt to take the lock with `token`; with `req.join`, a busy lock queues us up.
    /// `req.prev` is the token of the attempt before when [`Store::fresh_token_per_attempt`]:
    /// this attempt takes over its place in the queue and a reservation made for it.
    /// (`req.run_id` is the store's business: a quorum asks for run_ids whatever it says.)
    fn try_acquire(&mut self, keys: &Keys, token: &str, req: &Request) -> Result<Attempt>;
    /// Whether every attempt needs a token of its own: a quorum undoes a failed attempt on nodes
    /// that may apply the undo late, after the next attempt, which must not match it.
    fn fresh_token_per_attempt(&self) -> bool {
        false
    }
    /// Whether a release can grant the lock to a waiter of ours directly (a [`lock::Grant`] in
    /// the push that wakes it): one server does, for a plain lock; a quorum never (a majority
    /// grants, not one node).
    fn grants(&self) -> bool {
        false
    }
    /// Leaves the queue and gives back anything `token` holds; nothing of ours stays.
    fn leave(&mut self, keys: &Keys, token: &str) -> Result<()>;
    /// [`Store::leave`] for a token one of whose attempts may still be on its way (its reply was
    /// lost): also leaves a tombstone that makes that attempt do nothing when it arrives.
    fn abandon(&mut self, keys: &Keys, token: &str) -> Result<()>;
    /// Releases the lock if the releaser's token holds it (or, by force, whoever holds it).
    fn release(&mut self, keys: &Keys, by: &Releaser) -> Result<Verdict>;
    /// Resets the TTL if `token` holds the lock (`place`: a place in a lock with more than one
    /// holder, as its acquisition said; `false` when unknown). `draining`: a keeper that stops
    /// its pid's work records so (a plain lock in its meta, see `extend.lua`; a place in its
    /// marker, see `kept_place` in `common.lua`), and the owner's release then waits for it.
    fn extend(
        &mut self,
        keys: &Keys,
        token: &str,
        ttl: Duration,
        place: bool,
        draining: bool,
    ) -> Result<Verdict>;
    /// One lock's state.
    fn inspect(&mut self, keys: &Keys) -> Result<State>;
    /// The state of every lock under `prefix` that some server holds (SCAN), as
    /// [`Store::inspect`] reads it, sorted by name; batched, so that thousands of locks cost a few dozen round trips, not one each. (A
    /// lock released since the scan comes back free.)
    fn inspect_all(&mut self, prefix: &str) -> Result<Vec<State>>;
    /// The states of `keys`, in their order; a store that can batch the reads does (one server:
    /// a few round trips for many locks).
    fn inspect_many(&mut self, keys: &[Keys]) -> Result<Vec<State>> {
        keys.iter().map(|k| self.inspect(k)).collect()
    }
    /// The connection a waiter blocks on, if there is one now.
    fn parking(&mut self) -> Option<&mut Redis>;
    /// After an error: replace connections that broke. One whose reply is only late is kept
    /// (see `client/`): it is brought back in step before its next command, so that a holder
    /// does not give up its place on a server that may refuse a new connection.
    fn recover(&mut self) -> Result<()>;
    /// Replaces every connection that is not known to be in step, late ones included: a
    /// clean-up after an attempt whose reply was lost must not queue behind that reply (the
    /// path to the server may be what failed). By default as [`Store::recover`].
    fn fresh(&mut self) -> Result<()> {
        self.recover()
    }
    /// Waits until `replicas` replicas have our writes to `keys`; returns how many did.
    fn wait_replicas(&mut self, keys: &Keys, replicas: u32, timeout: Duration) -> Result<i64>;
    /// Remembers the servers' run_ids seen when the lock was taken, to report restarts.
    fn track_restarts(&mut self, _run_ids: &[Option<String>]) {}
    /// Whether the server that keeps `keys` surely restarted after the lock was taken, `held`
    /// ago by our clock: then a lock found gone is the restart's doing. `false` when it cannot
    /// tell (a quorum reports its restarted nodes as it meets them).
    fn restarted_within(&mut self, _keys: &Keys, _held: Duration) -> bool {
        false
    }
}

impl Store for Redis {
    fn try_acquire(&mut self, keys: &Keys, token: &str, req: &Request) -> Result<Attempt> {
        match req.mode {
            Mode::Exclusive => {
                let reply = Reply {
                    grant: true,
                    ..req.reply
                };
                lock::try_acquire(self, keys, token, &Request { reply, ..*req })
            }
            _ => slots::try_acquire(self, keys, token, req),
        }
    }

    fn grants(&self) -> bool {
        true
    }

    fn leave(&mut self, keys: &Keys, token: &str) -> Result<()> {
        lock::give_up(self, keys, token)
    }

    fn abandon(&mut self, keys: &Keys, token: &str) -> Result<()> {
        lock::give_up_to(self, keys, token, HandOver::Wake, lock::Doubt::Unsure).map(|_| ())
    }

    // A lock with more than one holder answers to its own scripts: a holder that knows it holds
    // a place asks them at once; otherwise the plain ones say so, and change nothing (one round
    // trip more, for those locks only: `redlock release KEY TOKEN`).
    fn release(&mut self, keys: &Keys, by: &Releaser) -> Result<Verdict> {
        if let Releaser::Holder { place: true, .. } = by {
            return slots::release(self, keys, by);
        }
        match lock::release(self, keys, by, HandOver::Wake)?.0 {
            Verdict::Slots => slots::release(self, keys, by),
            verdict => Ok(verdict),
        }
    }

    fn extend(
        &mut self,
        keys: &Keys,
        token: &str,
        ttl: Duration,
        place: bool,
        draining: bool,
    ) -> Result<Verdict> {
        if place {
            return slots::extend(self, keys, token, ttl, draining);
        }
        match lock::extend(self, keys, token, ttl, false, draining)?.0 {
            Verdict::Slots => slots::extend(self, keys, token, ttl, draining),
            verdict => Ok(verdict),
        }
    }

    fn inspect(&mut self, keys: &Keys) -> Result<State> {
        lock::inspect(self, keys)
    }

    fn inspect_many(&mut self, keys: &[Keys]) -> Result<Vec<State>> {
        if self.is_cluster() {
            // A Cluster's transactions must keep to one slot: one read per lock.
            return keys.iter().map(|k| lock::inspect(self, k)).collect();
        }
        lock::inspect_many(self, keys)
    }

    fn inspect_all(&mut self, prefix: &str) -> Result<Vec<State>> {
        if !self.is_cluster() {
            let keys = lock::scan(self, prefix)?;
            return lock::inspect_many(self, &keys);
        }
        // Each master's locks, read on that master's own connection, which pipelines without
        // routing. A key that moved since the scan (resharding) is refused there (MOVED), and
        // asked for again on its own through the cluster connection, following the MOVED or ASK
        // the cluster answers (`lock::inspect`).
        let mut all = Vec::new();
        for mut master in self.cluster_masters()? {
            let keys = lock::scan(&mut master, prefix)?;
            let found = lock::inspect_batch(&mut master, &keys)?;
            for (k, state) in keys.iter().zip(found) {
                all.push(match state {
                    Some(state) => state,
                    None => lock::inspect(self, k)?,
                });
            }
        }
        all.sort_by(|a, b| a.keys.name.cmp(&b.keys.name));
        all.dedup_by(|a, b| a.keys.name == b.keys.name);
        Ok(all)
    }

    fn parking(&mut self) -> Option<&mut Redis> {
        Some(self)
    }

    fn recover(&mut self) -> Result<()> {
        Redis::recover(self)
    }

    fn fresh(&mut self) -> Result<()> {
        if self.is_late() {
            return self.reconnect();
        }
        Redis::recover(self)
    }

    // One INFO, on the path of a lost lock only; a server that refuses it (an ACL user
    // without it) cannot tell.
    fn restarted_within(&mut self, keys: &Keys, held: Duration) -> bool {
        let mut info = redis::cmd("INFO");
        info.arg("server");
        self.call_on_master_of("INFO", &keys.lock, &info)
            .ok()
            .and_then(|reply| redis::from_redis_value::<String>(reply).ok())
            .and_then(|text| uptime(&text))
            .is_some_and(|uptime| started_within(uptime, held))
    }

    fn wait_replicas(&mut self, keys: &Keys, replicas: u32, timeout: Duration) -> Result<i64> {
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        // WAIT blocks for up to `ms`: give the read that long and a little more.
        self.set_read_timeout(timeout + Duration::from_secs(1))?;
        // WAIT counts the replicas of the server that took our write: in a cluster, the master
        // of the lock's slot (not the minimum over every master).
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(ms);
        // Put back even after a failure: a connection whose reply is late is kept.
        let acked = self.call_on_master_of("WAIT", &keys.lock, &wait);
        self.restore_read_timeout()?;
        match acked? {
            redis::Value::Int(n) => Ok(n),
            other => Err(unexpected_reply("WAIT", format!("{other:?}"))),
        }
    }
}

/// `uptime_in_seconds` from the text of `INFO server`.
fn uptime(info: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
        .and_then(|n| n.trim().parse().ok())
}

/// Whether a server up for `uptime_secs` (whole seconds, rounded down) surely started within
/// the last `held`: its start is then after our acquisition, which came before `held` began. A
/// restart in the first second of a hold cannot be told (and is not claimed); a server up since
/// before the acquisition never is (its uptime is at least `held`).
fn started_within(uptime_secs: u64, held: Duration) -> bool {
    Duration::from_secs(uptime_secs.saturating_add(1)) <= held
}

/// What a lock found gone after its server restarted says, instead of the usual reasons.
const RESTARTED: &str = "the Redis server restarted (its data was not kept)";

/// Whether the lock's record (its meta hash) shows that the server lost what it kept of the lock,
/// as a restart without persistence does: the fence counter below ours (it never goes down while
/// the record lasts), or, under another holder with a newer fence, a count of acquisitions that
/// leaves ours out. A server that kept its data (an append-only file) kept the record: a lock
/// deleted, overwritten or expired after such a restart is not the restart's doing.
fn record_lost(verdict: &Verdict, our_fence: i64, fence: i64, acquisitions: u64) -> bool {
    match verdict {
        Verdict::Free | Verdict::PlaceGone => fence < our_fence,
        Verdict::HeldByOther(_) => fence < our_fence || (fence > our_fence && acquisitions <= 1),
        _ => false,
    }
}

/// Why a renewal or the release found the lock no longer ours: the verdict and, if a forced
/// release took it, who forced it and when, or if the server restarted since the lock was taken
/// and lost the lock's record with it (one or two more reads, on this rare path; without an
/// answer, the verdict alone).
pub fn loss_reason(store: &mut dyn Store, lock: &Lock, verdict: &Verdict) -> String {
    let state = store.inspect(&lock.keys).ok();
    let forced = state
        .as_ref()
        .and_then(|s| s.forced_of(&lock.token).cloned());
    let lost = state
        .as_ref()
        .is_some_and(|s| record_lost(verdict, lock.fence, s.fence, s.counters.acquisitions));
    match (forced, verdict) {
        (Some(f), Verdict::HeldByOther(_)) => {
            format!("{}; {}", forced_reason(Some(&f)), lost_reason(verdict))
        }
        (Some(f), _) => forced_reason(Some(&f)),
        (None, Verdict::Free | Verdict::PlaceGone | Verdict::HeldByOther(_))
            if lost && store.restarted_within(&lock.keys, lock.taken.elapsed()) =>
        {
            match verdict {
                Verdict::HeldByOther(_) => format!("{RESTARTED}; {}", lost_reason(verdict)),
                Verdict::PlaceGone => format!("{RESTARTED}: our place in the lock is gone"),
                _ => format!("{RESTARTED}: the lock key is gone"),
            }
        }
        (None, _) => lost_reason(verdict),
    }
}

pub fn lost_reason(v: &Verdict) -> String {
    match v {
        Verdict::Free => {
            "the lock key is gone (expired, or deleted, flushed or evicted by someone else)".into()
        }
        Verdict::HeldByOther(Some(h)) => format!(
            "the lock is now held by {} (fence {}, token {}…)",
            h.who(),
            h.fence,
            h.fingerprint()
        ),
        Verdict::HeldByOther(None) => "the lock key now holds another token".into(),
        Verdict::Done(_) | Verdict::Forced(_) | Verdict::Preempted(_) => {
            "the lock was released".into()
        }
        Verdict::Released | Verdict::Deferred => "the lock was released with its token".into(),
        Verdict::Slots => "the lock key now holds a lock with more than one holder".into(),
        Verdict::PlaceGone => {
            "our place in the lock is gone (it expired, or was released or force-released)".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_is_read_from_info_server() {
        let info =
            "# Server\r\nredis_version:7.2.4\r\nuptime_in_seconds:42\r\nuptime_in_days:0\r\n";
        assert_eq!(uptime(info), Some(42));
        assert_eq!(uptime("# Server\r\nredis_version:7.2.4\r\n"), None);
    }

    /// A restart is claimed only when the server surely started after the acquisition: its
    /// uptime, rounded down, plus the second it may have lost, fits in the hold.
    #[test]
    fn a_server_started_within_the_hold_is_told_by_its_uptime() {
        let s = Duration::from_secs;
        for (uptime, held, restarted) in [
            (0, s(1), true),
            (0, Duration::from_millis(999), false),
            (3, s(5), true),
            (4, s(5), true),
            (5, s(5), false),
            (6, s(5), false),
            (86_400, s(60), false),
            (u64::MAX, s(60), false),
        ] {
            assert_eq!(
                started_within(uptime, held),
                restarted,
                "uptime {uptime}s, held {held:?}"
            );
        }
    }
}
