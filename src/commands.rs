//! The `RL.*` handlers: parse, read the clock once, run the algorithm, set the expiry and
//! replicate. The only module that decides what a command does to a key.
//!
//! Replication: a change is propagated as `RL.APPLY key effect` (see [`crate::effect`]; the
//! changes of one `RL.ALL` as one `RL.APPLY key effect [key effect ...]`): the
//! deciding command's words with the exact decision time (`NOW`) it was taken at. A server executing a command that came
//! from its primary or from the AOF applies it even where it would have decided otherwise,
//! so replicas follow the primary's decisions. Refused and `COST 0` calls propagate nothing.
//!
//! Time: a call decides at its caller's time (`NOW`, else the server clock), or at the
//! limiter's latest time when that is later (time never runs backwards for a key); waits and
//! resets are measured from the caller's time. The key expires when its limiter is back to
//! empty on the server's clock: a `NOW` behind the server clock keeps the key that much
//! longer, and that absolute expiry is propagated with the change.

use std::ffi::CStr;

use redis_module::{Context, ContextFlags};

use crate::algo::fixed::FixedWindow;
use crate::algo::gcra::Gcra;
use crate::algo::slide::SlidingLog;
use crate::algo::subwin::SubWindow;
use crate::algo::{Limit, Millis};
use crate::api::{self, Arg, Reply};
use crate::args::{self, AsBytes};
use crate::config;
use crate::effect::{self, Compact, Words};
use crate::error::Error;
use crate::store::{now_ms, Key};
use crate::value::{Kind, Limiter};

mod all;
pub use all::all;

/// The times one call works with.
#[derive(Clone, Copy)]
pub(crate) struct Clock {
    /// The caller's time: its `NOW`, else the server clock, read once.
    pub(crate) caller: Millis,
    /// How far the server clock is ahead of the caller's `NOW`: the key lives that much
    /// longer than its limiter's own empty time. Always 0 for a command that was decided
    /// already (from the primary or the AOF), whose expiry must not depend on this
    /// server's clock.
    pub(crate) lag: Millis,
}

/// How a call is applied.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A client's call: decide, record when allowed, propagate the effect.
    Decide,
    /// An effect from `RL.APPLY` (sent by a primary, or read from the AOF): record it as it
    /// was decided, at its `NOW`.
    Apply,
    /// An effect of an `RL.APPLY` of several changes, checked before any is applied: all
    /// that [`Mode::Apply`] does up to the change itself, which it does not make. Answers
    /// OK when the change would be applied, else the error applying it would answer.
    Check,
}

impl Mode {
    /// An effect (applied or checked) rather than a client's own call.
    pub(crate) fn is_effect(self) -> bool {
        self != Mode::Decide
    }
}

/// Reads the clock for a call with `now` as its `NOW` option, refusing a `NOW` further ahead
/// of the server clock than `ratelimit.now-max-ahead-ms` allows (never for a command that was
/// decided already).
pub(crate) fn clock(ctx: &Context, now: Option<Millis>, mode: Mode) -> Result<Clock, Error> {
    let server = u64::try_from(now_ms()).unwrap_or(0);
    // An effect from a client (not from the primary or the AOF) is bounded like any NOW.
    let caller = match (now, mode) {
        (Some(caller), _) => caller,
        (None, Mode::Decide) => {
            return Ok(Clock {
                caller: server,
                lag: 0,
            })
        }
        (None, _) => return Err(Error::Invalid("an RL.APPLY effect needs NOW")),
    };
    if applying_decided(ctx) {
        return Ok(Clock { caller, lag: 0 });
    }
    if let Some(max_ms) = config::now_max_ahead_ms() {
        let ahead_ms = caller.saturating_sub(server);
        if ahead_ms > max_ms {
            return Err(Error::NowAhead { ahead_ms, max_ms });
        }
    }
    // An effect gets the expiry its state gives, whatever this server's clock: the one it
    // gets on replicas and from the AOF, which apply it as it is.
    let lag = match mode {
        Mode::Decide => server.saturating_sub(caller),
        Mode::Apply | Mode::Check => 0,
    };
    Ok(Clock { caller, lag })
}

