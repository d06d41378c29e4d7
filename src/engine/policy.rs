//! Policies: limits kept in the server under a name (`RL.POLICY SET/GET/DEL/LIST`), and
//! `RL.HIT policy subject`, one all-or-nothing decision under a policy's limiters, each on a
//! key derived from the subject (`core::policy::key_for`).
//!
//! A policy is server state, like a Redis Function: saved in the RDB's aux data (before the
//! keys), in the AOF as the `RL.POLICY SET/DEL` calls that made it, and in AOF rewrites
//! through the RDB preamble; replicated as those calls; never evicted. A server holds at
//! most `core::policy::MAX_POLICIES`.
//!
//! Each limiter is parsed once, when the policy is set, and put in each hit's frames as a
//! limiter of `RL.ALL`'s (see `all::Prepared`): a hit parses nothing but its own options.
//! A policy set again holds from the next call: the keys keep their history, and each
//! limiter's state is reshaped to the new parameters as its own command would (the way a
//! client changing its numbers changes them). Its counters and its sketch of who is refused
//! carry over.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};

use redis_module::{Context, RedisValue};
use smallvec::SmallVec;

use super::all::{self, Frames, OnKey, Prepared, ALL_MAX_KEYS};
use super::{applying_decided, clock, top};
use crate::core::args::{self, lossy, Opt, Value};
use crate::core::error::Error;
use crate::core::kind::{Mode, Reply};
use crate::core::meta::{self, ArgKind, Info, Keys, Stats};
use crate::core::policy::{self as def, MAX_POLICIES, MAX_WORD, MAX_WORDS};
use crate::rm::api::{self, Answer, Arg, Count, Handler, OwnedString, ALL_INLINE};
use crate::rm::datatype::Aux;

/// One limiter of a policy: its name (in its keys) and the limiter, parsed.
struct Member {
    name: Box<[u8]>,
    prepared: Box<dyn Prepared>,
}

/// What a policy counts (`INFO ratelimit`) and who it refuses (`RL.TOP`): kept when the
/// policy is set again, in memory only.
#[derive(Default)]
pub struct Tracking {
    allowed: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    /// Units taken by allowed calls (their `COST`).
    units: AtomicU64,
    /// Made at the first refusal.
    pub top: top::Shared,
}

/// A policy.
pub struct Policy {
    name: Box<[u8]>,
    /// Its definition as written: what `RL.POLICY GET` answers and the RDB keeps.
    words: Vec<Box<[u8]>>,
    digest: String,
    /// Its limiters; why not, for a definition a load could not read (kept as it was).
    members: Result<Vec<Member>, String>,
    tracking: Arc<Tracking>,
}

/// 64-bit FNV-1a: policy names are short, and SipHash would cost a hit more than the
/// lookup's worth (the names are the operator's, not the clients').
#[derive(Default)]
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0 = crate::core::fnv1a(self.0 ^ crate::core::FNV_OFFSET, bytes);
    }
}

type Store = HashMap<Box<[u8]>, Arc<Policy>, BuildHasherDefault<Fnv>>;

/// The policies. Used from the main thread only (and read by a saving child process); the
/// lock is never held while a call runs.
static STORE: LazyLock<Mutex<Store>> = LazyLock::new(Mutex::default);

fn store() -> MutexGuard<'static, Store> {
    STORE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The policy named `name`.
fn policy(name: &[u8]) -> Option<Arc<Policy>> {
    store().get(name).cloned()
}

/// Parses a definition: `name KIND words... [name KIND words...]`, each limiter in
/// `RL.ALL`'s grammar after its name. An error names the limiter at fault.
fn define(words: &[&[u8]]) -> Result<Vec<Member>, Error> {
    if words.len() > MAX_WORDS {
        return Err(Error::Invalid("a policy takes at most 256 words"));
    }
    if let Some(long) = words.iter().find(|w| w.len() > MAX_WORD) {
        return Err(Error::InvalidWord(
            "a policy's words are at most 64 bytes",
            lossy(long),
        ));
    }
    let mut members: Vec<Member> = Vec::new();
    let mut at = 0;
    while let Some(&name) = words.get(at) {
        if name.eq_ignore_ascii_case(b"NOW") {
            return Err(Error::Invalid(
                "NOW is each call's (RL.HIT policy subject NOW ms), not a policy's",
            ));
        }
        def::check_name(
            "a limiter's name is 1 to 64 letters, digits and _ - . :",
            name,
        )?;
        if members
            .iter()
            .any(|m| m.name[..].eq_ignore_ascii_case(name))
        {
            return Err(Error::for_limiter(
                name,
                Error::Invalid("the same limiter name is given twice"),
            ));
        }
        if members.len() as u64 == ALL_MAX_KEYS {
            return Err(Error::Invalid("a policy has at most 16 limiters"));
        }
        let Some(&keyword) = words.get(at + 1) else {
            return Err(Error::for_limiter(
                name,
                Error::Invalid("a limiter's name is followed by its kind and parameters"),
            ));
        };
        let Some(spec) = all::spec_named(keyword) else {
            return Err(Error::for_limiter(
                name,
                Error::ExpectedKind {
                    kinds: all::keywords(),
                    word: lossy(keyword),
                },
            ));
        };
        let rest = words.get(at + 2..).unwrap_or_default();
        let extent = spec.grammar.extent(rest);
        let own = rest.get(..extent).unwrap_or_default();
        let prepared = (spec.prepare)(own).map_err(|e| Error::for_limiter(name, e))?;
        members.push(Member {
            name: name.into(),
            prepared,
        });
        at += 2 + extent;
    }
    if members.is_empty() {
        return Err(Error::Arity);
    }
    Ok(members)
}

