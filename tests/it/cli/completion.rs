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
    // A meta hash and a queue are not locks.
    redis.query::<()>(&["SET", &format!("{}:q", lock_key("deadline")), "x"]);

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
