//! `RL.ALL`'s decision, without Redis: several limiters of any kinds decide at one time, and
//! either every one records its cost or none changes.
//!
//! Each limiter is evaluated (which changes nothing) under its spec; a stored limiter whose
//! shape must change for the spec is reshaped into a new value and the stored one is left as
//! it is, so a refused call leaves every key untouched and copies nothing it does not need
//! (only a `RL.SUBWIN` ring reshapes, in at most 4,097 counters; the other kinds take new
//! parameters in `record`). Only when every one allows does each record its cost.

use crate::algo::fixed::FixedWindow;
use crate::algo::gcra::Gcra;
use crate::algo::lease::Leases;
use crate::algo::slide::SlidingLog;
use crate::algo::subwin::SubWindow;
use std::ops::DerefMut;

use smallvec::SmallVec;

use crate::algo::{Decision, Limit, Millis, Wait};
use crate::args::{Spec, SpecParams, ALL_INLINE_KEYS};
use crate::error::Error;
use crate::value::{Kind, Limiter};

impl Spec<'_> {
    /// The kind of limiter the spec is for.
    pub fn kind(&self) -> Kind {
        match self.params {
            SpecParams::Slide(_) => Kind::Slide,
            SpecParams::Token(_) => Kind::Token,
            SpecParams::Leaky(_) => Kind::Leaky,
            SpecParams::Fixed(_) => Kind::Fixed,
            SpecParams::Subwin(_) => Kind::Subwin,
            SpecParams::Acquire(_) => Kind::Lease,
        }
    }

    /// An empty limiter for a missing key.
    pub fn fresh(&self) -> Limiter {
        match &self.params {
            SpecParams::Slide(w) => Limiter::Slide(Box::new(SlidingLog::new(w.as_slice()))),
            SpecParams::Token(p) => Limiter::Token(Gcra::new(p)),
            SpecParams::Leaky(p) => Limiter::Leaky(Gcra::new(p)),
            SpecParams::Fixed(p) => Limiter::Fixed(FixedWindow::new(p)),
            SpecParams::Subwin(p) => Limiter::Subwin(SubWindow::new(p)),
            SpecParams::Acquire(p) => Limiter::Lease(Box::new(Leases::new(p))),
        }
    }

    /// The limiter reshaped for this spec at `now`, when the stored one cannot take it as it
    /// is (see [`Limit::reshaped`]).
    pub(crate) fn reshaped(&self, limiter: &Limiter, now: Millis) -> Option<Limiter> {
        match (&self.params, limiter) {
            (SpecParams::Slide(w), Limiter::Slide(l)) => l
                .reshaped(now, w.as_slice())
                .map(|l| Limiter::Slide(Box::new(l))),
            (SpecParams::Token(p), Limiter::Token(g)) => g.reshaped(now, p).map(Limiter::Token),
            (SpecParams::Leaky(p), Limiter::Leaky(g)) => g.reshaped(now, p).map(Limiter::Leaky),
            (SpecParams::Fixed(p), Limiter::Fixed(w)) => w.reshaped(now, p).map(Limiter::Fixed),
            (SpecParams::Subwin(p), Limiter::Subwin(w)) => w.reshaped(now, p).map(Limiter::Subwin),
            _ => None,
        }
    }

    /// `cost` units of the spec at `now` against `limiter`; `None` for a limiter of another
    /// kind.
    fn evaluate(&self, limiter: &Limiter, now: Millis, cost: u64) -> Option<Decision> {
        Some(match (&self.params, limiter) {
            (SpecParams::Slide(w), Limiter::Slide(l)) => l.evaluate(now, w.as_slice(), cost),
            (SpecParams::Token(p), Limiter::Token(g)) => g.evaluate(now, p, cost),
            (SpecParams::Leaky(p), Limiter::Leaky(g)) => g.evaluate(now, p, cost),
            (SpecParams::Fixed(p), Limiter::Fixed(w)) => w.evaluate(now, p, cost),
            (SpecParams::Subwin(p), Limiter::Subwin(w)) => w.evaluate(now, p, cost),
            (SpecParams::Acquire(p), Limiter::Lease(l)) => l.evaluate(now, p, cost, self.id),
            _ => return None,
        })
    }

    /// Records the spec's cost at `now`: `Some` with the lease granted (or renewed) for an
    /// `ACQUIRE` spec, `Some(None)` for the others; `None` (nothing changed) for another
    /// kind, or a lease that no longer fits (which [`acquire`] rules out beforehand).
    fn record(&self, limiter: &mut Limiter, now: Millis) -> Option<Option<Vec<u8>>> {
        let cost = self.cost;
        let done = match (&self.params, limiter) {
            (SpecParams::Acquire(p), Limiter::Lease(l)) => {
                return l.acquire(now, p, cost, self.id).ok().map(|got| got.id);
            }
            (SpecParams::Slide(w), Limiter::Slide(l)) => l.record(now, w.as_slice(), cost),
            (SpecParams::Token(p), Limiter::Token(g)) => g.record(now, p, cost),
            (SpecParams::Leaky(p), Limiter::Leaky(g)) => g.record(now, p, cost),
            (SpecParams::Fixed(p), Limiter::Fixed(w)) => w.record(now, p, cost),
            (SpecParams::Subwin(p), Limiter::Subwin(w)) => w.record(now, p, cost),
            _ => false,
        };
        done.then_some(None)
    }

    /// An error when the spec's lease names an id its key cannot take: checked of every
    /// limiter before any decides, as its own command does.
    fn check_id(&self, limiter: &Limiter, now: Millis) -> Result<(), Error> {
        match (&self.params, limiter, self.id) {
            (SpecParams::Acquire(_), Limiter::Lease(l), Some(id)) if self.cost > 0 => {
                l.check_id(now, id).map_err(|r| Error::lease(r, Some(id)))
            }
            _ => Ok(()),
        }
    }

    /// An error when the spec would record but its limiter cannot take it (a key holding
    /// as many leases as it may, counters that the units would overflow): checked of
    /// every limiter before any changes, with the check their own `record` makes.
    fn fits(&self, limiter: &Limiter, now: Millis) -> Result<(), Error> {
        let cost = self.cost;
        let fits = match (&self.params, limiter) {
            (SpecParams::Acquire(_), Limiter::Lease(l)) => {
                return l
                    .check_grant(now, cost, self.id)
                    .map_err(|r| Error::lease(r, self.id));
            }
            (SpecParams::Slide(w), Limiter::Slide(l)) => l.can_record(now, w.as_slice(), cost),
            (SpecParams::Token(p), Limiter::Token(g)) => g.can_record(now, p, cost),
            (SpecParams::Leaky(p), Limiter::Leaky(g)) => g.can_record(now, p, cost),
            (SpecParams::Fixed(p), Limiter::Fixed(w)) => w.can_record(now, p, cost),
            (SpecParams::Subwin(p), Limiter::Subwin(w)) => w.can_record(now, p, cost),
            _ => false,
        };
        if fits {
            Ok(())
        } else {
            Err(Error::DoesNotFit)
        }
    }
}

