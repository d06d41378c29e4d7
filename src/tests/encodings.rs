//! The persisted encodings, through the general decoder (`rm::storage::decode`, what an RDB
//! load and a `RESTORE` run): the committed encodings of every version read back, version 3
//! is canonical and keeps small states within 20 bytes, older versions decode to the states
//! their version 3 encodings do, and damaged encodings are refused or decode to sound
//! states.

use proptest::prelude::*;

use super::fixtures::*;
use crate::core::codec::put_varint;
use crate::core::gcra::{Gcra, Params};
use crate::core::kind::{Encoding, Kind};
use crate::core::limit::Limit;
use crate::core::{Instant, MAX_TIMESTAMP};
use crate::engine::call::Storable;
use crate::kinds::fixed::{self, FixedWindow};
use crate::kinds::leaky::Leaky;
use crate::kinds::lease::Leases;
use crate::kinds::slide::{SlidingLog, Window};
use crate::kinds::subwin::{self, SubWindow};
use crate::kinds::throttle::Throttle;
use crate::kinds::token::Token;
use crate::rm::storage::{Shape, TestKey, VALUE_OBJECT};

#[test]
fn reads_the_committed_version_1_buckets() {
    crate::install();
    let token: Token = decode_as(TOKEN_V1).unwrap();
    let p = Params {
        limit: 10,
        window_ms: 1000,
        burst: 5,
        max_delay_ms: 0,
    };
    let g = &token.0;
    assert_eq!((g.params(), g.latest(), g.debt()), (p, t(1000), 4500));
    assert_eq!(encode(&token), TOKEN_V3);
    let leaky = decode(LEAKY_V1).unwrap();
    assert_eq!(leaky.code(), Leaky::CODE);
    assert_eq!(leaky.bytes(), LEAKY_V3);
    // A token bucket never carries a delay.
    let mut bad = TOKEN_V1.to_vec();
    *bad.last_mut().unwrap() = 1;
    assert!(refused(&bad));
}

#[test]
fn reads_the_committed_version_1_fixed_window() {
    crate::install();
    let w: FixedWindow = decode_as(FIXED_V1).unwrap();
    assert_eq!((w.end(), w.count_at(t(1000))), (t(61_000), 3));
    assert!(w.params().align);
    assert_eq!(Kind::peek(&w, t(1000)).as_reply(), [1, 10, 7, 0, 60_000]);
    assert_eq!(encode(&w), FIXED_V3);
    let mut bad = FIXED_V1.to_vec();
    *bad.last_mut().unwrap() = 2;
    assert!(refused(&bad));
}

#[test]
fn reads_the_committed_version_1_sub_interval_window() {
    crate::install();
    let p = subwin::Params {
        limit: 10,
        window_ms: 1000,
        resolution_ms: 250,
    };
    let mut w = SubWindow::new(&p);
    w.acquire(t(300), &p, 2);
    w.acquire(t(1000), &p, 3);
    let loaded = decode(SUBWIN_V1).unwrap();
    assert_eq!(loaded.bytes(), SUBWIN_V3);
    assert_eq!(encode(&w), SUBWIN_V3);
    assert_eq!(loaded.peek(t(1000)).as_reply(), [1, 10, 5, 0, 1249]);
    // One counter too few, one too many, a shape that does not divide.
    for bad in [&SUBWIN_V1[..13], &[SUBWIN_V1, &[0]].concat()[..]] {
        assert!(refused(bad));
    }
    let mut bad = SUBWIN_V1.to_vec();
    bad[7] = 251;
    assert!(refused(&bad));
}

