//! `redlock release` and `redlock extend`: only the holder's token may touch a lock.

use std::time::Duration;

use crate::common::*;

fn acquire(redis: &RedisServer, args: &[&str]) -> String {
    redis.redlock().arg("acquire").args(args).run().ok()
}

/// Waits until Redis has expired `key`.
fn wait_until_gone(redis: &RedisServer, key: &str) {
    assert!(
        wait_for(|| redis.pttl(key) == -2, Duration::from_secs(10)),
        "{key} did not expire"
    );
}

#[test]
fn release_with_the_token_frees_the_lock_and_keeps_the_fence() {
    let redis = or_skip!(RedisServer::start());
    let token = acquire(&redis, &["k"]);
    let fence: i64 = redis.meta("k")["fence"].parse().unwrap();
    let out = redis
        .redlock()
        .args(["release", "k", &token])
        .run()
        .expect(0);
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("", ""),
        "{out}"
    );
    assert_eq!(redis.keys(), [meta_key("k")], "only the fence record stays");
    assert_eq!(redis.meta("k")["fence"], fence.to_string());
    let json = acquire(&redis, &["k", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["fence"].as_i64().unwrap() > fence, "{json} after {fence}");
}

#[test]
fn release_and_extend_take_the_token_from_redlock_token() {
    let redis = or_skip!(RedisServer::start());
    let token = acquire(&redis, &["k", "--ttl", "5s"]);
    redis
        .redlock()
        .args(["extend", "k", "--ttl", "60s"])
        .env("REDLOCK_TOKEN", &token)
        .run()
        .expect(0);
    assert!(redis.pttl(&lock_key("k")) > 50_000);
    redis
        .redlock()
        .args(["release", "k"])
        .env("REDLOCK_TOKEN", &token)
        .run()
        .expect(0);
    assert_eq!(redis.get(&lock_key("k")), None);

    // An explicit TOKEN wins over the environment.
    let token = acquire(&redis, &["k"]);
    redis
        .redlock()
        .args(["release", "k", &token])
        .env("REDLOCK_TOKEN", "0123456789abcdef0123456789abcdef")
        .run()
        .expect(0);
}

#[test]
fn release_with_another_token_exits_3_and_deletes_nothing() {
    let redis = or_skip!(RedisServer::start());
    let token = acquire(&redis, &["k", "--note", "the real holder"]);
    let pttl = redis.pttl(&lock_key("k"));
    let out = redis
        .redlock()
        .args(["release", "k", "0123456789abcdef0123456789abcdef"])
        .run()
        .expect(3);
    assert_one_error_line(&out);
    let pid = std::process::id().to_string();
    for needle in [
        "not the owner",
        "held by",
        &format!("(pid {pid})"),
        &token[..8],
    ] {
        assert!(out.stderr.contains(needle), "missing {needle:?}:\n{out}");
    }
    assert!(!out.stderr.contains(&token), "whole token printed:\n{out}");
    assert_eq!(redis.get(&lock_key("k")).as_deref(), Some(&*token));
    assert!(redis.pttl(&lock_key("k")) <= pttl);
}

#[test]
fn release_of_a_free_lock_exits_3_and_writes_nothing() {
    let redis = or_skip!(RedisServer::start());
    let out = redis
        .redlock()
        .args(["release", "never-taken", "0123456789abcdef0123456789abcdef"])
        .run()
        .expect(3);
    assert_one_error_line(&out);
    assert!(out.stderr.contains("free"), "{out}");
    assert_eq!(redis.dbsize(), 0);
}

#[test]
fn release_after_expiry_while_another_holds_it_exits_3_and_leaves_their_lock_intact() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let stale = acquire(&redis, &["k", "--ttl", "300ms"]);
    wait_until_gone(&redis, &key);
    let current = acquire(&redis, &["k", "--ttl", "60s", "--note", "second holder"]);
    let pttl = redis.pttl(&key);
    let fence = redis.meta("k")["fence"].clone();

    let out = redis
        .redlock()
        .args(["release", "k", &stale])
        .run()
        .expect(3);
    assert!(out.stderr.contains("held by"), "{out}");
    let out = redis
        .redlock()
        .args(["extend", "k", &stale, "--ttl", "120s"])
        .run()
        .expect(3);
    assert!(out.stderr.contains("held by"), "{out}");

    assert_eq!(redis.get(&key).as_deref(), Some(&*current), "not deleted");
    let after = redis.pttl(&key);
    assert!(
        after <= pttl && after > pttl - 10_000,
        "PTTL {pttl} -> {after}: reset or changed"
    );
    let meta = redis.meta("k");
    assert_eq!(
        (
            meta["token"].as_str(),
            meta["note"].as_str(),
            meta["fence"].as_str()
        ),
        (current.as_str(), "second holder", fence.as_str())
    );
}

#[test]
fn release_and_extend_survive_script_flush() {
    let redis = or_skip!(RedisServer::start());
    let token = acquire(&redis, &["k", "--ttl", "5s"]);
    redis.query::<()>(&["SCRIPT", "FLUSH"]);
    redis
        .redlock()
        .args(["extend", "k", &token, "--ttl", "60s"])
        .run()
        .expect(0);
    assert!(redis.pttl(&lock_key("k")) > 50_000);
    redis.query::<()>(&["SCRIPT", "FLUSH"]);
    redis
        .redlock()
        .args(["release", "k", &token])
        .run()
        .expect(0);
    assert_eq!(redis.get(&lock_key("k")), None);
}

