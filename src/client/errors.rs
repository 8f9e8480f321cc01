//! Redis errors mapped to ours: the kind (and so the exit code) and a message that names the
//! server and says what to do, from the driver's error and, after a failure, what probing the
//! server finds out (see `probe.rs`).
//!
//! Layer 5 of the list in `lib.rs`.

use crate::config::{Config, Endpoint};
use crate::error::{Kind, failure, redis_kind, refusal};

use super::probe::{auth_refusal, first_bytes, probe_timeout, quote_bytes};
use super::tls::{has_ca, not_tls, tls_hint};

pub(super) fn connect_error(
    display: &str,
    ep: Option<&Endpoint>,
    config: &Config,
    e: redis::RedisError,
) -> anyhow::Error {
    let timeout = config.connect_timeout;
    if is_foreign_reply(&e) {
        return not_redis(display, ep, config);
    }
    if let Some(condition) = server_condition(display, "the connection", &e) {
        return condition;
    }
    if let Some(found) = ep.and_then(|ep| diagnose(display, ep, config, &e)) {
        return found;
    }
    let kind = redis_kind(&e);
    if kind == Kind::Auth {
        let detail = e.detail().unwrap_or("authentication failed").to_string();
        return failure(
            Kind::Auth,
            format!(
                "{display} refused the credentials ({detail}); check the URL's user and \
                 password, REDLOCK_PASSWORD or --password-file"
            ),
        );
    }
    let why = if e.is_timeout() {
        format!("timed out after {}", humantime::format_duration(timeout))
    } else if e.is_connection_refusal() {
        "connection refused".to_string()
    } else {
        crate::error::redis_text(&e)
    };
    let hint = tls_hint(&why, has_ca(config)).unwrap_or(START_HINT);
    let kind = if kind == Kind::Protocol {
        Kind::Unavailable
    } else {
        kind
    };
    failure(kind, format!("cannot connect to {display} ({why}){hint}"))
}

/// How Redis words a connection refused for `maxclients` (sent instead of the first reply).
const MAX_CLIENTS: &str = "max number of clients reached";

fn max_clients(display: &str) -> anyhow::Error {
    refusal(
        Kind::Unavailable,
        format!(
            "{display} refused the connection: max number of clients reached (maxclients); try \
             again when clients have gone, or raise maxclients"
        ),
    )
}

/// The error for a refusal that says something about the state of the server rather than about
/// our request: out of memory, no room for another client, or (from `guard.lua`) a replica or a
/// server that may evict locks. All but the last are conditions that pass (69); an evicting
/// server is for the operator to decide about (2).
fn server_condition(display: &str, what: &str, e: &redis::RedisError) -> Option<anyhow::Error> {
    let detail = e.detail().unwrap_or("");
    match e.code() {
        Some("OOM") => Some(refusal(
            Kind::Unavailable,
            format!(
                "{display} is out of memory (used memory > maxmemory) and refused {what}; free \
                 memory on it or raise maxmemory"
            ),
        )),
        Some("REDLOCK_REPLICA") => Some(refusal(
            Kind::Unavailable,
            format!(
                "{display} is a replica of {detail}, not a master; a lock must be taken on the \
                 master (a replica's locks are invisible to the master's clients): use the \
                 master's URL, or --sentinel (after a failover, try again once the Sentinels \
                 name the new master)"
            ),
        )),
        Some("REDLOCK_EVICTS") => Some(refusal(
            Kind::Usage,
            format!(
                "{display} has maxmemory-policy {detail}: when it runs out of memory it may evict a \
             held lock (and its fence counter); set maxmemory-policy noeviction on it, or pass \
             --allow-eviction (REDLOCK_ALLOW_EVICTION=1) to lock there anyway"
            ),
        )),
        _ if e.to_string().contains(MAX_CLIENTS) => Some(max_clients(display)),
        _ => None,
    }
}

