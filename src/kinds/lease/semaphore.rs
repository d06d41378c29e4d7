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
use crate::core::{Decision, Duration, Instant, Wait, MAX_TIMESTAMP};

/// The largest limit (and so the largest cost a lease may hold).
pub const MAX_LIMIT: u64 = 1_000_000_000;
/// The longest lease: 31 days.
pub const MAX_LEASE_MS: u64 = 31 * 24 * 3600 * 1000;
/// The most leases one key holds at once.
pub const MAX_LEASES: usize = 100_000;
/// The longest lease id, in bytes.
pub const MAX_ID_LEN: usize = 512;
/// Entries per chunk of the end order, at most.
pub(super) const CHUNK: usize = 128;
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
pub(super) struct Slot {
    pub(super) id: Box<[u8]>,
    pub(super) end: Instant,
    pub(super) cost: u32,
    pub(super) hash: u32,
}

/// A run of the end order.
#[derive(Clone, Debug, Default)]
pub(super) struct Chunk {
    pub(super) slots: Vec<u32>,
    pub(super) units: u64,
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
    /// No id is left to make at this time: 2^63 a millisecond (not reached), or none
    /// after the last millisecond of year 9999 (the largest `NOW`).
    NoIdLeft,
}

/// Why a persisted state was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

/// The semaphore of one key.
#[derive(Clone, Debug)]
pub struct Leases {
    pub(super) limit: u64,
    pub(super) latest: Instant,
    /// The last id made: `(ms, seq)`.
    pub(super) last_id: (Instant, u64),
    /// Units of every stored lease, ended or not.
    pub(super) total: u64,
    /// Stored leases, ended or not.
    pub(super) count: usize,
    pub(super) slots: Slab<Slot>,
    pub(super) free: u32,
    /// The slots of the leases stored, by id.
    pub(super) index: Index,
    pub(super) chunks: Vec<Chunk>,
    /// Bytes the ids' allocations take, rounded to size classes.
    pub(super) id_bytes: usize,
    pub(super) hasher: RandomState,
}

/// Where the leases that have ended at some time stop in the end order.
pub(super) struct Cut {
    pub(super) units: u64,
    pub(super) count: usize,
    pub(super) chunk: usize,
    pub(super) at: usize,
}

pub(super) fn end_of(slots: &Slab<Slot>, s: u32) -> Instant {
    slots.get(s).map_or(Instant::EPOCH, |x| x.end)
}

pub(super) fn cost_of(slots: &Slab<Slot>, s: u32) -> u64 {
    slots.get(s).map_or(0, |x| u64::from(x.cost))
}

pub(super) fn hash_of(slots: &Slab<Slot>, s: u32) -> u32 {
    slots.get(s).map_or(0, |x| x.hash)
}

pub(super) fn key_of(slots: &Slab<Slot>, s: u32) -> (Instant, u32) {
    (end_of(slots, s), s)
}

/// The parsed form of an id the server makes: `<ms>-<seq>`, canonical decimals.
pub fn server_form(id: &[u8]) -> Option<(Instant, u64)> {
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
    let ms = Instant::from_ms(num(id.get(..dash)?)?);
    let seq = num(id.get(dash + 1..)?)?;
    (ms <= MAX_TIMESTAMP && seq < SEQ_LIMIT).then_some((ms, seq))
}

/// The last id made that a persisted state implies: `last_id`, raised to the highest held
/// id of the server's form when that is above it and at most a millisecond past `latest`.
/// States written before a lease named that way counted as made may hold such ids; one
/// further ahead is left for [`Leases::from_parts`] to refuse.
pub fn implied_last_id(
    latest: Instant,
    last_id: (Instant, u64),
    leases: &[(Instant, u64, &[u8])],
) -> (Instant, u64) {
    leases
        .iter()
        .filter_map(|&(_, _, id)| server_form(id))
        .filter(|made| made.0 <= latest.saturating_add(Duration::MS))
        .fold(last_id, Ord::max)
}

fn format_id((ms, seq): (Instant, u64)) -> Vec<u8> {
    format!("{ms}-{seq}").into_bytes()
}

/// The allocator's size class for `n` bytes, for what an id costs.
fn id_class(n: usize) -> usize {
    crate::core::chunks::class_ceil(n)
}

