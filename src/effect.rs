//! The effect of a decision, as replicas and the AOF receive it: `RL.APPLY key effect`, where
//! `effect` is one argument holding the words of the command that decided, after its key,
//! with every option resolved and the exact decision time:
//!
//! ```text
//! RL.APPLY user:42 "RL.TOKEN 100 60000 BURST 100 COST 1 NOW 1700000000000"
//! ```
//!
//! One argument instead of nine: the AOF and the replication stream cost a few hundred
//! instructions per argument, and the effect is built in a stack buffer without allocating.
//! A server applying it parses the words with the command's own parser and records them
//! without deciding again.

use std::mem::MaybeUninit;

use crate::args::AsBytes;
use crate::codec::Reader;
use crate::error::Error;

/// The longest effect: `RL.SLIDE` with 8 windows of 20-digit numbers, COST and NOW.
pub const MAX_LEN: usize = 512;
/// The most words in an effect, the command name included.
pub const MAX_WORDS: usize = 1 + 2 * crate::algo::slide::MAX_WINDOWS + 6;

/// `v` in decimal, formatted at the end of `digits` two digits at a time (the low eight
/// digits in 32-bit arithmetic): the written end of `digits`.
pub fn decimal(v: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut start = digits.len();
    let mut put_pair = |start: &mut usize, pair: usize| {
        *start -= 2;
        digits[*start] = DIGIT_PAIRS[2 * pair];
        digits[*start + 1] = DIGIT_PAIRS[2 * pair + 1];
    };
    let mut high = v;
    if high >= 100_000_000 {
        let mut low = (high % 100_000_000) as u32;
        high /= 100_000_000;
        for _ in 0..4 {
            put_pair(&mut start, (low % 100) as usize);
            low /= 100;
        }
    }
    while high >= 100 {
        put_pair(&mut start, (high % 100) as usize);
        high /= 100;
    }
    if high >= 10 {
        put_pair(&mut start, high as usize);
    } else {
        start -= 1;
        digits[start] = b'0' + high as u8;
    }
    &digits[start..]
}

/// An effect being written: words separated by one space.
///
/// Built on every allowed call, so it is kept cheap: the buffer is not zeroed (only the
/// bytes written are ever read), separators are single stores, and numbers are written
/// two digits at a time straight into the buffer.
pub struct Line {
    buf: [MaybeUninit<u8>; MAX_LEN],
    len: usize,
    overflow: bool,
}

/// `00`, `01`, ... `99`: two digits per lookup.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

impl Line {
    /// A line that starts with the command's name.
    #[inline(always)]
    pub fn new(command: &str) -> Line {
        let mut line = Line {
            buf: [const { MaybeUninit::uninit() }; MAX_LEN],
            len: 0,
            overflow: false,
        };
        line.push(0, command.as_bytes());
        line
    }

    /// Reserves `n` bytes at the end, `None` (and the line marked too long) if they do not fit.
    fn reserve(&mut self, n: usize) -> Option<&mut [MaybeUninit<u8>]> {
        let start = self.len;
        match self.buf.get_mut(start..start.saturating_add(n)) {
            Some(dst) => {
                self.len += n;
                Some(dst)
            }
            None => {
                self.overflow = true;
                None
            }
        }
    }

    /// Appends `bytes`, after one space when `sep` is 1.
    fn push(&mut self, sep: usize, bytes: &[u8]) {
        if let Some(dst) = self.reserve(sep + bytes.len()) {
            let (space, rest) = dst.split_at_mut(sep);
            if let Some(s) = space.first_mut() {
                s.write(b' ');
            }
            for (d, &b) in rest.iter_mut().zip(bytes) {
                d.write(b);
            }
        }
    }

    /// Appends a word (which must hold no space).
    pub fn word(&mut self, w: &[u8]) -> &mut Line {
        self.push(1, w);
        self
    }

    /// Appends a number in decimal.
    pub fn number(&mut self, v: u64) -> &mut Line {
        let mut digits = [0u8; 20];
        self.word(decimal(v, &mut digits))
    }

    /// `KEYWORD value`.
    #[cfg(test)]
    pub fn option(&mut self, keyword: &str, v: u64) -> &mut Line {
        self.word(keyword.as_bytes()).number(v)
    }

