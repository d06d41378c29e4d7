//! What a kind of limiter is, for the layers that serve every kind alike.
//!
//! A kind is one unit under `src/kinds/`: its state and algorithm (pure, handed `now`), its
//! commands' grammar and effects, its encoding with the one validating constructor every
//! way into a key goes through ([`Kind::decode`]), its commands' metadata and its unit
//! tests. It implements:
//! - [`Kind`]: the state as a key holds it: the queries every generic command asks
//!   (`RL.PEEK`, `RL.REFUND`, `RL.CHARGE`), its encoding, and how a key keeps it ([`Form`]:
//!   a box, a block of words, or the compact form with interned parameters);
//! - [`Command`], for each of its commands: parse, decide (and, for `RL.ALL`, evaluate,
//!   check and commit apart), and write the effect replicas and the AOF apply;
//! - for a rate limiter, [`Rate`] (its grammar and effect) over [`Limit`] (its algorithm):
//!   the generic layers make its command from them.
//!
//! A registry (`src/registry.rs`) lists the kinds, one line each; nothing else names them.

use std::borrow::Borrow;
use std::fmt::Debug;

use super::args::Grammar;
use super::codec::{Malformed, Reader, Sink};
use super::effect::Out;
use super::error::Error;
use super::limit::Limit;
use super::meta::Info;
use super::{Decision, Duration, Instant};

/// How a key keeps a kind's state: one mechanism (`rm::storage`) every kind opts into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// In a box of its own: one allocation, the key pointing at it.
    Boxed,
    /// One block of 32-bit words that says its own length in its first word ([`Block`]):
    /// the key points at the block, the state's only allocation.
    Block,
    /// 16 bytes, its parameters interned in a table that keys with the same ones share
    /// ([`Compact`]); in a box of its own when they do not fit.
    Compact,
}

/// How a kind's state is written and read back: its encoding, with the one validating
/// constructor every way into a key goes through, and what it holds on the heap.
pub trait Encoding: Sized {
    /// The encoding version this build writes for the kind.
    const VERSION: u8;

    /// Writes the canonical encoding after its version and kind bytes
    /// ([`Encoding::VERSION`], [`Kind::CODE`]): the same state always gives the same bytes
    /// (they are also the digest). Stops early once `out` is full.
    fn encode<S: Sink>(&self, out: &mut S);

    /// The one validating constructor: rebuilds a state from an encoding of `version`
    /// (after its version and kind bytes), checking every invariant the commands keep, so
    /// that a load, a `RESTORE` or an effect can build nothing a command could not.
    fn decode(version: u8, r: &mut Reader) -> Result<Self, Malformed>;

    /// Bytes the state holds on the heap besides `size_of::<Self>()`, each allocation
    /// rounded to its size class (for `MEMORY USAGE`).
    fn heap_size(&self) -> usize {
        0
    }

    /// Heap allocations the state holds besides its own (what freeing it costs).
    fn allocations(&self) -> usize {
        0
    }
}

/// A kind's state, as a key holds it: what the generic commands ask of any kind. A rate
/// limiter gets it from its [`Rate`] and [`Limit`] (the blanket implementation below); a kind
/// of another shape (leases) writes it.
pub trait Kind: Encoding + Clone + Debug + 'static {
    /// The command that makes keys of this kind: what errors name it by (`WRONGTYPE key
    /// holds a RL.SLIDE limiter`).
    const COMMAND: &'static str;
    /// The kind's byte in the persisted encoding, after the version byte.
    const CODE: u8;
    /// How a key keeps the state.
    const FORM: Form;
    /// Whether a compact policy's family holds its states in their own encoding (a state
    /// whose length varies, as a sliding log's), when they have no compact form.
    const IN_FAMILY_ENCODED: bool = false;

    /// The latest time the state has seen (a change propagates at this time).
    fn latest_time(&self) -> Instant;

    /// When the state is back to empty, what the key's expiry follows; `None` when it is
    /// empty already (the key goes).
    fn empty_time(&self) -> Option<Instant>;

    /// `RL.PEEK`: the answer to a call of no cost under the parameters last used.
    fn peek(&self, now: Instant) -> Decision;

    /// `RL.PEEK key COST n`: what a call of `cost` under the parameters last used would be
    /// answered, changing nothing.
    fn peek_cost(&self, now: Instant, cost: u64) -> Decision;

    /// `RL.REFUND`: gives back up to `units`, newest first, and answers as [`Kind::peek`];
    /// an error for a kind whose units are given back otherwise.
    fn refund(&mut self, now: Instant, units: u64) -> Result<Decision, Error>;

    /// Drops what a compact policy's family cannot keep beyond what the state's own
    /// parameters count, its answers to them unchanged (a log's records that only its
    /// retention counts, kept for windows it was called with before; see `kinds::slide`).
    fn shed(&mut self) {}

    /// An error for a kind that takes no refund ([`Kind::refund`]'s), asked first.
    fn refundable(&self) -> Result<(), Error> {
        Ok(())
    }

    /// An error for a state `RL.PEEK` does not read (a compact policy's family), asked
    /// first.
    fn peekable(&self) -> Result<(), Error> {
        Ok(())
    }

    /// `RL.CHARGE`: records `units` under the parameters last used, whatever the limit;
    /// `Ok(None)`, changing nothing, when they do not fit; an error for a kind that takes
    /// no charge.
    fn charge(&mut self, now: Instant, units: u64) -> Result<Option<Decision>, Error>;

    /// Whether [`Kind::charge`] would record `units`, changing nothing.
    fn can_charge(&self, now: Instant, units: u64) -> Result<bool, Error>;
}