/// One limiter of a call: the one a key holds, changed in place, or a new one (for a missing
/// key, or a stored one reshaped) that the caller stores when the call changed it.
pub enum Target<H> {
    /// The key's own limiter (`H` lends it: `&mut Limiter`, or the store's borrow of it).
    Held(H),
    New(Limiter),
}

impl<H: DerefMut<Target = Limiter>> Target<H> {
    fn get(&self) -> &Limiter {
        match self {
            Target::Held(l) => l,
            Target::New(l) => l,
        }
    }

    fn get_mut(&mut self) -> &mut Limiter {
        match self {
            Target::Held(l) => l,
            Target::New(l) => l,
        }
    }
}

/// What a call did to one limiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Its own five fields: waits and reset from the caller's time, as its own command
    /// replies. When the call is refused, one that would have allowed answers as its own
    /// command with `COST 0` (allowed, and its state as it stands: nothing was taken).
    pub decision: Decision,
    /// It recorded its cost (the call was allowed and the cost is above 0). The three
    /// fields below are set for a changed limiter only.
    pub changed: bool,
    /// When it was back to empty before the call, for a limiter changed in place (`None`
    /// for a new one, whose key gets its expiry set in any case).
    pub before: Option<Millis>,
    /// The limiter's latest time after the call (a change propagates at that time).
    pub latest: Millis,
    /// When the limiter is back to empty after the call.
    pub empty_at: Option<Millis>,
    /// For an `ACQUIRE` spec, the lease granted or renewed (none when refused).
    pub id: Option<Vec<u8>>,
}

