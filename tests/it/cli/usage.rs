//! Bad input: exit 2, one clear line on stderr, nothing on stdout, nothing written to Redis.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use crate::common::*;

/// Runs each case against a live server, which must stay empty.
fn assert_usage_errors(cases: &[(Vec<OsString>, &str)]) {
    let redis = or_skip!(RedisServer::start());
    for (args, needle) in cases {
        let out = redis.redlock().args(args).run();
        assert_eq!(out.status.code(), Some(2), "{args:?}:\n{out}");
        assert_one_error_line(&out);
        assert_eq!(out.stdout, "", "{args:?}:\n{out}");
        assert!(
            out.stderr.to_lowercase().contains(&needle.to_lowercase()),
            "{args:?}: the error does not mention {needle:?}:\n{out}"
        );
        assert_eq!(
            redis.dbsize(),
            0,
            "{args:?} wrote to Redis: {:?}",
            redis.keys()
        );
    }
}

fn case(args: &[&str], needle: &'static str) -> (Vec<OsString>, &'static str) {
    (args.iter().map(OsString::from).collect(), needle)
}

#[test]
fn bad_keys_are_usage_errors() {
    let long = "k".repeat(10 * 1024);
    let just_over = "k".repeat(513);
    assert_usage_errors(&[
        case(&["acquire", ""], "empty"),
        case(&["acquire", &long], "512"),
        case(&["acquire", &just_over], "512"),
        case(&["acquire", "a\nb"], "control"),
        case(&["acquire", "tab\there"], "control"),
        case(
            &["release", "a\nb", "0123456789abcdef0123456789abcdef"],
            "control",
        ),
        case(&["release", "", "--force"], "empty"),
        case(&["extend", &long, "t", "--ttl", "1s"], "512"),
        case(&["status", "ok", ""], "empty"),
        (
            vec!["acquire".into(), OsString::from_vec(vec![b'k', 0xff])],
            "UTF-8",
        ),
    ]);
}

#[test]
fn bad_durations_are_usage_errors() {
    assert_usage_errors(&[
        case(&["acquire", "k", "--ttl", "0"], "--ttl"),
        case(&["acquire", "k", "--ttl", "0s"], "--ttl"),
        case(&["acquire", "k", "--ttl", "-1"], "negative"),
        case(&["acquire", "k", "--ttl", "10x"], "10x"),
        case(&["acquire", "k", "--ttl", ""], "--ttl"),
        case(&["acquire", "k", "--wait", "abc"], "abc"),
        case(&["acquire", "k", "-w", "-5s"], "negative"),
        case(&["extend", "k", "t", "--ttl", "forever"], "forever"),
        case(&["--connect-timeout", "0", "status"], "connect-timeout"),
        case(&["--io-timeout", "soon", "status"], "soon"),
    ]);
}

/// A duration option left without its value takes the next argument, an option: said as the
/// missing value it is (before: "invalid value '--' for '--wait <DUR>': '--' is negative").
#[test]
fn a_missing_duration_is_said_to_be_missing() {
    assert_usage_errors(&[
        case(
            &["exec", "k", "-w", "--", "true"],
            "-w/--wait needs a duration, e.g. -w 30s; the next argument, '--', is not one",
        ),
        case(
            &["exec", "k", "--wait", "-n", "--", "true"],
            "-w/--wait needs a duration, e.g. -w 30s; the next argument, '-n', is not one",
        ),
        case(
            &["acquire", "k", "--ttl", "-n"],
            "--ttl needs a duration, e.g. --ttl 30s; the next argument, '-n', is not one",
        ),
        case(&["wait", "-w", "--", "k"], "-w/--wait needs a duration"),
        // The option it took has a value of its own, which clap finds unexpected (before:
        // "unexpected argument '812' found").
        case(
            &["acquire", "k", "--wait", "--while-pid", "812"],
            "-w/--wait needs a duration, e.g. -w 30s; the next argument, '--while-pid', is not one",
        ),
        case(
            &["acquire", "k", "-w", "--ttl", "5s"],
            "-w/--wait needs a duration, e.g. -w 30s; the next argument, '--ttl', is not one",
        ),
        // An unexpected argument that is only that stays so.
        case(
            &["acquire", "k", "-w", "5s", "extra"],
            "unexpected argument 'extra'",
        ),
        // A negative duration is still refused as one.
        case(&["exec", "k", "-w", "-5s", "--", "true"], "negative"),
    ]);
    let out = redlock().args(["exec", "k", "-w", "--", "true"]).run();
    assert!(!out.stderr.contains("negative"), "{out}");
}

