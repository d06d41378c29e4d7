//! Calls that wait: a facility any command may ask for (`BLOCK`), kept here with the
//! blocked clients and timers it needs. It knows no kind: a waiting call is a [`Pending`],
//! which the command layer makes of its own calls.
//!
//! Each key with waiters has a queue, served first come first served: whenever units may
//! have been freed (a change on the key, a waiter leaving, the key leaving the keyspace, or
//! the moment the head said it could be served, which a timer per key waits for), the head
//! is tried again at the server's time and answered while it is served. Serving is an
//! ordinary call: it is stored, propagated as its effect and answered at once. Redis is
//! given no timeout: each waiter's deadline is a module timer, so that exactly one path
//! answers a client (it is served, its deadline passes, or nothing when it has
//! disconnected), and `CLIENT UNBLOCK` cannot interrupt it.
//!
//! Everything here runs on Redis's main thread; the lock is never held across a call into
//! Redis.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::os::raw::c_int;
use std::rc::Rc;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::{raw, Context, ContextFlags};

use super::api::{self, Arg, Count};
use crate::core::error::Error;
use crate::core::kind::Reply;
use crate::core::{Duration, Instant};

/// What trying a waiting call again gave.
pub enum Attempt {
    /// Its answer (served, or refused for good): the client is answered with it.
    Done(Result<Reply, Error>),
    /// Not served: try again in this many milliseconds (sooner if the key changes).
    Later(u64),
}

/// A call waiting for its units, as its command made it.
pub trait Pending: 'static {
    /// Tries the call at the server's time on the key `name` (the context works on the
    /// key's database).
    fn attempt(&self, ctx: &Context, name: Arg) -> Attempt;
    /// Its answer when its time is up: the call's answer at the server's time, refused.
    fn refusal(&self, ctx: &Context, name: Arg) -> Result<Reply, Error>;
    /// The counters its answer goes to.
    fn counters(&self) -> &'static dyn Count;
}

/// Calls served in one pass at most; more continue on the next event-loop turn.
const SERVE_MAX: usize = 64;

struct Waiter {
    serial: u64,
    bc: api::BlockedClient,
    call: Rc<dyn Pending>,
    deadline: Option<api::TimerId>,
}

#[derive(Default)]
struct Queue {
    waiters: VecDeque<Waiter>,
    /// The timer that serves the queue next, and when it fires.
    wake: Option<(api::TimerId, Instant)>,
}

type QueueKey = (i32, Vec<u8>);

#[derive(Default)]
struct Waiting {
    queues: HashMap<QueueKey, Queue>,
    /// Each waiter's key, by serial (deadlines) and by blocked client (disconnections).
    by_serial: HashMap<u64, QueueKey>,
    by_client: HashMap<usize, u64>,
    next: u64,
}

// SAFETY: the blocked-client pointers and the waiting calls are only used on Redis's main
// thread; the lock only makes the static shareable.
unsafe impl Send for Waiting {}

static WAITING: LazyLock<Mutex<Waiting>> = LazyLock::new(Mutex::default);

fn waiting() -> MutexGuard<'static, Waiting> {
    WAITING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether calls wait on the key `key` of database `db`.
pub fn has_waiters(db: i32, key: &[u8]) -> bool {
    if WAITERS.load(Relaxed) == 0 {
        return false;
    }
    let w = waiting();
    !w.queues.is_empty() && w.queues.contains_key(&(db, key.to_vec()))
}

/// Calls waiting on any key: what every call checks first, without a lock.
static WAITERS: AtomicUsize = AtomicUsize::new(0);

impl Waiting {
    /// Takes waiter `serial` out of every list.
    fn remove(&mut self, serial: u64) -> Option<(QueueKey, Waiter)> {
        let key = self.by_serial.remove(&serial)?;
        let queue = self.queues.get_mut(&key)?;
        let at = queue.waiters.iter().position(|w| w.serial == serial)?;
        let waiter = queue.waiters.remove(at)?;
        self.by_client.remove(&(waiter.bc as usize));
        WAITERS.fetch_sub(1, Relaxed);
        Some((key, waiter))
    }
}

/// What a blocked client is answered with, and the counters its answer goes to.
struct Outcome {
    answer: Result<Reply, String>,
    counters: &'static dyn Count,
}

fn server_now() -> Instant {
    api::now()
}