/// Makes a policy (for `RL.POLICY SET` and a load alike: the one way in).
fn make(name: &[u8], words: &[&[u8]], tracking: Arc<Tracking>) -> Result<Policy, Error> {
    def::check_name(
        "a policy's name is 1 to 64 letters, digits and _ - . :",
        name,
    )?;
    let members = define(words)?;
    Ok(Policy {
        name: name.into(),
        words: words.iter().map(|&w| w.into()).collect(),
        digest: def::digest(words.iter().copied()),
        members: Ok(members),
        tracking,
    })
}

/// Stores `policy` in place of any of its name: an error when it is a new one and the
/// server holds the most it may (never for a call from the primary or the AOF, which
/// follow what was decided).
fn put(policy: Policy, bounded: bool) -> Result<(), Error> {
    let mut store = store();
    if bounded && store.len() >= MAX_POLICIES && !store.contains_key(&policy.name) {
        return Err(Error::TooManyPolicies(MAX_POLICIES));
    }
    store.insert(policy.name.clone(), Arc::new(policy));
    Ok(())
}

/// The tracking of the policy named `name`, new if there is none.
fn tracking_of(name: &[u8]) -> Arc<Tracking> {
    store()
        .get(name)
        .map_or_else(Arc::default, |p| p.tracking.clone())
}

// ---------------------------------------------------------------------------------------
// Persistence: the RDB's aux data.

/// The hooks the type's aux data goes through.
pub fn aux() -> Aux {
    Aux {
        save: save_aux,
        load: load_aux,
    }
}

fn save_aux(all: bool) -> Option<Vec<u8>> {
    let store = store();
    if store.is_empty() && !all {
        return None;
    }
    let mut policies: Vec<&Arc<Policy>> = store.values().collect();
    policies.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = Vec::new();
    def::encode(
        policies.iter().map(|p| (&p.name[..], &p.words[..])),
        &mut out,
    );
    Some(out)
}

/// Takes the saved policies in place of the server's. A definition this build cannot read
/// is kept as it was (`RL.HIT` under it answers an error, and it is saved again as it is).
fn load_aux(bytes: &[u8]) -> Result<(), String> {
    let saved = def::decode(bytes).map_err(|e| e.0.to_string())?;
    let mut loaded: Store = Store::default();
    for (name, words) in saved {
        let refs: Vec<&[u8]> = words.iter().map(|w| &w[..]).collect();
        let tracking = tracking_of(&name);
        let policy = match make(&name, &refs, tracking.clone()) {
            Ok(p) => p,
            Err(e) => {
                let why = e.to_string();
                redis_module::logging::log_warning(format!(
                    "ratelimit: policy '{}' could not be read ({why}): kept as it was; \
                     RL.HIT under it answers an error until it is set again",
                    lossy(&name)
                ));
                Policy {
                    name: name.clone().into(),
                    digest: def::digest(refs.iter().copied()),
                    words,
                    members: Err(why),
                    tracking,
                }
            }
        };
        loaded.insert(name.into(), Arc::new(policy));
    }
    *store() = loaded;
    Ok(())
}

/// At the start of an AOF rewrite: without an RDB preamble (`aof-use-rdb-preamble no`) the
/// rewritten AOF cannot hold the policies (a module's aux data goes only in RDBs), so the
/// log says which would be missing after a restart from it.
pub fn on_aof_rewrite(ctx: &Context) {
    let names: Vec<String> = store().keys().map(|n| lossy(n)).collect();
    if names.is_empty() || crate::rm::server::aof_rdb_preamble(ctx) {
        return;
    }
    ctx.log_warning(&format!(
        "ratelimit: this AOF rewrite has no RDB preamble (aof-use-rdb-preamble no), which \
         alone can hold the policies: a restart from it would have none of {} \
         ({}); set aof-use-rdb-preamble yes, or set them again after such a restart",
        names.len(),
        names.join(", ")
    ));
}

