//! The `ratelimit` custom type: RDB save/load, AOF rewrite, memory usage, digest, copy, free;
//! and the module's aux data in the RDB (the policies, saved and loaded through hooks the
//! engine installs: [`Aux`]).
//!
//! Every callback is guarded: a panic here would abort the server, so it is caught, logged and
//! turned into the callback's failure value (a refused load, a skipped digest).

use std::os::raw::{c_char, c_int, c_void};

use redis_module::{logging, native_types::RedisType, raw};

use super::guard::guard;
use super::storage;

/// The encoding version Redis stores in RDB files next to each value. Version 1 is a single
/// string holding the value's encoding (each kind's, see `core::kind::Kind::encode`).
pub const ENCVER: i32 = 1;

/// The type, created at load by [`create`] (its methods there).
pub static LIMITER_TYPE: RedisType = RedisType::new("ratelimit", ENCVER, METHODS);

/// What the module keeps in the RDB beside its keys (the policies): saved before the keys
/// and loaded before them.
pub struct Aux {
    /// The bytes to save; `None` when there is nothing to keep (`all`: the bytes even then,
    /// for a server that writes the aux field whatever the module saves).
    pub save: fn(all: bool) -> Option<Vec<u8>>,
    /// Takes what `save` wrote, in place of what the module holds; an error fails the load.
    pub load: fn(&[u8]) -> Result<(), String>,
    /// The commands (each its words, its name first) that an AOF rewritten without an RDB
    /// preamble must hold for the aux data (a module writes to it only from its keys'
    /// `aof_rewrite`: see [`arm_aof_commands`]).
    pub aof_commands: fn() -> Vec<Vec<Vec<u8>>>,
}

static AUX: std::sync::OnceLock<Aux> = std::sync::OnceLock::new();

/// The commands the AOF being rewritten must still hold for the aux data, written with the
/// first key of the type the rewrite reaches (`None`: none are due).
static AOF_PENDING: std::sync::Mutex<Option<Vec<Vec<Vec<u8>>>>> = std::sync::Mutex::new(None);

fn aof_pending() -> std::sync::MutexGuard<'static, Option<Vec<Vec<Vec<u8>>>>> {
    AOF_PENDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// At the start of an AOF rewrite without an RDB preamble (in the process that writes it):
/// the aux data's commands become due, to be written with the first key of the type.
pub fn arm_aof_commands() {
    let commands = AUX
        .get()
        .map(|aux| (aux.aof_commands)())
        .unwrap_or_default();
    *aof_pending() = Some(commands);
}

/// At the end of an AOF rewrite: the commands that were due and could not be written (the
/// rewrite reached no key of the type), each its words; empty when all were, or none were
/// due.
pub fn finish_aof_commands() -> Vec<Vec<Vec<u8>>> {
    aof_pending().take().unwrap_or_default()
}

/// The first server version whose type methods have `aux_save2` (an aux field written only
/// when the module saves something, so that an RDB without policies loads without the
/// module): Redis 7.2 (and Valkey, forked from it).
const AUX_SAVE2_SINCE: c_int = 0x0007_0200;

/// Creates the `ratelimit` type, with `aux` as its aux data's hooks: `aux_save2` where the
/// server has it, else `aux_save`.
pub fn create(ctx: &redis_module::Context, aux: Aux) -> Result<(), &'static str> {
    let _ = AUX.set(aux);
    // SAFETY: reading an API pointer the server filled in at load.
    let version = unsafe { raw::RedisModule_GetServerVersion.map_or(0, |f| f()) };
    let mut methods = METHODS;
    if version >= AUX_SAVE2_SINCE {
        methods.aux_save2 = Some(aux_save2);
    } else {
        methods.aux_save = Some(aux_save);
    }
    let name = c"ratelimit";
    // SAFETY: called from OnLoad with the module's context; Redis copies the methods.
    let handle = unsafe {
        let Some(create) = raw::RedisModule_CreateDataType else {
            return Err("the server has no RedisModule_CreateDataType");
        };
        create(ctx.ctx, name.as_ptr(), ENCVER, &mut methods)
    };
    if handle.is_null() {
        return Err("the server refused the 'ratelimit' data type");
    }
    *LIMITER_TYPE.raw_type.borrow_mut() = handle;
    Ok(())
}

