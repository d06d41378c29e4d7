//! How a key holds a value (`rm::storage`): every kind is one allocation the key points to,
//! in the form the registry gives it (a box, a block, or 16 compact bytes with interned
//! parameters), which answers, changes, encodes and costs as the plain state does; and a
//! load of keys sharing parameters decodes them straight into the compact form, to the
//! values the general decoder makes.

use std::fmt::Debug;

use proptest::prelude::*;

use super::fixtures::*;
use crate::core::chunks::class_ceil;
use crate::core::gcra::{Gcra, Params, MAX_RATE_LIMIT, MAX_WINDOW_MS};
use crate::core::kind::{Compact, Kind};
use crate::core::limit::Limit;
use crate::core::{Instant, MAX_TIMESTAMP};
use crate::engine::call::Storable;
use crate::kinds::fixed::{self, FixedWindow};
use crate::kinds::leaky::Leaky;
use crate::kinds::slide::{SlidingLog, Window};
use crate::kinds::subwin::{self, SubWindow};
use crate::kinds::throttle::Throttle;
use crate::kinds::token::Token;
use crate::rm::storage::{Place, Shape, Stored, TestKey, VALUE_OBJECT};

#[test]
fn buckets_stay_small() {
    assert!(std::mem::size_of::<Gcra>() <= 32);
    assert!(std::mem::size_of::<FixedWindow>() <= 32);
    // The bucket kinds are their bucket.
    assert!(std::mem::size_of::<Token>() <= 32);
    assert!(std::mem::size_of::<Leaky>() <= 32);
    assert!(std::mem::size_of::<Throttle>() <= 32);
}

/// The committed encoding `bytes` of kind `K`, held by a key in `shape`: a refund through
/// the key reads back as it answered.
fn one_allocation<K: Storable>(bytes: &[u8], shape: Shape) {
    let state: K = decode_as(bytes).unwrap();
    let mut key = TestKey::new(state);
    assert_eq!(key.shape(), shape, "{}", K::COMMAND);
    if shape == Shape::Compact {
        // The object and module value, and 16 bytes.
        assert_eq!(key.mem_usage(), VALUE_OBJECT + 16);
    }
    let refund = key
        .change(|k: &mut K| Kind::refund(k, t(1000), 1))
        .unwrap()
        .unwrap();
    assert_eq!(key.kind_index(), Some(usize::from(K::INDEX)));
    let mut back = key.take::<K>().unwrap();
    assert_eq!(Kind::peek(&back, t(1000)), refund);
    assert_eq!(
        Kind::refund(&mut back, t(1000), 0).unwrap().remaining,
        refund.remaining
    );
}

#[test]
fn every_kind_is_one_allocation_the_key_points_to() {
    crate::install();
    let p = subwin::Params {
        limit: 10,
        window_ms: 1000,
        resolution_ms: 250,
    };
    let mut key = TestKey::new(SubWindow::new(&p));
    assert_eq!(key.shape(), Shape::Block);
    key.change(|w: &mut SubWindow| w.acquire(t(1000), &p, 3))
        .unwrap();
    // The object and module value, and the block in its size class.
    assert_eq!(key.mem_usage(), VALUE_OBJECT + class_ceil(20 + 4 * 5));
    assert_eq!(key.read(|w: &SubWindow| w.peek(t(1000)).remaining), Some(7));
    assert_eq!(key.take::<SubWindow>().unwrap().peek(t(1000)).remaining, 7);
    one_allocation::<FixedWindow>(FIXED_V1, Shape::Compact);
    one_allocation::<Token>(TOKEN_V1, Shape::Compact);
    one_allocation::<Leaky>(LEAKY_V1, Shape::Compact);
    one_allocation::<SubWindow>(SUBWIN_V1, Shape::Block);
    // Buckets cost their object and one 32-byte box.
    let token: Token = decode_as(TOKEN_V1).unwrap();
    assert_eq!(TestKey::boxed(token).mem_usage(), VALUE_OBJECT + 32);
}

#[test]
fn a_sliding_log_is_held_by_its_own_box() {
    crate::install();
    let mut key = TestKey::new(sample());
    let Place::Own(tag) = SlidingLog::PLACE else {
        panic!(
            "a sliding log has no box of its own: {:?}",
            SlidingLog::PLACE
        );
    };
    assert_eq!(key.shape(), Shape::Own(tag));
    let ws = [Window {
        limit: 10,
        window_ms: 1000,
    }];
    let allowed = key
        .change(|log: &mut SlidingLog| log.acquire(T0 + 302, &ws, 1).allowed)
        .unwrap();
    assert!(allowed);
    // A retention (the 60 s window, used before this call's 1 s) spills the log: its box,
    // the spilled box (windows and retention), one chunk and the chunks' index.
    assert_eq!(key.allocations(), 4);
    let log = key.take::<SlidingLog>().unwrap();
    assert_eq!(log.peek(T0 + 302).remaining, 4);
    assert_eq!(log.len(), 5);
    // A small log is its box alone: windows and records inside, 96 bytes.
    let mut small = SlidingLog::new(&ws);
    assert!(small.acquire(T0, &ws, 1).allowed);
    let key = TestKey::new(small.clone());
    assert_eq!(key.allocations(), 1);
    assert_eq!(key.mem_usage(), VALUE_OBJECT + 96);
    let loaded = TestKey::decode(&encode(&small)).unwrap();
    assert_eq!(loaded.allocations(), 1);
}

