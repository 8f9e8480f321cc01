//! `acquire --while-pid` as an adversarial review attacked it. Each test here fails on the
//! reviewed change (76494ad); see the comment above each for what it shows. Real servers, real
//! processes; every wait is on an event, with a generous bound.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::keeper::{SOON, keepers_of, sleeper, token_in};
use common::proxy::Proxy;
use common::{RedisServer, Run, lock_key, wait_for};

fn exited(child: &mut std::process::Child) -> bool {
    child.try_wait().unwrap().is_some()
}

/// Exclusion. A Redis restart (no persistence: `--save ''`) loses the lock while PID runs. The
/// keeper's next renewal finds no key, less than a TTL after its last success, and no forced
/// release: it concludes "released by its owner" and ends quietly. PID is not told, and anyone
/// can take the lock beside it. (The README lists "no key at a renewal" as a loss.) The same
/// happens after FLUSHALL, an eviction, an admin's DEL, or a failover to a replica that lacked
/// the write.
#[test]
fn a_restart_that_loses_the_lock_is_a_loss_not_a_release() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let mut pid = sleeper();
    let out = redis
        .redlock()
        .args(["acquire", "k", "--ttl", "3s", "--while-pid"])
        .arg(pid.id().to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(keepers_of(pid.id()).len(), 1);
    redis.kill();
    redis.restart();
    // Either PID was told (SIGTERM, the default --on-lost), or the keeper put the lock back: the
    // lock must not be free for someone else while PID runs on untold.
    let told = wait_for(|| exited(&mut pid) || keepers_of(pid.id()).is_empty(), SOON);
    assert!(told, "the keeper neither ended nor told its pid");
    let pid_ran_on = !exited(&mut pid);
    let free = redis.get(&lock_key("k")).is_none();
    let _ = pid.kill();
    let _ = pid.wait();
    assert!(
        !(pid_ran_on && free),
        "the keeper ended quietly (\"released by its owner\"): the lock is free while its pid \
         runs on, untold"
    );
}

/// Hang. `out=$(f 2>&1)` where `f` takes the lock for the shell (`T=$(redlock acquire ...
/// --while-pid $$)`): the keeper's stderr is the outer capture's pipe (not the same open file as
/// its stdout, the inner capture), so the outer capture lasts until the keeper ends, which waits
/// for the shell, which waits for the capture. Same with `{ ...; } 2>&1 | tee log`.
#[test]
fn a_capture_of_stderr_around_the_acquire_returns_while_the_pid_lives() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out");
    let script = format!(
        "out=$( {{ T=$(redlock acquire k --while-pid $$) || exit; echo \"$T\"; }} 2>&1 )
         echo \"$out\" >'{}'
         exec sleep 1000",
        file.display()
    );
    let proc = redis.sh(&script).spawn_proc();
    let returned = wait_for(|| file.exists(), SOON);
    let id = proc.id();
    proc.signal(libc::SIGKILL);
    let _ = proc.finish(SOON);
    assert!(wait_for(|| keepers_of(id).is_empty(), SOON));
    assert!(
        returned,
        "the capture did not return: the keeper holds its pipe open (as its stderr)"
    );
}

/// Liveness. `--password-file <(echo pw)`: acquire reads the pipe, the keeper opens
/// /dev/fd/63 again, finds it empty ("--password-file /dev/fd/63 is empty") and cannot start:
/// acquire fails (exit 74). The keeper should get the password acquire already read (on its
/// private brief pipe), not read the file again.
#[test]
fn a_password_file_from_a_process_substitution_works() {
    let Some(redis) = RedisServer::builder().password("s3cr3t").start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (file, script) = (dir.path().join("token"), dir.path().join("s.bash"));
    std::fs::write(
        &script,
        format!(
            "redlock acquire k --while-pid $$ --password-file <(echo s3cr3t) >'{}' || \
             {{ echo \"failed $?\" >'{}'; exit 1; }}\nexec sleep 1000\n",
            file.display(),
            file.display()
        ),
    )
    .unwrap();
    let proc = redis
        .sh(&format!("exec bash '{}'", script.display()))
        .spawn_proc();
    let token = token_in(&file);
    let id = proc.id();
    proc.signal(libc::SIGKILL);
    let out = proc.finish(SOON);
    assert!(wait_for(|| keepers_of(id).is_empty(), SOON));
    assert!(!token.starts_with("failed"), "acquire {token}\n{out}");
}

