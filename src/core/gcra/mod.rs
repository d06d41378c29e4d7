//! One integer core for `RL.TOKEN` (token bucket) and `RL.LEAKY` (leaky bucket that
//! schedules): the generic cell rate algorithm.
//!
//! `limit` units flow per `window_ms`, so one unit every `T = window_ms / limit` ms. To keep
//! every rate exact (1 per day up to 1,000,000 per second and beyond) without floats, time is
//! counted in *ticks* of `1/limit` ms: then `T` is exactly `window_ms` ticks.
//!
//! The state is the *debt*: how far, in ticks, the theoretical arrival time runs ahead of the
//! latest time seen. A request of `cost` units at a debt `D` needs `D + cost·T`; the bucket
//! holds `burst·T`, and a request may wait up to `max_delay`. So it is
//! - allowed at once when `D + cost·T <= burst·T` (the token bucket: `max_delay` is 0);
//! - allowed after a delay of `D + cost·T - burst·T` while that is at most `max_delay` (the
//!   leaky bucket as a scheduler: the caller waits that long, then acts);
//! - refused otherwise, and then it changes nothing.
//!
//! Invariants: the parameters are within the ranges below, so that `burst·T + max_delay` in
//! ticks fits in a `u64` and the hot path needs no 128-bit division; overflowing requests are
//! detected with checked arithmetic.

use super::codec::{Malformed, Reader, Sink};
use super::kind::Params2;
use super::limit::Limit;
use super::{Decision, Duration, Instant, Wait, MAX_TIMESTAMP};

/// The largest limit and burst: keeps `burst·T + max_delay` within 64 bits.
pub const MAX_RATE_LIMIT: u64 = (1 << 31) - 1;
/// The longest window and the longest MAXDELAY: 31 days.
pub const MAX_WINDOW_MS: u64 = 31 * 24 * 3600 * 1000;

/// The parameters of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Units per window.
    pub limit: u64,
    pub window_ms: u64,
    /// Units that may go at once, without spacing.
    pub burst: u64,
    /// The longest delay a request may be given (0 for a token bucket).
    pub max_delay_ms: u64,
}

impl Params {
    /// Whether every field is within the ranges the commands accept.
    pub fn valid(&self) -> bool {
        (1..=MAX_RATE_LIMIT).contains(&self.limit)
            && (1..=MAX_WINDOW_MS).contains(&self.window_ms)
            && (1..=MAX_RATE_LIMIT).contains(&self.burst)
            && self.max_delay_ms <= MAX_WINDOW_MS
    }

    /// One unit's interval, in ticks.
    fn t(&self) -> u64 {
        self.window_ms
    }

    /// The most debt a request may leave: the burst plus the longest delay, in ticks. Within
    /// the accepted ranges this is below 1.2e19, so it fits.
    fn capacity(&self) -> u64 {
        self.burst
            .saturating_mul(self.t())
            .saturating_add(self.max_delay_ms.saturating_mul(self.limit))
    }

    /// `ticks` as whole milliseconds, rounded up: never tells a caller to act too early.
    fn ms_ceil(&self, ticks: u64) -> Duration {
        Duration::from_ms(ticks.div_ceil(self.limit.max(1)))
    }
}

/// The state of one bucket: 32 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gcra {
    limit: u32,
    window_ms: u32,
    burst: u32,
    max_delay_ms: u32,
    latest: Instant,
    /// Ticks (of `1/limit` ms) by which the theoretical arrival time is ahead of `latest`.
    debt: u64,
}

/// Why a persisted bucket was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

impl Gcra {
    /// An empty (full, for a token bucket) bucket with `p` as its parameters.
    pub fn new(p: &Params) -> Gcra {
        Gcra {
            // The ranges are checked when arguments are parsed; the casts cannot truncate.
            limit: p.limit as u32,
            window_ms: p.window_ms as u32,
            burst: p.burst as u32,
            max_delay_ms: p.max_delay_ms as u32,
            latest: Instant::EPOCH,
            debt: 0,
        }
    }

    /// Rebuilds a bucket from its persisted parts, checking every invariant.
    pub fn from_parts(p: Params, latest: Instant, debt: u64) -> Result<Gcra, Corrupt> {
        if !p.valid() {
            return Err(Corrupt("parameters out of range"));
        }
        if latest > MAX_TIMESTAMP {
            return Err(Corrupt("time out of range"));
        }
        Ok(Gcra {
            latest,
            debt,
            ..Gcra::new(&p)
        })
    }

