//! `redlock acquire KEY --while-pid PID`: a detached keeper renews the lock while PID lives,
//! releases it when PID ends (however it ended), ends when the owner releases the lock, and acts
//! on PID (`--on-lost`) when the lock is lost or preempted. Real servers, real processes; every
//! wait is on an event (a file, a key, a process gone), with a generous bound.

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::keeper::{
    SOON, keepers_of, overlap_check, sleeper, step, step_started, token_in, work_script,
};
use common::{RedisServer, Run, lock_key, meta_key, wait_for, wait_subscribed};
use serde_json::Value;

/// Runs `acquire` (`cmd`) to its end and returns the token. Its stderr goes nowhere: the keeper
/// keeps it (for its warnings) for as long as it runs, so a pipe would not end with `acquire`.
fn acquire(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Fails if the keeper does not renew: with --ttl 1s the lock would expire after a second.
#[test]
fn the_lock_stays_held_past_several_ttls_while_the_pid_lives() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut pid = sleeper();
    let token = acquire(
        redis
            .redlock()
            .args(["acquire", "k", "--ttl", "1s", "--while-pid"])
            .arg(pid.id().to_string()),
    );
    assert_eq!(keepers_of(pid.id()).len(), 1, "one keeper");
    let started = Instant::now();
    // Checked all along, not only at the end.
    let held_throughout = wait_for(
        || {
            assert_eq!(
                redis.get(&lock_key("k")).as_deref(),
                Some(token.as_str()),
                "lost after {:?}\n{}",
                started.elapsed(),
                redis.log()
            );
            started.elapsed() >= Duration::from_millis(3500)
        },
        Duration::from_secs(30),
    );
    assert!(held_throughout);
    pid.kill().unwrap();
    pid.wait().unwrap();
    assert!(
        wait_for(|| redis.get(&lock_key("k")).is_none(), SOON),
        "still held after its pid ended"
    );
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
}

/// Fails if the keeper waits for the TTL (30 s here) instead of watching the pid.
#[test]
fn kill_9_of_the_script_frees_the_lock_at_once_and_ends_the_keeper() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let script = format!(
        "redlock acquire k --while-pid $$ --ttl 30s >'{}' || exit; exec sleep 1000",
        file.display()
    );
    let proc = redis.sh(&script).spawn_proc();
    let token = token_in(&file);
    assert_eq!(redis.get(&lock_key("k")).as_deref(), Some(token.as_str()));
    assert_eq!(keepers_of(proc.id()).len(), 1);
    let killed = Instant::now();
    proc.signal(libc::SIGKILL);
    assert!(
        wait_for(|| redis.get(&lock_key("k")).is_none(), SOON),
        "still held {:?} after kill -9 of its pid",
        killed.elapsed()
    );
    eprintln!("freed {:?} after kill -9", killed.elapsed());
    assert!(wait_for(|| keepers_of(proc.id()).is_empty(), SOON));
    let out = proc.finish(SOON);
    assert!(!out.stderr.contains("redlock:"), "said something:\n{out}");
}

/// Fails if the keeper misses the owner's release (it would end only at its renewal, 20 s in)
/// or writes anything back afterwards.
#[test]
fn release_ends_the_keeper_and_leaves_nothing_held() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let script = format!(
        "redlock acquire k --while-pid $$ --ttl 60s >'{}' || exit; exec sleep 1000",
        file.display()
    );
    let proc = redis.sh(&script).spawn_proc();
    let token = token_in(&file);
    wait_subscribed(&[&redis], "k");
    common::release(&redis, "k", &token);
    assert!(
        wait_for(|| keepers_of(proc.id()).is_empty(), SOON),
        "the keeper outlived the release"
    );
    let mut left = redis.keys();
    left.retain(|k| *k != meta_key("k") && *k != format!("{}:log", lock_key("k")));
    assert!(left.is_empty(), "left in Redis: {left:?}");
    assert!(!proc.stderr().contains("redlock:"), "{}", proc.stderr());
}

