//! `RL.PROBE key limit window_ms [COST n] [NOW ms]` (test builds only): at most `limit`
//! units in a window of `window_ms` that opens with the first unit. It exists to prove the
//! registry's claim: a kind added as this one folder and its registry line (under
//! `#[cfg(test)]`) enters every test that runs over the kinds (the round trip through
//! every encoding and replication, the fuzzers' seeds, `RL.ALL` against each command
//! alone, the effect codes) with no other edit.
//!
//! Encoding (kind 250): version 1, `latest count ahead limit window_ms`, `ahead` the open
//! window's end less `latest` (0 with no unit counted). The key keeps it compact.

use crate::core::args::{self, positional, COST};
use crate::core::codec::{Malformed, Reader, Sink};
use crate::core::effect::Out;
use crate::core::error::Error;
use crate::core::kind::{Compact, Encoding, Form, Params2, Rate, RateCall};
use crate::core::limit::Limit;
use crate::core::meta::{self, Info, Keys, Stats};
use crate::core::sample::{self, Sample};
use crate::core::{Decision, Duration, Instant, Wait, MAX_TIMESTAMP};

const MAX_LIMIT: u64 = u32::MAX as u64;
const MAX_WINDOW_MS: u64 = sample::DAY31;

/// The parameters of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub limit: u64,
    pub window_ms: u64,
}

impl Params {
    fn window(&self) -> Duration {
        Duration::from_ms(self.window_ms)
    }
}

/// The open window: `count` units until `end` (with none counted, no window: `end` the
/// epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    latest: Instant,
    end: Instant,
    count: u32,
    limit: u32,
    window_ms: u32,
}

impl Probe {
    /// The one validating constructor: a count only in a window open after `latest`, for
    /// `ahead` more.
    fn from_parts(p: Params, latest: Instant, count: u64, ahead: Duration) -> Option<Probe> {
        let valid = (1..=MAX_LIMIT).contains(&p.limit)
            && (1..=MAX_WINDOW_MS).contains(&p.window_ms)
            && latest <= MAX_TIMESTAMP
            && ahead.ms() <= MAX_WINDOW_MS
            && (count == 0) == ahead.is_zero();
        valid.then_some(Probe {
            latest,
            end: if count == 0 { Instant::EPOCH } else { latest + ahead },
            count: u32::try_from(count).ok()?,
            limit: p.limit as u32,
            window_ms: p.window_ms as u32,
        })
    }

    fn count_at(&self, now: Instant) -> u64 {
        if now < self.end {
            u64::from(self.count)
        } else {
            0
        }
    }

    fn recorded(&self, now: Instant, p: &Params, cost: u64) -> Option<Probe> {
        let now = now.max(self.latest);
        let count = self.count_at(now).saturating_add(cost);
        let end = if now < self.end { self.end } else { now + p.window() };
        let ahead = if count == 0 { Duration::ZERO } else { end - now };
        Probe::from_parts(*p, now, count, ahead)
    }
}

impl Limit for Probe {
    type Params = Params;
    type Stored = Params;

    fn stored(&self) -> Params {
        Params {
            limit: u64::from(self.limit),
            window_ms: u64::from(self.window_ms),
        }
    }

    fn give_back(&mut self, now: Instant, units: u64) -> Decision {
        let now = now.max(self.latest);
        let count = self.count_at(now).saturating_sub(units);
        let ahead = if count == 0 { Duration::ZERO } else { self.end - now };
        if let Some(next) = Probe::from_parts(self.stored(), now, count, ahead) {
            *self = next;
        }
        self.evaluate(now, &self.stored(), 0)
    }

    fn evaluate(&self, now: Instant, p: &Params, cost: u64) -> Decision {
        let now = now.max(self.latest);
        let count = self.count_at(now);
        let end = if now < self.end { self.end } else { now + p.window() };
        let allowed = count.saturating_add(cost) <= p.limit;
        let after = if allowed { count + cost } else { count };
        Decision {
            allowed,
            limit: p.limit,
            remaining: p.limit.saturating_sub(after),
            retry_after: match (allowed, cost > p.limit) {
                (true, _) => Wait::None,
                (false, true) => Wait::Never,
                (false, false) => Wait::For(end - now),
            },
            reset_after: if after > 0 { end - now } else { Duration::ZERO },
        }
    }

    fn record(&mut self, now: Instant, p: &Params, cost: u64) -> bool {
        self.recorded(now, p, cost).map(|next| *self = next).is_some()
    }

    fn can_record(&self, now: Instant, p: &Params, cost: u64) -> bool {
        self.recorded(now, p, cost).is_some()
    }

    fn empty_at(&self) -> Option<Instant> {
        (self.count > 0).then_some(self.end)
    }

    fn latest(&self) -> Instant {
        self.latest
    }
}

args::option_set! {
    struct Options { cost: COST }
}

