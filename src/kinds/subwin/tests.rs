//! The sub-interval window on a fake clock, and against its rules.

use super::*;
use crate::core::error::Error;
use crate::core::kind::Rate;
use crate::core::limit::{charge, fuzz};
use proptest::prelude::*;

const T0: Instant = Instant::from_ms(1_700_000_000_000); // a multiple of 1000

fn p(limit: u64, window_ms: u64, resolution_ms: u64) -> Params {
    Params {
        limit,
        window_ms,
        resolution_ms,
    }
}

fn run_table(p: &Params, rows: &[crate::core::limit::table::Row]) {
    crate::core::limit::table::run(SubWindow::new(p), p, T0, rows);
}

#[test]
fn counts_a_rolling_window_with_a_weighted_trailing_sub_interval() {
    // 4 per second in 4 sub-intervals of 250 ms.
    run_table(
        &p(4, 1000, 250),
        &[
            (0, 2, [1, 4, 2, 0, 1249]),
            (100, 2, [1, 4, 0, 0, 1149]),
            // Full: waits until the trailing weight of sub-interval 0 has fallen to 0.
            // Full until sub-interval 0, trailing, weighs 3: ceil(4 * 187/250) at 1062.
            (200, 1, [0, 4, 0, 862, 1049]),
            (999, 1, [0, 4, 0, 63, 250]),
            (1000, 1, [0, 4, 0, 62, 249]),
            // At 1125 the weight is 124/250: ceil(4 * 0.496) = 2, so 2 fit.
            (1125, 2, [1, 4, 0, 0, 1124]),
            // In the last millisecond of a sub-interval the trailing one weighs nothing.
            (1249, 1, [1, 4, 1, 0, 1000]),
        ],
    );
}

#[test]
fn resolution_of_one_millisecond_is_exact() {
    run_table(
        &p(2, 100, 1),
        &[
            (0, 1, [1, 2, 1, 0, 100]),
            (50, 1, [1, 2, 0, 0, 100]),
            (99, 1, [0, 2, 0, 1, 51]),
            (100, 1, [1, 2, 0, 0, 100]),
            (149, 1, [0, 2, 0, 1, 51]),
        ],
    );
}

#[test]
fn cost_beyond_the_limit_never_fits_and_cost_zero_peeks() {
    run_table(
        &p(5, 1000, 100),
        &[
            (0, 6, [0, 5, 5, -1, 0]),
            (0, 0, [1, 5, 5, 0, 0]),
            (10, 5, [1, 5, 0, 0, 1089]),
            (20, 0, [1, 5, 0, 0, 1079]),
        ],
    );
}

#[test]
fn refund_takes_back_the_newest_first_and_time_never_runs_backwards() {
    let params = p(10, 1000, 100);
    let mut w = SubWindow::new(&params);
    w.acquire(T0, &params, 3);
    w.acquire(T0 + 500, &params, 4);
    // Earlier than the latest call: counted as happening at +500.
    assert_eq!(
        w.acquire(T0 + 10, &params, 1).as_reply(),
        [1, 10, 2, 0, 1099]
    );
    assert_eq!(w.refund(T0 + 600, 6).as_reply(), [1, 10, 8, 0, 499]);
    assert_eq!(w.count(T0.ms() / 100 + 5), 0);
    assert_eq!(w.count(T0.ms() / 100), 2);
    assert_eq!(w.refund(T0 + 600, 9).as_reply(), [1, 10, 10, 0, 0]);
    assert_eq!(w.empty_at(), None);
}

#[test]
fn memory_is_a_header_and_one_counter_per_sub_interval() {
    let w = SubWindow::new(&p(1_000_000, 3_600_000, 60_000));
    assert_eq!(w.heap_size(), 20 + 4 * 61);
    let big = SubWindow::new(&p(1, 4096, 1));
    assert_eq!(big.heap_size(), 20 + 4 * 4097);
}

