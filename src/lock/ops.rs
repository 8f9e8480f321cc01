//! Writes to one lock on one server, one script call each (see `src/scripts/`): an attempt,
//! leaving the queue, a release with its hand-over, a wake-up, a renewal, the fence write-back of
//! a quorum, a report to the history. Each decodes its script's reply into the model's verdicts
//! (`mod.rs`); the atomicity is the scripts'.
//!
//! Layer 5 of the list in `lib.rs` (part of `lock`).

use std::time::Duration;

use anyhow::Result;
use redis::Value;

use super::read::{parse_meta, state_of};
use super::*;
use crate::client::{Redis, unexpected_reply};
use crate::error::{Kind, failure};
use crate::scripts;

/// A yes/no script argument: '1' or ''.
fn flag(on: bool) -> &'static str {
    if on { "1" } else { "" }
}

/// One atomic attempt to take the lock with `token`.
pub fn try_acquire(redis: &mut Redis, keys: &Keys, token: &str, req: &Request) -> Result<Attempt> {
    attempt(redis, &scripts::PLAIN, keys, token, req, &[])
}

/// One attempt with one of the attempt scripts (`acquire.lua`, `slots.lua`), which read the same
/// arguments, then `extra`; their replies differ only in what a grant carries after the run_id
/// (`slots.lua`: the slot).
pub fn attempt(
    redis: &mut Redis,
    attempts: &scripts::Attempts,
    keys: &Keys,
    token: &str,
    req: &Request,
    extra: &[&str],
) -> Result<Attempt> {
    let Request {
        ttl,
        owner,
        join,
        run_id: want_run_id,
        prev,
        wait,
        waited,
        tell,
        mode,
        supersede,
        preemptible,
        preempt,
        kept,
    } = *req;
    let sent = Instant::now();
    let meta_ttl = millis(redis.meta_ttl());
    let (log_max, watch_all) = (redis.log_max(), watch_all_arg(redis));
    let who = format!("{}@{} (pid {})", owner.user, owner.host, owner.pid);
    let reply: Vec<Value> = redis.call_acquire(attempts, |script, con| {
        let mut call = script.key(keys.all().as_slice());
        call.arg(token)
            .arg(millis(ttl))
            .arg(&owner.host)
            .arg(owner.pid)
            .arg(&owner.user)
            .arg(&owner.note)
            .arg(if join { "1" } else { "0" })
            .arg(millis(CLAIM_WINDOW))
            .arg(millis(BLOCK_CAP))
            .arg(millis(LEASE_MARGIN))
            .arg(if want_run_id { "1" } else { "0" })
            .arg(prev.unwrap_or(""))
            .arg(meta_ttl)
            .arg(wait.map_or(String::new(), |w| {
                u64::try_from(w.as_millis()).unwrap_or(u64::MAX).to_string()
            }))
            .arg(&owner.pidns)
            .arg(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX))
            .arg(log_max)
            .arg(if tell { "1" } else { "0" })
            .arg(&watch_all)
            .arg(if supersede {
                millis(TOMBSTONE).to_string()
            } else {
                String::new()
            })
            .arg(&who)
            .arg(flag(preemptible))
            .arg(flag(kept))
            .arg(flag(preempt));
        for a in extra {
            call.arg(*a);
        }
        call.invoke(con)
    })?;
    let granted = |fence: i64, now: i64, run_id: &Value, slot: Option<Slot>| {
        Attempt::Granted(Lock {
            keys: keys.clone(),
            token: token.to_string(),
            fence,
            acquired_ms: now,
            ttl,
            sent,
            drift: Duration::ZERO,
            run_ids: vec![text(run_id)],
            slot,
        })
    };
    match reply.as_slice() {
        [Value::Int(1), Value::Int(fence), Value::Int(now), run_id] => {
            Ok(granted(*fence, *now, run_id, None))
        }
        [
            Value::Int(1),
            Value::Int(fence),
            Value::Int(now),
            run_id,
            Value::Int(slot),
        ] => {
            let index = u32::try_from(*slot).unwrap_or(u32::MAX);
            let resource = mode.resource(index).map(str::to_string);
            Ok(granted(
                *fence,
                *now,
                run_id,
                Some(Slot { index, resource }),
            ))
        }
        [Value::Int(-3), _, by] => Ok(Attempt::Superseded {
            // Anyone may write the mark: escaped for display.
            by: field(&text(by).unwrap_or_default()),
        }),
        [Value::Int(-2), spec, by] => Err(mismatch(
            keys,
            mode,
            &text(spec).unwrap_or_default(),
            &text(by).unwrap_or_default(),
        )),
        [
            Value::Int(0),
            Value::Int(pttl),
            Value::Int(queued),
            Value::Int(reserved),
            seen @ ..,
        ] if seen.len() <= 1 => Ok(Attempt::Busy {
            pttl_ms: *pttl,
            queued: *queued == 1,
            reserved: *reserved == 1,
            seen: match seen {
                [Value::Array(state)] => Some(Box::new(state_of(keys, state)?)),
                [] => None,
                other => return Err(unexpected_reply("acquire", format!("{other:?}"))),
            },
        }),
        other => Err(unexpected_reply("acquire", format!("{other:?}"))),
    }
}

