//! The properties a lock exists for: mutual exclusion between processes and strictly increasing
//! fencing tokens. (A dead holder blocking others for one TTL, no more, no less, and a dead
//! waiter not stalling the queue are in `waiting::queue`; a SIGKILLed `exec` in `exec::signals`.)

use std::time::Duration;

use crate::common::*;

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
    let redis = or_skip!(RedisServer::start());
    let script = contender(
        r#"T=$(redlock acquire counter --ttl 30s) || exit 1"#,
        r#"redlock release counter "$T" || exit 1"#,
    );
    assert_eq!(race(&redis, &script), 200, "an increment was lost");
    assert_eq!(redis.keys(), [meta_key("counter")], "every lock released");
}

/// The control for the test above: the same loops without the lock lose increments, so a lock
/// that did not exclude would be caught.
#[test]
fn without_the_lock_the_same_loops_lose_increments() {
    let redis = or_skip!(RedisServer::start());
    let count = race(&redis, &contender(":", ":"));
    assert!(count < 200, "no increment lost without a lock ({count})");
}

#[test]
fn fences_increase_strictly_over_100_acquisitions() {
    let redis = or_skip!(RedisServer::start());
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
    assert_eq!(fences.len(), 100);
    assert_eq!(fences[99].to_string(), redis.meta("k")["fence"]);
}
