//! Workloads 1 to 3, contention: loops × rounds on one lock, every tool running the same
//! critical section. 1: 8 loops × 25 rounds, empty critical section (plus fairness and, in a
//! separate run under MONITOR, the server-side hand-over); 2: 4 loops × 10 rounds, 20 ms
//! critical section; 3: the crowd, 100 processes at once × 3 rounds. Owns the repetitions (flock
//! and redlock [`REPS`] times each, interleaved; the polling tool once) and the rows every
//! contention workload has. With `REDLOCK_BENCH_BASELINE=PATH`, workload 1 also runs that redlock
//! binary (a build of the code before a change), interleaved with the others (flock, redlock,
//! baseline, flock, …), for a row of its own: the hot path must not get slower. Workload 1 also
//! runs `etcdctl lock` [`REPS`] times, after redlock in each repetition, when the bench's etcd
//! runs (its column says why not otherwise). A workload: above everything but `main`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::admin::Count;
use crate::guard::watched;
use crate::harness::Bench;
use crate::loops::{Hold, LoopRun, Spec};
use crate::report::Report;
use crate::stats::{
    Summary, cmds_cell, fmt_d, fmt_us, log_run, log_walls, percentile, ratio, summarize,
};
use crate::tools::{CS_20MS, CS_EMPTY, ETCD_MISSING, Tool};

/// Workloads 1 and 2: runs of flock and of redlock each (the polling tool runs once in workload
/// 2, [`POLLING_REPS_W1`] times in workload 1).
pub const REPS: usize = 5;
/// The repetition number of a run that counts commands (see `run_contention`); only in its name.
const COUNTING: usize = usize::MAX;
/// Workload 1: runs of the polling tool, spread among the others (its server CPU per critical
/// section is a target's reference: one run of it is too noisy to compare with).
pub const POLLING_REPS_W1: usize = 3;

/// Workload 1: 8 loops × 25 rounds, empty critical section; its fairness row and, from separate
/// runs under MONITOR, the server-side hand-over; etcdctl's column when the bench's etcd runs.
pub fn empty_cs(bench: &mut Bench, r: &mut Report) {
    let w = "1. 8 loops × 25 rounds, empty CS";
    let baseline = std::env::var_os("REDLOCK_BENCH_BASELINE").map(PathBuf::from);
    let etcd = bench.has_etcd();
    let (s, base) = bench.run_contention(
        "w1",
        8,
        25,
        CS_EMPTY,
        (REPS, POLLING_REPS_W1),
        baseline.as_deref(),
        true,
        etcd,
    );
    let (vs_flock, vs_polling) = (ratio(s[2].wall, s[0].wall), ratio(s[2].wall, s[1].wall));
    let target = format!(
        "{}; {}",
        r.check(
            "1: wall ≤ 1.1× flock",
            vs_flock <= 1.1,
            format!("≤ 1.1× flock: {vs_flock:.2}×")
        ),
        r.check(
            "1: wall ≤ 0.3× seed",
            vs_polling <= 0.3,
            format!("≤ 0.3× seed: {vs_polling:.2}×")
        )
    );
    contention_rows(r, w, &s, target, Some(&W1_TARGETS), true);
    if let (Some(path), Some(b)) = (&baseline, &base) {
        baseline_row(r, w, path, &s[2], b);
    }
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
        s.iter()
            .map(|s| format!("{:.2}", s.fairness))
            .collect::<Vec<_>>(),
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
    let (s, _) = bench.run_contention("w2", 4, 10, CS_20MS, (REPS, 1), None, false, false);
    let vs_flock = ratio(s[2].wall, s[0].wall);
    let target = r.check(
        "2: wall ≤ 1.15× flock",
        vs_flock <= 1.15,
        format!("≤ 1.15× flock: {vs_flock:.2}×"),
    );
    contention_rows(r, w, &s, target, None, false);
}

/// Workload 3, the crowd: 100 processes at once, 3 rounds each (one run per tool).
pub fn crowd(bench: &mut Bench, r: &mut Report) {
    let w = "3. crowd: 100 processes at once × 3 rounds";
    let (s, _) = bench.run_contention("w3", 100, 3, CS_EMPTY, (1, 1), None, true, false);
    contention_rows(r, w, &s, String::new(), Some(&W3_TARGETS), false);
}

