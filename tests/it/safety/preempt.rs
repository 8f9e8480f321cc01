//! `--preempt` / `--preemptible`: a newcomer that asks for it goes to the head of the queue and
//! asks a holder that opted in to stop; the holder's `exec` stops its command as on a lost lock
//! (75, "preempted by …"), still holding the lock until the command has stopped, then releases it
//! to the preemptor. A holder that did not opt in is never asked: the preemptor waits for it,
//! first in line, and says that it declined.

use std::time::Duration;

use crate::common::*;

/// A command that writes its pid to `hpid`, and on SIGTERM takes a moment (the lock must still be
/// ours meanwhile), appends `stopped` to `ran` and exits 0.
const SLOW_TO_STOP: &str = "trap 'sleep 0.3; echo stopped >> ran; exit 0' TERM; echo $$ > hpid; \
                            while :; do sleep 0.05; done";

fn ran(dir: &tempfile::TempDir) -> String {
    std::fs::read_to_string(dir.path().join("ran")).unwrap_or_default()
}

fn events(redis: &RedisServer, name: &str, kind: &str) -> usize {
    let out = redis.redlock().args(["log", name, "--json"]).run().ok();
    let needle = format!(r#""event":"{kind}""#);
    out.lines().filter(|l| l.contains(&needle)).count()
}

/// `exec k --preempt`, in `dir`, whose command appends `preemptor` to `ran`.
fn preemptor(mut redlock: std::process::Command, dir: &std::path::Path) -> Proc {
    redlock
        .args([
            "exec",
            "k",
            "--preempt",
            "--",
            "sh",
            "-c",
            "echo preemptor >> ran",
        ])
        .current_dir(dir)
        .spawn_proc()
}

#[test]
fn a_preemptible_holder_is_stopped_and_the_preemptor_goes_next() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    // A long TTL: the holder hears of the preemption at once (its renewal is 20 s away).
    let mut holder = redis
        .redlock()
        .args(["exec", "deploy", "--ttl", "60s", "--preemptible", "--"])
        .args(["sh", "-c", SLOW_TO_STOP])
        .current_dir(dir.path())
        .spawn_proc();
    assert!(
        wait_for(|| dir.path().join("hpid").exists(), HANG),
        "{}",
        holder.stderr()
    );
    let appender = |name: &str, extra: &[&str]| {
        redis
            .redlock()
            .args(["exec", "deploy", "--note", name])
            .args(extra)
            .args(["--", "sh", "-c", &format!("echo {name} >> ran")])
            .current_dir(dir.path())
            .spawn_proc()
    };
    let plain = appender("plain", &[]);
    assert!(wait_for(|| queue(&redis, "deploy").len() == 1, HANG));
    let preemptor = appender("preemptor", &["--preempt"]);
    let out = preemptor.finish(HANG).expect(0);
    assert!(out.stderr.contains("asked to stop by "), "{out}");
    assert!(holder.running() || !holder.stderr().is_empty());
    let held = holder.finish(HANG).expect(75);
    assert!(
        held.stderr.contains("'deploy' was preempted by ") && held.stderr.contains("(pid "),
        "{held}"
    );
    plain.finish(HANG).expect(0);
    // The holder's command had stopped before the preemptor ran; the plain waiter, who came
    // first, went after it.
    assert_eq!(ran(&dir), "stopped\npreemptor\nplain\n");
    assert_eq!(events(&redis, "deploy", "preempted"), 1);
    assert_eq!(
        redis.keys_and_histories(),
        [format!("{}:log", lock_key("deploy")), meta_key("deploy")]
    );
}

#[test]
fn a_holder_that_did_not_opt_in_is_waited_for() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let holder = hold(&redis, "k", "60s");
    let plain = redis
        .redlock()
        .args(["exec", "k", "--", "sh", "-c", "echo plain >> ran"])
        .current_dir(dir.path())
        .spawn_proc();
    assert!(wait_for(|| queue(&redis, "k").len() == 1, HANG));
    let mut preemptor = preemptor(redis.redlock(), dir.path());
    preemptor.wait_for_stderr(
        "(not preemptible: it did not opt in with --preemptible)",
        HANG,
    );
    // Nothing asked the holder to stop: it still holds the lock, with no preemption recorded.
    assert_eq!(redis.get(&lock_key("k")), Some(holder.clone()));
    assert!(!redis.meta("k").contains_key("preempted"));
    assert_eq!(events(&redis, "k", "preempted"), 0);
    // The preemptor is first in line all the same.
    assert_eq!(queue(&redis, "k").len(), 2);
    release(&redis, "k", &holder);
    preemptor.finish(HANG).expect(0);
    plain.finish(HANG).expect(0);
    assert_eq!(ran(&dir), "preemptor\nplain\n");
}

