//! The counting semaphore behind `RL.ACQUIRE`, `RL.RELEASE` and `RL.EXTEND`: at most `limit`
//! units held at once, each acquisition holding its `cost` under a lease that ends at a
//! fixed time unless released or extended first.
//!
//! A lease that ends frees its units at exactly that time: a decision at `t` counts only the
//! leases that end after `t`, whatever the state still stores. Ended leases are dropped a
//! bounded number per call ([`PURGE_MAX`]), so no call frees an unbounded amount of memory,
//! and the count stays exact meanwhile.
//!
//! Layout (about 40 bytes per lease plus its id's own allocation):
//! - `slots`: a [`Slab`] of leases (id, end, cost, cached hash), 32 bytes each, with a free
//!   list, in pages that growing never moves;
//! - `index`: a hash [`Index`] from id to slot, 4 bytes a bucket, at most 4/5 full, in shards
//!   that are each resized alone (no call rehashes every lease);
//! - `chunks`: the slots ordered by `(end, slot)`, in sorted chunks of at most [`CHUNK`]
//!   entries (4 bytes each) with the units each chunk holds, so that the units held at `t`,
//!   the wait for a cost and the last end cost O(number of chunks + CHUNK) additions: about
//!   800 to 1,600 at the 100,000 leases a key may hold ([`MAX_LEASES`]).
//!
//! Ids the server makes are `<ms>-<seq>`: the decision time and a sequence within it,
//! strictly above the last one the key made (kept in the state, so in the RDB, the AOF and
//! on replicas: a promoted replica goes on from where the primary was). A new lease named
//! by its client with an id of that form counts as made: the last id made moves up to it.
//! Such an id is taken only for a time the server has reached (or as the very id the server
//! would make next), so every id of that form a key holds is at or below its last made one,
//! and the next id the server makes is held by no lease: it is made in O(1), never probed
//! for ([`Leases::next_id`]). Every way a lease comes in (a client's call, an effect from
//! the primary or the AOF, a persisted state) checks the same caps ([`Refusal`]).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use super::index::{Index, Slab};
use super::{Decision, Millis, Wait, MAX_TIMESTAMP};

/// The largest limit (and so the largest cost a lease may hold).
pub const MAX_LIMIT: u64 = 1_000_000_000;
/// The longest lease: 31 days.
pub const MAX_LEASE_MS: u64 = 31 * 24 * 3600 * 1000;
/// The most leases one key holds at once.
pub const MAX_LEASES: usize = 100_000;
/// The longest lease id, in bytes.
pub const MAX_ID_LEN: usize = 512;
/// Entries per chunk of the end order, at most.
const CHUNK: usize = 128;
/// Ended leases dropped per call, at most.
pub const PURGE_MAX: usize = 64;
/// A free slot in the free list's end.
const NONE: u32 = u32::MAX;
/// The sequence of a server-made id stays below this.
const SEQ_LIMIT: u64 = 1 << 63;

/// The parameters of one acquisition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub limit: u64,
    pub lease_ms: u64,
}

impl Params {
    pub fn valid(&self) -> bool {
        (1..=MAX_LIMIT).contains(&self.limit) && (1..=MAX_LEASE_MS).contains(&self.lease_ms)
    }
}

/// Whether `id` may name a lease: 1 to [`MAX_ID_LEN`] bytes.
pub fn valid_id(id: &[u8]) -> bool {
    (1..=MAX_ID_LEN).contains(&id.len())
}

/// One lease; a free slot has an empty id and links the free list through `end`.
#[derive(Clone, Debug)]
struct Slot {
    id: Box<[u8]>,
    end: Millis,
    cost: u32,
    hash: u32,
}

/// A run of the end order.
#[derive(Clone, Debug, Default)]
struct Chunk {
    slots: Vec<u32>,
    units: u64,
}

/// What an acquisition answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquired {
    pub decision: Decision,
    /// The lease held (made, or renewed when `renewed`); `None` when refused or for COST 0.
    pub id: Option<Vec<u8>>,
    pub renewed: bool,
}

/// Why a new lease cannot be added to a key, whoever asks (a client's call, an effect from
/// the primary or the AOF): the caps every state of the key keeps, so that what the
/// commands build the loader takes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The key holds [`MAX_LEASES`] leases already.
    Full,
    /// The id has the form of a server-made id (`<ms>-<seq>`) for a time the call has not
    /// reached, and is not the id the server would make next.
    IdAhead,
    /// A cost or an id out of range (an effect's: a client's are parsed in range).
    OutOfRange,
    /// No id is left to make at this time (2^63 a millisecond: not reached).
    NoIdLeft,
}

/// Why a persisted state was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

/// The semaphore of one key.
#[derive(Clone, Debug)]
pub struct Leases {
    limit: u64,
    latest: Millis,
    /// The last id made: `(ms, seq)`.
    last_id: (Millis, u64),
    /// Units of every stored lease, ended or not.
    total: u64,
    /// Stored leases, ended or not.
    count: usize,
    slots: Slab<Slot>,
    free: u32,
    /// The slots of the leases stored, by id.
    index: Index,
    chunks: Vec<Chunk>,
    /// Bytes the ids' allocations take, rounded to size classes.
    id_bytes: usize,
    hasher: RandomState,
}

/// Where the leases that have ended at some time stop in the end order.
struct Cut {
    units: u64,
    count: usize,
    chunk: usize,
    at: usize,
}

fn end_of(slots: &Slab<Slot>, s: u32) -> Millis {
    slots.get(s).map_or(0, |x| x.end)
}

fn cost_of(slots: &Slab<Slot>, s: u32) -> u64 {
    slots.get(s).map_or(0, |x| u64::from(x.cost))
}

fn hash_of(slots: &Slab<Slot>, s: u32) -> u32 {
    slots.get(s).map_or(0, |x| x.hash)
}

fn key_of(slots: &Slab<Slot>, s: u32) -> (Millis, u32) {
    (end_of(slots, s), s)
}

