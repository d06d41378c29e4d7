//! `RL.TOKEN key limit window_ms [BURST b] [COST n] [NOW ms]`: a token bucket. `limit`
//! tokens flow in per `window_ms`, evenly, and the bucket holds at most `BURST` (default:
//! the limit); a call takes `COST` tokens (default 1) if they are there. The algorithm is
//! the generic cell rate algorithm of `core::gcra`, without delay.
//!
//! Encoding (kind 2): version 3, `latest debt limit window_ms burst`; version 1 adds
//! `max_delay_ms`, always 0. The key keeps it compact: 16 bytes, the parameters interned.

use crate::core::args::{self, positional, Opt, COST};
#[cfg(test)]
use crate::core::codec::Reader;
use crate::core::effect::Out;
use crate::core::error::Error;
use crate::core::gcra::{Gcra, Params, MAX_RATE_LIMIT, MAX_WINDOW_MS};
use crate::core::kind::{Form, Rate, RateCall};
use crate::core::meta::{self, Info, Keys, Stats};

/// A token bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token(pub Gcra);

const BURST: Opt = Opt::int("BURST", 1, MAX_RATE_LIMIT).doc("burst");

args::option_set! {
    /// `RL.TOKEN`'s options after its two numbers.
    struct Options { burst: BURST, cost: COST }
}

/// A token bucket's `BURST` when none is given: its limit.
fn burst_default(limit: u64) -> u64 {
    limit
}

crate::core::gcra::bucket_kind!(Token, false);

static TOKEN_INFO: Info = Info {
    name: "RL.TOKEN",
    event: c"rl.token",
    summary: "Token bucket (GCRA): limit tokens per window_ms, evenly, holding at most BURST; takes COST tokens if they are there",
    complexity: "O(1)",
    arity: -4,
    keys: Keys::First,
    flags: "write deny-oom fast",
    categories: "write fast",
    own_category: true,
    args: &[],
    stats: Stats::new(),
};

