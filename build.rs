//! Three things the binary needs that are cheaper to work out once, here, than at every start:
//!
//! - `cfg(portable)`: the portable implementation of `src/platform/` is the one built, for a
//!   target other than Linux, or for Linux with `--features portable`;
//! - the build's name in `redlock --version`: the git commit it was built from (when built from a
//!   git checkout of this repository) and the target triple, as `REDLOCK_BUILD` for `cli.rs`
//!   ("abc1234, x86_64-unknown-linux-musl", or the target alone outside git);
//! - the Lua scripts as sent to Redis, each assembled from `src/scripts/*.lua`, with its SHA1
//!   (what EVALSHA names it by), in `$OUT_DIR/scripts.rs` for `scripts.rs`. Hashing them at run
//!   time was 40 % of the instructions of `redlock exec KEY -- true`.
//!
//! A script carries only the definitions of its helper files (`common.lua` and the like) that it
//! uses (`shake`): Redis runs a script's whole top-level chunk on every EVALSHA, making a closure
//! of every `local function` in it, used or not (and collecting them later). `status.lua`, which
//! uses 4 of the 27 functions of `common.lua`, cost the server 7.5 µs per call with all of them
//! and 5.7 with its own; a renewal (`extend.lua`) 6.2 and 4.3. The layout this relies on is at
//! the top of `common.lua`, and checked here.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

