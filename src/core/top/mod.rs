//! Who is refused most: a bounded heavy-hitter sketch (Space-Saving, Metwally et al. 2005)
//! over two aligned epochs of a window each, so that it forgets what is older than two
//! windows. Pure: every call is handed `now` and the window.
//!
//! Each epoch keeps [`K`] counters. A name seen is counted on its counter; a new name takes a
//! free counter, or, when all are taken, the smallest one, whose count it inherits as its
//! error. So in an epoch of `N` refusals a counter overstates its name's true count by at
//! most its error, which is at most `N / K`, and a name refused more than `N / K` times holds
//! a counter.
//!
//! An answer covers the current epoch and the one before (between one and two windows):
//! for each name, `count` is an upper bound on its refusals in them, and `count - error` a
//! lower bound, with `error <= (N_previous + N_current) / K`. A name in only one epoch's
//! counters is counted in the other as at most that epoch's smallest counter (0 when the
//! epoch has free counters). Every name refused more than `(N_previous + N_current) / K`
//! times in the two epochs is in the answer (it is above `N / K` in at least one of them).

use super::{Duration, Instant};

/// Counters per epoch.
pub const K: usize = 64;

/// The bytes of a name kept to answer with (longer names are told apart by their hash, and
/// answered cut to this length).
pub const NAME: usize = 64;

/// The most names one answer gives.
pub const MAX_COUNT: usize = 2 * K;

/// One epoch's counters.
#[derive(Clone)]
struct Epoch {
    /// When it began: a multiple of the window in force then.
    start: Instant,
    /// Refusals it counted.
    total: u64,
    /// Counters in use.
    len: usize,
    /// The counter counted last: a flood repeats its name, found here first.
    last: usize,
    hashes: [u64; K],
    counts: [u64; K],
    errors: [u64; K],
    name_lens: [u8; K],
    names: [[u8; NAME]; K],
}

impl Epoch {
    fn empty(start: Instant) -> Epoch {
        Epoch {
            start,
            total: 0,
            len: 0,
            last: 0,
            hashes: [0; K],
            counts: [0; K],
            errors: [0; K],
            name_lens: [0; K],
            names: [[0; NAME]; K],
        }
    }

    fn find(&self, hash: u64) -> Option<usize> {
        self.hashes.get(..self.len)?.iter().position(|&h| h == hash)
    }

    fn record(&mut self, hash: u64, name: &[u8]) {
        self.total = self.total.saturating_add(1);
        // One pass over the counters in use: the name's, or else the smallest (the first on a
        // tie), which a new name takes when every counter is in use.
        let len = self.len.min(K);
        let mut found = None;
        if self.hashes.get(self.last) == Some(&hash) && self.last < len {
            found = Some(self.last);
        }
        let (mut min, mut min_count) = (0, u64::MAX);
        if found.is_none() {
            for (j, (&h, &c)) in self.hashes[..len]
                .iter()
                .zip(&self.counts[..len])
                .enumerate()
            {
                if h == hash {
                    found = Some(j);
                    break;
                }
                if c < min_count {
                    (min, min_count) = (j, c);
                }
            }
        }
        if let Some(i) = found {
            if let Some(c) = self.counts.get_mut(i) {
                *c = c.saturating_add(1);
            }
            self.last = i;
            return;
        }
        let (i, inherited) = if len < K {
            self.len = len + 1;
            (len, 0)
        } else {
            (min, min_count)
        };
        let (Some(h), Some(c), Some(e), Some(l), Some(n)) = (
            self.hashes.get_mut(i),
            self.counts.get_mut(i),
            self.errors.get_mut(i),
            self.name_lens.get_mut(i),
            self.names.get_mut(i),
        ) else {
            return;
        };
        self.last = i;
        *h = hash;
        *c = inherited.saturating_add(1);
        *e = inherited;
        let kept = name.len().min(NAME);
        *l = kept as u8;
        n[..kept].copy_from_slice(&name[..kept]);
    }

    /// What a name absent from the counters may have had: the smallest counter when all
    /// are taken, else 0.
    fn floor(&self) -> u64 {
        if self.len < K {
            0
        } else {
            self.counts.iter().copied().min().unwrap_or(0)
        }
    }

    fn name(&self, i: usize) -> &[u8] {
        let len = usize::from(self.name_lens.get(i).copied().unwrap_or(0));
        self.names.get(i).map_or(&[], |n| &n[..len.min(NAME)])
    }
}

