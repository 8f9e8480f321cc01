//! The fault campaign's machinery: worker loops of `redlock exec` whose critical sections leave a
//! trace, a fenced store, a seeded nemesis, and a checker that reads the trace afterwards.
//!
//! The trace: every process appends one-line events to `$D/ev` (a single `write` with O_APPEND
//! each, so lines never interleave), stamped by [`Clock`]: CLOCK_MONOTONIC in nanoseconds, from a
//! tiny C helper (`mono`) compiled once per test process, and read in-process with the same
//! clock, so the nemesis's faults and the sections' starts and ends are on one time line.
//!
//! - worker: `want W T` (about to run exec), `pid W P` (exec's pid), `done W P RC T` (exec over)
//! - section: `in W SH EXEC FENCE T` (entered; SH is its shell, EXEC the redlock that runs it),
//!   `out W SH T REPLY` (left; REPLY is the fenced store's answer), `term W SH T` (stopped by
//!   SIGTERM: exec lost the lock, or redlock died and the parent-death signal came)
//!
//! The fenced store is a `redis-server` of its own, never faulted: one Lua script accepts a write
//! only when its fence is at least the highest accepted so far, and logs every attempt, in the
//! store's order, with its verdict.

#![allow(dead_code)] // each test uses its own subset

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::RedisServer;

/// Where section and worker times come from: one clock for every process of the test.
pub struct Clock {
    /// A program that prints the clock's reading in nanoseconds.
    pub program: PathBuf,
    /// Whether it is CLOCK_MONOTONIC (else `date +%s%N`, CLOCK_REALTIME, when no C compiler).
    monotonic: bool,
}

const MONO_C: &str = r#"#include <stdio.h>
#include <time.h>
int main(void) {
  struct timespec t;
  if (clock_gettime(CLOCK_MONOTONIC, &t) != 0) return 1;
  printf("%lld\n", (long long)t.tv_sec * 1000000000LL + t.tv_nsec);
  return 0;
}
"#;

impl Clock {
    /// The clock of this test process (the helper is compiled on first use).
    pub fn get() -> &'static Clock {
        static CLOCK: OnceLock<Clock> = OnceLock::new();
        CLOCK.get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("redlock-chaos-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let src = dir.join("mono.c");
            let program = dir.join("mono");
            std::fs::write(&src, MONO_C).unwrap();
            let built = Command::new("cc")
                .arg("-O")
                .arg("-o")
                .arg(&program)
                .arg(&src)
                .status()
                .is_ok_and(|s| s.success());
            if built {
                return Clock {
                    program,
                    monotonic: true,
                };
            }
            eprintln!("note: no C compiler: the campaign's clock is `date +%s%N` (CLOCK_REALTIME)");
            let script = dir.join("mono.sh");
            std::fs::write(&script, "#!/bin/sh\nexec date +%s%N\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
            Clock {
                program: script,
                monotonic: false,
            }
        })
    }

    /// The reading now, in nanoseconds.
    pub fn now(&self) -> i64 {
        let id = if self.monotonic {
            libc::CLOCK_MONOTONIC
        } else {
            libc::CLOCK_REALTIME
        };
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into the timespec we own.
        unsafe { libc::clock_gettime(id, &mut t) };
        t.tv_sec * 1_000_000_000 + t.tv_nsec
    }
}

/// splitmix64: small, seedable, the same sequence on every platform.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next() % (hi - lo)
        }
    }

    /// A duration uniform in `lo..hi`.
    pub fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        Duration::from_micros(self.range(lo.as_micros() as u64, hi.as_micros() as u64))
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.range(0, 100) < percent
    }
}

/// `REDLOCK_CHAOS_SEED` (a number, or `random`), else `default`, else a fresh one from the clock.
pub fn seed(default: Option<u64>) -> u64 {
    let var = std::env::var("REDLOCK_CHAOS_SEED").ok();
    match var.as_deref().map(str::trim) {
        Some("random") => fresh_seed(),
        Some(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("REDLOCK_CHAOS_SEED={s:?} is not a number")),
        None => default.unwrap_or_else(fresh_seed),
    }
}

fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    (t.as_nanos() as u64 ^ u64::from(std::process::id())) % 1_000_000_000
}

/// A number from the environment, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={s:?} is not a number")),
        Err(_) => default,
    }
}

