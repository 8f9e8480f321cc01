//! Connecting to Redis with timeouts, TLS and auth, and running commands with logging.
//!
//! Every connection has a connect timeout and a read/write timeout, so a dead or silent server is
//! an error after at most `--connect-timeout` + `--io-timeout`, never a hang. Errors carry the
//! redacted URL and a hint at the fix.
//!
//! A reply later than `--io-timeout` does not cost the connection: on a server full of clients
//! (`maxclients`) a new one may be refused, and a holder would lose a lock that Redis still keeps
//! for it. After such a timeout the connection is *late* (see [`Health`]): the driver counts the
//! reply it still owes and throws it away when it comes, and before its next command the
//! connection is checked with `ECHO <nonce>`, which must come back next. It is replaced only
//! when it really broke (closed, reset, a command that may have gone out in part, anything but
//! our nonce in answer), or when it stays silent for longer than [`Redis::patience`].
//!
//! This file keeps the connection and its health; beside it, `errors.rs` maps the driver's errors
//! to ours, `tls.rs` words certificate problems as their fix, and `probe.rs` asks a server that
//! failed what it is.
//!
//! Layer 5 of the list in `lib.rs`.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use redis::ConnectionLike;

use crate::config::{Config, Endpoint, Servers};
use crate::error::{Kind, failure};
use crate::messages;
use crate::scripts::{self, Script};

mod errors;
mod probe;
mod tls;

pub use errors::{START_HINT, unexpected_reply};
use errors::{command_error, connect_error, handshake_error};

/// One connection to one logical Redis server: a standalone server, one node of a quorum, the
/// master a Sentinel names, or a Redis Cluster (which routes each command by its keys).
pub struct Redis {
    con: Con,
    /// What we connected to, for messages (the password redacted).
    display: String,
    /// The one server behind the connection (none for a cluster), to find out after a failure
    /// what is wrong with it.
    endpoint: Option<Endpoint>,
    config: Config,
    target: Target,
    /// A reconnect failed: the connection may still have a reply on its way, so the next call
    /// connects afresh first.
    stale: bool,
    /// The last call failed because the server had closed the connection (it restarted, or
    /// dropped idle clients): the command did not run, and a fresh connection may succeed.
    dropped: bool,
    /// An acquire attempt on this connection has checked what kind of server this is (see
    /// `guard.lua`): a replica and an evicting server are found once per connection.
    checked: bool,
    /// What the last failure left of the connection.
    health: Health,
    /// The read timeout set for the next commands (`--io-timeout`, or longer for a blocking
    /// command), put back after a resynchronisation.
    read_timeout: Duration,
}

/// What the last failure left of a connection: whether [`Redis::recover`] replaces it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Health {
    /// Nothing wrong, or a failure that does not need a new connection.
    Fine,
    /// A reply did not come within the read timeout (since then): the connection is kept, the
    /// driver discards the late replies when they come, and an `ECHO` checks that it is in step
    /// before the next command (see [`Redis::resync`]).
    Late(Instant),
    /// Any other failure (closed, reset, a command perhaps sent in part, an error reply): a
    /// new connection, as after any error before (a Sentinel setup then asks where the master
    /// is now).
    Suspect,
}

