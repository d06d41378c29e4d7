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

use super::limiters::{keywords, run_limiters, spec_named, Frames, OnKey, Shadow, ALL_MAX_KEYS};
use super::{catalog, clock};
use crate::core::args::{self, lossy};
use crate::core::error::Error;
use crate::core::kind::Mode;
use crate::core::meta::{self, Arg as MetaArg, ArgKind, Info, Keys, Stats};
use crate::core::Instant;
use crate::rm::api::{self, Answer, Arg, Count, Handler, ALL_INLINE};

/// Where the keys of a call are (what `COMMAND GETKEYS`, ACLs and cluster routing ask for):
/// `2..2 + numkeys`, empty when numkeys is not valid or exceeds the arguments.
pub fn keys_of(args: &[Arg]) -> std::ops::Range<usize> {
    keys_in(args.len(), args.get(1).map(Arg::as_bytes))
}

/// [`keys_of`] for the words of a call.
pub fn keys_of_words(words: &[&[u8]]) -> std::ops::Range<usize> {
    keys_in(words.len(), words.get(1).copied())
}

/// The keys of a call of `len` arguments whose second is `numkeys`.
fn keys_in(len: usize, numkeys: Option<&[u8]>) -> std::ops::Range<usize> {
    let n = numkeys
        .and_then(|w| args::int(w, "numkeys", 1, ALL_MAX_KEYS).ok())
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n <= len.saturating_sub(2))
        .unwrap_or(0);
    2..2 + n
}

/// A parsed call: its limiters in key order, and its `NOW`.
type Limiters<'a, 'c, 'r> = SmallVec<[OnKey<'a, 'c, 'r>; ALL_INLINE]>;

/// Parses a call. An error about one limiter names its key ([`Error::ForKey`]).
pub(crate) fn parse<'a, 'c, 'r>(
    ctx: &'c Context,
    words: &[&'a [u8]],
    frames: &'r Frames,
) -> Result<(Limiters<'a, 'c, 'r>, Option<Instant>), Error> {
    let Some(numkeys) = words.get(1) else {
        return Err(Error::Arity);
    };
    let n = args::int(numkeys, "numkeys", 1, ALL_MAX_KEYS)? as usize;
    let Some(names) = words.get(2..2 + n) else {
        return Err(Error::Arity);
    };
    let name = |i: usize| names.get(i).copied().unwrap_or_default();
    for (i, key) in names.iter().enumerate() {
        if names[..i].contains(key) {
            return Err(Error::for_key(
                key,
                Error::Invalid("the same key is given twice"),
            ));
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
            let ms = args::int(value, "NOW", 0, crate::core::MAX_TIMESTAMP.ms())?;
            now = Some(crate::core::Instant::from_ms(ms));
            if let Some(extra) = words.get(at + 2) {
                return Err(Error::InvalidWord(
                    "NOW comes once, after the last limiter; then nothing",
                    lossy(extra),
                ));
            }
            break;
        }
        let Some(spec) = spec_named(word) else {
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
        let limiter =
            (spec.parse)(ctx, spec_words, frames).map_err(|e| Error::for_key(name(i), e))?;
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

    /// One per kind that may be a limiter: its keyword, then its command's arguments
    /// after the key but `BLOCK` and `NOW` (which are the call's).
    fn choices() -> &'static [MetaArg] {
        static CHOICES: std::sync::OnceLock<&'static [MetaArg]> = std::sync::OnceLock::new();
        CHOICES.get_or_init(|| {
            let choices: Vec<MetaArg> = catalog()
                .commands()
                .filter_map(|c| {
                    let spec = c.spec.as_ref()?;
                    // The limiter's grammar, but BLOCK (no limiter of RL.ALL waits).
                    let sub: Vec<MetaArg> = spec
                        .grammar
                        .limiter_args()
                        .into_iter()
                        .filter(|a| a.token != Some("BLOCK"))
                        .collect();
                    // Made once, at load, and kept for the module's life.
                    let name: &'static str =
                        Box::leak(spec.keyword.to_lowercase().into_boxed_str());
                    Some(meta::block(
                        name,
                        spec.keyword,
                        Box::leak(sub.into_boxed_slice()),
                    ))
                })
                .collect();
            Box::leak(choices.into_boxed_slice())
        })
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let mut words: SmallVec<[&[u8]; 32]> = SmallVec::new();
        for a in args {
            words.push(a.as_bytes());
        }
        let frames = Frames::new();
        let (mut limiters, now) = parse(ctx, &words, &frames)?;
        let clock = clock(ctx, now, Mode::Decide)?;
        let names = args
            .get(2..2 + limiters.len())
            .ok_or_else(|| Error::Arity)?;
        let outcome = run_limiters(ctx, &mut limiters, names, clock, Shadow::NONE)?;
        if let Some(key) = outcome.refused_by.and_then(|i| names.get(i)) {
            super::top::refused_key(key.as_bytes());
        }
        api::reply_all(ctx, &outcome.decision, &outcome.entries);
        Ok(Answer::Written(outcome.decision.allowed))
    }
}

/// `RL.ALL`'s metadata and counters.
pub fn info() -> &'static Info {
    &ALL_INFO
}
