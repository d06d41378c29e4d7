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
use crate::algo::slide::SlidingLog;
use crate::algo::subwin::SubWindow;
use crate::algo::{Decision, Limit, Millis, Wait};
use crate::args::{Spec, SpecParams};
use crate::error::Error;
use crate::value::{Kind, Limiter};

impl Spec {
    /// The kind of limiter the spec is for.
    pub fn kind(&self) -> Kind {
        match self.params {
            SpecParams::Slide(_) => Kind::Slide,
            SpecParams::Token(_) => Kind::Token,
            SpecParams::Leaky(_) => Kind::Leaky,
            SpecParams::Fixed(_) => Kind::Fixed,
            SpecParams::Subwin(_) => Kind::Subwin,
        }
    }

    /// An empty limiter for a missing key.
    pub fn fresh(&self) -> Limiter {
        match &self.params {
            SpecParams::Slide(w) => Limiter::Slide(Box::new(SlidingLog::new(w.as_slice()))),
            SpecParams::Token(p) => Limiter::Token(Box::new(Gcra::new(p))),
            SpecParams::Leaky(p) => Limiter::Leaky(Box::new(Gcra::new(p))),
            SpecParams::Fixed(p) => Limiter::Fixed(Box::new(FixedWindow::new(p))),
            SpecParams::Subwin(p) => Limiter::Subwin(SubWindow::new(p)),
        }
    }

    /// The limiter reshaped for this spec at `now`, when the stored one cannot take it as it
    /// is (see [`Limit::reshaped`]).
    fn reshaped(&self, limiter: &Limiter, now: Millis) -> Option<Limiter> {
        match (&self.params, limiter) {
            (SpecParams::Slide(w), Limiter::Slide(l)) => l
                .reshaped(now, w.as_slice())
                .map(|l| Limiter::Slide(Box::new(l))),
            (SpecParams::Token(p), Limiter::Token(g)) => {
                g.reshaped(now, p).map(|g| Limiter::Token(Box::new(g)))
            }
            (SpecParams::Leaky(p), Limiter::Leaky(g)) => {
                g.reshaped(now, p).map(|g| Limiter::Leaky(Box::new(g)))
            }
            (SpecParams::Fixed(p), Limiter::Fixed(w)) => {
                w.reshaped(now, p).map(|w| Limiter::Fixed(Box::new(w)))
            }
            (SpecParams::Subwin(p), Limiter::Subwin(w)) => w.reshaped(now, p).map(Limiter::Subwin),
            _ => None,
        }
    }

    /// The spec's cost at `now` against `limiter`; `None` for a limiter of another kind.
    fn evaluate(&self, limiter: &Limiter, now: Millis) -> Option<Decision> {
        let cost = self.cost;
        Some(match (&self.params, limiter) {
            (SpecParams::Slide(w), Limiter::Slide(l)) => l.evaluate(now, w.as_slice(), cost),
            (SpecParams::Token(p), Limiter::Token(g)) => g.evaluate(now, p, cost),
            (SpecParams::Leaky(p), Limiter::Leaky(g)) => g.evaluate(now, p, cost),
            (SpecParams::Fixed(p), Limiter::Fixed(w)) => w.evaluate(now, p, cost),
            (SpecParams::Subwin(p), Limiter::Subwin(w)) => w.evaluate(now, p, cost),
            _ => return None,
        })
    }

    /// Records the spec's cost at `now`; false (nothing changed) for another kind.
    fn record(&self, limiter: &mut Limiter, now: Millis) -> bool {
        let cost = self.cost;
        match (&self.params, limiter) {
            (SpecParams::Slide(w), Limiter::Slide(l)) => l.record(now, w.as_slice(), cost),
            (SpecParams::Token(p), Limiter::Token(g)) => g.record(now, p, cost),
            (SpecParams::Leaky(p), Limiter::Leaky(g)) => g.record(now, p, cost),
            (SpecParams::Fixed(p), Limiter::Fixed(w)) => w.record(now, p, cost),
            (SpecParams::Subwin(p), Limiter::Subwin(w)) => w.record(now, p, cost),
            _ => false,
        }
    }
}

