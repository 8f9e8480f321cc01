//! `redlock wait KEY`: blocks until a lock is free, without taking it or joining its queue
//! ("start the smoke tests once the running deploy is done").
//!
//! Woken by the lock's changes, not by polling: a thread of its own subscribes to the lock's
//! channel `PREFIX{NAME}:watch` (every lock script publishes its change there while someone
//! listens, see `event` in `common.lua`) where `exec`'s notifications are heard
//! ([`crate::client::subscriber`]), and the main thread reads the lock once the subscription is
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
//! Layer 13 of the list in `lib.rs`.

use std::ops::ControlFlow;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::acquire::Outage;
use crate::backend;
use crate::cli::WaitArgs;
use crate::config::Config;
use crate::error::{Kind, failure, kind_of};
use crate::events::Backoff;
use crate::exit;
use crate::follow::{self, Lost, Plan};
use crate::lock::{Keys, QuorumVerdict, State};
use crate::messages;
use crate::signals::{self, Signal};
use crate::store::Store;

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
    let store = backend::open(config)?;
    listen(config, keys.watch(), tx);
    let mut waiter = Waiter {
        config,
        keys,
        deadline,
        rx,
        store,
        heard: false,
        outage: Outage::default(),
    };
    // The first read waits for the subscription (or its failure), so that a release between the
    // read and the subscription cannot be missed; `--io-timeout` at most.
    let first_wait = deadline.map_or(config.io_timeout, |d| {
        config
            .io_timeout
            .min(d.saturating_duration_since(Instant::now()))
    });
    match waiter.rx.recv_timeout(first_wait) {
        Ok(Msg::Subscribed) => waiter.heard = true,
        Ok(Msg::Signal(s)) => return Ok(waiter.stopped(s)),
        Ok(Msg::Unheard(why)) => waiter.unheard(&why),
        Ok(Msg::Changed) | Err(_) => {}
    }
    loop {
        let state = match waiter.read() {
            ControlFlow::Continue(Some(state)) => state,
            ControlFlow::Continue(None) => continue,
            ControlFlow::Break(end) => return end,
        };
        let now = Instant::now();
        if free(&state) {
            messages::log(config, || format!("'{}' is free", waiter.keys.name));
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
                    format_args!("'{}' is still busy: {}", waiter.keys.name, state.describe()),
                );
                return Ok(args.conflict_exit_code);
            }
            wake = wake.min(d);
        }
        if let Some(s) = waiter.until(now, wake) {
            return Ok(waiter.stopped(s));
        }
    }
}

/// One `redlock wait`, between its reads of the lock.
struct Waiter<'a> {
    config: &'a Config,
    keys: Keys,
    deadline: Option<Instant>,
    rx: Receiver<Msg>,
    store: Box<dyn Store>,
    /// The subscription is in place: the lock's changes are heard.
    heard: bool,
    outage: Outage,
}

