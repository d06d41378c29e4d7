//! A typed client for [redis-ratelimit](../../README.md), the Redis module of native
//! rate-limiting commands (`RL.SLIDE`, `RL.TOKEN`, ..., `RL.HIT`, `CL.THROTTLE`), on the
//! `redis` crate.
//!
//! - [`RateLimit`] (blocking, any `redis::ConnectionLike`) and [`AsyncRateLimit`] (any
//!   `redis::aio::ConnectionLike` that is `Clone`): one typed method per command, a
//!   [`Decision`] for the five-field reply, the module check once per client, the
//!   [`Fallback::Lua`] twins, and the routing Redis Cluster needs for RL.HIT and RL.ALL.
//! - [`headers()`] and [`multi_headers`]: the HTTP headers of one reply (docs/clients.md).
//! - [`cmd`]: each command as a `redis::Cmd`, for pipelines.
//! - [`layer`] (feature `axum`): a tower `Layer` for axum, one command per request, its
//!   limit shared by every process using the same Redis.
//!
//! ```no_run
//! use redis_ratelimit_client::{Limit, RateLimit};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let con = redis::Client::open("redis://127.0.0.1/")?.get_connection()?;
//! let mut rl = RateLimit::new(con);
//! let d = rl.decide("user:42", &Limit::slide(100, 60_000), 1)?; // RL.SLIDE user:42 100 60000
//! if !d.allowed {
//!     println!("retry in {:?} s", d.retry_after_s());
//! }
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

#[cfg(feature = "aio")]
mod aio;
mod call;
pub mod cmd;
mod error;
mod headers;
#[cfg(feature = "axum")]
pub mod layer;
mod limit;
mod reply;
mod sync;

#[cfg(feature = "aio")]
pub use aio::AsyncRateLimit;
pub use call::{Backend, Fallback, FIXED_LUA, SLIDE_LUA, TOKEN_LUA};
pub use cmd::{AcquireOptions, AllEntry};
pub use error::{Error, Result, MODULE_NOT_LOADED};
#[cfg(feature = "http")]
pub use headers::insert_headers;
pub use headers::{headers, multi_headers, Header, DEFAULT_NAME};
pub use limit::{parse_policy, Limit, PolicyLimiter};
pub use reply::{
    ceil_s, AllDecision, Decision, HitDecision, Lease, LeaseId, Part, PolicyInfo, PolicyPage,
    Throttle, TopEntry, NEVER,
};
pub use sync::RateLimit;

/// The `redis` crate this one is built on, for matching versions.
pub use redis;
