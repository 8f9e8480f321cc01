//! Workload 8, status: how long `redlock status` takes to list [`STATUS_LOCKS`] held locks, on
//! loopback and through a [`Proxy`] adding [`PROXY_LATENCY`] to every round trip (a server one
//! network hop away). The locks are written by the bench in one pipeline, with the records
//! `redlock acquire` writes (lock key with a TTL, meta hash with the holder); every run's table
//! must list all of them. With `REDLOCK_BENCH_BASELINE=PATH` (another build of redlock, e.g.
//! main's before a change), that binary runs the same commands, interleaved, for a
//! before/after. A workload: above everything but `main`.

use std::path::PathBuf;
use std::time::Duration;

use crate::guard::watched;
use crate::harness::Bench;
use crate::proxy::Proxy;
use crate::report::Report;
use crate::stats::{fmt_d, percentile};

/// How many held locks `status` lists.
pub const STATUS_LOCKS: usize = 10_000;
/// Runs per binary and path; the table gives the median.
pub const STATUS_RUNS: usize = 5;
/// What the proxy adds to each round trip.
pub const PROXY_LATENCY: Duration = Duration::from_millis(1);
/// The lock prefix of this workload, apart from every other workload's locks.
const PREFIX: &str = "w8:";

/// Workload 8: `redlock status` with 10,000 locks held, on loopback and 1 ms away.
pub fn status_scale(bench: &mut Bench, r: &mut Report) {
    let w = "8. status of 10,000 held locks";
    let baseline = std::env::var_os("REDLOCK_BENCH_BASELINE").map(PathBuf::from);
    let [direct, far] = bench.run_status(baseline.as_deref());
    let before = |b: Option<Duration>| {
        b.map(|b| format!("; before: {}", fmt_d(b)))
            .unwrap_or_default()
    };
    for ((now, then), path, limit, name) in [
        (
            direct,
            "loopback",
            Duration::from_millis(500),
            "8: status of 10,000 locks on loopback ≤ 0.5 s",
        ),
        (
            far,
            "through a proxy adding 1 ms per round trip",
            Duration::from_secs(2),
            "8: status of 10,000 locks 1 ms away ≤ 2 s",
        ),
    ] {
        let target = r.check(
            name,
            now <= limit,
            format!("≤ {}: {}", fmt_d(limit), fmt_d(now)),
        );
        r.row(
            w,
            &format!("`redlock status` (table), {path}: median of {STATUS_RUNS} runs"),
            [
                "–".to_string(),
                "–".to_string(),
                format!("{}{}", fmt_d(now), before(then)),
            ],
            target,
        );
    }
}

impl Bench {
    /// Writes the locks, times `status` on both paths (and the baseline's, interleaved), checks
    /// every run's output, deletes the locks. Returns the medians: (redlock, baseline) for
    /// loopback, then for the proxy.
    fn run_status(
        &mut self,
        baseline: Option<&std::path::Path>,
    ) -> [(Duration, Option<Duration>); 2] {
        let log = self.log("w8-status");
        let names = watched("w8-status setup", || self.write_locks());
        // The bench's server logs every command to the slow log, to count those run inside
        // scripts (workloads 1 to 5); here that would triple the server's time for 50,000
        // commands nobody counts. Redis's default (10 ms) while this workload runs.
        self.slowlog(10_000);
        let proxy = Proxy::start(
            self.env.port.parse().expect("the bench's port"),
            PROXY_LATENCY,
        );
        let bins: Vec<PathBuf> = std::iter::once(self.env.bin.clone())
            .chain(baseline.map(std::path::Path::to_path_buf))
            .collect();
        let urls = [self.env.url.clone(), proxy.url()];
        // times[bin][url]
        let mut times = vec![[Vec::new(), Vec::new()]; bins.len()];
        for run in 0..STATUS_RUNS {
            // A round of its own under the watchdog: a baseline with one round trip per lock
            // takes about 10,000 × 1 ms through the proxy.
            watched(&format!("w8-status run {run}"), || {
                for (b, bin) in bins.iter().enumerate() {
                    for (u, url) in urls.iter().enumerate() {
                        let mut cmd = self.env.base(bin);
                        cmd.args(["--url", url, "--prefix", PREFIX, "status"]);
                        let what = format!("w8 status bin {b} url {u} run {run}");
                        let (out, took) = self.run_one(cmd, &what, &log);
                        let rows = out.lines().count().saturating_sub(1);
                        assert_eq!(rows, names, "{what}: {rows} rows for {names} locks");
                        times[b][u].push(took);
                    }
                }
            });
        }
        drop(proxy);
        self.slowlog(0);
        watched("w8-status cleanup", || self.delete_locks());
        let median = |b: usize, u: usize| percentile(&times[b][u], 0.5);
        let all = |v: &[Duration]| v.iter().map(|d| fmt_d(*d)).collect::<Vec<_>>().join(", ");
        for (b, bin) in bins.iter().enumerate() {
            eprintln!(
                "contention: w8-status: {}: loopback {} (median {}); 1 ms away {} (median {})",
                bin.display(),
                all(&times[b][0]),
                fmt_d(median(b, 0)),
                all(&times[b][1]),
                fmt_d(median(b, 1)),
            );
        }
        let base = |u: usize| (bins.len() > 1).then(|| median(1, u));
        [(median(0, 0), base(0)), (median(0, 1), base(1))]
    }

