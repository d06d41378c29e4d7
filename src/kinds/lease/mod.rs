//! Leases: a concurrency limit, at most `limit` units held at once, each acquisition
//! holding its cost under a lease that ends at a fixed time unless released or extended
//! first (the semaphore is [`Leases`]). Three commands:
//!
//! - `RL.ACQUIRE key limit lease_ms [ID lease-id] [COST n] [BLOCK timeout_ms] [NOW ms]`
//!   takes units under a lease (the same `ID` while held renews it); with `BLOCK`, it
//!   waits for them, first come first served (the generic layers' waiting facility);
//! - `RL.RELEASE key lease-id [NOW ms]` frees a lease;
//! - `RL.EXTEND key lease-id lease_ms [NOW ms]` makes a lease end `lease_ms` from now.
//!
//! Effects: a grant, a renewal, a release and an extension each propagate as `RL.APPLY key
//! effect` with the decision time and the lease's id in hex (an id may hold any byte, an
//! effect's words none of a space):
//!
//! ```text
//! RL.APPLY jobs "RL.ACQUIRE 5 30000 ID 313730302d30 COST 2 NOW 1700000000000"
//! RL.APPLY jobs "RL.RELEASE 313730302d30 NOW 1700000000450"
//! RL.APPLY jobs "RL.EXTEND 313730302d30 60000 NOW 1700000000450"
//! ```
//!
//! Encoding (kind 6), version 1: `latest limit last_ms last_seq nleases (end_delta cost
//! idlen id)*`, leases ordered by end then id, the first delta from `latest`, each next from
//! the end before (see [`Leases::leases`]).

mod index;
mod order;
mod semaphore;

pub use semaphore::{
    implied_last_id, server_form, valid_id, Acquired, Leases, Params, Refusal, MAX_ID_LEN,
    MAX_LEASES, MAX_LEASE_MS, MAX_LIMIT, PURGE_MAX,
};

use std::borrow::Cow;

use crate::core::args::{self, lossy, Opt, COST};
use crate::core::codec::{Malformed, Reader, Sink};
use crate::core::effect::{from_hex, Out};
use crate::core::error::Error;
use crate::core::kind::{Change, Clock, Command, Form, Encoding, Kind, Mode, Ran, Reply};
use crate::core::meta::{self, arg, Arg, ArgKind, Info, Keys, Stats};
use crate::core::{Decision, Duration, Instant, Wait};

/// The longest `BLOCK`: a year (0 waits without limit).
pub const BLOCK_MAX_MS: u64 = 365 * 24 * 3600 * 1000;

impl Kind for Leases {
    const COMMAND: &'static str = "RL.ACQUIRE";
    const CODE: u8 = 6;
    const FORM: Form = Form::Boxed;

    fn latest_time(&self) -> Instant {
        Leases::latest(self)
    }

    fn empty_time(&self) -> Option<Instant> {
        Leases::empty_at(self)
    }

    fn peek(&self, now: Instant) -> Decision {
        Leases::peek(self, now)
    }

    /// Whether `cost` units are free now, and when they will be.
    fn peek_cost(&self, now: Instant, cost: u64) -> Decision {
        Leases::peek_cost(self, now, cost)
    }

    /// Leases are given back by `RL.RELEASE`.
    fn refund(&mut self, _now: Instant, _units: u64) -> Result<Decision, Error> {
        Err(Error::LeaseRefund)
    }

    fn refundable(&self) -> Result<(), Error> {
        Err(Error::LeaseRefund)
    }

    /// Leases hold units until released: `RL.CHARGE` records on rate limiters.
    fn charge(&mut self, _now: Instant, _units: u64) -> Result<Option<Decision>, Error> {
        Err(Error::LeaseCharge)
    }

    fn can_charge(&self, _now: Instant, _units: u64) -> Result<bool, Error> {
        Err(Error::LeaseCharge)
    }
}

impl Encoding for Leases {
    const VERSION: u8 = 1;