/// A script that writes TERM to `term` when it gets SIGTERM (and ends, with its `sleep`: nothing
/// keeps the output pipes open), after taking `k` for itself with `flags`; the token goes to
/// `token`.
fn trapping_script(flags: &str, token: &Path, term: &Path) -> String {
    format!(
        "trap 'echo TERM >\"{}\"; kill $!; exit 0' TERM
         redlock acquire k --while-pid $$ --ttl 30s {flags} >'{}' || exit
         sleep 1000 & wait $!",
        term.display(),
        token.display()
    )
}

/// Fails if the keeper ignores a forced release (the script would run on without the lock).
#[test]
fn a_forced_release_sends_sigterm_to_the_script() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (file, term) = (dir.path().join("token"), dir.path().join("term"));
    let mut proc = redis.sh(&trapping_script("", &file, &term)).spawn_proc();
    token_in(&file);
    wait_subscribed(&[&redis], "k");
    redis
        .redlock()
        .args(["release", "--force", "k"])
        .run()
        .expect(0);
    assert!(
        wait_for(|| term.exists(), SOON),
        "no SIGTERM\n{}",
        proc.stderr()
    );
    proc.wait_for_stderr("lost the lock 'k'", SOON);
    assert!(wait_for(|| keepers_of(proc.id()).is_empty(), SOON));
    let out = proc.finish(SOON);
    assert!(out.stderr.contains("force-released"), "{out}");
    assert!(out.stderr.contains("sending SIGTERM to pid"), "{out}");
    // Told to the lock's history.
    let log = redis.redlock().args(["log", "k"]).run().ok();
    assert!(log.contains("lost"), "{log}");
}

/// With --on-lost ignore the keeper only warns: the script runs on.
#[test]
fn with_on_lost_ignore_a_forced_release_only_warns() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (file, term) = (dir.path().join("token"), dir.path().join("term"));
    let mut proc = redis
        .sh(&trapping_script("--on-lost ignore", &file, &term))
        .spawn_proc();
    token_in(&file);
    wait_subscribed(&[&redis], "k");
    redis
        .redlock()
        .args(["release", "--force", "k"])
        .run()
        .expect(0);
    proc.wait_for_stderr("lost the lock 'k'", SOON);
    assert!(wait_for(|| keepers_of(proc.id()).is_empty(), SOON));
    assert!(proc.stderr().contains("runs on (--on-lost ignore)"));
    assert!(!term.exists(), "SIGTERM despite --on-lost ignore");
    assert!(proc.running(), "the script ended");
}

/// Fails if the keeper does not hear the preemption (nobody stops the script; the preemptor
/// waits), or releases before the script has ended.
#[test]
fn a_preemptor_stops_a_preemptible_script_and_runs_once_it_has_ended() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (file, term, ran) = (
        dir.path().join("token"),
        dir.path().join("term"),
        dir.path().join("ran"),
    );
    let script = redis
        .sh(&trapping_script("--preemptible", &file, &term))
        .spawn_proc();
    token_in(&file);
    wait_subscribed(&[&redis], "k");
    // The script's state when the preemptor's command runs: gone, or a zombie (exited, not
    // reaped yet by this test).
    let check = format!(
        "s=$(cut -d' ' -f3 /proc/{}/stat 2>/dev/null); echo \"ran ${{s:-gone}}\" >'{}'",
        script.id(),
        ran.display()
    );
    let preemptor = redis
        .redlock()
        .args(["exec", "k", "--preempt", "--wait", "30s", "-c", &check])
        .spawn_proc();
    assert!(
        wait_for(|| term.exists(), SOON),
        "no SIGTERM\n{}",
        script.stderr()
    );
    let out = preemptor.finish(Duration::from_secs(30)).expect(0);
    let said = std::fs::read_to_string(&ran).unwrap();
    assert!(
        said == "ran Z\n" || said == "ran gone\n",
        "the preemptor ran while the script ran: {said:?}\n{out}"
    );
    assert!(wait_for(|| keepers_of(script.id()).is_empty(), SOON));
    assert!(script.stderr().contains("preempted"), "{}", script.stderr());
    let _ = script.finish(SOON);
}

