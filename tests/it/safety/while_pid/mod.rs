//! `redlock acquire KEY --while-pid PID`: a detached keeper renews the lock while PID lives,
//! releases it when PID ends (however it ended), ends when the owner releases the lock, and acts
//! on PID (`--on-lost`) when the lock is lost or preempted. Real servers, real processes; every
//! wait is on an event (a file, a key, a process gone), with a generous bound.
//!
//! The tests of a first adversarial review of the keeper are at the end of this file; those of a
//! second one are in `attack`.

mod attack;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::keeper::{
    SOON, keepers_of, overlap_check, sleeper, step, step_started, stubborn_step, token_in,
    work_script,
};
use crate::common::proxy::Proxy;
use crate::common::{
    Output, Proc, RedisServer, Run, lock_key, meta_key, wait_for, wait_subscribed,
};
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
    let redis = or_skip!(RedisServer::start());
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
    let redis = or_skip!(RedisServer::start());
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
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let script = format!(
        "redlock acquire k --while-pid $$ --ttl 60s >'{}' || exit; exec sleep 1000",
        file.display()
    );
    let proc = redis.sh(&script).spawn_proc();
    let token = token_in(&file);
    wait_subscribed(&[&redis], "k");
    crate::common::release(&redis, "k", &token);
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
#[cfg_attr(
    feature = "portable",
    ignore = "portable: a keeper lets go of a pipe on its stderr (no /proc to tell whose it is)"
)]
fn a_forced_release_sends_sigterm_to_the_script() {
    let redis = or_skip!(RedisServer::start());
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
#[cfg_attr(
    feature = "portable",
    ignore = "portable: a keeper lets go of a pipe on its stderr (no /proc to tell whose it is)"
)]
fn with_on_lost_ignore_a_forced_release_only_warns() {
    let redis = or_skip!(RedisServer::start());
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
#[cfg_attr(
    feature = "portable",
    ignore = "portable: a keeper lets go of a pipe on its stderr (no /proc to tell whose it is)"
)]
fn a_preemptor_stops_a_preemptible_script_and_runs_once_it_has_ended() {
    let redis = or_skip!(RedisServer::start());
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
    let redis = or_skip!(RedisServer::start());
    let out = redis
        .sh(
            "T=$(redlock acquire k --while-pid $$ --ttl 30s 2>&1) || exit
             echo \"got $T\"
             redlock release k \"$T\"",
        )
        .run();
    let said = out.stdout.trim().to_string();
    assert!(
        out.status.success() && crate::common::is_token(said.trim_start_matches("got ")),
        "{out}"
    );
    assert!(out.elapsed < Duration::from_secs(20), "{out}");
}

/// A pid with no process is refused before anything is written; --on-lost needs --while-pid.
#[test]
fn a_pid_that_does_not_exist_is_a_usage_error() {
    let redis = or_skip!(RedisServer::start());
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id().to_string();
    gone.wait().unwrap();
    let out = redis
        .redlock()
        .args(["acquire", "k", "--while-pid", &pid])
        .run()
        .expect(2);
    crate::common::assert_one_error_line(&out);
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
    let redis = or_skip!(RedisServer::start());
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
    crate::common::release(&redis, "k", &token);
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
    pid.kill().unwrap();
    pid.wait().unwrap();
}

