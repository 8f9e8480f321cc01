//! Turning flags and environment into a resolved, validated configuration.
//!
//! Everything the user can get wrong about *where* Redis is and *how* to reach it is checked here,
//! before any connection is attempted, and reported as a usage error (exit 2). The password is
//! kept only inside the `redis::ConnectionInfo` and [`ForChild`] (which `exec` hands on in a file,
//! never in an environment variable); every string meant for humans or for a child process is
//! built from a redacted copy of the URL: userinfo password and `pass=` shown as `***` or left
//! out, and a URL that does not parse shown only from its last `@` on.
//!
//! Layer 3 of the list in `lib.rs`.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use redis::IntoConnectionInfo;

use crate::cli::GlobalArgs;
use crate::error::usage;

pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// Where and how to reach one Redis server.
#[derive(Clone)]
pub struct Endpoint {
    pub info: redis::ConnectionInfo,
    /// The URL with the password replaced by `***`, for messages.
    pub display: String,
    /// The URL without any password, for a child's `REDLOCK_URL`.
    pub public: String,
    pub tls: Option<TlsFiles>,
}

/// The certificates a `rediss://` connection trusts and presents: redis's own type in a build
/// with the `tls` feature; without it, a type with no values, as such a build makes no TLS
/// connection (a `rediss://` URL or a `--tls-*` flag is refused here, see `no_tls`).
#[cfg(feature = "tls")]
pub type TlsFiles = redis::TlsCertificates;
/// The certificates a `rediss://` connection trusts and presents: none in a build without the
/// `tls` feature (a `rediss://` URL or a `--tls-*` flag is refused, see `no_tls`).
#[cfg(not(feature = "tls"))]
#[derive(Clone)]
pub enum TlsFiles {}

/// Why a build without the `tls` feature refuses `what`: a `rediss://` URL or a `--tls-*` flag.
#[cfg(not(feature = "tls"))]
fn no_tls(what: &str) -> anyhow::Error {
    usage(format!(
        "this redlock was built without TLS (the cargo feature `tls`, on by default), so it \
         cannot use {what}; use a build with TLS"
    ))
}

impl Endpoint {
    /// A TLS connection whose handshake has not happened during connection setup (which sends
    /// nothing when there is no password to send).
    pub fn tls_handshake_pending(&self) -> bool {
        matches!(self.info.addr(), redis::ConnectionAddr::TcpTls { .. })
            && self.info.redis_settings().password().is_none()
    }
}

/// Which Redis servers hold the locks, and how they relate. (Built once per run: the size
/// difference between the variants does not matter.)
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Servers {
    /// One server (standalone, or the master of a replicated pair).
    One(Endpoint),
    /// Two or more independent masters: a lock is held when a majority granted it (Redlock).
    /// The first also keeps the queue of waiters.
    Quorum(Vec<Endpoint>),
    /// Seed nodes of a Redis Cluster.
    Cluster(Vec<Endpoint>),
    /// Sentinels that know the master named `master`.
    Sentinel {
        master: String,
        sentinels: Vec<Endpoint>,
    },
}

