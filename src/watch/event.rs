//! A published change as the watcher takes it: a JSON object from anyone who may PUBLISH, kept
//! only as far as it is bounded (fields, strings, times) and escaped for the terminal, and
//! described as a line for humans.
//!
//! Layer 13 of the list in `lib.rs` (a part of `watch`).

use std::time::Duration;

use serde_json::{Map, Value};

use crate::output::{human_ms, rfc3339};
use crate::printable::{printable, shown};
use crate::redact::redact;

use super::now_ms;

/// The longest string kept from a published event (in characters).
pub const FIELD_MAX: usize = 512;
/// The most fields a published event may have (one with more is ignored).
pub const FIELDS_MAX: usize = 32;
/// The last millisecond of year 9999: published times are clamped to 0..=this.
pub const TIME_MAX: i64 = 253_402_300_799_999;

/// any number; arithmetic on it must neither overflow nor wrap).
pub fn clamp_time(ms: i64) -> i64 {
    ms.clamp(0, TIME_MAX)
}

/// When a hold taken at `at` with `ttl` ends: `None` without either or with a negative TTL (no
/// expiry), saturating rather than overflowing.
pub fn expiry(at: Option<i64>, ttl: Option<i64>) -> Option<i64> {
    let (at, ttl) = at.zip(ttl)?;
    (ttl >= 0).then(|| clamp_time(at.saturating_add(ttl)))
}

/// A published message as an event of `lock`: a JSON object with a string `event`, each string
/// escaped for the terminal (and the note redacted), values other than strings, numbers and
/// booleans left out, and `lock` and `time` (RFC 3339, from `at_ms`) added. `None` for anything
/// else.
pub fn parse_event(lock: &str, payload: &[u8]) -> Option<Map<String, Value>> {
    let Ok(Value::Object(raw)) = serde_json::from_slice::<Value>(payload) else {
        return None;
    };
    raw.get("event").and_then(Value::as_str)?;
    if raw.len() > FIELDS_MAX {
        return None;
    }
    let mut event = Map::new();
    for (key, value) in raw {
        let value = match value {
            Value::String(s) if key == "note" => {
                Value::String(printable(&redact(cut(&s))).into_owned())
            }
            Value::String(s) => Value::String(printable(cut(&s)).into_owned()),
            v @ (Value::Number(_) | Value::Bool(_)) => v,
            _ => continue,
        };
        if key == "lock" || key == "time" {
            continue;
        }
        event.insert(printable(cut(&key)).into_owned(), value);
    }
    let at = event
        .get("at_ms")
        .and_then(Value::as_i64)
        .map_or_else(now_ms, clamp_time);
    event.insert("lock".into(), lock.into());
    event.insert("time".into(), rfc3339(at).into());
    Some(event)
}

/// At most [`FIELD_MAX`] characters of `s`.
pub fn cut(s: &str) -> &str {
    s.char_indices().nth(FIELD_MAX).map_or(s, |(i, _)| &s[..i])
}

