//! The penalty box against a naive model that keeps every refusal and ban and works the
//! answer out again from them at each call; exact escalation and expiry.

use proptest::prelude::*;

use super::*;
use crate::core::kind::Rate;

const T0: Instant = Instant::from_ms(1_700_000_000_000);

fn params(line: &str) -> Params {
    let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    Penalty::parse(&words).expect("valid").params
}

/// Everything that happened: each counted refusal (time, units) and each ban (start, end,
/// doublings).
#[derive(Default)]
struct Model {
    refusals: Vec<(Instant, u64)>,
    bans: Vec<(Instant, Instant, u64)>,
}

impl Model {
    fn banned(&self, now: Instant) -> Option<Instant> {
        self.bans
            .iter()
            .find(|&&(start, end, _)| start <= now && now < end)
            .map(|&(_, end, _)| end)
    }

    /// The refusals counted since the last ban started, split into windows: each opened by
    /// the first refusal at or past the end of the one before. The last window's opening
    /// and count.
    fn window(&self, p: &Params) -> Option<(Instant, u64)> {
        let since = self.bans.last().map_or(Instant::EPOCH, |&(start, ..)| start);
        let mut open: Option<(Instant, u64)> = None;
        for &(at, units) in self.refusals.iter().filter(|(at, _)| *at > since || since == Instant::EPOCH) {
            open = match open {
                Some((o, n)) if at < o + Duration::from_ms(p.window_ms) => Some((o, n + units)),
                _ => Some((at, units)),
            };
        }
        open
    }

    fn count_at(&self, now: Instant, p: &Params) -> u64 {
        match self.window(p) {
            Some((o, n)) if now < o + Duration::from_ms(p.window_ms) => n,
            _ => 0,
        }
    }

    fn empty_at(&self, now: Instant, p: &Params) -> Option<Instant> {
        let window = self
            .window(p)
            .map(|(o, _)| o + Duration::from_ms(p.window_ms))
            .filter(|&end| now < end && self.count_at(now, p) > 0);
        let bans = self
            .bans
            .last()
            .map(|&(_, end, _)| end + Duration::from_ms(p.horizon_ms))
            .filter(|&end| now < end);
        window.max(bans)
    }

    /// A call of `cost` at `now`: its decision, and what it records.
    fn call(&mut self, now: Instant, p: &Params, cost: u64) -> Decision {
        if let Some(end) = self.banned(now) {
            return Decision {
                allowed: false,
                limit: p.refusals,
                remaining: 0,
                retry_after: Wait::For(end - now),
                reset_after: self.empty_at(now, p).map_or(end - now, |e| e - now),
            };
        }
        if cost > 0 {
            let count = self.count_at(now, p) + cost;
            self.refusals.push((now, cost));
            if count >= p.refusals {
                let level = match self.bans.last() {
                    Some(&(_, end, level)) if now < end + Duration::from_ms(p.horizon_ms) => {
                        (level + 1).min(MAX_LEVEL)
                    }
                    _ => 0,
                };
                let mut ms = p.ban_ms;
                for _ in 0..level {
                    ms = (ms * 2).min(p.max_ms);
                }
                self.bans.push((now, now + Duration::from_ms(ms), level));
            }
        }
        let banned = self.banned(now).is_some();
        Decision {
            allowed: true,
            limit: p.refusals,
            remaining: if banned { 0 } else { p.refusals.saturating_sub(self.count_at(now, p)) },
            retry_after: Wait::None,
            reset_after: self.empty_at(now, p).map_or(Duration::ZERO, |e| e - now),
        }
    }
}

/// The kind's answer to a call, recording as its command does.
fn call(state: &mut Penalty, now: Instant, p: &Params, cost: u64) -> Decision {
    let d = state.evaluate(now, p, cost);
    if d.allowed && cost > 0 {
        assert!(state.record(now, p, cost));
        return d.resetting_at(state.empty_at(), now);
    }
    d
}

