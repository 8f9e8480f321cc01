//! `--cluster`: redlock on a three-master Redis Cluster built by the test.
//!
//! Lock names are chosen so that their slots are on different masters, and the seed URL is always
//! node 0, so most commands must find a lock on a node they were not pointed at. What a command
//! left behind is read on each node separately (SCAN is per node), which shows both that the keys
//! are there and that all keys of one lock share one node.

use std::time::{Duration, Instant};

use crate::common::topology::Cluster;
use crate::common::*;
use crate::support::exec::{EVENT, child_env, done, lock_state, wait_ready, waiter};
use serde_json::Value;

fn queue_key(name: &str) -> String {
    format!("{}:q", lock_key(name))
}

/// `acquire NAME --ttl 60s -n` through the seed node; returns the token.
fn acquire(cluster: &Cluster, name: &str) -> String {
    let token = cluster
        .redlock()
        .args(["acquire", name, "--ttl", "60s", "-n"])
        .run()
        .ok();
    assert!(is_token(&token), "{token:?}");
    token
}

/// Asserts that every key of `keys` is in one slot and stored on node `owner` only, and that
/// `owner` serves that slot.
#[track_caller]
fn assert_on_one_node(cluster: &Cluster, keys: &[String], owner: usize) {
    let slot = cluster.slot(&keys[0]);
    for key in keys {
        assert_eq!(
            cluster.slot(key),
            slot,
            "{key} is not in the slot of {}",
            keys[0]
        );
        assert_eq!(cluster.owner(key), owner, "{key}");
        assert_eq!(
            cluster.holders(key),
            [owner],
            "{key} is not (only) on node {owner}: {:?}",
            cluster.all_keys()
        );
    }
}

