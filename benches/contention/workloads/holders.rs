//! Workloads 9 and 10: locks with more than one holder (`--slots N`, `--shared`), against the
//! local tools a script would use instead. Both run the loops of [`loops`](crate::loops) with a
//! [`Hold`] other than [`Hold::Exclusive`], so every run is checked by
//! [`Bench::verify_holders`] (never more than N inside and N reached; the writer alone, the readers
//! together), and both interleave the local tool's runs with redlock's ([`REPS`] each, the local
//! tool first in each pair, as workloads 1 and 2 do) and take the median run's wall. The polling
//! lock has neither mode ("–").
//!
//! - Workload 9, a counting semaphore: [`SEM_LOOPS`] loops × [`SEM_ROUNDS`] rounds of a 50 ms
//!   section under `redlock exec KEY --slots 4`, against GNU `sem --id KEY -j 4 --fg` (Debian's
//!   `parallel`; flock has no counting mode) and the ideal: the total work ÷ 4 slots.
//! - Workload 10, a shared lock: [`READERS`] reader loops (`redlock exec KEY --shared`, `flock -s`)
//!   of 100 ms sections and one writer loop (`redlock exec KEY`, `flock -x`) of 20 ms sections,
//!   [`SHARED_ROUNDS`] rounds each, on one lock. The readers alone would keep the lock busy
//!   almost all the time, so a writer that only gets in when no reader is inside (a
//!   reader-preferring lock) would wait for most of the run: its wait p99 shows it. A row splits
//!   the client-side hand-over by direction: the writer's leave line to the first reader's entry,
//!   a reader's leave line to the writer's entry (the lock empty in between).

use std::time::{Duration, Instant};

use super::contention::REPS;
use crate::admin::Count;
use crate::guard::watched;
use crate::harness::Bench;
use crate::loops::{Hold, LoopRun, Spec};
use crate::report::Report;
use crate::stats::{Summary, cmds_cell, fmt_d, log_run, log_walls, percentile, ratio, summarize};
use crate::tools::{CS_50MS, CS_100MS, CS_WRITE_20MS, Tool, program};

/// Workload 9: loops, rounds, slots, and the length of the section ([`CS_50MS`]).
pub const SEM_LOOPS: usize = 16;
pub const SEM_ROUNDS: usize = 10;
pub const SEM_SLOTS: u32 = 4;
const SEM_CS: Duration = Duration::from_millis(50);
/// Workload 10: reader loops (plus one writer loop, loop 0) and rounds of every loop.
pub const READERS: usize = 8;
pub const SHARED_ROUNDS: usize = 20;

/// Workload 9: a counting semaphore of 4 slots, 16 loops × 10 rounds of 50 ms.
pub fn semaphore(bench: &mut Bench, r: &mut Report) {
    let w = format!(
        "9. counting semaphore: {SEM_LOOPS} loops × {SEM_ROUNDS} rounds, 50 ms CS, {SEM_SLOTS} \
         slots"
    );
    let hold = Hold::Slots(SEM_SLOTS);
    let [local, redlock] = bench.run_pairs("w9", SEM_LOOPS, SEM_ROUNDS, CS_50MS, hold);
    let s = [summarize(&local, &[]), summarize(&redlock, &[])];
    let sections = (SEM_LOOPS * SEM_ROUNDS) as u32;
    let ideal = SEM_CS * sections / SEM_SLOTS;
    let (vs_ideal, vs_sem) = (ratio(s[1].wall, ideal), ratio(s[1].wall, s[0].wall));
    let target = format!(
        "{}; {}",
        r.check(
            "9: wall ≤ 1.2× the ideal",
            vs_ideal <= 1.2,
            format!("≤ 1.2× ideal: {vs_ideal:.2}×")
        ),
        r.check(
            "9: wall ≤ 0.5× sem",
            vs_sem <= 0.5,
            format!("≤ 0.5× sem: {vs_sem:.2}×")
        )
    );
    r.row(
        &w,
        &format!(
            "wall (median of {REPS} runs; flock column: GNU `sem -j {SEM_SLOTS} --fg`; ideal: \
             {sections} × 50 ms ÷ {SEM_SLOTS} = {})",
            fmt_d(ideal)
        ),
        cells(&s, |s| fmt_d(s.wall)),
        target,
    );
    r.row(
        &w,
        "hand-overs per second (median run)",
        cells(&s, |s| format!("{:.0}", s.rate)),
        String::new(),
    );
    r.row(
        &w,
        "wait p50 / p99 (runs pooled)",
        cells(&s, |s| format!("{} / {}", fmt_d(s.p50), fmt_d(s.p99))),
        String::new(),
    );
    r.row(
        &w,
        &format!("most in their CS at once, every run (checked: ≤ {SEM_SLOTS}, reached)"),
        [peaks(&local), "–".to_string(), peaks(&redlock)],
        String::new(),
    );
    r.row(
        &w,
        "Redis commands per CS: sent / incl. scripts (runs pooled)",
        cells(&s, |s| cmds_cell(s.cmds)),
        String::new(),
    );
}

