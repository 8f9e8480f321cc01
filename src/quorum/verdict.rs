//! The pure decisions of a quorum, with their table tests: no I/O, no clock. An attempt's
//! answers counted into a [`Tally`], and what [`decide`] makes of it; the quorum's verdict on a
//! lock from each node's state ([`verdict()`]); the majority, the drift allowance, and how long a
//! waiter whose turn came too early waits ([`turn_delay`]).
//!
//! Layer 9 of the list in `lib.rs`.

use std::time::Duration;

use crate::error::{Kind, kind_of};
use crate::lock::{self, Attempt, Doubt, Keys, QuorumVerdict, QuorumView, State};

use super::fan::Answers;

/// A majority of `n`.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// What a lock's validity allows for the servers' clocks drifting apart: 1% of the TTL + 2 ms.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The first wait before looking again when the queue node gave us our turn but the others were
/// still held; it doubles with every such attempt, up to `lock::BLOCK_CAP` and a third of the TTL.
const TURN_RETRY: Duration = Duration::from_millis(25);

/// How long a waiter whose turn the queue node gave, but who found the other nodes still held,
/// waits before it looks again: [`TURN_RETRY`], doubling with every such attempt in a row
/// (`retries`), up to [`lock::BLOCK_CAP`].
///
/// Never longer than a third of the TTL: the queue node's grant, which is our turn, lasts one TTL
/// from this attempt, and the next attempt renews it. Waiting past it lost the turn to the next
/// waiter, and we went to the back of the queue (finding 13 of issue 11: with --ttl 1s the
/// backoff reached 1.6s while the other nodes were still reserved for our previous attempt's
/// token by a release that crossed it).
pub(super) fn turn_delay(retries: u32, ttl: Duration) -> Duration {
    TURN_RETRY
        .saturating_mul(1 << retries.min(8))
        .min(lock::BLOCK_CAP)
        .min(ttl / 3)
}

/// Two node addresses that turned out to be one server (the same run_id), if any.
fn same_server(run_ids: &[Option<String>]) -> Option<(usize, usize)> {
    for (i, a) in run_ids.iter().enumerate() {
        for (j, b) in run_ids.iter().enumerate().skip(i + 1) {
            if a.is_some() && a == b {
                return Some((i, j));
            }
        }
    }
    None
}

/// The nodes' answers to one attempt, counted: what [`decide`] decides on.
#[derive(Debug)]
pub(super) struct Tally {
    /// Which nodes granted the lock to our token.
    pub(super) granted: Vec<bool>,
    /// The granting nodes' fences.
    pub(super) fences: Vec<i64>,
    /// The granting nodes' run_ids (`None` for the others).
    pub(super) run_ids: Vec<Option<String>>,
    /// The latest grant, by the granting servers' clocks.
    pub(super) acquired_ms: i64,
    /// When to look again if the lock is busy: the queue node's view decides; else the longest
    /// TTL among the others.
    pub(super) busy_pttl: Option<i64>,
    /// The queue node has us in its queue.
    pub(super) queued: bool,
    /// The queue node's view of the lock, when the attempt asked for it (see `Reply::state`).
    pub(super) seen: Option<Box<State>>,
    /// The queue node vetoes a majority of the others (see [`Tally::of`]).
    pub(super) vetoed: bool,
    /// The nodes that failed: the kind of error, and "URL (why)".
    pub(super) failed: Vec<(Kind, String)>,
    /// Nodes that may still apply this attempt (no answer, or a lost one): see
    /// [`Nodes::undo`](super::Nodes::undo).
    pub(super) missing: Vec<bool>,
}

