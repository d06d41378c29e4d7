//! The sliding log itself: its records, the windows it last recorded under and the
//! retention, and the algorithm over them (see the kind's docs in `mod.rs`).

use super::body::{pack, unpack, Big, Body, Entry, Small, SMALL_SLOTS, UNSPILL_ALLOCATIONS, UNSPILL_SLOTS};
use super::{Window, Windows, MAX_LIMIT, MAX_WINDOWS, MAX_WINDOW_MS};
use crate::core::chunks::class_ceil;
use crate::core::limit::Limit;
use crate::core::retention::Front;
use crate::core::{Decision, Duration, Instant, Wait, MAX_TIMESTAMP};

/// A sliding log with the windows it last recorded under.
///
/// A small log (up to [`SMALL_SLOTS`] windows and records together, no retention) is this
/// struct alone, 96 bytes: a key holding it costs one allocation. A bigger one spills its
/// windows, retention and records into a box of its own, the records in [`Chunks`], and
/// comes back once small again.
#[derive(Clone, Debug)]
pub struct SlidingLog {
    latest: Instant,
    /// The newest record's time (meaningless when there is none).
    newest: Instant,
    /// The running total just before the first entry.
    before_front: u32,
    body: Body,
}

/// Why a persisted log was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

impl SlidingLog {
    /// An empty log that will report with `windows` until it records under others.
    pub fn new(windows: &[Window]) -> Self {
        let mut log = SlidingLog {
            latest: Instant::EPOCH,
            newest: Instant::EPOCH,
            before_front: 0,
            body: Body::Small(Small {
                nwin: 0,
                len: 0,
                slots: [Entry::default(); SMALL_SLOTS],
            }),
        };
        log.set_windows(windows);
        log
    }

    /// The same log with a retention (see [`SlidingLog::retention`]), as persisted:
    /// `(window_ms, last_used)` pairs, shortest first, each longer than the current windows.
    pub fn with_retention(mut self, entries: &[(u64, Instant)]) -> Result<Self, Corrupt> {
        let own = self.own_longest();
        let front = Front::from_entries(entries, own, false, MAX_WINDOW_MS, self.latest)
            .map_err(|e| Corrupt(e.0))?;
        self.set_front(front);
        Ok(self)
    }

    /// The windows used before the current ones that may still count a record, as
    /// `(window_ms, last_used)`, shortest (most recently used) first; empty when the log
    /// keeps only what its current windows count.
    pub fn retention(&self) -> &[(u64, Instant)] {
        match &self.body {
            Body::Small(_) => &[],
            Body::Big(b) => b.kept.entries(),
        }
    }

    fn front(&self) -> Front {
        match &self.body {
            Body::Small(_) => Front::default(),
            Body::Big(b) => b.kept,
        }
    }

    /// Sets the retention; a small log spills to keep one.
    fn set_front(&mut self, front: Front) {
        match &mut self.body {
            Body::Small(_) if front.is_empty() => {}
            Body::Big(b) => b.kept = front,
            Body::Small(_) => {
                if let Some(big) = self.spill() {
                    big.kept = front;
                }
            }
        }
    }

    /// Stores `windows` as the log's own; a small log spills when they do not fit beside
    /// its records.
    fn set_windows(&mut self, windows: &[Window]) {
        if let Body::Small(s) = &mut self.body {
            let n = windows.len();
            if Small::fits(n, usize::from(s.len)) {
                let start = SMALL_SLOTS - n;
                let packed = windows.iter().map(pack);
                let mut ok = true;
                for (slot, p) in s.slots.iter_mut().skip(start).zip(packed) {
                    match p {
                        Some(p) => *slot = p,
                        None => ok = false,
                    }
                }
                if ok {
                    s.nwin = n as u8; // n <= SMALL_SLOTS
                    return;
                }
                // A window that does not pack (never one RL.SLIDE accepts): spill.
                s.nwin = 0;
            }
        }
        if let Some(big) = self.spill() {
            for (slot, w) in big.windows.iter_mut().zip(windows) {
                *slot = *w;
            }
            big.nwin = windows.len().min(MAX_WINDOWS) as u8;
        }
    }

    /// The log in its spilled shape, spilling a small one (its windows packed in it are
    /// kept; the records move into chunks). Always `Some`.
    fn spill(&mut self) -> Option<&mut Big> {
        if let Body::Small(s) = &self.body {
            let mut big = Big {
                nwin: s.nwin,
                windows: [Window {
                    limit: 0,
                    window_ms: 0,
                }; MAX_WINDOWS],
                kept: Front::default(),
                entries: s.entries().iter().copied().collect(),
            };
            for (slot, p) in big.windows.iter_mut().zip(s.packed_windows()) {
                *slot = unpack(p);
            }
            self.body = Body::Big(Box::new(big));
        }
        match &mut self.body {
            Body::Big(b) => Some(b),
            Body::Small(_) => None,
        }
    }

