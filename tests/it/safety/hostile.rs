//! Data planted in Redis by another client, and outputs that cannot be written: what reaches the
//! terminal and the exit status.
//!
//! Any client that can write to the server can set a lock's key or its holder record. Whatever it
//! writes there must never be obeyed by the terminal of whoever looks at the lock (`status`, the
//! "busy" message, `release --force`, the lost-lock message), and one stray key under the prefix
//! must not break `status` for every other lock.

use std::time::Duration;

use crate::common::*;

/// What a hostile holder record carries: an OSC 52 clipboard write, a screen clear, a carriage
/// return that overwrites the line, a right-to-left override, a C1 CSI.
const OSC52: &str = "\u{1b}]52;c;cm0gLXJmIH4=\u{7}";
const CLEAR: &str = "\u{1b}[2J\u{1b}[H";

/// The characters a terminal acts on or reorders text by.
fn assert_inert(text: &str, what: &str) {
    for bad in ['\u{1b}', '\u{7}', '\r', '\u{202e}', '\u{9b}'] {
        assert!(
            !text.contains(bad),
            "{what} passes {bad:?} to the terminal:\n{text:?}"
        );
    }
}

/// Overwrites the holder record of lock `name` with hostile fields.
fn plant_record(redis: &RedisServer, name: &str) {
    redis.query::<()>(&[
        "HSET",
        &meta_key(name),
        "user",
        &format!("root{OSC52}"),
        "host",
        &format!("web1\rEVIL{CLEAR}"),
        "note",
        "deploy \u{202e}hs.toor\u{9b}31m",
        "pid",
        "1\u{1b}[8m",
    ]);
}

#[test]
fn a_planted_holder_record_is_shown_escaped_everywhere() {
    let redis = or_skip!(RedisServer::start());
    hold(&redis, "deploy", "60s");
    plant_record(&redis, "deploy");

    let table = redis.redlock().arg("status").run().expect(0);
    assert_inert(&table.stdout, "status");
    assert!(
        table.stdout.contains("root\\u{1b}]52;c;"),
        "the planted bytes are visible, escaped:\n{table}"
    );
    let named = redis.redlock().args(["status", "deploy"]).run().expect(0);
    assert_inert(&named.stdout, "status KEY");

    let busy = redis
        .redlock()
        .args(["acquire", "deploy", "-n"])
        .run()
        .expect(1);
    assert_inert(&busy.stderr, "the busy message");
    assert!(busy.stderr.contains("\\u{202e}"), "{busy}");

    let forced = redis
        .redlock()
        .args(["release", "deploy", "--force"])
        .run()
        .expect(0);
    assert_inert(&forced.stderr, "release --force");
    assert!(forced.stderr.contains("root\\u{1b}"), "{forced}");

    // Released: the record is the last holder's, shown in the HOLDER cell.
    let last = redis.redlock().args(["status", "deploy"]).run().expect(1);
    assert_inert(&last.stdout, "status of the last holder");
}

#[test]
fn a_planted_lock_value_is_shown_escaped() {
    let redis = or_skip!(RedisServer::start());
    redis.query::<()>(&[
        "SET",
        &lock_key("k"),
        &format!("{CLEAR}{OSC52}"),
        "PX",
        "60000",
    ]);
    for args in [
        &["status"][..],
        &["status", "k", "--show-token"],
        &["status", "--show-token"],
    ] {
        let out = redis.redlock().args(args).run().expect(0);
        assert_inert(&out.stdout, &format!("{args:?}"));
    }
    let busy = redis.redlock().args(["acquire", "k", "-n"]).run().expect(1);
    assert_inert(&busy.stderr, "the busy message");
    let not_owner = redis
        .redlock()
        .args(["release", "k", "0123456789abcdef0123456789abcdef"])
        .run()
        .expect(3);
    assert_inert(&not_owner.stderr, "the not-the-owner error");
}

