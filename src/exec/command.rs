//! The command `exec` runs: its words, its start with the lock's variables (and no secret in
//! its environment), and its exit status as the shell gives it.
//!
//! Layer 13 of the list in `lib.rs` (a part of `exec`).

use std::ffi::{OsStr, OsString};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use anyhow::Result;

use crate::cli::ExecArgs;
use crate::config::{Config, Servers};
use crate::error::{Kind, failure};
use crate::exit;
use crate::lock::Lock;
use crate::messages;
use crate::spawn::{self, Child, SpawnError};

use super::password_fd;

/// The command to run: CMD [ARGS...], or `/bin/sh -c SHELL-COMMAND`; a usage error if none.
pub fn command_line(args: &ExecArgs) -> Result<Vec<OsString>> {
    let argv: Vec<OsString> = match &args.shell_command {
        Some(c) => vec!["/bin/sh".into(), "-c".into(), c.into()],
        None => args.cmd.clone(),
    };
    if argv.is_empty() || argv[0].is_empty() {
        return Err(crate::error::usage(
            "no command to run: give it after the key and -- (redlock exec KEY -- CMD [ARGS...]), \
             or as a shell command with -c 'SHELL-COMMAND'",
        ));
    }
    Ok(argv)
}

/// Starts the command with the lock's variables, tied to our lifetime (see `spawn.rs`).
///
/// The command gets what a `redlock` it runs needs to reach the same servers, and no secret in
/// its environment: `REDLOCK_URL` without passwords, `REDLOCK_PREFIX`, the TLS files, and the
/// password in a sealed memory file it inherits (`REDLOCK_PASSWORD_FILE=/dev/fd/N`) instead of
/// `REDLOCK_PASSWORD`, which is removed. `REDIS_URL` is the user's own and is left as it is.
pub fn spawn(argv: &[OsString], lock: &Lock, config: &Config, handled: &[i32]) -> Result<Child> {
    let fence = lock.fence.to_string();
    let slot = lock.slot.as_ref().map(|s| s.index.to_string());
    let resource = lock.slot.as_ref().and_then(|s| s.resource.as_deref());
    let urls = config.servers.public_urls();
    let files = &config.for_child;
    let password = files
        .password
        .as_deref()
        .and_then(|pw| match password_fd(pw) {
            Ok(fd) => Some(fd),
            Err(e) => {
                messages::notice(
                    config,
                    format_args!(
                        "cannot hand the password to the command ({e}): a redlock it runs needs \
                         --password-file"
                    ),
                );
                None
            }
        });
    let mut passwords = config.servers.endpoints().iter();
    if files.password.is_none() && passwords.any(|e| e.info.redis_settings().password().is_some()) {
        messages::log(config, || {
            "the servers have different passwords: the command gets none (one password file \
             cannot carry them all)"
        });
    }
    let password_file = password
        .as_ref()
        .map(|fd| format!("/dev/fd/{}", fd.as_raw_fd()));
    fn path(p: &Option<std::path::PathBuf>) -> Option<&OsStr> {
        p.as_deref().map(std::path::Path::as_os_str)
    }
    let mut env = vec![
        ("REDLOCK_KEY", Some(OsStr::new(&lock.keys.name))),
        ("REDLOCK_TOKEN", Some(OsStr::new(&lock.token))),
        ("REDLOCK_FENCE", Some(OsStr::new(&fence))),
        // A lock with more than one holder: our place (and its name, in a pool). Removed
        // otherwise, so that an exec inside another's command does not pass on the outer place.
        ("REDLOCK_SLOT", slot.as_deref().map(OsStr::new)),
        ("REDLOCK_RESOURCE", resource.map(OsStr::new)),
        ("REDLOCK_URL", Some(OsStr::new(&urls))),
        ("REDLOCK_PREFIX", Some(OsStr::new(&config.prefix))),
        ("REDLOCK_PASSWORD", None),
        (
            "REDLOCK_PASSWORD_FILE",
            password_file.as_deref().map(OsStr::new),
        ),
        ("REDLOCK_TLS_CA", path(&files.tls_ca)),
        ("REDLOCK_TLS_CERT", path(&files.tls_cert)),
        ("REDLOCK_TLS_KEY", path(&files.tls_key)),
    ];
    // So that `redlock extend "$REDLOCK_KEY"` in the command reaches the same servers.
    match &config.servers {
        Servers::Cluster(_) => env.push(("REDLOCK_CLUSTER", Some(OsStr::new("1")))),
        Servers::Sentinel { master, .. } => {
            env.push(("REDLOCK_SENTINEL", Some(OsStr::new(master))));
        }
        _ => {}
    }
    let shown = argv[0].to_string_lossy();
    // The command has exec'd when this returns (see `spawn.rs`): it holds its own copy of the
    // password's descriptor, and ours closes when `password` drops.
    spawn::spawn(argv, &env, handled).map_err(|e| match e {
        SpawnError::NotFound => failure(Kind::NotFound, format!("command not found: {shown}")),
        SpawnError::NotExecutable(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            failure(
                Kind::NotExecutable,
                format!("cannot execute {shown}: permission denied"),
            )
        }
        SpawnError::NotExecutable(e) => {
            failure(Kind::NotExecutable, format!("cannot execute {shown}: {e}"))
        }
    })
}

/// The child's status as an exit code: its code, or 128+N if signal N killed it.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(exit::INTERNAL),
        (None, Some(sig)) => exit::signal(sig),
        (None, None) => exit::INTERNAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use signal_hook::consts::signal::{SIGKILL, SIGSEGV};

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(255 << 8)), 255);
        assert_eq!(exit_code(ExitStatus::from_raw(SIGSEGV)), 139);
        assert_eq!(exit_code(ExitStatus::from_raw(SIGKILL)), 137);
    }

    /// The command line is CMD [ARGS...] or `sh -c` with `-c`; none, or an empty CMD, is a usage
    /// error.
    #[test]
    fn the_command_is_its_words_or_a_shell_command() {
        use clap::Parser;
        let argv = |words: &[&str]| {
            let cli = crate::cli::Cli::try_parse_from(["redlock", "exec", "k"].iter().chain(words))
                .unwrap();
            let crate::cli::Command::Exec(args) = cli.command else {
                panic!("not exec")
            };
            command_line(&args)
        };
        assert_eq!(argv(&["--", "echo", "a b"]).unwrap(), ["echo", "a b"]);
        assert_eq!(
            argv(&["-c", "echo hi"]).unwrap(),
            ["/bin/sh", "-c", "echo hi"]
        );
        for none in [&["--", ""][..], &[]] {
            let err = argv(none).unwrap_err();
            assert_eq!(crate::error::exit_code(&err), exit::USAGE, "{none:?}");
        }
    }
}
