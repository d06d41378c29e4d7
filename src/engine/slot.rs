//! Where a limiter's state is, for `limiters::decide` ([`Slot`]): a server's key ([`Key`]),
//! a test's store, or a subject's entry in a compact policy's family ([`PackedSlot`],
//! `kinds::family`), which unpacks the state (its parameters, latest time and tail; or its
//! kind's own encoding, for a `SLIDE` log) into the limiter's kind when asked and packs it
//! back when it changed, so that a compact policy decides as a keyed one does, by the same
//! code.

use std::any::Any;
use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

use super::call::Storable;
use crate::core::codec::{Reader, Sink, SmallOut};
use crate::core::error::Error;
use crate::core::kind::Form;
use crate::kinds::family::{Held, Log, MAX_LOG};
use crate::rm::key::Key;

/// A state as a family holds it: packed for a kind of the compact form, else in its own
/// encoding (its version byte first), past [`MAX_LOG`] without what only its retention
/// counts ([`Kind::shed`](crate::core::kind::Kind::shed)); `None` past what a family holds
/// (a time past 2^48 ms, a log past [`MAX_LOG`] still).
#[inline(always)]
pub fn held_of<K: Storable>(state: &K) -> Option<Held> {
    match K::FORM {
        Form::Compact => state.pack().map(Held::Packed),
        _ => encoded(state).or_else(|| {
            let mut lean = state.clone();
            lean.shed();
            encoded(&lean)
        }),
    }
}

/// `state` in its own encoding, if within [`MAX_LOG`]: on the stack first (a log of a few
/// requests), copied once.
fn encoded<K: Storable>(state: &K) -> Option<Held> {
    let mut out = SmallOut::new();
    out.put(&[K::VERSION]);
    state.encode(&mut out);
    if !out.overflowed {
        return Some(Held::Encoded(Log::from_slice(out.as_bytes())));
    }
    let mut log = Vec::new();
    log.push(K::VERSION);
    state.encode(&mut log);
    (log.len() <= MAX_LOG).then(|| Held::Encoded(Log::from_vec(log)))
}

/// The state of kind `K` a family holds as `held`; `None` for one of another form, or an
/// encoding its kind does not read whole.
#[inline(always)]
pub fn state_of<K: Storable>(held: &Held) -> Option<K> {
    match held {
        Held::Packed((params, latest, tail)) => K::unpack(*params, *latest, *tail),
        Held::Encoded(log) => {
            let (&version, rest) = log.split_first()?;
            let mut r = Reader::new(rest);
            let state = K::decode(version, &mut r).ok()?;
            r.finish().ok()?;
            Some(state)
        }
    }
}

/// The state a hit last left of a kind held in its own encoding (a `SLIDE` log), and that
/// encoding: a subject hit again and again (refused while a client keeps calling) has its
/// log decoded once, not at each hit. Its bytes are the whole key: a state is what its
/// encoding decodes to, whichever subject or family holds it. The state is boxed once (an
/// `Option` taken and put back): no allocation a hit.
struct Last {
    bytes: Log,
    state: Box<dyn Any>,
}

thread_local! {
    static LAST: RefCell<Option<Last>> = const { RefCell::new(None) };
}

/// [`state_of`], but for an encoding the last hit left: its state, taken (no decoding).
#[inline(always)]
pub fn take_state<K: Storable>(held: &Held) -> Option<K> {
    if let Held::Encoded(bytes) = held {
        let kept = LAST.with(|last| {
            let mut last = last.try_borrow_mut().ok()?;
            let last = last.as_mut().filter(|l| l.bytes[..] == bytes[..])?;
            last.state.downcast_mut::<Option<K>>()?.take()
        });
        if kept.is_some() {
            return kept;
        }
    }
    state_of(held)
}

/// Keeps `state`, read from `held` (its encoding as a family holds it, and what it decodes
/// to), for the next hit ([`take_state`]); nothing for a kind of the compact form.
pub fn keep_state<K: Storable>(held: &Held, state: K) {
    let Held::Encoded(bytes) = held else {
        return;
    };
    LAST.with(|last| {
        let Ok(mut last) = last.try_borrow_mut() else {
            return;
        };
        match last.as_mut() {
            Some(l) if l.state.is::<Option<K>>() => {
                if let Some(slot) = l.state.downcast_mut::<Option<K>>() {
                    *slot = Some(state);
                }
                l.bytes.clear();
                l.bytes.extend_from_slice(bytes);
            }
            _ => {
                *last = Some(Last {
                    bytes: Log::from_slice(bytes),
                    state: Box::new(Some(state)),
                })
            }
        }
    });
}

