//! `RL.POLICY SET / GET / DEL / LIST / HELP`.
//!
//! `SET` and `DEL` change every client's limits, server-wide, whatever the keys a user may
//! touch: they are an administrator's, as `CONFIG SET` is (`@admin @dangerous`, and checked
//! at each call against the user's right to `CONFIG SET`, also where the server has no ACL
//! categories for module commands), and a replica takes them from its primary only. `GET`,
//! `LIST` and `HELP` are open to applications (`@read`, `@ratelimit`).

use redis_module::{Context, ContextFlags, RedisValue};

use super::{make, policy, put, store, Policy};
use crate::core::args::{self, Opt, Value};
use crate::core::error::Error;
use crate::core::kind::Reply;
use crate::core::meta::{self, ArgKind, Info, Keys, Stats};
use crate::core::policy::{hex, MAX_NAME};
use crate::engine::{administrator, applying_decided};
use crate::kinds::penalty::Penalty;
use crate::rm::api::{self, Answer, Arg, Count, Handler, OwnedString};
use crate::rm::key::Key;

const NAME: meta::Arg = meta::arg("name", ArgKind::String);

/// Whether the calling client may change policies: always from the primary or the AOF;
/// else an administrator's call on a server that is not a replica.
fn may_change(ctx: &Context) -> Result<(), Error> {
    if applying_decided(ctx) {
        return Ok(());
    }
    if ctx.get_flags().contains(ContextFlags::SLAVE) {
        return Err(Error::PolicyOnReplica);
    }
    if !administrator(ctx) {
        return Err(Error::PolicyAdmin);
    }
    Ok(())
}

/// `RL.POLICY SET name limiter [limiter ...]`.
pub struct Set;

static SET_INFO: Info = Info {
    name: "RL.POLICY|SET",
    event: c"rl.policy",
    summary: "Keeps a policy under a name: one or more limiters, each a name, then a kind's keyword and its parameters and options as RL.ALL takes them (a limiter whose words give no COST takes each RL.HIT's). Set again, it holds from the next call, the keys keeping their history. An administrator's command, as CONFIG SET is",
    complexity: "O(N) in the definition's words",
    arity: -6,
    keys: Keys::None,
    flags: "write deny-oom admin",
    categories: "admin dangerous slow",
    own_category: false,
    args: &[
        NAME,
        meta::Arg {
            name: "limiter",
            kind: ArgKind::String,
            token: None,
            optional: false,
            multiple: true,
            sub: &[],
        },
    ],
    stats: Stats::new(),
};

impl Handler for Set {
    const INFO: &'static Info = &SET_INFO;

    fn counters() -> Option<&'static dyn Count> {
        None
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let Some(name) = args.get(2) else {
            return Err(Error::Arity);
        };
        may_change(ctx)?;
        let words: Vec<&[u8]> = args
            .get(3..)
            .unwrap_or_default()
            .iter()
            .map(Arg::as_bytes)
            .collect();
        let name = name.as_bytes();
        let previous = policy(name);
        let decided = applying_decided(ctx);
        let made = make(name, &words, previous.as_deref(), !decided)?;
        if let Err(e) = put(made) {
            if decided {
                redis_module::logging::log_warning(format!(
                    "ratelimit: policy '{}' from the primary or the AOF not kept: {e}",
                    args::lossy(name)
                ));
            }
            return Err(e);
        }
        crate::rm::server::replicate_verbatim(ctx);
        Ok(Answer::One(Reply::Ok))
    }
}

/// `RL.POLICY GET name`.
pub struct Get;

static GET_INFO: Info = Info {
    name: "RL.POLICY|GET",
    event: c"rl.policy",
    summary: "A policy's definition, its words as RL.POLICY SET takes them after the name; nil when there is none",
    complexity: "O(N) in the definition's words",
    arity: 3,
    keys: Keys::None,
    flags: "readonly fast",
    categories: "read fast",
    own_category: true,
    args: &[NAME],
    stats: Stats::new(),
};

fn words_value(p: &Policy) -> RedisValue {
    RedisValue::Array(
        p.words
            .iter()
            .map(|w| RedisValue::StringBuffer(w.to_vec()))
            .collect(),
    )
}

impl Handler for Get {
    const INFO: &'static Info = &GET_INFO;

    fn counters() -> Option<&'static dyn Count> {
        None
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let Some(name) = args.get(2) else {
            return Err(Error::Arity);
        };
        let value = policy(name.as_bytes()).map_or(RedisValue::Null, |p| words_value(&p));
        ctx.reply(Ok(value));
        Ok(Answer::Written(true))
    }
}

/// `RL.POLICY DEL name`.
pub struct Del;

