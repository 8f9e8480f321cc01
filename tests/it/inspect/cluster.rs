//! Inspection on a Redis Cluster: `status` naming the waiters, `status` without keys while a slot
//! is being moved between masters, `release --force --if-fence/--if-token`, `exec --report`,
//! `redlock log`.
//!
//! The seed URL is node 0 and the locks live on other masters, so every command must find its
//! lock through the cluster. The tests that only read and write their own locks share one cluster
//! ([`shared`]: forming one costs seconds), each with lock names of its own; the slot migration
//! changes the cluster's layout, so that test builds a cluster of its own.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::common::topology::Cluster;
use crate::common::*;
use serde_json::Value;

/// The cluster of the tests running now: started by the first that asks, dropped (its servers
/// killed) with the last `Arc`, so nothing outlives the tests; `None` when they must be skipped.
fn shared() -> Option<Arc<Cluster>> {
    static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(cluster) = slot.upgrade() {
        return Some(cluster);
    }
    let cluster = Arc::new(Cluster::start()?);
    *slot = Arc::downgrade(&cluster);
    Some(cluster)
}

/// A lock name with prefix `prefix` whose keys are on a master other than the seed (node 0);
/// returns it with that master.
fn name_off_the_seed<'c>(cluster: &'c Cluster, prefix: &str) -> (String, &'c RedisServer) {
    let name = cluster.names_on_each_node(prefix).swap_remove(1);
    let owner = cluster.owner(&lock_key(&name));
    assert_ne!(owner, 0);
    (name, &cluster.nodes()[owner])
}

/// `acquire NAME --ttl 10m -n` through the seed; returns the token.
fn acquire(cluster: &Cluster, name: &str) -> String {
    let token = cluster
        .redlock()
        .args(["acquire", name, "--ttl", "10m", "-n"])
        .run()
        .ok();
    assert!(is_token(&token), "{token:?}");
    token
}

/// `status --json ARGS...` through the seed: the array.
fn status_json(cluster: &Cluster, args: &[&str]) -> Vec<Value> {
    let out = cluster
        .redlock()
        .args(["status", "--json"])
        .args(args)
        .run();
    let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    v.as_array().unwrap_or_else(|| panic!("{out}")).clone()
}

/// The object of lock `name` in `status --json ARGS...`.
fn status_of(cluster: &Cluster, args: &[&str], name: &str) -> Value {
    let all = status_json(cluster, args);
    all.iter()
        .find(|l| l["key"] == name)
        .unwrap_or_else(|| panic!("{name} is not listed: {all:?}"))
        .clone()
}

/// Starts `redlock acquire NAME ARGS` through the seed, in a shell that stays (its pid is the
/// one the waiter's record names), and waits until `node` (the lock's master) queues it behind
/// `before` others.
fn queue_up(cluster: &Cluster, node: &RedisServer, name: &str, args: &str, before: usize) -> Proc {
    let script = format!(
        "redlock --cluster --url {} acquire {name} {args}; echo exit=$?",
        cluster.url(0)
    );
    let mut waiter = sh(&script).spawn_proc();
    let queued = wait_for(|| queue(node, name).len() > before, HANG);
    assert!(queued, "waiter {args} never queued:\n{}", waiter.stderr());
    assert!(waiter.running(), "{}", waiter.stderr());
    waiter
}

/// Fails if a cluster's `status` loses the waiters' records or their order: read by the status
/// script of a named lock, by the per-master batch without names (`--queue`, `--json`), each
/// must list both waiters, first in line first, with the pid and note each recorded.
#[test]
fn status_names_the_waiters_in_queue_order() {
    let cluster = or_skip!(shared());
    let (name, node) = name_off_the_seed(&cluster, "waited");
    let token = acquire(&cluster, &name);
    let first = queue_up(&cluster, node, &name, "--wait 5m --note 'job a'", 0);
    let second = queue_up(&cluster, node, &name, "--note job-b", 1);
    let expected = [(first.id(), "job a", false), (second.id(), "job-b", true)];

    let named = cluster.redlock().args(["status", &name]).run().expect(0);
    let all = cluster
        .redlock()
        .args(["status", "--queue"])
        .run()
        .expect(0);
    for out in [&named, &all] {
        let section = waiting_section(&out.stdout, &name);
        assert_eq!(section.len(), 3, "header and two waiters:\n{out}");
        assert!(section[0].starts_with("#  WAITER"), "{out}");
        for (i, (pid, note, forever)) in expected.into_iter().enumerate() {
            let row = &section[i + 1];
            assert!(row.starts_with(&format!("{} ", i + 1)), "{out}");
            assert!(row.contains(&format!("(pid {pid})")), "waiter {i}:\n{out}");
            assert!(row.ends_with(note), "waiter {i}:\n{out}");
            assert_eq!(row.contains("  never  "), forever, "waiter {i}:\n{out}");
        }
    }

    let named = status_of(&cluster, &[&name], &name);
    let batched = status_of(&cluster, &[], &name);
    assert_eq!(named["waiters"], 2, "{named}");
    assert_eq!(batched["queue"], named["queue"], "{batched}\n{named}");
    let queue = named["queue"]
        .as_array()
        .unwrap_or_else(|| panic!("{named}"));
    assert_eq!(queue.len(), 2, "{named}");
    for (i, (pid, note, forever)) in expected.into_iter().enumerate() {
        let waiter = &queue[i];
        assert_eq!(waiter["position"], i + 1, "{named}");
        assert_eq!(waiter["pid"], pid, "{named}");
        assert_eq!(waiter["note"], note, "{named}");
        assert_eq!(waiter["deadline_ms"].is_null(), forever, "{named}");
    }
    cluster
        .redlock()
        .args(["release", &name, &token])
        .run()
        .expect(0);
}