/// Blocks the caller behind the key `name`'s waiters (of database `db`) until `call` is
/// served, or for at most `timeout` ms (0: no limit).
pub fn wait(
    ctx: &Context,
    db: i32,
    name: Arg,
    call: Box<dyn Pending>,
    timeout: u64,
) -> Result<(), Error> {
    let bc = api::block_client(ctx, Some(on_reply), Some(on_free), Some(on_disconnect))
        .ok_or_else(|| Error::MissingApi("BlockClient"))?;
    let key: QueueKey = (db, name.as_bytes().to_vec());
    let serial = {
        let mut w = waiting();
        w.next += 1;
        w.next
    };
    let deadline = (timeout > 0)
        .then(|| api::create_timer(ctx, timeout, Some(on_deadline), serial as *mut c_void))
        .flatten();
    {
        let mut w = waiting();
        w.by_serial.insert(serial, key.clone());
        w.by_client.insert(bc as usize, serial);
        WAITERS.fetch_add(1, Relaxed);
        w.queues
            .entry(key.clone())
            .or_default()
            .waiters
            .push_back(Waiter {
                serial,
                bc,
                call: Rc::from(call),
                deadline,
            });
    }
    serve(ctx, &key, Slot::Routed);
    Ok(())
}

/// Serves the waiters of `name` (in the context's database), if it has any: after any
/// change to the key.
#[inline(always)]
pub fn kick(ctx: &Context, name: Arg) {
    if WAITERS.load(Relaxed) != 0 {
        kick_waiters(ctx, name);
    }
}

/// [`kick`], once some key has waiters.
#[cold]
#[inline(never)]
fn kick_waiters(ctx: &Context, name: Arg) {
    let key = (api::selected_db(ctx), name.as_bytes().to_vec());
    if has_waiters(key.0, &key.1) {
        serve(ctx, &key, Slot::Routed);
    }
}

/// Whether the node is known to serve a key's slot when its waiters are served.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// From a command on the key (or the call that waits): routed here, so it does.
    Routed,
    /// From a timer or an event: the slot may have moved since (a resharding), so ask.
    Unknown,
}

/// Serves the key's waiters in order while they are served, then sets the key's timer for
/// when the head said to try again.
fn serve(ctx: &Context, key: &QueueKey, slot_known: Slot) {
    let Some(name) = api::OwnedString::new(ctx, &key.1) else {
        return;
    };
    let previous_db = api::selected_db(ctx);
    if previous_db != key.0 {
        api::select_db(ctx, key.0);
    }
    let mut wake = None;
    let mut served = 0;
    loop {
        if ctx.get_flags().contains(ContextFlags::SLAVE) {
            // A replica serves nothing (Redis disconnects blocked clients when it demotes
            // a primary).
            break;
        }
        if served == SERVE_MAX {
            // The rest on the next turn of the event loop.
            wake = Some(0);
            break;
        }
        // The head is tried with the lock released (the call may change the key, whose
        // unlink or flush callbacks take it), and stays in its queue meanwhile.
        let head = {
            let w = waiting();
            let head = w.queues.get(key).and_then(|q| q.waiters.front());
            head.map(|h| (h.serial, Rc::clone(&h.call)))
        };
        let Some((serial, call)) = head else {
            break;
        };
        // A key whose slot another node serves now (moved by a resharding while its callers
        // waited, an atomic slot migration among them): each waiter is told where to call
        // again, as a key it asked about elsewhere would tell it, and nothing is taken here.
        if served == 0 && slot_known == Slot::Unknown {
            let slot = crate::core::policy::slot(&key.1);
            if let super::server::SlotOwner::Other(node) = super::server::slot_owner(ctx, slot) {
                // At most SERVE_MAX a turn, as served waiters are: the rest on the next.
                let some: Vec<u64> = waiting()
                    .queues
                    .get(key)
                    .map(|q| q.waiters.iter().take(SERVE_MAX).map(|w| w.serial).collect())
                    .unwrap_or_default();
                if some.len() == SERVE_MAX {
                    wake = Some(0);
                }
                for serial in some {
                    if let Some((_, waiter)) = waiting().remove(serial) {
                        let moved = Error::Moved {
                            slot,
                            node: node.clone(),
                        };
                        answer_waiter(ctx, waiter, Err(moved));
                    }
                }
                break;
            }
        }
        let attempt = call.attempt(ctx, name.arg());
        let answer = match attempt {
            Attempt::Later(ms) => {
                wake = Some(ms.max(1));
                break;
            }
            Attempt::Done(answer) => answer,
        };
        let taken = waiting().remove(serial);
        if let Some((_, waiter)) = taken {
            answer_waiter(ctx, waiter, answer);
        }
        served += 1;
    }
    set_wake(ctx, key, wake);
    if previous_db != key.0 {
        api::select_db(ctx, previous_db);
    }
}