/// Wrong output. A zombie has ended (its pidfd is readable at once): acquire takes the lock,
/// prints a token and exits 0, and the keeper releases it at once. It should be refused like a
/// pid with no process (exit 2, nothing written to Redis).
#[test]
fn a_zombie_pid_is_refused() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let zfile = dir.path().join("zombie");
    // `sleep 0`'s parent becomes `sleep 1000`, which never reaps it (no other command runs in
    // between: the shell would reap it while waiting for that one).
    let script = format!("sleep 0 & echo $! >'{}'; exec sleep 1000", zfile.display());
    let proc = redis.sh(&script).spawn_proc();
    let zombie = token_in(&zfile);
    let state = format!("/proc/{zombie}/stat");
    assert!(wait_for(
        || std::fs::read_to_string(&state).is_ok_and(|s| s.contains(") Z ")),
        SOON
    ));
    let out = redis
        .redlock()
        .args(["acquire", "k", "--while-pid", &zombie])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    proc.signal(libc::SIGKILL);
    let _ = proc.finish(SOON);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a zombie was taken for a live process: printed {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Liveness / leftover. acquire killed (SIGKILL; SIGINT without a handler alike) while it waits
/// for the keeper's word: the keeper starts anyway, its readiness byte falls on a closed pipe
/// (ignored), and it keeps a lock whose token nobody has for as long as PID lives (for `$$`, the
/// whole script; a retry of the acquire then waits on it). The keeper should give the lock back
/// when nobody reads its word.
#[test]
fn an_acquire_killed_while_waiting_for_the_keeper_leaves_no_keeper() {
    let Some(redis) = RedisServer::builder().password("s3cr3t").start() else {
        return;
    };
    let proxy = Proxy::to(redis.port());
    // Every AUTH (acquire's, then the keeper's) a second late: the keeper is slow to say it runs.
    proxy.delay_matching("AUTH", Duration::from_secs(1), 10);
    let mut pid = sleeper();
    let mut acquire = redis.redlock();
    acquire
        .env("REDLOCK_PASSWORD", "s3cr3t")
        .args(["--url", &proxy.url(), "--connect-timeout", "20s"])
        .args(["acquire", "k", "--ttl", "30s", "--while-pid"])
        .arg(pid.id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut acquire = acquire.spawn().unwrap();
    let started = wait_for(|| !keepers_of(pid.id()).is_empty(), SOON);
    let _ = acquire.kill();
    let _ = acquire.wait();
    assert!(started, "no keeper started");
    let gone = wait_for(
        || keepers_of(pid.id()).is_empty() && redis.get(&lock_key("k")).is_none(),
        SOON,
    );
    let _ = pid.kill();
    let _ = pid.wait();
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
    assert!(
        gone,
        "a keeper holds a lock whose token nobody received, for as long as its pid lives"
    );
}

/// Leftover. The keeper inherits every descriptor of acquire's caller that is not
/// close-on-exec (a flock'd `3>file`, an outer pipe on fd 5, ...), and holds it as long as PID
/// lives: here fd 5, the write end of a pipe the test reads, never reaches EOF.
#[test]
fn the_keeper_inherits_no_descriptor_but_its_own() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    let pid = sleeper();
    let script = format!(
        "redlock acquire k --while-pid {} 5>&1 >'{}' 2>/dev/null; exit 0",
        pid.id(),
        file.display()
    );
    let mut sh = redis.sh(&script);
    sh.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = sh.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        let _ = tx.send(());
    });
    token_in(&file);
    let _ = child.wait();
    let eof = rx.recv_timeout(SOON).is_ok();
    let mut pid = pid;
    let _ = pid.kill();
    let _ = pid.wait();
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
    assert!(eof, "the keeper held the caller's fd 5 (a pipe) open");
}

