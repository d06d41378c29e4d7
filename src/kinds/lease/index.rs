//! Storage for a key's many small items (a semaphore's leases) that grows and shrinks
//! without moving or rehashing them all in one call: the module's rule that no single call
//! may stall the server, however many items the key holds. (A vector of 100,000 leases that
//! grows by a quarter copies 2 MB into fresh pages: a millisecond and more in one call.)
//!
//! - [`Slab`]: items addressed by a `u32`, the first [`PAGE`] in a vector that grows as
//!   usual (read with one indirection, like a plain vector: a small key pays nothing), the
//!   rest in pages of [`PAGE`] allocated whole, so growing never moves what is stored.
//! - [`Index`]: a hash index from an item's hash to its address, open addressing with
//!   linear probing. Up to [`SPLIT`] entries it is one table; beyond, [`SHARDS`] tables
//!   picked by the hash's top bits, each growing and shrinking on its own, so a resize
//!   rehashes one shard (a few thousand entries at most), never the whole index. Splitting
//!   (at [`SPLIT`] entries) and merging back (below [`MERGE`]) touch at most that many.

use crate::core::chunks::class_ceil;

/// Items in a page.
pub const PAGE: usize = 1024;

/// Items addressed by a `u32`: the first page as a growing vector, then whole pages.
#[derive(Clone, Debug, Default)]
pub struct Slab<T> {
    first: Vec<T>,
    pages: Vec<Vec<T>>,
}

impl<T> Slab<T> {
    pub const fn new() -> Self {
        Slab {
            first: Vec::new(),
            pages: Vec::new(),
        }
    }

    /// Items stored.
    pub fn len(&self) -> usize {
        self.first.len() + self.pages.iter().map(Vec::len).sum::<usize>()
    }

    #[inline]
    pub fn get(&self, i: u32) -> Option<&T> {
        let i = i as usize;
        match i.checked_sub(PAGE) {
            None => self.first.get(i),
            Some(j) => self.pages.get(j / PAGE)?.get(j % PAGE),
        }
    }

    #[inline]
    pub fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        let i = i as usize;
        match i.checked_sub(PAGE) {
            None => self.first.get_mut(i),
            Some(j) => self.pages.get_mut(j / PAGE)?.get_mut(j % PAGE),
        }
    }

    /// Stores `item` at the next address and returns it.
    pub fn push(&mut self, item: T) -> u32 {
        if self.first.len() < PAGE {
            if self.first.len() == self.first.capacity() {
                // Grows by a quarter (a small key wastes little), up to a page.
                let more = (self.first.len() / 4).clamp(4, PAGE - self.first.len());
                self.first.reserve_exact(more);
            }
            self.first.push(item);
            return (self.first.len() - 1) as u32;
        }
        match self.pages.last_mut() {
            Some(page) if page.len() < PAGE => page.push(item),
            _ => {
                let mut page = Vec::with_capacity(PAGE);
                page.push(item);
                self.pages.push(page);
            }
        }
        (self.len() - 1) as u32
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.first.iter().chain(self.pages.iter().flatten())
    }

    /// Bytes on the heap, each allocation rounded to its size class.
    pub fn heap_size(&self) -> usize {
        let size = |v: &Vec<T>| class_ceil(v.capacity() * std::mem::size_of::<T>());
        size(&self.first)
            + self.pages.iter().map(size).sum::<usize>()
            + class_ceil(self.pages.capacity() * std::mem::size_of::<Vec<T>>())
    }

    /// Items it has room for without allocating.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.first.capacity() + self.pages.iter().map(Vec::capacity).sum::<usize>()
    }

    /// Heap allocations held.
    pub fn allocations(&self) -> usize {
        2 + self.pages.len()
    }
}

/// Entries from which the index is split into shards.
pub const SPLIT: usize = 4096;
/// Entries below which a split index is merged back into one table.
pub const MERGE: usize = 1024;
/// The shards of a split index (picked by the hash's top bits).
pub const SHARDS: usize = 64;
const SHARD_BITS: u32 = SHARDS.trailing_zeros();

