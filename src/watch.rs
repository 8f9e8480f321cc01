//! `redlock status --watch [KEY...]`: following locks as they change, until a signal.
//!
//! Changes arrive by pub/sub: every lock script publishes one JSON object on the lock's channel
//! `PREFIX{NAME}:watch` in the same atomic step as the change (see `src/scripts/`). A thread of
//! its own ([`listen`]) subscribes to the named locks' channels, or with no KEY to the pattern
//! `PREFIX{*}:watch` (the prefix glob-escaped), so that locks created later show up too. It
//! subscribes where `exec`'s notifications are heard ([`crate::client::subscriber`]): the server,
//! Sentinel's master (asked again on every reconnect), a quorum's queue node (the first URL), or
//! one node of a Cluster (which passes a PUBLISH on to every node). Its reads time out every
//! [`PING_EVERY`] of silence, and a PING then proves the server alive within `--io-timeout`; a
//! lost or silent subscription is made again with backoff, and the user is told.
//!
//! The main thread owns the output and a store of its own, from which it reads every watched lock
//! once a second ([`REFRESH`]): for the countdowns on a terminal, for a quorum's per-node view,
//! and to notice what nobody publishes. A lock whose holder vanishes without a `released` (its
//! TTL ran out, and no acquisition has come since to say so) is reported as `expired` by the
//! watcher itself, from the holder record the meta hash keeps; the `expired` that the next
//! acquisition's script publishes for the same token is then not shown a second time.
//!
//! Anyone who may PUBLISH can send anything, as fast as they like; the watcher stays bounded.
//! At most [`BACKLOG`] messages and [`BACKLOG_BYTES`] of them wait between the threads (past
//! that they are dropped, counted and the count told once a refresh): a stdout nobody reads
//! stops the main thread, never the listener. A message over [`PAYLOAD_MAX`] is no event of
//! redlock's and is dropped as it arrives (counted and told the same way). A holder only heard
//! of (an `acquired`) is remembered until a read confirms it, for [`UNCONFIRMED_READS`] reads at
//! most and [`UNCONFIRMED_MAX`] of them at once, and is never reported expired without Redis's
//! word. Published strings are cut to [`FIELD_MAX`](event::FIELD_MAX) characters, times clamped
//! to years 1970 to 9999 and added without overflow (see `watch/event.rs`). On a terminal a
//! change re-reads the locks at most every [`COALESCE`].
//!
//! Three outputs ([`Mode`]): on a terminal, the status table redrawn in place on the alternate
//! screen with the latest changes below it (the terminal is restored on every way out); with
//! `--json`, one JSON object per change, flushed per line; otherwise (a log file, a pipe) one
//! line per change. Everything in an event came from Redis, which anyone may write to: strings
//! are escaped for the terminal ([`printable`]) and notes redacted, in every mode.
//!
//! Layer 13 of the list in `lib.rs`.

use std::collections::{HashMap, VecDeque};
use std::io::{IsTerminal, Write as _};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;
use serde_json::{Map, Value};

use crate::backend;
use crate::cli::{StatusArgs, StatusFormat};
use crate::config::Config;
use crate::error::{Kind, failure, kind_of, redis_kind, usage};
use crate::events::Backoff;
use crate::exit;
use crate::follow::{self, Lost, Plan};
use crate::lock::{self, Ended, Keys, State, fingerprint};
use crate::messages;
use crate::output::{human_ms, rfc3339};
use crate::printable::printable;
use crate::signals::{self, Signal};
use crate::store::Store;

mod event;

use event::{clamp_time, describe, expiry, integer, parse_event};

/// How often the watched locks are read again.
const REFRESH: Duration = Duration::from_secs(1);
/// How long a subscription may stay silent before a PING checks that the server is there.
const PING_EVERY: Duration = Duration::from_secs(1);
/// The first pause before subscribing (or reading) again after a failure; doubles up to
/// [`RETRY_CAP`].
const RETRY: Duration = Duration::from_millis(200);
const RETRY_CAP: Duration = Duration::from_secs(5);
/// How many changes the terminal view lists below the table.
const RECENT: usize = 10;
/// How many expiries the watcher remembers having reported, so as not to report one twice.
const REMEMBERED: usize = 1024;
/// How many locks that vanished from the listing one read looks up by name (see [`Watcher::read`]).
const MISSING_PER_READ: usize = 100;
/// How many holders the watcher remembers; past that, those whose hold is over are forgotten.
const SEEN_MAX: usize = 10_000;
/// How many holders heard of (an `acquired` event) but not yet confirmed by a read the watcher
/// remembers: anyone may publish, so past that the oldest is forgotten.
const UNCONFIRMED_MAX: usize = 100;
/// How many reads may pass without confirming a holder heard of before it is forgotten.
const UNCONFIRMED_READS: u8 = 3;
/// How many changes may wait for the main thread; past that the listener drops them and counts.
const BACKLOG: usize = 1024;
/// How many bytes of messages may wait for the main thread (with [`BACKLOG`], whichever comes
/// first): a published message may be up to 512 MB (Redis's `proto-max-bulk-len`), and 150
/// messages of 8 MB held for a stdout nobody reads took 779 MB.
const BACKLOG_BYTES: usize = 4 << 20;
/// The largest message taken as an event: those the scripts publish are a few hundred bytes (a
/// note is cut to 200 characters where it is written, and every field is short).
const PAYLOAD_MAX: usize = 64 << 10;
/// On a terminal, a change re-reads the locks at most this often.
const COALESCE: Duration = Duration::from_millis(250);

