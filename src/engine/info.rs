//! `INFO ratelimit`: each command's calls (allowed, refused, errors), from the counters its
//! metadata holds (`core::meta::Stats`), the interned parameter sets, and the keys the
//! module holds apart (unreadable, waiting to be freed).

use std::sync::atomic::Ordering::Relaxed;

use redis_module::{raw, InfoContext};

use super::{all, catalog, config, generic, policy};
use crate::core::effect::decimal;
use crate::core::meta::Info;
use crate::core::policy::{hex, info_name};
use crate::rm::{self, api, freer, intern, storage};

/// Every command that counts its calls, in the order INFO lists them: the kinds' commands in
/// the registry's order, then the generic ones.
fn counted() -> impl Iterator<Item = &'static Info> {
    let kinds = catalog().commands().map(|c| c.info);
    kinds
        .chain(generic::infos())
        .chain([all::info(), policy::hit::hit_info()])
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
    // Keys holding a value a load could not read (kept as they were, see `rm::storage::unreadable`), and big
    // values waiting for the module's freeing thread (see `freer`).
    raw::add_info_section(ctx.ctx, Some("keys"));
    let unreadable = storage::UNREADABLE.load(Relaxed);
    raw::add_info_field_unsigned_long_long(ctx.ctx, "unreadable_keys", unreadable);
    let pending = freer::PENDING.load(Relaxed);
    raw::add_info_field_unsigned_long_long(ctx.ctx, "free_pending", pending);
    if for_crash_report {
        return;
    }
    // The policies: how many, the most there may be, RL.TOP's window, how many the last AOF
    // rewrite could not hold, and each one's calls and units, a line each (no figure per
    // key or subject), written through one buffer: at the caps, well under a millisecond.
    raw::add_info_section(ctx.ctx, Some("policies"));
    let max = crate::core::policy::MAX_POLICIES as u64;
    for (field, value) in [
        ("policies", policy::count() as u64),
        ("policies_max", max),
        (
            "policies_missing_from_aof",
            rm::aof::missing_from_last_rewrite(),
        ),
        ("top_window_ms", config::top_window_ms()),
    ] {
        raw::add_info_field_unsigned_long_long(ctx.ctx, field, value);
    }
    let mut name = Vec::new();
    let mut value = Vec::new();
    let mut scratch = Vec::new();
    let mut digits = [0u8; 20];
    policy::each_figures(|f| {
        name.clear();
        name.extend_from_slice(b"policy_");
        info_name(f.name, &mut name);
        value.clear();
        value.extend_from_slice(b"digest=");
        value.extend_from_slice(&hex(f.digest));
        let calls = f.allowed.saturating_add(f.refused).saturating_add(f.errors);
        for (field, n) in [
            (&b",limiters="[..], f.limiters as u64),
            (b",calls=", calls),
            (b",allowed=", f.allowed),
            (b",refused=", f.refused),
            (b",errors=", f.errors),
        ] {
            value.extend_from_slice(field);
            value.extend_from_slice(decimal(n, &mut digits));
        }
        // Each limiter's units, in the definition's order (`RL.POLICY GET`): names would
        // make the section ten times longer at the caps.
        value.extend_from_slice(b",units=");
        for (i, units) in f.units().enumerate() {
            if i > 0 {
                value.push(b'/');
            }
            value.extend_from_slice(decimal(units, &mut digits));
        }
        // With a penalty: the bans it started, and the hits a ban refused.
        if f.penalty {
            for (field, n) in [(&b",bans="[..], f.bans), (b",banned=", f.banned)] {
                value.extend_from_slice(field);
                value.extend_from_slice(decimal(n, &mut digits));
            }
        }
        // With shadow limiters: the hits one would have refused, and how many each would
        // have (`-` for an enforced one).
        if f.shadow != crate::engine::limiters::Shadow::NONE {
            value.extend_from_slice(b",would_refuse=");
            value.extend_from_slice(decimal(f.would_refuse, &mut digits));
            value.extend_from_slice(b",shadow=");
            for (i, n) in f.shadow_refused().enumerate() {
                if i > 0 {
                    value.push(b'/');
                }
                match n {
                    Some(n) => value.extend_from_slice(decimal(n, &mut digits)),
                    None => value.push(b'-'),
                }
            }
        }
        api::info_field(ctx, &name, &value, &mut scratch);
    });
}
