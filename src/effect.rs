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
use crate::error::Error;

/// The longest effect: `RL.SLIDE` with 8 windows of 20-digit numbers, COST and NOW.
pub const MAX_LEN: usize = 512;
/// The most words in an effect, the command name included.
pub const MAX_WORDS: usize = 1 + 2 * crate::algo::slide::MAX_WINDOWS + 6;

/// An effect being written: words separated by one space. The counters come first
/// (`repr(C)`), so that initialising them is not merged with the buffer into one memset.
#[repr(C)]
pub struct Line {
    len: usize,
    overflow: bool,
    /// Written from the start; only the first `len` bytes are initialised (zeroing the
    /// whole buffer for every effect was a measurable part of a call).
    buf: [MaybeUninit<u8>; MAX_LEN],
}

impl Line {
    /// A line that starts with the command's name. Inlined, so that the caller's line is
    /// built in place rather than copied out (half a kilobyte).
    #[inline(always)]
    pub fn new(command: &str) -> Line {
        let mut line = Line {
            len: 0,
            overflow: false,
            buf: [MaybeUninit::uninit(); MAX_LEN],
        };
        line.push(command.as_bytes());
        line
    }

    fn push(&mut self, bytes: &[u8]) {
        match self.buf.get_mut(self.len..self.len + bytes.len()) {
            Some(dst) => {
                // SAFETY: `dst` is `bytes.len()` writable bytes of our own buffer, which
                // cannot overlap `bytes` (borrowed from elsewhere while `self` is borrowed
                // mutably).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr(),
                        dst.as_mut_ptr().cast::<u8>(),
                        bytes.len(),
                    );
                }
                self.len += bytes.len();
            }
            None => self.overflow = true,
        }
    }

    /// Appends a word (which must hold no space).
    pub fn word(&mut self, w: &[u8]) -> &mut Line {
        self.push(b" ");
        self.push(w);
        self
    }

    /// Appends a number in decimal.
    pub fn number(&mut self, mut v: u64) -> &mut Line {
        // Two digits per division: half the divisions of one at a time, on every effect's
        // NOW and on each number `RL.ALL` writes.
        const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
            2021222324252627282930313233343536373839\
            4041424344454647484950515253545556575859\
            6061626364656667686970717273747576777879\
            8081828384858687888990919293949596979899";
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        // Each step writes at most two digits and u64 has at most 20: `i` stays in bounds.
        while v >= 100 {
            let pair = (v % 100) as usize * 2;
            v /= 100;
            i -= 2;
            digits[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        }
        if v >= 10 {
            let pair = v as usize * 2;
            i -= 2;
            digits[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        } else {
            i -= 1;
            digits[i] = b'0' + v as u8;
        }
        self.word(&digits[i..])
    }

    /// `KEYWORD value`.
    pub fn option(&mut self, keyword: &str, v: u64) -> &mut Line {
        self.word(keyword.as_bytes()).number(v)
    }

    /// The line, `None` if it did not fit (which the longest command cannot reach).
    pub fn as_bytes(&self) -> Option<&[u8]> {
        // SAFETY: the first `len` bytes were written by `push`, the only place `len` grows,
        // and `len` never exceeds the buffer (`push` writes only through `get_mut`).
        (!self.overflow).then(|| unsafe {
            std::slice::from_raw_parts(self.buf.as_ptr().cast::<u8>(), self.len)
        })
    }
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
    fn numbers_of_every_length_are_decimal() {
        let mut v = 1u64;
        for _ in 0..20 {
            for n in [v - 1, v, v.saturating_add(1), v.saturating_mul(9)] {
                let mut line = Line::new("X");
                line.number(n);
                assert_eq!(line.as_bytes().unwrap(), format!("X {n}").as_bytes());
            }
            v = v.saturating_mul(10);
        }
    }

    proptest! {
        #[test]
        fn any_number_is_decimal(n in any::<u64>()) {
            let mut line = Line::new("X");
            line.number(n);
            let want = format!("X {n}");
            prop_assert_eq!(line.as_bytes().unwrap(), want.as_bytes());
        }
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

    proptest! {
        #[test]
        fn fuzz_split_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
            let _ = Words::split(b"k", &bytes);
        }
    }
}
