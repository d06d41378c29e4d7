//! A compact policy's family of subjects (`RL.POLICY SET name COMPACT ...`): the subjects of
//! one policy whose keys would fall in one hash slot, their limiters' states packed in one
//! value (`core::family`), on the key `policy|~|{tag}` (`core::policy::slot_tag`), so that a
//! subject costs tens of bytes instead of a key per limiter.
//!
//! A family knows the limiters its states were recorded under (its layout: each limiter's
//! kind and name, in the policy's order) and the parameter sets they were recorded under:
//! a compact state (`core::kind::Compact`'s `latest` and `tail`) does not carry its
//! parameters, so that each subject's entry names its set in a byte, and the parameters a
//! keyed state would hold are the set's. An entry is `set [mask] state*`: `mask` (two
//! bytes, for a layout of more than one limiter) the limiters that hold a state, each state
//! 14 bytes (`latest` in 6, `tail` in 8), zeros for one that holds none; or, for a kind
//! without the compact form that a family holds in its own encoding (a `SLIDE` log:
//! `core::kind::InFamily::Encoded`), its length (one or two bytes) and its encoding (its
//! version byte first), nothing for one that holds none. A layout with such a limiter makes
//! entries of their own lengths (`core::family::VARIABLE`).
//!
//! Its command, `RL.FAMILY`, is the effect of what `RL.HIT` and `RL.POLICY FORGET` decided
//! on a family (what replicas and the AOF apply, in `RL.APPLY`, never decided again): a
//! list of operations in bytes, `now` (8 bytes, little-endian) then each one (see [`Op`]).
//!
//! Encoding (kind 9): version 1, `n (code len name)* expires_s sets (index params*)* family`,
//! the family's canonical encoding last (`core::family`): the same subjects and sets give
//! the same bytes, on a primary and its replicas alike.

use std::borrow::Cow;

use crate::core::codec::{varint_bytes, Malformed, Reader, Sink};
use crate::core::effect::Out;
use crate::core::error::Error;
use crate::core::family::{self as core_family, Entry, Family, Place};
use crate::core::kind::{
    self, Clock, Command, Encoding, Form, InFamily, Kind, Mode, Params2, Ran, Reply,
};
use crate::core::meta::{self, arg, ArgKind, Info, Keys, Stats};
use crate::core::{Decision, Duration, Instant, Wait, MAX_TIMESTAMP};

/// The most limiters a family's layout holds: a policy's.
pub const MAX_LIMITERS: usize = 16;
/// The longest limiter name: a policy's.
const MAX_NAME: usize = 64;
/// The most parameter sets a family holds at once (an entry names its set in a byte).
pub const MAX_SETS: usize = 255;
/// The most subjects a family holds: what one step of its upkeep (an index rebuilt, a
/// layout changed) goes over whole. About 600 at 10 M subjects spread over the 16,384
/// slots, 6,100 at 100 M; subjects with a hash tag of their own share their tag's family.
pub const MAX_SUBJECTS: usize = 1 << 15;
/// Index slots a sweep goes over at least (see [`Subjects::sweep`]).
pub const SWEEP: usize = 1;
/// A family's whole index is swept at least this often, in seconds, while calls come.
pub const SWEEP_PERIOD_S: u64 = 10;
/// A sweep runs at most this often on a family, in seconds.
pub const SWEEP_EVERY_S: u64 = 5;
/// The most index slots one call sweeps.
pub const SWEEP_MAX: usize = 2048;
/// The bytes of one limiter's state in an entry: `latest` (below 2^48) in 6, `tail` in 8.
const STATE: usize = 14;

/// One limiter's state as a family holds it: the parameters it was recorded under, its
/// latest time and its tail (`core::kind::Compact`'s).
pub type Packed = (Params2, Instant, u64);

/// The most bytes of a state a family holds in its kind's own encoding (a `SLIDE` log, its
/// version byte included).
pub const MAX_LOG: usize = 1024;

/// A state in its kind's own encoding, its version byte first (a `SLIDE` log): inline up to
/// 24 bytes, a log of a request or two.
pub type Log = smallvec::SmallVec<[u8; 24]>;

/// One limiter's state as a family holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Held {
    /// A kind of the compact form's.
    Packed(Packed),
    /// Another kind's, in its own encoding ([`Log`]).
    Encoded(Log),
}

impl Held {
    /// The parameters an entry's set keeps for it: a packed state's; none for an encoded
    /// one, which holds its own.
    pub fn params(&self) -> Params2 {
        match self {
            Held::Packed((p, _, _)) => *p,
            Held::Encoded(_) => Params2::default(),
        }
    }
}

/// What reading an entry needs of a layout: its limiters, and those whose states are in
/// their own encoding (a bit each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    n: u8,
    encoded: u16,
}

impl Shape {
    pub fn of(layout: &[Limiter]) -> Shape {
        let encoded = layout.iter().enumerate().fold(0u16, |m, (i, l)| {
            match kind::in_family(l.code) {
                InFamily::Encoded(_) => m | 1 << i,
                _ => m,
            }
        });
        Shape {
            n: layout.len().min(MAX_LIMITERS) as u8,
            encoded,
        }
    }

    /// Its limiters.
    fn n(&self) -> usize {
        usize::from(self.n)
    }

    /// Whether its entries are each of their own length.
    pub fn variable(&self) -> bool {
        self.encoded != 0
    }

    /// The family's width for its entries.
    fn width(&self) -> usize {
        match self.variable() {
            true => core_family::VARIABLE,
            false => width(self.n()),
        }
    }

    fn encoded(&self, i: usize) -> bool {
        self.encoded >> i & 1 == 1
    }
}

/// An entry's bytes, on the stack for a layout of packed states.
pub type EntryBytes = smallvec::SmallVec<[u8; width(MAX_LIMITERS)]>;

/// Writes the entry of `states` (one for each limiter of `shape`) under set `set`: refused
/// as unfit for no state, a state of the other form than its limiter's, a time past 2^48
/// ms or a log past [`MAX_LOG`].
fn write_entry(
    set: u8,
    shape: Shape,
    states: &[Option<Held>],
    out: &mut EntryBytes,
) -> Result<(), Refused> {
    out.clear();
    out.push(set);
    let mask = states
        .iter()
        .enumerate()
        .fold(0u16, |m, (i, s)| m | u16::from(s.is_some()) << i);
    if mask == 0 || states.len() != shape.n() {
        return Err(Refused::Unfit);
    }
    if shape.n() > 1 {
        out.extend_from_slice(&mask.to_le_bytes());
    }
    for (i, s) in states.iter().enumerate() {
        match (s, shape.encoded(i)) {
            (Some(Held::Packed((_, latest, tail))), false) => {
                if latest.ms() >> 48 != 0 {
                    return Err(Refused::Unfit);
                }
                out.extend_from_slice(&latest.ms().to_le_bytes()[..6]);
                out.extend_from_slice(&tail.to_le_bytes());
            }
            (None, false) => out.extend_from_slice(&[0; STATE]),
            (Some(Held::Encoded(log)), true) => {
                if log.is_empty() || log.len() > MAX_LOG {
                    return Err(Refused::Unfit);
                }
                core_family::push_len(out, log.len());
                out.extend_from_slice(log);
            }
            (None, true) => {}
            _ => return Err(Refused::Unfit),
        }
    }
    Ok(())
}