/// A piece of a script's body: a file of `src/scripts/`, or text.
enum Part {
    File(&'static str),
    Text(&'static str),
}
use Part::{File, Text};

/// What a script is made of: helper files (`common.lua` first), of which it carries only the
/// definitions it uses (see `shake`), then its body, taken whole.
struct Recipe {
    helpers: Vec<&'static str>,
    body: Vec<Part>,
}

/// `acquire.lua` (or `slots.lua`) behind `guard.lua`'s server check, for a connection's first
/// attempt: refuses a replica, and a server whose maxmemory-policy is allkeys-* (unless
/// `allow_eviction`), before anything is written, and reports the policy at the end of the
/// reply. The check rides on the attempt instead of costing a round trip of its own. The attempt
/// script itself is unchanged: it becomes the body of a function (its `return`s return from it).
fn checked(allow_eviction: &'static str, preludes: &[&'static str], file: &'static str) -> Recipe {
    let mut helpers = vec!["common.lua"];
    helpers.extend(preludes);
    helpers.push("guard.lua");
    Recipe {
        helpers,
        body: vec![
            Text("local function attempt()\n"),
            File(file),
            Text("\nend\nreturn guarded(attempt, "),
            Text(allow_eviction),
            Text(")\n"),
        ],
    }
}

/// Every script: its name in `scripts.rs` and what it is made of. `common.lua` (key names, the
/// queue helpers) is a helper file of each, so that all of them agree on the layout.
fn scripts() -> Vec<(&'static str, Recipe)> {
    let plain = |file| Recipe {
        helpers: vec!["common.lua"],
        body: vec![File(file)],
    };
    let slots = |file| Recipe {
        helpers: vec!["common.lua", "slots_common.lua"],
        body: vec![File(file)],
    };
    vec![
        ("ACQUIRE", plain("acquire.lua")),
        ("ACQUIRE_CHECKED", checked("false", &[], "acquire.lua")),
        (
            "ACQUIRE_CHECKED_ALLOW_EVICTION",
            checked("true", &[], "acquire.lua"),
        ),
        ("SLOTS_ACQUIRE", slots("slots.lua")),
        (
            "SLOTS_ACQUIRE_CHECKED",
            checked("false", &["slots_common.lua"], "slots.lua"),
        ),
        (
            "SLOTS_ACQUIRE_CHECKED_ALLOW_EVICTION",
            checked("true", &["slots_common.lua"], "slots.lua"),
        ),
        ("SLOTS_RELEASE", slots("slots_release.lua")),
        ("SLOTS_EXTEND", slots("slots_extend.lua")),
        ("RELEASE", plain("release.lua")),
        ("EXTEND", plain("extend.lua")),
        ("LEAVE", slots("leave.lua")),
        ("STATUS", plain("status.lua")),
        ("FENCE", plain("fence.lua")),
        ("LOST", plain("lost.lua")),
    ]
}

/// What a script declares its arguments to be, in ARGV order: the names of its one
/// `local A = {token = ARGV[1], ttl_ms = ARGV[2], ...}` (see `common.lua`), each at its own
/// position; none without one.
fn argument_names(code: &str) -> Vec<String> {
    // At the start of a line: a comment that quotes it is not one.
    const DECLARATION: &str = "\nlocal A = {";
    let Some(at) = code.find(DECLARATION) else {
        return Vec::new();
    };
    let rest = &code[at + DECLARATION.len()..];
    assert!(
        !rest.contains(DECLARATION),
        "a script declares its arguments twice"
    );
    let list = &rest[..rest
        .find('}')
        .expect("an argument declaration ends with '}'")];
    let names: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .enumerate()
        .map(|(i, entry)| {
            let (name, value) = entry
                .split_once('=')
                .unwrap_or_else(|| panic!("not 'name = ARGV[n]': {entry}"));
            assert_eq!(
                value.trim(),
                format!("ARGV[{}]", i + 1),
                "argument {name} is not declared at its position"
            );
            name.trim().to_string()
        })
        .collect();
    names
}

/// A token of Lua code, as far as `shake` needs one: a name (keywords too), a string, or a symbol
/// (one character). Comments and numbers are no tokens.
#[derive(Clone, Copy, PartialEq)]
enum Token<'a> {
    Name(&'a str),
    Str,
    Symbol(u8),
}

/// Where the long bracket opening at `at` (`[[`, `[=[`, ...) closes: the index after it, or None
/// when `at` opens no long bracket.
fn long_bracket_end(code: &[u8], at: usize, place: &str) -> Option<usize> {
    let level = code[at + 1..].iter().take_while(|&&c| c == b'=').count();
    if code.get(at + 1 + level) != Some(&b'[') {
        return None;
    }
    let close = format!("]{}]", "=".repeat(level));
    let body = at + level + 2;
    let end = code[body..]
        .windows(close.len())
        .position(|w| w == close.as_bytes())
        .unwrap_or_else(|| panic!("{place}: a long string or comment that never ends"));
    Some(body + end + close.len())
}

/// The tokens of `code` (`place` names it in a panic). Enough of Lua's lexer to tell a name
/// from the same word in a comment or a string.
fn tokens<'a>(code: &'a str, place: &str) -> Vec<Token<'a>> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let next = bytes.get(i + 1).copied();
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'-' && next == Some(b'-') {
            let long = (bytes.get(i + 2) == Some(&b'['))
                .then(|| long_bracket_end(bytes, i + 2, place))
                .flatten();
            i = long.unwrap_or_else(|| {
                bytes[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(bytes.len(), |n| i + n)
            });
        } else if c == b'\'' || c == b'"' {
            i += 1;
            loop {
                match bytes.get(i) {
                    Some(b'\\') => i += 2,
                    Some(&q) if q == c => break,
                    Some(b'\n') | None => panic!("{place}: a string that never ends"),
                    Some(_) => i += 1,
                }
            }
            i += 1;
            out.push(Token::Str);
        } else if c == b'[' {
            match long_bracket_end(bytes, i, place) {
                Some(end) => {
                    i = end;
                    out.push(Token::Str);
                }
                None => {
                    i += 1;
                    out.push(Token::Symbol(c));
                }
            }
        } else if c.is_ascii_digit() || (c == b'.' && next.is_some_and(|n| n.is_ascii_digit())) {
            // A number: digits, letters (hex, exponents), dots, and an exponent's sign.
            let start = i;
            i += 1;
            while let Some(&d) = bytes.get(i) {
                let sign = matches!(d, b'+' | b'-')
                    && matches!(bytes[i - 1], b'e' | b'E')
                    && !code[start..i].starts_with("0x");
                if !(d.is_ascii_alphanumeric() || d == b'.' || d == b'_' || sign) {
                    break;
                }
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while bytes
                .get(i)
                .is_some_and(|&d| d.is_ascii_alphanumeric() || d == b'_')
            {
                i += 1;
            }
            out.push(Token::Name(&code[start..i]));
        } else {
            out.push(Token::Symbol(c));
            i += 1;
        }
    }
    out
}

