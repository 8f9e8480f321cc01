//! The Lua scripts, one file each under `src/scripts/`, assembled and hashed at build time.
//!
//! Each script is the unit of atomicity for one lock operation; the comment at the top of each
//! file says what it makes atomic and why. `build.rs` assembles what is sent: `common.lua` (key
//! names, the queue helpers) first in every script, so all of them agree on the layout, and
//! `guard.lua`'s server check around the attempt a connection sends first. It also computes
//! each one's SHA1 there: hashing them at every start cost more than the rest of `redlock exec
//! KEY -- true` together. [`Script`] runs them with EVALSHA and loads one with SCRIPT LOAD when
//! the server does not know it (after a restart or SCRIPT FLUSH), as `redis::Script` does.
//!
//! Layer 0 of the list in `lib.rs`.

use redis::{ConnectionLike, ErrorKind, FromRedisValue, RedisResult, ServerErrorKind, ToRedisArgs};

/// A script as sent to Redis, and its SHA1 (hex), both from `build.rs`.
#[derive(Debug)]
pub struct Script {
    code: &'static str,
    hash: &'static str,
}

impl Script {
    const fn new(code: &'static str, hash: &'static str) -> Script {
        Script { code, hash }
    }

    /// The SHA1 that EVALSHA names it by.
    pub fn get_hash(&self) -> &'static str {
        self.hash
    }

    /// SCRIPT LOAD: the server knows it from then on (until a restart or SCRIPT FLUSH).
    pub fn load(&self, con: &mut dyn ConnectionLike) -> RedisResult<String> {
        redis::cmd("SCRIPT").arg("LOAD").arg(self.code).query(con)
    }

    /// A call of the script with `key` as its first key (or keys, for a slice).
    pub fn key<T: ToRedisArgs>(&self, key: T) -> Invocation<'_> {
        Invocation {
            script: self,
            keys: key.to_redis_args(),
            args: Vec::new(),
        }
    }
}

/// One call of a [`Script`]: its keys and arguments, as `redis::ScriptInvocation` has them.
pub struct Invocation<'a> {
    script: &'a Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation<'_> {
    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// EVALSHA; on NOSCRIPT, SCRIPT LOAD and EVALSHA again.
    pub fn invoke<T: FromRedisValue>(&self, con: &mut dyn ConnectionLike) -> RedisResult<T> {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg(self.script.hash)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        match eval.query(con) {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load(con)?;
                eval.query(con)
            }
            other => other,
        }
    }
}

include!(concat!(env!("OUT_DIR"), "/scripts.rs"));

/// `leave.lua` as sent with EVAL: a leave that must run even if the server never gets to answer
/// (a frozen server runs it when it thaws, after we are gone) cannot be an EVALSHA, which a server
/// that has not seen the script yet refuses with NOSCRIPT, and nobody is there to send the EVAL.
pub const LEAVE_SOURCE: &str = include_str!(concat!(env!("OUT_DIR"), "/leave.lua"));

/// The three forms of one kind of attempt: as is, and behind the server check, without and with
/// eviction allowed (`client.rs` sends a checked one first on each connection).
pub struct Attempts {
    pub unchecked: &'static Script,
    pub checked: &'static Script,
    pub checked_allow_eviction: &'static Script,
}

/// An attempt on a plain (exclusive) lock.
pub static PLAIN: Attempts = Attempts {
    unchecked: &ACQUIRE,
    checked: &ACQUIRE_CHECKED,
    checked_allow_eviction: &ACQUIRE_CHECKED_ALLOW_EVICTION,
};

/// An attempt on a lock with more than one holder (`slots_common.lua` after `common.lua`).
pub static SLOTS: Attempts = Attempts {
    unchecked: &SLOTS_ACQUIRE,
    checked: &SLOTS_ACQUIRE_CHECKED,
    checked_allow_eviction: &SLOTS_ACQUIRE_CHECKED_ALLOW_EVICTION,
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash `build.rs` computed is the SHA1 of what is sent (as `redis::Script` computes it).
    #[test]
    fn every_hash_is_its_scripts_sha1() {
        for s in [
            &ACQUIRE,
            &ACQUIRE_CHECKED,
            &ACQUIRE_CHECKED_ALLOW_EVICTION,
            &SLOTS_ACQUIRE,
            &SLOTS_ACQUIRE_CHECKED,
            &SLOTS_ACQUIRE_CHECKED_ALLOW_EVICTION,
            &SLOTS_RELEASE,
            &SLOTS_EXTEND,
            &RELEASE,
            &EXTEND,
            &LEAVE,
            &STATUS,
            &FENCE,
            &LOST,
        ] {
            assert_eq!(s.get_hash(), redis::Script::new(s.code).get_hash());
            assert!(s.code.starts_with(include_str!("scripts/common.lua")));
        }
        assert_eq!(LEAVE.code, LEAVE_SOURCE);
        assert!(
            ACQUIRE_CHECKED
                .code
                .contains("return guarded(attempt, false)")
        );
    }
}
