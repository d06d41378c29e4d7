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

use super::codec::Reader;
use super::error::Error;
use super::Instant;

/// The longest textual effect (`RL.SLIDE` with 8 windows of 20-digit numbers, `COST` and
/// `NOW` take under 400 bytes; a lease effect's id in hex, 1,024).
pub const MAX_LEN: usize = 1200;
/// The most words in an effect, the command name included.
pub const MAX_WORDS: usize = 24;

/// What a command writes its effect's words into: the textual form ([`Line`]) or the
/// compact one ([`Compact`]).
pub trait Out {
    /// A word: a keyword, or a number as the client wrote it (canonical decimal).
    fn word(&mut self, w: &[u8]) -> &mut Self;
    /// A number.
    fn number(&mut self, v: u64) -> &mut Self;
    /// `KEYWORD value`.
    fn option(&mut self, keyword: &str, v: u64) -> &mut Self {
        self.word(keyword.as_bytes()).number(v)
    }
    /// `NOW at`: the time the change was decided at.
    #[inline(always)]
    fn now(&mut self, at: Instant) -> &mut Self {
        self.option("NOW", at.ms())
    }
    /// Bytes of any value, written as their hex digits (a lease id); the compact form has
    /// none (the textual form is written instead).
    fn hex(&mut self, bytes: &[u8]) -> &mut Self;
}

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

/// An effect being written in the textual form: words separated by one space.
///
/// Written on every allowed call whose kind has no compact form (leases), so it is kept
/// cheap: numbers are written two digits at a time straight into the buffer.
pub struct Line {
    buf: [u8; MAX_LEN],
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

const HEX: &[u8; 16] = b"0123456789abcdef";

impl Line {
    /// A line that starts with the command's name.
    #[inline(always)]
    pub fn new(command: &str) -> Line {
        let mut line = Line {
            buf: [0; MAX_LEN],
            len: 0,
            overflow: false,
        };
        line.push(0, command.as_bytes());
        line
    }

    /// Reserves `n` bytes at the end, `None` (and the line marked too long) if they do not fit.
    fn reserve(&mut self, n: usize) -> Option<&mut [u8]> {
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
                *s = b' ';
            }
            rest.copy_from_slice(bytes);
        }
    }

    /// The line, `None` if it did not fit (which the longest command cannot reach).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        let written = self.buf.get(..self.len)?;
        (!self.overflow).then_some(written)
    }
}

impl Out for Line {
    /// Appends a word (which must hold no space).
    fn word(&mut self, w: &[u8]) -> &mut Line {
        self.push(1, w);
        self
    }

    /// Appends a number in decimal.
    fn number(&mut self, v: u64) -> &mut Line {
        let mut digits = [0u8; 20];
        self.word(decimal(v, &mut digits))
    }

    fn hex(&mut self, bytes: &[u8]) -> &mut Line {
        if let Some(dst) = self.reserve(1 + 2 * bytes.len()) {
            let (space, rest) = dst.split_at_mut(1);
            if let Some(s) = space.first_mut() {
                *s = b' ';
            }
            for (pair, b) in rest.chunks_exact_mut(2).zip(bytes) {
                pair[0] = HEX[usize::from(b >> 4)];
                pair[1] = HEX[usize::from(b & 15)];
            }
        }
        self
    }
}

/// The bytes whose hex digits `hex` holds (lower case, two a byte), `None` for anything else.
pub fn from_hex(hex: &[u8]) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    hex.chunks_exact(2)
        .map(|p| Some(digit(*p.first()?)? << 4 | digit(*p.get(1)?)?))
        .collect()
}

/// The first byte of a compact effect. A textual effect starts with a letter.
pub const COMPACT: u8 = 0x01;

/// The first byte of an effect in bytes: `BINARY code bytes`, the command of effect code
/// `code` given `bytes` in hex as its one word (a compact policy's family, whose effect
/// names subjects of any bytes: `kinds::family`).
pub const BINARY: u8 = 0x02;

/// `bytes` in hex digits.
pub fn to_hex(bytes: &[u8]) -> Vec<u8> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 15)]);
    }
    out
}

/// A compact effect's keywords, tagged `1 + index`; tag 0 is a number. (A kind whose effect
/// holds another keyword writes the textual form.)
const KEYWORDS: [&str; 5] = ["BURST", "MAXDELAY", "COST", "NOW", "ALIGN"];

/// The tag of keyword `w` in [`KEYWORDS`] (`1 + index`). A `match`, so that a keyword known
/// at compile time costs nothing to look up.
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

/// The longest compact effect: 20 words of 11 bytes (`RL.SLIDE` with 8 windows of 64-bit
/// numbers, `COST` and `NOW`, takes 18).
pub const COMPACT_MAX_LEN: usize = 2 + 20 * 11;

/// A compact effect's room for most calls (a rate limiter of one or two windows, its
/// options, `COST` and `NOW`): a smaller buffer to clear on every call. One that does not
/// fit says so ([`Compact::overflowed`]), and is written again at full size.
pub const COMPACT_SHORT_LEN: usize = 64;

