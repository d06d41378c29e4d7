//! The ring itself: one block of 32-bit words, a header and the counters (see the kind's
//! docs in `mod.rs`), and what reads and moves it.

use super::{Params, MAX_SUBINTERVALS, MAX_WINDOW_MS};
use crate::core::limit::Limit;
use crate::core::retention::{Front, MAX_KEPT};
use crate::core::{Decision, Duration, Instant, Wait, MAX_TIMESTAMP};



// The header words, then `r + 1` counters: slot `i % (r + 1)` counts sub-interval `i`. The
// ring always describes sub-intervals `L-r ..= L`, where `L` is the latest one seen; `r` is
// the window's `n`, or more while a retention is pending. Timestamps fit in 48 bits, so the
// first word holds `r`, the retention flag and the top of `latest`.
pub(super) const RING_AND_LATEST_HIGH: usize = 0;
pub(super) const LIMIT: usize = 1;
pub(super) const RESOLUTION: usize = 2;
pub(super) const LATEST_LOW: usize = 3;
pub(super) const TOTAL: usize = 4;
/// Header words before the counters, without a retention.
pub const HEADER_WORDS: usize = 5;
/// With a retention, more: the window's `n` and the number of front entries (above bit
/// 16), then room for [`MAX_KEPT`] entries of three words each: `window_ms`, and
/// `last_used` low then high. The room is fixed, so that a front that changes its length
/// keeps the block.
const WINDOW_AND_COUNT: usize = 5;
const FRONT: usize = 6;
const RETENTION_WORDS: usize = 1 + 3 * MAX_KEPT;
/// The bits of the first word holding `r` (at most [`MAX_SUBINTERVALS`]).
const RING_MASK: u32 = 0x1fff;
/// The bit of the first word saying that a retention is pending.
const RETAINED: u32 = 0x8000;

/// The words a state takes, from its first word.
pub fn block_len(first_word: u32) -> usize {
    let retention = if first_word & RETAINED != 0 {
        RETENTION_WORDS
    } else {
        0
    };
    HEADER_WORDS + retention + (first_word & RING_MASK) as usize + 1
}

/// The state: one block of words. No method replaces the block once it exists (the key
/// holds its address); changing the window's shape builds a new state, see
/// [`Limit::reshaped`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubWindow {
    pub(super) words: Box<[u32]>,
}

/// Why a persisted state was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

/// The ring a call needs: `ring` sub-intervals of the call's resolution before the latest,
/// and, when that is more than the call's window, until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Plan {
    pub(super) ring: u64,
    pub(super) front: Option<Front>,
    /// What is retained is longer than the longest ring: older units go to its oldest
    /// sub-interval instead of leaving.
    pub(super) squeezed: bool,
}

/// What [`SubWindow::recording`] found a record writes.
pub(super) struct Recording {
    pub(super) now: Instant,
    /// The word in the block of the counter of the sub-interval `now` falls in.
    pub(super) slot: usize,
    pub(super) plan: Option<Plan>,
    /// The current sub-interval's counter and the total, the cost included.
    pub(super) count: u32,
    pub(super) total: u32,
    /// In the latest sub-interval (or an empty ring) of the same shape: nothing to clear.
    pub(super) in_place: bool,
}

impl SubWindow {
    /// An empty window shaped by `p`, which must be valid.
    pub fn new(p: &Params) -> SubWindow {
        SubWindow::shaped(p, p.subintervals(), None)
    }

    /// The counters a state for `p` with retention `front` holds: the ring `p`'s window
    /// needs, or longer for the front's windows, up to [`MAX_SUBINTERVALS`].
    pub fn counters_for(p: &Params, front: Option<&Front>) -> u64 {
        SubWindow::ring_for(p, front).0 + 1
    }

    /// The ring (sub-intervals before the latest) for `p` with `front`, and whether what
    /// the front keeps is longer than it.
    pub(super) fn ring_for(p: &Params, front: Option<&Front>) -> (u64, bool) {
        let n = p.subintervals().min(MAX_SUBINTERVALS);
        match front {
            Some(f) => {
                let wanted = f.keep(p.window_ms).div_ceil(p.resolution_ms);
                let ring = wanted.clamp(n, MAX_SUBINTERVALS);
                (ring, wanted > ring)
            }
            None => (n, false),
        }
    }