impl Bench {
    /// Workloads 1 to 3: loops × rounds on one lock. flock and redlock run `reps.0` times each,
    /// alternately (flock, redlock, flock, redlock, …), so that both see the same spells of a noisy
    /// machine; the polling tool runs `reps.1` times, spread among them (the first after the
    /// first pair, the last at the end). With a `baseline` binary, it runs beside each redlock
    /// run, after it in even repetitions and before it in odd ones (flock, redlock, baseline,
    /// flock, baseline, redlock, …), on a key of its own. Every run is
    /// checked (exact counter, alternating entries and leaves) and logged on stderr; the
    /// summaries are in `TOOLS` order, the baseline's apart. With `cpu`, those runs measure the
    /// server's CPU time (the slow log off), and each tool with a server (and the baseline) runs
    /// once more at the end, alone, to count its commands (the slow log on; see [`Count`]);
    /// without, the runs count the commands. With `etcd`, etcdctl runs `reps.0` times too, after
    /// the redlock runs of each repetition; its summary is the fourth (no Redis figures).
    #[allow(clippy::too_many_arguments)]
    fn run_contention(
        &mut self,
        tag: &str,
        loops: usize,
        rounds: usize,
        cs: &'static str,
        (reps, polling_reps): (usize, usize),
        baseline: Option<&Path>,
        cpu: bool,
        etcd: bool,
    ) -> (Vec<Summary>, Option<Summary>) {
        // After which repetitions the polling tool runs: spread out, the last one at the end.
        let polling_after: Vec<usize> = (0..polling_reps)
            .map(|k| {
                if k + 1 == polling_reps {
                    reps - 1
                } else {
                    k * reps / polling_reps
                }
            })
            .collect();
        // (tool, repetition, the baseline binary or None)
        let mut order: Vec<(Tool, usize, Option<&Path>)> = Vec::new();
        for rep in 0..reps {
            order.push((Tool::Flock, rep, None));
            // The baseline before redlock in every other repetition: in one order only, the
            // one that runs second met different conditions each time (in workload 1 that
            // moved the ratio of the two by several per cent either way).
            let pair = [(Tool::Redlock, rep, None)]
                .into_iter()
                .chain(baseline.map(|b| (Tool::Redlock, rep, Some(b))));
            if rep % 2 == 0 {
                order.extend(pair);
            } else {
                order.extend(pair.rev());
            }
            if etcd {
                order.push((Tool::Etcd, rep, None));
            }
            for (k, _) in polling_after.iter().enumerate().filter(|(_, a)| **a == rep) {
                order.push((Tool::Polling, k, None));
            }
        }
        let timed = order.len();
        if cpu {
            for tool in [Tool::Polling, Tool::Redlock] {
                order.push((tool, COUNTING, None));
            }
            order.extend(baseline.map(|b| (Tool::Redlock, COUNTING, Some(b))));
        }
        let mut runs: [Vec<LoopRun>; 4] = Default::default();
        let mut base_runs = Vec::new();
        let mut counted: [Vec<LoopRun>; 4] = Default::default();
        let mut base_counted = Vec::new();
        for (i, (tool, rep, bin)) in order.into_iter().enumerate() {
            let counting = i >= timed;
            let who = if bin.is_some() { "base" } else { tool.name() };
            let repeated = if tool == Tool::Polling {
                polling_reps > 1
            } else {
                reps > 1
            };
            let name = if counting {
                format!("{tag}-{who}-count")
            } else if repeated {
                format!("{tag}-{who}-r{}", rep + 1)
            } else {
                format!("{tag}-{who}")
            };
            let spec = Spec {
                bin: bin.map(Path::to_path_buf),
                tag: name,
                tool,
                key: if bin.is_some() {
                    format!("{tag}-base")
                } else {
                    tag.to_string()
                },
                loops,
                rounds,
                cs,
                hold: Hold::Exclusive,
            };
            let count = if cpu && !counting {
                Count::Cpu
            } else {
                Count::Commands
            };
            let run = watched(&spec.tag, || self.run_loops(&spec, count));
            log_run(&spec.tag, &run);
            match (bin.is_some(), counting) {
                (true, false) => base_runs.push(run),
                (true, true) => base_counted.push(run),
                (false, false) => runs[tool.index()].push(run),
                (false, true) => counted[tool.index()].push(run),
            }
        }
        let out: Vec<Summary> = runs
            .iter()
            .zip(&counted)
            .take(if etcd { 4 } else { 3 })
            .map(|(r, c)| summarize(r, c))
            .collect();
        let base = (!base_runs.is_empty()).then(|| summarize(&base_runs, &base_counted));
        if reps > 1 {
            log_walls(
                tag,
                ("flock", &out[Tool::Flock.index()]),
                &out[Tool::Redlock.index()],
            );
        }
        if let Some(e) = out.get(Tool::Etcd.index()) {
            let r = &out[Tool::Redlock.index()];
            let list = |ws: &[Duration]| ws.iter().map(|w| fmt_d(*w)).collect::<Vec<_>>();
            let pairs: Vec<String> = e
                .walls
                .iter()
                .zip(&r.walls)
                .map(|(e, r)| format!("{:.2}", ratio(*e, *r)))
                .collect();
            eprintln!(
                "contention: {tag}: etcdctl wall per run [{}]; etcdctl ÷ redlock per pair [{}]; \
                 medians etcdctl {}, redlock {}: {:.2}×",
                list(&e.walls).join(", "),
                pairs.join(", "),
                fmt_d(e.wall),
                fmt_d(r.wall),
                ratio(e.wall, r.wall)
            );
        }
        if let Some(b) = &base {
            let r = &out[Tool::Redlock.index()];
            let pairs: Vec<String> = r
                .walls
                .iter()
                .zip(&b.walls)
                .map(|(r, b)| format!("{:.2}", ratio(*r, *b)))
                .collect();
            eprintln!(
                "contention: {tag}: baseline wall per run [{}]; redlock ÷ baseline per pair [{}]; \
                 medians redlock {}, baseline {}: {:.2}×",
                b.walls
                    .iter()
                    .map(|w| fmt_d(*w))
                    .collect::<Vec<_>>()
                    .join(", "),
                pairs.join(", "),
                fmt_d(r.wall),
                fmt_d(b.wall),
                ratio(r.wall, b.wall)
            );
        }
        (out, base)
    }
}

