//! The tools under test and the commands that run them: [`Tool`], the critical sections they all
//! run, [`Env`] (every command the bench starts, with the bench's variables and none of the
//! caller's redlock or etcdctl settings), the Redis keys each tool uses, and the checks that the
//! programs the bench needs are there ([`release_binary`], [`require_tools`], [`etcd_installed`]).
//! Just above [`guard`](crate::guard) in the bench's layers: it builds commands, it starts none.
//!
//! The polling tool is `benches/seed-lock.sh`: the usual hand-written Redis lock
//! (`SET KEY TOKEN NX PX TTL`, retried after a fixed 200 ms sleep, released with a Lua
//! compare-and-delete). It is the recipe of the Java (Jedis) article on Redis locks this project
//! grew from, whose measurements found the 200 ms sleep the best of the retry strategies it tried
//! (spinning, yielding, sleeping 200 ms or 2 s); the table heads its column "seed style" for that
//! reason, and [`Tool::name`] calls it "seed".
//!
//! `etcdctl lock` is the peer users most often weigh redlock against; it runs only in workloads 1
//! and 6, against the bench's own etcd ([`etcd`](crate::etcd)), and only when Debian's
//! `etcd-server` and `etcd-client` are installed: the bench needs neither ([`ETCD_MISSING`]).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The polling lock as a shell helper; written to the temp dir at run time.
pub const POLLING_LOCK_SH: &str = include_str!("../seed-lock.sh");
/// The polling lock's release: compare-and-delete.
pub const RELEASE_LUA: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// Critical sections. `$BF` is the FIFO, `$BC` the counter file, `$BT $BL $BR` tag, loop, round.
pub const CS_EMPTY: &str = r#"echo "E $BT $BL $BR" > "$BF"; read n < "$BC"; echo $((n + 1)) > "$BC"; echo "L $BT $BL $BR" > "$BF""#;
/// The sleep sits between the read and the write, so an overlap would surely lose an update.
pub const CS_20MS: &str = r#"echo "E $BT $BL $BR" > "$BF"; read n < "$BC"; sleep 0.02; echo $((n + 1)) > "$BC"; echo "L $BT $BL $BR" > "$BF""#;
/// A holder that says it holds the lock, then sleeps until killed.
pub const CS_HOLD: &str = r#"echo "H $BT 0 0" > "$BF"; exec sleep 60"#;
/// Workload 9's section, for a lock with several holders: no counter (holders are meant to
/// overlap), only the entry and leave lines around a 50 ms sleep.
pub const CS_50MS: &str =
    r#"echo "E $BT $BL $BR" > "$BF"; sleep 0.05; echo "L $BT $BL $BR" > "$BF""#;
/// Workload 10's readers: 100 ms inside.
pub const CS_100MS: &str =
    r#"echo "E $BT $BL $BR" > "$BF"; sleep 0.1; echo "L $BT $BL $BR" > "$BF""#;
/// Workload 10's writer: the counter increment around a 20 ms sleep (as [`CS_20MS`]).
pub const CS_WRITE_20MS: &str = CS_20MS;

/// The tools every workload runs, in the order of [`Tool::index`]. [`Tool::Etcd`] is not one of
/// them: workloads 1 and 6 add it when the bench's etcd runs.
pub const TOOLS: [Tool; 3] = [Tool::Flock, Tool::Polling, Tool::Redlock];

/// The etcdctl column's cell when etcd or etcdctl is not on PATH.
pub const ETCD_MISSING: &str = "not installed (apt install etcd-server etcd-client)";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// `flock DIR/KEY.lock`: the kernel lock, one machine only (the physical limit).
    Flock,
    /// `seed-lock.sh`: SET NX PX, a fixed 200 ms sleep between attempts, Lua release.
    Polling,
    /// `redlock exec KEY --`.
    Redlock,
    /// `etcdctl lock KEY --`, against the bench's own etcd (workloads 1 and 6 only).
    Etcd,
}

impl Tool {
    /// The tool's name in run tags, log files and stderr lines (the polling tool keeps its
    /// historical "seed").
    pub fn name(self) -> &'static str {
        match self {
            Tool::Flock => "flock",
            Tool::Polling => "seed",
            Tool::Redlock => "redlock",
            Tool::Etcd => "etcdctl",
        }
    }

    /// The tool's place in arrays of figures: its position in [`TOOLS`], then etcdctl's (3), as
    /// in the cells of a [`Report`](crate::report::Report) row.
    pub fn index(self) -> usize {
        match self {
            Tool::Flock => 0,
            Tool::Polling => 1,
            Tool::Redlock => 2,
            Tool::Etcd => 3,
        }
    }

    /// Whether the tool keeps its lock in the bench's redis-server (whose commands and CPU the
    /// bench measures).
    pub fn uses_redis(self) -> bool {
        matches!(self, Tool::Polling | Tool::Redlock)
    }
}

