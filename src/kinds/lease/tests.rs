//! The semaphore against a list of leases, and its ids, caps and parts.

use super::*;
use proptest::prelude::*;

const T0: Instant = Instant::from_ms(1_700_000_000_000);

fn p(limit: u64, lease_ms: u64) -> Params {
    Params { limit, lease_ms }
}

/// The obvious semaphore: a list of leases with their ends.
#[derive(Debug, Clone)]
struct Model {
    latest: Instant,
    limit: u64,
    leases: Vec<(Vec<u8>, Instant, u64)>,
}

impl Model {
    fn held(&self, t: Instant) -> u64 {
        self.leases.iter().filter(|l| l.1 > t).map(|l| l.2).sum()
    }

    fn find(&self, id: &[u8], t: Instant) -> Option<usize> {
        self.leases.iter().position(|l| l.0 == id && l.1 > t)
    }

    fn wait(&self, t: Instant, limit: u64, cost: u64) -> Wait {
        if cost > limit {
            return Wait::Never;
        }
        let mut ends: Vec<_> = self.leases.iter().filter(|l| l.1 > t).collect();
        ends.sort_by_key(|l| l.1);
        let mut held = self.held(t);
        if held + cost <= limit {
            return Wait::None;
        }
        for l in ends {
            held -= l.2;
            if held + cost <= limit {
                return Wait::For(l.1 - t);
            }
        }
        Wait::Never
    }

    /// (allowed, remaining, wait) and the id taken.
    fn acquire(
        &mut self,
        now: Instant,
        p: &Params,
        cost: u64,
        id: &[u8],
    ) -> (bool, u64, Wait, bool) {
        let now = now.max(self.latest);
        self.leases.retain(|l| l.1 > now);
        if let Some(i) = self.find(id, now) {
            self.leases[i].1 = now + p.lease_ms;
            self.latest = now;
            self.limit = p.limit;
            let free = p.limit.saturating_sub(self.held(now));
            return (true, free, Wait::None, true);
        }
        let free = p.limit.saturating_sub(self.held(now));
        let wait = self.wait(now, p.limit, cost);
        if wait != Wait::None {
            return (false, free, wait, false);
        }
        self.leases.push((id.to_vec(), now + p.lease_ms, cost));
        self.latest = now;
        self.limit = p.limit;
        (true, free - cost, Wait::None, false)
    }
}

#[test]
fn counts_units_until_their_lease_ends_exactly() {
    let mut l = Leases::new(&p(2, 1000));
    let a = l.acquire(T0, &p(2, 1000), 1, None).unwrap();
    assert_eq!(a.decision.as_reply(), [1, 2, 1, 0, 1000]);
    assert_eq!(a.id.as_deref(), Some(&b"1700000000000-0"[..]));
    let b = l.acquire(T0 + 10, &p(2, 1000), 1, None).unwrap();
    assert_eq!(b.id.as_deref(), Some(&b"1700000000010-0"[..]));
    let c = l.acquire(T0 + 20, &p(2, 1000), 1, None).unwrap();
    assert_eq!(c.decision.as_reply(), [0, 2, 0, 980, 990]);
    assert_eq!(c.id, None);
    // At 999 the first lease is still held; at 1000 it has ended.
    assert!(
        !l.acquire(T0 + 999, &p(2, 1000), 1, None)
            .unwrap()
            .decision
            .allowed
    );
    let d = l.acquire(T0 + 1000, &p(2, 1000), 1, None).unwrap();
    assert_eq!(d.decision.as_reply(), [1, 2, 0, 0, 1000]);
    // Too big ever.
    let e = l.acquire(T0 + 1000, &p(2, 1000), 3, None).unwrap();
    assert_eq!(e.decision.retry_after, Wait::Never);
}

#[test]
fn the_same_id_renews_instead_of_taking_another_slot() {
    let mut l = Leases::new(&p(1, 1000));
    assert!(
        l.acquire(T0, &p(1, 1000), 1, Some(b"job"))
            .unwrap()
            .decision
            .allowed
    );
    let again = l.acquire(T0 + 500, &p(1, 1000), 1, Some(b"job")).unwrap();
    assert!(again.renewed && again.decision.allowed);
    assert_eq!(again.decision.as_reply(), [1, 1, 0, 0, 1000]);
    // The renewal moved the end to 1500.
    assert!(
        !l.acquire(T0 + 1499, &p(1, 1000), 1, Some(b"other"))
            .unwrap()
            .decision
            .allowed
    );
    assert!(
        l.acquire(T0 + 1500, &p(1, 1000), 1, Some(b"other"))
            .unwrap()
            .decision
            .allowed
    );
}

