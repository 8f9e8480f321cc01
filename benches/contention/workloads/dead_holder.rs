//! Workload 5, dead holder: the holder of a lock is SIGKILLed (its whole process group) while
//! [`DEAD_WAITERS`] waiters queue; how long after the kill does the first one get in, against the
//! TTL the lock had left? flock's lock dies with its holder; a Redis lock only with its TTL.
//! A workload: above everything but `main`.

use std::os::unix::process::ExitStatusExt;
use std::thread;
use std::time::{Duration, Instant};

use crate::guard::{kill, start, tail, watched};
use crate::harness::Bench;
use crate::loops::{Hold, Spec};
use crate::report::Report;
use crate::stats::fmt_d;
use crate::tools::{CS_EMPTY, CS_HOLD, TOOLS, Tool, polling_key, redlock_key};

/// The holder's TTL.
const DEAD_TTL_MS: u64 = 5_000;
/// How many waiters queue behind it.
const DEAD_WAITERS: usize = 3;

/// Workload 5: one run per tool; the first waiter in after the kill, and the TTL left.
pub fn dead_holder(bench: &mut Bench, r: &mut Report) {
    let w = "5. dead holder: SIGKILLed holder (TTL 5 s)";
    let dead = TOOLS.map(|tool| bench.run_dead_holder(tool));
    let (after, ttl) = dead[2];
    let ttl = ttl.expect("redlock has a TTL");
    let late = after.as_secs_f64() - ttl.as_secs_f64();
    let target = r.check(
        "5: first waiter in within TTL + 100 ms",
        after <= ttl + Duration::from_millis(100),
        format!("≤ TTL left + 100 ms: {:+.0} ms", late * 1e3),
    );
    r.row(
        w,
        "first waiter in, after the kill (TTL left at the kill)",
        dead.map(|(after, ttl)| match ttl {
            Some(ttl) => format!("{} ({})", fmt_d(after), fmt_d(ttl)),
            None => format!("{} (no TTL)", fmt_d(after)),
        }),
        target,
    );
}

impl Bench {
    /// Workload 5: the holder is SIGKILLed (its whole process group); when does a waiter get in?
    /// Returns that time after the kill, and the TTL the lock had left at the kill.
    fn run_dead_holder(&mut self, tool: Tool) -> (Duration, Option<Duration>) {
        let tag = format!("w5-{}", tool.name());
        watched(&tag.clone(), || {
            self.reset_counter();
            let log = self.log(&format!("{tag}.holder"));
            let mut cmd = self
                .env
                .under_lock(tool, "w5", DEAD_TTL_MS, &["sh", "-c", CS_HOLD]);
            cmd.env("BT", &tag).stderr(log.stdio());
            let holder =
                start(&mut cmd, &format!("{tag} holder")).unwrap_or_else(|e| panic!("{e}"));
            self.events.wait_for(&tag, 'H');
            let running = self.start_loops(&Spec {
                bin: None,
                tag: tag.clone(),
                tool,
                key: "w5".to_string(),
                loops: DEAD_WAITERS,
                rounds: 1,
                cs: CS_EMPTY,
                hold: Hold::Exclusive,
            });
            // Let the waiters start and queue up.
            thread::sleep(Duration::from_millis(200));
            let ttl_left = match tool {
                Tool::Flock => None,
                Tool::Polling => Some(self.admin.pttl(&polling_key("w5"))),
                Tool::Redlock => Some(self.admin.pttl(&redlock_key("w5"))),
                Tool::Etcd => unreachable!("workload 5 runs no etcdctl"),
            };
            let killed = Instant::now();
            kill(-holder.pid());
            let (status, _) = holder.wait().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                status.signal(),
                Some(libc::SIGKILL),
                "{tag}: the holder ended on its own ({status}) before it was killed; {}",
                tail(&log.path)
            );
            let ttl_left = ttl_left.map(|ms| {
                assert!(
                    ms > 0,
                    "{tag}: the holder's lock had no TTL left at the kill (PTTL {ms})"
                );
                Duration::from_millis(ms as u64)
            });
            let _ = self.finish(running);
            let events = self.events.collect(&tag);
            self.verify(&tag, tool, &events, DEAD_WAITERS);
            let first = events
                .iter()
                .filter(|e| e.kind == 'E')
                .map(|e| e.at)
                .min()
                .expect("no waiter got in");
            assert!(
                first > killed,
                "{tag}: MUTUAL EXCLUSION VIOLATED: a waiter got in before the holder was killed"
            );
            let after = first - killed;
            eprintln!(
                "contention: {tag}: first waiter in {} after the kill (TTL left at the kill: {})",
                fmt_d(after),
                ttl_left.map_or("none".to_string(), fmt_d)
            );
            (after, ttl_left)
        })
    }
}
