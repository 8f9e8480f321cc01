//! What `exec` and the one-shot commands (`commands.rs`) share: the lock options checked and
//! resolved once ([`check_lock_args`], [`LockArgs::mode`], [`LockArgs::wait`]), and taking the
//! lock as they ask ([`take_lock`]), with what a wait given up says on stderr ([`GaveUp`]).
//! The subcommands sit side by side above it, and none imports another.
//!
//! Layer 12 of the list in `lib.rs`.

use std::ops::ControlFlow;
use std::sync::mpsc::Receiver;

use anyhow::Result;

use crate::acquire::{self, Acquired, Wait};
use crate::cli::LockArgs;
use crate::config::{Config, Servers};
use crate::error::{Kind, failure, usage};
use crate::events::Event;
use crate::exit;
use crate::lock::{self, Join, Kept, Keys, Lock, Mode, Queue, Reply, Request};
use crate::messages;
use crate::output;
use crate::park::Parker;
use crate::signals;
use crate::store::Store;

/// A TTL under this is allowed but warned about: a lock that short can expire before its holder
/// has used it (a round trip and a process start take milliseconds, a loaded machine far more),
/// and `exec`'s renewals, every TTL/3, would have to arrive within scheduling noise.
pub const SHORT_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// Warns (unless `-q`) about a `--ttl` under [`SHORT_TTL`]; the lock is taken as asked.
pub fn warn_short_ttl(config: &Config, ttl: std::time::Duration) {
    if ttl < SHORT_TTL {
        messages::warning(
            config,
            format_args!(
                "--ttl {} is under 1s: the lock can expire before its holder has used it (or \
                 exec has renewed it); 1s or more is safer",
                humantime::format_duration(ttl)
            ),
        );
    }
}

impl LockArgs {
    /// The kind of lock asked for: `--slots`, `--pool`, `--shared`, or plain.
    pub fn mode(&self) -> Mode {
        match (self.slots, &self.pool, self.shared) {
            (Some(n), _, _) => Mode::Slots(n),
            (_, Some(pool), _) => Mode::Pool(pool.0.clone()),
            (_, _, true) => Mode::Shared,
            _ => Mode::Exclusive,
        }
    }

    pub fn wait(&self) -> Wait {
        match (self.no_wait, self.wait) {
            (true, _) => Wait::No,
            (false, Some(d)) => Wait::For(d),
            (false, None) => Wait::Forever,
        }
    }
}

/// The message for a lock we gave up on.
fn busy_message(keys: &Keys, outcome: &Acquired) -> String {
    match outcome {
        Acquired::Busy(Some(state)) if state.held() => {
            format!("lock '{}' is busy: {}", keys.name, state.describe())
        }
        _ => format!("lock '{}' is busy", keys.name),
    }
}

/// Why [`take_lock`] gave up, both already reported on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GaveUp {
    /// The lock stayed busy (`-n`, or `--wait` ran out).
    Busy(u8),
    /// This signal ended the wait.
    Signal(i32),
}

impl GaveUp {
    /// The exit status it gives: `--conflict-exit-code`, or 128 + the signal.
    pub fn code(self) -> u8 {
        match self {
            GaveUp::Busy(code) => code,
            GaveUp::Signal(sig) => exit::signal(sig),
        }
    }
}

