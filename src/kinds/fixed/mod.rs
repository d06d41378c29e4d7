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

use crate::core::args::{self, positional, Opt, COST};
use crate::core::codec::{Malformed, Reader, Sink};
use crate::core::effect::Out;
use crate::core::error::Error;
use crate::core::kind::{Compact, Encoding, Form, Params2, Rate, RateCall};
use crate::core::limit::Limit;
use crate::core::meta::{self, Info, Keys, Stats};
use crate::core::{Decision, Duration, Instant, Wait, MAX_TIMESTAMP};

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

    /// The window's length.
    fn window(&self) -> Duration {
        Duration::from_ms(self.window_ms)
    }

    /// The end of the window a request at `now` opens.
    fn end_of_window_at(&self, now: Instant) -> Instant {
        if self.align {
            now.floor(self.window()) + self.window()
        } else {
            now + self.window()
        }
    }
}

/// The current window: 32 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedWindow {
    latest: Instant,
    /// When the current window ends; `count` is meaningless from then on.
    end: Instant,
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
            latest: Instant::EPOCH,
            end: Instant::EPOCH,
            count: 0,
            // The ranges are checked when arguments are parsed; the casts cannot truncate.
            limit: p.limit as u32,
            window_ms: p.window_ms as u32,
            align: p.align,
        }
    }

    /// Rebuilds a window from its persisted parts, checking every invariant.
    pub fn from_parts(p: Params, latest: Instant, end: Instant, count: u64) -> Result<Self, Corrupt> {
        if !p.valid() {
            return Err(Corrupt("parameters out of range"));
        }
        if latest > MAX_TIMESTAMP || end > MAX_TIMESTAMP + Duration::from_ms(MAX_WINDOW_MS) {
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
    /// key's compact form, see `rm::storage`); [`FixedWindow::from_parts`] checks persisted ones.
    pub fn with_state(p: &Params, latest: Instant, end: Instant, count: u32) -> FixedWindow {
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

    /// When the current window ends (the epoch before the first one).
    pub fn end(&self) -> Instant {
        self.end
    }

    /// When the open window started: its end less its length.
    fn start(&self) -> Instant {
        self.end.saturating_sub(Duration::from_ms(u64::from(self.window_ms)))
    }

    /// When the open window ends once a call under `p` at `now` is recorded in it: as it
    /// is, or later when `p`'s window, started with it, would. Without ALIGN that window
    /// starts where the open one did; with ALIGN it is `p`'s period holding `now`, which
    /// counts the open window's units only if it holds the whole window.
    fn end_with(&self, now: Instant, p: &Params) -> Instant {
        let start = self.start();
        let end = if p.align {
            let period = now.floor(p.window());
            if period <= start {
                period + p.window()
            } else {
                Instant::EPOCH
            }
        } else {
            start + p.window()
        };
        self.end.max(end)
    }

    /// The window once `cost` units are recorded at `now` under `p`; `None` for parameters
    /// or a time out of range, or a count past 32 bits.
    fn recorded(&self, now: Instant, p: &Params, cost: u64) -> Option<FixedWindow> {
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
            (p.end_of_window_at(now), p.window())
        };
        Some(FixedWindow {
            latest: now,
            end,
            count,
            // At most the longer of the open window's and p's: it fits.
            window_ms: length.ms() as u32,
            ..FixedWindow::new(p)
        })
    }

    /// Units counted in the window open at `now` (0 once it has ended).
    pub fn count_at(&self, now: Instant) -> u64 {
        if now < self.end {
            u64::from(self.count)
        } else {
            0
        }
    }

    /// Gives back up to `units` counted in the current window, never below zero, and
    /// answers like [`FixedWindow::peek`].
    pub fn refund(&mut self, now: Instant, units: u64) -> Decision {
        let now = now.max(self.latest);
        let left = self.count_at(now).saturating_sub(units);
        self.count = left as u32; // left <= count <= u32::MAX
        self.latest = now;
        self.peek(now)
    }

    /// The answer to a `COST 0` call under the stored parameters.
    pub fn peek(&self, now: Instant) -> Decision {
        self.evaluate(now, &self.params(), 0)
    }
}

impl Limit for FixedWindow {
    type Params = Params;
    type Stored = Params;

    fn stored(&self) -> Params {
        self.params()
    }

    fn give_back(&mut self, now: Instant, units: u64) -> Decision {
        self.refund(now, units)
    }

    fn evaluate(&self, now: Instant, p: &Params, cost: u64) -> Decision {
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
            Wait::For(end - now)
        };
        Decision {
            allowed,
            limit: p.limit,
            remaining: p.limit.saturating_sub(after),
            retry_after,
            // Empty once the window ends; already empty when nothing is counted.
            reset_after: if after > 0 { end - now } else { Duration::ZERO },
        }
    }

    fn record(&mut self, now: Instant, p: &Params, cost: u64) -> bool {
        match self.recorded(now, p, cost) {
            Some(next) => {
                *self = next;
                true
            }
            None => false,
        }
    }

    fn can_record(&self, now: Instant, p: &Params, cost: u64) -> bool {
        self.recorded(now, p, cost).is_some()
    }

    fn empty_at(&self) -> Option<Instant> {
        (self.count > 0 && self.end > self.latest).then_some(self.end)
    }

    fn latest(&self) -> Instant {
        self.latest
    }
}

