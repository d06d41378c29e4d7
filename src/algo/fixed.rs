//! The fixed window behind `RL.FIXED`: a counter that resets when its window ends.
//!
//! A window opens at the first request after the previous one has ended, or, with ALIGN, at
//! the multiple of `window_ms` since the Unix epoch that contains that request. The window's
//! end is part of the state, never derived from a TTL, so every call within one window
//! reports the same absolute reset time, on the primary and on every replica alike.

use super::{Decision, Limit, Millis, Wait, MAX_TIMESTAMP};

/// The largest limit: the count is 32-bit.
pub const MAX_LIMIT: u64 = u32::MAX as u64;
/// The longest window: 31 days, so a monthly quota fits.
pub const MAX_WINDOW_MS: u64 = 31 * 24 * 3600 * 1000;

/// The parameters of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub limit: u64,
    pub window_ms: u64,
    /// Windows start at multiples of `window_ms` since the epoch.
    pub align: bool,
}

impl Params {
    pub fn valid(&self) -> bool {
        (1..=MAX_LIMIT).contains(&self.limit) && (1..=MAX_WINDOW_MS).contains(&self.window_ms)
    }

    /// The end of the window a request at `now` opens.
    fn end_of_window_at(&self, now: Millis) -> Millis {
        if self.align {
            now - now % self.window_ms + self.window_ms
        } else {
            now + self.window_ms
        }
    }
}

/// The current window: 32 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedWindow {
    latest: Millis,
    /// When the current window ends; `count` is meaningless from then on.
    end: Millis,
    count: u32,
    limit: u32,
    window_ms: u32,
    align: bool,
}

/// Why a persisted window was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

impl FixedWindow {
    /// No window open yet, with `p` as its parameters.
    pub fn new(p: &Params) -> FixedWindow {
        FixedWindow {
            latest: 0,
            end: 0,
            count: 0,
            // The ranges are checked when arguments are parsed; the casts cannot truncate.
            limit: p.limit as u32,
            window_ms: p.window_ms as u32,
            align: p.align,
        }
    }

    /// Rebuilds a window from its persisted parts, checking every invariant.
    pub fn from_parts(p: Params, latest: Millis, end: Millis, count: u64) -> Result<Self, Corrupt> {
        if !p.valid() {
            return Err(Corrupt("parameters out of range"));
        }
        if latest > MAX_TIMESTAMP || end > MAX_TIMESTAMP + MAX_WINDOW_MS {
            return Err(Corrupt("time out of range"));
        }
        let count = u32::try_from(count).map_err(|_| Corrupt("count out of range"))?;
        Ok(FixedWindow {
            latest,
            end,
            count,
            ..FixedWindow::new(&p)
        })
    }

    pub fn params(&self) -> Params {
        Params {
            limit: u64::from(self.limit),
            window_ms: u64::from(self.window_ms),
            align: self.align,
        }
    }

    /// When the current window ends (0 before the first one).
    pub fn end(&self) -> Millis {
        self.end
    }

    /// Units counted in the window open at `now` (0 once it has ended).
    pub fn count_at(&self, now: Millis) -> u64 {
        if now < self.end {
            u64::from(self.count)
        } else {
            0
        }
    }

    /// Gives back up to `units` counted in the current window, never below zero, and
    /// answers like [`FixedWindow::peek`].
    pub fn refund(&mut self, now: Millis, units: u64) -> Decision {
        let now = now.max(self.latest);
        let left = self.count_at(now).saturating_sub(units);
        self.count = left as u32; // left <= count <= u32::MAX
        self.latest = now;
        self.peek(now)
    }

    /// The answer to a `COST 0` call under the stored parameters.
    pub fn peek(&self, now: Millis) -> Decision {
        self.evaluate(now, &self.params(), 0)
    }
}

impl Limit for FixedWindow {
    type Params = Params;

    fn evaluate(&self, now: Millis, p: &Params, cost: u64) -> Decision {
        let now = now.max(self.latest);
        let open = now < self.end;
        let count = self.count_at(now);
        // A request that finds no open window would open one ending here.
        let end = if open {
            self.end
        } else {
            p.end_of_window_at(now)
        };
        let allowed = count.saturating_add(cost) <= p.limit;
        let after = if allowed { count + cost } else { count };
        let retry_after = if allowed {
            Wait::None
        } else if cost > p.limit {
            Wait::Never
        } else {
            Wait::Ms(end - now)
        };
        Decision {
            allowed,
            limit: p.limit,
            remaining: p.limit.saturating_sub(after),
            retry_after,
            // Empty once the window ends; already empty when nothing is counted.
            reset_after_ms: if after > 0 { end - now } else { 0 },
        }
    }

    fn record(&mut self, now: Millis, p: &Params, cost: u64) -> bool {
        let now = now.max(self.latest);
        if !p.valid() || now > MAX_TIMESTAMP {
            return false;
        }
        let open = now < self.end;
        let count = self.count_at(now).saturating_add(cost);
        let Ok(count) = u32::try_from(count) else {
            return false;
        };
        // An open window keeps its end, whatever the new parameters: the reset announced
        // for this window never moves. New parameters shape the next window.
        let end = if open {
            self.end
        } else {
            p.end_of_window_at(now)
        };
        *self = FixedWindow {
            latest: now,
            end,
            count,
            ..FixedWindow::new(p)
        };
        true
    }