/// What the main loop waits for.
enum Msg {
    Signal(Signal),
    /// The subscription is made (again).
    Listening,
    /// The subscription failed or was lost; the next try is after this pause.
    Deaf(String, Duration),
    /// The server refused the subscription: trying again cannot help.
    Refused(anyhow::Error),
    /// A message on a watched channel.
    Event {
        channel: String,
        payload: Vec<u8>,
    },
}

/// The changes the listener passed on that the main thread has not taken yet, and those it
/// dropped because too many were waiting (a flood, or a stdout nobody reads): the watcher's
/// memory stays bounded, and the user is told how many were missed.
#[derive(Default)]
struct Backlog {
    pending: AtomicUsize,
    /// The payload bytes of the `pending` messages.
    bytes: AtomicUsize,
    missed: AtomicU64,
    /// Messages over [`PAYLOAD_MAX`], dropped as they arrived.
    oversized: AtomicU64,
}

/// Where the changes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// stdout is a terminal: the table, redrawn in place.
    Screen,
    /// `--json`: JSON Lines.
    Json,
    /// Anything else: one line per change.
    Lines,
}

/// What the listener subscribes to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Subscription {
    Channels(Vec<String>),
    Pattern(String),
}

/// The channel on which `keys`' changes are published.
fn channel_of(keys: &Keys) -> String {
    keys.watch()
}

/// The pattern that matches the channel of every lock under `prefix`, and no other.
fn pattern_of(prefix: &str) -> String {
    format!("{}{{*}}:watch", lock::glob_escape(prefix))
}

/// The lock a channel belongs to, if it is a lock's watch channel under `prefix`.
fn lock_of(prefix: &str, channel: &str) -> Option<Keys> {
    let name = channel
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix("}:watch")?;
    Keys::new(prefix, name).ok()
}

/// Runs `status --watch`: `--format table` (the default) is the view on a terminal and lines
/// elsewhere, `--format json` (or `--json`) JSON Lines. Returns only on a signal (128 + its
/// number), a closed stdout (0) or an error.
pub fn run(config: &Config, args: &StatusArgs) -> Result<u8> {
    let mode = match args.format() {
        StatusFormat::Json => Mode::Json,
        StatusFormat::Table if std::io::stdout().is_terminal() => Mode::Screen,
        StatusFormat::Table => Mode::Lines,
        StatusFormat::Prometheus => {
            return Err(usage(
                "--watch cannot be used with --format prometheus (metrics are a snapshot for a \
                 scrape: run `status --format prometheus` from cron instead)",
            ));
        }
    };
    let named: Vec<Keys> = args
        .keys
        .iter()
        .map(|k| Keys::new(&config.prefix, k))
        .collect::<Result<_>>()?;
    let (tx, rx) = mpsc::channel();
    let mut wanted = signals::STOP.to_vec();
    if mode == Mode::Screen {
        wanted.push(libc::SIGWINCH);
    }
    // Before any other thread starts, so that they all inherit the blocked mask.
    signals::deliver(&wanted, tx.clone(), Msg::Signal)?;
    let store = backend::open(config)?;
    let subscription = if named.is_empty() {
        Subscription::Pattern(pattern_of(&config.prefix))
    } else {
        Subscription::Channels(named.iter().map(channel_of).collect())
    };
    let mut watcher = Watcher::new(config, args, named, mode, Some(store));
    // Subscribing first: a change made while the first read is on its way waits in the channel.
    listen(config, subscription, tx, Arc::clone(&watcher.backlog))?;
    // The first read must succeed, as for `status`: a watcher that never saw anything tells
    // nothing.
    watcher.read()?;
    let _screen = (mode == Mode::Screen).then(Screen::enter);
    watcher.render()?;
    match watcher.follow(&rx) {
        Ok(code) => Ok(code),
        Err(e) if is_broken_pipe(&e) => Ok(exit::OK),
        Err(e) => Err(e),
    }
}

/// The terminal's alternate screen, with the cursor hidden and lines cut rather than wrapped;
/// dropping it gives the terminal back as it was (the command's output vanishes with it, as
/// `watch`'s does). `panic = "abort"` skips it, but nothing here panics.
struct Screen;

