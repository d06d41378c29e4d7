//! The grammar's primitives, which every kind parses its commands with: integers written
//! as Redis writes them, and options (`KEYWORD value` or a flag) in any order, each at most
//! once, with errors naming the argument at fault.
//!
//! A command's parser takes the words after its key (`&[&[u8]]`), so that it is
//! unit-tested without a server, and an effect's words (`RL.APPLY`) parse with it too.

use super::error::Error;
use super::meta;
use super::MAX_TIMESTAMP;

/// The largest `COST`.
pub const COST_MAX: u64 = i64::MAX as u64;

/// What a request weighs when no `COST` is given.
pub const COST_DEFAULT: u64 = 1;

/// What an option takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takes {
    /// A decimal integer in `min..=max`.
    Int { min: u64, max: u64 },
    /// A duration in `min..=max` milliseconds: an integer of milliseconds, or one with a
    /// unit (see [`duration`]).
    Duration { min: u64, max: u64 },
    /// Nothing: the keyword alone.
    Flag,
    /// Any word.
    Word,
}

/// An option a command takes: its keyword, what follows it, and its name in `COMMAND DOCS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opt {
    pub keyword: &'static str,
    pub takes: Takes,
    /// What `COMMAND DOCS` calls it (`burst`, `max-delay-ms`): empty until [`Opt::doc`].
    pub doc: &'static str,
}

impl Opt {
    pub const fn int(keyword: &'static str, min: u64, max: u64) -> Opt {
        Opt {
            keyword,
            takes: Takes::Int { min, max },
            doc: "",
        }
    }

    pub const fn duration(keyword: &'static str, min: u64, max: u64) -> Opt {
        Opt {
            keyword,
            takes: Takes::Duration { min, max },
            doc: "",
        }
    }

    pub const fn flag(keyword: &'static str) -> Opt {
        Opt {
            keyword,
            takes: Takes::Flag,
            doc: "",
        }
    }

    pub const fn word(keyword: &'static str) -> Opt {
        Opt {
            keyword,
            takes: Takes::Word,
            doc: "",
        }
    }

    /// The option, named `doc` in `COMMAND DOCS`.
    pub const fn doc(self, doc: &'static str) -> Opt {
        Opt { doc, ..self }
    }

    /// What `COMMAND DOCS` shows for it: a flag, or a keyword and its value.
    pub const fn doc_arg(&self) -> meta::Arg {
        match self.takes {
            Takes::Flag => meta::flag(self.doc, self.keyword),
            Takes::Word => meta::Arg {
                kind: meta::ArgKind::String,
                ..meta::option(self.keyword, self.doc)
            },
            Takes::Int { .. } | Takes::Duration { .. } => meta::option(self.keyword, self.doc),
        }
    }

    /// The words it takes, its keyword included.
    pub fn width(&self) -> usize {
        match self.takes {
            Takes::Flag => 1,
            _ => 2,
        }
    }
}

/// `COST n`: the units a request weighs.
pub const COST: Opt = Opt::int("COST", 0, COST_MAX).doc("cost");
/// `NOW ms`: the time to decide at instead of the server clock.
pub const NOW: Opt = Opt::int("NOW", 0, MAX_TIMESTAMP.ms()).doc("unix-time-milliseconds");

/// A command's options as one table with a field each, read by name: the table
/// (`TABLE`, without `NOW`) is what `RL.ALL`, policies and `COMMAND DOCS` read, and
/// `parse` fills the fields from the words after the positional arguments, `NOW` included
/// (every command takes it). Reordering the table changes no field's meaning.
///
/// ```ignore
/// option_set! {
///     /// `RL.TOKEN`'s options.
///     pub struct TokenOptions { burst: BURST, cost: COST }
/// }
/// let o = TokenOptions::parse(words)?; // o.burst, o.cost, o.now: Option<Value>
/// ```
macro_rules! option_set {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($field:ident: $opt:expr),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        $vis struct $name<'a> {
            $(pub $field: Option<$crate::core::args::Value<'a>>,)*
            pub now: Option<$crate::core::args::Value<'a>>,
        }

        impl<'a> $name<'a> {
            /// The options, as a limiter of `RL.ALL` or a policy takes them and `COMMAND
            /// DOCS` lists them (`NOW`, the call's, is not one of them). (Unused by a
            /// command that is no limiter of `RL.ALL`.)
            #[allow(dead_code)]
            pub const TABLE: &'static [$crate::core::args::Opt] = &[$($opt),*];

            /// The options given among `words`, in any order, each at most once.
            #[inline(always)]
            pub fn parse(words: &[&'a [u8]]) -> Result<Self, $crate::core::error::Error> {
                let [$($field,)* now] =
                    $crate::core::args::options(words, &[$($opt,)* $crate::core::args::NOW])?;
                Ok($name { $($field,)* now })
            }

            /// The call's `NOW`.
            #[inline(always)]
            pub fn now(&self) -> Option<$crate::core::Instant> {
                self.now.map(|v| $crate::core::Instant::from_ms(v.int()))
            }
        }
    };
}
pub(crate) use option_set;