/// Where a limiter's state is: a key, for the server ([`Key`]), or a test's store. The
/// decision (`limiters::decide`) works on any.
pub trait Slot {
    /// A state lent by the slot.
    type Held<'s, K: Storable>: DerefMut<Target = K>
    where
        Self: 's;
    /// The state of kind `K` the slot holds, `None` when empty; an error for another kind.
    fn state<K: Storable>(&mut self) -> Result<Option<Self::Held<'_, K>>, Error>;
    /// Stores `state` in the slot.
    fn set<K: Storable>(&mut self, state: K) -> Result<(), Error>;
}

impl Slot for Key<'_> {
    type Held<'s, K: Storable>
        = crate::rm::storage::Held<'s, K>
    where
        Self: 's;

    fn state<K: Storable>(&mut self) -> Result<Option<Self::Held<'_, K>>, Error> {
        Key::state::<K>(self)
    }

    fn set<K: Storable>(&mut self, state: K) -> Result<(), Error> {
        Key::set(self, state)
    }
}

/// One limiter's state in a subject's entry, as read and as the call leaves it.
#[derive(Clone, Debug, Default)]
pub struct PackedSlot {
    pub state: Option<Held>,
    /// Whether the call stored or changed it.
    pub changed: bool,
    /// A changed state did not pack (not reached for the kinds a family holds).
    pub unfit: bool,
}

impl PackedSlot {
    pub fn new(state: Option<Held>) -> PackedSlot {
        PackedSlot {
            state,
            changed: false,
            unfit: false,
        }
    }

    /// Packs `state` into the slot (changed when it differs).
    pub fn store<K: Storable>(&mut self, state: &K) {
        match held_of(state) {
            Some(h) => {
                if self.state.as_ref() != Some(&h) {
                    self.state = Some(h);
                    self.changed = true;
                }
            }
            None => self.unfit = true,
        }
    }
}

/// A state unpacked from its slot, packed back into it when done with.
pub struct Unpacked<'s, K: Storable> {
    state: K,
    slot: &'s mut PackedSlot,
    touched: bool,
}

impl<K: Storable> Deref for Unpacked<'_, K> {
    type Target = K;

    fn deref(&self) -> &K {
        &self.state
    }
}

impl<K: Storable> DerefMut for Unpacked<'_, K> {
    fn deref_mut(&mut self) -> &mut K {
        self.touched = true;
        &mut self.state
    }
}

impl<K: Storable> Drop for Unpacked<'_, K> {
    fn drop(&mut self) {
        if self.touched {
            self.slot.store(&self.state);
        } else if let Some(held @ Held::Encoded(_)) = &self.slot.state {
            // Read and left as it was (a refusal): kept for the next hit ([`take_state`]),
            // a copy (a log's is cheaper than decoding it again).
            keep_state(held, self.state.clone());
        }
    }
}

impl Slot for PackedSlot {
    type Held<'s, K: Storable>
        = Unpacked<'s, K>
    where
        Self: 's;

    fn state<K: Storable>(&mut self) -> Result<Option<Unpacked<'_, K>>, Error> {
        let Some(held) = &self.state else {
            return Ok(None);
        };
        let state = take_state::<K>(held).ok_or_else(|| Error::Internal("RL.HIT"))?;
        Ok(Some(Unpacked {
            state,
            slot: self,
            touched: false,
        }))
    }

    fn set<K: Storable>(&mut self, state: K) -> Result<(), Error> {
        self.store(&state);
        match self.unfit {
            true => Err(Error::Internal("RL.HIT")),
            false => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::limit::Limit;
    use crate::kinds::slide::{SlidingLog, Window};

    fn held(log: &SlidingLog) -> Held {
        held_of(log).unwrap()
    }

    #[test]
    fn a_kept_state_is_taken_back_for_its_own_bytes_only() {
        crate::install();
        let ws = [Window {
            limit: 3,
            window_ms: 1000,
        }];
        let t0 = crate::core::Instant::from_ms(1_700_000_000_000);
        let mut log = SlidingLog::new(&ws);
        assert!(log.record(t0, &ws, 1));
        let mine = held(&log);
        assert!(log.record(t0 + 5, &ws, 1));
        let other = held(&log);
        // Kept for `mine`: taken once for `mine` (the state itself, its encoding that one),
        // then read again; `other`'s bytes decode as ever.
        let kept: SlidingLog = take_state(&mine).unwrap();
        keep_state(&mine, kept);
        let back: SlidingLog = take_state(&other).unwrap();
        assert_eq!(held(&back), other);
        let back: SlidingLog = take_state(&mine).unwrap();
        assert_eq!(held(&back), mine);
        let again: SlidingLog = take_state(&mine).unwrap();
        assert_eq!(held(&again), mine);
        // Another kind's state kept under the same bytes is not taken for this one.
        let bucket =
            crate::kinds::token::Token(crate::core::gcra::Gcra::new(&crate::core::gcra::Params {
                limit: 3,
                window_ms: 1000,
                burst: 3,
                max_delay_ms: 0,
            }));
        keep_state(&mine, bucket);
        let back: SlidingLog = take_state(&mine).unwrap();
        assert_eq!(held(&back), mine);
    }
}
