//! A double-ended queue of `Copy` values held in separately allocated chunks, for logs of up
//! to tens of millions of values where no single operation may take long.
//!
//! What a [`Chunks`] guarantees, whatever it holds:
//! - **No big copy.** Growing never copies more than one small buffer: a log of up to
//!   [`FIRST_MAX_BYTES`] is one buffer, regrown by copying like a `Vec`; past that, values go
//!   into new chunks appended at the back, each about an eighth of what the log already holds
//!   (at least [`MIN_CHUNK_BYTES`], at most [`MAX_CHUNK_BYTES`]), and nothing is ever moved.
//! - **Bounded frees.** Dropping a prefix ([`Chunks::drop_front`]) or a suffix
//!   ([`Chunks::truncate`]) takes O(log n) and frees at most [`FREES_PER_CALL`] chunks; the
//!   chunks left to free wait for the next calls (each mutating call frees some), and count in
//!   [`Chunks::heap_size`] until then.
//! - **Memory close to the data.** Right after any growth step, chunk memory is at most the
//!   values' size plus an eighth (the newest chunk is at most an eighth of the log, rounded
//!   down to an allocator size class), for logs above [`FIRST_MAX_BYTES`]. After trimming,
//!   the values left are copied into one right-sized buffer when they fit in
//!   [`MAX_CHUNK_BYTES`] and the chunks holding them are over twice their size; larger logs
//!   waste at most the unused parts of their first and last chunks.
//! - **Only small allocations**: chunks of at most 12 KiB, and an index of chunks in blocks of
//!   12 KiB, whatever the size of the log; see [`MAX_CHUNK_BYTES`] for why it matters.
//! - Chunk sizes are jemalloc size classes (Redis's allocator), so [`Chunks::heap_size`], an
//!   O(1) sum, is what the allocator really holds for them.
//! - Random access and [`Chunks::partition_point`] are O(log n): a binary search over the
//!   chunks, then within one.
//!
//! Positions: every slot of every chunk has an absolute position (a `u64` that only grows);
//! chunks are contiguous in that space, and the values are the slots `head .. head + len`.
//! Chunks entirely before `head` are dead (waiting to be freed), chunks entirely at or after
//! the end of the values are spare (reused by pushes, or freed).

use std::collections::VecDeque;
use std::fmt;

/// Up to this many bytes, the values are kept in one buffer, regrown by copying.
pub const FIRST_MAX_BYTES: usize = 8192;
/// The smallest chunk appended once the values outgrow the first buffer.
pub const MIN_CHUNK_BYTES: usize = 512;
/// The largest chunk: 1,536 values of 8 bytes; a log of 10 million such values is about 6,500
/// chunks. No larger, because of how jemalloc (Redis's allocator) frees. Freed neighbouring
/// extents of 16 KiB and more are merged at once, and as soon as a merged run reaches 8 MiB it
/// is handed back to the kernel (`madvise`) by the thread that freed the last piece: about a
/// millisecond of the main thread, seen with 64 KiB chunks, and with a one-piece index of
/// 196 KiB that merged with freed chunks around it. A 12 KiB allocation is alone in a slab of
/// its own size, which jemalloc does not merge when freed: its background thread gives the
/// pages back later. (Freeing costs per slab, so this largest such size frees fastest.)
pub const MAX_CHUNK_BYTES: usize = 12288;
/// Chunks freed by one call at most (about 0.1 to 0.3 µs each); the rest are freed by the next
/// calls.
pub const FREES_PER_CALL: usize = 256;

/// One allocation: `slots` are the absolute positions `start .. start + slots.len()`.
#[derive(Clone)]
struct Chunk<T> {
    start: u64,
    slots: Box<[T]>,
}

impl<T> Chunk<T> {
    fn end(&self) -> u64 {
        self.start + self.slots.len() as u64
    }
}

/// Chunk descriptors in one block of the index: 512 of 24 bytes, 12 KiB.
const BLOCK: usize = 512;

