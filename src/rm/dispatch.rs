//! Commands: registered from their metadata and dispatched to their handlers, rather than
//! through the crate's `Context` / `Vec<RedisString>` path: on a call that costs well under
//! a microsecond, retaining and freeing every argument and building a `Vec` of reply values
//! were measurable.

use std::ffi::CStr;
use std::os::raw::c_int;

use redis_module::{raw, Context};

use super::acl::Acl;
use super::arg::Arg;
use super::guard::guard;
use super::reply::{answer, reply_error, Answer};
use crate::core::error::Error;
use crate::core::meta::{Info, Keys};

/// Counts the outcome of each call (INFO's counters, kept by the command layer).
pub trait Count: Sync {
    /// `Some(allowed)` for an answer, `None` for an error reply.
    fn count(&self, outcome: Option<bool>);
}

/// A registered command: what its C entry point ([`entry`]) runs.
pub trait Handler: 'static {
    /// Its metadata (name, flags, key positions...).
    const INFO: &'static Info;
    /// The counters its outcomes go to, if any.
    fn counters() -> Option<&'static dyn Count>;
    /// Runs a call.
    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error>;
    /// Where its keys are, for a command whose keys no range describes
    /// ([`Keys::Counted`]): asked by Redis for routing, ACL and `COMMAND GETKEYS`.
    fn keys(_args: &[Arg]) -> std::ops::Range<usize> {
        0..0
    }
    /// The choices of its argument of kind `OneOf` whose choices its metadata leaves to
    /// the load (`RL.ALL`'s limiters: the kinds that may be one).
    fn choices() -> &'static [crate::core::meta::Arg] {
        &[]
    }
    /// Its `COMMAND DOCS` arguments: its metadata's, or what its grammar gives.
    fn args() -> Vec<crate::core::meta::Arg> {
        Self::INFO.args.to_vec()
    }
}

/// The C entry point of a command: runs its handler so that a bug becomes an error reply
/// and a log line instead of a crash, counts the outcome, and replies.
///
/// # Safety
/// Called by Redis with the arguments it calls a command function with.
pub unsafe extern "C" fn entry<H: Handler>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let args: &[Arg] = match usize::try_from(argc) {
        // SAFETY: Redis passes `argc` valid string pointers; Arg is a transparent wrapper.
        Ok(n) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv.cast::<Arg>(), n) },
        _ => &[],
    };
    if H::INFO.keys == Keys::Counted {
        // SAFETY: as Redis called us.
        if unsafe { report_keys(ctx, args, H::keys) } {
            return raw::REDISMODULE_OK as c_int;
        }
    }
    let context = Context::new(ctx);
    let name = H::INFO.name;
    // The call, its count and its reply run under the guard, so that the outcome is not
    // moved out of it; a panic before the reply is answered as an internal error.
    let mut answered = false;
    let done = guard(name, false, || {
        let outcome = H::run(&context, args);
        if let Some(c) = H::counters() {
            match &outcome {
                Ok(Answer::Blocked) => {}
                Ok(a) => c.count(Some(a.allowed())),
                Err(_) => c.count(None),
            }
        }
        answered = true;
        // SAFETY: ctx is the command's.
        unsafe { respond(ctx, &outcome) };
        true
    });
    if !done && !answered {
        if let Some(c) = H::counters() {
            c.count(None);
        }
        reply_error(ctx, &Error::Internal(name).to_string());
    }
    raw::REDISMODULE_OK as c_int
}

/// Writes a command's outcome: its answer, or its error.
///
/// # Safety
/// `ctx` is the running command's.
#[inline(always)]
unsafe fn respond(ctx: *mut raw::RedisModuleCtx, outcome: &Result<Answer, Error>) {
    // SAFETY: as the caller promises.
    unsafe {
        match outcome {
            Ok(a) => answer(ctx, a),
            Err(Error::Arity) => {
                if let Some(wrong_arity) = raw::RedisModule_WrongArity {
                    wrong_arity(ctx);
                }
            }
            Err(e) => reply_error(ctx, &e.to_string()),
        }
    }
}

/// For a command registered with `getkeys-api`: when Redis calls it only to learn where its
/// keys are (cluster routing and CROSSSLOT, ACL key checks, `COMMAND GETKEYS`), reports the
/// positions `keys` finds in the arguments and returns true; the command must then do
/// nothing else.
///
/// # Safety
/// `ctx` must be what Redis passed to the command function.
unsafe fn report_keys(
    ctx: *mut raw::RedisModuleCtx,
    args: &[Arg],
    keys: fn(&[Arg]) -> std::ops::Range<usize>,
) -> bool {
    // SAFETY: reading the API function pointers the server filled in at load time, and
    // calling them with the command's context.
    unsafe {
        let (Some(is_request), Some(key_at)) = (
            raw::RedisModule_IsKeysPositionRequest,
            raw::RedisModule_KeyAtPos,
        ) else {
            return false;
        };
        if is_request(ctx) == 0 {
            return false;
        }
        for pos in keys(args) {
            if let Ok(pos) = c_int::try_from(pos) {
                key_at(ctx, pos);
            }
        }
    }
    true
}