/// The names used in `code`: every name token, on any path (a conservative count).
fn names<'a>(code: &'a str, place: &str) -> BTreeSet<&'a str> {
    tokens(code, place)
        .into_iter()
        .filter_map(|t| match t {
            Token::Name(name) => Some(name),
            _ => None,
        })
        .collect()
}

fn is_name(word: &str) -> bool {
    let mut chars = word.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A top-level definition of a helper file: the names it declares, its text (from the comment
/// right above it to where the next definition's begins) and the names it uses.
struct Definition<'a> {
    declares: Vec<&'a str>,
    text: &'a str,
    uses: BTreeSet<&'a str>,
}

/// The top-level definitions of the helper file `file`, in order, as the conventions at the top
/// of `common.lua` lay them out; a file that breaks them fails the build, saying where. The
/// file's opening comment (up to the first definition's own) is not part of any.
fn definitions<'a>(file: &str, text: &'a str) -> Vec<Definition<'a>> {
    let lines: Vec<(usize, &str)> = text
        .split_inclusive('\n')
        .scan(0, |at, line| {
            let start = *at;
            *at += line.len();
            Some((start, line))
        })
        .collect();
    let place = |n: usize| format!("src/scripts/{file}:{}", n + 1);
    let comment = |line: &str| line.starts_with("--") && !line.starts_with("--[");
    // Where each definition begins: its `local` line, or the comment lines right above it.
    let mut starts = Vec::new();
    for (n, (_, line)) in lines.iter().enumerate() {
        if line.starts_with("local ") {
            let mut first = n;
            while first > 0 && comment(lines[first - 1].1) {
                first -= 1;
            }
            starts.push((first, n));
        } else if line.trim().is_empty()
            || comment(line)
            || line.starts_with([' ', '\t', '}', ')'])
            || line.trim_end() == "end"
        {
            if starts.is_empty() && !line.trim().is_empty() && !comment(line) {
                panic!("{}: code before the first definition", place(n));
            }
        } else {
            panic!(
                "{}: a top-level statement that is not a definition (`local function NAME` or \
                 `local NAME` at column 0, see the top of common.lua): {line:?}",
                place(n)
            );
        }
    }
    let mut found = Vec::new();
    for (i, &(first, header)) in starts.iter().enumerate() {
        let end = starts.get(i + 1).map_or(lines.len(), |&(next, _)| next);
        let from = lines[first].0;
        let to = lines.get(end).map_or(text.len(), |&(at, _)| at);
        let code = &text[from..to];
        let line = lines[header].1.trim_end();
        let where_ = place(header);
        let closers: Vec<&str> = lines[header + 1..end]
            .iter()
            .map(|(_, l)| l.trim_end())
            .filter(|l| !l.is_empty() && !l.starts_with([' ', '\t']) && !comment(l))
            .collect();
        let declares = if let Some(rest) = line.strip_prefix("local function ") {
            let name = rest.split('(').next().unwrap_or_default().trim();
            assert!(
                is_name(name),
                "{where_}: not `local function NAME(`: {line}"
            );
            assert!(
                closers == ["end"],
                "{where_}: function {name} does not end with one `end` at column 0, its only \
                 line there"
            );
            vec![name]
        } else {
            let rest = &line["local ".len()..];
            let list = rest.split(['=', '-']).next().unwrap_or_default();
            let declares: Vec<&str> = list.split(',').map(str::trim).collect();
            assert!(
                declares.iter().all(|n| is_name(n)),
                "{where_}: not `local NAME[, NAME...] [= VALUE]`: {line}"
            );
            assert!(
                closers.iter().all(|l| l.starts_with(['}', ')'])),
                "{where_}: `{line}` goes on with a column-0 line other than a closing bracket"
            );
            // Dropping a value nobody uses must change nothing: computing it must do nothing.
            let toks = tokens(code, &where_);
            // `f(x)`, and the calls without brackets: `f 'x'`, `f {x}`.
            let call = toks.contains(&Token::Symbol(b'('))
                || toks.windows(2).any(|w| {
                    matches!(w[0], Token::Name(_) | Token::Symbol(b')' | b']'))
                        && matches!(w[1], Token::Str | Token::Symbol(b'{'))
                });
            assert!(
                !call,
                "{where_}: a top-level value may not call anything (it would run whether used \
                 or not): {line}"
            );
            declares
        };
        found.push(Definition {
            declares,
            text: code,
            uses: names(code, &where_),
        });
    }
    found
}

