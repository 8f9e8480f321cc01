//! The environment variables of the whole tool, defined once: those redlock reads ([`TABLE`])
//! and those `exec` gives its command ([`GIVEN`]).
//!
//! `redlock --help` lists [`TABLE`]; the man pages' ENVIRONMENT sections (redlock(1),
//! redlock-exec(1)) are generated from both; the docs carry both as [`markdown_table`] renders
//! them, which a test checks, and another test checks that every variable the code names is
//! here. Text between backticks is code: kept in markdown, bold in the man pages, plain in
//! `--help`. This file depends on nothing else in the crate so that the generators can include
//! it with `#[path]`.
//!
//! Layer 0 of the list in `lib.rs`.

/// One variable, or several that go together.
#[derive(Debug, Clone, Copy)]
pub struct Var {
    /// The names, comma-separated: `REDLOCK_TLS_CA, REDLOCK_TLS_CERT, REDLOCK_TLS_KEY`.
    pub names: &'static str,
    /// What it does, in a line or two: `--help`, the docs' table and the man page.
    pub meaning: &'static str,
    /// What the man page says besides (empty for nothing).
    pub more: &'static str,
}

impl Var {
    /// Each name alone.
    pub fn each(&self) -> impl Iterator<Item = &'static str> {
        self.names.split(", ")
    }
}

/// What redlock reads, in the order the docs list it.
pub const TABLE: &[Var] = &[
    Var {
        names: "REDLOCK_URL",
        meaning: "Redis URL when `--url` is not given; several, comma-separated, for a quorum",
        more: "The default is redis://127.0.0.1:6379. `redlock exec` sets it for the command to the \
               URLs in use, without passwords, so that a redlock run by the command reaches the \
               same servers.",
    },
    Var {
        names: "REDIS_URL",
        meaning: "used when `REDLOCK_URL` is unset or empty",
        more: "",
    },
    Var {
        names: "REDLOCK_PASSWORD",
        meaning: "Redis password (overrides the URL's; `--password-file` overrides both)",
        more: "A password is never printed. In a URL, a password's #, ? and / must be \
               percent-encoded (%23, %3F, %2F), and a , in REDLOCK_URL as %2C; here they need \
               not be.",
    },
    Var {
        names: "REDLOCK_PASSWORD_FILE",
        meaning: "same as `--password-file FILE`",
        more: "Its first line (at most 4 KiB) is the password. `redlock exec` sets it for the \
               command (see redlock-exec(1)).",
    },
    Var {
        names: "REDLOCK_TLS_CA, REDLOCK_TLS_CERT, REDLOCK_TLS_KEY",
        meaning: "same as `--tls-ca`, `--tls-cert`, `--tls-key`",
        more: "",
    },
    Var {
        names: "REDLOCK_PREFIX",
        meaning: "key namespace, same as `--prefix`, default `redlock:`",
        more: "",
    },
    Var {
        names: "REDLOCK_META_TTL",
        meaning: "same as `--meta-ttl DUR`, default `30days`",
        more: "How long a lock's record (fence counter, last holder) is kept after the lock and \
               its waiters are gone. Fences keep increasing without it; status no longer shows \
               the last holder of a lock idle that long.",
    },
    Var {
        names: "REDLOCK_LOG_MAX",
        meaning: "same as `--log-max N`: events kept per lock for `redlock log`, default 1000, `0` \
                  for none",
        more: "",
    },
    Var {
        names: "REDLOCK_TOKEN",
        meaning: "default token for `release` and `extend`",
        more: "`redlock exec` sets it for the command to the token that holds the lock.",
    },
    Var {
        names: "REDLOCK_CLUSTER",
        meaning: "`1`: same as `--cluster`",
        more: "",
    },
    Var {
        names: "REDLOCK_SENTINEL",
        meaning: "same as `--sentinel MASTER`",
        more: "",
    },
    Var {
        names: "REDLOCK_ALLOW_EVICTION",
        meaning: "`1`: same as `--allow-eviction` (`acquire`, `exec`)",
        more: "Without it they refuse (exit status 2) a server whose maxmemory-policy is \
               allkeys-*, and warn about volatile-* (lock keys have a TTL, so those policies \
               evict them first); a replica is always refused (69). Each server is checked: \
               every quorum node, the Cluster master of the lock's slot, the master the \
               Sentinels name.",
    },
    Var {
        names: "REDLOCK_COMPLETE",
        meaning: "a shell's name (`bash`, `zsh`, `fish`, `elvish`, `powershell`): print or answer \
                  shell completions instead of running",
        more: "For example: source <(REDLOCK_COMPLETE=bash redlock). It completes the lock \
               names the server knows (held, waited for, or with a history), bounded to about a \
               second. The bash completion file the package installs (subcommands and flags \
               only) is loaded only with the bash-completion package; this glue works without it.",
    },
];

