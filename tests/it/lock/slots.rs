//! Locks with more than one holder: counting semaphores (`--slots N`), pools (`--pool`) and shared
//! locks (`--shared`), with the guarantees of the exclusive lock: a limit that holds under
//! contention, crashed holders dropping out within their TTL, fences that keep increasing, first
//! come first served, and nothing left behind.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;

fn slots_key(name: &str) -> String {
    format!("{}:slots", lock_key(name))
}

/// The fences of the lock's `acquired` events, in the order the history has them (the order in
/// which the scripts granted them).
fn acquired_fences(redis: &RedisServer, name: &str) -> Vec<i64> {
    let out = redis
        .redlock()
        .args(["log", name, "--json", "--limit", "100000"])
        .run()
        .ok();
    out.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["event"] == "acquired")
        .map(|v| v["fence"].as_str().unwrap().parse().unwrap())
        .collect()
}

/// A critical section for `sh`: under flock, count this holder in (`active`, and its
/// `REDLOCK_SLOT` or `REDLOCK_RESOURCE` in `held`), note any overlap of places (`bad`) and the
/// most holders seen (`max`); then sleep `secs` and count it out.
fn section(place: &str, secs: &str) -> String {
    format!(
        r#"flock lk sh -c '
          a=$(($(cat active) + 1)); echo $a > active
          [ $a -gt $(cat max) ] && echo $a > max
          grep -qx "{place}" held && echo "{place} twice" >> bad
          echo "{place}" >> held; echo "{place}" >> seen'
        sleep {secs}
        flock lk sh -c '
          echo $(($(cat active) - 1)) > active
          grep -vx "{place}" held > held.new; mv held.new held'"#
    )
}

fn prepare(dir: &Path) {
    for (file, text) in [
        ("active", "0\n"),
        ("max", "0\n"),
        ("held", ""),
        ("seen", ""),
    ] {
        std::fs::write(dir.join(file), text).unwrap();
    }
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_default()
}

#[test]
fn twelve_processes_never_hold_more_than_three_slots() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let cs = section("$REDLOCK_SLOT", "0.05");
    let script = format!(
        r#"i=0
        while [ "$i" -lt 10 ]; do
          redlock exec sem --slots 3 -- sh -c '{}' || exit 1
          i=$((i + 1))
        done"#,
        cs.replace('\'', r"'\''")
    );
    let loops: Vec<Proc> = (0..12)
        .map(|_| redis.sh(&script).current_dir(dir.path()).spawn_proc())
        .collect();
    for l in loops {
        l.finish(Duration::from_secs(300)).expect(0);
    }
    assert_eq!(read(dir.path(), "bad"), "", "two holders had the same slot");
    assert_eq!(
        read(dir.path(), "max").trim(),
        "3",
        "never 3 at once, or more"
    );
    assert_eq!(read(dir.path(), "active").trim(), "0");
    let seen = read(dir.path(), "seen");
    assert_eq!(seen.lines().count(), 120, "a round did not complete");
    let slots: BTreeSet<&str> = seen.lines().collect();
    assert_eq!(slots, BTreeSet::from(["0", "1", "2"]));
    let fences = acquired_fences(&redis, "sem");
    assert_eq!(fences.len(), 120);
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences not strictly increasing in acquisition order: {fences:?}"
    );
    assert_eq!(redis.keys(), [meta_key("sem")], "every place given back");
}

/// The control for the test above: the same loops with a limit of 4 are seen holding 4 at
/// once, so the count in the critical section would catch a limit that did not hold.
#[test]
fn the_count_of_holders_sees_a_fourth() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    // Each holder waits until 4 are in: with a limit of 4 that must happen. The count is
    // replaced by a rename, never rewritten in place: a reader outside the flock could see the
    // file empty between the truncation and the write, and stop waiting early.
    let script = r#"redlock exec sem --slots 4 -- sh -c '
        flock lk sh -c "echo \$((\$(cat active) + 1)) > active.\$\$ && mv active.\$\$ active"
        i=0; while [ "$(cat active)" -lt 4 ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
        cat active >> seen'"#;
    let loops: Vec<Proc> = (0..4)
        .map(|_| redis.sh(script).current_dir(dir.path()).spawn_proc())
        .collect();
    for l in loops {
        l.finish(HANG).expect(0);
    }
    assert_eq!(
        read(dir.path(), "seen").lines().collect::<Vec<_>>(),
        ["4"; 4]
    );
}

