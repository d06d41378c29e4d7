//! The `ratelimit` custom type: RDB save/load, AOF rewrite, memory usage, digest, copy, free.
//!
//! Every callback is guarded: a panic here would abort the server, so it is caught, logged and
//! turned into the callback's failure value (a refused load, a skipped digest).

use std::os::raw::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{logging, native_types::RedisType, raw};

use super::storage;

/// The encoding version Redis stores in RDB files next to each value. Version 1 is a single
/// string holding the value's encoding (each kind's, see `core::kind::Kind::encode`).
pub const ENCVER: i32 = 1;

pub static LIMITER_TYPE: RedisType = RedisType::new(
    "ratelimit",
    ENCVER,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: None,
        aux_save: None,
        aux_save_triggers: 0,
        free_effort: Some(free_effort),
        unlink: None,
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink2),
        copy2: None,
        aux_save2: None,
    },
);

/// Runs `f`, turning a panic into `fallback` and a log line.
fn guard<T>(what: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        logging::log_warning(format!(
            "ratelimit: internal error in {what}; see the log above"
        ));
        fallback
    })
}

unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guard("rdb_load", std::ptr::null_mut(), || {
        if encver != ENCVER {
            logging::log_warning(format!("ratelimit: cannot load encoding version {encver}"));
            return std::ptr::null_mut();
        }
        let Ok(buffer) = raw::load_string_buffer(rdb) else {
            return std::ptr::null_mut();
        };
        let bytes = buffer.as_ref();
        match storage::decode(bytes) {
            Ok(raw) => raw,
            // Loading a file (an RDB, an AOF's preamble, a full sync): the value is kept as
            // it is, so that one value this build cannot read does not fail the load of
            // every other key.
            Err(e) if loading(rdb) => {
                logging::log_warning(format!(
                    "ratelimit: key '{}' holds a value this build cannot read ({}): kept as \
                     it is; commands on it answer an error until it is deleted",
                    key_name(rdb),
                    e.0
                ));
                storage::unreadable_into_raw(bytes, e.0)
            }
            // A client's RESTORE: refused.
            Err(e) => {
                logging::log_warning(format!("ratelimit: refused a damaged value: {}", e.0));
                std::ptr::null_mut()
            }
        }
    })
}

/// Whether the server is loading a file or a full sync (not running a client's RESTORE).
///
/// # Safety
/// `rdb` must be the IO handle Redis passed to the load callback.
unsafe fn loading(rdb: *mut raw::RedisModuleIO) -> bool {
    let (Some(ctx_of), Some(flags)) = (
        raw::RedisModule_GetContextFromIO,
        raw::RedisModule_GetContextFlags,
    ) else {
        return false;
    };
    let ctx = ctx_of(rdb);
    !ctx.is_null() && flags(ctx) as u32 & raw::REDISMODULE_CTX_FLAGS_LOADING != 0
}

/// The name of the key being loaded, for the log (at most 128 characters).
///
/// # Safety
/// As for [`loading`].
unsafe fn key_name(rdb: *mut raw::RedisModuleIO) -> String {
    let Some(name_of) = raw::RedisModule_GetKeyNameFromIO else {
        return String::from("?");
    };
    let name = name_of(rdb);
    if name.is_null() {
        return String::from("?");
    }
    let bytes = super::api::Arg::from_raw(name.cast_mut())
        .as_bytes()
        .to_vec();
    String::from_utf8_lossy(&bytes).chars().take(128).collect()
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guard("rdb_save", (), || {
        storage::with_encoding(value, &mut |bytes| raw::save_slice(rdb, bytes));
    })
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guard("aof_rewrite", (), || {
        let Some(emit) = raw::RedisModule_EmitAOF else {
            return;
        };
        // Redis writes the key's PEXPIREAT after this command.
        storage::with_encoding(value, &mut |bytes| {
            emit(
                aof,
                c"RL.RESTORE".as_ptr(),
                c"sb".as_ptr(),
                key,
                bytes.as_ptr().cast::<c_char>(),
                bytes.len(),
            )
        });
    })
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    guard("mem_usage", 0, || storage::mem_usage(value.cast_mut()))
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guard("digest", (), || {
        let (Some(add), Some(end)) = (
            raw::RedisModule_DigestAddStringBuffer,
            raw::RedisModule_DigestEndSequence,
        ) else {
            return;
        };
        // The encoding is canonical, so equal states digest equally on every server.
        storage::with_encoding(value, &mut |bytes| {
            add(md, bytes.as_ptr().cast(), bytes.len())
        });
        end(md);
    })
}

/// What freeing `value` costs, in allocations: above 64, Redis frees it in its lazy-free
/// thread when it can (UNLINK; DEL, expiry and eviction with the matching `lazyfree-lazy-*`
/// option), so that deleting a log of millions of records does not stall the server.
unsafe extern "C" fn free_effort(_key: *mut raw::RedisModuleString, value: *const c_void) -> usize {
    guard("free_effort", 1, || storage::allocations(value.cast_mut()))
}

/// May run in Redis's lazy-free thread, concurrently with commands: it only hands memory back
/// to the allocator (thread-safe) and a compact state's reference to its parameter set back
/// to the shared table (an atomic count; the last one under the table's lock, see `intern`),
/// and touches no other state (a panic is logged with no context, which Redis allows from
/// any thread). On the main thread, a big value goes to the module's own freeing thread
/// (see `freer`), so that no `DEL` waits for it.
unsafe extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        guard("free", (), || super::freer::free(value));
    }
}

/// A key of this type left the keyspace (DEL, UNLINK, expiry, eviction, overwrite), on the
/// main thread, before it is freed: the calls waiting on it are served at once (see
/// `block`).
unsafe extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, _value: *const c_void) {
    guard("unlink", (), || {
        let (Some(name_of), Some(db_of)) = (
            raw::RedisModule_GetKeyNameFromOptCtx,
            raw::RedisModule_GetDbIdFromOptCtx,
        ) else {
            return;
        };
        // SAFETY: `ctx` is the key's option context, valid during this callback.
        let (name, db) = unsafe { (name_of(ctx), db_of(ctx)) };
        if name.is_null() {
            return;
        }
        let name = super::api::Arg::from_raw(name.cast_mut());
        super::block::key_removed(db, name.as_bytes());
    })
}

unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    guard("copy", std::ptr::null_mut(), || {
        if value.is_null() {
            return std::ptr::null_mut();
        }
        storage::copy(value.cast_mut())
    })
}
