//! Writes to one lock on one server, one script call each (see `src/scripts/`): an attempt,
//! leaving the queue, a release with its hand-over, a wake-up, a renewal, the fence write-back of
//! a quorum, a report to the history. Each decodes its script's reply into the model's verdicts
//! (`mod.rs`); the atomicity is the scripts'.
//!
//! Layer 6 of the list in `lib.rs` (part of `lock`).

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

/// A yes/no script argument of the older form: '1' or '0'.
fn flag01(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}

/// A duration as a script argument: whole milliseconds (0 stays 0, unlike [`millis`]).
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The arguments every script that writes the meta hash or tells the history reads: how long
/// meta outlives the lock (`meta_idle_ms`), how many entries the history keeps (`log_max`), and
/// the channel of `status --watch` with no KEY (`watch_all`, see [`watch_all_arg`]).
pub(super) struct Upkeep {
    pub meta_ttl: u64,
    pub log_max: u64,
    pub watch_all: String,
}

impl Upkeep {
    pub fn of(redis: &Redis) -> Upkeep {
        Upkeep {
            meta_ttl: millis(redis.meta_ttl()),
            log_max: redis.log_max(),
            watch_all: watch_all_arg(redis),
        }
    }
}

/// One atomic attempt to take the lock with `token`.
pub fn try_acquire(redis: &mut Redis, keys: &Keys, token: &str, req: &Request) -> Result<Attempt> {
    attempt(redis, &scripts::PLAIN, keys, token, req, None)
}

/// One attempt with one of the attempt scripts (`acquire.lua`, `slots.lua`), which read the same
/// arguments, then `slots.lua` the lock's `spec`; their replies differ only in what a grant
/// carries after the run_id (`slots.lua`: the slot).
pub fn attempt(
    redis: &mut Redis,
    attempts: &scripts::Attempts,
    keys: &Keys,
    token: &str,
    req: &Request,
    spec: Option<&str>,
) -> Result<Attempt> {
    let sent = Instant::now();
    let upkeep = Upkeep::of(redis);
    let reply: Vec<Value> = redis.call_acquire(attempts, |script, con| {
        attempt_call(script, keys, token, req, &upkeep, spec).invoke(con)
    })?;
    attempt_reply(keys, token, req, sent, &reply)
}

/// The call of `acquire.lua` or `slots.lua` (with `spec`) for one attempt.
fn attempt_call<'s>(
    script: &'s scripts::Script,
    keys: &Keys,
    token: &str,
    req: &Request,
    upkeep: &Upkeep,
    spec: Option<&str>,
) -> scripts::Invocation<'s> {
    let Request {
        ttl,
        owner,
        queue,
        reply,
        kept,
        prev,
        wait,
        waited,
        ..
    } = *req;
    let supersede = queue.join == Join::Supersede;
    let mut call = script.key(keys.all().as_slice());
    call.arg("token", token)
        .arg("ttl_ms", millis(ttl))
        .arg("host", &owner.host)
        .arg("pid", owner.pid)
        .arg("user", &owner.user)
        .arg("note", &owner.note)
        .arg("join", flag01(queue.join.queues()))
        .arg("claim_ms", millis(CLAIM_WINDOW))
        .arg("block_cap_ms", millis(BLOCK_CAP))
        .arg("lease_margin_ms", millis(LEASE_MARGIN))
        .arg("want_run_id", flag01(reply.run_id))
        .arg("prev", prev.unwrap_or(""))
        .arg("meta_idle_ms", upkeep.meta_ttl)
        .arg("wait_ms", wait.map_or(String::new(), |w| ms(w).to_string()))
        .arg("pidns", &owner.pidns)
        .arg("waited_ms", ms(waited))
        .arg("log_max", upkeep.log_max)
        .arg("tell", flag01(reply.state))
        .arg("watch_all", &upkeep.watch_all)
        .arg(
            "supersede_ms",
            if supersede {
                millis(TOMBSTONE).to_string()
            } else {
                String::new()
            },
        )
        .arg(
            "who",
            format!("{}@{} (pid {})", owner.user, owner.host, owner.pid),
        )
        .arg("preemptible", flag(queue.preemptible))
        .arg("kept", flag(kept == Kept::WhilePid))
        .arg("preempt", flag(queue.preempt))
        .arg(
            "grant",
            match (reply.grant, queue.again) {
                (false, _) => "",
                (true, false) => "1",
                (true, true) => "2",
            },
        );
    if let Some(spec) = spec {
        call.arg("spec", spec);
    }
    call
}

