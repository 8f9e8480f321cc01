//! Facts about the acquiring process for the owner record: host, user, pid, command line.
//!
//! All of it is best effort: a missing /proc or passwd entry gives a placeholder, never an error.
//! Text is cleaned of control characters so that `status` stays one line per lock.
//!
//! A note is stored in Redis (and kept in `:meta` after release) and shown by `status` to anyone
//! who can read the prefix, so every note, given or default, passes through [`redact`] before it
//! is written: command lines carry passwords (`redis://:PW@host`, `REDLOCK_PASSWORD=PW cmd`,
//! `redis-cli -a PW`). The redaction errs on the side of hiding: a port after `-p` or a path
//! after `--auth` may turn into `***` too, and `--note` says what a lock is for without it.

use std::ffi::CStr;

use crate::lock::Owner;

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
    }
}

/// The calling script: our parent process.
pub fn parent_pid() -> u32 {
    // SAFETY: getppid has no preconditions and cannot fail.
    let ppid = unsafe { libc::getppid() };
    u32::try_from(ppid).unwrap_or(0)
}

/// The command line of `pid` from /proc, or "" where unreadable.
pub fn command_line(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|&b| b == 0)
                .filter(|part| !part.is_empty())
                .map(|part| String::from_utf8_lossy(part).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Joins arguments into one line for humans (not for a shell).
pub fn join_args<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    args.iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a secret is replaced with.
const HIDDEN: &str = "***";

/// `text` (a command line, or any note) with the secrets it may carry replaced by `***`:
/// - the password of a URL's userinfo, whatever the scheme (`redis://user:***@host`);
/// - the value of `NAME=VALUE` where NAME names a secret ([`is_secret_name`]): shell
///   assignments (`REDLOCK_PASSWORD=***`), query parameters (`?pass=***&db=0`) and long options
///   (`--password=***`);
/// - the word after `-p`, `-a` (redis-cli), `Bearer`, or a long option that names a secret
///   (`--password`, `--pass`, `--requirepass`, `--token`, `--auth`, ...), and what follows `-p`
///   in one word (`-pPW`, mysql's form).
///
/// Words are split at white space outside quotes, so a quoted value (`PASSWORD="a b"`, `-a 'a b'`)
/// is hidden whole; a quote left open runs to the end of the text.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut hide_next = false;
    while !rest.is_empty() {
        let word_start = rest.len() - rest.trim_start().len();
        out.push_str(&rest[..word_start]);
        rest = &rest[word_start..];
        if rest.is_empty() {
            break;
        }
        let len = word_len(rest);
        let (word, after) = rest.split_at(len);
        rest = after;
        if hide_next {
            hide_next = false;
            out.push_str(HIDDEN);
            continue;
        }
        hide_next = hides_next_word(word);
        out.push_str(&redact_urls(&redact_assignments(&redact_attached(word))));
    }
    out
}

/// Whether NAME (of `NAME=VALUE` or `--NAME VALUE`, case and `-`/`_` aside) names a secret. A
/// name ending in `FILE` holds a path (`REDLOCK_PASSWORD_FILE`, `--password-file`), not a secret.
fn is_secret_name(name: &str) -> bool {
    const SECRET: [&str; 7] = [
        "PASS",
        "SECRET",
        "TOKEN",
        "APIKEY",
        "API_KEY",
        "AUTH",
        "CREDENTIAL",
    ];
    let name = name
        .trim_start_matches('-')
        .to_ascii_uppercase()
        .replace('-', "_");
    !name.is_empty() && !name.ends_with("FILE") && SECRET.iter().any(|s| name.contains(s))
}

/// The length in bytes of the word `text` starts with: up to white space outside quotes.
fn word_len(text: &str) -> usize {
    let mut quote: Option<char> = None;
    for (i, c) in text.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c.is_whitespace() => return i,
            None => {}
        }
    }
    text.len()
}

