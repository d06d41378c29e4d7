//! `RL.ALL`'s decision (`engine::limiters::decide`, the code the server runs) on a store of
//! states, against each key's own command: when every limiter allows, the call equals
//! calling each one alone; when one refuses, nothing changes.

use proptest::prelude::*;

use super::State;
use crate::core::error::Error;
use crate::core::kind::{Change, Clock, Command, Mode, Reply};
use crate::core::{Decision, Millis, MAX_TIMESTAMP};
use crate::engine::call::Storable;
use crate::engine::combine::combine;
use crate::engine::limiters::{decide, limiter, Limiter, Slot};
use crate::engine::rate::RateCommand;
use crate::kinds::fixed::FixedWindow;
use crate::kinds::leaky::Leaky;
use crate::kinds::lease::Acquire;
use crate::kinds::slide::SlidingLog;
use crate::kinds::subwin::SubWindow;
use crate::kinds::token::Token;

const T0: Millis = 1_700_000_000_000;

/// A key of the test's store.
#[derive(Clone, Debug, Default)]
struct Held(Option<Box<dyn State>>);

impl Slot for Held {
    type Held<'s, K: Storable>
        = &'s mut K
    where
        Self: 's;

    fn state<K: Storable>(&mut self) -> Result<Option<&mut K>, Error> {
        let Some(state) = self.0.as_mut() else {
            return Ok(None);
        };
        let held = state.command();
        match state.as_any_mut().downcast_mut::<K>() {
            Some(k) => Ok(Some(k)),
            None => Err(Error::OtherKind {
                held,
                wanted: K::COMMAND,
            }),
        }
    }

    fn set<K: Storable>(&mut self, state: K) -> Result<(), Error> {
        self.0 = Some(Box::new(state));
        Ok(())
    }
}

/// One limiter of a call: for `decide`, and as its own command.
trait Case {
    fn limiter(&self) -> Box<dyn Limiter<Held> + 'static>;
    /// The key's own command on `held` at `now`: the state it leaves when it changed it,
    /// and its decision.
    fn single(&self, held: &Held, now: Millis) -> (Option<Box<dyn State>>, Decision);
}

struct Words<C: Command> {
    words: Vec<&'static [u8]>,
    _command: std::marker::PhantomData<C>,
}

impl<C: Command> Case for Words<C>
where
    C::Kind: Storable,
{
    fn limiter(&self) -> Box<dyn Limiter<Held> + 'static> {
        limiter::<C, Held>(&self.words).expect("the limiter parses")
    }

    fn single(&self, held: &Held, now: Millis) -> (Option<Box<dyn State>>, Decision) {
        let call = C::parse(&self.words, false).expect("the call parses");
        let mut state = held
            .0
            .as_ref()
            .and_then(|s| s.as_any().downcast_ref::<C::Kind>().cloned());
        let clock = Clock {
            caller: now,
            lag: 0,
            decided: false,
        };
        let ran = C::run(state.as_mut(), &call, clock, Mode::Decide).expect("the call runs");
        let decision = match ran.reply {
            Reply::Decision(d) | Reply::Lease(d, _) => d,
            other => panic!("{other:?}"),
        };
        let changed: Option<Box<dyn State>> = match ran.change {
            Change::None => None,
            Change::Held { .. } => state.map(|s| Box::new(s) as Box<dyn State>),
            Change::New(new) => Some(Box::new(new)),
        };
        (changed, decision)
    }
}