#[test]
fn force_release_deletes_any_holder_and_names_it() {
    let redis = or_skip!(RedisServer::start());
    let token = acquire(&redis, &["k", "--note", "stuck job"]);
    let fence = format!("fence {}", redis.meta("k")["fence"]);
    // The previous owner is printed even with -q: it is the point of --force.
    let out = redis
        .redlock()
        .args(["-q", "release", "k", "--force"])
        .run()
        .expect(0);
    assert_eq!(out.stdout, "");
    let pid = std::process::id().to_string();
    for needle in [
        "force-released",
        &format!("(pid {pid})"),
        &fence,
        &token[..8],
    ] {
        assert!(out.stderr.contains(needle), "missing {needle:?}:\n{out}");
    }
    assert!(!out.stderr.contains(&token), "whole token printed:\n{out}");
    assert_eq!(redis.get(&lock_key("k")), None);

    let out = redis
        .redlock()
        .args(["release", "k", "--force"])
        .run()
        .expect(0);
    assert!(out.stderr.contains("not held"), "{out}");
}

/// A lock key written by something other than redlock, beside the record of an earlier holder:
/// that record must not be presented as the current holder.
#[test]
fn a_foreign_lock_is_not_blamed_on_the_previous_holder() {
    let redis = or_skip!(RedisServer::start());
    let token = acquire(&redis, &["k", "--note", "earlier job"]);
    redis
        .redlock()
        .args(["release", "k", &token])
        .run()
        .expect(0);
    redis.query::<()>(&["SET", &lock_key("k"), "foreign", "PX", "60000"]);
    let stale = format!("(pid {})", std::process::id());

    let out = redis
        .redlock()
        .args(["release", "k", &token])
        .run()
        .expect(3);
    assert!(
        !out.stderr.contains(&stale),
        "names the previous holder:\n{out}"
    );
    let out = redis
        .redlock()
        .args(["extend", "k", &token, "--ttl", "1s"])
        .run()
        .expect(3);
    assert!(
        !out.stderr.contains(&stale),
        "names the previous holder:\n{out}"
    );
    let out = redis.redlock().args(["acquire", "k", "-n"]).run().expect(1);
    assert!(
        !out.stderr.contains("earlier job"),
        "names the previous holder:\n{out}"
    );
    assert_eq!(redis.get(&lock_key("k")).as_deref(), Some("foreign"));

    let out = redis
        .redlock()
        .args(["release", "k", "--force"])
        .run()
        .expect(0);
    assert!(out.stderr.contains("force-released"), "{out}");
    assert!(
        !out.stderr.contains(&stale),
        "names the previous holder:\n{out}"
    );
    assert_eq!(redis.get(&lock_key("k")), None);
}

#[test]
fn extend_resets_the_ttl_of_the_holder_only() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let token = acquire(&redis, &["k", "--ttl", "3s"]);
    let out = redis
        .redlock()
        .args(["extend", "k", &token, "--ttl", "90s"])
        .run()
        .expect(0);
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("", ""),
        "{out}"
    );
    let pttl = redis.pttl(&key);
    assert!((80_000..=90_000).contains(&pttl), "{pttl}");
    assert_eq!(redis.get(&key).as_deref(), Some(&*token));

    let out = redis
        .redlock()
        .args([
            "extend",
            "k",
            "0123456789abcdef0123456789abcdef",
            "--ttl",
            "300s",
        ])
        .run()
        .expect(3);
    assert_one_error_line(&out);
    assert!(redis.pttl(&key) <= pttl, "a stranger extended the lock");
}

#[test]
fn extend_never_revives_an_expired_lock() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let token = acquire(&redis, &["k", "--ttl", "200ms"]);
    wait_until_gone(&redis, &key);
    let out = redis
        .redlock()
        .args(["extend", "k", &token, "--ttl", "60s"])
        .run()
        .expect(3);
    assert!(out.stderr.contains("free"), "{out}");
    assert_eq!(redis.pttl(&key), -2, "the expired lock came back");
    let out = redis
        .redlock()
        .args(["release", "k", &token])
        .run()
        .expect(3);
    assert!(out.stderr.contains("free"), "{out}");
}

/// Fails if `release --force` needs more than the keys: the announcement to the holder is best
/// effort, so an ACL user without pub/sub channels (Redis 7's default for new users) can still
/// force a release, and `exec` under such a user runs its command (relying on its renewal).
#[test]
fn force_release_and_exec_work_without_channel_permissions() {
    let redis = or_skip!(RedisServer::start());
    let url = redis.user_without_channels("locker", "lockerpw");
    redlock()
        .args(["--url", &url, "acquire", "k", "-n"])
        .run()
        .ok();
    let out = redlock()
        .args(["--url", &url, "release", "k", "--force"])
        .run()
        .expect(0);
    assert!(out.stderr.contains("force-released"), "{out}");
    assert_eq!(redis.get(&lock_key("k")), None, "{out}");
    // The command runs until the test has seen exec try to listen.
    let done = redis.dir().join("done");
    let mut proc = redlock()
        .args(["--url", &url, "-v", "exec", "k", "-n", "--", "sh", "-c"])
        .arg(r#"while [ ! -e "$0" ]; do sleep 0.02; done; echo ran"#)
        .arg(&done)
        .spawn_proc();
    // The refused SUBSCRIBE is seen (it comes as a reply, not as a failed command), so exec does
    // not take itself for a listener.
    let refused = format!("redlock: not listening on {}:events: ", lock_key("k"));
    proc.wait_for_stderr(&refused, Duration::from_secs(10));
    std::fs::write(&done, "").unwrap();
    let out = proc.finish(Duration::from_secs(10)).expect(0);
    assert_eq!(out.stdout, "ran\n", "{out}");
    assert!(
        out.stderr
            .lines()
            .any(|l| l.starts_with(&refused) && l.contains("refused SUBSCRIBE: NOPERM")),
        "the refused subscription is reported with -v:\n{out}"
    );
}
