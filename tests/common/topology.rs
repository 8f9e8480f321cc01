//! Redis topologies beyond one server: a three-master [`Cluster`], and a master with one replica
//! watched by a [`Sentinel`] ([`Replicated`]).
//!
//! Every process is ours and dies with its fixture: the data servers are [`RedisServer`]s (free
//! loopback port, temp dir, log on panic, kill on drop) and the sentinel is killed the same way.
//! Setting up waits on the topology's own reports (`cluster_state:ok` on every node, the
//! sentinel's view of the replica), each wait bounded. `redis-cli` is needed to create a cluster;
//! without it a test is skipped like without `redis-server` (unless `REDLOCK_REQUIRE_REDIS=1`).

use super::*;

/// The bound for building a topology or for it to settle after a change.
const SETTLE: Duration = Duration::from_secs(30);

fn installed(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

/// Whether `program` may be used; a note (or, with `REDLOCK_REQUIRE_REDIS=1`, a panic) if not.
fn require(program: &str) -> bool {
    if installed(program) {
        return true;
    }
    if std::env::var_os("REDLOCK_REQUIRE_REDIS").is_some_and(|v| v == "1") {
        panic!("{program} is not on PATH and REDLOCK_REQUIRE_REDIS=1");
    }
    eprintln!("note: skipping this test: {program} is not installed");
    false
}

/// `ROLE` of a server: `master` or `slave`.
pub fn role(server: &RedisServer) -> String {
    try_role(server).unwrap_or_else(|e| panic!("ROLE on port {}: {e}", server.port()))
}

/// `ROLE`, or the error: while the sentinel reconfigures a server it kills its clients.
fn try_role(server: &RedisServer) -> redis::RedisResult<String> {
    try_role_with(server, &Auth::default())
}

/// What a client needs besides the address: a password, the CA for TLS.
#[derive(Clone, Default)]
struct Auth {
    password: Option<String>,
    tls: Option<Arc<Certs>>,
}

/// [`try_role`] on a server that requires `password` or TLS.
fn try_role_with(server: &RedisServer, auth: &Auth) -> redis::RedisResult<String> {
    let mut con = connect(&server.url(), auth)?;
    let reply: Vec<redis::Value> = redis::cmd("ROLE").query(&mut con)?;
    Ok(redis::from_redis_value(reply[0].clone())?)
}

/// A connection to `url` (`rediss://` with `auth.tls`), authenticated with `auth.password` if
/// given, with bounded timeouts.
fn connect(url: &str, auth: &Auth) -> redis::RedisResult<redis::Connection> {
    let mut info = redis::IntoConnectionInfo::into_connection_info(url)?;
    if let Some(pw) = &auth.password {
        let settings = info.redis_settings().clone().set_password(pw.clone());
        info = info.set_redis_settings(settings);
    }
    let client = match &auth.tls {
        None => redis::Client::open(info)?,
        Some(certs) => redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(std::fs::read(certs.path("ca.crt")).unwrap()),
            },
        )?,
    };
    let con = client.get_connection_with_timeout(Duration::from_secs(2))?;
    con.set_read_timeout(Some(Duration::from_secs(10)))?;
    Ok(con)
}

/// Three `redis-server`s in cluster mode, each a master of a third of the slots, no replicas
/// unless [`Cluster::add_replica`] gives one some.
pub struct Cluster {
    nodes: Vec<RedisServer>,
    replicas: Vec<RedisServer>,
}

/// A `redis-server` in cluster mode, not yet part of any cluster.
fn cluster_node() -> Option<RedisServer> {
    // The bus port is given, not the default port + 10000: a free port above 55535 would leave
    // none for the bus.
    RedisServer::builder()
        .arg("--cluster-enabled")
        .arg("yes")
        .arg("--cluster-config-file")
        .arg("nodes.conf") // in the server's --dir
        .arg("--cluster-node-timeout")
        .arg("2000")
        .arg("--cluster-port")
        .arg(free_port().to_string())
        // A replica syncs at once, without waiting 5s for more replicas to join.
        .arg("--repl-diskless-sync-delay")
        .arg("0")
        .start()
}

