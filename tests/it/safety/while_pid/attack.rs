//! An adversarial review of `acquire --while-pid` (issue 26, item 1 and the marks of item 2):
//! ways the keeper still gives the lock to the next holder while the holder's work runs, or
//! leaves something in Redis. Each test fails on the code it was written against, and is
//! `#[ignore]`d until the keeper is fixed (run them with
//! `cargo test --test it safety::while_pid::attack -- --ignored`). Real servers, real processes;
//! every wait is on an event, with a generous bound.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::{next_holder, ran_alone};
use crate::common::keeper::{SOON, keepers_of, step_started, stubborn_step, token_in, work_script};
use crate::common::{Output, Proc, RedisServer, Run, wait_for, wait_subscribed};

/// Preempts `k`, held by the script the caller started (`holder`), and fails with `beside` if
/// the preemptor's overlap check found a process of the holder's work still running.
fn preempt(redis: &RedisServer, d: &Path, holder: &Proc, beside: &str) -> Output {
    wait_subscribed(&[redis], "k");
    ran_alone(
        d,
        next_holder(redis.redlock(), d, &["--preempt"]),
        holder,
        beside,
    )
}

/// Fails if a step run under `timeout` (coreutils: it moves itself into a process group of its
/// own, unless --foreground) escapes the keeper: the script leads its group, so the keeper
/// takes the group for the work, stops the script, finds the group empty and releases while
/// `timeout` and its command run on beside the preemptor.
#[test]
fn a_step_under_timeout_is_waited_for_when_the_script_is_preempted() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let steps = d.join("steps");
    let step = format!(
        "echo started >>\"{s}\"; timeout 60 sleep 4; echo done >>\"{s}\"",
        s = steps.display()
    );
    let holder = redis
        .sh(&work_script(d, "--preemptible --kill-after 2s", &step))
        .spawn_proc();
    token_in(&d.join("token"));
    step_started(d);
    preempt(
        &redis,
        d,
        &holder,
        "the preemptor ran beside the holder's `timeout` step",
    );
    assert!(wait_for(|| keepers_of(holder.id()).is_empty(), SOON));
}

/// The holder of `an_exit_trap_that_releases_...`: a bash script whose EXIT trap releases its
/// lock, and whose foreground step ignores SIGTERM.
fn trapping_holder(d: &Path) -> std::path::PathBuf {
    trapping_holder_with(d, "--preemptible")
}

/// [`trapping_holder`], with `flags` for its acquire.
fn trapping_holder_with(d: &Path, flags: &str) -> std::path::PathBuf {
    let script = d.join("holder.bash");
    std::fs::write(
        &script,
        format!(
            "exec 9>'{work}'; flock 9
             T=$(redlock acquire k --while-pid $$ --ttl 6s {flags} --kill-after 2s) || exit
             trap 'redlock release k \"$T\"' EXIT
             echo \"$T\" >'{token}'
             sh -c 'trap \"\" TERM; echo started >>\"{steps}\"; sleep 600'
            ",
            work = d.join("work").display(),
            token = d.join("token").display(),
            steps = d.join("steps").display(),
        ),
    )
    .unwrap();
    script
}

/// Fails if the keeper, having sent SIGTERM to a preempted script's group, ends quietly when
/// the script's EXIT trap releases the lock (bash runs it at once on SIGTERM, while its
/// foreground step still runs): the step, which ignores SIGTERM, never gets the SIGKILL that
/// `--kill-after` promises, and runs on beside the preemptor.
#[test]
fn an_exit_trap_that_releases_does_not_cut_the_keepers_stop_short() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = trapping_holder(d);
    let holder = redis
        .sh(&format!("exec bash '{}'", script.display()))
        .spawn_proc();
    token_in(&d.join("token"));
    step_started(d);
    preempt(
        &redis,
        d,
        &holder,
        "the preemptor ran beside the holder's step (the trap's release ended the keeper)",
    );
    assert!(
        holder
            .stderr()
            .contains("releases it once that work has ended"),
        "the trap's release did not say that the keeper releases\n{}",
        holder.stderr()
    );
}

