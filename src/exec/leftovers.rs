//! What a command that redlock stopped left running: found among redlock's adopted orphans,
//! stopped (SIGTERM, then SIGKILL) and reaped before the lock is released.
//!
//! Layer 13 of the list in `lib.rs` (a part of `exec`).

use std::time::{Duration, Instant};

use signal_hook::consts::signal::{SIGKILL, SIGTERM};

use crate::config::Config;
use crate::messages;
use crate::output::human_ms;
use crate::spawn;

/// Once redlock stopped a command run with `--max-runtime` (the limit, a lost lock, a signal it
/// passed on): whatever the command left running (adopted by redlock, see
/// `spawn::adopt_orphans`) gets SIGTERM, SIGKILL after `kill_after`, and is reaped, while the
/// renewals still keep the lock and before it is released, so that nothing of the command runs
/// on once another client may hold the lock (timeout(1) stops the whole process group for the
/// same reason). Bounded: what still runs 2 s after the SIGKILL is said, and left.
///
/// A keeper among them (the lock of an `acquire --while-pid` inside the command, see
/// [`Leftover`]) gets SIGTERM only, which tells it to stop its work and then release its lock:
/// it waits for the same processes that get SIGKILL here, so it is given [`keeper_grace`] more
/// to see them gone and release, and SIGKILL only past that (its lock then stays held until its
/// TTL). A keeper that keeps a lock for redlock itself (`--while-pid $PPID`) is left alone: it
/// releases once redlock has ended.
pub fn stop_leftovers(config: &Config, kill_after: Duration) {
    // Durations are at most 100 years (`cli::MAX_DURATION`): these sums cannot overflow.
    let kill_at = Instant::now() + kill_after;
    let keepers_kill_at = kill_at + keeper_grace(config);
    let give_up = |keepers: bool| {
        let kill_at = if keepers { keepers_kill_at } else { kill_at };
        kill_at + Duration::from_secs(2)
    };
    let mut seen = std::collections::HashSet::new();
    let mut keepers_killed = false;
    loop {
        spawn::reap_exited();
        let left: Vec<(libc::pid_t, Leftover)> = spawn::children()
            .into_iter()
            .map(|pid| (pid, Leftover::of(pid)))
            .filter(|(_, kind)| *kind != Leftover::OurKeeper)
            .collect();
        if left.is_empty() {
            break;
        }
        let now = Instant::now();
        let keepers: Vec<libc::pid_t> = pids(&left, Leftover::Keeper);
        if now >= give_up(!keepers.is_empty()) {
            messages::alert(format_args!(
                "{} process{} the command left running could not be stopped (pids {:?})",
                left.len(),
                if left.len() == 1 { "" } else { "es" },
                left.iter().map(|(pid, _)| *pid).collect::<Vec<_>>()
            ));
            break;
        }
        let new: Vec<libc::pid_t> = left
            .iter()
            .map(|(pid, _)| *pid)
            .filter(|p| seen.insert(*p))
            .collect();
        spawn::signal_all(&new, SIGTERM);
        if now >= kill_at {
            spawn::signal_all(&pids(&left, Leftover::Other), SIGKILL);
        }
        if now >= keepers_kill_at && !keepers.is_empty() {
            if !keepers_killed {
                messages::alert(format_args!(
                    "the keeper{} of a lock taken inside the command (pids {keepers:?}) had not \
                     released it {} after the command's processes were killed: sending SIGKILL; \
                     its lock stays held until its TTL",
                    if keepers.len() == 1 { "" } else { "s" },
                    human_ms(keeper_grace(config))
                ));
                keepers_killed = true;
            }
            spawn::signal_all(&keepers, SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !seen.is_empty() {
        messages::notice(
            config,
            format_args!(
                "stopped {} process{} the command left running",
                seen.len(),
                if seen.len() == 1 { "" } else { "es" }
            ),
        );
    }
}

/// What a process the command left running is, for [`stop_leftovers`].
#[derive(Clone, Copy, Debug, PartialEq)]
enum Leftover {
    /// The keeper of an `acquire --while-pid` (its `argv[0]` is `work::KEEPER_ARGV0`): it stops its
    /// work and releases on SIGTERM.
    Keeper,
    /// A keeper whose pid is redlock's own (`redlock-keeper --pid OURS`): it releases once we end.
    OurKeeper,
    /// Anything else.
    Other,
}

impl Leftover {
    /// What `pid` is, from its command line (`redlock-keeper --pid PID -- KEY` for a keeper).
    /// A process gone, or one that cannot be read, counts as any other.
    fn of(pid: libc::pid_t) -> Leftover {
        let Some(line) = crate::platform::command_line(pid) else {
            return Leftover::Other;
        };
        // One line on macOS: the keeper's first words have no spaces.
        let words: Vec<&str> = if crate::platform::EXACT_ARGS {
            line.iter().map(String::as_str).collect()
        } else {
            line.iter().flat_map(|l| l.split(' ')).collect()
        };
        let mut args = words.into_iter();
        if args.next() != Some(crate::work::KEEPER_ARGV0) {
            return Leftover::Other;
        }
        let kept_for = match (args.next(), args.next()) {
            (Some("--pid"), Some(pid)) => Some(pid),
            _ => None,
        };
        if kept_for == Some(std::process::id().to_string().as_str()) {
            Leftover::OurKeeper
        } else {
            Leftover::Keeper
        }
    }
}

/// The pids of `left` of kind `kind`.
fn pids(left: &[(libc::pid_t, Leftover)], kind: Leftover) -> Vec<libc::pid_t> {
    left.iter()
        .filter(|(_, k)| *k == kind)
        .map(|(pid, _)| *pid)
        .collect()
}

/// How long a keeper among the command's leftovers is given, after the others got SIGKILL, to
/// release its lock: the processes it waits for are gone by then, and it looks every 250 ms;
/// its release is at most two attempts, the second on a new connection (`keeper.rs`), so two
/// connects and replies, each counted with the larger of our own timeouts and the defaults
/// (2 s: the keeper's own unless the script gave it others); and 1 s for the look and a loaded
/// machine. 9 s with the default timeouts.
fn keeper_grace(config: &Config) -> Duration {
    const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
    let connect = config.connect_timeout.max(DEFAULT_TIMEOUT);
    let io = config.io_timeout.max(DEFAULT_TIMEOUT);
    (connect + io) * 2 + Duration::from_secs(1)
}
