//! Reaching Redis: URL sources, passwords and ACLs, dead and silent servers, timeouts, -v/-q,
//! and the key prefix.

use std::time::Duration;

use crate::common::*;

const PASSWORD: &str = "pw-4fG8-never-print-me";

fn assert_no_password(out: &Output) {
    assert!(
        !out.stdout.contains(PASSWORD) && !out.stderr.contains(PASSWORD),
        "the password was printed:\n{out}"
    );
}

#[test]
fn the_url_comes_from_the_flag_then_redlock_url_then_redis_url() {
    let redis = or_skip!(RedisServer::start());
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
    let redis = or_skip!(
        RedisServer::builder()
            .arg("--unixsocket")
            .arg(socket.to_str().unwrap())
            .start()
    );
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
        .args(["-v", "status", "redlock-test-unlikely-key"])
        .run();
    match out.code() {
        69 => assert!(out.stderr.contains("redis://127.0.0.1:6379"), "{out}"),
        // Someone runs a Redis on the default port (CI's system Redis): we reached that one.
        1 => assert!(
            out.stderr.contains("connected to redis://127.0.0.1:6379 "),
            "{out}"
        ),
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
    // The bound is said with its value (before: "within --io-timeout").
    assert!(out.stderr.contains("within 500ms (--io-timeout)"), "{out}");
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

/// A waiter rides out a frozen server (see `topology::outage`), but only while its wait lasts:
/// then it exits 69 with the timeout, not much later.
#[test]
fn a_server_that_freezes_while_we_wait_exits_69_when_the_wait_runs_out() {
    let redis = or_skip!(RedisServer::start());
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
    let redis = or_skip!(RedisServer::builder().password(PASSWORD).start());
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
    // The environment beats a wrong password in the URL.
    let mut c = redlock();
    c.args(["--url", &bad_url])
        .env("REDLOCK_PASSWORD", PASSWORD);
    ok(c, "env-wins");
    // The file beats a wrong password in the URL and in the environment.
    let mut c = redlock();
    c.args(["--url", &bad_url, "--password-file", good_file])
        .env("REDLOCK_PASSWORD", "wrong");
    ok(c, "file-wins");

    let mut c = redlock();
    c.args(["--url", &good_url, "status", "-v", "--show-token"]);
    let out = c.run().expect(0);
    assert_no_password(&out);
    assert_eq!(out.stdout.lines().count(), 6, "{out}");
}

#[test]
fn a_refused_password_exits_77_without_printing_it() {
    let redis = or_skip!(RedisServer::builder().password(PASSWORD).start());
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
        // REDLOCK_PASSWORD overrides the URL's password, even a right one.
        ("wrong in REDLOCK_PASSWORD, right in the URL", {
            let mut c = redlock();
            c.args(["--url", &format!("redis://:{PASSWORD}@127.0.0.1:{port}")])
                .env("REDLOCK_PASSWORD", format!("wrong-{PASSWORD}"));
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
    let redis = or_skip!(RedisServer::builder().password(PASSWORD).start());
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
    let redis = or_skip!(RedisServer::start());
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
    let redis = or_skip!(RedisServer::start());
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
    let redis = or_skip!(RedisServer::start());
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
    let redis = or_skip!(RedisServer::start());
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
    let redis = or_skip!(RedisServer::start());
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

/// A loopback port where an HTTP server answers anything with a 400 response, then closes.
fn http_port() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\n\
                      Connection: close\r\n\r\n<html><body>Bad Request</body></html>\r\n",
                );
                let _ = stream.shutdown(std::net::Shutdown::Write);
                // Drain what the client still sends, so that closing does not reset.
                while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    port
}

/// A port that is not Redis (here an HTTP server): one line saying so, quoting what it answered,
/// exit 69. Before: "Incompatible type - Parse error at 1" and two more lines, exit 70.
#[test]
fn a_server_that_does_not_speak_redis_exits_69_in_one_line() {
    let port = http_port();
    for url in [
        format!("redis://127.0.0.1:{port}"),
        // With a password, the AUTH of the connection setup meets the HTTP answer.
        format!("redis://:{PASSWORD}@127.0.0.1:{port}"),
    ] {
        for args in [
            vec!["status"],
            vec!["acquire", "k"],
            vec!["release", "k", "--force"],
        ] {
            let out = redlock().args(["--url", &url]).args(&args).run();
            assert_eq!(out.status.code(), Some(69), "{url} {args:?}:\n{out}");
            assert_one_error_line(&out);
            assert_no_password(&out);
            assert!(
                out.stderr.contains(&format!(
                    "127.0.0.1:{port} does not speak the Redis protocol"
                )) && out
                    .stderr
                    .contains(r#"it answered "HTTP/1.1 400 Bad Request"#),
                "{url} {args:?}:\n{out}"
            );
        }
    }
}

/// A password with `#` (or `?`, `/`) that is not percent-encoded ends the URL's host part early:
/// never print any of it, and say how to pass it. Before, `redis://user:1234#rest@host` printed
/// `user:1234#rest@host` as the address it could not resolve.
#[test]
fn a_password_that_breaks_the_url_is_not_printed_and_the_fix_is_named() {
    let redis = or_skip!(RedisServer::start());
    let port = redis.port();
    for (user, password) in [
        ("user", "1234#pw-rest-never-printed"),
        ("", "pw-start#pw-rest-never-printed"),
        ("", "pw-start?pw-rest-never-printed"),
        ("default", "12/pw-rest-never-printed"),
    ] {
        let url = format!("redis://{user}:{password}@127.0.0.1:{port}");
        let out = redlock().args(["--url", &url, "acquire", "k"]).run();
        assert_eq!(out.status.code(), Some(2), "{password}:\n{out}");
        assert_one_error_line(&out);
        assert!(
            !out.stderr.contains("pw-rest") && !out.stderr.contains("pw-start"),
            "the password was printed:\n{out}"
        );
        assert!(!out.stderr.contains(":1234"), "{out}");
        let redacted = format!("'redis://***@127.0.0.1:{port}'");
        for needle in ["percent-encode", "%23", "REDLOCK_PASSWORD", &redacted] {
            assert!(
                out.stderr.contains(needle),
                "{password}: no {needle:?}:\n{out}"
            );
        }
    }
    assert_eq!(redis.dbsize(), 0);
}

/// A host name that does not resolve: say so and name the host to check, not "start
/// redis-server".
#[test]
fn a_host_that_does_not_resolve_is_named() {
    // RFC 2606: .invalid never resolves.
    let url = "redis://redlock-test.invalid:6379";
    let out = redlock().args(["--url", url, "status"]).run().expect(69);
    assert_one_error_line(&out);
    assert!(
        out.stderr
            .contains("cannot resolve the host name 'redlock-test.invalid'")
            && out.stderr.contains("check the host in --url / REDLOCK_URL"),
        "{out}"
    );
    assert!(!out.stderr.contains("start redis-server"), "{out}");
}

/// A database that is not a number, or that the server does not have: a usage error that names
/// the database, without Rust debug text.
#[test]
fn a_bad_database_index_is_a_usage_error_that_says_so() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("r.sock");
    let unix = or_skip!(
        RedisServer::builder()
            .arg("--unixsocket")
            .arg(socket.to_str().unwrap())
            .start()
    );
    let port = redis.port();
    for (url, needle) in [
        (
            format!("redis://127.0.0.1:{port}/abc"),
            "'abc' is not a database number",
        ),
        (
            format!("redis://127.0.0.1:{port}/-1"),
            "'-1' is not a database number",
        ),
        (format!("redis://127.0.0.1:{port}/99"), "has no database 99"),
        (
            format!("unix://{}?db=99", socket.display()),
            "has no database 99",
        ),
    ] {
        let out = redlock()
            .args(["--url", &url, "acquire", "k"])
            .run()
            .expect(2);
        assert_one_error_line(&out);
        assert!(out.stderr.contains(needle), "{url}: no {needle:?}:\n{out}");
        for debug in ["InvalidClientConfig", "ResponseError", "Server("] {
            assert!(!out.stderr.contains(debug), "{url}: debug text:\n{out}");
        }
    }
    assert_eq!(redis.dbsize(), 0);
    assert_eq!(unix.dbsize(), 0);
}

/// A Unix socket path where no socket exists: say that, not "connection refused".
#[test]
fn a_missing_unix_socket_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.sock");
    let url = format!("unix://{}", missing.display());
    let out = redlock().args(["--url", &url, "status"]).run().expect(69);
    assert_one_error_line(&out);
    assert!(
        out.stderr
            .contains(&format!("{} does not exist", missing.display()))
            && out.stderr.contains("--unixsocket"),
        "{out}"
    );
    assert!(!out.stderr.contains("connection refused"), "{out}");

    // A file that is there but no socket anyone listens on: refused, with its own fix.
    let plain = dir.path().join("plain-file");
    std::fs::write(&plain, "").unwrap();
    let url = format!("unix://{}", plain.display());
    let out = redlock().args(["--url", &url, "status"]).run().expect(69);
    assert_one_error_line(&out);
    assert!(out.stderr.contains("no server listens"), "{out}");
}

/// A password sent to a server that has none: say that the server has no password and how to
/// stop sending it (before: "refused the credentials ... check the password").
#[test]
fn a_password_for_a_server_without_one_is_named() {
    let redis = or_skip!(RedisServer::start());
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}", redis.port());
    let out = redlock()
        .args(["--url", &url, "acquire", "k"])
        .run()
        .expect(77);
    assert_one_error_line(&out);
    assert_no_password(&out);
    assert!(
        out.stderr.contains("has no password set") && out.stderr.contains("remove the password"),
        "{out}"
    );
    let out = redis
        .redlock()
        .env("REDLOCK_PASSWORD", PASSWORD)
        .args(["acquire", "k"])
        .run()
        .expect(77);
    assert_no_password(&out);
    assert!(out.stderr.contains("has no password set"), "{out}");
    assert_eq!(redis.dbsize(), 0);
}

/// `rediss://` to a server that does not speak TLS: say so and suggest `redis://` (before: "did
/// not answer the TLS handshake within --io-timeout").
#[test]
#[cfg_attr(not(feature = "tls"), ignore = "a build without the tls feature")]
fn rediss_to_a_plain_server_says_it_is_not_tls() {
    let redis = or_skip!(RedisServer::start());
    let url = format!("rediss://127.0.0.1:{}", redis.port());
    let out = redlock()
        .args(["--url", &url, "--io-timeout", "500ms", "acquire", "k"])
        .run()
        .expect(69);
    assert_one_error_line(&out);
    assert!(
        out.stderr.contains("does not speak TLS")
            && out
                .stderr
                .contains(&format!("redis://127.0.0.1:{}", redis.port())),
        "{out}"
    );
    assert_eq!(redis.dbsize(), 0);
}

/// `-v` logs a waiter's wake-up at the holder's expiry as what it is, not as an error.
#[test]
fn verbose_does_not_call_a_waiters_wake_up_an_error() {
    let redis = or_skip!(RedisServer::start());
    redis
        .redlock()
        .args(["acquire", "k", "--ttl", "1500ms"])
        .run()
        .ok();
    // The waiter sleeps until the holder's TTL runs out, then looks again and takes the lock.
    let out = redis
        .redlock()
        .args(["-v", "acquire", "k", "-w", "30s"])
        .run()
        .expect(0);
    assert!(out.stderr.contains("wait on"), "{out}");
    assert!(
        !out.stderr.contains("error") && !out.stderr.contains("temporarily unavailable"),
        "{out}"
    );
    assert!(out.stderr.contains("no wake-up"), "{out}");
}
