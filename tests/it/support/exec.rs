//! What the `exec` test binaries share: child scripts that say when they are ready and report
//! the signals they get, and ways to read what they reported.
//!
//! Every child finds a scratch directory in `$D` (the test server's temp dir). Before it signals
//! readiness by creating `$D/ready`, it writes its pid to `$D/pid` and its `REDLOCK_*` variables
//! to `$D/env`, so a test that saw `ready` can read both and knows the child's traps are set.

#![allow(dead_code)] // each test crate uses its own subset

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

/// The bound for an event that normally takes milliseconds.
pub const EVENT: Duration = Duration::from_secs(10);

/// Records pid and environment, then signals readiness. Traps must be set before this runs.
const REPORT: &str = r#"
echo $$ > "$D/pid"
env | grep '^REDLOCK_' | sort > "$D/env"
touch "$D/ready"
"#;

/// A child that reports each terminating signal on stdout and exits with 100+N (not 128+N, so
/// that a test can tell the child's status from one redlock made up). SIGUSR2 is reported and
/// survived; SIGUSR1 is reported and ends the child with 0. Its sleep never outlives it.
pub fn trapper() -> String {
    format!(
        r#"
report() {{ echo "got $1"; kill $p 2>/dev/null; exit $2; }}
trap 'report HUP 101' HUP
trap 'report INT 102' INT
trap 'report QUIT 103' QUIT
trap 'report TERM 115' TERM
trap 'report USR1 0' USR1
trap 'echo got USR2' USR2
sleep 30 </dev/null >/dev/null 2>&1 &
p=$!
{REPORT}
while kill -0 $p 2>/dev/null; do wait $p; done
echo "slept 30s without a signal"
exit 99
"#
    )
}

/// A child that runs until the test creates `$D/done`, then exits with `$CODE` (default 0).
/// SIGTERM does not stop it: it prints `got TERM` and runs on, so only SIGKILL ends it early.
/// It also ends when `$D` is gone, so that a failed test does not leave it running for ever.
pub fn waiter() -> String {
    format!(
        r#"
trap 'echo got TERM' TERM
{REPORT}
while [ ! -e "$D/done" ]; do
  [ -d "$D" ] || exit 98
  sleep 0.02
done
echo finished
exit ${{CODE:-0}}
"#
    )
}

/// A child that counts the signals it gets: each delivery of HUP, INT, QUIT, TERM, USR1 or USR2
/// appends the signal's name as a line to `$D/sigs`, and the child runs on until the test
/// creates `$D/done`, then exits with `$CODE` (default 0). It waits in the `wait` builtin, which
/// a trapped signal interrupts at once, so each delivery runs its trap before the next can
/// arrive (two copies can still merge in the kernel if both arrive before the first is
/// delivered: standard signals are not queued).
pub fn counter() -> String {
    format!(
        r#"
for s in HUP INT QUIT TERM USR1 USR2; do trap "echo $s >> \"\$D/sigs\"" $s; done
{REPORT}
while [ ! -e "$D/done" ]; do
  [ -d "$D" ] || exit 98
  sleep 0.05 </dev/null & p=$!
  wait $p
  kill $p 2>/dev/null
done
exit ${{CODE:-0}}
"#
    )
}

/// The signals a [`counter`] has counted so far, in order.
pub fn counted(redis: &RedisServer) -> Vec<String> {
    std::fs::read_to_string(file(redis, "sigs"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Waits until a [`counter`] has counted `n` signals; returns them.
#[track_caller]
pub fn wait_counted(redis: &RedisServer, n: usize) -> Vec<String> {
    assert!(
        wait_for(|| counted(redis).len() >= n, EVENT),
        "the command counted {:?}, not {n} signals",
        counted(redis)
    );
    counted(redis)
}

/// Makes sure no more copies of what a [`counter`] was sent through redlock are on their way:
/// sends SIGUSR2 to redlock (`pid`) twice, each time waiting until the counter has it. redlock
/// forwards signals one at a time in the order they came, so every copy it sent before is
/// pending or delivered by then; the shell runs the traps of all pending signals in one pass
/// (in signal-number order, so a SIGTERM after the SIGUSR2), and the second SIGUSR2 is counted
/// only in a later pass.
#[track_caller]
pub fn flush_forwarded(redis: &RedisServer, pid: u32) -> Vec<String> {
    for _ in 0..2 {
        let before = counted(redis).len();
        signal(pid, libc::SIGUSR2);
        let seen = wait_for(
            || counted(redis)[before..].iter().any(|s| s == "USR2"),
            EVENT,
        );
        assert!(
            seen,
            "SIGUSR2 never reached the command: {:?}",
            counted(redis)
        );
    }
    counted(redis).into_iter().filter(|s| s != "USR2").collect()
}

/// `redlock exec` with `REDLOCK_URL` naming `redis` and `$D` set for the child.
pub fn exec(redis: &RedisServer) -> Command {
    let mut cmd = redis.redlock();
    cmd.arg("exec").env("D", redis.dir());
    cmd
}

/// `$D/name`.
pub fn file(redis: &RedisServer, name: &str) -> PathBuf {
    redis.dir().join(name)
}

/// Waits until the child has created `$D/ready`; panics with redlock's output if it does not.
#[track_caller]
pub fn wait_ready(redis: &RedisServer, proc: &mut Proc) {
    let ready = file(redis, "ready");
    let seen = wait_for(|| ready.exists() || !proc.running(), EVENT);
    assert!(
        seen && ready.exists(),
        "the child never became ready (redlock running: {})\n--- stdout:\n{}--- stderr:\n{}---",
        proc.running(),
        proc.stdout(),
        proc.stderr()
    );
}

/// Tells a [`waiter`] to finish.
pub fn done(redis: &RedisServer) {
    std::fs::write(file(redis, "done"), "").unwrap();
}

/// The pid the child reported.
pub fn child_pid(redis: &RedisServer) -> u32 {
    let text = std::fs::read_to_string(file(redis, "pid")).unwrap();
    text.trim().parse().unwrap()
}

/// The `REDLOCK_*` variables the child reported.
pub fn child_env(redis: &RedisServer) -> HashMap<String, String> {
    std::fs::read_to_string(file(redis, "env"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Whether process `pid` is gone or a zombie (dead, waiting to be reaped).
pub fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name, which is in parentheses and may contain spaces.
        Ok(stat) => matches!(
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next()),
            Some("Z" | "X")
        ),
    }
}

/// The token in lock `name` and its PTTL, read in one atomic step.
pub fn lock_state(con: &mut redis::Connection, name: &str) -> (Option<String>, i64) {
    let key = lock_key(name);
    redis::pipe()
        .atomic()
        .cmd("GET")
        .arg(&key)
        .cmd("PTTL")
        .arg(&key)
        .query(con)
        .unwrap()
}