const ALIGN: Opt = Opt::flag("ALIGN").doc("align");

args::option_set! {
    /// `RL.FIXED`'s options after its two numbers.
    struct Options { align: ALIGN, cost: COST }
}

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
    args: &[],
    stats: Stats::new(),
};

impl Rate for FixedWindow {
    const COMMAND: &'static str = "RL.FIXED";
    const CODE: u8 = 4;
    const FORM: Form = Form::Compact;
    const INFO: &'static Info = &FIXED_INFO;
    const GRAMMAR: args::Grammar = args::Grammar {
        positional: args::Positional::Numbers(2),
        params: &[meta::LIMIT, meta::WINDOW_MS],
        options: Options::TABLE,
    };
    const KEYWORD: Option<&'static str> = Some("FIXED");
    const EFFECT_CODE: u8 = 4;
    type Args = Params;

    fn params(args: &Params) -> &Params {
        args
    }

    fn parse(words: &[&[u8]]) -> Result<RateCall<Params>, Error> {
        let limit = positional(words, 0, "limit", 1, MAX_LIMIT)?;
        let window_ms = args::positional_duration(words, 1, "window_ms", 1, MAX_WINDOW_MS)?;
        let o = Options::parse(words.get(2..).unwrap_or_default())?;
        Ok(RateCall {
            params: Params {
                limit,
                window_ms,
                align: o.align.is_some(),
            },
            cost: args::cost(o.cost),
            now: o.now(),
        })
    }

    fn fresh(p: &Params) -> FixedWindow {
        FixedWindow::new(p)
    }

    fn write_params<O: Out>(p: &Params, out: &mut O) {
        out.number(p.limit).number(p.window_ms);
        if p.align {
            out.word(ALIGN.keyword.as_bytes());
        }
    }
}

/// Encoding (kind 4): version 3, `latest ahead count limit window_ms align`, `ahead` the end
/// relative to `latest` ([`zigzag`]); version 1, `latest end count limit window_ms align`.
/// `window_ms` is the open window's length. The key keeps it compact: 16 bytes, the
/// parameters interned, the tail `count << 32 | ahead32` (see [`ahead32`]).
impl Encoding for FixedWindow {
    const VERSION: u8 = 3;

    fn encode<S: Sink>(&self, out: &mut S) {
        let p = self.params();
        Self::encode_state_of(self.latest, self.end, self.count_at(self.latest), out);
        encode_params(&p, out);
    }

