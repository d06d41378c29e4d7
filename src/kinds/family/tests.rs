use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const T0: Instant = Instant::from_ms(1_700_000_000_000);
const SLIDE: u8 = 1;
const TOKEN: u8 = 2;
const FIXED: u8 = 4;

fn layout(names: &[(&str, u8)]) -> Box<[Limiter]> {
    names
        .iter()
        .map(|(n, code)| Limiter {
            code: *code,
            name: n.as_bytes().into(),
        })
        .collect()
}

/// A token bucket's packed state that its kind holds: `limit` tokens a second, `debt`
/// below the window.
fn token(limit: u64, latest: Instant, debt: u64) -> Packed {
    let g = crate::core::gcra::Gcra::with_state(
        &crate::core::gcra::Params {
            limit,
            window_ms: 1000,
            burst: limit,
            max_delay_ms: 0,
        },
        latest,
        debt.min(999),
    );
    crate::core::gcra::encoding::pack(&g).unwrap()
}

/// A sliding log's state as a family holds it (its encoding, its version first): `n`
/// requests of one unit each, a millisecond apart, until `latest`, `limit` a second.
fn slide(limit: u64, latest: Instant, n: u64) -> Held {
    use crate::core::limit::Limit;
    use crate::kinds::slide::{SlidingLog, Window};
    let windows = [Window {
        limit: limit.max(n),
        window_ms: 1000,
    }];
    let mut log = SlidingLog::new(&windows);
    for k in (0..n).rev() {
        assert!(log.record(latest - k, &windows, 1));
    }
    let mut bytes = Log::new();
    bytes.push(SlidingLog::VERSION);
    log.encode(&mut bytes);
    Held::Encoded(bytes)
}

fn encode(s: &Subjects) -> Vec<u8> {
    let mut out = Vec::new();
    s.encode(&mut out);
    out
}

#[derive(Clone, Debug)]
enum Op {
    Put(u8, u8, u8, u16, u32),
    Forget(u8),
    Sweep(u32, u8),
    Relayout(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..60, 1u8..4, 0u8..4, any::<u16>(), 0u32..100_000)
            .prop_map(|(s, l, m, d, t)| Op::Put(s, l, m, d, t)),
        2 => (0u8..60).prop_map(Op::Forget),
        2 => (0u32..100_000, any::<u8>()).prop_map(|(t, b)| Op::Sweep(t, b)),
        1 => (0u8..6).prop_map(Op::Relayout),
    ]
}

const LAYOUTS: [&[(&str, u8)]; 6] = [
    &[("a", TOKEN)],
    &[("a", TOKEN), ("b", TOKEN)],
    &[("b", TOKEN), ("c", FIXED)],
    &[("b", TOKEN), ("a", TOKEN)],
    &[("s", SLIDE), ("a", TOKEN)],
    &[("s", SLIDE)],
];

