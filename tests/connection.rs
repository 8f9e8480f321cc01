//! Reaching Redis: URL sources, passwords and ACLs, dead and silent servers, timeouts, -v/-q,
//! and the key prefix.

mod common;

use std::time::Duration;

use common::*;

const PASSWORD: &str = "pw-4fG8-never-print-me";

fn assert_no_password(out: &Output) {
    assert!(
        !out.stdout.contains(PASSWORD) && !out.stderr.contains(PASSWORD),
        "the password was printed:\n{out}"
    );
}

#[test]
fn the_url_comes_from_the_flag_then_redlock_url_then_redis_url() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dead = format!("redis://127.0.0.1:{}", closed_port());
    let url = redis.url();

    redlock()
        .args(["--url", &url, "acquire", "flag"])
        .run()
        .ok();
    redlock().args(["-u", &url, "acquire", "short"]).run().ok();
    redlock()
        .args(["acquire", "redlock-url"])
        .env("REDLOCK_URL", &url)
        .run()
        .ok();
    redlock()
        .args(["acquire", "redis-url"])
        .env("REDIS_URL", &url)
        .run()
        .ok();
    // Precedence: --url over REDLOCK_URL over REDIS_URL.
    redlock()
        .args(["acquire", "both-env"])
        .env("REDLOCK_URL", &url)
        .env("REDIS_URL", &dead)
        .run()
        .ok();
    redlock()
        .args(["--url", &url, "acquire", "flag-over-env"])
        .env("REDLOCK_URL", &dead)
        .run()
        .ok();
    // The global flag also works after the subcommand.
    redlock()
        .args(["acquire", "after", "--url", &url])
        .run()
        .ok();
    let mut held: Vec<String> = redis
        .keys()
        .into_iter()
        .filter(|k| !k.ends_with(":meta"))
        .collect();
    held.sort();
    let mut expected: Vec<String> = [
        "after",
        "both-env",
        "flag",
        "flag-over-env",
        "redis-url",
        "redlock-url",
        "short",
    ]
    .iter()
    .map(|n| lock_key(n))
    .collect();
    expected.sort();
    assert_eq!(held, expected);

    let out = redlock()
        .args(["acquire", "k"])
        .env("REDLOCK_URL", &dead)
        .env("REDIS_URL", &url)
        .run()
        .expect(69);
    assert!(out.stderr.contains(&dead), "REDLOCK_URL must win:\n{out}");

    // A comma-separated REDLOCK_URL is a quorum of all of them, never cut to the first: with one
    // of two servers down there is no majority.
    let out = redlock()
        .args(["acquire", "k"])
        .env("REDLOCK_URL", format!("{url},{dead}"))
        .run()
        .expect(69);
    assert_one_error_line(&out);
    assert!(
        out.stderr.contains("no quorum") && out.stderr.contains(&dead),
        "{out}"
    );
}

#[test]
fn unix_socket_urls() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("redis.sock");
    let Some(redis) = RedisServer::builder()
        .arg("--unixsocket")
        .arg(socket.to_str().unwrap())
        .start()
    else {
        return;
    };
    for (scheme, name) in [("unix", "a"), ("redis+unix", "b")] {
        let url = format!("{scheme}://{}", socket.display());
        redlock().args(["--url", &url, "acquire", name]).run().ok();
    }
    assert_eq!(
        redis.keys(),
        [lock_key("a"), meta_key("a"), lock_key("b"), meta_key("b")]
    );
}

#[test]
fn the_default_url_is_local_port_6379() {
    let out = redlock()
        .args(["status", "redlock-test-unlikely-key"])
        .run();
    match out.code() {
        69 => assert!(out.stderr.contains("redis://127.0.0.1:6379"), "{out}"),
        // Someone runs a Redis on the default port: we reached it, which is the point.
        1 => {}
        _ => panic!("{out}"),
    }
}

#[test]
fn a_down_server_exits_69_at_once_naming_the_fix() {
    let url = format!("redis://127.0.0.1:{}", closed_port());
    for args in [
        vec!["acquire", "k"],
        vec!["acquire", "k", "-n"],
        vec!["release", "k", "0123456789abcdef0123456789abcdef"],
        vec!["release", "k", "--force"],
        vec![
            "extend",
            "k",
            "0123456789abcdef0123456789abcdef",
            "--ttl",
            "5s",
        ],
        vec!["status"],
        vec!["-q", "status", "k"],
    ] {
        let out = redlock().args(["--url", &url]).args(&args).run().expect(69);
        assert_one_error_line(&out);
        for needle in [url.as_str(), "connection refused", "REDLOCK_URL"] {
            assert!(
                out.stderr.contains(needle),
                "{args:?}: no {needle:?}:\n{out}"
            );
        }
        assert!(
            out.elapsed < Duration::from_secs(5),
            "{args:?} was slow:\n{out}"
        );
    }
}

