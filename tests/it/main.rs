//! The integration tests: one crate, one folder per feature, each file a module (so a test's
//! name is its path: `cargo test --test it exec::signals::`, `cargo test --test it topology::`).
//!
//! - `cli`: bad input and exit 2, `-q`, shell completion;
//! - `lock`: the one-shot commands: `acquire`, `release`/`extend`, slots, pools, shared locks;
//! - `exec`: the supervisor: the command's run, its signals, a lost lock, connections, a terminal;
//! - `waiting`: the queue of a busy lock, what a waiter says, `redlock wait`;
//! - `inspect`: `status` (and `--watch`, Prometheus), `log`, `exec --report`, on a cluster too;
//! - `topology`: reaching Redis: URLs, TLS, outages, server conditions, quorum, cluster, sentinel;
//! - `safety`: exclusion, fences, forced releases, secrets, hostile data, the keeper
//!   (`--while-pid`), preemption, time limits, and tests that leave nothing behind.
//!
//! - `docs`: every example in README.md, CONTRIBUTING.md and docs/, run;
//! - `suite`: what the suite needs from the machine (`redis-server`), said loudly.
//!
//! Support: `tests/common` (shared with the chaos campaign, `tests/chaos.rs`) and `support`
//! (only this crate). The other test crates are `chaos`, `generated` (completions and man
//! pages) and `layers` (the layer list of `src/lib.rs`).
//!
//! Tests run in parallel threads of this one process. None changes process-wide state (the
//! environment, the working directory, signal dispositions, limits): a test that needs something
//! different says so to the process it starts (`Command::env`, `current_dir`, `pre_exec`), and
//! every descriptor a test opens is close-on-exec, so no child of another test inherits it.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
mod support;

mod cli;
mod docs;
mod exec;
mod inspect;
mod lock;
mod safety;
mod suite;
mod topology;
mod waiting;