/// The fenced store's script: accept a write iff its fence is ≥ the highest accepted so far,
/// atomically; log every attempt as "WRITER FENCE 1|0" in the store's order. Fences are compared
/// as Lua numbers (exact below 2^53: microsecond timestamps fit) and stored as the strings given.
pub const STORE_LUA: &str = "local f = tonumber(ARGV[1]) \
local top = redis.call('GET', KEYS[1]) \
local ok = 0 \
if f and (not top or f >= tonumber(top)) then redis.call('SET', KEYS[1], ARGV[1]) ok = 1 end \
redis.call('RPUSH', KEYS[2], ARGV[2] .. ' ' .. ARGV[1] .. ' ' .. ok) \
return ok";

/// The critical section, run by `sh -c` (under `redlock exec`, or directly without locking):
/// record the entry, hold for `$HOLD` seconds, write `$REDLOCK_FENCE` to the fenced store, record
/// the exit. SIGTERM (exec lost the lock, or redlock died) records where it was cut off; the
/// hold runs in the background so that the trap runs at once.
pub const SECTION: &str = r#"trap 'echo "term $W $$ $($MONO)" >> "$D/ev"; exit 143' TERM
echo "in $W $$ $PPID ${REDLOCK_FENCE:-0} $($MONO)" >> "$D/ev"
sleep "$HOLD" & wait $!
r=$(redis-cli -p "$SP" EVAL "$STORE" 2 top log "${REDLOCK_FENCE:-0}" "$W.$$" 2>&1 | tr -s ' \n' '__')
echo "out $W $$ $($MONO) $r" >> "$D/ev""#;

/// One worker: `exec` after `exec` on lock `$NAME` until `$D/stop` exists (at most `$MAX`
/// rounds). With `$NOLOCK` set, the section runs without redlock and its "fence" is the round.
/// With `$VERBOSE` set, redlock runs with `-v` (its stderr goes to `$D/err.$W`).
pub const WORKER: &str = r#"i=0
while [ ! -e "$D/stop" ] && [ "$i" -lt "$MAX" ]; do
  i=$((i + 1))
  echo "want $W $($MONO)" >> "$D/ev"
  if [ -n "$NOLOCK" ]; then
    REDLOCK_FENCE=$i sh -c "$SECTION" &
  else
    redlock exec "$NAME" --ttl "$TTL" --wait "$WAIT" ${VERBOSE:+-v} -c "$SECTION" 2>> "$D/err.$W" &
  fi
  p=$!
  echo "pid $W $p" >> "$D/ev"
  wait "$p"
  rc=$?
  echo "done $W $p $rc $($MONO)" >> "$D/ev"
done"#;

/// A worker's run of `exec` (or of the bare section without locking).
#[derive(Clone, Debug, Default)]
pub struct Exec {
    pub worker: u32,
    pub pid: u32,
    pub want: i64,
    /// Exit status and when, once over.
    pub done: Option<(i32, i64)>,
}

/// How a section ended.
#[derive(Clone, Debug, PartialEq)]
pub enum End {
    /// It ran to the end; the store said `accepted` to its write.
    Out { at: i64, accepted: Option<bool> },
    /// SIGTERM cut it off.
    Term { at: i64 },
}

#[derive(Clone, Debug)]
pub struct Section {
    pub worker: u32,
    pub sh: u32,
    /// The pid that started the section's shell: the redlock `exec` (or the worker's shell).
    pub parent: u32,
    pub fence: i64,
    pub start: i64,
    pub end: Option<End>,
}

impl Section {
    pub fn end_at(&self) -> Option<i64> {
        match self.end {
            Some(End::Out { at, .. }) | Some(End::Term { at }) => Some(at),
            None => None,
        }
    }
}

/// Everything the processes of a run wrote to `$D/ev`.
#[derive(Default, Debug)]
pub struct Trace {
    pub execs: Vec<Exec>,
    pub sections: Vec<Section>,
    /// Lines that did not parse (a torn write would show here).
    pub garbage: Vec<String>,
}

impl Trace {
    pub fn read(dir: &Path) -> Trace {
        let text = std::fs::read_to_string(dir.join("ev")).unwrap_or_default();
        Trace::parse(&text)
    }

    pub fn parse(text: &str) -> Trace {
        let mut t = Trace::default();
        let mut wants: HashMap<u32, i64> = HashMap::new();
        for line in text.lines() {
            if t.line(line, &mut wants).is_none() {
                t.garbage.push(line.to_string());
            }
        }
        t
    }

