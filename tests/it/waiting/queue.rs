//! Waiting for a busy lock: wake on release, first come first served, and no waiter (dead,
//! impatient or interrupted) holding up the queue.
//!
//! The protocol is described at the top of `src/acquire.rs`. These tests watch it from outside,
//! with real `redlock` processes against a real `redis-server`: they synchronise on Redis state
//! (a waiter is queued once its token is in `PREFIX{NAME}:q`) and on exits, never on a sleep, and
//! bound every wait generously.
//!
//! The policy under test is "no barging": release hands the lock to the first live waiter by
//! granting it (the waiter's token for the claim window; `~TOKEN`, a reservation, for a waiter
//! that cannot take a grant) in the same script that deletes the holder's token, so a newcomer
//! finds the key taken at every instant of a hand-over (the grant itself: `grant.rs`). A woken waiter
//! therefore never finds its lock taken by someone who came later, and the case "a woken waiter
//! loses the race and goes back to waiting without losing its place" cannot occur; instead
//! we test that a later waiter, however often it retries, never gets in first.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

/// A bound for anything that should happen promptly; reaching it means a hang.
const EVENT: Duration = Duration::from_secs(10);

/// The claim window of a reservation or a grant (`lock::CLAIM_WINDOW`).
const CLAIM_MS: i64 = 2_000;
const CLAIM_ARG: &str = "2000";

/// The release and leave scripts as redlock runs them (as `build.rs` assembles them), for the two tests that must hit an exact
/// instant of the protocol.
const RELEASE_LUA: &str = include_str!(concat!(env!("OUT_DIR"), "/release.lua"));
const LEAVE_LUA: &str = include_str!(concat!(env!("OUT_DIR"), "/leave.lua"));
/// What `lock::release` passes after the token, for a plain (not forced, not quorum) release:
/// force, the claim window, quiet, to.
const RELEASE_ARGS: &[&str] = &["", CLAIM_ARG, "", ""];
/// What `lock::leave` passes after the token for a plain give-up: the claim window, quiet, to,
/// and no tombstone.
const LEAVE_ARGS: &[&str] = &[CLAIM_ARG, "", "", "0"];
/// The default `--meta-ttl` (30 days) in ms, as `lock::try_acquire` passes it last.
const META_TTL_ARG: &str = "2592000000";

fn queue_key(name: &str) -> String {
    format!("{}:q", lock_key(name))
}

fn leases_key(name: &str) -> String {
    format!("{}:leases", lock_key(name))
}

fn wake_key(name: &str, token: &str) -> String {
    format!("{}:w:{token}", lock_key(name))
}

/// `redlock exec NAME -- sh -c 'echo LABEL >> order.txt'` in the server's scratch dir: a waiter
/// that records when its turn came.
fn recorder(redis: &RedisServer, name: &str, label: &str) -> Command {
    let mut cmd = redis.redlock();
    cmd.current_dir(redis.dir()).args([
        "exec",
        name,
        "--",
        "sh",
        "-c",
        &format!("echo {label} >> order.txt"),
    ]);
    cmd
}

/// What the recorders wrote, in order.
fn order(redis: &RedisServer) -> String {
    std::fs::read_to_string(redis.dir().join("order.txt")).unwrap_or_default()
}

/// Starts `cmd` and waits until it is queued for `name`; returns it with its waiter token.
#[track_caller]
fn enqueue(redis: &RedisServer, name: &str, cmd: &mut Command) -> (Proc, String) {
    let before = queue(redis, name);
    let mut proc = cmd.spawn_proc();
    let mut token = None;
    let queued = wait_for(
        || {
            token = queue(redis, name).into_iter().find(|t| !before.contains(t));
            token.is_some()
        },
        EVENT,
    );
    if !queued {
        let running = proc.running();
        panic!(
            "{cmd:?} was not queued within {EVENT:?} (running: {running})\n--- stderr:\n{}",
            proc.stderr()
        );
    }
    (proc, token.unwrap())
}

/// A TCP relay to a [`RedisServer`] whose replies can be held back: clients on it are on a slow
/// link. `hold` stops delivering replies, `pass` delivers what was held and everything after.
/// (SIGSTOP would freeze a waiter more simply, but a stopped waiter does not survive SIGCONT: see
/// `a_waiter_suspended_and_resumed_keeps_waiting`.)
pub(super) struct SlowLink {
    port: u16,
    open: Arc<(Mutex<bool>, Condvar)>,
}

