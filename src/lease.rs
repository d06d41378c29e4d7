//! `RL.ACQUIRE`, `RL.RELEASE` and `RL.EXTEND`: the concurrency limiter with leases (the
//! semaphore itself is [`crate::algo::lease`]). Their argument grammar, their handlers and
//! the clients blocked by `BLOCK` all live here.
//!
//! Replication: a grant, a renewal, a release and an extension each propagate as
//! `RL.APPLY key effect` with the decision time and the lease's id written in hex (an id may
//! hold any byte, an effect's words none of a space):
//!
//! ```text
//! RL.APPLY jobs "RL.ACQUIRE 5 30000 ID 313730302d30 COST 2 NOW 1700000000000"
//! RL.APPLY jobs "RL.RELEASE 313730302d30 NOW 1700000000450"
//! RL.APPLY jobs "RL.EXTEND 313730302d30 60000 NOW 1700000000450"
//! ```

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{LazyLock, Mutex};

use redis_module::{raw, Context, ContextFlags};
use smallvec::SmallVec;

use crate::algo::lease::{self, Leases, Params};
use crate::algo::{Decision, Millis, Wait, MAX_TIMESTAMP};
use crate::api::{self, Arg, Reply};
use crate::args::{self, AsBytes};
use crate::commands::{self, Clock, Mode};
use crate::error::Error;
use crate::stats;
use crate::store::Key;
use crate::value::{Kind, Limiter};

/// The longest `BLOCK`: a year (0 waits without limit).
pub const BLOCK_MAX_MS: u64 = 365 * 24 * 3600 * 1000;

/// `RL.ACQUIRE key limit lease_ms [ID lease-id] [COST n] [BLOCK timeout_ms] [NOW ms]`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquire<'a> {
    pub params: Params,
    pub id: Option<Cow<'a, [u8]>>,
    pub cost: u64,
    pub block: Option<u64>,
    pub now: Option<Millis>,
}

/// `RL.RELEASE key lease-id [NOW ms]` and `RL.EXTEND key lease-id lease_ms [NOW ms]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held<'a> {
    pub id: Cow<'a, [u8]>,
    pub lease_ms: u64,
    pub now: Option<Millis>,
}

const COST_MAX: u64 = i64::MAX as u64;

/// A lease id as given: as it is from a client, in hex in an effect (`hex`).
fn id_arg<A: AsBytes>(arg: &A, hex: bool) -> Result<Cow<'_, [u8]>, Error> {
    let bytes = arg.as_bytes();
    let id = if hex {
        Cow::Owned(from_hex(bytes).ok_or(Error::Invalid("RL.APPLY effect is malformed"))?)
    } else {
        Cow::Borrowed(bytes)
    };
    if !lease::valid_id(&id) {
        return Err(Error::Invalid("a lease id must be 1 to 512 bytes"));
    }
    Ok(id)
}

/// `KEYWORD value` options among `allowed`, each at most once, as `(keyword, value)`.
fn lease_options<'a, A: AsBytes>(
    args: &'a [A],
    allowed: &[&'static str],
) -> Result<Vec<(&'static str, &'a A)>, Error> {
    let mut out: Vec<(&'static str, &'a A)> = Vec::new();
    let mut it = args.iter();
    while let Some(word) = it.next() {
        let name = word.as_bytes();
        let Some(&label) = allowed
            .iter()
            .find(|l| name.eq_ignore_ascii_case(l.as_bytes()))
        else {
            return Err(Error::UnknownOption(
                String::from_utf8_lossy(name).chars().take(64).collect(),
            ));
        };
        if out.iter().any(|(l, _)| *l == label) {
            return Err(Error::RepeatedOption(label));
        }
        out.push((label, it.next().ok_or(Error::MissingValue(label))?));
    }
    Ok(out)
}

