//! Reads of locks: one lock's state in one atomic snapshot (`status.lua`), many locks batched
//! for `status`, the names under a prefix (SCAN, never KEYS), and the decoding of what the
//! scripts return (the meta hash, the holders of places, the queue). Everything read here may
//! have been written by anyone: values are escaped for display where they enter (printable.rs),
//! and notes redacted.
//!
//! Layer 6 of the list in `lib.rs` (part of `lock`).

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use anyhow::Result;
use redis::Value;

use super::*;
use crate::client::{Redis, unexpected_reply};
use crate::printable::field;
use crate::redact::redact;
use crate::scripts;

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
pub(super) fn state_of(keys: &Keys, reply: &[Value]) -> Result<State> {
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
    let names = scan_names(redis, prefix, Names::Held, "", usize::MAX, None)?;
    names.iter().map(|n| Keys::new(prefix, n)).collect()
}

/// Which locks [`scan_names`] finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    /// Those whose lock key exists (held, or reserved for a waiter): what `status` lists.
    Held,
    /// Those redlock knows: held, waited for (a queue), or with a record or a history (meta, the
    /// log; they outlive the lock by `--meta-ttl`): what shell completion offers.
    Known,
}

/// The lock name in a key SCAN found under `prefix`, if the key can be a redlock lock at all.
/// Other keys under the prefix (anyone can write there: `redlock:{}`, a name too long, one that
/// is not UTF-8 or has control characters) are skipped, so one stray key cannot break `status`
/// for every lock.
fn lock_name(prefix: &str, which: Names, key: &[u8]) -> Option<String> {
    let key = std::str::from_utf8(key).ok()?;
    let name = match which {
        Names::Held => Keys::name_of(prefix, key)?,
        Names::Known => Keys::known_name_of(prefix, key)?,
    };
    Keys::new(prefix, &name).ok().map(|_| name)
}

/// Up to `cap` names of locks under `prefix` that start with `start` (`which` of them), sorted,
/// each once: SCAN (never KEYS) with a MATCH on the keys of those names, until the cursor comes
/// back, `cap` names are found, or `deadline` passes (shell completion: a huge keyspace takes
/// many SCAN calls).
pub fn scan_names(
    redis: &mut Redis,
    prefix: &str,
    which: Names,
    start: &str,
    cap: usize,
    deadline: Option<Instant>,
) -> Result<Vec<String>> {
    let tag = format!("{}{{{}*", glob_escape(prefix), glob_escape(start));
    // Held: the lock keys only, strings (a plain lock's token, or the marker of a lock with more
    // than one holder). Known: every key of those names, sorted out by `known_name_of`.
    let (pattern, kind) = match which {
        Names::Held => (format!("{tag}}}"), Some("string")),
        Names::Known => (tag, None),
    };
    let mut cursor: u64 = 0;
    let mut names = BTreeSet::new();
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis.call("scan", |con| {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000);
            if let Some(kind) = kind {
                scan.arg("TYPE").arg(kind);
            }
            scan.query(con)
        })?;
        names.extend(batch.iter().filter_map(|k| lock_name(prefix, which, k)));
        cursor = next;
        if cursor == 0 || names.len() >= cap || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
    }
    Ok(names.into_iter().take(cap).collect())
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
pub(super) fn parse_meta(v: &Value) -> (i64, Option<Holder>) {
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

    /// HGETALL's reply for the field/value `pairs`.
    fn hash(pairs: &[&str]) -> Value {
        Value::Array(
            pairs
                .iter()
                .map(|s| Value::BulkString(s.as_bytes().to_vec()))
                .collect(),
        )
    }

    /// A forced release is read from the meta hash whoever holds the lock now, and belongs to
    /// the token it names only.
    #[test]
    fn a_forced_release_names_the_token_it_evicted() {
        let meta = hash(&[
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
        ]);
        let forced = forced_record(&meta_map(&meta)).unwrap();
        assert_eq!(forced.token, "old");
        assert_eq!(forced.by, "ops@h (pid 9)");
        assert_eq!(forced.at_ms, 1000);
        assert_eq!(parse_meta(&meta).1.unwrap().token, "new");
        assert_eq!(forced_record(&meta_map(&hash(&["fence", "1"]))), None);
    }

    /// The counters `acquire.lua` keeps: absent is 0, and so is what a client planted that is
    /// not a count (negative, fractional, text), without hiding the other counter.
    #[test]
    fn acquisition_counters_are_read_from_meta() {
        let meta = |pairs: &[&str]| meta_map(&hash(pairs));
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
        let meta = hash(&[
            "token",
            "t",
            "note",
            "deploy --password hunter2",
            "user",
            "--password",
        ]);
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
