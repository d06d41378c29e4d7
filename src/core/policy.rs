//! What a policy is, apart from the limiters it names: its names, the keys it derives from a
//! subject, its digest, and its persisted form. Nothing here knows Redis or a kind.
//!
//! A policy is a name and one or more limiters, each a name and `RL.ALL`'s words for it
//! (`minute SLIDE 100 60000`). `RL.HIT policy subject` decides under every limiter at once,
//! each on its own key, derived from the policy, the limiter, its kind and the subject
//! ([`key_for`]): distinct ones always give distinct keys, and all of a subject's keys are
//! in one slot, the one a cluster client routes the subject to.

use super::codec::{put_varint, Malformed, Reader};
use super::error::Error;

/// The most policies a server holds, whatever way they come (a client, the primary, the
/// AOF, an RDB): what one takes is bounded in `engine::policy` (see its `MAX_BYTES`).
pub const MAX_POLICIES: usize = 1024;

/// The longest name of a policy or of a limiter.
pub const MAX_NAME: usize = 64;

/// The most words one policy's limiters take (16 limiters of up to 16 words).
pub const MAX_WORDS: usize = 256;

/// The longest word of a definition.
pub const MAX_WORD: usize = 64;

/// The longest subject.
pub const MAX_SUBJECT: usize = 1024;

/// Checks a policy's or a limiter's name (`what`): 1 to 64 letters, digits, and `_ - . :`,
/// so that it reads the same in keys, `INFO` and logs (and holds none of the `|`, `{`, `}`
/// a derived key is built with).
pub fn check_name(what: &'static str, name: &[u8]) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidWord(what, super::args::lossy(name)))
    }
}

/// Whether `name` may name a new limiter, beyond [`check_name`]: it starts with a letter
/// (a word starting otherwise reads as a number among a limiter's parameters) and is none
/// of the words a definition's grammar gives a meaning (`reserved`: the kinds' keywords and
/// options, `NOW`, `BLOCK`), compared without case. Definitions made before this rule load
/// as they were.
pub fn check_new_limiter_name(name: &[u8], reserved: impl Fn(&[u8]) -> bool) -> Result<(), Error> {
    if !name.first().is_some_and(u8::is_ascii_alphabetic) {
        return Err(Error::InvalidWord(
            "a limiter's name starts with a letter",
            super::args::lossy(name),
        ));
    }
    if reserved(name) {
        return Err(Error::InvalidWord(
            "a limiter's name may not be a keyword of the policy grammar (a kind, an option, NOW, BLOCK, SHADOW)",
            super::args::lossy(name),
        ));
    }
    Ok(())
}

/// Appends a policy's name as an `INFO` field name: as it is, but `:` (which ends a field
/// name) written `|`, which no name holds, so that distinct names give distinct fields.
pub fn info_name(name: &[u8], out: &mut Vec<u8>) {
    out.extend(name.iter().map(|&b| if b == b':' { b'|' } else { b }));
}

/// A definition's words, kept in one allocation: each word's length (one byte: a word is at
/// most [`MAX_WORD`] bytes) and bytes, back to back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Words {
    bytes: Box<[u8]>,
    count: usize,
}

impl Words {
    /// The words, each at most [`MAX_WORD`] bytes (longer ones are cut: not reached, the
    /// callers check first).
    pub fn new<'w>(words: impl IntoIterator<Item = &'w [u8]>) -> Words {
        let mut bytes = Vec::new();
        let mut count = 0;
        for w in words {
            let w = w.get(..MAX_WORD).unwrap_or(w);
            bytes.push(w.len() as u8);
            bytes.extend_from_slice(w);
            count += 1;
        }
        Words {
            bytes: bytes.into_boxed_slice(),
            count,
        }
    }

    /// How many words.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The words, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut rest = &self.bytes[..];
        std::iter::from_fn(move || {
            let (&len, tail) = rest.split_first()?;
            let (word, after) = tail.split_at(usize::from(len).min(tail.len()));
            rest = after;
            Some(word)
        })
    }

    /// Bytes the words take on the heap.
    pub fn heap_size(&self) -> usize {
        self.bytes.len()
    }
}

