//! A kind's own values: into the pointer a key holds ([`into_raw`]), borrowed typed by a
//! command ([`borrow`], [`Held`]), and the type's callbacks for one kind (free, copy,
//! encode, memory, decode), which the registry installs as its [`Ops`](super::Ops).

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use super::intern::{self, Set};
use super::*;
use crate::core::chunks::class_ceil;
use crate::core::codec::{Malformed, Reader, Sink, SmallOut};
use crate::core::Instant;
pub(super) fn tagged<T>(b: Box<T>, tag: usize) -> Raw {
    Box::into_raw(b).map_addr(|a| a | tag).cast()
}

/// The pointer a key holds for `state`.
#[inline]
pub fn into_raw<K: Stored + MaybeCompact + MaybeBlock>(state: K) -> Raw {
    match K::PLACE {
        Place::Compact { wide } => {
            if let Some(raw) = into_compact::<K>(&state) {
                return raw;
            }
            match wide {
                Wide::Own(tag) => tagged(Box::new(state), tag),
                Wide::Header => headed::<K>(state),
            }
        }
        Place::Own(tag) => tagged(Box::new(state), tag),
        Place::Header => headed::<K>(state),
        Place::Block => match state.into_words() {
            Some(words) => Box::into_raw(words)
                .cast::<u32>()
                .map_addr(|a| a | BLOCK)
                .cast(),
            None => std::ptr::null_mut(),
        },
    }
}

pub(super) fn headed<K: Stored>(state: K) -> Raw {
    tagged(
        Box::new(Headed {
            index: u32::from(K::INDEX),
            state,
        }),
        HEADER,
    )
}

/// The compact form of `state`, holding a reference to its parameters' slot; `None` when
/// it does not fit or the table is full.
#[inline]
fn into_compact<K: Stored + MaybeCompact>(state: &K) -> Option<Raw> {
    let (params, latest, tail) = state.pack()?;
    let set = Set::of(K::INDEX, params);
    let slot = intern::table().intern(set, suffix::<K>)?;
    boxed_compact(latest.ms() << SLOT_BITS | u64::from(slot), tail)
}

/// The parameters' part of a compact kind's encoding, kept with its set.
fn suffix<K: MaybeCompact>(set: &Set) -> intern::Suffix {
    let mut out = SmallOut::new();
    K::encode_params(set.params(), &mut out);
    intern::Suffix::new(out.as_bytes()).unwrap_or_default()
}

/// A new [`Packed`], tagged, taking over the reference to the slot in `head` that the
/// caller holds; `None` (the reference given back) when the allocation is not 8-byte
/// aligned (not reached: the allocator honours the alignment a box asks).
#[inline]
pub(super) fn boxed_compact(head: u64, tail: u64) -> Option<Raw> {
    let packed = Box::into_raw(Box::new(Packed { head, tail }));
    if packed.addr() & TAGS != 0 {
        // SAFETY: just made, and used by nothing else.
        drop(unsafe { Box::from_raw(packed) });
        intern::table().release(head as u16);
        return None;
    }
    Some(packed.map_addr(|a| a | COMPACT).cast())
}

/// The registry index of the kind `raw` holds; `None` for a value a load could not read.
///
/// # Safety
/// `raw` must be a live value of this type.
#[inline]
pub unsafe fn kind_index(raw: Raw) -> Option<usize> {
    let tag = raw.addr() & TAGS;
    let at = raw.map_addr(|a| a & !TAGS);
    match tag {
        // SAFETY: tagged COMPACT: a live `Packed`, whose slot the key holds a reference to.
        COMPACT => Some(usize::from(
            intern::table()
                .get(unsafe { (*at.cast::<Packed>()).head } as u16)
                .kind,
        )),
        // SAFETY: tagged HEADER: a live `Headed` box, its index first.
        HEADER => match unsafe { *at.cast::<u32>() } {
            UNREADABLE_INDEX => None,
            index => Some(index as usize),
        },
        // The block tag's bit 2 is the block's address.
        t => installed()
            .and_then(|i| i.tags.get(if t & 3 == BLOCK { BLOCK } else { t }).copied())
            .filter(|&k| k != u8::MAX)
            .map(usize::from),
    }
}

