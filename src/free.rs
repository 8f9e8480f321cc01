//! `redlock wait KEY`: blocks until a lock is free, without taking it or joining its queue
//! ("start the smoke tests once the running deploy is done").
//!
//! Woken by the lock's changes, not by polling: a thread of its own subscribes to the lock's
//! channel `PREFIX{NAME}:watch` (every lock script publishes its change there while someone
//! listens, see `event` in `common.lua`) where `exec`'s notifications are heard
//! ([`client::subscriber`]), and the main thread reads the lock once the subscription is
//! confirmed, then again after each message: a release between the subscription and the first
//! read is seen by that read. A holder that dies publishes nothing (its key just expires), so the
//! lock is also read again when its TTL has run out. Free means nobody holds the lock and it is
//! not being handed over (a release that hands it to a queued waiter does not end the wait); on a
//! quorum, a majority free.
//!
//! If the subscription cannot be made (an ACL user without the channel) or is lost, the wait goes
//! on with reads at the lock's expiry and every [`UNHEARD_READ`]: slower to notice a release,
//! never wrong. On a quorum the subscription is on the first URL's node: a release that did not
//! touch it (its holder's majority did not include it) is seen at those reads. A Redis that
//! stops answering (a restart, a failover), or a quorum too few of whose nodes answer, does not
//! end the wait: it reads again with backoff and fails (69) only when `--wait` runs out. A stop
//! signal ends the wait (128+N); nothing is written to Redis either way.
//!
//! Layer 11 of the list in `lib.rs`.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::backend;
use crate::cli::WaitArgs;
use crate::client;
use crate::config::Config;
use crate::error::{Kind, failure, kind_of, redis_kind};
use crate::exit;
use crate::lock::{Keys, QuorumVerdict, State};
use crate::messages;
use crate::signals::{self, Signal};

/// The longest the wait goes without reading the lock while it hears nothing (a subscription
/// lost without a word, or none at all).
const UNHEARD_READ: Duration = Duration::from_secs(30);
/// Past a lock's expiry, how long to wait before reading it (its key is gone by then).
const EXPIRY_MARGIN: Duration = Duration::from_millis(20);
/// The first pause before subscribing again after losing the subscription; doubles up to
/// [`RESUBSCRIBE_CAP`].
const RESUBSCRIBE: Duration = Duration::from_millis(100);
const RESUBSCRIBE_CAP: Duration = Duration::from_secs(5);
/// The first pause before reading again after Redis did not answer (or no quorum did); doubles
/// up to [`OUTAGE_CAP`].
const OUTAGE_FIRST: Duration = Duration::from_millis(100);
const OUTAGE_CAP: Duration = Duration::from_secs(2);

/// Whether an outage was told, and the pause before the next read.
struct Outage {
    told: bool,
    pause: Duration,
}

impl Default for Outage {
    fn default() -> Self {
        Outage {
            told: false,
            pause: OUTAGE_FIRST,
        }
    }
}

enum Msg {
    /// The subscription is in place (again): read the lock, something may have been missed.
    Subscribed,
    /// It could not be made (or was lost): why; the wait goes on with reads at intervals.
    Unheard(String),
    /// The lock changed.
    Changed,
    Signal(Signal),
}