/// Parses `RL.ACQUIRE`; `hex` for an effect (ids in hex). `blocking` says whether BLOCK is
/// accepted.
pub fn parse_acquire<A: AsBytes>(args: &[A], hex: bool) -> Result<Acquire<'_>, Error> {
    let limit = args::int(
        args.get(2).ok_or(Error::Arity)?,
        "limit",
        1,
        lease::MAX_LIMIT,
    )?;
    let lease_ms = args::int(
        args.get(3).ok_or(Error::Arity)?,
        "lease_ms",
        1,
        lease::MAX_LEASE_MS,
    )?;
    let mut req = Acquire {
        params: Params { limit, lease_ms },
        id: None,
        cost: args::COST_DEFAULT,
        block: None,
        now: None,
    };
    let rest = args.get(4..).unwrap_or_default();
    for (label, value) in lease_options(rest, &["ID", "COST", "BLOCK", "NOW"])? {
        match label {
            "ID" => req.id = Some(id_arg(value, hex)?),
            "COST" => req.cost = args::int(value, "COST", 0, COST_MAX)?,
            "BLOCK" => req.block = Some(args::int(value, "BLOCK", 0, BLOCK_MAX_MS)?),
            _ => req.now = Some(args::int(value, "NOW", 0, MAX_TIMESTAMP)?),
        }
    }
    Ok(req)
}

/// Parses `RL.RELEASE` (`extend` false) or `RL.EXTEND`.
pub fn parse_held<A: AsBytes>(args: &[A], hex: bool, extend: bool) -> Result<Held<'_>, Error> {
    let id = id_arg(args.get(2).ok_or(Error::Arity)?, hex)?;
    let lease_ms = if extend {
        let arg = args.get(3).ok_or(Error::Arity)?;
        args::int(arg, "lease_ms", 1, lease::MAX_LEASE_MS)?
    } else {
        0
    };
    let rest = args.get(if extend { 4 } else { 3 }..).unwrap_or_default();
    let mut now = None;
    for (_, value) in lease_options(rest, &["NOW"])? {
        now = Some(args::int(value, "NOW", 0, MAX_TIMESTAMP)?);
    }
    Ok(Held { id, lease_ms, now })
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    for b in bytes {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 15)]);
    }
}

fn from_hex(hex: &[u8]) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    hex.chunks_exact(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

/// An effect: `command`, then the words, with a lease id in hex where `Id` says.
enum Word<'a> {
    Num(u64),
    Text(&'a str),
    Id(&'a [u8]),
}

/// The effect's words, sized once (numbers take at most 20 digits, an id twice its bytes).
fn effect(command: &str, words: &[Word]) -> Vec<u8> {
    let size = words.iter().fold(command.len(), |n, w| {
        n + 1
            + match w {
                Word::Num(_) => 20,
                Word::Text(t) => t.len(),
                Word::Id(id) => 2 * id.len(),
            }
    });
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(command.as_bytes());
    for w in words {
        out.push(b' ');
        match w {
            Word::Num(n) => out.extend_from_slice(crate::effect::decimal(*n, &mut [0; 20])),
            Word::Text(t) => out.extend_from_slice(t.as_bytes()),
            Word::Id(id) => push_hex(&mut out, id),
        }
    }
    out
}

/// Propagates the effect of a decision (an `RL.APPLY` passes itself on, see
/// `commands::apply`).
fn propagate(ctx: &Context, name: Arg, mode: Mode, effect: impl FnOnce() -> Vec<u8>) {
    if mode == Mode::Decide {
        api::replicate_effect(ctx, name, &effect());
    }
}

/// The leases a key holds, `None` for a missing key; an error for another kind or type.
fn leases_in<'k>(key: &'k mut Key) -> Result<Option<crate::value::Held<'k>>, Error> {
    let held = key.limiter()?;
    if let Some(h) = held.as_deref() {
        if h.kind() != Kind::Lease {
            return Err(commands::other_kind(h, Kind::Lease));
        }
    }
    Ok(held)
}

/// What an acquisition answered.
pub struct Answer {
    pub decision: Decision,
    pub id: Option<Vec<u8>>,
}

