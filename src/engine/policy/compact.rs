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
//! expiry, in whole seconds, rounded up); a hit every few seconds sweeps a share of its
//! family's index (`kinds::family::Subjects::sweep`), removing the subjects empty by the
//! server's clock; the family key expires with its last subject (the latest empty time
//! given).

use std::cell::RefCell;

use redis_module::Context;
use smallvec::SmallVec;

use super::Member;
use crate::core::error::Error;
use crate::core::family::Place;
use crate::core::kind::{Clock, Command, Params2, Reply};
use crate::core::policy as def;
use crate::core::{Duration, Instant};
use crate::engine::limiters::{self as all, Frames, OnEntry, Outcome, Shadow};
use crate::engine::settle;
use crate::engine::slot::PackedSlot;
use crate::kinds::family::{self, EffectWriter, FamilyEffect, Held, Refused, Subjects};
use crate::rm::api::{self, KeptString, OwnedString, ALL_INLINE};
use crate::rm::key::Key;

/// The family key of `subject` under policy `name`.
pub fn family_name(
    ctx: &Context,
    name: &[u8],
    subject: &[u8],
    tagged: bool,
) -> Result<OwnedString, Error> {
    let key = def::FamilyKey::of(name, subject, tagged);
    OwnedString::new(ctx, key.as_bytes()).ok_or_else(|| Error::Internal("RL.HIT"))
}

/// The family key of the last hit that changed nothing (a refusal): its policy, its slot
/// and its name, kept.
struct LastFamily {
    policy: SmallVec<[u8; 32]>,
    slot: u16,
    name: KeptString,
}

thread_local! {
    static LAST_FAMILY: RefCell<Option<LastFamily>> = const { RefCell::new(None) };
}

/// The name of policy `policy`'s family in `slot` when the last refusal kept it, lent: a
/// subject refused again and again (the client a limiter exists for) does not have Redis
/// make and free its family's name at each refusal.
fn kept_family_name(policy: &[u8], slot: u16) -> Option<OwnedString> {
    LAST_FAMILY.with(|last| {
        let last = last.try_borrow().ok()?;
        let l = last
            .as_ref()
            .filter(|l| l.slot == slot && l.policy[..] == *policy)?;
        l.name.lend()
    })
}

/// Keeps `name`, the family's of policy `policy` in `slot`, for the next hit
/// ([`kept_family_name`]).
fn keep_family_name(policy: &[u8], slot: u16, name: &OwnedString) {
    let Some(name) = KeptString::retain(name) else {
        return;
    };
    LAST_FAMILY.with(|last| {
        if let Ok(mut last) = last.try_borrow_mut() {
            *last = Some(LastFamily {
                policy: SmallVec::from_slice(policy),
                slot,
                name,
            });
        }
    });
}