/// The fence and the token fingerprint of lock `name`'s holder, as `status --json` shows them.
fn seen(cluster: &Cluster, name: &str) -> (i64, String) {
    let v = status_of(cluster, &[name], name);
    let fence = v["fence"].as_i64().unwrap_or_else(|| panic!("{v}"));
    let fp = v["token_fingerprint"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"));
    (fence, fp.to_string())
}

/// Fails if a cluster's forced release ignores its condition or compares with something else
/// than what `status` shows: after a hand-over to a waiter, `--if-fence` and `--if-token` with
/// the old holder's values refuse (exit 3, naming the holder now and its fence) and leave the lock
/// to it; the new holder's fence, and its fingerprint, release.
#[test]
fn a_conditional_forced_release_refuses_after_a_hand_over() {
    let cluster = or_skip!(shared());
    let (name, node) = name_off_the_seed(&cluster, "forced");
    let token = acquire(&cluster, &name);
    let (fence, fp) = seen(&cluster, &name);
    let waiter = cluster
        .redlock()
        .args(["acquire", &name, "--ttl", "60s", "--wait", "60s"])
        .spawn_proc();
    assert!(
        wait_for(|| queue(node, &name).len() == 1, HANG),
        "the waiter never queued"
    );
    cluster
        .redlock()
        .args(["release", &name, &token])
        .run()
        .expect(0);
    let new = waiter.finish(HANG).ok();
    assert!(is_token(&new), "{new}");
    let (new_fence, new_fp) = seen(&cluster, &name);
    assert_ne!(new_fence, fence);

    for (option, old) in [("--if-fence", fence.to_string()), ("--if-token", fp)] {
        let out = cluster
            .redlock()
            .args(["release", &name, "--force", option, &old])
            .run()
            .expect(3);
        assert_one_error_line(&out);
        assert!(
            out.stderr
                .contains(&format!("not released: '{name}' is now held by"))
                && out
                    .stderr
                    .contains(&format!("with fence {new_fence} (token {new_fp}…)")),
            "{option}:\n{out}"
        );
        assert_eq!(node.get(&lock_key(&name)), Some(new.clone()), "{out}");
    }

    let out = cluster
        .redlock()
        .args(["release", &name, "--force", "--if-fence"])
        .arg(new_fence.to_string())
        .run()
        .expect(0);
    assert!(
        out.stderr.contains(&format!("force-released '{name}'")),
        "{out}"
    );
    assert_eq!(node.get(&lock_key(&name)), None, "{out}");

    acquire(&cluster, &name);
    let (_, fp) = seen(&cluster, &name);
    cluster
        .redlock()
        .args(["release", &name, "--force", "--if-token", &fp])
        .run()
        .expect(0);
    assert_eq!(node.get(&lock_key(&name)), None);
}

/// Fails if `exec --report -` on a cluster reports another fence than the one the command got
/// (and that `status` then shows for the last holder), or no line at all.
#[test]
fn exec_reports_the_fence_of_its_run() {
    let cluster = or_skip!(shared());
    let (name, _) = name_off_the_seed(&cluster, "reported");
    let out = cluster
        .redlock()
        .args([
            "exec",
            &name,
            "--report",
            "-",
            "-c",
            r#"echo "$REDLOCK_FENCE""#,
        ])
        .run()
        .expect(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let fence: i64 = lines[0].parse().unwrap_or_else(|e| panic!("{e}:\n{out}"));
    let report: Value = serde_json::from_str(lines[1]).unwrap_or_else(|e| panic!("{e}:\n{out}"));
    assert_eq!(report["key"], name.as_str(), "{out}");
    assert_eq!(report["acquired"], true, "{out}");
    assert_eq!(report["fence"], fence, "{out}");
    assert_eq!(report["exit"], 0, "{out}");
    assert_eq!(report["lost"], false, "{out}");
    let last = status_of(&cluster, &[&name], &name);
    assert_eq!(last["state"], "free", "{last}");
    assert_eq!(last["last_holder"]["fence"], fence, "{last}");
}

/// `CLUSTER MYID` of a node.
/// A lock's history is kept on its own master and read through the seed, `--follow` included.
#[test]
fn log_reads_the_history_on_the_locks_master() {
    let cluster = or_skip!(shared());
    let (name, master) = name_off_the_seed(&cluster, "history");
    cluster
        .redlock()
        .args(["exec", &name, "--", "sh", "-c", "exit 5"])
        .run()
        .expect(5);
    let n: i64 = master.query(&["XLEN", &format!("{}:log", lock_key(&name))]);
    assert_eq!(n, 2);
    let follow = cluster
        .redlock()
        .args(["log", &name, "--json", "--follow"])
        .spawn_proc();
    let lines = |p: &Proc| p.stdout().matches('\n').count();
    assert!(
        wait_for(|| lines(&follow) == 2, HANG),
        "{}",
        follow.stderr()
    );
    let token = acquire(&cluster, &name);
    assert!(
        wait_for(|| lines(&follow) == 3, HANG),
        "{}",
        follow.stderr()
    );
    follow.signal(libc::SIGTERM);
    let out = follow.finish(HANG);
    assert_eq!(out.code(), 143, "{out}");
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["acquired", "released", "acquired"], "{out}");
    assert_eq!(events[1]["status"], 5);
    assert_eq!(events[2]["token"], token[..8]);
    cluster
        .redlock()
        .args(["release", &name, &token])
        .run()
        .expect(0);
}

fn id(node: &RedisServer) -> String {
    node.query(&["CLUSTER", "MYID"])
}

/// Fails if `status` without keys drops or fails on a lock whose slot moved since the scan. The
/// slot of one held lock is left half-way through a migration from its master to another, its
/// keys already moved (CLUSTER SETSLOT IMPORTING/MIGRATING, then MIGRATE): the new master's SCAN
/// finds the lock, but its batch (EVALSHA without ASKING) is answered MOVED, since the slot is
/// not its own yet; the old master no longer has it. The lock must be read again through the
/// cluster connection, following the ASK redirection, and listed with every other lock (as it
/// is when named); and once the migration is done, listed again.
#[test]
fn status_lists_a_lock_whose_slot_is_moving_to_another_master() {
    let cluster = or_skip!(Cluster::start());
    let names = cluster.names_on_each_node("moving");
    let tokens: Vec<String> = names.iter().map(|n| acquire(&cluster, n)).collect();
    let (from, to) = (&cluster.nodes()[1], &cluster.nodes()[2]);
    let moving = &names[1];
    let key = lock_key(moving);
    assert_eq!(cluster.owner(&key), 1);
    // The status script names four keys; the importing master serves it (with ASKING) only if it
    // has all of them, so the lock gets a queue and a live lease (until the test is over), as a
    // waiter would have made them.
    let waiter = "0123456789abcdef0123456789abcdef";
    let until = (from.now_ms() + 3_600_000).to_string();
    from.query::<i64>(&["ZADD", &format!("{key}:q"), "1", waiter]);
    from.query::<i64>(&["HSET", &format!("{key}:leases"), waiter, &until]);

    let slot = cluster.slot(&key).to_string();
    let _: () = to.query(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &id(from)]);
    let _: () = from.query(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &id(to)]);
    let keys: Vec<String> = from.query(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
    assert!(keys.len() >= 4, "{keys:?}");
    let port = to.port().to_string();
    let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "10000", "KEYS"];
    migrate.extend(keys.iter().map(String::as_str));
    let _: () = from.query(&migrate);
    assert_eq!(cluster.holders(&key), [2], "{:?}", cluster.all_keys());

    let listed = |when: &str| {
        let all = status_json(&cluster, &[]);
        let got: Vec<(&str, &str)> = all
            .iter()
            .map(|l| {
                (
                    l["key"].as_str().unwrap_or("?"),
                    l["token_fingerprint"].as_str().unwrap_or("-"),
                )
            })
            .collect();
        let mut want: Vec<(&str, &str)> = names
            .iter()
            .zip(&tokens)
            .map(|(n, t)| (n.as_str(), &t[..8]))
            .collect();
        want.sort();
        assert_eq!(got, want, "{when}: {all:?}");
        let moved = all.iter().find(|l| l["key"] == moving.as_str()).unwrap();
        assert_eq!(moved["waiters"], 1, "{when}: {moved}");
    };
    listed("while the slot is moving");
    // Named, the lock is read through the cluster connection alone, which must follow the ASK.
    let named = status_of(&cluster, &[moving], moving);
    assert_eq!(named["token_fingerprint"], &tokens[1][..8], "{named}");

    // The new master first, then the old one, as `redis-cli --cluster reshard` does.
    for node in [to, from, &cluster.nodes()[0]] {
        let _: () = node.query(&["CLUSTER", "SETSLOT", &slot, "NODE", &id(to)]);
    }
    assert!(
        wait_for(|| cluster.owner(&key) == 2, HANG),
        "the slot did not move"
    );
    listed("after the slot moved");
}
