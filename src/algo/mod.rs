//! The limiters themselves: plain state plus functions that take `now` and return a
//! [`Decision`]. Nothing in here knows about Redis, reads a clock or allocates through the
//! Redis allocator, so every algorithm is unit-tested on a fake clock.

pub mod chunks;
pub mod fixed;
pub mod gcra;
pub mod index;
pub mod lease;
pub mod retention;
pub mod slide;
pub mod subwin;

/// Milliseconds since the Unix epoch. Every algorithm is handed one; none reads a clock.
pub type Millis = u64;

/// The largest timestamp accepted anywhere (year 9999), so that `now + window` never overflows.
pub const MAX_TIMESTAMP: Millis = 253_402_300_799_999;

/// One `limit` per `window` pair. Both are at least 1; their upper bounds depend on the
/// algorithm and are enforced when arguments are parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub limit: u64,
    pub window_ms: u64,
}

/// How long a refused request has to wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Allowed (or would be) right now.
    None,
    /// Allowed after this many milliseconds if nothing else arrives.
    Ms(u64),
    /// Can never be allowed with the current parameters (the cost exceeds a limit).
    Never,
}

impl Wait {
    /// The reply encoding: 0, the wait, or -1 for never.
    pub fn as_reply(self) -> i64 {
        match self {
            Wait::None => 0,
            Wait::Ms(ms) => i64::try_from(ms).unwrap_or(i64::MAX),
            Wait::Never => -1,
        }
    }
}

/// The outcome of one call, in the shape every `RL.*` command replies with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The request was allowed and (when its cost is above 0) recorded.
    pub allowed: bool,
    /// The limit of the window that decided: the one needing the longest wait when refused,
    /// the one with the least remaining when allowed.
    pub limit: u64,
    /// Units still available right now, after this call.
    pub remaining: u64,
    /// Refused: how long until the same request would be allowed. Allowed: how long the
    /// caller must wait before acting (only a scheduler, `RL.LEAKY`, makes callers wait).
    pub retry_after: Wait,
    /// Time until the limiter is back to empty if nothing else arrives.
    pub reset_after_ms: u64,
}

impl Decision {
    /// The decision as seen by a caller whose time is `behind` ms before the limiter's
    /// latest time (a lagging `NOW`, or a server clock that stepped back): the limiter
    /// decided at its own latest time, so every wait and the reset are measured from the
    /// caller's time instead. A caller that waits that long is not refused again for the
    /// same reason.
    pub fn seen_from_behind(mut self, behind: u64) -> Decision {
        if behind == 0 {
            return self;
        }
        if let Wait::Ms(ms) = self.retry_after {
            self.retry_after = Wait::Ms(ms.saturating_add(behind));
        }
        if self.reset_after_ms > 0 {
            self.reset_after_ms = self.reset_after_ms.saturating_add(behind);
        }
        self
    }

    /// The decision with its reset measured from `now` to `empty_at`, when the limiter is
    /// back to empty (what the key's expiry follows): a limiter that keeps records for a
    /// window used before (a retention) is not empty when the call's own windows are.
    pub fn resetting_at(mut self, empty_at: Option<Millis>, now: Millis) -> Decision {
        self.reset_after_ms = empty_at.map_or(0, |at| at.saturating_sub(now));
        self
    }

    /// `[allowed, limit, remaining, retry_after_ms, reset_after_ms]` as reply integers.
    pub fn as_reply(&self) -> [i64; 5] {
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        [
            i64::from(self.allowed),
            clamp(self.limit),
            clamp(self.remaining),
            self.retry_after.as_reply(),
            clamp(self.reset_after_ms),
        ]
    }
}

/// What every limiter offers the command layer. `evaluate` decides without changing
/// anything; `record` applies a decision already taken (by this server, or by the primary for
/// a replica); `acquire` is the two together.
pub trait Limit {
    /// The parameters of one call.
    type Params: ?Sized;

