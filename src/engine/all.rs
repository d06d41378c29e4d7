//! `RL.ALL numkeys key [key ...] limiter [limiter ...] [NOW ms]`: one all-or-nothing
//! decision across several keys, each with a limiter of any kind whose command may be one
//! (`Command::SPEC`): the limiter's keyword, then its command's words as that command
//! parses them (without `NOW`, which is the call's).
//!
//! Each limiter is checked and evaluated (which changes nothing) at one time; a stored state
//! whose shape must change is reshaped into a new one, the stored one left as it is. Only
//! when every one allows, and every one could record, does each record its cost: so a
//! refused call leaves every key untouched, and nothing is ever half applied. Each changed
//! key gets what its own command would have given it (its value, expiry, keyspace event),
//! and the changes propagate as one `RL.APPLY key effect [key effect ...]`.

use redis_module::Context;
use smallvec::SmallVec;

use super::call::Storable;
use super::{catalog, clock, replicate_expiry, settle};
use crate::core::args::{self, lossy, Grammar};
use crate::core::effect::{Compact, Line};
use crate::core::error::Error;
use crate::core::kind::{Command, Kind, Mode, Reply};
use crate::core::meta::{self, Arg as MetaArg, ArgKind, Info, Keys, Stats};
use crate::core::{Decision, Millis, Wait};
use crate::rm::api::{self, Answer, Arg, Count, Handler, ALL_INLINE};
use crate::rm::key::Key;

/// The most keys one call takes: each costs at most what its own command costs, so this
/// bounds the call's work.
pub const ALL_MAX_KEYS: u64 = 16;

/// How `RL.ALL` takes one kind's limiters: their keyword, how far one runs, and how to parse
/// one on its key.
pub struct KindSpec {
    pub keyword: &'static str,
    pub grammar: Grammar,
    parse: for<'a, 'c> fn(&'c Context, Arg, &[&'a [u8]]) -> Result<Box<dyn Limiter + 'a>, Error>,
}

/// The `RL.ALL` limiters of command `C`, if it may be one.
pub const fn spec_of<C: Command>() -> Option<KindSpec>
where
    C::Kind: Storable,
{
    match C::SPEC {
        Some((keyword, grammar)) => Some(KindSpec {
            keyword,
            grammar,
            parse: parse_spec::<C>,
        }),
        None => None,
    }
}

fn parse_spec<'a, C: Command>(
    _ctx: &Context,
    name: Arg,
    words: &[&'a [u8]],
) -> Result<Box<dyn Limiter + 'a>, Error>
where
    C::Kind: Storable,
{
    let call = C::parse(words, false)?;
    if C::block(&call).is_some() {
        return Err(Error::Invalid("BLOCK is not allowed inside RL.ALL"));
    }
    Ok(Box::new(Spec::<C> {
        name,
        call,
        new: None,
        behind: 0,
    }))
}

/// One limiter of a call, on its key.
pub trait Limiter {
    /// An error for a call refused whatever the state (a lease id the key cannot take).
    fn check(&self, key: &mut Key, now: Millis) -> Result<(), Error>;
    /// Its answer at `now`, changing nothing (a reshaped state kept aside), and whether it
    /// could be recorded.
    fn evaluate(&mut self, key: &mut Key, now: Millis) -> Result<(Decision, Result<(), Error>), Error>;
    /// Its answer with no cost: the state as it stands (for a refused call).
    fn evaluate_free(&mut self, key: &mut Key, now: Millis) -> Result<Decision, Error>;
    /// Records it (the call allowed): what it answers, when the state was and is back to
    /// empty, and its latest time; stored in the key.
    fn commit(&mut self, key: &mut Key, now: Millis) -> Result<Committed, Error>;
    /// Its entry in the reply.
    fn entry(&self, decision: Decision, committed: Option<&Reply>) -> Reply;
    /// Writes its effect after a commit.
    fn effect(&self, committed: &Reply, at: Millis, out: &mut SmallVec<[u8; 32 * ALL_INLINE]>);
    fn cost(&self) -> u64;
    fn event(&self) -> &'static std::ffi::CStr;
    fn key(&self) -> Arg;
}

