//! Telling a holder at once that its lock was taken away, rather than at its next renewal.
//!
//! The script that takes a lock from its holder (`release --force`), or asks it to stop (a
//! `--preempt` waiter), publishes `REASON:TOKEN[:...]` on the lock's channel
//! `PREFIX{NAME}:events` ([`Keys::events`]) in the same atomic step; so does the release of a
//! lock kept alive by a keeper (`acquire --while-pid`) or of a place. `exec` (and a keeper)
//! listens there on a connection and thread of its own, from shortly after its command started
//! (a keeper: before it says that it runs, see [`Subscribed`]), and acts on a message naming its
//! token.
//!
//! Pub/sub is fire-and-forget: a listener that is not subscribed at that instant (its connection
//! dropped, or it had not subscribed yet) misses the message, and the renewal finds the loss
//! instead, within TTL/3. So the listener decides nothing alone, and when it cannot listen, the
//! command runs on as before. It costs one connection per `exec` and no polling: it blocks on its
//! subscription, and reconnects (with backoff) only after losing it.
//!
//! Nor is an announcement taken on trust: anyone who may PUBLISH may send one, and the token is
//! no secret (`GET` reads it). One naming our token is passed on only once one read of the lock
//! ([`Store::inspect`], on a connection the thread keeps for it) bears it out ([`borne_out`]): a
//! forced release or the owner's release only if the token holds the lock no more (the keeper
//! then renews once, which finds the release's mark or the loss), a preemption only if the
//! lock's record names that request for our token (and what it says is the record's, not the
//! message's). On a quorum, only a majority of nodes answering without the token bears a release
//! out (fewer answers, or a split, prove nothing); a release reaches the nodes one after the
//! other, so such a read is made again a few times within about a second ([`REREAD`]). An
//! announcement the keys do not bear out, or that cannot be checked (Redis did not answer),
//! changes nothing: the renewal decides, as for one never heard. Announcements naming other
//! tokens cost no read.
//!
//! Layer 11 of the list in `lib.rs`.

use std::ops::ControlFlow;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

use crate::config::Config;
use crate::error::{Kind, kind_of};
use crate::events::{Backoff, Event};
use crate::follow::{self, Lost, Plan};
use crate::lock::{Forced, Keys, Preemption, State};
use crate::messages;
use crate::output::forced_reason;
use crate::store::Store;

/// The first pause before subscribing again after losing the subscription; doubles up to
/// [`RESUBSCRIBE_CAP`].
const RESUBSCRIBE: Duration = Duration::from_millis(100);
const RESUBSCRIBE_CAP: Duration = Duration::from_secs(5);

/// On a quorum, the pause before reading the lock again when an announcement is not borne out
/// yet; doubles up to [`REREAD_CAP`] (then the announcement is ignored: 750 ms in all).
const REREAD: Duration = Duration::from_millis(50);
const REREAD_CAP: Duration = Duration::from_millis(400);

/// Hears, once, that the listener is subscribed, or that it never will be (refused: an ACL user
/// without the channel; or its thread could not start). A listener that is still trying to reach
/// the server is neither.
pub struct Subscribed(Receiver<()>);

impl Subscribed {
    /// Waits up to `slice`: `Some(true)` once subscribed, `Some(false)` when it never will be,
    /// `None` while the listener is still trying (so that the caller can look at something
    /// else between slices).
    pub fn settled_within(&self, slice: Duration) -> Option<bool> {
        match self.0.recv_timeout(slice) {
            Ok(()) => Some(true),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Some(false),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
        }
    }
}

