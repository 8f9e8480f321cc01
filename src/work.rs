//! The work a process started: what `acquire --while-pid PID`'s keeper must see end before it
//! releases the lock, and stops along with PID.
//!
//! The work is PID, its process group when PID leads it, and its descendants as found:
//! - PID leads its process group (`getpgid(PID) == PID`: cron, CI runners, `setsid` and a
//!   terminal's job control start a script so, and a non-interactive script's children, its
//!   foreground steps and background jobs alike, stay in its group): the group is signalled
//!   whole (`killpg`), and has ended when no living member is left. Nothing PID starts leaves
//!   the group but by `setpgid`/`setsid` of its own, which `timeout`, `set -m` jobs and an
//!   interactive shell's jobs do: those are caught as descendants.
//! - Descendants: found by scans of the process table (`/proc/*/stat`: this kernel has no
//!   `/proc/PID/task/*/children`; `ps` on macOS) following parent links, and remembered by
//!   (pid, start time) once seen, so that an orphan (its parent ended, it was re-parented to
//!   init) stays known, and so are its own children. Best effort: a process started and
//!   orphaned between two scans ([`SCAN_EVERY`]) is missed. For a pid that does not lead its group (GitHub Actions runs a
//!   step's shell in the runner's group; a `sleep` started by a program) they are all the work:
//!   the group is someone else's, never signalled.
//!
//! "Living" leaves zombies out: a member that exited and waits for its parent to reap it has
//! done its work (PID itself, for one, until its parent reaps it), but a process whose main
//! thread exited while others run (its stat says `Z`, its thread count more than 1) has not; and the calling process (the
//! keeper, which leads a session of its own and is never in PID's group, but is a descendant of
//! PID until `acquire` exits) is never part of the work.
//!
//! A pid is signalled only while it is known to be the same process: a group's id cannot be
//! given to a new process while the group has a member, and a descendant is signalled only if
//! its start time is the one it had when it was found.
//!
//! Layer 2 of the list in `lib.rs`.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The `argv[0]` of a keeper (`acquire --while-pid`): by it `main` knows it is one, and `exec`
/// tells a keeper among its command's leftovers (it lets it release before any SIGKILL).
pub const KEEPER_ARGV0: &str = "redlock-keeper";

use rustix::process::{Pid, Signal, kill_process, kill_process_group};

use crate::platform::{self, Proc};

/// How often the keeper scans the process table for the pid's descendants while it lives.
/// A scan costs about 4.5 µs of CPU time per process (measured, release build, on a loaded
/// 2-core machine: 2.0 to 2.3 ms for 440 to 520 processes; `a_scan_costs_little` prints it), so
/// 0.4 % of a core at this period with 450 processes: a keeper may live for hours. Only a process
/// started and orphaned within one period can be missed, and only when the pid ends on its own
/// (the keeper scans once more right before it stops the pid itself).
pub const SCAN_EVERY: Duration = Duration::from_millis(500);

/// The signals the keeper sends to a pid's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Term,
    Kill,
}

impl Stop {
    fn signal(self) -> Signal {
        match self {
            Stop::Term => Signal::TERM,
            Stop::Kill => Signal::KILL,
        }
    }
}

/// The work of one pid.
#[derive(Debug)]
pub struct Work {
    root: i32,
    /// The pid's start time, so that a later process given its pid is not taken for it.
    root_start: Option<u64>,
    /// The pid of the process that watches (the keeper): never part of the work.
    me: i32,
    /// The pid leads its process group: the group is part of the work.
    group: bool,
    /// Descendants seen so far, by pid, with their start time (for a group, also those that
    /// left it: `timeout`, `set -m` jobs, an interactive shell's jobs).
    known: HashMap<i32, u64>,
}

impl Work {
    /// The work of `pid`: its process group if it leads one, and its descendants as found.
    pub fn of(pid: i32) -> Work {
        let me = rustix::process::getpid().as_raw_nonzero().get();
        let table = processes();
        let root_start = table.iter().find(|p| p.pid == pid).map(|p| p.start);
        let mut work = Work {
            root: pid,
            root_start,
            me,
            group: leads_its_group(pid),
            known: HashMap::new(),
        };
        work.refresh(&table);
        work
    }