/// Whether the word after `word` is a secret: `word` is an option that takes one.
fn hides_next_word(word: &str) -> bool {
    match word {
        "-p" | "-a" => true,
        _ if word.eq_ignore_ascii_case("bearer") => true,
        _ => word
            .strip_prefix("--")
            .is_some_and(|name| !name.contains('=') && is_secret_name(name)),
    }
}

/// `-pPW` (mysql's password attached to its option) as `-p***`.
fn redact_attached(word: &str) -> String {
    match word.strip_prefix("-p") {
        Some(value) if !value.is_empty() && !value.starts_with('=') => format!("-p{HIDDEN}"),
        _ => word.to_string(),
    }
}

/// Hides the value of every `NAME=VALUE` in `word` whose NAME names a secret. An unquoted value
/// ends at `&` (the next query parameter), a shell operator or white space; a quoted one at its
/// closing quote.
fn redact_assignments(word: &str) -> String {
    let is_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(eq) = rest.find('=') {
        let before = &rest[..eq];
        let name_start = before
            .char_indices()
            .rev()
            .take_while(|&(_, c)| is_name(c))
            .last()
            .map_or(eq, |(i, _)| i);
        out.push_str(&rest[..=eq]);
        rest = &rest[eq + 1..];
        if !is_secret_name(&before[name_start..]) {
            continue;
        }
        let value_len = match rest.chars().next() {
            Some(q @ ('\'' | '"')) => rest[1..].find(q).map_or(rest.len(), |end| end + 2),
            _ => rest
                .find(|c: char| c.is_whitespace() || "&;|<>()'\"`".contains(c))
                .unwrap_or(rest.len()),
        };
        if value_len > 0 {
            out.push_str(HIDDEN);
        }
        rest = &rest[value_len..];
    }
    out.push_str(rest);
    out
}

/// Hides the password of every `scheme://user:PASSWORD@` in `word`. The userinfo ends at the last
/// `@` before the next URL (a password may hold an unencoded `@`); without a `:` it is a user name
/// alone and stays.
fn redact_urls(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(sep) = rest.find("://") {
        let has_scheme = rest[..sep]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric());
        out.push_str(&rest[..sep + 3]);
        rest = &rest[sep + 3..];
        if !has_scheme {
            continue;
        }
        let region = &rest[..rest.find("://").unwrap_or(rest.len())];
        let Some(at) = region.rfind('@') else {
            continue;
        };
        if let Some(colon) = region[..at].find(':') {
            out.push_str(&rest[..=colon]);
            out.push_str(HIDDEN);
            rest = &rest[at..];
        }
    }
    out.push_str(rest);
    out
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
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for buf.len() bytes; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown-host".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    clean(&String::from_utf8_lossy(&buf[..end]))
}