/// Every rate limiter is a kind: each generic command asks its algorithm ([`Limit`]) under
/// the parameters it last recorded under ([`Limit::stored`]).
impl<K: Rate> Kind for K {
    const COMMAND: &'static str = <K as Rate>::COMMAND;
    const CODE: u8 = <K as Rate>::CODE;
    const FORM: Form = <K as Rate>::FORM;
    const IN_FAMILY_ENCODED: bool = <K as Rate>::IN_FAMILY_ENCODED;

    #[inline(always)]
    fn latest_time(&self) -> Instant {
        self.latest()
    }

    #[inline(always)]
    fn empty_time(&self) -> Option<Instant> {
        self.empty_at()
    }

    fn peek(&self, now: Instant) -> Decision {
        self.peek_cost(now, 0)
    }

    fn peek_cost(&self, now: Instant, cost: u64) -> Decision {
        let p = self.stored();
        self.evaluate(now, p.borrow(), cost)
    }

    fn shed(&mut self) {
        <K as Rate>::shed(self)
    }

    fn refund(&mut self, now: Instant, units: u64) -> Result<Decision, Error> {
        Ok(self.give_back(now, units))
    }

    fn charge(&mut self, now: Instant, units: u64) -> Result<Option<Decision>, Error> {
        let p = self.stored();
        Ok(Limit::charge(self, now, p.borrow(), units))
    }

    fn can_charge(&self, now: Instant, units: u64) -> Result<bool, Error> {
        let p = self.stored();
        Ok(units == 0 || self.can_record(now, p.borrow(), units))
    }
}

/// The block form: a state that is one block of 32-bit words, its length in its first
/// word.
pub trait Block: Kind {
    fn into_words(self) -> Box<[u32]>;
    fn from_words(words: Box<[u32]>) -> Self;
    /// The block's length in words, from its first word.
    fn words_len(first: u32) -> usize;
}

/// A compact state's parameters: two words, which keys with the same parameters share.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Params2 {
    pub a: u64,
    pub b: u64,
}

/// The compact form: a state as its parameters ([`Params2`], interned) and two words,
/// `latest` (below 2^48) and a tail. Its encoding is the state's varints, then the
/// parameters' (the same for every key sharing them): saving copies those, and a load of
/// keys sharing the parameters interned last reads only the state's.
pub trait Compact: Kind {
    /// The parameters and the state's two words; `None` when the state does not fit (the
    /// key keeps it boxed then).
    fn pack(&self) -> Option<(Params2, Instant, u64)>;

    /// The state `pack` made those of.
    fn unpack(params: Params2, latest: Instant, tail: u64) -> Self;

    /// The encoding's part the state's words make ([`Kind::encode`] is this, then
    /// [`Compact::encode_params`]).
    fn encode_state<S: Sink>(latest: Instant, tail: u64, out: &mut S);

    /// The encoding's part the parameters make.
    fn encode_params<S: Sink>(params: Params2, out: &mut S);

    /// The state's words from an encoding's state part (see [`Compact::encode_state`]),
    /// checked as [`Kind::decode`] checks them; `None` for anything else (the general
    /// decoder then decides).
    fn decode_state(r: &mut Reader) -> Option<(Instant, u64)>;
}

/// Whether a compact state, as a family of subjects holds it (its parameters, latest time
/// and tail), is one its kind could hold: checked by the kind's own validating constructor.
pub type CheckPacked = fn(Params2, Instant, u64) -> bool;

/// Whether a state in its kind's own encoding (its version byte first), as a family holds
/// it, is one its kind could hold: read back by the kind's validating constructor.
pub type CheckEncoded = fn(&[u8]) -> bool;