/// Puts `new` (from [`into_raw`]) in place of the value of the key `key` without freeing
/// the old one or touching the key's expiry; false when it could not.
pub type Replace = unsafe fn(key: *mut c_void, new: Raw) -> bool;

/// A kind's state lent by the key that owns it, for a command to read and change: in place
/// in its box or block, or, for a compact state, a copy written back when the borrow ends
/// (packed again, under a new parameter slot when its parameters changed, or moved to its
/// boxed form through `replace` when it no longer fits).
pub struct Held<'a, K: Stored + MaybeCompact + MaybeBlock> {
    inner: Inner<'a, K>,
}

enum Inner<'a, K: Stored + MaybeCompact + MaybeBlock> {
    /// The state in its box.
    Boxed(&'a mut K),
    /// A block's state, around the key's words (never dropped: they stay the key's).
    Block(ManuallyDrop<K>),
    /// A copy of a compact state, and the parameter set it was read with.
    Copy {
        state: K,
        raw: Raw,
        set: Set,
        changed: bool,
        replace: Option<(*mut c_void, Replace)>,
    },
}

/// Borrows the state of kind `K` that `raw` holds; `None` for a value of another kind.
/// `replace` is how to give the key another value, should a changed compact state no
/// longer fit its form.
///
/// # Safety
/// `raw` must be a live value of this type, stay alive for `'a` and not be used otherwise
/// while the borrow lasts; `replace`'s key must be the one holding `raw`, open for writing.
#[inline(always)]
pub unsafe fn borrow<'a, K: Stored + MaybeCompact + MaybeBlock>(
    raw: Raw,
    replace: Option<(*mut c_void, Replace)>,
) -> Option<Held<'a, K>> {
    let tag = raw.addr() & TAGS;
    let at = raw.map_addr(|a| a & !TAGS);
    let inner = match K::PLACE {
        Place::Compact { wide } => {
            if tag != COMPACT {
                // SAFETY: as the caller promises.
                return unsafe { boxed::<K>(raw, wide_place(wide)) }.map(|state| Held {
                    inner: Inner::Boxed(state),
                });
            }
            // SAFETY: tagged COMPACT: a live `Packed`.
            let p = unsafe { &*at.cast::<Packed>() };
            let set = intern::table().get(p.head as u16);
            if set.kind != K::INDEX {
                return None;
            }
            Inner::Copy {
                state: K::unpack(set.params(), Instant::from_ms(p.head >> SLOT_BITS), p.tail)?,
                raw,
                set,
                changed: false,
                replace,
            }
        }
        Place::Block => {
            if tag & 3 != BLOCK {
                return None;
            }
            let block = raw.map_addr(|a| a & !BLOCK).cast::<u32>();
            // SAFETY: a block from `into_raw`, whose first word gives its length; the words
            // stay the key's (ManuallyDrop: never freed here).
            let words = unsafe {
                let len = K::words_len(*block);
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(block, len))
            };
            Inner::Block(ManuallyDrop::new(K::from_words(words)?))
        }
        // SAFETY: as the caller promises.
        place => Inner::Boxed(unsafe { boxed::<K>(raw, place) }?),
    };
    Some(Held { inner })
}

fn wide_place(wide: Wide) -> Place {
    match wide {
        Wide::Own(tag) => Place::Own(tag),
        Wide::Header => Place::Header,
    }
}

