//! The docs' examples, run: every command example in README.md, CONTRIBUTING.md and docs/*.md is
//! run against a real redis-server (or, where one loopback server cannot show it, parsed by
//! redlock's own command-line parser), so a changed message or flag fails here, not for a user.
//!
//! A fenced block's info string says how (CONTRIBUTING.md, "Examples in the docs", says it for
//! writers):
//!
//! - `console`: a session. `$ ` lines are commands (a trailing `\` continues one); the lines
//!   after a command are its output, stdout and stderr together; `? N` right after the command is
//!   the status it must exit with (0 otherwise). In the output, `[..]` is any text within a line
//!   and a line `...` is any number of lines.
//! - `sh` / `bash`: a script, run whole, must exit 0. `crontab`: each entry's command is run,
//!   must exit 0.
//! - `console parse-only`, `sh parse-only`, and every other language (yaml, ini, groovy...): each
//!   redlock invocation is parsed, not run. `text`: never run, and must not invoke redlock.
//!
//! Each file runs in one bash session, its blocks in order, against its own redis-server
//! (`REDIS_URL` exported), in a scratch directory holding the placeholder scripts the examples
//! call (`./backup.sh`, `./deploy.sh`, ...: [`session::PLACEHOLDERS`]), with the redlock under
//! test first on PATH and standing in for `/usr/bin/redlock`.

mod expect;
mod links;
mod markdown;
mod session;

use std::path::{Path, PathBuf};

use crate::common::RedisServer;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs one file's examples; fails with every problem found in it.
fn check(file: &str) {
    let server = or_skip!(RedisServer::start());
    let path = root().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let failures = session::run(&path, &text, &server);
    assert!(
        failures.is_empty(),
        "{file}: {} example(s) wrong:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// A test per file, and the list [`every_doc_has_its_test`] compares with the files there are.
macro_rules! docs {
    ($($name:ident => $file:literal,)*) => {
        $(
            #[test]
            fn $name() {
                check($file);
            }
        )*
        const TESTED: &[&str] = &[$($file),*];
    };
}

docs! {
    readme => "README.md",
    contributing => "CONTRIBUTING.md",
    benchmarks => "docs/benchmarks.md",
    ci => "docs/ci.md",
    completions => "docs/completions.md",
    design => "docs/design.md",
    exec => "docs/exec.md",
    holders => "docs/holders.md",
    inspection => "docs/inspection.md",
    operations => "docs/operations.md",
    script_lock => "docs/script-lock.md",
    security => "docs/security.md",
    waiting => "docs/waiting.md",
    servers => "docs/servers.md",
}

/// The markdown files whose examples must run.
fn docs_there_are() -> Vec<String> {
    let mut files = vec!["README.md".to_string(), "CONTRIBUTING.md".to_string()];
    let dir = root().join("docs");
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".md") {
                files.push(format!("docs/{name}"));
            }
        }
    }
    files.retain(|f| Path::new(&root().join(f)).exists());
    files.sort();
    files
}

/// The man pages' examples (the `.nf` blocks of their EXAMPLES sections, written in
/// tests/generated.rs) cannot run without their hosts and files, but each redlock line in them
/// must parse.
#[test]
fn man_page_examples_parse() {
    let mut failures = Vec::new();
    let mut examples = 0;
    for entry in std::fs::read_dir(root().join("man")).unwrap().flatten() {
        let page = std::fs::read_to_string(entry.path()).unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let mut verbatim = false;
        for (i, line) in page.lines().enumerate() {
            match line {
                ".nf" => verbatim = true,
                ".fi" => verbatim = false,
                _ if verbatim => {
                    let text = line.replace("\\-", "-").replace("\\*(Aq", "'");
                    for args in markdown::invocations(&text) {
                        examples += 1;
                        let argv = std::iter::once("redlock".to_string()).chain(args);
                        if let Err(e) = redlock::cli::command().try_get_matches_from(argv) {
                            let e = e.to_string();
                            failures.push(format!(
                                "{name}:{}: {text}\n  {}",
                                i + 1,
                                e.lines().next().unwrap_or_default()
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    assert!(examples > 10, "only {examples} examples found in man/");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every relative link of the docs (README, CONTRIBUTING, CHANGELOG, docs/) leads to a file and
/// a heading that exist.
#[test]
fn links_between_the_docs_lead_somewhere() {
    let mut files = docs_there_are();
    files.push("CHANGELOG.md".into());
    let problems: Vec<String> = files
        .iter()
        .flat_map(|f| links::broken(&root(), f))
        .collect();
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_doc_has_its_test() {
    let mut tested: Vec<String> = TESTED.iter().map(|s| s.to_string()).collect();
    tested.sort();
    assert_eq!(
        docs_there_are(),
        tested,
        "each markdown file with examples needs its line in the docs! list of tests/it/docs/mod.rs"
    );
}
