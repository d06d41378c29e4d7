//! What a key's module value is: one mechanism for every kind, whichever storage form its
//! kind opts into ([`Form`]), and the only place that turns states into the thin pointers
//! Redis keeps.
//!
//! A value is one thin pointer, its low three bits saying where the state is:
//! - `COMPACT` (7): a 16-byte [`Packed`] (`latest << 16 | slot`, a tail), the parameters in
//!   slot `slot` of the interned table (`intern`), which also says the kind (its registry
//!   index). A [`Compact`] kind's state goes there when it fits and a slot is free.
//! - `BLOCK` (1: bit 0 set, bit 1 clear): a [`Block`] kind's block of 32-bit words (4-byte
//!   aligned, so bit 1 is clear and bit 2 is the address's), its length in its first word.
//!   One kind may take this form.
//! - an own tag (0, 2, 4 or 6): a box of one kind's state, 8-byte aligned. The registry
//!   gives them to the kinds in order: the boxed kinds first, then the compact kinds' boxed
//!   (wide) form. Kinds past those take:
//! - `HEADER` (3): a box starting with the kind's registry index ([`Headed`]), then the
//!   state. Values a load could not read ([`Unreadable`]) are there too, under an index no
//!   kind has.
//!
//! The tags are computed at compile time from the registry's list ([`places`]); nothing
//! here names a kind. A command borrows its kind's state from a key typed ([`borrow`]:
//! in place for a box or a block, a copy written back for a compact state), and the type's
//! callbacks (save, copy, free, memory) reach any value through the [`Ops`] the registry
//! installs at load ([`install`]).

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use super::intern::{self, Set};
use crate::core::chunks::class_ceil;
use crate::core::codec::{Malformed, Reader, Sink, SmallOut};
use crate::core::kind::{Form, Kind, Params2};

/// A key's value as Redis holds it.
pub type Raw = *mut c_void;

const TAGS: usize = 7;
const COMPACT: usize = 7;
const BLOCK: usize = 1;
const HEADER: usize = 3;
/// The own tags, in the order the registry hands them out.
const OWN: [usize; 4] = [0, 2, 4, 6];
/// The registry index of values a load could not read.
const UNREADABLE_INDEX: u32 = u32::MAX;

/// What Redis allocates around every module value: its object (16 bytes) and the module
/// value (16: the type and the pointer).
pub const VALUE_OBJECT: usize = 32;

/// Where a kind's state is kept: what [`places`] computed for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// A box of its own, under an own tag.
    Own(usize),
    /// A box with its index in front.
    Header,
    /// A block of words.
    Block,
    /// The compact form, and where the state goes when it does not fit.
    Compact { wide: Wide },
}

/// Where a compact kind's state goes when it does not fit the compact form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wide {
    Own(usize),
    Header,
}

/// A kind as the registry lists it: its place in the list and its storage.
pub trait Stored: Kind {
    /// Its index in the registry.
    const INDEX: u8;
    /// Where its state is kept.
    const PLACE: Place;
}

/// Each kind's place, from the form and the size of each of the registry's kinds in
/// order. The own tags go first to the kinds whose box a header would move to a larger
/// size class (boxed kinds first, then compact kinds' boxed form), in the list's order,
/// then to the others; the rest go behind a header, which costs them nothing. At most one
/// kind may take the block form (a second is refused at compile time: the mechanism would
/// need a second block tag).
pub const fn places<const N: usize>(kinds: [(Form, usize); N]) -> [Place; N] {
    let mut out = [Place::Header; N];
    let mut own = 0;
    let mut blocks = 0;
    let mut i = 0;
    while i < N {
        match kinds[i].0 {
            Form::Boxed => out[i] = Place::Header,
            Form::Block => {
                assert!(blocks == 0, "one kind at most may take the block form");
                blocks += 1;
                out[i] = Place::Block;
            }
            Form::Compact => {
                out[i] = Place::Compact {
                    wide: Wide::Header,
                }
            }
        }
        i += 1;
    }
    // Pass 0: boxed kinds a header would grow; 1: compact kinds'; 2 and 3: the others.
    let mut pass = 0;
    while pass < 4 {
        let mut i = 0;
        while i < N && own < OWN.len() {
            let (form, size) = kinds[i];
            let grows = class_of(size + HEADED) > class_of(size);
            let wanted = match form {
                Form::Boxed => pass == 0 && grows || pass == 2 && !grows,
                Form::Compact => pass == 1 && grows || pass == 3 && !grows,
                Form::Block => false,
            };
            if wanted {
                out[i] = match form {
                    Form::Boxed => Place::Own(OWN[own]),
                    _ => Place::Compact {
                        wide: Wide::Own(OWN[own]),
                    },
                };
                own += 1;
            }
            i += 1;
        }
        pass += 1;
    }
    out
}

