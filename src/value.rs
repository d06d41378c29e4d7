//! The value a limiter key holds, whatever its algorithm, and its persisted encoding.
//!
//! Encoding version 1: `version:u8 kind:u8`, then varints:
//! - sliding log (kind 1): `latest nwindows (limit window_ms)* nrecords (delta_ms units)*`,
//!   where the first delta is the absolute timestamp of the oldest record;
//! - token bucket (kind 2) and leaky bucket (kind 3): `latest debt limit window_ms burst
//!   max_delay_ms`, the debt in ticks of `1/limit` ms (see `algo::gcra`);
//! - fixed window (kind 4): `latest end count limit window_ms align(0|1)`, `window_ms` being
//!   the length of the open window (it started at `end - window_ms`): the `window_ms` it
//!   opened with, or more once a longer window has joined it (see `algo::fixed`);
//! - sub-interval window (kind 5): `latest limit window_ms resolution_ms count*`, the `n + 1`
//!   counters of the sub-intervals `L-n ..= L` oldest first, `L` being that of `latest`.
//!
//! Encoding version 2 is for a state with a retention: a log or ring kept longer than its
//! windows, for windows used before that still count what they do not (see
//! `algo::retention`). It is version 1 with the retention after the parameters, as
//! `nkept (window_ms last_used)*`: 1 to 3 entries, windows strictly growing and last uses
//! strictly falling (a Pareto front), `last_used` absolute (possibly long past):
//! - sliding log (kind 1): `latest nwindows (limit window_ms)* nkept (window_ms
//!   last_used)* nrecords (delta_ms units)*`, each kept window longer than the longest
//!   current one and at most 31 days, each `last_used` at most `latest`;
//! - sub-interval window (kind 5): `latest limit window_ms resolution_ms nkept (window_ms
//!   last_used)* count*`, each kept window at least `window_ms` (one as long runs on while
//!   pending), `last_used` the last millisecond of a sub-interval not after `latest`'s;
//!   the ring spans the longest kept window in sub-intervals (rounded up, at most 4096),
//!   so that many counters plus one follow.
//!
//! Until version 3, a state without a retention was written as version 1 and one with a
//! retention as version 2; the other kinds have no version 2.
//!
//! Encoding version 3 is what this build writes for kinds 1 to 5 (leases stay version 1). It
//! keeps the small states of each kind within 20 bytes, under the size from which Redis
//! tries to LZF-compress every string it saves in an RDB (about 750 instructions a key
//! wasted on a payload that does not compress): version 2's layout (version 1's for
//! buckets), with these changes:
//! - sliding log (kind 1): `latest nwindows (limit window_ms)* nkept (window_ms last_used)*
//!   nrecords (delta_ms units)*`, `nkept` always present (0 without a retention), the first
//!   delta how long before `latest` the oldest record was (each next one after the one
//!   before, as in version 1);
//! - token bucket (kind 2): `latest debt limit window_ms burst` (its delay is always 0);
//! - leaky bucket (kind 3): `latest debt limit window_ms burst delay`, `delay` 0 for a
//!   MAXDELAY equal to the window (the default), `max_delay_ms + 1` otherwise;
//! - fixed window (kind 4): `latest ahead count limit window_ms align`, `ahead` the end
//!   relative to `latest`: `2·(end - latest)` when the window ends at `latest` or later,
//!   `2·(latest - end) - 1` when it ended before;
//! - sub-interval window (kind 5): `latest limit window_ms resolution_ms nkept (window_ms
//!   last_used)* nset (back count)*`: only the non-zero counters, oldest first, the first
//!   `back` how many sub-intervals before `L` it is (at most the ring's length, and not
//!   before sub-interval 0), each next one the number of sub-intervals skipped since the one
//!   before (so strictly newer), every `count` at least 1.
//!
//! The encoding is also the digest (`DEBUG DIGEST-VALUE`), so a key's digest changed with
//! version 3: primaries and replicas compare digests only when they run the same build.
//!
//! In memory, a key's module value is a thin pointer to one allocation, its kind in the
//! pointer's low bits (see [`into_raw`]): for kind 5 the sub-interval window's own block of
//! words, so that such a key costs its block and nothing more; for kinds 1 and 6 their own
//! box; for kinds 2 to 4 (buckets and fixed windows) 16 bytes, `latest` and the state that
//! moves, their parameters interned in a table that keys share (`intern`: a 16-bit slot,
//! counted), or, when they do not fit that form or the table is full, their own 32-byte box
//! (see [`Packed`]). Either form answers, encodes and digests alike; a command changes a
//! copy of the state and writes it back when its borrow ends (see [`Held`]). A compact
//! state is encoded from its 16 bytes and the parameters' encoding the table keeps (see
//! [`set_suffix`]), and an RDB load of keys sharing the set interned last decodes them
//! straight into that form ([`decode_raw`]).
//!
//! The encoding is canonical (the same logical state always gives the same bytes, one
//! version per build), so it also serves as the digest.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};

use crate::algo::chunks::class_ceil;
use crate::algo::fixed::{self, FixedWindow};
use crate::algo::gcra::{Gcra, Params};
use crate::algo::lease::{self, Leases};
use crate::algo::retention::{Front, MAX_KEPT};
use crate::algo::slide::{SlidingLog, Windows};
use crate::algo::subwin::{self, SubWindow};
use crate::algo::{Decision, Limit, Millis, Window, MAX_TIMESTAMP};
use crate::codec::{put_varint, Malformed, Reader};
use crate::intern;

/// The encoding version this build writes (for kinds 1 to 5; leases: version 1, see the
/// module docs). Older versions stay readable.
pub const ENCODING_VERSION: u8 = 3;

/// Which algorithm a key holds; the command that creates it names it in errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Slide,
    Token,
    Leaky,
    Fixed,
    Subwin,
    Lease,
}

impl Kind {
    /// The command that owns keys of this kind.
    pub fn command(self) -> &'static str {
        match self {
            Kind::Slide => "RL.SLIDE",
            Kind::Token => "RL.TOKEN",
            Kind::Leaky => "RL.LEAKY",
            Kind::Fixed => "RL.FIXED",
            Kind::Subwin => "RL.SUBWIN",
            Kind::Lease => "RL.ACQUIRE",
        }
    }

    /// [`Kind::command`] as a C string, for replication.
    pub fn command_c(self) -> &'static std::ffi::CStr {
        match self {
            Kind::Slide => c"RL.SLIDE",
            Kind::Token => c"RL.TOKEN",
            Kind::Leaky => c"RL.LEAKY",
            Kind::Fixed => c"RL.FIXED",
            Kind::Subwin => c"RL.SUBWIN",
            Kind::Lease => c"RL.ACQUIRE",
        }
    }

    /// The keyspace event a change by this kind's command emits (class `d`).
    pub fn event(self) -> &'static std::ffi::CStr {
        match self {
            Kind::Slide => c"rl.slide",
            Kind::Token => c"rl.token",
            Kind::Leaky => c"rl.leaky",
            Kind::Fixed => c"rl.fixed",
            Kind::Subwin => c"rl.subwin",
            Kind::Lease => c"rl.acquire",
        }
    }

    fn tag(self) -> u8 {
        match self {
            Kind::Slide => 1,
            Kind::Token => 2,
            Kind::Leaky => 3,
            Kind::Fixed => 4,
            Kind::Subwin => 5,
            Kind::Lease => 6,
        }
    }
}

/// What an `RL.*` key holds: each kind in one allocation of its own, which the key points
/// to directly (see [`into_raw`]).
#[derive(Clone, Debug)]
pub enum Limiter {
    Slide(Box<SlidingLog>),
    Token(Gcra),
    Leaky(Gcra),
    Fixed(FixedWindow),
    Subwin(SubWindow),
    Lease(Box<Leases>),
}

impl Limiter {
    pub fn kind(&self) -> Kind {
        match self {
            Limiter::Slide(_) => Kind::Slide,
            Limiter::Token(_) => Kind::Token,
            Limiter::Leaky(_) => Kind::Leaky,
            Limiter::Fixed(_) => Kind::Fixed,
            Limiter::Subwin(_) => Kind::Subwin,
            Limiter::Lease(_) => Kind::Lease,
        }
    }

    pub fn slide_mut(&mut self) -> Option<&mut SlidingLog> {
        match self {
            Limiter::Slide(log) => Some(log),
            _ => None,
        }
    }

    pub fn token_mut(&mut self) -> Option<&mut Gcra> {
        match self {
            Limiter::Token(g) => Some(g),
            _ => None,
        }
    }

    pub fn leaky_mut(&mut self) -> Option<&mut Gcra> {
        match self {
            Limiter::Leaky(g) => Some(g),
            _ => None,
        }
    }

    pub fn fixed_mut(&mut self) -> Option<&mut FixedWindow> {
        match self {
            Limiter::Fixed(w) => Some(w),
            _ => None,
        }
    }

    pub fn subwin_mut(&mut self) -> Option<&mut SubWindow> {
        match self {
            Limiter::Subwin(w) => Some(w),
            _ => None,
        }
    }

    pub fn lease_mut(&mut self) -> Option<&mut Leases> {
        match self {
            Limiter::Lease(l) => Some(l.as_mut()),
            _ => None,
        }
    }

    /// The answer to a `COST 0` call under the parameters last used, changing nothing.
    pub fn peek(&self, now: Millis) -> Decision {
        match self {
            Limiter::Slide(log) => log.peek(now),
            Limiter::Token(g) | Limiter::Leaky(g) => g.peek(now),
            Limiter::Fixed(w) => w.peek(now),
            Limiter::Subwin(w) => w.peek(now),
            Limiter::Lease(l) => l.peek(now),
        }
    }

    /// What a call of `cost` units would be answered under the parameters last used, changing
    /// nothing (`RL.PEEK key COST n`).
    pub fn peek_cost(&self, now: Millis, cost: u64) -> Decision {
        match self {
            Limiter::Slide(log) => log.evaluate(now, &log.windows(), cost),
            Limiter::Token(g) | Limiter::Leaky(g) => g.evaluate(now, &g.params(), cost),
            Limiter::Fixed(w) => w.evaluate(now, &w.params(), cost),
            Limiter::Subwin(w) => w.evaluate(now, &w.params(), cost),
            // Whether `cost` units are free now, and when they will be.
            Limiter::Lease(l) => l.peek_cost(now, cost),
        }
    }

    /// Gives back up to `units`, newest first, and answers like [`Limiter::peek`].
    pub fn refund(&mut self, now: Millis, units: u64) -> Decision {
        match self {
            Limiter::Slide(log) => log.refund(now, units),
            Limiter::Token(g) | Limiter::Leaky(g) => g.refund(now, units),
            Limiter::Fixed(w) => w.refund(now, units),
            Limiter::Subwin(w) => w.refund(now, units),
            // Leases are given back by RL.RELEASE (RL.REFUND refuses them before this).
            Limiter::Lease(l) => l.peek(now),
        }
    }

    /// Records `units` under the parameters last used, whatever the limit (`RL.CHARGE`), and
    /// answers as [`Limit::charge`] does; `None`, changing nothing, when they do not fit.
    pub fn charge(&mut self, now: Millis, units: u64) -> Option<Decision> {
        match self {
            Limiter::Slide(log) => {
                let windows = log.windows();
                log.charge(now, &windows, units)
            }
            Limiter::Token(g) | Limiter::Leaky(g) => {
                let p = g.params();
                g.charge(now, &p, units)
            }
            Limiter::Fixed(w) => {
                let p = w.params();
                w.charge(now, &p, units)
            }
            Limiter::Subwin(w) => {
                let p = w.params();
                w.charge(now, &p, units)
            }
            // Refused before this (`Error::LeaseCharge`): leases hold units until released.
            Limiter::Lease(_) => None,
        }
    }

    /// Whether [`Limiter::charge`] would record `units` at `now`, changing nothing.
    pub fn can_charge(&self, now: Millis, units: u64) -> bool {
        if units == 0 {
            return true;
        }
        match self {
            Limiter::Slide(log) => log.can_record(now, &log.windows(), units),
            Limiter::Token(g) | Limiter::Leaky(g) => g.can_record(now, &g.params(), units),
            Limiter::Fixed(w) => w.can_record(now, &w.params(), units),
            Limiter::Subwin(w) => w.can_record(now, &w.params(), units),
            Limiter::Lease(_) => false,
        }
    }