/// `RL.APPLY` and `RL.RESTORE` write what a decision or a save made, unchecked against any
/// limit: they run from the primary and while loading (the AOF), and by hand only for a
/// user allowed `CONFIG SET` (an administrator), whatever ACL rule lets a client call them.
fn internal(ctx: &Context, name: &'static str) -> Result<(), Error> {
    const CONFIG_SET: [&[u8]; 4] = [b"CONFIG", b"SET", b"ratelimit.now-max-ahead-ms", b"1000"];
    if applying_decided(ctx) || api::may_run(ctx, &CONFIG_SET) {
        Ok(())
    } else {
        Err(Error::InternalCommand(name))
    }
}

/// The command comes from our primary or from the AOF: it was decided already.
pub(crate) fn applying_decided(ctx: &Context) -> bool {
    ctx.get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
}

pub(crate) fn key_arg(args: &[Arg]) -> Result<Arg, Error> {
    // `let ... else` rather than `ok_or`: an `Error` made and dropped on every call costs a
    // call to its destructor.
    let Some(&key) = args.get(1) else {
        return Err(Error::Arity);
    };
    Ok(key)
}

pub(crate) fn other_kind(held: &Limiter, wanted: Kind) -> Error {
    Error::OtherKind {
        held: held.kind(),
        wanted: wanted.command(),
    }
}

/// After a change by the command whose keyspace event is `event`: the key expires when the
/// limiter is back to empty, `lag` ms later for a lagging `NOW` (or is deleted now when it
/// already is empty). `before` is the limiter's empty time before the change: when the new
/// expiry differs it is set at once; when it is the same, the key's real expiry is read and
/// set again only if something (PERSIST, EXPIRE, RESTORE) moved it. Returns the expiry set.
pub(crate) fn settle(
    key: &Key,
    event: &CStr,
    empty_at: Option<Millis>,
    lag: Millis,
    before: Option<Millis>,
) -> Option<Millis> {
    let expiry = empty_at.map(|at| at.saturating_add(lag));
    match expiry {
        Some(at) if expiry != before || key.expires_at() != expiry => key.expire_at(at),
        Some(_) => {}
        None => key.delete(),
    }
    key.signal_modified();
    key.notify(event);
    if expiry.is_none() {
        key.notify_deleted();
    }
    expiry
}

/// Propagates the key's absolute expiry when it is not the limiter's own empty time (a
/// lagging `NOW`): replicas and the AOF compute that one themselves.
pub(crate) fn replicate_expiry(ctx: &Context, name: Arg, lag: Millis, expiry: Option<Millis>) {
    if let (true, Some(at)) = (lag > 0, expiry) {
        api::replicate_expire_at(ctx, name, at);
    }
}

/// What a call decides on: the parameters and the shared options.
struct Call<'a, P: ?Sized> {
    kind: Kind,
    params: &'a P,
    cost: u64,
    now: Option<Millis>,
    mode: Mode,
    /// The positional arguments after the key, as parsed (the parser has checked that the
    /// client wrote them as canonical integers, so these propagate the same words).
    positional: &'a [u64],
    /// Flags given (propagated after the positional arguments).
    flags: &'a [&'a str],
    /// Options as `(keyword, value, default)`: propagated with their values where these are
    /// not the defaults the command's parser applies.
    resolved: &'a [(&'a str, u64, u64)],
}