impl Screen {
    fn enter() -> Screen {
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "\x1b[?1049h\x1b[?25l\x1b[?7l").and_then(|()| out.flush());
        Screen
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "\x1b[?7h\x1b[?25h\x1b[?1049l").and_then(|()| out.flush());
    }
}

/// Whether the subscription is made.
enum Listening {
    Yes,
    /// Not (yet, or any more): why, if it failed.
    Not(Option<String>),
}

/// A holder the watcher has seen, from a refresh or an `acquired` event.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    fingerprint: String,
    fence: String,
    user: String,
    host: String,
    pid: String,
    acquired_ms: Option<i64>,
    /// When it expires if nobody renews it (the server's clock).
    expires_ms: Option<i64>,
    /// Its end (released, forced, expired) was reported or is known to be on its way.
    ended: bool,
    /// Heard of by an `acquired` event only (anyone may publish one): `Some(n)` with the order
    /// it was heard in and how many reads have not confirmed it yet. A read that finds the lock
    /// held with this token, or its record, confirms it (`None`).
    unconfirmed: Option<(u64, u8)>,
}

impl Seen {
    /// The `expired` event the watcher tells for this hold of lock `name`, which ran out `at`.
    fn expired(self, name: String, at: i64) -> Map<String, Value> {
        let mut event = Map::new();
        event.insert("event".into(), "expired".into());
        event.insert("at_ms".into(), at.into());
        event.insert("token".into(), self.fingerprint.into());
        event.insert("fence".into(), self.fence.into());
        event.insert("user".into(), self.user.into());
        event.insert("host".into(), self.host.into());
        event.insert("pid".into(), self.pid.into());
        if let Some(from) = self.acquired_ms {
            event.insert("held_ms".into(), at.saturating_sub(from).max(0).into());
        }
        event.insert("lock".into(), name.into());
        event.insert("time".into(), rfc3339(at).into());
        event
    }
}

struct Watcher<'a> {
    config: &'a Config,
    args: &'a StatusArgs,
    /// The locks named on the command line (none: every lock under the prefix).
    named: Vec<Keys>,
    mode: Mode,
    /// `None` after a read failed: connected again at the next refresh.
    store: Option<Box<dyn Store>>,
    /// The last read, for the terminal's table.
    states: Vec<State>,
    /// The last holder seen of each lock, by name.
    seen: HashMap<String, Seen>,
    /// The expiries already reported, as (lock, fingerprint), oldest first.
    reported: VecDeque<(String, String)>,
    /// The latest changes as lines, for the terminal, oldest first.
    recent: VecDeque<String>,
    listening: Listening,
    /// Why the last read failed, and when to read again; `None` while reads succeed.
    reading: Option<(String, Duration)>,
    /// Shared with the listener: the changes waiting, and those dropped.
    backlog: Arc<Backlog>,
    /// When the locks were last read (on a terminal a change re-reads them, not more often
    /// than [`COALESCE`]).
    last_read: Instant,
    /// Counts the holders heard of, to forget the oldest unconfirmed first.
    heard_seq: u64,
    /// The holders heard of, as (order, lock), oldest first, at most [`UNCONFIRMED_MAX`]: every
    /// unconfirmed record is here (some entries are stale: confirmed or replaced since), so
    /// forgetting the oldest entry's record, if still unconfirmed, keeps their number bounded
    /// at no more than a constant cost per event.
    heard: VecDeque<(u64, String)>,
}

impl<'a> Watcher<'a> {
    /// A watcher that has seen nothing yet; `store: None` only in unit tests that feed it events.
    fn new(
        config: &'a Config,
        args: &'a StatusArgs,
        named: Vec<Keys>,
        mode: Mode,
        store: Option<Box<dyn Store>>,
    ) -> Self {
        Watcher {
            config,
            args,
            named,
            mode,
            store,
            states: Vec::new(),
            seen: HashMap::new(),
            reported: VecDeque::new(),
            recent: VecDeque::new(),
            listening: Listening::Not(None),
            reading: None,
            backlog: Arc::default(),
            last_read: Instant::now(),
            heard_seq: 0,
            heard: VecDeque::new(),
        }
    }
}