impl SlowLink {
    pub(super) fn to(redis: &RedisServer) -> SlowLink {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new((Mutex::new(true), Condvar::new()));
        let (gate, upstream_port) = (Arc::clone(&open), redis.port());
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)) else {
                    continue;
                };
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                thread::spawn(move || {
                    let _ = io::copy(&mut c_in, &mut s_out);
                    let _ = s_out.shutdown(Shutdown::Write);
                });
                let gate = Arc::clone(&gate);
                thread::spawn(move || relay_replies(server, client, &gate));
            }
        });
        SlowLink { port, open }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `redlock` talking to the server through this link.
    pub(super) fn redlock(&self, redis: &RedisServer) -> Command {
        let mut cmd = redis.redlock();
        cmd.env("REDLOCK_URL", self.url());
        cmd
    }

    fn set(&self, open: bool) {
        let (lock, cvar) = &*self.open;
        *lock.lock().unwrap() = open;
        cvar.notify_all();
    }

    pub(super) fn hold(&self) {
        self.set(false);
    }

    pub(super) fn pass(&self) {
        self.set(true);
    }
}

fn relay_replies(mut from: TcpStream, mut to: TcpStream, gate: &(Mutex<bool>, Condvar)) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let (lock, cvar) = gate;
        drop(
            cvar.wait_while(lock.lock().unwrap(), |open| !*open)
                .unwrap(),
        );
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Whether process `pid` is stopped (state T in /proc).
fn stopped(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state follows the command name, which is in parentheses.
    stat.rsplit_once(") ")
        .is_some_and(|(_, rest)| rest.starts_with('T'))
}

/// Asserts that nothing of waiter `token` is left: not queued, no lease, no wake list.
#[track_caller]
fn assert_gone(redis: &RedisServer, name: &str, token: &str) {
    let ticket: Option<String> = redis.query(&["ZSCORE", &queue_key(name), token]);
    assert_eq!(ticket, None, "{token} is still queued");
    let lease: bool = redis.query(&["HEXISTS", &leases_key(name), token]);
    assert!(!lease, "{token} still has a lease");
    let wake: bool = redis.query(&["EXISTS", &wake_key(name, token)]);
    assert!(!wake, "{token} still has a wake list");
}

/// Runs one of redlock's scripts on lock `name` as redlock does: the four keys, the token, then
/// `args`.
fn script(con: &mut redis::Connection, lua: &str, name: &str, token: &str, args: &[&str]) {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(lua).arg(4).arg(lock_key(name)).arg(meta_key(name));
    cmd.arg(queue_key(name)).arg(leases_key(name)).arg(token);
    cmd.arg(args)
        .query::<redis::Value>(con)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Fails with random or LIFO wake-ups: five waiters queued one after another must run in that
/// order, and leave nothing behind but the fence record.
#[test]
fn waiters_get_the_lock_in_the_order_they_arrived() {
    let redis = or_skip!(RedisServer::start());
    let holder = hold(&redis, "k", "30s");
    let first: i64 = redis.meta("k")["fence"].parse().unwrap();
    let mut waiters = Vec::new();
    for i in 1..=5 {
        let (waiter, _) = enqueue(&redis, "k", &mut recorder(&redis, "k", &format!("W{i}")));
        waiters.push(waiter);
        assert_eq!(queue(&redis, "k").len(), i);
    }
    release(&redis, "k", &holder);
    for waiter in waiters {
        waiter.finish(EVENT).expect(0);
    }
    assert_eq!(order(&redis), "W1\nW2\nW3\nW4\nW5\n");
    let last: i64 = redis.meta("k")["fence"].parse().unwrap();
    assert!(last > first, "fence {last} after {first}");
    // No lock, no queue, no leases, no wake lists.
    assert_eq!(redis.keys(), [meta_key("k")]);
}

/// Fails with barging: a newcomer arriving during a hand-over must not take the lock from the
/// first waiter. The waiter is on a [`SlowLink`] held across the release, so that it cannot read
/// its grant (nor extend it) before the newcomer tries.
#[test]
fn a_newcomer_never_barges_into_a_hand_over() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let link = SlowLink::to(&redis);
    let holder = hold(&redis, "k", "30s");
    // W1 holds the lock until the test creates `go`.
    let (w1, t1) = enqueue(
        &redis,
        "k",
        link.redlock(&redis).current_dir(redis.dir()).args([
            "exec",
            "k",
            "--",
            "sh",
            "-c",
            "while [ ! -e go ]; do sleep 0.02; done",
        ]),
    );
    link.hold();
    release(&redis, "k", &holder);
    // Released and granted to W1 in one step, for the claim window: the key never disappears.
    assert_eq!(redis.get(&key), Some(t1.clone()));
    let pttl = redis.pttl(&key);
    assert!((1..=CLAIM_MS).contains(&pttl), "grant PTTL {pttl}");
    assert_eq!(redis.meta("k")["token"], t1, "the grant records its holder");

    let out = redis.redlock().args(["acquire", "k", "-n"]).run().expect(1);
    assert!(out.stderr.contains("busy"), "{out}");
    assert_eq!(redis.get(&key), Some(t1.clone()), "{out}");

    link.pass();
    // W1 reads its grant, starts its command and renews the lock to its TTL.
    assert!(
        wait_for(|| redis.pttl(&key) > CLAIM_MS, EVENT),
        "W1 did not extend its grant: {:?} {}\n{}",
        redis.get(&key),
        redis.pttl(&key),
        w1.stderr()
    );
    assert_eq!(redis.get(&key), Some(t1.clone()));
    redis.redlock().args(["acquire", "k", "-n"]).run().expect(1);
    std::fs::write(redis.dir().join("go"), "").unwrap();
    w1.finish(EVENT).expect(0);
    assert_eq!(redis.meta("k")["token"], t1, "W1 was the last holder");
    assert_eq!(redis.keys(), [meta_key("k")]);
}

