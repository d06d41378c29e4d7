//! The machinery of a call of several limiters, each on its key, decided all or nothing:
//! what `RL.ALL` and `RL.HIT` (`policy::hit`) share. A kind's command that may be one of
//! them ([`KindSpec`], from its `Command::SPEC`) is parsed into a call's [`Frames`] (or,
//! for a policy, [`Prepared`] once and spawned into each hit's), evaluated without changing
//! anything, and committed only when every one allows and could record ([`decide`]); the
//! changed keys are then settled and their effects propagated together ([`run_limiters`]).

use redis_module::Context;
use smallvec::SmallVec;

use super::call::Storable;
use super::combine::{combine, refusing};
use super::slot::{self, PackedSlot};
use super::{catalog, replicate_expiry, settle};
use crate::core::args::Grammar;
use crate::core::effect::{Compact, Line};
use crate::core::error::Error;
use crate::core::kind::{Change, Clock, Command, Form, Kind, Mode, Reply};
use crate::core::{Decision, Duration, Instant, Wait};
use crate::kinds::family::Held;
use crate::rm::api::{self, Arg, ALL_INLINE};
use crate::rm::arena::Arena;
use crate::rm::key::Key;

/// The most keys one call takes: each costs at most what its own command costs, so this
/// bounds the call's work.
pub const ALL_MAX_KEYS: u64 = 16;

pub use super::slot::Slot;

/// Where a call's limiters are kept: on the stack, room for 16 of the largest kinds'.
pub type Frames = Arena<800>;

/// A limiter on a server's key, kept in a call's [`Frames`].
pub type OnKey<'a, 'c, 'r> = &'r mut (dyn Limiter<Key<'c>> + 'a);

/// A limiter on a subject's entry in a compact policy's family, kept in a call's [`Frames`].
pub type OnEntry<'r> = &'r mut (dyn Limiter<PackedSlot> + 'static);

/// Parses one limiter of a kind into a call's frames.
type ParseFn =
    for<'a, 'c, 'r> fn(&'c Context, &[&'a [u8]], &'r Frames) -> Result<OnKey<'a, 'c, 'r>, Error>;

/// Parses one limiter of a kind for a policy: kept, and spawned into each hit's frames.
type PrepareFn = fn(&[&[u8]]) -> Result<Box<dyn Prepared>, Error>;

/// How `RL.ALL` and policies take one kind's limiters: their keyword, how far one runs, and
/// how to parse one.
pub struct KindSpec {
    pub keyword: &'static str,
    pub grammar: Grammar,
    pub(super) parse: ParseFn,
    pub prepare: PrepareFn,
}

/// A policy's limiter (`RL.POLICY SET`): parsed once, owning its words, and put in the
/// frames of each `RL.HIT` as a limiter of its own.
pub trait Prepared: Send + Sync {
    /// The limiter for one hit of `cost` (which it keeps when its words gave one).
    fn spawn<'c, 'r>(&self, frames: &'r Frames, cost: u64) -> OnKey<'static, 'c, 'r>;

    /// A hit of `cost` under a policy of this limiter alone, run as its own command on the
    /// key `name` at `clock` (what `RL.ALL` of it alone decides and leaves, for less work):
    /// its reply, the entry `RL.ALL` gives it. `None` for a command that answers otherwise
    /// (the hit then goes through [`run_limiters`]).
    fn alone(
        &self,
        ctx: &Context,
        name: Arg,
        cost: u64,
        clock: Clock,
    ) -> Option<Result<Reply, Error>>;

    /// The limiter for one hit of `cost` on a compact policy's family (see [`PackedSlot`]).
    fn spawn_packed<'r>(&self, frames: &'r Frames, cost: u64) -> OnEntry<'r>;

    /// Its kind's code (`Kind::CODE`), what a family's layout names it by.
    fn code(&self) -> u8;

    /// Whether a compact policy's family can hold its states (a kind of the compact form,
    /// or one held in its own encoding: `core::kind::InFamily`): an error naming what it
    /// cannot hold.
    fn in_family(&self) -> Result<(), Error>;

    /// `RL.PEEK`'s answer for its state as a family holds it, at `now`.
    fn peek_packed(&self, state: &Held, now: Instant) -> Option<Decision>;

    /// Whether [`Prepared::alone_packed`] runs it (its command answers as `RL.ALL` does).
    fn runs_alone(&self) -> bool;

    /// [`Prepared::alone`] on a state as a compact policy's family holds it: the reply, the
    /// state it leaves, and what it recorded. `None` for a command that answers otherwise.
    fn alone_packed(
        &self,
        state: Option<&Held>,
        cost: u64,
        clock: Clock,
    ) -> Option<Result<AloneRan, Error>>;

    /// The units it takes for a hit of `cost`: its own `COST` when its words gave one, else
    /// the hit's; none for a hit of `COST 0`, which asks every limiter without taking.
    fn cost(&self, cost: u64) -> u64;
}

/// A policy's limiter of command `C`.
struct PreparedSpec<C: Command> {
    call: C::Call<'static>,
    /// It takes each hit's cost (its words gave none).
    takes_cost: bool,
}

impl<C: Command> PreparedSpec<C> {
    /// Its call for a hit of `cost` (which it keeps when its words gave one; `COST 0` asks
    /// every limiter without taking).
    #[inline(always)]
    fn call_for(&self, cost: u64) -> C::Call<'static> {
        let mut call = self.call.clone();
        if self.takes_cost || cost == 0 {
            C::set_cost(&mut call, cost);
        }
        call
    }
}

