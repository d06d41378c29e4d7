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
//!
//! It runs the kinds' commands as the command layer does (`core::kind::Command`: a call's
//! own path, `RL.ALL`'s evaluate, check and commit), and the replica applies the effects'
//! words as `RL.APPLY` does (parsed by the command, run in `Mode::Apply`).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use proptest::prelude::*;

use super::State;

use crate::core::effect::{self, Compact, Line, Words};
use crate::core::error::Error;
use crate::core::kind::{Change, Clock, Command, Kind, Mode, Reply};
use crate::core::sample::{Sample, DAY31, SEQ_END};
use crate::core::{Decision, Duration, Instant, MAX_TIMESTAMP};
use crate::engine::call::Storable;
use crate::engine::Visit;
use crate::kinds::lease::{sample_id as lease_id, Extend, Leases, Release};

const T0: Instant = Instant::from_ms(1_700_000_000_000);
/// Keys the calls pick from: a key's kind is its number's, modulo the number of kinds.
const KEYS: u8 = 16;

/// What the round trip does with one of the registry's kinds.
struct KindCase {
    /// Its sample call's words ([`Sample::sample_words`]).
    words: fn([u8; 4], Instant) -> String,
    /// Its command as one of `RL.ALL`'s limiters (`None`: `RL.ALL` does not take it).
    limiter: Option<LimiterFn>,
    /// Its command run alone on a key.
    own: OwnFn,
}

/// A limiter of `RL.ALL` on a key, from its words.
type LimiterFn = fn(u8, &[&[u8]]) -> Result<Box<dyn Limiter>, Error>;
/// A call run alone on a key, at a time: the effect's words, when it changed the key.
type OwnFn = fn(&mut Db, u8, &[&[u8]], Instant) -> Option<Vec<u8>>;

/// How a replica applies an effect of a command (its words after the key).
type ApplyFn = fn(&mut Db, u8, &[&[u8]]) -> Result<(), String>;

/// The registry's kinds and every command's way to apply its effects, by name.
struct Registry {
    kinds: Vec<KindCase>,
    apply: Vec<(&'static str, ApplyFn)>,
}

impl Visit for Registry {
    fn kind<K, C>(&mut self)
    where
        K: Storable + Sample,
        C: Command<Kind = K>,
    {
        self.kinds.push(KindCase {
            words: K::sample_words,
            limiter: C::SPEC.map(|_| spec::<C> as LimiterFn),
            own: own_call::<C>,
        });
    }

    fn command<C: Command>(&mut self)
    where
        C::Kind: Storable,
    {
        self.apply.push((C::INFO.name, apply_as::<C>));
    }
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut r = Registry {
            kinds: Vec::new(),
            apply: Vec::new(),
        };
        crate::visit(&mut r);
        r
    })
}