/// 64-bit FNV-1a of a layout: each limiter's code, name length and name.
pub fn layout_digest(layout: &[Limiter]) -> u64 {
    let mut h = crate::core::FNV_OFFSET;
    for l in layout {
        h = crate::core::fnv1a(h, &[l.code, l.name.len() as u8]);
        h = crate::core::fnv1a(h, &l.name);
    }
    h
}

/// A compact policy's limiters as its families name them, and their digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub limiters: Box<[Limiter]>,
    pub digest: u64,
}

impl Layout {
    pub fn new(limiters: Box<[Limiter]>) -> Layout {
        let digest = layout_digest(&limiters);
        Layout { limiters, digest }
    }
}

/// A limiter of a family's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limiter {
    /// Its kind's code (`Kind::CODE`).
    pub code: u8,
    pub name: Box<[u8]>,
}

/// A parameter set: every limiter's parameters (those of a limiter without a state are
/// 0), and how many entries name it; a set no entry names is free (no parameters).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Set {
    params: smallvec::SmallVec<[Params2; 1]>,
    refs: u32,
}

/// A family's parameter sets: inline for one (most families), so that reading a state
/// follows no pointer to its numbers.
type Sets = smallvec::SmallVec<[Set; 1]>;

/// A family of subjects (see the module's docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subjects(Inner);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Inner {
    layout: Box<[Limiter]>,
    /// The layout's shape (which limiters hold their states encoded).
    shape: Shape,
    /// The layout's digest ([`layout_digest`]): what a call compares, without following
    /// the layout's pointers.
    digest: u64,
    sets: Sets,
    family: Family,
    /// The latest empty time a subject was given, in whole seconds (as an entry keeps
    /// it): the key's expiry.
    expires_s: u32,
}

/// Why a subject could not be put.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The family holds [`MAX_SUBJECTS`].
    Full,
    /// Every one of the [`MAX_SETS`] parameter sets is in use.
    Sets,
    /// A state that does not fit an entry (a time past 2^48 ms, a log past [`MAX_LOG`]).
    Unfit,
    /// An effect's set that this family holds otherwise (not reached: replicas hold what
    /// their primary holds).
    Diverged,
}

impl Refused {
    pub fn error(self) -> Error {
        Error::Invalid(match self {
            Refused::Full => "a compact policy's family holds at most 32768 subjects and 16 MB of entries (subjects with a hash tag of their own share their tag's family)",
            Refused::Sets => "a compact policy's family holds states under at most 255 parameter sets at once: set the policy again once the older states are empty",
            Refused::Unfit => "a state past what a compact policy holds",
            Refused::Diverged => "an RL.FAMILY effect names a parameter set this family holds otherwise",
        })
    }
}

/// Whole seconds at or after `at`, as the family keeps empty times (past 2106, the last one:
/// the 4 bytes an entry keeps, which its effect carries).
fn ceil_seconds(at: Instant) -> Instant {
    Instant::from_ms(u64::from(Family::seconds(at)) * 1000)
}

/// The bytes of an entry for `n` limiters.
pub const fn width(n: usize) -> usize {
    1 + if n > 1 { 2 } else { 0 } + STATE * n
}

/// An entry as [`Subjects::put`] wrote it: `set [mask] state*`, whether its set is new, and
/// when the subject is empty again, as kept.
pub struct Put {
    bytes: EntryBytes,
    pub new_set: bool,
    pub empty_at: Instant,
}

impl Put {
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// A packed state from its [`STATE`] bytes (`latest` in 6, `tail` in 8) and its set's
/// parameters.
#[inline(always)]
fn packed_at(s: &[u8], params: Params2) -> Option<Held> {
    let mut latest = [0u8; 8];
    latest.get_mut(..6)?.copy_from_slice(s.get(..6)?);
    let tail = u64::from_le_bytes(s.get(6..)?.try_into().ok()?);
    Some(Held::Packed((
        params,
        Instant::from_ms(u64::from_le_bytes(latest)),
        tail,
    )))
}

/// The states of an entry (`set [mask] state*` of a layout of `shape`) under its set's
/// `params`, into `out`: the bytes they took.
fn unpack_with(
    params: &[Params2],
    shape: Shape,
    state: &[u8],
    out: &mut [Option<Held>],
) -> Option<usize> {
    let (mask, mut at) = match shape.n() {
        1 => (1u16, 1),
        _ => (u16::from_le_bytes([*state.get(1)?, *state.get(2)?]), 3),
    };
    if !shape.variable() {
        // Packed states only (the common case, every call): each at its place.
        for (i, slot) in out.iter_mut().enumerate().take(shape.n()) {
            *slot = match mask >> i & 1 {
                1 => Some(packed_at(
                    state.get(at + STATE * i..at + STATE * (i + 1))?,
                    *params.get(i)?,
                )?),
                _ => None,
            };
        }
        return Some(at + STATE * shape.n());
    }
    for (i, slot) in out.iter_mut().enumerate().take(shape.n()) {
        let has = mask >> i & 1 == 1;
        *slot = match shape.encoded(i) {
            false => {
                let s = state.get(at..at + STATE)?;
                at += STATE;
                match has {
                    true => Some(packed_at(s, *params.get(i)?)?),
                    false => None,
                }
            }
            true if has => {
                let (len, head) = core_family::read_len(state, at)?;
                let log = state.get(at + head..at + head + len)?;
                at += head + len;
                Some(Held::Encoded(Log::from_slice(log)))
            }
            true => None,
        };
    }
    Some(at)
}

/// Whether `entry` is one a command writes for `layout` (of `shape`) under a set of
/// `params`: the entry its states would be written as (its mask within the layout and not
/// empty, zeros where a packed state is missing), the parameters of a limiter without a
/// packed state 0, and each state one its kind could hold.
fn check_entry(layout: &[Limiter], shape: Shape, params: &[Params2], entry: &[u8]) -> bool {
    let n = layout.len();
    if params.len() != n || shape.n() != n {
        return false;
    }
    let mut states: [Option<Held>; MAX_LIMITERS] = Default::default();
    let Some(set) = entry.first().copied() else {
        return false;
    };
    if unpack_with(params, shape, entry, &mut states) != Some(entry.len()) {
        return false;
    }
    let mut again = EntryBytes::new();
    if write_entry(set, shape, &states[..n], &mut again).is_err() || again[..] != *entry {
        return false;
    }
    layout
        .iter()
        .zip(&states)
        .zip(params)
        .all(|((l, st), p)| match (st, kind::in_family(l.code)) {
            (Some(Held::Packed((p, latest, tail))), InFamily::Packed(check)) => {
                check(*p, *latest, *tail)
            }
            (Some(Held::Encoded(log)), InFamily::Encoded(check)) => {
                *p == Params2::default() && check(log)
            }
            (None, InFamily::Packed(_) | InFamily::Encoded(_)) => *p == Params2::default(),
            _ => false,
        })
}

impl Subjects {
    /// An empty family of limiters `layout` (1 to [`MAX_LIMITERS`], names 1 to 64 bytes,
    /// each of a kind a family holds).
    pub fn new(layout: Box<[Limiter]>) -> Option<Subjects> {
        if !valid_layout(&layout) {
            return None;
        }
        let shape = Shape::of(&layout);
        let family = Family::new(shape.width())?;
        Some(Subjects(Inner {
            digest: layout_digest(&layout),
            shape,
            layout,
            sets: Sets::new(),
            family,
            expires_s: 0,
        }))
    }

