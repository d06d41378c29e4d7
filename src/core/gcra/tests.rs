//! The generic cell rate algorithm against a naive model of a balance of units.

use super::*;
use proptest::prelude::*;

const T0: Instant = Instant::from_ms(1_700_000_000_000);

fn token(limit: u64, window_ms: u64, burst: u64) -> Params {
    Params {
        limit,
        window_ms,
        burst,
        max_delay_ms: 0,
    }
}

fn leaky(limit: u64, window_ms: u64, burst: u64, max_delay_ms: u64) -> Params {
    Params {
        limit,
        window_ms,
        burst,
        max_delay_ms,
    }
}

/// The obviously-correct model: a balance of units, scaled by `window_ms` so that it
/// refills by exactly `limit` each millisecond, capped at the burst. A booking takes its
/// units from the balance, which may go negative (for a scheduler); the delay is how
/// long the balance needs to climb back to zero. Waits are found by trying each
/// millisecond in turn.
#[derive(Clone)]
struct Naive {
    balance: i128,
    at: Instant,
}

impl Naive {
    fn new(p: &Params) -> Naive {
        Naive {
            balance: i128::from(p.burst * p.window_ms),
            at: Instant::EPOCH,
        }
    }

    fn advance(&mut self, now: Instant, p: &Params) {
        let now = now.max(self.at);
        let cap = i128::from(p.burst * p.window_ms);
        self.balance =
            (self.balance + i128::from((now - self.at).ms()) * i128::from(p.limit)).min(cap);
        self.at = now;
    }

    /// The delay (ms) a booking of `cost` would get at the current time.
    fn delay(&self, p: &Params, cost: u64) -> i128 {
        let short = i128::from(cost * p.window_ms) - self.balance;
        if short <= 0 {
            0
        } else {
            (short + i128::from(p.limit) - 1) / i128::from(p.limit)
        }
    }

    /// Only a call that books units moves the model's clock: one that changes nothing
    /// leaves no trace, as in the real limiter.
    fn acquire(&mut self, now: Instant, p: &Params, cost: u64) -> (bool, u64, Wait) {
        let mut this = self.clone();
        this.advance(now, p);
        let delay = this.delay(p, cost);
        let fits = |n: &Naive| n.delay(p, cost) <= i128::from(p.max_delay_ms);
        if fits(&this) {
            this.balance -= i128::from(cost * p.window_ms);
            let wait = if delay == 0 || cost == 0 {
                Wait::None
            } else {
                Wait::For(Duration::from_ms(delay as u64))
            };
            let remaining = this.remaining(p);
            if cost > 0 {
                *self = this;
            }
            return (true, remaining, wait);
        }
        // Can it ever fit? Only if a full bucket would take it.
        let mut full = this.clone();
        full.balance = i128::from(p.burst * p.window_ms);
        if !fits(&full) {
            return (false, this.remaining(p), Wait::Never);
        }
        let mut probe = this.clone();
        let mut ms = 0;
        while !fits(&probe) {
            ms += 1;
            probe.advance(this.at + ms, p);
        }
        (false, this.remaining(p), Wait::For(Duration::from_ms(ms)))
    }

    /// How many more single-unit bookings fit right now, one after another.
    fn remaining(&self, p: &Params) -> u64 {
        let mut probe = self.clone();
        let mut n = 0;
        while probe.delay(p, 1) <= i128::from(p.max_delay_ms) {
            probe.balance -= i128::from(p.window_ms);
            n += 1;
        }
        n
    }
}

fn run_table(p: &Params, rows: &[crate::core::limit::table::Row]) {
    crate::core::limit::table::run(Gcra::new(p), p, T0, rows);
}

#[test]
fn readme_leaky_four_per_second() {
    // Four bookings at one instant leave 250 ms apart (MAXDELAY defaults to the window).
    let p = leaky(4, 1000, 1, 1000);
    run_table(
        &p,
        &[
            (0, 1, [1, 5, 4, 0, 250]),
            (0, 1, [1, 5, 3, 250, 500]),
            (0, 1, [1, 5, 2, 500, 750]),
            (0, 1, [1, 5, 1, 750, 1000]),
        ],
    );
    // A fifth that may wait at most 500 ms would wait 1000: refused, retry in 500 ms.
    let mut g = Gcra::new(&p);
    for _ in 0..4 {
        g.acquire(T0, &p, 1);
    }
    let short = leaky(4, 1000, 1, 500);
    assert_eq!(g.acquire(T0, &short, 1).as_reply(), [0, 3, 0, 500, 1000]);
    assert_eq!(
        g.acquire(T0 + 500, &short, 1).as_reply(),
        [1, 3, 0, 500, 750]
    );
}

