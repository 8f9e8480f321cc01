//! `cargo bench --bench contention`: redlock side by side with `flock` and the seed article's
//! polling loop, on the workloads of issue 4, in one run, printed as one markdown table.
//!
//! Needs `redis-server`, `redis-cli`, `flock` and `sh` on PATH; uses loopback only; takes about two
//! to three minutes. Under `cargo test --benches` (no `--bench` argument) it does nothing.
//!
//! # Set-up
//! - `redlock` is the binary Cargo builds for this bench (`CARGO_BIN_EXE_redlock`); under
//!   `cargo bench` that is the `bench` profile, which inherits `release`. The bench refuses to run
//!   against anything built outside a `release` directory.
//! - One `redis-server` of its own: a free loopback port, no persistence, a temp dir, and
//!   `slowlog-log-slower-than 0` (see "Redis commands" below). It is killed at the end, on a panic
//!   and on Ctrl-C, and dies with the bench (PDEATHSIG) if the bench is killed. Workload 7 starts
//!   five more the same way (same guards) and kills them when it ends.
//! - Every lock command runs in its own process group, so that a timeout or a failure kills it with
//!   whatever it started. Each run of a workload is bounded by a 120 s watchdog that kills
//!   everything and fails loudly (the slowest, the seed style's crowd, takes about 50 s on two
//!   CPUs); every other wait has its own bound.
//!
//! # The tools, all running the same critical section `sh -c CS`
//! - flock: `flock DIR/KEY.lock sh -c CS`, the kernel lock (one machine only: the physical limit).
//! - seed style: `benches/seed-lock.sh`: `redis-cli SET KEY TOKEN NX PX TTL`, `sleep 0.2` between
//!   attempts, release with a Lua compare-and-delete through `redis-cli EVAL`.
//! - redlock: `redlock exec KEY -- sh -c CS` (and `acquire` / `release` where the workload says so).
//!
//! The critical section is the non-atomic counter increment `read n < C; echo $((n + 1)) > C`
//! (plus `sleep 0.02` in workload 2), bracketed by an entry and a leave line written to a FIFO.
//! Everything but `sleep` is a dash builtin, so the bracket costs no fork. After every run the
//! counter must equal the number of critical sections, and entry and leave lines must strictly
//! alternate; otherwise the bench panics (the lock let two critical sections overlap).
//!
//! # Repetitions
//! On a small shared VM one run's wall time swings by tens of percent from run to run, more than
//! the margins of the wall targets. So workloads 1 and 2 run flock and redlock `REPS` (5) times
//! each, alternately (flock, redlock, flock, redlock, …), so that the two tools meet the same spells
//! of load; the seed style, slow and far from its targets, runs once, after them. The table gives
//! the median run's wall (and that run's hand-overs/s) and the wall targets compare the medians;
//! waits, commands per critical section and client-side hand-overs pool all runs of a tool, and
//! fairness is the worst run's. stderr has every run's figures, and per workload the walls in run
//! order and each pair's redlock ÷ flock ratio, so the spread is visible. Workloads 3 to 5 run
//! once per tool; workload 6's uncontended `true` and acquire + release are medians of 200 runs
//! per command, the tools interleaved in each round (stderr adds the quartiles of `true`).
//!
//! # Workload 7: the cost of the quorum (issue 5)
//! Several `--url`s make redlock a Redlock quorum over independent masters, contacted in
//! parallel; this measures what that costs a script. Five more `redis-server`s are started, then
//! 200 cycles of `redlock acquire k` + `redlock release k TOKEN` (two processes, uncontended, each
//! cycle timed from the first start to the second exit) run once with the bench's server as the
//! only `--url` and once with the five extra servers as five `--url`s, interleaved in each cycle
//! and the 1- and 5-node order alternating, so that machine noise and warm caches hit both alike.
//! All servers have the same settings, so the only difference is the number of nodes. The table
//! gives median / p90 of each; the target is 5-node median ≤ 1.5 × 1-node median. The first
//! cycle checks, on every server, that the lock key held the printed token and was gone after the
//! release. The flock cell is `flock -n f true` interleaved with them: the same take-and-drop in
//! one process (flock has no second command and no network), the floor of a process start, for
//! scale; the seed style has no multi-server mode ("–"). stderr adds the quartiles and p90s.
//!
//! # Measures
//! - Loops are threads of this process: each round, a thread notes the time, starts the lock
//!   command and waits for it. The same driver serves every tool, so the overhead is the same.
//! - wait: from starting the lock command to its critical section's entry line, which a thread of
//!   this process timestamps on arrival (monotonic clock). It includes the tool's start-up, which
//!   is part of what a shell script pays for a lock.
//! - wall: from releasing all loops at once to the exit of the last round; hand-overs/s is the
//!   number of critical sections divided by wall (of the median run, where there are several).
//! - fairness: the largest per-loop mean wait divided by the mean wait over all rounds of the run
//!   (the worst run's, where there are several: loop `i` of one run is not loop `i` of another).
//! - hand-over, client side: from a critical section's leave line to the next one's entry line.
//! - hand-over, server side (the target): in a separate repetition of workload 1 under
//!   `redis-cli MONITOR`, from a release to the next holder's acquisition, by the server's clock.
//!   A release is a DEL of the lock key while it holds a token, or a SET of a `~reservation` value
//!   over a token; an acquisition is the next SET of a token value that succeeds (a SET NX on an
//!   existing key fails; a reservation cleared before its claim does not count as a release).
//! - Redis commands: `INFO commandstats` before and after each run (calls + rejected calls), minus
//!   the bench's own commands, plus the clients still blocked (a BLPOP sent in the window but not
//!   counted until it returns), is the total; it counts the commands that Lua scripts run too. The
//!   server logs every command to the slow log with its client, and the Lua client shows as `?:0`:
//!   those entries are the commands run inside scripts, and `sent` = total - in scripts is what
//!   clients sent (round trips). Targets on command counts are checked against `sent`; the total
//!   is printed beside it.
//! - Peak RSS: the largest `VmHWM` of the lock process itself (`redlock exec`, `flock`, the seed's
//!   `sh`), sampled from `/proc` every 2 ms while its command sleeps 0.3 s, over 5 runs. Not
//!   `ru_maxrss`, which for a child spawned with vfork includes the parent's (the bench's) peak.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Barrier, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The seed article's lock as a shell helper; written to the temp dir at run time.
const SEED_LOCK_SH: &str = include_str!("seed-lock.sh");
/// The seed article's release: compare-and-delete.
const RELEASE_LUA: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// Critical sections. `$BF` is the FIFO, `$BC` the counter file, `$BT $BL $BR` tag, loop, round.
const CS_EMPTY: &str = r#"echo "E $BT $BL $BR" > "$BF"; read n < "$BC"; echo $((n + 1)) > "$BC"; echo "L $BT $BL $BR" > "$BF""#;
/// The sleep sits between the read and the write, so an overlap would surely lose an update.
const CS_20MS: &str = r#"echo "E $BT $BL $BR" > "$BF"; read n < "$BC"; sleep 0.02; echo $((n + 1)) > "$BC"; echo "L $BT $BL $BR" > "$BF""#;
/// A holder that says it holds the lock, then sleeps until killed.
const CS_HOLD: &str = r#"echo "H $BT 0 0" > "$BF"; exec sleep 60"#;

/// TTL of the lock in the loops (redlock's default, and the seed's PX).
const LOOP_TTL_MS: u64 = 30_000;
/// The bound on one run of a workload.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// The bound on any single wait outside a run (server start, an event, the MONITOR marker).
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// Workload 4: how long the lock is held while the waiters queue.
const IDLE_HOLD: Duration = Duration::from_secs(10);
const IDLE_WAITERS: usize = 50;
/// Workload 5: the holder's TTL, and how many waiters queue behind it.
const DEAD_TTL_MS: u64 = 5_000;
const DEAD_WAITERS: usize = 3;
/// Workloads 1 and 2: runs of flock and of redlock each (the seed style runs once).
const REPS: usize = 5;
/// Workload 6: runs of each command.
const UNCONTENDED_RUNS: usize = 200;
/// Workload 7: the extra servers of the quorum, and the acquire + release cycles per configuration.
const QUORUM_NODES: usize = 5;
const QUORUM_CYCLES: usize = 200;
const RSS_RUNS: usize = 5;

