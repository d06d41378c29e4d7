//! `RL.TOP [COUNT n] [POLICY name [SHADOW | BANNED]]`: who a policy refuses most (or its
//! shadow limiters would refuse most, or its penalty banned most), or which keys calls
//! without a policy refuse most, from their sketches (`engine::top`).

use redis_module::{Context, RedisValue};

use super::named;
use crate::core::args::{self, Opt, Value};
use crate::core::error::Error;
use crate::core::meta::{self, ArgKind, Info, Keys, Stats};
use crate::core::top::MAX_COUNT;
use crate::engine::top::{heaviest, heaviest_keys};
use crate::rm::api::{Answer, Arg, Count, Handler};

/// `RL.TOP`.
pub struct Top;

const COUNT_DEFAULT: u64 = 10;

const OPTIONS: [Opt; 4] = [
    Opt::int("COUNT", 1, MAX_COUNT as u64),
    Opt::word("POLICY"),
    Opt::flag("SHADOW"),
    Opt::flag("BANNED"),
];

static TOP_INFO: Info = Info {
    name: "RL.TOP",
    event: c"rl.top",
    summary: "The subjects a policy refused most (POLICY name), or its shadow limiters would have refused most (POLICY name SHADOW), or its penalty banned most (POLICY name BANNED: an upper bound on the bans), or the keys refused most by calls without a policy, over the current and the previous ratelimit.top-window-ms: each its name, an upper bound on its refusals, and how far below it the true count may be. In memory only, on this node",
    complexity: "O(1): at most 128 counters",
    arity: -1,
    keys: Keys::None,
    flags: "readonly",
    categories: "read slow",
    own_category: true,
    args: &[
        meta::option("COUNT", "count"),
        meta::Arg {
            name: "policy",
            kind: ArgKind::String,
            token: Some("POLICY"),
            optional: true,
            multiple: false,
            sub: &[],
        },
        meta::flag("shadow", "SHADOW"),
        meta::flag("banned", "BANNED"),
    ],
    stats: Stats::new(),
};

impl Handler for Top {
    const INFO: &'static Info = &TOP_INFO;

    fn counters() -> Option<&'static dyn Count> {
        None
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let words: Vec<&[u8]> = args
            .get(1..)
            .unwrap_or_default()
            .iter()
            .map(Arg::as_bytes)
            .collect();
        let [count, policy, shadow, banned] = args::options(&words, &OPTIONS)?;
        let count = count.map_or(COUNT_DEFAULT, Value::int) as usize;
        let answer = match (policy, shadow, banned) {
            (_, Some(_), Some(_)) => return Err(Error::Invalid("SHADOW or BANNED, not both")),
            (Some(Value::Word(name)), None, None) => heaviest(named(name)?.top(), count),
            (Some(Value::Word(name)), Some(_), None) => heaviest(named(name)?.shadow_top(), count),
            (Some(Value::Word(name)), None, Some(_)) => heaviest(named(name)?.ban_top(), count),
            (_, Some(_), _) | (_, _, Some(_)) => {
                return Err(Error::Invalid(
                    "SHADOW and BANNED are a policy's: POLICY name SHADOW (or BANNED)",
                ))
            }
            _ => heaviest_keys(count),
        };
        let value = RedisValue::Array(
            answer
                .into_iter()
                .map(|h| {
                    RedisValue::Array(vec![
                        RedisValue::StringBuffer(h.name),
                        RedisValue::Integer(i64::try_from(h.count).unwrap_or(i64::MAX)),
                        RedisValue::Integer(i64::try_from(h.error).unwrap_or(i64::MAX)),
                    ])
                })
                .collect(),
        );
        ctx.reply(Ok(value));
        Ok(Answer::Written(true))
    }
}
