//! Secrets stay secret: no password in a lock's note (in Redis or `status`), in a URL as printed
//! (errors, `-v`, quorum status lines), or in `exec`'s command's environment, which still gets
//! what a `redlock` it runs needs; and `--password-file` is read with bounds.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use crate::common::*;

/// The password of the test servers: distinctive, so that any copy of it is found.
const PW: &str = "Hunter2Secret";

/// Every value on the server, as one text: strings, hashes, sorted sets, lists, sets and streams,
/// with their field names.
fn dump(redis: &RedisServer) -> String {
    let mut text = String::new();
    for key in redis.query::<Vec<String>>(&["KEYS", "*"]) {
        let kind: String = redis.query(&["TYPE", &key]);
        let values: Vec<String> = match kind.as_str() {
            "string" => vec![redis.query(&["GET", &key])],
            "hash" => redis.query(&["HGETALL", &key]),
            "zset" => redis.query(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]),
            "list" => redis.query(&["LRANGE", &key, "0", "-1"]),
            "set" => redis.query(&["SMEMBERS", &key]),
            // A lock's history: every entry's fields and values.
            "stream" => {
                let entries: redis::Value = redis.query(&["XRANGE", &key, "-", "+"]);
                vec![format!("{entries:?}")]
            }
            other => panic!("{key} has type {other}"),
        };
        text.push_str(&format!("{key} = {values:?}\n"));
    }
    text
}

/// Asserts that `PW` is nowhere in the output.
#[track_caller]
fn assert_no_password(out: &Output) {
    assert!(
        !out.stdout.contains(PW) && !out.stderr.contains(PW),
        "the password was printed:\n{out}"
    );
}

/// A server that requires `PW`.
fn server_with_password() -> Option<RedisServer> {
    RedisServer::builder().password(PW).start()
}

/// `redis://:PW@127.0.0.1:PORT`.
fn url_with_password(redis: &RedisServer) -> String {
    format!("redis://:{PW}@127.0.0.1:{}", redis.port())
}