/// `--on-lost ignore`: the preempted command is not signalled; it finishes, and the lock goes
/// to the preemptor after it. A success stays a success, as for a lost lock.
#[test]
fn on_lost_ignore_lets_a_preempted_command_finish() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let mut holder = redis
        .redlock()
        .args(["exec", "k", "--preemptible", "--on-lost", "ignore", "--", "sh", "-c"])
        .arg("trap 'echo signalled >> ran' TERM; touch up; while [ ! -e go ]; do sleep 0.05; done; echo done >> ran")
        .current_dir(dir.path())
        .spawn_proc();
    assert!(wait_for(|| dir.path().join("up").exists(), HANG));
    let mut preemptor = preemptor(redis.redlock(), dir.path());
    holder.wait_for_stderr("letting the command finish (--on-lost ignore)", HANG);
    preemptor.wait_for_stderr("asked to stop by ", HANG);
    std::fs::write(dir.path().join("go"), "").unwrap();
    holder.finish(HANG).expect(0);
    preemptor.finish(HANG).expect(0);
    assert_eq!(ran(&dir), "done\npreemptor\n");
}

/// A holder that cannot hear the announcement (an ACL without the channel) finds the preemption
/// at its next renewal (TTL/3).
#[test]
fn the_renewal_finds_a_preemption_the_holder_did_not_hear() {
    let redis = or_skip!(RedisServer::start());
    redis.query::<()>(&[
        "ACL",
        "SETUSER",
        "deaf",
        "on",
        ">pw",
        "~*",
        "resetchannels",
        "+@all",
        "-subscribe",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let holder = redlock()
        .env(
            "REDLOCK_URL",
            format!("redis://deaf:pw@127.0.0.1:{}", redis.port()),
        )
        .args(["exec", "k", "--ttl", "3s", "--preemptible", "--"])
        .args(["sh", "-c", SLOW_TO_STOP])
        .current_dir(dir.path())
        .spawn_proc();
    assert!(
        wait_for(|| dir.path().join("hpid").exists(), HANG),
        "{}",
        holder.stderr()
    );
    let preemptor = preemptor(redis.redlock(), dir.path());
    preemptor.finish(HANG).expect(0);
    let held = holder.finish(HANG).expect(75);
    assert!(held.stderr.contains("was preempted by "), "{held}");
    assert_eq!(ran(&dir), "stopped\npreemptor\n");
}

/// A quorum: the holder is asked on every node, and hears it from any of them (the renewal
/// counted the nodes' "preempted" as refusals, and the holder took it for a lost lock).
#[test]
fn a_quorum_holder_is_preempted_too() {
    let nodes = or_skip!(crate::common::nodes::Nodes::start(3));
    let dir = nodes.dir();
    let holder = nodes
        .redlock()
        .args(["exec", "k", "--ttl", "3s", "--preemptible", "--"])
        .args(["sh", "-c", SLOW_TO_STOP])
        .current_dir(dir)
        .spawn_proc();
    assert!(
        wait_for(|| dir.join("hpid").exists(), HANG),
        "{}",
        holder.stderr()
    );
    let preemptor = preemptor(nodes.redlock(), dir);
    preemptor.finish(HANG).expect(0);
    let held = holder.finish(HANG).expect(75);
    assert!(held.stderr.contains("was preempted by "), "{held}");
    assert_eq!(
        std::fs::read_to_string(dir.join("ran")).unwrap(),
        "stopped\npreemptor\n"
    );
}

#[test]
fn preempt_refuses_what_cannot_work() {
    let redis = or_skip!(RedisServer::start());
    for args in [
        &["exec", "k", "--preempt", "-n", "--", "true"][..],
        &["exec", "k", "--preempt", "--slots", "2", "--", "true"],
        &["exec", "k", "--preemptible", "--shared", "--", "true"],
        &["acquire", "k", "--preemptible"],
    ] {
        let out = redis.redlock().args(args).run().expect(2);
        assert_one_error_line(&out);
        assert!(out.stderr.contains("--preempt"), "{args:?}: {out}");
    }
    assert_eq!(redis.dbsize(), 0);
}

// An adversarial review attacked `--preempt` / `--preemptible`: each test below failed before its
// fix (a script's child ran beside the preemptor; a forged announcement stopped a holder that had
// not opted in; a preemptor queued behind a writer on a shared lock; a second SIGTERM cut a
// stopping command's cleanup short; a request made before the holder listened waited for its
// renewal).

fn read(dir: &tempfile::TempDir, file: &str) -> String {
    std::fs::read_to_string(dir.path().join(file)).unwrap_or_default()
}

/// A preempted `exec -- ./script.sh` whose work is a child of the script: SIGTERM goes to the
/// script's pid only; the shell dies at once, its child runs on, redlock reaps the shell and
/// releases, and the preemptor runs beside the child (without --max-runtime, which adopts and
/// stops orphans). The README's own example (`exec staging --preemptible -- ./deploy-preview.sh`)
/// has this shape.
#[test]
fn a_preempted_scripts_child_never_runs_beside_the_preemptor() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    // `; true` keeps the outer shell from exec'ing the inner one; the inner one lets go of the
    // pipes (it outlives the holder).
    let holder = redis
        .redlock()
        .args(["exec", "k", "--ttl", "60s", "--preemptible", "--"])
        .args([
            "sh",
            "-c",
            "sh -c 'echo $$ > wpid; while :; do sleep 0.05; done' >/dev/null 2>&1; true",
        ])
        .current_dir(dir.path())
        .spawn_proc();
    assert!(wait_for(|| !read(&dir, "wpid").trim().is_empty(), HANG));
    wait_subscribed(&[&redis], "k");
    let preemptor = redis
        .redlock()
        .args(["exec", "k", "--preempt", "--", "sh", "-c"])
        .arg("if kill -0 $(cat wpid) 2>/dev/null; then echo beside >> ran; else echo alone >> ran; fi")
        .current_dir(dir.path())
        .spawn_proc();
    preemptor.finish(HANG).expect(0);
    holder.finish(HANG).expect(75);
    let ran = read(&dir, "ran");
    if let Ok(pid) = read(&dir, "wpid").trim().parse::<i32>() {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert_eq!(
        ran, "alone\n",
        "the preempted command's child ran beside the preemptor"
    );
}

/// A holder that did not opt in "is never asked": yet a `preempted:TOKEN:..` message on the
/// channel, from any client that can publish there and read the lock key, stops its command
/// (the alert even says "(--preemptible)"), and nothing is in the history.
#[test]
fn an_announcement_does_not_stop_a_holder_that_did_not_opt_in() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let holder = redis
        .redlock()
        .args(["exec", "k", "--ttl", "60s", "--", "sh", "-c"])
        .arg("touch up; while [ ! -e go ]; do sleep 0.05; done")
        .current_dir(dir.path())
        .spawn_proc();
    assert!(wait_for(|| dir.path().join("up").exists(), HANG));
    wait_subscribed(&[&redis], "k");
    let token = redis.get(&lock_key("k")).unwrap();
    let n: i64 = redis.query(&[
        "PUBLISH",
        &format!("{}:events", lock_key("k")),
        &format!("preempted:{token}:1:mallory@x (pid 1)"),
    ]);
    assert_eq!(n, 1);
    // Bounded: a holder that acts on it says so within milliseconds.
    let stopped = wait_for(
        || holder.stderr().contains("was preempted by"),
        Duration::from_secs(3),
    );
    std::fs::write(dir.path().join("go"), "").unwrap();
    let out = holder.finish(HANG);
    assert!(
        !stopped,
        "a holder without --preemptible was stopped:\n{out}"
    );
    out.expect(0);
}

/// A plain writer with `--preempt` on a `--shared` lock held by readers is accepted, but queues
/// behind the plain writer that came first: the README says it goes ahead of every waiter
/// without --preempt (acquire.lua passes `ahead` false when the lock key is '#shared').
#[test]
fn a_preemptor_goes_ahead_on_a_shared_lock_too() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let reader = redis
        .redlock()
        .args(["exec", "k", "--shared", "--", "sh", "-c"])
        .arg("touch up; while [ ! -e go ]; do sleep 0.05; done")
        .current_dir(dir.path())
        .spawn_proc();
    assert!(wait_for(|| dir.path().join("up").exists(), HANG));
    let writer = |name: &str, extra: &[&str]| {
        redis
            .redlock()
            .args(["exec", "k"])
            .args(extra)
            .args(["--", "sh", "-c", &format!("echo {name} >> ran")])
            .current_dir(dir.path())
            .spawn_proc()
    };
    let plain = writer("plain", &[]);
    assert!(wait_for(|| queue(&redis, "k").len() == 1, HANG));
    let preemptor = writer("preemptor", &["--preempt"]);
    assert!(wait_for(|| queue(&redis, "k").len() == 2, HANG));
    std::fs::write(dir.path().join("go"), "").unwrap();
    reader.finish(HANG).expect(0);
    plain.finish(HANG).expect(0);
    preemptor.finish(HANG).expect(0);
    assert_eq!(read(&dir, "ran"), "preemptor\nplain\n");
}