/// Each limiter's outcome in key order; up to [`ALL_INLINE_KEYS`] without allocating.
pub type Outcomes = SmallVec<[Outcome; ALL_INLINE_KEYS]>;

/// Decides `specs[i]` against `targets[i]` at `now` (the caller's time), all or nothing: when
/// every limiter allows, each records its cost; otherwise none changes, and each limiter's
/// fields say whether it would have allowed and show its state without the request. Returns
/// the five fields that answer the call (see [`combine`]) and leaves each limiter's outcome in
/// `each` (filled in place: no copy of the outcomes on the way out). A target of another kind
/// than its spec is an error naming its index, before anything changes.
pub fn acquire<H: DerefMut<Target = Limiter>>(
    targets: &mut [Target<H>],
    specs: &[Spec],
    now: Millis,
    each: &mut Outcomes,
) -> Result<Decision, (usize, Error)> {
    for (i, (t, spec)) in targets.iter().zip(specs).enumerate() {
        let held = t.get().kind();
        if held != spec.kind() {
            let wanted = spec.kind().command();
            return Err((i, Error::OtherKind { held, wanted }));
        }
    }
    for (i, (t, spec)) in targets.iter().zip(specs).enumerate() {
        spec.check_id(t.get(), now).map_err(|e| (i, e))?;
    }
    each.clear();
    for (t, spec) in targets.iter_mut().zip(specs) {
        if let Target::Held(held) = t {
            if let Some(new) = spec.reshaped(held, now) {
                *t = Target::New(new);
            }
        }
        let limiter = t.get();
        let latest = limiter.latest();
        let Some(decision) = spec.evaluate(limiter, now, spec.cost) else {
            return Err((each.len(), Error::Internal("RL.ALL")));
        };
        each.push(Outcome {
            decision: decision.seen_from_behind(latest.saturating_sub(now)),
            changed: false,
            before: None,
            latest,
            empty_at: None,
            id: None,
        });
    }
    if each.iter().all(|o| o.decision.allowed) {
        for (i, (t, spec)) in targets.iter().zip(specs).enumerate() {
            if spec.cost > 0 {
                spec.fits(t.get(), now).map_err(|e| (i, e))?;
            }
        }
        for (i, ((t, spec), o)) in targets
            .iter_mut()
            .zip(specs)
            .zip(each.iter_mut())
            .enumerate()
        {
            if spec.cost == 0 {
                continue;
            }
            if let Target::Held(held) = t {
                o.before = held.empty_at();
            }
            let limiter = t.get_mut();
            let Some(id) = spec.record(limiter, now) else {
                return Err((i, Error::Internal("RL.ALL")));
            };
            o.id = id;
            o.changed = true;
            (o.latest, o.empty_at) = (limiter.latest(), limiter.empty_at());
            o.decision = o.decision.resetting_at(o.empty_at, now);
        }
    } else {
        // Nothing is taken: a limiter that would have allowed answers its state as it stands,
        // as its own command with `COST 0` would (a refusing one already does).
        for ((t, spec), o) in targets.iter().zip(specs).zip(each.iter_mut()) {
            if !o.decision.allowed || spec.cost == 0 {
                continue;
            }
            let limiter = t.get();
            let behind = limiter.latest().saturating_sub(now);
            if let Some(state) = spec.evaluate(limiter, now, 0) {
                o.decision = state.seen_from_behind(behind);
            }
        }
    }
    Ok(combine(each.iter().map(|o| &o.decision)))
}

/// How long a wait is, for comparing: never is the longest.
fn wait_rank(w: Wait) -> (u8, u64) {
    match w {
        Wait::None => (0, 0),
        Wait::Ms(ms) => (1, ms),
        Wait::Never => (2, 0),
    }
}

