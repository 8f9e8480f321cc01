//! `redlock status` names the waiters (who, what, since when, until when) in queue order, and
//! marks a holder whose process is gone from this host `stale?`.
//!
//! Each waiter is a real `redlock acquire` under `sh` (so that each has a pid of its own: the
//! owner record names the calling script), queued one after another: the next starts only when
//! the one before is in the queue (`:q`), so the order is known.

use std::time::Duration;

use crate::common::nodes::Nodes;
use crate::common::*;
use serde_json::Value;

/// A bound for anything that should happen promptly; reaching it means a hang.
const EVENT: Duration = Duration::from_secs(30);

/// The hash of lock `name` that holds its waiters' leases, and their records under `TOKEN:who`.
fn leases_key(name: &str) -> String {
    format!("{}:leases", lock_key(name))
}

/// Starts `redlock acquire NAME ARGS` in a shell that stays (its pid is the one recorded), and
/// waits until it is in the queue of `server` (which must hold `before` entries before it).
fn queue_up(server: &RedisServer, url: &str, name: &str, args: &str, before: usize) -> Proc {
    let mut cmd = sh(&format!("redlock acquire {name} {args}; echo exit=$?"));
    cmd.env("REDLOCK_URL", url);
    let mut waiter = cmd.spawn_proc();
    let queued = wait_for(|| queue(server, name).len() > before, EVENT);
    assert!(queued, "waiter {args} never queued:\n{}", waiter.stderr());
    assert!(waiter.running());
    waiter
}

/// `status NAME --json` (one lock): its object.
fn status_json(cmd: &mut std::process::Command, name: &str) -> Value {
    let out = cmd.args(["status", name, "--json"]).run();
    let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    v[0].clone()
}

