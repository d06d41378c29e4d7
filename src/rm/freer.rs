//! Frees big values away from Redis's main thread, as Redis's own lazy free does.
//!
//! Redis frees a module value in its lazy-free thread only when it may (UNLINK, and DEL,
//! expiry or eviction with the matching `lazyfree-lazy-*` option) and the type reports a
//! large `free_effort`. A plain `DEL` under the default settings frees it on the main
//! thread, whatever the effort: a key of 100,000 leases took about 5 ms there. So the type's
//! `free` callback, on the main thread, hands a value of more than [`THRESHOLD`] allocations
//! to a thread of the module's own and returns at once; smaller values, and any value freed
//! on another thread (Redis's lazy-free one), are freed where they are.
//!
//! Freeing only gives memory back to the allocator (thread-safe) and a compact state's
//! parameter slot back to its table (atomic, see `intern`): nothing else is touched, so a
//! value may be freed on any thread. Values waiting to be freed are counted for `INFO
//! ratelimit` (`free_pending`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};
use std::thread::{self, ThreadId};

use super::storage;

/// Allocations above which a value is freed by the module's thread: Redis's own threshold
/// for its lazy free.
pub const THRESHOLD: usize = 64;

/// Values handed over and not yet freed.
pub static PENDING: AtomicU64 = AtomicU64::new(0);

/// A value's pointer, sent to the freeing thread, which then owns it.
struct Owned(*mut c_void);

// SAFETY: the value is no longer reachable from Redis once handed over (Redis calls `free`
// once it has removed it), and freeing it is thread-safe (see the module docs).
unsafe impl Send for Owned {}

static MAIN: OnceLock<ThreadId> = OnceLock::new();
static QUEUE: OnceLock<Option<Mutex<Sender<Owned>>>> = OnceLock::new();

/// Records the main thread: called from the module's load.
pub fn init() {
    let _ = MAIN.set(thread::current().id());
}

/// The freeing thread's queue, started on first use; `None` when it could not start.
fn queue() -> Option<&'static Mutex<Sender<Owned>>> {
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = channel::<Owned>();
            let spawned = thread::Builder::new()
                .name("ratelimit-free".into())
                .spawn(move || {
                    for Owned(raw) in rx {
                        // SAFETY: handed over by `free` below, which no longer uses it.
                        unsafe { storage::free(raw) };
                        PENDING.fetch_sub(1, Relaxed);
                    }
                });
            spawned.ok().map(|_| Mutex::new(tx))
        })
        .as_ref()
}

/// Frees the value behind `raw`: on the module's thread when it is big and this is the
/// main thread, here otherwise.
///
/// # Safety
/// `raw` must be a key's value (from `storage`) that
/// Redis has let go of, not used afterwards.
pub unsafe fn free(raw: *mut c_void) {
    let on_main = MAIN
        .get()
        .is_some_and(|main| *main == thread::current().id());
    // SAFETY: as the caller promises.
    if on_main && unsafe { storage::allocations(raw) } > THRESHOLD {
        if let Some(queue) = queue() {
            let sender = queue.lock().unwrap_or_else(|e| e.into_inner());
            PENDING.fetch_add(1, Relaxed);
            match sender.send(Owned(raw)) {
                Ok(()) => return,
                Err(back) => {
                    PENDING.fetch_sub(1, Relaxed);
                    // SAFETY: the thread is gone: the value came back, still ours.
                    unsafe { storage::free(back.0 .0) };
                    return;
                }
            }
        }
    }
    // SAFETY: as the caller promises.
    unsafe { storage::free(raw) };
}
