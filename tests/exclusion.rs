//! The properties a lock exists for: mutual exclusion between processes, a dead holder blocking
//! others for one TTL (no more, no less), and strictly increasing fencing tokens.

mod common;

use std::time::Duration;

use common::*;

/// One contender: 25 rounds of a non-atomic read-increment-write of `counter`, with a window
/// (sleep 0.01) wide enough that unserialised rounds lose increments.
fn contender(lock: &str, unlock: &str) -> String {
    format!(
        r#"i=0
        while [ "$i" -lt 25 ]; do
          {lock}
          n=$(cat counter)
          sleep 0.01
          echo $((n + 1)) > counter
          {unlock}
          i=$((i + 1))
        done"#
    )
}

/// Runs 8 contenders at once in `dir` and returns the final count.
fn race(redis: &RedisServer, script: &str) -> u32 {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("counter"), "0\n").unwrap();
    let contenders: Vec<Proc> = (0..8)
        .map(|_| redis.sh(script).current_dir(dir.path()).spawn_proc())
        .collect();
    for c in contenders {
        c.finish(Duration::from_secs(120)).expect(0);
    }
    let count = std::fs::read_to_string(dir.path().join("counter")).unwrap();
    count.trim().parse().unwrap()
}

#[test]
fn the_lock_serialises_8_shell_loops() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let script = contender(
        r#"T=$(redlock acquire counter --ttl 30s) || exit 1"#,
        r#"redlock release counter "$T" || exit 1"#,
    );
    assert_eq!(race(&redis, &script), 200, "an increment was lost");
    assert_eq!(redis.meta("counter")["fence"], "200");
    assert_eq!(redis.keys(), [meta_key("counter")], "every lock released");
}

/// The control for the test above: the same loops without the lock lose increments, so a lock
/// that did not exclude would be caught.
#[test]
fn without_the_lock_the_same_loops_lose_increments() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let count = race(&redis, &contender(":", ":"));
    assert!(count < 200, "no increment lost without a lock ({count})");
}

#[test]
fn a_killed_holder_blocks_others_for_about_one_ttl() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let key = lock_key("k");
    // The script takes the lock and would never release it; then it is killed outright.
    let mut holder = redis
        .sh("redlock acquire k --ttl 2s >/dev/null || exit 1; exec sleep 60")
        .spawn_proc();
    assert!(
        wait_for(|| redis.get(&key).is_some(), Duration::from_secs(10)),
        "the holder never took the lock: {}",
        holder.stderr()
    );
    holder.signal(libc::SIGKILL);
    let first = redis.meta("k");
    let pttl = redis.pttl(&key);
    assert!(pttl > 0, "the lock already expired: {pttl}");

    let out = redis.redlock().args(["acquire", "k"]).run().expect(0);
    assert!(!holder.running());
    let second = redis.meta("k");
    assert_eq!(second["token"], out.stdout.trim_end());

    // By the server's clock: the second holder got in one TTL after the first, not before.
    let gap = second["acquired_ms"].parse::<i64>().unwrap()
        - first["acquired_ms"].parse::<i64>().unwrap();
    assert!(
        (1_990..3_500).contains(&gap),
        "acquired {gap}ms after the dead holder (TTL 2000ms)"
    );
    // By ours: the waiter waited out the rest of the TTL, and not much longer.
    let rest = Duration::from_millis(pttl as u64);
    assert!(
        out.elapsed + Duration::from_millis(100) >= rest
            && out.elapsed < rest + Duration::from_millis(1000),
        "waited {:?} for a lock with {rest:?} left",
        out.elapsed
    );
}

/// Waiters queue up; one killed while queued must not keep the others waiting for long.
#[test]
fn a_killed_waiter_does_not_block_the_next_one() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let queue = format!("{}:q", lock_key("k"));
    let token = redis.redlock().args(["acquire", "k"]).run().ok();
    let queued = |n: i64| {
        let redis = &redis;
        let queue = &queue;
        move || redis.query::<i64>(&["ZCARD", queue]) == n
    };
    let dead = redis.redlock().args(["acquire", "k"]).spawn_proc();
    assert!(wait_for(queued(1), HANG), "{}", dead.stderr());
    dead.signal(libc::SIGKILL);
    assert!(!dead.finish(HANG).status.success());
    let live = redis.redlock().args(["acquire", "k"]).spawn_proc();
    assert!(wait_for(queued(2), HANG), "{}", live.stderr());

    let released = std::time::Instant::now();
    redis
        .redlock()
        .args(["release", "k", &token])
        .run()
        .expect(0);
    let out = live.finish(HANG).expect(0);
    assert!(
        released.elapsed() < Duration::from_secs(8),
        "the live waiter got the lock {:?} after the release",
        released.elapsed()
    );
    let token = out.stdout.trim_end();
    assert_eq!(redis.get(&lock_key("k")).as_deref(), Some(token));
    redis
        .redlock()
        .args(["release", "k", token])
        .run()
        .expect(0);
    // The dead waiter's traces expire; only the fence record stays.
    assert!(
        wait_for(|| redis.keys() == [meta_key("k")], Duration::from_secs(15)),
        "{:?}",
        redis.keys()
    );
}

#[test]
fn fences_increase_strictly_over_100_acquisitions() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut fences = Vec::new();
    for i in 0..100 {
        let json = redis
            .redlock()
            .args(["acquire", "k", "--format", "json", "-n"])
            .run()
            .ok();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        fences.push(v["fence"].as_i64().unwrap());
        // Every way a holding ends must keep the counter: release, --force, expiry.
        match i % 10 {
            3 => {
                redis
                    .redlock()
                    .args(["release", "k", "--force"])
                    .run()
                    .expect(0);
            }
            7 => {
                redis.query::<()>(&["PEXPIRE", &lock_key("k"), "1"]);
                assert!(wait_for(|| redis.pttl(&lock_key("k")) == -2, HANG));
            }
            _ => {
                let token = v["token"].as_str().unwrap();
                redis
                    .redlock()
                    .args(["release", "k", token])
                    .run()
                    .expect(0);
            }
        }
    }
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences not strictly increasing: {fences:?}"
    );
    assert_eq!(fences.last(), Some(&100));
}