/// The definitions of `helpers` that `body` uses, directly or through another one it uses, in
/// their order. A name counts as used where it appears as a name token at all, on any path: a
/// helper left out would fail only at run time, on the path that calls it (Redis: "Script
/// attempted to access nonexistent global variable"); the scripts' unit tests check for that.
fn shake(helpers: &[Definition], body: &str) -> String {
    let mut used = names(body, "a script's body");
    let mut kept = vec![false; helpers.len()];
    // Each pass keeps one more definition at least, or is the last.
    for _ in 0..=helpers.len() {
        let mut grew = false;
        for (keep, d) in kept.iter_mut().zip(helpers) {
            if !*keep && d.declares.iter().any(|n| used.contains(n)) {
                *keep = true;
                used.extend(&d.uses);
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    helpers
        .iter()
        .zip(kept)
        .filter(|(_, keep)| *keep)
        .map(|(d, _)| d.text)
        .collect()
}

/// Writes each script and `scripts.rs` (a `Script` static per script) into `out`.
fn assemble_scripts(manifest: &Path, out: &Path) {
    let dir = manifest.join("src/scripts");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut rust = String::new();
    let read = |file: &str| {
        let path = dir.join(file);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    };
    for (name, recipe) in scripts() {
        let mut body = String::new();
        for part in recipe.body {
            match part {
                File(file) => body.push_str(&read(file)),
                Text(text) => body.push_str(text),
            }
        }
        let texts: Vec<(&str, String)> = recipe.helpers.iter().map(|&f| (f, read(f))).collect();
        let helpers: Vec<Definition> = texts
            .iter()
            .flat_map(|(file, text)| definitions(file, text))
            .collect();
        let mut declared = BTreeSet::new();
        for name in helpers.iter().flat_map(|d| &d.declares) {
            assert!(
                declared.insert(name),
                "{name} is defined twice in {:?}",
                recipe.helpers
            );
        }
        let code = shake(&helpers, &body) + &body;
        let file = format!("{}.lua", name.to_lowercase());
        std::fs::write(out.join(&file), &code).expect("cannot write a script into OUT_DIR");
        let hash = sha1_smol::Sha1::from(code.as_bytes()).digest().to_string();
        let names = argument_names(&code)
            .iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        writeln!(
            rust,
            "pub static {name}: Script = Script::new(include_str!(concat!(env!(\"OUT_DIR\"), \"/{file}\")), \"{hash}\", &[{names}]);"
        )
        .unwrap();
    }
    std::fs::write(out.join("scripts.rs"), rust).expect("cannot write scripts.rs into OUT_DIR");
}

fn main() {
    let manifest =
        std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    assemble_scripts(&manifest, &out);
    println!("cargo::rustc-check-cfg=cfg(portable)");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if !linux || std::env::var_os("CARGO_FEATURE_PORTABLE").is_some() {
        println!("cargo::rustc-cfg=portable");
    }
    let target = std::env::var("TARGET").unwrap_or_default();
    let dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    // Only this repository's own checkout: a source tree unpacked inside another repository
    // must not take that repository's commit.
    let ours = git(&dir, &["rev-parse", "--show-toplevel"])
        .and_then(|top| Path::new(&top).canonicalize().ok())
        .is_some_and(|top| dir.canonicalize().is_ok_and(|d| d == top));
    let commit = if ours {
        git(&dir, &["rev-parse", "--short=7", "HEAD"])
    } else {
        None
    };
    let build = match commit {
        Some(commit) => format!("{commit}, {target}"),
        None => target,
    };
    println!("cargo:rustc-env=REDLOCK_BUILD={build}");
    // Built again when HEAD moves (a commit, a checkout): the files that say where it points.
    if ours {
        for path in [
            git(&dir, &["rev-parse", "--git-path", "HEAD"]),
            git(&dir, &["rev-parse", "--git-path", "packed-refs"]),
            git(&dir, &["rev-parse", "--symbolic-full-name", "HEAD"])
                .and_then(|r| git(&dir, &["rev-parse", "--git-path", &r])),
        ]
        .into_iter()
        .flatten()
        {
            let path = dir.join(path);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