/// The same on a quorum of three: the keeper records that it stops the work on every node, and
/// the trap's release, deferred on each, hands nothing on.
#[test]
fn on_a_quorum_an_exit_trap_that_releases_does_not_cut_the_keepers_stop_short() {
    let nodes = or_skip!(crate::common::nodes::Nodes::start(3));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = trapping_holder(d);
    let holder = nodes
        .sh(&format!("exec bash '{}'", script.display()))
        .spawn_proc();
    token_in(&d.join("token"));
    step_started(d);
    let servers: Vec<&RedisServer> = nodes.servers().collect();
    wait_subscribed(&servers[..1], "k");
    ran_alone(
        d,
        next_holder(nodes.redlock(), d, &["--preempt"]),
        &holder,
        "the preemptor ran beside the holder's step on a quorum",
    );
}

/// The same for a place (`--slots 1`) whose keeper gets SIGTERM: the trap's release of the
/// place waits for the keeper, and the next holder gets the place only once the step is gone.
#[test]
fn a_places_exit_trap_release_does_not_cut_the_keepers_stop_short() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = trapping_holder_with(d, "--slots 1");
    let holder = redis
        .sh(&format!("exec bash '{}'", script.display()))
        .spawn_proc();
    token_in(&d.join("token"));
    step_started(d);
    let keepers = keepers_of(holder.id());
    assert_eq!(keepers.len(), 1, "{}", holder.stderr());
    // SAFETY: kill(2) on the keeper's pid, which we just found.
    unsafe { libc::kill(keepers[0] as i32, libc::SIGTERM) };
    ran_alone(
        d,
        next_holder(redis.redlock(), d, &["--slots", "1"]),
        &holder,
        "the next holder ran beside the step (the trap's release freed the place)",
    );
}