/// What `exec` puts in its command's environment: what a `redlock` run by the command needs to
/// reach the same servers as the same user, and no secret.
pub const GIVEN: &[Var] = &[
    Var {
        names: "REDLOCK_KEY",
        meaning: "the name of the lock",
        more: "",
    },
    Var {
        names: "REDLOCK_TOKEN",
        meaning: "the token that holds the lock",
        more: "",
    },
    Var {
        names: "REDLOCK_FENCE",
        meaning: "the fencing token of this acquisition: a per-key number that grows with every \
                  acquisition (the server's clock in microseconds, or one more than the fence \
                  before if that is higher; 16 digits, below 2^53); pass it to the storage the \
                  command writes to, and have that storage refuse writes with a lower fence than \
                  it has seen",
        more: "Then a holder that lost the lock without noticing cannot overwrite the work of the \
               next one.",
    },
    Var {
        names: "REDLOCK_SLOT",
        meaning: "with `--slots`, `--pool` or `--shared`: the command's place, from 0, unique among \
                  the lock's holders for the whole hold; removed otherwise, so that an `exec` \
                  inside another's command does not pass on the outer place",
        more: "It is the lowest place free when the command started.",
    },
    Var {
        names: "REDLOCK_RESOURCE",
        meaning: "with `--pool`: the name of the place the command holds; removed otherwise",
        more: "",
    },
    Var {
        names: "REDLOCK_URL",
        meaning: "the URLs in use, comma-separated, without passwords (an ACL user stays: \
                  `redis://deployer@host:6379`; a socket's `pass=` is left out)",
        more: "",
    },
    Var {
        names: "REDLOCK_PREFIX",
        meaning: "the key namespace in use",
        more: "",
    },
    Var {
        names: "REDLOCK_PASSWORD_FILE",
        meaning: "`/dev/fd/N` when the servers take a password, whatever its source (the URL, \
                  `REDLOCK_PASSWORD` or `--password-file`): a sealed, read-only in-memory file \
                  that the command inherits as descriptor N; `REDLOCK_PASSWORD` itself is removed",
        more: "Servers with different passwords get no password file (one cannot hold them all; \
               -v says so): a redlock inside the command then needs --password-file of its own.",
    },
    Var {
        names: "REDLOCK_TLS_CA, REDLOCK_TLS_CERT, REDLOCK_TLS_KEY",
        meaning: "the files of `--tls-ca`, `--tls-cert`, `--tls-key` as absolute paths, when given",
        more: "",
    },
    Var {
        names: "REDLOCK_CLUSTER, REDLOCK_SENTINEL",
        meaning: "set when `--cluster` or `--sentinel` is in use",
        more: "",
    },
    Var {
        names: "REDIS_URL",
        meaning: "passed on unchanged: it belongs to the user's own programs (a `redlock` in the \
                  command uses `REDLOCK_URL` first); put no password in it if the command should \
                  not see one",
        more: "",
    },
];

/// `vars` as a markdown table, exactly as the docs carry it.
pub fn markdown_table(vars: &[Var]) -> String {
    let mut s = String::from("| variable | meaning |\n|---|---|\n");
    for var in vars {
        let names: Vec<String> = var.each().map(|n| format!("`{n}`")).collect();
        s.push_str(&format!("| {} | {} |\n", names.join(", "), var.meaning));
    }
    s
}

/// `text` without its code marks, for `--help`.
pub fn plain(text: &str) -> String {
    text.replace('`', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each name once per table, each text free of stray code marks (an odd count would render
    /// as broken markdown and a half-bold man page).
    #[test]
    fn tables_are_well_formed() {
        for table in [TABLE, GIVEN] {
            let mut names: Vec<&str> = table.iter().flat_map(Var::each).collect();
            let n = names.len();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), n, "a name is listed twice");
            for var in table {
                for name in var.each() {
                    assert!(
                        name.starts_with("REDLOCK_") || name == "REDIS_URL",
                        "{name}"
                    );
                }
                for text in [var.meaning, var.more] {
                    assert_eq!(text.matches('`').count() % 2, 0, "{text}");
                    assert!(!text.contains('|') && !text.contains('\n'), "{text}");
                }
            }
        }
    }

    #[test]
    fn markdown_lists_every_name_in_code() {
        let md = markdown_table(TABLE);
        assert!(md.starts_with("| variable | meaning |\n|---|---|\n"));
        assert!(md.contains(
            "| `REDLOCK_TLS_CA`, `REDLOCK_TLS_CERT`, `REDLOCK_TLS_KEY` | same as `--tls-ca`"
        ));
        assert_eq!(md.lines().count(), TABLE.len() + 2);
    }
}