#[test]
fn bans_escalate_and_expire_exactly() {
    // 3 refusals within a minute ban for 1 s, doubling up to 8 s within 10 s of the last.
    let p = params("3 60000 1000 MAX 8000 HORIZON 10000");
    let mut s = Penalty::fresh(&p);
    let d = call(&mut s, T0, &p, 1);
    assert_eq!(d.as_reply(), [1, 3, 2, 0, 60000]);
    call(&mut s, T0 + 1, &p, 1);
    // The third: banned from now for 1 s (the key holds it 10 s past the ban).
    let d = call(&mut s, T0 + 2, &p, 1);
    assert_eq!(d.as_reply(), [1, 3, 0, 0, 11000]);
    let d = call(&mut s, T0 + 3, &p, 1);
    assert_eq!(d.as_reply(), [0, 3, 0, 999, 10999]);
    // Refusals while banned count nothing; the last millisecond of the ban, then free.
    assert_eq!(call(&mut s, T0 + 1001, &p, 1).as_reply()[..4], [0, 3, 0, 1]);
    assert_eq!(call(&mut s, T0 + 1002, &p, 0).as_reply()[..3], [1, 3, 3]);
    // Within the horizon: 2 s, then 4, then 8, then 8 (the most).
    let mut at = T0 + 1002;
    for want in [2000, 4000, 8000, 8000] {
        for _ in 0..3 {
            call(&mut s, at, &p, 1);
        }
        let d = call(&mut s, at, &p, 0);
        assert_eq!(d.retry_after, Wait::For(Duration::from_ms(want)), "{d:?}");
        at += Duration::from_ms(want);
    }
    // A quiet horizon after the last ban: back to 1 s.
    at += Duration::from_ms(10_000);
    for _ in 0..3 {
        call(&mut s, at, &p, 1);
    }
    assert_eq!(call(&mut s, at, &p, 0).retry_after, Wait::For(Duration::from_ms(1000)));
    // The key is empty when the horizon after the ban is over.
    assert_eq!(s.empty_at(), Some(at + Duration::from_ms(11_000)));
}

#[test]
fn the_window_opens_with_the_first_refusal() {
    let p = params("2 1000 5000");
    let mut s = Penalty::fresh(&p);
    call(&mut s, T0, &p, 1);
    // The window of the first is over: the second opens a new one, no ban.
    let d = call(&mut s, T0 + 1000, &p, 1);
    assert_eq!(d.as_reply(), [1, 2, 1, 0, 1000]);
    let d = call(&mut s, T0 + 1999, &p, 1);
    assert_eq!(d.as_reply()[..3], [1, 2, 0]);
    assert!(s.banned(T0 + 1999) && !s.banned(T0 + 6999));
    // Defaults: MAX the ban (no doubling), HORIZON the MAX.
    assert_eq!((p.max_ms, p.horizon_ms), (5000, 5000));
}

fn param_line() -> impl Strategy<Value = String> {
    (
        1u64..5,
        prop::sample::select(vec![1u64, 10, 1000, 60_000]),
        prop::sample::select(vec![1u64, 7, 1000]),
        0u64..6,
        prop::sample::select(vec![0u64, 5, 1000, 100_000]),
    )
        .prop_map(|(n, w, d, doublings, h)| {
            let max = (d << doublings).min(MAX_MS);
            format!("{n} {w} {d} MAX {max} HORIZON {h}")
        })
}

proptest! {
    #[test]
    fn the_box_answers_as_the_model(
        line in param_line(),
        calls in prop::collection::vec((0u64..1500, 0u64..4), 1..80),
    ) {
        let p = params(&line);
        let mut s = Penalty::fresh(&p);
        let mut m = Model::default();
        let mut now = T0;
        for (step, cost) in calls {
            now += Duration::from_ms(step);
            let got = call(&mut s, now, &p, cost);
            let want = m.call(now, &p, cost);
            prop_assert_eq!(got, want, "{} at +{}", &line, now.ms() - T0.ms());
            // Its encoding reads back as it is.
            let mut out = Vec::new();
            s.encode(&mut out);
            let back = Penalty::decode(Penalty::VERSION, &mut Reader::new(&out));
            prop_assert_eq!(back.as_ref(), Ok(&s));
        }
    }
}