    fn encode<S: Sink>(&self, out: &mut S) {
        let (last_ms, last_seq) = self.last_id();
        for v in [Leases::latest(self).ms(), self.limit(), last_ms.ms(), last_seq] {
            out.varint(v);
        }
        let leases = self.leases();
        out.varint(leases.len() as u64);
        let mut prev = Leases::latest(self);
        for (end, cost, id) in leases {
            out.varint((end - prev).ms());
            out.varint(cost);
            out.varint(id.len() as u64);
            out.put(id);
            prev = end;
        }
    }

    fn decode(version: u8, r: &mut Reader) -> Result<Self, Malformed> {
        if version != 1 {
            return Err(Malformed("no such version for this kind"));
        }
        let (latest, limit) = (Instant::from_ms(r.varint()?), r.varint()?);
        let last_id = (Instant::from_ms(r.varint()?), r.varint()?);
        let n = r.count(4)?;
        if n > MAX_LEASES {
            return Err(Malformed("too many leases"));
        }
        let mut leases = Vec::with_capacity(n);
        let mut end = latest;
        for _ in 0..n {
            end = end
                .checked_add(Duration::from_ms(r.varint()?))
                .ok_or(Malformed("time overflows"))?;
            let cost = r.varint()?;
            let len = r.count(1)?;
            if len > MAX_ID_LEN {
                return Err(Malformed("an id is too long"));
            }
            leases.push((end, cost, r.bytes(len)?));
        }
        let last_id = implied_last_id(latest, last_id, &leases);
        Leases::from_parts(limit, latest, last_id, &leases).map_err(|e| Malformed(e.0))
    }

    fn heap_size(&self) -> usize {
        Leases::heap_size(self)
    }

    fn allocations(&self) -> usize {
        Leases::allocations(self)
    }
}

/// The error for a lease a key cannot take (see [`Refusal`]); `id` the lease's, if named.
fn refused(r: Refusal, id: Option<&[u8]>) -> Error {
    match r {
        Refusal::Full => Error::TooManyLeases(MAX_LEASES),
        Refusal::IdAhead => Error::LeaseIdAhead(lossy(id.unwrap_or_default())),
        Refusal::OutOfRange => Error::Invalid("an RL.ACQUIRE effect's cost or id is out of range"),
        Refusal::NoIdLeft => {
            Error::Invalid("no lease id is left to make at this time: give one with ID")
        }
    }
}

/// A lease id as given: as it is from a client, in hex in an effect.
fn id_arg(word: &[u8], hex: bool) -> Result<Cow<'_, [u8]>, Error> {
    let id = if hex {
        Cow::Owned(from_hex(word).ok_or_else(|| Error::Invalid("RL.APPLY effect is malformed"))?)
    } else {
        Cow::Borrowed(word)
    };
    if !valid_id(&id) {
        return Err(Error::Invalid("a lease id must be 1 to 512 bytes"));
    }
    Ok(id)
}

/// `RL.ACQUIRE key limit lease_ms [ID lease-id] [COST n] [BLOCK timeout_ms] [NOW ms]`.
pub struct Acquire;

/// A parsed `RL.ACQUIRE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcquireCall<'a> {
    pub params: Params,
    pub id: Option<Cow<'a, [u8]>>,
    pub cost: u64,
    pub block: Option<u64>,
    pub now: Option<Instant>,
}

const ID: Opt = Opt::word("ID").doc("lease-id");
const BLOCK: Opt = Opt::duration("BLOCK", 0, BLOCK_MAX_MS).doc("timeout-ms");
const LEASE_MS: Arg = arg("lease-ms", ArgKind::Integer);

args::option_set! {
    /// `RL.ACQUIRE`'s options after its two numbers.
    struct AcquireOptions { id: ID, cost: COST, block: BLOCK }
}

/// `RL.ACQUIRE`'s grammar after the key (`BLOCK` is refused in `RL.ALL` and policies).
const ACQUIRE_GRAMMAR: args::Grammar = args::Grammar {
    positional: args::Positional::Numbers(2),
    params: &[meta::LIMIT, LEASE_MS],
    options: AcquireOptions::TABLE,
};
const LEASE_ID: Arg = arg("lease-id", ArgKind::String);

