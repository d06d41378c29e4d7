//! The limiters themselves: plain state plus functions that take `now` and return a
//! [`Decision`]. Nothing in here knows about Redis, reads a clock or allocates through the
//! Redis allocator, so every algorithm is unit-tested on a fake clock.

pub mod chunks;
pub mod fixed;
pub mod gcra;
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
    /// changing nothing, when the record would break the limiter's invariants.
    fn record(&mut self, now: Millis, p: &Self::Params, cost: u64) -> bool;

    /// When the limiter is back to empty if nothing else arrives; `None` when it is empty.
    fn empty_at(&self) -> Option<Millis>;

    /// The latest time seen; an earlier call counts as happening then.
    fn latest(&self) -> Millis;

    /// A limiter reshaped for `p` when the stored one cannot take `p` as it is (the
    /// caller then stores the new one); `None` when `p` fits the stored state.
    fn reshaped(&self, _p: &Self::Params) -> Option<Self>
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
