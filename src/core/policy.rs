//! What a policy is, apart from the limiters it names: its names, the keys it derives from a
//! subject, its digest, and its persisted form. Nothing here knows Redis or a kind.
//!
//! A policy is a name and one or more limiters, each a name and `RL.ALL`'s words for it
//! (`minute SLIDE 100 60000`). `RL.HIT policy subject` decides under every limiter at once,
//! each on its own key, derived from the subject ([`key_for`]) so that all of a subject's
//! keys are in one slot, the one a cluster client routes the subject to.

use super::codec::{put_varint, Malformed, Reader};
use super::error::Error;

/// The most policies a server holds. Each takes its definition's words, at most
/// [`MAX_WORDS`] of at most 64 bytes (about 2 kB with the parsed limiters), and once a call
/// under it was refused, its sketch of who is refused (about 12 kB): at most about 14 MB
/// for them all.
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
/// so that it reads the same in keys, `INFO` and logs.
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

/// The hash tag of a key as Redis Cluster finds it: between the first `{` and the first `}`
/// after it, when not empty.
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = key.get(open + 1..)?;
    let close = rest.iter().position(|&b| b == b'}')?;
    rest.get(..close).filter(|tag| !tag.is_empty())
}

/// A key's Redis Cluster slot: CRC16 (XMODEM) of its hash tag, or of the key, mod 16384.
pub fn slot(key: &[u8]) -> u16 {
    let data = hash_tag(key).unwrap_or(key);
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
    crc & 0x3fff
}

/// Writes the key of limiter `limiter` of policy `policy` for `subject` into `out`:
/// `policy:limiter:subject` when the subject has a hash tag (its tag places the key), else
/// `policy:limiter:{subject}`. Either way the key's slot is the subject's, so every key of
/// one call is in the slot a cluster client sends the subject to. A subject without a tag
/// that holds `}` could not be wrapped so (the tag would stop at it): refused, as are the
/// empty subject and one over [`MAX_SUBJECT`] bytes.
pub fn key_for(
    policy: &[u8],
    limiter: &[u8],
    subject: &[u8],
    out: &mut impl KeyBuf,
) -> Result<(), Error> {
    let tagged = check_subject(subject)?;
    write_key(policy, limiter, subject, tagged, out);
    Ok(())
}

/// [`key_for`] for a subject checked already ([`check_subject`] said whether it has a tag).
#[inline]
pub fn write_key(
    policy: &[u8],
    limiter: &[u8],
    subject: &[u8],
    tagged: bool,
    out: &mut impl KeyBuf,
) {
    out.put(policy);
    out.put(b":");
    out.put(limiter);
    if tagged {
        out.put(b":");
        out.put(subject);
    } else {
        out.put(b":{");
        out.put(subject);
        out.put(b"}");
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

/// The longest key a policy derives: its name, a limiter's, a subject, and 4 more bytes.
pub const MAX_KEY: usize = MAX_NAME + MAX_NAME + MAX_SUBJECT + 4;

/// A key on the stack (a call's keys are built once each, then handed to the server).
pub struct Key {
    bytes: [u8; MAX_KEY],
    len: usize,
}

impl Key {
    pub fn new() -> Key {
        Key {
            bytes: [0; MAX_KEY],
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

impl Default for Key {
    fn default() -> Self {
        Key::new()
    }
}

impl KeyBuf for Key {
    /// Past [`MAX_KEY`] (not reached: names and subjects are bounded) the rest is dropped.
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let end = (self.len + bytes.len()).min(MAX_KEY);
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

/// A definition's digest: 64-bit FNV-1a over its words, each preceded by its length, in hex.
/// The same definition gives the same digest on every server and build, so operators can
/// compare nodes (`RL.POLICY LIST`).
pub fn digest<'w>(words: impl IntoIterator<Item = &'w [u8]>) -> String {
    let h = words.into_iter().fold(super::FNV_OFFSET, |h, w| {
        super::fnv1a(super::fnv1a(h, &(w.len() as u32).to_le_bytes()), w)
    });
    format!("{h:016x}")
}

/// The persisted form of the policies (the RDB's aux data): a version byte, the count, then
/// each policy's name, its words' count and its words, each a length and bytes.
pub const AUX_VERSION: u8 = 1;

/// Writes the policies, each as its name and definition words.
pub fn encode<'p>(
    policies: impl ExactSizeIterator<Item = (&'p [u8], &'p [Box<[u8]>])>,
    out: &mut Vec<u8>,
) {
    out.push(AUX_VERSION);
    put_varint(out, policies.len() as u64);
    for (name, words) in policies {
        put_varint(out, name.len() as u64);
        out.extend_from_slice(name);
        put_varint(out, words.len() as u64);
        for w in words {
            put_varint(out, w.len() as u64);
            out.extend_from_slice(w);
        }
    }
}

/// A persisted policy: its name and its words, as written (checked again as `RL.POLICY SET`
/// checks them, by the caller).
pub type Persisted = (Vec<u8>, Vec<Box<[u8]>>);

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
            words.push(take(&mut r, MAX_WORD)?.into_boxed_slice());
        }
        out.push((name, words));
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
        key_for(b"api", b"minute", subject, &mut out).map(|()| out)
    }

    #[test]
    fn keys_are_in_the_subjects_slot() {
        assert_eq!(key(b"user:42").unwrap(), b"api:minute:{user:42}");
        assert_eq!(key(b"user:{42}:x").unwrap(), b"api:minute:user:{42}:x");
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
        for bad in [&b""[..], b"a b", b"{x}", b"caf\xc3\xa9", &[b'a'; 65]] {
            assert!(check_name("n", bad).is_err());
        }
    }

    #[test]
    fn persisted_form_round_trips_and_is_bounded() {
        let words: Vec<Box<[u8]>> = ["minute", "SLIDE", "100", "60000"]
            .iter()
            .map(|w| w.as_bytes().into())
            .collect();
        let policies = [(&b"api"[..], &words[..])];
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
        assert_eq!(
            digest(words.iter().map(|w| &w[..])),
            digest(words.iter().map(|w| &w[..]))
        );
        assert_ne!(
            digest([&b"ab"[..], b"c"]),
            digest([&b"a"[..], b"bc"]),
            "the words' bounds are in the digest"
        );
    }
}
