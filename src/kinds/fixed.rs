//! `RL.FIXED key limit window_ms [ALIGN] [COST n] [NOW ms]`: a fixed window, a counter that
//! resets when its window ends.
//!
//! A window opens at the first request after the previous one has ended, or, with ALIGN, at
//! the multiple of `window_ms` since the Unix epoch that contains that request. The window's
//! end is part of the state, never derived from a TTL, so every call within one window
//! reports the same absolute reset time, on the primary and on every replica alike.
//!
//! Units leave once no window the key was used with since they were counted can count them.
//! A call with another `window_ms` counts the open window as it is, and when it is recorded
//! the window ends no earlier than the call's own window would, started with the open one
//! (with ALIGN: the call's period, when that holds the whole open window). So a shorter
//! window never moves the end, and a longer one may move it later, never earlier. The state
//! keeps the open window's length, from its start to its end, as its `window_ms`.

use crate::core::args::{self, positional, Opt, COST, NOW};
use crate::core::codec::{Malformed, Reader, Sink};
use crate::core::effect::Out;
use crate::core::error::Error;
use crate::core::kind::{Compact, Form, Kind, Params2, Rate, RateCall};
use crate::core::limit::Limit;
use crate::core::meta::{self, Info, Keys, Stats};
use crate::core::{Decision, Millis, Wait, MAX_TIMESTAMP};

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

    /// The parameters the window last recorded under, except that `window_ms` is the length
    /// of the open window: the `window_ms` it opened with, or more once a longer one joined.
    pub fn params(&self) -> Params {
        Params {
            limit: u64::from(self.limit),
            window_ms: u64::from(self.window_ms),
            align: self.align,
        }
    }

    /// A window with `p` as its parameters (see [`FixedWindow::params`]) and `latest`,
    /// `end` and `count` as they are, unchecked: for the parts of a window that was valid (a
    /// key's compact form, see `value`); [`FixedWindow::from_parts`] checks persisted ones.
    pub fn with_state(p: &Params, latest: Millis, end: Millis, count: u32) -> FixedWindow {
        FixedWindow {
            latest,
            end,
            count,
            ..FixedWindow::new(p)
        }
    }

    /// The count as kept, which once the window has ended means nothing (see
    /// [`FixedWindow::count_at`]).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// When the current window ends (0 before the first one).
    pub fn end(&self) -> Millis {
        self.end
    }

    /// When the open window started: its end less its length.
    fn start(&self) -> Millis {
        self.end.saturating_sub(u64::from(self.window_ms))
    }

    /// When the open window ends once a call under `p` at `now` is recorded in it: as it
    /// is, or later when `p`'s window, started with it, would. Without ALIGN that window
    /// starts where the open one did; with ALIGN it is `p`'s period holding `now`, which
    /// counts the open window's units only if it holds the whole window.
    fn end_with(&self, now: Millis, p: &Params) -> Millis {
        let start = self.start();
        let end = if p.align {
            let period = now - now % p.window_ms;
            if period <= start {
                period + p.window_ms
            } else {
                0
            }
        } else {
            start + p.window_ms
        };
        self.end.max(end)
    }

    /// The window once `cost` units are recorded at `now` under `p`; `None` for parameters
    /// or a time out of range, or a count past 32 bits.
    fn recorded(&self, now: Millis, p: &Params, cost: u64) -> Option<FixedWindow> {
        let now = now.max(self.latest);
        if !p.valid() || now > MAX_TIMESTAMP {
            return None;
        }
        let open = now < self.end;
        let count = u32::try_from(self.count_at(now).saturating_add(cost)).ok()?;
        // An open window keeps its end, unless `p`'s window would still count its units
        // later (see `end_with`): the reset announced never comes earlier. New parameters
        // shape the next window.
        let (end, length) = if open {
            let end = self.end_with(now, p);
            (end, end - self.start())
        } else {
            (p.end_of_window_at(now), p.window_ms)
        };
        Some(FixedWindow {
            latest: now,
            end,
            count,
            // At most the longer of the open window's and p's: it fits.
            window_ms: length as u32,
            ..FixedWindow::new(p)
        })
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
        let allowed = count.saturating_add(cost) <= p.limit;
        // A request that finds no open window would open one ending here; one that is
        // recorded in the open window may make it end later.
        let end = match open {
            true if allowed && cost > 0 => self.end_with(now, p),
            true => self.end,
            false => p.end_of_window_at(now),
        };
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
        match self.recorded(now, p, cost) {
            Some(next) => {
                *self = next;
                true
            }
            None => false,
        }
    }

    fn can_record(&self, now: Millis, p: &Params, cost: u64) -> bool {
        self.recorded(now, p, cost).is_some()
    }

    fn empty_at(&self) -> Option<Millis> {
        (self.count > 0 && self.end > self.latest).then_some(self.end)
    }

    fn latest(&self) -> Millis {
        self.latest
    }
}

