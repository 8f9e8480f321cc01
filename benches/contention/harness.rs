//! The harness every workload runs in: [`Bench`] owns the temp dir's layout (the polling lock's
//! script, the logs, the FIFO, the counter file, GNU `sem`'s home), the bench's `redis-server`
//! and its admin connection, the bench's etcd when a workload wants it ([`Bench::start_etcd`]),
//! and runs single commands that must succeed ([`Bench::run_one`],
//! [`Bench::time_one`]). It also takes and drops a lock from the bench itself with each tool's own
//! commands ([`Bench::hold`], [`Bench::release`]) for the workloads that need a holder, and
//! describes the machine for the report's header. Above [`guard`](crate::guard),
//! [`tools`](crate::tools), [`events`](crate::events), [`admin`](crate::admin) and
//! [`etcd`](crate::etcd).

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::admin::{Admin, Server};
use crate::etcd::Etcd;
use crate::events::Events;
use crate::guard::{Log, Proc, check_failed, start, watched};
use crate::tools::{
    ETCD_MISSING, Env, POLLING_LOCK_SH, RELEASE_LUA, TOOLS, Tool, etcd_installed, polling_key,
};

/// The bench's state: the commands' environment, the admin connection, the events and its servers.
pub struct Bench {
    pub env: Env,
    pub admin: Admin,
    pub events: Events,
    logs: PathBuf,
    _server: Server,
    /// Started by [`Bench::start_etcd`]; its URL is `env.etcd`.
    etcd: Option<Etcd>,
}

impl Bench {
    /// Lays out the temp dir `dir`, opens the FIFO and starts the bench's `redis-server`.
    pub fn new(bin: PathBuf, dir: &Path) -> Bench {
        let polling_lock = dir.join("seed-lock.sh");
        fs::write(&polling_lock, POLLING_LOCK_SH).expect("cannot write seed-lock.sh");
        let logs = dir.join("logs");
        fs::create_dir(&logs).expect("cannot create the log dir");
        let fifo = dir.join("events.fifo");
        let events = Events::open(&fifo);
        let sem_home = dir.join("sem");
        fs::create_dir(&sem_home).expect("cannot create sem's dir");
        let server = Server::start(dir);
        let admin = Admin::connect(server.port);
        Bench {
            env: Env {
                bin,
                url: format!("redis://127.0.0.1:{}", server.port),
                port: server.port.to_string(),
                polling_lock,
                dir: dir.to_path_buf(),
                fifo,
                counter: dir.join("counter"),
                sem_home,
                etcd: None,
            },
            admin,
            events,
            logs,
            _server: server,
            etcd: None,
        }
    }

    /// Starts the bench's etcd if etcd and etcdctl are installed, for the etcdctl column; returns
    /// the header line that says which etcd runs, or that the column says [`ETCD_MISSING`].
    pub fn start_etcd(&mut self) -> String {
        if !etcd_installed() {
            return format!("etcdctl lock: {ETCD_MISSING}; its column says so.");
        }
        let etcd = watched("etcd", || Etcd::start(&self.env.dir));
        let line = format!(
            "etcdctl lock: {}, against the bench's own etcd at {} (one member, default \
             settings, data dir in the temp dir).",
            etcd.version, etcd.url
        );
        self.env.etcd = Some(etcd.url.clone());
        self.etcd = Some(etcd);
        line
    }

    /// The CPU time the bench's etcd has used so far (all its threads), if it runs.
    pub fn etcd_cpu(&self) -> Option<Duration> {
        self.etcd.as_ref().map(Etcd::cpu)
    }

    /// Whether the bench's etcd runs, for the etcdctl column of workloads 1 and 6.
    pub fn has_etcd(&self) -> bool {
        self.env.etcd.is_some()
    }

    /// The tools of workloads 1 and 6: [`TOOLS`], and etcdctl when the bench's etcd runs.
    pub fn tools_with_etcd(&self) -> Vec<Tool> {
        let mut tools = TOOLS.to_vec();
        if self.has_etcd() {
            tools.push(Tool::Etcd);
        }
        tools
    }

    /// The stderr log `name` in the log dir.
    pub fn log(&self, name: &str) -> Log {
        Log::new(&self.logs, name)
    }

    pub fn reset_counter(&self) {
        fs::write(&self.env.counter, "0\n").expect("cannot reset the counter");
    }

