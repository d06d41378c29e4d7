//! Client arguments to typed requests, with an error naming the argument at fault.
//!
//! Parsing works on byte slices so that it is unit-tested without a server; `args[0]` is the
//! command name and `args[1]` the key in every function here.

use smallvec::SmallVec;

use crate::algo::fixed;
use crate::algo::gcra::{self, Params, MAX_RATE_LIMIT};
use crate::algo::lease;
use crate::algo::slide::{MAX_LIMIT, MAX_WINDOWS, MAX_WINDOW_MS};
use crate::algo::subwin::{self, MAX_SUBINTERVALS};
use crate::algo::{Millis, Window, MAX_TIMESTAMP};
use crate::error::Error;
use crate::value::Kind;

/// Anything that can lend an argument's bytes.
pub trait AsBytes {
    fn as_bytes(&self) -> &[u8];
}

impl AsBytes for &str {
    fn as_bytes(&self) -> &[u8] {
        str::as_bytes(self)
    }
}

/// Up to [`MAX_WINDOWS`] windows, without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    items: [Window; MAX_WINDOWS],
    len: usize,
}

impl Windows {
    pub fn as_slice(&self) -> &[Window] {
        &self.items[..self.len]
    }
}

/// `RL.SLIDE key limit window_ms [limit window_ms ...] [COST n] [NOW ms]`
#[derive(Debug, PartialEq, Eq)]
pub struct Slide {
    pub windows: Windows,
    pub options: Options,
}

/// The options every limiter command shares.
#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    /// Units this request weighs (default 1).
    pub cost: u64,
    /// The time to decide at, instead of the server clock.
    pub now: Option<Millis>,
}

const COST_MAX: u64 = i64::MAX as u64;

/// What a request weighs when no COST is given.
pub const COST_DEFAULT: u64 = 1;
/// A leaky bucket's BURST when none is given.
pub const LEAKY_BURST_DEFAULT: u64 = 1;

/// A token bucket's BURST when none is given: its limit.
pub fn token_burst_default(limit: u64) -> u64 {
    limit
}

/// A leaky bucket's MAXDELAY when none is given: its window.
pub fn leaky_max_delay_default(window_ms: u64) -> u64 {
    window_ms
}

/// `RL.TOKEN key limit window_ms [BURST b] [COST n] [NOW ms]` and
/// `RL.LEAKY key limit window_ms [MAXDELAY ms] [BURST b] [COST n] [NOW ms]`.
#[derive(Debug, PartialEq, Eq)]
pub struct Rate {
    pub params: Params,
    pub options: Options,
}

/// A token bucket: BURST defaults to the limit, and nothing waits.
pub fn token<A: AsBytes>(args: &[A]) -> Result<Rate, Error> {
    let (limit, window_ms, opts) = rate(args, &[Opt::Burst, Opt::Cost, Opt::Now])?;
    Ok(Rate {
        params: Params {
            limit,
            window_ms,
            burst: opts[Opt::Burst as usize].unwrap_or(token_burst_default(limit)),
            max_delay_ms: 0,
        },
        options: Options::from(opts),
    })
}

/// A leaky bucket that schedules: BURST defaults to 1, MAXDELAY to the window.
pub fn leaky<A: AsBytes>(args: &[A]) -> Result<Rate, Error> {
    let (limit, window_ms, opts) = rate(args, &[Opt::MaxDelay, Opt::Burst, Opt::Cost, Opt::Now])?;
    Ok(Rate {
        params: Params {
            limit,
            window_ms,
            burst: opts[Opt::Burst as usize].unwrap_or(LEAKY_BURST_DEFAULT),
            max_delay_ms: opts[Opt::MaxDelay as usize]
                .unwrap_or(leaky_max_delay_default(window_ms)),
        },
        options: Options::from(opts),
    })
}

/// `RL.FIXED key limit window_ms [ALIGN] [COST n] [NOW ms]`
#[derive(Debug, PartialEq, Eq)]
pub struct Fixed {
    pub params: fixed::Params,
    pub options: Options,
}

pub fn fixed<A: AsBytes>(args: &[A]) -> Result<Fixed, Error> {
    let limit = positional(args, 2, "limit", 1, fixed::MAX_LIMIT)?;
    let window_ms = positional(args, 3, "window_ms", 1, fixed::MAX_WINDOW_MS)?;
    let opts = options(
        args.get(4..).unwrap_or_default(),
        &[Opt::Align, Opt::Cost, Opt::Now],
    )?;
    Ok(Fixed {
        params: fixed::Params {
            limit,
            window_ms,
            align: opts[Opt::Align as usize].is_some(),
        },
        options: Options::from(opts),
    })
}

/// `RL.SUBWIN key limit window_ms resolution_ms [COST n] [NOW ms]`
#[derive(Debug, PartialEq, Eq)]
pub struct Subwin {
    pub params: subwin::Params,
    pub options: Options,
}

