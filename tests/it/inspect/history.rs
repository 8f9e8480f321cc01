//! `redlock log`: every lock keeps a capped history (the stream `PREFIX{NAME}:log`) written by the
//! scripts that take, release and force it, and by `exec` when it loses it; `log` reads it back
//! (text or JSON Lines), by time or count, and follows it. The meta hash counts acquisitions and
//! their waits (for metrics).

use std::time::Duration;

use crate::common::nodes::Nodes;
use crate::common::*;
use serde_json::Value;

fn log_key(name: &str) -> String {
    format!("{}:log", lock_key(name))
}

/// `redlock log NAME --json ARGS...`, parsed (one object per line).
fn events(redis: &RedisServer, name: &str, args: &[&str]) -> Vec<Value> {
    let out = redis
        .redlock()
        .args(["log", name, "--json"])
        .args(args)
        .run()
        .expect(0);
    parse_lines(&out.stdout)
}

fn parse_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect()
}

#[test]
fn a_scripted_sequence_is_told_in_order_with_its_durations() {
    let redis = or_skip!(RedisServer::start());
    // 1. acquire + release by hand.
    let token = hold(&redis, "k", "60s");
    release(&redis, "k", &token);
    // 2. exec, whose command exits 3.
    redis
        .redlock()
        .args([
            "exec",
            "k",
            "--note",
            "job --password hunter2",
            "--",
            "sh",
            "-c",
            "exit 3",
        ])
        .run()
        .expect(3);
    // 3. a holder that never releases: its TTL runs out, the next acquisition notices.
    let short = redis
        .redlock()
        .args(["acquire", "k", "--ttl", "300ms"])
        .run()
        .ok();
    assert!(wait_for(
        || redis.get(&lock_key("k")).is_none(),
        Duration::from_secs(30)
    ));
    // 4. a holder whose lock is forced away, with a waiter queued behind it that then waits.
    let forced = hold(&redis, "k", "60s");
    let waiter = redis
        .redlock()
        .args(["exec", "k", "--wait", "60s", "--", "true"])
        .spawn_proc();
    assert!(wait_for(
        || queue(&redis, "k").len() == 1,
        Duration::from_secs(30)
    ));
    redis
        .redlock()
        .args(["release", "k", "--force"])
        .run()
        .expect(0);
    waiter.finish(HANG).expect(0);

    let got = events(&redis, "k", &[]);
    assert_eq!(
        kinds(&got),
        [
            "acquired", "released", // 1
            "acquired", "released", // 2
            "acquired", // 3
            "expired", "acquired", "forced", // the expiry noticed by 4's hold; 4
            "acquired", "released", // the waiter
        ],
        "{got:#?}"
    );
    let fp = |t: &str| t[..8].to_string();
    assert_eq!(got[0]["token"], fp(&token));
    assert_eq!(got[1]["token"], fp(&token));
    assert!(
        got[1].get("status").is_none(),
        "release has no command status"
    );
    assert_eq!(got[3]["status"], 3, "exec's command status: {:?}", got[3]);
    // The note is redacted before it reaches Redis.
    assert_eq!(got[2]["note"], "job --password ***");
    let raw: redis::Value = redis.query(&["XRANGE", &log_key("k"), "-", "+"]);
    assert!(!format!("{raw:?}").contains("hunter2"));
    // The expiry names the short holder and how long it held (its TTL).
    assert_eq!(got[5]["token"], fp(&short));
    assert_eq!(got[5]["held_ms"], 300, "{:?}", got[5]);
    assert_eq!(got[5]["fence"], got[4]["fence"]);
    assert_eq!(got[7]["token"], fp(&forced));
    assert!(got[7]["by"].as_str().unwrap().contains('@'), "{:?}", got[7]);
    // The waiter waited until the forced release; the fences increase.
    assert!(got[8]["waited_ms"].as_i64().unwrap() > 0, "{:?}", got[8]);
    let fences: Vec<u128> = got
        .iter()
        .filter(|e| e["event"] == "acquired")
        .map(|e| e["fence"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    // Times are the server's, in order.
    let at: Vec<i64> = got.iter().map(|e| e["at_ms"].as_i64().unwrap()).collect();
    assert!(at.windows(2).all(|w| w[0] <= w[1]), "{at:?}");

    // Counters for metrics: 5 acquisitions, the waits summed.
    let meta = redis.meta("k");
    assert_eq!(meta["acquisitions"], "5", "{meta:?}");
    assert_eq!(
        meta["waited_ms"].parse::<i64>().unwrap(),
        got.iter()
            .filter_map(|e| e.get("waited_ms").and_then(Value::as_i64))
            .sum::<i64>()
    );

    // The text form says the same in one line each.
    let text = redis.redlock().args(["log", "k"]).run().ok();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), got.len(), "{text}");
    assert!(
        lines[3].contains("released") && lines[3].contains("command exited 3"),
        "{text}"
    );
    assert!(
        lines[5].contains("expired") && lines[5].contains("never released"),
        "{text}"
    );
    assert!(!text.contains("hunter2"));
}