/// Propagates the effect of a decision: `RL.APPLY key effect` (see [`crate::effect`]). An
/// effect being applied propagates nothing here: its `RL.APPLY` passes itself on.
fn propagate(
    ctx: &Context,
    key: Arg,
    mode: Mode,
    command: &str,
    effect: impl FnOnce(&mut Compact),
) {
    match mode {
        // `RL.APPLY` passes itself on (see `apply`); a check changes nothing.
        Mode::Apply | Mode::Check => {}
        Mode::Decide => {
            let mut compact = Compact::new(command);
            effect(&mut compact);
            match compact.as_bytes() {
                Some(bytes) => api::replicate_effect(ctx, key, bytes),
                // Not reached: the commands write only canonical numbers and keywords.
                None => {
                    ctx.log_warning("ratelimit: an effect could not be written; not propagated")
                }
            }
        }
    }
}

/// The body of every limiter command: decide at one time, record when allowed, expire the
/// key when the limiter will be empty, and propagate the effect.
fn limit<L: Limit>(
    ctx: &Context,
    key_name: Arg,
    call: Call<L::Params>,
    fresh: impl FnOnce() -> L,
    wrap: fn(L) -> Limiter,
    unwrap: fn(&mut Limiter) -> Option<&mut L>,
) -> Result<Reply, Error> {
    let clock = clock(ctx, call.now, call.mode)?;
    let (params, cost) = (call.params, call.cost);
    let mut key = Key::open(ctx, key_name, true);
    // A missing key gets a fresh limiter, and a limiter that must change shape a new one;
    // either is stored only if this call changes it.
    let mut created = None;
    let mut held = key.limiter()?;
    let (limiter, in_key) = match held.as_deref_mut() {
        Some(held) if held.kind() != call.kind => return Err(other_kind(held, call.kind)),
        Some(held) => {
            let current = unwrap(held).ok_or_else(|| Error::Internal(call.kind.command()))?;
            match current.reshaped(clock.caller, params) {
                Some(new) => (created.insert(new), false),
                None => (current, true),
            }
        }
        None => (created.insert(fresh()), false),
    };
    let behind = limiter.latest().saturating_sub(clock.caller);
    let now = clock.caller;
    // `Limit::acquire`, with the limiter's empty time read in between, only for a call
    // that records: refused and `COST 0` calls change nothing and need no more.
    let decision = limiter.evaluate(now, params, cost).seen_from_behind(behind);
    // Decided elsewhere: an effect, or a command of the older form (which always carries
    // NOW) from the primary or the AOF. Refused calls without NOW skip the flags lookup.
    let decided = || call.mode.is_effect() || (call.now.is_some() && applying_decided(ctx));
    if cost == 0 || !(decision.allowed || decided()) {
        // Nothing changed: nothing to write back to the key.
        if let Some(held) = held.as_mut() {
            held.unchanged();
        }
        return Ok(Reply::Decision(decision));
    }
    if call.mode == Mode::Check {
        let fits = limiter.can_record(now, params, cost);
        if let Some(held) = held.as_mut() {
            held.unchanged();
        }
        return if fits {
            Ok(Reply::Ok)
        } else {
            Err(Error::DoesNotFit)
        };
    }
    // Storing a new value drops the key's TTL, so it must be set again.
    let before = if in_key { limiter.empty_at() } else { None };
    if !limiter.record(now, params, cost) {
        // A record that does not fit changes nothing (nothing was stored either): refused
        // as an error, never answered as an allowed call that counts nothing.
        if let Some(held) = held.as_mut() {
            held.unchanged();
        }
        return Err(Error::DoesNotFit);
    }
    let (at, empty_at) = (limiter.latest(), limiter.empty_at());
    // The key's own limiter goes back to it before the key changes further.
    drop(held);
    if let Some(limiter) = created {
        key.set(wrap(limiter))?;
    }
    let expiry = settle(&key, call.kind.event(), empty_at, clock.lag, before);
    let decision = decision.resetting_at(empty_at, clock.caller);
    propagate(ctx, key_name, call.mode, call.kind.command(), |line| {
        // The positional arguments (the words the client sent), then the flags.
        for &v in call.positional {
            line.number(v);
        }
        for flag in call.flags {
            line.word(flag.as_bytes());
        }
        for &(keyword, value, default) in call.resolved {
            if value != default {
                line.option(keyword, value);
            }
        }
        if cost != args::COST_DEFAULT {
            line.option("COST", cost);
        }
        line.option("NOW", at);
    });
    replicate_expiry(ctx, key_name, clock.lag, expiry);
    Ok(Reply::Decision(decision))
}

