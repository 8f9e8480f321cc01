//! Turning flags and environment into a resolved, validated configuration.
//!
//! Everything the user can get wrong about *where* Redis is and *how* to reach it is checked here,
//! before any connection is attempted, and reported as a usage error (exit 2). The password is
//! kept only inside the `redis::ConnectionInfo`; every string meant for humans or for a child
//! process is built from a redacted copy of the URL.

use std::path::Path;
use std::time::Duration;

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
    pub tls: Option<redis::TlsCertificates>,
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
    pub quiet: bool,
    pub verbose: bool,
    /// `--allow-eviction` (acquire and exec): lock on a server whose maxmemory-policy may evict
    /// lock keys, without a refusal or a warning. Set from the subcommand's options.
    pub allow_eviction: bool,
}

/// The environment variables redlock reads, in one place so tests and docs agree.
pub struct Env {
    pub url: Option<String>,
    pub password: Option<String>,
}

impl Env {
    pub fn from_process() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Env {
            url: var("REDLOCK_URL").or_else(|| var("REDIS_URL")),
            password: var("REDLOCK_PASSWORD"),
        }
    }
}

impl Config {
    pub fn resolve(args: &GlobalArgs, env: &Env) -> Result<Config> {
        let urls: Vec<String> = if args.url.is_empty() {
            env.url
                .as_deref()
                .unwrap_or(DEFAULT_URL)
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        } else {
            args.url.clone()
        };
        if urls.is_empty() {
            return Err(usage("empty Redis URL; set --url or REDLOCK_URL"));
        }
        let password = match &args.password_file {
            Some(path) => Some(read_password(path)?),
            None => env.password.clone(),
        };
        let tls = tls_certificates(args)?;
        let endpoints = urls
            .iter()
            .map(|u| parse_url(u, password.clone(), tls.clone()))
            .collect::<Result<Vec<_>>>()?;
        let servers = servers(endpoints, args)?;
        if args.prefix.chars().any(char::is_control) {
            return Err(usage("--prefix must not contain control characters"));
        }
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
            quiet: args.quiet,
            verbose: args.verbose,
            allow_eviction: false,
        })
    }
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

fn read_password(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        usage(format!(
            "cannot read --password-file {}: {e}",
            path.display()
        ))
    })?;
    let line = text.lines().next().unwrap_or("").to_string();
    if line.is_empty() {
        return Err(usage(format!(
            "--password-file {} is empty",
            path.display()
        )));
    }
    Ok(line)
}

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

fn tls_certificates(args: &GlobalArgs) -> Result<Option<redis::TlsCertificates>> {
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
        _ => None,
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
pub fn parse_url(
    raw: &str,
    password: Option<String>,
    tls: Option<redis::TlsCertificates>,
) -> Result<Endpoint> {
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
    let mut url = url::Url::parse(raw).map_err(|e| {
        usage(format!(
            "malformed Redis URL '{}': {e}; expected e.g. redis://127.0.0.1:6379",
            redact_unparsed(raw)
        ))
    })?;
    let scheme = url.scheme().to_string();
    match scheme.as_str() {
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
    let db = match scheme.as_str() {
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
    refuse_port_zero(&url, raw)?;
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

    let has_password = url.password().is_some();
    let _ = url.set_password(None);
    let public = url.to_string();
    let display = if has_password {
        let _ = url.set_password(Some("***"));
        url.to_string()
    } else {
        public.clone()
    };
    Ok(Endpoint {
        info,
        display,
        public,
        tls,
    })
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

/// Hides anything between `://` and `@` in a string that did not parse as a URL.
fn redact_unparsed(raw: &str) -> String {
    match (raw.find("://"), raw.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            format!("{}://***@{}", &raw[..start], &raw[at + 1..])
        }
        _ => raw.to_string(),
    }
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
    fn unix_sockets_are_accepted() {
        parse_url("unix:///tmp/redis.sock", None, None).unwrap();
        parse_url("redis+unix:///tmp/redis.sock", None, None).unwrap();
    }
}
