//! The parker: waiting for a lock without polling and without going deaf to signals.
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
//! A tick that only paces the waiter's status lines is the other way round: the server ends it
//! (nil), so the connection stays in use and a push cannot land on a connection we dropped.
//!
//! The status lines themselves ([`status_text`]): on a terminal one line redrawn about once a
//! second (in ticks), elsewhere one at the first wake-up after a second of waiting (within
//! `BLOCK_CAP`) and then one a minute, and a last line when the lock is taken; `-q` silences them
//! (see `messages::progress`).
//!
//! Layer 11 of the list in `lib.rs`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::acquire::{Park, Parked, Waiting};
use crate::client::Redis;
use crate::config::Config;
use crate::events::{Event, stop_signal};
use crate::exit;
use crate::lock::{Grant, Keys, QuorumVerdict};
use crate::messages;
use crate::signals::{self, Signal};

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
    /// stderr is a terminal: the status line is redrawn in place.
    terminal: bool,
}

impl<'a> Parker<'a> {
    /// `events` must receive the signals, made by [`signal_event`].
    pub fn new(config: &'a Config, events: &'a Receiver<Event>) -> Self {
        Parker {
            config,
            events,
            terminal: messages::stderr_is_terminal(),
        }
    }
}

/// How often a waiter on a terminal redraws its status line.
pub const REDRAW_EVERY: Duration = Duration::from_secs(1);
/// How often a waiter whose stderr is not a terminal (a CI log) prints a status line.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

/// "waiting for 'deploy': 2 ahead of you; waited 41s; held by ci@runner-3 (pid 812) for 3m 12s,
/// running './deploy.sh'". Our place and our wait first, the holder last and its note at the
/// very end: a terminal cuts the line to its width, and a long note must not push the place and
/// the wait out of sight. Durations in whole seconds: the line is redrawn every second.
pub fn status_text(w: &Waiting) -> String {
    status_text_named(w, &w.keys.name)
}

/// [`status_text`] for a terminal line of `room` columns: a lock name too long to leave our
/// place and our wait in sight is shortened in its middle (`deploy-pr…-service`), down to
/// [`NAME_MIN`] columns; what is still too long is cut at the end, as any progress line is.
pub fn status_text_within(w: &Waiting, room: usize) -> String {
    let full = status_text(w);
    let name = &w.keys.name;
    // A line cut at its end ends in an ellipsis: one more column.
    let name_room = room.saturating_sub(width(&head(w, "")) + 1).max(NAME_MIN);
    if width(&full) <= room || width(name) <= name_room {
        return full;
    }
    status_text_named(w, &elide_middle(name, name_room))
}

/// The fewest columns a shortened lock name keeps.
const NAME_MIN: usize = 12;

/// What the line must keep in sight: "waiting for 'NAME': 2 ahead of you; waited 41s".
fn head(w: &Waiting, name: &str) -> String {
    let place = match w.ahead {
        Some(0) => "next in line; ".to_string(),
        Some(n) => format!("{n} ahead of you; "),
        None => String::new(),
    };
    format!("waiting for '{name}': {place}waited {}", secs(w.waited))
}

fn width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// `name` in `cols` columns: its start and its end, an ellipsis between.
fn elide_middle(name: &str, cols: usize) -> String {
    use unicode_width::UnicodeWidthChar;
    let keep = cols.saturating_sub(1);
    let (mut front, mut back) = (keep - keep / 2, keep / 2);
    let mut start = String::new();
    for c in name.chars() {
        let w = c.width().unwrap_or(0);
        if w > front {
            break;
        }
        front -= w;
        start.push(c);
    }
    let mut end: Vec<char> = Vec::new();
    for c in name.chars().rev() {
        let w = c.width().unwrap_or(0);
        if w > back {
            break;
        }
        back -= w;
        end.push(c);
    }
    start.push('…');
    start.extend(end.into_iter().rev());
    start
}

