//! How an `exec` ends: the release after the command, and the exit status, which is the
//! command's own only when the lock was provably ours for the command's whole run.
//!
//! Layer 13 of the list in `lib.rs` (a part of `exec`).

use std::time::Instant;

use anyhow::Result;

use crate::cli::OnLost;
use crate::config::Config;
use crate::exit;
use crate::lock::{self, Lock, Releaser, Verdict};
use crate::messages;
use crate::output::human_ms;
use crate::store::{Store, loss_reason};

use super::facts::Facts;
use super::{Fate, Supervisor};

/// Once the command ended with `child_code` under `supervisor`: releases the lock, unless it was
/// lost while the command ran, and returns `exec`'s exit status. When the lock was not provably
/// ours for the command's whole run, says so whatever `-q` says (see [`unprotected`]).
pub fn conclude(
    store: &mut dyn Store,
    supervisor: Supervisor<'_>,
    child_code: u8,
    facts: &mut Facts,
) -> u8 {
    let timed_out = supervisor.timed_out_first();
    let stopped = supervisor.fate.timed_out.is_some();
    let Supervisor {
        lock,
        args,
        fate,
        limits,
        ..
    } = supervisor;
    let Fate {
        lost,
        lost_unseen,
        preempted,
        ..
    } = fate;
    for thread in limits.telling {
        let _ = thread.join();
    }
    facts.timed_out = stopped;
    let limited = |code: u8| if timed_out { exit::TIMED_OUT } else { code };
    if let Some(why) = &lost {
        // Said when it happened. Another client may hold the lock now; there is nothing of ours
        // to release. The history and the watchers are told.
        tell_lost(store, lock, why);
        facts.lost = lost;
        return limited(exit_status(child_code, true, args.on_lost));
    }
    // Released even when the deadline passed: the lock may still be ours, and the release
    // deletes it only if it is.
    let mut why: Vec<String> = lost_unseen.into_iter().collect();
    // A lock known lost, or one whose release failed: nothing shows it was held to the end.
    let mut known = !why.is_empty();
    match release(store, lock, Some(child_code)) {
        Released::Lost(lost) => {
            known = true;
            why.push(format!("at release, {lost}"));
            tell_lost(store, lock, &why.join("; "));
        }
        Released::Unconfirmed(unconfirmed) => why.push(format!("at release, {unconfirmed}")),
        Released::Ours => {}
    }
    if why.is_empty() {
        if let Some((preemption, _)) = preempted {
            // Stopped for the preemptor, as for a lost lock (75), though the lock was ours to
            // the end: the release handed it to them.
            facts.preempted_by = Some(preemption.by);
            return limited(exit_status(child_code, true, args.on_lost));
        }
        return limited(child_code);
    }
    facts.lost = Some(why.join("; "));
    let code = limited(exit_status(child_code, true, args.on_lost));
    // An alert, not a notice: a command that ran without its lock must not pass for a success
    // unnoticed.
    messages::alert(unprotected(&lock.keys.name, known, &why, code == exit::OK));
    code
}

/// Tells the lock's history and watchers that `lock` was lost (`lost.lua`), on the queue node of
/// a quorum. Best effort: the loss was said on stderr already, and a server that cannot be
/// reached now cannot be told.
pub fn tell_lost(store: &mut dyn Store, lock: &Lock, why: &str) {
    if let Some(redis) = store.parking() {
        let _ = lock::report_lost(redis, &lock.keys, &lock.token, lock.fence, why);
    }
}

/// What `exec` says when lock `name` was not provably held for the command's whole run: `known`
/// lost, or not confirmed, for the reasons `why`; `kept` when `--on-lost ignore` kept a success.
pub fn unprotected(name: &str, known: bool, why: &[String], kept: bool) -> String {
    let what = if known {
        format!("lost the lock '{name}' during the command (found after it ended)")
    } else {
        format!("cannot confirm that '{name}' was held to the end of the command")
    };
    let kept = if kept {
        " (exit status 0 kept: --on-lost ignore)"
    } else {
        ""
    };
    format!(
        "{what}: {}; it may have run without the lock{kept}",
        why.join("; ")
    )
}

