//! redlock: a distributed mutual-exclusion lock for shell scripts, cron jobs and CI, on Redis.
//!
//! The binary (`main.rs`) parses the command line and calls [`run`]; everything else lives here so
//! that tests can use the lock protocol directly.

/// `eprintln!` that never panics: every line for humans goes to stderr through here, and a
/// closed or broken stderr (the reader of a pipe went away) must not turn an outcome into a
/// crash, or a held lock into one that is never released.
#[macro_export]
macro_rules! eline {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

pub mod cli;
pub mod client;
mod commands;
pub mod complete;
pub mod config;
pub mod error;
mod exec;
pub mod exit;
pub mod lock;
mod notify;
pub mod output;
mod owner;
pub mod printable;
pub mod quorum;
mod redact;
mod scripts;
pub mod signals;
mod spawn;
pub mod store;
mod wait;

use anyhow::Result;

use cli::{Cli, Command};
use config::{Config, Env};

/// Runs a parsed command line; returns the exit status for outcomes that are not errors.
pub fn run(cli: Cli) -> Result<u8> {
    let mut config = Config::resolve(&cli.global, &Env::from_process())?;
    if let Command::Acquire(cli::AcquireArgs { lock, .. })
    | Command::Exec(cli::ExecArgs { lock, .. }) = &cli.command
    {
        config.allow_eviction = lock.allow_eviction;
    }
    match &cli.command {
        Command::Acquire(args) => commands::acquire(&config, args),
        Command::Release(args) => commands::release(&config, args),
        Command::Extend(args) => commands::extend(&config, args),
        Command::Status(args) => commands::status(&config, args),
        Command::Exec(args) => exec::run(&config, args),
    }
}