const TOOLS: [Tool; 3] = [Tool::Flock, Tool::Seed, Tool::Redlock];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    Flock,
    Seed,
    Redlock,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Flock => "flock",
            Tool::Seed => "seed",
            Tool::Redlock => "redlock",
        }
    }

    fn index(self) -> usize {
        match self {
            Tool::Flock => 0,
            Tool::Seed => 1,
            Tool::Redlock => 2,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Processes: every child is registered, so that a timeout, a failure, a panic or Ctrl-C can kill
// all of them; nothing outlives the bench.

/// Process groups of the lock commands still running (each child leads its own group).
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// redis-server: killed last, by the panic hook and the signal handler.
static SERVICES: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// The temp dir, removed by the panic hook and the signal handler.
static TEMP: Mutex<Option<PathBuf>> = Mutex::new(None);
/// Set once the run is being torn down: no new round starts.
static ABORT: AtomicBool = AtomicBool::new(false);
/// The first failure of a run, reported by [`check_failed`].
static FIRST_ERROR: Mutex<Option<String>> = Mutex::new(None);
/// The run the watchdog watches: its deadline and name.
static WATCH: Mutex<Option<(Instant, String)>> = Mutex::new(None);
/// The run the watchdog stopped.
static TIMED_OUT: Mutex<Option<String>> = Mutex::new(None);

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn kill(pid: i32) {
    // SAFETY: kill(2) has no memory effects; a stale pid or group only yields ESRCH.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

fn kill_live() {
    for &group in locked(&LIVE).iter() {
        kill(-group);
    }
}

fn kill_everything() {
    kill_live();
    for &pid in locked(&SERVICES).iter() {
        kill(pid);
    }
}

fn remove_temp() {
    if let Some(dir) = locked(&TEMP).take() {
        let _ = fs::remove_dir_all(dir);
    }
}

/// Records the first failure of a run and kills every lock command, so the other loops end now.
fn fail(msg: String) -> String {
    ABORT.store(true, Ordering::SeqCst);
    locked(&FIRST_ERROR).get_or_insert_with(|| msg.clone());
    kill_live();
    msg
}

/// Panics with the reason the current run stopped, if it did.
fn check_failed() {
    if let Some(run) = locked(&TIMED_OUT).clone() {
        panic!(
            "{run}: did not finish within {}s; every process of it was killed",
            RUN_TIMEOUT.as_secs()
        );
    }
    if let Some(msg) = locked(&FIRST_ERROR).clone() {
        panic!("{msg}");
    }
}

/// Runs `f` under the watchdog: after [`RUN_TIMEOUT`] everything it started is killed.
fn watched<T>(run: &str, f: impl FnOnce() -> T) -> T {
    eprintln!("contention: {run} ...");
    *locked(&WATCH) = Some((Instant::now() + RUN_TIMEOUT, run.to_string()));
    let out = f();
    *locked(&WATCH) = None;
    check_failed();
    out
}

/// The panic hook, the Ctrl-C handler and the watchdog.
fn install_guards() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        ABORT.store(true, Ordering::SeqCst);
        kill_everything();
        remove_temp();
        default(info);
    }));
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .expect("cannot install the signal handler");
    thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            eprintln!("contention: signal {sig}: killing every process started and stopping");
            ABORT.store(true, Ordering::SeqCst);
            kill_everything();
            remove_temp();
            std::process::exit(128 + sig);
        }
    });
    thread::spawn(|| {
        loop {
            thread::sleep(Duration::from_millis(20));
            let expired = locked(&WATCH)
                .as_ref()
                .filter(|(deadline, _)| Instant::now() >= *deadline)
                .map(|(_, run)| run.clone());
            if let Some(run) = expired {
                ABORT.store(true, Ordering::SeqCst);
                locked(&TIMED_OUT).get_or_insert(run);
                kill_live();
            }
        }
    });
}

/// A running lock command (or helper), registered for killing until it is reaped.
struct Proc {
    child: Child,
    what: String,
}

fn start(cmd: &mut Command, what: &str) -> Result<Proc, String> {
    if ABORT.load(Ordering::SeqCst) {
        return Err(format!("{what}: not started, the run is being stopped"));
    }
    cmd.process_group(0);
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {what}: {e}"))?;
    locked(&LIVE).push(child.id() as i32);
    Ok(Proc {
        child,
        what: what.to_string(),
    })
}

impl Proc {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn forget(&self) {
        let pid = self.pid();
        locked(&LIVE).retain(|&p| p != pid);
    }

    fn wait(mut self) -> Result<(ExitStatus, Instant), String> {
        let status = self.child.wait();
        let at = Instant::now();
        self.forget();
        let status = status.map_err(|e| format!("cannot wait for {}: {e}", self.what))?;
        Ok((status, at))
    }

    fn wait_output(self) -> Result<(ExitStatus, String, Instant), String> {
        let pid = self.pid();
        let what = self.what.clone();
        let out = self.child.wait_with_output();
        let at = Instant::now();
        locked(&LIVE).retain(|&p| p != pid);
        let out = out.map_err(|e| format!("cannot wait for {what}: {e}"))?;
        Ok((
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            at,
        ))
    }

    /// Waits, sampling the process's peak RSS (`VmHWM`, KiB) every 2 ms while it runs.
    ///
    /// Not `ru_maxrss`: std spawns with vfork, so until its exec the child runs in the bench's
    /// memory, and the kernel counts the bench's high-water mark in the child's `ru_maxrss`.
    /// `VmHWM` belongs to the address space the process got at exec. The last sample misses only
    /// the moments before exit.
    fn wait_peak_rss(mut self) -> Result<(ExitStatus, u64), String> {
        let status_file = format!("/proc/{}/status", self.pid());
        let mut peak = 0;
        loop {
            let hwm = fs::read_to_string(&status_file).ok().and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            });
            peak = peak.max(hwm.unwrap_or(0));
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.forget();
                    return Ok((status, peak));
                }
                Ok(None) => thread::sleep(Duration::from_millis(2)),
                Err(e) => {
                    self.forget();
                    return Err(format!("cannot wait for {}: {e}", self.what));
                }
            }
        }
    }
}

/// The last lines of a stderr log, for failure messages.
fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let last = &lines[lines.len().saturating_sub(12)..];
    if last.is_empty() {
        format!("(nothing on stderr; log {})", path.display())
    } else {
        format!("stderr ({}):\n  {}", path.display(), last.join("\n  "))
    }
}

// ---------------------------------------------------------------------------------------------
// The commands under test.

/// What every lock command needs; cloned into the loop threads.
#[derive(Clone)]
struct Env {
    bin: PathBuf,
    url: String,
    port: String,
    seed: PathBuf,
    dir: PathBuf,
    fifo: PathBuf,
    counter: PathBuf,
}

impl Env {
    /// A command with the bench's variables and none of the caller's redlock settings.
    fn base(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        for (name, _) in std::env::vars_os() {
            let n = name.to_string_lossy();
            if n.starts_with("REDLOCK_") || n == "REDIS_URL" {
                cmd.env_remove(&name);
            }
        }
        cmd.env("BF", &self.fifo)
            .env("BC", &self.counter)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        cmd
    }

    fn redlock(&self, args: &[&str]) -> Command {
        self.redlock_on(std::slice::from_ref(&self.url), args)
    }

    /// `redlock` with one `--url` per server: several make it a Redlock quorum (workload 7).
    fn redlock_on(&self, urls: &[String], args: &[&str]) -> Command {
        let mut cmd = self.base(&self.bin);
        for url in urls {
            cmd.arg("--url").arg(url);
        }
        cmd.args(args);
        cmd
    }

    fn redis_cli(&self, args: &[&str]) -> Command {
        let mut cmd = self.base("redis-cli");
        cmd.args(["-p", &self.port]).args(args);
        cmd
    }

    /// `argv` run under `tool`'s lock on `key`.
    fn under_lock(&self, tool: Tool, key: &str, ttl_ms: u64, argv: &[&str]) -> Command {
        match tool {
            Tool::Flock => {
                let mut cmd = self.base("flock");
                cmd.arg(self.dir.join(format!("{key}.lock"))).args(argv);
                cmd
            }
            Tool::Seed => {
                let mut cmd = self.base("sh");
                cmd.arg(&self.seed)
                    .arg(&self.port)
                    .arg(seed_key(key))
                    .arg(ttl_ms.to_string())
                    .args(argv);
                cmd
            }
            Tool::Redlock => {
                let ttl = format!("{ttl_ms}ms");
                let mut args = vec!["exec", key, "--ttl", &ttl, "--"];
                args.extend_from_slice(argv);
                self.redlock(&args)
            }
        }
    }
}

fn seed_key(key: &str) -> String {
    format!("seed:{key}")
}

/// The Redis key redlock uses for lock `key` (default prefix).
fn redlock_key(key: &str) -> String {
    format!("redlock:{{{key}}}")
}

/// A stderr log shared by the commands of one run.
#[derive(Clone)]
struct Log {
    path: PathBuf,
    file: Arc<File>,
}

impl Log {
    fn new(dir: &Path, name: &str) -> Log {
        let path = dir.join(format!("{name}.stderr"));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        Log {
            path,
            file: Arc::new(file),
        }
    }

    fn stdio(&self) -> Stdio {
        Stdio::from(self.file.try_clone().expect("cannot duplicate a log fd"))
    }

    fn failed(&self, what: &str, status: ExitStatus) -> String {
        format!("{what}: exited with {status}; {}", tail(&self.path))
    }
}

// ---------------------------------------------------------------------------------------------
// Events: the critical sections' entry/leave lines, timestamped on arrival.

#[derive(Clone, Debug)]
struct Event {
    at: Instant,
    kind: char,
    tag: String,
    l: usize,
    r: usize,
}

struct Events {
    rx: Receiver<Event>,
    pending: Vec<Event>,
    writer: File,
}