impl Cluster {
    /// Creates the cluster with `redis-cli --cluster create` and waits until every node says
    /// `cluster_state:ok`; `None` when the test must be skipped.
    pub fn start() -> Option<Cluster> {
        if !require("redis-cli") {
            return None;
        }
        let nodes = (0..3).map(|_| cluster_node()).collect::<Option<Vec<_>>>()?;
        let cluster = Cluster {
            nodes,
            replicas: Vec::new(),
        };
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create.args(["--cluster-replicas", "0", "--cluster-yes"]);
        let out = create.run();
        assert!(out.status.success(), "redis-cli --cluster create:\n{out}");
        let ok = wait_for(
            || {
                cluster.nodes.iter().all(|n| {
                    n.query::<String>(&["CLUSTER", "INFO"])
                        .contains("cluster_state:ok")
                })
            },
            SETTLE,
        );
        assert!(
            ok,
            "cluster_state is not ok on every node within {SETTLE:?}"
        );
        Some(cluster)
    }

    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Adds a new server to the cluster as a replica of node `master` (`redis-cli --cluster
    /// add-node --cluster-slave`), and waits until the master counts it as an online replica and
    /// every node knows it.
    pub fn add_replica(&mut self, master: usize) {
        let replica = cluster_node().expect("redis-server was there a moment ago");
        let master_id: String = self.nodes[master].query(&["CLUSTER", "MYID"]);
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("add-node")
            .arg(format!("127.0.0.1:{}", replica.port()))
            .arg(format!("127.0.0.1:{}", self.nodes[master].port()))
            .args(["--cluster-slave", "--cluster-master-id", &master_id])
            .run();
        assert!(out.status.success(), "redis-cli --cluster add-node:\n{out}");
        let replica_id: String = replica.query(&["CLUSTER", "MYID"]);
        let online = wait_for(
            || {
                let info: String = self.nodes[master].query(&["INFO", "replication"]);
                info.contains("connected_slaves:1") && info.contains("state=online")
            },
            SETTLE,
        );
        assert!(online, "the replica is not online within {SETTLE:?}");
        let known = wait_for(
            || {
                self.nodes.iter().chain([&replica]).all(|n| {
                    let nodes: String = n.query(&["CLUSTER", "NODES"]);
                    nodes
                        .lines()
                        .any(|l| l.starts_with(&replica_id) && l.contains(&master_id))
                        && n.query::<String>(&["CLUSTER", "INFO"])
                            .contains("cluster_state:ok")
                })
            },
            SETTLE,
        );
        assert!(known, "not every node knows the replica within {SETTLE:?}");
        self.replicas.push(replica);
    }

    /// The URL of node `i`, a seed for `--url`.
    pub fn url(&self, i: usize) -> String {
        self.nodes[i].url()
    }

    /// `redlock --cluster --url NODE0` with a clean environment.
    pub fn redlock(&self) -> Command {
        let mut cmd = redlock();
        cmd.args(["--cluster", "--url", &self.url(0)]);
        cmd
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn slot(&self, key: &str) -> u16 {
        self.nodes[0].query(&["CLUSTER", "KEYSLOT", key])
    }

    /// The index of the node that serves `key`'s slot, by each node's own account.
    pub fn owner(&self, key: &str) -> usize {
        let slot = self.slot(key);
        let owners: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.slots_of(i).iter().any(|r| r.contains(&slot)))
            .collect();
        assert_eq!(
            owners.len(),
            1,
            "slot {slot} of {key} has owners {owners:?}"
        );
        owners[0]
    }

    /// The slot ranges node `i` says it serves (the `myself` line of `CLUSTER NODES`).
    fn slots_of(&self, i: usize) -> Vec<std::ops::RangeInclusive<u16>> {
        let text: String = self.nodes[i].query(&["CLUSTER", "NODES"]);
        let me = text
            .lines()
            .find(|l| l.contains("myself"))
            .unwrap_or_else(|| panic!("no myself line in CLUSTER NODES:\n{text}"));
        // id addr flags master ping pong epoch link slot...
        me.split_whitespace()
            .skip(8)
            .filter(|s| !s.starts_with('[')) // slots being migrated
            .map(|s| match s.split_once('-') {
                Some((a, b)) => a.parse().unwrap()..=b.parse().unwrap(),
                None => s.parse().unwrap()..=s.parse().unwrap(),
            })
            .collect()
    }

