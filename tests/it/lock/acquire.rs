//! `redlock acquire`: what it prints, what it writes to Redis, and how it waits for a busy lock.

use std::time::{Duration, SystemTime};

use crate::common::*;

fn acquire(redis: &RedisServer, args: &[&str]) -> String {
    redis.redlock().arg("acquire").args(args).run().ok()
}

#[test]
fn acquire_prints_the_token_and_writes_lock_and_owner_record() {
    let redis = or_skip!(RedisServer::start());
    let out = redis.redlock().args(["acquire", "deploy"]).run().expect(0);
    let token = out.stdout.strip_suffix('\n').unwrap_or_default();
    assert!(is_token(token), "stdout is not the token alone:\n{out}");
    assert_eq!(out.stderr, "", "acquire is silent on success");

    assert_eq!(redis.get(&lock_key("deploy")).as_deref(), Some(token));
    let pttl = redis.pttl(&lock_key("deploy"));
    assert!(
        (25_000..=30_000).contains(&pttl),
        "default TTL is 30s: {pttl}"
    );
    // Meta (fence counter, owner record) expires 30 days (--meta-ttl) after the lock.
    let meta_pttl = redis.pttl(&meta_key("deploy"));
    const DAYS_30: i64 = 30 * 24 * 3600 * 1000;
    assert!(
        (DAYS_30 + 20_000..=DAYS_30 + 30_000).contains(&meta_pttl),
        "meta's PTTL: {meta_pttl}"
    );
    assert_eq!(redis.dbsize(), 2, "{:?}", redis.keys());

    let meta = redis.meta("deploy");
    // The first fence of a lock is the server's clock in microseconds at the acquisition.
    let fence: i64 = meta["fence"].parse().unwrap();
    assert_eq!(
        fence / 1000,
        meta["acquired_ms"].parse::<i64>().unwrap(),
        "{meta:?}"
    );
    assert_eq!(meta["token"], token);
    assert_eq!(meta["ttl_ms"], "30000");
    // The test process is acquire's parent: it is the "script" that holds the lock.
    assert_eq!(meta["pid"], std::process::id().to_string());
    let me = std::env::current_exe().unwrap();
    let me = me.file_name().unwrap().to_string_lossy();
    assert!(
        meta["note"].contains(&*me),
        "note is our command line: {meta:?}"
    );
    let acquired: i64 = meta["acquired_ms"].parse().unwrap();
    assert!((redis.now_ms() - acquired).abs() < 10_000, "{meta:?}");
}

#[test]
fn the_owner_is_the_calling_script() {
    let redis = or_skip!(RedisServer::start());
    let script = "redlock acquire job --note 'nightly backup' >/dev/null || exit 9
                  redlock acquire job2 >/dev/null || exit 9
                  echo $$; id -un; uname -n";
    let out = redis.sh(script).run().ok();
    let [pid, user, host] = out.lines().collect::<Vec<_>>()[..] else {
        panic!("{out}");
    };
    let meta = redis.meta("job");
    assert_eq!(meta["pid"], pid, "pid is the calling script's");
    assert_eq!(meta["user"], user);
    assert_eq!(meta["host"], host);
    assert_eq!(meta["note"], "nightly backup");
    let note = &redis.meta("job2")["note"];
    assert!(
        note.starts_with("sh -c"),
        "default note is the script's command line: {note}"
    );
}

#[test]
fn ttl_sets_the_expiry_and_a_bare_number_means_seconds() {
    let redis = or_skip!(RedisServer::start());
    acquire(&redis, &["a", "--ttl", "1500ms"]);
    acquire(&redis, &["b", "--ttl", "5"]);
    acquire(&redis, &["c", "--ttl", "1m30s"]);
    let a = redis.pttl(&lock_key("a"));
    let b = redis.pttl(&lock_key("b"));
    let c = redis.pttl(&lock_key("c"));
    assert!((500..=1500).contains(&a), "1500ms: {a}");
    assert!((3000..=5000).contains(&b), "5 (seconds): {b}");
    assert!((85_000..=90_000).contains(&c), "1m30s: {c}");
    assert_eq!(redis.meta("b")["ttl_ms"], "5000");
}