/// An effect being written in the compact form, what primaries propagate: the same words
/// as the textual form, `COMPACT` and the command's code (each kind's command has its own,
/// see `Command::EFFECT_CODE`), then each word as a tag byte (0: a number, followed by its
/// LEB128 varint; else the keyword tagged) — about 20 bytes where the text takes 40, so
/// that Redis's AOF and replication buffers grow less. [`expand`] turns it back into the
/// text.
pub struct Compact<const N: usize = COMPACT_MAX_LEN> {
    buf: [u8; N],
    len: usize,
    ok: bool,
    /// A word did not fit in `N` bytes.
    full: bool,
}

impl Compact {
    /// An effect of the command whose compact code is `code` (1 to 255; 0: the command has
    /// no compact form, and the effect is refused), with room for the longest.
    #[inline(always)]
    pub fn new(code: u8) -> Compact {
        Compact::sized(code)
    }
}

impl<const N: usize> Compact<N> {
    /// [`Compact::new`], in `N` bytes.
    #[inline(always)]
    pub fn sized(code: u8) -> Compact<N> {
        let mut out = Compact {
            buf: [0; N],
            len: 2,
            ok: code != 0 && N >= 2,
            full: false,
        };
        if let [first, second, ..] = &mut out.buf[..] {
            (*first, *second) = (COMPACT, code);
        }
        out
    }

    fn push(&mut self, b: u8) {
        match self.buf.get_mut(self.len) {
            Some(slot) => {
                *slot = b;
                self.len += 1;
            }
            None => (self.ok, self.full) = (false, true),
        }
    }

    /// The effect, `None` if a word was neither a keyword nor a canonical number, or the
    /// command has no compact form (the caller then writes the textual form), or it did not
    /// fit ([`Compact::overflowed`]).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        self.buf.get(..self.len).filter(|_| self.ok)
    }

    /// Whether the effect did not fit in its `N` bytes (a larger one may hold it).
    pub fn overflowed(&self) -> bool {
        self.full
    }
}

impl<const N: usize> Out for Compact<N> {
    /// Appends a word: a keyword, or a number in canonical decimal (as the parsers accept).
    fn word(&mut self, w: &[u8]) -> &mut Compact<N> {
        if !w.first().is_some_and(u8::is_ascii_digit) {
            match keyword_tag(w) {
                Some(tag) => self.push(tag),
                None => self.ok = false,
            }
            return self;
        }
        // As the parsers read it: a number not written canonically has no compact form.
        let v = super::args::int_in(w, 0, u64::MAX);
        self.ok &= v.is_some();
        self.number(v.unwrap_or(0))
    }

    /// Appends a number.
    #[inline(always)]
    fn number(&mut self, mut v: u64) -> &mut Compact<N> {
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
                *slot = v as u8;
                break;
            }
            *slot = (v as u8) | 0x80;
            v >>= 7;
        }
        if let Some(tag) = out.first_mut() {
            *tag = 0;
        }
        self.len += written;
        self
    }

    /// `KEYWORD value`. Inlined, so that a literal keyword's tag is found at compile time.
    #[inline(always)]
    fn option(&mut self, keyword: &str, v: u64) -> &mut Compact<N> {
        match keyword_tag(keyword.as_bytes()) {
            Some(tag) => self.push(tag),
            None => self.ok = false,
        }
        self.number(v)
    }

    /// No bytes in the compact form: the textual one is written instead.
    fn hex(&mut self, _bytes: &[u8]) -> &mut Compact<N> {
        self.ok = false;
        self
    }
}