proptest! {
    /// Any mix of puts, forgets, sweeps and layout changes: the family reads back from its
    /// encoding as it is (the same bytes again), and a replica applying each change as
    /// its effect holds the same.
    #[test]
    fn a_family_reads_back_and_replicates_as_it_is(ops in prop::collection::vec(op(), 1..300)) {
        crate::install();
        let mut s = Subjects::new(layout(LAYOUTS[0])).unwrap();
        let mut replica = s.clone();
        let mut model: BTreeMap<Vec<u8>, Vec<Option<Held>>> = BTreeMap::new();
        for op in ops {
            // Its time amid the subjects' empty times: each before it written with its
            // seconds (op 2), each after it as seconds after it (op 5).
            let mut effect = EffectWriter::new(&[], T0 + 50_000);
            match op {
                Op::Put(n, limit, mask, debt, t) => {
                    let subject = format!("subject:{n:04}").into_bytes();
                    let at = T0 + u64::from(t);
                    let width = s.layout().len();
                    let states: Vec<Option<Held>> = (0..width)
                        .map(|i| match (mask >> i & 1 == 1 || i + 1 == width, s.layout()[i].code) {
                            (true, TOKEN) => Some(Held::Packed(token(u64::from(limit), at, u64::from(debt)))),
                            // Logs of 1 to 40 requests: entries that grow and shrink.
                            (true, SLIDE) => Some(slide(u64::from(limit), at, 1 + u64::from(debt % 40))),
                            _ => None,
                        })
                        .collect();
                    if states.iter().all(Option::is_none) {
                        continue;
                    }
                    let params: Vec<Params2> = states
                        .iter()
                        .map(|s| s.as_ref().map_or(Params2::default(), Held::params))
                        .collect();
                    let place = s.locate(&subject);
                    let sized = s.variable();
                    if let Some((entry, kept)) = s.update(place, &states, at + 1000) {
                        let entry = entry.to_vec();
                        effect.put_entry(&subject, kept, (&entry, sized), None);
                    } else {
                        let set = s.set_for(&params).unwrap();
                        let put = s.put_at(place, &subject, set, &states, at + 1000).unwrap();
                        effect.put_entry(&subject, put.empty_at, (put.as_bytes(), sized), put.new_set.then_some(&params[..]));
                    }
                    model.insert(subject, states);
                }
                Op::Forget(n) => {
                    let subject = format!("subject:{n:04}").into_bytes();
                    prop_assert_eq!(s.forget(&subject), model.remove(&subject).is_some());
                    effect.forget(&subject);
                }
                Op::Sweep(t, budget) => {
                    s.sweep_slots(T0 + u64::from(t), usize::from(budget), |gone| {
                        model.remove(gone);
                        effect.forget(gone);
                    });
                }
                Op::Relayout(l) => {
                    let new = layout(LAYOUTS[usize::from(l)]);
                    effect.layout(&new);
                    if *s.layout() != *new {
                        s = s.relayout(new).unwrap();
                    }
                    model.clear();
                    for e in s.0.family.entries() {
                        let mut out: [Option<Held>; MAX_LIMITERS] = Default::default();
                        s.unpack(e.state, &mut out).unwrap();
                        model.insert(e.subject.to_vec(), out[..s.layout().len()].to_vec());
                    }
                }
            }
            // The replica: the effect's bytes, checked, then applied.
            // An effect of no operation is empty (not replicated).
            let mut r = Reader::new(effect.as_bytes());
            if !effect.is_empty() {
                r.bytes(8).unwrap();
            }
            let ops = r.rest();
            let now_s = Family::seconds(T0 + 50_000);
            check(Some(&replica), ops, now_s).unwrap();
            if apply(Some(&mut replica), ops, now_s).is_err() {
                prop_assert!(false, "the replica refused {:?}", ops);
            }
            prop_assert_eq!(encode(&replica), encode(&s));
            prop_assert_eq!(s.len(), model.len());
            if !s.is_empty() {
                let bytes = encode(&s);
                let mut r = Reader::new(&bytes);
                let back = Subjects::decode(1, &mut r);
                prop_assert!(r.rest().is_empty());
                prop_assert_eq!(back.as_ref().map(encode), Ok(bytes.clone()));
                prop_assert_eq!(back.as_ref().ok(), Some(&s));
            }
        }
        for (subject, states) in &model {
            let mut out: [Option<Held>; MAX_LIMITERS] = Default::default();
            prop_assert!(s.read(subject, &mut out).is_some());
            prop_assert_eq!(&out[..states.len()], &states[..]);
        }
    }
}

