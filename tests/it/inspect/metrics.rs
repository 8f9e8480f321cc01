//! `redlock status --format prometheus`: the series and their values, for one server and a
//! quorum, with names that need escaping, checked by two parsers: `promtool check metrics`
//! (Prometheus's own parser and linter, from Debian's `prometheus` package; CI installs it, and
//! `REDLOCK_REQUIRE_PROMTOOL=1` makes its absence a failure) and a strict one of our own below,
//! which also reads the values back (label values unescaped) and refuses what promtool lets
//! through: a series twice, or a family whose samples are not together.

use std::collections::{BTreeMap, HashSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::nodes::Nodes;
use crate::common::topology::Cluster;
use crate::common::*;

/// One sample line: metric name, labels (unescaped), value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the Prometheus text format (0.0.4) strictly, as `redlock` must write it: HELP and TYPE
/// once per family and before its samples, every sample of a typed family (a summary's `_sum`
/// and `_count` included), a family's samples together, no series twice, label values escaped
/// with `\\`, `\"` and `\n` only, counters named `_total`, and a line feed after every line.
fn parse(text: &str) -> Result<Vec<Sample>, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("no line feed at the end".into());
    }
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helps: HashSet<String> = HashSet::new();
    let mut done: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let mut seen: HashSet<(String, BTreeMap<String, String>)> = HashSet::new();
    let mut samples = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# ") {
            let (what, rest) = rest
                .split_once(' ')
                .ok_or_else(|| at("bad comment".into()))?;
            let (name, arg) = rest.split_once(' ').ok_or_else(|| at("no text".into()))?;
            check_name(name).map_err(at)?;
            match what {
                "HELP" => {
                    if !helps.insert(name.to_string()) {
                        return Err(at("second HELP".into()));
                    }
                }
                "TYPE" => {
                    if !["gauge", "counter", "summary"].contains(&arg) {
                        return Err(at(format!("type {arg}")));
                    }
                    if arg == "counter" && !name.ends_with("_total") {
                        return Err(at("a counter's name must end in _total".into()));
                    }
                    if arg != "counter" && name.ends_with("_total") {
                        return Err(at("only a counter's name ends in _total".into()));
                    }
                    if types.insert(name.to_string(), arg.to_string()).is_some() {
                        return Err(at("second TYPE".into()));
                    }
                    if done.contains(name) || samples.iter().any(|s: &Sample| s.name == name) {
                        return Err(at("TYPE after samples".into()));
                    }
                }
                _ => return Err(at("unknown comment".into())),
            }
            continue;
        }
        let sample = parse_sample(line).map_err(at)?;
        let family = family_of(&sample.name, &types).ok_or_else(|| at("no TYPE".into()))?;
        if !helps.contains(&family) {
            return Err(at("no HELP".into()));
        }
        if current.as_deref() != Some(family.as_str()) {
            if done.contains(&family) {
                return Err(at("family's samples are not together".into()));
            }
            if let Some(c) = current.replace(family.clone()) {
                done.insert(c);
            }
        }
        if !seen.insert((sample.name.clone(), sample.labels.clone())) {
            return Err(at("the same series twice".into()));
        }
        samples.push(sample);
    }
    Ok(samples)
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = name.chars().enumerate().all(|(i, c)| {
        c == '_' || c == ':' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())
    });
    if ok && !name.is_empty() {
        Ok(())
    } else {
        Err(format!("bad name {name:?}"))
    }
}