/// What a commit did.
pub struct Committed {
    pub reply: Reply,
    pub before: Option<Millis>,
    pub latest: Millis,
    pub empty_at: Option<Millis>,
}

/// A limiter of command `C`.
struct Spec<'a, C: Command> {
    name: Arg,
    call: C::Call<'a>,
    /// A state for a missing key, or the stored one reshaped: stored once recorded in.
    new: Option<C::Kind>,
    behind: u64,
}

impl<C: Command> Limiter for Spec<'_, C>
where
    C::Kind: Storable,
{
    fn check(&self, key: &mut Key, now: Millis) -> Result<(), Error> {
        match key.state::<C::Kind>()? {
            Some(state) => C::check(&state, &self.call, now),
            None => Ok(()),
        }
    }

    fn evaluate(&mut self, key: &mut Key, now: Millis) -> Result<(Decision, Result<(), Error>), Error> {
        let held = key.state::<C::Kind>()?;
        if let Some(state) = held.as_deref() {
            self.new = C::reshaped(state, &self.call, now);
        } else {
            self.new = C::fresh(&self.call);
        }
        let state = match (&self.new, held.as_deref()) {
            (Some(new), _) => new,
            (None, Some(held)) => held,
            (None, None) => return Err(Error::Internal(C::INFO.name)),
        };
        let latest = state.latest();
        self.behind = latest.saturating_sub(now);
        let d = C::evaluate(state, &self.call, now).seen_from_behind(self.behind);
        let fits = match (d.allowed, C::cost(&self.call)) {
            (true, 1..) => C::fits(state, &self.call, now),
            _ => Ok(()),
        };
        Ok((d, fits))
    }

    fn evaluate_free(&mut self, key: &mut Key, now: Millis) -> Result<Decision, Error> {
        let held = key.state::<C::Kind>()?;
        let state = match (&self.new, held.as_deref()) {
            (Some(new), _) => new,
            (None, Some(held)) => held,
            (None, None) => return Err(Error::Internal(C::INFO.name)),
        };
        Ok(C::evaluate_free(state, &self.call, now).seen_from_behind(self.behind))
    }

    fn commit(&mut self, key: &mut Key, now: Millis) -> Result<Committed, Error> {
        if let Some(mut new) = self.new.take() {
            let reply = C::commit(&mut new, &self.call, now).ok_or(Error::Internal("RL.ALL"))?;
            let (latest, empty_at) = (new.latest(), new.empty_at());
            key.set(new)?;
            return Ok(Committed {
                reply,
                before: None,
                latest,
                empty_at,
            });
        }
        let mut held = key.state::<C::Kind>()?.ok_or(Error::Internal("RL.ALL"))?;
        let before = held.empty_at();
        let reply = C::commit(&mut held, &self.call, now).ok_or(Error::Internal("RL.ALL"))?;
        Ok(Committed {
            reply,
            before,
            latest: held.latest(),
            empty_at: held.empty_at(),
        })
    }

    fn entry(&self, decision: Decision, committed: Option<&Reply>) -> Reply {
        C::entry(decision, committed)
    }

    fn effect(&self, committed: &Reply, at: Millis, out: &mut SmallVec<[u8; 32 * ALL_INLINE]>) {
        if C::EFFECT_CODE != 0 {
            let mut compact = Compact::new(C::EFFECT_CODE);
            C::effect(&self.call, committed, at, &mut compact);
            if let Some(bytes) = compact.as_bytes() {
                return out.extend_from_slice(bytes);
            }
        }
        let mut line = Line::new(C::INFO.name);
        C::effect(&self.call, committed, at, &mut line);
        if let Some(bytes) = line.as_bytes() {
            out.extend_from_slice(bytes);
        }
    }

    fn cost(&self) -> u64 {
        C::cost(&self.call)
    }

    fn event(&self) -> &'static std::ffi::CStr {
        C::INFO.event
    }

    fn key(&self) -> Arg {
        self.name
    }
}

