//! Names the build in `redlock --version`: the git commit it was built from (when built from a
//! git checkout of this repository) and the target triple, as `REDLOCK_BUILD` for `cli.rs`
//! ("abc1234, x86_64-unknown-linux-musl", or the target alone outside git).

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

fn main() {
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