    pub fn layout(&self) -> &[Limiter] {
        &self.0.layout
    }

    /// Whether its entries are each of their own length (a limiter's states in their own
    /// encoding): an effect gives each entry's length.
    pub fn variable(&self) -> bool {
        self.0.shape.variable()
    }

    /// Whether its layout is `layout` (compared by their digests: a policy's limiters are
    /// its administrator's, not its clients').
    pub fn has_layout(&self, layout: &Layout) -> bool {
        self.0.digest == layout.digest && self.0.layout.len() == layout.limiters.len()
    }

    /// How many subjects it holds.
    pub fn len(&self) -> usize {
        self.0.family.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.family.is_empty()
    }

    /// When the key goes: the latest empty time any subject was given, while one is held.
    #[inline]
    pub fn expires(&self) -> Option<Instant> {
        (!self.is_empty()).then_some(Instant::from_ms(u64::from(self.0.expires_s) * 1000))
    }

    /// Where `subject` is, or would go (good until the family changes).
    pub fn locate(&self, subject: &[u8]) -> Place {
        self.0.family.locate(subject)
    }

    /// The states `subject` holds, one for each limiter of the layout (`None`: none), and
    /// when it is empty again; `None` for a subject it does not hold.
    pub fn read(&self, subject: &[u8], out: &mut [Option<Held>]) -> Option<Instant> {
        self.read_at(self.locate(subject), out)
    }

    /// [`Subjects::read`] at `place` ([`Subjects::locate`]'s).
    #[inline]
    pub fn read_at(&self, place: Place, out: &mut [Option<Held>]) -> Option<Instant> {
        let (state, empty_at) = self.0.family.state_at_place(place)?;
        self.unpack(state, out)?;
        Some(empty_at)
    }

    #[inline]
    fn unpack(&self, state: &[u8], out: &mut [Option<Held>]) -> Option<usize> {
        let set = self.0.sets.get(usize::from(*state.first()?))?;
        unpack_with(&set.params, self.0.shape, state, out)
    }

    /// The index of the set `params` (an existing one, else a free one), for a new
    /// entry's.
    pub fn set_for(&self, params: &[Params2]) -> Result<u8, Refused> {
        let sets = &self.0.sets;
        let at = sets
            .iter()
            .position(|s| s.refs > 0 && s.params[..] == *params)
            .or_else(|| sets.iter().position(|s| s.refs == 0))
            .unwrap_or(sets.len());
        match u8::try_from(at) {
            Ok(at) if (at as usize) < MAX_SETS => Ok(at),
            _ => Err(Refused::Sets),
        }
    }

    /// Puts `subject`'s states (one for each limiter of the layout), under the parameter
    /// set at `set` (given by [`Subjects::set_for`]), empty again at `empty_at` (kept in
    /// whole seconds, rounded up; never earlier than it was).
    pub fn put(
        &mut self,
        subject: &[u8],
        set: u8,
        states: &[Option<Held>],
        empty_at: Instant,
    ) -> Result<Put, Refused> {
        let place = self.locate(subject);
        self.put_at(place, subject, set, states, empty_at)
    }

    /// [`Subjects::put`] in place, for a subject it holds under a set of the same
    /// parameters (the common case: a subject hit again under the same numbers): the entry
    /// as written and the empty time kept; `None`, nothing changed, otherwise (and for an
    /// entry of its own length that no longer takes the same room, which
    /// [`Subjects::put_at`] moves).
    pub fn update(
        &mut self,
        place: Place,
        states: &[Option<Held>],
        empty_at: Instant,
    ) -> Option<(&[u8], Instant)> {
        let n = self.0.layout.len();
        if states.len() != n {
            return None;
        }
        if self.0.shape.variable() {
            return self.update_sized(place, states, empty_at);
        }
        let Inner {
            family,
            sets,
            expires_s,
            ..
        } = &mut self.0;
        let (entry, time) = family.entry_mut(place)?;
        let set = sets.get(usize::from(*entry.first()?))?;
        let at = if n > 1 { 3 } else { 1 };
        let mut mask = 0u16;
        for (i, s) in states.iter().enumerate() {
            match s {
                Some(Held::Packed((p, latest, _)))
                    if set.params.get(i) == Some(p) && latest.ms() >> 48 == 0 =>
                {
                    mask |= 1 << i;
                }
                None if set.params.get(i) == Some(&Params2::default()) => {}
                _ => return None,
            }
        }
        if mask == 0 {
            return None;
        }
        if n > 1 {
            entry.get_mut(1..3)?.copy_from_slice(&mask.to_le_bytes());
        }
        for (i, s) in states.iter().enumerate() {
            let out = entry.get_mut(at + STATE * i..at + STATE * (i + 1))?;
            match *s {
                Some(Held::Packed((_, latest, tail))) => {
                    out[..6].copy_from_slice(&latest.ms().to_le_bytes()[..6]);
                    out[6..].copy_from_slice(&tail.to_le_bytes());
                }
                _ => out.fill(0),
            }
        }
        let kept = Family::seconds(empty_at).max(u32::from_le_bytes(*time));
        *time = kept.to_le_bytes();
        *expires_s = (*expires_s).max(kept);
        Some((entry, Instant::from_ms(u64::from(kept) * 1000)))
    }

    /// [`Subjects::update`] in a family of entries each of their own length: written
    /// again in place when the entry takes the same room (a log grown or shrunk within its
    /// rounding, or the same length).
    fn update_sized(
        &mut self,
        place: Place,
        states: &[Option<Held>],
        empty_at: Instant,
    ) -> Option<(&[u8], Instant)> {
        let Inner {
            family,
            sets,
            expires_s,
            shape,
            ..
        } = &mut self.0;
        let (old, _) = family.state_at_place(place)?;
        let index = *old.first()?;
        let set = sets.get(usize::from(index))?;
        let same = states.iter().enumerate().all(|(i, s)| {
            let params = s.as_ref().map_or(Params2::default(), Held::params);
            set.params.get(i) == Some(&params)
        });
        if !same {
            return None;
        }
        let mut entry = EntryBytes::new();
        write_entry(index, *shape, states, &mut entry).ok()?;
        let (entry, kept) = family.rewrite_at(place, &entry, empty_at)?;
        *expires_s = (*expires_s).max(kept);
        Some((entry, Instant::from_ms(u64::from(kept) * 1000)))
    }