/// Workload 1's row for the baseline build: its median wall and round trips per critical
/// section; the targets compare redlock's with them.
fn baseline_row(r: &mut Report, w: &str, path: &Path, now: &Summary, base: &Summary) {
    let vs_base = ratio(now.wall, base.wall);
    let sent = |s: &Summary| s.cmds.map_or(f64::NAN, |c| c.0);
    // (The round trips' target is workload 1's own: see `W1_TARGETS`.)
    let target = r.check(
        "1: wall within 5% of the baseline build",
        vs_base <= 1.05,
        format!("wall ≤ 1.05× baseline: {vs_base:.2}×"),
    );
    r.row(
        w,
        &format!(
            "baseline build ({}): wall / round trips / Redis server CPU per CS (median of {} runs; \
             runs pooled)",
            version(path),
            base.runs
        ),
        [
            "–".to_string(),
            "–".to_string(),
            format!(
                "{} / {:.1} / {}",
                fmt_d(base.wall),
                sent(base),
                base.cpu.map_or("–".to_string(), fmt_us)
            ),
        ],
        target,
    );
}

/// `PATH --version`'s first line, or the path if it has none.
fn version(path: &Path) -> String {
    Command::new(path)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(|l| l.trim().to_string())
        })
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| path.display().to_string())
}

/// How a row of a repeated workload was computed, as a suffix of its metric ("" for single runs).
fn pooled(s: &[Summary], how: &str) -> String {
    if s.iter().any(|s| s.runs > 1) {
        how.to_string()
    } else {
        String::new()
    }
}

/// The targets on redlock's Redis figures in a workload that measures them (1 and 3).
struct Targets {
    /// The workload's number, in the targets' names.
    n: &'static str,
    /// Commands sent per critical section (round trips).
    sent: f64,
    /// Commands run inside scripts per critical section, if targeted.
    in_scripts: Option<f64>,
    /// Redis server CPU per critical section, as a multiple of the polling lock's.
    cpu_vs_seed: f64,
    /// Client-side hand-over p50, if targeted.
    handover: Option<Duration>,
}

/// Workload 1 (issue 28's lean hot path): at most 3 round trips and 30 commands inside scripts
/// per critical section, the server's CPU at most 0.8× the polling lock's, a client-side
/// hand-over p50 of 2.5 ms at most.
const W1_TARGETS: Targets = Targets {
    n: "1",
    sent: 3.0,
    in_scripts: Some(30.0),
    cpu_vs_seed: 0.8,
    handover: Some(Duration::from_micros(2500)),
};

