//! What the tests of the encodings ([`super::encodings`]) and of how a key holds a value
//! ([`super::storage`]) share: the committed encodings of every version, a sample log, and
//! a kind-blind view of a decoded state, so that a test about any kind is written once.
//!
//! The kinds are the registry's ([`kinds`], from `crate::visit`): a test that does not know
//! an encoding's kind in advance (a fuzzer's damaged bytes) finds it there by its code, and
//! each kind's sample calls ([`samples`]) seed the fuzzers and the encoding tests.

use std::fmt::Debug;
use std::sync::OnceLock;

use proptest::prelude::*;

use crate::core::codec::{Malformed, Reader};
use crate::core::error::Error;
use crate::core::kind::{Change, Clock, Command, Kind, Mode};
use crate::core::limit::Limit;
use crate::core::sample::Sample;
use crate::core::{Decision, Duration, Instant};
use crate::engine::call::Storable;
use crate::engine::Visit;
use crate::kinds::slide::{SlidingLog, Window};
use crate::rm::storage::TestKey;

pub const T0: Instant = Instant::from_ms(1_700_000_000_000);

/// The instant `ms` milliseconds after the epoch.
pub fn t(ms: u64) -> Instant {
    Instant::from_ms(ms)
}

/// A log of 5 per second and 100 per minute, five calls in.
pub fn sample() -> SlidingLog {
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
    log
}

/// Written by encoding version 1 and committed: later versions must keep reading it
/// ([`sample`]'s log).
pub const SLIDE_V1: &[u8] = &[
    1, 1, 173, 210, 149, 255, 188, 49, 2, 5, 232, 7, 100, 224, 212, 3, 4, 128, 208, 149, 255, 188,
    49, 2, 7, 1, 165, 2, 1, 1, 1,
];

/// Version 1 buckets, committed: latest 1000, a debt of 4500 ticks.
pub const TOKEN_V1: &[u8] = &[1, 2, 232, 7, 148, 35, 10, 232, 7, 5, 0];
pub const LEAKY_V1: &[u8] = &[1, 3, 232, 7, 148, 35, 4, 232, 7, 1, 160, 6];

/// A version 1 fixed window, committed: latest 1000, ends at 61000, 3 of 10 used, ALIGN.
pub const FIXED_V1: &[u8] = &[1, 4, 232, 7, 200, 220, 3, 3, 10, 224, 212, 3, 1];

/// A version 1 sub-interval window, committed: 10 per 1000 ms in sub-intervals of 250,
/// latest 1000, with 2 units at 300 and 3 at 1000.
pub const SUBWIN_V1: &[u8] = &[1, 5, 232, 7, 10, 232, 7, 250, 1, 0, 2, 0, 0, 3];

/// Version 2, committed: RL.SLIDE 3 per 10 s at T, T+100, T+200 (T = 2100-01-01), then
/// 5 per 1 s at T+1250. The log keeps the records up to T+200 for the 10 s window (until
/// T+10200).
pub const SLIDE_V2: &[u8] = &[
    2, 1, 226, 185, 143, 230, 178, 119, 1, 5, 232, 7, 1, 144, 78, 200, 177, 143, 230, 178, 119, 4,
    128, 176, 143, 230, 178, 119, 1, 100, 1, 100, 1, 154, 8, 1,
];

/// Version 2, committed: RL.SUBWIN 3 per 10 s in sub-intervals of 1 s, 2 units at 0 and
/// 1 at 100, then 5 per 1 s at 2500. The ring keeps the 10 s for the units up to 999
/// (until 10999).
pub const SUBWIN_V2: &[u8] = &[
    2, 5, 196, 19, 5, 232, 7, 232, 7, 1, 144, 78, 231, 7, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 1,
];

/// Kind 6 (leases), version 1, committed: limit 5 at latest T (2023-11-14), the last id
/// made `T-1`; lease `a` of 2 units ends at T+1000, lease `T-1` of 1 at T+30000.
pub const LEASE_V1: &[u8] = &[
    1, 6, 128, 208, 149, 255, 188, 49, 5, 128, 208, 149, 255, 188, 49, 1, 2, 232, 7, 2, 1, 97, 200,
    226, 1, 1, 15, 49, 55, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48, 45, 49,
];