    /// [`Subjects::put`] at `place` ([`Subjects::locate`]'s, the family unchanged since):
    /// the entry written, and whether its set is new (what its effect says).
    pub fn put_at(
        &mut self,
        place: Place,
        subject: &[u8],
        set: u8,
        states: &[Option<Held>],
        empty_at: Instant,
    ) -> Result<Put, Refused> {
        let n = self.0.layout.len();
        if states.len() != n {
            return Err(Refused::Unfit);
        }
        let mut params = [Params2::default(); MAX_LIMITERS];
        for (p, s) in params.iter_mut().zip(states) {
            *p = s.as_ref().map_or(Params2::default(), Held::params);
        }
        let mut entry = Put {
            bytes: EntryBytes::new(),
            new_set: false,
            empty_at,
        };
        write_entry(set, self.0.shape, states, &mut entry.bytes)?;
        let (new_set, kept) = self.store(place, subject, &entry.bytes, &params[..n], empty_at)?;
        entry.new_set = new_set;
        entry.empty_at = kept;
        Ok(entry)
    }

    /// Stores `entry` (checked) for `subject` at `place`, its set's parameters `params`:
    /// whether the set is new (no entry named it), and the empty time kept.
    fn store(
        &mut self,
        place: Place,
        subject: &[u8],
        entry: &[u8],
        params: &[Params2],
        empty_at: Instant,
    ) -> Result<(bool, Instant), Refused> {
        let inner = &mut self.0;
        let index = usize::from(*entry.first().ok_or_else(|| Refused::Unfit)?);
        // The set: the one at `set` (its parameters these), or a free one taking them.
        let new_set = match inner.sets.get(index) {
            Some(s) if s.refs > 0 => {
                if s.params[..] != *params {
                    return Err(Refused::Diverged);
                }
                false
            }
            _ if index >= MAX_SETS || index > inner.sets.len() => return Err(Refused::Diverged),
            _ => true,
        };
        let old = inner.family.state_at_place(place);
        let (old_set, old_empty) = match old {
            Some((state, empty_at)) => (state.first().copied(), Some(empty_at)),
            None => (None, None),
        };
        if old.is_none() && inner.family.len() >= MAX_SUBJECTS {
            return Err(Refused::Full);
        }
        let empty = ceil_seconds(empty_at);
        let kept = old_empty.map_or(empty, |e| e.max(empty));
        if !inner.family.put_at(place, subject, entry, kept) {
            return Err(Refused::Full);
        }
        if old_set != Some(index as u8) {
            if index == inner.sets.len() {
                // Most families hold one set: no room kept for more.
                inner.sets.reserve_exact(1);
                inner.sets.push(Set::default());
            }
            if let Some(s) = inner.sets.get_mut(index) {
                if s.refs == 0 {
                    s.params = smallvec::SmallVec::from_slice(params);
                }
                s.refs += 1;
            }
            if let Some(old) = old_set {
                release(&mut inner.sets, old);
            }
        }
        inner.expires_s = inner.expires_s.max(Family::seconds(kept));
        Ok((new_set, kept))
    }

    /// The parameters of the set at `index`, if an entry names it.
    fn set_params(&self, index: u8) -> Option<&[Params2]> {
        self.0
            .sets
            .get(usize::from(index))
            .filter(|s| s.refs > 0)
            .map(|s| &s.params[..])
    }

    /// Removes `subject`: whether it held one.
    pub fn forget(&mut self, subject: &[u8]) -> bool {
        let inner = &mut self.0;
        let Some(set) = inner.family.get(subject).and_then(|e| e.state.first().copied()) else {
            return false;
        };
        inner.family.remove(subject);
        release(&mut inner.sets, set);
        true
    }

    /// Removes the subjects empty at `now` among the next slots of the index (see
    /// `core::family::Family::sweep`), handing each to `removed`: how many. It runs on the
    /// first call every [`SWEEP_EVERY_S`] seconds (sooner for a family whose share would pass
    /// [`SWEEP_MAX`] slots), over the slots that the time since the last one gives
    /// (the whole index every [`SWEEP_PERIOD_S`] seconds while calls come), [`SWEEP_MAX`] at
    /// most.
    /// `None` when no sweep is due (the last one this second).
    #[inline]
    pub fn sweep(&mut self, now: Instant, removed: impl FnMut(&[u8])) -> Option<usize> {
        let since = self.0.family.since_sweep(now);
        if since == 0 {
            // Most hits: swept this second already.
            return None;
        }
        let behind = (self.index_len() as u64)
            .saturating_mul(since)
            .div_ceil(SWEEP_PERIOD_S);
        // Every few seconds; every second for a family a sweep cannot go over whole in
        // time otherwise.
        if since < SWEEP_EVERY_S && behind < SWEEP_MAX as u64 {
            return None;
        }
        self.0.family.swept(now);
        let budget = behind.clamp(SWEEP as u64, SWEEP_MAX as u64) as usize;
        Some(self.sweep_slots(now, budget, removed))
    }

    /// [`Subjects::sweep`] over `budget` slots.
    #[inline(never)]
    pub fn sweep_slots(
        &mut self,
        now: Instant,
        budget: usize,
        mut removed: impl FnMut(&[u8]),
    ) -> usize {
        let Inner { family, sets, .. } = &mut self.0;
        family.sweep_with(now, budget, |e: Entry<'_>| {
            if let Some(&set) = e.state.first() {
                release(sets, set);
            }
            removed(e.subject);
        })
    }

    /// The slots of its index, what a whole sweep goes over.
    pub fn index_len(&self) -> usize {
        self.0.family.index_len()
    }

    /// The family under another layout (the policy's limiters changed): each subject keeps
    /// the states of the limiters of the same kind and name, the others start without; a
    /// subject left with none goes. Goes over every subject (at most [`MAX_SUBJECTS`]).
    pub fn relayout(&self, layout: Box<[Limiter]>) -> Option<Subjects> {
        let mut new = Subjects::new(layout)?;
        let from: Vec<Option<usize>> = new
            .0
            .layout
            .iter()
            .map(|l| self.0.layout.iter().position(|o| o == l))
            .collect();
        let mut old: [Option<Held>; MAX_LIMITERS] = Default::default();
        let mut states: [Option<Held>; MAX_LIMITERS] = Default::default();
        let n = new.0.layout.len();
        let mut subjects: Vec<Entry<'_>> = self.0.family.entries().collect();
        subjects.sort_unstable_by(|a, b| a.subject.cmp(b.subject));
        for e in subjects {
            self.unpack(e.state, &mut old)?;
            for (s, f) in states.iter_mut().zip(&from) {
                *s = f.and_then(|f| old.get_mut(f).and_then(Option::take));
            }
            let states = &states[..n];
            if states.iter().all(Option::is_none) {
                continue;
            }
            let params: Vec<Params2> = states
                .iter()
                .map(|s| s.as_ref().map_or(Params2::default(), Held::params))
                .collect();
            let set = new.set_for(&params).ok()?;
            new.put(e.subject, set, states, e.empty_at).ok()?;
        }
        new.0.expires_s = self.0.expires_s;
        Some(new)
    }