#[test]
fn reads_the_committed_version_2_retentions() {
    crate::install();
    const T: Instant = Instant::from_ms(4_102_444_800_000);
    let log: SlidingLog = decode_as(SLIDE_V2).unwrap();
    assert_eq!(log.retention(), [(10_000, T + 200)]);
    assert_eq!(log.records().count(), 4);
    assert_eq!(Kind::empty_time(&log), Some(T + 10_200));
    assert_eq!(encode(&log), SLIDE_V3_RETAINED);
    let long = [Window {
        limit: 3,
        window_ms: 10_000,
    }];
    let mut again = log.clone();
    let d = again.acquire(T + 1300, &long, 1);
    assert_eq!(d.as_reply(), [0, 3, 0, 8800, 9950]);

    let w: SubWindow = decode_as(SUBWIN_V2).unwrap();
    assert_eq!(w.retention(), [(10_000, t(999))]);
    assert_eq!(w.params().window_ms, 1000);
    assert_eq!(Kind::empty_time(&w), Some(t(10_999)));
    assert_eq!(encode(&w), SUBWIN_V3_RETAINED);
    assert_eq!(
        TestKey::new(w.clone()).mem_usage(),
        VALUE_OBJECT + crate::core::chunks::class_ceil(4 * (5 + 10 + 11))
    );
    let long = subwin::Params {
        limit: 3,
        window_ms: 10_000,
        resolution_ms: 1000,
    };
    assert!(!w.evaluate(t(2600), &long, 1).allowed);
}

#[test]
fn version_2_is_only_for_a_retention() {
    crate::install();
    // Kinds without a retention have no version 2.
    for v1 in [TOKEN_V1, LEAKY_V1, FIXED_V1] {
        let mut bytes = v1.to_vec();
        bytes[0] = 2;
        assert!(refused(&bytes), "{bytes:?}");
    }
    const T: Instant = Instant::from_ms(4_102_444_800_000);
    // Builds a payload with the retention `entries` (`None`: a count of 0).
    let with = |base: &[u8], head: usize, tail: usize, entries: Option<&[(u64, Instant)]>| {
        let mut bytes = base[..head].to_vec();
        let entries = entries.unwrap_or_default();
        put_varint(&mut bytes, entries.len() as u64);
        for &(w, last) in entries {
            put_varint(&mut bytes, w);
            put_varint(&mut bytes, last.ms());
        }
        bytes.extend_from_slice(&base[tail..]);
        bytes
    };
    let slide = |entries| with(SLIDE_V2, 12, 21, entries);
    let (one, two) = ([(10_000, T + 200)], [(5000, T + 200), (10_000, T + 100)]);
    assert_eq!(slide(Some(&one)), SLIDE_V2);
    assert!(decode(&slide(Some(&two))).is_ok());
    let bad: [Option<&[(u64, Instant)]>; 8] = [
        // No entry: version 1's to write.
        None,
        // As long as the current window.
        Some(&[(1000, T + 200)]),
        // Not a front: longer and as recent, or longer and more recent.
        Some(&[(5000, T + 200), (10_000, T + 200)]),
        Some(&[(5000, T + 100), (10_000, T + 200)]),
        // Too many.
        Some(&[(2000, T + 200), (3000, T + 150), (4000, T + 100), (5000, T)]),
        // Longer than 31 days, or used after the latest call.
        Some(&[(31 * 86_400_000 + 1, T)]),
        Some(&[(10_000, T + 1251)]),
        Some(&[(0, T)]),
    ];
    for entries in bad {
        assert!(refused(&slide(entries)), "{entries:?}");
    }
    // A ring: each entry at least the window; the counters follow the longest.
    let ring = |entries| with(SUBWIN_V2, 9, 14, entries);
    let (one, two) = ([(10_000, t(999))], [(1000, t(1999)), (10_000, t(999))]);
    assert_eq!(ring(Some(&one)), SUBWIN_V2);
    assert!(decode(&ring(Some(&two))).is_ok());
    let bad: [Option<&[(u64, Instant)]>; 5] = [
        None,
        Some(&[(500, t(999))]),
        Some(&[(20_000, t(999))]),
        Some(&[(10_000, t(999)), (5000, t(1999))]),
        Some(&[
            (2000, t(4999)),
            (3000, t(3999)),
            (4000, t(2999)),
            (10_000, t(999)),
        ]),
    ];
    for entries in bad {
        assert!(refused(&ring(entries)), "{entries:?}");
    }
}

