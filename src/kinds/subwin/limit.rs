//! The sub-interval window's decisions: `Limit` over the ring.

use super::ring::{SubWindow, LATEST_LOW, LIMIT, RING_AND_LATEST_HIGH, TOTAL};
use super::{Params, MAX_LIMIT};
use crate::core::limit::Limit;
use crate::core::{Decision, Duration, Instant, Wait};

impl Limit for SubWindow {
    type Params = Params;
    type Stored = Params;

    fn stored(&self) -> Params {
        self.params()
    }

    fn give_back(&mut self, now: Instant, units: u64) -> Decision {
        self.refund(now, units)
    }

    /// Counts `p`'s window only, whatever else the ring keeps.
    fn evaluate(&self, now: Instant, p: &Params, cost: u64) -> Decision {
        let now = now.max(self.latest());
        let n = p.subintervals().min(self.ring_n());
        // An empty ring (a new key) counts nothing.
        let (full, trailing) = match self.total() {
            0 => (0, 0),
            _ => self.estimate(now, n),
        };
        let used = full + trailing;
        let allowed = used.saturating_add(cost) <= p.limit;
        let retry_after = if allowed {
            Wait::None
        } else if cost > p.limit {
            Wait::Never
        } else {
            self.wait(now, n, p.limit, cost, full)
        };
        let newest = if allowed && cost > 0 {
            Some(self.index(now))
        } else {
            self.newest_counted()
        };
        let after = if allowed { used + cost } else { used };
        Decision {
            allowed,
            limit: p.limit,
            remaining: p.limit.saturating_sub(after),
            retry_after,
            reset_after: newest.map_or(Duration::ZERO, |i| self.empty_from(i, n).since(now)),
        }
    }

    fn record(&mut self, now: Instant, p: &Params, cost: u64) -> bool {
        let Some(r) = self.recording(now, p, cost) else {
            return false;
        };
        if r.in_place {
            self.put(r.slot, r.count);
        } else {
            // The ring keeps its shape (see `fits`), so the counter keeps its word.
            self.advance(r.now);
            self.put(r.slot, r.count);
            if let Some(front) = r.plan.as_ref().and_then(|plan| plan.front.as_ref()) {
                // p is valid, so its window fits in 16 bits.
                self.set_front(p.subintervals() as u32, front);
            }
        }
        self.put(TOTAL, r.total);
        self.put(LIMIT, p.limit as u32);
        self.set_latest(r.now);
        true
    }

    fn can_record(&self, now: Instant, p: &Params, cost: u64) -> bool {
        self.recording(now, p, cost).is_some()
    }

    /// A retention keeps the key too, while the window it is for still counts a unit.
    fn empty_at(&self) -> Option<Instant> {
        let newest = self.newest_counted()?;
        let own = self.empty_from(newest, self.n());
        // The last millisecond of the newest unit's sub-interval, as a front's last uses.
        let newest_ms = Instant::from_ms((newest + 1) * self.resolution() - 1);
        let kept = self
            .front()
            .and_then(|f| f.empty_at(newest_ms))
            .unwrap_or(Instant::EPOCH);
        Some(own.max(kept))
    }

    #[inline]
    fn latest(&self) -> Instant {
        let high = u64::from(self.word(RING_AND_LATEST_HIGH) >> 16);
        Instant::from_ms((high << 32) | u64::from(self.word(LATEST_LOW)))
    }

    /// A new block, at `now`, when `p` needs another ring: a new window or resolution, a window
    /// shorter than the stored one (the ring is kept, with a retention), or a retention
    /// that is over (the ring shrinks to the window). Every counted unit that a window used
    /// since still counts moves to the new sub-interval holding the last millisecond of its
    /// old one (or `latest`, if earlier), so none is lost; when each stops counting is
    /// approximate, as the sub-intervals it was spread over are gone.
    fn reshaped(&self, now: Instant, p: &Params) -> Option<SubWindow> {
        if self.same_shape(p) {
            return None;
        }
        let now = now.max(self.latest());
        let plan = self.plan(now, p);
        if self.fits(p, &plan) {
            return None;
        }
        let latest = self.latest();
        // The new ring is placed at the call's time, so that it holds what the plan keeps.
        let mut new = SubWindow::shaped(p, plan.ring, plan.front.as_ref());
        new.set_latest(now);
        let res = self.resolution();
        let (oldest, newest) = self.span();
        let (new_oldest, _) = new.span();
        let mut total: u64 = 0;
        for (i, c) in (oldest..=newest).zip(self.ring(oldest, newest)) {
            let j = new.index(Instant::from_ms((i + 1) * res - 1).min(latest));
            let j = match j {
                _ if c == 0 => continue,
                j if j >= new_oldest => j,
                _ if plan.squeezed => new_oldest,
                _ => continue,
            };
            let sum = (new.count(j) + c).min(MAX_LIMIT);
            total += sum - new.count(j);
            new.put_count(j, sum as u32);
        }
        // At most the old total, which fitted.
        new.put(TOTAL, total.min(u64::from(u32::MAX)) as u32);
        Some(new)
    }
}