    /// The indices of the nodes whose keyspace holds `key` (each node SCANned on its own).
    pub fn holders(&self, key: &str) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].keys().iter().any(|k| k == key))
            .collect()
    }

    /// Every key on every node, as `(node index, key)`, sorted.
    pub fn all_keys(&self) -> Vec<(usize, String)> {
        let mut all: Vec<(usize, String)> = (0..self.nodes.len())
            .flat_map(|i| self.nodes[i].keys().into_iter().map(move |k| (i, k)))
            .collect();
        all.sort();
        all
    }

    /// Lock names `{prefix}-N` whose keys live on node 0, 1, 2 respectively.
    pub fn names_on_each_node(&self, prefix: &str) -> Vec<String> {
        let mut names: Vec<Option<String>> = vec![None; self.nodes.len()];
        for n in 0..1000 {
            let name = format!("{prefix}-{n}");
            let owner = self.owner(&lock_key(&name));
            names[owner].get_or_insert(name);
            if names.iter().all(Option::is_some) {
                return names.into_iter().map(Option::unwrap).collect();
            }
        }
        panic!("no names with prefix {prefix} on every node: {names:?}");
    }
}

/// The master name the sentinel monitors.
pub const MASTER_NAME: &str = "mymaster";

/// A `redis-server --sentinel` of our own with a config file in a temp dir, killed when dropped.
pub struct Sentinel {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
    /// The sentinel's `requirepass` (also its `auth-pass` for the servers it watches), and its
    /// TLS certificates (it then serves and talks to the servers with TLS only).
    auth: Auth,
}

impl Sentinel {
    /// A sentinel of its own monitoring `MASTER_NAME` at `127.0.0.1:master_port`, whatever that
    /// server's role: pointed at a demoted master, it names it until it hears otherwise.
    pub fn monitoring(master_port: u16) -> Sentinel {
        Sentinel::start(master_port, &Auth::default())
    }

    /// A sentinel monitoring `MASTER_NAME` at `127.0.0.1:master_port` (quorum 1, down after 1s,
    /// failover timeout 5s), with `auth`'s password and TLS towards its clients and the servers.
    fn start(master_port: u16, auth: &Auth) -> Sentinel {
        let mut last_log = String::new();
        for _ in 0..5 {
            match Sentinel::try_start(master_port, auth) {
                Ok(sentinel) => return sentinel,
                Err(log) => last_log = log,
            }
        }
        panic!("the sentinel failed to start 5 times; last log:\n{last_log}");
    }

    fn try_start(master_port: u16, auth: &Auth) -> Result<Sentinel, String> {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        // The sentinel rewrites this file (known replicas, epochs), so it lives in our temp dir.
        let conf = dir.path().join("sentinel.conf");
        let mut text = format!(
            "port {port}\n\
             bind 127.0.0.1\n\
             dir {dir}\n\
             logfile {dir}/sentinel.log\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 1\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 5000\n",
            dir = dir.path().display()
        );
        if let Some(pw) = &auth.password {
            text.push_str(&format!(
                "requirepass {pw}\nsentinel auth-pass {MASTER_NAME} {pw}\n"
            ));
        }
        if let Some(certs) = &auth.tls {
            // Later lines win: TLS only, and TLS to the servers too.
            text.push_str(&format!(
                "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\n\
                 tls-ca-cert-file {}\ntls-auth-clients no\ntls-replication yes\n",
                certs.path("server.crt").display(),
                certs.path("server.key").display(),
                certs.path("ca.crt").display(),
            ));
        }
        std::fs::write(&conf, text).unwrap();
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server --sentinel");
        let mut sentinel = Sentinel {
            child,
            port,
            dir,
            auth: auth.clone(),
        };
        // Our log saying that we monitor our master proves that the port is ours.
        let monitoring = format!("+monitor master {MASTER_NAME} 127.0.0.1 {master_port}");
        let ready = wait_for(
            || {
                sentinel.exited()
                    || (sentinel.log().contains(&monitoring) && sentinel.try_cli().is_ok())
            },
            Duration::from_secs(10),
        );
        if ready && !sentinel.exited() {
            return Ok(sentinel);
        }
        let log = sentinel.log();
        if log.contains("Address already in use") {
            return Err(log);
        }
        panic!("the sentinel did not answer PING within 10s; its log:\n{log}");
    }