/// A bucket (token, leaky or `CL.THROTTLE`) with valid parameters and any state the
/// algorithm accepts.
fn bucket<K: Debug>(delays: bool, kind: fn(Gcra) -> K) -> impl Strategy<Value = K> {
    (
        1..=MAX_RATE_LIMIT,
        1..=MAX_WINDOW_MS,
        1..=MAX_RATE_LIMIT,
        0..=MAX_WINDOW_MS,
        (0..=MAX_TIMESTAMP.ms()).prop_map(Instant::from_ms),
        any::<u64>(),
    )
        .prop_map(
            move |(limit, window_ms, burst, max_delay_ms, latest, debt)| {
                let p = Params {
                    limit,
                    window_ms,
                    burst,
                    max_delay_ms: if delays { max_delay_ms } else { 0 },
                };
                kind(Gcra::from_parts(p, latest, debt).unwrap())
            },
        )
}

/// A fixed window with valid parameters, ending around `latest`, some too long before it
/// for the compact form.
fn fixed_window() -> impl Strategy<Value = FixedWindow> {
    (
        1..=fixed::MAX_LIMIT,
        1..=fixed::MAX_WINDOW_MS,
        any::<bool>(),
        (0..=MAX_TIMESTAMP.ms()).prop_map(Instant::from_ms),
        -(3 * fixed::MAX_WINDOW_MS as i64)..=(fixed::MAX_WINDOW_MS as i64),
        any::<u32>(),
    )
        .prop_map(|(limit, window_ms, align, latest, ahead, count)| {
            let p = fixed::Params {
                limit,
                window_ms,
                align,
            };
            let end = Instant::from_ms(latest.ms().saturating_add_signed(ahead));
            FixedWindow::from_parts(p, latest, end, u64::from(count)).unwrap()
        })
}

/// A state stored in a key reads back as it was, in its compact form whenever it fits one
/// (its box, of `boxed` bytes, otherwise), and `change` made through the key reads back as
/// the same change made to the plain state, whatever form it is written back in.
fn reads_back_as_it_was<K, R>(
    state: K,
    boxed: usize,
    change: impl Fn(&mut K) -> R,
) -> Result<(), TestCaseError>
where
    K: Storable + Compact,
    R: PartialEq + Debug,
{
    let fits = Compact::pack(&state).is_some();
    let mut key = TestKey::new(state.clone());
    prop_assert_eq!(key.shape() == Shape::Compact, fits);
    let plain = format!("{state:?}");
    prop_assert_eq!(key.read(|k: &K| format!("{k:?}")), Some(plain));
    prop_assert_eq!(key.read(|k: &K| encode(k)), Some(encode(&state)));
    let own = if fits { 16 } else { boxed };
    prop_assert_eq!(key.mem_usage(), VALUE_OBJECT + own);
    // RDB save, AOF rewrite and digest encode the stored form directly.
    prop_assert_eq!(key.encoding(), encode(&state));
    // New parameters (a new slot), or the same (the slot kept).
    let mut changed = state.clone();
    let plain = change(&mut changed);
    prop_assert_eq!(key.change(|k: &mut K| change(k)), Some(plain));
    prop_assert_eq!(key.encoding(), encode(&changed));
    let back = key.take::<K>().unwrap();
    prop_assert_eq!(format!("{back:?}"), format!("{changed:?}"));
    prop_assert_eq!(encode(&back), encode(&changed));
    Ok(())
}

/// Decoding straight to the compact form (a load of keys sharing parameters) gives the
/// value the general decoder gives, and refuses nothing it would take; damaged encodings
/// are either left to it or decode to the same state.
fn compact_decodes_as_decoding<K: Storable>(
    state: K,
    damages: &[Damage],
) -> Result<(), TestCaseError> {
    any_compact_decodes_as_decoding(&state, damages)
}