impl<C: Command> Prepared for PreparedSpec<C>
where
    C::Kind: Storable,
    C::Call<'static>: Send + Sync,
{
    fn spawn<'c, 'r>(&self, frames: &'r Frames, cost: u64) -> OnKey<'static, 'c, 'r> {
        let call = self.call_for(cost);
        frames.put(Spec::<C> {
            call,
            new: None,
            behind: Duration::ZERO,
        })
    }

    fn alone(
        &self,
        ctx: &Context,
        name: Arg,
        cost: u64,
        clock: Clock,
    ) -> Option<Result<Reply, Error>> {
        if !C::ALONE {
            return None;
        }
        let call = self.call_for(cost);
        let ran = super::call::run_at::<C>(ctx, name, &call, clock, Mode::Decide);
        crate::rm::block::kick(ctx, name);
        Some(ran.map(|(reply, _)| reply))
    }

    fn spawn_packed<'r>(&self, frames: &'r Frames, cost: u64) -> OnEntry<'r> {
        let call = self.call_for(cost);
        frames.put(Spec::<C> {
            call,
            new: None,
            behind: Duration::ZERO,
        })
    }

    fn code(&self) -> u8 {
        <C::Kind as Kind>::CODE
    }

    fn in_family(&self) -> Result<(), Error> {
        match (<C::Kind as Kind>::FORM, <C::Kind as Kind>::IN_FAMILY_ENCODED) {
            (Form::Compact, _) => Ok(()),
            (_, true) => C::in_compact(&self.call),
            _ => Err(Error::Invalid(
                "a compact policy holds TOKEN, LEAKY, FIXED, THROTTLE and SLIDE limiters (a keyed policy holds any)",
            )),
        }
    }

    fn runs_alone(&self) -> bool {
        C::ALONE
    }

    fn alone_packed(
        &self,
        state: Option<&Held>,
        cost: u64,
        clock: Clock,
    ) -> Option<Result<AloneRan, Error>> {
        if !C::ALONE {
            return None;
        }
        let call = self.call_for(cost);
        let run = || -> Result<AloneRan, Error> {
            let mut held = match state {
                Some(h) => {
                    Some(slot::take_state::<C::Kind>(h).ok_or_else(|| Error::Internal("RL.HIT"))?)
                }
                None => None,
            };
            let ran = C::run(held.as_mut(), &call, clock, Mode::Decide)?;
            // What the run changed is stored (as a key's state would be written), not
            // compared with what the entry held. A state the run left as it was is kept
            // for the next hit (`slot::keep_state`): a subject refused again and again is
            // read once (kept after a change too, a subject of many seldom hit again would
            // pay for it at each hit).
            let mut slot = PackedSlot::new(None);
            let recorded = match ran.change {
                Change::None => {
                    if let (Some(h), Some(k)) = (state, held) {
                        slot::keep_state(h, k);
                    }
                    None
                }
                Change::Held { after, .. } => {
                    let k = held.as_ref().ok_or_else(|| Error::Internal("RL.HIT"))?;
                    slot.store(k);
                    Some((k.latest_time(), after))
                }
                Change::New { state: k, empty } => {
                    slot.store(&k);
                    Some((k.latest_time(), empty))
                }
            };
            Ok(AloneRan {
                reply: ran.reply,
                slot,
                recorded,
            })
        };
        Some(run())
    }

    fn peek_packed(&self, held: &Held, now: Instant) -> Option<Decision> {
        let state = slot::state_of::<C::Kind>(held)?;
        let behind = state.latest_time().since(now);
        Some(
            state
                .peek(now)
                .seen_from_behind(behind)
                .resetting_at(state.empty_time(), now),
        )
    }

    fn cost(&self, cost: u64) -> u64 {
        if self.takes_cost || cost == 0 {
            cost
        } else {
            C::cost(&self.call)
        }
    }
}

