//! The sliding log against a naive model, and its behaviours on a fake clock.

use super::*;
use proptest::prelude::*;

const T0: Instant = Instant::from_ms(1_700_000_000_000);

fn w(limit: u64, window_ms: u64) -> Window {
    Window { limit, window_ms }
}

/// The obviously-correct model: every allowed request in a list, sums by scanning, and the
/// wait found by trying every instant at which a record leaves a window.
#[derive(Default)]
struct Naive {
    records: Vec<(Instant, u64)>,
    latest: Instant,
}

impl Naive {
    fn used(&self, now: Instant, window: u64) -> u64 {
        self.records
            .iter()
            .filter(|(t, _)| now.ms() < window || *t > now - window)
            .map(|(_, c)| c)
            .sum()
    }

    fn fits(&self, now: Instant, windows: &[Window], cost: u64) -> bool {
        windows
            .iter()
            .all(|x| self.used(now, x.window_ms) + cost <= x.limit)
    }

    fn acquire(&mut self, now: Instant, windows: &[Window], cost: u64) -> (bool, u64, Wait) {
        let now = now.max(self.latest);
        let remaining_before = windows
            .iter()
            .map(|x| x.limit.saturating_sub(self.used(now, x.window_ms)))
            .min()
            .unwrap();
        if self.fits(now, windows, cost) {
            if cost > 0 {
                self.records.push((now, cost));
                self.latest = now;
            }
            return (true, remaining_before - cost, Wait::None);
        }
        if windows.iter().any(|x| cost > x.limit) {
            return (false, remaining_before, Wait::Never);
        }
        let mut candidates: Vec<Instant> = windows
            .iter()
            .flat_map(|x| self.records.iter().map(move |(t, _)| *t + x.window_ms))
            .filter(|t| *t > now)
            .collect();
        candidates.sort();
        let at = candidates
            .into_iter()
            .find(|t| self.fits(*t, windows, cost))
            .unwrap();
        (false, remaining_before, Wait::For(at - now))
    }
}

fn run_table(windows: &[Window], rows: &[crate::core::limit::table::Row]) {
    crate::core::limit::table::run(SlidingLog::new(windows), windows, T0, rows);
}

#[test]
fn a_small_log_fits_in_96_bytes() {
    // The allocation class of a key's log, its only one while small: `MEMORY USAGE`
    // of a small key depends on it (a key with one request: at most 240 bytes of
    // `used_memory`, issue 10).
    assert!(std::mem::size_of::<SlidingLog>() <= 96);
}

#[test]
fn three_per_second() {
    run_table(
        &[w(3, 1000)],
        &[
            (0, 1, [1, 3, 2, 0, 1000]),
            (100, 1, [1, 3, 1, 0, 1000]),
            (200, 1, [1, 3, 0, 0, 1000]),
            (300, 1, [0, 3, 0, 700, 900]),
            (999, 1, [0, 3, 0, 1, 201]),
            (1000, 1, [1, 3, 0, 0, 1000]),
            (1000, 0, [1, 3, 0, 0, 1000]),
            (1100, 1, [1, 3, 0, 0, 1000]),
            (1150, 1, [0, 3, 0, 50, 950]),
        ],
    );
}

#[test]
fn cost_above_limit_never_fits() {
    run_table(
        &[w(5, 1000)],
        &[(0, 6, [0, 5, 5, -1, 0]), (0, 5, [1, 5, 0, 0, 1000])],
    );
}

#[test]
fn same_millisecond_requests_all_count() {
    run_table(
        &[w(3, 1000)],
        &[
            (5, 1, [1, 3, 2, 0, 1000]),
            (5, 1, [1, 3, 1, 0, 1000]),
            (5, 1, [1, 3, 0, 0, 1000]),
            (5, 1, [0, 3, 0, 1000, 1000]),
        ],
    );
}

#[test]
fn two_windows_record_all_or_nothing() {
    // 2 per second and 3 per 10 s: the third request inside one second is refused by the
    // short window and must not be counted by the long one.
    let ws = [w(2, 1000), w(3, 10_000)];
    run_table(
        &ws,
        &[
            (0, 1, [1, 2, 1, 0, 10_000]),
            (1, 1, [1, 2, 0, 0, 10_000]),
            (2, 1, [0, 2, 0, 998, 9_999]),
            (1000, 1, [1, 3, 0, 0, 10_000]),
            // Only the long window refuses now, so it decides.
            (1001, 1, [0, 3, 0, 8_999, 9_999]),
        ],
    );
}