#[test]
fn a_silent_server_exits_69_within_the_io_timeout() {
    let url = format!("redis://127.0.0.1:{}", silent_port());
    let out = redlock()
        .args([
            "--url",
            &url,
            "--io-timeout",
            "500ms",
            "--connect-timeout",
            "30s",
        ])
        .args(["acquire", "k"])
        .run()
        .expect(69);
    assert_one_error_line(&out);
    assert!(out.stderr.contains("--io-timeout"), "{out}");
    assert!(
        out.elapsed < Duration::from_secs(4),
        "--io-timeout 500ms:\n{out}"
    );

    // The defaults (2s + 2s) bound every subcommand too.
    let running: Vec<Proc> = [
        vec!["acquire", "k"],
        vec!["release", "k", "0123456789abcdef0123456789abcdef"],
        vec![
            "extend",
            "k",
            "0123456789abcdef0123456789abcdef",
            "--ttl",
            "5s",
        ],
        vec!["status"],
    ]
    .iter()
    .map(|args| redlock().args(["--url", &url]).args(args).spawn_proc())
    .collect();
    for proc in running {
        let out = proc.finish(HANG).expect(69);
        assert!(out.elapsed < Duration::from_secs(10), "{out}");
    }
}

#[test]
fn connect_timeout_bounds_the_handshake() {
    // With a password, AUTH is part of connecting, so a silent server hangs the handshake.
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", silent_port());
    let out = redlock()
        .args([
            "--url",
            &url,
            "--connect-timeout",
            "300ms",
            "--io-timeout",
            "30s",
        ])
        .args(["acquire", "k"])
        .run()
        .expect(69);
    assert_one_error_line(&out);
    assert_no_password(&out);
    assert!(out.stderr.contains("timed out after 300ms"), "{out}");
    assert!(out.elapsed < Duration::from_secs(4), "{out}");
}

/// A waiter rides out a frozen server (see `tests/outage.rs`), but only while its wait lasts:
/// then it exits 69 with the timeout, not much later.
#[test]
fn a_server_that_freezes_while_we_wait_exits_69_when_the_wait_runs_out() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    redis.redlock().args(["acquire", "k"]).run().ok();
    let mut waiter = redis
        .redlock()
        .args(["-v", "--io-timeout", "500ms", "--connect-timeout", "500ms"])
        .args(["acquire", "k", "-w", "3s"])
        .spawn_proc();
    waiter.wait_for_stderr("acquire on", Duration::from_secs(10));
    redis.pause();
    let out = waiter.finish(Duration::from_secs(15));
    redis.resume();
    let out = out.expect(69);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("--io-timeout") || last.contains("timed out"),
        "{out}"
    );
    assert!(out.elapsed < Duration::from_secs(8), "-w 3s:\n{out}");
    redis.redlock().args(["status", "k"]).run().expect(0);
}

#[test]
fn passwords_from_the_url_the_environment_or_a_file() {
    let Some(redis) = RedisServer::builder().password(PASSWORD).start() else {
        return;
    };
    let port = redis.port();
    let good_url = format!("redis://:{PASSWORD}@127.0.0.1:{port}");
    let bad_url = format!("redis://:wrong-{PASSWORD}@127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let good_file = dir.path().join("good");
    std::fs::write(&good_file, format!("{PASSWORD}\nsecond line ignored\n")).unwrap();
    let good_file = good_file.to_str().unwrap();

    let ok = |mut cmd: std::process::Command, name: &str| {
        let out = cmd.args(["-v", "acquire", name]).run();
        assert_no_password(&out);
        out.ok();
    };
    let mut c = redlock();
    c.args(["--url", &good_url]);
    ok(c, "url");
    let mut c = redis.redlock();
    c.env("REDLOCK_PASSWORD", PASSWORD);
    ok(c, "env");
    let mut c = redis.redlock();
    c.args(["--password-file", good_file]);
    ok(c, "file");
    // The file beats a wrong password in the URL and in the environment.
    let mut c = redlock();
    c.args(["--url", &bad_url, "--password-file", good_file])
        .env("REDLOCK_PASSWORD", "wrong");
    ok(c, "file-wins");

    let mut c = redlock();
    c.args(["--url", &good_url, "status", "-v", "--show-token"]);
    let out = c.run().expect(0);
    assert_no_password(&out);
    assert_eq!(out.stdout.lines().count(), 5, "{out}");
}

#[test]
fn a_refused_password_exits_77_without_printing_it() {
    let Some(redis) = RedisServer::builder().password(PASSWORD).start() else {
        return;
    };
    let port = redis.port();
    let bad_url = format!("redis://:wrong-{PASSWORD}@127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let bad_file = dir.path().join("bad");
    std::fs::write(&bad_file, format!("wrong-{PASSWORD}\n")).unwrap();

    let cases: Vec<(&str, std::process::Command)> = vec![
        ("wrong in the URL", {
            let mut c = redlock();
            c.args(["--url", &bad_url]);
            c
        }),
        ("wrong in REDLOCK_PASSWORD", {
            let mut c = redis.redlock();
            c.env("REDLOCK_PASSWORD", format!("wrong-{PASSWORD}"));
            c
        }),
        ("wrong in --password-file", {
            let mut c = redis.redlock();
            c.arg("--password-file").arg(&bad_file);
            c
        }),
    ];
    for (what, mut cmd) in cases {
        let out = cmd.args(["-v", "acquire", "k"]).run();
        assert_eq!(out.status.code(), Some(77), "{what}:\n{out}");
        assert_no_password(&out);
        assert!(!out.stderr.contains("panicked"), "{out}");
        assert!(
            out.stderr.lines().last().unwrap().starts_with("redlock: "),
            "{what}:\n{out}"
        );
    }
    let mut con = redis.cli();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut con).unwrap(), 0);
}

