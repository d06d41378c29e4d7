//! Every error a client can see, with its Redis prefix, in one place.

use std::fmt;

/// An error reply. Refusing a request is not an error; these are for bad input, keys of the
/// wrong type and failures of the module itself.
#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    /// Wrong number of arguments: replied with Redis's own message, which names the command.
    Arity,
    /// `arg` is not an integer in `min..=max`.
    Range {
        arg: &'static str,
        min: u64,
        max: u64,
    },
    /// `arg` is not a duration in `min..=max` milliseconds.
    DurationRange {
        arg: &'static str,
        min: u64,
        max: u64,
    },
    UnknownOption(String),
    RepeatedOption(&'static str),
    MissingValue(&'static str),
    TooManyWindows(usize),
    /// Arguments that are each in range but do not fit together.
    Invalid(&'static str),
    /// As [`Error::Invalid`], quoting the client's word at fault.
    InvalidWord(&'static str, String),
    /// `RL.ALL` was given another number of limiter specs than of keys.
    SpecCount {
        keys: usize,
        specs: usize,
    },
    /// An error about one key of a multi-key call (`RL.ALL`), naming the key.
    ForKey {
        key: String,
        error: Box<Error>,
    },
    /// The key holds another Redis type.
    WrongType,
    /// The key holds a limiter of another kind: the command of the one it holds, and of
    /// the one the call wanted.
    OtherKind {
        held: &'static str,
        wanted: &'static str,
    },
    /// No limiter kind of `RL.ALL` is named `word`; `kinds` are the ones there are.
    ExpectedKind {
        kinds: &'static [&'static str],
        word: String,
    },
    /// `RL.RESTORE` was given bytes that are not a valid limiter.
    BadPayload(&'static str),
    /// A client's `NOW` is further ahead of the server clock than
    /// `ratelimit.now-max-ahead-ms` allows.
    NowAhead {
        ahead_ms: u64,
        max_ms: u64,
    },
    /// `RL.REFUND` on a key of leases, which `RL.RELEASE` frees.
    LeaseRefund,
    /// `RL.CHARGE` on a key of leases, which only `RL.ACQUIRE` takes units from.
    LeaseCharge,
    /// A key already holds the most leases it may.
    TooManyLeases(usize),
    /// A new lease's id has the form of the ids the server makes, for a time not reached.
    LeaseIdAhead(String),
    /// The units do not fit the limiter's counters: nothing was recorded.
    DoesNotFit,
    /// `RL.APPLY` or `RL.RESTORE` from a client not allowed to run them (they are what
    /// replication and the AOF carry).
    InternalCommand(&'static str),
    /// The key holds a value this build could not read when it was loaded (kept as it was).
    Unreadable(&'static str),
    /// An error about one limiter of a policy (`RL.POLICY SET`), naming it.
    ForLimiter {
        limiter: String,
        error: Box<Error>,
    },
    /// No policy has this name.
    NoPolicy(String),
    /// The server holds the most policies it may.
    TooManyPolicies(usize),
    /// `RL.POLICY SET` or `DEL` from a client not allowed to change policies (an
    /// administrator's, as `CONFIG SET` is).
    PolicyAdmin,
    /// `RL.POLICY SET` or `DEL` from a client of a replica, whose policies follow its
    /// primary's.
    PolicyOnReplica,
    /// A policy whose definition this build could not read when it was loaded (kept as it
    /// was): why.
    UnreadablePolicy(String),
    /// The key's slot is served by another node now (it moved while a call waited): where.
    Moved {
        slot: u16,
        node: Option<String>,
    },
    /// A bug: caught instead of crashing the server.
    Internal(&'static str),
    /// The server lacks a module API function the command needs.
    MissingApi(&'static str),
}

impl Error {
    /// `error`, about the limiter `limiter` of a policy.
    pub fn for_limiter(limiter: &[u8], error: Error) -> Error {
        Error::ForLimiter {
            limiter: String::from_utf8_lossy(limiter).chars().take(64).collect(),
            error: Box::new(error),
        }
    }

    /// `error`, about the key `key` of a multi-key call.
    pub fn for_key(key: &[u8], error: Error) -> Error {
        Error::ForKey {
            key: String::from_utf8_lossy(key).chars().take(64).collect(),
            error: Box::new(error),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Arity => write!(f, "ERR wrong number of arguments"),
            Error::Range { arg, min, max } => {
                write!(f, "ERR {arg} must be an integer from {min} to {max}")
            }
            Error::DurationRange { arg, min, max } => write!(
                f,
                "ERR {arg} must be a duration from {min} to {max} ms: an integer of ms, or \
                 with a unit (250ms, 60s, 5m, 1h, 1d)"
            ),
            Error::UnknownOption(opt) => write!(f, "ERR unknown option '{opt}'"),
            Error::RepeatedOption(opt) => write!(f, "ERR option {opt} given more than once"),
            Error::MissingValue(opt) => write!(f, "ERR option {opt} needs a value"),
            Error::TooManyWindows(max) => {
                write!(f, "ERR at most {max} limit/window_ms pairs in one call")
            }
            Error::Invalid(why) => write!(f, "ERR {why}"),
            Error::InvalidWord(why, word) => write!(f, "ERR {why}, got '{word}'"),
            Error::SpecCount { keys, specs } => write!(
                f,
                "ERR RL.ALL takes one limiter per key: {keys} key(s), {specs} limiter(s)"
            ),
            Error::ForKey { key, error } => {
                // The error's own text with its prefix first (ERR, WRONGTYPE), then the key.
                let text = error.to_string();
                write!(f, "{text} (key '{key}')")
            }
            Error::WrongType => write!(
                f,
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            ),
            Error::OtherKind { held, wanted } => {
                write!(f, "WRONGTYPE key holds a {held} limiter, not {wanted}")
            }
            Error::ExpectedKind { kinds, word } => write!(
                f,
                "ERR expected a limiter kind ({}), got '{word}'",
                kinds.join(", ")
            ),
            Error::NowAhead { ahead_ms, max_ms } => write!(
                f,
                "ERR NOW is {ahead_ms} ms ahead of the server clock; \
                 ratelimit.now-max-ahead-ms allows {max_ms}"
            ),
            Error::LeaseRefund => write!(
                f,
                "WRONGTYPE key holds RL.ACQUIRE leases: free them with RL.RELEASE, not RL.REFUND"
            ),
            Error::LeaseCharge => write!(
                f,
                "WRONGTYPE key holds RL.ACQUIRE leases: RL.CHARGE records on rate limiters; \
                 units in flight are taken with RL.ACQUIRE"
            ),
            Error::TooManyLeases(max) => {
                write!(f, "ERR the key holds {max} leases, the most it may")
            }
            Error::LeaseIdAhead(id) => write!(
                f,
                "ERR lease id '{id}' has the form <ms>-<seq> of the ids the server makes, \
                 for a time the call has not reached: choose another id, or leave ID out"
            ),
            Error::DoesNotFit => write!(
                f,
                "ERR the units do not fit the limiter's counters; nothing was recorded"
            ),
            Error::InternalCommand(name) => write!(
                f,
                "NOPERM {name} carries what replication and the AOF apply: it runs from the \
                 primary, while loading the AOF, or by hand for a user allowed CONFIG SET"
            ),
            Error::Unreadable(why) => write!(
                f,
                "ERR the key holds a ratelimit value this server could not read when it \
                 loaded it ({why}); it is kept as it was: DEL the key to start it afresh"
            ),
            Error::BadPayload(why) => write!(f, "ERR invalid limiter payload: {why}"),
            Error::ForLimiter { limiter, error } => {
                let text = error.to_string();
                write!(f, "{text} (limiter '{limiter}')")
            }
            Error::NoPolicy(name) => write!(f, "ERR no policy named '{name}'"),
            Error::TooManyPolicies(max) => write!(
                f,
                "ERR the server holds {max} policies, the most it may: RL.POLICY DEL one first"
            ),
            Error::PolicyAdmin => write!(
                f,
                "NOPERM RL.POLICY SET and DEL change the limits of every client: they run for \
                 a user allowed CONFIG SET (an administrator), from the primary, or while \
                 loading the AOF"
            ),
            Error::PolicyOnReplica => write!(
                f,
                "READONLY a replica takes its policies from its primary: run RL.POLICY SET \
                 and DEL there"
            ),
            Error::UnreadablePolicy(why) => write!(
                f,
                "ERR the policy's definition could not be read when it was loaded ({why}); it \
                 is kept as it was: RL.POLICY SET it again"
            ),
            Error::Moved {
                slot,
                node: Some(node),
            } => write!(f, "MOVED {slot} {node}"),
            Error::Moved { slot, node: None } => write!(
                f,
                "TRYAGAIN slot {slot} left this node while the call waited: call again"
            ),
            Error::Internal(what) => {
                write!(
                    f,
                    "ERR internal error in {what} (details in the server log)"
                )
            }
            Error::MissingApi(name) => write!(
                f,
                "ERR this server does not provide RedisModule_{name}, which ratelimit needs"
            ),
        }
    }
}
