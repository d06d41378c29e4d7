//! Who is refused most: `RL.TOP [COUNT n] [POLICY name]`, from a bounded sketch
//! (`core::top`) per policy, of the subjects its `RL.HIT` calls refused, and one for the
//! calls without a policy, of the keys refused (a kind's command, `RL.ALL`'s refusing key).
//!
//! A sketch is made at its first refusal, counts on the server clock over
//! `ratelimit.top-window-ms`, lives in memory only (empty after a restart, never
//! replicated), and costs an allowed call nothing.

use std::sync::{Mutex, PoisonError};

use redis_module::{Context, RedisValue};

use super::{config, policy};
use crate::core::args::{self, Opt, Value};
use crate::core::error::Error;
use crate::core::meta::{self, ArgKind, Info, Keys, Stats};
use crate::core::top::{Sketch, MAX_COUNT};
use crate::rm::api::{self, Answer, Arg, Count, Handler};

/// A sketch, made at its first refusal.
pub type Shared = Mutex<Option<Box<Sketch>>>;

/// The sketch of the keys refused by calls without a policy.
static WITHOUT_POLICY: Shared = Mutex::new(None);

/// Counts a refusal of `name` (a subject, or a key) in `sketch`, at the server's time.
pub fn record(sketch: &Shared, name: &[u8]) {
    let now = u64::try_from(api::now_ms()).unwrap_or(0);
    let window = config::top_window_ms();
    let mut held = sketch.lock().unwrap_or_else(PoisonError::into_inner);
    held.get_or_insert_with(Sketch::boxed)
        .record(name, now, window);
}

/// Counts a refusal of the key `name` by a call without a policy. (A replica applies its
/// primary's effects, which never pass here; an AOF of the older form, commands with `NOW`,
/// counts its refused calls again while it loads.)
pub fn refused_key(name: &[u8]) {
    record(&WITHOUT_POLICY, name);
}

/// `RL.TOP`.
pub struct Top;

const COUNT_DEFAULT: u64 = 10;

const OPTIONS: [Opt; 2] = [Opt::int("COUNT", 1, MAX_COUNT as u64), Opt::word("POLICY")];

static TOP_INFO: Info = Info {
    name: "RL.TOP",
    event: c"rl.top",
    summary: "The subjects a policy refused most (POLICY name), or the keys refused most by calls without a policy, over the current and the previous ratelimit.top-window-ms: each its name, an upper bound on its refusals, and how far below it the true count may be. In memory only, on this node",
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
        let given = args::options(&words, &OPTIONS)?;
        let count = given[0].map_or(COUNT_DEFAULT, Value::int) as usize;
        let now = u64::try_from(api::now_ms()).unwrap_or(0);
        let window = config::top_window_ms();
        let answer = match given[1] {
            Some(Value::Word(name)) => {
                let tracking = policy::tracking(name)?;
                let held = tracking.top.lock().unwrap_or_else(PoisonError::into_inner);
                held.as_ref().map(|s| s.top(count, now, window))
            }
            _ => {
                let held = WITHOUT_POLICY
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                held.as_ref().map(|s| s.top(count, now, window))
            }
        };
        let value = RedisValue::Array(
            answer
                .unwrap_or_default()
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
