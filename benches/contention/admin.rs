//! Redis administration: starting a `redis-server` of the bench's own ([`Server`]), and the
//! bench's own connection ([`Admin`]), which counts the Redis commands of a run from
//! `INFO commandstats` and the slow log ([`Cmds`]) and subtracts what it sent itself. Above
//! [`guard`]: every server is registered there, so that it dies with the bench.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::guard::{self, STEP_TIMEOUT, tail};

/// A `redis-server` of the bench's own; killed when dropped.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Server {
    /// Starts one on a free loopback port (five tries), without persistence, logging every
    /// command to the slow log, and waits for its PING.
    pub fn start(dir: &Path) -> Server {
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("cannot find a free loopback port")
                .port();
            let log = dir.join(format!("redis-{port}.log"));
            let mut cmd = Command::new("redis-server");
            cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(dir)
                .arg("--logfile")
                .arg(&log)
                .args(["--slowlog-log-slower-than", "0"])
                .args(["--slowlog-max-len", "1000000"])
                .stdin(Stdio::null())
                .stdout(Stdio::null());
            let mut child = guard::spawn_service(&mut cmd, "redis-server");
            let until = Instant::now() + STEP_TIMEOUT;
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    guard::stop_service(&mut child);
                    last_error = format!(
                        "redis-server on port {port} exited with {status}: {}",
                        tail(&log)
                    );
                    break;
                }
                let pong = redis::Client::open(format!("redis://127.0.0.1:{port}"))
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
                    .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
                if pong.is_ok() {
                    return Server { child, port };
                }
                if Instant::now() >= until {
                    guard::stop_service(&mut child);
                    panic!(
                        "redis-server on port {port} did not answer PING within {}s; {}",
                        STEP_TIMEOUT.as_secs(),
                        tail(&log)
                    );
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("cannot start redis-server: {last_error}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        guard::stop_service(&mut self.child);
    }
}

/// What a counting window ([`Admin::begin`]) measures: one or the other, never both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// The commands, split into those clients sent and those run in scripts: the slow log keeps
    /// every command for the split. That costs the server for every command logged, so it
    /// would charge the tool that runs more commands inside scripts for the bench's own
    /// instrument: no CPU figure then.
    Commands,
    /// The server's CPU time, with the slow log off (as on a production server, which logs only
    /// commands slower than 10 ms); the commands only as a total.
    Cpu,
}

/// Redis commands of one run, from commandstats and (when counted) the slow log.
#[derive(Clone, Debug, Default)]
pub struct Cmds {
    /// Everything the server ran (calls + rejected calls), the bench's own commands excluded.
    pub total: u64,
    /// Of which run inside Lua scripts (slow log entries of the Lua client): [`Count::Commands`]
    /// only.
    pub in_scripts: Option<u64>,
    /// Per command name, for the log.
    pub by_name: Vec<(String, u64)>,
    /// How long the counting window was.
    pub window: Duration,
    /// CPU time of the server's main thread in the window (`INFO cpu`, the sum of
    /// `used_cpu_sys_main_thread` and `used_cpu_user_main_thread`), which runs every command and
    /// every Lua script: [`Count::Cpu`] only. The bench's own commands in the window are the
    /// `INFO` at each end: negligible.
    pub cpu: Option<Duration>,
}

impl Cmds {
    /// The commands clients sent (round trips): the total minus those run inside scripts.
    pub fn sent(&self) -> Option<u64> {
        self.in_scripts.map(|n| self.total.saturating_sub(n))
    }
}

/// How [`Cmds::by_name`] names the commands still blocked at the end of a window.
const BLOCKED: &str = "(blocked at the end)";

/// A point to count commands from.
pub struct Mark {
    at: Instant,
    stats: BTreeMap<String, u64>,
    /// Clients blocked in a command (BLPOP): sent, but counted by commandstats only when done.
    blocked: u64,
    own: BTreeMap<String, u64>,
    /// The server's main-thread CPU time so far.
    cpu: Duration,
    count: Count,
}

/// The bench's own connection; it counts what it sends, so that it can subtract that.
pub struct Admin {
    con: redis::Connection,
    own: BTreeMap<String, u64>,
}

impl Admin {
    pub fn connect(port: u16) -> Admin {
        let con = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .and_then(|c| c.get_connection_with_timeout(STEP_TIMEOUT))
            .unwrap_or_else(|e| panic!("cannot connect to the bench's redis-server: {e}"));
        con.set_read_timeout(Some(STEP_TIMEOUT))
            .expect("cannot set a read timeout");
        let mut admin = Admin {
            con,
            own: BTreeMap::new(),
        };
        admin.query::<()>(
            "client|setname",
            redis::cmd("CLIENT").arg("SETNAME").arg("bench"),
        );
        admin
    }

    /// One command; `stat` is its name in `INFO commandstats`.
    pub fn query<T: redis::FromRedisValue>(&mut self, stat: &str, cmd: &redis::Cmd) -> T {
        let reply = cmd
            .query(&mut self.con)
            .unwrap_or_else(|e| panic!("the bench's own Redis command {stat} failed: {e}"));
        *self.own.entry(stat.to_string()).or_default() += 1;
        reply
    }