pub fn run(config: &Config, args: &WaitArgs) -> Result<u8> {
    let keys = Keys::new(&config.prefix, &args.key)?;
    let deadline = args.wait.and_then(|d| Instant::now().checked_add(d));
    let (tx, rx) = mpsc::channel();
    signals::deliver(signals::STOP, tx.clone(), Msg::Signal)?;
    let mut store = backend::open(config)?;
    listen(config, keys.watch(), tx);
    // The first read waits for the subscription (or its failure), so that a release between the
    // read and the subscription cannot be missed; `--io-timeout` at most.
    let mut heard = false;
    let first_wait = deadline.map_or(config.io_timeout, |d| {
        config
            .io_timeout
            .min(d.saturating_duration_since(Instant::now()))
    });
    let mut outage = Outage::default();
    match rx.recv_timeout(first_wait) {
        Ok(Msg::Subscribed) => heard = true,
        Ok(Msg::Signal(s)) => return Ok(stopped(config, &keys, s)),
        Ok(Msg::Unheard(why)) => unheard(config, &keys, &why),
        Ok(Msg::Changed) | Err(_) => {}
    }
    loop {
        // Redis gone (a restart, a failover) or no quorum: the wait goes on, reading again with
        // backoff, until it runs out; then that is the error.
        let read = store
            .inspect(&keys)
            .and_then(|state| match state.quorum_verdict() {
                Some(QuorumVerdict::Unknown) => Err(failure(
                    Kind::Unavailable,
                    format!("no quorum for '{}': too few servers answered", keys.name),
                )),
                _ => Ok(state),
            });
        let now = Instant::now();
        let state = match read {
            Ok(state) => {
                outage = Outage::default();
                state
            }
            Err(e) if kind_of(&e) == Kind::Unavailable => {
                if deadline.is_some_and(|d| now >= d) {
                    return Err(e);
                }
                if !outage.told {
                    messages::notice(
                        config,
                        format_args!(
                            "{e:#}; trying again while the wait lasts{}",
                            if deadline.is_none() {
                                " (until Redis answers)"
                            } else {
                                ""
                            }
                        ),
                    );
                    outage.told = true;
                }
                let pause = deadline.map_or(outage.pause, |d| {
                    outage.pause.min(d.saturating_duration_since(now))
                });
                outage.pause = (outage.pause * 2).min(OUTAGE_CAP);
                if let Ok(Msg::Signal(s)) = rx.recv_timeout(pause) {
                    return Ok(stopped(config, &keys, s));
                }
                let _ = store.recover();
                continue;
            }
            Err(e) => return Err(e),
        };
        if free(&state) {
            messages::log(config, || format!("'{}' is free", keys.name));
            return Ok(exit::OK);
        }
        let mut wake = now + UNHEARD_READ;
        if let Ok(ms) = u64::try_from(state.pttl_ms) {
            wake = wake.min(now + Duration::from_millis(ms) + EXPIRY_MARGIN);
        }
        if let Some(d) = deadline {
            if now >= d {
                messages::notice(
                    config,
                    format_args!("'{}' is still busy: {}", keys.name, state.describe()),
                );
                return Ok(args.conflict_exit_code);
            }
            wake = wake.min(d);
        }
        // Whatever arrives, the lock is read again; what piled up meanwhile is read with it.
        match rx.recv_timeout(wake.saturating_duration_since(now)) {
            Ok(Msg::Signal(s)) => return Ok(stopped(config, &keys, s)),
            Ok(Msg::Unheard(why)) if heard => {
                heard = false;
                unheard(config, &keys, &why);
            }
            Ok(Msg::Subscribed) => heard = true,
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(wake - now),
        }
        while let Ok(msg) = rx.try_recv() {
            if let Msg::Signal(s) = msg {
                return Ok(stopped(config, &keys, s));
            }
        }
    }
}

/// Nobody holds the lock and it is not being handed over; on a quorum, a majority free.
fn free(state: &State) -> bool {
    match state.quorum_verdict() {
        Some(verdict) => verdict == QuorumVerdict::Free,
        None => !state.held(),
    }
}

fn stopped(config: &Config, keys: &Keys, s: Signal) -> u8 {
    messages::notice(
        config,
        format_args!(
            "{} while waiting for '{}' to be free; gave up",
            signals::name(s.signo),
            keys.name
        ),
    );
    exit::signal(s.signo)
}

fn unheard(config: &Config, keys: &Keys, why: &str) {
    messages::log(config, || {
        format!(
            "not hearing the changes of '{}' ({why}): reading it at its expiry and every {}s",
            keys.name,
            UNHEARD_READ.as_secs()
        )
    });
}

/// Subscribes to `channel` on a thread of its own and passes on each message as
/// [`Msg::Changed`], subscribing again (with backoff) when the subscription is lost, until the
/// receiver is gone. A refusal (ACL) is told once and ends the thread.
fn listen(config: &Config, channel: String, tx: Sender<Msg>) {
    let config_for_log = config;
    let config = config.clone();
    let spawned = std::thread::Builder::new()
        .name("changes".into())
        .spawn(move || {
            let mut pause = RESUBSCRIBE;
            loop {
                let e = match subscribe(&config, &channel, &tx) {
                    Ok(()) => return,
                    Err(e) => e,
                };
                let refused = kind_of(&e) != Kind::Unavailable;
                if tx.send(Msg::Unheard(format!("{e:#}"))).is_err() || refused {
                    return;
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(RESUBSCRIBE_CAP);
            }
        });
    if let Err(e) = spawned {
        // The reads at the lock's expiry and every UNHEARD_READ still see it free.
        messages::log(config_for_log, || {
            format!("cannot start the listening thread: {e}")
        });
    }
}

/// One subscription: confirmed, then every message passed on, until the connection fails
/// (`Err`) or nobody listens any more (`Ok`).
fn subscribe(config: &Config, channel: &str, tx: &Sender<Msg>) -> Result<()> {
    let mut con = client::subscriber(config)?;
    if let Err((e, why)) =
        client::confirm_subscription(&mut con, redis::cmd("SUBSCRIBE").arg(channel), 1)?
    {
        return Err(failure(
            redis_kind(&e),
            format!("the server refused SUBSCRIBE {channel}: {why}"),
        ));
    }
    if tx.send(Msg::Subscribed).is_err() {
        return Ok(());
    }
    let mut pubsub = con.as_pubsub();
    // A quiet lock is the normal case: block for as long as it takes (the main thread reads
    // the lock at its expiry and every UNHEARD_READ whatever happens here).
    pubsub.set_read_timeout(None)?;
    loop {
        pubsub.get_message()?;
        if tx.send(Msg::Changed).is_err() {
            return Ok(());
        }
    }
}