/// Cosmetic guard: what held — the keeper's command line and environment carry no password
/// from the URL (kept here as a regression test; it passes).
#[test]
fn no_password_from_the_url_in_the_keepers_argv_or_environ() {
    let Some(redis) = RedisServer::builder().password("s3cr3tpw").start() else {
        return;
    };
    let mut pid = sleeper();
    let url = format!("redis://:s3cr3tpw@127.0.0.1:{}", redis.port());
    let out = redis
        .redlock()
        .args(["--url", &url, "acquire", "k", "--while-pid"])
        .arg(pid.id().to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let keepers = keepers_of(pid.id());
    assert_eq!(keepers.len(), 1);
    for what in ["cmdline", "environ"] {
        let raw = std::fs::read(format!("/proc/{}/{what}", keepers[0])).unwrap();
        assert!(
            !String::from_utf8_lossy(&raw).contains("s3cr3tpw"),
            "the password is in the keeper's {what}"
        );
    }
    let _ = pid.kill();
    let _ = pid.wait();
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
    assert!(wait_for(|| redis.get(&lock_key("k")).is_none(), SOON));
}

/// What held: on a Cluster, a lock on a master that is not the seed is renewed past several
/// TTLs, `release` ends the keeper at once (the announcement reaches it), and nothing is left.
#[test]
fn on_a_cluster_the_keeper_renews_and_hears_the_release() {
    let Some(cluster) = common::topology::Cluster::start() else {
        return;
    };
    let names = cluster.names_on_each_node("job");
    let name = &names[2];
    let node = &cluster.nodes()[2];
    let mut pid = sleeper();
    let out = cluster
        .redlock()
        .args(["acquire", name, "--ttl", "1s", "--while-pid"])
        .arg(pid.id().to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let started = std::time::Instant::now();
    assert!(wait_for(
        || {
            assert_eq!(node.get(&lock_key(name)).as_deref(), Some(token.as_str()));
            started.elapsed() >= Duration::from_millis(3500)
        },
        Duration::from_secs(30)
    ));
    let all: Vec<&RedisServer> = cluster.nodes().iter().collect();
    common::wait_subscribed(&all, name);
    let released = std::time::Instant::now();
    cluster
        .redlock()
        .args(["release", name, &token])
        .run()
        .expect(0);
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
    // Heard, not found by a renewal (TTL/3 = 333ms).
    assert!(
        released.elapsed() < Duration::from_millis(300),
        "{:?}",
        released.elapsed()
    );
    assert!(!exited(&mut pid), "the pid was signalled");
    let _ = pid.kill();
    let _ = pid.wait();
    assert_eq!(node.get(&lock_key(name)), None);
}

/// Wrong output / liveness. PID ends while `acquire --wait` waits in the queue: acquire waits on
/// (first in line, delaying whoever queued behind it), takes the lock when it comes free, the
/// keeper releases it at once, and acquire exits 0 with a token for a lock nobody holds. acquire
/// has the pidfd: it should leave the queue when PID ends (exit non-zero, no token).
#[test]
fn a_pid_that_ends_while_acquire_waits_in_the_queue_gets_no_token() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    redis
        .redlock()
        .args(["acquire", "k", "--ttl", "3s"])
        .run()
        .expect(0);
    let mut pid = sleeper();
    let mut waiter = redis.redlock();
    waiter
        .args(["acquire", "k", "--wait", "30s", "--while-pid"])
        .arg(pid.id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let waiter = waiter.spawn().unwrap();
    assert!(
        wait_for(|| redis.blocked_clients() >= 1, SOON),
        "not queued"
    );
    let _ = pid.kill();
    let _ = pid.wait();
    let out = waiter.wait_with_output().unwrap();
    assert!(wait_for(|| keepers_of(pid.id()).is_empty(), SOON));
    assert!(
        !out.status.success(),
        "acquire exited 0 with token {:?} for a pid that had ended while it waited",
        String::from_utf8_lossy(&out.stdout)
    );
}
