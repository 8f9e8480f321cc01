//! Workload 4, idle: [`IDLE_WAITERS`] waiters queue behind a lock the bench holds for
//! [`IDLE_HOLD`]. Measures the Redis commands the waiters send while they wait (a waiter that
//! polls costs the server; one that blocks does not) and the drain, from the release to the last
//! waiter's exit. A workload: above everything but `main`.

use std::fmt::Write as _;
use std::thread;
use std::time::{Duration, Instant};

use crate::admin::Cmds;
use crate::guard::{aborted, check_failed, watched};
use crate::harness::Bench;
use crate::loops::Spec;
use crate::report::Report;
use crate::stats::{describe_cmds, fmt_d};
use crate::tools::{CS_EMPTY, TOOLS, Tool};

/// How long the lock is held while the waiters queue.
const IDLE_HOLD: Duration = Duration::from_secs(10);
/// How many waiters queue behind it.
const IDLE_WAITERS: usize = 50;

/// Workload 4: one run per tool; the commands per waiter per second while held, and the drain.
pub fn idle(bench: &mut Bench, r: &mut Report) {
    let w = "4. idle: 50 waiters behind a lock held 10 s";
    let idle = TOOLS.map(|tool| bench.run_idle(tool));
    let per_waiter_s = |c: &Option<Cmds>| {
        c.as_ref().map(|c| {
            let n = IDLE_WAITERS as f64 * c.window.as_secs_f64();
            (c.sent() as f64 / n, c.total as f64 / n)
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
            let mark = (tool != Tool::Flock).then(|| self.admin.begin());
            let held_at = Instant::now();
            let running = self.start_loops(&Spec {
                tag: tag.clone(),
                tool,
                key: "w4".to_string(),
                loops: IDLE_WAITERS,
                rounds: 1,
                cs: CS_EMPTY,
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
}