#[test]
fn reads_the_committed_version_1_leases() {
    crate::install();
    let l: Leases = decode_as(LEASE_V1).unwrap();
    assert_eq!(
        l.leases(),
        [
            (T0 + 1000, 2, &b"a"[..]),
            (T0 + 30_000, 1, b"1700000000000-1")
        ]
    );
    assert_eq!(l.last_id(), (T0, 1));
    assert_eq!(Kind::peek(&l, T0 + 1000).as_reply(), [1, 5, 4, 0, 29_000]);
    assert_eq!(Kind::empty_time(&l), Some(T0 + 30_000));
    assert_eq!(encode(&l), LEASE_V1);
    // Held in a box of its own (behind its kind's index: the header costs it no larger
    // size class, so the registry gives the own tags to other kinds).
    let key = TestKey::new(l);
    assert_eq!(key.shape(), Shape::boxed::<Leases>());
    assert!(matches!(key.shape(), Shape::Own(_) | Shape::Header));
    let back = key.take::<Leases>().unwrap();
    assert_eq!(encode(&back), LEASE_V1);
    // Cut short, trailing bytes, a lease that has ended, version 2: refused.
    for bad in [
        &LEASE_V1[..LEASE_V1.len() - 1],
        &[LEASE_V1, &[0]].concat()[..],
    ] {
        assert!(refused(bad));
    }
    let mut ended = LEASE_V1.to_vec();
    ended[17] = 0;
    ended[18] = 0;
    assert!(refused(&ended));
    let mut v2 = LEASE_V1.to_vec();
    v2[0] = 2;
    assert!(refused(&v2));
}

#[test]
fn refuses_damaged_encodings() {
    crate::install();
    let good = encode(&sample());
    for cut in 0..good.len() {
        assert!(refused(&good[..cut]), "cut at {cut}");
    }
    let mut extra = good.clone();
    extra.push(0);
    assert!(refused(&extra));
    let mut version = good.clone();
    version[0] = 9;
    assert!(refused(&version));
}

/// Version 1 and 2 encodings and the version 3 encodings of the same states decode to
/// equal states, which answer alike.
#[test]
fn old_and_new_encodings_decode_to_equal_states() {
    crate::install();
    for (old, new) in [
        (SLIDE_V1, SLIDE_V3),
        (TOKEN_V1, TOKEN_V3),
        (LEAKY_V1, LEAKY_V3),
        (FIXED_V1, FIXED_V3),
        (SUBWIN_V1, SUBWIN_V3),
        (SLIDE_V2, SLIDE_V3_RETAINED),
        (SUBWIN_V2, SUBWIN_V3_RETAINED),
    ] {
        let (a, b) = (decode(old).unwrap(), decode(new).unwrap());
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{new:?}");
        assert_eq!((a.bytes(), b.bytes()), (new.to_vec(), new.to_vec()));
        let (ka, kb) = (TestKey::decode(old).unwrap(), TestKey::decode(new).unwrap());
        assert_eq!(ka.mem_usage(), kb.mem_usage());
        for t in [0, 1, 250, 999, 1000, 10_000, 100_000] {
            let now = a.latest() + t;
            assert_eq!(a.peek(now), b.peek(now), "{new:?} at +{t}");
            assert_eq!(a.empty_at(), b.empty_at());
        }
    }
}

/// Encodes within 20 bytes, and reads back to itself.
fn within_20_bytes<K: Storable>(state: K) {
    let bytes = encode(&state);
    assert!(bytes.len() <= 20, "{}: {bytes:?}", K::COMMAND);
    assert_eq!(decode(&bytes).unwrap().bytes(), bytes);
}

