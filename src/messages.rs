//! Every line for humans on stderr, in one place: what each kind of line looks like, and what
//! `-q` and `-v` do to it.
//!
//! Layer 4, above `config` (whose `quiet` and `verbose` it reads) and below every module that
//! has something to say, from `client` up; it uses only `cli`, `config`, `error`, `exit`,
//! `printable`, and writes through its own `eline!`. Nothing else in `src/` writes to stderr.
//!
//! The rule, decided here and nowhere else ([`shown`]):
//!
//! | kind | what it is | `-q` | `-v` |
//! |---|---|---|---|
//! | [`notice`] | what redlock did or is doing: a busy lock, a wait given up on a signal or still retrying, a node that missed a release, a second Ctrl-C | silenced | shown |
//! | [`progress`] | what a waiter waits for: on a terminal one line redrawn in place, elsewhere a line now and then, and how the wait ended | silenced | shown |
//! | [`warning`] | `warning: ...`, a setup that works but is risky: a short TTL, a server that evicts keys with a TTL, a password file others can read | silenced | shown |
//! | [`log`] | what only `-v` adds: connections, round trips, why a helper thread gave up | not shown | shown |
//! | [`alert`] | a lock that may not have been exclusive, or a failure the exit status does not tell: a lock lost or not confirmed to the end, a quorum node that restarted while the lock was held, a renewal thread that could not start, a queue that could not be left, a token nobody received | shown | shown |
//! | [`outcome`] | what the command is for, on stderr: whom `release --force` evicted | shown | shown |
//! | [`report_error`], [`usage_error`] | the final error, one line | shown | shown |
//!
//! So `-q` keeps exactly what the `--quiet` help promises: errors, and whom `release --force`
//! evicted. A notice or a warning repeats what the exit status says, or a risk the user may
//! already have accepted; an alert is about the lock's safety, which a script that asked for
//! quiet still needs to hear about (it is what keeps a lost lock from passing for a success).
//!
//! A progress line drawn on a terminal has no newline: every other line clears it first (it
//! would otherwise be appended to it), and [`clear_progress`] removes it when the wait is over.
//!
//! A line never panics on a closed or broken stderr (`eline!`), and text that
//! came from outside (a server, another client, the command line) goes through
//! [`printable`] first.

/// `eprintln!` that never panics, for this module (the one that writes lines for humans to
/// stderr, and knows what `-q` and `-v` do to them): a closed or broken stderr (the reader of a
/// pipe went away) must not turn an outcome into a crash, or a held lock into one that is never
/// released.
macro_rules! eline {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

use std::fmt::Display;
use std::io::{IsTerminal, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};

use clap::error::ErrorKind;

use crate::cli::GlobalArgs;
use crate::config::Config;
use crate::exit;
use crate::printable::printable;
use crate::{cli, error};

/// The kinds of line, as the table in the module doc lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Notice,
    Progress,
    Warning,
    Log,
    Alert,
    Outcome,
}

/// Whether a line of `kind` is printed under `-q` (`quiet`) and `-v` (`verbose`): the rule of
/// the module doc. (clap refuses `-q` with `-v`; were both set, `-q` would win for notices and
/// warnings, `-v` for logs.)
fn shown(kind: Kind, quiet: bool, verbose: bool) -> bool {
    match kind {
        Kind::Notice | Kind::Progress | Kind::Warning => !quiet,
        Kind::Log => verbose,
        Kind::Alert | Kind::Outcome => true,
    }
}

/// Prints `redlock: {text}` if a line of `kind` is shown.
fn emit(kind: Kind, quiet: bool, verbose: bool, text: impl Display) {
    if shown(kind, quiet, verbose) {
        clear_progress();
        eline!("redlock: {text}");
    }
}

/// A progress line is drawn on the terminal now, without a newline.
static DRAWN: AtomicBool = AtomicBool::new(false);