    /// Whether the pid leads its group (then every process that stays in it is known), not only
    /// its descendants as found.
    pub fn is_group(&self) -> bool {
        self.group
    }

    /// Looks for new descendants. Call it every [`SCAN_EVERY`] while the pid lives: once it has
    /// ended, its children are re-parented and cannot be traced to it any more.
    pub fn scan(&mut self) {
        let table = processes();
        self.refresh(&table);
    }

    /// The living processes of the work, the pid itself included: their pids.
    pub fn living(&mut self) -> Vec<i32> {
        if self.group && self.known.is_empty() {
            let Some(group) = Pid::from_raw(self.root) else {
                return Vec::new();
            };
            // The group is gone and no descendant left it: no scan needed (the usual case once
            // the work has ended).
            if rustix::process::test_kill_process_group(group) == Err(rustix::io::Errno::SRCH) {
                return Vec::new();
            }
        }
        let table = processes();
        self.refresh(&table);
        let mut living: Vec<i32> = table
            .iter()
            .filter(|p| p.living() && p.pid != self.me)
            .filter(|p| (self.group && p.pgrp == self.root) || self.is_root(p))
            .map(|p| p.pid)
            .collect();
        for &pid in self.known.keys() {
            if !living.contains(&pid) {
                living.push(pid);
            }
        }
        living
    }

    /// Sends `stop` to the work: the whole group, and each descendant known outside it (after
    /// one more scan, while the pid's children can still be traced to it). The pid itself is
    /// signalled only as a member of its group: the caller signals it otherwise (through its
    /// pidfd).
    pub fn signal(&mut self, stop: Stop) {
        // The scan first: once the group has the signal, PID and its children may end at once,
        // and a step that left the group could no longer be traced to them.
        let table = processes();
        self.refresh(&table);
        if self.group
            && let Some(group) = Pid::from_raw(self.root)
        {
            let _ = kill_process_group(group, stop.signal());
        }
        let by_pid: HashMap<i32, &Proc> = table.iter().map(|p| (p.pid, p)).collect();
        for (&pid, &since) in &self.known {
            // Still the process found then (pids are reused), and not signalled with its group
            // just now (twice would run a TERM trap twice).
            if let Some(p) = by_pid.get(&pid)
                && p.start == since
                && !(self.group && p.pgrp == self.root)
                && let Some(p) = Pid::from_raw(pid)
            {
                let _ = kill_process(p, stop.signal());
            }
        }
    }

    /// Whether `p` is the pid itself (not a later process given its pid).
    fn is_root(&self, p: &Proc) -> bool {
        p.pid == self.root && Some(p.start) == self.root_start
    }

    /// How many descendants are known.
    pub fn known(&self) -> usize {
        self.known.len()
    }

    /// Descendants known from now on: those the parent links of `table` lead to from the pid, a
    /// member of its group, or a descendant known before and still the same process, living.
    fn refresh(&mut self, table: &[Proc]) {
        let mut children: HashMap<i32, Vec<&Proc>> = HashMap::new();
        let mut by_pid: HashMap<i32, &Proc> = HashMap::new();
        for p in table {
            children.entry(p.ppid).or_default().push(p);
            by_pid.insert(p.pid, p);
        }
        let mut todo: Vec<i32> = Vec::new();
        if by_pid.get(&self.root).is_some_and(|p| self.is_root(p)) {
            todo.push(self.root);
        }
        // A member of the group is remembered too: it may leave the group later.
        if self.group {
            todo.extend(table.iter().filter(|p| p.pgrp == self.root).map(|p| p.pid));
        }
        todo.extend(
            self.known
                .iter()
                .filter(|&(pid, since)| by_pid.get(pid).is_some_and(|p| p.start == *since))
                .map(|(&pid, _)| pid),
        );
        let mut found: HashMap<i32, u64> = HashMap::new();
        let mut seen: HashSet<i32> = HashSet::new();
        while let Some(pid) = todo.pop() {
            if !seen.insert(pid) {
                continue;
            }
            if pid != self.root
                && let Some(p) = by_pid.get(&pid)
                && p.living()
                && p.pid != self.me
            {
                found.insert(pid, p.start);
            }
            if let Some(kids) = children.get(&pid) {
                todo.extend(kids.iter().map(|k| k.pid));
            }
        }
        self.known = found;
    }
}

