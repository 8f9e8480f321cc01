//! Shell completions and man pages, generated from the clap definition and committed.
//!
//! `completions/` and `man/` hold nothing but the output of this file: every completion script
//! and man page is rendered into memory from `src/cli.rs` (and the exit-status table from
//! `src/exit.rs`, the environment variables from `src/env.rs`) and compared with the committed
//! copy. A stale, missing or unexpected file fails
//! the test with the one command that refreshes them all:
//!
//! ```text
//! REDLOCK_BLESS=1 cargo test --test generated
//! ```
//!
//! With `REDLOCK_BLESS` set, the test writes the files (and removes files that are no longer
//! generated) instead of failing. The output must be deterministic: no dates, and the version
//! is the crate's own `CARGO_PKG_VERSION`.
//!
//! The man pages are clap_mangen's NAME, SYNOPSIS, DESCRIPTION, OPTIONS (and SUBCOMMANDS) with
//! hand-written sections appended, in the manner of ripgrep's and xh's man templates. The hand-
//! written text describes behaviour that `src/cli.rs` cannot express (environment, signals,
//! exit status); keep it consistent with the code when either changes.

// These files depend only on clap and std (cli.rs also on humantime for its duration parser), so
// the test renders exactly the parser users run. Not every item is used here.
#[allow(dead_code)]
#[path = "../src/cli.rs"]
mod cli;
#[allow(dead_code)]
#[path = "../src/env.rs"]
mod env;
#[allow(dead_code)]
#[path = "../src/exit.rs"]
mod exit;
// The rule for names (`--pool`'s), std-only too.
#[allow(dead_code)]
#[path = "../src/printable.rs"]
mod printable;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::{Generator, Shell};
use clap_mangen::Man;
use clap_mangen::roff::{Inline, Roff, bold, italic, roman};

