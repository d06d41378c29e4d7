//! The sub-interval window behind `RL.SUBWIN`: a rolling window approximated by a ring of
//! counters, one per `resolution_ms`, plus the sub-interval that has just left the window,
//! weighted by how much of it the window still covers.
//!
//! Sub-intervals are aligned on multiples of `resolution_ms` since the Unix epoch, so the
//! same call gives the same answer on every server. At time `now`, in sub-interval `I` at
//! offset `o`, the window is the `window_ms` milliseconds ending at `now`; it covers
//! sub-intervals `I-n+1 ..= I` fully or up to `now`, and `res-1-o` milliseconds of the
//! trailing sub-interval `I-n`. The estimate is
//!
//! ```text
//! used = sum(count[I-n+1 ..= I]) + ceil(count[I-n] * (res - 1 - o) / res)
//! ```
//!
//! rounded up, so the approximation never rounds in the client's favour. With
//! `resolution_ms = 1` the trailing weight is always 0 and the window is exact.
//!
//! The whole state is one allocation of 32-bit words, a 20-byte header and `n + 1` counters,
//! so a key costs the same whatever its limit; the key holds a thin pointer to it. The header
//! keeps the total of the counters, so a call costs O(1) plus the sub-intervals it has to
//! clear or, when refused, scan for the wait.
//!
//! Units leave once no window the key was used with since they were counted can count them.
//! A call with a shorter window than the one stored leaves that window units to count: the
//! ring then keeps its length (a *retention*: the front of windows used before, see
//! [`Front`], in ten more header words) while the call counts only its own window, and
//! shrinks at the first call once every longer window has let go of the units it counted. A new
//! resolution moves the units as before, into a ring long enough for what is retained (at
//! most [`MAX_SUBINTERVALS`] sub-intervals; older units then wait in the oldest one).

use super::retention::{Front, MAX_KEPT};
use super::{Decision, Limit, Millis, Wait, MAX_TIMESTAMP};

/// The largest limit. Counters are 32-bit and so is their total, which holds at most the
/// window plus its trailing sub-interval: twice the limit.
pub const MAX_LIMIT: u64 = (1 << 31) - 1;
/// The longest window: 31 days, as for the other windows.
pub const MAX_WINDOW_MS: u64 = 31 * 24 * 3600 * 1000;
/// The most sub-intervals one window may be split into.
pub const MAX_SUBINTERVALS: u64 = 4096;

/// The parameters of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub limit: u64,
    pub window_ms: u64,
    pub resolution_ms: u64,
}

impl Params {
    /// In range, with the window a whole number (at most [`MAX_SUBINTERVALS`]) of
    /// sub-intervals.
    pub fn valid(&self) -> bool {
        (1..=MAX_LIMIT).contains(&self.limit)
            && (1..=MAX_WINDOW_MS).contains(&self.window_ms)
            && self.resolution_ms >= 1
            && self.window_ms.is_multiple_of(self.resolution_ms)
            && self.window_ms / self.resolution_ms <= MAX_SUBINTERVALS
    }

    fn subintervals(&self) -> u64 {
        self.window_ms / self.resolution_ms
    }
}

// The header words, then `r + 1` counters: slot `i % (r + 1)` counts sub-interval `i`. The
// ring always describes sub-intervals `L-r ..= L`, where `L` is the latest one seen; `r` is
// the window's `n`, or more while a retention is pending. Timestamps fit in 48 bits, so the
// first word holds `r`, the retention flag and the top of `latest`.
const RING_AND_LATEST_HIGH: usize = 0;
const LIMIT: usize = 1;
const RESOLUTION: usize = 2;
const LATEST_LOW: usize = 3;
const TOTAL: usize = 4;
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
/// A bit the first word of a ring never has (between the ring's length and
/// [`RETAINED`]), for a value to tell itself apart from a ring (see `value::Unreadable`).
pub const NOT_A_RING: u32 = 0x4000;

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
    words: Box<[u32]>,
}

/// Why a persisted state was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

/// The ring a call needs: `ring` sub-intervals of the call's resolution before the latest,
/// and, when that is more than the call's window, until when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    ring: u64,
    front: Option<Front>,
    /// What is retained is longer than the longest ring: older units go to its oldest
    /// sub-interval instead of leaving.
    squeezed: bool,
}