/// Listens for announcements about `keys` naming `token` and sends each that the lock's keys
/// bear out as an [`Event`] on `tx`, until `tx` is closed. For a `preemptible` holder, it also
/// reads the lock once subscribed (and again after each new subscription), since a request to
/// stop made before (the holder listens from a moment after it took the lock) was announced to
/// nobody.
pub fn listen(
    config: &Config,
    keys: &Keys,
    token: &str,
    tx: Sender<Event>,
    preemptible: bool,
) -> Subscribed {
    let (said, subscribed) = mpsc::channel();
    let plan = Plan {
        thread: "notify",
        channels: vec![keys.events()],
        pattern: None,
        // A quiet channel is the normal case: wait for as long as it takes. A frozen server or a
        // dead link leave us blocked here harmlessly; the renewal notices those.
        ping: None,
        backoff: Backoff::new(RESUBSCRIBE, RESUBSCRIBE_CAP),
        reset: false,
    };
    let listener = Listener {
        config: config.clone(),
        keys: keys.clone(),
        token: token.to_string(),
        tx,
        preemptible,
        reader: None,
        said: Some(said),
    };
    if let Err(e) = follow::follow(config, plan, listener) {
        // The renewal still finds a loss.
        messages::log(config, || {
            format!("cannot start the notification thread: {e}")
        });
    }
    Subscribed(subscribed)
}

/// The notification thread's state.
struct Listener {
    config: Config,
    keys: Keys,
    token: String,
    tx: Sender<Event>,
    /// Taken `--preemptible`: a request to stop is looked for at each subscription.
    preemptible: bool,
    /// The connection that checks announcements, opened at the first one; `None` again after
    /// it failed.
    reader: Option<Box<dyn Store>>,
    /// Told once subscribed (dropped with the thread otherwise).
    said: Option<Sender<()>>,
}

impl follow::Listener for Listener {
    fn subscribed(&mut self) -> ControlFlow<()> {
        if let Some(said) = self.said.take() {
            let _ = said.send(());
        }
        if self.preemptible
            && let Some(state) = self.read()
        {
            // A request made before we listened was announced to nobody.
            let asked = Event::Preempted {
                token: self.token.clone(),
                preemption: Preemption {
                    by: String::new(),
                    at_ms: 0,
                },
            };
            if let Ok(event) = borne_out(&state, asked) {
                return follow::passed(self.tx.send(event));
            }
        }
        ControlFlow::Continue(())
    }

    fn message(&mut self, msg: &redis::Msg) -> ControlFlow<()> {
        let Some(event) = parse(msg.get_payload_bytes()) else {
            return ControlFlow::Continue(());
        };
        if token_of(&event) != Some(self.token.as_str()) {
            return ControlFlow::Continue(());
        }
        let Some(event) = self.confirm(event) else {
            messages::log(&self.config, || {
                format!(
                    "an announcement on {} about our token is not borne out by the lock's keys: \
                     ignored",
                    self.keys.events()
                )
            });
            return ControlFlow::Continue(());
        };
        follow::passed(self.tx.send(event))
    }