    /// A spilled log that is small again, keeps no retention and whose chunks are cheap
    /// to free goes back to the small shape.
    fn settle_shape(&mut self) {
        let Body::Big(b) = &self.body else {
            return;
        };
        let (nwin, len) = (usize::from(b.nwin), b.entries.len());
        if nwin + len > UNSPILL_SLOTS
            || !b.kept.is_empty()
            || b.entries.allocations() > UNSPILL_ALLOCATIONS
        {
            return;
        }
        let mut s = Small {
            nwin: nwin as u8,
            len: len as u8, // len <= UNSPILL_SLOTS
            slots: [Entry::default(); SMALL_SLOTS],
        };
        for (slot, e) in s.slots.iter_mut().zip(b.entries.iter()) {
            *slot = *e;
        }
        for (slot, w) in s.slots.iter_mut().skip(SMALL_SLOTS - nwin).zip(b.windows()) {
            match pack(w) {
                Some(p) => *slot = p,
                None => return,
            }
        }
        self.body = Body::Small(s);
    }

    /// Whether `windows` are the log's own.
    fn same_windows(&self, windows: &[Window]) -> bool {
        match &self.body {
            Body::Small(s) => {
                let own = s.packed_windows();
                own.len() == windows.len()
                    && own.iter().zip(windows).all(|(p, w)| pack(w) == Some(*p))
            }
            Body::Big(b) => b.windows() == windows,
        }
    }

    /// The longest of the log's own windows.
    fn own_longest(&self) -> u64 {
        match &self.body {
            Body::Small(s) => s.packed_windows().iter().map(|p| u64::from(p.cum)).max(),
            Body::Big(b) => b.windows().iter().map(|w| w.window_ms).max(),
        }
        .unwrap_or(0)
    }

    /// Rebuilds a log from its persisted parts, checking every invariant so that a damaged
    /// payload is refused instead of producing a log that misbehaves later.
    pub fn from_records(
        windows: &[Window],
        latest: Instant,
        records: impl IntoIterator<Item = (Instant, u64)>,
    ) -> Result<Self, Corrupt> {
        if windows.is_empty() || windows.len() > MAX_WINDOWS {
            return Err(Corrupt("bad number of windows"));
        }
        if windows.iter().any(|w| !valid_window(w)) {
            return Err(Corrupt("window out of range"));
        }
        if latest > MAX_TIMESTAMP {
            return Err(Corrupt("time out of range"));
        }
        let mut log = SlidingLog::new(windows);
        log.latest = latest;
        let records = records.into_iter();
        log.reserve(records.size_hint().1.unwrap_or(0));
        let mut total: u64 = 0;
        let mut oldest = None;
        for (at, units) in records {
            if units == 0 {
                return Err(Corrupt("empty record"));
            }
            total = total.saturating_add(units);
            if total > MAX_LIMIT {
                return Err(Corrupt("too many units"));
            }
            // (The first record is the log's first entry: every record is one.)
            let after_first = oldest.is_some();
            let first = *oldest.get_or_insert(at);
            if after_first && at <= log.newest {
                return Err(Corrupt("records out of order"));
            }
            if (at - first).ms() >= MAX_WINDOW_MS || at > latest {
                return Err(Corrupt("record out of range"));
            }
            log.push_entry(Entry {
                at: at.ms() as u32, // the low bits, see `ts`
                cum: total as u32, // total <= MAX_LIMIT
            });
            log.newest = at;
        }
        Ok(log)
    }

    /// Makes room for `records` more at once (a log read back whole): spilled now if they
    /// will not fit beside its windows, its records' chunks sized for them.
    fn reserve(&mut self, records: usize) {
        if let Body::Small(s) = &self.body {
            if Small::fits(usize::from(s.nwin), usize::from(s.len) + records) {
                return;
            }
        }
        if let Some(big) = self.spill() {
            big.entries.reserve(records);
        }
    }

    /// The windows the log last recorded under (or was created with).
    pub fn windows(&self) -> Windows {
        let mut out = Windows::default();
        let mut put = |w: Window| {
            out.push(w);
        };
        match &self.body {
            Body::Small(s) => s.packed_windows().iter().for_each(|p| put(unpack(p))),
            Body::Big(b) => b.windows().iter().for_each(|w| put(*w)),
        }
        out
    }

