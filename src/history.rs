//! A lock's history: the capped stream `PREFIX{NAME}:log` that the scripts append to (`event` in
//! `common.lua`), read back for `redlock log`.
//!
//! Each entry is one event (`acquired`, `released`, `expired`, `forced`, `lost`) with the fields
//! the script wrote, among them `at_ms`, the server's clock (TIME) in ms when it was written.
//! An entry is dated by that field, not by its stream ID: the ID's first part is the clock only
//! until someone plants an entry with an ID in the future (`XADD KEY 99999999999999-0 ...`);
//! every later ID then follows the planted one, and would date its event in the year 5138. The
//! IDs stay in the order written, so they remain the cursor (`--follow`, paging), and an ID is
//! never smaller than the clock when it was given, so `--since`'s lower bound on IDs only
//! lets more through, which the field then filters. An entry without the field (written by a
//! version before it) is dated by its ID.
//! Anyone who can write the prefix can write the stream, so every field read here is untrusted:
//! escaped for display and bounded (printable.rs: kept to 4 KiB, shown to 200 characters in
//! lines), the note redacted (redact.rs), numbers parsed, never trusted to fit. The stream lives on the lock's server (a quorum's queue node, the first URL).
//!
//! Layer 8 of the list in `lib.rs`.

use std::ops::ControlFlow;
use std::time::Duration;

use anyhow::Result;
use redis::Value;
use serde_json::{Map, Value as Json, json};

use crate::client::{Redis, unexpected_reply};
use crate::lock::{Keys, text};
use crate::output::{human_ms, rfc3339};
use crate::printable::{field, printable, shown};
use crate::redact::redact;

/// One event of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The stream ID (`MS-SEQ`): where `--follow` goes on from.
    pub id: String,
    /// When it was written (the server's clock, ms): the `at_ms` field, or the ID's first part
    /// for an entry without one.
    pub at_ms: i64,
    /// The fields in the order written, `event` and `token` first; escaped, the note redacted.
    pub fields: Vec<(String, String)>,
}

impl Entry {
    fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The kind of event (`acquired`, ...), `?` when missing.
    pub fn kind(&self) -> &str {
        self.get("event").unwrap_or("?")
    }

    fn millis(&self, name: &str) -> Option<Duration> {
        self.get(name)?
            .parse::<u64>()
            .ok()
            .map(Duration::from_millis)
    }

    fn who(&self) -> Option<String> {
        let (user, host) = (shown(self.get("user")?), shown(self.get("host")?));
        Some(match self.get("pid").map(shown) {
            Some(pid) if !pid.is_empty() => format!("{user}@{host} (pid {pid})"),
            _ => format!("{user}@{host}"),
        })
    }

    /// One line for humans: time, event, token fingerprint, then what the event says.
    pub fn line(&self, name: Option<&str>) -> String {
        let mut parts = vec![rfc3339(self.at_ms)];
        if let Some(name) = name {
            parts.push(format!("'{}'", printable(name)));
        }
        parts.push(format!("{:<8}", shown(self.kind())));
        parts.push(shown(self.get("token").unwrap_or("?")).into_owned());
        let mut said = Vec::new();
        if let Some(fence) = self.get("fence").filter(|f| !f.is_empty()) {
            said.push(format!("fence {}", shown(fence)));
        }
        // A lock with more than one holder: whose place it was.
        if let Some(slot) = self.get("slot").filter(|s| !s.is_empty()) {
            said.push(format!("slot {}", shown(slot)));
        }
        match self.kind() {
            "acquired" => {
                if let Some(who) = self.who() {
                    said.push(format!("by {who}"));
                }
                if let Some(w) = self.millis("waited_ms").filter(|w| !w.is_zero()) {
                    said.push(format!("after waiting {}", human_ms(w)));
                }
                if let Some(note) = self.get("note").filter(|n| !n.is_empty()) {
                    said.push(format!("running '{}'", shown(note)));
                }
            }
            "released" => {
                if let Some(h) = self.millis("held_ms") {
                    said.push(format!("held {}", human_ms(h)));
                }
                if let Some(status) = self.get("status") {
                    said.push(format!("command exited {status}"));
                }
            }
            "expired" => {
                if let Some(who) = self.who() {
                    said.push(format!("held by {who}"));
                }
                if let Some(h) = self.millis("held_ms") {
                    said.push(format!("for {}", human_ms(h)));
                }
                if let Some(at) = self.get("expires_ms").and_then(|t| t.parse().ok()) {
                    said.push(format!("never released; expired at {}", rfc3339(at)));
                }
            }
            "forced" => {
                if let Some(who) = self.who() {
                    said.push(format!("held by {who}"));
                }
                if let Some(by) = self.get("by").map(shown) {
                    said.push(format!("released by {by}"));
                }
            }
            "superseded" => {
                if let Some(by) = self.get("by").map(shown) {
                    said.push(format!("superseded by {by}"));
                }
            }
            "preempted" => {
                if let Some(by) = self.get("by").map(shown) {
                    said.push(format!("asked to stop by {by} (--preempt)"));
                }
            }
            "lost" | "overran" | "timeout" => {
                if let Some(why) = self.get("reason") {
                    said.push(shown(why).into_owned());
                }
            }
            _ => {}
        }
        if !said.is_empty() {
            parts.push(said.join(", "));
        }
        parts.join("  ")
    }

