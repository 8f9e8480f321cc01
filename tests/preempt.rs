//! `--preempt` / `--preemptible`: a newcomer that asks for it goes to the head of the queue and
//! asks a holder that opted in to stop; the holder's `exec` stops its command as on a lost lock
//! (75, "preempted by …"), still holding the lock until the command has stopped, then releases it
//! to the preemptor. A holder that did not opt in is never asked: the preemptor waits for it,
//! first in line, and says that it declined.

mod common;

use common::*;

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

#[test]
fn a_preemptible_holder_is_stopped_and_the_preemptor_goes_next() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
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
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let holder = hold(&redis, "k", "60s");
    let plain = redis
        .redlock()
        .args(["exec", "k", "--", "sh", "-c", "echo plain >> ran"])
        .current_dir(dir.path())
        .spawn_proc();
    assert!(wait_for(|| queue(&redis, "k").len() == 1, HANG));
    let mut preemptor = redis
        .redlock()
        .args([
            "exec",
            "k",
            "--preempt",
            "--",
            "sh",
            "-c",
            "echo preemptor >> ran",
        ])
        .current_dir(dir.path())
        .spawn_proc();
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
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut holder = redis
        .redlock()
        .args(["exec", "k", "--preemptible", "--on-lost", "ignore", "--", "sh", "-c"])
        .arg("trap 'echo signalled >> ran' TERM; touch up; while [ ! -e go ]; do sleep 0.05; done; echo done >> ran")
        .current_dir(dir.path())
        .spawn_proc();
    assert!(wait_for(|| dir.path().join("up").exists(), HANG));
    let mut preemptor = redis
        .redlock()
        .args([
            "exec",
            "k",
            "--preempt",
            "--",
            "sh",
            "-c",
            "echo preemptor >> ran",
        ])
        .current_dir(dir.path())
        .spawn_proc();
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
    let Some(redis) = RedisServer::start() else {
        return;
    };
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
    let preemptor = redis
        .redlock()
        .args([
            "exec",
            "k",
            "--preempt",
            "--",
            "sh",
            "-c",
            "echo preemptor >> ran",
        ])
        .current_dir(dir.path())
        .spawn_proc();
    preemptor.finish(HANG).expect(0);
    let held = holder.finish(HANG).expect(75);
    assert!(held.stderr.contains("was preempted by "), "{held}");
    assert_eq!(ran(&dir), "stopped\npreemptor\n");
}

/// A quorum: the holder is asked on every node, and hears it from any of them (the renewal
/// counted the nodes' "preempted" as refusals, and the holder took it for a lost lock).
#[test]
fn a_quorum_holder_is_preempted_too() {
    let Some(nodes) = common::nodes::Nodes::start(3) else {
        return;
    };
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
    let preemptor = nodes
        .redlock()
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
        .spawn_proc();
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
    let Some(redis) = RedisServer::start() else {
        return;
    };
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