enum Con {
    Plain(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Con {
    fn set_timeouts(&mut self, read: Duration, write: Duration) -> redis::RedisResult<()> {
        match self {
            Con::Plain(c) => c
                .set_read_timeout(Some(read))
                .and_then(|()| c.set_write_timeout(Some(write))),
            Con::Cluster(c) => c
                .set_read_timeout(Some(read))
                .and_then(|()| c.set_write_timeout(Some(write))),
        }
    }
}

/// What a [`Redis`] reconnects to.
#[derive(Clone)]
enum Target {
    /// The configuration's one server, cluster or Sentinel master.
    Main,
    /// Node `i` of a quorum.
    Node(usize),
    /// One server found on the way (a cluster's master).
    Fixed(Box<Endpoint>),
}

impl Redis {
    /// Connects to the configured server (for a Sentinel setup: to the master it names now).
    /// With several independent masters, use [`Redis::connect_node`].
    pub fn connect(config: &Config) -> Result<Redis> {
        Self::open(config, Target::Main)
    }

    /// Connects to node `i` of a quorum.
    pub fn connect_node(config: &Config, i: usize) -> Result<Redis> {
        Self::open(config, Target::Node(i))
    }

    fn open(config: &Config, target: Target) -> Result<Redis> {
        let started = Instant::now();
        let endpoint = match (&config.servers, &target) {
            (_, Target::Fixed(ep)) => Some(ep.as_ref().clone()),
            (Servers::One(ep), _) => Some(ep.clone()),
            (Servers::Quorum(eps), Target::Node(i)) => Some(eps[*i].clone()),
            (Servers::Quorum(_), Target::Main) => {
                return Err(failure(
                    Kind::Protocol,
                    "internal error: a quorum has no single server to connect to",
                ));
            }
            (Servers::Cluster(_), _) => None,
            (Servers::Sentinel { master, sentinels }, _) => {
                Some(sentinel_master(config, master, sentinels)?)
            }
        };
        let (con, display) = match (&endpoint, &config.servers) {
            (Some(ep), _) => (Con::Plain(plain(config, ep)?), ep.display.clone()),
            (None, Servers::Cluster(seeds)) => cluster(config, seeds)?,
            (None, _) => unreachable!("only a cluster has no single endpoint"),
        };
        messages::log(config, || {
            format!("connected to {display} in {:.1?}", started.elapsed())
        });
        Ok(Redis {
            con,
            display,
            endpoint,
            config: config.clone(),
            target,
            stale: false,
            dropped: false,
            checked: false,
            health: Health::Fine,
            read_timeout: config.io_timeout,
        })
    }

    /// How long a lock's meta hash outlives the lock and its queue (`--meta-ttl`): the scripts
    /// that write it on this connection refresh its expiry.
    pub fn meta_ttl(&self) -> Duration {
        self.config.meta_ttl
    }

    /// How many entries each lock's history keeps (`--log-max`): the scripts that write it on this
    /// connection trim it to that.
    pub fn log_max(&self) -> u64 {
        self.config.log_max
    }

    /// The key prefix (`--prefix`) of every lock on this connection.
    pub fn prefix(&self) -> &str {
        &self.config.prefix
    }

    /// Whether the last call failed on a connection the server had closed.
    pub fn was_dropped(&self) -> bool {
        self.dropped
    }

    /// Whether this is one node of a quorum (which can go on without it).
    pub fn is_quorum_node(&self) -> bool {
        matches!(self.target, Target::Node(_))
    }

    /// Runs `cmd` on the master that serves `key`'s slot (a Redis Cluster), or on the server.
    pub fn call_on_master_of(
        &mut self,
        what: &str,
        key: &str,
        cmd: &redis::Cmd,
    ) -> Result<redis::Value> {
        if !self.is_cluster() {
            return self.call(what, |con| cmd.query(con));
        }
        let slot: u16 = self.call("CLUSTER KEYSLOT", |con| {
            redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(con)
        })?;
        use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
            slot,
            SlotAddr::Master,
        )));
        let result = match &mut self.con {
            Con::Cluster(cluster) => cluster.route_command(cmd, route),
            Con::Plain(con) => cmd.query(con),
        };
        self.judge(&result, false);
        result.map_err(|e| self.error(what, e))
    }

    /// [`call`](Self::call) for a read that is safe to send twice (the status script). On a
    /// Redis Cluster, a MOVED or ASK answer (the slot moved, or is moving, since the cluster
    /// connection learnt where the slots are) is followed to the node it names, on a connection
    /// of its own (with ASKING first for an ASK), at most [`REDIRECTS`] times: the cluster
    /// connection itself follows none (see `cluster`), since a write must never be sent twice.
    pub fn call_read<T>(
        &mut self,
        what: &str,
        f: impl Fn(&mut dyn ConnectionLike) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let mut redirect = None;
        let mut result = self.call(what, |con| {
            let result = f(con);
            redirect = redirection(&result);
            result
        });
        let Servers::Cluster(seeds) = &self.config.servers else {
            return result;
        };
        let seed = seeds[0].clone();
        for _ in 0..REDIRECTS {
            let Some((host, port, ask)) = redirect.take() else {
                break;
            };
            let node = relocate(&seed, &host, port, None);
            let mut node = Redis::open(&self.config, Target::Fixed(Box::new(node)))?;
            result = node.call(what, |con| {
                let result = if ask { f(&mut Asking(con)) } else { f(con) };
                redirect = redirection(&result);
                result
            });
        }
        result
    }

    /// Whether the server is part of a Redis Cluster: the cluster connection, or one of its
    /// masters on a connection of its own (see [`Redis::cluster_masters`]).
    pub fn in_cluster(&self) -> bool {
        matches!(self.config.servers, Servers::Cluster(_))
    }

    /// Whether this is a Redis Cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self.con, Con::Cluster(_))
    }

    /// After a failed call: replaces the connection if it must be (see [`Health`]), and keeps
    /// it if it is only late (it is resynchronised before its next command).
    pub fn recover(&mut self) -> Result<()> {
        if self.is_late() {
            return Ok(());
        }
        self.reconnect()
    }

    /// Whether the last failure left the connection late, and kept: the next call
    /// resynchronises it (or replaces it, if it stays silent too long).
    pub fn is_late(&self) -> bool {
        !self.stale && matches!(self.health, Health::Late(_))
    }

    /// How long a late connection may stay silent before it is given up for a new one: two
    /// whole reconnects (`--connect-timeout` + `--io-timeout`, twice). A stall that short is
    /// sat out on the connection we have, which a new one could not have beaten (the server is
    /// silent to it too) and which a full server would refuse; past it, a connection that a
    /// network device dropped silently, or a master that a Sentinel failover replaced, is left
    /// for a new one.
    pub fn patience(&self) -> Duration {
        (self.config.connect_timeout + self.config.io_timeout) * 2
    }

    /// Replaces the connection with a fresh one (after a timeout, the old one may still have a
    /// reply on its way). A Sentinel setup asks the Sentinels again.
    pub fn reconnect(&mut self) -> Result<()> {
        match Redis::open(&self.config, self.target.clone()) {
            Ok(fresh) => *self = fresh,
            Err(e) => {
                self.stale = true;
                return Err(e);
            }
        }
        Ok(())
    }

    /// The masters of a Redis Cluster, each on a connection of its own (for SCAN, which sees
    /// one node's keys only).
    pub fn cluster_masters(&mut self) -> Result<Vec<Redis>> {
        let Servers::Cluster(seeds) = &self.config.servers else {
            return Ok(Vec::new());
        };
        let seed = seeds[0].clone();
        let slots: Vec<redis::Value> = self.call("CLUSTER SLOTS", |con| {
            redis::cmd("CLUSTER").arg("SLOTS").query(con)
        })?;
        let mut masters: Vec<(String, u16)> = Vec::new();
        for range in &slots {
            // [start, end, [host, port, id], replicas...]
            if let redis::Value::Array(parts) = range
                && let Some(redis::Value::Array(node)) = parts.get(2)
                && let [host, redis::Value::Int(port), ..] = node.as_slice()
                && let Ok(host) = redis::from_redis_value::<String>(host.clone())
                && let Ok(port) = u16::try_from(*port)
                && !masters.contains(&(host.clone(), port))
            {
                masters.push((host, port));
            }
        }
        masters
            .into_iter()
            .map(|(host, port)| {
                let ep = relocate(&seed, &host, port, None);
                Redis::open(&self.config, Target::Fixed(Box::new(ep)))
            })
            .collect()
    }

    /// Runs one acquire attempt: `invoke` runs the script it is given with the attempt's keys and
    /// arguments. The first attempt on a connection runs the variant that first checks the server
    /// (a replica is refused, and so is an allkeys-* maxmemory-policy without --allow-eviction;
    /// a volatile-* one is warned about), in the same round trip.
    pub fn call_acquire(
        &mut self,
        attempts: &scripts::Attempts,
        invoke: impl FnOnce(&Script, &mut dyn ConnectionLike) -> redis::RedisResult<Vec<redis::Value>>,
    ) -> Result<Vec<redis::Value>> {
        self.ready("acquire")?;
        if self.checked {
            return self.call("acquire", |con| invoke(attempts.unchecked, con));
        }
        let script: &Script = if self.config.allow_eviction {
            attempts.checked_allow_eviction
        } else {
            attempts.checked
        };
        let mut reply = self.call("acquire", |con| {
            let mut counted = Counted { con, requests: 0 };
            let reply = invoke(script, &mut counted)?;
            if counted.requests > 1 {
                // The server did not know the script (a first use, a restart, SCRIPT FLUSH), so
                // it will not know the one later attempts run either: load it now, not in the
                // round trip of a waiter's turn.
                attempts.unchecked.load(con)?;
            }
            Ok(reply)
        })?;
        self.checked = true;
        let policy = match reply.pop() {
            Some(v) => redis::from_redis_value::<String>(v).unwrap_or_default(),
            None => String::new(),
        };
        self.warn_eviction(&policy);
        Ok(reply)
    }

    /// Warns, once per server and process (unless -q or --allow-eviction), that the server's
    /// maxmemory-policy evicts keys with a TTL, which every lock key has.
    fn warn_eviction(&self, policy: &str) {
        static WARNED: Mutex<Vec<String>> = Mutex::new(Vec::new());
        if !policy.starts_with("volatile-") || self.config.allow_eviction {
            return;
        }
        let mut warned = WARNED.lock().unwrap_or_else(PoisonError::into_inner);
        if warned.contains(&self.display) {
            return;
        }
        warned.push(self.display.clone());
        messages::warning(
            &self.config,
            format_args!(
                "{} has maxmemory-policy {policy}: when it runs out of memory it evicts keys with \
                 a TTL first, and every lock key has one, so a held lock can vanish; set \
                 maxmemory-policy noeviction (or pass --allow-eviction to accept the risk)",
                self.display
            ),
        );
    }

    /// Runs one round trip, logging it with `-v`, and names the server in any error.
    pub fn call<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut dyn ConnectionLike) -> redis::RedisResult<T>,
    ) -> Result<T> {
        self.logged_call(what, false, f)
    }

    /// [`call`](Self::call) for a blocking command whose read timeout is the end of the wait: a
    /// timeout is still an error for the caller, but `-v` logs it as the wake-up it is.
    pub fn call_waiting<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut dyn ConnectionLike) -> redis::RedisResult<T>,
    ) -> Result<T> {
        self.logged_call(what, true, f)
    }

    fn logged_call<T>(
        &mut self,
        what: &str,
        waiting: bool,
        f: impl FnOnce(&mut dyn ConnectionLike) -> redis::RedisResult<T>,
    ) -> Result<T> {
        self.ready(what)?;
        let started = Instant::now();
        let (result, torn) = match &mut self.con {
            Con::Plain(con) => {
                let mut watched = Watched { con, torn: false };
                let result = f(&mut watched);
                (result, watched.torn)
            }
            Con::Cluster(con) => (f(con.as_mut()), false),
        };
        self.judge(&result, torn);
        messages::log(&self.config, || {
            let outcome = match &result {
                Ok(_) => "ok".to_string(),
                Err(e) if waiting && e.is_timeout() => "no wake-up; looking again".to_string(),
                Err(e) => format!(
                    "error: {}",
                    crate::printable::printable(&crate::error::redis_text(e))
                ),
            };
            format!(
                "{what} on {}: {outcome} ({:.1?})",
                self.display,
                started.elapsed()
            )
        });
        result.map_err(|e| self.error(what, e))
    }

    /// Makes the connection ready for command `what`: a new one after a failed reconnect, a
    /// late one resynchronised.
    fn ready(&mut self, what: &str) -> Result<()> {
        if self.stale {
            return self.reconnect();
        }
        match self.health {
            Health::Late(since) => self.resync(since, what),
            Health::Fine | Health::Suspect => Ok(()),
        }
    }

    /// What a call's `result` leaves of the connection (`torn`: a command may have gone out in
    /// part, or a pipeline failed without saying where). Only a reply that did not come in time
    /// on a plain connection, all of whose commands went out whole, leaves it late: the driver
    /// (redis 1.x) counts such a reply and discards it when it comes.
    fn judge<T>(&mut self, result: &redis::RedisResult<T>, torn: bool) {
        let Err(e) = result else {
            self.dropped = false;
            self.health = Health::Fine;
            return;
        };
        self.dropped = e.is_connection_dropped() && !e.is_timeout();
        let open = match &self.con {
            Con::Plain(con) => con.is_open(),
            Con::Cluster(_) => false,
        };
        self.health = match self.health {
            _ if !(open && !torn && e.is_io_error() && e.is_timeout()) => Health::Suspect,
            Health::Late(since) => Health::Late(since),
            Health::Fine | Health::Suspect => Health::Late(Instant::now()),
        };
    }

    /// Brings a late connection back in step before its next command: sends `ECHO <nonce>` and
    /// reads one reply, the driver discarding the late ones before it; our nonce proves the
    /// stream in step. Still no answer within `--io-timeout`: the call fails and the connection
    /// stays late (the next call tries again), until it has been silent for [`Redis::patience`];
    /// then, or when anything but our nonce comes back, or the connection broke, a new one.
    /// `what`: the command that waits, for the error (a timeout, as if it had been sent).
    fn resync(&mut self, since: Instant, what: &str) -> Result<()> {
        let silent = since.elapsed();
        let patience = self.patience();
        let nonce = format!("redlock-resync-{}", uuid::Uuid::new_v4().simple());
        let started = Instant::now();
        let step = match &mut self.con {
            Con::Plain(con) if silent < patience => {
                echo(con, &nonce, self.config.io_timeout, self.read_timeout)
            }
            _ => {
                messages::log(&self.config, || {
                    format!(
                        "{} has not answered for {silent:.1?}: connecting again",
                        self.display
                    )
                });
                return self.reconnect();
            }
        };
        messages::log(&self.config, || {
            let outcome = match &step {
                Ok(()) => "in step again".to_string(),
                Err((_, true)) => "no answer yet; still late".to_string(),
                Err((e, false)) => format!(
                    "out of step ({}); connecting again",
                    crate::printable::printable(&crate::error::redis_text(e))
                ),
            };
            format!(
                "ECHO to resynchronise {} ({silent:.1?} after a reply did not come in time): \
                 {outcome} ({:.1?})",
                self.display,
                started.elapsed()
            )
        });
        match step {
            Ok(()) => {
                self.health = Health::Fine;
                Ok(())
            }
            // Said as the command's own timeout (`-v` says more): it waits for the server too.
            Err((e, true)) => Err(self.error(what, e)),
            Err((_, false)) => self.reconnect(),
        }
    }

    /// The error for a failed command, with what we can find out about its cause.
    fn error(&self, what: &str, e: redis::RedisError) -> anyhow::Error {
        command_error(&self.display, self.endpoint.as_ref(), &self.config, what, e)
    }

    /// Changes the read timeout, for blocking commands that wait longer than `--io-timeout`.
    pub fn set_read_timeout(&mut self, timeout: Duration) -> Result<()> {
        let io = self.config.io_timeout;
        self.read_timeout = timeout;
        self.con
            .set_timeouts(timeout, io)
            .with_context(|| format!("cannot set timeouts on {}", self.display))
    }

    /// Sets the read timeout back to `--io-timeout`.
    pub fn restore_read_timeout(&mut self) -> Result<()> {
        self.set_read_timeout(self.config.io_timeout)
    }
}

