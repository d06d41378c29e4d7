//! `RL.SLIDE key limit window_ms [limit window_ms ...] [COST n] [NOW ms]`: the exact
//! sliding log, over one to eight windows at once.
//!
//! Every allowed request is kept as `(timestamp, units)`, merged per millisecond, so that the
//! units in any rolling window `(now - window, now]` are known exactly. Each record takes 8
//! bytes: the low 32 bits of its timestamp (the full time is recovered from the newest
//! record's, as all records span less than 2^32 ms) and a 32-bit running total of units
//! (wrapping). The running total turns "units in a window", "when will enough units have
//! left" and "where does a refund cut" into binary searches, so a call costs O(log n)
//! whatever the number of windows and the size of a refund.
//!
//! Records are held in [`Chunks`], so that no call copies or frees more than a bounded
//! amount, even on a log of ten million records: growth allocates one chunk at most, and
//! dropping records (those that left the longest window, or a refund) frees a bounded number
//! of chunks in the call and hands any more to the module's freeing thread, so that the
//! log's memory follows its records at once.
//!
//! Records leave the log once no window the key was used with since they were made can count
//! them. A call records under its own windows and trims what has left the longest of them,
//! except when it shrinks the windows the log was kept for: the older, longer windows may
//! still count records the new ones do not, so the log keeps a *retention*, the front of
//! windows used before (see [`Front`]), and trims only what none of them counts. Decisions
//! count only the call's own windows: what is kept for others never changes one.
//!
//! Invariants (checked by [`SlidingLog::from_records`], kept by every method):
//! - records are in strictly increasing time order, each with at least 1 unit;
//! - all records span less than [`MAX_WINDOW_MS`], and all units together fit in a `u32`;
//! - `latest` is at least the newest record's time;
//! - the retention's windows are longer than the current ones, at most [`MAX_WINDOW_MS`].

mod body;
mod log;

pub use log::{valid_window, SlidingLog};

use crate::core::args::{self, int, COST};
use crate::core::codec::{Malformed, Reader, Sink};
use crate::core::effect::Out;
use crate::core::error::Error;
use crate::core::kind::{Encoding, Form, Rate, RateCall};
use crate::core::limit::Limit;
use crate::core::meta::{self, Arg, ArgKind, Info, Keys, Stats};
use crate::core::retention::MAX_KEPT;
use crate::core::{Duration, Instant};

/// Windows one call may check at once.
pub const MAX_WINDOWS: usize = 8;
/// The largest limit of one window: the running totals are 32-bit.
pub const MAX_LIMIT: u64 = u32::MAX as u64;
/// The largest limit of a `SLIDE` limiter in a compact policy (its log in the subject's
/// entry in the family, `kinds::family::MAX_LOG` bytes at most).
pub const MAX_LIMIT_IN_COMPACT: u64 = 100;

/// The longest window: 31 days, so a monthly quota fits and record offsets stay 32-bit.
pub const MAX_WINDOW_MS: u64 = 31 * 24 * 3600 * 1000;


/// One `limit` per `window_ms` pair. Both are at least 1, at most [`MAX_LIMIT`] and
/// [`MAX_WINDOW_MS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub limit: u64,
    pub window_ms: u64,
}

/// The windows of a call or of a log, by value (a small log holds them packed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    len: usize,
    list: [Window; MAX_WINDOWS],
}

impl Default for Windows {
    fn default() -> Self {
        Windows {
            len: 0,
            list: [Window {
                limit: 0,
                window_ms: 0,
            }; MAX_WINDOWS],
        }
    }
}

impl Windows {
    /// Appends `w`; false when [`MAX_WINDOWS`] are there already.
    pub fn push(&mut self, w: Window) -> bool {
        match self.list.get_mut(self.len) {
            Some(slot) => {
                *slot = w;
                self.len += 1;
                true
            }
            None => false,
        }
    }
}

impl Windows {
    pub fn as_slice(&self) -> &[Window] {
        self
    }
}

impl std::borrow::Borrow<[Window]> for Windows {
    fn borrow(&self) -> &[Window] {
        self
    }
}

impl std::ops::Deref for Windows {
    type Target = [Window];

    fn deref(&self) -> &[Window] {
        self.list.get(..self.len).unwrap_or_default()
    }
}


args::option_set! {
    /// `RL.SLIDE`'s options after its pairs.
    struct Options { cost: COST }
}

