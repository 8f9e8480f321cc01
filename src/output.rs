//! What redlock says about a lock: the token/env/JSON forms of `acquire` and `status` as a table
//! or JSON on stdout, and the wording of a lock's state, its durations and times
//! ([`State::describe`], [`human_ms`], [`rfc3339`], [`forced_reason`]) that the messages on
//! stderr use too. The words live here, the facts in `lock`.
//!
//! stdout carries machine output only; messages for humans go to stderr from the callers.
//!
//! The status table describes the current hold in every column; for a free lock whose meta hash
//! keeps a last holder, HOLDER says `(last: WHO until TIME)` (with `, force-released by WHO` when a
//! forced release ended that hold) and FENCE is the counter, while the other columns stay `-`. Columns are padded by display width, so wide (CJK) characters, which
//! take two terminal cells, keep them aligned.
//!
//! Layer 7 of the list in `lib.rs`.

use std::time::Duration;

use serde_json::{Value, json};
use unicode_width::UnicodeWidthStr;

use crate::cli::Format;
use crate::lock::{
    Forced, Holder, Liveness, Lock, Mode, Preemption, QuorumVerdict, Slots, State, Waiting,
    fingerprint,
};
use crate::printable::shown;

/// The text `acquire` prints on stdout for `format`.
pub fn acquired(lock: &Lock, format: Format) -> String {
    match format {
        Format::Token => format!("{}\n", lock.token),
        Format::Env => {
            let mut env = format!(
                "REDLOCK_KEY={}\nREDLOCK_TOKEN={}\nREDLOCK_FENCE={}\n",
                shell_quote(&lock.keys.name),
                lock.token,
                lock.fence
            );
            if let Some(slot) = &lock.slot {
                env.push_str(&format!("REDLOCK_SLOT={}\n", slot.index));
                if let Some(r) = &slot.resource {
                    env.push_str(&format!("REDLOCK_RESOURCE={}\n", shell_quote(r)));
                }
            }
            env
        }
        Format::Json => {
            let mut v = json!({
                "key": lock.keys.name,
                "token": lock.token,
                "fence": lock.fence,
                "ttl_ms": lock.ttl.as_millis() as u64,
                "acquired_at": rfc3339(lock.acquired_ms),
            });
            if let Some(slot) = &lock.slot {
                v["slot"] = json!(slot.index);
                v["resource"] = json!(slot.resource);
            }
            format!("{v}\n")
        }
    }
}

/// Quotes `s` for a POSIX shell, only when it needs it.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:@%+,".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// A duration for the status table: whole seconds (cut, not rounded) from one second up, as in
/// `3m 12s`; milliseconds only below a second.
fn coarse(d: Duration) -> String {
    let d = if d >= Duration::from_secs(1) {
        Duration::from_secs(d.as_secs())
    } else {
        Duration::from_millis(d.as_millis() as u64)
    };
    humantime::format_duration(d).to_string()
}

/// One lock as a JSON object.
pub fn state_json(s: &State, show_token: bool) -> Value {
    // A lock with more than one holder keeps a marker there, not a token (its holders have
    // theirs under `slots`).
    let token = s.token.as_deref().filter(|_| s.slots.is_none()).map(|t| {
        if show_token {
            t.to_string()
        } else {
            fingerprint(t)
        }
    });
    let h = s.holder.as_ref();
    let mut v = json!({
        "key": s.keys.name,
        "held": s.held(),
        "state": state_word(s),
        "holder": h.map(|h| json!({"user": h.user, "host": h.host, "pid": h.pid.parse::<u64>().ok(), "kept": h.kept})),
        "note": h.map(|h| h.note.clone()),
        "acquired_at": h.and_then(|h| h.acquired_ms).filter(|_| s.held()).map(rfc3339),
        "held_for_ms": s.held_for().filter(|_| s.held()).map(|d| d.as_millis() as u64),
        "ttl_ms": (s.pttl_ms >= 0).then_some(s.pttl_ms),
        "fence": s.fence,
        "waiters": s.waiters,
        if show_token { "token" } else { "token_fingerprint" }: token,
        "last_holder": s.last.as_deref().map(|h| last_json(h, s.forced_of(&h.token))),
        "stale": s.stale.map(|l| l == Liveness::Gone),
        "draining": s.stale.map(|l| l == Liveness::Draining),
        "queue": s.queue.iter().map(waiting_json).collect::<Vec<_>>(),
    });
    if let Some(sl) = &s.slots {
        v["slots"] = slots_json(s, sl, show_token);
    }
    if let Some(h) = h.filter(|_| s.held() && s.slots.is_none()) {
        v["preemptible"] = json!(h.preemptible);
        v["preempted_by"] = json!(h.preempted.as_ref().map(|p| p.by.clone()));
    }
    if let Some(q) = &s.quorum {
        let nodes: Vec<Value> = q
            .nodes
            .iter()
            .map(|(url, view)| node_json(url, view))
            .collect();
        v["quorum"] = json!({"servers": q.nodes.len(), "needed": q.needed, "agree": q.agree});
        v["nodes"] = Value::Array(nodes);
    }
    v
}