/// The login name: $USER or $LOGNAME (set by login, cron, systemd and sshd), else the passwd
/// entry of our uid (an NSS lookup, which costs more than the rest of start-up together).
fn username() -> String {
    let from_env = || {
        ["USER", "LOGNAME"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
    };
    // SAFETY: getuid cannot fail; getpwuid returns NULL or a pointer to static storage that stays
    // valid until the next getpw* call, and we copy the name out before returning.
    let from_passwd = || unsafe {
        let pw = libc::getpwuid(libc::getuid());
        if pw.is_null() || (*pw).pw_name.is_null() {
            None
        } else {
            Some(CStr::from_ptr((*pw).pw_name).to_string_lossy().into_owned())
        }
    };
    from_env()
        .or_else(from_passwd)
        .map(|u| clean(&u))
        .unwrap_or_else(|| {
            // SAFETY: getuid cannot fail.
            format!("uid{}", unsafe { libc::getuid() })
        })
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
    fn secrets_are_redacted_from_notes() {
        for (note, want) in [
            // Nothing secret: unchanged.
            ("./deploy.sh --env prod", "./deploy.sh --env prod"),
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            (
                "mail -s done ops@example.com",
                "mail -s done ops@example.com",
            ),
            ("KEY=deploy make", "KEY=deploy make"),
            ("Bob's deploy", "Bob's deploy"),
            // URL userinfo, any scheme; a user alone stays.
            (
                "redlock -u redis://:PW@h:6379 acquire k",
                "redlock -u redis://:***@h:6379 acquire k",
            ),
            ("redis://alice:PW@h/0", "redis://alice:***@h/0"),
            (
                "git clone https://x:PW@github.com/a/b",
                "git clone https://x:***@github.com/a/b",
            ),
            ("rediss://u:p@ss@h", "rediss://u:***@h"),
            ("redis://alice@h", "redis://alice@h"),
            (
                "REDLOCK_URL=redis://:a@h1,redis://:b@h2 x",
                "REDLOCK_URL=redis://:***@h1,redis://:***@h2 x",
            ),
            (
                "T=$(redlock -u \"redis://:PW@h\" acquire k)",
                "T=$(redlock -u \"redis://:***@h\" acquire k)",
            ),
            // Query parameters.
            (
                "unix:///run/r.sock?pass=PW&db=1",
                "unix:///run/r.sock?pass=***&db=1",
            ),
            (
                "https://h/x?user=u&password=PW",
                "https://h/x?user=u&password=***",
            ),
            (
                "curl https://h/?access_token=PW",
                "curl https://h/?access_token=***",
            ),
            ("x?auth=PW", "x?auth=***"),
            // Assignments.
            (
                "REDLOCK_PASSWORD=PW redlock acquire k",
                "REDLOCK_PASSWORD=*** redlock acquire k",
            ),
            (
                "sh -c T=$(REDLOCK_PASSWORD=PW redlock acquire k)",
                "sh -c T=$(REDLOCK_PASSWORD=*** redlock acquire k)",
            ),
            ("db_passwd=PW; run", "db_passwd=***; run"),
            (
                "GITHUB_TOKEN=PW API_KEY=PW2 apikey=PW3",
                "GITHUB_TOKEN=*** API_KEY=*** apikey=***",
            ),
            ("AWS_SECRET_ACCESS_KEY=PW x", "AWS_SECRET_ACCESS_KEY=*** x"),
            ("MY_CREDENTIALS=PW", "MY_CREDENTIALS=***"),
            ("PASSWORD=\"a b c\" cmd", "PASSWORD=*** cmd"),
            ("PASSWORD='a b' cmd", "PASSWORD=*** cmd"),
            ("PASSWORD=\"open quote", "PASSWORD=***"),
            (
                "REDLOCK_PASSWORD_FILE=/run/pw cmd",
                "REDLOCK_PASSWORD_FILE=/run/pw cmd",
            ),
            // Options.
            ("redis-cli -a PW ping", "redis-cli -a *** ping"),
            ("redis-cli -h h -p 6380 ping", "redis-cli -h h -p *** ping"),
            ("mysql -uroot -pPW db", "mysql -uroot -p*** db"),
            (
                "tool --password PW --pass PW2 x",
                "tool --password *** --pass *** x",
            ),
            ("tool --password=PW x", "tool --password=*** x"),
            (
                "redis-server --requirepass PW",
                "redis-server --requirepass ***",
            ),
            (
                "tool --api-key PW --token=PW2",
                "tool --api-key *** --token=***",
            ),
            ("tool --password 'a b' x", "tool --password *** x"),
            (
                "tool --password-file /run/pw",
                "tool --password-file /run/pw",
            ),
            (
                "curl -H Authorization: Bearer PW",
                "curl -H Authorization: Bearer ***",
            ),
        ] {
            assert_eq!(redact(note), want, "{note}");
            assert!(
                !redact(note).contains("PW") && !redact(note).contains("a b"),
                "{note}"
            );
        }
    }

    #[test]
    fn an_explicit_note_is_redacted_too() {
        let o = owner(1, Some("deploy with REDLOCK_PASSWORD=hunter2"), String::new);
        assert_eq!(o.note, "deploy with REDLOCK_PASSWORD=***");
        let o = owner(1, None, || "redis-cli -a hunter2 ping".into());
        assert_eq!(o.note, "redis-cli -a *** ping");
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
