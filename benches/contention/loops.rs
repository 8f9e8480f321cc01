//! Loops: a run of contention, where threads of the bench each run rounds of one tool's lock
//! command on one key, all released at once ([`Spec`], [`Bench::run_loops`]), each loop holding
//! the lock alone, as one of N holders, or as a reader or the writer of a shared lock ([`Hold`]).
//! Owns what a run measures ([`LoopRun`]: wall, each round's wait, client-side hand-overs,
//! fairness, the most holders inside at once) and the check that the lock worked (critical
//! sections strictly alternate and the counter is exact; or never more than N inside and N
//! reached; or the writer alone and readers together). Above [`harness`](crate::harness), whose
//! [`Bench`] it extends.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::admin::{Cmds, Count};
use crate::events::Event;
use crate::guard::{check_failed, fail, start};
use crate::harness::Bench;
use crate::tools::{Mode, Tool, program};

/// TTL of the lock in the loops (redlock's default, the polling lock's PX, etcdctl's `--ttl`).
pub const LOOP_TTL_MS: u64 = 30_000;

/// How the loops of a run hold the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Every loop alone ([`Mode::Exclusive`]): one critical section at a time.
    Exclusive,
    /// Every loop one of up to N holders ([`Mode::Slots`]).
    Slots(u32),
    /// Loop 0 the writer ([`Mode::Exclusive`], running `writer_cs`), the others readers
    /// ([`Mode::Shared`], running the spec's `cs`).
    Shared { writer_cs: &'static str },
}

impl Hold {
    /// Loop `l`'s mode and critical section (`cs`: the spec's).
    pub fn of_loop(self, l: usize, cs: &'static str) -> (Mode, &'static str) {
        match self {
            Hold::Exclusive => (Mode::Exclusive, cs),
            Hold::Slots(n) => (Mode::Slots(n), cs),
            Hold::Shared { writer_cs } if l == 0 => (Mode::Exclusive, writer_cs),
            Hold::Shared { .. } => (Mode::Shared, cs),
        }
    }

    /// The mode most loops hold the lock in (a shared lock's readers'), for names.
    pub fn mode(self) -> Mode {
        self.of_loop(1, "").0
    }
}

/// One round of one loop: when its lock command was started and when it exited.
#[derive(Clone, Debug)]
pub struct Round {
    pub l: usize,
    pub r: usize,
    pub asked: Instant,
    pub done: Instant,
}

