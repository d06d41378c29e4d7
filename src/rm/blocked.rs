//! Blocked clients and timers, for a call that waits (`BLOCK`, see `rm::block`), and the
//! database a context works on.

use std::os::raw::{c_int, c_void};

use redis_module::{raw, Context};

/// The database the context works on.
pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: ctx is live.
    unsafe { raw::RedisModule_GetSelectedDb.map_or(0, |f| f(ctx.ctx)) }
}

/// Makes the context work on database `db` (a timer's context starts on database 0).
pub fn select_db(ctx: &Context, db: i32) {
    // SAFETY: ctx is live.
    unsafe {
        if let Some(f) = raw::RedisModule_SelectDb {
            f(ctx.ctx, db);
        }
    }
}

pub type BlockedClient = *mut raw::RedisModuleBlockedClient;

/// Blocks the calling client with no Redis timeout (the module keeps the deadline), to be
/// answered by `reply` with what [`unblock`] hands over, freed by `free`; `disconnect` runs
/// if the client goes first. `None` where the server cannot block it.
pub fn block_client(
    ctx: &Context,
    reply: raw::RedisModuleCmdFunc,
    free: Option<unsafe extern "C" fn(*mut raw::RedisModuleCtx, *mut c_void)>,
    disconnect: raw::RedisModuleDisconnectFunc,
) -> Option<BlockedClient> {
    // SAFETY: called from a command with its context; the callbacks live for ever.
    unsafe {
        let bc = raw::RedisModule_BlockClient?(ctx.ctx, reply, None, free, 0);
        if bc.is_null() {
            return None;
        }
        if let Some(set) = raw::RedisModule_SetDisconnectCallback {
            set(bc, disconnect);
        }
        Some(bc)
    }
}

/// Unblocks `bc`, handing `privdata` to its reply callback (or to its free callback when
/// the client is gone).
///
/// # Safety
/// `bc` must be a blocked client not unblocked before, which nothing will unblock again (the
/// caller removed it from every list that could), and `privdata` what its reply and free
/// callbacks expect (they take ownership).
pub unsafe fn unblock(bc: BlockedClient, privdata: *mut c_void) {
    // SAFETY: as the caller promises; the API pointer was filled in at load.
    unsafe {
        if let Some(f) = raw::RedisModule_UnblockClient {
            f(bc, privdata);
        }
    }
}

/// What `unblock` handed to the reply callback running with `ctx`.
///
/// # Safety
/// `ctx` must be the context of a blocked client's reply callback.
pub unsafe fn blocked_privdata(ctx: *mut raw::RedisModuleCtx) -> *mut c_void {
    // SAFETY: as the caller promises; the API pointer was filled in at load.
    unsafe { raw::RedisModule_GetBlockedClientPrivateData.map_or(std::ptr::null_mut(), |f| f(ctx)) }
}

pub type TimerId = raw::RedisModuleTimerID;

/// Runs `callback(data)` on the main thread in `ms` milliseconds.
pub fn create_timer(
    ctx: &Context,
    ms: u64,
    callback: raw::RedisModuleTimerProc,
    data: *mut c_void,
) -> Option<TimerId> {
    let ms = raw::mstime_t::try_from(ms).unwrap_or(raw::mstime_t::MAX);
    // SAFETY: ctx is live; the callback lives for ever and owns `data` when it runs.
    unsafe { raw::RedisModule_CreateTimer.map(|f| f(ctx.ctx, ms, callback, data)) }
}

/// Stops a timer that has not fired; returns its data (null if it had fired already).
pub fn stop_timer(ctx: &Context, id: TimerId) -> *mut c_void {
    let mut data = std::ptr::null_mut();
    // SAFETY: ctx is live; StopTimer only writes `data` when it finds the timer.
    unsafe {
        if let Some(f) = raw::RedisModule_StopTimer {
            if f(ctx.ctx, id, &mut data) != raw::REDISMODULE_OK as c_int {
                return std::ptr::null_mut();
            }
        }
    }
    data
}
