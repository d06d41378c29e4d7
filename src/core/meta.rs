//! Each command's metadata, which its kind (or the generic layer that owns it) declares:
//! name, arity, flags, ACL categories, key positions and `COMMAND DOCS` arguments. The
//! Redis layer registers the commands with it (`rm::cmdinfo`). Each command's metadata is
//! a `static`, which also holds its counters for `INFO ratelimit`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What `COMMAND DOCS` shows for one argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arg {
    pub name: &'static str,
    pub kind: ArgKind,
    pub token: Option<&'static str>,
    pub optional: bool,
    pub multiple: bool,
    pub sub: &'static [Arg],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    Key,
    Integer,
    String,
    Block,
    PureToken,
    /// One of the sub-arguments.
    OneOf,
}

/// Where a command's keys are, for its key spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// One key, right after the command name.
    First,
    /// `numkeys key [key ...]`: the count right after the command name, then the keys.
    Counted,
    /// `key value [key value ...]`: every other argument from the first.
    Pairs,
    /// One key, the second argument (`RL.HIT policy subject`: the subject, which places the
    /// keys the call derives from it).
    Second,
    /// One key, the third argument (`RL.POLICY UNBAN policy subject`: the subject).
    Third,
    /// None.
    None,
}

/// One command's metadata: what it registers with and what `COMMAND INFO` / `COMMAND
/// DOCS` show.
pub struct Info {
    pub name: &'static str,
    /// The keyspace event a change by the command emits (class `d`): its name in lower case.
    pub event: &'static std::ffi::CStr,
    pub summary: &'static str,
    pub complexity: &'static str,
    pub arity: i32,
    /// Where its keys are.
    pub keys: Keys,
    /// `RedisModule_CreateCommand`'s flags (`write deny-oom fast`); with `readonly`, its
    /// key spec is read-only.
    pub flags: &'static str,
    /// Its standard ACL categories, as Redis files its own commands: `write` or `read`,
    /// `fast` for O(1) or O(log N), `slow` for every other.
    pub categories: &'static str,
    /// Whether it is also in the module's own category (`@ratelimit`), where the server can
    /// add one: every command an application runs, not the internal ones.
    pub own_category: bool,
    pub args: &'static [Arg],
    /// Its calls, as `INFO ratelimit` counts them.
    pub stats: Stats,
}

/// A command's calls: allowed, refused, and answered with an error.
pub struct Stats {
    allowed: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
}

impl Stats {
    pub const fn new() -> Stats {
        Stats {
            allowed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    /// Counts one call: `Some(allowed)` for an answer, `None` for an error reply.
    pub fn count(&self, outcome: Option<bool>) {
        match outcome {
            Some(true) => &self.allowed,
            Some(false) => &self.refused,
            None => &self.errors,
        }
        .fetch_add(1, Relaxed);
    }

    /// `(allowed, refused, errors)`.
    pub fn read(&self) -> (u64, u64, u64) {
        [&self.allowed, &self.refused, &self.errors]
            .map(|v| v.load(Relaxed))
            .into()
    }
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

impl Info {
    /// Whether its key spec is read-only.
    pub fn read_only(&self) -> bool {
        self.flags.split(' ').any(|f| f == "readonly")
    }
}

pub const fn arg(name: &'static str, kind: ArgKind) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
        multiple: false,
        sub: &[],
    }
}

pub const fn option(token: &'static str, name: &'static str) -> Arg {
    Arg {
        name,
        kind: ArgKind::Integer,
        token: Some(token),
        optional: true,
        multiple: false,
        sub: &[],
    }
}

/// The arguments every limiter command shares.
pub const KEY: Arg = arg("key", ArgKind::Key);
pub const COST: Arg = option("COST", "cost");
pub const NOW: Arg = option("NOW", "unix-time-milliseconds");
pub const LIMIT: Arg = arg("limit", ArgKind::Integer);
pub const WINDOW_MS: Arg = arg("window-ms", ArgKind::Integer);

/// A block of arguments introduced by `token` (one of `RL.ALL`'s limiters, say).
pub const fn block(name: &'static str, token: &'static str, sub: &'static [Arg]) -> Arg {
    Arg {
        name,
        kind: ArgKind::Block,
        token: Some(token),
        optional: false,
        multiple: false,
        sub,
    }
}

/// A flag (a keyword alone).
pub const fn flag(name: &'static str, token: &'static str) -> Arg {
    Arg {
        name,
        kind: ArgKind::PureToken,
        token: Some(token),
        optional: true,
        multiple: false,
        sub: &[],
    }
}
