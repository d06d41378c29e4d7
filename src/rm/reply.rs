//! Writing answers: a command's reply (five integers, a lease, `RL.ALL`'s and `RL.HIT`'s
//! arrays, an error) with the API's own functions, and `INFO` fields.

use std::os::raw::c_char;

use redis_module::{raw, Context};

use crate::core::kind::Reply;
use crate::core::Decision;

/// The entries of `RL.ALL`'s answer kept on the stack.
pub const ALL_INLINE: usize = 4;

/// What a command answers, as the dispatcher counts and writes it. Kept small (every call
/// returns one): a command whose reply has many parts writes it itself ([`reply_all`]).
pub enum Answer {
    /// One reply.
    One(Reply),
    /// Written already ([`reply_all`]): whether it allowed, for the counters.
    Written(bool),
    /// The client is blocked: it is answered later, and counted then.
    Blocked,
}

impl Answer {
    /// For the INFO counters: whether a decision allowed (true for an answer that is not a
    /// decision).
    pub(super) fn allowed(&self) -> bool {
        match self {
            Answer::One(r) => allowed(r),
            Answer::Written(allowed) => *allowed,
            Answer::Blocked => true,
        }
    }
}

/// Whether a reply allowed (true for one that is not a decision).
#[inline(always)]
pub fn allowed(r: &Reply) -> bool {
    // The usual reply first: a test and a load.
    if let Reply::Decision(d) = r {
        return d.allowed;
    }
    match r {
        Reply::Decision(d) | Reply::Lease(d, _) => d.allowed,
        // CL.THROTTLE's: `limited` first.
        Reply::Ints(v) => v[0] == 0,
        _ => true,
    }
}

/// Writes the field `name:value` in the current section of an `INFO` answer (the server
/// prefixes the module's name), both given as bytes through `scratch`, a buffer kept by the
/// caller for the next field: no allocation per field. Neither may hold NUL, CR or LF,
/// nor `name` a `:` (each would be cut or break the line: the callers' names and values
/// are made of checked names and numbers).
pub fn info_field(
    ctx: &redis_module::InfoContext,
    name: &[u8],
    value: &[u8],
    scratch: &mut Vec<u8>,
) {
    scratch.clear();
    scratch.extend_from_slice(name);
    scratch.push(0);
    let at = scratch.len();
    scratch.extend_from_slice(value);
    scratch.push(0);
    // SAFETY: both strings are NUL-terminated in `scratch`, which outlives the call; the
    // server copies them into its answer.
    unsafe {
        if let Some(add) = raw::RedisModule_InfoAddFieldCString {
            add(
                ctx.ctx,
                scratch.as_ptr().cast::<c_char>(),
                scratch.as_ptr().add(at).cast::<c_char>(),
            );
        }
    }
}

/// Replies five integers with the API's own functions, without the crate's wrappers: six
/// calls on every answer.
///
/// # Safety
/// `ctx` must be a context that may reply.
unsafe fn reply_ints(ctx: *mut raw::RedisModuleCtx, v: [i64; 5]) {
    // SAFETY: reading API pointers the server filled in at load, and replying on a context
    // that may reply (the caller's promise).
    unsafe {
        if let (Some(array), Some(long_long)) = (
            raw::RedisModule_ReplyWithArray,
            raw::RedisModule_ReplyWithLongLong,
        ) {
            array(ctx, 5);
            for v in v {
                long_long(ctx, v);
            }
        }
    }
}

/// Writes a reply.
///
/// # Safety
/// `ctx` must be a context that may reply (a command's, or a blocked client's reply
/// callback's).
pub unsafe fn reply(ctx: *mut raw::RedisModuleCtx, r: &Reply) {
    // SAFETY: as the caller promises.
    unsafe {
        match r {
            Reply::Decision(d) => reply_ints(ctx, d.as_reply()),
            Reply::Ints(v) => reply_ints(ctx, *v),
            Reply::Nil => {
                raw::reply_with_null(ctx);
            }
            Reply::Ok => {
                raw::reply_with_simple_string(ctx, c"OK".as_ptr());
            }
            Reply::Lease(d, id) => reply_lease(ctx, d, id.as_deref()),
        }
    }
}

