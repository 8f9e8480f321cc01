//! `redlock exec`: exit status, the child's environment, renewal, mutual exclusion, stdio, and the
//! two ways to give the command. Signals are in `exec::signals`, lock loss in `exec::lost`.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::support::exec::*;

#[test]
fn the_childs_exit_code_passes_through_and_the_lock_is_released() {
    let redis = or_skip!(RedisServer::start());
    let cases: &[(&[&str], i32)] = &[
        (&["--", "true"], 0),
        (&["--", "sh", "-c", "exit 7"], 7),
        (&["--", "sh", "-c", "exit 255"], 255),
        (&["--", "false"], 1),
        (&["-c", "exit 5"], 5),
        // The shell's own "not found" is the child's status like any other.
        (&["-c", "no-such-command-for-redlock-tests"], 127),
    ];
    let mut last_fence = 0;
    for (args, code) in cases {
        let out = exec(&redis).arg("k").args(*args).run().expect(*code);
        assert_eq!(out.stdout, "", "{args:?}:\n{out}");
        if *code != 127 {
            assert_eq!(out.stderr, "", "redlock is silent: {args:?}:\n{out}");
        }
        assert_eq!(redis.keys(), [meta_key("k")], "lock left after {args:?}");
        // Taken anew each time: a higher fence.
        let fence: i64 = redis.meta("k")["fence"].parse().unwrap();
        assert!(
            fence > last_fence,
            "{args:?}: fence {fence} after {last_fence}"
        );
        last_fence = fence;
    }
}

#[test]
fn a_child_killed_by_sigsegv_gives_139() {
    let redis = or_skip!(RedisServer::start());
    let script = r#"ulimit -c 0; echo $$ > "$D/pid"; touch "$D/ready"; exec sleep 30"#;
    let mut proc = exec(&redis).args(["k", "-c", script]).spawn_proc();
    wait_ready(&redis, &mut proc);
    assert!(
        redis.get(&lock_key("k")).is_some(),
        "not held while running"
    );
    signal(child_pid(&redis), libc::SIGSEGV);
    let out = proc.finish(EVENT).expect(139);
    assert_eq!(out.stdout, "", "{out}");
    assert_eq!(redis.keys(), [meta_key("k")], "lock left:\n{out}");
}

#[test]
fn a_missing_command_gives_127_and_releases_the_lock() {
    let redis = or_skip!(RedisServer::start());
    let mut last_fence = 0;
    for cmd in ["no-such-command-for-redlock-tests", "/nonexistent/dir/cmd"] {
        let out = exec(&redis).args(["k", "--", cmd, "arg"]).run().expect(127);
        assert_one_error_line(&out);
        assert!(
            out.stderr.contains("not found") && out.stderr.contains(cmd),
            "{out}"
        );
        assert_eq!(out.stdout, "", "{out}");
        assert_eq!(redis.keys(), [meta_key("k")], "lock left:\n{out}");
        // The lock was taken (and given back) before the command was looked up.
        let fence: i64 = redis.meta("k")["fence"].parse().unwrap();
        assert!(
            fence > last_fence,
            "{cmd}: fence {fence} after {last_fence}"
        );
        last_fence = fence;
    }
}

#[test]
fn a_command_that_cannot_be_executed_gives_126_and_releases_the_lock() {
    let redis = or_skip!(RedisServer::start());
    let script = redis.dir().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let dir = redis.dir().join("a-directory");
    std::fs::create_dir(&dir).unwrap();
    for cmd in [&script, &dir] {
        let out = exec(&redis).arg("k").arg("--").arg(cmd).run().expect(126);
        assert_one_error_line(&out);
        assert!(
            out.stderr.contains("cannot execute") && out.stderr.contains("permission denied"),
            "{out}"
        );
        assert_eq!(out.stdout, "", "{out}");
        assert_eq!(redis.keys(), [meta_key("k")], "lock left:\n{out}");
    }
}