/// Workload 10: a shared lock, 8 reader loops and one writer loop.
pub fn shared_lock(bench: &mut Bench, r: &mut Report) {
    let w = format!(
        "10. shared lock: {READERS} readers (100 ms CS) + 1 writer (20 ms CS) × {SHARED_ROUNDS} \
         rounds"
    );
    let hold = Hold::Shared {
        writer_cs: CS_WRITE_20MS,
    };
    let [local, redlock] = bench.run_pairs("w10", READERS + 1, SHARED_ROUNDS, CS_100MS, hold);
    let s = [summarize(&local, &[]), summarize(&redlock, &[])];
    // Loop 0 is the writer.
    let waits = |runs: &[LoopRun], writer: bool| -> Vec<Duration> {
        runs.iter()
            .flat_map(LoopRun::waits)
            .filter(|(l, _)| (*l == 0) == writer)
            .map(|(_, w)| w)
            .collect()
    };
    let writer = [waits(&local, true), waits(&redlock, true)];
    let readers = [waits(&local, false), waits(&redlock, false)];
    let p99 = |ws: &[Duration]| percentile(ws, 0.99);
    let vs_wall = ratio(s[1].wall, s[0].wall);
    let vs_writer = ratio(p99(&writer[1]), p99(&writer[0]));
    let target = r.check(
        "10: wall ≤ 1.5× flock",
        vs_wall <= 1.5,
        format!("≤ 1.5× flock: {vs_wall:.2}×"),
    );
    r.row(
        &w,
        &format!(
            "wall (median of {REPS} runs; flock column: `flock -s` readers, `flock -x` writer)"
        ),
        cells(&s, |s| fmt_d(s.wall)),
        target,
    );
    let target = r.check(
        "10: writer's wait p99 ≤ 1.5× flock",
        vs_writer <= 1.5,
        format!("p99 ≤ 1.5× flock: {vs_writer:.2}×"),
    );
    let p50_p99 = |ws: &[Duration]| format!("{} / {}", fmt_d(percentile(ws, 0.5)), fmt_d(p99(ws)));
    r.row(
        &w,
        "writer's wait p50 / p99 (runs pooled)",
        [p50_p99(&writer[0]), "–".to_string(), p50_p99(&writer[1])],
        target,
    );
    r.row(
        &w,
        "readers' wait p50 / p99 (runs pooled)",
        [p50_p99(&readers[0]), "–".to_string(), p50_p99(&readers[1])],
        String::new(),
    );
    let handovers = [shared_handovers(&local), shared_handovers(&redlock)];
    let p50s = |h: &(Vec<Duration>, Vec<Duration>)| {
        format!(
            "{} / {}",
            fmt_d(percentile(&h.0, 0.5)),
            fmt_d(percentile(&h.1, 0.5))
        )
    };
    r.row(
        &w,
        "hand-over p50, client side: writer leaves → first reader in / last reader leaves → \
         writer in (runs pooled)",
        [p50s(&handovers[0]), "–".to_string(), p50s(&handovers[1])],
        String::new(),
    );
    r.row(
        &w,
        "most readers in their CS at once, per run (checked: ≥ 2; the writer always alone)",
        [peaks(&local), "–".to_string(), peaks(&redlock)],
        String::new(),
    );
    r.row(
        &w,
        "Redis commands per CS: sent / incl. scripts (runs pooled)",
        cells(&s, |s| cmds_cell(s.cmds)),
        String::new(),
    );
    for (tool, ws) in [("flock", &writer[0]), ("redlock", &writer[1])] {
        eprintln!(
            "contention: w10: {tool}'s writer, runs pooled: wait p50 {} p90 {} max {}",
            fmt_d(percentile(ws, 0.5)),
            fmt_d(percentile(ws, 0.9)),
            fmt_d(percentile(ws, 1.0))
        );
    }
}

