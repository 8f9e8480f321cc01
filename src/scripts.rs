//! The Lua scripts, one file each under `src/scripts/`, assembled and hashed at build time.
//!
//! Each script is the unit of atomicity for one lock operation; the comment at the top of each
//! file says what it makes atomic and why. `build.rs` assembles what is sent: the definitions of
//! `common.lua` (key names, the queue helpers) that a script uses before it, so all of them agree
//! on the layout, and `guard.lua`'s server check around the attempt a connection sends first.
//! Only those it uses: Redis runs the whole of a script on every call, and a closure made for
//! each helper it carries was most of what a short script cost. A helper left out would fail at
//! run time, and only on the path that uses it: the tests compile every script with `luac5.1`
//! and fail on any global Redis does not provide. `build.rs` also computes each one's SHA1:
//! hashing them at every start cost more than the rest of `redlock exec KEY -- true` together. [`Script`] runs them with EVALSHA and loads one with SCRIPT LOAD when
//! the server does not know it (after a restart or SCRIPT FLUSH), as `redis::Script` does.
//!
//! Arguments by name. A script's arguments are positional on the wire (`ARGV[n]`), and each script
//! says once, at its top, what each position means: `local A = {token = ARGV[1], ttl_ms =
//! ARGV[2], ...}` (see `common.lua`), read by name from then on.
//! `build.rs` reads that declaration into [`Script`]'s names, and an [`Invocation`] names each
//! argument as it adds it ([`Invocation::arg`]): the names go nowhere (the wire carries the same
//! values as ever), but a call whose names differ from the script's declaration, in number or in
//! order, fails a debug assertion when it is sent, and the unit tests of `lock` build every call
//! and compare.
//!
//! Layer 0 of the list in `lib.rs`.

use redis::{ConnectionLike, ErrorKind, FromRedisValue, RedisResult, ServerErrorKind, ToRedisArgs};

/// A script as sent to Redis, and its SHA1 (hex), both from `build.rs`.
#[derive(Debug)]
pub struct Script {
    code: &'static str,
    hash: &'static str,
    /// Its arguments' names, in ARGV order, as it declares them (`local A = {...}`).
    names: &'static [&'static str],
}

impl Script {
    const fn new(code: &'static str, hash: &'static str, names: &'static [&'static str]) -> Script {
        Script { code, hash, names }
    }

    /// Its arguments' names, in ARGV order (see the module doc).
    #[cfg(test)]
    pub fn names(&self) -> &'static [&'static str] {
        self.names
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
            names: Vec::new(),
        }
    }
}

/// One call of a [`Script`]: its keys and arguments, as `redis::ScriptInvocation` has them, and
/// the arguments' names (see the module doc).
pub struct Invocation<'a> {
    script: &'a Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
    names: Vec<&'static str>,
}