impl Tally {
    /// Counts the answers (the queue node's first); `failed` describes the failed ones.
    pub(super) fn of(answers: &Answers<Attempt>, failed: Vec<(Kind, String)>) -> Tally {
        let n = answers.len();
        let mut t = Tally {
            granted: vec![false; n],
            fences: Vec::new(),
            run_ids: vec![None; n],
            acquired_ms: 0,
            busy_pttl: None,
            queued: false,
            seen: None,
            // The queue node decides whose turn it is: when it has the lock reserved for another
            // waiter, or granted to the waiter whose turn it is and who has no majority yet (its
            // other grants are on their way), a majority of the others does not count, or a
            // newcomer or a later waiter could overtake the queue when a lock expires. (A lock
            // otherwise held there by someone else does not veto: the majority decides who
            // holds it.)
            vetoed: matches!(answers[0], Some(Ok(Attempt::Busy { reserved: true, .. }))),
            failed,
            missing: answers
                .iter()
                .map(|a| match a {
                    Some(Ok(_)) => false,
                    // Refused (credentials, a script error, a replica): the node did not run the
                    // attempt.
                    Some(Err(e)) => {
                        kind_of(e) == Kind::Unavailable && !crate::error::was_refused(e)
                    }
                    None => true,
                })
                .collect(),
        };
        let queue_node_busy = matches!(answers[0], Some(Ok(Attempt::Busy { .. })));
        for (i, a) in answers.iter().enumerate() {
            match a {
                Some(Ok(Attempt::Granted(l))) => {
                    t.granted[i] = true;
                    t.fences.push(l.fence);
                    t.run_ids[i] = l.run_ids.first().cloned().flatten();
                    t.acquired_ms = t.acquired_ms.max(l.acquired_ms);
                }
                Some(Ok(Attempt::Busy {
                    pttl_ms,
                    queued,
                    seen,
                    ..
                })) => {
                    if i == 0 {
                        t.queued = *queued;
                        t.seen = seen.clone();
                        t.busy_pttl = Some(*pttl_ms);
                    } else if !queue_node_busy {
                        t.busy_pttl = Some(t.busy_pttl.map_or(*pttl_ms, |p| p.max(*pttl_ms)));
                    }
                }
                _ => {}
            }
        }
        t
    }

    pub(super) fn grants(&self) -> usize {
        self.fences.len()
    }

    /// The holder's fence: the highest of the granting nodes' values.
    pub(super) fn fence(&self) -> i64 {
        self.fences.iter().copied().max().unwrap_or(0)
    }

    /// Whether a node may still apply this attempt after we give it back.
    pub(super) fn doubt(&self) -> Doubt {
        if self.missing.contains(&true) {
            Doubt::Unsure
        } else {
            Doubt::Sure
        }
    }
}

/// What [`decide`] needs besides the tally.
#[derive(Debug, Clone, Copy)]
pub(super) struct Round {
    pub(super) n: usize,
    pub(super) q: usize,
    /// A waiter's attempt: it queues on the queue node.
    pub(super) join: bool,
    pub(super) ttl: Duration,
    /// From sending the attempt until now (after the fence write-back, if there was one).
    pub(super) elapsed: Duration,
    /// How many of the granting nodes recorded the fence: `None` until it is written back.
    pub(super) recorded: Option<usize>,
}

/// What to do with an attempt, from its tally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Two node addresses are one server: undo the attempt everywhere and refuse the
    /// configuration.
    SameServer(usize, usize),
    /// A majority granted it, with different fences: write the highest back to the granting
    /// nodes, then decide again with how many recorded it ([`Round::recorded`]). The write-back
    /// is a side effect between "a majority granted it" and "held", so the decision comes in two
    /// steps rather than taking a callback.
    RecordFence,
    /// Ours. `leave_queue`: we are in the queue node's queue, and it did not grant the lock: leave
    /// its queue.
    Held { leave_queue: bool },
    /// Our turn on the queue node, but no majority yet: the other nodes are held by someone,
    /// often a contender whose vetoed attempt is being undone right now. Undo the attempt on the
    /// others, keep the queue node (our next attempt, with a fresh token, takes it over) and look
    /// again soon ([`turn_delay`]), instead of handing our turn to the next waiter.
    RetryTurn,
    /// Not ours: clean up, then say why.
    NotOurs { cleanup: Cleanup, why: Miss },
}

/// How a failed attempt is taken back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cleanup {
    /// The queue node granted it: what it granted us goes to the next waiter, on every node, as
    /// in a release ([`Nodes::give_back`](super::Nodes::give_back)).
    GiveBack,
    /// Undo it on every node, except the queue node when `keep_place`: we wait on in its queue.
    Undo { keep_place: bool },
}

