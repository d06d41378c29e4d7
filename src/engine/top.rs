//! Who is refused most: a bounded sketch (`core::top`) per policy, of the subjects its
//! `RL.HIT` calls refused, and one for the calls without a policy, of the keys refused (a
//! kind's command, `RL.ALL`'s refusing key). `RL.TOP` (`policy::top`) answers from them.
//!
//! A sketch is made at its first refusal, counts on the server clock over
//! `ratelimit.top-window-ms`, lives in memory only (empty after a restart, never
//! replicated), and costs an allowed call nothing.

use std::sync::{Mutex, PoisonError};

use super::config;
use crate::core::top::{Heavy, Sketch};
use crate::rm::api;

/// A sketch, made at its first refusal.
pub type Shared = Mutex<Option<Box<Sketch>>>;

/// The sketch of the keys refused by calls without a policy.
static WITHOUT_POLICY: Shared = Mutex::new(None);

/// Counts a refusal of `name` (a subject, or a key) in `sketch`, at the server's time.
pub fn record(sketch: &Shared, name: &[u8]) {
    let now = api::now();
    let window = crate::core::Duration::from_ms(config::top_window_ms());
    let mut held = sketch.lock().unwrap_or_else(PoisonError::into_inner);
    held.get_or_insert_with(Sketch::boxed)
        .record(name, now, window);
}

/// Counts a refusal of the key `name` by a call without a policy. (A replica applies its
/// primary's effects, which never pass here; an AOF of the older form, commands with `NOW`,
/// counts its refused calls again while it loads.)
pub fn refused_key(name: &[u8]) {
    record(&WITHOUT_POLICY, name);
}

/// The `count` names `sketch` counts most now (see `core::top::Sketch::top`).
pub fn heaviest(sketch: &Shared, count: usize) -> Vec<Heavy> {
    let now = api::now();
    let window = crate::core::Duration::from_ms(config::top_window_ms());
    let held = sketch.lock().unwrap_or_else(PoisonError::into_inner);
    held.as_ref()
        .map(|s| s.top(count, now, window))
        .unwrap_or_default()
}

/// [`heaviest`] of the keys refused by calls without a policy.
pub fn heaviest_keys(count: usize) -> Vec<Heavy> {
    heaviest(&WITHOUT_POLICY, count)
}