/// Leaves the queue of `keys` (passing on a reservation made for `token`, and giving back a lock
/// that an attempt whose reply was lost took with it).
pub fn leave(redis: &mut Redis, keys: &Keys, token: &str) -> Result<()> {
    leave_to(redis, keys, token, HandOver::Wake, Doubt::Sure).map(|_| ())
}

/// [`leave`] for a waiter that gives up for good (see [`give_up_to`]).
pub fn give_up(redis: &mut Redis, keys: &Keys, token: &str) -> Result<()> {
    give_up_to(redis, keys, token, HandOver::Wake, Doubt::Sure).map(|_| ())
}

impl<'a> HandOver<'a> {
    /// The script arguments `quiet` and `to` (see `release.lua` and `leave.lua`).
    fn args(self) -> (&'static str, &'a str) {
        match self {
            HandOver::Wake => ("", ""),
            HandOver::Quietly => ("quiet", ""),
            HandOver::To(waiter) => ("", waiter),
        }
    }
}

/// [`leave`] with the hand-over of a quorum (see [`HandOver`]) and a tombstone when `doubt` says
/// so; returns the waiter the lock was passed on to. The undo of one failed attempt: a waiter
/// that gives up for good uses [`give_up_to`].
pub fn leave_to(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    hand_over: HandOver,
    doubt: Doubt,
) -> Result<Option<String>> {
    leave_script(redis, keys, token, hand_over, doubt, "")
}

/// [`leave_to`] for a waiter that gives up for good (its wait ran out, a signal): it also passes
/// on a reservation made for any earlier token of the same waiter, which a release that crossed
/// its attempts may have left (see `leave.lua`).
pub fn give_up_to(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    hand_over: HandOver,
    doubt: Doubt,
) -> Result<Option<String>> {
    leave_script(redis, keys, token, hand_over, doubt, "1")
}

/// `leave.lua`; `waiter`: its argument of that name.
fn leave_script(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    hand_over: HandOver,
    doubt: Doubt,
    waiter: &str,
) -> Result<Option<String>> {
    let (quiet, to) = hand_over.args();
    let (meta_ttl, log_max) = (millis(redis.meta_ttl()), redis.log_max());
    let watch_all = watch_all_arg(redis);
    let next: Value = match doubt {
        Doubt::Sure => redis.call("leave", |con| {
            scripts::LEAVE
                .key(keys.all().as_slice())
                .arg(token)
                .arg(millis(CLAIM_WINDOW))
                .arg(quiet)
                .arg(to)
                .arg(0)
                .arg(log_max)
                .arg(meta_ttl)
                .arg(&watch_all)
                .arg(waiter)
                .invoke(con)
        })?,
        // The whole script, not its hash: this leave may run when nobody is left to answer a
        // NOSCRIPT (a frozen server thawing after we gave up), and it must run all the same.
        Doubt::Unsure => redis.call("leave", |con| {
            redis::cmd("EVAL")
                .arg(scripts::LEAVE_SOURCE)
                .arg(keys.all().len())
                .arg(keys.all().as_slice())
                .arg(token)
                .arg(millis(CLAIM_WINDOW))
                .arg(quiet)
                .arg(to)
                .arg(millis(TOMBSTONE))
                .arg(log_max)
                .arg(meta_ttl)
                .arg(&watch_all)
                .arg(waiter)
                .query(con)
        })?,
    };
    Ok(text(&next))
}

/// Tells the lock's history and its watchers what befell the holder of `token` (with `fence`),
/// and why (see `lost.lua`). Changes nothing about the lock.
pub fn report_lost(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    fence: i64,
    reason: &str,
) -> Result<()> {
    report(redis, keys, token, fence, Befell::Lost, reason)
}

