//! A TCP proxy on loopback that adds a fixed latency to every round trip (workload 8): each
//! chunk a client sends is delivered to the server [`Proxy::latency`] after it was read, and the
//! server's answers pass at once, so a request and its reply cost that much more than on
//! loopback, however many commands a pipeline packs into one write. Each direction of a
//! connection is a reader thread that stamps chunks with their due time and a writer thread that
//! delivers them in order, so the delay does not throttle throughput. Dropping the proxy stops
//! accepting and shuts every relayed connection down, which ends all its threads. Imports nothing
//! from the rest of the bench.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// The proxy: its port, and what dropping it must close.
pub struct Proxy {
    pub port: u16,
    closed: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    /// A proxy on a free loopback port to `127.0.0.1:upstream`, delaying what clients send by
    /// `latency`.
    pub fn start(upstream: u16, latency: Duration) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy: cannot bind 127.0.0.1:0");
        let port = listener
            .local_addr()
            .expect("proxy: no local address")
            .port();
        let closed = Arc::new(AtomicBool::new(false));
        let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (accepting, registry) = (Arc::clone(&closed), Arc::clone(&streams));
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let ends = [&client, &server].map(|s| s.try_clone().expect("proxy: clone"));
                registry.lock().unwrap().extend(ends);
                let (c2, s2) = (
                    client.try_clone().expect("proxy: clone"),
                    server.try_clone().expect("proxy: clone"),
                );
                relay(client, server, latency);
                relay(s2, c2, Duration::ZERO);
            }
        });
        Proxy {
            port,
            closed,
            streams,
        }
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which sees `closed` and drops the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for s in self.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read; ends at EOF or an error on
/// either side (then passes the EOF on).
fn relay(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    thread::spawn(move || {
        for (due, chunk) in rx {
            let now = Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
