//! The one-shot subcommands: `acquire`, `release`, `extend`, `status`.
//!
//! Each returns the exit status for outcomes that are not errors (busy, free) and an error for the
//! rest, which `messages::report_error` prints and maps to its code. `exec` lives in `exec.rs`;
//! what both take a lock with, in `take.rs`.
//!
//! Layer 13 of the list in `lib.rs`.

use std::io::Write;
use std::ops::ControlFlow;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::acquire::Wait;
use crate::backend;
use crate::brief;
use crate::cli::{AcquireArgs, ExtendArgs, LogArgs, ReleaseArgs, StatusArgs, StatusFormat};
use crate::client::Redis;
use crate::config::{Config, Servers};
use crate::error::{Kind, failure, usage};
use crate::exit;
use crate::history::{self, Entry, Range};
use crate::lock::{self, IfHeld, Kept, Keys, Lock, QuorumVerdict, Releaser, State, Verdict};
use crate::messages;
use crate::os;
use crate::output;
use crate::owner;
use crate::park;
use crate::signals;
use crate::store::Store;
use crate::take::{check_lock_args, take_lock, warn_short_ttl};

pub fn acquire(config: &Config, args: &AcquireArgs) -> Result<u8> {
    check_acquire_args(config, args)?;
    // Opened first: a pid with no process is refused before anything is written to Redis, and
    // the pidfd names that very process however long the keeper runs (see brief.rs).
    let watched = args
        .while_pid
        .map(|pid| brief::Pid::open(pid, args.on_lost))
        .transpose()?;
    if let Some(pid) = args.while_pid {
        brief::warn_unless_group(config, pid);
    }
    let keys = Keys::new(&config.prefix, &args.key)?;
    warn_short_ttl(config, args.lock.ttl);
    if !stdout_is_open() {
        return Err(usage(
            "stdout is closed or read-only, so the token would be lost; redirect it to a file or a pipe",
        ));
    }
    // The holder is the calling script, or the process the lock is kept alive for.
    let pid = args
        .while_pid
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or_else(owner::parent_pid);
    let owner = owner::owner(pid, args.lock.note.as_deref(), || owner::command_line(pid));
    let (tx, rx) = mpsc::channel();
    if args.lock.wait() != Wait::No {
        signals::deliver(signals::STOP, tx, park::signal_event)?;
    }
    let mut store = backend::open(config)?;
    let kept = match args.while_pid {
        Some(_) => Kept::WhilePid,
        None => Kept::Nobody,
    };
    let lock = match take_lock(config, store.as_mut(), &keys, &args.lock, &owner, kept, &rx)? {
        ControlFlow::Continue(lock) => lock,
        ControlFlow::Break(gave_up) => return Ok(gave_up.code()),
    };
    let started = match watched {
        Some(watched) => Some(leave_keeper(config, store.as_mut(), &lock, watched, args)?),
        None => None,
    };
    if let Some(code) = print_token(store.as_mut(), &lock, args)? {
        return Ok(code);
    }
    // The token reached its reader: from here on the keeper keeps the lock (without this word,
    // it gives the lock back: see `brief::Started`).
    if let Some(started) = started {
        started.confirm();
    }
    Ok(exit::OK)
}

/// What `acquire` refuses besides what [`check_lock_args`] does: `--preemptible` without a
/// keeper, and a `--while-pid` that cannot be kept for.
fn check_acquire_args(config: &Config, args: &AcquireArgs) -> Result<()> {
    check_lock_args(config, &args.lock)?;
    if args.lock.preemptible && args.while_pid.is_none() {
        return Err(usage(
            "acquire --preemptible needs --while-pid PID: a preempted lock is given up by \
             stopping PID, and without a keeper nobody hears of the preemption (exec \
             --preemptible stops its command itself)",
        ));
    }
    if let Some(pid) = args.while_pid {
        if u32::try_from(pid).ok() == Some(std::process::id()) {
            return Err(usage(format!(
                "--while-pid {pid} is this redlock itself, which ends once it printed the token; \
                 give the script's pid ($$ in sh)"
            )));
        }
        if pid == 1 && args.on_lost != crate::cli::PidOnLost::Ignore {
            return Err(usage(
                "--while-pid 1 is init: a lost lock would signal it; give --on-lost ignore to \
                 keep the lock for it anyway",
            ));
        }
    }
    Ok(())
}