/// A quorum of several --url: renewed on every node, released on every node when the pid ends.
#[test]
fn a_quorum_lock_is_kept_and_released_on_every_node() {
    let nodes = or_skip!(crate::common::nodes::Nodes::start(3));
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

/// Starts `work_script` with `flags` and `step`, and returns once it holds `k` and its step runs.
fn start_work(redis: &RedisServer, d: &Path, flags: &str, step: &str) -> Proc {
    let holder = redis.sh(&work_script(d, flags, step)).spawn_proc();
    token_in(&d.join("token"));
    step_started(d);
    holder
}

/// The next holder of `k`: `redlock` (from a `RedisServer` or `Nodes`) as `exec k FLAGS --wait
/// 30s`, running `overlap_check`.
fn next_holder(mut redlock: Command, d: &Path, flags: &[&str]) -> Proc {
    redlock
        .args(["exec", "k"])
        .args(flags)
        .args(["--wait", "30s", "-c", &overlap_check(d)])
        .spawn_proc()
}

/// Waits for `next` to end (exit 0) and fails with `beside` if its overlap check found a process
/// of the holder's work still running.
fn ran_alone(d: &Path, next: Proc, holder: &Proc, beside: &str) -> Output {
    let out = next.finish(Duration::from_secs(30)).expect(0);
    let result = std::fs::read_to_string(d.join("result")).unwrap();
    assert_eq!(
        result,
        "free\n",
        "{beside}\n{out}\n--- holder:\n{}",
        holder.stderr()
    );
    out
}

/// Fails if the keeper releases the lock as soon as the preempted script has died: the
/// preemptor ran beside the script's foreground step (the audit measured 3 s of two holders).
#[test]
#[cfg_attr(
    feature = "portable",
    ignore = "portable: a keeper lets go of a pipe on its stderr (no /proc to tell whose it is)"
)]
fn a_preemptor_runs_only_once_the_untrapped_scripts_step_has_ended() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let holder = start_work(&redis, d, "--preemptible", &step(d, 5));
    wait_subscribed(&[&redis], "k");
    let preemptor = next_holder(redis.redlock(), d, &["--preempt"]);
    ran_alone(
        d,
        preemptor,
        &holder,
        "the preemptor ran beside the holder's step",
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
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let holder = start_work(&redis, d, "", &step(d, 5));
    let waiter = next_holder(redis.redlock(), d, &[]);
    assert!(wait_for(
        || crate::common::queue(&redis, "k").len() == 1,
        SOON
    ));
    let keepers = keepers_of(holder.id());
    assert_eq!(keepers.len(), 1);
    crate::common::signal(keepers[0], libc::SIGTERM);
    ran_alone(
        d,
        waiter,
        &holder,
        "the waiter ran beside the holder's step",
    );
    let steps = std::fs::read_to_string(d.join("steps")).unwrap();
    assert!(!steps.contains("done"), "the step was not stopped: {steps}");
    assert!(wait_for(|| keepers_of(holder.id()).is_empty(), SOON));
}

/// Fails if the keeper releases the lock as soon as its pid is gone (`kill -9`, the OOM killer)
/// while the pid's foreground step runs on: the waiter ran beside it. The step is not stopped:
/// the keeper waits for it, renewing the lock.
#[test]
#[cfg_attr(
    feature = "portable",
    ignore = "portable: a keeper lets go of a pipe on its stderr (no /proc to tell whose it is)"
)]
fn kill_9_of_the_script_frees_the_lock_only_once_its_step_has_ended() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut holder = start_work(&redis, d, "", &step(d, 2));
    let waiter = next_holder(redis.redlock(), d, &[]);
    assert!(wait_for(
        || crate::common::queue(&redis, "k").len() == 1,
        SOON
    ));
    holder.signal(libc::SIGKILL);
    ran_alone(
        d,
        waiter,
        &holder,
        "the waiter ran beside the killed script's step",
    );
    let steps = std::fs::read_to_string(d.join("steps")).unwrap();
    assert!(steps.contains("done"), "the step was stopped: {steps}");
    holder.wait_for_stderr("has ended; keeping 'k' until the", SOON);
    assert!(wait_for(|| keepers_of(holder.id()).is_empty(), SOON));
}