    /// An empty window for `p` whose ring holds `ring` sub-intervals before the latest
    /// (at least the window's), with a retention `front`.
    pub(super) fn shaped(p: &Params, ring: u64, front: Option<&Front>) -> SubWindow {
        let n = p.subintervals().min(MAX_SUBINTERVALS) as u32;
        let ring = ring.clamp(u64::from(n), MAX_SUBINTERVALS) as u32;
        let flag = if front.is_some() { RETAINED } else { 0 };
        let mut w = SubWindow {
            words: vec![0u32; block_len(ring | flag)].into_boxed_slice(),
        };
        w.put(RING_AND_LATEST_HIGH, ring | flag);
        // The ranges are checked when arguments are parsed; the casts cannot truncate.
        w.put(LIMIT, p.limit as u32);
        w.put(RESOLUTION, p.resolution_ms as u32);
        if let Some(front) = front {
            w.set_front(n, front);
        }
        w
    }

    /// Only with the retention words: the window's `n` and the front.
    pub(super) fn set_front(&mut self, n: u32, front: &Front) {
        let entries = front.entries();
        self.put(WINDOW_AND_COUNT, n | ((entries.len() as u32) << 16));
        for k in 0..MAX_KEPT {
            let (w, last) = entries.get(k).copied().unwrap_or_default();
            // Windows are at most MAX_WINDOW_MS < 2^32, times below 2^48.
            self.put(FRONT + 3 * k, w as u32);
            self.put(FRONT + 3 * k + 1, last.ms() as u32);
            self.put(FRONT + 3 * k + 2, (last.ms() >> 32) as u32);
        }
    }

    /// Rebuilds a state from its persisted parts: the retention, if any, as
    /// `(window_ms, last_used)` pairs (see [`SubWindow::retention`]; the ring then spans
    /// [`SubWindow::counters_for`]), and the counters of sub-intervals `L-r ..= L`, oldest
    /// first, where `L` is the sub-interval of `latest`.
    pub fn from_parts(
        p: Params,
        latest: Instant,
        retention: Option<&[(u64, Instant)]>,
        counts: &[u64],
    ) -> Result<Self, Corrupt> {
        let w = SubWindow::empty_for(p, latest, retention)?;
        if counts.len() as u64 != w.ring_n() + 1 {
            return Err(Corrupt("wrong number of counters"));
        }
        let r = w.ring_n();
        w.fill(
            latest,
            counts.iter().enumerate().map(|(k, &c)| (r - k as u64, c)),
        )
    }

    /// Rebuilds a state as [`SubWindow::from_parts`] does, from its non-zero counters
    /// alone, as `(back, count)`: the counter of sub-interval `L - back` (see
    /// [`SubWindow::nonzero`]), `back` at most the ring's length, each given once, in any
    /// order (the caller checks the order its encoding wants). Costs the counters given,
    /// not the ring.
    pub fn from_sparse(
        p: Params,
        latest: Instant,
        retention: Option<&[(u64, Instant)]>,
        nonzero: impl Iterator<Item = (u64, u64)>,
    ) -> Result<Self, Corrupt> {
        SubWindow::empty_for(p, latest, retention)?.fill(latest, nonzero)
    }

    /// The empty state [`SubWindow::from_parts`] fills: its parameters and retention checked.
    pub(super) fn empty_for(
        p: Params,
        latest: Instant,
        retention: Option<&[(u64, Instant)]>,
    ) -> Result<Self, Corrupt> {
        if !p.valid() {
            return Err(Corrupt("parameters out of range"));
        }
        if latest > MAX_TIMESTAMP {
            return Err(Corrupt("time out of range"));
        }
        match retention {
            None => Ok(SubWindow::new(&p)),
            Some(entries) => {
                // A last use is the last millisecond of a sub-interval up to `latest`'s, at
                // the resolution of its time (a coarser one, perhaps).
                let max_time = latest + Duration::from_ms(MAX_WINDOW_MS);
                let front =
                    Front::from_entries(entries, p.window_ms, true, MAX_WINDOW_MS, max_time)
                        .map_err(|e| Corrupt(e.0))?;
                if front.is_empty() {
                    return Err(Corrupt("empty retention"));
                }
                let (ring, _) = SubWindow::ring_for(&p, Some(&front));
                Ok(SubWindow::shaped(&p, ring, Some(&front)))
            }
        }
    }