#[test]

fn a_missing_password_exits_77_and_names_the_fix() {
    let Some(redis) = RedisServer::builder().password(PASSWORD).start() else {
        return;
    };
    for args in [
        vec!["acquire", "k"],
        vec!["status", "k"],
        vec!["release", "k", "--force"],
    ] {
        let out = redis.redlock().args(&args).run();
        assert_eq!(out.status.code(), Some(77), "{args:?}:\n{out}");
        assert_one_error_line(&out);
        assert!(
            out.stderr.contains("REDLOCK_PASSWORD"),
            "{args:?}: no hint:\n{out}"
        );
    }
}

#[test]
fn acl_users_and_refused_permissions() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    redis.query::<()>(&["ACL", "SETUSER", "locker", "on", ">lockerpw", "~*", "+@all"]);
    redis.query::<()>(&[
        "ACL",
        "SETUSER",
        "nolua",
        "on",
        ">noluapw",
        "~*",
        "+@all",
        "-@scripting",
    ]);
    let port = redis.port();
    let url = format!("redis://locker:lockerpw@127.0.0.1:{port}");
    let out = redlock().args(["-v", "--url", &url, "acquire", "k"]).run();
    assert!(!out.stderr.contains("lockerpw"), "{out}");
    out.ok();

    let url = format!("redis://locker:wrong@127.0.0.1:{port}");
    redlock()
        .args(["--url", &url, "acquire", "k2"])
        .run()
        .expect(77);

    let url = format!("redis://nolua:noluapw@127.0.0.1:{port}");
    for args in [vec!["acquire", "k3"], vec!["status", "k"]] {
        let out = redlock().args(["--url", &url]).args(&args).run().expect(77);
        assert_one_error_line(&out);
        assert!(!out.stderr.contains("noluapw"), "{out}");
        assert!(out.stderr.contains("permission"), "{out}");
    }
}

/// `redlock: <what went wrong>: <cause>`, with the cause said once.
#[test]

fn an_error_from_redis_says_its_cause_once() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    redis.query::<()>(&[
        "ACL",
        "SETUSER",
        "nolua",
        "on",
        ">noluapw",
        "~*",
        "+@all",
        "-@scripting",
    ]);
    let url = format!("redis://nolua:noluapw@127.0.0.1:{}", redis.port());
    let out = redlock()
        .args(["--url", &url, "status", "k"])
        .run()
        .expect(77);
    let cause = "this user has no permissions to run the 'evalsha' command";
    assert_eq!(out.stderr.matches(cause).count(), 1, "{out}");
}

#[test]
fn verbose_logs_each_round_trip_and_quiet_keeps_errors() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let out = redis.redlock().args(["-v", "acquire", "k"]).run().expect(0);
    assert!(
        is_token(out.stdout.trim_end()),
        "stdout stays machine output:\n{out}"
    );
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "connect + one round trip:\n{out}");
    assert!(
        lines[0].contains("connected to") && lines[0].contains(&redis.url()),
        "{out}"
    );
    assert!(lines[1].starts_with("redlock: acquire on"), "{out}");
    let token = out.stdout.trim_end();

    let out = redis
        .redlock()
        .args(["release", "k", token, "--verbose"])
        .run()
        .expect(0);
    assert!(out.stderr.contains("release on"), "{out}");

    let out = redis.redlock().args(["status"]).run().expect(0);
    assert!(
        !out.stderr.contains(" on redis://"),
        "quiet without -v:\n{out}"
    );

    // -q silences messages, never errors.
    let url = format!("redis://127.0.0.1:{}", closed_port());
    let out = redlock()
        .args(["-q", "--url", &url, "status"])
        .run()
        .expect(69);
    assert_one_error_line(&out);
}