/// The five fields that answer a call of several limiters (`decisions` in key order, at least
/// one):
/// - allowed: every one allowed;
/// - refused: limit, remaining and retry_after of the refusing limiter that needs the longest
///   wait (never is the longest; the first in key order on a tie);
/// - allowed: limit and remaining of the limiter with the least remaining (the first on a
///   tie), and the longest retry_after among them all (only a leaky bucket asks an allowed
///   call to wait, and the caller must wait for it);
/// - reset_after_ms: the longest, when every limiter is back to empty.
pub fn combine<'a, I>(decisions: I) -> Decision
where
    I: IntoIterator<Item = &'a Decision>,
    I::IntoIter: Clone,
{
    let decisions = decisions.into_iter();
    let allowed = decisions.clone().all(|d| d.allowed);
    let reset_after_ms = decisions.clone().map(|d| d.reset_after_ms).max();
    let decided = if allowed {
        let least = decisions
            .clone()
            .fold(None::<&Decision>, |best, d| match best {
                Some(b) if b.remaining <= d.remaining => Some(b),
                _ => Some(d),
            });
        least.map(|d| Decision {
            retry_after: longest_wait(decisions).map_or(Wait::None, |w| w.retry_after),
            ..*d
        })
    } else {
        longest_wait(decisions.filter(|d| !d.allowed)).copied()
    };
    let d = decided.unwrap_or(Decision {
        allowed: true,
        limit: 0,
        remaining: 0,
        retry_after: Wait::None,
        reset_after_ms: 0,
    });
    Decision {
        allowed,
        reset_after_ms: reset_after_ms.unwrap_or(0),
        ..d
    }
}

