//! `redlock status --watch`: the changes as JSON Lines, as log lines, and as a table redrawn on a
//! terminal; silent expiries; signals; a lost subscription made again.
//!
//! Real `redlock` processes against real `redis-server`s. The tests synchronise on the watcher's
//! subscription as the server counts it (`PUBSUB NUMPAT`/`NUMSUB`), on lines it prints and on
//! exits, never on a sleep.

use std::io::Read;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::pty::{Pty, pty};
use crate::common::*;
use serde_json::Value;

/// A bound for anything that should happen promptly; reaching it means a hang.
const EVENT: Duration = Duration::from_secs(15);

/// The pattern subscriptions on `redis` (a watcher of every lock makes one).
fn patterns(redis: &RedisServer) -> i64 {
    redis.query(&["PUBSUB", "NUMPAT"])
}

/// Whether a watcher of every lock is subscribed: after its pattern, it subscribes to the
/// channel by which the scripts know that someone watches every lock (nothing is published to a
/// lock's channel before that; see `listened` in common.lua).
fn watching_all(redis: &RedisServer) -> bool {
    let (_, n): (String, i64) = redis.query(&["PUBSUB", "NUMSUB", "redlock:{*}:watching"]);
    patterns(redis) == 1 && n == 1
}

/// Starts `redlock status --watch ARGS` and waits until it is subscribed (a watcher of every lock
/// subscribes to a pattern and a channel; one of named locks to the channel of the first).
fn watcher(redis: &RedisServer, args: &[&str]) -> Proc {
    let named = args
        .iter()
        .find(|a| !a.starts_with('-'))
        .map(|n| n.to_string());
    let mut cmd = redis.redlock();
    cmd.args(["status", "--watch"]).args(args);
    watching(cmd, || match &named {
        None => watching_all(redis),
        Some(name) => {
            let channel = format!("{}:watch", lock_key(name));
            let counts: Vec<redis::Value> = redis.query(&["PUBSUB", "NUMSUB", &channel]);
            matches!(counts.get(1), Some(redis::Value::Int(1)))
        }
    })
}

/// Starts `cmd` (a watcher) and waits until `subscribed` says the server counts its
/// subscription, and it said so.
fn watching(mut cmd: std::process::Command, subscribed: impl FnMut() -> bool) -> Proc {
    let mut proc = cmd.spawn_proc();
    if !wait_for(subscribed, EVENT) {
        panic!(
            "the watcher did not subscribe\n--- stderr:\n{}",
            proc.stderr()
        );
    }
    // The notice follows the confirmation.
    proc.wait_for_stderr("listening for changes", EVENT);
    proc
}

