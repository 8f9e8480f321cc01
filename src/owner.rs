//! Facts about the acquiring process for the owner record: host, user, pid, command line.
//!
//! All of it is best effort: a missing /proc (or `ps`) or passwd entry gives a placeholder, never
//! an error.
//! Text is cleaned of control characters so that `status` stays one line per lock.
//!
//! A note is stored in Redis (and kept in `:meta` after release) and shown by `status` to anyone
//! who can read the prefix, so every note, given or default, is redacted (redact.rs) before it
//! is written: command lines carry passwords (`redis://:PW@host`, `REDLOCK_PASSWORD=PW cmd`,
//! `redis-cli -a PW`). A default note built from an argv is redacted argument by argument before
//! the arguments are joined (`--password 'two words'` is hidden whole), then as text like any.
//!
//! Layer 7 of the list in `lib.rs`.

use crate::lock::{Liveness, Owner};
use crate::os;
use crate::platform;
use crate::redact::{redact, redact_args};

/// Longest note kept, in characters.
const MAX_NOTE: usize = 200;

/// The owner record for process `pid`, described by `note` or else by `default_note`.
pub fn owner(pid: u32, note: Option<&str>, default_note: impl FnOnce() -> String) -> Owner {
    let note = match note {
        Some(n) => n.to_string(),
        None => default_note(),
    };
    Owner {
        host: hostname(),
        pid,
        user: username(),
        // Redacted before it is cut to length, so that no cut leaves a password's head behind.
        note: clean(&redact(&note)),
        pidns: pid_namespace().unwrap_or_default(),
    }
}

/// Our pid namespace: the inode in `/proc/self/ns/pid` (`pid:[4026531836]`; none on macOS). The
/// calling script (the recorded pid) is in it too: a namespace is entered by a new process, not
/// by its parent.
fn pid_namespace() -> Option<String> {
    platform::pid_namespace()
}

/// The calling script: our parent process.
pub fn parent_pid() -> u32 {
    u32::try_from(os::parent_pid()).unwrap_or(0)
}

/// The command line of `pid` from /proc, its secrets hidden argument by argument (as text where
/// the arguments come as one line: macOS), or "" where unreadable.
pub fn command_line(pid: u32) -> String {
    let Some(args) = i32::try_from(pid).ok().and_then(platform::command_line) else {
        return String::new();
    };
    if !platform::EXACT_ARGS {
        return redact(&args.join(" "));
    }
    let args: Vec<String> = args.into_iter().filter(|a| !a.is_empty()).collect();
    redact_args(&args)
}

/// Joins arguments into one line for humans (not for a shell), their secrets hidden argument
/// by argument.
pub fn join_args<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    redact_args(&args)
}

/// This host's name and pid namespace, read once for every lock `status` lists.
pub struct Here {
    host: String,
    pidns: Option<String>,
}

impl Here {
    pub fn now() -> Here {
        Here {
            host: hostname(),
            pidns: pid_namespace(),
        }
    }

    /// Whether a holder's process is gone: `Some(true)` only when it ran on this host, in our pid
    /// namespace (a container sharing the host name has pids of its own), and no process has its
    /// pid (`kill(pid, 0)` says so even where /proc hides other users' processes), or it is a
    /// zombie. `None` when that cannot be told: another host, another or an unrecorded namespace
    /// (a record of an older version), a pid that is not one. Only a hint: a recycled pid makes a
    /// dead holder look alive (never the reverse), and two hosts can share a name; `status` shows it
    /// as `stale?`. A kept lock (`kept`: `acquire --while-pid`) whose pid is gone while its keeper
    /// (`redlock-keeper --pid PID`) still runs here is [`Liveness::Draining`]: the keeper holds
    /// it until what the pid started has ended. (Read from the process table, only for a holder
    /// gone: no write to Redis on the keeper's path.)
    pub fn stale(&self, host: &str, pid: &str, pidns: &str, kept: bool) -> Option<Liveness> {
        if host != self.host || pidns.is_empty() || Some(pidns) != self.pidns.as_deref() {
            return None;
        }
        let pid: i32 = pid.parse().ok().filter(|&p| p > 0)?;
        Some(if alive(pid) {
            Liveness::Alive
        } else if kept && keeper_runs_for(pid) {
            Liveness::Draining
        } else {
            Liveness::Gone
        })
    }
}

/// Whether a keeper for `pid` runs here: a process whose command line starts
/// `redlock-keeper --pid PID --` (see `brief::start`).
fn keeper_runs_for(pid: i32) -> bool {
    let wanted = [crate::work::KEEPER_ARGV0, "--pid", &pid.to_string(), "--"];
    platform::command_lines().into_iter().any(|(_, args)| {
        if platform::EXACT_ARGS {
            args.len() >= wanted.len() && args[..wanted.len()] == wanted
        } else {
            args.first()
                .is_some_and(|line| line.starts_with(&format!("{} ", wanted.join(" "))))
        }
    })
}