/// The parsed form of an id the server makes: `<ms>-<seq>`, canonical decimals.
pub fn server_form(id: &[u8]) -> Option<(Millis, u64)> {
    let dash = id.iter().position(|&b| b == b'-')?;
    let num = |d: &[u8]| -> Option<u64> {
        if d.is_empty() || d.len() > 20 || (d.len() > 1 && d[0] == b'0') {
            return None;
        }
        d.iter().try_fold(0u64, |v, &b| {
            b.is_ascii_digit()
                .then(|| v.checked_mul(10)?.checked_add(u64::from(b - b'0')))
                .flatten()
        })
    };
    let ms = num(id.get(..dash)?)?;
    let seq = num(id.get(dash + 1..)?)?;
    (ms <= MAX_TIMESTAMP && seq < SEQ_LIMIT).then_some((ms, seq))
}

/// The last id made that a persisted state implies: `last_id`, raised to the highest held
/// id of the server's form when that is above it and at most a millisecond past `latest`.
/// States written before a lease named that way counted as made may hold such ids; one
/// further ahead is left for [`Leases::from_parts`] to refuse.
pub fn implied_last_id(
    latest: Millis,
    last_id: (Millis, u64),
    leases: &[(Millis, u64, &[u8])],
) -> (Millis, u64) {
    leases
        .iter()
        .filter_map(|&(_, _, id)| server_form(id))
        .filter(|made| made.0 <= latest.saturating_add(1))
        .fold(last_id, Ord::max)
}

fn format_id((ms, seq): (Millis, u64)) -> Vec<u8> {
    format!("{ms}-{seq}").into_bytes()
}

/// The allocator's size class for `n` bytes, for what an id costs.
fn id_class(n: usize) -> usize {
    crate::algo::chunks::class_ceil(n)
}