/// Runs an acquisition on the key `name` at `clock`: records it when granted (or when it is
/// an effect), sets the key's expiry, notifies and propagates.
fn acquire_on(
    ctx: &Context,
    name: Arg,
    req: &Acquire,
    clock: Clock,
    mode: Mode,
) -> Result<Answer, Error> {
    let mut key = Key::open(ctx, name, true);
    let mut created = None;
    let mut held = leases_in(&mut key)?;
    let (leases, in_key) = match held.as_deref_mut() {
        Some(h) => (h.lease_mut().ok_or(Error::Internal("RL.ACQUIRE"))?, true),
        None => (created.insert(Leases::new(&req.params)), false),
    };
    let before = if in_key { leases.empty_at() } else { None };
    let behind = leases.latest().saturating_sub(clock.caller);
    let (decision, id, changed) = match mode {
        Mode::Check | Mode::Apply => {
            let id = req
                .id
                .as_deref()
                .ok_or(Error::Invalid("an RL.ACQUIRE effect needs ID"))?;
            if mode == Mode::Check {
                return leases
                    .check_record(clock.caller, req.cost, id)
                    .map(|()| Answer {
                        decision: leases.peek(clock.caller),
                        id: None,
                    })
                    .map_err(|r| Error::lease(r, Some(id)));
            }
            leases
                .record(clock.caller, &req.params, req.cost, id)
                .map_err(|r| Error::lease(r, Some(id)))?;
            (leases.peek(clock.caller), Some(id.to_vec()), true)
        }
        Mode::Decide => {
            let got = leases
                .acquire(clock.caller, &req.params, req.cost, req.id.as_deref())
                .map_err(|r| Error::lease(r, req.id.as_deref()))?;
            let changed = got.id.is_some();
            (got.decision, got.id, changed)
        }
    };
    let (at, empty_at) = (leases.latest(), leases.empty_at());
    let decision = decision
        .seen_from_behind(behind)
        .resetting_at(empty_at, clock.caller);
    if !changed {
        return Ok(Answer { decision, id: None });
    }
    drop(held);
    if let Some(leases) = created {
        key.set(Limiter::Lease(Box::new(leases)))?;
    }
    let expiry = commands::settle(&key, c"rl.acquire", empty_at, clock.lag, before);
    let p = req.params;
    let granted = id.as_deref().unwrap_or_default();
    propagate(ctx, name, mode, || grant_effect(&p, req.cost, granted, at));
    commands::replicate_expiry(ctx, name, clock.lag, expiry);
    Ok(Answer { decision, id })
}

/// `RL.ACQUIRE limit lease_ms ID <hex> [COST n] NOW at`.
pub(crate) fn grant_effect(p: &Params, cost: u64, id: &[u8], at: Millis) -> Vec<u8> {
    let mut words: SmallVec<[Word; 8]> = smallvec::smallvec![
        Word::Num(p.limit),
        Word::Num(p.lease_ms),
        Word::Text("ID"),
        Word::Id(id),
    ];
    if cost != args::COST_DEFAULT {
        words.extend([Word::Text("COST"), Word::Num(cost)]);
    }
    words.extend([Word::Text("NOW"), Word::Num(at)]);
    effect("RL.ACQUIRE", &words)
}

pub fn acquire(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    acquire_as(ctx, commands::key_arg(args)?, args, Mode::Decide)
}