/// [`compact_decodes_as_decoding`], for a state of any kind.
fn any_compact_decodes_as_decoding(
    state: &dyn AnyState,
    damages: &[Damage],
) -> Result<(), TestCaseError> {
    // The state's parameters become the set interned last.
    let _keep = state.stored();
    let mut bytes = state.bytes();
    for d in damages {
        apply(&mut bytes, d);
    }
    let slow = decode_plain(&bytes);
    if let Some(fast) = decode_compact(&bytes) {
        prop_assert_eq!(fast.shape(), Shape::Compact);
        let Ok(slow) = &slow else {
            return Err(TestCaseError::fail("taken where decode refuses"));
        };
        prop_assert_eq!(
            read_any(&fast).map(|s| format!("{s:?}")),
            Some(format!("{slow:?}"))
        );
        prop_assert_eq!(fast.encoding(), slow.bytes());
    }
    match TestKey::decode(&bytes) {
        Ok(key) => {
            prop_assert_eq!(
                read_any(&key).map(|s| s.bytes()),
                slow.ok().map(|s| s.bytes())
            );
        }
        Err(e) => prop_assert_eq!(Err(e), slow.map(|_| ())),
    }
    Ok(())
}

proptest! {
    #[test]
    fn stored_states_read_back_as_they_were(
        token in bucket(false, Token),
        leaky in bucket(true, Leaky),
        throttle in bucket(false, Throttle),
        window in fixed_window(),
        dt in 0u64..200_000,
        cost in 0u64..5,
        limit in 1u64..1000,
        window_ms in 1u64..100_000,
    ) {
        crate::install();
        // A bucket's call: under its own parameters, or new ones.
        let call = |latest| {
            let now = latest + dt;
            move |g: &mut Gcra| {
                let p = Params { limit, window_ms, burst: limit, max_delay_ms: 0 };
                let p = if cost % 2 == 0 { g.params() } else { p };
                g.acquire(now, &p, cost)
            }
        };
        let on_token = call(Kind::latest_time(&token));
        reads_back_as_it_was(token, 32, |t: &mut Token| on_token(&mut t.0))?;
        let on_leaky = call(Kind::latest_time(&leaky));
        reads_back_as_it_was(leaky, 32, |t: &mut Leaky| on_leaky(&mut t.0))?;
        // Its box is behind its kind's index (the registry's own tags went to the others).
        let on_throttle = call(Kind::latest_time(&throttle));
        reads_back_as_it_was(throttle, 48, |t: &mut Throttle| on_throttle(&mut t.0))?;
        let now = Kind::latest_time(&window) + dt;
        reads_back_as_it_was(window, 32, |w: &mut FixedWindow| {
            let p = fixed::Params { limit, window_ms, align: cost == 3 };
            let p = if cost % 2 == 0 { w.params() } else { p };
            let d = w.acquire(now, &p, cost);
            // A refund long after: the window ended long before.
            let later = now + 40 * 86_400_000;
            (d, (cost == 4).then(|| w.refund(later, 1)))
        })?;
    }

    #[test]
    fn compact_decoding_is_decoding(
        token in bucket(false, Token),
        leaky in bucket(true, Leaky),
        throttle in bucket(false, Throttle),
        window in fixed_window(),
        damages in prop::collection::vec(damage(), 0..3),
    ) {
        crate::install();
        compact_decodes_as_decoding(token, &damages)?;
        compact_decodes_as_decoding(leaky, &damages)?;
        compact_decodes_as_decoding(throttle, &damages)?;
        compact_decodes_as_decoding(window, &damages)?;
    }

    /// Every kind's sample states (the registry's: a kind added there is in): a key holds
    /// each as it is, and decoding it, damaged or not, straight to the compact form gives
    /// what the general decoder gives.
    #[test]
    fn every_kinds_samples_are_held_and_decoded_alike(
        pick in any::<prop::sample::Index>(),
        damages in prop::collection::vec(damage(), 0..3),
    ) {
        crate::install();
        let samples = samples();
        let bytes = &samples[pick.index(samples.len())];
        let state = decode(bytes);
        prop_assert!(state.is_ok(), "{:?}: {:?}", bytes, state.as_ref().err());
        let Ok(state) = state else { return Ok(()) };
        prop_assert_eq!(&state.bytes(), bytes);
        prop_assert_eq!(&state.stored().encoding(), bytes);
        let plain = decode_plain(bytes).map(|s| s.bytes());
        prop_assert_eq!(plain.as_ref(), Ok(bytes));
        any_compact_decodes_as_decoding(state.as_ref(), &damages)?;
    }
}

/// The fast path is taken for a key whose parameters were interned just before (other
/// tests interning meanwhile may send a few to the general decoder).
#[test]
fn a_load_of_keys_sharing_parameters_decodes_them_straight() {
    crate::install();
    let mut hits = 0;
    for i in 0..100u64 {
        let g = Gcra::from_parts(
            Params {
                limit: 100,
                window_ms: 60_000 + i,
                burst: 100,
                max_delay_ms: 0,
            },
            T0 + i,
            i * 1000,
        )
        .unwrap();
        let state = Token(g);
        let _keep = TestKey::new(state.clone());
        if TestKey::decode_compact::<Token>(&encode(&state)).is_some() {
            hits += 1;
        }
    }
    assert!(hits > 50, "{hits}");
}
