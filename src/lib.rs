//! redis-ratelimit: rate limiting commands that run inside Redis.
//!
//! `RL.SLIDE` (an exact sliding log over one or several windows), `RL.SUBWIN` (a rolling
//! window from sub-interval counters), `RL.FIXED` (fixed window), `RL.TOKEN` (token bucket),
//! `RL.LEAKY` (a leaky bucket that schedules), `RL.PEEK` and `RL.REFUND`, and a concurrency
//! limiter with leases (`RL.ACQUIRE`, `RL.RELEASE`, `RL.EXTEND`),
//! on a custom data type that persists, replicates deterministically (each change as
//! `RL.APPLY key effect`, see `src/effect.rs`) and expires by itself when empty. The
//! algorithms live in [`algo`] and know nothing of Redis; [`commands`] is the thin layer
//! that parses, reads the clock, replies and replicates.

pub mod algo;
mod api;
pub mod args;
mod cmdinfo;
pub mod codec;
mod commands;
mod config;
mod datatype;
mod effect;
pub mod error;
mod lease;
mod stats;
mod store;
pub mod value;

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::{
    raw, redis_module, Context, InfoContext, ModuleOptions, RedisResult, RedisString, Status,
};

use cmdinfo::{arg, option, Arg, ArgKind, Info};
use datatype::LIMITER_TYPE;
use redis_module::configuration::ConfigurationFlags;

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

