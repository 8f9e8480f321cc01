//! Workload 4, idle: [`IDLE_WAITERS`] waiters queue behind a lock the bench holds for
//! [`IDLE_HOLD`]. Measures the Redis commands the waiters send while they wait (a waiter that
//! polls costs the server; one that blocks does not) and the drain, from the release to the last
//! waiter's exit. Then, a small step of its own: the memory a held lock takes in Redis, and what
//! one waiter adds (`MEMORY USAGE` of each key). A workload: above everything but `main`.

use std::fmt::Write as _;
use std::thread;
use std::time::{Duration, Instant};

use crate::admin::{Cmds, Count};
use crate::guard::{STEP_TIMEOUT, aborted, check_failed, start, watched};
use crate::harness::Bench;
use crate::loops::{Hold, Spec};
use crate::report::Report;
use crate::stats::{describe_cmds, fmt_d};
use crate::tools::{CS_EMPTY, TOOLS, Tool, polling_key, redlock_key};

/// How long the lock is held while the waiters queue.
const IDLE_HOLD: Duration = Duration::from_secs(10);
/// How many waiters queue behind it.
const IDLE_WAITERS: usize = 50;
/// The lock whose memory is measured.
const MEMORY_KEY: &str = "w4mem";

/// Workload 4: one run per tool; the commands per waiter per second while held, and the drain.
pub fn idle(bench: &mut Bench, r: &mut Report) {
    let w = "4. idle: 50 waiters behind a lock held 10 s";
    let idle = TOOLS.map(|tool| bench.run_idle(tool));
    let per_waiter_s = |c: &Option<Cmds>| {
        c.as_ref().map(|c| {
            let n = IDLE_WAITERS as f64 * c.window.as_secs_f64();
            let sent = c.sent().expect("the commands were counted");
            (sent as f64 / n, c.total as f64 / n)
        })
    };
    let rl = per_waiter_s(&idle[2].0).expect("redlock counts commands");
    let target = r.check(
        "4: ≤ 1 command per waiter per second while idle",
        rl.0 <= 1.0,
        format!("≤ 1 sent: {:.2}", rl.0),
    );
    r.row(
        w,
        "Redis commands per waiter per second while held: sent / incl. scripts",
        idle.each_ref().map(|i| match per_waiter_s(&i.0) {
            Some((a, b)) => format!("{a:.2} / {b:.2}"),
            None => "–".to_string(),
        }),
        target,
    );
    r.row(
        w,
        "drain: release → all 50 waiters through",
        idle.each_ref().map(|i| fmt_d(i.1)),
        String::new(),
    );
    let seed = bench.polling_memory();
    let (held, waiter) = bench.lock_memory();
    let per_event = bench.history_memory();
    r.row(
        w,
        "Redis memory: a held lock / + per waiter / + per history event (MEMORY USAGE; one \
         waiter, separate steps)",
        [
            "–".to_string(),
            format!("{seed} B / + 0 B / –"),
            format!("{held} B / + {waiter} B / + {per_event} B"),
        ],
        String::new(),
    );
}

impl Bench {
    /// Workload 4: `IDLE_WAITERS` waiters behind a lock held for `IDLE_HOLD`. Returns the commands
    /// sent while the lock was held, and the time from the release to the last waiter's exit.
    fn run_idle(&mut self, tool: Tool) -> (Option<Cmds>, Duration) {
        let tag = format!("w4-{}", tool.name());
        watched(&tag.clone(), || {
            self.reset_counter();
            let log = self.log(&format!("{tag}.holder"));
            let held = self.hold(tool, "w4", 60_000, &log);
            let mark = (tool != Tool::Flock).then(|| self.admin.begin(Count::Commands));
            let held_at = Instant::now();
            let running = self.start_loops(&Spec {
                bin: None,
                tag: tag.clone(),
                tool,
                key: "w4".to_string(),
                loops: IDLE_WAITERS,
                rounds: 1,
                cs: CS_EMPTY,
                hold: Hold::Exclusive,
            });
            while held_at.elapsed() < IDLE_HOLD && !aborted() {
                thread::sleep(Duration::from_millis(20));
            }
            check_failed();
            let cmds = mark.map(|m| self.admin.end(&m));
            let releasing = Instant::now();
            let released = self.release(held, "w4", &log);
            let (_, rounds) = self.finish(running);
            let events = self.events.collect(&tag);
            if let Some(e) = events.iter().find(|e| e.kind == 'E' && e.at < releasing) {
                panic!(
                    "{tag}: MUTUAL EXCLUSION VIOLATED: waiter {} got in while the holder held the lock",
                    e.l
                );
            }
            self.verify(&tag, tool, &events, IDLE_WAITERS);
            let last = rounds.iter().map(|r| r.done).max().expect("no waiter ran");
            let drain = last.saturating_duration_since(released);
            let mut line = format!("contention: {tag}: drain {}", fmt_d(drain));
            if let Some(c) = &cmds {
                let _ = write!(
                    line,
                    "; while held ({}): {}",
                    fmt_d(c.window),
                    describe_cmds(c, IDLE_WAITERS)
                );
            }
            eprintln!("{line}");
            (cmds, drain)
        })
    }