/// What a refused first connection suggests. Not for a server that answered before and went
/// away (a waiter riding out an outage): the URL is right, and the server is just down.
pub const START_HINT: &str = "; start redis-server or set --url / REDLOCK_URL";

pub(super) fn command_error(
    display: &str,
    ep: Option<&Endpoint>,
    config: &Config,
    what: &str,
    e: redis::RedisError,
) -> anyhow::Error {
    if is_foreign_reply(&e) {
        return not_redis(display, ep, config);
    }
    if let Some(condition) = server_condition(display, what, &e) {
        return condition;
    }
    // One line, the cause said once: RedisError's Display already includes its detail.
    let text = crate::error::redis_text(&e);
    if let Some(hint) = tls_hint(&text, has_ca(config)) {
        return failure(
            Kind::Unavailable,
            format!("TLS handshake with {display} failed ({text}){hint}"),
        );
    }
    // Redis refuses long commands from clients that have not authenticated, before NOAUTH.
    if e.code() == Some("NOAUTH") || text.contains("unauthenticated") {
        return failure(
            Kind::Auth,
            format!(
                "{display} requires a password; put it in the URL, REDLOCK_PASSWORD or \
                 --password-file"
            ),
        );
    }
    // The connection is fine: the server is a replica (a master demoted by a failover, named by
    // a Sentinel that has not heard of it yet, or a URL that names a replica).
    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly) {
        return failure(
            Kind::Unavailable,
            format!(
                "{display} refused {what} with READONLY: it is a replica, not the master (a \
                 failover demoted it, or the URL names a replica); try again once the Sentinels \
                 name the new master, or use the master's URL"
            ),
        );
    }
    match redis_kind(&e) {
        Kind::Unavailable if e.is_timeout() => failure(
            Kind::Unavailable,
            format!(
                "{display} did not answer {what} within {} (--io-timeout)",
                humantime::format_duration(config.io_timeout)
            ),
        ),
        Kind::Unavailable => failure(
            Kind::Unavailable,
            format!("lost the connection to {display} during {what} ({text})"),
        ),
        Kind::Auth => failure(
            Kind::Auth,
            format!("{display} refused {what} (ACL permission): {text}"),
        ),
        kind => failure(
            kind,
            format!("{display} answered {what} with an error: {text}"),
        ),
    }
}

/// What a failed connection to one server says about its cause where the driver's error does
/// not: a host name that does not resolve, a missing Unix socket, a database the server does not
/// have, a password for a server that has none, TLS to a server without it. The probes run only
/// after a failure, on connections of their own.
fn diagnose(
    display: &str,
    ep: &Endpoint,
    config: &Config,
    e: &redis::RedisError,
) -> Option<anyhow::Error> {
    if redis_kind(e) == Kind::Auth {
        let refusal = auth_refusal(ep, config)?;
        // The driver reports any refusal of its AUTH as wrong credentials; the server may just
        // have had no room for another client.
        if refusal.contains(MAX_CLIENTS) {
            return Some(max_clients(display));
        }
        return refusal
            .contains("without any password configured")
            .then(|| {
                failure(
                    Kind::Auth,
                    format!(
                        "{display} has no password set, but redlock sent one; remove the \
                         password from the URL, REDLOCK_PASSWORD and --password-file (or give \
                         the server one with requirepass)"
                    ),
                )
            });
    }
    if e.to_string().contains("refused to switch database") {
        let why = e.detail().unwrap_or("refused");
        return Some(crate::error::usage(format!(
            "{display} has no database {} ({why}); use a number below the server's \
             'databases' setting (16 by default)",
            ep.info.redis_settings().db()
        )));
    }
    // A server with no room for another client says so, then closes: our setup commands may meet
    // the closed connection (reset) before the driver reads what it said. Ask again.
    if e.is_io_error()
        && !e.is_timeout()
        && !e.is_connection_refusal()
        && first_bytes(ep.info.addr(), probe_timeout(config), false)
            .is_some_and(|answer| String::from_utf8_lossy(&answer).contains(MAX_CLIENTS))
    {
        return Some(max_clients(display));
    }
    if let Some(problem) = address_problem(display, ep, e) {
        return Some(problem);
    }
    if tls_hint(&e.to_string(), has_ca(config)).is_none() {
        return not_tls(display, ep, config);
    }
    None
}