#[test]
fn bad_urls_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("ca.pem");
    std::fs::write(
        &pem,
        "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let pem = pem.to_str().unwrap();
    assert_usage_errors(&[
        case(
            &["--url", "redis://127.0.0.1:notaport", "status"],
            "malformed",
        ),
        case(&["--url", "redis://[::1", "status"], "malformed"),
        case(
            &["--url", "localhost:6391", "status"],
            "the Redis URL 'localhost:6391' has no scheme; use redis://localhost:6391",
        ),
        case(&["--url", "s3cret:6391", "status"], "not printed"),
        case(&["--url", "http://127.0.0.1:6379", "status"], "scheme"),
        case(&["--url", "redis://", "status"], "host"),
        case(&["--url", "unix://", "status"], "socket"),
        case(&["--url", "", "status"], "url"),
        // Several servers are a quorum, but one server twice would count twice.
        case(
            &[
                "-u",
                "redis://127.0.0.1:1",
                "-u",
                "redis://127.0.0.1:1",
                "status",
            ],
            "twice",
        ),
        case(&["--cluster", "-u", "unix:///tmp/r.sock", "status"], "TCP"),
        case(&["--sentinel", "m\u{1}", "status"], "--sentinel"),
        case(&["--cluster", "--sentinel", "m", "status"], "--sentinel"),
        case(
            &["--password-file", "/nonexistent/pw", "status"],
            "password-file",
        ),
    ]);
    #[cfg(feature = "tls")]
    assert_usage_errors(&[
        case(&["--tls-ca", pem, "status"], "rediss://"),
        case(&["--tls-ca", "/dev/null", "status"], "PEM"),
        case(&["--tls-cert", "/etc/hostname", "status"], "tls-key"),
    ]);
    // A build without TLS says so, whatever asks for it.
    #[cfg(not(feature = "tls"))]
    assert_usage_errors(&[
        case(&["--tls-ca", pem, "status"], "built without TLS"),
        case(
            &["--tls-cert", pem, "--tls-key", pem, "status"],
            "--tls-cert",
        ),
        case(
            &["-u", "rediss://127.0.0.1:1", "status"],
            "built without TLS",
        ),
        case(
            &["-u", "rediss://:hunter2@127.0.0.1:1", "status"],
            "rediss://:***@",
        ),
    ]);
}

#[test]
fn a_password_in_a_bad_url_is_not_echoed() {
    assert_usage_errors(&[
        case(&["--url", "redis://:hunter2@[::1", "status"], "malformed"),
        case(&["--url", "http://:hunter2@localhost", "status"], "scheme"),
    ]);
    let out = redlock()
        .args(["--url", "redis://:hunter2@[::1", "status"])
        .run();
    assert!(!out.stderr.contains("hunter2"), "{out}");
    let out = redlock()
        .args(["--url", "http://:hunter2@localhost", "status"])
        .run();
    assert!(!out.stderr.contains("hunter2"), "{out}");
}

#[test]
fn missing_tokens_are_usage_errors() {
    // Without a token argument and without REDLOCK_TOKEN, the message says where a token comes
    // from (before, clap's generic "required arguments were not provided: <TOKEN>").
    assert_usage_errors(&[
        case(
            &["release", "k"],
            "missing token: pass the token printed by",
        ),
        case(&["release", "k", ""], "missing token"),
        case(&["release", "k", "   "], "missing token"),
        case(
            &["extend", "k", "--ttl", "5s"],
            "missing token: pass the token printed by",
        ),
        case(&["extend", "k", "", "--ttl", "5s"], "missing token"),
    ]);
    // REDLOCK_TOKEN stands in for the argument, so the help shows it as optional.
    for sub in ["release", "extend"] {
        let out = redlock().args([sub, "--help"]).run().expect(0);
        let usage = out
            .stdout
            .lines()
            .find(|l| l.starts_with("Usage:"))
            .unwrap();
        assert!(usage.ends_with("<KEY> [TOKEN]"), "{sub}: {usage}");
        assert!(out.stdout.contains("[env: REDLOCK_TOKEN]"), "{out}");
    }
}

