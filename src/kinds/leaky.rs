//! `RL.LEAKY key limit window_ms [MAXDELAY ms] [BURST b] [COST n] [NOW ms]`: a leaky bucket
//! that schedules. It books the next free slot, `limit` per `window_ms` evenly, and answers
//! how long to wait before acting; bookings further away than `MAXDELAY` (default: the
//! window) are refused. `BURST` (default 1) slots may go at once. The algorithm is the
//! generic cell rate algorithm of `core::gcra`, with a delay.
//!
//! Encoding (kind 3): version 3, `latest debt limit window_ms burst delay` (`delay` 0 for a
//! `MAXDELAY` equal to the window, `max_delay_ms + 1` otherwise); version 1, `latest debt
//! limit window_ms burst max_delay_ms`. The key keeps it compact: 16 bytes, the parameters
//! interned.

use crate::core::args::{self, positional, Opt, COST};
#[cfg(test)]
use crate::core::codec::Reader;
use crate::core::effect::Out;
use crate::core::error::Error;
use crate::core::gcra::{Gcra, Params, MAX_RATE_LIMIT, MAX_WINDOW_MS};
use crate::core::kind::{Form, Rate, RateCall};
use crate::core::meta::{self, Info, Keys, Stats};

/// A leaky bucket that schedules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaky(pub Gcra);

const MAXDELAY: Opt = Opt::duration("MAXDELAY", 0, MAX_WINDOW_MS).doc("max-delay-ms");
const BURST: Opt = Opt::int("BURST", 1, MAX_RATE_LIMIT).doc("burst");

args::option_set! {
    /// `RL.LEAKY`'s options after its two numbers.
    struct Options { max_delay: MAXDELAY, burst: BURST, cost: COST }
}

/// A leaky bucket's `BURST` when none is given.
const BURST_DEFAULT: u64 = 1;

/// A leaky bucket's `MAXDELAY` when none is given: its window.
fn max_delay_default(window_ms: u64) -> u64 {
    window_ms
}

crate::core::gcra::bucket_kind!(Leaky, true);

static LEAKY_INFO: Info = Info {
    name: "RL.LEAKY",
    event: c"rl.leaky",
    summary: "Leaky bucket that schedules: books the next free slot and replies how long to wait before acting; refuses bookings beyond MAXDELAY",
    complexity: "O(1)",
    arity: -4,
    keys: Keys::First,
    flags: "write deny-oom fast",
    categories: "write fast",
    own_category: true,
    args: &[],
    stats: Stats::new(),
};

impl Rate for Leaky {
    const COMMAND: &'static str = "RL.LEAKY";
    const CODE: u8 = 3;
    const FORM: Form = Form::Compact;
    const INFO: &'static Info = &LEAKY_INFO;
    const EFFECT_CODE: u8 = 3;
    const GRAMMAR: args::Grammar = args::Grammar {
        positional: args::Positional::Numbers(2),
        params: &[meta::LIMIT, meta::WINDOW_MS],
        options: Options::TABLE,
    };
    const KEYWORD: Option<&'static str> = Some("LEAKY");
    type Args = Params;

    fn params(args: &Params) -> &Params {
        args
    }

    fn parse(words: &[&[u8]]) -> Result<RateCall<Params>, Error> {
        let limit = positional(words, 0, "limit", 1, MAX_RATE_LIMIT)?;
        let window_ms = args::positional_duration(words, 1, "window_ms", 1, MAX_WINDOW_MS)?;
        let o = Options::parse(words.get(2..).unwrap_or_default())?;
        Ok(RateCall {
            params: Params {
                limit,
                window_ms,
                burst: o.burst.map_or(BURST_DEFAULT, args::Value::int),
                max_delay_ms: o
                    .max_delay
                    .map_or(max_delay_default(window_ms), args::Value::int),
            },
            cost: args::cost(o.cost),
            now: o.now(),
        })
    }

    fn fresh(p: &Params) -> Leaky {
        Leaky(Gcra::new(p))
    }