/// The exit status of `exec` once the command has ended with `child_code`: the command's own,
/// unless the lock was `lost` (not provably ours for the command's whole run); then 75, except
/// that `--on-lost ignore` keeps a success, since the user asked for the command to run on.
pub fn exit_status(child_code: u8, lost: bool, on_lost: OnLost) -> u8 {
    if lost && !(on_lost == OnLost::Ignore && child_code == exit::OK) {
        exit::LOCK_LOST
    } else {
        child_code
    }
}

/// Releases the lock (the command never ran, or cannot be waited for), then passes `result` on.
pub fn release_after(
    config: &Config,
    store: &mut dyn Store,
    lock: &Lock,
    result: Result<u8>,
    facts: &mut Facts,
) -> Result<u8> {
    if let Released::Lost(why) | Released::Unconfirmed(why) = release(store, lock, None) {
        messages::notice(
            config,
            format_args!("'{}' was no longer ours at release: {why}", lock.keys.name),
        );
        facts.lost = Some(format!("at release, {why}"));
    }
    facts.released = Some(Instant::now());
    result
}

/// What a release found.
pub enum Released {
    /// The lock was ours to the end, and is released.
    Ours,
    /// It was no longer ours: why.
    Lost(String),
    /// The release failed (the server gone, restarted, demoted, the key no longer a lock), so
    /// nothing shows the lock was still held: why. That counts as a loss too; if the lock was
    /// still ours, it expires by its TTL.
    Unconfirmed(String),
}

/// Releases the lock; `status`: the command's exit status, for the lock's history.
pub fn release(store: &mut dyn Store, lock: &Lock, status: Option<u8>) -> Released {
    let by = Releaser::of(lock, status);
    let released = store.release(&lock.keys, &by).or_else(|first| {
        // The main connection may have gone stale during a long run: try once on a fresh one.
        store
            .recover()
            .and_then(|()| store.release(&lock.keys, &by))
            .map_err(|_| first)
    });
    match released {
        Ok(Verdict::Done(_)) => Released::Ours,
        Ok(other) => Released::Lost(loss_reason(store, lock, &other)),
        Err(e) if crate::error::kind_of(&e) == crate::error::Kind::NotOwner => {
            Released::Lost(format!("{e:#}"))
        }
        Err(e) => Released::Unconfirmed(format!(
            "the release failed, so nothing shows the lock was still held ({e:#}); if it was, \
             it expires within {}",
            human_ms(lock.ttl)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lost or not, and what `--on-lost` says, decide between the command's status and 75.
    #[test]
    fn a_lost_lock_is_75_unless_ignore_keeps_a_success() {
        use OnLost::*;
        for (child, lost, on_lost, expected) in [
            (0, false, Term, 0),
            (3, false, Term, 3),
            (0, false, Ignore, 0),
            (0, true, Term, 75),
            (0, true, Kill, 75),
            (143, true, Term, 75),
            (0, true, Ignore, 0),
            (3, true, Ignore, 75),
            (130, true, Ignore, 75),
        ] {
            assert_eq!(
                exit_status(child, lost, on_lost),
                expected,
                "child {child}, lost {lost}, --on-lost {on_lost:?}"
            );
        }
    }

    /// What `exec` says when the lock was not provably held to the end, word for word.
    #[test]
    fn an_unprotected_run_is_said_with_its_reasons() {
        let why = [
            "at release, the lock key is gone".to_string(),
            "b".to_string(),
        ];
        assert_eq!(
            unprotected("k", true, &why[..1], false),
            "lost the lock 'k' during the command (found after it ended): at release, the lock \
             key is gone; it may have run without the lock"
        );
        assert_eq!(
            unprotected("k", false, &why, true),
            "cannot confirm that 'k' was held to the end of the command: at release, the lock \
             key is gone; b; it may have run without the lock (exit status 0 kept: --on-lost \
             ignore)"
        );
    }
}