    /// Sets `latest` and the counters `(back, count)` (sub-interval `L - back`, each given
    /// once; refused outside the ring) of an empty state, and the total.
    pub(super) fn fill(
        mut self,
        latest: Instant,
        counters: impl Iterator<Item = (u64, u64)>,
    ) -> Result<Self, Corrupt> {
        self.set_latest(latest);
        let newest = self.index(latest);
        let mut total: u32 = 0;
        for (back, c) in counters {
            if back > self.ring_n() {
                return Err(Corrupt("counter outside the ring"));
            }
            let c = u32::try_from(c).map_err(|_| Corrupt("counter out of range"))?;
            total = total
                .checked_add(c)
                .ok_or(Corrupt("counters out of range"))?;
            match newest.checked_sub(back) {
                Some(i) => self.put_count(i, c),
                None if c == 0 => {}
                None => return Err(Corrupt("counter before the epoch")),
            }
        }
        self.put(TOTAL, total);
        Ok(self)
    }

    /// The block, for a key to hold behind a thin pointer.
    pub fn into_words(self) -> Box<[u32]> {
        self.words
    }

    /// Takes back a block made by [`SubWindow::into_words`].
    pub fn from_words(words: Box<[u32]>) -> SubWindow {
        debug_assert_eq!(Some(words.len()), words.first().map(|&w| block_len(w)));
        SubWindow { words }
    }

    #[inline]
    pub(super) fn word(&self, i: usize) -> u32 {
        self.words.get(i).copied().unwrap_or(0)
    }

    #[inline]
    pub(super) fn put(&mut self, i: usize, v: u32) {
        if let Some(w) = self.words.get_mut(i) {
            *w = v;
        }
    }

    #[inline]
    pub(super) fn retained(&self) -> bool {
        self.word(RING_AND_LATEST_HIGH) & RETAINED != 0
    }

    /// The sub-intervals the ring holds before the latest one.
    #[inline]
    pub(super) fn ring_n(&self) -> u64 {
        u64::from(self.word(RING_AND_LATEST_HIGH) & RING_MASK)
    }

    /// The window, in sub-intervals.
    #[inline]
    pub(super) fn n(&self) -> u64 {
        if self.retained() {
            u64::from(self.word(WINDOW_AND_COUNT) & 0xffff)
        } else {
            self.ring_n()
        }
    }

    #[inline]
    pub(super) fn counters_start(&self) -> usize {
        if self.retained() {
            HEADER_WORDS + RETENTION_WORDS
        } else {
            HEADER_WORDS
        }
    }

    /// The retention, when the block has one.
    #[inline]
    pub(super) fn front(&self) -> Option<Front> {
        if !self.retained() {
            return None;
        }
        self.kept_front()
    }

    /// [`SubWindow::front`] of a block that has one.
    fn kept_front(&self) -> Option<Front> {
        let len = ((self.word(WINDOW_AND_COUNT) >> 16) as usize).min(MAX_KEPT);
        let entries: Vec<(u64, Instant)> = (0..len)
            .map(|k| {
                let w = u64::from(self.word(FRONT + 3 * k));
                let low = u64::from(self.word(FRONT + 3 * k + 1));
                let high = u64::from(self.word(FRONT + 3 * k + 2));
                (w, Instant::from_ms((high << 32) | low))
            })
            .collect();
        // Written by `set_front` from a valid front, read back as it was.
        let any_time = Instant::from_ms(u64::MAX);
        Front::from_entries(&entries, 0, true, u64::MAX, any_time).ok()
    }

