//! `RL.ACQUIRE`, `RL.RELEASE` and `RL.EXTEND`: the concurrency limiter with leases (the
//! semaphore itself is [`crate::algo::lease`]). Their argument grammar, their handlers and
//! the clients blocked by `BLOCK` all live here.
//!
//! Replication: a grant, a renewal, a release and an extension each propagate as
//! `RL.APPLY key effect` with the decision time and the lease's id written in hex (an id may
//! hold any byte, an effect's words none of a space):
//!
//! ```text
//! RL.APPLY jobs "RL.ACQUIRE 5 30000 ID 313730302d30 COST 2 NOW 1700000000000"
//! RL.APPLY jobs "RL.RELEASE 313730302d30 NOW 1700000000450"
//! RL.APPLY jobs "RL.EXTEND 313730302d30 60000 NOW 1700000000450"
//! ```

use std::borrow::Cow;

use redis_module::Context;

use crate::algo::lease::{self, Leases, Params, MAX_LEASES};
use crate::algo::{Decision, Millis, Wait, MAX_TIMESTAMP};
use crate::api::{self, Arg, Reply};
use crate::args::{self, AsBytes};
use crate::commands::{self, Clock, Mode};
use crate::error::Error;
use crate::store::Key;
use crate::value::{Kind, Limiter};

/// The longest `BLOCK`: a year (0 waits without limit).
pub const BLOCK_MAX_MS: u64 = 365 * 24 * 3600 * 1000;

/// `RL.ACQUIRE key limit lease_ms [ID lease-id] [COST n] [BLOCK timeout_ms] [NOW ms]`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquire<'a> {
    pub params: Params,
    pub id: Option<Cow<'a, [u8]>>,
    pub cost: u64,
    pub block: Option<u64>,
    pub now: Option<Millis>,
}

/// `RL.RELEASE key lease-id [NOW ms]` and `RL.EXTEND key lease-id lease_ms [NOW ms]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held<'a> {
    pub id: Cow<'a, [u8]>,
    pub lease_ms: u64,
    pub now: Option<Millis>,
}

const COST_MAX: u64 = i64::MAX as u64;

/// A lease id as given: as it is from a client, in hex in an effect (`hex`).
fn id_arg<A: AsBytes>(arg: &A, hex: bool) -> Result<Cow<'_, [u8]>, Error> {
    let bytes = arg.as_bytes();
    let id = if hex {
        Cow::Owned(from_hex(bytes).ok_or(Error::Invalid("RL.APPLY effect is malformed"))?)
    } else {
        Cow::Borrowed(bytes)
    };
    if !lease::valid_id(&id) {
        return Err(Error::Invalid("a lease id must be 1 to 512 bytes"));
    }
    Ok(id)
}

/// `KEYWORD value` options among `allowed`, each at most once, as `(keyword, value)`.
fn lease_options<'a, A: AsBytes>(
    args: &'a [A],
    allowed: &[&'static str],
) -> Result<Vec<(&'static str, &'a A)>, Error> {
    let mut out: Vec<(&'static str, &'a A)> = Vec::new();
    let mut it = args.iter();
    while let Some(word) = it.next() {
        let name = word.as_bytes();
        let Some(&label) = allowed
            .iter()
            .find(|l| name.eq_ignore_ascii_case(l.as_bytes()))
        else {
            return Err(Error::UnknownOption(
                String::from_utf8_lossy(name).chars().take(64).collect(),
            ));
        };
        if out.iter().any(|(l, _)| *l == label) {
            return Err(Error::RepeatedOption(label));
        }
        out.push((label, it.next().ok_or(Error::MissingValue(label))?));
    }
    Ok(out)
}

/// Parses `RL.ACQUIRE`; `hex` for an effect (ids in hex). `blocking` says whether BLOCK is
/// accepted.
pub fn parse_acquire<A: AsBytes>(args: &[A], hex: bool) -> Result<Acquire<'_>, Error> {
    let limit = args::int(
        args.get(2).ok_or(Error::Arity)?,
        "limit",
        1,
        lease::MAX_LIMIT,
    )?;
    let lease_ms = args::int(
        args.get(3).ok_or(Error::Arity)?,
        "lease_ms",
        1,
        lease::MAX_LEASE_MS,
    )?;
    let mut req = Acquire {
        params: Params { limit, lease_ms },
        id: None,
        cost: args::COST_DEFAULT,
        block: None,
        now: None,
    };
    let rest = args.get(4..).unwrap_or_default();
    for (label, value) in lease_options(rest, &["ID", "COST", "BLOCK", "NOW"])? {
        match label {
            "ID" => req.id = Some(id_arg(value, hex)?),
            "COST" => req.cost = args::int(value, "COST", 0, COST_MAX)?,
            "BLOCK" => req.block = Some(args::int(value, "BLOCK", 0, BLOCK_MAX_MS)?),
            _ => req.now = Some(args::int(value, "NOW", 0, MAX_TIMESTAMP)?),
        }
    }
    Ok(req)
}