#[test]
fn a_new_shape_keeps_units_at_the_end_of_their_sub_interval() {
    let old = p(10, 1000, 100);
    let mut w = SubWindow::new(&old);
    w.acquire(T0 + 50, &old, 4);
    w.acquire(T0 + 420, &old, 6);
    // One unit fits again at +1024 in the old shape (4 trailing units weigh 3).
    assert_eq!(w.peek(T0 + 420).remaining, 0);
    assert_eq!(
        w.evaluate(T0 + 420, &old, 1).retry_after,
        Wait::For(Duration::from_ms(1024 - 420))
    );
    // Twice the resolution: the units move to 99 and 420 (latest), sub-intervals 0 and 2,
    // and the unit fits at +1049, later than in the old shape.
    let new = p(10, 1000, 200);
    let mut r = w.reshaped(T0 + 420, &new).unwrap();
    assert_eq!(r.peek(T0 + 420).remaining, 0);
    assert_eq!(
        r.acquire(T0 + 420, &new, 1).retry_after,
        Wait::For(Duration::from_ms(1049 - 420))
    );
    assert!(w.reshaped(T0 + 420, &p(3, 1000, 100)).is_none());
}

/// A call as the command layer makes it: on a reshaped copy when the call needs one,
/// kept only when the call records something.
fn call(w: &mut SubWindow, now: Instant, p: &Params, cost: u64) -> Decision {
    let mut next = w.reshaped(now, p).unwrap_or_else(|| w.clone());
    let d = next.acquire(now, p, cost);
    if d.allowed && cost > 0 {
        *w = next;
    }
    d
}

/// The scenario: three calls fill 3 per 10 s; a call with a 1 s window, two
/// seconds later, must not make the 10 s window forget them.
#[test]
fn a_shorter_window_keeps_what_the_longer_one_counts() {
    let long = p(3, 10_000, 1000);
    let short = p(5, 1000, 1000);
    let mut w = SubWindow::new(&long);
    for t in [0, 100, 200] {
        assert!(call(&mut w, T0 + t, &long, 1).allowed);
    }
    // The short window counts only its own second (and the empty one trailing).
    assert_eq!(
        call(&mut w, T0 + 2500, &short, 1).as_reply(),
        [1, 5, 4, 0, 1499]
    );
    // The ring still holds the 10 s, until the units at +0..1000 have left it.
    assert_eq!(w.retention(), [(10_000, T0 + 999)]);
    assert_eq!(w.params(), short);
    assert_eq!(w.empty_at(), Some(T0 + 10_999));
    assert_eq!(w.heap_size(), 4 * (5 + 10 + 11));
    // 3 per 10 s still counts all four: refused until 2 units have left.
    assert_eq!(
        call(&mut w, T0 + 2600, &long, 1).as_reply(),
        [0, 3, 0, 8066, 10_399]
    );
    assert!(!call(&mut w, T0 + 2700, &long, 1).allowed);
}

#[test]
fn the_ring_shrinks_once_the_longer_window_has_passed() {
    let long = p(3, 10_000, 1000);
    let short = p(5, 1000, 1000);
    let mut w = SubWindow::new(&long);
    call(&mut w, T0, &long, 3);
    let mut t = 2000;
    while t < 10_999 {
        assert!(call(&mut w, T0 + t, &short, 1).allowed, "at +{t}");
        assert_eq!(w.retention(), [(10_000, T0 + 999)], "at +{t}");
        t += 500;
    }
    assert!(call(&mut w, T0 + 10_999, &short, 1).allowed);
    assert!(w.retention().is_empty());
    assert_eq!(w.heap_size(), 4 * (5 + 2));
    assert_eq!(w.empty_at(), Some(T0 + 11_999));
}

