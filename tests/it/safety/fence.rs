//! Fences never go backwards, even when a lock's `:meta` hash (which holds the fence counter) is
//! lost: a fence is max(counter + 1, the server's clock in microseconds). And `:meta` does not
//! live forever: it expires `--meta-ttl` after the lock and its queue, never while they exist.

use std::time::Duration;

use crate::common::nodes::Nodes;
use crate::common::*;

/// `acquire NAME --format json` with `args`, then `release`; returns the fence.
fn cycle(redis: &RedisServer, name: &str, args: &[&str]) -> i64 {
    let out = redis
        .redlock()
        .args(["acquire", name, "--format", "json"])
        .args(args)
        .run()
        .ok();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    release(redis, name, v["token"].as_str().unwrap());
    v["fence"].as_i64().unwrap_or_else(|| panic!("{v}"))
}

/// Three acquisitions of `name`, each fence above the one before; returns the last.
fn three_cycles(redis: &RedisServer, name: &str) -> i64 {
    let fences: Vec<i64> = (0..3).map(|_| cycle(redis, name, &[])).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    fences[2]
}

/// The server's clock in microseconds.
fn now_us(redis: &RedisServer) -> i64 {
    let (secs, micros): (i64, i64) = redis.query(&["TIME"]);
    secs * 1_000_000 + micros
}

#[test]
fn fences_keep_increasing_after_flushall() {
    let redis = or_skip!(RedisServer::start());
    let before = three_cycles(&redis, "k");
    redis.query::<()>(&["FLUSHALL"]);
    let after = cycle(&redis, "k", &[]);
    assert!(
        after > before,
        "fence {after} after FLUSHALL, {before} before"
    );
}

#[test]
fn fences_keep_increasing_after_meta_is_deleted() {
    let redis = or_skip!(RedisServer::start());
    let before = three_cycles(&redis, "k");
    redis.query::<()>(&["DEL", &meta_key("k")]);
    let after = cycle(&redis, "k", &[]);
    assert!(
        after > before,
        "fence {after} after DEL meta, {before} before"
    );
}

#[test]
fn fences_keep_increasing_after_a_restart_without_persistence() {
    let mut redis = or_skip!(RedisServer::start());
    let before = three_cycles(&redis, "k");
    redis.kill();
    redis.restart();
    assert_eq!(
        redis.dbsize(),
        0,
        "the restart kept data: {:?}",
        redis.keys()
    );
    let after = cycle(&redis, "k", &[]);
    assert!(
        after > before,
        "fence {after} after a restart, {before} before"
    );
}

/// The audit's reproduction: under `maxmemory` with `allkeys-lru`, Redis evicts `:meta` (fence 6,
/// then 1). The filler writes stop as soon as meta is gone, and eviction is switched off again
/// before the next acquisition (whether redlock accepts an `allkeys-*` server is another matter).
#[test]
fn fences_keep_increasing_after_meta_is_evicted() {
    let redis = or_skip!(
        RedisServer::builder()
            .arg("--maxmemory-policy")
            .arg("allkeys-lru")
            .start()
    );
    // The policy that evicts is exactly what redlock refuses without --allow-eviction.
    let allow = ["--allow-eviction"];
    let fences: Vec<i64> = (0..3).map(|_| cycle(&redis, "k", &allow)).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    let before = fences[2];
    let info: String = redis.query(&["INFO", "memory"]);
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no used_memory in {info}"));
    let limit = (used + (2 << 20)).to_string();
    redis.query::<()>(&["CONFIG", "SET", "maxmemory", &limit]);
    let mut con = redis.cli();
    let filler = "x".repeat(10_000);
    let mut evicted = false;
    for i in 0..20_000 {
        redis::cmd("SET")
            .arg(format!("filler:{i}"))
            .arg(&filler)
            .query::<()>(&mut con)
            .unwrap();
        // EXISTS does not touch the key's LRU clock.
        let exists: i64 = redis::cmd("EXISTS")
            .arg(meta_key("k"))
            .query(&mut con)
            .unwrap();
        if exists == 0 {
            evicted = true;
            break;
        }
    }
    assert!(evicted, "meta was never evicted");
    redis.query::<()>(&["CONFIG", "SET", "maxmemory", "0"]);
    let after = cycle(&redis, "k", &allow);
    assert!(
        after > before,
        "fence {after} after eviction, {before} before"
    );
}