    /// Bytes it holds on the heap besides its box.
    fn heap(&self) -> usize {
        let inner = &self.0;
        let class = |bytes: usize| match bytes {
            0 => 0,
            b => crate::core::chunks::class_ceil(b),
        };
        let sets = match inner.sets.spilled() {
            true => class(inner.sets.capacity() * std::mem::size_of::<Set>()),
            false => 0,
        };
        let params: usize = inner
            .sets
            .iter()
            .filter(|s| s.params.spilled())
            .map(|s| class(s.params.capacity() * std::mem::size_of::<Params2>()))
            .sum();
        let layout = class(inner.layout.len() * std::mem::size_of::<Limiter>())
            + inner.layout.iter().map(|l| class(l.name.len())).sum::<usize>();
        inner.family.heap_size() + sets + params + layout
    }
}

/// One entry less names set `set`: freed when none does (the free sets at the end dropped,
/// as a decode leaves them).
fn release(sets: &mut Sets, set: u8) {
    if let Some(s) = sets.get_mut(usize::from(set)) {
        s.refs = s.refs.saturating_sub(1);
        if s.refs == 0 {
            s.params = smallvec::SmallVec::new();
        }
    }
    while sets.last().is_some_and(|s| s.refs == 0) {
        sets.pop();
    }
}

fn valid_layout(layout: &[Limiter]) -> bool {
    (1..=MAX_LIMITERS).contains(&layout.len())
        && layout.iter().enumerate().all(|(i, l)| {
            (1..=MAX_NAME).contains(&l.name.len())
                && !matches!(kind::in_family(l.code), InFamily::No)
                && !layout[..i].iter().any(|o| o.name == l.name)
        })
}

impl Kind for Subjects {
    const COMMAND: &'static str = "RL.HIT";
    const CODE: u8 = 9;
    const FORM: Form = Form::Boxed;

    /// The largest time: an effect's time is never ahead of a family, whose expiry is its
    /// entries' latest empty time as the primary gave it (a hit whose `NOW` is past it, a
    /// `COST 0` one, leaves it so), not lengthened to the effect's time on a replica.
    fn latest_time(&self) -> Instant {
        MAX_TIMESTAMP
    }

    fn empty_time(&self) -> Option<Instant> {
        self.expires()
    }

    fn peekable(&self) -> Result<(), Error> {
        Err(not_a_limiter())
    }

    fn peek(&self, _now: Instant) -> Decision {
        nothing()
    }

    fn peek_cost(&self, _now: Instant, _cost: u64) -> Decision {
        nothing()
    }

    fn refund(&mut self, _now: Instant, _units: u64) -> Result<Decision, Error> {
        Err(not_a_limiter())
    }

    fn refundable(&self) -> Result<(), Error> {
        Err(not_a_limiter())
    }

    fn charge(&mut self, _now: Instant, _units: u64) -> Result<Option<Decision>, Error> {
        Err(not_a_limiter())
    }

    fn can_charge(&self, _now: Instant, _units: u64) -> Result<bool, Error> {
        Err(not_a_limiter())
    }
}

/// What no call answers (a family is read by subject, not peeked).
fn nothing() -> Decision {
    Decision {
        allowed: false,
        limit: 0,
        remaining: 0,
        retry_after: Wait::None,
        reset_after: Duration::ZERO,
    }
}

fn not_a_limiter() -> Error {
    Error::Invalid("the key holds a compact policy's subjects: read one with RL.POLICY SUBJECT, remove one with RL.POLICY FORGET")
}

impl Encoding for Subjects {
    const VERSION: u8 = 1;

    fn encode<S: Sink>(&self, out: &mut S) {
        let inner = &self.0;
        out.varint(inner.layout.len() as u64);
        for l in &inner.layout[..] {
            out.put(&[l.code]);
            out.varint(l.name.len() as u64);
            out.put(&l.name);
        }
        out.varint(u64::from(inner.expires_s));
        let used = inner.sets.iter().filter(|s| s.refs > 0).count();
        out.varint(used as u64);
        for (i, s) in inner.sets.iter().enumerate().filter(|(_, s)| s.refs > 0) {
            out.varint(i as u64);
            for p in &s.params[..] {
                out.varint(p.a);
                out.varint(p.b);
            }
        }
        inner.family.encode(out);
    }

    fn decode(version: u8, r: &mut Reader) -> Result<Self, Malformed> {
        if version != 1 {
            return Err(Malformed("no such version for this kind"));
        }
        let layout = read_layout(r)?;
        let n = layout.len();
        // Whole seconds: past 2106, the last one (as an entry keeps it; an earlier build
        // kept a later one, which reads as that).
        let expires_s = match r.varint()? {
            s if s > MAX_TIMESTAMP.ms() / 1000 => return Err(Malformed("a time out of range")),
            s => u32::try_from(s).unwrap_or(u32::MAX),
        };
        let expires = Instant::from_ms(u64::from(expires_s) * 1000);
        let count = r.count(1 + 2 * n)?;
        if count > MAX_SETS {
            return Err(Malformed("too many parameter sets"));
        }
        let mut sets = Sets::new();
        for _ in 0..count {
            let at = usize::try_from(r.varint()?).unwrap_or(usize::MAX);
            if at >= MAX_SETS || at < sets.len() {
                return Err(Malformed("parameter sets out of order"));
            }
            while sets.len() < at {
                sets.push(Set::default());
            }
            let mut params = Vec::with_capacity(n);
            for _ in 0..n {
                params.push(Params2 {
                    a: r.varint()?,
                    b: r.varint()?,
                });
            }
            sets.push(Set {
                params: smallvec::SmallVec::from_vec(params),
                refs: 0,
            });
        }
        let family = Family::decode(r)?;
        let shape = Shape::of(&layout);
        if family.width() != shape.width() {
            return Err(Malformed("entries of another width than the layout's"));
        }
        if family.is_empty() {
            return Err(Malformed("a family of no subjects"));
        }
        if family.len() > MAX_SUBJECTS {
            return Err(Malformed("too many subjects"));
        }
        let mut s = Subjects(Inner {
            digest: layout_digest(&layout),
            shape,
            layout,
            sets,
            family,
            expires_s,
        });
        // Every entry: under a set held, one a command writes, empty by the key's expiry.
        let mut refs = vec![0u32; s.0.sets.len()];
        for e in s.0.family.entries() {
            let set = usize::from(e.state.first().copied().unwrap_or(u8::MAX));
            let params = match s.0.sets.get(set) {
                Some(p) if !p.params.is_empty() => &p.params[..],
                _ => return Err(Malformed("an entry of no parameter set")),
            };
            if !check_entry(&s.0.layout, shape, params, e.state) {
                return Err(Malformed("an entry no command writes"));
            }
            if let Some(r) = refs.get_mut(set) {
                *r += 1;
            }
            if e.empty_at > expires {
                return Err(Malformed("a subject empty after its family's expiry"));
            }
        }
        for (set, r) in s.0.sets.iter_mut().zip(refs) {
            if r == 0 && !set.params.is_empty() {
                return Err(Malformed("a parameter set no subject names"));
            }
            set.refs = r;
        }
        Ok(s)
    }

