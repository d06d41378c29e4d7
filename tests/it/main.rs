//! The integration tests, one binary with one module per concern: each test starts its own
//! redis-server (a free port, a directory of its own, the module loaded, killed on drop), so
//! that libtest can run them side by side in threads of one process. `common` is what they
//! share.
//!
//! One binary, so that `common` and the dependencies are compiled and linked once, not once
//! per file. A test's name is `<module>::<test>`: `cargo test --release --test it
//! persistence::` runs one module, `cargo test --release --test it -- --exact
//! clock::the_bound_is_set_on_the_loadmodule_line` one test.
//!
//! Two files cannot be modules here, as they decide at run time whether a test runs (and
//! otherwise report it as ignored, which a `#[test]` cannot): `tests/redis_cell.rs` and
//! `tests/slot_migration.rs` are binaries of their own, with the libtest-mimic harness.

mod common;

mod acl;
mod against_the_server;
mod all;
mod bad_input;
mod big_keys;
mod charge;
mod clock;
mod cluster;
mod commands;
mod compact;
mod compact_policy;
mod durability;
mod durability_maxmemory;
mod durability_restarts;
mod events;
mod fixtures;
mod fuzz;
mod history;
mod hostile;
mod integrity;
mod leases;
mod leases_block;
mod load;
mod lua_twins;
mod penalty;
mod persistence;
mod policy;
mod readme;
mod replication;
mod roundtrip;
mod shadow;
mod throttle;
mod unreadable;
