//! Hiding secrets in a lock's note: pure text in, text with `***` out.
//!
//! A note is stored in Redis (and kept in `:meta` after release) and shown by `status` to anyone
//! who can read the prefix, and by default it is a command line, which carries passwords
//! (`redis://:PW@host`, `REDLOCK_PASSWORD=PW cmd`, `redis-cli -a PW`, `curl -u user:PW`). Every
//! note passes through here twice: when it is written (owner.rs), and when it is read for display
//! (lock/read.rs), so that a note stored by an older version or planted by another client is hidden
//! too. This module imports nothing from the crate, so both layers can use it.
//!
//! Invariants: the result only ever hides (it replaces text with `***` or drops it, never adds
//! anything else), so redacting twice is harmless; every loop walks its input once, and quoted
//! text is entered at most [`MAX_DEPTH`] levels deep, so a hostile note cannot make it slow or
//! overflow the stack. It errs on the side of hiding: a port after `-p`/`-P` or a path after
//! `--auth` turns into `***` too; `--note` says what a lock is for without it.
//!
//! Layer 0 of the list in `lib.rs`.

/// What a secret is replaced with.
const HIDDEN: &str = "***";

/// How deep quoted text inside quoted text is redacted; deeper quoted text is hidden whole.
const MAX_DEPTH: usize = 4;

/// `text` (a command line joined with spaces, a `--note`, a note read from Redis) with the
/// secrets it may carry replaced by `***`. Words are split at white space outside quotes (a
/// backslash escapes the next character; a quote that is never closed is an apostrophe), and
/// quoted text that holds white space is redacted as text of its own (`-H "X-Api-Key: ***"`).
/// Hidden:
/// - the password of a URL's userinfo, whatever the scheme (`redis://user:***@host`), and a
///   userinfo without a password that looks like a token: any in an `http(s)` URL, and one of
///   16 or more characters in any other (`https://***@github.com`, but `ssh://git@host`);
/// - the value of `NAME=VALUE` and `NAME:VALUE` where NAME names a secret ([`is_secret_name`]):
///   shell assignments (`REDLOCK_PASSWORD=***`, `PASSWORD=***` for `PASSWORD=SEC\ RET`), query
///   parameters (`?pass=***&db=0`), long options (`--password=***`), JSON (`{"password":"***"}`)
///   and openssl's `pass:***`; a value whose quote is never closed hides the rest of the text;
/// - the word after `-p`, `-P`, `-a`, `Bearer`, an option that names a secret (`--password`,
///   `--requirepass`, `-pass`, `-passin`, `-storepass`), a header or key that names one
///   (`X-Api-Key: ***`, `Authorization: Basic ***`, `"password": ***`), and the two after
///   `AUTH` (`auth` too after a `redis-cli`);
/// - the password after `-u`, `-U`, `--user` or `--proxy-user` (`curl -u admin:***`,
///   `smbclient -U user%***`, `lftp -u user,***`), and what follows `-p` in one word (`-p***`,
///   mysql's form);
/// - the word after `--pwd` (an option, unlike the shell's `PWD=/dir`), after openssl's `-k`
///   and `-K` once an `openssl` was seen (`openssl enc -k ***`), and after a word that names a
///   secret following `set` (`aws configure set aws_secret_access_key ***`,
///   `redis-cli config set requirepass ***`);
/// - vault's token (`vault login ***`), htpasswd's batch password (the last of `htpasswd -b
///   FILE USER ***`), and the LDAP tools' bind password (`ldapsearch -w ***`, `-w***`).
///
/// A script after `-c` or a cluster that ends in it (`bash -lc SCRIPT`) is text: `PGPASSWORD=***
/// psql` keeps the command after the assignment.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    Redactor::new(0).text(text, &mut out);
    out
}

/// `args` (an argv) as one line for humans, each argument redacted before they are joined, so
/// that an argument is hidden whole whatever it holds (`--password 'two words'` gives
/// `--password ***`, `PASSWORD=SEC RET` gives `PASSWORD=***`). The argument after `-c` is a
/// script (`sh -c`) and is redacted as text, as is any other argument with white space in it
/// that no rule hides whole.
pub fn redact_args<S: AsRef<str>>(args: &[S]) -> String {
    let mut out = String::new();
    let mut redactor = Redactor::new(0);
    for (i, arg) in args.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        redactor.arg(arg.as_ref(), &mut out);
    }
    out
}

/// What the previous word or argument says about the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Keep,
    /// Hide the next `n` words, unless a shell operator ends the command first.
    Hide(u8),
    /// `USER:PASSWORD` (or `USER%PASSWORD`): hide after the separator.
    Credentials,
    /// A header's or key's value: an authentication scheme (`Basic`) stays and the word after it
    /// is hidden; any other word is hidden.
    Value,
    /// A script (`sh -c SCRIPT`): redacted as text even as one argument.
    Script,
}

/// A program seen earlier in the command whose secret is told by position, not by an option
/// or a name (until a shell operator ends its command).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Program {
    Other,
    /// `vault`: the first word after `login` that is not an option or a `K=V` is a token.
    Vault {
        login: bool,
    },
    /// `htpasswd`: with `-b` (batch) the last of `FILE USER PASSWORD` (`USER PASSWORD` with
    /// `-n`) is a password; `positional` counts the words that are not options.
    Htpasswd {
        batch: bool,
        no_file: bool,
        positional: u8,
    },
    /// `ldapsearch`, `ldapmodify`, `ldapadd`...: `-w PASSWORD` (and `-wPASSWORD`).
    Ldap,
}

