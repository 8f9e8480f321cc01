//! The lock model and the one-server protocol: one script call per operation (attempt, leave,
//! release, wake, extend, raise the fence, inspect, scan; reading many locks for `status` is
//! batched, see [`inspect_batch`]). The layer above `client.rs` and
//! `scripts.rs`, below `store.rs`; waiting for a lock is in `acquire.rs`, counting a quorum's
//! answers in `quorum.rs`.
//!
//! Invariants this module keeps:
//! - A lock is the string key `PREFIX{NAME}` holding the holder's token, with a PX expiry. Only
//!   `SET NX PX` creates it; only the Lua scripts in `src/scripts/` change or delete it, and they
//!   compare the token first, so a client never releases or extends a lock it does not hold.
//! - Beside it, `PREFIX{NAME}:meta` (a hash) keeps the fence counter, the record of the last
//!   holder and that of the last forced release (`forced_token`, `forced_by`, `forced_at`: see
//!   [`Forced`]); `:q`, `:leases` and `:w:TOKEN` hold the waiters (see `acquire.rs`) and who
//!   they are (see [`Waiting`]; a record lives as long as its lease, in the same hash). The
//!   `{NAME}` hash tag puts every key of one lock in one Cluster slot. Meta expires `--meta-ttl` after the lock and
//!   its queue would expire, refreshed by every script that writes it and can make them last
//!   longer (acquire, extend, fence), so it never expires while the lock is held or waited for.
//! - The fence is set exactly once per successful acquisition, in the same script, to
//!   max(counter + 1, the server's clock in µs): successive holders see strictly increasing
//!   fences, and they keep increasing when meta is lost (see `acquire.lua`).
//! - No client clock is used for anything Redis decides: expiry is Redis's, acquired-at is
//!   Redis's `TIME`. Client-side waits only decide when to *ask* again.
//!
//! Layer 5 of the list in `lib.rs`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use redis::Value;

use crate::client::{Redis, unexpected_reply};
use crate::error::{Kind, failure, refusal, usage};
use crate::printable::{field, printable, shown, unsafe_in_name};
use crate::redact::redact;
use crate::scripts;

/// Longest lock name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 512;

/// The Redis keys of one named lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    pub name: String,
    pub lock: String,
    pub meta: String,
    pub queue: String,
    pub leases: String,
}

impl Keys {
    /// Validates a lock name and derives its keys under `prefix`.
    pub fn new(prefix: &str, name: &str) -> Result<Keys> {
        if name.is_empty() {
            return Err(usage("the lock name is empty"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(usage(format!(
                "the lock name is {} bytes long; the limit is {MAX_NAME_LEN}",
                name.len()
            )));
        }
        // Shown in `status`, a name with these would read differently from what it is (the
        // same rule as for --prefix).
        if let Some(why) = unsafe_in_name(name) {
            return Err(usage(format!(
                "the lock name '{}' contains {why}; names are refused with control, direction or \
                 invisible characters",
                printable(name)
            )));
        }
        // `{}...` would be an empty hash tag, and the lock's keys would land in different
        // Redis Cluster slots.
        if name.starts_with('}') {
            return Err(usage(format!(
                "the lock name {name:?} starts with '}}'; any other first character is fine"
            )));
        }
        let lock = format!("{prefix}{{{name}}}");
        Ok(Keys {
            name: name.to_string(),
            meta: format!("{lock}:meta"),
            queue: format!("{lock}:q"),
            leases: format!("{lock}:leases"),
            lock,
        })
    }

    /// The list a waiter with `token` blocks on (the scripts derive the same name).
    pub fn wake(&self, token: &str) -> String {
        format!("{}:w:{token}", self.lock)
    }

    /// The pub/sub channel where taking the lock away from its holder is announced (see
    /// `notify.rs`); it shares the lock's hash tag.
    pub fn events(&self) -> String {
        format!("{}:events", self.lock)
    }

    /// The pub/sub channel where every change of the lock is told, as one JSON object (`event`
    /// in `common.lua`), for `status --watch`.
    pub fn watch(&self) -> String {
        format!("{}:watch", self.lock)
    }

    /// The lock's history: a capped stream of the same events (`event` in `common.lua`).
    pub fn log(&self) -> String {
        format!("{}:log", self.lock)
    }

    /// The keys in the order every script declares them.
    pub fn all(&self) -> [&str; 4] {
        [&self.lock, &self.meta, &self.queue, &self.leases]
    }

    /// The lock name of a lock key found by [`scan`], if it is one.
    fn name_of(prefix: &str, key: &str) -> Option<String> {
        key.strip_prefix(prefix)?
            .strip_prefix('{')?
            .strip_suffix('}')
            .map(str::to_string)
    }
}

/// What the acquirer says about itself; shown by `status`.
#[derive(Debug, Clone)]
pub struct Owner {
    pub host: String,
    pub pid: u32,
    pub user: String,
    pub note: String,
    /// The pid namespace `pid` belongs to (the inode of `/proc/self/ns/pid`; empty if unknown):
    /// on one host name, a pid means the same process only within one namespace (containers).
    pub pidns: String,
}

/// The record of a holder, as kept in the meta hash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holder {
    pub token: String,
    pub fence: i64,
    pub host: String,
    pub pid: String,
    pub user: String,
    pub note: String,
    pub acquired_ms: Option<i64>,
    pub ttl_ms: Option<i64>,
    /// When the last acquisition or renewal made the lock expire (server clock).
    pub expires_ms: Option<i64>,
    /// When the holder released the lock (server clock); `None` while held, or if it expired.
    pub released_ms: Option<i64>,
    /// The holder's pid namespace (see [`Owner::pidns`]); empty in records of older versions.
    pub pidns: String,
    /// Its place in a lock with more than one holder (see [`Mode`]); `None` in a plain lock.
    pub slot: Option<u32>,
    /// Taken `--preemptible`: a `--preempt` waiter may ask it to stop.
    pub preemptible: bool,
    /// A `--preempt` waiter asked it to stop (it still holds the lock until it has).
    pub preempted: Option<Preemption>,
    /// A keeper keeps it alive for as long as its pid lives (`acquire --while-pid`).
    pub kept: bool,
}

/// What `status` found of a holder's process on this host (see `owner::stale`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Its process runs.
    Alive,
    /// Its process is gone, and nothing holds the lock for it: likely stale.
    Gone,
    /// Its process is gone, but its keeper (`acquire --while-pid`) runs and holds the lock until
    /// what the process started has ended.
    Draining,
}

/// A `--preempt` waiter's request that a `--preemptible` holder stop: who asked, and when
/// (server ms). Recorded as META `preempted` = 'TOKEN:AT:BY' (see `acquire.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preemption {
    /// 'user@host (pid N)', escaped for display (anyone may write the record).
    pub by: String,
    pub at_ms: i64,
}

impl Preemption {
    /// 'AT:BY', as `extend.lua` returns it and the announcement carries it after the token.
    pub fn parse(at_by: &str) -> Option<Preemption> {
        let (at, by) = at_by.split_once(':')?;
        Some(Preemption {
            by: field(by),
            at_ms: at.parse().ok()?,
        })
    }

    /// What a preempted holder says about it.
    pub fn reason(&self) -> String {
        format!(
            "preempted by {} at {} (--preemptible)",
            shown(&self.by),
            rfc3339(self.at_ms)
        )
    }
}

/// What kind of lock a call asks for: plain (one holder), or one with more than one holder
/// (`--slots N`, `--pool A,B,C`, `--shared`; see `slots_common.lua`). The scripts record it in the
/// meta hash as a spec (`slots`): the first holder sets it, and a call that asks for another
/// kind while the lock has holders or waiters is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Mode {
    /// One holder at a time.
    #[default]
    Exclusive,
    /// At most N holders at once (a counting semaphore).
    Slots(u32),
    /// One holder per named resource: slot i is the i-th name.
    Pool(Vec<String>),
    /// Any number of shared holders, or one exclusive holder (a plain request, a writer).
    Shared,
}

impl Mode {
    /// The spec the scripts record ('' for a plain lock).
    pub fn spec(&self) -> String {
        match self {
            Mode::Exclusive => String::new(),
            Mode::Slots(n) => format!("n:{n}"),
            Mode::Pool(names) => format!("p:{}", names.join(",")),
            Mode::Shared => "s".to_string(),
        }
    }

    /// The mode a recorded spec names; `None` for a spec no version writes.
    pub fn from_spec(spec: &str) -> Option<Mode> {
        match spec.split_once(':') {
            None if spec.is_empty() => Some(Mode::Exclusive),
            None if spec == "s" => Some(Mode::Shared),
            Some(("n", n)) => n.parse().ok().map(Mode::Slots),
            Some(("p", names)) => Some(Mode::Pool(names.split(',').map(str::to_string).collect())),
            _ => None,
        }
    }

    /// How many holders it admits at once; `None`: any number (shared).
    pub fn limit(&self) -> Option<usize> {
        match self {
            Mode::Exclusive => Some(1),
            Mode::Slots(n) => Some(*n as usize),
            Mode::Pool(names) => Some(names.len()),
            Mode::Shared => None,
        }
    }

    /// The name of slot `slot` in a pool.
    pub fn resource(&self, slot: u32) -> Option<&str> {
        match self {
            Mode::Pool(names) => names.get(slot as usize).map(String::as_str),
            _ => None,
        }
    }

