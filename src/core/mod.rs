//! The shared core: what every kind and every layer uses, and nothing that knows Redis.
//!
//! - [`time`]: an [`Instant`] and a [`Duration`], in whole milliseconds, handed to every
//!   algorithm (none reads a clock), and the [`Decision`] every limiter answers with;
//! - [`kind`]: what a kind of limiter is (its state, commands, encoding, storage form) and
//!   [`limit`], what a rate limiter's algorithm offers;
//! - [`args`] (the grammar's primitives), [`effect`] (what replicas and the AOF receive),
//!   [`codec`] (the persisted encoding's varints), [`error`] (every error reply), [`meta`]
//!   (`COMMAND INFO` metadata);
//! - the building blocks kinds share: [`gcra`] (the bucket behind `RL.TOKEN`, `RL.LEAKY`
//!   and `CL.THROTTLE`), [`chunks`] (a log in bounded chunks), [`retention`] (windows used
//!   before).

#![forbid(unsafe_code)]

pub mod args;
pub mod chunks;
pub mod codec;
pub mod effect;
pub mod error;
pub mod family;
pub mod gcra;
pub mod kind;
pub mod limit;
pub mod meta;
pub mod policy;
pub mod retention;
#[cfg(test)]
pub mod sample;
pub mod time;
pub mod top;

/// 64-bit FNV-1a's starting value.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// 64-bit FNV-1a of `bytes`, going on from `h` ([`FNV_OFFSET`] to start): the hash of policy
/// names, of their digests, and of `RL.TOP`'s names (short, not chosen to collide).
pub fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

pub use time::{Duration, Instant, MAX_TIMESTAMP};

/// How long a refused request has to wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Allowed (or would be) right now.
    None,
    /// Allowed after this long if nothing else arrives.
    For(Duration),
    /// Can never be allowed with the current parameters (the cost exceeds a limit).
    Never,
}

impl Wait {
    /// The reply encoding: 0, the wait, or -1 for never.
    pub fn as_reply(self) -> i64 {
        match self {
            Wait::None => 0,
            Wait::For(d) => i64::try_from(d.ms()).unwrap_or(i64::MAX),
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
    pub reset_after: Duration,
}

impl Decision {
    /// The decision as seen by a caller whose time is `behind` the limiter's
    /// latest time (a lagging `NOW`, or a server clock that stepped back): the limiter
    /// decided at its own latest time, so every wait and the reset are measured from the
    /// caller's time instead. A caller that waits that long is not refused again for the
    /// same reason.
    pub fn seen_from_behind(mut self, behind: Duration) -> Decision {
        if behind.is_zero() {
            return self;
        }
        if let Wait::For(d) = self.retry_after {
            self.retry_after = Wait::For(d.saturating_add(behind));
        }
        if !self.reset_after.is_zero() {
            self.reset_after = self.reset_after.saturating_add(behind);
        }
        self
    }

    /// The decision with its reset measured from `now` to `empty_at`, when the limiter is
    /// back to empty (what the key's expiry follows): a limiter that keeps records for a
    /// window used before (a retention) is not empty when the call's own windows are.
    pub fn resetting_at(mut self, empty_at: Option<Instant>, now: Instant) -> Decision {
        self.reset_after = empty_at.map_or(Duration::ZERO, |at| at.since(now));
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
            clamp(self.reset_after.ms()),
        ]
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
            retry_after: Wait::For(Duration::from_ms(700)),
            reset_after: Duration::from_ms(900),
        };
        assert_eq!(d.seen_from_behind(Duration::ZERO), d);
        let behind = Duration::from_ms(100);
        assert_eq!(d.seen_from_behind(behind).as_reply(), [0, 3, 0, 800, 1000]);
        let never = Decision {
            retry_after: Wait::Never,
            ..d
        };
        assert_eq!(never.seen_from_behind(behind).retry_after, Wait::Never);
        let allowed_now = Decision {
            allowed: true,
            retry_after: Wait::None,
            reset_after: Duration::ZERO,
            ..d
        };
        // Nothing to wait for stays so; an empty limiter stays empty.
        assert_eq!(allowed_now.seen_from_behind(behind), allowed_now);
    }
}