/// A fence is the acquisition's time on the server in microseconds while the counter is behind
/// the clock (the usual case); a counter ahead of the clock (the clock stepped back) counts on.
#[test]
fn a_fence_is_the_server_clock_in_microseconds_or_the_counter_plus_one() {
    let redis = or_skip!(RedisServer::start());
    let start = now_us(&redis);
    let first = cycle(&redis, "k", &[]);
    let second = cycle(&redis, "k", &[]);
    let end = now_us(&redis);
    assert!(
        start <= first && first < second && second <= end,
        "fences {first}, {second} not within the server's clock {start}..{end}"
    );
    // Fences stay exact in a double (JSON readers, shells doing arithmetic in awk).
    assert!(second < 1 << 53, "{second}");

    // As if the clock had stepped back an hour since the last acquisition.
    let ahead = end + 3_600_000_000;
    redis.query::<()>(&["HSET", &meta_key("k"), "fence", &ahead.to_string()]);
    assert_eq!(cycle(&redis, "k", &[]), ahead + 1);
    assert_eq!(cycle(&redis, "k", &[]), ahead + 2);
    assert_eq!(redis.meta("k")["fence"], (ahead + 2).to_string());
}

#[test]
fn meta_expires_after_the_default_30_days_counted_after_the_lock() {
    let redis = or_skip!(RedisServer::start());
    const DAYS_30: i64 = 30 * 24 * 3600 * 1000;
    let token = hold(&redis, "k", "1m");
    let pttl = redis.pttl(&meta_key("k"));
    assert!(
        (DAYS_30 + 50_000..=DAYS_30 + 60_000).contains(&pttl),
        "meta's PTTL while held for 1m: {pttl}"
    );
    release(&redis, "k", &token);
    let pttl = redis.pttl(&meta_key("k"));
    assert!(
        (DAYS_30 - 60_000..=DAYS_30 + 60_000).contains(&pttl),
        "meta's PTTL after release: {pttl}"
    );
    // Configurable, also from the environment.
    let out = redis
        .redlock()
        .env("REDLOCK_META_TTL", "1h")
        .args(["acquire", "k", "--ttl", "10s"])
        .run()
        .ok();
    let pttl = redis.pttl(&meta_key("k"));
    assert!(
        (3_600_000..=3_610_000).contains(&pttl),
        "REDLOCK_META_TTL=1h: {pttl}"
    );
    release(&redis, "k", &out);
    let bad = redis
        .redlock()
        .args(["--meta-ttl", "0s", "acquire", "k"])
        .run()
        .expect(2);
    assert!(bad.stderr.contains("--meta-ttl"), "{bad}");
}

/// The growth: every distinct name left a meta hash forever. With a short `--meta-ttl`
/// it disappears once the lock is idle, and the next fence is still higher.
#[test]
fn idle_meta_disappears_and_the_next_fence_is_still_higher() {
    let redis = or_skip!(RedisServer::start());
    let idle = ["--meta-ttl", "200ms"];
    let first = cycle(&redis, "deploy-1", &[&idle[..], &["--ttl", "1s"]].concat());
    assert!(redis.pttl(&meta_key("deploy-1")) > 0);
    assert!(
        wait_for(|| redis.dbsize() == 0, Duration::from_secs(30)),
        "meta stayed: {:?} (PTTL {})",
        redis.keys(),
        redis.pttl(&meta_key("deploy-1"))
    );
    let second = cycle(&redis, "deploy-1", &idle);
    assert!(
        second > first,
        "fence {second} after meta expired, {first} before"
    );
}