pub fn acquire_as<A: AsBytes>(
    ctx: &Context,
    name: Arg,
    args: &[A],
    mode: Mode,
) -> Result<Reply, Error> {
    let req = parse_acquire(args, mode.is_effect())?;
    let clock = commands::clock(ctx, req.now, mode)?;
    let blocking = match req.block {
        Some(timeout) if mode == Mode::Decide && req.cost > 0 && can_block(ctx) => Some(timeout),
        _ => None,
    };
    let Some(timeout) = blocking else {
        let answer = acquire_on(ctx, name, &req, clock, mode)?;
        if mode == Mode::Check {
            return Ok(Reply::Ok);
        }
        kick(ctx, name);
        return Ok(Reply::Lease(answer.decision, answer.id));
    };
    // First come, first served: behind clients already waiting on the key, unless the call
    // renews a lease it holds.
    let db = api::selected_db(ctx);
    if !has_waiters(db, name.as_bytes()) || holds(ctx, name, &req, clock.caller)? {
        let answer = acquire_on(ctx, name, &req, clock, mode)?;
        let never = answer.decision.retry_after == Wait::Never;
        if answer.id.is_some() || never {
            kick(ctx, name);
            return Ok(Reply::Lease(answer.decision, answer.id));
        }
    }
    wait(ctx, db, name, &req, timeout)
}

/// Whether the key holds the lease the call names.
fn holds(ctx: &Context, name: Arg, req: &Acquire, now: Millis) -> Result<bool, Error> {
    let Some(id) = req.id.as_deref() else {
        return Ok(false);
    };
    let mut key = Key::open(ctx, name, false);
    let held = leases_in(&mut key)?;
    Ok(held
        .as_deref()
        .and_then(|l| match l {
            Limiter::Lease(l) => Some(l.holds(now, id)),
            _ => None,
        })
        .unwrap_or(false))
}

/// The answer to a release or an extension of a lease that is not held (or a missing key).
fn not_held(leases: Option<&Leases>, now: Millis) -> Decision {
    match leases {
        Some(l) => Decision {
            allowed: false,
            ..l.peek(now)
                .seen_from_behind(l.latest().saturating_sub(now))
                .resetting_at(l.empty_at(), now)
        },
        None => Decision {
            allowed: false,
            limit: 0,
            remaining: 0,
            retry_after: Wait::None,
            reset_after_ms: 0,
        },
    }
}

/// `RL.RELEASE` (`extend` false) and `RL.EXTEND`.
fn change<A: AsBytes>(
    ctx: &Context,
    name: Arg,
    args: &[A],
    mode: Mode,
    extend: bool,
) -> Result<Reply, Error> {
    let req = parse_held(args, mode.is_effect(), extend)?;
    let clock = commands::clock(ctx, req.now, mode)?;
    let mut key = Key::open(ctx, name, true);
    let mut held = leases_in(&mut key)?;
    let Some(leases) = held.as_deref_mut().and_then(Limiter::lease_mut) else {
        return Ok(Reply::Decision(not_held(None, clock.caller)));
    };
    if mode == Mode::Check {
        // A release or an extension always applies (to a lease not held, as nothing).
        return Ok(Reply::Ok);
    }
    let before = leases.empty_at();
    let behind = leases.latest().saturating_sub(clock.caller);
    let done = if extend {
        leases.extend(clock.caller, &req.id, req.lease_ms)
    } else {
        leases.release(clock.caller, &req.id)
    };
    let Some(decision) = done else {
        return Ok(Reply::Decision(not_held(Some(leases), clock.caller)));
    };
    let (at, empty_at) = (leases.latest(), leases.empty_at());
    let decision = decision
        .seen_from_behind(behind)
        .resetting_at(empty_at, clock.caller);
    let event = if extend { c"rl.extend" } else { c"rl.release" };
    // May delete the key: nothing may read the leases afterwards.
    drop(held);
    let expiry = commands::settle(&key, event, empty_at, clock.lag, before);
    propagate(ctx, name, mode, || {
        let mut words: SmallVec<[Word; 4]> = smallvec::smallvec![Word::Id(&req.id)];
        if extend {
            words.push(Word::Num(req.lease_ms));
        }
        words.extend([Word::Text("NOW"), Word::Num(at)]);
        effect(if extend { "RL.EXTEND" } else { "RL.RELEASE" }, &words)
    });
    commands::replicate_expiry(ctx, name, clock.lag, expiry);
    Ok(Reply::Decision(decision))
}

pub fn release(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    release_as(ctx, commands::key_arg(args)?, args, Mode::Decide)
}

