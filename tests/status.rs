//! `redlock status`: the table, the JSON, what is shown of tokens, and the exit status.

mod common;

use common::*;
use serde_json::Value;

fn acquire(redis: &RedisServer, args: &[&str]) -> String {
    redis.redlock().arg("acquire").args(args).run().ok()
}

/// A server where KEYS is disabled: `status` must find locks with SCAN.
fn server_without_keys_command() -> Option<RedisServer> {
    RedisServer::builder()
        .arg("--rename-command")
        .arg("KEYS")
        .arg("")
        .start()
}

/// The text of the row's cell that starts under `column` in the header.
fn cell<'a>(header: &str, row: &'a str, column: &str) -> &'a str {
    let at = header
        .find(column)
        .unwrap_or_else(|| panic!("no {column} in {header}"));
    assert!(
        at == 0 || row[..at].ends_with("  "),
        "column {column} is not aligned:\n{header}\n{row}"
    );
    row[at..].split("  ").next().unwrap()
}

#[test]
fn status_lists_every_held_lock_as_an_aligned_table() {
    let Some(redis) = server_without_keys_command() else {
        return;
    };
    let beta = acquire(
        &redis,
        &["beta", "--note", "deploy to prod", "--ttl", "90s"],
    );
    let alpha = acquire(&redis, &["alpha", "--note", "backup"]);
    let gone = acquire(&redis, &["gamma"]);
    redis
        .redlock()
        .args(["release", "gamma", &gone])
        .run()
        .expect(0);
    acquire(&redis, &["--prefix", "other:", "delta"]);
    redis.query::<()>(&["SET", "redlock:unrelated", "x"]);

    let out = redis.redlock().arg("status").run().expect(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "header, alpha, beta (sorted):\n{out}");
    let header = lines[0];
    assert!(header.starts_with("LOCK "), "{out}");
    let me = format!("(pid {})", std::process::id());
    for (row, name, token, note, fence) in [
        (lines[1], "alpha", &alpha, "backup", "1"),
        (lines[2], "beta", &beta, "deploy to prod", "1"),
    ] {
        assert_eq!(cell(header, row, "LOCK"), name, "{out}");
        assert_eq!(cell(header, row, "STATE"), "held", "{out}");
        let holder = cell(header, row, "HOLDER");
        assert!(holder.contains('@') && holder.ends_with(&me), "{out}");
        assert_eq!(cell(header, row, "FENCE"), fence, "{out}");
        assert_eq!(cell(header, row, "TOKEN"), &token[..8], "{out}");
        assert_eq!(cell(header, row, "NOTE"), note, "{out}");
        assert!(cell(header, row, "TTL").ends_with('s'), "{out}");
        assert_ne!(cell(header, row, "ACQUIRED"), "-", "{out}");
        assert_ne!(cell(header, row, "HELD"), "-", "{out}");
        assert!(
            !out.stdout.contains(token.as_str()),
            "whole token shown:\n{out}"
        );
    }

    let out = redis
        .redlock()
        .args(["status", "--show-token"])
        .run()
        .expect(0);
    assert!(
        out.stdout.contains(&alpha) && out.stdout.contains(&beta),
        "{out}"
    );

    let out = redis
        .redlock()
        .args(["status", "--prefix", "other:"])
        .run()
        .expect(0);
    assert_eq!(out.stdout.lines().count(), 2, "{out}");
    assert!(
        out.stdout.lines().nth(1).unwrap().starts_with("delta "),
        "{out}"
    );
}

#[test]
fn status_finds_locks_beyond_one_scan_page() {
    let Some(redis) = server_without_keys_command() else {
        return;
    };
    // Locks written directly (no owner record), more than one SCAN batch.
    let mut con = redis.cli();
    let mut pipe = redis::pipe();
    for i in 0..2500 {
        pipe.cmd("SET")
            .arg(lock_key(&format!("job-{i:04}")))
            .arg("t")
            .arg("PX")
            .arg(600_000);
        pipe.cmd("SET").arg(format!("noise:{i}")).arg("x");
    }
    pipe.query::<()>(&mut con).unwrap();
    let out = redis.redlock().args(["status", "--json"]).run().expect(0);
    let all: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(all.len(), 2500, "every lock once");
    assert_eq!(all[0]["key"], "job-0000");
    assert_eq!(all[2499]["key"], "job-2499");
    assert_eq!(all[0]["holder"], Value::Null, "no record: no holder");
}

#[test]
fn status_of_named_locks_exits_1_when_one_is_free() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    acquire(&redis, &["a"]);
    acquire(&redis, &["b"]);
    redis.redlock().args(["status", "a"]).run().expect(0);
    let out = redis.redlock().args(["status", "a", "b"]).run().expect(0);
    assert_eq!(out.stdout.lines().count(), 3, "{out}");

    let out = redis
        .redlock()
        .args(["status", "a", "free"])
        .run()
        .expect(1);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(cell(lines[0], lines[2], "LOCK"), "free");
    assert_eq!(cell(lines[0], lines[2], "STATE"), "free");
    assert_eq!(cell(lines[0], lines[2], "HOLDER"), "-");
    redis.redlock().args(["status", "free"]).run().expect(1);
    // Looking writes nothing.
    assert_eq!(redis.dbsize(), 4);
}

#[test]
fn status_json_has_one_object_per_lock() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let token = acquire(&redis, &["a", "--note", "nightly", "--ttl", "60s"]);
    let out = redis
        .redlock()
        .args(["status", "a", "--json"])
        .run()
        .expect(0);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let [a] = v.as_array().unwrap().as_slice() else {
        panic!("{out}");
    };
    assert_eq!(a["key"], "a");
    assert_eq!(a["held"], true);
    assert_eq!(a["holder"]["pid"], std::process::id(), "{a}");
    assert!(
        a["holder"]["user"].is_string() && a["holder"]["host"].is_string(),
        "{a}"
    );
    assert_eq!(a["note"], "nightly");
    assert_eq!(a["fence"], 1);
    assert_eq!(a["token_fingerprint"], &token[..8]);
    assert!(
        a.get("token").is_none(),
        "whole token without --show-token: {a}"
    );
    let ttl = a["ttl_ms"].as_i64().unwrap();
    assert!((50_000..=60_000).contains(&ttl), "{a}");
    assert!(a["held_for_ms"].as_i64().unwrap() < 10_000, "{a}");
    humantime::parse_rfc3339(a["acquired_at"].as_str().unwrap()).unwrap();
    assert!(!out.stdout.contains(&token), "{out}");

    let out = redis
        .redlock()
        .args(["status", "--json", "--show-token"])
        .run()
        .expect(0);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v[0]["token"], token.as_str());
    assert!(v[0].get("token_fingerprint").is_none(), "{v}");

    let out = redis
        .redlock()
        .args(["status", "--json", "a", "free"])
        .run()
        .expect(1);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v[1]["key"], "free");
    assert_eq!(v[1]["held"], false);
    assert_eq!(v[1]["holder"], Value::Null);
    assert_eq!(v[1]["ttl_ms"], Value::Null);
}

#[test]
fn status_without_locks_says_so_on_stderr() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let out = redis.redlock().arg("status").run().expect(0);
    assert_eq!(out.stdout, "");
    assert!(out.stderr.contains("no locks"), "{out}");
    let out = redis.redlock().args(["-q", "status"]).run().expect(0);
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("", ""),
        "{out}"
    );
    let out = redis.redlock().args(["status", "--json"]).run().expect(0);
    assert_eq!(out.stdout.trim(), "[]");
}
