//! A TCP proxy on loopback in front of one server, for network faults that a signal cannot make:
//! latency (every chunk is delivered `latency` after it was read, in both directions, so a round
//! trip costs twice the latency) and a black hole (connections are accepted, nothing is
//! delivered either way until [`Proxy::restore`]; what was sent meanwhile is then delivered, as
//! TCP would after a partition heals), and one request held back ([`Proxy::delay_matching`]: a
//! command that reaches the server late, after others sent on other connections).
//!
//! Each direction of a connection is a reader thread that stamps each chunk with its due time and
//! a writer thread that delivers the chunks in order, so latency does not throttle throughput.
//! Dropping the proxy stops accepting and shuts down every connection it relays.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Link {
    latency: Duration,
    black_hole: bool,
    /// Client-to-server chunks containing `needle` are held `delay` longer, `times` more times.
    needle: Vec<u8>,
    delay: Duration,
    times: usize,
}

#[derive(Default)]
struct Shared {
    link: Mutex<Link>,
    changed: Condvar,
    closed: AtomicBool,
    /// Both ends of every relayed connection, to shut them down on drop.
    streams: Mutex<Vec<TcpStream>>,
    /// Held chunks that the server answered (see [`Proxy::delayed_answered`]).
    answered: AtomicUsize,
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
                // Set when a held chunk is delivered; the server's next reply answers it.
                let awaiting = Arc::new(AtomicBool::new(false));
                relay(client, server, &accepting, true, Arc::clone(&awaiting));
                relay(s2, c2, &accepting, false, awaiting);
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

    /// Delivers the next `times` client-to-server chunks that contain `needle` (e.g. the SHA1 of
    /// a script, which EVALSHA names) `delay` late. Whatever follows on that connection waits
    /// behind a held chunk, so each connection's stream stays in order; other connections pass.
    /// A needle split between two reads is still found.
    pub fn delay_matching(&self, needle: impl Into<Vec<u8>>, delay: Duration, times: usize) {
        let mut link = self.shared.link.lock().unwrap();
        link.needle = needle.into();
        link.delay = delay;
        link.times = times;
    }

    /// How many chunks held by [`delay_matching`](Self::delay_matching) were delivered and
    /// answered: the server's first reply after a held chunk (on its connection) came back.
    /// Redis answers in order, so the held command has run by then.
    pub fn delayed_answered(&self) -> usize {
        self.shared.answered.load(Ordering::SeqCst)
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

/// Relays `from` to `to` through the link's latency and black hole. `upstream` (client to
/// server) holds matching chunks back ([`Proxy::delay_matching`]); `awaiting`, shared by both
/// directions of a connection, is set while a held chunk that was delivered awaits its reply.
fn relay(
    mut from: TcpStream,
    mut to: TcpStream,
    shared: &Arc<Shared>,
    upstream: bool,
    awaiting: Arc<AtomicBool>,
) {
    // Each chunk with its due time and whether it was held.
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>, bool)>();
    let link = Arc::clone(shared);
    let replied = Arc::clone(&awaiting);
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        // The end of what was read before, so that a needle split between reads is found.
        let mut tail: Vec<u8> = Vec::new();
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if !upstream && replied.swap(false, Ordering::SeqCst) {
                link.answered.fetch_add(1, Ordering::SeqCst);
            }
            let mut l = link.link.lock().unwrap();
            let mut due = Instant::now() + l.latency;
            let mut held = false;
            if upstream && l.times > 0 && !l.needle.is_empty() {
                tail.extend_from_slice(&buf[..n]);
                if tail
                    .windows(l.needle.len())
                    .any(|w| w == l.needle.as_slice())
                {
                    l.times -= 1;
                    due += l.delay;
                    held = true;
                    tail.clear();
                } else {
                    let keep = tail.len().min(l.needle.len() - 1);
                    tail.drain(..tail.len() - keep);
                }
            }
            drop(l);
            if tx.send((due, buf[..n].to_vec(), held)).is_err() {
                break;
            }
        }
        // Dropping `tx` lets the writer deliver what is queued, then pass the EOF on.
    });
    let link = Arc::clone(shared);
    thread::spawn(move || {
        for (due, chunk, held) in rx {
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
            if held {
                // Before the write: the reply may come back before the write returns.
                awaiting.store(true, Ordering::SeqCst);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