impl Invocation<'_> {
    /// Adds the argument the script names `name` (the next in its declaration).
    pub fn arg<T: ToRedisArgs>(&mut self, name: &'static str, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self.names.push(name);
        self
    }

    /// The arguments' names, as the call gave them.
    #[cfg(test)]
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }

    /// The script it calls.
    #[cfg(test)]
    pub fn script(&self) -> &Script {
        self.script
    }

    /// A call that does not match its script's declaration is a bug in this crate.
    fn check(&self) {
        debug_assert_eq!(
            (self.names.as_slice(), self.args.len()),
            (self.script.names, self.script.names.len()),
            "a script's arguments, as called and as declared"
        );
    }

    /// EVAL with the whole script, not its hash: for a call that must run even if the server
    /// never gets to answer (a leave in doubt: a frozen server runs it when it thaws, after we are
    /// gone), which cannot be an EVALSHA: a server that has not seen the script yet refuses it
    /// with NOSCRIPT, and nobody is there to send the EVAL.
    pub fn eval<T: FromRedisValue>(&self, con: &mut dyn ConnectionLike) -> RedisResult<T> {
        self.check();
        redis::cmd("EVAL")
            .arg(self.script.code)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args)
            .query(con)
    }

    /// EVALSHA; on NOSCRIPT, SCRIPT LOAD and EVALSHA again.
    pub fn invoke<T: FromRedisValue>(&self, con: &mut dyn ConnectionLike) -> RedisResult<T> {
        self.check();
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

/// The three forms of one kind of attempt: as is, and behind the server check, without and with
/// eviction allowed (`client/` sends a checked one first on each connection).
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

/// Every script, for the tests.
#[cfg(test)]
pub static ALL: [&Script; 14] = [
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
];

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash `build.rs` computed is the SHA1 of what is sent (as `redis::Script` computes it).
    #[test]
    fn every_hash_is_its_scripts_sha1() {
        // Every script carries the key names (see `a_script_carries_only_the_helpers_it_uses`).
        let key_names = include_str!("scripts/common.lua")
            .lines()
            .find(|l| l.starts_with("local "))
            .unwrap();
        for s in ALL {
            assert_eq!(s.get_hash(), redis::Script::new(s.code).get_hash());
            assert!(s.code.contains(key_names), "{}", s.code);
        }
        assert!(
            ACQUIRE_CHECKED
                .code
                .contains("return guarded(attempt, false)")
        );
    }

    /// The `local function`s a script defines at its top level, in order.
    fn functions(code: &str) -> Vec<&str> {
        code.lines()
            .filter_map(|l| l.strip_prefix("local function "))
            .map(|l| l.split('(').next().unwrap())
            .collect()
    }

    /// Each script carries the helpers it uses, and only those (`build.rs`): `status` reads, and
    /// needs four of the functions of `common.lua`.
    #[test]
    fn a_script_carries_only_the_helpers_it_uses() {
        assert_eq!(
            functions(STATUS.code),
            ["who_field", "now_us", "now_ms", "snapshot"]
        );
        assert!(!STATUS.code.contains("local watch_all"));
        // Transitively: fence.lua calls keep_meta and event, which call int and listened.
        let fence = functions(FENCE.code);
        for f in ["keep_meta", "int", "event", "listened", "now_ms"] {
            assert!(fence.contains(&f), "{f}: {fence:?}");
        }
        assert!(!fence.contains(&"snapshot"), "{fence:?}");
        // The checked attempts carry guard.lua's, and everything the attempt uses.
        let checked = functions(SLOTS_ACQUIRE_CHECKED.code);
        for f in functions(SLOTS_ACQUIRE.code) {
            assert!(checked.contains(&f), "{f}: {checked:?}");
        }
        for f in ["server_check", "guarded", "info_field", "attempt"] {
            assert!(checked.contains(&f), "{f}: {checked:?}");
        }
    }

    /// No script reads ARGV by number but in its declaration: each reads its arguments by the
    /// names it declares (which `build.rs` found: `lock`'s tests hold every call to them), and a
    /// script that takes arguments declares them.
    #[test]
    fn scripts_read_their_arguments_by_name() {
        let code = |lua: &str| {
            lua.lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        for helpers in [
            include_str!("scripts/common.lua"),
            include_str!("scripts/slots_common.lua"),
            include_str!("scripts/guard.lua"),
        ] {
            assert!(!code(helpers).contains("ARGV"));
        }
        for s in ALL {
            let own = code(s.code);
            assert_eq!(own.matches("ARGV[").count(), s.names.len(), "{own}");
            if s.get_hash() != STATUS.get_hash() {
                assert!(s.names.len() >= 5, "{:?}", s.names);
                assert_eq!(s.names[0], "token");
            }
        }
        assert_eq!(SLOTS_ACQUIRE.names[..25], *ACQUIRE.names);
        assert_eq!(SLOTS_ACQUIRE.names[25], "spec");
        assert_eq!(RELEASE.names, SLOTS_RELEASE.names);
    }

    /// The globals Redis gives a script, of those the scripts use. Any other name a script reads
    /// as a global is a helper it does not carry: Redis fails that only when the path that uses
    /// it runs ("Script attempted to access nonexistent global variable"). Add a name here only
    /// if Redis's Lua has it (its base library, string, table, math, cjson, cmsgpack, bit,
    /// struct).
    const REDIS_GLOBALS: [&str; 12] = [
        "ARGV", "KEYS", "cjson", "ipairs", "math", "pairs", "redis", "string", "table", "tonumber",
        "type", "unpack",
    ];

    /// The globals `code` reads or writes (`Err` when luac5.1 cannot compile it), as
    /// `luac5.1 -p -l` lists them: `GETGLOBAL`, `SETGLOBAL` (Redis's Lua is 5.1).
    fn globals(luac: &std::path::Path, code: &str) -> Result<Vec<String>, String> {
        use std::io::Write as _;
        use std::process::{Command, Stdio};
        let mut child = Command::new(luac)
            .args(["-p", "-l", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn luac5.1");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(code.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let listing = String::from_utf8(out.stdout).unwrap();
        let mut found: Vec<String> = listing
            .lines()
            .filter(|l| l.contains("\tGETGLOBAL") || l.contains("\tSETGLOBAL"))
            .map(|l| {
                let (_, name) = l.rsplit_once("; ").expect("luac names the global");
                let write = if l.contains("\tSETGLOBAL") {
                    "written: "
                } else {
                    ""
                };
                format!("{write}{name}")
            })
            .collect();
        found.sort();
        found.dedup();
        Ok(found)
    }

    /// The globals of `code` that Redis does not provide (reads), and every write (Redis 7
    /// refuses them all).
    fn strangers(luac: &std::path::Path, code: &str) -> Vec<String> {
        globals(luac, code)
            .unwrap_or_else(|e| panic!("luac5.1 cannot compile a script: {e}\n{code}"))
            .into_iter()
            .filter(|g| !REDIS_GLOBALS.contains(&g.as_str()))
            .collect()
    }

    /// luac5.1 (Debian's `lua5.1`), or None, said on stderr past the test harness's capture; a
    /// failure under CI=true.
    fn luac() -> Option<std::path::PathBuf> {
        use std::io::Write as _;
        let there = std::process::Command::new("luac5.1")
            .arg("-v")
            .output()
            .is_ok_and(|o| o.status.success());
        if there {
            return Some("luac5.1".into());
        }
        if std::env::var_os("CI").is_some_and(|v| v == "true") {
            panic!("luac5.1 is not on PATH and CI=true: apt-get install lua5.1");
        }
        let _ = writeln!(
            std::io::stderr().lock(),
            "NOTE: luac5.1 is not installed (apt-get install lua5.1): the scripts' globals are \
             NOT checked"
        );
        None
    }

    /// Every script compiles (as Redis's Lua 5.1 would) and uses no global but Redis's own: each
    /// carries every helper it calls, on every path (build.rs leaves out those it does not).
    #[test]
    fn scripts_use_only_the_globals_redis_provides() {
        let Some(luac) = luac() else {
            return;
        };
        for s in ALL {
            assert_eq!(strangers(&luac, s.code), Vec::<String>::new(), "{}", s.code);
        }
        // The check sees a helper left out, and a global written.
        let int = ACQUIRE.code.find("\nlocal function int(").unwrap() + 1;
        let end = int + ACQUIRE.code[int..].find("\nend\n").unwrap() + "\nend\n".len();
        let without = format!("{}{}", &ACQUIRE.code[..int], &ACQUIRE.code[end..]);
        assert_eq!(strangers(&luac, &without), ["int"]);
        let written = format!(
            "{}\nnow = 1\n",
            STATUS.code.replace("return snapshot()", "")
        );
        assert_eq!(strangers(&luac, &written), ["written: now"]);
    }
}
