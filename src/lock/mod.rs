//! The lock model and the one-server protocol, one script call per operation. The layer above
//! `client/` and `scripts.rs`, below `store.rs`; waiting for a lock is in `acquire.rs`,
//! counting a quorum's answers in `quorum/`, the wording of a state for humans in `output.rs`.
//!
//! Split by job: this file is the model (the keys, the holder and waiter records, the kinds of
//! lock, the verdicts and what an attempt asks for); `ops.rs` writes, one script call per
//! operation (attempt, leave, release, wake, extend, raise the fence, report); `read.rs` reads
//! (one lock, many locks batched for `status`, SCAN) and decodes the scripts' replies; `slots.rs`
//! the same for locks with more than one holder. Callers name them all as `lock::X`.
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
//! Layer 6 of the list in `lib.rs`.

mod ops;
mod read;
pub mod slots;

pub use ops::*;
pub use read::*;

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::error::{Kind, refusal, usage};
use crate::printable::{field, printable, shown, unsafe_in_name};

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

    /// The lock name of a key that makes a lock known ([`Names::Known`]): the lock key, its
    /// queue, its meta hash or its history. The wake lists, leases and tombstones are left out:
    /// they never outlive the queue and the meta hash. A lock key always ends in `}`, so a name
    /// ending in `}:q` is read as a lock's, never as the queue of a shorter name.
    fn known_name_of(prefix: &str, key: &str) -> Option<String> {
        let lock = [":q", ":meta", ":log"]
            .iter()
            .find_map(|aux| key.strip_suffix(aux))
            .filter(|lock| lock.ends_with('}'))
            .unwrap_or(key);
        Keys::name_of(prefix, lock)
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
}

/// A lock this process holds (or held: the lock may have expired since).
#[derive(Debug, Clone)]
pub struct Lock {
    pub keys: Keys,
    pub token: String,
    pub fence: i64,
    pub acquired_ms: i64,
    pub ttl: Duration,
    /// When the successful attempt was sent: the lock is surely ours until `sent + lease -
    /// drift` (and, after a renewal sent at `s`, until `s + ttl - drift`). For a lock granted by
    /// a release ([`Grant`]), when our last attempt before the grant was sent: the grant came
    /// after that attempt ran, so its expiry is no earlier than `sent + lease`.
    pub sent: Instant,
    /// How long the acquisition set the lock to last: the TTL, or for a grant the claim window
    /// (its holder extends it to its TTL: see [`Kept::by_holder`]).
    pub lease: Duration,
    /// When we learned the lock was ours (the holder's clock: `--max-runtime`, "held for").
    pub taken: Instant,
    /// What is allowed for clock drift between servers (zero on one server; see `quorum/`).
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
    /// Until when the lock is surely ours, counting from a renewal sent at `sent` (which sets the
    /// TTL).
    pub fn valid_until(&self, sent: Instant) -> Instant {
        sent + self.ttl.saturating_sub(self.drift)
    }

    /// Until when the lock is surely ours as acquired (before any renewal).
    pub fn acquired_until(&self) -> Instant {
        self.sent + self.lease.saturating_sub(self.drift)
    }

    /// The lock after a renewal sent at `sent` succeeded: it lasts its whole TTL from then.
    pub fn renewed_at(&mut self, sent: Instant) {
        self.sent = sent;
        self.lease = self.ttl;
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
        /// ([`Reply::state`]): what a waiter's status line says, read in the same round trip.
        seen: Option<Box<State>>,
    },
    /// A later `--supersede` waiter made this one leave the queue (it is out of it already).
    Superseded {
        /// Who: 'user@host (pid N)'.
        by: String,
    },
}

/// How long a reservation for the first waiter, or a grant to it, lasts before the next waiter
/// gets its turn (unless the waiter claims the reservation, or extends the grant).
pub const CLAIM_WINDOW: Duration = Duration::from_secs(2);

/// A release's grant of the lock to a waiter, as the push that wakes it says
/// (`g:FENCE:ACQUIRED_MS:EXPIRY_MS`; see `grant_to` in `common.lua`). Any other push is a plain
/// wake-up, and the waiter's next attempt claims what was reserved for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub fence: i64,
    pub acquired_ms: i64,
    /// How long the releaser made the grant last (the claim window, or the waiter's TTL if
    /// shorter): what the waiter counts on, whatever its own version's claim window is.
    pub lease: Duration,
}

impl Grant {
    /// The grant a popped value announces, if it is one.
    pub fn parse(pushed: &str) -> Option<Grant> {
        let mut f = pushed.strip_prefix("g:")?.split(':');
        let grant = Grant {
            fence: f.next()?.parse().ok()?,
            acquired_ms: f.next()?.parse().ok()?,
            lease: Duration::from_millis(f.next()?.parse().ok()?),
        };
        f.next().is_none().then_some(grant)
    }
}

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

/// What an attempt asks for besides the lock and the token. Built once per acquisition
/// (`take.rs`); each attempt copies it with what changed since the one before (`prev`, `wait`,
/// `waited`, `reply`), and a quorum with each node's part (see `quorum/`).
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub ttl: Duration,
    /// Recorded as the holder (or, queued, as the waiter).
    pub owner: &'a Owner,
    /// The kind of lock asked for (plain, or with more than one holder: see `slots.rs`).
    pub mode: &'a Mode,
    /// How the attempt stands in the queue, and toward the holder.
    pub queue: Queue,
    /// What the reply carries besides the verdict.
    pub reply: Reply,
    /// Who keeps the lock alive once it is granted.
    pub kept: Kept,
    /// The token of the attempt before, whose queue place and reservation this one takes over.
    pub prev: Option<&'a str>,
    /// What is left of the wait (`None`: forever); a waiter's record says when it gives up.
    pub wait: Option<Duration>,
    /// How long the client has waited so far: told with the acquisition, summed for metrics.
    pub waited: Duration,
}