#[test]
fn the_lost_lock_message_escapes_the_new_holder() {
    let redis = or_skip!(RedisServer::start());
    let run = redis
        .redlock()
        .args(["exec", "job", "--ttl", "3s", "--", "sleep", "60"])
        .spawn_proc();
    assert!(
        wait_for(
            || redis.get(&lock_key("job")).is_some(),
            Duration::from_secs(20)
        ),
        "exec never took the lock"
    );
    // Another token takes the key, with a hostile record of its own.
    redis.query::<()>(&["SET", &lock_key("job"), "intruder", "PX", "60000"]);
    redis.query::<()>(&["HSET", &meta_key("job"), "token", "intruder"]);
    plant_record(&redis, "job");
    let out = run.finish(Duration::from_secs(30)).expect(75);
    assert!(out.stderr.contains("lost the lock"), "{out}");
    assert!(out.stderr.contains("root\\u{1b}"), "{out}");
    assert_inert(&out.stderr, "the lost-lock message");
}

#[test]
fn one_stray_key_under_the_prefix_does_not_break_status() {
    let redis = or_skip!(RedisServer::start());
    let mut con = redis.cli();
    let long = format!("redlock:{{{}}}", "x".repeat(600));
    for key in [
        b"redlock:{}".as_slice(),
        long.as_bytes(),
        b"redlock:{\xff\xfe}",
        b"redlock:{a\x1bb}",
        "redlock:{a\u{202e}b}".as_bytes(),
    ] {
        redis::cmd("SET")
            .arg(key)
            .arg("x")
            .query::<()>(&mut con)
            .unwrap();
    }
    hold(&redis, "alpha", "60s");

    let out = redis.redlock().arg("status").run().expect(0);
    let rows: Vec<&str> = out.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "only the real lock is listed:\n{out}");
    assert!(rows[0].starts_with("alpha "), "{out}");
    assert_inert(&out.stdout, "status");

    let json = redis.redlock().args(["status", "--json"]).run().expect(0);
    let all: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(all.as_array().map(Vec::len), Some(1), "{json}");
}

#[test]
fn a_prefix_must_be_a_namespace_of_its_own() {
    for (prefix, says) in [
        ("", "empty"),
        ("{}", "'{'"),
        ("a{b}:", "'{'"),
        ("locks}", "'{'"),
        ("x\u{202e}:", "direction"),
    ] {
        let out = redlock()
            .args(["--prefix", prefix, "status"])
            .run()
            .expect(2);
        assert_one_error_line(&out);
        assert!(out.stderr.contains(says), "{prefix:?}:\n{out}");
    }
    let long = "p".repeat(257);
    let out = redlock()
        .args(["--prefix", &long, "status"])
        .run()
        .expect(2);
    assert!(out.stderr.contains("limit is 256"), "{out}");
}

