//! `RL.ALL`'s decision (`engine::limiters::decide`, the code the server runs) on a store of
//! states, against each key's own command: when every limiter allows, the call equals
//! calling each one alone; when one refuses, nothing changes.

use proptest::prelude::*;

use super::State;
use crate::core::error::Error;
use std::sync::OnceLock;

use crate::core::kind::{Change, Clock, Command, Mode, Reply};
use crate::core::sample::Sample;
use crate::core::{Decision, Instant, MAX_TIMESTAMP};
use crate::engine::call::Storable;
use crate::engine::combine::{combine, refusing};
use crate::engine::limiters::{decide, limiter, Limiter, Shadow, Slot};
use crate::engine::Visit;
use crate::kinds::token::Token;

const T0: Instant = Instant::from_ms(1_700_000_000_000);

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
    /// The key's own command on `held` at `now` (with `COST 0` when `peek`): the state it
    /// leaves when it changed it, and its reply; an error as the command answers it.
    fn single(&self, held: &Held, now: Instant, peek: bool) -> Single;
    /// What the key's own command answers for a decision of it.
    fn reply(&self, d: Decision) -> Reply;
}

/// What a key's own command did: the state it left when it changed it, and its reply (a
/// lease's without its id).
type Single = Result<(Option<Box<dyn State>>, Reply), Error>;

/// Whether a command's reply allows.
fn allows(reply: &Reply) -> bool {
    match reply {
        Reply::Decision(d) => d.allowed,
        Reply::Ints([limited, ..]) => *limited == 0,
        other => panic!("{other:?}"),
    }
}

struct Words<C: Command> {
    words: Vec<&'static [u8]>,
    _command: std::marker::PhantomData<C>,
}

impl<C: Command> Case for Words<C>
where
    C::Kind: Storable + Sample,
{
    fn reply(&self, d: Decision) -> Reply {
        <C::Kind as Sample>::reply(d)
    }

    fn limiter(&self) -> Box<dyn Limiter<Held> + 'static> {
        limiter::<C, Held>(&self.words).expect("the limiter parses")
    }

    fn single(&self, held: &Held, now: Instant, peek: bool) -> Single {
        let mut call = C::parse(&self.words, false)?;
        if peek {
            C::set_cost(&mut call, 0);
        }
        let mut state = held
            .0
            .as_ref()
            .and_then(|s| s.as_any().downcast_ref::<C::Kind>().cloned());
        let clock = Clock {
            caller: now,
            lag: crate::core::Duration::ZERO,
            decided: false,
            server: now,
        };
        let ran = C::run(state.as_mut(), &call, clock, Mode::Decide)?;
        let reply = match ran.reply {
            Reply::Lease(d, _) => Reply::Decision(d),
            other => other,
        };
        let changed: Option<Box<dyn State>> = match ran.change {
            Change::None => None,
            Change::Held { .. } => state.map(|s| Box::new(s) as Box<dyn State>),
            Change::New { state: new, .. } => Some(Box::new(new)),
        };
        Ok((changed, reply))
    }
}