fn status_text_named(w: &Waiting, name: &str) -> String {
    let mut s = head(w, name);
    if let Some(state) = w.state {
        s.push_str("; ");
        match &state.holder {
            _ if !state.held() => s.push_str("the lock is free"),
            // A lock with more than one holder: how many, and the first of them.
            _ if state.slots.is_some() => s.push_str(&state.describe_holders()),
            Some(h) => {
                s.push_str(&format!("held by {}", h.who()));
                if let Some(d) = state.held_for() {
                    s.push_str(&format!(" for {}", secs(d)));
                }
                if let Some(p) = &h.preempted {
                    s.push_str(&format!(
                        " (asked to stop by {}: it stops, then hands the lock on)",
                        p.by
                    ));
                } else if w.preempt && !h.preemptible {
                    s.push_str(" (not preemptible: it did not opt in with --preemptible)");
                }
                if !h.note.is_empty() {
                    s.push_str(&format!(", running '{}'", crate::printable::shown(&h.note)));
                }
            }
            None if state.handing_over() => s.push_str("being handed over to the next waiter"),
            None => s.push_str("held by an unknown client (no redlock record)"),
        }
        if state.quorum_verdict() == Some(QuorumVerdict::Unknown) {
            s.push_str(" (no quorum)");
        }
    }
    s
}