impl Servers {
    /// Every URL given, without passwords, comma-separated (for a child's `REDLOCK_URL`).
    pub fn public_urls(&self) -> String {
        self.endpoints()
            .iter()
            .map(|e| e.public.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn endpoints(&self) -> &[Endpoint] {
        match self {
            Servers::One(e) => std::slice::from_ref(e),
            Servers::Quorum(v) | Servers::Cluster(v) => v,
            Servers::Sentinel { sentinels, .. } => sentinels,
        }
    }
}

/// The resolved configuration every subcommand runs with.
#[derive(Clone)]
pub struct Config {
    pub servers: Servers,
    pub prefix: String,
    pub connect_timeout: Duration,
    pub io_timeout: Duration,
    /// How long a lock's meta hash outlives the lock and its queue (`--meta-ttl`).
    pub meta_ttl: Duration,
    /// How many entries each lock's history keeps (`--log-max`; 0: no history).
    pub log_max: u64,
    pub quiet: bool,
    pub verbose: bool,
    pub for_child: ForChild,
    /// `--allow-eviction` (acquire and exec): lock on a server whose maxmemory-policy may evict
    /// lock keys, without a refusal or a warning. Set from the subcommand's options.
    pub allow_eviction: bool,
}

/// What a command started by `exec` needs to run `redlock` against the same servers, beyond
/// the URLs: the one password every server takes, and the TLS files as absolute paths.
#[derive(Clone, Default)]
pub struct ForChild {
    /// The password every endpoint authenticates with, when they share one (from the URL,
    /// `REDLOCK_PASSWORD` or `--password-file`); `None` when there is none, or when the servers
    /// each have their own (one password file cannot carry several).
    pub password: Option<String>,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
}

/// The environment variables redlock reads, in one place so tests and docs agree. (Those that
/// stand for a flag, `REDLOCK_PASSWORD_FILE`, `REDLOCK_TLS_CA`, ..., are read by clap.)
pub struct Env {
    /// The URL list, and the variable it came from (for messages).
    pub url: Option<(&'static str, String)>,
    pub password: Option<String>,
}

impl Env {
    pub fn from_process() -> Self {
        let var = |name: &'static str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| (name, v))
        };
        Env {
            url: var("REDLOCK_URL").or_else(|| var("REDIS_URL")),
            password: var("REDLOCK_PASSWORD").map(|(_, v)| v),
        }
    }
}

impl Config {
    /// Resolves and validates `args` and `env`. What is worth a warning but not a refusal (a
    /// password file others can read) goes to `warn`, at once: this layer prints nothing (the
    /// caller passes it on to `messages`, which decides what `-q` silences).
    pub fn resolve(args: &GlobalArgs, env: &Env, warn: &mut dyn FnMut(String)) -> Result<Config> {
        let password = match &args.password_file {
            Some(path) => Some(read_password(path, warn)?),
            None => env.password.clone(),
        };
        let tls = tls_certificates(args)?;
        let endpoints = if args.url.is_empty() {
            let (var, list) = match &env.url {
                Some((var, list)) => (*var, list.as_str()),
                None => ("REDLOCK_URL", DEFAULT_URL),
            };
            parse_url_list(var, list, &password, &tls)?
        } else {
            args.url
                .iter()
                .map(|u| parse_url(u, password.clone(), tls.clone()))
                .collect::<Result<Vec<_>>>()?
        };
        if endpoints.is_empty() {
            return Err(usage("empty Redis URL; set --url or REDLOCK_URL"));
        }
        let for_child = ForChild {
            password: shared_password(&endpoints),
            tls_ca: args.tls_ca.as_deref().map(absolute),
            tls_cert: args.tls_cert.as_deref().map(absolute),
            tls_key: args.tls_key.as_deref().map(absolute),
        };
        let servers = servers(endpoints, args)?;
        check_prefix(&args.prefix)?;
        for (name, d) in [
            ("--connect-timeout", args.connect_timeout),
            ("--io-timeout", args.io_timeout),
        ] {
            if d.is_zero() {
                return Err(usage(format!("{name} must be more than 0")));
            }
        }
        Ok(Config {
            servers,
            prefix: args.prefix.clone(),
            connect_timeout: args.connect_timeout,
            io_timeout: args.io_timeout,
            meta_ttl: args.meta_ttl,
            log_max: args.log_max,
            quiet: args.quiet,
            verbose: args.verbose,
            for_child,
            allow_eviction: false,
        })
    }
}

/// Longest `--prefix` accepted, in bytes (a key is the prefix, the name and a suffix).
pub const MAX_PREFIX_LEN: usize = 256;

/// A prefix is a namespace for redlock's keys: not empty (the keys would mix with everyone
/// else's), no braces (the lock name's `{...}` must be the key's Cluster hash tag; a `{}` in the
/// prefix would be an empty tag, and one lock's keys would land in different slots), printable,
/// and bounded.
fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Err(usage(
            "--prefix is empty; redlock's keys need a namespace of their own (default 'redlock:')",
        ));
    }
    if prefix.contains(['{', '}']) {
        return Err(usage(format!(
            "--prefix '{}' contains '{{' or '}}'; redlock puts the lock name in braces (the \
             Redis Cluster hash tag), so the prefix must not have any",
            crate::printable::printable(prefix)
        )));
    }
    // The same rule as for a lock name (see lock/mod.rs).
    if let Some(why) = crate::printable::unsafe_in_name(prefix) {
        return Err(usage(format!(
            "--prefix '{}' contains {why}; a prefix must not have control, direction or \
             invisible characters",
            crate::printable::printable(prefix)
        )));
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(usage(format!(
            "--prefix is {} bytes long; the limit is {MAX_PREFIX_LEN}",
            prefix.len()
        )));
    }
    Ok(())
}