#[test]
fn killed_holders_free_their_slots_and_none_leak() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("holding")).unwrap();
    // 50 holders in turn, 3 at a time, each killed (SIGKILL: no release) once it holds its slot.
    let holders: Vec<Proc> = (0..50)
        .map(|_| {
            redis
                .redlock()
                .args(["exec", "sem", "--slots", "3", "--ttl", "1s", "--"])
                .args(["sh", "-c", "echo > holding/$PPID; exec sleep 60"])
                .current_dir(dir.path())
                .spawn_proc()
        })
        .collect();
    let mut killed = 0;
    let started = Instant::now();
    while killed < 50 {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "only {killed} holders got a slot; a killed one's slot leaked?"
        );
        for entry in std::fs::read_dir(dir.path().join("holding")).unwrap() {
            let entry = entry.unwrap();
            let pid: u32 = entry.file_name().to_str().unwrap().parse().unwrap();
            signal(pid, libc::SIGKILL);
            std::fs::remove_file(entry.path()).unwrap();
            killed += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for h in holders {
        let out = h.finish(HANG);
        assert_eq!(out.status.code(), None, "not killed:\n{out}");
    }
    // Within a TTL of the last kill, all three slots are free again.
    for _ in 0..3 {
        redis
            .redlock()
            .args(["acquire", "sem", "--slots", "3", "--wait", "5s"])
            .run()
            .expect(0);
    }
    let live: std::collections::HashMap<String, String> =
        redis.query(&["HGETALL", &slots_key("sem")]);
    assert_eq!(live.len(), 3, "{live:?}");
}

#[test]
fn a_killed_holder_frees_its_slot_within_its_ttl() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let mut holder = redis
        .redlock()
        .args(["exec", "sem", "--slots", "1", "--ttl", "2s", "--"])
        .args(["sh", "-c", "echo $PPID > pid; exec sleep 60"])
        .current_dir(dir.path())
        .spawn_proc();
    assert!(wait_for(|| !read(dir.path(), "pid").is_empty(), HANG));
    let pid: u32 = read(dir.path(), "pid").trim().parse().unwrap();
    signal(pid, libc::SIGKILL);
    let killed = Instant::now();
    let next = redis
        .redlock()
        .args(["acquire", "sem", "--slots", "1", "--wait", "30s"])
        .run()
        .ok();
    assert!(!next.is_empty());
    let waited = killed.elapsed();
    assert!(
        waited < Duration::from_secs(2) + Duration::from_millis(1500),
        "the slot came free {waited:?} after the kill (TTL 2s)"
    );
    assert!(!holder.running());
}

#[test]
fn a_pool_hands_out_each_resource_to_one_holder_at_a_time() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let cs = section("$REDLOCK_RESOURCE", "0.03");
    let script = format!(
        r#"i=0
        while [ "$i" -lt 5 ]; do
          redlock exec devices --pool gpu-a,gpu-b,gpu-c -- sh -c '{}' || exit 1
          i=$((i + 1))
        done"#,
        cs.replace('\'', r"'\''")
    );
    let loops: Vec<Proc> = (0..6)
        .map(|_| redis.sh(&script).current_dir(dir.path()).spawn_proc())
        .collect();
    for l in loops {
        l.finish(Duration::from_secs(240)).expect(0);
    }
    assert_eq!(read(dir.path(), "bad"), "", "a resource had two holders");
    let seen = read(dir.path(), "seen");
    assert_eq!(seen.lines().count(), 30);
    let names: BTreeSet<&str> = seen.lines().collect();
    assert_eq!(names, BTreeSet::from(["gpu-a", "gpu-b", "gpu-c"]));
}

#[test]
fn the_resource_a_holder_gets_is_the_one_status_shows() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let first = redis
        .redlock()
        .args([
            "acquire",
            "devices",
            "--pool",
            "gpu-a,gpu-b",
            "--format",
            "env",
        ])
        .run()
        .ok();
    assert!(
        first.contains("REDLOCK_SLOT=0\nREDLOCK_RESOURCE=gpu-a"),
        "{first}"
    );
    // The second holder gets gpu-b and looks itself up in `status --json`.
    redis
        .redlock()
        .args(["exec", "devices", "--pool", "gpu-a,gpu-b", "--"])
        .args([
            "sh",
            "-c",
            &format!(
                r#"echo "$REDLOCK_RESOURCE $REDLOCK_TOKEN" > me
                {BIN} status devices --json --show-token > status"#
            ),
        ])
        .current_dir(dir.path())
        .run()
        .expect(0);
    let me = read(dir.path(), "me");
    let (resource, token) = me.trim().split_once(' ').unwrap();
    assert_eq!(resource, "gpu-b");
    let status: serde_json::Value = serde_json::from_str(&read(dir.path(), "status")).unwrap();
    let slots = &status[0]["slots"];
    assert_eq!(slots["kind"], "pool", "{status}");
    assert_eq!(slots["held"], 2, "{status}");
    let mine = slots["holders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["token"] == token)
        .unwrap_or_else(|| panic!("{token} not in {status}"));
    assert_eq!(mine["resource"], resource);
    assert_eq!(mine["slot"], 1);
}

