//! Test support: a throwaway `redis-server` per test, and the `redlock` binary as users run it.
//!
//! [`RedisServer`] starts its own server on a free loopback port with no persistence in a temp
//! dir, waits until that very server answers PING, and kills it on drop (printing its log when the
//! test panicked, so every failure shows what the server saw). Without `redis-server` on PATH a
//! test is skipped with a note, unless `REDLOCK_REQUIRE_REDIS=1` (CI), which makes it fail: every
//! fixture returns `None` then, and a test starts with
//! `let redis = or_skip!(RedisServer::start());`.
//!
//! Shared by the two crates that run servers: `tests/it` (every feature's tests) and
//! `tests/chaos.rs` (the fault campaign); both declare it with `#[macro_use]`, for `or_skip!`.
//!
//! Commands built here start from a clean environment: every `REDLOCK_*` variable and
//! `REDIS_URL` are removed, so a developer's shell settings never leak into a test, and they
//! start with the default disposition of every signal the tests send ([`default_signals`]), so a
//! test runner started with `nohup` or as a background job changes nothing.
//! Waiting is always on an event ([`wait_for`], [`Proc::wait_for_stderr`]), with a generous bound.
//!
//! For faults: a server can be frozen ([`RedisServer::pause`]), killed and started again on its
//! port and dir ([`RedisServer::kill`], [`RedisServer::restart`]); [`proxy::Proxy`] puts latency
//! or a black hole between redlock and a server; [`nodes::Nodes`] is a group of servers for the
//! Redlock quorum mode.

#![allow(dead_code)] // each of the two test crates uses its own subset

/// The fixture `$start` returns (`Some`), or the end of the test, skipped, when it returns `None`:
/// every fixture that needs `redis-server` returns `None` without one (after a note on stderr,
/// see [`Builder::start`]) and panics instead under `REDLOCK_REQUIRE_REDIS=1`.
///
/// `let redis = or_skip!(RedisServer::start());`
macro_rules! or_skip {
    ($start:expr) => {
        match $start {
            Some(fixture) => fixture,
            None => return,
        }
    };
}

pub mod keeper;
pub mod nodes;
pub mod proxy;
pub mod pty;
pub mod topology;

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The `redlock` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_redlock");

/// How long any single command may run before the test calls it a hang.
pub const HANG: Duration = Duration::from_secs(60);

/// Polls `cond` every 10ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_for(mut cond: impl FnMut() -> bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// A port on 127.0.0.1 that was free a moment ago (another process may take it before us).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().unwrap().port()
}

/// A loopback port that accepts TCP connections and never answers: a hung server. The listener
/// thread keeps every connection open for the rest of the test process.
pub fn silent_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.extend(stream.ok());
        }
    });
    port
}

/// A loopback port where nothing listens: a server that is down. The port stays reserved (bound,
/// never listening) for the rest of the test process, so no other test's server can take it.
pub fn closed_port() -> u16 {
    // SAFETY: plain socket calls on a zeroed sockaddr_in of the size we pass; the descriptor is
    // leaked on purpose to keep the port reserved.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let sa = (&raw mut addr).cast::<libc::sockaddr>();
        assert_eq!(
            libc::bind(fd, sa, len),
            0,
            "bind: {}",
            std::io::Error::last_os_error()
        );
        assert_eq!(libc::getsockname(fd, sa, &mut len), 0);
        u16::from_be(addr.sin_port)
    }
}

pub fn redis_server_installed() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join("redis-server").is_file()))
}

/// Removes every variable redlock reads, so the caller decides exactly what the binary sees.
pub fn clean_env(cmd: &mut Command) -> &mut Command {
    for (name, _) in std::env::vars_os() {
        let n = name.to_string_lossy();
        if n.starts_with("REDLOCK_") || n == "REDIS_URL" {
            cmd.env_remove(&name);
        }
    }
    // A panic would print its backtrace, which the tests reject.
    cmd.env("RUST_BACKTRACE", "1")
}

/// The signals whose default disposition the tests rely on when they send them.
const SIGNALS_SENT: [i32; 8] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGTSTP,
    libc::SIGPIPE,
];