#[test]
fn time_never_runs_backwards() {
    let ws = [w(2, 1000)];
    let mut log = SlidingLog::new(&ws);
    log.acquire(T0 + 500, &ws, 1);
    // An earlier call counts as happening at +500.
    let d = log.acquire(T0, &ws, 1);
    assert_eq!(d.as_reply(), [1, 2, 0, 0, 1000]);
    assert_eq!(log.records().collect::<Vec<_>>(), vec![(T0 + 500, 2)]);
}

#[test]
fn refund_takes_newest_units_and_stops_at_empty() {
    let ws = [w(10, 1000)];
    let mut log = SlidingLog::new(&ws);
    log.acquire(T0, &ws, 3);
    log.acquire(T0 + 10, &ws, 2);
    let d = log.refund(T0 + 20, 3);
    assert_eq!(log.records().collect::<Vec<_>>(), vec![(T0, 2)]);
    assert_eq!(d.as_reply(), [1, 10, 8, 0, 980]);
    let d = log.refund(T0 + 20, 100);
    assert!(log.is_empty());
    assert_eq!(d.as_reply(), [1, 10, 10, 0, 0]);
}

#[test]
fn new_parameters_apply_to_the_recorded_history() {
    let small = [w(2, 1000)];
    let mut log = SlidingLog::new(&small);
    log.acquire(T0, &small, 2);
    assert!(!log.acquire(T0 + 1, &small, 1).allowed);
    let raised = [w(5, 1000)];
    assert_eq!(
        log.acquire(T0 + 1, &raised, 1).as_reply(),
        [1, 5, 2, 0, 1000]
    );
    assert_eq!(&*log.windows(), &raised);
}

#[test]
fn pruning_keeps_only_the_longest_window() {
    let ws = [w(100, 1000)];
    let mut log = SlidingLog::new(&ws);
    for t in 0..50 {
        log.acquire(T0 + t * 100, &ws, 1);
    }
    // At +4900 the window (3900, 4900] holds the records at 4000..=4900.
    assert_eq!(log.records().count(), 10);
    assert_eq!(log.empty_at(), Some(T0 + 4900 + 1000));
}

/// The scenario: three calls fill 3 per 10 s; one call with 5 per 1 s, more than
/// a second later, must not make the 10 s window forget them.
#[test]
fn a_shorter_window_keeps_what_the_longer_one_counts() {
    let long = [w(3, 10_000)];
    let short = [w(5, 1000)];
    let mut log = SlidingLog::new(&long);
    for t in [0, 100, 200] {
        assert!(log.acquire(T0 + t, &long, 1).allowed);
    }
    // The short window counts only its own second.
    assert_eq!(
        log.acquire(T0 + 1250, &short, 1).as_reply(),
        [1, 5, 4, 0, 1000]
    );
    assert_eq!(log.retention(), [(10_000, T0 + 200)]);
    // The key lives until the 10 s window has let go of the record at +200.
    assert_eq!(log.empty_at(), Some(T0 + 10_200));
    // 3 per 10 s still counts all four: refused until the record at +100 leaves.
    assert_eq!(
        log.acquire(T0 + 1300, &long, 1).as_reply(),
        [0, 3, 0, 8800, 9950]
    );
    assert_eq!(
        log.acquire(T0 + 1500, &long, 1).as_reply(),
        [0, 3, 0, 8600, 9750]
    );
}

#[test]
fn the_retention_ends_once_the_longer_window_has_passed() {
    let long = [w(3, 10_000)];
    let short = [w(5, 1000)];
    let mut log = SlidingLog::new(&long);
    for t in [0, 100, 200] {
        log.acquire(T0 + t, &long, 1);
    }
    let mut t = 1000;
    while t < 10_200 {
        assert!(log.acquire(T0 + t, &short, 1).allowed);
        assert!(log.records().any(|r| r == (T0 + 200, 1)), "at +{t}");
        t += 400;
    }
    // At +10200 the record at +200 has left the 10 s window: the short window alone
    // decides what stays, and the retention is over.
    assert!(log.acquire(T0 + 10_200, &short, 1).allowed);
    assert!(log.retention().is_empty());
    assert!(log.records().all(|(at, _)| at > T0 + 10_200 - 1000));
    assert_eq!(log.empty_at(), Some(T0 + 10_200 + 1000));
}

