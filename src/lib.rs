//! redis-ratelimit: rate limiting commands that run inside Redis.
//!
//! `RL.SLIDE` (an exact sliding log over one or several windows), `RL.SUBWIN` (a rolling
//! window from sub-interval counters), `RL.FIXED` (fixed window), `RL.TOKEN` (token bucket),
//! `RL.LEAKY` (a leaky bucket that schedules), `RL.ALL` (one all-or-nothing decision across
//! several keys and kinds), `RL.PEEK`, `RL.REFUND` and `RL.CHARGE`, and a concurrency
//! limiter with leases (`RL.ACQUIRE`, `RL.RELEASE`, `RL.EXTEND`),
//! on a custom data type that persists, replicates deterministically (each change as
//! `RL.APPLY key effect`, see `src/effect.rs`) and expires by itself when empty. The
//! algorithms live in [`algo`] and know nothing of Redis; [`commands`] is the thin layer
//! that parses, reads the clock, replies and replicates.

pub mod algo;
pub mod all;
mod api;
pub mod args;
mod cmdinfo;
pub mod codec;
mod commands;
mod config;
mod datatype;
mod effect;
pub mod error;
mod freer;
mod intern;
mod lease;
#[cfg(test)]
mod roundtrip;
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
/// RL.CHARGE's COST: required.
const UNITS: Arg = Arg {
    optional: false,
    ..COST
};
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

