//! Forced releases leave a record of who forced them and when (`forced_by`, `forced_at` in the
//! lock's meta hash, with `forced_token`, the token they evicted), which `status` shows for the
//! last holder and which an `exec` holder names in its lost-lock message, whether it hears of the
//! release at once (pub/sub), at its next renewal, or at release. A release that is not forced
//! records nothing of the kind.

use crate::common::nodes::Nodes;
use crate::common::*;
use crate::support::exec::*;
use serde_json::Value;

/// Exit status when the lock was lost.
const LOST: i32 = 75;

/// How the test process (the forcer's calling script, as `forced_by` names it) shows in a record.
fn me() -> String {
    format!("(pid {})", std::process::id())
}

fn force(redis: &RedisServer, name: &str) {
    redis
        .redlock()
        .args(["release", name, "--force"])
        .run()
        .expect(0);
}

fn status_json(redis: &RedisServer, name: &str) -> Value {
    let out = redis
        .redlock()
        .args(["status", "--json", name])
        .run()
        .expect(1);
    let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    v[0].clone()
}

/// Forbids pub/sub to the default user (as Redis 7 does for a new ACL user): an `exec` holder
/// hears of a forced release only at its next renewal, or at release.
fn no_channels(redis: &RedisServer) {
    redis.query::<()>(&["ACL", "SETUSER", "default", "resetchannels"]);
}