/// [`limiters::decide`] of a hit of `cost` on several limiters' `slots` at `now` (apart from
/// the one-limiter path: its frames would cost every call room on the stack).
#[inline(never)]
fn decide_all(
    members: &[Member],
    slots: &mut [PackedSlot],
    cost: u64,
    now: Instant,
    shadow: Shadow,
) -> Result<Box<Outcome>, (usize, Error)> {
    let frames = Frames::new();
    let mut limiters: SmallVec<[OnEntry<'_>; ALL_INLINE]> = SmallVec::new();
    for m in members {
        limiters.push(m.prepared.spawn_packed(&frames, cost));
    }
    all::decide(&mut limiters, slots, now, shadow).map(Box::new)
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

/// What a hit decided: the reply of a policy of one limiter run as its own command, or the
/// outcome of several (`limiters::decide`'s).
pub(super) enum Ran {
    Alone(Reply),
    /// Boxed: an outcome holds room for 16 limiters, which every move of the answer would
    /// copy.
    All(Box<Outcome>),
}

/// Decides a hit of `cost` on `subject`'s entry in its family at `clock`, as
/// `limiters::run_limiters` does on a keyed policy's keys: records it when every limiter
/// allows, sweeps, and propagates what changed.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    ctx: &Context,
    policy: &[u8],
    members: &[Member],
    layout: &family::Layout,
    (subject, tagged): (&[u8], bool),
    cost: u64,
    clock: Clock,
    shadow: Shadow,
) -> Result<Ran, Error> {
    let slot = def::family_slot(subject, tagged);
    let (name, kept) = match kept_family_name(policy, slot) {
        Some(name) => (name, true),
        None => {
            let key = def::FamilyKey::of_slot(policy, slot);
            let name =
                OwnedString::new(ctx, key.as_bytes()).ok_or_else(|| Error::Internal("RL.HIT"))?;
            (name, false)
        }
    };
    let mut key = Key::open(ctx, name.arg(), true);
    let mut effect = EffectWriter::new(
        &[crate::core::effect::BINARY, FamilyEffect::EFFECT_CODE],
        clock.caller,
    );
    let ops = effect.len();
    let result = match (members, shadow) {
        // A policy of one limiter runs it as its own command would (as a keyed one).
        ([m], Shadow::NONE) if m.prepared.runs_alone() => decide_alone(
            &mut key,
            policy,
            members,
            layout,
            subject,
            cost,
            clock,
            &mut effect,
        ),
        _ => decide(
            &mut key,
            policy,
            members,
            layout,
            subject,
            cost,
            clock,
            shadow,
            &mut effect,
        ),
    };
    drop(key);
    // What was changed goes on, even when the hit then failed (a layout changed first).
    if effect.len() > ops {
        api::replicate_effect(ctx, name.arg(), effect.as_bytes());
    } else if !kept {
        keep_family_name(policy, slot, &name);
    }
    result
}

/// The family as the policy's `layout` has it (made, or its layout changed as the policy's
/// limiters did), written to `effect`; and whether it changed.
#[inline(always)]
fn family_for<'k>(
    held: Option<&'k mut Subjects>,
    fresh: &'k mut Option<Subjects>,
    layout: &family::Layout,
    effect: &mut EffectWriter,
) -> Result<(&'k mut Subjects, bool), Error> {
    let s = match held {
        Some(s) => s,
        None => fresh.insert(
            Subjects::new(layout.limiters.clone()).ok_or_else(|| Error::Internal("RL.HIT"))?,
        ),
    };
    if s.is_empty() {
        // A new family (given its layout only if it keeps a subject).
        effect.layout(&layout.limiters);
        return Ok((s, false));
    }
    if !s.has_layout(layout) {
        // The policy's limiters changed since the family was written: each subject keeps
        // the states of the limiters it still has (as their keys would stay).
        *s = s
            .relayout(layout.limiters.clone())
            .ok_or_else(|| Error::Internal("RL.HIT"))?;
        effect.layout(&layout.limiters);
        return Ok((s, true));
    }
    Ok((s, false))
}

/// [`decide`] for a policy of one limiter whose command answers as `RL.ALL` does: run as its
/// own command on the unpacked state (`limiters::Prepared::alone_packed`), as a keyed
/// policy of it runs it on its key.
#[allow(clippy::too_many_arguments)]
fn decide_alone(
    key: &mut Key,
    policy: &[u8],
    members: &[Member],
    layout: &family::Layout,
    subject: &[u8],
    cost: u64,
    clock: Clock,
    effect: &mut EffectWriter,
) -> Result<Ran, Error> {
    let ops = effect.len();
    let Some(m) = members.first() else {
        return Err(Error::Internal("RL.HIT"));
    };
    let mut fresh: Option<Subjects> = None;
    let (decided, before, expires, changed) = {
        let mut held = key.state::<Subjects>()?;
        let (s, mut changed) = family_for(held.as_deref_mut(), &mut fresh, layout, effect)?;
        let before = s.expires();
        let decided = (|| {
            let place = s.locate(subject);
            let mut one = [None];
            let held_until = s.read_at(place, &mut one);
            let [state] = one;
            let ran = match m.prepared.alone_packed(state.as_ref(), cost, clock) {
                Some(Ok(ran)) => ran,
                Some(Err(e)) => return Err(named(policy, members, subject, 0, e)),
                None => return Err(Error::Internal("RL.HIT")),
            };
            if ran.slot.unfit {
                return Err(Refused::Unfit.error());
            }
            if let (true, Some(recorded)) = (ran.slot.changed, ran.recorded) {
                let empty = empty_time(held_until, [recorded], clock);
                record(s, place, subject, &[ran.slot.state], empty, effect)?;
                changed = true;
            }
            let swept = s.sweep(clock.server, |gone| effect.forget(gone));
            changed |= swept.is_some_and(|n| n > 0);
            Ok(Ran::Alone(ran.reply))
        })();
        (decided, before, s.expires(), changed)
    };
    // Kept and settled also when the hit failed: a layout changed first is the family's.
    keep(key, &mut fresh, (before, expires), changed, effect, ops)?;
    decided
}