/// Fails if a waiter that arrived later, retrying with short waits (each try queues it again and
/// makes two attempts), can get in ahead of the first waiter, even while the first is slow to
/// claim (its replies held on a [`SlowLink`]).
#[test]
fn a_waiter_keeps_its_place_while_a_later_one_retries() {
    let redis = or_skip!(RedisServer::start());
    let link = SlowLink::to(&redis);
    let holder = hold(&redis, "k", "30s");
    let (w1, _) = enqueue(
        &redis,
        "k",
        recorder(&redis, "k", "W1").env("REDLOCK_URL", link.url()),
    );
    let w2 = redis
        .sh(r#"until redlock acquire k -w 100ms > token; do :; done
               echo W2 >> order.txt
               redlock release k "$(cat token)""#)
        .current_dir(redis.dir())
        .spawn_proc();
    let tries = |p: &Proc| p.stderr().matches("is busy").count();
    assert!(
        wait_for(|| tries(&w2) >= 2, EVENT),
        "W2 does not retry:\n{}",
        w2.stderr()
    );
    link.hold();
    release(&redis, "k", &holder);
    let held = Instant::now();
    // Two whole tries of W2 fall into the reservation.
    let before = tries(&w2);
    assert!(
        wait_for(|| tries(&w2) >= before + 2, EVENT),
        "W2 stopped retrying:\n{}",
        w2.stderr()
    );
    let held = held.elapsed();
    link.pass();
    w1.finish(EVENT).expect(0);
    w2.finish(EVENT).expect(0);
    assert_eq!(
        order(&redis),
        "W1\nW2\n",
        "W1 was slow to claim for {held:?} (the claim window is {CLAIM_MS}ms)"
    );
    assert_eq!(redis.keys(), [meta_key("k")]);
}

/// Fails if a waiter suspended with Ctrl-Z and resumed with `fg` (SIGTSTP, SIGCONT) gives up
/// its place instead of waiting on; `exec` and `acquire` alike.
#[test]
fn a_waiter_suspended_and_resumed_keeps_waiting() {
    let redis = or_skip!(RedisServer::start());
    for args in [&["acquire", "k"][..], &["exec", "k", "--", "true"]] {
        let holder = hold(&redis, "k", "30s");
        // In a process group of its own, whose parent (this test) is in the same session: the
        // kernel discards SIGTSTP sent to an orphaned process group, which the test's own group
        // is when the test runner was started in the background by a shell that has exited.
        let (mut waiter, token) = enqueue(&redis, "k", redis.redlock().args(args).process_group(0));
        waiter.signal(libc::SIGTSTP);
        assert!(
            wait_for(|| stopped(waiter.id()), EVENT),
            "{args:?} did not stop"
        );
        waiter.signal(libc::SIGCONT);
        assert!(
            wait_for(|| !stopped(waiter.id()), EVENT),
            "{args:?} did not resume"
        );
        assert_eq!(
            queue(&redis, "k"),
            [token.as_str()],
            "{args:?} left the queue"
        );
        assert!(waiter.running(), "{args:?} gave up:\n{}", waiter.stderr());
        release(&redis, "k", &holder);
        let out = waiter.finish(EVENT).expect(0);
        if args[0] == "acquire" {
            assert_eq!(out.stdout.trim_end(), token);
            release(&redis, "k", &token);
        }
        assert_eq!(redis.keys(), [meta_key("k")], "{args:?}");
    }
}

/// Fails if a waiter killed while queued stalls those behind it: they get their turn within the
/// dead waiter's claim window, and the dead one is dropped from the queue.
#[test]
fn a_waiter_killed_in_the_queue_does_not_stall_it() {
    let redis = or_skip!(RedisServer::start());
    let holder = hold(&redis, "k", "30s");
    let (w1, _) = enqueue(&redis, "k", &mut recorder(&redis, "k", "W1"));
    let (w2, t2) = enqueue(&redis, "k", &mut recorder(&redis, "k", "W2"));
    let (w3, _) = enqueue(&redis, "k", &mut recorder(&redis, "k", "W3"));
    w2.signal(libc::SIGKILL);
    assert_eq!(w2.finish(EVENT).status.code(), None, "W2 was killed");
    // Its lease is still live: the lock will be granted to it after W1.
    release(&redis, "k", &holder);
    let released = Instant::now();
    w1.finish(EVENT).expect(0);
    w3.finish(Duration::from_secs(20)).expect(0);
    let waited = released.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "W3 got the lock {waited:?} after the release"
    );
    assert_eq!(order(&redis), "W1\nW3\n");
    assert_gone(&redis, "k", &t2);
    // W2's unread wake list expires with the grant.
    assert!(
        wait_for(|| redis.keys() == [meta_key("k")], EVENT),
        "{:?}",
        redis.keys()
    );
}