/// 8 reader loops and a writer loop: readers share, the writer is alone, and it is not starved.
#[test]
fn readers_share_the_writer_is_alone_and_not_starved() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("log"), "").unwrap();
    // Each line: what happened and when (ns); appends of one short line do not interleave.
    let reader = r#"i=0
        while [ "$i" -lt 12 ]; do
          redlock exec rw --shared -- sh -c 'echo "R+ $(date +%s%N)" >> log; sleep 0.2
            echo "R- $(date +%s%N)" >> log' || exit 1
          i=$((i + 1))
        done"#;
    let writer = r#"sleep 0.5; i=0
        while [ "$i" -lt 4 ]; do
          t=$(date +%s%N)
          redlock exec rw -- sh -c "echo \"W+ \$(date +%s%N) $t\" >> log; sleep 0.05
            echo \"W- \$(date +%s%N)\" >> log" || exit 1
          i=$((i + 1))
        done"#;
    let mut loops: Vec<Proc> = (0..8)
        .map(|_| redis.sh(reader).current_dir(dir.path()).spawn_proc())
        .collect();
    loops.push(redis.sh(writer).current_dir(dir.path()).spawn_proc());
    for l in loops {
        l.finish(Duration::from_secs(240)).expect(0);
    }
    let log = read(dir.path(), "log");
    let mut events: Vec<(u128, &str, Option<u128>)> = log
        .lines()
        .map(|l| {
            let mut f = l.split(' ');
            let what = f.next().unwrap();
            let at = f.next().unwrap().parse().unwrap();
            (at, what, f.next().map(|t| t.parse().unwrap()))
        })
        .collect();
    events.sort();
    let (mut readers, mut writers, mut most_readers) = (0, 0, 0);
    let mut longest_wait = Duration::ZERO;
    for (at, what, asked) in &events {
        match *what {
            "R+" => readers += 1,
            "R-" => readers -= 1,
            "W+" => {
                writers += 1;
                let waited = Duration::from_nanos((at - asked.unwrap()) as u64);
                longest_wait = longest_wait.max(waited);
            }
            "W-" => writers -= 1,
            other => panic!("{other}"),
        }
        assert!(
            writers == 0 || (writers == 1 && readers == 0),
            "the writer overlapped {readers} readers (or another writer) at {at}:\n{log}"
        );
        most_readers = most_readers.max(readers);
    }
    assert_eq!(events.len(), 2 * (8 * 12 + 4));
    assert!(most_readers >= 2, "readers never overlapped");
    // Starved, the writer would wait for the readers' loops to end (12 rounds of 0.2s each).
    assert!(
        longest_wait < Duration::from_millis(1800),
        "the writer waited {longest_wait:?}: readers kept overtaking it"
    );
}

#[test]
fn a_queued_writer_goes_before_later_readers() {
    let redis = or_skip!(RedisServer::start());
    let reader = redis
        .redlock()
        .args(["acquire", "rw", "--shared"])
        .run()
        .ok();
    // A second reader joins the first at once.
    redis
        .redlock()
        .args(["acquire", "rw", "--shared", "-n", "--ttl", "1m"])
        .run()
        .expect(0);
    let writer = redis
        .redlock()
        .args(["acquire", "rw", "--wait", "30s"])
        .spawn_proc();
    assert!(wait_for(|| queue(&redis, "rw").len() == 1, HANG));
    // With a writer queued, a new reader queues behind it (here: -n gives up).
    redis
        .redlock()
        .args(["acquire", "rw", "--shared", "-n"])
        .run()
        .expect(1);
    // One reader left: the writer still waits (a release hands over in its own script, so
    // this is what it left).
    redis
        .redlock()
        .args(["release", "rw", &reader])
        .run()
        .expect(0);
    assert_eq!(redis.get(&lock_key("rw")).as_deref(), Some("#shared"));
    assert_eq!(queue(&redis, "rw").len(), 1);
    redis
        .redlock()
        .args(["release", "rw", "--force"])
        .run()
        .expect(0);
    let writer_token = writer.finish(HANG).ok();
    assert_eq!(redis.get(&lock_key("rw")), Some(writer_token));
}

/// A writer releases a lock that 3 readers wait for: they get it together (each holds on until
/// it sees the other two in).
#[test]
fn readers_behind_a_writer_are_let_in_together() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    let writer = redis.redlock().args(["acquire", "rw"]).run().ok();
    let readers: Vec<Proc> = (0..3)
        .map(|i| {
            redis
                .redlock()
                .args(["exec", "rw", "--shared", "--wait", "60s", "--"])
                .args([
                    "sh",
                    "-c",
                    &format!(
                        "touch in{i}; n=0; while [ $(ls in* | wc -l) -lt 3 ] && [ $n -lt 400 ]; \
                         do sleep 0.05; n=$((n+1)); done; [ $n -lt 400 ]"
                    ),
                ])
                .current_dir(dir.path())
                .spawn_proc()
        })
        .collect();
    assert!(wait_for(|| queue(&redis, "rw").len() == 3, HANG));
    redis
        .redlock()
        .args(["release", "rw", &writer])
        .run()
        .expect(0);
    for r in readers {
        r.finish(HANG).expect(0);
    }
    assert_eq!(redis.keys(), [meta_key("rw")]);
}

