//! A family of subjects (issue 30, compact policies): many subjects' states in one value, so
//! that a subject costs tens of bytes instead of a key. Each subject holds its bytes (1 to
//! [`MAX_SUBJECT`]), a state of the family's fixed `width` (the policy's limiters' states,
//! packed by the caller), and the time it is empty again; an open-addressing index finds it.
//!
//! Layout: entries packed in one arena, each `len (1 or 2 bytes) subject state empty_at` (the
//! state preceded by its own length as the subject's is, and zeros after it up to a multiple
//! of 8 bytes, in a family of [`VARIABLE`] width), the
//! empty time in whole seconds, rounded up (4 bytes: it only says when a sweep may remove the
//! subject, at most a second late; decisions read the state), and an index of `u32` offsets
//! (at most 3/4 full, a power of two long, linear probing, tombstones). The arena grows by an
//! eighth, not by doubling, so that it holds little it does not use. A removed entry leaves its bytes dead in the arena until the dead
//! bytes pass half of it: then the arena is rebuilt, which is what a family of its size
//! costs once (a family holds the subjects of one hash slot: about 600 of them at 10 M
//! subjects over 16,384 slots). [`Family::sweep`] removes the subjects that are empty again,
//! a bounded number of index slots at a time, from where the last sweep stopped.
//!
//! The encoding is canonical (the subjects in byte order), so that a primary and its
//! replicas, which reach the same subjects by different orders of insertion and removal,
//! write the same bytes and the same digest; [`Family::decode`] is the one validating
//! constructor.
//!
//! A compact policy's family key holds one (`kinds::family`).

use super::codec::{Malformed, Reader, Sink};
use smallvec::SmallVec;

use super::Instant;

/// The longest subject: a policy's (see `core::policy`).
pub const MAX_SUBJECT: usize = 1024;
/// The widest state a subject holds in a family of fixed width.
pub const MAX_WIDTH: usize = 256;
/// A family's width that says its states are each of their own length (1 to
/// [`MAX_STATE`] bytes, written after it as a subject's length is): a compact policy with a
/// `SLIDE` limiter, whose log grows and shrinks.
pub const VARIABLE: usize = u16::MAX as usize;
/// The longest state of a family of [`VARIABLE`] width.
pub const MAX_STATE: usize = 4096;

/// The bytes a state of `len` takes in a family of [`VARIABLE`] width: its length rounded
/// up to 8, so that a state that grows or shrinks a little (a log gaining a request) is
/// written in place, not anew at the arena's end; the rest zeros.
fn room(len: usize) -> usize {
    len.div_ceil(8) * 8
}
/// The most subjects one family holds.
pub const MAX_SUBJECTS: usize = 1 << 24;

/// Index slot: free.
const FREE: u32 = 0;
/// Index slot: a removed entry (probing goes on past it).
const GONE: u32 = u32::MAX;
/// An index slot holding an entry: `offset + 1` in its low 24 bits, and the top 8 bits of
/// the subject's hash above them (most slots of other subjects are passed without reading
/// their entry). [`GONE`]'s low bits are no offset: the arena stays below them.
const OFFSET_MASK: u32 = (1 << 24) - 1;
/// The most bytes a family's arena holds (so that every offset fits a slot).
pub const MAX_ARENA: usize = (1 << 24) - 2;

/// One family's subjects.
#[derive(Clone, Debug, Default)]
pub struct Family {
    arena: Vec<u8>,
    /// An entry's slot (its offset in `arena` and bits of its hash), [`FREE`] or [`GONE`].
    index: Box<[u32]>,
    width: u16,
    live: u32,
    gone: u32,
    dead_bytes: u32,
    /// Where the next sweep starts, in `index`.
    hand: u32,
    /// When the last sweep ran, in whole seconds (0: none yet).
    swept_at: u32,
}

impl PartialEq for Family {
    fn eq(&self, other: &Family) -> bool {
        self.width == other.width && self.entries_sorted() == other.entries_sorted()
    }
}

impl Eq for Family {}

/// Where a subject is, or would go, in a family's index ([`Family::locate`]): good until
/// the family changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    slot: usize,
    found: bool,
    hash: u64,
    /// Where the found entry's state starts in the arena.
    state_at: usize,
}

impl Place {
    /// Whether the family holds the subject.
    pub fn found(&self) -> bool {
        self.found
    }
}

/// A subject's entry, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    pub subject: &'a [u8],
    pub state: &'a [u8],
    pub empty_at: Instant,
}

/// An empty time as a family keeps it: whole seconds, rounded up (past 2106, the last one).
fn seconds(at: Instant) -> u32 {
    u32::try_from(at.ms().div_ceil(1000)).unwrap_or(u32::MAX)
}