/// The decision that needs the longest wait (the first on a tie).
fn longest_wait<'a>(ds: impl Iterator<Item = &'a Decision>) -> Option<&'a Decision> {
    ds.fold(None::<&Decision>, |best, d| match best {
        Some(b) if wait_rank(b.retry_after) >= wait_rank(d.retry_after) => Some(b),
        _ => Some(d),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::MAX_TIMESTAMP;
    use crate::args;
    use proptest::prelude::*;

    const T0: Millis = 1_700_000_000_000;

    /// The specs of an `RL.ALL` line (its words leaked: an ACQUIRE spec borrows its id).
    fn specs(line: &str) -> Vec<Spec<'static>> {
        let line: &'static str = Box::leak(line.to_string().into_boxed_str());
        let words: &'static [&'static str] =
            Box::leak(line.split(' ').collect::<Vec<_>>().into_boxed_slice());
        let mut specs = args::Specs::new();
        args::all(words, &mut specs).unwrap();
        specs.to_vec()
    }

    /// One key's own command, as `commands::limit` runs it: reshape or create, decide,
    /// record when allowed. Returns the new state (`None`: nothing to store) and the reply.
    fn single(held: Option<&Limiter>, spec: &Spec, now: Millis) -> (Option<Limiter>, Decision) {
        fn run<L: Limit + Clone>(
            held: Option<&L>,
            fresh: L,
            p: &L::Params,
            cost: u64,
            now: Millis,
        ) -> (Option<L>, Decision) {
            let mut l = match held {
                Some(h) => h.reshaped(now, p).unwrap_or_else(|| h.clone()),
                None => fresh,
            };
            let behind = l.latest().saturating_sub(now);
            let d = l.acquire(now, p, cost).seen_from_behind(behind);
            if d.allowed && cost > 0 {
                let d = d.resetting_at(l.empty_at(), now);
                (Some(l), d)
            } else {
                (None, d)
            }
        }
        let cost = spec.cost;
        match (&spec.params, held.cloned()) {
            (SpecParams::Slide(w), h) => {
                let h = h.and_then(|mut h| h.slide_mut().cloned());
                let (l, d) = run(
                    h.as_ref(),
                    SlidingLog::new(w.as_slice()),
                    w.as_slice(),
                    cost,
                    now,
                );
                (l.map(|l| Limiter::Slide(Box::new(l))), d)
            }
            (SpecParams::Token(p), h) => {
                let h = h.and_then(|mut h| h.token_mut().cloned());
                let (l, d) = run(h.as_ref(), Gcra::new(p), p, cost, now);
                (l.map(Limiter::Token), d)
            }
            (SpecParams::Leaky(p), h) => {
                let h = h.and_then(|mut h| h.leaky_mut().cloned());
                let (l, d) = run(h.as_ref(), Gcra::new(p), p, cost, now);
                (l.map(Limiter::Leaky), d)
            }
            (SpecParams::Fixed(p), h) => {
                let h = h.and_then(|mut h| h.fixed_mut().cloned());
                let (l, d) = run(h.as_ref(), FixedWindow::new(p), p, cost, now);
                (l.map(Limiter::Fixed), d)
            }
            (SpecParams::Subwin(p), h) => {
                let h = h.and_then(|mut h| h.subwin_mut().cloned());
                let (l, d) = run(h.as_ref(), SubWindow::new(p), p, cost, now);
                (l.map(Limiter::Subwin), d)
            }
            // RL.ACQUIRE as its handler runs it.
            (SpecParams::Acquire(p), h) => {
                let mut l = match h {
                    Some(Limiter::Lease(l)) => *l,
                    _ => Leases::new(p),
                };
                let behind = l.latest().saturating_sub(now);
                let got = l.acquire(now, p, cost, spec.id).unwrap();
                let d = got.decision.seen_from_behind(behind);
                if got.id.is_some() {
                    let d = d.resetting_at(l.empty_at(), now);
                    (Some(Limiter::Lease(Box::new(l))), d)
                } else {
                    (None, d)
                }
            }
        }
    }

    /// The outcome of a whole call.
    struct Combined {
        decision: Decision,
        each: Outcomes,
    }

    /// Runs one call as `commands::all` does, on `keys` (a missing key is `None`).
    fn call(keys: &mut [Option<Limiter>], specs: &[Spec], now: Millis) -> Combined {
        let mut targets: Vec<Target<&mut Limiter>> = keys
            .iter_mut()
            .zip(specs)
            .map(|(k, s)| match k {
                Some(l) => Target::Held(l),
                None => Target::New(s.fresh()),
            })
            .collect();
        let mut each = Outcomes::new();
        let decision = acquire(&mut targets, specs, now, &mut each).unwrap();
        let combined = Combined { decision, each };
        let created: Vec<Option<Limiter>> = targets
            .into_iter()
            .map(|t| match t {
                Target::New(l) => Some(l),
                Target::Held(_) => None,
            })
            .collect();
        for ((k, new), o) in keys.iter_mut().zip(created).zip(&combined.each) {
            if let (true, Some(new)) = (o.changed, new) {
                *k = Some(new);
            }
        }
        combined
    }

    fn encoded(keys: &[Option<Limiter>]) -> Vec<Option<Vec<u8>>> {
        keys.iter()
            .map(|k| k.as_ref().map(Limiter::encode))
            .collect()
    }

    #[test]
    fn all_or_nothing_on_two_layers() {
        let s = specs("RL.ALL 2 rpm tpm SLIDE 2 60000 TOKEN 10000 60000 COST 3000");
        let mut keys = [None, None];
        let ok = call(&mut keys, &s, T0);
        assert_eq!(ok.decision.as_reply(), [1, 2, 1, 0, 60000]);
        assert_eq!(ok.each[1].decision.as_reply(), [1, 10000, 7000, 0, 18000]);
        let ok = call(&mut keys, &s, T0 + 1);
        assert_eq!(ok.decision.as_reply()[..3], [1, 2, 0]);
        // The tokens would allow a third, the requests not: nothing is taken from either.
        let before = encoded(&keys);
        let refused = call(&mut keys, &s, T0 + 2);
        assert_eq!(refused.decision.as_reply(), [0, 2, 0, 59998, 59999]);
        // The tokens say they would have allowed, and show what they hold.
        assert_eq!(
            refused.each[1].decision.as_reply(),
            [1, 10000, 4000, 0, 35998]
        );
        assert!(refused.each.iter().all(|o| !o.changed));
        assert_eq!(encoded(&keys), before);
    }

    #[test]
    fn rate_and_concurrency_decide_together() {
        let s = specs("RL.ALL 2 rpm jobs TOKEN 3 60000 ACQUIRE 1 30000 ID job1");
        let mut keys = [None, None];
        let ok = call(&mut keys, &s, T0);
        assert_eq!(ok.decision.as_reply()[..3], [1, 1, 0]);
        assert_eq!(ok.each[1].id.as_deref(), Some(&b"job1"[..]));
        // The same id again renews its lease: allowed, one more request taken.
        let again = call(&mut keys, &s, T0 + 10);
        assert_eq!(again.each[1].decision.as_reply(), [1, 1, 0, 0, 30000]);
        assert_eq!(again.each[0].decision.as_reply()[..3], [1, 3, 1]);
        // Another job: the lease is held, so no request is taken either.
        let other = specs("RL.ALL 2 rpm jobs TOKEN 9 60000 ACQUIRE 1 30000");
        let before = encoded(&keys);
        let refused = call(&mut keys, &other, T0 + 20);
        assert_eq!(refused.decision.as_reply(), [0, 1, 0, 29990, 29990]);
        assert_eq!(refused.each[1].id, None);
        assert_eq!(encoded(&keys), before);
        // Once it has ended, a server-made id.
        let later = call(&mut keys, &other, T0 + 30010);
        assert!(later.decision.allowed);
        assert!(later.each[1].id.is_some());
    }

    #[test]
    fn another_kind_is_an_error_naming_its_index() {
        let s = specs("RL.ALL 2 a b TOKEN 5 1000 FIXED 5 1000");
        let mut keys = [None, Some(s[0].fresh())];
        let mut targets: Vec<Target<&mut Limiter>> = keys
            .iter_mut()
            .zip(&s)
            .map(|(k, s)| match k {
                Some(l) => Target::Held(l),
                None => Target::New(s.fresh()),
            })
            .collect();
        let err = acquire(&mut targets, &s, T0, &mut Outcomes::new()).unwrap_err();
        assert_eq!(
            err,
            (
                1,
                Error::OtherKind {
                    held: Kind::Token,
                    wanted: "RL.FIXED"
                }
            )
        );
    }

    #[test]
    fn combined_fields() {
        let d = |allowed, limit, remaining, retry_after, reset_after_ms| Decision {
            allowed,
            limit,
            remaining,
            retry_after,
            reset_after_ms,
        };
        // Allowed: the least remaining, the longest wait (a leaky bucket's), the latest reset.
        let got = combine(&[
            d(true, 10, 3, Wait::None, 500),
            d(true, 5, 1, Wait::None, 100),
            d(true, 7, 1, Wait::Ms(40), 900),
        ]);
        assert_eq!(got.as_reply(), [1, 5, 1, 40, 900]);
        // Refused: the refusing limiter with the longest wait; never beats any wait.
        let got = combine(&[
            d(false, 10, 0, Wait::Ms(700), 800),
            d(true, 5, 4, Wait::Ms(900), 100),
            d(false, 3, 0, Wait::Ms(200), 300),
        ]);
        assert_eq!(got.as_reply(), [0, 10, 0, 700, 800]);
        let got = combine(&[
            d(false, 10, 0, Wait::Ms(700), 800),
            d(false, 2, 0, Wait::Never, 0),
        ]);
        assert_eq!(got.as_reply(), [0, 2, 0, -1, 800]);
    }

    /// One key's spec words: a kind, its parameters and options, a cost. `variant` picks one
    /// of two parameter sets, so that a key's parameters change between calls.
    fn spec_words() -> impl Strategy<Value = (u8, [String; 2])> {
        let limit = 1u64..6;
        let window = 1u64..8;
        (
            0u8..6,
            limit.clone(),
            limit,
            window.clone(),
            window,
            0u8..4,
            0u64..4,
        )
            .prop_map(|(kind, l1, l2, w1, w2, opt, cost)| {
                let (w1, w2) = (w1 * 250, w2 * 500);
                let cost = if cost == 1 {
                    String::new()
                } else {
                    format!(" COST {cost}")
                };
                let words = |l: u64, w: u64| match kind {
                    0 if opt % 2 == 0 => format!("SLIDE {l} {w}{cost}"),
                    0 => format!("SLIDE {l} {w} {} {}{cost}", l * 2, w * 3),
                    1 if opt == 0 => format!("TOKEN {l} {w}{cost}"),
                    1 => format!("TOKEN {l} {w} BURST {opt}{cost}"),
                    2 if opt == 0 => format!("LEAKY {l} {w}{cost}"),
                    2 => format!("LEAKY {l} {w} MAXDELAY {} BURST {opt}{cost}", w * 2),
                    3 if opt % 2 == 0 => format!("FIXED {l} {w}{cost}"),
                    3 => format!("FIXED {l} {w} ALIGN{cost}"),
                    // A lease: server-made ids, or one of two ids of the caller's.
                    5 if opt < 2 => format!("ACQUIRE {l} {w}{cost}"),
                    5 => format!("ACQUIRE {l} {w} ID job{}{cost}", opt % 2),
                    _ => format!("SUBWIN {l} {w} {}{cost}", w / [1, 5, 25, 125][opt as usize]),
                };
                (kind, [words(l1, w1), words(l2, w2)])
            })
    }

    proptest! {
        /// A random mix of 1 to 8 limiters of every kind (ACQUIRE too), called together many times:
        /// when every one allows, the call equals calling each key's own command one by one;
        /// when one refuses, nothing changes.
        #[test]
        fn all_equals_each_one_alone_or_changes_nothing(
            keys in prop::collection::vec(spec_words(), 1..=8),
            calls in prop::collection::vec(
                (prop::collection::vec(0usize..2, 8), 0u64..1500, any::<bool>()),
                1..40,
            ),
        ) {
            let n = keys.len();
            let mut state: Vec<Option<Limiter>> = vec![None; n];
            let mut now = T0;
            for (variants, step, back) in calls {
                // Time mostly runs on; sometimes a caller is behind.
                now = if back { now.saturating_sub(step / 4) } else { now + step };
                prop_assert!(now <= MAX_TIMESTAMP);
                let line = (0..n)
                    .map(|i| keys[i].1[variants[i]].clone())
                    .collect::<Vec<_>>()
                    .join(" ");
                let names: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
                let line = format!("RL.ALL {n} {} {line}", names.join(" "));
                let s = specs(&line);
                let model: Vec<(Option<Limiter>, Decision)> = state
                    .iter()
                    .zip(&s)
                    .map(|(k, spec)| single(k.as_ref(), spec, now))
                    .collect();
                let before = encoded(&state);
                let before_state = state.clone();
                let got = call(&mut state, &s, now);
                let all_allow = model.iter().all(|(_, d)| d.allowed);
                prop_assert_eq!(got.decision.allowed, all_allow);
                let each: Vec<Decision> = got.each.iter().map(|o| o.decision).collect();
                prop_assert_eq!(got.decision, combine(&each));
                if all_allow {
                    for (i, ((new, d), o)) in model.iter().zip(&got.each).enumerate() {
                        prop_assert_eq!(&o.decision, d, "limiter {} in {} at {}", i, &line, now);
                        if let Some(new) = new {
                            let now_held = state[i].as_ref().map(Limiter::encode);
                            prop_assert_eq!(now_held, Some(new.encode()));
                        } else {
                            prop_assert_eq!(&encoded(&state)[i], &before[i]);
                        }
                    }
                } else {
                    prop_assert_eq!(encoded(&state), before);
                    for (i, ((_, d), o)) in model.iter().zip(&got.each).enumerate() {
                        // A refusing limiter answers as its own command; one that would
                        // have allowed took nothing, and answers as its own command with
                        // COST 0 (its state as it stands).
                        prop_assert_eq!(d.allowed, o.decision.allowed);
                        if d.allowed {
                            let peek = Spec { cost: 0, ..s[i] };
                            let (_, state) = single(before_state[i].as_ref(), &peek, now);
                            prop_assert_eq!(&o.decision, &state, "limiter {} in {} at {}", i, &line, now);
                        } else {
                            prop_assert_eq!(&o.decision, d);
                        }
                    }
                }
            }
        }
    }
}