/// Starts the process with the default disposition of every signal the tests send. An ignored
/// signal stays ignored across exec, and redlock keeps it ignored on purpose (as flock and the
/// shell do), so without this `nohup cargo test` (SIGHUP ignored) or a test run started as a
/// background job of a non-interactive shell (SIGINT, SIGQUIT ignored) would change what the
/// signal tests see. (std already clears the signal mask before exec.) A test that wants a
/// signal ignored says so itself, e.g. with `trap '' HUP` in its shell.
pub fn default_signals(cmd: &mut Command) -> &mut Command {
    // SAFETY: the closure runs in the child between fork and exec; it only calls sigaction,
    // which is async-signal-safe, on a zeroed struct that it owns.
    unsafe {
        cmd.pre_exec(|| {
            for signo in SIGNALS_SENT {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = libc::SIG_DFL;
                if libc::sigaction(signo, &action, std::ptr::null_mut()) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        })
    }
}

/// The binary under test: Cargo's build of it, or the one `REDLOCK_TEST_BIN` names (`scripts/
/// dist.sh --check` runs some test files against the static binary it built).
pub fn bin() -> &'static str {
    static CHOSEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    CHOSEN.get_or_init(|| {
        std::env::var("REDLOCK_TEST_BIN")
            .ok()
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| BIN.to_string())
    })
}

/// `redlock` with a clean environment, default signal dispositions and no URL at all.
pub fn redlock() -> Command {
    let mut cmd = Command::new(bin());
    clean_env(&mut cmd);
    default_signals(&mut cmd);
    cmd
}

/// `sh -c SCRIPT` with a clean environment, default signal dispositions and `redlock` first on
/// PATH.
pub fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    clean_env(&mut cmd);
    default_signals(&mut cmd);
    let bin_dir = Path::new(bin()).parent().unwrap().to_path_buf();
    let mut path = vec![bin_dir];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    cmd.env("PATH", std::env::join_paths(path).unwrap());
    cmd.arg("-c").arg(script);
    cmd
}

/// Certificates for a TLS server: a CA, a server certificate for IP 127.0.0.1, a client
/// certificate, all signed by the CA, generated with `openssl` into a temp dir.
pub struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    pub fn generate() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"
            set -e
            ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
            openssl req -x509 $ec -keyout ca.key -out ca.crt -days 2 -subj /CN=redlock-test-ca
            printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
            printf 'extendedKeyUsage=clientAuth\n' > client.ext
            for who in server client; do
              openssl req $ec -keyout $who.key -out $who.csr -subj /CN=redlock-test-$who
              openssl x509 -req -in $who.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
                -days 2 -extfile $who.ext -out $who.crt
            done
        "#;
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .current_dir(dir.path())
            .output()
            .expect("run openssl");
        assert!(
            out.status.success(),
            "openssl failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Certs { dir }
    }

    /// `ca.crt`, `server.crt`, `client.key`, ...
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    fn pem(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.path(file)).unwrap()
    }
}

/// How to start a [`RedisServer`].
#[derive(Default)]
pub struct Builder {
    args: Vec<String>,
    password: Option<String>,
    tls: Option<(Arc<Certs>, bool)>,
}

impl Builder {
    /// An extra `redis-server` argument, e.g. `--maxmemory`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// `--requirepass PASSWORD`; [`RedisServer::cli`] authenticates with it.
    pub fn password(mut self, password: &str) -> Self {
        self.password = Some(password.to_string());
        self.arg("--requirepass").arg(password)
    }

    /// Serve TLS only (`--port 0 --tls-port P`), requiring client certificates if `client_auth`.
    pub fn tls(mut self, certs: Arc<Certs>, client_auth: bool) -> Self {
        self.tls = Some((certs, client_auth));
        self
    }

    /// Starts the server, or returns `None` (after a note) when `redis-server` is not installed.
    pub fn start(self) -> Option<RedisServer> {
        if !redis_server_installed() {
            if std::env::var_os("REDLOCK_REQUIRE_REDIS").is_some_and(|v| v == "1") {
                panic!("redis-server is not on PATH and REDLOCK_REQUIRE_REDIS=1");
            }
            eprintln!("note: skipping this test: redis-server is not installed");
            return None;
        }
        // Another process can take our free port before redis-server binds it: try again.
        let mut last_log = String::new();
        for _ in 0..5 {
            match self.try_start() {
                Ok(server) => return Some(server),
                Err(log) => last_log = log,
            }
        }
        panic!("redis-server failed to start 5 times; last log:\n{last_log}");
    }

