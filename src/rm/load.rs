//! Loading the module: its `RedisModule_OnLoad` (made by [`module!`](crate::module) in
//! `lib.rs`), which says in the log why a load failed: a second `MODULE LOAD` of a module
//! of the same name, a `loadmodule` argument that is no setting of the module, a value out
//! of a setting's range. Then the module's own load (`init`) runs.

use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

use redis_module::{raw, Context, InfoContext, RedisString, Status};

/// The module's name, as `MODULE LIST` shows it.
pub const NAME: &CStr = c"ratelimit";

/// What the module runs once the server has accepted it: its settings, type and commands.
pub type Init = fn(&Context, &[RedisString]) -> Status;

/// What writes the module's `INFO` sections.
pub type Info = fn(&InfoContext, bool);

static INFO: OnceLock<Info> = OnceLock::new();

/// Logs `message` as a warning, with the module's name when the server knows it.
pub fn log_warning(ctx: *mut raw::RedisModuleCtx, message: &str) {
    raw::redis_log(ctx, message);
}

/// The module's load: `RedisModule_Init`, then `init`.
///
/// # Safety
/// Called by Redis with the arguments it calls `RedisModule_OnLoad` with.
pub unsafe fn on_load(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    version: i32,
    init: Init,
    info: Info,
) -> c_int {
    // SAFETY: as Redis calls OnLoad; the name is a C string. Init fills in the API's
    // function pointers before it checks the name.
    let status = unsafe {
        raw::Export_RedisModule_Init(
            ctx,
            NAME.as_ptr().cast::<c_char>(),
            version,
            raw::REDISMODULE_APIVER_1 as c_int,
        )
    };
    if status == raw::Status::Err as c_int {
        // SAFETY: reading the API function pointer Init filled in.
        let busy = unsafe { raw::RedisModule_IsModuleNameBusy }
            // SAFETY: a C string.
            .is_some_and(|busy| unsafe { busy(NAME.as_ptr()) } != 0);
        if busy {
            log_warning(
                ctx,
                "ratelimit: a module named 'ratelimit' is loaded already (see MODULE LIST): \
                 a server loads it once and keeps it (a module with a data type cannot be \
                 unloaded): restart the server to load another build",
            );
        } else {
            log_warning(ctx, "ratelimit: the server refused RedisModule_Init");
        }
        return raw::Status::Err as c_int;
    }
    let context = Context::new(ctx);
    // The crate's own logging works through it (set once: a failed load keeps it).
    let _ = redis_module::MODULE_CONTEXT.set_context(&context);
    let args = redis_module::decode_args(ctx, argv, argc);
    let _ = INFO.set(info);
    raw::register_info_function(ctx, Some(info_callback));
    init(&context, &args) as c_int
}

/// Applies the module's settings given on the `loadmodule` line or in redis.conf, once
/// every one is registered.
pub fn load_configs(ctx: &Context) -> bool {
    // SAFETY: reading the API function pointer the server filled in at load time, and
    // calling it from OnLoad with the module's context.
    unsafe {
        match raw::RedisModule_LoadConfigs {
            Some(load) => load(ctx.ctx) == raw::REDISMODULE_OK as c_int,
            None => true,
        }
    }
}

extern "C" fn info_callback(ctx: *mut raw::RedisModuleInfoCtx, for_crash_report: c_int) {
    if let Some(info) = INFO.get() {
        super::guard::guard("INFO", (), || {
            info(&InfoContext::new(ctx), for_crash_report != 0)
        });
    }
}

/// Defines the module's `RedisModule_OnLoad`, which runs `$init` (see [`on_load`]) and
/// writes `INFO` with `$info`.
#[macro_export]
macro_rules! module {
    (version: $version:expr, init: $init:expr, info: $info:expr $(,)?) => {
        /// The module's entry point, which Redis calls at `MODULE LOAD`.
        ///
        /// # Safety
        /// Called by Redis with a context and its arguments.
        #[no_mangle]
        pub unsafe extern "C" fn RedisModule_OnLoad(
            ctx: *mut redis_module::raw::RedisModuleCtx,
            argv: *mut *mut redis_module::raw::RedisModuleString,
            argc: std::os::raw::c_int,
        ) -> std::os::raw::c_int {
            let (version, init, info) = ($version, $init, $info);
            // SAFETY: as Redis calls OnLoad.
            unsafe { $crate::rm::load::on_load(ctx, argv, argc, version, init, info) }
        }
    };
}