/// The state in a box of kind `K` (its own tag, or a header naming it), in place.
///
/// # Safety
/// As for [`borrow`].
#[inline(always)]
unsafe fn boxed<'a, K: Stored>(raw: Raw, place: Place) -> Option<&'a mut K> {
    let tag = raw.addr() & TAGS;
    let at = raw.map_addr(|a| a & !TAGS);
    match place {
        // SAFETY: a live `Box<K>` from `into_raw`, lent for 'a.
        Place::Own(own) if tag == own => Some(unsafe { &mut *at.cast::<K>() }),
        Place::Header if tag == HEADER => {
            let headed = at.cast::<Headed<K>>();
            // SAFETY: a live `Headed` box; its index says whose, and then it is a `K`'s.
            unsafe {
                if (*headed).index != u32::from(K::INDEX) {
                    return None;
                }
                Some(&mut (*headed).state)
            }
        }
        _ => None,
    }
}

impl<K: Stored + MaybeCompact + MaybeBlock> Held<'_, K> {
    /// Says that nothing was changed through `DerefMut` after all (a refused call): a copy
    /// is not written back.
    #[inline(always)]
    pub fn unchanged(&mut self) {
        if let Inner::Copy { changed, .. } = &mut self.inner {
            *changed = false;
        }
    }
}

impl<K: Stored + MaybeCompact + MaybeBlock> Deref for Held<'_, K> {
    type Target = K;

    #[inline(always)]
    fn deref(&self) -> &K {
        match &self.inner {
            Inner::Boxed(state) => state,
            Inner::Block(state) => state,
            Inner::Copy { state, .. } => state,
        }
    }
}

impl<K: Stored + MaybeCompact + MaybeBlock> DerefMut for Held<'_, K> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut K {
        match &mut self.inner {
            Inner::Boxed(state) => state,
            Inner::Block(state) => state,
            Inner::Copy { state, changed, .. } => {
                *changed = true;
                state
            }
        }
    }
}

impl<K: Stored + MaybeCompact + MaybeBlock> Drop for Held<'_, K> {
    #[inline]
    fn drop(&mut self) {
        if let Inner::Copy {
            state,
            raw,
            set,
            changed: true,
            replace,
        } = &self.inner
        {
            if !repack_in_place(state, *raw, set) {
                write_back(state, *raw, *replace);
            }
        }
    }
}

/// Writes a changed compact state back to the key when its parameters are the same (a call
/// on a live key: the hot path); false, changing nothing, for any other case.
#[inline(always)]
fn repack_in_place<K: Stored + MaybeCompact>(state: &K, raw: Raw, set: &Set) -> bool {
    let Some((params, latest, tail)) = state.pack() else {
        return false;
    };
    let packed = raw.map_addr(|a| a & !TAGS).cast::<Packed>();
    // SAFETY: the key's `Packed` (tagged COMPACT), lent to the borrow that calls this.
    let slot = unsafe { (*packed).head } as u16;
    // The key's slot holds the set the state was read with (the key is held open).
    if Set::of(K::INDEX, params) != *set {
        return false;
    }
    // SAFETY: as above.
    unsafe {
        *packed = Packed {
            head: latest.ms() << SLOT_BITS | u64::from(slot),
            tail,
        }
    };
    true
}

/// Writes a changed compact state back to the key: under a new parameter slot when its
/// parameters changed, else (no slot, or a time out of the compact range) in its boxed
/// form, given to the key through `replace`.
#[cold]
#[inline(never)]
fn write_back<K: Stored + MaybeCompact + MaybeBlock>(
    state: &K,
    raw: Raw,
    replace: Option<(*mut c_void, Replace)>,
) {
    let packed = raw.map_addr(|a| a & !TAGS).cast::<Packed>();
    // SAFETY: the key's `Packed`, lent to the borrow that calls this.
    let slot = unsafe { (*packed).head } as u16;
    if let Some((params, latest, tail)) = state.pack() {
        let set = Set::of(K::INDEX, params);
        // New parameters: a slot for them, then the old one given back.
        if let Some(new_slot) = intern::table().intern(set, suffix::<K>) {
            intern::table().release(slot);
            // SAFETY: as above.
            unsafe {
                *packed = Packed {
                    head: latest.ms() << SLOT_BITS | u64::from(new_slot),
                    tail,
                }
            };
            return;
        }
    }
    let Some((key, replace)) = replace else {
        return;
    };
    let new = into_raw::<K>(state.clone());
    // SAFETY: `key` holds `raw` (see `borrow`), which is ours to free once replaced; `new`
    // is ours to free if it was not taken.
    unsafe {
        if replace(key, new) {
            free_typed::<K>(raw);
        } else {
            free_typed::<K>(new);
        }
    }
}

