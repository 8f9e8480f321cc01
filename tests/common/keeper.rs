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
        let args = without_emulator(&args);
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

/// A command line without the emulator in front. `scripts/dist.sh --check` runs the aarch64
/// binary under qemu-user, started by binfmt_misc with the P flag: the kernel shows the
/// emulator's command line for it, `qemu-aarch64-static BINARY ARGV0 ARGS...`.
fn without_emulator<'a>(args: &'a [&'a [u8]]) -> &'a [&'a [u8]] {
    match args {
        [emulator, _binary, rest @ ..] if emulator.ends_with(b"/qemu-aarch64-static") => rest,
        _ => args,
    }
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

/// A bash script (in `dir/holder.bash`, run with `exec`, so that it keeps the pid and the process
/// group of the `sh` a test starts) for the tests of PID's work: it takes a flock on `dir/work`
/// on fd 9, which every process it starts inherits, so that the flock is held as long as any of
/// them runs; takes `k` for itself (`--while-pid $$ --ttl 6s FLAGS`, no TERM trap: the usual
/// script); writes the token to `dir/token`; runs `step`, which writes to `dir/steps` once
/// it runs; and releases the lock.
pub fn work_script(dir: &Path, flags: &str, step: &str) -> String {
    let script = dir.join("holder.bash");
    std::fs::write(
        &script,
        format!(
            "exec 9>'{work}'; flock 9
             T=$(redlock acquire k --while-pid $$ --ttl 6s {flags}) || exit
             echo \"$T\" >'{token}'
             sh -c '{step}'
             redlock release k \"$T\"
            ",
            work = dir.join("work").display(),
            token = dir.join("token").display(),
        ),
    )
    .unwrap();
    format!("exec bash '{}'", script.display())
}

/// A step for [`work_script`] that says it runs, then sleeps `secs` (in `dir/steps`: `started`,
/// then `done` if nobody stopped it).
pub fn step(dir: &Path, secs: u32) -> String {
    let steps = dir.join("steps");
    format!(
        "echo started >>\"{s}\"; sleep {secs}; echo done >>\"{s}\"",
        s = steps.display()
    )
}

/// A step that ignores SIGTERM (only SIGKILL ends it): notes `started` in `dir/steps`, then
/// sleeps 600 s.
pub fn stubborn_step(dir: &Path) -> String {
    format!(
        "trap \"\" TERM; echo started >>\"{}\"; sleep 600",
        dir.join("steps").display()
    )
}

/// What a second holder of `k` runs: writes `free` to `dir/result` when no process of the first
/// holder's work runs (the flock of [`work_script`] is free), `OVERLAP` otherwise.
pub fn overlap_check(dir: &Path) -> String {
    format!(
        "if flock -n '{work}' true; then echo free; else echo OVERLAP; fi >'{result}'",
        work = dir.join("work").display(),
        result = dir.join("result").display()
    )
}

/// Waits until `dir/steps` says the step runs.
pub fn step_started(dir: &Path) {
    let steps = dir.join("steps");
    assert!(
        wait_for(
            || std::fs::read_to_string(&steps).is_ok_and(|s| s.contains("started")),
            SOON
        ),
        "the step never started"
    );
}