/// The chunks, in position order, in blocks of at most [`BLOCK`] descriptors, so that the
/// index of a log of any size is made of small allocations too (see [`MAX_CHUNK_BYTES`]).
/// Every block of `more` holds exactly [`BLOCK`] descriptors but the last, so chunk `k` is
/// found in O(1); `front` is the first block, the only one of a log of up to 512 chunks.
struct Index<T> {
    front: VecDeque<Chunk<T>>,
    /// The other blocks; `None` when there are none. Boxed on purpose: 8 bytes in the log
    /// instead of 32, for the many small logs that never need a second block.
    #[allow(clippy::box_collection)]
    more: Option<Box<VecDeque<VecDeque<Chunk<T>>>>>,
}

impl<T> Index<T> {
    const fn new() -> Self {
        Index {
            front: VecDeque::new(),
            more: None,
        }
    }

    /// Number of chunks.
    fn len(&self) -> usize {
        self.front.len()
            + self.more.as_ref().map_or(0, |m| {
                m.len().saturating_sub(1) * BLOCK + m.back().map_or(0, VecDeque::len)
            })
    }

    fn get(&self, k: usize) -> Option<&Chunk<T>> {
        match k.checked_sub(self.front.len()) {
            None => self.front.get(k),
            Some(r) => self.more.as_ref()?.get(r / BLOCK)?.get(r % BLOCK),
        }
    }

    fn get_mut(&mut self, k: usize) -> Option<&mut Chunk<T>> {
        match k.checked_sub(self.front.len()) {
            None => self.front.get_mut(k),
            Some(r) => self.more.as_mut()?.get_mut(r / BLOCK)?.get_mut(r % BLOCK),
        }
    }

    fn first(&self) -> Option<&Chunk<T>> {
        self.front.front()
    }

    /// The chunk, when there is exactly one (as in most logs).
    fn only(&self) -> Option<&Chunk<T>> {
        match (&self.more, self.front.len()) {
            (None, 1) => self.front.front(),
            _ => None,
        }
    }

    fn last(&self) -> Option<&Chunk<T>> {
        match self.more.as_ref().and_then(|m| m.back()) {
            Some(block) => block.back(),
            None => self.front.back(),
        }
    }

    fn last_mut(&mut self) -> Option<&mut Chunk<T>> {
        match self.more.as_deref_mut().and_then(VecDeque::back_mut) {
            Some(block) => block.back_mut(),
            None => self.front.back_mut(),
        }
    }