/// Fails if the keeper's own release (its pid and the work ended) leaves the release's mark
/// `PREFIX{k}:gone:TOKEN` behind: no keeper is left to read it, yet it lasts the TTL and 2 s
/// (an hour here). The same for a kept place (`--slots`), whose 'kept' marker must go too.
#[test]
fn the_keepers_own_release_leaves_no_mark() {
    let redis = or_skip!(RedisServer::start());
    for extra in [&[][..], &["--slots", "2"][..]] {
        let mut pid = crate::common::keeper::sleeper();
        let out = redis
            .redlock()
            .args([
                "acquire",
                "k",
                "--while-pid",
                &pid.id().to_string(),
                "--ttl",
                "1h",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{extra:?}: {out:?}");
        let keepers = keepers_of(pid.id());
        assert_eq!(keepers.len(), 1);
        pid.kill().unwrap();
        pid.wait().unwrap();
        assert!(
            wait_for(|| redis.get(&crate::common::lock_key("k")).is_none(), SOON),
            "{extra:?}: never released"
        );
        assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
        let left: Vec<String> = redis
            .keys()
            .into_iter()
            .filter(|k| k.contains(":gone:"))
            .collect();
        assert!(
            left.is_empty(),
            "{extra:?}: left behind: {left:?} (pttl {} ms)",
            left.first().map_or(0, |k| redis.pttl(k))
        );
    }
}

/// Fails if a script that releases its lock and exits (the README's own example) gets a false
/// alarm from its keeper: the pid's end reaches the keeper before the release's announcement
/// (which it now confirms with a read first), so the keeper releases too, finds the lock gone,
/// and says "was no longer ours at release: the lock key is gone (expired, or deleted, ...)"
/// on the script's stderr (18 runs of 20 in the review), leaving the release's mark behind.
#[test]
fn release_then_exit_gives_no_false_alarm() {
    let redis = or_skip!(RedisServer::start());
    for round in 0..5 {
        let out = redis
            .sh(
                "exec bash -c 'T=$(redlock acquire k --while-pid $$ --ttl 6s) || exit
                 redlock release k \"$T\"'",
            )
            .spawn_proc()
            .finish(Duration::from_secs(30))
            .expect(0);
        assert!(
            !out.stderr.contains("no longer ours"),
            "round {round}: a false alarm after a normal release\n{out}"
        );
    }
    let marks: Vec<String> = redis
        .keys()
        .into_iter()
        .filter(|k| k.contains(":gone:"))
        .collect();
    assert!(marks.is_empty(), "marks left behind: {marks:?}");
}

/// Fails if a process of the work whose main thread has ended while its other threads run
/// (`/proc/PID/stat` then says `Z` for it, but `Threads:` is 2) is taken for ended: the keeper
/// releases the lock while it still runs. Here the script exits and leaves such a process (a
/// python3 whose main thread calls pthread_exit) in its group.
#[test]
fn a_process_whose_main_thread_exited_is_still_work() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let py = d.join("threads.py");
    std::fs::write(
        &py,
        format!(
            "import ctypes, threading, time\n\
             def work():\n    open('{steps}', 'a').write('started\\n'); time.sleep(4)\n\
             threading.Thread(target=work).start()\n\
             time.sleep(0.2)\n\
             ctypes.CDLL(None).pthread_exit(None)\n",
            steps = d.join("steps").display()
        ),
    )
    .unwrap();
    let script = d.join("holder.bash");
    std::fs::write(
        &script,
        format!(
            "exec 9>'{work}'; flock 9
             T=$(redlock acquire k --while-pid $$ --ttl 6s) || exit
             python3 '{py}' &
             echo \"$T\" >'{token}'
            ",
            work = d.join("work").display(),
            token = d.join("token").display(),
            py = py.display(),
        ),
    )
    .unwrap();
    let holder = redis
        .sh(&format!("exec bash '{}'", script.display()))
        .spawn_proc();
    token_in(&d.join("token"));
    step_started(d);
    ran_alone(
        d,
        next_holder(redis.redlock(), d, &[]),
        &holder,
        "the waiter ran beside a process of the holder's work",
    );
}

/// Fails if a script run as `SCRIPT 2>&1 | cat` by a shell with job control (a terminal's, or
/// `set -m`: the pipeline is one process group, led by SCRIPT) never gets its pipeline back: the
/// keeper keeps SCRIPT's stderr, the pipe to `cat` (a pipe that is PID's own stderr may stay),
/// and waits for the group, `cat` included, to end; `cat` waits for the end of the pipe, which
/// the keeper holds. The keeper renews the lock for ever.
#[test]
fn a_pipeline_reading_the_scripts_stderr_ends() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = d.join("holder.bash");
    std::fs::write(
        &script,
        format!(
            "T=$(redlock acquire k --while-pid $$ --ttl 6s) || exit
             echo \"$T\" >'{token}'
            ",
            token = d.join("token").display(),
        ),
    )
    .unwrap();
    let outer = d.join("outer.bash");
    std::fs::write(
        &outer,
        format!(
            "set -m
             bash '{script}' 2>&1 | cat >/dev/null
             echo pipeline-ended
            ",
            script = script.display()
        ),
    )
    .unwrap();
    let shell = redis
        .sh(&format!("exec bash '{}'", outer.display()))
        .spawn_proc();
    token_in(&d.join("token"));
    let ended = wait_for(|| shell.stdout().contains("pipeline-ended"), SOON);
    let held = redis.get(&crate::common::lock_key("k")).is_some();
    if !ended {
        // The reader is in the script's group, not the shell's: stop it (by its pid, a child of
        // the shell), which ends the keeper.
        for pid in children_of(shell.id()) {
            crate::common::signal(pid, libc::SIGKILL);
        }
    }
    assert!(
        ended,
        "the pipeline never ended (lock still held: {held})\n--- stderr:\n{}",
        shell.stderr()
    );
}

/// The pids of the processes whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if rest.split_whitespace().nth(1) == Some(parent.to_string().as_str()) {
            found.push(pid);
        }
    }
    found
}

