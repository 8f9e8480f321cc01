//! Telling a holder at once that its lock was taken away, rather than at its next renewal.
//!
//! The script that takes a lock from its holder (`release --force`), or asks it to stop (a
//! `--preempt` waiter), publishes `REASON:TOKEN[:...]` on the lock's channel
//! `PREFIX{NAME}:events` ([`Keys::events`]) in the same atomic step; so does the release of a
//! lock kept alive by a keeper (`acquire --while-pid`). `exec` (and a keeper) listens there on a
//! connection and thread of its own, from shortly after its command started, and acts on a
//! message naming its token.
//!
//! Pub/sub is fire-and-forget: a listener that is not subscribed at that instant (its connection
//! dropped, or it had not subscribed yet) misses the message, and the renewal finds the loss
//! instead, within TTL/3. So the listener decides nothing alone, and when it cannot listen, the
//! command runs on as before. It costs one connection per `exec` and no polling: it blocks on its
//! subscription, and reconnects (with backoff) only after losing it.
//!
//! Layer 11 of the list in `lib.rs`.

use std::sync::mpsc::Sender;
use std::time::Duration;

use anyhow::Result;

use crate::client;
use crate::config::Config;
use crate::error::{Kind, failure, kind_of, redis_kind};
use crate::lock::{Forced, Keys, Preemption, forced_reason};
use crate::messages;
use crate::wait::Event;

/// The first pause before subscribing again after losing the subscription; doubles up to
/// [`RESUBSCRIBE_CAP`].
const RESUBSCRIBE: Duration = Duration::from_millis(100);
const RESUBSCRIBE_CAP: Duration = Duration::from_secs(5);

/// Listens for announcements about `keys` and sends each as an [`Event`] on `tx`, until `tx` is
/// closed. For the `--preemptible` holder with token `preemptible` (if any), it also reads the
/// lock once subscribed (and again after each new subscription), since a request to stop made
/// before (the holder listens from a moment after it took the lock) was announced to nobody.
pub fn listen(config: &Config, keys: &Keys, tx: Sender<Event>, preemptible: Option<String>) {
    let (shared, channel) = (config.clone(), keys.events());
    let keys = keys.clone();
    let spawned = std::thread::Builder::new()
        .name("notify".into())
        .spawn(move || {
            let config = shared;
            let mut pause = RESUBSCRIBE;
            loop {
                match subscribe(&config, &channel, &tx, || {
                    if let Some(token) = &preemptible {
                        asked_already(&config, &keys, token, &tx);
                    }
                }) {
                    Ok(Listening::Stopped) => return,
                    Ok(Listening::Dropped(e)) | Err(e) => {
                        messages::log(&config, || format!("not listening on {channel}: {e:#}"));
                        // Refused (an ACL user without the channel: Redis 7 gives new users
                        // none) or not understood: trying again cannot help.
                        if kind_of(&e) != Kind::Unavailable {
                            return;
                        }
                    }
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(RESUBSCRIBE_CAP);
            }
        });
    if let Err(e) = spawned {
        // The renewal still finds a loss.
        messages::log(config, || {
            format!("cannot start the notification thread: {e}")
        });
    }
}

enum Listening {
    /// `tx` is closed: nobody needs us any more.
    Stopped,
    /// The subscription was made and then lost.
    Dropped(anyhow::Error),
}

/// Sends [`Event::Preempted`] if the lock's record says that a `--preempt` waiter asked the
/// holder with `token` to stop. Best effort: without an answer, the renewal finds it.
fn asked_already(config: &Config, keys: &Keys, token: &str, tx: &Sender<Event>) {
    let state = crate::backend::open(config).and_then(|mut store| store.inspect(keys));
    if let Ok(state) = state
        && let Some(h) = state.holder.filter(|h| h.token == token)
        && let Some(preemption) = h.preempted
    {
        let _ = tx.send(Event::Preempted {
            token: token.to_string(),
            preemption,
        });
    }
}

/// Subscribes to `channel` and passes on what arrives, until the connection fails; `subscribed`
/// runs once the subscription is confirmed.
fn subscribe(
    config: &Config,
    channel: &str,
    tx: &Sender<Event>,
    subscribed: impl FnOnce(),
) -> Result<Listening> {
    let mut con = client::subscriber(config)?;
    if let Err((e, why)) =
        client::confirm_subscription(&mut con, redis::cmd("SUBSCRIBE").arg(channel), 1)?
    {
        return Err(failure(
            redis_kind(&e),
            format!("the server refused SUBSCRIBE: {why}"),
        ));
    }
    subscribed();
    let mut pubsub = con.as_pubsub();
    // A quiet channel is the normal case: wait for as long as it takes. A frozen server or a
    // dead link leave us blocked here harmlessly; the renewal notices those.
    pubsub.set_read_timeout(None)?;
    loop {
        let msg = match pubsub.get_message() {
            Ok(msg) => msg,
            Err(e) => return Ok(Listening::Dropped(e.into())),
        };
        if let Some(event) = parse(msg.get_payload_bytes())
            && tx.send(event).is_err()
        {
            return Ok(Listening::Stopped);
        }
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