/// The family a sample belongs to: its own name, or a summary's for `_sum` and `_count`.
fn family_of(name: &str, types: &BTreeMap<String, String>) -> Option<String> {
    if types.contains_key(name) {
        return Some(name.to_string());
    }
    ["_sum", "_count"].iter().find_map(|suffix| {
        let base = name.strip_suffix(suffix)?;
        (types.get(base)? == "summary").then(|| base.to_string())
    })
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let end = line
        .find(['{', ' '])
        .ok_or_else(|| "no value".to_string())?;
    let name = &line[..end];
    check_name(name)?;
    let mut labels = BTreeMap::new();
    let mut rest = &line[end..];
    if let Some(r) = rest.strip_prefix('{') {
        rest = r;
        loop {
            if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            }
            let eq = rest.find("=\"").ok_or("no =\" in the labels")?;
            let label = &rest[..eq];
            check_name(label)?;
            let mut value = String::new();
            let mut chars = rest[eq + 2..].char_indices();
            let close = loop {
                match chars.next().ok_or("label value not closed")? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next().ok_or("a \\ at the end")?.1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        c => return Err(format!("escape \\{c}")),
                    },
                    (_, '\n') => return Err("line feed in a label value".into()),
                    (_, c) => value.push(c),
                }
            };
            if labels.insert(label.to_string(), value).is_some() {
                return Err(format!("label {label} twice"));
            }
            rest = &rest[eq + 2 + close + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }
    let value = rest.strip_prefix(' ').ok_or("no space before the value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse::<f64>().map_err(|e| format!("value {v:?}: {e}"))?,
    };
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Whether promtool is there; without it the check is ours alone (a failure when
/// `REDLOCK_REQUIRE_PROMTOOL=1`, as in CI).
fn promtool() -> bool {
    let there = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !there {
        if std::env::var_os("REDLOCK_REQUIRE_PROMTOOL").is_some_and(|v| v == "1") {
            panic!("promtool is not on PATH and REDLOCK_REQUIRE_PROMTOOL=1");
        }
        eprintln!("note: promtool is not installed (apt-get install prometheus): our parser only");
    }
    there
}

/// What `promtool check metrics` says of `text`: `Ok` when it accepts it, its complaints if not.
fn promtool_check(text: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // promtool exits 0 with nothing to say only when the text parses and lints clean.
    if out.status.success() && said.trim().is_empty() {
        Ok(())
    } else {
        Err(format!("promtool: {} {said}", out.status))
    }
}

/// The samples of `text`, which both parsers must accept.
#[track_caller]
fn check(text: &str) -> Vec<Sample> {
    if promtool() {
        promtool_check(text).unwrap_or_else(|e| panic!("{e}\n--- the text:\n{text}"));
    }
    parse(text).unwrap_or_else(|e| panic!("{e}\n--- the text:\n{text}"))
}

/// The value of the one series `name{labels}` (exactly those labels).
#[track_caller]
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let found: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == name && s.labels == want)
        .map(|s| s.value)
        .collect();
    assert_eq!(found.len(), 1, "{name}{want:?}: {found:?} in\n{samples:#?}");
    found[0]
}

/// Every family `redlock` documents, with one sample per lock (two for the summary).
const FAMILIES: &[&str] = &[
    "redlock_held",
    "redlock_held_seconds",
    "redlock_ttl_seconds",
    "redlock_waiters",
    "redlock_fence",
    "redlock_acquisitions_total",
    "redlock_wait_seconds_sum",
    "redlock_wait_seconds_count",
];

fn metrics(redlock: &mut Command, keys: &[&str]) -> Output {
    redlock
        .args(["status", "--format", "prometheus"])
        .args(keys)
        .run()
}

