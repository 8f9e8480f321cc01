//! The direct hand-over: a release that finds a waiter next in line grants it the lock in the same
//! script, for the claim window (see `grant_to` in `src/scripts/common.lua` and `Waiter::granted`
//! in `src/acquire.rs`). What it saves, and the cases where the waiter is not there to use its
//! grant: stopped across it, slow to read it while it is forced away, on a server that restarts
//! (one killed while queued: `queue::a_waiter_killed_in_the_queue_does_not_stall_it`).
//!
//! Each waiter here is a `redlock exec` whose command writes `enter LABEL` and `leave LABEL` to
//! `log.txt` in the server's scratch dir, and may wait for a file `go-LABEL` in between: two
//! holders at once show as interleaved lines ([`assert_one_at_a_time`]).

use std::process::Command;
use std::time::Duration;

use super::queue::SlowLink;
use crate::common::*;

/// A bound for anything that should happen promptly; reaching it means a hang.
const EVENT: Duration = Duration::from_secs(10);

/// The claim window (`lock::CLAIM_WINDOW`), in ms: how long a grant lasts unextended.
const CLAIM_MS: i64 = 2_000;

/// `redlock exec k` whose command writes `enter LABEL`, then waits for `go-LABEL` if `wait`,
/// then writes `leave LABEL`.
fn bracketed(redis: &RedisServer, label: &str, wait: bool) -> Command {
    bracket(redis.redlock(), redis, label, wait)
}

/// [`bracketed`] from `cmd`, a `redlock` command (e.g. on a [`SlowLink`]).
fn bracket(mut cmd: Command, redis: &RedisServer, label: &str, wait: bool) -> Command {
    let body = if wait {
        format!("while [ ! -e go-{label} ]; do sleep 0.02; done")
    } else {
        ":".to_string()
    };
    cmd.current_dir(redis.dir()).args([
        "exec",
        "k",
        "--",
        "sh",
        "-c",
        &format!("echo 'enter {label}' >> log.txt; {body}; echo 'leave {label}' >> log.txt"),
    ]);
    cmd
}

fn log(redis: &RedisServer) -> String {
    std::fs::read_to_string(redis.dir().join("log.txt")).unwrap_or_default()
}

fn go(redis: &RedisServer, label: &str) {
    std::fs::write(redis.dir().join(format!("go-{label}")), "").unwrap();
}

/// Waits until `label`'s command has entered its critical section.
#[track_caller]
fn entered(redis: &RedisServer, label: &str) {
    assert!(
        wait_for(|| log(redis).contains(&format!("enter {label}")), EVENT),
        "{label} never entered:\n{}",
        log(redis)
    );
}

/// Starts `cmd` and waits until it is queued for `k` and blocked on its wake list; returns it
/// with its token.
#[track_caller]
fn parked(redis: &RedisServer, cmd: &mut Command) -> (Proc, String) {
    let before = queue(redis, "k");
    let blocked = redis.blocked_clients();
    let proc = cmd.spawn_proc();
    let mut token = None;
    assert!(
        wait_for(
            || {
                token = queue(redis, "k").into_iter().find(|t| !before.contains(t));
                token.is_some() && redis.blocked_clients() > blocked
            },
            EVENT
        ),
        "not queued and blocked:\n{}",
        proc.stderr()
    );
    (proc, token.unwrap())
}

/// Asserts that `log.txt` shows each label entering and leaving in `order`, one at a time.
#[track_caller]
fn assert_one_at_a_time(redis: &RedisServer, order: &[&str]) {
    let expected: String = order
        .iter()
        .map(|l| format!("enter {l}\nleave {l}\n"))
        .collect();
    assert_eq!(log(redis), expected, "two holders at once, or out of order");
}

/// `w1` (token `t1`), which found its grant gone, queues again behind W2, which holds the lock
/// and waits for `go-W2`; then W2 lets go: both ran, W2 first, one at a time.
#[track_caller]
fn queues_again_behind_w2(redis: &RedisServer, w1: Proc, t1: &str, w2: Proc) {
    assert!(
        wait_for(|| queue(redis, "k") == [t1], EVENT),
        "W1 did not queue again:\n{}\n{}",
        w1.stderr(),
        log(redis)
    );
    go(redis, "W2");
    w2.finish(EVENT).expect(0);
    w1.finish(EVENT).expect(0);
    assert_one_at_a_time(redis, &["W2", "W1"]);
}