static DEL_INFO: Info = Info {
    name: "RL.POLICY|DEL",
    event: c"rl.policy",
    summary: "Deletes a policy: 1, or 0 when there was none. Its keys are left to expire. An administrator's command, as CONFIG SET is",
    complexity: "O(1)",
    arity: 3,
    keys: Keys::None,
    flags: "write admin",
    categories: "admin dangerous fast",
    own_category: false,
    args: &[NAME],
    stats: Stats::new(),
};

impl Handler for Del {
    const INFO: &'static Info = &DEL_INFO;

    fn counters() -> Option<&'static dyn Count> {
        None
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let Some(name) = args.get(2) else {
            return Err(Error::Arity);
        };
        may_change(ctx)?;
        let gone = store().remove(name.as_bytes()).is_some();
        if gone {
            crate::rm::server::replicate_verbatim(ctx);
        }
        ctx.reply(Ok(RedisValue::Integer(i64::from(gone))));
        Ok(Answer::Written(true))
    }
}

/// `RL.POLICY UNBAN policy subject`.
pub struct Unban;

static UNBAN_INFO: Info = Info {
    name: "RL.POLICY|UNBAN",
    event: c"rl.policy",
    summary: "Lifts a subject's ban under a policy's PENALTY, and forgets its refusals and past bans: deletes the key policy||penalty|{subject} (as DEL of it does). 1, or 0 when there was none",
    complexity: "O(1)",
    arity: 4,
    keys: Keys::Third,
    flags: "write fast",
    categories: "write fast",
    own_category: true,
    args: &[
        NAME,
        super::hit::SUBJECT,
    ],
    stats: Stats::new(),
};

impl Handler for Unban {
    const INFO: &'static Info = &UNBAN_INFO;

    fn counters() -> Option<&'static dyn Count> {
        None
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let (Some(name), Some(subject)) = (args.get(2), args.get(3)) else {
            return Err(Error::Arity);
        };
        let mut key = crate::core::policy::Key::new();
        let (name, subject) = (name.as_bytes(), subject.as_bytes());
        crate::core::policy::key_for(name, b"", b"penalty", subject, &mut key)?;
        let owned =
            OwnedString::new(ctx, key.as_bytes()).ok_or_else(|| Error::Internal("RL.POLICY"))?;
        let mut k = Key::open(ctx, owned.arg(), true);
        let held = k.state::<Penalty>()?.is_some();
        if held {
            k.delete();
            k.signal_modified();
            k.notify_deleted();
            drop(k);
            api::replicate_del(ctx, owned.arg());
        }
        ctx.reply(Ok(RedisValue::Integer(i64::from(held))));
        Ok(Answer::Written(true))
    }
}

/// `RL.POLICY SUBJECT policy subject [NOW ms]`.
pub struct Subject;

static SUBJECT_INFO: Info = Info {
    name: "RL.POLICY|SUBJECT",
    event: c"rl.policy",
    summary: "A subject's state under a policy, keyed or compact: for each limiter, in order, an array of its name and what RL.PEEK of its key answers (the five fields, or nil when it holds nothing)",
    complexity: "O(N) in the policy's limiters",
    arity: -4,
    keys: Keys::Third,
    flags: "readonly",
    categories: "read fast",
    own_category: true,
    args: &[NAME, super::hit::SUBJECT, meta::NOW],
    stats: Stats::new(),
};

args::option_set! {
    /// `RL.POLICY SUBJECT`'s options: none but `NOW`.
    struct SubjectOptions {}
}

impl Handler for Subject {
    const INFO: &'static Info = &SUBJECT_INFO;

    fn counters() -> Option<&'static dyn Count> {
        None
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let (Some(name), Some(subject)) = (args.get(2), args.get(3)) else {
            return Err(Error::Arity);
        };
        let words: Vec<&[u8]> = args
            .get(4..)
            .unwrap_or_default()
            .iter()
            .map(Arg::as_bytes)
            .collect();
        let now = SubjectOptions::parse(&words)?.now();
        let clock = crate::engine::clock(ctx, now, crate::core::kind::Mode::Decide)?;
        let p = super::named(name.as_bytes())?;
        let members = p
            .members
            .as_ref()
            .map_err(|why| Error::UnreadablePolicy(why.clone()))?;
        let (name, subject) = (name.as_bytes(), subject.as_bytes());
        let tagged = crate::core::policy::check_subject(subject)?;
        let decision = |d: Option<crate::core::Decision>| match d {
            Some(d) => {
                RedisValue::Array(d.as_reply().into_iter().map(RedisValue::Integer).collect())
            }
            None => RedisValue::Null,
        };
        let mut out = Vec::with_capacity(members.len());
        match &p.layout {
            Some(layout) => {
                let mut states: [Option<crate::kinds::family::Held>;
                    crate::kinds::family::MAX_LIMITERS] = Default::default();
                super::compact::read(ctx, name, layout, subject, &mut states)?;
                for (m, st) in members.iter().zip(states) {
                    let d = st.and_then(|st| m.prepared.peek_packed(&st, clock.caller));
                    out.push(RedisValue::Array(vec![
                        RedisValue::StringBuffer(m.name.to_vec()),
                        decision(d),
                    ]));
                }
            }
            None => {
                for m in members.iter() {
                    let owned = m.key(ctx, name, subject, tagged)?;
                    let d = match crate::engine::generic::peek_key(ctx, owned.arg(), clock)? {
                        Reply::Decision(d) | Reply::Lease(d, _) => Some(d),
                        _ => None,
                    };
                    out.push(RedisValue::Array(vec![
                        RedisValue::StringBuffer(m.name.to_vec()),
                        decision(d),
                    ]));
                }
            }
        }
        ctx.reply(Ok(RedisValue::Array(out)));
        Ok(Answer::Written(true))
    }
}

