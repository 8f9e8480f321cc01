//! `exec` in a real terminal: Ctrl-C reaches the command once, and the command can read the
//! terminal. redlock runs as the session leader of a fresh pseudo-terminal, as a shell's
//! foreground job would; the test plays the user by writing to the terminal's master side.

mod common;
mod exec_support;

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::*;
use exec_support::*;

/// A pseudo-terminal: the master (the user's side) and the slave (the program's terminal).
struct Pty {
    master: File,
    slave: OwnedFd,
}

fn pty() -> Pty {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors into the integers we pass; the other arguments may
    // be null. We own the descriptors from here on.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened by openpty and are not owned elsewhere.
    unsafe {
        Pty {
            master: File::from_raw_fd(master),
            slave: OwnedFd::from_raw_fd(slave),
        }
    }
}

/// Starts `exec -- sh -c script` with the pty as its controlling terminal and stdio, and waits
/// until the script has created `$D/ready`.
fn spawn_in_terminal(redis: &RedisServer, pty: &Pty, script: &str) -> Child {
    let slave = pty.slave.as_raw_fd();
    let mut cmd = exec(redis);
    cmd.args(["k", "--", "sh", "-c", script])
        .stdin(Stdio::from(pty.slave.try_clone().unwrap()))
        .stdout(Stdio::from(pty.slave.try_clone().unwrap()))
        .stderr(Stdio::from(pty.slave.try_clone().unwrap()));
    // SAFETY: setsid and ioctl are async-signal-safe; they make the child a session leader whose
    // controlling terminal is the pty, so the pty's line discipline turns ^C into SIGINT for
    // redlock's (foreground) process group.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() == -1 || libc::ioctl(slave, libc::TIOCSCTTY, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("spawn redlock in a terminal");
    let ready = file(redis, "ready");
    assert!(
        wait_for(|| ready.exists(), EVENT),
        "the command never started"
    );
    child
}

fn finish(mut child: Child) -> i32 {
    let exited = wait_for(|| child.try_wait().unwrap().is_some(), EVENT);
    if !exited {
        let _ = child.kill();
        panic!("redlock did not exit");
    }
    child
        .wait()
        .unwrap()
        .code()
        .expect("redlock exited by itself")
}

#[test]
fn ctrl_c_in_a_terminal_reaches_the_command_exactly_once() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut pty = pty();
    // Each SIGINT appends a line; after the first, the command lingers so that a second copy
    // (one from the terminal, one forwarded by redlock) would have time to arrive.
    let script = r#"
        trap 'echo INT >> "$D/ints"' INT
        touch "$D/ready"
        while [ ! -e "$D/ints" ]; do sleep 0.02; done
        sleep 0.5
        exit 7
    "#;
    let child = spawn_in_terminal(&redis, &pty, script);
    pty.master.write_all(b"\x03").unwrap();
    assert_eq!(
        finish(child),
        7,
        "redlock must exit with the command's status"
    );
    let ints = std::fs::read_to_string(file(&redis, "ints")).unwrap();
    assert_eq!(ints.lines().count(), 1, "SIGINT arrived {ints:?}");
    assert_eq!(redis.get(&lock_key("k")), None, "the lock was not released");
}

#[test]
fn the_command_can_read_the_terminal() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut pty = pty();
    let script = r#"
        touch "$D/ready"
        read line
        echo "read: $line" > "$D/line"
    "#;
    let child = spawn_in_terminal(&redis, &pty, script);
    pty.master.write_all(b"hello\n").unwrap();
    assert_eq!(finish(child), 0);
    let line = std::fs::read_to_string(file(&redis, "line")).unwrap();
    assert_eq!(line.trim(), "read: hello");
    assert!(
        wait_for(
            || redis.get(&lock_key("k")).is_none(),
            Duration::from_secs(1)
        ),
        "the lock was not released"
    );
}