#[test]
fn shrinking_twice_keeps_the_longest_and_a_longer_window_ends_it() {
    let long = [w(3, 10_000)];
    let mid = [w(100, 5000), w(4, 200)];
    let short = [w(5, 1000)];
    let mut log = SlidingLog::new(&long);
    log.acquire(T0, &long, 3);
    assert!(log.acquire(T0 + 2000, &mid, 1).allowed);
    assert!(log.acquire(T0 + 6000, &short, 1).allowed);
    // The second shrink keeps both: 10 s for the records up to +0, 5 s for those up to
    // +2000.
    assert_eq!(log.retention(), [(5000, T0 + 2000), (10_000, T0)]);
    assert_eq!(log.acquire(T0 + 6001, &long, 1).as_reply()[..2], [0, 3]);
    assert!(log.acquire(T0 + 6001, &mid, 1).allowed);
    // A call as long as the retention is recorded: nothing more to keep.
    let longer = [w(10, 10_000)];
    assert!(log.acquire(T0 + 6002, &longer, 1).allowed);
    assert!(log.retention().is_empty());
    assert_eq!(log.empty_at(), Some(T0 + 6002 + 10_000));
}

/// Issue 9's review: one 10 s call, then 5 s and 1 s calls alternating. Each 1 s call
/// keeps the 5 s window's records; the 10 s window, not used again, must let go once it
/// has passed, instead of being carried along by every new shrink.
#[test]
fn alternating_shorter_windows_do_not_carry_an_old_longer_one() {
    let ten = [w(1000, 10_000)];
    let five = [w(1000, 5000)];
    let one = [w(1000, 1000)];
    let mut log = SlidingLog::new(&ten);
    assert!(log.acquire(T0, &ten, 1).allowed);
    let mut t = 300;
    while t < 60_000 {
        let ws = if (t / 300) % 2 == 1 { &five } else { &one };
        assert!(log.acquire(T0 + t, ws, 1).allowed, "at +{t}");
        if t >= 10_000 {
            assert!(log.retention().iter().all(|e| e.0 < 10_000), "at +{t}");
            // Only what the 5 s window counts stays.
            let oldest = log.records().next().map(|r| r.0).unwrap();
            assert!(oldest + 5000 > T0 + t, "at +{t}: {oldest}");
        }
        t += 300;
    }
    assert!(log.len() <= 5000 / 300 + 1);
}

#[test]
fn a_retention_never_overflows_the_running_totals() {
    let long = [w(MAX_LIMIT, 10_000)];
    let short = [w(5, 1000)];
    let mut log = SlidingLog::new(&long);
    assert!(log.acquire(T0, &long, MAX_LIMIT).allowed);
    // Keeping the 2^32 - 1 units and one more does not fit in 32 bits: the short window's
    // record goes in anyway, and the log keeps what that window counts.
    assert!(log.acquire(T0 + 2000, &short, 1).allowed);
    assert_eq!(log.records().collect::<Vec<_>>(), vec![(T0 + 2000, 1)]);
    assert!(log.retention().is_empty());
}

#[test]
fn times_stay_exact_over_a_long_life() {
    // Two records always stay in the window, so the log is never empty while its 32-bit
    // times wrap around several times.
    let ws = [w(3, MAX_WINDOW_MS)];
    let step = MAX_WINDOW_MS / 2;
    let mut log = SlidingLog::new(&ws);
    for k in 0..10 {
        assert!(log.acquire(T0 + k * step, &ws, 1).allowed);
    }
    let kept = vec![(T0 + 8 * step, 1), (T0 + 9 * step, 1)];
    assert_eq!(log.records().collect::<Vec<_>>(), kept);
    assert_eq!(log.peek(T0 + 9 * step).remaining, 1);
}

