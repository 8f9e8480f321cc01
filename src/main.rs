//! The `redlock` binary: parse, dispatch, report, exit. The work is in the library.

use std::process::ExitCode;

use clap::error::ErrorKind;
use redlock::printable::printable;
use redlock::{cli, error, exit, run};

fn main() -> ExitCode {
    // A shell asking for completions (REDLOCK_COMPLETE set) is answered here, and we exit.
    redlock::complete::answer_shell();
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            // One line, whatever a cause's text holds (a driver's message may span several).
            let message = format!("{err:#}");
            let message: Vec<&str> = message
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            // A cause may quote what a server or another client wrote: never for the terminal.
            redlock::eline!("redlock: {}", printable(&message.join("; ")));
            ExitCode::from(error::exit_code(&err))
        }
    }
}

/// Help and version go to stdout as clap renders them; usage errors become one line on stderr.
fn usage_error(e: &clap::Error) -> ExitCode {
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
            redlock::eline!("redlock: cannot write to stdout: {err}");
            return ExitCode::from(exit::IO_ERROR);
        }
        return ExitCode::from(
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                exit::USAGE
            } else {
                exit::OK
            },
        );
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
    redlock::eline!("redlock: {} (see '{help}')", printable(line));
    ExitCode::from(exit::USAGE)
}