pub fn release_as<A: AsBytes>(
    ctx: &Context,
    name: Arg,
    args: &[A],
    mode: Mode,
) -> Result<Reply, Error> {
    let reply = change(ctx, name, args, mode, false)?;
    if mode != Mode::Check {
        kick(ctx, name);
    }
    Ok(reply)
}

pub fn extend(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    extend_as(ctx, commands::key_arg(args)?, args, Mode::Decide)
}

pub fn extend_as<A: AsBytes>(
    ctx: &Context,
    name: Arg,
    args: &[A],
    mode: Mode,
) -> Result<Reply, Error> {
    let reply = change(ctx, name, args, mode, true)?;
    if mode != Mode::Check {
        kick(ctx, name);
    }
    Ok(reply)
}

// ---------------------------------------------------------------------------------------
// BLOCK: clients waiting for units.
//
// Each key with waiters has a queue, served first come first served: whenever units may
// have been freed (an RL.RELEASE, an RL.EXTEND or a renewal on the key, a waiter leaving,
// or the moment the head's units free up as the leases end, which a timer per key waits
// for), the head is tried as a fresh acquisition at the server's time and granted while it
// fits. A grant is an ordinary acquisition: it is stored, propagated as its effect and
// answered at once. Redis is given no timeout: each waiter's deadline is a module timer, so
// that exactly one path answers a client (a grant, its deadline, or nothing when it has
// disconnected), and `CLIENT UNBLOCK` cannot interrupt it.
//
// Everything here runs on Redis's main thread; the lock is never held across a call into
// Redis.

/// Grants made in one pass at most; more continue on the next event-loop turn.
const SERVE_MAX: usize = 64;

struct Waiter {
    serial: u64,
    bc: api::BlockedClient,
    params: Params,
    cost: u64,
    id: Option<Vec<u8>>,
    deadline: Option<api::TimerId>,
}

#[derive(Default)]
struct Queue {
    waiters: VecDeque<Waiter>,
    /// The timer that serves the queue next, and when it fires.
    wake: Option<(api::TimerId, Millis)>,
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

// SAFETY: the blocked-client pointers are only used on Redis's main thread.
unsafe impl Send for Waiting {}

static WAITING: LazyLock<Mutex<Waiting>> = LazyLock::new(Mutex::default);

fn waiting() -> std::sync::MutexGuard<'static, Waiting> {
    WAITING.lock().unwrap_or_else(|e| e.into_inner())
}

fn has_waiters(db: i32, key: &[u8]) -> bool {
    let w = waiting();
    !w.queues.is_empty() && w.queues.contains_key(&(db, key.to_vec()))
}

impl Waiting {
    /// Takes waiter `serial` out of every list.
    fn remove(&mut self, serial: u64) -> Option<(QueueKey, Waiter)> {
        let key = self.by_serial.remove(&serial)?;
        let queue = self.queues.get_mut(&key)?;
        let at = queue.waiters.iter().position(|w| w.serial == serial)?;
        let waiter = queue.waiters.remove(at)?;
        self.by_client.remove(&(waiter.bc as usize));
        Some((key, waiter))
    }
}

/// What a blocked client is answered with.
enum Outcome {
    Answer(Answer),
    Error(String),
}

/// Whether the call may block: not in MULTI, a script, or a client that cannot (it is then
/// answered as without BLOCK, as BLPOP is).
fn can_block(ctx: &Context) -> bool {
    !ctx.get_flags().intersects(
        ContextFlags::MULTI
            | ContextFlags::LUA
            | ContextFlags::DENY_BLOCKING
            | ContextFlags::REPLICATED
            | ContextFlags::LOADING,
    )
}