/// An option's value as given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Int(u64),
    Flag,
    Word(&'a [u8]),
}

impl Value<'_> {
    /// The integer of an `Int` option (0 for the others).
    pub fn int(self) -> u64 {
        match self {
            Value::Int(v) => v,
            _ => 0,
        }
    }
}

/// The options given, by their place in the table they were parsed with.
pub type Given<'a, const N: usize> = [Option<Value<'a>>; N];

/// `KEYWORD value` pairs and flags among `table`, in any order, each at most once.
#[inline(always)]
pub fn options<'a, const N: usize>(
    words: &[&'a [u8]],
    table: &[Opt; N],
) -> Result<Given<'a, N>, Error> {
    // Most calls give none.
    if words.is_empty() {
        return Ok([None; N]);
    }
    some_options(words, table)
}

fn some_options<'a, const N: usize>(
    words: &[&'a [u8]],
    table: &[Opt; N],
) -> Result<Given<'a, N>, Error> {
    let mut given = [None; N];
    let mut it = words.iter();
    while let Some(&name) = it.next() {
        let Some((i, opt)) = table
            .iter()
            .enumerate()
            .find(|(_, o)| name.eq_ignore_ascii_case(o.keyword.as_bytes()))
        else {
            return Err(Error::UnknownOption(lossy(name)));
        };
        let Some(slot) = given.get_mut(i) else {
            continue;
        };
        if slot.is_some() {
            return Err(Error::RepeatedOption(opt.keyword));
        }
        *slot = Some(match opt.takes {
            Takes::Flag => Value::Flag,
            takes => {
                let Some(&value) = it.next() else {
                    return Err(Error::MissingValue(opt.keyword));
                };
                match takes {
                    Takes::Int { min, max } => Value::Int(int(value, opt.keyword, min, max)?),
                    Takes::Duration { min, max } => {
                        Value::Int(duration(value, opt.keyword, min, max)?)
                    }
                    _ => Value::Word(value),
                }
            }
        });
    }
    Ok(given)
}

/// The required positional argument at `i`, a decimal integer in `min..=max`.
#[inline(always)]
pub fn positional(
    words: &[&[u8]],
    i: usize,
    name: &'static str,
    min: u64,
    max: u64,
) -> Result<u64, Error> {
    match words.get(i) {
        Some(word) => int(word, name, min, max),
        None => Err(Error::Arity),
    }
}

/// The required positional duration at `i`, in `min..=max` milliseconds (see [`duration`]).
#[inline(always)]
pub fn positional_duration(
    words: &[&[u8]],
    i: usize,
    name: &'static str,
    min: u64,
    max: u64,
) -> Result<u64, Error> {
    match words.get(i) {
        Some(word) => duration(word, name, min, max),
        None => Err(Error::Arity),
    }
}

/// A duration in `min..=max` milliseconds: a decimal integer of milliseconds (as [`int`]
/// reads it), or a decimal integer followed by a unit, `ms`, `s`, `m`, `h` or `d` (in any
/// case): `250ms`, `60s`, `5m`, `1h`, `1d`. A window typed in seconds without its unit
/// would be read as milliseconds, so the unit is what says otherwise.
#[inline(always)]
pub fn duration(word: &[u8], name: &'static str, min: u64, max: u64) -> Result<u64, Error> {
    duration_in(word, min, max).ok_or_else(|| duration_error(name, min, max))
}

/// [`duration`]'s value, `None` for anything it refuses (no error made).
#[inline(always)]
pub fn duration_in(word: &[u8], min: u64, max: u64) -> Option<u64> {
    // The common case, a bare number, costs one byte's test more than `int`.
    if word.last().is_some_and(u8::is_ascii_digit) {
        return int_in(word, min, max);
    }
    with_unit(word, min, max)
}

fn duration_error(name: &'static str, min: u64, max: u64) -> Error {
    Error::DurationRange {
        arg: name,
        min,
        max,
    }
}

