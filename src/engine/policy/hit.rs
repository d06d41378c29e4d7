//! `RL.HIT policy subject [COST n] [NOW ms]`: one all-or-nothing decision under a policy's
//! limiters, each on the key derived from the policy, the limiter, its kind and the subject
//! (`core::policy::key_for`).

use std::sync::atomic::Ordering::Relaxed;

use redis_module::Context;
use smallvec::SmallVec;

use super::{policy, Member, Policy};
use crate::core::args::{self, lossy, Value};
use crate::core::error::Error;
use crate::core::kind::{Mode, Reply};
use crate::core::meta::{self, ArgKind, Info, Keys, Stats};
use crate::core::policy as def;
use crate::engine::limiters::{self as all, Frames, OnKey};
use crate::engine::{clock, top};
use crate::rm::api::{self, Answer, Arg, Count, Handler, OwnedString, ALL_INLINE};

/// `RL.HIT policy subject [COST n] [NOW ms]`.
pub struct Hit;

args::option_set! {
    /// `RL.HIT`'s options after the subject.
    struct Options { cost: args::COST }
}

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
        meta::Arg {
            name: "subject",
            kind: ArgKind::Key,
            token: None,
            optional: false,
            multiple: false,
            sub: &[],
        },
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
            Ok(true) => {
                policy.allowed.fetch_add(1, Relaxed);
                Ok(Answer::Written(true))
            }
            Ok(false) => {
                policy.refused.fetch_add(1, Relaxed);
                top::record(&policy.top, subject);
                Ok(Answer::Written(false))
            }
            Err(e) => {
                policy.errors.fetch_add(1, Relaxed);
                Err(e)
            }
        }
    }
}

/// Decides a hit of `cost` on the subject's keys and replies: whether it was allowed.
fn hit(
    ctx: &Context,
    policy: &Policy,
    members: &[Member],
    subject: &[u8],
    cost: u64,
    now: Option<crate::core::Instant>,
) -> Result<bool, Error> {
    let tagged = def::check_subject(subject)?;
    let mut owned: SmallVec<[OwnedString; ALL_INLINE]> = SmallVec::new();
    let mut key = def::Key::new();
    for m in members {
        key.clear();
        let name = policy.name.as_bytes();
        def::write_key(name, &m.name, m.kind.as_bytes(), subject, tagged, &mut key);
        owned.push(OwnedString::new(ctx, key.as_bytes()).ok_or(Error::Internal("RL.HIT"))?);
    }
    let clock = clock(ctx, now, Mode::Decide)?;
    // A policy of one limiter runs it as its own command would.
    if let ([m], [name]) = (members, owned.as_slice()) {
        if let Some(ran) = m.prepared.alone(ctx, name.arg(), cost, clock) {
            let reply = ran.map_err(|e| Error::for_key(name.arg().as_bytes(), e))?;
            let d = match &reply {
                Reply::Decision(d) | Reply::Lease(d, _) => *d,
                _ => return Err(Error::Internal("RL.HIT")),
            };
            if d.allowed {
                policy.took(0, m.prepared.cost(cost));
            }
            let refused_by = (!d.allowed).then_some(&m.name[..]);
            api::reply_hit(ctx, &d, refused_by, std::slice::from_ref(&reply));
            return Ok(d.allowed);
        }
    }
    let names: SmallVec<[Arg; ALL_INLINE]> = owned.iter().map(OwnedString::arg).collect();
    let frames = Frames::new();
    let mut limiters: SmallVec<[OnKey<'static, '_, '_>; ALL_INLINE]> = SmallVec::new();
    for m in members {
        limiters.push(m.prepared.spawn(&frames, cost));
    }
    let outcome = all::run_limiters(ctx, &mut limiters, &names, clock)?;
    for (i, (l, c)) in limiters.iter().zip(&outcome.committed).enumerate() {
        if c.is_some() {
            policy.took(i, l.cost());
        }
    }
    let refused_by = outcome
        .refused_by
        .and_then(|i| members.get(i))
        .map(|m| &m.name[..]);
    api::reply_hit(ctx, &outcome.decision, refused_by, &outcome.entries);
    Ok(outcome.decision.allowed)
}
