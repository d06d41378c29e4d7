//! Policies: limits kept in the server under a name (`RL.POLICY SET/GET/DEL/LIST`, see
//! [`commands`]), and `RL.HIT policy subject` ([`hit`]), one all-or-nothing decision under a
//! policy's limiters, each on a key derived from the subject (`core::policy::key_for`);
//! `RL.TOP` ([`top`]), who they refuse most.
//!
//! A policy is server state, like a Redis Function: saved in the RDB's aux data (before the
//! keys), in the AOF as the `RL.POLICY SET/DEL` calls that made it, and in AOF rewrites
//! through the RDB preamble, or without one as `RL.POLICY SET` lines written with the first
//! key of the module's type (see [`aof_commands`]); replicated as those calls; never
//! evicted. A server holds at most `core::policy::MAX_POLICIES`, whatever way they come, so
//! that every state it accepts loads back.
//!
//! Each limiter is parsed once, when the policy is set, and put in each hit's frames as a
//! limiter of `RL.ALL`'s (see `limiters::Prepared`): a hit parses nothing but its own options.
//! A policy set again holds from the next call: the keys keep their history, and each
//! limiter's state is reshaped to the new parameters as its own command would (the way a
//! client changing its numbers changes them); a limiter set as another kind starts on keys
//! of its own (the kind is in the key). Its counters and its sketch of who is refused carry
//! over, and each limiter's units by its name.
//!
//! Memory: a policy takes its definition (its words in one allocation, each limiter parsed),
//! its counters, and, from its first refusal, its sketch for `RL.TOP`; [`MAX_BYTES`] bounds
//! them all at the caps.

pub mod commands;
pub mod compact;
pub mod hit;
pub mod top;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};

use super::limiters::{self as all, Prepared, Shadow, ALL_MAX_KEYS};

/// The most limiters a policy has: as many as `RL.ALL` takes keys.
const MAX_LIMITERS: usize = ALL_MAX_KEYS as usize;

/// What marks a shadow limiter (after its words), or every limiter (before the first).
const SHADOW: &[u8] = b"SHADOW";
/// What starts a policy's penalty clause (before the first limiter).
const PENALTY: &[u8] = b"PENALTY";
/// What makes a policy compact (before the first limiter): its subjects in families.
const COMPACT: &[u8] = b"COMPACT";

/// Whether `word` is a word of the policy grammar between limiters (what a new limiter
/// may not be named).
fn policy_word(word: &[u8]) -> bool {
    word.eq_ignore_ascii_case(SHADOW)
        || word.eq_ignore_ascii_case(PENALTY)
        || word.eq_ignore_ascii_case(COMPACT)
}

/// A policy's definition, parsed: its limiters, and its penalty clause, if any.
struct Definition {
    members: Vec<Member>,
    penalty: Option<penalty::Params>,
    compact: bool,
}
use super::top as sketch;
use crate::core::args::lossy;
use crate::core::error::Error;
use crate::core::kind::Rate;
use crate::core::policy::{self as def, Name, Words, MAX_POLICIES, MAX_WORD, MAX_WORDS};
use crate::kinds::family;
use crate::kinds::penalty::{self, Penalty};
use crate::rm::datatype::Aux;

/// One limiter of a policy: its name (in its keys), its kind's keyword (in its keys too),
/// and the limiter, parsed.
struct Member {
    name: Box<[u8]>,
    kind: &'static str,
    prepared: Box<dyn Prepared>,
    /// A shadow limiter (`SHADOW`): it never refuses a hit (see `limiters::Shadow`).
    shadow: bool,
}

impl Member {
    /// Its key for `subject` under policy `policy` (`tagged`: the subject has a hash tag),
    /// as `RL.HIT` derives it.
    fn key(
        &self,
        ctx: &redis_module::Context,
        policy: &[u8],
        subject: &[u8],
        tagged: bool,
    ) -> Result<crate::rm::api::OwnedString, Error> {
        let mut key = def::Key::new();
        def::write_key(
            policy,
            &self.name,
            self.kind.as_bytes(),
            subject,
            tagged,
            &mut key,
        );
        crate::rm::api::OwnedString::new(ctx, key.as_bytes())
            .ok_or_else(|| Error::Internal("RL.POLICY"))
    }
}