#[test]
fn a_call_of_another_kind_exits_2_and_writes_nothing() {
    let redis = or_skip!(RedisServer::start());
    redis
        .redlock()
        .args(["acquire", "sem", "--slots", "3", "--note", "nightly"])
        .run()
        .expect(0);
    let before = (
        redis.keys(),
        redis.meta("sem"),
        redis.query::<Vec<String>>(&["HGETALL", &slots_key("sem")]),
    );
    for (args, asked) in [
        (vec!["--slots", "2"], "--slots 2"),
        (vec![], "an exclusive lock"),
        (vec!["--pool", "a,b,c"], "--pool a,b,c"),
        (vec!["--shared"], "--shared"),
    ] {
        let out = redis
            .redlock()
            .args(["acquire", "sem", "-n"])
            .args(&args)
            .run()
            .expect(2);
        assert!(
            out.stderr.contains("'sem' is a --slots 3 lock (set by ")
                && out.stderr.contains(&format!("this call asks for {asked}")),
            "{out}"
        );
        assert_eq!(out.stderr.lines().count(), 1, "{out}");
    }
    let after = (
        redis.keys(),
        redis.meta("sem"),
        redis.query::<Vec<String>>(&["HGETALL", &slots_key("sem")]),
    );
    assert_eq!(before, after, "a refused call wrote something");
}

#[test]
fn a_slot_call_on_an_exclusive_lock_exits_2_naming_the_holder() {
    let redis = or_skip!(RedisServer::start());
    redis.redlock().args(["acquire", "x"]).run().expect(0);
    let keys = redis.keys();
    let out = redis
        .redlock()
        .args(["exec", "x", "--slots", "2", "--", "true"])
        .run()
        .expect(2);
    assert!(
        out.stderr.contains("'x' is held as an exclusive lock by ")
            && out.stderr.contains("this call asks for --slots 2"),
        "{out}"
    );
    assert_eq!(redis.keys(), keys);
    // A reader waits for an exclusive holder instead (a writer, to it).
    redis
        .redlock()
        .args(["acquire", "x", "--shared", "-n"])
        .run()
        .expect(1);
}

#[test]
fn a_new_limit_takes_once_the_lock_is_idle() {
    let redis = or_skip!(RedisServer::start());
    let t = redis
        .redlock()
        .args(["acquire", "sem", "--slots", "3"])
        .run()
        .ok();
    redis
        .redlock()
        .args(["acquire", "sem", "--slots", "2", "-n"])
        .run()
        .expect(2);
    redis.redlock().args(["release", "sem", &t]).run().expect(0);
    redis
        .redlock()
        .args(["exec", "sem", "--slots", "2", "--", "true"])
        .run()
        .expect(0);
    assert_eq!(redis.meta("sem")["slots"], "n:2");
    redis
        .redlock()
        .args(["exec", "sem", "--", "true"])
        .run()
        .expect(0);
    assert_eq!(redis.meta("sem")["slots"], "");
}

#[test]
fn several_servers_refuse_slots_pools_and_shared_locks() {
    let urls = [closed_port(), closed_port(), closed_port()]
        .map(|p| format!("--url=redis://127.0.0.1:{p}"));
    for kind in [
        ["--slots", "2"],
        ["--pool", "a,b"],
        ["--shared", "--ttl=5s"],
    ] {
        let out = redlock()
            .args(&urls)
            .args(["acquire", "k", "-n"])
            .args(kind)
            .run()
            .expect(2);
        assert!(
            out.stderr.contains("does not apply to several --url"),
            "{out}"
        );
    }
}

