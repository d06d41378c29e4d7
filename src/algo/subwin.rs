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

// The header words, then `n + 1` counters: slot `i % (n + 1)` counts sub-interval `i`. The
// ring always describes sub-intervals `L-n ..= L`, where `L` is the latest one seen.
// Timestamps fit in 48 bits, so the first word holds `n` and the top of `latest`.
const N_AND_LATEST_HIGH: usize = 0;
const LIMIT: usize = 1;
const RESOLUTION: usize = 2;
const LATEST_LOW: usize = 3;
const TOTAL: usize = 4;
/// Header words before the counters.
pub const HEADER_WORDS: usize = 5;

/// The words a state takes, from its first word.
pub fn block_len(first_word: u32) -> usize {
    HEADER_WORDS + (first_word & 0xffff) as usize + 1
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

impl SubWindow {
    /// An empty window shaped by `p`, which must be valid.
    pub fn new(p: &Params) -> SubWindow {
        let n = p.subintervals().min(MAX_SUBINTERVALS) as u32;
        let mut w = SubWindow {
            words: vec![0u32; block_len(n)].into_boxed_slice(),
        };
        w.put(N_AND_LATEST_HIGH, n);
        // The ranges are checked when arguments are parsed; the casts cannot truncate.
        w.put(LIMIT, p.limit as u32);
        w.put(RESOLUTION, p.resolution_ms as u32);
        w
    }

    /// Rebuilds a state from its persisted parts: the counters of sub-intervals
    /// `L-n ..= L`, oldest first, where `L` is the sub-interval of `latest`.
    pub fn from_parts(p: Params, latest: Millis, counts: &[u64]) -> Result<Self, Corrupt> {
        if !p.valid() {
            return Err(Corrupt("parameters out of range"));
        }
        if latest > MAX_TIMESTAMP {
            return Err(Corrupt("time out of range"));
        }
        let mut w = SubWindow::new(&p);
        if counts.len() as u64 != w.n() + 1 {
            return Err(Corrupt("wrong number of counters"));
        }
        w.set_latest(latest);
        let newest = w.index(latest);
        let mut total: u32 = 0;
        for (k, &c) in counts.iter().enumerate() {
            let c = u32::try_from(c).map_err(|_| Corrupt("counter out of range"))?;
            total = total
                .checked_add(c)
                .ok_or(Corrupt("counters out of range"))?;
            match (newest + k as u64).checked_sub(w.n()) {
                Some(i) => w.put_count(i, c),
                None if c == 0 => {}
                None => return Err(Corrupt("counter before the epoch")),
            }
        }
        w.put(TOTAL, total);
        Ok(w)
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

    fn n(&self) -> u64 {
        u64::from(self.word(N_AND_LATEST_HIGH) & 0xffff)
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
        let n = self.word(N_AND_LATEST_HIGH) & 0xffff;
        // at <= MAX_TIMESTAMP < 2^48
        self.put(N_AND_LATEST_HIGH, n | (((at >> 32) as u32) << 16));
        self.put(LATEST_LOW, at as u32);
    }

    /// The sub-interval `t` falls in.
    fn index(&self, t: Millis) -> u64 {
        t / self.resolution()
    }

    /// The sub-intervals the ring describes.
    fn span(&self) -> (u64, u64) {
        let newest = self.index(self.latest());
        (newest.saturating_sub(self.n()), newest)
    }

    fn slot(&self, i: u64) -> usize {
        HEADER_WORDS + (i % (self.n() + 1)) as usize
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

    /// The counters of sub-intervals `first ..= last`, which must lie in the ring, in order.
    fn ring(&self, first: u64, last: u64) -> impl DoubleEndedIterator<Item = u64> + '_ {
        let len = (last + 1).saturating_sub(first).min(self.n() + 1) as usize;
        let counters = self.words.get(HEADER_WORDS..).unwrap_or_default();
        let start = ((first % (self.n() + 1)) as usize).min(counters.len());
        let (before, from) = counters.split_at(start);
        let wrapped = len.saturating_sub(from.len());
        let from = from.get(..len.min(from.len())).unwrap_or_default();
        let before = before.get(..wrapped).unwrap_or_default();
        from.iter().chain(before).map(|&c| u64::from(c))
    }

    /// The estimate at `now` (not before `latest`): the units of the full sub-intervals, and
    /// the trailing units the window still counts.
    fn estimate(&self, now: Millis) -> (u64, u64) {
        let (n, res) = (self.n(), self.resolution());
        let (oldest, newest) = self.span();
        let current = self.index(now);
        // Everything up to the trailing sub-interval has left the full window.
        let (gone, trail) = match current.checked_sub(n) {
            Some(t) if t >= oldest => {
                let last = t.min(newest);
                (self.ring(oldest, last).sum::<u64>(), self.count(t))
            }
            _ => (0, 0),
        };
        let full = self.total().saturating_sub(gone);
        (full, weighted(trail, now % res, res))
    }

    /// How long until `cost` more units fit, given the full part of the estimate at `now`;
    /// `cost <= limit`, and the call at `now` was refused.
    fn wait(&self, now: Millis, limit: u64, cost: u64, mut full: u64) -> Wait {
        let (n, res) = (self.n(), self.resolution());
        let (oldest, newest) = self.span();
        let current = self.index(now);
        let offset = now % res;
        // Sub-interval by sub-interval, nothing new arriving: at the step where sub-interval
        // `t` trails (the current one being `t + n`), the full part has lost `t`, and the
        // trailing weight falls within the step. Steps whose trailing sub-interval is empty
        // change nothing, so only the ring's are visited.
        let first = current.saturating_sub(n).max(oldest);
        for (t, trail) in (first..=newest).zip(self.ring(first, newest)) {
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

    /// When the newest counted unit stops counting: the last millisecond of the sub-interval
    /// in which it trails, where its weight is 0.
    fn empty_from(&self, newest: u64) -> Millis {
        (newest + self.n() + 1) * self.resolution() - 1
    }

    /// The newest sub-interval with a unit in it.
    fn newest_counted(&self) -> Option<u64> {
        if self.total() == 0 {
            return None;
        }
        let (oldest, newest) = self.span();
        let back = self.ring(oldest, newest).rev().position(|c| c > 0)?;
        Some(newest - back as u64)
    }

    /// Moves the ring forward to `now`, clearing the sub-intervals it passes.
    fn advance(&mut self, now: Millis) {
        let (from, to) = (self.index(self.latest()), self.index(now));
        let cleared = (to - from).min(self.n() + 1);
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

    /// The counters of sub-intervals `L-n ..= L`, oldest first (see [`SubWindow::from_parts`]).
    pub fn counts(&self) -> impl Iterator<Item = u64> + '_ {
        let newest = self.index(self.latest());
        (0..=self.n()).map(move |k| {
            (newest + k)
                .checked_sub(self.n())
                .map_or(0, |i| self.count(i))
        })
    }

    /// Bytes of the block.
    pub fn heap_size(&self) -> usize {
        std::mem::size_of_val(&*self.words)
    }
}

/// `ceil(trail * (res - 1 - offset) / res)`: the trailing units the window still counts.
fn weighted(trail: u64, offset: u64, res: u64) -> u64 {
    // trail < 2^32 and res < 2^32, so the product fits.
    (trail * (res - 1 - offset)).div_ceil(res)
}

impl Limit for SubWindow {
    type Params = Params;

    fn evaluate(&self, now: Millis, p: &Params, cost: u64) -> Decision {
        let now = now.max(self.latest());
        let (full, trailing) = self.estimate(now);
        let used = full + trailing;
        let allowed = used.saturating_add(cost) <= p.limit;
        let retry_after = if allowed {
            Wait::None
        } else if cost > p.limit {
            Wait::Never
        } else {
            self.wait(now, p.limit, cost, full)
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
            reset_after_ms: newest.map_or(0, |i| self.empty_from(i).saturating_sub(now)),
        }
    }

    fn record(&mut self, now: Millis, p: &Params, cost: u64) -> bool {
        let now = now.max(self.latest());
        let same_shape = p.subintervals() == self.n() && p.resolution_ms == self.resolution();
        if !p.valid() || !same_shape || now > MAX_TIMESTAMP {
            return false;
        }
        let current = self.index(now);
        // What the ring holds once moved to `now`, plus the cost.
        let passed = (current - self.index(self.latest())).min(self.n() + 1);
        let leaving = self.ring(current + 1 - passed, current).sum::<u64>();
        let after_advance = self.total() - leaving.min(self.total());
        let (Ok(count), Ok(total)) = (
            u32::try_from(self.count(current) + cost),
            u32::try_from(after_advance + cost),
        ) else {
            return false;
        };
        self.advance(now);
        self.put_count(current, count);
        self.put(TOTAL, total);
        self.put(LIMIT, p.limit as u32);
        true
    }

    fn empty_at(&self) -> Option<Millis> {
        self.newest_counted().map(|i| self.empty_from(i))
    }

    fn latest(&self) -> Millis {
        let high = u64::from(self.word(N_AND_LATEST_HIGH) >> 16);
        (high << 32) | u64::from(self.word(LATEST_LOW))
    }

    /// A new window or resolution: every counted unit moves to the new sub-interval holding
    /// the last millisecond of its old one (or `latest`, if earlier), so no unit is lost;
    /// when each stops counting is approximate, as the sub-intervals it was spread over
    /// are gone.
    fn reshaped(&self, p: &Params) -> Option<SubWindow> {
        if p.subintervals() == self.n() && p.resolution_ms == self.resolution() {
            return None;
        }
        let latest = self.latest();
        let mut new = SubWindow::new(p);
        new.set_latest(latest);
        let res = self.resolution();
        let (oldest, newest) = self.span();
        let (new_oldest, _) = new.span();
        let mut total: u64 = 0;
        for (i, c) in (oldest..=newest).zip(self.ring(oldest, newest)) {
            let j = new.index(((i + 1) * res - 1).min(latest));
            if c == 0 || j < new_oldest {
                continue;
            }
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
        let mut r = w.reshaped(&new).unwrap();
        assert_eq!(r.peek(T0 + 420).remaining, 0);
        assert_eq!(
            r.acquire(T0 + 420, &new, 1).retry_after,
            Wait::Ms(1049 - 420)
        );
        assert!(w.reshaped(&p(3, 1000, 100)).is_none());
    }

    #[test]
    fn from_parts_checks_every_field() {
        let params = p(10, 1000, 100);
        let mut w = SubWindow::new(&params);
        w.acquire(T0 + 50, &params, 4);
        let mut counts = vec![0; 11];
        counts[10] = 4;
        assert_eq!(SubWindow::from_parts(params, T0 + 50, &counts), Ok(w));
        assert!(SubWindow::from_parts(params, T0, &counts[1..]).is_err());
        assert!(SubWindow::from_parts(p(10, 1000, 300), T0, &counts).is_err());
        counts[3] = 1 << 32;
        assert!(SubWindow::from_parts(params, T0, &counts).is_err());
        // Before the epoch there is nothing to count.
        assert!(SubWindow::from_parts(params, 50, &[1; 11]).is_err());
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

    proptest! {
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
