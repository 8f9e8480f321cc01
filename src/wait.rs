//! Waiting for a lock without polling and without going deaf to signals.
//!
//! A waiter blocks on its wake list with BLPOP (see the protocol notes in `lock.rs`). A BLPOP
//! cannot be interrupted, so it runs on a blocker thread with its own connection, while the
//! calling thread waits on the one event channel that also carries signals: a Ctrl-C ends the
//! wait at once, and the caller leaves the queue on its own connection. The blocked BLPOP is
//! simply abandoned (it ends by its timeout, or with the process).
//!
//! The caller's own timer decides when a wait is over: Redis checks BLPOP timeouts only on its
//! housekeeping tick (every 100 ms by default), which would make a waiter late for a dead holder's
//! expiry. When the timer fires first, the BLPOP stays outstanding and the next wait reuses it.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

use crate::client::Redis;
use crate::config::Config;
use crate::lock::{Park, Parked};
use crate::signals::{self, Signal};

/// Everything a waiting or supervising redlock reacts to, on one channel.
#[derive(Debug)]
pub enum Event {
    Signal(Signal),
    /// The blocker's BLPOP ended: `Ok(true)` woken by a push, `Ok(false)` timed out.
    Unblocked(Result<bool>),
    /// `exec`: a renewal sent at this instant succeeded.
    Renewed(Instant),
    /// `exec`: a renewal could not reach Redis; the lock holds until its deadline.
    RenewFailed(String),
    /// `exec`: a renewal found another token or no key: the lock is gone.
    Lost(String),
}

/// One BLPOP for the blocker thread.
struct Request {
    key: String,
    timeout: Duration,
}

/// Waits on a wake list for [`crate::lock::acquire`]; stop signals are those in `signals::STOP`.
pub struct Parker<'a> {
    config: &'a Config,
    events: &'a Receiver<Event>,
    tx: Sender<Event>,
    blocker: Option<Sender<Request>>,
    /// A BLPOP was sent and has not reported back yet.
    outstanding: bool,
}

impl<'a> Parker<'a> {
    /// `tx` must feed `events`; the blocker thread reports there.
    pub fn new(config: &'a Config, events: &'a Receiver<Event>, tx: Sender<Event>) -> Self {
        Parker {
            config,
            events,
            tx,
            blocker: None,
            outstanding: false,
        }
    }

    fn request(&mut self, key: &str, timeout: Duration) -> Result<()> {
        let blocker = match &self.blocker {
            Some(b) => b,
            None => self
                .blocker
                .insert(spawn_blocker(self.config.clone(), self.tx.clone())?),
        };
        blocker
            .send(Request {
                key: key.to_string(),
                timeout,
            })
            .map_err(|_| anyhow!("the blocker thread is gone"))?;
        self.outstanding = true;
        Ok(())
    }
}

fn stop_signal(event: &Event) -> Option<i32> {
    match event {
        Event::Signal(s) if signals::STOP.contains(&s.signo) => Some(s.signo),
        _ => None,
    }
}

impl Park for Parker<'_> {
    fn park(&mut self, key: &str, timeout: Duration) -> Result<Parked> {
        let until = Instant::now() + timeout;
        if !self.outstanding {
            self.request(key, timeout)?;
        }
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Unblocked(result)) => {
                    self.outstanding = false;
                    if result? {
                        return Ok(Parked::Woken);
                    }
                    // An earlier, shorter BLPOP ended: block again for the time that is left.
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(Parked::TimedOut);
                    }
                    self.request(key, left)?;
                }
                Ok(event) => {
                    if let Some(sig) = stop_signal(&event) {
                        return Ok(Parked::Interrupted(sig));
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(Parked::TimedOut),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(anyhow!("the event channel closed while waiting"));
                }
            }
        }
    }

    fn interrupted(&mut self) -> Option<i32> {
        while let Ok(event) = self.events.try_recv() {
            if let Event::Unblocked(_) = event {
                // A wake-up noticed here is not lost: the caller is about to look at the lock.
                self.outstanding = false;
            } else if let Some(sig) = stop_signal(&event) {
                return Some(sig);
            }
        }
        None
    }
}

/// The blocker thread: connects on first use, runs one BLPOP per request, reports each result.
fn spawn_blocker(config: Config, tx: Sender<Event>) -> Result<Sender<Request>> {
    let (requests, incoming) = mpsc::channel::<Request>();
    std::thread::Builder::new()
        .name("blocker".into())
        .spawn(move || {
            let mut redis: Option<Redis> = None;
            for req in incoming {
                let result = blpop(&config, &mut redis, &req).or_else(|e| {
                    // A stop and continue (Ctrl-Z, fg) makes the blocked read fail with EINTR, and
                    // a connection can drop. If Redis still answers, report a spurious wake-up:
                    // the caller's next attempt reads the real state (a reservation made for us
                    // meanwhile is in the lock key, not only in the push we may have missed).
                    redis = Redis::connect(&config).ok();
                    if redis.is_some() { Ok(false) } else { Err(e) }
                });
                if tx.send(Event::Unblocked(result)).is_err() {
                    return;
                }
            }
        })
        .context("cannot start the blocker thread")?;
    Ok(requests)
}

fn blpop(config: &Config, redis: &mut Option<Redis>, req: &Request) -> Result<bool> {
    let con = match redis {
        Some(con) => con,
        None => redis.insert(Redis::connect(config)?),
    };
    // BLPOP takes seconds with millisecond resolution; 0 would mean "forever".
    let secs = (req.timeout.as_secs_f64() * 1000.0).ceil().max(1.0) / 1000.0;
    con.set_read_timeout(req.timeout + config.io_timeout)?;
    let popped: Option<(String, String)> = con.call("wait", |c| {
        redis::cmd("BLPOP").arg(&req.key).arg(secs).query(c)
    })?;
    Ok(popped.is_some())
}
