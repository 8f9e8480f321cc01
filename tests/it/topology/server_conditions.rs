//! What the server is and what state it is in: a maxmemory-policy that may evict locks, a
//! replica, a server out of memory or out of client slots, a database it does not have, a TLS
//! certificate it should not present. Each is a real `redis-server` configured that way; each
//! outcome is one line that names the cause, with the exit status that fits it: 69 for a
//! condition that passes (try again later), 2 for one the operator must fix or accept.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;

/// The warning `acquire`/`exec` print for a volatile-* policy.
const VOLATILE_WARNING: &str = "warning: ";

/// A server started with `maxmemory-policy POLICY`.
fn with_policy(policy: &str) -> Option<RedisServer> {
    RedisServer::builder()
        .arg("--maxmemory-policy")
        .arg(policy)
        .start()
}

#[test]
fn a_volatile_policy_is_warned_about_once_and_the_lock_is_taken() {
    let redis = or_skip!(with_policy("volatile-lru"));
    let out = redis
        .redlock()
        .args(["exec", "k", "--", "true"])
        .run()
        .expect(0);
    assert_eq!(out.stderr.matches(VOLATILE_WARNING).count(), 1, "{out}");
    for needle in [
        "volatile-lru",
        "noeviction",
        "--allow-eviction",
        &redis.url(),
    ] {
        assert!(out.stderr.contains(needle), "no {needle:?}:\n{out}");
    }
    assert_eq!(redis.get(&lock_key("k")), None, "exec released it");

    let token = redis.redlock().args(["acquire", "k"]).run();
    assert_eq!(token.stderr.matches(VOLATILE_WARNING).count(), 1, "{token}");
    release(&redis, "k", &token.ok());

    // -q and --allow-eviction (or its variable) silence it.
    for (flags, env) in [
        (&["-q"][..], None),
        (&["--allow-eviction"][..], None),
        (&[][..], Some("1")),
    ] {
        let mut cmd = redis.redlock();
        cmd.arg("exec").args(flags).args(["k", "--", "true"]);
        if let Some(v) = env {
            cmd.env("REDLOCK_ALLOW_EVICTION", v);
        }
        let out = cmd.run().expect(0);
        assert_eq!(out.stderr, "", "{flags:?} {env:?}: {out}");
    }
}

