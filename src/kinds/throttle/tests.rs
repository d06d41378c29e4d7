//! `CL.THROTTLE` against a model of redis-cell's own algorithm, and its grammar.

use proptest::prelude::*;

use super::*;
use crate::core::args::words;
use crate::core::codec::Reader;
use crate::core::kind::{Encoding, Kind};
use crate::core::limit::Limit;
use crate::core::Instant;

const T0: Instant = Instant::from_ms(1_700_000_000_000);

/// redis-cell's `rate_limit` and its reply, step by step as its source writes it, in exact
/// integer arithmetic: time in ticks of `1/count` ms, so that one unit's interval (its
/// `emission_interval`) is exactly `period · 1000` ticks. Its key holds the theoretical
/// arrival time until it passes (the key's TTL).
struct Cell {
    max_burst: u64,
    count: u64,
    period_s: u64,
    tat: Option<u128>,
}

impl Cell {
    fn throttle(&mut self, now_ms: Instant, quantity: u64) -> [i64; 5] {
        let count = u128::from(self.count);
        let now = u128::from(now_ms.ms()) * count;
        let t = u128::from(self.period_s) * 1000;
        let tolerance = t * u128::from(self.max_burst + 1);
        let increment = t * u128::from(quantity);
        // An arrival time that has passed is a key that has expired.
        let tat = self.tat.filter(|&tat| tat > now).unwrap_or(now);
        let new_tat = tat.max(now) + increment;
        let allow_at = new_tat.saturating_sub(tolerance);
        let (limited, retry_after, ttl) = if now < allow_at {
            let retry = (increment <= tolerance).then(|| allow_at - now);
            (true, retry, tat - now)
        } else {
            if quantity > 0 || self.tat.is_some() {
                self.tat = Some(new_tat);
            }
            (false, None, new_tat - now)
        };
        let remaining = tolerance.saturating_sub(ttl) / t;
        // Whole seconds as redis-cell rounds them: up when a whole millisecond is left over.
        let seconds = |ticks: u128| {
            let ms = ticks / count;
            (ms / 1000 + u128::from(!ms.is_multiple_of(1000))) as i64
        };
        [
            i64::from(limited),
            (self.max_burst + 1) as i64,
            remaining as i64,
            retry_after.map_or(-1, seconds),
            seconds(ttl),
        ]
    }
}

/// The same calls as the command runs them (time never runs back here): parse, decide at
/// `now`, record when allowed, the reset from the state recorded, reply.
fn throttle(state: &mut Option<Throttle>, line: &str, now: Instant) -> [i64; 5] {
    let call = Throttle::parse(&words(line)).unwrap();
    let p = call.params;
    let limiter = state.get_or_insert_with(|| Throttle::fresh(&p));
    let mut d = limiter.evaluate(now, &p, call.cost);
    if d.allowed && call.cost > 0 {
        assert!(limiter.record(now, &p, call.cost));
        d = d.resetting_at(limiter.empty_at(), now);
    }
    if state.as_ref().is_some_and(|s| Kind::empty_time(s).is_none()) {
        *state = None;
    }
    match Throttle::reply(d) {
        Reply::Ints(v) => v,
        other => panic!("{other:?}"),
    }
}

#[test]
fn answers_as_redis_cell() {
    // redis-cell's README: 15 burst, 30 per 60 s. One unit every 2 s.
    let mut s = None;
    assert_eq!(throttle(&mut s, "15 30 60", T0), [0, 16, 15, -1, 2]);
    assert_eq!(throttle(&mut s, "15 30 60", T0), [0, 16, 14, -1, 4]);
    assert_eq!(throttle(&mut s, "15 30 60 14", T0), [0, 16, 0, -1, 32]);
    // Refused: the next unit comes in 2 s; the bucket is full again in 32.
    assert_eq!(throttle(&mut s, "15 30 60", T0), [1, 16, 0, 2, 32]);
    assert_eq!(throttle(&mut s, "15 30 60", T0 + 1500), [1, 16, 0, 1, 31]);
    assert_eq!(throttle(&mut s, "15 30 60", T0 + 2000), [0, 16, 0, -1, 32]);
    // More than the burst can never go: -1, as redis-cell says.
    assert_eq!(throttle(&mut s, "15 30 60 17", T0 + 2000), [1, 16, 0, -1, 32]);
    // A quantity of 0 reports without taking.
    assert_eq!(throttle(&mut s, "15 30 60 0", T0 + 62_000), [0, 16, 16, -1, 0]);
}