/// Starts the keeper of `lock` for `watched` (`--while-pid`); on failure gives the lock back.
fn leave_keeper(
    config: &Config,
    store: &mut dyn Store,
    lock: &Lock,
    watched: brief::Pid,
    args: &AcquireArgs,
) -> Result<brief::Started> {
    let keys = &lock.keys;
    let pid = args.while_pid.unwrap_or_default();
    let started = if watched.ended() {
        // It ended while we waited in the queue: the lock would be kept for nobody.
        Err(usage(format!(
            "--while-pid {pid}: the process ended while waiting"
        )))
    } else {
        brief::start(config, lock, watched).and_then(|started| {
            // A keeper that took longer to start than the lock lasts renews nothing.
            if Instant::now() < lock.acquired_until() {
                Ok(started)
            } else {
                Err(failure(
                    Kind::Unavailable,
                    format!(
                        "the keeper took longer to start than the lock's TTL ({})",
                        output::human_ms(lock.ttl)
                    ),
                ))
            }
        })
    };
    started.map_err(|e| {
        // Nobody would renew it, nor release it when the pid ends: give it back.
        let _ = store.release(keys, &Releaser::keeper(lock));
        e.context(format!(
            "cannot leave a keeper for pid {pid} (released '{}' again)",
            keys.name
        ))
    })
}

/// Prints the token (as `--format` says); when nobody received it, gives the lock back and
/// returns the exit status (a closed pipe) or the error.
fn print_token(store: &mut dyn Store, lock: &Lock, args: &AcquireArgs) -> Result<Option<u8>> {
    let keys = &lock.keys;
    let text = crate::output::acquired(lock, args.format);
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // Nobody received the token, so nobody could ever release this lock: give it back.
        store.release(keys, &Releaser::keeper(lock))?;
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            messages::alert(format_args!(
                "cannot print the token ({e}); released '{}' again",
                keys.name
            ));
            // As if SIGPIPE had ended us, the way a shell pipeline expects.
            return Ok(Some(exit::signal(libc::SIGPIPE)));
        }
        return Err(failure(
            Kind::Io,
            format!(
                "cannot print the token: {e}; released '{}' again",
                keys.name
            ),
        ));
    }
    Ok(None)
}

/// Whether stdout was open when we started. Rust's runtime reopens a closed fd 1 as /dev/null
/// read-write before `main`, so a closed stdout shows up as exactly that; a shell's `>/dev/null`
/// opens it write-only, which stays allowed (taking a lock only to let it expire is legitimate).
fn stdout_is_open() -> bool {
    use rustix::fs::OFlags;
    use std::os::unix::fs::MetadataExt;
    let stdout = std::io::stdout();
    let (Ok(mode), Ok(id)) = (os::access_mode(&stdout), os::file_id(&stdout)) else {
        return false;
    };
    // Open for reading only (`1</dev/null`): a write fails with EBADF, which Rust's stdout
    // swallows as if it had succeeded.
    if mode == OFlags::RDONLY {
        return false;
    }
    let dev_null = std::fs::metadata("/dev/null").map(|m| m.rdev()).ok();
    !(mode == OFlags::RDWR && Some(id.rdev) == dev_null)
}

fn token_arg(token: Option<&str>) -> Result<&str> {
    match token {
        Some(t) if t.trim().is_empty() => Err(usage(
            "missing token: pass the token printed by `redlock acquire`, or set REDLOCK_TOKEN",
        )),
        // The lock key holds `~WAITER` while it is reserved for a waiter: with that value one
        // could release or extend a reservation, taking the waiter's turn. No holder's token
        // looks like it.
        Some(t) if t.starts_with('~') || t.chars().any(crate::printable::is_unsafe) => {
            Err(usage(format!(
                "'{}' cannot be a token: pass the token printed by `redlock acquire`",
                crate::printable::printable(t)
            )))
        }
        Some(t) => Ok(t),
        None => Err(usage(
            "missing token: pass the token printed by `redlock acquire`, or set REDLOCK_TOKEN",
        )),
    }
}

