//! Several independent `redis-server`s for the Redlock quorum mode: [`Nodes`] starts N of them
//! (each a [`RedisServer`] of its own, optionally behind a [`Proxy`]), builds `redlock` commands
//! that name them all, and checks what a command left on each of them.

use std::ops::{Index, IndexMut};
use std::path::Path;
use std::process::Command;

use super::proxy::Proxy;
use super::*;

/// The value a test stores as some other client's lock token.
pub const FOREIGN: &str = "foreign";

pub struct Nodes {
    servers: Vec<RedisServer>,
    /// One per server when clients reach the servers through proxies.
    proxies: Vec<Proxy>,
    dir: tempfile::TempDir,
}

impl Nodes {
    /// `n` plain servers, or `None` when the test must be skipped (see [`Builder::start`]).
    pub fn start(n: usize) -> Option<Nodes> {
        Nodes::start_with(n, RedisServer::builder)
    }

    /// `n` servers, each started from `builder()`.
    pub fn start_with(n: usize, builder: impl Fn() -> Builder) -> Option<Nodes> {
        let servers = (0..n)
            .map(|_| builder().start())
            .collect::<Option<Vec<_>>>()?;
        Some(Nodes {
            servers,
            proxies: Vec::new(),
            dir: tempfile::tempdir().unwrap(),
        })
    }

    /// `n` plain servers that clients reach through a [`Proxy`] each.
    pub fn behind_proxies(n: usize) -> Option<Nodes> {
        let mut nodes = Nodes::start(n)?;
        nodes.proxies = nodes.servers.iter().map(|s| Proxy::to(s.port())).collect();
        Some(nodes)
    }

    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// The majority a lock needs: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.len() / 2 + 1
    }

    /// The proxy in front of server `i` (panics if the nodes are not behind proxies).
    pub fn proxy(&self, i: usize) -> &Proxy {
        &self.proxies[i]
    }

    pub fn servers(&self) -> impl Iterator<Item = &RedisServer> {
        self.servers.iter()
    }

    /// The servers that were not [`RedisServer::kill`]ed.
    pub fn live(&self) -> impl Iterator<Item = &RedisServer> {
        self.servers.iter().filter(|s| !s.killed())
    }

    /// The URL clients use for server `i`: its proxy's when there are proxies.
    pub fn url(&self, i: usize) -> String {
        match self.proxies.get(i) {
            Some(p) => p.url(),
            None => self.servers[i].url(),
        }
    }

    /// Every client URL, in order (the first is the queue node).
    pub fn urls(&self) -> Vec<String> {
        (0..self.len()).map(|i| self.url(i)).collect()
    }

    /// A scratch directory that lives as long as the nodes.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `redlock` with a clean environment and `REDLOCK_URL` naming every node.
    pub fn redlock(&self) -> Command {
        let mut cmd = redlock();
        cmd.env("REDLOCK_URL", self.urls().join(","));
        cmd
    }

    /// `sh -c SCRIPT` with `redlock` on PATH and `REDLOCK_URL` naming every node.
    pub fn sh(&self, script: &str) -> Command {
        let mut cmd = sh(script);
        cmd.env("REDLOCK_URL", self.urls().join(","));
        cmd
    }

    /// Empties every live server.
    pub fn flushall(&self) {
        for s in self.live() {
            s.query::<()>(&["FLUSHALL"]);
        }
    }

    /// Lock `name` taken by some other client on server `i` ([`FOREIGN`], for a minute).
    pub fn hold_foreign(&self, i: usize, name: &str) {
        self.servers[i].query::<()>(&["SET", &lock_key(name), FOREIGN, "PX", "60000"]);
    }

    /// The token in lock `name` on each server (`None` for a killed server or a free lock).
    pub fn tokens(&self, name: &str) -> Vec<Option<String>> {
        self.servers
            .iter()
            .map(|s| (!s.killed()).then(|| s.get(&lock_key(name))).flatten())
            .collect()
    }

    /// Asserts that nothing of a failed or finished command is left of lock `name` on any live
    /// server: the lock key is absent or [`FOREIGN`] (with the foreign TTL untouched), there is
    /// no queue, lease or wake list (a tombstone with a TTL may stay), and the holder recorded in
    /// the meta hash (which stays, for its fence counter) is absent or one of `ours`, the tokens
    /// that successful commands printed.
    #[track_caller]
    pub fn assert_nothing_left(&self, name: &str, ours: &[&str]) {
        let key = lock_key(name);
        for s in self.live() {
            let url = s.url();
            match s.get(&key).as_deref() {
                None => {}
                Some(FOREIGN) => {
                    let pttl = s.pttl(&key);
                    assert!(pttl > 30_000, "{url}: the foreign TTL was changed: {pttl}");
                }
                Some(other) => panic!("{url}: lock '{name}' is still held by {other}"),
            }
            // A tombstone (`:gone:TOKEN`, left where an attempt's answer was missing) stays, but
            // only for `lock::TOMBSTONE` (5 minutes).
            let tomb = format!("{key}:gone:");
            let stray: Vec<String> = s
                .keys()
                .into_iter()
                .filter(|k| k.starts_with(&key) && *k != key && *k != meta_key(name))
                .filter(|k| !(k.starts_with(&tomb) && (1..=TOMBSTONE_MS).contains(&s.pttl(k))))
                .collect();
            assert!(stray.is_empty(), "{url}: left over: {stray:?}");
            if let Some(token) = s.meta(name).get("token") {
                assert!(
                    ours.contains(&token.as_str()),
                    "{url}: the meta hash names holder {token}, which no successful command \
                     printed (ours: {ours:?})"
                );
            }
        }
    }
}