/// Fails if a hand-over still costs the waiter an attempt of its own: between the holder's
/// release and the waiter's exit, the server runs two scripts (the release, which grants the
/// lock, and the waiter's own release at the end of its command) and no other command that
/// counts (the waiter's BLPOP, blocked before, returns; it is counted when it is sent). The
/// lock's history tells the grant as the waiter's acquisition, after the release.
#[test]
fn a_release_grants_the_lock_to_the_waiter_in_the_same_step() {
    let redis = or_skip!(RedisServer::start());
    // Load the release script, so that each release below is one EVALSHA.
    redis
        .redlock()
        .args(["release", "other", "0123456789abcdef0123456789abcdef"])
        .run();
    let holder = hold(&redis, "k", "30s");
    let (waiter, token) = parked(&redis, &mut bracketed(&redis, "W", false));
    let (scripts, blpops) = (redis.script_calls(), redis.calls("blpop"));
    release(&redis, "k", &holder);
    waiter.finish(EVENT).expect(0);
    assert_eq!(
        (
            redis.script_calls() - scripts,
            redis.calls("blpop") - blpops
        ),
        (2, 0),
        "(script calls, BLPOPs) from the release to the waiter's exit"
    );
    assert_one_at_a_time(&redis, &["W"]);
    let out = redis.redlock().args(["log", "k"]).run().ok();
    let kinds: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert!(
        out.contains(&token[..8])
            && kinds.ends_with(&["acquired", "released", "acquired", "released"]),
        "{out}"
    );
    assert_eq!(redis.keys(), [meta_key("k")]);
}

/// Fails if a waiter stopped (SIGSTOP) across its grant, and resumed once the grant has run out
/// and the next waiter holds the lock, uses the grant it reads then: it must see that it read it
/// too late, find the lock taken, and queue again. (Resumed within the first third of the claim
/// window, it would use it: the grant was still its own then.)
#[test]
fn a_waiter_stopped_across_its_grant_never_runs_beside_the_next_holder() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let holder = hold(&redis, "k", "30s");
    let (w1, t1) = parked(&redis, &mut bracketed(&redis, "W1", false));
    let (w2, t2) = parked(&redis, &mut bracketed(&redis, "W2", true));
    w1.signal(libc::SIGSTOP);
    release(&redis, "k", &holder);
    assert_eq!(redis.get(&key), Some(t1.clone()), "granted to W1");
    assert!(redis.pttl(&key) <= CLAIM_MS);
    // The grant runs out unused; W2 takes the lock at its next look (its block is capped).
    entered(&redis, "W2");
    assert_eq!(redis.get(&key), Some(t2));
    w1.signal(libc::SIGCONT);
    queues_again_behind_w2(&redis, w1, &t1, w2);
    assert_eq!(redis.keys(), [meta_key("k")]);
}

/// Fails if a waiter that reads its grant late (its replies held on a [`SlowLink`] until a third
/// of the claim window after its last attempt, by the server's clock) uses it without making sure
/// it is still its own, here after a `release --force` passed the lock on to the next waiter: it
/// must find the lock gone and queue again, not run beside that holder. (Read sooner, it is used
/// as it stands, and the holder's renewal 50 ms later finds it forced away: a forced holder runs
/// until it hears.) A forced release also takes back the push of a grant not read yet (see
/// `release.lua`).
#[test]
fn a_grant_forced_away_before_its_waiter_read_it_is_not_used() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let link = SlowLink::to(&redis);
    let holder = hold(&redis, "k", "30s");
    let (w1, t1) = parked(
        &redis,
        &mut bracket(link.redlock(&redis), &redis, "W1", false),
    );
    let (w2, t2) = parked(&redis, &mut bracketed(&redis, "W2", true));
    // When W1's last attempt queued it, by the server's clock (its waiter record's first field).
    let who: String = redis.query(&["HGET", &format!("{key}:leases"), &format!("{t1}:who")]);
    let queued: i64 = who.split('\t').next().unwrap().parse().unwrap();
    link.hold();
    release(&redis, "k", &holder);
    assert_eq!(redis.get(&key), Some(t1.clone()), "granted to W1");
    let out = redis
        .redlock()
        .args(["release", "k", "--force"])
        .run()
        .expect(0);
    assert!(out.stderr.contains(&t1[..8]), "{out}");
    assert_eq!(redis.get(&key), Some(t2.clone()), "forced on to W2");
    entered(&redis, "W2");
    assert!(
        wait_for(|| redis.now_ms() > queued + 2 * CLAIM_MS / 5, EVENT),
        "the server's clock stands still"
    );
    link.pass();
    queues_again_behind_w2(&redis, w1, &t1, w2);
}