#[test]
fn a_shorter_window_at_a_new_resolution_keeps_the_units_too() {
    let long = p(3, 10_000, 1000);
    let fine = p(5, 1000, 100);
    let mut w = SubWindow::new(&long);
    call(&mut w, T0, &long, 3);
    assert!(call(&mut w, T0 + 2500, &fine, 1).allowed);
    // 10 s in sub-intervals of 100 ms.
    assert_eq!(w.retention(), [(10_000, T0 + 999)]);
    assert_eq!(w.heap_size(), 4 * (5 + 10 + 101));
    assert!(!call(&mut w, T0 + 2600, &long, 1).allowed);
    // Back at 1 s resolution the ring is the window's again (the retention, as long, runs
    // on), and still holds the units.
    assert!(call(&mut w, T0 + 2600, &p(10, 10_000, 1000), 1).allowed);
    assert_eq!(w.retention(), [(10_000, T0 + 999)]);
    assert_eq!(w.heap_size(), 4 * (5 + 10 + 11));
    assert_eq!(w.peek(T0 + 2600).remaining, 10 - 5);
}

#[test]
fn units_older_than_the_longest_ring_wait_in_its_oldest_sub_interval() {
    // An hour in minutes, then a 1 s window in milliseconds: the hour would need 3.6
    // million sub-intervals, the ring holds 4096.
    let hour = p(3, 3_600_000, 60_000);
    let ms = p(5, 1000, 1);
    let mut w = SubWindow::new(&hour);
    call(&mut w, T0, &hour, 1);
    call(&mut w, T0 + 300_000, &hour, 1);
    assert!(call(&mut w, T0 + 300_500, &ms, 1).allowed);
    assert_eq!(w.heap_size(), 4 * (5 + 10 + 4097));
    assert_eq!(w.counts().sum::<u64>(), 3);
    // The unit from +0 still counts for the hour: refused.
    assert!(!call(&mut w, T0 + 300_600, &hour, 1).allowed);
}

#[test]
fn alternating_windows_keep_one_block_and_a_longer_window_ends_it() {
    let long = p(100, 10_000, 1000);
    let short = p(100, 1000, 1000);
    let mut w = SubWindow::new(&long);
    call(&mut w, T0, &long, 1);
    call(&mut w, T0 + 2000, &short, 1);
    // Two services alternating: the block stays (no call needs a reshaped one), changed
    // in place. (`call` works on a copy, so the block's address says nothing here.)
    for t in (3000..9000).step_by(1000) {
        assert!(w.reshaped(T0 + t, &long).is_none(), "at +{t}");
        assert!(call(&mut w, T0 + t, &long, 1).allowed);
        assert!(w.reshaped(T0 + t + 500, &short).is_none(), "at +{t}");
        assert!(call(&mut w, T0 + t + 500, &short, 1).allowed);
    }
    // The latest shrink, at +8500, keeps the units of +8000 for 10 s.
    assert_eq!(w.retention(), [(10_000, T0 + 8999)]);
    // A window longer than the ring ends the retention (15 units in it with this one).
    assert!(call(&mut w, T0 + 9000, &p(20, 20_000, 1000), 1).allowed);
    assert!(w.retention().is_empty());
    assert_eq!(w.peek(T0 + 9000).remaining, 20 - 15);
}

/// Issue 9's review, on a ring: one 10 s call, then 5 s and 1 s calls alternating.
/// Once the 10 s window has passed, the ring spans 5 s.
#[test]
fn alternating_shorter_windows_do_not_carry_an_old_longer_one() {
    let ten = p(1000, 10_000, 1000);
    let five = p(1000, 5000, 1000);
    let one = p(1000, 1000, 1000);
    let mut w = SubWindow::new(&ten);
    assert!(call(&mut w, T0, &ten, 1).allowed);
    let mut t = 300;
    while t < 60_000 {
        let q = if (t / 300) % 2 == 1 { &five } else { &one };
        assert!(call(&mut w, T0 + t, q, 1).allowed, "at +{t}");
        if t >= 11_000 {
            assert!(w.retention().iter().all(|e| e.0 < 10_000), "at +{t}");
            assert!(w.heap_size() <= 4 * (5 + 10 + 6), "at +{t}");
        }
        t += 300;
    }
}