pub fn slide(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    slide_as(ctx, key_arg(args)?, args, Mode::Decide)
}

fn slide_as<A: AsBytes>(ctx: &Context, key: Arg, args: &[A], mode: Mode) -> Result<Reply, Error> {
    let req = args::slide(args)?;
    let windows = req.windows.as_slice();
    let mut numbers = [0u64; 2 * crate::algo::slide::MAX_WINDOWS];
    for (pair, w) in numbers.chunks_exact_mut(2).zip(windows) {
        pair.copy_from_slice(&[w.limit, w.window_ms]);
    }
    let call = Call {
        kind: Kind::Slide,
        params: windows,
        cost: req.options.cost,
        now: req.options.now,
        mode,
        positional: numbers.get(..2 * windows.len()).unwrap_or_default(),
        flags: &[],
        resolved: &[],
    };
    let wrap = |log| Limiter::Slide(Box::new(log));
    let fresh = || SlidingLog::new(windows);
    limit(ctx, key, call, fresh, wrap, Limiter::slide_mut)
}

pub fn token(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    token_as(ctx, key_arg(args)?, args, Mode::Decide)
}

fn token_as<A: AsBytes>(ctx: &Context, key: Arg, args: &[A], mode: Mode) -> Result<Reply, Error> {
    let req = args::token(args)?;
    let p = req.params;
    let resolved = [("BURST", p.burst, args::token_burst_default(p.limit))];
    let shape = (
        Kind::Token,
        Limiter::Token as fn(Gcra) -> Limiter,
        Limiter::token_mut as _,
    );
    bucket(ctx, key, mode, req, &resolved, shape)
}

pub fn leaky(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    leaky_as(ctx, key_arg(args)?, args, Mode::Decide)
}

fn leaky_as<A: AsBytes>(ctx: &Context, key: Arg, args: &[A], mode: Mode) -> Result<Reply, Error> {
    let req = args::leaky(args)?;
    let p = req.params;
    let resolved = [
        (
            "MAXDELAY",
            p.max_delay_ms,
            args::leaky_max_delay_default(p.window_ms),
        ),
        ("BURST", p.burst, args::LEAKY_BURST_DEFAULT),
    ];
    let shape = (
        Kind::Leaky,
        Limiter::Leaky as fn(Gcra) -> Limiter,
        Limiter::leaky_mut as _,
    );
    bucket(ctx, key, mode, req, &resolved, shape)
}

pub fn fixed(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    fixed_as(ctx, key_arg(args)?, args, Mode::Decide)
}

fn fixed_as<A: AsBytes>(ctx: &Context, key: Arg, args: &[A], mode: Mode) -> Result<Reply, Error> {
    let req = args::fixed(args)?;
    let p = req.params;
    let call = Call {
        kind: Kind::Fixed,
        params: &p,
        cost: req.options.cost,
        now: req.options.now,
        mode,
        positional: &[p.limit, p.window_ms],
        flags: if p.align { &["ALIGN"] } else { &[] },
        resolved: &[],
    };
    let fresh = || FixedWindow::new(&p);
    limit(ctx, key, call, fresh, Limiter::Fixed, Limiter::fixed_mut)
}

pub fn subwin(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    subwin_as(ctx, key_arg(args)?, args, Mode::Decide)
}