/// Answers a waiter taken out of the lists.
fn answer_waiter(ctx: &Context, waiter: Waiter, answer: Result<Reply, Error>) {
    if let Some(t) = waiter.deadline {
        api::stop_timer(ctx, t);
    }
    let outcome = Outcome {
        answer: answer.map_err(|e| e.to_string()),
        counters: waiter.call.counters(),
    };
    // SAFETY: the waiter was taken out of every list (nothing unblocks it again), and its
    // reply callback (`on_reply`) and free callback (`on_free`) take an `Outcome` box.
    unsafe { api::unblock(waiter.bc, Box::into_raw(Box::new(outcome)).cast()) };
}

/// Makes the key's timer fire in `ms` (none: the key has no waiters left), dropping the
/// queue of a key nobody waits on.
fn set_wake(ctx: &Context, key: &QueueKey, ms: Option<u64>) {
    let now = server_now();
    let (stop, start) = {
        let mut w = waiting();
        let Some(queue) = w.queues.get_mut(key) else {
            return;
        };
        match ms {
            _ if queue.waiters.is_empty() => {
                let stop = queue.wake.map(|(t, _)| t);
                w.queues.remove(key);
                (stop, None)
            }
            Some(ms) => match queue.wake {
                Some((_, at)) if at <= now + Duration::from_ms(ms) => (None, None),
                old => (old.map(|(t, _)| t), Some(ms)),
            },
            None => (None, None),
        }
    };
    if let Some(t) = stop {
        let data = api::stop_timer(ctx, t);
        if !data.is_null() {
            // SAFETY: the data of a wake timer is the QueueKey box made below.
            drop(unsafe { Box::from_raw(data.cast::<QueueKey>()) });
        }
    }
    if let Some(ms) = start {
        let data = Box::into_raw(Box::new(key.clone())).cast::<c_void>();
        match api::create_timer(ctx, ms, Some(on_wake), data) {
            Some(t) => {
                if let Some(q) = waiting().queues.get_mut(key) {
                    q.wake = Some((t, now + Duration::from_ms(ms)));
                }
            }
            // SAFETY: no timer took the box.
            None => drop(unsafe { Box::from_raw(data.cast::<QueueKey>()) }),
        }
    }
}

/// Runs `f` with the callback's context, a panic logged instead of crashing the server.
fn guarded(ctx: *mut raw::RedisModuleCtx, what: &str, f: impl FnOnce(&Context)) {
    let context = Context::new(ctx);
    super::guard::guard(what, (), || f(&context));
}

/// A key's timer: its head waiter may be served now.
unsafe extern "C" fn on_wake(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // SAFETY: the data of a wake timer is a QueueKey box, ours once it fires.
    let key = unsafe { Box::from_raw(data.cast::<QueueKey>()) };
    guarded(ctx, "a BLOCK timer", |ctx| {
        // This timer is firing: it must not be stopped (freed) again.
        if let Some(q) = waiting().queues.get_mut(&*key) {
            q.wake = None;
        }
        serve(ctx, &key, Slot::Unknown);
    });
}

/// A waiter's deadline: served if it can be by now, refused otherwise.
unsafe extern "C" fn on_deadline(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    let serial = data as u64;
    guarded(ctx, "a BLOCK deadline", |ctx| {
        let key = {
            let mut w = waiting();
            let Some(key) = w.by_serial.get(&serial).cloned() else {
                return;
            };
            // This timer is firing: stopping it now would free it twice.
            let waiter = w
                .queues
                .get_mut(&key)
                .and_then(|q| q.waiters.iter_mut().find(|x| x.serial == serial));
            if let Some(waiter) = waiter {
                waiter.deadline = None;
            }
            key
        };
        serve(ctx, &key, Slot::Unknown);
        let Some((key, waiter)) = waiting().remove(serial) else {
            return; // served just now
        };
        let previous_db = api::selected_db(ctx);
        api::select_db(ctx, key.0);
        let answer = match api::OwnedString::new(ctx, &key.1) {
            Some(name) => waiter.call.refusal(ctx, name.arg()),
            None => Err(Error::Internal("a BLOCK deadline")),
        };
        api::select_db(ctx, previous_db);
        answer_waiter(ctx, waiter, answer);
        // The head may have been this waiter: the next one may be served.
        serve(ctx, &key, Slot::Unknown);
    });
}