/// A planted field of 2 MB (a note, a user, a host, a pid) is cut to 200 characters, ending in
/// `…`, in the table, the busy message, `release --force`'s line and `log`'s lines; `--json`
/// (of `status` and `log`) carries at most 4 KiB of it (`…` included).
#[test]
fn a_planted_field_is_shown_bounded() {
    let redis = or_skip!(RedisServer::start());
    const SHOWN: usize = 200;
    const KEPT: usize = 4096;
    let huge = |c: &str| c.repeat(2 << 20);
    let (note, user, host, pid) = (huge("n"), huge("u"), huge("h"), huge("9"));
    // No line of text holds a run of a field longer than SHOWN characters.
    let bounded = |text: &str, what: &str| {
        for c in ['n', 'u', 'h', '9'] {
            let run = c.to_string().repeat(SHOWN);
            assert!(
                !text.contains(&run),
                "{what}: a field of {c} runs past {SHOWN}"
            );
        }
        assert!(
            text.contains(&format!("{}…", "u".repeat(SHOWN - 1))),
            "{what}: {:.400}",
            text
        );
        assert!(text.len() < 16 * 1024, "{what}: {} bytes", text.len());
    };
    let plant = |name: &str| {
        redis.query::<()>(&[
            "HSET",
            &meta_key(name),
            "user",
            &user,
            "host",
            &host,
            "note",
            &note,
            "pid",
            &pid,
        ]);
    };
    hold(&redis, "big", "60s");
    plant("big");
    let table = redis.redlock().args(["status", "big"]).run().expect(0);
    bounded(&table.stdout, "status");
    assert!(
        table
            .stdout
            .contains(&format!("{}…", "n".repeat(SHOWN - 1))),
        "{table:.400}"
    );
    let all = redis.redlock().arg("status").run().expect(0);
    bounded(&all.stdout, "status of every lock");
    let busy = redis
        .redlock()
        .args(["acquire", "big", "-n"])
        .run()
        .expect(1);
    bounded(&busy.stderr, "the busy message");
    let json = redis
        .redlock()
        .args(["status", "big", "--json"])
        .run()
        .expect(0);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let v = if v.is_array() { v[0].clone() } else { v };
    for field in [&v["note"], &v["holder"]["user"], &v["holder"]["host"]] {
        let s = field.as_str().unwrap_or_else(|| panic!("{v:.400}"));
        assert!(s.len() <= KEPT && s.ends_with('…'), "{} bytes", s.len());
        assert!(s.len() > KEPT - 8, "{} bytes: more may be carried", s.len());
    }
    let forced = redis
        .redlock()
        .args(["release", "big", "--force"])
        .run()
        .expect(0);
    bounded(&forced.stderr, "release --force");
    // The history: a planted entry with the same fields.
    let log = format!("{}:log", lock_key("big"));
    redis.query::<()>(&[
        "XADD", &log, "*", "event", "acquired", "token", "0123abcd", "user", &user, "host", &host,
        "pid", &pid, "note", &note,
    ]);
    let lines = redis.redlock().args(["log", "big"]).run().ok();
    bounded(&lines, "log");
    let json = redis.redlock().args(["log", "big", "--json"]).run().ok();
    for line in json.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for (k, field) in v.as_object().unwrap() {
            let len = field.as_str().map_or(0, str::len);
            assert!(len <= KEPT, "log --json: {k} is {len} bytes");
        }
    }
}

/// One rule for a lock name and a prefix: a zero-width space makes a name look like another, a
/// line separator breaks a line where none shows; both are refused as a direction character is,
/// with exit 2 and one line that names the character (escaped) rather than printing it. Refused
/// before any connection: no server is needed.
#[test]
fn a_lock_name_has_the_rule_of_a_prefix() {
    for (c, says) in [
        ('\u{200b}', "invisible character \\u{200b}"),
        ('\u{2028}', "line or paragraph separator \\u{2028}"),
        ('\u{202e}', "invisible direction character \\u{202e}"),
        ('\u{1b}', "control character \\u{1b}"),
    ] {
        let name = format!("ad{c}min");
        let prefix = format!("app{c}:");
        for (what, args) in [
            ("a lock name", vec!["acquire", name.as_str()]),
            ("a lock name", vec!["status", name.as_str()]),
            (
                "a pool's name",
                vec!["acquire", "k", "--pool", name.as_str()],
            ),
            ("a prefix", vec!["--prefix", prefix.as_str(), "status"]),
        ] {
            let out = redlock()
                .args(["--url", &format!("redis://127.0.0.1:{}", closed_port())])
                .args(&args)
                .run()
                .expect(2);
            assert!(
                !out.stderr.contains(c),
                "{what} with {c:?} printed as is:\n{out}"
            );
            assert_one_error_line(&out);
            assert!(
                out.stderr.contains(says),
                "{what} with {c:?} not refused by name:\n{out}"
            );
        }
    }
}

#[test]
fn a_reservation_value_is_not_a_token() {
    let redis = or_skip!(RedisServer::start());
    let reserved = "~0123456789abcdef0123456789abcdef";
    redis.query::<()>(&["SET", &lock_key("k"), reserved, "PX", "60000"]);
    for cmd in [
        &["release", "k", reserved][..],
        &["extend", "k", reserved, "--ttl", "10s"],
    ] {
        let out = redis.redlock().args(cmd).run().expect(2);
        assert_one_error_line(&out);
        assert!(out.stderr.contains("cannot be a token"), "{out}");
    }
    assert_eq!(
        redis.get(&lock_key("k")).as_deref(),
        Some(reserved),
        "the waiter's reservation stays"
    );
}