/// Where the keys of a call are (what `COMMAND GETKEYS`, ACLs and cluster routing ask for):
/// `2..2 + numkeys`, empty when numkeys is not valid or exceeds the arguments.
pub fn keys_of(args: &[Arg]) -> std::ops::Range<usize> {
    let n = args
        .get(1)
        .and_then(|a| args::int(a.as_bytes(), "numkeys", 1, ALL_MAX_KEYS).ok())
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n <= args.len().saturating_sub(2))
        .unwrap_or(0);
    2..2 + n
}

/// The keywords of the limiters `RL.ALL` takes, for its error naming them.
fn keywords() -> &'static [&'static str] {
    static KEYWORDS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    KEYWORDS.get_or_init(|| {
        catalog()
            .commands()
            .filter_map(|c| c.spec.as_ref().map(|s| s.keyword))
            .collect()
    })
}

/// A parsed call: its limiters in key order, and its `NOW`.
type Limiters<'a> = SmallVec<[Box<dyn Limiter + 'a>; ALL_INLINE]>;

/// Parses a call. An error about one limiter names its key ([`Error::ForKey`]).
fn parse<'a>(ctx: &Context, args: &'a [Arg], words: &[&'a [u8]]) -> Result<(Limiters<'a>, Option<Millis>), Error> {
    let Some(numkeys) = words.get(1) else {
        return Err(Error::Arity);
    };
    let n = args::int(numkeys, "numkeys", 1, ALL_MAX_KEYS)? as usize;
    let (Some(keys), Some(names)) = (args.get(2..2 + n), words.get(2..2 + n)) else {
        return Err(Error::Arity);
    };
    let name = |i: usize| names.get(i).copied().unwrap_or_default();
    for (i, key) in names.iter().enumerate() {
        if names[..i].contains(key) {
            return Err(Error::for_key(key, Error::Invalid("the same key is given twice")));
        }
    }
    let mut limiters = Limiters::new();
    let mut at = 2 + n;
    let mut now = None;
    while let Some(&word) = words.get(at) {
        if word.eq_ignore_ascii_case(b"NOW") {
            let Some(value) = words.get(at + 1) else {
                return Err(Error::MissingValue("NOW"));
            };
            now = Some(args::int(value, "NOW", 0, crate::core::MAX_TIMESTAMP)?);
            if let Some(extra) = words.get(at + 2) {
                return Err(Error::InvalidWord(
                    "NOW comes once, after the last limiter; then nothing",
                    lossy(extra),
                ));
            }
            break;
        }
        let spec = catalog().commands().find_map(|c| {
            c.spec
                .as_ref()
                .filter(|s| word.eq_ignore_ascii_case(s.keyword.as_bytes()))
        });
        let Some(spec) = spec else {
            // Past a limiter's options: an option its kind does not take, or no kind at all.
            return Err(match limiters.len().checked_sub(1) {
                Some(last) => Error::for_key(name(last), Error::UnknownOption(lossy(word))),
                None => Error::ExpectedKind {
                    kinds: keywords(),
                    word: lossy(word),
                },
            });
        };
        let i = limiters.len();
        if i == n {
            return Err(Error::SpecCount {
                keys: n,
                specs: i + 1,
            });
        }
        let rest = words.get(at + 1..).unwrap_or_default();
        let extent = spec.grammar.extent(rest);
        let spec_words = rest.get(..extent).unwrap_or_default();
        let key = keys.get(i).copied().ok_or(Error::Arity)?;
        let limiter = (spec.parse)(ctx, key, spec_words).map_err(|e| Error::for_key(name(i), e))?;
        limiters.push(limiter);
        at += 1 + extent;
    }
    if limiters.len() != n {
        return Err(Error::SpecCount {
            keys: n,
            specs: limiters.len(),
        });
    }
    Ok((limiters, now))
}

/// `RL.ALL`.
pub struct All;

/// `RL.ALL`'s limiters, for `COMMAND DOCS`.
const LIMITER: MetaArg = MetaArg {
    name: "limiter",
    kind: ArgKind::OneOf,
    token: None,
    optional: false,
    multiple: true,
    sub: &[],
};