static COMMANDS: [Info; 13] = [
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
        summary: "Reports a limiter's state under the parameters it last used, or with COST what a call of that many units would be answered, changing nothing",
        complexity: "O(log N)",
        arity: -2,
        read_only: true,
        args: &[KEY, COST, NOW],
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
        name: "RL.CHARGE",
        summary: "Records units on an existing limiter under the parameters it last used, even beyond its limit: a cost known once the work is done",
        complexity: "O(log N) for a sliding log, O(1) for a bucket or fixed window, O(R) for a sub-interval window of R sub-intervals",
        arity: -4,
        read_only: false,
        args: &[KEY, UNITS, NOW],
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
        summary: "Records the effects of a decision taken elsewhere (what replicas and the AOF receive): for each key, the deciding command's words after its key, with COST and NOW, as one argument",
        complexity: "As the commands it applies",
        arity: -3,
        read_only: false,
        args: &[Arg {
            name: "change",
            kind: ArgKind::Block,
            token: None,
            optional: false,
            multiple: true,
            sub: &[KEY, arg("effect", ArgKind::String)],
        }],
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

/// `RL.ALL`'s limiter specs, one per key (see `args::all`).
const SPEC_KINDS: [Arg; 6] = [
    Arg {
        name: "slide",
        kind: ArgKind::Block,
        token: Some("SLIDE"),
        optional: false,
        multiple: false,
        sub: &[
            Arg {
                name: "window",
                kind: ArgKind::Block,
                token: None,
                optional: false,
                multiple: true,
                sub: &WINDOW,
            },
            COST,
        ],
    },
    spec_kind("token", "TOKEN", &[LIMIT, WINDOW_MS, BURST, COST]),
    spec_kind("leaky", "LEAKY", &[LIMIT, WINDOW_MS, MAXDELAY, BURST, COST]),
    spec_kind("fixed", "FIXED", &[LIMIT, WINDOW_MS, ALIGN, COST]),
    spec_kind("subwin", "SUBWIN", &[LIMIT, WINDOW_MS, RESOLUTION_MS, COST]),
    spec_kind(
        "acquire",
        "ACQUIRE",
        &[
            LIMIT,
            arg("lease-ms", ArgKind::Integer),
            Arg {
                kind: ArgKind::String,
                ..option("ID", "lease-id")
            },
            COST,
        ],
    ),
];

const fn spec_kind(name: &'static str, token: &'static str, sub: &'static [Arg]) -> Arg {
    Arg {
        name,
        kind: ArgKind::Block,
        token: Some(token),
        optional: false,
        multiple: false,
        sub,
    }
}

/// `RL.ALL numkeys key [key ...] limiter [limiter ...] [NOW ms]`.
static ALL_INFO: Info = Info {
    name: "RL.ALL",
    summary: "One all-or-nothing decision across several keys, each with its own limiter (SLIDE, TOKEN, LEAKY, FIXED, SUBWIN or ACQUIRE without BLOCK, its parameters and options as in its own command, and its own COST), at one time: allowed only if every limiter allows, and then every one records (an ACQUIRE limiter takes its lease); otherwise none changes. Replies with the five fields of the limiter that decided, then each limiter's five in key order (an ACQUIRE limiter's six: RL.ACQUIRE's reply with its lease id)",
    complexity: "The sum of each limiter's own command, for at most 16 keys",
    arity: -6,
    read_only: false,
    args: &[
        arg("numkeys", ArgKind::Integer),
        Arg {
            name: "key",
            kind: ArgKind::Key,
            token: None,
            optional: false,
            multiple: true,
            sub: &[],
        },
        Arg {
            name: "limiter",
            kind: ArgKind::OneOf,
            token: None,
            optional: false,
            multiple: true,
            sub: &SPEC_KINDS,
        },
        NOW,
    ],
};

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
command!(
    rl_charge,
    "RL.CHARGE",
    Some(&stats::CHARGE),
    commands::charge
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

/// `RL.ALL`'s entry point: its keys are `numkeys key [key ...]`, which no legacy key range
/// describes, so it has the `getkeys-api` flag and reports them when Redis asks (cluster
/// routing and CROSSSLOT, ACL key checks; the key spec serves `COMMAND GETKEYS` and
/// clients).
unsafe extern "C" fn rl_all(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: these are the arguments Redis calls a command function with.
    unsafe {
        if api::report_keys(ctx, argv, argc, args::all_keys) {
            return raw::REDISMODULE_OK as c_int;
        }
        api::dispatch(
            ctx,
            argv,
            argc,
            "RL.ALL",
            Some(&stats::ALL_KEYS),
            commands::all,
        )
    }
}

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

static REGISTRY: [Registration; 11] = [
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
    // Records under the stored parameters: as RL.SLIDE on a log, but clears a ring's
    // sub-intervals as RL.SUBWIN does.
    (c"RL.CHARGE", Some(rl_charge), WRITE, "write slow"),
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

/// `RL.ALL`: several limiters' work in one call (a `RL.SUBWIN` among them is not O(log N)),
/// so `slow`; keys found by `getkeys-api` (see `rl_all`), hence no legacy key range.
const ALL_REGISTRATION: Registration = (
    c"RL.ALL",
    Some(rl_all),
    c"write deny-oom getkeys-api",
    "write slow",
);

/// The internal commands, what replication and the AOF carry: `RL.APPLY key effect [key
/// effect ...]` applies each effect as the command it names (RL.SLIDE at most O(log N)
/// each; keys at every other argument from the first), `RL.RESTORE` decodes a whole value
/// (O(N)). Flagged `admin` and filed in `@admin` and `@dangerous` only (not `@write`, not
/// `@ratelimit`), so that no rule an application user is given grants them; and they
/// refuse any client but an administrator (see `commands::internal`), which is all that
/// stops them on Redis 7.0, where module commands have no categories.
const INTERNAL: &CStr = c"write deny-oom admin";
const INTERNAL_CATEGORIES: &str = "admin dangerous slow";
const APPLY_REGISTRATION: Registration =
    (c"RL.APPLY", Some(rl_apply), INTERNAL, INTERNAL_CATEGORIES);
const RESTORE_REGISTRATION: Registration = (
    c"RL.RESTORE",
    Some(rl_restore),
    INTERNAL,
    INTERNAL_CATEGORIES,
);

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
    for ((name, func, flags, categories), keys, own) in [
        (ALL_REGISTRATION, (0, 0, 0), own),
        (APPLY_REGISTRATION, (1, -1, 2), None),
        (RESTORE_REGISTRATION, (1, 1, 1), None),
    ] {
        match api::create_command_at(ctx, name, func, flags, categories, own, keys) {
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
        let keys = match info.name {
            "RL.APPLY" => cmdinfo::Keys::Pairs,
            _ => cmdinfo::Keys::First,
        };
        cmdinfo::set_with_keys(ctx, info, keys);
    }
    cmdinfo::set_with_keys(ctx, &ALL_INFO, cmdinfo::Keys::Counted);
    lease::init(ctx);
    freer::init();
    Status::Ok
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

redis_module! {
    name: "ratelimit",
    version: MODULE_VERSION,
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