#[test]
fn from_parts_checks_every_field() {
    let params = p(10, 1000, 100);
    let mut w = SubWindow::new(&params);
    w.acquire(T0 + 50, &params, 4);
    let mut counts = vec![0; 11];
    counts[10] = 4;
    assert_eq!(SubWindow::from_parts(params, T0 + 50, None, &counts), Ok(w));
    assert!(SubWindow::from_parts(params, T0, None, &counts[1..]).is_err());
    assert!(SubWindow::from_parts(p(10, 1000, 300), T0, None, &counts).is_err());
    counts[3] = 1 << 32;
    assert!(SubWindow::from_parts(params, T0, None, &counts).is_err());
    // Before the epoch there is nothing to count.
    assert!(SubWindow::from_parts(params, Instant::from_ms(50), None, &[1; 11]).is_err());
}

/// The obviously-correct model: every recorded unit kept with its time, the estimate
/// summed from scratch, the wait found by trying every millisecond.
#[derive(Default)]
struct Naive {
    records: Vec<(Instant, u64)>,
    latest: Instant,
}

impl Naive {
    fn used(&self, now: Instant, p: &Params) -> u64 {
        let (res, n) = (p.resolution_ms, p.window_ms / p.resolution_ms);
        let current = now.ms() / res;
        let mut full = 0;
        let mut trail = 0;
        for &(t, c) in &self.records {
            let i = t.ms() / res;
            if i <= current && i + n > current {
                full += c;
            } else if i + n == current {
                trail += c;
            }
        }
        full + (trail * (res - 1 - now.ms() % res)).div_ceil(res)
    }

    fn acquire(&mut self, now: Instant, p: &Params, cost: u64) -> (bool, u64, Wait, Duration) {
        let now = now.max(self.latest);
        let used = self.used(now, p);
        let allowed = used + cost <= p.limit;
        if allowed && cost > 0 {
            self.records.push((now, cost));
            self.latest = now;
        }
        let wait = if allowed {
            Wait::None
        } else if cost > p.limit {
            Wait::Never
        } else {
            let d = (1..).find(|&d| self.used(now + d, p) + cost <= p.limit);
            Wait::For(Duration::from_ms(d.unwrap_or(0)))
        };
        let reset = (0..=p.window_ms + p.resolution_ms)
            .find(|&d| self.used(now + d, p) == 0)
            .map_or(Duration::from_ms(u64::MAX), Duration::from_ms);
        let after = if allowed { used + cost } else { used };
        (allowed, p.limit.saturating_sub(after), wait, reset)
    }
}

/// The rule, naively, at one resolution: each unit remembers the longest window (in
/// sub-intervals) of the calls recorded since it was counted, and leaves at a recorded
/// call once that window no longer counts it, even as the trailing one.
/// The ring may keep more (a retention keeps the longest of several), never less.
#[derive(Default)]
struct Rule {
    records: Vec<(Instant, u64, u64)>,
}

impl Rule {
    fn record(&mut self, now: Instant, p: &Params, cost: u64) {
        let (res, n) = (p.resolution_ms, p.subintervals());
        for r in &mut self.records {
            r.2 = r.2.max(n);
        }
        // In the last millisecond of its trailing sub-interval a unit weighs nothing.
        self.records
            .retain(|&(t, _, m)| (t.ms() / res + m + 1) * res - 1 > now.ms());
        self.records.push((now, cost, n));
    }

    fn kept(&self) -> Naive {
        Naive {
            records: self.records.iter().map(|&(t, c, _)| (t, c)).collect(),
            latest: Instant::EPOCH,
        }
    }
}

/// [`SubWindow::nonzero`] is [`SubWindow::counts`] without its zeros, and
/// [`SubWindow::from_sparse`] rebuilds the state from it.
fn sparse_round_trip(w: &SubWindow) -> Result<(), TestCaseError> {
    let r = w.counts().count() as u64 - 1;
    let sparse: Vec<(u64, u64)> = w
        .counts()
        .enumerate()
        .filter(|&(_, c)| c != 0)
        .map(|(k, c)| (r - k as u64, c))
        .collect();
    prop_assert_eq!(w.nonzero().collect::<Vec<_>>(), sparse.clone());
    let kept = w.retention();
    let kept = (!kept.is_empty()).then_some(&kept[..]);
    let back = SubWindow::from_sparse(w.params(), w.latest(), kept, sparse.into_iter());
    prop_assert_eq!(back.as_ref(), Ok(w));
    Ok(())
}