impl Watcher<'_> {
    /// Waits for changes, signals and refreshes until a signal ends it.
    fn follow(&mut self, rx: &mpsc::Receiver<Msg>) -> Result<u8> {
        let mut next = Instant::now() + REFRESH;
        loop {
            let msg = match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(msg) => Some(msg),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(failure(
                        Kind::Protocol,
                        "internal error: the listener is gone",
                    ));
                }
            };
            let mut changed = false;
            if let Some(msg) = msg {
                if let Some(code) = self.handle(msg, &mut changed)? {
                    return Ok(code);
                }
                // Everything already waiting, before one redraw (bounded: a flood of changes
                // still lets the refresh and the screen through).
                for _ in 0..100 {
                    let Ok(msg) = rx.try_recv() else { break };
                    if let Some(code) = self.handle(msg, &mut changed)? {
                        return Ok(code);
                    }
                }
            }
            if changed && self.mode == Mode::Screen && self.reading.is_none() {
                // A change is shown with the lock as it is now, read again soon (a flood of
                // changes does not make a read of every lock each).
                next = next.min(self.last_read + COALESCE);
            }
            if Instant::now() >= next {
                next = Instant::now() + self.tick()?;
                changed = true;
            }
            if changed {
                self.render()?;
            }
        }
    }

    /// Handles one message; `Some(code)` ends the watch.
    fn handle(&mut self, msg: Msg, changed: &mut bool) -> Result<Option<u8>> {
        match msg {
            Msg::Signal(s) if s.signo == libc::SIGWINCH => *changed = true,
            Msg::Signal(s) => return Ok(Some(exit::signal(s.signo))),
            Msg::Refused(e) => return Err(e),
            Msg::Listening => {
                let again = matches!(self.listening, Listening::Not(Some(_)));
                self.listening = Listening::Yes;
                let what = match &self.named[..] {
                    [] => format!("every lock under prefix '{}'", self.config.prefix),
                    keys => keys
                        .iter()
                        .map(|k| format!("'{}'", k.name))
                        .collect::<Vec<_>>()
                        .join(", "),
                };
                self.say(if again {
                    format!("listening for changes to {what} again")
                } else {
                    format!("listening for changes to {what}")
                });
                *changed = true;
            }
            Msg::Deaf(why, pause) => {
                // Said when it starts failing or fails otherwise, not at every try.
                if !matches!(&self.listening, Listening::Not(Some(before)) if *before == why) {
                    self.say(format!(
                        "not listening for changes ({why}); trying again in {}",
                        human_ms(pause)
                    ));
                }
                self.listening = Listening::Not(Some(why));
                *changed = true;
            }
            Msg::Event { channel, payload } => {
                self.backlog.pending.fetch_sub(1, Ordering::AcqRel);
                self.backlog
                    .bytes
                    .fetch_sub(payload.len(), Ordering::AcqRel);
                let Some(keys) = self.keys_of(&channel) else {
                    return Ok(None);
                };
                let Some(event) = parse_event(&keys.name, &payload) else {
                    messages::log(self.config, || {
                        format!("ignored a message on {}", printable(&channel))
                    });
                    return Ok(None);
                };
                if self.heard(&keys.name, &event) {
                    self.emit(&event)?;
                    *changed = true;
                }
            }
        }
        Ok(None)
    }

    /// The lock a message's channel belongs to, if it is one we watch.
    fn keys_of(&self, channel: &str) -> Option<Keys> {
        if self.named.is_empty() {
            return lock_of(&self.config.prefix, channel);
        }
        self.named
            .iter()
            .find(|k| channel_of(k) == channel)
            .cloned()
    }

    /// Takes in a published event; whether to show it (an expiry already reported is not).
    fn heard(&mut self, name: &str, event: &Map<String, Value>) -> bool {
        let field = |k: &str| event.get(k).and_then(Value::as_str).unwrap_or_default();
        let kind = field("event");
        let token = field("token").to_string();
        match kind {
            "acquired" => {
                let at = integer(event.get("at_ms")).map(clamp_time);
                let ttl = integer(event.get("ttl_ms"));
                self.heard_seq += 1;
                self.forget_unconfirmed(name);
                self.seen.insert(
                    name.to_string(),
                    Seen {
                        fingerprint: token,
                        fence: field("fence").to_string(),
                        user: field("user").to_string(),
                        host: field("host").to_string(),
                        pid: field("pid").to_string(),
                        acquired_ms: at,
                        expires_ms: expiry(at, ttl),
                        ended: false,
                        unconfirmed: Some((self.heard_seq, 0)),
                    },
                );
                true
            }
            "released" | "forced" | "expired" => {
                if let Some(seen) = self.seen.get_mut(name)
                    && seen.fingerprint == token
                {
                    seen.ended = true;
                }
                if kind == "expired" {
                    return self.remember_expiry(name, &token);
                }
                true
            }
            _ => true,
        }
    }

    /// Notes that a holder of `name` was just heard of (as [`Self::heard_seq`]); past
    /// [`UNCONFIRMED_MAX`], the oldest heard of is forgotten if no read confirmed it yet.
    fn forget_unconfirmed(&mut self, name: &str) {
        self.heard.push_back((self.heard_seq, name.to_string()));
        while self.heard.len() > UNCONFIRMED_MAX {
            let Some((seq, oldest)) = self.heard.pop_front() else {
                break;
            };
            if self
                .seen
                .get(&oldest)
                .is_some_and(|s| matches!(s.unconfirmed, Some((heard, _)) if heard == seq))
            {
                self.seen.remove(&oldest);
            }
        }
    }

    /// Records that the expiry of `token`'s hold of `name` was reported; false if it already was.
    fn remember_expiry(&mut self, name: &str, token: &str) -> bool {
        let entry = (name.to_string(), token.to_string());
        if self.reported.contains(&entry) {
            return false;
        }
        if self.reported.len() == REMEMBERED {
            self.reported.pop_front();
        }
        self.reported.push_back(entry);
        true
    }

    /// Reads every watched lock again; returns when to do it next (later after a failure).
    fn tick(&mut self) -> Result<Duration> {
        // Said at most once a refresh, however long a flood lasts.
        let missed = self.backlog.missed.swap(0, Ordering::AcqRel);
        if missed > 0 {
            self.say(format!(
                "missed {missed} change{} (the watcher fell behind)",
                if missed == 1 { "" } else { "s" }
            ));
        }
        let oversized = self.backlog.oversized.swap(0, Ordering::AcqRel);
        if oversized > 0 {
            self.say(format!(
                "ignored {oversized} message{} over {} KiB (no change redlock publishes is that \
                 large)",
                if oversized == 1 { "" } else { "s" },
                PAYLOAD_MAX >> 10
            ));
        }
        self.last_read = Instant::now();
        match self.read() {
            Ok(()) => {
                if self.reading.take().is_some() {
                    self.say("reading the locks again".to_string());
                }
                Ok(REFRESH)
            }
            Err(e) if kind_of(&e) == Kind::Unavailable => {
                // The connection may be in any state: the next read connects afresh.
                self.store = None;
                let pause = self
                    .reading
                    .as_ref()
                    .map_or(RETRY, |(_, p)| (*p * 2).min(RETRY_CAP))
                    .max(REFRESH);
                let why = format!("{e:#}");
                // Said when it starts failing or fails otherwise, not at every try.
                if self
                    .reading
                    .as_ref()
                    .is_none_or(|(before, _)| *before != why)
                {
                    self.say(format!(
                        "cannot read the locks ({why}); trying again in {}",
                        human_ms(pause)
                    ));
                }
                self.reading = Some((why, pause));
                Ok(pause)
            }
            Err(e) => Err(e),
        }
    }

    /// Reads the watched locks, reporting holders that vanished without a word as expired.
    fn read(&mut self) -> Result<()> {
        let store = match &mut self.store {
            Some(store) => store,
            None => self.store.insert(backend::open(self.config)?),
        };
        let mut states = if self.named.is_empty() {
            store.inspect_all(&self.config.prefix)?
        } else {
            store.inspect_many(&self.named)?
        };
        // A lock that is gone from the listing (free, its key deleted or expired) is read by
        // name if someone was seen holding it: its meta hash tells how the hold ended.
        let missing: Vec<Keys> = self
            .seen
            .iter()
            .filter(|(name, s)| !s.ended && !states.iter().any(|st| &st.keys.name == *name))
            .filter_map(|(name, _)| Keys::new(&self.config.prefix, name).ok())
            // Bounded: anyone may publish `acquired` for locks that do not exist.
            .take(MISSING_PER_READ)
            .collect();
        let gone = store.inspect_many(&missing)?;
        for state in states.iter().chain(&gone) {
            if let Some(event) = self.observe(state) {
                self.emit(&event)?;
            }
        }
        // A holder only heard of that reads keep not confirming was never there (a fake
        // `acquired`), or is long gone: forgotten.
        self.seen.retain(|_, s| match &mut s.unconfirmed {
            Some((_, misses)) => {
                *misses += 1;
                *misses < UNCONFIRMED_READS
            }
            None => true,
        });
        if self.seen.len() > SEEN_MAX {
            self.seen.retain(|_, s| !s.ended);
        }
        if self.named.is_empty() {
            // As `status` lists them: what is held (or, on a quorum, split or unknown).
            states.retain(|s| {
                s.held() || matches!(s.quorum_verdict(), Some(v) if v != lock::QuorumVerdict::Free)
            });
        }
        self.states = states;
        Ok(())
    }

    /// Compares a lock as read with the holder seen before it: an `expired` event of our own
    /// when that holder's hold ran out and nobody said so.
    fn observe(&mut self, state: &State) -> Option<Map<String, Value>> {
        let name = state.keys.name.clone();
        if state.handing_over() {
            // Reserved for the first waiter: nobody holds it; its `acquired` will say who does.
            return None;
        }
        if state.held() {
            self.note_holder(name, state);
            return None;
        }
        let seen = self.seen.get_mut(&name).filter(|s| !s.ended)?;
        let at = match state.last.as_deref() {
            // The meta hash knows this hold: its end is what the record says (a release or a
            // forced release publishes its own event).
            Some(last) if fingerprint(&last.token) == seen.fingerprint => {
                seen.unconfirmed = None;
                match (last.ended(), state.forced_of(&last.token)) {
                    (Some((Ended::Expired, at)), None) => at,
                    _ => {
                        seen.ended = true;
                        return None;
                    }
                }
            }
            // A later holder's record: their scripts said what became of this one.
            Some(last) if last.acquired_ms > seen.acquired_ms => {
                seen.ended = true;
                return None;
            }
            // An earlier holder's: this read is older than the hold we heard of (on a quorum, a
            // node the acquisition has not reached yet). The next read tells.
            Some(_) => return None,
            // Only heard of, and Redis knows nothing of it: nothing to report (the next reads
            // confirm it or forget it).
            None if seen.unconfirmed.is_some() => return None,
            // No record (meta expired, or a holder other than redlock): expired once its time
            // ran out by the server's clock; without a TTL to go by, nothing can be told.
            None => match seen.expires_ms {
                Some(at) if at <= state.now_ms => at,
                Some(_) => return None,
                None => {
                    seen.ended = true;
                    return None;
                }
            },
        };
        seen.ended = true;
        let seen = seen.clone();
        if !self.remember_expiry(&name, &seen.fingerprint) {
            return None;
        }
        Some(seen.expired(name, at))
    }

    /// Remembers the holder a read found for lock `name` (or, the same one, that it is
    /// confirmed and when it now expires).
    fn note_holder(&mut self, name: String, state: &State) {
        let Some(token) = state.token.as_deref() else {
            return;
        };
        let fp = fingerprint(token);
        if self.seen.get(&name).is_none_or(|s| s.fingerprint != fp) {
            let h = state.holder.as_ref();
            self.seen.insert(
                name,
                Seen {
                    fingerprint: fp,
                    fence: state.fence.to_string(),
                    user: h.map(|h| h.user.clone()).unwrap_or_default(),
                    host: h.map(|h| h.host.clone()).unwrap_or_default(),
                    pid: h.map(|h| h.pid.clone()).unwrap_or_default(),
                    acquired_ms: h.and_then(|h| h.acquired_ms),
                    expires_ms: expiry(Some(state.now_ms), Some(state.pttl_ms)),
                    ended: false,
                    unconfirmed: None,
                },
            );
        } else if let Some(s) = self.seen.get_mut(&name) {
            s.unconfirmed = None;
            if state.pttl_ms >= 0 {
                // Renewed since: it expires later.
                s.expires_ms = expiry(Some(state.now_ms), Some(state.pttl_ms));
            }
        }
    }

    /// Shows one change as the mode wants it.
    fn emit(&mut self, event: &Map<String, Value>) -> Result<()> {
        match self.mode {
            Mode::Json => write_stdout(&format!("{}\n", Value::Object(event.clone()))),
            Mode::Lines => write_stdout(&format!("{}\n", describe(event))),
            Mode::Screen => {
                if self.recent.len() == RECENT {
                    self.recent.pop_front();
                }
                self.recent.push_back(describe(event));
                Ok(())
            }
        }
    }

    /// Tells the user about the connection: a notice, or on the terminal a line of the view
    /// (a line on stderr would be drawn over).
    fn say(&mut self, text: String) {
        if self.mode == Mode::Screen {
            if self.recent.len() == RECENT {
                self.recent.pop_front();
            }
            self.recent
                .push_back(format!("{} {text}", rfc3339(now_ms())));
        } else {
            messages::notice(self.config, text);
        }
    }

    /// Draws the view on the terminal (only there: the other modes print changes as they come).
    fn render(&self) -> Result<()> {
        if self.mode != Mode::Screen {
            return Ok(());
        }
        let mut text = format!(
            "redlock status --watch: {} (Ctrl-C to stop)\n",
            rfc3339(now_ms())
        );
        match (&self.listening, &self.reading) {
            (_, Some((why, _))) => text.push_str(&format!("cannot read the locks: {why}\n")),
            (Listening::Not(Some(why)), None) => {
                text.push_str(&format!("not listening for changes: {why}\n"));
            }
            _ => {}
        }
        text.push('\n');
        if self.states.is_empty() {
            text.push_str(&format!(
                "no locks held under prefix '{}'\n",
                self.config.prefix
            ));
        } else {
            text.push_str(&crate::output::status_table(
                &self.states,
                self.args.show_token,
            ));
            text.push_str(&crate::output::holders_details(
                &self.states,
                self.args.show_token,
            ));
            text.push_str(&crate::output::quorum_details(&self.states));
            if self.args.queue || !self.named.is_empty() {
                text.push_str(&crate::output::queue_details(&self.states));
            }
        }
        if !self.recent.is_empty() {
            text.push_str("\nchanges:\n");
            for line in self.recent.iter().rev() {
                text.push_str(&format!("  {line}\n"));
            }
        }
        write_stdout(&frame(&text, terminal_rows()))
    }
}

