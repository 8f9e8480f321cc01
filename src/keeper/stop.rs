//! How the keeper stops PID and its work, and waits for them to end: `--on-lost` acted on once
//! (a loss, a preemption, its SIGTERM), SIGKILL after `--kill-after`, and the looks, less and
//! less often, until nothing of the work is left and the lock can be released.
//!
//! Layer 13 of the list in `lib.rs` (a part of `keeper`).

use std::time::{Duration, Instant};

use crate::cli::PidOnLost;
use crate::lock::Preemption;
use crate::messages;
use crate::output::human_ms;
use crate::signals::{self, Signal};
use crate::work::Stop;

use super::{End, Keeper, let_go_of_stderr_read_by};

/// How often the keeper looks whether PID's work has ended, while it waits for that: first,
/// then at most (doubling in between). A look is one `kill(-pgid, 0)` once the group is empty.
const FIRST_LOOK: Duration = Duration::from_millis(20);
const LAST_LOOK: Duration = Duration::from_millis(250);

/// The keeper waits for PID's work to end, then releases the lock.
pub(super) struct Drain {
    /// The SIGTERM that made the keeper stop it, if one did.
    pub(super) signal: Option<Signal>,
    pub(super) next_look: Instant,
    look: Duration,
    /// The processes left when PID ended were said.
    said: bool,
    /// The keeper let go of the pipe on its stderr, which a process left of the work read.
    let_go: bool,
}

impl Keeper<'_> {
    /// What `--on-lost` does to PID and its work, said; and does it (SIGTERM: SIGKILL follows
    /// after `--kill-after`, see [`Keeper::escalate`]), once: told already, it says so.
    pub(super) fn stop_work(&mut self) -> String {
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
    pub(super) fn signal_work(&mut self, stop: Stop) {
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
    pub(super) fn escalate(&mut self) {
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
    pub(super) fn drain(&mut self, signal: Option<Signal>) -> Option<End> {
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
    pub(super) fn terminated(&mut self, s: Signal) -> Option<End> {
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
    pub(super) fn finish_stopping(&mut self) {
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
    pub(super) fn preempt(&mut self, preemption: &Preemption) {
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
            human_ms(self.lock.taken.elapsed()),
        ));
    }
}

/// "1 process", "2 processes".
fn processes(n: usize) -> String {
    if n == 1 {
        "1 process".to_string()
    } else {
        format!("{n} processes")
    }
}
