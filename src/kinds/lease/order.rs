//! A semaphore's leases in the order they end: sorted chunks of at most [`CHUNK`] slots
//! with the units each holds, so that the units held at a time, the wait for a cost and
//! the last end cost O(number of chunks + CHUNK) additions.

use super::semaphore::{cost_of, end_of, key_of, Chunk, Cut, Leases, CHUNK};
use crate::core::{Duration, Instant, Wait};

impl Leases {
    /// The chunk where `key` is or would go.
    pub(super) fn chunk_for(&self, key: (Instant, u32)) -> usize {
        let slots = &self.slots;
        let i = self.chunks.partition_point(|c| {
            c.slots
                .last()
                .is_some_and(|&last| key_of(slots, last) < key)
        });
        i.min(self.chunks.len().saturating_sub(1))
    }

    pub(super) fn order_insert(&mut self, s: u32) {
        let key = key_of(&self.slots, s);
        let cost = cost_of(&self.slots, s);
        if self.chunks.is_empty() {
            self.chunks.push(Chunk::default());
        }
        let c = self.chunk_for(key);
        let is_last = c + 1 == self.chunks.len();
        let slots = &self.slots;
        let Some(chunk) = self.chunks.get_mut(c) else {
            return;
        };
        let pos = chunk.slots.partition_point(|&x| key_of(slots, x) < key);
        chunk.units += cost;
        if chunk.slots.len() < CHUNK {
            chunk.slots.insert(pos, s);
            return;
        }
        // Full: an entry after the last chunk's end starts a new chunk (leases of one length
        // arrive in end order, and so fill their chunks); otherwise the chunk splits in two.
        let mut tail;
        if is_last && pos == CHUNK {
            tail = vec![s];
        } else {
            tail = chunk.slots.split_off(CHUNK / 2);
            match pos.checked_sub(CHUNK / 2) {
                Some(at) => tail.insert(at, s),
                None => chunk.slots.insert(pos, s),
            }
        }
        let units: u64 = tail.iter().map(|&x| cost_of(slots, x)).sum();
        chunk.units -= units;
        self.chunks.insert(c + 1, Chunk { slots: tail, units });
    }

    pub(super) fn order_remove(&mut self, s: u32) {
        let key = key_of(&self.slots, s);
        let cost = cost_of(&self.slots, s);
        let c = self.chunk_for(key);
        let slots = &self.slots;
        let Some(chunk) = self.chunks.get_mut(c) else {
            return;
        };
        let pos = chunk.slots.partition_point(|&x| key_of(slots, x) < key);
        if chunk.slots.get(pos) != Some(&s) {
            return;
        }
        chunk.slots.remove(pos);
        chunk.units -= cost;
        let len = chunk.slots.len();
        if len == 0 {
            self.chunks.remove(c);
        } else if len < CHUNK / 4 {
            // Merge a sparse chunk into a neighbour that has room.
            let fits = |o: Option<&Chunk>| o.is_some_and(|o| o.slots.len() + len <= CHUNK);
            if c > 0 && fits(self.chunks.get(c - 1)) {
                let gone = self.chunks.remove(c);
                if let Some(prev) = self.chunks.get_mut(c - 1) {
                    prev.slots.extend_from_slice(&gone.slots);
                    prev.units += gone.units;
                }
            } else if fits(self.chunks.get(c + 1)) {
                let next = self.chunks.remove(c + 1);
                if let Some(chunk) = self.chunks.get_mut(c) {
                    chunk.slots.extend_from_slice(&next.slots);
                    chunk.units += next.units;
                }
            }
        }
    }

    /// The leases ended at `t` (end <= t): their units and number, and where the first
    /// lease still held at `t` sits.
    pub(super) fn cut(&self, t: Instant) -> Cut {
        let slots = &self.slots;
        let mut cut = Cut {
            units: 0,
            count: 0,
            chunk: self.chunks.len(),
            at: 0,
        };
        for (i, ch) in self.chunks.iter().enumerate() {
            if ch.slots.last().is_some_and(|&l| end_of(slots, l) <= t) {
                cut.units += ch.units;
                cut.count += ch.slots.len();
                continue;
            }
            let at = ch.slots.partition_point(|&x| end_of(slots, x) <= t);
            for &x in ch.slots.get(..at).unwrap_or_default() {
                cut.units += cost_of(slots, x);
            }
            cut.count += at;
            cut.chunk = i;
            cut.at = at;
            break;
        }
        cut
    }

    /// Units held at `t`.
    pub fn held_at(&self, t: Instant) -> u64 {
        self.total - self.cut(t).units
    }

    /// Leases held at `t`.
    pub fn live_at(&self, t: Instant) -> usize {
        self.count - self.cut(t).count
    }

    /// When the last lease ends.
    pub(super) fn last_end(&self) -> Option<Instant> {
        let last = self.chunks.last()?.slots.last()?;
        Some(end_of(&self.slots, *last))
    }

    /// When the key is back to empty: its last lease's end, and never before the
    /// millisecond after the last id it made (so that a key deleted and made again does not
    /// make that id again). `None` when that has passed at the latest time.
    pub fn empty_at(&self) -> Option<Instant> {
        let at = self
            .last_end()
            .unwrap_or(Instant::EPOCH)
            .max(self.last_id.0.saturating_add(Duration::MS));
        let made_one = self.last_id != (Instant::EPOCH, 0);
        (at > self.latest && (self.count > 0 || made_one)).then_some(at)
    }

    /// How long from `now` until `need` units held at `now` have ended, the cut at `now`
    /// being `cut`.
    pub(super) fn wait_for(&self, now: Instant, cut: &Cut, need: u64) -> Wait {
        let slots = &self.slots;
        let mut freed = 0u64;
        for (i, ch) in self.chunks.iter().enumerate().skip(cut.chunk) {
            let from = if i == cut.chunk { cut.at } else { 0 };
            let rest = ch.slots.get(from..).unwrap_or_default();
            let units = if from == 0 {
                ch.units
            } else {
                rest.iter().map(|&x| cost_of(slots, x)).sum()
            };
            if freed + units < need {
                freed += units;
                continue;
            }
            for &x in rest {
                freed += cost_of(slots, x);
                if freed >= need {
                    return Wait::For(end_of(slots, x).since(now));
                }
            }
        }
        Wait::Never
    }

}
