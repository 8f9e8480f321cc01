//! Running a file's examples: one bash session per file against its own redis-server, every
//! command followed by a marker line carrying its exit status, so one read of the session's
//! output splits into each command's output.

use std::fmt::Write as _;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{self, RedisServer};

use super::expect;
use super::markdown::{self, Block, Kind};

/// How long the examples of one file may take in all.
const BOUND: Duration = Duration::from_secs(120);

/// The scripts the examples call as the user's own commands. Each prints nothing and succeeds.
pub const PLACEHOLDERS: &[&str] = &[
    "backup.sh",
    "deploy.sh",
    "migrate.sh",
    "build.sh",
    "report.sh",
    "sync.sh",
    "test.sh",
    "release.sh",
    "job.sh",
    "sign.sh",
];

/// Where a marker line starts: a record separator no example prints.
const MARK: &str = "\u{1e}DOC ";

/// What one step of the session must do.
enum Step {
    /// A console command: its output and status compared.
    Command(markdown::Command),
    /// A script or a crontab entry: must exit 0.
    Run { line: usize, what: String },
}

/// Runs every runnable example of `path` and returns what went wrong, one message per failure.
pub fn run(path: &Path, markdown: &str, server: &RedisServer) -> Vec<String> {
    let (blocks, mut failures) = markdown::blocks(markdown);
    let scratch = tempfile::tempdir().unwrap();
    let work = scratch.path().join("work");
    let scripts = scratch.path().join("blocks");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&scripts).unwrap();
    for name in PLACEHOLDERS {
        let file = work.join(name);
        std::fs::write(&file, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    let mut session = String::from("exec </dev/null 2>&1\n");
    let mut steps = Vec::new();
    for block in &blocks {
        if let Err(problem) = add(block, &scripts, &mut session, &mut steps) {
            failures.push(problem);
        }
    }
    let session_file = scripts.join("session.bash");
    std::fs::write(&session_file, &session).unwrap();

    let output = match execute(&session_file, &work, server) {
        Ok(output) => output,
        Err(e) => {
            failures.push(e);
            return failures;
        }
    };
    let mut parts = output.split(MARK);
    let mut pending = parts.next().unwrap_or("").to_string();
    for (i, step) in steps.iter().enumerate() {
        let Some(part) = parts.next() else {
            failures.push(format!(
                "{}: the session ended before this example (output so far ends with: {})",
                line_of(step),
                tail(&pending)
            ));
            break;
        };
        let (marker, rest) = part.split_once('\n').unwrap_or((part, ""));
        let printed = pending.strip_suffix('\n').unwrap_or(&pending);
        let status = marker
            .strip_prefix(&format!("{i} "))
            .and_then(|s| s.trim_end_matches('\u{1e}').parse::<i32>().ok());
        match (step, status) {
            (_, None) => failures.push(format!("{}: a broken marker {marker:?}", line_of(step))),
            (Step::Command(c), Some(status)) => {
                if status != c.status || !expect::matches(&c.expected, printed) {
                    failures.push(format!(
                        "line {}: $ {}\n  expected (status {}):\n{}\n  got (status {status}):\n{}",
                        c.line,
                        c.text,
                        c.status,
                        indent(&c.expected.join("\n")),
                        indent(printed)
                    ));
                }
            }
            (Step::Run { line, what }, Some(status)) => {
                if status != 0 {
                    failures.push(format!(
                        "line {line}: {what} exited {status}:\n{}",
                        indent(printed)
                    ));
                }
            }
        }
        pending = rest.to_string();
    }
    let _ = path;
    failures
}

/// Adds one block's steps to the session script.
fn add(
    block: &Block,
    dir: &Path,
    session: &mut String,
    steps: &mut Vec<Step>,
) -> Result<(), String> {
    let bin = common::bin();
    match block.kind {
        Kind::Text => {
            if let Some(i) = block.lines.iter().position(|l| runs_redlock(l)) {
                return Err(format!(
                    "line {}: a text block runs redlock; make it console, sh or parse-only",
                    block.line + i
                ));
            }
        }
        Kind::ParseOnly => parse_all(block, &block.text())?,
        Kind::Console => {
            for command in markdown::commands(block)? {
                let text = command.text.replace("/usr/bin/redlock", bin);
                let _ = writeln!(session, "{text}");
                mark(session, steps.len());
                steps.push(Step::Command(command));
            }
        }
        Kind::Script => {
            let file = dir.join(format!("block-{}.sh", block.line));
            std::fs::write(&file, block.text().replace("/usr/bin/redlock", bin)).unwrap();
            let _ = writeln!(session, "bash {}", file.display());
            mark(session, steps.len());
            steps.push(Step::Run {
                line: block.line,
                what: "the script".into(),
            });
        }
        Kind::Crontab => {
            for (i, line) in block.lines.iter().enumerate() {
                let entry = line.trim();
                if entry.is_empty() || entry.starts_with('#') || is_cron_variable(entry) {
                    continue;
                }
                let fields = if entry.starts_with('@') { 1 } else { 5 };
                let command: String = entry
                    .splitn(fields + 1, char::is_whitespace)
                    .nth(fields)
                    .ok_or_else(|| format!("line {}: not a crontab entry", block.line + i))?
                    .to_string();
                let file = dir.join(format!("cron-{}.sh", block.line + i));
                std::fs::write(&file, command.replace("/usr/bin/redlock", bin)).unwrap();
                let _ = writeln!(session, "sh {}", file.display());
                mark(session, steps.len());
                steps.push(Step::Run {
                    line: block.line + i,
                    what: "the crontab entry".into(),
                });
            }
        }
    }
    if block.kind != Kind::Text && block.kind != Kind::ParseOnly {
        // What runs is parsed too, so a bad flag is named by the parser, not by a status.
        parse_all(block, &block.text())?;
    }
    Ok(())
}

/// Whether a line of a text block is a command someone would copy: it starts with redlock (or
/// `$ redlock`) and a subcommand or a flag follows. (A sentence like "Under test: redlock 0.1.0"
/// is not.)
fn runs_redlock(line: &str) -> bool {
    let line = line.trim_start();
    let line = line.strip_prefix("$ ").unwrap_or(line);
    let Some(args) = markdown::invocations(line).into_iter().next() else {
        return false;
    };
    let starts = line.starts_with("redlock ") || line.starts_with("/usr/bin/redlock ");
    let subcommands = redlock::cli::command();
    starts
        && args.first().is_some_and(|a| {
            a.starts_with('-') || subcommands.get_subcommands().any(|c| c.get_name() == a)
        })
}

fn is_cron_variable(entry: &str) -> bool {
    entry
        .split_once('=')
        .is_some_and(|(name, _)| name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
}

/// Parses every redlock invocation of the block with the binary's own clap definition.
fn parse_all(block: &Block, text: &str) -> Result<(), String> {
    // A session's commands, not the output shown under them; any other block whole.
    let pieces: Vec<(usize, String)> = if block.info.starts_with("console") {
        // A command shown failing with a usage error (`? 2`) is the parser's to refuse.
        markdown::commands(block)?
            .into_iter()
            .filter(|c| c.status != 2)
            .map(|c| (c.line, c.text))
            .collect()
    } else {
        vec![(block.line, text.to_string())]
    };
    for (line, body) in pieces {
        for args in markdown::invocations(&body) {
            let argv = std::iter::once("redlock".to_string()).chain(args.iter().cloned());
            let Err(e) = redlock::cli::command().try_get_matches_from(argv) else {
                continue;
            };
            if matches!(
                e.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) {
                continue;
            }
            let message = e.to_string();
            return Err(format!(
                "line {line}: `redlock {}` does not parse: {}",
                args.join(" "),
                message.lines().next().unwrap_or_default()
            ));
        }
    }
    Ok(())
}

fn mark(session: &mut String, index: usize) {
    let _ = writeln!(session, "printf '\\n\\036DOC %d %d\\036\\n' {index} \"$?\"");
}

/// Runs the session in its own process group, killed (with anything it left behind) when it
/// ends or overruns [`BOUND`].
fn execute(session: &Path, work: &Path, server: &RedisServer) -> Result<String, String> {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("bash");
    common::clean_env(&mut cmd);
    common::default_signals(&mut cmd);
    let bin_dir = Path::new(common::bin()).parent().unwrap().to_path_buf();
    let mut path = vec![bin_dir];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    cmd.arg("--noprofile")
        .arg("--norc")
        .arg(session)
        .current_dir(work)
        .env("PATH", std::env::join_paths(path).unwrap())
        .env("HOME", work)
        .env("REDIS_URL", server.url())
        .env("LC_ALL", "C.UTF-8")
        .env_remove("TERM")
        .env_remove("COLUMNS")
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().map_err(|e| format!("cannot start bash: {e}"))?;
    let pgid = child.id() as i32;
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    });
    let overran = !common::wait_for(|| child.try_wait().ok().flatten().is_some(), BOUND);
    // Whatever the session left running (a background job) goes with it.
    // SAFETY: kill(2) of our own child's process group.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let _ = child.wait();
    let output = reader.join().unwrap();
    if overran {
        return Err(format!(
            "the examples ran longer than {BOUND:?}; output so far ends with: {}",
            tail(&output)
        ));
    }
    Ok(output)
}

fn line_of(step: &Step) -> String {
    match step {
        Step::Command(c) => format!("line {}: $ {}", c.line, c.text),
        Step::Run { line, what } => format!("line {line}: {what}"),
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    indent(&lines[lines.len().saturating_sub(10)..].join("\n"))
}