/// From 100 up, a write trims whole stream nodes only (`MAXLEN ~`): an exact trim of a full
/// history walked the oldest node's entries on every write, which cost the server more than the
/// rest of an acquisition. At least `--log-max` entries stay, at most one node more.
#[test]
fn a_long_history_is_trimmed_by_whole_nodes() {
    let redis = or_skip!(RedisServer::start());
    // 250 entries in nodes of 100 (the server's default `stream-node-max-entries`): 100, 100, 50.
    let log = log_key("k");
    let mut con = redis.cli();
    let mut pipe = redis::pipe();
    for _ in 0..250 {
        pipe.cmd("XADD")
            .arg(&log)
            .arg("*")
            .arg("event")
            .arg("lost")
            .ignore();
    }
    pipe.exec(&mut con).unwrap();
    redis
        .redlock()
        .args(["exec", "k", "--log-max", "100", "--", "true"])
        .run()
        .expect(0);
    // The first write dropped the first node (151 left, not below 100), the second kept them.
    // (A write in a millisecond that is a multiple of 100 trims exactly instead, on purpose: see
    // `event` in common.lua. Then the count is between the two.)
    let len = redis.query::<i64>(&["XLEN", &log]);
    let entries: Vec<(String, Vec<String>)> = redis.query(&["XRANGE", &log, "-", "+"]);
    let exact = entries.iter().any(|(_, fields)| {
        fields
            .windows(2)
            .any(|f| f[0] == "at_ms" && f[1].parse::<i64>().is_ok_and(|ms| ms % 100 == 0))
    });
    if exact {
        assert!((100..=152).contains(&len), "{len}");
    } else {
        assert_eq!(len, 152);
    }
    // Below 100, exact.
    redis
        .redlock()
        .args(["exec", "k", "--log-max", "99", "--", "true"])
        .run()
        .expect(0);
    assert_eq!(redis.query::<i64>(&["XLEN", &log]), 99);
}

#[test]
fn limit_since_and_log_max_bound_what_is_kept_and_shown() {
    let redis = or_skip!(RedisServer::start());
    for _ in 0..5 {
        redis
            .redlock()
            .args(["exec", "k", "--log-max", "4", "--", "true"])
            .run()
            .expect(0);
    }
    // Trimmed exactly at each write: the last 4 of 10 entries.
    let n: i64 = redis.query(&["XLEN", &log_key("k")]);
    assert_eq!(n, 4);
    let all = events(&redis, "k", &[]);
    assert_eq!(
        kinds(&all),
        ["acquired", "released", "acquired", "released"]
    );
    let last = events(&redis, "k", &["--limit", "1"]);
    assert_eq!(last, all[3..]);
    // --since counts back from the server's clock.
    let since = events(&redis, "k", &["--since", "1h"]);
    assert_eq!(since, all);
    // Entries an hour old and 10 ms old, written by hand (IDs are the server's ms).
    let now = redis.now_ms();
    let old = log_key("s");
    redis.query::<()>(&[
        "XADD",
        &old,
        &format!("{}-0", now - 3_600_000),
        "event",
        "lost",
    ]);
    redis.query::<()>(&["XADD", &old, &format!("{}-0", now - 10), "event", "forced"]);
    assert_eq!(kinds(&events(&redis, "s", &["--since", "1m"])), ["forced"]);
    assert_eq!(
        kinds(&events(&redis, "s", &["--since", "2h"])),
        ["lost", "forced"]
    );
    assert_eq!(
        kinds(&events(&redis, "s", &["--limit", "5"])),
        ["lost", "forced"]
    );

    // 0 writes no history at all.
    let before: i64 = redis.query(&["XLEN", &log_key("k")]);
    redis
        .redlock()
        .env("REDLOCK_LOG_MAX", "0")
        .args(["exec", "k", "--", "true"])
        .run()
        .expect(0);
    let after: i64 = redis.query(&["XLEN", &log_key("k")]);
    assert_eq!(before, after);
    // A lock without history: nothing on stdout, a notice on stderr, exit 0.
    let out = redis.redlock().args(["log", "other"]).run().expect(0);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr.contains("no history is recorded for 'other'"),
        "{out}"
    );
}