/// Fails if the keeper keeps the capture's pipe (stdout, or stderr when it is stdout): the
/// shell would wait for the keeper, which waits for the shell.
#[test]
fn a_capture_returns_at_once_even_with_2_to_1() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let out = redis
        .sh(
            "T=$(redlock acquire k --while-pid $$ --ttl 30s 2>&1) || exit
             echo \"got $T\"
             redlock release k \"$T\"",
        )
        .run();
    let said = out.stdout.trim().to_string();
    assert!(
        out.status.success() && common::is_token(said.trim_start_matches("got ")),
        "{out}"
    );
    assert!(out.elapsed < Duration::from_secs(20), "{out}");
}

/// A pid with no process is refused before anything is written; --on-lost needs --while-pid.
#[test]
fn a_pid_that_does_not_exist_is_a_usage_error() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id().to_string();
    gone.wait().unwrap();
    let out = redis
        .redlock()
        .args(["acquire", "k", "--while-pid", &pid])
        .run()
        .expect(2);
    common::assert_one_error_line(&out);
    assert!(out.stderr.contains("no such process"), "{out}");
    assert_eq!(redis.dbsize(), 0, "{:?}", redis.keys());
    let out = redis
        .redlock()
        .args(["acquire", "k", "--on-lost", "kill"])
        .run()
        .expect(2);
    assert!(out.stderr.contains("--while-pid"), "{out}");
    assert_eq!(redis.dbsize(), 0);
}

/// `status` says why the lock outlives the acquire: the table and the JSON.
#[test]
fn status_shows_the_pid_the_lock_is_kept_alive_for() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut pid = sleeper();
    let token = acquire(
        redis
            .redlock()
            .args(["acquire", "k", "--while-pid"])
            .arg(pid.id().to_string()),
    );
    let table = redis.redlock().args(["status", "k"]).run().ok();
    assert!(
        table.contains(&format!("kept alive for pid {}", pid.id())),
        "{table}"
    );
    let json = redis
        .redlock()
        .args(["status", "--format", "json", "k"])
        .run()
        .ok();
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v[0]["holder"]["kept"], true, "{v}");
    assert_eq!(v[0]["holder"]["pid"], pid.id(), "{v}");
    assert_eq!(redis.meta("k").get("kept").map(String::as_str), Some("1"));
    common::release(&redis, "k", &token);
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
    pid.kill().unwrap();
    pid.wait().unwrap();
}

/// A quorum of several --url: renewed on every node, released on every node when the pid ends.
#[test]
fn a_quorum_lock_is_kept_and_released_on_every_node() {
    let Some(nodes) = common::nodes::Nodes::start(3) else {
        return;
    };
    let mut pid = sleeper();
    let token = acquire(
        nodes
            .redlock()
            .args(["acquire", "k", "--ttl", "1s", "--while-pid"])
            .arg(pid.id().to_string()),
    );
    let started = Instant::now();
    let held_throughout = wait_for(
        || {
            let tokens = nodes.tokens("k");
            assert!(
                tokens.iter().all(|t| t.as_deref() == Some(token.as_str())),
                "lost after {:?}: {tokens:?}",
                started.elapsed()
            );
            started.elapsed() >= Duration::from_millis(3500)
        },
        Duration::from_secs(30),
    );
    assert!(held_throughout);
    pid.kill().unwrap();
    pid.wait().unwrap();
    assert!(
        wait_for(|| nodes.tokens("k").iter().all(Option::is_none), SOON),
        "{:?}",
        nodes.tokens("k")
    );
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
}

// Issue 26: the lock is released only once PID and the work it started have ended. The holder
// scripts have no TERM trap (the usual case: bash dies at once and leaves its foreground step
// running); `overlap_check` shows whether a process of the holder's work ran beside the next
// holder (see `common::keeper::work_script`).

/// Fails if the keeper releases the lock as soon as the preempted script has died: the
/// preemptor ran beside the script's foreground step (the audit measured 3 s of two holders).
#[test]
fn a_preemptor_runs_only_once_the_untrapped_scripts_step_has_ended() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let holder = redis
        .sh(&work_script(d, "--preemptible", &step(d, 5)))
        .spawn_proc();
    token_in(&d.join("token"));
    step_started(d);
    wait_subscribed(&[&redis], "k");
    let preemptor = redis
        .redlock()
        .args([
            "exec",
            "k",
            "--preempt",
            "--wait",
            "30s",
            "-c",
            &overlap_check(d),
        ])
        .spawn_proc();
    let out = preemptor.finish(Duration::from_secs(30)).expect(0);
    let result = std::fs::read_to_string(d.join("result")).unwrap();
    assert_eq!(
        result,
        "free\n",
        "the preemptor ran beside the holder's step\n{out}\n--- holder:\n{}",
        holder.stderr()
    );
    let said = holder.stderr();
    assert!(
        said.contains("sending SIGTERM to pid") && said.contains("process group"),
        "{said}"
    );
    let steps = std::fs::read_to_string(d.join("steps")).unwrap();
    assert!(!steps.contains("done"), "the step was not stopped: {steps}");
    assert!(wait_for(|| keepers_of(holder.id()).is_empty(), SOON));
}