/// Whether `pid` leads its process group (its work is then the group: see [`Work::of`]).
pub fn leads_its_group(pid: i32) -> bool {
    pid > 0 && crate::os::process_group_of(pid) == Some(pid)
}

/// Whether one of `pids` holds the file `(dev, ino)` (a pipe or FIFO) open for reading only:
/// it reads what is written to it, and waits for its end. (Never known on macOS.)
pub fn one_reads(pids: &[i32], dev: u64, ino: u64) -> bool {
    platform::one_reads(pids, dev, ino)
}

/// Whether `pid` is most likely an interactive shell: it leads a session that has a controlling
/// terminal (a terminal's login shell, an ssh session's; `setsid SCRIPT` leads a session
/// without one, and a script run from a terminal leads no session). Its jobs get groups of
/// their own, so its work is its descendants as found, and stopping it stops the operator's
/// shell.
pub fn is_interactive_shell(pid: i32) -> bool {
    platform::session_with_terminal(pid)
}

/// Every process (those that end while it is read are left out).
fn processes() -> Vec<Proc> {
    platform::processes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;
    use std::time::Instant;

    /// A group leader's work is its group, members started after `of` included; another's is
    /// its descendants, an orphan included once seen.
    #[test]
    fn the_work_is_the_group_or_the_descendants() {
        let mut leader = Command::new("sh")
            .args(["-c", "sleep 1000 & sleep 1000 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let mut work = Work::of(leader.id() as i32);
        assert!(work.is_group());
        assert!(eventually(|| work.living().len() == 3));
        work.signal(Stop::Kill);
        leader.wait().unwrap();
        assert!(eventually(|| work.living().is_empty()));

        // In our own group: its descendants. The shell ends, its child is an orphan.
        let dir = tempfile_dir();
        let file = dir.join("pid");
        let mut parent = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "sleep 1000 & echo $! >'{}'; read x",
                file.display()
            ))
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut work = Work::of(parent.id() as i32);
        assert!(!work.is_group());
        assert!(eventually(
            || std::fs::read_to_string(&file).is_ok_and(|s| s.ends_with('\n'))
        ));
        let orphan: i32 = std::fs::read_to_string(&file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        work.scan();
        drop(parent.stdin.take());
        parent.wait().unwrap();
        assert_eq!(work.living(), vec![orphan]);
        work.signal(Stop::Kill);
        assert!(eventually(|| work.living().is_empty()));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// What a scan costs with a few hundred processes (printed; `--nocapture` shows it).
    #[test]
    fn a_scan_costs_little() {
        let mut sleepers: Vec<_> = (0..300)
            .map(|_| Command::new("sleep").arg("1000").spawn().unwrap())
            .collect();
        let n = processes().len();
        let rounds = 20;
        let cpu = crate::os::thread_cpu_time;
        let (started, cpu_before) = (Instant::now(), cpu());
        for _ in 0..rounds {
            assert!(processes().len() >= 300);
        }
        let each = started.elapsed() / rounds;
        let cpu_each = (cpu() - cpu_before) / rounds;
        eprintln!("one scan of {n} processes: {each:?}, {cpu_each:?} of CPU time");
        for s in &mut sleepers {
            let _ = s.kill();
            let _ = s.wait();
        }
        // A sanity bound only (the figure is printed): a loaded machine may stretch the wall time.
        assert!(each < Duration::from_secs(1), "{each:?}");
    }

    fn eventually(mut cond: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("redlock-work-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