/// A full disk is not a closed pipe: exit 74 (EX_IOERR), and a token nobody received is given
/// back.
#[test]
fn an_output_that_cannot_be_written_exits_74() {
    let redis = or_skip!(RedisServer::start());
    if !std::path::Path::new("/dev/full").exists() {
        return;
    }
    let out = redis.sh(r#"redlock acquire k >/dev/full"#).run().expect(74);
    assert_one_error_line(&out);
    assert!(out.stderr.contains("released 'k' again"), "{out}");
    assert_eq!(redis.get(&lock_key("k")), None, "the lock was given back");

    hold(&redis, "k", "60s");
    let out = redis.sh("redlock status >/dev/full").run().expect(74);
    assert_one_error_line(&out);
    assert!(out.stderr.contains("cannot write to stdout"), "{out}");
    for args in ["--help", "--version", "acquire --help"] {
        let out = redis
            .sh(&format!("redlock {args} >/dev/full"))
            .run()
            .expect(74);
        assert_one_error_line(&out);
    }
    // Help for a missing subcommand goes to stderr: a usage error whatever stdout is.
    redis.sh("redlock 2>/dev/full").run().expect(2);
    // A stdout open for reading only: the token would be swallowed; refused before locking.
    let out = redis.sh("redlock acquire ro 1</dev/null").run().expect(2);
    assert_one_error_line(&out);
    assert_eq!(redis.get(&lock_key("ro")), None, "{out}");
    // A reader that stops early is not an error.
    let out = redis
        .sh("(redlock --help; echo \"rc=$?\" >&2) | head -c1 >/dev/null")
        .run()
        .expect(0);
    assert!(out.stderr.contains("rc=0"), "{out}");
}

/// The ACL rules docs/security.md gives for a user that may only touch redlock's keys and channels.
const DOCUMENTED_ACL: &str = "resetkeys ~redlock:* resetchannels &redlock:* &redlock:{*}:watch \
-@all +@connection \
+eval +evalsha +script|load +scan +blpop +subscribe +wait +get +set +del +exists +pttl +pexpire +persist +hget +hset \
+hdel +hmget +hgetall +hincrby +zadd +zrem +zrange +zscore +zcard +lpush +publish +time +info \
+xadd +type +xrange +xrevrange +xread +psubscribe +pubsub|numsub +multi +exec";

#[test]
fn the_documented_acl_confines_redlock_to_its_prefix() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/security.md"))
        .unwrap()
        .replace("\\\n", " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        doc.contains(&format!("ACL SETUSER locks on >PASSWORD {DOCUMENTED_ACL}")),
        "the ACL example of docs/security.md differs from the one tested here"
    );
    let redis = or_skip!(RedisServer::start());
    let mut rule = vec!["ACL", "SETUSER", "locks", "on", ">pw"];
    rule.extend(DOCUMENTED_ACL.split(' '));
    redis.query::<()>(&rule);
    let url = format!("redis://locks:pw@127.0.0.1:{}", redis.port());
    let with_user = || {
        let mut cmd = redlock();
        cmd.env("REDLOCK_URL", &url);
        cmd
    };
    // Everything redlock does works with these rules alone.
    let token = with_user().args(["acquire", "k"]).run().ok();
    with_user().args(["acquire", "k", "-n"]).run().expect(1);
    with_user()
        .args(["extend", "k", &token, "--ttl", "10s"])
        .run()
        .expect(0);
    with_user().arg("status").run().expect(0);
    // `status` of every lock reads them in one MULTI/EXEC transaction (lock.rs's
    // inspect_batch), not with one script call each: without `+multi +exec` the server refused
    // the transaction and each lock was read alone, silently.
    let others: Vec<(&str, String)> = ["a", "b", "c"]
        .into_iter()
        .map(|name| (name, hold(&redis, name, "60s")))
        .collect();
    let (multi, scripts) = (redis.calls("multi"), redis.script_calls());
    let all = with_user().arg("status").run().ok();
    assert_eq!(all.lines().count(), 5, "{all}");
    assert_eq!(
        (redis.calls("multi") - multi, redis.script_calls() - scripts),
        (1, 0),
        "status of four locks did not read them in one transaction"
    );
    for (name, token) in &others {
        release(&redis, name, token);
    }
    let waiter = with_user()
        .args(["acquire", "k", "--wait", "30s"])
        .spawn_proc();
    assert!(
        wait_for(|| queue(&redis, "k").len() == 1, Duration::from_secs(20)),
        "the waiter never queued"
    );
    with_user().args(["release", "k", &token]).run().expect(0);
    let next = waiter.finish(Duration::from_secs(30)).ok();
    with_user().args(["release", "k", &next]).run().expect(0);
    with_user()
        .args(["exec", "k", "--ttl", "3s", "--", "true"])
        .run()
        .expect(0);
    // The history was written, and is read, with these rules: 3 holds, each acquired and released.
    let log = with_user().args(["log", "k", "--json"]).run().ok();
    assert_eq!(log.lines().count(), 6, "{log}");
    // Every lock can be watched (Redis 7 lets a user PSUBSCRIBE only to a pattern granted as
    // written: without `&redlock:{*}:watch` this exited 77).
    let mut watch = with_user()
        .args(["status", "--watch", "--json"])
        .spawn_proc();
    watch.wait_for_stderr("listening for changes", Duration::from_secs(20));
    with_user()
        .args(["exec", "w", "--", "true"])
        .run()
        .expect(0);
    assert!(
        wait_for(
            || watch.stdout().contains("\"released\""),
            Duration::from_secs(20)
        ),
        "the watcher heard nothing:\n{}",
        watch.stderr()
    );
    watch.signal(libc::SIGINT);
    watch.finish(Duration::from_secs(20)).expect(130);
    // A lock key someone set without a TTL: the waiter's script keeps the record alive with
    // PERSIST (the documented list must have it: this exited 70 without).
    redis.query::<()>(&["SET", &lock_key("stuck"), "x"]);
    with_user()
        .args(["acquire", "stuck", "-w", "1s"])
        .run()
        .expect(1);
    // Nothing else: another prefix, or another application's keys, are refused (77).
    let out = with_user()
        .args(["--prefix", "app:", "acquire", "k"])
        .run()
        .expect(77);
    assert_one_error_line(&out);
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let err = redis::cmd("SET")
        .arg("session:1")
        .arg("x")
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(err.to_string().contains("NoPerm"), "{err}");
}