/// A duration in whole seconds, for humans: `3m 12s`.
fn secs(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

impl Park for Parker<'_> {
    fn park(
        &mut self,
        redis: &mut Redis,
        keys: &Keys,
        token: &str,
        timeout: Duration,
        tick: bool,
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
        let popped = blpop(redis, &keys.wake(token), timeout, tick);
        *PARKED.lock().unwrap_or_else(|e| e.into_inner()) = None;
        match popped {
            Ok(Some(pushed)) => Ok(Parked::Woken(Grant::parse(&pushed))),
            Ok(None) if tick => Ok(Parked::Ticked),
            Ok(None) => Ok(Parked::TimedOut),
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

    fn report_every(&self) -> Option<Duration> {
        match (self.config.quiet, self.terminal) {
            (true, _) => None,
            (false, true) => Some(REDRAW_EVERY),
            (false, false) => Some(LOG_EVERY),
        }
    }

    fn redraw(&self) -> bool {
        self.terminal
    }

    fn report(&mut self, waiting: &Waiting) {
        let text = if self.terminal {
            status_text_within(waiting, messages::progress_room())
        } else {
            status_text(waiting)
        };
        messages::progress(self.config, &text, self.terminal);
    }

    fn end_report(&mut self, keys: &Keys, acquired: Option<Duration>) {
        // A terminal's line is cleared (the next line starts clean); a log says how it ended.
        match acquired {
            _ if self.terminal => messages::clear_progress(),
            Some(d) => messages::progress(
                self.config,
                &format!("acquired '{}' after {}", keys.name, secs(d)),
                false,
            ),
            None => {}
        }
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
/// the server-side timeout is later so that the server never ends it first. A `tick` is the other
/// way round: the server ends it (nil) and the connection stays usable. Returns what was popped.
fn blpop(redis: &mut Redis, key: &str, timeout: Duration, tick: bool) -> Result<Option<String>> {
    let wait = timeout.max(Duration::from_millis(1));
    let (read, server) = if tick {
        (wait + SERVER_SLACK, wait)
    } else {
        (wait, wait + SERVER_SLACK)
    };
    let server_secs = server.as_secs_f64();
    redis.set_read_timeout(read)?;
    let popped: Option<(String, String)> = redis.call_waiting("wait", |c| {
        redis::cmd("BLPOP").arg(key).arg(server_secs).query(c)
    })?;
    redis.restore_read_timeout()?;
    Ok(popped.map(|(_, pushed)| pushed))
}

/// How much later than our own timer the server's BLPOP timeout is set.
const SERVER_SLACK: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Holder, State};

    fn state(token: Option<&str>, holder: Option<Holder>) -> State {
        State {
            keys: Keys::new("redlock:", "deploy").unwrap(),
            token: token.map(str::to_string),
            pttl_ms: 5000,
            now_ms: 1_000_000 + 192_000,
            fence: 3,
            holder,
            last: None,
            waiters: 3,
            queue: Vec::new(),
            stale: None,
            forced: None,
            quorum: None,
            counters: Default::default(),
            slots: None,
        }
    }

    /// On a terminal, a long lock name gives way so that our place and our wait stay in sight
    /// within the line's room (before: at 80 columns, a 35-character name cut the line at
    /// "1 ahead of you; wa…").
    #[test]
    fn a_long_name_is_shortened_to_keep_the_place_and_the_wait_in_sight() {
        let keys = Keys::new("redlock:", "deploy-production-eu-west-1-service").unwrap();
        let held = state(Some("t"), Some(Holder::default()));
        let w = Waiting {
            keys: &keys,
            state: Some(&held),
            ahead: Some(1),
            waited: Duration::from_secs(41),
            preempt: false,
        };
        // 80 columns, less one and "redlock: ".
        let room = 80 - 1 - 9;
        let line = status_text_within(&w, room);
        let head = line.split("; held").next().unwrap();
        // The rest of the line is cut behind it, with an ellipsis in the last column.
        assert!(width(head) < room, "{line}");
        assert!(
            head.starts_with("waiting for 'deploy-produ")
                && head.ends_with("-1-service': 1 ahead of you; waited 41s")
                && head.matches('…').count() == 1,
            "{line}"
        );
        assert_eq!(elide_middle("abcdefghij", 6), "abc…ij");
        assert_eq!(elide_middle("ab界cdefg界h", 7), "ab…界h");
        // A name that fits is kept whole, and so is a line that fits.
        assert_eq!(status_text_within(&w, 500), status_text(&w));
        let short = Keys::new("redlock:", "deploy").unwrap();
        let w = Waiting { keys: &short, ..w };
        assert!(status_text_within(&w, room).starts_with("waiting for 'deploy': 1 ahead"));
        // However narrow, the name keeps its start and its end.
        let narrow = Waiting { keys: &keys, ..w };
        assert!(status_text_within(&narrow, 30).starts_with("waiting for 'deploy…rvice': "));
    }

    /// The status line names our place, our wait, then the holder, for how long, and what it runs.
    #[test]
    fn status_text_says_who_holds_it_and_our_place() {
        let keys = Keys::new("redlock:", "deploy").unwrap();
        let holder = Holder {
            token: "t".into(),
            host: "runner-3".into(),
            pid: "812".into(),
            user: "ci".into(),
            note: "./deploy.sh".into(),
            acquired_ms: Some(1_000_000),
            ..Holder::default()
        };
        let held = state(Some("t"), Some(holder));
        let w = |state, ahead| Waiting {
            keys: &keys,
            state,
            ahead,
            waited: Duration::from_millis(41_900),
            preempt: false,
        };
        assert_eq!(
            status_text(&w(Some(&held), Some(2))),
            "waiting for 'deploy': 2 ahead of you; waited 41s; held by ci@runner-3 (pid 812) for \
             3m 12s, running './deploy.sh'"
        );
        assert_eq!(
            status_text(&w(Some(&held), Some(0))),
            "waiting for 'deploy': next in line; waited 41s; held by ci@runner-3 (pid 812) for 3m \
             12s, running './deploy.sh'"
        );
        let over = state(Some("~t"), None);
        assert_eq!(
            status_text(&w(Some(&over), None)),
            "waiting for 'deploy': waited 41s; being handed over to the next waiter"
        );
        assert_eq!(
            status_text(&w(None, None)),
            "waiting for 'deploy': waited 41s"
        );
        let free = state(None, None);
        assert_eq!(
            status_text(&w(Some(&free), Some(1))),
            "waiting for 'deploy': 1 ahead of you; waited 41s; the lock is free"
        );
        // A preemptor hears who declined; every waiter hears of a preemption under way.
        let preempting = Waiting {
            preempt: true,
            ..w(Some(&held), Some(0))
        };
        assert_eq!(
            status_text(&preempting),
            "waiting for 'deploy': next in line; waited 41s; held by ci@runner-3 (pid 812) for 3m \
             12s (not preemptible: it did not opt in with --preemptible), running './deploy.sh'"
        );
        let mut asked = held.clone();
        if let Some(h) = asked.holder.as_mut() {
            h.preemptible = true;
            h.preempted = Some(crate::lock::Preemption {
                by: "ops@web (pid 9)".into(),
                at_ms: 1_000_000,
            });
        }
        assert_eq!(
            status_text(&w(Some(&asked), Some(1))),
            "waiting for 'deploy': 1 ahead of you; waited 41s; held by ci@runner-3 (pid 812) for \
             3m 12s (asked to stop by ops@web (pid 9): it stops, then hands the lock on), running \
             './deploy.sh'"
        );
    }
}