/// [`report_lost`] for any of [`Befell`].
pub fn report(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    fence: i64,
    what: Befell,
    reason: &str,
) -> Result<()> {
    let (meta_ttl, log_max) = (millis(redis.meta_ttl()), redis.log_max());
    let watch_all = watch_all_arg(redis);
    redis.call(what.as_str(), |con| {
        scripts::LOST
            .key(keys.all().as_slice())
            .arg(token)
            .arg(fence)
            .arg(reason)
            .arg(log_max)
            .arg(meta_ttl)
            .arg(&watch_all)
            .arg(what.as_str())
            .invoke::<i64>(con)
    })?;
    Ok(())
}

/// Deletes the lock if the releaser's token holds it, handing it to the first waiter; with
/// [`Releaser::Force`], releases it whoever holds it and records who forced it. `hand_over` says
/// whether the waiter it goes to is woken, or named by a quorum's queue node (see [`HandOver`]).
/// Returns the verdict and the waiter the lock was handed to.
pub fn release(
    redis: &mut Redis,
    keys: &Keys,
    by: &Releaser,
    hand_over: HandOver,
) -> Result<(Verdict, Option<String>)> {
    let (meta_ttl, log_max) = (millis(redis.meta_ttl()), redis.log_max());
    let watch_all = watch_all_arg(redis);
    let reply: Vec<Value> = redis.call("release", |con| {
        release_call(
            &scripts::RELEASE,
            keys,
            by,
            hand_over,
            log_max,
            meta_ttl,
            &watch_all,
        )
        .invoke(con)
    })?;
    // A quorum's queue node names the next waiter even where our token was not (release.lua).
    let next = match reply.as_slice() {
        [_, _, next] => text(next),
        _ => None,
    };
    Ok((verdict("release", &reply)?, next))
}

/// The call of `release.lua` or `slots_release.lua`, which read the same arguments: the
/// releaser's token (none for a forced release), the hand-over (a place is never handed over by
/// a quorum: [`HandOver::Wake`]), who forced it and on what condition, the exit status recorded
/// in the history, and who releases ([`Releaser::who_arg`]).
pub(super) fn release_call<'s>(
    script: &'s scripts::Script,
    keys: &Keys,
    by: &Releaser,
    hand_over: HandOver,
    log_max: u64,
    meta_ttl: u64,
    watch_all: &str,
) -> scripts::Invocation<'s> {
    let (token, forcer, status) = match by {
        Releaser::Holder { token, status, .. } => (token.as_str(), None, *status),
        Releaser::Force(owner, cond) => ("", Some((owner, cond)), None),
    };
    let (quiet, to) = hand_over.args();
    let mut call = script.key(keys.all().as_slice());
    call.arg(token)
        .arg(if forcer.is_some() { "force" } else { "" })
        .arg(millis(CLAIM_WINDOW))
        .arg(quiet)
        .arg(to);
    match forcer {
        Some((o, cond)) => {
            call.arg(&o.host).arg(o.pid).arg(&o.user);
            let (name, value) = cond.as_ref().map_or(("", String::new()), IfHeld::args);
            call.arg(name).arg(value);
        }
        None => {
            call.arg("").arg("").arg("").arg("").arg("");
        }
    }
    call.arg(log_max)
        .arg(status.map_or(String::new(), |s| s.to_string()))
        .arg(meta_ttl)
        .arg(watch_all)
        .arg(by.who_arg());
    call
}

/// Wakes `waiter`, for whom the lock is reserved (see [`release`]).
pub fn wake(redis: &mut Redis, keys: &Keys, waiter: &str) -> Result<()> {
    let key = keys.wake(waiter);
    redis.call("wake", |con| {
        redis::pipe()
            .lpush(&key, "1")
            .ignore()
            .pexpire(&key, millis(CLAIM_WINDOW) as i64)
            .ignore()
            .query::<()>(con)
    })
}

/// Resets the TTL of the lock if `token` holds it; with `want_run_id`, also returns the server's
/// run_id; with `draining`, records that its keeper stops its pid's work (see `extend.lua`).
pub fn extend(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    ttl: Duration,
    want_run_id: bool,
    draining: bool,
) -> Result<(Verdict, Option<String>)> {
    let meta_ttl = millis(redis.meta_ttl());
    let reply: Vec<Value> = redis.call("extend", |con| {
        scripts::EXTEND
            .key(keys.all().as_slice())
            .arg(token)
            .arg(millis(ttl))
            .arg(if want_run_id { "1" } else { "0" })
            .arg(meta_ttl)
            .arg(if draining { "1" } else { "" })
            .invoke(con)
    })?;
    let run_id = match reply.as_slice() {
        [_, _, id, ..] => text(id),
        _ => None,
    };
    if let [Value::Int(1), _, _, preempted] = reply.as_slice()
        && let Some(p) = text(preempted).as_deref().and_then(Preemption::parse)
    {
        return Ok((Verdict::Preempted(p), run_id));
    }
    Ok((verdict("extend", &reply)?, run_id))
}

