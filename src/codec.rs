//! The byte encoding of limiter values, shared by RDB, `DUMP`/`RESTORE`, AOF rewrite
//! (`RL.RESTORE`) and `DEBUG DIGEST-VALUE`.
//!
//! Unsigned LEB128 varints throughout: a log of requests a few milliseconds apart costs about
//! two bytes a record on disk. The reader never trusts a length it has not checked against the
//! bytes actually present, so damaged input is refused without large allocations or panics.

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

    /// One varint, in one pass over at most ten bytes.
    #[inline(always)]
    pub fn varint(&mut self) -> Result<u64, Malformed> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
