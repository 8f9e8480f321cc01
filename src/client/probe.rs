//! Probing a server after a failure, on a connection of its own, for what the driver's error
//! does not say: the first bytes it sends back, and its own answer to the AUTH that failed. The
//! probes are short ([`probe_timeout`]) and run only after a failure.
//!
//! Layer 5 of the list in `lib.rs`.

use std::time::Duration;

use crate::config::{Config, Endpoint};

/// The server's answer to the AUTH that failed while connecting (the driver keeps only
/// "authentication failed"), asked again on a connection without credentials. Never printed: it
/// is only matched against known answers.
pub(super) fn auth_refusal(ep: &Endpoint, config: &Config) -> Option<String> {
    let settings = ep.info.redis_settings();
    let password = settings.password()?.to_string();
    let bare = ep
        .info
        .clone()
        .set_redis_settings(redis::RedisConnectionInfo::default().set_skip_set_lib_name());
    let client = super::client_for(bare, ep.tls.as_ref()).ok()?;
    let mut con = client
        .get_connection_with_timeout(config.connect_timeout)
        .ok()?;
    con.set_read_timeout(Some(config.io_timeout)).ok()?;
    con.set_write_timeout(Some(config.io_timeout)).ok()?;
    let mut auth = redis::cmd("AUTH");
    if let Some(user) = settings.username() {
        auth.arg(user);
    }
    match auth.arg(password).query::<()>(&mut con) {
        Ok(()) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// How long a probe after a failure may take: a server that answers at all answers a PING well
/// within a second, and a silent one must not double the time to the error.
pub(super) fn probe_timeout(config: &Config) -> Duration {
    config.connect_timeout.min(Duration::from_secs(1))
}

/// The first bytes a server sends back to a PING (or, without `ping`, before it is sent
/// anything), on a connection of its own (plain TCP or a Unix socket; a TLS server is not
/// probed). `None` when it sends nothing.
pub(super) fn first_bytes(
    addr: &redis::ConnectionAddr,
    timeout: Duration,
    ping: bool,
) -> Option<Vec<u8>> {
    use std::io::{Read, Write};
    fn exchange(mut s: impl Read + Write, ping: bool) -> Option<Vec<u8>> {
        if ping {
            s.write_all(b"*1\r\n$4\r\nPING\r\n").ok()?;
        }
        let mut buf = vec![0u8; 64];
        let n = s.read(&mut buf).ok().filter(|&n| n > 0)?;
        buf.truncate(n);
        Some(buf)
    }
    match addr {
        redis::ConnectionAddr::Tcp(host, port) => {
            use std::net::ToSocketAddrs;
            let sa = (host.as_str(), *port).to_socket_addrs().ok()?.next()?;
            let s = std::net::TcpStream::connect_timeout(&sa, timeout).ok()?;
            s.set_read_timeout(Some(timeout)).ok()?;
            s.set_write_timeout(Some(timeout)).ok()?;
            exchange(s, ping)
        }
        redis::ConnectionAddr::Unix(path) => {
            let s = std::os::unix::net::UnixStream::connect(path).ok()?;
            s.set_read_timeout(Some(timeout)).ok()?;
            s.set_write_timeout(Some(timeout)).ok()?;
            exchange(s, ping)
        }
        _ => None,
    }
}

/// The first line of `bytes` (at most 40 of them) as printable ASCII, escaped where needed.
pub(super) fn quote_bytes(bytes: &[u8]) -> String {
    let line_end = bytes.iter().position(|&b| b == b'\n');
    let end = line_end.unwrap_or(bytes.len()).min(40);
    let more = if end + 1 < bytes.len() || (line_end.is_none() && end < bytes.len()) {
        "…"
    } else {
        ""
    };
    let line = &bytes[..end];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    format!("{}{more}", line.escape_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_foreign_answer_is_quoted_by_its_first_line() {
        for (bytes, quoted) in [
            (
                &b"HTTP/1.1 400 Bad Request\r\nServer: x\r\n"[..],
                "HTTP/1.1 400 Bad Request…",
            ),
            (b"SSH-2.0-OpenSSH_9.6\r\n", "SSH-2.0-OpenSSH_9.6"),
            (b"<!DOCTYPE HTML>\n<html>", "<!DOCTYPE HTML>…"),
            (
                b"\x15\x03\x03\x00\x02\x02\x46",
                r"\x15\x03\x03\x00\x02\x02F",
            ),
            (b"say \"hi\"", r#"say \"hi\""#),
            (&[b'a'; 64][..], &format!("{}…", "a".repeat(40))),
        ] {
            assert_eq!(quote_bytes(bytes), quoted, "{bytes:?}");
        }
    }
}
