//! `--sentinel` and `--wait-replicas`: a master, its replica and a sentinel built by the test.
//!
//! redlock is given only the sentinel's URL, so a lock can reach the master only through the
//! sentinel's answer; after `SENTINEL FAILOVER` the old master is a read-only replica, so a
//! command that still went there would fail. `--wait-replicas` is checked against the one replica
//! there is: one acknowledgement is possible, two are not.
//!
//! Failovers are made two ways: `SENTINEL FAILOVER` (the old master is then a replica, which a
//! second, stale sentinel can still name) and killing the master, which the sentinel notices
//! after its 1s down-after period. `exec` keeps a lock across the second only if the promoted
//! replica has it. The same topology is also built with one password, or TLS only, everywhere.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::topology::{MASTER_NAME, Replicated, Sentinel, role};
use crate::common::*;

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
    let group = or_skip!(Replicated::start());
    let (first, second) = (group.first_master(), group.first_replica());
    let before = group
        .redlock()
        .args(["acquire", "before", "--ttl", "60s", "-n"])
        .run()
        .ok();
    assert!(is_token(&before), "{before:?}");
    assert_eq!(first.get(&lock_key("before")), Some(before.clone()));
    assert!(first.meta("before").contains_key("fence"));
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
    let group = or_skip!(Replicated::start());
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
    let group = or_skip!(Replicated::start());
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
    let group = or_skip!(Replicated::start());
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
    let group = or_skip!(Replicated::start());
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

/// A shell script that marks `started`, then runs until `go` appears and exits 7 (99 if `go`
/// never comes: the loop is bounded).
fn until_go(started: &std::path::Path, go: &std::path::Path) -> String {
    format!(
        "touch '{}'; i=0; while [ ! -e '{go}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); \
         done; [ -e '{go}' ] && exit 7; exit 99",
        started.display(),
        go = go.display()
    )
}

/// Starts `cmd` (an `exec ... -c` still without its script) running [`until_go`] with its
/// marker files in `dir`; returns once the command runs, with the file that ends it.
#[track_caller]
fn start_until_go(
    mut cmd: std::process::Command,
    dir: &std::path::Path,
) -> (Proc, std::path::PathBuf) {
    let (started, go) = (dir.join("started"), dir.join("go"));
    let holder = cmd.arg(until_go(&started, &go)).spawn_proc();
    assert!(
        wait_for(|| started.exists(), Duration::from_secs(30)),
        "{}",
        holder.stderr()
    );
    (holder, go)
}

/// `holder` (started by [`start_until_go`]) renews lock `name` on `master`; told to end, its
/// command exits 7, quietly, and the lock is released.
#[track_caller]
fn renewed_then_released(master: &RedisServer, name: &str, mut holder: Proc, go: &std::path::Path) {
    wait_renewed(master, name, &mut holder, "the master");
    std::fs::write(go, "").unwrap();
    let out = holder.finish(Duration::from_secs(30)).expect(7);
    assert!(out.stderr.is_empty(), "{out}");
    assert_eq!(master.get(&lock_key(name)), None, "not released:\n{out}");
}

/// Waits until `server`'s PTTL of lock `name` goes up by more than a second: a renewal reached
/// that server (replication and time only run it down).
#[track_caller]
fn wait_renewed(server: &RedisServer, name: &str, holder: &mut Proc, which: &str) {
    let mut lowest = i64::MAX;
    let renewed = wait_for(
        || {
            let pttl = server.pttl(&lock_key(name));
            lowest = lowest.min(pttl);
            pttl > 0 && pttl > lowest + 1000
        },
        Duration::from_secs(20),
    );
    assert!(
        renewed,
        "no renewal reached {which} (PTTL {}, lowest {lowest}); running: {}\n{}",
        server.pttl(&lock_key(name)),
        holder.running(),
        holder.stderr()
    );
}

/// With `--wait-replicas 1` the replica has the lock before the command starts, so when the
/// master dies and the sentinel promotes the replica, `exec`'s renewal (which asks the sentinel
/// again) finds its lock there and keeps it: the command runs on, and redlock exits with its
/// status. The TTL leaves the failover (about 2s after the crash) well inside the two thirds of a
/// TTL that the last renewal on the old master guarantees on the new one.
#[test]
fn exec_with_wait_replicas_1_keeps_its_lock_when_the_master_fails_over() {
    let mut group = or_skip!(Replicated::start());
    let old_port = group.first_master().port();
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = group.redlock();
    cmd.args(["exec", "k", "--ttl", "9s", "--wait-replicas", "1", "-c"]);
    let (mut holder, go) = start_until_go(cmd, dir.path());
    let token = group.first_master().get(&lock_key("k"));
    assert!(token.is_some(), "no lock on the master");
    // WAIT returned before the command started: the replica has the lock already.
    assert_eq!(group.first_replica().get(&lock_key("k")), token);
    // The renewal has a connection to the old master when it dies (it opens one for its first
    // renewal), so it must find the new master by asking the sentinel again.
    wait_renewed(group.first_master(), "k", &mut holder, "the first master");

    group.kill_master();
    let new = group.first_replica();
    assert_ne!(new.port(), old_port);
    wait_renewed(new, "k", &mut holder, "the new master");
    assert_eq!(new.get(&lock_key("k")), token, "{}", holder.stderr());
    assert!(holder.running(), "{}", holder.stderr());
    let out = group.redlock().args(["acquire", "k", "-n"]).run().expect(1);
    assert!(out.stderr.contains("busy"), "{out}");

    std::fs::write(&go, "").unwrap();
    let out = holder.finish(Duration::from_secs(30)).expect(7);
    assert!(!out.stderr.contains("lost the lock"), "{out}");
    assert!(!out.stderr.contains("cannot release"), "{out}");
    assert_eq!(new.get(&lock_key("k")), None, "not released:\n{out}");
}

