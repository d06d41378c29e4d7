//! The `RL.*` handlers: parse, read the clock once, run the algorithm, set the expiry and
//! replicate. The only module that decides what a command does to a key.
//!
//! Replication: a change is propagated as the same command with the exact decision time
//! (`NOW`) it was taken at. A server executing a command that came from its primary or from
//! the AOF applies it even where it would have decided otherwise, so replicas follow the
//! primary's decisions. Refused and `COST 0` calls propagate nothing.

use redis_module::{Context, ContextFlags};

use crate::algo::slide::SlidingLog;
use crate::algo::Millis;
use crate::api::{self, Arg, Reply};
use crate::args;
use crate::error::Error;
use crate::store::{now_ms, Key};
use crate::value::{Kind, Limiter};

/// The decision time: `NOW` when given, else the server clock, read once.
fn clock(now: Option<Millis>) -> Millis {
    now.unwrap_or_else(|| u64::try_from(now_ms()).unwrap_or(0))
}

/// The command comes from our primary or from the AOF: it was decided already.
fn applying_decided(ctx: &Context) -> bool {
    ctx.get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
}

fn key_arg(args: &[Arg]) -> Result<Arg, Error> {
    args.get(1).copied().ok_or(Error::Arity)
}

fn other_kind(held: &Limiter, wanted: Kind) -> Error {
    Error::OtherKind {
        held: held.kind(),
        wanted: wanted.command(),
    }
}

/// After a change: expire the key when the limiter is back to empty (or delete it now).
/// `expiring_at` is the key's expiry before the change, to skip setting it again when a
/// burst within one millisecond leaves it where it was.
fn settle(key: &Key, empty_at: Option<Millis>, expiring_at: Option<Millis>) {
    match empty_at {
        Some(at) if Some(at) == expiring_at => {}
        Some(at) => key.expire_at(at),
        None => key.delete(),
    }
    key.signal_modified();
}

pub fn slide(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    let req = args::slide(args)?;
    let name = key_arg(args)?;
    let windows = req.windows.as_slice();
    let cost = req.options.cost;
    let now = clock(req.options.now);
    let mut key = Key::open(ctx, name, true);
    // A missing key gets a fresh log, stored only if this call changes it.
    let mut fresh = None;
    let log = match key.limiter()? {
        Some(Limiter::Slide(log)) => log,
        #[allow(unreachable_patterns)] // reached once the other algorithms exist
        Some(other) => return Err(other_kind(other, Kind::Slide)),
        None => fresh.insert(SlidingLog::new(windows)),
    };
    let expiring_at = log.empty_at();
    let decision = log.acquire(now, windows, cost);
    let changed =
        cost > 0 && (decision.allowed || (applying_decided(ctx) && log.record(now, windows, cost)));
    if !changed {
        return Ok(Reply::Decision(decision));
    }
    let (at, empty_at) = (log.latest(), log.empty_at());
    if let Some(log) = fresh {
        key.set(Limiter::Slide(log))?;
    }
    settle(&key, empty_at, expiring_at);
    // The key and the pairs exactly as the client sent them (validated above).
    let positional = args.get(1..2 + 2 * windows.len()).unwrap_or_default();
    api::replicate_at(ctx, c"RL.SLIDE", positional, cost, at);
    Ok(Reply::Decision(decision))
}

pub fn peek(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    let now = clock(args::peek(args)?);
    let mut key = Key::open(ctx, key_arg(args)?, false);
    Ok(match key.limiter()? {
        Some(limiter) => Reply::Decision(limiter.peek(now)),
        None => Reply::Nil,
    })
}

pub fn refund(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    let opts = args::refund(args)?;
    let name = key_arg(args)?;
    let now = clock(opts.now);
    let mut key = Key::open(ctx, name, true);
    let Some(limiter) = key.limiter()? else {
        return Ok(Reply::Nil);
    };
    if opts.cost == 0 {
        return Ok(Reply::Decision(limiter.peek(now)));
    }
    let expiring_at = limiter.empty_at();
    let decision = limiter.refund(now, opts.cost);
    let (at, empty_at) = (limiter.latest(), limiter.empty_at());
    // May delete the key, freeing `limiter`: nothing may read it afterwards.
    settle(&key, empty_at, expiring_at);
    api::replicate_at(ctx, c"RL.REFUND", &[name], opts.cost, at);
    Ok(Reply::Decision(decision))
}

pub fn restore(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    let payload = args::restore(args)?;
    let name = key_arg(args)?;
    let limiter = Limiter::decode(payload).map_err(|e| Error::BadPayload(e.0))?;
    let mut key = Key::open(ctx, name, true);
    key.limiter()?; // WRONGTYPE for a key of another Redis type
    let empty_at = limiter.empty_at();
    key.set(limiter)?;
    settle(&key, empty_at, None);
    ctx.replicate_verbatim();
    Ok(Reply::Ok)
}