static SLIDE_INFO: Info = Info {
    name: "RL.SLIDE",
    event: c"rl.slide",
    summary: "Exact sliding-window rate limit over one or more (limit, window) pairs; records the request when every window allows it",
    complexity: "O(log N) where N is the number of milliseconds with recorded requests in the longest window; records that leave it are dropped in O(log N), their memory freed off the main thread beyond a bounded amount",
    arity: -4,
    keys: Keys::First,
    // Binary searches over the log and an O(1) move of its head past the records that
    // left (merged per millisecond): O(log N), like ZADD. Giving memory back once a burst
    // has left frees a bounded amount in the call, and hands the rest to another thread.
    flags: "write deny-oom fast",
    categories: "write fast",
    own_category: true,
    args: &[],
    stats: Stats::new(),
};

impl Rate for SlidingLog {
    const COMMAND: &'static str = "RL.SLIDE";
    const CODE: u8 = 1;
    const FORM: Form = Form::Boxed;
    /// A compact policy's family holds a log in its encoding (its records vary in number).
    const IN_FAMILY_ENCODED: bool = true;
    const INFO: &'static Info = &SLIDE_INFO;
    const GRAMMAR: args::Grammar = args::Grammar {
        positional: args::Positional::Pairs,
        params: &[WINDOW_ARG],
        options: Options::TABLE,
    };
    const KEYWORD: Option<&'static str> = Some("SLIDE");
    const EFFECT_CODE: u8 = 1;
    type Args = Windows;

    fn shed(&mut self) {
        self.shed_retained();
    }

    /// A compact policy keeps a subject's log in its entry: at most
    /// [`MAX_LIMIT_IN_COMPACT`] requests a window (a log of at most about 600 bytes).
    fn in_compact(args: &Windows) -> Result<(), Error> {
        match args.iter().all(|w| w.limit <= MAX_LIMIT_IN_COMPACT) {
            true => Ok(()),
            false => Err(Error::Invalid(
                "a compact policy's SLIDE limiter counts at most 100 requests a window (its log is kept in the subject's entry; a keyed policy counts more)",
            )),
        }
    }

    fn params(args: &Windows) -> &[Window] {
        args
    }


    fn parse(words: &[&[u8]]) -> Result<RateCall<Windows>, Error> {
        // The usual call, one window and no option, parsed without the general scan (any
        // error is left to it, so that it is reported the same way).
        if let [limit, window_ms] = words {
            if let (Some(limit), Some(window_ms)) = (
                args::int_in(limit, 1, MAX_LIMIT),
                args::duration_in(window_ms, 1, MAX_WINDOW_MS),
            ) {
                let mut windows = Windows::default();
                windows.push(Window { limit, window_ms });
                return Ok(RateCall {
                    params: windows,
                    cost: args::COST_DEFAULT,
                    now: None,
                });
            }
        }
        // Positional pairs run up to the first word that is not a number.
        let positional = words
            .iter()
            .position(|w| w.first().is_some_and(u8::is_ascii_alphabetic))
            .unwrap_or(words.len());
        let (pairs, opts) = words.split_at(positional);
        if pairs.is_empty() {
            // `RL.SLIDE k abc 1000` or `RL.SLIDE k COST 1`: the limit is what is wrong.
            let first = opts.first().ok_or_else(|| Error::Arity)?;
            int(first, "limit", 1, MAX_LIMIT)?;
        }
        if pairs.len() % 2 != 0 {
            return Err(Error::Arity);
        }
        if pairs.len() / 2 > MAX_WINDOWS {
            return Err(Error::TooManyWindows(MAX_WINDOWS));
        }
        let mut windows = Windows::default();
        for pair in pairs.chunks_exact(2) {
            if let [limit, window_ms] = pair {
                windows.push(Window {
                    limit: int(limit, "limit", 1, MAX_LIMIT)?,
                    window_ms: args::duration(window_ms, "window_ms", 1, MAX_WINDOW_MS)?,
                });
            }
        }
        let o = Options::parse(opts)?;
        Ok(RateCall {
            params: windows,
            cost: args::cost(o.cost),
            now: o.now(),
        })
    }

    fn fresh(windows: &Windows) -> SlidingLog {
        SlidingLog::new(windows)
    }

    fn write_params<O: Out>(windows: &Windows, out: &mut O) {
        for w in windows.iter() {
            out.number(w.limit).number(w.window_ms);
        }
    }
}