impl Events {
    /// Opens the FIFO read-write (so neither end ever sees EOF) and starts the reader thread.
    fn open(fifo: &Path) -> Events {
        let status = Command::new("mkfifo")
            .arg(fifo)
            .status()
            .expect("cannot run mkfifo");
        assert!(status.success(), "mkfifo {} failed", fifo.display());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(fifo)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", fifo.display()));
        let writer = file.try_clone().expect("cannot duplicate the FIFO fd");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(file).lines() {
                let at = Instant::now();
                let Ok(line) = line else { return };
                let mut f = line.split_whitespace();
                let (Some(kind), Some(tag), Some(l), Some(r)) =
                    (f.next(), f.next(), f.next(), f.next())
                else {
                    eprintln!("contention: ignoring a malformed FIFO line {line:?}");
                    continue;
                };
                let (Some(kind), Ok(l), Ok(r)) = (kind.chars().next(), l.parse(), r.parse()) else {
                    eprintln!("contention: ignoring a malformed FIFO line {line:?}");
                    continue;
                };
                let event = Event {
                    at,
                    kind,
                    tag: tag.to_string(),
                    l,
                    r,
                };
                if tx.send(event).is_err() {
                    return;
                }
            }
        });
        Events {
            rx,
            pending: Vec::new(),
            writer,
        }
    }

    fn recv(&mut self, until: Instant, waiting_for: &str) -> Event {
        match self
            .rx
            .recv_timeout(until.saturating_duration_since(Instant::now()))
        {
            Ok(e) => e,
            Err(RecvTimeoutError::Timeout) => {
                panic!(
                    "{waiting_for}: nothing came within {}s",
                    STEP_TIMEOUT.as_secs()
                )
            }
            Err(RecvTimeoutError::Disconnected) => panic!("the FIFO reader stopped"),
        }
    }

    /// Waits for one event of `kind` and `tag`; keeps every other one for [`Events::collect`].
    fn wait_for(&mut self, tag: &str, kind: char) -> Event {
        if let Some(i) = self
            .pending
            .iter()
            .position(|e| e.tag == tag && e.kind == kind)
        {
            return self.pending[i].clone();
        }
        let until = Instant::now() + STEP_TIMEOUT;
        loop {
            let e = self.recv(until, &format!("{tag}: waiting for a '{kind}' line"));
            self.pending.push(e.clone());
            if e.tag == tag && e.kind == kind {
                return e;
            }
        }
    }

    /// Every event of `tag`, in arrival order. A marker line written after all of them (every
    /// writer has exited) makes sure none is still in the pipe.
    fn collect(&mut self, tag: &str) -> Vec<Event> {
        writeln!(self.writer, "X {tag} 0 0").expect("cannot write to the FIFO");
        let until = Instant::now() + STEP_TIMEOUT;
        loop {
            let e = self.recv(until, &format!("{tag}: waiting for the end marker"));
            if e.tag == tag && e.kind == 'X' {
                break;
            }
            self.pending.push(e);
        }
        let (mine, others): (Vec<Event>, Vec<Event>) =
            self.pending.drain(..).partition(|e| e.tag == tag);
        self.pending = others;
        mine
    }
}

// ---------------------------------------------------------------------------------------------
// Redis: the server, and the bench's own connection for counting commands.

struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("cannot find a free loopback port")
                .port();
            let log = dir.join(format!("redis-{port}.log"));
            let mut cmd = Command::new("redis-server");
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(dir)
                .arg("--logfile")
                .arg(&log)
                .args(["--slowlog-log-slower-than", "0"])
                .args(["--slowlog-max-len", "1000000"])
                .stdin(Stdio::null())
                .stdout(Stdio::null());
            // SAFETY: the closure runs in the child between fork and exec and calls only prctl(2),
            // which is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let mut child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
            locked(&SERVICES).push(child.id() as i32);
            let until = Instant::now() + STEP_TIMEOUT;
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    last_error = format!(
                        "redis-server on port {port} exited with {status}: {}",
                        tail(&log)
                    );
                    break;
                }
                let pong = redis::Client::open(format!("redis://127.0.0.1:{port}"))
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                    .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
                if pong.is_ok() {
                    return Server { child, port };
                }
                if Instant::now() >= until {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "redis-server on port {port} did not answer PING within {}s; {}",
                        STEP_TIMEOUT.as_secs(),
                        tail(&log)
                    );
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("cannot start redis-server: {last_error}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let pid = self.child.id() as i32;
        locked(&SERVICES).retain(|&p| p != pid);
    }
}

/// Redis commands of one run, from commandstats and the slow log.
#[derive(Clone, Debug, Default)]
struct Cmds {
    /// Everything the server ran (calls + rejected calls), the bench's own commands excluded.
    total: u64,
    /// Of which run inside Lua scripts (slow log entries of the Lua client).
    in_scripts: u64,
    /// Per command name, for the log.
    by_name: Vec<(String, u64)>,
    /// How long the counting window was.
    window: Duration,
}

impl Cmds {
    fn sent(&self) -> u64 {
        self.total.saturating_sub(self.in_scripts)
    }
}

/// A point to count commands from.
struct Mark {
    at: Instant,
    stats: BTreeMap<String, u64>,
    /// Clients blocked in a command (BLPOP): sent, but counted by commandstats only when done.
    blocked: u64,
    own: BTreeMap<String, u64>,
}

/// The bench's own connection; it counts what it sends, so that it can subtract that.
struct Admin {
    con: redis::Connection,
    own: BTreeMap<String, u64>,
}

impl Admin {
    fn connect(port: u16) -> Admin {
        let con = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .and_then(|c| c.get_connection_with_timeout(STEP_TIMEOUT))
            .unwrap_or_else(|e| panic!("cannot connect to the bench's redis-server: {e}"));
        con.set_read_timeout(Some(STEP_TIMEOUT))
            .expect("cannot set a read timeout");
        let mut admin = Admin {
            con,
            own: BTreeMap::new(),
        };
        admin.query::<()>(
            "client|setname",
            redis::cmd("CLIENT").arg("SETNAME").arg("bench"),
        );
        admin
    }

    /// One command; `stat` is its name in `INFO commandstats`.
    fn query<T: redis::FromRedisValue>(&mut self, stat: &str, cmd: &redis::Cmd) -> T {
        let reply = cmd
            .query(&mut self.con)
            .unwrap_or_else(|e| panic!("the bench's own Redis command {stat} failed: {e}"));
        *self.own.entry(stat.to_string()).or_default() += 1;
        reply
    }