    fn mark(&mut self) -> Mark {
        // INFO counts itself only after it has answered: it is in the next snapshot, like every
        // command sent after this copy of `own`.
        let own = self.own.clone();
        let text: String = self.query(
            "info",
            redis::cmd("INFO")
                .arg("commandstats")
                .arg("clients")
                .arg("cpu"),
        );
        let cpu = server_cpu(&text);
        let blocked = text
            .lines()
            .find_map(|l| l.strip_prefix("blocked_clients:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("INFO clients has no blocked_clients: {text}"));
        let mut stats = BTreeMap::new();
        for line in text.lines() {
            let Some((name, fields)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let mut n = 0;
            for field in fields.split(',') {
                if let Some(v) = field
                    .strip_prefix("calls=")
                    .or_else(|| field.strip_prefix("rejected_calls="))
                {
                    n += v.parse::<u64>().unwrap_or(0);
                }
            }
            stats.insert(name.to_string(), n);
        }
        Mark {
            at: Instant::now(),
            stats,
            blocked,
            own,
            cpu,
            count: Count::Commands,
        }
    }

    /// Starts counting `count`: the slow log on and emptied, or off; then a commandstats
    /// snapshot.
    pub fn begin(&mut self, count: Count) -> Mark {
        let threshold = match count {
            Count::Commands => "0",
            Count::Cpu => "-1",
        };
        self.query::<()>(
            "config|set",
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("slowlog-log-slower-than")
                .arg(threshold),
        );
        if count == Count::Commands {
            self.query::<()>("slowlog|reset", redis::cmd("SLOWLOG").arg("RESET"));
        }
        let mut mark = self.mark();
        mark.count = count;
        mark
    }

    /// The commands since `from`, and the CPU time or the split (see [`Count`]).
    pub fn end(&mut self, from: &Mark) -> Cmds {
        if from.count == Count::Cpu {
            // One INFO ends the window: the commands and the CPU time at the same instant.
            let (total, by_name, to) = self.commands_since(from);
            return Cmds {
                total,
                in_scripts: None,
                by_name,
                window: to.at - from.at,
                cpu: Some(to.cpu.saturating_sub(from.cpu)),
            };
        }
        let log: redis::Value = self.query("slowlog|get", redis::cmd("SLOWLOG").arg("GET").arg(-1));
        let redis::Value::Array(entries) = log else {
            panic!("SLOWLOG GET answered {log:?}");
        };
        assert!(
            entries.len() < 1_000_000,
            "the slow log overflowed (1000000 entries): the command counts would be wrong"
        );
        let text = |v: &redis::Value| match v {
            redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            redis::Value::SimpleString(s) => s.clone(),
            _ => String::new(),
        };
        let (mut in_scripts, mut from_clients) = (0, 0);
        for entry in &entries {
            let redis::Value::Array(fields) = entry else {
                continue;
            };
            // id, time, duration, args, client address, client name
            if fields.len() < 6 || text(&fields[5]) == "bench" {
                continue;
            }
            if text(&fields[4]) == "?:0" {
                in_scripts += 1;
            } else {
                from_clients += 1;
            }
        }
        let (total, by_name, to) = self.commands_since(from);
        let blocked = to.blocked.saturating_sub(from.blocked);
        if from_clients + in_scripts + blocked != total {
            // Only commandstats counts rejected commands and a BLPOP that timed out, and it also
            // sees what ran between SLOWLOG GET and INFO; `sent` (total - in scripts) includes
            // them all.
            eprintln!(
                "contention: note: commandstats counted {total} commands, the slow log \
                 {from_clients} from clients + {in_scripts} in scripts"
            );
        }
        Cmds {
            total,
            in_scripts: Some(in_scripts),
            by_name,
            window: to.at - from.at,
            cpu: None,
        }
    }

    /// The commands run since `from` by commandstats (the bench's own excluded), in all and by
    /// name, busiest first, and the mark they were counted to.
    fn commands_since(&mut self, from: &Mark) -> (u64, Vec<(String, u64)>, Mark) {
        let to = self.mark();
        let mut by_name = Vec::new();
        let mut total = 0;
        for (name, &n) in &to.stats {
            let before = from.stats.get(name).copied().unwrap_or(0);
            let own =
                to.own.get(name).copied().unwrap_or(0) - from.own.get(name).copied().unwrap_or(0);
            let d = n.saturating_sub(before).saturating_sub(own);
            if d > 0 {
                by_name.push((name.clone(), d));
                total += d;
            }
        }
        // A command still blocked at the end was sent in the window; one blocked at the start was
        // sent before it (and is counted, when it completes, in the window: a wash).
        let blocked = to.blocked.saturating_sub(from.blocked);
        if blocked > 0 {
            by_name.push((BLOCKED.to_string(), blocked));
            total += blocked;
        }
        by_name.sort_by_key(|b| std::cmp::Reverse(b.1));
        (total, by_name, to)
    }

    /// `MEMORY USAGE key SAMPLES 0` in bytes: 0 for a missing key.
    pub fn memory_usage(&mut self, key: &str) -> u64 {
        let n: Option<u64> = self.query(
            "memory|usage",
            redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(key)
                .arg("SAMPLES")
                .arg(0),
        );
        n.unwrap_or(0)
    }

    pub fn pttl(&mut self, key: &str) -> i64 {
        self.query("pttl", redis::cmd("PTTL").arg(key))
    }
}

/// The main thread's CPU time in an `INFO cpu` reply: `used_cpu_sys_main_thread` +
/// `used_cpu_user_main_thread` (Redis 6.2 and later), else the process's `used_cpu_sys` +
/// `used_cpu_user`. Redis reads them with getrusage(2) and prints six decimals.
fn server_cpu(info: &str) -> Duration {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let secs = match (
        field("used_cpu_sys_main_thread"),
        field("used_cpu_user_main_thread"),
    ) {
        (Some(s), Some(u)) => s + u,
        _ => match (field("used_cpu_sys"), field("used_cpu_user")) {
            (Some(s), Some(u)) => s + u,
            _ => panic!("INFO cpu has no used_cpu_sys / used_cpu_user: {info}"),
        },
    };
    Duration::from_secs_f64(secs)
}