/// A waiting client went away: it leaves the queue (taking nothing) and is unblocked so
/// Redis can free it; the waiters behind it are served on the next turn.
unsafe extern "C" fn on_disconnect(ctx: *mut raw::RedisModuleCtx, bc: api::BlockedClient) {
    guarded(ctx, "a BLOCK disconnection", |ctx| {
        let taken = {
            let mut w = waiting();
            let serial = w.by_client.get(&(bc as usize)).copied();
            serial.and_then(|s| w.remove(s))
        };
        // Not found: it was answered already and is only waiting for its reply to be
        // written; unblocking it again would free it twice.
        if let Some((key, waiter)) = taken {
            if let Some(t) = waiter.deadline {
                api::stop_timer(ctx, t);
            }
            // SAFETY: found in the lists and taken out of them: not answered before, and
            // nothing unblocks it again; a null private data is what `on_free` expects of a
            // client gone.
            unsafe { api::unblock(bc, std::ptr::null_mut()) };
            set_wake(ctx, &key, Some(0));
        }
    });
}

/// Answers a blocked client with what it was unblocked with.
unsafe extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: `ctx` is this reply callback's.
    let data = unsafe { api::blocked_privdata(ctx) }.cast::<Outcome>();
    // SAFETY: what `answer_waiter` handed over; Redis frees it with `on_free` afterwards.
    let Some(outcome) = (unsafe { data.as_ref() }) else {
        return raw::REDISMODULE_OK as c_int;
    };
    match &outcome.answer {
        Ok(reply) => {
            outcome.counters.count(Some(api::allowed(reply)));
            // SAFETY: a blocked client's reply callback's context may reply.
            unsafe { api::reply(ctx, reply) };
        }
        Err(e) => {
            outcome.counters.count(None);
            api::reply_error(ctx, e);
        }
    }
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn on_free(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: what `answer_waiter` handed over, freed once by Redis.
        drop(unsafe { Box::from_raw(data.cast::<Outcome>()) });
    }
}

/// A context of the module's own, for scheduling wake timers from the type's unlink
/// callback (which gets none); detached, so it lives as long as the module.
static DETACHED: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Watches for keys with waiters that leave the keyspace (through the type's unlink
/// callback, [`key_removed`], rather than a keyspace subscription, which would add work to
/// every command that fires an event) and for flushed databases: their waiters are served
/// at once (on the next turn of the event loop), as everything such a key held is free.
pub fn init(ctx: &Context) {
    // SAFETY: reading the API function pointer the server filled in at load time.
    if let Some(detach) = unsafe { raw::RedisModule_GetDetachedThreadSafeContext } {
        // SAFETY: called from OnLoad with the module's context.
        let detached = unsafe { detach(ctx.ctx) };
        DETACHED.store(detached, Relaxed);
    }
    super::server::subscribe_flush(ctx, Some(on_flush));
}

/// A key of the type left the keyspace (DEL, UNLINK, expiry, eviction, overwrite), on the
/// main thread: its waiters are served at once, on a fresh key.
pub fn key_removed(db: i32, name: &[u8]) {
    let key: QueueKey = (db, name.to_vec());
    if !waiting().queues.contains_key(&key) {
        return;
    }
    let ctx = DETACHED.load(Relaxed);
    if !ctx.is_null() {
        set_wake(&Context::new(ctx), &key, Some(0));
    }
}

unsafe extern "C" fn on_flush(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
        return;
    }
    // SAFETY: the data of a FLUSHDB event is a RedisModuleFlushInfo.
    let db = unsafe { data.cast::<raw::RedisModuleFlushInfo>().as_ref() }.map_or(-1, |i| i.dbnum);
    guarded(ctx, "a flush", |ctx| {
        let keys: Vec<QueueKey> = waiting()
            .queues
            .keys()
            .filter(|k| db == -1 || k.0 == db)
            .cloned()
            .collect();
        for key in keys {
            set_wake(ctx, &key, Some(0));
        }
    });
}