/// Parses a comma-separated URL list from environment variable `var`. A URL that does not parse
/// may be the head of a password cut at a comma (`redis://:a,b@host`): when an `@` follows it
/// in the list, the error prints none of it and says so.
fn parse_url_list(
    var: &str,
    list: &str,
    password: &Option<String>,
    tls: &Option<TlsFiles>,
) -> Result<Vec<Endpoint>> {
    let mut endpoints = Vec::new();
    let mut start = 0;
    let fragments: Vec<&str> = list.split(',').collect();
    for (i, fragment) in fragments.iter().enumerate() {
        let end = start + fragment.len();
        let rest = &list[end..];
        start = end + 1;
        let url = fragment.trim();
        if url.is_empty() {
            continue;
        }
        match parse_url(url, password.clone(), tls.clone()) {
            Ok(ep) => endpoints.push(ep),
            Err(_) if rest.contains('@') => {
                return Err(usage(format!(
                    "${var} holds an invalid URL (item {} of {}, not printed: an '@' follows it, so \
                     it may be part of a password); ${var} is split at commas, so a ',' in a \
                     password must be percent-encoded as %2C (or give the password in \
                     REDLOCK_PASSWORD or --password-file)",
                    i + 1,
                    fragments.len()
                )));
            }
            Err(e) if fragments.len() > 1 && fragment.contains('@') => {
                return Err(usage(format!(
                    "{e:#} (${var} is split at commas: a ',' in a password must be \
                     percent-encoded as %2C)"
                )));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(endpoints)
}

/// The password every endpoint authenticates with, if they share one.
fn shared_password(endpoints: &[Endpoint]) -> Option<String> {
    let mut passwords = endpoints.iter().map(|e| e.info.redis_settings().password());
    let first = passwords.next()??;
    passwords
        .all(|p| p == Some(first))
        .then(|| first.to_string())
}

/// `path` made absolute (from the current directory), so that a command that changes directory
/// still finds it. Left as given if the current directory is unknown.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Checks that the endpoints fit the mode (--cluster, --sentinel, or one or several masters).
fn servers(mut endpoints: Vec<Endpoint>, args: &GlobalArgs) -> Result<Servers> {
    let is_unix = |e: &Endpoint| matches!(e.info.addr(), redis::ConnectionAddr::Unix(_));
    for (i, a) in endpoints.iter().enumerate() {
        if endpoints[..i]
            .iter()
            .any(|b| b.info.addr() == a.info.addr())
        {
            return Err(usage(format!(
                "{} is given twice; every server counts once",
                a.display
            )));
        }
    }
    // An empty $REDLOCK_SENTINEL is no Sentinel, as an empty $REDLOCK_URL is no URL.
    let sentinel = args.sentinel.as_deref().filter(|m| !m.is_empty());
    if args.cluster && sentinel.is_some() {
        return Err(usage(
            "--cluster and --sentinel exclude each other (check $REDLOCK_CLUSTER and \
             $REDLOCK_SENTINEL)",
        ));
    }
    let mode = if args.cluster {
        Some("--cluster")
    } else if sentinel.is_some() {
        Some("--sentinel")
    } else {
        None
    };
    if let Some(mode) = mode
        && let Some(e) = endpoints.iter().find(|e| is_unix(e))
    {
        return Err(usage(format!(
            "{mode} needs TCP addresses (redis:// or rediss://), not {}",
            e.display
        )));
    }
    if let Some(master) = sentinel {
        if master.chars().any(char::is_control) {
            return Err(usage(
                "--sentinel needs the master's name as Sentinel knows it",
            ));
        }
        return Ok(Servers::Sentinel {
            master: master.to_string(),
            sentinels: endpoints,
        });
    }
    if args.cluster {
        return Ok(Servers::Cluster(endpoints));
    }
    if endpoints.len() == 1 {
        return Ok(Servers::One(endpoints.remove(0)));
    }
    Ok(Servers::Quorum(endpoints))
}

/// The longest password line read from `--password-file`, in bytes.
const MAX_PASSWORD: usize = 4096;

/// How long `--password-file` waits for a pipe's writer to send the password.
const PASSWORD_WAIT: Duration = Duration::from_secs(10);

/// The first line of `--password-file` (or `$REDLOCK_PASSWORD_FILE`), read with bounds: a FIFO
/// without a writer is empty at once (the open does not block), a pipe whose writer stays silent
/// is an error after [`PASSWORD_WAIT`], and `/dev/zero` or a huge file costs at most
/// [`MAX_PASSWORD`] bytes. Tells `warn` when others may read the file.
fn read_password(path: &Path, warn: &mut dyn FnMut(String)) -> Result<String> {
    let shown = path.display();
    let cannot = |e: std::io::Error| usage(format!("cannot read --password-file {shown}: {e}"));
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    // A file without a name (an exec's memfd, a deleted file) is reachable by its owner alone.
    let others = meta.mode() & 0o044;
    if meta.is_file() && meta.nlink() > 0 && others != 0 {
        let who = match others {
            0o040 => "its group",
            0o004 => "every user",
            _ => "its group and every user",
        };
        warn(format!(
            "--password-file {shown} is readable by {who} (mode {:o}); restrict it with chmod 600",
            meta.mode() & 0o7777
        ));
    }
    let mut line = Vec::new();
    let mut chunk = [0u8; 512];
    let deadline = Instant::now() + PASSWORD_WAIT;
    // A file is read from its start whatever its offset: on macOS `/dev/fd/N` shares the offset
    // of descriptor N (an exec's password file), which an earlier reader moved to its end.
    let from_start = meta.is_file();
    loop {
        let room = (MAX_PASSWORD + 1 - line.len()).min(chunk.len());
        let read = if from_start {
            std::os::unix::fs::FileExt::read_at(&file, &mut chunk[..room], line.len() as u64)
        } else {
            file.read(&mut chunk[..room])
        };
        match read {
            Ok(0) => break,
            Ok(n) => {
                line.extend_from_slice(&chunk[..n]);
                if line.contains(&b'\n') || line.len() > MAX_PASSWORD {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if !readable_before(&file, deadline) {
                    return Err(usage(format!(
                        "--password-file {shown}: no password arrived within {}s",
                        PASSWORD_WAIT.as_secs()
                    )));
                }
            }
            Err(e) => return Err(cannot(e)),
        }
    }
    if let Some(end) = line.iter().position(|&b| b == b'\n') {
        line.truncate(end);
    }
    if line.ends_with(b"\r") {
        line.pop();
    }
    if line.len() > MAX_PASSWORD {
        return Err(usage(format!(
            "--password-file {shown}: the first line is longer than {MAX_PASSWORD} bytes; is it \
             the right file?"
        )));
    }
    if line.contains(&0) {
        return Err(usage(format!(
            "--password-file {shown}: the first line holds a NUL byte; is it the right file?"
        )));
    }
    let line = String::from_utf8(line).map_err(|_| {
        usage(format!(
            "--password-file {shown}: the first line is not UTF-8"
        ))
    })?;
    if line.is_empty() {
        return Err(usage(format!("--password-file {shown} is empty")));
    }
    Ok(line)
}

/// Waits until `file` has data (or its writer closed it), at most until `deadline`.
fn readable_before(file: &std::fs::File, deadline: Instant) -> bool {
    use std::os::fd::AsFd;
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return false;
    }
    // An error: let the read report it.
    crate::os::readable_within(file.as_fd(), Some(left)).unwrap_or(true)
}

#[cfg(feature = "tls")]
fn read_pem(path: &Path, flag: &str) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path)
        .map_err(|e| usage(format!("cannot read {flag} {}: {e}", path.display())))?;
    if !String::from_utf8_lossy(&bytes).contains("-----BEGIN ") {
        return Err(usage(format!(
            "{flag} {} is not a PEM file (no -----BEGIN line)",
            path.display()
        )));
    }
    Ok(bytes)
}

#[cfg(not(feature = "tls"))]
fn tls_certificates(args: &GlobalArgs) -> Result<Option<TlsFiles>> {
    let given = [
        ("--tls-ca", &args.tls_ca),
        ("--tls-cert", &args.tls_cert),
        ("--tls-key", &args.tls_key),
    ];
    match given.iter().find(|(_, path)| path.is_some()) {
        Some((flag, _)) => Err(no_tls(flag)),
        None => Ok(None),
    }
}

#[cfg(feature = "tls")]
fn tls_certificates(args: &GlobalArgs) -> Result<Option<TlsFiles>> {
    let root_cert = args
        .tls_ca
        .as_deref()
        .map(|p| read_pem(p, "--tls-ca"))
        .transpose()?;
    let client_tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read_pem(cert, "--tls-cert")?,
            client_key: read_pem(key, "--tls-key")?,
        }),
        (None, None) => None,
        // clap enforces this for the flags, not for $REDLOCK_TLS_CERT / $REDLOCK_TLS_KEY.
        _ => {
            return Err(usage(
                "--tls-cert and --tls-key go together (check $REDLOCK_TLS_CERT and \
                 $REDLOCK_TLS_KEY)",
            ));
        }
    };
    if root_cert.is_none() && client_tls.is_none() {
        return Ok(None);
    }
    Ok(Some(redis::TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// Validates a Redis URL and builds its connection info, with the password applied.
pub fn parse_url(raw: &str, password: Option<String>, tls: Option<TlsFiles>) -> Result<Endpoint> {
    if userinfo_cut_short(raw) {
        // Whatever the parser would make of it, part of the password would end up in the host,
        // port, path or fragment, and from there in messages: refuse it, naming the fix.
        return Err(usage(format!(
            "the user or password in Redis URL '{}' contains '#', '?' or '/', which end that \
             part of a URL early; percent-encode them (# as %23, ? as %3F, / as %2F), or pass \
             the password in REDLOCK_PASSWORD or --password-file",
            redact_unparsed(raw)
        )));
    }
    if !has_scheme(raw) {
        if let Some(url) = with_scheme(raw) {
            return Err(usage(format!(
                "the Redis URL '{raw}' has no scheme; use {url}{}",
                if url.starts_with("redis://") {
                    " (rediss:// for TLS)"
                } else {
                    ""
                }
            )));
        }
        // `-u "$PASSWORD"` (the password where the URL goes) is the usual way to get here: the
        // value is not printed at all.
        return Err(usage(
            "the Redis URL given does not start with a scheme (redis://, rediss:// or unix://); \
             it is not printed, as it may be a password; expected e.g. redis://127.0.0.1:6379",
        ));
    }
    let url = url::Url::parse(raw).map_err(|e| {
        usage(format!(
            "malformed Redis URL '{}': {e}; expected e.g. redis://127.0.0.1:6379",
            redact_unparsed(raw)
        ))
    })?;
    let scheme = url.scheme().to_string();
    check_shape(&url, raw)?;
    refuse_port_zero(&url, raw)?;
    #[cfg(not(feature = "tls"))]
    if scheme == "rediss" {
        return Err(no_tls(&format!("'{}'", public_and_display(url).1)));
    }
    if tls.is_some() && scheme != "rediss" {
        return Err(usage(
            "--tls-ca, --tls-cert and --tls-key need a rediss:// URL",
        ));
    }
    let mut info = url.as_str().into_connection_info().map_err(|e| {
        usage(format!(
            "invalid Redis URL '{}': {}",
            redact_unparsed(raw),
            crate::error::redis_text(&e)
        ))
    })?;
    let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
    if let Some(pw) = password {
        settings = settings.set_password(pw);
    }
    info = info.set_redis_settings(settings);

    let (public, display) = public_and_display(url);
    Ok(Endpoint {
        info,
        display,
        public,
        tls,
    })
}

/// A URL redlock can use: a known scheme, with a host (or a socket path) and a numeric database.
fn check_shape(url: &url::Url, raw: &str) -> Result<()> {
    match url.scheme() {
        "redis" | "rediss" => {
            if url.host_str().is_none_or(str::is_empty) {
                return Err(usage(format!(
                    "Redis URL '{}' has no host",
                    redact_unparsed(raw)
                )));
            }
        }
        "redis+unix" | "unix" => {
            if url.path().is_empty() || url.path() == "/" {
                return Err(usage(format!(
                    "Redis URL '{}' has no socket path",
                    redact_unparsed(raw)
                )));
            }
        }
        other => {
            return Err(usage(format!(
                "unsupported URL scheme '{other}:' in '{}'; use redis://, rediss://, \
                 redis+unix:// or unix://",
                redact_unparsed(raw)
            )));
        }
    }
    let db = match url.scheme() {
        "redis" | "rediss" => Some(url.path().trim_matches('/').to_string()),
        _ => url
            .query_pairs()
            .find(|(k, _)| k == "db")
            .map(|(_, v)| v.into_owned()),
    };
    if let Some(db) = db.filter(|d| !d.is_empty() && !d.bytes().all(|b| b.is_ascii_digit())) {
        return Err(usage(format!(
            "Redis URL '{}': '{db}' is not a database number; use e.g. /0 (the default) or \
             ?db=0 for a socket",
            redact_unparsed(raw)
        )));
    }
    Ok(())
}

/// The URL as it may be passed on (`public`: without its password or a socket URL's `pass=`)
/// and as it may be shown (`display`: with `***` in their place).
fn public_and_display(mut url: url::Url) -> (String, String) {
    let has_password = url.password().is_some();
    let _ = url.set_password(None);
    let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    let mut display_url = url.clone();
    if pairs.iter().any(|(k, _)| secret_param(k)) {
        let kept: Vec<&(String, String)> = pairs.iter().filter(|(k, _)| !secret_param(k)).collect();
        if kept.is_empty() {
            url.set_query(None);
        } else {
            url.query_pairs_mut().clear().extend_pairs(kept);
        }
        display_url.query_pairs_mut().clear().extend_pairs(
            pairs
                .iter()
                .map(|(k, v)| (k, if secret_param(k) { "***" } else { v })),
        );
    }
    if has_password {
        let _ = display_url.set_password(Some("***"));
    }
    (url.to_string(), display_url.to_string())
}

/// Port 0 is no port a server listens on (a socket bound to it gets a random one): a typo or an
/// unset variable (`redis://host:$PORT` with `PORT=0`), which would otherwise be reported as a
/// server that is down.
fn refuse_port_zero(url: &url::Url, raw: &str) -> Result<()> {
    if url.port() == Some(0) {
        return Err(usage(format!(
            "Redis URL '{}' has port 0, which no server listens on; use the server's port \
             (6379 by default)",
            redact_unparsed(raw)
        )));
    }
    Ok(())
}

/// Whether a `redis://` or `rediss://` URL has an `@` after a `#`, `?` or `/` of its authority:
/// a user or password with one of those characters, not percent-encoded.
fn userinfo_cut_short(raw: &str) -> bool {
    let lower = raw.get(..9).unwrap_or(raw).to_ascii_lowercase();
    if !(lower.starts_with("redis://") || lower.starts_with("rediss://")) {
        return false;
    }
    let rest = &raw[raw.find("://").map_or(0, |i| i + 3)..];
    rest.rfind('@')
        .is_some_and(|at| rest[..at].contains(['#', '?', '/']))
}

/// Whether a URL query parameter carries a password: `pass` (what the driver reads for a Unix
/// socket), or `password`, which users try.
fn secret_param(name: &str) -> bool {
    name.eq_ignore_ascii_case("pass") || name.eq_ignore_ascii_case("password")
}

/// Whether `raw` starts with `SCHEME://`: without one, it is no URL, and may be anything the
/// user meant to put elsewhere (a password).
fn has_scheme(raw: &str) -> bool {
    raw.find("://").is_some_and(|i| is_scheme(&raw[..i]))
}

/// `raw` with the scheme it lacks, when it has the shape of an address and nothing else (so that
/// it can be printed: it is no password): `host:port` with a host that is `localhost`, an IP
/// address or a lower-case name with a dot (`redis.internal:6379`), or `localhost` or an IP
/// address alone; a socket's absolute path ending in `.sock`. `None` for anything else.
fn with_scheme(raw: &str) -> Option<String> {
    let host_like = |h: &str, alone: bool| {
        let ip = h.parse::<std::net::Ipv4Addr>().is_ok()
            || h.strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok());
        let name = !alone
            && h.contains('.')
            && h.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            });
        h == "localhost" || ip || name
    };
    if raw.starts_with('/')
        && raw.ends_with(".sock")
        && !raw.contains(|c: char| c.is_whitespace() || c.is_control())
    {
        return Some(format!("unix://{raw}"));
    }
    if host_like(raw, true) {
        return Some(format!("redis://{raw}:6379"));
    }
    let (host, port) = raw.rsplit_once(':')?;
    let port_ok = !port.is_empty()
        && port.len() <= 5
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u16>().is_ok_and(|p| p > 0);
    (port_ok && host_like(host, false)).then(|| format!("redis://{raw}"))
}

