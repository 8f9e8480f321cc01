//! Two things the binary needs that are cheaper to work out once, here, than at every start:
//!
//! - the build's name in `redlock --version`: the git commit it was built from (when built from a
//!   git checkout of this repository) and the target triple, as `REDLOCK_BUILD` for `cli.rs`
//!   ("abc1234, x86_64-unknown-linux-musl", or the target alone outside git);
//! - the Lua scripts as sent to Redis, each assembled from `src/scripts/*.lua`, with its SHA1
//!   (what EVALSHA names it by), in `$OUT_DIR/scripts.rs` for `scripts.rs`. Hashing them at run
//!   time was 40 % of the instructions of `redlock exec KEY -- true`.

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

/// A piece of a script: a file of `src/scripts/`, or text.
enum Part {
    File(&'static str),
    Text(&'static str),
}
use Part::{File, Text};

/// `acquire.lua` (or `slots.lua`) behind `guard.lua`'s server check, for a connection's first
/// attempt: refuses a replica, and a server whose maxmemory-policy is allkeys-* (unless
/// `allow_eviction`), before anything is written, and reports the policy at the end of the
/// reply. The check rides on the attempt instead of costing a round trip of its own. The attempt
/// script itself is unchanged: it becomes the body of a function (its `return`s return from it).
fn checked(
    allow_eviction: &'static str,
    preludes: &[&'static str],
    file: &'static str,
) -> Vec<Part> {
    let mut parts = vec![File("common.lua")];
    parts.extend(preludes.iter().map(|p| File(p)));
    parts.extend([
        File("guard.lua"),
        Text("local function attempt()\n"),
        File(file),
        Text("\nend\nreturn guarded(attempt, "),
        Text(allow_eviction),
        Text(")\n"),
    ]);
    parts
}

/// Every script: its name in `scripts.rs` and what it is made of. `common.lua` (key names, the
/// queue helpers) comes first in each, so that all of them agree on the layout.
fn scripts() -> Vec<(&'static str, Vec<Part>)> {
    let plain = |file| vec![File("common.lua"), File(file)];
    let slots = |file| vec![File("common.lua"), File("slots_common.lua"), File(file)];
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

/// Writes each script and `scripts.rs` (a `Script` static per script) into `out`.
fn assemble_scripts(manifest: &Path, out: &Path) {
    let dir = manifest.join("src/scripts");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut rust = String::new();
    for (name, parts) in scripts() {
        let mut code = String::new();
        for part in parts {
            match part {
                File(file) => {
                    let path = dir.join(file);
                    let text = std::fs::read_to_string(&path)
                        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
                    code.push_str(&text);
                }
                Text(text) => code.push_str(text),
            }
        }
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
