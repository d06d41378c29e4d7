//! The `RL.*` handlers: parse, read the clock once, run the algorithm, set the expiry and
//! replicate. The only module that decides what a command does to a key.
//!
//! Replication: a change is propagated as the same command with its options resolved and
//! the exact decision time (`NOW`) it was taken at. A server executing a command that came
//! from its primary or from the AOF applies it even where it would have decided otherwise,
//! so replicas follow the primary's decisions. Refused and `COST 0` calls propagate nothing.

use redis_module::{Context, ContextFlags};

use crate::algo::fixed::FixedWindow;
use crate::algo::gcra::Gcra;
use crate::algo::slide::{SlidingLog, MAX_WINDOWS};
use crate::algo::subwin::SubWindow;
use crate::algo::{Limit, Millis};
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

/// What a call decides on: the parameters and the shared options.
struct Call<'a, P: ?Sized> {
    kind: Kind,
    params: &'a P,
    cost: u64,
    now: Option<Millis>,
    /// How many arguments, from the key on, the client sent positionally (replicated as is).
    positional: usize,
    /// Flags given (replicated after the positional arguments).
    flags: &'a [&'a api::Keyword],
    /// Options replicated with their resolved values, so replicas need no defaults.
    resolved: &'a [(&'a api::Keyword, u64)],
}

/// The body of every limiter command: decide at one time, record when allowed, expire the
/// key when the limiter will be empty, and propagate the effect.
fn limit<A: Limit>(
    ctx: &Context,
    args: &[Arg],
    call: Call<A::Params>,
    fresh: impl FnOnce() -> A,
    wrap: fn(A) -> Limiter,
    unwrap: fn(&mut Limiter) -> Option<&mut A>,
) -> Result<Reply, Error> {
    let name = key_arg(args)?;
    let now = clock(call.now);
    let (params, cost) = (call.params, call.cost);
    let mut key = Key::open(ctx, name, true);
    // A missing key gets a fresh limiter, and a limiter that must change shape a new one;
    // either is stored only if this call changes it.
    let mut created = None;
    let mut held = key.limiter()?;
    let (limiter, in_key) = match held.as_deref_mut() {
        Some(held) if held.kind() != call.kind => return Err(other_kind(held, call.kind)),
        Some(held) => {
            let current = unwrap(held).ok_or(Error::Internal(call.kind.command()))?;
            match current.reshaped(now, params) {
                Some(new) => (created.insert(new), false),
                None => (current, true),
            }
        }
        None => (created.insert(fresh()), false),
    };
    // Storing a new value drops the key's TTL, so it must be set again.
    let expiring_at = if in_key { limiter.empty_at() } else { None };
    let decision = limiter.acquire(now, params, cost);
    let changed = cost > 0
        && (decision.allowed || (applying_decided(ctx) && limiter.record(now, params, cost)));
    if !changed {
        return Ok(Reply::Decision(decision));
    }
    let (at, empty_at) = (limiter.latest(), limiter.empty_at());
    if let Some(limiter) = created {
        key.set(wrap(limiter))?;
    }
    settle(&key, empty_at, expiring_at);
    // The key and positional arguments exactly as the client sent them (validated above),
    // then the flags.
    let mut parts = [Arg::keyword(&api::COST); 1 + 2 * MAX_WINDOWS + 2];
    let head = args.get(1..1 + call.positional).unwrap_or_default();
    let flags = call.flags.iter().map(|k| Arg::keyword(k));
    let mut n = 0;
    for (slot, arg) in parts.iter_mut().zip(head.iter().copied().chain(flags)) {
        *slot = arg;
        n += 1;
    }
    api::replicate_at(
        ctx,
        call.kind.command_c(),
        &parts[..n],
        call.resolved,
        cost,
        at,
    );
    Ok(Reply::Decision(decision))
}

pub fn slide(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    let req = args::slide(args)?;
    let windows = req.windows.as_slice();
    let call = Call {
        kind: Kind::Slide,
        params: windows,
        cost: req.options.cost,
        now: req.options.now,
        positional: 1 + 2 * windows.len(),
        flags: &[],
        resolved: &[],
    };
    let wrap = |log| Limiter::Slide(Box::new(log));
    limit(
        ctx,
        args,
        call,
        || SlidingLog::new(windows),
        wrap,
        Limiter::slide_mut,
    )
}

pub fn token(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    let req = args::token(args)?;
    let resolved = [(&api::BURST, req.params.burst)];
    let shape = (
        Kind::Token,
        Limiter::Token as fn(Gcra) -> Limiter,
        Limiter::token_mut as _,
    );
    bucket(ctx, args, req, &resolved, shape)
}

pub fn leaky(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    let req = args::leaky(args)?;
    let p = req.params;
    let resolved = [(&api::MAXDELAY, p.max_delay_ms), (&api::BURST, p.burst)];
    let shape = (
        Kind::Leaky,
        Limiter::Leaky as fn(Gcra) -> Limiter,
        Limiter::leaky_mut as _,
    );
    bucket(ctx, args, req, &resolved, shape)
}

pub fn fixed(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    let req = args::fixed(args)?;
    let p = req.params;
    let call = Call {
        kind: Kind::Fixed,
        params: &p,
        cost: req.options.cost,
        now: req.options.now,
        positional: 3,
        flags: if p.align { &[&api::ALIGN] } else { &[] },
        resolved: &[],
    };
    let fresh = || FixedWindow::new(&p);
    limit(ctx, args, call, fresh, Limiter::Fixed, Limiter::fixed_mut)
}

pub fn subwin(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    let req = args::subwin(args)?;
    let p = req.params;
    let call = Call {
        kind: Kind::Subwin,
        params: &p,
        cost: req.options.cost,
        now: req.options.now,
        positional: 4,
        flags: &[],
        resolved: &[],
    };
    let fresh = || SubWindow::new(&p);
    limit(ctx, args, call, fresh, Limiter::Subwin, Limiter::subwin_mut)
}

/// `RL.TOKEN` and `RL.LEAKY`: the same core under two kinds of key.
type BucketShape = (
    Kind,
    fn(Gcra) -> Limiter,
    fn(&mut Limiter) -> Option<&mut Gcra>,
);

fn bucket(
    ctx: &Context,
    args: &[Arg],
    req: args::Rate,
    resolved: &[(&api::Keyword, u64)],
    (kind, wrap, unwrap): BucketShape,
) -> Result<Reply, Error> {
    let p = req.params;
    let call = Call {
        kind,
        params: &p,
        cost: req.options.cost,
        now: req.options.now,
        positional: 3,
        flags: &[],
        resolved,
    };
    limit(ctx, args, call, || Gcra::new(&p), wrap, unwrap)
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
    let Some(mut limiter) = key.limiter()? else {
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
    api::replicate_at(ctx, c"RL.REFUND", &[name], &[], opts.cost, at);
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