/// Fails if the keeper releases the lock while a step that ignores SIGTERM runs on, or never
/// sends it SIGKILL (the preemptor would wait forever).
#[test]
#[cfg_attr(
    feature = "portable",
    ignore = "portable: a keeper lets go of a pipe on its stderr (no /proc to tell whose it is)"
)]
fn a_step_that_ignores_sigterm_gets_sigkill_after_kill_after_before_the_release() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let stubborn = stubborn_step(d);
    let holder = start_work(&redis, d, "--preemptible --kill-after 2s", &stubborn);
    wait_subscribed(&[&redis], "k");
    let preemptor = next_holder(redis.redlock(), d, &["--preempt"]);
    let out = ran_alone(
        d,
        preemptor,
        &holder,
        "the preemptor ran beside the holder's step",
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
    let redis = or_skip!(RedisServer::start());
    let mut member = sleeper();
    let mut leader = {
        let mut cmd = Command::new("sleep");
        crate::common::default_signals(&mut cmd);
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
    let redis = or_skip!(RedisServer::start());
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
    let waiter = next_holder(redis.redlock(), d, &[]);
    assert!(wait_for(
        || crate::common::queue(&redis, "k").len() == 1,
        SOON
    ));
    crate::common::signal(pid, libc::SIGKILL);
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
#[cfg_attr(
    feature = "portable",
    ignore = "portable: a keeper lets go of a pipe on its stderr (no /proc to tell whose it is)"
)]
fn with_on_lost_ignore_sigterm_to_the_keeper_releases_at_once_and_says_so() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let (file, term) = (dir.path().join("token"), dir.path().join("term"));
    let mut proc = redis
        .sh(&trapping_script("--on-lost ignore", &file, &term))
        .spawn_proc();
    token_in(&file);
    let keepers = keepers_of(proc.id());
    assert_eq!(keepers.len(), 1);
    crate::common::signal(keepers[0], libc::SIGTERM);
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
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let terminal = crate::common::pty::pty(None);
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
#[cfg_attr(
    feature = "portable",
    ignore = "portable: no pid namespace recorded, so status tells no holder gone"
)]
fn status_shows_a_keeper_waiting_for_leftover_work_as_draining() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut holder = start_work(&redis, d, "", &step(d, 3));
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
#[cfg_attr(
    feature = "portable",
    ignore = "portable: a keeper lets go of a pipe on its stderr (no /proc to tell whose it is)"
)]
fn a_second_sigterm_to_the_keeper_says_it_brought_the_sigkill_forward() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let stubborn = stubborn_step(d);
    let mut holder = start_work(&redis, d, "--kill-after 60s", &stubborn);
    let keepers = keepers_of(holder.id());
    assert_eq!(keepers.len(), 1);
    crate::common::signal(keepers[0], libc::SIGTERM);
    holder.wait_for_stderr("got SIGTERM", SOON);
    crate::common::signal(keepers[0], libc::SIGTERM);
    holder.wait_for_stderr("the keeper got a second SIGTERM: sending SIGKILL", SOON);
    assert!(!holder.stderr().contains("after SIGTERM (--kill-after)"));
    assert!(
        wait_for(|| redis.get(&lock_key("k")).is_none(), SOON),
        "never released"
    );
    assert!(wait_for(|| keepers_of(holder.id()).is_empty(), SOON));
}

// An adversarial review attacked `acquire --while-pid`: each test below fails on the reviewed
// change (76494ad); see the comment above each for what it shows.

fn exited(child: &mut std::process::Child) -> bool {
    child.try_wait().unwrap().is_some()
}

/// Exclusion. A Redis restart (no persistence: `--save ''`) loses the lock while PID runs. The
/// keeper's next renewal finds no key, less than a TTL after its last success, and no forced
/// release: it concludes "released by its owner" and ends quietly. PID is not told, and anyone
/// can take the lock beside it. (The README lists "no key at a renewal" as a loss.) The same
/// happens after FLUSHALL, an eviction, an admin's DEL, or a failover to a replica that lacked
/// the write.
#[test]
fn a_restart_that_loses_the_lock_is_a_loss_not_a_release() {
    let mut redis = or_skip!(RedisServer::start());
    let mut pid = sleeper();
    let out = redis
        .redlock()
        .args(["acquire", "k", "--ttl", "3s", "--while-pid"])
        .arg(pid.id().to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(keepers_of(pid.id()).len(), 1);
    redis.kill();
    redis.restart();
    // Either PID was told (SIGTERM, the default --on-lost), or the keeper put the lock back: the
    // lock must not be free for someone else while PID runs on untold.
    let told = wait_for(|| exited(&mut pid) || keepers_of(pid.id()).is_empty(), SOON);
    assert!(told, "the keeper neither ended nor told its pid");
    let pid_ran_on = !exited(&mut pid);
    let free = redis.get(&lock_key("k")).is_none();
    let _ = pid.kill();
    let _ = pid.wait();
    assert!(
        !(pid_ran_on && free),
        "the keeper ended quietly (\"released by its owner\"): the lock is free while its pid \
         runs on, untold"
    );
}

/// Hang. `out=$(f 2>&1)` where `f` takes the lock for the shell (`T=$(redlock acquire ...
/// --while-pid $$)`): the keeper's stderr is the outer capture's pipe (not the same open file as
/// its stdout, the inner capture), so the outer capture lasts until the keeper ends, which waits
/// for the shell, which waits for the capture. Same with `{ ...; } 2>&1 | tee log`.
#[test]
fn a_capture_of_stderr_around_the_acquire_returns_while_the_pid_lives() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out");
    let script = format!(
        "out=$( {{ T=$(redlock acquire k --while-pid $$) || exit; echo \"$T\"; }} 2>&1 )
         echo \"$out\" >'{}'
         exec sleep 1000",
        file.display()
    );
    let proc = redis.sh(&script).spawn_proc();
    let returned = wait_for(|| file.exists(), SOON);
    let id = proc.id();
    proc.signal(libc::SIGKILL);
    let _ = proc.finish(SOON);
    assert!(wait_for(|| keepers_of(id).is_empty(), SOON));
    assert!(
        returned,
        "the capture did not return: the keeper holds its pipe open (as its stderr)"
    );
}