/// Sends `ECHO nonce` on `con` and reads the next reply within `io` (then sets the read timeout
/// back to `read`). The error says whether the connection is merely still late (no answer in
/// time), or broke.
fn echo(
    con: &mut redis::Connection,
    nonce: &str,
    io: Duration,
    read: Duration,
) -> std::result::Result<(), (redis::RedisError, bool)> {
    let broken = |e| (e, false);
    con.set_read_timeout(Some(io)).map_err(broken)?;
    let echo = redis::cmd("ECHO").arg(nonce).get_packed_command();
    let reply = con
        .send_packed_command(&echo)
        .map_err(broken)
        .and_then(|()| {
            loop {
                match con.recv_response() {
                    // RESP3 pushes are not replies.
                    Ok(redis::Value::Push { .. }) => continue,
                    Ok(reply) => break Ok(reply),
                    Err(e) => {
                        let late = e.is_timeout() && con.is_open();
                        break Err((e, late));
                    }
                }
            }
        });
    let restored = con.set_read_timeout(Some(read)).map_err(broken);
    let reply = reply?;
    restored?;
    match reply {
        redis::Value::BulkString(b) if b == nonce.as_bytes() => Ok(()),
        // Not printed: a reply may carry a token.
        _ => Err(broken(redis::RedisError::from((
            redis::ErrorKind::Parse,
            "out of step: another reply than our nonce in answer to ECHO",
        )))),
    }
}