#[test]
fn the_largest_limit_is_exact() {
    let ws = [w(MAX_LIMIT, 1000)];
    let mut log = SlidingLog::new(&ws);
    assert!(log.acquire(T0, &ws, MAX_LIMIT - 1).allowed);
    assert_eq!(
        log.acquire(T0 + 1, &ws, 1).as_reply(),
        [1, MAX_LIMIT as i64, 0, 0, 1000]
    );
    assert_eq!(
        log.acquire(T0 + 2, &ws, 1).as_reply(),
        [0, MAX_LIMIT as i64, 0, 998, 999]
    );
    assert_eq!(log.acquire(T0 + 1000, &ws, 1).as_reply()[0], 1);
    assert_eq!(log.records().map(|r| r.1).sum::<u64>(), 2);
}

#[test]
fn from_records_refuses_broken_logs() {
    let ws = vec![w(10, 1000)];
    let ok = SlidingLog::from_records(&ws, T0 + 5, [(T0, 1), (T0 + 5, 2)]);
    assert_eq!(ok.unwrap().records().count(), 2);
    type Case = (Vec<Window>, Instant, Vec<(Instant, u64)>);
    let cases: [Case; 7] = [
        (vec![], T0, vec![]),
        (vec![w(0, 1000)], T0, vec![]),
        (ws.clone(), T0, vec![(T0, 0)]),
        (ws.clone(), T0 + 5, vec![(T0 + 5, 1), (T0, 1)]),
        (ws.clone(), T0, vec![(T0, 1), (T0, 1)]),
        (ws.clone(), T0, vec![(T0 + 1, 1)]),
        (ws.clone(), T0, vec![(T0, MAX_LIMIT + 1)]),
    ];
    for (windows, latest, records) in cases {
        assert!(SlidingLog::from_records(&windows, latest, records).is_err());
    }
}

/// The rule, naively: each record remembers the longest window of the calls recorded
/// since it was made (its own included), and leaves at a recorded call once that window
/// no longer holds it. The log may keep more (a retention keeps the longest of several),
/// never less.
#[derive(Default)]
struct Rule {
    records: Vec<(Instant, u64, u64)>,
}

impl Rule {
    fn record(&mut self, now: Instant, windows: &[Window], cost: u64) {
        let own = longest(windows);
        for r in &mut self.records {
            r.2 = r.2.max(own);
        }
        self.records.retain(|&(t, _, m)| t + m > now);
        self.records.push((now, cost, own));
    }

    fn used(&self, now: Instant, window: u64) -> u64 {
        self.records
            .iter()
            .filter(|(t, _, _)| now.ms() < window || *t > now - window)
            .map(|(_, c, _)| c)
            .sum()
    }
}

/// The records a log must hold: recording drops what no window still counts (what left
/// the longest window, or a retention's, computed as the log's rule says), and a refund
/// takes the newest units. The storage is what this checks.
#[derive(Default)]
struct Records(Vec<(Instant, u64)>, u64, Front);

impl Records {
    fn record(&mut self, now: Instant, longest: u64, cost: u64) {
        let before = self.0.last().map(|&(newest, _)| (self.1, newest));
        self.2.record(now, longest, before, true);
        self.1 = longest;
        let keep = self.2.keep(longest);
        let gone = self.0.partition_point(|r| r.0 + keep <= now);
        self.0.drain(..gone);
        match self.0.last_mut() {
            Some(last) if last.0 == now => last.1 += cost,
            _ => self.0.push((now, cost)),
        }
    }

    fn refund(&mut self, mut units: u64) {
        while units > 0 {
            let Some(last) = self.0.last_mut() else { break };
            let take = units.min(last.1);
            last.1 -= take;
            units -= take;
            if last.1 == 0 {
                self.0.pop();
            }
        }
    }
}

#[derive(Clone, Debug)]
enum BigOp {
    /// Calls, ms between them, units each.
    Burst(u32, u64, u64),
    /// Time moves on, then one unit.
    Jump(u64),
    /// New window, then one unit.
    Window(u64),
    Refund(u64),
}

/// Whether the log is in its small shape.
fn is_small(log: &SlidingLog) -> bool {
    matches!(log.body, Body::Small(_))
}

/// The shape follows the rule: small when it fits and keeps no retention, spilled
/// otherwise, back to small once half the slots hold it.
fn check_shape(log: &SlidingLog) -> Result<(), TestCaseError> {
    let slots = log.windows().len() + log.len();
    if is_small(log) {
        prop_assert!(slots <= SMALL_SLOTS && log.retention().is_empty());
        prop_assert_eq!(log.allocations(), 0);
    } else if slots <= UNSPILL_SLOTS && log.retention().is_empty() {
        prop_assert!(log.allocations() > 1 + UNSPILL_ALLOCATIONS, "{:?}", log);
    }
    Ok(())
}

