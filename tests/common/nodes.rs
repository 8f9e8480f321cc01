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
