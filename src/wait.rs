//! Waiting for a lock without polling and without going deaf to signals.
//!
//! A waiter blocks on its wake list with BLPOP on its one connection (see the protocol notes in
//! `acquire.rs`). A blocked read cannot be cut short by a signal (the signals are taken by the
//! signal thread only, see `signals.rs`), so the signal thread ends a wait itself: while the
//! main thread is parked, a stop signal makes the signal thread leave the queue on a connection of
//! its own and exit with 128+N. A mutex around the parked state makes this exclusive with the main
//! thread going on after its BLPOP: either the signal thread ends a wait in which nothing is held,
//! or the main thread sees the signal on the event channel before it takes the lock.
//!
//! The caller's own clock decides when a wait is over: Redis checks BLPOP timeouts only on its
//! housekeeping tick (every 100 ms by default), which would make a waiter late for a dead holder's
//! expiry. So the socket's read timeout is the wait, the BLPOP's own timeout is a little longer,
//! and a read that times out is followed by a fresh connection (the old one still has the BLPOP).
//!
//! Layer 9 of the list in `lib.rs`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::acquire::{Park, Parked};
use crate::client::Redis;
use crate::config::Config;
use crate::exit;
use crate::lock::Keys;
use crate::messages;
use crate::signals::{self, Signal};

/// Everything a waiting or supervising redlock reacts to, on one channel.
#[derive(Debug)]
pub enum Event {
    Signal(Signal),
    /// `exec`: a renewal sent at this instant succeeded.
    Renewed(Instant),
    /// `exec`: a renewal could not reach Redis; the lock holds until its deadline.
    RenewFailed(String),
    /// `exec`: a renewal found another token or no key: the lock is gone.
    Lost(String),
    /// `exec`: the lock of `token` was taken away from its holder, for `why` (see `notify.rs`).
    TakenAway {
        token: String,
        why: String,
    },
}

/// What the signal thread needs to end a wait: where to leave which queue.
struct ParkedOn {
    config: Config,
    keys: Keys,
    token: String,
}

/// Set while the main thread is blocked in BLPOP; see the module comment.
static PARKED: Mutex<Option<ParkedOn>> = Mutex::new(None);

/// A stop signal that arrived while the main thread was not parked (0: none). Set under the
/// `PARKED` mutex, so that `park` cannot miss it between looking at the event channel (which the
/// signal thread feeds only after `end_parked_wait` returns) and blocking.
static STOP_PENDING: AtomicI32 = AtomicI32::new(0);

/// What to do after a stop signal ended a parked wait, just before [`end_parked_wait`] exits:
/// given the signal and the exit status (`exec --report` writes its line).
type BeforeExit = Box<dyn FnOnce(i32, u8) + Send>;
static BEFORE_EXIT: Mutex<Option<BeforeExit>> = Mutex::new(None);

/// Sets (or, with `None`, clears) what runs before a stop signal ends a parked wait.
pub fn before_exit(f: Option<BeforeExit>) {
    *BEFORE_EXIT.lock().unwrap_or_else(|e| e.into_inner()) = f;
}

/// The event for a signal, made on the signal thread (pass it to `signals::deliver`). A stop
/// signal that finds the main thread parked ends the wait right there: see [`end_parked_wait`].
pub fn signal_event(signal: Signal) -> Event {
    end_parked_wait(&signal);
    Event::Signal(signal)
}

/// If the main thread is parked and `signal` stops a wait, leaves the queue and exits with
/// 128+N: nothing is held. Otherwise returns, and the signal goes on as an event.
fn end_parked_wait(signal: &Signal) {
    if !signals::STOP.contains(&signal.signo) {
        return;
    }
    let parked = PARKED.lock().unwrap_or_else(|e| e.into_inner());
    let Some(on) = parked.as_ref() else {
        STOP_PENDING.store(signal.signo, Ordering::SeqCst);
        return;
    };
    // Holding the mutex: the main thread cannot leave its BLPOP to take the lock meanwhile.
    let left = crate::backend::open(&on.config).and_then(|mut s| s.leave(&on.keys, &on.token));
    messages::notice(
        &on.config,
        format_args!(
            "{} while waiting for '{}'; gave up",
            signals::name(signal.signo),
            on.keys.name
        ),
    );
    if let Err(e) = left {
        // The lease runs out by itself; the queue goes on without us.
        messages::alert(format_args!(
            "cannot leave the queue of '{}': {e:#}",
            on.keys.name
        ));
    }
    let code = exit::signal(signal.signo);
    let last = BEFORE_EXIT.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(f) = last {
        f(signal.signo, code);
    }
    std::process::exit(i32::from(code));
}

