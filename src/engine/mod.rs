//! The generic command layer: what every kind's commands go through, and the commands that
//! serve every kind alike.
//!
//! - [`call`]: a kind's command (its grammar and decision are the kind's): parse, read the
//!   clock once, open the key, run, store, expire, notify, propagate the effect, reply; a
//!   call that may wait joins the key's waiters (`rm::block`).
//! - [`rate`]: a rate limiter's command, made from its `Rate` and `Limit`.
//! - [`generic`]: `RL.PEEK`, `RL.REFUND`, `RL.CHARGE` on whatever kind a key holds.
//! - [`all`]: `RL.ALL`, one all-or-nothing decision across keys of any kinds, over
//!   [`limiters`], the machinery it shares with `RL.HIT`; [`combine`], the five fields such
//!   a call answers.
//! - [`apply`]: `RL.APPLY` and `RL.RESTORE`, what replication and the AOF carry.
//! - [`policy`]: `RL.POLICY SET/GET/DEL/LIST/HELP`, limits kept in the server, `RL.HIT`,
//!   and `RL.TOP`, who is refused most;
//! - [`top`]: the sketches `RL.TOP` answers from.
//! - [`info`]: `INFO ratelimit`.
//!
//! Nothing here names a kind: the registry (`src/registry.rs`) hands the kinds in as a
//! [`Catalog`] at load.
//!
//! Replication: a change is propagated as `RL.APPLY key effect` (the changes of one
//! `RL.ALL` as one `RL.APPLY key effect [key effect ...]`): the deciding command's words
//! with the exact decision time (`NOW`) it was taken at (see `core::effect`). A server
//! executing a command that came from its primary or from the AOF applies it even where it
//! would have decided otherwise, so replicas follow the primary's decisions. Refused and
//! `COST 0` calls propagate nothing.
//!
//! Time: a call decides at its caller's time (`NOW`, else the server clock), or at the
//! state's latest time when that is later (time never runs backwards for a key); waits and
//! resets are measured from the caller's time. The key expires when its state is back to
//! empty, measured from the server clock: a state left behind the server clock (a lagging
//! `NOW`) expires as far past the server clock as it is from empty, never more than its
//! limiter's own span, and that absolute expiry is propagated after the change. An effect
//! gets the expiry its state gives, on every server alike.

#![forbid(unsafe_code)]

pub mod all;
pub mod apply;
pub mod call;
pub mod combine;
pub mod config;
pub mod generic;
pub mod info;
pub mod limiters;
pub mod policy;
pub mod rate;
pub mod slot;
pub mod top;

use std::ffi::CStr;
use std::sync::OnceLock;

use redis_module::{Context, ContextFlags};

use crate::core::error::Error;
use crate::core::kind::{Clock, Command, Mode, Reply};
use crate::core::{Duration, Instant};
use crate::rm::api::{self, Acl, Arg, Handler};
use crate::rm::key::Key;

pub use generic::KindEntry;
pub use limiters::KindSpec;

/// The kinds and their commands, as the registry lists them.
pub struct Catalog {
    /// Each kind's generic operations, by registry index.
    pub kinds: &'static [KindEntry],
    /// Each kind's commands, by registry index.
    pub commands: &'static [&'static [CommandEntry]],
}

impl Catalog {
    /// Every kind's commands, in the registry's order.
    pub fn commands(&self) -> impl Iterator<Item = &'static CommandEntry> {
        self.commands.iter().flat_map(|c| c.iter())
    }
}

/// What a test that runs over every kind does with each: the registry's `visit` hands in
/// every kind and every command, in the list's order (test builds only).
#[cfg(test)]
pub trait Visit {
    /// A kind, with the command that makes its keys (its rate command, or its first).
    fn kind<K, C>(&mut self)
    where
        K: call::Storable + crate::core::sample::Sample,
        C: Command<Kind = K>,
    {
    }

    /// Each of a kind's commands (the first too).
    fn command<C: Command>(&mut self)
    where
        C::Kind: call::Storable,
    {
    }
}

/// What the generic layers know of one kind's command.
pub struct CommandEntry {
    /// Its metadata and counters.
    pub info: &'static crate::core::meta::Info,
    /// Its effect's compact code (0: textual).
    pub effect_code: u8,
    /// Applies (or checks) an effect of it on a key: `RL.APPLY`.
    pub apply: ApplyFn,
    /// Its place among `RL.ALL`'s limiters, if it has one.
    pub spec: Option<KindSpec>,
    /// Registers it with the server.
    pub register: RegisterFn,
}