/// Liveness. `--password-file <(echo pw)`: acquire reads the pipe, the keeper opens
/// /dev/fd/63 again, finds it empty ("--password-file /dev/fd/63 is empty") and cannot start:
/// acquire fails (exit 74). The keeper should get the password acquire already read (on its
/// private brief pipe), not read the file again.
#[test]
fn a_password_file_from_a_process_substitution_works() {
    let redis = or_skip!(RedisServer::builder().password("s3cr3t").start());
    let dir = tempfile::tempdir().unwrap();
    let (file, script) = (dir.path().join("token"), dir.path().join("s.bash"));
    std::fs::write(
        &script,
        format!(
            "redlock acquire k --while-pid $$ --password-file <(echo s3cr3t) >'{}' || \
             {{ echo \"failed $?\" >'{}'; exit 1; }}\nexec sleep 1000\n",
            file.display(),
            file.display()
        ),
    )
    .unwrap();
    let proc = redis
        .sh(&format!("exec bash '{}'", script.display()))
        .spawn_proc();
    let token = token_in(&file);
    let id = proc.id();
    proc.signal(libc::SIGKILL);
    let out = proc.finish(SOON);
    assert!(wait_for(|| keepers_of(id).is_empty(), SOON));
    assert!(!token.starts_with("failed"), "acquire {token}\n{out}");
}

/// Wrong output. A zombie has ended (its pidfd is readable at once): acquire takes the lock,
/// prints a token and exits 0, and the keeper releases it at once. It should be refused like a
/// pid with no process (exit 2, nothing written to Redis).
#[test]
fn a_zombie_pid_is_refused() {
    let redis = or_skip!(RedisServer::start());
    // A child of this test that is not waited for yet: a zombie once it exits, until `wait`
    // (std reaps a child only when asked to). A shell's background job would be reaped by the
    // shell itself if it ended before the shell moved on.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let zombie = child.id().to_string();
    let state = format!("/proc/{zombie}/stat");
    assert!(wait_for(
        || std::fs::read_to_string(&state).is_ok_and(|s| s.contains(") Z ")),
        SOON
    ));
    let out = redis
        .redlock()
        .args(["acquire", "k", "--while-pid", &zombie])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let _ = child.wait();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a zombie was taken for a live process: printed {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Liveness / leftover. acquire killed (SIGKILL; SIGINT without a handler alike) while it waits
/// for the keeper's word: the keeper starts anyway, its readiness byte falls on a closed pipe
/// (ignored), and it keeps a lock whose token nobody has for as long as PID lives (for `$$`, the
/// whole script; a retry of the acquire then waits on it). The keeper should give the lock back
/// when nobody reads its word.
#[test]
fn an_acquire_killed_while_waiting_for_the_keeper_leaves_no_keeper() {
    let redis = or_skip!(RedisServer::builder().password("s3cr3t").start());
    let proxy = Proxy::to(redis.port());
    // Every AUTH (acquire's, then the keeper's) a second late: the keeper is slow to say it runs.
    proxy.delay_matching("AUTH", Duration::from_secs(1), 10);
    let mut pid = sleeper();
    let mut acquire = redis.redlock();
    acquire
        .env("REDLOCK_PASSWORD", "s3cr3t")
        .args(["--url", &proxy.url(), "--connect-timeout", "20s"])
        .args(["acquire", "k", "--ttl", "30s", "--while-pid"])
        .arg(pid.id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut acquire = acquire.spawn().unwrap();
    let started = wait_for(|| !keepers_of(pid.id()).is_empty(), SOON);
    let _ = acquire.kill();
    let _ = acquire.wait();
    assert!(started, "no keeper started");
    let gone = wait_for(
        || keepers_of(pid.id()).is_empty() && redis.get(&lock_key("k")).is_none(),
        SOON,
    );
    let _ = pid.kill();
    let _ = pid.wait();
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
    assert!(
        gone,
        "a keeper holds a lock whose token nobody received, for as long as its pid lives"
    );
}

/// Leftover. The keeper inherits every descriptor of acquire's caller that is not
/// close-on-exec (a flock'd `3>file`, an outer pipe on fd 5, ...), and holds it as long as PID
/// lives: here fd 5, the write end of a pipe the test reads, never reaches EOF.
#[test]
fn the_keeper_inherits_no_descriptor_but_its_own() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let pid = sleeper();
    let script = format!(
        "redlock acquire k --while-pid {} 5>&1 >'{}' 2>/dev/null; exit 0",
        pid.id(),
        file.display()
    );
    let mut sh = redis.sh(&script);
    sh.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = sh.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        let _ = tx.send(());
    });
    token_in(&file);
    let _ = child.wait();
    let eof = rx.recv_timeout(SOON).is_ok();
    let mut pid = pid;
    let _ = pid.kill();
    let _ = pid.wait();
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
    assert!(eof, "the keeper held the caller's fd 5 (a pipe) open");
}