/// Fails if the keeper releases the lock when it gets SIGTERM before the script's step has
/// ended: the waiter ran beside it.
#[test]
fn sigterm_to_the_keeper_releases_only_once_the_scripts_step_has_ended() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let holder = redis.sh(&work_script(d, "", &step(d, 5))).spawn_proc();
    token_in(&d.join("token"));
    step_started(d);
    let waiter = redis
        .redlock()
        .args(["exec", "k", "--wait", "30s", "-c", &overlap_check(d)])
        .spawn_proc();
    assert!(wait_for(|| common::queue(&redis, "k").len() == 1, SOON));
    let keepers = keepers_of(holder.id());
    assert_eq!(keepers.len(), 1);
    common::signal(keepers[0], libc::SIGTERM);
    let out = waiter.finish(Duration::from_secs(30)).expect(0);
    let result = std::fs::read_to_string(d.join("result")).unwrap();
    assert_eq!(
        result,
        "free\n",
        "the waiter ran beside the holder's step\n{out}\n--- holder:\n{}",
        holder.stderr()
    );
    let steps = std::fs::read_to_string(d.join("steps")).unwrap();
    assert!(!steps.contains("done"), "the step was not stopped: {steps}");
    assert!(wait_for(|| keepers_of(holder.id()).is_empty(), SOON));
}

/// Fails if the keeper releases the lock as soon as its pid is gone (`kill -9`, the OOM killer)
/// while the pid's foreground step runs on: the waiter ran beside it. The step is not stopped:
/// the keeper waits for it, renewing the lock.
#[test]
fn kill_9_of_the_script_frees_the_lock_only_once_its_step_has_ended() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut holder = redis.sh(&work_script(d, "", &step(d, 2))).spawn_proc();
    token_in(&d.join("token"));
    step_started(d);
    let waiter = redis
        .redlock()
        .args(["exec", "k", "--wait", "30s", "-c", &overlap_check(d)])
        .spawn_proc();
    assert!(wait_for(|| common::queue(&redis, "k").len() == 1, SOON));
    holder.signal(libc::SIGKILL);
    let out = waiter.finish(Duration::from_secs(30)).expect(0);
    let result = std::fs::read_to_string(d.join("result")).unwrap();
    assert_eq!(
        result,
        "free\n",
        "the waiter ran beside the killed script's step\n{out}\n--- holder:\n{}",
        holder.stderr()
    );
    let steps = std::fs::read_to_string(d.join("steps")).unwrap();
    assert!(steps.contains("done"), "the step was stopped: {steps}");
    holder.wait_for_stderr("has ended; keeping 'k' until the", SOON);
    assert!(wait_for(|| keepers_of(holder.id()).is_empty(), SOON));
}

/// Fails if the keeper releases the lock while a step that ignores SIGTERM runs on, or never
/// sends it SIGKILL (the preemptor would wait forever).
#[test]
fn a_step_that_ignores_sigterm_gets_sigkill_after_kill_after_before_the_release() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let steps = d.join("steps");
    let stubborn = format!(
        "trap \"\" TERM; echo started >>\"{}\"; sleep 600",
        steps.display()
    );
    let holder = redis
        .sh(&work_script(d, "--preemptible --kill-after 2s", &stubborn))
        .spawn_proc();
    token_in(&d.join("token"));
    step_started(d);
    wait_subscribed(&[&redis], "k");
    let preemptor = redis
        .redlock()
        .args([
            "exec",
            "k",
            "--preempt",
            "--wait",
            "30s",
            "-c",
            &overlap_check(d),
        ])
        .spawn_proc();
    let out = preemptor.finish(Duration::from_secs(30)).expect(0);
    let result = std::fs::read_to_string(d.join("result")).unwrap();
    assert_eq!(
        result,
        "free\n",
        "the preemptor ran beside the holder's step\n{out}\n--- holder:\n{}",
        holder.stderr()
    );
    // SIGTERM, then SIGKILL 2 s later: the preemptor waited at least that long.
    assert!(out.elapsed >= Duration::from_millis(1900), "{out}");
    let said = holder.stderr();
    assert!(said.contains("(--kill-after): sending SIGKILL"), "{said}");
    assert!(wait_for(|| keepers_of(holder.id()).is_empty(), SOON));
}