/// Parses `RL.RELEASE` (`extend` false) or `RL.EXTEND`.
pub fn parse_held<A: AsBytes>(args: &[A], hex: bool, extend: bool) -> Result<Held<'_>, Error> {
    let id = id_arg(args.get(2).ok_or(Error::Arity)?, hex)?;
    let lease_ms = if extend {
        let arg = args.get(3).ok_or(Error::Arity)?;
        args::int(arg, "lease_ms", 1, lease::MAX_LEASE_MS)?
    } else {
        0
    };
    let rest = args.get(if extend { 4 } else { 3 }..).unwrap_or_default();
    let mut now = None;
    for (_, value) in lease_options(rest, &["NOW"])? {
        now = Some(args::int(value, "NOW", 0, MAX_TIMESTAMP)?);
    }
    Ok(Held { id, lease_ms, now })
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn push_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    for b in bytes {
        out.push(HEX[usize::from(b >> 4)]);
        out.push(HEX[usize::from(b & 15)]);
    }
}

fn from_hex(hex: &[u8]) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    hex.chunks_exact(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

/// An effect: `command`, then the words, with a lease id in hex where `Id` says.
enum Word<'a> {
    Num(u64),
    Text(&'a str),
    Id(&'a [u8]),
}

fn effect(command: &str, words: &[Word]) -> Vec<u8> {
    let mut out = command.as_bytes().to_vec();
    for w in words {
        out.push(b' ');
        match w {
            Word::Num(n) => out.extend_from_slice(n.to_string().as_bytes()),
            Word::Text(t) => out.extend_from_slice(t.as_bytes()),
            Word::Id(id) => push_hex(&mut out, id),
        }
    }
    out
}

/// Propagates a change: the effect for a decision, the `RL.APPLY` as it came otherwise.
fn propagate(ctx: &Context, name: Arg, mode: Mode, effect: impl FnOnce() -> Vec<u8>) {
    match mode {
        Mode::Apply => {
            ctx.replicate_verbatim();
        }
        Mode::Decide => api::replicate_effect(ctx, name, &effect()),
    }
}

/// The leases a key holds, `None` for a missing key; an error for another kind or type.
fn leases_in<'k>(key: &'k mut Key) -> Result<Option<crate::value::Held<'k>>, Error> {
    let held = key.limiter()?;
    if let Some(h) = held.as_deref() {
        if h.kind() != Kind::Lease {
            return Err(commands::other_kind(h, Kind::Lease));
        }
    }
    Ok(held)
}

/// What an acquisition answered.
pub struct Answer {
    pub decision: Decision,
    pub id: Option<Vec<u8>>,
}