    fn heap_size(&self) -> usize {
        self.heap()
    }

    fn allocations(&self) -> usize {
        let inner = &self.0;
        2 + 1
            + inner.layout.len()
            + usize::from(inner.sets.spilled())
            + inner.sets.iter().filter(|s| s.params.spilled()).count()
    }
}

fn read_layout(r: &mut Reader) -> Result<Box<[Limiter]>, Malformed> {
    let n = r.count(3)?;
    if !(1..=MAX_LIMITERS).contains(&n) {
        return Err(Malformed("a layout of no or too many limiters"));
    }
    let mut layout = Vec::with_capacity(n);
    for _ in 0..n {
        let code = r.byte()?;
        let len = r.count(1)?;
        if len > MAX_NAME {
            return Err(Malformed("a limiter name too long"));
        }
        layout.push(Limiter {
            code,
            name: r.bytes(len)?.into(),
        });
    }
    if !valid_layout(&layout) {
        return Err(Malformed("a layout no compact policy has"));
    }
    Ok(layout.into())
}

/// `RL.FAMILY`: a family's effect (see [`Op`]).
pub struct FamilyEffect;

/// One operation of an effect, in its bytes:
/// - `1 n (code len name)*`: the family's layout (a new family, or the policy's limiters
///   changed: [`Subjects::relayout`]);
/// - `2 len subject empty_s entry`: a subject's entry (`set [mask] state*`, as the family
///   holds it), under a set the family holds, `empty_s` in 4 bytes (little-endian); in a
///   family of entries of their own lengths ([`Subjects::variable`]), `entry` is its length
///   (a varint) and its bytes;
/// - `4 len subject empty_s entry params{2n}`: the same under a new set, its parameters;
/// - `5 len subject after_s entry`: as `2`, its empty time `after_s` seconds (a varint)
///   after the effect's time in whole seconds (rounded up);
/// - `3 len subject`: a subject removed.
// Read one at a time, on the stack: a box for the parameters would cost an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq, Eq)]
pub enum Op<'a> {
    Layout(Box<[Limiter]>),
    Put {
        subject: &'a [u8],
        empty_at: Instant,
        entry: &'a [u8],
        /// A new set's parameters.
        params: Option<[Params2; MAX_LIMITERS]>,
    },
    Forget(&'a [u8]),
}

const LAYOUT: u8 = 1;
const PUT: u8 = 2;
const FORGET: u8 = 3;
const PUT_SET: u8 = 4;
const PUT_AFTER: u8 = 5;

/// A family's effect: its time, and its operations in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Effect<'a> {
    pub now: Instant,
    pub ops: Cow<'a, [u8]>,
}

/// Writes a family's effect, operation by operation: on the stack, unless it outgrows it
/// (long subjects, many removed).
pub struct EffectWriter {
    buf: [u8; EFFECT_INLINE],
    len: usize,
    spill: Vec<u8>,
    /// Its first bytes (`RL.APPLY`'s before the operations, at most 2) and its time,
    /// written with its first operation: an effect of none stays empty.
    prefix: [u8; 2],
    prefix_len: usize,
    now: Instant,
}

/// The bytes of an effect kept on the stack.
const EFFECT_INLINE: usize = 96;

impl EffectWriter {
    /// An effect at `now`, after `prefix` (`RL.APPLY`'s bytes before the operations, at
    /// most 2): empty until its first operation.
    pub fn new(prefix: &[u8], now: Instant) -> EffectWriter {
        let mut first = [0u8; 2];
        let prefix_len = prefix.len().min(2);
        first[..prefix_len].copy_from_slice(&prefix[..prefix_len]);
        EffectWriter {
            buf: [0; EFFECT_INLINE],
            len: 0,
            spill: Vec::new(),
            prefix: first,
            prefix_len,
            now,
        }
    }

    /// Writes its first bytes before its first operation.
    #[inline(always)]
    fn start(&mut self) {
        if self.len == 0 && self.spill.is_empty() {
            let prefix = self.prefix;
            self.put(&prefix[..self.prefix_len]);
            self.put(&self.now.ms().to_le_bytes());
        }
    }

    /// Its bytes so far.
    pub fn as_bytes(&self) -> &[u8] {
        match self.spill.is_empty() {
            true => self.buf.get(..self.len).unwrap_or_default(),
            false => &self.spill,
        }
    }

    /// How many bytes it holds.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops what was written after the first `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        match self.spill.is_empty() {
            true => self.len = self.len.min(len),
            false => self.spill.truncate(len),
        }
    }

    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        if self.spill.is_empty() {
            if let Some(to) = self.buf.get_mut(self.len..self.len + bytes.len()) {
                to.copy_from_slice(bytes);
                self.len += bytes.len();
                return;
            }
            self.spill
                .extend_from_slice(self.buf.get(..self.len).unwrap_or_default());
        }
        self.spill.extend_from_slice(bytes);
    }

    #[inline(always)]
    fn byte(&mut self, b: u8) {
        match self.buf.get_mut(self.len) {
            Some(to) if self.spill.is_empty() => {
                *to = b;
                self.len += 1;
            }
            _ => self.put(&[b]),
        }
    }

    #[inline(always)]
    fn varint(&mut self, v: u64) {
        let (bytes, n) = varint_bytes(v);
        self.put(bytes.get(..n).unwrap_or_default());
    }

    pub fn layout(&mut self, layout: &[Limiter]) {
        self.start();
        self.byte(LAYOUT);
        self.varint(layout.len() as u64);
        for l in layout {
            self.byte(l.code);
            self.varint(l.name.len() as u64);
            self.put(&l.name);
        }
    }

    /// A subject's entry as [`Subjects::put`] or [`Subjects::update`] wrote it, empty at
    /// `empty_at`; `new_set` the parameters of its set when new.
    /// `sized`: the family's entries are each of their own length (the entry's length goes
    /// first).
    pub fn put_entry(
        &mut self,
        subject: &[u8],
        empty_at: Instant,
        (entry, sized): (&[u8], bool),
        new_set: Option<&[Params2]>,
    ) {
        self.start();
        let secs = Family::seconds(empty_at);
        // Under a set held, empty at or after the effect's time (the common case): the
        // seconds after it, in a varint (so that a short subject's effect stays within the
        // 44 bytes of a string Redis makes in one allocation).
        let after = match new_set {
            None => secs.checked_sub(Family::seconds(self.now)),
            Some(_) => None,
        };
        if let Some(after) = after {
            let (delta, d) = varint_bytes(u64::from(after));
            let delta = delta.get(..d).unwrap_or_default();
            // At once on the stack: a short subject, an entry of the layout's width (or of
            // its own length below 128, that length in one byte first).
            let sized_len = usize::from(sized);
            let n = 2 + subject.len() + delta.len() + sized_len + entry.len();
            let short = subject.len() < 128 && (!sized || entry.len() < 128);
            if let (true, true) = (short, self.spill.is_empty()) {
                if let Some(b) = self.buf.get_mut(self.len..self.len + n) {
                    let (head, rest) = b.split_at_mut(2);
                    head.copy_from_slice(&[PUT_AFTER, subject.len() as u8]);
                    let (s, rest) = rest.split_at_mut(subject.len());
                    s.copy_from_slice(subject);
                    let (t, rest) = rest.split_at_mut(delta.len());
                    t.copy_from_slice(delta);
                    let (l, e) = rest.split_at_mut(sized_len);
                    let len = [entry.len() as u8];
                    l.copy_from_slice(len.get(..sized_len).unwrap_or_default());
                    e.copy_from_slice(entry);
                    self.len += n;
                    return;
                }
            }
            self.byte(PUT_AFTER);
            self.varint(subject.len() as u64);
            self.put(subject);
            self.put(delta);
        } else {
            self.byte(if new_set.is_some() { PUT_SET } else { PUT });
            self.varint(subject.len() as u64);
            self.put(subject);
            self.put(&secs.to_le_bytes());
        }
        if sized {
            self.varint(entry.len() as u64);
        }
        self.put(entry);
        for p in new_set.unwrap_or_default() {
            self.varint(p.a);
            self.varint(p.b);
        }
    }

    pub fn forget(&mut self, subject: &[u8]) {
        self.start();
        self.byte(FORGET);
        self.varint(subject.len() as u64);
        self.put(subject);
    }
}

