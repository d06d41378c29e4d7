//! `RL.SLIDE` as a rate limiter: its grammar, and its charge.

use super::*;
use crate::core::args::{words, COST_MAX};
use crate::core::limit::{charge, fuzz};
use crate::core::MAX_TIMESTAMP;
use proptest::prelude::*;

#[test]
fn slide_with_two_windows_and_options() {
    let s = SlidingLog::parse(&words("10 1000 100 60000 cost 3 NOW 17")).unwrap();
    assert_eq!(
        s.params.as_slice(),
        &[
            Window {
                limit: 10,
                window_ms: 1000
            },
            Window {
                limit: 100,
                window_ms: 60000
            }
        ]
    );
    assert_eq!((s.cost, s.now), (3, Some(Instant::from_ms(17))));
    let plain = SlidingLog::parse(&words("1 1")).unwrap();
    assert_eq!((plain.cost, plain.now), (1, None));
}

#[test]
fn empty_and_odd_arguments() {
    // Words as a client may send them: empty, or with a space (`words` drops both).
    assert_eq!(
        SlidingLog::parse(&[b"", b"1000"]),
        Err(Error::Range {
            arg: "limit",
            min: 1,
            max: MAX_LIMIT
        })
    );
    // The options every command shares (RL.REFUND's too), after the windows.
    assert_eq!(
        SlidingLog::parse(&[b"1", b"1000", b"NOW", b" 5"]),
        Err(Error::Range {
            arg: "NOW",
            min: 0,
            max: MAX_TIMESTAMP.ms()
        })
    );
    assert_eq!(
        SlidingLog::parse(&[b"1", b"1000", b"cost", b"18446744073709551615"]),
        Err(Error::Range {
            arg: "COST",
            min: 0,
            max: COST_MAX
        })
    );
}

proptest! {
    #[test]
    fn sliding_logs(limit in 1u64..20, window_ms in 1u64..1000, second: Option<(u64, u64)>,
                    ops in charge::ops()) {
        let mut windows = vec![Window { limit, window_ms }];
        if let Some((l, w)) = second {
            windows.push(Window { limit: 1 + l % 40, window_ms: 1 + w % 3000 });
        }
        charge::check(SlidingLog::new(&windows), windows.as_slice(), &ops);
    }

    #[test]
    fn fuzz_any_arguments_parse_to_valid_requests_or_errors(words in fuzz::words()) {
        let words: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        if let Ok(s) = SlidingLog::parse(&words) {
            let in_range = |w: &Window| {
                (1..=MAX_LIMIT).contains(&w.limit) && (1..=MAX_WINDOW_MS).contains(&w.window_ms)
            };
            let all = s.params.as_slice().iter().all(in_range);
            prop_assert!(all);
            prop_assert!((1..=MAX_WINDOWS).contains(&s.params.len()));
            prop_assert!(s.now.is_none_or(|t| t <= MAX_TIMESTAMP));
        }
    }
}

#[rstest::rstest]
#[case("", Error::Arity)]
#[case("10", Error::Arity)]
#[case("10 1000 5", Error::Arity)]
#[case("COST 1", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
#[case("abc 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
#[case("0 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
#[case("-1 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
#[case("4294967296 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
#[case("99999999999999999999999 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
#[case("010 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
#[case("1.5 1000", Error::Range { arg: "limit", min: 1, max: MAX_LIMIT })]
#[case("10 0", Error::DurationRange { arg: "window_ms", min: 1, max: MAX_WINDOW_MS })]
#[case("10 2678400001", Error::DurationRange { arg: "window_ms", min: 1, max: MAX_WINDOW_MS })]
#[case("10 32d", Error::DurationRange { arg: "window_ms", min: 1, max: MAX_WINDOW_MS })]
#[case("10 60sec", Error::DurationRange { arg: "window_ms", min: 1, max: MAX_WINDOW_MS })]
#[case("10 1000 COST", Error::MissingValue("COST"))]
#[case("10 1000 COST -1", Error::Range { arg: "COST", min: 0, max: COST_MAX })]
#[case("10 1000 COST 1 COST 2", Error::RepeatedOption("COST"))]
#[case("10 1000 NOW 1 now 2", Error::RepeatedOption("NOW"))]
#[case("10 1000 NOW 253402300800000", Error::Range { arg: "NOW", min: 0, max: MAX_TIMESTAMP.ms() })]
#[case("10 1000 BURST 2", Error::UnknownOption("BURST".into()))]
#[case("10 1000 COST 1 10 1000", Error::UnknownOption("10".into()))]
#[case("1 1 2 2 3 3 4 4 5 5 6 6 7 7 8 8 9 9", Error::TooManyWindows(8))]
fn bad_input_names_the_argument(#[case] line: &str, #[case] want: Error) {
    assert_eq!(SlidingLog::parse(&words(line)).map(|_| ()), Err(want), "{line}");
}

/// One to three windows at the edges: limits from 1 to 2^32 - 1, windows from 1 ms to 31
/// days.
impl crate::core::sample::Sample for SlidingLog {
    fn sample_words(p: [u8; 4], _now: crate::core::Instant) -> String {
        use crate::core::sample::{cost_word, pick, DAY31};
        let mut words = String::from("SLIDE");
        let mut limit = 0;
        for w in 0..1 + u64::from(p[3] % 3) {
            limit = (pick(p[0], &[1, 2, 10, MAX_LIMIT]) + w).min(MAX_LIMIT);
            let window = pick(p[1], &[1, 2, 1000, DAY31]).saturating_sub(w).max(1);
            words += &format!(" {limit} {window}");
        }
        words + &cost_word(p[2], limit)
    }
}
