//! Chunked logs against naive vectors, and the allocator's size classes.

use super::*;
use proptest::prelude::*;

#[test]
fn size_classes() {
    let classes = [
        8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896,
        1024, 1280, 4096, 5120, 6144, 7168, 8192, 65536, 81920,
    ];
    for c in classes {
        assert_eq!(class_ceil(c), c);
        assert_eq!(class_floor(c), c);
    }
    assert_eq!(class_ceil(1), 8);
    assert_eq!(class_ceil(9), 16);
    assert_eq!(class_ceil(17), 32);
    assert_eq!(class_ceil(129), 160);
    assert_eq!(class_ceil(1025), 1280);
    assert_eq!(class_floor(15), 8);
    assert_eq!(class_floor(127), 112);
    assert_eq!(class_floor(159), 128);
    assert_eq!(class_floor(1279), 1024);
    assert_eq!(class_floor(65535), 57344);
}

/// A value as large as 16 of the sliding log's entries, so that tests cross many chunk
/// boundaries with few values: the first buffer holds 64, chunks 4 to 512.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Wide(u64, [u64; 15]);

fn wide(v: u64) -> Wide {
    Wide(v, [0; 15])
}

#[derive(Clone, Debug)]
enum Op {
    Push(u64),
    PushMany(u16),
    Extend(u16),
    Reserve(u16),
    DropFront(usize),
    Truncate(usize),
    Set(usize, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u64>().prop_map(Op::Push),
        2 => (1u16..3000).prop_map(Op::PushMany),
        2 => (0u16..3000).prop_map(Op::Extend),
        1 => (0u16..3000).prop_map(Op::Reserve),
        2 => (0usize..2000).prop_map(Op::DropFront),
        1 => (0usize..3000).prop_map(Op::Truncate),
        1 => (any::<usize>(), any::<u64>()).prop_map(|(i, v)| Op::Set(i, v)),
    ]
}

fn check(c: &Chunks<Wide>, model: &[u64]) {
    assert_eq!(c.len(), model.len());
    let got: Vec<u64> = c.iter().map(|w| w.0).collect();
    assert_eq!(got, model);
    for (i, v) in model.iter().enumerate().step_by(7) {
        assert_eq!(c.get(i).map(|w| w.0), Some(*v));
    }
    assert_eq!(c.get(model.len()), None);
    assert_eq!(c.first().map(|w| w.0), model.first().copied());
    assert_eq!(c.last().map(|w| w.0), model.last().copied());
    check_shape(c);
}

/// The index's shape, the heap size and the chunks' positions.
fn check_shape<T: Copy + Default + Send + 'static>(c: &Chunks<T>) {
    // The heap size is the sum of what the chunks and the index hold.
    let slots: usize = c.index.iter().map(|k| k.slots.len()).sum();
    let bytes = |n: usize| if n > 0 { class_ceil(n) } else { 0 };
    let d = std::mem::size_of::<Chunk<T>>();
    let mut index = bytes(c.index.front.capacity() * d);
    if let Some(more) = &c.index.more {
        index += bytes(32) + bytes(more.capacity() * 32);
        index += more.iter().map(|b| bytes(b.capacity() * d)).sum::<usize>();
        // Every block of `more` but the last is full.
        for b in more.iter().rev().skip(1) {
            assert_eq!((b.len(), b.capacity()), (BLOCK, BLOCK));
        }
    }
    assert_eq!(c.heap_size(), slots * std::mem::size_of::<T>() + index);
    assert_eq!(c.index.iter().count(), c.index.len());
    // Chunks are contiguous and hold the values.
    for pair in c.index.iter().collect::<Vec<_>>().windows(2) {
        assert_eq!(pair[0].end(), pair[1].start);
    }
    if !c.is_empty() {
        assert!(c.index.first().unwrap().start <= c.head);
        assert!(c.tail() <= c.end());
    }
}