/// A kind `RL.ALL` takes, from the registry: its keyword, its sample words, and a case of
/// its command from words.
struct Kind {
    keyword: &'static str,
    words: fn([u8; 4], Instant) -> String,
    case: fn(Vec<&'static [u8]>) -> Box<dyn Case>,
}

/// The kinds `RL.ALL` takes (those whose command has a keyword there), in the registry's
/// order.
fn kinds() -> &'static [Kind] {
    struct Kinds(Vec<Kind>);
    impl Visit for Kinds {
        fn kind<K, C>(&mut self)
        where
            K: Storable + Sample,
            C: Command<Kind = K>,
        {
            fn of<C: Command>(words: Vec<&'static [u8]>) -> Box<dyn Case>
            where
                C::Kind: Storable + Sample,
            {
                Box::new(Words::<C> {
                    words,
                    _command: std::marker::PhantomData,
                })
            }
            if let Some((keyword, _)) = C::SPEC {
                self.0.push(Kind {
                    keyword,
                    words: K::sample_words,
                    case: of::<C>,
                });
            }
        }
    }
    static KINDS: OnceLock<Vec<Kind>> = OnceLock::new();
    KINDS.get_or_init(|| {
        let mut kinds = Kinds(Vec::new());
        crate::visit(&mut kinds);
        kinds.0
    })
}

/// A limiter's case from its words, keyword first (leaked: a lease's id is borrowed).
fn case(line: &str) -> Box<dyn Case> {
    let line: &'static str = Box::leak(line.to_string().into_boxed_str());
    let mut words = line.split(' ').map(str::as_bytes);
    let keyword = words.next().expect("a keyword");
    let kind = kinds()
        .iter()
        .find(|k| k.keyword.as_bytes().eq_ignore_ascii_case(keyword))
        .unwrap_or_else(|| panic!("{line}"));
    (kind.case)(words.collect())
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
    refused_by: Option<usize>,
    would_refuse: Option<usize>,
    shadow_refusals: Shadow,
}

/// Runs one call as `RL.ALL` does, on `keys`.
fn call(
    keys: &mut [Held],
    cases: &[Box<dyn Case>],
    now: Instant,
) -> Result<Combined, (usize, Error)> {
    call_shadowed(keys, cases, now, Shadow::NONE)
}

/// Runs one call as `RL.HIT` does under a policy whose shadow limiters are `shadow`.
fn call_shadowed(
    keys: &mut [Held],
    cases: &[Box<dyn Case>],
    now: Instant,
    shadow: Shadow,
) -> Result<Combined, (usize, Error)> {
    let mut boxed: Vec<Box<dyn Limiter<Held>>> = cases.iter().map(|c| c.limiter()).collect();
    let mut limiters: Vec<&mut dyn Limiter<Held>> = boxed.iter_mut().map(|b| &mut **b).collect();
    let outcome = decide(&mut limiters, keys, now, shadow)?;
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
        refused_by: outcome.refused_by,
        would_refuse: outcome.would_refuse,
        shadow_refusals: outcome.shadow_refusals,
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

/// One key's limiter: a kind `RL.ALL` takes (the registry's) and two of its sample calls,
/// so that a key's parameters change between calls. Their costs are mostly 0, 1 or 2 (a
/// mix of several limiters then allows now and then), else any of the edges.
fn spec_words() -> impl Strategy<Value = [String; 2]> {
    let p = || {
        let cost = prop_oneof![4 => prop::sample::select(vec![0u8, 1, 5]), 1 => any::<u8>()];
        (any::<[u8; 2]>(), cost, any::<u8>()).prop_map(|([a, b], c, d)| [a, b, c, d])
    };
    (any::<prop::sample::Index>(), p(), p()).prop_map(|(kind, p1, p2)| {
        let kind = &kinds()[kind.index(kinds().len())];
        [(kind.words)(p1, T0), (kind.words)(p2, T0)]
    })
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
            now = if back { now.saturating_sub(crate::core::Duration::from_ms(step / 4)) } else { now + step };
            prop_assert!(now <= MAX_TIMESTAMP);
            let lines: Vec<&str> = (0..n).map(|i| keys[i][variants[i]].as_str()).collect();
            let line = lines.join(" ");
            let s: Vec<Box<dyn Case>> = lines.iter().map(|l| case(l)).collect();
            let model: Vec<Single> = state
                .iter()
                .zip(&s)
                .map(|(k, case)| case.single(k, now, false))
                .collect();
            let before = encoded(&state);
            let before_state = state.clone();
            let got = call(&mut state, &s, now);
            // An error (a cost past a limiter's counters, an id its key cannot take)
            // changes nothing, and is one that key's own command answers too.
            let Ok(got) = got else {
                prop_assert_eq!(encoded(&state), before);
                prop_assert!(model.iter().any(Result::is_err), "{} at {}: {:?}", &line, now, got.err());
                continue;
            };
            // A key's own command may answer an error where the call together refuses
            // and changes nothing (a lease id the call's time rules out, when another
            // limiter refuses before it is taken).
            let model: Vec<_> = match model.into_iter().collect::<Result<_, _>>() {
                Ok(model) => model,
                Err(e) => {
                    prop_assert!(!got.decision.allowed, "{} at {}: alone {}", &line, now, e);
                    prop_assert_eq!(encoded(&state), before);
                    continue;
                }
            };
            let all_allow = model.iter().all(|(_, r)| allows(r));
            prop_assert_eq!(got.decision.allowed, all_allow);
            let each: Vec<Decision> = got.each.iter().map(|o| o.decision).collect();
            prop_assert_eq!(got.decision, combine(&each));
            if all_allow {
                for (i, ((new, r), o)) in model.iter().zip(&got.each).enumerate() {
                    prop_assert_eq!(&s[i].reply(o.decision), r, "limiter {} in {} at {}", i, &line, now);
                    if let Some(new) = new {
                        let now_held = state[i].0.as_ref().map(|s| s.bytes());
                        prop_assert_eq!(now_held, Some(new.bytes()));
                    } else {
                        prop_assert_eq!(&encoded(&state)[i], &before[i]);
                    }
                }
            } else {
                prop_assert_eq!(encoded(&state), before);
                for (i, ((_, r), o)) in model.iter().zip(&got.each).enumerate() {
                    // A refusing limiter answers as its own command; one that would have
                    // allowed took nothing, and answers as its own command with COST 0
                    // (its state as it stands).
                    prop_assert_eq!(allows(r), o.decision.allowed);
                    if allows(r) {
                        let peek = s[i].single(&before_state[i], now, true);
                        prop_assert!(peek.is_ok(), "{:?}", peek.as_ref().err());
                        let Ok((_, state)) = peek else { continue };
                        prop_assert_eq!(&s[i].reply(o.decision), &state, "limiter {} in {} at {}", i, &line, now);
                    } else {
                        prop_assert_eq!(&s[i].reply(o.decision), r);
                    }
                }
            }
        }
    }
}