    /// The line, `None` if it did not fit (which the longest command cannot reach).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        let written = self.buf.get(..self.len)?;
        // SAFETY: the first `len` bytes were all written (by `push` and `number`, which
        // advance `len` only over the bytes they write), and `MaybeUninit<u8>` has the
        // layout of `u8`.
        let bytes = unsafe { std::slice::from_raw_parts(written.as_ptr().cast::<u8>(), self.len) };
        (!self.overflow).then_some(bytes)
    }
}

/// The first byte of a compact effect. A textual effect starts with a letter.
pub const COMPACT: u8 = 0x01;

/// A compact effect's commands, coded `1 + index`.
const COMMANDS: [&str; 7] = [
    "RL.SLIDE",
    "RL.TOKEN",
    "RL.LEAKY",
    "RL.FIXED",
    "RL.SUBWIN",
    "RL.REFUND",
    "RL.CHARGE",
];
/// A compact effect's keywords, tagged `1 + index`; tag 0 is a number.
const KEYWORDS: [&str; 5] = ["BURST", "MAXDELAY", "COST", "NOW", "ALIGN"];

/// The code of `command` in [`COMMANDS`] (`1 + index`). A `match`, so that a command known at
/// compile time costs nothing to look up.
#[inline(always)]
fn command_code(command: &str) -> Option<u8> {
    match command {
        "RL.SLIDE" => Some(1),
        "RL.TOKEN" => Some(2),
        "RL.LEAKY" => Some(3),
        "RL.FIXED" => Some(4),
        "RL.SUBWIN" => Some(5),
        "RL.REFUND" => Some(6),
        "RL.CHARGE" => Some(7),
        _ => None,
    }
}

/// The tag of keyword `w` in [`KEYWORDS`] (`1 + index`), as [`command_code`].
#[inline(always)]
fn keyword_tag(w: &[u8]) -> Option<u8> {
    match w {
        b"BURST" => Some(1),
        b"MAXDELAY" => Some(2),
        b"COST" => Some(3),
        b"NOW" => Some(4),
        b"ALIGN" => Some(5),
        _ => None,
    }
}

/// The longest compact effect: `RL.SLIDE` with 8 windows of 20-digit numbers, COST and NOW.
const COMPACT_MAX_LEN: usize = 2 + (2 * crate::algo::slide::MAX_WINDOWS + 2) * 11 + 2;

/// An effect being written in the compact form, what primaries propagate: the same words
/// as the textual form, `COMPACT` and the command's code, then each word as a tag byte (0:
/// a number, followed by its LEB128 varint; else the keyword tagged) — about 20 bytes where
/// the text takes 40, so that Redis's AOF and replication buffers grow less. [`expand`]
/// turns it back into the text.
pub struct Compact {
    buf: [MaybeUninit<u8>; COMPACT_MAX_LEN],
    len: usize,
    ok: bool,
}

impl Compact {
    /// An effect of `command`, which must be one of the commands that propagate.
    #[inline(always)]
    pub fn new(command: &str) -> Compact {
        let code = command_code(command);
        // Not zeroed: only the bytes written are ever read (see `as_bytes`).
        let mut out = Compact {
            buf: [const { MaybeUninit::uninit() }; COMPACT_MAX_LEN],
            len: 2,
            ok: code.is_some(),
        };
        out.buf[0].write(COMPACT);
        out.buf[1].write(code.unwrap_or(0));
        out
    }

    fn push(&mut self, b: u8) {
        match self.buf.get_mut(self.len) {
            Some(slot) => {
                slot.write(b);
                self.len += 1;
            }
            None => self.ok = false,
        }
    }

    /// Appends a word: a keyword, or a number in canonical decimal (as the parsers accept).
    pub fn word(&mut self, w: &[u8]) -> &mut Compact {
        if !w.first().is_some_and(u8::is_ascii_digit) {
            match keyword_tag(w) {
                Some(tag) => self.push(tag),
                None => self.ok = false,
            }
            return self;
        }
        let canonical = !w.is_empty() && w.len() <= 20 && (w[0] != b'0' || w.len() == 1);
        let mut v: u64 = 0;
        for &b in w {
            let d = b.wrapping_sub(b'0');
            match v.checked_mul(10).and_then(|v| v.checked_add(u64::from(d))) {
                Some(n) if d <= 9 => v = n,
                _ => self.ok = false,
            }
        }
        self.ok &= canonical;
        self.number(v)
    }