    /// The entry as one JSON object: `time` (RFC 3339), `at_ms`, `id`, `lock` and the fields
    /// (numbers as numbers where they fit; fences stay strings: they can exceed 2^53).
    pub fn json(&self, name: &str) -> Json {
        let mut m = Map::new();
        m.insert("time".into(), json!(rfc3339(self.at_ms)));
        m.insert("at_ms".into(), json!(self.at_ms));
        m.insert("id".into(), json!(self.id));
        m.insert("lock".into(), json!(name));
        for (k, v) in &self.fields {
            if k == "at_ms" {
                continue;
            }
            let numeric = matches!(
                k.as_str(),
                "waited_ms" | "ttl_ms" | "held_ms" | "status" | "expires_ms" | "slot"
            );
            let value = match v.parse::<i64>() {
                Ok(n) if numeric => json!(n),
                _ => json!(v),
            };
            m.insert(k.clone(), value);
        }
        Json::Object(m)
    }
}

/// Where reading starts and how much.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    /// Only entries written at or after this time (server ms, as [`Entry::at_ms`] says).
    pub since_ms: Option<i64>,
    /// At most this many, the most recent.
    pub limit: Option<usize>,
}

/// The server's clock in ms (for `--since`: the stream's IDs are the server's time).
pub fn server_ms(redis: &mut Redis) -> Result<i64> {
    let (secs, micros): (i64, i64) = redis.call("time", |con| redis::cmd("TIME").query(con))?;
    Ok(secs * 1000 + micros / 1000)
}

/// Whether `keys`' history exists at all (its stream key, however few entries it keeps): tells
/// "nothing in this range" from "nothing recorded" when a listing comes back empty.
pub fn exists(redis: &mut Redis, keys: &Keys) -> Result<bool> {
    let n: i64 = redis.call("history", |con| {
        redis::cmd("EXISTS").arg(keys.log()).query(con)
    })?;
    Ok(n > 0)
}