/// `RL.POLICY FORGET policy subject`.
pub struct Forget;

static FORGET_INFO: Info = Info {
    name: "RL.POLICY|FORGET",
    event: c"rl.policy",
    summary: "Forgets a subject under a policy, keyed or compact: deletes its limiters' keys, or removes it from its family (a compact policy's), its ban aside (RL.POLICY UNBAN). 1, or 0 when it held nothing",
    complexity: "O(N) in the policy's limiters",
    arity: 4,
    keys: Keys::Third,
    flags: "write fast",
    categories: "write fast",
    own_category: true,
    args: &[NAME, super::hit::SUBJECT],
    stats: Stats::new(),
};

impl Handler for Forget {
    const INFO: &'static Info = &FORGET_INFO;

    fn counters() -> Option<&'static dyn Count> {
        None
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let (Some(name), Some(subject)) = (args.get(2), args.get(3)) else {
            return Err(Error::Arity);
        };
        let p = super::named(name.as_bytes())?;
        let members = p
            .members
            .as_ref()
            .map_err(|why| Error::UnreadablePolicy(why.clone()))?;
        let (name, subject) = (name.as_bytes(), subject.as_bytes());
        let tagged = crate::core::policy::check_subject(subject)?;
        let held = match &p.layout {
            Some(_) => super::compact::forget(ctx, name, subject)?,
            None => {
                let mut held = false;
                for m in members.iter() {
                    let owned = m.key(ctx, name, subject, tagged)?;
                    let k = Key::open(ctx, owned.arg(), true);
                    if k.holds_ours()? {
                        k.delete();
                        k.signal_modified();
                        k.notify_deleted();
                        drop(k);
                        api::replicate_del(ctx, owned.arg());
                        held = true;
                    }
                }
                held
            }
        };
        ctx.reply(Ok(RedisValue::Integer(i64::from(held))));
        Ok(Answer::Written(true))
    }
}

/// `RL.POLICY LIST [cursor] [COUNT n]`.
pub struct List;

/// Policies a page gives unless `COUNT` says otherwise, and the most it may say.
const LIST_COUNT: u64 = 10;
const LIST_COUNT_MAX: u64 = 100;

/// A page ends once it has given this many definition words (one policy at least): so that
/// no page takes long, whatever the definitions.
const PAGE_WORDS: usize = 2048;

const LIST_OPTIONS: [Opt; 1] = [Opt::int("COUNT", 1, LIST_COUNT_MAX)];

static LIST_INFO: Info = Info {
    name: "RL.POLICY|LIST",
    event: c"rl.policy",
    summary: "The policies by name, a page at a time, as SCAN pages keys: a cursor to call again with (0 when done), then COUNT policies (10 unless given, fewer when their definitions are long), each its name, the digest of its definition (the same definition gives the same digest on every node), and its definition. Start with cursor 0 (or none). A policy held all along is given once",
    complexity: "O(N) in the number of policies (to find the page) plus the page's words",
    arity: -2,
    keys: Keys::None,
    flags: "readonly",
    categories: "read slow",
    own_category: true,
    args: &[
        meta::Arg {
            name: "cursor",
            kind: ArgKind::String,
            token: None,
            optional: true,
            multiple: false,
            sub: &[],
        },
        meta::option("COUNT", "count"),
    ],
    stats: Stats::new(),
};

/// Where a page starts: after the policy named in the cursor (`(name`), or at the first
/// (`0`).
fn parse_cursor(word: &[u8]) -> Result<Option<&[u8]>, Error> {
    match word {
        b"0" => Ok(None),
        [b'(', name @ ..] if !name.is_empty() && name.len() <= MAX_NAME => Ok(Some(name)),
        _ => Err(Error::InvalidWord(
            "a cursor of RL.POLICY LIST is 0 or one it answered",
            args::lossy(word),
        )),
    }
}

impl Handler for List {
    const INFO: &'static Info = &LIST_INFO;

