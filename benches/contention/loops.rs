//! Loops: a run of contention, where threads of the bench each run rounds of one tool's lock
//! command on one key, all released at once ([`Spec`], [`Bench::run_loops`]). Owns what a run
//! measures ([`LoopRun`]: wall, each round's wait, client-side hand-overs, fairness) and the check
//! that the lock worked (critical sections strictly alternate, the counter is exact). Above
//! [`harness`](crate::harness), whose [`Bench`] it extends.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::admin::{Cmds, Count};
use crate::events::Event;
use crate::guard::{check_failed, fail, start};
use crate::harness::Bench;
use crate::tools::Tool;

/// TTL of the lock in the loops (redlock's default, and the polling lock's PX).
pub const LOOP_TTL_MS: u64 = 30_000;

/// One round of one loop: when its lock command was started and when it exited.
#[derive(Clone, Debug)]
pub struct Round {
    pub l: usize,
    pub r: usize,
    pub asked: Instant,
    pub done: Instant,
}

/// A run of loops: `loops` threads × `rounds` lock commands of `tool` on `key`, each running the
/// critical section `cs`; `tag` names the run in its events, logs and messages. `bin`, for
/// [`Tool::Redlock`], runs another redlock binary than the bench's (a baseline build).
pub struct Spec {
    pub bin: Option<PathBuf>,
    pub tag: String,
    pub tool: Tool,
    pub key: String,
    pub loops: usize,
    pub rounds: usize,
    pub cs: &'static str,
}

/// Loops released and running; [`Bench::finish`] joins them.
pub struct Running {
    handles: Vec<JoinHandle<Result<Vec<Round>, String>>>,
    start: Instant,
}

/// One finished run of loops.
pub struct LoopRun {
    pub start: Instant,
    pub rounds: Vec<Round>,
    pub events: Vec<Event>,
    pub cmds: Option<Cmds>,
}

impl LoopRun {
    fn end(&self) -> Instant {
        self.rounds
            .iter()
            .map(|r| r.done)
            .max()
            .unwrap_or(self.start)
    }

    /// From releasing all loops at once to the exit of the last round.
    pub fn wall(&self) -> Duration {
        self.end() - self.start
    }

    fn entries(&self) -> Vec<&Event> {
        self.events.iter().filter(|e| e.kind == 'E').collect()
    }

    /// Each round's wait: from starting the lock command to entering the critical section.
    pub fn waits(&self) -> Vec<(usize, Duration)> {
        let entered: BTreeMap<(usize, usize), Instant> =
            self.entries().iter().map(|e| ((e.l, e.r), e.at)).collect();
        self.rounds
            .iter()
            .map(|round| {
                let at = entered
                    .get(&(round.l, round.r))
                    .unwrap_or_else(|| panic!("loop {} round {} never entered", round.l, round.r));
                (round.l, at.saturating_duration_since(round.asked))
            })
            .collect()
    }