/// Takes the lock as `args` say, waiting on `events` (which must carry stop signals); `kept`:
/// whether a keeper will keep it alive for the owner's pid (`acquire --while-pid`, recorded).
/// `Break` says why the lock stayed busy or a signal ended the wait (both already reported on
/// stderr).
pub fn take_lock(
    config: &Config,
    store: &mut dyn Store,
    keys: &Keys,
    args: &LockArgs,
    owner: &lock::Owner,
    kept: Kept,
    events: &Receiver<Event>,
) -> Result<ControlFlow<GaveUp, Lock>> {
    let mut parker = Parker::new(config, events);
    let mode = args.mode();
    let wait = args.wait();
    let wanted = acquire::Wanted {
        wait,
        request: Request {
            ttl: args.ttl,
            owner,
            mode: &mode,
            queue: Queue {
                join: match (wait, args.supersede) {
                    (Wait::No, _) => Join::No,
                    (_, false) => Join::Queue,
                    (_, true) => Join::Supersede,
                },
                preempt: args.preempt,
                preemptible: args.preemptible,
                again: false,
            },
            reply: Reply::default(),
            kept,
            prev: None,
            wait: None,
            waited: std::time::Duration::ZERO,
        },
        whole_ttl: !kept.by_holder() || args.wait_replicas > 0,
    };
    let started = std::time::Instant::now();
    match acquire::acquire(store, keys, &wanted, &mut parker)? {
        Acquired::Held(lock) => {
            if args.wait_replicas > 0 {
                wait_for_replicas(config, store, &lock, args.wait_replicas)?;
            }
            Ok(ControlFlow::Continue(lock))
        }
        Acquired::Interrupted(sig) => {
            messages::notice(
                config,
                format_args!(
                    "{} while waiting for '{}'; gave up",
                    signals::name(sig),
                    keys.name
                ),
            );
            Ok(ControlFlow::Break(GaveUp::Signal(sig)))
        }
        Acquired::Superseded(by) => {
            messages::notice(
                config,
                format_args!(
                    "superseded by {by} after waiting {} for '{}' (--supersede); gave up",
                    output::human_ms(started.elapsed()),
                    keys.name
                ),
            );
            Ok(ControlFlow::Break(GaveUp::Busy(args.conflict_exit_code)))
        }
        busy @ Acquired::Busy(_) => {
            messages::notice(config, busy_message(keys, &busy));
            Ok(ControlFlow::Break(GaveUp::Busy(args.conflict_exit_code)))
        }
    }
}

/// `--wait-replicas N`: the lock counts only once N replicas have it (so that a failover right
/// after acquiring does not lose it). A shortfall gives the lock back and is an error.
fn wait_for_replicas(
    config: &Config,
    store: &mut dyn Store,
    lock: &Lock,
    replicas: u32,
) -> Result<()> {
    let acked = match store.wait_replicas(&lock.keys, replicas, config.io_timeout) {
        Ok(n) if n >= i64::from(replicas) => return Ok(()),
        Ok(n) => Ok(n),
        Err(e) => Err(e),
    };
    let _ = store
        .recover()
        .and_then(|()| store.leave(&lock.keys, &lock.token));
    let acked = acked?;
    Err(failure(
        Kind::Unavailable,
        format!(
            "only {acked} of the {replicas} replicas asked for (--wait-replicas) acknowledged \
             '{}' within {}; released it again",
            lock.keys.name,
            output::human_ms(config.io_timeout)
        ),
    ))
}

/// Refuses option combinations that cannot work with the configured servers.
pub fn check_lock_args(config: &Config, args: &LockArgs) -> Result<()> {
    let mode = args.mode();
    if args.supersede && args.no_wait {
        return Err(usage(
            "--supersede applies to waiters, and -n does not wait: give --wait DUR, or neither",
        ));
    }
    if args.preempt && args.no_wait {
        return Err(usage(
            "--preempt waits, at the head of the queue, for the holder to stop, and -n does not \
             wait: give --wait DUR, or neither",
        ));
    }
    if (args.preempt || args.preemptible) && mode != Mode::Exclusive {
        return Err(usage(format!(
            "--{} applies to a lock with one holder, not to {}: which of several holders would \
             stop is not one answer",
            if args.preempt {
                "preempt"
            } else {
                "preemptible"
            },
            mode.describe()
        )));
    }
    if args.supersede && matches!(config.servers, Servers::Quorum(_)) {
        return Err(usage(
            "--supersede does not apply to several --url yet: a superseded waiter's attempts \
             also hold grants on the other nodes, which the queue node cannot take back in the \
             same step",
        ));
    }
    if mode != Mode::Exclusive && matches!(config.servers, Servers::Quorum(_)) {
        return Err(usage(format!(
            "{} does not apply to several --url: a limit kept by each of independent masters is \
             not one limit (with 3 masters and 2 slots, 3 clients can each win a majority with \
             different pairs); use one server (with replicas, Sentinel or a Cluster)",
            mode.describe()
        )));
    }
    if args.wait_replicas > 0 && matches!(config.servers, Servers::Quorum(_)) {
        return Err(usage(
            "--wait-replicas does not apply to several --url (a quorum of independent masters \
             has no replicas to wait for)",
        ));
    }
    Ok(())
}