fn alive(pid: i32) -> bool {
    if !os::exists(pid) {
        return false;
    }
    // A zombie has exited (its parent has not reaped it yet). Unreadable: alive, to be safe.
    platform::process(pid).is_none_or(|p| !matches!(p.state, 'Z' | 'X'))
}

fn clean(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let trimmed = cleaned.trim();
    if trimmed.chars().count() > MAX_NOTE {
        let cut: String = trimmed.chars().take(MAX_NOTE - 1).collect();
        format!("{cut}…")
    } else {
        trimmed.to_string()
    }
}

fn hostname() -> String {
    clean(&os::hostname())
}

/// The login name: $USER or $LOGNAME (set by login, cron, systemd and sshd), else the passwd
/// entry of our uid (an NSS lookup, which costs more than the rest of start-up together).
fn username() -> String {
    let from_env = || {
        ["USER", "LOGNAME"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
    };
    from_env()
        .or_else(|| os::user_name(os::uid()))
        .map(|u| clean(&u))
        .unwrap_or_else(|| format!("uid{}", os::uid()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_one_bounded_line() {
        assert_eq!(clean(" a\nb\tc "), "a b c");
        let long = "x".repeat(500);
        assert_eq!(clean(&long).chars().count(), MAX_NOTE);
    }

    #[test]
    fn an_explicit_note_is_redacted_too() {
        let o = owner(1, Some("deploy with REDLOCK_PASSWORD=hunter2"), String::new);
        assert_eq!(o.note, "deploy with REDLOCK_PASSWORD=***");
        let o = owner(1, None, || "redis-cli -a hunter2 ping".into());
        assert_eq!(o.note, "redis-cli -a *** ping");
    }

    #[test]
    fn a_default_note_from_argv_hides_whole_arguments() {
        let argv = ["deploy", "--password", "two words", "--env", "prod"];
        let o = owner(1, None, || join_args(&argv));
        assert_eq!(o.note, "deploy --password *** --env prod");
    }

    #[test]
    #[cfg(not(portable))]
    fn a_holder_is_stale_only_on_this_host_in_this_namespace_when_its_process_is_gone() {
        let me = std::process::id().to_string();
        let ns = pid_namespace().expect("/proc/self/ns/pid");
        let here = Here::now();
        assert_eq!(
            here.stale(&hostname(), &me, &ns, false),
            Some(Liveness::Alive)
        );
        assert_eq!(here.stale("another-host.invalid", &me, &ns, false), None);
        assert_eq!(here.stale(&hostname(), "not-a-pid", &ns, false), None);
        assert_eq!(here.stale(&hostname(), "0", &ns, false), None);
        // A child that exited and has been reaped: its pid names no process.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id().to_string();
        child.wait().unwrap();
        assert_eq!(
            here.stale(&hostname(), &pid, &ns, true),
            Some(Liveness::Gone)
        );
        // In another namespace (a container on this host name) or unrecorded: cannot tell.
        assert_eq!(here.stale(&hostname(), &pid, "1", false), None);
        assert_eq!(here.stale(&hostname(), &pid, "", false), None);
    }

    /// Without pid namespaces, nothing tells a holder gone.
    #[test]
    #[cfg(portable)]
    fn without_a_namespace_no_holder_is_stale() {
        let me = std::process::id().to_string();
        let here = Here::now();
        assert_eq!(pid_namespace(), None);
        assert_eq!(here.stale(&hostname(), &me, "", false), None);
    }

    /// Fails if a password in another process's arguments reaches the note, whether the
    /// arguments come one by one (Linux) or as one line (macOS).
    #[test]
    fn a_command_line_read_hides_its_secrets() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 10", "sh", "--password", "hunter2", "x"])
            .spawn()
            .unwrap();
        // (Until the exec, it is a copy of this test.)
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut line = command_line(child.id());
        while !line.contains("sleep") && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            line = command_line(child.id());
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            line.contains("sleep 10") && line.contains("--password"),
            "{line}"
        );
        assert!(!line.contains("hunter2"), "{line}");
    }

    #[test]
    fn own_command_line_is_readable() {
        let me = std::process::id();
        assert!(!command_line(me).is_empty());
        let o = owner(me, None, || "fallback".into());
        assert_eq!(o.note, "fallback");
        assert!(!o.host.is_empty() && !o.user.is_empty());
    }
}
