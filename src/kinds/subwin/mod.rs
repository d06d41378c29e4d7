//! `RL.SUBWIN key limit window_ms resolution_ms [COST n] [NOW ms]`: a rolling window
//! approximated by a ring of
//! counters, one per `resolution_ms`, plus the sub-interval that has just left the window,
//! weighted by how much of it the window still covers.
//!
//! Sub-intervals are aligned on multiples of `resolution_ms` since the Unix epoch, so the
//! same call gives the same answer on every server. At time `now`, in sub-interval `I` at
//! offset `o`, the window is the `window_ms` milliseconds ending at `now`; it covers
//! sub-intervals `I-n+1 ..= I` fully or up to `now`, and `res-1-o` milliseconds of the
//! trailing sub-interval `I-n`. The estimate is
//!
//! ```text
//! used = sum(count[I-n+1 ..= I]) + ceil(count[I-n] * (res - 1 - o) / res)
//! ```
//!
//! rounded up, so the approximation never rounds in the client's favour. With
//! `resolution_ms = 1` the trailing weight is always 0 and the window is exact.
//!
//! The whole state is one allocation of 32-bit words, a 20-byte header and `n + 1` counters,
//! so a key costs the same whatever its limit; the key holds a thin pointer to it. The header
//! keeps the total of the counters, so a call costs O(1) plus the sub-intervals it has to
//! clear or, when refused, scan for the wait.
//!
//! Units leave once no window the key was used with since they were counted can count them.
//! A call with a shorter window than the one stored leaves that window units to count: the
//! ring then keeps its length (a *retention*: the front of windows used before, see
//! [`Front`], in ten more header words) while the call counts only its own window, and
//! shrinks at the first call once every longer window has let go of the units it counted. A new
//! resolution moves the units as before, into a ring long enough for what is retained (at
//! most [`MAX_SUBINTERVALS`] sub-intervals; older units then wait in the oldest one).

mod limit;
mod ring;

pub use ring::{block_len, SubWindow};

use crate::core::args::{self, positional, COST};
use crate::core::codec::{Malformed, Reader, Sink};
use crate::core::effect::Out;
use crate::core::error::Error;
use crate::core::kind::{Block, Encoding, Form, Rate, RateCall};
use crate::core::limit::Limit;
use crate::core::meta::{self, arg, ArgKind, Info, Keys, Stats};
use crate::core::retention::{Front, MAX_KEPT};
use crate::core::Instant;

/// The largest limit. Counters are 32-bit and so is their total, which holds at most the
/// window plus its trailing sub-interval: twice the limit.
pub const MAX_LIMIT: u64 = (1 << 31) - 1;
/// The longest window: 31 days, as for the other windows.
pub const MAX_WINDOW_MS: u64 = 31 * 24 * 3600 * 1000;
/// The most sub-intervals one window may be split into.
pub const MAX_SUBINTERVALS: u64 = 4096;

/// The parameters of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub limit: u64,
    pub window_ms: u64,
    pub resolution_ms: u64,
}

impl Params {
    /// In range, with the window a whole number (at most [`MAX_SUBINTERVALS`]) of
    /// sub-intervals.
    pub fn valid(&self) -> bool {
        (1..=MAX_LIMIT).contains(&self.limit)
            && (1..=MAX_WINDOW_MS).contains(&self.window_ms)
            && self.resolution_ms >= 1
            && self.window_ms.is_multiple_of(self.resolution_ms)
            && self.window_ms / self.resolution_ms <= MAX_SUBINTERVALS
    }

    pub(super) fn subintervals(&self) -> u64 {
        self.window_ms / self.resolution_ms
    }
}

args::option_set! {
    /// `RL.SUBWIN`'s options after its three numbers.
    struct Options { cost: COST }
}

static SUBWIN_INFO: Info = Info {
    name: "RL.SUBWIN",
    event: c"rl.subwin",
    summary: "Rolling window approximated by window_ms/resolution_ms sub-interval counters plus the weighted trailing sub-interval: constant memory whatever the limit",
    complexity: "O(S) where S is the number of sub-intervals (window_ms / resolution_ms)",
    arity: -5,
    keys: Keys::First,
    // Clears the sub-intervals it passes and, when refused, scans its ring (up to 4,096
    // counters) for the wait: bounded but not O(log N), like PFCOUNT, which Redis files
    // slow.
    flags: "write deny-oom",
    categories: "write slow",
    own_category: true,
    args: &[],
    stats: Stats::new(),
};

impl Rate for SubWindow {
    const COMMAND: &'static str = "RL.SUBWIN";
    const CODE: u8 = 5;
    const FORM: Form = Form::Block;
    const INFO: &'static Info = &SUBWIN_INFO;
    const GRAMMAR: args::Grammar = args::Grammar {
        positional: args::Positional::Numbers(3),
        params: &[
            meta::LIMIT,
            meta::WINDOW_MS,
            arg("resolution-ms", ArgKind::Integer),
        ],
        options: Options::TABLE,
    };
    const KEYWORD: Option<&'static str> = Some("SUBWIN");
    const EFFECT_CODE: u8 = 5;
    type Args = Params;

    fn params(args: &Params) -> &Params {
        args
    }