/// Cosmetic guard: what held — the keeper's command line and environment carry no password
/// from the URL (kept here as a regression test; it passes).
#[test]
fn no_password_from_the_url_in_the_keepers_argv_or_environ() {
    let redis = or_skip!(RedisServer::builder().password("s3cr3tpw").start());
    let mut pid = sleeper();
    let url = format!("redis://:s3cr3tpw@127.0.0.1:{}", redis.port());
    let out = redis
        .redlock()
        .args(["--url", &url, "acquire", "k", "--while-pid"])
        .arg(pid.id().to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let keepers = keepers_of(pid.id());
    assert_eq!(keepers.len(), 1);
    for what in ["cmdline", "environ"] {
        let raw = std::fs::read(format!("/proc/{}/{what}", keepers[0])).unwrap();
        assert!(
            !String::from_utf8_lossy(&raw).contains("s3cr3tpw"),
            "the password is in the keeper's {what}"
        );
    }
    let _ = pid.kill();
    let _ = pid.wait();
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
    assert!(wait_for(|| redis.get(&lock_key("k")).is_none(), SOON));
}

/// What held: on a Cluster, a lock on a master that is not the seed is renewed past several
/// TTLs, `release` ends the keeper at once (the announcement reaches it), and nothing is left.
#[test]
fn on_a_cluster_the_keeper_renews_and_hears_the_release() {
    let cluster = or_skip!(crate::common::topology::Cluster::start());
    let names = cluster.names_on_each_node("job");
    let name = &names[2];
    let node = &cluster.nodes()[2];
    let mut pid = sleeper();
    let out = cluster
        .redlock()
        .args(["acquire", name, "--ttl", "1s", "--while-pid"])
        .arg(pid.id().to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let started = std::time::Instant::now();
    assert!(wait_for(
        || {
            assert_eq!(node.get(&lock_key(name)).as_deref(), Some(token.as_str()));
            started.elapsed() >= Duration::from_millis(3500)
        },
        Duration::from_secs(30)
    ));
    let all: Vec<&RedisServer> = cluster.nodes().iter().collect();
    crate::common::wait_subscribed(&all, name);
    let released = std::time::Instant::now();
    cluster
        .redlock()
        .args(["release", name, &token])
        .run()
        .expect(0);
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
    // Heard, not found by a renewal (TTL/3 = 333ms).
    assert!(
        released.elapsed() < Duration::from_millis(300),
        "{:?}",
        released.elapsed()
    );
    assert!(!exited(&mut pid), "the pid was signalled");
    let _ = pid.kill();
    let _ = pid.wait();
    assert_eq!(node.get(&lock_key(name)), None);
}

/// Wrong output / liveness. PID ends while `acquire --wait` waits in the queue: acquire waits on
/// (first in line, delaying whoever queued behind it), takes the lock when it comes free, the
/// keeper releases it at once, and acquire exits 0 with a token for a lock nobody holds. acquire
/// has the pidfd: it should leave the queue when PID ends (exit non-zero, no token).
#[test]
fn a_pid_that_ends_while_acquire_waits_in_the_queue_gets_no_token() {
    let redis = or_skip!(RedisServer::start());
    redis
        .redlock()
        .args(["acquire", "k", "--ttl", "3s"])
        .run()
        .expect(0);
    let mut pid = sleeper();
    let mut waiter = redis.redlock();
    waiter
        .args(["acquire", "k", "--wait", "30s", "--while-pid"])
        .arg(pid.id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let waiter = waiter.spawn().unwrap();
    assert!(
        wait_for(|| redis.blocked_clients() >= 1, SOON),
        "not queued"
    );
    let _ = pid.kill();
    let _ = pid.wait();
    let out = waiter.wait_with_output().unwrap();
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
    assert!(
        !out.status.success(),
        "acquire exited 0 with token {:?} for a pid that had ended while it waited",
        String::from_utf8_lossy(&out.stdout)
    );
}