    fn line(&mut self, line: &str, wants: &mut HashMap<u32, i64>) -> Option<()> {
        let f: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| f.get(i).and_then(|s| s.parse::<i64>().ok());
        let id = |i: usize| f.get(i).and_then(|s| s.parse::<u32>().ok());
        match *f.first()? {
            "want" => {
                wants.insert(id(1)?, num(2)?);
            }
            "pid" => {
                let worker = id(1)?;
                self.execs.push(Exec {
                    worker,
                    pid: id(2)?,
                    want: wants.get(&worker).copied()?,
                    done: None,
                });
            }
            "done" => {
                let pid = id(2)?;
                let e = self.execs.iter_mut().rev().find(|e| e.pid == pid)?;
                e.done = Some((num(3)? as i32, num(4)?));
            }
            "in" => self.sections.push(Section {
                worker: id(1)?,
                sh: id(2)?,
                parent: id(3)?,
                fence: num(4)?,
                start: num(5)?,
                end: None,
            }),
            "out" | "term" => {
                let sh = id(2)?;
                let at = num(3)?;
                let end = if f[0] == "term" {
                    End::Term { at }
                } else {
                    let accepted = match f.get(4).copied() {
                        Some("1_") | Some("1") => Some(true),
                        Some("0_") | Some("0") => Some(false),
                        _ => None,
                    };
                    End::Out { at, accepted }
                };
                let s = self.sections.iter_mut().rev().find(|s| s.sh == sh)?;
                s.end.get_or_insert(end);
            }
            _ => return None,
        }
        Some(())
    }

    /// The exec that ran section `s` (redlock is its shell's parent; without locking, the
    /// worker started the shell itself).
    pub fn exec_of(&self, s: &Section) -> Option<&Exec> {
        self.execs
            .iter()
            .rev()
            .find(|e| e.pid == s.parent || e.pid == s.sh)
    }

    /// The section running now, if any: the last entered that has not ended (its redlock's pid
    /// and its shell's pid).
    pub fn holder(&self) -> Option<&Section> {
        self.sections.iter().rev().find(|s| s.end.is_none())
    }

    /// The execs still running.
    pub fn running(&self) -> Vec<&Exec> {
        self.execs.iter().filter(|e| e.done.is_none()).collect()
    }
}

/// Sends `sig` to `pid`; false if it is gone.
pub fn kill(pid: u32, sig: i32) -> bool {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as libc::pid_t, sig) == 0 }
}

/// The fenced store: a `redis-server` nobody faults.
pub struct Store {
    pub server: RedisServer,
}

/// One attempt to write to the store, in the store's order.
#[derive(Debug, Clone)]
pub struct Write {
    pub writer: String,
    pub fence: i64,
    pub accepted: bool,
}

impl Store {
    pub fn start() -> Option<Store> {
        Some(Store {
            server: RedisServer::start()?,
        })
    }

    pub fn writes(&self) -> Vec<Write> {
        let log: Vec<String> = self.server.query(&["LRANGE", "log", "0", "-1"]);
        log.iter()
            .filter_map(|l| {
                let mut f = l.split(' ');
                Some(Write {
                    writer: f.next()?.to_string(),
                    fence: f.next()?.parse().ok()?,
                    accepted: f.next()? == "1",
                })
            })
            .collect()
    }
}

/// Short human form of a clock reading relative to `origin`: seconds with milliseconds.
pub fn at(t: i64, origin: i64) -> String {
    let ms = (t - origin) / 1_000_000;
    let mut s = String::new();
    let _ = write!(s, "{}.{:03}s", ms / 1000, ms % 1000);
    s
}

/// What the nemesis did.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// SIGSTOP of an `exec` (a holder's or a waiter's), and of its section's shell too when
    /// `section` is set (the whole client frozen, as by a long GC pause); SIGCONT at the end.
    StopClient {
        exec: u32,
        section: Option<u32>,
        holder: bool,
    },
    /// SIGKILL of an `exec` (its section gets SIGTERM from the parent-death signal).
    KillClient { exec: u32, holder: bool },
    /// SIGSTOP of server `node`; SIGCONT at the end.
    PauseServer { node: usize },
    /// SIGKILL and restart of server `node`; `kept` if it came back with its data (an fsynced
    /// append-only file), not if it had none or its file was deleted.
    RestartServer { node: usize, kept: bool },
}

/// A fault and when it was in force.
#[derive(Clone, Debug)]
pub struct Happened {
    pub fault: Fault,
    pub start: i64,
    pub end: i64,
}

impl Happened {
    fn during(&self, lo: i64, hi: i64) -> bool {
        self.start < hi && self.end >= lo
    }
}