#[test]
fn parses_redis_cells_arguments() {
    let c = Throttle::parse(&words("15 30 60")).unwrap();
    let p = Params {
        limit: 30,
        window_ms: 60_000,
        burst: 16,
        max_delay_ms: 0,
    };
    assert_eq!((c.params, c.cost, c.now), (p, 1, None));
    let c = Throttle::parse(&words("0 1 1 3 NOW 5")).unwrap();
    assert_eq!((c.params.burst, c.cost, c.now), (1, 3, Some(Instant::from_ms(5))));
    let c = Throttle::parse(&words("0 1 1 now 5")).unwrap();
    assert_eq!((c.cost, c.now), (1, Some(Instant::from_ms(5))));
    for (line, want) in [
        ("15 30", Error::Arity),
        (
            "15 0 60",
            Error::Range {
                arg: "count_per_period",
                min: 1,
                max: MAX_RATE_LIMIT,
            },
        ),
        (
            "15 30 0",
            Error::Range {
                arg: "period",
                min: 1,
                max: MAX_PERIOD_S,
            },
        ),
        (
            "-1 30 60",
            Error::Range {
                arg: "max_burst",
                min: 0,
                max: MAX_RATE_LIMIT - 1,
            },
        ),
        (
            "15 30 60 -1",
            Error::Range {
                arg: "quantity",
                min: 0,
                max: COST_MAX,
            },
        ),
        ("15 30 60 1 2", Error::UnknownOption("2".into())),
        (
            "15 30 60 COST 2",
            Error::Range {
                arg: "quantity",
                min: 0,
                max: COST_MAX,
            },
        ),
    ] {
        assert_eq!(Throttle::parse(&words(line)), Err(want), "{line}");
    }
}

#[test]
fn its_effect_parses_back() {
    use crate::core::effect::{Line, Out};
    for line in ["15 30 60", "15 30 60 3", "0 7 86400 0"] {
        let call = Throttle::parse(&words(line)).unwrap();
        let mut out = Line::new("CL.THROTTLE");
        Throttle::write_call(&call, &mut out);
        out.now(T0);
        let text = String::from_utf8(out.as_bytes().unwrap().to_vec()).unwrap();
        let back = Throttle::parse(&words(&text["CL.THROTTLE ".len()..])).unwrap();
        assert_eq!((back.params, back.cost, back.now), (call.params, call.cost, Some(T0)));
    }
}

#[test]
fn its_encoding_is_the_buckets() {
    let p = Throttle::parse(&words("15 30 60")).unwrap().params;
    let mut t = Throttle(Gcra::new(&p));
    crate::core::limit::Limit::acquire(&mut t, T0, &p, 3);
    let mut out = Vec::new();
    t.encode(&mut out);
    assert_eq!(Throttle::decode(3, &mut Reader::new(&out)), Ok(t));
    // Version 1 writes a delay, which a throttle bucket never carries.
    out.push(0);
    assert!(Throttle::decode(1, &mut Reader::new(&out)).is_ok());
    let delayed = [&out[..out.len() - 1], &[2]].concat();
    assert!(Throttle::decode(1, &mut Reader::new(&delayed)).is_err());
}

proptest! {
    /// The same calls get redis-cell's replies, except where redis-cell drops a fraction
    /// of a millisecond that this one rounds up: then a wait is a second longer, never
    /// shorter.
    #[test]
    fn replies_as_the_model_of_redis_cell(
        max_burst in prop_oneof![0u64..4, 0u64..100],
        count in prop_oneof![1u64..5, 1u64..1000],
        period_s in prop_oneof![1u64..5, Just(60u64), Just(3600u64), 1u64..100_000],
        calls in prop::collection::vec((0u64..5000, prop_oneof![Just(1u64), 0u64..6, 0u64..200]), 1..60),
    ) {
        let mut cell = Cell { max_burst, count, period_s, tat: None };
        let mut ours = None;
        let mut now = T0;
        for (dt, quantity) in calls {
            now += dt * [1, 7, 1000][(dt % 3) as usize];
            let line = format!("{max_burst} {count} {period_s} {quantity}");
            let got = throttle(&mut ours, &line, now);
            let want = cell.throttle(now, quantity);
            prop_assert_eq!(&got[..3], &want[..3], "{} at +{}", line, now - T0);
            for i in [3, 4] {
                prop_assert!(
                    got[i] == want[i] || (want[i] >= 0 && got[i] == want[i] + 1),
                    "{} at +{}: {:?} and redis-cell's {:?}", line, now - T0, got, want
                );
            }
        }
    }
}

/// A bucket at the edges: bursts from 1 to 2^31 - 1, periods from 1 s to 31 days,
/// quantities 0, 1, the bucket, one more and the largest.
impl crate::core::sample::Sample for Throttle {
    fn reply(d: crate::core::Decision) -> Reply {
        <Throttle as Rate>::reply(d)
    }

    fn sample_words(p: [u8; 4], _now: Instant) -> String {
        use crate::core::sample::{pick, DAY31, SEQ_END};
        let burst = pick(p[0], &[0, 9, (1 << 31) - 2]);
        let count = pick(p[1], &[1, 10, (1 << 31) - 1]);
        let period = pick(p[3], &[1, 60, DAY31 / 1000]);
        let quantity = match p[2] % 5 {
            0 => String::new(),
            1 => " 0".to_string(),
            2 => format!(" {}", burst + 1),
            3 => format!(" {}", burst + 2),
            _ => format!(" {SEQ_END}"),
        };
        format!("THROTTLE {burst} {count} {period}{quantity}")
    }
}