#[test]
fn the_child_sees_key_token_fence_and_url_and_fences_increase() {
    let redis = or_skip!(RedisServer::start());
    // The URL goes in --url, not in the environment: REDLOCK_URL must come from redlock itself.
    let url = format!("{}/0", redis.url());
    let mut proc = redlock()
        .args(["--url", &url, "exec", "my job", "--", "sh", "-c", &waiter()])
        .env("D", redis.dir())
        .spawn_proc();
    wait_ready(&redis, &mut proc);
    let env = child_env(&redis);
    let token = redis.get(&lock_key("my job"));
    assert_eq!(env["REDLOCK_KEY"], "my job", "{env:?}");
    assert!(is_token(&env["REDLOCK_TOKEN"]), "{env:?}");
    assert_eq!(
        Some(&env["REDLOCK_TOKEN"]),
        token.as_ref(),
        "the held token"
    );
    assert_eq!(
        env["REDLOCK_FENCE"],
        redis.meta("my job")["fence"],
        "{env:?}"
    );
    assert_eq!(env["REDLOCK_URL"], url, "{env:?}");
    done(&redis);
    let out = proc.finish(EVENT).expect(0);
    assert_eq!(out.stdout, "finished\n", "{out}");
    assert_eq!(redis.keys(), [meta_key("my job")], "lock left:\n{out}");

    let mut last: (i64, String) = (
        env["REDLOCK_FENCE"].parse().unwrap(),
        env["REDLOCK_TOKEN"].clone(),
    );
    for _ in 0..3 {
        let line = exec(&redis)
            .args(["my job", "-c", r#"echo "$REDLOCK_FENCE $REDLOCK_TOKEN""#])
            .run()
            .ok();
        let (fence, token) = line.split_once(' ').unwrap();
        let fence: i64 = fence.parse().unwrap();
        assert!(fence > last.0, "fence {fence} after {}", last.0);
        assert!(is_token(token) && token != last.1, "{line}");
        last = (fence, token.to_string());
    }
    assert_eq!(last.0.to_string(), redis.meta("my job")["fence"]);
}

#[test]
fn the_childs_redlock_url_has_no_password() {
    let redis = or_skip!(RedisServer::builder().password("s3cret-pw").start());
    let port = redis.port();
    for (url, public) in [
        (
            format!("redis://:s3cret-pw@127.0.0.1:{port}"),
            format!("redis://127.0.0.1:{port}"),
        ),
        (
            format!("redis://default:s3cret-pw@127.0.0.1:{port}/0"),
            format!("redis://default@127.0.0.1:{port}/0"),
        ),
    ] {
        let out = redlock()
            .args(["--url", &url, "exec", "k", "-c", "echo $REDLOCK_URL"])
            .run();
        let seen = out.stdout.trim_end();
        assert!(!out.stdout.contains("s3cret"), "password leaked:\n{out}");
        assert_eq!(seen, public, "{out}");
        out.expect(0);
        assert_eq!(redis.keys(), [meta_key("k")]);
    }
}

/// Renewal: a child running 3.5 TTLs keeps the lock the whole time, and a competitor with `-n`
/// is refused every time it tries. Without renewal the key would expire after one TTL.
#[test]
fn a_child_running_several_ttls_keeps_the_lock_the_whole_time() {
    let redis = or_skip!(RedisServer::start());
    let ttl = Duration::from_secs(1);
    let mut holder = exec(&redis)
        .args(["k", "--ttl", "1s", "-c", &waiter()])
        .spawn_proc();
    wait_ready(&redis, &mut holder);
    let token = child_env(&redis)["REDLOCK_TOKEN"].clone();
    let fence = child_env(&redis)["REDLOCK_FENCE"].clone();
    let mut con = redis.cli();
    let started = Instant::now();
    let mut tries = 0;
    let mut lowest = i64::MAX;
    while started.elapsed() < ttl.mul_f64(3.5) {
        let (held_by, pttl) = lock_state(&mut con, "k");
        assert_eq!(
            held_by.as_deref(),
            Some(token.as_str()),
            "the lock was lost after {:?} (pttl {pttl})\n--- stderr:\n{}",
            started.elapsed(),
            holder.stderr()
        );
        lowest = lowest.min(pttl);
        let (flags, code): (&[&str], i32) = if tries % 2 == 0 {
            (&["-n"], 1)
        } else {
            (&["-n", "-E", "9"], 9)
        };
        let out = exec(&redis)
            .arg("k")
            .args(flags)
            .args(["--", "touch"])
            .arg(file(&redis, "competitor-ran"))
            .run()
            .expect(code);
        assert!(out.stderr.contains("busy"), "{out}");
        tries += 1;
    }
    assert!(
        !file(&redis, "competitor-ran").exists(),
        "a competitor's command ran"
    );
    assert!(tries >= 6, "only {tries} competitors in 3.5s");
    // Renewals every TTL/3 keep at least 2/3 of the TTL left (here 667ms), less what a renewal
    // may be late under load; renewing at 0.9 TTL would let it fall to 100ms each time.
    assert!(
        lowest > 667 - 300,
        "the lock's PTTL fell to {lowest}ms (TTL {ttl:?})\n--- stderr:\n{}",
        holder.stderr()
    );
    assert!(holder.running(), "the holder stopped:\n{}", holder.stderr());
    done(&redis);
    let out = holder.finish(EVENT).expect(0);
    assert_eq!(out.stdout, "finished\n", "{out}");
    assert_eq!(out.stderr, "", "{out}");
    assert_eq!(redis.keys(), [meta_key("k")], "not released:\n{out}");
    assert_eq!(redis.meta("k")["fence"], fence, "the lock changed hands");
}

/// Runs `loops` shell loops (`$L` = 0, 1, ...) of `rounds` increments of `$dir/counter`, each
/// run by `redlock exec $lock -- sh -c BODY` where BODY reads the counter, runs `pause`, and
/// writes it back plus one; returns the counter.
fn count_increments(
    redis: &RedisServer,
    dir: &std::path::Path,
    loops: usize,
    rounds: usize,
    lock: &str,
    pause: &str,
) -> String {
    std::fs::write(dir.join("counter"), "0\n").unwrap();
    let body = format!("n=$(cat counter); {pause}; echo $((n + 1)) > counter");
    let script = format!(
        r#"i=0
        while [ "$i" -lt {rounds} ]; do
          redlock exec "{lock}" -- sh -c '{body}' || exit 1
          i=$((i + 1))
        done"#
    );
    let procs: Vec<Proc> = (0..loops)
        .map(|l| {
            redis
                .sh(&script)
                .current_dir(dir)
                .env("L", l.to_string())
                .spawn_proc()
        })
        .collect();
    for p in procs {
        p.finish(Duration::from_secs(120)).expect(0);
    }
    std::fs::read_to_string(dir.join("counter"))
        .unwrap()
        .trim()
        .to_string()
}

/// The same race as `safety::exclusion` (whose control shows the loops lose increments without a
/// lock), with each increment run by `exec`.
#[test]
fn exec_serialises_8_loops_of_25_increments() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let count = count_increments(&redis, dir.path(), 8, 25, "counter", "sleep 0.01");
    assert_eq!(count, "200", "an increment was lost");
    assert_eq!(redis.keys(), [meta_key("counter")], "every lock released");
}

/// The control for the test above: the same harness with a lock name per loop (so no exclusion)
/// sees the two holders. Each command waits until the other one has read the counter too (a
/// barrier, bounded, so a broken control fails rather than hangs), so they surely overlap and one
/// increment is lost.
#[test]
fn exec_increments_with_a_lock_per_loop_lose_one() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let barrier = r#"touch read-$L; j=0; while [ "$(ls read-* | wc -l)" -lt 2 ] && [ $j -lt 500 ]; do sleep 0.02; j=$((j + 1)); done"#;
    let count = count_increments(&redis, dir.path(), 2, 1, "counter-$L", barrier);
    assert_eq!(count, "1", "the harness did not see two holders at once");
    assert!(redis.meta("counter-0").contains_key("fence"));
    assert!(redis.meta("counter-1").contains_key("fence"));
}

