//! The five fields a call of several limiters answers (`RL.ALL`, `RL.HIT`), from each
//! limiter's decision, and which refusing limiter they come from.

use crate::core::{Decision, Duration, Wait};

/// How long a wait is, for comparing: never is the longest.
fn wait_rank(w: Wait) -> (u8, Duration) {
    match w {
        Wait::None => (0, Duration::ZERO),
        Wait::For(d) => (1, d),
        Wait::Never => (2, Duration::ZERO),
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
/// - reset_after: the longest, when every limiter is back to empty.
pub fn combine(decisions: &[Decision]) -> Decision {
    let allowed = decisions.iter().all(|d| d.allowed);
    let reset_after = decisions.iter().map(|d| d.reset_after).max();
    let decided = if allowed {
        let least = decisions
            .iter()
            .fold(None::<&Decision>, |best, d| match best {
                Some(b) if b.remaining <= d.remaining => Some(b),
                _ => Some(d),
            });
        least.map(|d| Decision {
            retry_after: longest_wait(decisions.iter()).map_or(Wait::None, |w| w.retry_after),
            ..*d
        })
    } else {
        longest_wait(decisions.iter().filter(|d| !d.allowed)).copied()
    };
    let d = decided.unwrap_or(Decision {
        allowed: true,
        limit: 0,
        remaining: 0,
        retry_after: Wait::None,
        reset_after: Duration::ZERO,
    });
    Decision {
        allowed,
        reset_after: reset_after.unwrap_or(Duration::ZERO),
        ..d
    }
}

/// The place of the refusing decision that needs the longest wait (the first on a tie): the
/// one [`combine`] answers with.
pub fn refusing(decisions: &[Decision]) -> Option<usize> {
    let mut best: Option<(usize, &Decision)> = None;
    for (i, d) in decisions.iter().enumerate().filter(|(_, d)| !d.allowed) {
        match best {
            Some((_, b)) if wait_rank(b.retry_after) >= wait_rank(d.retry_after) => {}
            _ => best = Some((i, d)),
        }
    }
    best.map(|(i, _)| i)
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

    #[test]
    fn combined_fields() {
        let d = |allowed, limit, remaining, retry_after, reset_after_ms| Decision {
            allowed,
            limit,
            remaining,
            retry_after,
            reset_after: Duration::from_ms(reset_after_ms),
        };
        // Allowed: the least remaining, the longest wait (a leaky bucket's), the latest reset.
        let got = combine(&[
            d(true, 10, 3, Wait::None, 500),
            d(true, 5, 1, Wait::None, 100),
            d(true, 7, 1, Wait::For(Duration::from_ms(40)), 900),
        ]);
        assert_eq!(got.as_reply(), [1, 5, 1, 40, 900]);
        // Refused: the refusing limiter with the longest wait; never beats any wait.
        let got = combine(&[
            d(false, 10, 0, Wait::For(Duration::from_ms(700)), 800),
            d(true, 5, 4, Wait::For(Duration::from_ms(900)), 100),
            d(false, 3, 0, Wait::For(Duration::from_ms(200)), 300),
        ]);
        assert_eq!(got.as_reply(), [0, 10, 0, 700, 800]);
        let got = combine(&[
            d(false, 10, 0, Wait::For(Duration::from_ms(700)), 800),
            d(false, 2, 0, Wait::Never, 0),
        ]);
        assert_eq!(got.as_reply(), [0, 2, 0, -1, 800]);
    }
}