    /// The latest time the limiter has seen; it replicates changes at this time.
    pub fn latest(&self) -> Millis {
        match self {
            Limiter::Slide(log) => log.latest(),
            Limiter::Token(g) | Limiter::Leaky(g) => g.latest(),
            Limiter::Fixed(w) => w.latest(),
            Limiter::Subwin(w) => w.latest(),
            Limiter::Lease(l) => l.latest(),
        }
    }

    /// When the key should expire: the moment the limiter is back to empty. `None` when it
    /// is already empty, and the key should go.
    pub fn empty_at(&self) -> Option<Millis> {
        match self {
            Limiter::Slide(log) => log.empty_at(),
            Limiter::Token(g) | Limiter::Leaky(g) => g.empty_at(),
            Limiter::Fixed(w) => w.empty_at(),
            Limiter::Subwin(w) => w.empty_at(),
            Limiter::Lease(l) => l.empty_at(),
        }
    }

    /// Bytes this value costs, for `MEMORY USAGE`: what Redis allocates around a module value
    /// and what the module allocated for it, each allocation rounded up to its size class as
    /// the allocator does. (Redis adds the key's name and its dictionary entry.)
    pub fn mem_usage(&self) -> usize {
        let own = match self {
            Limiter::Slide(log) => class_ceil(std::mem::size_of::<SlidingLog>()) + log.heap_size(),
            Limiter::Token(_) | Limiter::Leaky(_) => class_ceil(std::mem::size_of::<Gcra>()),
            Limiter::Fixed(_) => class_ceil(std::mem::size_of::<FixedWindow>()),
            Limiter::Subwin(w) => class_ceil(w.heap_size()),
            Limiter::Lease(l) => class_ceil(std::mem::size_of::<Leases>()) + l.heap_size(),
        };
        VALUE_OBJECT + own
    }

    /// Heap allocations held, what freeing the value costs: Redis frees a value of more
    /// than 64 in its lazy-free thread (UNLINK, and DEL, expiry or eviction when the
    /// server's lazyfree options say so).
    pub fn allocations(&self) -> usize {
        match self {
            Limiter::Slide(log) => 1 + log.allocations(),
            Limiter::Lease(l) => 1 + l.allocations(),
            _ => 1,
        }
    }

    /// The fields of a token, leaky or fixed state's encoding (version 3, see the module
    /// docs) and how many of the six are used, `None` for the other kinds.
    fn fixed_fields(&self) -> Option<([u64; 6], usize)> {
        match self {
            Limiter::Token(g) => {
                let p = g.params();
                Some(([g.latest(), g.debt(), p.limit, p.window_ms, p.burst, 0], 5))
            }
            Limiter::Leaky(g) => {
                let p = g.params();
                let delay = if p.max_delay_ms == p.window_ms {
                    0
                } else {
                    p.max_delay_ms + 1
                };
                let fields = [g.latest(), g.debt(), p.limit, p.window_ms, p.burst, delay];
                Some((fields, 6))
            }
            Limiter::Fixed(w) => {
                let p = w.params();
                Some((
                    [
                        w.latest(),
                        zigzag(w.end(), w.latest()),
                        w.count_at(w.latest()),
                        p.limit,
                        p.window_ms,
                        u64::from(p.align),
                    ],
                    6,
                ))
            }
            _ => None,
        }
    }

