//! A process-wide table of parameter sets, each with a reference count, so that a key
//! holds a 16-bit slot number instead of its parameters (see `storage`'s compact form). Each
//! set keeps a suffix beside it, bytes its user made of it once (`storage`: the parameters'
//! part of the encoding, which RDB save then copies and a load of keys sharing them
//! compares instead of parsing).
//!
//! Reading a slot (`get`) takes no lock: a slot's parameters are written only while no key
//! refers to it, under the lock, and a key that holds a slot keeps it. Reference counts are
//! atomic: taking one more reference to a slot that has some (`retain`, or `intern` of the
//! set interned last) and giving back one that is not the last (`release`) take no lock.
//! Giving back the last one, and interning any other set, take the lock, which guards the
//! index from sets to slots; a count goes from 0 to 1 and from 1 to 0 only under it.
//! `release` may run in Redis's lazy-free thread (a value freed by UNLINK, FLUSHALL ASYNC,
//! lazy expiry), at the same time as commands on the main thread. Nothing here panics: a
//! poisoned lock is taken over as it is (no update leaves it half done), and a full table
//! answers `None`.
//!
//! Fork children (RDB save, AOF rewrite) only read slots, never the lock, so a lock held by
//! another thread when the server forked cannot block them.
//!
//! The slots are allocated a page of [`PAGE`] at a time, when the sets first need them
//! (the table of 65,536 slots would take 3.7 MB): the table itself is a few pointers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::core::kind::Params2;

/// A parameter set: the kind's registry index and two words of parameters (see `storage`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Set {
    pub kind: u8,
    pub a: u64,
    pub b: u64,
}

impl Set {
    pub fn of(kind: u8, p: Params2) -> Set {
        Set {
            kind,
            a: p.a,
            b: p.b,
        }
    }

    pub fn params(&self) -> Params2 {
        Params2 {
            a: self.a,
            b: self.b,
        }
    }
}

/// Bytes a caller keeps with a set, given when a slot takes it and read back without the lock
/// (a set's encoding, see `storage`): at most [`SUFFIX`], kept as little-endian words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Suffix {
    len: usize,
    words: [u64; 3],
}

/// The longest [`Suffix`].
pub const SUFFIX: usize = 24;

impl Suffix {
    /// `bytes` as a suffix; `None` when longer than [`SUFFIX`].
    #[inline]
    pub fn new(bytes: &[u8]) -> Option<Suffix> {
        let mut padded = [0u8; SUFFIX];
        padded.get_mut(..bytes.len())?.copy_from_slice(bytes);
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(padded.get(i * 8..i * 8 + 8).unwrap_or(&[0; 8]));
            u64::from_le_bytes(w)
        };
        Some(Suffix {
            len: bytes.len(),
            words: [word(0), word(1), word(2)],
        })
    }

    /// How many bytes it has.
    pub fn byte_len(&self) -> usize {
        self.len
    }

    /// The bytes, zero-padded to [`SUFFIX`]: the first [`Suffix::byte_len`] count.
    #[inline]
    pub fn padded(&self) -> [u8; SUFFIX] {
        let mut out = [0u8; SUFFIX];
        for (chunk, w) in out.chunks_exact_mut(8).zip(self.words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Whether `bytes` are this suffix's.
    #[inline]
    pub fn is(&self, bytes: &[u8]) -> bool {
        bytes.len() == self.len && Suffix::new(bytes).is_some_and(|s| s.words == self.words)
    }
}

/// The slots of the process-wide table: a slot number is 16 bits.
pub const SLOTS: usize = 1 << 16;

/// Slots in a page.
pub const PAGE: usize = 1024;

/// The table every key's compact value refers to.
static TABLE: Table<SLOTS> = Table::new();

/// The table every key's compact value refers to.
#[inline(always)]
pub fn table() -> &'static Table<SLOTS> {
    &TABLE
}

/// One slot's parameter set and its suffix, readable without the lock, and its reference
/// count (0: free). `kind` holds the set's kind in its low byte, the suffix's length above.
struct Slot {
    kind: AtomicU64,
    a: AtomicU64,
    b: AtomicU64,
    suffix: [AtomicU64; 3],
    refs: AtomicU32,
}

