//! What `exec --report` says about one run, noted as the steps go: one JSON line at the end,
//! whatever the outcome; never the token, only its fingerprint.
//!
//! Layer 13 of the list in `lib.rs` (a part of `exec`).

use std::time::{Duration, Instant};

use crate::signals;

/// What `--report` says about one run, noted as it goes.
pub struct Facts {
    pub started: Instant,
    /// How long taking the lock took (set once it was taken or given up).
    pub waited: Option<Duration>,
    /// The lock's fence, token fingerprint and when it was taken.
    pub held: Option<(i64, String, Instant)>,
    /// When the lock was released (or found lost) after the command.
    pub released: Option<Instant>,
    /// The lock stayed busy (`-n`, or `--wait` ran out).
    pub busy: bool,
    /// The command's own exit status (128 + N for signal N).
    pub command: Option<u8>,
    /// The signal that ended the command, or the wait for the lock.
    pub signal: Option<i32>,
    /// Why the lock was not provably held to the end of the command.
    pub lost: Option<String>,
    /// `--max-runtime` ran out (before any loss of the lock) and the command was stopped.
    pub timed_out: bool,
    /// Who preempted the command (`--preemptible`), while it ran.
    pub preempted_by: Option<String>,
}

impl Facts {
    pub fn new() -> Facts {
        Facts {
            started: Instant::now(),
            waited: None,
            held: None,
            released: None,
            busy: false,
            command: None,
            signal: None,
            lost: None,
            timed_out: false,
            preempted_by: None,
        }
    }

    /// The report's line for lock `key`, `exit` being the status redlock exits with. Never the
    /// token: its fingerprint, as `status` shows it.
    pub fn json(&self, key: &str, exit: u8) -> serde_json::Value {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let held = self.held.as_ref();
        let end = self.released.unwrap_or_else(Instant::now);
        serde_json::json!({
            "key": key,
            "acquired": held.is_some(),
            "busy": self.busy,
            "fence": held.map(|h| h.0),
            "token_fingerprint": held.map(|h| h.1.as_str()),
            "waited_ms": ms(self.waited.unwrap_or_else(|| self.started.elapsed())),
            "held_ms": held.map(|h| ms(end.saturating_duration_since(h.2))),
            "exit": exit,
            "command_status": self.command,
            "lost": self.lost.is_some(),
            "lost_reason": self.lost,
            "timed_out": self.timed_out,
            "preempted_by": self.preempted_by,
            "signal": self.signal.map(signals::name),
        })
    }
}