/// The small states of `make bench-memory` stay at most 20 bytes, below which Redis does
/// not try to compress a string it saves.
#[test]
fn version_3_keeps_small_states_within_20_bytes() {
    crate::install();
    const T: Instant = Instant::from_ms(4_102_444_800_000);
    let day = 86_400_000;
    let rate = Params {
        limit: 100,
        window_ms: day,
        burst: 100,
        max_delay_ms: 0,
    };
    let mut token = Gcra::new(&rate);
    token.acquire(T, &rate, 1);
    let leaky_p = Params {
        burst: 1,
        max_delay_ms: day,
        ..rate
    };
    let mut leaky = Gcra::new(&leaky_p);
    leaky.acquire(T, &leaky_p, 1);
    let fixed_p = fixed::Params {
        limit: 100,
        window_ms: day,
        align: false,
    };
    let mut fixed = FixedWindow::new(&fixed_p);
    fixed.acquire(T, &fixed_p, 1);
    let ws = [Window {
        limit: 100,
        window_ms: day,
    }];
    let mut log = SlidingLog::new(&ws);
    log.acquire(T, &ws, 1);
    let sub_p = subwin::Params {
        limit: 100,
        window_ms: 3_600_000,
        resolution_ms: 60_000,
    };
    let mut sub = SubWindow::new(&sub_p);
    sub.acquire(T, &sub_p, 1);
    within_20_bytes(Token(token.clone()));
    within_20_bytes(Leaky(leaky));
    within_20_bytes(fixed);
    within_20_bytes(log);
    within_20_bytes(sub);
    // A CL.THROTTLE bucket is a token bucket's.
    within_20_bytes(Throttle(token));
}

#[test]
fn version_3_is_canonical() {
    crate::install();
    // A fixed window that ended before its latest call.
    let past: FixedWindow = decode_as(FIXED_V3_PAST).unwrap();
    assert_eq!((Kind::latest_time(&past), past.end()), (t(2500), t(2000)));
    assert_eq!(encode(&past), FIXED_V3_PAST);
    // A leaky bucket's default delay is written 0, never as itself plus one.
    let leaky: Leaky = decode_as(LEAKY_V3_DEFAULT).unwrap();
    assert_eq!(leaky.0.params().max_delay_ms, 86_400_000);
    assert_eq!(encode(&leaky), LEAKY_V3_DEFAULT);
    assert_eq!(Kind::peek(&leaky, T0).as_reply(), [1, 101, 100, 0, 864_000]);
    let mut spelled = LEAKY_V3_DEFAULT[..18].to_vec();
    put_varint(&mut spelled, 86_400_001);
    assert!(refused(&spelled));
    // A token bucket has no delay field; leases have no version 3.
    assert!(refused(&[TOKEN_V3, &[0]].concat()));
    let mut lease = LEASE_V1.to_vec();
    lease[0] = 3;
    assert!(refused(&lease));
    // Sub-interval counters: non-zero, oldest first, within the ring and the epoch.
    let ring = |tail: &[u8]| [&SUBWIN_V3[..10], tail].concat();
    assert_eq!(ring(&[2, 3, 2, 2, 3]), SUBWIN_V3);
    assert!(decode(&ring(&[0])).is_ok());
    for bad in [
        &[2, 3, 2, 2, 0][..],
        &[2, 0, 2, 0, 3],
        &[2, 3, 2, 3, 3],
        &[1, 5, 1],
        &[2, 5, 2, 0, 3],
        &[1, 3, 2, 9],
    ] {
        assert!(refused(&ring(bad)), "{bad:?}");
    }
    // A counter before the epoch (latest 1000: sub-interval 4 is the newest).
    let mut early = ring(&[1, 4, 1]);
    assert!(decode(&early).is_ok());
    early[2] = 100;
    assert!(refused(&early));
    // A sliding log's oldest record cannot be before time 0.
    let mut log = SLIDE_V3[..18].to_vec();
    put_varint(&mut log, (T0 + 302).ms());
    log.extend_from_slice(&SLIDE_V3[20..]);
    assert!(refused(&log));
    let mut log = SLIDE_V3[..18].to_vec();
    put_varint(&mut log, 301);
    log.extend_from_slice(&SLIDE_V3[20..]);
    assert_eq!(log, SLIDE_V3);
}