proptest! {
    #[test]
    fn matches_a_vec(ops in prop::collection::vec(op(), 1..60)) {
        let mut c: Chunks<Wide> = Chunks::new();
        let mut model: Vec<u64> = Vec::new();
        let mut next = 0u64;
        for op in ops {
            match op {
                Op::Push(v) => {
                    c.push_back(wide(v));
                    model.push(v);
                }
                Op::PushMany(n) => {
                    for _ in 0..n {
                        next += 1;
                        c.push_back(wide(next));
                        model.push(next);
                    }
                }
                Op::Extend(n) => {
                    let values: Vec<Wide> = (0..n).map(|k| wide(next + 1 + u64::from(k))).collect();
                    next += u64::from(n);
                    c.extend_from_slice(&values);
                    model.extend(values.iter().map(|w| w.0));
                }
                Op::Reserve(n) => c.reserve(usize::from(n)),
                Op::DropFront(n) => {
                    c.drop_front(n);
                    model.drain(..n.min(model.len()));
                }
                Op::Truncate(n) => {
                    c.truncate(n);
                    model.truncate(n);
                }
                Op::Set(i, v) => {
                    if model.is_empty() {
                        prop_assert!(c.get_mut(i).is_none());
                    } else {
                        let i = i % model.len();
                        c.get_mut(i).unwrap().0 = v;
                        model[i] = v;
                    }
                }
            }
            check(&c, &model);
        }
        // Sorted contents: partition_point agrees with the slice's at every cut.
        let mut sorted: Chunks<Wide> = Chunks::new();
        let values: Vec<u64> = (0..model.len() as u64).map(|v| v * 3).collect();
        for v in &values {
            sorted.push_back(wide(*v));
        }
        sorted.drop_front(values.len() / 3);
        let kept = &values[values.len() / 3..];
        for x in [0, 1, 2, 3, 3 * kept.len() as u64, u64::MAX]
            .into_iter()
            .chain(kept.iter().step_by(5).copied())
            .chain(kept.iter().step_by(5).map(|v| v + 1))
        {
            let want = kept.partition_point(|v| *v < x);
            prop_assert_eq!(sorted.partition_point(|w| w.0 < x), want);
            prop_assert_eq!(sorted.leading(|w| w.0 < x), want);
        }
        let copy = c.clone();
        check(&copy, &model);
        prop_assert!(copy.pending() == 0);
    }

    #[test]
    fn partition_point_matches_a_slice(
        n in 0usize..5000,
        dropped in 0usize..5000,
        probes in prop::collection::vec(any::<u64>(), 1..20),
    ) {
        let values: Vec<u64> = (0..n as u64).map(|v| v * 2 + 1).collect();
        let mut c: Chunks<Wide> = values.iter().map(|v| wide(*v)).collect();
        c.drop_front(dropped);
        let kept = &values[dropped.min(n)..];
        for x in probes.into_iter().map(|p| p % (2 * n as u64 + 3)) {
            let want = kept.partition_point(|v| *v < x);
            prop_assert_eq!(c.partition_point(|w| w.0 < x), want);
            prop_assert_eq!(c.leading(|w| w.0 < x), want);
        }
    }

    /// Handing the unused chunks off at once leaves the values, the index's shape and the
    /// sizes as freeing them one by one would, and the deque grows again from there.
    #[test]
    fn handing_unused_chunks_off_keeps_the_values(
        n in 0usize..80_000,
        dropped in 0usize..80_000,
        kept in 0usize..80_000,
    ) {
        // Up to about 900 chunks: an index of two blocks.
        let mut c: Chunks<Wide> = (0..n as u64).map(wide).collect();
        let mut model: Vec<u64> = (0..n as u64).collect();
        c.drop_front(dropped);
        model.drain(..dropped.min(n));
        c.truncate(kept);
        model.truncate(kept);
        let (pending, allocations) = (c.pending(), c.allocations());
        let handed = handed_off(|| c.reclaim_with(Some(count_hand_off)));
        if pending > FREES_PER_CALL {
            prop_assert_eq!(handed, 1);
            prop_assert_eq!(c.pending(), 0);
            prop_assert!(c.allocations() <= allocations - pending);
        } else {
            prop_assert_eq!(handed, 0, "a few chunks are freed in the call");
        }
        check(&c, &model);
        for v in 0..500 {
            c.push_back(wide(1_000_000 + v));
            model.push(1_000_000 + v);
        }
        check(&c, &model);
    }
}

