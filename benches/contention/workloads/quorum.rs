//! Workload 7, quorum: what several `--url`s (a Redlock quorum over independent masters,
//! contacted in parallel) cost a script. Starts [`QUORUM_NODES`] more `redis-server`s and times
//! [`QUORUM_CYCLES`] cycles of `redlock acquire` + `redlock release` against the bench's server
//! alone and against the extra servers together, with `flock -n f true` for scale; the first
//! cycle checks that every server really held the lock. A workload: above everything but `main`.

use std::time::Duration;

use crate::admin::{Admin, Server};
use crate::guard::watched;
use crate::harness::Bench;
use crate::report::Report;
use crate::stats::{fmt_d, percentile, ratio};
use crate::tools::redlock_key;

/// The extra servers of the quorum.
pub const QUORUM_NODES: usize = 5;
/// The acquire + release cycles per configuration.
pub const QUORUM_CYCLES: usize = 200;

/// Workload 7: the same acquire + release on five independent servers as on one.
pub fn quorum(bench: &mut Bench, r: &mut Report) {
    let w = "7. quorum: acquire + release on 5 nodes vs 1";
    let [fl, one, many] = bench.run_quorum();
    let vs_one = ratio(many.0, one.0);
    let target = r.check(
        "7: acquire + release on 5 nodes ≤ 1.3× on 1",
        vs_one <= 1.3,
        format!("≤ 1.3× 1 node: {vs_one:.2}×"),
    );
    let cell = |(median, p90): (Duration, Duration)| format!("{} / {}", fmt_d(median), fmt_d(p90));
    r.row(
        w,
        &format!(
            "median / p90 of {QUORUM_CYCLES} cycles, interleaved: `redlock acquire k` + `release k \
             TOKEN` with {QUORUM_NODES} `--url`s, and with 1; flock: `flock -n f true` (one \
             process; for scale)"
        ),
        [
            cell(fl),
            "–".to_string(),
            format!("{QUORUM_NODES} nodes {}; 1 node {}", cell(many), cell(one)),
        ],
        target,
    );
}

/// Panics unless redlock's key for lock `key` holds `token` (or is absent, for `None`) on every
/// server in `ports`: the quorum workload really used all of them.
fn check_holders(ports: &[u16], key: &str, token: Option<&str>, what: &str) {
    for &port in ports {
        let mut admin = Admin::connect(port);
        let value: Option<String> = admin.query("get", redis::cmd("GET").arg(redlock_key(key)));
        assert_eq!(
            value.as_deref(),
            token,
            "{what}: {} on 127.0.0.1:{port} holds {value:?}, expected {token:?}",
            redlock_key(key)
        );
    }
}

impl Bench {
    /// Workload 7: what the quorum costs. Starts `QUORUM_NODES` more servers, the same way as the
    /// bench's own, then runs `QUORUM_CYCLES` cycles of `redlock acquire` + `redlock release`
    /// against the bench's server alone and against the extra servers together, with a
    /// `flock -n f true` for scale; all three interleaved in each cycle, the 1- and N-node order
    /// alternating, so that noise and warm caches favour neither. The first cycle checks that the
    /// lock key held the printed token on every server while held, and on none after the release.
    /// Returns (median, p90) of the cycles: flock, 1 node, N nodes. The extra servers are killed
    /// before it returns.
    fn run_quorum(&mut self) -> [(Duration, Duration); 3] {
        watched("w7-quorum", || {
            let log = self.log("w7-quorum");
            let servers: Vec<Server> = (0..QUORUM_NODES)
                .map(|_| Server::start(&self.env.dir))
                .collect();
            let one: Vec<u16> = vec![self.env.port.parse().expect("the bench's port")];
            let many: Vec<u16> = servers.iter().map(|s| s.port).collect();
            let urls = |ports: &[u16]| -> Vec<String> {
                ports
                    .iter()
                    .map(|p| format!("redis://127.0.0.1:{p}"))
                    .collect()
            };
            let configs = [(1, urls(&one), &one), (2, urls(&many), &many)];
            let key = "w7";
            let lock_file = self.env.dir.join("w7.lock");
            let mut cycles: [Vec<Duration>; 3] = Default::default();
            for i in 0..QUORUM_CYCLES {
                let mut flock = self.env.base("flock");
                flock.arg("-n").arg(&lock_file).arg("true");
                cycles[0].push(self.time_one(flock, &format!("w7 flock -n run {i}"), &log));
                let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
                for c in order {
                    let (slot, urls, ports) = &configs[c];
                    let n = urls.len();
                    let acquire = self.env.redlock_on(urls, &["acquire", key]);
                    let what = format!("w7 redlock acquire on {n} run {i}");
                    let (token, a) = self.run_one(acquire, &what, &log);
                    let token = token.trim().to_string();
                    if i == 0 {
                        check_holders(ports, key, Some(&token), "w7: after acquire");
                    }
                    let release = self.env.redlock_on(urls, &["release", key, &token]);
                    let what = format!("w7 redlock release on {n} run {i}");
                    let (_, b) = self.run_one(release, &what, &log);
                    if i == 0 {
                        check_holders(ports, key, None, "w7: after release");
                    }
                    cycles[*slot].push(a + b);
                }
            }
            drop(servers);
            let stats = cycles
                .each_ref()
                .map(|c| (percentile(c, 0.5), percentile(c, 0.9)));
            let spread = |c: &[Duration]| {
                format!(
                    "{} / {} / {} / {}",
                    fmt_d(percentile(c, 0.25)),
                    fmt_d(percentile(c, 0.5)),
                    fmt_d(percentile(c, 0.75)),
                    fmt_d(percentile(c, 0.9))
                )
            };
            eprintln!(
                "contention: w7-quorum: {QUORUM_CYCLES} interleaved cycles each, p25 / median / \
                 p75 / p90: flock -n {}, redlock 1 node {}, redlock {QUORUM_NODES} nodes {}; \
                 {QUORUM_NODES} ÷ 1 node medians {:.2}×",
                spread(&cycles[0]),
                spread(&cycles[1]),
                spread(&cycles[2]),
                ratio(stats[2].0, stats[1].0)
            );
            stats
        })
    }
}