/// One limiter of a call: the one a key holds, changed in place, or a new one (for a missing
/// key, or a stored one reshaped) that the caller stores when the call changed it.
pub enum Target<'a> {
    Held(&'a mut Limiter),
    New(Limiter),
}

impl Target<'_> {
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Its own five fields: waits and reset from the caller's time, as its own command
    /// replies.
    pub decision: Decision,
    /// It recorded its cost (the call was allowed and the cost is above 0).
    pub changed: bool,
    /// When it was back to empty before the call, for a limiter changed in place (`None`
    /// for a new one, whose key gets its expiry set in any case).
    pub before: Option<Millis>,
    /// The limiter's latest time after the call (a change propagates at that time).
    pub latest: Millis,
    /// When the limiter is back to empty after the call.
    pub empty_at: Option<Millis>,
}

/// The outcome of a whole call.
#[derive(Debug, PartialEq, Eq)]
pub struct Combined {
    /// The five fields that answer the call (see [`combine`]).
    pub decision: Decision,
    /// Each limiter's, in key order.
    pub each: Vec<Outcome>,
}

/// Decides `specs[i]` against `targets[i]` at `now` (the caller's time), all or nothing: when
/// every limiter allows, each records its cost; otherwise none changes. A target of another
/// kind than its spec is an error naming its index, before anything changes.
pub fn acquire(
    targets: &mut [Target],
    specs: &[Spec],
    now: Millis,
) -> Result<Combined, (usize, Error)> {
    for (i, (t, spec)) in targets.iter().zip(specs).enumerate() {
        let held = t.get().kind();
        if held != spec.kind() {
            let wanted = spec.kind().command();
            return Err((i, Error::OtherKind { held, wanted }));
        }
    }
    let mut each = Vec::with_capacity(targets.len());
    for (t, spec) in targets.iter_mut().zip(specs) {
        let mut before = None;
        if let Target::Held(held) = t {
            match spec.reshaped(held, now) {
                Some(new) => *t = Target::New(new),
                None => before = held.empty_at(),
            }
        }
        let limiter = t.get();
        let behind = limiter.latest().saturating_sub(now);
        let decision = spec
            .evaluate(limiter, now)
            .ok_or((each.len(), Error::Internal("RL.ALL")))?
            .seen_from_behind(behind);
        each.push(Outcome {
            decision,
            changed: false,
            before,
            latest: limiter.latest(),
            empty_at: limiter.empty_at(),
        });
    }
    if each.iter().all(|o| o.decision.allowed) {
        for ((t, spec), o) in targets.iter_mut().zip(specs).zip(&mut each) {
            if spec.cost == 0 {
                continue;
            }
            let limiter = t.get_mut();
            spec.record(limiter, now);
            o.changed = true;
            (o.latest, o.empty_at) = (limiter.latest(), limiter.empty_at());
            o.decision = o.decision.resetting_at(o.empty_at, now);
        }
    }
    let decisions: Vec<Decision> = each.iter().map(|o| o.decision).collect();
    Ok(Combined {
        decision: combine(&decisions),
        each,
    })
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
pub fn combine(decisions: &[Decision]) -> Decision {
    let allowed = decisions.iter().all(|d| d.allowed);
    let reset_after_ms = decisions.iter().map(|d| d.reset_after_ms).max();
    let longest_wait = |ds: &mut dyn Iterator<Item = &Decision>| {
        ds.fold(None::<&Decision>, |best, d| match best {
            Some(b) if wait_rank(b.retry_after) >= wait_rank(d.retry_after) => Some(b),
            _ => Some(d),
        })
        .copied()
    };
    let decided = if allowed {
        let least = decisions
            .iter()
            .fold(None::<&Decision>, |best, d| match best {
                Some(b) if b.remaining <= d.remaining => Some(b),
                _ => Some(d),
            });
        least.copied().map(|d| Decision {
            retry_after: longest_wait(&mut decisions.iter()).map_or(Wait::None, |w| w.retry_after),
            ..d
        })
    } else {
        longest_wait(&mut decisions.iter().filter(|d| !d.allowed))
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
