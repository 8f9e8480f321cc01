//! Waiting across a Redis outage: a waiter whose server restarts or freezes while it waits keeps
//! waiting (with the same token, so its queue entry keeps its place while it lasts), says so once
//! on stderr, and gets the lock after the release. When its `--wait` runs out during the outage,
//! it exits 69 with the connection error. What never talked to Redis still fails at once.
//!
//! Every test synchronises on events: the notice on stderr, `-v`'s log of the attempt that
//! follows the outage, the queue in Redis, exits. Bounds are generous.

use std::time::Duration;

use crate::common::*;

/// A bound for anything that should happen promptly; reaching it means a hang.
const EVENT: Duration = Duration::from_secs(15);

/// What a waiter prints once when it loses the server and goes on trying.
const NOTICE: &str = "retrying until the wait runs out";

/// `redlock -v acquire NAME --wait 30s` (plus `extra` global options), started and queued;
/// returns it with its token.
#[track_caller]
fn waiter(redis: &RedisServer, name: &str, extra: &[&str]) -> (Proc, String) {
    let before = queue(redis, name);
    let mut proc = redis
        .redlock()
        .arg("-v")
        .args(extra)
        .args(["acquire", name, "--wait", "30s"])
        .spawn_proc();
    let mut token = None;
    // Queued, and the waiter has read the reply (`-v` logs a round trip after it): a server
    // paused between running the attempt and writing its reply would leave the waiter with a
    // timed-out first attempt instead of a place in the queue.
    let queued = wait_for(
        || {
            token = queue(redis, name).into_iter().find(|t| !before.contains(t));
            token.is_some() && proc.stderr().contains("acquire on")
        },
        EVENT,
    );
    assert!(
        queued,
        "not queued (running: {})\n--- stderr:\n{}",
        proc.running(),
        proc.stderr()
    );
    (proc, token.unwrap())
}

/// Waits until `proc` has made an attempt that Redis answered after it printed the notice: it
/// is back in the queue (`-v` logs each round trip).
#[track_caller]
fn wait_back(proc: &mut Proc) {
    let back = |stderr: &str| {
        stderr.split_once(NOTICE).is_some_and(|(_, after)| {
            after
                .lines()
                .any(|l| l.contains("acquire on") && l.contains(": ok"))
        })
    };
    if !wait_for(|| back(&proc.stderr()), EVENT) {
        panic!(
            "not back after the outage (running: {})\n--- stderr:\n{}",
            proc.running(),
            proc.stderr()
        );
    }
}

#[track_caller]
fn assert_one_notice(out: &Output) {
    assert_eq!(out.stderr.matches(NOTICE).count(), 1, "one notice:\n{out}");
}

/// Fails if a waiter exits 69 when its server restarts: it must wait on across the restart,
/// keep its queue entry (the data survives), and get the lock with the same token.
#[test]
fn a_waiter_rides_out_a_restart_and_keeps_its_place() {
    let mut redis = or_skip!(RedisServer::persistent().start());
    let holder = hold(&redis, "k", "60s");
    let (mut w, token) = waiter(&redis, "k", &[]);
    redis.kill();
    w.wait_for_stderr(NOTICE, EVENT);
    assert!(w.running(), "gave up:\n{}", w.stderr());
    redis.restart();
    wait_back(&mut w);
    assert_eq!(queue(&redis, "k"), [token.as_str()], "{}", w.stderr());
    release(&redis, "k", &holder);
    let out = w.finish(EVENT).expect(0);
    assert_eq!(out.stdout.trim_end(), token, "the same token:\n{out}");
    assert_one_notice(&out);
    assert_eq!(redis.get(&lock_key("k")).as_deref(), Some(token.as_str()));
}

/// Fails if a freeze of the server (SIGSTOP: connections time out) ends a wait, or if two
/// waiters come out of it in another order than they queued.
#[test]
fn waiters_ride_out_a_freeze_in_their_order() {
    let redis = or_skip!(RedisServer::start());
    let holder = hold(&redis, "k", "60s");
    let fast = ["--io-timeout", "500ms", "--connect-timeout", "500ms"];
    let (mut w1, t1) = waiter(&redis, "k", &fast);
    let (mut w2, t2) = waiter(&redis, "k", &fast);
    redis.pause();
    // A waiter notices when its block (at most 3s) ends and the next attempt times out.
    let noticed = wait_for(
        || w1.stderr().contains(NOTICE) && w2.stderr().contains(NOTICE),
        EVENT,
    );
    let (r1, r2) = (w1.running(), w2.running());
    redis.resume();
    assert!(
        noticed && r1 && r2,
        "--- W1:\n{}--- W2:\n{}",
        w1.stderr(),
        w2.stderr()
    );
    wait_back(&mut w1);
    wait_back(&mut w2);
    assert_eq!(queue(&redis, "k"), [t1.as_str(), t2.as_str()]);

    release(&redis, "k", &holder);
    let out = w1.finish(EVENT).expect(0);
    assert_eq!(out.stdout.trim_end(), t1, "W1 first:\n{out}");
    assert_one_notice(&out);
    assert!(w2.running(), "W2 got in too:\n{}", w2.stderr());
    release(&redis, "k", &t1);
    let out = w2.finish(EVENT).expect(0);
    assert_eq!(out.stdout.trim_end(), t2, "then W2:\n{out}");
    assert_one_notice(&out);
}