#[test]
fn format_env_is_eval_able_and_json_is_one_object() {
    let redis = or_skip!(RedisServer::start());
    // A key that needs quoting survives the round trip through eval.
    let script = r#"eval "$(redlock acquire "it's mine" --format env)" || exit 9
                    echo "$REDLOCK_KEY|$REDLOCK_TOKEN|$REDLOCK_FENCE"
                    export REDLOCK_TOKEN
                    redlock release "$REDLOCK_KEY""#;
    let out = redis.sh(script).run().ok();
    let [key, token, fence] = out.split('|').collect::<Vec<_>>()[..] else {
        panic!("{out}");
    };
    assert_eq!(key, "it's mine");
    assert!(is_token(token), "{out}");
    let fence: i64 = fence.parse().unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(fence.to_string(), redis.meta("it's mine")["fence"]);
    assert_eq!(redis.get(&lock_key("it's mine")), None, "released via env");

    let json = acquire(&redis, &["it's mine", "--format", "json", "--ttl", "10s"]);
    assert_eq!(json.lines().count(), 1, "one line: {json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["key"], "it's mine");
    assert!(v["fence"].as_i64().unwrap() > fence, "{v} after {fence}");
    assert_eq!(v["ttl_ms"], 10_000, "{v}");
    let token = v["token"].as_str().unwrap();
    assert_eq!(redis.get(&lock_key("it's mine")).as_deref(), Some(token));
    let at = humantime::parse_rfc3339(v["acquired_at"].as_str().unwrap()).unwrap();
    let skew = SystemTime::now()
        .duration_since(at)
        .unwrap_or_else(|e| e.duration());
    assert!(skew < Duration::from_secs(10), "acquired_at {v}");

    let plain = redis
        .redlock()
        .args(["acquire", "other", "--format", "token"])
        .run()
        .expect(0);
    assert!(is_token(plain.stdout.trim_end()) && plain.stdout.ends_with('\n'));
}

#[test]
fn a_busy_lock_with_no_wait_exits_1_and_names_the_holder() {
    let redis = or_skip!(RedisServer::start());
    let token = acquire(&redis, &["db", "--note", "schema migration"]);
    let fence = redis.meta("db")["fence"].clone();
    let out = redis
        .redlock()
        .args(["acquire", "db", "-n"])
        .run()
        .expect(1);
    assert_eq!(out.stdout, "", "no token when busy");
    assert_one_error_line(&out);
    let pid = std::process::id().to_string();
    for needle in ["busy", "schema migration", &format!("(pid {pid})")] {
        assert!(out.stderr.contains(needle), "missing {needle:?}:\n{out}");
    }
    assert!(
        !out.stderr.contains(&token),
        "the token is not shown:\n{out}"
    );

    // The long form, too.
    redis
        .redlock()
        .args(["acquire", "db", "--no-wait"])
        .run()
        .expect(1);
    // A failed attempt changes nothing: same token, no fence burned, no extra key.
    assert_eq!(redis.get(&lock_key("db")).as_deref(), Some(&*token));
    assert_eq!(redis.meta("db")["fence"], fence);
    assert_eq!(redis.dbsize(), 2);
}

#[test]
fn conflict_exit_code_overrides_1() {
    let redis = or_skip!(RedisServer::start());
    acquire(&redis, &["k"]);
    let acq = |args: &[&str]| redis.redlock().arg("acquire").arg("k").args(args).run();
    acq(&["-n", "-E", "42"]).expect(42);
    acq(&["-n", "--conflict-exit-code", "7"]).expect(7);
    acq(&["-w", "100ms", "-E", "9"]).expect(9);
    // Acquiring is still 0, whatever -E says.
    redis
        .redlock()
        .args(["acquire", "free", "-n", "-E", "42"])
        .run()
        .expect(0);
}

#[test]
fn quiet_silences_the_busy_message() {
    let redis = or_skip!(RedisServer::start());
    acquire(&redis, &["k"]);
    let out = redis
        .redlock()
        .args(["-q", "acquire", "k", "-n"])
        .run()
        .expect(1);
    assert_eq!(out.stderr, "", "{out}");
    let out = redis
        .redlock()
        .args(["acquire", "k", "-n", "--quiet"])
        .run()
        .expect(1);
    assert_eq!(out.stderr, "", "{out}");
}

#[test]
fn wait_gives_up_after_its_bound() {
    let redis = or_skip!(RedisServer::start());
    acquire(&redis, &["k", "--ttl", "60s"]);
    let out = redis
        .redlock()
        .args(["acquire", "k", "-w", "700ms"])
        .run()
        .expect(1);
    assert!(
        out.elapsed >= Duration::from_millis(700) && out.elapsed < Duration::from_secs(5),
        "--wait 700ms: {out}"
    );
    assert!(out.stderr.contains("busy"), "{out}");
    // A bare number is seconds.
    let out = redis
        .redlock()
        .args(["acquire", "k", "--wait", "1"])
        .run()
        .expect(1);
    assert!(
        out.elapsed >= Duration::from_secs(1) && out.elapsed < Duration::from_secs(6),
        "--wait 1: {out}"
    );
}

#[test]
fn a_waiter_gets_the_lock_when_the_holder_releases() {
    let redis = or_skip!(RedisServer::start());
    let first = acquire(&redis, &["k", "--ttl", "60s"]);
    let first_fence: i64 = redis.meta("k")["fence"].parse().unwrap();
    let mut waiter = redis
        .redlock()
        .args(["-v", "acquire", "k", "--wait", "30s"])
        .spawn_proc();
    // -v logs each attempt: the first one has failed once this line appears.
    waiter.wait_for_stderr("acquire on", Duration::from_secs(10));
    assert!(
        waiter.running(),
        "the waiter gave up early:\n{}",
        waiter.stderr()
    );
    redis
        .redlock()
        .args(["release", "k", &first])
        .run()
        .expect(0);
    let out = waiter.finish(Duration::from_secs(10)).expect(0);
    let second = out.stdout.trim_end();
    assert!(is_token(second) && second != first, "{out}");
    assert_eq!(redis.get(&lock_key("k")).as_deref(), Some(second));
    let fence: i64 = redis.meta("k")["fence"].parse().unwrap();
    assert!(fence > first_fence, "fence {fence} after {first_fence}");
}

/// A waiter blocks instead of polling. What the design needs for a 3s wait behind a 60s lock,
/// with `BLOCK_CAP` = 3s: a busy attempt that queues it, one BLPOP (ended by its own clock), one
/// more attempt when the wait runs out, leaving the queue, and reading the holder for the
/// message: 4 script runs and 1 BLOCK. Each of the two scripts may first be refused (NOSCRIPT on
/// a fresh server) and loaded. Every command counts, those the scripts run inside included:
/// the 4 script runs make about 60 of them in all (the server check of each connection's first
/// attempt reads INFO, the meta record's expiry is refreshed, and a script that tells a change
/// first asks whether anyone listens); polling every 100ms would make hundreds.
#[test]
fn waiting_does_not_hammer_redis() {
    let redis = or_skip!(RedisServer::start());
    acquire(&redis, &["k", "--ttl", "60s"]);
    let _: String = redis.query(&["CONFIG", "RESETSTAT"]);
    redis
        .redlock()
        .args(["acquire", "k", "-w", "3s"])
        .run()
        .expect(1);
    let info: String = redis.query(&["INFO", "commandstats"]);
    // (name, calls, failed calls) per command, without our own CONFIG RESETSTAT (INFO counts
    // itself only after it replied).
    let stats: Vec<(String, u64, u64)> = info
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .filter(|(name, _)| *name != "config|resetstat")
        .map(|(name, fields)| {
            let field = |f: &str| -> u64 {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(f)?.strip_prefix('='))
                    .map_or(0, |v| v.parse().unwrap())
            };
            (name.to_string(), field("calls"), field("failed_calls"))
        })
        .collect();
    let calls = |names: &[&str]| -> (u64, u64) {
        stats
            .iter()
            .filter(|(n, ..)| names.contains(&n.as_str()))
            .fold((0, 0), |(c, f), (_, dc, df)| (c + dc, f + df))
    };
    let (scripts, refused) = calls(&["eval", "evalsha"]);
    let total: u64 = stats.iter().map(|(_, c, _)| c).sum();
    let shown = format!("{stats:#?}");
    assert_eq!(
        calls(&["blpop"]).0,
        1,
        "one BLPOP per 3s of waiting:\n{shown}"
    );
    assert!(refused <= 2, "{shown}");
    assert_eq!(scripts - refused, 4, "2 attempts, leave, inspect:\n{shown}");
    assert!(total <= 70, "{total} commands while waiting 3s:\n{shown}");
}