pub fn subwin<A: AsBytes>(args: &[A]) -> Result<Subwin, Error> {
    let limit = positional(args, 2, "limit", 1, subwin::MAX_LIMIT)?;
    let window_ms = positional(args, 3, "window_ms", 1, subwin::MAX_WINDOW_MS)?;
    let resolution_ms = positional(args, 4, "resolution_ms", 1, window_ms)?;
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
    let opts = options(args.get(5..).unwrap_or_default(), &[Opt::Cost, Opt::Now])?;
    Ok(Subwin {
        params: subwin::Params {
            limit,
            window_ms,
            resolution_ms,
        },
        options: Options::from(opts),
    })
}

#[inline(always)]
fn rate<A: AsBytes>(args: &[A], allowed: &[Opt]) -> Result<(u64, u64, Parsed), Error> {
    let limit = positional(args, 2, "limit", 1, MAX_RATE_LIMIT)?;
    let window = positional(args, 3, "window_ms", 1, gcra::MAX_WINDOW_MS)?;
    let opts = match args.get(4..) {
        Some(rest) if !rest.is_empty() => options(rest, allowed)?,
        _ => [None; 5],
    };
    Ok((limit, window, opts))
}

pub fn slide<A: AsBytes>(args: &[A]) -> Result<Slide, Error> {
    // The usual call, one window and no option, parsed without the general scan (any
    // error is left to it, so that it is reported the same way).
    if let [_, _, limit, window_ms] = args {
        if let (Ok(limit), Ok(window_ms)) = (
            int(limit, "limit", 1, MAX_LIMIT),
            int(window_ms, "window_ms", 1, MAX_WINDOW_MS),
        ) {
            let mut windows = Windows {
                items: [Window {
                    limit: 0,
                    window_ms: 0,
                }; MAX_WINDOWS],
                len: 1,
            };
            windows.items[0] = Window { limit, window_ms };
            return Ok(Slide {
                windows,
                options: Options::from([None; 5]),
            });
        }
    }
    let Some(rest) = args.get(2..) else {
        return Err(Error::Arity);
    };
    // Positional pairs run up to the first word that is not a number. Their bytes are
    // kept as they are found (reading an argument's bytes is a call into Redis).
    let mut words: [&[u8]; 2 * MAX_WINDOWS] = [&[]; 2 * MAX_WINDOWS];
    let mut positional = rest.len();
    for (i, a) in rest.iter().enumerate() {
        let bytes = a.as_bytes();
        if bytes.first().is_some_and(u8::is_ascii_alphabetic) {
            positional = i;
            break;
        }
        if let Some(word) = words.get_mut(i) {
            *word = bytes;
        }
    }
    let (pairs, opts) = rest.split_at(positional);
    if pairs.is_empty() {
        // `RL.SLIDE k abc 1000` or `RL.SLIDE k COST 1`: the limit is what is wrong.
        let first = opts.first().ok_or(Error::Arity)?;
        int(first, "limit", 1, MAX_LIMIT)?;
    }
    if pairs.len() % 2 != 0 {
        return Err(Error::Arity);
    }
    if pairs.len() / 2 > MAX_WINDOWS {
        return Err(Error::TooManyWindows(MAX_WINDOWS));
    }
    let mut windows = Windows {
        items: [Window {
            limit: 0,
            window_ms: 0,
        }; MAX_WINDOWS],
        len: 0,
    };
    // At most 2 * MAX_WINDOWS pairs' words, checked above.
    let pairs = words.get(..pairs.len()).unwrap_or_default();
    for pair in pairs.chunks_exact(2) {
        windows.items[windows.len] = Window {
            limit: int(&pair[0], "limit", 1, MAX_LIMIT)?,
            window_ms: int(&pair[1], "window_ms", 1, MAX_WINDOW_MS)?,
        };
        windows.len += 1;
    }
    Ok(Slide {
        windows,
        options: Options::from(options(opts, &[Opt::Cost, Opt::Now])?),
    })
}

/// `RL.PEEK key [COST n] [NOW ms]`: COST 0 (a read of the state) when left out.
pub fn peek<A: AsBytes>(args: &[A]) -> Result<Options, Error> {
    let Some(rest) = args.get(2..) else {
        return Err(Error::Arity);
    };
    let opts = options(rest, &[Opt::Cost, Opt::Now])?;
    Ok(Options {
        cost: opts[Opt::Cost as usize].unwrap_or(0),
        now: opts[Opt::Now as usize],
    })
}

/// `RL.REFUND key [COST n] [NOW ms]`
pub fn refund<A: AsBytes>(args: &[A]) -> Result<Options, Error> {
    Ok(Options::from(options(
        args.get(2..).ok_or(Error::Arity)?,
        &[Opt::Cost, Opt::Now],
    )?))
}

/// `RL.CHARGE key COST n [NOW ms]`: COST is required (there is no default to charge).
pub fn charge<A: AsBytes>(args: &[A]) -> Result<Options, Error> {
    let parsed = options(args.get(2..).ok_or(Error::Arity)?, &[Opt::Cost, Opt::Now])?;
    if parsed[Opt::Cost as usize].is_none() {
        return Err(Error::Invalid(
            "RL.CHARGE needs COST n, the units to record",
        ));
    }
    Ok(Options::from(parsed))
}