const BLESS_VAR: &str = "REDLOCK_BLESS";
const BLESS_COMMAND: &str = "REDLOCK_BLESS=1 cargo test --test generated";
const GENERATED_DIRS: &[&str] = &["completions", "man"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn blessing() -> bool {
    std::env::var_os(BLESS_VAR).is_some_and(|v| !v.is_empty() && v != "0")
}

#[test]
fn cli_definition_is_consistent() {
    cli::Cli::command().debug_assert();
    // The parser `redlock` runs: the same, with the global options hidden in subcommand help.
    cli::command().debug_assert();
}

#[test]
fn generated_files_are_fresh() {
    let root = root();
    let expected = generated_files();
    let bless = blessing();
    let mut problems = Vec::new();

    for (path, contents) in &expected {
        let full = root.join(path);
        let committed = fs::read_to_string(&full).ok();
        if committed.as_deref() == Some(contents.as_str()) {
            continue;
        }
        if bless {
            fs::create_dir_all(full.parent().unwrap()).unwrap();
            fs::write(&full, contents).unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
            eprintln!("wrote {path}");
        } else {
            problems.push(match committed {
                None => format!("{path}: missing"),
                Some(old) => format!("{path}: stale ({})", first_difference(&old, contents)),
            });
        }
    }

    let wanted: BTreeSet<&str> = expected.iter().map(|(p, _)| p.as_str()).collect();
    for extra in committed_files(&root) {
        if wanted.contains(extra.as_str()) {
            continue;
        }
        if bless {
            fs::remove_file(root.join(&extra))
                .unwrap_or_else(|e| panic!("cannot remove {extra}: {e}"));
            eprintln!("removed {extra}");
        } else {
            problems.push(format!("{extra}: no longer generated"));
        }
    }

    assert!(
        problems.is_empty(),
        "the generated completions and man pages do not match src/cli.rs and src/exit.rs:\n  \
         {}\nRefresh them with:\n    {BLESS_COMMAND}\nthen review and commit the changes.",
        problems.join("\n  ")
    );
}

/// The README (for a new user) and docs/operations.md (with the errors behind each code) carry
/// the exit table as src/exit.rs renders it.
#[test]
fn the_docs_carry_the_exit_table() {
    let table = exit::markdown_table();
    for doc in ["README.md", "docs/operations.md"] {
        let path = root().join(doc);
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        assert!(
            text.contains(&table),
            "{doc} must contain the exit-status table exactly as src/exit.rs renders it \
             (exit::markdown_table()):\n\n{table}"
        );
    }
}

/// The file of the docs that carries the environment tables.
fn environment_doc() -> PathBuf {
    root().join("docs/operations.md")
}

#[test]
fn the_docs_carry_the_environment_tables() {
    let doc = environment_doc();
    let text =
        fs::read_to_string(&doc).unwrap_or_else(|e| panic!("cannot read {}: {e}", doc.display()));
    for (table, what) in [(env::TABLE, "env::TABLE"), (env::GIVEN, "env::GIVEN")] {
        let table = env::markdown_table(table);
        assert!(
            text.contains(&table),
            "{} must contain the environment table exactly as src/env.rs renders it \
             (env::markdown_table({what})):\n\n{table}",
            doc.display()
        );
    }
}

/// Names of `REDLOCK_*` in `src/` that are no environment variables: the build's commit (a
/// compile-time variable of `build.rs`), the lock scripts' error codes, a unit test's variable.
const NOT_ENVIRONMENT: &[&str] = &[
    "REDLOCK_BUILD",
    "REDLOCK_EVICTS",
    "REDLOCK_REPLICA",
    "REDLOCK_TEST_VAR",
];

/// Every variable the code names (an option's `env`, a name in a string of `src/`) is in the
/// tables of `src/env.rs`, so that `--help`, the man pages and the docs name it: a new variable
/// fails here until it is described there.
#[test]
fn every_variable_the_code_names_is_in_the_environment_tables() {
    let listed: BTreeSet<&str> = env::TABLE
        .iter()
        .chain(env::GIVEN)
        .flat_map(env::Var::each)
        .collect();
    let read: BTreeSet<&str> = env::TABLE.iter().flat_map(env::Var::each).collect();
    let mut cmd = cli::Cli::command();
    cmd.build();
    let mut commands = vec![cmd.clone()];
    commands.extend(cmd.get_subcommands().cloned());
    for c in &commands {
        for arg in c.get_arguments() {
            if let Some(name) = arg.get_env().and_then(|n| n.to_str()) {
                assert!(
                    read.contains(name),
                    "{} reads {name}, which env::TABLE does not list",
                    arg.get_id()
                );
            }
        }
    }
    let mut files = vec![root().join("src")];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap();
        for (i, _) in text.match_indices("\"RE") {
            let name: String = text[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // (`"REDLOCK_"` alone is a prefix, not a name.)
            if (name.starts_with("REDLOCK_") && !name.ends_with('_') || name == "REDIS_URL")
                && !NOT_ENVIRONMENT.contains(&name.as_str())
            {
                assert!(
                    listed.contains(name.as_str()),
                    "{} names {name}, which src/env.rs does not list",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn every_subcommand_has_a_man_page_with_examples() {
    let files = generated_files();
    for sub in cli::Cli::command().get_subcommands() {
        let name = format!("man/redlock-{}.1", sub.get_name());
        let (_, page) = files
            .iter()
            .find(|(p, _)| *p == name)
            .unwrap_or_else(|| panic!("{name} is not generated"));
        for heading in [".SH \"EXIT STATUS\"", ".SH EXAMPLES", ".SH \"SEE ALSO\""] {
            assert!(page.contains(heading), "{name} has no {heading}");
        }
    }
}

/// Every example that names redlock's path names the one the package installs: a crontab line
/// copied with `/usr/local/bin/redlock` failed with "not found" (127), silently on a host
/// without mail.
#[test]
fn examples_use_the_installed_path() {
    for (path, text) in generated_files() {
        assert!(
            !text.contains("/usr/local/bin/redlock"),
            "{path} names /usr/local/bin/redlock; the package installs /usr/bin/redlock"
        );
    }
    let help = cli::command().render_long_help().to_string();
    assert!(!help.contains("/usr/local/bin/redlock"), "{help}");
    for sub in cli::command().get_subcommands_mut() {
        let help = sub.render_long_help().to_string();
        assert!(!help.contains("/usr/local/bin/redlock"), "{help}");
    }
}

/// SYNOPSIS shows what each option takes, and where `exec`'s command goes (clap_mangen's own
/// synopsis lists bare option names, without their arguments or `--`).
#[test]
fn man_synopsis_shows_option_arguments_and_the_command() {
    let files = generated_files();
    let page = |name: &str| {
        let (_, text) = files.iter().find(|(p, _)| p == name).unwrap();
        let start = text.find(".SH SYNOPSIS").unwrap();
        let end = start + 1 + text[start + 1..].find(".SH ").unwrap();
        text[start..end].to_string()
    };
    let exec = page("man/redlock-exec.1");
    for needle in [
        r"[\fB\-\-ttl\fR \fIDUR\fR]",
        r"[\fB\-w\fR|\fB\-\-wait\fR \fIDUR\fR | \fB\-n\fR|\fB\-\-no\-wait\fR]",
        r"\fIKEY\fR \fB\-\-\fR \fICMD\fR [\fIARGS\fR...]",
        r"\fIKEY\fR \fB\-c\fR|\fB\-\-command\fR \fISHELL\-COMMAND\fR",
    ] {
        assert!(exec.contains(needle), "no {needle} in\n{exec}");
    }
    let extend = page("man/redlock-extend.1");
    assert!(
        extend.contains(r"\fB\-\-ttl\fR \fIDUR\fR \fIKEY\fR [\fITOKEN\fR]"),
        "{extend}"
    );
    let root = page("man/redlock.1");
    assert!(
        root.contains(r"[\fB\-u\fR|\fB\-\-url\fR \fIURL\fR]..."),
        "{root}"
    );
}

/// Describes where `new` first departs from `old`, so the failure says more than "differs".
fn first_difference(old: &str, new: &str) -> String {
    let (mut old_lines, mut new_lines) = (old.lines(), new.lines());
    for n in 1.. {
        match (old_lines.next(), new_lines.next()) {
            (Some(a), Some(b)) if a == b => {}
            (a, b) => {
                return format!(
                    "line {n}: committed {:?}, generated {:?}",
                    a.unwrap_or("<end>"),
                    b.unwrap_or("<end>")
                );
            }
        }
    }
    unreachable!()
}

/// Every file under the generated directories, as `/`-separated paths relative to `root`.
fn committed_files(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for dir in GENERATED_DIRS {
        let Ok(entries) = fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_file() {
                found.push(format!("{dir}/{}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found.sort();
    found
}

/// Every generated file: `(path relative to the crate root, contents)`.
fn generated_files() -> Vec<(String, String)> {
    let mut files = Vec::new();

    for shell in [
        Shell::Bash,
        Shell::Zsh,
        Shell::Fish,
        Shell::Elvish,
        Shell::PowerShell,
    ] {
        let mut cmd = cli::Cli::command();
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut cmd, "redlock", &mut buf);
        let text = String::from_utf8(buf).expect("completions are UTF-8");
        files.push((format!("completions/{}", shell.file_name("redlock")), text));
    }

    // `redlock help` would get a page of its own and a SUBCOMMANDS entry; `--help` says the same.
    let mut cmd = cli::Cli::command().disable_help_subcommand(true);
    cmd.build();
    let subcommand_pages: Vec<String> = cmd
        .get_subcommands()
        .map(|sub| format!("redlock-{}(1)", sub.get_name()))
        .collect();
    let mut root_see_also = vec!["flock(1)"];
    root_see_also.extend(subcommand_pages.iter().map(String::as_str));
    files.push((
        "man/redlock.1".into(),
        man_page(&cmd, root_sections, &root_see_also),
    ));
    for sub in cmd.get_subcommands() {
        let (extra, see_also): (fn(&mut Roff), &[&str]) = match sub.get_name() {
            "acquire" => (
                acquire_sections,
                &[
                    "redlock(1)",
                    "redlock-release(1)",
                    "redlock-extend(1)",
                    "redlock-exec(1)",
                ],
            ),
            "release" => (
                release_sections,
                &["redlock(1)", "redlock-acquire(1)", "redlock-status(1)"],
            ),
            "extend" => (
                extend_sections,
                &["redlock(1)", "redlock-acquire(1)", "redlock-exec(1)"],
            ),
            "status" => (
                status_sections,
                &["redlock(1)", "redlock-acquire(1)", "redlock-release(1)"],
            ),
            "log" => (
                log_sections,
                &["redlock(1)", "redlock-status(1)", "redlock-exec(1)"],
            ),
            "wait" => (
                wait_sections,
                &["redlock(1)", "redlock-status(1)", "redlock-exec(1)"],
            ),
            "exec" => (
                exec_sections,
                &[
                    "redlock(1)",
                    "redlock-acquire(1)",
                    "flock(1)",
                    "systemd.kill(5)",
                ],
            ),
            other => panic!("no hand-written man sections for subcommand {other}"),
        };
        files.push((
            format!("man/redlock-{}.1", sub.get_name()),
            man_page(sub, extra, see_also),
        ));
    }
    files
}

// ---------------------------------------------------------------------------------------------
// Man pages

/// clap_mangen's sections, then the hand-written ones, VERSION, and SEE ALSO last.
fn man_page(cmd: &clap::Command, hand_written: fn(&mut Roff), see_also_pages: &[&str]) -> String {
    let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_owned();
    let man = Man::new(cmd.clone())
        .title(name.to_uppercase())
        .source(format!("redlock {}", env!("CARGO_PKG_VERSION")))
        .manual("User Commands");

    let mut out = Vec::new();
    man.render_title(&mut out).unwrap();
    // Ragged right and no hyphenation: option names and variables stay whole.
    out.extend_from_slice(b".ad l\n.nh\n");
    // Each clap_mangen section comes with roff's apostrophe preamble; keep only the first.
    let preamble = Roff::new().render();
    let mut section = |render: &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>| {
        let mut buf = Vec::new();
        render(&mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        out.extend_from_slice(text.strip_prefix(&preamble).unwrap_or(&text).as_bytes());
    };
    section(&|w| man.render_name_section(w));
    // clap_mangen's SYNOPSIS lists bare option names, without what they take or `--`.
    let mut roff = Roff::new();
    synopsis(&mut roff, cmd);
    section(&|w| roff.to_writer(w));
    section(&|w| man.render_description_section(w));
    section(&|w| man.render_options_section(w));
    if cmd.has_subcommands() {
        section(&|w| man.render_subcommands_section(w));
    }
    // The after_help texts (the short exit-code summary, the examples) are not rendered: the
    // hand-written EXIT STATUS and EXAMPLES sections say the same at greater length.
    let mut roff = Roff::new();
    hand_written(&mut roff);
    section(&|w| roff.to_writer(w));
    section(&|w| man.render_version_section(w));
    let mut roff = Roff::new();
    see_also(&mut roff, see_also_pages);
    section(&|w| roff.to_writer(w));

    String::from_utf8(out).unwrap()
}

/// SYNOPSIS from the clap definition: every option with its argument (alternatives that exclude
/// each other in one bracket), the positionals, and for `exec` the two ways to give the command
/// (`-- CMD [ARGS...]` or `-c SHELL-COMMAND`). A subcommand's page shows the global options as
/// one placeholder; they are listed under OPTIONS and in redlock(1).
fn synopsis(r: &mut Roff, cmd: &clap::Command) {
    heading(r, "SYNOPSIS");
    let is_root = cmd.has_subcommands();
    let visible = |a: &&clap::Arg| {
        !a.is_hide_set()
            && !matches!(a.get_id().as_str(), "help" | "version")
            && (is_root || !a.is_global_set())
    };
    // A positional that takes a command line, and the options that stand in for it.
    let command_arg = cmd
        .get_positionals()
        .find(|a| a.get_value_hint() == clap::ValueHint::CommandWithArguments);
    let instead: Vec<&clap::Arg> = command_arg
        .map(|c| {
            cmd.get_arguments()
                .filter(|a| !a.is_positional())
                .filter(|a| {
                    cmd.get_arg_conflicts_with(a)
                        .iter()
                        .any(|b| b.get_id() == c.get_id())
                })
                .collect()
        })
        .unwrap_or_default();

    let mut groups: Vec<Vec<&clap::Arg>> = Vec::new();
    for arg in cmd
        .get_arguments()
        .filter(|a| !a.is_positional())
        .filter(visible)
    {
        if instead.iter().any(|a| a.get_id() == arg.get_id()) {
            continue;
        }
        // clap records a conflict on the side that declared it: look both ways.
        let excludes = |a: &clap::Arg, b: &clap::Arg| {
            cmd.get_arg_conflicts_with(a)
                .iter()
                .any(|c| c.get_id() == b.get_id())
        };
        match groups
            .iter_mut()
            .find(|g| g.iter().any(|b| excludes(arg, b) || excludes(b, arg)))
        {
            Some(group) => group.push(arg),
            None => groups.push(vec![arg]),
        }
    }
    let mut options = Vec::new();
    for group in &groups {
        let required = group.len() == 1 && group[0].is_required_set();
        if !required {
            options.push(roman("["));
        }
        for (i, arg) in group.iter().enumerate() {
            if i > 0 {
                options.push(roman(" | "));
            }
            options.extend(option_inlines(arg));
        }
        if !required {
            options.push(roman("]"));
        }
        if group.len() == 1 && group[0].get_action().takes_values() && repeats(group[0]) {
            options.push(roman("..."));
        }
        options.push(roman(" "));
    }

    let mut name = vec![bold("redlock"), roman(" ")];
    if !is_root {
        name.extend([
            roman("["),
            italic("GLOBAL OPTIONS"),
            roman("] "),
            bold(cmd.get_name()),
            roman(" "),
        ]);
    }
    let mut positionals = Vec::new();
    for arg in cmd.get_positionals().filter(visible) {
        if command_arg.is_some_and(|c| c.get_id() == arg.get_id()) {
            continue;
        }
        let value = value_name(arg);
        match (arg.is_required_set(), repeats(arg)) {
            (true, _) => positionals.push(italic(value)),
            (false, false) => positionals.extend([roman("["), italic(value), roman("]")]),
            (false, true) => positionals.extend([roman("["), italic(value), roman("...]")]),
        }
        positionals.push(roman(" "));
    }
    if is_root {
        positionals.extend([italic("COMMAND"), roman(" ["), italic("ARGS"), roman("]")]);
    }

    let line = |tail: Vec<Inline>| {
        let mut all = name.clone();
        all.extend(options.iter().cloned());
        all.extend(positionals.iter().cloned());
        all.extend(tail);
        if matches!(all.last(), Some(Inline::Roman(s)) if s == " ") {
            all.pop();
        }
        all
    };
    match command_arg {
        Some(c) => {
            r.text(line(vec![
                bold("--"),
                roman(" "),
                italic(value_name(c)),
                roman(" ["),
                italic("ARGS"),
                roman("...]"),
            ]));
            for alternative in &instead {
                r.control("br", []);
                r.text(line(option_inlines(alternative)));
            }
        }
        None => {
            r.text(line(Vec::new()));
        }
    }
}

/// `-s|--long VALUE` (or the possible values, `a|b|c`) as roff inlines.
fn option_inlines(arg: &clap::Arg) -> Vec<Inline> {
    let mut out = Vec::new();
    if let Some(s) = arg.get_short() {
        out.push(bold(format!("-{s}")));
    }
    if let Some(l) = arg.get_long() {
        if !out.is_empty() {
            out.push(roman("|"));
        }
        out.push(bold(format!("--{l}")));
    }
    if arg.get_action().takes_values() {
        out.push(roman(" "));
        let possible: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| v.get_name().to_string())
            .collect();
        if possible.is_empty() || arg.get_value_names().is_some() {
            out.push(italic(value_name(arg)));
        } else {
            out.push(roman(possible.join("|")));
        }
    }
    out
}

fn value_name(arg: &clap::Arg) -> String {
    arg.get_value_names()
        .and_then(|v| v.first())
        .map(|v| v.to_string())
        .unwrap_or_else(|| arg.get_id().as_str().to_uppercase())
}

/// Whether the option or positional may be given more than once (or take several values).
fn repeats(arg: &clap::Arg) -> bool {
    matches!(arg.get_action(), clap::ArgAction::Append)
        || arg.get_num_args().is_some_and(|n| n.max_values() > 1)
}

fn heading(r: &mut Roff, title: &str) {
    r.control("SH", [title]);
}

fn para(r: &mut Roff, text: impl Into<Vec<Inline>>) {
    r.control("PP", []);
    r.text(text);
}

/// A tagged paragraph: `tag` in bold, then `body` indented below it.
fn item(r: &mut Roff, tag: &str, body: impl Into<Vec<Inline>>) {
    r.control("TP", []);
    r.text([bold(tag)]);
    r.text(body);
}

/// An example: what it does, then the lines to type, indented and unfilled.
fn example(r: &mut Roff, what: impl Into<Vec<Inline>>, lines: &[&str]) {
    para(r, what);
    r.control("RS", ["4"]);
    r.control("sp", []);
    r.control("nf", []);
    for line in lines {
        r.text([roman(*line)]);
    }
    r.control("fi", []);
    r.control("RE", []);
}

fn see_also(r: &mut Roff, pages: &[&str]) {
    heading(r, "SEE ALSO");
    let mut line = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        if i > 0 {
            line.push(roman(", "));
        }
        let (name, section) = page.split_once('(').expect("page(section)");
        line.push(bold(name));
        line.push(roman(format!("({section}")));
    }
    r.text(line);
}

/// EXIT STATUS, from `exit::TABLE` so the codes are defined once. Subcommands other than `exec`
/// leave out the rows that only `exec` can produce.
fn exit_status(r: &mut Roff, include_exec_only: bool) {
    heading(r, "EXIT STATUS");
    for (code, meaning) in exit::TABLE {
        if !include_exec_only && meaning.starts_with("exec only") {
            continue;
        }
        item(r, code, [roman(*meaning)]);
    }
}

/// `text` as roff: what is between backticks (code) in bold, the rest roman.
fn code_marked(text: &str) -> Vec<Inline> {
    text.split('`')
        .enumerate()
        .filter(|(_, part)| !part.is_empty())
        .map(|(i, part)| if i % 2 == 1 { bold(part) } else { roman(part) })
        .collect()
}

/// The variables of `vars` (from `src/env.rs`) as tagged paragraphs: the meaning as a sentence,
/// then what the man page says besides.
fn environment(r: &mut Roff, vars: &[env::Var]) {
    for var in vars {
        let mut text = capitalized(var.meaning);
        if !text.ends_with('.') {
            text.push('.');
        }
        if !var.more.is_empty() {
            text.push(' ');
            text.push_str(var.more);
        }
        item(r, var.names, code_marked(&text));
    }
}

/// Quorum, Cluster and Sentinel: the main page's section on several servers.
fn several_servers_section(r: &mut Roff) {
    heading(r, "SEVERAL SERVERS");
    para(
        r,
        [
            bold("Redlock quorum. "),
            roman("Two or more "),
            bold("--url"),
            roman(
                " values (or a comma-separated REDLOCK_URL) name independent masters. Every \
                 operation goes to all of them in parallel, each bounded by ",
            ),
            bold("--connect-timeout"),
            roman(" and "),
            bold("--io-timeout"),
            roman(
                "; a slow or frozen one does not hold up the others once their answers settle the \
                 outcome (except the first, which keeps the queue: a waiter's attempt and a \
                 release wait for it; a reservation there for another waiter vetoes a majority \
                 elsewhere). Each attempt of a waiter uses a fresh token. With N servers a lock is held when Q = N/2+1 of them granted it and time is \
                 left: ttl - elapsed - (ttl/100 + 2ms) must be positive. A failed attempt is \
                 undone on every server, including those that did not answer. Too few reachable \
                 servers is exit status 69 with a line that starts 'no quorum' and names them. \
                 Extending needs Q servers within the validity; exec treats a renewal that can no \
                 longer reach Q as a lost lock. Release goes to every server. The first URL keeps \
                 the queue of waiters; while it is down, waiters retry when the holder's TTL runs \
                 out. status shows the quorum's verdict and each server's view.",
            ),
        ],
    );
    para(
        r,
        [roman(
            "Fences: each server hands out max(its counter + 1, its clock in microseconds); the \
             holder's fence is the highest of its granting servers', written back to a majority \
             before it is handed out, so successive holders get strictly increasing (not \
             consecutive) fences, also after a server lost its counter (a restart without \
             persistence), as long as the servers' clocks agree and do not step back. Locks \
             themselves need the servers to keep their keys and their clocks not to jump: run \
             them with appendonly yes and appendfsync always (or keep a crashed server down \
             longer than the longest TTL), and NTP without steps. exec reports a server whose \
             run_id changed during a hold.",
        )],
    );
    para(
        r,
        [
            bold("Redis Cluster. "),
            bold("--cluster"),
            roman(" treats the URLs as seed nodes; all keys of a lock share one hash slot. "),
            bold("Sentinel. "),
            bold("--sentinel"),
            roman(" "),
            italic("MASTER"),
            roman(
                " treats the URLs as Sentinels and asks them for the master with every command. \
                 With one server, a Cluster or Sentinel, ",
            ),
            bold("--wait-replicas"),
            roman(" "),
            italic("N"),
            roman(
                " makes acquire and exec wait until N replicas have the lock (or fail with 69 and \
                 release it); this narrows, but does not close, the window in which a failover \
                 loses a lock.",
            ),
        ],
    );
}

fn capitalized(s: &str) -> String {
    let mut chars = s.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

fn root_sections(r: &mut Roff) {
    exit_status(r, true);
    several_servers_section(r);

    heading(r, "ENVIRONMENT");
    environment(r, env::TABLE);
    let given: Vec<&str> = env::GIVEN.iter().flat_map(env::Var::each).collect();
    para(
        r,
        [
            roman("The command that "),
            bold("redlock exec"),
            roman(format!(
                " runs gets {}: see redlock-exec(1).",
                given.join(", ")
            )),
        ],
    );

    heading(r, "EXAMPLES");
    example(
        r,
        [
            roman(
                "A crontab that runs a job on one host at a time. A run that finds the lock held \
                 elsewhere is skipped quietly and counts as a success (",
            ),
            bold("-E 0 -q"),
            roman(
                "), so cron mails nothing. Give redlock's full path, which stays right wherever \
                 the line is copied (/usr/bin/redlock from the package, in cron's PATH of \
                 /usr/bin:/bin; ~/.cargo/bin/redlock from cargo install, which is not), and the \
                 Redis URL:",
            ),
        ],
        &[
            "REDLOCK_URL=redis://redis.internal:6379",
            "0 3 * * * /usr/bin/redlock exec nightly-backup -n -E 0 -q -- /usr/local/bin/backup.sh",
        ],
    );
    example(
        r,
        [roman(
            "Serialize deployments from CI: wait up to 30 minutes for the running one to finish:",
        )],
        &["redlock exec deploy-prod --wait 30m -- ./deploy.sh"],
    );
    example(
        r,
        [roman(
            "Hold a lock across several steps of a shell script, and release it whatever happens:",
        )],
        &[
            "REDLOCK_TOKEN=$(redlock acquire migrate --ttl 5m) || exit",
            "export REDLOCK_TOKEN",
            "trap 'redlock release migrate' EXIT",
            "./migrate.sh",
        ],
    );
    example(
        r,
        [roman(
            "Show every lock under the prefix: holder, note, age, TTL left and fence:",
        )],
        &["redlock status"],
    );
    example(
        r,
        [
            roman("Run a systemd service under a lock. With "),
            bold("KillMode=mixed"),
            roman(
                " systemd sends SIGTERM to redlock alone, which forwards it to the command, and \
                 SIGKILL to whatever is left after ",
            ),
            bold("TimeoutStopSec"),
            roman(":"),
        ],
        &[
            "[Service]",
            "ExecStart=/usr/bin/redlock exec report -n -- /usr/local/bin/make-report",
            "KillMode=mixed",
        ],
    );
    example(
        r,
        [
            roman("Pass the fencing token to the storage the command writes to ("),
            bold("REDLOCK_FENCE"),
            roman(", see redlock-exec(1)):"),
        ],
        &["redlock exec ledger -c 'import-ledger --fence \"$REDLOCK_FENCE\" ledger.csv'"],
    );
    example(
        r,
        [roman(
            "In CI, keep one JSON line per run (fence, wait and hold times, exit status, lost \
             lock, signal) as a build artifact:",
        )],
        &["redlock exec deploy-prod --wait 30m --report lock-report.jsonl -- ./deploy.sh"],
    );
    example(
        r,
        [roman(
            "Let at most three test jobs run at once, on any runner; hand each job a device of \
             its own; let reports read a database together while a migration runs alone \
             (everyone using a lock must ask for the same kind of lock, or exit 2):",
        )],
        &[
            "redlock exec ci-tests --slots 3 -- make test",
            "redlock exec devices --pool gpu-a,gpu-b -- sh -c './train.sh --device \"$REDLOCK_RESOURCE\"'",
            "redlock exec reports-db --shared -- ./nightly-report.sh",
            "redlock exec reports-db -- ./migrate.sh",
        ],
    );
}

/// How a busy lock is waited for; shared by acquire and exec.
fn waiting_section(r: &mut Roff) {
    heading(r, "WAITING");
    para(
        r,
        [
            roman(
                "A busy lock is waited for without polling: the waiter joins the lock's queue and \
                 blocks on Redis until the holder releases the lock, which hands it to the first \
                 waiter in arrival order and wakes only that one. Newcomers do not overtake the \
                 queue. A holder that dies without releasing is replaced when its TTL runs out. ",
            ),
            bold("-n"),
            roman(" tries once and does not queue; "),
            bold("--wait"),
            roman(
                " bounds the wait, after which the waiter leaves the queue and exits with the \
                 conflict status.",
            ),
        ],
    );
}

fn acquire_sections(r: &mut Roff) {
    exit_status(r, false);
    waiting_section(r);

    heading(r, "EXAMPLES");
    example(
        r,
        [roman(
            "Take a lock for a script, and release it when the script exits. The token goes in \
             REDLOCK_TOKEN, which release and extend read, rather than on their command line, \
             which every user of the host can see with ps:",
        )],
        &[
            "REDLOCK_TOKEN=$(redlock acquire migrate --ttl 5m) || exit",
            "export REDLOCK_TOKEN",
            "trap 'redlock release migrate' EXIT",
        ],
    );
    example(
        r,
        [roman(
            "Try once, and give up with exit status 1 if the lock is busy:",
        )],
        &["redlock acquire nightly-report -n"],
    );
    example(
        r,
        [
            roman("Set "),
            bold("REDLOCK_KEY"),
            roman(", "),
            bold("REDLOCK_TOKEN"),
            roman(" and "),
            bold("REDLOCK_FENCE"),
            roman(" (exported, so that release finds the token):"),
        ],
        &[
            "vars=$(redlock acquire deploy --wait 10m --format env) || exit",
            "set -a; eval \"$vars\"; set +a",
            "trap 'redlock release \"$REDLOCK_KEY\"' EXIT",
            "./deploy.sh --fence \"$REDLOCK_FENCE\"",
        ],
    );
}

fn release_sections(r: &mut Roff) {
    exit_status(r, false);

    heading(r, "EXAMPLES");
    example(
        r,
        [roman(
            "Release a lock with the token acquire printed, passed in REDLOCK_TOKEN (not on the \
             command line, which ps shows to every user):",
        )],
        &["REDLOCK_TOKEN=$T redlock release migrate"],
    );
    example(
        r,
        [roman(
            "Break a lock left behind by a crashed holder (the previous holder is printed on \
             stderr; who forced it and when is recorded for the evicted holder's message and for \
             redlock status):",
        )],
        &["redlock release deploy-prod --force"],
    );
    example(
        r,
        [roman(
            "Break it only if it is still held by the holder redlock status showed (fence or \
             token fingerprint): if the lock changed hands meanwhile, nothing is released and \
             the exit status is 3, naming the new holder:",
        )],
        &["redlock release deploy-prod --force --if-fence 1733065153482911"],
    );
}

fn extend_sections(r: &mut Roff) {
    exit_status(r, false);

    heading(r, "EXAMPLES");
    example(
        r,
        [roman(
            "Keep a lock alive between the steps of a long job, with acquire's token exported \
             in REDLOCK_TOKEN; stop if it was lost:",
        )],
        &[
            "for step in 1 2 3; do",
            "    ./step \"$step\"",
            "    redlock extend migrate --ttl 5m || exit",
            "done",
        ],
    );
}

fn status_sections(r: &mut Roff) {
    exit_status(r, false);

    heading(r, "EXAMPLES");
    example(
        r,
        [roman("Show every lock under the prefix:")],
        &["redlock status"],
    );
    example(
        r,
        [roman(
            "Check in a script whether a lock is held (exit status 0) or free (1):",
        )],
        &["if redlock status -q deploy-prod >/dev/null; then echo busy; fi"],
    );
    example(
        r,
        [roman("The same information as JSON:")],
        &["redlock status --json deploy-prod nightly-backup"],
    );
    example(
        r,
        [roman(
            "Metrics in the Prometheus text format for node_exporter's textfile collector, from \
             cron (exit status 0 whether the locks are held or free; written to a temporary file, \
             then moved, so that the collector never reads half of it):",
        )],
        &[
            "d=/var/lib/node_exporter/textfile",
            "redlock -q status --format prometheus deploy-prod nightly-backup >$d/redlock.prom.$$ &&",
            "  mv $d/redlock.prom.$$ $d/redlock.prom",
        ],
    );
}

fn wait_sections(r: &mut Roff) {
    exit_status(r, false);
    para(
        r,
        [roman(
            "0 once the lock is free; the conflict status (1, or -E N) when --wait runs out with \
             the lock still busy; 128+N when signal N stops the wait.",
        )],
    );

    heading(r, "HOW IT WAITS");
    para(
        r,
        [roman(
            "redlock wait neither takes the lock nor joins its queue, and writes nothing to \
             Redis. It subscribes to the lock's changes (the channel PREFIX{NAME}:watch, where \
             every lock script tells its change while someone listens), then reads the lock, and \
             reads it again after each change and when its TTL runs out (a holder that died says \
             nothing). Free means nobody holds the lock and it is not being handed over to a \
             queued waiter; on a quorum, a majority free. Without the subscription (an ACL user \
             without the channel) it reads the lock at its expiry and every 30 s.",
        )],
    );

    heading(r, "EXAMPLES");
    example(
        r,
        [roman(
            "Start the smoke tests once the running deploy is done, giving up after 30 minutes:",
        )],
        &["redlock wait deploy-prod --wait 30m && ./smoke-tests.sh"],
    );
}

fn log_sections(r: &mut Roff) {
    exit_status(r, false);
    para(
        r,
        [roman(
            "With --follow, redlock runs until a signal stops it (128+N: 130 for Ctrl-C) or \
             stdout is closed (0).",
        )],
    );

    heading(r, "HISTORY");
    para(
        r,
        [roman(
            "Each lock keeps its last --log-max events (1000 by default) in the stream \
             PREFIX{NAME}:log, written in the same atomic step as the change: acquired (who, \
             fence, how long it waited), released (how long it was held; exec adds its \
             command's exit status), expired (the holder never released; noticed by the next \
             acquisition), forced (whose lock, by whom), lost (an exec that lost its lock), \
             overran and timeout (an exec past --warn-after, or stopped at --max-runtime). The \
             history expires with the lock's record (--meta-ttl). From 100 up the trim drops \
             whole stream nodes (XADD MAXLEN ~): at least --log-max events are kept, and at most \
             one node more. On a quorum, each node keeps its own; redlock log reads the first \
             URL's.",
        )],
    );

    heading(r, "EXAMPLES");
    example(
        r,
        [roman(
            "Who held deploy-prod in the last day, and for how long:",
        )],
        &["redlock log deploy-prod --since 24h"],
    );
    example(
        r,
        [roman(
            "Keep a machine-readable record of every change as it happens:",
        )],
        &["redlock log deploy-prod --follow --json >> deploy-prod.events"],
    );
}

fn exec_sections(r: &mut Roff) {
    exit_status(r, true);
    para(
        r,
        [roman(
            "Once the lock is held, redlock exits with the command's own status, or 128+N if it \
             died of signal N, unless the lock was lost (75; see SIGNALS AND LOCK LOSS).",
        )],
    );
    waiting_section(r);

    heading(r, "ENVIRONMENT");
    para(
        r,
        [roman(
            "The command runs with these variables set: what a redlock it runs needs to reach \
             the same servers as the same user, and no secret.",
        )],
    );
    environment(r, env::GIVEN);

    heading(r, "SIGNALS AND LOCK LOSS");
    para(
        r,
        [roman(
            "While redlock waits for the lock, SIGINT, SIGTERM, SIGHUP or SIGQUIT stops the \
             wait: the command is not started, nothing is left in Redis, and redlock exits with \
             128+N.",
        )],
    );
    para(
        r,
        [roman(
            "While the command runs, redlock forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 \
             and SIGUSR2 to it. A signal generated by the terminal (Ctrl-C, Ctrl-\\, or a \
             hangup when redlock does not lead its session) is not forwarded: the command shares \
             the terminal's foreground process group and has received it already, so it reaches \
             the command once. Signals that were ignored when redlock started (nohup, background \
             jobs) stay ignored, for redlock and for the command.",
        )],
    );
    para(
        r,
        [
            roman(
                "A second SIGINT or SIGTERM makes redlock send SIGKILL at once. After the first \
                 SIGINT or SIGTERM, redlock sends SIGKILL if the command is still running ",
            ),
            bold("--kill-after"),
            roman(" later."),
        ],
    );
    para(
        r,
        [
            roman("redlock renews the lock every third of its TTL (every 10s with the default "),
            bold("--ttl"),
            roman(
                " 30s). The lock is lost when a renewal finds the key held with another token, \
                 or not there at all, or when no renewal has succeeded by the lock's deadline: \
                 one TTL after the last successful acquisition or renewal was sent, measured on \
                 the monotonic clock (this is what happens when Redis stays unreachable). Then ",
            ),
            bold("--on-lost"),
            roman(" acts: "),
            bold("term"),
            roman(" sends SIGTERM, then SIGKILL after "),
            bold("--kill-after"),
            roman("; "),
            bold("kill"),
            roman(" sends SIGKILL at once; "),
            bold("ignore"),
            roman(
                " warns and lets the command finish. redlock then exits with status 75, except \
                 that with ",
            ),
            bold("ignore"),
            roman(
                " a command that succeeds still yields 0. A lost lock is not released: it may \
                 belong to someone else by then. A forced release (redlock release --force) is \
                 announced to the holder, which stops its command at once rather than at its \
                 next renewal; a holder that misses the announcement (in the command's first \
                 50 ms, or its connection for it dropped at that instant) finds the loss at its \
                 next renewal. Its message names who forced the release and when.",
            ),
        ],
    );
    para(
        r,
        [
            roman(
                "A loss found only after the command ended counts the same: if the release finds \
                 another token or no key (a command shorter than a third of the TTL is checked by \
                 nothing else; on several servers, the token on fewer than a majority), if the \
                 release fails (nothing then shows the lock was still held), or if the lock's deadline had passed when the command's exit was \
                 seen (redlock stopped or starved past its TTL), redlock exits with status 75, \
                 not the command's 0, and says so on stderr even with ",
            ),
            bold("-q"),
            roman(". With "),
            bold("--on-lost ignore"),
            roman(
                ", a command that succeeded still yields 0 (the message says so) and one that \
                 failed yields 75.",
            ),
        ],
    );
    para(
        r,
        [roman(
            "If redlock itself is killed with SIGKILL, the command receives SIGTERM (on Linux, \
             through the parent-death signal), and the lock expires at most one TTL later.",
        )],
    );

    heading(r, "EXAMPLES");
    example(
        r,
        [roman(
            "In a crontab: skip the run, quietly and with exit status 0, while another host's \
             run still holds the lock:",
        )],
        &["0 3 * * * /usr/bin/redlock exec nightly-backup -n -E 0 -q -- /usr/local/bin/backup.sh"],
    );
    example(
        r,
        [roman("Wait up to 30 minutes for the lock, then deploy:")],
        &["redlock exec deploy-prod --wait 30m -- ./deploy.sh"],
    );
    example(
        r,
        [roman("Run a shell command line under the lock:")],
        &["redlock exec report -c 'make report && mail -s done ops < report.txt'"],
    );
    example(
        r,
        [roman(
            "Hand the fencing token to the storage the command writes to:",
        )],
        &["redlock exec ledger -c 'import-ledger --fence \"$REDLOCK_FENCE\" ledger.csv'"],
    );
}