/// The arena offset a slot holds, `None` for a free or removed one.
#[inline(always)]
fn offset_of(slot: u32) -> Option<usize> {
    match slot {
        FREE | GONE => None,
        s => Some((s & OFFSET_MASK) as usize - 1),
    }
}

/// The slot of an entry at `offset` whose subject hashes to `h`.
#[inline(always)]
fn slot_of(offset: usize, h: u64) -> u32 {
    (offset as u32 + 1) | ((h >> 56) as u32) << 24
}

/// The index slots for `n` subjects: at most 7/10 full, and all the allocation's size
/// class holds.
fn index_size(n: usize) -> usize {
    let want = (n * 10 / 7 + 1).max(8);
    super::chunks::class_ceil(want * 4) / 4
}

/// A subject's hash (the index's place, and the canonical order): eight bytes at a time
/// (little-endian, the last ones padded with zeros), each multiplied in, the length too,
/// then mixed so that every bit depends on every byte.
fn hash(subject: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = (subject.len() as u64).wrapping_mul(K);
    let mut chunks = subject.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K).rotate_left(29);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        // Byte by byte, little-endian (a copy of a length known only here would call
        // memcpy).
        let w = rest.iter().rev().fold(0u64, |w, &b| w << 8 | u64::from(b));
        h = (h ^ w).wrapping_mul(K).rotate_left(29);
    }
    h ^= h >> 32;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^ (h >> 29)
}

/// The bytes of a subject's length: one below 128, else two.
pub fn len_bytes(len: usize) -> usize {
    if len < 128 {
        1
    } else {
        2
    }
}

/// A length as an entry writes it (a subject's, a variable state's), read at `at`: the
/// length and the bytes it took.
#[inline(always)]
pub fn read_len(arena: &[u8], at: usize) -> Option<(usize, usize)> {
    let first = usize::from(*arena.get(at)?);
    match first < 128 {
        true => Some((first, 1)),
        false => Some(((first & 0x7f) << 8 | usize::from(*arena.get(at + 1)?), 2)),
    }
}

/// Writes a length as an entry keeps it (below 32,768).
pub fn push_len(arena: &mut impl Extend<u8>, len: usize) {
    match len < 128 {
        true => arena.extend([len as u8]),
        false => arena.extend([0x80 | (len >> 8) as u8, len as u8]),
    }
}

impl Family {
    /// An empty family whose subjects hold states of `width` bytes (at most [`MAX_WIDTH`]),
    /// or each of its own length ([`VARIABLE`]).
    pub fn new(width: usize) -> Option<Family> {
        (width <= MAX_WIDTH || width == VARIABLE).then(|| Family {
            width: width as u16,
            ..Family::default()
        })
    }

    pub fn width(&self) -> usize {
        usize::from(self.width)
    }

    /// Whether each state is of its own length.
    fn variable(&self) -> bool {
        self.width() == VARIABLE
    }

    /// Whether `state` is one its entries may hold.
    fn fits(&self, state: &[u8]) -> bool {
        match self.variable() {
            true => (1..=MAX_STATE).contains(&state.len()),
            false => state.len() == self.width(),
        }
    }

    /// The bytes an entry of `subject` and `state` takes in the arena.
    fn entry_size(&self, subject: &[u8], state: &[u8]) -> usize {
        let of_state = match self.variable() {
            true => len_bytes(state.len()) + room(state.len()),
            false => state.len(),
        };
        len_bytes(subject.len()) + subject.len() + of_state + 4
    }

    /// Where the state that starts at `at` (its length first, in a variable family) has its
    /// bytes, how many, and how many it takes ([`room`]).
    #[inline(always)]
    fn state_span(&self, at: usize) -> Option<(usize, usize, usize)> {
        match self.variable() {
            true => read_len(&self.arena, at).map(|(len, head)| (at + head, len, room(len))),
            false => Some((at, self.width(), self.width())),
        }
    }