#[test]
fn stdin_stdout_and_stderr_are_the_childs() {
    let redis = or_skip!(RedisServer::start());
    let out = redis.sh("echo hi | redlock exec k -- cat").run();
    assert_eq!(out.stdout, "hi\n", "{out}");
    assert_eq!(out.stderr, "", "{out}");
    out.expect(0);
    let out = redis
        .sh(r#"printf 'one\ntwo\n' | redlock exec k -c 'read a; read b; echo "$b $a"'"#)
        .run()
        .ok();
    assert_eq!(out, "two one");
    let out = exec(&redis)
        .args(["k", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"])
        .run()
        .expect(3);
    assert_eq!(out.stdout, "to-stdout\n", "{out}");
    assert_eq!(out.stderr, "to-stderr\n", "{out}");
    assert_eq!(redis.keys(), [meta_key("k")]);
}

#[test]
fn the_command_is_given_after_dashes_or_as_a_shell_command() {
    let redis = or_skip!(RedisServer::start());
    // After --, arguments reach the command as they are: no shell, and no redlock options.
    let out = exec(&redis)
        .args([
            "k", "--", "printf", "%s|", "a", "b c", "$HOME", "--ttl", "-n",
        ])
        .run()
        .ok();
    assert_eq!(out, "a|b c|$HOME|--ttl|-n|");
    // -c runs the text with /bin/sh -c: pipes, variables, quoting.
    let out = exec(&redis)
        .args(["k", "-c", r#"x=shell; echo "$x" | tr a-z A-Z"#])
        .run()
        .ok();
    assert_eq!(out, "SHELL");
    let fence = redis.meta("k")["fence"].clone();
    // Both, or neither, is a usage error that takes no lock.
    for args in [&["k", "-c", "true", "--", "true"][..], &["k"], &["k", "--"]] {
        let out = exec(&redis).args(args).run().expect(2);
        assert_one_error_line(&out);
    }
    assert_eq!(
        redis.meta("k")["fence"],
        fence,
        "a usage error took the lock"
    );
    assert_eq!(redis.keys(), [meta_key("k")]);
}

#[test]
fn status_shows_the_note_and_redlocks_own_pid() {
    let redis = or_skip!(RedisServer::start());
    let mut proc = exec(&redis)
        .args(["k", "--note", "nightly backup", "-c", &waiter()])
        .spawn_proc();
    wait_ready(&redis, &mut proc);
    let pid = proc.id().to_string();
    let meta = redis.meta("k");
    assert_eq!(meta["pid"], pid, "the pid is redlock's: {meta:?}");
    assert_ne!(meta["pid"], child_pid(&redis).to_string());
    assert_eq!(meta["note"], "nightly backup");
    let status = redis.redlock().args(["status", "k"]).run().ok();
    assert!(
        status.contains("nightly backup") && status.contains(&format!("(pid {pid})")),
        "{status}"
    );
    done(&redis);
    proc.finish(EVENT).expect(0);

    // Without --note, the note is the command line.
    std::fs::remove_file(file(&redis, "ready")).unwrap();
    let mut proc = exec(&redis)
        .args(["k", "--", "sh", "-c", r#"touch "$D/ready"; exec sleep 30"#])
        .spawn_proc();
    wait_ready(&redis, &mut proc);
    let status = redis.redlock().args(["status", "k"]).run().ok();
    assert!(
        status.contains(r#"sh -c touch "$D/ready"; exec sleep 30"#),
        "{status}"
    );
    assert_eq!(redis.meta("k")["pid"], proc.id().to_string());
    proc.signal(libc::SIGTERM);
    proc.finish(EVENT).expect(143);
}

/// In a container entered with `docker exec` (and in CI runners built that way) the session and
/// the process group began outside the pid namespace, and `getsid`/`getpgid` answer 0 for them.
/// redlock asks both (exec: whether it leads its session and group; `--while-pid`: whether the
/// pid leads its group); a 0 is "not ours", never a panic. `unshare --pid --fork` builds that
/// namespace here (skipped where it cannot: neither root nor user namespaces), with its own /proc
/// as a container has (`--mount-proc`): with the host's, /proc/PID names another process than
/// the namespace's PID, and the command's credentials would be compared with a stranger's.
#[test]
fn works_in_a_pid_namespace_whose_session_began_outside_it() {
    let redis = or_skip!(RedisServer::start());
    let tried = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .output();
    if !tried.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: `unshare --pid --fork --mount-proc` does not work here");
        return;
    }
    // `sh` is pid 1 of the namespace; its session and group are outside it.
    let script = r#"
        redlock exec k -- true || exit 10
        redlock exec k -c 'exit 3'; [ $? = 3 ] || exit 11
        # Not pid 1 (init: --while-pid refuses it), but in the same group.
        sh -c 'T=$(redlock acquire k --while-pid $$) || exit 12
            redlock release k "$T" || exit 13' || exit
    "#;
    let out = redis
        .sh(r#"exec unshare --pid --fork --mount-proc sh -c "$S""#)
        .env("S", script)
        .run()
        .expect(0);
    // The one line said is that the pid (whose group is outside) does not lead its group.
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
    assert!(
        out.stderr.contains("does not lead its process group"),
        "{out}"
    );
    assert_eq!(redis.get(&lock_key("k")), None, "lock left:\n{out}");
}