#[allow(clippy::too_many_arguments)]
fn decide(
    key: &mut Key,
    policy: &[u8],
    members: &[Member],
    layout: &family::Layout,
    subject: &[u8],
    cost: u64,
    clock: Clock,
    shadow: Shadow,
    effect: &mut EffectWriter,
) -> Result<Ran, Error> {
    let ops = effect.len();
    let mut states: SmallVec<[Option<Held>; 4]> = smallvec::smallvec![None; members.len()];
    let mut fresh: Option<Subjects> = None;
    let (decided, before, expires, changed) = {
        let mut held = key.state::<Subjects>()?;
        let (s, mut changed) = family_for(held.as_deref_mut(), &mut fresh, layout, effect)?;
        let before = s.expires();
        let decided = (|| {
            let place = s.locate(subject);
            let held_until = s.read_at(place, &mut states);
            let now = clock.caller;
            let mut slots: SmallVec<[PackedSlot; 4]> = SmallVec::new();
            for st in states.iter_mut().take(members.len()) {
                slots.push(PackedSlot::new(st.take()));
            }
            let outcome = decide_all(members, &mut slots, cost, now, shadow)
                .map_err(|(i, e)| named(policy, members, subject, i, e))?;
            if slots.iter().any(|s| s.unfit) {
                return Err(Refused::Unfit.error());
            }
            if slots.iter().any(|s| s.changed) {
                let recorded = outcome
                    .committed
                    .iter()
                    .flatten()
                    .map(|c| (c.latest, c.empty_at));
                let empty = empty_time(held_until, recorded, clock);
                let packed: SmallVec<[Option<Held>; 4]> =
                    slots.iter_mut().map(|s| s.state.take()).collect();
                record(s, place, subject, &packed, empty, effect)?;
                changed = true;
            }
            let swept = s.sweep(clock.server, |gone| effect.forget(gone));
            changed |= swept.is_some_and(|n| n > 0);
            Ok(Ran::All(outcome))
        })();
        (decided, before, s.expires(), changed)
    };
    // Kept and settled also when the hit failed: a layout changed first is the family's.
    keep(key, &mut fresh, (before, expires), changed, effect, ops)?;
    decided
}

/// When a subject is empty again after a call: when each limiter's key that the call
/// recorded in (its state's latest time and empty time) would expire, its own empty time as
/// far past the server's clock as the state is behind it; never before `held_until` (its
/// entry's), and at least now.
fn empty_time(
    held_until: Option<Instant>,
    recorded: impl IntoIterator<Item = (Instant, Option<Instant>)>,
    clock: Clock,
) -> Instant {
    let mut empty = held_until;
    for (latest, empty_at) in recorded {
        if let Some(at) = empty_at {
            let at = at.saturating_add(clock.key_lag(latest));
            empty = Some(empty.map_or(at, |e| e.max(at)));
        }
    }
    empty.unwrap_or(clock.caller)
}