    /// The windows used before the current one that may still count a unit, as
    /// `(window_ms, last_used)` (`last_used` the last millisecond of the newest sub-interval
    /// they counted), shortest first; the ring spans the longest. Empty when the ring is the
    /// window's and nothing is retained.
    pub fn retention(&self) -> Vec<(u64, Instant)> {
        self.front().map_or_else(Vec::new, |f| f.entries().to_vec())
    }

    #[inline]
    pub(super) fn resolution(&self) -> u64 {
        u64::from(self.word(RESOLUTION)).max(1)
    }

    #[inline]
    pub(super) fn total(&self) -> u64 {
        u64::from(self.word(TOTAL))
    }

    pub fn params(&self) -> Params {
        Params {
            limit: u64::from(self.word(LIMIT)),
            window_ms: self.n() * self.resolution(),
            resolution_ms: self.resolution(),
        }
    }

    #[inline]
    pub(super) fn set_latest(&mut self, at: Instant) {
        let at = at.ms();
        let low = self.word(RING_AND_LATEST_HIGH) & 0xffff;
        // at <= MAX_TIMESTAMP < 2^48
        self.put(RING_AND_LATEST_HIGH, low | (((at >> 32) as u32) << 16));
        self.put(LATEST_LOW, at as u32);
    }

    /// The sub-interval `t` falls in.
    #[inline]
    pub(super) fn index(&self, t: Instant) -> u64 {
        t.ms() / self.resolution()
    }

    /// The sub-intervals the ring describes.
    #[inline]
    pub(super) fn span(&self) -> (u64, u64) {
        let newest = self.index(self.latest());
        (newest.saturating_sub(self.ring_n()), newest)
    }

    #[inline]
    pub(super) fn slot(&self, i: u64) -> usize {
        self.counters_start() + (i % (self.ring_n() + 1)) as usize
    }

    /// The counter of sub-interval `i`, 0 outside the ring.
    #[inline]
    pub(super) fn count(&self, i: u64) -> u64 {
        let (oldest, newest) = self.span();
        if (oldest..=newest).contains(&i) {
            u64::from(self.word(self.slot(i)))
        } else {
            0
        }
    }

    /// Sets the counter of sub-interval `i`, in the ring, leaving the total as it is.
    pub(super) fn put_count(&mut self, i: u64, c: u32) {
        self.put(self.slot(i), c);
    }

    /// The counters of sub-intervals `first ..= last`, which must lie in the ring, in order:
    /// the run up to the end of the block, then the run that wrapped around.
    pub(super) fn ring_runs(&self, first: u64, last: u64) -> (&[u32], &[u32]) {
        let size = self.ring_n() + 1;
        let len = (last + 1).saturating_sub(first).min(size) as usize;
        let counters = self.words.get(self.counters_start()..).unwrap_or_default();
        let start = ((first % size) as usize).min(counters.len());
        let (before, from) = counters.split_at(start);
        let wrapped = len.saturating_sub(from.len());
        let from = from.get(..len.min(from.len())).unwrap_or_default();
        let before = before.get(..wrapped).unwrap_or_default();
        (from, before)
    }

