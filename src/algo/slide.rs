//! The exact sliding log behind `RL.SLIDE`.
//!
//! Every allowed request is kept as `(timestamp, units)`, merged per millisecond, so that the
//! units in any rolling window `(now - window, now]` are known exactly. Each record takes 8
//! bytes: the low 32 bits of its timestamp (the full time is recovered from the newest
//! record's, as all records span less than 2^32 ms) and a 32-bit running total of units
//! (wrapping). The running total turns "units in a window", "when will enough units have
//! left" and "where does a refund cut" into binary searches, so a call costs O(log n)
//! whatever the number of windows and the size of a refund.
//!
//! Records are held in [`Chunks`], so that no call copies or frees more than a bounded
//! amount, even on a log of ten million records: growth allocates one chunk at most, and
//! dropping records (those that left the longest window, or a refund) frees a bounded number
//! of chunks, leaving the rest to the next calls.
//!
//! Records leave the log once no window the key was used with since they were made can count
//! them. A call records under its own windows and trims what has left the longest of them,
//! except when it shrinks the windows the log was kept for: the older, longer windows may
//! still count records the new ones do not, so the log keeps a *retention*, the front of
//! windows used before (see [`Front`]), and trims only what none of them counts. Decisions
//! count only the call's own windows: what is kept for others never changes one.
//!
//! Invariants (checked by [`SlidingLog::from_records`], kept by every method):
//! - records are in strictly increasing time order, each with at least 1 unit;
//! - all records span less than [`MAX_WINDOW_MS`], and all units together fit in a `u32`;
//! - `latest` is at least the newest record's time;
//! - the retention's windows are longer than the current ones, at most [`MAX_WINDOW_MS`].

use super::chunks::{class_ceil, Chunks};
use super::retention::Front;
use super::{Decision, Limit, Millis, Wait, Window, MAX_TIMESTAMP};

/// Windows one call may check at once.
pub const MAX_WINDOWS: usize = 8;
/// The largest limit of one window: the running totals are 32-bit.
pub const MAX_LIMIT: u64 = u32::MAX as u64;
/// The longest window: 31 days, so a monthly quota fits and record offsets stay 32-bit.
pub const MAX_WINDOW_MS: u64 = 31 * 24 * 3600 * 1000;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Entry {
    /// The timestamp's low 32 bits: see [`SlidingLog::ts`].
    at: u32,
    /// Units recorded up to and including this entry, wrapping; only differences matter.
    cum: u32,
}

/// Slots of a small log, in the log's own allocation: its windows, packed, at the end, and
/// its records from the start. One window and up to 7 records, or 8 windows and none.
const SMALL_SLOTS: usize = 8;
/// A spilled log goes back to the small shape once its windows and records take at most
/// this many slots (and it keeps no retention): half, so that a log at the boundary does not
/// spill and come back on every call.
const UNSPILL_SLOTS: usize = SMALL_SLOTS / 2;
/// A spilled log comes back only when freeing its chunks is cheap: at most this many
/// allocations (chunks, index), so that the call stays bounded.
const UNSPILL_ALLOCATIONS: usize = 4;

/// A small log: windows and records in a few slots of the log itself, no other allocation.
#[derive(Clone, Debug)]
struct Small {
    nwin: u8,
    len: u8,
    /// Records in `[0, len)`, windows (see [`pack`]) in `[SMALL_SLOTS - nwin, SMALL_SLOTS)`.
    slots: [Entry; SMALL_SLOTS],
}

impl Small {
    fn entries(&self) -> &[Entry] {
        self.slots.get(..usize::from(self.len)).unwrap_or_default()
    }

    fn entries_mut(&mut self) -> &mut [Entry] {
        self.slots
            .get_mut(..usize::from(self.len))
            .unwrap_or_default()
    }

    fn packed_windows(&self) -> &[Entry] {
        self.slots
            .get(SMALL_SLOTS - usize::from(self.nwin)..)
            .unwrap_or_default()
    }

