//! `RL.HIT policy subject [COST n] [NOW ms]`: one all-or-nothing decision under a policy's
//! limiters, each on the key derived from the policy, the limiter, its kind and the subject
//! (`core::policy::key_for`).

use std::sync::atomic::Ordering::Relaxed;

use redis_module::Context;
use smallvec::SmallVec;

use super::{compact, policy, Member, Policy};
use crate::core::args::{self, lossy, Value};
use crate::core::error::Error;
use crate::core::kind::{Clock, Mode, RateCall, Reply};
use crate::core::limit::Limit;
use crate::core::meta::{self, ArgKind, Info, Keys, Stats};
use crate::core::policy as def;
use crate::core::{Decision, Wait};
use crate::engine::call::run_at;
use crate::engine::limiters::{self as all, Frames, OnKey, Shadow};
use crate::engine::rate::RateCommand;
use crate::engine::{clock, top};
use crate::kinds::family;
use crate::kinds::penalty::Penalty;
use crate::rm::api::{self, Answer, Arg, Count, Handler, OwnedString, ALL_INLINE};
use crate::rm::key::Key;

/// `RL.HIT policy subject [COST n] [NOW ms]`.
pub struct Hit;

args::option_set! {
    /// `RL.HIT`'s options after the subject.
    struct Options { cost: args::COST }
}

/// A policy's subject, the key its keys are derived from (and its commands declare).
pub const SUBJECT: meta::Arg = meta::Arg {
    name: "subject",
    kind: ArgKind::Key,
    token: None,
    optional: false,
    multiple: false,
    sub: &[],
};

static HIT_INFO: Info = Info {
    name: "RL.HIT",
    event: c"rl.hit",
    summary: "One all-or-nothing decision under a policy's limiters, as RL.ALL decides, each on the key policy|limiter|kind|{subject} (policy|limiter|kind|=subject for a subject with its own hash tag). COST 0 asks every limiter without taking. Replies with RL.ALL's five fields, the name of the limiter that refused (nil when allowed), then each limiter's fields",
    complexity: "The sum of each limiter's own command, for at most 16 limiters",
    arity: -3,
    keys: Keys::Second,
    flags: "write deny-oom",
    categories: "write slow",
    own_category: true,
    args: &[
        meta::arg("policy", ArgKind::String),
        SUBJECT,
        meta::COST,
        meta::NOW,
    ],
    stats: Stats::new(),
};

/// `RL.HIT`'s metadata and counters.
pub fn hit_info() -> &'static Info {
    &HIT_INFO
}

impl Handler for Hit {
    const INFO: &'static Info = &HIT_INFO;

    fn counters() -> Option<&'static dyn Count> {
        Some(&HIT_INFO.stats)
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let (Some(name), Some(subject)) = (args.get(1), args.get(2)) else {
            return Err(Error::Arity);
        };
        let (mut cost, mut now) = (args::COST_DEFAULT, None);
        if let Some(rest) = args.get(3..).filter(|rest| !rest.is_empty()) {
            let mut words: SmallVec<[&[u8]; 4]> = SmallVec::new();
            for a in rest {
                words.push(a.as_bytes());
            }
            let given = Options::parse(&words)?;
            cost = given.cost.map_or(args::COST_DEFAULT, Value::int);
            now = given.now();
        }
        let Some(policy) = policy(name.as_bytes()) else {
            return Err(Error::NoPolicy(lossy(name.as_bytes())));
        };
        let members = match &policy.members {
            Ok(members) => members,
            Err(why) => return Err(Error::UnreadablePolicy(why.clone())),
        };
        let subject = subject.as_bytes();
        match hit(ctx, &policy, members, subject, cost, now) {
            Ok(hit) => {
                if hit.would_refuse != Shadow::NONE {
                    policy.would_have_refused(hit.would_refuse);
                    top::record(&policy.shadow_top, subject);
                }
                match hit.ban {
                    Ban::None => {}
                    Ban::Refused => {
                        policy.banned.fetch_add(1, Relaxed);
                    }
                    Ban::Started => {
                        policy.bans.fetch_add(1, Relaxed);
                        top::record(&policy.ban_top, subject);
                    }
                }
                if hit.allowed {
                    policy.allowed.fetch_add(1, Relaxed);
                } else {
                    policy.refused.fetch_add(1, Relaxed);
                    top::record(&policy.top, subject);
                }
                Ok(Answer::Written(hit.allowed))
            }
            Err(e) => {
                policy.errors.fetch_add(1, Relaxed);
                Err(e)
            }
        }
    }
}