/// A run of loops: `loops` threads × `rounds` lock commands of `tool` on `key`, held as `hold`
/// says, each running the critical section `cs` (a shared lock's writer its own); `tag` names the
/// run in its events, logs and messages. `bin`, for [`Tool::Redlock`], runs another redlock binary
/// than the bench's (a baseline build).
pub struct Spec {
    pub bin: Option<PathBuf>,
    pub tag: String,
    pub tool: Tool,
    pub key: String,
    pub loops: usize,
    pub rounds: usize,
    pub cs: &'static str,
    pub hold: Hold,
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
    /// etcdctl's runs: the CPU time of the bench's etcd (its whole process) over the run.
    pub etcd_cpu: Option<Duration>,
    /// The most critical sections inside at once (a shared lock's: readers), from the events.
    pub peak: usize,
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
        let log = self.log(&format!(
            "{}.{}",
            spec.tag,
            program(spec.tool, spec.hold.mode())
        ));
        let handles = (0..spec.loops)
            .map(|l| {
                let (mut env, log, barrier) = (self.env.clone(), log.clone(), barrier.clone());
                if let Some(bin) = &spec.bin {
                    env.bin.clone_from(bin);
                }
                let (mode, cs) = spec.hold.of_loop(l, spec.cs);
                let (tag, key, tool, rounds) =
                    (spec.tag.clone(), spec.key.clone(), spec.tool, spec.rounds);
                thread::Builder::new()
                    .stack_size(256 << 10)
                    .spawn(move || {
                        barrier.wait();
                        let mut out = Vec::with_capacity(rounds);
                        for r in 0..rounds {
                            let what = format!("{tag} {} loop {l} round {r}", program(tool, mode));
                            let mut cmd =
                                env.lock_cmd(tool, mode, &key, LOOP_TTL_MS, &["sh", "-c", cs]);
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

    /// Runs `spec` and checks it: for [`Hold::Exclusive`], exact counter and strictly alternating
    /// entries and leaves; for the others, [`Bench::verify_holders`]. For a tool with a Redis
    /// server (not flock, not etcdctl), `count` says what the server's figures of the run are.
    pub fn run_loops(&mut self, spec: &Spec, count: Count) -> LoopRun {
        self.reset_counter();
        let mark = spec.tool.uses_redis().then(|| self.admin.begin(count));
        let etcd_before = (spec.tool == Tool::Etcd).then(|| self.etcd_cpu()).flatten();
        let running = self.start_loops(spec);
        let (start, rounds) = self.finish(running);
        let cmds = mark.map(|m| self.admin.end(&m));
        let etcd_cpu = etcd_before.and_then(|b| Some(self.etcd_cpu()?.saturating_sub(b)));
        let events = self.events.collect(&spec.tag);
        let expected = spec.loops * spec.rounds;
        let peak = if spec.hold == Hold::Exclusive {
            self.verify(&spec.tag, spec.tool, &events, expected);
            1
        } else {
            self.verify_holders(spec, &events)
        };
        LoopRun {
            start,
            rounds,
            events,
            cmds,
            etcd_cpu,
            peak,
        }
    }

    /// A run with several holders worked; returns the most inside at once (readers, for a shared
    /// lock). Every round entered and left once; with [`Hold::Slots`] N, never more than N inside
    /// and N reached; with [`Hold::Shared`], the writer (loop 0) entered only an empty lock and
    /// nobody entered while it was inside, at least two readers were inside together, and the
    /// counter (only the writer's section increments it) equals the writer's rounds.
    pub fn verify_holders(&self, spec: &Spec, events: &[Event]) -> usize {
        let label = format!("{} {}", spec.tag, program(spec.tool, spec.hold.mode()));
        let mut inside: BTreeSet<(usize, usize)> = BTreeSet::new();
        let mut entered: BTreeSet<(usize, usize)> = BTreeSet::new();
        let mut peak = 0;
        let shared = matches!(spec.hold, Hold::Shared { .. });
        let writer_inside = |inside: &BTreeSet<(usize, usize)>| inside.iter().any(|h| h.0 == 0);
        for e in events {
            let me = (e.l, e.r);
            match e.kind {
                'E' => {
                    assert!(
                        e.l < spec.loops && e.r < spec.rounds && entered.insert(me),
                        "{label}: loop {} round {} entered twice, or is not a round of the run",
                        e.l,
                        e.r
                    );
                    if shared {
                        assert!(
                            !writer_inside(&inside) && (e.l != 0 || inside.is_empty()),
                            "{label}: EXCLUSION VIOLATED: loop {} round {} entered while {} \
                             were inside (loop 0 is the writer)",
                            e.l,
                            e.r,
                            describe(&inside)
                        );
                    }
                    inside.insert(me);
                    if let Hold::Slots(n) = spec.hold {
                        assert!(
                            inside.len() <= n as usize,
                            "{label}: SEMAPHORE VIOLATED: {} inside at once, {n} allowed: {}",
                            inside.len(),
                            describe(&inside)
                        );
                    }
                    // A shared lock's peak counts readers only.
                    let holders = inside.iter().filter(|h| !shared || h.0 != 0).count();
                    peak = peak.max(holders);
                }
                'L' => assert!(
                    inside.remove(&me),
                    "{label}: loop {} round {} left a critical section it was not in",
                    e.l,
                    e.r
                ),
                _ => {}
            }
        }
        assert!(
            inside.is_empty(),
            "{label}: critical sections never ended: {}",
            describe(&inside)
        );
        let expected = spec.loops * spec.rounds;
        assert_eq!(
            entered.len(),
            expected,
            "{label}: {} critical sections ran, {expected} expected",
            entered.len()
        );
        match spec.hold {
            Hold::Slots(n) => assert_eq!(
                peak, n as usize,
                "{label}: never {n} inside at once (at most {peak}): the semaphore held places back"
            ),
            Hold::Shared { .. } => {
                assert!(
                    peak >= 2,
                    "{label}: readers never overlapped (at most {peak} inside at once)"
                );
                let counter = self.counter();
                assert_eq!(
                    counter, spec.rounds as u64,
                    "{label}: COUNTER IS WRONG: {counter} after the writer's {} rounds",
                    spec.rounds
                );
            }
            Hold::Exclusive => {}
        }
        peak
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

/// Holders as `loop/round`, for messages.
fn describe(inside: &BTreeSet<(usize, usize)>) -> String {
    let all: Vec<String> = inside.iter().map(|(l, r)| format!("{l}/{r}")).collect();
    format!("[{}]", all.join(", "))
}