fn prepare_spec<C: Command>(words: &[&[u8]]) -> Result<Box<dyn Prepared>, Error>
where
    C::Kind: Storable,
    C::Call<'static>: Send + Sync,
{
    let spec = spec::<C>(words, BLOCK_IN_POLICY)?;
    C::in_policy(&spec.call)?;
    Ok(Box::new(PreparedSpec::<C> {
        call: C::owned(&spec.call),
        takes_cost: !C::fixes_cost(words),
    }))
}

/// The `RL.ALL` limiters of command `C`, if it may be one.
pub const fn spec_of<C: Command>() -> Option<KindSpec>
where
    C::Kind: Storable,
    C::Call<'static>: Send + Sync,
{
    match C::SPEC {
        Some((keyword, grammar)) => Some(KindSpec {
            keyword,
            grammar,
            parse: parse_spec::<C>,
            prepare: prepare_spec::<C>,
        }),
        None => None,
    }
}

fn parse_spec<'a, 'c, 'r, C: Command>(
    _ctx: &'c Context,
    words: &[&'a [u8]],
    frames: &'r Frames,
) -> Result<OnKey<'a, 'c, 'r>, Error>
where
    C::Kind: Storable,
{
    Ok(frames.put(spec::<C>(words, BLOCK_IN_ALL)?))
}

/// Why a limiter may not wait, in `RL.ALL` and in a policy.
const BLOCK_IN_ALL: &str = "BLOCK is not allowed inside RL.ALL";
const BLOCK_IN_POLICY: &str = "BLOCK is not allowed in a policy: RL.HIT never waits";

/// A limiter of command `C` from its words (after its keyword); `no_block` the error for
/// a `BLOCK` among them.
fn spec<'a, C: Command>(words: &[&'a [u8]], no_block: &'static str) -> Result<Spec<'a, C>, Error>
where
    C::Kind: Storable,
{
    let call = C::parse(words, false)?;
    if C::block(&call).is_some() {
        return Err(Error::Invalid(no_block));
    }
    Ok(Spec::<C> {
        call,
        new: None,
        behind: Duration::ZERO,
    })
}

/// A limiter of command `C` from its words (after its keyword), on slots of type `S`, in a
/// box (for tests, which keep their limiters apart from a call).
pub fn limiter<'a, C: Command, S: Slot>(
    words: &[&'a [u8]],
) -> Result<Box<dyn Limiter<S> + 'a>, Error>
where
    C::Kind: Storable,
{
    Ok(Box::new(spec::<C>(words, BLOCK_IN_ALL)?))
}

/// One limiter of a call, on its slot (a key).
pub trait Limiter<S> {
    /// Its answer at `now`, changing nothing (a reshaped state kept aside), and `Some` error
    /// when, allowed, it could not be recorded. An error for a call refused whatever the
    /// state (a lease id the key cannot take).
    fn evaluate(&mut self, slot: &mut S, now: Instant) -> Result<(Decision, Option<Error>), Error>;
    /// Its answer with no cost: the state as it stands (for a refused call).
    fn evaluate_free(&mut self, slot: &mut S, now: Instant) -> Result<Decision, Error>;
    /// Records it (the call allowed): what it answers, when the state was and is back to
    /// empty, and its latest time; stored in the slot.
    fn commit(&mut self, slot: &mut S, now: Instant) -> Result<Committed, Error>;
    /// Its entry in the reply.
    fn entry(&self, decision: Decision, committed: Option<&Reply>) -> Reply;
    /// Writes its effect after a commit.
    fn effect(&self, committed: &Reply, at: Instant, out: &mut SmallVec<[u8; 32 * ALL_INLINE]>);
    fn cost(&self) -> u64;
    fn event(&self) -> &'static std::ffi::CStr;
}

