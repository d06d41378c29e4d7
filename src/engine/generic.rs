//! `RL.PEEK`, `RL.REFUND` and `RL.CHARGE`, on whatever kind a key holds: each kind answers
//! them through its [`Kind`] (a kind may refuse one, as leases refuse a refund), and the
//! generic layers do the rest as for any command.

use redis_module::Context;
use smallvec::SmallVec;

use super::{catalog, clock, key_arg, replicate_expiry, settle};
use crate::core::args::{self, COST};
use crate::core::effect::{Compact, Out};
use crate::core::error::Error;
use crate::core::kind::{Clock, Mode, Reply};
use crate::core::meta::{self, Info, Keys, Stats};
use crate::core::Instant;
use crate::rm::api::{self, Answer, Arg, Count, Handler};
use crate::rm::key::Key;

use super::call::Storable;

/// The compact codes of `RL.REFUND`'s and `RL.CHARGE`'s effects.
pub const REFUND_CODE: u8 = 6;
pub const CHARGE_CODE: u8 = 7;

/// What the generic commands do to one kind's keys, made for each kind by [`KindEntry::of`]
/// and listed by the registry.
pub struct KindEntry {
    /// The command that makes keys of the kind.
    pub command: &'static str,
    peek: fn(&mut Key, Clock, u64) -> Result<Reply, Error>,
    empty_at: fn(&mut Key) -> Result<Option<Instant>, Error>,
    change: ChangeFn,
}

/// `RL.REFUND` (false) or `RL.CHARGE` (true) on a key of one kind.
type ChangeFn = fn(&Context, Arg, &mut Key, &Opts, Clock, Mode, bool) -> Result<Reply, Error>;

impl KindEntry {
    /// The entry of kind `K`.
    pub const fn of<K: Storable>() -> KindEntry {
        KindEntry {
            command: K::COMMAND,
            peek: peek::<K>,
            empty_at: empty_at_typed::<K>,
            change: change::<K>,
        }
    }
}

/// The options of `RL.PEEK`, `RL.REFUND` and `RL.CHARGE`.
pub struct Opts {
    pub cost: u64,
    pub now: Option<Instant>,
}

args::option_set! {
    /// The options of `RL.PEEK`, `RL.REFUND` and `RL.CHARGE` as given.
    struct Given { cost: COST }
}

#[inline(always)]
fn parse(words: &[&[u8]], cost_default: u64) -> Result<(Opts, bool), Error> {
    let given = Given::parse(words)?;
    Ok((
        Opts {
            cost: given.cost.map_or(cost_default, args::Value::int),
            now: given.now(),
        },
        given.cost.is_some(),
    ))
}

/// The words after the key (on the stack: a call takes at most a few).
#[inline(always)]
fn words(args: &[Arg]) -> Result<SmallVec<[&[u8]; 6]>, Error> {
    let Some(rest) = args.get(2..) else {
        return Err(Error::Arity);
    };
    let mut words = SmallVec::new();
    for a in rest {
        words.push(a.as_bytes());
    }
    Ok(words)
}

/// The kind's entry for the key `key` holds, `None` for a missing key.
fn entry(key: &Key) -> Result<Option<&'static KindEntry>, Error> {
    match key.kind_index()? {
        Some(i) => catalog()
            .kinds
            .get(i)
            .map(Some)
            .ok_or_else(|| Error::Internal("a value of no known kind")),
        None => Ok(None),
    }
}

fn empty_at_typed<K: Storable>(key: &mut Key) -> Result<Option<Instant>, Error> {
    Ok(key.state::<K>()?.and_then(|state| state.empty_time()))
}

/// When the state the key holds is back to empty (`None`: empty, or a missing key).
pub fn empty_at(key: &mut Key) -> Result<Option<Instant>, Error> {
    match entry(key)? {
        Some(entry) => (entry.empty_at)(key),
        None => Ok(None),
    }
}

/// `RL.PEEK key` at `clock`: the state's answer, nil for a missing key.
pub fn peek_key(ctx: &Context, name: Arg, clock: Clock) -> Result<Reply, Error> {
    let mut key = Key::open(ctx, name, false);
    match entry(&key)? {
        Some(entry) => (entry.peek)(&mut key, clock, 0),
        None => Ok(Reply::Nil),
    }
}

fn peek<K: Storable>(key: &mut Key, clock: Clock, cost: u64) -> Result<Reply, Error> {
    let Some(state) = key.state::<K>()? else {
        return Ok(Reply::Nil);
    };
    state.peekable()?;
    let now = clock.caller;
    let behind = state.latest_time().since(now);
    Ok(Reply::Decision(if cost > 0 {
        // What the kind's command would answer for COST n, its reset included.
        state.peek_cost(now, cost).seen_from_behind(behind)
    } else {
        state
            .peek(now)
            .seen_from_behind(behind)
            .resetting_at(state.empty_time(), now)
    }))
}

