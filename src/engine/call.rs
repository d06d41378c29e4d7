//! A kind's command, for any kind: parse, read the clock once, open the key, run the
//! kind's decision, store what changed, set the expiry, notify, propagate the effect, and
//! reply. A call that may wait for its units (`BLOCK`) joins the key's waiters.

use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};

use redis_module::{Context, ContextFlags};

use super::{clock, replicate_expiry, settle};
use crate::core::effect::{Compact, Line, COMPACT_SHORT_LEN, MAX_WORDS};
use crate::core::error::Error;
use crate::core::kind::{Change, Clock, Command, Kind, Mode, Ran, Reply};
use crate::core::meta::Info;
use crate::core::{Duration, Instant, Wait};
use crate::rm::api::{self, Answer, Arg, Count, Handler};
use crate::rm::block::{self, Attempt, Pending};
use crate::rm::key::Key;
use crate::rm::storage::{MaybeBlock, MaybeCompact, Stored};

/// What a kind's state must be for the generic layers: registered, with its storage hooks.
pub trait Storable: Stored + MaybeCompact + MaybeBlock {}

impl<K: Stored + MaybeCompact + MaybeBlock> Storable for K {}

/// Command `C` as Redis calls it.
pub struct Cmd<C>(PhantomData<C>);

impl<C: Command> Handler for Cmd<C>
where
    C::Kind: Storable,
{
    const INFO: &'static Info = C::INFO;

    fn counters() -> Option<&'static dyn Count> {
        Some(&C::INFO.stats)
    }

    fn args() -> Vec<crate::core::meta::Arg> {
        C::doc_args()
    }

    #[inline(always)]
    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let name = super::key_arg(args)?;
        let rest = args.get(2..).unwrap_or_default();
        let mut buf = [const { MaybeUninit::uninit() }; MAX_WORDS];
        let heap: Vec<&[u8]>;
        let words = match api::words_into(&mut buf, rest) {
            Some(words) => words,
            None => {
                heap = rest.iter().map(Arg::as_bytes).collect();
                &heap
            }
        };
        // The call is read where the parser wrote it, not moved out (a call can be big).
        let parsed = C::parse(words, false);
        let Ok(call) = &parsed else {
            return Err(parsed.err().unwrap_or(Error::Internal(C::INFO.name)));
        };
        let blocking = C::block(call).filter(|_| C::cost(call) > 0 && can_block(ctx));
        let Some(timeout) = blocking else {
            return run_on::<C>(ctx, name, call, Mode::Decide).map(|(reply, _)| {
                if C::REFUSES && !api::allowed(&reply) {
                    super::top::refused_key(name.as_bytes());
                }
                block::kick(ctx, name);
                Answer::One(reply)
            });
        };
        // First come, first served: behind the calls already waiting on the key, unless it
        // goes before them (a renewal of a lease it holds).
        let db = api::selected_db(ctx);
        if !block::has_waiters(db, name.as_bytes()) || jumps_queue::<C>(ctx, name, call)? {
            let (reply, waits) = run_on::<C>(ctx, name, call, Mode::Decide)?;
            if !waits {
                block::kick(ctx, name);
                return Ok(Answer::One(reply));
            }
        }
        let pending = Waiting::<C> {
            call: C::owned(call),
        };
        block::wait(ctx, db, name, Box::new(pending), timeout)?;
        Ok(Answer::Blocked)
    }
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

