//! Signal delivery as channel messages.
//!
//! A background thread (signal-hook's iterator, which runs only async-signal-safe code in the
//! handler) turns each signal into a message on a channel, with whether the kernel raised it for a
//! terminal (Ctrl-C, Ctrl-\): the main loop can then block on one channel for signals, child exit
//! and renewal results alike, and decide what to forward without racing a handler. That thread is
//! the only one that takes these signals, so no Redis read elsewhere is cut short by a handler.
//!
//! Layer 2 of the list in `lib.rs`.

use std::sync::mpsc::Sender;

use anyhow::{Context, Result};
use signal_hook::consts::signal::*;

use crate::os;
use crate::platform;

/// The signals that stop a wait for a lock.
pub const STOP: &[i32] = &[SIGINT, SIGTERM, SIGHUP, SIGQUIT];
/// The signals `exec` forwards to its child.
pub const FORWARD: &[i32] = &[SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2];

/// One delivered signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal {
    pub signo: i32,
    /// Raised by the kernel for a terminal (Ctrl-C, Ctrl-\, hangup): the whole foreground process
    /// group, our child included, got it too. (Never known on macOS: see `platform`.)
    pub from_terminal: bool,
}

/// Starts delivering `signals` to `tx`, each wrapped by `wrap` (on the signal thread). Runs for
/// the life of the process. Signals that were ignored when we started (nohup, a background job
/// of a non-interactive shell) are left ignored, except SIGCHLD, which `exec` needs; returns the
/// signals actually handled.
pub fn deliver<T: Send + 'static>(
    signals: &[i32],
    tx: Sender<T>,
    wrap: impl Fn(Signal) -> T + Send + 'static,
) -> Result<Vec<i32>> {
    let signals: Vec<i32> = signals
        .iter()
        .copied()
        .filter(|&signo| signo == SIGCHLD || !os::signal_ignored(signo))
        .collect();
    let mut info = platform::Signals::new(&signals).context("cannot install signal handlers")?;
    let handled = signals.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            // A signal mask is inherited across exec: a caller that had these blocked would
            // otherwise leave us deaf to them (a SIGTERM never stops the command). This thread
            // takes them; every other thread blocks them (below).
            let _ = os::mask_signals(false, &handled);
            warm_cpu_features();
            for (signo, from_terminal) in info.forever() {
                if tx
                    .send(wrap(Signal {
                        signo,
                        from_terminal,
                    }))
                    .is_err()
                {
                    break;
                }
            }
        })
        .context("cannot start the signal thread")?;
    block_in_this_thread(&signals)?;
    Ok(signals)
}

/// Fills std's cache of the CPU's features while the thread has nothing else to do. The first
/// Redis reply is parsed with `memchr`, which asks that cache first: filled there, it took the
/// main thread ~0.1 ms between the lock's grant and the command's start, since in a virtual
/// machine each CPUID instruction traps to the hypervisor. Here it overlaps the connection and
/// the first round trip; whichever thread comes first fills it, and the answer is the same.
fn warm_cpu_features() {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    let _ = std::arch::is_x86_feature_detected!("avx2");
}

/// Blocks `signals` in the calling thread and in the threads it starts from now on, so that the
/// kernel hands them to the signal thread (spawned before, so not blocking them). Otherwise the
/// handler could run on a thread that is reading from Redis, and a socket read with a timeout
/// fails with EINTR after a handler runs, whatever SA_RESTART says. Child processes start with
/// an empty mask (std resets it before exec).
fn block_in_this_thread(signals: &[i32]) -> Result<()> {
    os::mask_signals(true, signals).context("cannot block signals")
}

/// The conventional name of a signal, for messages.
pub fn name(signo: i32) -> String {
    let n = match signo {
        SIGHUP => "SIGHUP",
        SIGINT => "SIGINT",
        SIGQUIT => "SIGQUIT",
        SIGKILL => "SIGKILL",
        SIGSEGV => "SIGSEGV",
        SIGTERM => "SIGTERM",
        SIGUSR1 => "SIGUSR1",
        SIGUSR2 => "SIGUSR2",
        SIGPIPE => "SIGPIPE",
        SIGABRT => "SIGABRT",
        _ => return format!("signal {signo}"),
    };
    n.to_string()
}