#[test]
fn readme_token_120_per_minute() {
    // 120 per 60 s is 2 per second after the burst: one token every 500 ms.
    let p = token(120, 60_000, 120);
    let mut g = Gcra::new(&p);
    for _ in 0..120 {
        assert!(g.acquire(T0, &p, 1).allowed);
    }
    assert_eq!(g.acquire(T0, &p, 1).as_reply(), [0, 120, 0, 500, 60_000]);
    assert_eq!(
        g.acquire(T0 + 499, &p, 1).as_reply(),
        [0, 120, 0, 1, 59_501]
    );
    assert_eq!(
        g.acquire(T0 + 500, &p, 1).as_reply(),
        [1, 120, 0, 0, 60_000]
    );
    assert_eq!(
        g.acquire(T0 + 2000, &p, 1).as_reply(),
        [1, 120, 2, 0, 59_000]
    );
}

#[test]
fn rate_extremes_are_exact() {
    // One per day.
    let day = token(1, 86_400_000, 1);
    run_table(
        &day,
        &[
            (0, 1, [1, 1, 0, 0, 86_400_000]),
            (1, 1, [0, 1, 0, 86_399_999, 86_399_999]),
            (86_400_000, 1, [1, 1, 0, 0, 86_400_000]),
        ],
    );
    // A million per second: a thousand per millisecond, exactly.
    let fast = token(1_000_000, 1000, 1000);
    let mut g = Gcra::new(&fast);
    assert!(g.acquire(T0, &fast, 1000).allowed);
    assert_eq!(g.acquire(T0, &fast, 1).as_reply(), [0, 1000, 0, 1, 1]);
    assert_eq!(
        g.acquire(T0 + 1, &fast, 1000).as_reply(),
        [1, 1000, 0, 0, 1]
    );
    // Three per second, polled every millisecond once the burst is used: thirds of a
    // millisecond are kept, not rounded away.
    let third = token(3, 1000, 3);
    let mut g = Gcra::new(&third);
    assert!(g.acquire(T0, &third, 3).allowed);
    let allowed_at: Vec<u64> = (1..=2000)
        .filter(|&ms| g.acquire(T0 + ms, &third, 1).allowed)
        .collect();
    assert_eq!(allowed_at, vec![334, 667, 1000, 1334, 1667, 2000]);
}

#[test]
fn cost_beyond_what_can_ever_fit() {
    run_table(&token(10, 1000, 5), &[(0, 6, [0, 5, 5, -1, 0])]);
    // A scheduler can take more than its burst when MAXDELAY leaves room for it.
    run_table(
        &leaky(10, 1000, 1, 500),
        &[(0, 6, [1, 6, 0, 500, 600]), (0, 7, [0, 6, 0, -1, 600])],
    );
}

#[test]
fn refund_gives_back_the_latest_bookings() {
    let p = leaky(4, 1000, 1, 1000);
    let mut g = Gcra::new(&p);
    for _ in 0..4 {
        g.acquire(T0, &p, 1);
    }
    assert_eq!(g.refund(T0, 2).as_reply(), [1, 5, 3, 0, 500]);
    assert_eq!(g.acquire(T0, &p, 1).as_reply(), [1, 5, 2, 500, 750]);
    assert_eq!(g.refund(T0 + 100, 100).as_reply(), [1, 5, 5, 0, 0]);
    assert_eq!(g.empty_at(), None);
}

#[test]
fn time_never_runs_backwards() {
    let p = token(2, 1000, 2);
    let mut g = Gcra::new(&p);
    g.acquire(T0 + 500, &p, 2);
    assert_eq!(g.acquire(T0, &p, 1).as_reply(), [0, 2, 0, 500, 1000]);
    assert_eq!(g.latest(), T0 + 500);
}

#[test]
fn raising_the_rate_keeps_the_units_owed() {
    // 100 per minute, all used: 100 units owed. At 1000 per minute those 100 units take
    // 6 s to repay, so 900 of the new burst are free at once.
    let slow = token(100, 60_000, 100);
    let fast = token(1000, 60_000, 1000);
    let mut g = Gcra::new(&slow);
    g.acquire(T0, &slow, 100);
    assert_eq!(g.acquire(T0, &fast, 1).as_reply(), [1, 1000, 899, 0, 6060]);
    // Same rate in other words (200 per 2 minutes): nothing changes.
    let mut h = Gcra::new(&slow);
    h.acquire(T0, &slow, 10);
    let same = token(200, 120_000, 100);
    assert_eq!(h.peek(T0).reset_after, h.evaluate(T0, &same, 0).reset_after);
}