#[test]
fn a_retention_spills_a_small_log_until_it_ends() {
    let (long, short) = ([w(10, 10_000)], [w(5, 1000)]);
    let mut log = SlidingLog::new(&long);
    for t in [0, 100] {
        assert!(log.acquire(T0 + t, &long, 1).allowed);
    }
    assert!(is_small(&log));
    // A shorter window keeps the records for the longer one: spilled.
    assert!(log.acquire(T0 + 200, &short, 1).allowed);
    assert_eq!(log.retention(), [(10_000, T0 + 100)]);
    assert!(!is_small(&log));
    assert_eq!(log.acquire(T0 + 300, &long, 1).remaining, 6);
    assert!(log.acquire(T0 + 400, &short, 1).allowed);
    // The longer window has passed since its last use: small again, with what the
    // shorter one counts.
    assert!(log.acquire(T0 + 10_300, &short, 1).allowed);
    assert!(log.retention().is_empty());
    assert!(is_small(&log));
    assert_eq!(log.records().collect::<Vec<_>>(), [(T0 + 10_300, 1)]);
}

#[test]
fn eight_windows_fill_the_small_shape() {
    let ws: Vec<Window> = (1..=8).map(|k| w(100, k * 1000)).collect();
    let mut log = SlidingLog::new(&ws);
    assert!(is_small(&log));
    assert_eq!(&*log.windows(), &ws[..]);
    // No room for a record beside them.
    assert!(log.acquire(T0, &ws, 1).allowed);
    assert!(!is_small(&log));
    assert_eq!(log.peek(T0).remaining, 99);
    // One window again: back once half the slots hold it.
    assert!(log.acquire(T0 + 1, &ws[7..], 1).allowed);
    assert!(is_small(&log));
    assert_eq!(&*log.windows(), &ws[7..]);
    assert_eq!(log.peek(T0 + 1).remaining, 98);
    // Nine windows are more than a log records under (RL.SLIDE refuses them).
    let nine: Vec<Window> = (1..=9).map(|k| w(100, k * 1000)).collect();
    assert!(!log.record(T0 + 2, &nine, 1));
    assert_eq!(log.len(), 2);
}

#[derive(Clone, Debug)]
enum SmallOp {
    /// Calls, ms between them, units each.
    Burst(u32, u64, u64),
    /// Time moves on, then one unit.
    Jump(u64),
    /// Other windows (from the pool), then one unit.
    Windows(usize),
    Refund(u64),
}

fn small_op() -> impl Strategy<Value = SmallOp> {
    prop_oneof![
        4 => (1u32..10, 0u64..3, 1u64..4).prop_map(|(n, g, c)| SmallOp::Burst(n, g, c)),
        2 => (1u64..400).prop_map(SmallOp::Jump),
        1 => (0usize..4).prop_map(SmallOp::Windows),
        2 => (0u64..15).prop_map(SmallOp::Refund),
    ]
}

fn big_op() -> impl Strategy<Value = BigOp> {
    prop_oneof![
        4 => (1u32..6000, 0u64..3, 1u64..4).prop_map(|(n, g, c)| BigOp::Burst(n, g, c)),
        1 => (1u64..60_000).prop_map(BigOp::Jump),
        1 => (1u64..60_000).prop_map(BigOp::Window),
        2 => (0u64..12_000).prop_map(BigOp::Refund),
    ]
}

fn arb_windows() -> impl Strategy<Value = Vec<Window>> {
    prop::collection::vec((1u64..12, 1u64..400).prop_map(|(l, ms)| w(l, ms)), 1..4)
}