/// One hold of a lock, as the nodes' histories tell it (see [`Nodes::holds`]).
#[derive(Debug, Clone)]
pub struct Hold {
    /// The holder's token fingerprint, as the history has it.
    pub token: String,
    /// When a node first told the acquisition (server ms, from the stream ID).
    pub acquired: i64,
    /// When a node first told its end (released, expired, lost, forced); `None` if none did.
    pub end: Option<i64>,
}

impl Nodes {
    /// Every hold of lock `name` that a live node's history tells, in the order acquired. The
    /// nodes run on one machine, so their clocks agree: a hand-over is the time from one hold's
    /// end to the next one's acquisition.
    pub fn holds(&self, name: &str) -> Vec<Hold> {
        let mut acquired: HashMap<String, i64> = HashMap::new();
        let mut ended: HashMap<String, i64> = HashMap::new();
        for s in self.live() {
            let log: Vec<(String, Vec<String>)> =
                s.query(&["XRANGE", &format!("{}:log", lock_key(name)), "-", "+"]);
            for (id, fields) in log {
                let Some(at) = id.split('-').next().and_then(|ms| ms.parse::<i64>().ok()) else {
                    continue;
                };
                let field = |k: &str| {
                    fields
                        .chunks(2)
                        .find(|kv| kv[0] == k)
                        .and_then(|kv| kv.get(1).cloned())
                        .unwrap_or_default()
                };
                let seen = match field("event").as_str() {
                    "acquired" => &mut acquired,
                    "released" | "expired" | "lost" | "forced" => &mut ended,
                    _ => continue,
                };
                let first = seen.entry(field("token")).or_insert(at);
                *first = (*first).min(at);
            }
        }
        let mut holds: Vec<Hold> = acquired
            .into_iter()
            .map(|(token, acquired)| Hold {
                end: ended.get(&token).copied(),
                token,
                acquired,
            })
            .collect();
        holds.sort_by_key(|h| h.acquired);
        holds
    }
}

/// How long a tombstone lasts (`lock::TOMBSTONE`).
const TOMBSTONE_MS: i64 = 300_000;

impl Index<usize> for Nodes {
    type Output = RedisServer;

    fn index(&self, i: usize) -> &RedisServer {
        &self.servers[i]
    }
}

impl IndexMut<usize> for Nodes {
    fn index_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.servers[i]
    }
}

/// Every command the nodes run, as Redis's MONITOR reports it (one connection per node), to learn
/// which tokens a process used: each attempt of a quorum waiter has a fresh one, and the last may
/// live only for a moment. The acquire script carries the owner's `--note` (its 6th argument),
/// which tells whose attempt it was.
pub struct Monitor {
    /// One stream of lines per node, in the order the node ran the commands.
    streams: Vec<Arc<Mutex<Vec<String>>>>,
    ports: Vec<u16>,
}

