//! The Lua scripts, one file each under `src/scripts/`, loaded once per process.
//!
//! Each script is the unit of atomicity for one lock operation; the comment at the top of each
//! file says what it makes atomic and why. `common.lua` (key names, the queue helpers) is
//! prepended to every script at compile time, so all of them agree on the layout. `redis::Script`
//! runs them with EVALSHA and falls back to EVAL when the server does not know the script (after a
//! restart or SCRIPT FLUSH).
//!
//! Layer 0 of the list in `lib.rs`.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("scripts/common.lua"),
                include_str!(concat!("scripts/", $file))
            ))
        })
    };
}

pub static ACQUIRE: LazyLock<Script> = script!("acquire.lua");
// `acquire.lua` behind `guard.lua`'s server check, for a connection's first attempt: refuses a
// replica, and a server whose maxmemory-policy is allkeys-* (unless the variant allows
// eviction), before anything is written; reports the policy at the end of the reply. The check
// rides on the attempt instead of costing a round trip of its own (`exec -- true` makes two).
// acquire.lua itself is unchanged: it becomes the body of a function (its `return`s return
// from it), which is why this is built here rather than in the file.
macro_rules! checked_acquire {
    ($allow_eviction:literal $(, $prelude:literal)* => $file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("scripts/common.lua"),
                $(include_str!(concat!("scripts/", $prelude)),)*
                include_str!("scripts/guard.lua"),
                "local function attempt()\n",
                include_str!(concat!("scripts/", $file)),
                "\nend\nreturn guarded(attempt, ",
                $allow_eviction,
                ")\n"
            ))
        })
    };
}
pub static ACQUIRE_CHECKED: LazyLock<Script> = checked_acquire!("false" => "acquire.lua");
pub static ACQUIRE_CHECKED_ALLOW_EVICTION: LazyLock<Script> =
    checked_acquire!("true" => "acquire.lua");

/// The three forms of one kind of attempt: as is, and behind the server check, without and with
/// eviction allowed (`client.rs` sends a checked one first on each connection).
pub struct Attempts {
    pub unchecked: &'static LazyLock<Script>,
    pub checked: &'static LazyLock<Script>,
    pub checked_allow_eviction: &'static LazyLock<Script>,
}

/// An attempt on a plain (exclusive) lock.
pub static PLAIN: Attempts = Attempts {
    unchecked: &ACQUIRE,
    checked: &ACQUIRE_CHECKED,
    checked_allow_eviction: &ACQUIRE_CHECKED_ALLOW_EVICTION,
};

/// Scripts for locks with more than one holder (`slots_common.lua` after `common.lua`).
macro_rules! slots_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("scripts/common.lua"),
                include_str!("scripts/slots_common.lua"),
                include_str!(concat!("scripts/", $file))
            ))
        })
    };
}
pub static SLOTS_ACQUIRE: LazyLock<Script> = slots_script!("slots.lua");
pub static SLOTS_ACQUIRE_CHECKED: LazyLock<Script> =
    checked_acquire!("false", "slots_common.lua" => "slots.lua");
pub static SLOTS_ACQUIRE_CHECKED_ALLOW_EVICTION: LazyLock<Script> =
    checked_acquire!("true", "slots_common.lua" => "slots.lua");
pub static SLOTS_RELEASE: LazyLock<Script> = slots_script!("slots_release.lua");
pub static SLOTS_EXTEND: LazyLock<Script> = slots_script!("slots_extend.lua");

/// An attempt on a lock with more than one holder.
pub static SLOTS: Attempts = Attempts {
    unchecked: &SLOTS_ACQUIRE,
    checked: &SLOTS_ACQUIRE_CHECKED,
    checked_allow_eviction: &SLOTS_ACQUIRE_CHECKED_ALLOW_EVICTION,
};
pub static RELEASE: LazyLock<Script> = script!("release.lua");
pub static EXTEND: LazyLock<Script> = script!("extend.lua");
pub static LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new(LEAVE_SOURCE));
/// `leave.lua` as sent with EVAL: a leave that must run even if the server never gets to answer
/// (a frozen server runs it when it thaws, after we are gone) cannot be an EVALSHA, which a server
/// that has not seen the script yet refuses with NOSCRIPT, and nobody is there to send the EVAL.
pub const LEAVE_SOURCE: &str = concat!(
    include_str!("scripts/common.lua"),
    include_str!("scripts/slots_common.lua"),
    include_str!("scripts/leave.lua")
);
pub static STATUS: LazyLock<Script> = script!("status.lua");
pub static FENCE: LazyLock<Script> = script!("fence.lua");
pub static LOST: LazyLock<Script> = script!("lost.lua");