proptest! {
    /// The block scans find what a counter-by-counter search finds.
    #[test]
    fn scans_find_the_first_and_last_counted(
        run in prop::collection::vec(prop_oneof![4 => Just(0u32), 1 => 1u32..5], 0..80),
    ) {
        prop_assert_eq!(first_nonzero(&run), run.iter().position(|&c| c != 0));
        prop_assert_eq!(last_nonzero(&run), run.iter().rposition(|&c| c != 0));
    }

    /// Windows that change from call to call, at one resolution: each call counts at
    /// least what the rule keeps and at most everything ever recorded, so it allows
    /// whatever keeping everything would, and nothing the rule refuses. Once one window
    /// has been used alone for longer than any, the ring is that window's again.
    #[test]
    fn changing_windows_keep_what_the_rule_keeps(
        res in 1u64..6,
        pool in prop::collection::vec((1u64..10, 1u64..9), 2..4),
        steps in prop::collection::vec(
            (0usize..4, 0u64..20, 0u64..4, prop::bool::weighted(0.1)), 1..200),
    ) {
        let pool: Vec<Params> = pool.iter().map(|&(l, n)| p(l, n * res, res)).collect();
        let widest = pool.iter().map(|q| q.subintervals()).max().unwrap();
        let mut w = SubWindow::new(&pool[0]);
        let mut rule = Rule::default();
        let mut all = Naive::default();
        let mut now = T0;
        let mut run: Option<(usize, Instant)> = None;
        for (pick, gap, cost, back) in steps {
            let i = pick % pool.len();
            let q = &pool[i];
            let at = if back { now.saturating_sub(Duration::from_ms(gap)) } else { now + gap };
            now = now.max(at);
            let t = w.latest().max(at);
            let mut next = w.reshaped(at, q).unwrap_or_else(|| w.clone());
            let (full, trail) = next.estimate(t, q.subintervals());
            let real = full + trail;
            let (least, most) = (rule.kept().used(t, q), all.used(t, q));
            prop_assert!(least <= real && real <= most, "{} <= {} <= {}", least, real, most);
            let d = next.acquire(at, q, cost);
            prop_assert!(most + cost > q.limit || d.allowed, "keeping everything allows it");
            prop_assert!(!d.allowed || least + cost <= q.limit, "the rule refuses it");
            if d.allowed && cost > 0 {
                w = next;
                rule.record(t, q, cost);
                all.records.push((t, cost));
                run = match run {
                    Some((j, since)) if j == i => Some((j, since)),
                    _ => Some((i, t)),
                };
                prop_assert_eq!(w.total(), w.counts().sum::<u64>());
                sparse_round_trip(&w)?;
                if let Some((_, since)) = run.filter(|&(_, since)| t.ms() / res > since.ms() / res + widest) {
                    prop_assert!(w.retention().is_empty(), "used alone since {}", since);
                    prop_assert_eq!(w.heap_size(), 4 * (5 + q.subintervals() as usize + 1));
                }
            }
        }
    }

    #[test]
    fn matches_the_naive_model(
        limit in 1u64..10,
        n in 1u64..6,
        res in 1u64..7,
        steps in prop::collection::vec((0u64..20, 0u64..4, prop::bool::weighted(0.1)), 1..120),
        near_epoch in any::<bool>(),
    ) {
        let params = p(limit, n * res, res);
        let mut w = SubWindow::new(&params);
        let mut naive = Naive::default();
        let mut now = if near_epoch { Instant::EPOCH } else { T0 };
        for (gap, cost, back) in steps {
            let at = if back { now.saturating_sub(Duration::from_ms(gap)) } else { now + gap };
            now = now.max(at);
            let d = w.acquire(at, &params, cost);
            let want = naive.acquire(at, &params, cost);
            prop_assert_eq!((d.allowed, d.remaining, d.retry_after, d.reset_after), want);
            prop_assert_eq!(w.total(), w.counts().sum::<u64>());
            sparse_round_trip(&w)?;
        }
    }

    #[test]
    fn refund_matches_removing_the_newest_units(
        costs in prop::collection::vec((0u64..30, 1u64..4), 1..20),
        refund in 0u64..40,
    ) {
        let params = p(1000, 100, 10);
        let mut w = SubWindow::new(&params);
        let mut now = T0;
        let mut naive = Naive::default();
        for (gap, cost) in costs {
            now += gap;
            w.acquire(now, &params, cost);
            naive.acquire(now, &params, cost);
        }
        let d = w.refund(now, refund);
        prop_assert_eq!(w.total(), w.counts().sum::<u64>());
        // The model takes back units from its newest records, within the ring.
        let mut left = refund;
        for (t, c) in naive.records.iter_mut().rev() {
            if t.ms() / 10 + 10 < now.ms() / 10 { break; }
            let take = (*c).min(left);
            *c -= take;
            left -= take;
        }
        prop_assert_eq!(d.remaining, 1000 - naive.used(now, &params));
    }
}