/// The hash tag of a key as Redis Cluster finds it: between the first `{` and the first `}`
/// after it, when not empty.
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = key.get(open + 1..)?;
    let close = rest.iter().position(|&b| b == b'}')?;
    rest.get(..close).filter(|tag| !tag.is_empty())
}

/// CRC16 (XMODEM) tables for [`slot`], four bytes at a time: `CRC16[j][x]` is the CRC of
/// byte `x` followed by `j` zero bytes (`CRC16[0]` the usual table of a byte at a time). A
/// CRC is linear, so four bytes' tables combine by XOR, each lookup independent of the
/// others: half the instructions of a byte at a time on a subject of a dozen bytes.
const CRC16: [[u16; 256]; 4] = {
    let mut tables = [[0u16; 256]; 4];
    let mut b = 0;
    while b < 256 {
        let mut crc = (b as u16) << 8;
        let mut i = 0;
        while i < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            i += 1;
        }
        tables[0][b] = crc;
        b += 1;
    }
    let mut j = 1;
    while j < 4 {
        let mut b = 0;
        while b < 256 {
            let prev = tables[j - 1][b];
            tables[j][b] = (prev << 8) ^ tables[0][(prev >> 8) as usize];
            b += 1;
        }
        j += 1;
    }
    tables
};

/// A key's Redis Cluster slot: CRC16 (XMODEM) of its hash tag, or of the key, mod 16384.
pub fn slot(key: &[u8]) -> u16 {
    slot_of_bytes(hash_tag(key).unwrap_or(key))
}

/// The slot of a key whose hashed part is `data` (the key without a hash tag).
fn slot_of_bytes(data: &[u8]) -> u16 {
    let [t0, t1, t2, t3] = &CRC16;
    let mut crc: u16 = 0;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let &[b0, b1, b2, b3] = c else { continue };
        crc = t3[usize::from((crc >> 8) as u8 ^ b0)]
            ^ t2[usize::from(crc as u8 ^ b1)]
            ^ t1[usize::from(b2)]
            ^ t0[usize::from(b3)];
    }
    for &b in chunks.remainder() {
        crc = (crc << 8) ^ t0[usize::from((crc >> 8) as u8 ^ b)];
    }
    crc & 0x3fff
}

/// The slots of Redis Cluster.
pub const SLOTS: usize = 16384;

/// A short hash tag that hashes to slot `of` (below [`SLOTS`]): the shortest string of letters
/// and digits that does, the first in the order `0-9`, `A-Z`, `a-z` (three characters at
/// most). A key holding `{tag}` lives in that slot: what a family of a compact policy's
/// subjects is named with, to live in its subjects' slot (issue 30).
pub fn slot_tag(of: u16) -> Option<&'static [u8]> {
    static TAGS: std::sync::OnceLock<Vec<([u8; 3], u8)>> = std::sync::OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        let mut tags = vec![([0u8; 3], 0u8); SLOTS];
        let mut left = SLOTS;
        'lengths: for len in 1..=3usize {
            let mut digits = [0usize; 3];
            loop {
                let mut tag = [0u8; 3];
                for (t, &d) in tag.iter_mut().zip(&digits).take(len) {
                    *t = ALPHABET.get(d).copied().unwrap_or(b'0');
                }
                let at = usize::from(slot(tag.get(..len).unwrap_or_default()));
                if let Some(entry) = tags.get_mut(at).filter(|e| e.1 == 0) {
                    *entry = (tag, len as u8);
                    left -= 1;
                    if left == 0 {
                        break 'lengths;
                    }
                }
                // The next string of `len` characters, the last one fastest.
                let mut i = len;
                loop {
                    if i == 0 {
                        continue 'lengths;
                    }
                    i -= 1;
                    if let Some(d) = digits.get_mut(i) {
                        *d += 1;
                        if *d < ALPHABET.len() {
                            break;
                        }
                        *d = 0;
                    }
                }
            }
        }
        tags
    });
    let (tag, len) = tags.get(usize::from(of))?;
    tag.get(..usize::from(*len)).filter(|t| !t.is_empty())
}