/// Why two sections overlapped or their fences went backwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// One of them ran under an `exec` that the nemesis froze: it outlived its lock.
    PausedClient,
    /// A server without persistence restarted (or lost its file) in between: it forgot the lock.
    ForgetfulRestart,
    /// A server fault cost the earlier holder its lock; exec reported it (75) and cut the
    /// section off, which takes a moment.
    LostToServerFault,
}

/// The checker's findings for one run.
#[derive(Default, Debug)]
pub struct Report {
    pub sections: usize,
    pub execs: usize,
    pub faults: Vec<String>,
    /// Overlapping sections and fence inversions, explained.
    pub explained: Vec<(Cause, String)>,
    pub accepted: usize,
    pub rejected: usize,
    pub exit_codes: std::collections::BTreeMap<i32, usize>,
    /// Everything that the design does not allow.
    pub violations: Vec<String>,
    /// Worth knowing but allowed.
    pub notes: Vec<String>,
    /// Where the trace of a failed run was kept.
    pub kept: Option<PathBuf>,
}

impl Report {
    pub fn summary(&self, title: &str) -> String {
        self.summary_showing(title, 20)
    }

    /// The summary with at most `shown` violations spelled out.
    pub fn summary_showing(&self, title: &str, shown: usize) -> String {
        let mut by_cause: std::collections::BTreeMap<Cause, usize> = Default::default();
        for (c, _) in &self.explained {
            *by_cause.entry(*c).or_default() += 1;
        }
        let mut s = format!(
            "{title}: {} sections in {} execs; faults: {}; explained overlaps/inversions: {:?}; \
             store: {} writes accepted, {} stale rejected; exit codes: {:?}; violations: {}",
            self.sections,
            self.execs,
            self.faults.join(", "),
            by_cause,
            self.accepted,
            self.rejected,
            self.exit_codes,
            self.violations.len()
        );
        for v in self.violations.iter().take(shown) {
            s.push_str("\n  VIOLATION ");
            s.push_str(v);
        }
        if self.violations.len() > shown {
            let _ = write!(s, "\n  ... and {} more", self.violations.len() - shown);
        }
        for n in &self.notes {
            s.push_str("\n  note: ");
            s.push_str(n);
        }
        s
    }
}

/// The fault counts by kind, for the report.
pub fn fault_counts(faults: &[Happened]) -> Vec<String> {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for h in faults {
        let kind = match h.fault {
            Fault::StopClient {
                holder: true,
                section: Some(_),
                ..
            } => "holder+section stopped",
            Fault::StopClient { holder: true, .. } => "holder stopped",
            Fault::StopClient { .. } => "waiter stopped",
            Fault::KillClient { holder: true, .. } => "holder killed",
            Fault::KillClient { .. } => "waiter killed",
            Fault::PauseServer { .. } => "server paused",
            Fault::RestartServer { kept: true, .. } => "server restarted (AOF)",
            Fault::RestartServer { .. } => "server restarted empty",
        };
        *counts.entry(kind).or_default() += 1;
    }
    counts.iter().map(|(k, n)| format!("{n} {k}")).collect()
}