/// Whether stderr is a terminal (progress is then redrawn in place).
pub fn stderr_is_terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// What a waiter waits for; `-q` silences it. On a `terminal`, replaces the line drawn before
/// (carriage return, the text cut to the terminal's width, erase to the end of the line) and
/// leaves the cursor on it; elsewhere, a line of its own.
pub fn progress(config: &Config, text: &str, terminal: bool) {
    if !shown(Kind::Progress, config.quiet, config.verbose) {
        return;
    }
    if !terminal {
        emit(Kind::Progress, config.quiet, config.verbose, text);
        return;
    }
    let line = fit(&format!("redlock: {text}"), terminal_width());
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "\r{line}{CLEAR_TO_END}").and_then(|()| err.flush());
    DRAWN.store(true, Ordering::SeqCst);
}

/// How many columns a progress line's text has on this terminal (after "redlock: ", and less the
/// last column, as [`progress`] draws it).
pub fn progress_room() -> usize {
    terminal_width().saturating_sub(1 + "redlock: ".len())
}

/// Removes a progress line drawn on the terminal, if there is one: the next line starts clean.
pub fn clear_progress() {
    if DRAWN.swap(false, Ordering::SeqCst) {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{CLEAR_TO_END}").and_then(|()| err.flush());
    }
}

/// ANSI "erase in line", from the cursor to the end.
const CLEAR_TO_END: &str = "\x1b[K";

/// The terminal's width in columns (80 when the terminal does not say).
fn terminal_width() -> usize {
    match crate::os::terminal_size(std::io::stderr()).1 {
        0 => 80,
        n => usize::from(n),
    }
}

/// `text` cut to fit in `width` columns, less one (a line that fills the last column makes some
/// terminals wrap, and a redraw would then start on the wrong line), ending in `…` if cut.
fn fit(text: &str, width: usize) -> String {
    use unicode_width::UnicodeWidthChar;
    let room = width.saturating_sub(1);
    if unicode_width::UnicodeWidthStr::width(text) <= room {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        // Keep a column for the ellipsis.
        if used + w + 1 > room {
            break;
        }
        out.push(c);
        used += w;
    }
    if room > 0 {
        out.push('…');
    }
    out
}

/// What redlock did or is doing; `-q` silences it.
pub fn notice(config: &Config, text: impl Display) {
    emit(Kind::Notice, config.quiet, config.verbose, text);
}

/// `warning: {text}`, a risky setup that still works; `-q` silences it.
pub fn warning(config: &Config, text: impl Display) {
    emit(
        Kind::Warning,
        config.quiet,
        config.verbose,
        format_args!("warning: {text}"),
    );
}

/// A [`warning`] about the options themselves, found while the [`Config`] is being made (so the
/// flags say whether `-q` was given).
pub fn option_warning(args: &GlobalArgs, text: impl Display) {
    emit(
        Kind::Warning,
        args.quiet,
        args.verbose,
        format_args!("warning: {text}"),
    );
}

/// What only `-v` adds. The text is made only then: round trips are logged on the hot path.
pub fn log<D: Display>(config: &Config, text: impl FnOnce() -> D) {
    if shown(Kind::Log, config.quiet, config.verbose) {
        clear_progress();
        eline!("redlock: {}", text());
    }
}

/// The lock may not have been exclusive, or something failed that the exit status does not
/// tell: shown whatever `-q` says. It takes no [`Config`], so that no flag can ever silence it.
pub fn alert(text: impl Display) {
    emit(Kind::Alert, false, false, text);
}

/// What the command is for, when it goes to stderr (whom `release --force` evicted): shown
/// whatever `-q` says (no [`Config`], as for [`alert`]).
pub fn outcome(text: impl Display) {
    emit(Kind::Outcome, false, false, text);
}

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
    clear_progress();
    eline!("redlock: {}", printable(&message.join("; ")));
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
            eline!("redlock: cannot write to stdout: {err}");
            return exit::IO_ERROR;
        }
        return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
            exit::USAGE
        } else {
            exit::OK
        };
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let cmd = cli::command();
    let sub = cli::subcommand_in(&cmd, &args);
    let help = match &sub {
        Some(sub) => format!("redlock {sub} --help"),
        None => "redlock --help".to_string(),
    };
    if let Some(line) = missing_duration(e, &cmd, sub.as_deref(), &args) {
        eline!("redlock: {line} (see '{help}')");
        return exit::USAGE;
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
    eline!("redlock: {} (see '{help}')", printable(line));
    exit::USAGE
}