    fn try_start(&self) -> Result<RedisServer, String> {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let logfile = dir.path().join("redis.log");
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .arg("--logfile")
            .arg(&logfile);
        match &self.tls {
            None => cmd.arg("--port").arg(port.to_string()),
            Some((certs, client_auth)) => cmd
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .arg("--tls-cert-file")
                .arg(certs.path("server.crt"))
                .arg("--tls-key-file")
                .arg(certs.path("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(certs.path("ca.crt"))
                .arg("--tls-auth-clients")
                .arg(if *client_auth { "yes" } else { "no" }),
        };
        cmd.args(&self.args);
        let argv: Vec<OsString> = cmd.get_args().map(OsString::from).collect();
        let mut server = RedisServer {
            child: spawn_redis(&argv),
            port,
            dir,
            password: self.password.clone(),
            tls: self.tls.as_ref().map(|(c, _)| Arc::clone(c)),
            argv,
            killed: false,
        };
        server.wait_ready(0)?;
        Ok(server)
    }
}

fn spawn_redis(argv: &[OsString]) -> Child {
    Command::new("redis-server")
        .args(argv)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-server")
}

/// The "ready" line of redis-server's log.
const READY: &str = "Ready to accept connections";

/// A `redis-server` of our own, killed when dropped.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    password: Option<String>,
    tls: Option<Arc<Certs>>,
    /// redis-server's arguments, to start it again on the same port and dir.
    argv: Vec<OsString>,
    /// Whether [`kill`](Self::kill) stopped it (and no [`restart`](Self::restart) followed).
    killed: bool,
}

impl RedisServer {
    /// A plain server, or `None` when the test must be skipped (see [`Builder::start`]).
    pub fn start() -> Option<RedisServer> {
        Builder::default().start()
    }

    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A server with an fsynced append-only file: its data survives kill -9 and a restart
    /// ([`restart`](Self::restart)) unless the file goes.
    pub fn persistent() -> Builder {
        Builder::default()
            .arg("--appendonly")
            .arg("yes")
            .arg("--appendfsync")
            .arg("always")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` (or `rediss://` for a TLS server); never with the password.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    /// A scratch directory that lives as long as the server.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn exited(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    /// Waits until the log has more than `before` ready lines and the server answers PING.
    fn wait_ready(&mut self, before: usize) -> Result<(), String> {
        // A ready line in *our* log proves that our server bound the port (a PING alone might be
        // answered by another test's server that took the port first).
        let ready = wait_for(
            || {
                self.exited()
                    || (self.log().matches(READY).count() > before && self.try_cli().is_ok())
            },
            Duration::from_secs(10),
        );
        if ready && !self.exited() {
            return Ok(());
        }
        let log = self.log();
        if log.contains("Address already in use") {
            return Err(log);
        }
        panic!("redis-server did not answer PING within 10s; its log:\n{log}");
    }

    /// Kills the server with SIGKILL, as a crash would, and reaps it: from now on its port
    /// refuses connections (until [`restart`](Self::restart)).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        self.child.wait().expect("reap redis-server");
        self.killed = true;
    }

    /// Whether the server was [`kill`](Self::kill)ed and not restarted.
    pub fn killed(&self) -> bool {
        self.killed
    }

    /// Starts the server again, after [`kill`](Self::kill), on the same port with the same
    /// arguments and directory (so that with `--appendonly yes` it reloads its data); returns
    /// once the new process answers PING.
    pub fn restart(&mut self) {
        assert!(self.killed, "restart() a server that was not killed");
        let before = self.log().matches(READY).count();
        // The port was ours a moment ago, but another process may have taken it meanwhile.
        for _ in 0..20 {
            self.child = spawn_redis(&self.argv);
            match self.wait_ready(before) {
                Ok(()) => {
                    self.killed = false;
                    return;
                }
                Err(_) => thread::sleep(Duration::from_millis(100)),
            }
        }
        panic!(
            "redis-server could not bind port {} again; its log:\n{}",
            self.port,
            self.log()
        );
    }