/// [`slot_tag`] as three bytes (zeros after the tag) and its length: what a family key
/// copies at a known size.
fn slot_tag_padded(of: u16) -> Option<([u8; 3], usize)> {
    let tag = slot_tag(of)?;
    let mut padded = [0u8; 3];
    padded.get_mut(..tag.len())?.copy_from_slice(tag);
    Some((padded, tag.len()))
}

/// Writes the key of limiter `limiter` (of kind `kind`, its keyword, written in lower case) of policy
/// `policy` for `subject` into `out`: `policy|limiter|kind|{subject}`, or
/// `policy|limiter|kind|=subject` when the subject has a hash tag (its tag places the key).
///
/// Names hold no `|` (see [`check_name`]), and the byte after the third `|` tells a wrapped
/// subject from a tagged one, so distinct (policy, limiter, kind, subject) always give
/// distinct keys. The kind is in the key so that a limiter set again as another kind starts
/// on a key of its own instead of meeting the old one's (`WRONGTYPE`). Either way the key's
/// slot is the subject's: a policy's or a limiter's name holds no `{`, and a subject without
/// a tag is wrapped whole, so every key of one call is in the slot a cluster client sends
/// the subject to. A subject without a tag that holds `}` could not be wrapped so (the tag
/// would stop at it): refused, as are the empty subject and one over [`MAX_SUBJECT`] bytes.
pub fn key_for(
    policy: &[u8],
    limiter: &[u8],
    kind: &[u8],
    subject: &[u8],
    out: &mut impl KeyBuf,
) -> Result<(), Error> {
    let tagged = check_subject(subject)?;
    write_key(policy, limiter, kind, subject, tagged, out);
    Ok(())
}

/// [`key_for`] for a subject checked already ([`check_subject`] said whether it has a tag).
#[inline(always)]
pub fn write_key(
    policy: &[u8],
    limiter: &[u8],
    kind: &[u8],
    subject: &[u8],
    tagged: bool,
    out: &mut impl KeyBuf,
) {
    out.put(policy);
    out.put(b"|");
    out.put(limiter);
    out.put(b"|");
    let mut lower = [0u8; MAX_KIND];
    let kind = kind.get(..MAX_KIND).unwrap_or(kind);
    for (l, k) in lower.iter_mut().zip(kind) {
        *l = k.to_ascii_lowercase();
    }
    out.put(lower.get(..kind.len()).unwrap_or_default());
    if tagged {
        out.put(b"|=");
        out.put(subject);
    } else {
        out.put(b"|{");
        out.put(subject);
        out.put(b"}");
    }
}

/// Writes the key of the family that holds `subject` under compact policy `policy` into
/// `out`: `policy|~|{tag}`, `tag` the one [`slot_tag`] gives the subject's slot (its hash
/// tag's, when it has one), so that the family lives where the subject's keys would.
/// `~` is no limiter's name, so no keyed policy's key is a family's.
pub fn family_key(policy: &[u8], subject: &[u8], out: &mut impl KeyBuf) {
    family_key_in(policy, slot(subject), out);
}

/// [`family_key`] of the family in hash slot `slot`.
fn family_key_in(policy: &[u8], slot: u16, out: &mut impl KeyBuf) {
    out.put(policy);
    out.put(b"|~|{");
    out.put(slot_tag(slot).unwrap_or_default());
    out.put(b"}");
}

/// The hash slot of the family that holds `subject` (its hash tag's, when `tagged`:
/// [`check_subject`] said).
#[inline]
pub fn family_slot(subject: &[u8], tagged: bool) -> u16 {
    match tagged {
        true => slot(subject),
        false => slot_of_bytes(subject),
    }
}

/// The longest family key: a policy's name, `|~|{`, a tag of three, `}`.
pub const MAX_FAMILY_KEY: usize = MAX_NAME + 8;

/// A family's key on the stack ([`family_key`]).
pub type FamilyKey = KeyBytes<MAX_FAMILY_KEY>;