/// What [`Prepared::alone_packed`] answered and left: its reply, the state, and when it
/// recorded, the state's latest time and when it is empty again.
pub struct AloneRan {
    pub reply: Reply,
    pub slot: PackedSlot,
    pub recorded: Option<(Instant, Option<Instant>)>,
}

/// What a commit did.
pub struct Committed {
    pub reply: Reply,
    pub before: Option<Instant>,
    pub latest: Instant,
    pub empty_at: Option<Instant>,
}

/// A limiter of command `C`.
struct Spec<'a, C: Command> {
    call: C::Call<'a>,
    /// A state for a missing key, or the stored one reshaped: stored once recorded in.
    new: Option<C::Kind>,
    behind: Duration,
}

impl<C: Command, S: Slot> Limiter<S> for Spec<'_, C>
where
    C::Kind: Storable,
{
    fn evaluate(&mut self, slot: &mut S, now: Instant) -> Result<(Decision, Option<Error>), Error> {
        let held = slot.state::<C::Kind>()?;
        if let Some(state) = held.as_deref() {
            C::check(state, &self.call, now)?;
            self.new = C::reshaped(state, &self.call, now);
        } else {
            self.new = C::fresh(&self.call);
        }
        let state = match (&self.new, held.as_deref()) {
            (Some(new), _) => new,
            (None, Some(held)) => held,
            (None, None) => return Err(Error::Internal(C::INFO.name)),
        };
        let latest = state.latest_time();
        self.behind = latest.since(now);
        let d = C::evaluate(state, &self.call, now).seen_from_behind(self.behind);
        let unfit = match (d.allowed, C::cost(&self.call)) {
            (true, 1..) => C::fits(state, &self.call, now).err(),
            _ => None,
        };
        Ok((d, unfit))
    }

    fn evaluate_free(&mut self, slot: &mut S, now: Instant) -> Result<Decision, Error> {
        let held = slot.state::<C::Kind>()?;
        let state = match (&self.new, held.as_deref()) {
            (Some(new), _) => new,
            (None, Some(held)) => held,
            (None, None) => return Err(Error::Internal(C::INFO.name)),
        };
        Ok(C::evaluate_free(state, &self.call, now).seen_from_behind(self.behind))
    }

    fn commit(&mut self, slot: &mut S, now: Instant) -> Result<Committed, Error> {
        if let Some(mut new) = self.new.take() {
            let reply =
                C::commit(&mut new, &self.call, now).ok_or_else(|| Error::Internal("RL.ALL"))?;
            let (latest, empty_at) = (new.latest_time(), new.empty_time());
            slot.set(new)?;
            return Ok(Committed {
                reply,
                before: None,
                latest,
                empty_at,
            });
        }
        let mut held = slot
            .state::<C::Kind>()?
            .ok_or_else(|| Error::Internal("RL.ALL"))?;
        let before = held.empty_time();
        let reply =
            C::commit(&mut held, &self.call, now).ok_or_else(|| Error::Internal("RL.ALL"))?;
        Ok(Committed {
            reply,
            before,
            latest: held.latest_time(),
            empty_at: held.empty_time(),
        })
    }

    fn entry(&self, decision: Decision, committed: Option<&Reply>) -> Reply {
        C::entry(decision, committed)
    }

    fn effect(&self, committed: &Reply, at: Instant, out: &mut SmallVec<[u8; 32 * ALL_INLINE]>) {
        if C::EFFECT_CODE != 0 {
            let mut compact = Compact::new(C::EFFECT_CODE);
            C::effect(&self.call, committed, at, &mut compact);
            if let Some(bytes) = compact.as_bytes() {
                return out.extend_from_slice(bytes);
            }
        }
        let mut line = Line::new(C::INFO.name);
        C::effect(&self.call, committed, at, &mut line);
        if let Some(bytes) = line.as_bytes() {
            out.extend_from_slice(bytes);
        }
    }

    fn cost(&self) -> u64 {
        C::cost(&self.call)
    }

    fn event(&self) -> &'static std::ffi::CStr {
        C::INFO.event
    }
}