    /// The counters of sub-intervals `first ..= last`, which must lie in the ring, in order.
    pub(super) fn ring(&self, first: u64, last: u64) -> impl DoubleEndedIterator<Item = u64> + '_ {
        let (from, before) = self.ring_runs(first, last);
        from.iter().chain(before).map(|&c| u64::from(c))
    }

    /// The units of sub-intervals `first ..= last`, which must lie in the ring.
    pub(super) fn ring_sum(&self, first: u64, last: u64) -> u64 {
        let (from, before) = self.ring_runs(first, last);
        let sum = |run: &[u32]| run.iter().map(|&c| u64::from(c)).sum::<u64>();
        sum(from) + sum(before)
    }

    /// The first sub-interval of `first ..= last` (in the ring) with a unit in it.
    pub(super) fn first_counted(&self, first: u64, last: u64) -> Option<u64> {
        if first > last {
            return None;
        }
        let (from, before) = self.ring_runs(first, last);
        match first_nonzero(from) {
            Some(i) => Some(first + i as u64),
            None => first_nonzero(before).map(|i| first + (from.len() + i) as u64),
        }
    }

    /// The units of the sub-intervals after `t`, summing whichever side of `t` in the ring
    /// is shorter.
    pub(super) fn units_after(&self, t: u64) -> u64 {
        let (oldest, newest) = self.span();
        if t >= newest {
            0
        } else if t < oldest {
            self.total()
        } else if newest - t <= t - oldest + 1 {
            self.ring_sum(t + 1, newest)
        } else {
            let gone = self.ring_sum(oldest, t);
            self.total().saturating_sub(gone)
        }
    }

    /// The estimate at `now` (not before `latest`) for a window of `n` sub-intervals (at
    /// most the ring's): the units of the full sub-intervals, and the trailing units the
    /// window still counts.
    pub(super) fn estimate(&self, now: Instant, n: u64) -> (u64, u64) {
        let res = self.resolution();
        match self.index(now).checked_sub(n) {
            // Everything up to the trailing sub-interval has left the full window.
            Some(t) => (self.units_after(t), weighted(self.count(t), now.ms() % res, res)),
            None => (self.total(), 0),
        }
    }

    /// How long until `cost` more units fit in a window of `n` sub-intervals, given the
    /// full part of the estimate at `now`; `cost <= limit`, and the call at `now` was
    /// refused.
    pub(super) fn wait(&self, now: Instant, n: u64, limit: u64, cost: u64, mut full: u64) -> Wait {
        let res = self.resolution();
        let (oldest, newest) = self.span();
        let current = self.index(now);
        let offset = now.ms() % res;
        // Sub-interval by sub-interval, nothing new arriving: at the step where sub-interval
        // `t` trails (the current one being `t + n`), the full part has lost `t`, and the
        // trailing weight falls within the step. Steps whose trailing sub-interval is empty
        // change nothing, so only the ring's are visited. After the first step, one whose
        // trailing sub-interval is empty changes nothing either (the full part only falls
        // when a unit leaves, and a step that leaves room answers), so those are skipped
        // with a plain scan of the counters.
        let first = current.saturating_sub(n).max(oldest);
        let mut next = Some(first);
        let steps = std::iter::from_fn(|| {
            let t = next?;
            next = self.first_counted(t + 1, newest);
            Some((t, self.count(t)))
        });
        for (t, trail) in steps {
            let step = t + n;
            if step > current {
                full -= trail.min(full);
            }
            let Some(budget) = limit.checked_sub(cost + full) else {
                continue;
            };
            let start = if step == current { offset + 1 } else { 0 };
            // The first offset where ceil(trail * (res - 1 - o) / res) <= budget.
            let first_fit = match (budget * res).checked_div(trail) {
                Some(room) => (res - 1).saturating_sub(room),
                None => 0,
            };
            let at = first_fit.max(start);
            if at < res {
                return Wait::For(Duration::from_ms(step * res + at - now.ms()));
            }
        }
        // Everything has gone once the newest sub-interval stops trailing.
        Wait::For(Instant::from_ms((newest + n + 1) * res).since(now))
    }

    /// When units of sub-interval `newest` stop counting in a window of `n` sub-intervals:
    /// the last millisecond of the sub-interval in which they trail, where their weight is 0.
    #[inline]
    pub(super) fn empty_from(&self, newest: u64, n: u64) -> Instant {
        Instant::from_ms((newest + n + 1) * self.resolution() - 1)
    }

    /// The newest sub-interval with a unit in it.
    #[inline]
    pub(super) fn newest_counted(&self) -> Option<u64> {
        if self.total() == 0 {
            return None;
        }
        let (oldest, newest) = self.span();
        if self.word(self.slot(newest)) != 0 {
            // The latest sub-interval counts units: the usual case, no scan.
            return Some(newest);
        }
        let (from, before) = self.ring_runs(oldest, newest);
        let at = match last_nonzero(before) {
            Some(i) => from.len() + i,
            None => last_nonzero(from)?,
        };
        Some(oldest + at as u64)
    }

    /// What recording `cost` units at `now` under `p` writes; `None` when the record would
    /// break the ring's invariants: parameters or a time out of range, a shape the block
    /// does not have (the caller reshapes first, see [`Limit::reshaped`]), or a counter or
    /// the total past 32 bits (the ring may keep units of a longer window used before).
    #[inline(always)]
    pub(super) fn recording(&self, now: Instant, p: &Params, cost: u64) -> Option<Recording> {
        let now = now.max(self.latest());
        if !p.valid() || now > MAX_TIMESTAMP {
            return None;
        }
        let plan = match self.same_shape(p) {
            true => None,
            false => Some(self.plan(now, p)),
        };
        if plan.as_ref().is_some_and(|plan| !self.fits(p, plan)) {
            return None;
        }
        let current = self.index(now);
        let slot = self.slot(current);
        if plan.is_none() && (self.total() == 0 || current == self.index(self.latest())) {
            // The same shape, in the latest sub-interval (the usual call), or an empty ring
            // (a new key): nothing leaves, and the other counters are 0 already.
            let count = u32::try_from(u64::from(self.word(slot)) + cost).ok()?;
            let total = u32::try_from(self.total() + cost).ok()?;
            return Some(Recording {
                now,
                slot,
                plan,
                count,
                total,
                in_place: true,
            });
        }
        // What the ring holds once moved to `now`, plus the cost.
        let passed = (current - self.index(self.latest())).min(self.ring_n() + 1);
        let leaving = self.ring_sum(current + 1 - passed, current);
        let after_advance = self.total() - leaving.min(self.total());
        let count = u32::try_from(self.count(current) + cost).ok()?;
        let total = u32::try_from(after_advance + cost).ok()?;
        Some(Recording {
            now,
            slot,
            plan,
            count,
            total,
            in_place: false,
        })
    }

    /// The ring a call at `now` (not before `latest`) under `p` needs: `p`'s window, or
    /// longer for the units windows used before still count. A window shorter than the
    /// stored one adds that one to the retention (its last use: the newest unit's
    /// sub-interval); then what `p`'s window dominates or what has passed goes (see
    /// [`Front::record`]). A retention entry as long as the window is kept while pending,
    /// so that calls alternating between two windows keep one block instead of building a
    /// new one each time.
    pub(super) fn plan(&self, now: Instant, p: &Params) -> Plan {
        let res = self.resolution();
        let before = self
            .newest_counted()
            .map(|j| (self.n() * res, Instant::from_ms((j + 1) * res - 1)));
        let mut front = self.front().unwrap_or_default();
        front.record(now, p.window_ms, before, false);
        let front = (!front.is_empty()).then_some(front);
        let (ring, squeezed) = SubWindow::ring_for(p, front.as_ref());
        Plan {
            ring,
            front,
            squeezed,
        }
    }

    /// The call's shape is the stored one and nothing is retained: the block fits as it is,
    /// without planning (the common call, so it skips the plan's scan and front).
    pub(super) fn same_shape(&self, p: &Params) -> bool {
        !self.retained()
            && p.resolution_ms == self.resolution()
            && p.window_ms == self.n() * self.resolution()
            && self.ring_n() == self.n()
    }

    /// The stored block already has the ring `plan` asks for.
    pub(super) fn fits(&self, p: &Params, plan: &Plan) -> bool {
        p.resolution_ms == self.resolution()
            && plan.ring == self.ring_n()
            && plan.front.is_some() == self.retained()
    }

    /// Moves the ring forward to `now`, clearing the sub-intervals it passes.
    pub(super) fn advance(&mut self, now: Instant) {
        let (from, to) = (self.index(self.latest()), self.index(now));
        let cleared = (to - from).min(self.ring_n() + 1);
        if cleared == self.ring_n() + 1 {
            // The whole ring has passed (as for a new window): clear it at once.
            let start = self.counters_start();
            if let Some(counters) = self.words.get_mut(start..) {
                counters.fill(0);
            }
            self.put(TOTAL, 0);
            self.set_latest(now);
            return;
        }
        let mut total = self.word(TOTAL);
        for i in (to + 1 - cleared)..=to {
            total -= self.word(self.slot(i)).min(total);
            self.put_count(i, 0);
        }
        self.put(TOTAL, total);
        self.set_latest(now);
    }

    /// Gives back up to `units`, newest sub-interval first, and answers like
    /// [`SubWindow::peek`].
    pub fn refund(&mut self, now: Instant, units: u64) -> Decision {
        let now = now.max(self.latest());
        self.advance(now);
        let (oldest, newest) = self.span();
        let mut left = units;
        for i in (oldest..=newest).rev() {
            if left == 0 {
                break;
            }
            let c = self.count(i);
            let take = c.min(left);
            self.put_count(i, (c - take) as u32);
            left -= take;
        }
        let total = self.total() - (units - left);
        self.put(TOTAL, total as u32);
        self.peek(now)
    }

    /// The answer to a `COST 0` call under the stored parameters.
    pub fn peek(&self, now: Instant) -> Decision {
        self.evaluate(now, &self.params(), 0)
    }

    /// The counters of sub-intervals `L-r ..= L`, oldest first (see [`SubWindow::from_parts`]).
    pub fn counts(&self) -> impl Iterator<Item = u64> + '_ {
        let newest = self.index(self.latest());
        let r = self.ring_n();
        (0..=r).map(move |k| (newest + k).checked_sub(r).map_or(0, |i| self.count(i)))
    }

    /// The non-zero counters, oldest first, as `(back, count)`: the counter of sub-interval
    /// `L - back`, `L` being that of `latest` (what [`SubWindow::from_sparse`] takes). Skips
    /// runs of zero counters a block at a time.
    pub fn nonzero(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let (first, newest) = self.span();
        let (from, before) = self.ring_runs(first, newest);
        let oldest_back = newest - first;
        [(from, 0), (before, from.len())]
            .into_iter()
            .flat_map(move |(run, offset)| {
                let mut at = 0;
                std::iter::from_fn(move || {
                    let i = at + first_nonzero(run.get(at..)?)?;
                    at = i + 1;
                    let c = run.get(i).copied()?;
                    Some((oldest_back - (offset + i) as u64, u64::from(c)))
                })
            })
    }

    /// Bytes of the block.
    pub fn heap_size(&self) -> usize {
        std::mem::size_of_val(&*self.words)
    }
}

