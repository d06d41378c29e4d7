//! The fixed window against a naive model, its grammar and its charge.

use super::*;
use crate::core::args::words;
use crate::core::limit::{charge, fuzz};
use proptest::prelude::*;

const T0: Instant = Instant::from_ms(1_700_000_000_000); // a multiple of 1000

fn p(limit: u64, window_ms: u64, align: bool) -> Params {
    Params {
        limit,
        window_ms,
        align,
    }
}

fn run_table(p: &Params, rows: &[crate::core::limit::table::Row]) {
    crate::core::limit::table::run(FixedWindow::new(p), p, T0, rows);
}

#[test]
fn window_opens_at_the_first_request() {
    run_table(
        &p(3, 1000, false),
        &[
            (250, 1, [1, 3, 2, 0, 1000]),
            (600, 1, [1, 3, 1, 0, 650]),
            (1249, 1, [1, 3, 0, 0, 1]),
            // The millisecond the window ends, a new one opens.
            (1250, 1, [1, 3, 2, 0, 1000]),
            (1300, 2, [1, 3, 0, 0, 950]),
            (1301, 1, [0, 3, 0, 949, 949]),
            (1301, 4, [0, 3, 0, -1, 949]),
        ],
    );
}

#[test]
fn aligned_windows_start_at_multiples_of_the_window() {
    run_table(
        &p(2, 1000, true),
        &[
            (250, 1, [1, 2, 1, 0, 750]),
            (999, 1, [1, 2, 0, 0, 1]),
            (999, 1, [0, 2, 0, 1, 1]),
            (1000, 1, [1, 2, 1, 0, 1000]),
        ],
    );
}

#[test]
fn the_reset_time_never_moves_within_a_window() {
    let params = p(100, 60_000, false);
    let mut w = FixedWindow::new(&params);
    let mut resets = std::collections::BTreeSet::new();
    for t in (0..60_000).step_by(777) {
        let d = w.acquire(T0 + t, &params, 1);
        resets.insert(T0 + t + d.reset_after);
    }
    assert_eq!(resets.len(), 1, "{resets:?}");
    // A shorter window does not move the current window's end. A longer one moves it
    // to where that window, started with this one, ends: later, never earlier.
    let shorter = p(100, 1000, false);
    let d = w.acquire(T0 + 59_850, &shorter, 1);
    assert_eq!(T0 + 59_850 + d.reset_after, T0 + 60_000);
    let longer = p(100, 120_000, false);
    let d = w.acquire(T0 + 59_900, &longer, 1);
    assert_eq!(T0 + 59_900 + d.reset_after, T0 + 120_000);
    assert_eq!((w.end(), w.params().window_ms), (T0 + 120_000, 120_000));
}

/// The scenario: three calls fill 3 per 10 s; a call with 5 per 1 s does not
/// end their window.
#[test]
fn a_shorter_window_keeps_the_longer_windows_units() {
    let (long, short) = (p(3, 10_000, false), p(5, 1000, false));
    let mut w = FixedWindow::new(&long);
    for t in [0, 100, 200] {
        assert!(w.acquire(T0 + t, &long, 1).allowed);
    }
    assert_eq!(
        w.acquire(T0 + 1250, &short, 1).as_reply(),
        [1, 5, 1, 0, 8750]
    );
    assert_eq!(
        w.acquire(T0 + 1300, &long, 1).as_reply(),
        [0, 3, 0, 8700, 8700]
    );
}