fn subwin_as<A: AsBytes>(ctx: &Context, key: Arg, args: &[A], mode: Mode) -> Result<Reply, Error> {
    let req = args::subwin(args)?;
    let p = req.params;
    let call = Call {
        kind: Kind::Subwin,
        params: &p,
        cost: req.options.cost,
        now: req.options.now,
        mode,
        positional: &[p.limit, p.window_ms, p.resolution_ms],
        flags: &[],
        resolved: &[],
    };
    let fresh = || SubWindow::new(&p);
    limit(ctx, key, call, fresh, Limiter::Subwin, Limiter::subwin_mut)
}

/// `RL.TOKEN` and `RL.LEAKY`: the same core under two kinds of key.
type BucketShape = (
    Kind,
    fn(Gcra) -> Limiter,
    fn(&mut Limiter) -> Option<&mut Gcra>,
);

fn bucket(
    ctx: &Context,
    key: Arg,
    mode: Mode,
    req: args::Rate,
    resolved: &[(&str, u64, u64)],
    (kind, wrap, unwrap): BucketShape,
) -> Result<Reply, Error> {
    let p = req.params;
    let call = Call {
        kind,
        params: &p,
        cost: req.options.cost,
        now: req.options.now,
        mode,
        positional: &[p.limit, p.window_ms],
        flags: &[],
        resolved,
    };
    limit(ctx, key, call, || Gcra::new(&p), wrap, unwrap)
}

pub fn peek(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    let opts = args::peek(args)?;
    let clock = clock(ctx, opts.now, Mode::Decide)?;
    let mut key = Key::open(ctx, key_arg(args)?, false);
    let held = key.limiter()?;
    let reply = match held {
        Some(limiter) if opts.cost > 0 => {
            // What the limiter command would answer for COST n, its reset included.
            let behind = limiter.latest().saturating_sub(clock.caller);
            let decision = limiter.peek_cost(clock.caller, opts.cost);
            Reply::Decision(decision.seen_from_behind(behind))
        }
        Some(limiter) => {
            let behind = limiter.latest().saturating_sub(clock.caller);
            let decision = limiter.peek(clock.caller).seen_from_behind(behind);
            Reply::Decision(decision.resetting_at(limiter.empty_at(), clock.caller))
        }
        None => Reply::Nil,
    };
    Ok(reply)
}

pub fn refund(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    refund_as(ctx, key_arg(args)?, args, Mode::Decide)
}

fn refund_as<A: AsBytes>(ctx: &Context, name: Arg, args: &[A], mode: Mode) -> Result<Reply, Error> {
    let opts = args::refund(args)?;
    let clock = clock(ctx, opts.now, mode)?;
    let mut key = Key::open(ctx, name, true);
    let Some(mut limiter) = key.limiter()? else {
        return Ok(Reply::Nil);
    };
    if limiter.kind() == Kind::Lease {
        return Err(Error::LeaseRefund);
    }
    let behind = limiter.latest().saturating_sub(clock.caller);
    if opts.cost == 0 {
        return Ok(Reply::Decision(
            limiter.peek(clock.caller).seen_from_behind(behind),
        ));
    }
    if mode == Mode::Check {
        // A refund always applies.
        limiter.unchanged();
        return Ok(Reply::Ok);
    }
    let before = limiter.empty_at();
    let decision = limiter
        .refund(clock.caller, opts.cost)
        .seen_from_behind(behind);
    let (at, empty_at) = (limiter.latest(), limiter.empty_at());
    let decision = decision.resetting_at(empty_at, clock.caller);
    // Back to the key, which `settle` may delete.
    drop(limiter);
    let expiry = settle(&key, c"rl.refund", empty_at, clock.lag, before);
    propagate(ctx, name, mode, "RL.REFUND", |line| {
        line.option("COST", opts.cost);
        line.option("NOW", at);
    });
    replicate_expiry(ctx, name, clock.lag, expiry);
    Ok(Reply::Decision(decision))
}

pub fn charge(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    charge_as(ctx, key_arg(args)?, args, Mode::Decide)
}