impl Leases {
    pub fn new(p: &Params) -> Leases {
        Leases {
            limit: p.limit,
            latest: 0,
            last_id: (0, 0),
            total: 0,
            count: 0,
            slots: Slab::new(),
            free: NONE,
            index: Index::new(),
            chunks: Vec::new(),
            id_bytes: 0,
            hasher: RandomState::new(),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    pub fn latest(&self) -> Millis {
        self.latest
    }

    pub fn last_id(&self) -> (Millis, u64) {
        self.last_id
    }

    /// Leases stored, ended or not yet dropped included.
    pub fn stored(&self) -> usize {
        self.count
    }

    fn hash(&self, id: &[u8]) -> u32 {
        self.hasher.hash_one(id) as u32
    }

    /// The slot holding `id`.
    fn find(&self, id: &[u8]) -> Option<u32> {
        if self.index.is_empty() {
            return None;
        }
        let h = self.hash(id);
        let slots = &self.slots;
        self.index.find(h, |s| {
            slots.get(s).is_some_and(|x| x.hash == h && *x.id == *id)
        })
    }

    /// The chunk where `key` is or would go.
    fn chunk_for(&self, key: (Millis, u32)) -> usize {
        let slots = &self.slots;
        let i = self.chunks.partition_point(|c| {
            c.slots
                .last()
                .is_some_and(|&last| key_of(slots, last) < key)
        });
        i.min(self.chunks.len().saturating_sub(1))
    }

    fn order_insert(&mut self, s: u32) {
        let key = key_of(&self.slots, s);
        let cost = cost_of(&self.slots, s);
        if self.chunks.is_empty() {
            self.chunks.push(Chunk::default());
        }
        let c = self.chunk_for(key);
        let is_last = c + 1 == self.chunks.len();
        let slots = &self.slots;
        let Some(chunk) = self.chunks.get_mut(c) else {
            return;
        };
        let pos = chunk.slots.partition_point(|&x| key_of(slots, x) < key);
        chunk.units += cost;
        if chunk.slots.len() < CHUNK {
            chunk.slots.insert(pos, s);
            return;
        }
        // Full: an entry after the last chunk's end starts a new chunk (leases of one length
        // arrive in end order, and so fill their chunks); otherwise the chunk splits in two.
        let mut tail;
        if is_last && pos == CHUNK {
            tail = vec![s];
        } else {
            tail = chunk.slots.split_off(CHUNK / 2);
            match pos.checked_sub(CHUNK / 2) {
                Some(at) => tail.insert(at, s),
                None => chunk.slots.insert(pos, s),
            }
        }
        let units: u64 = tail.iter().map(|&x| cost_of(slots, x)).sum();
        chunk.units -= units;
        self.chunks.insert(c + 1, Chunk { slots: tail, units });
    }

    fn order_remove(&mut self, s: u32) {
        let key = key_of(&self.slots, s);
        let cost = cost_of(&self.slots, s);
        let c = self.chunk_for(key);
        let slots = &self.slots;
        let Some(chunk) = self.chunks.get_mut(c) else {
            return;
        };
        let pos = chunk.slots.partition_point(|&x| key_of(slots, x) < key);
        if chunk.slots.get(pos) != Some(&s) {
            return;
        }
        chunk.slots.remove(pos);
        chunk.units -= cost;
        let len = chunk.slots.len();
        if len == 0 {
            self.chunks.remove(c);
        } else if len < CHUNK / 4 {
            // Merge a sparse chunk into a neighbour that has room.
            let fits = |o: Option<&Chunk>| o.is_some_and(|o| o.slots.len() + len <= CHUNK);
            if c > 0 && fits(self.chunks.get(c - 1)) {
                let gone = self.chunks.remove(c);
                if let Some(prev) = self.chunks.get_mut(c - 1) {
                    prev.slots.extend_from_slice(&gone.slots);
                    prev.units += gone.units;
                }
            } else if fits(self.chunks.get(c + 1)) {
                let next = self.chunks.remove(c + 1);
                if let Some(chunk) = self.chunks.get_mut(c) {
                    chunk.slots.extend_from_slice(&next.slots);
                    chunk.units += next.units;
                }
            }
        }
    }

    /// The leases ended at `t` (end <= t): their units and number, and where the first
    /// lease still held at `t` sits.
    fn cut(&self, t: Millis) -> Cut {
        let slots = &self.slots;
        let mut cut = Cut {
            units: 0,
            count: 0,
            chunk: self.chunks.len(),
            at: 0,
        };
        for (i, ch) in self.chunks.iter().enumerate() {
            if ch.slots.last().is_some_and(|&l| end_of(slots, l) <= t) {
                cut.units += ch.units;
                cut.count += ch.slots.len();
                continue;
            }
            let at = ch.slots.partition_point(|&x| end_of(slots, x) <= t);
            for &x in ch.slots.get(..at).unwrap_or_default() {
                cut.units += cost_of(slots, x);
            }
            cut.count += at;
            cut.chunk = i;
            cut.at = at;
            break;
        }
        cut
    }

    /// Units held at `t`.
    pub fn held_at(&self, t: Millis) -> u64 {
        self.total - self.cut(t).units
    }

    /// Leases held at `t`.
    pub fn live_at(&self, t: Millis) -> usize {
        self.count - self.cut(t).count
    }

    /// When the last lease ends.
    fn last_end(&self) -> Option<Millis> {
        let last = self.chunks.last()?.slots.last()?;
        Some(end_of(&self.slots, *last))
    }

    /// When the key is back to empty: its last lease's end, and never before the
    /// millisecond after the last id it made (so that a key deleted and made again does not
    /// make that id again). `None` when that has passed at the latest time.
    pub fn empty_at(&self) -> Option<Millis> {
        let at = self
            .last_end()
            .unwrap_or(0)
            .max(self.last_id.0.saturating_add(1));
        (at > self.latest && (self.count > 0 || self.last_id != (0, 0))).then_some(at)
    }

    /// How long from `now` until `need` units held at `now` have ended, the cut at `now`
    /// being `cut`.
    fn wait_for(&self, now: Millis, cut: &Cut, need: u64) -> Wait {
        let slots = &self.slots;
        let mut freed = 0u64;
        for (i, ch) in self.chunks.iter().enumerate().skip(cut.chunk) {
            let from = if i == cut.chunk { cut.at } else { 0 };
            let rest = ch.slots.get(from..).unwrap_or_default();
            let units = if from == 0 {
                ch.units
            } else {
                rest.iter().map(|&x| cost_of(slots, x)).sum()
            };
            if freed + units < need {
                freed += units;
                continue;
            }
            for &x in rest {
                freed += cost_of(slots, x);
                if freed >= need {
                    return Wait::Ms(end_of(slots, x).saturating_sub(now));
                }
            }
        }
        Wait::Never
    }

    /// The answer to `cost` units under `limit` at `now` (not before the latest time),
    /// changing nothing.
    fn decide(&self, now: Millis, limit: u64, cost: u64) -> Decision {
        let cut = self.cut(now);
        let held = self.total - cut.units;
        let free = limit.saturating_sub(held);
        let reset_after_ms = self.empty_at().map_or(0, |at| at.saturating_sub(now));
        let mut d = Decision {
            allowed: true,
            limit,
            remaining: free,
            retry_after: Wait::None,
            reset_after_ms,
        };
        if cost > limit {
            d.allowed = false;
            d.retry_after = Wait::Never;
        } else if cost > free {
            d.allowed = false;
            d.retry_after = self.wait_for(now, &cut, held + cost - limit);
        } else {
            d.remaining = free - cost;
        }
        d
    }

    /// The answer to a `COST 0` call under the limit last used: units free now, changing
    /// nothing.
    pub fn peek(&self, now: Millis) -> Decision {
        self.decide(now.max(self.latest), self.limit, 0)
    }

    /// The answer to an acquisition of `cost` units under the limit last used (`RL.PEEK key
    /// COST n`): whether they are free at `now`, and if not when they will be; changing
    /// nothing.
    pub fn peek_cost(&self, now: Millis, cost: u64) -> Decision {
        self.decide(now.max(self.latest), self.limit, cost)
    }

    /// Whether the lease `id` is held at `now`.
    pub fn holds(&self, now: Millis, id: &[u8]) -> bool {
        let now = now.max(self.latest);
        self.find(id).is_some_and(|s| end_of(&self.slots, s) > now)
    }

    /// The answer an acquisition of `cost` under `p` would get at `now`, changing nothing.
    pub fn evaluate(&self, now: Millis, p: &Params, cost: u64, id: Option<&[u8]>) -> Decision {
        let now = now.max(self.latest);
        if cost > 0 && id.is_some_and(|id| self.holds(now, id)) {
            return self.decide(now, p.limit, 0);
        }
        self.decide(now, p.limit, cost)
    }

    /// Drops up to [`PURGE_MAX`] leases ended at `t`, earliest first.
    pub fn purge(&mut self, t: Millis) {
        let mut budget = PURGE_MAX;
        while budget > 0 {
            let Some(first) = self.chunks.first() else {
                break;
            };
            let s = match first.slots.first() {
                Some(&s) if end_of(&self.slots, s) <= t => s,
                _ => break,
            };
            self.remove_slot(s);
            budget -= 1;
        }
    }

    fn remove_slot(&mut self, s: u32) {
        self.order_remove(s);
        let slots = &self.slots;
        self.index
            .remove(hash_of(slots, s), s, |x| hash_of(slots, x));
        if let Some(slot) = self.slots.get_mut(s) {
            self.total -= u64::from(slot.cost);
            self.id_bytes -= id_class(slot.id.len());
            *slot = Slot {
                id: Box::default(),
                end: u64::from(self.free),
                cost: 0,
                hash: 0,
            };
            self.free = s;
            self.count -= 1;
        }
        if self.count == 0 {
            self.slots = Slab::new();
            self.free = NONE;
            self.index = Index::new();
            self.chunks = Vec::new();
        }
    }

    fn insert(&mut self, id: &[u8], end: Millis, cost: u64) {
        let hash = self.hash(id);
        let slot = Slot {
            id: id.into(),
            end,
            cost: u32::try_from(cost).unwrap_or(u32::MAX),
            hash,
        };
        self.total += u64::from(slot.cost);
        self.id_bytes += id_class(id.len());
        let s = match self.slots.get_mut(self.free) {
            Some(free) => {
                let s = self.free;
                self.free = u32::try_from(free.end).unwrap_or(NONE);
                *free = slot;
                s
            }
            None => self.slots.push(slot),
        };
        self.count += 1;
        let slots = &self.slots;
        self.index.insert(hash, s, |x| hash_of(slots, x));
        self.order_insert(s);
    }

    /// Moves lease `s` to end at `end`.
    fn set_end(&mut self, s: u32, end: Millis) {
        self.order_remove(s);
        if let Some(slot) = self.slots.get_mut(s) {
            slot.end = end;
        }
        self.order_insert(s);
    }

    /// The id the server makes next at `now` (not before the latest time): `<now>-0` once the
    /// clock has passed the last id made, else the one after it. Held by no lease (see the
    /// module docs); `None` when the sequence is used up (not reached).
    pub fn next_id(&self, now: Millis) -> Option<(Millis, u64)> {
        let now = now.max(self.latest);
        let (ms, seq) = self.last_id;
        if now > ms {
            Some((now, 0))
        } else if seq + 1 < SEQ_LIMIT {
            Some((ms, seq + 1))
        } else {
            // `ms` is `now` or `now + 1` (see `from_parts`): the next millisecond, if that
            // stays within one of the latest time.
            (ms <= now).then_some((ms + 1, 0))
        }
    }

    /// Whether a new lease may be named `id` at `now` (not before the latest time): any id
    /// not of the server's form; one of that form at or below the last made, for a time
    /// reached, or the very id the server would make next (what an effect carries).
    fn admits(&self, now: Millis, id: &[u8]) -> bool {
        match server_form(id) {
            None => true,
            Some(made) => made <= self.last_id || made.0 <= now || self.next_id(now) == Some(made),
        }
    }

    /// Checks that a lease can be named `id` at `now`: a lease held by that id is renewed
    /// (any id goes), any other must be in range and one the key admits (see
    /// [`Leases::admits`]). What a call checks before it decides: a bad id is an error
    /// whether or not units are free. Changes nothing.
    pub fn check_id(&self, now: Millis, id: &[u8]) -> Result<(), Refusal> {
        let now = now.max(self.latest);
        if self.holds(now, id) {
            Ok(())
        } else {
            self.check_new_id(now, id)
        }
    }

    /// A new lease's id: in range, and one the key admits.
    fn check_new_id(&self, now: Millis, id: &[u8]) -> Result<(), Refusal> {
        if !valid_id(id) {
            Err(Refusal::OutOfRange)
        } else if !self.admits(now, id) {
            Err(Refusal::IdAhead)
        } else {
            Ok(())
        }
    }

    /// Room for a new lease at `now` (not before the latest time): fewer than the most a
    /// key holds, and an id to make when `makes_id`.
    fn check_room(&self, now: Millis, makes_id: bool) -> Result<(), Refusal> {
        if makes_id && self.next_id(now).is_none() {
            Err(Refusal::NoIdLeft)
        } else if self.live_at(now) >= MAX_LEASES {
            Err(Refusal::Full)
        } else {
            Ok(())
        }
    }

    /// Checks that a lease of `cost` named `id` (one the server makes when `None`) can be
    /// granted at `now` once its units are free, against the key's caps: a renewal of a
    /// lease held always can; a new one needs a cost and an id in range, an id the key
    /// admits, and room (see [`Refusal`]). Changes nothing.
    pub fn check_grant(&self, now: Millis, cost: u64, id: Option<&[u8]>) -> Result<(), Refusal> {
        let now = now.max(self.latest);
        if cost == 0 {
            return Ok(());
        }
        if let Some(id) = id {
            if self.holds(now, id) {
                return Ok(());
            }
            self.check_new_id(now, id)?;
        }
        if cost > MAX_LIMIT {
            return Err(Refusal::OutOfRange);
        }
        self.check_room(now, id.is_none())
    }

    /// Adds lease `id` of `cost` ending at `end`, once its checks have passed at `now`:
    /// `ended`, the slot of an ended lease of the same id, goes, and an id of the server's
    /// form becomes the last made when it is above it.
    fn grant(&mut self, now: Millis, id: &[u8], cost: u64, end: Millis, ended: Option<u32>) {
        if let Some(s) = ended {
            self.remove_slot(s);
        }
        if let Some(made) = server_form(id) {
            self.last_id = self.last_id.max(made);
        }
        self.insert(id, end, cost);
        self.latest = now;
    }

    /// Takes `cost` units under `p` at `now` for the lease `id` (one the server makes when
    /// `None`), when they are free; the same `id` while its lease is held renews it to
    /// `lease_ms` from now instead, taking nothing more. COST 0 changes nothing.
    pub fn acquire(
        &mut self,
        now: Millis,
        p: &Params,
        cost: u64,
        id: Option<&[u8]>,
    ) -> Result<Acquired, Refusal> {
        let now = now.max(self.latest);
        let held = id.and_then(|id| self.find(id));
        if let Some(s) = held {
            if end_of(&self.slots, s) > now && cost > 0 {
                self.set_end(s, now.saturating_add(p.lease_ms));
                self.latest = now;
                self.limit = p.limit;
                self.purge(now);
                return Ok(Acquired {
                    decision: self.decide(now, p.limit, 0),
                    id: id.map(<[u8]>::to_vec),
                    renewed: true,
                });
            }
        }
        // An id the key cannot take is bad input, whether or not the units are free.
        if let Some(id) = id.filter(|_| cost > 0) {
            self.check_new_id(now, id)?;
        }
        let decision = self.decide(now, p.limit, cost);
        if !decision.allowed || cost == 0 {
            return Ok(Acquired {
                decision,
                id: None,
                renewed: false,
            });
        }
        // Allowed: the cost is within the limit, so in range.
        self.check_room(now, id.is_none())?;
        let id = match id {
            Some(id) => id.to_vec(),
            None => format_id(self.next_id(now).ok_or(Refusal::NoIdLeft)?),
        };
        self.grant(now, &id, cost, now.saturating_add(p.lease_ms), held);
        self.limit = p.limit;
        self.purge(now);
        let decision = Decision {
            reset_after_ms: self.empty_at().map_or(0, |at| at - now),
            ..decision
        };
        Ok(Acquired {
            decision,
            id: Some(id),
            renewed: false,
        })
    }

    /// Checks that [`Leases::record`] would take an acquisition decided elsewhere, changing
    /// nothing: a renewal of a lease held at `now`, or a new lease within the key's caps.
    pub fn check_record(&self, now: Millis, cost: u64, id: &[u8]) -> Result<(), Refusal> {
        self.recorded(now, cost, id).map(|_| ())
    }

    /// What [`Leases::record`] does at `now` (not before the latest time): `(true, slot)` to
    /// renew the lease held in that slot, `(false, slot)` to add one (in place of the ended
    /// lease of the same id in `slot`, if any), or why it cannot.
    fn recorded(&self, now: Millis, cost: u64, id: &[u8]) -> Result<(bool, Option<u32>), Refusal> {
        if cost == 0 {
            // An effect records something: a grant carries its cost.
            return Err(Refusal::OutOfRange);
        }
        let now = now.max(self.latest);
        match self.find(id) {
            Some(s) if end_of(&self.slots, s) > now => Ok((true, Some(s))),
            ended => {
                self.check_new_id(now, id)?;
                if cost > MAX_LIMIT {
                    return Err(Refusal::OutOfRange);
                }
                self.check_room(now, false)?;
                Ok((false, ended))
            }
        }
    }

    /// Records an acquisition decided elsewhere (by the primary, or read from the AOF):
    /// lease `id` holds `cost` until `now + lease_ms`, renewed when it is held (its cost then
    /// unused, as for the call that renewed it), whatever the limit. The same caps as a
    /// client's call ([`Leases::check_record`]): refused, changing nothing, beyond them.
    pub fn record(&mut self, now: Millis, p: &Params, cost: u64, id: &[u8]) -> Result<(), Refusal> {
        let (renewed, slot) = self.recorded(now, cost, id)?;
        let now = now.max(self.latest);
        let end = now.saturating_add(p.lease_ms);
        match (renewed, slot) {
            (true, Some(s)) => self.set_end(s, end),
            (_, ended) => self.grant(now, id, cost, end, ended),
        }
        self.latest = now;
        self.limit = p.limit;
        self.purge(now);
        Ok(())
    }

    /// Frees the lease `id` at `now`; `None` when it is not held then (it has ended or
    /// never existed), changing nothing.
    pub fn release(&mut self, now: Millis, id: &[u8]) -> Option<Decision> {
        let now = now.max(self.latest);
        let s = self.find(id)?;
        if end_of(&self.slots, s) <= now {
            return None;
        }
        self.remove_slot(s);
        self.latest = now;
        self.purge(now);
        Some(self.decide(now, self.limit, 0))
    }

    /// Makes the lease `id` end `lease_ms` after `now`; `None` when it is not held then.
    pub fn extend(&mut self, now: Millis, id: &[u8], lease_ms: u64) -> Option<Decision> {
        let now = now.max(self.latest);
        let s = self.find(id)?;
        if end_of(&self.slots, s) <= now {
            return None;
        }
        self.set_end(s, now.saturating_add(lease_ms));
        self.latest = now;
        self.purge(now);
        Some(self.decide(now, self.limit, 0))
    }

    /// The leases held after the latest time, `(end, cost, id)` ordered by end then id:
    /// the canonical content of the state.
    pub fn leases(&self) -> Vec<(Millis, u64, &[u8])> {
        let mut out: Vec<(Millis, u64, &[u8])> = self
            .slots
            .iter()
            .filter(|s| !s.id.is_empty() && s.end > self.latest)
            .map(|s| (s.end, u64::from(s.cost), &*s.id))
            .collect();
        out.sort_unstable_by(|a, b| (a.0, a.2).cmp(&(b.0, b.2)));
        out
    }

    /// Rebuilds a state from its parts, checking what a persisted one must satisfy: every
    /// lease valid and ending after `latest`, ids distinct, ordered by end then id.
    pub fn from_parts(
        limit: u64,
        latest: Millis,
        last_id: (Millis, u64),
        leases: &[(Millis, u64, &[u8])],
    ) -> Result<Leases, Corrupt> {
        if !(1..=MAX_LIMIT).contains(&limit) || latest > MAX_TIMESTAMP {
            return Err(Corrupt("limit or time out of range"));
        }
        if leases.len() > MAX_LEASES {
            return Err(Corrupt("too many leases"));
        }
        if last_id.0 > latest.saturating_add(1) || last_id.1 >= SEQ_LIMIT {
            return Err(Corrupt("last id out of range"));
        }
        let mut l = Leases::new(&Params { limit, lease_ms: 1 });
        l.latest = latest;
        l.last_id = last_id;
        let mut prev: Option<(Millis, &[u8])> = None;
        for &(end, cost, id) in leases {
            if end <= latest || end > latest.saturating_add(MAX_LEASE_MS) {
                return Err(Corrupt("a lease ends out of range"));
            }
            if cost == 0 || cost > MAX_LIMIT || !valid_id(id) {
                return Err(Corrupt("a lease is out of range"));
            }
            if prev.is_some_and(|p| p >= (end, id)) {
                return Err(Corrupt("leases out of order"));
            }
            if l.find(id).is_some() {
                return Err(Corrupt("an id is held twice"));
            }
            if server_form(id).is_some_and(|made| made > last_id) {
                return Err(Corrupt(
                    "a lease id of the server's form is above the last made",
                ));
            }
            prev = Some((end, id));
            l.insert(id, end, cost);
        }
        if l.count == 0 && last_id == (0, 0) {
            return Err(Corrupt("an empty state"));
        }
        Ok(l)
    }

    /// Bytes held on the heap, each allocation rounded to its size class.
    pub fn heap_size(&self) -> usize {
        use crate::algo::chunks::class_ceil;
        let slots = self.slots.heap_size();
        let table = self.index.heap_size();
        let chunks = class_ceil(self.chunks.capacity() * std::mem::size_of::<Chunk>());
        let runs: usize = self
            .chunks
            .iter()
            .map(|c| class_ceil(c.slots.capacity() * 4))
            .sum();
        slots + table + chunks + runs + self.id_bytes
    }

    /// Heap allocations held.
    pub fn allocations(&self) -> usize {
        1 + self.slots.allocations() + self.index.allocations() + self.chunks.len() + self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T0: Millis = 1_700_000_000_000;

    fn p(limit: u64, lease_ms: u64) -> Params {
        Params { limit, lease_ms }
    }

    /// The obvious semaphore: a list of leases with their ends.
    #[derive(Debug, Clone)]
    struct Model {
        latest: Millis,
        limit: u64,
        leases: Vec<(Vec<u8>, Millis, u64)>,
    }

    impl Model {
        fn held(&self, t: Millis) -> u64 {
            self.leases.iter().filter(|l| l.1 > t).map(|l| l.2).sum()
        }

        fn find(&self, id: &[u8], t: Millis) -> Option<usize> {
            self.leases.iter().position(|l| l.0 == id && l.1 > t)
        }

        fn wait(&self, t: Millis, limit: u64, cost: u64) -> Wait {
            if cost > limit {
                return Wait::Never;
            }
            let mut ends: Vec<_> = self.leases.iter().filter(|l| l.1 > t).collect();
            ends.sort_by_key(|l| l.1);
            let mut held = self.held(t);
            if held + cost <= limit {
                return Wait::None;
            }
            for l in ends {
                held -= l.2;
                if held + cost <= limit {
                    return Wait::Ms(l.1 - t);
                }
            }
            Wait::Never
        }

        /// (allowed, remaining, wait) and the id taken.
        fn acquire(
            &mut self,
            now: Millis,
            p: &Params,
            cost: u64,
            id: &[u8],
        ) -> (bool, u64, Wait, bool) {
            let now = now.max(self.latest);
            self.leases.retain(|l| l.1 > now);
            if let Some(i) = self.find(id, now) {
                self.leases[i].1 = now + p.lease_ms;
                self.latest = now;
                self.limit = p.limit;
                let free = p.limit.saturating_sub(self.held(now));
                return (true, free, Wait::None, true);
            }
            let free = p.limit.saturating_sub(self.held(now));
            let wait = self.wait(now, p.limit, cost);
            if wait != Wait::None {
                return (false, free, wait, false);
            }
            self.leases.push((id.to_vec(), now + p.lease_ms, cost));
            self.latest = now;
            self.limit = p.limit;
            (true, free - cost, Wait::None, false)
        }
    }

    #[test]
    fn counts_units_until_their_lease_ends_exactly() {
        let mut l = Leases::new(&p(2, 1000));
        let a = l.acquire(T0, &p(2, 1000), 1, None).unwrap();
        assert_eq!(a.decision.as_reply(), [1, 2, 1, 0, 1000]);
        assert_eq!(a.id.as_deref(), Some(&b"1700000000000-0"[..]));
        let b = l.acquire(T0 + 10, &p(2, 1000), 1, None).unwrap();
        assert_eq!(b.id.as_deref(), Some(&b"1700000000010-0"[..]));
        let c = l.acquire(T0 + 20, &p(2, 1000), 1, None).unwrap();
        assert_eq!(c.decision.as_reply(), [0, 2, 0, 980, 990]);
        assert_eq!(c.id, None);
        // At 999 the first lease is still held; at 1000 it has ended.
        assert!(
            !l.acquire(T0 + 999, &p(2, 1000), 1, None)
                .unwrap()
                .decision
                .allowed
        );
        let d = l.acquire(T0 + 1000, &p(2, 1000), 1, None).unwrap();
        assert_eq!(d.decision.as_reply(), [1, 2, 0, 0, 1000]);
        // Too big ever.
        let e = l.acquire(T0 + 1000, &p(2, 1000), 3, None).unwrap();
        assert_eq!(e.decision.retry_after, Wait::Never);
    }

    #[test]
    fn the_same_id_renews_instead_of_taking_another_slot() {
        let mut l = Leases::new(&p(1, 1000));
        assert!(
            l.acquire(T0, &p(1, 1000), 1, Some(b"job"))
                .unwrap()
                .decision
                .allowed
        );
        let again = l.acquire(T0 + 500, &p(1, 1000), 1, Some(b"job")).unwrap();
        assert!(again.renewed && again.decision.allowed);
        assert_eq!(again.decision.as_reply(), [1, 1, 0, 0, 1000]);
        // The renewal moved the end to 1500.
        assert!(
            !l.acquire(T0 + 1499, &p(1, 1000), 1, Some(b"other"))
                .unwrap()
                .decision
                .allowed
        );
        assert!(
            l.acquire(T0 + 1500, &p(1, 1000), 1, Some(b"other"))
                .unwrap()
                .decision
                .allowed
        );
    }

    #[test]
    fn release_and_extend() {
        let mut l = Leases::new(&p(3, 1000));
        l.acquire(T0, &p(3, 1000), 2, Some(b"a")).unwrap();
        l.acquire(T0, &p(3, 1000), 1, Some(b"b")).unwrap();
        assert_eq!(
            l.release(T0 + 1, b"a").unwrap().as_reply(),
            [1, 3, 2, 0, 999]
        );
        assert_eq!(l.release(T0 + 1, b"a"), None);
        assert_eq!(l.release(T0 + 1, b"nope"), None);
        assert_eq!(
            l.extend(T0 + 2, b"b", 5000).unwrap().as_reply(),
            [1, 3, 2, 0, 5000]
        );
        assert_eq!(l.extend(T0 + 5002, b"b", 5000), None);
        assert_eq!(l.peek(T0 + 5001).as_reply(), [1, 3, 2, 0, 1]);
        assert_eq!(l.peek(T0 + 5002).as_reply(), [1, 3, 3, 0, 0]);
        assert_eq!(l.empty_at(), Some(T0 + 5002));
    }

    #[test]
    fn server_ids_never_repeat_and_are_never_held() {
        let mut l = Leases::new(&p(10, 1000));
        // A client's id of the server's form for a time not reached is refused; one for a
        // time reached counts as made.
        let ahead = l.acquire(T0, &p(10, 1000), 1, Some(b"1700000000005-0"));
        assert_eq!(ahead, Err(Refusal::IdAhead));
        l.acquire(T0, &p(10, 1000), 1, Some(b"1700000000000-3"))
            .unwrap();
        assert_eq!(l.last_id(), (T0, 3));
        let ids: Vec<_> = [0, 0, 5, 5, 3]
            .iter()
            .map(|&t| {
                l.acquire(T0 + t, &p(10, 1000), 1, None)
                    .unwrap()
                    .id
                    .unwrap()
            })
            .collect();
        let ids: Vec<_> = ids.iter().map(|i| String::from_utf8_lossy(i)).collect();
        assert_eq!(
            ids,
            [
                "1700000000000-4",
                "1700000000000-5",
                "1700000000005-0",
                "1700000000005-1",
                "1700000000005-2"
            ]
        );
        // At the end of a millisecond's sequence, the next id is the next millisecond's
        // first: the only id of that millisecond the key admits before it is reached.
        let mut l = Leases::new(&p(10, 1000));
        let last = format!("{T0}-{}", SEQ_LIMIT - 1);
        l.acquire(T0, &p(10, 1000), 1, Some(last.as_bytes()))
            .unwrap();
        assert_eq!(l.next_id(T0), Some((T0 + 1, 0)));
        let second = format!("{}-1", T0 + 1);
        let refused = l.acquire(T0, &p(10, 1000), 1, Some(second.as_bytes()));
        assert_eq!(refused, Err(Refusal::IdAhead));
        // An effect carrying the id the server made is taken, and counts as made.
        let mut replica = l.clone();
        let made = l.acquire(T0, &p(10, 1000), 1, None).unwrap().id.unwrap();
        assert_eq!(made, format!("{}-0", T0 + 1).into_bytes());
        assert_eq!(replica.record(T0, &p(10, 1000), 1, &made), Ok(()));
        assert_eq!(replica.last_id(), l.last_id());
        assert_eq!(replica.next_id(T0), Some((T0 + 1, 1)));
        // What the server made stays made once released, on both.
        l.release(T0, &made).unwrap();
        replica.release(T0, &made).unwrap();
        assert_eq!(l.next_id(T0 + 1), Some((T0 + 1, 1)));
        assert_eq!(replica.next_id(T0 + 1), Some((T0 + 1, 1)));
        assert_eq!(server_form(b"1-0"), Some((1, 0)));
        for bad in [
            &b"01-0"[..],
            b"1-01",
            b"-1",
            b"1-",
            b"1-2-3",
            b"a-1",
            b"1-9223372036854775808",
        ] {
            assert_eq!(server_form(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_key_outlives_its_last_made_id_by_a_millisecond() {
        let mut l = Leases::new(&p(1, 1000));
        let id = l.acquire(T0, &p(1, 1000), 1, None).unwrap().id.unwrap();
        l.release(T0, &id).unwrap();
        assert_eq!(l.empty_at(), Some(T0 + 1));
    }

    #[test]
    fn many_leases_split_and_merge_chunks() {
        let mut l = Leases::new(&p(100_000, 1000));
        for i in 0..5000u64 {
            let id = format!("id{i}");
            let d = l.acquire(
                T0 + i % 7,
                &p(100_000, 1000 + (i * 37) % 1000),
                1,
                Some(id.as_bytes()),
            );
            assert!(d.unwrap().decision.allowed);
        }
        assert_eq!(l.live_at(T0 + 6), 5000);
        for i in (0..5000u64).step_by(2) {
            assert!(l.release(T0 + 6, format!("id{i}").as_bytes()).is_some());
        }
        assert_eq!(l.live_at(T0 + 6), 2500);
        assert!(l.chunks.iter().all(|c| !c.slots.is_empty()));
        // Everything ends by 2006: purged a bounded amount per call, counted exactly.
        assert_eq!(l.peek(T0 + 2006).remaining, 100_000);
        l.purge(T0 + 2006);
        assert_eq!(l.stored(), 2500 - PURGE_MAX);
    }

    #[test]
    fn refuses_beyond_the_most_leases() {
        let mut l = Leases::new(&p(MAX_LIMIT, 1000));
        for i in 0..MAX_LEASES {
            l.acquire(T0, &p(MAX_LIMIT, 1000), 1, Some(i.to_string().as_bytes()))
                .unwrap();
        }
        assert_eq!(
            l.acquire(T0, &p(MAX_LIMIT, 1000), 1, None),
            Err(Refusal::Full)
        );
        // Beside each id (its 16-byte pointer in the slot and its own allocation): at most
        // 48 bytes a lease.
        let ids = l.id_bytes + 16 * l.slots.capacity();
        let per_lease = (l.heap_size() - ids) / MAX_LEASES;
        assert!(per_lease <= 48, "{per_lease}");
    }

    #[test]
    fn round_trips_through_its_parts() {
        let mut l = Leases::new(&p(5, 1000));
        l.acquire(T0, &p(5, 1000), 2, Some(b"x")).unwrap();
        l.acquire(T0 + 3, &p(5, 2000), 1, None).unwrap();
        let parts = l.leases();
        let back = Leases::from_parts(l.limit(), l.latest(), l.last_id(), &parts).unwrap();
        assert_eq!(back.leases(), parts);
        assert_eq!(back.peek(T0 + 3), l.peek(T0 + 3));
        let mut twice = parts.clone();
        twice.push((T0 + 9000, 1, b"x"));
        assert!(Leases::from_parts(5, l.latest(), l.last_id(), &twice).is_err());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Acquire {
            dt: u64,
            limit: u64,
            lease: u64,
            cost: u64,
            id: Option<u8>,
        },
        Release {
            dt: u64,
            id: u8,
        },
        Extend {
            dt: u64,
            id: u8,
            lease: u64,
        },
        Peek {
            dt: u64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..40, 1u64..8, 1u64..200, 0u64..4, prop::option::of(0u8..12))
                .prop_map(|(dt, limit, lease, cost, id)| Op::Acquire { dt, limit, lease, cost, id }),
            2 => (0u64..40, 0u8..12).prop_map(|(dt, id)| Op::Release { dt, id }),
            1 => (0u64..40, 0u8..12, 1u64..200).prop_map(|(dt, id, lease)| Op::Extend { dt, id, lease }),
            1 => (0u64..40).prop_map(|dt| Op::Peek { dt }),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_list_of_leases(ops in prop::collection::vec(op(), 1..200)) {
            let mut l = Leases::new(&p(1, 1));
            let mut m = Model { latest: 0, limit: 1, leases: Vec::new() };
            let mut t = T0;
            let mut made = std::collections::HashSet::new();
            for op in ops {
                match op {
                    Op::Acquire { dt, limit, lease, cost, id } => {
                        t += dt;
                        let name = id.map(|i| vec![b'c', i]);
                        let got = l.acquire(t, &p(limit, lease), cost, name.as_deref()).unwrap();
                        if cost == 0 {
                            prop_assert!(got.id.is_none());
                            prop_assert_eq!(got.decision.remaining, limit.saturating_sub(m.held(t.max(m.latest))));
                            continue;
                        }
                        let mid = got.id.clone().unwrap_or_default();
                        let key = name.clone().unwrap_or(mid.clone());
                        let (allowed, remaining, wait, renewed) = if name.is_none() && got.id.is_none() {
                            let now = t.max(m.latest);
                            let free = limit.saturating_sub(m.held(now));
                            (false, free, m.wait(now, limit, cost), false)
                        } else {
                            m.acquire(t, &p(limit, lease), cost, &key)
                        };
                        prop_assert_eq!(got.decision.allowed, allowed);
                        prop_assert_eq!(got.decision.remaining, remaining);
                        prop_assert_eq!(got.decision.retry_after, wait);
                        prop_assert_eq!(got.renewed, renewed);
                        if allowed && name.is_none() && !renewed {
                            prop_assert!(made.insert(mid), "an id made twice");
                        }
                    }
                    Op::Release { dt, id } => {
                        t += dt;
                        let now = t.max(m.latest);
                        let got = l.release(t, &[b'c', id]);
                        match m.find(&[b'c', id], now) {
                            Some(i) => {
                                m.leases.remove(i);
                                m.latest = now;
                                let got = got.unwrap();
                                prop_assert_eq!(got.remaining, m.limit.saturating_sub(m.held(now)));
                            }
                            None => prop_assert!(got.is_none()),
                        }
                    }
                    Op::Extend { dt, id, lease } => {
                        t += dt;
                        let now = t.max(m.latest);
                        let got = l.extend(t, &[b'c', id], lease);
                        match m.find(&[b'c', id], now) {
                            Some(i) => {
                                m.leases[i].1 = now + lease;
                                m.latest = now;
                                prop_assert!(got.is_some());
                            }
                            None => prop_assert!(got.is_none()),
                        }
                    }
                    Op::Peek { dt } => {
                        let now = (t + dt).max(m.latest);
                        let got = l.peek(t + dt);
                        prop_assert_eq!(got.remaining, m.limit.saturating_sub(m.held(now)));
                    }
                }
                let now = t.max(m.latest);
                prop_assert_eq!(l.held_at(now), m.held(now));
                let last = m.leases.iter().filter(|x| x.1 > now).map(|x| x.1).max();
                if let Some(last) = last {
                    prop_assert!(l.empty_at().unwrap() >= last);
                }
                // The canonical parts rebuild the same state.
                let parts = l.leases();
                if !parts.is_empty() {
                    let back = Leases::from_parts(l.limit(), l.latest(), l.last_id(), &parts).unwrap();
                    prop_assert_eq!(back.leases(), parts);
                }
            }
        }

        #[test]
        fn record_follows_acquire(ops in prop::collection::vec((0u64..30, 1u64..5, 1u64..100, 1u64..3, prop::option::of(0u8..6)), 1..100)) {
            // A replica applying each grant as recorded ends in the same state.
            let mut primary = Leases::new(&p(1, 1));
            let mut replica = Leases::new(&p(1, 1));
            let mut t = T0;
            for (dt, limit, lease, cost, id) in ops {
                t += dt;
                let name = id.map(|i| vec![b'c', i]);
                let got = primary.acquire(t, &p(limit, lease), cost, name.as_deref()).unwrap();
                if let Some(id) = got.id {
                    let at = primary.latest();
                    prop_assert_eq!(replica.record(at, &p(limit, lease), cost, &id), Ok(()));
                }
                prop_assert_eq!(primary.leases(), replica.leases());
                prop_assert_eq!(primary.last_id(), replica.last_id());
            }
        }
    }
}
