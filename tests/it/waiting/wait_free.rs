//! `redlock wait KEY`: blocks until the lock is free, woken by its release (not by polling),
//! without taking it or joining its queue; gives up after `--wait` with the conflict status.

use std::time::{Duration, Instant};

use crate::common::*;

/// Waits until `redis` has a subscriber on the change channel of lock `name`.
fn wait_listening(redis: &RedisServer, name: &str) {
    wait_listened(&[redis], &format!("{}:watch", lock_key(name)));
}

#[test]
fn a_free_lock_returns_at_once() {
    let redis = or_skip!(RedisServer::start());
    redis.redlock().args(["wait", "k"]).run().expect(0);
    assert_eq!(redis.keys(), Vec::<String>::new(), "wait wrote something");
}

#[test]
fn a_release_wakes_the_wait_without_it_taking_the_lock_or_queueing() {
    let redis = or_skip!(RedisServer::start());
    let token = redis
        .redlock()
        .args(["acquire", "deploy", "--ttl", "60s"])
        .run()
        .ok();
    let waiting = redis
        .redlock()
        .args(["wait", "deploy", "--wait", "50s"])
        .spawn_proc();
    wait_listening(&redis, "deploy");
    assert_eq!(queue(&redis, "deploy"), Vec::<String>::new(), "wait queued");
    let released = Instant::now();
    redis
        .redlock()
        .args(["release", "deploy", &token])
        .run()
        .expect(0);
    waiting.finish(HANG).expect(0);
    // Woken by the release: the holder's TTL (60 s) was far away, and the wait re-reads a
    // lock it hears nothing about only every 30 s.
    let after = released.elapsed();
    assert!(
        after < Duration::from_secs(10),
        "woken {after:?} after the release"
    );
    assert_eq!(redis.get(&lock_key("deploy")), None, "wait took the lock");
}

/// A release that hands the lock to a queued waiter does not end the wait: the lock is that
/// waiter's (granted to it). The waiter is stopped (SIGSTOP) so that it cannot extend it: the
/// wait ends only when the grant runs out (2 s), and the lock is free.
#[test]
fn a_hand_over_to_a_queued_waiter_does_not_end_the_wait() {
    let redis = or_skip!(RedisServer::start());
    let first = redis
        .redlock()
        .args(["acquire", "k", "--ttl", "60s"])
        .run()
        .ok();
    let next = redis
        .redlock()
        .args(["acquire", "k", "--wait", "60s"])
        .spawn_proc();
    assert!(wait_for(|| queue(&redis, "k").len() == 1, HANG));
    next.signal(libc::SIGSTOP);
    let waiting = redis
        .redlock()
        .args(["wait", "k", "--wait", "50s"])
        .spawn_proc();
    wait_listening(&redis, "k");
    let released = Instant::now();
    redis
        .redlock()
        .args(["release", "k", &first])
        .run()
        .expect(0);
    assert!(
        redis.get(&lock_key("k")).is_some_and(|v| v != first),
        "not handed over"
    );
    waiting.finish(HANG).expect(0);
    let after = released.elapsed();
    assert!(
        after >= Duration::from_millis(1500),
        "the wait ended {after:?} after the release, while the lock was handed over"
    );
    next.signal(libc::SIGCONT);
    drop(next);
}

#[test]
fn a_holder_that_dies_ends_the_wait_at_its_expiry() {
    let redis = or_skip!(RedisServer::start());
    redis
        .redlock()
        .args(["acquire", "k", "--ttl", "1500ms"])
        .run()
        .expect(0);
    let started = Instant::now();
    redis
        .redlock()
        .args(["wait", "k", "--wait", "30s"])
        .run()
        .expect(0);
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(10), "{waited:?}");
}

#[test]
fn the_wait_runs_out_with_the_conflict_status() {
    let redis = or_skip!(RedisServer::start());
    redis
        .redlock()
        .args(["acquire", "k", "--ttl", "60s", "--note", "deploying"])
        .run()
        .expect(0);
    let out = redis
        .redlock()
        .args(["wait", "k", "--wait", "300ms"])
        .run()
        .expect(1);
    assert!(
        out.stderr.contains("'k' is still busy: held by") && out.stderr.contains("deploying"),
        "{out}"
    );
    redis
        .redlock()
        .args(["wait", "k", "-w", "100ms", "-E", "0"])
        .run()
        .expect(0);
    redis
        .redlock()
        .args(["-q", "wait", "k", "-w", "100ms", "-E", "7"])
        .run()
        .expect(7);
}

