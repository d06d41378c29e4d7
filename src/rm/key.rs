//! A limiter key opened through the raw module API: typed access to its value, absolute
//! expiry and deletion. The crate's key wrappers hide the raw key, which absolute expiry needs.

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::{raw, Context};

use super::api::{now_ms, Arg};
use super::datatype::LIMITER_TYPE;
use super::storage::{self, Held, MaybeBlock, MaybeCompact, Raw, Stored};
use crate::core::error::Error;
use crate::core::Instant;

/// An open key, closed on drop.
pub struct Key<'a> {
    ctx: &'a Context,
    name: Arg,
    key: *mut raw::RedisModuleKey,
}

impl<'a> Key<'a> {
    /// Opens `name` for reading, or for reading and writing.
    pub fn open(ctx: &'a Context, name: Arg, write: bool) -> Self {
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        // SAFETY: ctx and name are live for the duration of the command; OpenKey returns a
        // key (or null for a missing key in read mode) that we close exactly once in Drop.
        let key = unsafe {
            raw::RedisModule_OpenKey.map_or(std::ptr::null_mut(), |open| {
                open(ctx.ctx, name.raw(), mode as c_int).cast()
            })
        };
        Key { ctx, name, key }
    }

    /// The value of our type the key holds, `None` for a missing key, WRONGTYPE for another
    /// Redis type.
    #[inline(always)]
    pub fn raw(&self) -> Result<Option<Raw>, Error> {
        if self.key.is_null() {
            return Ok(None);
        }
        // SAFETY: the key is open; the value of a key of our type always comes from
        // `storage`, in `set_raw` or in the type's load/copy callbacks.
        unsafe {
            // The common case first: a key of our type (a missing key or another type
            // answers null or another type).
            // `let ... else` rather than `ok_or`: an `Error` made and dropped on every call
            // costs a call to its destructor.
            let Some(get_type) = raw::RedisModule_ModuleTypeGetType else {
                return Err(Error::MissingApi("ModuleTypeGetType"));
            };
            let key_type = get_type(self.key);
            if !key_type.is_null() && key_type == *LIMITER_TYPE.raw_type.borrow() {
                let Some(get_value) = raw::RedisModule_ModuleTypeGetValue else {
                    return Err(Error::MissingApi("ModuleTypeGetValue"));
                };
                return Ok(Some(get_value(self.key)));
            }
            let Some(key_type) = raw::RedisModule_KeyType else {
                return Err(Error::MissingApi("KeyType"));
            };
            match raw::KeyType::from(key_type(self.key)) {
                raw::KeyType::Empty => Ok(None),
                _ => Err(Error::WrongType),
            }
        }
    }