/// What a hit decided: whether it was allowed, the shadow limiters that would have refused
/// it, and what the policy's penalty did.
struct Decided {
    allowed: bool,
    would_refuse: Shadow,
    ban: Ban,
}

/// What a policy's penalty did to a hit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ban {
    /// Nothing: not banned (or no penalty).
    None,
    /// Refused it: the subject was banned.
    Refused,
    /// Started a ban: the hit was refused, and its refusal was the last the ban takes.
    Started,
}

/// The name a hit refused by a policy's penalty gives as the refusing limiter's.
const PENALTY: &[u8] = b"PENALTY";

/// Decides a hit of `cost` on the subject's keys, and replies; under a policy with a
/// penalty, a banned subject is refused without charging any limiter (each answers its
/// state with `COST 0`), and a hit the enforced limiters refuse counts against it.
fn hit(
    ctx: &Context,
    policy: &Policy,
    members: &[Member],
    subject: &[u8],
    cost: u64,
    now: Option<crate::core::Instant>,
) -> Result<Decided, Error> {
    let tagged = def::check_subject(subject)?;
    let mut owned: SmallVec<[OwnedString; ALL_INLINE]> = SmallVec::new();
    let on = match &policy.layout {
        Some(layout) => On::Family(subject, tagged, layout),
        None => {
            let mut key = def::Key::new();
            for m in members {
                key.clear();
                let name = policy.name.as_bytes();
                def::write_key(name, &m.name, m.kind.as_bytes(), subject, tagged, &mut key);
                owned.push(
                    OwnedString::new(ctx, key.as_bytes())
                        .ok_or_else(|| Error::Internal("RL.HIT"))?,
                );
            }
            On::Keys(&owned)
        }
    };
    let clock = clock(ctx, now, Mode::Decide)?;
    let Some(penalty) = policy.penalty else {
        return decide(ctx, policy, members, on, cost, clock, |_| None);
    };
    // The penalty's key: `policy||penalty|{subject}` (no limiter has an empty name).
    let mut key = def::Key::new();
    def::write_key(
        policy.name.as_bytes(),
        b"",
        b"penalty",
        subject,
        tagged,
        &mut key,
    );
    let ban_key = OwnedString::new(ctx, key.as_bytes()).ok_or_else(|| Error::Internal("RL.HIT"))?;
    let banned = |ctx: &Context| -> Result<Option<Decision>, Error> {
        let mut k = Key::open(ctx, ban_key.arg(), false);
        let held = k.state::<Penalty>()?;
        Ok(held
            .filter(|s| s.banned(clock.caller))
            .map(|s| s.evaluate(clock.caller, &penalty, 0)))
    };
    if let Some(ban) = banned(ctx)? {
        let mut got = decide(ctx, policy, members, on, 0, clock, |_| Some(ban))?;
        got.ban = Ban::Refused;
        return Ok(got);
    }
    let mut started = false;
    let mut got = decide(ctx, policy, members, on, cost, clock, |d| {
        if d.allowed || cost == 0 {
            return None;
        }
        // A refusal counts against the subject: recorded, replicated and expiring as an
        // `RL.PENALTY` call of its own would be.
        let strike = RateCall {
            params: penalty,
            cost: 1,
            now: None,
        };
        let ran = run_at::<RateCommand<Penalty>>(ctx, ban_key.arg(), &strike, clock, Mode::Decide);
        let ban = ran.ok().and_then(|_| banned(ctx).ok().flatten());
        started = ban.is_some();
        ban
    })?;
    if started {
        got.ban = Ban::Started;
    }
    Ok(got)
}

/// Where a hit's limiters keep their states: a key each (the members', in order), or the
/// subject's entry in its family (a compact policy, of this layout).
#[derive(Clone, Copy)]
enum On<'a> {
    Keys(&'a [OwnedString]),
    /// A subject (and whether it has a hash tag) and the layout of its family.
    Family(&'a [u8], bool, &'a family::Layout),
}