    /// The answer to `cost` units at `now` under `p`. Never changes the state.
    fn evaluate(&self, now: Millis, p: &Self::Params, cost: u64) -> Decision;

    /// Records `cost` units at `now` under `p` without checking any limit. Returns false,
    /// changing nothing, when the record would break the limiter's invariants (exactly
    /// when [`Limit::can_record`] is false).
    fn record(&mut self, now: Millis, p: &Self::Params, cost: u64) -> bool;

    /// Whether [`Limit::record`] would take `cost` units at `now` under `p`, changing
    /// nothing: what a call that changes several limiters checks of each before it changes
    /// any. Both share one check per limiter, so they cannot disagree.
    fn can_record(&self, now: Millis, p: &Self::Params, cost: u64) -> bool;

    /// When the limiter is back to empty if nothing else arrives; `None` when it is empty.
    fn empty_at(&self) -> Option<Millis>;

    /// The latest time seen; an earlier call counts as happening then.
    fn latest(&self) -> Millis;

    /// A limiter reshaped for a call at `now` under `p` when the stored one cannot take it as
    /// it is (the caller then stores the new one); `None` when the call fits the stored state.
    fn reshaped(&self, _now: Millis, _p: &Self::Params) -> Option<Self>
    where
        Self: Sized,
    {
        None
    }

    /// Decides, and records the request when it is allowed (and costs something).
    fn acquire(&mut self, now: Millis, p: &Self::Params, cost: u64) -> Decision {
        let decision = self.evaluate(now, p, cost);
        if decision.allowed && cost > 0 {
            self.record(now, p, cost);
        }
        decision
    }