/// The entries of `keys`' history in `range`, oldest first.
///
/// Without a limit, page by page ([`PAGE`] entries per round trip), each page passed to `each`
/// as it comes, so that a history far beyond `--log-max` (anyone may write the stream) is never
/// held whole; with a limit, the newest that many, read backwards page by page until there are
/// enough. Entries dated before `since_ms` are left out (the IDs' bound lets through entries
/// that follow a planted future ID; see the module's doc). Stops when `each` says `Break`.
/// Returns the last entry read, if any (passed or not: `--follow` goes on after it).
pub fn read(
    redis: &mut Redis,
    keys: &Keys,
    range: Range,
    mut each: impl FnMut(&[Entry]) -> Result<ControlFlow<()>>,
) -> Result<Option<Entry>> {
    let log = keys.log();
    let start = range
        .since_ms
        .map_or_else(|| "-".to_string(), |ms| ms.max(0).to_string());
    let wanted = |e: &Entry| range.since_ms.is_none_or(|since| e.at_ms >= since);
    if let Some(n) = range.limit {
        let mut kept: Vec<Entry> = Vec::new();
        let mut newest = None;
        let mut to = "+".to_string();
        while kept.len() < n {
            let reply: Value = redis.call("history", |con| {
                redis::cmd("XREVRANGE")
                    .arg(&log)
                    .arg(&to)
                    .arg(&start)
                    .arg("COUNT")
                    .arg(PAGE.min(n - kept.len()).max(1))
                    .query(con)
            })?;
            let page = entries(&reply)?;
            let full = page.len() == PAGE.min(n - kept.len()).max(1);
            let Some(oldest) = page.last().map(|e| e.id.clone()) else {
                break;
            };
            if newest.is_none() {
                newest = page.first().cloned();
            }
            kept.extend(page.into_iter().filter(wanted));
            // The next page ends just before this one's oldest ID; an ID we cannot parse
            // (planted) ends the listing rather than loop on it.
            match previous_id(&oldest) {
                Some(prev) if full => to = prev,
                _ => break,
            }
        }
        kept.truncate(n);
        kept.reverse();
        // One listing: whether `each` wants more, nothing comes after it.
        let _ = each(&kept)?;
        return Ok(newest);
    }
    let mut from = start;
    let mut last = None;
    loop {
        let reply: Value = redis.call("history", |con| {
            redis::cmd("XRANGE")
                .arg(&log)
                .arg(&from)
                .arg("+")
                .arg("COUNT")
                .arg(PAGE)
                .query(con)
        })?;
        let mut page = entries(&reply)?;
        let full = page.len() == PAGE;
        let Some(e) = page.last().cloned() else {
            return Ok(last);
        };
        page.retain(wanted);
        let stop = each(&page)?.is_break();
        // The next page starts just after this one's last ID (`MS-SEQ`); an ID we cannot
        // parse (planted) ends the listing rather than loop on it.
        let Some(next) = next_id(&e.id) else {
            return Ok(Some(e));
        };
        last = Some(e);
        if stop || !full {
            return Ok(last);
        }
        from = next;
    }
}

/// How many entries one read of [`read`] brings.
const PAGE: usize = 1000;

/// The smallest stream ID after `id` (`MS-SEQ`).
fn next_id(id: &str) -> Option<String> {
    let (ms, seq) = id.split_once('-')?;
    let (ms, seq): (u64, u64) = (ms.parse().ok()?, seq.parse().ok()?);
    Some(match seq.checked_add(1) {
        Some(seq) => format!("{ms}-{seq}"),
        None => format!("{}-0", ms.checked_add(1)?),
    })
}

/// The largest stream ID before `id` (`MS-SEQ`).
fn previous_id(id: &str) -> Option<String> {
    let (ms, seq) = id.split_once('-')?;
    let (ms, seq): (u64, u64) = (ms.parse().ok()?, seq.parse().ok()?);
    Some(match seq.checked_sub(1) {
        Some(seq) => format!("{ms}-{seq}"),
        None => format!("{}-{}", ms.checked_sub(1)?, u64::MAX),
    })
}

/// Entries written after `after` (a stream ID), waiting up to `block` for the first one; empty
/// when none came.
pub fn read_after(
    redis: &mut Redis,
    keys: &Keys,
    after: &str,
    block: Duration,
) -> Result<Vec<Entry>> {
    let log = keys.log();
    let ms = u64::try_from(block.as_millis()).unwrap_or(u64::MAX).max(1);
    let reply: Value = redis.call_waiting("history", |con| {
        redis::cmd("XREAD")
            .arg("COUNT")
            .arg(1000)
            .arg("BLOCK")
            .arg(ms)
            .arg("STREAMS")
            .arg(&log)
            .arg(after)
            .query(con)
    })?;
    match reply {
        Value::Nil => Ok(Vec::new()),
        // [[key, entries]] (RESP2), or a map key -> entries (RESP3).
        Value::Array(streams) => match streams.as_slice() {
            [Value::Array(pair)] if pair.len() == 2 => entries(&pair[1]),
            _ => Err(unexpected_reply("history", format!("{streams:?}"))),
        },
        Value::Map(streams) => match streams.as_slice() {
            [(_, found)] => entries(found),
            _ => Err(unexpected_reply("history", format!("{streams:?}"))),
        },
        other => Err(unexpected_reply("history", format!("{other:?}"))),
    }
}

/// Parses `[[id, [field, value, ...]], ...]`.
fn entries(v: &Value) -> Result<Vec<Entry>> {
    let Value::Array(items) = v else {
        if matches!(v, Value::Nil) {
            return Ok(Vec::new());
        }
        return Err(unexpected_reply("history", format!("{v:?}")));
    };
    items.iter().map(entry).collect()
}