    /// How many subjects it holds.
    pub fn len(&self) -> usize {
        self.live as usize
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The entry at arena offset `at` (written by this type: its bounds hold).
    fn entry_at(&self, at: usize) -> Option<(Entry<'_>, usize)> {
        let (len, head) = read_len(&self.arena, at)?;
        let subject = self.arena.get(at + head..at + head + len)?;
        let (state_at, width, room) = self.state_span(at + head + len)?;
        let state = self.arena.get(state_at..state_at + width)?;
        let time_at = state_at + room;
        let time: [u8; 4] = self.arena.get(time_at..time_at + 4)?.try_into().ok()?;
        let entry = Entry {
            subject,
            state,
            empty_at: Instant::from_ms(u64::from(u32::from_le_bytes(time)) * 1000),
        };
        Some((entry, time_at + 4 - at))
    }

    /// The index slot of `subject`, or the slot to put it in: `(slot, found)`.
    fn find(&self, subject: &[u8]) -> Option<(usize, bool)> {
        self.find_hashed(subject, hash(subject))
    }

    fn find_hashed(&self, subject: &[u8], h: u64) -> Option<(usize, bool)> {
        self.place_of(subject, h).map(|p| (p.slot, p.found))
    }

    /// Where `subject` (its hash `h`) is, or would go; `None` for an index of no slot.
    fn place_of(&self, subject: &[u8], h: u64) -> Option<Place> {
        let len = self.index.len();
        if len == 0 {
            return None;
        }
        // The start: the low 32 bits of the hash scaled to the index (any length).
        let mut at = (((h & 0xffff_ffff) * len as u64) >> 32) as usize;
        let bits = (h >> 56) as u32;
        let mut first_gone = None;
        let missing = |slot: usize| Place {
            slot,
            found: false,
            hash: h,
            state_at: 0,
        };
        for _ in 0..len {
            match *self.index.get(at)? {
                FREE => return Some(missing(first_gone.unwrap_or(at))),
                GONE => {
                    first_gone.get_or_insert(at);
                }
                slot if slot >> 24 == bits => {
                    // The entry's subject, read as `entry_at` does, compared.
                    let offset = (slot & OFFSET_MASK) as usize - 1;
                    let (n, head) = read_len(&self.arena, offset)?;
                    let start = offset + head;
                    if self.arena.get(start..start + n)? == subject {
                        return Some(Place {
                            slot: at,
                            found: true,
                            hash: h,
                            state_at: start + n,
                        });
                    }
                }
                _ => {}
            }
            at += 1;
            if at == len {
                at = 0;
            }
        }
        first_gone.map(missing)
    }

    /// Where `subject` is, or would go.
    pub fn locate(&self, subject: &[u8]) -> Place {
        let hash = hash(subject);
        self.place_of(subject, hash).unwrap_or(Place {
            slot: 0,
            found: false,
            hash,
            state_at: 0,
        })
    }

    /// The state and empty time of the entry at `place` (located in this family as it is),
    /// if it holds one.
    #[inline]
    pub fn state_at_place(&self, place: Place) -> Option<(&[u8], Instant)> {
        if !place.found {
            return None;
        }
        let (at, width, room) = self.state_span(place.state_at)?;
        let state = self.arena.get(at..at + width)?;
        let time: [u8; 4] = self.arena.get(at + room..at + room + 4)?.try_into().ok()?;
        let empty_at = Instant::from_ms(u64::from(u32::from_le_bytes(time)) * 1000);
        Some((state, empty_at))
    }

    /// The state and empty time of the entry at `place` (located in this family as it is),
    /// to change in place: its state's bytes, and its empty time as it keeps it (whole
    /// seconds, rounded up: [`Family::seconds`]). A family of fixed width only.
    pub fn entry_mut(&mut self, place: Place) -> Option<(&mut [u8], &mut [u8; 4])> {
        if !place.found || self.variable() {
            return None;
        }
        let (at, width, _) = self.state_span(place.state_at)?;
        let bytes = self.arena.get_mut(at..at + width + 4)?;
        let (state, time) = bytes.split_at_mut(width);
        Some((state, time.try_into().ok()?))
    }

    /// The state of the entry at `place` (located in this family as it is) written again
    /// as `state`, in place: its bytes and the empty time kept (the later of its own and
    /// `empty_at`, in whole seconds); `None`, nothing changed, for a state that does not take
    /// the same room (in a variable family, a length rounded to another [`room`]).
    pub fn rewrite_at(
        &mut self,
        place: Place,
        state: &[u8],
        empty_at: Instant,
    ) -> Option<(&[u8], u32)> {
        if !place.found || !self.fits(state) {
            return None;
        }
        let (at, width, _) = self.state_span(place.state_at)?;
        let same = match self.variable() {
            true => len_bytes(width) == len_bytes(state.len()) && room(width) == room(state.len()),
            false => true,
        };
        if !same {
            return None;
        }
        let time = at + self.room_of(width);
        let old: [u8; 4] = self.arena.get(time..time + 4)?.try_into().ok()?;
        let kept = seconds(empty_at).max(u32::from_le_bytes(old));
        self.rewrite(place.state_at, state, kept)?;
        Some((self.arena.get(at..at + state.len())?, kept))
    }

    /// The room a state of `len` bytes takes after its length.
    fn room_of(&self, len: usize) -> usize {
        match self.variable() {
            true => room(len),
            false => len,
        }
    }

    /// Writes `state` and the empty time `secs` at `at`, where a state of the same room
    /// starts (its length first, in a variable family); `None` out of the arena's bounds
    /// (not reached: callers found the entry).
    fn rewrite(&mut self, mut at: usize, state: &[u8], secs: u32) -> Option<()> {
        if self.variable() {
            let mut head = SmallVec::<[u8; 2]>::new();
            push_len(&mut head, state.len());
            self.arena
                .get_mut(at..at + head.len())?
                .copy_from_slice(&head);
            at += head.len();
        }
        let room = self.room_of(state.len());
        let s = self.arena.get_mut(at..at + room + 4)?;
        let (s, time) = s.split_at_mut(room);
        let (bytes, pad) = s.split_at_mut(state.len());
        bytes.copy_from_slice(state);
        pad.fill(0);
        time.copy_from_slice(&secs.to_le_bytes());
        Some(())
    }

    /// An empty time as a family keeps it (whole seconds, rounded up), and back.
    pub fn seconds(at: Instant) -> u32 {
        seconds(at)
    }

    /// The entry of `subject`, if it holds one.
    pub fn get(&self, subject: &[u8]) -> Option<Entry<'_>> {
        let (slot, true) = self.find(subject)? else {
            return None;
        };
        let offset = offset_of(*self.index.get(slot)?)?;
        self.entry_at(offset).map(|(e, _)| e)
    }