    /// Records `units` under `p` whatever the limit (`RL.CHARGE`: work that has happened must
    /// count), then answers as the limiter stands at `now`: `allowed` true (the units are
    /// recorded), the limit and the units still free (0 once beyond the limit), what a request
    /// of one unit would be told now as `retry_after` (the exact wait while beyond the limit,
    /// a leaky bucket's delay), and the reset. `None`, changing nothing, when the units do not
    /// fit the limiter's counters.
    fn charge(&mut self, now: Millis, p: &Self::Params, units: u64) -> Option<Decision> {
        if units > 0 && !self.record(now, p, units) {
            return None;
        }
        let now = now.max(self.latest());
        let state = self.evaluate(now, p, 0);
        let next = self.evaluate(now, p, 1);
        Some(Decision {
            allowed: true,
            retry_after: next.retry_after,
            ..state
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_behind_the_limiter_waits_from_its_own_time() {
        let d = Decision {
            allowed: false,
            limit: 3,
            remaining: 0,
            retry_after: Wait::Ms(700),
            reset_after_ms: 900,
        };
        assert_eq!(d.seen_from_behind(0), d);
        assert_eq!(d.seen_from_behind(100).as_reply(), [0, 3, 0, 800, 1000]);
        let never = Decision {
            retry_after: Wait::Never,
            ..d
        };
        assert_eq!(never.seen_from_behind(100).retry_after, Wait::Never);
        let allowed_now = Decision {
            allowed: true,
            retry_after: Wait::None,
            reset_after_ms: 0,
            ..d
        };
        // Nothing to wait for stays so; an empty limiter stays empty.
        assert_eq!(allowed_now.seen_from_behind(100), allowed_now);
    }
}

/// Timed scenarios as tables, shared by every algorithm's tests.
#[cfg(test)]
pub(crate) mod table {
    use super::{Limit, Millis};

    /// One row: at `t` ms after `t0`, a request of `cost`, expecting
    /// `[allowed, limit, remaining, retry_after, reset_after]`.
    pub type Row = (u64, u64, [i64; 5]);

    /// Runs `rows` in order against `limiter` under `params`, on a fake clock.
    pub fn run<L: Limit>(mut limiter: L, params: &L::Params, t0: Millis, rows: &[Row]) {
        for (i, (t, cost, want)) in rows.iter().enumerate() {
            let got = limiter.acquire(t0 + t, params, *cost).as_reply();
            assert_eq!(&got, want, "row {i} at +{t}ms cost {cost}");
        }
    }
}

/// `Limit::charge` on every kind: the units count even beyond the limit, and the wait it
/// answers is exact.
#[cfg(test)]
mod charge_tests {
    use super::*;
    use proptest::prelude::*;

    const T0: Millis = 1_700_000_000_000;

    /// Acquisitions and charges at growing times; after each charge, a request of one unit
    /// is refused exactly until the wait the charge answered, and allowed from then on.
    fn check<L: Limit + Clone>(mut l: L, p: &L::Params, ops: &[(u64, u64, bool)]) {
        let mut now = T0;
        for &(dt, cost, charge) in ops {
            now += dt;
            if !charge {
                l.acquire(now, p, cost);
                continue;
            }
            let Some(d) = l.charge(now, p, cost) else {
                continue;
            };
            assert!(d.allowed);
            let next = l.evaluate(now, p, 1);
            assert_eq!(d.retry_after, next.retry_after);
            assert_eq!(d.remaining, l.evaluate(now, p, 0).remaining);
            if next.allowed {
                continue;
            }
            match d.retry_after {
                Wait::Ms(w) => {
                    assert!(w > 0);
                    assert!(l.evaluate(now + w, p, 1).allowed, "allowed after {w} ms");
                    assert!(
                        !l.evaluate(now + w - 1, p, 1).allowed,
                        "refused before {w} ms"
                    );
                }
                other => panic!("refused with {other:?}"),
            }
        }
    }

    fn ops() -> impl Strategy<Value = Vec<(u64, u64, bool)>> {
        prop::collection::vec((0u64..400, 0u64..30, any::<bool>()), 1..40)
    }

    proptest! {
        #[test]
        fn buckets(limit in 1u64..20, window_ms in 1u64..1000, burst in 1u64..20,
                   max_delay_ms in 0u64..500, ops in ops()) {
            let p = gcra::Params { limit, window_ms, burst, max_delay_ms };
            check(gcra::Gcra::new(&p), &p, &ops);
        }

        #[test]
        fn fixed_windows(limit in 1u64..20, window_ms in 1u64..1000, align: bool, ops in ops()) {
            let p = fixed::Params { limit, window_ms, align };
            check(fixed::FixedWindow::new(&p), &p, &ops);
        }

        #[test]
        fn sliding_logs(limit in 1u64..20, window_ms in 1u64..1000, second: Option<(u64, u64)>,
                        ops in ops()) {
            let mut windows = vec![Window { limit, window_ms }];
            if let Some((l, w)) = second {
                windows.push(Window { limit: 1 + l % 40, window_ms: 1 + w % 3000 });
            }
            check(slide::SlidingLog::new(&windows), windows.as_slice(), &ops);
        }

        #[test]
        fn sub_interval_windows(limit in 1u64..20, n in 1u64..12, resolution_ms in 1u64..100,
                                ops in ops()) {
            let p = subwin::Params { limit, window_ms: n * resolution_ms, resolution_ms };
            check(subwin::SubWindow::new(&p), &p, &ops);
        }
    }

    #[test]
    fn a_charge_beyond_the_limit_refuses_until_it_has_drained() {
        let p = gcra::Params {
            limit: 10,
            window_ms: 1000,
            burst: 10,
            max_delay_ms: 0,
        };
        let mut g = gcra::Gcra::new(&p);
        let d = g.charge(T0, &p, 25).unwrap();
        // 25 units at 100 ms each: one more fits once 16 have drained, 1,600 ms on.
        assert_eq!(d.as_reply(), [1, 10, 0, 1600, 2500]);
        assert!(!g.evaluate(T0 + 1599, &p, 1).allowed);
        assert!(g.evaluate(T0 + 1600, &p, 1).allowed);
        // A charge past 2^64 ticks does not fit and changes nothing.
        let before = g.clone();
        assert_eq!(g.charge(T0, &p, u64::MAX / 100), None);
        assert_eq!(g, before);
    }
}