const ALIGN: Opt = Opt::flag("ALIGN");
const OPTIONS: [Opt; 3] = [ALIGN, COST, NOW];

static FIXED_INFO: Info = Info {
    name: "RL.FIXED",
    event: c"rl.fixed",
    summary: "Fixed window counter with a stable reset: the window's end is kept in the value, so every call in one window reports the same reset time",
    complexity: "O(1)",
    arity: -4,
    keys: Keys::First,
    flags: "write deny-oom fast",
    categories: "write fast",
    own_category: true,
    args: &[
        meta::KEY,
        meta::LIMIT,
        meta::WINDOW_MS,
        meta::flag("align", "ALIGN"),
        meta::COST,
        meta::NOW,
    ],
    stats: Stats::new(),
};

impl Rate for FixedWindow {
    const INFO: &'static Info = &FIXED_INFO;
    const SPEC: Option<(&'static str, args::Grammar)> = Some((
        "FIXED",
        args::Grammar {
            positional: args::Positional::Numbers(2),
            options: &[ALIGN, COST],
        },
    ));
    const EFFECT_CODE: u8 = 4;
    type Args = Params;

    fn params(args: &Params) -> &Params {
        args
    }

    fn parse(words: &[&[u8]]) -> Result<RateCall<Params>, Error> {
        let limit = positional(words, 0, "limit", 1, MAX_LIMIT)?;
        let window_ms = positional(words, 1, "window_ms", 1, MAX_WINDOW_MS)?;
        let given = args::options(words.get(2..).unwrap_or_default(), &OPTIONS)?;
        let (cost, now) = args::cost_and_now(&given, 1, 2);
        Ok(RateCall {
            params: Params {
                limit,
                window_ms,
                align: given[0].is_some(),
            },
            cost,
            now,
        })
    }

    fn fresh(p: &Params) -> FixedWindow {
        FixedWindow::new(p)
    }

    fn write_params<O: Out>(p: &Params, out: &mut O) {
        out.number(p.limit).number(p.window_ms);
        if p.align {
            out.word(b"ALIGN");
        }
    }
}

/// Encoding (kind 4): version 3, `latest ahead count limit window_ms align`, `ahead` the end
/// relative to `latest` ([`zigzag`]); version 1, `latest end count limit window_ms align`.
/// `window_ms` is the open window's length. The key keeps it compact: 16 bytes, the
/// parameters interned, the tail `count << 32 | ahead32` (see [`ahead32`]).
impl Kind for FixedWindow {
    const COMMAND: &'static str = "RL.FIXED";
    const CODE: u8 = 4;
    const VERSION: u8 = 3;
    const FORM: Form = Form::Compact;

    #[inline(always)]
    fn latest(&self) -> Millis {
        self.latest
    }

    #[inline(always)]
    fn empty_at(&self) -> Option<Millis> {
        Limit::empty_at(self)
    }

    fn peek(&self, now: Millis) -> Decision {
        FixedWindow::peek(self, now)
    }

    fn peek_cost(&self, now: Millis, cost: u64) -> Decision {
        self.evaluate(now, &self.params(), cost)
    }

    fn refund(&mut self, now: Millis, units: u64) -> Result<Decision, Error> {
        Ok(FixedWindow::refund(self, now, units))
    }

    fn charge(&mut self, now: Millis, units: u64) -> Result<Option<Decision>, Error> {
        let p = self.params();
        Ok(Limit::charge(self, now, &p, units))
    }

    fn can_charge(&self, now: Millis, units: u64) -> Result<bool, Error> {
        Ok(units == 0 || self.can_record(now, &self.params(), units))
    }

    fn encode<S: Sink>(&self, out: &mut S) {
        let p = self.params();
        Self::encode_state_of(self.latest, self.end, self.count_at(self.latest), out);
        encode_params(&p, out);
    }

