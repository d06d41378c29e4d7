//! The one panic guard: everything the server calls into the module (a command, a data type
//! callback, a server event, a timer, a blocked client's reply, `INFO`) runs through
//! [`guard`], so that a bug becomes a log line and a failure value instead of a panic
//! unwinding into C, which would abort the server.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`, the module's part of `what` (`RL.SLIDE`, `rdb_load`, ...): a panic is logged at
/// warning level, naming `what`, and answered with `fallback`. Logging needs no context, so
/// this holds on any thread (a free in the lazy-free thread).
#[inline(always)]
pub fn guard<T>(what: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            caught(what);
            fallback
        }
    }
}

/// Logs a panic caught in `what`.
#[cold]
#[inline(never)]
fn caught(what: &str) {
    redis_module::logging::log_warning(format!(
        "ratelimit: internal error in {what}; see the log above"
    ));
}
