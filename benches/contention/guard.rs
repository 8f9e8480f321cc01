//! Process guards, the bottom layer of the bench: every process it starts is registered here, so
//! that a failure, a timeout, a panic or Ctrl-C can kill all of them and nothing outlives the
//! bench. Owns the registry (lock commands by process group, servers, the temp dir), the
//! first failure of a run, the watchdog that bounds a run ([`RUN_TIMEOUT`]), the panic hook and
//! the signal handler, [`Proc`] (a registered child until it is reaped) and [`Log`] (the stderr
//! log the commands of one run share). Imports nothing from the other modules.

use std::fs::{self, File, OpenOptions};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// The bound on one run of a workload.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// The bound on any single wait outside a run (server start, an event, the MONITOR marker).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// Process groups of the lock commands still running (each child leads its own group).
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());
/// The servers (redis-server, etcd): killed last, by the panic hook and the signal handler.
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

/// SIGKILL to `pid`, or to the process group `-pid`.
pub fn kill(pid: i32) {
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

/// Registers the temp dir for removal on a panic or a signal (`None`: the bench removes it).
pub fn set_temp(dir: Option<PathBuf>) {
    *locked(&TEMP) = dir;
}

/// Starts a server (`redis-server`, `etcd`) and registers it for killing on a panic or a signal;
/// it also dies with the thread that started it (PDEATHSIG), so start servers from the main
/// thread. [`stop_service`] kills, reaps and unregisters it.
pub fn spawn_service(cmd: &mut Command, what: &str) -> Child {
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl(2),
    // which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    locked(&SERVICES).push(child.id() as i32);
    child
}

/// Kills and reaps a server [`spawn_service`] started, and unregisters it.
pub fn stop_service(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
    let pid = child.id() as i32;
    locked(&SERVICES).retain(|&p| p != pid);
}

/// Whether the run is being torn down.
pub fn aborted() -> bool {
    ABORT.load(Ordering::SeqCst)
}

/// Panics if a lock command is still registered: the bench left a process behind.
pub fn assert_none_left() {
    let left = locked(&LIVE).clone();
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

/// Records the first failure of a run and kills every lock command, so the other loops end now.
pub fn fail(msg: String) -> String {
    ABORT.store(true, Ordering::SeqCst);
    locked(&FIRST_ERROR).get_or_insert_with(|| msg.clone());
    kill_live();
    msg
}

/// Panics with the reason the current run stopped, if it did.
pub fn check_failed() {
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
pub fn watched<T>(run: &str, f: impl FnOnce() -> T) -> T {
    eprintln!("contention: {run} ...");
    *locked(&WATCH) = Some((Instant::now() + RUN_TIMEOUT, run.to_string()));
    let out = f();
    *locked(&WATCH) = None;
    check_failed();
    out
}

/// The panic hook, the Ctrl-C handler and the watchdog.
pub fn install_guards() {
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
pub struct Proc {
    child: Child,
    what: String,
}

/// Starts `cmd` as the leader of its own process group and registers it; refused once the run is
/// being torn down.
pub fn start(cmd: &mut Command, what: &str) -> Result<Proc, String> {
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
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn forget(&self) {
        let pid = self.pid();
        locked(&LIVE).retain(|&p| p != pid);
    }

    pub fn wait(mut self) -> Result<(ExitStatus, Instant), String> {
        let status = self.child.wait();
        let at = Instant::now();
        self.forget();
        let status = status.map_err(|e| format!("cannot wait for {}: {e}", self.what))?;
        Ok((status, at))
    }

    pub fn wait_output(self) -> Result<(ExitStatus, String, Instant), String> {
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
    pub fn wait_peak_rss(mut self) -> Result<(ExitStatus, u64), String> {
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
pub fn tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let last = &lines[lines.len().saturating_sub(12)..];
    if last.is_empty() {
        format!("(nothing on stderr; log {})", path.display())
    } else {
        format!("stderr ({}):\n  {}", path.display(), last.join("\n  "))
    }
}

/// A stderr log shared by the commands of one run.
#[derive(Clone)]
pub struct Log {
    pub path: PathBuf,
    file: Arc<File>,
}

impl Log {
    pub fn new(dir: &Path, name: &str) -> Log {
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

    pub fn stdio(&self) -> Stdio {
        Stdio::from(self.file.try_clone().expect("cannot duplicate a log fd"))
    }

    pub fn failed(&self, what: &str, status: ExitStatus) -> String {
        format!("{what}: exited with {status}; {}", tail(&self.path))
    }
}