/// The scenario: three calls fill 3 per 10 s; a call with 5 per 1 s takes the
/// units owed along, re-timed at its rate, so the 10 s bucket still finds them.
#[test]
fn a_new_window_keeps_the_units_owed() {
    let (long, short) = (token(3, 10_000, 3), token(5, 1000, 5));
    let mut g = Gcra::new(&long);
    for t in [0, 100, 200] {
        assert!(g.acquire(T0 + t, &long, 1).allowed);
    }
    // 2.625 units owed at +1250, repaid at 5 per second: 1.375 of 5 free.
    assert_eq!(
        g.acquire(T0 + 1250, &short, 1).as_reply(),
        [1, 5, 1, 0, 725]
    );
    // 3.375 units owed at +1300, repaid at one per 3.33 s again: 1.375 must go first.
    assert_eq!(
        g.acquire(T0 + 1300, &long, 1).as_reply(),
        [0, 3, 0, 4584, 11_250]
    );
    assert!(!g.acquire(T0 + 1500, &long, 1).allowed);
    // At one instant, back and forth: nothing owed is ever dropped.
    let mut h = Gcra::new(&long);
    h.acquire(T0, &long, 3);
    assert_eq!(h.acquire(T0, &short, 1).as_reply()[..3], [1, 5, 1]);
    assert_eq!(h.acquire(T0, &long, 1).as_reply()[..4], [0, 3, 0, 6667]);
}

#[test]
fn from_parts_checks_ranges() {
    let p = token(10, 1000, 10);
    assert!(Gcra::from_parts(p, T0, 5).is_ok());
    assert!(Gcra::from_parts(token(0, 1000, 1), T0, 0).is_err());
    assert!(Gcra::from_parts(token(1, 1000, MAX_RATE_LIMIT + 1), T0, 0).is_err());
    assert!(Gcra::from_parts(leaky(1, 1000, 1, MAX_WINDOW_MS + 1), T0, 0).is_err());
    assert!(Gcra::from_parts(p, MAX_TIMESTAMP + 1, 0).is_err());
}

#[test]
fn the_state_is_small() {
    assert_eq!(std::mem::size_of::<Gcra>(), 32);
}

fn arb_params() -> impl Strategy<Value = Params> {
    (
        1u64..20,
        1u64..3000,
        1u64..6,
        prop::sample::select(vec![0u64, 0, 100, 1000]),
    )
        .prop_map(|(limit, window_ms, burst, max_delay_ms)| Params {
            limit,
            window_ms,
            burst,
            max_delay_ms,
        })
}

proptest! {
    #[test]
    fn matches_the_naive_model(
        p in arb_params(),
        steps in prop::collection::vec((0u64..400, 0u64..4, prop::bool::weighted(0.1)), 1..120),
    ) {
        let mut g = Gcra::new(&p);
        let mut naive = Naive::new(&p);
        let mut now = T0;
        for (gap, cost, back) in steps {
            let at = if back { now.saturating_sub(Duration::from_ms(gap)) } else { now + gap };
            now = now.max(at);
            let d = g.acquire(at, &p, cost);
            let (allowed, remaining, wait) = naive.acquire(at, &p, cost);
            prop_assert_eq!(d.allowed, allowed);
            prop_assert_eq!(d.remaining, remaining);
            prop_assert_eq!(d.retry_after, wait);
        }
    }

    /// Whatever the parameters, a recorded call carries every unit owed: the debt, in
    /// units (ticks / window), is what was owed less what the elapsed time repaid at the
    /// stored rate, plus the cost, rounded up by less than one tick of the new rate.
    #[test]
    fn changes_carry_every_unit_owed(
        params in prop::collection::vec(arb_params(), 1..12),
        steps in prop::collection::vec((0u64..300, 0u64..4), 1..12),
    ) {
        let mut g = Gcra::new(&params[0]);
        let mut now = T0;
        for (i, (gap, cost)) in steps.into_iter().enumerate() {
            let p = params[i % params.len()];
            let old = g.params();
            let before = u128::from(g.debt());
            now += gap;
            let repaid = u128::from(gap) * u128::from(old.limit);
            prop_assert!(g.record(now, &p, cost));
            // In units of 1 / (old window x new window) ticks: owed x old window x new window.
            let (w_old, w_new) = (u128::from(old.window_ms), u128::from(p.window_ms));
            let owed = before.saturating_sub(repaid) * w_new + u128::from(cost) * w_new * w_old;
            let got = u128::from(g.debt()) * w_old;
            prop_assert!(got >= owed, "{} < {}", got, owed);
            prop_assert!(got < owed + w_old, "{} >= {} + {}", got, owed, w_old);
        }
    }

    #[test]
    fn refused_calls_change_nothing(p in arb_params(), costs in prop::collection::vec(1u64..8, 1..40)) {
        let mut g = Gcra::new(&p);
        for c in costs {
            let before = g.clone();
            if !g.acquire(T0, &p, c).allowed {
                prop_assert_eq!(&g, &before);
            }
        }
    }
}
