//! The Lua scripts, one file each under `src/scripts/`, loaded once per process.
//!
//! Each script is the unit of atomicity for one lock operation; the comment at the top of each
//! file says what it makes atomic and why. `redis::Script` runs them with EVALSHA and falls back
//! to EVAL when the server does not know the script (after a restart or SCRIPT FLUSH).

use std::sync::LazyLock;

use redis::Script;

pub static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/acquire.lua")));
pub static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/release.lua")));
pub static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/extend.lua")));
pub static STATUS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/status.lua")));
