//! Workload 6, uncontended: what a lock costs a script when nobody else wants it. 6a: `true`
//! run under each tool's lock; 6b: a bare acquire + release (`redis-cli SET NX PX` + `EVAL`
//! against `redlock acquire` + `release`); both medians of [`UNCONTENDED_RUNS`] runs per command,
//! the tools interleaved in each round. 6c: the peak RSS of the lock process itself. etcdctl
//! takes part in 6a and 6c when the bench's etcd runs (`etcdctl lock k true` is its uncontended
//! `true`); it has no 6b: `etcdctl lock` has no separate acquire and release commands (without a
//! command it holds the lock until it is signalled), so its cell is "–". A workload: above
//! everything but `main`.

use std::time::Duration;

use crate::guard::{check_failed, start, watched};
use crate::harness::Bench;
use crate::loops::LOOP_TTL_MS;
use crate::report::Report;
use crate::stats::{fmt_d, percentile, ratio};
use crate::tools::{ETCD_MISSING, RELEASE_LUA, Tool, polling_key};

/// Runs of each command.
pub const UNCONTENDED_RUNS: usize = 200;
/// Runs of each tool for the peak RSS.
const RSS_RUNS: usize = 5;

/// Workload 6: the rows of 6a, 6b and 6c.
pub fn uncontended(bench: &mut Bench, r: &mut Report) {
    let w = "6. uncontended";
    let medians = bench.uncontended_true();
    let mut cells: Vec<String> = medians.iter().map(|m| fmt_d(*m)).collect();
    if !bench.has_etcd() {
        cells.push(ETCD_MISSING.to_string());
    }
    let vs_flock = ratio(medians[2], medians[0]);
    let target = r.check(
        "6: exec -- true ≤ 1.5× flock f true",
        vs_flock <= 1.5,
        format!("≤ 1.5× flock: {vs_flock:.2}×"),
    );
    r.row(
        w,
        "run `true` under the lock: median of 200 (`flock f true`, `seed-lock.sh k true`, `etcdctl lock k true`, `redlock exec k -- true`)",
        cells,
        target,
    );
    let (polling_ar, redlock_ar) = bench.uncontended_acquire_release();
    r.row(
        w,
        "acquire + release: median of 200 (`redis-cli` SET NX PX + EVAL; `redlock acquire` + `release`; etcdctl has no such pair)",
        ["–".to_string(), fmt_d(polling_ar), fmt_d(redlock_ar)],
        String::new(),
    );
    let rss = bench.peak_rss();
    let target = r.check(
        "6: peak RSS of exec ≤ 8 MiB",
        rss[2] <= 8 * 1024,
        format!("≤ 8 MiB: {:.1} MiB", rss[2] as f64 / 1024.0),
    );
    r.row(
        w,
        "peak RSS of the lock process itself (VmHWM)",
        rss.iter()
            .map(|k| format!("{:.1} MiB", *k as f64 / 1024.0))
            .collect::<Vec<_>>(),
        target,
    );
}

impl Bench {
    /// Workload 6a: median wall of `true` under each tool's lock (etcdctl's last, if it runs),
    /// runs interleaved.
    fn uncontended_true(&mut self) -> Vec<Duration> {
        watched("w6-true", || {
            let log = self.log("w6-true");
            let tools = self.tools_with_etcd();
            let mut walls: Vec<Vec<Duration>> = vec![Vec::new(); tools.len()];
            for i in 0..UNCONTENDED_RUNS {
                for &tool in &tools {
                    let cmd = self.env.under_lock(tool, "w6", LOOP_TTL_MS, &["true"]);
                    let what = format!("w6 {} `true` run {i}", tool.name());
                    walls[tool.index()].push(self.time_one(cmd, &what, &log));
                }
            }
            let medians: Vec<Duration> = walls.iter().map(|w| percentile(w, 0.5)).collect();
            let quartiles = |w: &[Duration]| {
                format!(
                    "{} / {} / {}",
                    fmt_d(percentile(w, 0.25)),
                    fmt_d(percentile(w, 0.5)),
                    fmt_d(percentile(w, 0.75))
                )
            };
            let each: Vec<String> = tools
                .iter()
                .map(|t| format!("{} {}", t.name(), quartiles(&walls[t.index()])))
                .collect();
            eprintln!(
                "contention: w6-true: {UNCONTENDED_RUNS} interleaved runs each, p25 / median / \
                 p75: {}; redlock ÷ flock medians {:.2}×",
                each.join(", "),
                ratio(medians[2], medians[0])
            );
            if let Some(e) = medians.get(Tool::Etcd.index()) {
                eprintln!(
                    "contention: w6-true: etcdctl ÷ redlock medians {:.2}×",
                    ratio(*e, medians[2])
                );
            }
            medians
        })
    }