    fn exited(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_some()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`, or `rediss://` with TLS.
    pub fn url(&self) -> String {
        let scheme = if self.auth.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sentinel.log")).unwrap_or_default()
    }

    fn try_cli(&self) -> redis::RedisResult<redis::Connection> {
        let mut con = connect(&self.url(), &self.auth)?;
        redis::cmd("PING").query::<String>(&mut con)?;
        Ok(con)
    }

    /// Freezes the sentinel (SIGSTOP): it neither answers nor tells other sentinels anything.
    pub fn pause(&self) {
        signal(self.child.id(), libc::SIGSTOP);
    }

    /// Thaws a [`pause`](Self::pause)d sentinel.
    pub fn resume(&self) {
        signal(self.child.id(), libc::SIGCONT);
    }

    /// Runs one command on a fresh connection, returning Redis errors.
    pub fn try_query<T: redis::FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        let mut con = self
            .try_cli()
            .unwrap_or_else(|e| panic!("cannot connect to the sentinel: {e}"));
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut con)
    }

    /// Runs one command on a fresh connection.
    pub fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        self.try_query(args)
            .unwrap_or_else(|e| panic!("{args:?} failed: {e}"))
    }

    /// The master's port according to `SENTINEL GET-MASTER-ADDR-BY-NAME`.
    pub fn master_port(&self) -> u16 {
        let addr: Vec<String> = self.query(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME]);
        assert_eq!(addr.len(), 2, "{addr:?}");
        addr[1].parse().unwrap()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!(
                "--- log of the sentinel on port {}:\n{}",
                self.port,
                self.log()
            );
        }
    }
}

/// A master, its replica, and a sentinel watching them. After [`failover`](Self::failover) the
/// two servers have swapped roles.
pub struct Replicated {
    servers: [RedisServer; 2],
    sentinel: Sentinel,
    /// The one password of all three, if they require one, and their TLS certificates.
    auth: Auth,
}

impl Replicated {
    /// Starts the three and waits until the replica is in sync and the sentinel knows it as a
    /// healthy replica; `None` when the test must be skipped.
    pub fn start() -> Option<Replicated> {
        Replicated::start_with(Auth::default())
    }

    /// [`start`](Self::start), with the servers and the sentinel all requiring `password` (and
    /// using it among themselves).
    pub fn with_password(password: &str) -> Option<Replicated> {
        Replicated::start_with(Auth {
            password: Some(password.to_string()),
            tls: None,
        })
    }

    /// [`start`](Self::start), with the servers and the sentinel serving TLS only (no client
    /// certificates required) and replicating and monitoring over TLS.
    pub fn with_tls(certs: Arc<Certs>) -> Option<Replicated> {
        Replicated::start_with(Auth {
            password: None,
            tls: Some(certs),
        })
    }

    fn start_with(auth: Auth) -> Option<Replicated> {
        // Either may be the master that a replica syncs from: no 5s wait for more replicas
        // before a diskless full sync.
        let server = || {
            let builder = RedisServer::builder()
                .arg("--repl-diskless-sync-delay")
                .arg("0");
            let builder = match &auth.password {
                Some(pw) => builder.password(pw).arg("--masterauth").arg(pw),
                None => builder,
            };
            match &auth.tls {
                Some(certs) => builder
                    .tls(Arc::clone(certs), false)
                    .arg("--tls-replication")
                    .arg("yes"),
                None => builder,
            }
        };
        let master = server().start()?;
        let replica = server()
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(master.port().to_string())
            .start()?;
        let sentinel = Sentinel::start(master.port(), &auth);
        // Faster sentinel timers (Redis >= 7.0), so that the old master is turned into a
        // replica about 1s after a failover instead of 10-20s: its role is checked on every
        // INFO (every info-period) and changed once it has been reported publish-period * 4 ago.
        // Older sentinels refuse the command and the waits below are long enough anyway.
        let _ = sentinel.try_query::<()>(&[
            "SENTINEL",
            "DEBUG",
            "info-period",
            "1000",
            "publish-period",
            "250",
        ]);
        let replicated = Replicated {
            servers: [master, replica],
            sentinel,
            auth,
        };
        let in_sync = wait_for(
            || {
                let info: String = replicated.servers[1].query(&["INFO", "replication"]);
                info.contains("master_link_status:up")
            },
            SETTLE,
        );
        assert!(in_sync, "the replica is not in sync within {SETTLE:?}");
        let port = replicated.servers[1].port().to_string();
        let known = wait_for(
            || {
                let replicas: Vec<HashMap<String, String>> =
                    replicated
                        .sentinel
                        .query(&["SENTINEL", "REPLICAS", MASTER_NAME]);
                replicas.iter().any(|r| {
                    r.get("port") == Some(&port)
                        && r.get("flags").map(String::as_str) == Some("slave")
                        && r.get("master-link-status").map(String::as_str) == Some("ok")
                })
            },
            SETTLE,
        );
        assert!(
            known,
            "the sentinel does not know the replica within {SETTLE:?}"
        );
        Some(replicated)
    }