/// A JSON number as an integer (Lua's cjson may write a large one in floating point).
pub fn integer(v: Option<&Value>) -> Option<i64> {
    let v = v?;
    v.as_i64()
        .or_else(|| v.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
}

/// One change as a line for humans: `TIME LOCK EVENT details`.
pub fn describe(event: &Map<String, Value>) -> String {
    // Each field cut to what a line shows (the event keeps FIELD_MAX characters for --json).
    let text = |k: &str| match event.get(k) {
        Some(Value::String(s)) => shown(s).into_owned(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    };
    let ms =
        |k: &str| integer(event.get(k)).map(|ms| human_ms(Duration::from_millis(ms.max(0) as u64)));
    let who = || format!("{}@{} (pid {})", text("user"), text("host"), text("pid"));
    let note = || match text("note") {
        n if n.is_empty() => String::new(),
        n => format!(", note: {n}"),
    };
    let kind = text("event");
    let token = text("token");
    let details = match kind.as_str() {
        "acquired" => format!(
            "by {}, fence {}, token {token}…, waited {}, ttl {}{}",
            who(),
            text("fence"),
            ms("waited_ms").unwrap_or_else(|| "?".into()),
            ms("ttl_ms").unwrap_or_else(|| "?".into()),
            note()
        ),
        "queued" => format!(
            "{}, token {token}…, {}{}",
            who(),
            match integer(event.get("deadline_ms")) {
                Some(at) => format!("gives up at {}", rfc3339(at)),
                None => "waits forever".to_string(),
            },
            note()
        ),
        "left" => format!("token {token}… left the queue"),
        "released" => format!(
            "token {token}…, fence {}, held {}{}",
            text("fence"),
            ms("held_ms").unwrap_or_else(|| "?".into()),
            match event.get("status") {
                Some(Value::Number(n)) => format!(", command exited with {n}"),
                _ => String::new(),
            }
        ),
        "expired" => format!(
            "{}, fence {}, token {token}…, after {} (never released)",
            who(),
            text("fence"),
            ms("held_ms").unwrap_or_else(|| "?".into())
        ),
        "forced" => format!(
            "by {}: took it from {}, fence {}, token {token}…",
            text("by"),
            who(),
            text("fence")
        ),
        "superseded" => format!(
            "token {token}… left the queue, superseded by {}",
            text("by")
        ),
        "preempted" => format!("token {token}… asked to stop by {} (--preempt)", text("by")),
        "lost" | "overran" | "timeout" => format!(
            "token {token}…, fence {}: {}",
            text("fence"),
            text("reason")
        ),
        _ => format!("token {token}…"),
    };
    format!("{} {} {kind} {details}", text("time"), text("lock"))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn events_are_escaped_and_get_a_lock_and_a_time() {
        let payload = br#"{"event":"acquired","at_ms":1764597600000,"token":"0123abcd",
            "fence":"18446744073709551617","user":"ev\u001b[2Jil","host":"h","pid":"7",
            "note":"deploy password=hunter2","waited_ms":0,"ttl_ms":30000,"nested":{"a":1},
            "lock":"spoofed"}"#;
        let event = parse_event("deploy", payload).unwrap();
        assert_eq!(event["lock"], "deploy");
        assert_eq!(event["time"], "2025-12-01T14:00:00Z");
        assert_eq!(event["user"], "ev\\u{1b}[2Jil");
        assert_eq!(event["fence"], "18446744073709551617");
        assert!(!event["note"].as_str().unwrap().contains("hunter2"));
        assert!(!event.contains_key("nested"));
        let line = describe(&event);
        assert!(
            line.starts_with("2025-12-01T14:00:00Z deploy acquired by ev\\u{1b}[2Jil@h (pid 7), fence 18446744073709551617"),
            "{line}"
        );
        assert_eq!(parse_event("deploy", b"forced:0123abcd"), None);
        assert_eq!(parse_event("deploy", br#"{"token":"x"}"#), None);
        assert_eq!(parse_event("deploy", br#"[1]"#), None);
    }

    #[test]
    fn published_numbers_neither_overflow_nor_wrap() {
        assert_eq!(expiry(Some(i64::MAX), Some(i64::MAX)), Some(TIME_MAX));
        assert_eq!(expiry(Some(i64::MIN), Some(i64::MIN)), None);
        assert_eq!(expiry(Some(i64::MIN), Some(1)), Some(0));
        assert_eq!(expiry(Some(1_000), Some(500)), Some(1_500));
        assert_eq!(expiry(Some(1_000), None), None);
        assert_eq!(clamp_time(i64::MIN), 0);
        for at in [i64::MAX, i64::MIN] {
            let payload = format!(
                r#"{{"event":"queued","at_ms":{at},"deadline_ms":{at},"ttl_ms":{at},"held_ms":{at}}}"#
            );
            let event = parse_event("k", payload.as_bytes()).unwrap();
            assert!(!event["time"].as_str().unwrap().is_empty(), "{event:?}");
            let _ = describe(&event);
        }
    }

    #[test]
    fn published_strings_and_objects_are_bounded() {
        let long = "x".repeat(10 * FIELD_MAX);
        let payload = format!(r#"{{"event":"acquired","user":"{long}","note":"{long}"}}"#);
        let event = parse_event("k", payload.as_bytes()).unwrap();
        assert_eq!(event["user"].as_str().unwrap().chars().count(), FIELD_MAX);
        assert!(event["note"].as_str().unwrap().chars().count() <= FIELD_MAX);
        assert_eq!(
            cut("é".repeat(FIELD_MAX + 1).as_str()).chars().count(),
            FIELD_MAX
        );
        let many: Vec<String> = (0..=FIELDS_MAX).map(|i| format!(r#""f{i}":1"#)).collect();
        let payload = format!(r#"{{"event":"acquired",{}}}"#, many.join(","));
        assert_eq!(parse_event("k", payload.as_bytes()), None);
    }
}