/// Fails if a waiter whose `--wait` runs out leaves its queue entry, lease or wake list behind,
/// or keeps the waiter behind it from its turn.
#[test]
fn a_waiter_that_times_out_leaves_nothing_behind() {
    let redis = or_skip!(RedisServer::start());
    let holder = hold(&redis, "k", "30s");
    let (quitter, tq) = enqueue(
        &redis,
        "k",
        redis.redlock().args(["acquire", "k", "-w", "500ms"]),
    );
    let (behind, tb) = enqueue(&redis, "k", &mut recorder(&redis, "k", "behind"));
    let out = quitter.finish(EVENT).expect(1);
    assert!(out.elapsed >= Duration::from_millis(500), "{out}");
    assert!(out.stderr.contains("busy"), "{out}");
    assert_gone(&redis, "k", &tq);
    assert_eq!(queue(&redis, "k"), [tb.as_str()]);

    release(&redis, "k", &holder);
    behind.finish(EVENT).expect(0);
    assert_eq!(order(&redis), "behind\n");
    assert_eq!(redis.keys(), [meta_key("k")]);
}

/// Fails if Ctrl-C on a queued `exec` runs the command, exits with anything but 130, leaves a
/// trace in Redis, or holds up the waiter behind it.
#[test]
fn ctrl_c_on_a_queued_exec_leaves_the_queue_to_the_others() {
    let redis = or_skip!(RedisServer::start());
    let holder = hold(&redis, "k", "30s");
    let (interrupted, ti) = enqueue(
        &redis,
        "k",
        redis
            .redlock()
            .current_dir(redis.dir())
            .args(["exec", "k", "--", "touch", "started"]),
    );
    let (behind, tb) = enqueue(&redis, "k", &mut recorder(&redis, "k", "behind"));
    interrupted.signal(libc::SIGINT);
    let out = interrupted.finish(EVENT).expect(130);
    assert!(out.stderr.contains("gave up"), "{out}");
    assert!(!redis.dir().join("started").exists(), "the command ran");
    assert_gone(&redis, "k", &ti);
    assert_eq!(queue(&redis, "k"), [tb.as_str()]);

    release(&redis, "k", &holder);
    behind.finish(EVENT).expect(0);
    assert_eq!(order(&redis), "behind\n");
    assert_eq!(redis.keys(), [meta_key("k")]);
}