/// The 8-character fingerprint `status` shows is not a token: say so, and where the token comes
/// from (before: "held by ... with another token (<that same fingerprint>…)").
#[test]
fn a_fingerprint_is_recognised_and_not_taken_for_a_token() {
    let redis = or_skip!(RedisServer::start());
    let token = redis.redlock().args(["acquire", "k"]).run().ok();
    let status = redis.redlock().args(["status", "k"]).run().ok();
    let fingerprint = &token[..8];
    assert!(status.contains(fingerprint), "{status}");
    for args in [
        vec!["release", "k", fingerprint],
        vec!["extend", "k", fingerprint, "--ttl", "1m"],
    ] {
        let out = redis.redlock().args(&args).run().expect(3);
        assert_one_error_line(&out);
        for needle in ["fingerprint", "redlock acquire", "status --show-token"] {
            assert!(
                out.stderr.contains(needle),
                "{args:?}: no {needle:?}:\n{out}"
            );
        }
        assert!(!out.stderr.contains("another token"), "{args:?}:\n{out}");
    }
    assert_eq!(redis.get(&lock_key("k")), Some(token.clone()));
    // A fingerprint-shaped argument for a free lock gets the hint too.
    redis
        .redlock()
        .args(["release", "k", &token])
        .run()
        .expect(0);
    let out = redis
        .redlock()
        .args(["release", "k", fingerprint])
        .run()
        .expect(3);
    assert!(out.stderr.contains("fingerprint"), "{out}");
}

/// Which help a usage error points to: the subcommand's own, when there is one.
#[test]
fn usage_errors_point_to_the_subcommands_help() {
    for (args, help) in [
        (
            vec!["acquire", "k", "--frobnicate"],
            "'redlock acquire --help'",
        ),
        (
            vec!["-u", "redis://h", "acquire", "k", "--ttl", "x"],
            "'redlock acquire --help'",
        ),
        (vec!["--prefix=p:", "release"], "'redlock release --help'"),
        (vec!["extend", "k", "t"], "'redlock extend --help'"),
        (vec!["status", "--jsn"], "'redlock status --help'"),
        (
            vec!["exec", "k", "-n", "-w", "1s", "--", "true"],
            "'redlock exec --help'",
        ),
        (vec!["launch", "k"], "'redlock --help'"),
        (vec!["--frobnicate"], "'redlock --help'"),
        // The subcommand named is the context, even for a mistake made before it.
        (vec!["-qv", "status"], "'redlock status --help'"),
    ] {
        let out = redlock().args(&args).run().expect(2);
        assert_one_error_line(&out);
        assert!(
            out.stderr.trim_end().ends_with(&format!("(see {help})")),
            "{args:?}: not pointing to {help}:\n{out}"
        );
    }
}

/// `exec` without a command says so, and its usage shows where the command goes.
#[test]
fn exec_without_a_command_says_so() {
    for args in [
        vec!["exec", "k"],
        vec!["exec", "k", "--"],
        vec!["exec", "k", "-n"],
    ] {
        let out = redlock().args(&args).run().expect(2);
        assert_one_error_line(&out);
        assert!(
            out.stderr.contains("no command to run") && out.stderr.contains("-- CMD [ARGS...]"),
            "{args:?}:\n{out}"
        );
    }
    for flag in ["-h", "--help"] {
        let out = redlock().args(["exec", flag]).run().expect(0);
        assert!(
            out.stdout
                .contains("Usage: redlock exec [OPTIONS] <KEY> -- CMD [ARGS...]")
                && out
                    .stdout
                    .contains("redlock exec [OPTIONS] <KEY> -c <SHELL-COMMAND>"),
            "{out}"
        );
    }
}