/// A signal while waiting: exit 128+N at once, and nothing of the waiter's left in Redis.
fn interrupt_a_waiter(sig: i32) {
    let redis = or_skip!(RedisServer::start());
    let token = acquire(&redis, &["k", "--ttl", "60s"]);
    let pttl = redis.pttl(&lock_key("k"));
    let fence = redis.meta("k")["fence"].clone();
    let mut waiter = redis.redlock().args(["-v", "acquire", "k"]).spawn_proc();
    waiter.wait_for_stderr("acquire on", Duration::from_secs(10));
    let sent = std::time::Instant::now();
    waiter.signal(sig);
    let out = waiter.finish(Duration::from_secs(10)).expect(128 + sig);
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "took {:?} to stop:\n{out}",
        sent.elapsed()
    );
    assert_eq!(out.stdout, "", "{out}");
    assert!(out.stderr.contains("gave up"), "{out}");
    // The holder's lock is untouched and the waiter left nothing.
    assert_eq!(redis.keys(), [lock_key("k"), meta_key("k")]);
    assert_eq!(redis.get(&lock_key("k")), Some(token.clone()));
    assert_eq!(redis.meta("k")["token"], token);
    assert_eq!(redis.meta("k")["fence"], fence, "a fence was burned");
    assert!(redis.pttl(&lock_key("k")) <= pttl);
}

