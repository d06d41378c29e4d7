//! redis-ratelimit: rate limiting commands that run inside Redis.
//!
//! Each kind of limiter is one unit under `src/kinds/` (its state, algorithm, grammar,
//! encoding, effect, metadata and tests, with no Redis API), listed once below. The layers
//! that serve every kind alike sit apart, and import one way:
//!
//! ```text
//! lib (this list, and the load)
//!  └─ engine: the commands' generic path, RL.PEEK / REFUND / CHARGE / ALL / APPLY, INFO
//!      ├─ rm: the Redis API (every `unsafe`), storage, persistence, blocking
//!      └─ kinds: one unit per kind
//!          └─ core: time, decisions, grammar, effects, encoding, errors
//! ```
//!
//! Every change replicates as its effect (`RL.APPLY key effect`, see `core::effect`), so
//! replicas and the AOF never decide again; every state any command makes saves, loads and
//! restores through its kind's one validating constructor.

// Every `unsafe` is in `src/rm/` (the other modules forbid it), each block says why it is
// sound, and an `unsafe fn` still marks the unsafe operations in its body.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
// `ok_or_else(|| Error::...)`, not `ok_or(Error::...)`: an error given eagerly is built and
// dropped on every call that does not fail (a call to `drop_in_place::<Error>`, whose
// variants own strings), on the hottest paths too. Clippy takes the closure for waste.
#![allow(clippy::unnecessary_lazy_evaluations)]

pub mod core;
pub mod engine;
mod registry;
pub(crate) mod rm;
#[cfg(test)]
mod tests;

use redis_module::{Context, InfoContext, ModuleOptions, RedisString, Status};

use rm::api::{self, Acl};

/// Unit tests run outside Redis, where the Redis allocator aborts.
#[cfg(not(test))]
#[global_allocator]
static ALLOCATOR: redis_module::alloc::RedisAlloc = redis_module::alloc::RedisAlloc;

// The kinds: one line each (see `registry`): its unit under `src/kinds/`, the state its keys
// hold, how a key keeps it, and its commands.
registry::kinds! {
    slide::SlidingLog, boxed, rate;
    token::Token, compact, rate;
    leaky::Leaky, compact, rate;
    fixed::FixedWindow, compact, rate;
    subwin::SubWindow, block, rate;
    lease::Leases, boxed, [Acquire, Release, Extend];
    throttle::Throttle, compact, rate;
    penalty::Penalty, boxed, rate;
    family::Subjects, boxed, [FamilyEffect];
    #[cfg(test)]
    probe::Probe, compact, rate;
}

/// Valkey's `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (9.0+; the bit means
/// something else, or nothing, elsewhere: set only on Valkey 9+).
const VALKEY_HANDLE_ATOMIC_SLOT_MIGRATION: i32 = 1 << 5;

/// What `MEMORY USAGE` must add to a value's own bytes for a key of this module to count what
/// it costs, as the server counts a string key: the part the server leaves out. Measured on
/// each server of the compatibility table (`tests/it/commands.rs`,
/// `memory_usage_is_what_a_key_costs`, against the growth of `used_memory`):
/// - Redis 7.0 to 8.0, Valkey 7.2 and 8.0 count the name and its entry: the object and the
///   module value are left, 32 bytes;
/// - Redis 8.2+ keeps the name in the object and counts most of it: 8;
/// - Valkey 8.1 counts neither the object nor the name: 56;
/// - Valkey 9+ counts the object with its name: the module value is left, 16.
fn object_overhead(server: rm::server::Server) -> usize {
    match (server.valkey, server.version) {
        (true, v) if v >= (9, 0, 0) => 16,
        (true, v) if v >= (8, 1, 0) => 56,
        (false, v) if v >= (8, 2, 0) => 8,
        _ => rm::storage::VALUE_OBJECT,
    }
}