#[test]
fn the_stack_encoding_is_the_encoding() {
    crate::install();
    let mut all = seeds();
    // The widest fields: ten-byte varints (a token, a leaky bucket whose delay is not its
    // window, a fixed window ending long before its latest call).
    for (version, code, fields) in [
        (
            Token::VERSION,
            Token::CODE,
            &[MAX_TIMESTAMP.ms(), u64::MAX, 1, 1, 1][..],
        ),
        (
            Leaky::VERSION,
            Leaky::CODE,
            &[MAX_TIMESTAMP.ms(), u64::MAX, 1, 2, 1, 1][..],
        ),
        (
            FixedWindow::VERSION,
            FixedWindow::CODE,
            &[MAX_TIMESTAMP.ms(), (1 << 45) - 1, 0, 1, 1, 0][..],
        ),
    ] {
        let mut wide = vec![version, code];
        fields.iter().for_each(|&v| put_varint(&mut wide, v));
        assert!(decode(&wide).is_ok(), "{wide:?}");
        all.push(wide);
    }
    // Longer than the stack buffer: 40 records, 30 non-zero counters.
    let ws = [Window {
        limit: 100,
        window_ms: 60_000,
    }];
    let mut log = SlidingLog::new(&ws);
    let q = subwin::Params {
        limit: 100,
        window_ms: 60_000,
        resolution_ms: 1000,
    };
    let mut ring = SubWindow::new(&q);
    for t in 0..40 {
        log.acquire(T0 + 7 * t, &ws, 1);
        ring.acquire(T0 + 1000 * (t % 30), &q, 1);
    }
    for big in [encode(&log), encode(&ring)] {
        assert!(big.len() > 64);
        all.push(big);
    }
    for bytes in all {
        let Ok(state) = decode(&bytes) else {
            continue;
        };
        let encoded = state.bytes();
        // Older versions are read, the kind's own is written (version 3; leases: 1).
        if bytes[0] == state.version() {
            assert_eq!(encoded, bytes);
        }
        assert_eq!(decode(&encoded).unwrap().bytes(), encoded);
        // What a key writes (RDB save, AOF rewrite, digest: on the stack when it fits).
        assert_eq!(state.stored().encoding(), encoded);
    }
    let g = Gcra::from_parts(
        Params {
            limit: 1,
            window_ms: 1,
            burst: 1,
            max_delay_ms: 0,
        },
        MAX_TIMESTAMP,
        u64::MAX,
    )
    .unwrap();
    let token = Token(g);
    assert_eq!(TestKey::new(token.clone()).encoding(), encode(&token));
}

// The decoder's fuzzer: damaged encodings of every kind. `make fuzz` runs it longer
// (PROPTEST_CASES).
proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
        crate::install();
        let _ = decode(&bytes);
    }

    #[test]
    fn fuzz_damaged_encodings_are_refused_or_sound(
        seed in 0usize..seeds().len(),
        damages in prop::collection::vec(damage(), 1..6),
        times in prop::collection::vec(0u64..5_000, 1..4),
    ) {
        crate::install();
        let mut bytes = seeds()[seed].clone();
        for d in &damages {
            apply(&mut bytes, d);
        }
        if let Ok(mut state) = decode(&bytes) {
            // Accepted: a canonical state that works like any other.
            let again = state.bytes();
            prop_assert_eq!(decode(&again).map(|s| s.bytes()), Ok(again));
            let base = state.latest();
            for t in times {
                let _ = state.peek(base + t).as_reply();
                let _ = state.refund(base + t, t % 3).map(|d| d.as_reply());
                let _ = state.empty_at();
                let _ = state.stored().mem_usage();
            }
        }
    }

    #[test]
    fn flipped_bytes_decode_to_a_valid_state_or_fail(pos in 0usize..31, bit in 0u8..8) {
        crate::install();
        let mut bytes = encode(&sample());
        let pos = pos % bytes.len();
        bytes[pos] ^= 1 << bit;
        if let Ok(state) = decode(&bytes) {
            // Whatever was accepted is a consistent log that encodes back to itself.
            prop_assert_eq!(decode(&state.bytes()).map(|s| s.bytes()), Ok(state.bytes()));
        }
    }
}