/// A file holding `content`, with permissions `mode`.
fn file_with(dir: &Path, name: &str, content: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// `status` and `status --json` of lock `name`, held or free: neither shows the password.
fn assert_status_clean(redis: &RedisServer, name: &str) {
    for json in [false, true] {
        let mut cmd = redis.redlock();
        cmd.env("REDLOCK_PASSWORD", PW).args(["status", name]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.run();
        assert!(out.code() <= 1, "{out}");
        assert!(out.stdout.contains(name), "{out}");
        assert_no_password(&out);
    }
}

#[test]
fn a_password_on_the_acquiring_command_line_is_not_stored_or_shown() {
    let redis = or_skip!(server_with_password());
    let url = url_with_password(&redis);
    // The note is the calling shell's command line, which holds the URL and the assignment.
    let script = format!(
        "T=$(redlock -u {url} acquire by-url) && echo \"$T\" && \
         T=$(REDLOCK_PASSWORD={PW} redlock -u redis://127.0.0.1:{} acquire by-env) && echo \"$T\"",
        redis.port()
    );
    let out = sh(&script).run();
    let tokens: Vec<String> = out.ok().lines().map(String::from).collect();
    assert_eq!(tokens.len(), 2);
    let note = redis
        .meta("by-url")
        .get("note")
        .cloned()
        .unwrap_or_default();
    assert!(note.contains("redis://:***@127.0.0.1"), "{note}");
    let note = redis
        .meta("by-env")
        .get("note")
        .cloned()
        .unwrap_or_default();
    assert!(note.contains("REDLOCK_PASSWORD=***"), "{note}");
    for name in ["by-url", "by-env"] {
        assert_status_clean(&redis, name);
    }
    // An explicit --note is redacted too, and `exec`'s default note (its command).
    redis
        .redlock()
        .env("REDLOCK_PASSWORD", PW)
        .args([
            "acquire",
            "noted",
            "--note",
            &format!("REDLOCK_PASSWORD={PW}"),
        ])
        .run()
        .ok();
    redis
        .redlock()
        .env("REDLOCK_PASSWORD", PW)
        .args([
            "exec",
            "cli",
            "--",
            "sh",
            "-c",
            &format!(": redis-cli -a {PW} ping"),
        ])
        .run()
        .expect(0);
    assert_status_clean(&redis, "cli");
    // Released: the last holder's note stays in `:meta`, without the password.
    for (name, token) in ["by-url", "by-env"].iter().zip(&tokens) {
        redis
            .redlock()
            .env("REDLOCK_PASSWORD", PW)
            .args(["release", name, token])
            .run()
            .expect(0);
        assert_status_clean(&redis, name);
    }
    let all = dump(&redis);
    assert!(all.contains("***"), "{all}");
    assert!(!all.contains(PW), "the password is stored in Redis:\n{all}");
}

#[test]
fn a_password_in_a_note_stored_by_an_older_version_is_not_shown() {
    let redis = or_skip!(RedisServer::start());
    let token = hold(&redis, "old", "60s");
    // What an older redlock stored: the argv joined with spaces, the quoting lost. `status
    // --json` shows the note for the holder and, once released, for the last holder.
    let note = format!("./deploy.sh --password {PW} --env prod");
    redis.query::<()>(&["HSET", &meta_key("old"), "note", &note]);
    let shown = |out: &Output| {
        assert_no_password(out);
        assert!(
            out.stdout.contains("--password ***") || out.stderr.contains("--password ***"),
            "the rest of the note is shown:\n{out}"
        );
    };
    for held in [true, false] {
        let table = redis.redlock().args(["status", "old"]).run();
        assert_eq!(table.code(), if held { 0 } else { 1 }, "{table}");
        if held {
            shown(&table);
        }
        assert_no_password(&table);
        let json = redis.redlock().args(["status", "old", "--json"]).run();
        assert_eq!(json.code(), if held { 0 } else { 1 }, "{json}");
        shown(&json);
        let all = redis.redlock().arg("status").run();
        assert_no_password(&all);
        if held {
            let busy = redis
                .redlock()
                .args(["acquire", "old", "-n"])
                .run()
                .expect(1);
            shown(&busy);
            release(&redis, "old", &token);
        }
    }
}

#[test]
fn an_argument_after_a_password_option_is_hidden_whole() {
    let redis = or_skip!(RedisServer::start());
    // Joined first, the argument's two words were two words, and only the first was hidden.
    redis
        .redlock()
        .args([
            "exec",
            "argv",
            "--",
            "true",
            "--password",
            &format!("two {PW}"),
        ])
        .run()
        .expect(0);
    let note = redis.meta("argv").get("note").cloned().unwrap_or_default();
    assert_eq!(note, "true --password ***");
}

/// The default note is the command line: each of these tools' ways of passing a password is
/// hidden in Redis and in `status`, while the rest of the command stays readable.
#[test]
fn passwords_in_other_tools_command_lines_are_hidden() {
    let redis = or_skip!(RedisServer::start());
    for (name, argv, shown) in [
        ("pwd", vec!["mysqlsh", "--pwd", PW], "mysqlsh --pwd ***"),
        (
            "openssl-k",
            vec!["openssl", "enc", "-aes256", "-k", PW],
            "openssl enc -aes256 -k ***",
        ),
        (
            "openssl-pass",
            vec!["openssl", "enc", "-pass", &format!("pass:{PW}")],
            "openssl enc -pass ***",
        ),
        (
            "aws",
            vec!["aws", "configure", "set", "aws_secret_access_key", PW],
            "aws configure set aws_secret_access_key ***",
        ),
        (
            "aws-short",
            vec!["aws", "configure", "set", "default.secret_access_key", PW],
            "aws configure set default.secret_access_key ***",
        ),
        (
            "lftp",
            vec!["lftp", "-u", &format!("deploy,{PW}"), "sftp://h"],
            "lftp -u deploy,*** sftp://h",
        ),
        ("vault", vec!["vault", "login", PW], "vault login ***"),
        (
            "htpasswd",
            vec!["htpasswd", "-b", "/etc/h.pw", "bob", PW],
            "htpasswd -b /etc/h.pw bob ***",
        ),
        (
            "ldap",
            vec!["ldapsearch", "-x", "-w", PW, "-b", "dc=x"],
            "ldapsearch -x -w *** -b dc=x",
        ),
        (
            "pg",
            vec!["bash", "-lc", &format!("PGPASSWORD={PW} psql -h db")],
            "bash -lc PGPASSWORD=*** psql -h db",
        ),
    ] {
        // `true` runs instead of the tool: only its command line matters.
        redis
            .redlock()
            .args(["exec", name, "--", "sh", "-c", "true", "sh"])
            .args(&argv)
            .run()
            .expect(0);
        let note = redis.meta(name).get("note").cloned().unwrap_or_default();
        assert!(!note.contains(PW), "{name}: the password is stored: {note}");
        assert!(note.contains(shown), "{name}: {note}");
    }
    assert!(!dump(&redis).contains(PW), "{}", dump(&redis));
}

#[test]
fn an_unparsable_url_never_prints_its_password() {
    for url in [
        format!("redis:/:{PW}@127.0.0.1:6379"),
        format!("redis//:{PW}@127.0.0.1:6379"),
        format!("redis:{PW}@127.0.0.1:6379"),
        format!("unix://?pass={PW}"),
        // `-u "$PASSWORD"`: the password where the URL goes, in every shape a password takes.
        PW.to_string(),
        format!("{PW}:x"),
        format!(":{PW}"),
        format!("{PW}@host"),
        format!("h:{PW}"),
    ] {
        let out = redlock().args(["-u", &url, "status"]).run().expect(2);
        assert_one_error_line(&out);
        assert_no_password(&out);
    }
    let out = redlock().args(["-u", PW, "status"]).run().expect(2);
    assert!(out.stderr.contains("not printed"), "{out}");
    // A ',' in a password cuts a $REDLOCK_URL list in the middle of it.
    let (head, tail) = PW.split_at(6);
    for list in [
        format!("redis://:{head},{tail}@127.0.0.1:6379"),
        format!("redis://127.0.0.1:6379,redis://u:{head},{tail}@127.0.0.1:6380"),
    ] {
        let out = redlock()
            .env("REDLOCK_URL", &list)
            .arg("status")
            .run()
            .expect(2);
        assert_one_error_line(&out);
        assert!(out.stderr.contains("%2C"), "{out}");
        assert!(
            !out.stderr.contains(head) && !out.stderr.contains(tail),
            "part of the password was printed:\n{out}"
        );
    }
}

/// A server listening on a Unix socket (too) that requires `PW`, and the socket's URL with
/// `?pass=PW`.
fn socket_server_with_password(dir: &Path, name: &str) -> Option<(RedisServer, String)> {
    let socket = dir.join(format!("{name}.sock"));
    let redis = RedisServer::builder()
        .password(PW)
        .arg("--unixsocket")
        .arg(socket.to_str().unwrap())
        .start()?;
    let url = format!("unix://{}?pass={PW}", socket.display());
    Some((redis, url))
}

#[test]
fn a_socket_password_is_hidden_in_the_verbose_log() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, url) = or_skip!(socket_server_with_password(dir.path(), "one"));
    // -v logs every round trip with the URL.
    let out = redlock().args(["-v", "-u", &url, "acquire", "k"]).run();
    assert!(is_token(out.stdout.trim()), "{out}");
    assert!(out.stderr.contains("pass=***"), "{out}");
    assert_no_password(&out);
}