    /// Sets the state and empty time of `subject` (a new subject is added): `false`, and
    /// nothing changed, for a subject or state out of bounds, or a full family.
    pub fn put(&mut self, subject: &[u8], state: &[u8], empty_at: Instant) -> bool {
        let place = self.locate(subject);
        self.put_at(place, subject, state, empty_at)
    }

    /// [`Family::put`] of `subject` at `place` (where [`Family::locate`] found it, the family
    /// unchanged since).
    pub fn put_at(
        &mut self,
        place: Place,
        subject: &[u8],
        state: &[u8],
        empty_at: Instant,
    ) -> bool {
        if subject.is_empty() || subject.len() > MAX_SUBJECT || !self.fits(state) {
            return false;
        }
        let Place {
            slot,
            found,
            hash: h,
            ..
        } = place;
        let size = self.entry_size(subject, state);
        if found {
            let Some(offset) = self.index.get(slot).copied().and_then(offset_of) else {
                return false;
            };
            let old = match self.entry_at(offset) {
                Some((_, old)) => old,
                None => return false,
            };
            if old == size {
                // In place: the same subject, a state of the same room.
                let at = offset + len_bytes(subject.len()) + subject.len();
                return self.rewrite(at, state, seconds(empty_at)).is_some();
            }
            // A state of another length (a variable family): the entry written anew at the
            // arena's end, its old bytes dead.
            return self.move_entry(slot, old, subject, state, empty_at, h);
        }
        if self.len() >= MAX_SUBJECTS
            || self.arena.len() - self.dead_bytes as usize + size > MAX_ARENA
        {
            return false;
        }
        // Room for one more, at most 8/10 full counting the removed slots; the arena
        // without its dead bytes when it would pass its bound.
        let mut slot = slot;
        let crowded = (self.len() + self.gone as usize + 1) * 10 > self.index.len() * 8;
        if self.arena.len() + size > MAX_ARENA {
            self.rebuild(index_size(self.len() + 1));
            match self.find_hashed(subject, h) {
                Some((at, false)) => slot = at,
                _ => return false,
            }
        } else if crowded {
            self.reindex(index_size(self.len() + 1));
            match self.find_hashed(subject, h) {
                Some((at, false)) => slot = at,
                _ => return false,
            }
        }
        let offset = self.arena.len();
        self.append(subject, state, empty_at);
        if let Some(s) = self.index.get_mut(slot) {
            if *s == GONE {
                self.gone -= 1;
            }
            *s = slot_of(offset, h);
        }
        self.live += 1;
        true
    }