    fn decode(version: u8, r: &mut Reader) -> Result<Self, Malformed> {
        if version != 1 && version != 3 {
            return Err(Malformed("no such version for this kind"));
        }
        let (latest, end, count) = (Instant::from_ms(r.varint()?), r.varint()?, r.varint()?);
        // Version 3: the end relative to `latest` (see `zigzag`).
        let end = if version == 3 {
            unzigzag(end, latest)?
        } else {
            Instant::from_ms(end)
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
}

impl FixedWindow {
    fn encode_state_of<S: Sink>(latest: Instant, end: Instant, count: u64, out: &mut S) {
        out.varint(latest.ms());
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
    fn pack(&self) -> Option<(Params2, Instant, u64)> {
        let ahead = ahead32(self.end, self.latest)?;
        let p = self.params();
        let set = Params2 {
            a: p.limit << 32 | p.window_ms,
            b: u64::from(p.align),
        };
        (self.latest.ms() >> 48 == 0).then_some((set, self.latest, u64::from(self.count) << 32 | ahead))
    }

    #[inline(always)]
    fn unpack(set: Params2, latest: Instant, tail: u64) -> Self {
        let p = Params {
            limit: set.a >> 32,
            window_ms: set.a & LOW32,
            align: set.b != 0,
        };
        let end = end_of(tail & LOW32, latest);
        FixedWindow::with_state(&p, latest, end, (tail >> 32) as u32)
    }

    fn encode_state<S: Sink>(latest: Instant, tail: u64, out: &mut S) {
        let end = end_of(tail & LOW32, latest);
        let count = if latest < end { tail >> 32 } else { 0 };
        Self::encode_state_of(latest, end, count, out);
    }

    fn encode_params<S: Sink>(set: Params2, out: &mut S) {
        out.varint(set.a >> 32);
        out.varint(set.a & LOW32);
        out.varint(set.b);
    }

    fn decode_state(r: &mut Reader) -> Option<(Instant, u64)> {
        let latest = Instant::from_ms(r.varint().ok()?);
        if latest > MAX_TIMESTAMP || latest.ms() >> 48 != 0 {
            return None;
        }
        let (z, count) = (r.varint().ok()?, r.varint().ok()?);
        let end = unzigzag(z, latest).ok()?;
        if end > MAX_TIMESTAMP + Duration::from_ms(MAX_WINDOW_MS) || count > LOW32 {
            return None;
        }
        Some((latest, count << 32 | ahead32(end, latest)?))
    }
}

/// A time `end` relative to `latest`, as one varint: `2·(end - latest)` when `end` is not
/// before `latest`, `2·(latest - end) - 1` when it is (both below 2^63).
fn zigzag(end: Instant, latest: Instant) -> u64 {
    if end >= latest {
        (end - latest).ms() << 1
    } else {
        ((latest - end).ms() << 1) - 1
    }
}

/// The time [`zigzag`] made of `z` and `latest`.
fn unzigzag(z: u64, latest: Instant) -> Result<Instant, Malformed> {
    let end = if z & 1 == 0 {
        latest.checked_add(Duration::from_ms(z >> 1))
    } else {
        latest.checked_sub(Duration::from_ms((z >> 1) + 1))
    };
    end.ok_or(Malformed("time out of range"))
}

/// A window's end as 32 bits relative to its latest call: `end - latest` when the window
/// ends then or later (at most [`MAX_WINDOW_MS`]: a window never ends further ahead),
/// `MAX_WINDOW_MS + (latest - end)` when it ended before; `None` when that is past 2^32 (a
/// window that ended some 18 days before its latest call: kept boxed then).
fn ahead32(end: Instant, latest: Instant) -> Option<u64> {
    let v = if end >= latest {
        Some((end - latest).ms()).filter(|&d| d <= MAX_WINDOW_MS)
    } else {
        MAX_WINDOW_MS.checked_add((latest - end).ms())
    };
    v.filter(|&v| v <= LOW32)
}

/// The end [`ahead32`] made of `v`.
fn end_of(v: u64, latest: Instant) -> Instant {
    if v <= MAX_WINDOW_MS {
        latest + Duration::from_ms(v)
    } else {
        latest.saturating_sub(Duration::from_ms(v - MAX_WINDOW_MS))
    }
}

#[cfg(test)]
mod tests;