/// The type's callbacks, but for the aux data's save (chosen by [`create`]).
const METHODS: raw::RedisModuleTypeMethods = raw::RedisModuleTypeMethods {
    version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
    rdb_load: Some(rdb_load),
    rdb_save: Some(rdb_save),
    aof_rewrite: Some(aof_rewrite),
    mem_usage: Some(mem_usage),
    digest: Some(digest),
    free: Some(free),
    aux_load: Some(aux_load),
    aux_save: None,
    aux_save_triggers: raw::REDISMODULE_AUX_BEFORE_RDB as i32,
    free_effort: Some(free_effort),
    unlink: None,
    copy: Some(copy),
    defrag: None,
    mem_usage2: None,
    free_effort2: None,
    unlink2: Some(unlink2),
    copy2: None,
    aux_save2: None,
};

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, when: c_int) {
    guard("aux_save", (), || save_aux(rdb, when, true));
}

unsafe extern "C" fn aux_save2(rdb: *mut raw::RedisModuleIO, when: c_int) {
    guard("aux_save", (), || save_aux(rdb, when, false));
}

fn save_aux(rdb: *mut raw::RedisModuleIO, when: c_int, all: bool) {
    if when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
        return;
    }
    if let Some(bytes) = AUX.get().and_then(|aux| (aux.save)(all)) {
        raw::save_slice(rdb, &bytes);
    }
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, when: c_int) -> c_int {
    const ERR: c_int = raw::REDISMODULE_ERR as c_int;
    guard("aux_load", ERR, || {
        if encver != ENCVER || when != raw::REDISMODULE_AUX_BEFORE_RDB as c_int {
            logging::log_warning(format!(
                "ratelimit: cannot load aux data of encoding version {encver} ({when})"
            ));
            return ERR;
        }
        let Ok(buffer) = raw::load_string_buffer(rdb) else {
            return ERR;
        };
        let Some(aux) = AUX.get() else {
            return ERR;
        };
        match (aux.load)(buffer.as_ref()) {
            Ok(()) => raw::REDISMODULE_OK as c_int,
            Err(why) => {
                logging::log_warning(format!("ratelimit: cannot load the policies: {why}"));
                ERR
            }
        }
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
            // SAFETY: `rdb` is the IO handle of this load callback.
            Err(e) if unsafe { loading(rdb) } => {
                logging::log_warning(format!(
                    "ratelimit: key '{}' holds a value this build cannot read ({}): kept as \
                     it is; commands on it answer an error until it is deleted",
                    // SAFETY: as above.
                    unsafe { key_name(rdb) },
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
    // SAFETY: reading API pointers the server filled in at load.
    let api = unsafe {
        (
            raw::RedisModule_GetContextFromIO,
            raw::RedisModule_GetContextFlags,
        )
    };
    let (Some(ctx_of), Some(flags)) = api else {
        return false;
    };
    // SAFETY: `rdb` is a live IO handle (the caller's promise); the context it gives is
    // valid for the callback.
    unsafe {
        let ctx = ctx_of(rdb);
        !ctx.is_null() && flags(ctx) as u32 & raw::REDISMODULE_CTX_FLAGS_LOADING != 0
    }
}

/// The name of the key being loaded, for the log (at most 128 characters).
///
/// # Safety
/// As for [`loading`].
unsafe fn key_name(rdb: *mut raw::RedisModuleIO) -> String {
    // SAFETY: reading an API pointer the server filled in at load.
    let Some(name_of) = (unsafe { raw::RedisModule_GetKeyNameFromIO }) else {
        return String::from("?");
    };
    // SAFETY: `rdb` is a live IO handle (the caller's promise).
    let name = unsafe { name_of(rdb) };
    if name.is_null() {
        return String::from("?");
    }
    // SAFETY: a key name Redis lends for the callback.
    let name = unsafe { super::api::Arg::from_raw(name.cast_mut()) };
    String::from_utf8_lossy(name.as_bytes())
        .chars()
        .take(128)
        .collect()
}

unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guard("rdb_save", (), || {
        // SAFETY: Redis passes a live value of this type.
        unsafe { storage::with_encoding(value, &mut |bytes| raw::save_slice(rdb, bytes)) };
    })
}

unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    guard("aof_rewrite", (), || {
        // SAFETY: reading an API pointer the server filled in at load.
        let Some(emit) = (unsafe { raw::RedisModule_EmitAOF }) else {
            return;
        };
        // The aux data's commands, once, before the first key.
        let due = aof_pending().take();
        for words in due.unwrap_or_default() {
            emit_words(aof, &words);
        }
        // Redis writes the key's PEXPIREAT after this command.
        // SAFETY: Redis passes a live value of this type, its key and the AOF's IO handle;
        // the format takes the key string and a buffer with its length.
        unsafe {
            storage::with_encoding(value, &mut |bytes| {
                emit(
                    aof,
                    c"RL.RESTORE".as_ptr(),
                    c"sb".as_ptr(),
                    key,
                    bytes.as_ptr().cast::<c_char>(),
                    bytes.len(),
                )
            })
        };
    })
}

/// Writes the command `words` (its name first) in the AOF being rewritten.
fn emit_words(aof: *mut raw::RedisModuleIO, words: &[Vec<u8>]) {
    // SAFETY: reading API pointers the server filled in at load.
    let api = unsafe {
        (
            raw::RedisModule_EmitAOF,
            raw::RedisModule_CreateString,
            raw::RedisModule_FreeString,
        )
    };
    let (Some((name, args)), (Some(emit), Some(create), Some(free))) = (words.split_first(), api)
    else {
        return;
    };
    let Ok(name) = std::ffi::CString::new(name.as_slice()) else {
        return;
    };
    // SAFETY: strings made without a context are the module's, freed below once written;
    // `v` takes an array of them and its length, which outlive the call.
    unsafe {
        let mut argv: Vec<*mut raw::RedisModuleString> = args
            .iter()
            .map(|w| create(std::ptr::null_mut(), w.as_ptr().cast::<c_char>(), w.len()))
            .collect();
        if argv.iter().all(|s| !s.is_null()) {
            emit(
                aof,
                name.as_ptr(),
                c"v".as_ptr(),
                argv.as_mut_ptr(),
                argv.len(),
            );
        }
        for s in argv.into_iter().filter(|s| !s.is_null()) {
            free(std::ptr::null_mut(), s);
        }
    }
}

unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    // SAFETY: Redis passes a live value of this type.
    guard("mem_usage", 0, || unsafe {
        storage::mem_usage(value.cast_mut())
    })
}

unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guard("digest", (), || {
        // SAFETY: reading API pointers the server filled in at load.
        let api = unsafe {
            (
                raw::RedisModule_DigestAddStringBuffer,
                raw::RedisModule_DigestEndSequence,
            )
        };
        let (Some(add), Some(end)) = api else {
            return;
        };
        // The encoding is canonical, so equal states digest equally on every server.
        // SAFETY: Redis passes a live value of this type and the digest it is building.
        unsafe {
            storage::with_encoding(value, &mut |bytes| {
                add(md, bytes.as_ptr().cast(), bytes.len())
            });
            end(md);
        }
    })
}

/// What freeing `value` costs, in allocations: above 64, Redis frees it in its lazy-free
/// thread when it can (UNLINK; DEL, expiry and eviction with the matching `lazyfree-lazy-*`
/// option), so that deleting a log of millions of records does not stall the server.
unsafe extern "C" fn free_effort(_key: *mut raw::RedisModuleString, value: *const c_void) -> usize {
    // SAFETY: Redis passes a live value of this type.
    guard("free_effort", 1, || unsafe {
        storage::allocations(value.cast_mut())
    })
}

/// May run in Redis's lazy-free thread, concurrently with commands: it only hands memory back
/// to the allocator (thread-safe) and a compact state's reference to its parameter set back
/// to the shared table (an atomic count; the last one under the table's lock, see `intern`),
/// and touches no other state (a panic is logged with no context, which Redis allows from
/// any thread). On the main thread, a big value goes to the module's own freeing thread
/// (see `freer`), so that no `DEL` waits for it.
unsafe extern "C" fn free(value: *mut c_void) {
    if !value.is_null() {
        // SAFETY: Redis passes a value of this type it no longer holds.
        guard("free", (), || unsafe { super::freer::free(value) });
    }
}

/// A key of this type left the keyspace (DEL, UNLINK, expiry, eviction, overwrite), on the
/// main thread, before it is freed: the calls waiting on it are served at once (see
/// `block`).
unsafe extern "C" fn unlink2(ctx: *mut raw::RedisModuleKeyOptCtx, _value: *const c_void) {
    guard("unlink", (), || {
        // SAFETY: reading API pointers the server filled in at load.
        let api = unsafe {
            (
                raw::RedisModule_GetKeyNameFromOptCtx,
                raw::RedisModule_GetDbIdFromOptCtx,
            )
        };
        let (Some(name_of), Some(db_of)) = api else {
            return;
        };
        // SAFETY: `ctx` is the key's option context, valid during this callback.
        let (name, db) = unsafe { (name_of(ctx), db_of(ctx)) };
        if name.is_null() {
            return;
        }
        // SAFETY: the key's name, lent for this callback.
        let name = unsafe { super::api::Arg::from_raw(name.cast_mut()) };
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
        // SAFETY: Redis passes a live value of this type.
        unsafe { storage::copy(value.cast_mut()) }
    })
}