/// An attempt script's reply (see `acquire.lua` and `slots.lua`), to an attempt sent at `sent`.
fn attempt_reply(
    keys: &Keys,
    token: &str,
    req: &Request,
    sent: Instant,
    reply: &[Value],
) -> Result<Attempt> {
    let granted = |fence: i64, now: i64, run_id: &Value, slot: Option<Slot>| {
        Attempt::Granted(Lock {
            keys: keys.clone(),
            token: token.to_string(),
            fence,
            acquired_ms: now,
            ttl: req.ttl,
            sent,
            lease: req.ttl,
            taken: sent,
            drift: Duration::ZERO,
            run_ids: vec![text(run_id)],
            slot,
        })
    };
    match reply {
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
            let resource = req.mode.resource(index).map(str::to_string);
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
            req.mode,
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

/// `leave.lua`; `for_good`: its argument of that name.
fn leave_script(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    hand_over: HandOver,
    doubt: Doubt,
    for_good: &str,
) -> Result<Option<String>> {
    let upkeep = Upkeep::of(redis);
    let tombstone = match doubt {
        Doubt::Sure => 0,
        Doubt::Unsure => millis(TOMBSTONE),
    };
    let call = leave_call(keys, token, hand_over, tombstone, &upkeep, for_good);
    let next: Value = match doubt {
        Doubt::Sure => redis.call("leave", |con| call.invoke(con))?,
        // The whole script, not its hash: this leave may run when nobody is left to answer a
        // NOSCRIPT (a frozen server thawing after we gave up), and it must run all the same.
        Doubt::Unsure => redis.call("leave", |con| call.eval(con))?,
    };
    Ok(text(&next))
}

/// The call of `leave.lua`.
fn leave_call<'s>(
    keys: &Keys,
    token: &str,
    hand_over: HandOver,
    tombstone_ms: u64,
    upkeep: &Upkeep,
    for_good: &str,
) -> scripts::Invocation<'s> {
    let (quiet, to) = hand_over.args();
    let mut call = scripts::LEAVE.key(keys.all().as_slice());
    call.arg("token", token)
        .arg("claim_ms", millis(CLAIM_WINDOW))
        .arg("quiet", quiet)
        .arg("to", to)
        .arg("tombstone_ms", tombstone_ms)
        .arg("log_max", upkeep.log_max)
        .arg("meta_idle_ms", upkeep.meta_ttl)
        .arg("watch_all", &upkeep.watch_all)
        .arg("for_good", for_good);
    call
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
    let upkeep = Upkeep::of(redis);
    let call = lost_call(keys, token, fence, what, reason, &upkeep);
    redis.call(what.as_str(), |con| call.invoke::<i64>(con))?;
    Ok(())
}

/// The call of `lost.lua`.
fn lost_call<'s>(
    keys: &Keys,
    token: &str,
    fence: i64,
    what: Befell,
    reason: &str,
    upkeep: &Upkeep,
) -> scripts::Invocation<'s> {
    let mut call = scripts::LOST.key(keys.all().as_slice());
    call.arg("token", token)
        .arg("fence", fence)
        .arg("reason", reason)
        .arg("log_max", upkeep.log_max)
        .arg("meta_idle_ms", upkeep.meta_ttl)
        .arg("watch_all", &upkeep.watch_all)
        .arg("kind", what.as_str());
    call
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
    let call = release_call(&scripts::RELEASE, keys, by, hand_over, &Upkeep::of(redis));
    let reply: Vec<Value> = redis.call("release", |con| call.invoke(con))?;
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
    upkeep: &Upkeep,
) -> scripts::Invocation<'s> {
    let (token, forcer, status) = match by {
        Releaser::Holder { token, status, .. } => (token.as_str(), None, *status),
        Releaser::Force(owner, cond) => ("", Some((owner, cond)), None),
    };
    let (quiet, to) = hand_over.args();
    let (host, pid, user) = forcer.map_or_else(Default::default, |(o, _)| {
        (o.host.as_str(), o.pid.to_string(), o.user.as_str())
    });
    let (if_held, value) = match forcer {
        Some((_, Some(cond))) => cond.args(),
        _ => ("", String::new()),
    };
    let mut call = script.key(keys.all().as_slice());
    call.arg("token", token)
        .arg("force", if forcer.is_some() { "force" } else { "" })
        .arg("claim_ms", millis(CLAIM_WINDOW))
        .arg("quiet", quiet)
        .arg("to", to)
        .arg("forcer_host", host)
        .arg("forcer_pid", pid)
        .arg("forcer_user", user)
        .arg("if_held", if_held)
        .arg("if_value", value)
        .arg("log_max", upkeep.log_max)
        .arg("status", status.map_or(String::new(), |s| s.to_string()))
        .arg("meta_idle_ms", upkeep.meta_ttl)
        .arg("watch_all", &upkeep.watch_all)
        .arg("who", by.who_arg());
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
    let call = extend_call(
        keys,
        token,
        ttl,
        want_run_id,
        draining,
        millis(redis.meta_ttl()),
    );
    let reply: Vec<Value> = redis.call("extend", |con| call.invoke(con))?;
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

