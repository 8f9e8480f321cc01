//! `redlock exec --report FILE|-`: one JSON line per run, whatever the outcome (the command's
//! success or failure, a busy lock, a signal, a lost lock), appended to FILE (opened before the
//! lock is taken) or printed on stdout after the command's output. Never the token.

use std::path::Path;

use crate::common::*;
use crate::support::exec::*;
use serde_json::Value;

/// Every line of the report file at `path`, each parsed as JSON (panics on anything else).
fn lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    assert!(text.ends_with('\n'), "the last line is not ended: {text:?}");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// The one line of the report at `path`.
#[track_caller]
fn only_line(path: &Path) -> Value {
    let mut all = lines(path);
    assert_eq!(all.len(), 1, "{all:?}");
    all.remove(0)
}

/// The command's `$REDLOCK_TOKEN`, which the child scripts below save in `$D/token`.
const SAVE_TOKEN: &str =
    r#"printf %s "$REDLOCK_TOKEN" > "$D/token"; printf %s "$REDLOCK_FENCE" > "$D/fence""#;

/// A success, then a failing command, into the same file: two lines, appended, with the fence
/// and the fingerprint of the token the command had, the command's status and redlock's, and
/// nothing of the token beyond its fingerprint.
#[test]
fn a_report_line_per_run_with_fence_fingerprint_and_statuses_and_no_token() {
    let redis = or_skip!(RedisServer::start());
    let report = file(&redis, "report.jsonl");
    let path = report.to_str().unwrap();
    exec(&redis)
        .args(["--report", path, "k", "-c", SAVE_TOKEN])
        .run()
        .expect(0);
    let token = std::fs::read_to_string(file(&redis, "token")).unwrap();
    let fence: i64 = std::fs::read_to_string(file(&redis, "fence"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(is_token(&token), "{token}");
    let line = only_line(&report);
    assert_eq!(line["key"], "k", "{line}");
    assert_eq!(line["acquired"], true, "{line}");
    assert_eq!(line["busy"], false, "{line}");
    assert_eq!(line["fence"], fence, "{line}");
    assert_eq!(line["token_fingerprint"], &token[..8], "{line}");
    assert_eq!(line["exit"], 0, "{line}");
    assert_eq!(line["command_status"], 0, "{line}");
    assert_eq!(line["lost"], false, "{line}");
    assert_eq!(line["lost_reason"], Value::Null, "{line}");
    assert_eq!(line["signal"], Value::Null, "{line}");
    assert!(
        line["waited_ms"].is_u64() && line["held_ms"].is_u64(),
        "{line}"
    );

    let out = exec(&redis)
        .args(["--report", path, "k", "-c", "exit 3"])
        .run()
        .expect(3);
    let all = lines(&report);
    assert_eq!(
        all.len(),
        2,
        "the second run did not append:\n{all:?}\n{out}"
    );
    assert_eq!(all[0], line, "the first line changed");
    assert_eq!(all[1]["exit"], 3, "{}", all[1]);
    assert_eq!(all[1]["command_status"], 3, "{}", all[1]);
    assert_eq!(all[1]["acquired"], true, "{}", all[1]);
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(
        !text.contains(&token),
        "the token is in the report:\n{text}"
    );
    assert!(
        !text.contains(&token[..9]),
        "more than the fingerprint:\n{text}"
    );
}

/// `-n` on a busy lock: a line too, with acquired=false and busy=true, and the exit status of a
/// busy lock; the command never ran.
#[test]
fn a_busy_lock_is_reported_as_not_acquired() {
    let redis = or_skip!(RedisServer::start());
    hold(&redis, "k", "60s");
    let report = file(&redis, "report.jsonl");
    exec(&redis)
        .args([
            "-n",
            "--report",
            report.to_str().unwrap(),
            "k",
            "-c",
            "touch \"$D/ran\"",
        ])
        .run()
        .expect(1);
    assert!(!file(&redis, "ran").exists());
    let line = only_line(&report);
    assert_eq!(line["acquired"], false, "{line}");
    assert_eq!(line["busy"], true, "{line}");
    assert_eq!(line["exit"], 1, "{line}");
    assert_eq!(line["fence"], Value::Null, "{line}");
    assert_eq!(line["token_fingerprint"], Value::Null, "{line}");
    assert_eq!(line["held_ms"], Value::Null, "{line}");
    assert_eq!(line["command_status"], Value::Null, "{line}");
    assert_eq!(line["lost"], false, "{line}");
}

/// A SIGTERM forwarded to a command that dies of it: the signal's name, 143 for both statuses.
/// A SIGINT while waiting for the lock: not acquired, the signal's name, exit 130.
#[test]
fn a_signal_is_reported_by_name() {
    let redis = or_skip!(RedisServer::start());
    let report = file(&redis, "report.jsonl");
    let path = report.to_str().unwrap();
    let mut proc = exec(&redis)
        .args([
            "--report",
            path,
            "k",
            "-c",
            "touch \"$D/ready\"; exec sleep 30",
        ])
        .spawn_proc();
    wait_ready(&redis, &mut proc);
    proc.signal(libc::SIGTERM);
    let out = proc.finish(EVENT).expect(143);
    let line = only_line(&report);
    assert_eq!(line["signal"], "SIGTERM", "{line}\n{out}");
    assert_eq!(line["command_status"], 143, "{line}");
    assert_eq!(line["exit"], 143, "{line}");
    assert_eq!(line["acquired"], true, "{line}");
    std::fs::remove_file(&report).unwrap();

    hold(&redis, "k", "60s");
    let proc = exec(&redis)
        .args(["--report", path, "k", "--wait", "60s", "-c", "true"])
        .spawn_proc();
    assert!(
        wait_for(|| queue(&redis, "k").len() == 1, EVENT),
        "never queued"
    );
    proc.signal(libc::SIGINT);
    let out = proc.finish(EVENT).expect(130);
    let line = only_line(&report);
    assert_eq!(line["signal"], "SIGINT", "{line}\n{out}");
    assert_eq!(line["acquired"], false, "{line}");
    assert_eq!(line["busy"], false, "{line}");
    assert_eq!(line["exit"], 130, "{line}");
    assert_eq!(line["command_status"], Value::Null, "{line}");
}

/// A lock deleted while the command runs: lost, and why; redlock's 75 beside the command's own
/// status (the trapper's 115 for the SIGTERM it got).
#[test]
fn a_lost_lock_is_reported_with_its_reason() {
    let redis = or_skip!(RedisServer::start());
    let report = file(&redis, "report.jsonl");
    let mut proc = exec(&redis)
        .args([
            "--report",
            report.to_str().unwrap(),
            "k",
            "--ttl",
            "5s",
            "-c",
            &trapper(),
        ])
        .spawn_proc();
    wait_ready(&redis, &mut proc);
    redis.query::<()>(&["DEL", &lock_key("k")]);
    let out = proc.finish(EVENT).expect(75);
    let line = only_line(&report);
    assert_eq!(line["lost"], true, "{line}\n{out}");
    assert!(
        line["lost_reason"]
            .as_str()
            .is_some_and(|r| r.contains("gone")),
        "{line}"
    );
    assert_eq!(line["exit"], 75, "{line}");
    assert_eq!(line["command_status"], 115, "{line}");
    assert_eq!(line["acquired"], true, "{line}");
}

/// A report that cannot be opened (no such directory, a directory) is a usage error before
/// anything happens: exit 2, one line naming the file, the lock never taken, the command never
/// run.
#[test]
fn an_unwritable_report_fails_before_the_command_runs() {
    let redis = or_skip!(RedisServer::start());
    let missing = file(&redis, "no/such/dir/report.jsonl");
    // A FIFO that nobody reads: opening it for writing would block for ever.
    let fifo = file(&redis, "fifo");
    let c_fifo = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; mkfifo has no other precondition.
    assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0);
    for path in [
        missing.to_str().unwrap(),
        redis.dir().to_str().unwrap(),
        fifo.to_str().unwrap(),
    ] {
        let out = exec(&redis)
            .args(["--report", path, "k", "-c", "touch \"$D/ran\""])
            .run()
            .expect(2);
        assert_one_error_line(&out);
        assert!(out.stderr.contains("cannot open the report file"), "{out}");
        assert!(!file(&redis, "ran").exists(), "the command ran:\n{out}");
        assert_eq!(
            redis.get(&lock_key("k")),
            None,
            "the lock was taken:\n{out}"
        );
        assert!(redis.meta("k").is_empty(), "the lock was taken:\n{out}");
    }
}

/// `--report -`: the line on stdout, after the command's own output.
#[test]
fn a_report_on_stdout_follows_the_command_output() {
    let redis = or_skip!(RedisServer::start());
    let out = exec(&redis)
        .args(["--report", "-", "k", "-c", "echo hello"])
        .run()
        .expect(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0], "hello", "{out}");
    let line: Value = serde_json::from_str(lines[1]).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    assert_eq!(line["exit"], 0, "{out}");
    assert_eq!(line["acquired"], true, "{out}");
}
