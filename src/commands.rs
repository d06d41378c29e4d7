//! The `RL.*` handlers: parse, read the clock once, run the algorithm, reply, set the expiry
//! and replicate. The only module that touches a command's Context.
//!
//! Replication: a change is propagated as the same command with the exact decision time
//! (`NOW`) it was taken at. A server executing a command that came from its primary or from
//! the AOF applies it without deciding again, so replicas follow the primary's decisions even
//! if their state or clock were to differ. Refused and `COST 0` calls propagate nothing.

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use crate::algo::slide::SlidingLog;
use crate::algo::{Decision, Millis};
use crate::args::{self, AsBytes};
use crate::error::Error;
use crate::stats::{self, Counters};
use crate::store::{now_ms, Key};
use crate::value::{Kind, Limiter};

impl AsBytes for RedisString {
    fn as_bytes(&self) -> &[u8] {
        self.as_slice()
    }
}

/// What a handler answers before it becomes a Redis reply.
pub enum Reply {
    Decision(Decision),
    Nil,
    Ok,
}

type Handler = fn(&Context, &[RedisString]) -> Result<Reply, Error>;

/// Runs a handler so that a bug becomes an error reply and a log line, never a crash, and
/// counts the outcome.
fn guarded(
    name: &'static str,
    counters: Option<&Counters>,
    ctx: &Context,
    args: Vec<RedisString>,
    handler: Handler,
) -> RedisResult {
    let outcome = catch_unwind(AssertUnwindSafe(|| handler(ctx, &args))).unwrap_or_else(|_| {
        ctx.log_warning(&format!("ratelimit: internal error in {name}"));
        Err(Error::Internal(name))
    });
    if let Some(c) = counters {
        c.count(match &outcome {
            Ok(Reply::Decision(d)) => Some(d.allowed),
            Ok(_) => Some(true),
            Err(_) => None,
        });
    }
    match outcome {
        Ok(Reply::Decision(d)) => Ok(RedisValue::Array(
            d.as_reply().into_iter().map(RedisValue::Integer).collect(),
        )),
        Ok(Reply::Nil) => Ok(RedisValue::Null),
        Ok(Reply::Ok) => Ok(RedisValue::SimpleStringStatic("OK")),
        Err(e) => Err(RedisError::from(e)),
    }
}

pub fn rl_slide(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded("RL.SLIDE", Some(&stats::SLIDE), ctx, args, slide)
}

pub fn rl_peek(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded("RL.PEEK", Some(&stats::PEEK), ctx, args, peek)
}

pub fn rl_refund(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded("RL.REFUND", Some(&stats::REFUND), ctx, args, refund)
}

pub fn rl_restore(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded("RL.RESTORE", None, ctx, args, restore)
}

/// The decision time: `NOW` when given, else the server clock, read once.
fn clock(now: Option<Millis>) -> Millis {
    now.unwrap_or_else(|| u64::try_from(now_ms()).unwrap_or(0))
}

/// The command comes from our primary or from the AOF: apply, do not decide again.
fn applying_decided(ctx: &Context) -> bool {
    ctx.get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
}

fn key_arg(args: &[RedisString]) -> Result<&RedisString, Error> {
    args.get(1).ok_or(Error::Arity)
}

fn other_kind(held: &Limiter, wanted: Kind) -> Error {
    Error::OtherKind {
        held: held.kind(),
        wanted: wanted.command(),
    }
}

/// After a change: expire the key when the limiter is back to empty (or delete it now).
fn settle(key: &Key, limiter: &Limiter) {
    match limiter.empty_at() {
        Some(at) => key.expire_at(at),
        None => key.delete(),
    }
    key.signal_modified();
}

fn slide(ctx: &Context, args: &[RedisString]) -> Result<Reply, Error> {
    let req = args::slide(args)?;
    let name = key_arg(args)?;
    let windows = req.windows.as_slice();
    let cost = req.options.cost;
    let now = clock(req.options.now);
    let key = Key::open(ctx, name, true);
    let decided = applying_decided(ctx);
    let decision = match key.limiter()? {
        Some(Limiter::Slide(log)) => {
            let decision = if decided {
                let d = log.evaluate(now, windows, cost);
                log.record(now, windows, cost);
                d
            } else {
                log.acquire(now, windows, cost)
            };
            decision
        }
        #[allow(unreachable_patterns)] // reached once the other algorithms exist
        Some(other) => return Err(other_kind(other, Kind::Slide)),
        None => {
            let mut log = SlidingLog::new(windows);
            let decision = log.evaluate(now, windows, cost);
            if (decision.allowed || decided) && cost > 0 && log.record(now, windows, cost) {
                key.set(Limiter::Slide(log))?;
            }
            decision
        }
    };
    if (decision.allowed || decided) && cost > 0 {
        if let Some(limiter) = key.limiter()? {
            settle(&key, limiter);
            let Limiter::Slide(log) = &*limiter;
            replicate_slide(ctx, name, log, cost);
        }
    }
    Ok(Reply::Decision(decision))
}

fn replicate_slide(ctx: &Context, name: &RedisString, log: &SlidingLog, cost: u64) {
    let mut parts: Vec<Vec<u8>> = Vec::with_capacity(2 + 2 * log.windows().len() + 4);
    parts.push(name.as_slice().to_vec());
    for w in log.windows() {
        parts.push(w.limit.to_string().into_bytes());
        parts.push(w.window_ms.to_string().into_bytes());
    }
    parts.push(b"COST".to_vec());
    parts.push(cost.to_string().into_bytes());
    parts.push(b"NOW".to_vec());
    parts.push(log.latest().to_string().into_bytes());
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    ctx.replicate("RL.SLIDE", refs.as_slice());
}

fn peek(ctx: &Context, args: &[RedisString]) -> Result<Reply, Error> {
    let now = clock(args::peek(args)?);
    let key = Key::open(ctx, key_arg(args)?, false);
    Ok(match key.limiter()? {
        Some(limiter) => Reply::Decision(limiter.peek(now)),
        None => Reply::Nil,
    })
}

fn refund(ctx: &Context, args: &[RedisString]) -> Result<Reply, Error> {
    let opts = args::refund(args)?;
    let name = key_arg(args)?;
    let now = clock(opts.now);
    let key = Key::open(ctx, name, true);
    let Some(limiter) = key.limiter()? else {
        return Ok(Reply::Nil);
    };
    if opts.cost == 0 {
        return Ok(Reply::Decision(limiter.peek(now)));
    }
    let decision = limiter.refund(now, opts.cost);
    let at = limiter.latest();
    settle(&key, limiter);
    let cost = opts.cost.to_string();
    let at = at.to_string();
    ctx.replicate(
        "RL.REFUND",
        &[name.as_slice(), b"COST", cost.as_bytes(), b"NOW", at.as_bytes()],
    );
    Ok(Reply::Decision(decision))
}

fn restore(ctx: &Context, args: &[RedisString]) -> Result<Reply, Error> {
    let payload = args::restore(args)?;
    let name = key_arg(args)?;
    let limiter = Limiter::decode(payload).map_err(|e| Error::BadPayload(e.0))?;
    let key = Key::open(ctx, name, true);
    key.limiter()?; // WRONGTYPE for a key of another Redis type
    let empty_at = limiter.empty_at();
    key.set(limiter)?;
    match empty_at {
        Some(at) => key.expire_at(at),
        None => key.delete(),
    }
    key.signal_modified();
    ctx.replicate_verbatim();
    Ok(Reply::Ok)
}