/// Blocks the caller behind the key's waiters.
fn wait(ctx: &Context, db: i32, name: Arg, req: &Acquire, timeout: u64) -> Result<Reply, Error> {
    let bc = api::block_client(ctx, Some(on_reply), Some(on_free), Some(on_disconnect))
        .ok_or(Error::MissingApi("BlockClient"))?;
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
        w.queues
            .entry(key.clone())
            .or_default()
            .waiters
            .push_back(Waiter {
                serial,
                bc,
                params: req.params,
                cost: req.cost,
                id: req.id.as_deref().map(<[u8]>::to_vec),
                deadline,
            });
    }
    serve(ctx, &key);
    Ok(Reply::Blocked)
}

/// Serves the waiters of `name` (in the context's database), if it has any.
fn kick(ctx: &Context, name: Arg) {
    let key = (api::selected_db(ctx), name.as_bytes().to_vec());
    if has_waiters(key.0, &key.1) {
        serve(ctx, &key);
    }
}

/// Grants the key's waiters in order while their units are free, then sets the key's timer
/// for when the head's units will be.
fn serve(ctx: &Context, key: &QueueKey) {
    let Some(name) = api::OwnedString::new(ctx, &key.1) else {
        return;
    };
    let previous_db = api::selected_db(ctx);
    if previous_db != key.0 {
        api::select_db(ctx, key.0);
    }
    let mut wait = None;
    let mut served = 0;
    loop {
        let head = {
            let w = waiting();
            w.queues.get(key).and_then(|q| q.waiters.front()).map(|h| {
                let req = Acquire {
                    params: h.params,
                    id: h.id.clone().map(Cow::Owned),
                    cost: h.cost,
                    block: None,
                    now: None,
                };
                (h.serial, req)
            })
        };
        let Some((serial, req)) = head else {
            break;
        };
        if ctx.get_flags().contains(ContextFlags::SLAVE) {
            // A replica grants nothing (Redis disconnects blocked clients when it demotes
            // a primary).
            break;
        }
        if served == SERVE_MAX {
            // The rest on the next turn of the event loop.
            wait = Some(0);
            break;
        }
        let now = u64::try_from(crate::store::now_ms()).unwrap_or(0);
        let clock = Clock {
            caller: now,
            lag: 0,
        };
        let outcome = match acquire_on(ctx, name.arg(), &req, clock, Mode::Decide) {
            Ok(answer) if answer.id.is_none() => {
                if let Wait::Ms(ms) = answer.decision.retry_after {
                    wait = Some(ms.max(1));
                    break;
                }
                // Never (cannot happen: the cost was within the limit when it blocked).
                Outcome::Answer(answer)
            }
            Ok(answer) => Outcome::Answer(answer),
            Err(e) => Outcome::Error(e.to_string()),
        };
        let taken = waiting().remove(serial);
        if let Some((_, waiter)) = taken {
            answer_waiter(ctx, waiter, outcome);
        }
        served += 1;
    }
    set_wake(ctx, key, wait);
    if previous_db != key.0 {
        api::select_db(ctx, previous_db);
    }
}

/// Answers a waiter taken out of the lists.
fn answer_waiter(ctx: &Context, waiter: Waiter, outcome: Outcome) {
    if let Some(t) = waiter.deadline {
        api::stop_timer(ctx, t);
    }
    api::unblock(waiter.bc, Box::into_raw(Box::new(outcome)).cast());
}

/// Makes the key's timer fire in `ms` (none: the key has no waiters left), dropping the
/// queue of a key nobody waits on.
fn set_wake(ctx: &Context, key: &QueueKey, ms: Option<u64>) {
    let now = u64::try_from(crate::store::now_ms()).unwrap_or(0);
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
                Some((_, at)) if at <= now + ms => (None, None),
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
                    q.wake = Some((t, now + ms));
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
    if catch_unwind(AssertUnwindSafe(|| f(&context))).is_err() {
        context.log_warning(&format!("ratelimit: internal error in {what}"));
    }
}

/// A key's timer: its head waiter's units should be free now.
unsafe extern "C" fn on_wake(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // SAFETY: the data of a wake timer is a QueueKey box, ours once it fires.
    let key = unsafe { Box::from_raw(data.cast::<QueueKey>()) };
    guarded(ctx, "a BLOCK timer", |ctx| {
        // This timer is firing: it must not be stopped (freed) again.
        if let Some(q) = waiting().queues.get_mut(&*key) {
            q.wake = None;
        }
        serve(ctx, &key);
    });
}