/// How a compact policy's family holds a kind's states (issue 30), and how a state it
/// holds is checked.
#[derive(Clone, Copy, Debug)]
pub enum InFamily {
    /// Not at all: a compact policy takes no limiter of the kind.
    No,
    /// Packed ([`Kind::FORM`] compact): its parameters (in the family's parameter set),
    /// latest time and tail.
    Packed(CheckPacked),
    /// In its own encoding ([`Kind::IN_FAMILY_ENCODED`]): a `SLIDE` log.
    Encoded(CheckEncoded),
}

static IN_FAMILY: std::sync::OnceLock<&'static [(u8, InFamily)]> = std::sync::OnceLock::new();

/// Installs how a family holds each kind, by its code, at load (the registry does).
pub fn install_in_family(forms: &'static [(u8, InFamily)]) {
    let _ = IN_FAMILY.set(forms);
}

/// How a family holds the states of the kind of code `code`.
pub fn in_family(code: u8) -> InFamily {
    IN_FAMILY
        .get()
        .and_then(|forms| forms.iter().find(|(c, _)| *c == code))
        .map_or(InFamily::No, |(_, form)| *form)
}

/// The check of the kind of code `code`, if a family holds its states packed.
pub fn packed_check(code: u8) -> Option<CheckPacked> {
    match in_family(code) {
        InFamily::Packed(check) => Some(check),
        _ => None,
    }
}

/// How a command is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A client's call: decide, record when allowed, propagate the effect.
    Decide,
    /// An effect (`RL.APPLY`, from a primary or the AOF): record it as it was decided, at
    /// its `NOW`, never deciding again; refused with an error when the key cannot take it.
    Apply,
    /// An effect of an `RL.APPLY` of several changes, checked before any is applied: all
    /// that [`Mode::Apply`] does up to the change itself, which it does not make.
    Check,
}

impl Mode {
    /// An effect (applied or checked) rather than a client's own call.
    pub fn is_effect(self) -> bool {
        self != Mode::Decide
    }
}

/// What a command answers, before it becomes a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The five fields every limiter answers.
    Decision(Decision),
    /// Five integers of another shape (`CL.THROTTLE`'s).
    Ints([i64; 5]),
    /// A decision and a lease id (nil when none was granted): `RL.ACQUIRE`.
    Lease(Decision, Option<Vec<u8>>),
    Nil,
    Ok,
}

/// What a command did to the key's state.
#[derive(Debug)]
pub enum Change<K> {
    /// Nothing.
    None,
    /// Changed in place. `before` is when the state was back to empty before the change,
    /// `after` when it is after (what the key's expiry follows: computed once, by the run
    /// that knows it).
    Held {
        before: Option<Instant>,
        after: Option<Instant>,
    },
    /// A new state to store in the key (a missing key's, or the stored one reshaped), and
    /// when it is back to empty (computed once, by the run that made it).
    New { state: K, empty: Option<Instant> },
}

/// What a command's run answered and changed.
#[derive(Debug)]
pub struct Ran<K> {
    pub reply: Reply,
    pub change: Change<K>,
    /// The call may wait (BLOCK) for its units, which it did not get now.
    pub wait: bool,
}

impl<K> Ran<K> {
    /// An answer that changed nothing.
    pub fn unchanged(reply: Reply) -> Ran<K> {
        Ran {
            reply,
            change: Change::None,
            wait: false,
        }
    }
}

/// The time a call works with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    /// The caller's time: its `NOW`, else the server clock.
    pub caller: Instant,
    /// How far the server clock is ahead of the caller's `NOW`: the key lives that much
    /// longer than its state's own empty time (0 for an effect).
    pub lag: Duration,
    /// Whether the call comes from the primary or the AOF, decided already (the older
    /// form of an effect: a command with `NOW`).
    pub decided: bool,
    /// The server clock when the call started (what keys expire by).
    pub server: Instant,
}

impl Clock {
    /// How much longer than its state's own empty time a key lives after a change that left
    /// the state at `latest`: the time from `latest` to the server clock, when the state is
    /// behind it (a lagging `NOW`). The key then expires as far past the server clock as
    /// the state is from empty, never more than its limiter's own span, whatever `NOW`
    /// said. 0 for an effect, and for a state at or ahead of the server clock.
    pub fn key_lag(&self, latest: Instant) -> Duration {
        self.caller.saturating_add(self.lag).since(latest)
    }
}