/// `log` of a name never used says that nothing is recorded and every reason there can be, not
/// only `--log-max 0` (before: "no history for 'never' (none kept with --log-max 0, or a Redis
/// user without XADD)", which blamed a setting nobody used); a history with nothing in the
/// range asked for says so.
#[test]
fn an_empty_listing_says_why() {
    let redis = or_skip!(RedisServer::start());
    let out = redis.redlock().args(["log", "never"]).run().expect(0);
    assert_eq!(out.stdout, "", "{out}");
    assert_eq!(
        out.stderr,
        "redlock: no history is recorded for 'never': it was never used, or its history expired \
         (--meta-ttl after its last use), or its holders kept none (--log-max 0, or a Redis user \
         without XADD)\n",
        "{out}"
    );
    // A history whose events are all older than --since.
    let key = log_key("old");
    let now = redis.now_ms();
    let then = format!("{}-0", now - 3_600_000);
    let at = (now - 3_600_000).to_string();
    redis.query::<()>(&["XADD", &key, &then, "event", "released", "at_ms", &at]);
    let out = redis
        .redlock()
        .args(["log", "old", "--since", "10m"])
        .run()
        .expect(0);
    assert_eq!(out.stdout, "", "{out}");
    assert_eq!(
        out.stderr, "redlock: no events for 'old' in the last 10m\n",
        "{out}"
    );
    // -q silences the notice.
    let out = redis.redlock().args(["-q", "log", "never"]).run().expect(0);
    assert_eq!(out.stderr, "", "{out}");
}

#[test]
fn the_history_expires_with_the_record() {
    let redis = or_skip!(RedisServer::start());
    redis
        .redlock()
        .args(["exec", "k", "--meta-ttl", "1h", "--", "true"])
        .run()
        .expect(0);
    // Both were given the same expiry by the acquisition (the lock's TTL plus the hour); the
    // release leaves them.
    let log = redis.pttl(&log_key("k"));
    let meta = redis.pttl(&meta_key("k"));
    assert!(
        log > 3_500_000 && log <= meta + 1_000,
        "log {log} ms, meta {meta} ms"
    );
}

#[test]
fn follow_prints_new_events_and_stops_on_sigint() {
    let redis = or_skip!(RedisServer::start());
    let token = hold(&redis, "k", "60s");
    let follow = redis
        .redlock()
        .args(["log", "k", "--follow", "--json"])
        .spawn_proc();
    let stdout = || follow_lines(&follow);
    assert!(
        wait_for(|| stdout().len() == 1, HANG),
        "{}",
        follow.stdout()
    );
    // Written after the first read: --follow goes on from the last entry it printed.
    release(&redis, "k", &token);
    assert!(
        wait_for(|| stdout().len() == 2, HANG),
        "{}",
        follow.stdout()
    );
    assert_eq!(stdout()[1]["event"], "released");
    redis
        .redlock()
        .args(["exec", "k", "--", "true"])
        .run()
        .expect(0);
    assert!(
        wait_for(|| stdout().len() == 4, HANG),
        "{}",
        follow.stdout()
    );
    follow.signal(libc::SIGINT);
    let out = follow.finish(HANG);
    assert_eq!(out.code(), 130, "{out}");
}

fn follow_lines(p: &Proc) -> Vec<Value> {
    let out = p.stdout();
    // Only complete lines.
    let complete = &out[..out.rfind('\n').map_or(0, |i| i + 1)];
    parse_lines(complete)
}