/// `release --force --if-fence N` / `--if-token FINGERPRINT` on a lock with places frees the
/// holder the condition names, and only it: the others keep their places, their records and
/// their TTLs (a condition that matched let every holder go, and the suite did not notice).
#[test]
fn a_conditional_force_frees_only_the_matching_holder() {
    let redis = or_skip!(RedisServer::start());
    let holders: Vec<(String, String)> = (0..4)
        .map(|_| {
            let json = redis
                .redlock()
                .args(["acquire", "sem", "--slots", "4", "--format", "json"])
                .run()
                .ok();
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            let fence = match &v["fence"] {
                serde_json::Value::String(f) => f.clone(),
                other => other.to_string(),
            };
            (v["token"].as_str().unwrap().to_string(), fence)
        })
        .collect();
    let places = || -> BTreeSet<String> {
        redis
            .query::<Vec<String>>(&["HKEYS", &slots_key("sem")])
            .into_iter()
            .collect()
    };
    let held = |which: &[usize]| -> BTreeSet<String> {
        which.iter().map(|&i| holders[i].0.clone()).collect()
    };
    let records = redis.query::<Vec<String>>(&["HVALS", &slots_key("sem")]);
    let out = redis
        .redlock()
        .args(["release", "sem", "--force", "--if-fence", &holders[1].1])
        .run()
        .expect(0);
    assert_eq!(
        places(),
        held(&[0, 2, 3]),
        "--if-fence {}: {out}",
        holders[1].1
    );
    let out = redis
        .redlock()
        .args([
            "release",
            "sem",
            "--force",
            "--if-token",
            &holders[2].0[..8],
        ])
        .run()
        .expect(0);
    assert_eq!(
        places(),
        held(&[0, 3]),
        "--if-token {}: {out}",
        &holders[2].0[..8]
    );
    // The others are untouched: their records as they were, and each still releases its own.
    let left = redis.query::<Vec<String>>(&["HVALS", &slots_key("sem")]);
    assert!(
        left.iter().all(|r| records.contains(r)),
        "{left:?}\n{records:?}"
    );
    for i in [0, 3] {
        redis
            .redlock()
            .args(["release", "sem", &holders[i].0])
            .run()
            .expect(0);
    }
    assert_eq!(redis.keys(), [meta_key("sem")]);
}

#[test]
fn release_frees_one_holder_and_force_frees_all() {
    let redis = or_skip!(RedisServer::start());
    let tokens: Vec<String> = (0..3)
        .map(|_| {
            redis
                .redlock()
                .args(["acquire", "sem", "--slots", "3"])
                .run()
                .ok()
        })
        .collect();
    redis
        .redlock()
        .args(["release", "sem", &tokens[1]])
        .run()
        .expect(0);
    let held: Vec<String> = redis.query(&["HKEYS", &slots_key("sem")]);
    assert_eq!(
        held.iter().collect::<BTreeSet<_>>(),
        [&tokens[0], &tokens[2]].into_iter().collect()
    );
    // Released once, the token holds nothing.
    let out = redis
        .redlock()
        .args(["release", "sem", &tokens[1]])
        .run()
        .expect(3);
    assert!(
        out.stderr.contains("the token holds no place in the lock"),
        "{out}"
    );
    // A condition that matches no holder changes nothing.
    let out = redis
        .redlock()
        .args(["release", "sem", "--force", "--if-fence", "12345"])
        .run()
        .expect(3);
    assert!(
        out.stderr
            .contains("not released: no holder of 'sem' has fence 12345"),
        "{out}"
    );
    assert_eq!(
        redis
            .query::<Vec<String>>(&["HKEYS", &slots_key("sem")])
            .len(),
        2
    );
    let table = redis.redlock().args(["status", "sem"]).run().ok();
    assert!(table.contains("2/3 held"), "{table}");
    let out = redis
        .redlock()
        .args(["release", "sem", "--force"])
        .run()
        .expect(0);
    assert!(out.stderr.contains("held by 2 holders"), "{out}");
    for t in [&tokens[0], &tokens[2]] {
        assert!(out.stderr.contains(&t[..8]), "{out}");
    }
    assert_eq!(redis.keys(), [meta_key("sem")]);
    // `extend` of a holder let go says so.
    redis
        .redlock()
        .args(["extend", "sem", &tokens[0], "--ttl", "10s"])
        .run()
        .expect(3);
}

#[test]
fn exec_renews_its_slot_past_the_ttl() {
    let redis = or_skip!(RedisServer::start());
    let dir = tempfile::tempdir().unwrap();
    // TTL 1s, the command runs 3s: without renewals its place would expire and the second
    // holder below would get in; with them the second waits.
    let mut first = redis
        .redlock()
        .args(["exec", "sem", "--slots", "1", "--ttl", "1s", "--"])
        .args(["sh", "-c", "touch in; sleep 3"])
        .current_dir(dir.path())
        .spawn_proc();
    assert!(wait_for(|| dir.path().join("in").exists(), HANG));
    redis
        .redlock()
        .args(["acquire", "sem", "--slots", "1", "--wait", "2s"])
        .run()
        .expect(1);
    assert!(first.running());
    first.finish(HANG).expect(0);
}

#[test]
fn status_lists_each_holder_with_its_slot() {
    let redis = or_skip!(RedisServer::start());
    for note in ["first", "second"] {
        redis
            .redlock()
            .args(["acquire", "sem", "--slots", "3", "--note", note])
            .run()
            .expect(0);
    }
    let table = redis.redlock().args(["status"]).run().ok();
    let row = table.lines().nth(1).unwrap();
    assert!(
        row.starts_with("sem") && row.contains("2/3 held"),
        "{table}"
    );
    let holders: Vec<&str> = table
        .lines()
        .skip_while(|l| *l != "holders of sem (--slots 3):")
        .skip(2)
        .collect();
    assert_eq!(holders.len(), 2, "{table}");
    assert!(holders[0].trim_start().starts_with("0 ") && holders[0].ends_with("first"));
    assert!(holders[1].trim_start().starts_with("1 ") && holders[1].ends_with("second"));
    let json: serde_json::Value =
        serde_json::from_str(&redis.redlock().args(["status", "sem", "--json"]).run().ok())
            .unwrap();
    let slots = &json[0]["slots"];
    assert_eq!(slots["kind"], "slots");
    assert_eq!(slots["limit"], 3);
    assert_eq!(slots["held"], 2);
    assert_eq!(slots["holders"][1]["note"], "second");
    assert!(json[0]["token_fingerprint"].is_null(), "{json}");
}