    /// As the options that ask for it: `--slots 3`, `--pool a,b`, `--shared`, or `an exclusive
    /// lock`.
    pub fn describe(&self) -> String {
        match self {
            Mode::Exclusive => "an exclusive lock".to_string(),
            Mode::Slots(n) => format!("--slots {n}"),
            // A long pool is shortened: it is for a human, in one line.
            Mode::Pool(names) if names.len() > 4 => format!(
                "--pool {},{},…,{} ({} names)",
                names[0],
                names[1],
                names[names.len() - 1],
                names.len()
            ),
            Mode::Pool(names) => format!("--pool {}", names.join(",")),
            Mode::Shared => "--shared".to_string(),
        }
    }
}

/// [`Mode::Exclusive`], where a reference must outlive a call.
pub static EXCLUSIVE: Mode = Mode::Exclusive;

/// A refused attempt: the lock is of another kind than the call asks for (see [`Mode`]), as
/// recorded (`spec`) by `by` ('user@host (pid N)'), or held by a plain holder `by`.
pub fn mismatch(keys: &Keys, asked: &Mode, spec: &str, by: &str) -> anyhow::Error {
    let by = shown(&printable(by)).into_owned();
    let is = match Mode::from_spec(spec) {
        Some(Mode::Exclusive) if by.is_empty() => "an exclusive lock".to_string(),
        Some(Mode::Exclusive) => format!("held as an exclusive lock by {by}"),
        Some(mode) if by.is_empty() => format!("a {} lock", mode.describe()),
        Some(mode) => format!("a {} lock (set by {by})", mode.describe()),
        None => format!("a lock of another kind ({})", shown(&printable(spec))),
    };
    // A refusal: the script wrote nothing, so there is nothing to undo (no tombstone either).
    refusal(
        Kind::Usage,
        format!(
            "'{}' is {is}; this call asks for {}. A lock's kind can change once it has no holders \
         and no waiters",
            keys.name,
            match asked {
                Mode::Exclusive => "an exclusive lock".to_string(),
                other => other.describe(),
            }
        ),
    )
}

/// The place a holder has in a lock with more than one holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// From 0: unique among the lock's holders at any time, and the same for the whole hold.
    pub index: u32,
    /// In a pool, the name of the resource at that index.
    pub resource: Option<String>,
}

/// The holders of a lock with more than one holder, as `status` reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slots {
    /// What the lock is (from the meta hash; [`Mode::Exclusive`] if the record is gone).
    pub mode: Mode,
    /// Who made it so: 'user@host (pid N)'.
    pub set_by: String,
    /// The live holders, by slot.
    pub holders: Vec<Holder>,
    /// Places reserved for waiters whose turn came, not claimed yet.
    pub reserved: usize,
}

/// The live holders in HGETALL of `LOCK:slots` (see `slots_common.lua`) at `now_ms`. Records are
/// anyone's to write: fields escaped for display, the note redacted.
fn parse_slots(v: &Value, now_ms: i64, meta: &HashMap<String, String>) -> Slots {
    let mode = meta
        .get("slots")
        .and_then(|spec| Mode::from_spec(spec))
        .unwrap_or_default();
    let mut slots = Slots {
        mode,
        set_by: meta.get("slots_by").cloned().unwrap_or_default(),
        holders: Vec::new(),
        reserved: 0,
    };
    let Value::Array(items) = v else {
        return slots;
    };
    for pair in items.chunks_exact(2) {
        let (Some(field), Some(value)) = (text(&pair[0]), text(&pair[1])) else {
            continue;
        };
        let live = |expires: Option<i64>| expires.is_some_and(|e| e > now_ms);
        if field.starts_with('~') {
            slots.reserved += usize::from(live(value.parse().ok()));
            continue;
        }
        let holder = slot_holder(&field, &value);
        if live(holder.expires_ms) {
            slots.holders.push(holder);
        }
    }
    slots.holders.sort_by_key(|h| (h.slot, h.acquired_ms));
    slots
}

/// A holder as its record in `LOCK:slots` describes it (`EXPIRES\tSLOT\tFENCE\tACQUIRED\tTTL\t
/// PID\tUSER\tHOST\tPIDNS\tNOTE`, see `slots_common.lua`). Records are anyone's to write: every
/// field is escaped for display, the note redacted.
pub fn slot_holder(token: &str, record: &str) -> Holder {
    let clean = |s: &str| field(s);
    let mut f = record.splitn(10, '\t');
    let mut next = || f.next().unwrap_or_default();
    let expires_ms = next().parse().ok();
    let slot = next().parse().ok();
    let fence = next().parse().unwrap_or(0);
    let acquired_ms = next().parse().ok();
    let ttl_ms = next().parse().ok();
    let (pid, user, host, pidns) = (clean(next()), clean(next()), clean(next()), clean(next()));
    Holder {
        // The token is the hash's field name: escaped, never cut (it is compared).
        token: printable(token).into_owned(),
        fence,
        host,
        pid,
        user,
        note: clean(&redact(next())),
        acquired_ms,
        ttl_ms,
        expires_ms,
        released_ms: None,
        pidns,
        slot,
        preemptible: false,
        preempted: None,
        kept: false,
    }
}

/// How the hold of a lock that is free now came to an end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Released,
    Expired,
}

impl Ended {
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Released => "released",
            Ended::Expired => "expired",
        }
    }
}

impl Holder {
    /// For the last holder of a free lock: how and when its hold ended, by the server's clock.
    /// A release is dated by the release script. An expiry is not recorded anywhere (Redis
    /// deletes the key by itself), so it is dated from the last acquisition or renewal plus its
    /// TTL (records written before renewals were dated: the acquisition plus the TTL).
    pub fn ended(&self) -> Option<(Ended, i64)> {
        if let Some(ms) = self.released_ms {
            return Some((Ended::Released, ms));
        }
        let expires = self
            .expires_ms
            .or_else(|| Some(self.acquired_ms? + self.ttl_ms?))?;
        Some((Ended::Expired, expires))
    }

    /// `user@host (pid N)`
    /// `user@host (pid N)`; a holder kept alive by `acquire --while-pid` says so, since its lock
    /// outlives the command that took it.
    pub fn who(&self) -> String {
        let pid = if self.kept {
            "kept alive for pid"
        } else {
            "pid"
        };
        format!(
            "{}@{} ({pid} {})",
            shown(&self.user),
            shown(&self.host),
            shown(&self.pid)
        )
    }

    /// The first 8 characters of the token: enough to tell holders apart, useless to release.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.token)
    }
}

pub fn fingerprint(token: &str) -> String {
    token.chars().take(FINGERPRINT_LEN).collect()
}

/// How many characters of a token `status` shows.
const FINGERPRINT_LEN: usize = 8;