/// A limiter's case from its words, keyword first (leaked: a lease's id is borrowed).
fn case(line: &str) -> Box<dyn Case> {
    let line: &'static str = Box::leak(line.to_string().into_boxed_str());
    let mut words = line.split(' ').map(str::as_bytes);
    let keyword = words.next().expect("a keyword");
    let words: Vec<&'static [u8]> = words.collect();
    fn of<C: Command>(words: Vec<&'static [u8]>) -> Box<dyn Case>
    where
        C::Kind: Storable,
    {
        Box::new(Words::<C> {
            words,
            _command: std::marker::PhantomData,
        })
    }
    match keyword {
        b"SLIDE" => of::<RateCommand<SlidingLog>>(words),
        b"TOKEN" => of::<RateCommand<Token>>(words),
        b"LEAKY" => of::<RateCommand<Leaky>>(words),
        b"FIXED" => of::<RateCommand<FixedWindow>>(words),
        b"SUBWIN" => of::<RateCommand<SubWindow>>(words),
        b"ACQUIRE" => of::<Acquire>(words),
        other => panic!("{}", String::from_utf8_lossy(other)),
    }
}

/// The cases of a call's limiters, one per key.
fn cases(lines: &[&str]) -> Vec<Box<dyn Case>> {
    lines.iter().map(|l| case(l)).collect()
}

/// One limiter's outcome.
struct Each {
    decision: Decision,
    id: Option<Vec<u8>>,
    changed: bool,
}

/// The outcome of a whole call.
struct Combined {
    decision: Decision,
    each: Vec<Each>,
}

/// Runs one call as `RL.ALL` does, on `keys`.
fn call(
    keys: &mut [Held],
    cases: &[Box<dyn Case>],
    now: Millis,
) -> Result<Combined, (usize, Error)> {
    let mut boxed: Vec<Box<dyn Limiter<Held>>> = cases.iter().map(|c| c.limiter()).collect();
    let mut limiters: Vec<&mut dyn Limiter<Held>> = boxed.iter_mut().map(|b| &mut **b).collect();
    let outcome = decide(&mut limiters, keys, now)?;
    let each = outcome
        .entries
        .iter()
        .zip(&outcome.committed)
        .map(|(entry, c)| {
            let (decision, id) = match entry {
                Reply::Decision(d) => (*d, None),
                Reply::Lease(d, id) => (*d, id.clone()),
                other => panic!("{other:?}"),
            };
            Each {
                decision,
                id,
                changed: c.is_some(),
            }
        })
        .collect();
    Ok(Combined {
        decision: outcome.decision,
        each,
    })
}

fn encoded(keys: &[Held]) -> Vec<Option<Vec<u8>>> {
    keys.iter()
        .map(|k| k.0.as_ref().map(|s| s.bytes()))
        .collect()
}

#[test]
fn all_or_nothing_on_two_layers() {
    let s = cases(&["SLIDE 2 60000", "TOKEN 10000 60000 COST 3000"]);
    let mut keys = [Held::default(), Held::default()];
    let ok = call(&mut keys, &s, T0).unwrap();
    assert_eq!(ok.decision.as_reply(), [1, 2, 1, 0, 60000]);
    assert_eq!(ok.each[1].decision.as_reply(), [1, 10000, 7000, 0, 18000]);
    let ok = call(&mut keys, &s, T0 + 1).unwrap();
    assert_eq!(ok.decision.as_reply()[..3], [1, 2, 0]);
    // The tokens would allow a third, the requests not: nothing is taken from either.
    let before = encoded(&keys);
    let refused = call(&mut keys, &s, T0 + 2).unwrap();
    assert_eq!(refused.decision.as_reply(), [0, 2, 0, 59998, 59999]);
    // The tokens say they would have allowed, and show what they hold.
    assert_eq!(
        refused.each[1].decision.as_reply(),
        [1, 10000, 4000, 0, 35998]
    );
    assert!(refused.each.iter().all(|o| !o.changed));
    assert_eq!(encoded(&keys), before);
}

#[test]
fn rate_and_concurrency_decide_together() {
    let s = cases(&["TOKEN 3 60000", "ACQUIRE 1 30000 ID job1"]);
    let mut keys = [Held::default(), Held::default()];
    let ok = call(&mut keys, &s, T0).unwrap();
    assert_eq!(ok.decision.as_reply()[..3], [1, 1, 0]);
    assert_eq!(ok.each[1].id.as_deref(), Some(&b"job1"[..]));
    // The same id again renews its lease: allowed, one more request taken.
    let again = call(&mut keys, &s, T0 + 10).unwrap();
    assert_eq!(again.each[1].decision.as_reply(), [1, 1, 0, 0, 30000]);
    assert_eq!(again.each[0].decision.as_reply()[..3], [1, 3, 1]);
    // Another job: the lease is held, so no request is taken either.
    let other = cases(&["TOKEN 9 60000", "ACQUIRE 1 30000"]);
    let before = encoded(&keys);
    let refused = call(&mut keys, &other, T0 + 20).unwrap();
    assert_eq!(refused.decision.as_reply(), [0, 1, 0, 29990, 29990]);
    assert_eq!(refused.each[1].id, None);
    assert_eq!(encoded(&keys), before);
    // Once it has ended, a server-made id.
    let later = call(&mut keys, &other, T0 + 30010).unwrap();
    assert!(later.decision.allowed);
    assert!(later.each[1].id.is_some());
}

#[test]
fn another_kind_is_an_error_naming_its_index() {
    let s = cases(&["TOKEN 5 1000", "FIXED 5 1000"]);
    let mut token = Held::default();
    token.set(Token::fresh_for_test()).unwrap();
    let mut keys = [Held::default(), token];
    let err = call(&mut keys, &s, T0).err();
    assert_eq!(
        err,
        Some((
            1,
            Error::OtherKind {
                held: "RL.TOKEN",
                wanted: "RL.FIXED"
            }
        ))
    );
}

/// An empty token bucket, as a call of `TOKEN 5 1000` makes one.
trait FreshForTest {
    fn fresh_for_test() -> Self;
}

impl FreshForTest for Token {
    fn fresh_for_test() -> Token {
        let call = <Token as crate::core::kind::Rate>::parse(&[b"5", b"1000"]).unwrap();
        <Token as crate::core::kind::Rate>::fresh(&call.params)
    }
}

/// One key's spec words: a kind, its parameters and options (a cost added by the caller).
/// `variant` picks one of two parameter sets, so that a key's parameters change between
/// calls.
fn spec_words() -> impl Strategy<Value = (u8, [String; 2], u64)> {
    let limit = 1u64..6;
    let window = 1u64..8;
    (
        0u8..6,
        limit.clone(),
        limit,
        window.clone(),
        window,
        0u8..4,
        0u64..4,
    )
        .prop_map(|(kind, l1, l2, w1, w2, opt, cost)| {
            let (w1, w2) = (w1 * 250, w2 * 500);
            let words = |l: u64, w: u64| match kind {
                0 if opt.is_multiple_of(2) => format!("SLIDE {l} {w}"),
                0 => format!("SLIDE {l} {w} {} {}", l * 2, w * 3),
                1 if opt == 0 => format!("TOKEN {l} {w}"),
                1 => format!("TOKEN {l} {w} BURST {opt}"),
                2 if opt == 0 => format!("LEAKY {l} {w}"),
                2 => format!("LEAKY {l} {w} MAXDELAY {} BURST {opt}", w * 2),
                3 if opt.is_multiple_of(2) => format!("FIXED {l} {w}"),
                3 => format!("FIXED {l} {w} ALIGN"),
                // A lease: server-made ids, or one of two ids of the caller's.
                5 if opt < 2 => format!("ACQUIRE {l} {w}"),
                5 => format!("ACQUIRE {l} {w} ID job{}", opt % 2),
                _ => format!("SUBWIN {l} {w} {}", w / [1, 5, 25, 125][opt as usize]),
            };
            (kind, [words(l1, w1), words(l2, w2)], cost)
        })
}

/// A limiter's words with its cost (none written for 1).
fn with_cost(words: &str, cost: u64) -> String {
    match cost {
        1 => words.to_string(),
        c => format!("{words} COST {c}"),
    }
}

proptest! {
    /// A random mix of 1 to 8 limiters of every kind (ACQUIRE too), called together many
    /// times: when every one allows, the call equals calling each key's own command one by
    /// one; when one refuses, nothing changes.
    #[test]
    fn all_equals_each_one_alone_or_changes_nothing(
        keys in prop::collection::vec(spec_words(), 1..=8),
        calls in prop::collection::vec(
            (prop::collection::vec(0usize..2, 8), 0u64..1500, any::<bool>()),
            1..40,
        ),
    ) {
        let n = keys.len();
        let mut state: Vec<Held> = vec![Held::default(); n];
        let mut now = T0;
        for (variants, step, back) in calls {
            // Time mostly runs on; sometimes a caller is behind.
            now = if back { now.saturating_sub(step / 4) } else { now + step };
            prop_assert!(now <= MAX_TIMESTAMP);
            let lines: Vec<String> = (0..n)
                .map(|i| with_cost(&keys[i].1[variants[i]], keys[i].2))
                .collect();
            let line = lines.join(" ");
            let s: Vec<Box<dyn Case>> = lines.iter().map(|l| case(l)).collect();
            let model: Vec<(Option<Box<dyn State>>, Decision)> = state
                .iter()
                .zip(&s)
                .map(|(k, case)| case.single(k, now))
                .collect();
            let before = encoded(&state);
            let before_state = state.clone();
            let got = call(&mut state, &s, now);
            prop_assert!(got.is_ok(), "{} at {}: {:?}", &line, now, got.as_ref().err());
            let Ok(got) = got else { continue };
            let all_allow = model.iter().all(|(_, d)| d.allowed);
            prop_assert_eq!(got.decision.allowed, all_allow);
            let each: Vec<Decision> = got.each.iter().map(|o| o.decision).collect();
            prop_assert_eq!(got.decision, combine(&each));
            if all_allow {
                for (i, ((new, d), o)) in model.iter().zip(&got.each).enumerate() {
                    prop_assert_eq!(&o.decision, d, "limiter {} in {} at {}", i, &line, now);
                    if let Some(new) = new {
                        let now_held = state[i].0.as_ref().map(|s| s.bytes());
                        prop_assert_eq!(now_held, Some(new.bytes()));
                    } else {
                        prop_assert_eq!(&encoded(&state)[i], &before[i]);
                    }
                }
            } else {
                prop_assert_eq!(encoded(&state), before);
                for (i, ((_, d), o)) in model.iter().zip(&got.each).enumerate() {
                    // A refusing limiter answers as its own command; one that would have
                    // allowed took nothing, and answers as its own command with COST 0
                    // (its state as it stands).
                    prop_assert_eq!(d.allowed, o.decision.allowed);
                    if d.allowed {
                        let peek = case(&with_cost(&keys[i].1[variants[i]], 0));
                        let (_, state) = peek.single(&before_state[i], now);
                        prop_assert_eq!(&o.decision, &state, "limiter {} in {} at {}", i, &line, now);
                    } else {
                        prop_assert_eq!(&o.decision, d);
                    }
                }
            }
        }
    }
}

/// Each limiter's event (which says its kind) and cost, and the call's `NOW`.
type Parsed = (Vec<(&'static str, u64)>, Option<Millis>);

/// A call's limiters and `NOW`, as the server parses them.
fn parsed(line: &str) -> Result<Parsed, Error> {
    crate::install();
    let ctx = redis_module::Context::dummy();
    let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    let frames = crate::engine::limiters::Frames::new();
    let (limiters, now) = crate::engine::all::parse(&ctx, &words, &frames)?;
    let each = limiters
        .iter()
        .map(|l| (l.event().to_str().unwrap_or_default(), l.cost()))
        .collect();
    Ok((each, now))
}

#[test]
fn all_splits_specs_by_kind() {
    let line = "RL.ALL 3 a b c SLIDE 10 1000 100 60000 COST 2 token 5 1000 BURST 2 \
                FIXED 7 60000 ALIGN NOW 42";
    let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
    let (each, now) = parsed(&line).unwrap();
    assert_eq!(now, Some(42));
    assert_eq!(each, [("rl.slide", 2), ("rl.token", 1), ("rl.fixed", 1)]);
    // The parameters each kind's parser took: as the kind's own command takes them.
    let keys = |words: &[&str]| {
        crate::engine::all::keys_of_words(&words.iter().map(|w| w.as_bytes()).collect::<Vec<_>>())
    };
    assert_eq!(keys(&line.split(' ').collect::<Vec<_>>()), 2..5);
    assert_eq!(keys(&["RL.ALL", "3", "a"]), 2..2);
    assert_eq!(keys(&["RL.ALL", "x", "a"]), 2..2);
}

#[rstest::rstest]
#[case("RL.ALL", Error::Arity)]
#[case("RL.ALL 0 a TOKEN 1 1", Error::Range { arg: "numkeys", min: 1, max: crate::engine::limiters::ALL_MAX_KEYS })]
#[case("RL.ALL 17 a TOKEN 1 1", Error::Range { arg: "numkeys", min: 1, max: crate::engine::limiters::ALL_MAX_KEYS })]
#[case("RL.ALL 3 a b", Error::Arity)]
#[case("RL.ALL 2 a b TOKEN 1 1", Error::SpecCount { keys: 2, specs: 1 })]
#[case("RL.ALL 1 a TOKEN 1 1 TOKEN 1 1", Error::SpecCount { keys: 1, specs: 2 })]
#[case("RL.ALL 1 a", Error::SpecCount { keys: 1, specs: 0 })]
#[case(
    "RL.ALL 2 a a TOKEN 1 1 TOKEN 1 1",
    Error::for_key(b"a", Error::Invalid("the same key is given twice"))
)]
#[case(
    "RL.ALL 1 a 5 1000",
    Error::ExpectedKind { kinds: &["SLIDE", "TOKEN", "LEAKY", "FIXED", "SUBWIN", "ACQUIRE", "THROTTLE"], word: "5".into() }
)]
#[case(
    "RL.ALL 1 a ACQUIRE 2 1000 BLOCK 0",
    Error::for_key(b"a", Error::Invalid("BLOCK is not allowed inside RL.ALL"))
)]
#[case(
    "RL.ALL 1 a ACQUIRE 2 1000 ID",
    Error::for_key(b"a", Error::MissingValue("ID"))
)]
#[case(
    "RL.ALL 2 a b ACQUIRE 2 1000 TOKEN 1 1 ID x",
    Error::for_key(b"b", Error::UnknownOption("ID".into()))
)]
#[case("RL.ALL 1 a TOKEN 1", Error::for_key(b"a", Error::Arity))]
#[case(
    "RL.ALL 1 a TOKEN 0 1",
    Error::for_key(b"a", Error::Range { arg: "limit", min: 1, max: crate::core::gcra::MAX_RATE_LIMIT })
)]
#[case(
    "RL.ALL 2 a b TOKEN 1 1 FIXED 1 1 BURST 2",
    Error::for_key(b"b", Error::UnknownOption("BURST".into()))
)]
#[case(
    "RL.ALL 1 a TOKEN 1 1 COST",
    Error::for_key(b"a", Error::MissingValue("COST"))
)]
#[case("RL.ALL 1 a TOKEN 1 1 NOW", Error::MissingValue("NOW"))]
#[case(
    "RL.ALL 2 a b TOKEN 1 1 NOW 5 FIXED 1 1",
    Error::InvalidWord("NOW comes once, after the last limiter; then nothing", "FIXED".into())
)]
#[case(
    "RL.ALL 1 a SUBWIN 1 1000 7",
    Error::for_key(b"a", Error::Invalid("window_ms must be a multiple of resolution_ms"))
)]
#[case("RL.ALL 1 a THROTTLE 0 0 60", Error::for_key(b"a", Error::Range { arg: "count_per_period", min: 1, max: 2147483647 }))]
fn all_bad_input(#[case] line: &str, #[case] want: Error) {
    assert_eq!(parsed(line).map(|_| ()), Err(want), "{line}");
    // And as the client reads it: the old message, word for word.
    if line == "RL.ALL 1 a 5 1000" {
        assert_eq!(
            parsed(line).err().map(|e| e.to_string()),
            Some("ERR expected a limiter kind (SLIDE, TOKEN, LEAKY, FIXED, SUBWIN, ACQUIRE, THROTTLE), got '5'".into())
        );
    }
}