fn with_unit(word: &[u8], min: u64, max: u64) -> Option<u64> {
    let digits = word.iter().take_while(|b| b.is_ascii_digit()).count();
    let (number, unit) = word.split_at(digits);
    let per: u64 = match unit.to_ascii_lowercase().as_slice() {
        b"ms" => 1,
        b"s" => 1000,
        b"m" => 60_000,
        b"h" => 3_600_000,
        b"d" => 86_400_000,
        _ => return None,
    };
    int_in(number, 0, u64::MAX)
        .and_then(|n| n.checked_mul(per))
        .filter(|ms| (min..=max).contains(ms))
}

/// A decimal integer in `min..=max`, written the way Redis writes integers.
#[inline]
#[allow(clippy::unnecessary_lazy_evaluations)] // no error made (and dropped) on every call
pub fn int(word: &[u8], name: &'static str, min: u64, max: u64) -> Result<u64, Error> {
    int_in(word, min, max).ok_or_else(|| Error::Range {
        arg: name,
        min,
        max,
    })
}

/// [`int`]'s value, `None` for anything it refuses (no error made).
#[inline]
pub fn int_in(word: &[u8], min: u64, max: u64) -> Option<u64> {
    let (Some(&first), 1..=20) = (word.first(), word.len()) else {
        return None;
    };
    if first == b'0' && word.len() > 1 {
        return None;
    }
    let (head, tail) = word.split_at(word.len().min(19));
    // Nineteen digits always fit in a u64; a twentieth is added with overflow checked.
    let mut v = digits(head)?;
    if let Some(&b) = tail.first() {
        let d = b.wrapping_sub(b'0');
        v = match v.checked_mul(10).and_then(|v| v.checked_add(u64::from(d))) {
            Some(v) if d <= 9 => v,
            _ => return None,
        };
    }
    (min..=max).contains(&v).then_some(v)
}

/// The value of at most 19 decimal digits, `None` if a byte is not a digit: eight digits
/// at a time while eight are left (one load, two checks and three multiplications instead
/// of eight rounds), then one at a time.
#[inline(always)]
fn digits(word: &[u8]) -> Option<u64> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let mut v: u64 = 0;
    let mut rest = word;
    while let Some((eight, tail)) = rest.split_first_chunk::<8>() {
        let x = u64::from_le_bytes(*eight);
        // Every byte 0x30..=0x39: its high nibble 3, and adding 6 leaves it so (no byte
        // can carry into the next: the highest, 0x3F + 6, is 0x45).
        let high = 0xF0 * ONES;
        if x & high != 0x30 * ONES || x.wrapping_add(6 * ONES) & high != 0x30 * ONES {
            return None;
        }
        // The digits, the first in the lowest byte: pairs, then fours, then all eight.
        let d = x - 0x30 * ONES;
        let d = (d & 0x000F_000F_000F_000F) * 10 + ((d >> 8) & 0x000F_000F_000F_000F);
        let d = (d & 0x0000_00FF_0000_00FF) * 100 + ((d >> 16) & 0x0000_00FF_0000_00FF);
        let d = (d & 0x0000_0000_0000_FFFF) * 10_000 + ((d >> 32) & 0x0000_0000_0000_FFFF);
        v = v * 100_000_000 + d;
        rest = tail;
    }
    for &b in rest {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + u64::from(d);
    }
    Some(v)
}

/// The cost a [`COST`] option gives, [`COST_DEFAULT`] when none.
#[inline(always)]
pub fn cost(given: Option<Value<'_>>) -> u64 {
    given.map_or(COST_DEFAULT, Value::int)
}

/// How a command's positional parameters run, for finding where one of `RL.ALL`'s
/// limiters ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positional {
    /// `limit window_ms` pairs, up to the first word that is not a number (`RL.SLIDE`).
    Pairs,
    /// Exactly this many numbers.
    Numbers(usize),
}

/// A rate limiter's grammar after its key, the one description its parser, `RL.ALL`, a
/// policy's limiters, `COMMAND DOCS` and its effect's words follow: positional numbers,
/// then the options the command knows (`NOW`, which is the call's, is not one of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grammar {
    pub positional: Positional,
    /// The positional arguments, as `COMMAND DOCS` shows them.
    pub params: &'static [meta::Arg],
    /// The options (an [`option_set!`] table).
    pub options: &'static [Opt],
}

impl Grammar {
    /// The command's `COMMAND DOCS` arguments: the key, the positional arguments, the
    /// options, then `NOW`.
    pub fn doc_args(&self) -> Vec<meta::Arg> {
        let options = self.options.iter().map(Opt::doc_arg);
        [meta::KEY]
            .into_iter()
            .chain(self.params.iter().copied())
            .chain(options)
            .chain([meta::NOW])
            .collect()
    }

