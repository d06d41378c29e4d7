//! The Redis layer: every call into the module API, and every `unsafe` of the crate, each
//! with its `// SAFETY:` argument. It knows no kind of limiter: the generic layers hand it
//! what it needs (a command's metadata and entry point, a kind's storage hooks).
//!
//! - [`api`]: registering commands and their C entry points, replies, replication, ACL;
//! - [`cmdinfo`]: `COMMAND INFO` / `COMMAND DOCS` metadata;
//! - [`key`]: a key opened for a command, its state borrowed typed, its expiry;
//! - [`storage`]: what a key's value is (a box, a block, or a compact state with interned
//!   parameters, see [`intern`]), one mechanism every kind opts into;
//! - [`datatype`]: the custom type's callbacks (RDB, AOF rewrite, digest, copy, free), and
//!   [`freer`], which frees big values off the main thread; [`aof`], the aux data in AOF
//!   rewrites without an RDB preamble;
//! - [`block`]: calls that wait (`BLOCK`), with blocked clients and timers;
//! - [`guard`]: the one panic guard everything the server calls into goes through.

pub mod acl;
pub mod aof;
pub mod api;
pub mod arena;
pub mod arg;
pub mod block;
pub mod blocked;
pub mod cmdinfo;
pub mod datatype;
pub mod dispatch;
pub mod freer;
pub mod guard;
pub mod intern;
pub mod key;
pub mod load;
pub mod replicate;
pub mod reply;
pub mod server;
pub mod storage;