impl Rate for Token {
    const COMMAND: &'static str = "RL.TOKEN";
    const CODE: u8 = 2;
    const FORM: Form = Form::Compact;
    const INFO: &'static Info = &TOKEN_INFO;
    const EFFECT_CODE: u8 = 2;
    const GRAMMAR: args::Grammar = args::Grammar {
        positional: args::Positional::Numbers(2),
        params: &[meta::LIMIT, meta::WINDOW_MS],
        options: Options::TABLE,
    };
    const KEYWORD: Option<&'static str> = Some("TOKEN");
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
                burst: o.burst.map_or(burst_default(limit), args::Value::int),
                max_delay_ms: 0,
            },
            cost: args::cost(o.cost),
            now: o.now(),
        })
    }

    fn fresh(p: &Params) -> Token {
        Token(Gcra::new(p))
    }

    fn write_params<O: Out>(p: &Params, out: &mut O) {
        out.number(p.limit).number(p.window_ms);
        if p.burst != burst_default(p.limit) {
            out.option(BURST.keyword, p.burst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::args::words;
    use crate::core::kind::{Compact, Encoding};
    use crate::core::limit::charge::T0;
    use crate::core::limit::{fuzz, Limit};
    use crate::core::{Instant, MAX_TIMESTAMP};
    use proptest::prelude::*;

    /// Version 1, committed: latest 1000, a debt of 4500 ticks.
    const V1: &[u8] = &[232, 7, 148, 35, 10, 232, 7, 5, 0];

    #[test]
    fn parses_its_defaults_and_options() {
        let t = Token::parse(&words("120 60000")).unwrap();
        let p = Params {
            limit: 120,
            window_ms: 60000,
            burst: 120,
            max_delay_ms: 0,
        };
        assert_eq!((t.params, t.cost, t.now), (p, 1, None));
        let t = Token::parse(&words("4 1000 burst 2 COST 3 NOW 9")).unwrap();
        assert_eq!((t.params.burst, t.cost, t.now), (2, 3, Some(Instant::from_ms(9))));
        for (line, want) in [
            ("4 1000 MAXDELAY 5", Error::UnknownOption("MAXDELAY".into())),
            ("4 1000 ALIGN", Error::UnknownOption("ALIGN".into())),
            // ALIGN is RL.FIXED's flag.
            ("100 60000 ALIGN", Error::UnknownOption("ALIGN".into())),
            (
                "2147483648 1000",
                Error::Range {
                    arg: "limit",
                    min: 1,
                    max: MAX_RATE_LIMIT,
                },
            ),
            ("1", Error::Arity),
        ] {
            assert_eq!(Token::parse(&words(line)), Err(want), "{line}");
        }
    }

    #[test]
    fn reads_the_committed_version_1_encoding() {
        let t = Token::decode(1, &mut Reader::new(V1)).unwrap();
        let p = Params {
            limit: 10,
            window_ms: 1000,
            burst: 5,
            max_delay_ms: 0,
        };
        assert_eq!((t.0.params(), t.0.latest(), t.0.debt()), (p, Instant::from_ms(1000), 4500));
        let mut out = Vec::new();
        t.encode(&mut out);
        assert_eq!(out, [232, 7, 148, 35, 10, 232, 7, 5]);
        // A token bucket never carries a delay.
        let mut bad = V1.to_vec();
        *bad.last_mut().unwrap() = 1;
        assert!(Token::decode(1, &mut Reader::new(&bad)).is_err());
        assert!(Token::decode(2, &mut Reader::new(V1)).is_err());
    }

    #[test]
    fn its_compact_form_encodes_alike() {
        let p = Params {
            limit: 10,
            window_ms: 1000,
            burst: 5,
            max_delay_ms: 0,
        };
        let mut t = Token::fresh(&p);
        t.acquire(Instant::from_ms(1_700_000_000_000), &p, 3);
        let (set, latest, debt) = t.pack().unwrap();
        assert_eq!(Token::unpack(set, latest, debt), t);
        let (mut whole, mut parts) = (Vec::new(), Vec::new());
        t.encode(&mut whole);
        Token::encode_state(latest, debt, &mut parts);
        Token::encode_params(set, &mut parts);
        assert_eq!(whole, parts);
        assert_eq!(
            Token::decode_state(&mut Reader::new(&whole)),
            Some((latest, debt))
        );
    }

    #[test]
    fn a_charge_beyond_the_limit_refuses_until_it_has_drained() {
        let p = Params {
            limit: 10,
            window_ms: 1000,
            burst: 10,
            max_delay_ms: 0,
        };
        let mut g = Token::fresh(&p);
        let d = Limit::charge(&mut g, T0, &p, 25).unwrap();
        // 25 units at 100 ms each: one more fits once 16 have drained, 1,600 ms on.
        assert_eq!(d.as_reply(), [1, 10, 0, 1600, 2500]);
        assert!(!g.evaluate(T0 + 1599, &p, 1).allowed);
        assert!(g.evaluate(T0 + 1600, &p, 1).allowed);
        // A charge past 2^64 ticks does not fit and changes nothing.
        let before = g.clone();
        assert_eq!(Limit::charge(&mut g, T0, &p, u64::MAX / 100), None);
        assert_eq!(g, before);
    }

    proptest! {
        #[test]
        fn fuzz_any_arguments_parse_to_valid_requests_or_errors(words in fuzz::words()) {
            let words: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
            if let Ok(r) = Token::parse(&words) {
                prop_assert!(r.params.limit <= MAX_RATE_LIMIT && r.params.burst >= 1);
                prop_assert!(r.params.valid() && r.params.max_delay_ms == 0);
                prop_assert!(r.now.is_none_or(|t| t <= MAX_TIMESTAMP));
            }
        }
    }

    /// A bucket at the edges: limits from 1 to 2^31 - 1, windows from 1 ms to 31 days,
    /// BURST.
    impl crate::core::sample::Sample for Token {
        fn sample_words(p: [u8; 4], _now: crate::core::Instant) -> String {
            use crate::core::sample::{cost_word, pick, DAY31};
            let limit = pick(p[0], &[1, 10, MAX_RATE_LIMIT]);
            let window = pick(p[1], &[1, 1000, DAY31]);
            let mut words = format!("TOKEN {limit} {window}");
            match p[3] / 3 % 3 {
                0 => {}
                1 => words += " BURST 1",
                _ => words += &format!(" BURST {MAX_RATE_LIMIT}"),
            }
            words + &cost_word(p[2], limit)
        }
    }
}