#[test]
fn release_and_extend() {
    let mut l = Leases::new(&p(3, 1000));
    l.acquire(T0, &p(3, 1000), 2, Some(b"a")).unwrap();
    l.acquire(T0, &p(3, 1000), 1, Some(b"b")).unwrap();
    assert_eq!(
        l.release(T0 + 1, b"a").unwrap().as_reply(),
        [1, 3, 2, 0, 999]
    );
    assert_eq!(l.release(T0 + 1, b"a"), None);
    assert_eq!(l.release(T0 + 1, b"nope"), None);
    assert_eq!(
        l.extend(T0 + 2, b"b", 5000).unwrap().as_reply(),
        [1, 3, 2, 0, 5000]
    );
    assert_eq!(l.extend(T0 + 5002, b"b", 5000), None);
    assert_eq!(l.peek(T0 + 5001).as_reply(), [1, 3, 2, 0, 1]);
    assert_eq!(l.peek(T0 + 5002).as_reply(), [1, 3, 3, 0, 0]);
    assert_eq!(l.empty_at(), Some(T0 + 5002));
}

#[test]
fn server_ids_never_repeat_and_are_never_held() {
    let mut l = Leases::new(&p(10, 1000));
    // A client's id of the server's form for a time not reached is refused; one for a
    // time reached counts as made.
    let ahead = l.acquire(T0, &p(10, 1000), 1, Some(b"1700000000005-0"));
    assert_eq!(ahead, Err(Refusal::IdAhead));
    l.acquire(T0, &p(10, 1000), 1, Some(b"1700000000000-3"))
        .unwrap();
    assert_eq!(l.last_id(), (T0, 3));
    let ids: Vec<_> = [0, 0, 5, 5, 3]
        .iter()
        .map(|&t| {
            l.acquire(T0 + t, &p(10, 1000), 1, None)
                .unwrap()
                .id
                .unwrap()
        })
        .collect();
    let ids: Vec<_> = ids.iter().map(|i| String::from_utf8_lossy(i)).collect();
    assert_eq!(
        ids,
        [
            "1700000000000-4",
            "1700000000000-5",
            "1700000000005-0",
            "1700000000005-1",
            "1700000000005-2"
        ]
    );
    // At the end of a millisecond's sequence, the next id is the next millisecond's
    // first: the only id of that millisecond the key admits before it is reached.
    let mut l = Leases::new(&p(10, 1000));
    let last = format!("{T0}-{}", SEQ_LIMIT - 1);
    l.acquire(T0, &p(10, 1000), 1, Some(last.as_bytes()))
        .unwrap();
    assert_eq!(l.next_id(T0), Some((T0 + 1, 0)));
    let second = format!("{}-1", T0 + 1);
    let refused = l.acquire(T0, &p(10, 1000), 1, Some(second.as_bytes()));
    assert_eq!(refused, Err(Refusal::IdAhead));
    // An effect carrying the id the server made is taken, and counts as made.
    let mut replica = l.clone();
    let made = l.acquire(T0, &p(10, 1000), 1, None).unwrap().id.unwrap();
    assert_eq!(made, format!("{}-0", T0 + 1).into_bytes());
    assert_eq!(replica.record(T0, &p(10, 1000), 1, &made), Ok(()));
    assert_eq!(replica.last_id(), l.last_id());
    assert_eq!(replica.next_id(T0), Some((T0 + 1, 1)));
    // What the server made stays made once released, on both.
    l.release(T0, &made).unwrap();
    replica.release(T0, &made).unwrap();
    assert_eq!(l.next_id(T0 + 1), Some((T0 + 1, 1)));
    assert_eq!(replica.next_id(T0 + 1), Some((T0 + 1, 1)));
    assert_eq!(server_form(b"1-0"), Some((Instant::from_ms(1), 0)));
    for bad in [
        &b"01-0"[..],
        b"1-01",
        b"-1",
        b"1-",
        b"1-2-3",
        b"a-1",
        b"1-9223372036854775808",
    ] {
        assert_eq!(server_form(bad), None, "{bad:?}");
    }
}

