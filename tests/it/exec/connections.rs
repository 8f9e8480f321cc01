//! How many connections a holder needs, and that waiters cannot take them away from it: with a
//! server's `maxclients` filled by waiters, the holder keeps renewing its lock on the connection
//! it acquired with, runs its command to the end and releases.

use std::time::Duration;

use crate::common::*;

/// Connected clients, as the server counts them (our own connection included).
fn connected(con: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("clients").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// `redlock ARGS -- sh -c CMD`, returned once CMD has started: CMD waits for the file `go` in
/// the returned dir, then sleeps `after_go` seconds and prints `finished`.
fn holder_until_go(
    redis: &RedisServer,
    args: &[&str],
    after_go: &str,
) -> (Proc, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let script = format!(
        "touch {s}; while [ ! -e {g} ]; do sleep 0.05; done; sleep {after_go}; echo finished",
        s = started.display(),
        g = dir.path().join("go").display()
    );
    let holder = redis
        .redlock()
        .args(args)
        .args(["--", "sh", "-c", &script])
        .spawn_proc();
    assert!(
        wait_for(|| started.exists(), Duration::from_secs(20)),
        "the holder's command did not start"
    );
    (holder, dir)
}

/// 25 waiters for `name`, returned once they fill a server of `maxclients 20` (`look`: the
/// test's own connection, made before).
fn fill_with_waiters(redis: &RedisServer, look: &mut redis::Connection, name: &str) -> Vec<Proc> {
    let waiters: Vec<Proc> = (0..25)
        .map(|_| {
            redis
                .redlock()
                .args(["exec", name, "-w", "60s", "--", "true"])
                .spawn_proc()
        })
        .collect();
    assert!(
        wait_for(|| connected(look) >= 20, Duration::from_secs(20)),
        "the waiters did not fill the server: {} clients",
        connected(look)
    );
    waiters
}

/// Fails if the holder's renewal needs a new connection: with 20 clients allowed and 25
/// waiters, that connection is refused, the lock's TTL runs out and the holder exits 75 with
/// its command killed, although its lock was fine in Redis.
#[test]
fn waiters_filling_maxclients_do_not_starve_the_holder() {
    let redis = or_skip!(RedisServer::builder().arg("--maxclients").arg("20").start());
    // Opened first, so that the test can still look once the server is full.
    let mut look = redis.cli();
    // The command runs until the test has seen the server full and then two more of the
    // holder's renewal intervals (1 s each) go by: the TTL (3 s) alone would not last.
    let (holder, dir) = holder_until_go(&redis, &["exec", "full", "--ttl", "3s"], "3.5");
    let waiters = fill_with_waiters(&redis, &mut look, "full");
    std::fs::write(dir.path().join("go"), "").unwrap();
    let out = holder.finish(Duration::from_secs(30));
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stdout.contains("finished"), "{out}");
    assert!(!out.stderr.contains("renewing"), "{out}");
    drop(waiters);
}

/// The forced-release subscription is optional: a server with room for the holder's one
/// connection and no more refuses it, and the holder runs on with its renewals alone (which
/// would find a forced release within TTL/3), to the end of its command and its release.
#[test]
fn a_refused_subscription_leaves_the_holder_running() {
    let redis = or_skip!(RedisServer::builder().arg("--maxclients").arg("20").start());
    let mut look = redis.cli();
    // 19 clients, ours among them: room for one more, the holder's.
    let mut fill = Vec::new();
    while connected(&mut look) < 19 {
        fill.push(redis.cli());
        assert!(fill.len() < 20, "{} clients", connected(&mut look));
    }
    let out = redis
        .redlock()
        .args(["-v", "exec", "room", "--ttl", "1500ms", "--"])
        .args(["sh", "-c", "sleep 2; echo finished"])
        .run();
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stdout.contains("finished"), "{out}");
    assert!(
        out.stderr.contains("not listening on") && out.stderr.contains("max number of clients"),
        "the subscription was not refused:\n{out}"
    );
    assert!(out.stderr.contains("release on"), "{out}");
    drop(fill);
    assert_eq!(redis.get(&lock_key("room")), None, "not released:\n{out}");
}

