//! What every rate limiter's algorithm offers the command layer: decide without changing
//! anything, record a decision taken (here, or by the primary for a replica), and the two
//! together. The kinds implement it; the generic layers call nothing else of them to
//! decide.

use std::borrow::Borrow;

use super::{Decision, Instant};

/// What every limiter offers the command layer. `evaluate` decides without changing
/// anything; `record` applies a decision already taken (by this server, or by the primary for
/// a replica); `acquire` is the two together.
pub trait Limit {
    /// The parameters of one call.
    type Params: ?Sized;

    /// The parameters as the state keeps them ([`Limit::stored`]).
    type Stored: Borrow<Self::Params>;

    /// The parameters the state last recorded under: what `RL.PEEK`, `RL.REFUND` and
    /// `RL.CHARGE` decide under.
    fn stored(&self) -> Self::Stored;

    /// Gives back up to `units`, newest first, never below empty, and answers as a call of
    /// no cost under [`Limit::stored`] would (`RL.REFUND`).
    fn give_back(&mut self, now: Instant, units: u64) -> Decision;

    /// The answer to `cost` units at `now` under `p`. Never changes the state.
    fn evaluate(&self, now: Instant, p: &Self::Params, cost: u64) -> Decision;

    /// Records `cost` units at `now` under `p` without checking any limit. Returns false,
    /// changing nothing, when the record would break the limiter's invariants (exactly
    /// when [`Limit::can_record`] is false).
    fn record(&mut self, now: Instant, p: &Self::Params, cost: u64) -> bool;

    /// Whether [`Limit::record`] would take `cost` units at `now` under `p`, changing
    /// nothing: what a call that changes several limiters checks of each before it changes
    /// any. Both share one check per limiter, so they cannot disagree.
    fn can_record(&self, now: Instant, p: &Self::Params, cost: u64) -> bool;

    /// When the limiter is back to empty if nothing else arrives; `None` when it is empty.
    fn empty_at(&self) -> Option<Instant>;

    /// The latest time seen; an earlier call counts as happening then.
    fn latest(&self) -> Instant;

    /// A limiter reshaped for a call at `now` under `p` when the stored one cannot take it as
    /// it is (the caller then stores the new one); `None` when the call fits the stored state.
    fn reshaped(&self, _now: Instant, _p: &Self::Params) -> Option<Self>
    where
        Self: Sized,
    {
        None
    }

    /// Decides, and records the request when it is allowed (and costs something).
    fn acquire(&mut self, now: Instant, p: &Self::Params, cost: u64) -> Decision {
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
    fn charge(&mut self, now: Instant, p: &Self::Params, units: u64) -> Option<Decision> {
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

/// Timed scenarios as tables, shared by every algorithm's tests.
#[cfg(test)]
pub(crate) mod table {
    use super::Limit;
    use crate::core::{Duration, Instant};

    /// One row: at `t` ms after `t0`, a request of `cost`, expecting
    /// `[allowed, limit, remaining, retry_after, reset_after]`.
    pub type Row = (u64, u64, [i64; 5]);

    /// Runs `rows` in order against `limiter` under `params`, on a fake clock.
    pub fn run<L: Limit>(mut limiter: L, params: &L::Params, t0: Instant, rows: &[Row]) {
        for (i, (t, cost, want)) in rows.iter().enumerate() {
            let now = t0 + Duration::from_ms(*t);
            let got = limiter.acquire(now, params, *cost).as_reply();
            assert_eq!(&got, want, "row {i} at +{t}ms cost {cost}");
        }
    }
}

/// [`Limit::charge`] on every kind: the units count even beyond the limit, and the wait it
/// answers is exact. Each kind runs [`charge::check`] in its own tests.
#[cfg(test)]
pub(crate) mod charge {
    use super::Limit;
    use crate::core::{Duration, Instant, Wait};
    use proptest::prelude::*;

    pub const T0: Instant = Instant::from_ms(1_700_000_000_000);

    /// Acquisitions and charges at growing times; after each charge, a request of one unit
    /// is refused exactly until the wait the charge answered, and allowed from then on.
    pub fn check<L: Limit + Clone>(mut l: L, p: &L::Params, ops: &[(u64, u64, bool)]) {
        let mut now = T0;
        for &(dt, cost, charge) in ops {
            now += Duration::from_ms(dt);
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
                Wait::For(w) => {
                    assert!(!w.is_zero());
                    assert!(l.evaluate(now + w, p, 1).allowed, "allowed after {w} ms");
                    assert!(
                        !l.evaluate(now + w - Duration::from_ms(1), p, 1).allowed,
                        "refused before {w} ms"
                    );
                }
                other => panic!("refused with {other:?}"),
            }
        }
    }

    /// `(ms since the last, units, a charge rather than an acquisition)`.
    pub fn ops() -> impl Strategy<Value = Vec<(u64, u64, bool)>> {
        prop::collection::vec((0u64..400, 0u64..30, any::<bool>()), 1..40)
    }
}

/// What every rate kind's parser is fuzzed with (`make fuzz` runs the `fuzz_` tests longer,
/// with `PROPTEST_CASES`).
#[cfg(test)]
pub(crate) mod fuzz {
    use proptest::prelude::*;

    /// Words a client might send: numbers near every bound, keywords, junk.
    pub fn word() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::sample::select(vec![
                "0",
                "1",
                "7",
                "100",
                "1000",
                "4096",
                "60000",
                "2147483647",
                "2147483648",
                "4294967295",
                "4294967296",
                "2678400000",
                "253402300799999",
                "9223372036854775807",
                "18446744073709551616",
                "-1",
                "",
                "COST",
                "NOW",
                "BURST",
                "MAXDELAY",
                "ALIGN",
                "TOKEN",
                "SUBWIN",
                "cost",
                "x",
            ])
            .prop_map(|w| w.as_bytes().to_vec()),
            prop::collection::vec(any::<u8>(), 0..24),
        ]
    }

    /// The words after a key: up to 12 of [`word`].
    pub fn words() -> impl Strategy<Value = Vec<Vec<u8>>> {
        prop::collection::vec(word(), 0..12)
    }
}
