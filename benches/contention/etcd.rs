//! The bench's own etcd, for the `etcdctl lock` column of workloads 1 and 6: [`Etcd`], one
//! member on two free loopback ports (client and peer), its data dir and log in the temp dir,
//! default settings otherwise (a user's etcd: its write-ahead log is fsynced, on the temp dir's
//! file system). Like the redis-servers it is registered with [`guard`], so it is killed at the
//! end, on a panic and on Ctrl-C, and dies with the bench (PDEATHSIG). Above [`guard`] and
//! [`tools`] (the `etcdctl` it asks for health).

use std::fs;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::guard::{self, STEP_TIMEOUT, tail};
use crate::tools;

/// An `etcd` of the bench's own; killed when dropped.
pub struct Etcd {
    child: Child,
    /// The client URL, `http://127.0.0.1:PORT`.
    pub url: String,
    /// `etcd --version` and `etcdctl version`, for the report's header.
    pub version: String,
}

impl Etcd {
    /// Starts one in `dir` (five tries, each on fresh ports) and waits until `etcdctl endpoint
    /// health` answers that it committed a proposal: a leader is elected and writes go through.
    pub fn start(dir: &Path) -> Etcd {
        let mut last_error = String::new();
        for _ in 0..5 {
            // Both listeners are held until both ports are known, so that they differ; they are
            // closed before etcd binds them (another process could take one meanwhile: the next
            // try then gets fresh ports).
            let (client, peer) = {
                let a = TcpListener::bind("127.0.0.1:0").expect("cannot bind a loopback port");
                let b = TcpListener::bind("127.0.0.1:0").expect("cannot bind a loopback port");
                let port = |l: &TcpListener| l.local_addr().expect("no local address").port();
                (port(&a), port(&b))
            };
            let url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let log = dir.join(format!("etcd-{client}.log"));
            let log_file = std::fs::File::create(&log)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
            let mut cmd = tools::command("etcd");
            cmd.args(["--name", "bench"])
                .arg("--data-dir")
                .arg(dir.join(format!("etcd-{client}")))
                .args(["--listen-client-urls", &url])
                .args(["--advertise-client-urls", &url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("bench={peer_url}")])
                .args(["--initial-cluster-state", "new"])
                .args(["--logger", "zap", "--log-outputs", "stderr"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log_file);
            let mut child = guard::spawn_service(&mut cmd, "etcd");
            let until = Instant::now() + STEP_TIMEOUT;
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    guard::stop_service(&mut child);
                    last_error =
                        format!("etcd on port {client} exited with {status}: {}", tail(&log));
                    break;
                }
                // Each check is bounded by its own timeouts, the whole wait by STEP_TIMEOUT.
                let healthy = tools::command("etcdctl")
                    .arg(format!("--endpoints={url}"))
                    .args(["--dial-timeout=500ms", "--command-timeout=1s"])
                    .args(["endpoint", "health"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if healthy {
                    return Etcd {
                        child,
                        url,
                        version: version(),
                    };
                }
                if Instant::now() >= until {
                    guard::stop_service(&mut child);
                    panic!(
                        "etcd on port {client} was not healthy within {}s; {}",
                        STEP_TIMEOUT.as_secs(),
                        tail(&log)
                    );
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("cannot start etcd: {last_error}");
    }
}

impl Etcd {
    /// The CPU time etcd has used so far, all its threads (`utime` + `stime` of
    /// `/proc/PID/stat`, in clock ticks: 10 ms resolution, fine over a run of hundreds of
    /// critical sections).
    pub fn cpu(&self) -> Duration {
        let path = format!("/proc/{}/stat", self.child.id());
        let stat = fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
        // The fields after the command name, which is in parentheses and may hold spaces.
        let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
        let field = |n: usize| -> u64 {
            // Field 3 (the state) is the first after the name; utime is field 14, stime 15.
            after
                .split_whitespace()
                .nth(n - 3)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{path} has no field {n}: {stat}"))
        };
        // SAFETY: sysconf(3) reads a configuration value; no memory is involved.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        assert!(ticks > 0, "sysconf(_SC_CLK_TCK) answered {ticks}");
        Duration::from_secs_f64((field(14) + field(15)) as f64 / ticks as f64)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        guard::stop_service(&mut self.child);
    }
}

/// "etcd 3.4.23, etcdctl 3.4.23 (API 3.4)" from their version commands.
fn version() -> String {
    let first_values = |program: &str, arg: &str| -> Vec<String> {
        let out = tools::command(program)
            .arg(arg)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        out.lines()
            .filter_map(|l| l.split_once(':').map(|(_, v)| v.trim().to_string()))
            .collect()
    };
    let server = first_values("etcd", "--version");
    let client = first_values("etcdctl", "version");
    let get = |v: &[String], i: usize| v.get(i).cloned().unwrap_or_else(|| "?".to_string());
    format!(
        "etcd {}, etcdctl {} (API {})",
        get(&server, 0),
        get(&client, 0),
        get(&client, 1)
    )
}