    /// Calls `f` with [`Limiter::encode`]'s bytes, built on the stack when they fit in 64
    /// bytes (leases aside): RDB save, AOF rewrite and digest then allocate nothing for the
    /// small states.
    pub fn with_encoding<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        if let Some((fields, n)) = self.fixed_fields() {
            // The buckets and fixed windows: a few varints, always within the buffer.
            let mut out = SmallOut::new();
            out.put(&[ENCODING_VERSION, self.kind().tag()]);
            fields.into_iter().take(n).for_each(|v| out.varint(v));
            return f(out.as_bytes());
        }
        if !matches!(self, Limiter::Lease(_)) {
            let mut out = SmallOut::new();
            self.encode_into(&mut out);
            if !out.overflowed {
                return f(out.as_bytes());
            }
        }
        f(&self.encode())
    }

    /// The canonical encoding of the current version (version 3; leases: version 1).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        match self {
            Limiter::Lease(l) => {
                out.extend_from_slice(&[1, self.kind().tag()]);
                encode_leases(&mut out, l);
            }
            _ => self.encode_into(&mut out),
        }
        out
    }

    /// Writes the version 3 encoding of kinds 1 to 5 into `out`, stopping early once `out`
    /// is full.
    fn encode_into(&self, out: &mut impl Sink) {
        out.put(&[ENCODING_VERSION, self.kind().tag()]);
        let retention = match self {
            Limiter::Slide(log) => log.retention().to_vec(),
            Limiter::Subwin(w) => w.retention(),
            _ => Vec::new(),
        };
        let put_retention = |out: &mut dyn Sink| {
            out.varint(retention.len() as u64);
            for &(w, last_used) in &retention {
                out.varint(w);
                out.varint(last_used);
            }
        };
        match self {
            Limiter::Slide(log) => {
                out.varint(log.latest());
                let windows = log.windows();
                out.varint(windows.len() as u64);
                for w in windows.iter() {
                    out.varint(w.limit);
                    out.varint(w.window_ms);
                }
                put_retention(out);
                out.varint(log.len() as u64);
                // The oldest record back from `latest`, each next one after the one before.
                let mut prev = None;
                for (at, units) in log.records() {
                    if out.full() {
                        return;
                    }
                    match prev {
                        None => out.varint(log.latest() - at),
                        Some(p) => out.varint(at - p),
                    }
                    out.varint(units);
                    prev = Some(at);
                }
            }
            Limiter::Token(_) | Limiter::Leaky(_) | Limiter::Fixed(_) => {
                let (fields, n) = self.fixed_fields().unwrap_or_default();
                fields.into_iter().take(n).for_each(|v| out.varint(v));
            }
            Limiter::Subwin(w) => {
                let p = w.params();
                let fields = [w.latest(), p.limit, p.window_ms, p.resolution_ms];
                fields.into_iter().for_each(|v| out.varint(v));
                put_retention(out);
                // The non-zero counters, oldest first: how far back the first is, then the
                // sub-intervals skipped before each next one.
                out.varint(w.nonzero().count() as u64);
                let mut prev = None;
                for (back, c) in w.nonzero() {
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
            Limiter::Lease(_) => {}
        }
    }

    /// Decodes any supported version, checking every invariant of the state it rebuilds.
    pub fn decode(bytes: &[u8]) -> Result<Limiter, Malformed> {
        let mut r = Reader::new(bytes);
        let version = r.byte()?;
        if !(1..=ENCODING_VERSION).contains(&version) {
            return Err(Malformed("unknown encoding version"));
        }
        let kind = r.byte()?;
        match (version, kind) {
            (2, 1 | 5) | (1, _) | (3, 1..=5) => {}
            _ => return Err(Malformed("no such version for this kind")),
        }
        let v3 = version == 3;
        // Version 2 is written only for a retention: at least one entry, at most a front's;
        // version 3 always has the count, 0 for none.
        let get_retention = |r: &mut Reader| -> Result<Option<Vec<(u64, Millis)>>, Malformed> {
            if version == 1 {
                return Ok(None);
            }
            let n = r.varint()?;
            if n > MAX_KEPT as u64 || (n == 0 && version == 2) {
                return Err(Malformed("bad retention length"));
            }
            if n == 0 {
                return Ok(None);
            }
            let entries = (0..n)
                .map(|_| Ok((r.varint()?, r.varint()?)))
                .collect::<Result<Vec<_>, Malformed>>()?;
            Ok(Some(entries))
        };
        let limiter = match kind {
            1 => {
                let latest = r.varint()?;
                let windows = get_windows(&mut r)?;
                let retention = get_retention(&mut r)?;
                let n = r.count(2)?;
                // Records are read as the log takes them, so that a big one is not held twice.
                // Versions 1 and 2: the first delta is the absolute time of the oldest record;
                // version 3: how long before `latest` it was.
                let mut at: Option<u64> = None;
                let mut bad = None;
                let records = (0..n).map_while(|_| {
                    let record = r.varint().and_then(|delta| {
                        let next = match at {
                            None if v3 => latest.checked_sub(delta),
                            None => Some(delta),
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
                Limiter::Slide(Box::new(log))
            }
            tag @ (2 | 3) => {
                let (latest, debt) = (r.varint()?, r.varint()?);
                let (limit, window_ms, burst) = (r.varint()?, r.varint()?, r.varint()?);
                let max_delay_ms = match (tag, v3) {
                    // Version 3: no delay for a token bucket; 0 for a leaky bucket's default
                    // (its window), the delay plus one otherwise.
                    (2, true) => 0,
                    (_, true) => match r.varint()? {
                        0 => window_ms,
                        d if d - 1 == window_ms => {
                            return Err(Malformed("the default delay is written 0"))
                        }
                        d => d - 1,
                    },
                    (_, false) => r.varint()?,
                };
                let p = Params {
                    limit,
                    window_ms,
                    burst,
                    max_delay_ms,
                };
                if tag == 2 && p.max_delay_ms != 0 {
                    return Err(Malformed("a token bucket has no delay"));
                }
                let g = Gcra::from_parts(p, latest, debt).map_err(|e| Malformed(e.0))?;
                if tag == 2 {
                    Limiter::Token(g)
                } else {
                    Limiter::Leaky(g)
                }
            }
            4 => {
                let (latest, end, count) = (r.varint()?, r.varint()?, r.varint()?);
                // Version 3: the end relative to `latest` (see `zigzag`).
                let end = if v3 { unzigzag(end, latest)? } else { end };
                let (limit, window_ms) = (r.varint()?, r.varint()?);
                let align = match r.varint()? {
                    0 => false,
                    1 => true,
                    _ => return Err(Malformed("ALIGN is 0 or 1")),
                };
                let p = fixed::Params {
                    limit,
                    window_ms,
                    align,
                };
                let w =
                    FixedWindow::from_parts(p, latest, end, count).map_err(|e| Malformed(e.0))?;
                Limiter::Fixed(w)
            }
            5 => {
                let latest = r.varint()?;
                let p = subwin::Params {
                    limit: r.varint()?,
                    window_ms: r.varint()?,
                    resolution_ms: r.varint()?,
                };
                if !p.valid() {
                    return Err(Malformed("parameters out of range"));
                }
                let retention = get_retention(&mut r)?;
                let w = if v3 {
                    // The non-zero counters, read as the window takes them: at most the
                    // ring's (`from_sparse` checks each is within it).
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
                    // The front is checked by `from_parts`; unchecked, it still asks for at
                    // most MAX_SUBINTERVALS + 1 counters.
                    let front = match &retention {
                        Some(entries) => Some(
                            Front::from_entries(entries, 0, true, subwin::MAX_WINDOW_MS, u64::MAX)
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
                Limiter::Subwin(w.map_err(|e| Malformed(e.0))?)
            }
            6 => Limiter::Lease(Box::new(decode_leases(&mut r)?)),
            _ => return Err(Malformed("unknown limiter kind")),
        };
        r.finish()?;
        Ok(limiter)
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

/// What Redis allocates around every module value: its object (16 bytes) and the module
/// value (16: the type and the pointer to the limiter).
const VALUE_OBJECT: usize = 32;

/// How a key's module value says which kind it holds: one allocation per key, the kind in
/// the pointer's low bits. Bits 0 to 2 all set: a bucket's or fixed window's compact form
/// ([`Packed`], 8-byte aligned), its kind in its parameter set. Otherwise, bit 0 set: a
/// sub-interval window's block of words (4-byte aligned, so only bit 0 is free). Bit 0
/// clear: the kind's own box (8-byte aligned), the kind in bits 1 and 2.
const SUBWIN_BLOCK: usize = 1;
const FIXED_BOX: usize = 0;
const SLIDE_BOX: usize = 2;
const TOKEN_BOX: usize = 4;
const LEAKY_BOX: usize = 6;
const BOX_TAGS: usize = 6;
/// Bits 0 and 1 set, bit 2 clear: a lease semaphore's box (8-byte aligned). A sub-interval
/// block is 4-byte aligned, so its tagged pointer never has bit 1 set.
const LEASE_BOX: usize = 3;
/// Bits 0 to 2 set: a [`Packed`] state.
const COMPACT: usize = 7;
const TAGS: usize = 7;

// Boxes keep bits 0 to 2 free.
const _: () = assert!(
    std::mem::align_of::<Leases>() >= 8
        && std::mem::align_of::<SlidingLog>() >= 8
        && std::mem::align_of::<Gcra>() >= 8
        && std::mem::align_of::<FixedWindow>() >= 8
        && std::mem::align_of::<Packed>() >= 8
);

/// A bucket (kinds 2 and 3) or a fixed window (kind 4) in 16 bytes, its parameters interned
/// in [`intern::TABLE`] (keys with the same parameters share them): `head` is `latest << 16
/// | slot`; `tail` is a bucket's debt, or a window's `count << 32 | ahead` (see
/// [`ahead32`]). A state that does not fit (a timestamp from 2^48 ms on, a window that ended
/// long before its latest call) or whose parameters find no free slot is kept in its
/// kind's own box instead, the wide form; the two answer, encode and digest alike.
#[repr(C)]
struct Packed {
    head: u64,
    tail: u64,
}

/// Bits of [`Packed::head`] below `latest`: the slot.
const SLOT_BITS: u32 = 16;
const LOW32: u64 = u32::MAX as u64;

/// A fixed window's end as 32 bits relative to its latest call: `end - latest` when the
/// window ends then or later (at most [`fixed::MAX_WINDOW_MS`]: a window never ends further
/// ahead), `MAX_WINDOW_MS + (latest - end)` when it ended before; `None` when that is past
/// 2^32 (a window that ended some 18 days before its latest call).
fn ahead32(end: Millis, latest: Millis) -> Option<u64> {
    let v = if end >= latest {
        Some(end - latest).filter(|&d| d <= fixed::MAX_WINDOW_MS)
    } else {
        fixed::MAX_WINDOW_MS.checked_add(latest - end)
    };
    v.filter(|&v| v <= LOW32)
}

/// The end [`ahead32`] made of `v`.
fn end_of(v: u64, latest: Millis) -> Millis {
    if v <= fixed::MAX_WINDOW_MS {
        latest + v
    } else {
        latest.saturating_sub(v - fixed::MAX_WINDOW_MS)
    }
}

/// A bucket's parameter set: limit, window, burst and delay (each below 2^32).
fn gcra_set(kind: Kind, g: &Gcra) -> intern::Set {
    let p = g.params();
    intern::Set {
        kind: kind.tag(),
        a: p.limit << 32 | p.window_ms,
        b: p.burst << 32 | p.max_delay_ms,
    }
}

/// A fixed window's parameter set: limit, the open window's length, ALIGN.
fn fixed_set(w: &FixedWindow) -> intern::Set {
    let p = w.params();
    intern::Set {
        kind: Kind::Fixed.tag(),
        a: p.limit << 32 | p.window_ms,
        b: u64::from(p.align),
    }
}

/// The parameter set, `latest` and [`Packed::tail`] of a state that fits the compact form;
/// `None` for other kinds and states that do not fit.
#[inline]
fn packed_parts(limiter: &Limiter) -> Option<(intern::Set, Millis, u64)> {
    let (set, latest, tail) = match limiter {
        Limiter::Token(g) => (gcra_set(Kind::Token, g), g.latest(), g.debt()),
        Limiter::Leaky(g) => (gcra_set(Kind::Leaky, g), g.latest(), g.debt()),
        Limiter::Fixed(w) => {
            let ahead = ahead32(w.end(), w.latest())?;
            let tail = u64::from(w.count()) << 32 | ahead;
            (fixed_set(w), w.latest(), tail)
        }
        _ => return None,
    };
    (latest >> (64 - SLOT_BITS) == 0).then_some((set, latest, tail))
}

/// The state a [`Packed`] holds, and the slot of its parameters.
#[inline]
fn unpack(p: &Packed) -> (Limiter, u16) {
    let slot = p.head as u16;
    let latest = p.head >> SLOT_BITS;
    let set = intern::TABLE.get(slot);
    let limiter = match set.kind {
        2 | 3 => {
            let params = Params {
                limit: set.a >> 32,
                window_ms: set.a & LOW32,
                burst: set.b >> 32,
                max_delay_ms: set.b & LOW32,
            };
            let g = Gcra::with_state(&params, latest, p.tail);
            if set.kind == 2 {
                Limiter::Token(g)
            } else {
                Limiter::Leaky(g)
            }
        }
        _ => {
            let params = fixed::Params {
                limit: set.a >> 32,
                window_ms: set.a & LOW32,
                align: set.b != 0,
            };
            let end = end_of(p.tail & LOW32, latest);
            let count = (p.tail >> 32) as u32;
            Limiter::Fixed(FixedWindow::with_state(&params, latest, end, count))
        }
    };
    (limiter, slot)
}

/// The end of a compact state's version 3 encoding that only its parameters make (the same
/// for every key sharing them, kept with them in the table): `limit window_ms burst` for a
/// token bucket, then `delay` for a leaky bucket, `limit window_ms align` for a fixed window
/// (see the module docs and [`Limiter::fixed_fields`]).
fn set_suffix(set: &intern::Set) -> intern::Suffix {
    let (limit, window_ms) = (set.a >> 32, set.a & LOW32);
    let mut out = SmallOut::new();
    match set.kind {
        2 | 3 => {
            [limit, window_ms, set.b >> 32]
                .into_iter()
                .for_each(|v| out.varint(v));
            if set.kind == 3 {
                let max_delay_ms = set.b & LOW32;
                out.varint(if max_delay_ms == window_ms {
                    0
                } else {
                    max_delay_ms + 1
                });
            }
        }
        _ => [limit, window_ms, set.b]
            .into_iter()
            .for_each(|v| out.varint(v)),
    }
    // At most four varints of 32 bits: 20 bytes.
    intern::Suffix::new(out.as_bytes()).unwrap_or_default()
}

/// The varints of a compact state's version 3 encoding before its parameters' (see
/// [`set_suffix`]): `latest debt` for a bucket, `latest ahead count` for a fixed window.
#[inline]
fn compact_fields(kind: u8, p: &Packed) -> Option<([u64; 3], usize)> {
    let latest = p.head >> SLOT_BITS;
    match kind {
        2 | 3 => Some(([latest, p.tail, 0], 2)),
        4 => {
            let end = end_of(p.tail & LOW32, latest);
            let count = if latest < end { p.tail >> 32 } else { 0 };
            Some(([latest, zigzag(end, latest), count], 3))
        }
        _ => None,
    }
}

/// The version 3 encoding of the state `p` holds, made from its words and its parameters'
/// suffix without rebuilding the limiter, into `out` (empty); false for a set of another
/// kind (not reached).
#[inline]
fn compact_encoding(p: &Packed, out: &mut SmallOut) -> bool {
    let (kind, suffix) = intern::TABLE.suffix(p.head as u16);
    let Some((fields, n)) = compact_fields(kind, p) else {
        return false;
    };
    out.put(&[ENCODING_VERSION, kind]);
    fields.into_iter().take(n).for_each(|v| out.varint(v));
    out.put_padded(&suffix.padded(), suffix.byte_len());
    true
}

/// Decodes a bucket's or fixed window's version 3 encoding straight into its compact form
/// when its parameters are those of the set interned last (a load or restore of keys that
/// share them: no parameters to read, check or look up), `None` otherwise (the caller then
/// decodes it the general way, which also refuses what is damaged). The same value as
/// `into_raw(Limiter::decode(bytes)?)`: the suffix identifies the set, and the state is
/// checked as `from_parts` and [`packed_parts`] do.
fn decode_compact(bytes: &[u8]) -> Option<*mut c_void> {
    let (&[version, kind], rest) = bytes.split_first_chunk::<2>()?;
    if version != 3 || !(2..=4).contains(&kind) {
        return None;
    }
    let slot = intern::TABLE.last()?;
    let (set_kind, suffix) = intern::TABLE.suffix(slot);
    if set_kind != kind {
        return None;
    }
    let mut r = Reader::new(rest);
    let latest = r.varint().ok()?;
    if latest > MAX_TIMESTAMP || latest >> (64 - SLOT_BITS) != 0 {
        return None;
    }
    let tail = if kind == 4 {
        let (z, count) = (r.varint().ok()?, r.varint().ok()?);
        let end = unzigzag(z, latest).ok()?;
        if end > MAX_TIMESTAMP + fixed::MAX_WINDOW_MS || count > LOW32 {
            return None;
        }
        count << 32 | ahead32(end, latest)?
    } else {
        r.varint().ok()?
    };
    if !suffix.is(r.rest()) || !intern::TABLE.retain(slot) {
        return None;
    }
    // Referenced: the slot keeps its set now; it must still be the one checked.
    if intern::TABLE.suffix(slot) != (kind, suffix) {
        intern::TABLE.release(slot);
        return None;
    }
    boxed_compact(latest << SLOT_BITS | u64::from(slot), tail)
}

/// The pointer a key holds for the encoding `bytes` (RDB load): `into_raw` of
/// [`Limiter::decode`], straight to the compact form when it can (see [`decode_compact`]).
pub fn decode_raw(bytes: &[u8]) -> Result<*mut c_void, Malformed> {
    match decode_compact(bytes) {
        Some(raw) => Ok(raw),
        None => Limiter::decode(bytes).map(into_raw),
    }
}

/// The compact form of `limiter`, tagged, holding a reference to its parameters' slot;
/// `None` when it does not fit or the table is full.
fn into_compact(limiter: &Limiter) -> Option<*mut c_void> {
    let (set, latest, tail) = packed_parts(limiter)?;
    let slot = intern::TABLE.intern(set, set_suffix)?;
    boxed_compact(latest << SLOT_BITS | u64::from(slot), tail)
}

/// A new [`Packed`] of `head` and `tail`, tagged, taking over the reference to the slot in
/// `head` that the caller holds; `None` (the reference given back) when the allocation is
/// not 8-byte aligned: not reached, the allocator honours the alignment every box here
/// needs, but should it not, the state goes to its wide box rather than to a pointer the
/// tag would spoil.
#[inline]
fn boxed_compact(head: u64, tail: u64) -> Option<*mut c_void> {
    let packed = Box::into_raw(Box::new(Packed { head, tail }));
    if packed.addr() & TAGS != 0 {
        // SAFETY: just made, and used by nothing else.
        drop(unsafe { Box::from_raw(packed) });
        intern::TABLE.release(head as u16);
        return None;
    }
    Some(packed.map_addr(|a| a | COMPACT).cast())
}

/// Turns a limiter into the pointer a key holds; [`from_raw`] or [`borrow_raw`] read it back.
/// A bucket or fixed window takes its compact form when it can (see [`Packed`]).
#[inline]
pub fn into_raw(limiter: Limiter) -> *mut c_void {
    fn tagged<T>(b: Box<T>, tag: usize) -> *mut c_void {
        Box::into_raw(b).map_addr(|a| a | tag).cast()
    }
    if let Some(raw) = into_compact(&limiter) {
        return raw;
    }
    match limiter {
        Limiter::Subwin(w) => {
            let block = Box::into_raw(w.into_words()).cast::<u32>();
            block.map_addr(|a| a | SUBWIN_BLOCK).cast()
        }
        Limiter::Slide(log) => tagged(log, SLIDE_BOX),
        Limiter::Token(g) => tagged(Box::new(g), TOKEN_BOX),
        Limiter::Leaky(g) => tagged(Box::new(g), LEAKY_BOX),
        Limiter::Fixed(w) => tagged(Box::new(w), FIXED_BOX),
        Limiter::Lease(l) => tagged(l, LEASE_BOX),
    }
}

/// Frees the value behind `raw` (the type's `free` callback, which may run in Redis's
/// lazy-free thread): a compact state gives back its parameters' slot without being
/// unpacked.
///
/// # Safety
/// As for [`from_raw`].
pub unsafe fn free_raw(raw: *mut c_void) {
    // SAFETY: as the caller promises.
    if unsafe { free_unreadable(raw) } {
        return;
    }
    if raw.addr() & TAGS == COMPACT {
        // SAFETY: tagged COMPACT: a `Packed` from `into_compact`, now ours.
        let packed = unsafe { Box::from_raw(raw.map_addr(|a| a & !TAGS).cast::<Packed>()) };
        intern::TABLE.release(packed.head as u16);
        return;
    }
    // SAFETY: as the caller promises.
    drop(unsafe { from_raw(raw) });
}

/// A copy of the value behind `raw`, for a new key (`COPY`): a compact state shares its
/// parameters' slot (no hashing).
///
/// # Safety
/// `raw` must come from [`into_raw`] and not have been freed.
pub unsafe fn copy_raw(raw: *mut c_void) -> *mut c_void {
    // SAFETY: as the caller promises.
    if let Some(u) = unsafe { unreadable(raw) } {
        return unreadable_into_raw(&u.bytes, u.reason);
    }
    if raw.addr() & TAGS == COMPACT {
        // SAFETY: tagged COMPACT: a live `Packed` from `into_compact`.
        let Packed { head, tail } = unsafe { &*raw.map_addr(|a| a & !TAGS).cast::<Packed>() };
        let (head, tail, slot) = (*head, *tail, *head as u16);
        if intern::TABLE.retain(slot) {
            if let Some(copy) = boxed_compact(head, tail) {
                return copy;
            }
        }
    }
    // SAFETY: as the caller promises.
    match unsafe { lend_raw(raw) } {
        Some(l) => into_raw(Limiter::clone(&l)),
        None => std::ptr::null_mut(),
    }
}

/// Heap allocations behind `raw`, what freeing it costs (Redis's `free_effort`): asked of a
/// sliding log's and a lease semaphore's boxes, the only forms that hold more than one or
/// two, without reading any other form.
///
/// # Safety
/// As for [`lend_raw`].
pub unsafe fn allocations_raw(raw: *mut c_void) -> usize {
    // SAFETY: as the caller promises.
    if unsafe { unreadable(raw) }.is_some() {
        return 2;
    }
    match raw.addr() & TAGS {
        // SAFETY: as the caller promises.
        SLIDE_BOX | LEASE_BOX => unsafe { lend_raw(raw) }.map_or(1, |l| l.allocations()),
        _ => 1,
    }
}

/// Takes back the limiter behind `raw`, freeing what the key held (and, for a compact state,
/// its reference to its parameters).
///
/// # Safety
/// `raw` must come from [`into_raw`] and not have been freed; the caller owns the result, so
/// nothing may use `raw` afterwards.
pub unsafe fn from_raw(raw: *mut c_void) -> Limiter {
    let untagged = raw.map_addr(|a| a & !TAGS);
    match raw.addr() & TAGS {
        COMPACT => {
            // SAFETY: tagged COMPACT: a `Packed` from `into_compact`, now ours.
            let packed = unsafe { Box::from_raw(untagged.cast::<Packed>()) };
            let (limiter, slot) = unpack(&packed);
            intern::TABLE.release(slot);
            return limiter;
        }
        LEASE_BOX => {
            // SAFETY: bits 0 and 1 set, bit 2 clear: the box of a lease semaphore.
            return Limiter::Lease(unsafe { Box::from_raw(untagged.cast()) });
        }
        _ => {}
    }
    if raw.addr() & SUBWIN_BLOCK != 0 {
        let block = raw.map_addr(|a| a & !SUBWIN_BLOCK).cast::<u32>();
        // SAFETY: a pointer with bit 0 set is a block from `into_words`, whose first word
        // gives its length.
        let words = unsafe {
            let len = subwin::block_len(*block);
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(block, len))
        };
        return Limiter::Subwin(SubWindow::from_words(words));
    }
    let untagged = raw.map_addr(|a| a & !BOX_TAGS);
    // SAFETY: otherwise the tag says which box `into_raw` made.
    unsafe {
        match raw.addr() & BOX_TAGS {
            SLIDE_BOX => Limiter::Slide(Box::from_raw(untagged.cast())),
            TOKEN_BOX => Limiter::Token(*Box::from_raw(untagged.cast())),
            LEAKY_BOX => Limiter::Leaky(*Box::from_raw(untagged.cast())),
            _ => Limiter::Fixed(*Box::from_raw(untagged.cast())),
        }
    }
}

/// A value a load could not read (an RDB or AOF written by another build, or damaged),
/// kept byte for byte instead of failing the whole load: it saves, rewrites, copies and
/// digests as those bytes, and every command on its key answers an error naming `reason`
/// until the key is deleted or expires (see README, "Values a server cannot read").
///
/// In memory it is tagged as a sub-interval block (bit 0), and its first word carries
/// [`subwin::NOT_A_RING`], which no ring's first word has.
#[repr(C)]
pub struct Unreadable {
    mark: u32,
    pub reason: &'static str,
    pub bytes: Box<[u8]>,
}

impl Unreadable {
    /// Bytes it costs, as [`Limiter::mem_usage`] counts them.
    pub fn mem_usage(&self) -> usize {
        VALUE_OBJECT + class_ceil(std::mem::size_of::<Unreadable>()) + class_ceil(self.bytes.len())
    }
}

/// Unreadable values held now, for `INFO ratelimit`.
pub static UNREADABLE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The pointer a key holds for `bytes` that could not be read, and why.
pub fn unreadable_into_raw(bytes: &[u8], reason: &'static str) -> *mut c_void {
    let value = Box::new(Unreadable {
        mark: subwin::NOT_A_RING,
        reason,
        bytes: bytes.into(),
    });
    UNREADABLE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Box::into_raw(value).map_addr(|a| a | SUBWIN_BLOCK).cast()
}

/// The unreadable value behind `raw`, if that is what it is.
///
/// # Safety
/// `raw` must be null or come from [`into_raw`] or [`unreadable_into_raw`], not freed, and
/// stay alive for `'a`.
#[inline(always)]
pub unsafe fn unreadable<'a>(raw: *mut c_void) -> Option<&'a Unreadable> {
    // A sub-interval block's tag: bit 0 set, bit 1 clear (see `into_raw`).
    if raw.addr() & 3 != SUBWIN_BLOCK {
        return None;
    }
    let at = raw.map_addr(|a| a & !SUBWIN_BLOCK);
    // SAFETY: a ring's block or an `Unreadable`, both starting with a u32 word; only an
    // `Unreadable`'s has NOT_A_RING.
    unsafe {
        if *at.cast::<u32>() & subwin::NOT_A_RING == 0 {
            return None;
        }
        Some(&*at.cast::<Unreadable>())
    }
}

/// Frees an unreadable value, `false` (nothing done) for any other.
///
/// # Safety
/// As for [`from_raw`].
unsafe fn free_unreadable(raw: *mut c_void) -> bool {
    // SAFETY: as the caller promises.
    if unsafe { unreadable(raw) }.is_none() {
        return false;
    }
    // SAFETY: an `Unreadable` boxed by `unreadable_into_raw`, now ours.
    drop(unsafe { Box::from_raw(raw.map_addr(|a| a & !SUBWIN_BLOCK).cast::<Unreadable>()) });
    UNREADABLE.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    true
}

/// Reads the limiter behind `raw` without taking it: the allocation stays the key's.
///
/// # Safety
/// `raw` must come from [`into_raw`] and not have been freed; the result must not be dropped
/// (its in-place kinds still own the key's allocation).
#[inline]
unsafe fn read_raw(raw: *mut c_void) -> Limiter {
    let untagged = raw.map_addr(|a| a & !TAGS);
    // The common case first, without a jump table.
    if raw.addr() & TAGS == COMPACT {
        // SAFETY: tagged COMPACT: a live `Packed` from `into_compact`.
        return unpack(unsafe { &*untagged.cast::<Packed>() }).0;
    }
    match raw.addr() & TAGS {
        // SAFETY (the wide boxes): the tag says which box `into_raw` made; copied, the box
        // left as it is.
        TOKEN_BOX => Limiter::Token(unsafe { (*untagged.cast::<Gcra>()).clone() }),
        LEAKY_BOX => Limiter::Leaky(unsafe { (*untagged.cast::<Gcra>()).clone() }),
        FIXED_BOX => Limiter::Fixed(unsafe { (*untagged.cast::<FixedWindow>()).clone() }),
        // SAFETY: as for `from_raw` (the in-place kinds, read straight from their tag); the
        // caller keeps the allocation with the key.
        SLIDE_BOX => Limiter::Slide(unsafe { Box::from_raw(untagged.cast()) }),
        _ => unsafe { from_raw(raw) },
    }
}

/// A limiter lent for reading by the key that owns it (the type's callbacks: save, digest,
/// memory usage, copy).
pub struct Lent<'a> {
    limiter: ManuallyDrop<Limiter>,
    raw: *mut c_void,
    _key: PhantomData<&'a Limiter>,
}

/// Lends the limiter behind `raw` for reading, `None` for a null pointer.
///
/// Lends nothing for an unreadable value (see [`unreadable`]).
///
/// # Safety
/// `raw` must come from [`into_raw`] or [`unreadable_into_raw`] and stay alive and
/// unchanged for `'a`.
#[inline]
pub unsafe fn lend_raw<'a>(raw: *mut c_void) -> Option<Lent<'a>> {
    // SAFETY: as the caller promises. An unreadable value lends no limiter.
    if raw.is_null() || unsafe { unreadable(raw) }.is_some() {
        return None;
    }
    Some(Lent {
        // SAFETY: as for `read_raw`; ManuallyDrop keeps the allocation with the key.
        limiter: ManuallyDrop::new(unsafe { read_raw(raw) }),
        raw,
        _key: PhantomData,
    })
}

/// Calls `f` with the encoding of the limiter behind `raw` ([`Limiter::with_encoding`]'s
/// bytes; `None` for a null pointer): RDB save, AOF rewrite and digest. A compact state is
/// encoded straight from its 16 bytes and parameter set, without rebuilding the limiter.
///
/// # Safety
/// As for [`lend_raw`], for the call.
#[inline]
pub unsafe fn with_raw_encoding<R>(raw: *mut c_void, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    // SAFETY: as the caller promises. An unreadable value is its bytes, as loaded.
    if let Some(u) = unsafe { unreadable(raw) } {
        return Some(f(&u.bytes));
    }
    if raw.addr() & TAGS == COMPACT {
        // SAFETY: tagged COMPACT: a live `Packed` from `into_compact`, the key's.
        let p = unsafe { &*raw.map_addr(|a| a & !TAGS).cast::<Packed>() };
        let mut out = SmallOut::new();
        if compact_encoding(p, &mut out) {
            return Some(f(out.as_bytes()));
        }
    }
    // SAFETY: as the caller promises.
    unsafe { lend_raw(raw) }.map(|l| l.with_encoding(f))
}

impl Lent<'_> {
    /// [`Limiter::mem_usage`] for the form the key really holds (16 bytes for a compact
    /// state).
    pub fn mem_usage(&self) -> usize {
        if self.raw.addr() & TAGS == COMPACT {
            VALUE_OBJECT + class_ceil(std::mem::size_of::<Packed>())
        } else {
            self.limiter.mem_usage()
        }
    }
}

impl Deref for Lent<'_> {
    type Target = Limiter;

    fn deref(&self) -> &Limiter {
        &self.limiter
    }
}

/// Puts `new` (from [`into_raw`]) in place of the value of the key `key` without freeing the
/// old one or touching the key's expiry; false when it could not.
pub type Replace = unsafe fn(key: *mut c_void, new: *mut c_void) -> bool;

/// A limiter lent by the key that owns it, for a command to change. Logs, rings and leases
/// are rebuilt around the key's allocation and changed in place; buckets and fixed windows
/// are copied out and, once changed (through `DerefMut`), written back when the borrow ends:
/// packed again, under a new parameter slot when their parameters changed, or moved to
/// their wide box (through `replace`) when they no longer fit. It must not be replaced by
/// another kind through this borrow (store a new value in the key instead).
pub struct Held<'a> {
    lent: Lent<'a>,
    changed: bool,
    /// The key and how to replace its value.
    replace: Option<(*mut c_void, Replace)>,
    _key: PhantomData<&'a mut Limiter>,
}

/// Borrows the limiter behind `raw`, `None` for a null pointer. `replace` is how to give the
/// key another value, should a changed state no longer fit its allocation (without it, such
/// a change is lost).
///
/// # Safety
/// `raw` must come from [`into_raw`], stay alive for `'a` and not be used otherwise while
/// the borrow lasts; `replace`'s key must be the one holding `raw`, open for writing.
#[inline]
pub unsafe fn borrow_raw<'a>(
    raw: *mut c_void,
    replace: Option<(*mut c_void, Replace)>,
) -> Option<Held<'a>> {
    // SAFETY: as for `lend_raw`.
    let lent = unsafe { lend_raw(raw) }?;
    Some(Held {
        lent,
        changed: false,
        replace,
        _key: PhantomData,
    })
}

impl Held<'_> {
    /// As [`Lent::mem_usage`].
    pub fn mem_usage(&self) -> usize {
        self.lent.mem_usage()
    }

    /// Says that nothing was changed through `DerefMut` after all (a refused call): nothing
    /// is written back.
    pub fn unchanged(&mut self) {
        self.changed = false;
    }

    /// Writes a changed compact state back to the key when its parameters are the same
    /// (a call on a live key: the hot path); false, changing nothing, for any other case.
    #[inline(always)]
    fn repack_in_place(&self) -> bool {
        let raw = self.lent.raw;
        if raw.addr() & TAGS != COMPACT {
            return false;
        }
        let Some((set, latest, tail)) = packed_parts(&self.lent.limiter) else {
            return false;
        };
        let packed = raw.map_addr(|a| a & !TAGS).cast::<Packed>();
        // SAFETY: the key's `Packed`, lent to us (see `read_raw`).
        let slot = unsafe { (*packed).head } as u16;
        if set != intern::TABLE.get(slot) {
            return false;
        }
        let head = latest << SLOT_BITS | u64::from(slot);
        // SAFETY: as above.
        unsafe { *packed = Packed { head, tail } };
        true
    }

    /// Writes a changed bucket or fixed window back to the key: every case but
    /// [`Held::repack_in_place`]'s.
    #[cold]
    #[inline(never)]
    fn write_back(&mut self) {
        let raw = self.lent.raw;
        let at = raw.map_addr(|a| a & !TAGS);
        let limiter = &*self.lent.limiter;
        match (raw.addr() & TAGS, limiter) {
            (COMPACT, _) => {
                let packed = at.cast::<Packed>();
                // SAFETY: the key's `Packed`, lent to us (see `read_raw`).
                let slot = unsafe { (*packed).head } as u16;
                if let Some((set, latest, tail)) = packed_parts(limiter) {
                    let slot = if set == intern::TABLE.get(slot) {
                        Some(slot)
                    } else {
                        // The parameters changed: a slot for the new ones, then the old one
                        // given back.
                        let new_slot = intern::TABLE.intern(set, set_suffix);
                        if new_slot.is_some() {
                            intern::TABLE.release(slot);
                        }
                        new_slot
                    };
                    if let Some(slot) = slot {
                        let head = latest << SLOT_BITS | u64::from(slot);
                        // SAFETY: as above.
                        unsafe { *packed = Packed { head, tail } };
                        return;
                    }
                }
            }
            // SAFETY: the wide box of the same kind, lent to us (see `read_raw`).
            (TOKEN_BOX, Limiter::Token(g)) | (LEAKY_BOX, Limiter::Leaky(g)) => unsafe {
                *at.cast::<Gcra>() = g.clone();
                return;
            },
            (FIXED_BOX, Limiter::Fixed(w)) => unsafe {
                *at.cast::<FixedWindow>() = w.clone();
                return;
            },
            // Changed in place.
            _ => return,
        }
        self.move_to_wide();
    }

    /// Gives the key a new value for a state that no longer fits its compact form: its wide
    /// box (the parameters found no slot, or a time is out of the compact range).
    #[cold]
    #[inline(never)]
    fn move_to_wide(&mut self) {
        let Some((key, replace)) = self.replace else {
            return;
        };
        let raw = self.lent.raw;
        let new = into_raw(Limiter::clone(&self.lent.limiter));
        // SAFETY: `key` holds `raw` (see `borrow_raw`), which is ours to free once replaced;
        // `new` is ours to free if it was not taken.
        unsafe {
            if replace(key, new) {
                drop(from_raw(raw));
            } else {
                drop(from_raw(new));
            }
        }
    }
}

impl Drop for Held<'_> {
    #[inline]
    fn drop(&mut self) {
        // Logs, rings and leases were changed in place: only the copied kinds go back.
        let copied = matches!(
            self.lent.raw.addr() & TAGS,
            COMPACT | TOKEN_BOX | LEAKY_BOX | FIXED_BOX
        );
        if self.changed && copied && !self.repack_in_place() {
            self.write_back();
        }
    }
}

impl Deref for Held<'_> {
    type Target = Limiter;

    fn deref(&self) -> &Limiter {
        &self.lent.limiter
    }
}

impl DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Limiter {
        self.changed = true;
        &mut self.lent.limiter
    }
}