#[test]
fn an_exec_that_loses_its_lock_says_so_in_the_history() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let exec = redis
        .redlock()
        .args(["exec", "k", "--", "sh", "-c"])
        .arg(format!("touch {}; exec sleep 60", started.display()))
        .spawn_proc();
    assert!(wait_for(|| started.exists(), HANG), "{}", exec.stderr());
    wait_subscribed(&[&redis], "k");
    redis
        .redlock()
        .args(["release", "k", "--force"])
        .run()
        .expect(0);
    let out = exec.finish(HANG);
    assert_eq!(out.code(), 75, "{out}");
    let got = events(&redis, "k", &[]);
    assert_eq!(kinds(&got), ["acquired", "forced", "lost"], "{got:#?}");
    assert_eq!(got[2]["token"], got[0]["token"]);
    assert_eq!(got[2]["fence"], got[0]["fence"]);
    assert!(
        got[2]["reason"].as_str().unwrap().contains("force"),
        "{:?}",
        got[2]
    );
}

#[test]
fn a_quorum_keeps_the_history_on_its_queue_node() {
    let nodes = or_skip!(Nodes::start(3));
    nodes
        .redlock()
        .args(["exec", "k", "--", "sh", "-c", "exit 4"])
        .run()
        .expect(4);
    let out = nodes.redlock().args(["log", "k", "--json"]).run().ok();
    let got = parse_lines(&out);
    assert_eq!(kinds(&got), ["acquired", "released"], "{out}");
    assert_eq!(got[1]["status"], 4);
    // Every node wrote its own; `log` reads the first URL's.
    for node in nodes.servers() {
        let n: i64 = node.query(&["XLEN", &log_key("k")]);
        assert_eq!(n, 2, "{}", node.url());
    }
}

#[test]
fn a_planted_history_is_shown_escaped_and_never_crashes_log() {
    let redis = or_skip!(RedisServer::start());
    let key = log_key("k");
    redis.query::<()>(&[
        "XADD",
        &key,
        "*",
        "event",
        "acquired\u{1b}[2J",
        "user",
        "x\ny",
        "held_ms",
        "-5",
    ]);
    redis.query::<()>(&["XADD", &key, "*", "odd", "x"]);
    let out = redis.redlock().args(["log", "k"]).run().ok();
    assert!(!out.contains('\u{1b}'), "{out:?}");
    assert_eq!(out.lines().count(), 2, "{out:?}");
    redis.redlock().args(["log", "k", "--json"]).run().expect(0);
    // Another type under the stream's name: an error, not a panic; locks still work.
    redis.query::<()>(&["DEL", &key]);
    redis.query::<()>(&["SET", &key, "x"]);
    let out = redis.redlock().args(["log", "k"]).run();
    assert_ne!(out.code(), 0, "{out}");
    assert_one_error_line(&out);
    redis
        .redlock()
        .args(["exec", "k", "--", "true"])
        .run()
        .expect(0);
}

/// A quorum attempt that its first node grants but the majority refuses is no acquisition: the
/// history and the counters tell only the acquisition the quorum won, with the holder's fence.
#[test]
fn a_quorum_tells_only_the_acquisitions_it_won() {
    let nodes = or_skip!(Nodes::start(3));
    let servers: Vec<&RedisServer> = nodes.servers().collect();
    // Nodes 2 and 3 held by someone else for a moment: node 1 grants each attempt, in vain.
    for s in &servers[1..] {
        s.query::<()>(&["SET", &lock_key("q"), "othertoken", "PX", "60000"]);
    }
    nodes
        .redlock()
        .args(["acquire", "q", "--wait", "1s", "--ttl", "10s"])
        .run()
        .expect(1);
    let first = servers[0];
    let n: i64 = first.query(&["EXISTS", &log_key("q")]);
    let counted = first.meta("q").get("acquisitions").cloned();
    assert_eq!((n, counted), (0, None), "failed attempts were told");
    for s in &servers[1..] {
        s.query::<()>(&["DEL", &lock_key("q")]);
    }
    let fence = nodes
        .redlock()
        .args(["exec", "q", "--", "sh", "-c", "echo $REDLOCK_FENCE"])
        .run()
        .ok();
    for s in &servers {
        let got = events(s, "q", &[]);
        assert_eq!(kinds(&got), ["acquired", "released"], "{}", s.url());
        assert_eq!(got[0]["fence"], fence, "{}", s.url());
        assert_eq!(s.meta("q")["acquisitions"], "1", "{}", s.url());
    }
}