#[test]
fn a_forced_release_is_recorded_and_status_names_the_forcer() {
    let redis = or_skip!(RedisServer::start());
    let token = hold(&redis, "k", "60s");
    let before = redis.now_ms();
    force(&redis, "k");
    let after = redis.now_ms();

    let meta = redis.meta("k");
    assert_eq!(meta["forced_token"], token, "{meta:?}");
    let by = &meta["forced_by"];
    assert!(by.contains('@') && by.ends_with(&me()), "{meta:?}");
    let at: i64 = meta["forced_at"].parse().unwrap();
    assert!((before..=after).contains(&at), "{before} {at} {after}");

    let out = redis.redlock().args(["status", "k"]).run().expect(1);
    assert!(
        out.stdout.contains(&format!(", force-released by {by})")),
        "the last holder's cell does not name the forcer:\n{out}"
    );
    let last = &status_json(&redis, "k")["last_holder"];
    assert_eq!(last["forced_by"], by.as_str(), "{last}");
    assert!(last["forced_at"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert_eq!(last["ended"], "released", "{last}");
}

/// The record of a forced release describes the hold it ended, and only that one: the next
/// holder's normal release shows no forcer, and leaves the record as it was.
#[test]
fn a_release_that_is_not_forced_records_nothing_and_shows_no_forcer() {
    let redis = or_skip!(RedisServer::start());
    let token = hold(&redis, "k", "60s");
    release(&redis, "k", &token);
    let meta = redis.meta("k");
    assert!(
        !meta.keys().any(|k| k.starts_with("forced")),
        "a normal release wrote {meta:?}"
    );
    let last = &status_json(&redis, "k")["last_holder"];
    assert_eq!(last["forced_by"], Value::Null, "{last}");
    assert_eq!(last["forced_at"], Value::Null, "{last}");

    hold(&redis, "k", "60s");
    force(&redis, "k");
    let forced = redis.meta("k");
    let token = hold(&redis, "k", "60s");
    release(&redis, "k", &token);
    let meta = redis.meta("k");
    for field in ["forced_token", "forced_by", "forced_at"] {
        assert_eq!(meta[field], forced[field], "{field}: {meta:?}");
    }
    let out = redis.redlock().args(["status", "k"]).run().expect(1);
    assert!(!out.stdout.contains("force-released"), "{out}");
    let last = &status_json(&redis, "k")["last_holder"];
    assert_eq!(last["forced_by"], Value::Null, "{last}");
}

/// Heard at once, on the lock's channel: the holder's message names the forcer and the time.
#[test]
fn an_exec_holder_told_of_a_forced_release_names_the_forcer() {
    let redis = or_skip!(RedisServer::start());
    let mut proc = exec(&redis)
        .args(["-q", "k", "--ttl", "60s", "-c", &trapper()])
        .spawn_proc();
    wait_ready(&redis, &mut proc);
    wait_subscribed(&[&redis], "k");
    force(&redis, "k");
    let out = proc.finish(EVENT).expect(LOST);
    let by = &redis.meta("k")["forced_by"];
    assert_eq!(out.stdout, "got TERM\n", "stopped at once:\n{out}");
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("redlock: lost the lock 'k'"))
        .unwrap_or_else(|| panic!("no lost-lock message:\n{out}"));
    assert!(
        line.contains(&format!("force-released by {by} at 20")),
        "does not name {by} and when:\n{out}"
    );
}

/// Not listening (no channel permission): the next renewal finds the key gone, and the message
/// still names the forcer, read from the meta hash.
#[test]
fn an_exec_holder_that_finds_a_forced_release_by_renewing_names_the_forcer() {
    let redis = or_skip!(RedisServer::start());
    no_channels(&redis);
    let mut proc = exec(&redis)
        .args(["-q", "k", "--ttl", "1s", "-c", &trapper()])
        .spawn_proc();
    wait_ready(&redis, &mut proc);
    force(&redis, "k");
    let out = proc.finish(EVENT).expect(LOST);
    assert_eq!(out.stdout, "got TERM\n", "stopped while it ran:\n{out}");
    let by = &redis.meta("k")["forced_by"];
    assert!(
        out.stderr
            .contains(&format!("force-released by {by} at 20")),
        "does not name {by}:\n{out}"
    );
}

/// On a quorum, every node records the same forcer, and `status` shows it.
#[test]
fn a_forced_release_on_a_quorum_is_recorded_on_every_node() {
    let nodes = or_skip!(Nodes::start(3));
    let token = nodes
        .redlock()
        .args(["acquire", "k", "--ttl", "60s"])
        .run()
        .ok();
    nodes
        .redlock()
        .args(["release", "k", "--force"])
        .run()
        .expect(0);
    let by = nodes[0].meta("k")["forced_by"].clone();
    assert!(by.ends_with(&me()), "{by}");
    for s in nodes.servers() {
        let meta = s.meta("k");
        assert_eq!(meta["forced_token"], token, "{}: {meta:?}", s.url());
        assert_eq!(meta["forced_by"], by, "{}: {meta:?}", s.url());
        assert!(meta.contains_key("forced_at"), "{}: {meta:?}", s.url());
    }
    let out = nodes
        .redlock()
        .args(["status", "--json", "k"])
        .run()
        .expect(1);
    let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    assert_eq!(v[0]["last_holder"]["forced_by"], by.as_str(), "{v}");
}

/// What `status --json` shows of the holder of `name`: its fence and token fingerprint.
fn seen(redlock: impl Fn() -> std::process::Command, name: &str) -> (i64, String) {
    let out = redlock().args(["status", "--json", name]).run().expect(0);
    let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    let fence = v[0]["fence"].as_i64().unwrap_or_else(|| panic!("{out}"));
    let fp = v[0]["token_fingerprint"].as_str().unwrap().to_string();
    (fence, fp)
}

/// Hands lock `name`, held with `token`, to a waiter (an `acquire --wait`); returns its token.
fn hand_over(
    redlock: impl Fn() -> std::process::Command,
    queue_len: impl Fn() -> usize,
    name: &str,
    token: &str,
) -> String {
    let waiter = redlock()
        .args(["acquire", name, "--ttl", "60s", "--wait", "60s"])
        .spawn_proc();
    assert!(
        wait_for(|| queue_len() == 1, HANG),
        "the waiter never queued"
    );
    redlock().args(["release", name, token]).run().expect(0);
    let token = waiter.finish(HANG).ok().trim().to_string();
    assert!(is_token(&token), "{token}");
    token
}

/// `--if-fence` with the fence `status` shows releases (and says whom it evicted); after a
/// hand-over to a waiter the same command refuses with exit 3, names the new holder and its fence,
/// and leaves the lock to it. Fails if the condition is not checked (the release would go
/// through) or if the fence compared is not the one `status` shows.
#[test]
fn if_fence_releases_the_holder_status_showed_and_refuses_after_a_hand_over() {
    let redis = or_skip!(RedisServer::start());
    let token = hold(&redis, "k", "60s");
    let (fence, _) = seen(|| redis.redlock(), "k");
    let new = hand_over(|| redis.redlock(), || queue(&redis, "k").len(), "k", &token);
    let (new_fence, new_fp) = seen(|| redis.redlock(), "k");
    let out = redis
        .redlock()
        .args(["release", "k", "--force", "--if-fence", &fence.to_string()])
        .run()
        .expect(3);
    assert_one_error_line(&out);
    assert!(
        out.stderr.contains(&format!(
            "not released: 'k' is now held by {}",
            seen_who(&redis)
        )) && out
            .stderr
            .contains(&format!("with fence {new_fence} (token {new_fp}…)")),
        "{out}"
    );
    assert_eq!(redis.get(&lock_key("k")), Some(new.clone()), "{out}");
    assert!(!redis.meta("k").contains_key("forced_by"), "{out}");

    let out = redis
        .redlock()
        .args([
            "-q",
            "release",
            "k",
            "--force",
            "--if-fence",
            &new_fence.to_string(),
        ])
        .run()
        .expect(0);
    assert!(
        out.stderr.contains("force-released 'k'") && out.stderr.contains(&new_fp),
        "{out}"
    );
    assert_eq!(redis.get(&lock_key("k")), None);
    assert_eq!(redis.meta("k")["forced_token"], new);
}

/// `user@host (pid N)` of the holder of `k`, as `status --json` shows it.
fn seen_who(redis: &RedisServer) -> String {
    let out = redis
        .redlock()
        .args(["status", "--json", "k"])
        .run()
        .expect(0);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let h = &v[0]["holder"];
    format!(
        "{}@{} (pid {})",
        h["user"].as_str().unwrap(),
        h["host"].as_str().unwrap(),
        h["pid"]
    )
}

/// `--if-token` likewise, with the fingerprint `status` shows (in upper case too).
#[test]
fn if_token_releases_the_holder_status_showed_and_refuses_after_a_hand_over() {
    let redis = or_skip!(RedisServer::start());
    let token = hold(&redis, "k", "60s");
    let (_, fp) = seen(|| redis.redlock(), "k");
    let new = hand_over(|| redis.redlock(), || queue(&redis, "k").len(), "k", &token);
    // The fingerprint, or the whole token (the longer, the surer), of the holder before.
    for old in [fp.as_str(), token.as_str()] {
        let out = redis
            .redlock()
            .args(["release", "k", "--force", "--if-token", old])
            .run()
            .expect(3);
        assert_one_error_line(&out);
    }
    let out = redis
        .redlock()
        .args(["release", "k", "--force", "--if-token", &fp])
        .run()
        .expect(3);
    assert_one_error_line(&out);
    assert!(
        out.stderr.contains("not released: 'k' is now held by"),
        "{out}"
    );
    assert_eq!(redis.get(&lock_key("k")), Some(new.clone()), "{out}");

    // The whole token, in capitals: accepted as well.
    redis
        .redlock()
        .args(["release", "k", "--force", "--if-token", &new.to_uppercase()])
        .run()
        .expect(0);
    assert_eq!(redis.get(&lock_key("k")), None);
}

/// The conditions are options of `--force`, one at a time, and a fingerprint has 8 to 32 hex
/// digits (the token's first 8, or more of it): usage errors (exit 2) that leave the lock alone.
#[test]
fn if_fence_and_if_token_are_usage_errors_without_force_together_or_malformed() {
    let redis = or_skip!(RedisServer::start());
    let token = hold(&redis, "k", "60s");
    for args in [
        &["release", "k", &token, "--if-fence", "1"][..],
        &["release", "k", "--if-token", "abcdef01"],
        &[
            "release",
            "k",
            "--force",
            "--if-fence",
            "1",
            "--if-token",
            "abcdef01",
        ],
        &[
            "release",
            "k",
            "--force",
            "--if-token",
            &format!("{token}0"),
        ],
        &["release", "k", "--force", "--if-token", "abcdef0"],
        &["release", "k", "--force", "--if-token", "xyz"],
        &["release", "k", "--force", "--if-fence", "x"],
    ] {
        let out = redis.redlock().args(args).run().expect(2);
        assert_one_error_line(&out);
        assert_eq!(
            redis.get(&lock_key("k")),
            Some(token.clone()),
            "{args:?}: {out}"
        );
    }
}

/// On a 3-node quorum the fence `status` shows (the highest of the nodes') is the one written
/// back to every node that granted the lock: `--if-fence` with it releases on every node; after
/// a hand-over it refuses on every node and names the new holder.
#[test]
fn if_fence_on_a_quorum_uses_the_fence_status_shows() {
    let nodes = or_skip!(Nodes::start(3));
    let token = nodes
        .redlock()
        .args(["acquire", "k", "--ttl", "60s"])
        .run()
        .ok();
    let (fence, _) = seen(|| nodes.redlock(), "k");
    let new = hand_over(
        || nodes.redlock(),
        || queue(&nodes[0], "k").len(),
        "k",
        token.trim(),
    );
    let (new_fence, _) = seen(|| nodes.redlock(), "k");
    // The write-back of the fence is in flight on a node that answered late: wait for it.
    let written = || {
        nodes
            .servers()
            .all(|s| s.meta("k").get("fence") == Some(&new_fence.to_string()))
    };
    assert!(wait_for(written, HANG), "the fence was not written back");
    let out = nodes
        .redlock()
        .args(["release", "k", "--force", "--if-fence", &fence.to_string()])
        .run()
        .expect(3);
    assert_one_error_line(&out);
    assert!(
        out.stderr.contains(&format!("with fence {new_fence} ")),
        "{out}"
    );
    assert_eq!(nodes.tokens("k"), vec![Some(new.clone()); 3], "{out}");

    nodes
        .redlock()
        .args([
            "release",
            "k",
            "--force",
            "--if-fence",
            &new_fence.to_string(),
        ])
        .run()
        .expect(0);
    assert_eq!(nodes.tokens("k"), vec![None; 3]);
}

/// On a quorum, `--if-fence` must match on a majority: matching a copy on fewer than Q nodes is
/// not "the lock I saw" (exit 3, the lock kept where it did not match); matching on a majority
/// releases it and says where it did not match.
#[test]
fn if_fence_on_a_quorum_needs_a_majority_to_match() {
    let nodes = or_skip!(Nodes::start(3));
    let take = || {
        nodes
            .redlock()
            .args(["acquire", "k", "--ttl", "60s"])
            .run()
            .ok()
    };
    let token = take();
    let (fence, _) = seen(|| nodes.redlock(), "k");
    let other = (fence + 5).to_string();
    // Nodes 1 and 2 record another fence: the condition matches on node 0 only.
    for i in [1, 2] {
        nodes[i].query::<()>(&["HSET", &meta_key("k"), "fence", &other]);
    }
    let out = nodes
        .redlock()
        .args(["release", "k", "--force", "--if-fence", &fence.to_string()])
        .run()
        .expect(3);
    assert_one_error_line(&out);
    assert!(out.stderr.contains("on 1 of 3 servers only"), "{out}");
    assert_eq!(
        nodes.tokens("k"),
        [None, Some(token.clone()), Some(token.clone())],
        "{out}"
    );

    // Node 2 alone records another fence: released on a majority, and told where it was not.
    nodes[1].query::<()>(&["HSET", &meta_key("k"), "fence", &fence.to_string()]);
    nodes[0].query::<()>(&["SET", &lock_key("k"), &token, "PX", "60000"]);
    nodes[0].query::<()>(&["HSET", &meta_key("k"), "fence", &fence.to_string()]);
    let out = nodes
        .redlock()
        .args(["release", "k", "--force", "--if-fence", &fence.to_string()])
        .run()
        .expect(0);
    assert!(
        out.stderr.contains("released 'k' on 2 of 3 servers; on 1 "),
        "{out}"
    );
    assert_eq!(nodes.tokens("k"), [None, None, Some(token)], "{out}");
}