#[test]
fn prefix_from_the_flag_or_the_environment() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    redis
        .redlock()
        .args(["--prefix", "ci:", "acquire", "a"])
        .run()
        .ok();
    redis
        .redlock()
        .args(["acquire", "b"])
        .env("REDLOCK_PREFIX", "env:")
        .run()
        .ok();
    redis
        .redlock()
        .args(["acquire", "c", "--prefix", "flag:"])
        .env("REDLOCK_PREFIX", "env:")
        .run()
        .ok();
    assert_eq!(
        redis.keys(),
        [
            "ci:{a}",
            "ci:{a}:meta",
            "env:{b}",
            "env:{b}:meta",
            "flag:{c}",
            "flag:{c}:meta"
        ]
    );
    // Other commands honour it too.
    redis
        .redlock()
        .args(["status", "b"])
        .env("REDLOCK_PREFIX", "env:")
        .run()
        .expect(0);
    redis.redlock().args(["status", "b"]).run().expect(1);
    redis
        .redlock()
        .args(["--prefix", "ci:", "release", "a", "--force"])
        .run()
        .expect(0);
    assert_eq!(redis.get("ci:{a}"), None);
}

/// `REDLOCK_CLUSTER` and `REDLOCK_SENTINEL` from the environment: empty is unset (as an empty
/// `REDLOCK_URL` is no URL), `REDLOCK_CLUSTER=0` is off, and only a mode that is really on on
/// both sides is a conflict (exit 2). Before, an empty value was a usage error, and
/// `REDLOCK_CLUSTER=0` still clashed with `--sentinel`.
#[test]
fn cluster_and_sentinel_switches_from_the_environment() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dead = format!("redis://127.0.0.1:{}", closed_port());
    // Off: one plain server, where each takes its lock.
    for (var, value) in [
        ("REDLOCK_CLUSTER", ""),
        ("REDLOCK_CLUSTER", "0"),
        ("REDLOCK_CLUSTER", "off"),
        ("REDLOCK_SENTINEL", ""),
    ] {
        let name = format!("{var}={value}");
        let token = redis
            .redlock()
            .env(var, value)
            .args(["acquire", &name, "-n"])
            .run()
            .ok();
        assert_eq!(redis.get(&lock_key(&name)), Some(token), "{name}");
    }

    // `redlock acquire k -n` with `env` and `args` before the subcommand.
    let run = |env: &[(&str, &str)], args: &[&str]| {
        redlock()
            .envs(env.iter().copied())
            .args(args)
            .args(["acquire", "k", "-n"])
            .run()
    };
    let sentinel = ["--sentinel", "m", "--url", &dead];
    let cluster = ["--cluster", "--url", &dead];
    let both_env = |on: &'static str| [("REDLOCK_CLUSTER", on), ("REDLOCK_SENTINEL", "m")];

    // One mode on, the other off or empty: no conflict. The Sentinel (or the cluster seed) is
    // asked, and it is down: 69.
    for (case, out) in [
        (
            "CLUSTER=0 --sentinel",
            run(&[("REDLOCK_CLUSTER", "0")], &sentinel),
        ),
        (
            "CLUSTER= --sentinel",
            run(&[("REDLOCK_CLUSTER", "")], &sentinel),
        ),
        (
            "CLUSTER=0 SENTINEL=m",
            run(&both_env("0"), &["--url", &dead]),
        ),
        (
            "SENTINEL= --cluster",
            run(&[("REDLOCK_SENTINEL", "")], &cluster),
        ),
    ] {
        assert_eq!(out.status.code(), Some(69), "{case}:\n{out}");
        assert_one_error_line(&out);
        assert!(
            out.stderr.contains(&dead),
            "{case}: asked another server:\n{out}"
        );
        if case.contains("SENTINEL=m") || case.contains("--sentinel") {
            assert!(
                out.stderr.contains("Sentinel"),
                "{case}: no Sentinel:\n{out}"
            );
        }
    }

    // Both on: a usage error, whichever side each comes from.
    for (case, out) in [
        (
            "CLUSTER=1 --sentinel",
            run(&[("REDLOCK_CLUSTER", "1")], &sentinel),
        ),
        (
            "CLUSTER=1 SENTINEL=m",
            run(&both_env("1"), &["--url", &dead]),
        ),
        (
            "SENTINEL=m --cluster",
            run(&[("REDLOCK_SENTINEL", "m")], &cluster),
        ),
    ] {
        assert_eq!(out.status.code(), Some(2), "{case}:\n{out}");
        assert_one_error_line(&out);
        assert!(
            out.stderr.contains("--cluster") && out.stderr.contains("--sentinel"),
            "{case}:\n{out}"
        );
    }
}