/// `RL.SLIDE`'s windows, for `COMMAND DOCS`.
const WINDOW_ARG: Arg = Arg {
    name: "window",
    kind: ArgKind::Block,
    token: None,
    optional: false,
    multiple: true,
    sub: &[meta::LIMIT, meta::WINDOW_MS],
};

/// Encoding (kind 1), version 3: `latest nwindows (limit window_ms)* nkept (window_ms
/// last_used)* nrecords (delta_ms units)*`, `nkept` 0 without a retention, the first delta
/// how long before `latest` the oldest record was, each next one after the one before.
/// Version 1 has no retention and the first delta is the oldest record's absolute time;
/// version 2 is version 1 with a retention of 1 to 3 entries after the windows (each kept
/// window longer than the longest current one and at most 31 days, each last use at most
/// `latest`).
impl Encoding for SlidingLog {
    const VERSION: u8 = 3;

    fn encode<S: Sink>(&self, out: &mut S) {
        let latest = self.latest();
        out.varint(latest.ms());
        let windows = self.windows();
        out.varint(windows.len() as u64);
        for w in windows.iter() {
            out.varint(w.limit);
            out.varint(w.window_ms);
        }
        let retention = self.retention();
        out.varint(retention.len() as u64);
        for &(w, last_used) in retention {
            out.varint(w);
            out.varint(last_used.ms());
        }
        out.varint(self.len() as u64);
        // The oldest record back from `latest`, each next one after the one before.
        let mut prev: Option<Instant> = None;
        for (at, units) in self.records() {
            if out.full() {
                return;
            }
            match prev {
                None => out.varint((latest - at).ms()),
                Some(p) => out.varint((at - p).ms()),
            }
            out.varint(units);
            prev = Some(at);
        }
    }

    fn decode(version: u8, r: &mut Reader) -> Result<Self, Malformed> {
        if !(1..=3).contains(&version) {
            return Err(Malformed("no such version for this kind"));
        }
        let latest = Instant::from_ms(r.varint()?);
        let windows = get_windows(r)?;
        // Version 2 is written only for a retention: at least one entry, at most a
        // front's; version 3 always has the count, 0 for none.
        let retention = match version {
            1 => None,
            _ => {
                let n = r.varint()?;
                if n > MAX_KEPT as u64 || (n == 0 && version == 2) {
                    return Err(Malformed("bad retention length"));
                }
                let entries = (0..n)
                    .map(|_| Ok((r.varint()?, Instant::from_ms(r.varint()?))))
                    .collect::<Result<Vec<_>, Malformed>>()?;
                (n > 0).then_some(entries)
            }
        };
        let n = r.count(2)?;
        // Records are read as the log takes them, so that a big one is not held twice.
        // Versions 1 and 2: the first delta is the absolute time of the oldest record;
        // version 3: how long before `latest` it was.
        let mut at: Option<Instant> = None;
        let mut bad = None;
        let records = (0..n).map_while(|_| {
            let record = r.varint().and_then(|delta| {
                let delta = Duration::from_ms(delta);
                let next = match at {
                    None if version == 3 => latest.checked_sub(delta),
                    None => Some(Instant::EPOCH + delta),
                    Some(prev) => prev.checked_add(delta),
                };
                let next = next.ok_or(Malformed("time out of range"))?;
                at = Some(next);
                Ok((next, r.varint()?))
            });
            record.map_err(|e| bad = Some(e)).ok()
        });
        let log = SlidingLog::from_records(&windows, latest, records);
        if let Some(e) = bad {
            return Err(e);
        }
        let mut log = log.map_err(|e| Malformed(e.0))?;
        if let Some(entries) = retention {
            log = log.with_retention(&entries).map_err(|e| Malformed(e.0))?;
        }
        Ok(log)
    }

    fn heap_size(&self) -> usize {
        SlidingLog::heap_size(self)
    }

    fn allocations(&self) -> usize {
        SlidingLog::allocations(self)
    }
}

/// A log's windows as persisted, read onto the stack: a count, then that many `(limit,
/// window_ms)`; more than [`MAX_WINDOWS`] is refused here.
fn get_windows(r: &mut Reader) -> Result<Windows, Malformed> {
    let n = r.count(2)?;
    let mut out = Windows::default();
    for _ in 0..n {
        let w = Window {
            limit: r.varint()?,
            window_ms: r.varint()?,
        };
        if !out.push(w) {
            return Err(Malformed("bad number of windows"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod rate_tests;