#[test]
fn metrics_count_the_holders_and_the_limit() {
    let redis = or_skip!(RedisServer::start());
    for _ in 0..2 {
        redis
            .redlock()
            .args(["acquire", "sem", "--slots", "3"])
            .run()
            .expect(0);
    }
    redis
        .redlock()
        .args(["acquire", "rw", "--shared"])
        .run()
        .expect(0);
    redis.redlock().args(["acquire", "x"]).run().expect(0);
    let text = redis
        .redlock()
        .args(["status", "--format", "prometheus"])
        .run()
        .ok();
    for line in [
        r#"redlock_holders{lock="sem"} 2"#,
        r#"redlock_holders_limit{lock="sem"} 3"#,
        r#"redlock_holders{lock="rw"} 1"#,
        r#"redlock_holders_limit{lock="rw"} +Inf"#,
        r#"redlock_holders{lock="x"} 1"#,
        r#"redlock_holders_limit{lock="x"} 1"#,
        r#"redlock_held{lock="sem"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "no {line}:\n{text}");
    }
}

/// A writer that gives up lets the readers queued behind it in at once (they would otherwise
/// wait for their next look, up to 3 s later).
#[test]
fn readers_behind_a_writer_that_gives_up_get_in_at_once() {
    let redis = or_skip!(RedisServer::start());
    redis
        .redlock()
        .args(["acquire", "rw", "--shared", "--ttl", "1m"])
        .run()
        .expect(0);
    let writer = redis
        .redlock()
        .args(["acquire", "rw", "--wait", "1s"])
        .spawn_proc();
    assert!(wait_for(|| queue(&redis, "rw").len() == 1, HANG));
    let reader = redis
        .redlock()
        .args(["exec", "rw", "--shared", "--wait", "30s", "--", "true"])
        .spawn_proc();
    assert!(wait_for(|| queue(&redis, "rw").len() == 2, HANG));
    writer.finish(HANG).expect(1);
    let gave_up = Instant::now();
    reader.finish(HANG).expect(0);
    let after = gave_up.elapsed();
    assert!(
        after < Duration::from_millis(1500),
        "the reader got in {after:?} after the writer gave up"
    );
}

// Found by review (each failed on the first version of the feature).

/// A released holder's expiry must not keep the marker alive: after R1 (1m) is released, only
/// R2 (1s) is left, so the marker must expire with R2 and a writer get the lock within ~1s.
/// (slots_release.lua used to set the marker to R1's old expiry: the writer waited a minute for
/// a lock nobody held.)
#[test]
fn a_released_holder_does_not_keep_the_marker_alive() {
    let redis = or_skip!(RedisServer::start());
    let r1 = redis
        .redlock()
        .args(["acquire", "rw", "--shared", "--ttl", "1m"])
        .run()
        .ok();
    redis
        .redlock()
        .args(["acquire", "rw", "--shared", "--ttl", "1s"])
        .run()
        .expect(0);
    release(&redis, "rw", &r1);
    let pttl = redis.pttl(&lock_key("rw"));
    assert!(
        pttl <= 1000,
        "the marker outlives the last holder: PTTL {pttl}ms, holder 1s"
    );
    // The writer: the reader (1s) crashed without releasing; the lock is free within ~1s.
    let out = redis
        .redlock()
        .args(["acquire", "rw", "--wait", "8s"])
        .run();
    assert_eq!(
        out.code(),
        0,
        "writer starved by a marker with no holder:\n{out}"
    );
}

/// `extend --ttl` shorter than the place had: the marker follows (as a plain lock's key does).
#[test]
fn extending_a_place_to_a_shorter_ttl_shortens_the_marker() {
    let redis = or_skip!(RedisServer::start());
    let r = redis
        .redlock()
        .args(["acquire", "rw", "--shared", "--ttl", "1m"])
        .run()
        .ok();
    redis
        .redlock()
        .args(["extend", "rw", &r, "--ttl", "1s"])
        .run()
        .expect(0);
    let pttl = redis.pttl(&lock_key("rw"));
    assert!(pttl <= 1000, "marker PTTL {pttl}ms after extend --ttl 1s");
}