/// The keywords of the limiters `RL.ALL` takes, for its error naming them.
pub fn keywords() -> &'static [&'static str] {
    static KEYWORDS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    KEYWORDS.get_or_init(|| specs().iter().map(|s| s.keyword).collect())
}

/// Whether `word` has a meaning in a limiter's words or between them, compared without
/// case: a kind's keyword, an option of any kind's limiters, `NOW` or `BLOCK` (what a
/// policy's limiter may not be named).
pub fn reserved(word: &[u8]) -> bool {
    let is = |k: &str| word.eq_ignore_ascii_case(k.as_bytes());
    is("NOW")
        || is("BLOCK")
        || specs()
            .iter()
            .any(|s| is(s.keyword) || s.grammar.options.iter().any(|o| is(o.keyword)))
}

/// The kinds' limiters `RL.ALL` takes, in the registry's order.
fn specs() -> &'static [&'static KindSpec] {
    static SPECS: std::sync::OnceLock<Vec<&'static KindSpec>> = std::sync::OnceLock::new();
    SPECS.get_or_init(|| {
        catalog()
            .commands()
            .filter_map(|c| c.spec.as_ref())
            .collect()
    })
}

/// The kind whose limiters start with `word`, its keyword.
#[inline]
pub fn spec_named(word: &[u8]) -> Option<&'static KindSpec> {
    specs()
        .iter()
        .copied()
        .find(|s| s.keyword.len() == word.len() && word.eq_ignore_ascii_case(s.keyword.as_bytes()))
}

/// Runs a call's limiters, each on its key in `names`, at `clock`: decides; when every one
/// allows, records each, gives each changed key what its own command would have (its value,
/// expiry, keyspace event), propagates the changes as one `RL.APPLY key effect [key effect
/// ...]`, and wakes the keys' waiters. An error about one limiter names its key.
pub(crate) fn run_limiters<'c>(
    ctx: &'c Context,
    limiters: &mut [OnKey<'_, 'c, '_>],
    names: &[Arg],
    clock: Clock,
    shadow: Shadow,
) -> Result<Outcome, Error> {
    let now = clock.caller;
    let mut keys: SmallVec<[Key; ALL_INLINE]> = SmallVec::new();
    for &name in names {
        keys.push(Key::open(ctx, name, true));
    }
    let outcome =
        decide(limiters, &mut keys, now, shadow).map_err(|(i, e)| match names.get(i) {
            Some(key) => Error::for_key(key.as_bytes(), e),
            None => e,
        })?;
    if !outcome.decision.allowed {
        return Ok(outcome);
    }
    // Each changed key as its own command leaves it; the effects go together in one
    // RL.APPLY.
    let mut bytes: SmallVec<[u8; 32 * ALL_INLINE]> = SmallVec::new();
    // Each changed key: its effect's length in `bytes`, how long after its state's empty
    // time it lives, and its expiry.
    type Changed = (Arg, usize, Duration, Option<Instant>);
    let mut changes: SmallVec<[Changed; ALL_INLINE]> = SmallVec::new();
    for (((l, key), c), &name) in limiters
        .iter()
        .zip(&keys)
        .zip(&outcome.committed)
        .zip(names)
    {
        let Some(c) = c else {
            continue;
        };
        let lag = clock.key_lag(c.latest);
        let expiry = settle(key, l.event(), c.empty_at, lag, c.before);
        let start = bytes.len();
        l.effect(&c.reply, c.latest, &mut bytes);
        changes.push((name, bytes.len() - start, lag, expiry));
    }
    drop(keys);
    let mut pairs: SmallVec<[(Arg, &[u8]); ALL_INLINE]> = SmallVec::new();
    let mut rest = bytes.as_slice();
    for &(name, len, ..) in &changes {
        let (effect, after) = rest.split_at(len.min(rest.len()));
        pairs.push((name, effect));
        rest = after;
    }
    if !pairs.is_empty() {
        api::replicate_effects(ctx, &pairs);
    }
    for &(name, _, lag, expiry) in &changes {
        replicate_expiry(ctx, name, lag, expiry);
    }
    for &(name, ..) in &changes {
        crate::rm::block::kick(ctx, name);
    }
    Ok(outcome)
}