/// How many MOVED or ASK answers [`Redis::call_read`] follows for one read: a slot moving while
/// it reads takes two (an ASK, then a MOVED once the move is done).
const REDIRECTS: usize = 3;

/// Where a Redis Cluster's MOVED or ASK answer points (host, port), and whether it is an ASK.
fn redirection<T>(result: &redis::RedisResult<T>) -> Option<(String, u16, bool)> {
    let e = result.as_ref().err()?;
    let (addr, _slot) = e.redirect_node()?;
    let (host, port) = addr.rsplit_once(':')?;
    let ask = e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Ask);
    Some((host.to_string(), port.parse().ok()?, ask))
}

/// A connection that sends ASKING before each request, for a node that is importing the slot of
/// the keys (an ASK redirection): it serves them only to a client that says so, for the next
/// command only (a script call sends up to three: EVALSHA, SCRIPT LOAD, EVALSHA).
struct Asking<'a>(&'a mut dyn ConnectionLike);

impl Asking<'_> {
    const ASKING: &'static [u8] = b"*1\r\n$6\r\nASKING\r\n";
}

impl ConnectionLike for Asking<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        let mut replies = self.req_packed_commands(cmd, 0, 1)?;
        replies.pop().ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "no reply"))
        })
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        let packed = [Self::ASKING, cmd].concat();
        self.0.req_packed_commands(&packed, offset + 1, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.0.check_connection()
    }

    fn is_open(&self) -> bool {
        self.0.is_open()
    }
}