struct Redactor {
    next: Next,
    program: Program,
    /// A `redis-cli` was seen: a lowercase `auth` is its command.
    redis_cli: bool,
    /// An `openssl` was seen: `-k` and `-K` take its pass phrase and key.
    openssl: bool,
    /// The previous word was `set`: a secret's name now is followed by its value.
    after_set: bool,
    /// A value's quote was never closed: everything after it is hidden.
    hide_rest: bool,
    depth: usize,
}

impl Redactor {
    fn new(depth: usize) -> Redactor {
        Redactor {
            next: Next::Keep,
            program: Program::Other,
            redis_cli: false,
            openssl: false,
            after_set: false,
            hide_rest: false,
            depth,
        }
    }

    fn text(&mut self, text: &str, out: &mut String) {
        let mut rest = text;
        while !rest.is_empty() && !self.hide_rest {
            let gap = rest.len() - rest.trim_start().len();
            out.push_str(&rest[..gap]);
            rest = &rest[gap..];
            if rest.is_empty() {
                break;
            }
            let (word, after) = rest.split_at(word_len(rest));
            rest = after;
            self.word(word, out);
        }
    }

    /// One argument of an argv: its value runs to its end, white space and all.
    fn arg(&mut self, arg: &str, out: &mut String) {
        if self.hide_rest {
            return;
        }
        let after_set = std::mem::take(&mut self.after_set);
        if self.next == Next::Script {
            self.next = Next::Keep;
            Redactor::new(self.depth + 1).text(arg, out);
            return;
        }
        if self.hidden_by_previous(arg, out) || self.hidden_by_program(arg, out) {
            return;
        }
        if let Some(hidden) = hide_whole_arg(arg) {
            out.push_str(&hidden);
            return;
        }
        if arg.chars().any(char::is_whitespace) {
            // Not a value of one of ours: text, such as a header (`X-Api-Key: SECRET`).
            self.text(arg, out);
        } else {
            self.word_by_itself(arg, after_set, out);
        }
    }

    fn word(&mut self, word: &str, out: &mut String) {
        let after_set = std::mem::take(&mut self.after_set);
        if self.hidden_by_previous(word, out) || self.hidden_by_program(word, out) {
            return;
        }
        self.word_by_itself(word, after_set, out);
    }

    /// A word that what came before it does not hide: the rules of the word itself.
    fn word_by_itself(&mut self, word: &str, after_set: bool, out: &mut String) {
        let bare = unquote(word);
        if is_redis_cli(bare) {
            self.redis_cli = true;
        }
        if bare.rsplit('/').next() == Some("openssl") {
            self.openssl = true;
        }
        self.next = if after_set && is_secret_name(bare) {
            Next::Hide(1)
        } else {
            self.after(bare)
        };
        self.after_set = bare.eq_ignore_ascii_case("set");
        let inner = self.quoted_parts(word);
        let (rewritten, unclosed) = rewrite(&inner);
        out.push_str(&rewritten);
        if unclosed {
            self.hide_rest = true;
        }
    }

    /// Applies what the previous word said about `unit`; true if that decided its output.
    fn hidden_by_previous(&mut self, unit: &str, out: &mut String) -> bool {
        let next = std::mem::replace(&mut self.next, Next::Keep);
        match next {
            Next::Keep | Next::Script => false,
            Next::Hide(n) => {
                if is_shell_operator(unit) {
                    return false;
                }
                out.push_str(HIDDEN);
                if n > 1 && !unit.ends_with([';', '&', '|', ')']) {
                    self.next = Next::Hide(n - 1);
                }
                true
            }
            // A URL (redlock's own `-u URL`) is left to the URL rule.
            Next::Credentials if unit.contains("://") => false,
            Next::Credentials => {
                match unit.find(CREDENTIALS_SEP) {
                    Some(sep) => {
                        out.push_str(&unit[..=sep]);
                        out.push_str(HIDDEN);
                    }
                    None => out.push_str(unit),
                }
                true
            }
            Next::Value => {
                if is_auth_scheme(unquote(unit)) {
                    out.push_str(unit);
                    self.next = Next::Hide(1);
                } else if !is_shell_operator(unit) {
                    out.push_str(HIDDEN);
                } else {
                    return false;
                }
                true
            }
        }
    }