/// A lock with more than one holder: what it is and who holds it, as `status --json` shows it
/// under `slots`.
fn slots_json(s: &State, sl: &Slots, show_token: bool) -> Value {
    let kind = match sl.mode {
        Mode::Slots(_) => "slots",
        Mode::Pool(_) => "pool",
        Mode::Shared => "shared",
        Mode::Exclusive => "unknown",
    };
    let holders: Vec<Value> = sl
        .holders
        .iter()
        .map(|h| {
            json!({
                "slot": h.slot,
                "resource": h.slot.and_then(|i| sl.mode.resource(i)),
                "user": h.user,
                "host": h.host,
                "pid": h.pid.parse::<u64>().ok(),
                "note": h.note,
                "fence": h.fence,
                "acquired_at": h.acquired_ms.map(rfc3339),
                "held_for_ms": h.acquired_ms.map(|a| s.now_ms.saturating_sub(a).max(0)),
                "ttl_ms": h.expires_ms.map(|e| e.saturating_sub(s.now_ms).max(0)),
                if show_token { "token" } else { "token_fingerprint" }:
                    if show_token { h.token.clone() } else { h.fingerprint() },
            })
        })
        .collect();
    json!({
        "kind": kind,
        "limit": sl.mode.limit(),
        "pool": match &sl.mode {
            Mode::Pool(names) => json!(names),
            _ => Value::Null,
        },
        "set_by": sl.set_by,
        "held": sl.holders.len(),
        "reserved": sl.reserved,
        "holders": holders,
    })
}

