//! What the module writes, it reads back: random calls of every command, with edge values,
//! on a few keys, as the command layer runs them (a call of several keys all or nothing, a
//! state that is back to empty deleted), and after each call:
//! - every key's state survives its encoding (what RDB, AOF rewrite, `DUMP`/`RESTORE`,
//!   `COPY` and the digest use): it decodes, through the general decoder and through the
//!   key's own form, to the same bytes;
//! - a replica applying each change as its effect carries it (`RL.APPLY`: the parameters,
//!   the cost and the decision time, a lease's id) takes every one, never refusing what the
//!   primary did, and ends in the same state.
//!
//! The values are the edges: limits 1 and the most each kind takes, windows of 1 ms and 31
//! days, costs 0, the limit, one more and 2^63 - 1, calls an hour behind and near the
//! largest time, lease ids of 1 and 512 bytes and of the server's own form near the end of
//! its sequence, `RL.ALL` over 16 keys, `RL.CHARGE` and `RL.REFUND`.

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::algo::{Limit, Millis, MAX_TIMESTAMP};
use crate::all::{self, Outcomes, Target};
use crate::args::{self, Spec, SpecParams};
use crate::value::{self, Limiter};

const T0: Millis = 1_700_000_000_000;
const DAY31: u64 = 31 * 24 * 3600 * 1000;
const SEQ_END: u64 = (1 << 63) - 1;
/// Keys the calls pick from.
const KEYS: u8 = 16;

/// The specs of an `RL.ALL` line (its words leaked: an ACQUIRE spec borrows its id).
fn specs(line: &str) -> Result<Vec<Spec<'static>>, crate::error::Error> {
    let line: &'static str = Box::leak(line.to_string().into_boxed_str());
    let words: &'static [&'static str] =
        Box::leak(line.split(' ').collect::<Vec<_>>().into_boxed_slice());
    let mut specs = args::Specs::new();
    args::all(words, &mut specs)?;
    Ok(specs.to_vec())
}

/// A cost among the edges of a limit.
fn cost_word(pick: u8, limit: u64) -> String {
    let cost = match pick % 6 {
        0 => 0,
        1 => 1,
        2 => limit,
        3 => limit + 1,
        4 => SEQ_END,
        _ => 2,
    };
    match cost {
        1 => String::new(),
        c => format!(" COST {c}"),
    }
}

/// A lease id among the edges, at `now`.
fn lease_id(pick: u8, now: Millis) -> Option<String> {
    Some(match pick % 9 {
        0 | 1 => return None,
        2 => "a".to_string(),
        3 => "x".repeat(512),
        4 => format!("{now}-{SEQ_END}"),
        5 => format!("{now}-{}", SEQ_END - 1),
        6 => format!("{}-0", now + 1),
        7 => format!("{}-0", now.saturating_sub(1)),
        _ => format!("{}-7", now + 5),
    })
}

