//! `CL.THROTTLE key max_burst count_per_period period [quantity] [NOW ms]`: redis-cell's
//! command, as a drop-in. `count_per_period` units flow in per `period` seconds, evenly, and
//! the bucket holds `max_burst + 1`; a call takes `quantity` units (default 1) if they are
//! there. It replies as redis-cell does:
//!
//! ```text
//! [limited (0 or 1), limit (max_burst + 1), remaining, retry_after_s (-1 when allowed
//!  or never), reset_after_s]
//! ```
//!
//! the waits in whole seconds, rounded up. The bucket is the generic cell rate algorithm of
//! `core::gcra`, the one `RL.TOKEN` runs (a `CL.THROTTLE` bucket is an `RL.TOKEN` one of
//! `count_per_period` per `period · 1000` ms with a burst of `max_burst + 1`), so its
//! timing is exact in integer milliseconds, and like every command here it replicates its
//! decision, not the call (see `docs/commands.md`, "CL.THROTTLE").
//!
//! Effect: `CL.THROTTLE max_burst count period [quantity] NOW at` (the quantity when it is
//! not 1). Encoding (kind 7): the buckets' version 3, `latest debt limit window_ms burst`.
//! The key keeps it compact: 16 bytes, the parameters interned.

use crate::core::args::{self, positional, COST_MAX};
use crate::core::effect::Out;
use crate::core::error::Error;
use crate::core::gcra::{Gcra, Params, MAX_RATE_LIMIT, MAX_WINDOW_MS};
use crate::core::kind::{Form, Rate, RateCall, Reply};
use crate::core::meta::{self, arg, ArgKind, Info, Keys, Stats};
use crate::core::{Decision, Wait};

/// A `CL.THROTTLE` bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Throttle(pub Gcra);

/// The longest period, in seconds: the buckets' longest window.
pub const MAX_PERIOD_S: u64 = MAX_WINDOW_MS / 1000;

args::option_set! {
    /// `CL.THROTTLE`'s options after its numbers: none but `NOW`, the call's.
    struct Options {}
}

crate::core::gcra::bucket_kind!(Throttle, false);

static THROTTLE_INFO: Info = Info {
    name: "CL.THROTTLE",
    event: c"cl.throttle",
    summary: "redis-cell's rate limiter, as a drop-in: count_per_period units per period seconds, holding at most max_burst + 1; takes quantity units if they are there. Replies [limited, limit, remaining, retry_after_s, reset_after_s]",
    complexity: "O(1)",
    arity: -5,
    keys: Keys::First,
    flags: "write deny-oom fast",
    categories: "write fast",
    own_category: true,
    args: &[],
    stats: Stats::new(),
};

/// Whole seconds from milliseconds, rounded up: a caller told to wait that long never
/// comes back too early.
fn seconds(ms: u64) -> i64 {
    i64::try_from(ms.div_ceil(1000)).unwrap_or(i64::MAX)
}

/// redis-cell's reply for a decision.
pub fn reply_of(d: Decision) -> [i64; 5] {
    let retry_after = match (d.allowed, d.retry_after) {
        (false, Wait::For(d)) => seconds(d.ms()),
        // Allowed, or never (a quantity above the burst): -1, as redis-cell says.
        _ => -1,
    };
    [
        i64::from(!d.allowed),
        i64::try_from(d.limit).unwrap_or(i64::MAX),
        i64::try_from(d.remaining).unwrap_or(i64::MAX),
        retry_after,
        seconds(d.reset_after.ms()),
    ]
}

impl Rate for Throttle {
    const COMMAND: &'static str = "CL.THROTTLE";
    const CODE: u8 = 7;
    const FORM: Form = Form::Compact;
    const INFO: &'static Info = &THROTTLE_INFO;
    const GRAMMAR: args::Grammar = args::Grammar {
        positional: args::Positional::Numbers(4),
        params: &[
            arg("max_burst", ArgKind::Integer),
            arg("count_per_period", ArgKind::Integer),
            arg("period", ArgKind::Integer),
            meta::Arg {
                optional: true,
                ..arg("quantity", ArgKind::Integer)
            },
        ],
        options: Options::TABLE,
    };
    /// Among `RL.ALL`'s limiters and a policy's as `THROTTLE max_burst count_per_period
    /// period [quantity]`, answering the five fields every `RL.*` limiter answers there.
    const KEYWORD: Option<&'static str> = Some("THROTTLE");
    const EFFECT_CODE: u8 = 8;
    /// Its own command answers redis-cell's fields.
    const ALONE: bool = false;
    type Args = Params;

    fn params(args: &Params) -> &Params {
        args
    }

    fn parse(words: &[&[u8]]) -> Result<RateCall<Params>, Error> {
        let max_burst = positional(words, 0, "max_burst", 0, MAX_RATE_LIMIT - 1)?;
        let count = positional(words, 1, "count_per_period", 1, MAX_RATE_LIMIT)?;
        let period = positional(words, 2, "period", 1, MAX_PERIOD_S)?;
        // An optional fourth number: anything else starts the options.
        let (quantity, rest) = match words.get(3) {
            Some(word) if !word.eq_ignore_ascii_case(b"NOW") => (
                args::int(word, "quantity", 0, COST_MAX)?,
                words.get(4..).unwrap_or_default(),
            ),
            _ => (
                args::COST_DEFAULT,
                words.get(3..).unwrap_or_default(),
            ),
        };
        let o = Options::parse(rest)?;
        Ok(RateCall {
            params: Params {
                limit: count,
                window_ms: period * 1000,
                burst: max_burst + 1,
                max_delay_ms: 0,
            },
            cost: quantity,
            now: o.now(),
        })
    }

    fn fresh(p: &Params) -> Throttle {
        Throttle(Gcra::new(p))
    }

    fn write_params<O: Out>(p: &Params, out: &mut O) {
        out.number(p.burst - 1)
            .number(p.limit)
            .number(p.window_ms / 1000);
    }

    /// The quantity, a fourth number, is the cost.
    fn fixes_cost(words: &[&[u8]]) -> bool {
        words.len() >= 4
    }

    /// The quantity is a positional word, written when it is not 1.
    fn write_call<O: Out>(call: &RateCall<Params>, out: &mut O) {
        Self::write_params(&call.params, out);
        if call.cost != args::COST_DEFAULT {
            out.number(call.cost);
        }
    }

    fn reply(d: Decision) -> Reply {
        Reply::Ints(reply_of(d))
    }
}

#[cfg(test)]
mod tests;