/// A string that did not parse as a URL, safe to print: whatever its shape (`redis:/:PW@h`,
/// `redis//:PW@h`, `redis:PW@h`), everything before its last `@` is hidden but a leading
/// `scheme://`, and so is the value of a `pass=` or `password=` parameter. Without a leading
/// `scheme://` nothing of it is shown (`***`): it may be a password given where a URL goes.
fn redact_unparsed(raw: &str) -> String {
    if !has_scheme(raw) {
        return "***".to_string();
    }
    let shown = match raw.rfind('@') {
        Some(at) => {
            let scheme = raw
                .find("://")
                .filter(|&i| i < at && is_scheme(&raw[..i]))
                .map_or(String::new(), |i| format!("{}://", &raw[..i]));
            format!("{scheme}***@{}", &raw[at + 1..])
        }
        None => raw.to_string(),
    };
    let mut out = String::with_capacity(shown.len());
    let mut rest = shown.as_str();
    while let Some(eq) = rest.find('=') {
        let name_start = rest[..eq].rfind(['?', '&', ';']).map_or(0, |i| i + 1);
        let hide = secret_param(&rest[name_start..eq]) && name_start > 0;
        out.push_str(&rest[..=eq]);
        rest = &rest[eq + 1..];
        if hide {
            out.push_str("***");
            rest = &rest[rest.find('&').unwrap_or(rest.len())..];
        }
    }
    out.push_str(rest);
    out
}