    fn counters() -> Option<&'static dyn Count> {
        None
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let words: Vec<&[u8]> = args
            .get(2..)
            .unwrap_or_default()
            .iter()
            .map(Arg::as_bytes)
            .collect();
        // The cursor first, when the first word is not an option.
        let (cursor, options) = match words.split_first() {
            Some((first, rest)) if !first.eq_ignore_ascii_case(b"COUNT") => (*first, rest),
            _ => (&b"0"[..], &words[..]),
        };
        let after = parse_cursor(cursor)?;
        let given = args::options(options, &LIST_OPTIONS)?;
        let count = given[0].map_or(LIST_COUNT, Value::int) as usize;
        // The next `count` names after the cursor's: found in one pass, the store unsorted.
        let mut page: Vec<std::sync::Arc<Policy>> = store()
            .values()
            .filter(|p| after.is_none_or(|after| p.name.as_bytes() > after))
            .cloned()
            .collect();
        page.sort_unstable_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        let more = page.len() > count;
        page.truncate(count);
        let mut given_words = 0;
        let mut entries = Vec::with_capacity(page.len());
        let mut last: Option<&[u8]> = None;
        for p in &page {
            if given_words >= PAGE_WORDS {
                break;
            }
            given_words += p.words.len();
            entries.push(RedisValue::Array(vec![
                RedisValue::StringBuffer(p.name.as_bytes().to_vec()),
                RedisValue::StringBuffer(hex(p.digest).to_vec()),
                words_value(p),
            ]));
            last = Some(p.name.as_bytes());
        }
        let done = !more && entries.len() == page.len();
        let next = match (done, last) {
            (false, Some(name)) => [&b"("[..], name].concat(),
            _ => b"0".to_vec(),
        };
        ctx.reply(Ok(RedisValue::Array(vec![
            RedisValue::StringBuffer(next),
            RedisValue::Array(entries),
        ])));
        Ok(Answer::Written(true))
    }
}

/// `RL.POLICY HELP`.
pub struct Help;

static HELP_INFO: Info = Info {
    name: "RL.POLICY|HELP",
    event: c"rl.policy",
    summary: "The subcommands of RL.POLICY, a line each",
    complexity: "O(1)",
    arity: 2,
    keys: Keys::None,
    flags: "allow-loading allow-stale",
    categories: "slow",
    own_category: true,
    args: &[],
    stats: Stats::new(),
};

/// The help's lines; `{kinds}` stands for the kinds' keywords.
const HELP: [&str; 22] = [
    "RL.POLICY <subcommand> [<arg> ...]. Subcommands are:",
    "SET <name> [COMPACT] [SHADOW] [PENALTY <refusals> <window> <ban> [MAX <ms>] [HORIZON <ms>]]",
    "        <limiter> <KIND> <params and options> [SHADOW] [<limiter> <KIND> ...]",
    "    Keep a policy: each limiter a name (starting with a letter), then a kind and its",
    "    words as RL.ALL takes them. Kinds: {kinds}.",
    "    A limiter without COST takes each RL.HIT's. SHADOW after a limiter: it never",
    "    refuses (before the first: none does). PENALTY: a ban after repeated refusals.",
    "    COMPACT: subjects kept in one key per hash slot, tens of bytes each.",
    "    An administrator's command, as CONFIG SET is.",
    "GET <name>",
    "    A policy's definition, or nil.",
    "DEL <name>",
    "    Delete a policy (its keys expire). An administrator's command.",
    "UNBAN <name> <subject>",
    "    Lift the subject's ban under the policy's PENALTY (1, or 0 when none).",
    "SUBJECT <name> <subject> [NOW <ms>]",
    "    Each limiter's name and RL.PEEK's answer for the subject (nil: nothing held).",
    "FORGET <name> <subject>",
    "    Forget the subject's limiters' states (1, or 0 when none).",
    "LIST [<cursor>] [COUNT <n>]",
    "    A page of policies: the next cursor (0 when done), then name, digest, definition.",
    "HELP",
];

impl Handler for Help {
    const INFO: &'static Info = &HELP_INFO;

    fn counters() -> Option<&'static dyn Count> {
        None
    }

    fn run(ctx: &Context, _args: &[Arg]) -> Result<Answer, Error> {
        let kinds = crate::engine::limiters::keywords().join(", ");
        ctx.reply(Ok(RedisValue::Array(
            HELP.iter()
                .map(|l| RedisValue::SimpleString(l.replace("{kinds}", &kinds)))
                .collect(),
        )));
        Ok(Answer::Written(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors() {
        assert_eq!(parse_cursor(b"0"), Ok(None));
        assert_eq!(parse_cursor(b"(api"), Ok(Some(&b"api"[..])));
        for bad in [&b""[..], b"(", b"1", b"api", b"00"] {
            assert!(parse_cursor(bad).is_err(), "{bad:?}");
        }
    }
}
