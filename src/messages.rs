//! Every line for humans on stderr, in one place: the final error line and usage errors.
//!
//! A line never panics on a closed or broken stderr ([`eline!`](crate::eline)), and text that
//! came from outside (a server, another client, the command line) goes through
//! [`printable`] first.

use clap::error::ErrorKind;

use crate::exit;
use crate::printable::printable;
use crate::{cli, error};

/// Prints a command's error as one line, `redlock: CAUSE; CAUSE`, and returns its exit status.
pub fn report_error(err: &anyhow::Error) -> u8 {
    // One line, whatever a cause's text holds (a driver's message may span several).
    let message = format!("{err:#}");
    let message: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    // A cause may quote what a server or another client wrote: never for the terminal.
    crate::eline!("redlock: {}", printable(&message.join("; ")));
    error::exit_code(err)
}

/// Help and version go to stdout as clap renders them; usage errors become one line on stderr.
pub fn usage_error(e: &clap::Error) -> u8 {
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
        || matches!(
            e.kind(),
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        )
    {
        // A help nobody can read (a full disk) is an output error; a reader that stopped
        // reading (`| head`) is not.
        use std::io::Write as _;
        // (The help clap shows for a missing subcommand goes to stderr: a usage error.)
        if let Err(err) = e.print().and_then(|()| std::io::stdout().flush())
            && err.kind() != std::io::ErrorKind::BrokenPipe
            && !e.use_stderr()
        {
            crate::eline!("redlock: cannot write to stdout: {err}");
            return exit::IO_ERROR;
        }
        return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            exit::USAGE
        } else {
            exit::OK
        };
    }
    let rendered = e.render().to_string();
    let first: Vec<&str> = rendered
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let mut line = first.join(" ");
    // clap's "did you mean" hint comes in a paragraph of its own: keep it on our one line (the
    // first tip only: a second one is how to pass the typo as a value, which is noise here).
    if let Some(tip) = rendered
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("tip: "))
    {
        line.push_str("; ");
        line.push_str(tip);
    }
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let help = match cli::subcommand_in(&cli::command(), &args) {
        Some(sub) => format!("redlock {sub} --help"),
        None => "redlock --help".to_string(),
    };
    crate::eline!("redlock: {} (see '{help}')", printable(line));
    exit::USAGE
}