/// A subcommand's help leads with its own options; the global ones are one pointer line.
#[test]
fn subcommand_help_does_not_bury_its_own_options() {
    let root = redlock().arg("--help").run().expect(0).stdout;
    for flag in [
        "--password-file <FILE>",
        "--connect-timeout <DUR>",
        "--url <URL>",
    ] {
        assert!(root.contains(flag), "redlock --help lost {flag}:\n{root}");
    }
    for sub in ["acquire", "release", "extend", "status", "exec"] {
        for flag in ["-h", "--help"] {
            let help = redlock().args([sub, flag]).run().expect(0).stdout;
            assert!(
                !help.contains("--password-file <FILE>") && !help.contains("--tls-ca <FILE>"),
                "{sub} {flag} repeats the global options:\n{help}"
            );
            assert!(
                help.contains("Global options (-u/--url, ")
                    && help.contains("see 'redlock --help'"),
                "{sub} {flag}: no pointer to the global options:\n{help}"
            );
        }
    }
    let exec = redlock().args(["exec", "--help"]).run().expect(0).stdout;
    // 80 lines until --slots, --pool and --shared came (issue 14), then --max-runtime and
    // --warn-after (issue 15), then what is weaker on macOS (issue 30).
    assert!(exec.lines().count() <= 110, "exec --help is long:\n{exec}");
    // The global options still work after the subcommand.
    let out = redlock()
        .args([
            "status",
            "--url",
            "redis://127.0.0.1:1",
            "--connect-timeout",
            "1s",
        ])
        .run()
        .expect(69);
    assert!(out.stderr.contains("redis://127.0.0.1:1"), "{out}");
}

/// `redlock -h` and `--help` lead with the main job: examples of `exec` (cron, CI) and of a
/// script-long lock right below the usage, then the commands with `exec` first (before: `exec`
/// listed last, no examples); at 80 columns nothing in the examples wraps.
#[test]
fn the_top_level_help_leads_with_exec_and_examples() {
    for flag in ["-h", "--help"] {
        let help = redlock()
            .arg(flag)
            .env("COLUMNS", "80")
            .run()
            .expect(0)
            .stdout;
        let examples = help.find("\nExamples:\n").expect(&help);
        let commands = help.find("\nCommands:\n").expect(&help);
        assert!(
            help.find("\nUsage: ").unwrap() < examples && examples < commands,
            "{flag}: the examples are not between the usage and the commands:\n{help}"
        );
        let shown = &help[examples..commands];
        for example in [
            "  redlock exec nightly-backup -n -- /usr/local/sbin/backup.sh\n",
            "  redlock exec deploy-prod --wait 30m -- ./deploy.sh\n",
            "  T=$(redlock acquire migrate --while-pid $$) || exit\n",
        ] {
            assert!(
                shown.contains(example),
                "{flag}: no {example:?} in\n{shown}"
            );
        }
        for line in shown.lines() {
            assert!(line.chars().count() <= 80, "{flag}: too wide: {line:?}");
        }
        let first = help[commands..].lines().nth(2).unwrap_or_default();
        assert!(
            first.starts_with("  exec "),
            "{flag}: exec is not the first command:\n{help}"
        );
    }
}

/// `--help` lists every environment variable redlock reads, from the one table the man page and
/// the docs render too (`src/env.rs`), each name on its own line, its meaning under it, within
/// 80 columns; `-h` stays short without them.
#[test]
fn the_long_help_lists_the_environment() {
    let help = redlock()
        .arg("--help")
        .env("COLUMNS", "80")
        .run()
        .expect(0)
        .stdout;
    let start = help
        .find("\nEnvironment:\n")
        .unwrap_or_else(|| panic!("no environment in --help:\n{help}"));
    let listed = &help[start..];
    for var in redlock::env::TABLE {
        assert!(
            listed.contains(&format!("\n  {}\n      ", var.names)),
            "{} is not listed:\n{listed}",
            var.names
        );
    }
    for line in listed.lines() {
        assert!(line.chars().count() <= 80, "too wide: {line:?}");
    }
    let short = redlock().arg("-h").run().expect(0).stdout;
    assert!(!short.contains("Environment:"), "{short}");
}