/// What a call of several limiters decided.
pub struct Outcome {
    /// The call's five fields.
    pub decision: Decision,
    /// Each limiter's entry in the reply, in key order.
    pub entries: SmallVec<[Reply; ALL_INLINE]>,
    /// What each one recorded (`None`: nothing, its cost 0 or the call refused).
    pub committed: SmallVec<[Option<Committed>; ALL_INLINE]>,
    /// Refused: the place of the limiter whose fields the call answers (the refusing one
    /// that needs the longest wait).
    pub refused_by: Option<usize>,
    /// The place of the shadow limiter that would have refused (the one that needs the
    /// longest wait), if one would; and every one that would have.
    pub would_refuse: Option<usize>,
    pub shadow_refusals: Shadow,
}

/// Which of a call's limiters are shadow limiters (a policy's `SHADOW`): bit `i` for the
/// limiter at `i`. A shadow limiter decides and records as it would enforced, but never
/// refuses the call: it records only when it allows and the enforced ones allow the call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shadow(pub u16);

impl Shadow {
    /// No shadow limiter (`RL.ALL`, a policy without one).
    pub const NONE: Shadow = Shadow(0);

    /// Whether the limiter at `i` is a shadow one.
    #[inline(always)]
    pub fn has(self, i: usize) -> bool {
        i < 16 && self.0 >> i & 1 == 1
    }
}

