//! Compact policies (`RL.POLICY SET name COMPACT ...`): a policy's subjects kept in
//! families (`kinds::family`), one key per hash slot of its subjects,
//! `policy|~|{tag}` (`core::policy::family_key`), instead of a key per subject and limiter.
//!
//! A hit unpacks the subject's states into its limiters' kinds and decides by the code a
//! keyed policy decides by (`limiters::decide`, over [`PackedSlot`]s), each state reshaped
//! from the parameters it was recorded under: the same calls get the same replies, keyed or
//! compact. What it changes goes to replicas and the AOF as its effect (`RL.FAMILY`
//! operations in `RL.APPLY`): the subject's states, the family's layout when the policy's
//! limiters changed, the subjects a sweep removed.
//!
//! Expiry: each subject keeps the time its states are all empty again (its limiters' keys'
//! expiry, in whole seconds, rounded up); each hit sweeps a few slots of its family's index
//! ([`SWEEP`]), removing the subjects empty by the server's clock; the family key expires
//! with its last subject (the latest empty time given).

use redis_module::Context;
use smallvec::SmallVec;

use super::Member;
use crate::core::error::Error;
use crate::core::kind::{Clock, Command, Params2};
use crate::core::policy as def;
use crate::core::{Duration, Instant};
use crate::engine::limiters::{self as all, Frames, OnEntry, Outcome, Shadow};
use crate::engine::settle;
use crate::engine::slot::PackedSlot;
use crate::kinds::family::{self, EffectWriter, FamilyEffect, Packed, Refused, Subjects};
use crate::rm::api::{self, OwnedString, ALL_INLINE};
use crate::rm::key::Key;

/// Index slots a hit sweeps: a family of 600 subjects (10 M over the 16,384 slots, an index
/// of 1,024) is gone over every 64 hits.
pub const SWEEP: usize = 16;

/// The family key of `subject` under policy `name`.
pub fn family_name(ctx: &Context, name: &[u8], subject: &[u8]) -> Result<OwnedString, Error> {
    let mut key = def::Key::new();
    def::family_key(name, subject, &mut key);
    OwnedString::new(ctx, key.as_bytes()).ok_or(Error::Internal("RL.HIT"))
}

/// The error of the limiter at `i`, naming the key a keyed policy would (the same reply).
fn named(policy: &[u8], members: &[Member], subject: &[u8], i: usize, e: Error) -> Error {
    let Some(m) = members.get(i) else {
        return e;
    };
    let mut key = def::Key::new();
    let tagged = def::hash_tag(subject).is_some();
    def::write_key(
        policy,
        &m.name,
        m.kind.as_bytes(),
        subject,
        tagged,
        &mut key,
    );
    Error::for_key(key.as_bytes(), e)
}

/// Decides a hit of `cost` on `subject`'s entry in its family at `clock`, as
/// `limiters::run_limiters` does on a keyed policy's keys: records it when every limiter
/// allows, sweeps, and propagates what changed.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    ctx: &Context,
    policy: &[u8],
    members: &[Member],
    layout: &[family::Limiter],
    subject: &[u8],
    cost: u64,
    clock: Clock,
    shadow: Shadow,
) -> Result<Outcome, Error> {
    let name = family_name(ctx, policy, subject)?;
    let mut key = Key::open(ctx, name.arg(), true);
    let mut effect = EffectWriter::new(
        &[crate::core::effect::BINARY, FamilyEffect::EFFECT_CODE],
        clock.caller,
    );
    let ops = effect.bytes.len();
    let result = decide(
        &mut key,
        policy,
        members,
        layout,
        subject,
        cost,
        clock,
        shadow,
        &mut effect,
    );
    drop(key);
    // What was changed goes on, even when the hit then failed (a layout changed first).
    if effect.bytes.len() > ops {
        api::replicate_effect(ctx, name.arg(), &effect.bytes);
    }
    result
}