    /// No units are recorded.
    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    /// The number of records (milliseconds with units).
    pub fn len(&self) -> usize {
        self.body.len()
    }

    /// The recorded `(timestamp, units)` pairs, oldest first.
    pub fn records(&self) -> impl Iterator<Item = (Instant, u64)> + '_ {
        let mut prev = self.before_front;
        self.body.iter().map(move |e| {
            let units = u64::from(e.cum.wrapping_sub(prev));
            prev = e.cum;
            (self.ts(e), units)
        })
    }

    /// Bytes held on the heap besides the log itself, for `MEMORY USAGE`, in O(1): none
    /// for a small log; a spilled one's box, its records' chunks (those not yet freed
    /// included) and their index.
    pub fn heap_size(&self) -> usize {
        match &self.body {
            Body::Small(_) => 0,
            Body::Big(b) => class_ceil(std::mem::size_of::<Big>()) + b.entries.heap_size(),
        }
    }

    /// Heap allocations held besides the log itself, what freeing it costs (Redis's
    /// `free_effort`).
    pub fn allocations(&self) -> usize {
        match &self.body {
            Body::Small(_) => 0,
            Body::Big(b) => 1 + b.entries.allocations(),
        }
    }

    /// Gives back up to `units` of the newest recorded units (never below empty), then answers
    /// like a `COST 0` call with the stored windows. O(log n) for a refund of any size: the
    /// cut is found by binary search on the running total.
    pub fn refund(&mut self, now: Instant, units: u64) -> Decision {
        let now = now.max(self.latest);
        self.latest = now;
        let keep = self.prefix(self.body.len()).saturating_sub(units);
        // The first record holding units past `keep`: it keeps the part up to `keep`, and
        // the records after it go.
        let j = self.body.partition_point(|e| self.units_through(e) < keep);
        let kept = match self.body.get(j) {
            Some(e) if keep > 0 => Some((j, self.ts(e))),
            _ => None,
        };
        match kept {
            Some((j, at)) => {
                if let Some(e) = self.body.get_mut(j) {
                    e.cum = self.before_front.wrapping_add(keep as u32); // keep <= MAX_LIMIT
                }
                self.body.truncate(j + 1);
                self.newest = at;
            }
            None => self.body.truncate(0),
        }
        self.settle_shape();
        self.peek(now)
    }

    /// The answer to a `COST 0` call with the stored windows.
    pub fn peek(&self, now: Instant) -> Decision {
        self.evaluate(now, &self.windows(), 0)
    }

    /// The time of a record of this log: every record is less than 2^32 ms older than the
    /// newest, so its low 32 bits place it.
    fn ts(&self, e: &Entry) -> Instant {
        let behind = (self.newest.ms() as u32).wrapping_sub(e.at);
        self.newest - Duration::from_ms(u64::from(behind))
    }

    /// The newest record's time, `None` when the log is empty.
    fn newest(&self) -> Option<Instant> {
        (!self.body.is_empty()).then_some(self.newest)
    }

    /// Units in the records from the first through `e`.
    fn units_through(&self, e: &Entry) -> u64 {
        u64::from(e.cum.wrapping_sub(self.before_front))
    }

    /// Units in entries `[0, i)`.
    fn prefix(&self, i: usize) -> u64 {
        match i.checked_sub(1).and_then(|j| self.body.get(j)) {
            Some(e) => self.units_through(e),
            None => 0,
        }
    }

    /// The first entry inside `(now - window, now]` and the units from there on.
    fn used(&self, now: Instant, window_ms: u64) -> (usize, u64) {
        let start = match now.checked_sub(Duration::from_ms(window_ms)) {
            // O(1) while the oldest record is still in the window (the usual case).
            Some(edge) => self.body.leading(|e| self.ts(e) <= edge),
            None => 0,
        };
        (start, self.prefix(self.body.len()) - self.prefix(start))
    }

    /// How long until `cost` more units fit in `w`, given `used` units from entry `start` on.
    fn wait(&self, now: Instant, w: &Window, start: usize, used: u64, cost: u64) -> Wait {
        if cost > w.limit {
            return Wait::Never;
        }
        let must_leave = used + cost - w.limit;
        let target = self.prefix(start) + must_leave;
        // The entry whose departure brings the window down far enough.
        let j = self.body.leading(|e| self.units_through(e) < target);
        match self.body.get(j) {
            Some(e) => Wait::For((self.ts(e) + Duration::from_ms(w.window_ms)).since(now)),
            None => Wait::Never, // unreachable while must_leave <= used
        }
    }

    fn reset_after(&self, now: Instant, windows: &[Window]) -> Duration {
        match self.newest() {
            Some(newest) => (newest + Duration::from_ms(longest(windows))).since(now),
            None => Duration::ZERO,
        }
    }

    /// The retention after a call at `now` under `windows`: the one pending, with the
    /// stored windows added when the call's are shorter (the newest record being their last
    /// use as far as records go), less what the call's windows dominate or what has passed.
    #[inline]
    fn retention_after(&self, now: Instant, windows: &[Window]) -> Front {
        if self.retention().is_empty() && self.same_windows(windows) {
            // No retention, and the same windows add none: the common call.
            return Front::default();
        }
        let own = longest(windows);
        let before = self.newest().map(|newest| (self.own_longest(), newest));
        let mut front = self.front();
        front.record(now, own, before, true);
        front
    }

    /// The retention a record of `cost` units at `now` under `windows` leaves (see
    /// [`SlidingLog::retention_after`]); `None` when the record would break the log's
    /// invariants: windows or a time out of range, or more units kept than the 32-bit
    /// running totals hold.
    #[inline(always)]
    fn retention_recorded(&self, now: Instant, windows: &[Window], cost: u64) -> Option<Front> {
        let now = now.max(self.latest);
        if windows.is_empty()
            || windows.len() > MAX_WINDOWS
            || now > MAX_TIMESTAMP
            || !windows.iter().all(valid_window)
        {
            return None;
        }
        // What leaves the log: what no window still counts (see `retention_after`).
        let mut retention = self.retention_after(now, windows);
        // Everything the log holds fits with the cost (the usual case): so does what it
        // keeps.
        if self.prefix(self.body.len()).saturating_add(cost) > MAX_LIMIT {
            let keep = retention.keep(longest(windows));
            let (_, mut kept_units) = self.used(now, keep);
            if !retention.is_empty() && kept_units.saturating_add(cost) > MAX_LIMIT {
                // The running totals hold 2^32 - 1 units at most: past that, the log keeps
                // only what the call's own windows count.
                retention = Front::default();
                (_, kept_units) = self.used(now, longest(windows));
            }
            if kept_units.saturating_add(cost) > MAX_LIMIT {
                return None;
            }
        }
        Some(retention)
    }

    /// Drops the records that only its retention counts (older than its own longest
    /// window), keeping the retention's windows: its answers under its own windows, and
    /// when it is empty again, unchanged. What a compact policy's family does with a log
    /// past the bytes an entry holds (a window narrowed: a keyed log keeps the wider one's
    /// records for as long as it lasts, should it come back).
    pub fn shed_retained(&mut self) {
        if self.retention().is_empty() {
            return;
        }
        let keep = Duration::from_ms(self.own_longest());
        self.trim_before((self.latest + Duration::from_ms(1)).saturating_sub(keep));
        self.settle_shape();
    }

    /// Drops the records older than `cutoff`. O(log n), and frees a bounded number of
    /// chunks (see [`Chunks::drop_front`]); called with nothing to drop, it frees some of
    /// what earlier calls left.
    fn trim_before(&mut self, cutoff: Instant) {
        let n = self.body.leading(|e| self.ts(e) < cutoff);
        if let Some(last_dropped) = n.checked_sub(1).and_then(|i| self.body.get(i)) {
            self.before_front = last_dropped.cum;
        }
        self.body.drop_front(n);
    }

    /// Adds `units` at `now`, no earlier than the newest record: merged into it when in the
    /// same millisecond.
    fn push(&mut self, now: Instant, units: u32) {
        let same_ms = self.newest() == Some(now);
        let cum = match self.body.last_mut() {
            Some(back) if same_ms => {
                back.cum = back.cum.wrapping_add(units);
                return;
            }
            Some(back) => back.cum.wrapping_add(units),
            None => self.before_front.wrapping_add(units),
        };
        self.push_entry(Entry {
            at: now.ms() as u32, // the low bits, see `ts`
            cum,
        });
        self.newest = now;
    }

    /// Appends a record; a small log full with its windows spills.
    fn push_entry(&mut self, e: Entry) {
        match &mut self.body {
            Body::Big(b) => {
                b.entries.push_back(e);
                return;
            }
            Body::Small(s) => {
                let len = usize::from(s.len);
                if Small::fits(usize::from(s.nwin), len + 1) {
                    if let Some(slot) = s.slots.get_mut(len) {
                        *slot = e;
                        s.len += 1;
                        return;
                    }
                }
            }
        }
        if let Some(big) = self.spill() {
            big.entries.push_back(e);
        }
    }
}

