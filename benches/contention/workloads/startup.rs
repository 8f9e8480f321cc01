//! Workload 11, start-up: what a whole `redlock` process costs per job, the static binary (musl,
//! static-pie: what `scripts/dist.sh` ships) against the dynamically linked one Cargo builds, and
//! both against `flock f true`. 11a: `exec k -- true`; 11b: `--version` (the process alone, no
//! Redis); medians of [`STARTUP_RUNS`] runs of each, interleaved in each round. The static binary
//! is `$CARGO_TARGET_DIR/x86_64-unknown-linux-musl/release/redlock` (or `REDLOCK_BENCH_STATIC`);
//! without it the static column says how to build it. A workload: above everything but `main`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::guard::watched;
use crate::harness::Bench;
use crate::loops::LOOP_TTL_MS;
use crate::report::Report;
use crate::stats::{fmt_d, percentile, ratio};
use crate::tools::Tool;

/// Runs of each command.
pub const STARTUP_RUNS: usize = 300;

/// The static build next to Cargo's (same target dir), or `REDLOCK_BENCH_STATIC`.
fn static_binary(dynamic: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REDLOCK_BENCH_STATIC").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    // <target>/release/redlock -> <target>/x86_64-unknown-linux-musl/release/redlock
    let target = dynamic.parent()?.parent()?;
    let p = target.join("x86_64-unknown-linux-musl/release/redlock");
    p.is_file().then_some(p)
}

/// Workload 11: the rows of 11a and 11b.
pub fn startup(bench: &mut Bench, r: &mut Report) {
    let w = "11. start-up";
    let statik = static_binary(&bench.env.bin);
    let Some(statik) = statik else {
        r.row(
            w,
            "`exec k -- true`: the static binary was not found",
            [
                "–".into(),
                "–".into(),
                "run scripts/dist.sh (or REDLOCK_BENCH_STATIC=PATH) first".into(),
            ],
            String::new(),
        );
        return;
    };
    let [flock, dynamic, stat] = bench.startup_exec(&statik);
    let best = dynamic.min(stat);
    let vs_flock = ratio(best, flock);
    let target = r.check(
        "11: exec -- true ≤ 1.3× flock f true (the faster build)",
        vs_flock <= 1.3,
        format!("≤ 1.3× flock: {vs_flock:.2}×"),
    );
    r.row(
        w,
        "`exec k -- true`, median of 300 interleaved (`flock f true`; redlock: dynamic / static)",
        [
            fmt_d(flock),
            "–".into(),
            format!("{} / {}", fmt_d(dynamic), fmt_d(stat)),
        ],
        target,
    );
    let [dynamic, stat] = bench.startup_version(&statik);
    r.row(
        w,
        "`redlock --version` (the process alone), median of 300: dynamic / static",
        [
            "–".into(),
            "–".into(),
            format!("{} / {}", fmt_d(dynamic), fmt_d(stat)),
        ],
        String::new(),
    );
}

impl Bench {
    /// `redlock` (`bin`) with the bench's environment and URL.
    fn redlock_bin(&self, bin: &Path, args: &[&str]) -> Command {
        let mut cmd = self.env.base(bin);
        cmd.arg("--url").arg(&self.env.url).args(args);
        cmd
    }

    /// Workload 11a: medians of `flock f true`, and `exec k -- true` with each build.
    fn startup_exec(&mut self, statik: &Path) -> [Duration; 3] {
        watched("w11-exec", || {
            let log = self.log("w11-exec");
            let ttl = format!("{LOOP_TTL_MS}ms");
            let args = ["exec", "w11", "--ttl", &ttl, "--", "true"];
            let mut walls: [Vec<Duration>; 3] = Default::default();
            for i in 0..STARTUP_RUNS {
                let flock = self
                    .env
                    .under_lock(Tool::Flock, "w11", LOOP_TTL_MS, &["true"]);
                walls[0].push(self.time_one(flock, &format!("w11 flock run {i}"), &log));
                let dynamic = self.redlock_bin(&self.env.bin.clone(), &args);
                walls[1].push(self.time_one(dynamic, &format!("w11 dynamic run {i}"), &log));
                let stat = self.redlock_bin(statik, &args);
                walls[2].push(self.time_one(stat, &format!("w11 static run {i}"), &log));
            }
            let q = |w: &[Duration]| {
                format!(
                    "{} / {} / {}",
                    fmt_d(percentile(w, 0.25)),
                    fmt_d(percentile(w, 0.5)),
                    fmt_d(percentile(w, 0.75))
                )
            };
            eprintln!(
                "contention: w11-exec: {STARTUP_RUNS} interleaved runs each, p25 / median / p75: \
                 flock {}, dynamic {}, static {}",
                q(&walls[0]),
                q(&walls[1]),
                q(&walls[2])
            );
            walls.each_ref().map(|w| percentile(w, 0.5))
        })
    }

    /// Workload 11b: medians of `--version` with each build.
    fn startup_version(&mut self, statik: &Path) -> [Duration; 2] {
        watched("w11-version", || {
            let log = self.log("w11-version");
            let mut walls: [Vec<Duration>; 2] = Default::default();
            for i in 0..STARTUP_RUNS {
                for (j, bin) in [self.env.bin.clone(), statik.to_path_buf()]
                    .iter()
                    .enumerate()
                {
                    let mut cmd = self.env.base(bin);
                    cmd.arg("--version");
                    walls[j].push(self.time_one(cmd, &format!("w11 --version {j} run {i}"), &log));
                }
            }
            walls.each_ref().map(|w| percentile(w, 0.5))
        })
    }
}