/// A plain connection that knows whether a failed command went out whole: only then can a
/// reply that did not come in time be waited for on the same connection (see [`Health`]).
/// One command is sent, then its reply read, as the driver does; a pipeline fails without saying
/// which, so any I/O error of one counts as `torn`.
struct Watched<'a> {
    con: &'a mut redis::Connection,
    /// A command may have gone out in part (its send failed), or a pipeline failed.
    torn: bool,
}

impl ConnectionLike for Watched<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        if let Err(e) = self.con.send_packed_command(cmd) {
            self.torn = true;
            return Err(e);
        }
        loop {
            match self.con.recv_response()? {
                // RESP3 pushes are not replies (as the driver's own loop says).
                redis::Value::Push { .. } => continue,
                reply => return Ok(reply),
            }
        }
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        let replies = self.con.req_packed_commands(cmd, offset, count);
        if replies.as_ref().is_err_and(|e| e.is_io_error()) {
            self.torn = true;
        }
        replies
    }

    fn get_db(&self) -> i64 {
        self.con.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.con.check_connection()
    }

    fn is_open(&self) -> bool {
        self.con.is_open()
    }
}

/// A connection that counts the requests made on it (a script call is one, or three when the
/// server has to be given the script first).
struct Counted<'a> {
    con: &'a mut dyn ConnectionLike,
    requests: usize,
}