/// A user that may not run INFO (an ACL, or a renamed command): a quorum's restart check and the
/// first attempt's server check are skipped, the lock still works; a command a script may not
/// run is an ACL refusal (77), not an internal error (70).
#[test]
fn scripts_under_a_strict_acl_work_or_say_permission() {
    let a = or_skip!(RedisServer::start());
    let b = or_skip!(RedisServer::start());
    let mut rule = vec!["ACL", "SETUSER", "locks", "on", ">pw"];
    rule.extend(DOCUMENTED_ACL.split(' '));
    rule.push("-info");
    for server in [&a, &b] {
        server.query::<()>(&rule);
    }
    let urls = format!(
        "redis://locks:pw@127.0.0.1:{},redis://locks:pw@127.0.0.1:{}",
        a.port(),
        b.port()
    );
    let run = |args: &[&str]| {
        let mut cmd = redlock();
        cmd.env("REDLOCK_URL", &urls).args(args);
        cmd.run()
    };
    let token = run(&["acquire", "k"]).ok();
    run(&["release", "k", &token]).expect(0);
    run(&["exec", "k", "--", "true"]).expect(0);

    // No HSET: the attempt cannot record its holder.
    for server in [&a, &b] {
        server.query::<()>(&["ACL", "SETUSER", "locks", "-hset"]);
    }
    let out = run(&["acquire", "k"]).expect(77);
    assert_one_error_line(&out);
}