    /// Writes the entry at `slot` (of `old` bytes) anew at the arena's end with `state`
    /// (of another length): `false`, and nothing changed, past the arena's bound.
    fn move_entry(
        &mut self,
        slot: usize,
        old: usize,
        subject: &[u8],
        state: &[u8],
        empty_at: Instant,
        h: u64,
    ) -> bool {
        let size = self.entry_size(subject, state);
        if self.arena.len() - self.dead_bytes as usize - old + size > MAX_ARENA {
            return false;
        }
        let mut slot = slot;
        if self.arena.len() + size > MAX_ARENA {
            // Room made first: the arena without its dead bytes (the index as long). At the
            // bound itself (the old entry and the new one both held), refused.
            self.rebuild(self.index.len());
            match self.find_hashed(subject, h) {
                Some((at, true)) if self.arena.len() + size <= MAX_ARENA => slot = at,
                _ => return false,
            }
        }
        let offset = self.arena.len();
        self.append(subject, state, empty_at);
        if let Some(s) = self.index.get_mut(slot) {
            *s = slot_of(offset, h);
        }
        self.dead_bytes += old as u32;
        if self.dead_bytes as usize * 2 > self.arena.len() {
            self.rebuild(self.index.len());
        }
        true
    }

    fn append(&mut self, subject: &[u8], state: &[u8], empty_at: Instant) {
        let need = self.entry_size(subject, state);
        if self.arena.capacity() - self.arena.len() < need {
            // A sixteenth more, and what the allocation's size class holds beyond.
            let at_least = self.arena.len() + need + self.arena.len() / 16;
            let class = super::chunks::class_ceil(at_least).min(MAX_ARENA);
            self.arena
                .reserve_exact(class.max(at_least) - self.arena.len());
        }
        push_len(&mut self.arena, subject.len());
        self.arena.extend_from_slice(subject);
        let variable = self.variable();
        if variable {
            push_len(&mut self.arena, state.len());
        }
        self.arena.extend_from_slice(state);
        if variable {
            // Zeros up to its room.
            let pad = room(state.len()) - state.len();
            self.arena.extend(std::iter::repeat_n(0, pad));
        }
        self.arena
            .extend_from_slice(&seconds(empty_at).to_le_bytes());
    }

    /// Removes `subject`: whether it held one.
    pub fn remove(&mut self, subject: &[u8]) -> bool {
        let Some((slot, true)) = self.find(subject) else {
            return false;
        };
        self.remove_slot(slot);
        true
    }

    fn remove_slot(&mut self, slot: usize) {
        let Some(offset) = self.index.get(slot).copied().and_then(offset_of) else {
            return;
        };
        if let Some((_, size)) = self.entry_at(offset) {
            self.dead_bytes += size as u32;
        }
        if let Some(s) = self.index.get_mut(slot) {
            *s = GONE;
        }
        self.live -= 1;
        self.gone += 1;
        if self.live == 0 {
            *self = Family::new(self.width()).unwrap_or_default();
        } else if self.dead_bytes as usize * 2 > self.arena.len() {
            // The index too, when under a third full, so that memory comes back.
            let size = match self.len() * 3 < self.index.len() {
                true => index_size(self.len()),
                false => self.index.len(),
            };
            self.rebuild(size);
        }
    }

    /// The index at `size` slots and the arena without its dead bytes, entries in index order.
    fn rebuild(&mut self, size: usize) {
        let old = std::mem::take(self);
        let live = old.arena.len() - old.dead_bytes as usize;
        *self = Family {
            width: old.width,
            swept_at: old.swept_at,
            index: vec![FREE; size.max(1)].into_boxed_slice(),
            arena: Vec::with_capacity(super::chunks::class_ceil(live).min(MAX_ARENA).max(live)),
            ..Family::default()
        };
        for &slot in &old.index {
            if let Some((e, _)) = offset_of(slot).and_then(|o| old.entry_at(o)) {
                let _ = self.put_new(e);
            }
        }
    }

    /// The index at `size` slots, the arena as it is (each entry's subject hashed again).
    fn reindex(&mut self, size: usize) {
        let old = std::mem::replace(&mut self.index, vec![FREE; size.max(1)].into_boxed_slice());
        self.gone = 0;
        let len = self.index.len();
        for slot in old {
            let Some((e, _)) = offset_of(slot).and_then(|o| self.entry_at(o)) else {
                continue;
            };
            // A new subject's place: the first free slot from its start (no two alike).
            let h = hash(e.subject);
            let mut at = (((h & 0xffff_ffff) * len as u64) >> 32) as usize;
            while self.index.get(at).is_some_and(|&s| s != FREE) {
                at = if at + 1 == len { 0 } else { at + 1 };
            }
            if let Some(s) = self.index.get_mut(at) {
                *s = slot;
            }
        }
        self.hand = 0;
    }