/// A duration option whose value was left out, so that it took the next argument, an option
/// (`exec k -w -- cmd`): said as the missing value it is. (Duration options take values that
/// start with `-`, so that a negative one is refused by name rather than taken for an option;
/// before, this said "'--' is negative".) clap reports it as the option's invalid value, or, when
/// the option it took had a value of its own (`acquire k -w --while-pid 812`), as that value
/// being unexpected: `args` (the command line) tells that case.
fn missing_duration(
    e: &clap::Error,
    cmd: &clap::Command,
    sub: Option<&str>,
    args: &[std::ffi::OsString],
) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let scope = sub.and_then(|s| cmd.find_subcommand(s)).unwrap_or(cmd);
    // A duration option, and a value shaped like an option (not a negative number).
    let stolen = |option: &clap::Arg, value: &str| {
        let mut chars = value.chars();
        chars.next() == Some('-')
            && chars
                .next()
                .is_some_and(|c| c == '-' || c.is_ascii_alphabetic())
            && option
                .get_value_names()
                .and_then(|names| names.first())
                .is_some_and(|name| name.as_str() == "DUR")
    };
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let (option, value) = match e.kind() {
        ErrorKind::ValueValidation => {
            let Some(ContextValue::String(value)) = e.get(ContextKind::InvalidValue) else {
                return None;
            };
            let long = arg.split(' ').next()?.strip_prefix("--")?;
            let option = scope.get_arguments().find(|a| a.get_long() == Some(long))?;
            (option, value.clone())
        }
        // The option's stolen value is followed by the argument clap did not expect.
        ErrorKind::UnknownArgument => args.windows(3).find_map(|w| {
            let [opt, value, unexpected] = w else {
                return None;
            };
            let opt = opt.to_str()?;
            let short = |a: &clap::Arg| a.get_short().map(|c| format!("-{c}"));
            let option = scope.get_arguments().find(|a| {
                opt.strip_prefix("--")
                    .is_some_and(|l| a.get_long() == Some(l))
                    || short(a).as_deref() == Some(opt)
            })?;
            let value = value.to_str()?;
            (unexpected.to_str()? == arg.as_str() && stolen(option, value))
                .then(|| (option, value.to_string()))
        })?,
        _ => return None,
    };
    if !stolen(option, &value) {
        return None;
    }
    let long = option.get_long()?;
    let (names, example) = match option.get_short() {
        Some(short) => (format!("-{short}/--{long}"), format!("-{short} 30s")),
        None => (format!("--{long}"), format!("--{long} 30s")),
    };
    Some(format!(
        "{names} needs a duration, e.g. {example}; the next argument, '{}', is not one",
        printable(&value)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule of the module doc, row by row: fails if `-q` stops silencing a notice or a
    /// warning, silences an alert or the outcome of `--force`, or if a log shows without `-v`.
    #[test]
    fn quiet_silences_notices_and_warnings_and_verbose_adds_logs() {
        use Kind::*;
        // (kind, shown by default, with -q, with -v)
        for (kind, plain, quiet, verbose) in [
            (Notice, true, false, true),
            (Progress, true, false, true),
            (Warning, true, false, true),
            (Log, false, false, true),
            (Alert, true, true, true),
            (Outcome, true, true, true),
        ] {
            assert_eq!(shown(kind, false, false), plain, "{kind:?} by default");
            assert_eq!(shown(kind, true, false), quiet, "{kind:?} with -q");
            assert_eq!(shown(kind, false, true), verbose, "{kind:?} with -v");
        }
    }

    /// A progress line fits the terminal, with wide characters counted as two columns.
    #[test]
    fn progress_is_cut_to_the_terminal_width() {
        assert_eq!(fit("waiting for 'k'", 80), "waiting for 'k'");
        assert_eq!(fit("waiting for 'k'", 10), "waiting …");
        assert_eq!(fit("ab", 3), "ab");
        assert_eq!(fit("abc", 3), "a…");
        // 界 is two columns wide: 4 columns of room hold one of them and the ellipsis.
        assert_eq!(fit("界界界", 5), "界…");
        assert_eq!(fit("abc", 0), "");
    }
}