#[test]
fn sigint_while_waiting_exits_130() {
    interrupt_a_waiter(libc::SIGINT);
}

#[test]
fn sigterm_while_waiting_exits_143() {
    interrupt_a_waiter(libc::SIGTERM);
}

#[test]
fn unusual_lock_names_round_trip() {
    let redis = or_skip!(RedisServer::start());
    let longest = "n".repeat(512);
    for name in [
        "déploiement €",
        "a}b{c",
        "with space",
        "glob*?[x]",
        longest.as_str(),
    ] {
        let token = acquire(&redis, &[name]);
        assert_eq!(redis.get(&lock_key(name)), Some(token.clone()), "{name}");
        let out = redis.redlock().args(["status", "--json"]).run().expect(0);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(v[0]["key"], name, "{out}");
        redis
            .redlock()
            .args(["release", name, &token])
            .run()
            .expect(0);
    }
}

#[test]
fn a_token_nobody_can_read_is_released_again() {
    let redis = or_skip!(RedisServer::start());
    // stdout is a pipe whose reader is gone: the token cannot be delivered, so nobody could ever
    // release the lock.
    // A close-on-exec pipe: no process another test starts meanwhile may hold its reader.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = redis
        .redlock()
        .args(["acquire", "k"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // As if SIGPIPE had ended it, after giving the lock back.
    assert_eq!(out.status.code(), Some(128 + libc::SIGPIPE), "{stderr}");
    assert!(
        stderr.starts_with("redlock: ")
            && stderr.lines().count() == 1
            && stderr.contains("released 'k' again"),
        "{stderr}"
    );
    // The lock was taken (a fence was handed out) and released, not just never taken.
    assert!(redis.meta("k").contains_key("fence"), "{stderr}");
    assert_eq!(
        redis.keys(),
        [meta_key("k")],
        "a lock nobody holds was left"
    );
}

/// A closed stdout (`>&-`) is known before anything is taken: refused as a usage error, and
/// Redis never sees an attempt (no fence counted, no key at all).
#[test]
fn a_closed_stdout_is_refused_before_the_lock_is_taken() {
    let redis = or_skip!(RedisServer::start());
    let out = redis.sh("redlock acquire k >&-").run();
    assert_one_error_line(&out);
    assert!(out.stderr.contains("stdout is closed"), "{out}");
    let out = out.expect(2);
    assert_eq!(redis.keys(), Vec::<String>::new(), "{out}");
    // Control: the same command with stdout open takes the lock.
    redis.sh("redlock acquire k >/dev/null").run().expect(0);
    assert!(redis.meta("k").contains_key("fence"));
}

/// Exit 70 is for a reply redlock cannot make sense of: here a list where the lock key should
/// be (another program's key under the same name), which every lock script hits as WRONGTYPE.
/// Each command says so on one line and leaves the list alone.
#[test]
fn a_foreign_key_in_the_locks_place_exits_70() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let _: i64 = redis.query(&["RPUSH", &key, "not a lock"]);
    for args in [
        &["acquire", "k"][..],
        &["acquire", "k", "-w", "5s"],
        &["release", "k", "0123456789abcdef0123456789abcdef"],
        &[
            "extend",
            "k",
            "0123456789abcdef0123456789abcdef",
            "--ttl",
            "5s",
        ],
        &["status", "k"],
    ] {
        let out = redis.redlock().args(args).run();
        assert_one_error_line(&out);
        assert!(out.stderr.contains("WRONGTYPE"), "{args:?}:\n{out}");
        out.expect(70);
    }
    let list: Vec<String> = redis.query(&["LRANGE", &key, "0", "-1"]);
    assert_eq!(list, ["not a lock"]);
}