/// The PTTLs of lock `name` and of its meta hash, read at one instant.
fn pttls(redis: &RedisServer, name: &str) -> (i64, i64) {
    redis.query(&[
        "EVAL",
        "return {redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2])}",
        "2",
        &lock_key(name),
        &meta_key(name),
    ])
}

/// However short `--meta-ttl`, meta outlives the lock (also after `extend`) and the queue.
#[test]
fn meta_never_expires_while_the_lock_is_held_or_waited_for() {
    let redis = or_skip!(RedisServer::start());
    let tiny = ["--meta-ttl", "1ms"];
    let token = redis
        .redlock()
        .args(tiny)
        .args(["acquire", "k", "--ttl", "5s"])
        .run()
        .ok();
    let (lock, pttl) = pttls(&redis, "k");
    assert!(pttl >= lock && lock > 0, "lock {lock}, meta {pttl}");
    redis
        .redlock()
        .args(tiny)
        .args(["extend", "k", &token, "--ttl", "60s"])
        .run()
        .expect(0);
    let (lock, pttl) = pttls(&redis, "k");
    assert!(
        pttl >= lock && lock > 50_000,
        "after extend: lock {lock}, meta {pttl}"
    );
    // A waiter's attempt refreshes meta too, and keeps the lock's expiry in it.
    let waiter = redis
        .redlock()
        .args(tiny)
        .args(["acquire", "k", "--wait", "50s", "--format", "json"])
        .spawn_proc();
    assert!(
        wait_for(|| queue(&redis, "k").len() == 1, Duration::from_secs(30)),
        "the waiter never queued: {}",
        waiter.stderr()
    );
    let (lock, pttl) = pttls(&redis, "k");
    assert!(
        pttl >= lock && lock > 40_000,
        "with a waiter: lock {lock}, meta {pttl}"
    );
    let holder = redis.meta("k")["fence"].parse::<i64>().unwrap();
    release(&redis, "k", &token);
    let out = waiter.finish(HANG).expect(0);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(v["fence"].as_i64().unwrap() > holder, "{v} after {holder}");
}

/// On a quorum, a node that restarts without persistence forgets its counter. Here the next
/// holder's majority is that node and one that missed the earlier grants: their counters (0 and
/// 0) would make fence 1; their clocks make a fence above every earlier one.
#[test]
fn a_quorum_node_restarted_without_persistence_does_not_take_the_fence_back() {
    let mut nodes = or_skip!(Nodes::start(3));
    let quorum_cycle = |nodes: &Nodes| -> i64 {
        let out = nodes
            .redlock()
            .args(["acquire", "k", "--format", "json"])
            .run()
            .ok();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        nodes
            .redlock()
            .args(["release", "k", v["token"].as_str().unwrap()])
            .run()
            .expect(0);
        v["fence"].as_i64().unwrap()
    };
    // Nodes 0 and 1 grant; node 2 is held by someone else and keeps no counter.
    nodes.hold_foreign(2, "k");
    let fences: Vec<i64> = (0..3).map(|_| quorum_cycle(&nodes)).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    for i in [0, 1] {
        let meta = nodes[i].meta("k");
        assert_eq!(meta["fence"], fences[2].to_string(), "node {i}: {meta:?}");
    }
    nodes[2].query::<()>(&["DEL", &lock_key("k")]);
    nodes[1].kill();
    nodes[1].restart();
    // Now nodes 1 (empty) and 2 (never granted) grant; node 0, which has the counter, is busy.
    nodes.hold_foreign(0, "k");
    let after = quorum_cycle(&nodes);
    assert!(
        after > fences[2],
        "fence {after} after a node restarted, {} before",
        fences[2]
    );
    for i in 0..3 {
        let pttl = nodes[i].pttl(&meta_key("k"));
        assert!(pttl > 0, "node {i}: meta's PTTL is {pttl}");
    }
}