impl ConnectionLike for Counted<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        self.requests += 1;
        self.con.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        self.requests += 1;
        self.con.req_packed_commands(cmd, offset, count)
    }

    fn req_command(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        // Forwarded as a command, not packed: a Cluster routes it by its key.
        self.requests += 1;
        self.con.req_command(cmd)
    }

    fn get_db(&self) -> i64 {
        self.con.get_db()
    }

    fn supports_pipelining(&self) -> bool {
        self.con.supports_pipelining()
    }

    fn check_connection(&mut self) -> bool {
        self.con.check_connection()
    }

    fn is_open(&self) -> bool {
        self.con.is_open()
    }
}

/// A client for `info`, over TLS with `tls` when given.
fn client_for(
    info: redis::ConnectionInfo,
    tls: Option<&crate::config::TlsFiles>,
) -> redis::RedisResult<redis::Client> {
    match tls {
        #[cfg(feature = "tls")]
        Some(certs) => redis::Client::build_with_tls(info, certs.clone()),
        #[cfg(not(feature = "tls"))]
        Some(none) => match *none {},
        None => redis::Client::open(info),
    }
}

/// Opens a connection to one server, authenticates, and sets the I/O timeouts.
pub fn plain(config: &Config, ep: &Endpoint) -> Result<redis::Connection> {
    let client = client_for(ep.info.clone(), ep.tls.as_ref()).map_err(|e| {
        crate::error::usage(format!(
            "invalid Redis URL {}: {}",
            ep.display,
            crate::error::redis_text(&e)
        ))
    })?;
    let mut con = client
        .get_connection_with_timeout(config.connect_timeout)
        .map_err(|e| connect_error(&ep.display, Some(ep), config, e))?;
    if ep.tls_handshake_pending() {
        // rustls shakes hands on the first read or write: do it now, under the connect
        // timeout, so that a certificate problem is reported as one.
        con.set_read_timeout(Some(config.connect_timeout))
            .and_then(|()| con.set_write_timeout(Some(config.connect_timeout)))
            .and_then(|()| redis::cmd("PING").query::<()>(&mut con))
            .map_err(|e| handshake_error(ep, config, e))?;
    }
    con.set_read_timeout(Some(config.io_timeout))
        .and_then(|()| con.set_write_timeout(Some(config.io_timeout)))
        .with_context(|| format!("cannot set timeouts on {}", ep.display))?;
    Ok(con)
}