/// Whether a waiting call goes before the calls already waiting on the key.
fn jumps_queue<C: Command>(ctx: &Context, name: Arg, call: &C::Call<'_>) -> Result<bool, Error>
where
    C::Kind: Storable,
{
    let now = clock(ctx, C::now(call), Mode::Decide)?.caller;
    let mut key = Key::open(ctx, name, false);
    let held = key.state::<C::Kind>()?;
    Ok(held.is_some_and(|state| C::jumps_queue(&state, call, now)))
}

/// Runs `call` of command `C` on the key `name`, as `mode` says: the reply, and whether the
/// call, not granted now, may wait for its units.
#[inline]
pub fn run_on<C: Command>(
    ctx: &Context,
    name: Arg,
    call: &C::Call<'_>,
    mode: Mode,
) -> Result<(Reply, bool), Error>
where
    C::Kind: Storable,
{
    let clock = clock(ctx, C::now(call), mode)?;
    run_at::<C>(ctx, name, call, clock, mode)
}

/// [`run_on`] at `clock`.
#[inline]
pub fn run_at<C: Command>(
    ctx: &Context,
    name: Arg,
    call: &C::Call<'_>,
    clock: Clock,
    mode: Mode,
) -> Result<(Reply, bool), Error>
where
    C::Kind: Storable,
{
    let mut key = Key::open(ctx, name, true);
    // A new state for the key, moved here only when there is one (a state can be big).
    let mut fresh = None;
    // The key's own state goes back to it (when `held` ends, in place) before the key
    // changes further.
    let (reply, wait, at, empty_at, before) = {
        let mut held = key.state::<C::Kind>()?;
        // What the run did is read where it was written, not moved out (it can be big).
        // What it owns is taken out below, the rest owns nothing: it is not dropped (a
        // drop would test the variants again), and nothing is leaked.
        let mut ran = ManuallyDrop::new(C::run(held.as_deref_mut(), call, clock, mode));
        let Ok(Ran {
            reply,
            change,
            wait,
        }) = &mut *ran
        else {
            let ran = ManuallyDrop::into_inner(ran);
            return Err(ran.err().unwrap_or(Error::Internal(C::INFO.name)));
        };
        let (reply, wait) = (std::mem::replace(reply, Reply::Nil), *wait);
        let (at, empty_at, before) = match change {
            Change::None => {
                // Nothing changed: nothing to write back to the key.
                if let Some(held) = held.as_mut() {
                    held.unchanged();
                }
                return Ok((reply, wait));
            }
            Change::Held { before, after } => match held.as_deref() {
                Some(state) => (state.latest_time(), *after, *before),
                None => return Err(Error::Internal(C::INFO.name)),
            },
            Change::New { .. } => match std::mem::replace(change, Change::None) {
                Change::New { state, empty } => (fresh.insert(state).latest_time(), empty, None),
                // Not reached: the change was matched as new just above.
                _ => return Err(Error::Internal(C::INFO.name)),
            },
        };
        (reply, wait, at, empty_at, before)
    };
    if let Some(state) = fresh {
        key.set(state)?;
    }
    let lag = clock.key_lag(at);
    let expiry = settle(&key, C::INFO.event, empty_at, lag, before);
    if mode == Mode::Decide {
        // An effect applied (`RL.APPLY`) passes itself on.
        propagate::<C>(ctx, name, call, &reply, at);
    }
    replicate_expiry(ctx, name, lag, expiry);
    Ok((reply, wait))
}

/// Propagates the effect of a change: `RL.APPLY key effect` (see `core::effect`), in the
/// compact form when the command has one.
#[inline]
fn propagate<C: Command>(ctx: &Context, name: Arg, call: &C::Call<'_>, reply: &Reply, at: Instant) {
    if C::EFFECT_CODE != 0 {
        let mut compact = Compact::<COMPACT_SHORT_LEN>::sized(C::EFFECT_CODE);
        C::effect(call, reply, at, &mut compact);
        if let Some(bytes) = compact.as_bytes() {
            return api::replicate_effect(ctx, name, bytes);
        }
        if compact.overflowed() {
            let mut compact = Compact::new(C::EFFECT_CODE);
            C::effect(call, reply, at, &mut compact);
            if let Some(bytes) = compact.as_bytes() {
                return api::replicate_effect(ctx, name, bytes);
            }
        }
    }
    let mut line = Line::new(C::INFO.name);
    C::effect(call, reply, at, &mut line);
    match line.as_bytes() {
        Some(bytes) => api::replicate_effect(ctx, name, bytes),
        // Not reached: the longest effect fits.
        None => ctx.log_warning("ratelimit: an effect could not be written; not propagated"),
    }
}

/// Applies (or checks) an effect of command `C` on the key `name`: its words after the key,
/// parsed as an effect's (`RL.APPLY`).
pub fn apply<C: Command>(
    ctx: &Context,
    name: Arg,
    words: &[&[u8]],
    mode: Mode,
) -> Result<Reply, Error>
where
    C::Kind: Storable,
{
    let call = C::parse(words, true)?;
    let (reply, _) = run_on::<C>(ctx, name, &call, mode)?;
    if mode == Mode::Apply {
        block::kick(ctx, name);
    }
    Ok(reply)
}

/// A call of command `C` waiting for its units (`BLOCK`, see `rm::block`).
struct Waiting<C: Command> {
    call: C::Call<'static>,
}

impl<C: Command> Pending for Waiting<C>
where
    C::Kind: Storable,
{
    /// Runs the call again at the server's time, as a client's own call: served when it
    /// gets its units, else tried again when it said they will be free.
    fn attempt(&self, ctx: &Context, name: Arg) -> Attempt {
        let now = server_now();
        let clock = Clock {
            caller: now,
            lag: Duration::ZERO,
            decided: false,
            server: now,
        };
        match run_at::<C>(ctx, name, &self.call, clock, Mode::Decide) {
            Ok((reply, true)) => match retry_after(&reply) {
                Some(Wait::For(d)) => Attempt::Later(d.ms()),
                // Never (not reached: the cost was within the limit when it waited).
                _ => Attempt::Done(Ok(reply)),
            },
            Ok((reply, false)) => Attempt::Done(Ok(reply)),
            Err(e) => Attempt::Done(Err(e)),
        }
    }

    fn refusal(&self, ctx: &Context, name: Arg) -> Result<Reply, Error> {
        let now = server_now();
        let mut key = Key::open(ctx, name, false);
        let held = key.state::<C::Kind>()?;
        Ok(C::refusal(held.as_deref(), &self.call, now))
    }

    fn counters(&self) -> &'static dyn Count {
        &C::INFO.stats
    }
}

/// The wait a reply tells, if it is a decision.
fn retry_after(reply: &Reply) -> Option<Wait> {
    match reply {
        Reply::Decision(d) | Reply::Lease(d, _) => Some(d.retry_after),
        _ => None,
    }
}

fn server_now() -> Instant {
    crate::rm::api::now()
}
