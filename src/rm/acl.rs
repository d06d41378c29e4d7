//! ACL: the module's own category, how far a command's categories could be set, and
//! whether the calling user may run a command.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

use redis_module::{raw, Context};
use smallvec::SmallVec;

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
