//! What redlock needs from the OS beyond POSIX, in one place, with two implementations of the
//! same items: `linux.rs` (pidfds, the parent-death signal, a child subreaper, sealed memory
//! files, `/proc`, abstract sockets, a signal's origin) and `portable.rs`, for macOS and the
//! other Unixes, which do without, and more weakly. `build.rs` sets `cfg(portable)` for a target
//! other than Linux, or for Linux with `--features portable`: the portable implementation is
//! compiled and tested on Linux too (`.ci/run`), so that its logic is tested here, where no Mac
//! is.
//!
//! What the portable implementation does instead, and what it cannot keep:
//! - A process named for good (`--while-pid`): its pid and start time (from `ps`) instead of a
//!   pidfd; its end seen through kqueue's `EVFILT_PROC` on macOS, by polling elsewhere. A pid
//!   reused within the second its process ended could pass for it.
//! - No parent-death signal ([`DEATH_SIGNAL`] is false): `exec` starts a watchdog process with
//!   every command, which stops it when redlock dies. A kill of both (`killall -9 redlock`, the
//!   watchdog being a copy of redlock) leaves the command running unlocked, as `consul lock` and
//!   `etcdctl lock` do when they are killed.
//! - No child subreaper: what a command left running is found in redlock's process group (when
//!   redlock leads it) and among redlock's children, not among the orphans it adopted.
//! - No sealed memory file: the password a command inherits is in an unlinked 0600 temporary
//!   file.
//! - No `/proc`: the process table, a process's start time and command line come from `ps`
//!   (its command line as one line: [`EXACT_ARGS`] is false); there are no pid namespaces to
//!   record, so `status` cannot tell a holder gone from one alive.
//! - No abstract socket: a keeper hears of its owner's release from Redis alone (`tell.rs`).
//! - No signal origin: a Ctrl-C is taken for one sent to redlock alone, and so is passed on to
//!   the command, which got the terminal's own already.
//!
//! `unsafe` here: the vfork-style start of a command and the watchdog's descriptor closing
//! (async-signal-safe code only), taking inherited descriptors, kqueue, posix_spawn; each block
//! with its `SAFETY` note.
//!
//! Layer 1 of the list in `lib.rs`.

#[cfg(not(portable))]
mod linux;
#[cfg(not(portable))]
pub use linux::*;

#[cfg(portable)]
mod portable;
#[cfg(portable)]
pub use portable::*;

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// One process of the process table, the fields redlock uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    /// Its state letter: `Z` (or `X`, `x`) once it has exited and waits to be reaped.
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    /// Threads not yet reaped, the main one included (a zombie main thread counts; 1 where the
    /// table does not say).
    pub threads: u32,
    /// When it started, in a unit of the implementation's (clock ticks after boot, seconds): with
    /// the pid, names one process.
    pub start: u64,
}

impl Proc {
    /// Not exited: neither a zombie nor dead. A process whose main thread has exited while
    /// others run (`pthread_exit` in main) reads as a zombie, but still has more than one
    /// thread: it lives. (Once every thread has exited, only the main one is counted.)
    pub fn living(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x') || self.threads > 1
    }
}

/// What a command is started with, prepared by the caller (the start itself must not allocate):
/// the file to run, its arguments and environment (`NAME=VALUE`), `sh_argv` for a file without a
/// `#!` line (ENOEXEC: `/bin/sh PATH ARGS...`, as execvp and shells do), and the signals whose
/// handlers go back to the default before it runs.
pub struct Plan<'a> {
    pub path: &'a CString,
    pub argv: &'a [CString],
    pub sh_argv: &'a [CString],
    pub envp: &'a [CString],
    pub reset: &'a [i32],
}

/// Why [`start`] did not start a command.
#[derive(Debug)]
pub enum StartFailed {
    /// No process could be made.
    Fork(std::io::Error),
    /// The process could not run the file: the errno of its exec (the process is reaped).
    Exec(i32),
}

/// Takes the descriptors `keep`, inherited across exec, and closes every other one above
/// stderr: a caller's `5>&1`, a file it locked with flock(1) on fd 3, a pipe someone waits on,
/// would otherwise stay open as long as this process lives. An error when one of `keep` is not
/// open (then nothing is taken).
///
/// For the start of a process that inherited them (the keeper), before it opens descriptors of
/// its own: it closes what it does not know.
pub fn take_inherited(keep: &[RawFd]) -> io::Result<Vec<OwnedFd>> {
    let open: Vec<RawFd> = std::fs::read_dir(FD_DIR)
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    if let Some(&missing) = keep.iter().find(|&&fd| fd < 3 || !open.contains(&fd)) {
        return Err(io::Error::other(format!(
            "descriptor {missing} was not inherited"
        )));
    }
    // SAFETY: at the start of the process, nothing in it owns a descriptor above stderr yet
    // (the directory's own was closed when it dropped: closing that number again fails
    // harmlessly), so each is ours to close, and each of `keep`, open and distinct from
    // stdio, ours to own.
    unsafe {
        for &fd in open.iter().filter(|fd| **fd > 2 && !keep.contains(fd)) {
            libc::close(fd);
        }
        Ok(keep.iter().map(|&fd| OwnedFd::from_raw_fd(fd)).collect())
    }
}