/// Without the replica's acknowledgement the lock may not survive a failover: when the promoted
/// replica does not have it, `exec`'s next renewal (on the new master) finds no key, and the
/// command is stopped as for any lost lock (exit 75), at once rather than when the TTL runs out.
/// The replica is made to miss the lock by deleting it there (a writable replica), which is what
/// an acknowledgement never sent looks like after the promotion.
#[test]
fn exec_stops_its_command_when_the_promoted_replica_lacks_the_lock() {
    let mut group = or_skip!(Replicated::start());
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = group.redlock();
    cmd.args(["exec", "k", "--ttl", "9s", "-c"]);
    let (mut holder, go) = start_until_go(cmd, dir.path());
    wait_renewed(group.first_master(), "k", &mut holder, "the first master");
    group.wait_replicated();
    let replica = group.first_replica();
    let _: () = replica.query(&["CONFIG", "SET", "replica-read-only", "no"]);
    let deleted: i64 = replica.query(&["DEL", &lock_key("k")]);
    assert_eq!(deleted, 1, "the replica did not have the lock");

    let killed = Instant::now();
    group.kill_master();
    let out = holder.finish(Duration::from_secs(30)).expect(75);
    // The renewal asked the sentinel and found the key gone on the new master; a renewal that
    // kept trying the dead master would have run into the deadline (9s after the last renewal).
    assert!(out.stderr.contains("lost the lock"), "{out}");
    assert!(out.stderr.contains("the lock key is gone"), "{out}");
    assert!(!out.stderr.contains("no renewal succeeded"), "{out}");
    assert!(
        killed.elapsed() < Duration::from_secs(20),
        "stopped only {:?} after the crash:\n{out}",
        killed.elapsed()
    );
    assert!(!go.exists());
}

/// A Sentinel that has not heard of the failover yet names the old master, which is a replica
/// now: redlock refuses to lock on a replica (and the replica would refuse every write with
/// READONLY). That is exit 69 (unavailable: try again, the Sentinels will agree soon) with one
/// line that says what happened, and nothing is written.
#[test]
fn a_demoted_master_named_by_a_stale_sentinel_exits_69() {
    let group = or_skip!(Replicated::start());
    let (old, new) = (group.first_master(), group.first_replica());
    group.failover();
    // The sentinel that made the failover tells every other sentinel through the servers; frozen,
    // it cannot correct the stale one started now, which names the server it was given.
    group.sentinel().pause();
    let stale = Sentinel::monitoring(old.port());
    let stale_redlock = || {
        let mut cmd = redlock();
        cmd.args(["--sentinel", MASTER_NAME, "--url", &stale.url()]);
        cmd
    };

    let out = stale_redlock()
        .args(["acquire", "k", "--ttl", "60s", "-n"])
        .run()
        .expect(69);
    assert_eq!(out.stdout, "", "{out}");
    assert_one_error_line(&out);
    let replica_of = format!("is a replica of 127.0.0.1:{}", new.port());
    assert!(out.stderr.contains(&replica_of), "{out}");
    assert!(out.stderr.contains(&old.port().to_string()), "{out}");
    assert!(!out.stderr.contains("lost the connection"), "{out}");

    let ran = new.dir().join("ran");
    let out = stale_redlock()
        .args(["exec", "k", "--"])
        .arg("touch")
        .arg(&ran)
        .run()
        .expect(69);
    assert_one_error_line(&out);
    assert!(out.stderr.contains(&replica_of), "{out}");
    assert!(!ran.exists(), "the command ran without the lock:\n{out}");

    // It was the stale answer: the stale sentinel still names the old master, and through the
    // sentinel that knows, the same lock is free on the new master.
    assert_eq!(stale.master_port(), old.port());
    group.sentinel().resume();
    assert_eq!(old.get(&lock_key("k")), None);
    assert_eq!(new.get(&lock_key("k")), None);
    let token = group.redlock().args(["acquire", "k", "-n"]).run().ok();
    assert_eq!(new.get(&lock_key("k")), Some(token));
}

