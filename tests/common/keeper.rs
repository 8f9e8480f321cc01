//! For the tests of `acquire --while-pid`: finding its keepers, a process to keep a lock for,
//! and the token a script's `acquire` wrote to a file.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use super::{default_signals, wait_for};

/// Bound for what should take milliseconds (a keeper noticing its pid's end, an announcement).
pub const SOON: Duration = Duration::from_secs(10);

/// The keepers running for `pid` (`redlock-keeper --pid PID -- KEY` in their command line; a
/// zombie has none, and counts as gone).
pub fn keepers_of(pid: u32) -> Vec<u32> {
    let pid = pid.to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(n) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = raw.split(|&b| b == 0).collect();
        if args.len() >= 3
            && args[0] == b"redlock-keeper"
            && args[1] == b"--pid"
            && args[2] == pid.as_bytes()
        {
            found.push(n);
        }
    }
    found
}

/// A `sleep 1000` to keep locks for, with the default signal dispositions.
pub fn sleeper() -> Child {
    let mut cmd = Command::new("sleep");
    default_signals(&mut cmd);
    cmd.arg("1000").spawn().unwrap()
}

/// The token a script's `acquire` wrote to `file`, once the whole line is there.
pub fn token_in(file: &Path) -> String {
    let mut token = String::new();
    let written = wait_for(
        || {
            token = std::fs::read_to_string(file).unwrap_or_default();
            token.ends_with('\n')
        },
        SOON,
    );
    assert!(written, "no token in {}", file.display());
    token.trim().to_string()
}
