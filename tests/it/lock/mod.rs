//! The one-shot commands that take and give back a lock: `acquire`, `release` and `extend`,
//! and locks with several holders (slots, pools, shared locks).

mod acquire;
mod release;
mod slots;
