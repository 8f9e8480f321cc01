//! `cargo bench --bench contention`: redlock side by side with `flock` and a polling Redis lock
//! (SET NX PX with a fixed retry interval), on eleven workloads (contention at three scales, idle
//! waiters, a dead holder, the uncontended cost, the cost of a quorum, `status` of 10,000 locks, a
//! counting semaphore against GNU `sem`, a shared lock against `flock -s`, the start-up of the
//! static and the dynamic binary), and with `etcdctl lock` in workloads 1 and 6, in one run,
//! printed as one markdown table.
//!
//! # Running part of it
//! - `REDLOCK_BENCH_ONLY=8 cargo bench --bench contention` runs only workload 8 (about a minute;
//!   a comma-separated list runs several, e.g. `REDLOCK_BENCH_ONLY=6,8`). The warm-up runs only
//!   when one of workloads 1 to 7 does. The header says which workloads ran.
//! - `REDLOCK_BENCH_BASELINE=PATH` (workloads 1 and 8): another redlock binary, e.g. a release
//!   build of the code before a change, timed with the same commands, interleaved; workload 8's
//!   table shows it as "before", workload 1 adds a row "baseline build" (its median wall, round
//!   trips and server CPU per critical section; target: redlock's wall within 5% of it).
//!
//! Needs `redis-server`, `redis-cli`, `flock`, `sem` (GNU parallel) and `sh` on PATH; `etcd` and
//! `etcdctl` (Debian: `apt install etcd-server etcd-client`) are optional: without them the
//! etcdctl column says "not installed (…)" and the header says so, and the rest runs. Uses
//! loopback only; takes five to seven minutes on two CPUs (most of it the polling lock's crowd and
//! `sem`'s runs in workload 9; workloads 9 and 10 alone take between two and three). Under `cargo
//! test --benches` (no `--bench` argument) it does nothing.
//!
//! # Set-up
//! - `redlock` is the binary Cargo builds for this bench (`CARGO_BIN_EXE_redlock`); under
//!   `cargo bench` that is the `bench` profile, which inherits `release`. The bench refuses to run
//!   against anything built outside a `release` directory.
//! - One `redis-server` of its own: a free loopback port, no persistence, a temp dir, and
//!   `slowlog-log-slower-than 0` (see "Redis commands" below; runs that measure CPU turn it
//!   off). It is killed at the end, on a panic and on Ctrl-C, and dies with the bench (PDEATHSIG)
//!   if the bench is killed. Workload 7 starts
//!   five more the same way (same guards) and kills them when it ends.
//! - When workload 1 or 6 runs and etcd is installed, one `etcd` of its own ([`etcd::Etcd`]): two
//!   free loopback ports (client and peer URLs), its data dir in the temp dir, default settings
//!   otherwise, under the same guards as the redis-servers; the bench waits for `etcdctl endpoint
//!   health` to answer (bounded), and the header gives its version and URL.
//! - Every lock command runs in its own process group, so that a timeout or a failure kills it with
//!   whatever it started. Each run of a workload is bounded by a 120 s watchdog that kills
//!   everything and fails loudly (the slowest, the polling lock's crowd, takes about 50 s on two
//!   CPUs); every other wait has its own bound.
//!
//! # The tools, all running the same critical section `sh -c CS`
//! - flock: `flock DIR/KEY.lock sh -c CS`, the kernel lock (one machine only: the physical limit).
//! - the polling lock (the table's "seed style" column, after the Java/Jedis article on Redis locks
//!   this project grew from, whose recipe it is): `benches/seed-lock.sh`:
//!   `redis-cli SET KEY TOKEN NX PX TTL`, `sleep 0.2` between attempts (the fixed interval that
//!   article measured best among the retry strategies it tried), release with a Lua
//!   compare-and-delete through `redis-cli EVAL`.
//! - redlock: `redlock exec KEY -- sh -c CS` (and `acquire` / `release` where the workload says so).
//! - etcdctl (workloads 1 and 6 only; its column stands before redlock's):
//!   `etcdctl --endpoints=http://127.0.0.1:PORT lock --ttl=30 KEY -- sh -c CS` against the bench's
//!   etcd (the `--` keeps etcdctl from taking `-c` for its own flag; `--ttl` is its session's
//!   lease, the TTL the other tools have). etcd's own client, on v3's lock recipe: a key per
//!   waiter under the lock's prefix, each waiting for the deletion of the one before it. It has
//!   no separate acquire and release commands (`etcdctl lock KEY` alone holds the lock until it is
//!   signalled), so workload 6's acquire + release cell is "–"; it keeps nothing in Redis, so its
//!   Redis rows are "–" too.
//!
//! The critical section is the non-atomic counter increment `read n < C; echo $((n + 1)) > C`
//! (plus `sleep 0.02` in workload 2), bracketed by an entry and a leave line written to a FIFO.
//! Everything but `sleep` is a dash builtin, so the bracket costs no fork. After every run the
//! counter must equal the number of critical sections, and entry and leave lines must strictly
//! alternate; otherwise the bench panics (the lock let two critical sections overlap). etcdctl's
//! runs are checked the same way.
//!
//! # Repetitions
//! On a small shared VM one run's wall time swings by tens of percent from run to run, more than
//! the margins of the wall targets. So workloads 1 and 2 run flock and redlock `REPS` (5) times
//! each, alternately (flock, redlock, flock, redlock, …), so that the two tools meet the same spells
//! of load; the polling lock, slow and far from its targets, runs once, after them (in workload 1,
//! three times among them). In workload 1 etcdctl runs `REPS` times too, after redlock in each
//! repetition (flock, redlock, etcdctl, flock, …). The table gives
//! the median run's wall (and that run's hand-overs/s) and the wall targets compare the medians;
//! waits, commands per critical section and client-side hand-overs pool all runs of a tool, and
//! fairness is the worst run's. stderr has every run's figures, and per workload the walls in run
//! order and each pair's redlock ÷ flock ratio, so the spread is visible. Workloads 3 to 5 run
//! once per tool; workload 6's uncontended `true` and acquire + release are medians of 200 runs
//! per command, the tools interleaved in each round (stderr adds the quartiles of `true`);
//! `etcdctl lock k true` is etcdctl's `true`, interleaved with the others.
//!
//! # Workload 7: the cost of the quorum
//! Several `--url`s make redlock a Redlock quorum over independent masters, contacted in
//! parallel; this measures what that costs a script. Five more `redis-server`s are started, then
//! 200 cycles of `redlock acquire k` + `redlock release k TOKEN` (two processes, uncontended, each
//! cycle timed from the first start to the second exit) run once with the bench's server as the
//! only `--url` and once with the five extra servers as five `--url`s, interleaved in each cycle
//! and the 1- and 5-node order alternating, so that machine noise and warm caches hit both alike.
//! All servers have the same settings, so the only difference is the number of nodes. The table
//! gives median / p90 of each; the target is 5-node median ≤ 1.3 × 1-node median. The first
//! cycle checks, on every server, that the lock key held the printed token and was gone after the
//! release. The flock cell is `flock -n f true` interleaved with them: the same take-and-drop in
//! one process (flock has no second command and no network), the floor of a process start, for
//! scale; the polling lock has no multi-server mode ("–"). stderr adds the quartiles and p90s.
//!
//! # Workload 8: `status` of 10,000 held locks
//! 10,000 locks under their own prefix (`w8:`), written by the bench in pipelines with the
//! records `redlock acquire` leaves (a lock key with a TTL, the meta hash with the holder), then
//! `redlock --prefix w8: status` (the table) runs 5 times on loopback and 5 times through
//! [`proxy::Proxy`], which delivers what the client sends 1 ms after reading it (the answers
//! pass at once): 1 ms more per round trip, a server one network hop away. The table gives each
//! path's median; every run must list all 10,000 locks. Targets: ≤ 0.5 s on loopback, ≤ 2 s 1 ms
//! away. The locks are deleted afterwards. While it runs, the server's slow log is back at Redis's
//! default threshold (10 ms) instead of logging every command (see "Redis commands" below, which
//! workload 8 does not count).
//!
//! # Workload 11: start-up
//! `exec k -- true` with the dynamically linked binary Cargo builds for the bench and with the
//! static one `scripts/dist.sh` builds (`x86_64-unknown-linux-musl/release/redlock` in the same
//! target dir, or `REDLOCK_BENCH_STATIC`; without it the row says how to get it), against `flock f
//! true`, 300 runs of each interleaved (flock, dynamic, static, flock, ...), medians; target: the
//! faster build ≤ 1.3× flock. Then `--version` of each build (the process alone), 300 runs.
//!
//! # Workloads 9 and 10: locks with several holders
//! Loops as in workloads 1 and 2 (`REPS` (5) runs of each tool, interleaved, the median
//! run's wall, waits pooled), holding the lock as one of several: 9 is a counting semaphore, 16
//! loops × 10 rounds of a 50 ms section (`sleep 0.05` between the entry and leave lines, no
//! counter) under `redlock exec KEY --slots 4`, against GNU `sem --id KEY -j 4 --fg` (its
//! semaphore under a HOME, PARALLEL_HOME and `--tmpdir` in the temp dir) in flock's column and the
//! ideal, 160 × 50 ms ÷ 4 = 2 s; targets: wall ≤ 1.2× the ideal and ≤ 0.5× sem's. 10 is a
//! shared lock: 8 reader loops of 100 ms sections (`redlock exec KEY --shared`, `flock -s`) and one
//! writer loop of 20 ms sections (`redlock exec KEY`, `flock -x`, the counter increment of
//! workload 2), 20 rounds each; the readers alone keep the lock busy, so a writer let in only
//! when no reader is inside would wait most of the run. Targets: the writer's wait p99 and the
//! wall within 1.5× flock's. Every run is checked from the entry and leave lines: every round
//! once; in 9 never more than 4 inside and 4 reached; in 10 the writer alone and readers together.
//! The polling lock has neither mode.
//!
//! # Measures
//! - Loops are threads of this process: each round, a thread notes the time, starts the lock
//!   command and waits for it. The same driver serves every tool, so the overhead is the same.
//! - wait: from starting the lock command to its critical section's entry line, which a thread of
//!   this process timestamps on arrival (monotonic clock). It includes the tool's start-up, which
//!   is part of what a shell script pays for a lock.
//! - wall: from releasing all loops at once to the exit of the last round; hand-overs/s is the
//!   number of critical sections divided by wall (of the median run, where there are several).
//! - fairness: the largest per-loop mean wait divided by the mean wait over all rounds of the run
//!   (the worst run's, where there are several: loop `i` of one run is not loop `i` of another).
//! - hand-over, client side: from a critical section's leave line to the next one's entry line.
//! - hand-over, server side: in a separate repetition of workload 1 under `redis-cli MONITOR`,
//!   from a release to the next holder's acquisition, by the server's clock. A release is a DEL of
//!   the lock key while it holds a token, or a SET of a `~reservation` value over a token; an
//!   acquisition is the next SET of a token value that succeeds (a SET NX on an existing key
//!   fails; a reservation cleared before its claim does not count as a release). A SET of another
//!   token over a token is both: redlock's release grants the lock to the next waiter in the same
//!   script (a gap of zero). Workload 1's targets (issue 28): wall ≤ 1.1× flock and ≤ 0.3× the
//!   polling lock; ≤ 3 commands sent and ≤ 30 run inside scripts per critical section; Redis
//!   server CPU ≤ 0.8× the polling lock's; client-side hand-over p50 ≤ 2.5 ms; server-side ≤ 2 ms.
//! - Redis commands: `INFO commandstats` before and after each run (calls + rejected calls), minus
//!   the bench's own commands, plus the clients still blocked (a BLPOP sent in the window but not
//!   counted until it returns), is the total; it counts the commands that Lua scripts run too. In
//!   a run that counts commands, the server logs every command to the slow log with its client,
//!   and the Lua client shows as `?:0`: those entries are the commands run inside scripts, and
//!   `sent` = total - in scripts is what clients sent (round trips). Targets on command counts
//!   are checked against `sent` (and, in workload 1, against the count inside scripts too); the
//!   total is printed beside it. Workloads 1 and 3 measure the
//!   server's CPU instead (below), and count the commands in one more run per tool, at the end.
//! - Redis server CPU (workloads 1 and 3): `INFO cpu`'s `used_cpu_sys_main_thread` +
//!   `used_cpu_user_main_thread` (the thread that runs every command and Lua script; getrusage,
//!   about 1 ms resolution, fine over a run of 200 critical sections) before and after each run,
//!   divided by its critical sections, runs pooled, in µs, with the slow log off: logging every
//!   command costs the server per command, so it would charge the tool that runs more commands
//!   inside scripts for the bench's instrument (a production server logs only commands slower
//!   than 10 ms). Nothing is subtracted: the bench's own commands in the window are one `CONFIG
//!   SET` before it and one `INFO` at each end. It includes each process's connection and the
//!   server's timers, which every tool pays alike. Target: redlock ≤ 0.8× the polling lock in
//!   workload 1, ≤ the polling lock in workload 3. In workload
//!   1, etcdctl's cell is its etcd's: the whole process's `utime` + `stime` from `/proc/PID/stat`
//!   (all threads, 10 ms ticks) before and after each run, divided the same way.
//! - Redis memory (a step after workload 4): `MEMORY USAGE` of a held lock's keys (`redlock
//!   acquire`: the lock, its meta hash, its history with the one `acquired` event) and of what
//!   one queued `redlock exec` adds (queue, leases, waiter records, meta's growth); then what
//!   one event of a lock's history costs (a stream of 200 events written by 100 `exec` runs,
//!   divided by 200); the polling lock's is its one string key.
//! - Peak RSS: the largest `VmHWM` of the lock process itself (`redlock exec`, `flock`, the polling
//!   lock's `sh`, `etcdctl`), sampled from `/proc` every 2 ms while its command sleeps 0.3 s, over 5 runs. Not
//!   `ru_maxrss`, which for a child spawned with vfork includes the parent's (the bench's) peak.