/// Decides a hit of `cost` at `clock` on the limiters' states `on`, and replies. `ban`,
/// given the hit's five fields, may answer a ban instead (its fields, and the penalty as
/// the refusing limiter).
#[inline(always)]
fn decide(
    ctx: &Context,
    policy: &Policy,
    members: &[Member],
    on: On<'_>,
    cost: u64,
    clock: Clock,
    ban: impl FnOnce(&Decision) -> Option<Decision>,
) -> Result<Decided, Error> {
    let owned = match on {
        On::Keys(owned) => owned,
        On::Family(subject, tagged, layout) => {
            let outcome = match compact::run(
                ctx,
                policy.name.as_bytes(),
                members,
                layout,
                (subject, tagged),
                cost,
                clock,
                policy.shadow,
            )? {
                compact::Ran::Alone(reply) => match members {
                    [m] => return alone_answer(ctx, policy, m, &reply, cost, ban),
                    _ => return Err(Error::Internal("RL.HIT")),
                },
                compact::Ran::All(outcome) => *outcome,
            };
            for (i, (m, c)) in members.iter().zip(&outcome.committed).enumerate() {
                if c.is_some() {
                    policy.took(i, m.prepared.cost(cost));
                }
            }
            return Ok(answer(ctx, policy, members, outcome, ban));
        }
    };
    // A policy of one limiter runs it as its own command would.
    if let ([m], [name]) = (members, owned) {
        if let Some(ran) = m.prepared.alone(ctx, name.arg(), cost, clock) {
            let reply = ran.map_err(|e| Error::for_key(name.arg().as_bytes(), e))?;
            return alone_answer(ctx, policy, m, &reply, cost, ban);
        }
    }
    let names: SmallVec<[Arg; ALL_INLINE]> = owned.iter().map(OwnedString::arg).collect();
    let frames = Frames::new();
    let mut limiters: SmallVec<[OnKey<'static, '_, '_>; ALL_INLINE]> = SmallVec::new();
    for m in members {
        limiters.push(m.prepared.spawn(&frames, cost));
    }
    let outcome = all::run_limiters(ctx, &mut limiters, &names, clock, policy.shadow)?;
    for (i, (l, c)) in limiters.iter().zip(&outcome.committed).enumerate() {
        if c.is_some() {
            policy.took(i, l.cost());
        }
    }
    // Done with: what they kept (a reshaped state) goes before a strike runs a command.
    drop(limiters);
    Ok(answer(ctx, policy, members, outcome, ban))
}

/// Replies the hit of a policy of one limiter `m`, run as its own command (its reply
/// `reply`), or the ban `ban` answers instead.
#[inline(always)]
fn alone_answer(
    ctx: &Context,
    policy: &Policy,
    m: &Member,
    reply: &Reply,
    cost: u64,
    ban: impl FnOnce(&Decision) -> Option<Decision>,
) -> Result<Decided, Error> {
    let d = match reply {
        Reply::Decision(d) | Reply::Lease(d, _) => *d,
        _ => return Err(Error::Internal("RL.HIT")),
    };
    if d.allowed {
        policy.took(0, m.prepared.cost(cost));
    }
    let refusal = (!d.allowed).then_some(&m.name[..]);
    let each = std::slice::from_ref(reply);
    if m.shadow {
        // Its refusal is only told: the hit is allowed, with its fields as if it had
        // allowed (as a policy whose limiters are all shadow ones answers).
        let as_allowed = Decision {
            allowed: true,
            retry_after: Wait::None,
            ..d
        };
        let would_refuse = Shadow(u16::from(!d.allowed));
        let (d, by) = match ban(&as_allowed) {
            Some(ban) => (ban, Some(PENALTY)),
            None => (as_allowed, None),
        };
        api::reply_hit(ctx, &d, by, each, Some(refusal));
        return Ok(Decided {
            allowed: d.allowed,
            would_refuse,
            ban: Ban::None,
        });
    }
    let (d, refusal) = match ban(&d) {
        Some(ban) => (ban, Some(PENALTY)),
        None => (d, refusal),
    };
    api::reply_hit(ctx, &d, refusal, each, None);
    Ok(Decided {
        allowed: d.allowed,
        would_refuse: Shadow::NONE,
        ban: Ban::None,
    })
}

/// Replies a hit's outcome (or the ban `ban` answers instead).
#[inline(always)]
fn answer(
    ctx: &Context,
    policy: &Policy,
    members: &[Member],
    outcome: all::Outcome,
    ban: impl FnOnce(&Decision) -> Option<Decision>,
) -> Decided {
    let name = |i: Option<usize>| i.and_then(|i| members.get(i)).map(|m| &m.name[..]);
    let shadow = (policy.shadow != Shadow::NONE).then(|| name(outcome.would_refuse));
    let (d, refused_by) = match ban(&outcome.decision) {
        Some(ban) => (ban, Some(PENALTY)),
        None => (outcome.decision, name(outcome.refused_by)),
    };
    api::reply_hit(ctx, &d, refused_by, &outcome.entries, shadow);
    Decided {
        allowed: d.allowed,
        would_refuse: outcome.shadow_refusals,
        ban: Ban::None,
    }
}