/// Parks the main thread for [`crate::acquire::acquire`]; stop signals are those in
/// `signals::STOP`.
pub struct Parker<'a> {
    config: &'a Config,
    events: &'a Receiver<Event>,
}

impl<'a> Parker<'a> {
    /// `events` must receive the signals, made by [`signal_event`].
    pub fn new(config: &'a Config, events: &'a Receiver<Event>) -> Self {
        Parker { config, events }
    }
}

/// The signal number if `event` is a signal that stops a wait.
pub fn stop_signal(event: &Event) -> Option<i32> {
    match event {
        Event::Signal(s) if signals::STOP.contains(&s.signo) => Some(s.signo),
        _ => None,
    }
}

impl Park for Parker<'_> {
    fn park(
        &mut self,
        redis: &mut Redis,
        keys: &Keys,
        token: &str,
        timeout: Duration,
    ) -> Result<Parked> {
        {
            let mut parked = PARKED.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(sig) = self.interrupted() {
                return Ok(Parked::Interrupted(sig));
            }
            match STOP_PENDING.load(Ordering::SeqCst) {
                0 => {}
                sig => return Ok(Parked::Interrupted(sig)),
            }
            *parked = Some(ParkedOn {
                config: self.config.clone(),
                keys: keys.clone(),
                token: token.to_string(),
            });
        }
        let popped = blpop(redis, &keys.wake(token), timeout);
        *PARKED.lock().unwrap_or_else(|e| e.into_inner()) = None;
        match popped {
            Ok(true) => Ok(Parked::Woken),
            Ok(false) => Ok(Parked::TimedOut),
            Err(_) => {
                // Our timeout (the BLPOP is still pending on this connection), a stop and continue
                // (Ctrl-Z, fg: the read fails with EINTR), or a dropped connection: go on with a
                // fresh one if Redis still answers. The caller's next attempt reads the real
                // state; a reservation made for us meanwhile is in the lock key.
                // A quorum goes on without its queue node: the next attempt counts the others.
                match redis.reconnect() {
                    Err(_) if redis.is_quorum_node() => Ok(Parked::TimedOut),
                    other => other.map(|()| Parked::TimedOut),
                }
            }
        }
    }

    fn sleep(&mut self, timeout: Duration) -> Result<Parked> {
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Parked::TimedOut);
            }
            match self.events.recv_timeout(left) {
                Ok(e) => {
                    if let Some(sig) = stop_signal(&e) {
                        return Ok(Parked::Interrupted(sig));
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(Parked::TimedOut),
                // No signal thread: nothing can interrupt us, so just wait.
                Err(RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(left);
                    return Ok(Parked::TimedOut);
                }
            }
        }
    }

    fn interrupted(&mut self) -> Option<i32> {
        self.events.try_iter().find_map(|e| stop_signal(&e))
    }

    fn outage(&mut self, keys: &Keys, error: &anyhow::Error, forever: bool) {
        let until = if forever {
            "until Redis answers again (no --wait limit)"
        } else {
            "until the wait runs out"
        };
        // The server answered before: the hint for a wrong URL would mislead.
        let error = format!("{error:#}").replace(crate::client::START_HINT, "");
        messages::notice(
            self.config,
            format_args!("waiting for '{}': {error}; retrying {until}", keys.name),
        );
    }
}

/// One BLPOP on `key` that ends after `timeout` by our clock: the read timeout is the wait, and
/// the server-side timeout is later so that the server never ends it first.
fn blpop(redis: &mut Redis, key: &str, timeout: Duration) -> Result<bool> {
    let wait = timeout.max(Duration::from_millis(1));
    let server_secs = (wait + SERVER_SLACK).as_secs_f64();
    redis.set_read_timeout(wait)?;
    let popped: Option<(String, String)> = redis.call_waiting("wait", |c| {
        redis::cmd("BLPOP").arg(key).arg(server_secs).query(c)
    })?;
    redis.restore_read_timeout()?;
    Ok(popped.is_some())
}

/// How much later than our own timer the server's BLPOP timeout is set.
const SERVER_SLACK: Duration = Duration::from_secs(1);