/// `RL.RESTORE key payload`
pub fn restore<A: AsBytes>(args: &[A]) -> Result<&[u8], Error> {
    match args {
        [_, _, payload] => Ok(payload.as_bytes()),
        _ => Err(Error::Arity),
    }
}

/// The most keys one `RL.ALL` call takes: each costs at most what its own command costs, so
/// this bounds the call's work.
pub const ALL_MAX_KEYS: u64 = 16;

/// The keys of an `RL.ALL` call kept on the stack (its specs, values and outcomes); a call
/// with more allocates.
pub const ALL_INLINE_KEYS: usize = 4;

/// One limiter of an `RL.ALL` call: its kind's parameters, as that kind's own command parses
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecParams {
    Slide(Windows),
    Token(Params),
    Leaky(Params),
    Fixed(fixed::Params),
    Subwin(subwin::Params),
    /// `ACQUIRE limit lease_ms [ID lease-id] [COST n]` (no BLOCK: RL.ALL never waits).
    Acquire(lease::Params),
}

/// A limiter spec of `RL.ALL` with its own COST (and, for `ACQUIRE`, the lease id given,
/// borrowed from the call's arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec<'a> {
    pub params: SpecParams,
    pub cost: u64,
    pub id: Option<&'a [u8]>,
}

/// The specs of one `RL.ALL` call, in key order; up to [`ALL_INLINE_KEYS`] on the stack.
pub type Specs<'a> = SmallVec<[Spec<'a>; ALL_INLINE_KEYS]>;

/// `RL.ALL numkeys key [key ...] spec [spec ...] [NOW ms]`, a spec per key in key order (the
/// specs go to the caller's [`Specs`], which is not moved on the way out).
#[derive(Debug, PartialEq, Eq)]
pub struct All<'a, A> {
    pub keys: &'a [A],
    pub now: Option<Millis>,
}

/// How a spec's positional parameters run.
#[derive(Clone, Copy)]
enum Positional {
    /// `limit window_ms` pairs, up to the first word that is not a number (`RL.SLIDE`).
    Pairs,
    /// Exactly this many numbers.
    Numbers(usize),
}

/// Each spec's kind keyword, positional parameters and options (those of the kind's own
/// command but NOW, which `RL.ALL` takes once for the whole call). A spec ends after its
/// positional parameters and the options its kind knows, so a new kind is one line here
/// whatever its option values look like (`ACQUIRE`'s ID and BLOCK are read in `all`).
const SPEC_KINDS: [(Kind, &str, Positional, &[Opt]); 6] = [
    (Kind::Slide, "SLIDE", Positional::Pairs, &[Opt::Cost]),
    (
        Kind::Token,
        "TOKEN",
        Positional::Numbers(2),
        &[Opt::Burst, Opt::Cost],
    ),
    (
        Kind::Leaky,
        "LEAKY",
        Positional::Numbers(2),
        &[Opt::MaxDelay, Opt::Burst, Opt::Cost],
    ),
    (
        Kind::Fixed,
        "FIXED",
        Positional::Numbers(2),
        &[Opt::Align, Opt::Cost],
    ),
    (Kind::Subwin, "SUBWIN", Positional::Numbers(3), &[Opt::Cost]),
    (Kind::Lease, "ACQUIRE", Positional::Numbers(2), &[Opt::Cost]),
];

/// The options of an `ACQUIRE` spec that take any word as their value (BLOCK is taken into
/// the spec so that its error says it is not allowed there).
const LEASE_WORD_OPTS: [&str; 2] = ["ID", "BLOCK"];

fn spec_kind(word: &[u8]) -> Option<(Kind, Positional, &'static [Opt])> {
    SPEC_KINDS
        .iter()
        .find(|(_, name, ..)| word.eq_ignore_ascii_case(name.as_bytes()))
        .map(|&(kind, _, positional, opts)| (kind, positional, opts))
}

/// Where the keys of an `RL.ALL` call are (what `COMMAND GETKEYS`, ACLs and cluster routing
/// ask for): `2..2 + numkeys`, empty when numkeys is not valid or exceeds the arguments.
pub fn all_keys<A: AsBytes>(args: &[A]) -> std::ops::Range<usize> {
    let n = args
        .get(1)
        .and_then(|a| int(a, "numkeys", 1, ALL_MAX_KEYS).ok())
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n <= args.len().saturating_sub(2))
        .unwrap_or(0);
    2..2 + n
}