#[allow(clippy::too_many_arguments)]
fn decide(
    key: &mut Key,
    policy: &[u8],
    members: &[Member],
    layout: &[family::Limiter],
    subject: &[u8],
    cost: u64,
    clock: Clock,
    shadow: Shadow,
    effect: &mut EffectWriter,
) -> Result<Outcome, Error> {
    let mut states = [None; family::MAX_LIMITERS];
    let mut fresh: Option<Subjects> = None;
    let before;
    let (outcome, expires, changed) = {
        let mut held = key.state::<Subjects>()?;
        let s: &mut Subjects = match held.as_deref_mut() {
            Some(s) => s,
            None => fresh.insert(Subjects::new(layout.into()).ok_or(Error::Internal("RL.HIT"))?),
        };
        before = s.expires();
        if s.layout() != layout {
            // The policy's limiters changed since the family was written: each subject
            // keeps the states of the limiters it still has (as their keys would stay).
            *s = s.relayout(layout.into()).ok_or(Error::Internal("RL.HIT"))?;
            effect.layout(layout);
        } else if before.is_none() {
            effect.layout(layout);
        }
        let held_until = s.read(subject, &mut states);
        let mut changed = before.is_none();
        let mut slots: SmallVec<[PackedSlot; ALL_INLINE]> = SmallVec::new();
        for st in states.iter().take(members.len()) {
            slots.push(PackedSlot::new(*st));
        }
        let frames = Frames::new();
        let mut limiters: SmallVec<[OnEntry<'_>; ALL_INLINE]> = SmallVec::new();
        for m in members {
            limiters.push(m.prepared.spawn_packed(&frames, cost));
        }
        let now = clock.caller;
        let outcome = all::decide(&mut limiters, &mut slots, now, shadow)
            .map_err(|(i, e)| named(policy, members, subject, i, e))?;
        drop(limiters);
        if slots.iter().any(|s| s.unfit) {
            return Err(Refused::Unfit.error());
        }
        if slots.iter().any(|s| s.changed) {
            // Empty again when each limiter's key would expire: its state's own empty
            // time, as far past the server's clock as the state is behind it.
            let mut empty = held_until;
            for c in outcome.committed.iter().flatten() {
                if let Some(at) = c.empty_at {
                    let at = at.saturating_add(clock.key_lag(c.latest));
                    empty = Some(empty.map_or(at, |e| e.max(at)));
                }
            }
            let empty = empty.unwrap_or(now);
            let mut packed: SmallVec<[Option<Packed>; ALL_INLINE]> = SmallVec::new();
            let mut params: SmallVec<[Params2; ALL_INLINE]> = SmallVec::new();
            for slot in &slots {
                packed.push(slot.state);
                params.push(slot.state.map_or(Params2::default(), |p| p.0));
            }
            let set = s.set_for(&params).map_err(Refused::error)?;
            s.put(subject, set, &packed, empty)
                .map_err(Refused::error)?;
            effect.put(subject, empty, set, &packed);
            changed = true;
        }
        changed |= s.sweep(api::now(), SWEEP, |gone| effect.forget(gone)) > 0;
        (outcome, s.expires(), changed)
    };
    if let Some(new) = fresh {
        if new.is_empty() {
            return Ok(outcome);
        }
        key.set(new)?;
    }
    if changed {
        settle(key, c"rl.hit", expires, Duration::ZERO, before);
    }
    Ok(outcome)
}

/// A subject's states under a compact policy, one for each limiter (`None`: none), and when
/// it is empty again; `None` for a subject its family does not hold.
pub fn read(
    ctx: &Context,
    policy: &[u8],
    layout: &[family::Limiter],
    subject: &[u8],
    out: &mut [Option<Packed>],
) -> Result<Option<Instant>, Error> {
    let name = family_name(ctx, policy, subject)?;
    let mut key = Key::open(ctx, name.arg(), false);
    let Some(s) = key.state::<Subjects>()? else {
        return Ok(None);
    };
    if s.layout() == layout {
        return Ok(s.read(subject, out));
    }
    // Written under other limiters: read as the next hit will (those of the same kind and
    // name kept).
    let mut old = [None; family::MAX_LIMITERS];
    let Some(at) = s.read(subject, &mut old) else {
        return Ok(None);
    };
    for (o, l) in out.iter_mut().zip(layout) {
        *o = s
            .layout()
            .iter()
            .position(|x| x == l)
            .and_then(|i| old.get(i).copied().flatten());
    }
    Ok(Some(at))
}

/// Removes `subject` from its family under a compact policy: whether it held one. Its
/// effect goes to replicas and the AOF.
pub fn forget(ctx: &Context, policy: &[u8], subject: &[u8]) -> Result<bool, Error> {
    let name = family_name(ctx, policy, subject)?;
    let mut key = Key::open(ctx, name.arg(), true);
    let (gone, before, after) = {
        let Some(mut s) = key.state::<Subjects>()? else {
            return Ok(false);
        };
        let before = s.expires();
        let gone = s.forget(subject);
        (gone, before, s.expires())
    };
    if !gone {
        return Ok(false);
    }
    settle(&key, c"rl.forget", after, Duration::ZERO, before);
    drop(key);
    let mut effect = EffectWriter::new(
        &[crate::core::effect::BINARY, FamilyEffect::EFFECT_CODE],
        api::now(),
    );
    effect.forget(subject);
    api::replicate_effect(ctx, name.arg(), &effect.bytes);
    Ok(true)
}