    /// Applies what the program seen earlier says about `unit` (and notes a program named by
    /// it); true if that decided its output.
    fn hidden_by_program(&mut self, unit: &str, out: &mut String) -> bool {
        let bare = unquote(unit);
        if is_shell_operator(bare) {
            self.program = Program::Other;
            return false;
        }
        let ends_command = unit.ends_with([';', '&', '|', ')']);
        let hide = match &mut self.program {
            Program::Other => {
                self.program = match bare.rsplit('/').next().unwrap_or(bare) {
                    "vault" => Program::Vault { login: false },
                    "htpasswd" => Program::Htpasswd {
                        batch: false,
                        no_file: false,
                        positional: 0,
                    },
                    name if name.starts_with("ldap") => Program::Ldap,
                    _ => Program::Other,
                };
                false
            }
            Program::Vault { login } => {
                if !*login {
                    *login = bare == "login";
                    false
                } else if bare.starts_with('-') || bare.contains('=') {
                    false
                } else {
                    self.program = Program::Other;
                    true
                }
            }
            Program::Htpasswd {
                batch,
                no_file,
                positional,
            } => match bare.strip_prefix('-') {
                Some(flags) if !flags.is_empty() && *positional == 0 => {
                    *batch |= flags.contains('b');
                    *no_file |= flags.contains('n');
                    false
                }
                _ => {
                    *positional = positional.saturating_add(1);
                    *batch && *positional == if *no_file { 2 } else { 3 }
                }
            },
            Program::Ldap => {
                if bare.strip_prefix("-w").is_some_and(|pw| !pw.is_empty()) {
                    out.push_str("-w");
                    out.push_str(HIDDEN);
                    if ends_command {
                        self.program = Program::Other;
                    }
                    return true;
                }
                false
            }
        };
        if ends_command {
            self.program = Program::Other;
        }
        if hide {
            out.push_str(HIDDEN);
        }
        hide
    }

    /// What `word` (quotes removed) says about the word after it.
    fn after(&self, word: &str) -> Next {
        match word {
            "-p" | "-P" => return Next::Hide(1),
            // redis-cli's password; elsewhere `-a` is "all" (`cp -a`, `git commit -a`).
            "-a" if self.redis_cli => return Next::Hide(1),
            // openssl's pass phrase (`enc -k PW`) and raw key (`-K HEX`); elsewhere `-k` is
            // curl's "insecure".
            "-k" | "-K" if self.openssl => return Next::Hide(1),
            "-u" | "-U" | "--user" | "--proxy-user" => return Next::Credentials,
            "-w" if self.program == Program::Ldap => return Next::Hide(1),
            "-c" => return Next::Script,
            "AUTH" => return Next::Hide(2),
            _ => {}
        }
        // A shell's `-c` among other short options (`bash -lc`, `sh -ec`, `sh -euxc`): what
        // follows is a script too, not an argument (`PGPASSWORD=PW psql` hides the value and
        // keeps `psql`; as one argument `NAME=VALUE` would be hidden whole).
        if let Some(flags) = word.strip_prefix('-')
            && (2..=5).contains(&flags.len())
            && flags.ends_with('c')
            && flags.chars().all(|c| c.is_ascii_lowercase())
        {
            return Next::Script;
        }
        if word.eq_ignore_ascii_case("bearer") {
            return Next::Hide(1);
        }
        if self.redis_cli && word.eq_ignore_ascii_case("auth") {
            return Next::Hide(2);
        }
        if let Some(name) = word.strip_suffix(':') {
            // `X-Api-Key:`, `Authorization:`, `{"password":`, `password:`.
            let name = name.trim_start_matches(['{', ',', '[', '-']);
            let name = unquote(name);
            if is_secret_name(name) {
                return Next::Value;
            }
        }
        // `Authorization:Bearer PW`, `AUTHORIZATION=Basic PW`: the pair's value is the scheme
        // (hidden by the pair rule), the credential is the next word.
        if let Some(sep) = word.rfind([':', '='])
            && is_auth_scheme(&word[sep + 1..])
            && is_secret_name(unquote(
                word[..sep].trim_start_matches(['{', ',', '[', '-']),
            ))
        {
            return Next::Hide(1);
        }
        if word.contains('=') {
            return Next::Keep;
        }
        if word.starts_with("--") {
            if is_secret_name(word) {
                return Next::Hide(1);
            }
        } else if let Some(name) = word.strip_prefix('-') {
            // openssl's `-pass`, `-passin`, keytool's `-storepass`: but `-pPW` is mysql's.
            if is_openssl_pass(word)
                || (!name.starts_with('p')
                    && name.len() > 1
                    && name.chars().all(|c| c.is_ascii_alphanumeric())
                    && is_secret_name(name))
            {
                return Next::Hide(1);
            }
        }
        Next::Keep
    }

    /// `word` with every quoted part that holds white space redacted as text of its own.
    fn quoted_parts(&self, word: &str) -> String {
        if !word.contains(['\'', '"']) {
            return word.to_string();
        }
        let mut out = String::with_capacity(word.len());
        let mut i = 0;
        while i < word.len() {
            let c = word[i..].chars().next().unwrap_or(' ');
            if c == '\\' {
                let len = escaped_len(&word[i..]);
                out.push_str(&word[i..i + len]);
                i += len;
                continue;
            }
            if (c == '\'' || c == '"')
                && let Some(end) = closing_quote(&word[i + 1..], c)
            {
                let inner = &word[i + 1..i + 1 + end];
                out.push(c);
                if !inner.chars().any(char::is_whitespace) {
                    out.push_str(inner);
                } else if self.depth + 1 >= MAX_DEPTH {
                    out.push_str(HIDDEN);
                } else {
                    Redactor::new(self.depth + 1).text(inner, &mut out);
                }
                out.push(c);
                i += end + 2;
                continue;
            }
            out.push(c);
            i += c.len_utf8();
        }
        out
    }
}