/// What a header adds to a box: its index, padded to the state's alignment (8 for every
/// boxed kind).
const HEADED: usize = 8;

/// The allocator's size class for `bytes` (as `core::chunks::class_ceil`), at compile time.
const fn class_of(bytes: usize) -> usize {
    if bytes <= 8 {
        return 8;
    }
    if bytes <= 128 {
        return bytes.next_multiple_of(16);
    }
    let k = usize::BITS - 1 - (bytes - 1).leading_zeros();
    bytes.next_multiple_of(1 << (k - 2))
}

/// The registry index of each tag's kind (`u8::MAX`: the tag is none kind's own).
pub const fn tag_kinds<const N: usize>(places: [Place; N]) -> [u8; 8] {
    let mut out = [u8::MAX; 8];
    let mut i = 0;
    while i < N {
        match places[i] {
            Place::Own(tag)
            | Place::Compact {
                wide: Wide::Own(tag),
            } => out[tag] = i as u8,
            Place::Block => out[BLOCK] = i as u8,
            _ => {}
        }
        i += 1;
    }
    out
}

/// What the type's callbacks do to one kind's values, made by [`ops`] for each kind and
/// installed by the registry at load.
pub struct Ops {
    /// The command that makes keys of the kind (named in errors).
    pub command: &'static str,
    /// Its byte in the encoding.
    pub code: u8,
    free: unsafe fn(Raw),
    copy: unsafe fn(Raw) -> Raw,
    encode: unsafe fn(Raw, &mut dyn FnMut(&[u8])),
    mem_usage: unsafe fn(Raw) -> usize,
    allocations: unsafe fn(Raw) -> usize,
    decode: fn(u8, &[u8]) -> Result<Raw, Malformed>,
}

/// The operations on a kind's values.
pub const fn ops<K: Stored + MaybeCompact + MaybeBlock>() -> Ops {
    Ops {
        command: K::COMMAND,
        code: K::CODE,
        free: free_typed::<K>,
        copy: copy_typed::<K>,
        encode: encode_typed::<K>,
        mem_usage: mem_usage_typed::<K>,
        allocations: allocations_typed::<K>,
        decode: decode_typed::<K>,
    }
}

/// The registry's operations and the kinds of the tags, installed at load.
struct Installed {
    ops: &'static [Ops],
    tags: [u8; 8],
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Installs the registry: each kind's operations by index, and the kinds of the tags.
pub fn install(ops: &'static [Ops], tags: [u8; 8]) {
    let _ = INSTALLED.set(Installed { ops, tags });
}

fn installed() -> Option<&'static Installed> {
    INSTALLED.get()
}

/// The operations of the kind whose registry index is `index`.
pub fn ops_of(index: usize) -> Option<&'static Ops> {
    installed()?.ops.get(index)
}

/// A compact kind's state: the kind's words and the slot holding its parameters.
#[repr(C)]
struct Packed {
    head: u64,
    tail: u64,
}

/// Bits of [`Packed::head`] below `latest`: the slot.
const SLOT_BITS: u32 = 16;

/// A boxed state behind a header: the kind's registry index, then the state.
#[repr(C)]
struct Headed<S> {
    index: u32,
    state: S,
}

// Every box the tags point at keeps bits 0 to 2 free.
const _: () = assert!(std::mem::align_of::<Packed>() >= 8);

/// The compact form's hooks, for every kind: a kind that is not compact has none (the
/// registry implements this for each kind from its [`Form`]).
pub trait MaybeCompact: Kind {
    fn pack(&self) -> Option<(Params2, u64, u64)> {
        None
    }
    fn unpack(_params: Params2, _latest: u64, _tail: u64) -> Option<Self> {
        None
    }
    fn encode_state(_latest: u64, _tail: u64, _out: &mut SmallOut) {}
    fn encode_params(_params: Params2, _out: &mut SmallOut) {}
    fn decode_state(_r: &mut Reader) -> Option<(u64, u64)> {
        None
    }
}

/// The block form's hooks, for every kind (see [`MaybeCompact`]).
pub trait MaybeBlock: Kind {
    fn into_words(self) -> Option<Box<[u32]>> {
        None
    }
    fn from_words(_words: Box<[u32]>) -> Option<Self> {
        None
    }
    fn words_len(_first: u32) -> usize {
        0
    }
}