/// Whether `s` has the shape of a fingerprint (8 hex digits), which no token has (32).
pub fn looks_like_fingerprint(s: &str) -> bool {
    s.len() == FINGERPRINT_LEN && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A client in the queue, as its record in `PREFIX{NAME}:leases` describes it (see `common.lua`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waiting {
    /// 1 for the next in line.
    pub position: usize,
    pub user: String,
    pub host: String,
    pub pid: String,
    pub note: String,
    /// When it joined the queue (server clock); `None` when it has no record.
    pub since_ms: Option<i64>,
    /// When it gives up (server clock); `None` when it waits forever, or has no record.
    pub deadline_ms: Option<i64>,
    /// Its token, as found in the queue: for a waiter to find itself (never shown).
    pub token: String,
}

impl Waiting {
    /// `user@host (pid N)`, or `unknown` for a waiter without a record.
    pub fn who(&self) -> String {
        if self.since_ms.is_none() && self.user.is_empty() {
            return "unknown".to_string();
        }
        format!(
            "{}@{} (pid {})",
            shown(&self.user),
            shown(&self.host),
            shown(&self.pid)
        )
    }
}

/// The live waiters in `status.lua`'s flat queue reply (token, lease, record, ...), numbered in
/// queue order; those whose lease ran out before `now_ms` are dead and left out. Records are
/// anyone's to write: every field is escaped for display, the note redacted (as in [`meta_map`]).
fn parse_queue(v: &Value, now_ms: i64) -> Vec<Waiting> {
    let Value::Array(items) = v else {
        return Vec::new();
    };
    let clean = |s: &str| field(s);
    let mut queue = Vec::new();
    for entry in items.chunks_exact(3) {
        let lease = text(&entry[1]).and_then(|l| l.parse::<i64>().ok());
        if lease.is_none_or(|l| l < now_ms) {
            continue;
        }
        let mut w = Waiting {
            position: queue.len() + 1,
            token: text(&entry[0]).unwrap_or_default(),
            ..Waiting::default()
        };
        if let Some(record) = text(&entry[2]) {
            let mut f = record.splitn(6, '\t');
            let mut next = || f.next().unwrap_or_default();
            w.since_ms = next().parse().ok();
            w.deadline_ms = next().parse().ok();
            w.pid = clean(next());
            w.user = clean(next());
            w.host = clean(next());
            w.note = clean(&redact(next()));
        }
        queue.push(w);
    }
    queue
}

/// The last forced release of a lock (`release --force`), as `release.lua` records it in the meta
/// hash. It names the token it took the lock from, so that it stays true when the next holder's
/// record replaces the evicted one's: the evicted holder can still learn who did it, however late
/// it looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forced {
    /// The token the lock was taken from.
    pub token: String,
    /// Who forced it: `user@host (pid N)`, the pid being the calling script's (as for a holder).
    pub by: String,
    /// When, by the server's clock (ms).
    pub at_ms: i64,
}

/// A time in ms since the epoch (the server's clock) as RFC 3339, to the second. Times come from
/// records anyone can write: one before 1970 shows as 1970, one after the year 9999 (which has
/// no RFC 3339 form, and on which humantime panics) as `?`.
pub fn rfc3339(ms: i64) -> String {
    const LAST: i64 = 253_402_300_799_999;
    if ms > LAST {
        return "?".to_string();
    }
    let t = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Why a holder lost its lock to a forced release: by whom and when, if known.
pub fn forced_reason(forced: Option<&Forced>) -> String {
    match forced {
        Some(f) => {
            format!(
                "it was force-released by {} at {} (`redlock release --force`)",
                shown(&f.by),
                rfc3339(f.at_ms)
            )
        }
        None => "it was force-released (`redlock release --force`)".to_string(),
    }
}

/// The state of one lock, read in one atomic snapshot.
#[derive(Debug, Clone)]
pub struct State {
    pub keys: Keys,
    /// The token in the lock key; `None` when the lock is free.
    pub token: Option<String>,
    /// Milliseconds until expiry (-1: no expiry, -2: free).
    pub pttl_ms: i64,
    /// The Redis server's clock when the snapshot was taken.
    pub now_ms: i64,
    /// The fence counter (the current holder's fence while held).
    pub fence: i64,
    /// The holder's record, when it describes the token in the lock key.
    pub holder: Option<Holder>,
    /// While the lock is free: the record of its last holder, which the meta hash keeps. (Boxed:
    /// a `State` travels inside `Acquired::Busy`, which should stay small.)
    pub last: Option<Box<Holder>>,
    /// Clients queued for the lock (some may have died and not yet been dropped).
    pub waiters: i64,
    /// The live waiters, in queue order (at most the first 100 queued; see `status.lua`).
    pub queue: Vec<Waiting>,
    /// Whether the holder's process is gone: `Some` only when it ran on this host (filled in by
    /// `status`, which knows the host; see `owner::stale`).
    pub stale: Option<Liveness>,
    /// The last forced release of this lock, whichever holder it evicted (see
    /// [`State::forced_of`]).
    pub forced: Option<Box<Forced>>,
    /// A quorum: how the nodes voted, and each node's own view.
    pub quorum: Option<QuorumView>,
    /// What the meta hash counts of this lock's acquisitions (see [`Counters`]).
    pub counters: Counters,
    /// A lock with more than one holder: its kind and holders (the lock key then holds the
    /// marker `#slots` or `#shared`, and `holder` is `None`).
    pub slots: Option<Box<Slots>>,
}

/// Every acquisition's count and waits, which `acquire.lua` adds to the meta hash (fields
/// `acquisitions` and `waited_ms`) for `status --format prometheus`. They live as long as the
/// meta hash: when it expires after `--meta-ttl` of idleness they start again from 0, a counter
/// reset that Prometheus expects. Absent (older versions, or a new lock) is 0; so is a value that
/// is not a count: any client can write the hash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// The time those acquisitions waited before they got the lock, added up, in milliseconds.
    pub waited_ms: u64,
}

/// How a quorum's nodes see one lock.
#[derive(Debug, Clone)]
pub struct QuorumView {
    pub verdict: QuorumVerdict,
    pub needed: usize,
    /// Nodes that agree with the verdict (hold its token, or are free).
    pub agree: usize,
    /// Each node's URL and state, or why it did not answer.
    pub nodes: Vec<(String, std::result::Result<State, String>)>,
}

/// What a quorum's nodes, taken together, say of one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuorumVerdict {
    /// One token on a majority.
    Held,
    /// A majority free.
    Free,
    /// Neither: no token and no freedom on a majority, though a majority answered.
    Split,
    /// Fewer than a majority answered.
    Unknown,
}

impl QuorumVerdict {
    /// The word `status` shows, in its table and its JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            QuorumVerdict::Held => "held",
            QuorumVerdict::Free => "free",
            QuorumVerdict::Split => "split",
            QuorumVerdict::Unknown => "unknown",
        }
    }
}

impl State {
    pub fn held(&self) -> bool {
        self.token.is_some()
    }

    /// A quorum's verdict on the lock; `None` for one server.
    pub fn quorum_verdict(&self) -> Option<QuorumVerdict> {
        self.quorum.as_ref().map(|q| q.verdict)
    }

    /// The forced release that took the lock from `token`, if that is how its hold ended.
    pub fn forced_of(&self, token: &str) -> Option<&Forced> {
        self.forced.as_deref().filter(|f| f.token == token)
    }

    /// Released and reserved for the first waiter, who has not claimed it yet.
    pub fn handing_over(&self) -> bool {
        self.token.as_deref().is_some_and(|t| t.starts_with('~'))
    }

    /// How long the current holder has held the lock, by the server's clock.
    pub fn held_for(&self) -> Option<Duration> {
        let acquired = self.holder.as_ref()?.acquired_ms?;
        Some(Duration::from_millis(
            u64::try_from(self.now_ms.saturating_sub(acquired)).unwrap_or(0),
        ))
    }

    /// "held by alice@web1 (pid 42, 'deploy.sh') for 3s, expires in 27s"
    pub fn describe(&self) -> String {
        if !self.held() {
            return "free".to_string();
        }
        if let Some(sl) = &self.slots {
            return self.describe_slots(sl, true);
        }
        let mut s = match &self.holder {
            Some(h) => format!("held by {}", h.who()),
            None if self.handing_over() => "being handed over to the next waiter".to_string(),
            None => "held by an unknown client (no redlock record)".to_string(),
        };
        if let Some(h) = &self.holder
            && !h.note.is_empty()
        {
            s.push_str(&format!(" running '{}'", shown(&h.note)));
        }
        if let Some(d) = self.held_for() {
            s.push_str(&format!(" for {}", human_ms(d)));
        }
        match self.pttl_ms {
            ms if ms >= 0 => s.push_str(&format!(
                ", expires in {}",
                human_ms(Duration::from_millis(ms as u64))
            )),
            -1 => s.push_str(", with no expiry"),
            _ => {}
        }
        if self.waiters > 0 {
            s.push_str(&format!(", {} waiting", self.waiters));
        }
        s
    }
}

impl State {
    /// For a lock with more than one holder: "2 of 3 places held (--slots 3): alice@web1 (pid
    /// 42) and 1 more" ([`State::describe`] without the waiters); otherwise what `describe` says.
    pub fn describe_holders(&self) -> String {
        match &self.slots {
            Some(sl) => self.describe_slots(sl, false),
            None => self.describe(),
        }
    }

    /// "2 of 3 places held (--slots 3): alice@web1 (pid 42) and 1 more, 4 waiting"
    fn describe_slots(&self, sl: &Slots, waiters: bool) -> String {
        let n = sl.holders.len();
        let mut s = match sl.mode.limit() {
            Some(limit) => format!("{n} of {limit} places held ({})", sl.mode.describe()),
            None => format!("held shared by {n} reader{}", if n == 1 { "" } else { "s" }),
        };
        if let Some(first) = sl.holders.first() {
            s.push_str(&format!(": {}", first.who()));
            if n > 1 {
                s.push_str(&format!(" and {} more", n - 1));
            }
        }
        if !waiters {
            return s;
        }
        if sl.reserved > 0 {
            s.push_str(&format!(", {} being handed over", sl.reserved));
        }
        if self.waiters > 0 {
            s.push_str(&format!(", {} waiting", self.waiters));
        }
        s
    }
}

/// A duration rounded for humans: whole seconds from 10s up, milliseconds below.
pub fn human_ms(d: Duration) -> String {
    let d = if d >= Duration::from_secs(10) {
        Duration::from_secs(d.as_secs())
    } else {
        Duration::from_millis(d.as_millis() as u64)
    };
    humantime::format_duration(d).to_string()
}

/// A lock this process holds (or held: the lock may have expired since).
#[derive(Debug, Clone)]
pub struct Lock {
    pub keys: Keys,
    pub token: String,
    pub fence: i64,
    pub acquired_ms: i64,
    pub ttl: Duration,
    /// When the successful attempt was sent: the lock is surely ours until `sent + ttl - drift`.
    pub sent: Instant,
    /// What is allowed for clock drift between servers (zero on one server; see `quorum.rs`).
    pub drift: Duration,
    /// Each node's `run_id` when the lock was taken (a quorum only), to notice restarts.
    pub run_ids: Vec<Option<String>>,
    /// Our place, in a lock with more than one holder.
    pub slot: Option<Slot>,
}

/// Who releases a lock.
#[derive(Debug, Clone)]
pub enum Releaser {
    /// The holder of this token: the lock is released only if the token holds it. `status`: the
    /// exit status of the command it ran (`exec`), told in the lock's history. `place`: the
    /// token holds a place in a lock with more than one holder, as its acquisition said (then
    /// the slot scripts are asked at once; `false` when unknown: the plain script says so).
    Holder {
        token: String,
        status: Option<u8>,
        place: bool,
        /// The lock's own keeper (`acquire --while-pid`) releases it, not its owner: nobody is
        /// left to read a release's mark, so none is left (see `release.lua`), and an owner's
        /// release it missed is answered [`Verdict::Released`].
        keeper: bool,
    },
    /// Anyone, whoever holds the lock (`release --force`); this owner is recorded in the meta
    /// hash as the one who forced it (see [`Forced`]). With a condition, only the holder it
    /// describes (`--if-fence`, `--if-token`); another holder makes it [`Verdict::HeldByOther`].
    Force(Owner, Option<IfHeld>),
}

