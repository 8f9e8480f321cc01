//! `redlock exec`, the supervisor: the command's run (`run`), signals, a lost lock, connections
//! a holder needs, and a real terminal.

mod connections;
mod lost;
mod run;
mod signals;
mod tty;