    /// Writes [`STATUS_LOCKS`] held locks as `redlock acquire` leaves them; returns how many.
    fn write_locks(&self) -> usize {
        let mut con = self.raw();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock before 1970")
            .as_millis() as u64;
        for start in (0..STATUS_LOCKS).step_by(1000) {
            let mut pipe = redis::pipe();
            for i in start..(start + 1000).min(STATUS_LOCKS) {
                let lock = format!("{PREFIX}{{lock-{i:05}}}");
                let token = format!("{i:032x}");
                pipe.cmd("SET")
                    .arg(&lock)
                    .arg(&token)
                    .arg("PX")
                    .arg(3_600_000)
                    .ignore();
                pipe.cmd("HSET")
                    .arg(format!("{lock}:meta"))
                    .arg("token")
                    .arg(&token)
                    .arg("fence")
                    .arg(now_ms * 1000 + i as u64)
                    .arg("host")
                    .arg("runner-3")
                    .arg("pid")
                    .arg(1000 + i)
                    .arg("user")
                    .arg("ci")
                    .arg("note")
                    .arg(format!("./job.sh {i}"))
                    .arg("acquired_ms")
                    .arg(now_ms)
                    .arg("ttl_ms")
                    .arg(3_600_000)
                    .arg("expires_ms")
                    .arg(now_ms + 3_600_000)
                    .ignore();
            }
            pipe.query::<()>(&mut con)
                .unwrap_or_else(|e| panic!("w8: cannot write the locks: {e}"));
        }
        STATUS_LOCKS
    }

    fn delete_locks(&self) {
        let mut con = self.raw();
        for start in (0..STATUS_LOCKS).step_by(1000) {
            let mut pipe = redis::pipe();
            for i in start..(start + 1000).min(STATUS_LOCKS) {
                let lock = format!("{PREFIX}{{lock-{i:05}}}");
                pipe.cmd("DEL")
                    .arg(&lock)
                    .arg(format!("{lock}:meta"))
                    .ignore();
            }
            pipe.query::<()>(&mut con)
                .unwrap_or_else(|e| panic!("w8: cannot delete the locks: {e}"));
        }
    }

    /// Sets `slowlog-log-slower-than` (µs) on the bench's server.
    fn slowlog(&self, us: i64) {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(us)
            .query::<()>(&mut self.raw())
            .unwrap_or_else(|e| panic!("w8: cannot set the slow log: {e}"));
    }

    /// A connection of its own, outside the admin connection's command counts.
    fn raw(&self) -> redis::Connection {
        let con = redis::Client::open(self.env.url.as_str())
            .and_then(|c| c.get_connection_with_timeout(crate::guard::STEP_TIMEOUT))
            .unwrap_or_else(|e| panic!("w8: cannot connect to the bench's redis-server: {e}"));
        con.set_read_timeout(Some(crate::guard::STEP_TIMEOUT))
            .expect("cannot set a read timeout");
        con
    }
}