impl Releaser {
    /// The holder of `token`, releasing without a command's exit status to tell.
    pub fn holder(token: &str) -> Releaser {
        Releaser::Holder {
            token: token.to_string(),
            status: None,
            place: false,
            keeper: false,
        }
    }

    /// The holder of `lock`, as it was acquired; `status` as for [`Releaser::Holder`].
    pub fn of(lock: &Lock, status: Option<u8>) -> Releaser {
        Releaser::Holder {
            token: lock.token.clone(),
            status,
            place: lock.slot.is_some(),
            keeper: false,
        }
    }

    /// The keeper of `lock` (`acquire --while-pid`), or `acquire` giving back a lock whose token
    /// it never handed on: see [`Releaser::Holder`]'s `keeper`.
    pub fn keeper(lock: &Lock) -> Releaser {
        Releaser::Holder {
            token: lock.token.clone(),
            status: None,
            place: lock.slot.is_some(),
            keeper: true,
        }
    }

    /// The last argument of `release.lua` and `slots_release.lua`: who releases.
    pub fn who_arg(&self) -> &'static str {
        match self {
            Releaser::Holder { keeper: true, .. } => "keeper",
            _ => "",
        }
    }
}

/// Which holder a conditional `release --force` may evict: the one the operator saw in `status`.
/// Checked by `release.lua` in the same step as the delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfHeld {
    /// The holder whose record has this fence (on a quorum, each node's record).
    Fence(i64),
    /// The holder whose token starts with this fingerprint (8 lowercase hex digits).
    Token(String),
}

impl IfHeld {
    /// The script's two arguments: the condition's name and its value (`release.lua` and
    /// `slots_release.lua` read them alike).
    pub fn args(&self) -> (&'static str, String) {
        match self {
            IfHeld::Fence(n) => ("fence", n.to_string()),
            IfHeld::Token(fp) => ("token", fp.clone()),
        }
    }
}

/// What happened to a release or an extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Done: the lock was ours (or, with `--force`, whoever's `Holder` says).
    Done(Option<Holder>),
    /// The lock is free: it expired or was never taken.
    Free,
    /// Another token holds the lock; nothing was changed.
    HeldByOther(Option<Holder>),
    /// Forced on a lock with more than one holder: these holders were let go.
    Forced(Vec<Holder>),
    /// A lock with more than one holder where the token has no place (any more): it expired, or
    /// was released or forced; others may hold the lock.
    PlaceGone,
    /// A lock with more than one holder, which the plain scripts leave alone (see [`Mode`]): the
    /// slot scripts answer for it (`store.rs` asks them).
    Slots,
    /// Extended, and still ours; but a `--preempt` waiter asked us to stop (we were taken
    /// `--preemptible`): stop, then release (the release hands the lock to the preemptor).
    Preempted(Preemption),
    /// Not ours any more because its holder released it: a kept lock (`acquire --while-pid`) or
    /// a place released with its token, as its mark says (`mark_released` in `common.lua`).
    Released,
    /// The owner's release of a kept lock whose keeper is stopping PID's work (a preemption, or
    /// SIGTERM to the keeper): still held, and the keeper releases it once the work has ended
    /// (see `release.lua`).
    Deferred,
}

impl Lock {
    /// Until when the lock is surely ours, counting from an acquisition or renewal sent at `sent`.
    pub fn valid_until(&self, sent: Instant) -> Instant {
        sent + self.ttl.saturating_sub(self.drift)
    }

    /// How often a holder that keeps the lock (`exec`, `acquire --while-pid`'s keeper) renews
    /// it: every TTL/3, so two renewals may fail before it expires.
    pub fn renewal_interval(&self) -> Duration {
        (self.ttl / 3).max(Duration::from_millis(1))
    }
}

/// The outcome of one attempt to take a lock. (Short-lived, one per round trip: not worth a box.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Attempt {
    /// The server granted the lock to the attempt's token.
    Granted(Lock),
    /// Someone else holds it (or it is reserved for the first waiter).
    Busy {
        /// Remaining TTL of the lock or reservation in ms (-1: none, -2: gone meanwhile).
        pttl_ms: i64,
        /// We are in the queue now (and must leave it if we give up).
        queued: bool,
        /// Busy because the lock is reserved for a waiter whose turn it is, not held.
        reserved: bool,
        /// The lock as the server saw it after queueing us, when the attempt asked for it
        /// ([`Request::tell`]): what a waiter's status line says, read in the same round trip.
        seen: Option<Box<State>>,
    },
    /// A later `--supersede` waiter made this one leave the queue (it is out of it already).
    Superseded {
        /// Who: 'user@host (pid N)'.
        by: String,
    },
}

/// How long a reservation for the first waiter lasts before the next waiter gets its turn.
pub const CLAIM_WINDOW: Duration = Duration::from_secs(2);
/// The longest a waiter blocks before it looks at the lock again (and renews its lease).
pub const BLOCK_CAP: Duration = Duration::from_secs(3);
/// How long past its expected wake-up a silent waiter still counts as alive.
pub const LEASE_MARGIN: Duration = Duration::from_secs(2);
/// How long the tombstone of a token given up while one of its attempts may still be on its way
/// lasts (`PREFIX{NAME}:gone:TOKEN`, see `leave.lua`): that attempt, if it arrives within this
/// time of the give-up, does nothing. Minutes: far longer than any reply we stop waiting for, and
/// short enough that tombstones never pile up (they are only written when in doubt).
pub const TOMBSTONE: Duration = Duration::from_secs(300);

pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// What an attempt asks for besides the lock and the token.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub ttl: Duration,
    /// Recorded as the holder (or, queued, as the waiter).
    pub owner: &'a Owner,
    /// A busy lock queues us up.
    pub join: bool,
    /// The reply names the server's run_id (a quorum notices restarts by it).
    pub run_id: bool,
    /// The token of the attempt before, whose queue place and reservation this one takes over.
    pub prev: Option<&'a str>,
    /// What is left of the wait (`None`: forever); a waiter's record says when it gives up.
    pub wait: Option<Duration>,
    /// How long the client has waited so far: told with the acquisition, summed for metrics.
    pub waited: Duration,
    /// A waiter's status line is due: a busy attempt that queues us also returns the lock's
    /// state ([`Attempt::Busy`]'s `seen`), so that the line costs no round trip of its own.
    pub tell: bool,
    /// The kind of lock asked for (plain, or with more than one holder: see `slots.rs`).
    pub mode: &'a Mode,
    /// `--supersede`: joining the queue makes every earlier `--supersede` waiter leave it (see
    /// `supersede_earlier` in `common.lua`).
    pub supersede: bool,
    /// `--preemptible`: a later `--preempt` waiter may ask the holder to stop (recorded).
    pub preemptible: bool,
    /// `--preempt`: queue ahead of the waiters that did not ask for it, and ask a
    /// `--preemptible` holder to stop (see `acquire.lua`).
    pub preempt: bool,
    /// `acquire --while-pid`: a keeper keeps the lock alive for the holder's pid (recorded, for
    /// `status`).
    pub kept: bool,
}

/// What a quorum tells about the acquisition it won (`fence.lua`): who, after how long a wait,
/// for how long.
#[derive(Debug, Clone)]
pub struct Told {
    pub owner: Owner,
    pub waited: Duration,
    pub ttl: Duration,
}

/// A yes/no script argument: '1' or ''.
fn flag(on: bool) -> &'static str {
    if on { "1" } else { "" }
}

/// One atomic attempt to take the lock with `token`.
pub fn try_acquire(redis: &mut Redis, keys: &Keys, token: &str, req: &Request) -> Result<Attempt> {
    attempt(redis, &scripts::PLAIN, keys, token, req, &[])
}