/// The number of kinds.
fn kinds() -> u8 {
    registry().kinds.len() as u8
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

/// A key: mostly one of the first few (one of each kind), so that each sees many calls.
fn key() -> impl Strategy<Value = u8> + Clone {
    prop_oneof![8 => 0u8..kinds(), 1 => 0..KEYS]
}

fn op() -> impl Strategy<Value = Op> {
    // A key's kind is its number's (its calls are of one kind).
    let spec = (key(), any::<[u8; 4]>()).prop_map(|(k, p)| (k, k % kinds(), p));
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

type Db = BTreeMap<u8, Box<dyn State>>;

/// The state of kind `K` the key holds (a copy); an error for another kind.
fn typed<K: Kind>(db: &Db, key: u8) -> Result<Option<K>, Error> {
    match db.get(&key) {
        None => Ok(None),
        Some(s) => match s.as_any().downcast_ref::<K>() {
            Some(k) => Ok(Some(k.clone())),
            None => Err(Error::Internal("another kind")),
        },
    }
}

/// A change settles the key: a state back to empty is deleted, as `engine::settle` does.
fn settle(db: &mut Db, key: u8) {
    if db.get(&key).is_some_and(|l| l.empty_at().is_none()) {
        db.remove(&key);
    }
}

/// The effect's words after the key, textual, as the replica receives them (the compact
/// form, when the command has one, expanded: it must say the same).
fn effect_of<C: Command>(call: &C::Call<'_>, reply: &Reply, at: Instant) -> Vec<u8> {
    let mut line = Line::new(C::INFO.name);
    C::effect(call, reply, at, &mut line);
    let text = line.as_bytes().expect("the effect fits").to_vec();
    if C::EFFECT_CODE != 0 {
        let mut compact = Compact::new(C::EFFECT_CODE);
        C::effect(call, reply, at, &mut compact);
        if let Some(bytes) = compact.as_bytes() {
            let expanded = effect::expand(bytes, crate::engine::effect_command)
                .expect("a compact effect expands");
            assert_eq!(
                expanded.as_bytes(),
                Some(&text[..]),
                "compact and text agree"
            );
        }
    }
    text
}

/// Runs a call of `C` on the key as its own command does (`engine::call::run_at`).
fn own_call<C: Command>(db: &mut Db, key: u8, words: &[&[u8]], now: Instant) -> Option<Vec<u8>>
where
    C::Kind: Storable,
{
    let call = C::parse(words, false).ok()?;
    let mut held = typed::<C::Kind>(db, key).ok()?;
    let clock = Clock {
        caller: now,
        lag: Duration::ZERO,
        decided: false,
        server: now,
    };
    let ran = C::run(held.as_mut(), &call, clock, Mode::Decide).ok()?;
    let state = match ran.change {
        Change::None => return None,
        Change::Held { .. } => held?,
        Change::New { state: new, .. } => new,
    };
    let at = Kind::latest_time(&state);
    db.insert(key, Box::new(state));
    settle(db, key);
    Some(effect_of::<C>(&call, &ran.reply, at))
}

/// One of `RL.ALL`'s limiters, as `engine::all` runs them.
trait Limiter {
    fn key(&self) -> u8;
    fn check(&self, db: &Db, now: Instant) -> Result<(), Error>;
    fn evaluate(&mut self, db: &Db, now: Instant) -> Result<(Decision, Result<(), Error>), Error>;
    fn cost(&self) -> u64;
    /// Records it; the effect's words.
    fn commit(&mut self, db: &mut Db, now: Instant) -> Result<Vec<u8>, Error>;
}

struct Spec<C: Command> {
    key: u8,
    call: C::Call<'static>,
    new: Option<C::Kind>,
}

fn spec<C: Command>(key: u8, words: &[&[u8]]) -> Result<Box<dyn Limiter>, Error>
where
    C::Kind: Storable,
{
    let call = C::parse(words, false)?;
    Ok(Box::new(Spec::<C> {
        key,
        call: C::owned(&call),
        new: None,
    }))
}

impl<C: Command> Limiter for Spec<C>
where
    C::Kind: Storable,
{
    fn key(&self) -> u8 {
        self.key
    }

    fn check(&self, db: &Db, now: Instant) -> Result<(), Error> {
        match typed::<C::Kind>(db, self.key)? {
            Some(state) => C::check(&state, &self.call, now),
            None => Ok(()),
        }
    }

    fn evaluate(&mut self, db: &Db, now: Instant) -> Result<(Decision, Result<(), Error>), Error> {
        let held = typed::<C::Kind>(db, self.key)?;
        self.new = match &held {
            Some(state) => C::reshaped(state, &self.call, now),
            None => C::fresh(&self.call),
        };
        let state = self
            .new
            .as_ref()
            .or(held.as_ref())
            .ok_or_else(|| Error::Arity)?;
        let behind = Kind::latest_time(state).since(now);
        let d = C::evaluate(state, &self.call, now).seen_from_behind(behind);
        let fits = match (d.allowed, C::cost(&self.call)) {
            (true, 1..) => C::fits(state, &self.call, now),
            _ => Ok(()),
        };
        Ok((d, fits))
    }

    fn cost(&self) -> u64 {
        C::cost(&self.call)
    }

    fn commit(&mut self, db: &mut Db, now: Instant) -> Result<Vec<u8>, Error> {
        let mut state = match self.new.take() {
            Some(new) => new,
            None => typed::<C::Kind>(db, self.key)?.ok_or_else(|| Error::Arity)?,
        };
        let reply = C::commit(&mut state, &self.call, now).ok_or_else(|| Error::DoesNotFit)?;
        let at = Kind::latest_time(&state);
        db.insert(self.key, Box::new(state));
        settle(db, self.key);
        Ok(effect_of::<C>(&self.call, &reply, at))
    }
}

/// The words of a line after its keyword.
fn after_keyword(line: &str) -> Vec<&[u8]> {
    line.split(' ').skip(1).map(str::as_bytes).collect()
}

/// Runs `op` at `now` on the primary's keys: the effects of what changed.
fn run(db: &mut Db, op: &Op, now: Instant) -> Vec<(u8, Vec<u8>)> {
    let mut effects = Vec::new();
    match op {
        Op::Call(specs_of) => {
            let mut keys: Vec<u8> = Vec::new();
            let mut lines = Vec::new();
            for (key, kind, p) in specs_of {
                if !keys.contains(key) {
                    keys.push(*key);
                    let words = registry().kinds[usize::from(*kind)].words;
                    lines.push((*kind, words(*p, now), p[0]));
                }
            }
            if let ([key], [(kind, line, pick)]) = (&keys[..], &lines[..]) {
                let case = &registry().kinds[usize::from(*kind)];
                if pick % 2 == 0 || case.limiter.is_none() {
                    let own = (case.own)(db, *key, &after_keyword(line), now);
                    effects.extend(own.map(|e| (*key, e)));
                    return effects;
                }
            }
            let made: Result<Vec<_>, _> = keys
                .iter()
                .zip(&lines)
                .map(|(key, (kind, line, _))| {
                    let limiter = registry().kinds[usize::from(*kind)].limiter;
                    limiter.ok_or_else(|| Error::Arity)?(*key, &after_keyword(line))
                })
                .collect();
            let Ok(mut limiters) = made else {
                return effects;
            };
            // As `engine::all`: every limiter checked and evaluated, none changed, then
            // every one records when every one allows and fits.
            let mut allowed = true;
            for l in &mut limiters {
                if l.check(db, now).is_err() {
                    return effects;
                }
                match l.evaluate(db, now) {
                    Ok((d, fits)) => {
                        allowed &= d.allowed;
                        if d.allowed && fits.is_err() {
                            return effects;
                        }
                    }
                    Err(_) => return effects,
                }
            }
            if !allowed {
                return effects;
            }
            for l in &mut limiters {
                if l.cost() == 0 {
                    continue;
                }
                let effect = l.commit(db, now).expect("a limiter that fits records");
                effects.push((l.key(), effect));
            }
        }
        Op::Charge(key, pick) | Op::Refund(key, pick) => {
            let Some(l) = db.get_mut(key) else {
                return effects;
            };
            let charge = matches!(op, Op::Charge(..));
            let units = match charge {
                true => [0, 1, 7, 1 << 20, u32::MAX as u64, SEQ_END][usize::from(*pick) % 6],
                false => [1, 2, 1 << 20, SEQ_END][usize::from(*pick) % 4],
            };
            let done = if charge {
                let fits = l.can_charge(now, units);
                let charged = l.charge(now, units);
                if let (Ok(fits), Ok(charged)) = (&fits, &charged) {
                    assert_eq!(*fits, charged.is_some(), "can_charge agrees with charge");
                }
                matches!(charged, Ok(Some(_))) && units > 0
            } else {
                l.refund(now, units).is_ok()
            };
            if done {
                let command = if charge { "RL.CHARGE" } else { "RL.REFUND" };
                let line = format!("{command} COST {units} NOW {}", l.latest());
                effects.push((*key, line.into_bytes()));
                settle(db, *key);
            }
        }
        Op::Release(key, pick) | Op::Extend(key, pick, _) => {
            let held = typed::<Leases>(db, *key);
            let Ok(Some(leases)) = held else {
                return effects;
            };
            let Some(id) = lease_id(*pick, now).or_else(|| {
                // A lease the key holds, the server's made one say.
                leases
                    .leases()
                    .first()
                    .map(|(_, _, id)| String::from_utf8_lossy(id).into_owned())
            }) else {
                return effects;
            };
            let effect = match op {
                Op::Extend(_, _, lease) => {
                    let lease = [1, 1000, DAY31][usize::from(*lease) % 3];
                    let words = [id.as_bytes(), lease.to_string().as_bytes()].map(<[u8]>::to_vec);
                    let words: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
                    own_call::<Extend>(db, *key, &words, now)
                }
                _ => own_call::<Release>(db, *key, &[id.as_bytes()], now),
            };
            effects.extend(effect.map(|e| (*key, e)));
        }
    }
    effects
}

/// Applies an effect of `C` (its words after the command's name) as `RL.APPLY` does.
fn apply_as<C: Command>(db: &mut Db, key: u8, words: &[&[u8]]) -> Result<(), String>
where
    C::Kind: Storable,
{
    let call = C::parse(words, true).map_err(|e| format!("the effect does not parse: {e}"))?;
    let at = C::now(&call).ok_or("an effect without NOW")?;
    let mut held = typed::<C::Kind>(db, key).map_err(|e| e.to_string())?;
    let clock = Clock {
        caller: at,
        lag: Duration::ZERO,
        decided: false,
        server: at,
    };
    let ran = C::run(held.as_mut(), &call, clock, Mode::Apply)
        .map_err(|e| format!("the replica refused: {e}"))?;
    match ran.change {
        Change::None => {}
        Change::Held { .. } => {
            db.insert(key, Box::new(held.ok_or("no state")?));
        }
        Change::New { state: new, .. } => {
            db.insert(key, Box::new(new));
        }
    }
    settle(db, key);
    Ok(())
}

/// Applies an effect as a replica does: by the command it names.
fn apply(db: &mut Db, key: u8, effect: &[u8]) -> Result<(), String> {
    let name = format!("k{key}");
    let words = Words::split(name.as_bytes(), effect).map_err(|e| e.to_string())?;
    let rest = words.as_slice().get(2..).unwrap_or_default();
    let command = String::from_utf8_lossy(words.command()).into_owned();
    match command.as_str() {
        "RL.CHARGE" | "RL.REFUND" => {
            let num = |i: usize| {
                rest.get(i)
                    .and_then(|w| std::str::from_utf8(w).ok()?.parse::<u64>().ok())
                    .ok_or("a malformed effect")
            };
            let (units, at) = (num(1)?, num(3)?);
            let l = db.get_mut(&key).ok_or("a change on a missing key")?;
            if command == "RL.CHARGE" {
                l.charge(Instant::from_ms(at), units)
                    .map_err(|e| e.to_string())?
                    .ok_or("the replica refused a charge")?;
            } else {
                l.refund(Instant::from_ms(at), units)
                    .map_err(|e| e.to_string())?;
            }
            settle(db, key);
            Ok(())
        }
        other => match registry().apply.iter().find(|(name, _)| *name == other) {
            Some((_, apply)) => apply(db, key, rest),
            None => Err(format!("an effect of {other}")),
        },
    }
}

/// Every way a state is read back gives its bytes again.
fn assert_reads_back(key: u8, l: &dyn State) -> Result<(), TestCaseError> {
    let bytes = l.bytes();
    let through = l.through_keys();
    prop_assert!(
        through.is_ok(),
        "k{key}: the loader refuses {:?}: {l:?}",
        through.as_ref().err()
    );
    for got in through.unwrap_or_default() {
        prop_assert_eq!(&got, &bytes, "k{}: a key's form", key);
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
        crate::install();
        let (mut primary, mut replica) = (Db::new(), Db::new());
        let mut now = T0;
        for (dt, op) in &ops {
            now = match *dt {
                i64::MAX => MAX_TIMESTAMP - DAY31 - 1000 + now.ms() % 1000,
                dt if dt < 0 => now.saturating_sub(Duration::from_ms(dt.unsigned_abs())),
                dt => now.saturating_add(Duration::from_ms(dt as u64)).min(MAX_TIMESTAMP - DAY31),
            };
            for (key, effect) in run(&mut primary, op, now) {
                let applied = apply(&mut replica, key, &effect);
                prop_assert!(
                    applied.is_ok(),
                    "{:?} at {}: {} {:?}",
                    op,
                    now,
                    String::from_utf8_lossy(&effect),
                    applied
                );
            }
            for (key, l) in &primary {
                assert_reads_back(*key, l.as_ref())?;
            }
            let encoded = |db: &Db| db.iter().map(|(k, l)| (*k, l.bytes())).collect::<Vec<_>>();
            prop_assert_eq!(encoded(&primary), encoded(&replica), "{:?} at {}", op, now);
        }
    }
}