/// `RL.CHARGE`: records units on an existing limiter under the parameters it last used, even
/// beyond its limit (a cost known after the work was done).
fn charge_as<A: AsBytes>(ctx: &Context, name: Arg, args: &[A], mode: Mode) -> Result<Reply, Error> {
    let opts = args::charge(args)?;
    let clock = clock(ctx, opts.now, mode)?;
    let mut key = Key::open(ctx, name, true);
    let Some(mut limiter) = key.limiter()? else {
        return Ok(Reply::Nil);
    };
    if limiter.kind() == Kind::Lease {
        return Err(Error::LeaseCharge);
    }
    let behind = limiter.latest().saturating_sub(clock.caller);
    if mode == Mode::Check {
        let fits = limiter.can_charge(clock.caller, opts.cost);
        limiter.unchanged();
        return if fits {
            Ok(Reply::Ok)
        } else {
            Err(Error::DoesNotFit)
        };
    }
    let before = limiter.empty_at();
    let Some(decision) = limiter.charge(clock.caller, opts.cost) else {
        limiter.unchanged();
        return Err(Error::DoesNotFit);
    };
    let decision = decision.seen_from_behind(behind);
    if opts.cost == 0 {
        return Ok(Reply::Decision(decision));
    }
    let (at, empty_at) = (limiter.latest(), limiter.empty_at());
    let decision = decision.resetting_at(empty_at, clock.caller);
    drop(limiter);
    // Never deletes the key: it holds the units just recorded.
    let expiry = settle(&key, c"rl.charge", empty_at, clock.lag, before);
    propagate(ctx, name, mode, "RL.CHARGE", |line| {
        line.option("COST", opts.cost).option("NOW", at);
    });
    replicate_expiry(ctx, name, clock.lag, expiry);
    Ok(Reply::Decision(decision))
}

/// `RL.APPLY key effect [key effect ...]`: records the effects of a decision taken by a
/// primary (or read from the AOF) as it was taken, without deciding again. See
/// [`crate::effect`].
///
/// One change answers as the command it applies. Several (what `RL.ALL` propagates) are all
/// applied or none: each key comes once, and every change is checked ([`Mode::Check`])
/// before any is applied; the call answers OK, or the error of the first change that could
/// not be applied, naming its key. What was applied is passed on as it came (to this
/// server's own replicas and AOF); nothing is passed on for an error.
pub fn apply(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    internal(ctx, "RL.APPLY")?;
    let changes = match args {
        [_, changes @ ..] if !changes.is_empty() && changes.len() % 2 == 0 => changes,
        _ => return Err(Error::Arity),
    };
    if let [key, effect] = changes {
        // One change: it refuses before it changes anything.
        let reply = apply_one(ctx, *key, effect, Mode::Apply)?;
        ctx.replicate_verbatim();
        return Ok(reply);
    }
    let named = |key: &Arg, e: Error| Error::for_key(key.as_bytes(), e);
    let keys = || changes.iter().step_by(2);
    for (i, key) in keys().enumerate() {
        if keys().take(i).any(|k| k.as_bytes() == key.as_bytes()) {
            return Err(named(key, Error::Invalid("the same key is given twice")));
        }
    }
    for change in changes.chunks_exact(2) {
        if let [key, effect] = change {
            apply_one(ctx, *key, effect, Mode::Check).map_err(|e| named(key, e))?;
        }
    }
    for (i, change) in changes.chunks_exact(2).enumerate() {
        let [key, effect] = change else {
            continue;
        };
        if let Err(e) = apply_one(ctx, *key, effect, Mode::Apply) {
            // Not reached (every change was checked): what was applied still goes on, so
            // that replicas and the AOF hold what this server holds.
            ctx.log_warning("ratelimit: an RL.APPLY change passed its check but failed");
            let applied: Vec<(Arg, &[u8])> = changes
                .chunks_exact(2)
                .take(i)
                .filter_map(|c| match c {
                    [k, e] => Some((*k, e.as_bytes())),
                    _ => None,
                })
                .collect();
            api::replicate_effects(ctx, &applied);
            return Err(named(key, e));
        }
    }
    ctx.replicate_verbatim();
    Ok(Reply::Ok)
}