    /// The server that was the master when the topology was built.
    pub fn first_master(&self) -> &RedisServer {
        &self.servers[0]
    }

    /// The server that was the replica when the topology was built.
    pub fn first_replica(&self) -> &RedisServer {
        &self.servers[1]
    }

    pub fn sentinel(&self) -> &Sentinel {
        &self.sentinel
    }

    /// The server the sentinel currently names as the master.
    pub fn master(&self) -> &RedisServer {
        let port = self.sentinel.master_port();
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("the sentinel names port {port} as the master"))
    }

    /// `redlock --sentinel mymaster --url SENTINEL` with a clean environment.
    pub fn redlock(&self) -> Command {
        let mut cmd = redlock();
        cmd.args(["--sentinel", MASTER_NAME, "--url", &self.sentinel.url()]);
        cmd
    }

    /// Waits until the replica has applied everything the master has written so far.
    pub fn wait_replicated(&self) {
        let offset = |s: &RedisServer, field: &str| -> i64 {
            let info: String = s.query(&["INFO", "replication"]);
            info.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(-1)
        };
        let (master, replica) = if self.role(&self.servers[0]) == "master" {
            (&self.servers[0], &self.servers[1])
        } else {
            (&self.servers[1], &self.servers[0])
        };
        let target = offset(master, "master_repl_offset:");
        let done = wait_for(|| offset(replica, "slave_repl_offset:") >= target, SETTLE);
        assert!(done, "the replica did not catch up within {SETTLE:?}");
    }

    /// `SENTINEL FAILOVER`, then waits until the sentinel names the other server as the master
    /// and the old master reports itself a replica.
    pub fn failover(&self) {
        let old = self.master();
        let new = self
            .servers
            .iter()
            .find(|s| s.port() != old.port())
            .unwrap();
        // The sentinel may not have fresh enough INFO from the replica yet (NOGOODSLAVE).
        let mut last = Ok(String::new());
        let started = wait_for(
            || {
                last = self
                    .sentinel
                    .try_query::<String>(&["SENTINEL", "FAILOVER", MASTER_NAME]);
                if last.is_err() {
                    thread::sleep(Duration::from_millis(100));
                }
                last.is_ok()
            },
            SETTLE,
        );
        assert!(started, "SENTINEL FAILOVER kept failing: {last:?}");
        let switched = wait_for(
            || {
                self.sentinel.master_port() == new.port()
                    && self.try_role(old).is_ok_and(|r| r == "slave")
            },
            SETTLE,
        );
        assert!(
            switched,
            "within {SETTLE:?} after the failover: the sentinel names port {}, the old master \
             (port {}) is a {}",
            self.sentinel.master_port(),
            old.port(),
            self.role(old)
        );
        assert_eq!(self.role(new), "master");
    }

    /// Kills the master (SIGKILL, a crash), then waits until the sentinel has noticed, promoted
    /// the replica and names it, and the replica reports itself the master.
    pub fn kill_master(&mut self) {
        let port = self.sentinel.master_port();
        let i = self
            .servers
            .iter()
            .position(|s| s.port() == port)
            .unwrap_or_else(|| panic!("the sentinel names port {port} as the master"));
        self.servers[i].kill();
        let new = &self.servers[1 - i];
        let promoted = wait_for(
            || {
                self.sentinel.master_port() == new.port()
                    && self.try_role(new).is_ok_and(|r| r == "master")
            },
            SETTLE,
        );
        assert!(
            promoted,
            "within {SETTLE:?} after killing the master (port {port}): the sentinel names port {}",
            self.sentinel.master_port()
        );
    }

    /// `ROLE` of one of the two servers.
    fn role(&self, server: &RedisServer) -> String {
        self.try_role(server)
            .unwrap_or_else(|e| panic!("ROLE on port {}: {e}", server.port()))
    }

    fn try_role(&self, server: &RedisServer) -> redis::RedisResult<String> {
        try_role_with(server, &self.auth)
    }
}