/// `RL.REFUND` (`charge` false) and `RL.CHARGE` on a key of kind `K`.
fn change<K: Storable>(
    ctx: &Context,
    name: Arg,
    key: &mut Key,
    opts: &Opts,
    clock: Clock,
    mode: Mode,
    charge: bool,
) -> Result<Reply, Error> {
    let Some(mut state) = key.state::<K>()? else {
        return Ok(Reply::Nil);
    };
    // A kind that takes no refund or charge says so first (whatever the cost).
    if charge {
        state.can_charge(clock.caller, 0)?;
    } else {
        state.refundable()?;
    }
    let now = clock.caller;
    let behind = state.latest_time().since(now);
    if !charge && opts.cost == 0 {
        state.unchanged();
        return Ok(Reply::Decision(state.peek(now).seen_from_behind(behind)));
    }
    if mode == Mode::Check {
        // A refund always applies; a charge when it fits.
        let fits = !charge || state.can_charge(now, opts.cost)?;
        state.unchanged();
        return if fits {
            Ok(Reply::Ok)
        } else {
            Err(Error::DoesNotFit)
        };
    }
    let before = state.empty_time();
    let decision = if charge {
        match state.charge(now, opts.cost)? {
            Some(d) => d,
            None => {
                state.unchanged();
                return Err(Error::DoesNotFit);
            }
        }
    } else {
        state.refund(now, opts.cost)?
    };
    if charge && opts.cost == 0 {
        state.unchanged();
        return Ok(Reply::Decision(decision.seen_from_behind(behind)));
    }
    let decision = decision.seen_from_behind(behind);
    let (at, empty_at) = (state.latest_time(), state.empty_time());
    let decision = decision.resetting_at(empty_at, now);
    // Back to the key, which `settle` may delete.
    drop(state);
    let event = if charge { c"rl.charge" } else { c"rl.refund" };
    let lag = clock.key_lag(at);
    let expiry = settle(key, event, empty_at, lag, before);
    if mode == Mode::Decide {
        let (code, command) = if charge {
            (CHARGE_CODE, "RL.CHARGE")
        } else {
            (REFUND_CODE, "RL.REFUND")
        };
        let mut compact = Compact::new(code);
        compact.option("COST", opts.cost).now(at);
        match compact.as_bytes() {
            Some(bytes) => api::replicate_effect(ctx, name, bytes),
            None => ctx.log_warning(&format!(
                "ratelimit: an effect of {command} could not be written; not propagated"
            )),
        }
    }
    replicate_expiry(ctx, name, lag, expiry);
    Ok(Reply::Decision(decision))
}

/// Runs `RL.REFUND` (`charge` false) or `RL.CHARGE` with the words after the key, as
/// `mode` says (a client's call, or an effect of `RL.APPLY`).
pub fn refund_or_charge(
    ctx: &Context,
    name: Arg,
    words: &[&[u8]],
    mode: Mode,
    charge: bool,
) -> Result<Reply, Error> {
    // A charge's units are never implied: without COST (`RL.CHARGE key 5`), say so first.
    if charge && !words.iter().any(|w| w.eq_ignore_ascii_case(b"COST")) {
        return Err(Error::Invalid(
            "RL.CHARGE needs COST n, the units to record: RL.CHARGE key COST n [NOW ms]",
        ));
    }
    let (opts, _) = parse(words, args::COST_DEFAULT)?;
    let clock = clock(ctx, opts.now, mode)?;
    let mut key = Key::open(ctx, name, true);
    let Some(entry) = entry(&key)? else {
        return Ok(Reply::Nil);
    };
    (entry.change)(ctx, name, &mut key, &opts, clock, mode, charge)
}

/// `RL.PEEK key [COST n] [NOW ms]`.
pub struct Peek;

/// `RL.REFUND key [COST n] [NOW ms]`.
pub struct Refund;

/// `RL.CHARGE key COST n [NOW ms]`.
pub struct Charge;

static PEEK_INFO: Info = Info {
    name: "RL.PEEK",
    event: c"rl.peek",
    summary: "Reports a limiter's state under the parameters it last used, or with COST what a call of that many units would be answered, changing nothing",
    complexity: "O(log N)",
    arity: -2,
    keys: Keys::First,
    // Reads whichever kind the key holds, a RL.SUBWIN ring included.
    flags: "readonly",
    categories: "read slow",
    own_category: true,
    args: &[meta::KEY, meta::COST, meta::NOW],
    stats: Stats::new(),
};