/// The argument with its secret hidden, when a rule hides everything after a prefix:
/// `NAME=VALUE` and `--NAME=VALUE`, `-pPW`, `-uUSER:PW`, `--user=USER:PW` and a header
/// `NAME: VALUE`, where the value may hold white space (one argument of an argv).
fn hide_whole_arg(arg: &str) -> Option<String> {
    if let Some(hidden) = attached(arg) {
        return Some(hidden);
    }
    let is_name = |s: &str| !s.is_empty() && s.chars().all(is_name_char);
    if let Some((name, _)) = arg.split_once('=') {
        let option = name.trim_start_matches('-');
        if is_name(option) {
            if is_secret_name(name) {
                return Some(format!("{name}={HIDDEN}"));
            }
            if matches!(name, "--user" | "--proxy-user") {
                let value = &arg[name.len() + 1..];
                return value
                    .find(CREDENTIALS_SEP)
                    .map(|sep| format!("{name}={}{HIDDEN}", &value[..=sep]));
            }
        }
    }
    if let Some((name, value)) = arg.split_once(':')
        && is_name(name)
        && is_secret_name(name)
        && value.starts_with(char::is_whitespace)
    {
        let value = value.trim_start();
        let scheme = value
            .split_whitespace()
            .next()
            .filter(|s| is_auth_scheme(s) && value.len() > s.len());
        return Some(match scheme {
            Some(s) => format!("{name}: {s} {HIDDEN}"),
            None => format!("{name}: {HIDDEN}"),
        });
    }
    None
}

/// `-pPW` (mysql) as `-p***`, `-uUSER:PW` (curl) as `-uUSER:***`.
fn attached(word: &str) -> Option<String> {
    if let Some(value) = word.strip_prefix("-p")
        && !value.is_empty()
        && !value.starts_with('=')
        && !is_openssl_pass(word)
    {
        return Some(format!("-p{HIDDEN}"));
    }
    if let Some(value) = word.strip_prefix("-u").filter(|v| !v.contains("://"))
        && let Some(sep) = value.find(CREDENTIALS_SEP)
    {
        return Some(format!("-u{}{HIDDEN}", &value[..=sep]));
    }
    None
}

/// One word with its secrets hidden, and whether a value's quote was left open.
fn rewrite(word: &str) -> (String, bool) {
    if let Some(hidden) = attached(word) {
        return (hidden, false);
    }
    let word = match word
        .strip_prefix("--user=")
        .or(word.strip_prefix("--proxy-user="))
    {
        Some(value) => match value.find(CREDENTIALS_SEP) {
            Some(sep) => {
                let keep = word.len() - value.len() + sep + 1;
                return (format!("{}{HIDDEN}", &word[..keep]), false);
            }
            None => word,
        },
        None => word,
    };
    let (word, unclosed) = redact_pairs(word);
    (redact_urls(&word), unclosed)
}

/// What separates a user from a password in `-u USER:PW` (curl), `-U USER%PW` (smbclient) and
/// `-u USER,PW` (lftp).
const CREDENTIALS_SEP: [char; 3] = [':', '%', ','];

/// Whether NAME (of `NAME=VALUE`, `NAME: VALUE` or `--NAME VALUE`, case and `-`/`_`/`.` aside)
/// names a secret: it contains PASS, SECRET, TOKEN, APIKEY/API_KEY, AUTH (not as in AUTHOR),
/// CREDENTIAL, PRIVATE or COOKIE, or has a part PW or PWD (`MYSQL_PWD`, `DB_PW`; the shell's
/// `PWD` and `OLDPWD` are directories, but `--pwd` is an option). A name ending in FILE holds a
/// path (`REDLOCK_PASSWORD_FILE`, `--password-file`), not a secret.
fn is_secret_name(name: &str) -> bool {
    let option = name.starts_with("--");
    const SECRET: [&str; 8] = [
        "PASS",
        "SECRET",
        "TOKEN",
        "APIKEY",
        "API_KEY",
        "CREDENTIAL",
        "PRIVATE",
        "COOKIE",
    ];
    let name = name
        .trim_start_matches('-')
        .to_ascii_uppercase()
        .replace(['-', '.'], "_");
    if name.is_empty() || name.ends_with("FILE") {
        return false;
    }
    let auth = name.match_indices("AUTH").any(|(i, _)| {
        let rest = &name[i + 4..];
        !rest.starts_with("OR") || rest.starts_with("ORI")
    });
    let pw = (option || (name != "PWD" && name != "OLDPWD"))
        && name.split('_').any(|part| part == "PW" || part == "PWD");
    auth || pw || SECRET.iter().any(|s| name.contains(s))
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// openssl's options that take a pass phrase source (`-pass pass:PW`), not mysql's `-pPW`.
fn is_openssl_pass(word: &str) -> bool {
    matches!(word, "-pass" | "-passin" | "-passout" | "-password")
}

/// The scheme word of an `Authorization` value.
fn is_auth_scheme(word: &str) -> bool {
    ["Basic", "Bearer", "Digest", "Token", "Negotiate", "NTLM"]
        .iter()
        .any(|s| word.eq_ignore_ascii_case(s))
}

fn is_redis_cli(word: &str) -> bool {
    let base = word.rsplit('/').next().unwrap_or(word);
    matches!(base, "redis-cli" | "valkey-cli" | "keydb-cli")
}

fn is_shell_operator(word: &str) -> bool {
    matches!(word, ";" | "&&" | "||" | "|" | "&" | ")")
}

/// `word` without one pair of quotes around all of it.
fn unquote(word: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = word.strip_prefix(q).and_then(|w| w.strip_suffix(q)) {
            return inner;
        }
    }
    word
}

