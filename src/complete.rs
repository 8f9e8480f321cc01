//! Shell completion that knows the lock names on the server.
//!
//! `REDLOCK_COMPLETE=bash redlock` prints a completion function for bash (also zsh, fish, elvish,
//! powershell) that calls `redlock` back with `REDLOCK_COMPLETE` set and the words typed so far;
//! clap_complete's engine then completes subcommands, flags and values from the CLI definition
//! and asks [`lock_names`] for the name of a lock: every name the server knows
//! ([`lock::Names::Known`]: held, waited for, or with a record or a history), so that a lock free
//! right now still completes for `log`, `wait` or the next `exec`. (The variable is ours rather
//! than clap's default `COMPLETE`, which is too common a name to take over.)
//!
//! The lookup runs while a person waits at a prompt, so it must never hang the shell: it honours
//! the URL, prefix and TLS settings typed on the command line or set in the environment, but
//! connects and reads with [`TIMEOUT`] whatever the timeouts say, stops scanning after
//! [`BUDGET`], runs on a thread of its own that is abandoned when [`LIMIT`] has passed, and offers
//! nothing (exit 0, no message) on any error. It uses SCAN, never KEYS, and returns at most
//! [`CAP`] names. With several `--url` (a quorum) it asks the first server, which keeps the queue.
//!
//! Layer 13 of the list in `lib.rs`.

use std::ffi::{OsStr, OsString};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::{CommandFactory, FromArgMatches};
use clap_complete::{ArgValueCompleter, CompleteEnv, CompletionCandidate};

use crate::cli::{Cli, GlobalArgs};
use crate::client::Redis;
use crate::config::{Config, Env, Servers};
use crate::lock;

/// The variable that turns a run into a completion request.
pub const VAR: &str = "REDLOCK_COMPLETE";
/// Connect and read timeout of the lookup.
const TIMEOUT: Duration = Duration::from_millis(300);
/// No SCAN call starts after this much time.
const BUDGET: Duration = Duration::from_millis(700);
/// The answer is given up, whatever the lookup is doing, after this much time.
const LIMIT: Duration = Duration::from_millis(1000);
/// The most names offered.
const CAP: usize = 200;

/// The arguments that name an existing lock, by subcommand.
const LOCK_ARGS: [(&str, &str); 7] = [
    ("acquire", "key"),
    ("release", "key"),
    ("extend", "key"),
    ("exec", "key"),
    ("status", "keys"),
    ("log", "key"),
    ("wait", "key"),
];

/// Answers a completion request and exits when `REDLOCK_COMPLETE` is set; returns otherwise.
pub fn answer_shell() {
    CompleteEnv::with_factory(command).var(VAR).complete();
}

/// The CLI definition, with lock names completed from the server.
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    for (sub, arg) in LOCK_ARGS {
        // Not `mut_arg`: it moves the argument to the end, which renumbers the positionals.
        cmd = cmd.mut_subcommand(sub, |s| {
            s.mut_args(|a| {
                if a.get_id() == arg {
                    a.add(ArgValueCompleter::new(lock_names))
                } else {
                    a
                }
            })
        });
    }
    cmd
}

/// The lock names that start with `current`, or none if the server does not answer in time.
fn lock_names(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(start) = current.to_str().map(str::to_string) else {
        return Vec::new();
    };
    // The words typed so far come after the `--` that the shell function passes.
    let words: Vec<OsString> = std::env::args_os()
        .skip_while(|a| a != "--")
        .skip(1)
        .collect();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(lookup(&words, &start));
    });
    // Past the limit the thread is left behind; the process exits right after we return.
    match rx.recv_timeout(LIMIT) {
        Ok(Ok(names)) => names.into_iter().map(CompletionCandidate::new).collect(),
        _ => Vec::new(),
    }
}

fn lookup(words: &[OsString], start: &str) -> Result<Vec<String>> {
    let deadline = Instant::now() + BUDGET;
    // The command line is unfinished (a missing token, a value still to type): take what parses.
    let matches = Cli::command()
        .ignore_errors(true)
        .try_get_matches_from(words)?;
    let matches = matches.subcommand().map_or(&matches, |(_, m)| m);
    let args = GlobalArgs::from_arg_matches(matches)?;
    let warn = &mut |w| crate::messages::option_warning(&args, w);
    let mut config = Config::resolve(&args, &Env::from_process(), warn)?;
    config.connect_timeout = config.connect_timeout.min(TIMEOUT);
    config.io_timeout = config.io_timeout.min(TIMEOUT);
    config.quiet = true;
    config.verbose = false;
    let mut redis = match config.servers {
        Servers::Quorum(_) => Redis::connect_node(&config, 0)?,
        _ => Redis::connect(&config)?,
    };
    let prefix = config.prefix.clone();
    if !redis.is_cluster() {
        return lock::scan_names(
            &mut redis,
            &prefix,
            lock::Names::Known,
            start,
            CAP,
            Some(deadline),
        );
    }
    // SCAN sees one node's keys: ask every master.
    let mut names = Vec::new();
    for mut master in redis.cluster_masters()? {
        names.extend(lock::scan_names(
            &mut master,
            &prefix,
            lock::Names::Known,
            start,
            CAP,
            Some(deadline),
        )?);
    }
    names.sort();
    names.dedup();
    names.truncate(CAP);
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lock_argument_exists() {
        // mut_subcommand panics on a subcommand that does not exist; the arguments are checked here.
        let cmd = command();
        cmd.clone().debug_assert();
        for (sub, arg) in LOCK_ARGS {
            let sub = cmd.find_subcommand(sub).unwrap();
            assert!(sub.get_arguments().any(|a| a.get_id() == arg), "{arg}");
        }
    }

    #[test]
    fn every_subcommand_that_takes_a_lock_name_completes_it() {
        for sub in Cli::command().get_subcommands() {
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "key" | "keys") {
                    let listed = LOCK_ARGS.contains(&(sub.get_name(), id));
                    assert!(listed, "{} {id} is not in LOCK_ARGS", sub.get_name());
                }
            }
        }
    }
}
