//! Events: the critical sections' entry, leave and hold lines, which they write to a FIFO and a
//! thread of the bench timestamps on arrival (monotonic clock). Owns the FIFO and its reader, and
//! the bookkeeping that lets a caller wait for one event while keeping the others for the run they
//! belong to. Above [`guard`](crate::guard) (its timeout); the lines' format is the one the
//! critical sections in [`tools`](crate::tools) write: `KIND TAG LOOP ROUND`.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Command;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::Instant;

use crate::guard::STEP_TIMEOUT;

/// One line from a critical section: `E`ntry, `L`eave, `H`old (a holder that stays inside), or
/// the bench's own end marker `X`.
#[derive(Clone, Debug)]
pub struct Event {
    pub at: Instant,
    pub kind: char,
    pub tag: String,
    /// The loop and round that wrote it.
    pub l: usize,
    pub r: usize,
}

/// The reader of the FIFO and the events that arrived but were not asked for yet.
pub struct Events {
    rx: Receiver<Event>,
    pending: Vec<Event>,
    writer: File,
}

impl Events {
    /// Opens the FIFO read-write (so neither end ever sees EOF) and starts the reader thread.
    pub fn open(fifo: &Path) -> Events {
        let status = Command::new("mkfifo")
            .arg(fifo)
            .status()
            .expect("cannot run mkfifo");
        assert!(status.success(), "mkfifo {} failed", fifo.display());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(fifo)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", fifo.display()));
        let writer = file.try_clone().expect("cannot duplicate the FIFO fd");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(file).lines() {
                let at = Instant::now();
                let Ok(line) = line else { return };
                let mut f = line.split_whitespace();
                let (Some(kind), Some(tag), Some(l), Some(r)) =
                    (f.next(), f.next(), f.next(), f.next())
                else {
                    eprintln!("contention: ignoring a malformed FIFO line {line:?}");
                    continue;
                };
                let (Some(kind), Ok(l), Ok(r)) = (kind.chars().next(), l.parse(), r.parse()) else {
                    eprintln!("contention: ignoring a malformed FIFO line {line:?}");
                    continue;
                };
                let event = Event {
                    at,
                    kind,
                    tag: tag.to_string(),
                    l,
                    r,
                };
                if tx.send(event).is_err() {
                    return;
                }
            }
        });
        Events {
            rx,
            pending: Vec::new(),
            writer,
        }
    }

    fn recv(&mut self, until: Instant, waiting_for: &str) -> Event {
        match self
            .rx
            .recv_timeout(until.saturating_duration_since(Instant::now()))
        {
            Ok(e) => e,
            Err(RecvTimeoutError::Timeout) => {
                panic!(
                    "{waiting_for}: nothing came within {}s",
                    STEP_TIMEOUT.as_secs()
                )
            }
            Err(RecvTimeoutError::Disconnected) => panic!("the FIFO reader stopped"),
        }
    }

    /// Waits for one event of `kind` and `tag`; keeps every other one for [`Events::collect`].
    pub fn wait_for(&mut self, tag: &str, kind: char) -> Event {
        if let Some(i) = self
            .pending
            .iter()
            .position(|e| e.tag == tag && e.kind == kind)
        {
            return self.pending[i].clone();
        }
        let until = Instant::now() + STEP_TIMEOUT;
        loop {
            let e = self.recv(until, &format!("{tag}: waiting for a '{kind}' line"));
            self.pending.push(e.clone());
            if e.tag == tag && e.kind == kind {
                return e;
            }
        }
    }

    /// Every event of `tag`, in arrival order. A marker line written after all of them (every
    /// writer has exited) makes sure none is still in the pipe.
    pub fn collect(&mut self, tag: &str) -> Vec<Event> {
        writeln!(self.writer, "X {tag} 0 0").expect("cannot write to the FIFO");
        let until = Instant::now() + STEP_TIMEOUT;
        loop {
            let e = self.recv(until, &format!("{tag}: waiting for the end marker"));
            if e.tag == tag && e.kind == 'X' {
                break;
            }
            self.pending.push(e);
        }
        let (mine, others): (Vec<Event>, Vec<Event>) =
            self.pending.drain(..).partition(|e| e.tag == tag);
        self.pending = others;
        mine
    }
}