/// The same, the other way round: the 1 s window opens, and the 3 per 10 s calls it
/// counts must count for their own 10 s, not for the second that opened it.
#[test]
fn a_longer_window_joining_keeps_its_units_for_its_own_length() {
    let (long, short) = (p(3, 10_000, false), p(5, 1000, false));
    run_rows(
        FixedWindow::new(&short),
        &[
            (0, short, [1, 5, 4, 0, 1000]),
            (100, long, [1, 3, 1, 0, 9900]),
            (200, long, [1, 3, 0, 0, 9800]),
            (300, long, [0, 3, 0, 9700, 9700]),
            // Before: the window ended at +1000 and 3 more were allowed.
            (1000, long, [0, 3, 0, 9000, 9000]),
            (1500, long, [0, 3, 0, 8500, 8500]),
            // The 1 s calls count in the open window, which keeps its end.
            (1500, short, [1, 5, 1, 0, 8500]),
            (10_000, long, [1, 3, 2, 0, 10_000]),
        ],
    );
    // Aligned: the 10 s period holds the 1 s window opened at +3000, and its units.
    let (long, short) = (p(3, 10_000, true), p(5, 1000, true));
    run_rows(
        FixedWindow::new(&short),
        &[
            (3000, short, [1, 5, 4, 0, 1000]),
            (3100, long, [1, 3, 1, 0, 6900]),
            (3200, long, [1, 3, 0, 0, 6800]),
            (4000, long, [0, 3, 0, 6000, 6000]),
            (10_000, long, [1, 3, 2, 0, 10_000]),
        ],
    );
    // A period that does not hold the whole window leaves its end where it was (its
    // units cannot be told apart from the earlier ones).
    let (hour, day) = (p(100, 3_600_000, false), p(100, 86_400_000, true));
    let mut w = FixedWindow::new(&hour);
    let day0 = T0.floor(Duration::from_ms(86_400_000)) + 86_400_000;
    w.acquire(day0 - 1_800_000, &hour, 1);
    assert_eq!(w.acquire(day0 + 600_000, &day, 1).reset_after.ms(), 1_200_000);
}

/// Rows of `(t, params, reply)`: each call may have its own parameters.
fn run_rows(mut w: FixedWindow, rows: &[(u64, Params, [i64; 5])]) {
    for (i, (t, params, want)) in rows.iter().enumerate() {
        let got = w.acquire(T0 + *t, params, 1).as_reply();
        assert_eq!(&got, want, "row {i} at +{t}ms");
    }
}

#[test]
fn refund_and_time_going_backwards() {
    let params = p(5, 1000, false);
    let mut w = FixedWindow::new(&params);
    w.acquire(T0 + 100, &params, 3);
    assert_eq!(w.acquire(T0, &params, 1).as_reply(), [1, 5, 1, 0, 1000]);
    assert_eq!(w.refund(T0 + 200, 2).as_reply(), [1, 5, 3, 0, 900]);
    assert_eq!(w.refund(T0 + 200, 9).as_reply(), [1, 5, 5, 0, 0]);
    assert_eq!(w.empty_at(), None);
}

#[test]
fn from_parts_checks_ranges() {
    assert!(FixedWindow::from_parts(p(5, 1000, true), T0, T0 + 1000, 5).is_ok());
    assert!(FixedWindow::from_parts(p(0, 1000, true), T0, T0, 0).is_err());
    assert!(FixedWindow::from_parts(p(5, 1000, true), T0, T0, 1 << 33).is_err());
    assert_eq!(std::mem::size_of::<FixedWindow>(), 32);
}

/// The obviously-correct model: the start of the open window and every call recorded in
/// it. The window lasts as long as the longest of those calls' windows, each started
/// with it (with ALIGN: the call's period, when that holds the whole window).
#[derive(Default)]
struct Naive {
    start: Instant,
    calls: Vec<(Instant, Params)>,
    count: u64,
    latest: Instant,
}

impl Naive {
    /// Where the window of a call at `at` under `p`, started with the open one, ends.
    fn end_of(&self, at: Instant, p: &Params) -> Option<Instant> {
        let from = if p.align {
            at.floor(p.window())
        } else {
            self.start
        };
        (from <= self.start).then_some(from + p.window_ms)
    }

    fn end(&self) -> Option<Instant> {
        self.calls
            .iter()
            .filter_map(|(at, p)| self.end_of(*at, p))
            .max()
    }

    fn acquire(&mut self, now: Instant, p: &Params, cost: u64) -> (bool, u64, Wait, Duration) {
        let now = now.max(self.latest);
        let open = self.end().is_some_and(|end| now < end);
        let count = if open { self.count } else { 0 };
        let allowed = count + cost <= p.limit;
        if allowed && cost > 0 {
            if !open {
                let start = if p.align {
                    now.floor(p.window())
                } else {
                    now
                };
                *self = Naive {
                    start,
                    ..Naive::default()
                };
            }
            self.calls.push((now, *p));
            self.count += cost;
            self.latest = now;
        }
        // Where the window ends after this call: a request finding none would open one.
        let end = match self.end() {
            Some(end) if now < end => end,
            _ if p.align => now.floor(p.window()) + p.window_ms,
            _ => now + p.window_ms,
        };
        let after = if allowed { count + cost } else { count };
        let wait = if allowed {
            Wait::None
        } else if cost > p.limit {
            Wait::Never
        } else {
            Wait::For(end - now)
        };
        (
            allowed,
            p.limit - after.min(p.limit),
            wait,
            if after > 0 { end - now } else { Duration::ZERO },
        )
    }
}