impl Acquire {
    /// The answer to a call of its lease: its decision, seen from the caller's time, with
    /// the reset at the key's empty time.
    fn seen(leases: &Leases, d: Decision, behind: Duration, now: Instant) -> Decision {
        d.seen_from_behind(behind)
            .resetting_at(leases.empty_at(), now)
    }

    fn on(
        leases: &mut Leases,
        call: &AcquireCall<'_>,
        clock: Clock,
        mode: Mode,
    ) -> Result<(Reply, bool, bool), Error> {
        let behind = leases.latest().since(clock.caller);
        let (decision, id, changed) = match mode {
            Mode::Check | Mode::Apply => {
                let id = call
                    .id
                    .as_deref()
                    .ok_or_else(|| Error::Invalid("an RL.ACQUIRE effect needs ID"))?;
                if mode == Mode::Check {
                    leases
                        .check_record(clock.caller, call.cost, id)
                        .map_err(|r| refused(r, Some(id)))?;
                    return Ok((Reply::Ok, false, false));
                }
                leases
                    .record(clock.caller, &call.params, call.cost, id)
                    .map_err(|r| refused(r, Some(id)))?;
                (leases.peek(clock.caller), Some(id.to_vec()), true)
            }
            Mode::Decide => {
                let got = leases
                    .acquire(clock.caller, &call.params, call.cost, call.id.as_deref())
                    .map_err(|r| refused(r, call.id.as_deref()))?;
                let changed = got.id.is_some();
                (got.decision, got.id, changed)
            }
        };
        let decision = Acquire::seen(leases, decision, behind, clock.caller);
        let waits = !changed && decision.retry_after != Wait::Never;
        Ok((Reply::Lease(decision, id), changed, waits))
    }
}

static ACQUIRE_INFO: Info = Info {
    name: "RL.ACQUIRE",
    event: c"rl.acquire",
    summary: "Concurrency limit: takes COST units (default 1) of limit under a lease that ends lease_ms after it was granted unless released or extended first; the same ID while held renews its lease; BLOCK waits for units, first come first served",
    complexity: "O(N/128 + log N) where N is the number of leases the key holds; at most 64 ended leases are dropped per call",
    arity: -4,
    keys: Keys::First,
    // Sums over the end order's chunks (N/128 of them) besides O(log N) steps: bounded,
    // not O(log N). It may block (BLOCK), as BLPOP does.
    flags: "write deny-oom",
    categories: "write slow blocking",
    own_category: true,
    args: &[],
    stats: Stats::new(),
};