/// One attempt with one of the attempt scripts (`acquire.lua`, `slots.lua`), which read the same
/// arguments, then `extra`; their replies differ only in what a grant carries after the run_id
/// (`slots.lua`: the slot).
pub fn attempt(
    redis: &mut Redis,
    attempts: &scripts::Attempts,
    keys: &Keys,
    token: &str,
    req: &Request,
    extra: &[&str],
) -> Result<Attempt> {
    let Request {
        ttl,
        owner,
        join,
        run_id: want_run_id,
        prev,
        wait,
        waited,
        tell,
        mode,
        supersede,
        preemptible,
        preempt,
        kept,
    } = *req;
    let sent = Instant::now();
    let meta_ttl = millis(redis.meta_ttl());
    let (log_max, watch_all) = (redis.log_max(), watch_all_arg(redis));
    let who = format!("{}@{} (pid {})", owner.user, owner.host, owner.pid);
    let reply: Vec<Value> = redis.call_acquire(attempts, |script, con| {
        let mut call = script.key(keys.all().as_slice());
        call.arg(token)
            .arg(millis(ttl))
            .arg(&owner.host)
            .arg(owner.pid)
            .arg(&owner.user)
            .arg(&owner.note)
            .arg(if join { "1" } else { "0" })
            .arg(millis(CLAIM_WINDOW))
            .arg(millis(BLOCK_CAP))
            .arg(millis(LEASE_MARGIN))
            .arg(if want_run_id { "1" } else { "0" })
            .arg(prev.unwrap_or(""))
            .arg(meta_ttl)
            .arg(wait.map_or(String::new(), |w| {
                u64::try_from(w.as_millis()).unwrap_or(u64::MAX).to_string()
            }))
            .arg(&owner.pidns)
            .arg(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX))
            .arg(log_max)
            .arg(if tell { "1" } else { "0" })
            .arg(&watch_all)
            .arg(if supersede {
                millis(TOMBSTONE).to_string()
            } else {
                String::new()
            })
            .arg(&who)
            .arg(flag(preemptible))
            .arg(flag(kept))
            .arg(flag(preempt));
        for a in extra {
            call.arg(*a);
        }
        call.invoke(con)
    })?;
    let granted = |fence: i64, now: i64, run_id: &Value, slot: Option<Slot>| {
        Attempt::Granted(Lock {
            keys: keys.clone(),
            token: token.to_string(),
            fence,
            acquired_ms: now,
            ttl,
            sent,
            drift: Duration::ZERO,
            run_ids: vec![text(run_id)],
            slot,
        })
    };
    match reply.as_slice() {
        [Value::Int(1), Value::Int(fence), Value::Int(now), run_id] => {
            Ok(granted(*fence, *now, run_id, None))
        }
        [
            Value::Int(1),
            Value::Int(fence),
            Value::Int(now),
            run_id,
            Value::Int(slot),
        ] => {
            let index = u32::try_from(*slot).unwrap_or(u32::MAX);
            let resource = mode.resource(index).map(str::to_string);
            Ok(granted(
                *fence,
                *now,
                run_id,
                Some(Slot { index, resource }),
            ))
        }
        [Value::Int(-3), _, by] => Ok(Attempt::Superseded {
            // Anyone may write the mark: escaped for display.
            by: field(&text(by).unwrap_or_default()),
        }),
        [Value::Int(-2), spec, by] => Err(mismatch(
            keys,
            mode,
            &text(spec).unwrap_or_default(),
            &text(by).unwrap_or_default(),
        )),
        [
            Value::Int(0),
            Value::Int(pttl),
            Value::Int(queued),
            Value::Int(reserved),
            seen @ ..,
        ] if seen.len() <= 1 => Ok(Attempt::Busy {
            pttl_ms: *pttl,
            queued: *queued == 1,
            reserved: *reserved == 1,
            seen: match seen {
                [Value::Array(state)] => Some(Box::new(state_of(keys, state)?)),
                [] => None,
                other => return Err(unexpected_reply("acquire", format!("{other:?}"))),
            },
        }),
        other => Err(unexpected_reply("acquire", format!("{other:?}"))),
    }
}

/// Leaves the queue of `keys` (passing on a reservation made for `token`, and giving back a lock
/// that an attempt whose reply was lost took with it).
pub fn leave(redis: &mut Redis, keys: &Keys, token: &str) -> Result<()> {
    leave_to(redis, keys, token, HandOver::Wake, Doubt::Sure).map(|_| ())
}

/// [`leave`] for a waiter that gives up for good (see [`give_up_to`]).
pub fn give_up(redis: &mut Redis, keys: &Keys, token: &str) -> Result<()> {
    give_up_to(redis, keys, token, HandOver::Wake, Doubt::Sure).map(|_| ())
}

/// How a release or a leave passes the lock on to the next waiter: the role this server plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandOver<'a> {
    /// This server keeps the queue and decides alone (a single server, or a quorum's other node
    /// when the queue node named no waiter: those keep no queue, so the lock just goes free):
    /// reserve the lock for the first waiter and wake it.
    Wake,
    /// A quorum's queue node: reserve the lock for the first waiter but do not wake it yet; the
    /// other nodes reserve it for that waiter first, then [`wake`] wakes it.
    Quietly,
    /// A quorum's other node: reserve the lock for this waiter, the one the queue node picked, in
    /// the same step (no newcomer can slip in between).
    To(&'a str),
}

impl<'a> HandOver<'a> {
    /// The script arguments `quiet` and `to` (see `release.lua` and `leave.lua`).
    fn args(self) -> (&'static str, &'a str) {
        match self {
            HandOver::Wake => ("", ""),
            HandOver::Quietly => ("quiet", ""),
            HandOver::To(waiter) => ("", waiter),
        }
    }
}

/// Whether an attempt with the token we give up may still be on its way to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doubt {
    /// Every attempt we sent was answered: leaving is enough.
    Sure,
    /// A reply was lost (a timeout, a dropped connection): the attempt may run after our leave,
    /// so the leave also writes a [`TOMBSTONE`] that makes it do nothing.
    Unsure,
}

/// [`leave`] with the hand-over of a quorum (see [`HandOver`]) and a tombstone when `doubt` says
/// so; returns the waiter the lock was passed on to. The undo of one failed attempt: a waiter
/// that gives up for good uses [`give_up_to`].
pub fn leave_to(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    hand_over: HandOver,
    doubt: Doubt,
) -> Result<Option<String>> {
    leave_script(redis, keys, token, hand_over, doubt, "")
}

/// [`leave_to`] for a waiter that gives up for good (its wait ran out, a signal): it also passes
/// on a reservation made for any earlier token of the same waiter, which a release that crossed
/// its attempts may have left (see `leave.lua`).
pub fn give_up_to(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    hand_over: HandOver,
    doubt: Doubt,
) -> Result<Option<String>> {
    leave_script(redis, keys, token, hand_over, doubt, "1")
}

/// `leave.lua`; `waiter`: its argument of that name.
fn leave_script(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    hand_over: HandOver,
    doubt: Doubt,
    waiter: &str,
) -> Result<Option<String>> {
    let (quiet, to) = hand_over.args();
    let (meta_ttl, log_max) = (millis(redis.meta_ttl()), redis.log_max());
    let watch_all = watch_all_arg(redis);
    let next: Value = match doubt {
        Doubt::Sure => redis.call("leave", |con| {
            scripts::LEAVE
                .key(keys.all().as_slice())
                .arg(token)
                .arg(millis(CLAIM_WINDOW))
                .arg(quiet)
                .arg(to)
                .arg(0)
                .arg(log_max)
                .arg(meta_ttl)
                .arg(&watch_all)
                .arg(waiter)
                .invoke(con)
        })?,
        // The whole script, not its hash: this leave may run when nobody is left to answer a
        // NOSCRIPT (a frozen server thawing after we gave up), and it must run all the same.
        Doubt::Unsure => redis.call("leave", |con| {
            redis::cmd("EVAL")
                .arg(scripts::LEAVE_SOURCE)
                .arg(keys.all().len())
                .arg(keys.all().as_slice())
                .arg(token)
                .arg(millis(CLAIM_WINDOW))
                .arg(quiet)
                .arg(to)
                .arg(millis(TOMBSTONE))
                .arg(log_max)
                .arg(meta_ttl)
                .arg(&watch_all)
                .arg(waiter)
                .query(con)
        })?,
    };
    Ok(text(&next))
}

/// What befell a holder while its command ran, for the lock's history (see `lost.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Befell {
    /// The lock was lost.
    Lost,
    /// `--warn-after`: the command has held the lock that long.
    Overran,
    /// `--max-runtime` ran out: the command is being stopped.
    Timeout,
}

impl Befell {
    /// The event's name in the history.
    pub fn as_str(self) -> &'static str {
        match self {
            Befell::Lost => "lost",
            Befell::Overran => "overran",
            Befell::Timeout => "timeout",
        }
    }
}

/// Tells the lock's history and its watchers what befell the holder of `token` (with `fence`),
/// and why (see `lost.lua`). Changes nothing about the lock.
pub fn report_lost(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    fence: i64,
    reason: &str,
) -> Result<()> {
    report(redis, keys, token, fence, Befell::Lost, reason)
}

/// [`report_lost`] for any of [`Befell`].
pub fn report(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    fence: i64,
    what: Befell,
    reason: &str,
) -> Result<()> {
    let (meta_ttl, log_max) = (millis(redis.meta_ttl()), redis.log_max());
    let watch_all = watch_all_arg(redis);
    redis.call(what.as_str(), |con| {
        scripts::LOST
            .key(keys.all().as_slice())
            .arg(token)
            .arg(fence)
            .arg(reason)
            .arg(log_max)
            .arg(meta_ttl)
            .arg(&watch_all)
            .arg(what.as_str())
            .invoke::<i64>(con)
    })?;
    Ok(())
}

/// Deletes the lock if the releaser's token holds it, handing it to the first waiter; with
/// [`Releaser::Force`], releases it whoever holds it and records who forced it. `hand_over` says
/// whether the waiter it goes to is woken, or named by a quorum's queue node (see [`HandOver`]).
/// Returns the verdict and the waiter the lock was handed to.
pub fn release(
    redis: &mut Redis,
    keys: &Keys,
    by: &Releaser,
    hand_over: HandOver,
) -> Result<(Verdict, Option<String>)> {
    let (token, forcer, status) = match by {
        Releaser::Holder { token, status, .. } => (token.as_str(), None, *status),
        Releaser::Force(owner, cond) => ("", Some((owner, cond)), None),
    };
    let (quiet, to) = hand_over.args();
    let (meta_ttl, log_max) = (millis(redis.meta_ttl()), redis.log_max());
    let watch_all = watch_all_arg(redis);
    let reply: Vec<Value> = redis.call("release", |con| {
        let mut call = scripts::RELEASE.key(keys.all().as_slice());
        call.arg(token)
            .arg(if forcer.is_some() { "force" } else { "" })
            .arg(millis(CLAIM_WINDOW))
            .arg(quiet)
            .arg(to);
        match forcer {
            Some((o, cond)) => {
                call.arg(&o.host).arg(o.pid).arg(&o.user);
                let (name, value) = cond.as_ref().map_or(("", String::new()), IfHeld::args);
                call.arg(name).arg(value);
            }
            None => {
                call.arg("").arg("").arg("").arg("").arg("");
            }
        }
        call.arg(log_max)
            .arg(status.map_or(String::new(), |s| s.to_string()))
            .arg(meta_ttl)
            .arg(&watch_all)
            .arg(by.who_arg());
        call.invoke(con)
    })?;
    // A quorum's queue node names the next waiter even where our token was not (release.lua).
    let next = match reply.as_slice() {
        [_, _, next] => text(next),
        _ => None,
    };
    Ok((verdict("release", &reply)?, next))
}

