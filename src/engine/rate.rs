//! A rate limiter's command, made from its kind's grammar ([`Rate`]) and algorithm
//! ([`Limit`]): decide at one time, record when allowed, and the effect replicas apply.

use std::marker::PhantomData;

use crate::core::args::Grammar;
use crate::core::effect::Out;
use crate::core::error::Error;
use crate::core::kind::{Change, Clock, Command, Mode, Ran, Rate, RateCall, Reply};
use crate::core::meta::Info;
use crate::core::{Decision, Instant};

/// The command of rate limiter `K` (`RL.TOKEN key limit window_ms ...`).
pub struct RateCommand<K>(PhantomData<K>);

impl<K: Rate> Command for RateCommand<K> {
    type Kind = K;
    const INFO: &'static Info = K::INFO;
    const SPEC: Option<(&'static str, Grammar)> = match K::KEYWORD {
        Some(keyword) => Some((keyword, K::GRAMMAR)),
        None => None,
    };
    const EFFECT_CODE: u8 = K::EFFECT_CODE;
    const ALONE: bool = <K as Rate>::ALONE;
    type Call<'a> = RateCall<K::Args>;

    #[inline(always)]
    fn parse(words: &[&[u8]], _effect: bool) -> Result<RateCall<K::Args>, Error> {
        K::parse(words)
    }

    fn owned(call: &RateCall<K::Args>) -> RateCall<K::Args> {
        *call
    }

    #[inline(always)]
    fn now(call: &RateCall<K::Args>) -> Option<Instant> {
        call.now
    }

    fn cost(call: &RateCall<K::Args>) -> u64 {
        call.cost
    }

    fn set_cost(call: &mut RateCall<K::Args>, cost: u64) {
        call.cost = cost;
    }

    fn fixes_cost(words: &[&[u8]]) -> bool {
        K::fixes_cost(words)
    }

    fn in_compact(call: &RateCall<K::Args>) -> Result<(), Error> {
        K::in_compact(&call.params)
    }

    fn doc_args() -> Vec<crate::core::meta::Arg> {
        K::GRAMMAR.doc_args()
    }

    /// Decides at one time and records when allowed (an effect records whatever it is
    /// told, as it was decided). A stored limiter whose shape must change for the call is
    /// reshaped into a new one, stored only if the call changes it.
    #[inline(always)]
    fn run(
        state: Option<&mut K>,
        call: &RateCall<K::Args>,
        clock: Clock,
        mode: Mode,
    ) -> Result<Ran<K>, Error> {
        let (p, cost) = (K::params(&call.params), call.cost);
        let mut created = None;
        let (limiter, in_key) = match state {
            Some(held) => match held.reshaped(clock.caller, p) {
                Some(new) => (created.insert(new), false),
                None => (held, true),
            },
            None => (created.insert(K::fresh(&call.params)), false),
        };
        let behind = limiter.latest().since(clock.caller);
        let now = clock.caller;
        let decision = limiter.evaluate(now, p, cost).seen_from_behind(behind);
        // Decided elsewhere: an effect, or a command of the older form (which always
        // carries NOW) from the primary or the AOF.
        let decided = mode.is_effect() || clock.decided;
        if cost == 0 || !(decision.allowed || decided) {
            return Ok(Ran::unchanged(K::reply(decision)));
        }
        if mode == Mode::Check {
            return match limiter.can_record(now, p, cost) {
                true => Ok(Ran::unchanged(Reply::Ok)),
                false => Err(Error::DoesNotFit),
            };
        }
        // Storing a new value drops the key's TTL, so it must be set again.
        let before = if in_key { limiter.empty_at() } else { None };
        if !limiter.record(now, p, cost) {
            // A record that does not fit changes nothing: refused as an error, never
            // answered as an allowed call that counts nothing.
            return Err(Error::DoesNotFit);
        }
        let after = limiter.empty_at();
        let decision = decision.resetting_at(after, clock.caller);
        let change = match created {
            Some(state) => Change::New {
                state,
                empty: after,
            },
            None => Change::Held { before, after },
        };
        Ok(Ran {
            reply: K::reply(decision),
            change,
            wait: false,
        })
    }

    /// The parameters as the client wrote them, the options that are not their defaults,
    /// `COST` unless 1, and `NOW` at the decision time.
    #[inline(always)]
    fn effect<O: Out>(call: &RateCall<K::Args>, _reply: &Reply, at: Instant, out: &mut O) {
        K::write_call(call, out);
        out.now(at);
    }

    /// Not reached: a rate limiter never waits.
    fn refusal(state: Option<&K>, call: &RateCall<K::Args>, now: Instant) -> Reply {
        let d = match state {
            Some(l) => l.evaluate(now, K::params(&call.params), call.cost),
            None => K::fresh(&call.params).evaluate(now, K::params(&call.params), call.cost),
        };
        K::reply(Decision {
            allowed: false,
            ..d
        })
    }

    fn fresh(call: &RateCall<K::Args>) -> Option<K> {
        Some(K::fresh(&call.params))
    }

    fn reshaped(state: &K, call: &RateCall<K::Args>, now: Instant) -> Option<K> {
        state.reshaped(now, K::params(&call.params))
    }

    fn evaluate(state: &K, call: &RateCall<K::Args>, now: Instant) -> Decision {
        state.evaluate(now, K::params(&call.params), call.cost)
    }

    fn evaluate_free(state: &K, call: &RateCall<K::Args>, now: Instant) -> Decision {
        state.evaluate(now, K::params(&call.params), 0)
    }

    fn fits(state: &K, call: &RateCall<K::Args>, now: Instant) -> Result<(), Error> {
        match state.can_record(now, K::params(&call.params), call.cost) {
            true => Ok(()),
            false => Err(Error::DoesNotFit),
        }
    }

    fn commit(state: &mut K, call: &RateCall<K::Args>, now: Instant) -> Option<Reply> {
        state
            .record(now, K::params(&call.params), call.cost)
            .then_some(Reply::Ok)
    }
}
