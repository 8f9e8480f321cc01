//! Statistics and formatting of the figures: percentiles, ratios, durations as the table prints
//! them, and [`Summary`], what the runs of one tool in one contention workload come to (the median
//! run's wall and rate, pooled waits, commands and hand-overs, the worst run's fairness); each run
//! is also logged on stderr ([`log_run`]). Above [`loops`](crate::loops) and
//! [`admin`](crate::admin), whose measurements it summarises; pure but for the stderr lines.

use std::fmt::Write as _;
use std::time::Duration;

use crate::admin::Cmds;
use crate::loops::LoopRun;

/// The `p` quantile by the nearest-rank method (zero for no sample).
pub fn percentile(ds: &[Duration], p: f64) -> Duration {
    if ds.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = ds.to_vec();
    sorted.sort();
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// A duration as the table prints it: two decimals in seconds from 1 s, else three significant
/// figures in ms.
pub fn fmt_d(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1e3)
    } else if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

/// What the runs of one tool in one contention workload come to.
pub struct Summary {
    /// How many runs.
    pub runs: usize,
    /// Each run's wall, in run order.
    pub walls: Vec<Duration>,
    /// The median of `walls` (the upper middle one for an even count: `percentile(_, 0.5)`).
    pub wall: Duration,
    /// Hand-overs per second of the median run: critical sections ÷ `wall`.
    pub rate: f64,
    /// Waits of all runs pooled.
    pub p50: Duration,
    pub p99: Duration,
    /// Commands per critical section, all runs pooled: (sent, including those run inside scripts).
    pub cmds: Option<(f64, f64)>,
    /// The server's CPU time per critical section, all runs pooled: the Redis server's main
    /// thread (`INFO cpu`), or for etcdctl the bench's etcd's whole process (`/proc`).
    pub cpu: Option<Duration>,
    /// The worst run's fairness.
    pub fairness: f64,
    /// Client-side hand-overs of all runs pooled: the median.
    pub handover: Duration,
}

/// Logs one run's figures on stderr (the per-run breakdown).
pub fn log_run(label: &str, run: &LoopRun) {
    let waits: Vec<Duration> = run.waits().into_iter().map(|w| w.1).collect();
    let n = run.rounds.len();
    let wall = run.wall();
    let mut line = format!(
        "contention: {label}: {n} critical sections in {}, {:.0}/s, wait p50 {} p99 {}, \
         fairness {:.2}, hand-over p50 {}",
        fmt_d(wall),
        n as f64 / wall.as_secs_f64(),
        fmt_d(percentile(&waits, 0.5)),
        fmt_d(percentile(&waits, 0.99)),
        run.fairness(),
        fmt_d(percentile(&run.client_handovers(), 0.5))
    );
    if run.peak > 1 {
        let _ = write!(line, ", at most {} inside at once", run.peak);
    }
    if let Some(c) = &run.cmds {
        let _ = write!(line, "; {}", describe_cmds(c, n));
    }
    if let Some(cpu) = run.etcd_cpu {
        let _ = write!(
            line,
            "; etcd CPU {} = {} per unit",
            fmt_d(cpu),
            fmt_us(cpu / n as u32)
        );
    }
    eprintln!("{line}");
}

/// Logs on stderr the walls of a repeated workload's runs of two tools, interleaved in pairs
/// (`other`, then redlock): each tool's in run order, each pair's redlock ÷ `other` and the
/// ratio of the medians, so that the spread is visible.
pub fn log_walls(tag: &str, (name, other): (&str, &Summary), redlock: &Summary) {
    let list = |ws: &[Duration]| ws.iter().map(|w| fmt_d(*w)).collect::<Vec<_>>().join(", ");
    let pairs: Vec<String> = other
        .walls
        .iter()
        .zip(&redlock.walls)
        .map(|(o, r)| format!("{:.2}", ratio(*r, *o)))
        .collect();
    eprintln!(
        "contention: {tag}: wall per run, in run order: {name} [{}], redlock [{}]; \
         redlock ÷ {name} per pair [{}]; medians {name} {}, redlock {}: {:.2}×",
        list(&other.walls),
        list(&redlock.walls),
        pairs.join(", "),
        fmt_d(other.wall),
        fmt_d(redlock.wall),
        ratio(redlock.wall, other.wall)
    );
}

