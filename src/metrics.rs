//! `status --format prometheus`: the locks' state as metrics in the Prometheus text format
//! (version 0.0.4), the format node_exporter's textfile collector reads and `promtool check
//! metrics` checks.
//!
//! Why not OpenMetrics: the textfile collector parses the classic format only, where a counter's
//! TYPE line names its samples (`redlock_acquisitions_total`); an OpenMetrics family
//! (`# TYPE redlock_acquisitions counter` over `redlock_acquisitions_total` samples, then
//! `# EOF`) would be read as an untyped series without help. The names follow the conventions
//! both formats share: base units in the name (`_seconds`), `_total` on the counter, a summary
//! without quantiles for the waits.
//!
//! Invariants:
//! - Each family is written once, HELP and TYPE first, its samples together; a lock appears once
//!   in each (the caller passes every lock once).
//! - Label values are escaped as the format says (`\\`, `\"`, `\n`): a lock name may hold any
//!   printable character, and what Redis returns is untrusted.
//! - On a quorum, the lock's families carry one sample per node that answered, labelled `node`
//!   with the node's URL without user or password (the caller's labels: see [`node_label`]), plus
//!   the quorum's verdict as a state set and whether each node answered. No series ever has a
//!   secret in it.
//! - Integers are written with all their digits. A fence (a microsecond clock, about 1.8e15 now)
//!   fits a float64 exactly up to 2^53 (about 9.0e15, the year 2255); past it, Prometheus, which
//!   stores float64 samples, rounds the last digits: `status --format json` has the exact value.
//!
//! Layer 7 of the list in `lib.rs`.

use std::fmt::Write as _;

use crate::lock::{QuorumVerdict, State};

/// One metric family: its name, the help line and the Prometheus type.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    /// The sample (or samples: a summary has two) of one lock as one node (or the one server)
    /// sees it; nothing when the value is unknown.
    value: fn(&State) -> Vec<(&'static str, Value)>,
}

/// A sample's value.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value {
    Int(i64),
    Count(u64),
    /// Milliseconds, written as seconds.
    Millis(i64),
    Infinite,
}

impl Value {
    fn write(self, out: &mut String) {
        let _ = match self {
            Value::Int(n) => write!(out, "{n}"),
            Value::Count(n) => write!(out, "{n}"),
            Value::Millis(ms) if ms % 1000 == 0 => write!(out, "{}", ms / 1000),
            // Exact to the millisecond, without a float's rounding: 1234 ms is "1.234".
            Value::Millis(ms) => {
                let sign = if ms < 0 { "-" } else { "" };
                let ms = ms.unsigned_abs();
                let frac = format!("{:03}", ms % 1000);
                write!(out, "{sign}{}.{}", ms / 1000, frac.trim_end_matches('0'))
            }
            Value::Infinite => write!(out, "+Inf"),
        };
    }
}