#[test]
fn decoding_refuses_what_no_command_makes() {
    crate::install();
    let mut s = Subjects::new(layout(&[("a", TOKEN), ("b", TOKEN)])).unwrap();
    let states = [Some(Held::Packed(token(3, T0, 10))), None];
    let set = s.set_for(&[token(3, T0, 10).0, Params2::default()]).unwrap();
    s.put(b"x", set, &states, T0 + 1000).unwrap();
    refuses_every_damage(&encode(&s));
    // A family of logs too.
    let mut s = Subjects::new(layout(&[("s", SLIDE), ("a", TOKEN)])).unwrap();
    let states = [Some(slide(10, T0, 3)), None];
    let set = s.set_for(&[Params2::default(), Params2::default()]).unwrap();
    s.put(b"x", set, &states, T0 + 1000).unwrap();
    s.put(b"y", set, &[Some(slide(10, T0, 1)), None], T0 + 1000).unwrap();
    refuses_every_damage(&encode(&s));
}

/// Each byte of `good` changed, or the encoding cut: refused, or a family that encodes as
/// read.
fn refuses_every_damage(good: &[u8]) {
    assert!(Subjects::decode(1, &mut Reader::new(good)).is_ok());
    for i in 0..good.len() {
        for delta in [1u8, 0x80] {
            let mut bad = good.to_vec();
            bad[i] = bad[i].wrapping_add(delta);
            let mut r = Reader::new(&bad);
            if let (Ok(back), true) = (Subjects::decode(1, &mut r), r.rest().is_empty()) {
                assert_eq!(encode(&back), bad, "byte {i}");
            }
        }
        assert!(Subjects::decode(1, &mut Reader::new(&good[..i])).is_err(), "cut at {i}");
    }
}

#[test]
fn a_full_family_refuses_new_subjects_only() {
    crate::install();
    let mut s = Subjects::new(layout(&[("a", TOKEN)])).unwrap();
    let st = [Some(Held::Packed(token(3, T0, 0)))];
    let set = s.set_for(&[token(3, T0, 0).0]).unwrap();
    for n in 0..MAX_SUBJECTS {
        s.put(format!("{n}").as_bytes(), set, &st, T0).unwrap();
    }
    assert_eq!(s.put(b"one more", set, &st, T0).err(), Some(Refused::Full));
    assert!(s.put(b"7", set, &st, T0 + 5).is_ok());
}

#[test]
fn a_family_value_takes_no_storage_tag_from_another_kind() {
    // With the header a box of it takes (8 bytes), it stays in its size class (152 + 8 =
    // 160): the registry's own tags go to the kinds a header would grow (`rm::storage`).
    let size = std::mem::size_of::<Subjects>();
    assert_eq!(
        crate::core::chunks::class_ceil(size + 8),
        crate::core::chunks::class_ceil(size),
        "{size}"
    );
}

#[test]
fn a_log_within_its_room_is_written_in_place() {
    crate::install();
    let mut s = Subjects::new(layout(&[("s", SLIDE)])).unwrap();
    let one = [Some(slide(5, T0, 1))];
    let set = s.set_for(&[Params2::default()]).unwrap();
    s.put(b"x", set, &one, T0 + 1000).unwrap();
    let before = encode(&s);
    // A log one record longer (the one request a millisecond later) takes the same room:
    // written in place, its empty time the later one; the family as a put makes it.
    let two = [Some(slide(5, T0 + 1, 2))];
    let place = s.locate(b"x");
    let (_, kept) = s.update(place, &two, T0 + 5000).unwrap();
    assert_eq!(kept, Instant::from_ms((T0 + 5000).ms().div_ceil(1000) * 1000));
    let mut put = Subjects::new(layout(&[("s", SLIDE)])).unwrap();
    put.put(b"x", set, &two, T0 + 5000).unwrap();
    assert_eq!(encode(&s), encode(&put));
    assert_ne!(encode(&s), before);
    let mut out = [None];
    assert_eq!(s.read(b"x", &mut out), Some(kept));
    assert_eq!(out, two);
    // One of another room is not: the put moves it.
    let long = [Some(slide(40, T0 + 40, 40))];
    assert!(s.update(place, &long, T0 + 5000).is_none());
    assert_eq!(s.read(b"x", &mut out), Some(kept));
    assert_eq!(out, two);
}