/// The lock names in the table printed by `status`, in order.
fn listed(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

/// The fence in a waiter's `fence N` line.
fn second_fence(stdout: &str) -> i64 {
    stdout
        .strip_prefix("fence ")
        .and_then(|f| f.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("not a fence line: {stdout:?}"))
}

#[test]
fn acquire_extend_status_and_release_work_on_every_master() {
    let cluster = or_skip!(Cluster::start());
    let names = cluster.names_on_each_node("job");
    let tokens: Vec<String> = names.iter().map(|n| acquire(&cluster, n)).collect();
    let mut fences = Vec::new();
    for (i, (name, token)) in names.iter().zip(&tokens).enumerate() {
        let node = &cluster.nodes()[i];
        assert_eq!(node.get(&lock_key(name)).as_ref(), Some(token), "{name}");
        let meta = node.meta(name);
        // A first fence is the master's clock in microseconds at the acquisition.
        let fence: i64 = meta["fence"].parse().unwrap();
        assert_eq!(
            fence / 1000,
            meta["acquired_ms"].parse::<i64>().unwrap(),
            "{meta:?}"
        );
        fences.push(fence);
        assert_eq!(&meta["token"], token, "{name}: {meta:?}");
        assert_on_one_node(&cluster, &[lock_key(name), meta_key(name)], i);
    }
    assert_eq!(cluster.all_keys().len(), 6, "{:?}", cluster.all_keys());

    // A busy lock on another master than the seed is refused like on one server.
    let out = cluster
        .redlock()
        .args(["acquire", &names[2], "-n"])
        .run()
        .expect(1);
    assert!(out.stderr.contains("busy"), "{out}");

    // status without names looks at every master, not only the seed.
    let out = cluster.redlock().arg("status").run().expect(0);
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(listed(&out.stdout), sorted, "{out}");
    for token in &tokens {
        assert!(out.stdout.contains(&token[..8]), "{out}");
    }
    let out = cluster.redlock().args(["status", "--json"]).run().expect(0);
    let all: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(all.len(), 3, "{out}");
    for lock in &all {
        let i = names
            .iter()
            .position(|n| lock["key"] == n.as_str())
            .unwrap();
        assert_eq!(lock["held"], true, "{lock}");
        assert_eq!(lock["fence"], fences[i], "{lock}");
        assert_eq!(lock["token_fingerprint"], &tokens[i][..8], "{lock}");
    }
    let out = cluster.redlock().arg("status").args(&names).run().expect(0);
    assert_eq!(listed(&out.stdout), names, "{out}");

    // extend reaches the lock's master.
    cluster
        .redlock()
        .args(["extend", &names[1], &tokens[1], "--ttl", "300s"])
        .run()
        .expect(0);
    let pttl = cluster.nodes()[1].pttl(&lock_key(&names[1]));
    assert!(pttl > 60_000, "not extended: pttl {pttl}");

    // Any node is a seed; REDLOCK_CLUSTER=1 is --cluster.
    for (i, (name, token)) in names.iter().zip(&tokens).enumerate() {
        let seed = cluster.url((i + 1) % 3);
        redlock()
            .args(["--cluster", "--url", &seed, "release", name, token])
            .run()
            .expect(0);
        assert_eq!(cluster.nodes()[i].get(&lock_key(name)), None, "{name}");
    }
    let out = redlock()
        .env("REDLOCK_CLUSTER", "1")
        .env("REDLOCK_URL", cluster.url(2))
        .args(["status", &names[0]])
        .run()
        .expect(1);
    assert_eq!(listed(&out.stdout), [names[0].clone()], "{out}");
    let out = cluster.redlock().args(["status", "--json"]).run().expect(0);
    assert_eq!(out.stdout.trim(), "[]", "{out}");
    let metas: Vec<(usize, String)> = (0..3).map(|i| (i, meta_key(&names[i]))).collect();
    assert_eq!(cluster.all_keys(), metas, "only the fence counters stay");

    let token = redlock()
        .env("REDLOCK_CLUSTER", "1")
        .env("REDLOCK_URL", cluster.url(0))
        .args(["acquire", &names[2], "-n"])
        .run()
        .ok();
    assert_eq!(cluster.nodes()[2].get(&lock_key(&names[2])), Some(token));
    let fence: i64 = cluster.nodes()[2].meta(&names[2])["fence"].parse().unwrap();
    assert!(fence > fences[2], "fence {fence} after {}", fences[2]);
}

/// Without --cluster the seed node answers MOVED for a lock on another master: the tests above
/// would fail if redlock ignored the flag.
#[test]
fn without_cluster_a_lock_on_another_master_is_not_taken() {
    let cluster = or_skip!(Cluster::start());
    let names = cluster.names_on_each_node("job");
    let out = redlock()
        .args(["--url", &cluster.url(0), "acquire", &names[1], "-n"])
        .run();
    assert_ne!(out.code(), 0, "{out}");
    assert_eq!(cluster.all_keys(), [], "{out}");
}

/// Renewal on a master that is not the seed: the child runs 3.5 TTLs and keeps the lock all the
/// time; without renewal the key would expire after one TTL and a competitor would get in.
#[test]
fn exec_renews_the_lock_on_its_master() {
    let cluster = or_skip!(Cluster::start());
    let name = cluster.names_on_each_node("exec")[2].clone();
    let node = &cluster.nodes()[2];
    let mut holder = cluster
        .redlock()
        .env("D", node.dir())
        .args(["exec", &name, "--ttl", "1s", "-c", &waiter()])
        .spawn_proc();
    wait_ready(node, &mut holder);
    let token = child_env(node)["REDLOCK_TOKEN"].clone();
    let fence = child_env(node)["REDLOCK_FENCE"].clone();
    assert_eq!(node.meta(&name)["fence"], fence);
    assert_on_one_node(&cluster, &[lock_key(&name), meta_key(&name)], 2);
    let ttl = Duration::from_secs(1);
    let mut con = node.cli();
    let started = Instant::now();
    let mut competitors = 0;
    let mut lowest = i64::MAX;
    // The PTTL is sampled every 10ms or so while one competitor at a time tries in the background.
    let mut competitor: Option<Proc> = None;
    while started.elapsed() < ttl.mul_f64(3.5) {
        let (held_by, pttl) = lock_state(&mut con, &name);
        assert_eq!(
            held_by.as_deref(),
            Some(token.as_str()),
            "the lock was lost after {:?} (pttl {pttl})\n--- stderr:\n{}",
            started.elapsed(),
            holder.stderr()
        );
        lowest = lowest.min(pttl);
        if competitor.as_mut().is_none_or(|c| !c.running()) {
            if let Some(c) = competitor.take() {
                let out = c.finish(EVENT).expect(1);
                assert!(out.stderr.contains("busy"), "{out}");
                competitors += 1;
            }
            competitor = Some(
                cluster
                    .redlock()
                    .args(["acquire", &name, "-n"])
                    .spawn_proc(),
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if let Some(c) = competitor.take() {
        let out = c.finish(EVENT).expect(1);
        assert!(out.stderr.contains("busy"), "{out}");
        competitors += 1;
    }
    assert!(competitors >= 3, "only {competitors} competitors in 3.5s");
    // Renewals every TTL/3 keep at least 2/3 of the TTL left (here 667ms), less what a renewal
    // may be late under load; renewing at 0.9 TTL would let it fall to 100ms each time.
    assert!(
        lowest > 667 - 300,
        "the lock's PTTL fell to {lowest}ms (TTL {ttl:?})\n--- stderr:\n{}",
        holder.stderr()
    );
    assert!(holder.running(), "the holder stopped:\n{}", holder.stderr());
    done(node);
    let out = holder.finish(EVENT).expect(0);
    assert_eq!(out.stdout, "finished\n", "{out}");
    assert_eq!(out.stderr, "", "{out}");
    assert_eq!(node.keys(), [meta_key(&name)], "not released:\n{out}");
    assert_eq!(node.meta(&name)["fence"], fence, "the lock changed hands");
}

#[test]
fn a_queued_waiter_gets_the_lock_when_the_holder_releases() {
    let cluster = or_skip!(Cluster::start());
    let name = cluster.names_on_each_node("queue")[1].clone();
    let node = &cluster.nodes()[1];
    let token = acquire(&cluster, &name);
    let first: i64 = node.meta(&name)["fence"].parse().unwrap();
    let mut waiter = cluster
        .redlock()
        .args([
            "exec",
            &name,
            "--wait",
            "30s",
            "-c",
            r#"echo "fence $REDLOCK_FENCE""#,
        ])
        .spawn_proc();
    let queued = wait_for(
        || {
            node.query::<Vec<String>>(&["ZRANGE", &queue_key(&name), "0", "-1"])
                .len()
                == 1
        },
        EVENT,
    );
    assert!(
        queued,
        "the waiter is not queued within {EVENT:?} (running: {}):\n{}\n{:?}",
        waiter.running(),
        waiter.stderr(),
        cluster.all_keys()
    );
    assert_on_one_node(
        &cluster,
        &[lock_key(&name), meta_key(&name), queue_key(&name)],
        1,
    );
    // Anything else the waiter keeps (its wake-up list) is in the same slot on the same node.
    for (i, key) in cluster.all_keys() {
        assert_eq!(i, 1, "{key} is on node {i}");
        assert_eq!(cluster.slot(&key), cluster.slot(&lock_key(&name)), "{key}");
    }
    assert!(waiter.running(), "{}", waiter.stderr());

    cluster
        .redlock()
        .args(["release", &name, &token])
        .run()
        .expect(0);
    let out = waiter.finish(EVENT).expect(0);
    assert!(second_fence(&out.stdout) > first, "after {first}:\n{out}");
    assert_eq!(cluster.all_keys(), [(1, meta_key(&name))], "{out}");
}

/// `exec` tells its command how to reach the cluster (`REDLOCK_URL`, `REDLOCK_CLUSTER`), so that
/// `redlock extend "$REDLOCK_KEY"` in the command works.
#[test]
fn a_command_under_exec_reaches_the_cluster_through_its_environment() {
    let cluster = or_skip!(Cluster::start());
    let name = cluster.names_on_each_node("env")[1].clone();
    let script = format!(
        r#"'{BIN}' extend "$REDLOCK_KEY" --ttl 120s && '{BIN}' status --json "$REDLOCK_KEY""#
    );
    let out = cluster
        .redlock()
        .args(["exec", &name, "--ttl", "30s", "-c", &script])
        .run()
        .expect(0);
    let v: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"));
    assert_eq!(v[0]["key"], name.as_str(), "{out}");
    assert_eq!(v[0]["held"], true, "{out}");
    let ttl = v[0]["ttl_ms"].as_i64().unwrap_or(0);
    assert!(ttl > 60_000, "not extended:\n{out}");
    assert_eq!(cluster.all_keys(), [(1, meta_key(&name))], "{out}");
}

/// A waiter keeps its place for as long as it waits, well past one blocking round (3s at most)
/// plus the lease margin (2s): `status` shows it queued all along, and a release wakes it at
/// once. The cluster client used to re-send a BLPOP that had timed out, so the waiter stayed
/// blocked past its lease and was dropped from the queue.
#[test]
fn a_cluster_waiter_keeps_its_place_past_its_lease() {
    let cluster = or_skip!(Cluster::start());
    let name = cluster.names_on_each_node("long")[2].clone();
    let token = cluster
        .redlock()
        .args(["acquire", &name, "--ttl", "30s"])
        .run()
        .ok();
    let first: i64 = cluster.nodes()[2].meta(&name)["fence"].parse().unwrap();
    let waiter = cluster
        .redlock()
        .args([
            "exec",
            &name,
            "--wait",
            "30s",
            "-c",
            r#"echo "fence $REDLOCK_FENCE""#,
        ])
        .spawn_proc();
    let waiters = || -> i64 {
        let out = cluster
            .redlock()
            .args(["status", &name, "--json"])
            .run()
            .expect(0);
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        v[0]["waiters"]
            .as_i64()
            .unwrap_or_else(|| panic!("no waiters:\n{out}"))
    };
    assert!(wait_for(|| waiters() == 1, EVENT), "never queued");
    let queued = Instant::now();
    let mut seen = Vec::new();
    while queued.elapsed() < Duration::from_secs(7) {
        seen.push(waiters());
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        seen.iter().all(|&w| w == 1),
        "the waiter left the queue: waiters over 7s: {seen:?}\n{}",
        waiter.stderr()
    );
    cluster
        .redlock()
        .args(["release", &name, &token])
        .run()
        .expect(0);
    let released = Instant::now();
    let out = waiter.finish(EVENT);
    let took = released.elapsed();
    let out = out.expect(0);
    assert!(second_fence(&out.stdout) > first, "after {first}:\n{out}");
    assert!(
        took < Duration::from_secs(2),
        "ran {took:?} after the release:\n{out}"
    );
}

/// `--wait-replicas` counts the replicas of the lock's own master: with a replica on one master
/// only, a lock there is confirmed at once, and a lock on a master without replicas is not (69).
/// WAIT used to go to every master and report the fewest acknowledgements, so no lock could be
/// confirmed unless every master had enough replicas.
#[test]
fn wait_replicas_counts_the_replicas_of_the_locks_master() {
    let mut cluster = or_skip!(Cluster::start());
    cluster.add_replica(1);
    let names = cluster.names_on_each_node("repl");
    let acquire = |name: &str| {
        cluster
            .redlock()
            .args([
                "--io-timeout",
                "2s",
                "acquire",
                name,
                "-n",
                "--wait-replicas",
                "1",
            ])
            .run()
    };
    let out = acquire(&names[1]);
    let elapsed = out.elapsed;
    let token = out.ok();
    assert!(is_token(&token), "{token}");
    assert!(
        elapsed < Duration::from_secs(4),
        "confirmed after {elapsed:?} (--io-timeout 2s)"
    );
    assert_eq!(
        cluster.nodes()[1].get(&lock_key(&names[1])),
        Some(token),
        "not held"
    );

    let out = acquire(&names[2]).expect(69);
    assert_one_error_line(&out);
    assert!(out.stderr.contains("replica"), "{out}");
    assert_eq!(
        cluster.nodes()[2].get(&lock_key(&names[2])),
        None,
        "not released:\n{out}"
    );
}

/// `release --force` of a lock on another master than the seed: the announcement reaches the
/// `exec` holder (subscribed on the seed: a Cluster passes PUBLISH on to every node) at once.
#[test]
fn a_forced_release_stops_an_exec_holder_at_once() {
    let cluster = or_skip!(Cluster::start());
    let name = cluster.names_on_each_node("forced")[2].clone();
    let node = &cluster.nodes()[2];
    let mut holder = cluster
        .redlock()
        .env("D", node.dir())
        .args(["exec", &name, "--ttl", "30s", "-c", &waiter()])
        .spawn_proc();
    wait_ready(node, &mut holder);
    wait_subscribed(&cluster.nodes().iter().collect::<Vec<_>>(), &name);
    let forced = Instant::now();
    cluster
        .redlock()
        .args(["release", &name, "--force"])
        .run()
        .expect(0);
    holder.wait_for_stderr("force-released", EVENT);
    let took = forced.elapsed();
    done(node);
    let out = holder.finish(EVENT).expect(75);
    assert!(took < Duration::from_secs(5), "took {took:?}:\n{out}");
    assert!(out.stderr.contains("lost the lock"), "{out}");
}

/// `status` without names reads each master's locks in pipelined batches on that master: 900
/// locks spread over the three masters (more than one batch on each) are all listed, as
/// `status NAME...` (one routed call per lock) lists them.
#[test]
fn status_of_many_locks_reads_them_on_every_master() {
    let cluster = or_skip!(Cluster::start());
    let mut pipes = vec![redis::pipe(); 3];
    let mut per_node = [0; 3];
    let mut names = Vec::new();
    let mut owners = Vec::new();
    // Each master's slots, from its own CLUSTER NODES line (`cluster.owner` asks 4 queries a key).
    let ranges: Vec<Vec<(u16, u16)>> = cluster
        .nodes()
        .iter()
        .map(|node| {
            let text: String = node.query(&["CLUSTER", "NODES"]);
            let me = text.lines().find(|l| l.contains("myself")).unwrap();
            me.split_whitespace()
                .skip(8)
                .filter(|s| !s.starts_with('['))
                .map(|s| {
                    let (a, b) = s.split_once('-').unwrap_or((s, s));
                    (a.parse().unwrap(), b.parse().unwrap())
                })
                .collect()
        })
        .collect();
    for i in 0..1800 {
        let name = format!("many-{i:04}");
        let slot = cluster.slot(&lock_key(&name));
        let owner = (0..3)
            .find(|&n| ranges[n].iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .unwrap();
        owners.push(owner);
        per_node[owner] += 1;
        pipes[owner]
            .cmd("SET")
            .arg(lock_key(&name))
            .arg(format!("{i:032x}"));
        pipes[owner]
            .cmd("HSET")
            .arg(meta_key(&name))
            .arg("token")
            .arg(format!("{i:032x}"))
            .arg("fence")
            .arg(i + 1)
            .arg("host")
            .arg(format!("h{owner}"))
            .arg("pid")
            .arg(i)
            .arg("user")
            .arg("ci");
        names.push(name);
    }
    for (node, pipe) in cluster.nodes().iter().zip(&pipes) {
        pipe.query::<()>(&mut node.cli()).unwrap();
    }
    assert!(per_node.iter().all(|&n| n > 500), "{per_node:?}");
    assert_eq!(owners[0], cluster.owner(&lock_key(&names[0])));

    let out = cluster.redlock().args(["status", "--json"]).run().expect(0);
    let all: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(all.len(), names.len());
    for (i, (lock, name)) in all.iter().zip(&names).enumerate() {
        assert_eq!(lock["key"], name.as_str(), "{lock}");
        assert_eq!(lock["fence"], i + 1, "{lock}");
        assert_eq!(
            lock["token_fingerprint"],
            &format!("{i:032x}")[..8],
            "{lock}"
        );
        let host = format!("h{}", owners[i]);
        assert_eq!(lock["holder"]["host"], host.as_str(), "{lock}");
    }
    let each = cluster
        .redlock()
        .args(["status", "--json"])
        .args(&names)
        .run()
        .expect(0);
    assert!(out.stdout == each.stdout, "--json differs:\n{out}\n{each}");
    let out = cluster.redlock().arg("status").run().expect(0);
    let each = cluster.redlock().arg("status").args(&names).run().expect(0);
    assert!(
        out.stdout == each.stdout,
        "the table differs:\n{out}\n{each}"
    );
}

/// `--slots` on a lock whose master is not the seed: its places, its marker and its records all
/// on that master, and `status` finds them there.
#[test]
fn slots_work_on_a_lock_of_another_master() {
    let cluster = or_skip!(Cluster::start());
    let name = cluster.names_on_each_node("sem").remove(2);
    let take = || {
        cluster
            .redlock()
            .args(["acquire", &name, "--slots", "2", "--ttl", "60s", "-n"])
            .run()
    };
    let first = take().ok();
    take().expect(0);
    take().expect(1);
    let slots_key = format!("{}:slots", lock_key(&name));
    assert_on_one_node(
        &cluster,
        &[lock_key(&name), meta_key(&name), slots_key.clone()],
        2,
    );
    let table = cluster.redlock().args(["status"]).run().ok();
    assert!(table.contains("2/2 held"), "{table}");
    assert!(
        table.contains(&format!("holders of {name} (--slots 2):")),
        "{table}"
    );
    cluster
        .redlock()
        .args(["release", &name, &first])
        .run()
        .expect(0);
    let out = cluster
        .redlock()
        .args([
            "exec",
            &name,
            "--slots",
            "2",
            "--",
            "sh",
            "-c",
            "echo $REDLOCK_SLOT",
        ])
        .run()
        .ok();
    assert_eq!(out, "0");
    let json: Value = serde_json::from_str(
        &cluster
            .redlock()
            .args(["status", &name, "--json"])
            .run()
            .ok(),
    )
    .unwrap();
    assert_eq!(json[0]["slots"]["held"], 1, "{json}");
    assert_eq!(json[0]["slots"]["holders"][0]["slot"], 1, "{json}");
}