/// A waiter's deadline: served if its units are free by now, refused otherwise.
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
        serve(ctx, &key);
        let Some((key, waiter)) = waiting().remove(serial) else {
            return; // granted just now
        };
        let previous_db = api::selected_db(ctx);
        api::select_db(ctx, key.0);
        let outcome = match api::OwnedString::new(ctx, &key.1) {
            Some(name) => refusal(ctx, name.arg(), &waiter),
            None => Outcome::Error(Error::Internal("RL.ACQUIRE").to_string()),
        };
        api::select_db(ctx, previous_db);
        answer_waiter(ctx, waiter, outcome);
        // The head may have been this waiter: the next one may fit.
        serve(ctx, &key);
    });
}

/// The refusal a waiter gets at its deadline: the call's answer at this time.
fn refusal(ctx: &Context, name: Arg, waiter: &Waiter) -> Outcome {
    let now = u64::try_from(crate::store::now_ms()).unwrap_or(0);
    let mut key = Key::open(ctx, name, false);
    let decision = match leases_in(&mut key) {
        Ok(Some(held)) => match &*held {
            Limiter::Lease(l) => {
                let d = l.evaluate(now, &waiter.params, waiter.cost, waiter.id.as_deref());
                d.seen_from_behind(l.latest().saturating_sub(now))
                    .resetting_at(l.empty_at(), now)
            }
            _ => return Outcome::Error(Error::Internal("RL.ACQUIRE").to_string()),
        },
        Ok(None) => Leases::new(&waiter.params).evaluate(now, &waiter.params, waiter.cost, None),
        Err(e) => return Outcome::Error(e.to_string()),
    };
    Outcome::Answer(Answer {
        decision: Decision {
            allowed: false,
            ..decision
        },
        id: None,
    })
}

