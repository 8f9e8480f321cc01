//! Starting `exec`'s command so that it dies with redlock, and cheaply (`platform::start`: on
//! Linux a vfork-style clone that sets `PR_SET_PDEATHSIG` before the exec; elsewhere
//! `posix_spawn`, and nothing ties the command to our life), and reaping it.
//!
//! The kernel clears that signal when the command changes its credentials (a `setpriv`, `gosu`
//! or `sudo` wrapper): [`credentials_changed`] sees such a change, and a [`Watchdog`] process
//! stops the command at redlock's death in its place. The signal reaches the command alone;
//! when redlock leads its process group, a watchdog over the group stops what the command
//! started too. Where there is no such signal (`platform::DEATH_SIGNAL`), a watchdog is started
//! with every command.
//!
//! Layer 2 of the list in `lib.rs`.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::os;
use crate::platform::{self, Plan, StartFailed, Watched};

/// Why a command could not be started.
#[derive(Debug)]
pub enum SpawnError {
    NotFound,
    NotExecutable(io::Error),
}

/// A started command, reaped through [`Child::try_wait`] or [`Child::wait`].
pub struct Child {
    pid: libc::pid_t,
    reaped: bool,
}

impl Child {
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// The exit status if the command has exited (reaping it), without blocking.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        self.wait_with(false)
    }

    /// Blocks until the command exits.
    pub fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.wait_with(true)? {
                return Ok(status);
            }
        }
    }

    fn wait_with(&mut self, block: bool) -> io::Result<Option<ExitStatus>> {
        let waited = os::wait_child(Some(self.pid), block)?;
        self.reaped |= waited.is_some();
        Ok(waited.map(|(_, status)| ExitStatus::from_raw(status)))
    }

    /// Sends `signo`, unless the command was reaped already (its pid may belong to another
    /// process by then).
    pub fn signal(&self, signo: i32) {
        if !self.reaped {
            os::signal(self.pid, signo);
        }
    }
}

/// Makes this process the reaper of its orphaned descendants (`PR_SET_CHILD_SUBREAPER`): a
/// process the command started and left behind (its parent died) becomes our child instead of
/// init's, so that we can find it ([`children`]) and stop it before the lock is released. (None
/// on macOS: [`children`] finds what stays in our process group there.)
pub fn adopt_orphans() -> io::Result<()> {
    platform::adopt_orphans()
}

/// The pids of this process's living children (the adopted orphans among them), zombies and
/// our [`Watchdog`] left out (it is no leftover of the command: stopping leftovers must not stop
/// it).
pub fn children() -> Vec<libc::pid_t> {
    platform::children(os::pid(), WATCHDOG.load(Ordering::SeqCst))
}

/// Sends `signo` to each of `pids` (children of ours, not reaped: their pids are still theirs).
pub fn signal_all(pids: &[libc::pid_t], signo: i32) {
    for &pid in pids {
        os::signal(pid, signo);
    }
}

/// Reaps the children of ours that are zombies, except `except` (the command, which is reaped
/// through its [`Child`], with its exit status), without blocking: orphans of the command that
/// were adopted (see [`adopt_orphans`]) and exited.
pub fn reap_adopted(except: libc::pid_t) {
    for pid in platform::zombie_children(os::pid(), except) {
        let _ = os::wait_child(Some(pid), false);
    }
}

/// Reaps every child of ours that has exited, without blocking.
pub fn reap_exited() {
    while let Ok(Some(_)) = os::wait_child(None, false) {}
}

pub use platform::credentials_changed;

/// Whether we may send signals to process `pid` (`kill(pid, 0)` is not refused with EPERM):
/// after a switch of users, a [`Watchdog`] with our credentials can stop it only then.
pub fn may_signal(pid: libc::pid_t) -> bool {
    os::may_signal(pid)
}

/// A process of ours that outlives us to stop the command when we die: the parent-death signal
/// does that, unless the command changed its credentials (see [`credentials_changed`]), which
/// cleared it. Started then, it waits for the end of a pipe whose other end only we hold; at
/// our death (even by SIGKILL) it reads an end of file and sends SIGTERM to the command, then
/// SIGKILL after the grace period if it is still there. Told that all is well (a byte) when the
/// command has been reaped, it exits; dropping the handle tells it and reaps it.
///
/// Started with `group` (we lead our process group: a terminal's job, cron's `sh -c` that
/// execs us, `setsid`), it is started for every command, leaves that group first thing
/// (`setpgid(0, 0)`), and at our death signals the whole group (`kill(-pgid)`: SIGTERM, then
/// SIGKILL after the grace period if any member is left), so that what the command started
/// stops too, not only the command, which the parent-death signal alone stops. The group's id
/// is our pid, which the kernel does not hand out again while the group has a member. Without
/// `group` (we are one step of a script whose group is the script's), the group is never
/// signalled.
///
/// It signals the command through a pidfd, so that a pid reused meanwhile is never hit; without
/// pidfds (Linux before 5.3) it sends SIGTERM by pid, and no SIGKILL; on macOS by pid, and
/// SIGKILL when it is still there (see `platform::Watched`). It has our credentials: it can
/// stop a command that switched to another user when we run as root, or as the user that ran a
/// set-user-ID wrapper such as `sudo` (whose real uid stays that user's), and not otherwise.
pub struct Watchdog {
    pid: libc::pid_t,
    /// The pipe's write end: a byte means "exit"; its end of file (we died) means "stop".
    tell: Option<std::fs::File>,
}

