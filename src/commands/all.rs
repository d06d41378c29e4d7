//! `RL.ALL numkeys key [key ...] spec [spec ...] [NOW ms]`: one all-or-nothing decision
//! across several keys (see [`crate::all`] for the decision, [`crate::args::all`] for the
//! grammar).
//!
//! Each changed key gets exactly what its own command would have given it: the value, its
//! expiry ([`settle`]), its keyspace event, and its effect propagated as `RL.APPLY key
//! effect` with the decision time. Redis wraps the several propagated commands of one
//! command in MULTI/EXEC, so replicas and the AOF apply the whole decision or none of it.

use redis_module::Context;

use super::{clock, propagate, replicate_expiry, settle, Mode};
use crate::all::{self, Combined, Target};
use crate::api::{Arg, Reply};
use crate::args::{self, AsBytes, Spec, SpecParams};
use crate::effect::Compact;
use crate::error::Error;
use crate::store::Key;

pub fn all(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    let req = args::all(args)?;
    let clock = clock(ctx, req.now, Mode::Decide)?;
    let names = req.keys;
    let named = |i: usize, e: Error| match names.get(i) {
        Some(name) => Error::for_key(name.as_bytes(), e),
        None => e,
    };
    let mut keys: Vec<Key> = names.iter().map(|&n| Key::open(ctx, n, true)).collect();
    // Phase one borrows every key's value; it ends with the new values to store.
    let (combined, mut created) = {
        let mut held = Vec::with_capacity(keys.len());
        for (i, key) in keys.iter_mut().enumerate() {
            held.push(key.limiter().map_err(|e| named(i, e))?);
        }
        let mut targets: Vec<Target> = held
            .iter_mut()
            .zip(&req.specs)
            .map(|(h, spec)| match h {
                Some(h) => Target::Held(h),
                None => Target::New(spec.fresh()),
            })
            .collect();
        let combined =
            all::acquire(&mut targets, &req.specs, clock.caller).map_err(|(i, e)| named(i, e))?;
        let created: Vec<_> = targets
            .into_iter()
            .map(|t| match t {
                Target::New(l) => Some(l),
                Target::Held(_) => None,
            })
            .collect();
        (combined, created)
    };
    let Combined { decision, each } = combined;
    for (i, outcome) in each.iter().enumerate() {
        if !outcome.changed {
            continue;
        }
        let (Some(key), Some(&name), Some(spec)) = (keys.get(i), names.get(i), req.specs.get(i))
        else {
            continue;
        };
        if let Some(limiter) = created.get_mut(i).and_then(Option::take) {
            key.set(limiter)?;
        }
        let (at, empty_at) = (outcome.latest, outcome.empty_at);
        let kind = spec.kind();
        let expiry = settle(key, kind.event(), empty_at, clock.lag, outcome.before);
        propagate(ctx, name, Mode::Decide, kind.command(), |line| {
            effect(line, spec, at);
        });
        replicate_expiry(ctx, name, clock.lag, expiry);
    }
    Ok(Reply::All(
        decision,
        each.into_iter().map(|o| o.decision).collect(),
    ))
}

/// The words of the spec's own command after its key, as that command propagates them:
/// positional parameters, options that are not their defaults, COST, and NOW at `at`.
fn effect(line: &mut Compact, spec: &Spec, at: u64) {
    match &spec.params {
        SpecParams::Slide(windows) => {
            for w in windows.as_slice() {
                line.number(w.limit).number(w.window_ms);
            }
        }
        SpecParams::Token(p) => {
            line.number(p.limit).number(p.window_ms);
            if p.burst != args::token_burst_default(p.limit) {
                line.option("BURST", p.burst);
            }
        }
        SpecParams::Leaky(p) => {
            line.number(p.limit).number(p.window_ms);
            if p.max_delay_ms != args::leaky_max_delay_default(p.window_ms) {
                line.option("MAXDELAY", p.max_delay_ms);
            }
            if p.burst != args::LEAKY_BURST_DEFAULT {
                line.option("BURST", p.burst);
            }
        }
        SpecParams::Fixed(p) => {
            line.number(p.limit).number(p.window_ms);
            if p.align {
                line.word(b"ALIGN");
            }
        }
        SpecParams::Subwin(p) => {
            line.number(p.limit)
                .number(p.window_ms)
                .number(p.resolution_ms);
        }
    }
    if spec.cost != args::COST_DEFAULT {
        line.option("COST", spec.cost);
    }
    line.option("NOW", at);
}
