//! Waiting for a busy lock: the queue (`queue`), the direct hand-over (`grant`), what a waiting
//! command says (`status`), and `redlock wait`, which waits for a lock to be free without taking
//! it (`wait_free`).

mod grant;
mod queue;
mod status;
mod upgrade;
mod wait_free;