/// A published time in milliseconds, clamped to 0 ..= the end of year 9999 (anyone may publish
/// The server-independent clock, for the view's header and the connection lines.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The terminal's height in rows (24 when it does not say).
fn terminal_rows() -> usize {
    match crate::os::terminal_size(std::io::stdout()).0 {
        0 => 24,
        n => usize::from(n),
    }
}

/// Writes to stdout and flushes (JSON Lines are read as they come).
fn write_stdout(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| anyhow::Error::new(e).context("cannot write to stdout"))
        .map_err(|e| {
            if is_broken_pipe(&e) {
                e
            } else {
                failure(Kind::Io, format!("{e:#}"))
            }
        })
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Subscribes on a thread of its own and passes on every message, subscribing again (with
/// backoff) when the subscription fails or falls silent, until `tx` is closed.
fn listen(
    config: &Config,
    subscription: Subscription,
    tx: Sender<Msg>,
    backlog: Arc<Backlog>,
) -> Result<()> {
    let (channels, pattern) = match subscription {
        Subscription::Channels(channels) => (channels, None),
        // The pattern hears every lock; the channel is how the scripts know that someone does
        // (nothing is published on it). Subscribed first: a message the pattern hears could
        // arrive before a later command's confirmation, and be taken for it.
        Subscription::Pattern(pattern) => {
            (vec![lock::watch_all_channel(&config.prefix)], Some(pattern))
        }
    };
    let plan = Plan {
        thread: "watch",
        channels,
        pattern,
        ping: Some(PING_EVERY),
        backoff: Backoff::new(RETRY, RETRY_CAP),
        reset: true,
    };
    let relay = Relay {
        io_timeout: config.io_timeout,
        tx,
        backlog,
    };
    // Without it the watch would show nothing.
    follow::follow(config, plan, relay)
        .map_err(|e| failure(Kind::Io, format!("cannot start the listening thread: {e}")))
}

/// The listener's side: passes on what arrives, bounded by the [`Backlog`].
struct Relay {
    io_timeout: Duration,
    tx: Sender<Msg>,
    backlog: Arc<Backlog>,
}

impl follow::Listener for Relay {
    fn subscribed(&mut self) -> ControlFlow<()> {
        follow::passed(self.tx.send(Msg::Listening))
    }

    fn message(&mut self, msg: &redis::Msg) -> ControlFlow<()> {
        let backlog = &self.backlog;
        let len = msg.get_payload_bytes().len();
        if len > PAYLOAD_MAX {
            backlog.oversized.fetch_add(1, Ordering::AcqRel);
        } else if backlog.pending.load(Ordering::Acquire) >= BACKLOG
            || backlog.bytes.load(Ordering::Acquire) + len > BACKLOG_BYTES
        {
            // The main thread is behind (a flood, or a stdout nobody reads): dropped and
            // counted, rather than held in memory without bound.
            backlog.missed.fetch_add(1, Ordering::AcqRel);
        } else {
            let payload = msg.get_payload_bytes().to_vec();
            backlog.pending.fetch_add(1, Ordering::AcqRel);
            backlog.bytes.fetch_add(payload.len(), Ordering::AcqRel);
            let event = Msg::Event {
                channel: msg.get_channel_name().to_string(),
                payload,
            };
            return follow::passed(self.tx.send(event));
        }
        ControlFlow::Continue(())
    }

    fn lost(&mut self, lost: Lost, pause: Duration) -> ControlFlow<()> {
        let e = self.why(lost);
        // Refused (an ACL user without the channel) or not understood: trying again cannot
        // help.
        if !matches!(kind_of(&e), Kind::Unavailable | Kind::Io) {
            let _ = self.tx.send(Msg::Refused(e));
            return ControlFlow::Break(());
        }
        follow::passed(self.tx.send(Msg::Deaf(format!("{e:#}"), pause)))
    }
}

impl Relay {
    /// Why the subscription failed or was lost, in the words of `status --watch`.
    fn why(&self, lost: Lost) -> anyhow::Error {
        let unavailable = |what: String| failure(Kind::Unavailable, what);
        match lost {
            Lost::Unanswered { command, error } if error.is_timeout() => unavailable(format!(
                "the server did not answer {command} within {} (--io-timeout)",
                human_ms(self.io_timeout)
            )),
            Lost::Refused { error, why, .. }
                if matches!(error.code(), Some("NOAUTH" | "WRONGPASS")) =>
            {
                // The password changed (or was set) since the watch started.
                failure(
                    redis_kind(&error),
                    format!("authentication failed for the subscription: {why}"),
                )
            }
            Lost::Dropped(e) => unavailable(format!(
                "subscription lost: {}",
                crate::error::redis_text(&e)
            )),
            Lost::Silent(e) => unavailable(unanswered_ping(self.io_timeout, &e)),
            other => other.into_error(|to, why| {
                format!(
                    "the server refused the subscription to {}: {why}",
                    printable(to)
                )
            }),
        }
    }
}

/// Why the PING of a quiet subscription failed, in words: a timeout is said as one (the OS's
/// text for it, "Resource temporarily unavailable (os error 11)", tells a user nothing).
fn unanswered_ping(io_timeout: Duration, e: &redis::RedisError) -> String {
    if e.is_timeout() {
        format!(
            "the server did not answer a PING within {} (--io-timeout)",
            human_ms(io_timeout)
        )
    } else {
        format!("no answer to PING: {}", crate::error::redis_text(e))
    }
}

/// The view as the terminal gets it: from the top left, at most `rows` lines, each clearing the
/// rest of its line, then the rest of the screen cleared. The last line does not end in a line
/// break, which would scroll it off a terminal of one row.
fn frame(text: &str, rows: usize) -> String {
    let mut frame = String::from("\x1b[H");
    for (i, line) in text.lines().take(rows).enumerate() {
        if i > 0 {
            frame.push_str("\r\n");
        }
        frame.push_str(line);
        frame.push_str("\x1b[K");
    }
    frame.push_str("\x1b[J");
    frame
}

#[cfg(test)]
mod tests {
    use super::*;
    use event::TIME_MAX;

    #[test]
    fn channels_and_patterns_name_locks_under_the_prefix_only() {
        let keys = Keys::new("redlock:", "deploy").unwrap();
        assert_eq!(channel_of(&keys), "redlock:{deploy}:watch");
        assert_eq!(pattern_of("redlock:"), "redlock:{*}:watch");
        assert_eq!(pattern_of("a*b[1]:"), "a\\*b\\[1\\]:{*}:watch");
        assert_eq!(
            lock_of("redlock:", "redlock:{deploy}:watch").map(|k| k.name),
            Some("deploy".to_string())
        );
        // A name may hold `}`; its channel still ends in `}:watch`.
        assert_eq!(
            lock_of("redlock:", "redlock:{a}:b}:watch").map(|k| k.name),
            Some("a}:b".to_string())
        );
        assert_eq!(lock_of("redlock:", "redlock:{deploy}:events"), None);
        assert_eq!(lock_of("redlock:", "other:{deploy}:watch"), None);
        assert_eq!(lock_of("redlock:", "redlock:{\u{1b}x}:watch"), None);
    }

    #[test]
    fn a_frame_does_not_end_in_a_line_break() {
        // One row: the line stays on it (a trailing line break would scroll it away).
        assert_eq!(frame("head\nrest\n", 1), "\x1b[Hhead\x1b[K\x1b[J");
        assert_eq!(frame("a\nb\nc\n", 2), "\x1b[Ha\x1b[K\r\nb\x1b[K\x1b[J");
        assert!(!frame("a\nb\n", 24).contains("b\x1b[K\r\n"));
    }

    /// A watcher of every lock (no Redis: only its bookkeeping is used).
    fn with_watcher(test: impl FnOnce(&mut Watcher)) {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(["redlock", "status", "--watch"]).unwrap();
        let crate::cli::Command::Status(args) = cli.command else {
            panic!("not status")
        };
        let env = crate::config::Env {
            url: None,
            password: None,
        };
        let config = Config::resolve(&cli.global, &env, &mut |_| {}).unwrap();
        let mut watcher = Watcher::new(&config, &args, Vec::new(), Mode::Json, None);
        test(&mut watcher);
    }

    #[test]
    fn published_holders_are_remembered_a_bounded_number_at_a_time() {
        with_watcher(|w| {
            let acquired = |w: &mut Watcher, name: &str, at: i64, ttl: i64| {
                let payload = format!(
                    r#"{{"event":"acquired","token":"fakefake","at_ms":{at},"ttl_ms":{ttl}}}"#
                );
                let event = parse_event(name, payload.as_bytes()).unwrap();
                assert!(w.heard(name, &event));
            };
            acquired(w, "big", i64::MAX, i64::MAX);
            assert_eq!(w.seen["big"].expires_ms, Some(TIME_MAX));
            acquired(w, "small", i64::MIN, i64::MIN);
            assert_eq!(w.seen["small"].acquired_ms, Some(0));
            assert_eq!(w.seen["small"].expires_ms, None);
            // The same lock heard of again and again takes one record; many locks, at most
            // UNCONFIRMED_MAX, the oldest forgotten first.
            for _ in 0..10 * UNCONFIRMED_MAX {
                acquired(w, "same", 1, 1);
            }
            for i in 0..10 * UNCONFIRMED_MAX {
                acquired(w, &format!("fake{i}"), 1, 1);
            }
            assert_eq!(w.seen.len(), UNCONFIRMED_MAX);
            assert!(
                w.seen
                    .contains_key(&format!("fake{}", 10 * UNCONFIRMED_MAX - 1))
            );
            assert!(!w.seen.contains_key("fake0") && !w.seen.contains_key("same"));
            assert_eq!(w.heard.len(), UNCONFIRMED_MAX);
        });
    }
}