fn entry(v: &Value) -> Result<Entry> {
    let bad = || unexpected_reply("history", format!("{v:?}"));
    let Value::Array(pair) = v else {
        return Err(bad());
    };
    let [id, Value::Array(flat)] = pair.as_slice() else {
        return Err(bad());
    };
    let id = text(id).ok_or_else(bad)?;
    let by_id = || id.split('-').next().and_then(|ms| ms.parse().ok());
    let fields = flat
        .chunks(2)
        .filter_map(|kv| match kv {
            [k, v] => {
                let (k, v) = (text(k)?, text(v)?);
                let v = if k == "note" { redact(&v) } else { v };
                Some((field(&k), field(&v)))
            }
            _ => None,
        })
        .collect::<Vec<(String, String)>>();
    // Dated by the field the script wrote from TIME (see the module's doc), else by the ID.
    let at_ms = fields
        .iter()
        .find(|(k, _)| k == "at_ms")
        .and_then(|(_, v)| v.parse::<i64>().ok())
        .or_else(by_id)
        .unwrap_or(0);
    Ok(Entry {
        id: printable(&id).into_owned(),
        at_ms,
        fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn raw(id: &str, kv: &[(&str, &str)]) -> Value {
        let flat = kv.iter().flat_map(|(k, v)| [bulk(k), bulk(v)]).collect();
        Value::Array(vec![bulk(id), Value::Array(flat)])
    }

    #[test]
    fn an_entry_is_escaped_and_its_note_redacted() {
        let v = Value::Array(vec![raw(
            "1796152167492-1",
            &[
                ("event", "acquired"),
                ("token", "7764a7f6"),
                ("fence", "1796152167492237"),
                ("user", "ci\u{1b}[2J"),
                ("host", "runner"),
                ("pid", "42"),
                ("note", "deploy --password hunter2"),
                ("waited_ms", "41000"),
            ],
        )]);
        let e = entries(&v).unwrap().remove(0);
        assert_eq!(e.at_ms, 1_796_152_167_492);
        let line = e.line(None);
        assert!(!line.contains('\u{1b}'), "{line}");
        assert!(!line.contains("hunter2"), "{line}");
        assert!(line.contains("after waiting 41s"), "{line}");
        let j = e.json("k");
        assert_eq!(j["waited_ms"], 41000);
        assert_eq!(j["fence"], "1796152167492237");
        assert_eq!(j["lock"], "k");
    }

    #[test]
    fn the_next_page_starts_just_after_the_last_id() {
        assert_eq!(next_id("5-0").as_deref(), Some("5-1"));
        assert_eq!(next_id("5-18446744073709551615").as_deref(), Some("6-0"));
        assert_eq!(next_id("18446744073709551615-18446744073709551615"), None);
        assert_eq!(next_id("x"), None);
        assert_eq!(next_id("5-x"), None);
        assert_eq!(previous_id("5-1").as_deref(), Some("5-0"));
        assert_eq!(
            previous_id("5-0").as_deref(),
            Some("4-18446744073709551615")
        );
        assert_eq!(previous_id("0-0"), None);
        assert_eq!(previous_id("x"), None);
    }

    #[test]
    fn an_entry_is_dated_by_its_field_else_by_its_id() {
        let v = Value::Array(vec![
            raw(
                "99999999999999-0",
                &[("event", "acquired"), ("at_ms", "1700000000000")],
            ),
            raw("1600000000000-0", &[("event", "lost")]),
            raw("1600000000000-1", &[("event", "lost"), ("at_ms", "soon")]),
        ]);
        let got: Vec<i64> = entries(&v).unwrap().iter().map(|e| e.at_ms).collect();
        assert_eq!(
            got,
            [1_700_000_000_000, 1_600_000_000_000, 1_600_000_000_000]
        );
        let e = entries(&v).unwrap().remove(0);
        assert_eq!(e.json("k")["at_ms"], 1_700_000_000_000_i64);
        assert!(e.line(None).starts_with("2023-"), "{}", e.line(None));
    }

    #[test]
    fn a_malformed_stream_is_an_error_not_a_panic() {
        assert!(entries(&Value::Int(3)).is_err());
        assert!(entries(&Value::Array(vec![Value::Int(1)])).is_err());
        let odd = Value::Array(vec![Value::Array(vec![
            bulk("x"),
            Value::Array(vec![bulk("event")]),
        ])]);
        let e = entries(&odd).unwrap().remove(0);
        assert_eq!((e.at_ms, e.kind()), (0, "?"));
        assert!(e.line(Some("k")).contains('?'));
    }
}