/// Raises the fence counter to `fence`; true if `token` still holds the lock there.
pub fn raise_fence(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    fence: i64,
    told: &Told,
) -> Result<bool> {
    let (meta_ttl, log_max) = (millis(redis.meta_ttl()), redis.log_max());
    let watch_all = watch_all_arg(redis);
    let held: i64 = redis.call("fence", |con| {
        scripts::FENCE
            .key(keys.all().as_slice())
            .arg(token)
            .arg(fence)
            .arg(meta_ttl)
            .arg(&told.owner.user)
            .arg(&told.owner.host)
            .arg(told.owner.pid)
            .arg(&told.owner.note)
            .arg(u64::try_from(told.waited.as_millis()).unwrap_or(u64::MAX))
            .arg(millis(told.ttl))
            .arg(log_max)
            .arg(&watch_all)
            .invoke(con)
    })?;
    Ok(held == 1)
}

fn verdict(what: &str, reply: &[Value]) -> Result<Verdict> {
    match reply {
        [Value::Int(1), meta, ..] => Ok(Verdict::Done(parse_meta(meta).1)),
        [Value::Int(0), ..] => Ok(Verdict::Free),
        [Value::Int(2), ..] => Ok(Verdict::Released),
        [Value::Int(3), ..] => Ok(Verdict::Deferred),
        [Value::Int(-1), meta, ..] => Ok(Verdict::HeldByOther(parse_meta(meta).1)),
        [Value::Int(-2), ..] => Ok(Verdict::Slots),
        other => Err(unexpected_reply(what, format!("{other:?}"))),
    }
}

/// Turns a non-`Done` verdict for `token` into the "not the owner" error, naming who holds the
/// lock. A fingerprint passed for a token (copied from `status`) is recognised and explained.
pub fn not_owner(verdict: &Verdict, token: &str) -> anyhow::Error {
    if looks_like_fingerprint(token) {
        let whose = match verdict {
            Verdict::HeldByOther(Some(h)) if h.fingerprint() == token => {
                "the fingerprint of the holder's token"
            }
            _ => "a fingerprint",
        };
        return failure(
            Kind::NotOwner,
            format!(
                "not the owner: '{token}' is {whose} as 'redlock status' shows it, not a token; \
                 pass the whole token that 'redlock acquire' printed (or that 'redlock status \
                 --show-token' shows)"
            ),
        );
    }
    let why = match verdict {
        Verdict::Free => "the lock is free (it expired or was released)".to_string(),
        Verdict::HeldByOther(Some(h)) => format!(
            "the lock is held by {} with another token ({}…)",
            h.who(),
            h.fingerprint()
        ),
        Verdict::HeldByOther(None) => {
            "the lock is held by another token (no redlock record)".to_string()
        }
        Verdict::Done(_)
        | Verdict::Forced(_)
        | Verdict::Preempted(_)
        | Verdict::Released
        | Verdict::Deferred => "the lock was released".to_string(),
        Verdict::Slots => "the lock has more than one holder now".to_string(),
        Verdict::PlaceGone => {
            "the token holds no place in the lock (it expired, or was released or force-released)"
                .to_string()
        }
    };
    failure(Kind::NotOwner, format!("not the owner: {why}"))
}

/// The scripts' `watch_all` argument: [`watch_all_channel`], or '' in a Redis Cluster, where a
/// watcher may subscribe on another node than the lock's (a PUBLISH reaches every node): a
/// script cannot count its listeners there and publishes every change.
pub fn watch_all_arg(redis: &Redis) -> String {
    if redis.in_cluster() {
        String::new()
    } else {
        watch_all_channel(redis.prefix())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_over_roles_are_the_scripts_arguments() {
        assert_eq!(HandOver::Wake.args(), ("", ""));
        assert_eq!(HandOver::Quietly.args(), ("quiet", ""));
        assert_eq!(HandOver::To("w1").args(), ("", "w1"));
    }
}