const FAMILIES: &[Family] = &[
    Family {
        name: "redlock_held",
        help: "Whether the lock is held (1) or free (0).",
        kind: "gauge",
        value: |s| vec![("", Value::Int(i64::from(s.held())))],
    },
    Family {
        name: "redlock_held_seconds",
        help: "How long the current holder has held the lock, by the server's clock (0 when free; absent when held by a client with no redlock record; with more than one holder, the longest hold).",
        kind: "gauge",
        value: |s| match (s.held(), s.held_for(), &s.slots) {
            (false, ..) => vec![("", Value::Int(0))],
            (true, _, Some(sl)) => sl
                .holders
                .iter()
                .filter_map(|h| h.acquired_ms)
                .min()
                .map(|a| vec![("", Value::Millis(s.now_ms.saturating_sub(a).max(0)))])
                .unwrap_or_default(),
            (true, Some(d), None) => vec![("", Value::Millis(millis(d)))],
            (true, None, None) => Vec::new(),
        },
    },
    Family {
        name: "redlock_holders",
        help: "Holders of the lock now: 0 or 1 for an exclusive lock, up to redlock_holders_limit with --slots or --pool, any number of readers with --shared.",
        kind: "gauge",
        value: |s| {
            let n = match &s.slots {
                Some(sl) => sl.holders.len(),
                None => usize::from(s.held() && !s.handing_over()),
            };
            vec![("", Value::Count(n as u64))]
        },
    },
    Family {
        name: "redlock_holders_limit",
        help: "How many holders the lock admits at once: 1 for an exclusive lock, N with --slots or --pool, +Inf with --shared.",
        kind: "gauge",
        value: |s| match s.slots.as_deref().map(|sl| sl.mode.limit()) {
            None => vec![("", Value::Int(1))],
            Some(Some(n)) => vec![("", Value::Count(n as u64))],
            Some(None) => vec![("", Value::Infinite)],
        },
    },
    Family {
        name: "redlock_ttl_seconds",
        help: "Time until the lock expires unless renewed (0 when free, +Inf for a lock key with no expiry).",
        kind: "gauge",
        value: |s| match s.pttl_ms {
            _ if !s.held() => vec![("", Value::Int(0))],
            -1 => vec![("", Value::Infinite)],
            ms => vec![("", Value::Millis(ms.max(0)))],
        },
    },
    Family {
        name: "redlock_waiters",
        help: "Clients queued for the lock (on a quorum, only the first --url keeps the queue).",
        kind: "gauge",
        value: |s| vec![("", Value::Int(s.waiters.max(0)))],
    },
    Family {
        name: "redlock_fence",
        help: "The lock's fence counter: the current holder's fence, or the last one while free.",
        kind: "gauge",
        value: |s| vec![("", Value::Int(s.fence))],
    },
    Family {
        name: "redlock_acquisitions_total",
        help: "Acquisitions of the lock since its meta hash was created (it expires after --meta-ttl of idleness, which resets the count).",
        kind: "counter",
        value: |s| vec![("", Value::Count(s.counters.acquisitions))],
    },
    Family {
        name: "redlock_wait_seconds",
        help: "Time the acquisitions counted in redlock_acquisitions_total waited for the lock.",
        kind: "summary",
        value: |s| {
            vec![
                (
                    "_sum",
                    Value::Millis(i64::try_from(s.counters.waited_ms).unwrap_or(i64::MAX)),
                ),
                ("_count", Value::Count(s.counters.acquisitions)),
            ]
        },
    },
];

fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The metrics of `states`. `nodes` labels a quorum's nodes, in the order of its `--url`s
/// (empty for any other kind of server).
pub fn exposition(states: &[State], nodes: &[String]) -> String {
    let mut out = String::new();
    for family in FAMILIES {
        header(&mut out, family.name, family.help, family.kind);
        for state in states {
            let name = &state.keys.name;
            match &state.quorum {
                None => samples(&mut out, family, name, None, state),
                Some(q) => {
                    for (i, (_, view)) in q.nodes.iter().enumerate() {
                        if let Ok(node) = view {
                            samples(&mut out, family, name, Some(&label_of(nodes, i)), node);
                        }
                    }
                }
            }
        }
    }
    if !nodes.is_empty() {
        quorum_families(&mut out, states, nodes);
    }
    out
}

/// The quorum's own series: its verdict on each lock (a state set: one series per verdict, the
/// one that holds is 1) and whether each node answered.
fn quorum_families(out: &mut String, states: &[State], nodes: &[String]) {
    const VERDICTS: [QuorumVerdict; 4] = [
        QuorumVerdict::Held,
        QuorumVerdict::Free,
        QuorumVerdict::Split,
        QuorumVerdict::Unknown,
    ];
    header(
        out,
        "redlock_quorum_verdict",
        "What a majority of the nodes says of the lock: held (one token on a majority), free, split (neither) or unknown (too few answered); 1 for the verdict that holds.",
        "gauge",
    );
    for state in states {
        let Some(q) = &state.quorum else { continue };
        for v in VERDICTS {
            let labels = format!(
                "lock=\"{}\",verdict=\"{}\"",
                escape(&state.keys.name),
                v.as_str()
            );
            sample(
                out,
                "redlock_quorum_verdict",
                &labels,
                Value::Int(i64::from(q.verdict == v)),
            );
        }
    }
    header(
        out,
        "redlock_node_up",
        "Whether the node answered when asked about the lock (1) or not (0).",
        "gauge",
    );
    for state in states {
        let Some(q) = &state.quorum else { continue };
        for (i, (_, view)) in q.nodes.iter().enumerate() {
            let labels = format!(
                "lock=\"{}\",node=\"{}\"",
                escape(&state.keys.name),
                escape(&label_of(nodes, i))
            );
            sample(
                out,
                "redlock_node_up",
                &labels,
                Value::Int(i64::from(view.is_ok())),
            );
        }
    }
}