/// The password reaches the sentinel and the master alike, from each of the three places it
/// can come from; a wrong or missing one is exit 77.
#[test]
fn the_password_reaches_the_sentinel_and_the_master() {
    const PW: &str = "s3cret-pw";
    let group = or_skip!(Replicated::with_password(PW));
    let master = group.first_master();
    let sentinel_url = group.sentinel().url();
    let in_url = sentinel_url.replacen("redis://", &format!("redis://:{PW}@"), 1);
    let pw_file = master.dir().join("pw");
    std::fs::write(&pw_file, format!("{PW}\n")).unwrap();
    let base = || {
        let mut cmd = redlock();
        cmd.args(["--sentinel", MASTER_NAME]);
        cmd
    };

    let a = base()
        .args(["--url", &in_url, "acquire", "a", "-n"])
        .run()
        .ok();
    let b = base()
        .args(["--url", &sentinel_url, "acquire", "b", "-n"])
        .env("REDLOCK_PASSWORD", PW)
        .run()
        .ok();
    let c = base()
        .args(["--url", &sentinel_url, "--password-file"])
        .arg(&pw_file)
        .args(["acquire", "c", "-n"])
        .run()
        .ok();
    for (name, token) in [("a", a), ("b", b), ("c", c)] {
        assert!(is_token(&token), "{name}: {token:?}");
        assert_eq!(master.get(&lock_key(name)), Some(token), "{name}");
    }
    // exec: its renewal and its listener connect the same way.
    let mut cmd = base();
    cmd.args(["--url", &sentinel_url, "exec", "d", "--ttl", "6s", "-c"])
        .env("REDLOCK_PASSWORD", PW);
    let (holder, go) = start_until_go(cmd, master.dir());
    renewed_then_released(master, "d", holder, &go);

    for env in [Some("wrong"), None] {
        let mut cmd = base();
        cmd.args(["--url", &sentinel_url, "acquire", "e", "-n"]);
        if let Some(pw) = env {
            cmd.env("REDLOCK_PASSWORD", pw);
        }
        let out = cmd.run().expect(77);
        assert_one_error_line(&out);
        assert!(out.stderr.contains(&sentinel_url), "{out}");
        assert!(!out.stderr.contains(PW), "{out}");
    }
    assert_eq!(master.get(&lock_key("e")), None);
}

/// TLS settings apply to the sentinel and the master alike: with the CA, a lock goes through a
/// TLS-only sentinel to a TLS-only master (and `exec`'s renewal and listener connect the same
/// way); without it, the sentinel's certificate is not trusted and the error says so.
#[test]
#[cfg_attr(not(feature = "tls"), ignore = "a build without the tls feature")]
fn tls_settings_reach_the_sentinel_and_the_master() {
    let certs = Arc::new(Certs::generate());
    let group = or_skip!(Replicated::with_tls(Arc::clone(&certs)));
    let master = group.first_master();
    let sentinel_url = group.sentinel().url();
    assert!(sentinel_url.starts_with("rediss://"), "{sentinel_url}");
    let with_ca = || {
        let mut cmd = group.redlock();
        cmd.arg("--tls-ca").arg(certs.path("ca.crt"));
        cmd
    };

    let token = with_ca().args(["acquire", "a", "-n"]).run().ok();
    assert!(is_token(&token), "{token:?}");
    assert_eq!(master.get(&lock_key("a")), Some(token));
    let mut cmd = with_ca();
    cmd.args(["exec", "b", "--ttl", "6s", "-c"]);
    let (holder, go) = start_until_go(cmd, master.dir());
    renewed_then_released(master, "b", holder, &go);

    let out = group
        .redlock()
        .args(["acquire", "c", "-n"])
        .run()
        .expect(69);
    assert_one_error_line(&out);
    assert!(out.stderr.contains(&sentinel_url), "{out}");
    assert!(out.stderr.contains("--tls-ca"), "{out}");
    assert_eq!(master.get(&lock_key("c")), None);
}

/// A semaphore through the sentinel: its places are on the master it names, survive a
/// failover (replicated), and keep counting there.
#[test]
fn slots_are_kept_on_the_master_the_sentinel_names_across_a_failover() {
    let group = or_skip!(Replicated::start());
    let (first, second) = (group.first_master(), group.first_replica());
    let take = || {
        group
            .redlock()
            .args(["acquire", "sem", "--slots", "2", "--ttl", "60s", "-n"])
            .run()
    };
    let one = take().ok();
    assert_eq!(first.get(&lock_key("sem")).as_deref(), Some("#slots"));
    group.wait_replicated();
    group.failover();
    assert_eq!(group.master().port(), second.port());
    // The place taken before the failover still counts on the new master.
    take().expect(0);
    take().expect(1);
    group
        .redlock()
        .args(["release", "sem", &one])
        .run()
        .expect(0);
    take().expect(0);
    let table = group.redlock().args(["status", "sem"]).run().ok();
    assert!(table.contains("2/2 held"), "{table}");
}