    /// From each leave line to the next entry line.
    pub fn client_handovers(&self) -> Vec<Duration> {
        let mut out = Vec::new();
        let mut left = None;
        for e in &self.events {
            match e.kind {
                'L' => left = Some(e.at),
                'E' => {
                    if let Some(l) = left.take() {
                        out.push(e.at - l);
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// The largest per-loop mean wait over the mean wait.
    pub fn fairness(&self) -> f64 {
        let waits = self.waits();
        let mean = |ws: &[Duration]| ws.iter().sum::<Duration>().as_secs_f64() / ws.len() as f64;
        let all: Vec<Duration> = waits.iter().map(|w| w.1).collect();
        let mut per_loop: BTreeMap<usize, Vec<Duration>> = BTreeMap::new();
        for (l, w) in waits {
            per_loop.entry(l).or_default().push(w);
        }
        let worst = per_loop.values().map(|ws| mean(ws)).fold(0.0_f64, f64::max);
        worst / mean(&all)
    }
}
impl Bench {
    /// Starts `spec.loops` threads, released at once, each running `spec.rounds` lock commands.
    pub fn start_loops(&self, spec: &Spec) -> Running {
        let barrier = Arc::new(Barrier::new(spec.loops + 1));
        let log = self.log(&format!("{}.{}", spec.tag, spec.tool.name()));
        let handles = (0..spec.loops)
            .map(|l| {
                let (mut env, log, barrier) = (self.env.clone(), log.clone(), barrier.clone());
                if let Some(bin) = &spec.bin {
                    env.bin.clone_from(bin);
                }
                let (tag, key, tool, rounds, cs) = (
                    spec.tag.clone(),
                    spec.key.clone(),
                    spec.tool,
                    spec.rounds,
                    spec.cs,
                );
                thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn(move || {
                        barrier.wait();
                        let mut out = Vec::with_capacity(rounds);
                        for r in 0..rounds {
                            let what = format!("{tag} {} loop {l} round {r}", tool.name());
                            let mut cmd =
                                env.under_lock(tool, &key, LOOP_TTL_MS, &["sh", "-c", cs]);
                            cmd.env("BT", &tag)
                                .env("BL", l.to_string())
                                .env("BR", r.to_string())
                                .stderr(log.stdio());
                            let asked = Instant::now();
                            let proc = start(&mut cmd, &what).map_err(fail)?;
                            let (status, done) = proc.wait().map_err(fail)?;
                            if !status.success() {
                                return Err(fail(log.failed(&what, status)));
                            }
                            out.push(Round { l, r, asked, done });
                        }
                        Ok(out)
                    })
                    .expect("cannot start a loop thread")
            })
            .collect();
        barrier.wait();
        Running {
            handles,
            start: Instant::now(),
        }
    }

    /// Joins the loops; panics with the run's first failure, if any.
    pub fn finish(&self, running: Running) -> (Instant, Vec<Round>) {
        let mut rounds = Vec::new();
        for h in running.handles {
            match h.join() {
                Ok(Ok(r)) => rounds.extend(r),
                Ok(Err(e)) => {
                    fail(e);
                }
                Err(_) => {
                    fail("a loop thread panicked".to_string());
                }
            }
        }
        check_failed();
        (running.start, rounds)
    }

    /// Runs `spec` and checks it: exact counter, strictly alternating entries and leaves. For a
    /// tool with a Redis server, `count` says what the server's figures of the run are.
    pub fn run_loops(&mut self, spec: &Spec, count: Count) -> LoopRun {
        self.reset_counter();
        let mark = (spec.tool != Tool::Flock).then(|| self.admin.begin(count));
        let running = self.start_loops(spec);
        let (start, rounds) = self.finish(running);
        let cmds = mark.map(|m| self.admin.end(&m));
        let events = self.events.collect(&spec.tag);
        let run = LoopRun {
            start,
            rounds,
            events,
            cmds,
        };
        self.verify(&spec.tag, spec.tool, &run.events, spec.loops * spec.rounds);
        run
    }

    /// The lock worked: every critical section ran alone and the counter is exact.
    pub fn verify(&self, tag: &str, tool: Tool, events: &[Event], expected: usize) {
        let label = format!("{tag} {}", tool.name());
        let mut inside: Option<(usize, usize)> = None;
        let mut entries = 0;
        for e in events {
            match e.kind {
                'E' => {
                    if let Some((l, r)) = inside {
                        panic!(
                            "{label}: MUTUAL EXCLUSION VIOLATED: loop {} round {} entered the \
                             critical section while loop {l} round {r} was inside",
                            e.l, e.r
                        );
                    }
                    inside = Some((e.l, e.r));
                    entries += 1;
                }
                'L' => {
                    if inside != Some((e.l, e.r)) {
                        panic!(
                            "{label}: loop {} round {} left a critical section it was not in \
                             (inside: {inside:?})",
                            e.l, e.r
                        );
                    }
                    inside = None;
                }
                _ => {}
            }
        }
        assert!(
            inside.is_none(),
            "{label}: a critical section never ended: {inside:?}"
        );
        assert_eq!(
            entries, expected,
            "{label}: {entries} critical sections ran, {expected} expected"
        );
        let counter = self.counter();
        assert_eq!(
            counter, expected as u64,
            "{label}: COUNTER IS WRONG: {counter} after {expected} increments under the lock (a \
             lost update: two critical sections overlapped)"
        );
    }
}