#[test]
fn a_socket_password_is_hidden_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, url) = or_skip!(socket_server_with_password(dir.path(), "one"));
    // Refused credentials: the error names the URL.
    let wrong = url.replace(PW, "WrongPassword");
    let out = redlock().args(["-u", &wrong, "status"]).run().expect(77);
    assert_one_error_line(&out);
    assert!(out.stderr.contains("pass=***"), "{out}");
    assert!(!out.stderr.contains("WrongPassword"), "{out}");
    // A URL given twice: the error names it.
    let out = redlock()
        .args(["-u", &url, "-u", &format!("{url}&db=0"), "status"])
        .run()
        .expect(2);
    assert_one_error_line(&out);
    assert_no_password(&out);
}

#[test]
fn a_socket_password_is_kept_from_the_commands_redlock_url() {
    let dir = tempfile::tempdir().unwrap();
    let (_redis, url) = or_skip!(socket_server_with_password(dir.path(), "one"));
    // The command's REDLOCK_URL has no password, and a redlock it runs still gets in.
    let out = redlock()
        .args(["-u", &format!("{url}&db=3"), "exec", "k", "--"])
        .args([
            "sh",
            "-c",
            "echo \"url=$REDLOCK_URL\"; env; redlock extend \"$REDLOCK_KEY\" --ttl 1m",
        ])
        .env("PATH", path_with_redlock())
        .run()
        .expect(0);
    assert_no_password(&out);
    let socket = dir.path().join("one.sock");
    assert!(
        out.stdout
            .contains(&format!("url=unix://{}?db=3\n", socket.display())),
        "{out}"
    );
}

