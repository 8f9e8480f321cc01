//! `redlock status --watch`: the changes as JSON Lines, as log lines, and as a table redrawn on a
//! terminal; silent expiries; signals; a lost subscription made again.
//!
//! Real `redlock` processes against real `redis-server`s. The tests synchronise on the watcher's
//! subscription as the server counts it (`PUBSUB NUMPAT`/`NUMSUB`), on lines it prints and on
//! exits, never on a sleep.

mod common;

use std::io::Read;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::pty::{Pty, pty};
use common::*;
use serde_json::Value;

/// A bound for anything that should happen promptly; reaching it means a hang.
const EVENT: Duration = Duration::from_secs(15);

/// The pattern subscriptions on `redis` (a watcher of every lock makes one).
fn patterns(redis: &RedisServer) -> i64 {
    redis.query(&["PUBSUB", "NUMPAT"])
}

/// Starts `redlock status --watch ARGS` and waits until it is subscribed (a watcher of every lock
/// subscribes to a pattern; one of named locks to the channel of the first).
fn watcher(redis: &RedisServer, args: &[&str]) -> Proc {
    let mut proc = redis
        .redlock()
        .args(["status", "--watch"])
        .args(args)
        .spawn_proc();
    let named = args.iter().find(|a| !a.starts_with('-'));
    let subscribed = || match named {
        None => patterns(redis) == 1,
        Some(name) => {
            let channel = format!("{}:watch", lock_key(name));
            let counts: Vec<redis::Value> = redis.query(&["PUBSUB", "NUMSUB", &channel]);
            matches!(counts.get(1), Some(redis::Value::Int(1)))
        }
    };
    if !wait_for(subscribed, EVENT) {
        panic!(
            "the watcher did not subscribe\n--- stderr:\n{}",
            proc.stderr()
        );
    }
    // Subscribed and listed as such: the notice follows the confirmation.
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
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let token = hold(&redis, "k", "2s");
    let watch = watcher(&redis, &["--json", "k"]);
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
    let _ = wait_for(
        || events(&watch).iter().any(|e| e["token"] == next[..8]),
        Duration::from_secs(3),
    );
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
    let Some(redis) = RedisServer::start() else {
        return;
    };
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
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut watch = watcher(&redis, &["--json"]);
    let _: redis::Value = redis.query(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    watch.wait_for_stderr("not listening for changes", EVENT);
    watch.wait_for_stderr(
        "listening for changes to every lock under prefix 'redlock:' again",
        EVENT,
    );
    assert!(wait_for(|| patterns(&redis) == 1, EVENT));
    watch.signal(libc::SIGINT);
    watch.finish(EVENT).expect(130);
}

/// A frozen server never hangs the watcher: it says that it cannot read or hear the locks, and
/// carries on once the server answers again.
#[test]
fn a_frozen_server_is_reported_and_outlived() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
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
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let token = hold(&redis, "k", "1500ms");
    let watch = watcher(&redis, &[]);
    assert!(
        wait_for(|| watch.stdout().contains(" k expired "), EVENT),
        "{}",
        watch.stdout()
    );
    watch.signal(libc::SIGINT);
    let out = watch.finish(EVENT).expect(130);
    let line = out.stdout.lines().next().unwrap();
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
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let token = hold(&redis, "k", "60s");
    let Pty { master, slave } = pty(Some(100));
    let mut cmd = redis.redlock();
    cmd.args(["status", "--watch"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(slave))
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn redlock");
    drop(cmd);
    let seen = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&seen);
    let reader = std::thread::spawn(move || {
        let mut master = master;
        let mut chunk = [0u8; 4096];
        while let Ok(n) = master.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
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
    let gone = || seen.lock().unwrap()[before..].contains("no locks held under prefix 'redlock:'");
    assert!(wait_for(gone, EVENT), "{:?}", seen.lock().unwrap());
    common::signal(child.id(), libc::SIGINT);
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