    fn try_cli(&self) -> redis::RedisResult<redis::Connection> {
        let mut info = redis::IntoConnectionInfo::into_connection_info(self.url())?;
        if let Some(pw) = &self.password {
            let settings = info.redis_settings().clone().set_password(pw.clone());
            info = info.set_redis_settings(settings);
        }
        let client = match &self.tls {
            None => redis::Client::open(info)?,
            Some(certs) => redis::Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: Some(redis::ClientTlsConfig {
                        client_cert: certs.pem("client.crt"),
                        client_key: certs.pem("client.key"),
                    }),
                    root_cert: Some(certs.pem("ca.crt")),
                },
            )?,
        };
        let mut con = client.get_connection_with_timeout(Duration::from_secs(2))?;
        con.set_read_timeout(Some(Duration::from_secs(10)))?;
        redis::cmd("PING").query::<String>(&mut con)?;
        Ok(con)
    }

    /// A connection for inspecting and arranging the server's state.
    pub fn cli(&self) -> redis::Connection {
        self.try_cli()
            .unwrap_or_else(|e| panic!("cannot connect to the test redis-server: {e}"))
    }

    /// Runs one command on a fresh connection.
    pub fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut self.cli())
            .unwrap_or_else(|e| panic!("{args:?} failed: {e}"))
    }

    /// How many clients are blocked (in BLPOP: parked waiters) on this server.
    pub fn blocked_clients(&self) -> i64 {
        let info: String = self.query(&["INFO", "clients"]);
        info.lines()
            .find_map(|l| l.strip_prefix("blocked_clients:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(-1)
    }

    /// How many keys there are, the locks' histories not counted (see [`keys`](Self::keys)).
    pub fn dbsize(&self) -> i64 {
        self.keys().len() as i64
    }

    /// Every key but the locks' histories, sorted (with SCAN, so that it works where KEYS is
    /// disabled). A history (`PREFIX{NAME}:log`) is kept on purpose after every acquisition, like
    /// the record in `:meta`, and expires with it; the tests that list keys check what the
    /// protocol leaves (a lock, a queue, a waiter's traces), and `inspect::history` checks the
    /// history. [`keys_and_histories`](Self::keys_and_histories) lists everything.
    pub fn keys(&self) -> Vec<String> {
        let mut keys = self.keys_and_histories();
        keys.retain(|k| !k.ends_with("}:log"));
        keys
    }

    /// Every key, sorted, each once (SCAN may return a key twice while the server resizes its
    /// table).
    pub fn keys_and_histories(&self) -> Vec<String> {
        use redis::Commands;
        let mut con = self.cli();
        let mut keys: Vec<String> = con.scan::<String>().unwrap().map(Result::unwrap).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// The value of a string key.
    pub fn get(&self, key: &str) -> Option<String> {
        self.query(&["GET", key])
    }

    /// PTTL of a key: milliseconds left, -1 without expiry, -2 when missing.
    pub fn pttl(&self, key: &str) -> i64 {
        self.query(&["PTTL", key])
    }

    /// The owner record (meta hash) of lock `name` under the default prefix.
    pub fn meta(&self, name: &str) -> HashMap<String, String> {
        self.query(&["HGETALL", &meta_key(name)])
    }

    /// The server's clock, in milliseconds since the epoch.
    pub fn now_ms(&self) -> i64 {
        let (secs, micros): (i64, i64) = self.query(&["TIME"]);
        secs * 1000 + micros / 1000
    }

    /// How many times the server ran `command` (a scripts' `redis.call` counts too) since its
    /// statistics were reset, from `INFO commandstats` (0: never).
    pub fn calls(&self, command: &str) -> u64 {
        let info: String = self.query(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix)?.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    /// Total calls of EVAL and EVALSHA so far (each is one lock operation).
    pub fn script_calls(&self) -> u64 {
        self.calls("eval") + self.calls("evalsha")
    }

    /// Adds the ACL user `name` (password `password`) with every key and command but no pub/sub
    /// channel (Redis 7's default for a new user), and returns the URL that logs in as it.
    pub fn user_without_channels(&self, name: &str, password: &str) -> String {
        let pass = format!(">{password}");
        let rules = ["on", &pass, "~*", "+@all", "resetchannels"];
        self.query::<()>(&[&["ACL", "SETUSER", name][..], &rules].concat());
        format!("redis://{name}:{password}@127.0.0.1:{}", self.port())
    }

    /// Freezes the server (SIGSTOP): it keeps accepting TCP connections but never answers.
    pub fn pause(&self) {
        signal(self.child.id(), libc::SIGSTOP);
    }

    /// Thaws a [`pause`](Self::pause)d server.
    pub fn resume(&self) {
        signal(self.child.id(), libc::SIGCONT);
    }

    /// `redlock` with a clean environment and `REDLOCK_URL` naming this server.
    pub fn redlock(&self) -> Command {
        let mut cmd = redlock();
        cmd.env("REDLOCK_URL", self.url());
        cmd
    }

    /// `sh -c SCRIPT` with `redlock` on PATH and `REDLOCK_URL` naming this server.
    pub fn sh(&self, script: &str) -> Command {
        let mut cmd = sh(script);
        cmd.env("REDLOCK_URL", self.url());
        cmd
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL works on a stopped process too; no signal goes to a pid already reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!(
                "--- log of redis-server on port {}:\n{}",
                self.port,
                self.log()
            );
        }
    }
}

/// Sends `sig` to process `pid`.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// The outcome of a finished command.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// From spawn to exit.
    pub elapsed: Duration,
}

impl Output {
    /// The exit code; panics (with the output) if a signal killed the process.
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal:\n{self}"))
    }

    /// Asserts the exit code, showing everything on failure.
    #[track_caller]
    pub fn expect(self, code: i32) -> Output {
        assert_eq!(self.status.code(), Some(code), "unexpected exit:\n{self}");
        self
    }

    /// Asserts success and returns stdout without its trailing newline.
    #[track_caller]
    pub fn ok(self) -> String {
        self.expect(0).stdout.trim_end_matches('\n').to_string()
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} after {:?}\n--- stdout:\n{}--- stderr:\n{}---",
            self.status, self.elapsed, self.stdout, self.stderr
        )
    }
}