/// The call of `extend.lua`.
fn extend_call<'s>(
    keys: &Keys,
    token: &str,
    ttl: Duration,
    want_run_id: bool,
    draining: bool,
    meta_ttl: u64,
) -> scripts::Invocation<'s> {
    let mut call = scripts::EXTEND.key(keys.all().as_slice());
    call.arg("token", token)
        .arg("ttl_ms", millis(ttl))
        .arg("want_run_id", flag01(want_run_id))
        .arg("meta_idle_ms", meta_ttl)
        .arg("draining", flag(draining));
    call
}

/// Raises the fence counter to `fence`; true if `token` still holds the lock there.
pub fn raise_fence(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    fence: i64,
    told: &Told,
) -> Result<bool> {
    let call = fence_call(keys, token, fence, told, &Upkeep::of(redis));
    let held: i64 = redis.call("fence", |con| call.invoke(con))?;
    Ok(held == 1)
}

/// The call of `fence.lua`.
fn fence_call<'s>(
    keys: &Keys,
    token: &str,
    fence: i64,
    told: &Told,
    upkeep: &Upkeep,
) -> scripts::Invocation<'s> {
    let mut call = scripts::FENCE.key(keys.all().as_slice());
    call.arg("token", token)
        .arg("fence", fence)
        .arg("meta_idle_ms", upkeep.meta_ttl)
        .arg("user", &told.owner.user)
        .arg("host", &told.owner.host)
        .arg("pid", told.owner.pid)
        .arg("note", &told.owner.note)
        .arg("waited_ms", ms(told.waited))
        .arg("ttl_ms", millis(told.ttl))
        .arg("log_max", upkeep.log_max)
        .arg("watch_all", &upkeep.watch_all);
    call
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

    /// Every call names its arguments as its script declares them (`local A = {...}`, read
    /// by `build.rs`), in number and in order: the two sides of the positional contract agree.
    #[test]
    fn every_call_names_its_arguments_as_its_script_declares_them() {
        let keys = Keys::new("p:", "k").unwrap();
        let owner = Owner {
            host: "h".into(),
            pid: 1,
            user: "u".into(),
            note: String::new(),
            pidns: String::new(),
        };
        let upkeep = Upkeep {
            meta_ttl: 1,
            log_max: 1,
            watch_all: String::new(),
        };
        let req = Request {
            ttl: Duration::from_secs(1),
            owner: &owner,
            mode: &EXCLUSIVE,
            queue: Queue {
                join: Join::Supersede,
                preempt: true,
                preemptible: true,
                again: false,
            },
            reply: Reply::default(),
            kept: Kept::WhilePid,
            prev: None,
            wait: None,
            waited: Duration::ZERO,
        };
        let told = Told {
            owner: owner.clone(),
            waited: Duration::ZERO,
            ttl: Duration::from_secs(1),
        };
        let forced = Releaser::Force(owner.clone(), Some(IfHeld::Fence(1)));
        let mut calls = Vec::new();
        for (attempts, spec) in [(&scripts::PLAIN, None), (&scripts::SLOTS, Some("n:2"))] {
            for script in [
                attempts.unchecked,
                attempts.checked,
                attempts.checked_allow_eviction,
            ] {
                calls.push(attempt_call(script, &keys, "t", &req, &upkeep, spec));
            }
        }
        for script in [&scripts::RELEASE, &scripts::SLOTS_RELEASE] {
            for by in [&Releaser::holder("t"), &forced] {
                calls.push(release_call(script, &keys, by, HandOver::To("w"), &upkeep));
            }
        }
        let ttl = Duration::from_secs(1);
        calls.extend([
            leave_call(&keys, "t", HandOver::Quietly, 1, &upkeep, "1"),
            lost_call(&keys, "t", 1, Befell::Lost, "r", &upkeep),
            extend_call(&keys, "t", ttl, true, true, 1),
            fence_call(&keys, "t", 1, &told, &upkeep),
            super::super::slots::extend_call(&keys, "t", ttl, true, &upkeep),
            scripts::STATUS.key(keys.all().as_slice()),
        ]);
        for call in &calls {
            assert_eq!(call.names(), call.script().names());
        }
        let called: std::collections::HashSet<_> =
            calls.iter().map(|c| c.script().get_hash()).collect();
        assert_eq!(
            called.len(),
            scripts::ALL.len(),
            "every script is called here"
        );
    }

    #[test]
    fn hand_over_roles_are_the_scripts_arguments() {
        assert_eq!(HandOver::Wake.args(), ("", ""));
        assert_eq!(HandOver::Quietly.args(), ("quiet", ""));
        assert_eq!(HandOver::To("w1").args(), ("", "w1"));
    }
}