    /// The polling lock held: one string key (its waiters keep nothing in Redis).
    fn polling_memory(&mut self) -> u64 {
        watched("w4-memory-seed", || {
            let log = self.log("w4-memory-seed");
            let held = self.hold(Tool::Polling, MEMORY_KEY, 60_000, &log);
            let bytes = self.admin.memory_usage(&polling_key(MEMORY_KEY));
            self.release(held, MEMORY_KEY, &log);
            eprintln!("contention: w4-memory: seed style, a held lock: {bytes} B");
            bytes
        })
    }

    /// redlock: the bytes of a held lock's keys (the lock and its meta hash), then what one
    /// waiter adds (the queue, the leases and the waiters' records; the waiter blocks on its own
    /// wake list, which exists only once it is woken). The waiter is `redlock exec KEY -- true`:
    /// it goes through once the bench releases.
    fn lock_memory(&mut self) -> (u64, u64) {
        watched("w4-memory", || {
            let log = self.log("w4-memory");
            let lock = redlock_key(MEMORY_KEY);
            // A held lock has its history too, with the one `acquired` event.
            let held_keys = [lock.clone(), format!("{lock}:meta"), format!("{lock}:log")];
            // The leases hash holds the waiter's record too.
            let waiter_keys = [format!("{lock}:q"), format!("{lock}:leases")];
            let held = self.hold(Tool::Redlock, MEMORY_KEY, 60_000, &log);
            let mut sizes = |keys: &[String]| -> Vec<u64> {
                keys.iter().map(|k| self.admin.memory_usage(k)).collect()
            };
            let alone = sizes(&held_keys);
            assert!(
                alone.iter().all(|&b| b > 0),
                "w4-memory: a key of the held lock is missing: {held_keys:?} = {alone:?}"
            );
            assert_eq!(
                sizes(&waiter_keys),
                [0, 0],
                "w4-memory: waiter keys before any waiter"
            );
            let mut cmd = self.env.redlock(&["exec", MEMORY_KEY, "--", "true"]);
            cmd.stderr(log.stdio());
            let waiter = start(&mut cmd, "w4-memory waiter").unwrap_or_else(|e| panic!("{e}"));
            // The waiter's script writes its two keys at once; wait for them (bounded).
            let until = Instant::now() + STEP_TIMEOUT;
            let queued = loop {
                let now = sizes(&waiter_keys);
                if now.iter().all(|&b| b > 0) || Instant::now() >= until || aborted() {
                    break now;
                }
                thread::sleep(Duration::from_millis(5));
            };
            check_failed();
            assert!(
                queued.iter().all(|&b| b > 0),
                "w4-memory: the waiter did not queue within {}s: {waiter_keys:?} = {queued:?}",
                STEP_TIMEOUT.as_secs()
            );
            let with_waiter = sizes(&held_keys);
            self.release(held, MEMORY_KEY, &log);
            let (status, _) = waiter.wait().unwrap_or_else(|e| panic!("{e}"));
            check_failed();
            assert!(
                status.success(),
                "{}",
                log.failed("w4-memory waiter", status)
            );
            let total_alone: u64 = alone.iter().sum();
            // What the waiter added to the held lock's own keys (meta) counts as the waiter's.
            let added = (queued.iter().sum::<u64>() + with_waiter.iter().sum::<u64>())
                .saturating_sub(total_alone);
            let list = |keys: &[String], bytes: &[u64]| {
                keys.iter()
                    .zip(bytes)
                    .map(|(k, b)| format!("{k} {b} B"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            eprintln!(
                "contention: w4-memory: redlock, a held lock: {total_alone} B [{}]; one waiter \
                 adds {added} B [{}; held keys then: {}]",
                list(&held_keys, &alone),
                list(&waiter_keys, &queued),
                list(&held_keys, &with_waiter)
            );
            (total_alone, added)
        })
    }

    /// What one event of a lock's history costs: `HISTORY_RUNS` runs of `redlock exec KEY --
    /// true` (an `acquired` and a `released` each, as `exec` writes them), then `MEMORY USAGE` of
    /// the stream (every entry sampled) divided by its length.
    fn history_memory(&mut self) -> u64 {
        const HISTORY_RUNS: usize = 100;
        watched("w4-history", || {
            let log = self.log("w4-history");
            let key = "w4hist";
            for _ in 0..HISTORY_RUNS {
                check_failed();
                let mut cmd = self.env.redlock(&["exec", key, "--", "true"]);
                cmd.stderr(log.stdio());
                let run = start(&mut cmd, "w4-history exec").unwrap_or_else(|e| panic!("{e}"));
                let (status, _) = run.wait().unwrap_or_else(|e| panic!("{e}"));
                assert!(
                    status.success(),
                    "{}",
                    log.failed("w4-history exec", status)
                );
            }
            let stream = format!("{}:log", redlock_key(key));
            let bytes = self.admin.memory_usage(&stream);
            let entries = (2 * HISTORY_RUNS) as u64;
            eprintln!("contention: w4-history: {entries} events in {bytes} B");
            bytes / entries
        })
    }
}