/// A name in an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heavy {
    /// The name (cut to [`NAME`] bytes).
    pub name: Vec<u8>,
    /// At least its refusals in the epochs answered for.
    pub count: u64,
    /// `count - error` is at most its refusals.
    pub error: u64,
}

/// The sketch: the current epoch and the one before.
#[derive(Clone)]
pub struct Sketch {
    current: Epoch,
    previous: Epoch,
}

/// A name's identity: 64-bit FNV-1a of all its bytes.
fn hash(name: &[u8]) -> u64 {
    super::fnv1a(super::FNV_OFFSET, name)
}

impl Default for Sketch {
    fn default() -> Self {
        Sketch {
            current: Epoch::empty(Instant::EPOCH),
            previous: Epoch::empty(Instant::EPOCH),
        }
    }
}

impl Sketch {
    /// An empty sketch, in a box (it is about 12 kB).
    pub fn boxed() -> Box<Sketch> {
        Box::default()
    }

    /// Bytes it takes.
    pub const fn size() -> usize {
        std::mem::size_of::<Sketch>()
    }

    /// Moves to the epoch of `now` (a clock gone back stays in the current one). Epochs are
    /// kept by when they began, so a window changed between calls (`ratelimit.top-window-ms`)
    /// starts the next epoch on the new window's boundaries and forgets as it says.
    fn advance(&mut self, now: Instant, window: Duration) {
        let window = window.max(Duration::from_ms(1));
        let start = now.floor(window);
        if start <= self.current.start {
            return;
        }
        if start - self.current.start <= window {
            let fresh = Epoch::empty(start);
            self.previous = std::mem::replace(&mut self.current, fresh);
        } else {
            self.previous = Epoch::empty(start - window);
            self.current = Epoch::empty(start);
        }
    }

    /// Counts one refusal of `name` at `now`.
    pub fn record(&mut self, name: &[u8], now: Instant, window: Duration) {
        self.advance(now, window);
        self.current.record(hash(name), name);
    }

    /// Refusals counted in the epochs an answer at `now` covers.
    pub fn total(&self, now: Instant, window: Duration) -> u64 {
        let (cur, prev) = self.epochs(now, window);
        cur.map_or(0, |e| e.total) + prev.map_or(0, |e| e.total)
    }

    /// The epochs an answer at `now` covers: those begun at most a window before the
    /// epoch of `now` (the current one and the one before, when the window has not
    /// changed), each `None` when older than that or empty.
    fn epochs(&self, now: Instant, window: Duration) -> (Option<&Epoch>, Option<&Epoch>) {
        let window = window.max(Duration::from_ms(1));
        // A clock gone back answers from the current epoch.
        let start = now.floor(window).max(self.current.start);
        let from = start.saturating_sub(window);
        let covered = |e: &Epoch| e.total > 0 && e.start >= from;
        let cur = Some(&self.current).filter(|e| covered(e));
        let prev = Some(&self.previous).filter(|e| covered(e) && e.start < self.current.start);
        (cur, prev)
    }

    /// The `n` names refused most in the current epoch and the one before, most first (then
    /// by name), with their bounds.
    pub fn top(&self, n: usize, now: Instant, window: Duration) -> Vec<Heavy> {
        let (cur, prev) = self.epochs(now, window);
        let epochs: Vec<&Epoch> = [cur, prev].into_iter().flatten().collect();
        let mut seen: Vec<(u64, Heavy)> = Vec::new();
        for (which, e) in epochs.iter().enumerate() {
            for i in 0..e.len {
                let h = e.hashes.get(i).copied().unwrap_or(0);
                if seen.iter().any(|(s, _)| *s == h) {
                    continue;
                }
                let mut count = 0u64;
                let mut error = 0u64;
                for (other, o) in epochs.iter().enumerate() {
                    let at = if other == which { Some(i) } else { o.find(h) };
                    match at {
                        Some(j) => {
                            count = count.saturating_add(o.counts.get(j).copied().unwrap_or(0));
                            error = error.saturating_add(o.errors.get(j).copied().unwrap_or(0));
                        }
                        None => {
                            let floor = o.floor();
                            count = count.saturating_add(floor);
                            error = error.saturating_add(floor);
                        }
                    }
                }
                seen.push((
                    h,
                    Heavy {
                        name: e.name(i).to_vec(),
                        count,
                        error,
                    },
                ));
            }
        }
        let mut all: Vec<Heavy> = seen.into_iter().map(|(_, h)| h).collect();
        all.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
        all.truncate(n);
        all
    }
}

#[cfg(test)]
mod tests;