pub fn release(config: &Config, args: &ReleaseArgs) -> Result<u8> {
    let keys = Keys::new(&config.prefix, &args.key)?;
    let by = if args.force {
        // Recorded as `forced_by`: the calling script, as a holder's record names it.
        let ppid = owner::parent_pid();
        Releaser::Force(owner::owner(ppid, Some(""), String::new), if_held(args)?)
    } else {
        Releaser::holder(token_arg(args.token.as_deref())?)
    };
    let mut store = backend::open(config)?;
    match store.release(&keys, &by)? {
        Verdict::Forced(holders) => {
            force_released(config, &keys, &holders);
            Ok(exit::OK)
        }
        Verdict::Done(previous) => {
            if let Releaser::Holder { token, .. } = &by {
                // Its keeper on this host, if it has one, hears it at once (see `tell.rs`).
                crate::tell::released(token);
            }
            if args.force {
                let who = previous.map_or_else(
                    || "an unknown client".to_string(),
                    |h| {
                        format!(
                            "{} (fence {}, token {}…)",
                            h.who(),
                            h.fence,
                            h.fingerprint()
                        )
                    },
                );
                // The previous owner is the point of --force's output: print it even with -q.
                messages::outcome(format_args!(
                    "force-released '{}', held by {who}",
                    keys.name
                ));
            }
            Ok(exit::OK)
        }
        Verdict::Deferred => {
            messages::notice(
                config,
                format_args!(
                    "'{}' is kept by a keeper that is stopping its pid's work: the keeper \
                     releases it once that work has ended",
                    keys.name
                ),
            );
            Ok(exit::OK)
        }
        Verdict::Free if args.force => {
            messages::notice(config, format_args!("'{}' was not held", keys.name));
            Ok(exit::OK)
        }
        Verdict::HeldByOther(holder) if args.force => {
            let now = match holder {
                Some(h) => format!(
                    "is now held by {} with fence {} (token {}…)",
                    h.who(),
                    h.fence,
                    h.fingerprint()
                ),
                None => "is now held by a client with no redlock record".to_string(),
            };
            Err(failure(
                Kind::NotOwner,
                format!("not released: '{}' {now}", keys.name),
            ))
        }
        other => {
            let token = match &by {
                Releaser::Holder { token, .. } => token.as_str(),
                Releaser::Force(..) => "",
            };
            Err(lock::not_owner(&other, token)).context(format!("cannot release '{}'", keys.name))
        }
    }
}

/// Says whom a `--force` let go of a lock with more than one holder.
fn force_released(config: &Config, keys: &Keys, holders: &[lock::Holder]) {
    if holders.is_empty() {
        messages::notice(config, format_args!("'{}' had no holder left", keys.name));
        return;
    }
    // As for one holder: the holders are the point of --force's output, even with -q.
    messages::outcome(format_args!(
        "force-released '{}', held by {} holder{}:",
        keys.name,
        holders.len(),
        if holders.len() == 1 { "" } else { "s" }
    ));
    for h in holders {
        messages::outcome(format_args!(
            "  slot {}: {} (fence {}, token {}…)",
            h.slot.map_or("?".to_string(), |s| s.to_string()),
            h.who(),
            h.fence,
            h.fingerprint()
        ));
    }
}

/// `--if-fence N` / `--if-token FINGERPRINT`: which holder a `--force` may evict.
fn if_held(args: &ReleaseArgs) -> Result<Option<IfHeld>> {
    match (args.if_fence, args.if_token.as_deref()) {
        (Some(fence), _) => Ok(Some(IfHeld::Fence(fence))),
        // The fingerprint `status` shows, or more of the token (up to all of it, as `acquire`
        // printed it or `status --show-token` shows it): the longer, the surer.
        (None, Some(fp))
            if (8..=32).contains(&fp.len()) && fp.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            Ok(Some(IfHeld::Token(fp.to_ascii_lowercase())))
        }
        (None, Some(fp)) => Err(usage(format!(
            "--if-token '{}' is not a fingerprint: pass the 8 hex digits that 'redlock status' \
             shows in the token column (or more of the token, up to all 32)",
            crate::printable::printable(fp)
        ))),
        (None, None) => Ok(None),
    }
}

pub fn extend(config: &Config, args: &ExtendArgs) -> Result<u8> {
    let keys = Keys::new(&config.prefix, &args.key)?;
    let token = token_arg(args.token.as_deref())?;
    warn_short_ttl(config, args.ttl);
    let mut store = backend::open(config)?;
    match store.extend(&keys, token, args.ttl, false, false)? {
        Verdict::Done(_) => Ok(exit::OK),
        Verdict::Preempted(p) => {
            // Extended: the lock is still ours; its keeper (or the script) is to stop.
            messages::warning(
                config,
                format_args!("'{}' was {}: release it", keys.name, p.reason()),
            );
            Ok(exit::OK)
        }
        other => {
            Err(lock::not_owner(&other, token)).context(format!("cannot extend '{}'", keys.name))
        }
    }
}