/// Fails if a grant does not survive a restart of a server that keeps its data (an fsynced
/// append-only file): the waiter, stopped across the grant and the restart, resumes holding the
/// lock (extending it first if it read the grant late, or finding it its own at its next
/// attempt if its blocked read was cut), and a newcomer finds it busy meanwhile.
#[test]
fn a_grant_survives_a_restart_of_a_server_that_keeps_its_data() {
    let mut redis = or_skip!(RedisServer::persistent().start());
    let key = lock_key("k");
    let holder = hold(&redis, "k", "30s");
    let (w1, t1) = parked(&redis, &mut bracketed(&redis, "W1", true));
    w1.signal(libc::SIGSTOP);
    release(&redis, "k", &holder);
    assert_eq!(redis.get(&key), Some(t1.clone()), "granted to W1");
    redis.kill();
    redis.restart();
    w1.signal(libc::SIGCONT);
    entered(&redis, "W1");
    assert_eq!(redis.get(&key), Some(t1), "W1 runs, holding the lock");
    let out = redis.redlock().args(["acquire", "k", "-n"]).run().expect(1);
    assert!(out.stderr.contains("busy"), "{out}");
    go(&redis, "W1");
    w1.finish(EVENT).expect(0);
    assert_one_at_a_time(&redis, &["W1"]);
}

/// Fails if a granted `exec` keeps its lock for the claim window only for longer than a moment
/// (review finding): it renews the grant to its TTL soon after it started its command
/// (`renew::GRANT_RENEWAL`, 50 ms; the build before renewed it a third of the window after its
/// last attempt, about 600 ms later here), by the server's clock: the renewal (META `expires_ms`
/// less the TTL) within 450 ms of the grant (`acquired_ms`). From then on, a stall of its
/// `redlock` process longer than the claim window but shorter than the TTL (3 s of SIGSTOP) does
/// not let the next waiter in beside its command.
#[test]
fn a_granted_holder_renews_soon_and_rides_out_a_stall_shorter_than_its_ttl() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let holder = hold(&redis, "k", "30s");
    let (w1, _) = parked(&redis, &mut bracketed(&redis, "W1", true));
    let (w2, _) = parked(&redis, &mut bracketed(&redis, "W2", false));
    release(&redis, "k", &holder);
    entered(&redis, "W1");
    assert!(
        wait_for(|| redis.pttl(&key) > CLAIM_MS, EVENT),
        "W1 never renewed its grant"
    );
    let meta = redis.meta("k");
    let field = |f: &str| meta[f].parse::<i64>().unwrap();
    let renewed = field("expires_ms") - field("ttl_ms");
    assert!(
        renewed - field("acquired_ms") < 450,
        "renewed {} ms after the grant",
        renewed - field("acquired_ms")
    );
    w1.signal(libc::SIGSTOP);
    // Longer than the claim window, far shorter than the TTL: W2 must not get in meanwhile.
    let overlapped = wait_for(
        || log(&redis).contains("enter W2"),
        Duration::from_millis(3_000),
    );
    w1.signal(libc::SIGCONT);
    go(&redis, "W1");
    w1.finish(EVENT).expect(0);
    w2.finish(EVENT).expect(0);
    assert!(!overlapped, "W2 entered beside W1:\n{}", log(&redis));
    assert_one_at_a_time(&redis, &["W1", "W2"]);
}
