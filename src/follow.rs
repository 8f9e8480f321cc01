//! One pub/sub follower: a thread of its own that subscribes to a lock's channels, hands every
//! message to its [`Listener`], and subscribes again with backoff when the subscription fails or
//! is lost, until the listener stops it or says that trying again cannot help.
//!
//! Used by `redlock wait` (the lock's changes), `exec` and the keeper (announcements about their
//! token, `notify.rs`) and `status --watch` (every change). It subscribes where
//! [`client::subscriber`] says (the server, Sentinel's master asked again on every try, a
//! quorum's first URL, one node of a Cluster). A subscription is confirmed before it counts:
//! each (P)SUBSCRIBE's replies are read ([`client::confirm_subscription`]), so a refusal (an ACL
//! user without the channel) is seen as one. A quiet subscription either blocks for as long as
//! it takes ([`Plan::ping`] `None`: the caller notices a dead server otherwise) or is pinged
//! after a silence, and a PING unanswered within `--io-timeout` counts as a lost subscription.
//! What a failure means, and the words for it, are the listener's ([`Lost`]).
//!
//! Layer 8 of the list in `lib.rs`.

use std::ops::ControlFlow;
use std::time::Duration;

use crate::client;
use crate::config::Config;
use crate::events::Backoff;

/// What to subscribe to, and how.
pub struct Plan {
    /// The thread's name.
    pub thread: &'static str,
    /// The channels to SUBSCRIBE to (first), and a pattern to PSUBSCRIBE to (after them).
    pub channels: Vec<String>,
    pub pattern: Option<String>,
    /// After this long without a message, a PING checks that the server is there; `None`: a
    /// quiet subscription blocks for as long as it takes.
    pub ping: Option<Duration>,
    /// The pauses before subscribing again.
    pub backoff: Backoff,
    /// Back to the first pause once a subscription was made.
    pub reset: bool,
}

/// How a subscription failed, or was lost.
pub enum Lost {
    /// No connection could be made.
    Connect(anyhow::Error),
    /// The (P)SUBSCRIBE `command` went unanswered (the connection failed, or timed out).
    Unanswered {
        command: &'static str,
        error: redis::RedisError,
    },
    /// The server refused a (P)SUBSCRIBE to `to` (the channels or pattern), saying `why`.
    Refused {
        to: String,
        error: redis::RedisError,
        why: String,
    },
    /// The subscribed connection could not be set up for reading.
    Socket(redis::RedisError),
    /// Reading the subscription failed.
    Dropped(redis::RedisError),
    /// A quiet subscription did not answer its PING.
    Silent(redis::RedisError),
}

impl Lost {
    /// Whether the subscription had been made.
    pub fn listened(&self) -> bool {
        matches!(self, Lost::Socket(_) | Lost::Dropped(_) | Lost::Silent(_))
    }

    /// The failure as an error, in the driver's words (a refusal: `refused` makes it).
    pub fn into_error(self, refused: impl FnOnce(&str, &str) -> String) -> anyhow::Error {
        match self {
            Lost::Connect(e) => e,
            Lost::Refused { error, why, to, .. } => {
                crate::error::failure(crate::error::redis_kind(&error), refused(&to, &why))
            }
            Lost::Unanswered { error, .. }
            | Lost::Socket(error)
            | Lost::Dropped(error)
            | Lost::Silent(error) => error.into(),
        }
    }
}

/// What a follower does with what it hears. Each method's `Break` ends the thread.
pub trait Listener: Send + 'static {
    /// The subscription is made (again): something may have been missed meanwhile.
    fn subscribed(&mut self) -> ControlFlow<()>;
    /// A message arrived.
    fn message(&mut self, msg: &redis::Msg) -> ControlFlow<()>;
    /// The subscription failed or was lost; `Continue`: try again after `pause`.
    fn lost(&mut self, lost: Lost, pause: Duration) -> ControlFlow<()>;
}

/// `Break` once nobody receives what a listener passes on.
pub fn passed<T>(sent: Result<(), std::sync::mpsc::SendError<T>>) -> ControlFlow<()> {
    match sent {
        Ok(()) => ControlFlow::Continue(()),
        Err(_) => ControlFlow::Break(()),
    }
}

/// Starts the follower on a thread of its own; an error if the thread cannot start.
pub fn follow(config: &Config, plan: Plan, mut listener: impl Listener) -> std::io::Result<()> {
    let config = config.clone();
    std::thread::Builder::new()
        .name(plan.thread.into())
        .spawn(move || {
            let mut backoff = plan.backoff;
            loop {
                let Some(lost) = subscribe(&config, &plan, &mut listener) else {
                    return;
                };
                if plan.reset && lost.listened() {
                    backoff.reset();
                }
                let pause = backoff.pause();
                if listener.lost(lost, pause).is_break() {
                    return;
                }
                std::thread::sleep(pause);
            }
        })
        .map(drop)
}

/// One subscription, followed until it fails (`Some`) or the listener stops (`None`).
fn subscribe(config: &Config, plan: &Plan, listener: &mut impl Listener) -> Option<Lost> {
    let mut con = match client::subscriber(config) {
        Ok(con) => con,
        Err(e) => return Some(Lost::Connect(e)),
    };
    let mut commands = vec![(
        "SUBSCRIBE",
        redis::cmd("SUBSCRIBE").arg(&plan.channels).clone(),
        plan.channels.len(),
        plan.channels.join(", "),
    )];
    if let Some(pattern) = &plan.pattern {
        let psubscribe = redis::cmd("PSUBSCRIBE").arg(pattern).clone();
        commands.push(("PSUBSCRIBE", psubscribe, 1, pattern.clone()));
    }
    for (command, cmd, count, to) in commands {
        match client::confirm_subscription(&mut con, &cmd, count) {
            Ok(Ok(())) => {}
            Ok(Err((error, why))) => {
                return Some(Lost::Refused { to, error, why });
            }
            Err(error) => return Some(Lost::Unanswered { command, error }),
        }
    }
    if listener.subscribed().is_break() {
        return None;
    }
    let mut pubsub = con.as_pubsub();
    if let Err(e) = pubsub.set_read_timeout(plan.ping) {
        return Some(Lost::Socket(e));
    }
    loop {
        match pubsub.get_message() {
            Ok(msg) => {
                if listener.message(&msg).is_break() {
                    return None;
                }
            }
            Err(e) if e.is_timeout() && plan.ping.is_some() => {
                // Quiet is normal; a server that does not answer a PING is not there.
                let pinged = pubsub
                    .set_read_timeout(Some(config.io_timeout))
                    .map_err(Lost::Socket)
                    .and_then(|()| pubsub.ping::<redis::Value>().map_err(Lost::Silent))
                    .and_then(|_| pubsub.set_read_timeout(plan.ping).map_err(Lost::Socket));
                if let Err(lost) = pinged {
                    return Some(lost);
                }
            }
            Err(e) => return Some(Lost::Dropped(e)),
        }
    }
}
