//! Test hygiene: a test that fails leaves none of its processes behind.
//!
//! A `redlock` started by a test (usually under `sh -c`) that outlived the test would ride out its
//! `--wait` against a server that is gone, for hours or forever, on a machine shared by every
//! test: `Proc` kills the whole process group it leads when dropped, which is what unwinding a
//! panicking test does.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use crate::common::*;

/// A process as `/proc/PID/stat` describes it.
#[derive(Debug, Clone, PartialEq)]
struct Process {
    pid: u32,
    comm: String,
    ppid: u32,
    /// In clock ticks since boot: with the pid, names the process even if the pid is reused.
    start: u64,
    /// `Z` for a zombie.
    state: char,
}

/// `/proc/PID/stat` read, if the process exists.
fn stat(pid: u32) -> Option<Process> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid pgrp ... starttime (field 22); comm may hold spaces and parentheses.
    let (head, rest) = text.rsplit_once(") ")?;
    let comm = head.split_once(" (")?.1.to_string();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Process {
        pid,
        comm,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Every process descended from `root` (children, their children, ...), found by parent pid.
fn descendants(root: u32) -> Vec<Process> {
    let all: Vec<Process> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(stat)
        .collect();
    let mut found: Vec<Process> = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for p in all.iter().filter(|p| p.ppid == parent) {
            if !found.iter().any(|f| f.pid == p.pid) {
                parents.push(p.pid);
                found.push(p.clone());
            }
        }
    }
    found
}

/// Whether the process is gone: no such pid, a zombie (killed, not reaped yet by whoever
/// inherited it), or the pid reused by another process.
fn gone(p: &Process) -> bool {
    stat(p.pid).is_none_or(|now| now.state == 'Z' || now.start != p.start)
}

/// A holder (`redlock exec` with a long command) and a waiter (`redlock acquire --wait 1h`), each
/// under a shell that does not `exec` it, are running when the test body panics: once the panic
/// has unwound, none of them (the shells, both redlocks, the command) may still run. Fails if
/// `Proc` kills only the process it started (the shell): both redlocks and the command would
/// stay, the waiter for an hour.
#[test]
fn a_panicking_test_leaves_no_redlock_behind() {
    let redis = or_skip!(RedisServer::start());
    let mut started: Vec<Process> = Vec::new();
    let body = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut holder = redis
            .sh(r#"redlock exec k -- sh -c 'touch "$D/held"; sleep 600'; echo "exit $?""#)
            .env("D", redis.dir())
            .spawn_proc();
        let held = redis.dir().join("held");
        assert!(
            wait_for(|| held.exists(), HANG),
            "the holder's command never ran:\n{}",
            holder.stderr()
        );
        let mut waiter = redis
            .sh(r#"redlock acquire k --wait 1h; echo "exit $?""#)
            .spawn_proc();
        assert!(
            wait_for(|| queue(&redis, "k").len() == 1, HANG),
            "the waiter never queued:\n{}",
            waiter.stderr()
        );
        assert!(holder.running() && waiter.running());
        // The shells, both redlocks and the command (`sleep` starts after the file is there).
        let tree = || -> Vec<Process> {
            [holder.id(), waiter.id()]
                .into_iter()
                .flat_map(|leader| stat(leader).into_iter().chain(descendants(leader)))
                .collect()
        };
        let complete = |t: &[Process]| {
            t.iter().filter(|p| p.comm == "redlock").count() == 2
                && t.iter().any(|p| p.comm == "sleep")
        };
        assert!(
            wait_for(|| complete(&tree()), HANG),
            "not the processes expected: {:?}",
            tree()
        );
        started = tree();
        panic!("a test failing with its processes running (on purpose)");
    }));
    assert!(body.is_err(), "the body was meant to panic");
    let names: Vec<&str> = started.iter().map(|p| p.comm.as_str()).collect();
    assert_eq!(
        names.iter().filter(|&&n| n == "redlock").count(),
        2,
        "not the processes expected: {started:?}"
    );
    assert!(names.contains(&"sleep"), "{started:?}");
    // The group was SIGKILLed as the panic unwound; a process that escaped would stay for good.
    let cleaned = wait_for(|| started.iter().all(gone), Duration::from_secs(20));
    let left: Vec<Process> = started.iter().filter(|p| !gone(p)).cloned().collect();
    for p in &left {
        // Whatever this test failed to clean, it must not leave behind either.
        // SAFETY: kill has no memory-safety preconditions; the pid was checked just above.
        unsafe {
            libc::kill(p.pid as libc::pid_t, libc::SIGKILL);
        }
    }
    assert!(
        cleaned,
        "still running after the test body panicked: {left:?}"
    );
}

/// Fails while `Proc::finish` joined its output readers without a limit: a process the command
/// started and left running with its stdout (a detached keeper, here a `sleep`) kept the test
/// waiting as long as that process lived (one mutated run hung 10 minutes). It must fail within
/// its bound instead, with what was read so far.
#[test]
fn finish_fails_rather_than_hangs_on_pipes_a_leftover_holds() {
    let proc = sh("echo before; sleep 60 & exit 0").spawn_proc();
    let group = proc.id();
    let begun = std::time::Instant::now();
    let finished =
        std::panic::catch_unwind(AssertUnwindSafe(|| proc.finish(Duration::from_secs(2))));
    let took = begun.elapsed();
    // Every process (pid 1's parent is 0): the `sleep` left in the group.
    let left = descendants(0)
        .into_iter()
        .filter(|p| p.comm == "sleep" && pgid(p.pid) == Some(group))
        .collect::<Vec<_>>();
    for p in &left {
        // SAFETY: kill has no memory-safety preconditions; the pid was found just above.
        unsafe {
            libc::kill(p.pid as libc::pid_t, libc::SIGKILL);
        }
    }
    let message = match finished {
        Ok(out) => {
            panic!("finish waited {took:?} for the pipe a leftover held, past its bound: {out}")
        }
        Err(e) => e.downcast_ref::<String>().cloned().unwrap_or_default(),
    };
    assert!(took < Duration::from_secs(20), "finish took {took:?}");
    assert!(message.contains("still open"), "{message}");
    assert!(
        message.contains("before"),
        "not what was read so far: {message}"
    );
}

/// The process group of `pid`, if it exists.
fn pgid(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    rest.split(' ').nth(2)?.parse().ok()
}