/// A preemption that comes while `--max-runtime` is already stopping the command must add
/// nothing (as the README says of a limit that comes while the command is being stopped): the
/// change sends a second SIGTERM, cutting short the command's own cleanup.
#[test]
fn a_preemption_while_the_limit_stops_the_command_sends_no_second_sigterm() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let mut holder = redis
        .redlock()
        .args(["exec", "k", "--ttl", "60s", "--max-runtime", "300ms"])
        .args(["--kill-after", "30s", "--preemptible", "--", "sh", "-c"])
        .arg(
            "trap 'echo term >> terms' TERM; touch up; \
             while [ ! -e go ]; do sleep 0.05; done; exit 0",
        )
        .current_dir(dir.path())
        .spawn_proc();
    holder.wait_for_stderr("(--max-runtime); sending SIGTERM", HANG);
    assert!(wait_for(|| read(&dir, "terms") == "term\n", HANG));
    let preemptor = redis
        .redlock()
        .args(["exec", "k", "--preempt", "--", "true"])
        .current_dir(dir.path())
        .spawn_proc();
    // The holder hears the request (pub/sub, or the renewal at TTL/3 at the latest).
    holder.wait_for_stderr("was preempted by", HANG);
    // A signal sent with the alert reaches the shell's trap before it next looks for `go`.
    std::fs::write(dir.path().join("go"), "").unwrap();
    holder.finish(HANG).expect(124);
    preemptor.finish(HANG).expect(0);
    assert_eq!(
        read(&dir, "terms"),
        "term\n",
        "a second SIGTERM reached the command"
    );
}