    /// Room for `nwin` windows and `len` records.
    fn fits(nwin: usize, len: usize) -> bool {
        nwin + len <= SMALL_SLOTS
    }
}

/// A log that outgrew the small shape (or keeps a retention): its windows and retention in
/// one box, its records in chunks.
#[derive(Clone, Debug)]
struct Big {
    nwin: u8,
    windows: [Window; MAX_WINDOWS],
    /// Retention: the windows used before the current ones that may still count a record.
    kept: Front,
    entries: Chunks<Entry>,
}

impl Big {
    fn windows(&self) -> &[Window] {
        self.windows
            .get(..usize::from(self.nwin))
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug)]
enum Body {
    Small(Small),
    Big(Box<Big>),
}

/// The records, whatever the shape.
impl Body {
    fn len(&self) -> usize {
        match self {
            Body::Small(s) => usize::from(s.len),
            Body::Big(b) => b.entries.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get(&self, i: usize) -> Option<&Entry> {
        match self {
            Body::Small(s) => s.entries().get(i),
            Body::Big(b) => b.entries.get(i),
        }
    }

    fn get_mut(&mut self, i: usize) -> Option<&mut Entry> {
        match self {
            Body::Small(s) => s.entries_mut().get_mut(i),
            Body::Big(b) => b.entries.get_mut(i),
        }
    }

    fn last_mut(&mut self) -> Option<&mut Entry> {
        match self {
            Body::Small(s) => s.entries_mut().last_mut(),
            Body::Big(b) => b.entries.last_mut(),
        }
    }

    /// See [`Chunks::partition_point`].
    fn partition_point(&self, pred: impl FnMut(&Entry) -> bool) -> usize {
        match self {
            Body::Small(s) => s.entries().partition_point(pred),
            Body::Big(b) => b.entries.partition_point(pred),
        }
    }

    /// See [`Chunks::leading`].
    fn leading(&self, mut pred: impl FnMut(&Entry) -> bool) -> usize {
        match self {
            Body::Small(s) => match s.entries().first() {
                Some(e) if !pred(e) => 0,
                _ => s.entries().partition_point(pred),
            },
            Body::Big(b) => b.entries.leading(pred),
        }
    }

    /// See [`Chunks::drop_front`]: bounded work either way.
    fn drop_front(&mut self, n: usize) {
        match self {
            Body::Small(s) => {
                let len = usize::from(s.len);
                let n = n.min(len);
                if n > 0 {
                    s.slots.copy_within(n..len, 0);
                    s.len = (len - n) as u8;
                }
            }
            Body::Big(b) => b.entries.drop_front(n),
        }
    }

    /// See [`Chunks::truncate`].
    fn truncate(&mut self, len: usize) {
        match self {
            Body::Small(s) => s.len = s.len.min(len.min(SMALL_SLOTS) as u8),
            Body::Big(b) => b.entries.truncate(len),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Entry> + '_ {
        let (small, big) = match self {
            Body::Small(s) => (s.entries(), None),
            Body::Big(b) => (&[][..], Some(&b.entries)),
        };
        small.iter().chain(big.into_iter().flat_map(Chunks::iter))
    }
}

/// A window in one slot: both halves fit 32 bits for any window [`valid_window`] accepts.
fn pack(w: &Window) -> Option<Entry> {
    Some(Entry {
        at: u32::try_from(w.limit).ok()?,
        cum: u32::try_from(w.window_ms).ok()?,
    })
}

fn unpack(e: &Entry) -> Window {
    Window {
        limit: u64::from(e.at),
        window_ms: u64::from(e.cum),
    }
}

/// The windows of a log, by value (a small log holds them packed).
#[derive(Clone, Copy, Debug)]
pub struct Windows {
    len: usize,
    list: [Window; MAX_WINDOWS],
}

impl Default for Windows {
    fn default() -> Self {
        Windows {
            len: 0,
            list: [Window {
                limit: 0,
                window_ms: 0,
            }; MAX_WINDOWS],
        }
    }
}

impl Windows {
    /// Appends `w`; false when [`MAX_WINDOWS`] are there already.
    pub fn push(&mut self, w: Window) -> bool {
        match self.list.get_mut(self.len) {
            Some(slot) => {
                *slot = w;
                self.len += 1;
                true
            }
            None => false,
        }
    }
}

impl std::ops::Deref for Windows {
    type Target = [Window];

    fn deref(&self) -> &[Window] {
        self.list.get(..self.len).unwrap_or_default()
    }
}

/// A sliding log with the windows it last recorded under.
///
/// A small log (up to [`SMALL_SLOTS`] windows and records together, no retention) is this
/// struct alone, 96 bytes: a key holding it costs one allocation. A bigger one spills its
/// windows, retention and records into a box of its own, the records in [`Chunks`], and
/// comes back once small again.
#[derive(Clone, Debug)]
pub struct SlidingLog {
    latest: Millis,
    /// The newest record's time (meaningless when there is none).
    newest: Millis,
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
            latest: 0,
            newest: 0,
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
    pub fn with_retention(mut self, entries: &[(u64, Millis)]) -> Result<Self, Corrupt> {
        let own = self.own_longest();
        let front = Front::from_entries(entries, own, false, MAX_WINDOW_MS, self.latest)
            .map_err(|e| Corrupt(e.0))?;
        self.set_front(front);
        Ok(self)
    }

    /// The windows used before the current ones that may still count a record, as
    /// `(window_ms, last_used)`, shortest (most recently used) first; empty when the log
    /// keeps only what its current windows count.
    pub fn retention(&self) -> &[(u64, Millis)] {
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
        latest: Millis,
        records: impl IntoIterator<Item = (Millis, u64)>,
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
            let first = *oldest.get_or_insert(at);
            if !log.body.is_empty() && at <= log.newest {
                return Err(Corrupt("records out of order"));
            }
            if at - first >= MAX_WINDOW_MS || at > latest {
                return Err(Corrupt("record out of range"));
            }
            log.push_entry(Entry {
                at: at as u32,     // the low bits, see `ts`
                cum: total as u32, // total <= MAX_LIMIT
            });
            log.newest = at;
        }
        Ok(log)
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
    pub fn records(&self) -> impl Iterator<Item = (Millis, u64)> + '_ {
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
    pub fn refund(&mut self, now: Millis, units: u64) -> Decision {
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
    pub fn peek(&self, now: Millis) -> Decision {
        self.evaluate(now, &self.windows(), 0)
    }

    /// The time of a record of this log: every record is less than 2^32 ms older than the
    /// newest, so its low 32 bits place it.
    fn ts(&self, e: &Entry) -> Millis {
        self.newest - u64::from((self.newest as u32).wrapping_sub(e.at))
    }

    /// The newest record's time, `None` when the log is empty.
    fn newest(&self) -> Option<Millis> {
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
    fn used(&self, now: Millis, window_ms: u64) -> (usize, u64) {
        let start = match now.checked_sub(window_ms) {
            // O(1) while the oldest record is still in the window (the usual case).
            Some(edge) => self.body.leading(|e| self.ts(e) <= edge),
            None => 0,
        };
        (start, self.prefix(self.body.len()) - self.prefix(start))
    }

    /// How long until `cost` more units fit in `w`, given `used` units from entry `start` on.
    fn wait(&self, now: Millis, w: &Window, start: usize, used: u64, cost: u64) -> Wait {
        if cost > w.limit {
            return Wait::Never;
        }
        let must_leave = used + cost - w.limit;
        let target = self.prefix(start) + must_leave;
        // The entry whose departure brings the window down far enough.
        let j = self.body.leading(|e| self.units_through(e) < target);
        match self.body.get(j) {
            Some(e) => Wait::Ms((self.ts(e) + w.window_ms).saturating_sub(now)),
            None => Wait::Never, // unreachable while must_leave <= used
        }
    }

    fn reset_after(&self, now: Millis, windows: &[Window]) -> u64 {
        match self.newest() {
            Some(newest) => (newest + longest(windows)).saturating_sub(now),
            None => 0,
        }
    }

    /// The retention after a call at `now` under `windows`: the one pending, with the
    /// stored windows added when the call's are shorter (the newest record being their last
    /// use as far as records go), less what the call's windows dominate or what has passed.
    fn retention_after(&self, now: Millis, windows: &[Window]) -> Front {
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
    fn retention_recorded(&self, now: Millis, windows: &[Window], cost: u64) -> Option<Front> {
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

    /// Drops the records older than `cutoff`. O(log n), and frees a bounded number of
    /// chunks (see [`Chunks::drop_front`]); called with nothing to drop, it frees some of
    /// what earlier calls left.
    fn trim_before(&mut self, cutoff: Millis) {
        let n = self.body.leading(|e| self.ts(e) < cutoff);
        if let Some(last_dropped) = n.checked_sub(1).and_then(|i| self.body.get(i)) {
            self.before_front = last_dropped.cum;
        }
        self.body.drop_front(n);
    }

    /// Adds `units` at `now`, no earlier than the newest record: merged into it when in the
    /// same millisecond.
    fn push(&mut self, now: Millis, units: u32) {
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
            at: now as u32, // the low bits, see `ts`
            cum,
        });
        self.newest = now;
    }

    /// Appends a record; a small log full with its windows spills.
    fn push_entry(&mut self, e: Entry) {
        if let Body::Small(s) = &mut self.body {
            let len = usize::from(s.len);
            if Small::fits(usize::from(s.nwin), len + 1) {
                if let Some(slot) = s.slots.get_mut(len) {
                    *slot = e;
                    s.len += 1;
                    return;
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

    /// When the log will be empty if nothing else arrives: the newest record leaves the longest
    /// window of the current parameters. `None` when nothing is recorded.
    ///
    /// A retention keeps the key too, while a record it keeps could still be counted.
    fn empty_at(&self) -> Option<Millis> {
        let newest = self.newest()?;
        let own = newest + self.own_longest();
        let kept = match &self.body {
            Body::Small(_) => None,
            Body::Big(b) => b.kept.empty_at(newest),
        };
        Some(own.max(kept.unwrap_or(0)))
    }

    /// The answer to `cost` units at `now` under `windows`, without recording anything.
    fn evaluate(&self, now: Millis, windows: &[Window], cost: u64) -> Decision {
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
        let reset_after_ms = if allowed && cost > 0 {
            longest(windows)
        } else {
            self.reset_after(now, windows)
        };
        match slowest {
            Some((wait, limit)) if !allowed => Decision {
                allowed: false,
                limit,
                remaining,
                retry_after: wait,
                reset_after_ms,
            },
            _ => Decision {
                allowed: true,
                limit: tight_limit,
                remaining: remaining.saturating_sub(cost),
                retry_after: Wait::None,
                reset_after_ms,
            },
        }
    }

    /// Records `cost` units at `now` under `windows` without checking any limit: the effect of
    /// a decision already taken (by this server, or by the primary for a replica). Returns
    /// false, changing nothing, when the record would break the log's invariants.
    fn record(&mut self, now: Millis, windows: &[Window], cost: u64) -> bool {
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
        self.trim_before((now + 1).saturating_sub(keep));
        self.push(now, cost as u32); // cost <= MAX_LIMIT, checked by retention_recorded
        self.settle_shape();
        true
    }

    fn can_record(&self, now: Millis, windows: &[Window], cost: u64) -> bool {
        self.retention_recorded(now, windows, cost).is_some()
    }

    fn latest(&self) -> Millis {
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
        Wait::None => (0, 0),
        Wait::Ms(ms) => (1, ms),
        Wait::Never => (2, 0),
    };
    rank(a) > rank(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T0: Millis = 1_700_000_000_000;

    fn w(limit: u64, window_ms: u64) -> Window {
        Window { limit, window_ms }
    }

    /// The obviously-correct model: every allowed request in a list, sums by scanning, and the
    /// wait found by trying every instant at which a record leaves a window.
    #[derive(Default)]
    struct Naive {
        records: Vec<(Millis, u64)>,
        latest: Millis,
    }

    impl Naive {
        fn used(&self, now: Millis, window: u64) -> u64 {
            self.records
                .iter()
                .filter(|(t, _)| now < window || *t > now - window)
                .map(|(_, c)| c)
                .sum()
        }

        fn fits(&self, now: Millis, windows: &[Window], cost: u64) -> bool {
            windows
                .iter()
                .all(|x| self.used(now, x.window_ms) + cost <= x.limit)
        }

        fn acquire(&mut self, now: Millis, windows: &[Window], cost: u64) -> (bool, u64, Wait) {
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
            let mut candidates: Vec<Millis> = windows
                .iter()
                .flat_map(|x| self.records.iter().map(move |(t, _)| t + x.window_ms))
                .filter(|t| *t > now)
                .collect();
            candidates.sort();
            let at = candidates
                .into_iter()
                .find(|t| self.fits(*t, windows, cost))
                .unwrap();
            (false, remaining_before, Wait::Ms(at - now))
        }
    }

    fn run_table(windows: &[Window], rows: &[crate::algo::table::Row]) {
        crate::algo::table::run(SlidingLog::new(windows), windows, T0, rows);
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
        type Case = (Vec<Window>, Millis, Vec<(Millis, u64)>);
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
        records: Vec<(Millis, u64, u64)>,
    }

    impl Rule {
        fn record(&mut self, now: Millis, windows: &[Window], cost: u64) {
            let own = longest(windows);
            for r in &mut self.records {
                r.2 = r.2.max(own);
            }
            self.records.retain(|&(t, _, m)| t + m > now);
            self.records.push((now, cost, own));
        }

        fn used(&self, now: Millis, window: u64) -> u64 {
            self.records
                .iter()
                .filter(|(t, _, _)| now < window || *t > now - window)
                .map(|(_, c, _)| c)
                .sum()
        }
    }

    /// The records a log must hold: recording drops what no window still counts (what left
    /// the longest window, or a retention's, computed as the log's rule says), and a refund
    /// takes the newest units. The storage is what this checks.
    #[derive(Default)]
    struct Records(Vec<(Millis, u64)>, u64, Front);

    impl Records {
        fn record(&mut self, now: Millis, longest: u64, cost: u64) {
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
                let at = if back_in_time { now.saturating_sub(gap) } else { now + gap };
                now = now.max(at);
                let d = log.acquire(at, &windows, cost);
                let (allowed, remaining, wait) = naive.acquire(at, &windows, cost);
                prop_assert_eq!(d.allowed, allowed);
                prop_assert_eq!(d.remaining, remaining);
                prop_assert_eq!(d.retry_after, wait);
                if let Wait::Ms(ms) = wait {
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
            let mut run: Option<(usize, Millis)> = None;
            for (pick, gap, cost, back_in_time) in steps {
                let i = pick % pool.len();
                let windows = &pool[i];
                let at = if back_in_time { now.saturating_sub(gap) } else { now + gap };
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
            let mut calls: Vec<(u64, Millis)> = Vec::new();
            // What the model keeps, and what the log should keep with its one cutoff.
            let mut model: Vec<Millis> = Vec::new();
            let mut cut: Vec<Millis> = Vec::new();
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
                let kept: Vec<Millis> = log.records().map(|r| r.0).collect();
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
            let mut model: Vec<(Millis, u64)> = Vec::new();
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
                    let kept = model.2.empty_at(r.0).unwrap_or(0);
                    (r.0 + longest(&windows)).max(kept)
                });
                prop_assert_eq!(log.empty_at(), empty_at);
            }
        }
    }
}