    /// Adds an entry known to be new (a rebuild, a decode), the index long enough.
    fn put_new(&mut self, e: Entry<'_>) -> bool {
        let h = hash(e.subject);
        let Some((slot, false)) = self.find_hashed(e.subject, h) else {
            return false;
        };
        let offset = self.arena.len();
        if !self.fits(e.state) || offset + self.entry_size(e.subject, e.state) > MAX_ARENA {
            return false;
        }
        self.append(e.subject, e.state, e.empty_at);
        if let Some(s) = self.index.get_mut(slot) {
            *s = slot_of(offset, h);
        }
        self.live += 1;
        true
    }

    /// Removes the subjects empty at `now` among the next `budget` index slots from where
    /// the last sweep stopped: how many it removed. The index is gone over whole in
    /// `index.len() / budget` calls, but that the removals may rebuild the family (once its
    /// dead bytes pass half of it), and the sweep then starts over on the new index.
    pub fn sweep(&mut self, now: Instant, budget: usize) -> usize {
        self.sweep_with(now, budget, |_| {})
    }

    /// [`Family::sweep`], handing each entry to `removing` before it goes.
    pub fn sweep_with(
        &mut self,
        now: Instant,
        budget: usize,
        mut removing: impl FnMut(Entry<'_>),
    ) -> usize {
        let mut removed = 0;
        for _ in 0..budget.min(self.index.len()) {
            let slot = self.hand as usize % self.index.len().max(1);
            self.hand = slot as u32 + 1;
            let Some(offset) = self.index.get(slot).copied().and_then(offset_of) else {
                continue;
            };
            let empty = match self.entry_at(offset) {
                Some((e, _)) if e.empty_at <= now => {
                    removing(e);
                    true
                }
                _ => false,
            };
            if empty {
                let size = self.index.len();
                self.remove_slot(slot);
                removed += 1;
                if self.index.len() != size {
                    // Rebuilt: the hand starts over on the new index.
                    self.hand = 0;
                    break;
                }
            }
        }
        removed
    }

    /// When the last subject is empty again: what the family's key expiry follows.
    pub fn last_empty(&self) -> Option<Instant> {
        self.entries().map(|e| e.empty_at).max()
    }

    /// Every entry, in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> + '_ {
        self.index.iter().filter_map(move |&slot| {
            offset_of(slot)
                .and_then(|o| self.entry_at(o))
                .map(|(e, _)| e)
        })
    }