/// The length in bytes of `text`'s first character and, if it is a backslash, the one it escapes.
fn escaped_len(text: &str) -> usize {
    let mut chars = text.chars();
    let first = chars.next().map_or(0, char::len_utf8);
    if text.starts_with('\\') {
        first + chars.next().map_or(0, char::len_utf8)
    } else {
        first
    }
}

/// Where `quote` closes in `text` (which follows the opening one): a backslash escapes inside
/// double quotes, not inside single ones.
fn closing_quote(text: &str, quote: char) -> Option<usize> {
    let mut i = 0;
    while i < text.len() {
        let c = text[i..].chars().next()?;
        if c == quote {
            return Some(i);
        }
        i += if c == '\\' && quote == '"' {
            escaped_len(&text[i..])
        } else {
            c.len_utf8()
        };
    }
    None
}

/// The length in bytes of the word `text` starts with: up to white space outside quotes.
fn word_len(text: &str) -> usize {
    let mut i = 0;
    while i < text.len() {
        let Some(c) = text[i..].chars().next() else {
            break;
        };
        if c.is_whitespace() {
            return i;
        }
        if c == '\\' {
            i += escaped_len(&text[i..]);
            continue;
        }
        if (c == '\'' || c == '"')
            && let Some(end) = closing_quote(&text[i + 1..], c)
        {
            i += end + 2;
            continue;
        }
        i += c.len_utf8();
    }
    text.len()
}

/// The length in bytes of the value `text` starts with, up to white space or one of `stops`
/// outside quotes, and whether a quote in it is never closed (then it runs to the end).
fn value_len(text: &str, stops: &str) -> (usize, bool) {
    let mut i = 0;
    while i < text.len() {
        let Some(c) = text[i..].chars().next() else {
            break;
        };
        if c.is_whitespace() || stops.contains(c) {
            return (i, false);
        }
        if c == '\\' {
            i += escaped_len(&text[i..]);
            continue;
        }
        if c == '\'' || c == '"' {
            match closing_quote(&text[i + 1..], c) {
                Some(end) => i += end + 2,
                None => return (text.len(), true),
            }
            continue;
        }
        i += c.len_utf8();
    }
    (text.len(), false)
}

/// Hides the value of every `NAME=VALUE` and `NAME:VALUE` in `word` whose NAME names a secret.
/// NAME before `=` is the run of name characters before it (`?pass=`, `&password=`,
/// `--password=`); before `:` it is a quoted name (`"password":`, JSON) or a run of name
/// characters that starts the word or follows `{`, `,`, `(` or `;` (`pass:PW`), so that a URL's
/// `user:` (after `//`) is left to [`redact_urls`]. A value after `=` ends at white space or a
/// shell operator, after `:` also at `,`, `}` or `]`.
fn redact_pairs(word: &str) -> (String, bool) {
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(sep) = rest.find(['=', ':']) {
        let before = &rest[..sep];
        let colon = rest[sep..].starts_with(':');
        let name = if colon {
            colon_name(before)
        } else {
            let start = before
                .char_indices()
                .rev()
                .take_while(|&(_, c)| is_name_char(c))
                .last()
                .map_or(sep, |(i, _)| i);
            Some(&before[start..])
        };
        out.push_str(&rest[..=sep]);
        rest = &rest[sep + 1..];
        if !name.is_some_and(is_secret_name) {
            continue;
        }
        let stops = if colon { "&;|<>()`,}]" } else { "&;|<>()`" };
        let (len, unclosed) = value_len(rest, stops);
        if len > 0 {
            out.push_str(HIDDEN);
        }
        rest = &rest[len..];
        if unclosed {
            return (out, true);
        }
    }
    out.push_str(rest);
    (out, false)
}

/// The name before a `:` in `before` (the text of a word up to it), if it has one.
fn colon_name(before: &str) -> Option<&str> {
    if let Some(q @ ('"' | '\'')) = before.chars().next_back() {
        let inner = &before[..before.len() - 1];
        let open = inner.rfind(q)?;
        return Some(&inner[open + 1..]);
    }
    let start = before
        .char_indices()
        .rev()
        .take_while(|&(_, c)| is_name_char(c))
        .last()
        .map_or(before.len(), |(i, _)| i);
    let ok = before[..start]
        .chars()
        .next_back()
        .is_none_or(|c| matches!(c, '{' | ',' | '(' | ';' | '"' | '\''));
    ok.then(|| &before[start..])
}