    /// The same arguments as one of `RL.ALL`'s limiters takes them (no key, no `NOW`).
    pub fn limiter_args(&self) -> Vec<meta::Arg> {
        let options = self.options.iter().map(Opt::doc_arg);
        self.params.iter().copied().chain(options).collect()
    }

    /// How many of `words` one limiter of this grammar takes: its positional words (up to
    /// the first word that is not a number, as in `RL.SLIDE`, a bad number left for the
    /// command's parser to name), then the options it knows.
    pub fn extent(&self, words: &[&[u8]]) -> usize {
        let is_number = |w: &&[u8]| !w.first().is_some_and(u8::is_ascii_alphabetic);
        let most = match self.positional {
            Positional::Pairs => usize::MAX,
            Positional::Numbers(n) => n,
        };
        let mut end = words.iter().take(most).take_while(|w| is_number(w)).count();
        while let Some(opt) = words.get(end).and_then(|w| {
            self.options
                .iter()
                .find(|o| w.eq_ignore_ascii_case(o.keyword.as_bytes()))
        }) {
            end += opt.width();
        }
        end.min(words.len())
    }

    /// Whether one limiter's `words` of this grammar give option `keyword`.
    pub fn gives(&self, words: &[&[u8]], keyword: &str) -> bool {
        let is_number = |w: &&[u8]| !w.first().is_some_and(u8::is_ascii_alphabetic);
        let most = match self.positional {
            Positional::Pairs => usize::MAX,
            Positional::Numbers(n) => n,
        };
        let mut at = words.iter().take(most).take_while(|w| is_number(w)).count();
        while let Some(opt) = words.get(at).and_then(|w| {
            self.options
                .iter()
                .find(|o| w.eq_ignore_ascii_case(o.keyword.as_bytes()))
        }) {
            if opt.keyword.eq_ignore_ascii_case(keyword) {
                return true;
            }
            at += opt.width();
        }
        false
    }
}

/// A client's word as an error may quote it: at most 64 characters.
pub fn lossy(word: &[u8]) -> String {
    String::from_utf8_lossy(word).chars().take(64).collect()
}