    /// Every entry in the canonical order: by the subjects' hashes, then their bytes (a
    /// sort of integers, mostly: a tenth of the time a sort by bytes takes).
    fn entries_sorted(&self) -> Vec<Entry<'_>> {
        let mut all: Vec<(u64, Entry<'_>)> = self.entries().map(|e| (hash(e.subject), e)).collect();
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.subject.cmp(b.1.subject)));
        all.into_iter().map(|(_, e)| e).collect()
    }

    /// Seconds from the last sweep to `now` (all of them before the first).
    #[inline]
    pub fn since_sweep(&self, now: Instant) -> u64 {
        let secs = u32::try_from(now.ms() / 1000).unwrap_or(u32::MAX);
        u64::from(secs.saturating_sub(self.swept_at))
    }

    /// Notes a sweep at `now`.
    pub fn swept(&mut self, now: Instant) {
        let secs = u32::try_from(now.ms() / 1000).unwrap_or(u32::MAX);
        self.swept_at = self.swept_at.max(secs);
    }

    /// The slots of its index (what a whole sweep goes over).
    pub fn index_len(&self) -> usize {
        self.index.len()
    }

    /// Bytes it holds on the heap (its index and arena, as allocated).
    pub fn heap_size(&self) -> usize {
        let class = |bytes: usize| match bytes {
            0 => 0,
            b => super::chunks::class_ceil(b),
        };
        class(self.index.len() * 4) + class(self.arena.capacity())
    }

    /// The canonical encoding: `width count (len subject state empty_at)*` (each state after
    /// its length in a family of [`VARIABLE`] width), subjects in the order of their hashes
    /// (then of their bytes), `empty_at` in seconds.
    pub fn encode<S: Sink>(&self, out: &mut S) {
        out.varint(u64::from(self.width));
        out.varint(u64::from(self.live));
        let variable = self.variable();
        for e in self.entries_sorted() {
            out.varint(e.subject.len() as u64);
            out.put(e.subject);
            if variable {
                out.varint(e.state.len() as u64);
            }
            out.put(e.state);
            out.varint(e.empty_at.ms() / 1000);
        }
    }

    /// The one validating constructor: every subject 1 to [`MAX_SUBJECT`] bytes, each once,
    /// in byte order, every state `width` bytes, every time within 32 bits of seconds.
    pub fn decode(r: &mut Reader<'_>) -> Result<Family, Malformed> {
        let width = usize::try_from(r.varint()?).map_err(|_| Malformed("a width too wide"))?;
        let mut f = Family::new(width).ok_or(Malformed("a width too wide"))?;
        let variable = f.variable();
        let count = r.count(1 + if variable { 2 } else { width } + 1)?;
        if count > MAX_SUBJECTS {
            return Err(Malformed("too many subjects"));
        }
        f.index = vec![FREE; index_size(count)].into_boxed_slice();
        let mut last: Option<(u64, &[u8])> = None;
        for _ in 0..count {
            let len = r.varint()?;
            if !(1..=MAX_SUBJECT as u64).contains(&len) {
                return Err(Malformed("a subject of no or too many bytes"));
            }
            let subject = r.bytes(len as usize)?;
            let h = hash(subject);
            if last.is_some_and(|(lh, l)| (lh, l) >= (h, subject)) {
                return Err(Malformed("subjects out of order, or twice"));
            }
            last = Some((h, subject));
            let state = match variable {
                true => {
                    let len = r.varint()?;
                    if !(1..=MAX_STATE as u64).contains(&len) {
                        return Err(Malformed("a state of no or too many bytes"));
                    }
                    r.bytes(len as usize)?
                }
                false => r.bytes(width)?,
            };
            let secs = u32::try_from(r.varint()?).map_err(|_| Malformed("a time past 2106"))?;
            let at = Instant::from_ms(u64::from(secs) * 1000);
            let entry = Entry {
                subject,
                state,
                empty_at: at,
            };
            if !f.put_new(entry) {
                return Err(Malformed("a subject the index could not take"));
            }
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    const T0: Instant = Instant::from_ms(1_700_000_000_000);

    #[derive(Clone, Debug)]
    enum Op {
        Put(u16, u8, u32),
        Remove(u16),
        Sweep(u32, u8),
    }

    fn subject(n: u16) -> Vec<u8> {
        // Mostly 12 bytes; now and then long (two length bytes).
        match n % 97 {
            0 => vec![b'x'; 128 + usize::from(n % 200)],
            _ => format!("{n:012}").into_bytes(),
        }
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u16..400, any::<u8>(), 0u32..100_000).prop_map(|(s, v, t)| Op::Put(s, v, t)),
            2 => (0u16..400).prop_map(Op::Remove),
            1 => (0u32..100_000, any::<u8>()).prop_map(|(t, b)| Op::Sweep(t, b)),
        ]
    }

    /// Runs `ops` on `f`, each put's state `state_of(v)`: the family holds what a map does
    /// (a sweep removes only subjects empty by then), and reads back from its encoding as
    /// it is, the same bytes again.
    fn holds_what_a_map_holds(
        mut f: Family,
        ops: Vec<Op>,
        state_of: impl Fn(u8) -> Vec<u8>,
    ) -> Result<(), TestCaseError> {
        let mut model: BTreeMap<Vec<u8>, (Vec<u8>, Instant)> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Put(s, v, t) => {
                    let (s, state, at) = (subject(s), state_of(v), T0 + u64::from(t));
                    prop_assert!(f.put(&s, &state, at));
                    // Kept in whole seconds, rounded up.
                    let kept = Instant::from_ms(at.ms().div_ceil(1000) * 1000);
                    model.insert(s, (state, kept));
                }
                Op::Remove(s) => {
                    let s = subject(s);
                    prop_assert_eq!(f.remove(&s), model.remove(&s).is_some());
                }
                Op::Sweep(t, budget) => {
                    let now = T0 + u64::from(t);
                    let before = f.len();
                    let removed = f.sweep(now, usize::from(budget));
                    prop_assert_eq!(before - removed, f.len());
                    // What the sweep removed was empty at `now`; the model follows it.
                    let gone: Vec<Vec<u8>> = model
                        .keys()
                        .filter(|s| f.get(s).is_none())
                        .cloned()
                        .collect();
                    prop_assert_eq!(gone.len(), removed);
                    for s in gone {
                        let (_, at) = model.remove(&s).unwrap();
                        prop_assert!(at <= now, "{:?} removed, empty at {:?}", s, at);
                    }
                }
            }
            prop_assert_eq!(f.len(), model.len());
            // Dead bytes never pass half of the arena.
            prop_assert!(f.dead_bytes as usize * 2 <= f.arena.len());
        }
        for (s, (state, at)) in &model {
            let e = f.get(s);
            prop_assert_eq!(e.map(|e| (e.state, e.empty_at)), Some((&state[..], *at)));
            prop_assert_eq!(f.state_at_place(f.locate(s)), Some((&state[..], *at)));
        }
        let mut out = Vec::new();
        f.encode(&mut out);
        let back = Family::decode(&mut Reader::new(&out));
        prop_assert_eq!(back.as_ref(), Ok(&f));
        let mut again = Vec::new();
        back.unwrap().encode(&mut again);
        prop_assert_eq!(again, out);
        Ok(())
    }

    proptest! {
        /// Any mix of puts, removes and sweeps on a family of fixed width.
        #[test]
        fn a_family_holds_what_a_map_holds(ops in prop::collection::vec(op(), 1..600)) {
            holds_what_a_map_holds(Family::new(8).unwrap(), ops, |v| vec![v; 8])?;
        }

        /// The same of a family whose states are each of their own length: a state of
        /// another length moves its entry to the arena's end (its old bytes dead until a
        /// rebuild), or is written in place within its room.
        #[test]
        fn a_variable_family_holds_what_a_map_holds(ops in prop::collection::vec(op(), 1..600)) {
            let len = |v: u8| match v % 16 {
                0 => 130 + usize::from(v),
                n => usize::from(n),
            };
            holds_what_a_map_holds(Family::new(VARIABLE).unwrap(), ops, |v| vec![v; len(v)])?;
        }
    }

    #[test]
    fn a_variable_family_takes_no_state_of_no_bytes_nor_one_too_long() {
        let mut f = Family::new(VARIABLE).unwrap();
        assert!(!f.put(b"x", &[], T0));
        assert!(!f.put(b"x", &vec![0; MAX_STATE + 1], T0));
        assert!(f.put(b"x", &vec![0; MAX_STATE], T0));
    }

    /// The hash as its encoding orders subjects (persisted: it never changes), written as
    /// plainly as it reads.
    #[test]
    fn the_hash_is_the_one_encodings_were_written_with() {
        fn plain(subject: &[u8]) -> u64 {
            const K: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut h = (subject.len() as u64).wrapping_mul(K);
            for c in subject.chunks(8) {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K).rotate_left(29);
            }
            h ^= h >> 32;
            h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            h ^ (h >> 29)
        }
        for len in 0..40 {
            let s: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(37) ^ 0xa5).collect();
            assert_eq!(hash(&s), plain(&s), "{len}");
        }
    }

    #[test]
    fn a_whole_sweep_removes_every_empty_subject_and_only_those() {
        let mut f = Family::new(8).unwrap();
        for n in 0..1000u16 {
            assert!(f.put(&subject(n), &[1; 8], T0 + u64::from(n % 10) * 1000));
        }
        // Until a whole pass over the index removes nothing.
        let mut removed = 0;
        loop {
            let pass: usize = (0..f.index.len() / 16 + 1)
                .map(|_| f.sweep(T0 + 4000, 16))
                .sum();
            removed += pass;
            if pass == 0 {
                break;
            }
        }
        assert_eq!(removed, 500);
        assert!(f.entries().all(|e| e.empty_at > T0 + 4000));
        assert_eq!(f.last_empty(), Some(T0 + 9000));
    }

    #[test]
    fn bytes_per_subject_of_twelve_bytes_and_one_compact_limiters_state() {
        // A compact limiter's state is 16 bytes (its latest time and tail): 1 + 12 + 16 + 4
        // bytes an entry, the arena's slack at most an eighth, and the index at most 3/4 full.
        for n in [100usize, 600, 6100] {
            let mut f = Family::new(16).unwrap();
            for k in 0..n {
                let s = format!("{k:012}");
                assert!(f.put(s.as_bytes(), &[7; 16], T0));
            }
            let per = f.heap_size() as f64 / n as f64;
            assert!(per < 48.0, "{n} subjects: {per} bytes a subject");
        }
    }

    #[test]
    fn decoding_refuses_what_no_family_holds() {
        // Two subjects in the order that is not their hashes'.
        let (first, second) = match hash(b"a") < hash(b"b") {
            true => (b'b', b'a'),
            false => (b'a', b'b'),
        };
        let out_of_order = [1, 2, 1, first, 0, 0, 1, second, 0, 0];
        let bad: [&[u8]; 5] = [
            &[200, 1],                                         // a width too wide
            &[1, 1, 0],                                        // a subject of no bytes
            &out_of_order,                                     // out of order
            &[0, 1, 1, b'a', 0x80, 0x80, 0x80, 0x80, 0x80, 1], // a time past 32 bits
            &[1, 1, 1, b'a', 0],                               // cut short
        ];
        for b in bad {
            assert!(Family::decode(&mut Reader::new(b)).is_err(), "{b:?}");
        }
    }
}
