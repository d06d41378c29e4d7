//! A double-ended queue of `Copy` values held in separately allocated chunks, for logs of up
//! to tens of millions of values where no single operation may take long.
//!
//! What a [`Chunks`] guarantees, whatever it holds:
//! - **No big copy.** Growing never copies more than one small buffer: a log of up to
//!   [`FIRST_MAX_BYTES`] is one buffer, regrown by copying like a `Vec`; past that, values go
//!   into new chunks appended at the back, each about an eighth of what the log already holds
//!   (at least [`MIN_CHUNK_BYTES`], at most [`MAX_CHUNK_BYTES`]), and nothing is ever moved.
//! - **Bounded frees.** Dropping a prefix ([`Chunks::drop_front`]) or a suffix
//!   ([`Chunks::truncate`]) takes O(log n) and frees at most [`FREES_PER_CALL`] chunks. When
//!   more chunks than that are left unused, they are all taken out of the deque in one step
//!   (the index's blocks moved, at most two blocks of descriptors copied) and handed to the
//!   function set by [`hand_off_to`], which frees them elsewhere: the deque and
//!   [`Chunks::heap_size`] are right-sized at once. Without one (unit tests), the chunks left
//!   to free wait for the next calls (each mutating call frees some), and count in
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
use std::sync::OnceLock;

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
/// Chunks freed by one call at most (about 0.1 to 0.3 µs each); more than that are handed
/// off (see [`hand_off_to`]), or without a hand-off freed by the next calls.
pub const FREES_PER_CALL: usize = 256;

/// Frees, elsewhere than in the call, chunks a deque no longer uses: given a box it owns.
pub type HandOff = fn(Box<dyn Send>);

static HAND_OFF: OnceLock<HandOff> = OnceLock::new();

/// Sets where every deque hands the chunks it leaves unused when they are more than
/// [`FREES_PER_CALL`] (the module's freeing thread, set at load). Only the first call counts.
pub fn hand_off_to(hand_off: HandOff) {
    let _ = HAND_OFF.set(hand_off);
}

/// Chunks taken out of a deque, to be freed: blocks of the index, in no particular order.
pub struct Unused<T>(VecDeque<VecDeque<Chunk<T>>>);