impl Waiter<'_> {
    /// Reads the lock: `Some` state, `None` to read again after an outage's pause, or the end
    /// of the wait (a signal, or the outage outlasted it). Redis gone (a restart, a failover) or
    /// no quorum: the wait goes on, reading again with backoff, until it runs out; then that is
    /// the error.
    fn read(&mut self) -> ControlFlow<Result<u8>, Option<State>> {
        let keys = &self.keys;
        let read = self
            .store
            .inspect(keys)
            .and_then(|state| match state.quorum_verdict() {
                Some(QuorumVerdict::Unknown) => Err(failure(
                    Kind::Unavailable,
                    format!("no quorum for '{}': too few servers answered", keys.name),
                )),
                _ => Ok(state),
            });
        let now = Instant::now();
        let e = match read {
            Ok(state) => {
                self.outage = Outage::default();
                return ControlFlow::Continue(Some(state));
            }
            Err(e) if kind_of(&e) == Kind::Unavailable => e,
            Err(e) => return ControlFlow::Break(Err(e)),
        };
        if self.deadline.is_some_and(|d| now >= d) {
            return ControlFlow::Break(Err(e));
        }
        if !self.outage.told {
            let forever = if self.deadline.is_none() {
                " (until Redis answers)"
            } else {
                ""
            };
            messages::notice(
                self.config,
                format_args!("{e:#}; trying again while the wait lasts{forever}"),
            );
            self.outage.told = true;
        }
        let pause = self.outage.backoff.pause();
        let pause = self
            .deadline
            .map_or(pause, |d| pause.min(d.saturating_duration_since(now)));
        if let Ok(Msg::Signal(s)) = self.rx.recv_timeout(pause) {
            return ControlFlow::Break(Ok(self.stopped(s)));
        }
        let _ = self.store.recover();
        ControlFlow::Continue(None)
    }

    /// Waits from `now` until `wake` or the lock's next change; `Some` stop signal if one came.
    /// Whatever arrives, the lock is read again; what piled up meanwhile is read with it.
    fn until(&mut self, now: Instant, wake: Instant) -> Option<Signal> {
        match self.rx.recv_timeout(wake.saturating_duration_since(now)) {
            Ok(Msg::Signal(s)) => return Some(s),
            Ok(Msg::Unheard(why)) if self.heard => {
                self.heard = false;
                self.unheard(&why);
            }
            Ok(Msg::Subscribed) => self.heard = true,
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(wake - now),
        }
        self.rx.try_iter().find_map(|msg| match msg {
            Msg::Signal(s) => Some(s),
            _ => None,
        })
    }

    fn stopped(&self, s: Signal) -> u8 {
        messages::notice(
            self.config,
            format_args!(
                "{} while waiting for '{}' to be free; gave up",
                signals::name(s.signo),
                self.keys.name
            ),
        );
        exit::signal(s.signo)
    }

    fn unheard(&self, why: &str) {
        messages::log(self.config, || {
            format!(
                "not hearing the changes of '{}' ({why}): reading it at its expiry and every {}s",
                self.keys.name,
                UNHEARD_READ.as_secs()
            )
        });
    }
}

/// Nobody holds the lock and it is not being handed over; on a quorum, a majority free.
fn free(state: &State) -> bool {
    match state.quorum_verdict() {
        Some(verdict) => verdict == QuorumVerdict::Free,
        None => !state.held(),
    }
}

/// Passes on the lock's changes as they come ([`Msg::Changed`]), from `channel` on a thread of
/// its own, until the receiver is gone. A refusal (ACL) is told once and ends the thread.
fn listen(config: &Config, channel: String, tx: Sender<Msg>) {
    let plan = Plan {
        thread: "changes",
        channels: vec![channel],
        pattern: None,
        // A quiet lock is the normal case: block for as long as it takes (the main thread reads
        // the lock at its expiry and every UNHEARD_READ whatever happens here).
        ping: None,
        backoff: Backoff::new(RESUBSCRIBE, RESUBSCRIBE_CAP),
        reset: false,
    };
    if let Err(e) = follow::follow(config, plan, Changes(tx)) {
        // The reads at the lock's expiry and every UNHEARD_READ still see it free.
        messages::log(config, || format!("cannot start the listening thread: {e}"));
    }
}

/// What the follower of `wait` hears, passed on to its main thread.
struct Changes(Sender<Msg>);

impl follow::Listener for Changes {
    fn subscribed(&mut self) -> ControlFlow<()> {
        follow::passed(self.0.send(Msg::Subscribed))
    }

    fn message(&mut self, _: &redis::Msg) -> ControlFlow<()> {
        follow::passed(self.0.send(Msg::Changed))
    }

    fn lost(&mut self, lost: Lost, _: Duration) -> ControlFlow<()> {
        let e = lost.into_error(|to, why| format!("the server refused SUBSCRIBE {to}: {why}"));
        let refused = kind_of(&e) != Kind::Unavailable;
        if self.0.send(Msg::Unheard(format!("{e:#}"))).is_err() || refused {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}
