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
//! never wrong. A stop signal ends the wait (128+N); nothing is written to Redis either way.
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
    match rx.recv_timeout(config.io_timeout) {
        Ok(Msg::Subscribed) => heard = true,
        Ok(Msg::Signal(s)) => return Ok(stopped(config, &keys, s)),
        Ok(Msg::Unheard(why)) => unheard(config, &keys, &why),
        Ok(Msg::Changed) | Err(_) => {}
    }
    loop {
        let state = store.inspect(&keys)?;
        if free(&state) {
            messages::log(config, || format!("'{}' is free", keys.name));
            return Ok(exit::OK);
        }
        let now = Instant::now();
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