proptest! {
    #[test]
    fn matches_the_naive_model(
        windows in arb_windows(),
        steps in prop::collection::vec((0u64..60, 0u64..4, prop::bool::weighted(0.1)), 1..200),
    ) {
        let mut log = SlidingLog::new(&windows);
        let mut naive = Naive::default();
        let mut now = T0;
        for (gap, cost, back_in_time) in steps {
            // Occasionally go back in time: it must count as the latest time seen.
            let at = if back_in_time { now.saturating_sub(Duration::from_ms(gap)) } else { now + gap };
            now = now.max(at);
            let d = log.acquire(at, &windows, cost);
            let (allowed, remaining, wait) = naive.acquire(at, &windows, cost);
            prop_assert_eq!(d.allowed, allowed);
            prop_assert_eq!(d.remaining, remaining);
            prop_assert_eq!(d.retry_after, wait);
            if let Wait::For(ms) = wait {
                // The wait is exact: one millisecond earlier is still refused.
                prop_assert!(!log.evaluate(log.latest().max(at) + ms - 1, &windows, cost).allowed);
                prop_assert!(log.evaluate(log.latest().max(at) + ms, &windows, cost).allowed);
            }
            let total: u64 = log.records().map(|r| r.1).sum();
            let naive_kept = naive.used(log.latest(), longest(&windows));
            prop_assert!(total >= naive_kept);
        }
    }

    /// Windows that change from call to call: each window counts at least what the rule
    /// keeps and at most everything ever recorded, so the log allows whatever keeping
    /// everything would, and nothing the rule refuses. Once one set of windows has been
    /// used alone for longer than any window, the log holds only what it counts.
    #[test]
    fn changing_windows_keep_what_the_rule_keeps(
        pool in prop::collection::vec(arb_windows(), 2..4),
        steps in prop::collection::vec(
            (0usize..4, 0u64..60, 0u64..4, prop::bool::weighted(0.1)), 1..250),
    ) {
        let mut log = SlidingLog::new(&pool[0]);
        let mut rule = Rule::default();
        let mut all = Naive::default();
        let mut now = T0;
        let mut run: Option<(usize, Instant)> = None;
        for (pick, gap, cost, back_in_time) in steps {
            let i = pick % pool.len();
            let windows = &pool[i];
            let at = if back_in_time { now.saturating_sub(Duration::from_ms(gap)) } else { now + gap };
            now = now.max(at);
            let t = log.latest().max(at);
            let (mut rule_fits, mut all_fits) = (true, true);
            for x in windows.iter() {
                let real = log.used(t, x.window_ms).1;
                prop_assert!(rule.used(t, x.window_ms) <= real);
                prop_assert!(real <= all.used(t, x.window_ms));
                rule_fits &= rule.used(t, x.window_ms) + cost <= x.limit;
                all_fits &= all.used(t, x.window_ms) + cost <= x.limit;
            }
            let d = log.acquire(at, windows, cost);
            prop_assert!(!all_fits || d.allowed, "keeping everything would allow it");
            prop_assert!(!d.allowed || rule_fits, "the rule refuses it");
            if d.allowed && cost > 0 {
                rule.record(t, windows, cost);
                all.records.push((t, cost));
                run = match run {
                    Some((j, since)) if j == i => Some((j, since)),
                    _ => Some((i, t)),
                };
                let widest = pool.iter().map(|ws| longest(ws)).max().unwrap();
                if let Some((_, since)) = run.filter(|&(_, since)| t >= since + widest) {
                    prop_assert!(log.retention().is_empty(), "used alone since {}", since);
                    let own = longest(windows);
                    prop_assert!(log.records().all(|(r, _)| r + own > t));
                }
            }
        }
    }

    /// Against an independent model of the rule: every call `(w, c)` remembered (its
    /// longest window and time), and a record at `r` still counted iff some call at
    /// `c >= r` has `r > now - w`. The log keeps at least those records (so it never
    /// decides wrong); with at most 4 distinct longest windows it keeps exactly the
    /// records newer than `now - K`, `K` the longest window of a call that has not
    /// passed since (`c + w > now`): what the model keeps, plus at most the records
    /// newer than `now - K` that only shorter windows used after them could count.
    #[test]
    fn keeps_what_an_independent_model_keeps(
        pool in prop::collection::vec(1u64..2000, 1..5),
        steps in prop::collection::vec((0usize..4, 0u64..400), 1..200),
    ) {
        let mut log = SlidingLog::new(&[w(MAX_LIMIT, pool[0])]);
        let mut calls: Vec<(u64, Instant)> = Vec::new();
        // What the model keeps, and what the log should keep with its one cutoff.
        let mut model: Vec<Instant> = Vec::new();
        let mut cut: Vec<Instant> = Vec::new();
        let mut now = T0;
        for (pick, gap) in steps {
            now += gap;
            let own = pool[pick % pool.len()];
            prop_assert!(log.acquire(now, &[w(MAX_LIMIT, own)], 1).allowed);
            calls.push((own, now));
            for list in [&mut model, &mut cut] {
                if list.last() != Some(&now) {
                    list.push(now);
                }
            }
            // A record leaves once no call since counts it, and never comes back.
            model.retain(|&r| calls.iter().any(|&(w, c)| c >= r && r + w > now));
            let k = calls.iter().filter(|&&(w, c)| c + w > now).map(|c| c.0).max();
            cut.retain(|&r| r + k.unwrap_or(0) > now);
            let kept: Vec<Instant> = log.records().map(|r| r.0).collect();
            for r in &model {
                prop_assert!(kept.contains(r), "{} dropped at {}", r, now);
            }
            prop_assert_eq!(kept, cut.clone());
        }
    }

    #[test]
    fn refunds_match_removing_the_newest_units(
        costs in prop::collection::vec(1u64..5, 1..30),
        refund in 0u64..100,
    ) {
        let ws = [w(1000, 100_000)];
        let mut log = SlidingLog::new(&ws);
        let mut model: Vec<(Instant, u64)> = Vec::new();
        for (i, c) in costs.iter().enumerate() {
            let t = T0 + (i as u64 / 2);
            log.acquire(t, &ws, *c);
            match model.last_mut() {
                Some(last) if last.0 == t => last.1 += c,
                _ => model.push((t, *c)),
            }
        }
        let mut left = refund;
        while left > 0 {
            let Some(last) = model.last_mut() else { break };
            let take = left.min(last.1);
            last.1 -= take;
            left -= take;
            if last.1 == 0 { model.pop(); }
        }
        log.refund(T0, refund);
        prop_assert_eq!(log.records().collect::<Vec<_>>(), model);
    }

    #[test]
    fn records_round_trip(
        steps in prop::collection::vec((0u64..5000, 1u64..4), 0..100),
    ) {
        let ws = [w(50, 3000)];
        let mut log = SlidingLog::new(&ws);
        let mut now = T0;
        for (gap, cost) in steps {
            now += gap;
            log.acquire(now, &ws, cost);
        }
        let again = SlidingLog::from_records(
            &log.windows(), log.latest(), log.records().collect::<Vec<_>>());
        let again = again.unwrap();
        prop_assert_eq!(again.records().collect::<Vec<_>>(), log.records().collect::<Vec<_>>());
        prop_assert_eq!(again.peek(now + 1), log.peek(now + 1));
    }

    /// Logs growing past the small shape and shrinking back, by trims, refunds and
    /// retentions, with one to eight windows: the same records as the model, the same
    /// answers as a log rebuilt from them, and the shape the rule says.
    #[test]
    fn small_and_spilled_logs_match_the_records_model(
        pool in prop::collection::vec(
            prop::collection::vec(1u64..300, 1..9), 1..4),
        ops in prop::collection::vec(small_op(), 1..60),
    ) {
        let sets: Vec<Vec<Window>> = pool
            .iter()
            .map(|ms| ms.iter().map(|&m| w(MAX_LIMIT, m)).collect())
            .collect();
        let mut windows = sets[0].clone();
        let mut log = SlidingLog::new(&windows);
        let mut model = Records(Vec::new(), longest(&windows), Front::default());
        let mut now = T0;
        for op in ops {
            match op {
                SmallOp::Burst(calls, gap, cost) => {
                    for _ in 0..calls {
                        now += gap;
                        prop_assert!(log.record(now, &windows, cost));
                        model.record(now, longest(&windows), cost);
                        check_shape(&log)?;
                    }
                }
                SmallOp::Jump(gap) => {
                    now += gap;
                    prop_assert!(log.record(now, &windows, 1));
                    model.record(now, longest(&windows), 1);
                }
                SmallOp::Windows(i) => {
                    windows = sets[i % sets.len()].clone();
                    prop_assert!(log.record(now, &windows, 1));
                    model.record(now, longest(&windows), 1);
                }
                SmallOp::Refund(units) => {
                    log.refund(now, units);
                    model.refund(units);
                }
            }
            check_shape(&log)?;
            prop_assert_eq!(&*log.windows(), &windows[..]);
            prop_assert_eq!(log.len(), model.0.len());
            prop_assert!(log.records().eq(model.0.iter().copied()));
            prop_assert_eq!(log.retention(), model.2.entries());
            let window = longest(&windows);
            let used: u64 = model.0.iter().filter(|r| r.0 + window > now).map(|r| r.1).sum();
            prop_assert_eq!(log.peek(now).remaining, MAX_LIMIT - used);
            let again = SlidingLog::from_records(
                &log.windows(), log.latest(), log.records().collect::<Vec<_>>())
                .unwrap()
                .with_retention(log.retention())
                .unwrap();
            check_shape(&again)?;
            prop_assert_eq!(again.peek(now + 50), log.peek(now + 50));
            prop_assert_eq!(again.empty_at(), log.empty_at());
        }
    }

    #[test]
    fn big_logs_match_the_records_model(
        ops in prop::collection::vec(big_op(), 1..40),
    ) {
        let mut windows = vec![w(MAX_LIMIT, 50_000)];
        let mut log = SlidingLog::new(&windows);
        let mut model = Records(Vec::new(), 50_000, Front::default());
        let mut now = T0;
        for op in ops {
            match op {
                BigOp::Burst(calls, gap, cost) => {
                    for _ in 0..calls {
                        now += gap;
                        prop_assert!(log.record(now, &windows, cost));
                        model.record(now, longest(&windows), cost);
                    }
                }
                BigOp::Jump(gap) => {
                    now += gap;
                    prop_assert!(log.record(now, &windows, 1));
                    model.record(now, longest(&windows), 1);
                }
                BigOp::Window(ms) => {
                    windows = vec![w(MAX_LIMIT, ms)];
                    prop_assert!(log.record(now, &windows, 1));
                    model.record(now, ms, 1);
                }
                BigOp::Refund(units) => {
                    log.refund(now, units);
                    model.refund(units);
                }
            }
            prop_assert_eq!(log.len(), model.0.len());
            prop_assert!(log.records().eq(model.0.iter().copied()));
            let window = longest(&windows);
            let used: u64 = model.0.iter().filter(|r| r.0 + window > now).map(|r| r.1).sum();
            prop_assert_eq!(log.peek(now).remaining, MAX_LIMIT - used);
            let empty_at = model.0.last().map(|r| {
                let kept = model.2.empty_at(r.0).unwrap_or(Instant::EPOCH);
                (r.0 + longest(&windows)).max(kept)
            });
            prop_assert_eq!(log.empty_at(), empty_at);
        }
    }
}