/// Fails if waiters behind a holder that never releases are not let in when its TTL runs out
/// (by the server's clock: not before, and not much after), or not in their order.
#[test]
fn a_dead_holder_is_picked_up_at_its_ttl_in_queue_order() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    // Never released: as if its script died.
    let dead = hold(&redis, "k", "2s");
    let dead_at: i64 = redis.meta("k")["acquired_ms"].parse().unwrap();
    let pttl = redis.pttl(&key);
    assert!(pttl > 0, "the lock already expired: {pttl}");
    let (w1, t1) = enqueue(&redis, "k", redis.redlock().args(["acquire", "k"]));
    let (mut w2, _) = enqueue(&redis, "k", redis.redlock().args(["acquire", "k"]));

    let out = w1.finish(EVENT).expect(0);
    assert_eq!(out.stdout.trim_end(), t1, "the first waiter got it");
    let meta = redis.meta("k");
    assert_eq!(meta["token"], t1);
    assert_ne!(meta["token"], dead);
    let gap = meta["acquired_ms"].parse::<i64>().unwrap() - dead_at;
    assert!(
        (1_990..=3_000).contains(&gap),
        "W1 got in {gap}ms after the dead holder took its 2000ms lock"
    );
    let rest = Duration::from_millis(pttl as u64);
    assert!(
        out.elapsed + Duration::from_millis(100) >= rest,
        "W1 waited {:?} for a lock with {rest:?} left",
        out.elapsed
    );
    assert!(w2.running(), "W2 got in too:\n{}", w2.stderr());
    release(&redis, "k", &t1);
    let out = w2.finish(EVENT).expect(0);
    assert_eq!(redis.get(&key).as_deref(), Some(out.stdout.trim_end()));
}

/// Fails if waiters that all wake together when a dead holder's TTL runs out get the lock in
/// any order but their arrival order. Ten of them, so that an order left to chance (the first
/// to reach Redis wins) passes with probability 1/10! (about 3e-7), not 1/2 as with two.
#[test]
fn ten_waiters_behind_a_dead_holder_get_in_in_arrival_order() {
    let redis = or_skip!(RedisServer::start());
    // Never released; long enough for ten waiters to queue on a loaded machine.
    hold(&redis, "k", "8s");
    let mut waiters = Vec::new();
    for i in 1..=10 {
        let (w, _) = enqueue(&redis, "k", &mut recorder(&redis, "k", &format!("W{i}")));
        waiters.push(w);
    }
    let pttl = redis.pttl(&lock_key("k"));
    assert!(
        pttl > 0,
        "the dead holder's lock expired before all ten queued: the test proves nothing"
    );
    for w in waiters {
        w.finish(EVENT + Duration::from_millis(pttl as u64))
            .expect(0);
    }
    let expected: String = (1..=10).map(|i| format!("W{i}\n")).collect();
    assert_eq!(order(&redis), expected);
    assert_eq!(redis.keys(), [meta_key("k")]);
}