/// Reads the next operation of an effect; `shape` the family's layout's as it stands (a
/// layout operation changes it).
pub fn next_op<'a>(
    r: &mut Reader<'a>,
    shape: &mut Shape,
    now_s: u32,
) -> Result<Option<Op<'a>>, Malformed> {
    if r.rest().is_empty() {
        return Ok(None);
    }
    let subject = |r: &mut Reader<'a>| -> Result<&'a [u8], Malformed> {
        let len = r.count(1)?;
        if !(1..=crate::core::family::MAX_SUBJECT).contains(&len) {
            return Err(Malformed("a subject of no or too many bytes"));
        }
        r.bytes(len)
    };
    let op = match r.byte()? {
        LAYOUT => {
            let layout = read_layout(r)?;
            *shape = Shape::of(&layout);
            Op::Layout(layout)
        }
        code @ (PUT | PUT_SET | PUT_AFTER) => {
            let subject = subject(r)?;
            let secs = match code {
                PUT_AFTER => u64::from(now_s)
                    .checked_add(r.varint()?)
                    .filter(|&s| s <= u64::from(u32::MAX))
                    .ok_or(Malformed("a time out of range"))?,
                _ => u64::from(u32::from_le_bytes(
                    r.bytes(4)?.try_into().map_err(|_| Malformed("cut short"))?,
                )),
            };
            if secs > MAX_TIMESTAMP.ms() / 1000 {
                return Err(Malformed("a time out of range"));
            }
            if !(1..=MAX_LIMITERS).contains(&shape.n()) {
                return Err(Malformed("a subject's states before its family's layout"));
            }
            let entry = match shape.variable() {
                true => {
                    let len = r.count(1)?;
                    if !(1..=core_family::MAX_STATE).contains(&len) {
                        return Err(Malformed("an entry of no or too many bytes"));
                    }
                    r.bytes(len)?
                }
                false => r.bytes(width(shape.n()))?,
            };
            let params = match code {
                PUT_SET => {
                    let mut params = [Params2::default(); MAX_LIMITERS];
                    for p in params.iter_mut().take(shape.n()) {
                        *p = Params2 {
                            a: r.varint()?,
                            b: r.varint()?,
                        };
                    }
                    Some(params)
                }
                _ => None,
            };
            Op::Put {
                subject,
                empty_at: Instant::from_ms(secs * 1000),
                entry,
                params,
            }
        }
        FORGET => Op::Forget(subject(r)?),
        _ => return Err(Malformed("an RL.FAMILY operation of no known kind")),
    };
    Ok(Some(op))
}

/// Checks an effect's operations against the family `state` (`None`: a missing key), before
/// any is applied: each readable, a layout before any subject, each entry one a command
/// writes, under a set the family holds or the effect gives.
pub fn check(state: Option<&Subjects>, ops: &[u8], now_s: u32) -> Result<(), Error> {
    let malformed = |e: Malformed| Error::BadPayload(e.0);
    let mut shape = state.map_or(Shape::default(), |s| s.0.shape);
    let mut r = Reader::new(ops);
    let mut relayout = false;
    while let Some(op) = next_op(&mut r, &mut shape, now_s).map_err(malformed)? {
        relayout |= matches!(op, Op::Layout(_));
    }
    if let (Some(s), true) = (state, relayout) {
        // The layout changes the sets' places: checked on a copy (a change of the policy's
        // limiters, once per family).
        let mut copy = s.clone();
        return apply(Some(&mut copy), ops, now_s).map(|_| ());
    }
    let mut shape = state.map_or(Shape::default(), |s| s.0.shape);
    let mut layout: Option<Box<[Limiter]>> = None;
    // Sets the effect gives, before any entry names them.
    let mut given: smallvec::SmallVec<[(u8, [Params2; MAX_LIMITERS]); 1]> = smallvec::SmallVec::new();
    let mut r = Reader::new(ops);
    while let Some(op) = next_op(&mut r, &mut shape, now_s).map_err(malformed)? {
        match op {
            Op::Layout(l) => layout = Some(l),
            Op::Put { entry, params, .. } => {
                let layout = match (&layout, state) {
                    (Some(l), _) => &l[..],
                    (None, Some(s)) => s.layout(),
                    (None, None) => return Err(Error::BadPayload("no layout")),
                };
                let index = entry.first().copied().unwrap_or(u8::MAX);
                let p: &[Params2] = match &params {
                    Some(p) => {
                        given.push((index, *p));
                        &p[..layout.len()]
                    }
                    None => match given.iter().rev().find(|(i, _)| *i == index) {
                        Some((_, p)) => &p[..layout.len()],
                        None => state
                            .and_then(|s| s.set_params(index))
                            .ok_or_else(|| Error::BadPayload("an entry of a set the family does not hold"))?,
                    },
                };
                if !check_entry(layout, shape, p, entry) {
                    return Err(Error::BadPayload("an entry no command writes"));
                }
            }
            Op::Forget(_) => {}
        }
    }
    Ok(())
}

