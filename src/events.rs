//! The vocabulary every holder loop shares: the [`Event`]s that `exec`, the keeper and the
//! waiters react to, each on one channel, and the [`Backoff`] by which they try again.
//!
//! An event comes from one source each: a signal from the signal thread (`signals.rs`), a
//! renewal's verdict from the renewal (`renew.rs`), an announcement about our token from the
//! notification thread (`notify.rs`). The loops decide; nothing here acts.
//!
//! Layer 7 of the list in `lib.rs`.

use std::time::{Duration, Instant};

use crate::lock::Preemption;
use crate::signals::{self, Signal};

/// Everything a waiting or supervising redlock reacts to, on one channel.
#[derive(Debug)]
pub enum Event {
    Signal(Signal),
    /// `exec`: a renewal sent at this instant succeeded.
    Renewed(Instant),
    /// `exec`: a renewal could not reach Redis; the lock holds until its deadline.
    RenewFailed(String),
    /// `exec`: a renewal found another token or no key: the lock is gone.
    Lost(String),
    /// `exec`: the lock of `token` was taken away from its holder, for `why` (see `notify.rs`).
    TakenAway {
        token: String,
        why: String,
    },
    /// The holder with `token` was asked to stop by a `--preempt` waiter (see `notify.rs`).
    Preempted {
        token: String,
        preemption: Preemption,
    },
    /// The holder with `token` released the lock (told only for a kept lock or a place: see
    /// `notify.rs`).
    Released {
        token: String,
    },
}

/// The signal number if `event` is a signal that stops a wait.
pub fn stop_signal(event: &Event) -> Option<i32> {
    match event {
        Event::Signal(s) if signals::STOP.contains(&s.signo) => Some(s.signo),
        _ => None,
    }
}

/// A pause that doubles each time it is taken, up to a cap: how a loop that lost Redis (or its
/// subscription) tries again, so that a short outage costs little and a long one few attempts.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    pub const fn new(first: Duration, cap: Duration) -> Self {
        Backoff {
            first,
            cap,
            next: first,
        }
    }

    /// The pause to make now; the next one is twice as long, at most the cap.
    pub fn pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = (pause * 2).min(self.cap);
        pause
    }

    /// Back to the first pause (it worked).
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backoff_doubles_up_to_its_cap_and_starts_over() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(350));
        let pauses: Vec<Duration> = (0..4).map(|_| b.pause()).collect();
        assert_eq!(pauses, [ms(100), ms(200), ms(350), ms(350)]);
        b.reset();
        assert_eq!(b.pause(), ms(100));
    }
}