/// Node `i`'s label; its position if the caller has none (which does not happen: the quorum's
/// nodes are the `--url`s, in order).
fn label_of(nodes: &[String], i: usize) -> String {
    nodes.get(i).cloned().unwrap_or_else(|| format!("#{i}"))
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn samples(out: &mut String, family: &Family, lock: &str, node: Option<&str>, state: &State) {
    let mut labels = format!("lock=\"{}\"", escape(lock));
    if let Some(node) = node {
        let _ = write!(labels, ",node=\"{}\"", escape(node));
    }
    for (suffix, value) in (family.value)(state) {
        sample(out, &format!("{}{suffix}", family.name), &labels, value);
    }
}

fn sample(out: &mut String, name: &str, labels: &str, value: Value) {
    let _ = write!(out, "{name}{{{labels}}} ");
    value.write(out);
    out.push('\n');
}

/// A label value escaped as the text format says: backslash, double quote and line feed.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A quorum node's `node` label: its URL without a user, a password or a `pass=`/`user=`
/// parameter (which a socket URL may carry), so that no secret, nor whose it is, reaches a
/// metrics file that anyone who can scrape it may read.
/// `public` is the endpoint's URL without its password (`config::Endpoint::public`); one that
/// does not parse (it always does) is dropped for a placeholder rather than shown.
pub fn node_label(public: &str) -> String {
    let Ok(mut url) = url::Url::parse(public) else {
        return "?".to_string();
    };
    let _ = url.set_username("");
    let _ = url.set_password(None);
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .into_owned()
        .filter(|(k, _)| !["user", "pass", "password"].contains(&k.to_ascii_lowercase().as_str()))
        .collect();
    if kept.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(kept);
    }
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("x\ny"), "x\\ny");
        assert_eq!(escape("déploiement 🚀"), "déploiement 🚀");
    }

    #[test]
    fn node_labels_have_no_user_and_no_password() {
        assert_eq!(
            node_label("redis://alice:s3cret@127.0.0.1:6380/2"),
            "redis://127.0.0.1:6380/2"
        );
        assert_eq!(
            node_label("rediss://alice@cache.example:6380"),
            "rediss://cache.example:6380"
        );
        assert_eq!(
            node_label("unix:///tmp/r.sock?user=bob&db=2&pass=x"),
            "unix:///tmp/r.sock?db=2"
        );
        assert_eq!(
            node_label("redis+unix:///tmp/r.sock?user=bob"),
            "redis+unix:///tmp/r.sock"
        );
        assert_eq!(node_label("not a url"), "?");
    }

    #[test]
    fn milliseconds_are_written_as_exact_seconds() {
        let text = |v: Value| {
            let mut s = String::new();
            v.write(&mut s);
            s
        };
        assert_eq!(text(Value::Millis(0)), "0");
        assert_eq!(text(Value::Millis(3000)), "3");
        assert_eq!(text(Value::Millis(1234)), "1.234");
        assert_eq!(text(Value::Millis(1200)), "1.2");
        assert_eq!(text(Value::Millis(5)), "0.005");
        assert_eq!(text(Value::Millis(-1500)), "-1.5");
        assert_eq!(text(Value::Int(9_007_199_254_740_993)), "9007199254740993");
        assert_eq!(text(Value::Infinite), "+Inf");
    }
}