/// Frees a value of kind `K` (any of its forms).
///
/// # Safety
/// `raw` must be a value of kind `K` from [`into_raw`], not used afterwards.
pub(super) unsafe fn free_typed<K: Stored + MaybeCompact + MaybeBlock>(raw: Raw) {
    let tag = raw.addr() & TAGS;
    let at = raw.map_addr(|a| a & !TAGS);
    // SAFETY: (every arm) the tag says which allocation `into_raw` made, now ours.
    unsafe {
        match (K::PLACE, tag) {
            (Place::Compact { .. }, COMPACT) => {
                let packed = Box::from_raw(at.cast::<Packed>());
                intern::table().release(packed.head as u16);
            }
            (Place::Block, _) => {
                let block = raw.map_addr(|a| a & !BLOCK).cast::<u32>();
                let len = K::words_len(*block);
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    block, len,
                )));
            }
            (_, HEADER) => drop(Box::from_raw(at.cast::<Headed<K>>())),
            _ => drop(Box::from_raw(at.cast::<K>())),
        }
    }
}

/// A copy of a value of kind `K`, for a new key (`COPY`): a compact state shares its
/// parameters' slot (no hashing).
///
/// # Safety
/// `raw` must be a live value of kind `K`.
pub(super) unsafe fn copy_typed<K: Stored + MaybeCompact + MaybeBlock>(raw: Raw) -> Raw {
    if raw.addr() & TAGS == COMPACT {
        // SAFETY: tagged COMPACT: a live `Packed`.
        let Packed { head, tail } = unsafe { &*raw.map_addr(|a| a & !TAGS).cast::<Packed>() };
        let (head, tail) = (*head, *tail);
        if intern::table().retain(head as u16) {
            if let Some(copy) = boxed_compact(head, tail) {
                return copy;
            }
        }
    }
    // SAFETY: as the caller promises; read only.
    match unsafe { borrow::<K>(raw, None) } {
        Some(held) => into_raw::<K>((*held).clone()),
        None => std::ptr::null_mut(),
    }
}

/// Calls `f` with the encoding of a value of kind `K`: on the stack when it fits in 64
/// bytes; a compact state straight from its words and its parameters' stored suffix,
/// without rebuilding the state.
///
/// # Safety
/// `raw` must be a live value of kind `K`.
pub(super) unsafe fn encode_typed<K: Stored + MaybeCompact + MaybeBlock>(
    raw: Raw,
    f: &mut dyn FnMut(&[u8]),
) {
    if raw.addr() & TAGS == COMPACT {
        // SAFETY: tagged COMPACT: a live `Packed`, the key's.
        let p = unsafe { &*raw.map_addr(|a| a & !TAGS).cast::<Packed>() };
        let (kind, suffix) = intern::table().suffix(p.head as u16);
        if kind == K::INDEX {
            let mut out = SmallOut::new();
            Sink::put(&mut out, &[K::VERSION, K::CODE]);
            K::encode_state(Instant::from_ms(p.head >> SLOT_BITS), p.tail, &mut out);
            out.put_padded(&suffix.padded(), suffix.byte_len());
            if !out.overflowed {
                return f(out.as_bytes());
            }
        }
    }
    // SAFETY: as the caller promises; read only.
    let Some(held) = (unsafe { borrow::<K>(raw, None) }) else {
        return;
    };
    let mut out = SmallOut::new();
    Sink::put(&mut out, &[K::VERSION, K::CODE]);
    held.encode(&mut out);
    if !out.overflowed {
        return f(out.as_bytes());
    }
    let mut bytes = Vec::with_capacity(256);
    bytes.extend_from_slice(&[K::VERSION, K::CODE]);
    held.encode(&mut bytes);
    f(&bytes);
}