/// Wakes `waiter`, for whom the lock is reserved (see [`release`]).
pub fn wake(redis: &mut Redis, keys: &Keys, waiter: &str) -> Result<()> {
    let key = keys.wake(waiter);
    redis.call("wake", |con| {
        redis::pipe()
            .lpush(&key, "1")
            .ignore()
            .pexpire(&key, millis(CLAIM_WINDOW) as i64)
            .ignore()
            .query::<()>(con)
    })
}

/// Resets the TTL of the lock if `token` holds it; with `want_run_id`, also returns the server's
/// run_id; with `draining`, records that its keeper stops its pid's work (see `extend.lua`).
pub fn extend(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    ttl: Duration,
    want_run_id: bool,
    draining: bool,
) -> Result<(Verdict, Option<String>)> {
    let meta_ttl = millis(redis.meta_ttl());
    let reply: Vec<Value> = redis.call("extend", |con| {
        scripts::EXTEND
            .key(keys.all().as_slice())
            .arg(token)
            .arg(millis(ttl))
            .arg(if want_run_id { "1" } else { "0" })
            .arg(meta_ttl)
            .arg(if draining { "1" } else { "" })
            .invoke(con)
    })?;
    let run_id = match reply.as_slice() {
        [_, _, id, ..] => text(id),
        _ => None,
    };
    if let [Value::Int(1), _, _, preempted] = reply.as_slice()
        && let Some(p) = text(preempted).as_deref().and_then(Preemption::parse)
    {
        return Ok((Verdict::Preempted(p), run_id));
    }
    Ok((verdict("extend", &reply)?, run_id))
}

/// Raises the fence counter to `fence`; true if `token` still holds the lock there.
pub fn raise_fence(
    redis: &mut Redis,
    keys: &Keys,
    token: &str,
    fence: i64,
    told: &Told,
) -> Result<bool> {
    let (meta_ttl, log_max) = (millis(redis.meta_ttl()), redis.log_max());
    let watch_all = watch_all_arg(redis);
    let held: i64 = redis.call("fence", |con| {
        scripts::FENCE
            .key(keys.all().as_slice())
            .arg(token)
            .arg(fence)
            .arg(meta_ttl)
            .arg(&told.owner.user)
            .arg(&told.owner.host)
            .arg(told.owner.pid)
            .arg(&told.owner.note)
            .arg(u64::try_from(told.waited.as_millis()).unwrap_or(u64::MAX))
            .arg(millis(told.ttl))
            .arg(log_max)
            .arg(&watch_all)
            .invoke(con)
    })?;
    Ok(held == 1)
}

fn verdict(what: &str, reply: &[Value]) -> Result<Verdict> {
    match reply {
        [Value::Int(1), meta, ..] => Ok(Verdict::Done(parse_meta(meta).1)),
        [Value::Int(0), ..] => Ok(Verdict::Free),
        [Value::Int(2), ..] => Ok(Verdict::Released),
        [Value::Int(3), ..] => Ok(Verdict::Deferred),
        [Value::Int(-1), meta, ..] => Ok(Verdict::HeldByOther(parse_meta(meta).1)),
        [Value::Int(-2), ..] => Ok(Verdict::Slots),
        other => Err(unexpected_reply(what, format!("{other:?}"))),
    }
}

/// Turns a non-`Done` verdict for `token` into the "not the owner" error, naming who holds the
/// lock. A fingerprint passed for a token (copied from `status`) is recognised and explained.
pub fn not_owner(verdict: &Verdict, token: &str) -> anyhow::Error {
    if looks_like_fingerprint(token) {
        let whose = match verdict {
            Verdict::HeldByOther(Some(h)) if h.fingerprint() == token => {
                "the fingerprint of the holder's token"
            }
            _ => "a fingerprint",
        };
        return failure(
            Kind::NotOwner,
            format!(
                "not the owner: '{token}' is {whose} as 'redlock status' shows it, not a token; \
                 pass the whole token that 'redlock acquire' printed (or that 'redlock status \
                 --show-token' shows)"
            ),
        );
    }
    let why = match verdict {
        Verdict::Free => "the lock is free (it expired or was released)".to_string(),
        Verdict::HeldByOther(Some(h)) => format!(
            "the lock is held by {} with another token ({}…)",
            h.who(),
            h.fingerprint()
        ),
        Verdict::HeldByOther(None) => {
            "the lock is held by another token (no redlock record)".to_string()
        }
        Verdict::Done(_)
        | Verdict::Forced(_)
        | Verdict::Preempted(_)
        | Verdict::Released
        | Verdict::Deferred => "the lock was released".to_string(),
        Verdict::Slots => "the lock has more than one holder now".to_string(),
        Verdict::PlaceGone => {
            "the token holds no place in the lock (it expired, or was released or force-released)"
                .to_string()
        }
    };
    failure(Kind::NotOwner, format!("not the owner: {why}"))
}

/// Reads one lock's state (on a Redis Cluster, following the key to its node if its slot moved:
/// see [`Redis::call_read`]).
pub fn inspect(redis: &mut Redis, keys: &Keys) -> Result<State> {
    let reply: Vec<Value> = redis.call_read("status", |con| {
        scripts::STATUS.key(keys.all().as_slice()).invoke(con)
    })?;
    state_of(keys, &reply)
}

/// How many locks [`inspect_batch`] reads per round trip: 10,000 locks take 20, and one reply
/// (a few hundred small hashes) is read long before `--io-timeout`.
pub const INSPECT_BATCH: usize = 500;

/// How many locks one MULTI/EXEC transaction of [`inspect_batch`] reads: the server runs nothing
/// else meanwhile, for well under a millisecond.
const PER_TRANSACTION: usize = 100;

/// Reads many locks' states, [`INSPECT_BATCH`] per round trip. Off a Cluster: pipelined
/// MULTI/EXEC transactions of [`PER_TRANSACTION`] locks each, with the commands `status.lua`
/// runs (GET, PTTL, HGETALL, ZCARD, and one TIME): each lock is one atomic snapshot, exactly
/// what [`inspect`] reads, at a third of the server's time a script call per lock costs (the
/// Lua set-up and conversions). On a Redis Cluster (whose transactions must keep to one slot):
/// `status.lua` for each lock, pipelined as EVALSHA (after a NOSCRIPT, the script is loaded and
/// the batch sent again, once). An entry is `None` where the server answered that lock's reads
/// with an error (a Cluster node that does not own the key answers MOVED; a key of the wrong
/// type): the caller asks for that lock alone (see [`inspect_many`]), which fails as it would.
pub fn inspect_batch(redis: &mut Redis, keys: &[Keys]) -> Result<Vec<Option<State>>> {
    let mut states = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(INSPECT_BATCH) {
        if redis.in_cluster() {
            script_batch(redis, chunk, &mut states)?;
        } else {
            transaction_batch(redis, chunk, &mut states)?;
        }
    }
    Ok(states)
}

/// One round trip of [`inspect_batch`] off a Cluster.
fn transaction_batch(
    redis: &mut Redis,
    chunk: &[Keys],
    states: &mut Vec<Option<State>>,
) -> Result<()> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for locks in chunk.chunks(PER_TRANSACTION) {
        pipe.cmd("MULTI").ignore();
        for keys in locks {
            pipe.cmd("GET").arg(&keys.lock).ignore();
            pipe.cmd("PTTL").arg(&keys.lock).ignore();
            pipe.cmd("HGETALL").arg(&keys.meta).ignore();
            pipe.cmd("ZCARD").arg(&keys.queue).ignore();
            // What `status.lua` lists of the queue (see `queue_reply`).
            pipe.cmd("ZRANGE")
                .arg(&keys.queue)
                .arg(0)
                .arg(MAX_LISTED - 1)
                .ignore();
            pipe.cmd("HGETALL").arg(&keys.leases).ignore();
        }
        pipe.cmd("TIME").ignore();
        pipe.cmd("EXEC");
    }
    let replies: Vec<redis::RedisResult<Value>> = redis.call("status", |con| pipe.query(con))?;
    let groups = chunk.len().div_ceil(PER_TRANSACTION);
    if replies.len() != groups {
        return Err(unexpected_reply(
            "status",
            format!("{} replies to {groups} transactions", replies.len()),
        ));
    }
    for (locks, reply) in chunk.chunks(PER_TRANSACTION).zip(replies) {
        let mut items = match reply {
            Ok(Value::Array(items)) if items.len() == READS * locks.len() + 1 => items,
            Ok(other) => return Err(unexpected_reply("status", format!("{other:?}"))),
            Err(_) => {
                states.extend(locks.iter().map(|_| None));
                continue;
            }
        };
        let now = items.pop().and_then(|t| time_ms(&t));
        let Some(now) = now else {
            return Err(unexpected_reply("status", "TIME"));
        };
        let mut items = items.into_iter();
        for keys in locks {
            let read: Vec<Value> = items.by_ref().take(READS).collect();
            let Ok([token, pttl, meta, waiters, listed, leases]) = <[Value; READS]>::try_from(read)
            else {
                return Err(unexpected_reply("status", "too few replies"));
            };
            let queue = queue_reply(listed, &leases);
            let reply = [token, pttl, Value::Int(now), meta, waiters, queue];
            // A lock with more than one holder is read again alone: `status.lua` adds its
            // holders (rare enough not to cost the batch a read per lock).
            let marked = matches!(&reply[0], Value::BulkString(b) if b.first() == Some(&b'#'));
            states.push(
                if marked || reply.iter().any(|v| matches!(v, Value::ServerError(_))) {
                    None
                } else {
                    Some(state_of(keys, &reply)?)
                },
            );
        }
    }
    Ok(())
}

