//! AOF rewrites without an RDB preamble (`aof-use-rdb-preamble no`): the module's aux data
//! (the policies) is written with the first key of the module's type the rewrite reaches
//! (`datatype::arm_aof_commands`), and what it could not write (no such key) is logged and
//! counted for `INFO` ([`missing_from_last_rewrite`]), the rewriting child process telling its
//! parent through a page they share.

use std::os::raw::c_void;

use redis_module::{raw, Context};

use super::server::aof_rdb_preamble;

/// Subscribes to the events an AOF rewrite goes through (see the module's docs).
pub fn init(ctx: &Context) {
    report::init();
    // SAFETY: called from OnLoad with the module's context; the callbacks live for ever.
    unsafe {
        if let Some(subscribe) = raw::RedisModule_SubscribeToServerEvent {
            let persistence_event = raw::RedisModuleEvent {
                id: raw::REDISMODULE_EVENT_PERSISTENCE,
                dataver: 1,
            };
            subscribe(ctx.ctx, persistence_event, Some(persistence));
            let fork_event = raw::RedisModuleEvent {
                id: raw::REDISMODULE_EVENT_FORK_CHILD,
                dataver: 1,
            };
            subscribe(ctx.ctx, fork_event, Some(fork_child));
        }
    }
}

/// An AOF rewrite is being written by this process (from its start to its end).
static REWRITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How many of the aux data's commands the last AOF rewrite could not write.
static LAST_MISSING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many policies (commands of the aux data) the last AOF rewrite without an RDB
/// preamble could not write, for want of a key of the module's type: a restart from that
/// AOF would lack them. 0 when it wrote them all, or had a preamble.
pub fn missing_from_last_rewrite() -> u64 {
    LAST_MISSING.load(std::sync::atomic::Ordering::Relaxed)
}

unsafe extern "C" fn persistence(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    use std::sync::atomic::Ordering::Relaxed;
    if ctx.is_null() {
        return;
    }
    let context = Context::new(ctx);
    let run = || match subevent {
        // Fired in the process that writes the AOF (the forked child).
        raw::REDISMODULE_SUBEVENT_PERSISTENCE_AOF_START
        | raw::REDISMODULE_SUBEVENT_PERSISTENCE_SYNC_AOF_START => {
            REWRITING.store(true, Relaxed);
            if !aof_rdb_preamble(&context) {
                super::datatype::arm_aof_commands();
            }
        }
        raw::REDISMODULE_SUBEVENT_PERSISTENCE_ENDED
        | raw::REDISMODULE_SUBEVENT_PERSISTENCE_FAILED => {
            if !REWRITING.swap(false, Relaxed) {
                return;
            }
            let missing = super::datatype::finish_aof_commands();
            if subevent != raw::REDISMODULE_SUBEVENT_PERSISTENCE_ENDED {
                return;
            }
            if !missing.is_empty() {
                let names: Vec<String> = missing
                    .iter()
                    .filter_map(|words| words.get(2))
                    .map(|n| String::from_utf8_lossy(n).into_owned())
                    .collect();
                context.log_warning(&format!(
                    "ratelimit: this AOF rewrite (aof-use-rdb-preamble no) reached no key of \
                     the module's type, with which alone a module writes to it: it holds none \
                     of the {} policies ({}), and a restart from it would have none; set \
                     aof-use-rdb-preamble yes, or set them again after such a restart",
                    names.len(),
                    names.join(", ")
                ));
            }
            report::write(missing.len() as u64);
        }
        _ => {}
    };
    super::guard::guard("an AOF rewrite", (), run);
}

unsafe extern "C" fn fork_child(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent == raw::REDISMODULE_SUBEVENT_FORK_CHILD_DIED {
        // In the parent: what a rewriting child reported, if it did.
        super::guard::guard("a child process's end", (), report::read);
    }
}

/// What a rewriting child tells its parent: one page shared across `fork`, made at load.
mod report {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::OnceLock;

    /// The page's words: whether a report is there to read, and what it says.
    struct Page {
        fresh: AtomicU64,
        missing: AtomicU64,
    }

    /// The page's address (the mapping lives as long as the process).
    static PAGE: OnceLock<usize> = OnceLock::new();
    /// This process's id at load: the server's own (a child's differs).
    static SERVER_PID: OnceLock<u32> = OnceLock::new();

    fn page() -> Option<&'static Page> {
        let at = *PAGE.get()?;
        // SAFETY: `at` is a live, page-aligned, zeroed mapping of a page, never unmapped,
        // holding only atomics (any bytes are valid for them).
        Some(unsafe { &*(at as *const Page) })
    }

    pub fn init() {
        let _ = SERVER_PID.set(std::process::id());
        if PAGE.get().is_some() {
            return;
        }
        // SAFETY: an anonymous shared mapping of one page, checked before use.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if at != libc::MAP_FAILED && !at.is_null() {
            let _ = PAGE.set(at as usize);
        }
    }

    /// Reports what the rewrite in this process could not write: to the parent from a
    /// child, or at once in the server's own process.
    pub fn write(missing: u64) {
        if SERVER_PID.get() == Some(&std::process::id()) {
            super::LAST_MISSING.store(missing, Relaxed);
            return;
        }
        if let Some(p) = page() {
            p.missing.store(missing, Relaxed);
            p.fresh.store(1, std::sync::atomic::Ordering::Release);
        }
    }

    /// In the parent, once a child has ended: takes its report, if it left one.
    pub fn read() {
        if let Some(p) = page() {
            if p.fresh.swap(0, std::sync::atomic::Ordering::Acquire) == 1 {
                super::LAST_MISSING.store(p.missing.load(Relaxed), Relaxed);
            }
        }
    }
}
