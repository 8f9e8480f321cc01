//! Workloads 1 to 3, contention: loops × rounds on one lock, every tool running the same
//! critical section. 1: 8 loops × 25 rounds, empty critical section (plus fairness and, in a
//! separate run under MONITOR, the server-side hand-over); 2: 4 loops × 10 rounds, 20 ms
//! critical section; 3: the crowd, 100 processes at once × 3 rounds. Owns the repetitions (flock
//! and redlock [`REPS`] times each, interleaved; the polling tool once) and the rows every
//! contention workload has. A workload: above everything but `main`.

use std::time::Duration;

use crate::guard::watched;
use crate::harness::Bench;
use crate::loops::{LoopRun, Spec};
use crate::report::Report;
use crate::stats::{Summary, cmds_cell, fmt_d, log_run, percentile, ratio, summarize};
use crate::tools::{CS_20MS, CS_EMPTY, Tool};

/// Workloads 1 and 2: runs of flock and of redlock each (the polling tool runs once).
pub const REPS: usize = 5;

/// Workload 1: 8 loops × 25 rounds, empty critical section; its fairness row and, from separate
/// runs under MONITOR, the server-side hand-over.
pub fn empty_cs(bench: &mut Bench, r: &mut Report) {
    let w = "1. 8 loops × 25 rounds, empty CS";
    let s = bench.run_contention("w1", 8, 25, CS_EMPTY, REPS);
    let (vs_flock, vs_polling) = (ratio(s[2].wall, s[0].wall), ratio(s[2].wall, s[1].wall));
    let target = format!(
        "{}; {}",
        r.check(
            "1: wall ≤ 1.5× flock",
            vs_flock <= 1.5,
            format!("≤ 1.5× flock: {vs_flock:.2}×")
        ),
        r.check(
            "1: wall ≤ 0.3× seed",
            vs_polling <= 0.3,
            format!("≤ 0.3× seed: {vs_polling:.2}×")
        )
    );
    contention_rows(r, w, &s, target, Some("1"));
    let fairness = s[2].fairness;
    let target = r.check(
        "1: fairness ≤ 2",
        fairness <= 2.0,
        format!("≤ 2: {fairness:.2}"),
    );
    r.row(
        w,
        &format!(
            "fairness: worst loop's mean wait ÷ mean wait{}",
            pooled(&s, " (worst run)")
        ),
        [0, 1, 2].map(|i| format!("{:.2}", s[i].fairness)),
        target,
    );
    let polling_gaps = bench.monitored(Tool::Polling);
    let redlock_gaps = bench.monitored(Tool::Redlock);
    let (pp50, rp50) = (
        percentile(&polling_gaps, 0.5),
        percentile(&redlock_gaps, 0.5),
    );
    let target = r.check(
        "hand-over p50 ≤ 2 ms",
        rp50 <= Duration::from_millis(2),
        format!("≤ 2 ms: {}", fmt_d(rp50)),
    );
    r.row(
        w,
        "hand-over p50, server side: release → next SET (MONITOR, separate run)",
        ["–".to_string(), fmt_d(pp50), fmt_d(rp50)],
        target,
    );
}

/// Workload 2: 4 loops × 10 rounds, 20 ms critical section.
pub fn sleepy_cs(bench: &mut Bench, r: &mut Report) {
    let w = "2. 4 loops × 10 rounds, 20 ms CS";
    let s = bench.run_contention("w2", 4, 10, CS_20MS, REPS);
    let vs_flock = ratio(s[2].wall, s[0].wall);
    let target = r.check(
        "2: wall ≤ 1.15× flock",
        vs_flock <= 1.15,
        format!("≤ 1.15× flock: {vs_flock:.2}×"),
    );
    contention_rows(r, w, &s, target, None);
}

/// Workload 3, the crowd: 100 processes at once, 3 rounds each (one run per tool).
pub fn crowd(bench: &mut Bench, r: &mut Report) {
    let w = "3. crowd: 100 processes at once × 3 rounds";
    let s = bench.run_contention("w3", 100, 3, CS_EMPTY, 1);
    contention_rows(r, w, &s, String::new(), Some("3"));
}