/// Checks a run: `trace` of the processes, `writes` of the store, the `faults` the nemesis made;
/// times in the report are relative to `origin`.
pub fn check(trace: &Trace, writes: &[Write], faults: &[Happened], origin: i64) -> Report {
    let mut r = Report {
        sections: trace.sections.len(),
        execs: trace.execs.len(),
        faults: fault_counts(faults),
        ..Report::default()
    };
    let end_of = |s: &Section| {
        s.end_at()
            .or_else(|| trace.exec_of(s).and_then(|e| e.done.map(|(_, t)| t)))
            .unwrap_or(i64::MAX)
    };
    let describe = |s: &Section| {
        let rc = trace
            .exec_of(s)
            .and_then(|e| e.done)
            .map_or("running".to_string(), |(rc, _)| format!("exit {rc}"));
        format!(
            "w{} fence {} [{} .. {}] (exec {}, {rc})",
            s.worker,
            s.fence,
            at(s.start, origin),
            match end_of(s) {
                i64::MAX => "open".to_string(),
                t => at(t, origin),
            },
            s.parent
        )
    };
    // Why `a` and `b` (a started first) may break exclusion or fence order, up to time `hi`.
    let explain = |a: &Section, b: &Section, hi: i64| -> Result<Cause, String> {
        let (ea, eb) = (trace.exec_of(a), trace.exec_of(b));
        let lo = [ea, eb]
            .iter()
            .flatten()
            .map(|e| e.want)
            .min()
            .unwrap_or(a.start);
        // A server that forgot the lock comes first: a client frozen at some other moment of
        // the same exec is then beside the point.
        let forgot = faults.iter().any(|h| {
            matches!(h.fault, Fault::RestartServer { kept: false, .. }) && h.during(lo, hi)
        });
        if forgot {
            return Ok(Cause::ForgetfulRestart);
        }
        let paused: Vec<&Exec> = [ea, eb]
            .into_iter()
            .flatten()
            .filter(|e| {
                faults.iter().any(|h| {
                    matches!(h.fault, Fault::StopClient { exec, .. } if exec == e.pid)
                        && h.start < hi
                })
            })
            .collect();
        let rc75 = |e: &&Exec| matches!(e.done, Some((75, _)) | Some((137, _)));
        // The stale one must not report success: a frozen exec exits 75 (or was killed later).
        if paused.iter().any(rc75) {
            return Ok(Cause::PausedClient);
        }
        let server_fault = faults.iter().any(|h| {
            matches!(
                h.fault,
                Fault::PauseServer { .. } | Fault::RestartServer { .. }
            ) && h.during(lo, hi)
        });
        let lost = [ea, eb]
            .iter()
            .flatten()
            .any(|e| matches!(e.done, Some((75, _))));
        if server_fault && lost {
            return Ok(Cause::LostToServerFault);
        }
        if !paused.is_empty() {
            return Err(format!(
                "a frozen client outlived its lock, but its exec did not exit 75: {:?}",
                paused
                    .iter()
                    .map(|e| (e.pid, e.done.map(|d| d.0)))
                    .collect::<Vec<_>>()
            ));
        }
        Err("no fault explains it".to_string())
    };

    let mut sections: Vec<&Section> = trace.sections.iter().collect();
    sections.sort_by_key(|s| s.start);
    // Mutual exclusion: every pair of sections whose intervals intersect.
    for (i, a) in sections.iter().enumerate() {
        for b in &sections[i + 1..] {
            let a_end = end_of(a);
            if b.start >= a_end {
                continue;
            }
            let what = format!("overlap: {} and {}", describe(a), describe(b));
            match explain(a, b, a_end.min(end_of(b))) {
                Ok(cause) => r.explained.push((cause, what)),
                Err(why) => r.violations.push(format!("{what}: {why}")),
            }
        }
    }
    // Fences increase in the order the sections started.
    for pair in sections.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if b.fence > a.fence {
            continue;
        }
        let what = format!(
            "fence {} after {}: {} then {}",
            b.fence,
            a.fence,
            describe(a),
            describe(b)
        );
        match explain(a, b, b.start) {
            Ok(cause) => r.explained.push((cause, what)),
            Err(why) => r.violations.push(format!("{what}: {why}")),
        }
    }
    // The store accepts a write iff its fence is at least the highest accepted before it.
    let mut top: Option<i64> = None;
    for w in writes {
        let fresh = top.is_none_or(|t| w.fence >= t);
        if w.accepted != fresh {
            r.violations.push(format!(
                "the store {} write {} with fence {} (highest so far {top:?})",
                if w.accepted { "accepted" } else { "rejected" },
                w.writer,
                w.fence
            ));
        }
        if w.accepted {
            top = Some(top.map_or(w.fence, |t| t.max(w.fence)));
            r.accepted += 1;
        } else {
            r.rejected += 1;
        }
    }
    for e in &trace.execs {
        if let Some((rc, _)) = e.done {
            *r.exit_codes.entry(rc).or_default() += 1;
        }
    }
    let open = sections.iter().filter(|s| s.end.is_none()).count();
    if open > 0 {
        r.notes.push(format!("{open} sections left no end record"));
    }
    if !trace.garbage.is_empty() {
        r.violations
            .push(format!("torn trace lines: {:?}", trace.garbage));
    }
    r
}

/// Copies a run's trace and the workers' stderr to a directory that outlives the test, for a
/// failure message; returns where.
pub fn keep(dir: &Path) -> PathBuf {
    let kept = std::env::temp_dir().join(format!(
        "redlock-chaos-kept-{}-{}",
        std::process::id(),
        Clock::get().now()
    ));
    let _ = std::fs::create_dir_all(&kept);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name == "ev" || name.starts_with("err.") {
                let _ = std::fs::copy(e.path(), kept.join(&name));
            }
        }
    }
    kept
}