/// Parses `RL.ALL`. An error about one spec names its key ([`Error::ForKey`]). The specs
/// are parsed by their kinds' own parsers, each handed the spec's words as its command's
/// arguments after the key.
pub fn all<'a, A: AsBytes>(args: &'a [A], specs: &mut Specs<'a>) -> Result<All<'a, A>, Error> {
    // `let ... else` rather than `ok_or`: an `Error` made and dropped on every call costs
    // a call to its destructor.
    let Some(numkeys) = args.get(1) else {
        return Err(Error::Arity);
    };
    let n = int(numkeys, "numkeys", 1, ALL_MAX_KEYS)? as usize;
    let Some(keys) = args.get(2..2 + n) else {
        return Err(Error::Arity);
    };
    let name = |i: usize| keys.get(i).map_or(&[][..], AsBytes::as_bytes);
    for (i, key) in keys.iter().enumerate() {
        if keys[..i].iter().any(|k| k.as_bytes() == key.as_bytes()) {
            return Err(Error::for_key(
                key.as_bytes(),
                Error::Invalid("the same key is given twice"),
            ));
        }
    }
    specs.clear();
    let mut at = 2 + n;
    let mut now = None;
    while let Some(word) = args.get(at) {
        let word = word.as_bytes();
        if word.eq_ignore_ascii_case(b"NOW") {
            let Some(value) = args.get(at + 1) else {
                return Err(Error::MissingValue("NOW"));
            };
            now = Some(int(value, "NOW", 0, MAX_TIMESTAMP)?);
            if let Some(extra) = args.get(at + 2) {
                return Err(Error::InvalidWord(
                    "NOW comes once, after the last limiter; then nothing",
                    lossy(extra.as_bytes()),
                ));
            }
            break;
        }
        let Some((kind, positional, opts)) = spec_kind(word) else {
            // Past a spec's options: an option its kind does not take, or no kind at all.
            return Err(match specs.len().checked_sub(1) {
                Some(last) => Error::for_key(name(last), Error::UnknownOption(lossy(word))),
                None => Error::InvalidWord(
                    "expected a limiter kind (SLIDE, TOKEN, LEAKY, FIXED, SUBWIN, ACQUIRE) after the keys",
                    lossy(word),
                ),
            });
        };
        let i = specs.len();
        if i == n {
            return Err(Error::SpecCount {
                keys: n,
                specs: i + 1,
            });
        }
        // The spec's extent: its positional words, then the options of its kind.
        let mut end = at + 1;
        // Positional words run up to the first word that is not a number, as in RL.SLIDE
        // (a bad number is then the kind's parser's to name).
        let is_number = |a: &A| !a.as_bytes().first().is_some_and(u8::is_ascii_alphabetic);
        let most = match positional {
            Positional::Pairs => usize::MAX,
            Positional::Numbers(count) => count,
        };
        while end - (at + 1) < most && args.get(end).is_some_and(is_number) {
            end += 1;
        }
        while let Some(step) = args.get(end).and_then(|w| {
            let w = w.as_bytes();
            if kind == Kind::Lease
                && LEASE_WORD_OPTS
                    .iter()
                    .any(|l| w.eq_ignore_ascii_case(l.as_bytes()))
            {
                return Some(2);
            }
            OPTS.iter()
                .find(|(opt, label, ..)| {
                    opts.contains(opt) && w.eq_ignore_ascii_case(label.as_bytes())
                })
                // A flag is one word, an option two.
                .map(|&(_, _, min, max)| if min > max { 1 } else { 2 })
        }) {
            end += step;
        }
        let end = end.min(args.len());
        // The kind's parser reads its arguments from index 2: the spec's words after its
        // kind keyword. The two words before them (the word before the kind, and the kind)
        // stand where that command's name and key would be; the parsers never read those.
        let words = &args[at - 1..end];
        let spec = parse_spec(kind, words).map_err(|e| Error::for_key(name(i), e))?;
        specs.push(spec);
        at = end;
    }
    if specs.len() != n {
        return Err(Error::SpecCount {
            keys: n,
            specs: specs.len(),
        });
    }
    Ok(All { keys, now })
}

fn parse_spec<A: AsBytes>(kind: Kind, words: &[A]) -> Result<Spec<'_>, Error> {
    let (params, options) = match kind {
        Kind::Slide => {
            let s = slide(words)?;
            (SpecParams::Slide(s.windows), s.options)
        }
        Kind::Token => {
            let r = token(words)?;
            (SpecParams::Token(r.params), r.options)
        }
        Kind::Leaky => {
            let r = leaky(words)?;
            (SpecParams::Leaky(r.params), r.options)
        }
        Kind::Fixed => {
            let f = fixed(words)?;
            (SpecParams::Fixed(f.params), f.options)
        }
        Kind::Subwin => {
            let w = subwin(words)?;
            (SpecParams::Subwin(w.params), w.options)
        }
        Kind::Lease => {
            let a = crate::lease::parse_acquire(words, false)?;
            if a.block.is_some() {
                return Err(Error::Invalid("BLOCK is not allowed inside RL.ALL"));
            }
            let id = match a.id {
                None => None,
                Some(std::borrow::Cow::Borrowed(id)) => Some(id),
                // Ids are taken as given (hex only in effects).
                Some(std::borrow::Cow::Owned(_)) => return Err(Error::Internal("RL.ALL")),
            };
            return Ok(Spec {
                params: SpecParams::Acquire(a.params),
                cost: a.cost,
                id,
            });
        }
    };
    // NOW ends a spec (it is the call's), so no kind parser sees one.
    debug_assert!(options.now.is_none());
    Ok(Spec {
        params,
        cost: options.cost,
        id: None,
    })
}

