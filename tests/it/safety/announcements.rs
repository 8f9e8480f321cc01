//! What a keeper (`acquire --while-pid`) and `exec` make of the lock's announcements, and of
//! missing them: a place released properly is never taken for a loss (its release is marked as a
//! plain lock's is, and the keeper says it runs once it listens), an announcement nobody can
//! back with the lock's keys changes nothing, the release's mark lives no longer than a renewal
//! could read it, and a keeper whose Redis is frozen tells its pid once the lock's TTL has run
//! out. Real servers, real processes; every wait is on an event, with a generous bound.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::keeper::{SOON, keepers_of};
use crate::common::proxy::Proxy;
use crate::common::{RedisServer, Run, default_signals, lock_key, wait_for, wait_subscribed};

/// A `sleep 1000` to keep locks for, leading a process group of its own (as a script started by
/// cron, CI or a terminal does), with the default signal dispositions: SIGTERM ends it. Killed
/// on drop, so that a failing test leaves it (and its keeper, and the test's output pipes it
/// holds) behind.
struct Leader(Child);

impl Leader {
    fn start() -> Leader {
        let mut cmd = Command::new("sleep");
        default_signals(&mut cmd);
        Leader(
            cmd.arg("1000")
                .process_group(0)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    fn id(&self) -> u32 {
        self.0.id()
    }

    fn exited(&mut self) -> bool {
        self.0.try_wait().unwrap().is_some()
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `acquire ARGS --while-pid PID` through `cmd`: the token (stderr goes to `stderr`).
fn acquire_for(mut cmd: Command, args: &[&str], pid: u32, stderr: Stdio) -> String {
    let out = cmd
        .arg("acquire")
        .args(args)
        .args(["--while-pid", &pid.to_string()])
        .stdin(Stdio::null())
        .stderr(stderr)
        .output()
        .unwrap();
    assert!(out.status.success(), "acquire failed: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Waits until the keepers of `pid` have ended, then checks that `pid` was not told (the
/// default --on-lost is SIGTERM, which ends it).
#[track_caller]
fn keeper_ended_quietly(pid: &mut Leader, what: &str) {
    assert!(
        wait_for(|| keepers_of(pid.id()).is_empty(), SOON),
        "{what}: the keeper outlived the release"
    );
    assert!(
        !pid.exited(),
        "{what}: the keeper sent SIGTERM to a pid whose place was released properly"
    );
}

/// Releases `k` (`token`) while every subscription to the server is killed, again and again
/// until the release is done: no keeper can hear its announcement.
fn release_unheard(redis: &RedisServer, token: &str) {
    let released = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Bounded: the release below takes milliseconds.
            let deadline = Instant::now() + SOON;
            while !released.load(Ordering::SeqCst) && Instant::now() < deadline {
                redis.query::<i64>(&["CLIENT", "KILL", "TYPE", "pubsub"]);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        redis
            .redlock()
            .args(["release", "k", token])
            .run()
            .expect(0);
        released.store(true, Ordering::SeqCst);
    });
}

/// Fails before places were marked at their release and before the keeper's readiness meant
/// "subscribed" (in about 2 of 90 runs a keeper missed the announcement of a release made right
/// after acquire returned, and took its place gone for a loss: SIGTERM to a script that did
/// nothing wrong). 100 rounds of take-a-place-and-give-it-back; every keeper must end quietly.
#[test]
fn a_hundred_places_released_at_once_never_get_a_sigterm() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let (term, done) = (dir.path().join("term"), dir.path().join("done"));
    let script = format!(
        "trap 'echo TERM >>\"{}\"' TERM
         i=0
         while [ $i -lt 100 ]; do
           T=$(redlock acquire k --slots 2 --ttl 3s --while-pid $$) || exit 1
           redlock release k \"$T\" || exit 2
           i=$((i + 1))
         done
         echo done >'{}'
         while :; do sleep 0.1; done",
        term.display(),
        done.display()
    );
    let mut proc = redis.sh(&script).spawn_proc();
    let finished = wait_for(
        || done.exists() || !proc.running(),
        Duration::from_secs(240),
    );
    assert!(
        finished && done.exists(),
        "the loop did not finish\n{}",
        proc.stderr()
    );
    // A keeper that missed its release finds the mark at its next renewal (TTL/3).
    assert!(
        wait_for(|| keepers_of(proc.id()).is_empty(), SOON),
        "keepers outlived their releases"
    );
    assert!(
        !term.exists(),
        "SIGTERM(s) to a script that released its places properly\n{}",
        proc.stderr()
    );
    assert!(
        !proc.stderr().contains("lost the lock"),
        "{}",
        proc.stderr()
    );
}

/// Fails while the keeper said it runs before its subscription was confirmed: acquire returned
/// (and the script could release) while nobody listened on the lock's channel yet. The keeper's
/// SUBSCRIBE is held back half a second on its way (a slow link), which made the race certain.
#[test]
fn acquire_returns_once_the_keeper_listens() {
    let redis = or_skip!(RedisServer::start());
    let proxy = Proxy::to(redis.port());
    proxy.delay_matching("SUBSCRIBE", Duration::from_millis(500), 1);
    let pid = Leader::start();
    let mut cmd = crate::common::redlock();
    cmd.env("REDLOCK_URL", proxy.url());
    acquire_for(cmd, &["k"], pid.id(), Stdio::null());
    let channel = format!("{}:events", lock_key("k"));
    let (_, listeners): (String, i64) = redis.query(&["PUBSUB", "NUMSUB", &channel]);
    assert_eq!(listeners, 1, "acquire returned before its keeper listened");
}

/// Fails before places were marked at their release: a Redis 7 ACL user without pub/sub
/// channels (the default for new users) cannot subscribe, so the keeper never hears the release
/// and took the missing place for a loss every time. The keeper must also not wait for a
/// subscription that is refused (acquire returns).
#[test]
fn a_user_without_channels_releases_its_place_without_a_sigterm() {
    let redis = or_skip!(RedisServer::start());
    let url = redis.user_without_channels("u", "pw");
    let with_user = || {
        let mut cmd = crate::common::redlock();
        cmd.env("REDLOCK_URL", &url);
        cmd
    };
    let mut pid = Leader::start();
    let token = acquire_for(
        with_user(),
        &["k", "--slots", "2", "--ttl", "1s"],
        pid.id(),
        Stdio::null(),
    );
    with_user().args(["release", "k", &token]).run().expect(0);
    keeper_ended_quietly(&mut pid, "a user without channels");
}

/// Fails before places were marked at their release: the keeper's subscription is down while
/// the place is released (killed, again and again, until the release is done), so the keeper
/// took the missing place for a loss.
#[test]
fn a_place_released_while_the_subscription_is_down_gets_no_sigterm() {
    let redis = or_skip!(RedisServer::start());
    let mut pid = Leader::start();
    let token = acquire_for(
        redis.redlock(),
        &["k", "--slots", "2", "--ttl", "1s"],
        pid.id(),
        Stdio::null(),
    );
    wait_subscribed(&[&redis], "k");
    release_unheard(&redis, &token);
    keeper_ended_quietly(&mut pid, "a killed subscription");
}

/// The number of announcements `text` says were ignored.
fn ignored(text: &str) -> usize {
    text.matches("not borne out by the lock's keys").count()
}

/// Fails while announcements were obeyed without asking Redis: anyone who may PUBLISH (the token
/// is readable with GET) killed exec's command with `forced:TOKEN`, or stopped it with
/// `preempted:TOKEN:...`, while its lock stayed held. Planted ones change nothing: the command
/// runs to its end and exec exits 0.
#[test]
fn planted_announcements_do_not_stop_execs_command() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let proc = redis
        .redlock()
        .args(["-v", "exec", "k", "--ttl", "3s", "--preemptible", "--"])
        .args([
            "sh",
            "-c",
            "while [ ! -e \"$1\" ]; do sleep 0.05; done; echo finished",
        ])
        .arg("sh")
        .arg(&go)
        .spawn_proc();
    wait_subscribed(&[&redis], "k");
    let token = redis.get(&lock_key("k")).unwrap();
    let channel = format!("{}:events", lock_key("k"));
    for forged in [
        format!("forced:{token}:1764597600000:mallory@x (pid 1)"),
        format!("released:{token}"),
        format!("preempted:{token}:1764597600000:mallory@x (pid 1)"),
    ] {
        redis.query::<i64>(&["PUBLISH", &channel, &forged]);
    }
    let heard = wait_for(|| ignored(&proc.stderr()) == 3, SOON);
    assert!(heard, "not all three were looked into\n{}", proc.stderr());
    assert_eq!(redis.get(&lock_key("k")), Some(token));
    std::fs::write(&go, "").unwrap();
    let out = proc.finish(SOON).expect(0);
    assert!(out.stdout.contains("finished"), "{out}");
}

/// Fails while announcements were obeyed without asking Redis: a planted `released:TOKEN` ended
/// the keeper quietly (the lock then expired under a pid that thought it held it), a planted
/// `forced:TOKEN` sent SIGTERM to it, and `preempted:TOKEN:...` stopped a --preemptible one.
/// Planted ones change nothing, for a plain lock and for a place: the keeper keeps the lock.
#[test]
fn planted_announcements_do_not_end_a_keeper() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    for (key, flags, planted) in [
        ("plain", &["--preemptible"][..], 3),
        ("place", &["--slots", "2"][..], 2),
    ] {
        let log = dir.path().join(key);
        let mut pid = Leader::start();
        let mut args = vec![key, "--ttl", "1500ms"];
        args.extend_from_slice(flags);
        let mut cmd = redis.redlock();
        cmd.arg("-v");
        let token = acquire_for(
            cmd,
            &args,
            pid.id(),
            Stdio::from(std::fs::File::create(&log).unwrap()),
        );
        wait_subscribed(&[&redis], key);
        let channel = format!("{}:events", lock_key(key));
        let mut forged = vec![
            format!("released:{token}"),
            format!("forced:{token}:1764597600000:mallory@x (pid 1)"),
        ];
        if planted == 3 {
            forged.push(format!("preempted:{token}:1764597600000:mallory@x (pid 1)"));
        }
        for f in &forged {
            redis.query::<i64>(&["PUBLISH", &channel, f]);
        }
        let read = || std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            wait_for(|| ignored(&read()) == planted, SOON),
            "{key}: not all were looked into\n{}",
            read()
        );
        // Two renewals later (TTL/3 each): still kept, the pid untold.
        assert!(renewed_twice(&redis, key), "{key}: not renewed\n{}", read());
        assert_eq!(
            keepers_of(pid.id()).len(),
            1,
            "{key}: the keeper ended\n{}",
            read()
        );
        assert!(!pid.exited(), "{key}: the pid was told\n{}", read());
        let status = redis.redlock().args(["status", key]).run().ok();
        assert!(status.contains(&token[..8]), "{key}: not held: {status}");
        assert!(!read().contains("lost the lock"), "{}", read());
        let id = pid.id();
        drop(pid);
        assert!(wait_for(|| keepers_of(id).is_empty(), SOON));
    }
}

/// Whether the key of lock `name` was renewed twice (its PTTL went up) within [`SOON`].
fn renewed_twice(redis: &RedisServer, name: &str) -> bool {
    let (mut last, mut ups) = (redis.pttl(&lock_key(name)), 0);
    wait_for(
        || {
            let now = redis.pttl(&lock_key(name));
            if now > last + 100 {
                ups += 1;
            }
            last = now;
            ups >= 2
        },
        SOON,
    )
}

/// Fails while a kept lock's release mark (`:gone:TOKEN`) lasted TTL + 60 s, and while a place's
/// release left none: it need last no longer than the keeper could still renew, the TTL and 2 s
/// (see `mark_released` in common.lua). For a kept plain lock and a kept place, each with its
/// keeper stopped, so that it cannot take the mark away; thawed, the keeper does, and ends
/// quietly. A place nobody keeps leaves no mark.
#[test]
fn a_release_mark_lasts_the_ttl_and_two_seconds_at_most() {
    let redis = or_skip!(RedisServer::start());
    let marks = |key: &str| {
        let gone = format!("{}:gone:", lock_key(key));
        redis
            .keys()
            .into_iter()
            .filter(|k| k.starts_with(&gone))
            .collect::<Vec<_>>()
    };
    redis
        .redlock()
        .args(["exec", "free", "--slots", "2", "--ttl", "5s", "--", "true"])
        .run()
        .expect(0);
    assert_eq!(marks("free"), Vec::<String>::new(), "a place nobody keeps");
    for (key, flags) in [("plain", &[][..]), ("place", &["--slots", "2"][..])] {
        let mut pid = Leader::start();
        let mut args = vec![key, "--ttl", "5s"];
        args.extend_from_slice(flags);
        let token = acquire_for(redis.redlock(), &args, pid.id(), Stdio::null());
        let keeper = keepers_of(pid.id());
        assert_eq!(keeper.len(), 1);
        crate::common::signal(keeper[0], libc::SIGSTOP);
        let released = redis.redlock().args(["release", key, &token]).run();
        let mark = marks(key);
        let pttl = mark.first().map(|m| redis.pttl(m));
        crate::common::signal(keeper[0], libc::SIGCONT);
        released.expect(0);
        assert_eq!(mark.len(), 1, "{key}: {mark:?}");
        let pttl = pttl.unwrap();
        assert!(
            pttl > 0 && pttl <= 7000,
            "{key}: the mark's PTTL is {pttl} ms"
        );
        keeper_ended_quietly(&mut pid, key);
        assert!(wait_for(|| marks(key).is_empty(), SOON), "{:?}", marks(key));
    }
}

/// Fails if the keeper never gives up at its deadline: with the server frozen (SIGSTOP: it
/// accepts connections and never answers), no renewal succeeds, and the keeper must tell its
/// pid (SIGTERM, the default --on-lost) once the lock's TTL has run out, not before the lock may
/// have expired and not long after: within the TTL, the I/O and connect timeouts of the renewal
/// then in flight, and a generous 5 s for a loaded machine.
#[test]
fn a_keeper_under_a_frozen_server_tells_its_pid_once_the_ttl_ran_out() {
    let redis = or_skip!(RedisServer::start());
    let mut pid = Leader::start();
    acquire_for(
        redis.redlock(),
        &[
            "k",
            "--ttl",
            "2s",
            "--io-timeout",
            "300ms",
            "--connect-timeout",
            "300ms",
        ],
        pid.id(),
        Stdio::null(),
    );
    redis.pause();
    let frozen = Instant::now();
    let told = wait_for(|| pid.exited(), Duration::from_secs(20));
    let after = frozen.elapsed();
    redis.resume();
    drop(pid);
    assert!(
        told,
        "the keeper never told its pid while the server was frozen"
    );
    // The last renewal succeeded at most TTL/3 before the freeze: the lock is surely ours until
    // 2/3 of the TTL after it.
    assert!(
        after >= Duration::from_millis(1300),
        "told after {after:?}: before the lock could have expired"
    );
    assert!(
        after <= Duration::from_millis(2000 + 300 + 300 + 300 + 5000),
        "told {after:?} after the freeze: long after the TTL ran out"
    );
}

/// Found by review (issue 26): a kept lock's release is marked in Redis only, so a keeper that
/// did not hear (or could not confirm) the announcement learns of the release from the mark at
/// its next renewal; if the server restarts (a deploy, a crash: without persistence, or before
/// its next save) in that TTL/3, the mark is gone with the lock, and the keeper takes the
/// missing key for a loss: SIGTERM to a script that had released its lock properly (release
/// exited 0) and has gone on to other work. The same with a stall longer than what is left of
/// the TTL (the keeper gives up at its deadline). The release could tell the keeper directly
/// (it runs on the same host as a rule), so that no fault after a release can make it a loss.
/// Fails today: the pid gets SIGTERM about TTL/3 after the release.
#[test]
fn a_restart_after_an_unheard_release_gets_no_sigterm() {
    let mut redis = or_skip!(RedisServer::start());
    let mut pid = Leader::start();
    let token = acquire_for(
        redis.redlock(),
        &["k", "--ttl", "6s"],
        pid.id(),
        Stdio::null(),
    );
    wait_subscribed(&[&redis], "k");
    release_unheard(&redis, &token);
    redis.kill();
    redis.restart();
    keeper_ended_quietly(&mut pid, "a restart after the release");
}

/// Found by review (issue 26): on a quorum, the read that should bear out an announcement
/// counts an inconclusive answer as confirmation. With one node of three not answering (frozen
/// here; down would do) and a second one slow for a moment, the read gets one answer: verdict
/// unknown, no token, and `borne_out` takes "no token" for "no longer ours". A planted
/// `forced:TOKEN` on the first node then stops the command (exit 75, "it was force-released")
/// while every node still holds the lock, which then stays held for nobody until its TTL. An
/// announcement should be acted on only when a majority answered and the token is not on it.
/// Fails today (exit 75).
#[test]
fn a_planted_announcement_is_not_borne_out_by_too_few_answers() {
    let nodes = or_skip!(crate::common::nodes::Nodes::start(3));
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let proc = nodes
        .redlock()
        .args([
            "-v",
            "exec",
            "q",
            "--ttl",
            "30s",
            "--io-timeout",
            "500ms",
            "--",
        ])
        .args([
            "sh",
            "-c",
            "while [ ! -e \"$1\" ]; do sleep 0.05; done; echo finished",
        ])
        .arg("sh")
        .arg(&go)
        .spawn_proc();
    let servers: Vec<&RedisServer> = nodes.servers().collect();
    wait_subscribed(&servers[..1], "q");
    let token = servers[0].get(&lock_key("q")).unwrap();
    servers[1].pause();
    servers[2].pause();
    let channel = format!("{}:events", lock_key("q"));
    servers[0].query::<i64>(&["PUBLISH", &channel, &format!("forced:{token}")]);
    let judged = wait_for(
        || {
            let err = proc.stderr();
            err.contains("not borne out") || err.contains("lost the lock")
        },
        Duration::from_secs(10),
    );
    servers[1].resume();
    servers[2].resume();
    std::fs::write(&go, "").unwrap();
    let out = proc.finish(Duration::from_secs(30));
    assert!(judged, "{out}");
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stdout.contains("finished"), "{out}");
}
