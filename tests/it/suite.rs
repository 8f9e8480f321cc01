//! What the suite needs from the machine, said once and loudly.
//!
//! Without `redis-server` on PATH every test that needs one skips (with a note that `cargo test`
//! hides), so a bare `cargo test` would look green while testing almost nothing. This test fails
//! instead, with the one line that says what to do; `REDLOCK_SKIP_REDIS=1` accepts the skip.

#[test]
fn redis_server_is_installed() {
    if std::env::var_os("REDLOCK_SKIP_REDIS").is_some_and(|v| v == "1") {
        return;
    }
    assert!(
        crate::common::redis_server_installed(),
        "redis-server is not on PATH, so every test that needs a Redis server was skipped: \
         install it (Debian, Ubuntu: sudo apt install redis-server) and run cargo test again, \
         or set REDLOCK_SKIP_REDIS=1 to run only the tests that need no Redis"
    );
}