    /// The counter the critical sections increment.
    pub fn counter(&self) -> u64 {
        let text = fs::read_to_string(&self.env.counter).expect("cannot read the counter");
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("the counter file holds {text:?}, not a number"))
    }

    /// One command that must succeed; returns its stdout and how long it took.
    pub fn run_one(&self, mut cmd: Command, what: &str, log: &Log) -> (String, Duration) {
        cmd.stdout(Stdio::piped()).stderr(log.stdio());
        let t0 = Instant::now();
        let proc = start(&mut cmd, what).unwrap_or_else(|e| panic!("{e}"));
        let (status, out, done) = proc.wait_output().unwrap_or_else(|e| panic!("{e}"));
        check_failed();
        assert!(status.success(), "{}", log.failed(what, status));
        (out, done - t0)
    }

    /// One command that must succeed, with stdout discarded; how long it took.
    pub fn time_one(&self, mut cmd: Command, what: &str, log: &Log) -> Duration {
        cmd.stderr(log.stdio());
        let t0 = Instant::now();
        let proc = start(&mut cmd, what).unwrap_or_else(|e| panic!("{e}"));
        let (status, done) = proc.wait().unwrap_or_else(|e| panic!("{e}"));
        check_failed();
        assert!(status.success(), "{}", log.failed(what, status));
        done - t0
    }

    /// The machine and the versions, for the header.
    pub fn machine(&mut self) -> Vec<String> {
        watched("machine", || {
            let log = self.log("machine");
            let output = |program: &str, args: &[&str]| -> String {
                let mut cmd = Command::new(program);
                cmd.args(args).stdin(Stdio::null());
                match start(cmd.stdout(Stdio::piped()).stderr(log.stdio()), program)
                    .and_then(Proc::wait_output)
                {
                    Ok((status, out, _)) if status.success() => {
                        out.lines().next().unwrap_or("").trim().to_string()
                    }
                    _ => "unknown".to_string(),
                }
            };
            let cpu = fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|t| {
                    t.lines()
                        .find(|l| l.starts_with("model name"))
                        .and_then(|l| l.split_once(':'))
                        .map(|(_, m)| m.trim().to_string())
                })
                .unwrap_or_else(|| "unknown CPU".to_string());
            let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|k| k.trim().to_string())
                .unwrap_or_else(|_| "unknown".to_string());
            let cores = thread::available_parallelism().map_or(0, |n| n.get());
            let redis = output("redis-server", &["--version"]);
            let redis = redis
                .split_whitespace()
                .find_map(|w| w.strip_prefix("v="))
                .map_or(redis.clone(), |v| format!("redis-server {v}"));
            let flock = output("flock", &["--version"]);
            let bin = self.env.bin.to_string_lossy().into_owned();
            let version = output(&bin, &["--version"]);
            let commit = output(
                "git",
                &[
                    "-C",
                    env!("CARGO_MANIFEST_DIR"),
                    "describe",
                    "--always",
                    "--dirty",
                ],
            );
            vec![
                "Command: `cargo bench --bench contention`".to_string(),
                format!("Machine: {cores} CPUs ({cpu}), Linux {kernel}; {redis}; {flock}"),
                format!("Under test: {version} (commit {commit}), release build {bin}"),
            ]
        })
    }

    // --- hold and release a lock from the bench, with each tool's own commands -------------------

    /// Takes `key` with `tool`'s own commands (`flock(2)`, `redis-cli SET NX PX`,
    /// `redlock acquire`), from the bench itself.
    pub fn hold(&mut self, tool: Tool, key: &str, ttl_ms: u64, log: &Log) -> Held {
        match tool {
            Tool::Flock => {
                let path = self.env.dir.join(format!("{key}.lock"));
                let file = File::create(&path)
                    .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
                // SAFETY: flock(2) on a descriptor we own; no memory is involved.
                let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
                assert_eq!(
                    r,
                    0,
                    "flock {}: {}",
                    path.display(),
                    io::Error::last_os_error()
                );
                Held::Flock(file)
            }
            Tool::Polling => {
                let token = uuid::Uuid::new_v4().simple().to_string();
                let cmd = self.env.redis_cli(&[
                    "SET",
                    &polling_key(key),
                    &token,
                    "NX",
                    "PX",
                    &ttl_ms.to_string(),
                ]);
                let (out, _) = self.run_one(cmd, "redis-cli SET NX PX (holder)", log);
                assert_eq!(out.trim(), "OK", "the seed holder did not get {key}");
                Held::Polling(token)
            }
            Tool::Redlock => {
                let ttl = format!("{ttl_ms}ms");
                let cmd = self.env.redlock(&["acquire", key, "--ttl", &ttl]);
                let (out, _) = self.run_one(cmd, "redlock acquire (holder)", log);
                Held::Redlock(out.trim().to_string())
            }
            Tool::Etcd => panic!("the bench holds no etcd lock itself (etcdctl has no acquire)"),
        }
    }

    /// Releases; returns when the lock was surely free (the release command had returned).
    pub fn release(&mut self, held: Held, key: &str, log: &Log) -> Instant {
        match held {
            Held::Flock(file) => {
                // SAFETY: as in `hold`.
                let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
                let at = Instant::now();
                assert_eq!(r, 0, "flock -u: {}", io::Error::last_os_error());
                at
            }
            Held::Polling(token) => {
                let cmd =
                    self.env
                        .redis_cli(&["EVAL", RELEASE_LUA, "1", &polling_key(key), &token]);
                let (out, _) = self.run_one(cmd, "redis-cli EVAL release (holder)", log);
                assert_eq!(out.trim(), "1", "the seed holder had lost {key}");
                Instant::now()
            }
            Held::Redlock(token) => {
                let cmd = self.env.redlock(&["release", key, &token]);
                self.run_one(cmd, "redlock release (holder)", log);
                Instant::now()
            }
        }
    }
}

/// A lock the bench holds: the locked file, or the token.
pub enum Held {
    Flock(File),
    Polling(String),
    Redlock(String),
}
