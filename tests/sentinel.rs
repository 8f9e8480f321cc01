//! `--sentinel` and `--wait-replicas`: a master, its replica and a sentinel built by the test.
//!
//! redlock is given only the sentinel's URL, so a lock can reach the master only through the
//! sentinel's answer; after `SENTINEL FAILOVER` the old master is a read-only replica, so a
//! command that still went there would fail. `--wait-replicas` is checked against the one replica
//! there is: one acknowledgement is possible, two are not.

mod common;

use std::time::{Duration, Instant};

use common::topology::{Replicated, role};
use common::*;

/// Asserts that a failed acquire of `name` left nothing of its own on `server`: no lock key, no
/// waiting keys, and no holder in the meta hash (which may stay for its fence counter).
#[track_caller]
fn assert_nothing_left(server: &RedisServer, name: &str, out: &Output) {
    assert_eq!(server.get(&lock_key(name)), None, "lock key left:\n{out}");
    let ours: Vec<String> = server
        .keys()
        .into_iter()
        .filter(|k| k.starts_with(&lock_key(name)) && *k != meta_key(name))
        .collect();
    assert_eq!(ours, Vec::<String>::new(), "{out}");
    let meta = server.meta(name);
    assert!(
        !meta.contains_key("token"),
        "holder record left: {meta:?}\n{out}"
    );
}

/// The one error line of a `--wait-replicas 2` failure names the one replica that acknowledged.
#[track_caller]
fn assert_one_of_two_acknowledged(out: &Output) {
    assert_one_error_line(out);
    assert!(out.stderr.contains("replica"), "{out}");
    assert!(
        !out.stderr.contains("  "),
        "a run of spaces in the message:\n{out}"
    );
    let numbers: Vec<&str> = out
        .stderr
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .collect();
    assert!(
        numbers.contains(&"1"),
        "how many acknowledged is not said:\n{out}"
    );
}

#[test]
fn locks_are_taken_on_the_master_the_sentinel_names_before_and_after_a_failover() {
    let Some(group) = Replicated::start() else {
        return;
    };
    let (first, second) = (group.first_master(), group.first_replica());
    let before = group
        .redlock()
        .args(["acquire", "before", "--ttl", "60s", "-n"])
        .run()
        .ok();
    assert!(is_token(&before), "{before:?}");
    assert_eq!(first.get(&lock_key("before")), Some(before.clone()));
    assert_eq!(first.meta("before")["fence"], "1");
    group.redlock().args(["status", "before"]).run().expect(0);
    group.wait_replicated();

    group.failover();
    assert_eq!(group.master().port(), second.port());
    assert_eq!(role(first), "slave");

    let after = group
        .redlock()
        .args(["acquire", "after", "--ttl", "60s", "-n"])
        .run()
        .ok();
    assert!(is_token(&after), "{after:?}");
    assert_eq!(second.get(&lock_key("after")), Some(after.clone()));
    assert_eq!(role(second), "master", "the lock is not on the master");
    // The lock taken before the failover was replicated and is still held on the new master.
    assert_eq!(second.get(&lock_key("before")), Some(before.clone()));
    let out = group
        .redlock()
        .args(["acquire", "before", "-n"])
        .run()
        .expect(1);
    assert!(out.stderr.contains("busy"), "{out}");
    let out = group.redlock().args(["status", "--json"]).run().expect(0);
    assert!(
        out.stdout.contains(&after[..8]) && out.stdout.contains(&before[..8]),
        "{out}"
    );
    for (name, token) in [("after", &after), ("before", &before)] {
        group
            .redlock()
            .args(["release", name, token])
            .run()
            .expect(0);
        assert_eq!(second.get(&lock_key(name)), None, "{name} not released");
    }
}

#[test]
fn wait_replicas_1_succeeds_with_one_replica() {
    let Some(group) = Replicated::start() else {
        return;
    };
    let (master, replica) = (group.first_master(), group.first_replica());
    // Through the sentinel, and on the master directly (one-server mode).
    let token = group
        .redlock()
        .args(["acquire", "a", "--wait-replicas", "1"])
        .run()
        .ok();
    assert!(is_token(&token), "{token:?}");
    assert_eq!(master.get(&lock_key("a")), Some(token.clone()));
    // WAIT returned once the replica acknowledged the write: it has the lock already.
    assert_eq!(replica.get(&lock_key("a")), Some(token));
    let token = master
        .redlock()
        .args(["acquire", "b", "--wait-replicas", "1"])
        .run()
        .ok();
    assert_eq!(replica.get(&lock_key("b")), Some(token));

    let out = group
        .redlock()
        .args(["exec", "c", "--wait-replicas", "1", "-c", "echo ran"])
        .run()
        .expect(0);
    assert_eq!(out.stdout, "ran\n", "{out}");
    assert_eq!(master.get(&lock_key("c")), None, "not released:\n{out}");
}