impl Monitor {
    /// Starts monitoring every live node; from the return on, nothing they run is missed.
    pub fn start(nodes: &Nodes) -> Monitor {
        let mut streams = Vec::new();
        let mut ports = Vec::new();
        for s in nodes.live() {
            let mut con = s.cli();
            con.set_read_timeout(None).unwrap();
            redis::cmd("MONITOR").query::<()>(&mut con).unwrap();
            let lines = Arc::new(Mutex::new(Vec::new()));
            let sink = Arc::clone(&lines);
            // Ends when the server goes away.
            thread::spawn(move || {
                while let Ok(v) = con.recv_response() {
                    if let redis::Value::SimpleString(line) = v {
                        sink.lock().unwrap().push(line);
                    }
                }
            });
            streams.push(lines);
            ports.push(s.port());
        }
        Monitor { streams, ports }
    }

    /// Waits until every node's stream has caught up with what the node ran so far (a marker
    /// sent now comes back through it).
    #[track_caller]
    pub fn sync(&self, nodes: &Nodes) {
        static SYNCS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SYNCS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let marker = format!("monitor-sync-{}-{n}", std::process::id());
        for (stream, port) in self.streams.iter().zip(&self.ports) {
            let s = nodes
                .servers()
                .find(|s| s.port() == *port)
                .expect("a monitored node");
            s.query::<String>(&["ECHO", &marker]);
            let seen = wait_for(
                || stream.lock().unwrap().iter().any(|l| l.contains(&marker)),
                Duration::from_secs(10),
            );
            assert!(seen, "MONITOR of {} did not catch up", s.url());
        }
    }

    /// The tokens of every acquire attempt (EVAL/EVALSHA of acquire.lua) that `--note NOTE`
    /// made on any node, in no particular order, without repeats. Call [`sync`](Self::sync)
    /// first.
    pub fn tokens_of(&self, note: &str) -> Vec<String> {
        let mut tokens = Vec::new();
        for stream in &self.streams {
            for line in stream.lock().unwrap().iter() {
                let args = monitor_args(line);
                let Some(cmd) = args.first() else { continue };
                if !cmd.eq_ignore_ascii_case("evalsha") && !cmd.eq_ignore_ascii_case("eval") {
                    continue;
                }
                let Some(numkeys) = args.get(2).and_then(|n| n.parse::<usize>().ok()) else {
                    continue;
                };
                let argv = &args[(3 + numkeys).min(args.len())..];
                // acquire.lua: token, ttl, host, pid, user, note, ... 18 in all (no other
                // script has as many: at least 15, so that a new last argument keeps this).
                if argv.len() >= 15 && argv[5] == note && !tokens.contains(&argv[0]) {
                    tokens.push(argv[0].clone());
                }
            }
        }
        tokens
    }
}

/// The arguments of one MONITOR line: `TIME [DB ADDR] "arg" "arg" ...`, unquoted.
fn monitor_args(line: &str) -> Vec<String> {
    let Some((_, rest)) = line.split_once("] ") else {
        return Vec::new();
    };
    let mut args = Vec::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                // An escape: the tokens and notes we look for have none, so keep it as it is.
                '\\' => {
                    arg.push(c);
                    arg.extend(chars.next());
                }
                c => arg.push(c),
            }
        }
        args.push(arg);
    }
    args
}

impl Nodes {
    /// Asserts that none of `tokens` is left on any live node: not in the lock key (held or
    /// reserved), the queue, the leases, the waiters' records, a wake list or the holder record.
    #[track_caller]
    pub fn assert_no_trace_of(&self, name: &str, tokens: &[String], context: &str) {
        let key = lock_key(name);
        for s in self.live() {
            let url = s.url();
            let mut found = Vec::new();
            if let Some(v) = s.get(&key) {
                found.push(format!("lock key {v}"));
            }
            let queue: Vec<String> = s.query(&["ZRANGE", &format!("{key}:q"), "0", "-1"]);
            found.extend(queue.into_iter().map(|t| format!("queue {t}")));
            let leases: Vec<String> = s.query(&["HKEYS", &format!("{key}:leases")]);
            // A waiter's record is there too, as TOKEN:who.
            found.extend(leases.into_iter().map(|t| format!("lease {t}")));
            let prefix = format!("{key}:w:");
            found.extend(
                s.keys()
                    .into_iter()
                    .filter(|k| k.starts_with(&prefix))
                    .map(|k| format!("wake list {k}")),
            );
            if let Some(t) = s.meta(name).get("token") {
                found.push(format!("holder record {t}"));
            }
            let ours: Vec<&String> = found
                .iter()
                .filter(|f| tokens.iter().any(|t| f.contains(t.as_str())))
                .collect();
            assert!(
                ours.is_empty(),
                "{url}: {context}: left of tokens {tokens:?}: {ours:?} (all: {found:?})"
            );
        }
    }
}