impl Command for Acquire {
    type Kind = Leases;
    const INFO: &'static Info = &ACQUIRE_INFO;
    const SPEC: Option<(&'static str, args::Grammar)> = Some(("ACQUIRE", ACQUIRE_GRAMMAR));
    type Call<'a> = AcquireCall<'a>;

    fn doc_args() -> Vec<Arg> {
        ACQUIRE_GRAMMAR.doc_args()
    }

    fn parse<'a>(words: &[&'a [u8]], effect: bool) -> Result<AcquireCall<'a>, Error> {
        let limit = args::positional(words, 0, "limit", 1, MAX_LIMIT)?;
        let lease_ms = args::positional_duration(words, 1, "lease_ms", 1, MAX_LEASE_MS)?;
        let o = AcquireOptions::parse(words.get(2..).unwrap_or_default())?;
        let id = match o.id {
            Some(args::Value::Word(w)) => Some(id_arg(w, effect)?),
            _ => None,
        };
        Ok(AcquireCall {
            params: Params { limit, lease_ms },
            id,
            cost: args::cost(o.cost),
            block: o.block.map(args::Value::int),
            now: o.now(),
        })
    }

    fn owned(call: &AcquireCall<'_>) -> AcquireCall<'static> {
        AcquireCall {
            id: call.id.as_deref().map(|id| Cow::Owned(id.to_vec())),
            ..*call
        }
    }

    fn now(call: &AcquireCall<'_>) -> Option<Instant> {
        call.now
    }

    fn cost(call: &AcquireCall<'_>) -> u64 {
        call.cost
    }

    fn set_cost(call: &mut AcquireCall<'_>, cost: u64) {
        call.cost = cost;
    }

    /// Every hit takes a lease of its own, with an id the server makes.
    fn in_policy(call: &AcquireCall<'_>) -> Result<(), Error> {
        match call.id {
            Some(_) => Err(Error::Invalid(
                "ID is not allowed in a policy: each RL.HIT takes a lease of its own",
            )),
            None => Ok(()),
        }
    }

    fn run(
        state: Option<&mut Leases>,
        call: &AcquireCall<'_>,
        clock: Clock,
        mode: Mode,
    ) -> Result<Ran<Leases>, Error> {
        match state {
            Some(leases) => {
                let before = leases.empty_at();
                let (reply, changed, wait) = Acquire::on(leases, call, clock, mode)?;
                let change = if changed {
                    let after = leases.empty_at();
                    Change::Held { before, after }
                } else {
                    Change::None
                };
                Ok(Ran {
                    reply,
                    change,
                    wait,
                })
            }
            None => {
                let mut fresh = Leases::new(&call.params);
                let (reply, changed, wait) = Acquire::on(&mut fresh, call, clock, mode)?;
                let change = if changed {
                    Change::New {
                        empty: fresh.empty_time(),
                        state: fresh,
                    }
                } else {
                    Change::None
                };
                Ok(Ran {
                    reply,
                    change,
                    wait,
                })
            }
        }
    }

    /// `RL.ACQUIRE limit lease_ms ID <hex> [COST n] NOW at`: the lease granted or renewed.
    fn effect<O: Out>(call: &AcquireCall<'_>, reply: &Reply, at: Instant, out: &mut O) {
        let id = match reply {
            Reply::Lease(_, Some(id)) => id.as_slice(),
            _ => call.id.as_deref().unwrap_or_default(),
        };
        out.number(call.params.limit)
            .number(call.params.lease_ms)
            .word(b"ID")
            .hex(id);
        if call.cost != args::COST_DEFAULT {
            out.option("COST", call.cost);
        }
        out.now(at);
    }

    fn block(call: &AcquireCall<'_>) -> Option<u64> {
        call.block
    }

    /// A renewal of a lease the caller holds does not queue.
    fn jumps_queue(leases: &Leases, call: &AcquireCall<'_>, now: Instant) -> bool {
        call.id.as_deref().is_some_and(|id| leases.holds(now, id))
    }

    fn refusal(state: Option<&Leases>, call: &AcquireCall<'_>, now: Instant) -> Reply {
        let decision = match state {
            Some(l) => {
                let d = l.evaluate(now, &call.params, call.cost, call.id.as_deref());
                Acquire::seen(l, d, l.latest().since(now), now)
            }
            None => Leases::new(&call.params).evaluate(now, &call.params, call.cost, None),
        };
        Reply::Lease(
            Decision {
                allowed: false,
                ..decision
            },
            None,
        )
    }

    fn fresh(call: &AcquireCall<'_>) -> Option<Leases> {
        Some(Leases::new(&call.params))
    }

    fn evaluate(leases: &Leases, call: &AcquireCall<'_>, now: Instant) -> Decision {
        leases.evaluate(now, &call.params, call.cost, call.id.as_deref())
    }

    fn evaluate_free(leases: &Leases, call: &AcquireCall<'_>, now: Instant) -> Decision {
        leases.evaluate(now, &call.params, 0, call.id.as_deref())
    }

    /// A lease id the key cannot take is an error, whatever the units.
    fn check(leases: &Leases, call: &AcquireCall<'_>, now: Instant) -> Result<(), Error> {
        match call.id.as_deref() {
            Some(id) if call.cost > 0 => leases
                .check_id(now, id)
                .map_err(|r| refused(r, Some(id))),
            _ => Ok(()),
        }
    }

    fn fits(leases: &Leases, call: &AcquireCall<'_>, now: Instant) -> Result<(), Error> {
        leases
            .check_grant(now, call.cost, call.id.as_deref())
            .map_err(|r| refused(r, call.id.as_deref()))
    }

    fn commit(leases: &mut Leases, call: &AcquireCall<'_>, now: Instant) -> Option<Reply> {
        let got = leases
            .acquire(now, &call.params, call.cost, call.id.as_deref())
            .ok()?;
        Some(Reply::Lease(got.decision, got.id))
    }

    /// Its entry in `RL.ALL`'s reply: `RL.ACQUIRE`'s, with the lease id granted (nil when
    /// none was).
    fn entry(decision: Decision, committed: Option<&Reply>) -> Reply {
        let id = match committed {
            Some(Reply::Lease(_, id)) => id.clone(),
            _ => None,
        };
        Reply::Lease(decision, id)
    }
}

