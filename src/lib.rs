//! redlock: a distributed mutual-exclusion lock for shell scripts, cron jobs and CI, on Redis.
//!
//! The binary (`main.rs`) parses the command line, calls [`run`] and reports the outcome with
//! [`report_error`] or [`usage_error`]. The modules are private: the crate's interface is the
//! command line, and its tests run the binary (plus unit tests inside the modules). `cli` is
//! public for the binary, `exit` for `tests/it/cli/usage.rs`, which checks the exit table's length,
//! and `env` beside it (the docs' copy of both tables is rendered by `tests/generated.rs`).
//!
//! # Layers
//!
//! Bottom first. A module uses only modules of lower layers (`tests/layers.rs` checks it, reading
//! this list):
//!
//! 0. `arena`, `env`, `exit`, `os`, `printable`, `redact`, `scripts`: the allocator; tables, pure
//!    text helpers, the Lua scripts, the safe wrappers of the OS calls
//! 1. `platform`: what Linux has and other systems lack, one implementation for each (over `os`)
//! 2. `cli`, `error`, `signals`, `spawn`, `tell`, `work`: the command line's definition; the error
//!    kinds and their exit codes; signal delivery, starting the command, the word a release sends
//!    its keeper, the processes a `--while-pid` pid started
//! 3. `config`: flags and environment resolved and validated
//! 4. `messages`: every line for humans on stderr, and what `-q` silences
//! 5. `client`: a connection to one server (timeouts, TLS, auth, Redis errors mapped to ours)
//! 6. `lock`: the lock model and the one-server protocol, one script call per operation, and
//!    locks with more than one holder (`--slots`, `--pool`, `--shared`)
//! 7. `output`, `events`, `owner`, `metrics`: what goes to stdout, and the words for a lock's
//!    state; the events every holder loop reacts to, and the back-off; who we are; `status` as
//!    Prometheus metrics
//! 8. `store`, `history`, `follow`, `brief`: the `Store` trait and its one-server
//!    implementation; a lock's history; the one pub/sub follower (`wait`, `notify`, `--watch`);
//!    what `acquire --while-pid` and its keeper agree on, and starting one
//! 9. `quorum`, `acquire`, `renew`: a quorum of independent masters, the same trait over N
//!    servers; taking a lock and waiting over any store; the one renewal (exec and the keeper)
//! 10. `backend`: the store the configuration names
//! 11. `park`, `notify`: parking a waiter on its wake list without going deaf to signals;
//!     hearing that our lock was taken or asked to stop (exec and the keeper)
//! 12. `take`: what `exec` and the one-shot commands share to take a lock
//! 13. `commands`, `exec`, `keeper`, `watch`, `wait`, `complete`: the subcommands, side by side,
//!     none importing another (`acquire`, `release`, `extend`, `status`, `log`; `exec`; the
//!     keeper an `acquire --while-pid` leaves; `status --watch`; `wait`; shell completion)
//!
//! # Conventions
//!
//! - One module, one job; a module split into files (`lock/`, `client/`, `quorum/`, `exec/`,
//!   `keeper/`, `watch/`) keeps one place in the list, and callers name it as one (`lock::X`).
//! - The holder loops (exec, the keeper, `wait`, `--watch`) share their vocabulary and engines:
//!   `events` (what they react to, the back-off), `follow` (the one pub/sub follower), `renew` (the
//!   one renewal), `acquire::Outage`; none writes its own.
//! - Every Lua script declares its arguments once, by name (`local A = {token = ARGV[1], ...}`); `build.rs`
//!   reads the declaration and `scripts.rs` checks every call's names against it. The data the
//!   scripts write is the protocol: an older and a newer redlock share a lock.
//! - Decisions that are pure (a quorum's verdict, a renewal's due time) are functions with table
//!   tests; side effects happen around them.
//! - `unsafe` lives in `os.rs` (the few calls rustix lacks), `platform/` (the measured vfork-style
//!   spawn, posix_spawn, kqueue, inherited descriptors), `spawn.rs` (the watchdog's fork,
//!   async-signal-safe code only), `brief.rs` (the keeper's `pre_exec`) and `arena.rs` (the
//!   allocator), each block with its `SAFETY` note; everything else calls safe wrappers.
//! - What is Linux's alone (pidfds, the parent-death signal, a child subreaper, memfds, `/proc`)
//!   is called through `platform` only, whose portable implementation (macOS) is also built and
//!   tested on Linux (`--features portable`).
//! - Tests: one integration crate, `tests/it/`, in feature folders, on real redis-servers
//!   (`or_skip!` skips without one, fails under `REDLOCK_REQUIRE_REDIS`); `tests/chaos.rs`,
//!   `tests/generated.rs` and `tests/layers.rs` stand alone.