impl KeyBytes<MAX_FAMILY_KEY> {
    /// The key of the family of `subject` under compact policy `policy` ([`family_key`]);
    /// `tagged` whether the subject has a hash tag ([`check_subject`] said).
    pub fn of(policy: &[u8], subject: &[u8], tagged: bool) -> FamilyKey {
        FamilyKey::of_slot(policy, family_slot(subject, tagged))
    }

    /// The key of policy `policy`'s family in hash slot `slot` ([`family_slot`]'s).
    pub fn of_slot(policy: &[u8], slot: u16) -> FamilyKey {
        let mut key = FamilyKey::new();
        let ([a, b, c], t) = slot_tag_padded(slot).unwrap_or_default();
        let n = policy.len();
        // `|~|{`, the tag and `}` in eight bytes written at once (a copy of a size known
        // here; the tag's padding then cut off with the key's length).
        let mut tail = [b'|', b'~', b'|', b'{', a, b, c, b'}'];
        if let Some(close) = tail.get_mut(4 + t) {
            *close = b'}';
        }
        match key.bytes.get_mut(..n + tail.len()) {
            Some(bytes) => {
                let (name, rest) = bytes.split_at_mut(n);
                name.copy_from_slice(policy);
                rest.copy_from_slice(&tail);
                key.len = n + 4 + t + 1;
            }
            // Not reached: a policy's name is at most 64 bytes.
            None => family_key_in(policy, slot, &mut key),
        }
        key
    }
}

/// Where a key is written: bytes appended at once.
pub trait KeyBuf {
    fn put(&mut self, bytes: &[u8]);
}

impl KeyBuf for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// The longest kind keyword a key holds.
pub const MAX_KIND: usize = 16;

/// The longest key a policy derives: its name, a limiter's, a kind, a subject, and 5 more
/// bytes.
pub const MAX_KEY: usize = MAX_NAME + MAX_NAME + MAX_KIND + MAX_SUBJECT + 5;

/// A key of the longest a policy derives, on the stack.
pub type Key = KeyBytes<MAX_KEY>;

/// A key of at most `N` bytes on the stack (a call's keys are built once each, then handed
/// to the server).
pub struct KeyBytes<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> KeyBytes<N> {
    pub fn new() -> KeyBytes<N> {
        KeyBytes {
            bytes: [0; N],
            len: 0,
        }
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }
}

impl<const N: usize> Default for KeyBytes<N> {
    fn default() -> Self {
        KeyBytes::new()
    }
}

impl<const N: usize> KeyBuf for KeyBytes<N> {
    /// Past `N` bytes (not reached: names and subjects are bounded) the rest is dropped.
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let end = (self.len + bytes.len()).min(N);
        if let (Some(to), Some(from)) = (
            self.bytes.get_mut(self.len..end),
            bytes.get(..end - self.len),
        ) {
            to.copy_from_slice(from);
            self.len = end;
        }
    }
}

/// Checks a subject (see [`key_for`]): whether it has a hash tag.
pub fn check_subject(subject: &[u8]) -> Result<bool, Error> {
    if subject.is_empty() || subject.len() > MAX_SUBJECT {
        return Err(Error::Invalid("a subject is 1 to 1024 bytes"));
    }
    let tagged = hash_tag(subject).is_some();
    if !tagged && subject.contains(&b'}') {
        return Err(Error::InvalidWord(
            "a subject without a hash tag ({...}) may not hold '}'",
            super::args::lossy(subject),
        ));
    }
    Ok(tagged)
}

/// A definition's digest: 64-bit FNV-1a over its words, each preceded by its length. The
/// same definition gives the same digest on every server and build, so operators can
/// compare nodes (`RL.POLICY LIST`, `INFO`, written as 16 hex digits: [`hex`]).
pub fn digest<'w>(words: impl IntoIterator<Item = &'w [u8]>) -> u64 {
    words.into_iter().fold(super::FNV_OFFSET, |h, w| {
        super::fnv1a(super::fnv1a(h, &(w.len() as u32).to_le_bytes()), w)
    })
}