/// A pid that does not lead its process group (here: a `sleep` in the test's own group) gets
/// a one-line warning at acquire time, which says why and how to get the full guarantee; a
/// group leader gets none.
#[test]
fn a_pid_that_does_not_lead_its_group_is_warned_about_at_acquire_time() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut member = sleeper();
    let mut leader = {
        let mut cmd = Command::new("sleep");
        common::default_signals(&mut cmd);
        cmd.arg("1000").process_group(0).spawn().unwrap()
    };
    for (pid, key, warned) in [(member.id(), "a", true), (leader.id(), "b", false)] {
        let out = redis
            .redlock()
            .args(["acquire", key, "--while-pid", &pid.to_string()])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        if warned {
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(
                stderr.contains(&format!(
                    "--while-pid {pid} does not lead its process group"
                )) && stderr.contains("best effort")
                    && stderr.contains("setsid"),
                "{stderr}"
            );
        } else {
            assert_eq!(stderr, "", "a group leader is warned about");
        }
    }
    for p in [&mut member, &mut leader] {
        p.kill().unwrap();
        p.wait().unwrap();
    }
    assert!(wait_for(|| redis.get(&lock_key("a")).is_none(), SOON));
    assert!(wait_for(|| redis.get(&lock_key("b")).is_none(), SOON));
}

/// A pid that does not lead its group (a bash script run by another, as a CI runner runs a
/// step): its descendants the keeper found are its work. Fails if the keeper releases the lock
/// at the script's `kill -9` while its background step runs on.
#[test]
fn kill_9_of_a_script_that_does_not_lead_its_group_waits_for_the_step_it_started() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let inner = d.join("inner.bash");
    std::fs::write(
        &inner,
        format!(
            "exec 9>'{work}'; flock 9
             sh -c '{step}' &
             T=$(redlock acquire k --while-pid $$ --ttl 6s) || exit
             echo $$ >'{pid}'
             echo \"$T\" >'{token}'
             wait
            ",
            work = d.join("work").display(),
            step = step(d, 2),
            pid = d.join("pid").display(),
            token = d.join("token").display(),
        ),
    )
    .unwrap();
    let mut outer = redis
        .sh(&format!("bash '{}'; exit 0", inner.display()))
        .spawn_proc();
    token_in(&d.join("token"));
    let pid: u32 = token_in(&d.join("pid")).parse().unwrap();
    step_started(d);
    outer.wait_for_stderr("does not lead its process group", SOON);
    let waiter = redis
        .redlock()
        .args(["exec", "k", "--wait", "30s", "-c", &overlap_check(d)])
        .spawn_proc();
    assert!(wait_for(|| common::queue(&redis, "k").len() == 1, SOON));
    common::signal(pid, libc::SIGKILL);
    let out = waiter.finish(Duration::from_secs(30)).expect(0);
    let result = std::fs::read_to_string(d.join("result")).unwrap();
    assert_eq!(
        result,
        "free\n",
        "the waiter ran beside the killed script's step\n{out}\n--- holder:\n{}",
        outer.stderr()
    );
    let steps = std::fs::read_to_string(d.join("steps")).unwrap();
    assert!(steps.contains("done"), "the step was stopped: {steps}");
    assert!(wait_for(|| keepers_of(pid).is_empty(), SOON));
}