/// How one lock command holds the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Alone: each tool's plain lock command.
    Exclusive,
    /// One of up to N holders: `redlock exec KEY --slots N`; in flock's column GNU
    /// `sem --id KEY -j N --fg` (flock has no counting mode); the polling lock has none.
    Slots(u32),
    /// Shared with other shared holders (a reader): `redlock exec KEY --shared`, `flock -s`; a
    /// writer is [`Mode::Exclusive`] on the same lock. The polling lock has none.
    Shared,
}

/// The program that runs `tool`'s lock in `mode`, for run tags and messages: `sem` for flock's
/// column with several holders, else the tool's name.
pub fn program(tool: Tool, mode: Mode) -> &'static str {
    match (tool, mode) {
        (Tool::Flock, Mode::Slots(_)) => "sem",
        _ => tool.name(),
    }
}

/// What every lock command needs; cloned into the loop threads.
#[derive(Clone)]
pub struct Env {
    pub bin: PathBuf,
    pub url: String,
    pub port: String,
    /// The polling lock's script ([`POLLING_LOCK_SH`]) in the temp dir.
    pub polling_lock: PathBuf,
    pub dir: PathBuf,
    pub fifo: PathBuf,
    pub counter: PathBuf,
    /// GNU `sem`'s home (its semaphores under `.parallel/`) and `--tmpdir`, in the temp dir.
    pub sem_home: PathBuf,
    /// The client URL of the bench's etcd, while it runs (workloads 1 and 6, etcd installed).
    pub etcd: Option<String>,
}

impl Env {
    /// A command with the bench's variables and none of the caller's redlock or etcdctl
    /// settings.
    pub fn base(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = command(program);
        cmd.env("BF", &self.fifo)
            .env("BC", &self.counter)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        cmd
    }

    pub fn redlock(&self, args: &[&str]) -> Command {
        self.redlock_on(std::slice::from_ref(&self.url), args)
    }

    /// `redlock` with one `--url` per server: several make it a Redlock quorum (workload 7).
    pub fn redlock_on(&self, urls: &[String], args: &[&str]) -> Command {
        let mut cmd = self.base(&self.bin);
        for url in urls {
            cmd.arg("--url").arg(url);
        }
        cmd.args(args);
        cmd
    }

    pub fn redis_cli(&self, args: &[&str]) -> Command {
        let mut cmd = self.base("redis-cli");
        cmd.args(["-p", &self.port]).args(args);
        cmd
    }

    /// `argv` run under `tool`'s lock on `key`.
    pub fn under_lock(&self, tool: Tool, key: &str, ttl_ms: u64, argv: &[&str]) -> Command {
        self.lock_cmd(tool, Mode::Exclusive, key, ttl_ms, argv)
    }