/// `log --follow | head -1`: the reader is gone, and `log` notices while nothing is written.
#[test]
fn follow_ends_when_its_reader_is_gone() {
    let redis = or_skip!(RedisServer::start());
    hold(&redis, "k", "60s");
    let out = redis.sh("redlock log k --follow | head -1").run().expect(0);
    assert!(out.stdout.contains("acquired"), "{out}");
}

/// A renewal keeps the history as long as the record; a key of another type in its place gets
/// no expiry from redlock; `--log-max` is bounded.
#[test]
fn the_history_lives_as_long_as_a_renewed_lock() {
    let redis = or_skip!(RedisServer::start());
    let token = redis
        .redlock()
        .args(["acquire", "k", "--ttl", "1s", "--meta-ttl", "1s"])
        .run()
        .ok();
    redis
        .redlock()
        .args(["extend", "k", &token, "--ttl", "60s", "--meta-ttl", "1s"])
        .run()
        .expect(0);
    let pttl = redis.pttl(&log_key("k"));
    assert!(pttl > 55_000, "{pttl}");

    redis.query::<()>(&["SET", &log_key("p"), "precious"]);
    redis
        .redlock()
        .args(["exec", "p", "--", "true"])
        .run()
        .expect(0);
    assert_eq!(redis.pttl(&log_key("p")), -1);
    assert_eq!(redis.get(&log_key("p")).as_deref(), Some("precious"));

    let out = redis
        .redlock()
        .args([
            "exec",
            "big",
            "--log-max",
            "18446744073709551615",
            "--",
            "true",
        ])
        .run()
        .expect(2);
    assert_one_error_line(&out);
}

/// A history far longer than one page (planted: anyone may write the stream) is listed whole,
/// in order, page by page; `| head` ends it at once.
#[test]
fn a_long_history_is_listed_page_by_page() {
    let redis = or_skip!(RedisServer::start());
    let key = log_key("long");
    redis.query::<()>(&[
        "EVAL",
        "for i = 1, 2500 do redis.call('XADD', KEYS[1], '*', 'event', 'lost', 'reason', \
         tostring(i)) end",
        "1",
        &key,
    ]);
    let got = events(&redis, "long", &[]);
    let reasons: Vec<String> = got
        .iter()
        .map(|e| e["reason"].as_str().unwrap().to_string())
        .collect();
    let expected: Vec<String> = (1..=2500).map(|i| i.to_string()).collect();
    assert_eq!(reasons, expected);
    let out = redis.sh("redlock log long | head -1").run().expect(0);
    assert_eq!(out.stdout.lines().count(), 1, "{out}");
    assert_eq!(events(&redis, "long", &["--limit", "2"]).len(), 2);
}

/// Acquired with `--log-max 0` (no history written, so no expiry set), released with the
/// default 1000: the release's XADD creates the stream and nothing gives it an expiry.
/// (Found by review: a release that left the history's expiry alone made this one forever.)
#[test]
fn a_history_begun_by_a_release_still_expires() {
    let redis = or_skip!(RedisServer::start());
    let token = redis
        .redlock()
        .args(["acquire", "k", "--ttl", "60s", "--log-max", "0"])
        .run()
        .ok();
    assert_eq!(redis.query::<i64>(&["EXISTS", &log_key("k")]), 0);
    redis
        .redlock()
        .args(["release", "k", &token, "--log-max", "1000"])
        .run()
        .expect(0);
    assert_eq!(redis.query::<i64>(&["XLEN", &log_key("k")]), 1);
    let pttl = redis.pttl(&log_key("k"));
    assert!(
        pttl > 0,
        "the history has no expiry (PTTL {pttl}): it outlives its lock forever"
    );
}

