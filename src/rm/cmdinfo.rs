//! `COMMAND INFO` / `COMMAND DOCS` metadata: real arity, key specs and argument docs.
//!
//! Commands are registered from a plain list (the crate's `#[command]` macro needs 7.2 and
//! refuses to load on 7.0), which leaves arity -1 and a generic key spec. Where the server has
//! `RedisModule_SetCommandInfo` (7.0+) we fill in the real metadata; elsewhere we skip it.

use std::ffi::CString;
use std::os::raw::c_int;
use std::ptr;

use redis_module::raw;
use redis_module::Context;

use crate::core::meta::{Arg, ArgKind, Info, Keys};

/// Strings kept alive until `SetCommandInfo` has copied them.
#[derive(Default)]
struct Strings(Vec<CString>);

impl Strings {
    fn add(&mut self, s: &str) -> *const std::os::raw::c_char {
        let c = CString::new(s).unwrap_or_default();
        let p = c.as_ptr();
        self.0.push(c);
        p
    }
}

fn build_args(
    args: &[Arg],
    choices: &[Arg],
    strings: &mut Strings,
    keep: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> *mut raw::RedisModuleCommandArg {
    let mut out: Vec<raw::RedisModuleCommandArg> = args
        .iter()
        .map(|a| {
            // A choice among arguments given at load (`choices`) when its metadata has none.
            let sub = match (a.kind, a.sub) {
                (ArgKind::OneOf, []) => choices,
                (_, sub) => sub,
            };
            let subargs = if sub.is_empty() {
                ptr::null_mut()
            } else {
                build_args(sub, &[], strings, keep)
            };
            let mut flags = 0;
            if a.optional {
                flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
            }
            if a.multiple {
                flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
            }
            raw::RedisModuleCommandArg {
                name: strings.add(a.name),
                type_: match a.kind {
                    ArgKind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
                    ArgKind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
                    ArgKind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
                    ArgKind::Block => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
                    ArgKind::PureToken => {
                        raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN
                    }
                    ArgKind::OneOf => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
                },
                key_spec_index: if matches!(a.kind, ArgKind::Key) {
                    0
                } else {
                    -1
                },
                token: a.token.map_or(ptr::null(), |t| strings.add(t)),
                summary: ptr::null(),
                since: ptr::null(),
                flags: flags as c_int,
                deprecated_since: ptr::null(),
                subargs,
                display_text: ptr::null(),
            }
        })
        .collect();
    // SAFETY: an all-zero RedisModuleCommandArg (null pointers, zero ints) is the terminator
    // the API expects.
    out.push(unsafe { std::mem::zeroed() });
    let p = out.as_mut_ptr();
    keep.push(out);
    p
}

/// Sets the metadata of an already registered command: `info`, with `args` as its
/// arguments and `choices` the choices of its argument of kind `OneOf` whose metadata has
/// none. Returns false (and logs) where the server refuses it; the command still works
/// then, with generic metadata.
pub fn set(ctx: &Context, info: &Info, args: &[Arg], choices: &[Arg]) -> bool {
    let keys = info.keys;
    // SAFETY: reading the API function pointers the server filled in at load time.
    let api = unsafe { (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandInfo) };
    let (Some(get_command), Some(set_info)) = api else {
        return false;
    };
    let mut strings = Strings::default();
    let name = strings.add(info.name);
    // SAFETY: ctx is the live module context during OnLoad; name is a valid C string.
    let command = unsafe { get_command(ctx.ctx, name) };
    if command.is_null() {
        return false;
    }
    let mut keep = Vec::new();
    let args = build_args(args, choices, &mut strings, &mut keep);
    let key_flags = if info.read_only() {
        raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS
    } else {
        raw::REDISMODULE_CMD_KEY_RW
            | raw::REDISMODULE_CMD_KEY_ACCESS
            | raw::REDISMODULE_CMD_KEY_UPDATE
    };
    // SAFETY: zeroed key specs are valid values for these plain C structs and unions; the
    // second one is the terminator.
    let mut key_specs: [raw::RedisModuleCommandKeySpec; 2] = unsafe { std::mem::zeroed() };
    key_specs[0].flags = u64::from(key_flags);
    key_specs[0].begin_search_type =
        raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    key_specs[0].bs.index.pos = match keys {
        Keys::Second => 2,
        Keys::Third => 3,
        _ => 1,
    };
    // A range from the search's start: (last key, step), as `(first, last, step)` says.
    let range = match keys {
        Keys::First | Keys::Second | Keys::Third => Some((0, 1)),
        Keys::Pairs => Some((-1, 2)),
        Keys::Counted | Keys::None => None,
    };
    match range {
        Some((lastkey, keystep)) => {
            key_specs[0].find_keys_type =
                raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
            key_specs[0].fk.range.lastkey = lastkey;
            key_specs[0].fk.range.keystep = keystep;
            key_specs[0].fk.range.limit = 0;
        }
        None => {
            // As ZUNION's: the count at the search's start, the keys right after it.
            key_specs[0].find_keys_type =
                raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
            key_specs[0].fk.keynum.keynumidx = 0;
            key_specs[0].fk.keynum.firstkey = 1;
            key_specs[0].fk.keynum.keystep = 1;
        }
    }
    if keys == Keys::None {
        // SAFETY: as above; a command without keys has only the terminator.
        key_specs[0] = unsafe { std::mem::zeroed() };
    }
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let command_info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: strings.add(info.summary),
        complexity: strings.add(info.complexity),
        since: strings.add(env!("CARGO_PKG_VERSION")),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity: info.arity,
        key_specs: key_specs.as_mut_ptr(),
        args,
    };
    // SAFETY: every pointer in command_info points into `strings`, `keep`, `key_specs` or
    // `version`, all alive until after this call; Redis copies what it keeps.
    let status = unsafe { set_info(command, &command_info) };
    if status != raw::REDISMODULE_OK as c_int {
        ctx.log_warning(&format!("could not set COMMAND INFO for {}", info.name));
        return false;
    }
    true
}