#[test]
fn a_signal_ends_the_wait_with_nothing_left_behind() {
    let redis = or_skip!(RedisServer::start());
    redis
        .redlock()
        .args(["acquire", "k", "--ttl", "60s"])
        .run()
        .expect(0);
    let keys = redis.keys();
    let waiting = redis.redlock().args(["wait", "k"]).spawn_proc();
    wait_listening(&redis, "k");
    waiting.signal(libc::SIGINT);
    let out = waiting.finish(HANG).expect(130);
    assert!(
        out.stderr
            .contains("SIGINT while waiting for 'k' to be free"),
        "{out}"
    );
    assert_eq!(redis.keys(), keys);
}

/// Without the channel (an ACL user that may not subscribe), the wait still ends, at the
/// holder's expiry.
#[test]
fn without_the_channel_the_wait_reads_the_lock_at_its_expiry() {
    let redis = or_skip!(RedisServer::start());
    let url = redis.user_without_channels("nosub", "pw");
    redlock()
        .args(["--url", &url, "acquire", "k", "--ttl", "1500ms"])
        .run()
        .expect(0);
    let out = redlock()
        .args(["--url", &url, "-v", "wait", "k", "--wait", "30s"])
        .run()
        .expect(0);
    assert!(
        out.stderr.contains("not hearing the changes of 'k'"),
        "{out}"
    );
}

/// Found by review: a Redis restart while waiting ended `wait -w 20s` at once with 69, where
/// `exec -w` retries until its wait runs out. (The restarted server lost the lock: it is free.)
#[test]
fn a_wait_rides_out_a_server_restart() {
    let mut redis = or_skip!(RedisServer::start());
    let _token = hold(&redis, "job", "60s");
    let waiting = redis
        .redlock()
        .args(["wait", "job", "--wait", "20s"])
        .spawn_proc();
    wait_listening(&redis, "job");
    redis.kill();
    redis.restart();
    let out = waiting.finish(HANG);
    assert_eq!(out.status.code(), Some(0), "{out}");
}

/// Found by review: on a quorum with a majority unreachable the verdict is `Unknown`, which
/// `wait` took for busy ("still busy: free", the conflict status; without --wait, forever).
/// Now it retries until --wait runs out, then fails with 69, as one unreachable server does.
#[test]
fn a_quorum_wait_without_a_majority_says_it_cannot_tell() {
    let first = or_skip!(RedisServer::start());
    let mut second = or_skip!(RedisServer::start());
    let mut third = or_skip!(RedisServer::start());
    let urls = [first.url(), second.url(), third.url()];
    second.kill();
    third.kill();
    let mut cmd = redlock();
    for u in &urls {
        cmd.args(["-u", u]);
    }
    let out = cmd.args(["wait", "job", "--wait", "3s"]).run();
    assert!(!out.stderr.contains("still busy: free"), "{out}");
    assert_eq!(out.status.code(), Some(69), "{out}");
}

/// Woken, not polling: over a wait of 3 s and a release, `wait` reads the lock twice (once its
/// subscription is confirmed, once on the release's message), as the server's command statistics
/// count its script calls; a wait that read every 200 ms made 16 (and passed the other tests).
#[test]
fn a_wait_reads_the_lock_once_subscribed_and_once_per_change() {
    let redis = or_skip!(RedisServer::start());
    // Every script in the server's cache: each read or release below is one EVALSHA.
    redis.redlock().args(["wait", "warm"]).run().expect(0);
    let warm = redis.redlock().args(["acquire", "warm"]).run().ok();
    redis
        .redlock()
        .args(["release", "warm", warm.trim()])
        .run()
        .expect(0);
    let token = redis
        .redlock()
        .args(["acquire", "deploy", "--ttl", "60s"])
        .run()
        .ok();
    let before = redis.script_calls();
    let waiting = redis
        .redlock()
        .args(["wait", "deploy", "--wait", "50s"])
        .spawn_proc();
    wait_listening(&redis, "deploy");
    // A window for polling to show: the wait hears nothing in it.
    std::thread::sleep(Duration::from_secs(3));
    redis
        .redlock()
        .args(["release", "deploy", token.trim()])
        .run()
        .expect(0);
    waiting.finish(HANG).expect(0);
    let reads = redis.script_calls() - before - 1;
    assert_eq!(
        reads, 2,
        "the wait read the lock {reads} times in 3 s and one release"
    );
}