/// Fills a server of `maxclients 20` with 25 waiters for `name`, stalls it for 2.5 s (longer
/// than the holders' --io-timeout of 500 ms, well within their 6 s TTL), then keeps clients
/// arriving (new jobs) for about 4 s, so that each place that frees is taken at once (bounded:
/// 200 tries). `look`: the test's own connection, made before. Returns what to drop at the end:
/// the waiters and the clients that got in.
fn stall_a_full_server(
    redis: &RedisServer,
    look: &mut redis::Connection,
    name: &str,
) -> (Vec<Proc>, Vec<redis::Connection>) {
    let waiters = fill_with_waiters(redis, look, name);
    redis.pause();
    std::thread::sleep(Duration::from_millis(2500));
    redis.resume();
    let url = redis.url();
    let mut arrived = Vec::new();
    for _ in 0..200 {
        if let Ok(mut con) = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection_with_timeout(Duration::from_millis(500))
            && redis::cmd("PING").query::<String>(&mut con).is_ok()
        {
            arrived.push(con);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (waiters, arrived)
}

/// Found by review (issue 26, item 3's fix): the holder keeps its acquiring connection only
/// while nothing goes wrong on it. One reply slower than `--io-timeout` (a server stalled for
/// 2.5 s, well within the 6 s TTL) made the renewal drop that connection and open a new one
/// (`store.recover()`), which a server full of waiters and newly arriving clients refuses: the
/// holder exited 75 with its command killed although Redis kept its lock the whole time. Now the
/// late reply is read and thrown away on the same connection, which an ECHO puts back in step.
/// Failed before (rc 75, "max number of clients reached" on every retry).
#[test]
fn a_slow_reply_does_not_cost_the_holder_its_connection_on_a_full_server() {
    let redis = or_skip!(RedisServer::builder().arg("--maxclients").arg("20").start());
    // Opened first, so that the test can still look once the server is full.
    let mut look = redis.cli();
    let (holder, dir) = holder_until_go(
        &redis,
        &["-v", "exec", "full", "--ttl", "6s", "--io-timeout", "500ms"],
        "7",
    );
    std::fs::write(dir.path().join("go"), "").unwrap();
    let (waiters, arrived) = stall_a_full_server(&redis, &mut look, "full");
    let out = holder.finish(Duration::from_secs(30));
    drop(arrived);
    drop(waiters);
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stdout.contains("finished"), "{out}");
    // Once, at most: a renewal that fell in the stall; none of the connections it made since.
    assert_eq!(out.stderr.matches("connected to").count(), 1, "{out}");
}

/// The keeper of `acquire --while-pid` too: a renewal whose reply came late keeps its
/// connection, and the lock stays held for its pid through a stall of a full server. Failed
/// before (the keeper reconnected, was refused until the TTL ran out, and SIGTERMed its pid).
#[test]
fn a_slow_reply_does_not_cost_a_keeper_its_connection_on_a_full_server() {
    let redis = or_skip!(RedisServer::builder().arg("--maxclients").arg("20").start());
    let mut look = redis.cli();
    let mut pid = crate::common::keeper::sleeper();
    let out = redis
        .redlock()
        .args([
            "acquire",
            "kept",
            "--ttl",
            "6s",
            "--io-timeout",
            "500ms",
            "--while-pid",
        ])
        .arg(pid.id().to_string())
        .stdin(std::process::Stdio::null())
        // The keeper keeps acquire's stderr for its warnings: a pipe would not end with acquire.
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let stalled = std::time::Instant::now();
    let (waiters, arrived) = stall_a_full_server(&redis, &mut look, "kept");
    let get = |look: &mut redis::Connection| -> Option<String> {
        redis::cmd("GET").arg(lock_key("kept")).query(look).unwrap()
    };
    // More than a TTL after the stall began: a keeper that lost its connection has lost the lock
    // by now, and stopped its pid.
    assert!(stalled.elapsed() > Duration::from_secs(6));
    assert_eq!(
        get(&mut look),
        Some(token.clone()),
        "the keeper lost the lock\n{}",
        redis.log()
    );
    assert!(
        pid.try_wait().unwrap().is_none(),
        "the keeper stopped its pid"
    );
    pid.kill().unwrap();
    pid.wait().unwrap();
    assert!(
        wait_for(
            || get(&mut look).as_ref() != Some(&token),
            Duration::from_secs(20)
        ),
        "not released after its pid ended"
    );
    drop(arrived);
    drop(waiters);
}