/// Slot numbers to parameter sets, with a reference count for each.
pub struct Table<const N: usize> {
    /// Pages of [`PAGE`] slots, allocated when a slot in them is first taken.
    pages: [OnceLock<Box<[Slot]>>; 64],
    /// The slot of the set interned last, plus one (0: none): keys made one after another
    /// with the same parameters (a load, a burst of new keys) take a reference to it without
    /// the lock. A hint only: the slot's set is checked, after the reference is taken.
    last: AtomicU32,
    inner: Mutex<Inner>,
}

/// What the lock guards.
struct Inner {
    /// Each live set's slot. A B-tree rather than a hash map: it grows a node at a time,
    /// where a hash map rehashes every entry in the one call that makes it double (tens of
    /// thousands of them, near the table's 65,536).
    index: BTreeMap<Set, u16>,
    /// Slots used so far: `0..used`.
    used: usize,
    /// Slots whose count went back to 0, to be taken again before new ones.
    free: Vec<u16>,
    /// Slots with a count above 0.
    live: usize,
}

impl<const N: usize> Table<N> {
    /// An empty table (`N` at most 2^16).
    pub const fn new() -> Self {
        assert!(N <= SLOTS);
        Table {
            pages: [const { OnceLock::new() }; 64],
            last: AtomicU32::new(0),
            inner: Mutex::new(Inner {
                index: BTreeMap::new(),
                used: 0,
                free: Vec::new(),
                live: 0,
            }),
        }
    }

    /// Slot `slot`, `None` when its page was never needed.
    #[inline(always)]
    fn slot(&self, slot: u16) -> Option<&Slot> {
        let i = usize::from(slot);
        self.pages.get(i / PAGE)?.get()?.get(i % PAGE)
    }

