//! The server the module runs in, and the events it subscribes to: which server and version
//! (for the options and accounting that differ), who serves a slot in a cluster (for callers
//! that waited while their slot moved), and the start of a load.

use std::ffi::CStr;
use std::os::raw::c_void;

use redis_module::{raw, Context};

static LOADING_START: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Calls `f` when the server starts loading a dataset in place of its own (an RDB, the AOF,
/// a full sync from a primary).
pub fn on_loading_start(ctx: &Context, f: fn()) {
    let _ = LOADING_START.set(f);
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_LOADING,
        dataver: 1,
    };
    // SAFETY: called from OnLoad with the module's context; the callback lives for ever.
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
            subscribe(ctx.ctx, event, Some(loading));
        }
    }
}

unsafe extern "C" fn loading(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    let start = matches!(
        subevent,
        raw::REDISMODULE_SUBEVENT_LOADING_RDB_START
            | raw::REDISMODULE_SUBEVENT_LOADING_AOF_START
            | raw::REDISMODULE_SUBEVENT_LOADING_REPL_START
    );
    if let (true, Some(f)) = (start, LOADING_START.get()) {
        super::guard::guard("the start of a load", (), f);
    }
}

/// The server the module runs in: Valkey (with its own version) or Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Server {
    pub valkey: bool,
    /// `(major, minor, patch)`: Valkey's own version on Valkey, else Redis's.
    pub version: (u32, u32, u32),
}

impl Server {
    pub fn name(self) -> &'static str {
        if self.valkey {
            "Valkey"
        } else {
            "Redis"
        }
    }
}

/// Which server this is, from `INFO server` (`valkey_version` on Valkey, `redis_version`
/// else); Redis 0.0.0 where the server cannot tell.
pub fn server(ctx: &Context) -> Server {
    let parse = |v: &str| {
        let mut parts = v.split('.').map(|p| p.trim().parse::<u32>().unwrap_or(0));
        (
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        )
    };
    // SAFETY: ctx is live; the info object is freed before returning, and the fields read
    // from it are copied first.
    unsafe {
        let (Some(get), Some(field), Some(free)) = (
            raw::RedisModule_GetServerInfo,
            raw::RedisModule_ServerInfoGetFieldC,
            raw::RedisModule_FreeServerInfo,
        ) else {
            return Server {
                valkey: false,
                version: (0, 0, 0),
            };
        };
        let info = get(ctx.ctx, c"server".as_ptr());
        if info.is_null() {
            return Server {
                valkey: false,
                version: (0, 0, 0),
            };
        }
        let read = |name: &CStr| -> Option<String> {
            let p = field(info, name.as_ptr());
            (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
        };
        let valkey = read(c"valkey_version");
        let redis = read(c"redis_version");
        free(ctx.ctx, info);
        match (valkey, redis) {
            (Some(v), _) => Server {
                valkey: true,
                version: parse(&v),
            },
            (None, Some(v)) => Server {
                valkey: false,
                version: parse(&v),
            },
            (None, None) => Server {
                valkey: false,
                version: (0, 0, 0),
            },
        }
    }
}

/// Who serves a slot, for a node of a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotOwner {
    /// This node (or no cluster).
    Me,
    /// Another node, at `ip:port`; `None` when the cluster does not say.
    Other(Option<String>),
}

/// Who serves `slot`, from `CLUSTER SLOTS` and `CLUSTER MYID`: this node for a server that is
/// not in a cluster, or when it cannot tell.
pub fn slot_owner(ctx: &Context, slot: u16) -> SlotOwner {
    use redis_module::RedisValue as V;
    if !ctx
        .get_flags()
        .contains(redis_module::ContextFlags::CLUSTER)
    {
        return SlotOwner::Me;
    }
    let text = |v: &V| match v {
        V::SimpleString(s) | V::BulkString(s) => Some(s.clone()),
        V::StringBuffer(b) => Some(String::from_utf8_lossy(b).into_owned()),
        V::BulkRedisString(s) => Some(s.to_string_lossy()),
        _ => None,
    };
    let Ok(me) = ctx.call("CLUSTER", &["MYID"]) else {
        return SlotOwner::Me;
    };
    let Some(me) = text(&me) else {
        return SlotOwner::Me;
    };
    let Ok(V::Array(ranges)) = ctx.call("CLUSTER", &["SLOTS"]) else {
        return SlotOwner::Me;
    };
    for range in ranges {
        let V::Array(fields) = range else { continue };
        let (Some(V::Integer(start)), Some(V::Integer(end)), Some(V::Array(primary))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        if !(*start..=*end).contains(&i64::from(slot)) {
            continue;
        }
        let id = primary.get(2).and_then(text);
        if id.as_deref() == Some(me.as_str()) {
            return SlotOwner::Me;
        }
        let ip = primary.first().and_then(text);
        let port = match primary.get(1) {
            Some(V::Integer(p)) => Some(*p),
            _ => None,
        };
        return SlotOwner::Other(ip.zip(port).map(|(ip, port)| format!("{ip}:{port}")));
    }
    // No node serves it (a cluster being changed): not this one.
    SlotOwner::Other(None)
}

/// Calls `callback` when a database is flushed (FLUSHDB, FLUSHALL).
pub fn subscribe_flush(ctx: &Context, callback: raw::RedisModuleEventCallback) {
    let event = raw::RedisModuleEvent {
        id: raw::REDISMODULE_EVENT_FLUSHDB,
        dataver: 1,
    };
    // SAFETY: called from OnLoad with the module's context; the callback lives for ever.
    unsafe {
        if let Some(f) = raw::RedisModule_SubscribeToServerEvent {
            f(ctx.ctx, event, callback);
        }
    }
}

/// Propagates the command being run as it is, to replicas and the AOF.
pub fn replicate_verbatim(ctx: &Context) {
    // SAFETY: ctx is the running command's.
    unsafe {
        if let Some(f) = raw::RedisModule_ReplicateVerbatim {
            f(ctx.ctx);
        }
    }
}

/// Whether AOF rewrites write an RDB preamble (`aof-use-rdb-preamble`, yes by default).
pub fn aof_rdb_preamble(ctx: &Context) -> bool {
    use redis_module::RedisValue as V;
    match ctx.call("CONFIG", &["GET", "aof-use-rdb-preamble"]) {
        Ok(V::Array(pair)) => !matches!(
            pair.get(1),
            Some(V::SimpleString(v) | V::BulkString(v)) if v.eq_ignore_ascii_case("no")
        ),
        _ => true,
    }
}

/// The server's clock in Unix milliseconds.
pub fn now_ms() -> i64 {
    // SAFETY: Milliseconds takes no arguments and exists on every supported server.
    unsafe { raw::RedisModule_Milliseconds.map_or(0, |f| f()) }
}

/// The server's clock.
pub fn now() -> crate::core::Instant {
    crate::core::Instant::from_ms(u64::try_from(now_ms()).unwrap_or(0))
}