/// A log narrowed from a day's window to a minute's keeps the day's records for its
/// retention; shed of them, it answers the minute's calls, peeks and empty time the same.
#[test]
fn a_log_shed_of_its_retention_answers_its_own_windows_the_same() {
    use crate::core::codec::Reader;
    use crate::core::kind::Encoding;
    use crate::core::limit::Limit;
    let t0 = Instant::from_ms(1_700_000_000_000);
    let (day, minute) = ([w(100, 86_400_000)], [w(100, 60_000)]);
    let mut log = SlidingLog::new(&day);
    for i in 0..50u64 {
        assert!(log.record(t0 + i * 1000, &day, 1));
    }
    for i in 50..400u64 {
        log.record(t0 + i * 1000, &minute, 1);
    }
    assert!(!log.retention().is_empty());
    let mut shed = log.clone();
    shed.shed_retained();
    assert!(shed.len() < log.len(), "{} records, {}", shed.len(), log.len());
    assert_eq!(shed.retention(), log.retention());
    assert_eq!(shed.empty_at(), log.empty_at());
    for dt in [0u64, 1, 999, 30_000, 60_000, 3_600_000] {
        let now = t0 + 400_000 + dt;
        for cost in [0, 1, 5, 100, 101] {
            assert_eq!(
                shed.evaluate(now, &minute, cost),
                log.evaluate(now, &minute, cost),
                "{dt} {cost}"
            );
        }
        assert_eq!(shed.peek(now), log.peek(now), "{dt}");
    }
    // Read back by its validating constructor.
    let mut bytes = Vec::new();
    shed.encode(&mut bytes);
    let back = SlidingLog::decode(SlidingLog::VERSION, &mut Reader::new(&bytes));
    assert!(back.is_ok(), "{back:?}");
}
