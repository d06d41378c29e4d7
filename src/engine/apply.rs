//! The internal commands, what replication and the AOF carry: `RL.APPLY key effect [key
//! effect ...]`, the effects of decisions taken elsewhere, and `RL.RESTORE key payload`,
//! what an AOF rewrite writes for a key. Both are for administrators only (see
//! [`super::internal`]).

use redis_module::Context;

use super::{applying_decided, catalog, effect_command, generic, internal, key_arg, settle};
use crate::core::effect::{self, Words};
use crate::core::error::Error;
use crate::core::kind::{Mode, Reply};
use crate::core::meta::{self, arg, ArgKind, Info, Keys, Stats};
use crate::rm::api::{self, Answer, Arg, Count, Handler};
use crate::rm::key::Key;
use crate::rm::storage;

/// `RL.APPLY key effect [key effect ...]`.
pub struct Apply;

/// `RL.RESTORE key payload`.
pub struct Restore;

/// The internal commands' flags and categories: `admin`, and in `@admin` and `@dangerous`
/// only (not `@write`, not `@ratelimit`), so that no rule an application user is given
/// grants them; they also refuse any client but an administrator, which is all that stops
/// them on Redis 7.0, where module commands have no categories.
const FLAGS: &str = "write deny-oom admin";
const CATEGORIES: &str = "admin dangerous slow";

static APPLY_INFO: Info = Info {
    name: "RL.APPLY",
    event: c"rl.apply",
    summary: "Records the effects of a decision taken elsewhere (what replicas and the AOF receive): for each key, the deciding command's words after its key, with COST and NOW, as one argument",
    complexity: "As the commands it applies",
    arity: -3,
    keys: Keys::Pairs,
    flags: FLAGS,
    categories: CATEGORIES,
    own_category: false,
    args: &[meta::Arg {
        name: "change",
        kind: ArgKind::Block,
        token: None,
        optional: false,
        multiple: true,
        sub: &[meta::KEY, arg("effect", ArgKind::String)],
    }],
    stats: Stats::new(),
};

static RESTORE_INFO: Info = Info {
    name: "RL.RESTORE",
    event: c"rl.restore",
    summary: "Replaces a key with a serialized limiter (what AOF rewrite writes)",
    complexity: "O(N)",
    arity: 3,
    keys: Keys::First,
    flags: FLAGS,
    categories: CATEGORIES,
    own_category: false,
    args: &[meta::KEY, arg("payload", ArgKind::String)],
    stats: Stats::new(),
};

impl Handler for Apply {
    const INFO: &'static Info = &APPLY_INFO;

    fn counters() -> Option<&'static dyn Count> {
        None
    }

    /// One change answers as the command it applies. Several (what `RL.ALL` propagates)
    /// are all applied or none: each key comes once, and every change is checked
    /// ([`Mode::Check`]) before any is applied; the call answers OK, or the error of the
    /// first change that could not be applied, naming its key. What was applied is passed
    /// on as it came (to this server's own replicas and AOF); nothing is passed on for an
    /// error.
    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        internal(ctx, "RL.APPLY")?;
        let changes = match args {
            [_, changes @ ..] if !changes.is_empty() && changes.len() % 2 == 0 => changes,
            _ => return Err(Error::Arity),
        };
        if let [key, effect] = changes {
            // One change: it refuses before it changes anything.
            let reply = apply_one(ctx, *key, effect, Mode::Apply)?;
            ctx.replicate_verbatim();
            return Ok(Answer::One(reply));
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
                // Not reached (every change was checked): what was applied still goes on,
                // so that replicas and the AOF hold what this server holds.
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
        Ok(Answer::One(Reply::Ok))
    }

    fn keys(args: &[Arg]) -> std::ops::Range<usize> {
        1..args.len()
    }
}

/// Applies (or checks) one effect on `key`: its textual or compact form, run by the
/// command it names.
fn apply_one(ctx: &Context, key: Arg, effect: &Arg, mode: Mode) -> Result<Reply, Error> {
    if let [effect::BINARY, code, bytes @ ..] = effect.as_bytes() {
        let hex = effect::to_hex(bytes);
        return match catalog().commands().find(|c| c.effect_code == *code) {
            Some(c) if *code != 0 => (c.apply)(ctx, key, &[&hex], mode),
            _ => Err(Error::Invalid("RL.APPLY effect is malformed")),
        };
    }
    let expanded;
    let effect = match effect.as_bytes() {
        compact @ [effect::COMPACT, ..] => {
            expanded = effect::expand(compact, effect_command)?;
            expanded
                .as_bytes()
                .ok_or_else(|| Error::Invalid("RL.APPLY effect is malformed"))?
        }
        text => text,
    };
    let words = Words::split(key.as_bytes(), effect)?;
    let rest = words.as_slice().get(2..).unwrap_or_default();
    let command = words.command();
    let is = |name: &str| command.eq_ignore_ascii_case(name.as_bytes());
    if is("RL.REFUND") {
        return generic::refund_or_charge(ctx, key, rest, mode, false);
    }
    if is("RL.CHARGE") {
        return generic::refund_or_charge(ctx, key, rest, mode, true);
    }
    match catalog().commands().find(|c| is(c.info.name)) {
        Some(c) => (c.apply)(ctx, key, rest, mode),
        None => Err(Error::Invalid(
            "an RL.APPLY effect starts with a limiter command, RL.REFUND or RL.CHARGE",
        )),
    }
}

impl Handler for Restore {
    const INFO: &'static Info = &RESTORE_INFO;

    fn counters() -> Option<&'static dyn Count> {
        None
    }

    /// A payload this build cannot read is refused, except while loading or from the
    /// primary, where it is kept as it is (see `storage::Unreadable`): the file or the
    /// stream is never the victim.
    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        internal(ctx, "RL.RESTORE")?;
        let [_, name, payload] = args else {
            return Err(Error::Arity);
        };
        let payload = payload.as_bytes();
        let name = key_arg(&[*name, *name])?;
        let key = Key::open(ctx, name, true);
        let existed = key.holds_ours()?; // WRONGTYPE for a key of another Redis type
        let value = match storage::decode(payload) {
            Ok(raw) => raw,
            Err(e) if applying_decided(ctx) => {
                ctx.log_warning(&format!(
                    "ratelimit: key '{}' holds a value this build cannot read ({}): kept as \
                     it is; commands on it answer an error until it is deleted",
                    String::from_utf8_lossy(name.as_bytes())
                        .chars()
                        .take(128)
                        .collect::<String>(),
                    e.0
                ));
                // Its expiry follows this command in the AOF, as it was saved.
                key.set_raw(storage::unreadable_into_raw(payload, e.0))?;
                key.signal_modified();
                key.notify(c"rl.restore");
                ctx.replicate_verbatim();
                return Ok(Answer::One(Reply::Ok));
            }
            Err(e) => return Err(Error::BadPayload(e.0)),
        };
        key.set_raw(value)?;
        let mut key = key;
        let empty_at = super::generic::empty_at(&mut key)?;
        if empty_at.is_none() && !existed {
            // An empty limiter on a missing key: nothing to store, nothing changed.
            key.delete();
            return Ok(Answer::One(Reply::Ok));
        }
        settle(
            &key,
            c"rl.restore",
            empty_at,
            crate::core::Duration::ZERO,
            None,
        );
        ctx.replicate_verbatim();
        Ok(Answer::One(Reply::Ok))
    }
}