/// Fails with a lost wake-up: a release that lands right after the waiter queued up must wake
/// it, so it gets the lock well before the holder's 10s TTL or its own 3s block cap would have
/// let it look again. Even rounds send the release script the moment the waiter shows up in the
/// queue, before its BLPOP: the waiter talks through a proxy that holds its BLPOP back for
/// 500ms, so the release lands first on any machine (checked: the push is still in its wake
/// list); odd rounds run `redlock release` once the waiter is blocked.
#[test]
fn a_release_right_after_queueing_is_never_lost() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let mut con = redis.cli();
    let proxy = crate::common::proxy::Proxy::to(redis.port());
    let mut early = 0;
    let mut last_fence = 0;
    for round in 0..20 {
        let holder = hold(&redis, "k", "10s");
        let mut waiter = redis.redlock();
        if round % 2 == 0 {
            proxy.delay_matching("BLPOP", Duration::from_millis(500), 1);
            waiter.env("REDLOCK_URL", proxy.url());
        }
        let waiter = waiter.args(["acquire", "k"]).spawn_proc();
        let deadline = Instant::now() + EVENT;
        let token = loop {
            let first: Vec<String> = redis::cmd("ZRANGE")
                .arg(queue_key("k"))
                .arg(0)
                .arg(0)
                .query(&mut con)
                .unwrap();
            if let Some(t) = first.into_iter().next() {
                break t;
            }
            assert!(Instant::now() < deadline, "round {round}: never queued");
        };
        let released_ms = redis.now_ms();
        if round % 2 == 0 {
            script(&mut con, RELEASE_LUA, "k", &holder, RELEASE_ARGS);
            // The push still in the wake list: the waiter had not started its BLPOP yet.
            let waiting: bool = redis::cmd("EXISTS")
                .arg(wake_key("k", &token))
                .query(&mut con)
                .unwrap();
            early += u32::from(waiting);
        } else {
            let blocked = || {
                let info: String = redis.query(&["INFO", "clients"]);
                info.contains("blocked_clients:1")
            };
            assert!(wait_for(blocked, EVENT), "round {round}: no BLPOP");
            release(&redis, "k", &holder);
        }
        let now = redis.get(&key);
        assert!(
            now == Some(format!("~{token}")) || now.as_ref() == Some(&token),
            "round {round}: after the release the lock is {now:?}, not the waiter's"
        );
        let out = waiter.finish(EVENT).expect(0);
        // By the server's clock, so that the waiter's exit does not count. A lost wake-up would
        // leave it blocked until its 3s block cap, which began about when the release came.
        let waited = redis.meta("k")["acquired_ms"].parse::<i64>().unwrap() - released_ms;
        assert!(
            waited < 2_900,
            "round {round}: the waiter got the lock {waited}ms after the release"
        );
        assert_eq!(out.stdout.trim_end(), token, "round {round}");
        let fence: i64 = redis.meta("k")["fence"].parse().unwrap();
        assert!(
            fence > last_fence,
            "round {round}: fence {fence} after {last_fence}"
        );
        last_fence = fence;
        release(&redis, "k", &token);
    }
    eprintln!("{early} of 10 releases came before the waiter's BLPOP");
    assert!(
        early > 0,
        "no release came before the BLPOP: the race was not tested"
    );
    assert_eq!(redis.keys(), [meta_key("k")]);
}

/// Fails if a grant to a waiter that died frozen (SIGSTOPped across its grant, then SIGKILLed)
/// keeps the next one out longer than the claim window plus one block cap, or if anyone gets in
/// before the grant ran out.
#[test]
fn an_unused_grant_passes_to_the_next_waiter() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let holder = hold(&redis, "k", "30s");
    let (w1, t1) = enqueue(&redis, "k", redis.redlock().args(["acquire", "k"]));
    let (w2, t2) = enqueue(&redis, "k", redis.redlock().args(["acquire", "k"]));
    w1.signal(libc::SIGSTOP);
    release(&redis, "k", &holder);
    let released = Instant::now();
    assert_eq!(redis.get(&key), Some(t1.clone()), "granted to W1");
    let expires = redis.now_ms() + redis.pttl(&key);
    w1.signal(libc::SIGKILL);
    assert_eq!(w1.finish(EVENT).status.code(), None);

    let out = w2.finish(EVENT).expect(0);
    let waited = released.elapsed();
    assert_eq!(out.stdout.trim_end(), t2);
    assert!(
        waited < Duration::from_secs(6),
        "W2 got the lock {waited:?} after the release"
    );
    let acquired: i64 = redis.meta("k")["acquired_ms"].parse().unwrap();
    assert!(
        acquired >= expires - 5,
        "W2 got in {}ms before W1's grant ran out",
        expires - acquired
    );
    assert_gone(&redis, "k", &t1);
}