/// The words of a line split on spaces, for tests.
#[cfg(test)]
pub fn words(line: &str) -> Vec<&[u8]> {
    line.split(' ')
        .filter(|w| !w.is_empty())
        .map(str::as_bytes)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Instant;

    const TABLE: [Opt; 4] = [COST, NOW, Opt::flag("ALIGN"), Opt::word("ID")];

    #[test]
    fn options_in_any_order_each_once() {
        let got = options(&words("now 5 ALIGN id x COST 2"), &TABLE).unwrap();
        assert_eq!(
            got,
            [
                Some(Value::Int(2)),
                Some(Value::Int(5)),
                Some(Value::Flag),
                Some(Value::Word(b"x"))
            ]
        );
        assert_eq!((cost(got[0]), got[1].map(Value::int)), (2, Some(5)));
        assert_eq!(cost(None), 1);
        for (line, want) in [
            ("COST 1 COST 2", Error::RepeatedOption("COST")),
            ("ALIGN ALIGN", Error::RepeatedOption("ALIGN")),
            ("COST", Error::MissingValue("COST")),
            ("ID", Error::MissingValue("ID")),
            ("BURST 2", Error::UnknownOption("BURST".into())),
            (
                "COST -1",
                Error::Range {
                    arg: "COST",
                    min: 0,
                    max: COST_MAX,
                },
            ),
            (
                "NOW 253402300800000",
                Error::Range {
                    arg: "NOW",
                    min: 0,
                    max: MAX_TIMESTAMP.ms(),
                },
            ),
        ] {
            assert_eq!(options(&words(line), &TABLE), Err(want), "{line}");
        }
    }

    #[test]
    fn extent_of_a_limiter() {
        // A limiter's options: NOW is the call's, not one of them.
        const OPTIONS: [Opt; 3] = [COST, Opt::flag("ALIGN"), Opt::word("ID")];
        let g = Grammar {
            positional: Positional::Numbers(2),
            params: &[meta::LIMIT, meta::WINDOW_MS],
            options: &OPTIONS,
        };
        assert_eq!(g.extent(&words("5 1000 ALIGN COST 2 TOKEN 1 1")), 5);
        assert_eq!(g.extent(&words("5 1000 ID x NOW 3")), 4);
        assert_eq!(g.extent(&words("5 abc COST 1")), 1);
        assert_eq!(g.extent(&words("5 1000 COST")), 3);
        let pairs = Grammar {
            positional: Positional::Pairs,
            params: &[],
            options: &TABLE[..1],
        };
        assert_eq!(pairs.extent(&words("1 2 3 4 5 6 COST 1 ALIGN")), 8);
    }

    option_set! {
        /// A table in one order...
        struct Ab { a: Opt::int("A", 0, 9), b: Opt::flag("B") }
    }

    option_set! {
        /// ... and in the other: the fields keep their meanings.
        struct Ba { b: Opt::flag("B"), a: Opt::int("A", 0, 9) }
    }

    #[test]
    fn options_are_read_by_name() {
        let ab = Ab::parse(&words("B NOW 5 A 3")).unwrap();
        let ba = Ba::parse(&words("B NOW 5 A 3")).unwrap();
        assert_eq!(
            (ab.a, ab.b, ab.now()),
            (
                Some(Value::Int(3)),
                Some(Value::Flag),
                Some(Instant::from_ms(5))
            )
        );
        assert_eq!((ba.a, ba.b, ba.now()), (ab.a, ab.b, ab.now()));
        assert_eq!(Ab::TABLE.len(), 2);
        // COMMAND DOCS: the key, the positional arguments, the options, NOW.
        let g = Grammar {
            positional: Positional::Numbers(1),
            params: &[meta::LIMIT],
            options: Ab::TABLE,
        };
        let names: Vec<_> = g.doc_args().iter().map(|a| a.name).collect();
        assert_eq!(names, ["key", "limit", "", "", "unix-time-milliseconds"]);
    }

    #[test]
    fn durations_take_units() {
        let d = |w: &str| duration(w.as_bytes(), "window_ms", 1, 2_678_400_000);
        for (word, ms) in [
            ("60000", 60_000),
            ("250ms", 250),
            ("60s", 60_000),
            ("5m", 300_000),
            ("1h", 3_600_000),
            ("1d", 86_400_000),
            ("31d", 2_678_400_000),
            ("2S", 2000),
            ("10MS", 10),
        ] {
            assert_eq!(d(word), Ok(ms), "{word}");
        }
        for bad in [
            "",
            "0",
            "0s",
            "32d",
            "s",
            "1w",
            "1.5s",
            "-1s",
            "1 s",
            "01s",
            "1sec",
            "99999999999999999999d",
        ] {
            let err = Error::DurationRange {
                arg: "window_ms",
                min: 1,
                max: 2_678_400_000,
            };
            assert_eq!(d(bad), Err(err), "{bad}");
        }
        const OPTS: [Opt; 1] = [Opt::duration("MAXDELAY", 0, 1000)];
        assert_eq!(
            options(&words("MAXDELAY 1s"), &OPTS).unwrap(),
            [Some(Value::Int(1000))]
        );
    }

    proptest::proptest! {
        /// `int` reads exactly the canonical decimal integers in range, as `str::parse`
        /// reads them.
        #[test]
        fn int_reads_canonical_decimals(word in "[0-9]{1,21}|[0-9a+ -]{0,4}", min in 0u64..3, max in proptest::prelude::any::<u64>()) {
            let canonical = word.parse::<u64>().ok().filter(|v| v.to_string() == word);
            let want = canonical.filter(|v| (min..=max).contains(v));
            proptest::prop_assert_eq!(int(word.as_bytes(), "x", min, max).ok(), want);
        }

        /// Eight digits at a time read what one at a time reads, and refuse what it
        /// refuses: any byte that is not a digit, anywhere (bytes next to the digits in
        /// particular: `/`, `:` to `?`, and the digits with the high bit set).
        #[test]
        fn digits_read_as_one_at_a_time(word in proptest::collection::vec(
            proptest::prop_oneof![
                8 => b'0'..=b'9',
                1 => proptest::prelude::any::<u8>(),
                1 => proptest::sample::select(vec![b'/', b':', b';', b'?', 0xB0, 0xB9, 0x39 + 0x80]),
            ],
            0..=19,
        )) {
            let mut want = Some(0u64);
            for &b in &word {
                want = want.filter(|_| b.is_ascii_digit()).map(|v| v * 10 + u64::from(b - b'0'));
            }
            proptest::prop_assert_eq!(digits(&word), want);
        }
    }

    #[test]
    fn digits_at_the_edges() {
        for (word, want) in [
            ("", Some(0)),
            ("7", Some(7)),
            ("12345678", Some(12_345_678)),
            ("00000000", Some(0)),
            ("99999999", Some(99_999_999)),
            ("1234567890123456789", Some(1_234_567_890_123_456_789)),
            ("9999999999999999999", Some(9_999_999_999_999_999_999)),
            ("1234567:", None),
            ("/2345678", None),
            ("12345678/", None),
        ] {
            assert_eq!(digits(word.as_bytes()), want, "{word}");
        }
    }
}