static REFUND_INFO: Info = Info {
    name: "RL.REFUND",
    event: c"rl.refund",
    summary: "Gives back units recorded earlier, newest first, for requests that did not count",
    complexity: "O(log N) for a refund of any size; memory beyond a bounded amount is freed off the main thread",
    arity: -2,
    keys: Keys::First,
    // O(log N) on a log (a binary search for the cut), but walks back over a ring's
    // sub-intervals (RL.SUBWIN).
    flags: "write",
    categories: "write slow",
    own_category: true,
    args: &[meta::KEY, meta::COST, meta::NOW],
    stats: Stats::new(),
};

/// RL.CHARGE's COST: required.
const UNITS: meta::Arg = meta::Arg {
    optional: false,
    ..meta::COST
};

static CHARGE_INFO: Info = Info {
    name: "RL.CHARGE",
    event: c"rl.charge",
    summary: "Records units on an existing limiter under the parameters it last used, even beyond its limit: a cost known once the work is done",
    complexity: "O(log N) for a sliding log, O(1) for a bucket or fixed window, O(R) for a sub-interval window of R sub-intervals",
    // COST is required, but a call without it is answered by the command (which says so),
    // not by the server's bare arity error.
    arity: -2,
    keys: Keys::First,
    // Records under the stored parameters: as RL.SLIDE on a log, but clears a ring's
    // sub-intervals as RL.SUBWIN does.
    flags: "write deny-oom",
    categories: "write slow",
    own_category: true,
    args: &[meta::KEY, UNITS, meta::NOW],
    stats: Stats::new(),
};

impl Handler for Peek {
    const INFO: &'static Info = &PEEK_INFO;

    fn counters() -> Option<&'static dyn Count> {
        Some(&PEEK_INFO.stats)
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        // Most calls give no option: nothing to parse.
        let (opts, _) = match args.len() {
            2 => (Opts { cost: 0, now: None }, false),
            _ => parse(&words(args)?, 0)?,
        };
        let clock = clock(ctx, opts.now, Mode::Decide)?;
        let mut key = Key::open(ctx, key_arg(args)?, false);
        // A missing key, the common case of a first call: nothing to look up.
        let Some(entry) = entry(&key)? else {
            return Ok(Answer::One(Reply::Nil));
        };
        Ok(Answer::One((entry.peek)(&mut key, clock, opts.cost)?))
    }
}

impl Handler for Refund {
    const INFO: &'static Info = &REFUND_INFO;

    fn counters() -> Option<&'static dyn Count> {
        Some(&REFUND_INFO.stats)
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let name = key_arg(args)?;
        refund_or_charge(ctx, name, &words(args)?, Mode::Decide, false).map(Answer::One)
    }
}

impl Handler for Charge {
    const INFO: &'static Info = &CHARGE_INFO;

    fn counters() -> Option<&'static dyn Count> {
        Some(&CHARGE_INFO.stats)
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let name = key_arg(args)?;
        refund_or_charge(ctx, name, &words(args)?, Mode::Decide, true).map(Answer::One)
    }
}

/// The generic commands' counters, for `INFO ratelimit`.
pub fn infos() -> [&'static Info; 3] {
    [&PEEK_INFO, &REFUND_INFO, &CHARGE_INFO]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::args::{words, COST_MAX};
    use crate::core::MAX_TIMESTAMP;

    #[test]
    fn options_of_peek_refund_and_charge() {
        let (o, has_cost) = parse(&words("COST 3 NOW 5"), 1).unwrap();
        let five = crate::core::Instant::from_ms(5);
        assert_eq!((o.cost, o.now, has_cost), (3, Some(five), true));
        let (o, has_cost) = parse(&[], 0).unwrap();
        assert_eq!((o.cost, o.now, has_cost), (0, None, false));
        assert_eq!(
            parse(&[b"NOW", b" 5"], 1).err(),
            Some(Error::Range {
                arg: "NOW",
                min: 0,
                max: MAX_TIMESTAMP.ms()
            })
        );
        assert_eq!(
            parse(&[b"cost", b"18446744073709551615"], 1).err(),
            Some(Error::Range {
                arg: "COST",
                min: 0,
                max: COST_MAX
            })
        );
        assert_eq!(
            parse(&words("BURST 1"), 0).err(),
            Some(Error::UnknownOption("BURST".into()))
        );
        assert_eq!(
            parse(&words("NOW"), 0).err(),
            Some(Error::MissingValue("NOW"))
        );
    }
}