    /// The number of leading chunks for which `pred` holds (true for a prefix). O(log n).
    fn partition_point(&self, mut pred: impl FnMut(&Chunk<T>) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(mid) {
                Some(c) if pred(c) => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo
    }

    fn push_back(&mut self, chunk: Chunk<T>) {
        let last = match self.more.as_deref_mut().and_then(VecDeque::back_mut) {
            Some(block) => block,
            None => &mut self.front,
        };
        if last.len() < BLOCK {
            if last.len() == last.capacity() {
                // Exact doubling from 1 up to a block, so that a small log's index is small.
                last.reserve_exact(last.len().clamp(1, BLOCK - last.len()));
            }
            last.push_back(chunk);
            return;
        }
        let more = self.more.get_or_insert_with(Box::default);
        if more.len() == more.capacity() {
            more.reserve_exact(more.len().max(1));
        }
        let mut block = VecDeque::new();
        block.reserve_exact(1);
        block.push_back(chunk);
        more.push_back(block);
    }

    fn pop_front(&mut self) -> Option<Chunk<T>> {
        let chunk = self.front.pop_front()?;
        if self.front.is_empty() {
            if let Some(more) = self.more.as_deref_mut() {
                if let Some(next) = more.pop_front() {
                    self.front = next;
                }
                if more.is_empty() {
                    self.more = None;
                }
            }
        }
        self.shrink();
        Some(chunk)
    }

    fn pop_back(&mut self) -> Option<Chunk<T>> {
        let Some(more) = self.more.as_deref_mut() else {
            let chunk = self.front.pop_back();
            self.shrink();
            return chunk;
        };
        let last = more.back_mut()?;
        let chunk = last.pop_back();
        if last.is_empty() {
            more.pop_back();
        }
        if more.is_empty() {
            self.more = None;
        }
        chunk
    }

    /// A log back to a single block gives back what that block no longer needs.
    fn shrink(&mut self) {
        let cap = self.front.capacity();
        if self.more.is_none() && cap > 4 && self.front.len() < cap / 4 {
            self.front.shrink_to(self.front.len() * 2);
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Chunk<T>> + '_ {
        let more = self.more.iter().flat_map(|m| m.iter().flatten());
        self.front.iter().chain(more)
    }

    /// Bytes of the index's own allocations, in O(1): the blocks of `more` but the last are
    /// full, and were grown to exactly [`BLOCK`].
    fn heap_size(&self) -> usize {
        let d = std::mem::size_of::<Chunk<T>>();
        let bytes = |n: usize| if n > 0 { class_ceil(n) } else { 0 };
        let more = self.more.as_ref().map_or(0, |m| {
            let last = m.back().map_or(0, |b| bytes(b.capacity() * d));
            let full = m.len().saturating_sub(1) * bytes(BLOCK * d);
            let outer = bytes(m.capacity() * std::mem::size_of::<VecDeque<Chunk<T>>>());
            bytes(std::mem::size_of::<VecDeque<VecDeque<Chunk<T>>>>()) + outer + full + last
        });
        bytes(self.front.capacity() * d) + more
    }

    /// Number of the index's own allocations.
    fn allocations(&self) -> usize {
        usize::from(self.front.capacity() > 0) + self.more.as_ref().map_or(0, |m| 2 + m.len())
    }
}

/// A deque of `T` in chunks; see the module documentation.
pub struct Chunks<T> {
    /// Dead chunks, then the chunks holding values, then spare chunks, in position order.
    index: Index<T>,
    /// Absolute position of the first value.
    head: u64,
    len: usize,
}

impl<T: Copy + Default> Default for Chunks<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default> Chunks<T> {
    /// An empty deque; allocates nothing.
    pub const fn new() -> Self {
        Chunks {
            index: Index::new(),
            head: 0,
            len: 0,
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn tail(&self) -> u64 {
        self.head + self.len as u64
    }

    /// One past the last slot of the last chunk.
    fn end(&self) -> u64 {
        self.index.last().map_or(self.head, Chunk::end)
    }

    /// The chunk holding absolute position `p`, which must be inside some chunk.
    fn locate(&self, p: u64) -> usize {
        // Fast paths: the last chunk (pushes, the newest values), the first (the oldest).
        match (self.index.first(), self.index.last()) {
            (_, Some(last)) if last.start <= p => self.index.len() - 1,
            (Some(first), _) if p < first.end() => 0,
            _ => self
                .index
                .partition_point(|c| c.start <= p)
                .saturating_sub(1),
        }
    }

    /// The value at `i`, `None` past the end.
    pub fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        let p = self.head + i as u64;
        let c = match self.index.last() {
            Some(last) if last.start <= p => last,
            _ => self.index.get(self.locate(p))?,
        };
        c.slots.get((p - c.start) as usize)
    }

    /// The value at `i`, mutably, `None` past the end.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i >= self.len {
            return None;
        }
        let p = self.head + i as u64;
        let k = self.locate(p);
        let c = self.index.get_mut(k)?;
        c.slots.get_mut((p - c.start) as usize)
    }

    pub fn first(&self) -> Option<&T> {
        self.get(0)
    }

    pub fn last(&self) -> Option<&T> {
        self.len.checked_sub(1).and_then(|i| self.get(i))
    }

    pub fn last_mut(&mut self) -> Option<&mut T> {
        self.len.checked_sub(1).and_then(|i| self.get_mut(i))
    }

    /// The values of chunk `k`, as a slice (empty for dead and spare chunks).
    fn live(&self, k: usize) -> &[T] {
        let Some(c) = self.index.get(k) else {
            return &[];
        };
        let lo = self.head.max(c.start);
        let hi = self.tail().min(c.end());
        if lo >= hi {
            return &[];
        }
        c.slots
            .get((lo - c.start) as usize..(hi - c.start) as usize)
            .unwrap_or_default()
    }

    /// The values in order, one slice per chunk.
    pub fn slices(&self) -> impl Iterator<Item = &[T]> + '_ {
        // Only the chunks holding values: dead ones may still wait to be freed.
        let range = match self.len {
            0 => 0..0,
            _ => self.locate(self.head)..self.locate(self.tail() - 1) + 1,
        };
        range.map(|k| self.live(k)).filter(|s| !s.is_empty())
    }