/// A waiting client went away: it leaves the queue (taking no slot) and is unblocked so
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
            api::unblock(bc, std::ptr::null_mut());
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
    let data = api::blocked_privdata(ctx).cast::<Outcome>();
    // SAFETY: what `answer_waiter` handed over; Redis frees it with `on_free` afterwards.
    let Some(outcome) = (unsafe { data.as_ref() }) else {
        return raw::REDISMODULE_OK as c_int;
    };
    match outcome {
        Outcome::Answer(a) => {
            stats::ACQUIRE.count(Some(a.decision.allowed));
            api::reply_lease(ctx, &a.decision, a.id.as_deref());
        }
        Outcome::Error(e) => {
            stats::ACQUIRE.count(None);
            api::reply_error(ctx, e);
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// Watches for keys with waiters that are deleted, expire, are evicted or renamed, and for
/// flushed databases: their waiters are served at once (on the next turn of the event loop),
/// as everything such a key held is free.
/// A context of the module's own, for scheduling wake timers from the type's unlink callback
/// (which gets none); detached, so it lives as long as the module.
static DETACHED: std::sync::atomic::AtomicPtr<raw::RedisModuleCtx> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

pub fn init(ctx: &Context) {
    // Keys removed with waiters are seen through the type's unlink callback (`key_removed`),
    // not a keyspace subscription, which would add work to every command that fires an
    // event (SET ... PX fires `expire`).
    if let Some(detach) = unsafe { raw::RedisModule_GetDetachedThreadSafeContext } {
        // SAFETY: called from OnLoad with the module's context.
        let detached = unsafe { detach(ctx.ctx) };
        DETACHED.store(detached, std::sync::atomic::Ordering::Relaxed);
    }
    api::subscribe_flush(ctx, Some(on_flush));
}

/// A lease key left the keyspace (DEL, UNLINK, expiry, eviction, overwrite), on the main
/// thread: its waiters are served at once, on a fresh key.
pub fn key_removed(db: i32, name: &[u8]) {
    let key: QueueKey = (db, name.to_vec());
    if !waiting().queues.contains_key(&key) {
        return;
    }
    let ctx = DETACHED.load(std::sync::atomic::Ordering::Relaxed);
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

unsafe extern "C" fn on_free(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        // SAFETY: what `answer_waiter` handed over, freed once by Redis.
        drop(unsafe { Box::from_raw(data.cast::<Outcome>()) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_acquire() {
        let a = ["RL.ACQUIRE", "k", "5", "30000"];
        let req = parse_acquire(&a, false).unwrap();
        assert_eq!(
            (req.params, req.cost, req.id, req.block),
            (
                Params {
                    limit: 5,
                    lease_ms: 30000
                },
                1,
                None,
                None
            )
        );
        let a = [
            "RL.ACQUIRE",
            "k",
            "5",
            "30000",
            "id",
            "job 1",
            "COST",
            "2",
            "BLOCK",
            "0",
            "NOW",
            "7",
        ];
        let req = parse_acquire(&a, false).unwrap();
        assert_eq!(req.id.as_deref(), Some(&b"job 1"[..]));
        assert_eq!((req.cost, req.block, req.now), (2, Some(0), Some(7)));
        let hex = ["RL.ACQUIRE", "k", "5", "30000", "ID", "6a6f62"];
        assert_eq!(
            parse_acquire(&hex, true).unwrap().id.as_deref(),
            Some(&b"job"[..])
        );
        let long = "x".repeat(513);
        for (bad, err) in [
            (&["RL.ACQUIRE", "k", "0", "1"][..], "limit"),
            (&["RL.ACQUIRE", "k", "1", "0"], "lease_ms"),
            (&["RL.ACQUIRE", "k", "1", "1", "ID", ""], "1 to 512"),
            (&["RL.ACQUIRE", "k", "1", "1", "ID", &long], "1 to 512"),
            (
                &["RL.ACQUIRE", "k", "1", "1", "ID", "a", "ID", "b"],
                "more than once",
            ),
            (&["RL.ACQUIRE", "k", "1", "1", "BLOCK"], "needs a value"),
            (&["RL.ACQUIRE", "k", "1", "1", "BLOCK", "-1"], "BLOCK"),
            (
                &["RL.ACQUIRE", "k", "1", "1", "WAIT", "1"],
                "unknown option",
            ),
            (&["RL.ACQUIRE", "k", "1"], "wrong number"),
        ] {
            let e = parse_acquire(bad, false).unwrap_err().to_string();
            assert!(e.contains(err), "{bad:?}: {e}");
        }
        for bad in ["6", "6A", "zz", ""] {
            assert!(parse_acquire(&["RL.ACQUIRE", "k", "1", "1", "ID", bad], true).is_err());
        }
    }

    #[test]
    fn parses_release_and_extend() {
        let r = parse_held(&["RL.RELEASE", "k", "a b", "NOW", "5"], false, false).unwrap();
        assert_eq!((&*r.id, r.now), (&b"a b"[..], Some(5)));
        let e = parse_held(&["RL.EXTEND", "k", "a", "100"], false, true).unwrap();
        assert_eq!(e.lease_ms, 100);
        assert!(parse_held(&["RL.EXTEND", "k", "a"], false, true).is_err());
        assert!(parse_held(&["RL.RELEASE", "k", "a", "100"], false, false).is_err());
        assert!(parse_held(&["RL.RELEASE", "k"], false, false).is_err());
    }

    #[test]
    fn effects_carry_ids_in_hex() {
        let id: &[u8] = b"a b\x00\xff";
        let line = effect(
            "RL.RELEASE",
            &[Word::Id(id), Word::Text("NOW"), Word::Num(5)],
        );
        assert_eq!(line, b"RL.RELEASE 61206200ff NOW 5");
        assert_eq!(from_hex(b"61206200ff").as_deref(), Some(id));
    }
}