/// Checks a request against every window at once and records it in all of them, or in none.
impl Limit for SlidingLog {
    type Params = [Window];
    type Stored = Windows;

    fn stored(&self) -> Windows {
        self.windows()
    }

    fn give_back(&mut self, now: Instant, units: u64) -> Decision {
        self.refund(now, units)
    }

    /// When the log will be empty if nothing else arrives: the newest record leaves the longest
    /// window of the current parameters. `None` when nothing is recorded.
    ///
    /// A retention keeps the key too, while a record it keeps could still be counted.
    fn empty_at(&self) -> Option<Instant> {
        let newest = self.newest()?;
        let own = newest + Duration::from_ms(self.own_longest());
        let kept = match &self.body {
            Body::Small(_) => None,
            Body::Big(b) => b.kept.empty_at(newest),
        };
        Some(own.max(kept.unwrap_or(Instant::EPOCH)))
    }

    /// The answer to `cost` units at `now` under `windows`, without recording anything.
    fn evaluate(&self, now: Instant, windows: &[Window], cost: u64) -> Decision {
        let now = now.max(self.latest);
        let mut allowed = true;
        // (remaining, window, limit) of the tightest window, ties going to the longer window
        // (its reset is the one worth reporting), and (wait, limit) of the slowest one.
        let mut tightest: Option<(u64, u64, u64)> = None;
        let mut slowest: Option<(Wait, u64)> = None;
        for w in windows {
            let (start, used) = self.used(now, w.window_ms);
            let fits = used.saturating_add(cost) <= w.limit;
            allowed &= fits;
            let remaining = w.limit.saturating_sub(used);
            if tightest
                .is_none_or(|(r, ms, _)| remaining < r || (remaining == r && w.window_ms > ms))
            {
                tightest = Some((remaining, w.window_ms, w.limit));
            }
            if !fits {
                let wait = self.wait(now, w, start, used, cost);
                if slowest.is_none_or(|(s, _)| later(wait, s)) {
                    slowest = Some((wait, w.limit));
                }
            }
        }
        let (remaining, _, tight_limit) = tightest.unwrap_or((0, 0, 0));
        let reset_after = if allowed && cost > 0 {
            Duration::from_ms(longest(windows))
        } else {
            self.reset_after(now, windows)
        };
        match slowest {
            Some((wait, limit)) if !allowed => Decision {
                allowed: false,
                limit,
                remaining,
                retry_after: wait,
                reset_after,
            },
            _ => Decision {
                allowed: true,
                limit: tight_limit,
                remaining: remaining.saturating_sub(cost),
                retry_after: Wait::None,
                reset_after,
            },
        }
    }