/// A preemptor that asks in the holder's first moments (before its listener subscribed, 50 ms
/// after the command started) is heard only at the renewal, TTL/3 later (20 s here, 10 s with the
/// default TTL): nothing looks at META `preempted` once the subscription is made.
#[test]
fn a_preemption_in_the_holders_first_moments_is_heard_at_once() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let holder = redis
        .redlock()
        .args(["exec", "k", "--ttl", "60s", "--preemptible", "--"])
        .args(["sh", "-c", "while :; do sleep 0.05; done"])
        .current_dir(dir.path())
        .spawn_proc();
    // As soon as the lock is taken: before the holder's listener subscribes.
    assert!(wait_for(|| redis.get(&lock_key("k")).is_some(), HANG));
    let preemptor = redis
        .redlock()
        .args(["exec", "k", "--preempt", "--", "true"])
        .current_dir(dir.path())
        .spawn_proc();
    let started = std::time::Instant::now();
    let out = holder.finish(HANG).expect(75);
    preemptor.finish(HANG).expect(0);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "heard after {:?}:\n{out}",
        started.elapsed()
    );
}

/// A preemptor that queues while the lock has just been granted to a `--preemptible` waiter
/// that has not used it yet (stopped across its grant) asks that waiter to stop in its own first
/// step, as it asks any holder, not at its next look (up to 3 s later): META `preempted` names the
/// waiter's token before the waiter runs again, and the history has one `preempted`.
#[test]
fn a_preemptible_waiter_that_takes_the_lock_with_a_preemptor_queued_is_asked_at_once() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let holder = hold(&redis, "k", "60s");
    let waiter = redis
        .redlock()
        .args(["exec", "k", "--ttl", "60s", "--preemptible", "--"])
        .args(["sh", "-c", "while :; do sleep 0.05; done"])
        .current_dir(dir.path())
        .spawn_proc();
    assert!(wait_for(|| queue(&redis, "k").len() == 1, HANG));
    // Stopped, it cannot use the lock when it is granted to it.
    waiter.signal(libc::SIGSTOP);
    release(&redis, "k", &holder);
    let granted = redis.get(&lock_key("k")).unwrap_or_default();
    assert!(
        granted != holder && !granted.starts_with('~'),
        "not granted: {granted}"
    );
    let preemptor = redis
        .redlock()
        .args(["exec", "k", "--preempt", "--", "true"])
        .current_dir(dir.path())
        .spawn_proc();
    assert!(wait_for(|| queue(&redis, "k").len() == 1, HANG));
    let asked = redis
        .meta("k")
        .get("preempted")
        .cloned()
        .unwrap_or_default();
    assert!(asked.starts_with(&format!("{granted}:")), "{asked}");
    waiter.signal(libc::SIGCONT);
    let out = waiter.finish(HANG).expect(75);
    assert!(out.stderr.contains("was preempted by "), "{out}");
    preemptor.finish(HANG).expect(0);
    let log = redis.redlock().args(["log", "k", "--json"]).run().ok();
    let at = |kind: &str| -> Vec<i64> {
        log.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["event"] == kind)
            .filter_map(|v| v["at_ms"].as_i64())
            .collect()
    };
    let (acquired, preempted) = (at("acquired"), at("preempted"));
    assert_eq!(preempted.len(), 1, "{log}");
    // The holder's, the waiter's and the preemptor's acquisitions: the waiter was asked after
    // the second and before the third.
    assert_eq!(acquired.len(), 3, "{log}");
    assert!(
        acquired[1] <= preempted[0] && preempted[0] <= acquired[2],
        "{log}"
    );
}