/// Fails if a waiter cannot get the lock after a restart that lost every key (its queue entry
/// included): it queues again, with its token, and takes the lock.
#[test]
fn a_waiter_queues_again_after_a_restart_without_data() {
    let mut redis = or_skip!(RedisServer::start());
    hold(&redis, "k", "60s");
    let (mut w, token) = waiter(&redis, "k", &[]);
    redis.kill();
    w.wait_for_stderr(NOTICE, EVENT);
    redis.restart();
    let out = w.finish(EVENT).expect(0);
    assert_eq!(out.stdout.trim_end(), token, "{out}");
    assert_one_notice(&out);
    assert_eq!(redis.get(&lock_key("k")).as_deref(), Some(token.as_str()));
}

/// Fails if a waiter whose `--wait` runs out while the server is down says "busy", exits with
/// anything but 69, or takes much longer than its wait; `-q` leaves only the error.
#[test]
fn a_wait_that_runs_out_during_an_outage_exits_69() {
    let mut redis = or_skip!(RedisServer::start());
    hold(&redis, "k", "60s");
    let start = |quiet: bool| {
        let mut cmd = redis.redlock();
        if quiet {
            cmd.arg("-q");
        }
        let before = queue(&redis, "k").len();
        let proc = cmd.args(["acquire", "k", "--wait", "3s"]).spawn_proc();
        // Queued and parked: it has read its attempt's reply before the server goes.
        assert!(wait_for(
            || queue(&redis, "k").len() > before && redis.blocked_clients() as usize > before,
            EVENT
        ));
        proc
    };
    let (loud, quiet) = (start(false), start(true));
    redis.kill();
    for (proc, quiet) in [(loud, false), (quiet, true)] {
        let out = proc.finish(EVENT).expect(69);
        assert!(!out.stderr.contains("busy"), "{out}");
        assert!(
            out.elapsed >= Duration::from_millis(2900) && out.elapsed < Duration::from_secs(8),
            "--wait 3s:\n{out}"
        );
        let last = out.stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("redlock: ") && last.contains(&redis.url()),
            "the connection error last:\n{out}"
        );
        if quiet {
            assert_one_error_line(&out);
        } else {
            assert_one_notice(&out);
            assert_eq!(out.stderr.lines().count(), 2, "{out}");
            // The server answered before: no hint about starting one or fixing the URL.
            let notice = out.stderr.lines().find(|l| l.contains(NOTICE)).unwrap();
            assert!(!notice.contains("start redis-server"), "{out}");
        }
    }
}

/// Not a waiter yet, or not waiting at all: an unreachable server is an error at once, as before.
#[test]
fn no_wait_or_no_server_still_fails_at_once() {
    let mut redis = or_skip!(RedisServer::start());
    redis.kill();
    for args in [
        &["acquire", "k", "-n"][..],
        &["acquire", "k", "--wait", "30s"],
        &["exec", "k", "--", "true"],
    ] {
        let out = redis.redlock().args(args).run().expect(69);
        assert_one_error_line(&out);
        assert!(out.elapsed < Duration::from_secs(3), "{args:?}:\n{out}");
    }
}

/// Fails if a waiter that gives up during a freeze leaves the lock held for its whole --ttl: its
/// attempt after the block stays queued in the frozen server and runs at the thaw, maybe after
/// the leave sent on another connection. A tombstone makes the late attempt do nothing, and it
/// expires by itself.
#[test]
fn a_waiter_that_gives_up_during_a_freeze_leaves_nothing_held() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    // Held with no expiry: the waiter blocks for the whole cap (3s) with nothing to wake it.
    redis.query::<()>(&["SET", &key, "someone"]);
    let fast = ["--io-timeout", "500ms", "--connect-timeout", "500ms"];
    let w = redis
        .redlock()
        .arg("-v")
        .args(fast)
        .args(["acquire", "k", "--wait", "6s", "--ttl", "60s"])
        .spawn_proc();
    let mut token = None;
    // Queued and parked (in BLPOP): the waiter has read its attempt's reply. Queued alone is
    // not enough: a server paused between running the attempt and writing its reply (a loaded
    // machine) leaves the waiter with a timeout, not a place in the queue.
    assert!(
        wait_for(
            || {
                token = queue(&redis, "k").into_iter().next();
                token.is_some() && redis.blocked_clients() == 1
            },
            EVENT
        ),
        "not queued:\n{}",
        w.stderr()
    );
    let token = token.unwrap();
    // Free now, but nobody wakes the waiter: its next attempt comes after its block, frozen.
    redis.query::<()>(&["DEL", &key]);
    redis.pause();
    let out = w.finish(Duration::from_secs(30));
    redis.resume();
    let out = out.expect(69);
    assert!(out.stderr.contains(NOTICE), "{out}");
    // The last line names what the user was doing, not an internal step (`status`).
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.ends_with("did not answer within 500ms (--io-timeout) while waiting for 'k'"),
        "{out}"
    );
    assert_eq!(redis.get(&key), None, "an orphan lock:\n{out}");
    assert!(queue(&redis, "k").is_empty(), "{out}");
    let tomb = format!("{key}:gone:{token}");
    let pttl = redis.pttl(&tomb);
    assert!(
        pttl > 0 && pttl <= 300_000,
        "the tombstone expires within 5 minutes: {pttl}\n{out}"
    );
}