static ALL_INFO: Info = Info {
    name: "RL.ALL",
    event: c"rl.all",
    summary: "One all-or-nothing decision across several keys, each with its own limiter (a kind's keyword, its parameters and options as in its own command, and its own COST), at one time: allowed only if every limiter allows, and then every one records (an ACQUIRE limiter takes its lease); otherwise none changes. Replies with the five fields of the limiter that decided, then each limiter's in key order",
    complexity: "The sum of each limiter's own command, for at most 16 keys",
    arity: -6,
    keys: Keys::Counted,
    // Several limiters' work in one call (a RL.SUBWIN among them is not O(log N)).
    flags: "write deny-oom",
    categories: "write slow",
    own_category: true,
    args: &[
        meta::arg("numkeys", ArgKind::Integer),
        MetaArg {
            name: "key",
            kind: ArgKind::Key,
            token: None,
            optional: false,
            multiple: true,
            sub: &[],
        },
        LIMITER,
        meta::NOW,
    ],
    stats: Stats::new(),
};

impl Handler for All {
    const INFO: &'static Info = &ALL_INFO;

    fn counters() -> Option<&'static dyn Count> {
        Some(&ALL_INFO.stats)
    }

    fn keys(args: &[Arg]) -> std::ops::Range<usize> {
        keys_of(args)
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let words: SmallVec<[&[u8]; 32]> = args.iter().map(Arg::as_bytes).collect();
        let (mut limiters, now) = parse(ctx, args, &words)?;
        let clock = clock(ctx, now, Mode::Decide)?;
        let now = clock.caller;
        let mut keys: SmallVec<[Key; ALL_INLINE]> = SmallVec::new();
        for l in &limiters {
            keys.push(Key::open(ctx, l.key(), true));
        }
        let named = |i: usize, e: Error| match args.get(2 + i) {
            Some(key) => Error::for_key(key.as_bytes(), e),
            None => e,
        };
        // Every limiter checked and evaluated, none changed.
        let mut decisions: SmallVec<[Decision; ALL_INLINE]> = SmallVec::new();
        let mut unfit = None;
        for (i, (l, key)) in limiters.iter_mut().zip(keys.iter_mut()).enumerate() {
            l.check(key, now).map_err(|e| named(i, e))?;
            let (d, fits) = l.evaluate(key, now).map_err(|e| named(i, e))?;
            if let (Err(e), None) = (fits, &unfit) {
                unfit = Some((i, e));
            }
            decisions.push(d);
        }
        let allowed = decisions.iter().all(|d| d.allowed);
        let mut entries: SmallVec<[Reply; ALL_INLINE]> = SmallVec::new();
        if !allowed {
            // Nothing is taken: a limiter that would have allowed answers its state as it
            // stands, as its own command with `COST 0` would (a refusing one already does).
            for (i, (l, key)) in limiters.iter_mut().zip(keys.iter_mut()).enumerate() {
                let Some(d) = decisions.get_mut(i) else {
                    continue;
                };
                if d.allowed && l.cost() > 0 {
                    *d = l.evaluate_free(key, now).map_err(|e| named(i, e))?;
                }
                entries.push(l.entry(*d, None));
            }
            let head = combine(&decisions);
            return Ok(Answer::All(head, entries));
        }
        if let Some((i, e)) = unfit {
            return Err(named(i, e));
        }
        // Every one records; the changes' effects go together in one RL.APPLY.
        let mut bytes: SmallVec<[u8; 32 * ALL_INLINE]> = SmallVec::new();
        let mut changes: SmallVec<[(Arg, usize, Option<Millis>); ALL_INLINE]> = SmallVec::new();
        for (i, (l, key)) in limiters.iter_mut().zip(keys.iter_mut()).enumerate() {
            let Some(d) = decisions.get_mut(i) else {
                continue;
            };
            if l.cost() == 0 {
                entries.push(l.entry(*d, None));
                continue;
            }
            let c = l.commit(key, now).map_err(|e| named(i, e))?;
            *d = d.resetting_at(c.empty_at, now);
            entries.push(l.entry(*d, Some(&c.reply)));
            let expiry = settle(key, l.event(), c.empty_at, clock.lag, c.before);
            let start = bytes.len();
            l.effect(&c.reply, c.latest, &mut bytes);
            changes.push((l.key(), bytes.len() - start, expiry));
        }
        drop(keys);
        let mut pairs: SmallVec<[(Arg, &[u8]); ALL_INLINE]> = SmallVec::new();
        let mut rest = bytes.as_slice();
        for &(name, len, _) in &changes {
            let (effect, after) = rest.split_at(len.min(rest.len()));
            pairs.push((name, effect));
            rest = after;
        }
        if !pairs.is_empty() {
            api::replicate_effects(ctx, &pairs);
        }
        for &(name, _, expiry) in &changes {
            replicate_expiry(ctx, name, clock.lag, expiry);
        }
        for &(name, ..) in &changes {
            crate::rm::block::kick(ctx, name);
        }
        Ok(Answer::All(combine(&decisions), entries))
    }
}