/// The module's own ACL category, `@ratelimit`, holding every command an application runs.
const OWN_CATEGORY: &std::ffi::CStr = c"ratelimit";

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    if let Err(why) = engine::config::register(ctx, args) {
        ctx.log_warning(&format!("ratelimit: not loaded: {why}"));
        return Status::Err;
    }
    if let Err(why) = rm::datatype::create(ctx, engine::policy::aux()) {
        ctx.log_warning(&format!("ratelimit: not loaded: {why}"));
        return Status::Err;
    }
    if !rm::load::load_configs(ctx) {
        ctx.log_warning("ratelimit: not loaded: the server refused its settings");
        return Status::Err;
    }
    // Damaged RESTORE payloads become errors instead of aborting the server, and keys are
    // signalled as modified only when a call changed them. On Valkey 9+, the module handles
    // atomic slot migration (`CLUSTER MIGRATESLOTS`): a slot's keys reach the target as
    // `RL.RESTORE` (their AOF form) and their later changes as the effects a replica applies.
    let server = rm::server::server(ctx);
    let mut options = ModuleOptions::HANDLE_IO_ERRORS | ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED;
    if server.valkey && server.version >= (9, 0, 0) {
        options |= ModuleOptions::from_bits_retain(VALKEY_HANDLE_ATOMIC_SLOT_MIGRATION);
    }
    ctx.set_module_options(options);
    rm::storage::set_object_overhead(object_overhead(server));
    install();
    // ACL categories depend on the server: none for module commands before 7.2, the standard
    // ones from 7.2, a module's own only where it can add one (Redis 7.4, Valkey 8.0). A list
    // naming a category that does not exist is refused whole, so ours is named only if it was
    // created here.
    let own = api::add_acl_category(ctx, OWN_CATEGORY)
        .then(|| OWN_CATEGORY.to_str().ok())
        .flatten();
    let Some(least) = engine::register(ctx, own) else {
        return Status::Err;
    };
    // One line at notice level: the server, and what it lacks that the module would use.
    let acl = match (least, own) {
        (Acl::All, Some(_)) => "ACL categories @write/@read, @fast/@slow and @ratelimit",
        (Acl::All | Acl::WithoutOwn, _) => {
            "ACL categories @write/@read and @fast/@slow; no @ratelimit (it needs Redis \
             7.4+, Valkey 8.0+)"
        }
        (Acl::None, _) => {
            "no ACL categories for module commands (before 7.2): grant them by name \
             (+rl.slide ...)"
        }
    };
    let (major, minor, patch) = server.version;
    let migration = if server.valkey && server.version >= (9, 0, 0) {
        "; atomic slot migration handled"
    } else {
        ""
    };
    ctx.log_notice(&format!(
        "ratelimit: on {} {major}.{minor}.{patch}: {acl}{migration}",
        server.name()
    ));
    // A dataset loaded in place of the server's brings its own policies.
    rm::server::on_loading_start(ctx, engine::policy::clear);
    rm::aof::init(ctx);
    rm::block::init(ctx);
    rm::freer::init();
    Status::Ok
}

fn info(ctx: &InfoContext, for_crash_report: bool) {
    engine::info::info(ctx, for_crash_report);
}

/// The crate's version as `MODULE LIST` shows it: major·10000 + minor·100 + patch, so 0.1.0
/// is 100 (the form Redis's own modules use). One version everywhere: Cargo.toml, `MODULE
/// LIST`, `COMMAND DOCS` (`since`) and the release tarball.
const MODULE_VERSION: i32 = number(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
    + number(env!("CARGO_PKG_VERSION_MINOR")) * 100
    + number(env!("CARGO_PKG_VERSION_PATCH"));

/// A version component's decimal digits (Cargo has checked them).
const fn number(digits: &str) -> i32 {
    let bytes = digits.as_bytes();
    let mut i = 0;
    let mut n = 0;
    while i < bytes.len() {
        n = n * 10 + (bytes[i] - b'0') as i32;
        i += 1;
    }
    n
}

crate::module! {
    version: MODULE_VERSION,
    init: init,
    info: info,
}