impl<T> Unused<T> {
    /// Number of chunks.
    pub fn len(&self) -> usize {
        self.0.iter().map(VecDeque::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

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

    /// Takes out the chunks from chunk `k` on: whole blocks are moved, and the block that `k`
    /// cuts copies its part after `k` (at most [`BLOCK`] descriptors).
    fn split_off_back(&mut self, k: usize) -> VecDeque<VecDeque<Chunk<T>>> {
        let mut out = VecDeque::new();
        match k.checked_sub(self.front.len()) {
            None => {
                out.push_back(self.front.split_off(k));
                if let Some(mut more) = self.more.take() {
                    out.append(&mut more);
                }
            }
            Some(r) => {
                if let Some(more) = self.more.as_deref_mut() {
                    // Block `b` keeps its first `o` descriptors; the blocks after it go whole.
                    let (b, o) = (r / BLOCK, r % BLOCK);
                    let whole = if o == 0 { b } else { b + 1 };
                    out = more.split_off(whole.min(more.len()));
                    if let Some(block) = more.get_mut(b).filter(|_| o > 0) {
                        out.push_back(block.split_off(o.min(block.len())));
                    }
                    if more.is_empty() {
                        self.more = None;
                    }
                }
            }
        }
        self.shrink();
        out
    }

    /// Takes out the first `k` chunks: whole blocks are moved, and the block that `k` cuts
    /// copies its part from `k` on (at most [`BLOCK`] descriptors), which becomes `front`.
    fn split_off_front(&mut self, k: usize) -> VecDeque<VecDeque<Chunk<T>>> {
        let mut out = VecDeque::new();
        match k.checked_sub(self.front.len()) {
            None => {
                let rest = self.front.split_off(k);
                out.push_back(std::mem::replace(&mut self.front, rest));
            }
            Some(r) => {
                out.push_back(std::mem::take(&mut self.front));
                if let Some(more) = self.more.as_deref_mut() {
                    let (b, o) = (r / BLOCK, r % BLOCK);
                    out.extend(more.drain(..b.min(more.len())));
                    if let Some(mut block) = more.pop_front() {
                        self.front = block.split_off(o.min(block.len()));
                        out.push_back(block);
                    }
                    if more.is_empty() {
                        self.more = None;
                    }
                }
            }
        }
        self.shrink();
        out
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

impl<T: Copy + Default + Send + 'static> Default for Chunks<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default + Send + 'static> Chunks<T> {
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
        // Fast paths: the last chunk (the newest values), the first (the oldest).
        let c = match (self.index.first(), self.index.last()) {
            (_, Some(last)) if last.start <= p => last,
            (Some(first), _) if p < first.end() => first,
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
        // Fast path: the last chunk (the newest values).
        if self.index.last().is_some_and(|last| last.start <= p) {
            let c = self.index.last_mut()?;
            return c.slots.get_mut((p - c.start) as usize);
        }
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
    #[inline]
    pub fn push_back(&mut self, value: T) {
        let p = self.tail();
        // Usually into the last chunk, which has room.
        if let Some(last) = self.index.last_mut() {
            let slot = p.checked_sub(last.start);
            if let Some(slot) = slot.and_then(|i| last.slots.get_mut(usize::try_from(i).ok()?)) {
                *slot = value;
                self.len += 1;
                return;
            }
        }
        self.push_back_grown(value);
    }

    /// Appends `values`, copied a chunk's room at a time ([`Chunks::push_back`] each
    /// otherwise).
    pub fn extend_from_slice(&mut self, mut values: &[T]) {
        while let Some((&first, rest)) = values.split_first() {
            let p = self.tail();
            let room = self.index.last_mut().and_then(|last| {
                let at = usize::try_from(p.checked_sub(last.start)?).ok()?;
                last.slots.get_mut(at..)
            });
            let n = room.as_ref().map_or(0, |r| r.len().min(values.len()));
            match (room, values.split_at_checked(n)) {
                (Some(room), Some((now, later))) if n > 0 => {
                    if let Some(to) = room.get_mut(..n) {
                        to.copy_from_slice(now);
                    }
                    self.len += n;
                    values = later;
                }
                _ => {
                    self.push_back_grown(first);
                    values = rest;
                }
            }
        }
    }

    /// [`Chunks::push_back`] where the last chunk has no room for it.
    #[inline(never)]
    fn push_back_grown(&mut self, value: T) {
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

    /// Makes room for `additional` more values at once while they all fit in the first
    /// buffer ([`FIRST_MAX_BYTES`]): one allocation for a log read back whole, instead of
    /// a regrowth every size class. Past that, pushes grow it as ever.
    pub fn reserve(&mut self, additional: usize) {
        let size = std::mem::size_of::<T>().max(1);
        let wanted = (self.len + additional).saturating_mul(size);
        let spare = self.end().saturating_sub(self.tail());
        if additional as u64 <= spare || wanted > FIRST_MAX_BYTES || self.index.len() > 1 {
            return;
        }
        match self.index.len() {
            0 => self.append_chunk(class_ceil(wanted) / size),
            _ => self.relocate(class_ceil(wanted) / size),
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

    /// Removes the first `n` values (all of them if `n >= len`): O(log n), then frees the
    /// chunks left unused (see [`Chunks::reclaim`]). Called with 0, it only frees what
    /// earlier calls left.
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

    /// Keeps the first `len` values: O(log n), then frees the chunks left unused (see
    /// [`Chunks::reclaim`]).
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

    /// Frees the dead chunks (front) and spare chunks (back): all of them through the
    /// hand-off set by [`hand_off_to`] when they are more than [`FREES_PER_CALL`], else (or
    /// without one) up to [`FREES_PER_CALL`] of them here.
    #[inline]
    fn reclaim(&mut self) {
        // The usual call: the first chunk holds the first value and the last the last, so
        // none is unused (two reads, and nothing else to do).
        if self.len > 0 && !self.dead_front() && !self.spare_back() {
            return;
        }
        self.reclaim_with(HAND_OFF.get().copied());
    }

    /// Whether the first chunk holds no value, all before the first.
    #[inline(always)]
    fn dead_front(&self) -> bool {
        self.index.first().is_some_and(|c| c.end() <= self.head)
    }

    /// Whether the last chunk holds no value, all after the last (spare room).
    #[inline(always)]
    fn spare_back(&self) -> bool {
        let tail = self.tail();
        self.index.last().is_some_and(|c| c.start >= tail)
    }

    /// [`Chunks::reclaim`], handing off to `hand_off` (`None`: freeing here only).
    fn reclaim_with(&mut self, hand_off: Option<HandOff>) {
        if let Some(hand_off) = hand_off {
            if let Some(unused) = self.take_unused() {
                hand_off(Box::new(unused));
                return;
            }
        }
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

    /// Takes the dead and spare chunks out, when they are more than [`FREES_PER_CALL`]:
    /// O(log n), and at most two blocks of descriptors copied (see [`Index::split_off_back`]).
    fn take_unused(&mut self) -> Option<Unused<T>> {
        let chunks = self.index.len();
        if self.len == 0 {
            // Every chunk is dead: the whole index goes; `head` stays at its end.
            return (chunks > FREES_PER_CALL).then(|| Unused(self.index.split_off_back(0)));
        }
        // The usual call: the first chunk holds the first value and the last the last,
        // so none is unused (two reads instead of two searches).
        if !self.dead_front() && !self.spare_back() {
            return None;
        }
        let tail = self.tail();
        // The chunks before the one holding the first value, after the one holding the last.
        let first = self.locate(self.head);
        let last = self.locate(tail - 1);
        let spare = chunks - 1 - last;
        if first + spare <= FREES_PER_CALL {
            return None;
        }
        let mut blocks = self.index.split_off_back(last + 1);
        if first > 0 {
            blocks.append(&mut self.index.split_off_front(first));
        }
        Some(Unused(blocks))
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

impl<T: Copy + Default + Send + 'static> Clone for Chunks<T> {
    /// A compact copy: the values only, in new chunks.
    fn clone(&self) -> Self {
        let mut copy = Chunks::new();
        // One buffer at once for a log within the first buffer's size.
        copy.reserve(self.len);
        for s in self.slices() {
            copy.extend_from_slice(s);
        }
        copy
    }
}

impl<T: Copy + Default + Send + 'static> FromIterator<T> for Chunks<T> {
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
mod tests;