/// The hooks of a kind that takes the compact form.
#[macro_export]
macro_rules! compact_hooks {
    ($kind:ty) => {
        impl $crate::rm::storage::MaybeCompact for $kind {
            #[inline(always)]
            fn pack(&self) -> Option<($crate::core::kind::Params2, u64, u64)> {
                $crate::core::kind::Compact::pack(self)
            }
            #[inline(always)]
            fn unpack(p: $crate::core::kind::Params2, latest: u64, tail: u64) -> Option<Self> {
                Some(<$kind as $crate::core::kind::Compact>::unpack(p, latest, tail))
            }
            fn encode_state(latest: u64, tail: u64, out: &mut $crate::core::codec::SmallOut) {
                <$kind as $crate::core::kind::Compact>::encode_state(latest, tail, out)
            }
            fn encode_params(p: $crate::core::kind::Params2, out: &mut $crate::core::codec::SmallOut) {
                <$kind as $crate::core::kind::Compact>::encode_params(p, out)
            }
            fn decode_state(r: &mut $crate::core::codec::Reader) -> Option<(u64, u64)> {
                <$kind as $crate::core::kind::Compact>::decode_state(r)
            }
        }
        impl $crate::rm::storage::MaybeBlock for $kind {}
    };
}

/// The hooks of a kind that takes the block form.
#[macro_export]
macro_rules! block_hooks {
    ($kind:ty) => {
        impl $crate::rm::storage::MaybeBlock for $kind {
            fn into_words(self) -> Option<Box<[u32]>> {
                Some($crate::core::kind::Block::into_words(self))
            }
            fn from_words(words: Box<[u32]>) -> Option<Self> {
                Some(<$kind as $crate::core::kind::Block>::from_words(words))
            }
            fn words_len(first: u32) -> usize {
                <$kind as $crate::core::kind::Block>::words_len(first)
            }
        }
        impl $crate::rm::storage::MaybeCompact for $kind {}
    };
}

/// The hooks of a kind that takes a box.
#[macro_export]
macro_rules! boxed_hooks {
    ($kind:ty) => {
        impl $crate::rm::storage::MaybeCompact for $kind {}
        impl $crate::rm::storage::MaybeBlock for $kind {}
    };
}

// ---------------------------------------------------------------------------------------
// Typed: a kind's own values.