/// A digest as it is shown: 16 lower-case hex digits.
pub fn hex(digest: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, d) in out.iter_mut().enumerate() {
        let nibble = (digest >> (60 - 4 * i)) & 0xf;
        *d = b"0123456789abcdef"[nibble as usize];
    }
    out
}

/// A policy's name, kept inline (a server walks its policies for `INFO` without reaching
/// for each name elsewhere); checked by [`check_name`] before it is made.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Name {
    len: u8,
    bytes: [u8; MAX_NAME],
}

impl Name {
    /// `name`, if it is at most [`MAX_NAME`] bytes.
    pub fn new(name: &[u8]) -> Option<Name> {
        let mut bytes = [0u8; MAX_NAME];
        bytes.get_mut(..name.len())?.copy_from_slice(name);
        Some(Name {
            len: name.len() as u8,
            bytes,
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }
}

impl std::hash::Hash for Name {
    /// As its bytes hash, so that a store keyed by names is looked up by bytes.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_bytes().hash(h);
    }
}

impl std::borrow::Borrow<[u8]> for Name {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// The persisted form of the policies (the RDB's aux data): a version byte, the count, then
/// each policy's name, its words' count and its words, each a length and bytes.
pub const AUX_VERSION: u8 = 1;

/// Writes the policies, each as its name and definition words.
pub fn encode<'p>(
    policies: impl ExactSizeIterator<Item = (&'p [u8], &'p Words)>,
    out: &mut Vec<u8>,
) {
    out.push(AUX_VERSION);
    put_varint(out, policies.len() as u64);
    for (name, words) in policies {
        put_varint(out, name.len() as u64);
        out.extend_from_slice(name);
        put_varint(out, words.len() as u64);
        for w in words.iter() {
            put_varint(out, w.len() as u64);
            out.extend_from_slice(w);
        }
    }
}

/// A persisted policy: its name and its words, as written (checked again as `RL.POLICY SET`
/// checks them, by the caller).
pub type Persisted = (Vec<u8>, Words);

/// Reads what [`encode`] wrote: bounded as `RL.POLICY SET` bounds a policy.
pub fn decode(bytes: &[u8]) -> Result<Vec<Persisted>, Malformed> {
    let mut r = Reader::new(bytes);
    if r.byte()? != AUX_VERSION {
        return Err(Malformed("unknown policies version"));
    }
    let n = r.varint()?;
    if n > MAX_POLICIES as u64 {
        return Err(Malformed("too many policies"));
    }
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let name = take(&mut r, MAX_NAME)?;
        let count = r.varint()?;
        if count > MAX_WORDS as u64 {
            return Err(Malformed("too many words in a policy"));
        }
        let mut words = Vec::with_capacity(count as usize);
        for _ in 0..count {
            words.push(take(&mut r, MAX_WORD)?);
        }
        out.push((name, Words::new(words.iter().map(Vec::as_slice))));
    }
    r.finish()?;
    Ok(out)
}

/// A length-prefixed string of at most `max` bytes.
fn take(r: &mut Reader, max: usize) -> Result<Vec<u8>, Malformed> {
    let len = r.varint()?;
    if len > max as u64 {
        return Err(Malformed("a name or word too long"));
    }
    Ok(r.bytes(len as usize)?.to_vec())
}

#[cfg(test)]
mod slot_tag_tests {
    use super::*;