/// `MEMORY USAGE` of a value of kind `K`: Redis's object around it, and what its form
/// allocated, each allocation rounded to its size class.
///
/// # Safety
/// `raw` must be a live value of kind `K`.
pub(super) unsafe fn mem_usage_typed<K: Stored + MaybeCompact + MaybeBlock>(raw: Raw) -> usize {
    let tag = raw.addr() & TAGS;
    if tag == COMPACT && matches!(K::PLACE, Place::Compact { .. }) {
        return super::object_overhead() + class_ceil(std::mem::size_of::<Packed>());
    }
    // SAFETY: as the caller promises; read only.
    let Some(held) = (unsafe { borrow::<K>(raw, None) }) else {
        return 0;
    };
    let own = match (K::PLACE, tag) {
        (Place::Block, _) => 0,
        (_, HEADER) => class_ceil(std::mem::size_of::<Headed<K>>()),
        _ => class_ceil(std::mem::size_of::<K>()),
    };
    // A block's state is its words: the heap size is the block.
    let heap = match K::PLACE {
        Place::Block => class_ceil(held.heap_size()),
        _ => held.heap_size(),
    };
    super::object_overhead() + own + heap
}

/// Heap allocations a value of kind `K` holds: what freeing it costs.
///
/// # Safety
/// `raw` must be a live value of kind `K`.
pub(super) unsafe fn allocations_typed<K: Stored + MaybeCompact + MaybeBlock>(raw: Raw) -> usize {
    if matches!(K::PLACE, Place::Compact { .. } | Place::Block) {
        return 1;
    }
    // SAFETY: as the caller promises; read only.
    unsafe { borrow::<K>(raw, None) }.map_or(1, |held| 1 + held.allocations())
}

/// A value of kind `K` from an encoding of `version` (`bytes` after its version and kind
/// bytes): straight into the compact form when its parameters are those of the set
/// interned last (a load of keys sharing them: no parameters read, checked or looked up),
/// else through the kind's one validating constructor.
pub(super) fn decode_typed<K: Stored + MaybeCompact + MaybeBlock>(
    version: u8,
    bytes: &[u8],
) -> Result<Raw, Malformed> {
    if version == K::VERSION {
        if let Some(raw) = decode_compact::<K>(bytes) {
            return Ok(raw);
        }
    }
    let mut r = Reader::new(bytes);
    let state = K::decode(version, &mut r)?;
    r.finish()?;
    let raw = into_raw::<K>(state);
    if raw.is_null() {
        return Err(Malformed("could not be stored"));
    }
    Ok(raw)
}

/// The compact form of a compact kind's encoding whose parameters are those of the set
/// interned last, `None` otherwise (the general decoder then decides, and refuses what is
/// damaged). The same value as the general decoder's: the suffix identifies the set, and
/// the state is checked by the kind as its decoder checks it.
pub(super) fn decode_compact<K: Stored + MaybeCompact>(bytes: &[u8]) -> Option<Raw> {
    let table = intern::table();
    let slot = table.last()?;
    let (kind, suffix) = table.suffix(slot);
    if kind != K::INDEX {
        return None;
    }
    let mut r = Reader::new(bytes);
    let (latest, tail) = K::decode_state(&mut r)?;
    if !suffix.is(r.rest()) || !table.retain(slot) {
        return None;
    }
    // Referenced: the slot keeps its set now; it must still be the one checked.
    if table.suffix(slot) != (kind, suffix) {
        table.release(slot);
        return None;
    }
    boxed_compact(latest.ms() << SLOT_BITS | u64::from(slot), tail)
}