/// Kind 6, version 1: `latest limit last_ms last_seq nleases (end_delta cost idlen id)*`,
/// leases ordered by end then id, the first delta from `latest`, each next from the end
/// before (see [`Leases::leases`]).
fn encode_leases(out: &mut Vec<u8>, l: &Leases) {
    let (last_ms, last_seq) = l.last_id();
    for v in [l.latest(), l.limit(), last_ms, last_seq] {
        put_varint(out, v);
    }
    let leases = l.leases();
    put_varint(out, leases.len() as u64);
    let mut prev = l.latest();
    for (end, cost, id) in leases {
        put_varint(out, end - prev);
        put_varint(out, cost);
        put_varint(out, id.len() as u64);
        out.extend_from_slice(id);
        prev = end;
    }
}

fn decode_leases(r: &mut Reader) -> Result<Leases, Malformed> {
    let (latest, limit) = (r.varint()?, r.varint()?);
    let last_id = (r.varint()?, r.varint()?);
    let n = r.count(4)?;
    if n > lease::MAX_LEASES {
        return Err(Malformed("too many leases"));
    }
    let mut leases = Vec::with_capacity(n);
    let mut end = latest;
    for _ in 0..n {
        end = end
            .checked_add(r.varint()?)
            .ok_or(Malformed("time overflows"))?;
        let cost = r.varint()?;
        let len = r.count(1)?;
        if len > lease::MAX_ID_LEN {
            return Err(Malformed("an id is too long"));
        }
        leases.push((end, cost, r.bytes(len)?));
    }
    let last_id = lease::implied_last_id(latest, last_id, &leases);
    Leases::from_parts(limit, latest, last_id, &leases).map_err(|e| Malformed(e.0))
}