    /// `argv` run under `tool`'s lock on `key`, held in `mode`; panics for the polling lock in a
    /// mode other than [`Mode::Exclusive`] (it has none).
    pub fn lock_cmd(
        &self,
        tool: Tool,
        mode: Mode,
        key: &str,
        ttl_ms: u64,
        argv: &[&str],
    ) -> Command {
        match (tool, mode) {
            (Tool::Flock, Mode::Slots(n)) => {
                // `--fg`: sem runs the command itself and exits with it (without, it would
                // start it in the background and return at once). `-q`: argv is passed as
                // words, not as one shell line. Its semaphore (`.parallel/semaphores/`) lives
                // under HOME and PARALLEL_HOME, both in the bench's temp dir, its temporary files
                // in `--tmpdir`.
                let mut cmd = self.base("sem");
                cmd.env("HOME", &self.sem_home)
                    .env("PARALLEL_HOME", self.sem_home.join(".parallel"))
                    .arg("--id")
                    .arg(key)
                    .arg("-j")
                    .arg(n.to_string())
                    .arg("--fg")
                    .arg("-q")
                    .arg("--tmpdir")
                    .arg(&self.sem_home)
                    .args(argv);
                cmd
            }
            (Tool::Flock, _) => {
                let mut cmd = self.base("flock");
                if mode == Mode::Shared {
                    cmd.arg("-s");
                }
                cmd.arg(self.dir.join(format!("{key}.lock"))).args(argv);
                cmd
            }
            (Tool::Polling, Mode::Slots(_) | Mode::Shared) => {
                panic!("the polling lock has no {mode:?} mode")
            }
            (Tool::Polling, Mode::Exclusive) => {
                let mut cmd = self.base("sh");
                cmd.arg(&self.polling_lock)
                    .arg(&self.port)
                    .arg(polling_key(key))
                    .arg(ttl_ms.to_string())
                    .args(argv);
                cmd
            }
            (Tool::Etcd, Mode::Slots(_) | Mode::Shared) => {
                panic!("etcdctl lock has no {mode:?} mode")
            }
            (Tool::Etcd, Mode::Exclusive) => {
                let url = self
                    .etcd
                    .as_deref()
                    .expect("an etcdctl lock command without the bench's etcd running");
                // `--`: without it etcdctl takes the command's own flags (`sh -c`) for its own.
                // `--ttl`: the session's lease, in whole seconds, which frees the lock of a
                // holder that died, as the other tools' TTL does.
                let mut cmd = self.base("etcdctl");
                cmd.arg(format!("--endpoints={url}"))
                    .arg("lock")
                    .arg(format!("--ttl={}", ttl_ms.div_ceil(1000)))
                    .arg(key)
                    .arg("--")
                    .args(argv);
                cmd
            }
            (Tool::Redlock, _) => {
                let ttl = format!("{ttl_ms}ms");
                let slots;
                let mut args = vec!["exec", key, "--ttl", &ttl];
                match mode {
                    Mode::Exclusive => {}
                    Mode::Slots(n) => {
                        slots = n.to_string();
                        args.extend(["--slots", &slots]);
                    }
                    Mode::Shared => args.push("--shared"),
                }
                args.push("--");
                args.extend_from_slice(argv);
                self.redlock(&args)
            }
        }
    }
}

/// `program` with none of the caller's redlock settings (`REDLOCK_*`, `REDIS_URL`) or etcd
/// settings (`ETCD_*` for etcd, `ETCDCTL_*` for etcdctl: `ETCDCTL_API=2` or a flag's variable
/// would change what they do).
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (name, _) in std::env::vars_os() {
        let n = name.to_string_lossy();
        if n.starts_with("REDLOCK_") || n == "REDIS_URL" || n.starts_with("ETCD") {
            cmd.env_remove(&name);
        }
    }
    cmd
}

/// The Redis key the polling lock uses for lock `key`.
pub fn polling_key(key: &str) -> String {
    format!("seed:{key}")
}

/// The Redis key redlock uses for lock `key` (default prefix).
pub fn redlock_key(key: &str) -> String {
    format!("redlock:{{{key}}}")
}

/// The `redlock` Cargo built for this bench; it must be a release build.
pub fn release_binary() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_redlock"));
    let profile_dir = bin
        .parent()
        .and_then(Path::file_name)
        .and_then(OsStr::to_str)
        .unwrap_or("");
    assert!(
        profile_dir == "release" && !cfg!(debug_assertions),
        "{} is not a release build: run the benchmark with `cargo bench --bench contention`",
        bin.display()
    );
    assert!(
        bin.is_file(),
        "{} does not exist: run the benchmark with `cargo bench --bench contention`, which builds it",
        bin.display()
    );
    bin
}

/// Panics, naming the Debian package, unless every program the bench runs is on PATH.
pub fn require_tools() {
    for (tool, package) in [
        ("redis-server", "redis-server"),
        ("redis-cli", "redis-tools"),
        ("flock", "util-linux"),
        ("sem", "parallel"),
        ("sh", "dash"),
        ("mkfifo", "coreutils"),
        ("sleep", "coreutils"),
    ] {
        assert!(
            on_path(tool),
            "the benchmark needs `{tool}` on PATH (Debian: apt-get install {package})"
        );
    }
}

/// Whether `program` is a file in a directory of PATH.
fn on_path(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(program).is_file())
}

/// Whether both `etcd` and `etcdctl` are on PATH (Debian: `etcd-server`, `etcd-client`); without
/// them the etcdctl column says [`ETCD_MISSING`] and the rest runs.
pub fn etcd_installed() -> bool {
    on_path("etcd") && on_path("etcdctl")
}