    /// Appends a number.
    #[inline(always)]
    pub fn number(&mut self, mut v: u64) -> &mut Compact {
        // The tag and at most 10 bytes of varint, written in one go where they fit.
        let Some(out) = self.buf.get_mut(self.len..self.len + 11) else {
            self.push(0);
            while v >= 0x80 {
                self.push((v as u8) | 0x80);
                v >>= 7;
            }
            self.push(v as u8);
            return self;
        };
        let mut written = 1;
        for slot in out.iter_mut().skip(1) {
            written += 1;
            if v < 0x80 {
                slot.write(v as u8);
                break;
            }
            slot.write((v as u8) | 0x80);
            v >>= 7;
        }
        if let Some(tag) = out.first_mut() {
            tag.write(0);
        }
        self.len += written;
        self
    }

    /// `KEYWORD value`. Inlined, so that a literal keyword's tag is found at compile time.
    #[inline(always)]
    pub fn option(&mut self, keyword: &str, v: u64) -> &mut Compact {
        match keyword_tag(keyword.as_bytes()) {
            Some(tag) => self.push(tag),
            None => self.ok = false,
        }
        self.number(v)
    }

    /// The effect, `None` if a word was neither a keyword nor a canonical number, or the
    /// command does not propagate (the caller then writes the textual form).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        let written = self.buf.get(..self.len).filter(|_| self.ok)?;
        // SAFETY: the first `len` bytes were all written (by `new`, `push` and `number`,
        // which advance `len` only over the bytes they write), and `MaybeUninit<u8>` has the
        // layout of `u8`.
        Some(unsafe { std::slice::from_raw_parts(written.as_ptr().cast::<u8>(), written.len()) })
    }
}

/// The textual form of a compact effect (see [`Compact`]).
pub fn expand(effect: &[u8]) -> Result<Line, Error> {
    let bad = || Error::Invalid("RL.APPLY effect is malformed");
    let mut r = Reader::new(effect);
    if r.byte().map_err(|_| bad())? != COMPACT {
        return Err(bad());
    }
    let code = usize::from(r.byte().map_err(|_| bad())?);
    let command = code
        .checked_sub(1)
        .and_then(|i| COMMANDS.get(i))
        .ok_or_else(bad)?;
    let mut line = Line::new(command);
    while let Ok(tag) = r.byte() {
        match usize::from(tag) {
            0 => line.number(r.varint().map_err(|_| bad())?),
            k => line.word(KEYWORDS.get(k - 1).ok_or_else(bad)?.as_bytes()),
        };
    }
    Ok(line)
}

/// The words of `RL.APPLY key effect` as the command line they stand for:
/// `[command, key, arguments...]`, ready for the command's parser.
pub struct Words<'a> {
    words: [&'a [u8]; MAX_WORDS + 1],
    len: usize,
}

impl<'a> Words<'a> {
    /// Splits `effect` on single spaces and puts `key` after the command name.
    pub fn split(key: &'a [u8], effect: &'a [u8]) -> Result<Words<'a>, Error> {
        let bad = Error::Invalid("RL.APPLY effect is malformed");
        let mut words = Words {
            words: [&[]; MAX_WORDS + 1],
            len: 0,
        };
        let mut push = |w: &'a [u8]| -> Result<(), Error> {
            let slot = words.words.get_mut(words.len).ok_or(Error::Arity)?;
            *slot = w;
            words.len += 1;
            Ok(())
        };
        for (i, w) in effect.split(|&b| b == b' ').enumerate() {
            if w.is_empty() {
                return Err(bad);
            }
            if i == 1 {
                push(key).map_err(|_| Error::Invalid("RL.APPLY effect is malformed"))?;
            }
            push(w).map_err(|_| Error::Invalid("RL.APPLY effect is malformed"))?;
        }
        if words.len < 2 {
            return Err(bad);
        }
        Ok(words)
    }

    /// The command's name, upper case as the primary wrote it.
    pub fn command(&self) -> &'a [u8] {
        self.words[0]
    }

    pub fn as_slice(&self) -> &[&'a [u8]] {
        &self.words[..self.len]
    }
}