/// A hash index of `u32` addresses. It keeps no hashes: the caller gives each entry's hash
/// (`hash_of`) when the index needs it again, and says which entries match when looking up.
#[derive(Clone, Debug, Default)]
pub struct Index {
    /// One table, or [`SHARDS`]; each a power of two of buckets (`address + 1`, 0: empty).
    shards: Vec<Vec<u32>>,
    /// Entries in each shard.
    counts: Vec<usize>,
    len: usize,
}

impl Index {
    pub const fn new() -> Self {
        Index {
            shards: Vec::new(),
            counts: Vec::new(),
            len: 0,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn shard_of(&self, h: u32) -> usize {
        match self.shards.len() {
            SHARDS => (h >> (32 - SHARD_BITS)) as usize,
            _ => 0,
        }
    }

    /// The address whose entry `is` accepts among those of hash `h`.
    pub fn find(&self, h: u32, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        let table = self.shards.get(self.shard_of(h))?;
        let mask = table.len().wrapping_sub(1);
        let mut b = h as usize & mask;
        loop {
            match *table.get(b)? {
                0 => return None,
                e if is(e - 1) => return Some(e - 1),
                _ => b = (b + 1) & mask,
            }
        }
    }

    /// Adds address `a` of hash `h`.
    pub fn insert(&mut self, h: u32, a: u32, hash_of: impl Fn(u32) -> u32) {
        self.len += 1;
        if self.shards.len() == 1 && self.len > SPLIT {
            self.reshard(SHARDS, &hash_of);
        }
        if self.shards.is_empty() {
            self.shards.push(vec![0; 8]);
            self.counts.push(0);
        }
        let i = self.shard_of(h);
        let (Some(table), Some(count)) = (self.shards.get(i), self.counts.get_mut(i)) else {
            return;
        };
        *count += 1;
        if *count * 5 > table.len() * 4 {
            let cap = (table.len() * 2).max(8);
            self.rebuild(i, cap, &hash_of);
        }
        if let Some(table) = self.shards.get_mut(i) {
            put(table, h, a);
        }
    }

    /// Removes address `a` of hash `h`; false when it is not there.
    pub fn remove(&mut self, h: u32, a: u32, hash_of: impl Fn(u32) -> u32) -> bool {
        let i = self.shard_of(h);
        let Some(table) = self.shards.get_mut(i) else {
            return false;
        };
        let mask = table.len().wrapping_sub(1);
        let mut b = h as usize & mask;
        loop {
            match table.get(b).copied() {
                Some(0) | None => return false,
                Some(e) if e == a + 1 => break,
                _ => b = (b + 1) & mask,
            }
        }
        // Backward shift: the entries after `b` that probed past it move back.
        let mut j = b;
        loop {
            j = (j + 1) & mask;
            let e = table.get(j).copied().unwrap_or(0);
            if e == 0 {
                break;
            }
            let home = hash_of(e - 1) as usize & mask;
            // The entry at j stays when its home lies cyclically in (b, j].
            let stays = if b <= j {
                b < home && home <= j
            } else {
                b < home || home <= j
            };
            if !stays {
                if let Some(slot) = table.get_mut(b) {
                    *slot = e;
                }
                b = j;
            }
        }
        if let Some(slot) = table.get_mut(b) {
            *slot = 0;
        }
        self.len -= 1;
        let count = match self.counts.get_mut(i) {
            Some(c) => {
                *c -= 1;
                *c
            }
            None => 0,
        };
        if self.len == 0 {
            *self = Index::new();
        } else if self.shards.len() == SHARDS && self.len < MERGE {
            self.reshard(1, &hash_of);
        } else if let Some(len) = self.shards.get(i).map(Vec::len) {
            if len > 16 && count * 16 < len {
                self.rebuild(i, len / 4, &hash_of);
            }
        }
        true
    }

    /// Rebuilds shard `i` with `cap` buckets (a power of two above its count).
    fn rebuild(&mut self, i: usize, cap: usize, hash_of: &impl Fn(u32) -> u32) {
        let Some(old) = self.shards.get_mut(i) else {
            return;
        };
        let old = std::mem::replace(old, vec![0; cap]);
        if let Some(table) = self.shards.get_mut(i) {
            for e in old.into_iter().filter(|&e| e != 0) {
                put(table, hash_of(e - 1), e - 1);
            }
        }
    }

    /// Spreads every entry over `n` shards (1 or [`SHARDS`]), each sized for its count.
    fn reshard(&mut self, n: usize, hash_of: &impl Fn(u32) -> u32) {
        let entries: Vec<u32> = self
            .shards
            .iter()
            .flatten()
            .filter(|&&e| e != 0)
            .map(|&e| e - 1)
            .collect();
        let mut index = Index {
            shards: Vec::with_capacity(n),
            counts: vec![0; n],
            len: self.len,
        };
        index.shards.resize(n, Vec::new());
        for &a in &entries {
            let i = index.shard_of(hash_of(a));
            if let Some(c) = index.counts.get_mut(i) {
                *c += 1;
            }
        }
        for (table, &count) in index.shards.iter_mut().zip(&index.counts) {
            *table = vec![0; (count * 2).next_power_of_two().max(8)];
        }
        for a in entries {
            let h = hash_of(a);
            let i = index.shard_of(h);
            if let Some(table) = index.shards.get_mut(i) {
                put(table, h, a);
            }
        }
        *self = index;
    }

    /// Bytes on the heap, each allocation rounded to its size class.
    pub fn heap_size(&self) -> usize {
        let tables: usize = self
            .shards
            .iter()
            .map(|t| class_ceil(t.capacity() * 4))
            .sum();
        tables
            + class_ceil(self.shards.capacity() * std::mem::size_of::<Vec<u32>>())
            + class_ceil(self.counts.capacity() * std::mem::size_of::<usize>())
    }

    /// Heap allocations held.
    pub fn allocations(&self) -> usize {
        self.shards.len() + 2
    }
}

/// Puts address `a` of hash `h` in the first empty bucket from its home.
fn put(table: &mut [u32], h: u32, a: u32) {
    let mask = table.len().wrapping_sub(1);
    let mut b = h as usize & mask;
    while let Some(e) = table.get_mut(b) {
        if *e == 0 {
            *e = a + 1;
            return;
        }
        b = (b + 1) & mask;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn hash(a: u32) -> u32 {
        a.wrapping_mul(0x9e37_79b9).rotate_left(7)
    }

    proptest! {
        /// The index answers as a map, through splits, merges and resizes.
        #[test]
        fn matches_a_map(ops in prop::collection::vec((any::<bool>(), 0u32..9000), 1..6000)) {
            let mut index = Index::new();
            let mut model: HashMap<u32, ()> = HashMap::new();
            for (add, a) in ops {
                if add {
                    if model.insert(a, ()).is_none() {
                        index.insert(hash(a), a, hash);
                    }
                } else {
                    prop_assert_eq!(index.remove(hash(a), a, hash), model.remove(&a).is_some());
                }
                prop_assert_eq!(index.len(), model.len());
            }
            for a in 0..9000 {
                let found = index.find(hash(a), |x| x == a);
                prop_assert_eq!(found.is_some(), model.contains_key(&a));
            }
        }
    }

    #[test]
    fn pages_never_move_and_address_everything() {
        let mut s: Slab<u64> = Slab::new();
        for i in 0..3 * PAGE as u64 + 5 {
            assert_eq!(s.push(i), i as u32);
        }
        assert_eq!(s.len(), 3 * PAGE + 5);
        assert_eq!(s.get(PAGE as u32 + 7), Some(&(PAGE as u64 + 7)));
        assert_eq!(s.get(7), Some(&7));
        assert_eq!(s.get(4 * PAGE as u32), None);
        assert_eq!(s.iter().count(), 3 * PAGE + 5);
        assert!(s.first.capacity() <= PAGE && s.pages.iter().all(|p| p.capacity() == PAGE));
    }

    #[test]
    fn splits_and_merges_without_losing_an_entry() {
        let mut index = Index::new();
        for a in 0..20_000 {
            index.insert(hash(a), a, hash);
        }
        assert_eq!(index.shards.len(), SHARDS);
        assert!(
            index.shards.iter().all(|t| t.len() <= 4096),
            "shards stay small"
        );
        for a in 0..19_500 {
            assert!(index.remove(hash(a), a, hash));
        }
        assert_eq!(index.shards.len(), 1);
        for a in 19_500..20_000 {
            assert_eq!(index.find(hash(a), |x| x == a), Some(a));
        }
    }
}