/// Applies one operation to a family.
pub fn apply_op(s: &mut Subjects, op: Op<'_>) -> Result<(), Error> {
    match op {
        Op::Layout(l) => {
            if l != s.0.layout {
                *s = s
                    .relayout(l)
                    .ok_or_else(|| Error::BadPayload("a layout no compact policy has"))?;
            }
        }
        Op::Put {
            subject,
            empty_at,
            entry,
            params,
        } => {
            let n = s.layout().len();
            let index = entry.first().copied().unwrap_or(u8::MAX);
            let params: smallvec::SmallVec<[Params2; 2]> = match &params {
                Some(p) => p[..n].iter().copied().collect(),
                None => s
                    .set_params(index)
                    .ok_or_else(|| Refused::Diverged.error())?
                    .iter()
                    .copied()
                    .collect(),
            };
            if !check_entry(s.layout(), s.0.shape, &params, entry) {
                return Err(Error::BadPayload("an entry no command writes"));
            }
            let place = s.locate(subject);
            s.store(place, subject, entry, &params, empty_at)
                .map_err(Refused::error)?;
        }
        Op::Forget(subject) => {
            s.forget(subject);
        }
    }
    Ok(())
}

/// Applies an effect's operations (checked: [`check`]) to a family; a missing one is made
/// by the first (a layout). `Ok(None)` for a new family that holds nothing after them.
fn apply(state: Option<&mut Subjects>, ops: &[u8], now_s: u32) -> Result<Option<Subjects>, Error> {
    let malformed = |e: Malformed| Error::BadPayload(e.0);
    let mut r = Reader::new(ops);
    let mut shape = state.as_ref().map_or(Shape::default(), |s| s.0.shape);
    let mut made = None;
    let s = match state {
        Some(s) => s,
        None => match next_op(&mut r, &mut shape, now_s).map_err(malformed)? {
            Some(Op::Layout(l)) => made.insert(
                Subjects::new(l).ok_or_else(|| Error::BadPayload("a layout no compact policy has"))?,
            ),
            Some(_) => return Err(Error::BadPayload("no layout")),
            None => return Ok(None),
        },
    };
    while let Some(op) = next_op(&mut r, &mut shape, now_s).map_err(malformed)? {
        apply_op(s, op)?;
    }
    Ok(made.filter(|s| !s.is_empty()))
}

static FAMILY_INFO: Info = Info {
    name: "RL.FAMILY",
    event: c"rl.family",
    summary: "The effect of RL.HIT and RL.POLICY FORGET on a compact policy's family of subjects (what replicas and the AOF apply, inside RL.APPLY); a client's call is refused",
    complexity: "O(N) in the subjects it changes",
    arity: 3,
    keys: Keys::First,
    flags: "write deny-oom admin",
    categories: "admin dangerous slow",
    own_category: false,
    args: &[meta::KEY, arg("effect", ArgKind::String)],
    stats: Stats::new(),
};

impl Command for FamilyEffect {
    type Kind = Subjects;
    const INFO: &'static Info = &FAMILY_INFO;
    type Call<'a> = Effect<'a>;
    const EFFECT_CODE: u8 = 10;
    const ALONE: bool = false;

    /// An effect's one word: its bytes in hex (`RL.APPLY` carries them as they are, see
    /// `core::effect::BINARY`).
    fn parse<'a>(words: &[&'a [u8]], effect: bool) -> Result<Effect<'a>, Error> {
        if !effect {
            return Err(Error::Invalid(
                "RL.FAMILY is the effect of RL.HIT on a compact policy: it comes inside RL.APPLY",
            ));
        }
        let [word] = words else {
            return Err(Error::Arity);
        };
        let bytes = crate::core::effect::from_hex(word)
            .ok_or_else(|| Error::BadPayload("an RL.FAMILY effect is its bytes in hex"))?;
        let mut r = Reader::new(&bytes);
        let now = r
            .bytes(8)
            .ok()
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| Error::BadPayload("an RL.FAMILY effect starts with its time"))?;
        if now > MAX_TIMESTAMP.ms() {
            return Err(Error::BadPayload("a time out of range"));
        }
        Ok(Effect {
            now: Instant::from_ms(now),
            ops: Cow::Owned(r.rest().to_vec()),
        })
    }

    fn owned(call: &Effect<'_>) -> Effect<'static> {
        Effect {
            now: call.now,
            ops: Cow::Owned(call.ops.to_vec()),
        }
    }

    fn now(call: &Effect<'_>) -> Option<Instant> {
        Some(call.now)
    }

    fn run(
        state: Option<&mut Subjects>,
        call: &Effect<'_>,
        _clock: Clock,
        mode: Mode,
    ) -> Result<Ran<Subjects>, Error> {
        if mode == Mode::Decide {
            return Err(Error::Invalid("RL.FAMILY comes inside RL.APPLY only"));
        }
        let now_s = Family::seconds(call.now);
        check(state.as_deref(), &call.ops, now_s)?;
        if mode == Mode::Check {
            return Ok(Ran::unchanged(Reply::Ok));
        }
        let (change, reply) = match state {
            Some(s) => {
                let before = s.expires();
                apply(Some(&mut *s), &call.ops, now_s)?;
                let after = s.expires();
                (kind::Change::Held { before, after }, Reply::Ok)
            }
            None => match apply(None, &call.ops, now_s)? {
                Some(state) => {
                    let empty = state.expires();
                    (kind::Change::New { state, empty }, Reply::Ok)
                }
                None => return Ok(Ran::unchanged(Reply::Ok)),
            },
        };
        Ok(Ran {
            reply,
            change,
            wait: false,
        })
    }

    /// Not reached: a client's call is refused, and `RL.HIT` writes its effect itself.
    fn effect<O: Out>(call: &Effect<'_>, _reply: &Reply, _at: Instant, out: &mut O) {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&call.now.ms().to_le_bytes());
        bytes.extend_from_slice(&call.ops);
        out.hex(&bytes);
    }

    fn refusal(_state: Option<&Subjects>, _call: &Effect<'_>, _now: Instant) -> Reply {
        Reply::Nil
    }

    fn evaluate(_state: &Subjects, _call: &Effect<'_>, _now: Instant) -> Decision {
        nothing()
    }

    fn evaluate_free(_state: &Subjects, _call: &Effect<'_>, _now: Instant) -> Decision {
        nothing()
    }

    fn commit(_state: &mut Subjects, _call: &Effect<'_>, _now: Instant) -> Option<Reply> {
        None
    }

    fn cost(_call: &Effect<'_>) -> u64 {
        0
    }

    fn set_cost(_call: &mut Effect<'_>, _cost: u64) {}
}

/// No sample call: a family is made by `RL.HIT` on a compact policy, not by a command of its
/// own (its states are covered by its own tests and the compact policies' tests).
#[cfg(test)]
impl crate::core::sample::Sample for Subjects {
    fn sample_words(_p: [u8; 4], _now: Instant) -> String {
        "FAMILY 00".to_string()
    }
}

#[cfg(test)]
mod tests;