/// How many waiters `status` lists per lock (as `MAX_LISTED` in `common.lua`).
const MAX_LISTED: usize = 100;

/// The reads of one lock in a transaction of [`transaction_batch`]: GET, PTTL, HGETALL meta,
/// ZCARD, ZRANGE (the first [`MAX_LISTED`] waiters), HGETALL leases (with the waiters' records).
const READS: usize = 6;

/// The `queue` part of `status.lua`'s reply (token, lease or nil, record or nil, for each listed
/// waiter) made from the whole leases hash (a waiter's lease under its token, its record under
/// `TOKEN:who`; see `common.lua`), read in the same transaction. An error reply (a key of the
/// wrong type) is passed on, so that the lock is read again alone.
fn queue_reply(listed: Value, leases: &Value) -> Value {
    for v in [&listed, leases] {
        if matches!(v, Value::ServerError(_)) {
            return v.clone();
        }
    }
    let field = |name: &[u8]| -> Value {
        let is = |k: &Value| matches!(k, Value::BulkString(b) if b.as_slice() == name);
        let found = match leases {
            Value::Array(pairs) => pairs
                .chunks(2)
                .find(|kv| kv.first().is_some_and(is))
                .and_then(|kv| kv.get(1).cloned()),
            Value::Map(map) => map.iter().find(|(k, _)| is(k)).map(|(_, v)| v.clone()),
            _ => None,
        };
        found.unwrap_or(Value::Nil)
    };
    let Value::Array(tokens) = listed else {
        return Value::Array(Vec::new());
    };
    let mut flat = Vec::with_capacity(tokens.len() * 3);
    for token in tokens {
        let name = match &token {
            Value::BulkString(b) => b.clone(),
            _ => Vec::new(),
        };
        let lease = field(&name);
        let record = field(&[name.as_slice(), b":who"].concat());
        flat.extend([token, lease, record]);
    }
    Value::Array(flat)
}

/// The server's clock in ms from TIME's reply, as `now_ms()` of `common.lua` computes it.
fn time_ms(v: &Value) -> Option<i64> {
    let Value::Array(parts) = v else { return None };
    let [secs, micros] = parts.as_slice() else {
        return None;
    };
    let secs: i64 = text(secs)?.parse().ok()?;
    let micros: i64 = text(micros)?.parse().ok()?;
    Some(secs * 1000 + micros / 1000)
}

/// One round trip of [`inspect_batch`] on a Cluster.
fn script_batch(redis: &mut Redis, chunk: &[Keys], states: &mut Vec<Option<State>>) -> Result<()> {
    let mut replies = status_pipeline(redis, chunk)?;
    if replies.iter().any(|r| r.as_ref().is_err_and(is_noscript)) {
        // A first use, a restart, SCRIPT FLUSH: every call of the batch was refused.
        redis.call("status", |con| scripts::STATUS.load(con))?;
        replies = status_pipeline(redis, chunk)?;
    }
    for (keys, reply) in chunk.iter().zip(replies) {
        states.push(match reply {
            Ok(Value::Array(items)) => Some(state_of(keys, &items)?),
            Ok(other) => return Err(unexpected_reply("status", format!("{other:?}"))),
            Err(_) => None,
        });
    }
    Ok(())
}

/// [`inspect_batch`], with a lock whose call failed in the batch asked for alone on the same
/// connection (which reports its error as [`inspect`] does).
pub fn inspect_many(redis: &mut Redis, keys: &[Keys]) -> Result<Vec<State>> {
    let found = inspect_batch(redis, keys)?;
    keys.iter()
        .zip(found)
        .map(|(k, state)| match state {
            Some(state) => Ok(state),
            None => inspect(redis, k),
        })
        .collect()
}

/// One round trip: the STATUS script by its hash for each lock of `chunk`, each reply or error
/// in its place.
fn status_pipeline(redis: &mut Redis, chunk: &[Keys]) -> Result<Vec<redis::RedisResult<Value>>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for keys in chunk {
        let all = keys.all();
        pipe.cmd("EVALSHA")
            .arg(scripts::STATUS.get_hash())
            .arg(all.len())
            .arg(all.as_slice());
    }
    let replies: Vec<redis::RedisResult<Value>> = redis.call("status", |con| pipe.query(con))?;
    if replies.len() != chunk.len() {
        return Err(unexpected_reply(
            "status",
            format!("{} replies to {} calls", replies.len(), chunk.len()),
        ));
    }
    Ok(replies)
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// A lock's state from the STATUS script's reply.
fn state_of(keys: &Keys, reply: &[Value]) -> Result<State> {
    // A lock with more than one holder has a seventh item: its holders (see `snapshot`).
    let (head, slots) = reply.split_at(reply.len().min(6));
    let [
        token,
        Value::Int(pttl),
        Value::Int(now),
        meta,
        Value::Int(waiters),
        queue,
    ] = head
    else {
        return Err(unexpected_reply("status", format!("{reply:?}")));
    };
    let slots = match slots {
        [] => None,
        [slots] => Some(slots),
        _ => return Err(unexpected_reply("status", format!("{reply:?}"))),
    };
    // The lock key's value is anyone's to write: escaped for display (see printable.rs), which
    // keeps equal tokens equal.
    let token = text(token).map(|t| printable(&t).into_owned());
    let map = meta_map(meta);
    let slots = slots.map(|v| Box::new(parse_slots(v, *now, &map)));
    // A marker with no live holder and no place reserved (its expiry not caught up yet, or its
    // records deleted by hand) holds nothing: the lock is free.
    let (token, slots, pttl) = match slots {
        Some(sl) if sl.holders.is_empty() && sl.reserved == 0 => (None, None, &-2),
        slots => (token, slots, pttl),
    };
    let (fence, recorded) = holder_record(&map);
    let forced = forced_record(&map).map(Box::new);
    let last = recorded.clone().filter(|_| token.is_none()).map(Box::new);
    let holder = recorded.filter(|h| Some(&h.token) == token.as_ref());
    Ok(State {
        keys: keys.clone(),
        token,
        pttl_ms: *pttl,
        now_ms: *now,
        fence,
        holder,
        last,
        waiters: *waiters,
        queue: parse_queue(queue, *now),
        stale: None,
        forced,
        quorum: None,
        counters: counters(&map),
        slots,
    })
}

/// Every lock currently held under `prefix`, found with SCAN (never KEYS), sorted by name.
pub fn scan(redis: &mut Redis, prefix: &str) -> Result<Vec<Keys>> {
    let names = scan_names(redis, prefix, "", usize::MAX, None)?;
    names.iter().map(|n| Keys::new(prefix, n)).collect()
}

/// The lock name in a key SCAN found under `prefix`, if the key can be a redlock lock at all.
/// Other keys under the prefix (anyone can write there: `redlock:{}`, a name too long, one that
/// is not UTF-8 or has control characters) are skipped, so one stray key cannot break `status`
/// for every lock.
fn lock_name(prefix: &str, key: &[u8]) -> Option<String> {
    let name = Keys::name_of(prefix, std::str::from_utf8(key).ok()?)?;
    Keys::new(prefix, &name).ok().map(|_| name)
}

/// Up to `cap` names of locks held under `prefix` that start with `start`, sorted: SCAN (never
/// KEYS) with a MATCH on the lock keys, until the cursor comes back, `cap` names are found, or
/// `deadline` passes (shell completion: a huge keyspace takes many SCAN calls).
pub fn scan_names(
    redis: &mut Redis,
    prefix: &str,
    start: &str,
    cap: usize,
    deadline: Option<Instant>,
) -> Result<Vec<String>> {
    let pattern = format!("{}{{{}*}}", glob_escape(prefix), glob_escape(start));
    let mut cursor: u64 = 0;
    let mut names = Vec::new();
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis.call("scan", |con| {
            redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .arg("TYPE")
                .arg("string")
                .query(con)
        })?;
        names.extend(batch.iter().filter_map(|k| lock_name(prefix, k)));
        cursor = next;
        if cursor == 0 || names.len() >= cap || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
    }
    names.sort();
    names.dedup();
    names.truncate(cap);
    Ok(names)
}

/// The channel on which `status --watch` with no KEY announces itself besides its pattern
/// subscription, so that the scripts count it among every lock's listeners with one `PUBSUB
/// NUMSUB` (see `listened` in common.lua). No lock's own channel can be named so: those end in
/// `}:watch`.
pub fn watch_all_channel(prefix: &str) -> String {
    format!("{prefix}{{*}}:watching")
}

/// The scripts' `watch_all` argument: [`watch_all_channel`], or '' in a Redis Cluster, where a
/// watcher may subscribe on another node than the lock's (a PUBLISH reaches every node): a
/// script cannot count its listeners there and publishes every change.
pub fn watch_all_arg(redis: &Redis) -> String {
    if redis.in_cluster() {
        String::new()
    } else {
        watch_all_channel(redis.prefix())
    }
}