    /// A bucket with `p` as its parameters and `latest` and `debt` as they are, unchecked:
    /// for the parts of a bucket that was valid (a key's compact form, see `rm::storage`);
    /// [`Gcra::from_parts`] checks persisted ones.
    pub fn with_state(p: &Params, latest: Instant, debt: u64) -> Gcra {
        Gcra {
            latest,
            debt,
            ..Gcra::new(p)
        }
    }

    /// The parameters the bucket last recorded under.
    pub fn params(&self) -> Params {
        Params {
            limit: u64::from(self.limit),
            window_ms: u64::from(self.window_ms),
            burst: u64::from(self.burst),
            max_delay_ms: u64::from(self.max_delay_ms),
        }
    }

    pub fn debt(&self) -> u64 {
        self.debt
    }

    /// Gives back `units` (the most recent bookings first), never below empty, and answers
    /// like [`Gcra::peek`].
    pub fn refund(&mut self, now: Instant, units: u64) -> Decision {
        let now = now.max(self.latest);
        let p = self.params();
        self.debt = self
            .debt_at(now, &p)
            .saturating_sub(units.saturating_mul(p.t()));
        self.latest = now;
        self.peek(now)
    }

    /// The answer to a `COST 0` call under the stored parameters.
    pub fn peek(&self, now: Instant) -> Decision {
        self.evaluate(now, &self.params(), 0)
    }

    /// The debt once `cost` units are recorded at `now` under `p`; `None` for parameters or a
    /// time out of range, or a debt past 2^64 ticks (only a charge beyond the limit gets
    /// near it), which [`Limit::record`] then refuses.
    fn debt_recorded(&self, now: Instant, p: &Params, cost: u64) -> Option<u64> {
        if !p.valid() || now > MAX_TIMESTAMP {
            return None;
        }
        let now = now.max(self.latest);
        cost.checked_mul(p.t())
            .and_then(|units| self.debt_at(now, p).checked_add(units))
    }

    /// The debt at `now` (at least `latest`), in ticks of `p`. When `p` differs from the
    /// stored parameters, the units owed carry over and are re-timed at the new rate
    /// (rounded up, so a change never hands out a fraction of a unit for free).
    fn debt_at(&self, now: Instant, p: &Params) -> u64 {
        let elapsed = (now - self.latest)
            .ms()
            .saturating_mul(u64::from(self.limit));
        let debt = self.debt.saturating_sub(elapsed);
        let old_window = u64::from(self.window_ms);
        if old_window == p.window_ms || debt == 0 {
            return debt;
        }
        // Rare (a change of window), so 128 bits are fine here.
        let owed = (u128::from(debt) * u128::from(p.window_ms)).div_ceil(u128::from(old_window));
        u64::try_from(owed).unwrap_or(u64::MAX)
    }
}

impl Limit for Gcra {
    type Params = Params;
    type Stored = Params;

    fn stored(&self) -> Params {
        self.params()
    }

    fn give_back(&mut self, now: Instant, units: u64) -> Decision {
        self.refund(now, units)
    }

    /// When the bucket is back to empty if nothing else arrives; `None` when it already is.
    fn empty_at(&self) -> Option<Instant> {
        // Only a charge beyond the limit takes the debt near 2^64 ticks: saturate.
        (self.debt > 0).then(|| self.latest.saturating_add(self.params().ms_ceil(self.debt)))
    }

    /// The answer to `cost` units at `now` under `p`, changing nothing.
    fn evaluate(&self, now: Instant, p: &Params, cost: u64) -> Decision {
        let now = now.max(self.latest);
        let debt = self.debt_at(now, p);
        let capacity = p.capacity();
        // `None` when the request alone, or with the debt, is beyond any capacity.
        let units = cost.checked_mul(p.t());
        let need = units.and_then(|u| debt.checked_add(u));
        let allowed = need.is_some_and(|n| n <= capacity);
        let retry_after = match (units, need) {
            (Some(_), Some(need)) if allowed => {
                // A `COST 0` call books nothing, so nothing waits.
                match need.saturating_sub(p.burst * p.t()) {
                    _ if cost == 0 => Wait::None,
                    0 => Wait::None,
                    delay => Wait::For(p.ms_ceil(delay)),
                }
            }
            (Some(units), _) if units <= capacity => {
                // need - capacity, without forming `need`, which may not fit.
                Wait::For(p.ms_ceil(debt - (capacity - units)))
            }
            _ => Wait::Never,
        };
        let after = match need {
            Some(need) if allowed => need,
            _ => debt,
        };
        Decision {
            allowed,
            limit: capacity / p.t(),
            remaining: (capacity - after.min(capacity)) / p.t(),
            retry_after,
            reset_after: p.ms_ceil(after),
        }
    }

