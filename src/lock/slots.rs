//! Locks with more than one holder on one server: counting semaphores (`--slots N`), pools
//! (`--pool A,B,C`) and shared locks (`--shared`). One script call per operation, as for a plain
//! lock (`ops.rs`); the layout and the rules are in `slots_common.lua`.
//!
//! They share the plain lock's queue, leases, wake lists and history, so the waiting loop
//! (`acquire.rs`) is the same; only the attempt, the release and the renewal differ. The plain
//! scripts refuse to touch a lock with more than one holder (it holds a marker where a token
//! would be): a release or a renewal that does not know what it holds (`redlock release KEY
//! TOKEN`) asks the plain script first and comes here when it answers [`Verdict::Slots`] (see
//! `store.rs`). Not on a quorum: a limit kept per node is not one limit (three masters and N = 2
//! let three clients each win a majority with different pairs), so the configuration refuses it.
//!
//! Layer 6 of the list in `lib.rs` (part of `lock`).

use std::time::Duration;

use anyhow::Result;
use redis::Value;

use super::ops::{Upkeep, release_call};
use super::{
    Attempt, HandOver, Holder, IfHeld, Keys, Releaser, Request, Verdict, attempt, millis,
    slot_holder, text,
};
use crate::client::{Redis, unexpected_reply};
use crate::error::{Kind, failure};
use crate::scripts;

/// One attempt to take a place in the lock (see `slots.lua`).
pub fn try_acquire(redis: &mut Redis, keys: &Keys, token: &str, req: &Request) -> Result<Attempt> {
    let spec = req.mode.spec();
    attempt(redis, &scripts::SLOTS, keys, token, req, Some(&spec))
}

/// Gives back the releaser's place, or, with [`Releaser::Force`], every holder's (or the one the
/// condition names), and passes the freed places on to the waiters whose turn it is.
pub fn release(redis: &mut Redis, keys: &Keys, by: &Releaser) -> Result<Verdict> {
    let forcer = match by {
        Releaser::Force(_, cond) => Some(cond),
        Releaser::Holder { .. } => None,
    };
    let call = release_call(
        &scripts::SLOTS_RELEASE,
        keys,
        by,
        HandOver::Wake,
        &Upkeep::of(redis),
    );
    let reply: Vec<Value> = redis.call("release", |con| call.invoke(con))?;
    match reply.as_slice() {
        [Value::Int(1), _, _, freed] if forcer.is_some() => Ok(Verdict::Forced(holders(freed))),
        [Value::Int(1), ..] => Ok(Verdict::Done(None)),
        [Value::Int(2), ..] => Ok(Verdict::Released),
        [Value::Int(3), ..] => Ok(Verdict::Deferred),
        [Value::Int(0), ..] => Ok(Verdict::PlaceGone),
        // A conditional force that matched no holder: nothing changed.
        [Value::Int(-1), ..] => Err(failure(
            Kind::NotOwner,
            format!(
                "not released: no holder of '{}' has {}",
                keys.name,
                match forcer.and_then(|c| c.as_ref()) {
                    Some(IfHeld::Fence(n)) => format!("fence {n}"),
                    Some(IfHeld::Token(fp)) => format!("a token starting with {fp}"),
                    None => "that token".to_string(),
                }
            ),
        )),
        other => Err(unexpected_reply("release", format!("{other:?}"))),
    }
}

/// Resets the TTL of `token`'s place, if it still has one.
/// `draining`: its keeper stops its pid's work (see `slots_release.lua`).
pub fn extend(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    ttl: Duration,
    draining: bool,
) -> Result<Verdict> {
    let call = extend_call(keys, token, ttl, draining, &Upkeep::of(redis));
    let reply: Vec<Value> = redis.call("extend", |con| call.invoke(con))?;
    match reply.as_slice() {
        [Value::Int(1), ..] => Ok(Verdict::Done(None)),
        [Value::Int(2), ..] => Ok(Verdict::Released),
        [Value::Int(0), ..] => Ok(Verdict::PlaceGone),
        other => Err(unexpected_reply("extend", format!("{other:?}"))),
    }
}

/// The call of `slots_extend.lua`.
pub(super) fn extend_call<'s>(
    keys: &Keys,
    token: &str,
    ttl: Duration,
    draining: bool,
    upkeep: &Upkeep,
) -> scripts::Invocation<'s> {
    let mut call = scripts::SLOTS_EXTEND.key(keys.all().as_slice());
    call.arg("token", token)
        .arg("ttl_ms", millis(ttl))
        .arg("want_run_id", "0")
        .arg("meta_idle_ms", upkeep.meta_ttl)
        .arg("log_max", upkeep.log_max)
        .arg("watch_all", &upkeep.watch_all)
        .arg("draining", if draining { "1" } else { "" });
    call
}

/// The holders a forced release let go: token, record (as in `LOCK:slots`) for each.
fn holders(freed: &Value) -> Vec<Holder> {
    let Value::Array(items) = freed else {
        return Vec::new();
    };
    items
        .chunks_exact(2)
        .filter_map(|pair| Some(slot_holder(&text(&pair[0])?, &text(&pair[1])?)))
        .collect()
}
