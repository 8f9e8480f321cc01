//! How many connections a holder needs, and that waiters cannot take them away from it: with a
//! server's `maxclients` filled by waiters, the holder keeps renewing its lock on the connection
//! it acquired with, runs its command to the end and releases.

mod common;

use std::time::Duration;

use common::*;

/// Connected clients, as the server counts them (our own connection included).
fn connected(con: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("clients").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Fails if the holder's renewal needs a new connection: with 20 clients allowed and 25
/// waiters, that connection is refused, the lock's TTL runs out and the holder exits 75 with
/// its command killed, although its lock was fine in Redis.
#[test]
fn waiters_filling_maxclients_do_not_starve_the_holder() {
    let Some(redis) = RedisServer::builder().arg("--maxclients").arg("20").start() else {
        return;
    };
    // Opened first, so that the test can still look once the server is full.
    let mut look = redis.cli();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let go = dir.path().join("go");
    // The command runs until the test has seen the server full and then two more of the
    // holder's renewal intervals (1 s each) go by: the TTL (3 s) alone would not last.
    let script = format!(
        "touch {s}; while [ ! -e {g} ]; do sleep 0.05; done; sleep 3.5; echo finished",
        s = started.display(),
        g = go.display()
    );
    let holder = redis
        .redlock()
        .args(["exec", "full", "--ttl", "3s", "--", "sh", "-c", &script])
        .spawn_proc();
    assert!(
        wait_for(|| started.exists(), Duration::from_secs(20)),
        "the holder's command did not start"
    );
    let waiters: Vec<Proc> = (0..25)
        .map(|_| {
            redis
                .redlock()
                .args(["exec", "full", "-w", "60s", "--", "true"])
                .spawn_proc()
        })
        .collect();
    assert!(
        wait_for(|| connected(&mut look) >= 20, Duration::from_secs(20)),
        "the waiters did not fill the server: {} clients",
        connected(&mut look)
    );
    std::fs::write(&go, "").unwrap();
    let out = holder.finish(Duration::from_secs(30));
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stdout.contains("finished"), "{out}");
    assert!(!out.stderr.contains("renewing"), "{out}");
    drop(waiters);
}

/// The forced-release subscription is optional: a server with room for the holder's one
/// connection and no more refuses it, and the holder runs on with its renewals alone (which
/// would find a forced release within TTL/3), to the end of its command and its release.
#[test]
fn a_refused_subscription_leaves_the_holder_running() {
    let Some(redis) = RedisServer::builder().arg("--maxclients").arg("20").start() else {
        return;
    };
    let mut look = redis.cli();
    // 19 clients, ours among them: room for one more, the holder's.
    let mut fill = Vec::new();
    while connected(&mut look) < 19 {
        fill.push(redis.cli());
        assert!(fill.len() < 20, "{} clients", connected(&mut look));
    }
    let out = redis
        .redlock()
        .args(["-v", "exec", "room", "--ttl", "1500ms", "--"])
        .args(["sh", "-c", "sleep 2; echo finished"])
        .run();
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stdout.contains("finished"), "{out}");
    assert!(
        out.stderr.contains("not listening on") && out.stderr.contains("max number of clients"),
        "the subscription was not refused:\n{out}"
    );
    assert!(out.stderr.contains("release on"), "{out}");
    drop(fill);
    assert_eq!(redis.get(&lock_key("room")), None, "not released:\n{out}");
}
