//! A TCP proxy on loopback in front of one server, for network faults that a signal cannot make:
//! latency (every chunk is delivered `latency` after it was read, in both directions, so a round
//! trip costs twice the latency) and a black hole (connections are accepted, nothing is
//! delivered either way until [`Proxy::restore`]; what was sent meanwhile is then delivered, as
//! TCP would after a partition heals).
//!
//! Each direction of a connection is a reader thread that stamps each chunk with its due time and
//! a writer thread that delivers the chunks in order, so latency does not throttle throughput.
//! Dropping the proxy stops accepting and shuts down every connection it relays.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Link {
    latency: Duration,
    black_hole: bool,
}

#[derive(Default)]
struct Shared {
    link: Mutex<Link>,
    changed: Condvar,
    closed: AtomicBool,
    /// Both ends of every relayed connection, to shut them down on drop.
    streams: Mutex<Vec<TcpStream>>,
}

pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

impl Proxy {
    /// A proxy on a free loopback port to `127.0.0.1:upstream`, passing everything at once.
    pub fn to(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let accepting = Arc::clone(&shared);
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.closed.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                // An upstream that is down: the client sees its connection closed at once.
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                for s in [&client, &server] {
                    let _ = s.set_nodelay(true);
                }
                accepting
                    .streams
                    .lock()
                    .unwrap()
                    .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                relay(client, server, &accepting);
                relay(s2, c2, &accepting);
            }
        });
        Proxy { port, shared }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Delays every chunk read from now on by `latency`, in each direction.
    pub fn set_latency(&self, latency: Duration) {
        self.shared.link.lock().unwrap().latency = latency;
        self.shared.changed.notify_all();
    }

    /// Stops delivering anything, on open and new connections alike.
    pub fn black_hole(&self) {
        self.shared.link.lock().unwrap().black_hole = true;
        self.shared.changed.notify_all();
    }

    /// Ends a [`black_hole`](Self::black_hole): what was held is delivered, then everything else.
    pub fn restore(&self) {
        self.shared.link.lock().unwrap().black_hole = false;
        self.shared.changed.notify_all();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees `closed` and drops the listener.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        for s in self.shared.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.restore();
    }
}

/// Relays `from` to `to` through the link's latency and black hole.
fn relay(mut from: TcpStream, mut to: TcpStream, shared: &Arc<Shared>) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let link = Arc::clone(shared);
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let due = Instant::now() + link.link.lock().unwrap().latency;
            if tx.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
        // Dropping `tx` lets the writer deliver what is queued, then pass the EOF on.
    });
    let link = Arc::clone(shared);
    thread::spawn(move || {
        for (due, chunk) in rx {
            let now = Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
            // Held for as long as the black hole lasts (unless the proxy is dropped).
            drop(
                link.changed
                    .wait_while(link.link.lock().unwrap(), |l| {
                        l.black_hole && !link.closed.load(Ordering::SeqCst)
                    })
                    .unwrap(),
            );
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