/// A shared lock's hand-overs, client side, from the runs' entry and leave lines (loop 0 is the
/// writer): from each writer's leave line to the next reader's entry, and from a reader's leave
/// line to the writer's entry that follows it (the lock empty in between).
fn shared_handovers(runs: &[LoopRun]) -> (Vec<Duration>, Vec<Duration>) {
    let (mut to_readers, mut to_writer) = (Vec::new(), Vec::new());
    for run in runs {
        // The last leave line, and whether the writer wrote it.
        let mut left: Option<(Instant, bool)> = None;
        for e in &run.events {
            let writer = e.l == 0;
            match (e.kind, left) {
                ('L', _) => left = Some((e.at, writer)),
                ('E', Some((t, was_writer))) => {
                    if was_writer && !writer {
                        to_readers.push(e.at - t);
                    } else if !was_writer && writer {
                        to_writer.push(e.at - t);
                    }
                    left = None;
                }
                _ => {}
            }
        }
    }
    (to_readers, to_writer)
}

/// A row's cells from the local tool's summary and redlock's (the polling lock: "–").
fn cells(s: &[Summary; 2], f: impl Fn(&Summary) -> String) -> [String; 3] {
    [f(&s[0]), "–".to_string(), f(&s[1])]
}

/// The most inside at once of each run ([`LoopRun::peak`]): one figure if every run had the
/// same, else the smallest and the largest.
fn peaks(runs: &[LoopRun]) -> String {
    let lo = runs.iter().map(|r| r.peak).min().unwrap_or(0);
    let hi = runs.iter().map(|r| r.peak).max().unwrap_or(0);
    if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}–{hi}")
    }
}

impl Bench {
    /// [`REPS`] runs of flock's column (`sem` or `flock`) and of redlock, in pairs (the local
    /// tool first), of `loops` × `rounds` holding the lock `key` = `tag` as `hold` says; each
    /// run checked and logged on stderr, then the walls of all. Returns the local tool's runs
    /// and redlock's.
    fn run_pairs(
        &mut self,
        tag: &str,
        loops: usize,
        rounds: usize,
        cs: &'static str,
        hold: Hold,
    ) -> [Vec<LoopRun>; 2] {
        let mut runs: [Vec<LoopRun>; 2] = Default::default();
        for rep in 0..REPS {
            for (i, tool) in [Tool::Flock, Tool::Redlock].into_iter().enumerate() {
                let spec = Spec {
                    bin: None,
                    tag: format!("{tag}-{}-r{}", program(tool, hold.mode()), rep + 1),
                    tool,
                    key: tag.to_string(),
                    loops,
                    rounds,
                    cs,
                    hold,
                };
                let run = watched(&spec.tag, || self.run_loops(&spec, Count::Commands));
                log_run(&spec.tag, &run);
                runs[i].push(run);
            }
        }
        let local = program(Tool::Flock, hold.mode());
        log_walls(
            tag,
            (local, &summarize(&runs[0], &[])),
            &summarize(&runs[1], &[]),
        );
        runs
    }
}
