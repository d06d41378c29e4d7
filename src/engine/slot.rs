//! Where a limiter's state is, for `limiters::decide` ([`Slot`]): a server's key ([`Key`]),
//! a test's store, or a subject's entry in a compact policy's family ([`PackedSlot`],
//! `kinds::family`), which unpacks the state (its parameters, latest time and tail) into
//! the limiter's kind when asked and packs it back when it changed, so that a compact
//! policy decides as a keyed one does, by the same code.

use std::ops::{Deref, DerefMut};

use super::call::Storable;
use crate::core::error::Error;
use crate::kinds::family::Packed;
use crate::rm::key::Key;

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
#[derive(Clone, Copy, Debug, Default)]
pub struct PackedSlot {
    pub state: Option<Packed>,
    /// Whether the call stored or changed it.
    pub changed: bool,
    /// A changed state did not pack (not reached for the kinds a family holds).
    pub unfit: bool,
}

impl PackedSlot {
    pub fn new(state: Option<Packed>) -> PackedSlot {
        PackedSlot {
            state,
            changed: false,
            unfit: false,
        }
    }

    /// Packs `state` into the slot (changed when it differs).
    pub fn store<K: Storable>(&mut self, state: &K) {
        match state.pack() {
            Some(p) => {
                if self.state != Some(p) {
                    self.state = Some(p);
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
        let Some((params, latest, tail)) = self.state else {
            return Ok(None);
        };
        let state = K::unpack(params, latest, tail).ok_or_else(|| Error::Internal("RL.HIT"))?;
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