#[test]
fn a_key_outlives_its_last_made_id_by_a_millisecond() {
    let mut l = Leases::new(&p(1, 1000));
    let id = l.acquire(T0, &p(1, 1000), 1, None).unwrap().id.unwrap();
    l.release(T0, &id).unwrap();
    assert_eq!(l.empty_at(), Some(T0 + 1));
}

#[test]
fn many_leases_split_and_merge_chunks() {
    let mut l = Leases::new(&p(100_000, 1000));
    for i in 0..5000u64 {
        let id = format!("id{i}");
        let d = l.acquire(
            T0 + i % 7,
            &p(100_000, 1000 + (i * 37) % 1000),
            1,
            Some(id.as_bytes()),
        );
        assert!(d.unwrap().decision.allowed);
    }
    assert_eq!(l.live_at(T0 + 6), 5000);
    for i in (0..5000u64).step_by(2) {
        assert!(l.release(T0 + 6, format!("id{i}").as_bytes()).is_some());
    }
    assert_eq!(l.live_at(T0 + 6), 2500);
    assert!(l.chunks.iter().all(|c| !c.slots.is_empty()));
    // Everything ends by 2006: purged a bounded amount per call, counted exactly.
    assert_eq!(l.peek(T0 + 2006).remaining, 100_000);
    l.purge(T0 + 2006);
    assert_eq!(l.stored(), 2500 - PURGE_MAX);
}

#[test]
fn refuses_beyond_the_most_leases() {
    let mut l = Leases::new(&p(MAX_LIMIT, 1000));
    for i in 0..MAX_LEASES {
        l.acquire(T0, &p(MAX_LIMIT, 1000), 1, Some(i.to_string().as_bytes()))
            .unwrap();
    }
    assert_eq!(
        l.acquire(T0, &p(MAX_LIMIT, 1000), 1, None),
        Err(Refusal::Full)
    );
    // Beside each id (its 16-byte pointer in the slot and its own allocation): at most
    // 48 bytes a lease.
    let ids = l.id_bytes + 16 * l.slots.capacity();
    let per_lease = (l.heap_size() - ids) / MAX_LEASES;
    assert!(per_lease <= 48, "{per_lease}");
}

#[test]
fn round_trips_through_its_parts() {
    let mut l = Leases::new(&p(5, 1000));
    l.acquire(T0, &p(5, 1000), 2, Some(b"x")).unwrap();
    l.acquire(T0 + 3, &p(5, 2000), 1, None).unwrap();
    let parts = l.leases();
    let back = Leases::from_parts(l.limit(), l.latest(), l.last_id(), &parts).unwrap();
    assert_eq!(back.leases(), parts);
    assert_eq!(back.peek(T0 + 3), l.peek(T0 + 3));
    let mut twice = parts.clone();
    twice.push((T0 + 9000, 1, b"x"));
    assert!(Leases::from_parts(5, l.latest(), l.last_id(), &twice).is_err());
}

#[derive(Clone, Debug)]
enum Op {
    Acquire {
        dt: u64,
        limit: u64,
        lease: u64,
        cost: u64,
        id: Option<u8>,
    },
    Release {
        dt: u64,
        id: u8,
    },
    Extend {
        dt: u64,
        id: u8,
        lease: u64,
    },
    Peek {
        dt: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..40, 1u64..8, 1u64..200, 0u64..4, prop::option::of(0u8..12))
            .prop_map(|(dt, limit, lease, cost, id)| Op::Acquire { dt, limit, lease, cost, id }),
        2 => (0u64..40, 0u8..12).prop_map(|(dt, id)| Op::Release { dt, id }),
        1 => (0u64..40, 0u8..12, 1u64..200).prop_map(|(dt, id, lease)| Op::Extend { dt, id, lease }),
        1 => (0u64..40).prop_map(|dt| Op::Peek { dt }),
    ]
}

