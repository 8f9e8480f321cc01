//! Shell completion of lock names from the server (`REDLOCK_COMPLETE=bash redlock`), and its
//! bound: a dead or frozen Redis must never hang the shell.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

/// What the bash completion function gets back for `redlock WORDS...` with the cursor on the last
/// word (as `_clap_complete_redlock` from `REDLOCK_COMPLETE=bash redlock` calls it).
fn complete(mut cmd: Command, words: &[&str]) -> Output {
    cmd.env("REDLOCK_COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", words.len().to_string())
        .env("_CLAP_IFS", "\n")
        .arg("--")
        .arg("redlock")
        .args(words);
    cmd.run()
}

fn candidates(out: Output) -> BTreeSet<String> {
    out.ok().lines().map(str::to_string).collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn lock_names_complete_from_the_server() {
    let redis = or_skip!(RedisServer::start());
    for args in [
        &["acquire", "deploy-prod"][..],
        &["acquire", "db"],
        &["--prefix", "other:", "acquire", "dev"],
    ] {
        redis.redlock().args(args).run().ok();
    }
    // Leases and wake lists make no name known (a lock's key, queue, record or history does).
    redis.query::<()>(&["SET", &format!("{}:leases", lock_key("deadline")), "x"]);
    redis.query::<()>(&["SET", &format!("{}:w:t", lock_key("deadline")), "x"]);

    let out = complete(redis.redlock(), &["status", "dep"]);
    assert_eq!(out.stdout, "deploy-prod", "{out}");
    for sub in ["release", "extend", "exec", "acquire", "status"] {
        let out = complete(redis.redlock(), &[sub, "d"]);
        assert_eq!(candidates(out), set(&["db", "deploy-prod"]), "{sub}");
    }
    // Nothing typed yet: every lock, beside the flags.
    let all = candidates(complete(redis.redlock(), &["release", ""]));
    assert!(all.is_superset(&set(&["db", "deploy-prod"])), "{all:?}");
    assert!(!all.contains("dev"), "{all:?}");
    // --prefix and --url as typed on the command line.
    let out = complete(redis.redlock(), &["--prefix", "other:", "status", "d"]);
    assert_eq!(candidates(out), set(&["dev"]));
    let out = complete(redis.redlock(), &["status", "--prefix=other:", "d"]);
    assert_eq!(candidates(out), set(&["dev"]));
    let url = redis.url();
    let out = complete(redlock(), &["--url", &url, "status", "dep"]);
    assert_eq!(candidates(out), set(&["deploy-prod"]));
    let out = complete(redlock(), &["status", "-u", &url, "dep"]);
    assert_eq!(candidates(out), set(&["deploy-prod"]));
    // Everything else still completes from the CLI definition.
    let out = complete(redis.redlock(), &["sta"]);
    assert_eq!(candidates(out), set(&["status"]));
    let out = complete(redis.redlock(), &["exec", "db", "--on-lost", "k"]);
    assert_eq!(candidates(out), set(&["kill"]));
}

/// Completion offers the names the server knows, not only the held ones: a lock free right now is
/// what `log`, `wait` and the next `exec` are typed for.
#[test]
fn known_names_complete_held_waited_for_or_with_a_history() {
    let redis = or_skip!(RedisServer::start());
    hold(&redis, "job-held", "1m");
    // Taken and released: the lock's record and its history stay (for --meta-ttl).
    let token = hold(&redis, "job-history", "1m");
    release(&redis, "job-history", &token);
    assert_eq!(redis.get(&lock_key("job-history")), None);
    // Waited for only: a waiter queues behind a holder, dies there (SIGKILL: no leave), and the
    // lock's key, record and history go; only the queue and the leases are left.
    hold(&redis, "job-waited", "1m");
    let waiter = redis
        .redlock()
        .args(["acquire", "job-waited", "--wait", "1m"])
        .spawn_proc();
    assert!(wait_for(|| queue(&redis, "job-waited").len() == 1, HANG));
    drop(waiter);
    let waited = lock_key("job-waited");
    redis.query::<()>(&[
        "DEL",
        &waited,
        &format!("{waited}:meta"),
        &format!("{waited}:log"),
    ]);
    // The dead waiter's lease would let the queue expire in seconds.
    redis.query::<()>(&["PERSIST", &format!("{waited}:q")]);
    let left: Vec<String> = redis
        .keys_and_histories()
        .into_iter()
        .filter(|k| k.contains("{job-waited}"))
        .collect();
    assert_eq!(left, [format!("{waited}:leases"), format!("{waited}:q")]);

    let known = ["job-held", "job-history", "job-waited"];
    for sub in [
        "log", "wait", "exec", "status", "acquire", "release", "extend",
    ] {
        let out = complete(redis.redlock(), &[sub, "job-"]);
        // Sorted, and each once (a held lock has a key, a record and a history).
        assert_eq!(
            out.stdout.lines().collect::<Vec<_>>(),
            known,
            "{sub}: {out}"
        );
    }
}

/// At most 200 names, each counted once toward the limit however many keys it has: here 250
/// names known only by their record and history, among enough other keys that SCAN finds them
/// over many calls (counting keys instead of names would stop it at about 100 names).
#[test]
fn known_names_are_capped_each_counted_once() {
    let redis = or_skip!(RedisServer::start());
    let plant = "for i = 1, 20000 do redis.call('SET', 'other:' .. i, 'x') end \
        for i = 1, 250 do \
        local lock = 'redlock:{many-' .. string.format('%03d', i) .. '}' \
        redis.call('HSET', lock .. ':meta', 'fence', i) \
        redis.call('XADD', lock .. ':log', '*', 'event', 'released') end";
    redis.query::<()>(&["EVAL", plant, "0"]);
    let out = complete(redis.redlock(), &["log", "many-"]);
    let names: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(names.len(), 200, "{out}");
    assert!(
        names.is_sorted() && names.windows(2).all(|w| w[0] != w[1]),
        "{out}"
    );
    assert!(names.iter().all(|n| n.starts_with("many-")), "{out}");
}

#[test]
fn lock_name_completion_gives_up_quietly_within_a_second() {
    let redis = or_skip!(RedisServer::start());
    redis.redlock().args(["acquire", "deploy-prod"]).run().ok();
    redis.pause();
    let frozen = redis.url();
    let closed = format!("redis://127.0.0.1:{}", closed_port());
    let silent = format!("redis://127.0.0.1:{}", silent_port());
    for url in [&frozen, &closed, &silent] {
        // Long timeouts typed on the command line do not lengthen the lookup.
        let words = [
            "--connect-timeout",
            "10s",
            "--io-timeout",
            "10s",
            "-u",
            url,
            "status",
            "dep",
        ];
        let out = complete(redlock(), &words);
        assert!(
            out.elapsed < Duration::from_millis(1500),
            "{url}: took {:?}\n{out}",
            out.elapsed
        );
        assert_eq!(
            (out.stdout.as_str(), out.stderr.as_str()),
            ("", ""),
            "{url}: {out}"
        );
        out.expect(0);
    }
    redis.resume();
}

#[test]
fn the_shell_registration_calls_back_with_redlock_complete() {
    let out = redlock().env("REDLOCK_COMPLETE", "bash").run();
    let script = out.ok();
    assert!(
        script.contains("REDLOCK_COMPLETE=\"bash\"") && script.contains("complete "),
        "{script}"
    );
    for shell in ["zsh", "fish"] {
        let out = redlock().env("REDLOCK_COMPLETE", shell).run();
        assert!(out.ok().contains("REDLOCK_COMPLETE"), "{shell}");
    }
}
