//! The `redlock` binary: parse, dispatch, report, exit. The work is in the library.

use std::process::ExitCode;

/// Start-up allocations from a fixed arena, then the system's (see `arena.rs`): musl's malloc
/// made a fifth of a short run's CPU time.
#[global_allocator]
static ALLOCATOR: redlock::Arena = redlock::Arena::new();

fn main() -> ExitCode {
    // `acquire --while-pid` runs this binary again as its keeper.
    if let Some(code) = redlock::run_keeper() {
        return ExitCode::from(code);
    }
    // A shell asking for completions (REDLOCK_COMPLETE set) is answered here, and we exit.
    redlock::answer_completion();
    let cli = match redlock::cli::parse() {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(redlock::usage_error(&e)),
    };
    match redlock::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => ExitCode::from(redlock::report_error(&err)),
    }
}
