//! The byte encoding of limiter values, shared by RDB, `DUMP`/`RESTORE`, AOF rewrite
//! (`RL.RESTORE`) and `DEBUG DIGEST-VALUE`: the varints every kind writes its state with,
//! and where it writes them ([`Sink`]: a `Vec`, or [`SmallOut`] on the stack for the small
//! states, which RDB save, AOF rewrite and digest then write without allocating).
//!
//! Unsigned LEB128 varints throughout: a log of requests a few milliseconds apart costs about
//! two bytes a record on disk. The reader never trusts a length it has not checked against the
//! bytes actually present, so damaged input is refused without large allocations or panics.

/// `v` as [`put_varint`] writes it, on the stack: its bytes and how many (1 to 10).
#[inline(always)]
pub fn varint_bytes(mut v: u64) -> ([u8; 10], usize) {
    let mut out = [0u8; 10];
    let mut n = 0;
    while v >= 0x80 && n < 9 {
        out[n] = v as u8 | 0x80;
        v >>= 7;
        n += 1;
    }
    out[n] = v as u8;
    (out, n + 1)
}

/// Appends `v` as an unsigned LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads back what [`put_varint`] wrote.
pub struct Reader<'a> {
    bytes: &'a [u8],
}

/// Why bytes could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }

    pub fn byte(&mut self) -> Result<u8, Malformed> {
        let (&b, rest) = self.bytes.split_first().ok_or(Malformed("truncated"))?;
        self.bytes = rest;
        Ok(b)
    }

    /// One varint: one or two bytes at once (most of what the kinds write: counts, units,
    /// a record's milliseconds after the one before), else [`Reader::varint_long`].
    #[inline(always)]
    pub fn varint(&mut self) -> Result<u64, Malformed> {
        match *self.bytes {
            [b, ref rest @ ..] if b < 0x80 => {
                self.bytes = rest;
                Ok(u64::from(b))
            }
            [b0, b1, ref rest @ ..] if b1 < 0x80 => {
                self.bytes = rest;
                Ok(u64::from(b0 & 0x7f) | u64::from(b1) << 7)
            }
            _ => self.varint_long(),
        }
    }

    /// One varint of any length, in one pass over at most ten bytes.
    #[inline]
    fn varint_long(&mut self) -> Result<u64, Malformed> {
        let mut v: u64 = 0;
        for (i, &b) in self.bytes.iter().take(10).enumerate() {
            let part = u64::from(b & 0x7f);
            if i == 9 && part > 1 {
                return Err(Malformed("varint overflows 64 bits"));
            }
            v |= part << (7 * i);
            if b & 0x80 == 0 {
                self.bytes = self.bytes.get(i + 1..).unwrap_or_default();
                return Ok(v);
            }
        }
        if self.bytes.len() >= 10 {
            Err(Malformed("varint too long"))
        } else {
            Err(Malformed("truncated"))
        }
    }

    /// A count of items that each take at least `min_bytes`, refused when the input cannot
    /// possibly hold that many.
    pub fn count(&mut self, min_bytes: usize) -> Result<usize, Malformed> {
        let n = self.varint()?;
        match usize::try_from(n) {
            Ok(n) if n.saturating_mul(min_bytes) <= self.bytes.len() => Ok(n),
            _ => Err(Malformed("count larger than the data")),
        }
    }

    /// The next `n` bytes as they are.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if n > self.bytes.len() {
            return Err(Malformed("truncated"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    /// What is left to read.
    pub fn rest(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn finish(self) -> Result<(), Malformed> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(Malformed("trailing bytes"))
        }
    }
}

/// Where an encoding is written: a `Vec`, or [`SmallOut`] on the stack.
pub trait Sink {
    fn put(&mut self, bytes: &[u8]);

    /// Appends `v` as [`put_varint`] does.
    fn varint(&mut self, v: u64);

    /// Whether nothing more can be written (the encoding is then dropped).
    fn full(&self) -> bool;
}

impl<A: smallvec::Array<Item = u8>> Sink for smallvec::SmallVec<A> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    /// On the stack first, then appended at once (a push a byte checks the room each time).
    fn varint(&mut self, v: u64) {
        let (bytes, n) = varint_bytes(v);
        self.extend_from_slice(bytes.get(..n).unwrap_or_default());
    }

    fn full(&self) -> bool {
        false
    }
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
pub const SMALL_OUT: usize = 64;
const _: () = assert!(SMALL_OUT.is_power_of_two());

/// A fixed-size encoding buffer on the stack, for the encodings of at most [`SMALL_OUT`]
/// bytes; a longer one overflows it (and is written to a `Vec` instead).
pub struct SmallOut {
    buf: [u8; SMALL_OUT],
    len: usize,
    pub overflowed: bool,
}

impl SmallOut {
    pub fn new() -> SmallOut {
        SmallOut {
            buf: [0; SMALL_OUT],
            len: 0,
            overflowed: false,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

impl SmallOut {
    /// Appends the first `len` of `padded`'s bytes, storing them all when there is room
    /// (one copy of a known size).
    #[inline]
    pub fn put_padded<const N: usize>(&mut self, padded: &[u8; N], len: usize) {
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
        if v < 0x80 && !self.overflowed {
            // One byte (most of what the kinds write).
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = v as u8;
                self.len += 1;
                return;
            }
        }
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

impl Default for SmallOut {
    fn default() -> Self {
        SmallOut::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_varint_on_the_stack_is_the_one_put_varint_writes() {
        for v in [0, 1, 127, 128, 300, 1 << 32, u64::MAX >> 1, u64::MAX] {
            let mut want = Vec::new();
            put_varint(&mut want, v);
            let (bytes, n) = varint_bytes(v);
            assert_eq!(&bytes[..n], &want[..], "{v}");
        }
    }

    #[test]
    fn short_varints_read_back_as_written() {
        // One and two bytes (read at once), three (the loop), each followed by another.
        for v in (0..20_000).chain([1 << 14, (1 << 21) - 1, 1 << 21]) {
            let mut bytes = Vec::new();
            put_varint(&mut bytes, v);
            put_varint(&mut bytes, 5);
            let mut r = Reader::new(&bytes);
            assert_eq!((r.varint(), r.varint()), (Ok(v), Ok(5)), "{v}");
            assert!(r.finish().is_ok());
        }
    }

    #[test]
    fn refuses_overlong_and_truncated_varints() {
        assert!(Reader::new(&[0x80]).varint().is_err());
        assert!(Reader::new(&[0xff; 11]).varint().is_err());
        let mut max = Vec::new();
        put_varint(&mut max, u64::MAX);
        assert_eq!(Reader::new(&max).varint(), Ok(u64::MAX));
        let mut over = max.clone();
        *over.last_mut().unwrap() = 0x02;
        assert!(Reader::new(&over).varint().is_err());
    }

    #[test]
    fn counts_are_checked_against_the_input() {
        let mut bytes = Vec::new();
        put_varint(&mut bytes, 1 << 40);
        assert!(Reader::new(&bytes).count(1).is_err());
    }

    proptest! {
        #[test]
        fn varints_round_trip(values in prop::collection::vec(any::<u64>(), 0..50)) {
            let mut out = Vec::new();
            for v in &values { put_varint(&mut out, *v); }
            let mut r = Reader::new(&out);
            for v in &values { prop_assert_eq!(r.varint(), Ok(*v)); }
            prop_assert!(r.finish().is_ok());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(&bytes);
            while r.varint().is_ok() {}
        }
    }
}