/// Registers the command `H` from its metadata: its entry point, flags, legacy key range
/// (`getkeys-api` for keys no range describes), ACL categories (its standard ones, plus
/// `own`, the module's category, when it exists and the command is in it) and its
/// `COMMAND INFO` / `COMMAND DOCS` metadata. `None` when the command could not be created.
pub fn register<H: Handler>(ctx: &Context, own: Option<&str>) -> Option<Acl> {
    let info = H::INFO;
    let (range, getkeys) = match info.keys {
        Keys::First => ((1, 1, 1), ""),
        Keys::Second => ((2, 2, 1), ""),
        Keys::Third => ((3, 3, 1), ""),
        Keys::Pairs => ((1, -1, 2), ""),
        Keys::Counted => ((0, 0, 0), " getkeys-api"),
        Keys::None => ((0, 0, 0), ""),
    };
    let name = std::ffi::CString::new(info.name).ok()?;
    let flags = std::ffi::CString::new(format!("{}{getkeys}", info.flags)).ok()?;
    let own = own.filter(|_| info.own_category);
    let acl = create_command_at(
        ctx,
        &name,
        Some(entry::<H>),
        &flags,
        info.categories,
        own,
        range,
    )?;
    super::cmdinfo::set(ctx, info, &H::args(), H::choices());
    Some(acl)
}

/// Creates a command with the legacy key range `(first, last, step)` (`(0, 0, 0)` for a
/// command whose keys no range describes, which then has the `getkeys-api` flag and answers
/// [`report_keys`]), then sets its ACL categories where the server supports them
/// (`RedisModule_SetCommandACLCategories`: Redis and Valkey 7.2+): `categories` (standard
/// ones such as `write fast`) plus `own` (the module's category, when it exists). Redis takes
/// a category list whole or not at all, so when the full list is refused the command is
/// given `categories` alone rather than left in none.
fn create_command_at(
    ctx: &Context,
    name: &CStr,
    func: raw::RedisModuleCmdFunc,
    flags: &CStr,
    categories: &str,
    own: Option<&str>,
    (first, last, step): (c_int, c_int, c_int),
) -> Option<Acl> {
    // SAFETY: called from OnLoad with the module's context; all strings are C strings.
    unsafe {
        // `PARENT|sub`: a subcommand of a container made once, here, with the first.
        let created = match name.to_str().ok().and_then(|n| n.split_once('|')) {
            Some((parent, sub)) => {
                let (create, create_sub, get) = (
                    raw::RedisModule_CreateCommand?,
                    raw::RedisModule_CreateSubcommand?,
                    raw::RedisModule_GetCommand?,
                );
                let parent = std::ffi::CString::new(parent).ok()?;
                let sub = std::ffi::CString::new(sub.to_lowercase()).ok()?;
                let mut container = get(ctx.ctx, parent.as_ptr());
                if container.is_null() {
                    let none = c"";
                    create(ctx.ctx, parent.as_ptr(), None, none.as_ptr(), 0, 0, 0);
                    container = get(ctx.ctx, parent.as_ptr());
                }
                !container.is_null()
                    && create_sub(
                        container,
                        sub.as_ptr(),
                        func,
                        flags.as_ptr(),
                        first,
                        last,
                        step,
                    ) == raw::REDISMODULE_OK as c_int
            }
            None => {
                let create = raw::RedisModule_CreateCommand?;
                create(
                    ctx.ctx,
                    name.as_ptr(),
                    func,
                    flags.as_ptr(),
                    first,
                    last,
                    step,
                ) == raw::REDISMODULE_OK as c_int
            }
        };
        if !created {
            return None;
        }
        let (Some(get), Some(set_acl)) = (
            raw::RedisModule_GetCommand,
            raw::RedisModule_SetCommandACLCategories,
        ) else {
            return Some(Acl::None);
        };
        let command = get(ctx.ctx, name.as_ptr());
        if command.is_null() {
            ctx.log_warning(&format!(
                "ratelimit: no handle to {name:?}; no ACL categories"
            ));
            return Some(Acl::None);
        }
        let set = |list: &str| {
            std::ffi::CString::new(list)
                .is_ok_and(|list| set_acl(command, list.as_ptr()) == raw::REDISMODULE_OK as c_int)
        };
        match own {
            Some(own) => {
                if set(&format!("{categories} {own}")) {
                    return Some(Acl::All);
                }
                ctx.log_warning(&format!(
                    "ratelimit: {name:?} refused ACL categories \"{categories} {own}\"; \
                     setting \"{categories}\" alone"
                ));
                if set(categories) {
                    return Some(Acl::WithoutOwn);
                }
            }
            None if set(categories) => return Some(Acl::All),
            None => {}
        }
        ctx.log_warning(&format!(
            "ratelimit: {name:?} refused ACL categories \"{categories}\"; \
             grant it by name (+{})",
            name.to_string_lossy().to_lowercase()
        ));
        Some(Acl::None)
    }
}

impl Count for crate::core::meta::Stats {
    fn count(&self, outcome: Option<bool>) {
        crate::core::meta::Stats::count(self, outcome);
    }
}
