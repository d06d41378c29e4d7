//! The crate's error: a Redis error, the module missing, or a call the Lua fallback cannot
//! serve.

use std::fmt;

/// What [`Error::ModuleNotLoaded`] says: the same text in every client of redis-ratelimit.
pub const MODULE_NOT_LOADED: &str = "the ratelimit module is not loaded on this server \
(RL.SLIDE is unknown): load it with MODULE LOAD /path/to/libredis_ratelimit.so or a loadmodule \
line in redis.conf (pip install redis-ratelimit-module, then redis-ratelimit-module path, prints \
it); where MODULE LOAD is not allowed, pass Fallback::Lua (fixed window, sliding log and token \
bucket only). See docs/clients.md of redis-ratelimit.";

/// Every error of this crate.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// From the server or the connection, as the `redis` crate reports it (an `ERR` reply
    /// naming a bad argument, `WRONGTYPE`, `NOPERM`, an I/O error).
    Redis(redis::RedisError),
    /// `COMMAND INFO RL.SLIDE` found no such command, and no fallback was asked for. Its text
    /// is [`MODULE_NOT_LOADED`].
    ModuleNotLoaded,
    /// The module is missing and the client runs on [`Fallback::Lua`](crate::Fallback::Lua),
    /// which has only RL.FIXED, RL.SLIDE and RL.TOKEN: `what` is the command asked for.
    NotInFallback {
        /// The command that needs the module (`RL.HIT`, `RL.LEAKY`, ...).
        what: &'static str,
    },
    /// A reply of a shape the command never answers (a bug, or another module's command of
    /// the same name).
    Reply(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Redis(e) => write!(f, "{e}"),
            Error::ModuleNotLoaded => f.write_str(MODULE_NOT_LOADED),
            Error::NotInFallback { what } => write!(
                f,
                "{what} needs the ratelimit module, which is not loaded on this server: the \
                 Lua fallback has only RL.FIXED, RL.SLIDE and RL.TOKEN"
            ),
            Error::Reply(msg) => write!(f, "unexpected reply: {msg}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Error {
        Error::Redis(e)
    }
}

impl From<redis::ParsingError> for Error {
    fn from(e: redis::ParsingError) -> Error {
        Error::Reply(e.to_string())
    }
}
