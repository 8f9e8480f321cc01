//! `exec` in a real terminal: Ctrl-C reaches the command once, and the command can read the
//! terminal. redlock runs as the session leader of a fresh pseudo-terminal, as a shell's
//! foreground job would; the test plays the user by writing to the terminal's master side.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::common::pty::{Pty, pty};
use crate::common::*;
use crate::support::exec::*;

/// Starts `exec -- sh -c script` with the pty as its controlling terminal and stdio, and waits
/// until the script has created `$D/ready`.
fn spawn_in_terminal(redis: &RedisServer, pty: &Pty, script: &str) -> Child {
    let slave = pty.slave.as_raw_fd();
    let mut cmd = exec(redis);
    // No SIGKILL escalation after a Ctrl-C while a test looks at the command.
    cmd.args(["k", "--kill-after", "60s", "--", "sh", "-c", script])
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

/// ^C reaches the whole foreground process group, the command included, so redlock must not
/// forward its own copy. The [`counter`] counts every delivery and runs on; the SIGUSR2 flush
/// makes sure a copy redlock forwarded would have been counted by then, and the test's own
/// second copy is (the control). A copy forwarded at once can still merge in the kernel with the
/// terminal's (about one time in three here), so the test makes 5 rounds.
#[test]
fn ctrl_c_in_a_terminal_reaches_the_command_exactly_once() {
    let redis = or_skip!(RedisServer::start());
    for round in 0..5 {
        for f in ["ready", "sigs", "done"] {
            let _ = std::fs::remove_file(file(&redis, f));
        }
        let mut pty = pty(None);
        let script = format!("CODE=7\n{}", counter());
        let child = spawn_in_terminal(&redis, &pty, &script);
        pty.master.write_all(b"\x03").unwrap();
        wait_counted(&redis, 1);
        assert_eq!(
            flush_forwarded(&redis, child.id()),
            ["INT"],
            "SIGINT arrived twice (round {round})"
        );
        // Control: a second copy, sent by the test, is counted.
        signal(child_pid(&redis), libc::SIGINT);
        assert_eq!(wait_counted(&redis, 4), ["INT", "USR2", "USR2", "INT"]);
        done(&redis);
        assert_eq!(
            finish(child),
            7,
            "redlock must exit with the command's status"
        );
        assert_eq!(redis.get(&lock_key("k")), None, "the lock was not released");
    }
}

/// A hangup of the terminal goes to the session leader alone. When redlock leads the session
/// (`ssh -t host redlock exec ...`), the command would never hear of it unless redlock passes it
/// on: exactly once, and without a SIGKILL later.
#[test]
fn a_terminal_hangup_is_passed_on_when_redlock_leads_the_session() {
    let redis = or_skip!(RedisServer::start());
    let Pty { master, slave } = pty(None);
    let pty_slave_only = Pty {
        master: File::open("/dev/null").unwrap(),
        slave,
    };
    let script = format!("CODE=5\n{}", counter());
    let mut child = spawn_in_terminal(&redis, &pty_slave_only, &script);
    drop(master);
    wait_counted(&redis, 1);
    assert_eq!(flush_forwarded(&redis, child.id()), ["HUP"], "the hangup");
    assert!(
        child.try_wait().unwrap().is_none(),
        "redlock ended on a hangup"
    );
    done(&redis);
    assert_eq!(
        finish(child),
        5,
        "redlock must exit with the command's status"
    );
    assert_eq!(redis.get(&lock_key("k")), None, "the lock was not released");
}

#[test]
fn the_command_can_read_the_terminal() {
    let redis = or_skip!(RedisServer::start());
    let mut pty = pty(None);
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