/// The exit table in `--help` keeps each entry whole: a wrapped entry continues indented under
/// its meaning, never at the left margin where it reads like a new entry.
#[test]
fn the_exit_table_in_help_does_not_wrap_mid_entry() {
    for columns in ["80", "100"] {
        let out = redlock()
            .arg("--help")
            .env("COLUMNS", columns)
            .run()
            .expect(0);
        let table: Vec<&str> = out
            .stdout
            .lines()
            .skip_while(|l| !l.starts_with("Exit status:"))
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .collect();
        assert!(
            table.len() >= 10,
            "COLUMNS={columns}: no exit table:\n{}",
            out.stdout
        );
        let width: usize = columns.parse().unwrap();
        let mut entries = 0;
        for line in &table {
            assert!(
                line.chars().count() <= width,
                "COLUMNS={columns}: too wide: {line:?}"
            );
            if line.starts_with("  ") && !line.starts_with("   ") {
                entries += 1;
            } else {
                assert!(
                    line.starts_with("            "),
                    "COLUMNS={columns}: an entry wrapped to the margin: {line:?}\n{}",
                    table.join("\n")
                );
            }
        }
        assert_eq!(
            entries,
            redlock::exit::TABLE.len(),
            "COLUMNS={columns}:\n{}",
            table.join("\n")
        );
    }
}

/// A TTL under a second is allowed (the behaviour is unchanged) but warned about, once, on
/// stderr; `-q` silences the warning.
#[test]
fn a_ttl_under_a_second_warns() {
    let redis = or_skip!(RedisServer::start());
    let out = redis
        .redlock()
        .args(["acquire", "short", "--ttl", "800ms"])
        .run()
        .expect(0);
    assert!(is_token(out.stdout.trim_end()), "{out}");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert!(
        lines.len() == 1
            && lines[0].starts_with("redlock: warning: --ttl 800ms is under 1s")
            && lines[0].contains("expire"),
        "{out}"
    );
    let pttl = redis.pttl(&lock_key("short"));
    assert!(
        pttl == -2 || (0..=800).contains(&pttl),
        "the TTL changed: {pttl}"
    );

    let out = redis
        .redlock()
        .args(["-q", "acquire", "quiet", "--ttl", "800ms"])
        .run()
        .expect(0);
    assert_eq!(out.stderr, "", "-q:\n{out}");

    let out = redis
        .redlock()
        .args(["acquire", "long", "--ttl", "1s"])
        .run()
        .expect(0);
    assert_eq!(out.stderr, "", "1s is enough:\n{out}");
    let token = out.stdout.trim_end().to_string();

    let out = redis
        .redlock()
        .args(["extend", "long", &token, "--ttl", "10ms"])
        .run()
        .expect(0);
    assert!(
        out.stderr.starts_with("redlock: warning: --ttl 10ms"),
        "{out}"
    );

    let out = redis
        .redlock()
        .args(["exec", "ex", "--ttl", "900ms", "--", "true"])
        .run()
        .expect(0);
    assert!(
        out.stderr.lines().count() == 1 && out.stderr.starts_with("redlock: warning: --ttl 900ms"),
        "{out}"
    );
}

#[test]
fn bad_flags_are_usage_errors() {
    assert_usage_errors(&[
        case(&["acquire", "k", "-n", "-w", "5s"], "--wait"),
        case(&["-q", "-v", "status"], "--quiet"),
        case(&["acquire", "k", "-E", "256"], "256"),
        case(&["acquire", "k", "--format", "yaml"], "yaml"),
        case(&["acquire", "k", "--frobnicate"], "--frobnicate"),
        case(&["acquire"], "KEY"),
        case(&["extend", "k", "t"], "--ttl"),
        case(&["launch", "k"], "launch"),
        case(&["--prefix", "a\nb", "status"], "prefix"),
    ]);
}