/// Runs the bash `script` as the command of `exec outer --preemptible --kill-after 1s`, waits for
/// the token the script writes to the file `{token}` stands for, preempts `outer` and returns what
/// the preempted exec printed.
fn preempt_exec_running(redis: &RedisServer, script: &str) -> crate::common::Output {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let path = d.join("inner.bash");
    let token = d.join("token");
    std::fs::write(
        &path,
        script.replace("{token}", &token.display().to_string()),
    )
    .unwrap();
    let outer = redis
        .sh(&format!(
            "exec redlock exec outer --preemptible --kill-after 1s -- bash '{}'",
            path.display()
        ))
        .spawn_proc();
    token_in(&token);
    wait_subscribed(&[redis], "outer");
    redis
        .redlock()
        .args(["exec", "outer", "--preempt", "--wait", "30s", "--", "true"])
        .spawn_proc()
        .finish(Duration::from_secs(30))
        .expect(0);
    outer.finish(Duration::from_secs(30))
}

/// Fails if a keeper started under `exec --preemptible` (or `--max-runtime`) dies with the
/// command's leftovers: exec adopts its command's orphans (a subreaper), and the keeper of a
/// second lock taken inside the command (`acquire inner --while-pid $$`) is one; when exec stops
/// the command, it sends SIGTERM, then SIGKILL after --kill-after, to every adopted process, the
/// keeper included, while the keeper still waits for the same work to end (a step it knows:
/// started before the acquire, so that the keeper's first scan finds it). Killed, the keeper
/// never releases `inner`, which stays held by nobody for the rest of its TTL.
/// Now exec sends a keeper SIGTERM only, and gives it until its work is gone and its release
/// done (see `exec::keeper_grace`). Failed before ('inner' still held, pttl about an hour).
#[test]
fn a_keeper_under_a_preempted_exec_still_releases_its_lock() {
    let redis = or_skip!(RedisServer::start());
    let out = preempt_exec_running(
        &redis,
        "sh -c 'trap \"\" TERM; sleep 600' &
         T=$(redlock acquire inner --while-pid $$ --ttl 1h) || exit
         echo \"$T\" >'{token}'
         wait
        ",
    );
    assert!(
        wait_for(
            || redis.get(&crate::common::lock_key("inner")).is_none(),
            SOON
        ),
        "'inner' is still held (pttl {} ms) with its keeper gone\n{out}",
        redis.pttl(&crate::common::lock_key("inner"))
    );
}

/// A keeper that keeps a lock for exec itself (`--while-pid $PPID` in the command run by exec)
/// is left alone when exec stops its command's leftovers: it releases once exec has ended.
/// Signalled, it would stop its pid (exec) and wait for it, while exec waited for it.
#[test]
fn a_keeper_kept_for_exec_itself_releases_once_exec_ends() {
    let redis = or_skip!(RedisServer::start());
    let out = preempt_exec_running(
        &redis,
        "T=$(redlock acquire mine --while-pid $PPID --ttl 1h) || exit
         echo \"$T\" >'{token}'
         sleep 600
        ",
    );
    assert!(
        wait_for(
            || redis.get(&crate::common::lock_key("mine")).is_none(),
            SOON
        ),
        "'mine' is still held (pttl {} ms) after exec ended\n{out}",
        redis.pttl(&crate::common::lock_key("mine"))
    );
    assert!(
        out.elapsed < Duration::from_secs(8),
        "exec waited for the keeper of its own pid:\n{out}"
    );
}

// A review of issue 27's refactor (one renewal for exec and the keeper, `renew.rs`) against
// 17229c6: the tests below failed on the refactor and pass on the code before it.