//!
//! # Layout
//! One module per concern, each importing only the ones listed before it:
//! - [`guard`]: every process registered, killed on failure, timeout, panic or Ctrl-C; the
//!   watchdog; [`guard::Proc`] and the stderr logs.
//! - [`tools`]: the tools, the critical sections, the commands that run them.
//! - [`events`]: the critical sections' lines on the FIFO, timestamped on arrival.
//! - [`admin`]: the `redis-server`s and the bench's own connection, which counts commands.
//! - [`etcd`]: the bench's own `etcd`, for the etcdctl column.
//! - [`harness`]: [`harness::Bench`], the state every workload runs in; single commands, a lock
//!   held by the bench itself, the machine description.
//! - [`loops`]: a run of loops × rounds, its measures and its check.
//! - [`stats`]: percentiles, formatting, the summary of a tool's runs.
//! - [`monitor`]: the server-side hand-over from `redis-cli MONITOR`.
//! - [`proxy`]: a TCP proxy adding a latency to each round trip (workload 8); imports nothing.
//! - [`report`]: the table, the targets, the notes (formatting only; imports no other module).
//! - [`workloads`]: one module per workload, each adding its rows; `main` calls them in order.

// The bench is documented with `--document-private-items` only (its modules are private), so the
// links above to private modules are meant.
#![allow(rustdoc::private_intra_doc_links)]

