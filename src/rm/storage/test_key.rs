//! For tests: a value's forms, read and changed as a key would, and freed once.

use super::typed::{decode_compact, headed};
use super::*;

/// For tests: the encodings of `state` through every form a key gives it (its own form, a
/// copy of that, and the value a load of its encoding makes, through the general decoder),
/// each freed once read. The registry must be installed.
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

/// For tests: which form a key's value takes, by its tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A compact state: 16 bytes, its parameters interned.
    Compact,
    /// A block of words.
    Block,
    /// A box under this own tag.
    Own(usize),
    /// A box with its kind's index in front.
    Header,
}

impl Shape {
    /// The box a state of kind `K` takes when it is not compact (a block for the block
    /// kind).
    pub fn boxed<K: Stored>() -> Shape {
        match K::PLACE {
            Place::Own(tag)
            | Place::Compact {
                wide: Wide::Own(tag),
            } => Shape::Own(tag),
            Place::Header | Place::Compact { wide: Wide::Header } => Shape::Header,
            Place::Block => Shape::Block,
        }
    }
}

/// For tests: a key holding a value (never null), freed when dropped, so that tests reach
/// what a key does with a value without `unsafe` of their own. The registry must be
/// installed.
pub struct TestKey(Raw);

impl TestKey {
    /// A key holding `state`, in the form its kind takes ([`into_raw`]).
    pub fn new<K: Stored + MaybeCompact + MaybeBlock>(state: K) -> TestKey {
        let raw = into_raw(state);
        assert!(!raw.is_null(), "a state the storage could not take");
        TestKey(raw)
    }

    /// A key holding `state` in its box, even when it would fit the compact form (the form
    /// of a compact state that does not fit, or when the table is full).
    pub fn boxed<K: Stored + MaybeCompact + MaybeBlock>(state: K) -> TestKey {
        match K::PLACE {
            Place::Compact {
                wide: Wide::Own(tag),
            } => TestKey(tagged(Box::new(state), tag)),
            Place::Compact { wide: Wide::Header } => TestKey(headed::<K>(state)),
            _ => TestKey::new(state),
        }
    }

    /// A key holding what the general decoder makes of `bytes` (an RDB load, a `RESTORE`).
    pub fn decode(bytes: &[u8]) -> Result<TestKey, Malformed> {
        decode(bytes).map(TestKey)
    }

    /// A key holding what the compact form's fast path alone makes of `bytes`, an encoding
    /// of kind `K` (version and kind bytes first): `None` when it leaves them to the
    /// general decoder.
    pub fn decode_compact<K: Stored + MaybeCompact>(bytes: &[u8]) -> Option<TestKey> {
        let (&[version, code], rest) = bytes.split_first_chunk::<2>()?;
        if version != K::VERSION || code != K::CODE {
            return None;
        }
        decode_compact::<K>(rest).map(TestKey)
    }

    /// The form the key's value takes.
    pub fn shape(&self) -> Shape {
        match self.0.addr() & TAGS {
            COMPACT => Shape::Compact,
            HEADER => Shape::Header,
            t if t & 3 == BLOCK => Shape::Block,
            t => Shape::Own(t),
        }
    }

    /// The registry index of the kind the key holds.
    pub fn kind_index(&self) -> Option<usize> {
        // SAFETY: the key's live value.
        unsafe { kind_index(self.0) }
    }

    /// The encoding RDB save, AOF rewrite and the digest write.
    pub fn encoding(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // SAFETY: the key's live value.
        unsafe { with_encoding(self.0, &mut |b| out.extend_from_slice(b)) };
        out
    }

    /// `MEMORY USAGE` of the key's value.
    pub fn mem_usage(&self) -> usize {
        // SAFETY: the key's live value.
        unsafe { mem_usage(self.0) }
    }

    /// The heap allocations freeing the key's value costs.
    pub fn allocations(&self) -> usize {
        // SAFETY: the key's live value.
        unsafe { allocations(self.0) }
    }

    /// `f` of the state of kind `K` the key holds, read only; `None` for another kind.
    pub fn read<K: Stored + MaybeCompact + MaybeBlock, R>(
        &self,
        f: impl FnOnce(&K) -> R,
    ) -> Option<R> {
        // SAFETY: the key's live value, lent for the call and used by nothing else meanwhile.
        let held = unsafe { borrow::<K>(self.0, None) }?;
        Some(f(&held))
    }

    /// `f` of the state of kind `K` the key holds, changed as a command changes it (written
    /// back when the borrow ends, moved to another form through the key when it must be);
    /// `None` for another kind.
    pub fn change<K: Stored + MaybeCompact + MaybeBlock, R>(
        &mut self,
        f: impl FnOnce(&mut K) -> R,
    ) -> Option<R> {
        /// Puts `new` in the test key `key` points at.
        ///
        /// # Safety
        /// `key` must point at a live `TestKey` lent to the borrow that calls this.
        unsafe fn replace(key: *mut c_void, new: Raw) -> bool {
            // SAFETY: as the caller promises; the old value is freed by the borrow.
            unsafe { (*key.cast::<TestKey>()).0 = new };
            true
        }
        let raw = self.0;
        let key = std::ptr::from_mut(self).cast::<c_void>();
        // SAFETY: the key's live value, lent for the call and used by nothing else
        // meanwhile; `replace` writes to this key, which `&mut self` holds for the call.
        let mut held = unsafe { borrow::<K>(raw, Some((key, replace as Replace))) }?;
        Some(f(&mut held))
    }

    /// The state of kind `K` the key held, the key freed; `None` for another kind.
    pub fn take<K: Stored + MaybeCompact + MaybeBlock>(self) -> Option<K> {
        self.read(K::clone)
    }
}

impl Drop for TestKey {
    fn drop(&mut self) {
        // SAFETY: the key's value, not used again.
        unsafe { free(self.0) }
    }
}
