//! A sliding log's records and windows in its own allocation while they are few (the
//! small shape), or spilled into a box with the records in chunks (the big shape).

use super::{Window, MAX_WINDOWS};
use crate::core::chunks::Chunks;
use crate::core::retention::Front;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Entry {
    /// The timestamp's low 32 bits: see [`SlidingLog::ts`].
    pub(super) at: u32,
    /// Units recorded up to and including this entry, wrapping; only differences matter.
    pub(super) cum: u32,
}

/// Slots of a small log, in the log's own allocation: its windows, packed, at the end, and
/// its records from the start. One window and up to 7 records, or 8 windows and none.
pub(super) const SMALL_SLOTS: usize = 8;
/// A spilled log goes back to the small shape once its windows and records take at most
/// this many slots (and it keeps no retention): half, so that a log at the boundary does not
/// spill and come back on every call.
pub(super) const UNSPILL_SLOTS: usize = SMALL_SLOTS / 2;
/// A spilled log comes back only when freeing its chunks is cheap: at most this many
/// allocations (chunks, index), so that the call stays bounded.
pub(super) const UNSPILL_ALLOCATIONS: usize = 4;

/// A small log: windows and records in a few slots of the log itself, no other allocation.
#[derive(Clone, Debug)]
pub(super) struct Small {
    pub(super) nwin: u8,
    pub(super) len: u8,
    /// Records in `[0, len)`, windows (see [`pack`]) in `[SMALL_SLOTS - nwin, SMALL_SLOTS)`.
    pub(super) slots: [Entry; SMALL_SLOTS],
}

impl Small {
    pub(super) fn entries(&self) -> &[Entry] {
        self.slots.get(..usize::from(self.len)).unwrap_or_default()
    }

    pub(super) fn entries_mut(&mut self) -> &mut [Entry] {
        self.slots
            .get_mut(..usize::from(self.len))
            .unwrap_or_default()
    }

    pub(super) fn packed_windows(&self) -> &[Entry] {
        self.slots
            .get(SMALL_SLOTS - usize::from(self.nwin)..)
            .unwrap_or_default()
    }

    /// Room for `nwin` windows and `len` records.
    pub(super) fn fits(nwin: usize, len: usize) -> bool {
        nwin + len <= SMALL_SLOTS
    }
}

/// A log that outgrew the small shape (or keeps a retention): its windows and retention in
/// one box, its records in chunks.
#[derive(Clone, Debug)]
pub(super) struct Big {
    pub(super) nwin: u8,
    pub(super) windows: [Window; MAX_WINDOWS],
    /// Retention: the windows used before the current ones that may still count a record.
    pub(super) kept: Front,
    pub(super) entries: Chunks<Entry>,
}

impl Big {
    pub(super) fn windows(&self) -> &[Window] {
        self.windows
            .get(..usize::from(self.nwin))
            .unwrap_or_default()
    }
}

#[derive(Clone, Debug)]
pub(super) enum Body {
    Small(Small),
    Big(Box<Big>),
}

/// The records, whatever the shape.
impl Body {
    pub(super) fn len(&self) -> usize {
        match self {
            Body::Small(s) => usize::from(s.len),
            Body::Big(b) => b.entries.len(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn get(&self, i: usize) -> Option<&Entry> {
        match self {
            Body::Small(s) => s.entries().get(i),
            Body::Big(b) => b.entries.get(i),
        }
    }

    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut Entry> {
        match self {
            Body::Small(s) => s.entries_mut().get_mut(i),
            Body::Big(b) => b.entries.get_mut(i),
        }
    }

    pub(super) fn last_mut(&mut self) -> Option<&mut Entry> {
        match self {
            Body::Small(s) => s.entries_mut().last_mut(),
            Body::Big(b) => b.entries.last_mut(),
        }
    }

    /// See [`Chunks::partition_point`].
    pub(super) fn partition_point(&self, pred: impl FnMut(&Entry) -> bool) -> usize {
        match self {
            Body::Small(s) => s.entries().partition_point(pred),
            Body::Big(b) => b.entries.partition_point(pred),
        }
    }

    /// See [`Chunks::leading`].
    #[inline]
    pub(super) fn leading(&self, mut pred: impl FnMut(&Entry) -> bool) -> usize {
        match self {
            Body::Small(s) => match s.entries().first() {
                Some(e) if !pred(e) => 0,
                _ => s.entries().partition_point(pred),
            },
            Body::Big(b) => b.entries.leading(pred),
        }
    }

    /// See [`Chunks::drop_front`]: bounded work either way.
    pub(super) fn drop_front(&mut self, n: usize) {
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
    pub(super) fn truncate(&mut self, len: usize) {
        match self {
            Body::Small(s) => s.len = s.len.min(len.min(SMALL_SLOTS) as u8),
            Body::Big(b) => b.entries.truncate(len),
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry> + '_ {
        let (small, big) = match self {
            Body::Small(s) => (s.entries(), None),
            Body::Big(b) => (&[][..], Some(&b.entries)),
        };
        small.iter().chain(big.into_iter().flat_map(Chunks::iter))
    }
}

/// A window in one slot: both halves fit 32 bits for any window [`valid_window`] accepts.
pub(super) fn pack(w: &Window) -> Option<Entry> {
    Some(Entry {
        at: u32::try_from(w.limit).ok()?,
        cum: u32::try_from(w.window_ms).ok()?,
    })
}

pub(super) fn unpack(e: &Entry) -> Window {
    Window {
        limit: u64::from(e.at),
        window_ms: u64::from(e.cum),
    }
}