    /// The values in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.slices().flatten()
    }

    /// Like [`slice::partition_point`]: the number of leading values for which `pred` holds,
    /// `pred` being true for a prefix of the values and false after. O(log n).
    pub fn partition_point(&self, mut pred: impl FnMut(&T) -> bool) -> usize {
        if let Some(c) = self.index.only() {
            let lo = (self.head - c.start) as usize;
            let values = c.slots.get(lo..lo + self.len).unwrap_or_default();
            return values.partition_point(pred);
        }
        if self.len == 0 {
            return 0;
        }
        let first = self.locate(self.head);
        let last = self.locate(self.tail() - 1);
        if first == last {
            return self.live(first).partition_point(pred);
        }
        // How many chunks, from `first`, start with a value that satisfies `pred`.
        let (mut lo, mut hi) = (first, last + 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.live(mid).first() {
                Some(v) if pred(v) => lo = mid + 1,
                _ => hi = mid,
            }
        }
        if lo == first {
            return 0;
        }
        // The answer is inside chunk `lo - 1` (or right after it).
        let k = lo - 1;
        let within = self.live(k).partition_point(pred);
        let start = self
            .index
            .get(k)
            .map_or(self.head, |c| c.start.max(self.head));
        (start - self.head) as usize + within
    }

    /// Like [`Chunks::partition_point`], faster when the answer is within the first chunk
    /// holding values (as when a few values at the front are about to be dropped): O(1) when
    /// `pred` fails on the first value, O(log c) within that chunk of c values, else
    /// O(log n).
    pub fn leading(&self, mut pred: impl FnMut(&T) -> bool) -> usize {
        let Some(first) = self.first() else {
            return 0;
        };
        if !pred(first) {
            return 0;
        }
        let front = self.live(self.locate(self.head));
        match front.last() {
            Some(v) if !pred(v) => front.partition_point(pred),
            _ => self.partition_point(pred),
        }
    }

    /// Appends `value`. Copies at most [`FIRST_MAX_BYTES`] (regrowing the first buffer), and
    /// otherwise at most allocates one chunk.
    pub fn push_back(&mut self, value: T) {
        let p = self.tail();
        if p >= self.end() {
            self.grow();
        }
        let p = self.tail();
        // Usually into the last chunk.
        if let Some(last) = self.index.last_mut() {
            if last.start <= p {
                if let Some(slot) = last.slots.get_mut((p - last.start) as usize) {
                    *slot = value;
                    self.len += 1;
                    return;
                }
            }
        }
        let k = self.locate(p);
        let slot = self
            .index
            .get_mut(k)
            .and_then(|c| c.slots.get_mut((p - c.start) as usize));
        debug_assert!(slot.is_some(), "grow made room");
        if let Some(slot) = slot {
            *slot = value;
            self.len += 1;
        }
    }

    /// Makes room for one more value at the back, where there is no spare chunk.
    fn grow(&mut self) {
        let size = std::mem::size_of::<T>().max(1);
        let wanted = (self.len + 1) * size;
        if self.index.len() == 0 {
            // The first value: nothing to copy.
            self.append_chunk(class_ceil(wanted) / size);
        } else if self.index.len() == 1 && wanted <= FIRST_MAX_BYTES {
            // One buffer: move the values into the next size class (or a smaller one, when
            // values left its front).
            self.relocate(class_ceil(wanted) / size);
        } else {
            let bytes = class_floor((self.len * size / 8).clamp(MIN_CHUNK_BYTES, MAX_CHUNK_BYTES));
            let slots = (bytes / size).max(1);
            self.append_chunk(slots);
        }
    }

    fn append_chunk(&mut self, slots: usize) {
        let start = self.end();
        self.index.push_back(Chunk {
            start,
            slots: vec![T::default(); slots].into_boxed_slice(),
        });
    }

    /// Copies the values into one new chunk of `slots` (at least `len`) after all others,
    /// which become dead.
    fn relocate(&mut self, slots: usize) {
        let mut buffer = Vec::with_capacity(slots.max(self.len));
        for s in self.slices() {
            buffer.extend_from_slice(s);
        }
        buffer.resize(slots.max(self.len), T::default());
        let start = self.end();
        if self.index.len() == 1 {
            // A single buffer regrown: free the old one now, so the index stays at one entry.
            self.index.pop_front();
        }
        self.index.push_back(Chunk {
            start,
            slots: buffer.into_boxed_slice(),
        });
        self.head = start;
    }

    /// Removes the first `n` values (all of them if `n >= len`): O(log n), then frees at most
    /// [`FREES_PER_CALL`] chunks. Called with 0, it only frees what earlier calls left.
    pub fn drop_front(&mut self, n: usize) {
        let n = n.min(self.len);
        if n == 0 {
            self.reclaim();
            return;
        }
        self.head += n as u64;
        self.len -= n;
        self.settle();
    }

    /// Keeps the first `len` values: O(log n), then frees at most [`FREES_PER_CALL`] chunks.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
        self.settle();
    }

    /// After values left: compact a small remainder, free some of what is unused.
    fn settle(&mut self) {
        let size = std::mem::size_of::<T>().max(1);
        if self.len == 0 {
            // Everything is unused: mark every chunk dead.
            self.head = self.end();
        } else {
            let needed = class_ceil(self.len * size);
            let worth = |held: usize| held > 2 * needed + MIN_CHUNK_BYTES;
            // All chunks (an O(1) sum) hold at least what the values' chunks hold.
            if needed <= MAX_CHUNK_BYTES && worth(self.chunk_bytes()) && worth(self.held_bytes()) {
                self.relocate(needed / size);
            }
        }
        self.reclaim();
    }

    /// Bytes of all chunks, freed or not yet.
    fn chunk_bytes(&self) -> usize {
        match (self.index.first(), self.index.last()) {
            (Some(a), Some(b)) => (b.end() - a.start) as usize * std::mem::size_of::<T>(),
            _ => 0,
        }
    }

    /// Bytes of the chunks that hold values.
    fn held_bytes(&self) -> usize {
        if self.len == 0 {
            return 0;
        }
        let first = self.locate(self.head);
        let last = self.locate(self.tail() - 1);
        let (Some(a), Some(b)) = (self.index.get(first), self.index.get(last)) else {
            return 0;
        };
        (b.end() - a.start) as usize * std::mem::size_of::<T>()
    }

    /// Frees up to [`FREES_PER_CALL`] dead chunks (front) and spare chunks (back).
    fn reclaim(&mut self) {
        let mut budget = FREES_PER_CALL;
        let tail = self.tail();
        while budget > 0 && self.index.first().is_some_and(|c| c.end() <= self.head) {
            self.index.pop_front();
            budget -= 1;
        }
        while budget > 0 && self.index.last().is_some_and(|c| c.start >= tail) && self.len > 0 {
            self.index.pop_back();
            budget -= 1;
        }
    }

    /// Chunks not yet freed although no value is in them. O(chunks).
    pub fn pending(&self) -> usize {
        let tail = self.tail();
        self.index
            .iter()
            .filter(|c| c.end() <= self.head || (self.len > 0 && c.start >= tail))
            .count()
    }

    /// Bytes allocated for the chunks (unfreed ones included) and the index. O(1).
    pub fn heap_size(&self) -> usize {
        self.chunk_bytes() + self.index.heap_size()
    }

    /// Number of heap allocations, what freeing everything costs: Redis frees values of more
    /// than 64 in its lazy-free thread.
    pub fn allocations(&self) -> usize {
        self.index.len() + self.index.allocations()
    }
}

