//! What goes to replicas and the AOF: a change's effect (`RL.APPLY key effect`), several at
//! once, and a key's absolute expiry.

use std::os::raw::{c_char, c_longlong};

use redis_module::{raw, Context};
use smallvec::SmallVec;

use super::arg::Arg;
use super::reply::ALL_INLINE;

/// `RedisModule_Replicate(ctx, "RL.APPLY", format, key, buffer, length, ...)`, one
/// `(key, effect)` pair per `sb` of the format.
macro_rules! replicate_apply {
    ($rep:expr, $ctx:expr, $format:literal, $(($key:expr, $effect:expr)),+) => {
        // SAFETY: the format takes, per change, a live string (the command's key argument),
        // then a buffer, which Redis copies, and its length.
        unsafe {
            $rep(
                $ctx.ctx,
                c"RL.APPLY".as_ptr(),
                $format.as_ptr(),
                $($key.raw(), $effect.as_ptr().cast::<c_char>(), $effect.len()),+
            );
        }
    };
}

/// Propagates `RL.APPLY key effect` to replicas and the AOF: the effect of a decision (see
/// `core::effect`). Two string arguments: the key, which Redis takes a reference to, and the
/// effect, which it copies.
pub fn replicate_effect(ctx: &Context, key: Arg, effect: &[u8]) {
    // SAFETY: reading the API function pointer the server filled in at load time.
    if let Some(rep) = unsafe { raw::RedisModule_Replicate } {
        replicate_apply!(rep, ctx, c"sb", (key, effect));
    }
}

/// Propagates several changes as one command, `RL.APPLY key effect [key effect ...]` (what
/// `RL.ALL` changes): one command name for Redis to look up, and no MULTI/EXEC around them.
pub fn replicate_effects(ctx: &Context, changes: &[(Arg, &[u8])]) {
    // Up to four changes (RL.ALL's usual calls) are passed as buffers, which Redis copies
    // into its own strings; more, as strings made here (which costs more).
    // SAFETY: reading the API function pointer the server filled in at load time.
    let Some(rep) = (unsafe { raw::RedisModule_Replicate }) else {
        return;
    };
    match changes {
        [] => return,
        [(key, effect)] => return replicate_effect(ctx, *key, effect),
        [(k1, e1), (k2, e2)] => return replicate_apply!(rep, ctx, c"sbsb", (k1, e1), (k2, e2)),
        [(k1, e1), (k2, e2), (k3, e3)] => {
            return replicate_apply!(rep, ctx, c"sbsbsb", (k1, e1), (k2, e2), (k3, e3))
        }
        [(k1, e1), (k2, e2), (k3, e3), (k4, e4)] => {
            return replicate_apply!(
                rep,
                ctx,
                c"sbsbsbsb",
                (k1, e1),
                (k2, e2),
                (k3, e3),
                (k4, e4)
            )
        }
        _ => {}
    }
    // SAFETY: reading the API function pointers the server filled in at load time.
    let api = unsafe { (raw::RedisModule_CreateString, raw::RedisModule_FreeString) };
    let (Some(create), Some(free)) = api else {
        return;
    };
    let mut argv: SmallVec<[*mut raw::RedisModuleString; 2 * ALL_INLINE]> = SmallVec::new();
    for (key, effect) in changes {
        // SAFETY: a copy of the effect's bytes, freed below once Redis holds its reference.
        let effect = unsafe { create(ctx.ctx, effect.as_ptr().cast::<c_char>(), effect.len()) };
        argv.push(key.raw());
        argv.push(effect);
    }
    // SAFETY: the format takes an array of live strings (the command's key arguments and the
    // effects just made) and its length; Redis takes a reference to each.
    unsafe {
        rep(
            ctx.ctx,
            c"RL.APPLY".as_ptr(),
            c"v".as_ptr(),
            argv.as_mut_ptr(),
            argv.len(),
        );
    }
    for effect in argv.iter().skip(1).step_by(2) {
        // SAFETY: each made above, freed once.
        unsafe { free(ctx.ctx, *effect) };
    }
}

/// Propagates `PEXPIREAT key at` to replicas and the AOF.
pub fn replicate_expire_at(ctx: &Context, key: Arg, at: crate::core::Instant) {
    // SAFETY: reading the API function pointer the server filled in at load time.
    let Some(rep) = (unsafe { raw::RedisModule_Replicate }) else {
        return;
    };
    let at = c_longlong::try_from(at.ms()).unwrap_or(c_longlong::MAX);
    // SAFETY: the format takes a live string (the command's key argument) and a long long.
    unsafe {
        rep(
            ctx.ctx,
            c"PEXPIREAT".as_ptr(),
            c"sl".as_ptr(),
            key.raw(),
            at,
        );
    }
}

/// Propagates `DEL key`: a key a command removed (`RL.POLICY UNBAN`), gone on replicas and
/// in the AOF too, whatever it held there.
pub fn replicate_del(ctx: &Context, key: Arg) {
    // SAFETY: reading the API function pointer the server filled in at load time; the
    // format takes one live string, which Redis takes a reference to.
    unsafe {
        if let Some(rep) = raw::RedisModule_Replicate {
            rep(ctx.ctx, c"DEL".as_ptr(), c"s".as_ptr(), key.raw());
        }
    }
}