fn apply_one(ctx: &Context, key: Arg, effect: &Arg, mode: Mode) -> Result<Reply, Error> {
    let expanded;
    let effect = match effect.as_bytes() {
        compact @ [effect::COMPACT, ..] => {
            expanded = effect::expand(compact)?;
            expanded
                .as_bytes()
                .ok_or(Error::Invalid("RL.APPLY effect is malformed"))?
        }
        text => text,
    };
    let words = Words::split(key.as_bytes(), effect)?;
    let w = words.as_slice();
    let command = words.command();
    let is = |name: &str| command.eq_ignore_ascii_case(name.as_bytes());
    if is("RL.SLIDE") {
        slide_as(ctx, key, w, mode)
    } else if is("RL.TOKEN") {
        token_as(ctx, key, w, mode)
    } else if is("RL.LEAKY") {
        leaky_as(ctx, key, w, mode)
    } else if is("RL.FIXED") {
        fixed_as(ctx, key, w, mode)
    } else if is("RL.SUBWIN") {
        subwin_as(ctx, key, w, mode)
    } else if is("RL.REFUND") {
        refund_as(ctx, key, w, mode)
    } else if is("RL.CHARGE") {
        charge_as(ctx, key, w, mode)
    } else if is("RL.ACQUIRE") {
        crate::lease::acquire_as(ctx, key, w, mode)
    } else if is("RL.RELEASE") {
        crate::lease::release_as(ctx, key, w, mode)
    } else if is("RL.EXTEND") {
        crate::lease::extend_as(ctx, key, w, mode)
    } else {
        Err(Error::Invalid(
            "an RL.APPLY effect starts with a limiter command, RL.REFUND or RL.CHARGE",
        ))
    }
}

/// `RL.RESTORE key payload`: what an AOF rewrite writes for a key (see `datatype`). A
/// payload this build cannot read is refused, except while loading or from the primary,
/// where it is kept as it is (see [`crate::value::Unreadable`]): the file or the stream is
/// never the victim.
pub fn restore(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    internal(ctx, "RL.RESTORE")?;
    let payload = args::restore(args)?;
    let name = key_arg(args)?;
    let key = Key::open(ctx, name, true);
    let existed = key.holds_ours()?; // WRONGTYPE for a key of another Redis type
                                     // The value, and for a limiter when it is back to empty (what the key's expiry follows).
    let (value, limiter_empty_at) = match Limiter::decode(payload) {
        Ok(limiter) => {
            let empty_at = limiter.empty_at();
            if empty_at.is_none() && !existed {
                // An empty limiter on a missing key: nothing to store, nothing changed.
                return Ok(Reply::Ok);
            }
            (crate::value::into_raw(limiter), Some(empty_at))
        }
        Err(e) if applying_decided(ctx) => {
            ctx.log_warning(&format!(
                "ratelimit: key '{}' holds a value this build cannot read ({}): kept as it \
                 is; commands on it answer an error until it is deleted",
                String::from_utf8_lossy(name.as_bytes())
                    .chars()
                    .take(128)
                    .collect::<String>(),
                e.0
            ));
            // Its expiry follows this command in the AOF, as it was saved.
            (crate::value::unreadable_into_raw(payload, e.0), None)
        }
        Err(e) => return Err(Error::BadPayload(e.0)),
    };
    key.set_raw(value)?;
    match limiter_empty_at {
        Some(empty_at) => {
            settle(&key, c"rl.restore", empty_at, 0, None);
        }
        None => {
            key.signal_modified();
            key.notify(c"rl.restore");
        }
    }
    ctx.replicate_verbatim();
    Ok(Reply::Ok)
}