/// A holder that crashed (no release) frees its place by itself; nothing may stay in Redis
/// without an expiry. (LOCK:slots had none: it stayed forever once the marker expired.)
#[test]
fn a_crashed_holder_leaves_nothing_without_expiry() {
    let redis = or_skip!(RedisServer::start());
    redis
        .redlock()
        .args(["acquire", "sem", "--slots", "2", "--ttl", "1s"])
        .run()
        .expect(0);
    assert!(wait_for(|| redis.get(&lock_key("sem")).is_none(), HANG));
    for key in redis.keys() {
        assert_ne!(
            redis.pttl(&key),
            -1,
            "{key} has no expiry: {:?}",
            redis.keys()
        );
    }
    assert!(
        !redis.keys().contains(&slots_key("sem")),
        "{} left behind",
        slots_key("sem")
    );
}

/// A waiter's status line names the holders of a lock with more than one holder, as `status`
/// and the busy message do, rather than "held by an unknown client (no redlock record)".
#[test]
fn a_waiters_status_line_describes_the_places() {
    let redis = or_skip!(RedisServer::start());
    redis
        .redlock()
        .args(["acquire", "sem", "--slots", "1", "--ttl", "1m"])
        .run()
        .expect(0);
    let mut waiter = redis
        .redlock()
        .args(["acquire", "sem", "--slots", "1", "--wait", "30s"])
        .spawn_proc();
    waiter.wait_for_stderr("waiting for 'sem'", HANG);
    let line = waiter.stderr();
    redis
        .redlock()
        .args(["release", "sem", "--force"])
        .run()
        .expect(0);
    waiter.finish(HANG).expect(0);
    assert!(!line.contains("unknown client"), "{line}");
}

/// A place that ran out is told as `expired` in the history whoever notices it first. When the
/// first to look is the holder's own renewal (exec's `extend`, typical of a hung command). (It
/// used to drop the dead record silently: the history showed the acquisition, never its end.)
#[test]
fn a_place_found_dead_by_its_own_renewal_is_told_as_expired() {
    let redis = or_skip!(RedisServer::start());
    let a = redis
        .redlock()
        .args(["acquire", "sem", "--slots", "2", "--ttl", "300ms"])
        .run()
        .ok();
    let b = redis
        .redlock()
        .args(["acquire", "sem", "--slots", "2", "--ttl", "1m"])
        .run()
        .ok();
    // Wait until A's place has run out by the server's clock (reading it changes nothing).
    let key = slots_key("sem");
    assert!(wait_for(
        || {
            let record: Option<String> = redis.query(&["HGET", &key, &a]);
            let expires: i64 = record
                .and_then(|r| r.split('\t').next().and_then(|e| e.parse().ok()))
                .unwrap_or(0);
            expires < redis.now_ms()
        },
        HANG
    ));
    // The holder's own renewal is the first to look: refused, as it should be.
    let out = redis
        .redlock()
        .args(["extend", "sem", &a, "--ttl", "1m"])
        .run();
    assert_ne!(out.code(), 0, "{out}");
    release(&redis, "sem", &b);
    let log = redis.redlock().args(["log", "sem"]).run().ok();
    assert!(
        log.lines()
            .any(|l| l.contains(" expired ") && l.contains(&a[..8])),
        "no end for {}:\n{log}",
        &a[..8]
    );
}

/// A holder that knows it holds a place (exec, from its acquisition) releases and renews with
/// the slot scripts at once: one script call each, as for a plain lock.
#[test]
fn exec_with_a_place_releases_in_one_call() {
    let redis = or_skip!(RedisServer::start());
    for args in [&["--slots", "2"][..], &["--shared"][..], &[][..]] {
        let exec = || {
            redis
                .redlock()
                .args(["exec", "k"])
                .args(args)
                .args(["--", "true"])
                .run()
                .expect(0);
        };
        // The first run loads the scripts (a NOSCRIPT, then the script itself).
        exec();
        let before = redis.script_calls();
        exec();
        assert_eq!(
            redis.script_calls() - before,
            2,
            "exec {args:?}: attempt + release"
        );
    }
}

/// The connections blocked in BLPOP (waiters parked on their wake lists), by client id.
fn blocked(redis: &RedisServer) -> Vec<String> {
    let clients: String = redis.query(&["CLIENT", "LIST"]);
    clients
        .lines()
        .filter(|l| l.contains(" cmd=blpop ") && l.contains(" flags=b "))
        .filter_map(|l| Some(l.split_whitespace().next()?.to_string()))
        .collect()
}