/// A connection of its own for SUBSCRIBE (see `notify.rs`), to where a lock's announcements are
/// published: the server, Sentinel's master, a quorum's queue node (the first URL), or the first
/// seed of a Cluster that answers (a Cluster passes PUBLISH on to every node).
pub fn subscriber(config: &Config) -> Result<redis::Connection> {
    match &config.servers {
        Servers::One(ep) => plain(config, ep),
        Servers::Quorum(eps) => plain(config, &eps[0]),
        Servers::Sentinel { master, sentinels } => {
            plain(config, &sentinel_master(config, master, sentinels)?)
        }
        Servers::Cluster(seeds) => {
            let mut last = None;
            for seed in seeds {
                match plain(config, seed) {
                    Ok(con) => return Ok(con),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| crate::error::usage("no cluster URL")))
        }
    }
}

/// Sends `command` (a SUBSCRIBE or PSUBSCRIBE of `count` channels or patterns) on `con` and reads
/// its confirmations. Not `PubSub::subscribe`: it discards the replies, and a refusal (`-NOPERM`
/// for an ACL user without the channel, `-NOAUTH` after a password change) comes as a reply, not
/// as an error, so a subscription that was never made would be waited on forever. The outer
/// error: the connection failed; the inner one: the server refused, with its code and detail.
pub fn confirm_subscription(
    con: &mut redis::Connection,
    command: &redis::Cmd,
    count: usize,
) -> redis::RedisResult<std::result::Result<(), (redis::RedisError, String)>> {
    con.send_packed_command(&command.get_packed_command())?;
    for _ in 0..count {
        if let Err(e) = con.recv_response()?.extract_error() {
            let why = [e.code(), e.detail()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" ");
            return Ok(Err((e, why)));
        }
    }
    Ok(Ok(()))
}