thread_local! {
    /// Hand-offs made by [`count_hand_off`] on this thread.
    static HANDED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A hand-off that frees what it is given here, and counts.
fn count_hand_off(unused: Box<dyn Send>) {
    drop(unused);
    HANDED.with(|h| h.set(h.get() + 1));
}

/// The hand-offs `f` made through [`count_hand_off`].
fn handed_off(f: impl FnOnce()) -> usize {
    let before = HANDED.with(std::cell::Cell::get);
    f();
    HANDED.with(std::cell::Cell::get) - before
}

/// Chunk memory over the values' own size, right after each growth step.
fn worst_growth_overhead(n: usize) -> f64 {
    let mut c: Chunks<u64> = Chunks::new();
    let mut worst: f64 = 0.0;
    let mut before = 0;
    for i in 0..n as u64 {
        c.push_back(i);
        let size = c.heap_size();
        if size != before && c.len() * 8 > FIRST_MAX_BYTES {
            worst = worst.max(size as f64 / (c.len() * 8) as f64);
        }
        before = size;
    }
    worst
}

#[test]
fn growth_stays_within_an_eighth() {
    // An eighth for the newest chunk, plus the index (4% at most, at a few thousand).
    let worst = worst_growth_overhead(300_000);
    assert!(worst < 1.15, "{worst}");
}

#[test]
fn a_small_log_is_small() {
    let mut c: Chunks<u64> = Chunks::new();
    assert_eq!(c.heap_size(), 0);
    c.push_back(1);
    assert_eq!(
        c.heap_size(),
        8 + 32,
        "one slot, and the index's 24 bytes in 32"
    );
    assert_eq!(c.allocations(), 2);
    for v in 2..=1024 {
        c.push_back(v);
    }
    // The first buffer, exactly full.
    assert_eq!(c.index.len(), 1);
    assert_eq!(c.heap_size(), FIRST_MAX_BYTES + 32);
}

#[test]
fn frees_are_bounded_per_call_and_finish_later() {
    let n = 2_000_000;
    let mut c: Chunks<u64> = (0..n).collect();
    let chunks = c.allocations();
    assert!(chunks > 1000, "{chunks}");
    assert!(c.index.more.is_some(), "an index of several blocks");
    let full = c.heap_size();
    // Keep the last quarter: most chunks are now dead, and one call frees only a few.
    c.drop_front(n as usize * 3 / 4);
    assert_eq!(chunks - c.allocations(), FREES_PER_CALL);
    assert!(c.pending() > 100);
    assert!(c.heap_size() > full / 2, "unfreed chunks still count");
    let mut calls = 0;
    while c.pending() > 0 {
        c.drop_front(0);
        calls += 1;
    }
    assert!(calls <= chunks / FREES_PER_CALL + 1);
    assert!(c.heap_size() < full / 3);
    assert_eq!(c.first(), Some(&(n * 3 / 4)));
    // A suffix too: spare chunks go a few at a time.
    c.truncate(1000);
    assert!(c.pending() > 0);
    while c.pending() > 0 {
        c.truncate(1000);
    }
    // 1,000 values are copied into one small buffer once the spare chunks are gone.
    assert!(c.heap_size() < 3 * 8 * 1000, "{}", c.heap_size());
    let want: Vec<u64> = (n * 3 / 4..n * 3 / 4 + 1000).collect();
    assert_eq!(c.iter().copied().collect::<Vec<_>>(), want);
}

/// With a hand-off, the chunks a cut leaves unused all leave the deque in the call, whatever
/// blocks of the index the cut falls in: at a block's edge or inside one, at the front or at
/// the back, or everything.
#[test]
fn unused_chunks_are_handed_off_in_one_step() {
    let n = 2_000_000u64;
    let build = || -> Chunks<u64> { (0..n).collect() };
    let c = build();
    let chunks = c.index.len();
    assert!(
        chunks > 2 * BLOCK + 100,
        "{chunks} chunks: an index of several blocks"
    );
    // Where chunk `k` starts, as a value's index (the first buffer was moved as it grew).
    let starts: Vec<u64> = c.index.iter().map(|k| k.start - c.head).collect();
    let cuts = [
        0,
        1,
        300,
        BLOCK - 1,
        BLOCK,
        BLOCK + 1,
        2 * BLOCK,
        chunks - 300,
        chunks - 1,
    ];
    for &first in &cuts {
        for &last in cuts.iter().filter(|&&last| last >= first) {
            let mut c = build();
            // Values from chunk `first` through chunk `last`, as a trim then a refund leave
            // them, before the deque settles.
            let (from, to) = (starts[first], starts.get(last + 1).copied().unwrap_or(n));
            c.head += from;
            c.len = (to - from) as usize;
            let pending = c.pending();
            assert_eq!(pending, chunks - (last - first + 1));
            let allocations = c.allocations();
            match c.take_unused() {
                Some(unused) => {
                    assert!(pending > FREES_PER_CALL);
                    assert_eq!(unused.len(), pending, "chunks {first} to {last}");
                }
                None => assert!(pending <= FREES_PER_CALL, "chunks {first} to {last}"),
            }
            if pending > FREES_PER_CALL {
                assert_eq!(c.pending(), 0);
                assert_eq!(c.index.len(), last - first + 1);
                assert!(c.allocations() < allocations - pending + 3);
            }
            check_shape(&c);
            let model: Vec<u64> = (from..to).collect();
            for v in 0..2000 {
                c.push_back(n + v);
            }
            let want: Vec<u64> = model.into_iter().chain(n..n + 2000).collect();
            assert!(
                c.iter().copied().eq(want.iter().copied()),
                "chunks {first} to {last}"
            );
            assert_eq!(c.len(), want.len());
            check_shape(&c);
        }
    }
    // Everything: the whole index goes.
    let mut c = build();
    c.truncate(0);
    let handed = handed_off(|| c.reclaim_with(Some(count_hand_off)));
    assert_eq!((handed, c.pending(), c.allocations()), (1, 0, 0));
    c.push_back(7);
    assert_eq!(c.iter().copied().collect::<Vec<_>>(), vec![7]);
}

#[test]
fn emptied_chunks_are_all_dead() {
    let mut c: Chunks<u64> = (0..100_000).collect();
    c.truncate(0);
    assert!(c.is_empty());
    while c.pending() > 0 {
        c.drop_front(0);
    }
    assert!(c.allocations() <= 1, "only the index may be left");
    c.push_back(7);
    assert_eq!(c.iter().copied().collect::<Vec<_>>(), vec![7]);
}
