//! The eleven workloads, the top layer below `main`: each module runs one workload (or, for
//! `contention`, the three that share the loops; for `holders`, the two with several holders) for
//! every tool and adds its rows and targets to the [`Report`](crate::report::Report). This module
//! also owns the warm-up that precedes them and the notes printed under the table, which describe
//! how the workloads ran.

mod contention;
mod dead_holder;
mod holders;
mod idle;
mod quorum;
mod startup;
mod status;
mod uncontended;

pub use contention::{crowd, empty_cs, sleepy_cs};
pub use dead_holder::dead_holder;
pub use holders::{semaphore, shared_lock};
pub use idle::idle;
pub use quorum::quorum;
pub use startup::startup;
pub use status::status_scale;
pub use uncontended::uncontended;

use crate::guard::watched;
use crate::harness::Bench;
use crate::loops::LOOP_TTL_MS;

/// A few uncontended runs of each tool (etcdctl's too, if the bench's etcd runs), so that no
/// workload pays for a cold cache (page cache, Redis's script cache).
pub fn warm_up(bench: &mut Bench) {
    watched("warm-up", || {
        let log = bench.log("warm-up");
        for i in 0..3 {
            for tool in bench.tools_with_etcd() {
                let cmd = bench
                    .env
                    .under_lock(tool, "warm-up", LOOP_TTL_MS, &["true"]);
                bench.time_one(cmd, &format!("warm-up {} run {i}", tool.name()), &log);
            }
        }
    });
}

/// The paragraphs printed under the table: how the workloads ran, and what the metrics mean.
pub fn notes() -> [String; 2] {
    use contention::{POLLING_REPS_W1, REPS};
    use holders::{READERS, SEM_LOOPS, SEM_ROUNDS, SEM_SLOTS, SHARED_ROUNDS};
    use quorum::{QUORUM_CYCLES, QUORUM_NODES};
    use status::{STATUS_LOCKS, STATUS_RUNS};
    use uncontended::UNCONTENDED_RUNS;
    [
        format!(
            "Workloads 1 and 2: flock and redlock ran {REPS} times each, alternately (flock, \
             redlock, flock, redlock, …) so that both met the same machine conditions; the seed \
             style ran {POLLING_REPS_W1} times among them in workload 1 (its wall and server CPU \
             pool those runs), once after them in workload 2. Wall is the median run's \
             (hand-overs/s is that run's), and the wall targets compare medians; every run's \
             wall is on stderr. Waits and client-side hand-overs pool all runs of a tool, \
             commands per CS too in workload 2; workloads 1 and 3 measure the server's CPU in \
             those runs (slow log off) and count commands in one more run per tool (slow log \
             on); fairness is the \
             worst run's. Every run was checked (exact counter, no overlap). Workloads 3 to 5: \
             one run per tool. Workload 6: medians of {UNCONTENDED_RUNS} runs per command, \
             interleaved. Workload 7: {QUORUM_CYCLES} cycles per configuration, interleaved (the \
             1- and {QUORUM_NODES}-node order alternating), against {QUORUM_NODES} more \
             redis-servers started for it; the seed style has no multi-server mode. Workload 8: \
             medians of {STATUS_RUNS} runs of `redlock status` per path, interleaved, with \
             {STATUS_LOCKS} locks written by the bench; \"before\" is the binary in \
             REDLOCK_BENCH_BASELINE when set (the code before batching). With \
             REDLOCK_BENCH_BASELINE, workload 1 also runs that binary {REPS} times, beside each \
             redlock run (after it, then before it, alternately), for the baseline row. \
             Workloads 9 and 10 (locks with several holders; the seed style has neither mode): \
             the local tool in flock's column (GNU `sem --id KEY -j {SEM_SLOTS} --fg` in \
             workload 9, flock has no counting mode; `flock -s` readers and a `flock -x` writer \
             in workload 10) and redlock (`--slots {SEM_SLOTS}`; `--shared` readers and a plain \
             writer) ran {REPS} times each, alternately, as in workloads 1 and 2; wall is the \
             median run's, waits pool all runs. Workload 9's ideal is its total work ÷ \
             {SEM_SLOTS} slots ({} × 50 ms ÷ {SEM_SLOTS}). Workload 10: {READERS} reader loops \
             and 1 writer loop, {SHARED_ROUNDS} rounds each. Every run was checked: in workload \
             9, never more than {SEM_SLOTS} critical sections inside at once, {SEM_SLOTS} \
             reached, every round done; in workload 10, the writer entered only an empty lock \
             and nobody entered while it was inside, readers were inside together, every round \
             done, the counter only the writer increments exact. etcdctl lock (workloads 1 \
             and 6 only, when etcd and etcdctl are installed): `etcdctl --endpoints=URL lock \
             --ttl=30 KEY -- sh -c CS` against the bench's own etcd (one member on loopback, \
             default settings, so its write-ahead log is fsynced), the same critical section and \
             checks; in workload 1 it ran {REPS} times, after redlock in each repetition; in \
             workload 6, `etcdctl lock k true` interleaved with the others; it has no separate \
             acquire and release commands (without a command, `etcdctl lock` holds the lock \
             until it is signalled), so its acquire + release cell is \"–\". It keeps no lock in \
             Redis: its Redis command rows are \"–\"; its server CPU is the etcd process's, all \
             threads (utime + stime in /proc, 10 ms ticks), over each run ÷ its critical \
             sections: what the server spends, as Redis's main thread is for the others.",
            SEM_LOOPS * SEM_ROUNDS
        ),
        "wait: from starting the lock command to entering the critical section (the tool's \
         start-up included). Redis commands: `sent` are the commands clients sent (round \
         trips), `incl. scripts` adds those that Lua scripts ran (INFO commandstats counts \
         both); targets use `sent`. Server-side hand-over: release to the next holder's SET \
         by the server's clock, from `redis-cli MONITOR` in a separate run of workload 1. \
         Redis server CPU: the main thread's (`INFO cpu`, Lua included) over each run ÷ its \
         critical sections, runs pooled, with the slow log off (it would charge each command \
         run in a script for the bench's instrument); it includes accepting each process's \
         connection. Redis memory: `MEMORY USAGE` of a held lock's keys (its \
         history with one event included), what one queued waiter adds (its keys and meta's \
         growth), and what one more history event costs (a history of 200 events ÷ 200)."
            .to_string(),
    ]
}