/// `RL.RELEASE key lease-id [NOW ms]`.
pub struct Release;

/// `RL.EXTEND key lease-id lease_ms [NOW ms]`.
pub struct Extend;

/// A parsed `RL.RELEASE` or `RL.EXTEND` (`lease_ms` 0 for a release).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldCall<'a> {
    pub id: Cow<'a, [u8]>,
    pub lease_ms: u64,
    pub now: Option<Instant>,
}

args::option_set! {
    /// `RL.RELEASE`'s and `RL.EXTEND`'s options: none but `NOW`.
    struct HeldOptions {}
}

/// Parses `RL.RELEASE` (`extend` false) or `RL.EXTEND`.
fn parse_held<'a>(words: &[&'a [u8]], hex: bool, extend: bool) -> Result<HeldCall<'a>, Error> {
    let id = id_arg(words.first().ok_or_else(|| Error::Arity)?, hex)?;
    let lease_ms = if extend {
        let word = words.get(1).ok_or_else(|| Error::Arity)?;
        args::duration(word, "lease_ms", 1, MAX_LEASE_MS)?
    } else {
        0
    };
    let rest = words.get(if extend { 2 } else { 1 }..).unwrap_or_default();
    let o = HeldOptions::parse(rest)?;
    Ok(HeldCall {
        id,
        lease_ms,
        now: o.now(),
    })
}

/// The answer to a release or an extension of a lease that is not held (or a missing key).
fn not_held(leases: Option<&Leases>, now: Instant) -> Decision {
    match leases {
        Some(l) => Decision {
            allowed: false,
            ..l.peek(now)
                .seen_from_behind(l.latest().since(now))
                .resetting_at(l.empty_at(), now)
        },
        None => Decision {
            allowed: false,
            limit: 0,
            remaining: 0,
            retry_after: Wait::None,
            reset_after: Duration::ZERO,
        },
    }
}

/// `RL.RELEASE` (`extend` false) and `RL.EXTEND` on a key's leases.
fn change(
    state: Option<&mut Leases>,
    call: &HeldCall<'_>,
    clock: Clock,
    mode: Mode,
    extend: bool,
) -> Result<Ran<Leases>, Error> {
    let Some(leases) = state else {
        return Ok(Ran::unchanged(Reply::Decision(not_held(None, clock.caller))));
    };
    if mode == Mode::Check {
        // A release or an extension always applies (to a lease not held, as nothing).
        return Ok(Ran::unchanged(Reply::Ok));
    }
    let before = leases.empty_at();
    let behind = leases.latest().since(clock.caller);
    let done = if extend {
        leases.extend(clock.caller, &call.id, call.lease_ms)
    } else {
        leases.release(clock.caller, &call.id)
    };
    let Some(decision) = done else {
        return Ok(Ran::unchanged(Reply::Decision(not_held(
            Some(leases),
            clock.caller,
        ))));
    };
    let after = leases.empty_at();
    let decision = decision
        .seen_from_behind(behind)
        .resetting_at(after, clock.caller);
    Ok(Ran {
        reply: Reply::Decision(decision),
        change: Change::Held { before, after },
        wait: false,
    })
}