/// `RL.ALL`'s metadata and counters.
pub fn info() -> &'static Info {
    &ALL_INFO
}

/// How long a wait is, for comparing: never is the longest.
fn wait_rank(w: Wait) -> (u8, u64) {
    match w {
        Wait::None => (0, 0),
        Wait::Ms(ms) => (1, ms),
        Wait::Never => (2, 0),
    }
}

/// The five fields that answer a call of several limiters (`decisions` in key order, at least
/// one):
/// - allowed: every one allowed;
/// - refused: limit, remaining and retry_after of the refusing limiter that needs the longest
///   wait (never is the longest; the first in key order on a tie);
/// - allowed: limit and remaining of the limiter with the least remaining (the first on a
///   tie), and the longest retry_after among them all (only a leaky bucket asks an allowed
///   call to wait, and the caller must wait for it);
/// - reset_after_ms: the longest, when every limiter is back to empty.
pub fn combine(decisions: &[Decision]) -> Decision {
    let allowed = decisions.iter().all(|d| d.allowed);
    let reset_after_ms = decisions.iter().map(|d| d.reset_after_ms).max();
    let decided = if allowed {
        let least = decisions.iter().fold(None::<&Decision>, |best, d| match best {
            Some(b) if b.remaining <= d.remaining => Some(b),
            _ => Some(d),
        });
        least.map(|d| Decision {
            retry_after: longest_wait(decisions.iter()).map_or(Wait::None, |w| w.retry_after),
            ..*d
        })
    } else {
        longest_wait(decisions.iter().filter(|d| !d.allowed)).copied()
    };
    let d = decided.unwrap_or(Decision {
        allowed: true,
        limit: 0,
        remaining: 0,
        retry_after: Wait::None,
        reset_after_ms: 0,
    });
    Decision {
        allowed,
        reset_after_ms: reset_after_ms.unwrap_or(0),
        ..d
    }
}

/// The decision that needs the longest wait (the first on a tie).
fn longest_wait<'a>(ds: impl Iterator<Item = &'a Decision>) -> Option<&'a Decision> {
    ds.fold(None::<&Decision>, |best, d| match best {
        Some(b) if wait_rank(b.retry_after) >= wait_rank(d.retry_after) => Some(b),
        _ => Some(d),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_fields() {
        let d = |allowed, limit, remaining, retry_after, reset_after_ms| Decision {
            allowed,
            limit,
            remaining,
            retry_after,
            reset_after_ms,
        };
        // Allowed: the least remaining, the longest wait (a leaky bucket's), the latest reset.
        let got = combine(&[
            d(true, 10, 3, Wait::None, 500),
            d(true, 5, 1, Wait::None, 100),
            d(true, 7, 1, Wait::Ms(40), 900),
        ]);
        assert_eq!(got.as_reply(), [1, 5, 1, 40, 900]);
        // Refused: the refusing limiter with the longest wait; never beats any wait.
        let got = combine(&[
            d(false, 10, 0, Wait::Ms(700), 800),
            d(true, 5, 4, Wait::Ms(900), 100),
            d(false, 3, 0, Wait::Ms(200), 300),
        ]);
        assert_eq!(got.as_reply(), [0, 10, 0, 700, 800]);
        let got = combine(&[
            d(false, 10, 0, Wait::Ms(700), 800),
            d(false, 2, 0, Wait::Never, 0),
        ]);
        assert_eq!(got.as_reply(), [0, 2, 0, -1, 800]);
    }
}