/// The decision of a call: every limiter checked and evaluated at `now` on its slot, none
/// changed; then, only when every enforced one allows and could record, each records its
/// cost, but a shadow one (`shadow`) that refuses, which records nothing. A refused call
/// changes nothing. An error names the limiter at fault by its place.
pub fn decide<S: Slot>(
    limiters: &mut [&mut (dyn Limiter<S> + '_)],
    slots: &mut [S],
    now: Instant,
    shadow: Shadow,
) -> Result<Outcome, (usize, Error)> {
    let mut decisions: SmallVec<[Decision; ALL_INLINE]> = SmallVec::new();
    let mut unfit = None;
    let mut unfit_shadows = Shadow::NONE;
    for (i, (l, slot)) in limiters.iter_mut().zip(slots.iter_mut()).enumerate() {
        let (d, cannot) = l.evaluate(slot, now).map_err(|e| (i, e))?;
        if let Some(e) = cannot {
            // A shadow limiter that could not record leaves the call as it is: it records
            // nothing, as when it refuses.
            if shadow.has(i) {
                unfit_shadows.0 |= 1 << i;
            } else if unfit.is_none() {
                unfit = Some((i, e));
            }
        }
        decisions.push(d);
    }
    if shadow != Shadow::NONE {
        return decide_shadowed(
            limiters,
            slots,
            now,
            (shadow, unfit_shadows),
            decisions,
            unfit,
        );
    }
    let allowed = decisions.iter().all(|d| d.allowed);
    let mut entries: SmallVec<[Reply; ALL_INLINE]> = SmallVec::new();
    let mut committed: SmallVec<[Option<Committed>; ALL_INLINE]> = SmallVec::new();
    if !allowed {
        // Nothing is taken: a limiter that would have allowed answers its state as it
        // stands, as its own command with `COST 0` would (a refusing one already does).
        for (i, (l, slot)) in limiters.iter_mut().zip(slots.iter_mut()).enumerate() {
            let Some(d) = decisions.get_mut(i) else {
                continue;
            };
            if d.allowed && l.cost() > 0 {
                *d = l.evaluate_free(slot, now).map_err(|e| (i, e))?;
            }
            entries.push(l.entry(*d, None));
            committed.push(None);
        }
        let decision = combine(&decisions);
        return Ok(Outcome {
            decision,
            entries,
            committed,
            refused_by: refusing(&decisions),
            would_refuse: None,
            shadow_refusals: Shadow::NONE,
        });
    }
    if let Some(unfit) = unfit {
        return Err(unfit);
    }
    for (i, (l, slot)) in limiters.iter_mut().zip(slots.iter_mut()).enumerate() {
        let Some(d) = decisions.get_mut(i) else {
            continue;
        };
        if l.cost() == 0 {
            entries.push(l.entry(*d, None));
            committed.push(None);
            continue;
        }
        let c = l.commit(slot, now).map_err(|e| (i, e))?;
        *d = d.resetting_at(c.empty_at, now);
        entries.push(l.entry(*d, Some(&c.reply)));
        committed.push(Some(c));
    }
    Ok(Outcome {
        decision: combine(&decisions),
        entries,
        committed,
        refused_by: None,
        would_refuse: None,
        shadow_refusals: Shadow::NONE,
    })
}

/// [`decide`] for a call with shadow limiters, from each one's evaluation (`unfit_shadows`:
/// the shadow ones that allow but could not record). The call is decided by the enforced
/// ones, and answers their five fields; with none enforced, the shadow ones' as if each
/// allowed (it waits for none). Apart from the plain path on purpose: one loop for both
/// made every `RL.ALL` of two limiters some 110 instructions dearer (callgrind).
#[cold]
fn decide_shadowed<S: Slot>(
    limiters: &mut [&mut (dyn Limiter<S> + '_)],
    slots: &mut [S],
    now: Instant,
    (shadow, unfit_shadows): (Shadow, Shadow),
    mut decisions: SmallVec<[Decision; ALL_INLINE]>,
    unfit: Option<(usize, Error)>,
) -> Result<Outcome, (usize, Error)> {
    let allowed = decisions
        .iter()
        .enumerate()
        .all(|(i, d)| d.allowed || shadow.has(i));
    let mut entries: SmallVec<[Reply; ALL_INLINE]> = SmallVec::new();
    let mut committed: SmallVec<[Option<Committed>; ALL_INLINE]> = SmallVec::new();
    if allowed {
        if let Some(unfit) = unfit {
            return Err(unfit);
        }
    }
    for (i, (l, slot)) in limiters.iter_mut().zip(slots.iter_mut()).enumerate() {
        let Some(d) = decisions.get_mut(i) else {
            continue;
        };
        // Nothing is taken from a limiter of a refused call, nor from a shadow one that
        // refuses or could not record; one that would have allowed answers its state as
        // it stands, as its own command with `COST 0` would.
        let takes = allowed && d.allowed && !unfit_shadows.has(i);
        if !takes || l.cost() == 0 {
            if !allowed && d.allowed && l.cost() > 0 {
                *d = l.evaluate_free(slot, now).map_err(|e| (i, e))?;
            }
            entries.push(l.entry(*d, None));
            committed.push(None);
            continue;
        }
        let c = l.commit(slot, now).map_err(|e| (i, e))?;
        *d = d.resetting_at(c.empty_at, now);
        entries.push(l.entry(*d, Some(&c.reply)));
        committed.push(Some(c));
    }
    // Each side's decisions with the other side's as if they allowed (and waited for
    // nothing): which shadow limiter would have refused, as the call would answer it
    // enforced; and which enforced one refused. Copied and changed in place (an iterator
    // collected into each costs some 300 instructions more).
    let as_allowed = |d: &mut Decision| {
        d.allowed = true;
        d.retry_after = Wait::None;
    };
    let mut shadows = SmallVec::<[Decision; ALL_INLINE]>::from_slice(&decisions);
    let mut enforced_side = shadows.clone();
    let mut enforced = SmallVec::<[Decision; ALL_INLINE]>::new();
    let mut shadow_refusals = Shadow::NONE;
    for (i, (s, e)) in shadows.iter_mut().zip(enforced_side.iter_mut()).enumerate() {
        if shadow.has(i) {
            shadow_refusals.0 |= u16::from(!e.allowed) << i;
            as_allowed(e);
        } else {
            enforced.push(*e);
            as_allowed(s);
        }
    }
    let would_refuse = refusing(&shadows);
    let decision = match enforced.is_empty() {
        true => combine(&enforced_side),
        false => combine(&enforced),
    };
    Ok(Outcome {
        decision,
        entries,
        committed,
        refused_by: refusing(&enforced_side),
        would_refuse,
        shadow_refusals,
    })
}
