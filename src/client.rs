//! Connecting to Redis with timeouts, TLS and auth, and running commands with logging.
//!
//! Every connection has a connect timeout and a read/write timeout, so a dead or silent server is
//! an error after at most `--connect-timeout` + `--io-timeout`, never a hang. Errors carry the
//! redacted URL and a hint at the fix.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::config::Config;
use crate::error::{Kind, failure, redis_kind};

/// One connection to the configured Redis server.
pub struct Redis {
    con: redis::Connection,
    config: Config,
}

impl Redis {
    /// Opens a connection, authenticates, and sets the I/O timeouts.
    pub fn connect(config: &Config) -> Result<Redis> {
        let ep = &config.endpoint;
        let started = Instant::now();
        let client = match &ep.tls {
            Some(certs) => redis::Client::build_with_tls(ep.info.clone(), certs.clone()),
            None => redis::Client::open(ep.info.clone()),
        }
        .map_err(|e| crate::error::usage(format!("invalid Redis URL {}: {e}", ep.display)))?;
        let mut con = client
            .get_connection_with_timeout(config.connect_timeout)
            .map_err(|e| connect_error(&ep.display, config.connect_timeout, e))?;
        if ep.tls_handshake_pending() {
            // rustls shakes hands on the first read or write: do it now, under the connect
            // timeout, so that a certificate problem is reported as one.
            con.set_read_timeout(Some(config.connect_timeout))
                .and_then(|()| con.set_write_timeout(Some(config.connect_timeout)))
                .and_then(|()| redis::cmd("PING").query::<()>(&mut con))
                .map_err(|e| command_error(&ep.display, "the TLS handshake", e))?;
        }
        con.set_read_timeout(Some(config.io_timeout))
            .and_then(|()| con.set_write_timeout(Some(config.io_timeout)))
            .with_context(|| format!("cannot set timeouts on {}", ep.display))?;
        if config.verbose {
            eprintln!(
                "redlock: connected to {} in {:.1?}",
                ep.display,
                started.elapsed()
            );
        }
        Ok(Redis {
            con,
            config: config.clone(),
        })
    }

    /// Replaces the connection with a fresh one (after a timeout, the old one may still have a
    /// reply on its way).
    pub fn reconnect(&mut self) -> Result<()> {
        *self = Redis::connect(&self.config)?;
        Ok(())
    }

    /// Runs one round trip, logging it with `-v`, and names the server in any error.
    pub fn call<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let started = Instant::now();
        let result = f(&mut self.con);
        if self.config.verbose {
            let outcome = match &result {
                Ok(_) => "ok".to_string(),
                Err(e) => format!("error: {e}"),
            };
            eprintln!(
                "redlock: {what} on {}: {outcome} ({:.1?})",
                self.config.endpoint.display,
                started.elapsed()
            );
        }
        result.map_err(|e| command_error(&self.config.endpoint.display, what, e))
    }

    /// Changes the read timeout, for blocking commands that wait longer than `--io-timeout`.
    pub fn set_read_timeout(&mut self, timeout: Duration) -> Result<()> {
        self.con
            .set_read_timeout(Some(timeout))
            .with_context(|| format!("cannot set timeouts on {}", self.config.endpoint.display))
    }

    /// Sets the read timeout back to `--io-timeout`.
    pub fn restore_read_timeout(&mut self) -> Result<()> {
        self.set_read_timeout(self.config.io_timeout)
    }
}

fn connect_error(display: &str, timeout: Duration, e: redis::RedisError) -> anyhow::Error {
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
        e.to_string()
    };
    let hint = tls_hint(&why).unwrap_or("; start redis-server or set --url / REDLOCK_URL");
    let kind = if kind == Kind::Protocol {
        Kind::Unavailable
    } else {
        kind
    };
    failure(kind, format!("cannot connect to {display} ({why}){hint}"))
}

fn command_error(display: &str, what: &str, e: redis::RedisError) -> anyhow::Error {
    // One line, the cause said once: RedisError's Display already includes its detail.
    let text = e.to_string();
    if let Some(hint) = tls_hint(&text) {
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
    match redis_kind(&e) {
        Kind::Unavailable if e.is_timeout() => failure(
            Kind::Unavailable,
            format!("{display} did not answer {what} within --io-timeout"),
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

/// The fix for a certificate problem, if `text` describes one.
fn tls_hint(text: &str) -> Option<&'static str> {
    let certificate = [
        "certificate",
        "UnknownIssuer",
        "CertNotValid",
        "NotValidForName",
    ]
    .iter()
    .any(|needle| text.contains(needle));
    certificate.then_some("; pass the CA that signed the server's certificate with --tls-ca")
}

/// An error for a reply that does not have the shape a script promises.
pub fn unexpected_reply(what: &str, detail: impl std::fmt::Display) -> anyhow::Error {
    failure(
        Kind::Protocol,
        format!("unexpected reply to {what}: {detail}"),
    )
}