    /// The state of kind `K` the key holds, `None` for a missing key; WRONGTYPE for another
    /// Redis type, an error naming the kind the key holds for another kind, and the error
    /// of a value a load could not read.
    #[inline(always)]
    pub fn state<K: Stored + MaybeCompact + MaybeBlock>(
        &mut self,
    ) -> Result<Option<Held<'_, K>>, Error> {
        let Some(raw) = self.raw()? else {
            return Ok(None);
        };
        let replace = (self.key.cast(), replace_value as storage::Replace);
        // SAFETY: `raw` is the key's value, alive while the key is open; the borrow of
        // `self` keeps it from being replaced while lent.
        if let Some(held) = unsafe { storage::borrow::<K>(raw, Some(replace)) } {
            return Ok(Some(held));
        }
        Err(Self::other(raw, K::COMMAND))
    }

    /// The error for a key holding something other than a state of the kind of `wanted`.
    #[cold]
    fn other(raw: Raw, wanted: &'static str) -> Error {
        // SAFETY: a live value of the key (see `state`).
        unsafe {
            if let Some(u) = storage::unreadable(raw) {
                return Error::Unreadable(u.reason);
            }
            match storage::kind_index(raw).and_then(storage::ops_of) {
                Some(ops) => Error::OtherKind {
                    held: ops.command,
                    wanted,
                },
                None => Error::Internal("a value of no known kind"),
            }
        }
    }

    /// The registry index of the kind the key holds, `None` for a missing key; the error of
    /// a value a load could not read, WRONGTYPE for another Redis type.
    pub fn kind_index(&self) -> Result<Option<usize>, Error> {
        let Some(raw) = self.raw()? else {
            return Ok(None);
        };
        // SAFETY: a live value of the key.
        unsafe {
            if let Some(u) = storage::unreadable(raw) {
                return Err(Error::Unreadable(u.reason));
            }
            storage::kind_index(raw)
                .map(Some)
                .ok_or_else(|| Error::Internal("a value of no known kind"))
        }
    }

    /// Whether the key holds a value of ours (readable or not), false for a missing key;
    /// WRONGTYPE for another type.
    pub fn holds_ours(&self) -> Result<bool, Error> {
        Ok(self.raw()?.is_some())
    }

    /// Stores `state`, replacing (and freeing) any previous value. Redis drops the TTL.
    pub fn set<K: Stored + MaybeCompact + MaybeBlock>(&self, state: K) -> Result<(), Error> {
        self.set_raw(storage::into_raw::<K>(state))
    }

    /// Stores a value made by `storage` (freed here if Redis does not take it), replacing
    /// any previous one. Redis drops the TTL.
    pub fn set_raw(&self, value: Raw) -> Result<(), Error> {
        // `let ... else` rather than `ok_or` (see `raw`).
        // SAFETY: reading the API function pointer the server filled in at load time.
        let Some(set_value) = (unsafe { raw::RedisModule_ModuleTypeSetValue }) else {
            // SAFETY: not taken by Redis: still ours to free.
            unsafe { storage::free(value) };
            return Err(Error::MissingApi("ModuleTypeSetValue"));
        };
        // SAFETY: the key is open for writing; on success Redis owns the value and frees it
        // through the type's free callback.
        let status = unsafe { set_value(self.key, *LIMITER_TYPE.raw_type.borrow(), value) };
        if status == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            // SAFETY: Redis refused the value, so it is still ours to free.
            unsafe { storage::free(value) };
            Err(Error::Internal("storing the limiter"))
        }
    }

    /// Makes the key expire at `at`, an absolute Unix time in milliseconds, so that replicas
    /// and the AOF get the same moment whatever their own clocks say.
    pub fn expire_at(&self, at: Instant) {
        let at = i64::try_from(at.ms()).unwrap_or(i64::MAX);
        // SAFETY: the key is open for writing and holds a value.
        unsafe {
            if let Some(set_abs) = raw::RedisModule_SetAbsExpire {
                set_abs(self.key, at);
            } else if let Some(set_rel) = raw::RedisModule_SetExpire {
                // Servers older than 6.2.2: the closest we can do is relative to their clock.
                set_rel(self.key, (at - now_ms()).max(1));
            }
        }
    }

    /// The key's absolute expiry in Unix milliseconds, `None` when it has none (after
    /// `PERSIST`, say) or is missing.
    pub fn expires_at(&self) -> Option<Instant> {
        // SAFETY: the key is open.
        let at = unsafe {
            if let Some(get_abs) = raw::RedisModule_GetAbsExpire {
                get_abs(self.key)
            } else if let Some(get_rel) = raw::RedisModule_GetExpire {
                match get_rel(self.key) {
                    ttl if ttl < 0 => ttl,
                    ttl => ttl.saturating_add(now_ms()),
                }
            } else {
                -1
            }
        };
        u64::try_from(at).ok().map(Instant::from_ms)
    }

    /// Deletes the key, as UNLINK does: a big value (a log of many records, see the type's
    /// `free_effort`) is freed by Redis's lazy-free thread, so emptying one with a refund
    /// does not stall the server; small ones are freed at once.
    pub fn delete(&self) {
        // SAFETY: the key is open for writing.
        unsafe {
            if let Some(unlink) = raw::RedisModule_UnlinkKey {
                unlink(self.key);
            } else if let Some(del) = raw::RedisModule_DeleteKey {
                del(self.key);
            }
        }
    }

    /// Emits the keyspace event `event` of class `d` (module) for the key, as Redis's own
    /// commands do for theirs.
    pub fn notify(&self, event: &CStr) {
        self.notify_as(raw::REDISMODULE_NOTIFY_MODULE, event);
    }

    /// Emits `del` (class `g`), for a key a command removed.
    pub fn notify_deleted(&self) {
        self.notify_as(raw::REDISMODULE_NOTIFY_GENERIC, c"del");
    }

    fn notify_as(&self, class: c_int, event: &CStr) {
        // SAFETY: ctx and name are live; Redis copies what it keeps.
        unsafe {
            if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
                notify(self.ctx.ctx, class, event.as_ptr(), self.name.raw());
            }
        }
    }

    /// Tells WATCH and client-side caching that the key changed. The module turns off the
    /// implicit signal at close, so that refused calls do not break a client's WATCH.
    pub fn signal_modified(&self) {
        // SAFETY: ctx and name are live.
        unsafe {
            if let Some(signal) = raw::RedisModule_SignalModifiedKey {
                signal(self.ctx.ctx, self.name.raw());
            }
        }
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if !self.key.is_null() {
            raw::close_key(self.key);
        }
    }
}

/// Puts `new` in place of the value of `key` (an open key of our type), keeping its expiry,
/// without freeing the old value (see [`storage::Replace`]).
///
/// # Safety
/// `key` must be a key of our type open for writing, `new` a value from `storage`.
unsafe fn replace_value(key: *mut std::ffi::c_void, new: *mut std::ffi::c_void) -> bool {
    // SAFETY: reading an API pointer the server filled in at load.
    let Some(replace) = (unsafe { raw::RedisModule_ModuleTypeReplaceValue }) else {
        return false;
    };
    let mut old = std::ptr::null_mut();
    // SAFETY: as the caller promises; Redis hands the old value back in `old`, which the
    // caller frees.
    let status = unsafe { replace(key.cast(), *LIMITER_TYPE.raw_type.borrow(), new, &mut old) };
    status == raw::REDISMODULE_OK as c_int
}