/// A policy: its definition, and what it counts (`INFO ratelimit`) and who it refuses
/// (`RL.TOP`), in memory only, taken over by the policy that replaces it. What `INFO`
/// reads of each policy sits together (the name in the store's own table, the counters
/// here), so that a walk over a thousand of them stays short.
pub struct Policy {
    name: Name,
    digest: u64,
    allowed: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    /// Units each limiter's allowed hits took (its own `COST`, or each hit's), in the
    /// limiters' order, saturating (inline, beside the other counters).
    units: [AtomicU64; MAX_LIMITERS],
    /// How many limiters it has (0 for a definition a load could not read).
    limiters: usize,
    /// Made at the first refusal.
    top: sketch::Shared,
    /// Its shadow limiters (none for most policies).
    shadow: Shadow,
    /// Hits a shadow limiter would have refused (allowed or not by the enforced ones), and
    /// how many each shadow limiter would have refused, in the limiters' order.
    would_refuse: AtomicU64,
    shadow_refused: [AtomicU64; MAX_LIMITERS],
    /// Who the shadow limiters would refuse, for `RL.TOP ... SHADOW`: made at the first.
    shadow_top: sketch::Shared,
    /// Its penalty clause (`PENALTY`), if any; the bans it started, the hits it refused
    /// (banned), and who it banned most, for `RL.TOP ... BANNED`.
    penalty: Option<penalty::Params>,
    bans: AtomicU64,
    banned: AtomicU64,
    ban_top: sketch::Shared,
    /// A compact policy's: its limiters as its families name them (`kinds::family`).
    layout: Option<family::Layout>,
    /// Its definition as written: what `RL.POLICY GET` answers and the RDB keeps.
    words: Words,
    /// Its limiters; why not, for a definition a load could not read (kept as it was).
    members: Result<Box<[Member]>, String>,
}

impl Policy {
    /// Whether its subjects are kept in families (`COMPACT`): a definition a load could not
    /// read is taken for compact when its words say so.
    pub fn compact(&self) -> bool {
        self.layout.is_some()
            || (self.members.is_err()
                && self
                    .words
                    .iter()
                    .take_while(|w| all::spec_named(w).is_none())
                    .any(|w| w.eq_ignore_ascii_case(COMPACT)))
    }

    /// Counts `units` taken by the limiter at `i`.
    fn took(&self, i: usize, units: u64) {
        if let (Some(u), 1..) = (self.units.get(i), units) {
            let _ = u.fetch_update(Relaxed, Relaxed, |u| Some(u.saturating_add(units)));
        }
    }

    /// The sketch of who it refuses, for `RL.TOP`.
    pub fn top(&self) -> &sketch::Shared {
        &self.top
    }

    /// The sketch of who its shadow limiters would refuse, for `RL.TOP ... SHADOW`.
    pub fn shadow_top(&self) -> &sketch::Shared {
        &self.shadow_top
    }

    /// The sketch of who its penalty banned, for `RL.TOP ... BANNED`.
    pub fn ban_top(&self) -> &sketch::Shared {
        &self.ban_top
    }

    /// Counts a hit that the shadow limiters `which` would have refused.
    fn would_have_refused(&self, which: Shadow) {
        self.would_refuse.fetch_add(1, Relaxed);
        for (i, n) in self.shadow_refused.iter().enumerate() {
            if which.has(i) {
                n.fetch_add(1, Relaxed);
            }
        }
    }

