//! `rediss://` against a `redis-server` serving TLS with a CA the test generates.

use std::sync::Arc;

use crate::common::*;

#[test]
#[cfg_attr(not(feature = "tls"), ignore = "a build without the tls feature")]
fn rediss_works_with_the_private_ca_and_fails_clearly_without_it() {
    let certs = Arc::new(Certs::generate());
    let redis = or_skip!(
        RedisServer::builder()
            .tls(Arc::clone(&certs), false)
            .start()
    );
    assert!(redis.url().starts_with("rediss://"));
    let ca = certs.path("ca.crt");

    let token = redis
        .redlock()
        .arg("--tls-ca")
        .arg(&ca)
        .args(["acquire", "k"])
        .run()
        .ok();
    assert_eq!(redis.get(&lock_key("k")), Some(token.clone()));
    redis
        .redlock()
        .arg("--tls-ca")
        .arg(&ca)
        .args(["release", "k", &token])
        .run()
        .expect(0);

    let out = redis.redlock().args(["acquire", "k"]).run().expect(69);
    assert_one_error_line(&out);
    assert!(out.stderr.contains("certificate"), "{out}");

    // A CA that did not sign the server's certificate is no better.
    let other = Certs::generate();
    let out = redis
        .redlock()
        .arg("--tls-ca")
        .arg(other.path("ca.crt"))
        .args(["acquire", "k"])
        .run()
        .expect(69);
    assert!(out.stderr.contains("certificate"), "{out}");

    // Plain text to a TLS port is a dead server, not a hang.
    let plain = format!("redis://127.0.0.1:{}", redis.port());
    redlock()
        .args(["--url", &plain, "--io-timeout", "1s", "acquire", "k"])
        .run()
        .expect(69);
    assert_eq!(redis.get(&lock_key("k")), None);
}

#[test]
#[cfg_attr(not(feature = "tls"), ignore = "a build without the tls feature")]
fn client_certificates_for_mutual_tls() {
    let certs = Arc::new(Certs::generate());
    let redis = or_skip!(RedisServer::builder().tls(Arc::clone(&certs), true).start());
    let out = redis
        .redlock()
        .arg("--tls-ca")
        .arg(certs.path("ca.crt"))
        .args(["acquire", "k"])
        .run()
        .expect(69);
    assert_one_error_line(&out);

    let token = redis
        .redlock()
        .arg("--tls-ca")
        .arg(certs.path("ca.crt"))
        .arg("--tls-cert")
        .arg(certs.path("client.crt"))
        .arg("--tls-key")
        .arg(certs.path("client.key"))
        .args(["acquire", "k"])
        .run()
        .ok();
    assert_eq!(redis.get(&lock_key("k")), Some(token));
}

/// The contract: fail clearly, naming the fix. The handshake happens on the first command, so
/// the error is reported as a lost connection without the hint that `connect` would add.
#[test]
#[cfg_attr(not(feature = "tls"), ignore = "a build without the tls feature")]
fn an_unknown_server_ca_names_the_tls_ca_flag() {
    let certs = Arc::new(Certs::generate());
    let redis = or_skip!(RedisServer::builder().tls(certs, false).start());
    let out = redis.redlock().args(["acquire", "k"]).run().expect(69);
    assert_one_error_line(&out);
    for needle in ["certificate", "--tls-ca"] {
        assert!(out.stderr.contains(needle), "no {needle:?}:\n{out}");
    }
}