#[test]
fn quorum_status_lines_hide_socket_passwords() {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = Vec::new();
    let mut urls = Vec::new();
    for name in ["a", "b", "c"] {
        let (redis, url) = or_skip!(socket_server_with_password(dir.path(), name));
        servers.push(redis);
        urls.push(url);
    }
    let list = urls.join(",");
    redlock()
        .env("REDLOCK_URL", &list)
        .args(["acquire", "k"])
        .run()
        .ok();
    // One node down: its line says so, naming it.
    servers.pop();
    for json in [false, true] {
        let mut cmd = redlock();
        cmd.env("REDLOCK_URL", &list).args(["status", "k"]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.run().expect(0);
        assert!(out.stdout.contains("pass=***"), "{out}");
        assert!(out.stdout.contains("c.sock"), "{out}");
        assert_no_password(&out);
    }
}

/// `PATH` with the redlock under test first.
fn path_with_redlock() -> std::ffi::OsString {
    let bin_dir = Path::new(BIN).parent().unwrap().to_path_buf();
    let mut path = vec![bin_dir];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(path).unwrap()
}

/// What the command runs: `redlock extend` and `redlock status` on its own lock (from a
/// directory of its own, so that no relative path helps), then its environment.
const INSIDE: &str = "cd / && redlock extend \"$REDLOCK_KEY\" --ttl 1m && \
                      redlock status \"$REDLOCK_KEY\" >/dev/null && echo extended && env";

/// Runs `redlock exec` (set up by `cmd`) on lock `name` with [`INSIDE`] as its command, and
/// checks that the inner `redlock extend` worked, and that the command's environment holds no
/// password, nor `REDLOCK_PASSWORD`, but the file it is in.
#[track_caller]
fn extend_from_inside(mut cmd: Command, name: &str) -> Output {
    let out = cmd
        .env("PATH", path_with_redlock())
        .args(["exec", name, "--ttl", "20s", "--", "sh", "-c", INSIDE])
        .run()
        .expect(0);
    assert!(out.stdout.contains("extended\n"), "{out}");
    assert!(!out.stdout.contains("REDLOCK_PASSWORD="), "{out}");
    assert_no_password(&out);
    assert!(
        out.stdout.contains("REDLOCK_PASSWORD_FILE=/dev/fd/"),
        "{out}"
    );
    out
}

#[test]
fn a_redlock_in_the_command_extends_with_a_password_from_the_url() {
    let redis = or_skip!(server_with_password());
    let mut cmd = redlock();
    cmd.args(["-u", &url_with_password(&redis), "--prefix", "jobs:"]);
    let out = extend_from_inside(cmd, "k");
    assert!(out.stdout.contains("REDLOCK_PREFIX=jobs:\n"), "{out}");
}

#[test]
fn a_redlock_in_the_command_extends_with_a_password_file() {
    let redis = or_skip!(server_with_password());
    let dir = tempfile::tempdir().unwrap();
    let file = file_with(dir.path(), "pw", &format!("{PW}\n"), 0o600);
    let mut cmd = redis.redlock();
    cmd.arg("--password-file").arg(&file);
    let out = extend_from_inside(cmd, "k");
    assert!(!out.stderr.contains("warning"), "{out}");
}

#[test]
fn a_redlock_in_the_command_extends_with_redlock_password_which_it_does_not_see() {
    let redis = or_skip!(server_with_password());
    let mut cmd = redis.redlock();
    cmd.env("REDLOCK_PASSWORD", PW);
    extend_from_inside(cmd, "k");
}

#[test]
fn a_redlock_in_the_command_extends_as_the_same_acl_user() {
    let redis = or_skip!(RedisServer::start());
    redis.query::<()>(&[
        "ACL",
        "SETUSER",
        "locker",
        "on",
        &format!(">{PW}"),
        "~redlock:*",
        "&redlock:*",
        "+@all",
    ]);
    redis.query::<()>(&["ACL", "SETUSER", "default", "off"]);
    let url = format!("redis://locker:{PW}@127.0.0.1:{}", redis.port());
    let mut cmd = redlock();
    cmd.args(["-u", &url]);
    let out = extend_from_inside(cmd, "k");
    assert!(
        out.stdout.contains(&format!(
            "REDLOCK_URL=redis://locker@127.0.0.1:{}",
            redis.port()
        )),
        "{out}"
    );
}

#[test]
#[cfg_attr(not(feature = "tls"), ignore = "a build without the tls feature")]
fn a_redlock_in_the_command_extends_over_tls_with_a_private_ca_and_client_certificate() {
    let certs = Arc::new(Certs::generate());
    let redis = or_skip!(
        RedisServer::builder()
            .tls(Arc::clone(&certs), true)
            .password(PW)
            .start()
    );
    // Relative paths: the command runs `redlock` from another directory.
    let mut cmd = redis.redlock();
    cmd.current_dir(certs.path(""))
        .env("REDLOCK_PASSWORD", PW)
        .args([
            "--tls-ca",
            "ca.crt",
            "--tls-cert",
            "client.crt",
            "--tls-key",
            "client.key",
        ]);
    let out = extend_from_inside(cmd, "k");
    let ca = certs.path("ca.crt");
    assert!(
        out.stdout
            .contains(&format!("REDLOCK_TLS_CA={}\n", ca.display())),
        "{out}"
    );
}

#[test]
fn a_password_file_others_can_read_is_warned_about() {
    let redis = or_skip!(server_with_password());
    let dir = tempfile::tempdir().unwrap();
    for (mode, warned) in [(0o600, false), (0o640, true), (0o604, true), (0o644, true)] {
        let file = file_with(dir.path(), &format!("pw{mode:o}"), &format!("{PW}\n"), mode);
        let out = redis
            .redlock()
            .arg("--password-file")
            .arg(&file)
            .args(["status", "k"])
            .run()
            .expect(1);
        assert_eq!(
            out.stderr.contains("warning") && out.stderr.contains("readable by"),
            warned,
            "mode {mode:o}:\n{out}"
        );
        // -q silences the warning, not the lock.
        let out = redis
            .redlock()
            .arg("--password-file")
            .arg(&file)
            .args(["-q", "status", "k"])
            .run()
            .expect(1);
        assert_eq!(out.stderr, "", "{out}");
    }
    // The variable works as the flag does.
    let file = file_with(dir.path(), "by-env", &format!("{PW}\nnot this\n"), 0o600);
    redis
        .redlock()
        .env("REDLOCK_PASSWORD_FILE", &file)
        .args(["status", "k"])
        .run()
        .expect(1);
}

#[test]
fn a_password_file_that_never_ends_or_never_comes_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let huge = file_with(dir.path(), "huge", &"x".repeat(1 << 20), 0o600);
    for (file, says) in [
        (fifo.as_path(), "is empty"),
        (Path::new("/dev/zero"), "longer than"),
        (huge.as_path(), "longer than"),
    ] {
        // Bounded memory: reading all of /dev/zero would fail here, not exhaust the machine.
        let script = format!(
            "ulimit -v 2000000 && exec redlock --password-file '{}' status k",
            file.display()
        );
        let out = sh(&script).run().expect(2);
        assert_one_error_line(&out);
        assert!(out.stderr.contains(says), "{}:\n{out}", file.display());
    }
}

#[test]
fn a_password_from_a_pipe_works() {
    let redis = or_skip!(server_with_password());
    let mut child = redis
        .redlock()
        .args(["--password-file", "/dev/stdin", "status", "k"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{PW}").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