proptest! {
    #[test]
    fn matches_a_list_of_leases(ops in prop::collection::vec(op(), 1..200)) {
        let mut l = Leases::new(&p(1, 1));
        let mut m = Model { latest: Instant::EPOCH, limit: 1, leases: Vec::new() };
        let mut t = T0;
        let mut made = std::collections::HashSet::new();
        for op in ops {
            match op {
                Op::Acquire { dt, limit, lease, cost, id } => {
                    t += dt;
                    let name = id.map(|i| vec![b'c', i]);
                    let got = l.acquire(t, &p(limit, lease), cost, name.as_deref()).unwrap();
                    if cost == 0 {
                        prop_assert!(got.id.is_none());
                        prop_assert_eq!(got.decision.remaining, limit.saturating_sub(m.held(t.max(m.latest))));
                        continue;
                    }
                    let mid = got.id.clone().unwrap_or_default();
                    let key = name.clone().unwrap_or(mid.clone());
                    let (allowed, remaining, wait, renewed) = if name.is_none() && got.id.is_none() {
                        let now = t.max(m.latest);
                        let free = limit.saturating_sub(m.held(now));
                        (false, free, m.wait(now, limit, cost), false)
                    } else {
                        m.acquire(t, &p(limit, lease), cost, &key)
                    };
                    prop_assert_eq!(got.decision.allowed, allowed);
                    prop_assert_eq!(got.decision.remaining, remaining);
                    prop_assert_eq!(got.decision.retry_after, wait);
                    prop_assert_eq!(got.renewed, renewed);
                    if allowed && name.is_none() && !renewed {
                        prop_assert!(made.insert(mid), "an id made twice");
                    }
                }
                Op::Release { dt, id } => {
                    t += dt;
                    let now = t.max(m.latest);
                    let got = l.release(t, &[b'c', id]);
                    match m.find(&[b'c', id], now) {
                        Some(i) => {
                            m.leases.remove(i);
                            m.latest = now;
                            let got = got.unwrap();
                            prop_assert_eq!(got.remaining, m.limit.saturating_sub(m.held(now)));
                        }
                        None => prop_assert!(got.is_none()),
                    }
                }
                Op::Extend { dt, id, lease } => {
                    t += dt;
                    let now = t.max(m.latest);
                    let got = l.extend(t, &[b'c', id], lease);
                    match m.find(&[b'c', id], now) {
                        Some(i) => {
                            m.leases[i].1 = now + lease;
                            m.latest = now;
                            prop_assert!(got.is_some());
                        }
                        None => prop_assert!(got.is_none()),
                    }
                }
                Op::Peek { dt } => {
                    let now = (t + dt).max(m.latest);
                    let got = l.peek(t + dt);
                    prop_assert_eq!(got.remaining, m.limit.saturating_sub(m.held(now)));
                }
            }
            let now = t.max(m.latest);
            prop_assert_eq!(l.held_at(now), m.held(now));
            let last = m.leases.iter().filter(|x| x.1 > now).map(|x| x.1).max();
            if let Some(last) = last {
                prop_assert!(l.empty_at().unwrap() >= last);
            }
            // The canonical parts rebuild the same state.
            let parts = l.leases();
            if !parts.is_empty() {
                let back = Leases::from_parts(l.limit(), l.latest(), l.last_id(), &parts).unwrap();
                prop_assert_eq!(back.leases(), parts);
            }
        }
    }

    #[test]
    fn record_follows_acquire(ops in prop::collection::vec((0u64..30, 1u64..5, 1u64..100, 1u64..3, prop::option::of(0u8..6)), 1..100)) {
        // A replica applying each grant as recorded ends in the same state.
        let mut primary = Leases::new(&p(1, 1));
        let mut replica = Leases::new(&p(1, 1));
        let mut t = T0;
        for (dt, limit, lease, cost, id) in ops {
            t += dt;
            let name = id.map(|i| vec![b'c', i]);
            let got = primary.acquire(t, &p(limit, lease), cost, name.as_deref()).unwrap();
            if let Some(id) = got.id {
                let at = primary.latest();
                prop_assert_eq!(replica.record(at, &p(limit, lease), cost, &id), Ok(()));
            }
            prop_assert_eq!(primary.leases(), replica.leases());
            prop_assert_eq!(primary.last_id(), replica.last_id());
        }
    }
}
