//! `RL.ALL numkeys key [key ...] spec [spec ...] [NOW ms]`: one all-or-nothing decision
//! across several keys (see [`crate::all`] for the decision, [`crate::args::all`] for the
//! grammar).
//!
//! Each changed key gets exactly what its own command would have given it: the value, its
//! expiry ([`settle`]), its keyspace event, and its effect propagated as `RL.APPLY key
//! effect` with the decision time. The changes of one call propagate as one command,
//! `RL.APPLY key effect [key effect ...]`, so replicas and the AOF apply the whole decision
//! or none of it.

use redis_module::Context;
use smallvec::SmallVec;

use super::{clock, replicate_expiry, settle, Mode};
use crate::algo::Millis;
use crate::all::{self, Outcomes, Target};
use crate::api::{self, AllReply, Arg};
use crate::args::{self, AsBytes, Spec, SpecParams, Specs, ALL_INLINE_KEYS};
use crate::effect::Compact;
use crate::error::Error;
use crate::store::Key;
use crate::value::Limiter;

pub fn all(ctx: &Context, args: &[Arg]) -> Result<AllReply, Error> {
    let mut specs = Specs::new();
    let req = args::all(args, &mut specs)?;
    let clock = clock(ctx, req.now, Mode::Decide)?;
    let names = req.keys;
    let named = |i: usize, e: Error| match names.get(i) {
        Some(name) => Error::for_key(name.as_bytes(), e),
        None => e,
    };
    // Up to ALL_INLINE_KEYS keys, everything below stays on the stack (filled by `push`:
    // cheaper than `collect` for a few items).
    let mut keys: SmallVec<[Key; ALL_INLINE_KEYS]> = SmallVec::new();
    for &name in names {
        keys.push(Key::open(ctx, name, true));
    }
    let mut each = Outcomes::new();
    // Phase one borrows every key's value; it ends with the new values to store.
    let mut targets: SmallVec<[Target<_>; ALL_INLINE_KEYS]> = SmallVec::new();
    for (i, (key, spec)) in keys.iter_mut().zip(&specs).enumerate() {
        targets.push(match key.limiter().map_err(|e| named(i, e))? {
            Some(held) => Target::Held(held),
            None => Target::New(spec.fresh()),
        });
    }
    let decision = all::acquire(&mut targets, &specs, clock.caller, &mut each)
        .map_err(|(i, e)| named(i, e))?;
    let mut created: SmallVec<[Option<Limiter>; ALL_INLINE_KEYS]> = SmallVec::new();
    for t in targets {
        created.push(match t {
            Target::New(l) => Some(l),
            Target::Held(_) => None,
        });
    }
    // The changed keys' effects, one after the other in `bytes`, propagated together at the
    // end as one `RL.APPLY key effect [key effect ...]`, then any expiry of a lagging NOW.
    let mut bytes: SmallVec<[u8; 32 * ALL_INLINE_KEYS]> = SmallVec::new();
    let mut changes: SmallVec<[(Arg, usize, Option<Millis>); ALL_INLINE_KEYS]> = SmallVec::new();
    for (i, outcome) in each.iter().enumerate() {
        if !outcome.changed {
            continue;
        }
        let (Some(key), Some(&name), Some(spec)) = (keys.get(i), names.get(i), specs.get(i)) else {
            continue;
        };
        if let Some(limiter) = created.get_mut(i).and_then(Option::take) {
            key.set(limiter)?;
        }
        let (at, empty_at) = (outcome.latest, outcome.empty_at);
        let kind = spec.kind();
        let expiry = settle(key, kind.event(), empty_at, clock.lag, outcome.before);
        let start = bytes.len();
        match (&spec.params, outcome.id.as_deref()) {
            // A lease replicates as RL.ACQUIRE's own effect, with the id granted.
            (SpecParams::Acquire(p), Some(id)) => {
                bytes.extend_from_slice(&crate::lease::grant_effect(p, spec.cost, id, at));
            }
            _ => {
                let mut line = Compact::new(kind.command());
                effect(&mut line, spec, at);
                match line.as_bytes() {
                    Some(written) => bytes.extend_from_slice(written),
                    // Not reached: the specs hold only canonical numbers and keywords.
                    None => {
                        ctx.log_warning(
                            "ratelimit: an effect could not be written; not propagated",
                        );
                        continue;
                    }
                }
            }
        }
        changes.push((name, bytes.len() - start, expiry));
    }
    let mut pairs: SmallVec<[(Arg, &[u8]); ALL_INLINE_KEYS]> = SmallVec::new();
    let mut rest = bytes.as_slice();
    for &(name, len, _) in &changes {
        let (effect, after) = rest.split_at(len.min(rest.len()));
        pairs.push((name, effect));
        rest = after;
    }
    if !pairs.is_empty() {
        api::replicate_effects(ctx, &pairs);
    }
    for &(name, _, expiry) in &changes {
        replicate_expiry(ctx, name, clock.lag, expiry);
    }
    let mut reply = AllReply {
        decision,
        each: SmallVec::new(),
    };
    for (o, spec) in each.iter_mut().zip(&specs) {
        let lease = matches!(spec.params, SpecParams::Acquire(_)).then(|| o.id.take());
        reply.each.push((o.decision, lease));
    }
    Ok(reply)
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
        // Propagated by crate::lease (a textual effect with the id in hex).
        SpecParams::Acquire(_) => {}
    }
    if spec.cost != args::COST_DEFAULT {
        line.option("COST", spec.cost);
    }
    line.option("NOW", at);
}
