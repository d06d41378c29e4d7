//! Tests across the kinds and the layers that serve them, without a server: what the
//! registry's kinds build, read back and replicate ([`roundtrip`]), their encodings through
//! the storage ([`encodings`], [`storage`]) and `RL.ALL`'s decision across kinds ([`all`]).

mod all;
mod encodings;
mod roundtrip;
mod storage;