/// Applies (or checks) an effect on a key: the words after the command's name.
pub type ApplyFn = fn(&Context, Arg, &[&[u8]], Mode) -> Result<Reply, Error>;

/// Registers a command, `Some` with how far its ACL categories could be set.
pub type RegisterFn = fn(&Context, Option<&str>) -> Option<Acl>;

impl CommandEntry {
    /// The entry of command `C`.
    pub const fn of<C: Command>() -> CommandEntry
    where
        C::Kind: call::Storable,
        C::Call<'static>: Send + Sync,
    {
        CommandEntry {
            info: C::INFO,
            effect_code: C::EFFECT_CODE,
            apply: call::apply::<C>,
            spec: limiters::spec_of::<C>(),
            register: api::register::<call::Cmd<C>>,
        }
    }
}

/// Registers every command: the kinds' and the generic ones. `own` is the module's ACL
/// category, when the server has it. A kind's command outside the `RL.` names is a drop-in
/// for another module's (`CL.THROTTLE`, redis-cell's): when that module holds the name
/// already, the module loads without it, saying so in the log. Returns how far the commands' ACL categories could be
/// set (the least of them); `None`, logged, when a command could not be registered.
pub fn register(ctx: &Context, own: Option<&str>) -> Option<Acl> {
    use policy::commands as pc;
    let generic: [(&str, RegisterFn); 16] = [
        (generic::Peek::INFO.name, api::register::<generic::Peek>),
        (generic::Refund::INFO.name, api::register::<generic::Refund>),
        (generic::Charge::INFO.name, api::register::<generic::Charge>),
        (all::All::INFO.name, api::register::<all::All>),
        (apply::Apply::INFO.name, api::register::<apply::Apply>),
        (apply::Restore::INFO.name, api::register::<apply::Restore>),
        (
            policy::hit::Hit::INFO.name,
            api::register::<policy::hit::Hit>,
        ),
        (pc::Set::INFO.name, api::register::<pc::Set>),
        (pc::Get::INFO.name, api::register::<pc::Get>),
        (pc::Del::INFO.name, api::register::<pc::Del>),
        (pc::Unban::INFO.name, api::register::<pc::Unban>),
        (pc::Subject::INFO.name, api::register::<pc::Subject>),
        (pc::Forget::INFO.name, api::register::<pc::Forget>),
        (pc::List::INFO.name, api::register::<pc::List>),
        (pc::Help::INFO.name, api::register::<pc::Help>),
        (
            policy::top::Top::INFO.name,
            api::register::<policy::top::Top>,
        ),
    ];
    let kinds = catalog().commands().map(|c| (c.info.name, c.register));
    let mut least = Acl::All;
    for (name, register) in kinds.chain(generic) {
        match register(ctx, own) {
            Some(acl) => least = least.max(acl),
            // A drop-in for another module's command (`CL.THROTTLE`, redis-cell's) whose
            // name that module holds already: the module loads without it.
            None if !name.starts_with("RL.") => ctx.log_warning(&format!(
                "ratelimit: {name} is taken (by another module loaded before, such as \
                 redis-cell): loaded without it"
            )),
            None => {
                ctx.log_warning(&format!("ratelimit: could not register {name}"));
                return None;
            }
        }
    }
    Some(least)
}

static CATALOG: OnceLock<&'static Catalog> = OnceLock::new();

/// Installs the registry's catalog (at load), and makes the table of the slots' tags that
/// compact policies name their families with (a few milliseconds: at load, not in a call).
pub fn install(catalog: &'static Catalog) {
    let _ = CATALOG.set(catalog);
    let _ = crate::core::policy::slot_tag(0);
}

/// The catalog installed at load (an empty one before).
pub fn catalog() -> &'static Catalog {
    static EMPTY: Catalog = Catalog {
        kinds: &[],
        commands: &[],
    };
    CATALOG.get().copied().unwrap_or(&EMPTY)
}