/// A running process with its stdout and stderr collected in the background; killed on drop,
/// with every process it started.
///
/// It leads a process group of its own ([`Run::spawn_proc`]), which the processes it starts join
/// (a `redlock` under `sh -c`, the command under `redlock exec`): on drop, and when
/// [`finish`](Self::finish) gives up, the whole group is killed, so that a test that panics
/// leaves no `redlock` behind riding out its `--wait` against a server that is gone. Signals the
/// tests send ([`signal`](Self::signal)) still go to the leader alone. The group's id is the
/// leader's pid, which stays ours while the leader is not reaped: [`running`](Self::running)
/// therefore looks without reaping, and the group is killed only before the leader is reaped
/// (after [`finish`](Self::finish) reaped it, a process left in the group stays, as before).
pub struct Proc {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    started: Instant,
}

/// Reads `pipe` (a process's output, a pseudo-terminal's master) to its end on a thread of its
/// own, into the string it returns.
pub fn collect(mut pipe: impl Read + Send + 'static) -> (Arc<Mutex<String>>, JoinHandle<()>) {
    let buf = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&buf);
    let reader = thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
    (buf, reader)
}

impl Proc {
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The process itself, e.g. to wait on it differently.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn signal(&self, sig: i32) {
        signal(self.id(), sig);
    }

    /// Whether the process has exited (without reaping it: `finish` still works, and the group
    /// can still be killed on drop).
    pub fn running(&mut self) -> bool {
        self.leader_exited() == Some(false)
    }

