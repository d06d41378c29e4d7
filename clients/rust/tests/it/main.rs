//! The client against real servers: a redis-server with the module (sync and async), one
//! without it (the Lua fallback and the error), a 3-primary cluster, and the axum layer
//! served on real ports, one server in a second process.

mod aio;
mod cluster;
mod fallback;
#[cfg(feature = "axum")]
mod layer;
mod package;
mod support;
mod sync;
