//! The owner's release telling the lock's keeper (`acquire --while-pid`) on the same host
//! directly, besides the mark and the announcement in Redis: so that no fault after a proper
//! release (a restart without persistence that loses the mark, a stall that outlasts the
//! keeper's deadline, an announcement nobody heard) can pass for a loss and get the script a
//! SIGTERM.
//!
//! The keeper listens on an abstract unix socket (no file to clean up; gone when the keeper
//! dies) named after the token's fingerprint, which `status` shows anyway: the name says
//! nothing of the token that was not public. Where there are none (macOS: see `platform`), the
//! keeper does not listen, and hears of the release from Redis alone. Invariants:
//! - Each side talks only to a peer with its own uid or root (SO_PEERCRED, which the kernel
//!   fills in): such a peer could kill the keeper, or read its token, anyway. So a stranger who
//!   took the name first (a fingerprint is public once the lock is held) learns nothing: the
//!   release sends it nothing.
//! - The word carries the whole token, and the keeper acts only on its own: two keepers whose
//!   tokens share a fingerprint cannot both listen (the second one's bind fails, and it learns of
//!   a release from Redis alone, as before).
//! - The keeper answers one byte once it holds the word, so that when `release` returns, the
//!   keeper knows: a loss it finds afterwards is the release's doing.
//! - Best effort both ways: a failure costs `release` a connect (microseconds) and changes
//!   nothing.
//!
//! Layer 2 of the list in `lib.rs`.

use std::io::{Read, Write};
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::Duration;

/// How long either side waits for the other's bytes (both are local and answer at once).
const PATIENCE: Duration = Duration::from_secs(1);

/// The longest word read: "released " and a token (32 hex digits), with room to spare.
const MAX_WORD: u64 = 256;

/// The keeper's answer once it holds the word.
const HEARD: u8 = b'1';

/// The socket's abstract name for `token`: its fingerprint (as `status` shows it).
fn address(token: &str) -> std::io::Result<SocketAddr> {
    let fingerprint: String = token.chars().take(8).collect();
    crate::platform::socket_address(&format!("redlock-keeper/{fingerprint}"))
}

/// Whether the peer on `stream` runs with our uid, or as root.
fn trusted(stream: &UnixStream) -> bool {
    crate::platform::peer_uid(stream)
        .is_some_and(|uid| uid == 0 || uid == rustix::process::geteuid().as_raw())
}

/// The keeper's socket for `token`; an error when the name is taken (another keeper whose token
/// has the same fingerprint, or a stranger).
pub fn listen(token: &str) -> std::io::Result<UnixListener> {
    UnixListener::bind_addr(&address(token)?)
}

/// Waits on `listener` for the owner's word that it released the lock of `token`, calls `heard`,
/// then answers it; returns once a trusted peer said so (anything else is ignored), or the
/// listener failed.
pub fn await_released(listener: &UnixListener, token: &str, heard: impl FnOnce()) -> bool {
    let word = format!("released {token}\n");
    loop {
        let mut stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        };
        if !trusted(&stream) || stream.set_read_timeout(Some(PATIENCE)).is_err() {
            continue;
        }
        let mut said = Vec::new();
        if (&mut stream).take(MAX_WORD).read_to_end(&mut said).is_err() || said != word.as_bytes() {
            continue;
        }
        heard();
        let _ = stream.set_write_timeout(Some(PATIENCE));
        let _ = stream.write_all(&[HEARD]);
        return true;
    }
}

/// Tells the keeper of `token` on this host, if there is one, that its owner released the lock;
/// true once it answered that it holds the word.
pub fn released(token: &str) -> bool {
    let Ok(mut stream) = address(token).and_then(|a| UnixStream::connect_addr(&a)) else {
        return false;
    };
    if !trusted(&stream)
        || stream.set_read_timeout(Some(PATIENCE)).is_err()
        || stream.set_write_timeout(Some(PATIENCE)).is_err()
    {
        return false;
    }
    let said = stream
        .write_all(format!("released {token}\n").as_bytes())
        .and_then(|()| stream.shutdown(std::net::Shutdown::Write));
    let mut answer = [0u8; 1];
    said.is_ok() && stream.read_exact(&mut answer).is_ok() && answer[0] == HEARD
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails if the word does not reach a listener of the same token, or reaches one of another
    /// token that shares its fingerprint.
    #[test]
    #[cfg(not(portable))]
    fn the_word_reaches_the_keeper_of_its_token_only() {
        let token = format!("{:032x}", std::process::id() as u128 * 7919 + 12345);
        let listener = listen(&token).unwrap();
        // A second keeper of the same fingerprint cannot listen.
        assert!(listen(&token).is_err());
        let heard = std::thread::scope(|s| {
            let waiting = s.spawn(|| await_released(&listener, &token, || ()));
            let other = format!("{}{}", &token[..8], "f".repeat(24));
            // Another token with the same fingerprint: connected, but not acted on.
            assert!(!released(&other));
            assert!(released(&token));
            waiting.join().unwrap()
        });
        assert!(heard);
        drop(listener);
        assert!(!released(&token), "a word heard with nobody listening");
    }

    /// Without abstract sockets nobody listens, and a release tells nobody.
    #[test]
    #[cfg(portable)]
    fn without_abstract_sockets_nobody_listens() {
        let token = format!("{:032x}", std::process::id() as u128 * 7919 + 12345);
        assert!(listen(&token).is_err());
        assert!(!released(&token));
    }
}