/// Fails if a waiter that gives up just as the lock is granted to it makes the next waiter sit
/// out the claim window. The give-up is leave.lua, sent for the frozen waiter at that instant: a
/// real signal could just as well arrive after the waiter claimed, which would be a different
/// (and also correct) path.
#[test]
fn a_waiter_leaving_with_a_grant_passes_it_on_at_once() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let holder = hold(&redis, "k", "30s");
    let (w1, t1) = enqueue(&redis, "k", redis.redlock().args(["acquire", "k"]));
    let (w2, t2) = enqueue(&redis, "k", redis.redlock().args(["acquire", "k"]));
    w1.signal(libc::SIGSTOP);
    release(&redis, "k", &holder);
    assert_eq!(redis.get(&key), Some(t1.clone()), "granted to W1");
    let expires = redis.now_ms() + redis.pttl(&key);
    script(&mut redis.cli(), LEAVE_LUA, "k", &t1, LEAVE_ARGS);
    w1.signal(libc::SIGKILL);
    drop(w1);

    let out = w2.finish(EVENT).expect(0);
    assert_eq!(out.stdout.trim_end(), t2);
    let acquired: i64 = redis.meta("k")["acquired_ms"].parse().unwrap();
    assert!(
        acquired < expires,
        "W2 got in {}ms after W1's grant would have run out: it was not passed on",
        acquired - expires
    );
    assert_gone(&redis, "k", &t1);
}

/// Fails with a thundering herd: one release wakes one waiter of ten. The counters are read once
/// the first waiter has exited with the lock and the other nine are blocked in BLPOP again (a
/// woken waiter is unblocked by the release itself and blocks again only after its attempt, so by
/// then every attempt a herd would make is counted). Between the two reads Redis sees exactly the
/// release (which grants the lock) and the first waiter's extension of it, and one attempt and
/// one BLPOP for each waiter that looked again at its
/// 3s block cap meanwhile: such a waiter blocks again on a fresh connection (its old one still
/// has the BLPOP), so it is told apart from one woken by the release, which blocks again on the
/// same connection.
#[test]
fn a_release_wakes_one_waiter_not_all() {
    let redis = or_skip!(RedisServer::start());
    let key = lock_key("k");
    let holder = hold(&redis, "k", "30s");
    // Load the release and extend scripts into the server, so that each call below is one
    // EVALSHA.
    redis
        .redlock()
        .args(["release", "other", "0123456789abcdef0123456789abcdef"])
        .run();
    redis
        .redlock()
        .args([
            "extend",
            "other",
            "0123456789abcdef0123456789abcdef",
            "--ttl",
            "1s",
        ])
        .run();
    let mut waiters = Vec::new();
    for _ in 0..10 {
        waiters.push(enqueue(&redis, "k", redis.redlock().args(["acquire", "k"])));
    }
    // The ids of the connections blocked in BLPOP.
    let blocked = || -> Vec<String> {
        let clients: String = redis.query(&["CLIENT", "LIST"]);
        clients
            .lines()
            .filter(|l| l.contains(" cmd=blpop ") && l.contains(" flags=b "))
            .filter_map(|l| Some(l.split_whitespace().next()?.to_string()))
            .collect()
    };
    let mut before = Vec::new();
    assert!(
        wait_for(
            || {
                before = blocked();
                before.len() == 10
            },
            EVENT
        ),
        "not all 10 blocked"
    );
    let (scripts, blpops) = (redis.script_calls(), redis.calls("blpop"));
    release(&redis, "k", &holder);
    let (first, first_token) = waiters.remove(0);
    let out = first.finish(EVENT).expect(0);
    assert_eq!(out.stdout.trim_end(), first_token, "{out}");
    assert_eq!(redis.get(&key).as_deref(), Some(first_token.as_str()));
    let mut after = Vec::new();
    assert!(
        wait_for(
            || {
                after = blocked();
                after.len() == 9
            },
            EVENT
        ),
        "the other nine are not all blocked again"
    );
    let scripts = redis.script_calls() - scripts;
    let blpops = redis.calls("blpop") - blpops;
    let looked_again = after.iter().filter(|id| !before.contains(id)).count() as u64;
    // The release grants the lock to the first waiter, which extends it to its TTL before it
    // prints the token (`acquire`: nobody renews it after that).
    assert_eq!(
        (scripts, blpops),
        (2 + looked_again, looked_again),
        "(script calls, BLPOPs) for one release (a grant) and the extension, with \
         {looked_again} waiters at their block cap"
    );
    let rest: Vec<String> = waiters.iter().map(|(_, t)| t.clone()).collect();
    assert_eq!(queue(&redis, "k"), rest, "the others still wait, in order");
}