impl Bench {
    /// Workloads 1 to 3: loops × rounds on one lock. flock and redlock run `reps` times each,
    /// alternately (flock, redlock, flock, redlock, …), so that both see the same spells of a noisy
    /// machine; the polling tool runs once, after them. Every run is checked (exact counter,
    /// alternating entries and leaves) and logged on stderr; the summaries are in `TOOLS` order.
    fn run_contention(
        &mut self,
        tag: &str,
        loops: usize,
        rounds: usize,
        cs: &'static str,
        reps: usize,
    ) -> Vec<Summary> {
        let mut order: Vec<(Tool, usize)> = (0..reps)
            .flat_map(|rep| [(Tool::Flock, rep), (Tool::Redlock, rep)])
            .collect();
        order.push((Tool::Polling, 0));
        let mut runs: [Vec<LoopRun>; 3] = Default::default();
        for (tool, rep) in order {
            let name = if reps > 1 && tool != Tool::Polling {
                format!("{tag}-{}-r{}", tool.name(), rep + 1)
            } else {
                format!("{tag}-{}", tool.name())
            };
            let spec = Spec {
                tag: name,
                tool,
                key: tag.to_string(),
                loops,
                rounds,
                cs,
            };
            let run = watched(&spec.tag, || self.run_loops(&spec));
            log_run(&spec.tag, &run);
            runs[tool.index()].push(run);
        }
        let out: Vec<Summary> = runs.iter().map(|r| summarize(r)).collect();
        if reps > 1 {
            let (f, r) = (&out[Tool::Flock.index()], &out[Tool::Redlock.index()]);
            let list =
                |ws: &[Duration]| ws.iter().map(|w| fmt_d(*w)).collect::<Vec<_>>().join(", ");
            let pairs: Vec<String> = f
                .walls
                .iter()
                .zip(&r.walls)
                .map(|(f, r)| format!("{:.2}", ratio(*r, *f)))
                .collect();
            eprintln!(
                "contention: {tag}: wall per run, in run order: flock [{}], redlock [{}]; \
                 redlock ÷ flock per pair [{}]; medians flock {}, redlock {}: {:.2}×",
                list(&f.walls),
                list(&r.walls),
                pairs.join(", "),
                fmt_d(f.wall),
                fmt_d(r.wall),
                ratio(r.wall, f.wall)
            );
        }
        out
    }
}

/// How a row of a repeated workload was computed, as a suffix of its metric ("" for single runs).
fn pooled(s: &[Summary], how: &str) -> String {
    if s.iter().any(|s| s.runs > 1) {
        how.to_string()
    } else {
        String::new()
    }
}

/// The rows every contention workload has.
fn contention_rows(
    r: &mut Report,
    w: &str,
    s: &[Summary],
    wall_target: String,
    cmds_target: Option<&str>,
) {
    let cells = |f: &dyn Fn(&Summary) -> String| [f(&s[0]), f(&s[1]), f(&s[2])];
    let runs = s.iter().map(|s| s.runs).max().unwrap_or(1);
    r.row(
        w,
        &format!(
            "wall{}",
            pooled(s, &format!(" (median of {runs} runs; seed style: 1 run)"))
        ),
        cells(&|s| fmt_d(s.wall)),
        wall_target,
    );
    r.row(
        w,
        &format!("hand-overs per second{}", pooled(s, " (median run)")),
        cells(&|s| format!("{:.0}", s.rate)),
        String::new(),
    );
    r.row(
        w,
        &format!("wait p50 / p99{}", pooled(s, " (runs pooled)")),
        cells(&|s| format!("{} / {}", fmt_d(s.p50), fmt_d(s.p99))),
        String::new(),
    );
    let target = match (cmds_target, s[2].cmds) {
        (Some(n), Some((sent, _))) => r.check(
            &format!("{n}: ≤ 6 commands sent per critical section"),
            sent <= 6.0,
            format!("≤ 6 sent: {sent:.1}"),
        ),
        _ => String::new(),
    };
    r.row(
        w,
        &format!(
            "Redis commands per CS: sent / incl. scripts{}",
            pooled(s, " (runs pooled)")
        ),
        cells(&|s| cmds_cell(s.cmds)),
        target,
    );
    r.row(
        w,
        &format!(
            "hand-over p50, client side: CS leave → next CS entry{}",
            pooled(s, " (runs pooled)")
        ),
        cells(&|s| fmt_d(s.handover)),
        String::new(),
    );
}
