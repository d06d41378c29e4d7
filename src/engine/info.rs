//! `INFO ratelimit`: each command's calls (allowed, refused, errors), from the counters its
//! metadata holds (`core::meta::Stats`), the interned parameter sets, and the keys the
//! module holds apart (unreadable, waiting to be freed).

use std::sync::atomic::Ordering::Relaxed;

use redis_module::{raw, InfoContext};

use super::{all, catalog, config, generic, policy};
use crate::core::meta::Info;
use crate::rm::{freer, intern, storage};

/// Every command that counts its calls, in the order INFO lists them: the kinds' commands in
/// the registry's order, then the generic ones.
fn counted() -> impl Iterator<Item = &'static Info> {
    let kinds = catalog().commands().map(|c| c.info);
    kinds
        .chain(generic::infos())
        .chain([all::info(), policy::hit_info()])
}

/// A command's field: its name in lower case after its prefix (`RL.SLIDE`: `slide`).
fn field(name: &str) -> String {
    let short = name.split_once('.').map_or(name, |(_, rest)| rest);
    short.to_ascii_lowercase()
}

/// Writes the `ratelimit_stats` section: one line per command, like `INFO commandstats`.
pub fn info(ctx: &InfoContext, for_crash_report: bool) {
    raw::add_info_section(ctx.ctx, Some("stats"));
    for info in counted() {
        raw::add_info_begin_dict_field(ctx.ctx, &field(info.name));
        let (allowed, refused, errors) = info.stats.read();
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
    // The parameter sets that buckets and fixed windows share (see `rm::storage`): when all the
    // slots are taken, new sets go to keys' wide form (32 bytes instead of 16).
    raw::add_info_section(ctx.ctx, Some("params"));
    let live = intern::table().live() as u64;
    raw::add_info_field_unsigned_long_long(ctx.ctx, "param_sets", live);
    let slots = intern::SLOTS as u64;
    raw::add_info_field_unsigned_long_long(ctx.ctx, "param_slots", slots);
    // Keys holding a value a load could not read (kept as they were, see `value`), and big
    // values waiting for the module's freeing thread (see `freer`).
    raw::add_info_section(ctx.ctx, Some("keys"));
    let unreadable = storage::UNREADABLE.load(Relaxed);
    raw::add_info_field_unsigned_long_long(ctx.ctx, "unreadable_keys", unreadable);
    let pending = freer::PENDING.load(Relaxed);
    raw::add_info_field_unsigned_long_long(ctx.ctx, "free_pending", pending);
    if for_crash_report {
        return;
    }
    // The policies: how many, the most there may be, RL.TOP's window, and each one's calls
    // (no figure per key or subject).
    raw::add_info_section(ctx.ctx, Some("policies"));
    let figures = policy::figures();
    raw::add_info_field_unsigned_long_long(ctx.ctx, "policies", figures.len() as u64);
    let max = crate::core::policy::MAX_POLICIES as u64;
    raw::add_info_field_unsigned_long_long(ctx.ctx, "policies_max", max);
    raw::add_info_field_unsigned_long_long(ctx.ctx, "top_window_ms", config::top_window_ms());
    for f in figures {
        raw::add_info_begin_dict_field(ctx.ctx, &format!("policy_{}", f.name));
        raw::add_info_field_str(ctx.ctx, "digest", &f.digest);
        for (field, value) in [
            ("limiters", f.limiters as u64),
            ("calls", f.allowed + f.refused + f.errors),
            ("allowed", f.allowed),
            ("refused", f.refused),
            ("errors", f.errors),
            ("units", f.units),
        ] {
            raw::add_info_field_unsigned_long_long(ctx.ctx, field, value);
        }
        raw::add_info_end_dict_field(ctx.ctx);
    }
}