/// `status` (not `--watch`, which is `watch.rs`'s: see `lib.rs`).
pub fn status(config: &Config, args: &StatusArgs) -> Result<u8> {
    let format = args.format();
    let states = status_states(config, args, format)?;
    let text = match format {
        StatusFormat::Prometheus => crate::metrics::exposition(&states, &node_labels(config)),
        StatusFormat::Json => {
            let all: Vec<_> = states
                .iter()
                .map(|s| crate::output::state_json(s, args.show_token))
                .collect();
            format!("{}\n", serde_json::Value::Array(all))
        }
        StatusFormat::Table if states.is_empty() => {
            messages::notice(
                config,
                format_args!("no locks held under prefix '{}'", config.prefix),
            );
            String::new()
        }
        StatusFormat::Table => {
            crate::output::status_table(&states, args.show_token)
                + &crate::output::holders_details(&states, args.show_token)
                + &crate::output::quorum_details(&states)
                // Named locks list their waiters: "who is next" is what a look at one lock asks.
                + &if args.queue || !args.keys.is_empty() {
                    crate::output::queue_details(&states)
                } else {
                    String::new()
                }
        }
    };
    print_stdout(&text)?;
    status_outcome(config, &states, format)
}

/// The locks `status` shows: the named ones, or every lock held under the prefix (metrics keep
/// those released since the scan), with `stale` judged for holders on this host.
fn status_states(config: &Config, args: &StatusArgs, format: StatusFormat) -> Result<Vec<State>> {
    let mut named: Vec<Keys> = args
        .keys
        .iter()
        .map(|k| Keys::new(&config.prefix, k))
        .collect::<Result<_>>()?;
    if format == StatusFormat::Prometheus {
        // A series twice in one scrape is an error to Prometheus: `status a a` lists `a` once.
        let mut seen = std::collections::HashSet::new();
        named.retain(|k| seen.insert(k.name.clone()));
    }
    let mut store = backend::open(config)?;
    // Every lock: batched (see `Store::inspect_all`). Named ones: one call each, as few as typed.
    let found = if named.is_empty() {
        store.inspect_all(&config.prefix)?
    } else {
        named
            .iter()
            .map(|k| store.inspect(k))
            .collect::<Result<_>>()?
    };
    let mut states = Vec::with_capacity(found.len());
    let here = owner::Here::now();
    for mut state in found {
        if state.held() {
            state.stale = state
                .holder
                .as_ref()
                .and_then(|h| here.stale(&h.host, &h.pid, &h.pidns, h.kept));
        }
        // A lock found by SCAN may have been released since: list only what is still held (by
        // anyone, for a quorum: a split lock is worth seeing). Metrics keep it: that it is free
        // now is a value, and its counters go on.
        let visible =
            state.held() || matches!(state.quorum_verdict(), Some(v) if v != QuorumVerdict::Free);
        if args.keys.is_empty() && !visible && format != StatusFormat::Prometheus {
            continue;
        }
        states.push(state);
    }
    Ok(states)
}

/// `status`'s exit status once its output is written: 0 when every lock shown is held, 1 when
/// one is free; no quorum for a lock is an error. Metrics say all of that themselves: 0.
fn status_outcome(config: &Config, states: &[State], format: StatusFormat) -> Result<u8> {
    let unknown: Vec<&str> = states
        .iter()
        .filter(|s| s.quorum_verdict() == Some(QuorumVerdict::Unknown))
        .map(|s| s.keys.name.as_str())
        .collect();
    if !unknown.is_empty() && format == StatusFormat::Prometheus {
        // The metrics carry it (`redlock_quorum_verdict{verdict="unknown"}`, `redlock_node_up`):
        // written, they are what an alert needs, so the exit status stays 0.
        messages::warning(
            config,
            format_args!(
                "no quorum: too few servers answered to tell the state of {}",
                unknown.join(", ")
            ),
        );
    } else if !unknown.is_empty() {
        return Err(failure(
            Kind::Unavailable,
            format!(
                "no quorum: too few servers answered to tell the state of {}",
                unknown.join(", ")
            ),
        ));
    }
    // Metrics say whether each lock is held; the exit status says they were all written (a cron
    // job's `status ... > f.tmp && mv f.tmp f.prom` must not keep an old file for a free lock).
    let all_held = states.iter().all(lock::State::held);
    Ok(if all_held || format == StatusFormat::Prometheus {
        exit::OK
    } else {
        exit::BUSY
    })
}

/// The `node` labels of a quorum's metrics, in the order of its `--url`s (none for one server,
/// a Cluster or Sentinel, whose locks each live on one master).
fn node_labels(config: &Config) -> Vec<String> {
    match &config.servers {
        Servers::Quorum(endpoints) => endpoints
            .iter()
            .map(|e| crate::metrics::node_label(&e.public))
            .collect(),
        _ => Vec::new(),
    }
}