/// The runs of one tool: the median wall (and the rate of that run), waits, commands and
/// client-side hand-overs pooled over all runs, the worst run's fairness. Commands per critical
/// section pool the runs that counted them, `runs` and `counted` (runs for that alone, see
/// [`Count`](crate::admin::Count)); the server's CPU pools the runs that measured it.
pub fn summarize(runs: &[LoopRun], counted: &[LoopRun]) -> Summary {
    assert!(!runs.is_empty(), "no run to summarize");
    let walls: Vec<Duration> = runs.iter().map(LoopRun::wall).collect();
    let wall = percentile(&walls, 0.5);
    let per_run = runs[0].rounds.len();
    let waits: Vec<Duration> = runs
        .iter()
        .flat_map(|r| r.waits().into_iter().map(|w| w.1))
        .collect();
    let handovers: Vec<Duration> = runs.iter().flat_map(LoopRun::client_handovers).collect();
    let mut sections = (0, 0);
    let mut sums = (0, 0, Duration::ZERO);
    for run in runs.iter().chain(counted) {
        if let Some(cpu) = run.etcd_cpu {
            sections.1 += run.rounds.len();
            sums.2 += cpu;
        }
        let Some(c) = &run.cmds else { continue };
        if let Some(sent) = c.sent() {
            sections.0 += run.rounds.len();
            sums.0 += sent;
            sums.1 += c.total;
        }
        if let Some(cpu) = c.cpu {
            sections.1 += run.rounds.len();
            sums.2 += cpu;
        }
    }
    let cmds = (sections.0 > 0).then(|| {
        (
            sums.0 as f64 / sections.0 as f64,
            sums.1 as f64 / sections.0 as f64,
        )
    });
    let cpu = (sections.1 > 0).then(|| sums.2.div_f64(sections.1 as f64));
    Summary {
        runs: runs.len(),
        cpu,
        wall,
        rate: per_run as f64 / wall.as_secs_f64(),
        p50: percentile(&waits, 0.5),
        p99: percentile(&waits, 0.99),
        cmds,
        fairness: runs.iter().map(LoopRun::fairness).fold(0.0_f64, f64::max),
        handover: percentile(&handovers, 0.5),
        walls,
    }
}

/// A run's Redis commands for stderr: sent, in scripts, per `per` units, the top ten names.
pub fn describe_cmds(c: &Cmds, per: usize) -> String {
    let names: Vec<String> = c
        .by_name
        .iter()
        .take(10)
        .map(|(n, k)| format!("{n} {k}"))
        .collect();
    let per_unit = |n: u64| n as f64 / per as f64;
    let counted = match c.sent() {
        Some(sent) => format!(
            "{sent} sent + {} in scripts = {:.1} / {:.1} per unit",
            c.total - sent,
            per_unit(sent),
            per_unit(c.total)
        ),
        None => format!("{} = {:.1} per unit", c.total, per_unit(c.total)),
    };
    let cpu = c.cpu.map_or(String::new(), |cpu| {
        format!(
            "; server CPU {} = {} per unit",
            fmt_d(cpu),
            fmt_us(cpu / per as u32)
        )
    });
    format!("Redis: {counted} [{}]{cpu}", names.join(", "))
}

/// The table cell of commands per critical section: "sent / total", or "–" (flock).
pub fn cmds_cell(c: Option<(f64, f64)>) -> String {
    match c {
        Some((sent, total)) => format!("{sent:.1} / {total:.1}"),
        None => "–".to_string(),
    }
}

/// A short duration in µs (the server's CPU per critical section).
pub fn fmt_us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// `a ÷ b`.
pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}