/// The extensions (`extend.lua`) of `token` that the server ran, as MONITOR saw them: the
/// server's time (seconds) and whether the holder said it stops its work (`draining`).
fn extensions(lines: &[String], token: &str) -> Vec<(f64, bool)> {
    let mut seen = Vec::new();
    for line in lines {
        let Some(time) = line.split(' ').next().and_then(|t| t.parse::<f64>().ok()) else {
            continue;
        };
        let Some((_, rest)) = line.split_once("] ") else {
            continue;
        };
        // Quoted arguments; the ones looked at (a token, numbers) hold no escape.
        let args: Vec<&str> = rest.split('"').skip(1).step_by(2).collect();
        if !args
            .first()
            .is_some_and(|c| c.eq_ignore_ascii_case("evalsha"))
        {
            continue;
        }
        let Some(numkeys) = args.get(2).and_then(|n| n.parse::<usize>().ok()) else {
            continue;
        };
        // extend.lua: token, ttl, want_run_id, meta_ttl, draining.
        match &args[(3 + numkeys).min(args.len())..] {
            [t, _, _, _, draining] if *t == token => seen.push((time, *draining == "1")),
            _ => {}
        }
    }
    seen
}

/// Fails if the renewal the keeper sends when it starts to stop PID's work (SIGTERM to the
/// keeper: it marks the lock `draining`, see `Keeper::mark_stopping`) does not count as a
/// renewal for the next one's due time: the next was still due a TTL/3 after the renewal
/// before, so the keeper renewed twice within a fraction of TTL/3 (with `--ttl 6s`, 0.8 s apart
/// instead of 2 s). Before the refactor the next renewal was due TTL/3 after the marking one.
#[test]
#[cfg_attr(
    feature = "portable",
    ignore = "portable: a keeper lets go of a pipe on its stderr (no /proc to tell whose it is)"
)]
fn the_renewal_that_marks_the_lock_draining_sets_the_next_ones_due_time() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let stubborn = stubborn_step(d);
    let mut holder = super::start_work(&redis, d, "--kill-after 60s", &stubborn);
    let token = std::fs::read_to_string(d.join("token")).unwrap();
    let token = token.trim().to_string();
    let keepers = keepers_of(holder.id());
    assert_eq!(keepers.len(), 1);
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut con = redis.cli();
    con.set_read_timeout(None).unwrap();
    redis::cmd("MONITOR").query::<()>(&mut con).unwrap();
    let sink = std::sync::Arc::clone(&lines);
    // Ends when the server goes away.
    std::thread::spawn(move || {
        while let Ok(v) = con.recv_response() {
            if let redis::Value::SimpleString(line) = v {
                sink.lock().unwrap().push(line);
            }
        }
    });
    let renewals = || extensions(&lines.lock().unwrap(), &token);
    // SIGTERM late in an interval (--ttl 6s: a renewal every 2 s), so that the next renewal is
    // not due yet when the keeper marks the lock. The pause is not a wait for an event but the
    // point in time the test is about; a machine too slow to keep to it tries the next interval.
    let mut placed = false;
    for _ in 0..5 {
        let seen = renewals().len();
        assert!(wait_for(|| renewals().len() > seen, SOON), "no renewal");
        let renewed = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(1200));
        if renewed.elapsed() < Duration::from_millis(1700) {
            placed = true;
            break;
        }
    }
    assert!(placed, "too slow to place the SIGTERM within an interval");
    crate::common::signal(keepers[0], libc::SIGTERM);
    holder.wait_for_stderr("got SIGTERM", SOON);
    let marked = || renewals().into_iter().filter(|r| r.1).collect::<Vec<_>>();
    assert!(wait_for(|| marked().len() >= 2, SOON), "{:?}", renewals());
    let marked = marked();
    let gap = marked[1].0 - marked[0].0;
    // Ends the keeper (SIGKILL to the step, then the release).
    crate::common::signal(keepers[0], libc::SIGTERM);
    assert!(
        wait_for(|| keepers_of(holder.id()).is_empty(), SOON),
        "the keeper still runs"
    );
    assert!(
        gap >= 1.5,
        "the renewal after the one that marked the lock came {gap:.3} s after it, not a TTL/3 \
         (2 s): {:?}\n{}",
        renewals(),
        holder.stderr()
    );
}
