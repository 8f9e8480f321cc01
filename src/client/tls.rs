//! TLS problems in the words of their fix: one hint per certificate problem that rustls names,
//! and a plain Redis answering where TLS was expected.
//!
//! Layer 5 of the list in `lib.rs`.

use crate::config::{Config, Endpoint};
use crate::error::{Kind, failure};

use super::probe::{first_bytes, probe_timeout};

/// For a `rediss://` endpoint whose TLS failed: if a plain Redis answers on that port, the error
/// that says so.
pub(super) fn not_tls(display: &str, ep: &Endpoint, config: &Config) -> Option<anyhow::Error> {
    let redis::ConnectionAddr::TcpTls { host, port, .. } = ep.info.addr() else {
        return None;
    };
    let plain = redis::ConnectionAddr::Tcp(host.clone(), *port);
    let answer = first_bytes(&plain, probe_timeout(config), true)?;
    // A RESP simple string or error (+PONG, -NOAUTH ...): a Redis without TLS.
    if !matches!(answer.first(), Some(b'+' | b'-')) {
        return None;
    }
    let url = ep.public.replacen("rediss://", "redis://", 1);
    Some(failure(
        Kind::Unavailable,
        format!(
            "{display} does not speak TLS: a Redis without TLS answers there; use {url} \
             (no TLS), or the server's TLS port"
        ),
    ))
}

/// The fix for a certificate problem, if `text` describes one: one hint per cause that rustls
/// names. `has_ca`: a --tls-ca was given (an unknown issuer then means it is the wrong CA).
pub(super) fn tls_hint(text: &str, has_ca: bool) -> Option<&'static str> {
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    if !has(&[
        "certificate",
        "UnknownIssuer",
        "CertNotValid",
        "NotValidForName",
    ]) {
        return None;
    }
    Some(if has(&["CaUsedAsEndEntity"]) {
        "; the server presents a CA certificate (CA:TRUE) as its own: configure redis-server's \
         tls-cert-file with a server certificate issued by that CA, and pass the CA with --tls-ca"
    } else if has(&["not valid for name", "NotValidForName"]) {
        "; the server's certificate is not valid for the host name in the URL: connect with a \
         name it lists (its subjectAltName), or reissue it for this name"
    } else if has(&["certificate expired", ": Expired"]) {
        "; the server's certificate has expired (or this machine's clock is wrong): renew it"
    } else if has(&["certificate not valid yet", ": NotValidYet"]) {
        "; the server's certificate is not valid yet: check this machine's clock"
    } else if has(&["UnknownIssuer", "BadSignature"]) && has_ca {
        // BadSignature: a CA of the same name (one generated anew, say) that did not sign it.
        "; the CA in --tls-ca did not sign the server's certificate: pass the CA that did"
    } else {
        "; pass the CA that signed the server's certificate with --tls-ca"
    })
}

/// Whether --tls-ca was given (the same for every endpoint).
pub(super) fn has_ca(config: &Config) -> bool {
    config
        .servers
        .endpoints()
        .iter()
        .any(|e| e.tls.as_ref().is_some_and(has_root))
}

#[cfg(feature = "tls")]
fn has_root(certs: &crate::config::TlsFiles) -> bool {
    certs.root_cert.is_some()
}

#[cfg(not(feature = "tls"))]
fn has_root(none: &crate::config::TlsFiles) -> bool {
    match *none {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_certificate_problem_gets_its_own_hint() {
        // What rustls says (its Display), with and without --tls-ca, and the hint's key words.
        for (text, has_ca, hint) in [
            (
                "invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))",
                true,
                "tls-cert-file",
            ),
            (
                "invalid peer certificate: certificate not valid for name \"127.0.0.1\"; \
                 certificate is only valid for DnsName(\"redis.example.com\")",
                true,
                "subjectAltName",
            ),
            (
                "invalid peer certificate: NotValidForName",
                false,
                "host name",
            ),
            (
                "invalid peer certificate: UnknownIssuer",
                false,
                "with --tls-ca",
            ),
            (
                "invalid peer certificate: UnknownIssuer",
                true,
                "did not sign",
            ),
            (
                "invalid peer certificate: BadSignature",
                true,
                "did not sign",
            ),
            (
                "invalid peer certificate: certificate expired: verification time 1 (UNIX), but \
                 certificate is not valid after 0 (1 seconds ago)",
                true,
                "has expired",
            ),
            ("invalid peer certificate: Expired", true, "has expired"),
            (
                "invalid peer certificate: certificate not valid yet: verification time 0",
                true,
                "not valid yet",
            ),
            (
                "invalid peer certificate: BadEncoding",
                false,
                "with --tls-ca",
            ),
        ] {
            let found = tls_hint(text, has_ca).unwrap_or_else(|| panic!("no hint for {text}"));
            assert!(found.contains(hint), "{text}: {found}");
        }
        for text in [
            "connection refused",
            "key Expired",
            "max number of clients reached",
        ] {
            assert_eq!(tls_hint(text, true), None, "{text}");
        }
    }
}