/// The textual form of a compact effect (see [`Compact`]); `command` names the command of
/// each code.
pub fn expand(effect: &[u8], command: impl Fn(u8) -> Option<&'static str>) -> Result<Line, Error> {
    let bad = || Error::Invalid("RL.APPLY effect is malformed");
    let mut r = Reader::new(effect);
    if r.byte().map_err(|_| bad())? != COMPACT {
        return Err(bad());
    }
    let code = r.byte().map_err(|_| bad())?;
    let command = command(code).filter(|_| code != 0).ok_or_else(bad)?;
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
            let slot = words.words.get_mut(words.len).ok_or_else(|| Error::Arity)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The commands of the codes the module's kinds and generic commands use.
    const COMMANDS: [&str; 7] = [
        "RL.SLIDE",
        "RL.TOKEN",
        "RL.LEAKY",
        "RL.FIXED",
        "RL.SUBWIN",
        "RL.REFUND",
        "RL.CHARGE",
    ];

    fn name(code: u8) -> Option<&'static str> {
        COMMANDS.get(usize::from(code).checked_sub(1)?).copied()
    }

    fn code(command: &str) -> u8 {
        COMMANDS
            .iter()
            .position(|c| *c == command)
            .map_or(0, |i| i as u8 + 1)
    }

    /// The slide's windows at most.
    const MAX_WINDOWS: usize = 8;

    /// The compact codes the module's commands have always had, `1 + index`: effects in
    /// AOF files and replication streams hold them, so they never change (the registry's
    /// commands and the generic ones give them: `Command::EFFECT_CODE`, `RL.REFUND`,
    /// `RL.CHARGE`). A new command takes a code of its own.
    const CODES: [&str; 8] = [
        "RL.SLIDE",
        "RL.TOKEN",
        "RL.LEAKY",
        "RL.FIXED",
        "RL.SUBWIN",
        "RL.REFUND",
        "RL.CHARGE",
        "CL.THROTTLE",
    ];

    /// The code of `command`'s effect, as the registry's catalog and the generic commands
    /// give them (`None`: the command has no compact effect).
    fn command_code(command: &str) -> Option<u8> {
        use crate::engine::{catalog, generic};
        let code = match command {
            "RL.REFUND" => generic::REFUND_CODE,
            "RL.CHARGE" => generic::CHARGE_CODE,
            _ => catalog()
                .commands()
                .find(|c| c.info.name == command)
                .map_or(0, |c| c.effect_code),
        };
        (code != 0).then_some(code)
    }

    #[test]
    fn codes_and_tags_follow_the_tables() {
        crate::install();
        for (i, c) in CODES.iter().enumerate() {
            assert_eq!(command_code(c), Some(i as u8 + 1));
        }
        // Every command's code, the registry's and the generic ones, and back, as an
        // effect is expanded; no other code.
        let names = crate::engine::catalog().commands().map(|c| c.info.name);
        let names: Vec<&str> = names.chain(["RL.REFUND", "RL.CHARGE"]).collect();
        for code in 0..=u8::MAX {
            let named = names.iter().find(|n| command_code(n) == Some(code));
            assert_eq!(
                crate::engine::effect_command(code),
                named.copied(),
                "{code}"
            );
        }
        for (i, k) in KEYWORDS.iter().enumerate() {
            assert_eq!(keyword_tag(k.as_bytes()), Some(i as u8 + 1));
        }
        assert_eq!(command_code("RL.ALL"), None);
        assert_eq!(keyword_tag(b"now"), None);
        // The leases' effects are textual.
        assert_eq!(command_code("RL.ACQUIRE"), None);
    }

    #[test]
    fn ids_in_hex() {
        let id: &[u8] = b"a b\x00\xff";
        let mut line = Line::new("RL.RELEASE");
        line.hex(id).option("NOW", 5);
        assert_eq!(line.as_bytes().unwrap(), b"RL.RELEASE 61206200ff NOW 5");
        assert_eq!(from_hex(b"61206200ff").as_deref(), Some(id));
        for bad in [&b"6"[..], b"6A", b"zz"] {
            assert_eq!(from_hex(bad), None);
        }
        let mut compact = Compact::new(1);
        compact.hex(id);
        assert!(compact.as_bytes().is_none());
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
        for _ in 0..MAX_WINDOWS {
            line.number(u64::MAX).number(u64::MAX);
        }
        line.option("COST", u64::MAX).option("NOW", u64::MAX);
        let bytes = line.as_bytes().unwrap();
        assert!(Words::split(b"k", bytes).is_ok());
        let mut too_long = Line::new("X");
        for _ in 0..MAX_LEN / 20 {
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

    /// Writes the same words in both forms.
    fn both(command: &str, words: &[&[u8]], options: &[(&str, u64)]) -> (Vec<u8>, Vec<u8>) {
        let (mut text, mut compact) = (Line::new(command), Compact::new(code(command)));
        for w in words {
            text.word(w);
            compact.word(w);
        }
        for &(k, v) in options {
            text.option(k, v);
            compact.option(k, v);
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
        assert_eq!(expand(&compact, name).unwrap().as_bytes().unwrap(), text);
        let max = u64::MAX.to_string();
        let windows = vec![max.as_bytes(); 2 * MAX_WINDOWS];
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
        // Every code writes an effect.
        for command in COMMANDS {
            let mut c = Compact::new(code(command));
            c.option("NOW", 1);
            assert!(c.as_bytes().is_some(), "{command}");
        }
        for (text, compact) in cases {
            assert_eq!(expand(&compact, name).unwrap().as_bytes().unwrap(), text);
            assert!(Words::split(b"k", &text).is_ok());
        }
        // Words that are not canonical numbers or known keywords have no compact form.
        for bad in [&b"01"[..], b"", b"1a", b"NOPE", b"99999999999999999999"] {
            let mut c = Compact::new(2);
            c.word(bad);
            assert!(c.as_bytes().is_none(), "{bad:?}");
        }
        assert!(Compact::new(0).as_bytes().is_none());
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
            assert!(expand(bad, name).is_err(), "{bad:?}");
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
            if let Ok(line) = expand(&bytes, name) {
                let _ = line.as_bytes().map(|t| Words::split(b"k", t));
            }
        }

        #[test]
        fn compact_numbers_round_trip(v in any::<u64>(), w in 0u64..1000) {
            let (vs, ws) = (v.to_string(), w.to_string());
            let (text, compact) = both("RL.TOKEN", &[vs.as_bytes(), ws.as_bytes()], &[("NOW", v)]);
            let expanded = expand(&compact, name).unwrap();
            prop_assert_eq!(expanded.as_bytes().unwrap(), &text[..]);
        }

        #[test]
        fn fuzz_split_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            let _ = Words::split(b"k", &bytes);
        }
    }
}