    /// Takes over what `before`, the policy this one replaces, counted: its calls, its
    /// sketch, and each limiter's units by name.
    fn take_over(&mut self, before: &Policy) {
        for (mine, theirs) in [
            (&self.allowed, &before.allowed),
            (&self.refused, &before.refused),
            (&self.errors, &before.errors),
            (&self.would_refuse, &before.would_refuse),
            (&self.bans, &before.bans),
            (&self.banned, &before.banned),
        ] {
            mine.store(theirs.load(Relaxed), Relaxed);
        }
        if let (Ok(members), Ok(old)) = (&self.members, &before.members) {
            for (i, m) in members.iter().enumerate() {
                let Some(j) = old.iter().position(|o| o.name == m.name) else {
                    continue;
                };
                for counts in [
                    (&self.units, &before.units),
                    (&self.shadow_refused, &before.shadow_refused),
                ] {
                    if let (Some(mine), Some(theirs)) = (counts.0.get(i), counts.1.get(j)) {
                        mine.store(theirs.load(Relaxed), Relaxed);
                    }
                }
            }
        }
        for (mine, theirs) in [
            (&self.top, &before.top),
            (&self.shadow_top, &before.shadow_top),
            (&self.ban_top, &before.ban_top),
        ] {
            let sketch = theirs.lock().unwrap_or_else(PoisonError::into_inner).take();
            *mine.lock().unwrap_or_else(PoisonError::into_inner) = sketch;
        }
    }
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

type Store = HashMap<Name, Arc<Policy>, BuildHasherDefault<Fnv>>;

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

/// The policy named `name`, or the error that there is none.
pub fn named(name: &[u8]) -> Result<Arc<Policy>, Error> {
    policy(name).ok_or_else(|| Error::NoPolicy(lossy(name)))
}

/// The most bytes the policies take at the caps ([`MAX_POLICIES`] of 16 limiters and
/// [`MAX_WORDS`] words, each refused once, by a shadow limiter too, and banning): each one's
/// definition (at most about 6 kB: the grammar bounds a limiter's words), its parsed
/// limiters (at most about 3 kB) and its three sketches (refused, shadow, banned: about 12
/// kB each), with the allocator's rounding. Checked by `tests/it/against_the_server.rs`
/// (`policies_at_the_caps_stay_within_their_bounds`).
pub const MAX_BYTES: usize = 48 * 1024 * 1024;

/// Parses a definition: `[SHADOW] name KIND words... [SHADOW] [name KIND words... [SHADOW]]`,
/// each limiter in `RL.ALL`'s grammar after its name, `SHADOW` after one making it a shadow
/// limiter, and before the first making every one so. An error names the limiter at fault. `strict` for a
/// client's new definition: a limiter's name must also start with a letter and not be a
/// word of the grammar (a definition made before that rule loads as it was).
fn define(words: &[&[u8]], strict: bool) -> Result<Definition, Error> {
    if words.len() > MAX_WORDS {
        return Err(Error::Invalid("a policy takes at most 256 words"));
    }
    let mut members: Vec<Member> = Vec::new();
    // A clause's keyword: followed by a kind, the word is a limiter's name instead (as a
    // definition made before the clause existed may have it).
    let clause = |at: usize, keyword: &[u8]| {
        words
            .get(at)
            .is_some_and(|w| w.eq_ignore_ascii_case(keyword))
            && words.get(at + 1).and_then(|w| all::spec_named(w)).is_none()
    };
    let marked = |at: usize| clause(at, SHADOW);
    // Before the first limiter, in any order, each at most once: `SHADOW` (every limiter
    // is a shadow one), `COMPACT` and the penalty clause.
    let (mut all_shadow, mut penalty, mut compact) = (false, None, false);
    let mut at = 0;
    loop {
        if !all_shadow && marked(at) {
            all_shadow = true;
            at += 1;
        } else if !compact && clause(at, COMPACT) {
            compact = true;
            at += 1;
        } else if penalty.is_none() && clause(at, PENALTY) {
            let rest = words.get(at + 1..).unwrap_or_default();
            let own = rest
                .get(..Penalty::GRAMMAR.extent(rest))
                .unwrap_or_default();
            penalty = Some(penalty_clause(own)?);
            at += 1 + own.len();
        } else {
            break;
        }
    }
    while let Some(&name) = words.get(at) {
        if name.eq_ignore_ascii_case(b"NOW") {
            return Err(Error::Invalid(
                "NOW is each call's (RL.HIT policy subject NOW ms), not a policy's",
            ));
        }
        let keyword = words.get(at + 1).copied();
        let spec = keyword.and_then(all::spec_named);
        // Past a limiter's options, a word that no limiter may be named, and that no kind
        // follows, is an option the limiter before does not take (as `RL.ALL` says).
        if let (Some(last), None) = (members.last(), spec) {
            if all::reserved(name) || !name.first().is_some_and(u8::is_ascii_alphabetic) {
                return Err(Error::for_limiter(
                    &last.name,
                    Error::UnknownOption(lossy(name)),
                ));
            }
        }
        def::check_name(
            "a limiter's name is 1 to 64 letters, digits and _ - . :",
            name,
        )?;
        if strict {
            def::check_new_limiter_name(name, |w| all::reserved(w) || policy_word(w))?;
        }
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
        let Some(keyword) = keyword else {
            return Err(Error::for_limiter(
                name,
                Error::Invalid("a limiter's name is followed by its kind and parameters"),
            ));
        };
        let Some(spec) = spec else {
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
        if let Some(long) = own.iter().find(|w| w.len() > MAX_WORD) {
            return Err(Error::for_limiter(
                name,
                Error::InvalidWord("a policy's words are at most 64 bytes", lossy(long)),
            ));
        }
        let prepared = (spec.prepare)(own).map_err(|e| Error::for_limiter(name, e))?;
        at += 2 + extent;
        // `SHADOW` after a limiter's words: that one is a shadow limiter.
        let shadow = marked(at);
        at += usize::from(shadow);
        members.push(Member {
            name: name.into(),
            kind: spec.keyword,
            prepared,
            shadow: shadow || all_shadow,
        });
    }
    if members.is_empty() {
        return Err(Error::Arity);
    }
    if compact {
        for m in &members {
            m.prepared
                .in_family()
                .map_err(|e| Error::for_limiter(&m.name, e))?;
        }
    }
    Ok(Definition {
        members,
        penalty,
        compact,
    })
}

/// A penalty clause's words after `PENALTY`: `refusals window_ms ban_ms [MAX ms] [HORIZON
/// ms]`, as `RL.PENALTY` takes them (each hit the enforced limiters refuse counts one).
fn penalty_clause(words: &[&[u8]]) -> Result<penalty::Params, Error> {
    let in_clause = |e: Error| Error::for_limiter(PENALTY, e);
    if Penalty::GRAMMAR.gives(words, "COST") {
        return Err(in_clause(Error::Invalid(
            "a policy's penalty counts one refusal per refused hit: no COST",
        )));
    }
    let call = Penalty::parse(words).map_err(in_clause)?;
    Ok(call.params)
}

/// Makes a policy (for `RL.POLICY SET` and a load alike: the one way in), taking over what
/// `previous` (the policy it replaces, if any) counted. `strict` as [`define`] takes it.
fn make(
    name: &[u8],
    words: &[&[u8]],
    previous: Option<&Policy>,
    strict: bool,
) -> Result<Policy, Error> {
    def::check_name(
        "a policy's name is 1 to 64 letters, digits and _ - . :",
        name,
    )?;
    let definition = define(words, strict)?;
    if let (Some(before), true) = (previous, strict) {
        if before.compact() != definition.compact {
            return Err(Error::Invalid(
                "a policy's storage does not change under its name (COMPACT or keyed): delete it first, or give the new one another name",
            ));
        }
    }
    let mut policy = unread(name, Words::new(words.iter().copied()), Ok(definition))?;
    if let Some(before) = previous {
        policy.take_over(before);
    }
    Ok(policy)
}

/// A policy of `words`, with `members` as read (or why not), counting nothing yet.
fn unread(
    name: &[u8],
    words: Words,
    definition: Result<Definition, String>,
) -> Result<Policy, Error> {
    let Some(name) = Name::new(name) else {
        return Err(Error::Internal("a policy name over 64 bytes"));
    };
    let penalty = definition.as_ref().ok().and_then(|d| d.penalty);
    let layout = match &definition {
        Ok(d) if d.compact => Some(family::Layout::new(
            d.members
                .iter()
                .map(|m| family::Limiter {
                    code: m.prepared.code(),
                    name: m.name.clone(),
                })
                .collect(),
        )),
        _ => None,
    };
    let members = definition.map(|d| d.members);
    let limiters = members.as_ref().map_or(0, Vec::len);
    let shadow = members.as_ref().map_or(Shadow::NONE, |members| {
        Shadow(
            members
                .iter()
                .enumerate()
                .filter(|(_, m)| m.shadow)
                .fold(0, |mask, (i, _)| mask | 1 << i),
        )
    });
    Ok(Policy {
        name,
        digest: def::digest(words.iter()),
        allowed: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        units: Default::default(),
        limiters,
        top: sketch::Shared::default(),
        shadow,
        would_refuse: AtomicU64::new(0),
        shadow_refused: Default::default(),
        shadow_top: sketch::Shared::default(),
        penalty,
        bans: AtomicU64::new(0),
        banned: AtomicU64::new(0),
        ban_top: sketch::Shared::default(),
        layout,
        words,
        members: members.map(Vec::into_boxed_slice),
    })
}

/// Stores `policy` in place of any of its name: an error when it is a new one and the
/// server holds the most it may, whoever asks (a definition the primary or the AOF carries
/// past the cap is refused too, so that every state held loads back).
fn put(policy: Policy) -> Result<(), Error> {
    let mut store = store();
    if store.len() >= MAX_POLICIES && !store.contains_key(&policy.name) {
        return Err(Error::TooManyPolicies(MAX_POLICIES));
    }
    store.insert(policy.name, Arc::new(policy));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Persistence: the RDB's aux data, and the AOF rewritten without an RDB preamble.

/// The hooks the type's aux data goes through.
pub fn aux() -> Aux {
    Aux {
        save: save_aux,
        load: load_aux,
        aof_commands,
    }
}

/// The policies, by name.
fn by_name(store: &Store) -> Vec<&Arc<Policy>> {
    let mut policies: Vec<&Arc<Policy>> = store.values().collect();
    policies.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    policies
}

fn save_aux(all: bool) -> Option<Vec<u8>> {
    let store = store();
    if store.is_empty() && !all {
        return None;
    }
    let mut out = Vec::new();
    def::encode(
        by_name(&store)
            .into_iter()
            .map(|p| (p.name.as_bytes(), &p.words)),
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
        let refs: Vec<&[u8]> = words.iter().collect();
        let previous = policy(&name);
        let made = make(&name, &refs, previous.as_deref(), false).or_else(|e| {
            let why = e.to_string();
            redis_module::logging::log_warning(format!(
                "ratelimit: policy '{}' could not be read ({why}): kept as it was; \
                 RL.HIT under it answers an error until it is set again",
                lossy(&name)
            ));
            let mut kept = unread(&name, words.clone(), Err(why))?;
            if let Some(before) = previous.as_deref() {
                kept.take_over(before);
            }
            Ok::<Policy, Error>(kept)
        });
        // The decoder bounds a name as a policy's (64 bytes): always made.
        if let Ok(policy) = made {
            loaded.insert(policy.name, Arc::new(policy));
        }
    }
    *store() = loaded;
    Ok(())
}

/// What an AOF rewritten without an RDB preamble (`aof-use-rdb-preamble no`) holds of the
/// policies: one `RL.POLICY SET name words...` each, by name, which the rewrite writes with
/// the first key of the module's type (a module writes to a rewritten AOF only from its
/// keys: without one, the rewrite cannot hold them, which `INFO` and the log say).
fn aof_commands() -> Vec<Vec<Vec<u8>>> {
    by_name(&store())
        .into_iter()
        .map(|p| {
            let mut words = vec![
                b"RL.POLICY".to_vec(),
                b"SET".to_vec(),
                p.name.as_bytes().to_vec(),
            ];
            words.extend(p.words.iter().map(<[u8]>::to_vec));
            words
        })
        .collect()
}

/// At the start of a load (an RDB, the AOF, a full sync): the dataset's policies replace
/// the server's, so none is left from before.
pub fn clear() {
    store().clear();
}

// ---------------------------------------------------------------------------------------
// INFO.

/// Calls `f` with each policy's figures, for `INFO ratelimit`: its name, its digest, its
/// limiters, its calls (allowed, refused, errors) and each limiter's units. In the store's
/// order, under its lock (`f` must not reach the policies).
pub fn each_figures(mut f: impl FnMut(&Figures<'_>)) {
    let store = store();
    for (name, p) in store.iter() {
        f(&Figures {
            name: name.as_bytes(),
            digest: p.digest,
            limiters: p.limiters,
            allowed: p.allowed.load(Relaxed),
            refused: p.refused.load(Relaxed),
            errors: p.errors.load(Relaxed),
            units: p.units.get(..p.limiters).unwrap_or_default(),
            shadow: p.shadow,
            penalty: p.penalty.is_some(),
            bans: p.bans.load(Relaxed),
            banned: p.banned.load(Relaxed),
            would_refuse: p.would_refuse.load(Relaxed),
            shadow_refused: p.shadow_refused.get(..p.limiters).unwrap_or_default(),
        });
    }
}

/// How many policies the server holds.
pub fn count() -> usize {
    store().len()
}

/// A policy's figures (see [`each_figures`]).
pub struct Figures<'p> {
    pub name: &'p [u8],
    pub digest: u64,
    pub limiters: usize,
    pub allowed: u64,
    pub refused: u64,
    pub errors: u64,
    units: &'p [AtomicU64],
    /// Its shadow limiters, and the hits they would have refused.
    pub shadow: Shadow,
    /// It has a penalty; the bans it started, and the hits refused by a ban.
    pub penalty: bool,
    pub bans: u64,
    pub banned: u64,
    pub would_refuse: u64,
    shadow_refused: &'p [AtomicU64],
}

impl Figures<'_> {
    /// The units each limiter took, in the definition's order.
    pub fn units(&self) -> impl Iterator<Item = u64> + '_ {
        self.units.iter().map(|u| u.load(Relaxed))
    }

    /// The hits each shadow limiter would have refused, in the definition's order (`None`
    /// for an enforced one).
    pub fn shadow_refused(&self) -> impl Iterator<Item = Option<u64>> + '_ {
        let shadow = self.shadow;
        (self.shadow_refused.iter().enumerate())
            .map(move |(i, n)| shadow.has(i).then(|| n.load(Relaxed)))
    }
}
