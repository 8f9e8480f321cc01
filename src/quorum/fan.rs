//! The fan-out machinery of a quorum: one call on many nodes in parallel (a thread each),
//! returning once the answers settle the outcome and the others have had their grace, and the
//! connection a late call hands back to the node's next call.
//!
//! Layer 9 of the list in `lib.rs`.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::client::Redis;
use crate::config::Config;
use crate::error::{Kind, failure};

use super::Nodes;

/// One node's answer: `None` if it was not asked.
pub(super) type Answers<T> = Vec<Option<Result<T>>>;

/// How many nodes answered without an error.
pub(super) fn answered<T>(answers: &Answers<T>) -> usize {
    answers.iter().filter(|a| matches!(a, Some(Ok(_)))).count()
}

impl Nodes {
    /// The least time the other nodes get after the outcome is settled: a quarter of
    /// `--io-timeout`, so that a healthy node that is merely a little slower (a fresh connection,
    /// a busy CPU) still takes part, and a frozen one costs a fraction of a timeout.
    fn grace_floor(&self) -> Duration {
        self.config.io_timeout / 4
    }

    /// Runs `f` on the nodes `ask` selects, in parallel (a thread each), connecting first where
    /// needed. Returns when every asked node has answered, or when `settled` says the answers so
    /// far decide the outcome and the others have had as long again as that took (plus 2 ms), and
    /// at least [`Nodes::grace_floor`].
    /// A node that has not answered by then counts as failed; its thread finishes on its own
    /// (within its timeouts) and hands its connection to the node's next call (see
    /// [`Nodes::late`]).
    pub(super) fn fan_out<T: Send + 'static>(
        &mut self,
        ask: impl Fn(usize) -> bool,
        f: impl Fn(usize, &mut Redis) -> Result<T> + Send + Sync + 'static,
        settled: impl Fn(&Answers<T>) -> bool,
    ) -> Answers<T> {
        let start = Instant::now();
        let f = Arc::new(f);
        let (tx, rx) = mpsc::channel();
        let mut answers: Answers<T> = (0..self.n()).map(|_| None).collect();
        let mut pending = Vec::new();
        let mut handed: Vec<Option<mpsc::Receiver<Option<Redis>>>> =
            (0..self.n()).map(|_| None).collect();
        for i in (0..self.n()).filter(|&i| ask(i)) {
            let (f, node_tx, config) = (Arc::clone(&f), tx.clone(), Arc::clone(&self.config));
            let con = self.cons[i].take();
            // A connection of our own wins; else the one a late call still has, once it ends.
            let late = if con.is_some() {
                None
            } else {
                self.late[i].take()
            };
            let (hand_back, handed_back) = mpsc::sync_channel(1);
            let wait = self.config.io_timeout;
            let spawned = std::thread::Builder::new()
                .name(format!("node-{i}"))
                .spawn(move || {
                    let con = con.or_else(|| late.and_then(|rx| take_back(&rx, wait)));
                    let (result, con) = on_node(&config, i, con, |i, con| f(i, con));
                    // The connection first: whoever hears the result finds it there.
                    let _ = hand_back.send(con);
                    let _ = node_tx.send((i, result));
                });
            match spawned {
                Ok(_) => {
                    pending.push(i);
                    handed[i] = Some(handed_back);
                }
                Err(e) => {
                    answers[i] = Some(Err(failure(
                        Kind::Unavailable,
                        format!(
                            "cannot start a thread for {}: {e}",
                            self.endpoints[i].display
                        ),
                    )))
                }
            }
        }
        drop(tx);
        let mut grace: Option<Instant> = None;
        while !pending.is_empty() {
            if grace.is_none() && settled(&answers) {
                let extra = (start.elapsed() + Duration::from_millis(2)).max(self.grace_floor());
                grace = Some(Instant::now() + extra);
            }
            let next = match grace {
                Some(until) => rx.recv_timeout(until.saturating_duration_since(Instant::now())),
                None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            };
            let Ok((i, result)) = next else {
                break;
            };
            answers[i] = Some(result);
            self.cons[i] = handed[i].take().and_then(|rx| rx.try_recv().ok().flatten());
            pending.retain(|&p| p != i);
        }
        for i in pending {
            self.late[i] = handed[i].take();
            answers[i] = Some(Err(failure(
                Kind::Unavailable,
                format!(
                    "{} had not answered when the others had (slow or frozen)",
                    self.endpoints[i].display
                ),
            )));
        }
        answers
    }

    /// Runs `f` on every node and waits for all of them (each within its timeouts).
    pub(super) fn all<T: Send + 'static>(
        &mut self,
        f: impl Fn(usize, &mut Redis) -> Result<T> + Send + Sync + 'static,
    ) -> Answers<T> {
        self.fan_out(|_| true, f, |_| false)
    }
}

/// The connection a late call hands back on `rx` when it ends, if it ends within `wait` and
/// kept it; else `None` (a new connection, as before the call was late).
pub(super) fn take_back(rx: &mpsc::Receiver<Option<Redis>>, wait: Duration) -> Option<Redis> {
    rx.recv_timeout(wait).ok().flatten()
}

/// Runs `f` on node `i`, connecting first if `con` is `None`. Returns the connection to keep:
/// none after a failure, unless only its reply was late (it is resynchronised before its next
/// command: see `client/`), so that a slow node does not cost us our place on it.
fn on_node<T>(
    config: &Config,
    i: usize,
    con: Option<Redis>,
    f: impl Fn(usize, &mut Redis) -> Result<T>,
) -> (Result<T>, Option<Redis>) {
    let reused = con.is_some();
    let mut con = match con {
        Some(con) => con,
        None => match Redis::connect_node(config, i) {
            Ok(con) => con,
            Err(e) => return (Err(e), None),
        },
    };
    let mut result = f(i, &mut con);
    // The node had closed an idle connection (it restarted): the command did not run; once more
    // on a fresh connection.
    if result.is_err() && reused && con.was_dropped() && con.reconnect().is_ok() {
        result = f(i, &mut con);
    }
    let keep = (result.is_ok() || con.is_late()).then_some(con);
    (result, keep)
}