    fn decode(version: u8, r: &mut Reader) -> Result<Self, Malformed> {
        if version != 1 && version != 3 {
            return Err(Malformed("no such version for this kind"));
        }
        let (latest, end, count) = (r.varint()?, r.varint()?, r.varint()?);
        // Version 3: the end relative to `latest` (see `zigzag`).
        let end = if version == 3 {
            unzigzag(end, latest)?
        } else {
            end
        };
        let (limit, window_ms) = (r.varint()?, r.varint()?);
        let align = match r.varint()? {
            0 => false,
            1 => true,
            _ => return Err(Malformed("ALIGN is 0 or 1")),
        };
        let p = Params {
            limit,
            window_ms,
            align,
        };
        FixedWindow::from_parts(p, latest, end, count).map_err(|e| Malformed(e.0))
    }

    fn heap_size(&self) -> usize {
        0
    }
}

impl FixedWindow {
    fn encode_state_of<S: Sink>(latest: Millis, end: Millis, count: u64, out: &mut S) {
        out.varint(latest);
        out.varint(zigzag(end, latest));
        out.varint(count);
    }
}

fn encode_params<S: Sink>(p: &Params, out: &mut S) {
    out.varint(p.limit);
    out.varint(p.window_ms);
    out.varint(u64::from(p.align));
}

const LOW32: u64 = u32::MAX as u64;

impl Compact for FixedWindow {
    #[inline(always)]
    fn pack(&self) -> Option<(Params2, Millis, u64)> {
        let ahead = ahead32(self.end, self.latest)?;
        let p = self.params();
        let set = Params2 {
            a: p.limit << 32 | p.window_ms,
            b: u64::from(p.align),
        };
        (self.latest >> 48 == 0).then_some((set, self.latest, u64::from(self.count) << 32 | ahead))
    }

    #[inline(always)]
    fn unpack(set: Params2, latest: Millis, tail: u64) -> Self {
        let p = Params {
            limit: set.a >> 32,
            window_ms: set.a & LOW32,
            align: set.b != 0,
        };
        let end = end_of(tail & LOW32, latest);
        FixedWindow::with_state(&p, latest, end, (tail >> 32) as u32)
    }

    fn encode_state<S: Sink>(latest: Millis, tail: u64, out: &mut S) {
        let end = end_of(tail & LOW32, latest);
        let count = if latest < end { tail >> 32 } else { 0 };
        Self::encode_state_of(latest, end, count, out);
    }

    fn encode_params<S: Sink>(set: Params2, out: &mut S) {
        out.varint(set.a >> 32);
        out.varint(set.a & LOW32);
        out.varint(set.b);
    }

    fn decode_state(r: &mut Reader) -> Option<(Millis, u64)> {
        let latest = r.varint().ok()?;
        if latest > MAX_TIMESTAMP || latest >> 48 != 0 {
            return None;
        }
        let (z, count) = (r.varint().ok()?, r.varint().ok()?);
        let end = unzigzag(z, latest).ok()?;
        if end > MAX_TIMESTAMP + MAX_WINDOW_MS || count > LOW32 {
            return None;
        }
        Some((latest, count << 32 | ahead32(end, latest)?))
    }
}

/// A time `end` relative to `latest`, as one varint: `2·(end - latest)` when `end` is not
/// before `latest`, `2·(latest - end) - 1` when it is (both below 2^63).
fn zigzag(end: Millis, latest: Millis) -> u64 {
    if end >= latest {
        (end - latest) << 1
    } else {
        ((latest - end) << 1) - 1
    }
}

/// The time [`zigzag`] made of `z` and `latest`.
fn unzigzag(z: u64, latest: Millis) -> Result<Millis, Malformed> {
    let end = if z & 1 == 0 {
        latest.checked_add(z >> 1)
    } else {
        latest.checked_sub((z >> 1) + 1)
    };
    end.ok_or(Malformed("time out of range"))
}

/// A window's end as 32 bits relative to its latest call: `end - latest` when the window
/// ends then or later (at most [`MAX_WINDOW_MS`]: a window never ends further ahead),
/// `MAX_WINDOW_MS + (latest - end)` when it ended before; `None` when that is past 2^32 (a
/// window that ended some 18 days before its latest call: kept boxed then).
fn ahead32(end: Millis, latest: Millis) -> Option<u64> {
    let v = if end >= latest {
        Some(end - latest).filter(|&d| d <= MAX_WINDOW_MS)
    } else {
        MAX_WINDOW_MS.checked_add(latest - end)
    };
    v.filter(|&v| v <= LOW32)
}

