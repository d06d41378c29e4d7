//! What a key keeps for the windows it was used with before its current ones.
//!
//! Only the longest window of a call matters. A record at `r` may still be counted by a
//! window `w` last used (by a call that recorded) at `last_used` iff `r <= last_used` and
//! `r > now - w`. A key keeps, besides its current windows, a Pareto front of such
//! `(w, last_used)` pairs: longer windows used earlier. An entry is dead once
//! `last_used + w <= now` (its window has passed since its last use); an entry no longer
//! than the current call's window is dominated by it (the call is more recent) and goes.
//!
//! The front keeps at most [`MAX_KEPT`] entries besides the current window. When one more
//! would be needed, the two entries used most recently are merged into
//! `(max w, max last_used)`: both are in use, so the merge keeps more than needed for a
//! while, but never resurrects a stale, longer window (the oldest entries, which are the
//! longest, are left as they are and still die on time).

use super::{Duration, Instant};

/// Entries kept besides the current window: the front holds at most four windows.
pub const MAX_KEPT: usize = 3;

/// The windows used before the current one that may still count a record, as
/// `(window_ms, last_used)`, longest last (and so used least recently).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Front {
    len: u8,
    kept: [(u64, Instant); MAX_KEPT],
}

/// Why a persisted front was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

impl Front {
    /// The entries, shortest window (most recently used) first.
    pub fn entries(&self) -> &[(u64, Instant)] {
        self.kept.get(..usize::from(self.len)).unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The front after a call at `now` whose longest window is `own`. `before` is the
    /// window the key held until this call and the newest record's time (its last use, as
    /// far as records go): kept when longer than `own`. Entries shorter than `own` go (and
    /// those as long, when `drop_equal`), then the dead ones.
    pub fn record(
        &mut self,
        now: Instant,
        own: u64,
        before: Option<(u64, Instant)>,
        drop_equal: bool,
    ) {
        // At most MAX_KEPT + 1 candidates, on the stack: this runs on every call.
        let mut all = [(0u64, Instant::EPOCH); MAX_KEPT + 1];
        let mut n = 0;
        for e in self
            .entries()
            .iter()
            .copied()
            .chain(before.filter(|&(w, _)| w > own))
        {
            let keep =
                (e.0 > own || (e.0 == own && !drop_equal)) && e.1 + Duration::from_ms(e.0) > now;
            if keep {
                all[n] = e;
                n += 1;
            }
        }
        if n == 0 {
            self.len = 0;
            return;
        }
        let all = &mut all[..n];
        // Pareto: longest first, an entry stays only if used after every longer one.
        all.sort_unstable_by(|a, b| b.cmp(a));
        let mut front = [(0u64, Instant::EPOCH); MAX_KEPT + 1];
        let mut len = 0;
        for &e in all.iter() {
            if len == 0 || e.1 > front[len - 1].1 {
                front[len] = e;
                len += 1;
            }
        }
        // Too many: merge the two used most recently (the two shortest).
        while len > MAX_KEPT {
            let (a, b) = (front[len - 1], front[len - 2]);
            front[len - 2] = (a.0.max(b.0), a.1.max(b.1));
            len -= 1;
        }
        let front = &mut front[..len];
        front.reverse();
        self.set(front);
    }

    fn set(&mut self, entries: &[(u64, Instant)]) {
        self.len = 0;
        for (slot, &e) in self.kept.iter_mut().zip(entries) {
            *slot = e;
            self.len += 1;
        }
    }

    /// How far back records must be kept with `own` as the current window: the longest
    /// window of the front, or `own`.
    pub fn keep(&self, own: u64) -> u64 {
        self.entries().iter().map(|e| e.0).fold(own, u64::max)
    }

    /// When the last record a front entry may count leaves it, given the newest record's
    /// time; `None` when the front is empty.
    pub fn empty_at(&self, newest: Instant) -> Option<Instant> {
        self.entries()
            .iter()
            .map(|&(w, last)| newest.min(last) + Duration::from_ms(w))
            .max()
    }

    /// A persisted front, checked: at most [`MAX_KEPT`] entries, windows in
    /// `1..=max_window`, longer than `own` (or as long, with `equal_ok`), times at most
    /// `max_time`, and a Pareto front (windows growing, last uses falling).
    pub fn from_entries(
        entries: &[(u64, Instant)],
        own: u64,
        equal_ok: bool,
        max_window: u64,
        max_time: Instant,
    ) -> Result<Front, Corrupt> {
        if entries.len() > MAX_KEPT {
            return Err(Corrupt("retention too long"));
        }
        for &(w, last) in entries {
            if w == 0 || w > max_window || w < own || (w == own && !equal_ok) {
                return Err(Corrupt("retention out of range"));
            }
            if last > max_time {
                return Err(Corrupt("time out of range"));
            }
        }
        if entries
            .windows(2)
            .any(|p| matches!(p, [a, b] if a.0 >= b.0 || a.1 <= b.1))
        {
            return Err(Corrupt("retention is not a front"));
        }
        let mut front = Front::default();
        front.set(entries);
        Ok(front)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Instant {
        Instant::from_ms(ms)
    }

    /// Entries with times in milliseconds.
    fn at(entries: &[(u64, u64)]) -> Vec<(u64, Instant)> {
        entries.iter().map(|&(w, last)| (w, t(last))).collect()
    }

    #[test]
    fn a_call_drops_what_it_dominates_and_what_has_passed() {
        let mut f = Front::default();
        f.record(t(100), 1000, Some((10_000, t(50))), true);
        assert_eq!(f.entries(), at(&[(10_000, 50)]));
        f.record(t(200), 500, Some((1000, t(150))), true);
        assert_eq!(f.entries(), at(&[(1000, 150), (10_000, 50)]));
        // A 5 s call dominates the 1 s entry; the 10 s one stays until 10_050.
        f.record(t(300), 5000, None, true);
        assert_eq!(f.entries(), at(&[(10_000, 50)]));
        assert_eq!(f.keep(5000), 10_000);
        f.record(t(10_050), 5000, None, true);
        assert!(f.is_empty());
    }

    #[test]
    fn equal_windows_stay_when_asked() {
        let mut f = Front::default();
        f.record(t(100), 1000, Some((10_000, t(50))), false);
        f.record(t(200), 10_000, None, false);
        assert_eq!(f.entries(), at(&[(10_000, 50)]));
        f.record(t(200), 10_000, None, true);
        assert!(f.is_empty());
    }

    #[test]
    fn a_fifth_window_merges_the_two_used_last() {
        let mut f = Front::default();
        f.record(t(10), 1, Some((100_000, t(5))), true);
        f.record(t(20), 1, Some((50_000, t(15))), true);
        f.record(t(30), 1, Some((20_000, t(25))), true);
        assert_eq!(f.entries(), at(&[(20_000, 25), (50_000, 15), (100_000, 5)]));
        f.record(t(40), 1, Some((10_000, t(35))), true);
        assert_eq!(f.entries(), at(&[(20_000, 35), (50_000, 15), (100_000, 5)]));
        assert_eq!(f.empty_at(t(36)), Some(t(100_005)));
    }

    #[test]
    fn from_entries_refuses_what_is_not_a_front() {
        let ok = at(&[(2000, 50), (3000, 40)]);
        assert!(Front::from_entries(&ok, 1000, false, 10_000, t(100)).is_ok());
        let bad: [&[(u64, u64)]; 6] = [
            &[(2000, 50), (3000, 50)],
            &[(3000, 50), (2000, 40)],
            &[(1000, 50)],
            &[(20_000, 50)],
            &[(2000, 500)],
            &[(2000, 9), (3000, 8), (4000, 7), (5000, 6)],
        ];
        for entries in bad {
            assert!(Front::from_entries(&at(entries), 1000, false, 10_000, t(100)).is_err());
        }
        let equal = at(&[(1000, 50)]);
        assert!(Front::from_entries(&equal, 1000, true, 10_000, t(100)).is_ok());
    }
}