/// Whether `s` is a URL scheme: a letter, then letters, digits, `+`, `-` or `.`.
fn is_scheme(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_display_strings() {
        let ep = parse_url("redis://alice:s3cret@127.0.0.1:6380/2", None, None).unwrap();
        assert_eq!(ep.display, "redis://alice:***@127.0.0.1:6380/2");
        assert_eq!(ep.public, "redis://alice@127.0.0.1:6380/2");
        assert_eq!(ep.info.redis_settings().password(), Some("s3cret"));
        assert_eq!(ep.info.redis_settings().username(), Some("alice"));
    }

    #[test]
    fn env_password_overrides_url() {
        let ep = parse_url("redis://:old@localhost", Some("new".into()), None).unwrap();
        assert_eq!(ep.info.redis_settings().password(), Some("new"));
    }

    #[test]
    fn bad_urls_are_usage_errors() {
        for raw in [
            "http://localhost",
            "localhost:6379",
            "redis://",
            "redis://:pw@",
            "unix://",
            "redis://[::1",
            "redis://:pw@127.0.0.1:0",
            "rediss://localhost:0/1",
        ] {
            let err = match parse_url(raw, None, None) {
                Ok(_) => panic!("{raw} was accepted"),
                Err(e) => e,
            };
            assert_eq!(crate::error::exit_code(&err), crate::exit::USAGE, "{raw}");
            assert!(!format!("{err:#}").contains("pw"), "{err:#}");
        }
    }

    #[test]
    fn a_password_that_cuts_the_url_short_is_refused_unprinted() {
        for raw in [
            "redis://user:1234#secret@127.0.0.1:6379",
            "redis://:ab?secret@host",
            "rediss://:ab/secret@host:6380/0",
            "REDIS://:ab#secret@host",
        ] {
            let err = match parse_url(raw, None, None) {
                Ok(_) => panic!("{raw} was accepted"),
                Err(e) => format!("{e:#}"),
            };
            assert!(!err.contains("secret") && !err.contains("1234"), "{err}");
            assert!(
                err.contains("%23") && err.contains("REDLOCK_PASSWORD"),
                "{err}"
            );
        }
        // Encoded, they work; a '@' in a unix socket path is no password.
        let ep = parse_url("redis://user:1234%23secret@127.0.0.1:6379", None, None).unwrap();
        assert_eq!(ep.info.redis_settings().password(), Some("1234#secret"));
        parse_url("unix:///tmp/a@b/redis.sock", None, None).unwrap();
        parse_url("redis://:p@ss@host:6379", None, None).unwrap();
    }

    #[test]
    fn socket_passwords_are_redacted_and_kept_from_the_child() {
        let ep = parse_url("unix:///tmp/r.sock?user=bob&pass=s3cret&db=2", None, None).unwrap();
        assert_eq!(ep.display, "unix:///tmp/r.sock?user=bob&pass=***&db=2");
        assert_eq!(ep.public, "unix:///tmp/r.sock?user=bob&db=2");
        assert_eq!(ep.info.redis_settings().password(), Some("s3cret"));
        let ep = parse_url("redis+unix:///tmp/r.sock?pass=s3cret", None, None).unwrap();
        assert_eq!(ep.display, "redis+unix:///tmp/r.sock?pass=***");
        assert_eq!(ep.public, "redis+unix:///tmp/r.sock");
        // `password=` does nothing for the driver, but users try it: never shown either.
        let ep = parse_url("redis://h:6379/0?Password=s3cret", None, None).unwrap();
        assert!(!ep.display.contains("s3cret") && !ep.public.contains("s3cret"));
    }

    /// An address without its scheme is shown with the scheme it needs; anything that may be a
    /// password is not shown at all.
    #[test]
    fn an_address_without_a_scheme_gets_one_suggested() {
        for (raw, url) in [
            ("localhost:6391", "redis://localhost:6391"),
            ("127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("[::1]:6380", "redis://[::1]:6380"),
            ("redis.internal:6379", "redis://redis.internal:6379"),
            ("localhost", "redis://localhost:6379"),
            ("10.0.0.5", "redis://10.0.0.5:6379"),
            ("/run/redis/redis.sock", "unix:///run/redis/redis.sock"),
        ] {
            assert_eq!(with_scheme(raw).as_deref(), Some(url), "{raw}");
            let err = match parse_url(raw, None, None) {
                Ok(_) => panic!("{raw} was accepted"),
                Err(e) => format!("{e:#}"),
            };
            assert!(
                err.contains(&format!("'{raw}' has no scheme; use {url}")),
                "{err}"
            );
        }
        for raw in [
            "s3cret",
            "s3cret:1234",
            "Hunter2.Pass:6379",
            "pass.word:99999",
            "a.b:",
            "redis:6379",
            "/tmp/s3cret",
            "hunter2.example",
        ] {
            assert_eq!(with_scheme(raw), None, "{raw}");
            let err = match parse_url(raw, None, None) {
                Ok(_) => panic!("{raw} was accepted"),
                Err(e) => format!("{e:#}"),
            };
            assert!(!err.contains(raw) && err.contains("not printed"), "{err}");
        }
    }

    #[test]
    fn unparsable_urls_hide_everything_before_the_last_at_or_all() {
        for (raw, want) in [
            // Without a leading scheme:// nothing is shown: it may be a password.
            ("redis:/:s3cret@h", "***"),
            ("redis//:s3cret@h", "***"),
            ("redis:s3cret@h", "***"),
            ("s3cret", "***"),
            ("redis://:s3c@ret@h:1", "redis://***@h:1"),
            ("x:s3cret://y@h", "***"),
            ("unix://?pass=s3cret&db=1", "unix://?pass=***&db=1"),
            ("redis://h", "redis://h"),
        ] {
            assert_eq!(redact_unparsed(raw), want, "{raw}");
        }
        for raw in [
            "redis:/:s3cret@h",
            "redis//:s3cret@h",
            "redis:s3cret@h",
            "unix://?pass=s3cret",
        ] {
            let err = match parse_url(raw, None, None) {
                Ok(_) => panic!("{raw} was accepted"),
                Err(e) => format!("{e:#}"),
            };
            assert!(!err.contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn a_comma_in_a_listed_password_is_named_not_printed() {
        let list = |value: &str| match parse_url_list("REDLOCK_URL", value, &None, &None) {
            Ok(eps) => panic!("{value} gave {} endpoints", eps.len()),
            Err(e) => format!("{e:#}"),
        };
        for value in [
            "redis://:ab,cd@h:6379",
            "redis://u:ab,cd@h",
            "redis://h1:6379,redis://:ab,cd@h2:6379",
            "redis://:s,e,c@h",
        ] {
            let err = list(value);
            assert!(err.contains("%2C"), "{err}");
            for part in ["ab", "cd", "s,e"] {
                assert!(!err.contains(part), "{value}: {err}");
            }
        }
        // The head parses (a port of digits): the tail fails, shown only after its '@'.
        let err = list("redis://u:12,34@h");
        assert!(err.contains("%2C") && !err.contains("34@"), "{err}");
        // A list without passwords reports its URL as it is.
        let err = list("redis://h1,http://h2");
        assert!(err.contains("http://h2") && !err.contains("%2C"), "{err}");
        let eps = parse_url_list(
            "REDLOCK_URL",
            " redis://h1 ,, redis://:p%2Cw@h2",
            &None,
            &None,
        )
        .unwrap();
        assert_eq!(eps.len(), 2);
        assert_eq!(eps[1].info.redis_settings().password(), Some("p,w"));
    }

    #[test]
    fn one_password_for_every_server_is_handed_on() {
        let eps = |urls: &[&str], pw: Option<&str>| {
            urls.iter()
                .map(|u| parse_url(u, pw.map(String::from), None).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(shared_password(&eps(&["redis://h"], None)), None);
        assert_eq!(
            shared_password(&eps(&["redis://:a@h1", "unix:///s?pass=a"], None)),
            Some("a".into())
        );
        assert_eq!(
            shared_password(&eps(&["redis://:a@h1", "redis://:b@h2"], None)),
            None
        );
        assert_eq!(
            shared_password(&eps(&["redis://:a@h1", "redis://h2"], None)),
            None
        );
        assert_eq!(
            shared_password(&eps(&["redis://:a@h1", "redis://h2"], Some("c"))),
            Some("c".into())
        );
    }

    fn password_file(content: &[u8], mode: u32) -> tempfile::NamedTempFile {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content).unwrap();
        std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        f
    }

    #[test]
    fn a_password_file_gives_its_first_line_within_bounds() {
        let read =
            |content: &[u8]| read_password(password_file(content, 0o600).path(), &mut |_| {});
        assert_eq!(read(b"s3cret\nsecond line\n").unwrap(), "s3cret");
        assert_eq!(read(b"s3cret\r\n").unwrap(), "s3cret");
        assert_eq!(read(b"s3cret").unwrap(), "s3cret");
        let long = format!("{}\n", "x".repeat(MAX_PASSWORD));
        assert_eq!(read(long.as_bytes()).unwrap().len(), MAX_PASSWORD);
        for bad in [&b""[..], b"\nx", b"a\0b\n", b"\xff\xfe\n"] {
            let err = read(bad).unwrap_err();
            assert_eq!(crate::error::exit_code(&err), crate::exit::USAGE);
        }
        let err = read("y".repeat(MAX_PASSWORD + 1).as_bytes()).unwrap_err();
        assert!(format!("{err:#}").contains("longer than"), "{err:#}");
        // Endless input costs a bounded read.
        let err = read_password(Path::new("/dev/zero"), &mut |_| {}).unwrap_err();
        assert!(format!("{err:#}").contains("longer than"), "{err:#}");
    }

    /// The warning about a password file others can read goes to the caller (config prints
    /// nothing), once, naming who can read it; a private file gives none.
    #[test]
    fn a_password_file_others_can_read_is_handed_to_warn() {
        for (mode, who) in [
            (0o600, None),
            (0o640, Some("its group")),
            (0o604, Some("every user")),
            (0o644, Some("its group and every user")),
        ] {
            let file = password_file(b"s3cret\n", mode);
            let mut warnings = Vec::new();
            let read = read_password(file.path(), &mut |w| warnings.push(w));
            assert_eq!(read.unwrap(), "s3cret");
            match who {
                None => assert!(warnings.is_empty(), "mode {mode:o}: {warnings:?}"),
                Some(who) => {
                    assert_eq!(warnings.len(), 1, "mode {mode:o}: {warnings:?}");
                    let expected = format!("is readable by {who} (mode {mode:o}); restrict it");
                    assert!(warnings[0].contains(&expected), "{warnings:?}");
                }
            }
        }
    }

    #[test]
    fn unix_sockets_are_accepted() {
        parse_url("unix:///tmp/redis.sock", None, None).unwrap();
        parse_url("redis+unix:///tmp/redis.sock", None, None).unwrap();
    }
}