/// Counters checked at once by the scans: an OR of a block vectorises, where a search for
/// the first non-zero counter goes one by one.
const SCAN_BLOCK: usize = 16;

/// The index of the first non-zero counter of `run`.
pub(super) fn first_nonzero(run: &[u32]) -> Option<usize> {
    let mut blocks = run.chunks_exact(SCAN_BLOCK);
    let mut base = 0;
    for block in &mut blocks {
        if block.iter().fold(0, |a, &c| a | c) != 0 {
            return block.iter().position(|&c| c != 0).map(|i| base + i);
        }
        base += SCAN_BLOCK;
    }
    let rest = blocks.remainder();
    rest.iter().position(|&c| c != 0).map(|i| base + i)
}

/// The index of the last non-zero counter of `run`.
pub(super) fn last_nonzero(run: &[u32]) -> Option<usize> {
    let mut blocks = run.rchunks_exact(SCAN_BLOCK);
    let mut end = run.len();
    for block in &mut blocks {
        end -= SCAN_BLOCK;
        if block.iter().fold(0, |a, &c| a | c) != 0 {
            return block.iter().rposition(|&c| c != 0).map(|i| end + i);
        }
    }
    let rest = blocks.remainder();
    rest.iter().rposition(|&c| c != 0)
}

/// `ceil(trail * (res - 1 - offset) / res)`: the trailing units the window still counts.
pub(super) fn weighted(trail: u64, offset: u64, res: u64) -> u64 {
    // trail < 2^32 and res < 2^32, so the product fits.
    (trail * (res - 1 - offset)).div_ceil(res)
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
