//! MONITOR: the server-side hand-over, from a release to the next holder's acquisition by the
//! server's clock. Owns the parser of `redis-cli MONITOR` lines, the tracking of the lock key's
//! value that finds releases and acquisitions in them ([`server_handovers`]), and the separate
//! run of workload 1 under MONITOR ([`Bench::monitored`]). Above [`loops`](crate::loops) and
//! [`stats`](crate::stats).

use std::fs::{self, File};
use std::path::Path;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use crate::admin::Count;
use crate::guard::{STEP_TIMEOUT, kill, start, watched};
use crate::harness::Bench;
use crate::loops::{Hold, Spec};
use crate::stats::{fmt_d, percentile};
use crate::tools::{CS_EMPTY, Tool, polling_key, redlock_key};

/// One `redis-cli MONITOR` line: the server's time in microseconds, and the arguments.
fn parse_monitor(line: &str) -> Option<(i64, Vec<String>)> {
    let (ts, rest) = line.split_once(' ')?;
    let (secs, micros) = ts.split_once('.')?;
    let t = secs.parse::<i64>().ok()? * 1_000_000 + micros.parse::<i64>().ok()?;
    let rest = &rest[rest.find(']')? + 1..];
    let mut chars = rest.chars();
    let mut args = Vec::new();
    loop {
        match chars.next() {
            None => break,
            Some(' ') => continue,
            Some('"') => {}
            Some(_) => return None,
        }
        let mut arg = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => arg.push('\n'),
                    'r' => arg.push('\r'),
                    't' => arg.push('\t'),
                    'a' => arg.push('\u{7}'),
                    'b' => arg.push('\u{8}'),
                    'x' => {
                        let hex: String = [chars.next()?, chars.next()?].iter().collect();
                        arg.push(char::from(u8::from_str_radix(&hex, 16).ok()?));
                    }
                    c => arg.push(c),
                },
                c => arg.push(c),
            }
        }
        args.push(arg);
    }
    Some((t, args))
}

/// Release-to-acquisition gaps on `key`, by the server's clock. The lock key's value is tracked:
/// a release is a DEL while it holds a token, or a SET of a `~reservation` over a token; an
/// acquisition is a SET of a token value that succeeds (SET NX on an existing key, or SET XX on a
/// missing one, fails and changes nothing). Each release pairs with the next acquisition. A SET
/// of another token over a token is both (redlock's direct hand-over: the release grants the lock
/// to the next waiter in the same script): a gap of zero.
fn server_handovers(monitor: &str, key: &str) -> Vec<Duration> {
    let mut value: Option<String> = None;
    let mut released: Option<i64> = None;
    let mut out = Vec::new();
    for (t, args) in monitor.lines().filter_map(parse_monitor) {
        if args.len() < 2 || args[1] != key {
            continue;
        }
        let holds_token = value.as_deref().is_some_and(|v| !v.starts_with('~'));
        match args[0].to_ascii_uppercase().as_str() {
            "DEL" | "UNLINK" | "GETDEL" => {
                if holds_token {
                    released = Some(t);
                }
                value = None;
            }
            "SET" if args.len() >= 3 => {
                let has = |opt: &str| args[3..].iter().any(|a| a.eq_ignore_ascii_case(opt));
                if (has("NX") && value.is_some()) || (has("XX") && value.is_none()) {
                    continue;
                }
                let v = args[2].clone();
                if v.starts_with('~') {
                    if holds_token {
                        released = Some(t);
                    }
                } else if holds_token && value.as_deref() != Some(v.as_str()) {
                    out.push(Duration::ZERO);
                } else if let Some(r) = released.take() {
                    out.push(Duration::from_micros(u64::try_from(t - r).unwrap_or(0)));
                }
                value = Some(v);
            }
            _ => {}
        }
    }
    out
}

/// Waits (polling every 10 ms, at most [`STEP_TIMEOUT`]) until the file at `path` contains
/// `needle`.
fn wait_file_contains(path: &Path, needle: &str, what: &str) {
    let until = Instant::now() + STEP_TIMEOUT;
    while !fs::read_to_string(path).is_ok_and(|t| t.contains(needle)) {
        assert!(
            Instant::now() < until,
            "{what}: {needle:?} did not show up in {} within {}s",
            path.display(),
            STEP_TIMEOUT.as_secs()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

impl Bench {
    /// Workload 1 again under `redis-cli MONITOR`: release-to-acquisition gaps.
    pub fn monitored(&mut self, tool: Tool) -> Vec<Duration> {
        let tag = format!("w1m-{}", tool.name());
        watched(&format!("{tag} (under MONITOR)"), || {
            let path = self.env.dir.join(format!("{tag}.monitor"));
            let out = File::create(&path).expect("cannot create the MONITOR log");
            let log = self.log(&tag);
            let mut cmd = self.env.redis_cli(&["MONITOR"]);
            cmd.stdout(Stdio::from(out)).stderr(log.stdio());
            let monitor = start(&mut cmd, "redis-cli MONITOR").unwrap_or_else(|e| panic!("{e}"));
            wait_file_contains(&path, "OK", "redis-cli MONITOR");
            let spec = Spec {
                bin: None,
                tag: tag.clone(),
                tool,
                key: "w1m".to_string(),
                loops: 8,
                rounds: 25,
                cs: CS_EMPTY,
                hold: Hold::Exclusive,
            };
            let run = self.run_loops(&spec, Count::Commands);
            let marker = format!("bench-monitor-end-{tag}");
            let _: String = self.admin.query("echo", redis::cmd("ECHO").arg(&marker));
            wait_file_contains(&path, &marker, "redis-cli MONITOR");
            kill(-monitor.pid());
            let _ = monitor.wait();
            let key = match tool {
                Tool::Polling => polling_key("w1m"),
                _ => redlock_key("w1m"),
            };
            let text = fs::read_to_string(&path).expect("cannot read the MONITOR log");
            let gaps = server_handovers(&text, &key);
            let expected = run.rounds.len() - 1;
            assert!(
                gaps.len() * 2 >= expected,
                "{tag}: found {} hand-overs of {key} in the MONITOR log ({}), expected about \
                 {expected}: has the shape of release or acquire changed?",
                gaps.len(),
                path.display()
            );
            eprintln!(
                "contention: {tag}: {} server-side hand-overs, p50 {} p90 {}",
                gaps.len(),
                fmt_d(percentile(&gaps, 0.5)),
                fmt_d(percentile(&gaps, 0.9))
            );
            gaps
        })
    }
}