/// What [`SubWindow::recording`] found a record writes.
struct Recording {
    now: Millis,
    plan: Option<Plan>,
    /// The current sub-interval's counter and the total, the cost included.
    count: u32,
    total: u32,
    /// In the latest sub-interval (or an empty ring) of the same shape: nothing to clear.
    in_place: bool,
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
    fn ring_for(p: &Params, front: Option<&Front>) -> (u64, bool) {
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
    fn shaped(p: &Params, ring: u64, front: Option<&Front>) -> SubWindow {
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
    fn set_front(&mut self, n: u32, front: &Front) {
        let entries = front.entries();
        self.put(WINDOW_AND_COUNT, n | ((entries.len() as u32) << 16));
        for k in 0..MAX_KEPT {
            let (w, last) = entries.get(k).copied().unwrap_or_default();
            // Windows are at most MAX_WINDOW_MS < 2^32, times below 2^48.
            self.put(FRONT + 3 * k, w as u32);
            self.put(FRONT + 3 * k + 1, last as u32);
            self.put(FRONT + 3 * k + 2, (last >> 32) as u32);
        }
    }

    /// Rebuilds a state from its persisted parts: the retention, if any, as
    /// `(window_ms, last_used)` pairs (see [`SubWindow::retention`]; the ring then spans
    /// [`SubWindow::counters_for`]), and the counters of sub-intervals `L-r ..= L`, oldest
    /// first, where `L` is the sub-interval of `latest`.
    pub fn from_parts(
        p: Params,
        latest: Millis,
        retention: Option<&[(u64, Millis)]>,
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
        latest: Millis,
        retention: Option<&[(u64, Millis)]>,
        nonzero: impl Iterator<Item = (u64, u64)>,
    ) -> Result<Self, Corrupt> {
        SubWindow::empty_for(p, latest, retention)?.fill(latest, nonzero)
    }

    /// The empty state [`SubWindow::from_parts`] fills: its parameters and retention checked.
    fn empty_for(
        p: Params,
        latest: Millis,
        retention: Option<&[(u64, Millis)]>,
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
                let max_time = latest + MAX_WINDOW_MS;
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
    fn fill(
        mut self,
        latest: Millis,
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

    fn word(&self, i: usize) -> u32 {
        self.words.get(i).copied().unwrap_or(0)
    }

    fn put(&mut self, i: usize, v: u32) {
        if let Some(w) = self.words.get_mut(i) {
            *w = v;
        }
    }

    fn retained(&self) -> bool {
        self.word(RING_AND_LATEST_HIGH) & RETAINED != 0
    }

    /// The sub-intervals the ring holds before the latest one.
    fn ring_n(&self) -> u64 {
        u64::from(self.word(RING_AND_LATEST_HIGH) & RING_MASK)
    }

    /// The window, in sub-intervals.
    fn n(&self) -> u64 {
        if self.retained() {
            u64::from(self.word(WINDOW_AND_COUNT) & 0xffff)
        } else {
            self.ring_n()
        }
    }

    fn counters_start(&self) -> usize {
        if self.retained() {
            HEADER_WORDS + RETENTION_WORDS
        } else {
            HEADER_WORDS
        }
    }

    /// The retention, when the block has one.
    fn front(&self) -> Option<Front> {
        if !self.retained() {
            return None;
        }
        let len = ((self.word(WINDOW_AND_COUNT) >> 16) as usize).min(MAX_KEPT);
        let entries: Vec<(u64, Millis)> = (0..len)
            .map(|k| {
                let w = u64::from(self.word(FRONT + 3 * k));
                let low = u64::from(self.word(FRONT + 3 * k + 1));
                let high = u64::from(self.word(FRONT + 3 * k + 2));
                (w, (high << 32) | low)
            })
            .collect();
        // Written by `set_front` from a valid front, read back as it was.
        Front::from_entries(&entries, 0, true, u64::MAX, u64::MAX).ok()
    }

    /// The windows used before the current one that may still count a unit, as
    /// `(window_ms, last_used)` (`last_used` the last millisecond of the newest sub-interval
    /// they counted), shortest first; the ring spans the longest. Empty when the ring is the
    /// window's and nothing is retained.
    pub fn retention(&self) -> Vec<(u64, Millis)> {
        self.front().map_or_else(Vec::new, |f| f.entries().to_vec())
    }

    fn resolution(&self) -> u64 {
        u64::from(self.word(RESOLUTION)).max(1)
    }

    fn total(&self) -> u64 {
        u64::from(self.word(TOTAL))
    }

    pub fn params(&self) -> Params {
        Params {
            limit: u64::from(self.word(LIMIT)),
            window_ms: self.n() * self.resolution(),
            resolution_ms: self.resolution(),
        }
    }

    fn set_latest(&mut self, at: Millis) {
        let low = self.word(RING_AND_LATEST_HIGH) & 0xffff;
        // at <= MAX_TIMESTAMP < 2^48
        self.put(RING_AND_LATEST_HIGH, low | (((at >> 32) as u32) << 16));
        self.put(LATEST_LOW, at as u32);
    }

    /// The sub-interval `t` falls in.
    fn index(&self, t: Millis) -> u64 {
        t / self.resolution()
    }

    /// The sub-intervals the ring describes.
    fn span(&self) -> (u64, u64) {
        let newest = self.index(self.latest());
        (newest.saturating_sub(self.ring_n()), newest)
    }

    fn slot(&self, i: u64) -> usize {
        self.counters_start() + (i % (self.ring_n() + 1)) as usize
    }

    /// The counter of sub-interval `i`, 0 outside the ring.
    fn count(&self, i: u64) -> u64 {
        let (oldest, newest) = self.span();
        if (oldest..=newest).contains(&i) {
            u64::from(self.word(self.slot(i)))
        } else {
            0
        }
    }

    /// Sets the counter of sub-interval `i`, in the ring, leaving the total as it is.
    fn put_count(&mut self, i: u64, c: u32) {
        self.put(self.slot(i), c);
    }

    /// The counters of sub-intervals `first ..= last`, which must lie in the ring, in order:
    /// the run up to the end of the block, then the run that wrapped around.
    fn ring_runs(&self, first: u64, last: u64) -> (&[u32], &[u32]) {
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
    fn ring(&self, first: u64, last: u64) -> impl DoubleEndedIterator<Item = u64> + '_ {
        let (from, before) = self.ring_runs(first, last);
        from.iter().chain(before).map(|&c| u64::from(c))
    }

    /// The units of sub-intervals `first ..= last`, which must lie in the ring.
    fn ring_sum(&self, first: u64, last: u64) -> u64 {
        let (from, before) = self.ring_runs(first, last);
        let sum = |run: &[u32]| run.iter().map(|&c| u64::from(c)).sum::<u64>();
        sum(from) + sum(before)
    }

    /// The first sub-interval of `first ..= last` (in the ring) with a unit in it.
    fn first_counted(&self, first: u64, last: u64) -> Option<u64> {
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
    fn units_after(&self, t: u64) -> u64 {
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
    fn estimate(&self, now: Millis, n: u64) -> (u64, u64) {
        let res = self.resolution();
        match self.index(now).checked_sub(n) {
            // Everything up to the trailing sub-interval has left the full window.
            Some(t) => (self.units_after(t), weighted(self.count(t), now % res, res)),
            None => (self.total(), 0),
        }
    }

    /// How long until `cost` more units fit in a window of `n` sub-intervals, given the
    /// full part of the estimate at `now`; `cost <= limit`, and the call at `now` was
    /// refused.
    fn wait(&self, now: Millis, n: u64, limit: u64, cost: u64, mut full: u64) -> Wait {
        let res = self.resolution();
        let (oldest, newest) = self.span();
        let current = self.index(now);
        let offset = now % res;
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
                return Wait::Ms(step * res + at - now);
            }
        }
        // Everything has gone once the newest sub-interval stops trailing.
        Wait::Ms(((newest + n + 1) * res).saturating_sub(now))
    }

    /// When units of sub-interval `newest` stop counting in a window of `n` sub-intervals:
    /// the last millisecond of the sub-interval in which they trail, where their weight is 0.
    fn empty_from(&self, newest: u64, n: u64) -> Millis {
        (newest + n + 1) * self.resolution() - 1
    }

    /// The newest sub-interval with a unit in it.
    fn newest_counted(&self) -> Option<u64> {
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
    fn recording(&self, now: Millis, p: &Params, cost: u64) -> Option<Recording> {
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
        if plan.is_none() && (current == self.index(self.latest()) || self.total() == 0) {
            // The same shape, in the latest sub-interval (the usual call), or an empty ring
            // (a new key): nothing leaves, and the other counters are 0 already.
            let count = u32::try_from(u64::from(self.word(self.slot(current))) + cost).ok()?;
            let total = u32::try_from(self.total() + cost).ok()?;
            return Some(Recording {
                now,
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
    fn plan(&self, now: Millis, p: &Params) -> Plan {
        let res = self.resolution();
        let before = self
            .newest_counted()
            .map(|j| (self.n() * res, (j + 1) * res - 1));
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
    fn same_shape(&self, p: &Params) -> bool {
        !self.retained()
            && p.resolution_ms == self.resolution()
            && p.window_ms == self.n() * self.resolution()
            && self.ring_n() == self.n()
    }

    /// The stored block already has the ring `plan` asks for.
    fn fits(&self, p: &Params, plan: &Plan) -> bool {
        p.resolution_ms == self.resolution()
            && plan.ring == self.ring_n()
            && plan.front.is_some() == self.retained()
    }

    /// Moves the ring forward to `now`, clearing the sub-intervals it passes.
    fn advance(&mut self, now: Millis) {
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
    pub fn refund(&mut self, now: Millis, units: u64) -> Decision {
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
    pub fn peek(&self, now: Millis) -> Decision {
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
fn first_nonzero(run: &[u32]) -> Option<usize> {
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
fn last_nonzero(run: &[u32]) -> Option<usize> {
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
fn weighted(trail: u64, offset: u64, res: u64) -> u64 {
    // trail < 2^32 and res < 2^32, so the product fits.
    (trail * (res - 1 - offset)).div_ceil(res)
}

impl Limit for SubWindow {
    type Params = Params;

    /// Counts `p`'s window only, whatever else the ring keeps.
    fn evaluate(&self, now: Millis, p: &Params, cost: u64) -> Decision {
        let now = now.max(self.latest());
        let n = p.subintervals().min(self.ring_n());
        // An empty ring (a new key) counts nothing.
        let (full, trailing) = match self.total() {
            0 => (0, 0),
            _ => self.estimate(now, n),
        };
        let used = full + trailing;
        let allowed = used.saturating_add(cost) <= p.limit;
        let retry_after = if allowed {
            Wait::None
        } else if cost > p.limit {
            Wait::Never
        } else {
            self.wait(now, n, p.limit, cost, full)
        };
        let newest = if allowed && cost > 0 {
            Some(self.index(now))
        } else {
            self.newest_counted()
        };
        let after = if allowed { used + cost } else { used };
        Decision {
            allowed,
            limit: p.limit,
            remaining: p.limit.saturating_sub(after),
            retry_after,
            reset_after_ms: newest.map_or(0, |i| self.empty_from(i, n).saturating_sub(now)),
        }
    }

    fn record(&mut self, now: Millis, p: &Params, cost: u64) -> bool {
        let Some(r) = self.recording(now, p, cost) else {
            return false;
        };
        let current = self.index(r.now);
        if r.in_place {
            let slot = self.slot(current);
            self.put(slot, r.count);
        } else {
            self.advance(r.now);
            self.put_count(current, r.count);
            if let Some(front) = r.plan.as_ref().and_then(|plan| plan.front.as_ref()) {
                // p is valid, so its window fits in 16 bits.
                self.set_front(p.subintervals() as u32, front);
            }
        }
        self.put(TOTAL, r.total);
        self.put(LIMIT, p.limit as u32);
        self.set_latest(r.now);
        true
    }

    fn can_record(&self, now: Millis, p: &Params, cost: u64) -> bool {
        self.recording(now, p, cost).is_some()
    }

    /// A retention keeps the key too, while the window it is for still counts a unit.
    fn empty_at(&self) -> Option<Millis> {
        let newest = self.newest_counted()?;
        let own = self.empty_from(newest, self.n());
        // The last millisecond of the newest unit's sub-interval, as a front's last uses.
        let newest_ms = (newest + 1) * self.resolution() - 1;
        let kept = self
            .front()
            .and_then(|f| f.empty_at(newest_ms))
            .unwrap_or(0);
        Some(own.max(kept))
    }

    fn latest(&self) -> Millis {
        let high = u64::from(self.word(RING_AND_LATEST_HIGH) >> 16);
        (high << 32) | u64::from(self.word(LATEST_LOW))
    }

    /// A new block, at `now`, when `p` needs another ring: a new window or resolution, a window
    /// shorter than the stored one (the ring is kept, with a retention), or a retention
    /// that is over (the ring shrinks to the window). Every counted unit that a window used
    /// since still counts moves to the new sub-interval holding the last millisecond of its
    /// old one (or `latest`, if earlier), so none is lost; when each stops counting is
    /// approximate, as the sub-intervals it was spread over are gone.
    fn reshaped(&self, now: Millis, p: &Params) -> Option<SubWindow> {
        if self.same_shape(p) {
            return None;
        }
        let now = now.max(self.latest());
        let plan = self.plan(now, p);
        if self.fits(p, &plan) {
            return None;
        }
        let latest = self.latest();
        // The new ring is placed at the call's time, so that it holds what the plan keeps.
        let mut new = SubWindow::shaped(p, plan.ring, plan.front.as_ref());
        new.set_latest(now);
        let res = self.resolution();
        let (oldest, newest) = self.span();
        let (new_oldest, _) = new.span();
        let mut total: u64 = 0;
        for (i, c) in (oldest..=newest).zip(self.ring(oldest, newest)) {
            let j = new.index(((i + 1) * res - 1).min(latest));
            let j = match j {
                _ if c == 0 => continue,
                j if j >= new_oldest => j,
                _ if plan.squeezed => new_oldest,
                _ => continue,
            };
            let sum = (new.count(j) + c).min(MAX_LIMIT);
            total += sum - new.count(j);
            new.put_count(j, sum as u32);
        }
        // At most the old total, which fitted.
        new.put(TOTAL, total.min(u64::from(u32::MAX)) as u32);
        Some(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T0: Millis = 1_700_000_000_000; // a multiple of 1000

    fn p(limit: u64, window_ms: u64, resolution_ms: u64) -> Params {
        Params {
            limit,
            window_ms,
            resolution_ms,
        }
    }

    fn run_table(p: &Params, rows: &[crate::algo::table::Row]) {
        crate::algo::table::run(SubWindow::new(p), p, T0, rows);
    }

    #[test]
    fn counts_a_rolling_window_with_a_weighted_trailing_sub_interval() {
        // 4 per second in 4 sub-intervals of 250 ms.
        run_table(
            &p(4, 1000, 250),
            &[
                (0, 2, [1, 4, 2, 0, 1249]),
                (100, 2, [1, 4, 0, 0, 1149]),
                // Full: waits until the trailing weight of sub-interval 0 has fallen to 0.
                // Full until sub-interval 0, trailing, weighs 3: ceil(4 * 187/250) at 1062.
                (200, 1, [0, 4, 0, 862, 1049]),
                (999, 1, [0, 4, 0, 63, 250]),
                (1000, 1, [0, 4, 0, 62, 249]),
                // At 1125 the weight is 124/250: ceil(4 * 0.496) = 2, so 2 fit.
                (1125, 2, [1, 4, 0, 0, 1124]),
                // In the last millisecond of a sub-interval the trailing one weighs nothing.
                (1249, 1, [1, 4, 1, 0, 1000]),
            ],
        );
    }

    #[test]
    fn resolution_of_one_millisecond_is_exact() {
        run_table(
            &p(2, 100, 1),
            &[
                (0, 1, [1, 2, 1, 0, 100]),
                (50, 1, [1, 2, 0, 0, 100]),
                (99, 1, [0, 2, 0, 1, 51]),
                (100, 1, [1, 2, 0, 0, 100]),
                (149, 1, [0, 2, 0, 1, 51]),
            ],
        );
    }

    #[test]
    fn cost_beyond_the_limit_never_fits_and_cost_zero_peeks() {
        run_table(
            &p(5, 1000, 100),
            &[
                (0, 6, [0, 5, 5, -1, 0]),
                (0, 0, [1, 5, 5, 0, 0]),
                (10, 5, [1, 5, 0, 0, 1089]),
                (20, 0, [1, 5, 0, 0, 1079]),
            ],
        );
    }

    #[test]
    fn refund_takes_back_the_newest_first_and_time_never_runs_backwards() {
        let params = p(10, 1000, 100);
        let mut w = SubWindow::new(&params);
        w.acquire(T0, &params, 3);
        w.acquire(T0 + 500, &params, 4);
        // Earlier than the latest call: counted as happening at +500.
        assert_eq!(
            w.acquire(T0 + 10, &params, 1).as_reply(),
            [1, 10, 2, 0, 1099]
        );
        assert_eq!(w.refund(T0 + 600, 6).as_reply(), [1, 10, 8, 0, 499]);
        assert_eq!(w.count(T0 / 100 + 5), 0);
        assert_eq!(w.count(T0 / 100), 2);
        assert_eq!(w.refund(T0 + 600, 9).as_reply(), [1, 10, 10, 0, 0]);
        assert_eq!(w.empty_at(), None);
    }

    #[test]
    fn memory_is_a_header_and_one_counter_per_sub_interval() {
        let w = SubWindow::new(&p(1_000_000, 3_600_000, 60_000));
        assert_eq!(w.heap_size(), 20 + 4 * 61);
        let big = SubWindow::new(&p(1, 4096, 1));
        assert_eq!(big.heap_size(), 20 + 4 * 4097);
    }

    #[test]
    fn a_new_shape_keeps_units_at_the_end_of_their_sub_interval() {
        let old = p(10, 1000, 100);
        let mut w = SubWindow::new(&old);
        w.acquire(T0 + 50, &old, 4);
        w.acquire(T0 + 420, &old, 6);
        // One unit fits again at +1024 in the old shape (4 trailing units weigh 3).
        assert_eq!(w.peek(T0 + 420).remaining, 0);
        assert_eq!(
            w.evaluate(T0 + 420, &old, 1).retry_after,
            Wait::Ms(1024 - 420)
        );
        // Twice the resolution: the units move to 99 and 420 (latest), sub-intervals 0 and 2,
        // and the unit fits at +1049, later than in the old shape.
        let new = p(10, 1000, 200);
        let mut r = w.reshaped(T0 + 420, &new).unwrap();
        assert_eq!(r.peek(T0 + 420).remaining, 0);
        assert_eq!(
            r.acquire(T0 + 420, &new, 1).retry_after,
            Wait::Ms(1049 - 420)
        );
        assert!(w.reshaped(T0 + 420, &p(3, 1000, 100)).is_none());
    }

    /// A call as the command layer makes it: on a reshaped copy when the call needs one,
    /// kept only when the call records something.
    fn call(w: &mut SubWindow, now: Millis, p: &Params, cost: u64) -> Decision {
        let mut next = w.reshaped(now, p).unwrap_or_else(|| w.clone());
        let d = next.acquire(now, p, cost);
        if d.allowed && cost > 0 {
            *w = next;
        }
        d
    }

    /// The issue's scenario: three calls fill 3 per 10 s; a call with a 1 s window, two
    /// seconds later, must not make the 10 s window forget them.
    #[test]
    fn a_shorter_window_keeps_what_the_longer_one_counts() {
        let long = p(3, 10_000, 1000);
        let short = p(5, 1000, 1000);
        let mut w = SubWindow::new(&long);
        for t in [0, 100, 200] {
            assert!(call(&mut w, T0 + t, &long, 1).allowed);
        }
        // The short window counts only its own second (and the empty one trailing).
        assert_eq!(
            call(&mut w, T0 + 2500, &short, 1).as_reply(),
            [1, 5, 4, 0, 1499]
        );
        // The ring still holds the 10 s, until the units at +0..1000 have left it.
        assert_eq!(w.retention(), [(10_000, T0 + 999)]);
        assert_eq!(w.params(), short);
        assert_eq!(w.empty_at(), Some(T0 + 10_999));
        assert_eq!(w.heap_size(), 4 * (5 + 10 + 11));
        // 3 per 10 s still counts all four: refused until 2 units have left.
        assert_eq!(
            call(&mut w, T0 + 2600, &long, 1).as_reply(),
            [0, 3, 0, 8066, 10_399]
        );
        assert!(!call(&mut w, T0 + 2700, &long, 1).allowed);
    }

    #[test]
    fn the_ring_shrinks_once_the_longer_window_has_passed() {
        let long = p(3, 10_000, 1000);
        let short = p(5, 1000, 1000);
        let mut w = SubWindow::new(&long);
        call(&mut w, T0, &long, 3);
        let mut t = 2000;
        while t < 10_999 {
            assert!(call(&mut w, T0 + t, &short, 1).allowed, "at +{t}");
            assert_eq!(w.retention(), [(10_000, T0 + 999)], "at +{t}");
            t += 500;
        }
        assert!(call(&mut w, T0 + 10_999, &short, 1).allowed);
        assert!(w.retention().is_empty());
        assert_eq!(w.heap_size(), 4 * (5 + 2));
        assert_eq!(w.empty_at(), Some(T0 + 11_999));
    }

    #[test]
    fn a_shorter_window_at_a_new_resolution_keeps_the_units_too() {
        let long = p(3, 10_000, 1000);
        let fine = p(5, 1000, 100);
        let mut w = SubWindow::new(&long);
        call(&mut w, T0, &long, 3);
        assert!(call(&mut w, T0 + 2500, &fine, 1).allowed);
        // 10 s in sub-intervals of 100 ms.
        assert_eq!(w.retention(), [(10_000, T0 + 999)]);
        assert_eq!(w.heap_size(), 4 * (5 + 10 + 101));
        assert!(!call(&mut w, T0 + 2600, &long, 1).allowed);
        // Back at 1 s resolution the ring is the window's again (the retention, as long, runs
        // on), and still holds the units.
        assert!(call(&mut w, T0 + 2600, &p(10, 10_000, 1000), 1).allowed);
        assert_eq!(w.retention(), [(10_000, T0 + 999)]);
        assert_eq!(w.heap_size(), 4 * (5 + 10 + 11));
        assert_eq!(w.peek(T0 + 2600).remaining, 10 - 5);
    }

    #[test]
    fn units_older_than_the_longest_ring_wait_in_its_oldest_sub_interval() {
        // An hour in minutes, then a 1 s window in milliseconds: the hour would need 3.6
        // million sub-intervals, the ring holds 4096.
        let hour = p(3, 3_600_000, 60_000);
        let ms = p(5, 1000, 1);
        let mut w = SubWindow::new(&hour);
        call(&mut w, T0, &hour, 1);
        call(&mut w, T0 + 300_000, &hour, 1);
        assert!(call(&mut w, T0 + 300_500, &ms, 1).allowed);
        assert_eq!(w.heap_size(), 4 * (5 + 10 + 4097));
        assert_eq!(w.counts().sum::<u64>(), 3);
        // The unit from +0 still counts for the hour: refused.
        assert!(!call(&mut w, T0 + 300_600, &hour, 1).allowed);
    }

    #[test]
    fn alternating_windows_keep_one_block_and_a_longer_window_ends_it() {
        let long = p(100, 10_000, 1000);
        let short = p(100, 1000, 1000);
        let mut w = SubWindow::new(&long);
        call(&mut w, T0, &long, 1);
        call(&mut w, T0 + 2000, &short, 1);
        // Two services alternating: the block stays (no call needs a reshaped one), changed
        // in place. (`call` works on a copy, so the block's address says nothing here.)
        for t in (3000..9000).step_by(1000) {
            assert!(w.reshaped(T0 + t, &long).is_none(), "at +{t}");
            assert!(call(&mut w, T0 + t, &long, 1).allowed);
            assert!(w.reshaped(T0 + t + 500, &short).is_none(), "at +{t}");
            assert!(call(&mut w, T0 + t + 500, &short, 1).allowed);
        }
        // The latest shrink, at +8500, keeps the units of +8000 for 10 s.
        assert_eq!(w.retention(), [(10_000, T0 + 8999)]);
        // A window longer than the ring ends the retention (15 units in it with this one).
        assert!(call(&mut w, T0 + 9000, &p(20, 20_000, 1000), 1).allowed);
        assert!(w.retention().is_empty());
        assert_eq!(w.peek(T0 + 9000).remaining, 20 - 15);
    }

    /// Issue 9's review, on a ring: one 10 s call, then 5 s and 1 s calls alternating.
    /// Once the 10 s window has passed, the ring spans 5 s.
    #[test]
    fn alternating_shorter_windows_do_not_carry_an_old_longer_one() {
        let ten = p(1000, 10_000, 1000);
        let five = p(1000, 5000, 1000);
        let one = p(1000, 1000, 1000);
        let mut w = SubWindow::new(&ten);
        assert!(call(&mut w, T0, &ten, 1).allowed);
        let mut t = 300;
        while t < 60_000 {
            let q = if (t / 300) % 2 == 1 { &five } else { &one };
            assert!(call(&mut w, T0 + t, q, 1).allowed, "at +{t}");
            if t >= 11_000 {
                assert!(w.retention().iter().all(|e| e.0 < 10_000), "at +{t}");
                assert!(w.heap_size() <= 4 * (5 + 10 + 6), "at +{t}");
            }
            t += 300;
        }
    }

    #[test]
    fn from_parts_checks_every_field() {
        let params = p(10, 1000, 100);
        let mut w = SubWindow::new(&params);
        w.acquire(T0 + 50, &params, 4);
        let mut counts = vec![0; 11];
        counts[10] = 4;
        assert_eq!(SubWindow::from_parts(params, T0 + 50, None, &counts), Ok(w));
        assert!(SubWindow::from_parts(params, T0, None, &counts[1..]).is_err());
        assert!(SubWindow::from_parts(p(10, 1000, 300), T0, None, &counts).is_err());
        counts[3] = 1 << 32;
        assert!(SubWindow::from_parts(params, T0, None, &counts).is_err());
        // Before the epoch there is nothing to count.
        assert!(SubWindow::from_parts(params, 50, None, &[1; 11]).is_err());
    }

    /// The obviously-correct model: every recorded unit kept with its time, the estimate
    /// summed from scratch, the wait found by trying every millisecond.
    #[derive(Default)]
    struct Naive {
        records: Vec<(Millis, u64)>,
        latest: Millis,
    }

    impl Naive {
        fn used(&self, now: Millis, p: &Params) -> u64 {
            let (res, n) = (p.resolution_ms, p.window_ms / p.resolution_ms);
            let current = now / res;
            let mut full = 0;
            let mut trail = 0;
            for &(t, c) in &self.records {
                let i = t / res;
                if i <= current && i + n > current {
                    full += c;
                } else if i + n == current {
                    trail += c;
                }
            }
            full + (trail * (res - 1 - now % res)).div_ceil(res)
        }

        fn acquire(&mut self, now: Millis, p: &Params, cost: u64) -> (bool, u64, Wait, u64) {
            let now = now.max(self.latest);
            let used = self.used(now, p);
            let allowed = used + cost <= p.limit;
            if allowed && cost > 0 {
                self.records.push((now, cost));
                self.latest = now;
            }
            let wait = if allowed {
                Wait::None
            } else if cost > p.limit {
                Wait::Never
            } else {
                let d = (1..).find(|d| self.used(now + d, p) + cost <= p.limit);
                Wait::Ms(d.unwrap_or(0))
            };
            let reset = (0..=p.window_ms + p.resolution_ms)
                .find(|d| self.used(now + d, p) == 0)
                .unwrap_or(u64::MAX);
            let after = if allowed { used + cost } else { used };
            (allowed, p.limit.saturating_sub(after), wait, reset)
        }
    }

    /// The rule, naively, at one resolution: each unit remembers the longest window (in
    /// sub-intervals) of the calls recorded since it was counted, and leaves at a recorded
    /// call once that window no longer counts it, even as the trailing one.
    /// The ring may keep more (a retention keeps the longest of several), never less.
    #[derive(Default)]
    struct Rule {
        records: Vec<(Millis, u64, u64)>,
    }

    impl Rule {
        fn record(&mut self, now: Millis, p: &Params, cost: u64) {
            let (res, n) = (p.resolution_ms, p.subintervals());
            for r in &mut self.records {
                r.2 = r.2.max(n);
            }
            // In the last millisecond of its trailing sub-interval a unit weighs nothing.
            self.records
                .retain(|&(t, _, m)| (t / res + m + 1) * res - 1 > now);
            self.records.push((now, cost, n));
        }

        fn kept(&self) -> Naive {
            Naive {
                records: self.records.iter().map(|&(t, c, _)| (t, c)).collect(),
                latest: 0,
            }
        }
    }

    /// [`SubWindow::nonzero`] is [`SubWindow::counts`] without its zeros, and
    /// [`SubWindow::from_sparse`] rebuilds the state from it.
    fn sparse_round_trip(w: &SubWindow) -> Result<(), TestCaseError> {
        let r = w.counts().count() as u64 - 1;
        let sparse: Vec<(u64, u64)> = w
            .counts()
            .enumerate()
            .filter(|&(_, c)| c != 0)
            .map(|(k, c)| (r - k as u64, c))
            .collect();
        prop_assert_eq!(w.nonzero().collect::<Vec<_>>(), sparse.clone());
        let kept = w.retention();
        let kept = (!kept.is_empty()).then_some(&kept[..]);
        let back = SubWindow::from_sparse(w.params(), w.latest(), kept, sparse.into_iter());
        prop_assert_eq!(back.as_ref(), Ok(w));
        Ok(())
    }

    proptest! {
        /// The block scans find what a counter-by-counter search finds.
        #[test]
        fn scans_find_the_first_and_last_counted(
            run in prop::collection::vec(prop_oneof![4 => Just(0u32), 1 => 1u32..5], 0..80),
        ) {
            prop_assert_eq!(first_nonzero(&run), run.iter().position(|&c| c != 0));
            prop_assert_eq!(last_nonzero(&run), run.iter().rposition(|&c| c != 0));
        }

        /// Windows that change from call to call, at one resolution: each call counts at
        /// least what the rule keeps and at most everything ever recorded, so it allows
        /// whatever keeping everything would, and nothing the rule refuses. Once one window
        /// has been used alone for longer than any, the ring is that window's again.
        #[test]
        fn changing_windows_keep_what_the_rule_keeps(
            res in 1u64..6,
            pool in prop::collection::vec((1u64..10, 1u64..9), 2..4),
            steps in prop::collection::vec(
                (0usize..4, 0u64..20, 0u64..4, prop::bool::weighted(0.1)), 1..200),
        ) {
            let pool: Vec<Params> = pool.iter().map(|&(l, n)| p(l, n * res, res)).collect();
            let widest = pool.iter().map(|q| q.subintervals()).max().unwrap();
            let mut w = SubWindow::new(&pool[0]);
            let mut rule = Rule::default();
            let mut all = Naive::default();
            let mut now = T0;
            let mut run: Option<(usize, Millis)> = None;
            for (pick, gap, cost, back) in steps {
                let i = pick % pool.len();
                let q = &pool[i];
                let at = if back { now.saturating_sub(gap) } else { now + gap };
                now = now.max(at);
                let t = w.latest().max(at);
                let mut next = w.reshaped(at, q).unwrap_or_else(|| w.clone());
                let (full, trail) = next.estimate(t, q.subintervals());
                let real = full + trail;
                let (least, most) = (rule.kept().used(t, q), all.used(t, q));
                prop_assert!(least <= real && real <= most, "{} <= {} <= {}", least, real, most);
                let d = next.acquire(at, q, cost);
                prop_assert!(most + cost > q.limit || d.allowed, "keeping everything allows it");
                prop_assert!(!d.allowed || least + cost <= q.limit, "the rule refuses it");
                if d.allowed && cost > 0 {
                    w = next;
                    rule.record(t, q, cost);
                    all.records.push((t, cost));
                    run = match run {
                        Some((j, since)) if j == i => Some((j, since)),
                        _ => Some((i, t)),
                    };
                    prop_assert_eq!(w.total(), w.counts().sum::<u64>());
                    sparse_round_trip(&w)?;
                    if let Some((_, since)) = run.filter(|&(_, since)| t / res > since / res + widest) {
                        prop_assert!(w.retention().is_empty(), "used alone since {}", since);
                        prop_assert_eq!(w.heap_size(), 4 * (5 + q.subintervals() as usize + 1));
                    }
                }
            }
        }

        #[test]
        fn matches_the_naive_model(
            limit in 1u64..10,
            n in 1u64..6,
            res in 1u64..7,
            steps in prop::collection::vec((0u64..20, 0u64..4, prop::bool::weighted(0.1)), 1..120),
            near_epoch in any::<bool>(),
        ) {
            let params = p(limit, n * res, res);
            let mut w = SubWindow::new(&params);
            let mut naive = Naive::default();
            let mut now = if near_epoch { 0 } else { T0 };
            for (gap, cost, back) in steps {
                let at = if back { now.saturating_sub(gap) } else { now + gap };
                now = now.max(at);
                let d = w.acquire(at, &params, cost);
                let want = naive.acquire(at, &params, cost);
                prop_assert_eq!((d.allowed, d.remaining, d.retry_after, d.reset_after_ms), want);
                prop_assert_eq!(w.total(), w.counts().sum::<u64>());
                sparse_round_trip(&w)?;
            }
        }

        #[test]
        fn refund_matches_removing_the_newest_units(
            costs in prop::collection::vec((0u64..30, 1u64..4), 1..20),
            refund in 0u64..40,
        ) {
            let params = p(1000, 100, 10);
            let mut w = SubWindow::new(&params);
            let mut now = T0;
            let mut naive = Naive::default();
            for (gap, cost) in costs {
                now += gap;
                w.acquire(now, &params, cost);
                naive.acquire(now, &params, cost);
            }
            let d = w.refund(now, refund);
            prop_assert_eq!(w.total(), w.counts().sum::<u64>());
            // The model takes back units from its newest records, within the ring.
            let mut left = refund;
            for (t, c) in naive.records.iter_mut().rev() {
                if *t / 10 + 10 < now / 10 { break; }
                let take = (*c).min(left);
                *c -= take;
                left -= take;
            }
            prop_assert_eq!(d.remaining, 1000 - naive.used(now, &params));
        }
    }
}