#[test]
fn status_counts_the_waiters() {
    let redis = or_skip!(RedisServer::start());
    hold(&redis, "k", "30s");
    let _waiters: Vec<_> = (0..3)
        .map(|_| enqueue(&redis, "k", redis.redlock().args(["acquire", "k"])))
        .collect();

    let out = redis.redlock().args(["status", "k", "--json"]).run().ok();
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["waiters"], 3, "{v}");

    // (The table's header and row; the waiters are listed below them.)
    let out = redis.redlock().args(["status", "k"]).run().ok();
    let lines: Vec<&str> = out.lines().collect();
    let [header, row, ..] = lines[..] else {
        panic!("{out}");
    };
    let at = header
        .find("WAITING")
        .unwrap_or_else(|| panic!("no WAITING column:\n{out}"));
    assert_eq!(row[at..].split("  ").next(), Some("3"), "{out}");
}

/// Fails if an attempt whose reply never arrived leaves the lock held for its whole TTL: the
/// script ran on the server and took the lock with a token that nobody knows.
#[test]
fn an_acquire_whose_reply_is_lost_gives_the_lock_back() {
    let redis = or_skip!(RedisServer::start());
    // Load the scripts, so that the attempt and the clean-up are one EVALSHA each and run even
    // though their replies are held back.
    redis.redlock().args(["acquire", "other"]).run().ok();
    script(&mut redis.cli(), LEAVE_LUA, "other", "t", LEAVE_ARGS);
    let link = SlowLink::to(&redis);
    link.hold();
    let out = link
        .redlock(&redis)
        .args(["--io-timeout", "300ms", "acquire", "k", "--ttl", "1h"])
        .run()
        .expect(69);
    assert_one_error_line(&out);
    assert!(
        redis.meta("k").contains_key("fence"),
        "the attempt did not run: {out}"
    );
    assert!(
        wait_for(|| redis.get(&lock_key("k")).is_none(), EVENT),
        "a lock nobody can release was left for {} ms",
        redis.pttl(&lock_key("k"))
    );
    link.pass();
}

/// The acquire script as redlock runs it.
const ACQUIRE_LUA: &str = include_str!(concat!(env!("OUT_DIR"), "/acquire.lua"));

/// Fails if an attempt that reaches the server after its client gave up on it (the give-up sent
/// on another connection ran first: a frozen server thawing) takes the free lock for a token
/// nobody knows, or queues it. A give-up in doubt leaves a tombstone, which must expire.
#[test]
fn a_late_attempt_after_a_give_up_in_doubt_does_nothing() {
    let redis = or_skip!(RedisServer::start());
    let mut con = redis.cli();
    let late = "0123456789abcdef0123456789abcdef";
    // leave.lua with a tombstone of 300s (`lock::TOMBSTONE`), as after a lost reply.
    script(
        &mut con,
        LEAVE_LUA,
        "k",
        late,
        &[CLAIM_ARG, "", "", "300000"],
    );
    let tomb = format!("{}:gone:{late}", lock_key("k"));
    let pttl = redis.pttl(&tomb);
    assert!(pttl > 0 && pttl <= 300_000, "the tombstone expires: {pttl}");
    // The late attempt, joining the queue if busy.
    let args = [
        "60000",
        "host",
        "1",
        "user",
        "",
        "1",
        CLAIM_ARG,
        "3000",
        "2000",
        "0",
        "",
        META_TTL_ARG,
    ];
    script(&mut con, ACQUIRE_LUA, "k", late, &args);
    assert_eq!(
        redis.get(&lock_key("k")),
        None,
        "the late attempt took the lock"
    );
    assert!(queue(&redis, "k").is_empty(), "the late attempt queued");
    // Another token is not affected; and a normal give-up leaves no tombstone.
    let other = "fedcba9876543210fedcba9876543210";
    script(&mut con, ACQUIRE_LUA, "k", other, &args);
    assert_eq!(redis.get(&lock_key("k")).as_deref(), Some(other));
    script(&mut con, LEAVE_LUA, "k", other, &[CLAIM_ARG, "", "", "0"]);
    assert_eq!(redis.pttl(&format!("{}:gone:{other}", lock_key("k"))), -2);
}