    /// Workload 6b: median wall of acquire + release: `redlock acquire` / `redlock release`
    /// against `redis-cli SET NX PX` / `redis-cli EVAL` (compare-and-delete), runs interleaved.
    fn uncontended_acquire_release(&mut self) -> (Duration, Duration) {
        watched("w6-acquire-release", || {
            let log = self.log("w6-acquire-release");
            let (mut polling, mut redlock) = (Vec::new(), Vec::new());
            let key = "w6ar";
            for i in 0..UNCONTENDED_RUNS {
                let token = uuid::Uuid::new_v4().simple().to_string();
                let set =
                    self.env
                        .redis_cli(&["SET", &polling_key(key), &token, "NX", "PX", "30000"]);
                let (out, a) = self.run_one(set, &format!("w6 redis-cli SET run {i}"), &log);
                assert_eq!(out.trim(), "OK", "w6: redis-cli SET NX did not take {key}");
                let del =
                    self.env
                        .redis_cli(&["EVAL", RELEASE_LUA, "1", &polling_key(key), &token]);
                let (out, b) = self.run_one(del, &format!("w6 redis-cli EVAL run {i}"), &log);
                assert_eq!(out.trim(), "1", "w6: redis-cli EVAL did not release {key}");
                polling.push(a + b);

                let acquire = self.env.redlock(&["acquire", key]);
                let (token, a) =
                    self.run_one(acquire, &format!("w6 redlock acquire run {i}"), &log);
                let release = self.env.redlock(&["release", key, token.trim()]);
                let (_, b) = self.run_one(release, &format!("w6 redlock release run {i}"), &log);
                redlock.push(a + b);
            }
            let (s, r) = (percentile(&polling, 0.5), percentile(&redlock, 0.5));
            eprintln!(
                "contention: w6-acquire-release: medians redis-cli {}, redlock {}",
                fmt_d(s),
                fmt_d(r)
            );
            (s, r)
        })
    }

    /// Workload 6c: peak RSS (KiB) of each tool's own process running `sleep 0.3` under the lock
    /// (etcdctl's last, if it runs).
    fn peak_rss(&mut self) -> Vec<u64> {
        watched("w6-rss", || {
            let log = self.log("w6-rss");
            let tools = self.tools_with_etcd();
            let mut peak = vec![0; tools.len()];
            for &tool in &tools {
                for i in 0..RSS_RUNS {
                    let mut cmd =
                        self.env
                            .under_lock(tool, "w6rss", LOOP_TTL_MS, &["sleep", "0.3"]);
                    cmd.stderr(log.stdio());
                    let what = format!("w6 {} rss run {i}", tool.name());
                    let proc = start(&mut cmd, &what).unwrap_or_else(|e| panic!("{e}"));
                    let (status, kib) = proc.wait_peak_rss().unwrap_or_else(|e| panic!("{e}"));
                    check_failed();
                    assert!(status.success(), "{}", log.failed(&what, status));
                    peak[tool.index()] = peak[tool.index()].max(kib);
                }
            }
            let each: Vec<String> = tools
                .iter()
                .map(|t| format!("{} {}", t.name(), peak[t.index()]))
                .collect();
            eprintln!("contention: w6-rss: peak KiB {}", each.join(", "));
            peak
        })
    }
}