static COMMANDS: [Info; 12] = [
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
        name: "RL.ACQUIRE",
        summary: "Concurrency limit: takes COST units (default 1) of limit under a lease that ends lease_ms after it was granted unless released or extended first; the same ID while held renews its lease; BLOCK waits for units, first come first served",
        complexity: "O(N/128 + log N) where N is the number of leases the key holds; at most 64 ended leases are dropped per call",
        arity: -4,
        read_only: false,
        args: &[
            KEY,
            LIMIT,
            arg("lease-ms", ArgKind::Integer),
            Arg {
                kind: ArgKind::String,
                ..option("ID", "lease-id")
            },
            COST,
            option("BLOCK", "timeout-ms"),
            NOW,
        ],
    },
    Info {
        name: "RL.RELEASE",
        summary: "Frees a lease taken with RL.ACQUIRE; answers 0 first for a lease that has ended or never existed",
        complexity: "O(N/128 + log N) where N is the number of leases the key holds",
        arity: -3,
        read_only: false,
        args: &[KEY, arg("lease-id", ArgKind::String), NOW],
    },
    Info {
        name: "RL.EXTEND",
        summary: "Makes a lease taken with RL.ACQUIRE end lease_ms from now; answers 0 first for a lease that has ended",
        complexity: "O(N/128 + log N) where N is the number of leases the key holds",
        arity: -4,
        read_only: false,
        args: &[
            KEY,
            arg("lease-id", ArgKind::String),
            arg("lease-ms", ArgKind::Integer),
            NOW,
        ],
    },
    Info {
        name: "RL.APPLY",
        summary: "Records the effect of a decision taken elsewhere (what replicas and the AOF receive): the deciding command's words after its key, with COST and NOW, as one argument",
        complexity: "As the command it applies",
        arity: 3,
        read_only: false,
        args: &[KEY, arg("effect", ArgKind::String)],
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
command!(
    rl_acquire,
    "RL.ACQUIRE",
    Some(&stats::ACQUIRE),
    lease::acquire
);
command!(
    rl_release,
    "RL.RELEASE",
    Some(&stats::RELEASE),
    lease::release
);
command!(rl_extend, "RL.EXTEND", Some(&stats::EXTEND), lease::extend);
command!(rl_apply, "RL.APPLY", None, commands::apply);

/// A command's name, entry point, flags and standard ACL categories.
///
/// The categories follow the rule Redis applies to its own commands: `write` or `read` as the
/// flags say, `fast` for a call that costs O(1) or O(log N) (Redis's `CMD_FAST`: "should never
/// delay its execution"; ZADD is one), `slow` for every other. The module's own `ratelimit`
/// category is added at load where the server can create it. The `fast` flag matches the
/// `fast` category, as it does for Redis's commands.
type Registration = (
    &'static CStr,
    raw::RedisModuleCmdFunc,
    &'static CStr,
    &'static str,
);

const WRITE: &CStr = c"write deny-oom";
const WRITE_FAST: &CStr = c"write deny-oom fast";

static REGISTRY: [Registration; 12] = [
    // Binary searches over the log and an O(1) move of its head past the records that left
    // (merged per millisecond): O(log N), like ZADD. The only linear steps are amortised:
    // giving memory back once a burst has left, a bounded amount per call.
    (c"RL.SLIDE", Some(rl_slide), WRITE_FAST, "write fast"),
    (c"RL.TOKEN", Some(rl_token), WRITE_FAST, "write fast"),
    (c"RL.LEAKY", Some(rl_leaky), WRITE_FAST, "write fast"),
    (c"RL.FIXED", Some(rl_fixed), WRITE_FAST, "write fast"),
    // Clears the sub-intervals it passes and, when refused, scans its ring (up to 4,096
    // counters) for the wait: bounded but not O(log N), like PFCOUNT, which Redis files slow.
    (c"RL.SUBWIN", Some(rl_subwin), WRITE, "write slow"),
    // Reads whichever kind the key holds, a RL.SUBWIN ring included.
    (c"RL.PEEK", Some(rl_peek), c"readonly", "read slow"),
    // O(log N) on a log (a binary search for the cut), but walks back over a ring's
    // sub-intervals (RL.SUBWIN).
    (c"RL.REFUND", Some(rl_refund), c"write", "write slow"),
    // Decodes a whole value: O(N).
    (c"RL.RESTORE", Some(rl_restore), WRITE, "write slow"),
    // Applies one effect: as the command it names (RL.SLIDE at most O(log N)).
    (c"RL.APPLY", Some(rl_apply), WRITE, "write slow"),
    // Sums over the end order's chunks (N/128 of them) besides O(log N) steps: bounded,
    // not O(log N). RL.ACQUIRE may block (BLOCK), as BLPOP does.
    (
        c"RL.ACQUIRE",
        Some(rl_acquire),
        WRITE,
        "write slow blocking",
    ),
    (c"RL.RELEASE", Some(rl_release), c"write", "write slow"),
    (c"RL.EXTEND", Some(rl_extend), c"write", "write slow"),
];

/// The module's own ACL category, `@ratelimit`, holding every RL.* command.
const OWN_CATEGORY: &CStr = c"ratelimit";

fn init(ctx: &Context, _args: &[RedisString]) -> Status {
    // Damaged RESTORE payloads become errors instead of aborting the server, and keys are
    // signalled as modified only when a call changed them.
    ctx.set_module_options(
        ModuleOptions::HANDLE_IO_ERRORS | ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED,
    );
    // ACL categories depend on the server: none for module commands before 7.2, the standard
    // ones from 7.2, a module's own only where it can add one (Redis 7.4, Valkey 8.0). A list
    // naming a category that does not exist is refused whole, so ours is named only if it was
    // created here.
    let own = api::add_acl_category(ctx, OWN_CATEGORY)
        .then(|| OWN_CATEGORY.to_str().ok())
        .flatten();
    let mut least = api::Acl::All;
    for (name, func, flags, categories) in REGISTRY {
        match api::create_command(ctx, name, func, flags, categories, own) {
            Some(acl) => least = least.max(acl),
            None => {
                ctx.log_warning(&format!("ratelimit: could not register {name:?}"));
                return Status::Err;
            }
        }
    }
    ctx.log_notice(match (least, own) {
        (api::Acl::All, Some(_)) => {
            "ratelimit: commands in ACL categories @write/@read, @fast/@slow and @ratelimit"
        }
        (api::Acl::All | api::Acl::WithoutOwn, _) => {
            "ratelimit: commands in ACL categories @write/@read and @fast/@slow; \
             this server cannot add @ratelimit (Redis 7.4+, Valkey 8.0+)"
        }
        (api::Acl::None, _) => {
            "ratelimit: this server gives module commands no ACL categories (before 7.2); \
             grant them by name (+rl.slide ...)"
        }
    });
    for info in &COMMANDS {
        cmdinfo::set(ctx, info);
    }
    lease::init(ctx);
    Status::Ok
}

redis_module! {
    name: "ratelimit",
    version: 1,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LIMITER_TYPE],
    init: init,
    info: info,
    configurations: [
        i64: [
            [
                config::NOW_MAX_AHEAD_NAME,
                &config::NOW_MAX_AHEAD_MS,
                config::NOW_MAX_AHEAD_DEFAULT,
                -1,
                config::NOW_MAX_AHEAD_MAX,
                ConfigurationFlags::DEFAULT,
                None
            ],
        ],
        string: [],
        bool: [],
        enum: [],
        module_args_as_configuration: true,
    ]
}

fn info(ctx: &InfoContext, for_crash_report: bool) {
    stats::info(ctx, for_crash_report);
}