impl AsBytes for &[u8] {
    fn as_bytes(&self) -> &[u8] {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn codes_and_tags_follow_the_tables() {
        for (i, c) in COMMANDS.iter().enumerate() {
            assert_eq!(command_code(c), Some(i as u8 + 1));
        }
        for (i, k) in KEYWORDS.iter().enumerate() {
            assert_eq!(keyword_tag(k.as_bytes()), Some(i as u8 + 1));
        }
        assert_eq!(command_code("RL.ALL"), None);
        assert_eq!(keyword_tag(b"now"), None);
    }

    #[test]
    fn writes_and_splits_an_effect() {
        let mut line = Line::new("RL.TOKEN");
        line.word(b"100")
            .number(60000)
            .option("BURST", 100)
            .option("COST", 1)
            .option("NOW", 1_700_000_000_000);
        let bytes = line.as_bytes().unwrap();
        assert_eq!(
            bytes,
            b"RL.TOKEN 100 60000 BURST 100 COST 1 NOW 1700000000000"
        );
        let words = Words::split(b"user:42", bytes).unwrap();
        assert_eq!(words.command(), b"RL.TOKEN");
        let expect: Vec<&[u8]> = vec![
            b"RL.TOKEN",
            b"user:42",
            b"100",
            b"60000",
            b"BURST",
            b"100",
            b"COST",
            b"1",
            b"NOW",
            b"1700000000000",
        ];
        assert_eq!(words.as_slice(), &expect[..]);
        let refund = Words::split(b"k", b"RL.REFUND COST 3 NOW 5").unwrap();
        assert_eq!(refund.as_slice().len(), 6);
    }

    #[test]
    fn numbers_at_both_ends() {
        let mut line = Line::new("X");
        line.number(0).number(u64::MAX);
        assert_eq!(line.as_bytes().unwrap(), b"X 0 18446744073709551615");
    }

    #[test]
    fn the_longest_effect_fits() {
        let mut line = Line::new("RL.SLIDE");
        for _ in 0..crate::algo::slide::MAX_WINDOWS {
            line.number(u64::MAX).number(u64::MAX);
        }
        line.option("COST", u64::MAX).option("NOW", u64::MAX);
        let bytes = line.as_bytes().unwrap();
        assert!(Words::split(b"k", bytes).is_ok());
        let mut too_long = Line::new("X");
        for _ in 0..40 {
            too_long.number(u64::MAX);
        }
        assert!(too_long.as_bytes().is_none());
    }

    #[test]
    fn refuses_malformed_effects() {
        for bad in [
            &b""[..],
            b"RL.TOKEN",
            b"RL.TOKEN  1",
            b" RL.TOKEN 1",
            b"RL.TOKEN 1 ",
        ] {
            assert!(Words::split(b"k", bad).is_err(), "{bad:?}");
        }
        let many = vec![&b"1"[..]; MAX_WORDS + 2].join(&b' ');
        assert!(Words::split(b"k", &many).is_err());
    }

    /// What the deciding command writes into its effect, in either form.
    pub trait Effect {
        /// A word: a keyword, or a number as the client wrote it (canonical decimal).
        fn put_word(&mut self, w: &[u8]);
        /// `KEYWORD value`.
        fn put_option(&mut self, keyword: &str, v: u64);
    }

    impl Effect for Line {
        fn put_word(&mut self, w: &[u8]) {
            self.word(w);
        }

        fn put_option(&mut self, keyword: &str, v: u64) {
            self.option(keyword, v);
        }
    }

    impl Effect for Compact {
        fn put_word(&mut self, w: &[u8]) {
            self.word(w);
        }

        fn put_option(&mut self, keyword: &str, v: u64) {
            self.option(keyword, v);
        }
    }

    /// Writes the same words in both forms.
    fn both(command: &str, words: &[&[u8]], options: &[(&str, u64)]) -> (Vec<u8>, Vec<u8>) {
        let (mut text, mut compact) = (Line::new(command), Compact::new(command));
        for w in words {
            text.put_word(w);
            compact.put_word(w);
        }
        for &(k, v) in options {
            text.put_option(k, v);
            compact.put_option(k, v);
        }
        let text = text.as_bytes().unwrap().to_vec();
        (text, compact.as_bytes().unwrap().to_vec())
    }

    #[test]
    fn a_compact_effect_expands_to_its_text() {
        let (text, compact) = both(
            "RL.TOKEN",
            &[b"100", b"60000"],
            &[("NOW", 1_700_000_000_000)],
        );
        assert_eq!(text, b"RL.TOKEN 100 60000 NOW 1700000000000");
        assert_eq!(compact.len(), 16);
        assert_eq!(compact[..5], [COMPACT, 2, 0, 100, 0]);
        assert_eq!(expand(&compact).unwrap().as_bytes().unwrap(), text);
        let max = u64::MAX.to_string();
        let windows = vec![max.as_bytes(); 2 * crate::algo::slide::MAX_WINDOWS];
        let cases = [
            both(
                "RL.FIXED",
                &[b"5", b"1000", b"ALIGN"],
                &[("COST", 2), ("NOW", 0)],
            ),
            both(
                "RL.LEAKY",
                &[b"10", b"0"],
                &[("MAXDELAY", 500), ("BURST", 1), ("NOW", 9)],
            ),
            both(
                "RL.SLIDE",
                &windows,
                &[("COST", u64::MAX), ("NOW", u64::MAX)],
            ),
            both("RL.SUBWIN", &[b"1", b"2", b"3"], &[("NOW", 1)]),
            both("RL.REFUND", &[], &[("COST", 2), ("NOW", 1)]),
            both("RL.CHARGE", &[], &[("COST", 700), ("NOW", 1)]),
        ];
        // Every command that propagates through `commands::propagate` has a code.
        for command in COMMANDS {
            let mut c = Compact::new(command);
            c.option("NOW", 1);
            assert!(c.as_bytes().is_some(), "{command}");
        }
        for (text, compact) in cases {
            assert_eq!(expand(&compact).unwrap().as_bytes().unwrap(), text);
            assert!(Words::split(b"k", &text).is_ok());
        }
        // Words that are not canonical numbers or known keywords have no compact form.
        for bad in [&b"01"[..], b"", b"1a", b"NOPE", b"99999999999999999999"] {
            let mut c = Compact::new("RL.TOKEN");
            c.put_word(bad);
            assert!(c.as_bytes().is_none(), "{bad:?}");
        }
        assert!(Compact::new("RL.PEEK").as_bytes().is_none());
    }

    #[test]
    fn refuses_malformed_compact_effects() {
        for bad in [
            &[][..],
            &[COMPACT],
            &[COMPACT, 0],
            &[COMPACT, 8],
            &[COMPACT, 2, 6],
            &[COMPACT, 2, 0, 0x80],
            &[2, 2],
        ] {
            assert!(expand(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn numbers_are_written_in_decimal(v in any::<u64>(), small in 0u64..100_000) {
            let mut line = Line::new("X");
            line.number(v).number(small);
            let expected = format!("X {v} {small}");
            prop_assert_eq!(line.as_bytes().unwrap(), expected.as_bytes());
        }

        #[test]
        fn fuzz_expand_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let mut bytes = bytes;
            if let Some(b) = bytes.first_mut() {
                *b = COMPACT;
            }
            if let Ok(line) = expand(&bytes) {
                let _ = line.as_bytes().map(|t| Words::split(b"k", t));
            }
        }

        #[test]
        fn compact_numbers_round_trip(v in any::<u64>(), w in 0u64..1000) {
            let (vs, ws) = (v.to_string(), w.to_string());
            let (text, compact) = both("RL.TOKEN", &[vs.as_bytes(), ws.as_bytes()], &[("NOW", v)]);
            let expanded = expand(&compact).unwrap();
            prop_assert_eq!(expanded.as_bytes().unwrap(), &text[..]);
        }

        #[test]
        fn fuzz_split_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            let _ = Words::split(b"k", &bytes);
        }
    }
}