/// Version 3, committed: the states of the version 1 and 2 fixtures above, in the same
/// order ([`sample`] for the sliding log).
pub const SLIDE_V3: &[u8] = &[
    3, 1, 173, 210, 149, 255, 188, 49, 2, 5, 232, 7, 100, 224, 212, 3, 0, 4, 173, 2, 2, 7, 1, 165,
    2, 1, 1, 1,
];
pub const TOKEN_V3: &[u8] = &[3, 2, 232, 7, 148, 35, 10, 232, 7, 5];
pub const LEAKY_V3: &[u8] = &[3, 3, 232, 7, 148, 35, 4, 232, 7, 1, 161, 6];
pub const FIXED_V3: &[u8] = &[3, 4, 232, 7, 192, 169, 7, 3, 10, 224, 212, 3, 1];
pub const SUBWIN_V3: &[u8] = &[3, 5, 232, 7, 10, 232, 7, 250, 1, 0, 2, 3, 2, 2, 3];
pub const SLIDE_V3_RETAINED: &[u8] = &[
    3, 1, 226, 185, 143, 230, 178, 119, 1, 5, 232, 7, 1, 144, 78, 200, 177, 143, 230, 178, 119, 4,
    226, 9, 1, 100, 1, 100, 1, 154, 8, 1,
];
pub const SUBWIN_V3_RETAINED: &[u8] = &[
    3, 5, 196, 19, 5, 232, 7, 232, 7, 1, 144, 78, 231, 7, 2, 2, 3, 1, 1,
];
/// Version 3, committed: `RL.FIXED 10 1000` at 1000 (3 used), last seen at 2500: the
/// window ended 500 ms before, so `end - latest` is -500 (written 999).
pub const FIXED_V3_PAST: &[u8] = &[3, 4, 196, 19, 231, 7, 0, 10, 232, 7, 0];
/// Version 3, committed: `RL.LEAKY 100 86400000` (MAXDELAY its window: written 0) at
/// T0, one unit booked.
pub const LEAKY_V3_DEFAULT: &[u8] = &[
    3, 3, 128, 208, 149, 255, 188, 49, 128, 184, 153, 41, 100, 128, 184, 153, 41, 1, 0,
];

/// One encoding of every kind and version, for the fuzzers to damage: the committed ones,
/// and every kind's [`samples`].
pub fn seeds() -> Vec<Vec<u8>> {
    let committed = [
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
    ];
    committed.into_iter().chain(samples()).collect()
}

/// The encodings of the states every kind's sample calls build ([`Sample`]), run by its
/// command one after another on one key.
pub fn samples() -> Vec<Vec<u8>> {
    kinds().iter().flat_map(|k| (k.samples)()).collect()
}

/// The states of kind `K` its command `C` leaves after each change, over runs of its
/// sample calls on one key: two runs under parameters that stay, one under parameters
/// that change on every call.
pub fn sample_states<K, C>() -> Vec<K>
where
    K: Storable + Sample,
    C: Command<Kind = K>,
{
    let mut out = Vec::new();
    for run in 0u8..3 {
        let mut held: Option<K> = None;
        for i in 0u8..12 {
            let p = match run {
                2 => [i, i / 2, i % 6, i / 3],
                _ => [run, run + 1, i % 6, run],
            };
            let now = T0 + u64::from(i) * 300;
            let line = K::sample_words(p, now);
            let words: Vec<&[u8]> = line.split(' ').skip(1).map(str::as_bytes).collect();
            let Ok(call) = C::parse(&words, false) else {
                continue;
            };
            let clock = Clock {
                caller: now,
                lag: Duration::ZERO,
                decided: false,
                server: now,
            };
            match C::run(held.as_mut(), &call, clock, Mode::Decide).map(|r| r.change) {
                Ok(Change::New { state: new, .. }) => held = Some(new),
                Ok(Change::Held { .. }) => {}
                _ => continue,
            }
            out.extend(held.clone());
        }
    }
    out
}

/// The canonical encoding of `state`: its version and kind bytes, then its own.
pub fn encode<K: Kind>(state: &K) -> Vec<u8> {
    let mut out = vec![K::VERSION, K::CODE];
    state.encode(&mut out);
    out
}

/// A decoded state, whatever its kind.
pub trait AnyState: Debug {
    /// Its kind's byte.
    fn code(&self) -> u8;
    /// The version its kind writes.
    fn version(&self) -> u8;
    /// Its canonical encoding ([`encode`]).
    fn bytes(&self) -> Vec<u8>;
    fn latest(&self) -> Instant;
    fn empty_at(&self) -> Option<Instant>;
    fn peek(&self, now: Instant) -> Decision;
    fn refund(&mut self, now: Instant, units: u64) -> Result<Decision, Error>;
    /// A key holding a copy of it.
    fn stored(&self) -> TestKey;
}

impl<K: Storable> AnyState for K {
    fn code(&self) -> u8 {
        K::CODE
    }
    fn version(&self) -> u8 {
        K::VERSION
    }
    fn bytes(&self) -> Vec<u8> {
        encode(self)
    }
    fn latest(&self) -> Instant {
        Kind::latest_time(self)
    }
    fn empty_at(&self) -> Option<Instant> {
        Kind::empty_time(self)
    }
    fn peek(&self, now: Instant) -> Decision {
        Kind::peek(self, now)
    }
    fn refund(&mut self, now: Instant, units: u64) -> Result<Decision, Error> {
        Kind::refund(self, now, units)
    }
    fn stored(&self) -> TestKey {
        TestKey::new(self.clone())
    }
}

