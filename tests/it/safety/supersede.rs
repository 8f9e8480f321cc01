//! `--supersede`: a newer waiter that asks for it makes every earlier waiter that asked for it
//! leave the queue at once ("deploy only the newest commit"); each exits with the conflict status
//! and says who superseded it. The holder and the other waiters are left alone.

use crate::common::*;

fn superseded_events(redis: &RedisServer, name: &str) -> usize {
    let out = redis.redlock().args(["log", name, "--json"]).run().ok();
    out.lines()
        .filter(|l| l.contains(r#""event":"superseded""#))
        .count()
}

#[test]
fn of_three_supersede_waiters_the_newest_runs_after_the_holder() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let holder = redis
        .redlock()
        .args(["acquire", "deploy", "--ttl", "60s"])
        .run()
        .ok();
    let waiter = |extra: &[&str], name: &str| {
        redis
            .redlock()
            .args(["exec", "deploy", "--supersede", "--note", name])
            .args(extra)
            .args(["--", "sh", "-c", &format!("echo {name} >> ran")])
            .current_dir(dir.path())
            .spawn_proc()
    };
    let first = waiter(&[], "first");
    assert!(wait_for(|| queue(&redis, "deploy").len() == 1, HANG));
    let second = waiter(&["-E", "0"], "second");
    let out = first.finish(HANG).expect(1);
    assert!(
        out.stderr.contains("superseded by ") && out.stderr.contains("(--supersede); gave up"),
        "{out}"
    );
    assert!(wait_for(|| queue(&redis, "deploy").len() == 1, HANG));
    let third = waiter(&[], "third");
    // -E 0: a superseded CI run is green.
    second.finish(HANG).expect(0);
    assert!(wait_for(|| queue(&redis, "deploy").len() == 1, HANG));
    // The holder was left alone.
    assert_eq!(redis.get(&lock_key("deploy")), Some(holder.clone()));
    redis
        .redlock()
        .args(["release", "deploy", &holder])
        .run()
        .expect(0);
    third.finish(HANG).expect(0);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ran")).unwrap(),
        "third\n"
    );
    assert_eq!(superseded_events(&redis, "deploy"), 2);
    // The superseded waiters' marks were read and are gone: nothing is left.
    assert_eq!(
        redis.keys_and_histories(),
        [format!("{}:log", lock_key("deploy")), meta_key("deploy")]
    );
}

#[test]
fn waiters_without_supersede_keep_their_place() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let holder = redis
        .redlock()
        .args(["acquire", "k", "--ttl", "60s"])
        .run()
        .ok();
    let run = |supersede: bool, name: &str| {
        let mut cmd = redis.redlock();
        cmd.args(["exec", "k"]);
        if supersede {
            cmd.arg("--supersede");
        }
        cmd.args(["--", "sh", "-c", &format!("echo {name} >> ran")])
            .current_dir(dir.path())
            .spawn_proc()
    };
    let plain = run(false, "plain");
    assert!(wait_for(|| queue(&redis, "k").len() == 1, HANG));
    let old = run(true, "old");
    assert!(wait_for(|| queue(&redis, "k").len() == 2, HANG));
    let new = run(true, "new");
    old.finish(HANG).expect(1);
    assert_eq!(queue(&redis, "k").len(), 2);
    redis
        .redlock()
        .args(["release", "k", &holder])
        .run()
        .expect(0);
    plain.finish(HANG).expect(0);
    new.finish(HANG).expect(0);
    // First come, first served among those left.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ran")).unwrap(),
        "plain\nnew\n"
    );
}

/// A waiter the lock was handed to (granted; it is stopped, so it has not used it yet) is the
/// holder: a newer --supersede waiter does not supersede it, and queues.
#[test]
fn a_waiter_whose_turn_came_is_not_superseded() {
    let redis = or_skip!(RedisServer::start());
    let holder = redis
        .redlock()
        .args(["acquire", "k", "--ttl", "60s"])
        .run()
        .ok();
    let old = redis
        .redlock()
        .args(["acquire", "k", "--supersede", "--wait", "60s"])
        .spawn_proc();
    assert!(wait_for(|| queue(&redis, "k").len() == 1, HANG));
    old.signal(libc::SIGSTOP);
    redis
        .redlock()
        .args(["release", "k", &holder])
        .run()
        .expect(0);
    let handed = redis.get(&lock_key("k")).unwrap();
    assert!(handed != holder && !handed.starts_with('~'), "{handed}");
    assert!(queue(&redis, "k").is_empty(), "granted, out of the queue");
    let new = redis
        .redlock()
        .args(["acquire", "k", "--supersede", "--wait", "60s"])
        .spawn_proc();
    // Queued (or, on a machine slow enough for the stopped waiter's grant to run out first,
    // holding the lock): either way, it superseded nobody.
    let settled =
        || queue(&redis, "k").len() == 1 || redis.get(&lock_key("k")).is_some_and(|v| v != handed);
    assert!(wait_for(settled, HANG));
    assert!(
        !redis.keys().iter().any(|k| k.contains(":gone:")),
        "{:?}",
        redis.keys()
    );
    assert_eq!(superseded_events(&redis, "k"), 0);
    // The stopped waiter never uses its grant: it runs out and the newer one gets the lock.
    drop(old);
    let token = new.finish(HANG).ok();
    assert_eq!(redis.get(&lock_key("k")), Some(token));
}

#[test]
fn supersede_needs_a_wait_and_one_server() {
    redlock()
        .args(["acquire", "k", "--supersede", "-n"])
        .run()
        .expect(2);
    let urls = [closed_port(), closed_port(), closed_port()]
        .map(|p| format!("--url=redis://127.0.0.1:{p}"));
    let out = redlock()
        .args(&urls)
        .args(["acquire", "k", "--supersede"])
        .run()
        .expect(2);
    assert!(
        out.stderr
            .contains("--supersede does not apply to several --url"),
        "{out}"
    );
}