/// Writes an answer.
///
/// # Safety
/// `ctx` must be the context of the command being answered.
pub(super) unsafe fn answer(ctx: *mut raw::RedisModuleCtx, a: &Answer) {
    // SAFETY: as the caller promises.
    unsafe {
        match a {
            Answer::One(r) => reply(ctx, r),
            // Written by the command; or answered later, from the blocked client's reply
            // callback.
            Answer::Written(_) | Answer::Blocked => {}
        }
    }
}

/// Writes `RL.ALL`'s reply: the five fields of the call, then one array per limiter (a
/// client that reads the first five reads it as any `RL.*` reply). The command then answers
/// [`Answer::Written`].
pub fn reply_all(ctx: &Context, d: &Decision, each: &[Reply]) {
    // SAFETY: ctx is the context of the command being answered, which may reply.
    unsafe {
        if let (Some(array), Some(long_long)) = (
            raw::RedisModule_ReplyWithArray,
            raw::RedisModule_ReplyWithLongLong,
        ) {
            array(ctx.ctx, 5 + each.len() as std::os::raw::c_long);
            for v in d.as_reply() {
                long_long(ctx.ctx, v);
            }
            for r in each {
                reply(ctx.ctx, r);
            }
        }
    }
}

/// Replies `RL.HIT`'s answer: the five fields, the name of the limiter that refused (nil
/// when allowed), then each limiter's entry; under a policy with shadow limiters
/// (`shadow` is `Some`), then the name of the one that would have refused (nil when none).
pub fn reply_hit(
    ctx: &Context,
    d: &Decision,
    refused_by: Option<&[u8]>,
    each: &[Reply],
    shadow: Option<Option<&[u8]>>,
) {
    // SAFETY: ctx is the context of the command being answered, which may reply.
    unsafe {
        if let (Some(array), Some(long_long), Some(bulk), Some(null)) = (
            raw::RedisModule_ReplyWithArray,
            raw::RedisModule_ReplyWithLongLong,
            raw::RedisModule_ReplyWithStringBuffer,
            raw::RedisModule_ReplyWithNull,
        ) {
            let name_or_nil = |name: Option<&[u8]>| match name {
                Some(name) => bulk(ctx.ctx, name.as_ptr().cast::<c_char>(), name.len()),
                None => null(ctx.ctx),
            };
            let len = 6 + each.len() + usize::from(shadow.is_some());
            array(ctx.ctx, len as std::os::raw::c_long);
            for v in d.as_reply() {
                long_long(ctx.ctx, v);
            }
            name_or_nil(refused_by);
            for r in each {
                reply(ctx.ctx, r);
            }
            if let Some(name) = shadow {
                name_or_nil(name);
            }
        }
    }
}

/// Replies `[allowed, limit, remaining, retry_after_ms, reset_after, lease-id]`, the id
/// nil when there is none.
pub fn reply_lease(ctx: *mut raw::RedisModuleCtx, d: &Decision, id: Option<&[u8]>) {
    // SAFETY: ctx is a context that may reply (a command's, or a blocked client's reply
    // callback's); the id's bytes are copied by Redis.
    unsafe {
        let (Some(array), Some(long_long), Some(bulk)) = (
            raw::RedisModule_ReplyWithArray,
            raw::RedisModule_ReplyWithLongLong,
            raw::RedisModule_ReplyWithStringBuffer,
        ) else {
            return;
        };
        array(ctx, 6);
        for v in d.as_reply() {
            long_long(ctx, v);
        }
        match id {
            Some(id) => {
                bulk(ctx, id.as_ptr().cast::<c_char>(), id.len());
            }
            None => {
                raw::reply_with_null(ctx);
            }
        }
    }
}

/// Replies with `msg` as an error, bytes kept as they are (an error may quote a client's
/// UTF-8), except the ones RESP cannot carry in an error line. Not `raw::reply_with_error`:
/// it turns each character into one byte, and so aborts the server on a client's
/// non-ASCII argument that maps to NUL.
pub fn reply_error(ctx: *mut raw::RedisModuleCtx, msg: &str) {
    let bytes: Vec<u8> = msg
        .bytes()
        .map(|b| match b {
            b'\r' | b'\n' | 0 => b' ',
            b => b,
        })
        .collect();
    let Ok(msg) = std::ffi::CString::new(bytes) else {
        return; // unreachable: every NUL was replaced
    };
    // SAFETY: ctx is the command's context and msg a valid C string for the call.
    unsafe {
        if let Some(reply) = raw::RedisModule_ReplyWithError {
            reply(ctx, msg.as_ptr());
        }
    }
}
