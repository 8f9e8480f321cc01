//! One renewal, for the holders that keep a lock alive while something runs: `exec` (on a
//! thread of its own) and the keeper of `acquire --while-pid` (in its loop).
//!
//! A renewal is due every TTL/3 ([`Lock::renewal_interval`]), counted from when the last one was
//! sent, so that slow renewals (a quorum giving a frozen node its grace) do not push the next
//! ones later; one that could not reach Redis is tried again after a third of that, on the same
//! store, recovered (no new connection: waiters filling a server's `maxclients` cannot starve
//! the holder). The lock is surely ours until its deadline, `sent + TTL - drift` of the last
//! renewal that succeeded ([`Lock::valid_until`]); a renewal sent past the deadline comes too
//! late to move it. The holder decides what a verdict means for its command or pid.
//!
//! Layer 9 of the list in `lib.rs`.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::config::Config;
use crate::lock::{Lock, Preemption, Verdict};
use crate::messages;
use crate::output::human_ms;
use crate::store::Store;

/// What one renewal found. (Short-lived, one per renewal: not worth a box.)
#[allow(clippy::large_enum_variant)]
pub enum Renewed {
    /// Still ours, renewed by the renewal sent at `sent`; `asked`: a `--preempt` waiter asked us
    /// to stop (we were taken `--preemptible`), and the lock stays ours until we have.
    Ours {
        sent: Instant,
        asked: Option<Preemption>,
    },
    /// Not ours any more (or its holder released it: a kept lock's mark), as the verdict says.
    Gone(Verdict),
    /// Redis did not answer; the store was recovered if it could be (`recovered`).
    Failed {
        error: anyhow::Error,
        recovered: bool,
    },
}

/// How soon after it was taken a lock granted for the claim window (see `acquire.rs`) is
/// renewed to its TTL: until then the lock lasts the claim window (2 s), so its holder survives
/// a stall of that long, not of its TTL. Long enough that a short command (the benchmark's) ends
/// first and costs no renewal; short enough that a stall must begin within it to matter.
pub const GRANT_RENEWAL: Duration = Duration::from_millis(50);

/// A held lock's renewals: when the next is due, and until when the lock is surely ours.
pub struct Renewal {
    lock: Lock,
    /// The lock is surely ours until then (monotonic clock).
    pub deadline: Instant,
    /// When the next renewal is due.
    pub next: Instant,
    /// Why the last renewal failed, if it did (cleared by one that succeeds).
    pub last_error: Option<String>,
}

impl Renewal {
    /// The renewals of `lock`, just taken (or handed over: `lock.sent` says when). A lock
    /// granted for less than its TTL (a release's grant, see `acquire.rs`) is renewed to its
    /// TTL [`GRANT_RENEWAL`] after it was taken (a third of its lease after it was sent at the
    /// latest): a command that ends sooner costs no renewal at all, and one that runs longer
    /// soon has the lock for its TTL, not the claim window.
    pub fn new(lock: &Lock) -> Self {
        let next = if lock.lease < lock.ttl {
            (lock.taken + GRANT_RENEWAL).min(lock.sent + lock.lease / 3)
        } else {
            lock.sent + lock.renewal_interval()
        };
        Renewal {
            deadline: lock.acquired_until(),
            next,
            lock: lock.clone(),
            last_error: None,
        }
    }

    /// Renews the lock once on `store`; `stopping`: the holder records that it stops its work
    /// (see `extend.lua`). Sets when the next one is due.
    pub fn renew(&mut self, store: &mut dyn Store, stopping: bool) -> Renewed {
        let (sent, verdict) = self.send(store, stopping);
        match verdict {
            Ok(Verdict::Done(_)) => Renewed::Ours { sent, asked: None },
            Ok(Verdict::Preempted(preemption)) => Renewed::Ours {
                sent,
                asked: Some(preemption),
            },
            Ok(other) => Renewed::Gone(other),
            Err(error) => {
                // A fresh connection next time: this one may still have a reply on its way. A
                // reconnection that fails now is tried again before the next call (see
                // `Redis::reconnect`).
                let recovered = store.recover().is_ok();
                self.retry_soon();
                Renewed::Failed { error, recovered }
            }
        }
        .scheduled(self)
    }

