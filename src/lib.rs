//! redis-ratelimit: rate limiting commands that run inside Redis.
//!
//! `RL.SLIDE` (an exact sliding log over one or several windows), `RL.PEEK` and `RL.REFUND`,
//! on a custom data type that persists, replicates deterministically and expires by itself
//! when empty. The algorithms live in [`algo`] and know nothing of Redis; [`commands`] is the
//! thin layer that parses, reads the clock, replies and replicates.

pub mod algo;
mod api;
pub mod args;
mod cmdinfo;
pub mod codec;
mod commands;
mod datatype;
pub mod error;
mod stats;
mod store;
pub mod value;

use std::os::raw::c_int;

use redis_module::{
    raw, redis_module, AclCategory, Context, InfoContext, ModuleOptions, RedisResult, RedisString,
    Status,
};

use cmdinfo::{arg, option, Arg, ArgKind, Info};
use datatype::LIMITER_TYPE;

/// Unit tests run outside Redis, where the Redis allocator aborts.
#[cfg(not(test))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(not(test))]
const ALLOCATOR: Allocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;
#[cfg(test)]
const ALLOCATOR: Allocator = std::alloc::System;

const KEY: Arg = arg("key", ArgKind::Key);
const COST: Arg = option("COST", "cost");
const NOW: Arg = option("NOW", "unix-time-milliseconds");
const WINDOW: [Arg; 2] = [
    arg("limit", ArgKind::Integer),
    arg("window-ms", ArgKind::Integer),
];

static COMMANDS: [Info; 4] = [
    Info {
        name: "RL.SLIDE",
        summary: "Exact sliding-window rate limit over one or more (limit, window) pairs; records the request when every window allows it",
        complexity: "O(log N) where N is the number of milliseconds with recorded requests in the longest window, plus the records that leave it",
        arity: -4,
        read_only: false,
        args: &[
            KEY,
            Arg {
                name: "window",
                kind: ArgKind::Block,
                token: None,
                optional: false,
                multiple: true,
                sub: &WINDOW,
            },
            COST,
            NOW,
        ],
    },
    Info {
        name: "RL.PEEK",
        summary: "Reports a limiter's state under the parameters it last used, changing nothing",
        complexity: "O(log N)",
        arity: -2,
        read_only: true,
        args: &[KEY, NOW],
    },
    Info {
        name: "RL.REFUND",
        summary: "Gives back units recorded earlier, newest first, for requests that did not count",
        complexity: "O(M + log N) where M is the number of records given back",
        arity: -2,
        read_only: false,
        args: &[KEY, COST, NOW],
    },
    Info {
        name: "RL.RESTORE",
        summary: "Replaces a key with a serialized limiter (what AOF rewrite writes)",
        complexity: "O(N)",
        arity: 3,
        read_only: false,
        args: &[KEY, arg("payload", ArgKind::String)],
    },
];

/// Defines the C entry point of one command.
macro_rules! command {
    ($fn_name:ident, $name:literal, $counters:expr, $handler:path) => {
        unsafe extern "C" fn $fn_name(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            // SAFETY: these are the arguments Redis calls a command function with.
            unsafe { api::dispatch(ctx, argv, argc, $name, $counters, $handler) }
        }
    };
}

command!(rl_slide, "RL.SLIDE", Some(&stats::SLIDE), commands::slide);
command!(rl_peek, "RL.PEEK", Some(&stats::PEEK), commands::peek);
command!(
    rl_refund,
    "RL.REFUND",
    Some(&stats::REFUND),
    commands::refund
);
command!(rl_restore, "RL.RESTORE", None, commands::restore);

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    // Damaged RESTORE payloads become errors instead of aborting the server, and keys are
    // signalled as modified only when a call changed them.
    ctx.set_module_options(
        ModuleOptions::HANDLE_IO_ERRORS | ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED,
    );
    api::COST.init();
    api::NOW.init();
    // Mandatory flags only: ACL categories are optional (7.2+) and set where supported.
    let commands: [(
        &std::ffi::CStr,
        raw::RedisModuleCmdFunc,
        &std::ffi::CStr,
        &std::ffi::CStr,
    ); 4] = [
        (
            c"RL.SLIDE",
            Some(rl_slide),
            c"write deny-oom",
            c"write ratelimit",
        ),
        (c"RL.PEEK", Some(rl_peek), c"readonly", c"read ratelimit"),
        (c"RL.REFUND", Some(rl_refund), c"write", c"write ratelimit"),
        (
            c"RL.RESTORE",
            Some(rl_restore),
            c"write deny-oom",
            c"write ratelimit",
        ),
    ];
    for (name, func, flags, acl) in commands {
        if !api::create_command(ctx, name, func, flags, acl) {
            ctx.log_warning(&format!("ratelimit: could not register {name:?}"));
            return Status::Err;
        }
    }
    for info in &COMMANDS {
        cmdinfo::set(ctx, info);
    }
    Status::Ok
}

redis_module! {
    name: "ratelimit",
    version: 1,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LIMITER_TYPE],
    acl_categories: ["ratelimit",],
    init: init,
    info: info,
}

fn info(ctx: &InfoContext, for_crash_report: bool) {
    stats::info(ctx, for_crash_report);
}
