//! What each kind gives the tests that run over every kind (test builds only): the words
//! of a call of its command at the edges of its grammar. The registry hands every kind to
//! those tests (its `visit`), which make the kind's states from the words with the kind's
//! own command: the round trip through every encoding and replication, the fuzzers' seeds,
//! `RL.ALL` against each command alone. A kind that gives no sample does not build.

use super::kind::{Kind, Reply};
use super::{Decision, Instant};

/// The longest window most kinds take: 31 days.
pub const DAY31: u64 = 31 * 24 * 3600 * 1000;
/// The largest cost a client can ask for.
pub const SEQ_END: u64 = (1 << 63) - 1;

/// A kind's sample calls.
pub trait Sample: Kind {
    /// A call of the command that makes the kind's keys, as `RL.ALL` takes it (its keyword
    /// first, e.g. `FIXED 10 1000 ALIGN COST 2`), for a key of this kind at `now`. `p`
    /// picks each value among the edges of its range: limits 1, a few and the largest,
    /// windows of 1 ms, a second and the longest, every option with and without, and a
    /// cost among [`cost_word`]'s. Calls with the same `p` share their parameters (and
    /// `p[0]`, `p[1]` pick the parameters, `p[2]` the cost, `p[3]` the options).
    fn sample_words(p: [u8; 4], now: Instant) -> String;

    /// What the kind's command answers for `decision` (a lease's id aside): the five
    /// fields, unless its reply has another shape (`CL.THROTTLE`'s).
    fn reply(decision: Decision) -> Reply {
        Reply::Decision(decision)
    }

    /// Whether the kind exists in test builds only (not in the server nor its docs).
    const TEST_ONLY: bool = false;
}

/// `options[pick % len]`.
pub fn pick(pick: u8, options: &[u64]) -> u64 {
    options
        .get(usize::from(pick) % options.len().max(1))
        .copied()
        .unwrap_or_default()
}

/// `COST` among the edges of `limit` (none written for 1): 0, 1, 2, the limit, one more,
/// and the largest.
pub fn cost_word(pick: u8, limit: u64) -> String {
    let cost = match pick % 6 {
        0 => 0,
        1 => 1,
        2 => limit,
        3 => limit + 1,
        4 => SEQ_END,
        _ => 2,
    };
    match cost {
        1 => String::new(),
        c => format!(" COST {c}"),
    }
}