/// The command whose effect's compact code is `code` (`RL.REFUND` and `RL.CHARGE` have
/// theirs, the kinds' commands theirs).
pub fn effect_command(code: u8) -> Option<&'static str> {
    match code {
        generic::REFUND_CODE => Some("RL.REFUND"),
        generic::CHARGE_CODE => Some("RL.CHARGE"),
        0 => None,
        code => catalog()
            .commands()
            .find(|c| c.effect_code == code)
            .map(|c| c.info.name),
    }
}

/// Reads the clock for a call with `now` as its `NOW`, refusing a `NOW` further ahead of
/// the server clock than `ratelimit.now-max-ahead-ms` allows (never for a command that was
/// decided already).
pub fn clock(ctx: &Context, now: Option<Instant>, mode: Mode) -> Result<Clock, Error> {
    let server = api::now();
    // An effect from a client (not from the primary or the AOF) is bounded like any NOW.
    let caller = match (now, mode) {
        (Some(caller), _) => caller,
        (None, Mode::Decide) => {
            return Ok(Clock {
                caller: server,
                lag: Duration::ZERO,
                decided: false,
                server,
            })
        }
        (None, _) => return Err(Error::Invalid("an RL.APPLY effect needs NOW")),
    };
    if applying_decided(ctx) {
        return Ok(Clock {
            caller,
            lag: Duration::ZERO,
            decided: true,
            server,
        });
    }
    if let Some(max_ms) = config::now_max_ahead_ms() {
        let ahead_ms = caller.since(server).ms();
        if ahead_ms > max_ms {
            return Err(Error::NowAhead { ahead_ms, max_ms });
        }
    }
    // An effect gets the expiry its state gives, whatever this server's clock: the one it
    // gets on replicas and from the AOF, which apply it as it is.
    let lag = match mode {
        Mode::Decide => server.since(caller),
        Mode::Apply | Mode::Check => Duration::ZERO,
    };
    Ok(Clock {
        caller,
        lag,
        decided: false,
        server,
    })
}

/// The command comes from our primary or from the AOF: it was decided already.
pub fn applying_decided(ctx: &Context) -> bool {
    ctx.get_flags()
        .intersects(ContextFlags::REPLICATED | ContextFlags::LOADING)
}

/// `RL.APPLY` and `RL.RESTORE` write what a decision or a save made, unchecked against any
/// limit: they run from the primary and while loading (the AOF), and by hand only for a
/// user allowed `CONFIG SET` (an administrator), whatever ACL rule lets a client call them.
pub fn internal(ctx: &Context, name: &'static str) -> Result<(), Error> {
    if applying_decided(ctx) || administrator(ctx) {
        Ok(())
    } else {
        Err(Error::InternalCommand(name))
    }
}

/// Whether the calling client's user may set the module's settings (`CONFIG SET`): an
/// administrator, who may run what changes every client's limits.
pub fn administrator(ctx: &Context) -> bool {
    const CONFIG_SET: [&[u8]; 4] = [b"CONFIG", b"SET", b"ratelimit.now-max-ahead-ms", b"1000"];
    api::may_run(ctx, &CONFIG_SET)
}

/// The key argument of a command (its first).
pub fn key_arg(args: &[Arg]) -> Result<Arg, Error> {
    // `let ... else` rather than `ok_or`: an `Error` made and dropped on every call costs a
    // call to its destructor.
    let Some(&key) = args.get(1) else {
        return Err(Error::Arity);
    };
    Ok(key)
}

/// After a change by the command whose keyspace event is `event`: the key expires when its
/// state is back to empty, `lag` ms later (`Clock::key_lag`: a state behind the server
/// clock), or is deleted now when it already is empty. `before` is the state's empty time
/// before the change: when the new expiry differs it is set at once; when it is the same,
/// the key's real expiry is read and set again only if something (PERSIST, EXPIRE,
/// RESTORE) moved it. Returns the expiry set.
#[inline]
pub fn settle(
    key: &Key,
    event: &CStr,
    empty_at: Option<Instant>,
    lag: Duration,
    before: Option<Instant>,
) -> Option<Instant> {
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

/// Propagates the key's absolute expiry when it is not the state's own empty time (`lag`
/// above 0, see [`settle`]): replicas and the AOF compute that one themselves.
pub fn replicate_expiry(ctx: &Context, name: Arg, lag: Duration, expiry: Option<Instant>) {
    if let (true, Some(at)) = (!lag.is_zero(), expiry) {
        api::replicate_expire_at(ctx, name, at);
    }
}
