//! The command line itself: bad input (exit 2), `-q`, and shell completion of lock names.

mod completion;
mod quiet;
mod usage;