/// For each lock with more than one holder: its holders, one line each, after the table.
pub fn holders_details(states: &[State], show_token: bool) -> String {
    let mut out = String::new();
    for s in states {
        let Some(sl) = s.slots.as_deref().filter(|sl| !sl.holders.is_empty()) else {
            continue;
        };
        out.push_str(&format!(
            "\nholders of {} ({}):\n",
            s.keys.name,
            sl.mode.describe()
        ));
        let pool = matches!(sl.mode, Mode::Pool(_));
        let mut header = vec!["SLOT"];
        if pool {
            header.push("RESOURCE");
        }
        header.extend([
            "HOLDER", "FENCE", "ACQUIRED", "HELD", "TTL", "TOKEN", "NOTE",
        ]);
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        for h in &sl.holders {
            let dash = || "-".to_string();
            let ms = |v: i64| coarse(Duration::from_millis(u64::try_from(v).unwrap_or(0)));
            let mut row = vec![h.slot.map_or_else(dash, |i| i.to_string())];
            if pool {
                row.push(
                    h.slot
                        .and_then(|i| sl.mode.resource(i))
                        .map_or_else(dash, str::to_string),
                );
            }
            row.extend([
                h.who(),
                h.fence.to_string(),
                h.acquired_ms.map_or_else(dash, rfc3339),
                h.acquired_ms.map_or_else(dash, |a| ms(s.now_ms - a)),
                h.expires_ms.map_or_else(dash, |e| ms(e - s.now_ms)),
                if show_token {
                    shown(&h.token).into_owned()
                } else {
                    h.fingerprint()
                },
                Some(shown(&h.note).into_owned())
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(dash),
            ]);
            rows.push(row);
        }
        for line in aligned(rows) {
            out.push_str("  ");
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// One waiter, as `status --json` lists it under `queue`.
fn waiting_json(w: &Waiting) -> Value {
    json!({
        "position": w.position,
        "user": w.user,
        "host": w.host,
        "pid": w.pid.parse::<u64>().ok(),
        "note": w.note,
        "since_ms": w.since_ms,
        "deadline_ms": w.deadline_ms,
    })
}

/// For each lock with live waiters: who waits, in queue order, one line each, after the table.
pub fn queue_details(states: &[State]) -> String {
    let mut out = String::new();
    for s in states.iter().filter(|s| !s.queue.is_empty()) {
        out.push_str(&format!("\nwaiting for {}:\n", s.keys.name));
        let header = ["#", "WAITER", "WAITING", "GIVES UP AT", "NOTE"];
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        for w in &s.queue {
            let dash = || "-".to_string();
            rows.push(vec![
                w.position.to_string(),
                w.who(),
                w.since_ms
                    .map(|ms| {
                        coarse(Duration::from_millis(
                            u64::try_from(s.now_ms.saturating_sub(ms)).unwrap_or(0),
                        ))
                    })
                    .unwrap_or_else(dash),
                match (w.since_ms, w.deadline_ms) {
                    (_, Some(ms)) => rfc3339(ms),
                    (Some(_), None) => "never".to_string(),
                    (None, None) => dash(),
                },
                Some(shown(&w.note).into_owned())
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(dash),
            ]);
        }
        for line in aligned(rows) {
            out.push_str("  ");
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// Rows as lines of columns padded to their widest cell (the last column is not padded).
fn aligned(rows: Vec<Vec<String>>) -> Vec<String> {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].width()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(i, cell)| {
                    if i + 1 == columns {
                        cell.clone()
                    } else {
                        pad(cell, widths[i])
                    }
                })
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect()
}

/// The last holder of a free lock: who, and how and when the hold ended (`forced`: by whom, if a
/// forced release ended it).
fn last_json(h: &Holder, forced: Option<&Forced>) -> Value {
    let ended = h.ended();
    json!({
        "user": h.user,
        "host": h.host,
        "pid": h.pid.parse::<u64>().ok(),
        "note": h.note,
        "fence": h.fence,
        "acquired_at": h.acquired_ms.map(rfc3339),
        "until": ended.map(|(_, ms)| rfc3339(ms)),
        "ended": ended.map(|(how, _)| how.as_str()),
        "forced_by": forced.map(|f| f.by.clone()),
        "forced_at": forced.map(|f| rfc3339(f.at_ms)),
    })
}

/// The HOLDER cell of a free lock with a recorded last holder.
fn last_cell(h: &Holder, forced: Option<&Forced>) -> String {
    let mut cell = match h.ended() {
        Some((_, ms)) => format!("(last: {} until {}", h.who(), rfc3339(ms)),
        None => format!("(last: {}", h.who()),
    };
    if let Some(f) = forced {
        cell.push_str(&format!(", force-released by {}", shown(&f.by)));
    }
    cell.push(')');
    cell
}

/// One quorum node's view of a lock.
fn node_json(url: &str, view: &Result<State, String>) -> Value {
    match view {
        Ok(s) => json!({
            "url": url,
            "state": state_word(s),
            "token_fingerprint": s.token.as_deref().map(|t| fingerprint(t.trim_start_matches('~'))),
            "ttl_ms": (s.pttl_ms >= 0).then_some(s.pttl_ms),
            "fence": s.fence,
            "error": Value::Null,
        }),
        Err(why) => json!({
            "url": url,
            "state": "unreachable",
            "token_fingerprint": Value::Null,
            "ttl_ms": Value::Null,
            "fence": Value::Null,
            "error": why,
        }),
    }
}

/// For a quorum: each lock's nodes, one line each, after the table.
pub fn quorum_details(states: &[State]) -> String {
    let mut out = String::new();
    for s in states {
        let Some(q) = &s.quorum else { continue };
        out.push_str(&format!(
            "\n{} on {} servers ({} needed):\n",
            s.keys.name,
            q.nodes.len(),
            q.needed
        ));
        let width = q.nodes.iter().map(|(u, _)| u.width()).max().unwrap_or(0);
        for (url, view) in &q.nodes {
            out.push_str(&format!("  {}  {}\n", pad(url, width), node_line(view)));
        }
    }
    out
}

/// `held`, `free`, or `handover` (released, reserved for the first waiter); for a quorum also
/// `split` or `unknown`.
fn state_word(s: &State) -> &'static str {
    if let Some(verdict) = s.quorum_verdict()
        && verdict != QuorumVerdict::Held
    {
        return verdict.as_str();
    }
    match (s.held(), s.handing_over()) {
        (true, true) => "handover",
        (true, false) => "held",
        _ => "free",
    }
}

/// The locks as an aligned table with a header.
pub fn status_table(states: &[State], show_token: bool) -> String {
    let header = [
        "LOCK", "STATE", "HOLDER", "FENCE", "ACQUIRED", "HELD", "TTL", "WAITING", "TOKEN", "NOTE",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for s in states {
        let dash = || "-".to_string();
        let h = s.holder.as_ref().filter(|_| s.held());
        if let Some(sl) = &s.slots {
            rows.push(slots_row(s, sl));
            continue;
        }
        rows.push(vec![
            s.keys.name.clone(),
            state_word(s).to_string(),
            match (s.held(), h, &s.last) {
                (true, Some(h), _) if s.stale == Some(Liveness::Gone) => {
                    format!("{} stale?", h.who())
                }
                (true, Some(h), _) if s.stale == Some(Liveness::Draining) => {
                    format!("{} draining: waiting for what it started", h.who())
                }
                (true, Some(h), _) => match &h.preempted {
                    Some(p) => format!("{} (preempted by {})", h.who(), shown(&p.by)),
                    None if h.preemptible => format!("{} (preemptible)", h.who()),
                    None => h.who(),
                },
                (true, None, _) => "unknown".to_string(),
                (false, _, Some(last)) => last_cell(last, s.forced_of(&last.token)),
                _ => dash(),
            },
            s.fence.to_string(),
            h.and_then(|h| h.acquired_ms)
                .map(rfc3339)
                .unwrap_or_else(dash),
            s.held_for()
                .filter(|_| s.held())
                .map(coarse)
                .unwrap_or_else(dash),
            match s.pttl_ms {
                ms if ms >= 0 => coarse(Duration::from_millis(ms as u64)),
                -1 => "none".to_string(),
                _ => dash(),
            },
            s.waiters.to_string(),
            match &s.token {
                Some(t) if show_token => shown(t).into_owned(),
                Some(t) => fingerprint(t),
                None => dash(),
            },
            h.map(|h| shown(&h.note).into_owned())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(dash),
        ]);
    }
    let mut out = String::new();
    for line in aligned(rows) {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The table row of a lock with more than one holder: STATE counts them (`2/3 held`, `shared
/// ×3`), HOLDER says how many, and the other columns of one hold stay `-` (the holders are listed
/// below the table, see [`holders_details`]).
fn slots_row(s: &State, sl: &Slots) -> Vec<String> {
    let dash = || "-".to_string();
    let n = sl.holders.len();
    let state = match sl.mode.limit() {
        _ if n == 0 && sl.reserved > 0 => "handover".to_string(),
        Some(limit) => format!("{n}/{limit} held"),
        None => format!("shared ×{n}"),
    };
    vec![
        s.keys.name.clone(),
        state,
        format!("{n} holder{}", if n == 1 { "" } else { "s" }),
        s.fence.to_string(),
        dash(),
        dash(),
        match s.pttl_ms {
            ms if ms >= 0 => coarse(Duration::from_millis(ms as u64)),
            _ => dash(),
        },
        s.waiters.to_string(),
        dash(),
        dash(),
    ]
}

/// `s` and spaces up to `width` terminal cells (`format!`'s padding counts chars instead).
fn pad(s: &str, width: usize) -> String {
    format!("{s}{}", " ".repeat(width.saturating_sub(s.width())))
}

/// One node's line for `status`: "held by 3f2a1b4c (fence 12, expires in 28s): ci@web1 (pid 4)".
pub fn node_line(view: &std::result::Result<State, String>) -> String {
    match view {
        Err(why) => format!("unreachable: {why}"),
        Ok(s) if !s.held() => "free".to_string(),
        Ok(s) => {
            let token = s.token.as_deref().unwrap_or_default();
            let what = if s.handing_over() {
                format!(
                    "reserved for waiter {}",
                    fingerprint(token.trim_start_matches('~'))
                )
            } else {
                format!("held by {}", fingerprint(token))
            };
            let expires = match s.pttl_ms {
                ms if ms >= 0 => {
                    format!(
                        ", expires in {}",
                        human_ms(Duration::from_millis(ms as u64))
                    )
                }
                _ => String::new(),
            };
            let who = s
                .holder
                .as_ref()
                .map(|h| format!(": {}", h.who()))
                .unwrap_or_default();
            format!("{what} (fence {}{expires}){who}", s.fence)
        }
    }
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

/// A duration rounded for humans: whole seconds from 10s up, milliseconds below.
pub fn human_ms(d: Duration) -> String {
    let d = if d >= Duration::from_secs(10) {
        Duration::from_secs(d.as_secs())
    } else {
        Duration::from_millis(d.as_millis() as u64)
    };
    humantime::format_duration(d).to_string()
}

impl Preemption {
    /// What a preempted holder says about it.
    pub fn reason(&self) -> String {
        format!(
            "preempted by {} at {} (--preemptible)",
            shown(&self.by),
            rfc3339(self.at_ms)
        )
    }
}

impl State {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_durations_are_whole_seconds_from_one_second() {
        let ms = Duration::from_millis;
        assert_eq!(coarse(ms(318)), "318ms");
        assert_eq!(coarse(ms(1318)), "1s");
        assert_eq!(coarse(ms(28_900)), "28s");
        assert_eq!(coarse(ms(192_500)), "3m 12s");
    }

    #[test]
    fn the_last_holder_names_who_forced_its_release() {
        let h = Holder {
            token: "t1".into(),
            user: "ci".into(),
            host: "web1".into(),
            pid: "4".into(),
            released_ms: Some(1_764_597_600_000),
            ..Holder::default()
        };
        assert_eq!(
            last_cell(&h, None),
            "(last: ci@web1 (pid 4) until 2025-12-01T14:00:00Z)"
        );
        let f = Forced {
            token: "t1".into(),
            by: "ops@laptop (pid 9)".into(),
            at_ms: 1_764_597_600_000,
        };
        assert_eq!(
            last_cell(&h, Some(&f)),
            "(last: ci@web1 (pid 4) until 2025-12-01T14:00:00Z, force-released by ops@laptop \
             (pid 9))"
        );
        let v = last_json(&h, Some(&f));
        assert_eq!(v["forced_by"], "ops@laptop (pid 9)");
        assert_eq!(v["forced_at"], "2025-12-01T14:00:00Z");
        assert_eq!(v["ended"], "released");
        let v = last_json(&h, None);
        assert!(v["forced_by"].is_null() && v["forced_at"].is_null(), "{v}");
    }

    #[test]
    fn padding_counts_terminal_cells() {
        assert_eq!(pad("db", 4), "db  ");
        assert_eq!(pad("デプ", 6), "デプ  ");
        assert_eq!(pad("long", 2), "long");
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("deploy-prod"), "deploy-prod");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote("$(rm -rf /)"), "'$(rm -rf /)'");
    }

    #[test]
    fn a_forced_release_says_by_whom_and_when() {
        let forced = Forced {
            token: "old".into(),
            by: "ops@h (pid 9)".into(),
            at_ms: 1000,
        };
        let why = forced_reason(Some(&forced));
        assert!(
            why.contains("force-released by ops@h (pid 9) at 1970-01-01T00:00:01Z"),
            "{why}"
        );
    }
}