/// Runs an acquisition on the key `name` at `clock`: records it when granted (or when it is
/// an effect), sets the key's expiry, notifies and propagates.
fn acquire_on(
    ctx: &Context,
    name: Arg,
    req: &Acquire,
    clock: Clock,
    mode: Mode,
) -> Result<Answer, Error> {
    let mut key = Key::open(ctx, name, true);
    let mut created = None;
    let mut held = leases_in(&mut key)?;
    let (leases, in_key) = match held.as_deref_mut() {
        Some(h) => (h.lease_mut().ok_or(Error::Internal("RL.ACQUIRE"))?, true),
        None => (created.insert(Leases::new(&req.params)), false),
    };
    let before = if in_key { leases.empty_at() } else { None };
    let behind = leases.latest().saturating_sub(clock.caller);
    let (decision, id, changed) = match mode {
        Mode::Apply => {
            let id = req
                .id
                .as_deref()
                .ok_or(Error::Invalid("an RL.ACQUIRE effect needs ID"))?;
            let changed = leases.record(clock.caller, &req.params, req.cost, id);
            (leases.peek(clock.caller), Some(id.to_vec()), changed)
        }
        Mode::Decide => {
            let got = leases
                .acquire(clock.caller, &req.params, req.cost, req.id.as_deref())
                .map_err(|_| Error::TooManyLeases(MAX_LEASES))?;
            let changed = got.id.is_some();
            (got.decision, got.id, changed)
        }
    };
    let (at, empty_at) = (leases.latest(), leases.empty_at());
    let decision = decision
        .seen_from_behind(behind)
        .resetting_at(empty_at, clock.caller);
    if !changed {
        return Ok(Answer { decision, id: None });
    }
    if let Some(leases) = created {
        key.set(Limiter::Lease(Box::new(leases)))?;
    }
    let expiry = commands::settle(&key, c"rl.acquire", empty_at, clock.lag, before);
    let p = req.params;
    let granted = id.as_deref().unwrap_or_default();
    propagate(ctx, name, mode, || {
        let mut words = vec![
            Word::Num(p.limit),
            Word::Num(p.lease_ms),
            Word::Text("ID"),
            Word::Id(granted),
        ];
        if req.cost != args::COST_DEFAULT {
            words.extend([Word::Text("COST"), Word::Num(req.cost)]);
        }
        words.extend([Word::Text("NOW"), Word::Num(at)]);
        effect("RL.ACQUIRE", &words)
    });
    commands::replicate_expiry(ctx, name, clock.lag, expiry);
    Ok(Answer { decision, id })
}

pub fn acquire(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    acquire_as(ctx, commands::key_arg(args)?, args, Mode::Decide)
}

pub fn acquire_as<A: AsBytes>(
    ctx: &Context,
    name: Arg,
    args: &[A],
    mode: Mode,
) -> Result<Reply, Error> {
    let req = parse_acquire(args, mode == Mode::Apply)?;
    if req.block.is_some() {
        return Err(Error::UnknownOption("BLOCK".into()));
    }
    let clock = commands::clock(ctx, req.now, mode)?;
    let answer = acquire_on(ctx, name, &req, clock, mode)?;
    Ok(Reply::Lease(answer.decision, answer.id))
}

/// The answer to a release or an extension of a lease that is not held (or a missing key).
fn not_held(leases: Option<&Leases>, now: Millis) -> Decision {
    match leases {
        Some(l) => Decision {
            allowed: false,
            ..l.peek(now)
                .seen_from_behind(l.latest().saturating_sub(now))
                .resetting_at(l.empty_at(), now)
        },
        None => Decision {
            allowed: false,
            limit: 0,
            remaining: 0,
            retry_after: Wait::None,
            reset_after_ms: 0,
        },
    }
}

/// `RL.RELEASE` (`extend` false) and `RL.EXTEND`.
fn change<A: AsBytes>(
    ctx: &Context,
    name: Arg,
    args: &[A],
    mode: Mode,
    extend: bool,
) -> Result<Reply, Error> {
    let req = parse_held(args, mode == Mode::Apply, extend)?;
    let clock = commands::clock(ctx, req.now, mode)?;
    let mut key = Key::open(ctx, name, true);
    let mut held = leases_in(&mut key)?;
    let Some(leases) = held.as_deref_mut().and_then(Limiter::lease_mut) else {
        return Ok(Reply::Decision(not_held(None, clock.caller)));
    };
    let before = leases.empty_at();
    let behind = leases.latest().saturating_sub(clock.caller);
    let done = if extend {
        leases.extend(clock.caller, &req.id, req.lease_ms)
    } else {
        leases.release(clock.caller, &req.id)
    };
    let Some(decision) = done else {
        return Ok(Reply::Decision(not_held(Some(leases), clock.caller)));
    };
    let (at, empty_at) = (leases.latest(), leases.empty_at());
    let decision = decision
        .seen_from_behind(behind)
        .resetting_at(empty_at, clock.caller);
    let event = if extend { c"rl.extend" } else { c"rl.release" };
    // May delete the key: nothing may read the leases afterwards.
    let expiry = commands::settle(&key, event, empty_at, clock.lag, before);
    propagate(ctx, name, mode, || {
        let mut words = vec![Word::Id(&req.id)];
        if extend {
            words.push(Word::Num(req.lease_ms));
        }
        words.extend([Word::Text("NOW"), Word::Num(at)]);
        effect(if extend { "RL.EXTEND" } else { "RL.RELEASE" }, &words)
    });
    commands::replicate_expiry(ctx, name, clock.lag, expiry);
    Ok(Reply::Decision(decision))
}

