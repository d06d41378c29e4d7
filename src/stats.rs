//! Per-command counters for `INFO ratelimit`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::{raw, InfoContext};

/// Counts for one command. Redis runs commands on one thread; atomics just make the statics
/// safe to share without locks.
pub struct Counters {
    name: &'static str,
    allowed: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
}

impl Counters {
    const fn new(name: &'static str) -> Self {
        Counters {
            name,
            allowed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    /// Counts one call: `Some(allowed)` for an answer, `None` for an error reply.
    pub fn count(&self, outcome: Option<bool>) {
        match outcome {
            Some(true) => &self.allowed,
            Some(false) => &self.refused,
            None => &self.errors,
        }
        .fetch_add(1, Relaxed);
    }
}

pub static SLIDE: Counters = Counters::new("slide");
pub static TOKEN: Counters = Counters::new("token");
pub static LEAKY: Counters = Counters::new("leaky");
pub static FIXED: Counters = Counters::new("fixed");
pub static SUBWIN: Counters = Counters::new("subwin");
pub static PEEK: Counters = Counters::new("peek");
pub static REFUND: Counters = Counters::new("refund");
pub static CHARGE: Counters = Counters::new("charge");
pub static ALL_KEYS: Counters = Counters::new("all");
pub static ACQUIRE: Counters = Counters::new("acquire");
pub static RELEASE: Counters = Counters::new("release");
pub static EXTEND: Counters = Counters::new("extend");

const ALL: [&Counters; 12] = [
    &SLIDE, &TOKEN, &LEAKY, &FIXED, &SUBWIN, &PEEK, &REFUND, &CHARGE, &ALL_KEYS, &ACQUIRE,
    &RELEASE, &EXTEND,
];

/// Writes the `ratelimit_stats` section: one line per command, like `INFO commandstats`.
pub fn info(ctx: &InfoContext, _for_crash_report: bool) {
    raw::add_info_section(ctx.ctx, Some("stats"));
    for c in ALL {
        raw::add_info_begin_dict_field(ctx.ctx, c.name);
        let [allowed, refused, errors] =
            [&c.allowed, &c.refused, &c.errors].map(|v| v.load(Relaxed));
        // Calls are the sum: one counter less to move on every call.
        for (field, value) in [
            ("calls", allowed + refused + errors),
            ("allowed", allowed),
            ("refused", refused),
            ("errors", errors),
        ] {
            raw::add_info_field_unsigned_long_long(ctx.ctx, field, value);
        }
        raw::add_info_end_dict_field(ctx.ctx);
    }
    // The parameter sets that buckets and fixed windows share (see `value`): when all the
    // slots are taken, new sets go to keys' wide form (32 bytes instead of 16).
    raw::add_info_section(ctx.ctx, Some("params"));
    let live = crate::intern::TABLE.live() as u64;
    raw::add_info_field_unsigned_long_long(ctx.ctx, "param_sets", live);
    let slots = crate::intern::SLOTS as u64;
    raw::add_info_field_unsigned_long_long(ctx.ctx, "param_slots", slots);
    // Keys holding a value a load could not read (kept as they were, see `value`), and big
    // values waiting for the module's freeing thread (see `freer`).
    raw::add_info_section(ctx.ctx, Some("keys"));
    let unreadable = crate::value::UNREADABLE.load(Relaxed);
    raw::add_info_field_unsigned_long_long(ctx.ctx, "unreadable_keys", unreadable);
    let pending = crate::freer::PENDING.load(Relaxed);
    raw::add_info_field_unsigned_long_long(ctx.ctx, "free_pending", pending);
}