/// A state decoded, whatever its kind.
pub type Decoded = Result<Box<dyn AnyState>, Malformed>;

/// What a test does with a kind it does not know in advance.
pub struct Entry {
    code: u8,
    /// The kind's own decoder alone, after the version and kind bytes.
    plain: fn(u8, &[u8]) -> Decoded,
    /// The state a key holds, if of this kind.
    read: fn(&TestKey) -> Option<Box<dyn AnyState>>,
    /// The compact form's fast path alone, for an encoding of this kind.
    compact: fn(&[u8]) -> Option<TestKey>,
    /// Encodings of the states its sample calls build ([`sample_states`]).
    samples: fn() -> Vec<Vec<u8>>,
}

fn entry<K: Storable + Sample, C: Command<Kind = K>>() -> Entry {
    fn plain<K: Storable>(version: u8, rest: &[u8]) -> Decoded {
        let mut r = Reader::new(rest);
        let state = K::decode(version, &mut r)?;
        r.finish()?;
        Ok(Box::new(state))
    }
    fn read<K: Storable>(key: &TestKey) -> Option<Box<dyn AnyState>> {
        key.read(|state: &K| Box::new(state.clone()) as Box<dyn AnyState>)
    }
    fn samples<K: Storable + Sample, C: Command<Kind = K>>() -> Vec<Vec<u8>> {
        sample_states::<K, C>().iter().map(encode).collect()
    }
    Entry {
        code: K::CODE,
        plain: plain::<K>,
        read: read::<K>,
        compact: TestKey::decode_compact::<K>,
        samples: samples::<K, C>,
    }
}

/// The registry's kinds, in its order.
pub fn kinds() -> &'static [Entry] {
    struct Kinds(Vec<Entry>);
    impl Visit for Kinds {
        fn kind<K, C>(&mut self)
        where
            K: Storable + Sample,
            C: Command<Kind = K>,
        {
            self.0.push(entry::<K, C>());
        }
    }
    static KINDS: OnceLock<Vec<Entry>> = OnceLock::new();
    KINDS.get_or_init(|| {
        let mut kinds = Kinds(Vec::new());
        crate::visit(&mut kinds);
        kinds.0
    })
}

/// The state a key holds, whatever its kind.
pub fn read_any(key: &TestKey) -> Option<Box<dyn AnyState>> {
    kinds().iter().find_map(|k| (k.read)(key))
}

/// Decodes `bytes` as a load does: the general decoder (`rm::storage::decode`) makes a
/// key's value, whose state is read back.
pub fn decode(bytes: &[u8]) -> Decoded {
    let key = TestKey::decode(bytes)?;
    Ok(read_any(&key).expect("a key holds a state of a registered kind"))
}

/// [`decode`], for an encoding of kind `K`; panics on another kind.
pub fn decode_as<K: Storable>(bytes: &[u8]) -> Result<K, Malformed> {
    let key = TestKey::decode(bytes)?;
    Ok(key
        .take::<K>()
        .unwrap_or_else(|| panic!("not a {} state: {bytes:?}", K::COMMAND)))
}

/// Whether the general decoder refuses `bytes`.
pub fn refused(bytes: &[u8]) -> bool {
    TestKey::decode(bytes).is_err()
}

/// The naive twin of the general decoder: the kind's own decoder by its code, without the
/// storage (no compact fast path), refusing what the general decoder refuses with the same
/// reasons.
pub fn decode_plain(bytes: &[u8]) -> Decoded {
    let (&[version, code], rest) = bytes
        .split_first_chunk::<2>()
        .ok_or(Malformed("truncated"))?;
    if !(1..=3).contains(&version) {
        return Err(Malformed("unknown encoding version"));
    }
    match kinds().iter().find(|k| k.code == code) {
        Some(k) => (k.plain)(version, rest),
        None if version == 1 => Err(Malformed("unknown limiter kind")),
        None => Err(Malformed("no such version for this kind")),
    }
}

/// What the compact form's fast path alone makes of `bytes` (`None`: left to the general
/// decoder), whatever their kind.
pub fn decode_compact(bytes: &[u8]) -> Option<TestKey> {
    kinds().iter().find_map(|k| (k.compact)(bytes))
}

/// One damage: flip a bit, overwrite, insert or delete a byte, or cut the tail.
#[derive(Clone, Debug)]
pub enum Damage {
    Flip(usize, u8),
    Set(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Cut(usize),
}

pub fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(p, b)| Damage::Flip(p, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(p, v)| Damage::Set(p, v)),
        (any::<usize>(), any::<u8>()).prop_map(|(p, v)| Damage::Insert(p, v)),
        any::<usize>().prop_map(Damage::Delete),
        any::<usize>().prop_map(Damage::Cut),
    ]
}

pub fn apply(bytes: &mut Vec<u8>, d: &Damage) {
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
