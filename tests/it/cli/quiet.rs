//! `-q`: every line that is not an error goes, and only those. Each case runs the same scenario
//! twice, without and with `-q`: the plain run must print the line under test (so that the case
//! can fail), and the quiet one must leave stderr empty. The rule itself is written once, in
//! `src/messages.rs`; this checks that every line of `acquire`, `exec` and a quorum `release`
//! goes through it.

use crate::common::nodes::Nodes;
use crate::common::*;
use crate::support::exec::{EVENT, file, wait_ready, waiter};

/// Runs `scenario` without and then with `-q` (it gets the flag to put before the subcommand,
/// or nothing). The plain run must print every one of `lines` on stderr; the quiet run must print
/// nothing there. Both must exit with `code`.
#[track_caller]
fn quiet_silences(lines: &[&str], code: i32, mut scenario: impl FnMut(&[&str]) -> Output) {
    let loud = scenario(&[]).expect(code);
    for line in lines {
        assert!(
            loud.stderr.contains(line),
            "without -q, no {line:?}:\n{loud}"
        );
    }
    let quiet = scenario(&["-q"]).expect(code);
    assert_eq!(quiet.stderr, "", "-q left lines on stderr:\n{quiet}");
}

/// A lock that stays busy, asked for with `-n` and a TTL under a second (`redlock SUBCOMMAND k
/// -n --ttl 500ms ...`): the busy notice and the short-TTL warning.
fn busy_with_a_short_ttl(subcommand: &str, command: &[&str]) {
    let redis = or_skip!(RedisServer::start());
    hold(&redis, "k", "60s");
    quiet_silences(
        &[
            "redlock: warning: --ttl 500ms is under 1s",
            "redlock: lock 'k' is busy: held by",
        ],
        1,
        |q| {
            redis
                .redlock()
                .args(q)
                .args([subcommand, "k", "-n", "--ttl", "500ms"])
                .args(command)
                .run()
        },
    );
}

#[test]
fn acquire_busy_with_a_short_ttl() {
    busy_with_a_short_ttl("acquire", &[]);
}

/// Starts `redlock [Q] SUBCOMMAND ...` waiting for the busy lock `k`, waits until it is parked
/// in its BLPOP, then stops it with SIGTERM. Nothing else may block on the server.
fn stopped_while_waiting(redis: &RedisServer, q: &[&str], subcommand: &[&str]) -> Output {
    // The waiter of the run before has exited, but the server may not have seen its connection
    // close yet: count from zero, or its BLPOP could pass for this waiter's.
    assert!(
        wait_for(|| redis.blocked_clients() == 0, EVENT),
        "a waiter of the run before is still blocked"
    );
    let proc = redis
        .redlock()
        .args(q)
        .args(subcommand)
        .env("D", redis.dir())
        .spawn_proc();
    assert!(
        wait_for(|| redis.blocked_clients() > 0, EVENT),
        "never parked:\n{}",
        proc.stderr()
    );
    proc.signal(libc::SIGTERM);
    proc.finish(EVENT)
}

/// A waiter stopped by a signal: "SIGTERM while waiting for 'k'; gave up".
#[test]
fn acquire_stopped_while_waiting() {
    let redis = or_skip!(RedisServer::start());
    hold(&redis, "k", "60s");
    quiet_silences(
        &["redlock: SIGTERM while waiting for 'k'; gave up"],
        128 + libc::SIGTERM,
        |q| stopped_while_waiting(&redis, q, &["acquire", "k", "--wait", "60s"]),
    );
}

/// `exec` on a busy lock with `-n` and a short TTL: the same two lines as `acquire`.
#[test]
fn exec_busy_with_a_short_ttl() {
    busy_with_a_short_ttl("exec", &["--", "true"]);
}

/// `exec` stopped by a signal while it waits for its lock.
#[test]
fn exec_stopped_while_waiting() {
    let redis = or_skip!(RedisServer::start());
    hold(&redis, "k", "60s");
    quiet_silences(
        &["redlock: SIGTERM while waiting for 'k'; gave up"],
        128 + libc::SIGTERM,
        |q| stopped_while_waiting(&redis, q, &["exec", "k", "--wait", "60s", "--", "true"]),
    );
}

/// A second SIGTERM while the command runs on after the first: "second SIGTERM: killing the
/// command", and the command's SIGKILL as the exit status.
#[test]
fn exec_killing_the_command_on_a_second_sigterm() {
    let redis = or_skip!(RedisServer::start());
    quiet_silences(
        &["redlock: second SIGTERM: killing the command"],
        128 + libc::SIGKILL,
        |q| {
            let _ = std::fs::remove_file(file(&redis, "ready"));
            let mut proc = redis
                .redlock()
                .args(q)
                .arg("exec")
                .env("D", redis.dir())
                .args(["k", "--kill-after", "60s", "-c", &waiter()])
                .spawn_proc();
            wait_ready(&redis, &mut proc);
            proc.signal(libc::SIGTERM);
            // The waiter survives SIGTERM and says so: the first one was forwarded.
            assert!(
                wait_for(|| proc.stdout().contains("got TERM"), EVENT),
                "the first SIGTERM never reached the command:\n{}",
                proc.stderr()
            );
            proc.signal(libc::SIGTERM);
            proc.finish(EVENT)
        },
    );
}

/// A quorum release with a node down: released where it was held, and "the lock expires there by
/// its TTL" for the node that did not answer.
#[test]
fn quorum_release_with_a_node_down() {
    let mut nodes = or_skip!(Nodes::start(3));
    let token = |name: &str| {
        nodes
            .redlock()
            .args(["acquire", name, "--ttl", "60s"])
            .run()
            .ok()
    };
    let mut tokens = vec![token("a"), token("b")].into_iter();
    nodes[2].kill();
    let down = nodes.url(2);
    let names = ["a", "b"];
    let mut name = names.iter();
    quiet_silences(
        &[
            "where it was held; ",
            &down,
            ": the lock expires there by its TTL",
        ],
        0,
        |q| {
            nodes
                .redlock()
                .args(q)
                .args(["release", name.next().unwrap(), &tokens.next().unwrap()])
                .run()
        },
    );
}