    /// Sends one renewal and nothing else: when it was sent, and what it found.
    pub fn send(&self, store: &mut dyn Store, stopping: bool) -> (Instant, Result<Verdict>) {
        let sent = Instant::now();
        let lock = &self.lock;
        let place = lock.slot.is_some();
        let verdict = store.extend(&lock.keys, &lock.token, lock.ttl, place, stopping);
        (sent, verdict)
    }

    /// A renewal sent at `sent` got an answer: the next is due a TTL/3 after it (from when it
    /// was sent, so that slow renewals do not push the next ones later).
    pub fn due_after(&mut self, sent: Instant) {
        self.next = sent + self.lock.renewal_interval();
    }

    /// A renewal could not be sent (no connection): the next is tried soon.
    pub fn retry_soon(&mut self) {
        let retry = (self.lock.renewal_interval() / 3).max(Duration::from_millis(1));
        self.next = Instant::now() + retry;
    }

    /// The renewal sent at `sent` succeeded: the deadline moves on, unless it came too late.
    /// Returns whether it moved.
    pub fn renewed(&mut self, sent: Instant) -> bool {
        if sent >= self.deadline {
            return false;
        }
        self.deadline = self.deadline.max(self.lock.valid_until(sent));
        self.last_error = None;
        true
    }

    /// A renewal failed for `why`: whether it is the first since the last that succeeded.
    pub fn failed(&mut self, why: String) -> bool {
        self.last_error.replace(why).is_none()
    }

    /// Says, once per outage, that renewing the lock (for `whom`: " for pid N", or nothing)
    /// failed, and how long it lasts.
    pub fn say_failed(&self, config: &Config, whom: &str, why: &str) {
        messages::notice(
            config,
            format_args!(
                "renewing '{}'{whom} failed: {why}; retrying while the lock lasts ({} left)",
                self.lock.keys.name,
                human_ms(self.deadline.saturating_duration_since(Instant::now()))
            ),
        );
    }

    /// Why the lock counts as lost once its deadline passed.
    pub fn ran_out(&self) -> String {
        match &self.last_error {
            Some(e) => format!("no renewal succeeded before the lock's TTL ran out ({e})"),
            None => "no renewal succeeded before the lock's TTL ran out".to_string(),
        }
    }

    /// How long from now the next renewal is due.
    pub fn due_in(&self) -> Duration {
        self.next.saturating_duration_since(Instant::now())
    }
}

impl Renewed {
    /// Sets `renewal`'s next due time after a renewal that found the lock ours
    /// ([`Renewal::due_after`]).
    fn scheduled(self, renewal: &mut Renewal) -> Self {
        if let Renewed::Ours { sent, .. } = &self {
            renewal.due_after(*sent);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::Keys;

    fn lock(ttl: Duration, sent: Instant) -> Lock {
        Lock {
            keys: Keys::new("redlock:", "k").unwrap(),
            token: "t".into(),
            fence: 1,
            acquired_ms: 0,
            ttl,
            sent,
            lease: ttl,
            taken: sent,
            drift: Duration::ZERO,
            run_ids: Vec::new(),
            slot: None,
        }
    }

    /// Fails if a renewal sent past the deadline moves it (the lock counted as lost by then), or
    /// one sent in time does not; or if the first renewal is not due at TTL/3.
    #[test]
    fn only_a_renewal_sent_in_time_moves_the_deadline() {
        let ttl = Duration::from_secs(30);
        let taken = Instant::now();
        let mut renewal = Renewal::new(&lock(ttl, taken));
        assert_eq!(renewal.next, taken + ttl / 3);
        assert_eq!(renewal.deadline, taken + ttl);
        assert!(renewal.failed("timed out".into()));
        assert!(!renewal.failed("timed out again".into()));
        assert_eq!(
            renewal.ran_out(),
            "no renewal succeeded before the lock's TTL ran out (timed out again)"
        );
        let late = taken + ttl + Duration::from_millis(1);
        assert!(!renewal.renewed(late));
        assert_eq!(renewal.deadline, taken + ttl);
        let in_time = taken + Duration::from_secs(10);
        assert!(renewal.renewed(in_time));
        assert_eq!(renewal.deadline, in_time + ttl);
        assert_eq!(renewal.last_error, None);
    }
}
