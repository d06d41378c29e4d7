//! A limiter key opened through the raw module API: typed access to its value, absolute
//! expiry and deletion. The crate's key wrappers hide the raw key, which absolute expiry needs.

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::{raw, Context};

use crate::algo::Millis;
use crate::api::Arg;
use crate::datatype::LIMITER_TYPE;
use crate::error::Error;
use crate::value::{self, Held, Limiter};

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

    /// The limiter the key holds, `None` for a missing key, WRONGTYPE for another type.
    #[inline(always)]
    pub fn limiter(&mut self) -> Result<Option<Held<'_>>, Error> {
        if self.key.is_null() {
            return Ok(None);
        }
        // SAFETY: the key is open; the value of a key of our type always comes from
        // `value::into_raw`, in `set` or in the type's load/copy callbacks, and the borrow
        // of `self` keeps it from being replaced while lent.
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
                let raw = get_value(self.key);
                if let Some(u) = value::unreadable(raw) {
                    return Err(Error::Unreadable(u.reason));
                }
                let replace = (self.key.cast(), replace_value as value::Replace);
                return Ok(value::borrow_raw(raw, Some(replace)));
            }
            let Some(key_type) = raw::RedisModule_KeyType else {
                return Err(Error::MissingApi("KeyType"));
            };
            let kind = raw::KeyType::from(key_type(self.key));
            match kind {
                raw::KeyType::Empty => Ok(None),
                _ => Err(Error::WrongType),
            }
        }
    }

    /// Whether the key holds a value of ours (readable or not), false for a missing key;
    /// WRONGTYPE for another type.
    pub fn holds_ours(&self) -> Result<bool, Error> {
        if self.key.is_null() {
            return Ok(false);
        }
        // SAFETY: the key is open.
        unsafe {
            let (Some(get_type), Some(key_type)) =
                (raw::RedisModule_ModuleTypeGetType, raw::RedisModule_KeyType)
            else {
                return Err(Error::MissingApi("ModuleTypeGetType"));
            };
            let t = get_type(self.key);
            if !t.is_null() && t == *LIMITER_TYPE.raw_type.borrow() {
                return Ok(true);
            }
            match raw::KeyType::from(key_type(self.key)) {
                raw::KeyType::Empty => Ok(false),
                _ => Err(Error::WrongType),
            }
        }
    }

    /// Stores `limiter`, replacing (and freeing) any previous limiter. Redis drops the TTL.
    pub fn set(&self, limiter: Limiter) -> Result<(), Error> {
        self.set_raw(value::into_raw(limiter))
    }

    /// Stores a value made by `value::into_raw` or `value::unreadable_into_raw` (freed here
    /// if Redis does not take it), replacing any previous one. Redis drops the TTL.
    pub fn set_raw(&self, value: *mut std::ffi::c_void) -> Result<(), Error> {
        // `let ... else` rather than `ok_or` (see `limiter`).
        let Some(set_value) = (unsafe { raw::RedisModule_ModuleTypeSetValue }) else {
            // SAFETY: not taken by Redis: still ours to free.
            unsafe { value::free_raw(value) };
            return Err(Error::MissingApi("ModuleTypeSetValue"));
        };
        // SAFETY: the key is open for writing; on success Redis owns the value and frees it
        // through the type's free callback.
        let status = unsafe { set_value(self.key, *LIMITER_TYPE.raw_type.borrow(), value) };
        if status == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            // SAFETY: Redis refused the value, so it is still ours to free.
            unsafe { value::free_raw(value) };
            Err(Error::Internal("storing the limiter"))
        }
    }

    /// Makes the key expire at `at`, an absolute Unix time in milliseconds, so that replicas
    /// and the AOF get the same moment whatever their own clocks say.
    pub fn expire_at(&self, at: Millis) {
        let at = i64::try_from(at).unwrap_or(i64::MAX);
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
    pub fn expires_at(&self) -> Option<Millis> {
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
        u64::try_from(at).ok()
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
/// without freeing the old value (see [`value::Replace`]).
///
/// # Safety
/// `key` must be a key of our type open for writing, `new` a value from `value::into_raw`.
unsafe fn replace_value(key: *mut std::ffi::c_void, new: *mut std::ffi::c_void) -> bool {
    let Some(replace) = raw::RedisModule_ModuleTypeReplaceValue else {
        return false;
    };
    let mut old = std::ptr::null_mut();
    // SAFETY: as the caller promises; Redis hands the old value back in `old`, which the
    // caller frees.
    let status = unsafe { replace(key.cast(), *LIMITER_TYPE.raw_type.borrow(), new, &mut old) };
    status == raw::REDISMODULE_OK as c_int
}

/// The server's clock in Unix milliseconds.
pub fn now_ms() -> i64 {
    // SAFETY: Milliseconds takes no arguments and exists on every supported server.
    unsafe { raw::RedisModule_Milliseconds.map_or(0, |f| f()) }
}