    /// Slot `slot`, its page allocated if need be (under the lock: a slot is first taken
    /// there).
    fn slot_made(&self, slot: u16) -> Option<&Slot> {
        let i = usize::from(slot);
        let page = self.pages.get(i / PAGE)?.get_or_init(|| {
            (0..PAGE)
                .map(|_| Slot {
                    kind: AtomicU64::new(0),
                    a: AtomicU64::new(0),
                    b: AtomicU64::new(0),
                    suffix: [const { AtomicU64::new(0) }; 3],
                    refs: AtomicU32::new(0),
                })
                .collect()
        });
        page.get(i % PAGE)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update under the lock is complete or not begun (nothing in it panics but an
        // allocation failure, which aborts): a poisoned lock holds consistent data.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The parameter set of `slot`, which the caller holds a reference to (through a key):
    /// no lock. An unknown slot reads as an empty set of kind 0.
    #[inline]
    pub fn get(&self, slot: u16) -> Set {
        match self.slot(slot) {
            Some(s) => Set {
                kind: s.kind.load(Ordering::Relaxed) as u8,
                a: s.a.load(Ordering::Relaxed),
                b: s.b.load(Ordering::Relaxed),
            },
            None => Set {
                kind: 0,
                a: 0,
                b: 0,
            },
        }
    }

    /// The kind of `slot`'s set and its suffix (as [`Table::get`], no lock).
    #[inline]
    pub fn suffix(&self, slot: u16) -> (u8, Suffix) {
        match self.slot(slot) {
            Some(s) => {
                let kind = s.kind.load(Ordering::Relaxed);
                let words = s.suffix.each_ref().map(|w| w.load(Ordering::Relaxed));
                let len = ((kind >> 8) as usize).min(SUFFIX);
                (kind as u8, Suffix { len, words })
            }
            None => (0, Suffix::default()),
        }
    }

    /// The slot of the set interned last (a hint: it may have been freed since, or hold
    /// another set).
    #[inline]
    pub fn last(&self) -> Option<u16> {
        let last = self.last.load(Ordering::Relaxed).checked_sub(1)?;
        u16::try_from(last).ok()
    }

    /// One more reference to `slot` if it has some already (never to a free slot): false
    /// when it has none, or the count would overflow.
    #[inline]
    fn add_ref(&self, slot: u16) -> bool {
        let Some(s) = self.slot(slot) else {
            return false;
        };
        let mut n = s.refs.load(Ordering::Relaxed);
        loop {
            if n == 0 || n == u32::MAX {
                return false;
            }
            // Acquire: the set written before the count left 0 is then visible.
            match s
                .refs
                .compare_exchange_weak(n, n + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => n = now,
            }
        }
    }

    /// A reference to the slot holding `set`, which gets one if none does (with the suffix
    /// `suffix` makes of it); `None` when every slot holds another set (or a count would
    /// overflow).
    #[inline]
    pub fn intern(&self, set: Set, suffix: impl FnOnce(&Set) -> Suffix) -> Option<u16> {
        // The set interned last, without the lock: its slot checked once referenced (a slot
        // with a reference keeps its set).
        if let Some(slot) = self.last() {
            if self.get(slot) == set && self.add_ref(slot) {
                if self.get(slot) == set {
                    return Some(slot);
                }
                self.release(slot);
            }
        }
        self.intern_locked(set, suffix)
    }

    fn intern_locked(&self, set: Set, suffix: impl FnOnce(&Set) -> Suffix) -> Option<u16> {
        let mut inner = self.lock();
        let slot = match inner.index.get(&set).copied() {
            // An indexed slot has a reference (the last one goes under the lock, with the
            // entry): false only on overflow.
            Some(slot) => {
                if !self.add_ref(slot) {
                    return None;
                }
                slot
            }
            None => {
                let slot = match inner.free.pop() {
                    Some(slot) => slot,
                    None if inner.used < N => {
                        let slot = u16::try_from(inner.used).ok()?;
                        inner.used += 1;
                        slot
                    }
                    None => return None,
                };
                let s = self.slot_made(slot)?;
                let suffix = suffix(&set);
                s.kind.store(
                    u64::from(set.kind) | (suffix.len as u64) << 8,
                    Ordering::Relaxed,
                );
                s.a.store(set.a, Ordering::Relaxed);
                s.b.store(set.b, Ordering::Relaxed);
                for (word, w) in s.suffix.iter().zip(suffix.words) {
                    word.store(w, Ordering::Relaxed);
                }
                // Release: the set is visible to whoever sees the count.
                s.refs.store(1, Ordering::Release);
                inner.index.insert(set, slot);
                inner.live += 1;
                slot
            }
        };
        self.last.store(u32::from(slot) + 1, Ordering::Relaxed);
        Some(slot)
    }

    /// One more reference to `slot`, which the caller holds already (a copy of a key):
    /// false when the count would overflow.
    pub fn retain(&self, slot: u16) -> bool {
        self.add_ref(slot)
    }

    /// Gives back one reference to `slot`; the slot is free once none is left.
    #[inline]
    pub fn release(&self, slot: u16) {
        let Some(s) = self.slot(slot) else {
            return;
        };
        // Not the last reference: no lock.
        let mut n = s.refs.load(Ordering::Relaxed);
        while n > 1 {
            match s
                .refs
                .compare_exchange_weak(n, n - 1, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => n = now,
            }
        }
        if n == 0 {
            return;
        }
        self.release_last(slot, s);
    }

    /// [`Table::release`] of what looked like the last reference: under the lock, so that
    /// the count reaches 0 and the set leaves the index together.
    #[cold]
    fn release_last(&self, slot: u16, s: &Slot) {
        let mut inner = self.lock();
        let mut n = s.refs.load(Ordering::Relaxed);
        loop {
            let next = match n {
                0 => return,
                n => n - 1,
            };
            match s
                .refs
                .compare_exchange_weak(n, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) if next > 0 => return,
                Ok(_) => break,
                Err(now) => n = now,
            }
        }
        let set = self.get(slot);
        inner.index.remove(&set);
        inner.free.push(slot);
        inner.live -= 1;
    }

    /// Slots in use: parameter sets some key holds.
    pub fn live(&self) -> usize {
        self.lock().live
    }

    /// The references to `slot` (tests).
    #[cfg(test)]
    pub fn refs(&self, slot: u16) -> u32 {
        self.slot(slot)
            .map_or(0, |s| s.refs.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suffix_of(set: &Set) -> Suffix {
        Suffix::new(&set.b.to_le_bytes()[..1 + (set.b % 8) as usize]).unwrap()
    }

    fn set(i: u64) -> Set {
        Set {
            kind: 2,
            a: i << 32 | 1000,
            b: i,
        }
    }

    #[test]
    fn equal_sets_share_a_slot_until_the_last_reference_goes() {
        let t: Box<Table<8>> = Box::new(Table::new());
        let a = t.intern(set(1), suffix_of).unwrap();
        let b = t.intern(set(2), suffix_of).unwrap();
        assert_ne!(a, b);
        assert_eq!(t.intern(set(1), suffix_of), Some(a));
        assert_eq!(t.get(a), set(1));
        assert_eq!(t.get(b), set(2));
        assert_eq!(t.suffix(a), (2, suffix_of(&set(1))));
        assert_eq!(t.suffix(b), (2, suffix_of(&set(2))));
        assert_eq!(t.last(), Some(a));
        assert_eq!((t.refs(a), t.refs(b), t.live()), (2, 1, 2));
        assert!(t.retain(a));
        assert_eq!(t.refs(a), 3);
        for _ in 0..3 {
            t.release(a);
        }
        assert_eq!((t.refs(a), t.live()), (0, 1));
        // A free slot cannot be retained, nor released below zero.
        assert!(!t.retain(a));
        t.release(a);
        assert_eq!(t.refs(a), 0);
        // The free slot is taken again first, by another set.
        let c = t.intern(set(3), suffix_of).unwrap();
        assert_eq!(c, a);
        assert_eq!(t.get(c), set(3));
        assert_eq!(t.suffix(c), (2, suffix_of(&set(3))));
        // set(1) is no longer known: it takes a new slot.
        let d = t.intern(set(1), suffix_of).unwrap();
        assert!(d != a && d != b);
        assert_eq!(t.live(), 3);
    }

    #[test]
    fn a_full_table_answers_none_until_a_slot_is_free() {
        let t: Box<Table<4>> = Box::new(Table::new());
        let slots: Vec<u16> = (0..4)
            .map(|i| t.intern(set(i), suffix_of).unwrap())
            .collect();
        assert_eq!(t.intern(set(9), suffix_of), None);
        // Sets already in the table still get references.
        assert_eq!(t.intern(set(2), suffix_of), Some(slots[2]));
        t.release(slots[1]);
        assert_eq!(t.intern(set(9), suffix_of), Some(slots[1]));
        assert_eq!(t.intern(set(10), suffix_of), None);
        assert_eq!(t.live(), 4);
    }

    #[test]
    fn the_last_set_is_found_again_after_its_slot_went() {
        let t: Box<Table<4>> = Box::new(Table::new());
        let a = t.intern(set(1), suffix_of).unwrap();
        t.release(a);
        // The cache must not hand out the freed slot for another set, nor for this one
        // without counting it.
        let b = t.intern(set(2), suffix_of).unwrap();
        assert_eq!(b, a);
        let c = t.intern(set(1), suffix_of).unwrap();
        assert_ne!(c, b);
        assert_eq!((t.get(b), t.get(c)), (set(2), set(1)));
        assert_eq!((t.refs(b), t.refs(c)), (1, 1));
    }

    #[test]
    fn threads_taking_and_giving_back_leave_the_counts_exact() {
        let t: &'static Table<64> = Box::leak(Box::new(Table::new()));
        let keep = t.intern(set(0), suffix_of).unwrap();
        let workers: Vec<_> = (0..4u64)
            .map(|w| {
                std::thread::spawn(move || {
                    for i in 0..2000u64 {
                        let s = set((w * 7 + i) % 16);
                        let slot = t.intern(s, suffix_of).unwrap();
                        assert_eq!(t.get(slot), s);
                        assert_eq!(t.suffix(slot), (2, suffix_of(&s)));
                        assert!(t.retain(slot));
                        t.release(slot);
                        t.release(slot);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(t.live(), 1);
        assert_eq!((t.refs(keep), t.get(keep)), (1, set(0)));
        t.release(keep);
        assert_eq!(t.live(), 0);
    }

    #[test]
    fn a_poisoned_lock_is_taken_over() {
        let t: &'static Table<4> = Box::leak(Box::new(Table::new()));
        let a = t.intern(set(1), suffix_of).unwrap();
        let _ = std::thread::spawn(move || {
            let _guard = t.lock();
            panic!("poison the lock");
        })
        .join();
        assert!(t.inner.is_poisoned());
        assert_eq!(t.intern(set(1), suffix_of), Some(a));
        t.release(a);
        t.release(a);
        assert_eq!(t.live(), 0);
    }
}