static PROBE_INFO: Info = Info {
    name: "RL.PROBE",
    event: c"rl.probe",
    summary: "A test-only kind: at most limit units in a window opened by the first",
    complexity: "O(1)",
    arity: -4,
    keys: Keys::First,
    flags: "write deny-oom fast",
    categories: "write fast",
    own_category: true,
    args: &[],
    stats: Stats::new(),
};

impl Rate for Probe {
    const COMMAND: &'static str = "RL.PROBE";
    const CODE: u8 = 250;
    const FORM: Form = Form::Compact;
    const INFO: &'static Info = &PROBE_INFO;
    const GRAMMAR: args::Grammar = args::Grammar {
        positional: args::Positional::Numbers(2),
        params: &[meta::LIMIT, meta::WINDOW_MS],
        options: Options::TABLE,
    };
    const KEYWORD: Option<&'static str> = Some("PROBE");
    const EFFECT_CODE: u8 = 250;
    type Args = Params;

    fn params(args: &Params) -> &Params {
        args
    }

    fn parse(words: &[&[u8]]) -> Result<RateCall<Params>, Error> {
        let limit = positional(words, 0, "limit", 1, MAX_LIMIT)?;
        let window_ms = args::positional_duration(words, 1, "window_ms", 1, MAX_WINDOW_MS)?;
        let o = Options::parse(words.get(2..).unwrap_or_default())?;
        Ok(RateCall {
            params: Params { limit, window_ms },
            cost: args::cost(o.cost),
            now: o.now(),
        })
    }

    fn fresh(p: &Params) -> Probe {
        Probe {
            latest: Instant::EPOCH,
            end: Instant::EPOCH,
            count: 0,
            limit: p.limit as u32,
            window_ms: p.window_ms as u32,
        }
    }

    fn write_params<O: Out>(p: &Params, out: &mut O) {
        out.number(p.limit).number(p.window_ms);
    }
}

impl Encoding for Probe {
    const VERSION: u8 = 1;

    fn encode<S: Sink>(&self, out: &mut S) {
        let (tail, p) = (self.tail(), self.stored());
        Probe::encode_state(self.latest, tail, out);
        Probe::encode_params(set_of(&p), out);
    }

    fn decode(version: u8, r: &mut Reader) -> Result<Self, Malformed> {
        if version != Self::VERSION {
            return Err(Malformed("no such version for this kind"));
        }
        let (latest, count, ahead) = (r.varint()?, r.varint()?, r.varint()?);
        let (latest, ahead) = (Instant::from_ms(latest), Duration::from_ms(ahead));
        let (limit, window_ms) = (r.varint()?, r.varint()?);
        let p = Params { limit, window_ms };
        Probe::from_parts(p, latest, count, ahead).ok_or(Malformed("not a probe's state"))
    }
}

/// The parameters as the compact form keeps them.
fn set_of(p: &Params) -> Params2 {
    Params2 {
        a: p.limit << 32 | p.window_ms,
        b: 0,
    }
}

impl Probe {
    /// `count << 32 | ahead`: the open window's end less `latest` fits 32 bits.
    fn tail(&self) -> u64 {
        u64::from(self.count) << 32 | self.end.since(self.latest).ms()
    }
}

impl Compact for Probe {
    fn pack(&self) -> Option<(Params2, Instant, u64)> {
        let p = self.stored();
        (self.latest.ms() >> 48 == 0).then(|| (set_of(&p), self.latest, self.tail()))
    }

    fn unpack(set: Params2, latest: Instant, tail: u64) -> Self {
        let ahead = Duration::from_ms(tail & u64::from(u32::MAX));
        Probe {
            latest,
            end: if ahead.is_zero() { Instant::EPOCH } else { latest + ahead },
            count: (tail >> 32) as u32,
            limit: (set.a >> 32) as u32,
            window_ms: set.a as u32,
        }
    }

    fn encode_state<S: Sink>(latest: Instant, tail: u64, out: &mut S) {
        out.varint(latest.ms());
        out.varint(tail >> 32);
        out.varint(tail & u64::from(u32::MAX));
    }

    fn encode_params<S: Sink>(set: Params2, out: &mut S) {
        out.varint(set.a >> 32);
        out.varint(set.a & u64::from(u32::MAX));
    }

    fn decode_state(r: &mut Reader) -> Option<(Instant, u64)> {
        let (latest, count, ahead) = (r.varint().ok()?, r.varint().ok()?, r.varint().ok()?);
        let (latest, ahead) = (Instant::from_ms(latest), Duration::from_ms(ahead));
        let p = Params {
            limit: 1,
            window_ms: 1,
        };
        let state = Probe::from_parts(p, latest, count, ahead)?;
        (latest.ms() >> 48 == 0).then(|| (latest, state.tail()))
    }
}

impl Sample for Probe {
    const TEST_ONLY: bool = true;

    fn sample_words(p: [u8; 4], _now: Instant) -> String {
        let limit = sample::pick(p[0], &[1, 2, 10, MAX_LIMIT]);
        let window = sample::pick(p[1], &[1, 1000, MAX_WINDOW_MS]);
        format!("PROBE {limit} {window}") + &sample::cost_word(p[2], limit)
    }
}
