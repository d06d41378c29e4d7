//! Tests across the kinds and the layers that serve them, without a server: what the
//! registry's kinds build, read back and replicate ([`roundtrip`]), their encodings through
//! the storage ([`encodings`], [`storage`]), `RL.ALL`'s decision across kinds ([`all`]) and
//! the docs of every kind ([`docs`]).
//!
//! None of them lists the kinds: each takes them from the registry (`crate::visit`), with
//! each kind's sample calls (`core::sample::Sample`). The test-only kind `kinds::probe`
//! (one folder and one registry line) is in every one.

mod all;
mod docs;
mod encodings;
mod fixtures;
mod roundtrip;
mod storage;

use std::any::Any;
use std::fmt::Debug;

use crate::core::error::Error;
use crate::core::kind::Kind;
use crate::core::{Decision, Instant};
use crate::engine::call::Storable;

/// A key's state, whatever its kind.
pub trait State: Debug {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    /// The command that makes keys of its kind.
    fn command(&self) -> &'static str;
    fn boxed(&self) -> Box<dyn State>;
    /// Its encoding, version and kind bytes first (what RDB holds).
    fn bytes(&self) -> Vec<u8>;
    fn empty_at(&self) -> Option<Instant>;
    fn latest(&self) -> Instant;
    fn charge(&mut self, now: Instant, units: u64) -> Result<Option<Decision>, Error>;
    fn can_charge(&self, now: Instant, units: u64) -> Result<bool, Error>;
    fn refund(&mut self, now: Instant, units: u64) -> Result<Decision, Error>;
    /// Its encodings through every form a key gives it.
    fn through_keys(&self) -> Result<Vec<Vec<u8>>, String>;
}

impl<K: Storable> State for K {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn command(&self) -> &'static str {
        K::COMMAND
    }
    fn boxed(&self) -> Box<dyn State> {
        Box::new(self.clone())
    }
    fn bytes(&self) -> Vec<u8> {
        let mut out = vec![K::VERSION, K::CODE];
        self.encode(&mut out);
        out
    }
    fn empty_at(&self) -> Option<Instant> {
        Kind::empty_time(self)
    }
    fn latest(&self) -> Instant {
        Kind::latest_time(self)
    }
    fn charge(&mut self, now: Instant, units: u64) -> Result<Option<Decision>, Error> {
        Kind::charge(self, now, units)
    }
    fn can_charge(&self, now: Instant, units: u64) -> Result<bool, Error> {
        Kind::can_charge(self, now, units)
    }
    fn refund(&mut self, now: Instant, units: u64) -> Result<Decision, Error> {
        Kind::refund(self, now, units)
    }
    fn through_keys(&self) -> Result<Vec<Vec<u8>>, String> {
        crate::rm::storage::encodings_through_keys(self, &self.bytes()).map_err(|e| e.0.to_string())
    }
}

impl Clone for Box<dyn State> {
    fn clone(&self) -> Self {
        self.boxed()
    }
}