/// One limiter spec of a kind with edge parameters (`p` picks them), as `RL.ALL` takes it.
fn spec_words(kind: u8, p: [u8; 4], now: Millis) -> String {
    let pick = |i: usize, options: &[u64]| options[usize::from(p[i]) % options.len()];
    match kind % 6 {
        0 => {
            let n = 1 + usize::from(p[3] % 3);
            let mut words = String::from("SLIDE");
            let mut limit = 0;
            for w in 0..n {
                limit = pick(0, &[1, 2, 10, u32::MAX as u64]) + w as u64;
                let limit = limit.min(u32::MAX as u64);
                let window = pick(1, &[1, 2, 1000, DAY31])
                    .saturating_sub(w as u64)
                    .max(1);
                words += &format!(" {limit} {window}");
            }
            words + &cost_word(p[2], limit.min(u32::MAX as u64))
        }
        1 | 2 => {
            let limit = pick(0, &[1, 10, (1 << 31) - 1]);
            let window = pick(1, &[1, 1000, DAY31]);
            let mut words = format!(
                "{} {limit} {window}",
                ["TOKEN", "LEAKY"][usize::from(kind % 6) - 1]
            );
            if kind % 6 == 2 {
                match p[3] % 3 {
                    0 => {}
                    1 => words += " MAXDELAY 0",
                    _ => words += &format!(" MAXDELAY {DAY31}"),
                }
            }
            match p[3] / 3 % 3 {
                0 => {}
                1 => words += " BURST 1",
                _ => words += &format!(" BURST {}", (1u64 << 31) - 1),
            }
            words + &cost_word(p[2], limit)
        }
        3 => {
            let limit = pick(0, &[1, 10, u32::MAX as u64]);
            let window = pick(1, &[1, 1000, DAY31]);
            let align = if p[3].is_multiple_of(2) { "" } else { " ALIGN" };
            format!("FIXED {limit} {window}{align}") + &cost_word(p[2], limit)
        }
        4 => {
            let limit = pick(0, &[1, 10, (1 << 31) - 1]);
            let (window, res) = [
                (1, 1),
                (4096, 1),
                (1000, 10),
                (DAY31, DAY31 / 4000),
                (60000, 60000),
            ][usize::from(p[1]) % 5];
            format!("SUBWIN {limit} {window} {res}") + &cost_word(p[2], limit)
        }
        _ => {
            let limit = pick(0, &[1, 10, 1_000_000_000]);
            let lease = pick(1, &[1, 1000, DAY31]);
            let id = match lease_id(p[3], now) {
                Some(id) => format!(" ID {id}"),
                None => String::new(),
            };
            format!("ACQUIRE {limit} {lease}{id}") + &cost_word(p[2], limit)
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// `RL.ALL` over these keys (one: the kind's own command), each with a kind and picks.
    Call(Vec<(u8, u8, [u8; 4])>),
    Charge(u8, u8),
    Refund(u8, u8),
    Release(u8, u8),
    Extend(u8, u8, u8),
}

/// A key: mostly one of the first six (one of each kind), so that each sees many calls.
fn key() -> impl Strategy<Value = u8> + Clone {
    prop_oneof![8 => 0u8..6, 1 => 0..KEYS]
}

fn op() -> impl Strategy<Value = Op> {
    // A key's kind is its number's (its calls are of one kind).
    let spec = (key(), any::<[u8; 4]>()).prop_map(|(k, p)| (k, k % 6, p));
    prop_oneof![
        6 => prop::collection::vec(spec.clone(), 1..=2).prop_map(Op::Call),
        1 => prop::collection::vec(spec, 1..=16).prop_map(Op::Call),
        1 => (key(), any::<u8>()).prop_map(|(k, c)| Op::Charge(k, c)),
        1 => (key(), any::<u8>()).prop_map(|(k, c)| Op::Refund(k, c)),
        1 => (key(), any::<u8>()).prop_map(|(k, i)| Op::Release(k, i)),
        1 => (key(), any::<u8>(), any::<u8>()).prop_map(|(k, i, l)| Op::Extend(k, i, l)),
    ]
}

/// A step of time: mostly on, sometimes an hour behind, now and then near the end of time.
fn step() -> impl Strategy<Value = i64> {
    prop_oneof![
        6 => 0i64..3,
        4 => 0i64..2000,
        1 => Just(60_000),
        1 => Just(DAY31 as i64),
        1 => Just(-3_600_000),
        1 => Just(i64::MAX),
    ]
}

/// What a change carries to a replica, as its effect does.
enum Effect {
    Record(Spec<'static>, Millis),
    Lease(Spec<'static>, Vec<u8>, Millis),
    Charge(u64, Millis),
    Refund(u64, Millis),
    Release(Vec<u8>, Millis),
    Extend(Vec<u8>, u64, Millis),
}

type Db = BTreeMap<u8, Limiter>;

/// A change settles the key: a limiter back to empty is deleted, as `commands::settle` does.
fn settle(db: &mut Db, key: u8) {
    if db.get(&key).is_some_and(|l| l.empty_at().is_none()) {
        db.remove(&key);
    }
}

/// Runs `op` at `now` on the primary's keys, returning the effects of what changed.
fn run(db: &mut Db, op: &Op, now: Millis) -> Vec<(u8, Effect)> {
    let mut effects = Vec::new();
    match op {
        Op::Call(specs_of) => {
            let mut keys: Vec<u8> = Vec::new();
            let mut words = Vec::new();
            for (key, kind, p) in specs_of {
                if !keys.contains(key) {
                    keys.push(*key);
                    words.push(spec_words(*kind, *p, now));
                }
            }
            let names: Vec<String> = keys.iter().map(|k| format!("k{k}")).collect();
            let line = format!(
                "RL.ALL {} {} {}",
                keys.len(),
                names.join(" "),
                words.join(" ")
            );
            let Ok(specs) = specs(&line) else {
                return effects;
            };
            let mut held: Vec<Option<Limiter>> = keys.iter().map(|k| db.get(k).cloned()).collect();
            let mut targets: Vec<Target<&mut Limiter>> = held
                .iter_mut()
                .zip(&specs)
                .map(|(h, s)| match h {
                    Some(l) => Target::Held(l),
                    None => Target::New(s.fresh()),
                })
                .collect();
            let mut each = Outcomes::new();
            if all::acquire(&mut targets, &specs, now, &mut each).is_err() {
                // Refused before anything changed: the held copies are dropped as they are.
                return effects;
            }
            let created: Vec<Option<Limiter>> = targets
                .into_iter()
                .map(|t| match t {
                    Target::New(l) => Some(l),
                    Target::Held(_) => None,
                })
                .collect();
            for (i, ((o, new), h)) in each.iter().zip(created).zip(held).enumerate() {
                if !o.changed {
                    continue;
                }
                let key = keys[i];
                let l = new.or(h).expect("a changed limiter");
                db.insert(key, l);
                settle(db, key);
                let spec = specs[i];
                effects.push(match (&spec.params, &o.id) {
                    (SpecParams::Acquire(_), Some(id)) => {
                        (key, Effect::Lease(spec, id.clone(), o.latest))
                    }
                    _ => (key, Effect::Record(spec, o.latest)),
                });
            }
        }
        Op::Charge(key, pick) => {
            let Some(l) = db.get_mut(key) else {
                return effects;
            };
            let units = [0, 1, 7, 1 << 20, u32::MAX as u64, SEQ_END][usize::from(*pick) % 6];
            if matches!(l, Limiter::Lease(_)) || units == 0 {
                return effects;
            }
            let fits = l.can_charge(now, units);
            let charged = l.charge(now, units).is_some();
            assert_eq!(fits, charged, "can_charge agrees with charge");
            if charged {
                effects.push((*key, Effect::Charge(units, l.latest())));
                settle(db, *key);
            }
        }
        Op::Refund(key, pick) => {
            let Some(l) = db.get_mut(key) else {
                return effects;
            };
            let units = [1, 2, 1 << 20, SEQ_END][usize::from(*pick) % 4];
            if matches!(l, Limiter::Lease(_)) {
                return effects;
            }
            l.refund(now, units);
            effects.push((*key, Effect::Refund(units, l.latest())));
            settle(db, *key);
        }
        Op::Release(key, pick) | Op::Extend(key, pick, _) => {
            let Some(Limiter::Lease(l)) = db.get_mut(key) else {
                return effects;
            };
            let Some(id) = lease_id(*pick, now).or_else(|| {
                // A lease the key holds, the server's made one say.
                l.leases()
                    .first()
                    .map(|(_, _, id)| String::from_utf8_lossy(id).into_owned())
            }) else {
                return effects;
            };
            let id = id.into_bytes();
            let done = match op {
                Op::Extend(_, _, lease) => {
                    let lease = [1, 1000, DAY31][usize::from(*lease) % 3];
                    l.extend(now, &id, lease)
                        .map(|_| Effect::Extend(id, lease, l.latest()))
                }
                _ => l.release(now, &id).map(|_| Effect::Release(id, l.latest())),
            };
            if let Some(effect) = done {
                effects.push((*key, effect));
                settle(db, *key);
            }
        }
    }
    effects
}

/// Applies an effect as a replica does (`commands` in `Mode::Apply`): the stored limiter,
/// reshaped for the parameters or made afresh, records the cost at the decision time.
fn apply(db: &mut Db, key: u8, effect: &Effect) -> Result<(), String> {
    match effect {
        Effect::Record(spec, at) => {
            let held = db.get(&key);
            let mut l = match held {
                Some(h) => spec.reshaped(h, *at).unwrap_or_else(|| h.clone()),
                None => spec.fresh(),
            };
            let ok = match (&spec.params, &mut l) {
                (SpecParams::Slide(w), Limiter::Slide(log)) => {
                    log.record(*at, w.as_slice(), spec.cost)
                }
                (SpecParams::Token(p), Limiter::Token(g))
                | (SpecParams::Leaky(p), Limiter::Leaky(g)) => g.record(*at, p, spec.cost),
                (SpecParams::Fixed(p), Limiter::Fixed(w)) => w.record(*at, p, spec.cost),
                (SpecParams::Subwin(p), Limiter::Subwin(w)) => w.record(*at, p, spec.cost),
                _ => false,
            };
            if !ok {
                return Err("the replica refused a record".into());
            }
            db.insert(key, l);
        }
        Effect::Lease(spec, id, at) => {
            let SpecParams::Acquire(p) = spec.params else {
                return Err("a lease effect of another kind".into());
            };
            let mut l = match db.get(&key) {
                Some(h) => h.clone(),
                None => spec.fresh(),
            };
            let Limiter::Lease(leases) = &mut l else {
                return Err("a lease effect on another kind".into());
            };
            leases
                .record(*at, &p, spec.cost, id)
                .map_err(|r| format!("the replica refused a grant: {r:?}"))?;
            db.insert(key, l);
        }
        Effect::Charge(units, at) => {
            let l = db.get_mut(&key).ok_or("a charge on a missing key")?;
            l.charge(*at, *units)
                .ok_or("the replica refused a charge")?;
        }
        Effect::Refund(units, at) => {
            let l = db.get_mut(&key).ok_or("a refund on a missing key")?;
            l.refund(*at, *units);
        }
        Effect::Release(id, at) | Effect::Extend(id, _, at) => {
            let Some(Limiter::Lease(l)) = db.get_mut(&key) else {
                return Err("a lease change on a missing key".into());
            };
            let done = match effect {
                Effect::Extend(_, lease, _) => l.extend(*at, id, *lease),
                _ => l.release(*at, id),
            };
            done.ok_or("the replica did not hold the lease")?;
        }
    }
    settle(db, key);
    Ok(())
}

/// Every way a state is read back gives its bytes again.
fn assert_reads_back(key: u8, l: &Limiter) -> Result<(), TestCaseError> {
    let bytes = l.encode();
    let back = Limiter::decode(&bytes);
    prop_assert!(
        back.is_ok(),
        "k{key}: the loader refuses {:?}: {l:?}",
        back.err()
    );
    prop_assert_eq!(
        back.map(|b| b.encode()).ok(),
        Some(bytes.clone()),
        "k{}",
        key
    );
    let mut through_key = None;
    l.with_encoding(|b| through_key = Some(b.to_vec()));
    prop_assert_eq!(
        through_key.as_ref(),
        Some(&bytes),
        "k{}: the stack encoding",
        key
    );
    // The key's own form (compact or boxed), a copy of it, and the load straight to it.
    let raw = value::into_raw(l.clone());
    // SAFETY: `raw` comes from `into_raw` (or `decode_raw`) and is freed once, here.
    unsafe {
        let copy = value::copy_raw(raw);
        let loaded = value::decode_raw(&bytes).map_err(|e| TestCaseError::fail(e.0))?;
        for r in [raw, copy, loaded] {
            let got = value::with_raw_encoding(r, |b| b.to_vec());
            prop_assert_eq!(got.as_ref(), Some(&bytes), "k{}: a key's form", key);
        }
        for r in [raw, copy, loaded] {
            value::free_raw(r);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(128),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_state_the_commands_build_reads_back_and_replicates(
        ops in prop::collection::vec((step(), op()), 1..120)
    ) {
        let (mut primary, mut replica) = (Db::new(), Db::new());
        let mut now = T0;
        for (dt, op) in &ops {
            now = match *dt {
                i64::MAX => MAX_TIMESTAMP - DAY31 - 1000 + now % 1000,
                dt if dt < 0 => now.saturating_sub(dt.unsigned_abs()),
                dt => now.saturating_add(dt as u64).min(MAX_TIMESTAMP - DAY31),
            };
            for (key, effect) in run(&mut primary, op, now) {
                let applied = apply(&mut replica, key, &effect);
                prop_assert!(applied.is_ok(), "{:?} at {}: {:?}", op, now, applied);
            }
            for (key, l) in &primary {
                assert_reads_back(*key, l)?;
            }
            let encoded = |db: &Db| db.iter().map(|(k, l)| (*k, l.encode())).collect::<Vec<_>>();
            prop_assert_eq!(encoded(&primary), encoded(&replica), "{:?} at {}", op, now);
        }
    }
}