/// First come, first served on a lock with places, and one wake-up per freed place: four
/// waiters queue for a full `--slots 2` lock; each release lets exactly the waiter at the head
/// in (its attempt, nobody else's: counted in the server's command statistics), and a newcomer
/// that finds a place free (its holder's TTL ran out) while waiters are queued does not take it:
/// it gives it to the head of the queue and waits behind. The waiters get their places in the
/// order they arrived.
#[test]
fn slot_waiters_get_in_in_arrival_order_one_wake_up_per_place() {
    let redis = or_skip!(RedisServer::start());
    let take = |args: &[&str]| -> String {
        redis
            .redlock()
            .args(["acquire", "sem", "--slots", "2"])
            .args(args)
            .run()
            .ok()
            .trim()
            .to_string()
    };
    let holders = [take(&["--ttl", "1m"]), take(&["--ttl", "1m"])];
    // The release script in the server's cache: a release below is one EVALSHA.
    let warm = redis
        .redlock()
        .args(["acquire", "warm", "--slots", "2"])
        .run()
        .ok();
    redis
        .redlock()
        .args(["release", "warm", warm.trim()])
        .run()
        .expect(0);
    let mut waiters = Vec::new();
    for i in 0..4 {
        let proc = redis
            .redlock()
            .args([
                "acquire", "sem", "--slots", "2", "--ttl", "1m", "--wait", "1m",
            ])
            .spawn_proc();
        let queued = wait_for(|| queue(&redis, "sem").len() == i + 1, HANG);
        assert!(queued, "waiter {i} not queued: {:?}", queue(&redis, "sem"));
        waiters.push((proc, queue(&redis, "sem")[i].clone()));
    }
    assert!(
        wait_for(|| blocked(&redis).len() == 4, HANG),
        "not all 4 blocked: {:?}",
        blocked(&redis)
    );
    // Each waiter looks again when its block reaches the cap (3 s), which a wake-up would look
    // like: start right after they all did, so that the next looks are 3 s away.
    let leases_key = format!("{}:leases", lock_key("sem"));
    let leases = || -> Vec<Option<String>> {
        waiters
            .iter()
            .map(|(_, t)| redis.query(&["HGET", &leases_key, t]))
            .collect()
    };
    let first_leases = leases();
    let looked = wait_for(
        || {
            let now = leases();
            now.iter().zip(&first_leases).all(|(a, b)| a != b)
        },
        HANG,
    );
    assert!(looked, "the waiters never looked again");
    assert!(
        wait_for(|| blocked(&redis).len() == 4, HANG),
        "not all 4 blocked again: {:?}",
        blocked(&redis)
    );
    let (before, scripts, blpops) = (blocked(&redis), redis.script_calls(), redis.calls("blpop"));
    redis
        .redlock()
        .args(["release", "sem", &holders[0]])
        .run()
        .expect(0);
    let (first, first_token) = waiters.remove(0);
    let out = first.finish(HANG).expect(0);
    assert_eq!(
        out.stdout.trim(),
        first_token,
        "the head of the queue got in: {out}"
    );
    let mut after = Vec::new();
    assert!(
        wait_for(
            || {
                after = blocked(&redis);
                after.len() == 3
            },
            HANG
        ),
        "the other three are not all blocked again: {after:?}"
    );
    let looked_again = after.iter().filter(|id| !before.contains(id)).count() as u64;
    assert_eq!(
        (
            redis.script_calls() - scripts,
            redis.calls("blpop") - blpops
        ),
        (3 + looked_again, looked_again),
        "(script calls, BLPOPs) for one release (`release KEY TOKEN` asks the plain script \
         first, two calls) and one place handed on (the head's attempt), with {looked_again} \
         waiters at their block cap"
    );
    let rest: Vec<String> = waiters.iter().map(|(_, t)| t.clone()).collect();
    assert_eq!(
        queue(&redis, "sem"),
        rest,
        "the others still wait, in order"
    );

    // The first waiter's place runs out (as if it had died): a newcomer finds it free, but the
    // next waiter's turn, not its own.
    redis
        .redlock()
        .args(["extend", "sem", &first_token, "--ttl", "50ms"])
        .run()
        .expect(0);
    let key = slots_key("sem");
    let gone = || {
        let record: Option<String> = redis.query(&["HGET", &key, &first_token]);
        record.is_none_or(|r| {
            let expires: i64 = r.split('\t').next().unwrap().parse().unwrap();
            expires < redis.now_ms()
        })
    };
    assert!(wait_for(gone, HANG), "the place never ran out");
    let out = redis
        .redlock()
        .args(["acquire", "sem", "--slots", "2", "-n"])
        .run();
    assert_eq!(
        out.code(),
        1,
        "a newcomer took a place while waiters were queued: {out}"
    );
    let (second, second_token) = waiters.remove(0);
    let out = second.finish(HANG).expect(0);
    assert_eq!(
        out.stdout.trim(),
        second_token,
        "the next in line got in: {out}"
    );
    // The rest in order, one per release.
    for (holder, (waiter, token)) in [holders[1].clone(), second_token].iter().zip(waiters) {
        redis
            .redlock()
            .args(["release", "sem", holder])
            .run()
            .expect(0);
        let out = waiter.finish(HANG).expect(0);
        assert_eq!(out.stdout.trim(), token, "{out}");
    }
    assert!(queue(&redis, "sem").is_empty());
}