    /// Whether the leader has exited (`Some(true)`: a zombie, not reaped yet), is running
    /// (`Some(false)`), or was reaped already (`None`).
    fn leader_exited(&self) -> Option<bool> {
        // SAFETY: waitid writes into the siginfo_t we own, zeroed first (si_pid stays 0 when
        // the child has not exited); WNOWAIT leaves an exited child unreaped.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let rc = libc::waitid(
                libc::P_PID,
                self.child.id(),
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            (rc == 0).then(|| info.si_pid() != 0)
        }
    }

    /// SIGKILLs the process and everything in its group, unless the leader was reaped already
    /// (its pid, the group's id, may then belong to someone else), then reaps the leader.
    fn kill_group(&mut self) {
        if self.leader_exited().is_some() {
            // SAFETY: killpg has no memory-safety preconditions. The group id is our unreaped
            // child's pid, so it names our group (or no group at all: ESRCH, ignored).
            unsafe {
                libc::killpg(self.child.id() as libc::pid_t, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits until stderr contains `needle`; panics with the output so far after `timeout`.
    #[track_caller]
    pub fn wait_for_stderr(&mut self, needle: &str, timeout: Duration) {
        let stderr = Arc::clone(&self.stderr);
        if !wait_for(|| stderr.lock().unwrap().contains(needle), timeout) {
            let exited = self.child.try_wait().unwrap();
            panic!(
                "no {needle:?} on stderr within {timeout:?} (exited: {exited:?})\n\
                 --- stdout:\n{}--- stderr:\n{}---",
                self.stdout(),
                self.stderr()
            );
        }
    }

    /// Waits for the exit (killing the process and panicking after `timeout`), then for its
    /// stdout and stderr to close (panicking, with what was read so far, after `timeout` more:
    /// a process it started may hold them, such as a detached keeper, and the test must fail
    /// rather than hang).
    #[track_caller]
    pub fn finish(mut self, timeout: Duration) -> Output {
        if !wait_for(|| self.leader_exited() != Some(false), timeout) {
            self.kill_group();
            panic!(
                "still running after {timeout:?}; killed\n--- stdout:\n{}--- stderr:\n{}---",
                self.stdout(),
                self.stderr()
            );
        }
        let status = self.child.wait().unwrap();
        let elapsed = self.started.elapsed();
        let readers = std::mem::take(&mut self.readers);
        if !wait_for(|| readers.iter().all(JoinHandle::is_finished), timeout) {
            // The readers are left to end with the pipes (or the test process).
            panic!(
                "exited ({status}), but its stdout or stderr was still open {timeout:?} later \
                 (held by a process it started?)\n--- stdout so far:\n{}--- stderr so far:\n{}---",
                self.stdout(),
                self.stderr()
            );
        }
        for reader in readers {
            reader.join().unwrap();
        }
        Output {
            status,
            stdout: self.stdout(),
            stderr: self.stderr(),
            elapsed,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// Running a [`Command`] as a test wants it.
pub trait Run {
    /// Starts it with stdin closed and stdout/stderr collected, leading a process group of its
    /// own (see [`Proc`]).
    fn spawn_proc(&mut self) -> Proc;
    /// Runs it to the end (a hang fails the test after [`HANG`]).
    fn run(&mut self) -> Output;
}

impl Run for Command {
    fn spawn_proc(&mut self) -> Proc {
        let started = Instant::now();
        let mut child = self
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {self:?}: {e}"));
        let (stdout, r1) = collect(child.stdout.take().unwrap());
        let (stderr, r2) = collect(child.stderr.take().unwrap());
        Proc {
            child,
            stdout,
            stderr,
            readers: vec![r1, r2],
            started,
        }
    }

    fn run(&mut self) -> Output {
        self.spawn_proc().finish(HANG)
    }
}

/// The lines of the "waiting for NAME:" section of a `status` table, header first.
pub fn waiting_section(table: &str, name: &str) -> Vec<String> {
    table
        .lines()
        .skip_while(|l| *l != format!("waiting for {name}:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim().to_string())
        .collect()
}

/// The tokens queued for lock `name`, first in line first.
pub fn queue(redis: &RedisServer, name: &str) -> Vec<String> {
    redis.query(&["ZRANGE", &format!("{}:q", lock_key(name)), "0", "-1"])
}

/// Takes lock `name` for `ttl` with `redlock acquire`; returns the token.
pub fn hold(redis: &RedisServer, name: &str, ttl: &str) -> String {
    redis
        .redlock()
        .args(["acquire", name, "--ttl", ttl])
        .run()
        .ok()
}

/// Releases lock `name` held with `token`; it must succeed.
pub fn release(redis: &RedisServer, name: &str, token: &str) {
    redis
        .redlock()
        .args(["release", name, token])
        .run()
        .expect(0);
}

/// Asserts that a failed command printed exactly one line on stderr, `redlock: ...`, and no panic.
#[track_caller]
pub fn assert_one_error_line(out: &Output) {
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("redlock: "),
        "expected exactly one 'redlock: ' line on stderr:\n{out}"
    );
    assert!(!out.stderr.contains("panicked"), "panic:\n{out}");
}

/// A 32-hex-digit token, as `acquire` prints it.
pub fn is_token(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The Redis keys of lock `name` under the default prefix.
pub fn lock_key(name: &str) -> String {
    format!("redlock:{{{name}}}")
}

pub fn meta_key(name: &str) -> String {
    format!("redlock:{{{name}}}:meta")
}

/// Waits until someone on one of `servers` listens on the announcement channel of lock `name`
/// (`exec` subscribes on a thread of its own and starts its command after at most a quarter of
/// `--io-timeout` even without it: a test of a forced release must not race it).
#[track_caller]
pub fn wait_subscribed(servers: &[&RedisServer], name: &str) {
    wait_listened(servers, &format!("{}:events", lock_key(name)));
}

/// Waits until someone on one of `servers` subscribes to `channel`.
#[track_caller]
pub fn wait_listened(servers: &[&RedisServer], channel: &str) {
    let listening = || {
        servers.iter().any(|s| {
            let (_, n): (String, i64) = s.query(&["PUBSUB", "NUMSUB", channel]);
            n >= 1
        })
    };
    assert!(
        wait_for(listening, Duration::from_secs(30)),
        "nobody subscribed to {channel}"
    );
}