    fn mark(&mut self) -> Mark {
        // INFO counts itself only after it has answered: it is in the next snapshot, like every
        // command sent after this copy of `own`.
        let own = self.own.clone();
        let text: String = self.query(
            "info",
            redis::cmd("INFO").arg("commandstats").arg("clients"),
        );
        let blocked = text
            .lines()
            .find_map(|l| l.strip_prefix("blocked_clients:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("INFO clients has no blocked_clients: {text}"));
        let mut stats = BTreeMap::new();
        for line in text.lines() {
            let Some((name, fields)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let mut n = 0;
            for field in fields.split(',') {
                if let Some(v) = field
                    .strip_prefix("calls=")
                    .or_else(|| field.strip_prefix("rejected_calls="))
                {
                    n += v.parse::<u64>().unwrap_or(0);
                }
            }
            stats.insert(name.to_string(), n);
        }
        Mark {
            at: Instant::now(),
            stats,
            blocked,
            own,
        }
    }

    /// Starts counting: a commandstats snapshot, and an empty slow log.
    fn begin(&mut self) -> Mark {
        let mark = self.mark();
        self.query::<()>("slowlog|reset", redis::cmd("SLOWLOG").arg("RESET"));
        mark
    }

    /// The commands since `from`.
    fn end(&mut self, from: &Mark) -> Cmds {
        let log: redis::Value = self.query("slowlog|get", redis::cmd("SLOWLOG").arg("GET").arg(-1));
        let redis::Value::Array(entries) = log else {
            panic!("SLOWLOG GET answered {log:?}");
        };
        assert!(
            entries.len() < 1_000_000,
            "the slow log overflowed (1000000 entries): the command counts would be wrong"
        );
        let text = |v: &redis::Value| match v {
            redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            redis::Value::SimpleString(s) => s.clone(),
            _ => String::new(),
        };
        let (mut in_scripts, mut from_clients) = (0, 0);
        for entry in &entries {
            let redis::Value::Array(fields) = entry else {
                continue;
            };
            // id, time, duration, args, client address, client name
            if fields.len() < 6 || text(&fields[5]) == "bench" {
                continue;
            }
            if text(&fields[4]) == "?:0" {
                in_scripts += 1;
            } else {
                from_clients += 1;
            }
        }
        let to = self.mark();
        let mut by_name = Vec::new();
        let mut total = 0;
        for (name, &n) in &to.stats {
            let before = from.stats.get(name).copied().unwrap_or(0);
            let own =
                to.own.get(name).copied().unwrap_or(0) - from.own.get(name).copied().unwrap_or(0);
            let d = n.saturating_sub(before).saturating_sub(own);
            if d > 0 {
                by_name.push((name.clone(), d));
                total += d;
            }
        }
        // A command still blocked at the end was sent in the window; one blocked at the start was
        // sent before it (and is counted, when it completes, in the window: a wash).
        let blocked = to.blocked.saturating_sub(from.blocked);
        if blocked > 0 {
            by_name.push(("(blocked at the end)".to_string(), blocked));
            total += blocked;
        }
        by_name.sort_by_key(|b| std::cmp::Reverse(b.1));
        if from_clients + in_scripts + blocked != total {
            // Only commandstats counts rejected commands and a BLPOP that timed out, and it also
            // sees what ran between SLOWLOG GET and INFO; `sent` (total - in scripts) includes
            // them all.
            eprintln!(
                "contention: note: commandstats counted {total} commands, the slow log \
                 {from_clients} from clients + {in_scripts} in scripts"
            );
        }
        Cmds {
            total,
            in_scripts,
            by_name,
            window: to.at - from.at,
        }
    }

    fn pttl(&mut self, key: &str) -> i64 {
        self.query("pttl", redis::cmd("PTTL").arg(key))
    }
}

// ---------------------------------------------------------------------------------------------
// Loops.

#[derive(Clone, Debug)]
struct Round {
    l: usize,
    r: usize,
    asked: Instant,
    done: Instant,
}

struct Spec {
    tag: String,
    tool: Tool,
    key: String,
    loops: usize,
    rounds: usize,
    cs: &'static str,
}

struct Running {
    handles: Vec<JoinHandle<Result<Vec<Round>, String>>>,
    start: Instant,
}

/// One finished run of loops.
struct LoopRun {
    start: Instant,
    rounds: Vec<Round>,
    events: Vec<Event>,
    cmds: Option<Cmds>,
}

impl LoopRun {
    fn end(&self) -> Instant {
        self.rounds
            .iter()
            .map(|r| r.done)
            .max()
            .unwrap_or(self.start)
    }

    fn wall(&self) -> Duration {
        self.end() - self.start
    }

    fn entries(&self) -> Vec<&Event> {
        self.events.iter().filter(|e| e.kind == 'E').collect()
    }

    /// Each round's wait: from starting the lock command to entering the critical section.
    fn waits(&self) -> Vec<(usize, Duration)> {
        let entered: BTreeMap<(usize, usize), Instant> =
            self.entries().iter().map(|e| ((e.l, e.r), e.at)).collect();
        self.rounds
            .iter()
            .map(|round| {
                let at = entered
                    .get(&(round.l, round.r))
                    .unwrap_or_else(|| panic!("loop {} round {} never entered", round.l, round.r));
                (round.l, at.saturating_duration_since(round.asked))
            })
            .collect()
    }

    /// From each leave line to the next entry line.
    fn client_handovers(&self) -> Vec<Duration> {
        let mut out = Vec::new();
        let mut left = None;
        for e in &self.events {
            match e.kind {
                'L' => left = Some(e.at),
                'E' => {
                    if let Some(l) = left.take() {
                        out.push(e.at - l);
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// The largest per-loop mean wait over the mean wait.
    fn fairness(&self) -> f64 {
        let waits = self.waits();
        let mean = |ws: &[Duration]| ws.iter().sum::<Duration>().as_secs_f64() / ws.len() as f64;
        let all: Vec<Duration> = waits.iter().map(|w| w.1).collect();
        let mut per_loop: BTreeMap<usize, Vec<Duration>> = BTreeMap::new();
        for (l, w) in waits {
            per_loop.entry(l).or_default().push(w);
        }
        let worst = per_loop.values().map(|ws| mean(ws)).fold(0.0_f64, f64::max);
        worst / mean(&all)
    }
}

struct Bench {
    env: Env,
    admin: Admin,
    events: Events,
    logs: PathBuf,
    _server: Server,
}

impl Bench {
    fn new(bin: PathBuf, dir: &Path) -> Bench {
        let seed = dir.join("seed-lock.sh");
        fs::write(&seed, SEED_LOCK_SH).expect("cannot write seed-lock.sh");
        let logs = dir.join("logs");
        fs::create_dir(&logs).expect("cannot create the log dir");
        let fifo = dir.join("events.fifo");
        let events = Events::open(&fifo);
        let server = Server::start(dir);
        let admin = Admin::connect(server.port);
        Bench {
            env: Env {
                bin,
                url: format!("redis://127.0.0.1:{}", server.port),
                port: server.port.to_string(),
                seed,
                dir: dir.to_path_buf(),
                fifo,
                counter: dir.join("counter"),
            },
            admin,
            events,
            logs,
            _server: server,
        }
    }

    fn log(&self, name: &str) -> Log {
        Log::new(&self.logs, name)
    }

    fn reset_counter(&self) {
        fs::write(&self.env.counter, "0\n").expect("cannot reset the counter");
    }

    fn counter(&self) -> u64 {
        let text = fs::read_to_string(&self.env.counter).expect("cannot read the counter");
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("the counter file holds {text:?}, not a number"))
    }

    /// Starts `spec.loops` threads, released at once, each running `spec.rounds` lock commands.
    fn start_loops(&self, spec: &Spec) -> Running {
        let barrier = Arc::new(Barrier::new(spec.loops + 1));
        let log = self.log(&format!("{}.{}", spec.tag, spec.tool.name()));
        let handles = (0..spec.loops)
            .map(|l| {
                let (env, log, barrier) = (self.env.clone(), log.clone(), barrier.clone());
                let (tag, key, tool, rounds, cs) = (
                    spec.tag.clone(),
                    spec.key.clone(),
                    spec.tool,
                    spec.rounds,
                    spec.cs,
                );
                thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn(move || {
                        barrier.wait();
                        let mut out = Vec::with_capacity(rounds);
                        for r in 0..rounds {
                            let what = format!("{tag} {} loop {l} round {r}", tool.name());
                            let mut cmd =
                                env.under_lock(tool, &key, LOOP_TTL_MS, &["sh", "-c", cs]);
                            cmd.env("BT", &tag)
                                .env("BL", l.to_string())
                                .env("BR", r.to_string())
                                .stderr(log.stdio());
                            let asked = Instant::now();
                            let proc = start(&mut cmd, &what).map_err(fail)?;
                            let (status, done) = proc.wait().map_err(fail)?;
                            if !status.success() {
                                return Err(fail(log.failed(&what, status)));
                            }
                            out.push(Round { l, r, asked, done });
                        }
                        Ok(out)
                    })
                    .expect("cannot start a loop thread")
            })
            .collect();
        barrier.wait();
        Running {
            handles,
            start: Instant::now(),
        }
    }

    fn finish(&self, running: Running) -> (Instant, Vec<Round>) {
        let mut rounds = Vec::new();
        for h in running.handles {
            match h.join() {
                Ok(Ok(r)) => rounds.extend(r),
                Ok(Err(e)) => {
                    fail(e);
                }
                Err(_) => {
                    fail("a loop thread panicked".to_string());
                }
            }
        }
        check_failed();
        (running.start, rounds)
    }

    /// Runs `spec` and checks it: exact counter, strictly alternating entries and leaves.
    fn run_loops(&mut self, spec: &Spec) -> LoopRun {
        self.reset_counter();
        let mark = (spec.tool != Tool::Flock).then(|| self.admin.begin());
        let running = self.start_loops(spec);
        let (start, rounds) = self.finish(running);
        let cmds = mark.map(|m| self.admin.end(&m));
        let events = self.events.collect(&spec.tag);
        let run = LoopRun {
            start,
            rounds,
            events,
            cmds,
        };
        self.verify(&spec.tag, spec.tool, &run.events, spec.loops * spec.rounds);
        run
    }

    /// The lock worked: every critical section ran alone and the counter is exact.
    fn verify(&self, tag: &str, tool: Tool, events: &[Event], expected: usize) {
        let label = format!("{tag} {}", tool.name());
        let mut inside: Option<(usize, usize)> = None;
        let mut entries = 0;
        for e in events {
            match e.kind {
                'E' => {
                    if let Some((l, r)) = inside {
                        panic!(
                            "{label}: MUTUAL EXCLUSION VIOLATED: loop {} round {} entered the \
                             critical section while loop {l} round {r} was inside",
                            e.l, e.r
                        );
                    }
                    inside = Some((e.l, e.r));
                    entries += 1;
                }
                'L' => {
                    if inside != Some((e.l, e.r)) {
                        panic!(
                            "{label}: loop {} round {} left a critical section it was not in \
                             (inside: {inside:?})",
                            e.l, e.r
                        );
                    }
                    inside = None;
                }
                _ => {}
            }
        }
        assert!(
            inside.is_none(),
            "{label}: a critical section never ended: {inside:?}"
        );
        assert_eq!(
            entries, expected,
            "{label}: {entries} critical sections ran, {expected} expected"
        );
        let counter = self.counter();
        assert_eq!(
            counter, expected as u64,
            "{label}: COUNTER IS WRONG: {counter} after {expected} increments under the lock (a \
             lost update: two critical sections overlapped)"
        );
    }

    /// One command that must succeed; returns its stdout and how long it took.
    fn run_one(&self, mut cmd: Command, what: &str, log: &Log) -> (String, Duration) {
        cmd.stdout(Stdio::piped()).stderr(log.stdio());
        let t0 = Instant::now();
        let proc = start(&mut cmd, what).unwrap_or_else(|e| panic!("{e}"));
        let (status, out, done) = proc.wait_output().unwrap_or_else(|e| panic!("{e}"));
        check_failed();
        assert!(status.success(), "{}", log.failed(what, status));
        (out, done - t0)
    }

    // --- hold and release a lock from the bench, with each tool's own commands -------------------

    fn hold(&mut self, tool: Tool, key: &str, ttl_ms: u64, log: &Log) -> Held {
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
            Tool::Seed => {
                let token = uuid::Uuid::new_v4().simple().to_string();
                let cmd = self.env.redis_cli(&[
                    "SET",
                    &seed_key(key),
                    &token,
                    "NX",
                    "PX",
                    &ttl_ms.to_string(),
                ]);
                let (out, _) = self.run_one(cmd, "redis-cli SET NX PX (holder)", log);
                assert_eq!(out.trim(), "OK", "the seed holder did not get {key}");
                Held::Seed(token)
            }
            Tool::Redlock => {
                let ttl = format!("{ttl_ms}ms");
                let cmd = self.env.redlock(&["acquire", key, "--ttl", &ttl]);
                let (out, _) = self.run_one(cmd, "redlock acquire (holder)", log);
                Held::Redlock(out.trim().to_string())
            }
        }
    }

    /// Releases; returns when the lock was surely free (the release command had returned).
    fn release(&mut self, held: Held, key: &str, log: &Log) -> Instant {
        match held {
            Held::Flock(file) => {
                // SAFETY: as in `hold`.
                let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
                let at = Instant::now();
                assert_eq!(r, 0, "flock -u: {}", io::Error::last_os_error());
                at
            }
            Held::Seed(token) => {
                let cmd = self
                    .env
                    .redis_cli(&["EVAL", RELEASE_LUA, "1", &seed_key(key), &token]);
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

enum Held {
    Flock(File),
    Seed(String),
    Redlock(String),
}

// ---------------------------------------------------------------------------------------------
// Statistics and formatting.

fn percentile(ds: &[Duration], p: f64) -> Duration {
    if ds.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = ds.to_vec();
    sorted.sort();
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn fmt_d(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1e3)
    } else if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

fn mark_ok(ok: bool) -> &'static str {
    if ok { "✓" } else { "✗" }
}

/// One row of the table; `workload` is empty on the rows after a section's first.
struct Row {
    workload: String,
    metric: String,
    cells: [String; 3],
    target: String,
}

#[derive(Default)]
struct Report {
    rows: Vec<Row>,
    targets: Vec<(String, bool)>,
}

impl Report {
    fn row(&mut self, workload: &str, metric: &str, cells: [String; 3], target: String) {
        let first = !self.rows.iter().any(|r| r.workload == workload);
        self.rows.push(Row {
            workload: if first {
                workload.to_string()
            } else {
                String::new()
            },
            metric: metric.to_string(),
            cells,
            target,
        });
    }

    /// Records a target and renders its cell.
    fn check(&mut self, name: &str, ok: bool, text: String) -> String {
        self.targets.push((name.to_string(), ok));
        format!("{text} {}", mark_ok(ok))
    }

    fn print(&self, header: &[String]) {
        for line in header {
            println!("{line}");
        }
        println!();
        println!("| workload | metric | flock | seed style | redlock | target (redlock) |");
        println!("|---|---|---:|---:|---:|---|");
        for r in &self.rows {
            let w = if r.workload.is_empty() {
                String::new()
            } else {
                format!("**{}**", r.workload)
            };
            println!(
                "| {w} | {} | {} | {} | {} | {} |",
                r.metric, r.cells[0], r.cells[1], r.cells[2], r.target
            );
        }
        let met = self.targets.iter().filter(|t| t.1).count();
        println!();
        println!("Targets met: {met} of {}.", self.targets.len());
        let missed: Vec<&str> = self
            .targets
            .iter()
            .filter(|t| !t.1)
            .map(|t| t.0.as_str())
            .collect();
        if !missed.is_empty() {
            println!("Missed: {}.", missed.join("; "));
        }
        println!();
        println!(
            "Workloads 1 and 2: flock and redlock ran {REPS} times each, alternately (flock, \
             redlock, flock, redlock, …) so that both met the same machine conditions; the seed \
             style ran once, after them. Wall is the median run's (hand-overs/s is that run's), \
             and the wall targets compare medians; every run's wall is on stderr. Waits, \
             commands per CS and client-side hand-overs pool all runs of a tool; fairness is the \
             worst run's. Every run was checked (exact counter, no overlap). Workloads 3 to 5: \
             one run per tool. Workload 6: medians of {UNCONTENDED_RUNS} runs per command, \
             interleaved. Workload 7: {QUORUM_CYCLES} cycles per configuration, interleaved (the \
             1- and {QUORUM_NODES}-node order alternating), against {QUORUM_NODES} more \
             redis-servers started for it; the seed style has no multi-server mode."
        );
        println!();
        println!(
            "wait: from starting the lock command to entering the critical section (the tool's \
             start-up included). Redis commands: `sent` are the commands clients sent (round \
             trips), `incl. scripts` adds those that Lua scripts ran (INFO commandstats counts \
             both); targets use `sent`. Server-side hand-over: release to the next holder's SET \
             by the server's clock, from `redis-cli MONITOR` in a separate run of workload 1."
        );
    }
}

/// What the runs of one tool in one contention workload come to.
struct Summary {
    /// How many runs.
    runs: usize,
    /// Each run's wall, in run order.
    walls: Vec<Duration>,
    /// The median of `walls` (the upper middle one for an even count: `percentile(_, 0.5)`).
    wall: Duration,
    /// Hand-overs per second of the median run: critical sections ÷ `wall`.
    rate: f64,
    /// Waits of all runs pooled.
    p50: Duration,
    p99: Duration,
    /// Commands per critical section, all runs pooled: (sent, including those run inside scripts).
    cmds: Option<(f64, f64)>,
    /// The worst run's fairness.
    fairness: f64,
    /// Client-side hand-overs of all runs pooled: the median.
    handover: Duration,
}

/// Logs one run's figures on stderr (the per-run breakdown).
fn log_run(label: &str, run: &LoopRun) {
    let waits: Vec<Duration> = run.waits().into_iter().map(|w| w.1).collect();
    let n = run.rounds.len();
    let wall = run.wall();
    let mut line = format!(
        "contention: {label}: {n} critical sections in {}, {:.0}/s, wait p50 {} p99 {}, \
         fairness {:.2}, hand-over p50 {}",
        fmt_d(wall),
        n as f64 / wall.as_secs_f64(),
        fmt_d(percentile(&waits, 0.5)),
        fmt_d(percentile(&waits, 0.99)),
        run.fairness(),
        fmt_d(percentile(&run.client_handovers(), 0.5))
    );
    if let Some(c) = &run.cmds {
        let _ = write!(line, "; {}", describe_cmds(c, n));
    }
    eprintln!("{line}");
}

/// The runs of one tool: the median wall (and the rate of that run), waits, commands and
/// client-side hand-overs pooled over all runs, the worst run's fairness.
fn summarize(runs: &[LoopRun]) -> Summary {
    assert!(!runs.is_empty(), "no run to summarize");
    let walls: Vec<Duration> = runs.iter().map(LoopRun::wall).collect();
    let wall = percentile(&walls, 0.5);
    let per_run = runs[0].rounds.len();
    let all = runs.iter().map(|r| r.rounds.len()).sum::<usize>() as f64;
    let waits: Vec<Duration> = runs
        .iter()
        .flat_map(|r| r.waits().into_iter().map(|w| w.1))
        .collect();
    let handovers: Vec<Duration> = runs.iter().flat_map(LoopRun::client_handovers).collect();
    let cmds = runs
        .iter()
        .map(|r| r.cmds.as_ref().map(|c| (c.sent(), c.total)))
        .collect::<Option<Vec<(u64, u64)>>>()
        .map(|cs| {
            let sent: u64 = cs.iter().map(|c| c.0).sum();
            let total: u64 = cs.iter().map(|c| c.1).sum();
            (sent as f64 / all, total as f64 / all)
        });
    Summary {
        runs: runs.len(),
        wall,
        rate: per_run as f64 / wall.as_secs_f64(),
        p50: percentile(&waits, 0.5),
        p99: percentile(&waits, 0.99),
        cmds,
        fairness: runs.iter().map(LoopRun::fairness).fold(0.0_f64, f64::max),
        handover: percentile(&handovers, 0.5),
        walls,
    }
}

fn describe_cmds(c: &Cmds, per: usize) -> String {
    let names: Vec<String> = c
        .by_name
        .iter()
        .take(10)
        .map(|(n, k)| format!("{n} {k}"))
        .collect();
    format!(
        "Redis: {} sent + {} in scripts = {:.1} / {:.1} per unit [{}]",
        c.sent(),
        c.in_scripts,
        c.sent() as f64 / per as f64,
        c.total as f64 / per as f64,
        names.join(", ")
    )
}

fn cmds_cell(c: Option<(f64, f64)>) -> String {
    match c {
        Some((sent, total)) => format!("{sent:.1} / {total:.1}"),
        None => "–".to_string(),
    }
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

// ---------------------------------------------------------------------------------------------
// MONITOR: server-side hand-over latency.

/// One `redis-cli MONITOR` line: the server's time in microseconds, and the arguments.
fn parse_monitor(line: &str) -> Option<(i64, Vec<String>)> {
    let (ts, rest) = line.split_once(' ')?;
    let (secs, micros) = ts.split_once('.')?;
    let t = secs.parse::<i64>().ok()? * 1_000_000 + micros.parse::<i64>().ok()?;
    let rest = &rest[rest.find(']')? + 1..];
    let mut chars = rest.chars();
    let mut args = Vec::new();
    loop {
        match chars.next() {
            None => break,
            Some(' ') => continue,
            Some('"') => {}
            Some(_) => return None,
        }
        let mut arg = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => arg.push('\n'),
                    'r' => arg.push('\r'),
                    't' => arg.push('\t'),
                    'a' => arg.push('\u{7}'),
                    'b' => arg.push('\u{8}'),
                    'x' => {
                        let hex: String = [chars.next()?, chars.next()?].iter().collect();
                        arg.push(char::from(u8::from_str_radix(&hex, 16).ok()?));
                    }
                    c => arg.push(c),
                },
                c => arg.push(c),
            }
        }
        args.push(arg);
    }
    Some((t, args))
}

/// Release-to-acquisition gaps on `key`, by the server's clock. The lock key's value is tracked:
/// a release is a DEL while it holds a token, or a SET of a `~reservation` over a token; an
/// acquisition is a SET of a token value that succeeds (SET NX on an existing key, or SET XX on a
/// missing one, fails and changes nothing). Each release pairs with the next acquisition.
fn server_handovers(monitor: &str, key: &str) -> Vec<Duration> {
    let mut value: Option<String> = None;
    let mut released: Option<i64> = None;
    let mut out = Vec::new();
    for (t, args) in monitor.lines().filter_map(parse_monitor) {
        if args.len() < 2 || args[1] != key {
            continue;
        }
        let holds_token = value.as_deref().is_some_and(|v| !v.starts_with('~'));
        match args[0].to_ascii_uppercase().as_str() {
            "DEL" | "UNLINK" | "GETDEL" => {
                if holds_token {
                    released = Some(t);
                }
                value = None;
            }
            "SET" if args.len() >= 3 => {
                let has = |opt: &str| args[3..].iter().any(|a| a.eq_ignore_ascii_case(opt));
                if (has("NX") && value.is_some()) || (has("XX") && value.is_none()) {
                    continue;
                }
                let v = args[2].clone();
                if v.starts_with('~') {
                    if holds_token {
                        released = Some(t);
                    }
                } else if let Some(r) = released.take() {
                    out.push(Duration::from_micros(u64::try_from(t - r).unwrap_or(0)));
                }
                value = Some(v);
            }
            _ => {}
        }
    }
    out
}

fn wait_file_contains(path: &Path, needle: &str, what: &str) {
    let until = Instant::now() + STEP_TIMEOUT;
    while !fs::read_to_string(path).is_ok_and(|t| t.contains(needle)) {
        assert!(
            Instant::now() < until,
            "{what}: {needle:?} did not show up in {} within {}s",
            path.display(),
            STEP_TIMEOUT.as_secs()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Panics unless redlock's key for lock `key` holds `token` (or is absent, for `None`) on every
/// server in `ports`: the quorum workload really used all of them.
fn check_holders(ports: &[u16], key: &str, token: Option<&str>, what: &str) {
    for &port in ports {
        let mut admin = Admin::connect(port);
        let value: Option<String> = admin.query("get", redis::cmd("GET").arg(redlock_key(key)));
        assert_eq!(
            value.as_deref(),
            token,
            "{what}: {} on 127.0.0.1:{port} holds {value:?}, expected {token:?}",
            redlock_key(key)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The workloads.

impl Bench {
    /// Workloads 1 to 3: loops × rounds on one lock. flock and redlock run `reps` times each,
    /// alternately (flock, redlock, flock, redlock, …), so that both see the same spells of a noisy
    /// machine; the seed style runs once, after them. Every run is checked (exact counter,
    /// alternating entries and leaves) and logged on stderr; the summaries are in `TOOLS` order.
    fn contention(
        &mut self,
        tag: &str,
        loops: usize,
        rounds: usize,
        cs: &'static str,
        reps: usize,
    ) -> Vec<Summary> {
        let mut order: Vec<(Tool, usize)> = (0..reps)
            .flat_map(|rep| [(Tool::Flock, rep), (Tool::Redlock, rep)])
            .collect();
        order.push((Tool::Seed, 0));
        let mut runs: [Vec<LoopRun>; 3] = Default::default();
        for (tool, rep) in order {
            let name = if reps > 1 && tool != Tool::Seed {
                format!("{tag}-{}-r{}", tool.name(), rep + 1)
            } else {
                format!("{tag}-{}", tool.name())
            };
            let spec = Spec {
                tag: name,
                tool,
                key: tag.to_string(),
                loops,
                rounds,
                cs,
            };
            let run = watched(&spec.tag, || self.run_loops(&spec));
            log_run(&spec.tag, &run);
            runs[tool.index()].push(run);
        }
        let out: Vec<Summary> = runs.iter().map(|r| summarize(r)).collect();
        if reps > 1 {
            let (f, r) = (&out[Tool::Flock.index()], &out[Tool::Redlock.index()]);
            let list =
                |ws: &[Duration]| ws.iter().map(|w| fmt_d(*w)).collect::<Vec<_>>().join(", ");
            let pairs: Vec<String> = f
                .walls
                .iter()
                .zip(&r.walls)
                .map(|(f, r)| format!("{:.2}", ratio(*r, *f)))
                .collect();
            eprintln!(
                "contention: {tag}: wall per run, in run order: flock [{}], redlock [{}]; \
                 redlock ÷ flock per pair [{}]; medians flock {}, redlock {}: {:.2}×",
                list(&f.walls),
                list(&r.walls),
                pairs.join(", "),
                fmt_d(f.wall),
                fmt_d(r.wall),
                ratio(r.wall, f.wall)
            );
        }
        out
    }

    /// Workload 1 again under `redis-cli MONITOR`: release-to-acquisition gaps.
    fn monitored(&mut self, tool: Tool) -> Vec<Duration> {
        let tag = format!("w1m-{}", tool.name());
        watched(&format!("{tag} (under MONITOR)"), || {
            let path = self.env.dir.join(format!("{tag}.monitor"));
            let out = File::create(&path).expect("cannot create the MONITOR log");
            let log = self.log(&tag);
            let mut cmd = self.env.redis_cli(&["MONITOR"]);
            cmd.stdout(Stdio::from(out)).stderr(log.stdio());
            let monitor = start(&mut cmd, "redis-cli MONITOR").unwrap_or_else(|e| panic!("{e}"));
            wait_file_contains(&path, "OK", "redis-cli MONITOR");
            let spec = Spec {
                tag: tag.clone(),
                tool,
                key: "w1m".to_string(),
                loops: 8,
                rounds: 25,
                cs: CS_EMPTY,
            };
            let run = self.run_loops(&spec);
            let marker = format!("bench-monitor-end-{tag}");
            let _: String = self.admin.query("echo", redis::cmd("ECHO").arg(&marker));
            wait_file_contains(&path, &marker, "redis-cli MONITOR");
            kill(-monitor.pid());
            let _ = monitor.wait();
            let key = match tool {
                Tool::Seed => seed_key("w1m"),
                _ => redlock_key("w1m"),
            };
            let text = fs::read_to_string(&path).expect("cannot read the MONITOR log");
            let gaps = server_handovers(&text, &key);
            let expected = run.rounds.len() - 1;
            assert!(
                gaps.len() * 2 >= expected,
                "{tag}: found {} hand-overs of {key} in the MONITOR log ({}), expected about \
                 {expected}: has the shape of release or acquire changed?",
                gaps.len(),
                path.display()
            );
            eprintln!(
                "contention: {tag}: {} server-side hand-overs, p50 {} p90 {}",
                gaps.len(),
                fmt_d(percentile(&gaps, 0.5)),
                fmt_d(percentile(&gaps, 0.9))
            );
            gaps
        })
    }

    /// Workload 4: `IDLE_WAITERS` waiters behind a lock held for `IDLE_HOLD`. Returns the commands
    /// sent while the lock was held, and the time from the release to the last waiter's exit.
    fn idle(&mut self, tool: Tool) -> (Option<Cmds>, Duration) {
        let tag = format!("w4-{}", tool.name());
        watched(&tag.clone(), || {
            self.reset_counter();
            let log = self.log(&format!("{tag}.holder"));
            let held = self.hold(tool, "w4", 60_000, &log);
            let mark = (tool != Tool::Flock).then(|| self.admin.begin());
            let held_at = Instant::now();
            let running = self.start_loops(&Spec {
                tag: tag.clone(),
                tool,
                key: "w4".to_string(),
                loops: IDLE_WAITERS,
                rounds: 1,
                cs: CS_EMPTY,
            });
            while held_at.elapsed() < IDLE_HOLD && !ABORT.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(20));
            }
            check_failed();
            let cmds = mark.map(|m| self.admin.end(&m));
            let releasing = Instant::now();
            let released = self.release(held, "w4", &log);
            let (_, rounds) = self.finish(running);
            let events = self.events.collect(&tag);
            if let Some(e) = events.iter().find(|e| e.kind == 'E' && e.at < releasing) {
                panic!(
                    "{tag}: MUTUAL EXCLUSION VIOLATED: waiter {} got in while the holder held the lock",
                    e.l
                );
            }
            self.verify(&tag, tool, &events, IDLE_WAITERS);
            let last = rounds.iter().map(|r| r.done).max().expect("no waiter ran");
            let drain = last.saturating_duration_since(released);
            let mut line = format!("contention: {tag}: drain {}", fmt_d(drain));
            if let Some(c) = &cmds {
                let _ = write!(
                    line,
                    "; while held ({}): {}",
                    fmt_d(c.window),
                    describe_cmds(c, IDLE_WAITERS)
                );
            }
            eprintln!("{line}");
            (cmds, drain)
        })
    }

    /// Workload 5: the holder is SIGKILLed (its whole process group); when does a waiter get in?
    /// Returns that time after the kill, and the TTL the lock had left at the kill.
    fn dead_holder(&mut self, tool: Tool) -> (Duration, Option<Duration>) {
        let tag = format!("w5-{}", tool.name());
        watched(&tag.clone(), || {
            self.reset_counter();
            let log = self.log(&format!("{tag}.holder"));
            let mut cmd = self
                .env
                .under_lock(tool, "w5", DEAD_TTL_MS, &["sh", "-c", CS_HOLD]);
            cmd.env("BT", &tag).stderr(log.stdio());
            let holder =
                start(&mut cmd, &format!("{tag} holder")).unwrap_or_else(|e| panic!("{e}"));
            self.events.wait_for(&tag, 'H');
            let running = self.start_loops(&Spec {
                tag: tag.clone(),
                tool,
                key: "w5".to_string(),
                loops: DEAD_WAITERS,
                rounds: 1,
                cs: CS_EMPTY,
            });
            // Let the waiters start and queue up.
            thread::sleep(Duration::from_millis(200));
            let ttl_left = match tool {
                Tool::Flock => None,
                Tool::Seed => Some(self.admin.pttl(&seed_key("w5"))),
                Tool::Redlock => Some(self.admin.pttl(&redlock_key("w5"))),
            };
            let killed = Instant::now();
            kill(-holder.pid());
            let (status, _) = holder.wait().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                status.signal(),
                Some(libc::SIGKILL),
                "{tag}: the holder ended on its own ({status}) before it was killed; {}",
                tail(&log.path)
            );
            let ttl_left = ttl_left.map(|ms| {
                assert!(
                    ms > 0,
                    "{tag}: the holder's lock had no TTL left at the kill (PTTL {ms})"
                );
                Duration::from_millis(ms as u64)
            });
            let _ = self.finish(running);
            let events = self.events.collect(&tag);
            self.verify(&tag, tool, &events, DEAD_WAITERS);
            let first = events
                .iter()
                .filter(|e| e.kind == 'E')
                .map(|e| e.at)
                .min()
                .expect("no waiter got in");
            assert!(
                first > killed,
                "{tag}: MUTUAL EXCLUSION VIOLATED: a waiter got in before the holder was killed"
            );
            let after = first - killed;
            eprintln!(
                "contention: {tag}: first waiter in {} after the kill (TTL left at the kill: {})",
                fmt_d(after),
                ttl_left.map_or("none".to_string(), fmt_d)
            );
            (after, ttl_left)
        })
    }

    /// One command that must succeed, with stdout discarded; how long it took.
    fn time_one(&self, mut cmd: Command, what: &str, log: &Log) -> Duration {
        cmd.stderr(log.stdio());
        let t0 = Instant::now();
        let proc = start(&mut cmd, what).unwrap_or_else(|e| panic!("{e}"));
        let (status, done) = proc.wait().unwrap_or_else(|e| panic!("{e}"));
        check_failed();
        assert!(status.success(), "{}", log.failed(what, status));
        done - t0
    }

    /// Workload 6a: median wall of `true` under each tool's lock, runs interleaved.
    fn uncontended_true(&mut self) -> [Duration; 3] {
        watched("w6-true", || {
            let log = self.log("w6-true");
            let mut walls: [Vec<Duration>; 3] = Default::default();
            for i in 0..UNCONTENDED_RUNS {
                for tool in TOOLS {
                    let cmd = self.env.under_lock(tool, "w6", LOOP_TTL_MS, &["true"]);
                    let what = format!("w6 {} `true` run {i}", tool.name());
                    walls[tool.index()].push(self.time_one(cmd, &what, &log));
                }
            }
            let medians = walls.each_ref().map(|w| percentile(w, 0.5));
            let quartiles = |w: &[Duration]| {
                format!(
                    "{} / {} / {}",
                    fmt_d(percentile(w, 0.25)),
                    fmt_d(percentile(w, 0.5)),
                    fmt_d(percentile(w, 0.75))
                )
            };
            eprintln!(
                "contention: w6-true: {UNCONTENDED_RUNS} interleaved runs each, p25 / median / \
                 p75: flock {}, seed {}, redlock {}; redlock ÷ flock medians {:.2}×",
                quartiles(&walls[0]),
                quartiles(&walls[1]),
                quartiles(&walls[2]),
                ratio(medians[2], medians[0])
            );
            medians
        })
    }

    /// Workload 6b: median wall of acquire + release: `redlock acquire` / `redlock release`
    /// against `redis-cli SET NX PX` / `redis-cli EVAL` (compare-and-delete), runs interleaved.
    fn uncontended_acquire_release(&mut self) -> (Duration, Duration) {
        watched("w6-acquire-release", || {
            let log = self.log("w6-acquire-release");
            let (mut seed, mut redlock) = (Vec::new(), Vec::new());
            let key = "w6ar";
            for i in 0..UNCONTENDED_RUNS {
                let token = uuid::Uuid::new_v4().simple().to_string();
                let set = self
                    .env
                    .redis_cli(&["SET", &seed_key(key), &token, "NX", "PX", "30000"]);
                let (out, a) = self.run_one(set, &format!("w6 redis-cli SET run {i}"), &log);
                assert_eq!(out.trim(), "OK", "w6: redis-cli SET NX did not take {key}");
                let del = self
                    .env
                    .redis_cli(&["EVAL", RELEASE_LUA, "1", &seed_key(key), &token]);
                let (out, b) = self.run_one(del, &format!("w6 redis-cli EVAL run {i}"), &log);
                assert_eq!(out.trim(), "1", "w6: redis-cli EVAL did not release {key}");
                seed.push(a + b);

                let acquire = self.env.redlock(&["acquire", key]);
                let (token, a) =
                    self.run_one(acquire, &format!("w6 redlock acquire run {i}"), &log);
                let release = self.env.redlock(&["release", key, token.trim()]);
                let (_, b) = self.run_one(release, &format!("w6 redlock release run {i}"), &log);
                redlock.push(a + b);
            }
            let (s, r) = (percentile(&seed, 0.5), percentile(&redlock, 0.5));
            eprintln!(
                "contention: w6-acquire-release: medians redis-cli {}, redlock {}",
                fmt_d(s),
                fmt_d(r)
            );
            (s, r)
        })
    }

    /// Workload 6c: peak RSS (KiB) of each tool's own process running `sleep 0.3` under the lock.
    fn peak_rss(&mut self) -> [u64; 3] {
        watched("w6-rss", || {
            let log = self.log("w6-rss");
            let mut peak = [0; 3];
            for tool in TOOLS {
                for i in 0..RSS_RUNS {
                    let mut cmd =
                        self.env
                            .under_lock(tool, "w6rss", LOOP_TTL_MS, &["sleep", "0.3"]);
                    cmd.stderr(log.stdio());
                    let what = format!("w6 {} rss run {i}", tool.name());
                    let proc = start(&mut cmd, &what).unwrap_or_else(|e| panic!("{e}"));
                    let (status, kib) = proc.wait_peak_rss().unwrap_or_else(|e| panic!("{e}"));
                    check_failed();
                    assert!(status.success(), "{}", log.failed(&what, status));
                    peak[tool.index()] = peak[tool.index()].max(kib);
                }
            }
            eprintln!(
                "contention: w6-rss: peak KiB flock {}, seed {}, redlock {}",
                peak[0], peak[1], peak[2]
            );
            peak
        })
    }

    /// Workload 7: what the quorum costs. Starts `QUORUM_NODES` more servers, the same way as the
    /// bench's own, then runs `QUORUM_CYCLES` cycles of `redlock acquire` + `redlock release`
    /// against the bench's server alone and against the extra servers together, with a
    /// `flock -n f true` for scale; all three interleaved in each cycle, the 1- and N-node order
    /// alternating, so that noise and warm caches favour neither. The first cycle checks that the
    /// lock key held the printed token on every server while held, and on none after the release.
    /// Returns (median, p90) of the cycles: flock, 1 node, N nodes. The extra servers are killed
    /// before it returns.
    fn quorum(&mut self) -> [(Duration, Duration); 3] {
        watched("w7-quorum", || {
            let log = self.log("w7-quorum");
            let servers: Vec<Server> = (0..QUORUM_NODES)
                .map(|_| Server::start(&self.env.dir))
                .collect();
            let one: Vec<u16> = vec![self.env.port.parse().expect("the bench's port")];
            let many: Vec<u16> = servers.iter().map(|s| s.port).collect();
            let urls = |ports: &[u16]| -> Vec<String> {
                ports
                    .iter()
                    .map(|p| format!("redis://127.0.0.1:{p}"))
                    .collect()
            };
            let configs = [(1, urls(&one), &one), (2, urls(&many), &many)];
            let key = "w7";
            let lock_file = self.env.dir.join("w7.lock");
            let mut cycles: [Vec<Duration>; 3] = Default::default();
            for i in 0..QUORUM_CYCLES {
                let mut flock = self.env.base("flock");
                flock.arg("-n").arg(&lock_file).arg("true");
                cycles[0].push(self.time_one(flock, &format!("w7 flock -n run {i}"), &log));
                let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
                for c in order {
                    let (slot, urls, ports) = &configs[c];
                    let n = urls.len();
                    let acquire = self.env.redlock_on(urls, &["acquire", key]);
                    let what = format!("w7 redlock acquire on {n} run {i}");
                    let (token, a) = self.run_one(acquire, &what, &log);
                    let token = token.trim().to_string();
                    if i == 0 {
                        check_holders(ports, key, Some(&token), "w7: after acquire");
                    }
                    let release = self.env.redlock_on(urls, &["release", key, &token]);
                    let what = format!("w7 redlock release on {n} run {i}");
                    let (_, b) = self.run_one(release, &what, &log);
                    if i == 0 {
                        check_holders(ports, key, None, "w7: after release");
                    }
                    cycles[*slot].push(a + b);
                }
            }
            drop(servers);
            let stats = cycles
                .each_ref()
                .map(|c| (percentile(c, 0.5), percentile(c, 0.9)));
            let spread = |c: &[Duration]| {
                format!(
                    "{} / {} / {} / {}",
                    fmt_d(percentile(c, 0.25)),
                    fmt_d(percentile(c, 0.5)),
                    fmt_d(percentile(c, 0.75)),
                    fmt_d(percentile(c, 0.9))
                )
            };
            eprintln!(
                "contention: w7-quorum: {QUORUM_CYCLES} interleaved cycles each, p25 / median / \
                 p75 / p90: flock -n {}, redlock 1 node {}, redlock {QUORUM_NODES} nodes {}; \
                 {QUORUM_NODES} ÷ 1 node medians {:.2}×",
                spread(&cycles[0]),
                spread(&cycles[1]),
                spread(&cycles[2]),
                ratio(stats[2].0, stats[1].0)
            );
            stats
        })
    }

    /// A few uncontended runs of each tool, so that no workload pays for a cold cache (page cache,
    /// Redis's script cache).
    fn warm_up(&mut self) {
        watched("warm-up", || {
            let log = self.log("warm-up");
            for i in 0..3 {
                for tool in TOOLS {
                    let cmd = self.env.under_lock(tool, "warm-up", LOOP_TTL_MS, &["true"]);
                    self.time_one(cmd, &format!("warm-up {} run {i}", tool.name()), &log);
                }
            }
        });
    }

    /// The machine and the versions, for the header.
    fn machine(&mut self) -> Vec<String> {
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
}

// ---------------------------------------------------------------------------------------------

/// The `redlock` Cargo built for this bench; it must be a release build.
fn release_binary() -> PathBuf {
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

fn require_tools() {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for (tool, package) in [
        ("redis-server", "redis-server"),
        ("redis-cli", "redis-tools"),
        ("flock", "util-linux"),
        ("sh", "dash"),
        ("mkfifo", "coreutils"),
        ("sleep", "coreutils"),
    ] {
        assert!(
            std::env::split_paths(&path).any(|d| d.join(tool).is_file()),
            "the benchmark needs `{tool}` on PATH (Debian: apt-get install {package})"
        );
    }
}

fn main() {
    if !std::env::args().skip(1).any(|a| a == "--bench") {
        eprintln!("contention: not run without --bench; run `cargo bench --bench contention`");
        return;
    }
    let began = Instant::now();
    let bin = release_binary();
    require_tools();
    install_guards();
    let temp = tempfile::Builder::new()
        .prefix("redlock-bench.")
        .tempdir()
        .expect("cannot create a temp dir");
    *locked(&TEMP) = Some(temp.path().to_path_buf());
    let mut bench = Bench::new(bin, temp.path());
    let mut header = bench.machine();
    bench.warm_up();
    let mut r = Report::default();

    // 1. 8 loops × 25 rounds, empty critical section.
    let w = "1. 8 loops × 25 rounds, empty CS";
    let s = bench.contention("w1", 8, 25, CS_EMPTY, REPS);
    let (vs_flock, vs_seed) = (ratio(s[2].wall, s[0].wall), ratio(s[2].wall, s[1].wall));
    let target = format!(
        "{}; {}",
        r.check(
            "1: wall ≤ 1.5× flock",
            vs_flock <= 1.5,
            format!("≤ 1.5× flock: {vs_flock:.2}×")
        ),
        r.check(
            "1: wall ≤ 0.3× seed",
            vs_seed <= 0.3,
            format!("≤ 0.3× seed: {vs_seed:.2}×")
        )
    );
    contention_rows(&mut r, w, &s, target, Some("1"));
    let fairness = s[2].fairness;
    let target = r.check(
        "1: fairness ≤ 2",
        fairness <= 2.0,
        format!("≤ 2: {fairness:.2}"),
    );
    r.row(
        w,
        &format!(
            "fairness: worst loop's mean wait ÷ mean wait{}",
            pooled(&s, " (worst run)")
        ),
        [0, 1, 2].map(|i| format!("{:.2}", s[i].fairness)),
        target,
    );
    let seed_gaps = bench.monitored(Tool::Seed);
    let redlock_gaps = bench.monitored(Tool::Redlock);
    let (sp50, rp50) = (percentile(&seed_gaps, 0.5), percentile(&redlock_gaps, 0.5));
    let target = r.check(
        "hand-over p50 ≤ 2 ms",
        rp50 <= Duration::from_millis(2),
        format!("≤ 2 ms: {}", fmt_d(rp50)),
    );
    r.row(
        w,
        "hand-over p50, server side: release → next SET (MONITOR, separate run)",
        ["–".to_string(), fmt_d(sp50), fmt_d(rp50)],
        target,
    );

    // 2. 4 loops × 10 rounds, 20 ms critical section.
    let w = "2. 4 loops × 10 rounds, 20 ms CS";
    let s = bench.contention("w2", 4, 10, CS_20MS, REPS);
    let vs_flock = ratio(s[2].wall, s[0].wall);
    let target = r.check(
        "2: wall ≤ 1.15× flock",
        vs_flock <= 1.15,
        format!("≤ 1.15× flock: {vs_flock:.2}×"),
    );
    contention_rows(&mut r, w, &s, target, None);

    // 3. Crowd: 100 processes at once, 3 rounds each.
    let w = "3. crowd: 100 processes at once × 3 rounds";
    let s = bench.contention("w3", 100, 3, CS_EMPTY, 1);
    contention_rows(&mut r, w, &s, String::new(), Some("3"));

    // 4. Idle: 50 waiters behind a lock held for 10 s.
    let w = "4. idle: 50 waiters behind a lock held 10 s";
    let idle = TOOLS.map(|tool| bench.idle(tool));
    let per_waiter_s = |c: &Option<Cmds>| {
        c.as_ref().map(|c| {
            let n = IDLE_WAITERS as f64 * c.window.as_secs_f64();
            (c.sent() as f64 / n, c.total as f64 / n)
        })
    };
    let rl = per_waiter_s(&idle[2].0).expect("redlock counts commands");
    let target = r.check(
        "4: ≤ 1 command per waiter per second while idle",
        rl.0 <= 1.0,
        format!("≤ 1 sent: {:.2}", rl.0),
    );
    r.row(
        w,
        "Redis commands per waiter per second while held: sent / incl. scripts",
        idle.each_ref().map(|i| match per_waiter_s(&i.0) {
            Some((a, b)) => format!("{a:.2} / {b:.2}"),
            None => "–".to_string(),
        }),
        target,
    );
    r.row(
        w,
        "drain: release → all 50 waiters through",
        idle.each_ref().map(|i| fmt_d(i.1)),
        String::new(),
    );

    // 5. Dead holder.
    let w = "5. dead holder: SIGKILLed holder (TTL 5 s)";
    let dead = TOOLS.map(|tool| bench.dead_holder(tool));
    let (after, ttl) = dead[2];
    let ttl = ttl.expect("redlock has a TTL");
    let late = after.as_secs_f64() - ttl.as_secs_f64();
    let target = r.check(
        "5: first waiter in within TTL + 100 ms",
        after <= ttl + Duration::from_millis(100),
        format!("≤ TTL left + 100 ms: {:+.0} ms", late * 1e3),
    );
    r.row(
        w,
        "first waiter in, after the kill (TTL left at the kill)",
        dead.map(|(after, ttl)| match ttl {
            Some(ttl) => format!("{} ({})", fmt_d(after), fmt_d(ttl)),
            None => format!("{} (no TTL)", fmt_d(after)),
        }),
        target,
    );

    // 6. Uncontended.
    let w = "6. uncontended";
    let medians = bench.uncontended_true();
    let vs_flock = ratio(medians[2], medians[0]);
    let target = r.check(
        "6: exec -- true ≤ 1.5× flock f true",
        vs_flock <= 1.5,
        format!("≤ 1.5× flock: {vs_flock:.2}×"),
    );
    r.row(
        w,
        "run `true` under the lock: median of 200 (`flock f true`, `seed-lock.sh k true`, `redlock exec k -- true`)",
        medians.map(fmt_d),
        target,
    );
    let (seed_ar, redlock_ar) = bench.uncontended_acquire_release();
    r.row(
        w,
        "acquire + release: median of 200 (`redis-cli` SET NX PX + EVAL; `redlock acquire` + `release`)",
        ["–".to_string(), fmt_d(seed_ar), fmt_d(redlock_ar)],
        String::new(),
    );
    let rss = bench.peak_rss();
    let target = r.check(
        "6: peak RSS of exec ≤ 8 MiB",
        rss[2] <= 8 * 1024,
        format!("≤ 8 MiB: {:.1} MiB", rss[2] as f64 / 1024.0),
    );
    r.row(
        w,
        "peak RSS of the lock process itself (VmHWM)",
        rss.map(|k| format!("{:.1} MiB", k as f64 / 1024.0)),
        target,
    );

    // 7. Quorum: the same acquire + release on five independent servers as on one.
    let w = "7. quorum: acquire + release on 5 nodes vs 1";
    let [fl, one, many] = bench.quorum();
    let vs_one = ratio(many.0, one.0);
    let target = r.check(
        "7: acquire + release on 5 nodes ≤ 1.5× on 1",
        vs_one <= 1.5,
        format!("≤ 1.5× 1 node: {vs_one:.2}×"),
    );
    let cell = |(median, p90): (Duration, Duration)| format!("{} / {}", fmt_d(median), fmt_d(p90));
    r.row(
        w,
        &format!(
            "median / p90 of {QUORUM_CYCLES} cycles, interleaved: `redlock acquire k` + `release k \
             TOKEN` with {QUORUM_NODES} `--url`s, and with 1; flock: `flock -n f true` (one \
             process; for scale)"
        ),
        [
            cell(fl),
            "–".to_string(),
            format!("{QUORUM_NODES} nodes {}; 1 node {}", cell(many), cell(one)),
        ],
        target,
    );

    drop(bench);
    *locked(&TEMP) = None;
    temp.close().expect("cannot remove the temp dir");
    let left = locked(&LIVE).clone();
    assert!(left.is_empty(), "processes left behind: {left:?}");
    let took = began.elapsed();
    header[0] = format!("{} (took {:.0} s)", header[0], took.as_secs_f64());
    r.print(&header);
}

/// How a row of a repeated workload was computed, as a suffix of its metric ("" for single runs).
fn pooled(s: &[Summary], how: &str) -> String {
    if s.iter().any(|s| s.runs > 1) {
        how.to_string()
    } else {
        String::new()
    }
}

/// The rows every contention workload has.
fn contention_rows(
    r: &mut Report,
    w: &str,
    s: &[Summary],
    wall_target: String,
    cmds_target: Option<&str>,
) {
    let cells = |f: &dyn Fn(&Summary) -> String| [f(&s[0]), f(&s[1]), f(&s[2])];
    let runs = s.iter().map(|s| s.runs).max().unwrap_or(1);
    r.row(
        w,
        &format!(
            "wall{}",
            pooled(s, &format!(" (median of {runs} runs; seed style: 1 run)"))
        ),
        cells(&|s| fmt_d(s.wall)),
        wall_target,
    );
    r.row(
        w,
        &format!("hand-overs per second{}", pooled(s, " (median run)")),
        cells(&|s| format!("{:.0}", s.rate)),
        String::new(),
    );
    r.row(
        w,
        &format!("wait p50 / p99{}", pooled(s, " (runs pooled)")),
        cells(&|s| format!("{} / {}", fmt_d(s.p50), fmt_d(s.p99))),
        String::new(),
    );
    let target = match (cmds_target, s[2].cmds) {
        (Some(n), Some((sent, _))) => r.check(
            &format!("{n}: ≤ 6 commands sent per critical section"),
            sent <= 6.0,
            format!("≤ 6 sent: {sent:.1}"),
        ),
        _ => String::new(),
    };
    r.row(
        w,
        &format!(
            "Redis commands per CS: sent / incl. scripts{}",
            pooled(s, " (runs pooled)")
        ),
        cells(&|s| cmds_cell(s.cmds)),
        target,
    );
    r.row(
        w,
        &format!(
            "hand-over p50, client side: CS leave → next CS entry{}",
            pooled(s, " (runs pooled)")
        ),
        cells(&|s| fmt_d(s.handover)),
        String::new(),
    );
}
