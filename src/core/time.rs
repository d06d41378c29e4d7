//! Time, as every algorithm is handed it (none reads a clock): an [`Instant`], a point in
//! time, and a [`Duration`], a length of time, both whole milliseconds. They do not mix:
//! an instant plus or minus a duration is an instant, the time between two instants is a
//! duration, and nothing adds two instants or passes one where the other is meant.
//!
//! Both are a `u64` underneath, and their operations compile to its own: the arithmetic
//! is as exact, and as cheap. An operation that may leave the range says so in its name
//! (`saturating_`, `checked_`); the plain operators are for sums the ranges bound (an
//! instant is at most [`MAX_TIMESTAMP`], a window a few years), as plain `u64` ones were.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A point in time: milliseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct Instant(u64);

/// A length of time, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct Duration(u64);

/// The largest timestamp accepted anywhere (year 9999), so that `now + window` never
/// overflows.
pub const MAX_TIMESTAMP: Instant = Instant(253_402_300_799_999);

impl Instant {
    /// The Unix epoch: the time a state that has seen no call holds.
    pub const EPOCH: Instant = Instant(0);

    /// The instant `ms` milliseconds after the epoch.
    #[inline(always)]
    pub const fn from_ms(ms: u64) -> Instant {
        Instant(ms)
    }

    /// Milliseconds since the epoch (what a reply, an encoding or a key's expiry says).
    #[inline(always)]
    pub const fn ms(self) -> u64 {
        self.0
    }

    /// The time from `earlier` to this instant; zero when `earlier` is not before it.
    #[inline(always)]
    pub const fn since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }

    #[inline(always)]
    pub const fn checked_add(self, d: Duration) -> Option<Instant> {
        match self.0.checked_add(d.0) {
            Some(ms) => Some(Instant(ms)),
            None => None,
        }
    }

    #[inline(always)]
    pub const fn checked_sub(self, d: Duration) -> Option<Instant> {
        match self.0.checked_sub(d.0) {
            Some(ms) => Some(Instant(ms)),
            None => None,
        }
    }

    #[inline(always)]
    pub const fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }

    /// `d` before this instant, the epoch at the earliest.
    #[inline(always)]
    pub const fn saturating_sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(d.0))
    }

    /// The start of the period of length `period` (not zero) holding this instant, periods
    /// counted from the epoch.
    #[inline(always)]
    pub const fn floor(self, period: Duration) -> Instant {
        Instant(self.0 - self.0 % period.0)
    }
}

impl Duration {
    pub const ZERO: Duration = Duration(0);
    /// One millisecond.
    pub const MS: Duration = Duration(1);

    /// `ms` milliseconds.
    #[inline(always)]
    pub const fn from_ms(ms: u64) -> Duration {
        Duration(ms)
    }

    /// Whole seconds.
    #[inline(always)]
    pub const fn from_secs(s: u64) -> Duration {
        Duration(s.saturating_mul(1000))
    }

    /// Its milliseconds.
    #[inline(always)]
    pub const fn ms(self) -> u64 {
        self.0
    }

    #[inline(always)]
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    #[inline(always)]
    pub const fn saturating_add(self, d: Duration) -> Duration {
        Duration(self.0.saturating_add(d.0))
    }

    #[inline(always)]
    pub const fn saturating_sub(self, d: Duration) -> Duration {
        Duration(self.0.saturating_sub(d.0))
    }

    #[inline(always)]
    pub const fn checked_add(self, d: Duration) -> Option<Duration> {
        match self.0.checked_add(d.0) {
            Some(ms) => Some(Duration(ms)),
            None => None,
        }
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    #[inline(always)]
    fn add(self, d: Duration) -> Instant {
        Instant(self.0 + d.0)
    }
}

impl AddAssign<Duration> for Instant {
    #[inline(always)]
    fn add_assign(&mut self, d: Duration) {
        self.0 += d.0;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    #[inline(always)]
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0 - d.0)
    }
}

/// The time between two instants, the later first (as `u64` subtraction: the caller knows
/// the order; [`Instant::since`] when it does not).
impl Sub<Instant> for Instant {
    type Output = Duration;
    #[inline(always)]
    fn sub(self, earlier: Instant) -> Duration {
        Duration(self.0 - earlier.0)
    }
}

impl Add for Duration {
    type Output = Duration;
    #[inline(always)]
    fn add(self, d: Duration) -> Duration {
        Duration(self.0 + d.0)
    }
}

impl Sub for Duration {
    type Output = Duration;
    #[inline(always)]
    fn sub(self, d: Duration) -> Duration {
        Duration(self.0 - d.0)
    }
}

/// Tests write offsets as plain milliseconds (`T0 + 250`); the module's own code cannot.
#[cfg(test)]
impl Add<u64> for Instant {
    type Output = Instant;
    fn add(self, ms: u64) -> Instant {
        Instant(self.0 + ms)
    }
}

#[cfg(test)]
impl Sub<u64> for Instant {
    type Output = Instant;
    fn sub(self, ms: u64) -> Instant {
        Instant(self.0 - ms)
    }
}

#[cfg(test)]
impl AddAssign<u64> for Instant {
    fn add_assign(&mut self, ms: u64) {
        self.0 += ms;
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_and_durations_keep_apart() {
        let t = Instant::from_ms(1_000);
        let d = Duration::from_ms(250);
        assert_eq!((t + d).ms(), 1_250);
        assert_eq!((t - d).ms(), 750);
        assert_eq!((t + d) - t, d);
        assert_eq!(t.since(t + d), Duration::ZERO);
        assert_eq!((t + d).since(t), d);
        assert_eq!(Instant::from_ms(1_999).floor(Duration::from_ms(1_000)), t);
        assert_eq!(Instant::EPOCH.saturating_sub(d), Instant::EPOCH);
        assert_eq!(Instant::from_ms(u64::MAX).checked_add(d), None);
        assert_eq!(Duration::from_secs(3).ms(), 3_000);
        assert!(MAX_TIMESTAMP
            .checked_add(Duration::from_ms(u64::MAX / 2))
            .is_some());
    }
}
