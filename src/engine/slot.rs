//! Where a limiter's state is, for `limiters::decide` ([`Slot`]): a server's key ([`Key`]),
//! a test's store, or a subject's entry in a compact policy's family ([`PackedSlot`],
//! `kinds::family`), which unpacks the state (its parameters, latest time and tail; or its
//! kind's own encoding, for a `SLIDE` log) into the limiter's kind when asked and packs it
//! back when it changed, so that a compact policy decides as a keyed one does, by the same
//! code.

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
        let state = state_of::<K>(held).ok_or_else(|| Error::Internal("RL.HIT"))?;
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