#[test]
fn waiters_are_listed_in_arrival_order_with_their_owners() {
    let redis = or_skip!(RedisServer::start());
    let url = redis.url();
    let holder = hold(&redis, "deploy", "60s");
    let a = queue_up(&redis, &url, "deploy", "--wait 5m --note 'job a'", 0);
    let b = queue_up(
        &redis,
        &url,
        "deploy",
        "--note 'job b --password hunter2'",
        1,
    );
    let c = queue_up(&redis, &url, "deploy", "--wait 10m --note job-c", 2);
    let pids = [a.id(), b.id(), c.id()];

    // Listing every lock shows the count only, unless --queue; a named lock lists its waiters.
    let out = redis.redlock().args(["status"]).run().expect(0);
    assert_eq!(out.stdout.lines().count(), 2, "{out}");
    let all = redis.redlock().args(["status", "--queue"]).run().expect(0);
    let out = redis.redlock().args(["status", "deploy"]).run().expect(0);
    for out in [&all, &out] {
        assert!(out.stdout.contains("\nwaiting for deploy:\n"), "{out}");
    }
    // Every lock is read in batches, a named one by its script: the same waiters either way.
    let queue_of = |args: &[&str]| {
        let out = redis.redlock().args(args).run().ok();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v[0]["queue"].clone()
    };
    let named = queue_of(&["status", "deploy", "--json"]);
    assert_eq!(named.as_array().map(Vec::len), Some(3), "{named}");
    assert_eq!(queue_of(&["status", "--json"]), named);
    // The holder's line is as before: the list comes after the table.
    let first: Vec<&str> = out.stdout.lines().take(2).collect();
    assert!(
        first[0].starts_with("LOCK ") && first[1].starts_with("deploy "),
        "{out}"
    );
    let section = waiting_section(&out.stdout, "deploy");
    assert_eq!(section.len(), 4, "header and three waiters:\n{out}");
    assert!(section[0].starts_with("#  WAITER"), "{out}");
    for (i, (pid, note, gives_up)) in [
        (pids[0], "job a", None),
        (pids[1], "job b --password ***", Some("never")),
        (pids[2], "job-c", None),
    ]
    .into_iter()
    .enumerate()
    {
        let row = &section[i + 1];
        assert!(row.starts_with(&format!("{} ", i + 1)), "{out}");
        assert!(row.contains('@'), "{out}");
        assert!(row.contains(&format!("(pid {pid})")), "waiter {i}:\n{out}");
        assert!(row.ends_with(note), "waiter {i}:\n{out}");
        match gives_up {
            Some(never) => assert!(row.contains(&format!("  {never}  ")), "{out}"),
            None => assert!(row.contains("Z  "), "a time:\n{out}"),
        }
    }
    assert!(!out.stdout.contains("hunter2"), "{out}");

    let v = status_json(&mut redis.redlock(), "deploy");
    assert_eq!(v["waiters"], 3, "{v}");
    let list = v["queue"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(list.len(), 3, "{v}");
    let now = redis.now_ms();
    let mut since_before = 0;
    for (i, (w, pid, note, wait_ms)) in [
        (&list[0], pids[0], "job a", Some(300_000)),
        (&list[1], pids[1], "job b --password ***", None),
        (&list[2], pids[2], "job-c", Some(600_000)),
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(w["position"], i + 1, "{v}");
        assert_eq!(w["pid"], pid, "{v}");
        assert_eq!(w["note"], note, "{v}");
        assert!(w["user"].as_str().is_some_and(|u| !u.is_empty()), "{v}");
        assert_eq!(w["host"], v["holder"]["host"], "{v}");
        let since = w["since_ms"].as_i64().unwrap_or_else(|| panic!("{v}"));
        assert!(since >= since_before && since <= now, "{v}");
        since_before = since;
        match wait_ms {
            // What was left of the wait when it queued: at most --wait, and not much less (the
            // start of a process, one round trip; generous for a busy machine).
            Some(ms) => {
                let deadline = w["deadline_ms"].as_i64().unwrap_or_else(|| panic!("{v}"));
                let left = deadline - since;
                assert!(left <= ms && left > ms - 20_000, "{left} of {ms}: {v}");
            }
            None => assert!(w["deadline_ms"].is_null(), "{v}"),
        }
    }

    // Each gets the lock in turn; the list shrinks from the front, and nothing is left after.
    release(&redis, "deploy", &holder);
    for (i, w) in [a, b, c].into_iter().enumerate() {
        let out = w.finish(EVENT);
        let token = out.stdout.lines().next().unwrap_or_default().to_string();
        assert!(is_token(&token), "waiter {i}:\n{out}");
        let v = status_json(&mut redis.redlock(), "deploy");
        assert_eq!(v["queue"].as_array().map(Vec::len), Some(2 - i), "{v}");
        if let Some(next) = v["queue"].get(0) {
            assert_eq!(next["position"], 1, "{v}");
            assert_eq!(next["pid"], pids[i + 1], "{v}");
        }
        release(&redis, "deploy", &token);
    }
    assert_eq!(redis.query::<i64>(&["EXISTS", &leases_key("deploy")]), 0);
    assert!(
        queue(&redis, "deploy").is_empty(),
        "{:?}",
        queue(&redis, "deploy")
    );
}

/// A waiter that gives up (SIGTERM) takes its record with it at once; one that is SIGKILLed
/// leaves the list when its lease runs out (a few seconds), though its queue entry stays until a
/// release prunes it.
#[test]
fn a_waiter_that_leaves_or_dies_disappears_from_the_list() {
    let redis = or_skip!(RedisServer::start());
    let url = redis.url();
    let holder = hold(&redis, "job", "60s");
    let spawn = |note: &str, before: usize| {
        let p = redis
            .redlock()
            .args(["acquire", "job", "--note", note])
            .spawn_proc();
        assert!(
            wait_for(|| queue(&redis, "job").len() > before, EVENT),
            "{note} never queued"
        );
        p
    };
    let leaver = spawn("leaver", 0);
    let mut killed = spawn("killed", 1);
    let stays = queue_up(&redis, &url, "job", "--note stays", 2);
    let notes = || -> Vec<String> {
        let v = status_json(&mut redis.redlock(), "job");
        v["queue"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"))
            .iter()
            .map(|w| format!("{}:{}", w["position"], w["note"].as_str().unwrap_or("?")))
            .collect()
    };
    assert_eq!(notes(), ["1:leaver", "2:killed", "3:stays"]);

    leaver.signal(libc::SIGTERM);
    assert!(
        wait_for(|| notes() == ["1:killed", "2:stays"], EVENT),
        "{:?}",
        notes()
    );
    let out = leaver.finish(EVENT);
    assert!(out.stdout.is_empty() && out.code() != 0, "{out}");

    killed.signal(libc::SIGKILL);
    let _ = killed.child().wait();
    // Still queued (nobody pruned it), but no longer listed once its lease ran out.
    assert!(wait_for(|| notes() == ["1:stays"], EVENT), "{:?}", notes());
    assert_eq!(queue(&redis, "job").len(), 2);

    release(&redis, "job", &holder);
    let out = stays.finish(EVENT);
    let token = out.stdout.lines().next().unwrap_or_default().to_string();
    assert!(is_token(&token), "{out}");
    release(&redis, "job", &token);
    let left: Vec<String> = redis
        .keys()
        .into_iter()
        .filter(|k| k.starts_with(&lock_key("job")) && *k != meta_key("job"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// The record is anyone's to write: it is escaped and its note redacted on display.
#[test]
fn a_planted_waiter_record_is_escaped_and_redacted() {
    let redis = or_skip!(RedisServer::start());
    hold(&redis, "x", "60s");
    let far = (redis.now_ms() + 60_000).to_string();
    redis.query::<()>(&["ZADD", &format!("{}:q", lock_key("x")), "1", "t1"]);
    redis.query::<()>(&["HSET", &leases_key("x"), "t1", &far]);
    redis.query::<()>(&[
        "HSET",
        &leases_key("x"),
        "t1:who",
        "1\tbad\t7\tev\x1b[31mil\th\nost\tREDIS_PASSWORD=hunter2\textra",
    ]);
    let out = redis
        .redlock()
        .args(["status", "x", "--queue"])
        .run()
        .expect(0);
    assert!(
        !out.stdout.contains('\x1b') && !out.stdout.contains("hunter2"),
        "{out}"
    );
    let section = waiting_section(&out.stdout, "x");
    assert_eq!(section.len(), 2, "{out}");
    assert!(
        section[1].contains("never"),
        "an unreadable deadline is none:\n{out}"
    );
    let v = status_json(&mut redis.redlock(), "x");
    let w = &v["queue"][0];
    assert_eq!(w["pid"], 7, "{v}");
    assert_eq!(w["since_ms"], 1, "{v}");
    assert!(w["deadline_ms"].is_null(), "{v}");
    assert!(!w["user"].as_str().unwrap().contains('\x1b'), "{v}");
    assert!(!w["host"].as_str().unwrap().contains('\n'), "{v}");
    assert!(w["note"].as_str().unwrap().contains("***"), "{v}");
}

/// Times in a planted record that no clock can show (after the year 9999, before 1970, the
/// lowest i64) are shown as `?` or clamped, never a crash (they made `status` panic).
#[test]
fn a_planted_record_with_absurd_times_does_not_crash_status() {
    let redis = or_skip!(RedisServer::start());
    hold(&redis, "x", "60s");
    let far = (redis.now_ms() + 60_000).to_string();
    for (t, record) in [
        ("t1", "1\t999999999999999999\t7\tu\th\tnote"),
        ("t2", "-9223372036854775808\t253402300800000\t8\tu\th\tnote"),
    ] {
        redis.query::<()>(&["ZADD", &format!("{}:q", lock_key("x")), "1", t]);
        redis.query::<()>(&["HSET", &leases_key("x"), t, &far]);
        redis.query::<()>(&["HSET", &leases_key("x"), &format!("{t}:who"), record]);
    }
    for args in [
        &["status", "x"][..],
        &["status", "--queue"],
        &["status", "--json"],
    ] {
        let out = redis.redlock().args(args).run().expect(0);
        assert!(out.stderr.is_empty(), "{out}");
    }
    let out = redis.redlock().args(["status", "x"]).run().expect(0);
    let section = waiting_section(&out.stdout, "x");
    assert_eq!(section.len(), 3, "{out}");
    assert!(section[1].contains('?'), "{out}");
}

/// `stale?`: the holder ran on this host and its process is gone.
#[test]
fn a_holder_whose_process_is_gone_is_marked_stale() {
    let redis = or_skip!(RedisServer::start());
    // The recorded pid is the shell's, which `exec sleep` keeps.
    let mut holder = redis
        .sh("redlock acquire svc --ttl 60s >/dev/null && echo held && exec sleep 600")
        .spawn_proc();
    assert!(
        wait_for(|| holder.stdout().contains("held"), EVENT),
        "{}",
        holder.stderr()
    );
    let holder_cell = || {
        let out = redis.redlock().args(["status", "svc"]).run().expect(0);
        out.stdout.lines().nth(1).unwrap_or_default().to_string()
    };
    assert!(!holder_cell().contains("stale?"), "{}", holder_cell());
    assert_eq!(status_json(&mut redis.redlock(), "svc")["stale"], false);

    holder.signal(libc::SIGKILL);
    // Reaped: a zombie still has a /proc entry (it counts as gone too, but not waiting makes the
    // test say what it means).
    let _ = holder.child().wait();
    let row = holder_cell();
    assert!(
        row.contains(&format!("(pid {}) stale?", holder.id())),
        "{row}"
    );
    assert_eq!(status_json(&mut redis.redlock(), "svc")["stale"], true);

    // Another host: nothing to look at, so no mark, and null.
    redis.query::<()>(&["HSET", &meta_key("svc"), "host", "elsewhere.invalid"]);
    assert!(!holder_cell().contains("stale?"), "{}", holder_cell());
    assert!(status_json(&mut redis.redlock(), "svc")["stale"].is_null());
}

/// On a quorum, only the queue node (the first URL) keeps waiters: the list comes from it, and
/// nothing of them is left on any node afterwards.
#[test]
fn a_quorum_lists_the_waiters_of_its_queue_node() {
    let nodes = or_skip!(Nodes::start(3));
    let urls = nodes.urls().join(",");
    let holder = nodes
        .redlock()
        .args(["acquire", "q", "--ttl", "60s"])
        .run()
        .ok();
    let first = queue_up(&nodes[0], &urls, "q", "--note first", 0);
    let second = queue_up(&nodes[0], &urls, "q", "--wait 5m --note second", 1);
    let v = status_json(&mut nodes.redlock(), "q");
    let list = v["queue"].as_array().unwrap_or_else(|| panic!("{v}"));
    let got: Vec<(&Value, &Value, &Value)> = list
        .iter()
        .map(|w| (&w["position"], &w["note"], &w["pid"]))
        .collect();
    assert_eq!(
        got,
        [
            (
                &Value::from(1),
                &Value::from("first"),
                &Value::from(first.id())
            ),
            (
                &Value::from(2),
                &Value::from("second"),
                &Value::from(second.id())
            ),
        ],
        "{v}"
    );
    assert!(
        list[0]["deadline_ms"].is_null() && list[1]["deadline_ms"].is_i64(),
        "{v}"
    );
    for i in 1..3 {
        let fields: Vec<String> = nodes[i].query(&["HKEYS", &leases_key("q")]);
        assert!(
            !fields.iter().any(|f| f.ends_with(":who")),
            "node {i}: {fields:?}"
        );
    }
    // A quorum waiter tries each time with a fresh token (at its block cap, 3 s): its record
    // moves with its place, so it has waited since it first queued, not since its last attempt.
    let since = list[0]["since_ms"].clone();
    let token = queue(&nodes[0], "q")[0].clone();
    assert!(
        wait_for(|| queue(&nodes[0], "q")[0] != token, EVENT),
        "the first waiter never tried again"
    );
    let v = status_json(&mut nodes.redlock(), "q");
    assert_eq!(v["queue"][0]["since_ms"], since, "{v}");
    assert_eq!(v["queue"][0]["note"], "first", "{v}");

    nodes
        .redlock()
        .args(["release", "q", &holder])
        .run()
        .expect(0);
    let mut tokens = vec![holder.clone()];
    for w in [first, second] {
        let out = w.finish(EVENT);
        let token = out.stdout.lines().next().unwrap_or_default().to_string();
        assert!(is_token(&token), "{out}");
        nodes
            .redlock()
            .args(["release", "q", &token])
            .run()
            .expect(0);
        tokens.push(token);
    }
    let ours: Vec<&str> = tokens.iter().map(String::as_str).collect();
    nodes.assert_nothing_left("q", &ours);
}
