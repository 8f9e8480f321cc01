//! Connecting to Redis with timeouts, TLS and auth, and running commands with logging.
//!
//! Every connection has a connect timeout and a read/write timeout, so a dead or silent server is
//! an error after at most `--connect-timeout` + `--io-timeout`, never a hang. Errors carry the
//! redacted URL and a hint at the fix.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use redis::ConnectionLike;

use crate::config::{Config, Endpoint, Servers};
use crate::error::{Kind, failure, redis_kind};

/// One connection to one logical Redis server: a standalone server, one node of a quorum, the
/// master a Sentinel names, or a Redis Cluster (which routes each command by its keys).
pub struct Redis {
    con: Con,
    /// What we connected to, for messages (the password redacted).
    display: String,
    config: Config,
    target: Target,
    /// A reconnect failed: the connection may still have a reply on its way, so the next call
    /// connects afresh first.
    stale: bool,
    /// The last call failed because the server had closed the connection (it restarted, or
    /// dropped idle clients): the command did not run, and a fresh connection may succeed.
    dropped: bool,
}

enum Con {
    Plain(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Con {
    fn get(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Con::Plain(c) => c,
            Con::Cluster(c) => c.as_mut(),
        }
    }

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
        let (con, display) = match (&config.servers, &target) {
            (_, Target::Fixed(ep)) => (Con::Plain(plain(config, ep)?), ep.display.clone()),
            (Servers::One(ep), _) => (Con::Plain(plain(config, ep)?), ep.display.clone()),
            (Servers::Quorum(eps), Target::Node(i)) => (
                Con::Plain(plain(config, &eps[*i])?),
                eps[*i].display.clone(),
            ),
            (Servers::Quorum(_), Target::Main) => {
                return Err(failure(
                    Kind::Protocol,
                    "internal error: a quorum has no single server to connect to",
                ));
            }
            (Servers::Cluster(seeds), _) => cluster(config, seeds)?,
            (Servers::Sentinel { master, sentinels }, _) => {
                let ep = sentinel_master(config, master, sentinels)?;
                (Con::Plain(plain(config, &ep)?), ep.display.clone())
            }
        };
        if config.verbose {
            eprintln!(
                "redlock: connected to {display} in {:.1?}",
                started.elapsed()
            );
        }
        Ok(Redis {
            con,
            display,
            config: config.clone(),
            target,
            stale: false,
            dropped: false,
        })
    }

    /// The server as shown in messages (no password).
    pub fn display(&self) -> &str {
        &self.display
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
        result.map_err(|e| command_error(&self.display, what, e))
    }

    /// Whether this is a Redis Cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self.con, Con::Cluster(_))
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

    /// Runs one round trip, logging it with `-v`, and names the server in any error.
    pub fn call<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut dyn ConnectionLike) -> redis::RedisResult<T>,
    ) -> Result<T> {
        if self.stale {
            self.reconnect()?;
        }
        let started = Instant::now();
        let result = f(self.con.get());
        self.dropped = result
            .as_ref()
            .is_err_and(|e| e.is_connection_dropped() && !e.is_timeout());
        if self.config.verbose {
            let outcome = match &result {
                Ok(_) => "ok".to_string(),
                Err(e) => format!("error: {e}"),
            };
            eprintln!(
                "redlock: {what} on {}: {outcome} ({:.1?})",
                self.display,
                started.elapsed()
            );
        }
        result.map_err(|e| command_error(&self.display, what, e))
    }

    /// Changes the read timeout, for blocking commands that wait longer than `--io-timeout`.
    pub fn set_read_timeout(&mut self, timeout: Duration) -> Result<()> {
        let io = self.config.io_timeout;
        self.con
            .set_timeouts(timeout, io)
            .with_context(|| format!("cannot set timeouts on {}", self.display))
    }

    /// Sets the read timeout back to `--io-timeout`.
    pub fn restore_read_timeout(&mut self) -> Result<()> {
        self.set_read_timeout(self.config.io_timeout)
    }
}