/// Why an attempt is not ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Miss {
    /// A majority answered, but the lock is taken, split or reserved for another waiter (the
    /// queue node's veto): look again later. As [`Attempt::Busy`].
    Busy { queued: bool, reserved: bool },
    /// A majority granted it, but too late: no validity was left.
    TooSlow,
    /// A majority granted it, but fewer recorded its fence.
    FenceNotRecorded { recorded: usize },
    /// More than N−Q nodes failed: `answered` is how many did not.
    NoMajority { answered: usize },
}

/// The pure decision of a quorum's [`try_acquire`](crate::store::Store::try_acquire): no I/O, no
/// clock. Held iff a majority granted it, the queue node does not veto, a majority recorded the
/// fence, and validity is left (`ttl > elapsed + drift`).
pub(super) fn decide(t: &Tally, r: &Round) -> Decision {
    let (n, q, grants) = (r.n, r.q, t.grants());
    if let Some((a, b)) = same_server(&t.run_ids) {
        return Decision::SameServer(a, b);
    }
    let majority = grants >= q && !t.vetoed;
    let fence = t.fence();
    let recorded = match r.recorded {
        Some(recorded) => recorded,
        // Unless they all agree already: rare now that a node's value is at least its clock in µs.
        None if majority && t.fences.iter().any(|&f| f != fence) => {
            return Decision::RecordFence;
        }
        None => grants,
    };
    let valid = r.ttl > r.elapsed + drift(r.ttl);
    // In our queue on the queue node, which did not grant it.
    let keep_place = t.queued && !t.granted[0];
    if majority && recorded >= q && valid {
        return Decision::Held {
            leave_queue: keep_place,
        };
    }
    let failed = t.failed.len();
    if r.join && t.granted[0] && grants < q && failed <= n - q {
        return Decision::RetryTurn;
    }
    let cleanup = if t.granted[0] {
        Cleanup::GiveBack
    } else {
        Cleanup::Undo { keep_place }
    };
    let why = if majority && !valid {
        Miss::TooSlow
    } else if majority {
        Miss::FenceNotRecorded { recorded }
    } else if failed > n - q {
        Miss::NoMajority {
            answered: n - failed,
        }
    } else {
        Miss::Busy {
            queued: keep_place,
            reserved: t.vetoed,
        }
    };
    Decision::NotOurs { cleanup, why }
}

/// The quorum's verdict on one lock from each node's state.
pub(super) fn verdict(
    keys: &Keys,
    nodes: Vec<(String, std::result::Result<State, String>)>,
    n: usize,
    q: usize,
) -> State {
    let answered: Vec<&State> = nodes.iter().filter_map(|(_, s)| s.as_ref().ok()).collect();
    let free = answered.iter().filter(|s| !s.held()).count();
    let best = most_held(&answered);
    let fence = answered.iter().map(|s| s.fence).max().unwrap_or(0);
    // Only the queue node keeps waiters.
    let queue_node = nodes.first().and_then(|(_, s)| s.as_ref().ok());
    let waiters = queue_node.map_or(0, |s| s.waiters);
    let queue = queue_node.map(|s| s.queue.clone()).unwrap_or_default();
    let mut state = State {
        keys: keys.clone(),
        token: None,
        pttl_ms: -2,
        now_ms: answered.first().map_or(0, |s| s.now_ms),
        fence,
        holder: None,
        last: None,
        waiters,
        queue,
        stale: None,
        // The latest forced release any node recorded (a forced release records it on each).
        forced: answered
            .iter()
            .filter_map(|s| s.forced.clone())
            .max_by_key(|f| f.at_ms),
        quorum: None,
        slots: None,
        // Each node counts the acquisitions that ran on it (`status --format prometheus` shows
        // each node's); these are the counters of the node that counted the most.
        counters: answered
            .iter()
            .map(|s| s.counters)
            .max_by_key(|c| c.acquisitions)
            .unwrap_or_default(),
    };
    let (verdict, agree) = match best {
        Some((token, with)) if with.len() >= q => {
            // The lock lasts while a majority keeps it: the q-th longest TTL among its nodes.
            let mut ttls: Vec<i64> = with.iter().map(|s| s.pttl_ms).collect();
            ttls.sort_unstable_by(|a, b| b.cmp(a));
            let holder_node = with.iter().find(|s| s.holder.is_some()).unwrap_or(&with[0]);
            state.token = Some(token.to_string());
            // The holder's fence is the highest among its own nodes; another node's counter
            // may be higher from attempts that failed.
            state.fence = with.iter().map(|s| s.fence).max().unwrap_or(fence);
            state.pttl_ms = ttls[q - 1];
            state.now_ms = holder_node.now_ms;
            state.holder = holder_node.holder.clone();
            (QuorumVerdict::Held, with.len())
        }
        _ if free >= q => {
            // The most recent record any node kept.
            state.last = answered
                .iter()
                .filter_map(|s| s.last.as_ref())
                .max_by_key(|h| h.fence)
                .cloned();
            (QuorumVerdict::Free, free)
        }
        _ if answered.len() < q => (QuorumVerdict::Unknown, answered.len()),
        Some((_, with)) => (QuorumVerdict::Split, with.len()),
        None => (QuorumVerdict::Split, free),
    };
    state.quorum = Some(QuorumView {
        verdict,
        needed: q,
        agree,
        nodes,
    });
    debug_assert!(n >= q);
    state
}