#[test]
fn help_and_version_go_to_stdout() {
    let out = redlock().arg("--help").run().expect(0);
    assert!(
        out.stdout.contains("acquire") && out.stderr.is_empty(),
        "{out}"
    );
    let out = redlock().arg("--version").run().expect(0);
    assert!(out.stdout.starts_with("redlock "), "{out}");
}

/// `--version` names the version first (for scripts), then the commit it was built from (in a
/// git checkout, as the tests run) and the target; `-V` the version alone.
#[test]
fn version_names_the_commit_and_the_target() {
    let version = env!("CARGO_PKG_VERSION");
    let short = redlock().arg("-V").run().expect(0).stdout;
    assert_eq!(short, format!("redlock {version}\n"));
    let long = redlock().arg("--version").run().expect(0).stdout;
    let first = long.lines().next().unwrap_or_default();
    assert!(first.starts_with(&format!("redlock {version} (")), "{long}");
    assert!(
        first.ends_with(", x86_64-unknown-linux-gnu)") || first.ends_with("-linux-musl)"),
        "{long}"
    );
    let head = std::process::Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short=7",
            "HEAD",
        ])
        .output();
    if let Some(head) = head.ok().filter(|o| o.status.success()) {
        let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
        assert!(
            first.contains(&format!("({head}, ")),
            "HEAD is {head}: {long}"
        );
    }
}

/// A driver error keeps its words and loses the Rust debug name of its kind (before: "Invalid
/// protocol version - InvalidClientConfig: bogus").
#[test]
fn driver_errors_carry_no_rust_debug_text() {
    for url in [
        "redis://127.0.0.1:6379/?protocol=bogus",
        "unix:///tmp/redlock-test.sock?protocol=bogus",
    ] {
        let out = redlock().args(["--url", url, "status"]).run().expect(2);
        assert_one_error_line(&out);
        assert!(
            out.stderr.contains("Invalid protocol version: bogus"),
            "{url}:\n{out}"
        );
        assert!(!out.stderr.contains("InvalidClientConfig"), "{url}:\n{out}");
    }
}

/// Fails if redlock panics (exit 101, or 134 in a release build) when its stderr is a pipe whose
/// reader has gone: the message is lost, the documented exit status is not. An `exec` with a
/// broken stderr still runs its command and releases the lock.
#[test]
fn a_broken_stderr_is_not_a_panic() {
    let broken = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        std::process::Stdio::from(writer)
    };
    let usage = redlock()
        .args(["acquire", "k", "--ttl", "soon"])
        .stderr(broken())
        .status()
        .unwrap();
    assert_eq!(usage.code(), Some(2), "a usage error: {usage:?}");
    let unreachable = redlock()
        .args(["--url", &format!("redis://127.0.0.1:{}", closed_port())])
        .args(["status", "k"])
        .stderr(broken())
        .status()
        .unwrap();
    assert_eq!(unreachable.code(), Some(69), "no server: {unreachable:?}");
    let redis = or_skip!(RedisServer::start());
    // `-v` logs every round trip to the broken stderr.
    let exec = redis
        .redlock()
        .args(["-v", "exec", "k", "--", "sh", "-c", "exit 7"])
        .stderr(broken())
        .status()
        .unwrap();
    assert_eq!(exec.code(), Some(7), "exec: {exec:?}");
    assert_eq!(redis.keys(), [meta_key("k")], "the lock was not released");
}

/// Fails if the one-line usage error drops clap's "did you mean" hint for a typo.
#[test]
fn a_typo_gets_the_similar_name() {
    for (args, similar) in [
        (vec!["exec", "k", "--wiat", "5s", "--", "true"], "'--wait'"),
        (vec!["relase", "k"], "'release'"),
        (vec!["status", "--jsn"], "'--json'"),
    ] {
        let out = redlock().args(&args).run().expect(2);
        assert_one_error_line(&out);
        assert!(
            out.stderr.contains("similar") && out.stderr.contains(similar),
            "{args:?}: no hint of {similar}:\n{out}"
        );
    }
}