/// Opens a connection to one server, authenticates, and sets the I/O timeouts.
pub fn plain(config: &Config, ep: &Endpoint) -> Result<redis::Connection> {
    let client = match &ep.tls {
        Some(certs) => redis::Client::build_with_tls(ep.info.clone(), certs.clone()),
        None => redis::Client::open(ep.info.clone()),
    }
    .map_err(|e| crate::error::usage(format!("invalid Redis URL {}: {e}", ep.display)))?;
    let mut con = client
        .get_connection_with_timeout(config.connect_timeout)
        .map_err(|e| connect_error(&ep.display, config.connect_timeout, e))?;
    if ep.tls_handshake_pending() {
        // rustls shakes hands on the first read or write: do it now, under the connect
        // timeout, so that a certificate problem is reported as one.
        con.set_read_timeout(Some(config.connect_timeout))
            .and_then(|()| con.set_write_timeout(Some(config.connect_timeout)))
            .and_then(|()| redis::cmd("PING").query::<()>(&mut con))
            .map_err(|e| command_error(&ep.display, "the TLS handshake", e))?;
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
        builder = builder.certs(certs.clone());
    }
    let client = builder
        .build()
        .map_err(|e| crate::error::usage(format!("invalid cluster URLs: {e}")))?;
    let params = redis::cluster::ClusterConfig::new()
        .set_connection_timeout(config.connect_timeout)
        .set_response_timeout(config.io_timeout);
    let con = client
        .get_connection_with_config(params)
        .map_err(|e| connect_error(&display, config.connect_timeout, e))?;
    con.set_read_timeout(Some(config.io_timeout))
        .and_then(|()| con.set_write_timeout(Some(config.io_timeout)))
        .with_context(|| format!("cannot set timeouts on {display}"))?;
    Ok((Con::Cluster(Box::new(con)), display))
}

/// Asks the Sentinels, in order, where `master` is; the first that knows it decides.
fn sentinel_master(config: &Config, master: &str, sentinels: &[Endpoint]) -> Result<Endpoint> {
    let mut why = Vec::new();
    for s in sentinels {
        let reply = plain(config, s).and_then(|mut con| {
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(master)
                .query::<Option<(String, u16)>>(&mut con)
                .map_err(|e| command_error(&s.display, "SENTINEL get-master-addr-by-name", e))
        });
        match reply {
            Ok(Some((host, port))) => {
                return Ok(relocate(s, &host, port, Some(master)));
            }
            Ok(None) => why.push(format!("{} does not know '{master}'", s.display)),
            Err(e) => why.push(format!("{e:#}")),
        }
    }
    Err(failure(
        Kind::Unavailable,
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

fn connect_error(display: &str, timeout: Duration, e: redis::RedisError) -> anyhow::Error {
    let kind = redis_kind(&e);
    if kind == Kind::Auth {
        let detail = e.detail().unwrap_or("authentication failed").to_string();
        return failure(
            Kind::Auth,
            format!(
                "{display} refused the credentials ({detail}); check the URL's user and \
                 password, REDLOCK_PASSWORD or --password-file"
            ),
        );
    }
    let why = if e.is_timeout() {
        format!("timed out after {}", humantime::format_duration(timeout))
    } else if e.is_connection_refusal() {
        "connection refused".to_string()
    } else {
        e.to_string()
    };
    let hint = tls_hint(&why).unwrap_or("; start redis-server or set --url / REDLOCK_URL");
    let kind = if kind == Kind::Protocol {
        Kind::Unavailable
    } else {
        kind
    };
    failure(kind, format!("cannot connect to {display} ({why}){hint}"))
}

fn command_error(display: &str, what: &str, e: redis::RedisError) -> anyhow::Error {
    // One line, the cause said once: RedisError's Display already includes its detail.
    let text = e.to_string();
    if let Some(hint) = tls_hint(&text) {
        return failure(
            Kind::Unavailable,
            format!("TLS handshake with {display} failed ({text}){hint}"),
        );
    }
    // Redis refuses long commands from clients that have not authenticated, before NOAUTH.
    if e.code() == Some("NOAUTH") || text.contains("unauthenticated") {
        return failure(
            Kind::Auth,
            format!(
                "{display} requires a password; put it in the URL, REDLOCK_PASSWORD or \
                 --password-file"
            ),
        );
    }
    match redis_kind(&e) {
        Kind::Unavailable if e.is_timeout() => failure(
            Kind::Unavailable,
            format!("{display} did not answer {what} within --io-timeout"),
        ),
        Kind::Unavailable => failure(
            Kind::Unavailable,
            format!("lost the connection to {display} during {what} ({text})"),
        ),
        Kind::Auth => failure(
            Kind::Auth,
            format!("{display} refused {what} (ACL permission): {text}"),
        ),
        kind => failure(
            kind,
            format!("{display} answered {what} with an error: {text}"),
        ),
    }
}

/// The fix for a certificate problem, if `text` describes one.
fn tls_hint(text: &str) -> Option<&'static str> {
    let certificate = [
        "certificate",
        "UnknownIssuer",
        "CertNotValid",
        "NotValidForName",
    ]
    .iter()
    .any(|needle| text.contains(needle));
    certificate.then_some("; pass the CA that signed the server's certificate with --tls-ca")
}

/// An error for a reply that does not have the shape a script promises.
pub fn unexpected_reply(what: &str, detail: impl std::fmt::Display) -> anyhow::Error {
    failure(
        Kind::Protocol,
        format!("unexpected reply to {what}: {detail}"),
    )
}