proptest! {
    /// `Limit::charge`: the units count even beyond the limit, and the wait is exact.
    #[test]
    fn sub_interval_windows(limit in 1u64..20, n in 1u64..12, resolution_ms in 1u64..100,
                            ops in charge::ops()) {
        let p = Params { limit, window_ms: n * resolution_ms, resolution_ms };
        charge::check(SubWindow::new(&p), &p, &ops);
    }

    #[test]
    fn fuzz_any_arguments_parse_to_valid_requests_or_errors(words in fuzz::words()) {
        let words: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
        if let Ok(w) = SubWindow::parse(&words) {
            prop_assert!(w.params.valid());
            prop_assert!(w.now.is_none_or(|t| t <= MAX_TIMESTAMP));
        }
    }
}

#[rstest::rstest]
#[case("100 60000", Err(Error::Arity))]
#[case("100 60000 0", Err(Error::DurationRange { arg: "resolution_ms", min: 1, max: 60000 }))]
#[case("100 60000 60001", Err(Error::DurationRange { arg: "resolution_ms", min: 1, max: 60000 }))]
#[case("100 1m 1s", Ok((100, 60000, 1000, 1)))]
#[case("100 60000 7", Err(Error::Invalid("window_ms must be a multiple of resolution_ms")))]
#[case(
    "100 60000 10",
    Err(Error::Invalid("window_ms / resolution_ms must be at most 4096 sub-intervals"))
)]
#[case("100 60000 1000 ALIGN", Err(Error::UnknownOption("ALIGN".into())))]
#[case("2147483648 60000 1000", Err(Error::Range { arg: "limit", min: 1, max: crate::kinds::subwin::MAX_LIMIT }))]
#[case("100 4096 1", Ok((100, 4096, 1, 1)))]
#[case("2147483647 2678400000 2678400000 COST 7", Ok((crate::kinds::subwin::MAX_LIMIT, 2_678_400_000, 2_678_400_000, 7)))]
fn subwin_arguments(#[case] line: &str, #[case] want: Result<(u64, u64, u64, u64), Error>) {
    let got = SubWindow::parse(&crate::core::args::words(line)).map(|s| {
        let p = s.params;
        (p.limit, p.window_ms, p.resolution_ms, s.cost)
    });
    assert_eq!(got, want, "{line}");
}

/// A ring at the edges: limits from 1 to 2^31 - 1, one sub-interval of 1 ms, 4,096 of one,
/// and 4,000 over 31 days.
impl crate::core::sample::Sample for SubWindow {
    fn sample_words(p: [u8; 4], _now: Instant) -> String {
        use crate::core::sample::{cost_word, pick, DAY31};
        let limit = pick(p[0], &[1, 10, (1 << 31) - 1]);
        let (window, res) = [
            (1, 1),
            (4096, 1),
            (1000, 10),
            (DAY31, DAY31 / 4000),
            (60000, 60000),
        ][usize::from(p[1]) % 5];
        format!("SUBWIN {limit} {window} {res}") + &cost_word(p[2], limit)
    }
}