/// A Unix socket that is not there or not listened on, or a host name that does not resolve:
/// said in the words of the fix.
fn address_problem(display: &str, ep: &Endpoint, e: &redis::RedisError) -> Option<anyhow::Error> {
    use redis::ConnectionAddr as A;
    match ep.info.addr() {
        A::Unix(path) if e.is_connection_refusal() => {
            let p = path.display();
            let why = if std::fs::symlink_metadata(path).is_err() {
                format!(
                    "{p} does not exist; start redis-server with --unixsocket {p}, or fix the path"
                )
            } else {
                format!(
                    "no server listens on {p} (connection refused); start redis-server with --unixsocket {p}"
                )
            };
            Some(failure(
                Kind::Unavailable,
                format!("cannot connect to {display}: {why} in --url / REDLOCK_URL"),
            ))
        }
        A::Tcp(host, port) | A::TcpTls { host, port, .. }
            if e.is_io_error()
                && !e.is_timeout()
                && !e.is_connection_refusal()
                && host.parse::<std::net::IpAddr>().is_err() =>
        {
            use std::net::ToSocketAddrs;
            if let Err(dns) = (host.as_str(), *port).to_socket_addrs() {
                let dns = dns.to_string();
                let why = dns
                    .strip_prefix("failed to lookup address information: ")
                    .unwrap_or(&dns);
                return Some(failure(
                    Kind::Unavailable,
                    format!(
                        "cannot connect to {display}: cannot resolve the host name '{host}' \
                         ({why}); check the host in --url / REDLOCK_URL"
                    ),
                ));
            }
            None
        }
        _ => None,
    }
}

/// The error for a TLS handshake that failed, after the connection was made.
pub(super) fn handshake_error(
    ep: &Endpoint,
    config: &Config,
    e: redis::RedisError,
) -> anyhow::Error {
    if tls_hint(&e.to_string(), has_ca(config)).is_none()
        && let Some(plain) = not_tls(&ep.display, ep, config)
    {
        return plain;
    }
    if e.is_timeout() {
        return failure(
            Kind::Unavailable,
            format!(
                "{} did not complete the TLS handshake within {} (--connect-timeout)",
                ep.display,
                humantime::format_duration(config.connect_timeout)
            ),
        );
    }
    command_error(&ep.display, Some(ep), config, "the TLS handshake", e)
}

/// Whether the reply was not RESP at all: the server speaks another protocol. (A reply of the
/// wrong Redis type is a Parse error too, but not a "Parse error at" the reader.)
fn is_foreign_reply(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Parse && e.detail().is_some_and(|d| d.starts_with("Parse error"))
}

/// The error for a server that answered in another protocol (an HTTP server on the port, say),
/// quoting the start of its answer.
fn not_redis(display: &str, ep: Option<&Endpoint>, config: &Config) -> anyhow::Error {
    let quote = ep
        .and_then(|ep| first_bytes(ep.info.addr(), probe_timeout(config), true))
        .map(|bytes| format!(" (it answered \"{}\")", quote_bytes(&bytes)))
        .unwrap_or_default();
    failure(
        Kind::Unavailable,
        format!(
            "{display} does not speak the Redis protocol{quote}; check the host and port in \
             --url / REDLOCK_URL"
        ),
    )
}

/// An error for a reply that does not have the shape a script promises.
pub fn unexpected_reply(what: &str, detail: impl std::fmt::Display) -> anyhow::Error {
    failure(
        Kind::Protocol,
        format!("unexpected reply to {what}: {detail}"),
    )
}