/// The end [`ahead32`] made of `v`.
fn end_of(v: u64, latest: Millis) -> Millis {
    if v <= MAX_WINDOW_MS {
        latest + v
    } else {
        latest.saturating_sub(v - MAX_WINDOW_MS)
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

    fn run_table(p: &Params, rows: &[crate::core::limit::table::Row]) {
        crate::core::limit::table::run(FixedWindow::new(p), p, T0, rows);
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
        // A shorter window does not move the current window's end. A longer one moves it
        // to where that window, started with this one, ends: later, never earlier.
        let shorter = p(100, 1000, false);
        let d = w.acquire(T0 + 59_850, &shorter, 1);
        assert_eq!(T0 + 59_850 + d.reset_after_ms, T0 + 60_000);
        let longer = p(100, 120_000, false);
        let d = w.acquire(T0 + 59_900, &longer, 1);
        assert_eq!(T0 + 59_900 + d.reset_after_ms, T0 + 120_000);
        assert_eq!((w.end(), w.params().window_ms), (T0 + 120_000, 120_000));
    }

    /// The scenario: three calls fill 3 per 10 s; a call with 5 per 1 s does not
    /// end their window.
    #[test]
    fn a_shorter_window_keeps_the_longer_windows_units() {
        let (long, short) = (p(3, 10_000, false), p(5, 1000, false));
        let mut w = FixedWindow::new(&long);
        for t in [0, 100, 200] {
            assert!(w.acquire(T0 + t, &long, 1).allowed);
        }
        assert_eq!(
            w.acquire(T0 + 1250, &short, 1).as_reply(),
            [1, 5, 1, 0, 8750]
        );
        assert_eq!(
            w.acquire(T0 + 1300, &long, 1).as_reply(),
            [0, 3, 0, 8700, 8700]
        );
    }

    /// The same, the other way round: the 1 s window opens, and the 3 per 10 s calls it
    /// counts must count for their own 10 s, not for the second that opened it.
    #[test]
    fn a_longer_window_joining_keeps_its_units_for_its_own_length() {
        let (long, short) = (p(3, 10_000, false), p(5, 1000, false));
        run_rows(
            FixedWindow::new(&short),
            &[
                (0, short, [1, 5, 4, 0, 1000]),
                (100, long, [1, 3, 1, 0, 9900]),
                (200, long, [1, 3, 0, 0, 9800]),
                (300, long, [0, 3, 0, 9700, 9700]),
                // Before: the window ended at +1000 and 3 more were allowed.
                (1000, long, [0, 3, 0, 9000, 9000]),
                (1500, long, [0, 3, 0, 8500, 8500]),
                // The 1 s calls count in the open window, which keeps its end.
                (1500, short, [1, 5, 1, 0, 8500]),
                (10_000, long, [1, 3, 2, 0, 10_000]),
            ],
        );
        // Aligned: the 10 s period holds the 1 s window opened at +3000, and its units.
        let (long, short) = (p(3, 10_000, true), p(5, 1000, true));
        run_rows(
            FixedWindow::new(&short),
            &[
                (3000, short, [1, 5, 4, 0, 1000]),
                (3100, long, [1, 3, 1, 0, 6900]),
                (3200, long, [1, 3, 0, 0, 6800]),
                (4000, long, [0, 3, 0, 6000, 6000]),
                (10_000, long, [1, 3, 2, 0, 10_000]),
            ],
        );
        // A period that does not hold the whole window leaves its end where it was (its
        // units cannot be told apart from the earlier ones).
        let (hour, day) = (p(100, 3_600_000, false), p(100, 86_400_000, true));
        let mut w = FixedWindow::new(&hour);
        let day0 = T0 - T0 % 86_400_000 + 86_400_000;
        w.acquire(day0 - 1_800_000, &hour, 1);
        assert_eq!(w.acquire(day0 + 600_000, &day, 1).reset_after_ms, 1_200_000);
    }

    /// Rows of `(t, params, reply)`: each call may have its own parameters.
    fn run_rows(mut w: FixedWindow, rows: &[(u64, Params, [i64; 5])]) {
        for (i, (t, params, want)) in rows.iter().enumerate() {
            let got = w.acquire(T0 + t, params, 1).as_reply();
            assert_eq!(&got, want, "row {i} at +{t}ms");
        }
    }

    #[test]
    fn refund_and_time_going_backwards() {
        let params = p(5, 1000, false);
        let mut w = FixedWindow::new(&params);
        w.acquire(T0 + 100, &params, 3);
        assert_eq!(w.acquire(T0, &params, 1).as_reply(), [1, 5, 1, 0, 1000]);
        assert_eq!(w.refund(T0 + 200, 2).as_reply(), [1, 5, 3, 0, 900]);
        assert_eq!(w.refund(T0 + 200, 9).as_reply(), [1, 5, 5, 0, 0]);
        assert_eq!(Limit::empty_at(&w), None);
    }

    #[test]
    fn from_parts_checks_ranges() {
        assert!(FixedWindow::from_parts(p(5, 1000, true), T0, T0 + 1000, 5).is_ok());
        assert!(FixedWindow::from_parts(p(0, 1000, true), T0, T0, 0).is_err());
        assert!(FixedWindow::from_parts(p(5, 1000, true), T0, T0, 1 << 33).is_err());
        assert_eq!(std::mem::size_of::<FixedWindow>(), 32);
    }

    /// The obviously-correct model: the start of the open window and every call recorded in
    /// it. The window lasts as long as the longest of those calls' windows, each started
    /// with it (with ALIGN: the call's period, when that holds the whole window).
    #[derive(Default)]
    struct Naive {
        start: Millis,
        calls: Vec<(Millis, Params)>,
        count: u64,
        latest: Millis,
    }

    impl Naive {
        /// Where the window of a call at `at` under `p`, started with the open one, ends.
        fn end_of(&self, at: Millis, p: &Params) -> Option<Millis> {
            let from = if p.align {
                at / p.window_ms * p.window_ms
            } else {
                self.start
            };
            (from <= self.start).then_some(from + p.window_ms)
        }

        fn end(&self) -> Option<Millis> {
            self.calls
                .iter()
                .filter_map(|(at, p)| self.end_of(*at, p))
                .max()
        }

        fn acquire(&mut self, now: Millis, p: &Params, cost: u64) -> (bool, u64, Wait, u64) {
            let now = now.max(self.latest);
            let open = self.end().is_some_and(|end| now < end);
            let count = if open { self.count } else { 0 };
            let allowed = count + cost <= p.limit;
            if allowed && cost > 0 {
                if !open {
                    let start = if p.align {
                        now / p.window_ms * p.window_ms
                    } else {
                        now
                    };
                    *self = Naive {
                        start,
                        ..Naive::default()
                    };
                }
                self.calls.push((now, *p));
                self.count += cost;
                self.latest = now;
            }
            // Where the window ends after this call: a request finding none would open one.
            let end = match self.end() {
                Some(end) if now < end => end,
                _ if p.align => now / p.window_ms * p.window_ms + p.window_ms,
                _ => now + p.window_ms,
            };
            let after = if allowed { count + cost } else { count };
            let wait = if allowed {
                Wait::None
            } else if cost > p.limit {
                Wait::Never
            } else {
                Wait::Ms(end - now)
            };
            (
                allowed,
                p.limit - after.min(p.limit),
                wait,
                if after > 0 { end - now } else { 0 },
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

        /// Parameters that change from call to call, with and without ALIGN.
        #[test]
        fn changing_windows_match_the_naive_model(
            pool in prop::collection::vec((1u64..8, 1u64..500, any::<bool>()), 2..4),
            steps in prop::collection::vec(
                (0usize..4, 0u64..300, 0u64..4, prop::bool::weighted(0.1)), 1..150),
        ) {
            let pool: Vec<Params> = pool.iter().map(|&(l, ms, a)| p(l, ms, a)).collect();
            let mut w = FixedWindow::new(&pool[0]);
            let mut naive = Naive::default();
            let mut now = T0;
            for (pick, gap, cost, back) in steps {
                let params = &pool[pick % pool.len()];
                let at = if back { now.saturating_sub(gap) } else { now + gap };
                now = now.max(at);
                let d = w.acquire(at, params, cost);
                let (allowed, remaining, wait, reset) = naive.acquire(at, params, cost);
                prop_assert_eq!((d.allowed, d.remaining, d.retry_after, d.reset_after_ms), (allowed, remaining, wait, reset));
                prop_assert_eq!(Limit::empty_at(&w), naive.end().filter(|&e| naive.count > 0 && e > naive.latest));
            }
        }
    }
}
