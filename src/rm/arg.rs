//! Command arguments as Redis lends them ([`Arg`]), and strings the module makes and keeps
//! ([`OwnedString`]).

use std::mem::MaybeUninit;
use std::os::raw::c_char;

use redis_module::{raw, Context};

/// A command argument exactly as the client sent it; valid for the whole command call.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Arg(*mut raw::RedisModuleString);

impl Arg {
    /// A string Redis lends for the duration of a call (a keyspace event's key, say).
    ///
    /// # Safety
    /// `s` must be a live string for as long as the `Arg` is used (its bytes are read
    /// through it).
    pub unsafe fn from_raw(s: *mut raw::RedisModuleString) -> Arg {
        Arg(s)
    }

    pub fn raw(self) -> *mut raw::RedisModuleString {
        self.0
    }

    /// The argument's bytes, as long as the call lasts.
    #[inline(always)]
    pub fn as_bytes(&self) -> &[u8] {
        let mut len = 0usize;
        // SAFETY: the string is one of the command's arguments, alive until the command
        // returns, and StringPtrLen gives a pointer to its `len` bytes.
        unsafe {
            let Some(ptr_len) = raw::RedisModule_StringPtrLen else {
                return &[];
            };
            let p = ptr_len(self.0, &mut len);
            if p.is_null() {
                return &[];
            }
            std::slice::from_raw_parts(p.cast::<u8>(), len)
        }
    }
}

/// The bytes of `args`, what a parser reads, written into `buf` (which needs no clearing:
/// each slot is written once before it is read); `None` when `buf` cannot hold them.
#[inline(always)]
pub fn words_into<'a, 'b>(
    buf: &'b mut [MaybeUninit<&'a [u8]>],
    args: &'a [Arg],
) -> Option<&'b [&'a [u8]]> {
    let written = buf.get_mut(..args.len())?;
    // SAFETY: reading an API function pointer the server filled in at load time. Read
    // once, not once an argument (a call through it could, as far as the compiler knows,
    // change it). Without it, the caller's fallback reads every argument as empty.
    let ptr_len = unsafe { raw::RedisModule_StringPtrLen }?;
    for (slot, a) in written.iter_mut().zip(args) {
        let mut len = 0usize;
        // SAFETY: as in `Arg::as_bytes`: an argument of the command, alive until it
        // returns, and StringPtrLen gives a pointer to its `len` bytes.
        let p = unsafe { ptr_len(a.0, &mut len) };
        slot.write(match p.is_null() {
            true => &[],
            // SAFETY: as above.
            false => unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) },
        });
    }
    // SAFETY: every slot of `written` was just written, and `MaybeUninit<T>` has the
    // layout of `T`.
    Some(unsafe { std::slice::from_raw_parts(written.as_ptr().cast(), written.len()) })
}

// Blocking clients and timers, for a call that waits (`BLOCK`, see `engine::wait`).

/// A string the module made (a key name kept by a timer), freed on drop.
pub struct OwnedString {
    ctx: *mut raw::RedisModuleCtx,
    s: *mut raw::RedisModuleString,
}

impl OwnedString {
    pub fn new(ctx: &Context, bytes: &[u8]) -> Option<OwnedString> {
        // SAFETY: ctx is live; Redis copies the bytes.
        let s = unsafe {
            raw::RedisModule_CreateString?(ctx.ctx, bytes.as_ptr().cast::<c_char>(), bytes.len())
        };
        (!s.is_null()).then_some(OwnedString { ctx: ctx.ctx, s })
    }

    pub fn arg(&self) -> Arg {
        Arg(self.s)
    }
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        // SAFETY: the string was made by CreateString with this context (which the module
        // does not auto-free) and is freed once.
        unsafe {
            if let Some(free) = raw::RedisModule_FreeString {
                free(self.ctx, self.s);
            }
        }
    }
}

/// A string the module keeps past the command that made it (a reference of its own, taken
/// with no context, as Redis allows), given back on drop; lent to a call as an
/// [`OwnedString`] holding a reference of its own ([`KeptString::lend`]).
pub struct KeptString(*mut raw::RedisModuleString);

impl KeptString {
    /// Keeps `s` (one more reference to the same string).
    pub fn retain(s: &OwnedString) -> Option<KeptString> {
        // SAFETY: `s` is alive; with no context, RetainString only counts one more
        // reference, which this value's drop gives back.
        unsafe { raw::RedisModule_RetainString?(std::ptr::null_mut(), s.s) };
        Some(KeptString(s.s))
    }

    /// The string for one call: a reference of its own, given back when the call drops
    /// it (the string itself lives while the module keeps it).
    pub fn lend(&self) -> Option<OwnedString> {
        // SAFETY: as in `retain`; the OwnedString's drop (FreeString with no context)
        // gives the reference back.
        unsafe { raw::RedisModule_RetainString?(std::ptr::null_mut(), self.0) };
        Some(OwnedString {
            ctx: std::ptr::null_mut(),
            s: self.0,
        })
    }
}

impl Drop for KeptString {
    fn drop(&mut self) {
        // SAFETY: the reference taken by `retain`, given back once, with no context.
        unsafe {
            if let Some(free) = raw::RedisModule_FreeString {
                free(std::ptr::null_mut(), self.0);
            }
        }
    }
}
