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
//! The same thread frees the chunks that a sliding log no longer uses after a trim or a
//! refund, when they are too many to free within the call (`hand_off`, set at load for
//! every log: see `core::chunks`): a refund that leaves a thousand records of ten million
//! gives their memory back at once, without the call freeing thousands of chunks.
//!
//! Freeing only gives memory back to the allocator (thread-safe) and a compact state's
//! parameter slot back to its table (atomic, see `intern`): nothing else is touched, so a
//! value may be freed on any thread. Values, and batches of chunks, waiting to be freed are
//! counted for `INFO ratelimit` (`free_pending`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};
use std::thread::{self, ThreadId};

use super::storage;

/// Allocations above which a value is freed by the module's thread: Redis's own threshold
/// for its lazy free.
pub const THRESHOLD: usize = 64;

/// Values and parts of values handed over and not yet freed.
pub static PENDING: AtomicU64 = AtomicU64::new(0);

/// A value's pointer, sent to the freeing thread, which then owns it.
struct Owned(*mut c_void);

// SAFETY: the value is no longer reachable from Redis once handed over (Redis calls `free`
// once it has removed it), and freeing it is thread-safe (see the module docs).
unsafe impl Send for Owned {}

/// What the freeing thread frees.
enum Job {
    /// A key's value that Redis has let go of.
    Value(Owned),
    /// Memory a value no longer uses, owned by the box (a sliding log's unused chunks).
    Part(Box<dyn Send>),
}

static MAIN: OnceLock<ThreadId> = OnceLock::new();
static QUEUE: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();

/// Records the main thread and sends the chunks logs leave unused here: called from the
/// module's load.
pub fn init() {
    let _ = MAIN.set(thread::current().id());
    crate::core::chunks::hand_off_to(hand_off);
}

/// The freeing thread's queue, started on first use; `None` when it could not start.
fn queue() -> Option<&'static Mutex<Sender<Job>>> {
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = channel::<Job>();
            let spawned = thread::Builder::new()
                .name("ratelimit-free".into())
                .spawn(move || {
                    for job in rx {
                        match job {
                            // SAFETY: handed over by `free` below, which no longer uses it.
                            Job::Value(Owned(raw)) => unsafe { storage::free(raw) },
                            Job::Part(part) => drop(part),
                        }
                        PENDING.fetch_sub(1, Relaxed);
                    }
                });
            spawned.ok().map(|_| Mutex::new(tx))
        })
        .as_ref()
}

/// Queues `job` for the freeing thread; gives it back when that thread could not start or
/// is gone.
fn send(job: Job) -> Result<(), Job> {
    let Some(queue) = queue() else {
        return Err(job);
    };
    let sender = queue.lock().unwrap_or_else(|e| e.into_inner());
    PENDING.fetch_add(1, Relaxed);
    sender.send(job).map_err(|back| {
        PENDING.fetch_sub(1, Relaxed);
        back.0
    })
}

/// Frees `part` on the module's thread (on this one when that thread could not start): the
/// chunks a sliding log no longer uses, taken out of it by a call on the main thread.
fn hand_off(part: Box<dyn Send>) {
    if let Err(back) = send(Job::Part(part)) {
        // The thread could not start or is gone: freed here, whole.
        drop(back);
    }
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
    if on_main
        // SAFETY: as the caller promises.
        && unsafe { storage::allocations(raw) } > THRESHOLD
        && send(Job::Value(Owned(raw))).is_ok()
    {
        return;
    }
    // Small, off the main thread, or the thread could not start or is gone (the value came
    // back, still ours).
    // SAFETY: as the caller promises.
    unsafe { storage::free(raw) };
}