    fn parse(words: &[&[u8]]) -> Result<RateCall<Params>, Error> {
        let limit = positional(words, 0, "limit", 1, MAX_LIMIT)?;
        let window_ms = args::positional_duration(words, 1, "window_ms", 1, MAX_WINDOW_MS)?;
        let resolution_ms = args::positional_duration(words, 2, "resolution_ms", 1, window_ms)?;
        if !window_ms.is_multiple_of(resolution_ms) {
            return Err(Error::Invalid(
                "window_ms must be a multiple of resolution_ms",
            ));
        }
        if window_ms / resolution_ms > MAX_SUBINTERVALS {
            return Err(Error::Invalid(
                "window_ms / resolution_ms must be at most 4096 sub-intervals",
            ));
        }
        let o = Options::parse(words.get(3..).unwrap_or_default())?;
        Ok(RateCall {
            params: Params {
                limit,
                window_ms,
                resolution_ms,
            },
            cost: args::cost(o.cost),
            now: o.now(),
        })
    }

    fn fresh(p: &Params) -> SubWindow {
        SubWindow::new(p)
    }

    fn write_params<O: Out>(p: &Params, out: &mut O) {
        out.number(p.limit)
            .number(p.window_ms)
            .number(p.resolution_ms);
    }
}

/// Encoding (kind 5), version 3: `latest limit window_ms resolution_ms nkept (window_ms
/// last_used)* nset (back count)*`: only the non-zero counters, oldest first, the first
/// `back` how many sub-intervals before `L` (the sub-interval of `latest`) it is (at most
/// the ring's length, and not before sub-interval 0), each next one the number of
/// sub-intervals skipped since the one before (so strictly newer), every `count` at
/// least 1. Version 1: `latest limit window_ms resolution_ms count*`, the `n + 1` counters of the
/// sub-intervals `L-n ..= L` oldest first. Version 2 is version 1 with the retention after
/// the parameters (1 to 3 entries, each kept window at least `window_ms`, `last_used` the
/// last millisecond of a sub-interval not after `latest`'s); the ring then spans the longest
/// kept window in sub-intervals (rounded up, at most 4096).
///
/// A key points at the ring's block of words itself ([`Form::Block`]).
impl Encoding for SubWindow {
    const VERSION: u8 = 3;

    fn encode<S: Sink>(&self, out: &mut S) {
        let p = self.params();
        for v in [self.latest().ms(), p.limit, p.window_ms, p.resolution_ms] {
            out.varint(v);
        }
        let retention = self.retention();
        out.varint(retention.len() as u64);
        for &(w, last_used) in &retention {
            out.varint(w);
            out.varint(last_used.ms());
        }
        // The non-zero counters, oldest first: how far back the first is, then the
        // sub-intervals skipped before each next one.
        out.varint(self.nonzero().count() as u64);
        let mut prev = None;
        for (back, c) in self.nonzero() {
            if out.full() {
                return;
            }
            match prev {
                None => out.varint(back),
                Some(p) => out.varint(p - back - 1),
            }
            out.varint(c);
            prev = Some(back);
        }
    }

    fn decode(version: u8, r: &mut Reader) -> Result<Self, Malformed> {
        if !(1..=3).contains(&version) {
            return Err(Malformed("no such version for this kind"));
        }
        let latest = Instant::from_ms(r.varint()?);
        let p = Params {
            limit: r.varint()?,
            window_ms: r.varint()?,
            resolution_ms: r.varint()?,
        };
        if !p.valid() {
            return Err(Malformed("parameters out of range"));
        }
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
        let w = if version == 3 {
            // The non-zero counters, read as the window takes them: at most the ring's
            // (`from_sparse` checks each is within it).
            let n = r.count(2)?;
            let mut back: Option<u64> = None;
            let mut bad = None;
            let nonzero = (0..n).map_while(|_| {
                let entry = r.varint().and_then(|step| {
                    let b = match back {
                        None => Some(step),
                        Some(prev) => step.checked_add(1).and_then(|s| prev.checked_sub(s)),
                    };
                    let b = b.ok_or(Malformed("counters out of order"))?;
                    back = Some(b);
                    match r.varint()? {
                        0 => Err(Malformed("a zero counter written")),
                        c => Ok((b, c)),
                    }
                });
                entry.map_err(|e| bad = Some(e)).ok()
            });
            let w = SubWindow::from_sparse(p, latest, retention.as_deref(), nonzero);
            if let Some(e) = bad {
                return Err(e);
            }
            w
        } else {
            // The front is checked by `from_parts`; unchecked, it still asks for at most
            // MAX_SUBINTERVALS + 1 counters.
            let front = match &retention {
                Some(entries) => Some(
                    Front::from_entries(entries, 0, true, MAX_WINDOW_MS, Instant::from_ms(u64::MAX))
                        .map_err(|e| Malformed(e.0))?,
                ),
                None => None,
            };
            let n = SubWindow::counters_for(&p, front.as_ref());
            // At most MAX_SUBINTERVALS + 1 counters (see above): allocated once.
            let mut counts = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
            for _ in 0..n {
                counts.push(r.varint()?);
            }
            SubWindow::from_parts(p, latest, retention.as_deref(), &counts)
        };
        w.map_err(|e| Malformed(e.0))
    }

    fn heap_size(&self) -> usize {
        SubWindow::heap_size(self)
    }
}

impl Block for SubWindow {
    fn into_words(self) -> Box<[u32]> {
        SubWindow::into_words(self)
    }

    fn from_words(words: Box<[u32]>) -> Self {
        SubWindow::from_words(words)
    }

    fn words_len(first: u32) -> usize {
        block_len(first)
    }
}