mod admin;
mod etcd;
mod events;
mod guard;
mod harness;
mod loops;
mod monitor;
mod proxy;
mod report;
mod stats;
mod tools;
mod workloads;

use std::time::Instant;

use harness::Bench;
use report::Report;

/// A workload: runs, and adds its rows and targets to the report.
type Workload = fn(&mut Bench, &mut Report);

fn main() {
    if !std::env::args().skip(1).any(|a| a == "--bench") {
        eprintln!("contention: not run without --bench; run `cargo bench --bench contention`");
        return;
    }
    let began = Instant::now();
    let bin = tools::release_binary();
    tools::require_tools();
    guard::install_guards();
    let temp = tempfile::Builder::new()
        .prefix("redlock-bench.")
        .tempdir()
        .expect("cannot create a temp dir");
    guard::set_temp(Some(temp.path().to_path_buf()));
    let mut bench = Bench::new(bin, temp.path());
    let mut header = bench.machine();
    let only = std::env::var("REDLOCK_BENCH_ONLY").ok();
    let run = |n: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|w| w.trim() == n))
    };
    if let Some(o) = &only {
        header.push(format!("Only workload(s) {o} (REDLOCK_BENCH_ONLY)."));
    }

    if run("1") || run("6") {
        header.push(bench.start_etcd());
    }

    let mut report = Report::default();
    if (1..=7).any(|n| run(&n.to_string())) {
        workloads::warm_up(&mut bench);
    }
    let all: [(&str, Workload); 11] = [
        ("1", workloads::empty_cs),
        ("2", workloads::sleepy_cs),
        ("3", workloads::crowd),
        ("4", workloads::idle),
        ("5", workloads::dead_holder),
        ("6", workloads::uncontended),
        ("7", workloads::quorum),
        ("8", workloads::status_scale),
        ("9", workloads::semaphore),
        ("10", workloads::shared_lock),
        ("11", workloads::startup),
    ];
    for (n, workload) in all {
        if run(n) {
            workload(&mut bench, &mut report);
        }
    }

    drop(bench);
    guard::set_temp(None);
    temp.close().expect("cannot remove the temp dir");
    guard::assert_none_left();
    let took = began.elapsed();
    header[0] = format!("{} (took {:.0} s)", header[0], took.as_secs_f64());
    report.print(&header, &workloads::notes());
}