mod acquire;
mod arena;
mod backend;
mod brief;
pub mod cli;
mod client;
mod commands;
mod complete;
mod config;
pub mod env;
mod error;
mod events;
mod exec;
pub mod exit;
mod follow;
mod history;
mod keeper;
mod lock;
mod messages;
mod metrics;
mod notify;
mod os;
mod output;
mod owner;
mod park;
mod platform;
mod printable;
mod quorum;
mod redact;
mod renew;
mod scripts;
mod signals;
mod spawn;
mod store;
mod take;
mod tell;
mod wait;
mod watch;
mod work;

pub use arena::Arena;
pub use complete::answer_shell as answer_completion;
pub use messages::{report_error, usage_error};

use anyhow::Result;

use cli::{Cli, Command};
use config::{Config, Env};

/// Runs a parsed command line; returns the exit status for outcomes that are not errors.
pub fn run(cli: Cli) -> Result<u8> {
    let warn = &mut |w| messages::option_warning(&cli.global, w);
    let config = resolve(&cli, warn)?;
    match &cli.command {
        Command::Acquire(args) => commands::acquire(&config, args),
        Command::Release(args) => commands::release(&config, args),
        Command::Extend(args) => commands::extend(&config, args),
        Command::Status(args) if args.watch => watch::run(&config, args),
        Command::Status(args) => commands::status(&config, args),
        Command::Log(args) => commands::log(&config, args),
        Command::Wait(args) => wait::run(&config, args),
        Command::Exec(args) => exec::run(&config, args),
    }
}

/// The configuration `cli` asks for, with the options' warnings handed to `warn`.
fn resolve(cli: &Cli, warn: &mut dyn FnMut(String)) -> Result<Config> {
    let mut config = Config::resolve(&cli.global, &Env::from_process(), warn)?;
    if let Command::Acquire(cli::AcquireArgs { lock, .. })
    | Command::Exec(cli::ExecArgs { lock, .. }) = &cli.command
    {
        config.allow_eviction = lock.allow_eviction;
    }
    Ok(config)
}

/// `Some` when this process is a keeper that `acquire --while-pid` started (its `argv[0]` is
/// `redlock-keeper`): the keeper's exit status, an error reported as any. Not a subcommand, so
/// that no help, man page or completion offers what only `acquire` may start (clap's static
/// completion generators list hidden subcommands).
pub fn run_keeper() -> Option<u8> {
    let argv0 = std::env::args_os().next()?;
    if argv0 != brief::ARGV0 {
        return None;
    }
    Some(keep().unwrap_or_else(|e| report_error(&e)))
}

/// The keeper: reads its brief from `acquire --while-pid` on stdin (the acquire's own command
/// line among it) and keeps the lock for it (see `keeper.rs`). The same flags and the inherited
/// environment make the same [`Config`]; their warnings were said by `acquire` already.
fn keep() -> Result<u8> {
    let mut brief = brief::Brief::read()?;
    let mut cli = cli::parse_from(&brief.args)
        .map_err(|e| error::usage(format!("the keeper's brief does not parse: {e}")))?;
    // The password acquire resolved, rather than a --password-file read again (a pipe, as
    // `<(vault read ...)`, gives it only once).
    let mut env = Env::from_process();
    if let Some(password) = brief.password.take() {
        cli.global.password_file = None;
        env.password = Some(password);
    }
    let mut config = Config::resolve(&cli.global, &env, &mut |_| {})?;
    if let Command::Acquire(a) = &cli.command {
        config.allow_eviction = a.lock.allow_eviction;
    }
    let Command::Acquire(args) = &cli.command else {
        return Err(error::usage(
            "the keeper's brief is not an acquire command line",
        ));
    };
    keeper::keep(&config, args, brief)
}
