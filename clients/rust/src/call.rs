//! What the sync and async clients share: which node a command goes to in Redis Cluster,
//! the module check's reading, and the Lua twins.

use std::sync::LazyLock;

use redis::{Cmd, FromRedisValue, Script, Value};

use crate::error::{Error, Result};
use crate::limit::Limit;

/// What the client does when the module is missing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fallback {
    /// Nothing: every call answers [`Error::ModuleNotLoaded`]. Never a silent fallback.
    #[default]
    None,
    /// RL.FIXED, RL.SLIDE and RL.TOKEN run as the Lua twins (`clients/lua/*.lua`, with
    /// `EVALSHA`, loaded again on `NOSCRIPT`); every other command answers
    /// [`Error::NotInFallback`].
    Lua,
}

/// What serves the calls, once the module check has run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The module is loaded.
    Module,
    /// The module is missing, and [`Fallback::Lua`] was asked for.
    Lua,
}

/// The module check's answer (`COMMAND INFO RL.SLIDE`): `Ok(Some(..))` once decided,
/// `Ok(None)` (as an `Err(ModuleNotLoaded)` to the caller) when the module is missing and
/// there is no fallback.
pub(crate) fn backend_from_check(reply: &Value, fallback: Fallback) -> Result<Backend> {
    let loaded = match reply {
        Value::Array(items) => items.iter().any(|i| !matches!(i, Value::Nil)),
        Value::Map(items) => !items.is_empty(),
        _ => false,
    };
    match (loaded, fallback) {
        (true, _) => Ok(Backend::Module),
        (false, Fallback::Lua) => Ok(Backend::Lua),
        (false, Fallback::None) => Err(Error::ModuleNotLoaded),
    }
}

/// Where a command goes in Redis Cluster. On a single server every route is the connection.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) enum Route {
    /// The cluster client's own routing: the first argument, which is the key of every
    /// single-key RL.* command.
    Default,
    /// The primary of this key's slot (RL.HIT's subject, RL.ALL's first key).
    Key(Vec<u8>),
    /// Every primary, the replies combined (RL.POLICY SET and DEL, RL.TOP).
    AllPrimaries(Combine),
    /// One node, always the same (the primary of slot 0): RL.POLICY GET and LIST, whose
    /// cursor is one node's.
    OneNode,
}

impl Route {
    /// The routing for `route_command`, or `None` for the client's own.
    #[cfg(feature = "cluster")]
    pub(crate) fn routing(&self) -> Option<redis::cluster_routing::RoutingInfo> {
        use redis::cluster_routing::{
            AggregateOp, MultipleNodeRoutingInfo, ResponsePolicy, Route as SlotRoute, RoutingInfo,
            SingleNodeRoutingInfo, SlotAddr,
        };
        match self {
            Route::Default => None,
            Route::Key(key) => Some(RoutingInfo::SingleNode(
                SingleNodeRoutingInfo::SpecificNode(SlotRoute::with_key(key, SlotAddr::Master)),
            )),
            Route::AllPrimaries(combine) => Some(RoutingInfo::MultiNode((
                MultipleNodeRoutingInfo::AllMasters,
                Some(match combine {
                    Combine::AllSucceeded => ResponsePolicy::AllSucceeded,
                    Combine::Sum => ResponsePolicy::Aggregate(AggregateOp::Sum),
                    Combine::Arrays => ResponsePolicy::CombineArrays,
                }),
            ))),
            Route::OneNode => Some(RoutingInfo::SingleNode(
                SingleNodeRoutingInfo::SpecificNode(SlotRoute::new(0, SlotAddr::Master)),
            )),
        }
    }
}

/// How the replies of every primary become one.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
pub(crate) enum Combine {
    /// One reply, once every node answered without an error.
    AllSucceeded,
    /// The sum of integer replies.
    Sum,
    /// The arrays concatenated.
    Arrays,
}

/// A command and where it goes.
pub(crate) struct Call {
    pub(crate) cmd: Cmd,
    pub(crate) route: Route,
}

impl Call {
    pub(crate) fn new(cmd: Cmd) -> Call {
        Call {
            cmd,
            route: Route::Default,
        }
    }

    pub(crate) fn to(cmd: Cmd, route: Route) -> Call {
        Call { cmd, route }
    }
}

/// A reply into `T`, strictly.
pub(crate) fn parse<T: FromRedisValue>(v: Value) -> Result<T> {
    T::from_redis_value(v).map_err(Error::from)
}

/// The twin's source text, embedded from this crate's copy of `clients/lua/`.
pub const FIXED_LUA: &str = include_str!("../lua/fixed.lua");
/// See [`FIXED_LUA`].
pub const SLIDE_LUA: &str = include_str!("../lua/slide.lua");
/// See [`FIXED_LUA`].
pub const TOKEN_LUA: &str = include_str!("../lua/token.lua");

static FIXED: LazyLock<Script> = LazyLock::new(|| Script::new(FIXED_LUA));
static SLIDE: LazyLock<Script> = LazyLock::new(|| Script::new(SLIDE_LUA));
static TOKEN: LazyLock<Script> = LazyLock::new(|| Script::new(TOKEN_LUA));

/// The Lua twin of `limit`'s command, if it has one.
pub(crate) fn script(limit: &Limit) -> Result<&'static Script> {
    match limit {
        Limit::Fixed { .. } => Ok(&FIXED),
        Limit::Slide { .. } => Ok(&SLIDE),
        Limit::Token { .. } => Ok(&TOKEN),
        other => Err(Error::NotInFallback {
            what: other.command(),
        }),
    }
}

/// The twin's arguments: the same words as the module command after its key.
pub(crate) fn script_args(limit: &Limit, cost: u64) -> Vec<Vec<u8>> {
    let mut words = limit.words();
    if cost != 1 {
        words.push(b"COST".to_vec());
        words.push(cost.to_string().into_bytes());
    }
    words
}

/// RL.TOP's entries from every primary, most refused first, `count` of them.
pub(crate) fn merge_top(
    mut entries: Vec<crate::TopEntry>,
    count: Option<u32>,
) -> Vec<crate::TopEntry> {
    entries.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    entries.truncate(count.unwrap_or(10) as usize);
    entries
}