/// At the start of a load (an RDB, the AOF, a full sync): the dataset's policies replace
/// the server's, so none is left from before.
pub fn clear() {
    store().clear();
}

// ---------------------------------------------------------------------------------------
// INFO.

/// A policy's figures for `INFO ratelimit`.
pub struct Figures {
    pub name: String,
    pub digest: String,
    pub limiters: usize,
    pub allowed: u64,
    pub refused: u64,
    pub errors: u64,
    pub units: u64,
}

/// Every policy's figures, by name.
pub fn figures() -> Vec<Figures> {
    let store = store();
    let mut all: Vec<Figures> = store
        .values()
        .map(|p| Figures {
            name: lossy(&p.name),
            digest: p.digest.clone(),
            limiters: p.members.as_ref().map_or(0, Vec::len),
            allowed: p.tracking.allowed.load(Relaxed),
            refused: p.tracking.refused.load(Relaxed),
            errors: p.tracking.errors.load(Relaxed),
            units: p.tracking.units.load(Relaxed),
        })
        .collect();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all
}

// ---------------------------------------------------------------------------------------
// RL.POLICY SET / GET / DEL / LIST.

const NAME: meta::Arg = meta::arg("name", ArgKind::String);

/// `RL.POLICY SET name limiter [limiter ...]`.
pub struct Set;

static SET_INFO: Info = Info {
    name: "RL.POLICY|SET",
    event: c"rl.policy",
    summary: "Keeps a policy under a name: one or more limiters, each a name, then a kind's keyword and its parameters and options as RL.ALL takes them (a limiter whose words give no COST takes each RL.HIT's). Set again, it holds from the next call, the keys keeping their history",
    complexity: "O(N) in the definition's words",
    arity: -6,
    keys: Keys::None,
    flags: "write deny-oom",
    categories: "write slow",
    own_category: true,
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
        let words: Vec<&[u8]> = args
            .get(3..)
            .unwrap_or_default()
            .iter()
            .map(Arg::as_bytes)
            .collect();
        let name = name.as_bytes();
        let policy = make(name, &words, tracking_of(name))?;
        put(policy, !applying_decided(ctx))?;
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
    summary: "Deletes a policy: 1, or 0 when there was none. Its keys are left to expire",
    complexity: "O(1)",
    arity: 3,
    keys: Keys::None,
    flags: "write",
    categories: "write fast",
    own_category: true,
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
        let gone = store().remove(name.as_bytes()).is_some();
        if gone {
            crate::rm::server::replicate_verbatim(ctx);
        }
        ctx.reply(Ok(RedisValue::Integer(i64::from(gone))));
        Ok(Answer::Written(true))
    }
}

/// `RL.POLICY LIST`.
pub struct List;

static LIST_INFO: Info = Info {
    name: "RL.POLICY|LIST",
    event: c"rl.policy",
    summary: "Every policy by name: its name, the digest of its definition (the same definition gives the same digest on every node), and its definition",
    complexity: "O(N) in the policies' words",
    arity: 2,
    keys: Keys::None,
    flags: "readonly",
    categories: "read slow",
    own_category: true,
    args: &[],
    stats: Stats::new(),
};

impl Handler for List {
    const INFO: &'static Info = &LIST_INFO;

    fn counters() -> Option<&'static dyn Count> {
        None
    }

    fn run(ctx: &Context, _args: &[Arg]) -> Result<Answer, Error> {
        let mut policies: Vec<Arc<Policy>> = store().values().cloned().collect();
        policies.sort_by(|a, b| a.name.cmp(&b.name));
        let value = RedisValue::Array(
            policies
                .iter()
                .map(|p| {
                    RedisValue::Array(vec![
                        RedisValue::StringBuffer(p.name.to_vec()),
                        RedisValue::BulkString(p.digest.clone()),
                        words_value(p),
                    ])
                })
                .collect(),
        );
        ctx.reply(Ok(value));
        Ok(Answer::Written(true))
    }
}

// ---------------------------------------------------------------------------------------
// RL.HIT.

/// `RL.HIT policy subject [COST n] [NOW ms]`.
pub struct Hit;

const HIT_OPTIONS: [Opt; 2] = [args::COST, args::NOW];