pub fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A reply's text (a bulk or simple string, or an integer written out), lossily decoded.
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// HGETALL of the meta hash as a map. Any client can write the hash, so every value is escaped
/// for display here, where it enters (printable.rs), and the note is redacted (redact.rs) as it
/// is when written: a note stored by an older version, or planted, may hold a password.
fn meta_map(v: &Value) -> HashMap<String, String> {
    let mut map = HashMap::new();
    if let Value::Array(items) = v {
        for pair in items.chunks_exact(2) {
            if let (Some(k), Some(val)) = (text(&pair[0]), text(&pair[1])) {
                let val = if k == "note" { redact(&val) } else { val };
                map.insert(k, field(&val));
            }
        }
    }
    map
}

/// The last forced release in the meta hash (see [`meta_map`]), if one is recorded.
fn forced_record(map: &HashMap<String, String>) -> Option<Forced> {
    Some(Forced {
        token: map.get("forced_token")?.clone(),
        by: map.get("forced_by").cloned().unwrap_or_default(),
        at_ms: map.get("forced_at")?.parse().ok()?,
    })
}

/// The acquisition counters in the meta hash (see [`meta_map`]); 0 for what is absent or not a
/// count.
fn counters(map: &HashMap<String, String>) -> Counters {
    let count = |field: &str| map.get(field).and_then(|v| v.parse().ok()).unwrap_or(0);
    Counters {
        acquisitions: count("acquisitions"),
        waited_ms: count("waited_ms"),
    }
}

/// Parses HGETALL of the meta hash into (fence counter, holder record if any).
fn parse_meta(v: &Value) -> (i64, Option<Holder>) {
    holder_record(&meta_map(v))
}

/// The fence counter and the holder record, if any, in the meta hash (see [`meta_map`]).
fn holder_record(map: &HashMap<String, String>) -> (i64, Option<Holder>) {
    let fence = map.get("fence").and_then(|f| f.parse().ok()).unwrap_or(0);
    let ms = |field: &str| map.get(field).and_then(|v| v.parse::<i64>().ok());
    let holder = map.get("token").map(|token| Holder {
        token: token.clone(),
        fence,
        host: map.get("host").cloned().unwrap_or_default(),
        pid: map.get("pid").cloned().unwrap_or_default(),
        user: map.get("user").cloned().unwrap_or_default(),
        note: map.get("note").cloned().unwrap_or_default(),
        acquired_ms: ms("acquired_ms"),
        ttl_ms: ms("ttl_ms"),
        expires_ms: ms("expires_ms"),
        released_ms: ms("released_ms"),
        pidns: map.get("pidns").cloned().unwrap_or_default(),
        slot: None,
        preemptible: map.get("preemptible").is_some_and(|v| v == "1"),
        preempted: map
            .get("preempted")
            .and_then(|p| p.strip_prefix(token.as_str())?.strip_prefix(':'))
            .and_then(Preemption::parse),
        kept: map.get("kept").is_some_and(|v| v == "1"),
    });
    (fence, holder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_their_spec_and_a_long_pool_is_shortened() {
        for mode in [
            Mode::Exclusive,
            Mode::Slots(3),
            Mode::Pool(vec!["a".into(), "b".into()]),
            Mode::Shared,
        ] {
            assert_eq!(Mode::from_spec(&mode.spec()), Some(mode));
        }
        assert_eq!(Mode::from_spec("x:1"), None);
        let names: Vec<String> = (0..1000).map(|i| format!("res{i}")).collect();
        assert_eq!(
            Mode::Pool(names).describe(),
            "--pool res0,res1,…,res999 (1000 names)"
        );
        assert_eq!(Mode::Slots(3).limit(), Some(3));
        assert_eq!(Mode::Shared.limit(), None);
    }

    #[test]
    fn keys_share_one_hash_tag() {
        let k = Keys::new("redlock:", "deploy").unwrap();
        assert_eq!(k.lock, "redlock:{deploy}");
        assert_eq!(k.meta, "redlock:{deploy}:meta");
        assert_eq!(k.wake("t"), "redlock:{deploy}:w:t");
        assert_eq!(k.events(), "redlock:{deploy}:events");
        for aux in [&k.meta, &k.queue, &k.leases, &k.wake("t")] {
            assert_eq!(Keys::name_of("redlock:", aux), None, "{aux}");
        }
        assert_eq!(
            Keys::name_of("redlock:", &k.lock).as_deref(),
            Some("deploy")
        );
        for aux in [&k.meta, &k.queue, &k.leases, &k.wake("t")] {
            assert_eq!(Keys::name_of("redlock:", aux), None, "{aux}");
        }
    }

    #[test]
    fn hand_over_roles_are_the_scripts_arguments() {
        assert_eq!(HandOver::Wake.args(), ("", ""));
        assert_eq!(HandOver::Quietly.args(), ("quiet", ""));
        assert_eq!(HandOver::To("w1").args(), ("", "w1"));
    }

    #[test]
    fn names_with_braces_round_trip() {
        let k = Keys::new("p:", "a}b{c}").unwrap();
        assert_eq!(Keys::name_of("p:", &k.lock).as_deref(), Some("a}b{c}"));
        assert_eq!(Keys::name_of("p:", &k.meta), None);
    }

    #[test]
    fn bad_names_are_rejected() {
        assert!(Keys::new("p:", "").is_err());
        assert!(Keys::new("p:", "a\nb").is_err());
        assert!(Keys::new("p:", &"x".repeat(MAX_NAME_LEN + 1)).is_err());
        assert!(Keys::new("p:", &"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(Keys::new("p:", "}x").is_err());
    }

    /// A forced release is read from the meta hash whoever holds the lock now, and belongs to
    /// the token it names only.
    #[test]
    fn a_forced_release_names_the_token_it_evicted() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let meta = Value::Array(
            [
                "fence",
                "7",
                "token",
                "new",
                "forced_token",
                "old",
                "forced_by",
                "ops@h (pid 9)",
                "forced_at",
                "1000",
            ]
            .iter()
            .map(|s| bulk(s))
            .collect(),
        );
        let forced = forced_record(&meta_map(&meta)).unwrap();
        assert_eq!(forced.token, "old");
        assert_eq!(forced.by, "ops@h (pid 9)");
        assert_eq!(forced.at_ms, 1000);
        assert_eq!(parse_meta(&meta).1.unwrap().token, "new");
        assert_eq!(
            forced_record(&meta_map(&Value::Array(vec![bulk("fence"), bulk("1")]))),
            None
        );
        let why = forced_reason(Some(&forced));
        assert!(
            why.contains("force-released by ops@h (pid 9) at 1970-01-01T00:00:01Z"),
            "{why}"
        );
    }

    /// The counters `acquire.lua` keeps: absent is 0, and so is what a client planted that is
    /// not a count (negative, fractional, text), without hiding the other counter.
    #[test]
    fn acquisition_counters_are_read_from_meta() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let meta =
            |pairs: &[&str]| meta_map(&Value::Array(pairs.iter().map(|s| bulk(s)).collect()));
        assert_eq!(
            counters(&meta(&["acquisitions", "3", "waited_ms", "1500"])),
            Counters {
                acquisitions: 3,
                waited_ms: 1500
            }
        );
        assert_eq!(counters(&meta(&["fence", "7"])), Counters::default());
        for junk in ["-1", "1.5", "many", ""] {
            assert_eq!(
                counters(&meta(&["acquisitions", junk, "waited_ms", "20"])),
                Counters {
                    acquisitions: 0,
                    waited_ms: 20
                },
                "{junk:?}"
            );
        }
    }

    #[test]
    fn a_stored_note_is_redacted_when_read() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let meta = Value::Array(
            [
                "token",
                "t",
                "note",
                "deploy --password hunter2",
                "user",
                "--password",
            ]
            .iter()
            .map(|s| bulk(s))
            .collect(),
        );
        let holder = parse_meta(&meta).1.unwrap();
        assert_eq!(holder.note, "deploy --password ***");
        // Only the note: other fields are not command lines.
        assert_eq!(holder.user, "--password");
    }

    /// Dead waiters (lease gone or run out) are left out and the others numbered in queue order;
    /// a waiter without a record is listed, unknown.
    #[test]
    fn the_queue_lists_live_waiters_in_order() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let queue = Value::Array(vec![
            bulk("t1"),
            bulk("999"),
            bulk("1\t\t1\tdead\th\t"),
            bulk("t2"),
            bulk("2000"),
            bulk("5\t9000\t42\tci\tweb1\tdeploy\twith a tab"),
            bulk("t3"),
            Value::Nil,
            bulk("6\t\t43\tno-lease\th\t"),
            bulk("t4"),
            bulk("1000"),
            Value::Nil,
        ]);
        let got = parse_queue(&queue, 1000);
        assert_eq!(
            got,
            [
                Waiting {
                    position: 1,
                    user: "ci".into(),
                    host: "web1".into(),
                    pid: "42".into(),
                    // A tab is a control character: escaped for display.
                    note: "deploy\\u{9}with a tab".into(),
                    since_ms: Some(5),
                    deadline_ms: Some(9000),
                    token: "t2".into(),
                },
                Waiting {
                    position: 2,
                    token: "t4".into(),
                    ..Waiting::default()
                },
            ]
        );
        assert_eq!(got[0].who(), "ci@web1 (pid 42)");
        assert_eq!(got[1].who(), "unknown");
    }

    #[test]
    fn glob_characters_in_the_prefix_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