    fn write_params<O: Out>(p: &Params, out: &mut O) {
        out.number(p.limit).number(p.window_ms);
        if p.max_delay_ms != max_delay_default(p.window_ms) {
            out.option(MAXDELAY.keyword, p.max_delay_ms);
        }
        if p.burst != BURST_DEFAULT {
            out.option(BURST.keyword, p.burst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::args::words;
    use crate::core::kind::Encoding;
    use crate::core::limit::{charge, fuzz};
    use crate::core::{Instant, MAX_TIMESTAMP};
    use proptest::prelude::*;

    /// Version 1, committed: latest 1000, a debt of 4500 ticks, 4 per second, MAXDELAY 800.
    const V1: &[u8] = &[232, 7, 148, 35, 4, 232, 7, 1, 160, 6];

    #[test]
    fn parses_its_defaults_and_options() {
        let l = Leaky::parse(&words("4 1000 burst 2 MAXDELAY 500 COST 2 NOW 9")).unwrap();
        let p = Params {
            limit: 4,
            window_ms: 1000,
            burst: 2,
            max_delay_ms: 500,
        };
        assert_eq!((l.params, l.cost, l.now), (p, 2, Some(Instant::from_ms(9))));
        let plain = Leaky::parse(&words("4 1000")).unwrap().params;
        assert_eq!((plain.max_delay_ms, plain.burst), (1000, 1));
        assert_eq!(
            Leaky::parse(&words("1 1000 BURST 0")),
            Err(Error::Range {
                arg: "BURST",
                min: 1,
                max: MAX_RATE_LIMIT
            })
        );
    }

    #[test]
    fn reads_the_committed_version_1_encoding() {
        let l = Leaky::decode(1, &mut Reader::new(V1)).unwrap();
        assert_eq!(l.0.params().max_delay_ms, 800);
        let mut out = Vec::new();
        l.encode(&mut out);
        // Version 3 writes the delay plus one (800 is not the default, the window).
        assert_eq!(out, [232, 7, 148, 35, 4, 232, 7, 1, 161, 6]);
        let back = Leaky::decode(3, &mut Reader::new(&out)).unwrap();
        assert_eq!(back, l);
        // The default delay is written 0, never as itself plus one.
        let mut bad = out.clone();
        let n = bad.len();
        bad[n - 2..].copy_from_slice(&[233, 7]);
        assert!(Leaky::decode(3, &mut Reader::new(&bad)).is_err());
    }

    proptest! {
        /// `Limit::charge` on the bucket (a token bucket when `max_delay_ms` is 0).
        #[test]
        fn buckets(limit in 1u64..20, window_ms in 1u64..1000, burst in 1u64..20,
                   max_delay_ms in 0u64..500, ops in charge::ops()) {
            let p = Params { limit, window_ms, burst, max_delay_ms };
            charge::check(Leaky::fresh(&p), &p, &ops);
        }

        #[test]
        fn fuzz_any_arguments_parse_to_valid_requests_or_errors(words in fuzz::words()) {
            let words: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
            if let Ok(r) = Leaky::parse(&words) {
                prop_assert!(r.params.max_delay_ms <= MAX_WINDOW_MS);
                prop_assert!(r.params.valid());
                prop_assert!(r.now.is_none_or(|t| t <= MAX_TIMESTAMP));
            }
        }
    }

    /// A bucket at the edges: limits from 1 to 2^31 - 1, windows from 1 ms to 31 days,
    /// BURST and MAXDELAY.
    impl crate::core::sample::Sample for Leaky {
        fn sample_words(p: [u8; 4], _now: crate::core::Instant) -> String {
            use crate::core::sample::{cost_word, pick, DAY31};
            let limit = pick(p[0], &[1, 10, MAX_RATE_LIMIT]);
            let window = pick(p[1], &[1, 1000, DAY31]);
            let mut words = format!("LEAKY {limit} {window}");
            match p[3] % 3 {
                0 => {}
                1 => words += " MAXDELAY 0",
                _ => words += &format!(" MAXDELAY {DAY31}"),
            }
            match p[3] / 3 % 3 {
                0 => {}
                1 => words += " BURST 1",
                _ => words += &format!(" BURST {MAX_RATE_LIMIT}"),
            }
            words + &cost_word(p[2], limit)
        }
    }
}