/// A command on one key of a kind: its grammar, what it decides, and its effect.
pub trait Command: 'static {
    type Kind: Kind;
    /// Its metadata (name, arity, flags, ACL categories, docs) and counters.
    const INFO: &'static Info;
    /// Its keyword among `RL.ALL`'s limiters, if it may be one, and how far one runs.
    const SPEC: Option<(&'static str, Grammar)> = None;

    /// Its `COMMAND DOCS` arguments: its metadata's, unless its grammar gives them.
    fn doc_args() -> Vec<super::meta::Arg> {
        Self::INFO.args.to_vec()
    }
    /// A parsed call. Owned or borrowing the arguments (`'a`).
    type Call<'a>: Clone + Debug;

    /// Parses the words after the key: a client's (`effect` false) or an effect's, whose
    /// words may be written otherwise (lease ids in hex).
    fn parse<'a>(words: &[&'a [u8]], effect: bool) -> Result<Self::Call<'a>, Error>;

    /// The same call, owning what it borrowed (a call that waits is kept).
    fn owned(call: &Self::Call<'_>) -> Self::Call<'static>;

    /// The call's `NOW`.
    fn now(call: &Self::Call<'_>) -> Option<Instant>;

    /// Runs the call on the key's state (`None`: a missing key) at `clock`, as `mode` says.
    fn run(
        state: Option<&mut Self::Kind>,
        call: &Self::Call<'_>,
        clock: Clock,
        mode: Mode,
    ) -> Result<Ran<Self::Kind>, Error>;

    /// Writes the effect of what a run changed, after the command's name: its words, with
    /// `NOW` at `at`. `reply` is what the run answered (a lease's id, say).
    fn effect<O: Out>(call: &Self::Call<'_>, reply: &Reply, at: Instant, out: &mut O);

    /// The effect's compact code, 0 for a textual effect (see `core::effect`).
    const EFFECT_CODE: u8 = 0;

    /// Whether a reply with 0 in its `allowed` field is a refusal (what `RL.TOP` counts),
    /// rather than an answer (`RL.RELEASE` of a lease not held).
    const REFUSES: bool = true;

    /// The timeout of a call that may wait for its units (`BLOCK`), if it may.
    fn block(_call: &Self::Call<'_>) -> Option<u64> {
        None
    }

    /// Whether a waiting call goes before the calls already waiting on the key (a renewal
    /// of a lease the caller holds).
    fn jumps_queue(_state: &Self::Kind, _call: &Self::Call<'_>, _now: Instant) -> bool {
        false
    }

    /// The refusal a waiting call gets when its time is up: the call's answer at `now`,
    /// refused.
    fn refusal(state: Option<&Self::Kind>, call: &Self::Call<'_>, now: Instant) -> Reply;

    // `RL.ALL`: a limiter evaluated, checked and committed apart, so that every one allows
    // before any changes.

    /// The state a missing key starts from, for `RL.ALL`.
    fn fresh(_call: &Self::Call<'_>) -> Option<Self::Kind> {
        None
    }

    /// The state reshaped for the call at `now`, when the stored one cannot take it as it
    /// is (`RL.ALL` stores it once the call is allowed).
    fn reshaped(_state: &Self::Kind, _call: &Self::Call<'_>, _now: Instant) -> Option<Self::Kind> {
        None
    }

    /// The call's answer at `now`, changing nothing.
    fn evaluate(state: &Self::Kind, call: &Self::Call<'_>, now: Instant) -> Decision;

    /// Its answer with no cost: the state as it stands.
    fn evaluate_free(state: &Self::Kind, call: &Self::Call<'_>, now: Instant) -> Decision;

    /// An error when the call, allowed, could not be recorded (checked of every limiter
    /// before any records).
    fn fits(_state: &Self::Kind, _call: &Self::Call<'_>, _now: Instant) -> Result<(), Error> {
        Ok(())
    }

    /// An error for a call `RL.ALL` refuses whatever the state (checked before deciding).
    fn check(_state: &Self::Kind, _call: &Self::Call<'_>, _now: Instant) -> Result<(), Error> {
        Ok(())
    }

    /// Records the allowed call at `now`: the reply `RL.ALL` gives for it (a lease's id
    /// with its decision), `None` when it could not (ruled out by [`Command::fits`]).
    fn commit(state: &mut Self::Kind, call: &Self::Call<'_>, now: Instant) -> Option<Reply>;

    /// Its entry in `RL.ALL`'s reply, from its decision and what [`Command::commit`]
    /// answered (`None`: not committed).
    fn entry(decision: Decision, _committed: Option<&Reply>) -> Reply {
        Reply::Decision(decision)
    }

    /// The call's cost.
    fn cost(call: &Self::Call<'_>) -> u64;

    // Policies (`RL.POLICY`, `RL.HIT`): a limiter parsed once, whose cost each hit may set.

    /// Whether the command answers what `RL.ALL` answers for it (the five fields, or a
    /// lease's), so that a policy of it alone may run it as its own command.
    const ALONE: bool = true;

    /// Sets the call's cost: a policy's limiter that takes each hit's `COST`.
    fn set_cost(call: &mut Self::Call<'_>, cost: u64);

    /// Whether a limiter's words (after its keyword) give its cost, which each hit then
    /// keeps (a policy's limiter that counts requests while another counts tokens).
    fn fixes_cost(words: &[&[u8]]) -> bool {
        Self::SPEC.is_some_and(|(_, grammar)| grammar.gives(words, "COST"))
    }

    /// An error for a call a policy may not hold (a lease id, which every hit would share).
    fn in_policy(_call: &Self::Call<'_>) -> Result<(), Error> {
        Ok(())
    }

    /// An error for a call a compact policy's family may not hold, of a kind it holds in
    /// its own encoding (a log too long for an entry).
    fn in_compact(_call: &Self::Call<'_>) -> Result<(), Error> {
        Ok(())
    }
}

/// A rate limiter: its algorithm ([`Limit`]) and encoding ([`Encoding`]), its one command's
/// grammar and effect, and what a key's generic commands need of it beyond the algorithm
/// (the parameters it last recorded under, a refund). The generic layers make its [`Kind`],
/// its command (`RL.TOKEN key ...`) and its place in `RL.ALL` from these.
pub trait Rate: Limit + Encoding + Clone + Debug + 'static {
    /// Its command's name (`RL.TOKEN`), what `WRONGTYPE` errors name its keys by.
    const COMMAND: &'static str;
    /// The kind's byte in the persisted encoding ([`Kind::CODE`]).
    const CODE: u8;
    /// How a key keeps the state ([`Kind::FORM`]).
    const FORM: Form;
    /// [`Kind::IN_FAMILY_ENCODED`].
    const IN_FAMILY_ENCODED: bool = false;
    /// Its command's metadata and counters (its `COMMAND DOCS` arguments come from
    /// [`Rate::GRAMMAR`]).
    const INFO: &'static Info;
    /// Its grammar after the key: what its parser, `RL.ALL`, policies, `COMMAND DOCS` and
    /// its effect follow.
    const GRAMMAR: Grammar;
    /// Its keyword among `RL.ALL`'s limiters, if it may be one.
    const KEYWORD: Option<&'static str>;
    /// Its effect's compact code (see `core::effect`), 0 for a textual effect.
    const EFFECT_CODE: u8;

    /// The parameters as a call holds them (sized: a sliding log's windows on the stack).
    type Args: Copy + Debug + PartialEq;

    /// [`Command::in_compact`] of its parameters.
    fn in_compact(_args: &Self::Args) -> Result<(), Error> {
        Ok(())
    }

    /// [`Kind::shed`].
    fn shed(&mut self) {}

    /// The algorithm's view of them.
    fn params(args: &Self::Args) -> &Self::Params;

    /// Parses the words after the key (a client's, or an effect's): the parameters, the
    /// cost and `NOW`.
    fn parse(words: &[&[u8]]) -> Result<RateCall<Self::Args>, Error>;

    /// An empty limiter with `p` as its parameters.
    fn fresh(p: &Self::Args) -> Self;

    /// Writes the parameters of an effect as the command's words: the positional ones,
    /// then the options that are not at their default.
    fn write_params<O: Out>(p: &Self::Args, out: &mut O);

    /// Writes an effect's words before its `NOW`: the parameters, then `COST` unless it is
    /// the default.
    #[inline(always)]
    fn write_call<O: Out>(call: &RateCall<Self::Args>, out: &mut O) {
        Self::write_params(&call.params, out);
        if call.cost != super::args::COST_DEFAULT {
            out.option("COST", call.cost);
        }
    }

    /// Whether the command answers the five fields (see [`Command::ALONE`]).
    const ALONE: bool = true;

    /// Whether a limiter's words (after its keyword) give its cost (see
    /// [`Command::fixes_cost`]).
    fn fixes_cost(words: &[&[u8]]) -> bool {
        Self::GRAMMAR.gives(words, "COST")
    }

    /// The reply's five fields for a decision (the shape every `RL.*` command answers).
    fn reply(d: Decision) -> Reply {
        Reply::Decision(d)
    }
}

/// A rate limiter's call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateCall<P> {
    pub params: P,
    pub cost: u64,
    pub now: Option<Instant>,
}