    fn empty_at(&self) -> Option<Millis> {
        (self.count > 0 && self.end > self.latest).then_some(self.end)
    }

    fn latest(&self) -> Millis {
        self.latest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T0: Millis = 1_700_000_000_000; // a multiple of 1000

    fn p(limit: u64, window_ms: u64, align: bool) -> Params {
        Params {
            limit,
            window_ms,
            align,
        }
    }

    fn run_table(p: &Params, rows: &[crate::algo::table::Row]) {
        crate::algo::table::run(FixedWindow::new(p), p, T0, rows);
    }

    #[test]
    fn window_opens_at_the_first_request() {
        run_table(
            &p(3, 1000, false),
            &[
                (250, 1, [1, 3, 2, 0, 1000]),
                (600, 1, [1, 3, 1, 0, 650]),
                (1249, 1, [1, 3, 0, 0, 1]),
                // The millisecond the window ends, a new one opens.
                (1250, 1, [1, 3, 2, 0, 1000]),
                (1300, 2, [1, 3, 0, 0, 950]),
                (1301, 1, [0, 3, 0, 949, 949]),
                (1301, 4, [0, 3, 0, -1, 949]),
            ],
        );
    }

    #[test]
    fn aligned_windows_start_at_multiples_of_the_window() {
        run_table(
            &p(2, 1000, true),
            &[
                (250, 1, [1, 2, 1, 0, 750]),
                (999, 1, [1, 2, 0, 0, 1]),
                (999, 1, [0, 2, 0, 1, 1]),
                (1000, 1, [1, 2, 1, 0, 1000]),
            ],
        );
    }

    #[test]
    fn the_reset_time_never_moves_within_a_window() {
        let params = p(100, 60_000, false);
        let mut w = FixedWindow::new(&params);
        let mut resets = std::collections::BTreeSet::new();
        for t in (0..60_000).step_by(777) {
            let d = w.acquire(T0 + t, &params, 1);
            resets.insert(T0 + t + d.reset_after_ms);
        }
        assert_eq!(resets.len(), 1, "{resets:?}");
        // Changing the window length does not move the current window's end either.
        let longer = p(100, 120_000, false);
        let d = w.acquire(T0 + 59_900, &longer, 1);
        assert_eq!(T0 + 59_900 + d.reset_after_ms, T0 + 60_000);
    }

    #[test]
    fn refund_and_time_going_backwards() {
        let params = p(5, 1000, false);
        let mut w = FixedWindow::new(&params);
        w.acquire(T0 + 100, &params, 3);
        assert_eq!(w.acquire(T0, &params, 1).as_reply(), [1, 5, 1, 0, 1000]);
        assert_eq!(w.refund(T0 + 200, 2).as_reply(), [1, 5, 3, 0, 900]);
        assert_eq!(w.refund(T0 + 200, 9).as_reply(), [1, 5, 5, 0, 0]);
        assert_eq!(w.empty_at(), None);
    }

    #[test]
    fn from_parts_checks_ranges() {
        assert!(FixedWindow::from_parts(p(5, 1000, true), T0, T0 + 1000, 5).is_ok());
        assert!(FixedWindow::from_parts(p(0, 1000, true), T0, T0, 0).is_err());
        assert!(FixedWindow::from_parts(p(5, 1000, true), T0, T0, 1 << 33).is_err());
        assert_eq!(std::mem::size_of::<FixedWindow>(), 32);
    }

    /// The obviously-correct model: every allowed request kept with the window it fell in,
    /// windows numbered by their start.
    #[derive(Default)]
    struct Naive {
        start: Option<Millis>,
        count: u64,
        latest: Millis,
    }

    impl Naive {
        fn acquire(&mut self, now: Millis, p: &Params, cost: u64) -> (bool, u64, Wait, u64) {
            let now = now.max(self.latest);
            let (start, count) = match self.start {
                Some(s) if now < s + p.window_ms => (s, self.count),
                _ if p.align => (now / p.window_ms * p.window_ms, 0),
                _ => (now, 0),
            };
            let end = start + p.window_ms;
            if count + cost <= p.limit {
                if cost > 0 {
                    *self = Naive {
                        start: Some(start),
                        count: count + cost,
                        latest: now,
                    };
                }
                let after = count + cost;
                return (
                    true,
                    p.limit - after,
                    Wait::None,
                    if after > 0 { end - now } else { 0 },
                );
            }
            let wait = if cost > p.limit {
                Wait::Never
            } else {
                Wait::Ms(end - now)
            };
            (
                false,
                p.limit - count,
                wait,
                if count > 0 { end - now } else { 0 },
            )
        }
    }

    proptest! {
        #[test]
        fn matches_the_naive_model(
            limit in 1u64..8,
            window_ms in 1u64..500,
            align in any::<bool>(),
            steps in prop::collection::vec((0u64..300, 0u64..4, prop::bool::weighted(0.1)), 1..150),
        ) {
            let params = p(limit, window_ms, align);
            let mut w = FixedWindow::new(&params);
            let mut naive = Naive::default();
            let mut now = T0;
            for (gap, cost, back) in steps {
                let at = if back { now.saturating_sub(gap) } else { now + gap };
                now = now.max(at);
                let d = w.acquire(at, &params, cost);
                let (allowed, remaining, wait, reset) = naive.acquire(at, &params, cost);
                prop_assert_eq!((d.allowed, d.remaining, d.retry_after, d.reset_after_ms), (allowed, remaining, wait, reset));
            }
        }
    }
}