impl<T: Copy + Default> Clone for Chunks<T> {
    /// A compact copy: the values only, in new chunks.
    fn clone(&self) -> Self {
        let mut copy = Chunks::new();
        for v in self.iter() {
            copy.push_back(*v);
        }
        copy
    }
}

impl<T: Copy + Default> FromIterator<T> for Chunks<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut c = Chunks::new();
        for v in iter {
            c.push_back(v);
        }
        c
    }
}

impl<T> fmt::Debug for Chunks<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunks")
            .field("len", &self.len)
            .field("chunks", &self.index.len())
            .finish()
    }
}

/// The smallest jemalloc size class of at least `bytes` (8, 16, then multiples of 16 up to
/// 128, then four classes per doubling: 160, 192, 224, 256, 320, ...).
pub fn class_ceil(bytes: usize) -> usize {
    if bytes <= 8 {
        return 8;
    }
    if bytes <= 128 {
        return bytes.next_multiple_of(16);
    }
    let k = usize::BITS - 1 - (bytes - 1).leading_zeros();
    bytes.next_multiple_of(1 << (k - 2))
}

/// The largest jemalloc size class of at most `bytes` (8 for anything smaller).
pub fn class_floor(bytes: usize) -> usize {
    if bytes < 16 {
        return 8;
    }
    if bytes <= 128 {
        return bytes / 16 * 16;
    }
    let k = usize::BITS - 1 - bytes.leading_zeros();
    let step = 1 << (k - 2);
    bytes / step * step
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn size_classes() {
        let classes = [
            8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768,
            896, 1024, 1280, 4096, 5120, 6144, 7168, 8192, 65536, 81920,
        ];
        for c in classes {
            assert_eq!(class_ceil(c), c);
            assert_eq!(class_floor(c), c);
        }
        assert_eq!(class_ceil(1), 8);
        assert_eq!(class_ceil(9), 16);
        assert_eq!(class_ceil(17), 32);
        assert_eq!(class_ceil(129), 160);
        assert_eq!(class_ceil(1025), 1280);
        assert_eq!(class_floor(15), 8);
        assert_eq!(class_floor(127), 112);
        assert_eq!(class_floor(159), 128);
        assert_eq!(class_floor(1279), 1024);
        assert_eq!(class_floor(65535), 57344);
    }

    /// A value as large as 16 of the sliding log's entries, so that tests cross many chunk
    /// boundaries with few values: the first buffer holds 64, chunks 4 to 512.
    #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
    struct Wide(u64, [u64; 15]);

    fn wide(v: u64) -> Wide {
        Wide(v, [0; 15])
    }

    #[derive(Clone, Debug)]
    enum Op {
        Push(u64),
        PushMany(u16),
        DropFront(usize),
        Truncate(usize),
        Set(usize, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u64>().prop_map(Op::Push),
            2 => (1u16..3000).prop_map(Op::PushMany),
            2 => (0usize..2000).prop_map(Op::DropFront),
            1 => (0usize..3000).prop_map(Op::Truncate),
            1 => (any::<usize>(), any::<u64>()).prop_map(|(i, v)| Op::Set(i, v)),
        ]
    }

    fn check(c: &Chunks<Wide>, model: &[u64]) {
        assert_eq!(c.len(), model.len());
        let got: Vec<u64> = c.iter().map(|w| w.0).collect();
        assert_eq!(got, model);
        for (i, v) in model.iter().enumerate().step_by(7) {
            assert_eq!(c.get(i).map(|w| w.0), Some(*v));
        }
        assert_eq!(c.get(model.len()), None);
        assert_eq!(c.first().map(|w| w.0), model.first().copied());
        assert_eq!(c.last().map(|w| w.0), model.last().copied());
        // The heap size is the sum of what the chunks and the index hold.
        let slots: usize = c.index.iter().map(|k| k.slots.len()).sum();
        let bytes = |n: usize| if n > 0 { class_ceil(n) } else { 0 };
        let d = std::mem::size_of::<Chunk<Wide>>();
        let mut index = bytes(c.index.front.capacity() * d);
        if let Some(more) = &c.index.more {
            index += bytes(32) + bytes(more.capacity() * 32);
            index += more.iter().map(|b| bytes(b.capacity() * d)).sum::<usize>();
            // Every block of `more` but the last is full.
            for b in more.iter().rev().skip(1) {
                assert_eq!((b.len(), b.capacity()), (BLOCK, BLOCK));
            }
        }
        assert_eq!(c.heap_size(), slots * std::mem::size_of::<Wide>() + index);
        assert_eq!(c.index.iter().count(), c.index.len());
        // Chunks are contiguous and hold the values.
        for pair in c.index.iter().collect::<Vec<_>>().windows(2) {
            assert_eq!(pair[0].end(), pair[1].start);
        }
        if !model.is_empty() {
            assert!(c.index.first().unwrap().start <= c.head);
            assert!(c.tail() <= c.end());
        }
    }

    proptest! {
        #[test]
        fn matches_a_vec(ops in prop::collection::vec(op(), 1..60)) {
            let mut c: Chunks<Wide> = Chunks::new();
            let mut model: Vec<u64> = Vec::new();
            let mut next = 0u64;
            for op in ops {
                match op {
                    Op::Push(v) => {
                        c.push_back(wide(v));
                        model.push(v);
                    }
                    Op::PushMany(n) => {
                        for _ in 0..n {
                            next += 1;
                            c.push_back(wide(next));
                            model.push(next);
                        }
                    }
                    Op::DropFront(n) => {
                        c.drop_front(n);
                        model.drain(..n.min(model.len()));
                    }
                    Op::Truncate(n) => {
                        c.truncate(n);
                        model.truncate(n);
                    }
                    Op::Set(i, v) => {
                        if model.is_empty() {
                            prop_assert!(c.get_mut(i).is_none());
                        } else {
                            let i = i % model.len();
                            c.get_mut(i).unwrap().0 = v;
                            model[i] = v;
                        }
                    }
                }
                check(&c, &model);
            }
            // Sorted contents: partition_point agrees with the slice's at every cut.
            let mut sorted: Chunks<Wide> = Chunks::new();
            let values: Vec<u64> = (0..model.len() as u64).map(|v| v * 3).collect();
            for v in &values {
                sorted.push_back(wide(*v));
            }
            sorted.drop_front(values.len() / 3);
            let kept = &values[values.len() / 3..];
            for x in [0, 1, 2, 3, 3 * kept.len() as u64, u64::MAX]
                .into_iter()
                .chain(kept.iter().step_by(5).copied())
                .chain(kept.iter().step_by(5).map(|v| v + 1))
            {
                let want = kept.partition_point(|v| *v < x);
                prop_assert_eq!(sorted.partition_point(|w| w.0 < x), want);
                prop_assert_eq!(sorted.leading(|w| w.0 < x), want);
            }
            let copy = c.clone();
            check(&copy, &model);
            prop_assert!(copy.pending() == 0);
        }

        #[test]
        fn partition_point_matches_a_slice(
            n in 0usize..5000,
            dropped in 0usize..5000,
            probes in prop::collection::vec(any::<u64>(), 1..20),
        ) {
            let values: Vec<u64> = (0..n as u64).map(|v| v * 2 + 1).collect();
            let mut c: Chunks<Wide> = values.iter().map(|v| wide(*v)).collect();
            c.drop_front(dropped);
            let kept = &values[dropped.min(n)..];
            for x in probes.into_iter().map(|p| p % (2 * n as u64 + 3)) {
                let want = kept.partition_point(|v| *v < x);
                prop_assert_eq!(c.partition_point(|w| w.0 < x), want);
                prop_assert_eq!(c.leading(|w| w.0 < x), want);
            }
        }
    }

    /// Chunk memory over the values' own size, right after each growth step.
    fn worst_growth_overhead(n: usize) -> f64 {
        let mut c: Chunks<u64> = Chunks::new();
        let mut worst: f64 = 0.0;
        let mut before = 0;
        for i in 0..n as u64 {
            c.push_back(i);
            let size = c.heap_size();
            if size != before && c.len() * 8 > FIRST_MAX_BYTES {
                worst = worst.max(size as f64 / (c.len() * 8) as f64);
            }
            before = size;
        }
        worst
    }

    #[test]
    fn growth_stays_within_an_eighth() {
        // An eighth for the newest chunk, plus the index (4% at most, at a few thousand).
        let worst = worst_growth_overhead(300_000);
        assert!(worst < 1.15, "{worst}");
    }

    #[test]
    fn a_small_log_is_small() {
        let mut c: Chunks<u64> = Chunks::new();
        assert_eq!(c.heap_size(), 0);
        c.push_back(1);
        assert_eq!(
            c.heap_size(),
            8 + 32,
            "one slot, and the index's 24 bytes in 32"
        );
        assert_eq!(c.allocations(), 2);
        for v in 2..=1024 {
            c.push_back(v);
        }
        // The first buffer, exactly full.
        assert_eq!(c.index.len(), 1);
        assert_eq!(c.heap_size(), FIRST_MAX_BYTES + 32);
    }

    #[test]
    fn frees_are_bounded_per_call_and_finish_later() {
        let n = 2_000_000;
        let mut c: Chunks<u64> = (0..n).collect();
        let chunks = c.allocations();
        assert!(chunks > 1000, "{chunks}");
        assert!(c.index.more.is_some(), "an index of several blocks");
        let full = c.heap_size();
        // Keep the last quarter: most chunks are now dead, and one call frees only a few.
        c.drop_front(n as usize * 3 / 4);
        assert_eq!(chunks - c.allocations(), FREES_PER_CALL);
        assert!(c.pending() > 100);
        assert!(c.heap_size() > full / 2, "unfreed chunks still count");
        let mut calls = 0;
        while c.pending() > 0 {
            c.drop_front(0);
            calls += 1;
        }
        assert!(calls <= chunks / FREES_PER_CALL + 1);
        assert!(c.heap_size() < full / 3);
        assert_eq!(c.first(), Some(&(n * 3 / 4)));
        // A suffix too: spare chunks go a few at a time.
        c.truncate(1000);
        assert!(c.pending() > 0);
        while c.pending() > 0 {
            c.truncate(1000);
        }
        // 1,000 values are copied into one small buffer once the spare chunks are gone.
        assert!(c.heap_size() < 3 * 8 * 1000, "{}", c.heap_size());
        let want: Vec<u64> = (n * 3 / 4..n * 3 / 4 + 1000).collect();
        assert_eq!(c.iter().copied().collect::<Vec<_>>(), want);
    }

    #[test]
    fn emptied_chunks_are_all_dead() {
        let mut c: Chunks<u64> = (0..100_000).collect();
        c.truncate(0);
        assert!(c.is_empty());
        while c.pending() > 0 {
            c.drop_front(0);
        }
        assert!(c.allocations() <= 1, "only the index may be left");
        c.push_back(7);
        assert_eq!(c.iter().copied().collect::<Vec<_>>(), vec![7]);
    }
}