/// Connects to a Redis Cluster through its seed nodes.
fn cluster(config: &Config, seeds: &[Endpoint]) -> Result<(Con, String)> {
    let display = format!(
        "the cluster at {}",
        seeds
            .iter()
            .map(|e| e.display.as_str())
            .collect::<Vec<_>>()
            .join(",")
    );
    let first = &seeds[0];
    let settings = first.info.redis_settings();
    let mut builder =
        redis::cluster::ClusterClientBuilder::new(seeds.iter().map(|e| e.info.clone()))
            // No retries: the client would re-send a command that timed out (a BLPOP, a script)
            // on the connection that still has its reply on the way. A redirection (a
            // resharding or failover in the middle of a command) is then an error like any
            // other, and our own reconnect-and-clean-up applies.
            .retries(0);
    if let Some(pw) = settings.password() {
        builder = builder.password(pw);
    }
    if let Some(user) = settings.username() {
        builder = builder.username(user);
    }
    if let Some(certs) = &first.tls {
        #[cfg(feature = "tls")]
        {
            builder = builder.certs(certs.clone());
        }
        #[cfg(not(feature = "tls"))]
        match *certs {}
    }
    let client = builder.build().map_err(|e| {
        crate::error::usage(format!(
            "invalid cluster URLs: {}",
            crate::error::redis_text(&e)
        ))
    })?;
    let params = redis::cluster::ClusterConfig::new()
        .set_connection_timeout(config.connect_timeout)
        .set_response_timeout(config.io_timeout);
    let con = client
        .get_connection_with_config(params)
        .map_err(|e| connect_error(&display, None, config, e))?;
    con.set_read_timeout(Some(config.io_timeout))
        .and_then(|()| con.set_write_timeout(Some(config.io_timeout)))
        .with_context(|| format!("cannot set timeouts on {display}"))?;
    Ok((Con::Cluster(Box::new(con)), display))
}

/// Asks the Sentinels, in order, where `master` is; the first that knows it decides.
fn sentinel_master(config: &Config, master: &str, sentinels: &[Endpoint]) -> Result<Endpoint> {
    let mut why = Vec::new();
    // A Sentinel that refused our credentials will refuse them again: that is the fix to make.
    let mut refused = false;
    for s in sentinels {
        let reply = plain(config, s).and_then(|mut con| {
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(master)
                .query::<Option<(String, u16)>>(&mut con)
                .map_err(|e| {
                    command_error(
                        &s.display,
                        Some(s),
                        config,
                        "SENTINEL get-master-addr-by-name",
                        e,
                    )
                })
        });
        match reply {
            Ok(Some((host, port))) => {
                return Ok(relocate(s, &host, port, Some(master)));
            }
            Ok(None) => why.push(format!("{} does not know '{master}'", s.display)),
            Err(e) => {
                refused |= crate::error::kind_of(&e) == Kind::Auth;
                why.push(format!("{e:#}"));
            }
        }
    }
    Err(failure(
        if refused {
            Kind::Auth
        } else {
            Kind::Unavailable
        },
        format!(
            "no Sentinel named the master '{master}': {}",
            why.join("; ")
        ),
    ))
}

/// The endpoint of another server with the settings (TLS, user, password) of `base`.
fn relocate(base: &Endpoint, host: &str, port: u16, master: Option<&str>) -> Endpoint {
    let addr = match base.info.addr() {
        redis::ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => redis::ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => redis::ConnectionAddr::Tcp(host.to_string(), port),
    };
    let scheme = match addr {
        redis::ConnectionAddr::TcpTls { .. } => "rediss",
        _ => "redis",
    };
    let url = format!("{scheme}://{}:{port}", bracket(host));
    let display = match master {
        Some(m) => format!("{url} (master '{m}' via {})", base.display),
        None => url.clone(),
    };
    Endpoint {
        info: base.info.clone().set_addr(addr),
        display,
        public: url,
        tls: base.tls.clone(),
    }
}

/// An IPv6 address in a URL goes in brackets.
fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_or_ask_answer_names_the_node_to_read_from() {
        let answer = |kind, detail: &str| -> redis::RedisResult<()> {
            Err(redis::RedisError::from((
                redis::ErrorKind::Server(kind),
                "redirected",
                detail.to_string(),
            )))
        };
        use redis::ServerErrorKind::{Ask, Moved, TryAgain};
        let to = |host: &str, port, ask| Some((host.to_string(), port, ask));
        assert_eq!(
            redirection(&answer(Ask, "3999 127.0.0.1:6381")),
            to("127.0.0.1", 6381, true)
        );
        assert_eq!(
            redirection(&answer(Moved, "3999 ::1:6381")),
            to("::1", 6381, false)
        );
        for not_one in [
            answer(TryAgain, "3999 127.0.0.1:6381"),
            answer(Moved, "3999 127.0.0.1"),
            answer(Moved, "3999 127.0.0.1:99999"),
            Ok(()),
        ] {
            assert_eq!(redirection(&not_one), None, "{not_one:?}");
        }
    }
}
