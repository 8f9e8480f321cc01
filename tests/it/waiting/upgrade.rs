//! Old and new clients on one lock, as during an upgrade: a client from before the direct
//! hand-over (its scripts are in `before_grant/`, as that version sent them: `common.lua` then
//! the script) and today's `redlock` queue for the same lock. A release grants the lock only to a
//! waiter that recorded how it would hold it (today's); an older waiter is reserved the lock and
//! claims it with an attempt of its own, as before; and today's waiter, woken by an older
//! release (a plain push), claims the reservation the same way.

use std::time::Duration;

use crate::common::*;
use redis::Value;

/// A bound for anything that should happen promptly; reaching it means a hang.
const EVENT: Duration = Duration::from_secs(10);

const OLD_ACQUIRE: &str = concat!(
    include_str!("before_grant/common.lua"),
    include_str!("before_grant/acquire.lua")
);
const OLD_RELEASE: &str = concat!(
    include_str!("before_grant/common.lua"),
    include_str!("before_grant/release.lua")
);

/// Runs one of the older client's scripts on lock `k` with `args`.
fn old(redis: &RedisServer, lua: &str, args: &[&str]) -> Vec<Value> {
    let k = lock_key("k");
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(lua).arg(4).arg(&k).arg(format!("{k}:meta"));
    cmd.arg(format!("{k}:q"))
        .arg(format!("{k}:leases"))
        .arg(args);
    cmd.query(&mut redis.cli())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The older client's attempt with `token` (30 s TTL, queueing when busy), as it sent it.
fn old_attempt(redis: &RedisServer, token: &str) -> Vec<Value> {
    old(
        redis,
        OLD_ACQUIRE,
        &[
            token,
            "30000",
            "oldhost",
            "7",
            "old",
            "",
            "1",
            "2000",
            "3000",
            "2000",
            "0",
            "",
            "2592000000",
            "",
            "",
            "0",
            "100",
            "0",
            "",
            "",
            "old@oldhost (pid 7)",
            "",
            "",
            "",
        ],
    )
}

/// The older client's release of `token`, as it sent it.
fn old_release(redis: &RedisServer, token: &str) -> Vec<Value> {
    old(
        redis,
        OLD_RELEASE,
        &[
            token,
            "",
            "2000",
            "",
            "",
            "",
            "",
            "",
            "",
            "",
            "100",
            "",
            "2592000000",
            "",
            "",
        ],
    )
}

const OLD_TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// Fails if today's release grants the lock to an older waiter (which would never read the
/// grant, and whose own attempt would find the lock taken): it reserves it, and the older waiter
/// claims it as it always did.
#[test]
fn an_older_waiter_is_reserved_the_lock_and_claims_it() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let holder = hold(&redis, "k", "30s");
    let busy = old_attempt(&redis, OLD_TOKEN);
    assert_eq!(busy[0], Value::Int(0), "{busy:?}");
    assert_eq!(queue(&redis, "k"), [OLD_TOKEN]);
    release(&redis, "k", &holder);
    assert_eq!(redis.get(&key), Some(format!("~{OLD_TOKEN}")), "reserved");
    let woken: Option<(String, String)> =
        redis.query(&["BLPOP", &format!("{key}:w:{OLD_TOKEN}"), "1"]);
    assert_eq!(
        woken.map(|w| w.1).as_deref(),
        Some("1"),
        "woken with a plain push"
    );
    let claimed = old_attempt(&redis, OLD_TOKEN);
    assert_eq!(claimed[0], Value::Int(1), "{claimed:?}");
    assert_eq!(redis.get(&key).as_deref(), Some(OLD_TOKEN));
    assert_eq!(old_release(&redis, OLD_TOKEN)[0], Value::Int(1));
    // Today's client takes it after, with a higher fence.
    let token = hold(&redis, "k", "30s");
    release(&redis, "k", &token);
    assert_eq!(redis.get(&key), None);
}

/// Fails if today's waiter, woken by an older client's release (which reserves the lock and
/// pushes a plain wake-up), does not claim the reservation and run.
#[test]
fn todays_waiter_claims_a_reservation_from_an_older_release() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let taken = old_attempt(&redis, OLD_TOKEN);
    assert_eq!(taken[0], Value::Int(1), "{taken:?}");
    let waiter = redis
        .redlock()
        .current_dir(redis.dir())
        .args(["exec", "k", "--", "sh", "-c", "echo ran > ran.txt"])
        .spawn_proc();
    let mut token = String::new();
    assert!(
        wait_for(
            || {
                token = queue(&redis, "k").pop().unwrap_or_default();
                !token.is_empty()
            },
            EVENT
        ),
        "not queued"
    );
    // It recorded how it would hold the lock, for a grant (which the older release ignores).
    let how: bool = redis.query(&["HEXISTS", &format!("{key}:leases"), &format!("{token}:g")]);
    assert!(how);
    assert_eq!(old_release(&redis, OLD_TOKEN)[0], Value::Int(1));
    waiter.finish(EVENT).expect(0);
    assert!(redis.dir().join("ran.txt").exists());
    assert_eq!(redis.meta("k")["token"], token, "it held the lock last");
    assert_eq!(redis.get(&key), None);
}