/// Where an encoding is written: a `Vec`, or [`SmallOut`] on the stack.
trait Sink {
    fn put(&mut self, bytes: &[u8]);

    /// Appends `v` as [`put_varint`] does.
    fn varint(&mut self, v: u64);

    /// Whether nothing more can be written (the encoding is then dropped).
    fn full(&self) -> bool;
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    fn varint(&mut self, v: u64) {
        put_varint(self, v);
    }

    fn full(&self) -> bool {
        false
    }
}

/// What [`SmallOut`] holds: the encodings of at most 64 bytes (a power of two).
const SMALL_OUT: usize = 64;
const _: () = assert!(SMALL_OUT.is_power_of_two());

/// A fixed-size encoding buffer on the stack, for the encodings of at most [`SMALL_OUT`]
/// bytes; a longer one overflows it (and is written to a `Vec` instead).
struct SmallOut {
    buf: [u8; SMALL_OUT],
    len: usize,
    overflowed: bool,
}

impl SmallOut {
    fn new() -> SmallOut {
        SmallOut {
            buf: [0; SMALL_OUT],
            len: 0,
            overflowed: false,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

impl SmallOut {
    /// Appends the first `len` of `padded`'s bytes, storing them all when there is room
    /// (one copy of a known size).
    #[inline]
    fn put_padded<const N: usize>(&mut self, padded: &[u8; N], len: usize) {
        let end = self.len + len;
        match self.buf.get_mut(self.len..self.len + N) {
            Some(slot) if !self.overflowed && end <= SMALL_OUT && len <= N => {
                slot.copy_from_slice(padded);
                self.len = end;
            }
            _ => self.put(padded.get(..len).unwrap_or_default()),
        }
    }
}

impl Sink for SmallOut {
    fn put(&mut self, bytes: &[u8]) {
        match self.buf.get_mut(self.len..self.len + bytes.len()) {
            Some(slot) if !self.overflowed => {
                slot.copy_from_slice(bytes);
                self.len += bytes.len();
            }
            _ => self.overflowed = true,
        }
    }

    #[inline(always)]
    fn varint(&mut self, mut v: u64) {
        let mut len = self.len;
        if !self.overflowed && len + 10 <= SMALL_OUT {
            // Room for the longest varint: written in place.
            // (`len` stays below SMALL_OUT: the mask only spares the bounds checks.)
            while v >= 0x80 {
                if let Some(slot) = self.buf.get_mut(len & (SMALL_OUT - 1)) {
                    *slot = (v as u8) | 0x80;
                }
                v >>= 7;
                len += 1;
            }
            if let Some(slot) = self.buf.get_mut(len & (SMALL_OUT - 1)) {
                *slot = v as u8;
            }
            self.len = len + 1;
            return;
        }
        let (mut bytes, mut n) = ([0u8; 10], 0);
        for slot in bytes.iter_mut() {
            *slot = if v >= 0x80 { (v as u8) | 0x80 } else { v as u8 };
            n += 1;
            v >>= 7;
            if v == 0 {
                break;
            }
        }
        self.put(bytes.get(..n).unwrap_or_default());
    }

    fn full(&self) -> bool {
        self.overflowed
    }
}

/// A log's windows as persisted, read onto the stack: a count, then that many `(limit,
/// window_ms)`; more than `MAX_WINDOWS` is refused here.
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T0: Millis = 1_700_000_000_000;

    fn sample() -> Limiter {
        let ws = [
            Window {
                limit: 5,
                window_ms: 1000,
            },
            Window {
                limit: 100,
                window_ms: 60_000,
            },
        ];
        let mut log = SlidingLog::new(&ws);
        for t in [0, 0, 7, 300, 301] {
            log.acquire(T0 + t, &ws, 1);
        }
        Limiter::Slide(Box::new(log))
    }

    /// Written by encoding version 1 and committed: later versions must keep reading it.
    const SLIDE_V1: &[u8] = &[
        1, 1, 173, 210, 149, 255, 188, 49, 2, 5, 232, 7, 100, 224, 212, 3, 4, 128, 208, 149, 255,
        188, 49, 2, 7, 1, 165, 2, 1, 1, 1,
    ];

    #[test]
    fn reads_the_committed_version_1_encoding() {
        let limiter = Limiter::decode(SLIDE_V1).unwrap();
        let Limiter::Slide(log) = &limiter else {
            panic!("not a sliding log: {limiter:?}");
        };
        assert_eq!(
            log.records().collect::<Vec<_>>(),
            vec![(T0, 2), (T0 + 7, 1), (T0 + 300, 1), (T0 + 301, 1)]
        );
        assert_eq!(limiter.encode(), SLIDE_V3);
        assert_eq!(sample().encode(), SLIDE_V3);
    }

    /// Version 1 buckets, committed: latest 1000, a debt of 4500 ticks.
    const TOKEN_V1: &[u8] = &[1, 2, 232, 7, 148, 35, 10, 232, 7, 5, 0];
    const LEAKY_V1: &[u8] = &[1, 3, 232, 7, 148, 35, 4, 232, 7, 1, 160, 6];

    #[test]
    fn reads_the_committed_version_1_buckets() {
        let token = Limiter::decode(TOKEN_V1).unwrap();
        let Limiter::Token(g) = &token else {
            panic!("not a token bucket: {token:?}");
        };
        let p = Params {
            limit: 10,
            window_ms: 1000,
            burst: 5,
            max_delay_ms: 0,
        };
        assert_eq!((g.params(), g.latest(), g.debt()), (p, 1000, 4500));
        assert_eq!(token.encode(), TOKEN_V3);
        let leaky = Limiter::decode(LEAKY_V1).unwrap();
        assert_eq!(leaky.kind(), Kind::Leaky);
        assert_eq!(leaky.encode(), LEAKY_V3);
        // A token bucket never carries a delay.
        let mut bad = TOKEN_V1.to_vec();
        *bad.last_mut().unwrap() = 1;
        assert!(Limiter::decode(&bad).is_err());
    }

    /// A version 1 fixed window, committed: latest 1000, ends at 61000, 3 of 10 used, ALIGN.
    const FIXED_V1: &[u8] = &[1, 4, 232, 7, 200, 220, 3, 3, 10, 224, 212, 3, 1];

    #[test]
    fn reads_the_committed_version_1_fixed_window() {
        let fixed = Limiter::decode(FIXED_V1).unwrap();
        let Limiter::Fixed(w) = &fixed else {
            panic!("not a fixed window: {fixed:?}");
        };
        assert_eq!((w.end(), w.count_at(1000)), (61_000, 3));
        assert!(w.params().align);
        assert_eq!(fixed.peek(1000).as_reply(), [1, 10, 7, 0, 60_000]);
        assert_eq!(fixed.encode(), FIXED_V3);
        let mut bad = FIXED_V1.to_vec();
        *bad.last_mut().unwrap() = 2;
        assert!(Limiter::decode(&bad).is_err());
    }

    /// A version 1 sub-interval window, committed: 10 per 1000 ms in sub-intervals of 250,
    /// latest 1000, with 2 units at 300 and 3 at 1000.
    const SUBWIN_V1: &[u8] = &[1, 5, 232, 7, 10, 232, 7, 250, 1, 0, 2, 0, 0, 3];

    #[test]
    fn reads_the_committed_version_1_sub_interval_window() {
        let p = subwin::Params {
            limit: 10,
            window_ms: 1000,
            resolution_ms: 250,
        };
        let mut w = SubWindow::new(&p);
        w.acquire(300, &p, 2);
        w.acquire(1000, &p, 3);
        let limiter = Limiter::decode(SUBWIN_V1).unwrap();
        assert_eq!(limiter.encode(), SUBWIN_V3);
        assert_eq!(Limiter::Subwin(w).encode(), SUBWIN_V3);
        assert_eq!(limiter.peek(1000).as_reply(), [1, 10, 5, 0, 1249]);
        // One counter too few, one too many, a shape that does not divide.
        for bad in [&SUBWIN_V1[..13], &[SUBWIN_V1, &[0]].concat()[..]] {
            assert!(Limiter::decode(bad).is_err());
        }
        let mut bad = SUBWIN_V1.to_vec();
        bad[7] = 251;
        assert!(Limiter::decode(&bad).is_err());
    }

    /// Version 2, committed: RL.SLIDE 3 per 10 s at T, T+100, T+200 (T = 2100-01-01), then
    /// 5 per 1 s at T+1250. The log keeps the records up to T+200 for the 10 s window (until
    /// T+10200).
    const SLIDE_V2: &[u8] = &[
        2, 1, 226, 185, 143, 230, 178, 119, 1, 5, 232, 7, 1, 144, 78, 200, 177, 143, 230, 178, 119,
        4, 128, 176, 143, 230, 178, 119, 1, 100, 1, 100, 1, 154, 8, 1,
    ];

    /// Version 2, committed: RL.SUBWIN 3 per 10 s in sub-intervals of 1 s, 2 units at 0 and
    /// 1 at 100, then 5 per 1 s at 2500. The ring keeps the 10 s for the units up to 999
    /// (until 10999).
    const SUBWIN_V2: &[u8] = &[
        2, 5, 196, 19, 5, 232, 7, 232, 7, 1, 144, 78, 231, 7, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 1,
    ];

    #[test]
    fn reads_the_committed_version_2_retentions() {
        const T: Millis = 4_102_444_800_000;
        let slide = Limiter::decode(SLIDE_V2).unwrap();
        let Limiter::Slide(log) = &slide else {
            panic!("not a sliding log: {slide:?}");
        };
        assert_eq!(log.retention(), [(10_000, T + 200)]);
        assert_eq!(log.records().count(), 4);
        assert_eq!(slide.empty_at(), Some(T + 10_200));
        assert_eq!(slide.encode(), SLIDE_V3_RETAINED);
        let long = [Window {
            limit: 3,
            window_ms: 10_000,
        }];
        let mut again = slide.clone();
        let d = again.slide_mut().unwrap().acquire(T + 1300, &long, 1);
        assert_eq!(d.as_reply(), [0, 3, 0, 8800, 9950]);

        let subwin = Limiter::decode(SUBWIN_V2).unwrap();
        let Limiter::Subwin(w) = &subwin else {
            panic!("not a sub-interval window: {subwin:?}");
        };
        assert_eq!(w.retention(), [(10_000, 999)]);
        assert_eq!(w.params().window_ms, 1000);
        assert_eq!(subwin.empty_at(), Some(10_999));
        assert_eq!(subwin.encode(), SUBWIN_V3_RETAINED);
        assert_eq!(
            subwin.mem_usage(),
            VALUE_OBJECT + class_ceil(4 * (5 + 10 + 11))
        );
        let long = subwin::Params {
            limit: 3,
            window_ms: 10_000,
            resolution_ms: 1000,
        };
        assert!(!w.evaluate(2600, &long, 1).allowed);
    }

    #[test]
    fn version_2_is_only_for_a_retention() {
        // Kinds without a retention have no version 2.
        for v1 in [TOKEN_V1, LEAKY_V1, FIXED_V1] {
            let mut bytes = v1.to_vec();
            bytes[0] = 2;
            assert!(Limiter::decode(&bytes).is_err(), "{bytes:?}");
        }
        const T: Millis = 4_102_444_800_000;
        // Builds a payload with the retention `entries` (`None`: a count of 0).
        let with = |base: &[u8], head: usize, tail: usize, entries: Option<&[(u64, Millis)]>| {
            let mut bytes = base[..head].to_vec();
            let entries = entries.unwrap_or_default();
            put_varint(&mut bytes, entries.len() as u64);
            for &(w, last) in entries {
                put_varint(&mut bytes, w);
                put_varint(&mut bytes, last);
            }
            bytes.extend_from_slice(&base[tail..]);
            bytes
        };
        let slide = |entries| with(SLIDE_V2, 12, 21, entries);
        assert_eq!(slide(Some(&[(10_000, T + 200)])), SLIDE_V2);
        assert!(Limiter::decode(&slide(Some(&[(5000, T + 200), (10_000, T + 100)]))).is_ok());
        let bad: [Option<&[(u64, Millis)]>; 8] = [
            // No entry: version 1's to write.
            None,
            // As long as the current window.
            Some(&[(1000, T + 200)]),
            // Not a front: longer and as recent, or longer and more recent.
            Some(&[(5000, T + 200), (10_000, T + 200)]),
            Some(&[(5000, T + 100), (10_000, T + 200)]),
            // Too many.
            Some(&[(2000, T + 200), (3000, T + 150), (4000, T + 100), (5000, T)]),
            // Longer than 31 days, or used after the latest call.
            Some(&[(31 * 86_400_000 + 1, T)]),
            Some(&[(10_000, T + 1251)]),
            Some(&[(0, T)]),
        ];
        for entries in bad {
            assert!(Limiter::decode(&slide(entries)).is_err(), "{entries:?}");
        }
        // A ring: each entry at least the window; the counters follow the longest.
        let ring = |entries| with(SUBWIN_V2, 9, 14, entries);
        assert_eq!(ring(Some(&[(10_000, 999)])), SUBWIN_V2);
        assert!(Limiter::decode(&ring(Some(&[(1000, 1999), (10_000, 999)]))).is_ok());
        let bad: [Option<&[(u64, Millis)]>; 5] = [
            None,
            Some(&[(500, 999)]),
            Some(&[(20_000, 999)]),
            Some(&[(10_000, 999), (5000, 1999)]),
            Some(&[(2000, 4999), (3000, 3999), (4000, 2999), (10_000, 999)]),
        ];
        for entries in bad {
            assert!(Limiter::decode(&ring(entries)).is_err(), "{entries:?}");
        }
    }

    /// The tag of a key's value: which allocation it points to.
    fn tag_of(raw: *mut c_void) -> usize {
        match raw.addr() & TAGS {
            COMPACT | LEASE_BOX => raw.addr() & TAGS,
            t if t & SUBWIN_BLOCK != 0 => SUBWIN_BLOCK,
            t => t,
        }
    }

    #[test]
    fn every_kind_is_one_allocation_the_key_points_to() {
        let p = subwin::Params {
            limit: 10,
            window_ms: 1000,
            resolution_ms: 250,
        };
        let raw = into_raw(Limiter::Subwin(SubWindow::new(&p)));
        assert_eq!(raw.addr() & SUBWIN_BLOCK, SUBWIN_BLOCK);
        // SAFETY: `raw` was just made by `into_raw` and is used by nothing else.
        unsafe {
            {
                let mut held = borrow_raw(raw, None).unwrap();
                held.subwin_mut().unwrap().acquire(1000, &p, 3);
                // The object and module value, and the block in its size class.
                assert_eq!(held.mem_usage(), VALUE_OBJECT + class_ceil(20 + 4 * 5));
            }
            assert_eq!(borrow_raw(raw, None).unwrap().peek(1000).remaining, 7);
            assert_eq!(from_raw(raw).peek(1000).remaining, 7);
        }
        for (bytes, tag) in [
            (FIXED_V1, COMPACT),
            (TOKEN_V1, COMPACT),
            (LEAKY_V1, COMPACT),
            (SUBWIN_V1, SUBWIN_BLOCK),
        ] {
            let limiter = Limiter::decode(bytes).unwrap();
            let kind = limiter.kind();
            let raw = into_raw(limiter);
            assert_eq!(tag_of(raw), tag, "{kind:?}");
            // SAFETY: as above.
            unsafe {
                if tag == COMPACT {
                    // The object and module value, and 16 bytes.
                    assert_eq!(lend_raw(raw).unwrap().mem_usage(), VALUE_OBJECT + 16);
                }
                let refund = borrow_raw(raw, None).unwrap().refund(1000, 1);
                let mut back = from_raw(raw);
                assert_eq!(back.kind(), kind);
                assert_eq!(back.peek(1000), refund);
                assert_eq!(back.refund(1000, 0).remaining, refund.remaining);
            }
        }
        // Buckets cost their object and one 32-byte box.
        let token = Limiter::decode(TOKEN_V1).unwrap();
        assert_eq!(token.mem_usage(), VALUE_OBJECT + 32);
    }

    #[test]
    fn a_sliding_log_is_held_by_its_own_box() {
        let raw = into_raw(sample());
        assert_eq!(tag_of(raw), SLIDE_BOX);
        let ws = [Window {
            limit: 10,
            window_ms: 1000,
        }];
        // SAFETY: `raw` was just made by `into_raw` and is used by nothing else.
        unsafe {
            {
                let mut held = borrow_raw(raw, None).unwrap();
                let log = held.slide_mut().unwrap();
                assert!(log.acquire(T0 + 302, &ws, 1).allowed);
                // A retention (the 60 s window, used before this call's 1 s) spills the
                // log: its box, the spilled box (windows and retention), one chunk and the
                // chunks' index.
                assert_eq!(held.allocations(), 4);
            }
            let mut log = from_raw(raw);
            assert_eq!(log.peek(T0 + 302).remaining, 4);
            assert_eq!(log.slide_mut().map(|l| l.len()), Some(5));
        }
        // A small log is its box alone: windows and records inside, 96 bytes.
        let mut small = SlidingLog::new(&ws);
        assert!(small.acquire(T0, &ws, 1).allowed);
        let small = Limiter::Slide(Box::new(small));
        assert_eq!(small.allocations(), 1);
        assert_eq!(small.mem_usage(), VALUE_OBJECT + 96);
        assert_eq!(Limiter::decode(&small.encode()).unwrap().allocations(), 1);
    }

    #[test]
    fn the_stack_encoding_is_the_encoding() {
        let mut all = seeds();
        // The widest fields: ten-byte varints (a token, a leaky bucket whose delay is not its
        // window, a fixed window ending long before its latest call).
        for (tag, fields) in [
            (2, &[MAX_TIMESTAMP, u64::MAX, 1, 1, 1][..]),
            (3, &[crate::algo::MAX_TIMESTAMP, u64::MAX, 1, 2, 1, 1][..]),
            (
                4,
                &[crate::algo::MAX_TIMESTAMP, (1 << 45) - 1, 0, 1, 1, 0][..],
            ),
        ] {
            let mut wide = vec![ENCODING_VERSION, tag];
            fields.iter().for_each(|&v| put_varint(&mut wide, v));
            assert!(Limiter::decode(&wide).is_ok(), "{wide:?}");
            all.push(wide);
        }
        // Longer than the stack buffer: 40 records, 30 non-zero counters.
        let ws = [Window {
            limit: 100,
            window_ms: 60_000,
        }];
        let mut log = SlidingLog::new(&ws);
        let q = subwin::Params {
            limit: 100,
            window_ms: 60_000,
            resolution_ms: 1000,
        };
        let mut ring = SubWindow::new(&q);
        for t in 0..40 {
            log.acquire(T0 + 7 * t, &ws, 1);
            ring.acquire(T0 + 1000 * (t % 30), &q, 1);
        }
        for big in [Limiter::Slide(Box::new(log)), Limiter::Subwin(ring)] {
            assert!(big.encode().len() > 64);
            all.push(big.encode());
        }
        for bytes in all {
            let Ok(limiter) = Limiter::decode(&bytes) else {
                continue;
            };
            let encoded = limiter.encode();
            // Versions 1 and 2 are read, version 3 is written (leases: version 1).
            if bytes[0] == ENCODING_VERSION || limiter.kind() == Kind::Lease {
                assert_eq!(encoded, bytes);
            }
            assert_eq!(Limiter::decode(&encoded).unwrap().encode(), encoded);
            assert_eq!(limiter.with_encoding(<[u8]>::to_vec), encoded);
        }
        let g = Gcra::from_parts(
            Params {
                limit: 1,
                window_ms: 1,
                burst: 1,
                max_delay_ms: 0,
            },
            crate::algo::MAX_TIMESTAMP,
            u64::MAX,
        )
        .unwrap();
        let limiter = Limiter::Token(g);
        assert_eq!(limiter.with_encoding(<[u8]>::to_vec), limiter.encode());
    }

    #[test]
    fn buckets_stay_small() {
        assert!(std::mem::size_of::<Gcra>() <= 32);
        assert!(std::mem::size_of::<FixedWindow>() <= 32);
    }

    #[test]
    fn refuses_damaged_encodings() {
        let good = sample().encode();
        for cut in 0..good.len() {
            assert!(Limiter::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = good.clone();
        extra.push(0);
        assert!(Limiter::decode(&extra).is_err());
        let mut version = good.clone();
        version[0] = 9;
        assert!(Limiter::decode(&version).is_err());
    }

    /// One encoding of every kind and version, for the fuzzers to damage.
    fn seeds() -> Vec<Vec<u8>> {
        vec![
            SLIDE_V1.to_vec(),
            TOKEN_V1.to_vec(),
            LEAKY_V1.to_vec(),
            FIXED_V1.to_vec(),
            SUBWIN_V1.to_vec(),
            SLIDE_V2.to_vec(),
            SUBWIN_V2.to_vec(),
            LEASE_V1.to_vec(),
            SLIDE_V3.to_vec(),
            TOKEN_V3.to_vec(),
            LEAKY_V3.to_vec(),
            FIXED_V3.to_vec(),
            SUBWIN_V3.to_vec(),
            SLIDE_V3_RETAINED.to_vec(),
            SUBWIN_V3_RETAINED.to_vec(),
            FIXED_V3_PAST.to_vec(),
            LEAKY_V3_DEFAULT.to_vec(),
        ]
    }

    /// Version 3, committed: the states of the version 1 and 2 fixtures above, in the
    /// same order (`sample()` for the sliding log).
    const SLIDE_V3: &[u8] = &[
        3, 1, 173, 210, 149, 255, 188, 49, 2, 5, 232, 7, 100, 224, 212, 3, 0, 4, 173, 2, 2, 7, 1,
        165, 2, 1, 1, 1,
    ];
    const TOKEN_V3: &[u8] = &[3, 2, 232, 7, 148, 35, 10, 232, 7, 5];
    const LEAKY_V3: &[u8] = &[3, 3, 232, 7, 148, 35, 4, 232, 7, 1, 161, 6];
    const FIXED_V3: &[u8] = &[3, 4, 232, 7, 192, 169, 7, 3, 10, 224, 212, 3, 1];
    const SUBWIN_V3: &[u8] = &[3, 5, 232, 7, 10, 232, 7, 250, 1, 0, 2, 3, 2, 2, 3];
    const SLIDE_V3_RETAINED: &[u8] = &[
        3, 1, 226, 185, 143, 230, 178, 119, 1, 5, 232, 7, 1, 144, 78, 200, 177, 143, 230, 178, 119,
        4, 226, 9, 1, 100, 1, 100, 1, 154, 8, 1,
    ];
    const SUBWIN_V3_RETAINED: &[u8] = &[
        3, 5, 196, 19, 5, 232, 7, 232, 7, 1, 144, 78, 231, 7, 2, 2, 3, 1, 1,
    ];
    /// Version 3, committed: `RL.FIXED 10 1000` at 1000 (3 used), last seen at 2500: the
    /// window ended 500 ms before, so `end - latest` is -500 (written 999).
    const FIXED_V3_PAST: &[u8] = &[3, 4, 196, 19, 231, 7, 0, 10, 232, 7, 0];
    /// Version 3, committed: `RL.LEAKY 100 86400000` (MAXDELAY its window: written 0) at
    /// T0, one unit booked.
    const LEAKY_V3_DEFAULT: &[u8] = &[
        3, 3, 128, 208, 149, 255, 188, 49, 128, 184, 153, 41, 100, 128, 184, 153, 41, 1, 0,
    ];

    /// Version 1 and 2 encodings and the version 3 encodings of the same states decode to
    /// equal states, which answer alike.
    #[test]
    fn old_and_new_encodings_decode_to_equal_states() {
        for (old, new) in [
            (SLIDE_V1, SLIDE_V3),
            (TOKEN_V1, TOKEN_V3),
            (LEAKY_V1, LEAKY_V3),
            (FIXED_V1, FIXED_V3),
            (SUBWIN_V1, SUBWIN_V3),
            (SLIDE_V2, SLIDE_V3_RETAINED),
            (SUBWIN_V2, SUBWIN_V3_RETAINED),
        ] {
            let (a, b) = (Limiter::decode(old).unwrap(), Limiter::decode(new).unwrap());
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{new:?}");
            assert_eq!((a.encode(), b.encode()), (new.to_vec(), new.to_vec()));
            assert_eq!(a.mem_usage(), b.mem_usage());
            for t in [0, 1, 250, 999, 1000, 10_000, 100_000] {
                let now = a.latest() + t;
                assert_eq!(a.peek(now), b.peek(now), "{new:?} at +{t}");
                assert_eq!(a.empty_at(), b.empty_at());
            }
        }
    }

    /// The small states of `make bench-memory` stay at most 20 bytes, below which Redis does
    /// not try to compress a string it saves.
    #[test]
    fn version_3_keeps_small_states_within_20_bytes() {
        const T: Millis = 4_102_444_800_000;
        let day = 86_400_000;
        let rate = Params {
            limit: 100,
            window_ms: day,
            burst: 100,
            max_delay_ms: 0,
        };
        let mut token = Gcra::new(&rate);
        token.acquire(T, &rate, 1);
        let leaky_p = Params {
            burst: 1,
            max_delay_ms: day,
            ..rate
        };
        let mut leaky = Gcra::new(&leaky_p);
        leaky.acquire(T, &leaky_p, 1);
        let fixed_p = fixed::Params {
            limit: 100,
            window_ms: day,
            align: false,
        };
        let mut fixed = FixedWindow::new(&fixed_p);
        fixed.acquire(T, &fixed_p, 1);
        let ws = [Window {
            limit: 100,
            window_ms: day,
        }];
        let mut log = SlidingLog::new(&ws);
        log.acquire(T, &ws, 1);
        let sub_p = subwin::Params {
            limit: 100,
            window_ms: 3_600_000,
            resolution_ms: 60_000,
        };
        let mut sub = SubWindow::new(&sub_p);
        sub.acquire(T, &sub_p, 1);
        for limiter in [
            Limiter::Token(token),
            Limiter::Leaky(leaky),
            Limiter::Fixed(fixed),
            Limiter::Slide(Box::new(log)),
            Limiter::Subwin(sub),
        ] {
            let bytes = limiter.encode();
            assert!(bytes.len() <= 20, "{:?}: {bytes:?}", limiter.kind());
            assert_eq!(Limiter::decode(&bytes).unwrap().encode(), bytes);
        }
    }

    #[test]
    fn version_3_is_canonical() {
        // A fixed window that ended before its latest call.
        let past = Limiter::decode(FIXED_V3_PAST).unwrap();
        let Limiter::Fixed(w) = &past else {
            panic!("not a fixed window: {past:?}");
        };
        assert_eq!((w.latest(), w.end()), (2500, 2000));
        assert_eq!(past.encode(), FIXED_V3_PAST);
        // A leaky bucket's default delay is written 0, never as itself plus one.
        let leaky = Limiter::decode(LEAKY_V3_DEFAULT).unwrap();
        let Limiter::Leaky(g) = &leaky else {
            panic!("not a leaky bucket: {leaky:?}");
        };
        assert_eq!(g.params().max_delay_ms, 86_400_000);
        assert_eq!(leaky.encode(), LEAKY_V3_DEFAULT);
        assert_eq!(leaky.peek(T0).as_reply(), [1, 101, 100, 0, 864_000]);
        let mut spelled = LEAKY_V3_DEFAULT[..18].to_vec();
        put_varint(&mut spelled, 86_400_001);
        assert!(Limiter::decode(&spelled).is_err());
        // A token bucket has no delay field; leases have no version 3.
        assert!(Limiter::decode(&[TOKEN_V3, &[0]].concat()).is_err());
        let mut lease = LEASE_V1.to_vec();
        lease[0] = 3;
        assert!(Limiter::decode(&lease).is_err());
        // Sub-interval counters: non-zero, oldest first, within the ring and the epoch.
        let ring = |tail: &[u8]| [&SUBWIN_V3[..10], tail].concat();
        assert_eq!(ring(&[2, 3, 2, 2, 3]), SUBWIN_V3);
        assert!(Limiter::decode(&ring(&[0])).is_ok());
        for bad in [
            &[2, 3, 2, 2, 0][..],
            &[2, 0, 2, 0, 3],
            &[2, 3, 2, 3, 3],
            &[1, 5, 1],
            &[2, 5, 2, 0, 3],
            &[1, 3, 2, 9],
        ] {
            assert!(Limiter::decode(&ring(bad)).is_err(), "{bad:?}");
        }
        // A counter before the epoch (latest 1000: sub-interval 4 is the newest).
        let mut early = ring(&[1, 4, 1]);
        assert!(Limiter::decode(&early).is_ok());
        early[2] = 100;
        assert!(Limiter::decode(&early).is_err());
        // A sliding log's oldest record cannot be before time 0.
        let mut log = SLIDE_V3[..18].to_vec();
        put_varint(&mut log, T0 + 302);
        log.extend_from_slice(&SLIDE_V3[20..]);
        assert!(Limiter::decode(&log).is_err());
        let mut log = SLIDE_V3[..18].to_vec();
        put_varint(&mut log, 301);
        log.extend_from_slice(&SLIDE_V3[20..]);
        assert_eq!(log, SLIDE_V3);
    }

    /// Kind 6 (leases), version 1, committed: limit 5 at latest T (2023-11-14), the last id
    /// made `T-1`; lease `a` of 2 units ends at T+1000, lease `T-1` of 1 at T+30000.
    const LEASE_V1: &[u8] = &[
        1, 6, 128, 208, 149, 255, 188, 49, 5, 128, 208, 149, 255, 188, 49, 1, 2, 232, 7, 2, 1, 97,
        200, 226, 1, 1, 15, 49, 55, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48, 45, 49,
    ];

    #[test]
    fn reads_the_committed_version_1_leases() {
        let limiter = Limiter::decode(LEASE_V1).unwrap();
        let Limiter::Lease(l) = &limiter else {
            panic!("not leases: {limiter:?}");
        };
        assert_eq!(
            l.leases(),
            [
                (T0 + 1000, 2, &b"a"[..]),
                (T0 + 30_000, 1, b"1700000000000-1")
            ]
        );
        assert_eq!(l.last_id(), (T0, 1));
        assert_eq!(limiter.peek(T0 + 1000).as_reply(), [1, 5, 4, 0, 29_000]);
        assert_eq!(limiter.empty_at(), Some(T0 + 30_000));
        assert_eq!(limiter.encode(), LEASE_V1);
        let raw = into_raw(limiter);
        assert_eq!(raw.addr() & TAGS, LEASE_BOX);
        // SAFETY: `raw` was just made by `into_raw` and is used by nothing else.
        let back = unsafe { from_raw(raw) };
        assert_eq!(back.encode(), LEASE_V1);
        // Cut short, trailing bytes, a lease that has ended, version 2: refused.
        for bad in [
            &LEASE_V1[..LEASE_V1.len() - 1],
            &[LEASE_V1, &[0]].concat()[..],
        ] {
            assert!(Limiter::decode(bad).is_err());
        }
        let mut ended = LEASE_V1.to_vec();
        ended[17] = 0;
        ended[18] = 0;
        assert!(Limiter::decode(&ended).is_err());
        let mut v2 = LEASE_V1.to_vec();
        v2[0] = 2;
        assert!(Limiter::decode(&v2).is_err());
    }

    /// One damage: flip a bit, overwrite, insert or delete a byte, or cut the tail.
    #[derive(Clone, Debug)]
    enum Damage {
        Flip(usize, u8),
        Set(usize, u8),
        Insert(usize, u8),
        Delete(usize),
        Cut(usize),
    }

    fn damage() -> impl Strategy<Value = Damage> {
        prop_oneof![
            (any::<usize>(), 0u8..8).prop_map(|(p, b)| Damage::Flip(p, b)),
            (any::<usize>(), any::<u8>()).prop_map(|(p, v)| Damage::Set(p, v)),
            (any::<usize>(), any::<u8>()).prop_map(|(p, v)| Damage::Insert(p, v)),
            any::<usize>().prop_map(Damage::Delete),
            any::<usize>().prop_map(Damage::Cut),
        ]
    }

    fn apply(bytes: &mut Vec<u8>, d: &Damage) {
        let at = |p: usize, len: usize| if len == 0 { 0 } else { p % len };
        match *d {
            Damage::Flip(p, b) if !bytes.is_empty() => {
                let i = at(p, bytes.len());
                bytes[i] ^= 1 << b;
            }
            Damage::Set(p, v) if !bytes.is_empty() => {
                let i = at(p, bytes.len());
                bytes[i] = v;
            }
            Damage::Insert(p, v) => bytes.insert(at(p, bytes.len() + 1), v),
            Damage::Delete(p) if !bytes.is_empty() => {
                bytes.remove(at(p, bytes.len()));
            }
            Damage::Cut(p) => bytes.truncate(at(p, bytes.len() + 1)),
            _ => {}
        }
    }

    /// A bucket or fixed window with valid parameters and any state the algorithms accept.
    fn small_state() -> impl Strategy<Value = Limiter> {
        use crate::algo::gcra::{MAX_RATE_LIMIT, MAX_WINDOW_MS};
        use crate::algo::MAX_TIMESTAMP;
        let gcra = (
            any::<bool>(),
            1..=MAX_RATE_LIMIT,
            1..=MAX_WINDOW_MS,
            1..=MAX_RATE_LIMIT,
            0..=MAX_WINDOW_MS,
            0..=MAX_TIMESTAMP,
            any::<u64>(),
        )
            .prop_map(
                |(leaky, limit, window_ms, burst, max_delay_ms, latest, debt)| {
                    let p = Params {
                        limit,
                        window_ms,
                        burst,
                        max_delay_ms: if leaky { max_delay_ms } else { 0 },
                    };
                    let g = Gcra::from_parts(p, latest, debt).unwrap();
                    if leaky {
                        Limiter::Leaky(g)
                    } else {
                        Limiter::Token(g)
                    }
                },
            );
        // Ends around `latest`, some too long before it for the compact form.
        let fixed = (
            1..=fixed::MAX_LIMIT,
            1..=fixed::MAX_WINDOW_MS,
            any::<bool>(),
            0..=MAX_TIMESTAMP,
            -(3 * fixed::MAX_WINDOW_MS as i64)..=(fixed::MAX_WINDOW_MS as i64),
            any::<u32>(),
        )
            .prop_map(|(limit, window_ms, align, latest, ahead, count)| {
                let p = fixed::Params {
                    limit,
                    window_ms,
                    align,
                };
                let end = latest.saturating_add_signed(ahead);
                let w = FixedWindow::from_parts(p, latest, end, u64::from(count)).unwrap();
                Limiter::Fixed(w)
            });
        prop_oneof![gcra, fixed]
    }

    /// A key's value for the tests: the value the "key" holds, which `swap_cell` replaces.
    unsafe fn swap_cell(key: *mut c_void, new: *mut c_void) -> bool {
        // SAFETY: the tests pass a pointer to a live `*mut c_void`.
        unsafe { *key.cast::<*mut c_void>() = new };
        true
    }

    proptest! {
        /// A state stored in a key reads back as it was, in its compact form whenever it fits
        /// one, and a change made through a borrow reads back as the same change made to the
        /// plain state, whatever form it is written back in.
        #[test]
        fn stored_states_read_back_as_they_were(
            state in small_state(),
            dt in 0u64..200_000,
            cost in 0u64..5,
            limit in 1u64..1000,
            window_ms in 1u64..100_000,
        ) {
            let fits = packed_parts(&state).is_some();
            let mut cell = into_raw(state.clone());
            prop_assert_eq!(cell.addr() & TAGS == COMPACT, fits);
            let plain = format!("{state:?}");
            // SAFETY: `cell` holds a value from `into_raw` until `from_raw` takes it.
            unsafe {
                {
                    let lent = lend_raw(cell).unwrap();
                    prop_assert_eq!(format!("{:?}", *lent), plain.clone());
                    prop_assert_eq!(lent.with_encoding(<[u8]>::to_vec), state.encode());
                    let own = if fits { 16 } else { 32 };
                    prop_assert_eq!(lent.mem_usage(), VALUE_OBJECT + own);
                }
                // RDB save, AOF rewrite and digest encode the stored form directly.
                prop_assert_eq!(with_raw_encoding(cell, <[u8]>::to_vec), Some(state.encode()));
                // New parameters (a new slot), or the same (the slot kept).
                let mut changed = state.clone();
                let now = state.latest() + dt;
                let key = std::ptr::addr_of_mut!(cell).cast::<c_void>();
                let mut held = borrow_raw(cell, Some((key, swap_cell as Replace))).unwrap();
                match (&mut changed, &mut *held) {
                    (Limiter::Token(a), Limiter::Token(b)) | (Limiter::Leaky(a), Limiter::Leaky(b)) => {
                        let p = Params { limit, window_ms, burst: limit, max_delay_ms: 0 };
                        let p = if cost % 2 == 0 { a.params() } else { p };
                        prop_assert_eq!(a.acquire(now, &p, cost), b.acquire(now, &p, cost));
                    }
                    (Limiter::Fixed(a), Limiter::Fixed(b)) => {
                        let p = fixed::Params { limit, window_ms, align: cost == 3 };
                        let p = if cost % 2 == 0 { a.params() } else { p };
                        prop_assert_eq!(a.acquire(now, &p, cost), b.acquire(now, &p, cost));
                        // A refund long after: the window ended long before.
                        if cost == 4 {
                            let later = now + 40 * 86_400_000;
                            prop_assert_eq!(a.refund(later, 1), b.refund(later, 1));
                        }
                    }
                    _ => prop_assert!(false, "another kind"),
                }
                drop(held);
                prop_assert_eq!(with_raw_encoding(cell, <[u8]>::to_vec), Some(changed.encode()));
                let back = from_raw(cell);
                prop_assert_eq!(format!("{back:?}"), format!("{changed:?}"));
                prop_assert_eq!(back.encode(), changed.encode());
            }
        }
    }

    proptest! {
        /// Decoding straight to the compact form (a load of keys sharing parameters) gives
        /// the value the general decoder gives, and refuses nothing it would take; damaged
        /// encodings are either left to it or decode to the same state.
        #[test]
        fn compact_decoding_is_decoding(
            state in small_state(),
            damages in prop::collection::vec(damage(), 0..3),
        ) {
            // The state's parameters become the set interned last.
            let keep = into_raw(state.clone());
            let mut bytes = state.encode();
            for d in &damages {
                apply(&mut bytes, d);
            }
            let slow = Limiter::decode(&bytes);
            // SAFETY: each pointer comes from `into_raw` or `decode_compact` and is read, then
            // freed once.
            unsafe {
                if let Some(raw) = decode_compact(&bytes) {
                    prop_assert_eq!(raw.addr() & TAGS, COMPACT);
                    let Ok(slow) = &slow else {
                        free_raw(raw);
                        return Err(TestCaseError::fail("taken where decode refuses"));
                    };
                    prop_assert_eq!(format!("{:?}", *lend_raw(raw).unwrap()), format!("{slow:?}"));
                    prop_assert_eq!(with_raw_encoding(raw, <[u8]>::to_vec), Some(slow.encode()));
                    free_raw(raw);
                }
                match decode_raw(&bytes) {
                    Ok(raw) => {
                        prop_assert_eq!(Some(from_raw(raw).encode()), slow.ok().map(|l| l.encode()));
                    }
                    Err(e) => prop_assert_eq!(Err(e), slow.map(|_| ())),
                }
                free_raw(keep);
            }
        }
    }

    /// The fast path is taken for a key whose parameters were interned just before (other
    /// tests interning meanwhile may send a few to the general decoder).
    #[test]
    fn a_load_of_keys_sharing_parameters_decodes_them_straight() {
        let mut hits = 0;
        for i in 0..100u64 {
            let g = Gcra::from_parts(
                Params {
                    limit: 100,
                    window_ms: 60_000 + i,
                    burst: 100,
                    max_delay_ms: 0,
                },
                T0 + i,
                i * 1000,
            )
            .unwrap();
            let state = Limiter::Token(g);
            let keep = into_raw(state.clone());
            if let Some(raw) = decode_compact(&state.encode()) {
                hits += 1;
                // SAFETY: from `decode_compact`, freed once.
                unsafe { free_raw(raw) };
            }
            // SAFETY: from `into_raw`, freed once.
            unsafe { free_raw(keep) };
        }
        assert!(hits > 50, "{hits}");
    }

    // The decoder's fuzzer: damaged encodings of every kind. `make fuzz` runs it longer
    // (PROPTEST_CASES).
    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
            let _ = Limiter::decode(&bytes);
        }

        #[test]
        fn fuzz_damaged_encodings_are_refused_or_sound(
            seed in 0usize..17,
            damages in prop::collection::vec(damage(), 1..6),
            times in prop::collection::vec(0u64..5_000, 1..4),
        ) {
            let mut bytes = seeds()[seed].clone();
            for d in &damages {
                apply(&mut bytes, d);
            }
            if let Ok(mut limiter) = Limiter::decode(&bytes) {
                // Accepted: a canonical state that works like any other.
                let again = limiter.encode();
                prop_assert_eq!(Limiter::decode(&again).unwrap().encode(), again);
                let base = limiter.latest();
                for t in times {
                    let _ = limiter.peek(base + t).as_reply();
                    let _ = limiter.refund(base + t, t % 3).as_reply();
                    let _ = limiter.empty_at();
                    let _ = limiter.mem_usage();
                }
            }
        }

        #[test]
        fn flipped_bytes_decode_to_a_valid_state_or_fail(pos in 0usize..31, bit in 0u8..8) {
            let mut bytes = sample().encode();
            let pos = pos % bytes.len();
            bytes[pos] ^= 1 << bit;
            if let Ok(limiter) = Limiter::decode(&bytes) {
                // Whatever was accepted is a consistent log that encodes back to itself.
                prop_assert_eq!(Limiter::decode(&limiter.encode()).unwrap().encode(), limiter.encode());
            }
        }
    }
}
