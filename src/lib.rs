//! redis-ratelimit: rate limiting commands that run inside Redis.
//!
//! `RL.SLIDE` (an exact sliding log over one or several windows), `RL.SUBWIN` (a rolling
//! window from sub-interval counters), `RL.FIXED` (fixed window), `RL.TOKEN` (token bucket),
//! `RL.LEAKY` (a leaky bucket that schedules), `RL.PEEK` and `RL.REFUND`,
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

use std::ffi::CStr;
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
const WINDOW: [Arg; 2] = [LIMIT, WINDOW_MS];

const BURST: Arg = option("BURST", "burst");
const MAXDELAY: Arg = option("MAXDELAY", "max-delay-ms");
const ALIGN: Arg = Arg {
    name: "align",
    kind: ArgKind::PureToken,
    token: Some("ALIGN"),
    optional: true,
    multiple: false,
    sub: &[],
};
const LIMIT: Arg = arg("limit", ArgKind::Integer);
const WINDOW_MS: Arg = arg("window-ms", ArgKind::Integer);

const RESOLUTION_MS: Arg = arg("resolution-ms", ArgKind::Integer);

static COMMANDS: [Info; 8] = [
    Info {
        name: "RL.SUBWIN",
        summary: "Rolling window approximated by window_ms/resolution_ms sub-interval counters plus the weighted trailing sub-interval: constant memory whatever the limit",
        complexity: "O(S) where S is the number of sub-intervals (window_ms / resolution_ms)",
        arity: -5,
        read_only: false,
        args: &[KEY, LIMIT, WINDOW_MS, RESOLUTION_MS, COST, NOW],
    },
    Info {
        name: "RL.FIXED",
        summary: "Fixed window counter with a stable reset: the window's end is kept in the value, so every call in one window reports the same reset time",
        complexity: "O(1)",
        arity: -4,
        read_only: false,
        args: &[KEY, LIMIT, WINDOW_MS, ALIGN, COST, NOW],
    },
    Info {
        name: "RL.TOKEN",
        summary: "Token bucket (GCRA): limit tokens per window_ms, evenly, holding at most BURST; takes COST tokens if they are there",
        complexity: "O(1)",
        arity: -4,
        read_only: false,
        args: &[KEY, LIMIT, WINDOW_MS, BURST, COST, NOW],
    },
    Info {
        name: "RL.LEAKY",
        summary: "Leaky bucket that schedules: books the next free slot and replies how long to wait before acting; refuses bookings beyond MAXDELAY",
        complexity: "O(1)",
        arity: -4,
        read_only: false,
        args: &[KEY, LIMIT, WINDOW_MS, MAXDELAY, BURST, COST, NOW],
    },
    Info {
        name: "RL.SLIDE",
        summary: "Exact sliding-window rate limit over one or more (limit, window) pairs; records the request when every window allows it",
        complexity: "O(log N) where N is the number of milliseconds with recorded requests in the longest window; records that leave it are dropped in O(log N) and their memory freed a bounded amount per call",
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
        complexity: "O(log N) for a refund of any size; memory is freed a bounded amount per call",
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
command!(rl_token, "RL.TOKEN", Some(&stats::TOKEN), commands::token);
command!(rl_leaky, "RL.LEAKY", Some(&stats::LEAKY), commands::leaky);
command!(rl_fixed, "RL.FIXED", Some(&stats::FIXED), commands::fixed);
command!(
    rl_subwin,
    "RL.SUBWIN",
    Some(&stats::SUBWIN),
    commands::subwin
);
command!(rl_peek, "RL.PEEK", Some(&stats::PEEK), commands::peek);
command!(
    rl_refund,
    "RL.REFUND",
    Some(&stats::REFUND),
    commands::refund
);
command!(rl_restore, "RL.RESTORE", None, commands::restore);

/// A command's name, entry point, flags and optional ACL categories.
type Registration = (
    &'static CStr,
    raw::RedisModuleCmdFunc,
    &'static CStr,
    &'static CStr,
);

const WRITE: &CStr = c"write deny-oom";
const WRITE_ACL: &CStr = c"write ratelimit";

static REGISTRY: [Registration; 8] = [
    (c"RL.SLIDE", Some(rl_slide), WRITE, WRITE_ACL),
    (c"RL.TOKEN", Some(rl_token), WRITE, WRITE_ACL),
    (c"RL.LEAKY", Some(rl_leaky), WRITE, WRITE_ACL),
    (c"RL.FIXED", Some(rl_fixed), WRITE, WRITE_ACL),
    (c"RL.SUBWIN", Some(rl_subwin), WRITE, WRITE_ACL),
    (c"RL.PEEK", Some(rl_peek), c"readonly", c"read ratelimit"),
    (c"RL.REFUND", Some(rl_refund), c"write", WRITE_ACL),
    (c"RL.RESTORE", Some(rl_restore), WRITE, WRITE_ACL),
];

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    // Damaged RESTORE payloads become errors instead of aborting the server, and keys are
    // signalled as modified only when a call changed them.
    ctx.set_module_options(
        ModuleOptions::HANDLE_IO_ERRORS | ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED,
    );
    api::init_keywords();
    // Mandatory flags only: ACL categories are optional (7.2+) and set where supported.
    for (name, func, flags, acl) in REGISTRY {
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