/// The eviction policy costs an `INFO memory`, which costs the server more than the lock
/// operation: a lock keeps what it read in its meta hash (`policy`, `policy_ms`, the server's
/// clock) and reads it again only once that is 10 s old. The role (`INFO replication`) is read by
/// every connection's first attempt. A policy changed meanwhile is noticed by a new lock at once,
/// and by this one when its reading is out of date.
#[test]
fn the_eviction_policy_is_read_once_per_ten_seconds_per_lock() {
    let redis = or_skip!(RedisServer::start());
    // The first use reads the policy and keeps it in the meta hash its attempt made.
    redis
        .redlock()
        .args(["exec", "k", "--", "true"])
        .run()
        .expect(0);
    let meta = redis.meta("k");
    assert_eq!(
        meta.get("policy").map(String::as_str),
        Some("noeviction"),
        "{meta:?}"
    );
    let read_at: i64 = meta["policy_ms"].parse().unwrap();
    assert!((redis.now_ms() - read_at).abs() < 10_000, "{meta:?}");
    redis.query::<()>(&["CONFIG", "RESETSTAT"]);
    for _ in 0..3 {
        redis
            .redlock()
            .args(["exec", "k", "--", "true"])
            .run()
            .expect(0);
    }
    let infos = redis.calls("info");
    assert_eq!(
        infos,
        3,
        "one INFO (replication) per connection:\n{}",
        redis.query::<String>(&["INFO", "commandstats"])
    );

    redis.query::<()>(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    // A lock that has not read the policy yet sees the new one at once.
    let out = redis.redlock().args(["acquire", "other"]).run().expect(2);
    assert!(out.stderr.contains("allkeys-lru"), "{out}");
    // This one goes by its reading until it is 10 s old (the server's clock).
    let token = redis.redlock().args(["acquire", "k"]).run().ok();
    release(&redis, "k", &token);
    let stale = (redis.now_ms() - 10_001).to_string();
    redis.query::<()>(&[
        "HSET",
        &format!("{}:meta", lock_key("k")),
        "policy_ms",
        &stale,
    ]);
    let out = redis.redlock().args(["acquire", "k"]).run().expect(2);
    assert!(out.stderr.contains("allkeys-lru"), "{out}");
    assert_eq!(redis.get(&lock_key("k")), None, "{out}");
    // Refused: the out-of-date reading is left as it was (nothing is written).
    assert_eq!(redis.meta("k")["policy_ms"], stale);
}

#[test]
fn an_allkeys_policy_is_refused_unless_eviction_is_allowed() {
    let redis = or_skip!(with_policy("allkeys-lru"));
    let ran = redis.dir().join("ran");
    let out = redis
        .redlock()
        .args(["exec", "k", "--", "touch"])
        .arg(&ran)
        .run()
        .expect(2);
    assert_one_error_line(&out);
    for needle in [
        "allkeys-lru",
        "noeviction",
        "--allow-eviction",
        &redis.url(),
    ] {
        assert!(out.stderr.contains(needle), "no {needle:?}:\n{out}");
    }
    assert!(!ran.exists(), "the command ran:\n{out}");
    let out = redis.redlock().args(["acquire", "k"]).run().expect(2);
    assert_eq!(out.stdout, "", "{out}");
    // Refused before anything was written: no lock, no fence counter, no queue.
    assert_eq!(redis.dbsize(), 0, "{:?}", redis.keys());

    // Allowed: taken, without a warning (the operator chose).
    let token = redis
        .redlock()
        .args(["acquire", "k", "--allow-eviction"])
        .run();
    assert_eq!(token.stderr, "", "{token}");
    let token = token.ok();
    assert_eq!(redis.get(&lock_key("k")), Some(token.clone()));
    // Commands that take no lock do not care.
    release(&redis, "k", &token);
    redis.redlock().arg("status").run().expect(0);
    redis
        .redlock()
        .env("REDLOCK_ALLOW_EVICTION", "yes")
        .args(["exec", "k", "--", "true"])
        .run()
        .expect(0);
}

/// Managed services often deny INFO (or CONFIG): then the policy is unknown, and nothing is said.
#[test]
fn a_server_that_hides_its_policy_is_locked_on_without_a_word() {
    let redis = or_skip!(
        RedisServer::builder()
            .arg("--maxmemory-policy")
            .arg("allkeys-lru")
            .arg("--rename-command")
            .arg("INFO")
            .arg("")
            .start()
    );
    let out = redis
        .redlock()
        .args(["exec", "k", "--", "true"])
        .run()
        .expect(0);
    assert_eq!(out.stderr, "", "{out}");

    // An ACL user without INFO: the same.
    let redis = or_skip!(with_policy("volatile-lru"));
    let _: () = redis.query(&[
        "ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all", "-info",
    ]);
    let url = format!("redis://locker:pw@127.0.0.1:{}", redis.port());
    let out = redlock()
        .args(["-u", &url, "exec", "k", "--", "true"])
        .run()
        .expect(0);
    assert_eq!(out.stderr, "", "{out}");
}

/// A replica of the server at `master`, started with `replica-read-only` as given.
fn replica_of(master: &RedisServer, read_only: bool) -> Option<RedisServer> {
    let replica = RedisServer::builder()
        .arg("--replicaof")
        .arg("127.0.0.1")
        .arg(master.port().to_string())
        .arg("--replica-read-only")
        .arg(if read_only { "yes" } else { "no" })
        .start()?;
    let up = wait_for(
        || {
            let info: String = replica.query(&["INFO", "replication"]);
            info.contains("master_link_status:up")
        },
        Duration::from_secs(30),
    );
    assert!(
        up,
        "the replica never linked up; its log:\n{}",
        replica.log()
    );
    Some(replica)
}

/// A writable replica would grant a lock the master never sees: two holders at once.
#[test]
fn a_writable_replica_is_refused() {
    let master = or_skip!(RedisServer::start());
    let replica = or_skip!(replica_of(&master, false));
    let held = hold(&master, "k", "60s");
    // The master's lock reached the replica; a new lock is refused there all the same.
    assert!(wait_for(
        || replica.get(&lock_key("k")) == Some(held.clone()),
        Duration::from_secs(30)
    ));
    for args in [&["acquire", "fresh"][..], &["exec", "fresh", "--", "true"]] {
        let out = replica.redlock().args(args).run().expect(69);
        assert_one_error_line(&out);
        let master_addr = format!("replica of 127.0.0.1:{}", master.port());
        for needle in [master_addr.as_str(), &replica.url(), "master's URL"] {
            assert!(out.stderr.contains(needle), "no {needle:?}:\n{out}");
        }
    }
    assert_eq!(replica.get(&lock_key("fresh")), None);
    assert_eq!(
        replica.keys().len(),
        master.keys().len(),
        "{:?}",
        replica.keys()
    );
}

/// A read-only replica refuses every write: said as what it is, not as a lost connection.
#[test]
fn a_read_only_replica_is_named_as_one() {
    let master = or_skip!(RedisServer::start());
    let replica = or_skip!(replica_of(&master, true));
    let out = replica.redlock().args(["acquire", "k"]).run().expect(69);
    assert_one_error_line(&out);
    let master_addr = format!("replica of 127.0.0.1:{}", master.port());
    assert!(out.stderr.contains(&master_addr), "{out}");

    // A lock taken on the master and replicated: releasing or extending it through the replica
    // is refused by the replica (READONLY), which is how it is reported.
    let token = hold(&master, "r", "60s");
    assert!(wait_for(
        || replica.get(&lock_key("r")) == Some(token.clone()),
        Duration::from_secs(30)
    ));
    for args in [&["release", "r"][..], &["extend", "r", "--ttl", "90s"]] {
        let out = replica
            .redlock()
            .args(args)
            .env("REDLOCK_TOKEN", &token)
            .run()
            .expect(69);
        assert_one_error_line(&out);
        assert!(out.stderr.contains("replica"), "{out}");
        assert!(!out.stderr.contains("lost the connection"), "{out}");
    }
    assert_eq!(master.get(&lock_key("r")), Some(token));
}

#[test]
fn a_server_out_of_memory_is_unavailable_not_an_internal_error() {
    let redis = or_skip!(RedisServer::start());
    let token = hold(&redis, "held", "60s");
    let waiter = redis
        .redlock()
        .args(["acquire", "held", "--wait", "60s"])
        .spawn_proc();
    assert!(
        wait_for(
            || queue(&redis, "held").len() == 1,
            std::time::Duration::from_secs(20)
        ),
        "the waiter never queued"
    );
    let _: () = redis.query(&["CONFIG", "SET", "maxmemory", "1"]);
    let ran = redis.dir().join("ran");
    let ran_arg = ran.display().to_string();
    for args in [
        &["acquire", "k"][..],
        &["exec", "k", "--", "touch", &ran_arg],
    ] {
        let out = redis.redlock().args(args).run().expect(69);
        assert_one_error_line(&out);
        for needle in ["out of memory", "maxmemory", &redis.url()] {
            assert!(out.stderr.contains(needle), "no {needle:?}:\n{out}");
        }
    }
    assert!(!ran.exists());
    // A held lock can still be released out of memory, a waiter queued or not (DEL is allowed,
    // a reservation is not: the lock is freed and the waiter takes it at its next look): a full
    // server must not keep every lock until its TTL. It was refused (69).
    release(&redis, "held", &token);
    assert_eq!(redis.get(&lock_key("held")), None);
    let _: () = redis.query(&["CONFIG", "SET", "maxmemory", "0"]);
    let next = waiter.finish(std::time::Duration::from_secs(30)).ok();
    release(&redis, "held", &next);
}

#[test]
fn a_server_without_room_for_another_client_is_unavailable() {
    let redis = or_skip!(RedisServer::builder().password("pw").start());
    // Our one connection is the only one the server accepts from now on.
    let mut held = redis.cli();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg(1)
        .query(&mut held)
        .unwrap();
    let port = redis.port();
    for url in [
        format!("redis://:pw@127.0.0.1:{port}"),
        format!("redis://:pw@127.0.0.1:{port}/3"),
        format!("redis://:wrong@127.0.0.1:{port}"),
    ] {
        let out = redlock()
            .args(["-u", &url, "acquire", "k"])
            .run()
            .expect(69);
        assert_one_error_line(&out);
        assert!(
            out.stderr.contains("max number of clients reached"),
            "{url}: {out}"
        );
        assert!(out.stderr.contains("maxclients"), "{url}: {out}");
    }
    // Without a password, the refusal is the answer to the first command.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("")
        .query(&mut held)
        .unwrap();
    let out = redlock()
        .args(["-u", &format!("redis://127.0.0.1:{port}"), "acquire", "k"])
        .run()
        .expect(69);
    assert!(
        out.stderr.contains("max number of clients reached"),
        "{out}"
    );
    let keys: i64 = redis::cmd("DBSIZE").query(&mut held).unwrap();
    assert_eq!(keys, 0);
}

/// Usage errors, with or without a password (which changes how the driver connects).
#[test]
fn a_database_the_server_lacks_and_port_0_are_usage_errors() {
    let redis = or_skip!(RedisServer::builder().password("pw").start());
    let port = redis.port();
    for url in [
        format!("redis://:pw@127.0.0.1:{port}/99"),
        format!("redis://127.0.0.1:{port}/16"),
    ] {
        let out = redlock()
            .args(["-u", &url, "acquire", "k"])
            .env("REDLOCK_PASSWORD", "pw")
            .run()
            .expect(2);
        assert_one_error_line(&out);
        assert!(out.stderr.contains("no database"), "{out}");
        assert!(!out.stderr.contains("start redis-server"), "{out}");
    }
    for url in [
        "redis://127.0.0.1:0",
        "redis://:pw@localhost:0/1",
        "rediss://127.0.0.1:0",
    ] {
        let out = redlock().args(["-u", url, "acquire", "k"]).run().expect(2);
        assert_one_error_line(&out);
        assert!(out.stderr.contains("port 0"), "{out}");
        assert!(!out.stderr.contains("start redis-server"), "{out}");
        assert!(!out.stderr.contains("pw"), "{out}");
    }
}

/// A TLS server whose certificate is switched, once it runs (the fixture checks it with the
/// good one), to `cert`/`key`.
fn tls_server_presenting(certs: &Arc<Certs>, cert: &str, key: &str) -> Option<RedisServer> {
    let redis = RedisServer::builder()
        .tls(Arc::clone(certs), false)
        .start()?;
    let cert = certs.path(cert).display().to_string();
    let key = certs.path(key).display().to_string();
    let _: () = redis.query(&[
        "CONFIG",
        "SET",
        "tls-cert-file",
        &cert,
        "tls-key-file",
        &key,
    ]);
    Some(redis)
}

/// A certificate signed by the test CA, for `redis.example.com` only, as `other.crt`/`other.key`
/// next to the CA's files.
fn other_name_certificate(certs: &Certs) {
    let dir = certs.path("ca.crt").parent().unwrap().to_path_buf();
    let out = Command::new("sh")
        .arg("-c")
        .arg(
            "set -e
             printf 'subjectAltName=DNS:redis.example.com\\nextendedKeyUsage=serverAuth\\n' \
               > other.ext
             openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
               -keyout other.key -out other.csr -subj /CN=redis.example.com
             openssl x509 -req -in other.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
               -days 2 -extfile other.ext -out other.crt",
        )
        .current_dir(&dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `acquire` over TLS with `--tls-ca CA` (if given); must fail with 69 in one line.
fn tls_failure(redis: &RedisServer, ca: Option<&std::path::Path>) -> Output {
    let mut cmd = redis.redlock();
    if let Some(ca) = ca {
        cmd.arg("--tls-ca").arg(ca);
    }
    let out = cmd.args(["acquire", "k"]).run().expect(69);
    assert_one_error_line(&out);
    out
}

#[test]
#[cfg_attr(not(feature = "tls"), ignore = "a build without the tls feature")]
fn a_ca_certificate_presented_as_the_servers_own_is_named() {
    let certs = Arc::new(Certs::generate());
    let redis = or_skip!(tls_server_presenting(&certs, "ca.crt", "ca.key"));
    let out = tls_failure(&redis, Some(&certs.path("ca.crt")));
    for needle in ["CA certificate", "tls-cert-file"] {
        assert!(out.stderr.contains(needle), "no {needle:?}:\n{out}");
    }
    assert!(!out.stderr.contains("pass the CA that signed"), "{out}");
}

#[test]
#[cfg_attr(not(feature = "tls"), ignore = "a build without the tls feature")]
fn a_certificate_for_another_host_name_is_named() {
    let certs = Arc::new(Certs::generate());
    other_name_certificate(&certs);
    let redis = or_skip!(tls_server_presenting(&certs, "other.crt", "other.key"));
    let out = tls_failure(&redis, Some(&certs.path("ca.crt")));
    for needle in [
        "not valid for the host name",
        "redis.example.com",
        "subjectAltName",
    ] {
        assert!(out.stderr.contains(needle), "no {needle:?}:\n{out}");
    }
    assert!(!out.stderr.contains("pass the CA that signed"), "{out}");
}

#[test]
#[cfg_attr(not(feature = "tls"), ignore = "a build without the tls feature")]
fn an_unknown_issuer_asks_for_the_ca_that_signed_it() {
    let certs = Arc::new(Certs::generate());
    let redis = or_skip!(
        RedisServer::builder()
            .tls(Arc::clone(&certs), false)
            .start()
    );
    // No CA given: pass one.
    let out = tls_failure(&redis, None);
    assert!(out.stderr.contains("with --tls-ca"), "{out}");
    // The wrong CA given: it is the wrong one, whether its name is another (rustls: unknown
    // issuer) or the same, as a CA generated anew has (bad signature).
    let stranger = tempfile::tempdir().unwrap();
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args([
            "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        ])
        .args(["-subj", "/CN=another-ca"])
        .current_dir(stranger.path())
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let same_name = Certs::generate();
    for ca in [stranger.path().join("ca.crt"), same_name.path("ca.crt")] {
        let out = tls_failure(&redis, Some(&ca));
        assert!(
            out.stderr.contains("the CA in --tls-ca did not sign"),
            "{out}"
        );
    }
}

/// Every node of a quorum is checked like one server: a node that may evict locks grants
/// nothing, the others can still make a majority, and when too few are left the refusal is the
/// error (2).
#[test]
fn each_quorum_node_is_checked() {
    let nodes = or_skip!(crate::common::nodes::Nodes::start(3));
    let _: () = nodes[1].query(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let _: () = nodes[2].query(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]);
    let out = nodes.redlock().args(["acquire", "k"]).run();
    let token = out.stdout.trim().to_string();
    assert_eq!(out.code(), 0, "{out}");
    assert_eq!(nodes.tokens("k"), [Some(token.clone()), None, Some(token)]);
    assert_eq!(nodes[1].dbsize(), 0, "{:?}", nodes[1].keys());
    // The volatile node is warned about, once.
    assert_eq!(out.stderr.matches(VOLATILE_WARNING).count(), 1, "{out}");
    assert!(out.stderr.contains(&nodes.url(2)), "{out}");

    let _: () = nodes[0].query(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]);
    let out = nodes.redlock().args(["acquire", "q"]).run().expect(2);
    assert!(out.stderr.contains("redlock: no quorum for 'q'"), "{out}");
    for needle in ["allkeys-lfu", "allkeys-lru", "--allow-eviction"] {
        assert!(out.stderr.contains(needle), "no {needle:?}:\n{out}");
    }
    assert_eq!(nodes.tokens("q"), [None, None, None]);
    nodes
        .redlock()
        .args(["acquire", "q", "--allow-eviction"])
        .run()
        .expect(0);
}

/// In a Redis Cluster the check runs on the master that serves the lock's slot.
#[test]
fn a_cluster_master_that_may_evict_locks_is_refused() {
    let cluster = or_skip!(crate::common::topology::Cluster::start());
    for node in cluster.nodes() {
        let _: () = node.query(&["CONFIG", "SET", "maxmemory-policy", "allkeys-random"]);
    }
    let out = cluster.redlock().args(["acquire", "k"]).run().expect(2);
    assert_one_error_line(&out);
    assert!(out.stderr.contains("allkeys-random"), "{out}");
    assert!(cluster.all_keys().is_empty(), "{:?}", cluster.all_keys());
    cluster
        .redlock()
        .args(["exec", "k", "--allow-eviction", "--", "true"])
        .run()
        .expect(0);
}

/// The replication offset in `INFO replication` (a master's own, or how far a replica got).
fn repl_offset(server: &RedisServer) -> i64 {
    let info: String = server.query(&["INFO", "replication"]);
    info.lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(-1)
}

/// `--wait-replicas` must count a write of the waiter's own made after the lock became its own
/// (WAIT counts the writes of the connection that sends it): a waiter the release granted the
/// lock to extends it on its own connection before WAIT (and its BLPOP, which popped the grant's
/// push, is such a write too). (A version whose waiter's last write was its queueing attempt,
/// which the replica had, ran the command with the replica stopped.)
#[test]
fn wait_replicas_covers_a_lock_handed_to_a_waiter() {
    let master = or_skip!(RedisServer::start());
    let replica = or_skip!(replica_of(&master, true));
    let holder = hold(&master, "k", "30s");
    let ran = master.dir().join("ran");
    let waiter = master
        .redlock()
        .args([
            "exec",
            "k",
            "--wait-replicas",
            "1",
            "--io-timeout",
            "2s",
            "--",
            "touch",
        ])
        .arg(&ran)
        .spawn_proc();
    let queue = format!("{}:q", lock_key("k"));
    assert!(
        wait_for(
            || master.query::<i64>(&["ZCARD", &queue]) == 1,
            Duration::from_secs(15)
        ),
        "the waiter never queued"
    );
    let written = repl_offset(&master);
    assert!(
        wait_for(|| repl_offset(&replica) >= written, Duration::from_secs(15)),
        "the replica never caught up"
    );
    replica.pause();
    release(&master, "k", &holder);
    let out = waiter.finish(Duration::from_secs(15)).expect(69);
    assert!(out.stderr.contains("replicas"), "{out}");
    assert!(!ran.exists(), "the command ran:\n{out}");
    replica.resume();
}