impl Leases {
    pub fn new(p: &Params) -> Leases {
        Leases {
            limit: p.limit,
            latest: Instant::EPOCH,
            last_id: (Instant::EPOCH, 0),
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

    pub fn latest(&self) -> Instant {
        self.latest
    }

    pub fn last_id(&self) -> (Instant, u64) {
        self.last_id
    }

    /// Leases stored, ended or not yet dropped included.
    pub fn stored(&self) -> usize {
        self.count
    }

    pub(super) fn hash(&self, id: &[u8]) -> u32 {
        self.hasher.hash_one(id) as u32
    }

    /// The slot holding `id`.
    pub(super) fn find(&self, id: &[u8]) -> Option<u32> {
        if self.index.is_empty() {
            return None;
        }
        let h = self.hash(id);
        let slots = &self.slots;
        self.index.find(h, |s| {
            slots.get(s).is_some_and(|x| x.hash == h && *x.id == *id)
        })
    }

    /// The answer to `cost` units under `limit` at `now` (not before the latest time),
    /// changing nothing.
    pub(super) fn decide(&self, now: Instant, limit: u64, cost: u64) -> Decision {
        let cut = self.cut(now);
        let held = self.total - cut.units;
        let free = limit.saturating_sub(held);
        let reset_after = self.empty_at().map_or(Duration::ZERO, |at| at.since(now));
        let mut d = Decision {
            allowed: true,
            limit,
            remaining: free,
            retry_after: Wait::None,
            reset_after,
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
    pub fn peek(&self, now: Instant) -> Decision {
        self.decide(now.max(self.latest), self.limit, 0)
    }

    /// The answer to an acquisition of `cost` units under the limit last used (`RL.PEEK key
    /// COST n`): whether they are free at `now`, and if not when they will be; changing
    /// nothing.
    pub fn peek_cost(&self, now: Instant, cost: u64) -> Decision {
        self.decide(now.max(self.latest), self.limit, cost)
    }

    /// Whether the lease `id` is held at `now`.
    pub fn holds(&self, now: Instant, id: &[u8]) -> bool {
        let now = now.max(self.latest);
        self.find(id).is_some_and(|s| end_of(&self.slots, s) > now)
    }

    /// The answer an acquisition of `cost` under `p` would get at `now`, changing nothing.
    pub fn evaluate(&self, now: Instant, p: &Params, cost: u64, id: Option<&[u8]>) -> Decision {
        let now = now.max(self.latest);
        if cost > 0 && id.is_some_and(|id| self.holds(now, id)) {
            return self.decide(now, p.limit, 0);
        }
        self.decide(now, p.limit, cost)
    }

    /// Drops up to [`PURGE_MAX`] leases ended at `t`, earliest first.
    pub fn purge(&mut self, t: Instant) {
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

    pub(super) fn remove_slot(&mut self, s: u32) {
        self.order_remove(s);
        let slots = &self.slots;
        self.index
            .remove(hash_of(slots, s), s, |x| hash_of(slots, x));
        if let Some(slot) = self.slots.get_mut(s) {
            self.total -= u64::from(slot.cost);
            self.id_bytes -= id_class(slot.id.len());
            *slot = Slot {
                id: Box::default(),
                // A free slot's end holds the next free slot.
                end: Instant::from_ms(u64::from(self.free)),
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

    pub(super) fn insert(&mut self, id: &[u8], end: Instant, cost: u64) {
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
                self.free = u32::try_from(free.end.ms()).unwrap_or(NONE);
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
    pub(super) fn set_end(&mut self, s: u32, end: Instant) {
        self.order_remove(s);
        if let Some(slot) = self.slots.get_mut(s) {
            slot.end = end;
        }
        self.order_insert(s);
    }

    /// The id the server makes next at `now` (not before the latest time): `<now>-0` once the
    /// clock has passed the last id made, else the one after it. Held by no lease (see the
    /// module docs); `None` when the sequence is used up (not reached).
    pub fn next_id(&self, now: Instant) -> Option<(Instant, u64)> {
        let now = now.max(self.latest);
        let (ms, seq) = self.last_id;
        if now > ms {
            Some((now, 0))
        } else if seq + 1 < SEQ_LIMIT {
            Some((ms, seq + 1))
        } else {
            // `ms` is `now` or `now + 1` (see `from_parts`): the next millisecond, if that
            // stays within one of the latest time and is a time an id may name (none is
            // left after the last millisecond of year 9999).
            (ms <= now && ms < MAX_TIMESTAMP).then_some((ms + Duration::MS, 0))
        }
    }

    /// Whether a new lease may be named `id` at `now` (not before the latest time): any id
    /// not of the server's form; one of that form at or below the last made, for a time
    /// reached, or the very id the server would make next (what an effect carries).
    pub(super) fn admits(&self, now: Instant, id: &[u8]) -> bool {
        match server_form(id) {
            None => true,
            Some(made) => made <= self.last_id || made.0 <= now || self.next_id(now) == Some(made),
        }
    }

    /// Checks that a lease can be named `id` at `now`: a lease held by that id is renewed
    /// (any id goes), any other must be in range and one the key admits (see
    /// [`Leases::admits`]). What a call checks before it decides: a bad id is an error
    /// whether or not units are free. Changes nothing.
    pub fn check_id(&self, now: Instant, id: &[u8]) -> Result<(), Refusal> {
        let now = now.max(self.latest);
        if self.holds(now, id) {
            Ok(())
        } else {
            self.check_new_id(now, id)
        }
    }

    /// A new lease's id: in range, and one the key admits.
    pub(super) fn check_new_id(&self, now: Instant, id: &[u8]) -> Result<(), Refusal> {
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
    pub(super) fn check_room(&self, now: Instant, makes_id: bool) -> Result<(), Refusal> {
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
    pub fn check_grant(&self, now: Instant, cost: u64, id: Option<&[u8]>) -> Result<(), Refusal> {
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
    pub(super) fn grant(&mut self, now: Instant, id: &[u8], cost: u64, end: Instant, ended: Option<u32>) {
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
        now: Instant,
        p: &Params,
        cost: u64,
        id: Option<&[u8]>,
    ) -> Result<Acquired, Refusal> {
        let now = now.max(self.latest);
        let held = id.and_then(|id| self.find(id));
        if let Some(s) = held {
            if end_of(&self.slots, s) > now && cost > 0 {
                self.set_end(s, now.saturating_add(Duration::from_ms(p.lease_ms)));
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
        self.grant(now, &id, cost, now.saturating_add(Duration::from_ms(p.lease_ms)), held);
        self.limit = p.limit;
        self.purge(now);
        let decision = Decision {
            reset_after: self.empty_at().map_or(Duration::ZERO, |at| at - now),
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
    pub fn check_record(&self, now: Instant, cost: u64, id: &[u8]) -> Result<(), Refusal> {
        self.recorded(now, cost, id).map(|_| ())
    }

    /// What [`Leases::record`] does at `now` (not before the latest time): `(true, slot)` to
    /// renew the lease held in that slot, `(false, slot)` to add one (in place of the ended
    /// lease of the same id in `slot`, if any), or why it cannot.
    pub(super) fn recorded(&self, now: Instant, cost: u64, id: &[u8]) -> Result<(bool, Option<u32>), Refusal> {
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
    pub fn record(&mut self, now: Instant, p: &Params, cost: u64, id: &[u8]) -> Result<(), Refusal> {
        let (renewed, slot) = self.recorded(now, cost, id)?;
        let now = now.max(self.latest);
        let end = now.saturating_add(Duration::from_ms(p.lease_ms));
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
    pub fn release(&mut self, now: Instant, id: &[u8]) -> Option<Decision> {
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
    pub fn extend(&mut self, now: Instant, id: &[u8], lease_ms: u64) -> Option<Decision> {
        let now = now.max(self.latest);
        let s = self.find(id)?;
        if end_of(&self.slots, s) <= now {
            return None;
        }
        self.set_end(s, now.saturating_add(Duration::from_ms(lease_ms)));
        self.latest = now;
        self.purge(now);
        Some(self.decide(now, self.limit, 0))
    }

    /// The leases held after the latest time, `(end, cost, id)` ordered by end then id:
    /// the canonical content of the state.
    pub fn leases(&self) -> Vec<(Instant, u64, &[u8])> {
        let mut out: Vec<(Instant, u64, &[u8])> = self
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
        latest: Instant,
        last_id: (Instant, u64),
        leases: &[(Instant, u64, &[u8])],
    ) -> Result<Leases, Corrupt> {
        if !(1..=MAX_LIMIT).contains(&limit) || latest > MAX_TIMESTAMP {
            return Err(Corrupt("limit or time out of range"));
        }
        if leases.len() > MAX_LEASES {
            return Err(Corrupt("too many leases"));
        }
        if last_id.0 > latest.saturating_add(Duration::MS) || last_id.1 >= SEQ_LIMIT {
            return Err(Corrupt("last id out of range"));
        }
        let mut l = Leases::new(&Params { limit, lease_ms: 1 });
        l.latest = latest;
        l.last_id = last_id;
        let mut prev: Option<(Instant, &[u8])> = None;
        for &(end, cost, id) in leases {
            if end <= latest || end > latest.saturating_add(Duration::from_ms(MAX_LEASE_MS)) {
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
        if l.count == 0 && last_id == (Instant::EPOCH, 0) {
            return Err(Corrupt("an empty state"));
        }
        Ok(l)
    }

    /// Bytes held on the heap, each allocation rounded to its size class.
    pub fn heap_size(&self) -> usize {
        use crate::core::chunks::class_ceil;
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
#[path = "tests.rs"]
mod tests;