/// Hides the password of every `scheme://user:PASSWORD@` in `word`, and a userinfo without a
/// password that looks like a token: any in an `http`/`https` URL (a user alone would be asked
/// for a password there), one of 16 or more characters in any other. The userinfo ends at the
/// last `@` before the next URL (a password may hold an unencoded `@`).
fn redact_urls(word: &str) -> String {
    const TOKEN_LEN: usize = 16;
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(sep) = rest.find("://") {
        let scheme_start = rest[..sep]
            .char_indices()
            .rev()
            .take_while(|&(_, c)| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
            .last()
            .map_or(sep, |(i, _)| i);
        let scheme = rest[scheme_start..sep].to_ascii_lowercase();
        out.push_str(&rest[..sep + 3]);
        rest = &rest[sep + 3..];
        if scheme.is_empty() {
            continue;
        }
        let region = &rest[..rest.find("://").unwrap_or(rest.len())];
        let Some(at) = region.rfind('@') else {
            continue;
        };
        let userinfo = &region[..at];
        if let Some(colon) = userinfo.find(':') {
            out.push_str(&rest[..=colon]);
            out.push_str(HIDDEN);
            rest = &rest[at..];
        } else if !userinfo.contains('/')
            && (matches!(scheme.as_str(), "http" | "https")
                || userinfo.chars().count() >= TOKEN_LEN)
        {
            out.push_str(HIDDEN);
            rest = &rest[at..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Notes as text (`--note`, a note read from Redis, an old joined command line).
    const TEXT: &[(&str, &str)] = &[
        // Nothing secret: unchanged.
        ("./deploy.sh --env prod", "./deploy.sh --env prod"),
        ("deploy.sh --env prod", "deploy.sh --env prod"),
        ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
        (
            "mail -s done ops@example.com",
            "mail -s done ops@example.com",
        ),
        ("KEY=deploy make", "KEY=deploy make"),
        ("REDLOCK_KEY=deploy ./x", "REDLOCK_KEY=deploy ./x"),
        ("Bob's deploy", "Bob's deploy"),
        ("ssh git@github.com", "ssh git@github.com"),
        ("ssh://git@github.com/o/r", "ssh://git@github.com/o/r"),
        ("git@github.com:o/r.git", "git@github.com:o/r.git"),
        ("redis://alice@h", "redis://alice@h"),
        ("redis://alice@host:6379/0", "redis://alice@host:6379/0"),
        (
            "cd $PWD && OLDPWD=/x PWD=/y make",
            "cd $PWD && OLDPWD=/x PWD=/y make",
        ),
        (
            "GIT_AUTHOR_NAME=bob git commit",
            "GIT_AUTHOR_NAME=bob git commit",
        ),
        ("fix the auth bug", "fix the auth bug"),
        ("sort -u list", "sort -u list"),
        ("mysql -uroot db", "mysql -uroot db"),
        ("at 12:30 run", "at 12:30 run"),
        ("docker run -v /a:/b img", "docker run -v /a:/b img"),
        ("curl -H Accept: text/plain", "curl -H Accept: text/plain"),
        ("openssl enc -pass env:VAR", "openssl enc -pass ***"),
        // URL userinfo, any scheme.
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
        (
            "REDLOCK_URL=redis://:a@h1,redis://:b@h2 x",
            "REDLOCK_URL=redis://:***@h1,redis://:***@h2 x",
        ),
        (
            "T=$(redlock -u \"redis://:PW@h\" acquire k)",
            "T=$(redlock -u \"redis://:***@h\" acquire k)",
        ),
        // A userinfo without a password that is a token.
        (
            "git clone https://ghp_PWaaaaaaaaaaaaaaaa@github.com/o/r",
            "git clone https://***@github.com/o/r",
        ),
        ("git clone https://PW@h/o/r", "git clone https://***@h/o/r"),
        ("redis://PWxxxxxxxxxxxxxxxxxx@h", "redis://***@h"),
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
        ("PASSWORD=\"open quote --x y", "PASSWORD=***"),
        ("PASSWORD=SEC\\ RETPW x", "PASSWORD=*** x"),
        ("PASSWORD=a\"b PW\"c x", "PASSWORD=*** x"),
        ("MYSQL_PWD=PW mysql", "MYSQL_PWD=*** mysql"),
        ("DB_PW=PW ./migrate", "DB_PW=*** ./migrate"),
        ("PRIVATE_KEY=PW x", "PRIVATE_KEY=*** x"),
        ("GIT_AUTHORIZATION=PW x", "GIT_AUTHORIZATION=*** x"),
        (
            "REDLOCK_PASSWORD_FILE=/run/pw cmd",
            "REDLOCK_PASSWORD_FILE=/run/pw cmd",
        ),
        // Options.
        ("redis-cli -a PW ping", "redis-cli -a *** ping"),
        ("redis-cli -h h -p 6380 ping", "redis-cli -h h -p *** ping"),
        ("sqlcmd -S h -P PW", "sqlcmd -S h -P ***"),
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
        ("deploy --password 'two PW' x", "deploy --password *** x"),
        (
            "tool --password-file /run/pw",
            "tool --password-file /run/pw",
        ),
        (
            "curl -H Authorization: Bearer PW",
            "curl -H Authorization: Bearer ***",
        ),
        (
            "curl -H Authorization:Bearer PW -s",
            "curl -H Authorization:*** *** -s",
        ),
        ("AUTHORIZATION=Basic PW cmd", "AUTHORIZATION=*** *** cmd"),
        ("git commit -a -m fix", "git commit -a -m fix"),
        ("cp -a src dst", "cp -a src dst"),
        ("redis-cli -a PW ping", "redis-cli -a *** ping"),
        (
            "openssl enc -pass pass:PW -in f",
            "openssl enc -pass *** -in f",
        ),
        ("openssl rsa -passin pass:PW", "openssl rsa -passin ***"),
        ("x pass:PW", "x pass:***"),
        (
            "keytool -storepass PW -keypass PW2 -alias a",
            "keytool -storepass *** -keypass *** -alias a",
        ),
        // curl/wget/smbclient credentials.
        ("curl -u admin:PW https://x", "curl -u admin:*** https://x"),
        (
            "curl --user admin:PW https://x",
            "curl --user admin:*** https://x",
        ),
        ("curl --user=admin:PW x", "curl --user=admin:*** x"),
        ("curl -uadmin:PW x", "curl -uadmin:*** x"),
        (
            "redlock -uredis://:PW@h status",
            "redlock -uredis://:***@h status",
        ),
        ("curl -u 'admin:two PW' x", "curl -u 'admin:*** x"),
        ("smbclient -U bob%PW //h/s", "smbclient -U bob%*** //h/s"),
        (
            "wget --user=bob --password=PW x",
            "wget --user=bob --password=*** x",
        ),
        // Headers, JSON.
        (
            "curl -H \"X-Api-Key: PW\" https://x",
            "curl -H \"X-Api-Key: ***\" https://x",
        ),
        (
            "curl -H X-Api-Key: PW https://x",
            "curl -H X-Api-Key: *** https://x",
        ),
        (
            "curl -H 'Authorization: Basic PW' x",
            "curl -H 'Authorization: Basic ***' x",
        ),
        (
            "curl -H Authorization: Basic PW x",
            "curl -H Authorization: Basic *** x",
        ),
        (
            "curl -H Authorization: PW x",
            "curl -H Authorization: *** x",
        ),
        (
            "curl --header=\"X-Auth-Token: PW\" x",
            "curl --header=\"X-Auth-Token: ***\" x",
        ),
        (
            "curl -d '{\"password\":\"PW\",\"user\":\"u\"}' x",
            "curl -d '{\"password\":***,\"user\":\"u\"}' x",
        ),
        (
            "curl -d {\"password\":\"PW\"} x",
            "curl -d {\"password\":***} x",
        ),
        (
            "curl -d '{\"password\": \"two PW\"}' x",
            "curl -d '{\"password\": ***' x",
        ),
        ("password: PW", "password: ***"),
        // redis-cli's AUTH.
        ("redis-cli AUTH default PW", "redis-cli AUTH *** ***"),
        ("redis-cli auth PW", "redis-cli auth ***"),
        (
            "redis-cli AUTH PW && echo ok",
            "redis-cli AUTH *** && echo ok",
        ),
        (
            "redis-cli HELLO 3 AUTH u PW",
            "redis-cli HELLO 3 AUTH *** ***",
        ),
        // --pwd is an option (the shell's PWD= is a directory, above), openssl's -k and -K,
        // a secret set by name (aws, redis-cli), lftp's USER,PASSWORD.
        ("mysqlsh --pwd PW db", "mysqlsh --pwd *** db"),
        ("tool --pwd=PW x", "tool --pwd=*** x"),
        (
            "openssl enc -aes256 -k PW -in f",
            "openssl enc -aes256 -k *** -in f",
        ),
        ("openssl enc -K PWHEX -iv 00", "openssl enc -K *** -iv 00"),
        ("openssl enc -pass pass:PW", "openssl enc -pass ***"),
        (
            "aws configure set aws_secret_access_key PW",
            "aws configure set aws_secret_access_key ***",
        ),
        (
            "aws configure set default.aws_secret_access_key PW --profile p",
            "aws configure set default.aws_secret_access_key *** --profile p",
        ),
        (
            "aws configure set secret_access_key PW",
            "aws configure set secret_access_key ***",
        ),
        (
            "redis-cli config set requirepass PW",
            "redis-cli config set requirepass ***",
        ),
        ("lftp -u deploy,PW sftp://h", "lftp -u deploy,*** sftp://h"),
        ("lftp -udeploy,PW h", "lftp -udeploy,*** h"),
        // vault's token, htpasswd's batch password, the LDAP tools' bind password; an
        // assignment's value ends at its word (the command after it stays).
        ("vault login PW", "vault login ***"),
        (
            "vault login -method=token PW",
            "vault login -method=token ***",
        ),
        (
            "htpasswd -b /etc/h.pw bob PW && echo ok",
            "htpasswd -b /etc/h.pw bob *** && echo ok",
        ),
        (
            "htpasswd -bc /etc/h.pw bob PW",
            "htpasswd -bc /etc/h.pw bob ***",
        ),
        (
            "ldapsearch -x -D cn=admin -w PW -b dc=x",
            "ldapsearch -x -D cn=admin -w *** -b dc=x",
        ),
        ("ldapmodify -w PW -f f.ldif", "ldapmodify -w *** -f f.ldif"),
        ("ldapadd -wPW -f f.ldif", "ldapadd -w*** -f f.ldif"),
        (
            "PGPASSWORD=S3PW psql -h db -c select",
            "PGPASSWORD=*** psql -h db -c select",
        ),
        // Readable: curl's -k is "insecure", a `set` of something not secret.
        ("curl -k https://h/x", "curl -k https://h/x"),
        (
            "aws configure set region eu-west-1",
            "aws configure set region eu-west-1",
        ),
    ];

    #[test]
    fn secrets_are_redacted_from_text() {
        for &(note, want) in TEXT {
            let got = redact(note);
            assert_eq!(got, want, "{note}");
            // Every secret in the table holds "PW" (readable notes may keep it, as in $PWD, and
            // names such as MYSQL_PWD= stay).
            let names_aside = got.replace("_PWD=", "=").replace("_PW=", "=");
            assert!(
                got == note || !names_aside.contains("PW"),
                "{note} -> {got}"
            );
            assert_eq!(redact(&got), got, "redacting twice changes {note}");
        }
    }

    /// One table of every form a secret takes on a command line (long as it is, it reads as a
    /// list: one row per form, each with what must be shown).
    #[test]
    fn secrets_are_redacted_from_argv_argument_by_argument() {
        for (argv, want) in [
            (
                &["deploy", "--password", "two words", "x"][..],
                "deploy --password *** x",
            ),
            (&["env", "PASSWORD=SEC RETPW", "x"], "env PASSWORD=*** x"),
            (&["tool", "--password=two PW", "x"], "tool --password=*** x"),
            (&["mysql", "-ptwo PW", "db"], "mysql -p*** db"),
            (
                &["curl", "-u", "admin:two PW", "https://x"],
                "curl -u admin:*** https://x",
            ),
            (
                &["curl", "--user=admin:two PW", "x"],
                "curl --user=admin:*** x",
            ),
            (
                &["curl", "-H", "X-Api-Key: two PW", "x"],
                "curl -H X-Api-Key: *** x",
            ),
            (
                &["curl", "-H", "Authorization: Basic PW", "x"],
                "curl -H Authorization: Basic *** x",
            ),
            (
                &["curl", "-d", "{\"password\": \"two PW\"}"],
                "curl -d {\"password\": ***",
            ),
            (
                &["openssl", "enc", "-pass", "pass:PW"],
                "openssl enc -pass ***",
            ),
            (
                &["redis-cli", "AUTH", "default", "PW"],
                "redis-cli AUTH *** ***",
            ),
            (&["mysqlsh", "--pwd", "two PW"], "mysqlsh --pwd ***"),
            (&["vault", "login", "two PW"], "vault login ***"),
            (
                &["htpasswd", "-b", "f", "bob", "two PW"],
                "htpasswd -b f bob ***",
            ),
            (
                &["ldapsearch", "-w", "two PW", "-x"],
                "ldapsearch -w *** -x",
            ),
            (
                &["env", "PGPASSWORD=S3PW", "psql", "-h", "db"],
                "env PGPASSWORD=*** psql -h db",
            ),
            (
                &["bash", "-lc", "PGPASSWORD=S3PW psql -h db"],
                "bash -lc PGPASSWORD=*** psql -h db",
            ),
            (
                &["sh", "-euc", "PGPASSWORD=S3PW psql"],
                "sh -euc PGPASSWORD=*** psql",
            ),
            (&["openssl", "enc", "-k", "two PW"], "openssl enc -k ***"),
            (
                &["aws", "configure", "set", "aws_secret_access_key", "two PW"],
                "aws configure set aws_secret_access_key ***",
            ),
            (
                &["lftp", "-u", "deploy,two PW", "h"],
                "lftp -u deploy,*** h",
            ),
            (
                &[
                    "git",
                    "clone",
                    "https://ghp_PWaaaaaaaaaaaaaaaa@github.com/o/r",
                ],
                "git clone https://***@github.com/o/r",
            ),
            // A script is text: its words are redacted one by one, and the rest stays readable.
            (
                &["sh", "-c", "PASSWORD=PW ./deploy.sh --env prod"],
                "sh -c PASSWORD=*** ./deploy.sh --env prod",
            ),
            (
                &["/bin/sh", "-c", "redis-cli -a PW ping; echo done"],
                "/bin/sh -c redis-cli -a *** ping; echo done",
            ),
            // Readable.
            (&["deploy.sh", "--env", "prod"], "deploy.sh --env prod"),
            (&["redis-cli", "-p", "6380"], "redis-cli -p ***"),
            (&["echo", "hello world"], "echo hello world"),
            (&["ssh", "git@github.com"], "ssh git@github.com"),
        ] {
            let got = redact_args(argv);
            assert_eq!(got, want, "{argv:?}");
            assert!(!got.contains("PW") && !got.contains("two"), "{argv:?}");
            assert_eq!(redact(&got), got, "redacting {argv:?} as text changes it");
        }
    }

    #[test]
    fn no_text_makes_it_panic() {
        // Every string of up to 4 characters over the characters the rules look at, multi-byte
        // ones included (a byte index off a character boundary would panic).
        let alphabet: Vec<char> = "'\"\\ =:@/%-pué{".chars().collect();
        let n = alphabet.len();
        for len in 1..=4u32 {
            for mut i in 0..n.pow(len) {
                let mut s = String::new();
                for _ in 0..len {
                    s.push(alphabet[i % n]);
                    i /= n;
                }
                let _ = redact(&format!("--password {s} -u {s}://{s}"));
                let _ = redact_args(&["-u", &s, "-c", &s, &s]);
            }
        }
    }

    #[test]
    fn hostile_text_is_handled_in_bounded_time_and_depth() {
        let nested = "\"'".repeat(50_000) + " x";
        let _ = redact(&nested);
        let quotes = "'a b".repeat(50_000);
        let _ = redact(&quotes);
        let eqs = "PASSWORD=".repeat(50_000);
        assert!(!redact(&eqs).is_empty());
        let colons = "{\"pass\":".repeat(50_000);
        let _ = redact(&colons);
        let at = "https://".to_string() + &"a@".repeat(50_000);
        let _ = redact(&at);
    }
}