/// `exec` that loses its lock tells `lost` with its own --meta-ttl, which resets the history's
/// expiry to that idle time from now. When that is shorter than the new holder's TTL, the
/// history expires under the new holder; its release then re-creates it without expiry.
#[test]
fn a_history_shortened_by_a_lost_report_is_not_recreated_without_expiry() {
    let redis = or_skip!(RedisServer::start());
    let log = log_key("k");
    // A holds; its command runs until exec kills it when the lock is lost.
    let a = redis
        .redlock()
        .args([
            "exec",
            "k",
            "--ttl",
            "10s",
            "--meta-ttl",
            "2s",
            "--",
            "sleep",
            "60",
        ])
        .spawn_proc();
    assert!(wait_for(
        || redis.get(&lock_key("k")).is_some(),
        Duration::from_secs(10)
    ));
    redis
        .redlock()
        .args(["release", "k", "--force"])
        .run()
        .expect(0);
    // B takes it for an hour (no renewal needed).
    let b = hold(&redis, "k", "1h");
    // A finds out and reports `lost` (exit 75, its command killed).
    let out = a.finish(Duration::from_secs(30));
    assert_eq!(out.code(), 75, "{out}");
    // The `lost` write set the history to expire 2 s from then, while B holds for an hour.
    assert!(
        wait_for(
            || redis.query::<i64>(&["EXISTS", &log]) == 0,
            Duration::from_secs(30)
        ),
        "the history did not expire"
    );
    assert!(redis.pttl(&lock_key("k")) > 0, "B still holds the lock");
    release(&redis, "k", &b);
    let pttl = redis.pttl(&log);
    assert!(
        pttl > 0,
        "B's release re-created the history without expiry (PTTL {pttl})"
    );
}

/// One planted future stream ID (`XADD KEY 99999999999999-0 ...`) makes every later ID follow it:
/// dated by their IDs, the later events were in the year 5138, and `--since` listed the planted
/// entry forever. Events are dated by the `at_ms` field the scripts write from TIME, `--since`
/// filters by it (with and without --limit), and an entry without the field (an older version's)
/// is still dated by its ID. An ID at the very end of the ID space, which makes every XADD after
/// it fail, does not stop the history: the events are still recorded.
#[test]
fn a_planted_future_id_neither_dates_nor_hides_events() {
    let redis = or_skip!(RedisServer::start());
    let key = log_key("k");
    let now = redis.now_ms();
    // An older version's entry (no at_ms): a minute ago by its ID.
    redis.query::<()>(&[
        "XADD",
        &key,
        &format!("{}-0", now - 60_000),
        "event",
        "lost",
    ]);
    // The planted one, dated by its ID in the year 5138 and by a field an hour ago.
    redis.query::<()>(&[
        "XADD",
        &key,
        "99999999999999-0",
        "event",
        "forced",
        "at_ms",
        &(now - 3_600_000).to_string(),
    ]);
    for _ in 0..2 {
        redis
            .redlock()
            .args(["exec", "k", "--", "true"])
            .run()
            .expect(0);
    }
    let all = events(&redis, "k", &[]);
    assert_eq!(
        kinds(&all),
        [
            "lost", "forced", "acquired", "released", "acquired", "released"
        ]
    );
    let later = redis.now_ms();
    for e in &all[2..] {
        let at = e["at_ms"].as_i64().unwrap();
        assert!(
            (now - 1000..=later + 1000).contains(&at),
            "dated {at} ({}), not by the server's clock {now}..{later}: {e}",
            e["time"]
        );
        assert!(e["time"].as_str().unwrap().starts_with("20"), "{e}");
    }
    assert_eq!(all[0]["at_ms"].as_i64(), Some(now - 60_000), "{}", all[0]);
    let text = redis.redlock().args(["log", "k"]).run().ok();
    // No date in the year 5138 (a fence or a fingerprint may well contain the digits).
    assert!(!text.contains("5138-"), "{text}");
    // --since by the entries' dates: the planted entry (an hour ago) is out, the old-style one
    // (a minute ago) is in with 2m and out with 30s.
    let want = ["acquired", "released", "acquired", "released"];
    assert_eq!(kinds(&events(&redis, "k", &["--since", "30s"])), want);
    assert_eq!(
        kinds(&events(&redis, "k", &["--since", "30s", "--limit", "10"])),
        want
    );
    assert_eq!(
        kinds(&events(&redis, "k", &["--since", "30s", "--limit", "3"])),
        want[1..]
    );
    assert_eq!(
        kinds(&events(&redis, "k", &["--since", "2m"])),
        ["lost", "acquired", "released", "acquired", "released"]
    );
    // The last possible ID: Redis refuses every XADD after it; the events are recorded still.
    redis.query::<()>(&[
        "XADD",
        &key,
        "18446744073709551615-18446744073709551615",
        "event",
        "forced",
    ]);
    redis
        .redlock()
        .args(["exec", "k", "--", "true"])
        .run()
        .expect(0);
    let after = events(&redis, "k", &["--since", "30s"]);
    assert_eq!(kinds(&after), ["acquired", "released"], "{after:?}");
}