/// `redlock log`: the lock's history (on a quorum, the queue node's: the first URL), oldest first;
/// with `--follow`, then every new entry as it is written, until a stop signal (exit 128+N).
pub fn log(config: &Config, args: &LogArgs) -> Result<u8> {
    let keys = Keys::new(&config.prefix, &args.key)?;
    if args.follow {
        // Nothing is held while following: a stop signal ends the process at once.
        let (tx, _rx) = mpsc::channel::<()>();
        signals::deliver(signals::STOP, tx, |s: signals::Signal| {
            std::process::exit(i32::from(exit::signal(s.signo)))
        })?;
    }
    let mut store = backend::open(config)?;
    let Some(redis) = store.parking() else {
        return Err(failure(
            Kind::Unavailable,
            "cannot reach the server that keeps the lock's history (the first --url)",
        ));
    };
    let since_ms = match args.since {
        Some(d) => Some(
            history::server_ms(redis)?
                .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        ),
        None => None,
    };
    let range = Range {
        since_ms,
        limit: args.limit.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
    };
    let mut closed = false;
    let last = history::read(redis, &keys, range, |page| {
        let flow = print_entries(page, &keys.name, args.json)?;
        closed = flow.is_break();
        Ok(flow)
    })?;
    if closed {
        return Ok(exit::OK);
    }
    if !args.follow {
        if last.is_none() && !args.json {
            messages::notice(config, nothing_listed(redis, &keys, args.since));
        }
        return Ok(exit::OK);
    }
    // From the last entry printed; with none, from where the read started (an entry written
    // since is new to us): XREAD returns what comes after the ID.
    let mut after = match (last.as_ref(), since_ms) {
        (Some(e), _) => e.id.clone(),
        (None, Some(ms)) => format!("{}-0", ms.saturating_sub(1).max(0)),
        (None, None) => "0-0".to_string(),
    };
    // XREAD blocks for up to a second at a time: a silent server is noticed within the read
    // timeout after that.
    const BLOCK: std::time::Duration = std::time::Duration::from_secs(1);
    redis.set_read_timeout(BLOCK + config.io_timeout)?;
    loop {
        let new = history::read_after(redis, &keys, &after, BLOCK)?;
        if let Some(e) = new.last() {
            after = e.id.clone();
        }
        // `| head`: nobody reads any more (seen at the next write, or at once while idle).
        if print_entries(&new, &keys.name, args.json)?.is_break() || stdout_closed() {
            return Ok(exit::OK);
        }
    }
}

/// Why `redlock log` listed nothing: no event in the range asked for, or no history at all, for
/// one of the reasons there can be none (not only `--log-max 0`: a name never used is the usual
/// one). One more round trip, on this path only.
fn nothing_listed(redis: &mut Redis, keys: &Keys, since: Option<std::time::Duration>) -> String {
    let name = &keys.name;
    match (history::exists(redis, keys), since) {
        (Ok(true), Some(d)) => format!(
            "no events for '{name}' in the last {}",
            humantime::format_duration(d)
        ),
        (Ok(true), None) => format!("no events for '{name}': its history is empty"),
        _ => format!(
            "no history is recorded for '{name}': it was never used, or its history expired \
             (--meta-ttl after its last use), or its holders kept none (--log-max 0, or a Redis \
             user without XADD)"
        ),
    }
}

/// Whether stdout is a pipe or socket whose reader has gone (as `tail -f` checks while idle).
fn stdout_closed() -> bool {
    use std::os::fd::AsFd;
    os::peer_gone(std::io::stdout().as_fd(), true)
}

/// Prints `entries`; `Break` when stdout is closed.
fn print_entries(entries: &[Entry], name: &str, json: bool) -> Result<ControlFlow<()>> {
    let text: String = entries
        .iter()
        .map(|e| {
            if json {
                format!("{}\n", e.json(name))
            } else {
                format!("{}\n", e.line(None))
            }
        })
        .collect();
    write_stdout(&text)
}

/// Writes machine output; a closed stdout (`| head`) is not an error.
pub fn print_stdout(text: &str) -> Result<()> {
    write_stdout(text).map(|_| ())
}

/// Writes machine output; `Break` when stdout is closed (`| head`), which is not an error.
fn write_stdout(text: &str) -> Result<ControlFlow<()>> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ControlFlow::Break(())),
        Err(e) => Err(failure(Kind::Io, format!("cannot write to stdout: {e}"))),
        Ok(()) => Ok(ControlFlow::Continue(())),
    }
}