/// What `RL.RELEASE` and `RL.EXTEND` share as commands.
macro_rules! held_command {
    ($command:ident, $extend:expr, $info:expr) => {
        impl Command for $command {
            type Kind = Leases;
            const INFO: &'static Info = $info;
            type Call<'a> = HeldCall<'a>;
            // 0 in the first field: the lease was not held, an answer.
            const REFUSES: bool = false;

            fn parse<'a>(words: &[&'a [u8]], effect: bool) -> Result<HeldCall<'a>, Error> {
                parse_held(words, effect, $extend)
            }

            fn owned(call: &HeldCall<'_>) -> HeldCall<'static> {
                HeldCall {
                    id: Cow::Owned(call.id.to_vec()),
                    ..*call
                }
            }

            fn now(call: &HeldCall<'_>) -> Option<Instant> {
                call.now
            }

            fn cost(_call: &HeldCall<'_>) -> u64 {
                0
            }

            fn set_cost(_call: &mut HeldCall<'_>, _cost: u64) {}

            fn run(
                state: Option<&mut Leases>,
                call: &HeldCall<'_>,
                clock: Clock,
                mode: Mode,
            ) -> Result<Ran<Leases>, Error> {
                change(state, call, clock, mode, $extend)
            }

            /// `RL.RELEASE <hex> NOW at`, `RL.EXTEND <hex> lease_ms NOW at`.
            fn effect<O: Out>(call: &HeldCall<'_>, _reply: &Reply, at: Instant, out: &mut O) {
                out.hex(&call.id);
                if $extend {
                    out.number(call.lease_ms);
                }
                out.now(at);
            }

            fn refusal(state: Option<&Leases>, _call: &HeldCall<'_>, now: Instant) -> Reply {
                Reply::Decision(not_held(state, now))
            }

            fn evaluate(leases: &Leases, _call: &HeldCall<'_>, now: Instant) -> Decision {
                leases.peek(now)
            }

            fn evaluate_free(leases: &Leases, _call: &HeldCall<'_>, now: Instant) -> Decision {
                leases.peek(now)
            }

            fn commit(_leases: &mut Leases, _call: &HeldCall<'_>, _now: Instant) -> Option<Reply> {
                None
            }
        }
    };
}

static RELEASE_INFO: Info = Info {
        name: "RL.RELEASE",
        event: c"rl.release",
        summary: "Frees a lease taken with RL.ACQUIRE; answers 0 first for a lease that has ended or never existed",
        complexity: "O(N/128 + log N) where N is the number of leases the key holds",
        arity: -3,
        keys: Keys::First,
        flags: "write",
        categories: "write slow",
        own_category: true,
        args: &[meta::KEY, LEASE_ID, meta::NOW],
        stats: Stats::new(),
};

held_command!(Release, false, &RELEASE_INFO);

static EXTEND_INFO: Info = Info {
        name: "RL.EXTEND",
        event: c"rl.extend",
        summary: "Makes a lease taken with RL.ACQUIRE end lease_ms from now; answers 0 first for a lease that has ended",
        complexity: "O(N/128 + log N) where N is the number of leases the key holds",
        arity: -4,
        keys: Keys::First,
        flags: "write",
        categories: "write slow",
        own_category: true,
        args: &[meta::KEY, LEASE_ID, LEASE_MS, meta::NOW],
        stats: Stats::new(),
};

held_command!(Extend, true, &EXTEND_INFO);

/// A lease id among the edges at `now` (test builds): none (the server makes one), one
/// byte, the longest, and the server's own form at the end of its sequence and around
/// `now`.
#[cfg(test)]
pub fn sample_id(pick: u8, now: Instant) -> Option<String> {
    const SEQ_END: u64 = crate::core::sample::SEQ_END;
    Some(match pick % 9 {
        0 | 1 => return None,
        2 => "a".to_string(),
        3 => "x".repeat(512),
        4 => format!("{now}-{SEQ_END}"),
        5 => format!("{now}-{}", SEQ_END - 1),
        6 => format!("{}-0", now + 1),
        7 => format!("{}-0", now.saturating_sub(Duration::MS)),
        _ => format!("{}-7", now + 5),
    })
}

#[cfg(test)]
mod parse_tests;
