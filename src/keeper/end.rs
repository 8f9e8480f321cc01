//! How the keeper ends: the loss said and told, the lock given back when acquire never handed
//! the token on, and the release once PID and its work have ended.
//!
//! Layer 13 of the list in `lib.rs` (a part of `keeper`).

use std::time::SystemTime;

use crate::cli::PidOnLost;
use crate::error::exit_code;
use crate::exit;
use crate::lock::{self, Befell, Releaser, Verdict};
use crate::messages;
use crate::output::human_ms;
use crate::signals::{self, Signal};
use crate::store::loss_reason;

use super::Keeper;

impl Keeper<'_> {
    /// The lock is lost: PID is acted on (unless it was already, preempted), the loss said and
    /// told to the lock's history.
    pub(super) fn lose(&mut self, why: &str) -> u8 {
        let action = self.stop_work();
        messages::alert(format_args!(
            "lost the lock '{}' at {} after holding it {} for pid {}: {why}; {action}",
            self.lock.keys.name,
            humantime::format_rfc3339_seconds(SystemTime::now()),
            human_ms(self.lock.taken.elapsed()),
            self.pid.pid,
        ));
        self.tell_lost(why);
        self.finish_stopping();
        exit::LOCK_LOST
    }

    /// Tells the lock's history and watchers (`lost.lua`, on the queue node of a quorum). Best
    /// effort: the loss was said on stderr already.
    pub(super) fn tell_lost(&mut self, why: &str) {
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
    pub(super) fn abandon(mut self) -> u8 {
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
    pub(super) fn release(&mut self, signal: Option<Signal>) -> u8 {
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