/// With --on-lost ignore the keeper never stops its pid: SIGTERM to the keeper releases the
/// lock at once, and says that the pid runs on without it.
#[test]
fn with_on_lost_ignore_sigterm_to_the_keeper_releases_at_once_and_says_so() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (file, term) = (dir.path().join("token"), dir.path().join("term"));
    let mut proc = redis
        .sh(&trapping_script("--on-lost ignore", &file, &term))
        .spawn_proc();
    token_in(&file);
    let keepers = keepers_of(proc.id());
    assert_eq!(keepers.len(), 1);
    common::signal(keepers[0], libc::SIGTERM);
    assert!(wait_for(|| redis.get(&lock_key("k")).is_none(), SOON));
    proc.wait_for_stderr("runs on without it", SOON);
    assert!(!term.exists(), "SIGTERM despite --on-lost ignore");
    assert!(proc.running(), "the script ended");
}

/// An interactive shell as PID (it leads a session with a terminal: a terminal's or an ssh
/// session's shell) is warned of at acquire time: its jobs have groups of their own, and a loss
/// or preemption stops the shell itself. A session without a terminal (`setsid SCRIPT`) is not.
#[test]
fn acquire_warns_when_pid_is_an_interactive_shell() {
    use std::os::fd::AsRawFd;
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let terminal = common::pty::pty(None);
    for (name, with_terminal) in [("tty", true), ("notty", false)] {
        let err = d.join(format!("{name}.err"));
        let mut cmd = redis.sh(&format!(
            "T=$(redlock acquire {name} --while-pid $$ --ttl 6s 2>'{err}') || exit
             redlock release {name} \"$T\"",
            err = err.display()
        ));
        cmd.stdin(Stdio::from(terminal.slave.try_clone().unwrap()))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let slave = terminal.slave.as_raw_fd();
        // SAFETY: setsid and ioctl are async-signal-safe: the shell leads a session, with the
        // pty as its controlling terminal or none.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() == -1
                    || (with_terminal && libc::ioctl(slave, libc::TIOCSCTTY, 0) == -1)
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut shell = cmd.spawn().unwrap();
        assert!(
            wait_for(|| shell.try_wait().unwrap().is_some(), SOON),
            "the shell never ended"
        );
        let said = std::fs::read_to_string(&err).unwrap();
        assert_eq!(
            said.contains("is an interactive shell"),
            with_terminal,
            "{name}: {said}"
        );
        assert!(wait_for(|| keepers_of(shell.id()).is_empty(), SOON));
    }
}

/// Fails if `status` calls a kept lock "stale?" while its keeper rightly holds it for what the
/// ended pid started: it says "draining".
#[test]
fn status_shows_a_keeper_waiting_for_leftover_work_as_draining() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut holder = redis.sh(&work_script(d, "", &step(d, 3))).spawn_proc();
    token_in(&d.join("token"));
    step_started(d);
    holder.signal(libc::SIGKILL);
    holder.wait_for_stderr("has ended; keeping 'k' until the", SOON);
    let out = redis.redlock().args(["status", "k"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("draining") && !said.contains("stale?"),
        "{said}"
    );
    assert!(wait_for(|| keepers_of(holder.id()).is_empty(), SOON));
}

/// A second SIGTERM to the keeper brings the SIGKILL forward, and says so (not "still ran
/// 60s after SIGTERM (--kill-after)", which had not passed).
#[test]
fn a_second_sigterm_to_the_keeper_says_it_brought_the_sigkill_forward() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let stubborn = format!(
        "trap \"\" TERM; echo started >>\"{}\"; sleep 600",
        d.join("steps").display()
    );
    let mut holder = redis
        .sh(&work_script(d, "--kill-after 60s", &stubborn))
        .spawn_proc();
    token_in(&d.join("token"));
    step_started(d);
    let keepers = keepers_of(holder.id());
    assert_eq!(keepers.len(), 1);
    common::signal(keepers[0], libc::SIGTERM);
    holder.wait_for_stderr("got SIGTERM", SOON);
    common::signal(keepers[0], libc::SIGTERM);
    holder.wait_for_stderr("the keeper got a second SIGTERM: sending SIGKILL", SOON);
    assert!(!holder.stderr().contains("after SIGTERM (--kill-after)"));
    assert!(
        wait_for(|| redis.get(&lock_key("k")).is_none(), SOON),
        "never released"
    );
    assert!(wait_for(|| keepers_of(holder.id()).is_empty(), SOON));
}