    /// Records `cost` units at `now` under `windows` without checking any limit: the effect of
    /// a decision already taken (by this server, or by the primary for a replica). Returns
    /// false, changing nothing, when the record would break the log's invariants.
    fn record(&mut self, now: Instant, windows: &[Window], cost: u64) -> bool {
        let Some(retention) = self.retention_recorded(now, windows, cost) else {
            return false;
        };
        let now = now.max(self.latest);
        if !self.same_windows(windows) {
            self.set_windows(windows);
        }
        self.set_front(retention);
        self.latest = now;
        if cost == 0 {
            self.settle_shape();
            return true;
        }
        // What no window still counts goes: what has left the longest window, or the
        // retention's.
        let keep = retention.keep(longest(windows));
        let one = Duration::from_ms(1);
        self.trim_before((now + one).saturating_sub(Duration::from_ms(keep)));
        self.push(now, cost as u32); // cost <= MAX_LIMIT, checked by retention_recorded
        self.settle_shape();
        true
    }

    fn can_record(&self, now: Instant, windows: &[Window], cost: u64) -> bool {
        self.retention_recorded(now, windows, cost).is_some()
    }

    fn latest(&self) -> Instant {
        self.latest
    }
}

/// Whether `w` is within the ranges `RL.SLIDE` accepts.
pub fn valid_window(w: &Window) -> bool {
    (1..=MAX_LIMIT).contains(&w.limit) && (1..=MAX_WINDOW_MS).contains(&w.window_ms)
}

fn longest(windows: &[Window]) -> u64 {
    windows.iter().map(|w| w.window_ms).max().unwrap_or(0)
}

/// `a` is a longer wait than `b`; never is the longest.
fn later(a: Wait, b: Wait) -> bool {
    let rank = |w: Wait| match w {
        Wait::None => (0, Duration::ZERO),
        Wait::For(d) => (1, d),
        Wait::Never => (2, Duration::ZERO),
    };
    rank(a) > rank(b)
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