/// Workload 3, the crowd: no worse than before the direct hand-over (6 sent, the polling lock's
/// CPU).
const W3_TARGETS: Targets = Targets {
    n: "3",
    sent: 6.0,
    in_scripts: None,
    cpu_vs_seed: 1.0,
    handover: None,
};

/// The rows every contention workload has, a cell per summary in `s` (etcdctl's, the fourth, has
/// no Redis figures: "–"). With `etcd_column` but no etcdctl summary, etcd is not installed, and
/// the first row's etcdctl cell says so.
fn contention_rows(
    r: &mut Report,
    w: &str,
    s: &[Summary],
    wall_target: String,
    targets: Option<&Targets>,
    etcd_column: bool,
) {
    let mut missing = etcd_column && s.get(Tool::Etcd.index()).is_none();
    let mut cells = |f: &dyn Fn(&Summary) -> String| {
        let mut c: Vec<String> = s.iter().map(f).collect();
        if std::mem::take(&mut missing) {
            c.push(ETCD_MISSING.to_string());
        }
        c
    };
    let runs = s.iter().map(|s| s.runs).max().unwrap_or(1);
    r.row(
        w,
        &format!(
            "wall{}",
            pooled(
                s,
                &format!(
                    " (median of {runs} runs; seed style: {})",
                    match s[1].runs {
                        1 => "1 run".to_string(),
                        n => format!("median of {n}"),
                    }
                )
            )
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
    let target = match (targets, s[2].cmds) {
        (Some(t), Some((sent, total))) => {
            let mut checks = vec![r.check(
                &format!("{}: ≤ {} commands sent per critical section", t.n, t.sent),
                sent <= t.sent,
                format!("≤ {} sent: {sent:.1}", t.sent),
            )];
            if let Some(max) = t.in_scripts {
                let inside = total - sent;
                checks.push(r.check(
                    &format!(
                        "{}: ≤ {max} commands inside scripts per critical section",
                        t.n
                    ),
                    inside <= max,
                    format!("≤ {max} inside scripts: {inside:.1}"),
                ));
            }
            checks.join("; ")
        }
        _ => String::new(),
    };
    // With a CPU row (workloads 1 and 3), the commands were counted in a run of their own.
    let how = if targets.is_some() {
        " (one more run per tool, every command in the slow log)".to_string()
    } else {
        pooled(s, " (runs pooled)")
    };
    r.row(
        w,
        &format!("Redis commands per CS: sent / incl. scripts{how}"),
        cells(&|s| cmds_cell(s.cmds)),
        target,
    );
    if let Some(t) = targets {
        // flock has no server ("–"); the target compares redlock's with the polling lock's.
        let target = match (s[2].cpu, s[1].cpu) {
            (Some(now), Some(seed)) => {
                let vs = ratio(now, seed);
                r.check(
                    &format!(
                        "{}: Redis server CPU per CS ≤ {}× seed style",
                        t.n, t.cpu_vs_seed
                    ),
                    vs <= t.cpu_vs_seed,
                    format!("≤ {}× seed style: {vs:.2}×", t.cpu_vs_seed),
                )
            }
            _ => String::new(),
        };
        r.row(
            w,
            &format!(
                "Redis server CPU per CS (INFO cpu, Lua included; slow log off{}){}",
                if etcd_column {
                    "; etcdctl: etcd's whole process, /proc"
                } else {
                    ""
                },
                pooled(s, " (runs pooled)")
            ),
            cells(&|s| s.cpu.map_or("–".to_string(), fmt_us)),
            target,
        );
    }
    let target = match targets.and_then(|t| Some((t.n, t.handover?))) {
        Some((n, max)) => r.check(
            &format!("{n}: client-side hand-over p50 ≤ {}", fmt_d(max)),
            s[2].handover <= max,
            format!("≤ {}: {}", fmt_d(max), fmt_d(s[2].handover)),
        ),
        None => String::new(),
    };
    r.row(
        w,
        &format!(
            "hand-over p50, client side: CS leave → next CS entry{}",
            pooled(s, " (runs pooled)")
        ),
        cells(&|s| fmt_d(s.handover)),
        target,
    );
}