static HIT_INFO: Info = Info {
    name: "RL.HIT",
    event: c"rl.hit",
    summary: "One all-or-nothing decision under a policy's limiters, as RL.ALL decides, each on the key policy:limiter:{subject} (the subject's own hash tag when it has one). Replies with RL.ALL's five fields, the name of the limiter that refused (nil when allowed), then each limiter's fields",
    complexity: "The sum of each limiter's own command, for at most 16 limiters",
    arity: -3,
    keys: Keys::Second,
    flags: "write deny-oom",
    categories: "write slow",
    own_category: true,
    args: &[
        meta::arg("policy", ArgKind::String),
        meta::Arg {
            name: "subject",
            kind: ArgKind::Key,
            token: None,
            optional: false,
            multiple: false,
            sub: &[],
        },
        meta::COST,
        meta::NOW,
    ],
    stats: Stats::new(),
};

/// `RL.HIT`'s metadata and counters.
pub fn hit_info() -> &'static Info {
    &HIT_INFO
}

impl Handler for Hit {
    const INFO: &'static Info = &HIT_INFO;

    fn counters() -> Option<&'static dyn Count> {
        Some(&HIT_INFO.stats)
    }

    fn run(ctx: &Context, args: &[Arg]) -> Result<Answer, Error> {
        let (Some(name), Some(subject)) = (args.get(1), args.get(2)) else {
            return Err(Error::Arity);
        };
        let (mut cost, mut now) = (args::COST_DEFAULT, None);
        if let Some(rest) = args.get(3..).filter(|rest| !rest.is_empty()) {
            let mut words: SmallVec<[&[u8]; 4]> = SmallVec::new();
            for a in rest {
                words.push(a.as_bytes());
            }
            let given = args::options(&words, &HIT_OPTIONS)?;
            cost = given[0].map_or(args::COST_DEFAULT, Value::int);
            now = given[1].map(Value::int);
        }
        let Some(policy) = policy(name.as_bytes()) else {
            return Err(Error::NoPolicy(lossy(name.as_bytes())));
        };
        let members = match &policy.members {
            Ok(members) => members,
            Err(why) => return Err(Error::UnreadablePolicy(why.clone())),
        };
        let t = &policy.tracking;
        let subject = subject.as_bytes();
        match hit(ctx, &policy, members, subject, cost, now) {
            Ok(true) => {
                t.allowed.fetch_add(1, Relaxed);
                t.units.fetch_add(cost, Relaxed);
                Ok(Answer::Written(true))
            }
            Ok(false) => {
                t.refused.fetch_add(1, Relaxed);
                top::record(&t.top, subject);
                Ok(Answer::Written(false))
            }
            Err(e) => {
                t.errors.fetch_add(1, Relaxed);
                Err(e)
            }
        }
    }
}

/// Decides a hit of `cost` on the subject's keys and replies: whether it was allowed.
fn hit(
    ctx: &Context,
    policy: &Policy,
    members: &[Member],
    subject: &[u8],
    cost: u64,
    now: Option<u64>,
) -> Result<bool, Error> {
    let tagged = def::check_subject(subject)?;
    let mut owned: SmallVec<[OwnedString; ALL_INLINE]> = SmallVec::new();
    let mut key = def::Key::new();
    for m in members {
        key.clear();
        def::write_key(&policy.name, &m.name, subject, tagged, &mut key);
        owned.push(OwnedString::new(ctx, key.as_bytes()).ok_or(Error::Internal("RL.HIT"))?);
    }
    let clock = clock(ctx, now, Mode::Decide)?;
    // A policy of one limiter runs it as its own command would.
    if let ([m], [name]) = (members, owned.as_slice()) {
        if let Some(ran) = m.prepared.alone(ctx, name.arg(), cost, clock) {
            let reply = ran?;
            let d = match &reply {
                Reply::Decision(d) | Reply::Lease(d, _) => *d,
                _ => return Err(Error::Internal("RL.HIT")),
            };
            let refused_by = (!d.allowed).then_some(&m.name[..]);
            api::reply_hit(ctx, &d, refused_by, std::slice::from_ref(&reply));
            return Ok(d.allowed);
        }
    }
    let names: SmallVec<[Arg; ALL_INLINE]> = owned.iter().map(OwnedString::arg).collect();
    let frames = Frames::new();
    let mut limiters: SmallVec<[OnKey<'static, '_, '_>; ALL_INLINE]> = SmallVec::new();
    for m in members {
        limiters.push(m.prepared.spawn(&frames, cost));
    }
    let outcome = all::run_limiters(ctx, &mut limiters, &names, clock)?;
    let refused_by = outcome
        .refused_by
        .and_then(|i| members.get(i))
        .map(|m| &m.name[..]);
    api::reply_hit(ctx, &outcome.decision, refused_by, &outcome.entries);
    Ok(outcome.decision.allowed)
}

/// The sketch of who a policy refuses, for `RL.TOP`.
pub fn tracking(name: &[u8]) -> Result<Arc<Tracking>, Error> {
    store()
        .get(name)
        .map(|p| p.tracking.clone())
        .ok_or_else(|| Error::NoPolicy(lossy(name)))
}