    fn record(&mut self, now: Instant, p: &Params, cost: u64) -> bool {
        let Some(need) = self.debt_recorded(now, p, cost) else {
            return false;
        };
        *self = Gcra {
            latest: now.max(self.latest),
            debt: need,
            ..Gcra::new(p)
        };
        true
    }

    fn can_record(&self, now: Instant, p: &Params, cost: u64) -> bool {
        self.debt_recorded(now, p, cost).is_some()
    }

    fn latest(&self) -> Instant {
        self.latest
    }
}

/// What a bucket kind (`RL.TOKEN`, `RL.LEAKY`, `CL.THROTTLE`) writes and reads of its
/// bucket: version 3, `latest debt limit window_ms burst`, then for a bucket that delays,
/// `delay`: 0 for a `MAXDELAY` equal to the window (the default), `max_delay_ms + 1`
/// otherwise; version 1, `latest debt limit window_ms burst max_delay_ms`.
pub mod encoding {
    use super::*;

    /// The bucket's parameters as a compact state's two words (each below 2^32).
    pub fn params2(p: &Params) -> Params2 {
        Params2 {
            a: p.limit << 32 | p.window_ms,
            b: p.burst << 32 | p.max_delay_ms,
        }
    }

    /// The parameters [`params2`] made of.
    pub fn params_of(set: Params2) -> Params {
        Params {
            limit: set.a >> 32,
            window_ms: set.a & LOW32,
            burst: set.b >> 32,
            max_delay_ms: set.b & LOW32,
        }
    }

    const LOW32: u64 = u32::MAX as u64;

    /// The compact form: the parameters, `latest` (below 2^48) and the debt.
    pub fn pack(g: &Gcra) -> Option<(Params2, Instant, u64)> {
        (g.latest().ms() >> 48 == 0).then(|| (params2(&g.params()), g.latest(), g.debt()))
    }

    /// The state's part of the encoding: `latest debt`.
    pub fn encode_state<S: Sink>(latest: Instant, debt: u64, out: &mut S) {
        out.varint(latest.ms());
        out.varint(debt);
    }

    /// The parameters' part: `limit window_ms burst`, then the delay when `delays`.
    pub fn encode_params<S: Sink>(p: &Params, delays: bool, out: &mut S) {
        out.varint(p.limit);
        out.varint(p.window_ms);
        out.varint(p.burst);
        if delays {
            out.varint(if p.max_delay_ms == p.window_ms {
                0
            } else {
                p.max_delay_ms + 1
            });
        }
    }

    /// The state's part read back, checked as [`decode`] checks it, `None` when it does not
    /// fit the compact form.
    pub fn decode_state(r: &mut Reader) -> Option<(Instant, u64)> {
        let latest = Instant::from_ms(r.varint().ok()?);
        if latest > MAX_TIMESTAMP || latest.ms() >> 48 != 0 {
            return None;
        }
        Some((latest, r.varint().ok()?))
    }

    /// A bucket from an encoding of `version` (1 or 3), checked; `delays` for a kind whose
    /// buckets delay (a bucket that does not never carries a delay).
    pub fn decode(version: u8, r: &mut Reader, delays: bool) -> Result<Gcra, Malformed> {
        if version != 1 && version != 3 {
            return Err(Malformed("no such version for this kind"));
        }
        let (latest, debt) = (Instant::from_ms(r.varint()?), r.varint()?);
        let (limit, window_ms, burst) = (r.varint()?, r.varint()?, r.varint()?);
        let max_delay_ms = match (delays, version) {
            // Version 3: no delay for a bucket that does not delay; 0 for a delaying one's
            // default (its window), the delay plus one otherwise.
            (false, 3) => 0,
            (true, 3) => match r.varint()? {
                0 => window_ms,
                d if d - 1 == window_ms => return Err(Malformed("the default delay is written 0")),
                d => d - 1,
            },
            _ => r.varint()?,
        };
        let p = Params {
            limit,
            window_ms,
            burst,
            max_delay_ms,
        };
        if !delays && p.max_delay_ms != 0 {
            return Err(Malformed("a token bucket has no delay"));
        }
        Gcra::from_parts(p, latest, debt).map_err(|e| Malformed(e.0))
    }
}

