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
use std::sync::OnceLock;

use super::intern;
use crate::core::chunks::class_ceil;
use crate::core::codec::{Malformed, Reader, SmallOut};
use crate::core::kind::{Form, InFamily, Kind, Params2};
use crate::core::Instant;

#[cfg(test)]
mod test_key;
mod typed;
mod unreadable;

#[cfg(test)]
pub use test_key::*;
use typed::{
    allocations_typed, copy_typed, decode_typed, encode_typed, free_typed, mem_usage_typed, tagged,
};
pub use typed::{borrow, into_raw, kind_index, Held, Replace};
use unreadable::free_unreadable;
pub use unreadable::{unreadable, unreadable_into_raw, Unreadable, UNREADABLE};

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
/// value (16: the type and the pointer), which Redis 7.0 to 8.0 and Valkey 7.2 and 8.0 leave
/// out of `MEMORY USAGE` for a module's key. Other servers count more or less of a key
/// themselves: [`set_object_overhead`].
pub const VALUE_OBJECT: usize = 32;

static OBJECT_OVERHEAD: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(VALUE_OBJECT);

/// What `MEMORY USAGE` adds to a value's own bytes on this server: the part of a key's cost
/// (its object, module value, name and entry) the server leaves out for a module's key.
pub fn set_object_overhead(bytes: usize) {
    OBJECT_OVERHEAD.store(bytes, std::sync::atomic::Ordering::Relaxed);
}

/// See [`set_object_overhead`].
pub fn object_overhead() -> usize {
    OBJECT_OVERHEAD.load(std::sync::atomic::Ordering::Relaxed)
}

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
            Form::Compact => out[i] = Place::Compact { wide: Wide::Header },
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
    encode: EncodeFn,
    mem_usage: unsafe fn(Raw) -> usize,
    allocations: unsafe fn(Raw) -> usize,
    decode: fn(u8, &[u8]) -> Result<Raw, Malformed>,
}

/// Calls its second argument with the encoding of a value (see `encode_typed`).
type EncodeFn = unsafe fn(Raw, &mut dyn FnMut(&[u8]));

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
    fn pack(&self) -> Option<(Params2, Instant, u64)> {
        None
    }
    fn unpack(_params: Params2, _latest: Instant, _tail: u64) -> Option<Self> {
        None
    }
    fn encode_state(_latest: Instant, _tail: u64, _out: &mut SmallOut) {}
    fn encode_params(_params: Params2, _out: &mut SmallOut) {}
    fn decode_state(_r: &mut Reader) -> Option<(Instant, u64)> {
        None
    }
}

/// Kind `K`'s code and how a family holds its states (packed for a kind of the compact
/// form, in its own encoding for one that says so, else not at all), for the registry's
/// table (`core::kind::install_in_family`).
pub const fn in_family<K: MaybeCompact>() -> (u8, InFamily) {
    let form = match (K::FORM, K::IN_FAMILY_ENCODED) {
        (Form::Compact, _) => InFamily::Packed(check_packed::<K>),
        (_, true) => InFamily::Encoded(check_encoded::<K>),
        _ => InFamily::No,
    };
    (K::CODE, form)
}

/// Whether `bytes` (a version byte, then a state's encoding) are a state of kind `K`, read
/// whole by its validating constructor.
fn check_encoded<K: Kind>(bytes: &[u8]) -> bool {
    let Some((&version, rest)) = bytes.split_first() else {
        return false;
    };
    let mut r = Reader::new(rest);
    K::decode(version, &mut r).is_ok() && r.finish().is_ok()
}

/// Whether a compact state of kind `K` (its parameters and two words) is one the kind
/// could hold: its encoding read back by the kind's validating constructor, and packed
/// again the same.
fn check_packed<K: MaybeCompact>(params: Params2, latest: Instant, tail: u64) -> bool {
    let mut out = SmallOut::new();
    K::encode_state(latest, tail, &mut out);
    K::encode_params(params, &mut out);
    if out.overflowed {
        return false;
    }
    let mut r = Reader::new(out.as_bytes());
    match K::decode(K::VERSION, &mut r) {
        Ok(k) => r.finish().is_ok() && k.pack() == Some((params, latest, tail)),
        Err(_) => false,
    }
}

/// The block form's hooks, for every kind (see [`MaybeCompact`]).
pub trait MaybeBlock: Kind {
    // The block is the key's allocation, handed over whole: a box, not a local.
    #[allow(clippy::boxed_local)]
    fn into_words(self) -> Option<Box<[u32]>> {
        None
    }
    #[allow(clippy::boxed_local)]
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
            fn pack(&self) -> Option<($crate::core::kind::Params2, $crate::core::Instant, u64)> {
                $crate::core::kind::Compact::pack(self)
            }
            #[inline(always)]
            fn unpack(
                p: $crate::core::kind::Params2,
                latest: $crate::core::Instant,
                tail: u64,
            ) -> Option<Self> {
                Some(<$kind as $crate::core::kind::Compact>::unpack(
                    p, latest, tail,
                ))
            }
            fn encode_state(
                latest: $crate::core::Instant,
                tail: u64,
                out: &mut $crate::core::codec::SmallOut,
            ) {
                <$kind as $crate::core::kind::Compact>::encode_state(latest, tail, out)
            }
            fn encode_params(
                p: $crate::core::kind::Params2,
                out: &mut $crate::core::codec::SmallOut,
            ) {
                <$kind as $crate::core::kind::Compact>::encode_params(p, out)
            }
            fn decode_state(
                r: &mut $crate::core::codec::Reader,
            ) -> Option<($crate::core::Instant, u64)> {
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
            return object_overhead()
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