/// A client's word as an error may quote it: at most 64 characters.
fn lossy(word: &[u8]) -> String {
    String::from_utf8_lossy(word).chars().take(64).collect()
}

/// The named options, in the order of [`OPTS`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Opt {
    Cost,
    Now,
    Burst,
    MaxDelay,
    /// A flag: it takes no value.
    Align,
}

/// Each option's keyword and range; a flag's range is empty.
const OPTS: [(Opt, &str, u64, u64); 5] = [
    (Opt::Cost, "COST", 0, COST_MAX),
    (Opt::Now, "NOW", 0, MAX_TIMESTAMP),
    (Opt::Burst, "BURST", 1, MAX_RATE_LIMIT),
    (Opt::MaxDelay, "MAXDELAY", 0, gcra::MAX_WINDOW_MS),
    (Opt::Align, "ALIGN", 1, 0),
];

/// The value of each option given (1 for a flag), indexed by `Opt as usize`.
type Parsed = [Option<u64>; 5];

impl From<Parsed> for Options {
    fn from(p: Parsed) -> Options {
        Options {
            cost: p[Opt::Cost as usize].unwrap_or(COST_DEFAULT),
            now: p[Opt::Now as usize],
        }
    }
}

/// `KEYWORD value` pairs in any order, each of the `allowed` ones at most once.
#[inline(always)]
fn options<A: AsBytes>(args: &[A], allowed: &[Opt]) -> Result<Parsed, Error> {
    // Most calls give none.
    if args.is_empty() {
        return Ok([None; 5]);
    }
    some_options(args, allowed)
}

fn some_options<A: AsBytes>(args: &[A], allowed: &[Opt]) -> Result<Parsed, Error> {
    let mut parsed: Parsed = [None; 5];
    let mut it = args.iter();
    while let Some(name) = it.next() {
        let name = name.as_bytes();
        let Some(&(opt, label, min, max)) = OPTS.iter().find(|(opt, label, ..)| {
            allowed.contains(opt) && name.eq_ignore_ascii_case(label.as_bytes())
        }) else {
            return Err(Error::UnknownOption(
                String::from_utf8_lossy(name).chars().take(64).collect(),
            ));
        };
        let slot = &mut parsed[opt as usize];
        if slot.is_some() {
            return Err(Error::RepeatedOption(label));
        }
        if min > max {
            *slot = Some(1);
            continue;
        }
        let Some(value) = it.next() else {
            return Err(Error::MissingValue(label));
        };
        *slot = Some(int(value, label, min, max)?);
    }
    Ok(parsed)
}

/// The required argument at `i`, a decimal integer in `min..=max`.
fn positional<A: AsBytes>(
    args: &[A],
    i: usize,
    name: &'static str,
    min: u64,
    max: u64,
) -> Result<u64, Error> {
    match args.get(i) {
        Some(arg) => int(arg, name, min, max),
        None => Err(Error::Arity),
    }
}

