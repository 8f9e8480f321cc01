//! The exit-status table of the whole tool, defined once.
//!
//! `main` maps every outcome to one of these codes; the README and the man page print
//! [`TABLE`] (the man page is generated from it, and a test checks the README copy). This file
//! depends on nothing else in the crate so that the generators can include it with `#[path]`.
//!
//! Layer 0 of the list in `lib.rs`.

/// Success: acquired, released, extended; `status`: every named lock is held.
pub const OK: u8 = 0;
/// The lock is busy (not acquired); `-E N` overrides. `status`: a named lock is free.
pub const BUSY: u8 = 1;
/// Usage error: bad flag, duration, key, URL; or `acquire`/`exec` on a server whose
/// maxmemory-policy may evict locks (allkeys-*) without `--allow-eviction`: the operator decides.
pub const USAGE: u8 = 2;
/// `release`/`extend` with a token that does not hold the lock.
pub const NOT_OWNER: u8 = 3;
/// Redis unavailable: cannot connect, timed out, connection lost, out of memory or of client
/// slots, a replica where a master is needed, or the server does not speak Redis (sysexits
/// EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
/// Internal or protocol error, unexpected reply (sysexits EX_SOFTWARE).
pub const INTERNAL: u8 = 70;
/// Writing the output failed (a full disk, an I/O error); a closed pipe is not one of these
/// (sysexits EX_IOERR).
pub const IO_ERROR: u8 = 74;
/// `exec`: the lock was lost while the command ran (sysexits EX_TEMPFAIL).
pub const LOCK_LOST: u8 = 75;
/// `exec`: `--max-runtime` ran out and the command was stopped (timeout(1)'s code).
pub const TIMED_OUT: u8 = 124;
/// Authentication or ACL permission refused (sysexits EX_NOPERM).
pub const AUTH: u8 = 77;
/// `exec`: the command exists but cannot be executed.
pub const NOT_EXECUTABLE: u8 = 126;
/// `exec`: the command was not found.
pub const NOT_FOUND: u8 = 127;

/// The exit status for "interrupted by signal N" (or, for `exec`, "the command died of signal N").
pub fn signal(signo: i32) -> u8 {
    u8::try_from(128 + signo).unwrap_or(u8::MAX)
}

/// `(code, meaning)` rows, in the order the docs print them.
pub const TABLE: &[(&str, &str)] = &[
    (
        "0",
        "success (acquired, released, extended; status: all named locks held)",
    ),
    (
        "1",
        "lock busy: not acquired (with -n, or --wait ran out); -E N overrides; status: a lock is free",
    ),
    (
        "2",
        "usage error (bad flag, duration, key, URL; a server that may evict locks, without --allow-eviction)",
    ),
    (
        "3",
        "not the owner (release/extend with a token that does not hold the lock; release --force --if-fence/--if-token: another holder has it)",
    ),
    (
        "69",
        "Redis unavailable: cannot connect, timed out, connection lost, out of memory or clients, a replica, not a Redis server",
    ),
    ("70", "internal or protocol error (unexpected reply)"),
    (
        "74",
        "cannot write the output (disk full, I/O error; a closed pipe is 141, as for SIGPIPE)",
    ),
    (
        "75",
        "exec only: the lock was lost, or cannot be shown to have been held, while the command ran; or a --preempt waiter stopped a --preemptible command",
    ),
    ("77", "authentication or ACL permission refused"),
    (
        "124",
        "exec only: --max-runtime ran out and the command was stopped (unless the lock was lost first: 75)",
    ),
    ("126 / 127", "exec only: command not executable / not found"),
    (
        "128+N",
        "interrupted by signal N (for exec: the command died of signal N)",
    ),
];

/// The table as markdown, exactly as the README carries it.
pub fn markdown_table() -> String {
    let mut s = String::from("| code | meaning |\n|---|---|\n");
    for (code, meaning) in TABLE {
        s.push_str(&format!(
            "| {code} | {} |\n",
            meaning.replace("-E N", "`-E N`")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_in_the_table() {
        let codes = [
            OK,
            BUSY,
            USAGE,
            NOT_OWNER,
            UNAVAILABLE,
            INTERNAL,
            IO_ERROR,
            LOCK_LOST,
            AUTH,
            NOT_EXECUTABLE,
            NOT_FOUND,
        ];
        let mut sorted = codes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), codes.len(), "two outcomes share a code");
        let documented: Vec<&str> = TABLE.iter().flat_map(|(c, _)| c.split(" / ")).collect();
        for code in codes {
            assert!(
                documented.contains(&code.to_string().as_str()),
                "exit code {code} is not in TABLE"
            );
        }
    }

    #[test]
    fn signal_codes() {
        assert_eq!(signal(2), 130);
        assert_eq!(signal(15), 143);
        assert_eq!(signal(11), 139);
    }
}