/// The token on the most nodes (the first found, on a tie), and the nodes holding it.
fn most_held<'a>(answered: &[&'a State]) -> Option<(&'a str, Vec<&'a State>)> {
    let mut best: Option<(&str, Vec<&State>)> = None;
    for s in answered {
        if let Some(t) = s.token.as_deref() {
            let with: Vec<&State> = answered
                .iter()
                .copied()
                .filter(|o| o.token.as_deref() == Some(t))
                .collect();
            if best.as_ref().is_none_or(|(_, b)| with.len() > b.len()) {
                best = Some((t, with));
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::failure;
    use crate::lock::{Holder, Lock};
    use std::time::Instant;

    #[test]
    fn majorities() {
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10)), Duration::from_millis(102));
    }

    const TTL: Duration = Duration::from_secs(1);

    fn keys() -> Keys {
        Keys::new("redlock:", "job").unwrap()
    }

    /// One node's answer per letter, the queue node first: `G` granted (fence 100 + node, so
    /// the fences differ), `g` granted (fence 100), `B` busy, held by someone else (TTL 100 ms ×
    /// (node + 1)), `Q` busy with us in the queue, `R` busy and reserved for another waiter (the
    /// queue node's veto), `V` the same with us in the queue, `F` no answer in time (it may still
    /// apply the attempt), `X` refused (credentials: it did not run the attempt).
    fn answers(spec: &str) -> Answers<Attempt> {
        let busy = |i: i64, queued, reserved| Attempt::Busy {
            pttl_ms: 100 * (i + 1),
            queued,
            reserved,
            seen: None,
        };
        spec.chars()
            .zip(0i64..)
            .map(|(c, i)| {
                Some(Ok(match c {
                    'G' | 'g' => Attempt::Granted(Lock {
                        keys: keys(),
                        token: "t".to_string(),
                        fence: if c == 'G' { 100 + i } else { 100 },
                        acquired_ms: 1000 + i,
                        ttl: TTL,
                        sent: Instant::now(),
                        lease: TTL,
                        taken: Instant::now(),
                        drift: Duration::ZERO,
                        run_ids: vec![Some(format!("run{i}"))],
                        slot: None,
                    }),
                    'B' => busy(i, false, false),
                    'Q' => busy(i, true, false),
                    'R' => busy(i, false, true),
                    'V' => busy(i, true, true),
                    'F' => return Some(Err(failure(Kind::Unavailable, format!("node {i} slow")))),
                    'X' => return Some(Err(failure(Kind::Auth, format!("node {i} refused")))),
                    other => panic!("unknown answer {other:?}"),
                }))
            })
            .collect()
    }

    fn tally(spec: &str) -> Tally {
        let answers = answers(spec);
        let failed = answers
            .iter()
            .filter_map(|a| match a {
                Some(Err(e)) => Some((kind_of(e), format!("{e}"))),
                _ => None,
            })
            .collect();
        Tally::of(&answers, failed)
    }

    fn round(n: usize, join: bool, elapsed_ms: u64, recorded: Option<usize>) -> Round {
        Round {
            n,
            q: quorum(n),
            join,
            ttl: TTL,
            elapsed: Duration::from_millis(elapsed_ms),
            recorded,
        }
    }

    #[test]
    fn tally_counts_the_answers() {
        let t = tally("GGB");
        assert_eq!(t.granted, [true, true, false]);
        assert_eq!((t.grants(), t.fence(), t.acquired_ms), (2, 101, 1001));
        assert_eq!(t.run_ids[1].as_deref(), Some("run1"));
        assert_eq!(t.run_ids[2], None);
        // The queue node granted it: the longest TTL among the others decides when to look again.
        assert_eq!(t.busy_pttl, Some(300));
        assert!(!t.queued && !t.vetoed);
        assert_eq!(t.doubt(), Doubt::Sure);
        // The queue node's view decides when to look again.
        let t = tally("QBB");
        assert_eq!((t.busy_pttl, t.queued, t.vetoed), (Some(100), true, false));
        assert_eq!((tally("RGG").vetoed, tally("BGG").vetoed), (true, false));
        // Only a node that may still apply the attempt is missing: a refusal did not run it.
        let t = tally("FXG");
        assert_eq!(t.missing, [true, false, false]);
        assert_eq!(
            (t.failed.len(), t.doubt(), t.busy_pttl),
            (2, Doubt::Unsure, None)
        );
        assert_eq!(tally("FBB").busy_pttl, Some(300));
    }

    #[test]
    fn decisions() {
        use Cleanup::{GiveBack, Undo};
        use Decision::{Held, NotOurs, RecordFence, RetryTurn};
        use Miss::{Busy, FenceNotRecorded, NoMajority, TooSlow};
        let busy = |queued, reserved| Busy { queued, reserved };
        let undo = |keep_place| Undo { keep_place };
        let not_ours = |cleanup, why| NotOurs { cleanup, why };
        let held = Held { leave_queue: false };
        // (what, answers, a waiter's attempt, ms elapsed, fence recorded on, decision)
        #[rustfmt::skip]
        let cases = [
            ("3: all granted, fences differ", "GGG", false, 10, None, RecordFence),
            ("3: all granted, fence recorded", "GGG", false, 10, Some(3), held),
            ("3: fences agree: no write-back", "ggB", false, 10, None, held),
            ("3: majority with the queue node", "GGB", false, 10, Some(2), held),
            ("3: majority elsewhere, queue node held", "BGG", false, 10, Some(2), held),
            ("3: majority elsewhere, queue node refused", "XGG", false, 10, Some(2), held),
            ("3: majority elsewhere, we queued there", "QGG", true, 10, Some(2),
                Held { leave_queue: true }),
            ("3: veto: reserved for another", "RGG", false, 10, None,
                not_ours(undo(false), busy(false, true))),
            ("3: veto while we wait in the queue", "VGG", true, 10, None,
                not_ours(undo(true), busy(true, true))),
            ("3: our turn, no majority, waiting", "GBB", true, 10, None, RetryTurn),
            ("3: our turn, no majority, not waiting", "GBB", false, 10, None,
                not_ours(GiveBack, busy(false, false))),
            ("3: validity left at the edge", "GGB", false, 987, Some(2), held),
            ("3: no validity left", "GGB", false, 988, Some(2), not_ours(GiveBack, TooSlow)),
            ("3: no validity left, queue node held", "BGG", false, 990, Some(2),
                not_ours(undo(false), TooSlow)),
            ("3: fence recorded on fewer than Q", "GGB", false, 10, Some(1),
                not_ours(GiveBack, FenceNotRecorded { recorded: 1 })),
            ("3: more than N-Q failed, our turn", "GFF", true, 10, None,
                not_ours(GiveBack, NoMajority { answered: 1 })),
            ("3: more than N-Q failed, queued", "QFF", true, 10, None,
                not_ours(undo(true), NoMajority { answered: 1 })),
            ("3: more than N-Q failed, busy", "BFX", false, 10, None,
                not_ours(undo(false), NoMajority { answered: 1 })),
            ("3: busy, keeping our place", "QBB", true, 10, None,
                not_ours(undo(true), busy(true, false))),
            ("3: busy, no place", "BBB", false, 10, None, not_ours(undo(false), busy(false, false))),
            ("3: split", "BGB", false, 10, None, not_ours(undo(false), busy(false, false))),
            ("5: majority, fences differ", "GGGBB", false, 10, None, RecordFence),
            ("5: majority with the queue node", "GGGBB", false, 10, Some(3), held),
            ("5: majority elsewhere", "BBGGG", false, 10, Some(3), held),
            ("5: majority elsewhere, we queued there", "QGGGB", true, 10, Some(3),
                Held { leave_queue: true }),
            ("5: veto: reserved for another", "RGGGG", false, 10, None,
                not_ours(undo(false), busy(false, true))),
            ("5: our turn, no majority, waiting", "GGBBB", true, 10, None, RetryTurn),
            ("5: our turn, N-Q failed, waiting", "GGBFF", true, 10, None, RetryTurn),
            ("5: our turn, no majority, not waiting", "GGBBB", false, 10, None,
                not_ours(GiveBack, busy(false, false))),
            ("5: no validity left", "GGGBB", false, 990, Some(3), not_ours(GiveBack, TooSlow)),
            ("5: fence recorded on fewer than Q", "GGGBB", false, 10, Some(2),
                not_ours(GiveBack, FenceNotRecorded { recorded: 2 })),
            ("5: more than N-Q failed, our turn", "GGFFF", true, 10, None,
                not_ours(GiveBack, NoMajority { answered: 2 })),
            ("5: more than N-Q failed, busy", "BBFFF", false, 10, None,
                not_ours(undo(false), NoMajority { answered: 2 })),
            ("5: busy, keeping our place", "QBBFF", true, 10, None,
                not_ours(undo(true), busy(true, false))),
            ("5: busy, no place", "BBBFF", false, 10, None,
                not_ours(undo(false), busy(false, false))),
        ];
        // Every wrong case at once, so that a change shows all it breaks.
        let wrong: Vec<String> = cases
            .into_iter()
            .filter_map(|(what, spec, join, elapsed_ms, recorded, want)| {
                let got = decide(&tally(spec), &round(spec.len(), join, elapsed_ms, recorded));
                (got != want).then(|| format!("{what} ({spec}): {got:?}, expected {want:?}"))
            })
            .collect();
        assert!(wrong.is_empty(), "wrong decisions:\n{}", wrong.join("\n"));
    }

    #[test]
    fn one_server_twice_is_refused_first() {
        let mut t = tally("RGG");
        t.run_ids[2] = t.run_ids[1].clone();
        assert_eq!(
            decide(&t, &round(3, false, 10, None)),
            Decision::SameServer(1, 2)
        );
    }

    #[test]
    fn turn_delay_doubles_up_to_a_third_of_the_ttl() {
        let ms = Duration::from_millis;
        assert_eq!(turn_delay(0, TTL), ms(25));
        assert_eq!(turn_delay(3, TTL), ms(200));
        assert_eq!(turn_delay(5, TTL), TTL / 3);
        assert_eq!(turn_delay(30, Duration::from_secs(60)), lock::BLOCK_CAP);
    }

    fn holder(token: &str, fence: i64, user: &str) -> Holder {
        Holder {
            token: token.to_string(),
            fence,
            host: "web1".to_string(),
            pid: "42".to_string(),
            user: user.to_string(),
            note: String::new(),
            acquired_ms: Some(1000),
            ttl_ms: Some(1000),
            expires_ms: None,
            released_ms: None,
            pidns: String::new(),
            ..Holder::default()
        }
    }

    /// A node's state: `token` held with `pttl_ms` left (its holder record names `user`), or
    /// free (`None`) with a last holder whose fence is `fence`.
    fn node(token: Option<&str>, pttl_ms: i64, fence: i64, user: &str) -> State {
        State {
            keys: keys(),
            token: token.map(str::to_string),
            pttl_ms,
            now_ms: 5000 + fence,
            fence,
            holder: token.map(|t| holder(t, fence, user)),
            last: token
                .is_none()
                .then(|| Box::new(holder("old", fence, user))),
            waiters: fence,
            queue: Vec::new(),
            stale: None,
            forced: None,
            quorum: None,
            counters: Default::default(),
            slots: None,
        }
    }

    fn look(nodes: Vec<std::result::Result<State, String>>) -> State {
        let n = nodes.len();
        let nodes = nodes
            .into_iter()
            .enumerate()
            .map(|(i, s)| (format!("redis://node{i}"), s))
            .collect();
        verdict(&keys(), nodes, n, quorum(n))
    }

    fn view(s: &State) -> (QuorumVerdict, usize, Option<&str>) {
        let q = s.quorum.as_ref().unwrap();
        (q.verdict, q.agree, s.token.as_deref())
    }

    #[test]
    fn verdict_held_reports_the_holders_nodes() {
        let free = || Ok(node(None, -2, 20, "old"));
        let s = look(vec![
            Ok(node(Some("A"), 900, 10, "alice")),
            Ok(node(Some("A"), 500, 12, "alice")),
            free(),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Held, 2, Some("A")));
        // The lock lasts while a majority keeps it: the Q-th longest TTL of the holder's nodes.
        assert_eq!(s.pttl_ms, 500);
        // The holder's fence is the highest among its own nodes, not the free node's counter.
        assert_eq!(s.fence, 12);
        assert_eq!(s.holder.as_ref().map(|h| h.user.as_str()), Some("alice"));
        // The queue node (the first) counts the waiters.
        assert_eq!(s.waiters, 10);
        let s = look(vec![
            Ok(node(Some("B"), 1000, 30, "bob")),
            Ok(node(Some("A"), 900, 10, "alice")),
            Ok(node(Some("A"), 700, 11, "alice")),
            Ok(node(Some("A"), 800, 12, "alice")),
            Ok(node(Some("A"), 500, 13, "alice")),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Held, 4, Some("A")));
        assert_eq!((s.pttl_ms, s.fence, s.now_ms), (700, 13, 5010));
        assert_eq!(s.holder.as_ref().map(|h| h.user.as_str()), Some("alice"));
        assert_eq!(QuorumVerdict::Held.as_str(), "held");
    }

    #[test]
    fn verdict_free_split_unknown() {
        let s = look(vec![
            Ok(node(None, -2, 7, "old")),
            Ok(node(Some("A"), 900, 10, "alice")),
            Ok(node(None, -2, 9, "older")),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Free, 2, None));
        assert_eq!(s.pttl_ms, -2);
        // The most recent record any node kept (the highest fence), and the highest counter.
        assert_eq!(s.last.as_ref().map(|h| h.user.as_str()), Some("older"));
        assert_eq!((s.fence, s.holder.is_none()), (10, true));
        let s = look(vec![
            Ok(node(Some("A"), 900, 10, "alice")),
            Ok(node(Some("B"), 800, 11, "bob")),
            Ok(node(None, -2, 9, "old")),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Split, 1, None));
        assert_eq!(s.pttl_ms, -2);
        let s = look(vec![
            Ok(node(Some("A"), 900, 10, "alice")),
            Ok(node(Some("A"), 900, 10, "alice")),
            Ok(node(Some("B"), 800, 11, "bob")),
            Ok(node(Some("B"), 800, 11, "bob")),
            Ok(node(None, -2, 9, "old")),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Split, 2, None));
        let s = look(vec![
            Ok(node(Some("A"), 900, 10, "alice")),
            Err("redis://node1 (refused)".to_string()),
            Err("redis://node2 (timed out)".to_string()),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Unknown, 1, None));
        let s = look(vec![
            Err("down".to_string()),
            Ok(node(None, -2, 9, "old")),
            Err("down".to_string()),
        ]);
        assert_eq!(view(&s), (QuorumVerdict::Unknown, 1, None));
        // Every node's view is kept, in order, for `status`.
        let nodes = &s.quorum.as_ref().unwrap().nodes;
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].0, "redis://node0");
        assert_eq!(nodes[0].1.as_ref().err().map(String::as_str), Some("down"));
        assert_eq!(s.waiters, 0);
    }
}