    /// CRC16 (XMODEM) a bit at a time, as its definition reads.
    fn crc16_bitwise(data: &[u8]) -> u16 {
        let mut crc: u16 = 0;
        for &b in data {
            crc ^= u16::from(b) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc
    }

    #[test]
    fn four_bytes_at_a_time_is_the_crc() {
        assert_eq!(crc16_bitwise(b"123456789"), 0x31c3);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..200 {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            assert_eq!(
                slot_of_bytes(&data),
                crc16_bitwise(&data) & 0x3fff,
                "{data:?}"
            );
        }
    }

    #[test]
    fn every_slot_has_a_short_tag_that_hashes_to_it() {
        for s in 0..SLOTS as u16 {
            let tag = slot_tag(s).unwrap_or_else(|| panic!("no tag for slot {s}"));
            assert!(tag.len() <= 3);
            assert_eq!(slot(tag), s, "{tag:?}");
            let mut key = b"api|~|{".to_vec();
            key.extend_from_slice(tag);
            key.push(b'}');
            assert_eq!(slot(&key), s);
        }
        assert_eq!(slot_tag(SLOTS as u16), None);
    }

    #[test]
    fn slots_as_redis_cluster_computes_them() {
        // CLUSTER KEYSLOT's examples in the Redis documentation.
        assert_eq!(slot(b"somekey"), 11058);
        assert_eq!(slot(b"foo{hash_tag}"), 2515);
    }

    #[test]
    fn a_family_key_is_in_its_subjects_slot() {
        for subject in [
            &b"u"[..],
            b"user:000000000042",
            b"{acme}:user:7",
            b"a{b",
            b"{}x",
            b"203.0.113.7",
        ] {
            let Ok(tagged) = check_subject(subject) else {
                continue;
            };
            let key = FamilyKey::of(b"api", subject, tagged);
            let mut slow = Vec::new();
            family_key(b"api", subject, &mut slow);
            assert_eq!(key.as_bytes(), &slow[..], "{subject:?}");
            assert_eq!(slot(key.as_bytes()), slot(subject), "{subject:?}");
        }
        let long = [b'p'; MAX_NAME];
        assert_eq!(
            FamilyKey::of(&long, b"s", false).as_bytes().len(),
            MAX_NAME + 4 + 2
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_clusters() {
        // As CLUSTER KEYSLOT answers.
        assert_eq!(slot(b"{u}"), 11826);
        assert_eq!(slot(b"{w}"), 3696);
        assert_eq!(slot(b"123456789"), 0x31c3 & 0x3fff);
    }

    fn key(subject: &[u8]) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        key_for(b"api", b"minute", b"slide", subject, &mut out).map(|()| out)
    }

    #[test]
    fn distinct_limiters_and_subjects_give_distinct_keys() {
        let k = |p: &str, l: &str, kind: &str, s: &str| {
            let mut out = Vec::new();
            key_for(
                p.as_bytes(),
                l.as_bytes(),
                kind.as_bytes(),
                s.as_bytes(),
                &mut out,
            )
            .map(|()| String::from_utf8(out).unwrap())
        };
        // What collided when the key was `policy:limiter:{subject}`.
        assert_ne!(
            k("api", "m", "slide", "alice"),
            k("api", "m", "slide", "{alice}")
        );
        assert_ne!(k("a", "b:c", "slide", "u"), k("a:b", "c", "slide", "u"));
        assert_ne!(k("p", "l", "slide", "x:{y}"), k("p", "l:x", "slide", "{y}"));
        assert_ne!(k("p", "l", "slide", "u"), k("p", "l", "token", "u"));
        // Every (policy, limiter, subject) over a small alphabet: no two alike.
        let names = ["a", "b", "a:b", "b:a", "a:", ":a", "a.b", "a_b", "a-b"];
        let subjects = [
            "a", "{a}", "a:{a}", "{a}:a", "{a}{b}", "x{a}", "a{", "{a:b}", "{", "a:b",
        ];
        let mut seen = std::collections::HashSet::new();
        for p in names {
            for l in names {
                for s in subjects {
                    let key = k(p, l, "slide", s).unwrap();
                    assert!(seen.insert(key.clone()), "{p} {l} {s}: {key} again");
                    assert_eq!(slot(key.as_bytes()), slot(s.as_bytes()), "{key}");
                }
            }
        }
    }

    #[test]
    fn keys_are_in_the_subjects_slot() {
        assert_eq!(key(b"user:42").unwrap(), b"api|minute|slide|{user:42}");
        assert_eq!(
            key(b"user:{42}:x").unwrap(),
            b"api|minute|slide|=user:{42}:x"
        );
        for subject in [
            &b"user:42"[..],
            b"user:{42}",
            b"a{b",
            b"x{y}",
            b"a}b{c}",
            b"x",
            b"{",
            "\u{e9}t\u{e9}".as_bytes(),
        ] {
            let k = key(subject).unwrap();
            assert_eq!(
                slot(&k),
                slot(subject),
                "{:?}",
                String::from_utf8_lossy(subject)
            );
        }
        // Every subject a client may route: all bytes up to 3 long.
        let alphabet = [b'a', b'{', b'}', b':'];
        for n in 1..=4 {
            let mut idx = vec![0usize; n];
            loop {
                let s: Vec<u8> = idx.iter().map(|&i| alphabet[i]).collect();
                match key(&s) {
                    Ok(k) => assert_eq!(slot(&k), slot(&s), "{:?}", String::from_utf8_lossy(&s)),
                    Err(_) => assert!(hash_tag(&s).is_none() && s.contains(&b'}')),
                }
                let mut i = 0;
                while i < n {
                    idx[i] += 1;
                    if idx[i] < alphabet.len() {
                        break;
                    }
                    idx[i] = 0;
                    i += 1;
                }
                if i == n {
                    break;
                }
            }
        }
        assert!(key(b"").is_err());
        assert!(key(b"a}b").is_err());
        assert!(key(b"{}").is_err());
        assert!(
            key(b"{}x{y}").is_err(),
            "an empty tag is none: Redis looks no further"
        );
        assert!(key(&[b'a'; MAX_SUBJECT + 1]).is_err());
    }

    #[test]
    fn names() {
        assert!(check_name("n", b"api-v2.minute:1_x").is_ok());
        for bad in [
            &b""[..],
            b"a b",
            b"{x}",
            b"a|b",
            b"caf\xc3\xa9",
            &[b'a'; 65],
        ] {
            assert!(check_name("n", bad).is_err());
        }
        let reserved = |w: &[u8]| w.eq_ignore_ascii_case(b"SLIDE");
        assert!(check_new_limiter_name(b"minute", reserved).is_ok());
        for bad in [&b"slide"[..], b"Slide", b"1m", b"_x", b"-x", b".x", b":x"] {
            assert!(check_new_limiter_name(bad, reserved).is_err(), "{bad:?}");
        }
        let info = |n: &[u8]| {
            let mut out = Vec::new();
            info_name(n, &mut out);
            out
        };
        assert_eq!(info(b"a:b"), b"a|b");
        assert_ne!(info(b"a:b"), info(b"a_b"));
    }

    #[test]
    fn words_are_kept_in_one_allocation() {
        let list: [&[u8]; 4] = [b"minute", b"SLIDE", b"", &[b'x'; MAX_WORD]];
        let w = Words::new(list);
        assert_eq!(w.len(), 4);
        assert_eq!(w.iter().collect::<Vec<_>>(), list);
        assert_eq!(w.heap_size(), 4 + 6 + 5 + MAX_WORD);
        assert!(Words::new([]).is_empty());
    }

    #[test]
    fn persisted_form_round_trips_and_is_bounded() {
        let words = Words::new(["minute", "SLIDE", "100", "60000"].map(str::as_bytes));
        let policies = [(&b"api"[..], &words)];
        let mut out = Vec::new();
        encode(policies.iter().copied(), &mut out);
        let back = decode(&out).unwrap();
        assert_eq!(back, vec![(b"api".to_vec(), words.clone())]);
        for cut in 0..out.len() {
            assert!(decode(&out[..cut]).is_err());
        }
        let mut long = out.clone();
        long.push(0);
        assert!(decode(&long).is_err());
        assert_eq!(digest(words.iter()), digest(words.iter()));
        assert_eq!(&hex(0x0123_4567_89ab_cdef), b"0123456789abcdef");
        let name = Name::new(b"api").unwrap();
        assert_eq!(name.as_bytes(), b"api");
        assert!(Name::new(&[b'a'; MAX_NAME + 1]).is_none());
        let mut map = std::collections::HashMap::new();
        map.insert(name, 1);
        assert_eq!(map.get(&b"api"[..]), Some(&1));
        assert_ne!(
            digest([&b"ab"[..], b"c"]),
            digest([&b"a"[..], b"bc"]),
            "the words' bounds are in the digest"
        );
    }
}