/// The JSON objects printed so far, one a line.
fn events(proc: &Proc) -> Vec<Value> {
    proc.stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// Waits until `proc` printed an event for which `pred` holds; returns all the events so far.
#[track_caller]
fn wait_event(proc: &Proc, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
    if !wait_for(|| events(proc).iter().any(&pred), EVENT) {
        panic!(
            "no such event\n--- stdout:\n{}--- stderr:\n{}",
            proc.stdout(),
            proc.stderr()
        );
    }
    events(proc)
}

/// A holder whose TTL runs out without a release is reported as `expired` by the watcher's own
/// refresh, with who it was and how long it held the lock, and only once.
#[test]
fn a_silent_expiry_is_reported_once() {
    let redis = or_skip!(RedisServer::start());
    // The watcher first: taken before it, the hold could run out before its first read.
    let watch = watcher(&redis, &["--json", "k"]);
    let token = hold(&redis, "k", "2s");
    let seen = wait_event(&watch, |e| e["event"] == "expired");
    let expired: Vec<&Value> = seen.iter().filter(|e| e["event"] == "expired").collect();
    assert_eq!(expired.len(), 1, "{seen:?}");
    let e = expired[0];
    assert_eq!(e["lock"], "k");
    assert_eq!(e["token"], &token[..8]);
    assert!(e["fence"].as_str().unwrap().parse::<u64>().is_ok(), "{e}");
    assert_eq!(e["pid"].as_str().map(str::is_empty), Some(false), "{e}");
    let held = e["held_ms"].as_i64().unwrap();
    assert!((1900..=2100).contains(&held), "{e}");
    assert!(e["time"].as_str().unwrap().ends_with('Z'), "RFC 3339: {e}");
    // Nothing more for the same hold: a later acquisition (whose script may say `expired` too)
    // adds no second one.
    let next = hold(&redis, "k", "30s");
    wait_event(&watch, |e| {
        e["event"] == "acquired" && e["token"] == next[..8]
    });
    watch.signal(libc::SIGINT);
    let out = watch.finish(EVENT).expect(130);
    let expired = out
        .stdout
        .lines()
        .filter(|l| l.contains(r#""event":"expired""#))
        .count();
    assert_eq!(expired, 1, "{out}");
}

/// SIGINT ends the watch with 130 and SIGTERM with 143, leaving no subscription and no key
/// behind, and printing nothing on stdout when nothing changed.
#[test]
fn signals_end_the_watch_leaving_nothing_behind() {
    let redis = or_skip!(RedisServer::start());
    hold(&redis, "k", "60s");
    let keys = redis.keys();
    for (sig, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let watch = watcher(&redis, &["--json"]);
        watch.signal(sig);
        let out = watch.finish(EVENT).expect(code);
        assert_eq!(out.stdout, "", "{out}");
        assert!(!out.stderr.contains("panicked"), "{out}");
        // The connection closes with the process: the server drops the pattern.
        assert!(wait_for(|| patterns(&redis) == 0, EVENT), "{out}");
        assert_eq!(redis.keys(), keys);
    }
}

/// A watcher whose subscription is cut subscribes again and says so.
#[test]
fn a_lost_subscription_is_made_again() {
    let redis = or_skip!(RedisServer::start());
    let mut watch = watcher(&redis, &["--json"]);
    let _: redis::Value = redis.query(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    watch.wait_for_stderr("not listening for changes", EVENT);
    watch.wait_for_stderr(
        "listening for changes to every lock under prefix 'redlock:' again",
        EVENT,
    );
    assert!(wait_for(|| watching_all(&redis), EVENT));
    watch.signal(libc::SIGINT);
    watch.finish(EVENT).expect(130);
}

/// A frozen server never hangs the watcher: it says that it cannot read or hear the locks, and
/// carries on once the server answers again.
#[test]
fn a_frozen_server_is_reported_and_outlived() {
    let redis = or_skip!(RedisServer::start());
    let mut watch = watcher(&redis, &["--json", "--io-timeout=1s"]);
    redis.pause();
    watch.wait_for_stderr("cannot read the locks", EVENT);
    redis.resume();
    watch.wait_for_stderr("reading the locks again", EVENT);
    watch.signal(libc::SIGTERM);
    watch.finish(EVENT).expect(143);
}

/// Not a terminal and not `--json`: one line per change, with the time, the lock and the event.
#[test]
fn a_log_gets_one_line_per_change() {
    let redis = or_skip!(RedisServer::start());
    // The watcher first: taken before it, the hold could run out before its first read.
    let watch = watcher(&redis, &[]);
    let token = hold(&redis, "k", "1500ms");
    assert!(
        wait_for(|| watch.stdout().contains(" k expired "), EVENT),
        "{}",
        watch.stdout()
    );
    watch.signal(libc::SIGINT);
    let out = watch.finish(EVENT).expect(130);
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains(" k expired "))
        .unwrap();
    assert!(
        line.contains(" k expired ") && line.contains(&format!("token {}…", &token[..8])),
        "{out}"
    );
    assert!(line.contains("(never released)"), "{out}");
}

/// On a terminal: the table, redrawn in place on the alternate screen, the lock gone from it once
/// free; Ctrl-C gives the terminal back (cursor shown, screen restored) and exits 130.
#[test]
fn the_table_is_redrawn_in_a_terminal_and_the_terminal_restored() {
    let redis = or_skip!(RedisServer::start());
    let token = hold(&redis, "k", "60s");
    let Pty { master, slave } = pty(Some(100));
    let mut cmd = redis.redlock();
    cmd.args(["status", "--watch"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(slave))
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn redlock");
    drop(cmd);
    let (seen, reader) = collect(master);
    let shown = |needle: &str| {
        let seen = Arc::clone(&seen);
        let needle = needle.to_string();
        move || seen.lock().unwrap().contains(&needle)
    };
    // Drawn from the top of the alternate screen, the cursor hidden.
    assert!(
        wait_for(shown("\x1b[?1049h"), EVENT),
        "{:?}",
        seen.lock().unwrap()
    );
    assert!(
        wait_for(shown("\x1b[?25l"), EVENT)
            && wait_for(shown("\x1b[Hredlock status --watch: "), EVENT)
            && wait_for(shown("\nLOCK  STATE"), EVENT),
        "{:?}",
        seen.lock().unwrap()
    );
    assert!(
        wait_for(shown("\nk     held  "), EVENT),
        "{:?}",
        seen.lock().unwrap()
    );
    let before = seen.lock().unwrap().len();
    release(&redis, "k", &token);
    // Gone from the table, and listed below it as a change.
    let gone = || {
        let seen = seen.lock().unwrap();
        seen[before..].contains("no locks held under prefix 'redlock:'")
            && seen[before..].contains(&format!(" k released token {}…", &token[..8]))
    };
    assert!(wait_for(gone, EVENT), "{:?}", seen.lock().unwrap());
    crate::common::signal(child.id(), libc::SIGINT);
    assert!(
        wait_for(|| child.try_wait().unwrap().is_some(), EVENT),
        "{:?}",
        seen.lock().unwrap()
    );
    assert_eq!(child.wait().unwrap().code(), Some(130));
    reader.join().unwrap();
    let seen = Arc::try_unwrap(seen).unwrap().into_inner().unwrap();
    assert!(
        seen.ends_with("\x1b[?7h\x1b[?25h\x1b[?1049l"),
        "the terminal is not restored at the end: {:?}",
        &seen[seen.len().saturating_sub(200)..]
    );
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    // Nothing on stderr: it would be drawn over.
    assert_eq!(stderr, "");
}

/// The kinds of events, in order, with their tokens' fingerprints.
fn sequence(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_string(),
                e["token"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn fp(token: &str) -> String {
    token[..8].to_string()
}

/// A scripted sequence: a holder, a waiter (`exec`) queued behind it, a release that hands the
/// lock over, the waiter's command ending, a holder that never releases, and the next
/// acquisition: each change once, in order, with its fields (the expiry seen by the watcher, not
/// repeated when the next acquisition's script tells it too).
#[test]
fn json_lines_tell_a_scripted_sequence_in_order() {
    let redis = or_skip!(RedisServer::start());
    let watch = watcher(&redis, &["--json"]);
    let a = redis
        .redlock()
        .args([
            "acquire",
            "k",
            "--ttl",
            "60s",
            "--note",
            "deploy password=hunter2",
        ])
        .run()
        .ok();
    let waiter = redis
        .redlock()
        .args(["exec", "k", "--wait", "60s", "--", "sh", "-c", "exit 3"])
        .spawn_proc();
    wait_event(&watch, |e| e["event"] == "queued");
    release(&redis, "k", &a);
    waiter.finish(EVENT).expect(3);
    let c = hold(&redis, "k", "1s");
    wait_event(&watch, |e| e["event"] == "expired");
    let d = hold(&redis, "k", "60s");
    let seen = wait_event(&watch, |e| e["event"] == "acquired" && e["token"] == fp(&d));
    let b = seen
        .iter()
        .find(|e| e["event"] == "queued")
        .map(|e| e["token"].as_str().unwrap().to_string())
        .unwrap();
    let expected: Vec<(String, String)> = [
        ("acquired", fp(&a)),
        ("queued", b.clone()),
        ("released", fp(&a)),
        ("acquired", b.clone()),
        ("released", b.clone()),
        ("acquired", fp(&c)),
        ("expired", fp(&c)),
        ("acquired", fp(&d)),
    ]
    .into_iter()
    .map(|(k, t)| (k.to_string(), t))
    .collect();
    assert_eq!(sequence(&seen), expected, "{seen:#?}");
    for e in &seen {
        assert_eq!(e["lock"], "k", "{e}");
        assert!(e["time"].as_str().unwrap().ends_with('Z'), "{e}");
        assert!(e["at_ms"].as_i64().is_some(), "{e}");
    }
    // The note was redacted by the client, and is shown so.
    assert!(!watch.stdout().contains("hunter2"), "{}", watch.stdout());
    assert_eq!(seen[0]["ttl_ms"], 60000);
    assert_eq!(
        seen[3]["waited_ms"].as_i64().map(|w| w > 0),
        Some(true),
        "{}",
        seen[3]
    );
    assert_eq!(seen[4]["status"], 3, "{}", seen[4]);
    assert_eq!(seen[6]["held_ms"], 1000, "{}", seen[6]);
    watch.signal(libc::SIGINT);
    let out = watch.finish(EVENT).expect(130);
    assert_eq!(
        out.stdout.matches(r#""event":"expired""#).count(),
        1,
        "{out}"
    );
}

/// On a quorum the changes come from the queue node (the first URL) and the expiry from the
/// refresh of every node.
#[test]
fn a_quorum_is_watched_on_its_queue_node() {
    let nodes = or_skip!(crate::common::nodes::Nodes::start(3));
    let queue_node = nodes.servers().next().unwrap();
    let mut cmd = nodes.redlock();
    // `--format json` is `--json`.
    cmd.args(["status", "--watch", "--format", "json", "k"]);
    let watch = watching(cmd, || {
        let counts: Vec<redis::Value> =
            queue_node.query(&["PUBSUB", "NUMSUB", &format!("{}:watch", lock_key("k"))]);
        matches!(counts.get(1), Some(redis::Value::Int(1)))
    });
    let a = nodes
        .redlock()
        .args(["acquire", "k", "--ttl", "60s"])
        .run()
        .ok();
    nodes.redlock().args(["release", "k", &a]).run().expect(0);
    let c = nodes
        .redlock()
        .args(["acquire", "k", "--ttl", "1s"])
        .run()
        .ok();
    let seen = wait_event(&watch, |e| e["event"] == "expired");
    let expected: Vec<(String, String)> = [
        ("acquired", fp(&a)),
        ("released", fp(&a)),
        ("acquired", fp(&c)),
        ("expired", fp(&c)),
    ]
    .into_iter()
    .map(|(k, t)| (k.to_string(), t))
    .collect();
    assert_eq!(sequence(&seen), expected, "{seen:#?}");
    watch.signal(libc::SIGTERM);
    watch.finish(EVENT).expect(143);
}

/// On a Cluster one subscription (on the first seed) hears the locks of every master: a lock's
/// script publishes on its own master, and the Cluster passes it on.
#[test]
fn a_cluster_is_watched_from_one_node() {
    let cluster = or_skip!(crate::common::topology::Cluster::start());
    let names = cluster.names_on_each_node("watch");
    let seed = &cluster.nodes()[0];
    let mut cmd = cluster.redlock();
    cmd.args(["status", "--watch", "--json"]);
    let watch = watching(cmd, || seed.query::<i64>(&["PUBSUB", "NUMPAT"]) == 1);
    let mut tokens = Vec::new();
    // One at a time: each master's message reaches the seed by a link of its own, so two
    // published close together may arrive in either order.
    for name in &names {
        let token = cluster
            .redlock()
            .args(["acquire", name, "--ttl", "60s"])
            .run()
            .ok();
        wait_event(&watch, |e| {
            e["event"] == "acquired" && e["token"] == fp(&token)
        });
        tokens.push(token);
    }
    let seen = events(&watch);
    let got: Vec<(String, String)> = seen
        .iter()
        .map(|e| {
            (
                e["lock"].as_str().unwrap().to_string(),
                e["token"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = names
        .iter()
        .zip(&tokens)
        .map(|(n, t)| (n.clone(), fp(t)))
        .collect();
    assert_eq!(got, want, "{seen:#?}");
    watch.signal(libc::SIGINT);
    watch.finish(EVENT).expect(130);
}

/// A server that refuses the subscription (an ACL user without the channels) is an error with
/// the auth exit status, at once: trying again could not help.
#[test]
fn a_refused_subscription_is_an_error() {
    let redis = or_skip!(RedisServer::start());
    let url = redis.user_without_channels("nosub", "nosubpw");
    let out = redlock()
        .args(["--url", &url, "status", "--watch", "--json"])
        .run()
        .expect(77);
    // The channel the scripts count it by is subscribed first (see `watching_all`).
    assert!(
        out.stderr
            .contains("refused the subscription to redlock:{*}:watching: NOPERM"),
        "{out}"
    );
    assert!(!out.stderr.contains("panicked"), "{out}");
}

/// A reader that stopped reading (`| head -1`) ends the watch, with 0: not an error.
#[test]
fn a_closed_stdout_ends_the_watch_quietly() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let rc = dir.path().join("rc");
    let script = format!(
        "{{ redlock status --watch --json k; echo $? > '{}'; }} | head -1",
        rc.display()
    );
    let proc = redis.sh(&script).spawn_proc();
    let channel = format!("{}:watch", lock_key("k"));
    let subscribed = || {
        let counts: Vec<redis::Value> = redis.query(&["PUBSUB", "NUMSUB", &channel]);
        matches!(counts.get(1), Some(redis::Value::Int(1)))
    };
    assert!(wait_for(subscribed, EVENT), "{}", proc.stderr());
    // The first change is read by head, which then exits; a later one finds the pipe closed.
    let ended = wait_for(
        || {
            let token = hold(&redis, "k", "60s");
            release(&redis, "k", &token);
            rc.exists()
        },
        EVENT,
    );
    let out = proc.finish(EVENT);
    assert!(ended, "{out}");
    assert_eq!(std::fs::read_to_string(&rc).unwrap().trim(), "0", "{out}");
    assert_eq!(out.stdout.lines().count(), 1, "{out}");
    assert_eq!(
        out.stderr.matches("redlock: ").count(),
        1,
        "only the notice: {out}"
    );
}

/// Through Sentinel: the watcher subscribes on the master the sentinel names, and when that
/// master dies it asks the sentinel again and subscribes on the promoted replica.
#[test]
fn sentinel_a_watcher_follows_the_master_after_a_failover() {
    let mut group = or_skip!(crate::common::topology::Replicated::start());
    let channel = format!("{}:watch", lock_key("k"));
    let subscribed_on = |server: &RedisServer| {
        let counts: Vec<redis::Value> = server.query(&["PUBSUB", "NUMSUB", &channel]);
        matches!(counts.get(1), Some(redis::Value::Int(1)))
    };
    let mut cmd = group.redlock();
    cmd.args(["status", "--watch", "--json", "k"]);
    let mut watch = watching(cmd, || subscribed_on(group.first_master()));
    group.kill_master();
    watch.wait_for_stderr("listening for changes to 'k' again", EVENT);
    assert!(subscribed_on(group.first_replica()), "{}", watch.stderr());
    let token = group
        .redlock()
        .args(["acquire", "k", "--ttl", "60s"])
        .run()
        .ok();
    wait_event(&watch, |e| {
        e["event"] == "acquired" && e["token"] == fp(&token)
    });
    watch.signal(libc::SIGINT);
    watch.finish(EVENT).expect(130);
}

/// A server that is down or never answers when the watch starts: one error line and exit 69,
/// within the timeouts, never a hang.
#[test]
fn a_watch_that_cannot_start_says_why_and_exits() {
    for port in [closed_port(), silent_port()] {
        let url = format!("redis://127.0.0.1:{port}");
        let out = redlock()
            .args(["--url", &url, "--connect-timeout=1s", "--io-timeout=1s"])
            .args(["status", "--watch", "--json"])
            .run()
            .expect(69);
        assert_one_error_line(&out);
        assert_eq!(out.stdout, "", "{out}");
    }
}

/// Metrics are a snapshot for a scrape: `--watch` with `--format prometheus` is a usage error.
#[test]
fn watch_refuses_the_prometheus_format() {
    let redis = or_skip!(RedisServer::start());
    let out = redis
        .redlock()
        .args(["status", "--watch", "--format", "prometheus"])
        .run()
        .expect(2);
    assert_one_error_line(&out);
    assert!(out.stderr.contains("--format prometheus"), "{out}");
    assert_eq!(out.stdout, "", "{out}");
    assert_eq!(patterns(&redis), 0, "{out}");
}

/// `redlock status --watch FLAGS k` whose stdout is a pipe that nobody reads until the test
/// writes the file `go`, returned once it listens: the shell around it, the watcher's pid, `go`,
/// and the dir that holds `go`.
fn stalled_watcher(redis: &RedisServer, flags: &str) -> (Proc, u32, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let pid = dir.path().join("pid");
    // The reader drains nothing until `go` exists; the watcher's pid is written for the signal.
    let script = format!(
        "sh -c 'echo $$ > \"$1\"; exec redlock status --watch {flags} k' sh '{}' \
         | {{ while [ ! -e '{}' ]; do sleep 0.05; done; cat > /dev/null; }}",
        pid.display(),
        go.display()
    );
    let mut proc = redis.sh(&script).spawn_proc();
    let channel = format!("{}:watch", lock_key("k"));
    let subscribed = || {
        let counts: Vec<redis::Value> = redis.query(&["PUBSUB", "NUMSUB", &channel]);
        matches!(counts.get(1), Some(redis::Value::Int(1)))
    };
    assert!(wait_for(subscribed, EVENT), "{}", proc.stderr());
    proc.wait_for_stderr("listening for changes", EVENT);
    let watcher: u32 = std::fs::read_to_string(&pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (proc, watcher, go, dir)
}

/// A watcher that falls behind (here: its stdout is a pipe nobody reads while changes pour in)
/// drops what does not fit in its backlog and says how many it missed, rather than holding every
/// message in memory.
#[test]
fn a_watcher_that_falls_behind_says_how_many_changes_it_missed() {
    let redis = or_skip!(RedisServer::start());
    let (mut proc, watcher, go, _dir) = stalled_watcher(&redis, "--json");
    let channel = format!("{}:watch", lock_key("k"));
    // 4,000 changes of 1 KB: far more than a pipe holds, and than the backlog of 1,024.
    let payload = format!(
        r#"{{"event":"left","token":"0123abcd","pad":"{}"}}"#,
        "x".repeat(1000)
    );
    let mut con = redis.cli();
    let mut pipe = redis::pipe();
    for _ in 0..4000 {
        pipe.cmd("PUBLISH").arg(&channel).arg(&payload).ignore();
    }
    pipe.query::<()>(&mut con).unwrap();
    std::fs::write(&go, "").unwrap();
    proc.wait_for_stderr("changes (the watcher fell behind)", EVENT);
    signal(watcher, libc::SIGTERM);
    let out = proc.finish(EVENT);
    let missed: u64 = out
        .stderr
        .split("missed ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!((1..4000).contains(&missed), "{out}");
    assert!(!out.stderr.contains("panicked"), "{out}");
}

/// The peak resident memory of process `pid` in KiB (VmHWM in /proc/PID/status).
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A watcher whose stdout nobody reads holds a bounded number of bytes, not of messages: a
/// flood of 60 KB changes (each under the size of an event, 1,000 of them: 60 MB) and of 8 MB
/// messages (20 of them: 160 MB) leaves its peak memory far below either (it rose by the whole
/// flood before, 779 MB in the audit for 150 messages of 8 MB), and once the reader reads, it
/// says what it dropped.
#[test]
fn a_stalled_watcher_holds_a_bounded_number_of_bytes() {
    let redis = or_skip!(RedisServer::start());
    // The server never cuts off a subscriber that lags: the watcher must keep up by itself.
    redis.query::<()>(&[
        "CONFIG",
        "SET",
        "client-output-buffer-limit",
        "pubsub 0 0 0",
    ]);
    let (mut proc, watcher, go, _dir) = stalled_watcher(&redis, "");
    let channel = format!("{}:watch", lock_key("k"));
    let before = peak_rss_kib(watcher);
    let mut con = redis.cli();
    let event = |pad: usize| {
        format!(
            r#"{{"event":"left","token":"0123abcd","pad":"{}"}}"#,
            "x".repeat(pad)
        )
    };
    let (medium, big) = (event(60_000), event(8 << 20));
    for (payload, n) in [(&medium, 1000), (&big, 20)] {
        for _ in 0..n {
            redis::cmd("PUBLISH")
                .arg(&channel)
                .arg(payload)
                .query::<()>(&mut con)
                .unwrap();
        }
    }
    // Everything sent: the server holds nothing more for the watcher.
    let drained = || {
        let list: String = redis.query(&["CLIENT", "LIST", "TYPE", "pubsub"]);
        list.contains(" omem=0 ")
    };
    assert!(wait_for(drained, EVENT), "the watcher stopped reading");
    // A last small change, the listener's last read, then the peak.
    redis.query::<()>(&["PUBLISH", &channel, &event(10)]);
    assert!(wait_for(drained, EVENT), "the watcher stopped reading");
    let peak = peak_rss_kib(watcher);
    assert!(
        peak < before + 100 * 1024,
        "the watcher's peak memory rose from {before} KiB to {peak} KiB\n{}",
        proc.stderr()
    );
    std::fs::write(&go, "").unwrap();
    proc.wait_for_stderr("changes (the watcher fell behind)", EVENT);
    // Told once a refresh: the count may come in parts.
    let ignored = |stderr: &str| -> u64 {
        stderr
            .split("ignored ")
            .skip(1)
            .filter_map(|rest| {
                let (n, tail) = rest.lines().next()?.split_once(' ')?;
                tail.contains(" over 64 KiB")
                    .then(|| n.parse::<u64>().ok())?
            })
            .sum()
    };
    assert!(
        wait_for(|| ignored(&proc.stderr()) == 20, EVENT),
        "not told of the 20 messages over 64 KiB:\n{}",
        proc.stderr()
    );
    signal(watcher, libc::SIGTERM);
    let out = proc.finish(EVENT);
    assert!(!out.stderr.contains("panicked"), "{out}");
    eprintln!("peak memory {before} KiB -> {peak} KiB");
}

/// An `acquired` that anyone may publish for a lock that does not exist creates no holder of its
/// own: the watcher's reads, which find nothing in Redis, never report it as expired.
#[test]
fn a_published_holder_that_redis_never_had_is_not_reported_expired() {
    let redis = or_skip!(RedisServer::start());
    let watch = watcher(&redis, &["--json"]);
    let now = redis.now_ms();
    let fake = format!(
        r#"{{"event":"acquired","token":"fakefake","at_ms":{now},"ttl_ms":1,"fence":"1"}}"#
    );
    let _: i64 = redis.query(&["PUBLISH", &format!("{}:watch", lock_key("ghost")), &fake]);
    wait_event(&watch, |e| e["event"] == "acquired" && e["lock"] == "ghost");
    // A real silent expiry is told by a read, which comes after the fake was taken in; the next
    // acquisition is heard after that read is done.
    let token = hold(&redis, "k", "1s");
    wait_event(&watch, |e| {
        e["event"] == "expired" && e["token"] == token[..8]
    });
    let next = hold(&redis, "other", "60s");
    let seen = wait_event(&watch, |e| {
        e["event"] == "acquired" && e["token"] == next[..8]
    });
    assert!(
        !seen
            .iter()
            .any(|e| e["event"] == "expired" && e["lock"] == "ghost"),
        "{seen:#?}"
    );
    watch.signal(libc::SIGINT);
    watch.finish(EVENT).expect(130);
}

/// A server that stops answering is said to have timed out, in those words, not with the
/// operating system's text for a timeout.
#[test]
fn a_silent_subscription_is_said_to_have_timed_out() {
    let redis = or_skip!(RedisServer::start());
    let mut watch = watcher(&redis, &["--json", "--io-timeout=1s"]);
    redis.pause();
    watch.wait_for_stderr("not listening for changes", EVENT);
    redis.resume();
    watch.signal(libc::SIGTERM);
    let out = watch.finish(EVENT).expect(143);
    assert!(
        out.stderr
            .contains("the server did not answer a PING within 1s (--io-timeout)"),
        "{out}"
    );
    assert!(!out.stderr.contains("os error"), "{out}");
}

/// A password set while the watch runs: its subscription, made again, is refused as an
/// authentication failure (exit status 77), in those words.
#[test]
fn a_subscription_refused_for_a_password_is_an_authentication_failure() {
    let redis = or_skip!(RedisServer::start());
    let watch = watcher(&redis, &["--json"]);
    // One connection: it stays authenticated after the password is set.
    let mut con = redis.cli();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("newpw")
        .query::<()>(&mut con)
        .unwrap();
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query::<redis::Value>(&mut con)
        .unwrap();
    let out = watch.finish(EVENT).expect(77);
    assert!(
        out.stderr
            .contains("authentication failed for the subscription: NOAUTH"),
        "{out}"
    );
}

/// On a terminal a flood of changes does not make a read of the locks per batch of changes: the
/// reads come at most every 250 ms (plus the refresh each second), however many changes arrive.
#[test]
fn a_flood_on_a_terminal_does_not_reread_the_locks_per_change() {
    let redis = or_skip!(RedisServer::start());
    let Pty { master, slave } = pty(Some(100));
    let mut cmd = redis.redlock();
    cmd.args(["status", "--watch", "k"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(slave))
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn redlock");
    drop(cmd);
    let seen = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&seen);
    let reader = std::thread::spawn(move || {
        let mut master = master;
        let mut chunk = [0u8; 65536];
        while let Ok(n) = master.read(&mut chunk) {
            if n == 0 {
                break;
            }
            let mut seen = sink.lock().unwrap();
            seen.push_str(&String::from_utf8_lossy(&chunk[..n]));
            // Only the tail matters: the markers are in the latest frames.
            if seen.len() > 1 << 20 {
                let cut = seen.len() - (1 << 19);
                let cut = (cut..seen.len())
                    .find(|&i| seen.is_char_boundary(i))
                    .unwrap();
                seen.drain(..cut);
            }
        }
    });
    let shown = |needle: String| {
        let seen = Arc::clone(&seen);
        move || seen.lock().unwrap().contains(&needle)
    };
    assert!(
        wait_for(shown("listening for changes to 'k'".into()), EVENT),
        "{:?}",
        seen.lock().unwrap()
    );
    let channel = format!("{}:watch", lock_key("k"));
    let mut con = redis.cli();
    let reads = redis.script_calls();
    let started = std::time::Instant::now();
    // Four rounds of 1,000 changes (each fits in the watcher's backlog, so none is dropped),
    // the last of each a marker, shown before the next round.
    for round in 0..4 {
        let mut pipe = redis::pipe();
        for i in 0..1000 {
            let token = if i == 999 {
                format!("mark{round:04}")
            } else {
                "0123abcd".to_string()
            };
            pipe.cmd("PUBLISH")
                .arg(&channel)
                .arg(format!(r#"{{"event":"left","token":"{token}"}}"#))
                .ignore();
        }
        pipe.query::<()>(&mut con).unwrap();
        assert!(
            wait_for(shown(format!("token mark{round:04}…")), EVENT),
            "round {round}: {:?}",
            seen.lock().unwrap()
        );
    }
    let elapsed = started.elapsed();
    let reads = redis.script_calls() - reads;
    // Each read of `k` is one script call. Before the fix: one read per batch of at most 101
    // changes, 40 at least.
    let bound = 3 + elapsed.as_millis() as u64 / 200;
    assert!(
        reads <= bound,
        "{reads} reads in {elapsed:?} (at most {bound} expected)"
    );
    crate::common::signal(child.id(), libc::SIGTERM);
    assert!(wait_for(|| child.try_wait().unwrap().is_some(), EVENT));
    assert_eq!(child.wait().unwrap().code(), Some(143));
    reader.join().unwrap();
}

/// A lock's scripts publish a change only while someone may listen (a subscriber of the lock's
/// channel, or a watcher of every lock): encoding it costs the server more than the rest of the telling.
/// The history is written either way.
#[test]
fn changes_are_published_only_while_someone_watches() {
    let redis = or_skip!(RedisServer::start());
    redis.query::<()>(&["CONFIG", "RESETSTAT"]);
    redis
        .redlock()
        .args(["exec", "k", "--", "true"])
        .run()
        .expect(0);
    assert_eq!(redis.calls("publish"), 0, "nobody listens");
    let log = format!("{}:log", lock_key("k"));
    assert_eq!(redis.query::<i64>(&["XLEN", &log]), 2, "acquired, released");

    // A watcher of this lock (a channel subscription) hears both changes.
    let watch = watcher(&redis, &["k", "--json"]);
    redis
        .redlock()
        .args(["exec", "k", "--", "true"])
        .run()
        .expect(0);
    wait_event(&watch, |e| e["event"] == "released");
    assert_eq!(redis.calls("publish"), 2);
    watch.signal(libc::SIGINT);
    watch.finish(EVENT).expect(130);

    // So does a watcher of every lock (a pattern).
    let watch = watcher(&redis, &["--json"]);
    redis
        .redlock()
        .args(["exec", "j", "--", "true"])
        .run()
        .expect(0);
    wait_event(&watch, |e| e["event"] == "released" && e["lock"] == "j");
    assert_eq!(redis.calls("publish"), 4);
    watch.signal(libc::SIGINT);
    watch.finish(EVENT).expect(130);

    // A subscriber of some other pattern is not a watcher: counting it would make every lock
    // publish while anything on the server listens to a pattern.
    let mut other = redis.cli();
    redis::cmd("PSUBSCRIBE")
        .arg("other:*")
        .exec(&mut other)
        .unwrap();
    assert!(wait_for(|| patterns(&redis) == 1, EVENT));
    redis
        .redlock()
        .args(["exec", "j", "--", "true"])
        .run()
        .expect(0);
    assert_eq!(redis.calls("publish"), 4);
}

/// A watcher of named locks reads them all in one round trip each second (a transaction), not
/// one script call per lock.
#[test]
fn named_locks_are_read_together() {
    let redis = or_skip!(RedisServer::start());
    let names: Vec<String> = (0..5).map(|i| format!("n{i}")).collect();
    for name in &names {
        hold(&redis, name, "60s");
    }
    redis.query::<()>(&["CONFIG", "RESETSTAT"]);
    let mut args: Vec<&str> = names.iter().map(String::as_str).collect();
    args.push("--json");
    let watch = watcher(&redis, &args);
    // The first read and at least one refresh.
    assert!(wait_for(|| redis.calls("exec") >= 2, EVENT));
    assert_eq!(redis.calls("evalsha") + redis.calls("eval"), 0);
    watch.signal(libc::SIGTERM);
    watch.finish(EVENT).expect(143);
}

/// One EVAL publishes a numbered batch of 50 events on lock f's channel: the batch is atomic, so
/// a subscriber that hears any of it heard all of it, from `-s1` on.
const FLOOD: &str = r#"
local b = redis.call('INCR', 'batch')
for i = 1, 50 do
  redis.call('PUBLISH', 'redlock:{f}:watch', cjson.encode({event = 'acquired',
    token = 'abcdef12', at_ms = 1764597600000, fence = 1, user = 'u', host = 'h', pid = '1',
    note = 'b' .. b .. '-s' .. i, waited_ms = 0, ttl_ms = 1000}))
end
return b
"#;

/// A watcher of every lock subscribes to the channel the scripts count it by, then to its
/// pattern: the other way round, a message the pattern heard before the second confirmation was
/// read as that confirmation and lost (found by review: with a flood of published batches, the
/// first event heard was not a batch's first in 12 of 20 starts). Five starts here.
#[test]
fn a_watcher_of_every_lock_hears_the_first_event_after_its_pattern_is_active() {
    let redis = or_skip!(RedisServer::start());
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let stop = Arc::clone(&stop);
        let mut con = redis.cli();
        std::thread::spawn(move || {
            for _ in 0..5_000_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let _: i64 = redis::cmd("EVAL")
                    .arg(FLOOD)
                    .arg(0)
                    .query(&mut con)
                    .unwrap();
            }
        })
    };
    let mut swallowed = Vec::new();
    for attempt in 0..5 {
        let mut watch = redis.redlock().args(["status", "--watch"]).spawn_proc();
        watch.wait_for_stderr("listening for changes", EVENT);
        assert!(
            wait_for(|| watch.stdout().contains("note: b"), EVENT),
            "attempt {attempt}: no event heard"
        );
        watch.signal(libc::SIGINT);
        let out = watch.finish(EVENT);
        let first = out
            .stdout
            .lines()
            .find_map(|l| l.split("note: ").nth(1))
            .map(str::to_string)
            .unwrap_or_default();
        if !first.ends_with("-s1") {
            swallowed.push(format!("attempt {attempt}: first event heard {first}"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    assert!(
        swallowed.is_empty(),
        "the event before the SUBSCRIBE's confirmation was taken for it: {swallowed:#?}"
    );
}
