//! The few raw module-API calls the command path needs, each behind a safe function.
//!
//! Commands are registered and dispatched here rather than through the crate's `Context` /
//! `Vec<RedisString>` path: on a call that costs well under a microsecond, retaining and
//! freeing every argument and building a `Vec` of reply values were measurable.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_longlong, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{raw, Context};
use smallvec::SmallVec;

use crate::core::error::Error;
use crate::core::kind::Reply;
use crate::core::meta::{Info, Keys};
use crate::core::Decision;

/// A command argument exactly as the client sent it; valid for the whole command call.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Arg(*mut raw::RedisModuleString);

impl Arg {
    /// A string Redis lends for the duration of a call (a keyspace event's key, say).
    pub fn from_raw(s: *mut raw::RedisModuleString) -> Arg {
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
    fn allowed(&self) -> bool {
        match self {
            Answer::One(r) => allowed(r),
            Answer::Written(allowed) => *allowed,
            Answer::Blocked => true,
        }
    }
}

/// Whether a reply allowed (true for one that is not a decision).
pub fn allowed(r: &Reply) -> bool {
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

/// Counts the outcome of each call (INFO's counters, kept by the command layer).
pub trait Count: Sync {
    /// `Some(allowed)` for an answer, `None` for an error reply.
    fn count(&self, outcome: Option<bool>);
}

/// Replies five integers with the API's own functions, without the crate's wrappers: six
/// calls on every answer.
///
/// # Safety
/// `ctx` must be a context that may reply.
unsafe fn reply_ints(ctx: *mut raw::RedisModuleCtx, v: [i64; 5]) {
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
unsafe fn answer(ctx: *mut raw::RedisModuleCtx, a: &Answer) {
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
/// when allowed), then each limiter's entry.
pub fn reply_hit(ctx: &Context, d: &Decision, refused_by: Option<&[u8]>, each: &[Reply]) {
    // SAFETY: ctx is the context of the command being answered, which may reply.
    unsafe {
        if let (Some(array), Some(long_long), Some(bulk), Some(null)) = (
            raw::RedisModule_ReplyWithArray,
            raw::RedisModule_ReplyWithLongLong,
            raw::RedisModule_ReplyWithStringBuffer,
            raw::RedisModule_ReplyWithNull,
        ) {
            array(ctx.ctx, 6 + each.len() as std::os::raw::c_long);
            for v in d.as_reply() {
                long_long(ctx.ctx, v);
            }
            match refused_by {
                Some(name) => bulk(ctx.ctx, name.as_ptr().cast::<c_char>(), name.len()),
                None => null(ctx.ctx),
            };
            for r in each {
                reply(ctx.ctx, r);
            }
        }
    }
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
    let outcome = catch_unwind(AssertUnwindSafe(|| H::run(&context, args))).unwrap_or_else(|_| {
        context.log_warning(&format!("ratelimit: internal error in {name}"));
        Err(Error::Internal(name))
    });
    if let Some(c) = H::counters() {
        match &outcome {
            Ok(Answer::Blocked) => {}
            Ok(a) => c.count(Some(a.allowed())),
            Err(_) => c.count(None),
        }
    }
    // SAFETY: ctx is the command's.
    unsafe {
        match outcome {
            Ok(a) => answer(ctx, &a),
            Err(Error::Arity) => {
                if let Some(wrong_arity) = raw::RedisModule_WrongArity {
                    wrong_arity(ctx);
                }
            }
            Err(e) => reply_error(ctx, &e.to_string()),
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// Replies `[allowed, limit, remaining, retry_after_ms, reset_after_ms, lease-id]`, the id
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
pub fn replicate_expire_at(ctx: &Context, key: Arg, at: u64) {
    // SAFETY: reading the API function pointer the server filled in at load time.
    let Some(rep) = (unsafe { raw::RedisModule_Replicate }) else {
        return;
    };
    let at = c_longlong::try_from(at).unwrap_or(c_longlong::MAX);
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

/// Adds the module's own ACL category, `@name`, where the server lets modules add categories
/// (`RedisModule_AddACLCategory`: Redis 7.4, Valkey 8.0). Returns whether the category now
/// exists for this module: false where the API is missing or refused it (the name is taken,
/// or the server has no room for another category).
pub fn add_acl_category(ctx: &Context, name: &CStr) -> bool {
    // SAFETY: called from OnLoad with the module's context; `name` is a C string.
    unsafe {
        match raw::RedisModule_AddACLCategory {
            Some(add) => add(ctx.ctx, name.as_ptr()) == raw::REDISMODULE_OK as c_int,
            None => false,
        }
    }
}

/// How far a command's ACL categories could be set, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Acl {
    /// Every category asked for.
    All,
    /// The standard ones only: the server refused the module's own category.
    WithoutOwn,
    /// None: the server has no ACL category API for module commands (7.0), or refused even
    /// the standard categories. The command is then granted by name (`+rl.slide`).
    None,
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
    super::cmdinfo::set(ctx, info, H::choices());
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

// ---------------------------------------------------------------------------------------
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
pub fn unblock(bc: BlockedClient, privdata: *mut c_void) {
    // SAFETY: bc is a blocked client not unblocked before (the caller removed it from
    // every list that could unblock it again).
    unsafe {
        if let Some(f) = raw::RedisModule_UnblockClient {
            f(bc, privdata);
        }
    }
}

/// What `unblock` handed to the reply callback running with `ctx`.
pub fn blocked_privdata(ctx: *mut raw::RedisModuleCtx) -> *mut c_void {
    // SAFETY: ctx is a reply callback's context.
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

/// Whether the calling client's ACL user may run the command `words` (its name first): for
/// a command that only a user with such rights may run by hand. False where the server
/// cannot tell (it lacks the API, or the client has no user).
pub fn may_run(ctx: &Context, words: &[&[u8]]) -> bool {
    // SAFETY: reading the API function pointers the server filled in at load time.
    let api = unsafe {
        (
            raw::RedisModule_GetCurrentUserName,
            raw::RedisModule_GetModuleUserFromUserName,
            raw::RedisModule_ACLCheckCommandPermissions,
            raw::RedisModule_FreeModuleUser,
            raw::RedisModule_CreateString,
            raw::RedisModule_FreeString,
        )
    };
    let (Some(user_name), Some(user_of), Some(check), Some(free_user), Some(create), Some(free)) =
        api
    else {
        return false;
    };
    // SAFETY: ctx is the command's context; every string made here is freed below, and the
    // user is freed once checked.
    unsafe {
        let name = user_name(ctx.ctx);
        if name.is_null() {
            return false;
        }
        let user = user_of(name);
        free(ctx.ctx, name);
        if user.is_null() {
            return false;
        }
        let mut argv: SmallVec<[*mut raw::RedisModuleString; 4]> = words
            .iter()
            .map(|w| create(ctx.ctx, w.as_ptr().cast::<c_char>(), w.len()))
            .collect();
        let allowed = argv.iter().all(|s| !s.is_null())
            && check(user, argv.as_mut_ptr(), argv.len() as c_int) == raw::REDISMODULE_OK as c_int;
        for s in argv.into_iter().filter(|s| !s.is_null()) {
            free(ctx.ctx, s);
        }
        free_user(user);
        allowed
    }
}

impl Count for crate::core::meta::Stats {
    fn count(&self, outcome: Option<bool>) {
        crate::core::meta::Stats::count(self, outcome);
    }
}

/// The server's clock in Unix milliseconds.
pub fn now_ms() -> i64 {
    // SAFETY: Milliseconds takes no arguments and exists on every supported server.
    unsafe { raw::RedisModule_Milliseconds.map_or(0, |f| f()) }
}