/// What a busy lock does with an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// Nothing: busy, not queued (`-n`; a quorum's nodes other than the queue node).
    No,
    /// Queue up.
    Queue,
    /// `--supersede`: queue up, and make every earlier `--supersede` waiter leave the queue (see
    /// `supersede_earlier` in `common.lua`).
    Supersede,
}

impl Join {
    /// Whether a busy lock queues the attempt.
    pub fn queues(self) -> bool {
        self != Join::No
    }
}

/// How an attempt stands in the queue and toward the holder, and how the holder it becomes may
/// be treated (the options `--supersede`, `--preempt`, `--preemptible`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queue {
    pub join: Join,
    /// `--preempt`: queue ahead of the waiters that did not ask for it, and ask a
    /// `--preemptible` holder to stop (see `acquire.lua`).
    pub preempt: bool,
    /// `--preemptible`: a later `--preempt` waiter may ask the holder to stop (recorded).
    pub preemptible: bool,
    /// Not the waiter's first attempt: a grant pushed to it before this attempt ran, which this
    /// attempt finds no longer ours (forced away, evicted), is cleared from its wake list, so
    /// that a push it pops later is always a grant made after this attempt ([`Grant`]).
    pub again: bool,
}

/// What an attempt's reply carries besides the verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reply {
    /// The server's run_id (a quorum notices restarts by it).
    pub run_id: bool,
    /// A waiter's status line is due: a busy attempt that queues us also returns the lock's
    /// state ([`Attempt::Busy`]'s `seen`), so that the line costs no round trip of its own.
    pub state: bool,
    /// A waiter that joins the queue can be granted the lock by a release directly ([`Grant`]):
    /// the store's business (one server, a plain lock; a quorum's nodes never grant).
    pub grant: bool,
}

/// Who keeps a lock alive once it is granted (recorded, for `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Its holder, for as long as it runs (`exec`, which renews it).
    ByHolder,
    /// Nobody: a lock left to expire (`acquire` without `--while-pid`).
    Nobody,
    /// `acquire --while-pid`: a keeper, for as long as the holder's pid lives.
    WhilePid,
}

impl Kept {
    /// Whether the holder renews the lock itself from the start, so that a grant for the claim
    /// window can be used as it is (see [`Grant`]); otherwise it is extended to its TTL before
    /// it is handed on.
    pub fn by_holder(self) -> bool {
        self == Kept::ByHolder
    }
}

/// What a quorum tells about the acquisition it won (`fence.lua`): who, after how long a wait,
/// for how long.
#[derive(Debug, Clone)]
pub struct Told {
    pub owner: Owner,
    pub waited: Duration,
    pub ttl: Duration,
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

/// Whether an attempt with the token we give up may still be on its way to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doubt {
    /// Every attempt we sent was answered: leaving is enough.
    Sure,
    /// A reply was lost (a timeout, a dropped connection): the attempt may run after our leave,
    /// so the leave also writes a [`TOMBSTONE`] that makes it do nothing.
    Unsure,
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

/// The channel on which `status --watch` with no KEY announces itself besides its pattern
/// subscription, so that the scripts count it among every lock's listeners with one `PUBSUB
/// NUMSUB` (see `listened` in common.lua). No lock's own channel can be named so: those end in
/// `}:watch`.
pub fn watch_all_channel(prefix: &str) -> String {
    format!("{prefix}{{*}}:watching")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails if a push that is not exactly a grant (a plain wake-up, another version's layout)
    /// is read as one: it would make the waiter a holder.
    #[test]
    fn only_a_whole_grant_is_read_as_one() {
        assert_eq!(
            Grant::parse("g:17:1700000000000:2000"),
            Some(Grant {
                fence: 17,
                acquired_ms: 1_700_000_000_000,
                lease: Duration::from_secs(2),
            })
        );
        for other in [
            "1",
            "g:17:1700000000000",
            "g:17:1:2000:5",
            "g:x:1:2000",
            "",
            "g:",
        ] {
            assert_eq!(Grant::parse(other), None, "{other}");
        }
    }

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
    fn a_lock_is_known_by_its_key_its_queue_its_meta_and_its_history() {
        for name in ["deploy", "a}b{c}", "x}:q", "y}:meta"] {
            let k = Keys::new("redlock:", name).unwrap();
            for key in [&k.lock, &k.queue, &k.meta, &k.log()] {
                assert_eq!(
                    Keys::known_name_of("redlock:", key).as_deref(),
                    Some(name),
                    "{key}"
                );
            }
            for aux in [&k.leases, &k.wake("t"), &format!("{}:gone:t", k.lock)] {
                assert_eq!(Keys::known_name_of("redlock:", aux), None, "{aux}");
            }
        }
        assert_eq!(Keys::known_name_of("redlock:", "redlock:{x}:w:t:q"), None);
        assert_eq!(Keys::known_name_of("redlock:", "other:{x}:q"), None);
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
}