/// Makes a bucket kind of a newtype `$kind(Gcra)`: its `Limit` (the bucket's), its
/// `Encoding` (`$delays` for a kind whose buckets delay, see [`encoding`]) and its compact
/// form. The kind's file adds its grammar and identity (`Rate`).
macro_rules! bucket_kind {
    ($kind:ident, $delays:expr) => {
        impl $crate::core::limit::Limit for $kind {
            type Params = $crate::core::gcra::Params;
            type Stored = $crate::core::gcra::Params;

            fn stored(&self) -> Self::Params {
                self.0.params()
            }

            fn give_back(
                &mut self,
                now: $crate::core::Instant,
                units: u64,
            ) -> $crate::core::Decision {
                self.0.refund(now, units)
            }

            #[inline(always)]
            fn evaluate(
                &self,
                now: $crate::core::Instant,
                p: &Self::Params,
                cost: u64,
            ) -> $crate::core::Decision {
                self.0.evaluate(now, p, cost)
            }

            #[inline(always)]
            fn record(&mut self, now: $crate::core::Instant, p: &Self::Params, cost: u64) -> bool {
                self.0.record(now, p, cost)
            }

            fn can_record(&self, now: $crate::core::Instant, p: &Self::Params, cost: u64) -> bool {
                self.0.can_record(now, p, cost)
            }

            #[inline(always)]
            fn empty_at(&self) -> Option<$crate::core::Instant> {
                $crate::core::limit::Limit::empty_at(&self.0)
            }

            #[inline(always)]
            fn latest(&self) -> $crate::core::Instant {
                $crate::core::limit::Limit::latest(&self.0)
            }
        }

        impl $crate::core::kind::Encoding for $kind {
            const VERSION: u8 = 3;

            fn encode<S: $crate::core::codec::Sink>(&self, out: &mut S) {
                $crate::core::gcra::encoding::encode_state(
                    $crate::core::limit::Limit::latest(&self.0),
                    self.0.debt(),
                    out,
                );
                $crate::core::gcra::encoding::encode_params(&self.0.params(), $delays, out);
            }

            fn decode(
                version: u8,
                r: &mut $crate::core::codec::Reader,
            ) -> Result<Self, $crate::core::codec::Malformed> {
                $crate::core::gcra::encoding::decode(version, r, $delays).map($kind)
            }
        }

        impl $crate::core::kind::Compact for $kind {
            #[inline(always)]
            fn pack(&self) -> Option<($crate::core::kind::Params2, $crate::core::Instant, u64)> {
                $crate::core::gcra::encoding::pack(&self.0)
            }

            #[inline(always)]
            fn unpack(
                params: $crate::core::kind::Params2,
                latest: $crate::core::Instant,
                tail: u64,
            ) -> Self {
                let p = $crate::core::gcra::encoding::params_of(params);
                $kind($crate::core::gcra::Gcra::with_state(&p, latest, tail))
            }

            fn encode_state<S: $crate::core::codec::Sink>(
                latest: $crate::core::Instant,
                tail: u64,
                out: &mut S,
            ) {
                $crate::core::gcra::encoding::encode_state(latest, tail, out);
            }

            fn encode_params<S: $crate::core::codec::Sink>(
                params: $crate::core::kind::Params2,
                out: &mut S,
            ) {
                let p = $crate::core::gcra::encoding::params_of(params);
                $crate::core::gcra::encoding::encode_params(&p, $delays, out);
            }

            fn decode_state(
                r: &mut $crate::core::codec::Reader,
            ) -> Option<($crate::core::Instant, u64)> {
                $crate::core::gcra::encoding::decode_state(r)
            }
        }
    };
}
pub(crate) use bucket_kind;

#[cfg(test)]
mod tests;