pub fn release(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    release_as(ctx, commands::key_arg(args)?, args, Mode::Decide)
}

pub fn release_as<A: AsBytes>(
    ctx: &Context,
    name: Arg,
    args: &[A],
    mode: Mode,
) -> Result<Reply, Error> {
    change(ctx, name, args, mode, false)
}

pub fn extend(ctx: &Context, args: &[Arg]) -> Result<Reply, Error> {
    extend_as(ctx, commands::key_arg(args)?, args, Mode::Decide)
}

pub fn extend_as<A: AsBytes>(
    ctx: &Context,
    name: Arg,
    args: &[A],
    mode: Mode,
) -> Result<Reply, Error> {
    change(ctx, name, args, mode, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_acquire() {
        let a = ["RL.ACQUIRE", "k", "5", "30000"];
        let req = parse_acquire(&a, false).unwrap();
        assert_eq!(
            (req.params, req.cost, req.id, req.block),
            (
                Params {
                    limit: 5,
                    lease_ms: 30000
                },
                1,
                None,
                None
            )
        );
        let a = [
            "RL.ACQUIRE",
            "k",
            "5",
            "30000",
            "id",
            "job 1",
            "COST",
            "2",
            "BLOCK",
            "0",
            "NOW",
            "7",
        ];
        let req = parse_acquire(&a, false).unwrap();
        assert_eq!(req.id.as_deref(), Some(&b"job 1"[..]));
        assert_eq!((req.cost, req.block, req.now), (2, Some(0), Some(7)));
        let hex = ["RL.ACQUIRE", "k", "5", "30000", "ID", "6a6f62"];
        assert_eq!(
            parse_acquire(&hex, true).unwrap().id.as_deref(),
            Some(&b"job"[..])
        );
        let long = "x".repeat(513);
        for (bad, err) in [
            (&["RL.ACQUIRE", "k", "0", "1"][..], "limit"),
            (&["RL.ACQUIRE", "k", "1", "0"], "lease_ms"),
            (&["RL.ACQUIRE", "k", "1", "1", "ID", ""], "1 to 512"),
            (&["RL.ACQUIRE", "k", "1", "1", "ID", &long], "1 to 512"),
            (
                &["RL.ACQUIRE", "k", "1", "1", "ID", "a", "ID", "b"],
                "more than once",
            ),
            (&["RL.ACQUIRE", "k", "1", "1", "BLOCK"], "needs a value"),
            (&["RL.ACQUIRE", "k", "1", "1", "BLOCK", "-1"], "BLOCK"),
            (
                &["RL.ACQUIRE", "k", "1", "1", "WAIT", "1"],
                "unknown option",
            ),
            (&["RL.ACQUIRE", "k", "1"], "wrong number"),
        ] {
            let e = parse_acquire(bad, false).unwrap_err().to_string();
            assert!(e.contains(err), "{bad:?}: {e}");
        }
        for bad in ["6", "6A", "zz", ""] {
            assert!(parse_acquire(&["RL.ACQUIRE", "k", "1", "1", "ID", bad], true).is_err());
        }
    }

    #[test]
    fn parses_release_and_extend() {
        let r = parse_held(&["RL.RELEASE", "k", "a b", "NOW", "5"], false, false).unwrap();
        assert_eq!((&*r.id, r.now), (&b"a b"[..], Some(5)));
        let e = parse_held(&["RL.EXTEND", "k", "a", "100"], false, true).unwrap();
        assert_eq!(e.lease_ms, 100);
        assert!(parse_held(&["RL.EXTEND", "k", "a"], false, true).is_err());
        assert!(parse_held(&["RL.RELEASE", "k", "a", "100"], false, false).is_err());
        assert!(parse_held(&["RL.RELEASE", "k"], false, false).is_err());
    }

    #[test]
    fn effects_carry_ids_in_hex() {
        let id: &[u8] = b"a b\x00\xff";
        let line = effect(
            "RL.RELEASE",
            &[Word::Id(id), Word::Text("NOW"), Word::Num(5)],
        );
        assert_eq!(line, b"RL.RELEASE 61206200ff NOW 5");
        assert_eq!(from_hex(b"61206200ff").as_deref(), Some(id));
    }
}
