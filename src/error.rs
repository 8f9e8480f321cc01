//! Error kinds whose exit status differs, and the one place that maps an error to its code.
//!
//! Errors travel as `anyhow::Error` with context added at the edges. Where the kind decides the
//! exit status, the root cause is a [`Failure`] (raised by redlock itself) or a
//! [`redis::RedisError`] (raised by the driver); [`exit_code`] looks for either in the chain.
//!
//! Layer 2 of the list in `lib.rs`.

use std::fmt;

use crate::exit;

/// The kinds of failure that have an exit status of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bad input: flag, duration, key, URL, file.
    Usage,
    /// `release`/`extend` with a token that does not hold the lock.
    NotOwner,
    /// Redis cannot be reached, timed out, or dropped the connection.
    Unavailable,
    /// Redis refused our credentials or the ACL forbids a command.
    Auth,
    /// Redis answered something we did not expect.
    Protocol,
    /// Our output could not be written (not a closed pipe).
    Io,
    /// `exec`: the command was not found.
    NotFound,
    /// `exec`: the command could not be executed.
    NotExecutable,
}

/// An error raised by redlock itself, carrying the kind that decides the exit status.
#[derive(Debug)]
pub struct Failure {
    pub kind: Kind,
    pub message: String,
    /// The server refused the command before running any of it (it is a replica, out of memory,
    /// or may evict locks): there is nothing of it to undo, and nothing should be written there.
    pub refused: bool,
}

/// A [`Failure`] as an `anyhow::Error`.
pub fn failure(kind: Kind, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Failure {
        kind,
        message: message.into(),
        refused: false,
    })
}

/// A [`Failure`] for a command the server refused before running any of it.
pub fn refusal(kind: Kind, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Failure {
        kind,
        message: message.into(),
        refused: true,
    })
}

/// Whether the error is a [`refusal`]: the command did not run.
pub fn was_refused(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|c| c.downcast_ref::<Failure>().is_some_and(|f| f.refused))
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// Shorthand for `failure(Kind::Usage, ...)`.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    failure(Kind::Usage, message)
}

/// Classifies an error by the first [`Failure`] or Redis error in its chain.
pub fn kind_of(err: &anyhow::Error) -> Kind {
    for cause in err.chain() {
        if let Some(f) = cause.downcast_ref::<Failure>() {
            return f.kind;
        }
        if let Some(r) = cause.downcast_ref::<redis::RedisError>() {
            return redis_kind(r);
        }
    }
    Kind::Protocol
}

/// How a Redis driver error counts for us.
pub fn redis_kind(err: &redis::RedisError) -> Kind {
    use redis::ErrorKind as R;
    match err.kind() {
        R::AuthenticationFailed => Kind::Auth,
        R::Server(redis::ServerErrorKind::NoPerm) => Kind::Auth,
        R::Io => Kind::Unavailable,
        // A master demoted by a failover (READONLY), a cluster in trouble: try again later.
        R::Server(
            redis::ServerErrorKind::BusyLoading
            | redis::ServerErrorKind::MasterDown
            | redis::ServerErrorKind::ReadOnly
            | redis::ServerErrorKind::ClusterDown
            | redis::ServerErrorKind::TryAgain,
        ) => Kind::Unavailable,
        _ if err.is_io_error() || err.is_timeout() || err.is_connection_dropped() => {
            Kind::Unavailable
        }
        _ => match err.code() {
            Some("NOAUTH" | "WRONGPASS" | "NOPERM") => Kind::Auth,
            // Out of memory: the command did not run; it may once memory is freed.
            Some("OOM") => Kind::Unavailable,
            // An ACL refusal of a command a script calls comes back as a plain ERR.
            _ if err.to_string().contains("user executing the script can't") => Kind::Auth,
            _ => Kind::Protocol,
        },
    }
}

/// A driver error in words: its Display puts the Rust debug name of its kind in the middle
/// ("Invalid database number - InvalidClientConfig"), which means nothing to a user.
pub fn redis_text(err: &redis::RedisError) -> String {
    let text = err.to_string();
    text.replacen(&format!(" - {:?}", err.kind()), "", 1)
}

/// The exit status for an error.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    match kind_of(err) {
        Kind::Usage => exit::USAGE,
        Kind::NotOwner => exit::NOT_OWNER,
        Kind::Unavailable => exit::UNAVAILABLE,
        Kind::Auth => exit::AUTH,
        Kind::Protocol => exit::INTERNAL,
        Kind::Io => exit::IO_ERROR,
        Kind::NotFound => exit::NOT_FOUND,
        Kind::NotExecutable => exit::NOT_EXECUTABLE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn failure_kind_survives_context() {
        let err = Err::<(), _>(failure(Kind::NotOwner, "held by bob"))
            .context("cannot release 'k'")
            .unwrap_err();
        assert_eq!(exit_code(&err), exit::NOT_OWNER);
        assert_eq!(format!("{err:#}"), "cannot release 'k': held by bob");
    }

    #[test]
    fn redis_errors_map_to_their_codes() {
        let io: redis::RedisError =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused").into();
        assert_eq!(exit_code(&anyhow::Error::new(io)), exit::UNAVAILABLE);
        let auth: redis::RedisError =
            (redis::ErrorKind::AuthenticationFailed, "invalid password").into();
        assert_eq!(exit_code(&anyhow::Error::new(auth)), exit::AUTH);
        let other: redis::RedisError = (redis::ErrorKind::UnexpectedReturnType, "bad").into();
        assert_eq!(exit_code(&anyhow::Error::new(other)), exit::INTERNAL);
        let in_script: redis::RedisError = (
            redis::ServerErrorKind::ResponseError.into(),
            "An error was signalled by the server",
            "The user executing the script can't run this command or subcommand script: \
             a2afdd46, on @user_script:45."
                .to_string(),
        )
            .into();
        assert_eq!(exit_code(&anyhow::Error::new(in_script)), exit::AUTH);
        let oom = redis::parse_redis_value(b"-OOM command not allowed when used memory\r\n")
            .and_then(redis::Value::extract_error)
            .unwrap_err();
        assert_eq!(exit_code(&anyhow::Error::new(oom)), exit::UNAVAILABLE);
    }

    #[test]
    fn driver_errors_lose_the_debug_name_of_their_kind() {
        use redis::ErrorKind as R;
        for (err, text) in [
            (
                redis::RedisError::from((R::InvalidClientConfig, "Invalid database number")),
                "Invalid database number",
            ),
            (
                (
                    R::InvalidClientConfig,
                    "Invalid protocol version",
                    "x".to_string(),
                )
                    .into(),
                "Invalid protocol version: x",
            ),
            (
                (
                    redis::ServerErrorKind::ResponseError.into(),
                    "Redis server refused to switch database",
                    "DB index is out of range".to_string(),
                )
                    .into(),
                "Redis server refused to switch database: DB index is out of range",
            ),
            (
                std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused").into(),
                "refused",
            ),
        ] {
            assert_eq!(redis_text(&err), text);
        }
    }

    #[test]
    fn unknown_errors_are_internal() {
        assert_eq!(exit_code(&anyhow::anyhow!("???")), exit::INTERNAL);
    }
}