    fn lost(&mut self, lost: Lost, _: Duration) -> ControlFlow<()> {
        let e = lost.into_error(|_, why| format!("the server refused SUBSCRIBE: {why}"));
        let channel = self.keys.events();
        messages::log(&self.config, || {
            format!("not listening on {channel}: {e:#}")
        });
        // Refused (an ACL user without the channel: Redis 7 gives new users none) or not
        // understood: trying again cannot help.
        if kind_of(&e) != Kind::Unavailable {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

impl Listener {
    /// `event` if a read of the lock bears it out. On a quorum, a release reaches the nodes one
    /// after the other (the announcing one first): a read that finds the token still on too many
    /// of them is made again a few times, shortly (within about a second), before the
    /// announcement is ignored.
    fn confirm(&mut self, mut event: Event) -> Option<Event> {
        let mut pause = REREAD;
        loop {
            let state = self.read()?;
            let quorum = state.quorum.is_some();
            match borne_out(&state, event) {
                Ok(event) => return Some(event),
                Err(back) if quorum && pause <= REREAD_CAP => event = back,
                Err(_) => return None,
            }
            std::thread::sleep(pause);
            pause *= 2;
        }
    }

    /// The lock as it is now (one read), or `None` when it cannot be read.
    fn read(&mut self) -> Option<State> {
        if self.reader.is_none() {
            self.reader = crate::backend::open(&self.config).ok();
        }
        let state = self.reader.as_mut()?.inspect(&self.keys);
        if state.is_err() {
            self.reader = None;
        }
        state.ok()
    }
}

/// The token an announcement names.
fn token_of(event: &Event) -> Option<&str> {
    match event {
        Event::TakenAway { token, .. }
        | Event::Preempted { token, .. }
        | Event::Released { token } => Some(token),
        _ => None,
    }
}

/// Whether `token` holds the lock in `state` (one server's), as its holder or in a place.
fn holds_in(state: &State, token: &str) -> bool {
    state.token.as_deref() == Some(token)
        || state
            .slots
            .as_ref()
            .is_some_and(|s| s.holders.iter().any(|h| h.token == token))
}

/// `event` (an announcement, or a preemption to look for) if the lock's `state` bears it out,
/// as it is to be acted on; `None` if not. A forced release or the owner's release: the token
/// holds the lock no more (neither as its holder nor in a place); on a quorum, a majority of the
/// nodes answered without it (fewer answers, or a split, prove nothing: the renewal decides,
/// within TTL/3). A preemption: the holder is the token and its record says it was asked to
/// stop (the request as recorded).
fn borne_out(state: &State, event: Event) -> Result<Event, Event> {
    let holds = |token: &str| match &state.quorum {
        Some(q) => {
            let without = q
                .nodes
                .iter()
                .filter(|(_, node)| node.as_ref().is_ok_and(|s| !holds_in(s, token)))
                .count();
            without < q.needed
        }
        None => holds_in(state, token),
    };
    match event {
        Event::TakenAway { ref token, .. } | Event::Released { ref token } if !holds(token) => {
            Ok(event)
        }
        Event::Preempted { ref token, .. } => {
            let recorded = state
                .holder
                .as_ref()
                .filter(|h| &h.token == token && state.token.as_deref() == Some(token))
                .and_then(|h| h.preempted.clone());
            match recorded {
                Some(preemption) => Ok(Event::Preempted {
                    token: token.clone(),
                    preemption,
                }),
                None => Err(event),
            }
        }
        _ => Err(event),
    }
}

/// An announcement as the event it is; `None` for anything else (a reason this version does not
/// know is ignored: the renewal still finds the loss). A forced release comes as
/// `forced:TOKEN:FORCED_AT:FORCED_BY` (see `release.lua`), or as plain `forced:TOKEN`; a
/// preemption as `preempted:TOKEN:AT:BY` (see `acquire.lua`); the release of a kept lock as
/// `released:TOKEN`.
fn parse(payload: &[u8]) -> Option<Event> {
    let (reason, rest) = std::str::from_utf8(payload).ok()?.split_once(':')?;
    let (token, more) = rest.split_once(':').unwrap_or((rest, ""));
    let token = token.to_string();
    match reason {
        "forced" => {
            let forced = more.split_once(':').and_then(|(at, by)| {
                Some(Forced {
                    token: token.clone(),
                    // Anyone may publish on the channel: never for the terminal as is.
                    by: crate::printable::printable(by).into_owned(),
                    at_ms: at.parse().ok()?,
                })
            });
            let why = forced_reason(forced.as_ref());
            Some(Event::TakenAway { token, why })
        }
        "preempted" => Some(Event::Preempted {
            token,
            preemption: Preemption::parse(more)?,
        }),
        "released" => Some(Event::Released { token }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Holder, Mode, Slots};

    fn state(token: Option<&str>, holder: Option<Holder>, places: &[&str]) -> State {
        State {
            keys: Keys::new("redlock:", "k").unwrap(),
            token: token.map(str::to_string),
            pttl_ms: 5000,
            now_ms: 1_000_000,
            fence: 3,
            holder,
            last: None,
            waiters: 0,
            queue: Vec::new(),
            stale: None,
            forced: None,
            quorum: None,
            counters: Default::default(),
            slots: (!places.is_empty()).then(|| {
                Box::new(Slots {
                    mode: Mode::Exclusive,
                    set_by: String::new(),
                    holders: places
                        .iter()
                        .map(|t| Holder {
                            token: t.to_string(),
                            ..Holder::default()
                        })
                        .collect(),
                    reserved: 0,
                })
            }),
        }
    }

    /// Fails if an announcement is passed on that the lock's keys contradict (anyone may
    /// publish one), or one they bear out is dropped.
    #[test]
    fn an_announcement_is_acted_on_only_as_the_keys_bear_it_out() {
        let asked = Preemption {
            by: "ci@web (pid 7)".into(),
            at_ms: 5,
        };
        let held = |preempted: Option<Preemption>| {
            state(
                Some("t"),
                Some(Holder {
                    token: "t".into(),
                    preempted,
                    ..Holder::default()
                }),
                &[],
            )
        };
        let forced = || Event::TakenAway {
            token: "t".into(),
            why: "forced".into(),
        };
        let released = || Event::Released { token: "t".into() };
        let preempted = || Event::Preempted {
            token: "t".into(),
            preemption: Preemption {
                by: "mallory".into(),
                at_ms: 1,
            },
        };
        let ours = held(None);
        let in_a_place = state(Some("#slots"), None, &["u", "t"]);
        let gone = state(Some("other"), None, &["u"]);
        for (state, event, acted) in [
            (&ours, forced(), false),
            (&ours, released(), false),
            (&ours, preempted(), false),
            (&in_a_place, forced(), false),
            (&in_a_place, released(), false),
            (&gone, forced(), true),
            (&gone, released(), true),
            (&gone, preempted(), false),
        ] {
            let what = format!("{event:?}");
            assert_eq!(borne_out(state, event).is_ok(), acted, "{what}");
        }
        // A recorded request is acted on as recorded, not as announced.
        match borne_out(&held(Some(asked.clone())), preempted()) {
            Ok(Event::Preempted { preemption, .. }) => assert_eq!(preemption, asked),
            other => panic!("{other:?}"),
        }
    }

    /// Fails if a quorum's read with fewer than a majority of answers without our token (too few
    /// nodes answered, or a split) bears out a release: the token may still hold the lock.
    #[test]
    fn on_a_quorum_only_a_majority_without_the_token_bears_a_release_out() {
        use crate::lock::{QuorumVerdict, QuorumView};
        let on = |nodes: Vec<Result<State, String>>| {
            let mut s = state(None, None, &[]);
            s.quorum = Some(QuorumView {
                verdict: QuorumVerdict::Unknown,
                needed: 2,
                agree: 0,
                nodes: nodes.into_iter().map(|n| ("n".to_string(), n)).collect(),
            });
            s
        };
        let ours = || Ok(state(Some("t"), None, &[]));
        let free = || Ok(state(None, None, &[]));
        let down = || Err("timed out".to_string());
        for (nodes, acted) in [
            (vec![free(), down(), down()], false),
            (vec![free(), ours(), down()], false),
            (vec![free(), ours(), ours()], false),
            (vec![free(), free(), down()], true),
            (vec![free(), ours(), free()], true),
        ] {
            let what = format!("{nodes:?}");
            for event in [
                Event::Released { token: "t".into() },
                Event::TakenAway {
                    token: "t".into(),
                    why: "forced".into(),
                },
            ] {
                assert_eq!(
                    borne_out(&on(nodes.clone()), event).is_ok(),
                    acted,
                    "{what}"
                );
            }
        }
    }

    #[test]
    fn announcements_name_a_token_and_a_known_reason() {
        let taken = |payload: &[u8]| match parse(payload) {
            Some(Event::TakenAway { token, why }) => Some((token, why)),
            _ => None,
        };
        let (token, why) = taken(b"forced:0123abcd").unwrap();
        assert_eq!(token, "0123abcd");
        assert!(why.contains("force-released"), "{why}");
        let (token, why) = taken(b"forced:0123abcd:1764597600000:ops@web:1 (pid 7)").unwrap();
        assert_eq!(token, "0123abcd");
        assert!(
            why.contains("force-released by ops@web:1 (pid 7) at 2025-12-01T14:00:00Z"),
            "{why}"
        );
        match parse(b"preempted:0123abcd:1764597600000:ci@web:1 (pid 7)") {
            Some(Event::Preempted { token, preemption }) => {
                assert_eq!(token, "0123abcd");
                assert_eq!(preemption.by, "ci@web:1 (pid 7)");
                assert_eq!(preemption.at_ms, 1_764_597_600_000);
            }
            other => panic!("{other:?}"),
        }
        assert!(parse(b"preempted:0123abcd").is_none());
        assert!(matches!(
            parse(b"released:0123abcd"),
            Some(Event::Released { token }) if token == "0123abcd"
        ));
        assert!(parse(b"0123abcd").is_none());
        assert!(parse(b"forced:\xff").is_none());
    }
}