/// Writes `subject`'s states at `place` (in place under the same numbers, else under their
/// set) and its effect.
fn record(
    s: &mut Subjects,
    place: Place,
    subject: &[u8],
    packed: &[Option<Held>],
    empty: Instant,
    effect: &mut EffectWriter,
) -> Result<(), Error> {
    let sized = s.variable();
    if let Some((entry, kept)) = s.update(place, packed, empty) {
        effect.put_entry(subject, kept, (entry, sized), None);
        return Ok(());
    }
    let params: SmallVec<[Params2; 4]> = packed
        .iter()
        .map(|s| s.as_ref().map_or(Params2::default(), Held::params))
        .collect();
    let set = s.set_for(&params).map_err(Refused::error)?;
    let put = s
        .put_at(place, subject, set, packed, empty)
        .map_err(Refused::error)?;
    let new_set = put.new_set.then_some(&params[..]);
    effect.put_entry(subject, put.empty_at, (put.as_bytes(), sized), new_set);
    Ok(())
}

/// Stores a new family `fresh` in `key` unless it holds nothing (its effect then dropped
/// back to `ops` bytes), and settles a changed one (`before` and `expires` its expiry).
#[inline(always)]
fn keep(
    key: &Key,
    fresh: &mut Option<Subjects>,
    (before, expires): (Option<Instant>, Option<Instant>),
    changed: bool,
    effect: &mut EffectWriter,
    ops: usize,
) -> Result<(), Error> {
    if let Some(new) = fresh.take() {
        if new.is_empty() {
            // Nothing kept: no effect either.
            effect.truncate(ops);
            return Ok(());
        }
        key.set(new)?;
    }
    if changed {
        settle_family(key, expires, before);
    }
    Ok(())
}

/// Gives a changed family key what its command leaves: its expiry (the latest empty time of
/// its subjects, `expires`; the key deleted with none), its keyspace event. The expiry is
/// set when it moves (a change made to the key's by a client, `PERSIST`, holds until the
/// next subject empty later than all: reading it back on every call would cost a lookup).
fn settle_family(key: &Key, expires: Option<Instant>, before: Option<Instant>) {
    match expires {
        Some(at) if expires != before => key.expire_at(at),
        Some(_) => {}
        None => key.delete(),
    }
    key.signal_modified();
    key.notify(c"rl.hit");
    if expires.is_none() {
        key.notify_deleted();
    }
}

/// A subject's states under a compact policy, one for each limiter (`None`: none), and when
/// it is empty again; `None` for a subject its family does not hold.
pub fn read(
    ctx: &Context,
    policy: &[u8],
    layout: &family::Layout,
    subject: &[u8],
    out: &mut [Option<Held>],
) -> Result<Option<Instant>, Error> {
    let name = family_name(ctx, policy, subject, def::hash_tag(subject).is_some())?;
    let mut key = Key::open(ctx, name.arg(), false);
    let Some(s) = key.state::<Subjects>()? else {
        return Ok(None);
    };
    if s.has_layout(layout) {
        return Ok(s.read(subject, out));
    }
    // Written under other limiters: read as the next hit will (those of the same kind and
    // name kept).
    let mut old: [Option<Held>; family::MAX_LIMITERS] = Default::default();
    let Some(at) = s.read(subject, &mut old) else {
        return Ok(None);
    };
    for (o, l) in out.iter_mut().zip(&layout.limiters[..]) {
        *o = s
            .layout()
            .iter()
            .position(|x| x == l)
            .and_then(|i| old.get_mut(i).and_then(Option::take));
    }
    Ok(Some(at))
}

/// Removes `subject` from its family under a compact policy: whether it held one. Its
/// effect goes to replicas and the AOF.
pub fn forget(ctx: &Context, policy: &[u8], subject: &[u8]) -> Result<bool, Error> {
    let name = family_name(ctx, policy, subject, def::hash_tag(subject).is_some())?;
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
    api::replicate_effect(ctx, name.arg(), effect.as_bytes());
    Ok(true)
}