/// Our parser refuses what is malformed, and so does promtool where it can tell: a check that
/// accepted anything would prove nothing about `redlock`'s output.
#[test]
fn the_checkers_refuse_malformed_text() {
    let good =
        "# HELP redlock_held h\n# TYPE redlock_held gauge\nredlock_held{lock=\"a\\\"b\\\\c\"} 1\n";
    assert_eq!(parse(good).unwrap()[0].labels["lock"], "a\"b\\c");
    let promtool = promtool();
    if promtool {
        promtool_check(good).unwrap();
    }
    // (text, whether promtool refuses it too)
    let bad = [
        // A quote left unescaped.
        (
            "# HELP redlock_held h\n# TYPE redlock_held gauge\nredlock_held{lock=\"a\"b\"} 1\n",
            true,
        ),
        // A backslash left unescaped.
        (
            "# HELP redlock_held h\n# TYPE redlock_held gauge\nredlock_held{lock=\"a\\b\"} 1\n",
            true,
        ),
        // A line feed left in a label value.
        (
            "# HELP redlock_held h\n# TYPE redlock_held gauge\nredlock_held{lock=\"a\nb\"} 1\n",
            true,
        ),
        // A counter typed as a gauge.
        (
            "# HELP redlock_acquisitions_total h\n# TYPE redlock_acquisitions_total gauge\nredlock_acquisitions_total{lock=\"a\"} 1\n",
            true,
        ),
        // The OpenMetrics way of typing a counter, which the text format reads as untyped.
        (
            "# HELP redlock_acquisitions h\n# TYPE redlock_acquisitions counter\nredlock_acquisitions_total{lock=\"a\"} 1\n",
            true,
        ),
        // No TYPE (promtool reads it as untyped).
        ("# HELP redlock_held h\nredlock_held{lock=\"a\"} 1\n", false),
        // No HELP.
        (
            "# TYPE redlock_held gauge\nredlock_held{lock=\"a\"} 1\n",
            true,
        ),
        // Not a number.
        (
            "# HELP redlock_held h\n# TYPE redlock_held gauge\nredlock_held{lock=\"a\"} one\n",
            true,
        ),
        // The same series twice.
        (
            "# HELP redlock_held h\n# TYPE redlock_held gauge\nredlock_held{lock=\"a\"} 1\nredlock_held{lock=\"a\"} 0\n",
            false,
        ),
        // A family's samples apart.
        (
            "# HELP redlock_held h\n# TYPE redlock_held gauge\nredlock_held{lock=\"a\"} 1\n# HELP redlock_fence h\n# TYPE redlock_fence gauge\nredlock_fence{lock=\"a\"} 1\nredlock_held{lock=\"b\"} 1\n",
            false,
        ),
    ];
    for (text, promtool_too) in bad {
        assert!(parse(text).is_err(), "our parser accepted:\n{text}");
        if promtool && promtool_too {
            assert!(promtool_check(text).is_err(), "promtool accepted:\n{text}");
        }
    }
}

/// A held lock with two waiters and a free one: every family, with the values `status` reads.
#[test]
fn a_held_lock_with_two_waiters_and_a_free_lock() {
    let redis = or_skip!(RedisServer::start());
    hold(&redis, "deploy", "60s");
    let fence: f64 = redis.meta("deploy")["fence"].parse().unwrap();
    let _waiters: Vec<Proc> = (0..2)
        .map(|_| {
            redis
                .redlock()
                .args(["acquire", "deploy", "--wait", "5m"])
                .spawn_proc()
        })
        .collect();
    assert!(
        wait_for(
            || queue(&redis, "deploy").len() == 2,
            Duration::from_secs(30)
        ),
        "the two waiters never queued"
    );
    let out = metrics(&mut redis.redlock(), &["deploy", "idle"]).expect(0);
    let s = check(&out.stdout);
    for family in FAMILIES {
        for lock in ["deploy", "idle"] {
            value(&s, family, &[("lock", lock)]);
        }
    }
    let deploy = [("lock", "deploy")];
    assert_eq!(value(&s, "redlock_held", &deploy), 1.0);
    assert_eq!(value(&s, "redlock_waiters", &deploy), 2.0);
    assert_eq!(value(&s, "redlock_fence", &deploy), fence);
    let ttl = value(&s, "redlock_ttl_seconds", &deploy);
    assert!(ttl > 0.0 && ttl <= 60.0, "{ttl}");
    let held = value(&s, "redlock_held_seconds", &deploy);
    assert!((0.0..60.0).contains(&held), "{held}");
    let idle = [("lock", "idle")];
    assert_eq!(value(&s, "redlock_held", &idle), 0.0);
    assert_eq!(value(&s, "redlock_held_seconds", &idle), 0.0);
    assert_eq!(value(&s, "redlock_ttl_seconds", &idle), 0.0);
    assert_eq!(value(&s, "redlock_waiters", &idle), 0.0);
    assert_eq!(value(&s, "redlock_acquisitions_total", &idle), 0.0);
    assert!(out.stderr.is_empty(), "{out}");
}