proptest! {
    #[test]
    fn matches_the_naive_model(
        limit in 1u64..8,
        window_ms in 1u64..500,
        align in any::<bool>(),
        steps in prop::collection::vec((0u64..300, 0u64..4, prop::bool::weighted(0.1)), 1..150),
    ) {
        let params = p(limit, window_ms, align);
        let mut w = FixedWindow::new(&params);
        let mut naive = Naive::default();
        let mut now = T0;
        for (gap, cost, back) in steps {
            let at = if back { now.saturating_sub(Duration::from_ms(gap)) } else { now + gap };
            now = now.max(at);
            let d = w.acquire(at, &params, cost);
            let (allowed, remaining, wait, reset) = naive.acquire(at, &params, cost);
            prop_assert_eq!((d.allowed, d.remaining, d.retry_after, d.reset_after), (allowed, remaining, wait, reset));
        }
    }

    /// Parameters that change from call to call, with and without ALIGN.
    #[test]
    fn changing_windows_match_the_naive_model(
        pool in prop::collection::vec((1u64..8, 1u64..500, any::<bool>()), 2..4),
        steps in prop::collection::vec(
            (0usize..4, 0u64..300, 0u64..4, prop::bool::weighted(0.1)), 1..150),
    ) {
        let pool: Vec<Params> = pool.iter().map(|&(l, ms, a)| p(l, ms, a)).collect();
        let mut w = FixedWindow::new(&pool[0]);
        let mut naive = Naive::default();
        let mut now = T0;
        for (pick, gap, cost, back) in steps {
            let params = &pool[pick % pool.len()];
            let at = if back { now.saturating_sub(Duration::from_ms(gap)) } else { now + gap };
            now = now.max(at);
            let d = w.acquire(at, params, cost);
            let (allowed, remaining, wait, reset) = naive.acquire(at, params, cost);
            prop_assert_eq!((d.allowed, d.remaining, d.retry_after, d.reset_after), (allowed, remaining, wait, reset));
            prop_assert_eq!(w.empty_at(), naive.end().filter(|&e| naive.count > 0 && e > naive.latest));
        }
    }
}

#[test]
fn fixed_takes_align_as_a_flag() {
    let f = FixedWindow::parse(&words("100 60000 align COST 2")).unwrap();
    assert!(f.params.align);
    assert_eq!(f.cost, 2);
    assert!(
        !FixedWindow::parse(&words("100 60000"))
            .unwrap()
            .params
            .align
    );
    assert_eq!(
        FixedWindow::parse(&words("100 60000 ALIGN ALIGN")),
        Err(Error::RepeatedOption("ALIGN"))
    );
}

proptest! {
    #[test]
    fn fixed_windows(limit in 1u64..20, window_ms in 1u64..1000, align: bool,
                     ops in charge::ops()) {
        let p = Params { limit, window_ms, align };
        charge::check(FixedWindow::new(&p), &p, &ops);
    }

    #[test]
    fn fuzz_any_arguments_parse_to_valid_requests_or_errors(words in fuzz::words()) {
        let words: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        if let Ok(f) = FixedWindow::parse(&words) {
            prop_assert!(f.params.valid());
            prop_assert!(f.now.is_none_or(|t| t <= MAX_TIMESTAMP));
        }
    }
}

/// A window at the edges: limits from 1 to 2^32 - 1, windows from 1 ms to 31 days, with and
/// without ALIGN.
impl crate::core::sample::Sample for FixedWindow {
    fn sample_words(p: [u8; 4], _now: Instant) -> String {
        use crate::core::sample::{cost_word, pick, DAY31};
        let limit = pick(p[0], &[1, 10, MAX_LIMIT]);
        let window = pick(p[1], &[1, 1000, DAY31]);
        let align = if p[3].is_multiple_of(2) { "" } else { " ALIGN" };
        format!("FIXED {limit} {window}{align}") + &cost_word(p[2], limit)
    }
}
