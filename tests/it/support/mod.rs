//! Support for this crate's tests only (what the chaos campaign shares is in `tests/common`).

pub mod exec;
