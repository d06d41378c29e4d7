//! What every rate limiter's algorithm offers the command layer: decide without changing
//! anything, record a decision taken (here, or by the primary for a replica), and the two
//! together. The kinds implement it; the generic layers call nothing else of them to
//! decide.

use super::{Decision, Millis};

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

/// Timed scenarios as tables, shared by every algorithm's tests.
#[cfg(test)]
pub(crate) mod table {
    use super::Limit;
    use crate::core::Millis;

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