/// A decimal integer in `min..=max`, written the way Redis writes integers.
pub(crate) fn int<A: AsBytes>(
    arg: &A,
    name: &'static str,
    min: u64,
    max: u64,
) -> Result<u64, Error> {
    let err = || Error::Range {
        arg: name,
        min,
        max,
    };
    let bytes = arg.as_bytes();
    let (Some(&first), 1..=20) = (bytes.first(), bytes.len()) else {
        return Err(err());
    };
    if first == b'0' && bytes.len() > 1 {
        return Err(err());
    }
    let mut v: u64 = 0;
    let (head, tail) = bytes.split_at(bytes.len().min(19));
    // Nineteen digits always fit in a u64; a twentieth is added with overflow checked.
    for &b in head {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(err());
        }
        v = v * 10 + u64::from(d);
    }
    if let Some(&b) = tail.first() {
        let d = b.wrapping_sub(b'0');
        v = match v.checked_mul(10).and_then(|v| v.checked_add(u64::from(d))) {
            Some(v) if d <= 9 => v,
            _ => return Err(err()),
        };
    }
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn call(line: &str) -> Vec<&str> {
        line.split(' ').collect()
    }

    #[test]
    fn slide_with_two_windows_and_options() {
        let s = slide(&call("RL.SLIDE k 10 1000 100 60000 cost 3 NOW 17")).unwrap();
        assert_eq!(
            s.windows.as_slice(),
            &[
                Window {
                    limit: 10,
                    window_ms: 1000
                },
                Window {
                    limit: 100,
                    window_ms: 60000
                }
            ]
        );
        assert_eq!(
            s.options,
            Options {
                cost: 3,
                now: Some(17)
            }
        );
        let plain = slide(&call("RL.SLIDE k 1 1")).unwrap();
        assert_eq!(plain.options, Options { cost: 1, now: None });
    }

    #[rstest]
    #[case("RL.SLIDE k", Error::Arity)]
    #[case("RL.SLIDE k 10", Error::Arity)]
    #[case("RL.SLIDE k 10 1000 5", Error::Arity)]
    #[case("RL.SLIDE k COST 1", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
    #[case("RL.SLIDE k abc 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
    #[case("RL.SLIDE k 0 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
    #[case("RL.SLIDE k -1 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
    #[case("RL.SLIDE k 4294967296 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
    #[case("RL.SLIDE k 99999999999999999999999 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
    #[case("RL.SLIDE k 010 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
    #[case("RL.SLIDE k 1.5 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
    #[case("RL.SLIDE k 10 0", Error::Range { arg: "window_ms", min: 1, max: MAX_WINDOW_MS })]
    #[case("RL.SLIDE k 10 2678400001", Error::Range { arg: "window_ms", min: 1, max: MAX_WINDOW_MS })]
    #[case("RL.SLIDE k 10 1000 COST", Error::MissingValue("COST"))]
    #[case("RL.SLIDE k 10 1000 COST -1", Error::Range { arg: "COST", min: 0, max: COST_MAX })]
    #[case("RL.SLIDE k 10 1000 COST 1 COST 2", Error::RepeatedOption("COST"))]
    #[case("RL.SLIDE k 10 1000 NOW 1 now 2", Error::RepeatedOption("NOW"))]
    #[case("RL.SLIDE k 10 1000 NOW 253402300800000", Error::Range { arg: "NOW", min: 0, max: MAX_TIMESTAMP })]
    #[case("RL.SLIDE k 10 1000 BURST 2", Error::UnknownOption("BURST".into()))]
    #[case("RL.SLIDE k 10 1000 COST 1 10 1000", Error::UnknownOption("10".into()))]
    #[case(
        "RL.SLIDE k 1 1 2 2 3 3 4 4 5 5 6 6 7 7 8 8 9 9",
        Error::TooManyWindows(8)
    )]
    #[case("RL.PEEK k BURST 1", Error::UnknownOption("BURST".into()))]
    fn bad_input_names_the_argument(#[case] line: &str, #[case] want: Error) {
        let args = call(line);
        let got = if line.starts_with("RL.PEEK") {
            peek(&args).map(|_| ())
        } else {
            slide(&args).map(|_| ())
        };
        assert_eq!(got, Err(want));
    }

    #[rstest]
    #[case("RL.SUBWIN k 100 60000", Err(Error::Arity))]
    #[case("RL.SUBWIN k 100 60000 0", Err(Error::Range { arg: "resolution_ms", min: 1, max: 60000 }))]
    #[case("RL.SUBWIN k 100 60000 60001", Err(Error::Range { arg: "resolution_ms", min: 1, max: 60000 }))]
    #[case(
        "RL.SUBWIN k 100 60000 7",
        Err(Error::Invalid("window_ms must be a multiple of resolution_ms"))
    )]
    #[case(
        "RL.SUBWIN k 100 60000 10",
        Err(Error::Invalid("window_ms / resolution_ms must be at most 4096 sub-intervals"))
    )]
    #[case("RL.SUBWIN k 100 60000 1000 ALIGN", Err(Error::UnknownOption("ALIGN".into())))]
    #[case("RL.SUBWIN k 2147483648 60000 1000", Err(Error::Range { arg: "limit", min: 1, max: subwin::MAX_LIMIT }))]
    #[case("RL.SUBWIN k 100 4096 1", Ok((100, 4096, 1, 1)))]
    #[case("RL.SUBWIN k 2147483647 2678400000 2678400000 COST 7", Ok((subwin::MAX_LIMIT, 2_678_400_000, 2_678_400_000, 7)))]
    fn subwin_arguments(#[case] line: &str, #[case] want: Result<(u64, u64, u64, u64), Error>) {
        let got = subwin(&call(line)).map(|s| {
            let p = s.params;
            (p.limit, p.window_ms, p.resolution_ms, s.options.cost)
        });
        assert_eq!(got, want);
    }

    #[test]
    fn token_and_leaky_defaults_and_options() {
        let t = token(&call("RL.TOKEN k 120 60000")).unwrap();
        assert_eq!(
            t.params,
            Params {
                limit: 120,
                window_ms: 60000,
                burst: 120,
                max_delay_ms: 0
            }
        );
        let l = leaky(&call("RL.LEAKY k 4 1000 burst 2 MAXDELAY 500 COST 2 NOW 9")).unwrap();
        assert_eq!(
            l.params,
            Params {
                limit: 4,
                window_ms: 1000,
                burst: 2,
                max_delay_ms: 500
            }
        );
        assert_eq!(
            l.options,
            Options {
                cost: 2,
                now: Some(9)
            }
        );
        assert_eq!(
            leaky(&call("RL.LEAKY k 4 1000"))
                .unwrap()
                .params
                .max_delay_ms,
            1000
        );
        assert_eq!(
            token(&call("RL.TOKEN k 4 1000 MAXDELAY 5")),
            Err(Error::UnknownOption("MAXDELAY".into()))
        );
        assert_eq!(
            token(&call("RL.TOKEN k 2147483648 1000")),
            Err(Error::Range {
                arg: "limit",
                min: 1,
                max: MAX_RATE_LIMIT
            })
        );
        assert_eq!(
            leaky(&call("RL.LEAKY k 1 1000 BURST 0")),
            Err(Error::Range {
                arg: "BURST",
                min: 1,
                max: MAX_RATE_LIMIT
            })
        );
        assert_eq!(token(&call("RL.TOKEN k 1")), Err(Error::Arity));
    }

    #[test]
    fn fixed_takes_align_as_a_flag() {
        let f = fixed(&call("RL.FIXED k 100 60000 align COST 2")).unwrap();
        assert!(f.params.align);
        assert_eq!(f.options.cost, 2);
        assert!(!fixed(&call("RL.FIXED k 100 60000")).unwrap().params.align);
        assert_eq!(
            fixed(&call("RL.FIXED k 100 60000 ALIGN ALIGN")),
            Err(Error::RepeatedOption("ALIGN"))
        );
        assert_eq!(
            token(&call("RL.TOKEN k 100 60000 ALIGN")),
            Err(Error::UnknownOption("ALIGN".into()))
        );
    }

    #[test]
    fn empty_and_odd_arguments() {
        assert_eq!(
            slide(&["RL.SLIDE", "k", "", "1000"]),
            Err(Error::Range {
                arg: "limit",
                min: 1,
                max: MAX_LIMIT
            })
        );
        assert_eq!(
            refund(&["RL.REFUND", "k", "NOW", " 5"]),
            Err(Error::Range {
                arg: "NOW",
                min: 0,
                max: MAX_TIMESTAMP
            })
        );
        assert_eq!(
            refund(&["RL.REFUND", "k", "cost", "18446744073709551615"]),
            Err(Error::Range {
                arg: "COST",
                min: 0,
                max: COST_MAX
            })
        );
        assert_eq!(peek(&["RL.PEEK"]), Err(Error::Arity));
        assert_eq!(restore(&["RL.RESTORE", "k"]), Err(Error::Arity));
    }

    proptest::proptest! {
        /// `int` reads exactly the canonical decimal integers in range, as `str::parse`
        /// reads them.
        #[test]
        fn int_reads_canonical_decimals(word in "[0-9]{1,21}|[0-9a+ -]{0,4}", min in 0u64..3, max in proptest::prelude::any::<u64>()) {
            let canonical = word.parse::<u64>().ok().filter(|v| v.to_string() == word);
            let want = canonical.filter(|v| (min..=max).contains(v));
            proptest::prop_assert_eq!(int(&word.as_str(), "x", min, max).ok(), want);
        }
    }

    #[test]
    fn all_splits_specs_by_kind() {
        let line = "RL.ALL 3 a b c SLIDE 10 1000 100 60000 COST 2 token 5 1000 BURST 2 \
                    FIXED 7 60000 ALIGN NOW 42";
        let words: Vec<&str> = line.split_whitespace().collect();
        let mut specs = Specs::new();
        let all = all(&words, &mut specs).unwrap();
        assert_eq!(all.keys, &["a", "b", "c"]);
        assert_eq!(all.now, Some(42));
        assert_eq!(specs.len(), 3);
        assert!(matches!(specs[0].params, SpecParams::Slide(w) if w.as_slice().len() == 2));
        assert_eq!(specs[0].cost, 2);
        assert!(matches!(specs[1].params, SpecParams::Token(p) if p.burst == 2));
        assert_eq!(specs[1].cost, 1);
        assert!(matches!(specs[2].params, SpecParams::Fixed(p) if p.align));
        assert_eq!(all_keys(&words), 2..5);
        assert_eq!(all_keys(&["RL.ALL", "3", "a"]), 2..2);
        assert_eq!(all_keys(&["RL.ALL", "x", "a"]), 2..2);
    }

    #[rstest]
    #[case("RL.ALL", Error::Arity)]
    #[case("RL.ALL 0 a TOKEN 1 1", Error::Range { arg: "numkeys", min: 1, max: ALL_MAX_KEYS })]
    #[case("RL.ALL 17 a TOKEN 1 1", Error::Range { arg: "numkeys", min: 1, max: ALL_MAX_KEYS })]
    #[case("RL.ALL 3 a b", Error::Arity)]
    #[case("RL.ALL 2 a b TOKEN 1 1", Error::SpecCount { keys: 2, specs: 1 })]
    #[case("RL.ALL 1 a TOKEN 1 1 TOKEN 1 1", Error::SpecCount { keys: 1, specs: 2 })]
    #[case("RL.ALL 1 a", Error::SpecCount { keys: 1, specs: 0 })]
    #[case(
        "RL.ALL 2 a a TOKEN 1 1 TOKEN 1 1",
        Error::for_key(b"a", Error::Invalid("the same key is given twice"))
    )]
    #[case("RL.ALL 1 a 5 1000", Error::InvalidWord("expected a limiter kind (SLIDE, TOKEN, LEAKY, FIXED, SUBWIN, ACQUIRE) after the keys", "5".into()))]
    #[case(
        "RL.ALL 1 a ACQUIRE 2 1000 BLOCK 0",
        Error::for_key(b"a", Error::Invalid("BLOCK is not allowed inside RL.ALL"))
    )]
    #[case(
        "RL.ALL 1 a ACQUIRE 2 1000 ID",
        Error::for_key(b"a", Error::MissingValue("ID"))
    )]
    #[case("RL.ALL 2 a b ACQUIRE 2 1000 TOKEN 1 1 ID x", Error::for_key(b"b", Error::UnknownOption("ID".into())))]
    #[case("RL.ALL 1 a TOKEN 1", Error::for_key(b"a", Error::Arity))]
    #[case("RL.ALL 1 a TOKEN 0 1", Error::for_key(b"a", Error::Range { arg: "limit", min: 1, max: MAX_RATE_LIMIT }))]
    #[case("RL.ALL 2 a b TOKEN 1 1 FIXED 1 1 BURST 2", Error::for_key(b"b", Error::UnknownOption("BURST".into())))]
    #[case(
        "RL.ALL 1 a TOKEN 1 1 COST",
        Error::for_key(b"a", Error::MissingValue("COST"))
    )]
    #[case("RL.ALL 1 a TOKEN 1 1 NOW", Error::MissingValue("NOW"))]
    #[case("RL.ALL 2 a b TOKEN 1 1 NOW 5 FIXED 1 1", Error::InvalidWord("NOW comes once, after the last limiter; then nothing", "FIXED".into()))]
    #[case(
        "RL.ALL 1 a SUBWIN 1 1000 7",
        Error::for_key(b"a", Error::Invalid("window_ms must be a multiple of resolution_ms"))
    )]
    fn all_bad_input(#[case] line: &str, #[case] want: Error) {
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(all(&words, &mut Specs::new()).map(|_| ()), Err(want));
    }

    /// Words a client might send: numbers near every bound, keywords, junk.
    fn word() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        prop_oneof![
            prop::sample::select(vec![
                "0",
                "1",
                "7",
                "100",
                "1000",
                "4096",
                "60000",
                "2147483647",
                "2147483648",
                "4294967295",
                "4294967296",
                "2678400000",
                "253402300799999",
                "9223372036854775807",
                "18446744073709551616",
                "-1",
                "",
                "COST",
                "NOW",
                "BURST",
                "MAXDELAY",
                "ALIGN",
                "TOKEN",
                "SUBWIN",
                "cost",
                "x",
            ])
            .prop_map(|w| w.as_bytes().to_vec()),
            prop::collection::vec(any::<u8>(), 0..24),
        ]
    }

    // The argument parsers' fuzzer: `make fuzz` runs it longer (PROPTEST_CASES).
    proptest::proptest! {
        #[test]
        fn fuzz_any_arguments_parse_to_valid_requests_or_errors(
            words in proptest::collection::vec(word(), 0..12),
        ) {
            struct Word(Vec<u8>);
            impl AsBytes for Word {
                fn as_bytes(&self) -> &[u8] {
                    &self.0
                }
            }
            let mut args = vec![Word(b"RL.X".to_vec()), Word(b"key".to_vec())];
            args.extend(words.into_iter().map(Word));
            if let Ok(s) = slide(&args) {
                let in_range = |w: &Window| {
                    (1..=MAX_LIMIT).contains(&w.limit) && (1..=MAX_WINDOW_MS).contains(&w.window_ms)
                };
                let all = s.windows.as_slice().iter().all(in_range);
                proptest::prop_assert!(all);
            }
            if let Ok(r) = token(&args) {
                proptest::prop_assert!(r.params.limit <= MAX_RATE_LIMIT && r.params.burst >= 1);
            }
            if let Ok(r) = leaky(&args) {
                proptest::prop_assert!(r.params.max_delay_ms <= gcra::MAX_WINDOW_MS);
            }
            if let Ok(f) = fixed(&args) {
                proptest::prop_assert!(f.params.valid());
            }
            if let Ok(w) = subwin(&args) {
                proptest::prop_assert!(w.params.valid());
            }
            let parsed = [peek(&args), refund(&args), charge(&args)];
            for o in parsed.into_iter().flatten() {
                proptest::prop_assert!(o.now.is_none_or(|t| t <= MAX_TIMESTAMP));
            }
            let _ = restore(&args);
            let mut multi = vec![Word(b"RL.ALL".to_vec()), Word(b"1".to_vec())];
            multi.extend(args.into_iter().skip(1));
            let mut specs = Specs::new();
            if all(&multi, &mut specs).is_ok() {
                proptest::prop_assert_eq!(specs.len(), 1);
            }
        }
    }
}
