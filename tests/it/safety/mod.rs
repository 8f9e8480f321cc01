//! What a lock guarantees and keeps: mutual exclusion, fences, forced releases, secrets, hostile
//! data, the keeper (`--while-pid`) and the announcements it hears, preemption, superseding,
//! time limits, and tests that leave nothing behind.

mod announcements;
mod exclusion;
mod fence;
mod forced;
mod hostile;
mod leftovers;
mod max_runtime;
mod preempt;
mod secrets;
mod supersede;
mod while_pid;