impl Watchdog {
    /// Starts a watchdog over the command `child` (and over our process group `group`, whose
    /// id is our pid, when we lead it), SIGKILL following SIGTERM after `grace`.
    pub fn start(
        child: libc::pid_t,
        group: Option<libc::pid_t>,
        grace: std::time::Duration,
    ) -> io::Result<Watchdog> {
        let (read, write) = platform::pipe()?;
        let orders = Orders {
            read: read.as_raw_fd(),
            write: write.as_raw_fd(),
            command: Watched::new(child),
            group: group.unwrap_or(0),
            grace,
        };
        // SAFETY: every signal is blocked around the fork, so no handler of ours runs in the
        // child, which makes async-signal-safe calls only (this process has threads) and never
        // returns to our code: it exits once `watch` returns.
        let pid = unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            let pid = libc::fork();
            if pid == 0 {
                watch(&orders);
                libc::_exit(0);
            }
            let fork_error = io::Error::last_os_error();
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            if pid == -1 {
                return Err(fork_error);
            }
            pid
        };
        // The read end and the pidfd are the watchdog's alone.
        drop((read, orders));
        WATCHDOG.store(pid, Ordering::SeqCst);
        Ok(Watchdog {
            pid,
            tell: Some(std::fs::File::from(write)),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        use std::io::Write as _;
        if let Some(mut tell) = self.tell.take() {
            let _ = tell.write_all(b"x");
        }
        // (Reaped already by a wait for any child: ECHILD, ignored.)
        let _ = os::wait_child(Some(self.pid), true);
        let _ = WATCHDOG.compare_exchange(self.pid, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// The pid of the running [`Watchdog`] (0: none), which [`children`] leaves out.
static WATCHDOG: AtomicI32 = AtomicI32::new(0);

/// What the watchdog's process is given: the pipe's two ends (it reads one, closes the other),
/// the command (by pidfd where there is one), our group (0: none) and the grace period.
struct Orders {
    read: RawFd,
    write: RawFd,
    command: Watched,
    group: libc::pid_t,
    grace: std::time::Duration,
}

/// The watchdog's life, in the forked child: async-signal-safe calls only (rustix's are raw
/// system calls). Returns when the watchdog is done (the caller exits).
///
/// # Safety
/// Called in the child of a fork of a process with threads, with every signal blocked: it
/// closes descriptors that belonged to the parent's code.
unsafe fn watch(orders: &Orders) {
    // SAFETY: (for the whole block) the calls below are async-signal-safe, and touch only our
    // stack and the descriptors of this forked copy, which no code of the parent's uses here.
    unsafe {
        // Out of the group we will signal (and of the terminal's Ctrl-C to it) before anything.
        if orders.group > 0 {
            libc::setpgid(0, 0);
        }
        libc::close(orders.write);
        // Nothing else of ours stays open here: a Redis connection held by the watchdog would
        // outlive a killed redlock.
        let (read, pidfd) = (orders.read, orders.command.fd().unwrap_or(-1));
        let mut keep = [read, pidfd];
        keep.sort_unstable();
        let close = |from: libc::c_int, to: libc::c_int| platform::close_range(from, to);
        let mut from = 3;
        for fd in keep.into_iter().filter(|&fd| fd >= 3) {
            if fd > from {
                close(from, fd - 1);
            }
            from = from.max(fd + 1);
        }
        close(from, libc::c_int::MAX);
        // Nor redlock's stdio: a reader of its output sees the end when the command's ends.
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            // (Unless one is ours: a redlock started with a closed stdin or stdout.)
            for fd in (0..3).filter(|&fd| fd != read && fd != pidfd) {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
        // A Ctrl-C or a hangup of redlock's group is redlock's to handle; our handlers were
        // copied from it, and are reset.
        for signo in (1..32).filter(|&s| s != libc::SIGKILL && s != libc::SIGSTOP) {
            let ignored = matches!(
                signo,
                libc::SIGINT
                    | libc::SIGQUIT
                    | libc::SIGHUP
                    | libc::SIGTSTP
                    | libc::SIGTTIN
                    | libc::SIGTTOU
                    | libc::SIGPIPE
            );
            libc::signal(
                signo,
                if ignored {
                    libc::SIG_IGN
                } else {
                    libc::SIG_DFL
                },
            );
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // The read end and the pidfd stay open in this copy until it exits.
        let read = BorrowedFd::borrow_raw(read);
        if !told_all_is_well(read) {
            stop_command(orders);
        }
    }
}

/// Waits for a byte ("all is well": true) or the end of file (redlock died: false) on `read`.
fn told_all_is_well(read: BorrowedFd<'_>) -> bool {
    let mut byte = [0u8; 1];
    loop {
        match rustix::io::read(read, &mut byte) {
            Err(rustix::io::Errno::INTR) => {}
            n => return n == Ok(1),
        }
    }
}

/// redlock is gone: the command must not run on without its lock, nor what it started.
/// SIGTERM to the group (if any) and the command, then SIGKILL after the grace period to what
/// is left. In the watchdog's process: async-signal-safe calls only.
fn stop_command(orders: &Orders) {
    use rustix::process::{Signal, kill_process_group};
    let group = (orders.group > 0)
        .then(|| rustix::process::Pid::from_raw(orders.group))
        .flatten();
    if let Some(group) = group {
        let _ = kill_process_group(group, Signal::TERM);
    }
    orders.command.signal(Signal::TERM);
    // The command's end is seen where it can be (a pidfd is readable once its process has
    // exited); a group has no descriptor to wait on, so it is polled (`kill(-pgid, 0)` fails
    // once no member is left).
    let command_left = if let Some(group) = group {
        const STEP: std::time::Duration = std::time::Duration::from_millis(10);
        let mut waited = std::time::Duration::ZERO;
        while rustix::process::test_kill_process_group(group).is_ok() && waited < orders.grace {
            // (nanosleep: async-signal-safe.)
            std::thread::sleep(STEP);
            waited += STEP;
        }
        let _ = kill_process_group(group, Signal::KILL);
        // (The command too, unless it left the group: SIGKILL below if it is still there.)
        orders.command.exited_within(std::time::Duration::ZERO) == Some(false)
    } else {
        orders.command.exited_within(orders.grace) == Some(false)
    };
    if command_left {
        orders.command.signal(Signal::KILL);
    }
}

/// Starts `argv` with the current environment changed by `env` (a value sets the variable,
/// `None` removes it), stdio inherited, tied to our life. `handled` are the signals we have
/// handlers for (they are reset in the child).
pub fn spawn(
    argv: &[OsString],
    env: &[(&str, Option<&OsStr>)],
    handled: &[i32],
) -> Result<Child, SpawnError> {
    let path = resolve(&argv[0])?;
    let c = |s: &OsStr| CString::new(s.as_bytes()).map_err(|e| SpawnError::NotExecutable(e.into()));
    let path_c = c(path.as_os_str())?;
    let args: Vec<CString> = argv.iter().map(|a| c(a)).collect::<Result<_, _>>()?;
    let envs = environment(env)?;
    let sh_args: Vec<CString> = [c(OsStr::new(SHELL))?, c(path.as_os_str())?]
        .into_iter()
        .chain(args[1..].iter().cloned())
        .collect();
    let mut reset = handled.to_vec();
    reset.push(libc::SIGPIPE);
    let plan = Plan {
        path: &path_c,
        argv: &args,
        sh_argv: &sh_args,
        envp: &envs,
        reset: &reset,
    };
    match platform::start(&plan) {
        Ok(pid) => Ok(Child { pid, reaped: false }),
        Err(StartFailed::Fork(e)) => Err(SpawnError::NotExecutable(e)),
        Err(StartFailed::Exec(errno)) => Err(exec_failed(&path, errno)),
    }
}

/// Our environment changed by `env`, as `NAME=VALUE` strings for execve.
fn environment(env: &[(&str, Option<&OsStr>)]) -> Result<Vec<CString>, SpawnError> {
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| !env.iter().any(|(name, _)| k == name))
        .collect();
    vars.extend(
        env.iter()
            .filter_map(|(k, v)| Some((OsString::from(k), (*v)?.to_os_string()))),
    );
    vars.iter()
        .map(|(k, v)| {
            let mut kv = k.clone();
            kv.push("=");
            kv.push(v);
            CString::new(kv.as_bytes()).map_err(|e| SpawnError::NotExecutable(e.into()))
        })
        .collect()
}

/// What the child's failed exec of `path` (errno) means for the user.
fn exec_failed(path: &Path, errno: i32) -> SpawnError {
    let e = io::Error::from_raw_os_error(errno);
    match e.kind() {
        // The file is there (we found it): what is missing is its interpreter.
        io::ErrorKind::NotFound if path.exists() => SpawnError::NotExecutable(io::Error::new(
            e.kind(),
            "bad interpreter (its #! line names a missing file)",
        )),
        io::ErrorKind::NotFound => SpawnError::NotFound,
        _ => SpawnError::NotExecutable(e),
    }
}

/// The shell that runs a file without a `#!` line.
const SHELL: &str = "/bin/sh";

/// Finds `name` the way a shell does: as a path if it contains a slash, else in $PATH. A file
/// that exists but cannot be executed anywhere gives `NotExecutable`, nothing at all `NotFound`.
fn resolve(name: &OsStr) -> Result<PathBuf, SpawnError> {
    if name.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(name));
    }
    if name.is_empty() {
        return Err(SpawnError::NotFound);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut denied = None;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(name);
        match executable(&candidate) {
            Ok(true) => return Ok(candidate),
            Ok(false) => denied = Some(candidate),
            Err(_) => {}
        }
    }
    match denied {
        Some(_) => Err(SpawnError::NotExecutable(io::Error::from_raw_os_error(
            libc::EACCES,
        ))),
        None => Err(SpawnError::NotFound),
    }
}

/// `Ok(true)`: an executable file; `Ok(false)`: a file that is not; `Err`: not there (a directory
/// does not count, as in a shell's PATH search).
fn executable(path: &Path) -> io::Result<bool> {
    let meta = std::fs::metadata(path)?;
    if meta.is_dir() {
        return Err(io::ErrorKind::NotFound.into());
    }
    let ok = rustix::fs::access(path, rustix::fs::Access::EXEC_OK).is_ok();
    Ok(meta.is_file() && ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our own credentials are no change; a watchdog told that all is well exits at once and
    /// leaves the command alone.
    #[test]
    fn a_watchdog_dismissed_leaves_the_command_alone() {
        let mut child = spawn(&["sleep".into(), "0.5".into()], &[], &[]).unwrap();
        let pid = child.id() as libc::pid_t;
        let started = std::time::Instant::now();
        drop(Watchdog::start(pid, None, std::time::Duration::from_millis(10)).unwrap());
        assert!(started.elapsed() < std::time::Duration::from_millis(400));
        assert_eq!(child.wait().unwrap().code(), Some(0));
    }

    #[test]
    fn runs_a_command_and_reports_its_status() {
        let mut child = spawn(&["sh".into(), "-c".into(), "exit 7".into()], &[], &[]).unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(7));
    }

    #[test]
    fn passes_the_extra_environment() {
        let script = "[ \"$REDLOCK_TEST_VAR\" = yes ]";
        let env = [("REDLOCK_TEST_VAR", Some(OsStr::new("yes")))];
        let mut child = spawn(&["sh".into(), "-c".into(), script.into()], &env, &[]).unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(0));
    }

    #[test]
    fn removes_variables_given_without_a_value() {
        let script = "[ -z \"${HOME+set}\" ] && [ \"$REDLOCK_TEST_VAR\" = yes ]";
        let env = [
            ("HOME", None),
            ("REDLOCK_TEST_VAR", Some(OsStr::new("yes"))),
        ];
        let mut child = spawn(&["sh".into(), "-c".into(), script.into()], &env, &[]).unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(0));
    }

    #[test]
    fn a_script_without_a_shebang_runs_with_sh_and_a_missing_interpreter_is_126() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("plain");
        std::fs::write(&script, "exit 6\n").unwrap();
        let bad = dir.path().join("bad");
        std::fs::write(&bad, "#!/nonexistent/interpreter\n").unwrap();
        for f in [&script, &bad] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        // Another test's fork may still hold our just-written file open for writing (ETXTBSY
        // until that child execs): try again, a bounded number of times.
        let mut child = (0..100)
            .find_map(|_| match spawn(&[script.clone().into()], &[], &[]) {
                Err(SpawnError::NotExecutable(e)) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    None
                }
                other => Some(other),
            })
            .expect("ETXTBSY for a second")
            .unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(6));
        assert!(matches!(
            spawn(&[bad.into()], &[], &[]),
            Err(SpawnError::NotExecutable(_))
        ));
    }

    #[test]
    fn missing_and_non_executable_commands_are_told_apart() {
        assert!(matches!(
            spawn(&["redlock-no-such-command".into()], &[], &[]),
            Err(SpawnError::NotFound)
        ));
        assert!(matches!(
            spawn(&["/nonexistent/cmd".into()], &[], &[]),
            Err(SpawnError::NotFound)
        ));
        assert!(matches!(
            spawn(&["/etc/passwd".into()], &[], &[]),
            Err(SpawnError::NotExecutable(_))
        ));
    }
}