proptest! {
    /// The same mix with some limiters in shadow (a policy's `SHADOW`): the call is what
    /// the enforced ones decide together (a shadow refusal never refuses it, nor hides an
    /// enforced refusal); a shadow limiter records as its own command would, only when the
    /// enforced ones allow, and is told as refusing when it would refuse.
    #[test]
    fn shadow_limiters_never_refuse_and_record_as_their_own_command(
        keys in prop::collection::vec(spec_words(), 1..=6),
        mask in 1u16..64,
        calls in prop::collection::vec(
            (prop::collection::vec(0usize..2, 6), 0u64..1500),
            1..40,
        ),
    ) {
        let n = keys.len();
        let shadow = Shadow(mask & ((1 << n) - 1));
        let mut state: Vec<Held> = vec![Held::default(); n];
        let mut now = T0;
        for (variants, step) in calls {
            now += step;
            let lines: Vec<&str> = (0..n).map(|i| keys[i][variants[i]].as_str()).collect();
            let line = lines.join(" ");
            let s: Vec<Box<dyn Case>> = lines.iter().map(|l| case(l)).collect();
            let model: Vec<Single> = state
                .iter()
                .zip(&s)
                .map(|(k, case)| case.single(k, now, false))
                .collect();
            let before = encoded(&state);
            let before_state = state.clone();
            let got = call_shadowed(&mut state, &s, now, shadow);
            // Errors are `RL.ALL`'s (checked above): here, only that they change nothing.
            let (Ok(got), Ok(model)) = (got.as_ref(), model.into_iter().collect::<Result<Vec<_>, _>>()) else {
                if got.is_err() {
                    prop_assert_eq!(encoded(&state), before);
                }
                continue;
            };
            let enforced: Vec<usize> = (0..n).filter(|&i| !shadow.has(i)).collect();
            let enforced_allow = enforced.iter().all(|&i| allows(&model[i].1));
            prop_assert_eq!(got.decision.allowed, enforced_allow, "{} at {}", &line, now);
            let each: Vec<Decision> = got.each.iter().map(|o| o.decision).collect();
            let pick = |ix: &[usize]| ix.iter().map(|&i| each[i]).collect::<Vec<_>>();
            if !enforced.is_empty() {
                prop_assert_eq!(got.decision, combine(&pick(&enforced)));
                let refused_by = refusing(&pick(&enforced)).map(|k| enforced[k]);
                prop_assert_eq!(got.refused_by, refused_by);
            } else {
                prop_assert!(got.decision.allowed && got.refused_by.is_none());
            }
            let shadows: Vec<usize> = (0..n).filter(|&i| shadow.has(i)).collect();
            let would = refusing(&pick(&shadows)).map(|k| shadows[k]);
            prop_assert_eq!(got.would_refuse, would);
            let every = shadows.iter().filter(|&&i| !each[i].allowed).fold(0u16, |m, &i| m | 1 << i);
            prop_assert_eq!(got.shadow_refusals, Shadow(every));
            for i in 0..n {
                let (new, r) = &model[i];
                let o = &got.each[i];
                let records = enforced_allow && allows(r);
                if records {
                    prop_assert_eq!(&s[i].reply(o.decision), r, "limiter {} in {} at {}", i, &line, now);
                    match new {
                        Some(new) => prop_assert_eq!(state[i].0.as_ref().map(|s| s.bytes()), Some(new.bytes())),
                        None => prop_assert_eq!(&encoded(&state)[i], &before[i]),
                    }
                    continue;
                }
                prop_assert_eq!(&encoded(&state)[i], &before[i], "limiter {} in {} at {}", i, &line, now);
                if allows(r) {
                    let Ok((_, peek)) = s[i].single(&before_state[i], now, true) else { continue };
                    prop_assert_eq!(&s[i].reply(o.decision), &peek, "limiter {} in {} at {}", i, &line, now);
                } else {
                    prop_assert_eq!(&s[i].reply(o.decision), r, "limiter {} in {} at {}", i, &line, now);
                }
            }
        }
    }
}

/// Each limiter's event (which says its kind) and cost, and the call's `NOW`.
type Parsed = (Vec<(&'static str, u64)>, Option<Instant>);

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
    assert_eq!(now, Some(Instant::from_ms(42)));
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
    Error::ExpectedKind { kinds: crate::engine::limiters::keywords(), word: "5".into() }
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
    // And as the client reads it: the registry's kinds, in its order (the integration
    // tests read the server's, word for word).
    if line == "RL.ALL 1 a 5 1000" {
        let kinds = crate::engine::limiters::keywords().join(", ");
        assert_eq!(
            parsed(line).err().map(|e| e.to_string()),
            Some(format!("ERR expected a limiter kind ({kinds}), got '5'"))
        );
    }
}