/// Names with a quote, a backslash and characters far from ASCII reach the `lock` label intact
/// (escaped in the text, the same once parsed).
#[test]
fn lock_names_that_need_escaping() {
    let redis = or_skip!(RedisServer::start());
    let names = [r#"say "hi" \o/"#, "デプロイ 🚀 (prod)", r"C:\builds\"];
    for name in names {
        hold(&redis, name, "60s");
    }
    // Named, and found by the scan of every lock.
    for keys in [&names[..], &[]] {
        let text = metrics(&mut redis.redlock(), keys).expect(0).stdout;
        let s = check(&text);
        for name in names {
            assert_eq!(value(&s, "redlock_held", &[("lock", name)]), 1.0, "{text}");
        }
        assert!(text.contains(r#"lock="say \"hi\" \\o/""#), "{text}");
    }
}

/// The counters come from the meta hash, as any client may have written them: a count is read,
/// anything else is 0.
#[test]
fn counters_come_from_the_meta_hash() {
    let redis = or_skip!(RedisServer::start());
    let meta = meta_key("planted");
    redis.query::<()>(&[
        "HSET",
        &meta,
        "acquisitions",
        "3",
        "waited_ms",
        "1500",
        "fence",
        "7",
    ]);
    redis.query::<()>(&[
        "HSET",
        &meta_key("junk"),
        "acquisitions",
        "-2",
        "waited_ms",
        "lots",
    ]);
    let text = metrics(&mut redis.redlock(), &["planted", "junk"])
        .expect(0)
        .stdout;
    let s = check(&text);
    let planted = [("lock", "planted")];
    assert_eq!(value(&s, "redlock_acquisitions_total", &planted), 3.0);
    assert_eq!(value(&s, "redlock_wait_seconds_sum", &planted), 1.5);
    assert_eq!(value(&s, "redlock_wait_seconds_count", &planted), 3.0);
    assert_eq!(value(&s, "redlock_fence", &planted), 7.0);
    let junk = [("lock", "junk")];
    assert_eq!(value(&s, "redlock_acquisitions_total", &junk), 0.0);
    assert_eq!(value(&s, "redlock_wait_seconds_sum", &junk), 0.0);
}

/// A fence past 2^53 is written with every digit (a float64 sample would end in ...992).
#[test]
fn a_fence_keeps_every_digit() {
    let redis = or_skip!(RedisServer::start());
    redis.query::<()>(&["HSET", &meta_key("big"), "fence", "9007199254740993"]);
    let text = metrics(&mut redis.redlock(), &["big"]).expect(0).stdout;
    check(&text);
    assert!(
        text.contains("redlock_fence{lock=\"big\"} 9007199254740993\n"),
        "{text}"
    );
}

/// Without a key, every held lock is listed from one batched read: `-v` logs one `status`
/// round trip for twenty locks. A key named twice is one series.
#[test]
fn every_lock_in_one_round_trip() {
    let redis = or_skip!(RedisServer::start());
    for i in 0..20 {
        hold(&redis, &format!("job-{i}"), "60s");
    }
    let out = redis
        .redlock()
        .args(["-v", "status", "--format", "prometheus"])
        .run()
        .expect(0);
    let s = check(&out.stdout);
    for i in 0..20 {
        assert_eq!(
            value(&s, "redlock_held", &[("lock", &format!("job-{i}"))]),
            1.0
        );
    }
    let trips = out
        .stderr
        .lines()
        .filter(|l| l.contains("status on"))
        .count();
    assert_eq!(trips, 1, "{out}");
    let twice = metrics(&mut redis.redlock(), &["job-1", "job-1"]).expect(0);
    check(&twice.stdout);
}

/// `--json` is `--format json`; naming both is a usage error rather than a guess.
#[test]
fn json_is_short_for_format_json() {
    let redis = or_skip!(RedisServer::start());
    hold(&redis, "deploy", "60s");
    for args in [&["--json"][..], &["--format", "json"]] {
        let out = redis
            .redlock()
            .arg("status")
            .args(args)
            .arg("deploy")
            .run()
            .expect(0);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(v[0]["key"], "deploy", "{out}");
    }
    let table = redis
        .redlock()
        .args(["status", "--format", "table", "deploy"])
        .run()
        .expect(0);
    assert!(table.stdout.starts_with("LOCK"), "{table}");
    for format in ["json", "table", "prometheus"] {
        let out = redis
            .redlock()
            .args(["status", "--json", "--format", format])
            .run()
            .expect(2);
        assert_one_error_line(&out);
    }
    // A free lock is not an error for metrics (the exit status of the table and JSON is 1).
    metrics(&mut redis.redlock(), &["free"]).expect(0);
    redis.redlock().args(["status", "free"]).run().expect(1);
}

/// A 3-node quorum behind passwords: each family has one series per node, labelled with the
/// node's URL without user or password; the verdict is a state set; a node that does not answer
/// is `redlock_node_up 0` and has no samples; too few answers still write the metrics (exit 0,
/// with a warning).
#[test]
fn a_quorum_labels_each_node_and_hides_its_password() {
    const PASSWORD: &str = "s3cret-pw";
    let mut nodes = or_skip!(Nodes::start_with(3, || RedisServer::builder().password(PASSWORD)));
    let ports: Vec<u16> = nodes.servers().map(|s| s.port()).collect();
    // Two with a password alone, one with a user as well.
    let urls = [
        format!("redis://:{PASSWORD}@127.0.0.1:{}", ports[0]),
        format!("redis://:{PASSWORD}@127.0.0.1:{}", ports[1]),
        format!("redis://default:{PASSWORD}@127.0.0.1:{}", ports[2]),
    ];
    let run = |args: &[&str]| {
        redlock()
            .env("REDLOCK_URL", urls.join(","))
            .args(args)
            .run()
    };
    run(&["acquire", "deploy", "--ttl", "5m"]).expect(0);
    let labels: Vec<String> = ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let out = run(&["status", "--format", "prometheus", "deploy", "idle"]).expect(0);
    assert!(
        !out.stdout.contains(PASSWORD) && !out.stdout.contains("default"),
        "{out}"
    );
    let s = check(&out.stdout);
    for node in &labels {
        let on = |lock| [("lock", lock), ("node", node.as_str())];
        for family in FAMILIES {
            value(&s, family, &on("deploy"));
            value(&s, family, &on("idle"));
        }
        assert_eq!(value(&s, "redlock_held", &on("deploy")), 1.0);
        assert!(value(&s, "redlock_fence", &on("deploy")) > 0.0);
        // Each node counted the one acquisition that ran on it.
        assert_eq!(value(&s, "redlock_acquisitions_total", &on("deploy")), 1.0);
        assert_eq!(value(&s, "redlock_acquisitions_total", &on("idle")), 0.0);
        assert_eq!(value(&s, "redlock_held", &on("idle")), 0.0);
        assert_eq!(value(&s, "redlock_node_up", &on("deploy")), 1.0);
    }
    // No series without a node, but the verdict's.
    assert!(
        s.iter()
            .all(|x| x.labels.contains_key("node") || x.name == "redlock_quorum_verdict"),
        "{}",
        out.stdout
    );
    let verdict = |s: &[Sample], lock, v| {
        value(
            s,
            "redlock_quorum_verdict",
            &[("lock", lock), ("verdict", v)],
        )
    };
    for (lock, holds) in [("deploy", "held"), ("idle", "free")] {
        for v in ["held", "free", "split", "unknown"] {
            assert_eq!(
                verdict(&s, lock, v),
                f64::from(u8::from(v == holds)),
                "{lock} {v}"
            );
        }
    }

    // One node down: still held, and that node is down.
    nodes[2].kill();
    let out = run(&["status", "--format", "prometheus", "deploy"]).expect(0);
    let s = check(&out.stdout);
    assert_eq!(verdict(&s, "deploy", "held"), 1.0);
    let down = [("lock", "deploy"), ("node", labels[2].as_str())];
    assert_eq!(value(&s, "redlock_node_up", &down), 0.0);
    assert!(
        !s.iter()
            .any(|x| x.name == "redlock_held" && x.labels.get("node") == Some(&labels[2])),
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.contains(PASSWORD) && !out.stderr.contains(PASSWORD),
        "{out}"
    );

    // Two down: too few to tell; the metrics say so, and so does a warning.
    nodes[1].kill();
    let out = run(&["status", "--format", "prometheus", "deploy"]).expect(0);
    let s = check(&out.stdout);
    assert_eq!(verdict(&s, "deploy", "unknown"), 1.0);
    assert_eq!(verdict(&s, "deploy", "held"), 0.0);
    assert!(out.stderr.contains("warning: no quorum"), "{out}");
    assert!(!out.stderr.contains(PASSWORD), "{out}");
}

/// Three acquisitions, two of them after a wait: `redlock_acquisitions_total` counts them, and
/// `redlock_wait_seconds_sum` adds up the waits, which lie between what the test saw of them
/// (from the moment each waiter was queued to the moment it could have the lock) and each
/// waiter's whole run.
/// Queues `acquire NAME` behind the holder of `token`, does some real work (five `status`
/// calls, not a sleep), releases `token` and lets the waiter through. Returns the waiter's
/// token, its whole run (an upper bound of its wait) and the time from its being queued to the
/// release (a lower bound).
fn wait_behind(redis: &RedisServer, name: &str, token: &str) -> (String, Duration, Duration) {
    let spawned = Instant::now();
    let waiter = redis
        .redlock()
        .args(["acquire", name, "--ttl", "60s", "--wait", "60s"])
        .spawn_proc();
    assert!(wait_for(
        || queue(redis, name).len() == 1,
        Duration::from_secs(30)
    ));
    let queued = Instant::now();
    for _ in 0..5 {
        redis.redlock().args(["status", name]).run().expect(0);
    }
    let released = Instant::now();
    release(redis, name, token);
    let out = waiter.finish(HANG).expect(0);
    (
        out.stdout.trim().to_string(),
        spawned.elapsed(),
        released - queued,
    )
}

#[test]
fn counters_count_real_acquisitions_and_their_waits() {
    let redis = or_skip!(RedisServer::start());
    // 1: no wait. 2 and 3: each waits behind the one before until it is released.
    let held = hold(&redis, "c", "60s");
    let (token, first_run, at_least_first) = wait_behind(&redis, "c", &held);
    let (_, second_run, at_least_second) = wait_behind(&redis, "c", &token);

    let text = metrics(&mut redis.redlock(), &["c"]).expect(0).stdout;
    let s = check(&text);
    let c = [("lock", "c")];
    assert_eq!(value(&s, "redlock_acquisitions_total", &c), 3.0, "{text}");
    assert_eq!(value(&s, "redlock_wait_seconds_count", &c), 3.0, "{text}");
    let sum = value(&s, "redlock_wait_seconds_sum", &c);
    // Each wait is counted in whole milliseconds: allow 1ms each. A waiter measures its wait
    // when it sends the attempt that takes the lock, after the release woke it.
    let lower = (at_least_first + at_least_second).as_secs_f64() - 0.002;
    let upper = (first_run + second_run).as_secs_f64() + 0.002;
    assert!(
        sum >= lower && sum <= upper,
        "waited {sum}s in all, expected between {lower}s and {upper}s\n{text}"
    );
}

/// On a Redis Cluster, the locks of every master, as on one server (no `node` label: each lock
/// lives on one master).
#[test]
fn a_cluster_lists_the_locks_of_every_master() {
    let cluster = or_skip!(Cluster::start());
    let names: Vec<String> = (0..12).map(|i| format!("job-{i}")).collect();
    for name in &names {
        cluster
            .redlock()
            .args(["acquire", name, "--ttl", "60s"])
            .run()
            .expect(0);
    }
    assert!(
        names
            .iter()
            .map(|n| cluster.owner(&lock_key(n)))
            .collect::<HashSet<_>>()
            .len()
            > 1,
        "every lock on one master: the test proves nothing"
    );
    let out = cluster
        .redlock()
        .args(["status", "--format", "prometheus"])
        .run()
        .expect(0);
    let s = check(&out.stdout);
    for name in &names {
        assert_eq!(value(&s, "redlock_held", &[("lock", name)]), 1.0);
    }
    assert!(s.iter().all(|x| !x.labels.contains_key("node")), "{out}");
}

/// The cron recipe replaces the metrics file only when `status` succeeds (`&& mv`): against a
/// server that cannot be reached it writes nothing to stdout and fails with the documented code
/// (69, unavailable) and one line on stderr, so the old file stays. A server that is down (the
/// port closed) and one that never answers (a hung server, the timeout's path) alike.
#[test]
fn an_unreachable_server_writes_nothing_and_fails() {
    for (what, url) in [
        ("down", format!("redis://127.0.0.1:{}", closed_port())),
        ("hung", format!("redis://127.0.0.1:{}", silent_port())),
    ] {
        let out = metrics(
            redlock().args(["--url", &url, "--io-timeout", "1s"]),
            &["deploy-prod", "nightly-backup"],
        );
        assert_eq!(out.code(), 69, "a {what} server:\n{out}");
        assert!(
            out.stdout.is_empty(),
            "a {what} server wrote metrics:\n{out}"
        );
        assert_one_error_line(&out);
    }
}
