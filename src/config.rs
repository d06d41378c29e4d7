//! The module's settings: Redis module configs (`CONFIG SET/GET ratelimit.*`, a line in
//! redis.conf, or a `name value` pair on the `loadmodule` line).

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// `ratelimit.now-max-ahead-ms`: how far ahead of the server clock a client's `NOW` may be,
/// in milliseconds; `-1` for no bound. Commands replicated from a primary or loaded from the
/// AOF are never refused for it.
pub static NOW_MAX_AHEAD_MS: AtomicI64 = AtomicI64::new(NOW_MAX_AHEAD_DEFAULT);

pub const NOW_MAX_AHEAD_NAME: &str = "now-max-ahead-ms";
pub const NOW_MAX_AHEAD_DEFAULT: i64 = 1000;
/// The largest bound that can be set: a year.
pub const NOW_MAX_AHEAD_MAX: i64 = 365 * 24 * 3600 * 1000;

/// The bound on a client's `NOW`, `None` when there is none.
pub fn now_max_ahead_ms() -> Option<u64> {
    u64::try_from(NOW_MAX_AHEAD_MS.load(Relaxed)).ok()
}