fn tagged<T>(b: Box<T>, tag: usize) -> Raw {
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

fn headed<K: Stored>(state: K) -> Raw {
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
    boxed_compact(latest << SLOT_BITS | u64::from(slot), tail)
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
fn boxed_compact(head: u64, tail: u64) -> Option<Raw> {
    let packed = Box::into_raw(Box::new(Packed { head, tail }));
    if packed.addr() & TAGS != 0 {
        // SAFETY: just made, and used by nothing else.
        drop(unsafe { Box::from_raw(packed) });
        intern::table().release(head as u16);
        return None;
    }
    Some(packed.map_addr(|a| a | COMPACT).cast())
}

/// Whether the value `raw` holds is of kind `K`.
///
/// # Safety
/// `raw` must be a live value of this type (from this module).
#[inline(always)]
pub unsafe fn is<K: Stored>(raw: Raw) -> bool {
    // SAFETY: as the caller promises.
    unsafe { kind_index(raw) == Some(usize::from(K::INDEX)) }
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
            intern::table().get(unsafe { (*at.cast::<Packed>()).head } as u16).kind,
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
    /// A copy of a compact state.
    Copy {
        state: K,
        raw: Raw,
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
                state: K::unpack(set.params(), p.head >> SLOT_BITS, p.tail)?,
                raw,
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
            changed: true,
            replace,
        } = &self.inner
        {
            if !repack_in_place(state, *raw) {
                write_back(state, *raw, *replace);
            }
        }
    }
}

/// Writes a changed compact state back to the key when its parameters are the same (a call
/// on a live key: the hot path); false, changing nothing, for any other case.
#[inline(always)]
fn repack_in_place<K: Stored + MaybeCompact>(state: &K, raw: Raw) -> bool {
    let Some((params, latest, tail)) = state.pack() else {
        return false;
    };
    let packed = raw.map_addr(|a| a & !TAGS).cast::<Packed>();
    // SAFETY: the key's `Packed` (tagged COMPACT), lent to the borrow that calls this.
    let slot = unsafe { (*packed).head } as u16;
    if Set::of(K::INDEX, params) != intern::table().get(slot) {
        return false;
    }
    // SAFETY: as above.
    unsafe {
        *packed = Packed {
            head: latest << SLOT_BITS | u64::from(slot),
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
                    head: latest << SLOT_BITS | u64::from(new_slot),
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
unsafe fn free_typed<K: Stored + MaybeCompact + MaybeBlock>(raw: Raw) {
    let tag = raw.addr() & TAGS;
    let at = raw.map_addr(|a| a & !TAGS);
    // SAFETY (every arm): the tag says which allocation `into_raw` made, now ours.
    unsafe {
        match (K::PLACE, tag) {
            (Place::Compact { .. }, COMPACT) => {
                let packed = Box::from_raw(at.cast::<Packed>());
                intern::table().release(packed.head as u16);
            }
            (Place::Block, _) => {
                let block = raw.map_addr(|a| a & !BLOCK).cast::<u32>();
                let len = K::words_len(*block);
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(block, len)));
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
unsafe fn copy_typed<K: Stored + MaybeCompact + MaybeBlock>(raw: Raw) -> Raw {
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
unsafe fn encode_typed<K: Stored + MaybeCompact + MaybeBlock>(
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
            K::encode_state(p.head >> SLOT_BITS, p.tail, &mut out);
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
unsafe fn mem_usage_typed<K: Stored + MaybeCompact + MaybeBlock>(raw: Raw) -> usize {
    let tag = raw.addr() & TAGS;
    if tag == COMPACT && matches!(K::PLACE, Place::Compact { .. }) {
        return VALUE_OBJECT + class_ceil(std::mem::size_of::<Packed>());
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
    VALUE_OBJECT + own + heap
}

/// Heap allocations a value of kind `K` holds: what freeing it costs.
///
/// # Safety
/// `raw` must be a live value of kind `K`.
unsafe fn allocations_typed<K: Stored + MaybeCompact + MaybeBlock>(raw: Raw) -> usize {
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
fn decode_typed<K: Stored + MaybeCompact + MaybeBlock>(
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
fn decode_compact<K: Stored + MaybeCompact>(bytes: &[u8]) -> Option<Raw> {
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
    boxed_compact(latest << SLOT_BITS | u64::from(slot), tail)
}

// ---------------------------------------------------------------------------------------
// Any value: through the registry's operations.

/// Decodes any supported encoding into the value a key holds, through its kind's
/// constructor (the kind by its byte; the version checked by the kind).
pub fn decode(bytes: &[u8]) -> Result<Raw, Malformed> {
    let (&[version, code], rest) = bytes
        .split_first_chunk::<2>()
        .ok_or(Malformed("truncated"))?;
    if !(1..=3).contains(&version) {
        return Err(Malformed("unknown encoding version"));
    }
    let ops = installed().and_then(|i| i.ops.iter().find(|o| o.code == code));
    match ops {
        Some(ops) => (ops.decode)(version, rest),
        None if version == 1 => Err(Malformed("unknown limiter kind")),
        None => Err(Malformed("no such version for this kind")),
    }
}

/// The operations of the kind `raw` holds (`None`: a value a load could not read).
///
/// # Safety
/// `raw` must be a live value of this type.
unsafe fn ops_for(raw: Raw) -> Option<&'static Ops> {
    // SAFETY: as the caller promises.
    unsafe { kind_index(raw) }.and_then(ops_of)
}

/// Frees any value (the type's `free` callback, which may run in Redis's lazy-free thread
/// or the module's own: it only gives memory back, and a compact state's slot).
///
/// # Safety
/// `raw` must be a value of this type, not used afterwards.
pub unsafe fn free(raw: Raw) {
    // SAFETY: as the caller promises.
    unsafe {
        if free_unreadable(raw) {
            return;
        }
        if let Some(ops) = ops_for(raw) {
            (ops.free)(raw);
        }
    }
}

/// A copy of any value, for a new key (`COPY`); null when it cannot be made.
///
/// # Safety
/// `raw` must be a live value of this type.
pub unsafe fn copy(raw: Raw) -> Raw {
    // SAFETY: as the caller promises.
    unsafe {
        if let Some(u) = unreadable(raw) {
            return unreadable_into_raw(&u.bytes, u.reason);
        }
        ops_for(raw).map_or(std::ptr::null_mut(), |ops| (ops.copy)(raw))
    }
}

/// Calls `f` with the encoding of any value (RDB save, AOF rewrite, digest): a value a load
/// could not read is its bytes as they were.
///
/// # Safety
/// `raw` must be a live value of this type.
pub unsafe fn with_encoding(raw: Raw, f: &mut dyn FnMut(&[u8])) {
    // SAFETY: as the caller promises.
    unsafe {
        if let Some(u) = unreadable(raw) {
            return f(&u.bytes);
        }
        if let Some(ops) = ops_for(raw) {
            (ops.encode)(raw, f);
        }
    }
}

/// `MEMORY USAGE` of any value.
///
/// # Safety
/// `raw` must be a live value of this type.
pub unsafe fn mem_usage(raw: Raw) -> usize {
    // SAFETY: as the caller promises.
    unsafe {
        if let Some(u) = unreadable(raw) {
            return VALUE_OBJECT
                + class_ceil(std::mem::size_of::<Headed<Unreadable>>())
                + class_ceil(u.bytes.len());
        }
        ops_for(raw).map_or(0, |ops| (ops.mem_usage)(raw))
    }
}

/// Heap allocations any value holds, what freeing it costs (Redis's `free_effort`).
///
/// # Safety
/// `raw` must be a live value of this type.
pub unsafe fn allocations(raw: Raw) -> usize {
    // SAFETY: as the caller promises.
    unsafe {
        if unreadable(raw).is_some() {
            return 2;
        }
        ops_for(raw).map_or(1, |ops| (ops.allocations)(raw))
    }
}

// ---------------------------------------------------------------------------------------
// Values a load could not read.

/// A value a load could not read (an RDB or AOF written by another build, or damaged),
/// kept byte for byte instead of failing the whole load: it saves, rewrites, copies and
/// digests as those bytes, and every command on its key answers an error naming `reason`
/// until the key is deleted or expires (see README, "Values a server cannot read"). Kept
/// behind a header whose index no kind has.
pub struct Unreadable {
    pub reason: &'static str,
    pub bytes: Box<[u8]>,
}

/// Unreadable values held now, for `INFO ratelimit`.
pub static UNREADABLE: AtomicU64 = AtomicU64::new(0);

/// The pointer a key holds for `bytes` that could not be read, and why.
pub fn unreadable_into_raw(bytes: &[u8], reason: &'static str) -> Raw {
    UNREADABLE.fetch_add(1, Relaxed);
    tagged(
        Box::new(Headed {
            index: UNREADABLE_INDEX,
            state: Unreadable {
                reason,
                bytes: bytes.into(),
            },
        }),
        HEADER,
    )
}

/// The unreadable value behind `raw`, if that is what it is.
///
/// # Safety
/// `raw` must be null or a live value of this type, alive for `'a`.
#[inline(always)]
pub unsafe fn unreadable<'a>(raw: Raw) -> Option<&'a Unreadable> {
    if raw.is_null() || raw.addr() & TAGS != HEADER {
        return None;
    }
    let headed = raw.map_addr(|a| a & !TAGS).cast::<Headed<Unreadable>>();
    // SAFETY: a live `Headed` box; its index says whether it holds an `Unreadable`.
    unsafe {
        if (*headed).index != UNREADABLE_INDEX {
            return None;
        }
        Some(&(*headed).state)
    }
}

/// Frees an unreadable value; false (nothing done) for any other.
///
/// # Safety
/// As for [`free`].
unsafe fn free_unreadable(raw: Raw) -> bool {
    // SAFETY: as the caller promises.
    if unsafe { unreadable(raw) }.is_none() {
        return false;
    }
    // SAFETY: a `Headed<Unreadable>` from `unreadable_into_raw`, now ours.
    drop(unsafe { Box::from_raw(raw.map_addr(|a| a & !TAGS).cast::<Headed<Unreadable>>()) });
    UNREADABLE.fetch_sub(1, Relaxed);
    true
}

/// For tests: the encodings of `state` through every form a key gives it (its own form, a
/// copy of that, and the value a load of its encoding makes, through the general decoder),
/// each freed once read. The registry must be installed.
#[cfg(test)]
pub fn encodings_through_keys<K: Stored + MaybeCompact + MaybeBlock>(
    state: &K,
    bytes: &[u8],
) -> Result<Vec<Vec<u8>>, Malformed> {
    let raw = into_raw::<K>(state.clone());
    // SAFETY: `raw` is a live value of kind K, from `into_raw`.
    let copy = unsafe { copy(raw) };
    let loaded = decode(bytes);
    let mut out = Vec::new();
    for r in [Some(raw), Some(copy), loaded.as_ref().ok().copied()]
        .into_iter()
        .flatten()
    {
        // SAFETY: each a live value made above, read, then freed once.
        unsafe {
            with_encoding(r, &mut |b| out.push(b.to_vec()));
            free(r);
        }
    }
    loaded.map(|_| out)
}