#[test]
fn wait_replicas_2_with_one_replica_exits_69_and_leaves_no_lock() {
    let Some(group) = Replicated::start() else {
        return;
    };
    let (master, replica) = (group.first_master(), group.first_replica());

    // On the master directly, with the default --io-timeout (the WAIT's timeout).
    let out = master
        .redlock()
        .args(["acquire", "a", "--wait-replicas", "2"])
        .run()
        .expect(69);
    assert_eq!(out.stdout, "", "no token for a lock not held:\n{out}");
    assert_one_of_two_acknowledged(&out);
    assert_nothing_left(master, "a", &out);

    // Through the sentinel, acquire and exec.
    let out = group
        .redlock()
        .args(["acquire", "b", "--wait-replicas", "2", "--io-timeout", "1s"])
        .run()
        .expect(69);
    assert_eq!(out.stdout, "", "{out}");
    assert_one_of_two_acknowledged(&out);
    assert_nothing_left(master, "b", &out);

    let ran = master.dir().join("ran");
    let out = group
        .redlock()
        .args([
            "exec",
            "c",
            "--wait-replicas",
            "2",
            "--io-timeout",
            "1s",
            "--",
        ])
        .arg("touch")
        .arg(&ran)
        .run()
        .expect(69);
    assert_one_of_two_acknowledged(&out);
    assert!(!ran.exists(), "the command ran without the lock:\n{out}");
    assert_nothing_left(master, "c", &out);

    // The lock was really given back: another client takes it at once, and the replica has
    // nothing left of the failed attempts either.
    for name in ["a", "b", "c"] {
        let token = master.redlock().args(["acquire", name, "-n"]).run().ok();
        assert!(is_token(&token), "{name}: {token:?}");
    }
    group.wait_replicated();
    for name in ["a", "b", "c"] {
        assert_eq!(
            replica.get(&lock_key(name)),
            master.get(&lock_key(name)),
            "{name}"
        );
    }
}

/// `exec` tells its command how to reach the master (`REDLOCK_URL`, `REDLOCK_SENTINEL`), so that
/// `redlock extend "$REDLOCK_KEY"` in the command works.
#[test]
fn a_command_under_exec_reaches_the_master_through_its_environment() {
    let Some(group) = Replicated::start() else {
        return;
    };
    let script = format!(
        r#"'{BIN}' extend "$REDLOCK_KEY" --ttl 120s && '{BIN}' status --json "$REDLOCK_KEY""#
    );
    let out = group
        .redlock()
        .args(["exec", "k", "--ttl", "30s", "-c", &script])
        .run()
        .expect(0);
    let v: serde_json::Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"));
    assert_eq!(v[0]["key"], "k", "{out}");
    assert_eq!(v[0]["held"], true, "{out}");
    let ttl = v[0]["ttl_ms"].as_i64().unwrap_or(0);
    assert!(ttl > 60_000, "not extended:\n{out}");
    assert_eq!(group.first_master().keys(), [meta_key("k")], "{out}");
}

/// `release --force` through the sentinel reaches an `exec` holder at once: it listens on the
/// master the sentinel named, where the release announces it.
#[test]
fn a_forced_release_stops_an_exec_holder_at_once() {
    let Some(group) = Replicated::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let script = format!("touch '{}'; exec sleep 60", started.display());
    let holder = group
        .redlock()
        .args(["exec", "k", "--ttl", "30s", "-c", &script])
        .spawn_proc();
    assert!(
        wait_for(|| started.exists(), Duration::from_secs(10)),
        "{}",
        holder.stderr()
    );
    wait_subscribed(&[group.first_master()], "k");
    let forced = Instant::now();
    group
        .redlock()
        .args(["release", "k", "--force"])
        .run()
        .expect(0);
    let out = holder.finish(Duration::from_secs(10)).expect(75);
    let took = forced.elapsed();
    assert!(took < Duration::from_secs(5), "took {took:?}:\n{out}");
    assert!(out.stderr.contains("force-released"), "{out}");
}
