//! What the module writes, it reads back, through a real server: a few thousand random calls
//! of every command (edge values as in `src/roundtrip.rs`) on a primary with a replica and
//! an AOF, then every way a dataset comes back must give the same dataset:
//! - a replica, after `WAIT`, several times during the run and at the end;
//! - `DEBUG RELOAD` (an RDB saved and loaded);
//! - `BGREWRITEAOF` then `DEBUG LOADAOF` (the rewritten AOF: `RL.RESTORE` and `PEXPIREAT`);
//! - `DUMP`/`RESTORE` and `COPY` of each key;
//! - `SHUTDOWN SAVE` and a restart;
//! - a second replica started afterwards (a full sync);
//! - then more calls on those keys, which both replicas follow, with as many parameter sets
//!   in use (`ratelimit_param_sets`) on every server.
//!
//! "The same" is `DEBUG DIGEST`, `DBSIZE`, and each key's `DEBUG DIGEST-VALUE` and
//! `PEXPIRETIME` (the digest says whether a key has an expiry, not when). Every call gets a
//! reply, an error reply included (they are counted); never a dropped connection.
//!
//! Every `NOW` is half a day or more ahead of the real clock, so no key expires in real time
//! while the test runs (a replica does not expire keys by itself: that would make digests
//! differ for a reason that is not the module's). Times start from a base a day or more
//! ahead at a multiple of every window and resolution, so that a run's replies do not depend
//! on when it runs; the last tenth of the first calls run near the largest time a call
//! takes. `ROUNDTRIP_CALLS` (default 3000, then a fifth more) and `ROUNDTRIP_SEED` (default
//! 1) choose the run; a failure names the keys that differ and the last calls on them.

mod common;

use std::collections::BTreeMap;
use std::time::Instant;

use common::{info_field, run, text, wait_until, Server};
use redis::{Connection, ConnectionLike, Value};

const DAY: i64 = 86_400_000;
const DAY31: u64 = 31 * 86_400_000;
const SEQ_END: u64 = (1 << 63) - 1;
const U32_MAX: u64 = u32::MAX as u64;
/// The largest time a call takes (9999-12-31).
const MAX_TIMESTAMP: u64 = 253_402_300_799_999;
const I32_MAX: u64 = i32::MAX as u64;
/// Keys the calls pick from, `k0` to `k15`; `kN` is of kind `N % 6`.
const KEYS: usize = 16;
/// A primary's arguments: an AOF, and a replica synced at once (not after 5 s).
const PRIMARY: [&str; 4] = ["--appendonly", "yes", "--repl-diskless-sync-delay", "0"];

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator (xorshift64*), as in tests/fuzz.rs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<T: Copy>(&mut self, options: &[T]) -> T {
        options[self.below(options.len())]
    }

    /// True once in `n`.
    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
}

/// A word of a call, its times relative to the run's base time, so that a report shows a
/// call the same whenever it ran.
#[derive(Clone, Debug, PartialEq)]
enum W {
    Lit(String),
    /// A time: base + offset.
    At(i64),
    /// A lease id of the server's form, `<base + offset>-<seq>`.
    Id(i64, u64),
}

type Call = Vec<W>;

fn lit(s: impl Into<String>) -> W {
    W::Lit(s.into())
}

fn render(call: &Call, base: u64) -> Vec<String> {
    let at = |dt: i64| base.checked_add_signed(dt).expect("a time after 1970");
    call.iter()
        .map(|w| match w {
            W::Lit(s) => s.clone(),
            W::At(dt) => at(*dt).to_string(),
            W::Id(dt, seq) => format!("{}-{seq}", at(*dt)),
        })
        .collect()
}

/// A call as it reads in a report: times as `T+dt`, a long id by its length.
fn show(call: &Call) -> String {
    let t = |dt: i64| match dt {
        0 => "T".to_string(),
        dt if dt > 0 => format!("T+{dt}"),
        dt => format!("T{dt}"),
    };
    call.iter()
        .map(|w| match w {
            W::Lit(s) if s.len() > 40 => format!("{}*{}", &s[..1], s.len()),
            W::Lit(s) => s.clone(),
            W::At(dt) => t(*dt),
            W::Id(dt, seq) => format!("<{}>-{seq}", t(*dt)),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// An id the server made (or of its form) as a word relative to `base`.
fn id_word(id: &str, base: u64) -> W {
    let canonical = |s: &str| s.parse::<u64>().ok().filter(|v| v.to_string() == s);
    match id
        .split_once('-')
        .map(|(ms, seq)| (canonical(ms), canonical(seq)))
    {
        Some((Some(ms), Some(seq))) => W::Id(ms as i64 - base as i64, seq),
        _ => lit(id),
    }
}

/// The calls of a run, made from the generator's picks and the replies so far (lease ids
/// the server made).
struct Gen {
    rng: Rng,
    /// The time of the next call, relative to the base.
    t: i64,
    /// Lease ids granted on each key, newest last.
    held: Vec<Vec<W>>,
    /// Costs of 0 to 2 only: an `RL.ALL` over many keys that may be allowed.
    tame: bool,
    /// The latest time calls go to: 31 days before the largest time a call takes.
    end: i64,
}

const KINDS: [&str; 6] = ["SLIDE", "TOKEN", "LEAKY", "FIXED", "SUBWIN", "ACQUIRE"];

impl Gen {
    /// A key: mostly one of the first six (one of each kind), so that each sees many calls.
    fn key(&mut self) -> usize {
        if self.rng.below(9) < 8 {
            self.rng.below(6)
        } else {
            self.rng.below(KEYS)
        }
    }

    /// A key's kind: its number's, now and then another (a call of the wrong kind, see
    /// [`Gen::spec`]).
    fn kind(&mut self, key: usize) -> usize {
        if self.rng.one_in(50) {
            self.rng.below(6)
        } else {
            key % 6
        }
    }

    /// A step of time: mostly on, sometimes a minute or 31 days ahead, or an hour behind
    /// (never less than half a day ahead of the real clock).
    fn step(&mut self) {
        let dt = match self.rng.below(100) {
            0..=54 => self.rng.below(3) as i64,
            55..=92 => self.rng.below(2000) as i64,
            93..=95 => 60_000,
            96..=97 => DAY31 as i64,
            _ => -3_600_000,
        };
        self.t = (self.t + dt).clamp(-DAY / 2, self.end);
    }

    /// Near the largest time a call takes, as `src/roundtrip.rs` goes.
    fn jump_to_the_end_of_time(&mut self) {
        self.t = self.end - 1000 + self.t.rem_euclid(1000);
    }

    /// ` COST n` among the edges of `limit` (small when [`Gen::tame`]), nothing for the
    /// default of 1.
    fn cost(&mut self, limit: u64) -> Vec<W> {
        let cost = match self.rng.below(6) {
            _ if self.tame => self.rng.pick(&[0, 1, 1, 2]),
            0 => 0,
            1 => 1,
            2 => limit,
            3 => limit + 1,
            4 => SEQ_END,
            _ => 2,
        };
        match cost {
            1 if self.rng.one_in(2) => vec![],
            c => vec![lit("COST"), lit(c.to_string())],
        }
    }

    /// A lease id among the edges, or one the key was granted; `None`: no id.
    fn lease_id(&mut self, key: usize) -> Option<W> {
        let t = self.t;
        Some(match self.rng.below(10) {
            0 | 1 => return None,
            2 => lit("a"),
            3 => lit("x".repeat(512)),
            4 => W::Id(t, SEQ_END),
            5 => W::Id(t, SEQ_END - 1),
            6 => W::Id(t + 1, 0),
            7 => W::Id(t - 1, 0),
            8 => W::Id(t + 5, 7),
            _ => {
                let held = &self.held[key];
                return (!held.is_empty()).then(|| held[self.rng.below(held.len())].clone());
            }
        })
    }

    /// A limiter's words after its key, as its own command and `RL.ALL` take them (the
    /// kind's name first, as `RL.ALL` spells it).
    fn spec(&mut self, kind: usize, key: usize) -> Call {
        let r = &mut self.rng;
        let mut words = vec![lit(KINDS[kind])];
        let limit = match kind {
            0 => {
                let (base_limit, base_window) =
                    (r.pick(&[1, 2, 10, U32_MAX]), r.pick(&[1, 2, 1000, DAY31]));
                let mut limit = 0;
                for w in 0..1 + r.below(3) as u64 {
                    limit = (base_limit + w).min(U32_MAX);
                    let window = base_window.saturating_sub(w).max(1);
                    words.extend([lit(limit.to_string()), lit(window.to_string())]);
                }
                limit
            }
            1 | 2 => {
                let limit = r.pick(&[1, 10, I32_MAX]);
                let window = r.pick(&[1, 1000, DAY31]);
                words.extend([lit(limit.to_string()), lit(window.to_string())]);
                if kind == 2 {
                    match r.below(3) {
                        0 => {}
                        1 => words.extend([lit("MAXDELAY"), lit("0")]),
                        _ => words.extend([lit("MAXDELAY"), lit(DAY31.to_string())]),
                    }
                }
                match r.below(3) {
                    0 => {}
                    1 => words.extend([lit("BURST"), lit("1")]),
                    _ => words.extend([lit("BURST"), lit(I32_MAX.to_string())]),
                }
                limit
            }
            3 => {
                let limit = r.pick(&[1, 10, U32_MAX]);
                let window = r.pick(&[1, 1000, DAY31]);
                words.extend([lit(limit.to_string()), lit(window.to_string())]);
                if r.one_in(2) {
                    words.push(lit("ALIGN"));
                }
                limit
            }
            4 => {
                let limit = r.pick(&[1, 10, I32_MAX]);
                let (window, res) = r.pick(&[
                    (1, 1),
                    (4096, 1),
                    (1000, 10),
                    (DAY31, DAY31 / 4000),
                    (60000, 60000),
                ]);
                words.extend([
                    lit(limit.to_string()),
                    lit(window.to_string()),
                    lit(res.to_string()),
                ]);
                limit
            }
            _ => {
                let limit = r.pick(&[1, 10, 1_000_000_000]);
                let lease = r.pick(&[1, 1000, DAY31]);
                words.extend([lit(limit.to_string()), lit(lease.to_string())]);
                if let Some(id) = self.lease_id(key) {
                    words.extend([lit("ID"), id]);
                }
                limit
            }
        };
        if kind == key % 6 {
            words.extend(self.cost(limit));
        } else {
            // A call of another kind: an error on the key, or nothing made where there is
            // none (the key stays of its own kind).
            words.extend([lit("COST"), lit("0")]);
        }
        words
    }

    /// The next call, at the next time.
    fn call(&mut self) -> Call {
        self.step();
        let key = self.key();
        let name = lit(format!("k{key}"));
        let call = match self.rng.below(12) {
            0..=5 => {
                // One limiter, as its own command (mostly) or as RL.ALL of one key; or two.
                let kind = self.kind(key);
                let spec = self.spec(kind, key);
                match self.rng.below(8) {
                    0 => all(&[(key, spec)]),
                    1 | 2 => {
                        let other = self.key();
                        if other == key {
                            return self.finish(all(&[(key, spec)]));
                        }
                        let kind = self.kind(other);
                        let second = self.spec(kind, other);
                        all(&[(key, spec), (other, second)])
                    }
                    _ => {
                        let mut call = vec![lit(format!("RL.{}", KINDS[kind])), name];
                        call.extend(spec.into_iter().skip(1));
                        call
                    }
                }
            }
            6 => {
                // RL.ALL over 2 to 16 keys of the whole keyspace.
                let n = 2 + self.rng.below(KEYS - 1);
                let mut keys: Vec<usize> = (0..KEYS).collect();
                for i in 0..n {
                    let j = i + self.rng.below(KEYS - i);
                    keys.swap(i, j);
                }
                keys.truncate(n);
                if self.rng.one_in(20) {
                    keys[n - 1] = keys[0]; // the same key twice: an error
                }
                self.tame = self.rng.one_in(2);
                let specs: Vec<(usize, Call)> = keys
                    .into_iter()
                    .map(|k| {
                        let kind = self.kind(k);
                        (k, self.spec(kind, k))
                    })
                    .collect();
                self.tame = false;
                all(&specs)
            }
            7 => {
                let units = self.rng.pick(&[0, 1, 7, 1 << 20, U32_MAX, SEQ_END]);
                vec![lit("RL.CHARGE"), name, lit("COST"), lit(units.to_string())]
            }
            8 => {
                let mut call = vec![lit("RL.REFUND"), name];
                match self.rng.pick(&[1, 2, 1 << 20, SEQ_END]) {
                    1 if self.rng.one_in(2) => {}
                    units => call.extend([lit("COST"), lit(units.to_string())]),
                }
                call
            }
            9 => {
                let mut call = vec![lit("RL.PEEK"), name];
                if self.rng.one_in(2) {
                    let limit = self.rng.pick(&[1, 10, U32_MAX]);
                    call.extend(self.cost(limit));
                }
                call
            }
            command => {
                // Mostly on the keys of leases.
                let key = match self.rng.below(10) {
                    0 => key,
                    _ => self.rng.pick(&[5, 5, 5, 11]),
                };
                let name = lit(format!("k{key}"));
                // Mostly a lease the key was granted.
                let held = &self.held[key];
                let id = match self.rng.below(10) {
                    0..=3 if !held.is_empty() => held[held.len() - 1].clone(),
                    4 | 5 if !held.is_empty() => held[self.rng.below(held.len())].clone(),
                    _ => self.lease_id(key).unwrap_or_else(|| lit("a")),
                };
                let mut call = vec![lit(["RL.RELEASE", "RL.EXTEND"][command - 10]), name, id];
                if command == 11 {
                    call.push(lit(self.rng.pick(&[1, 1000, DAY31]).to_string()));
                }
                call
            }
        };
        self.finish(call)
    }

    /// The call at the current time.
    fn finish(&self, mut call: Call) -> Call {
        call.extend([lit("NOW"), W::At(self.t)]);
        call
    }

    /// Remembers the lease ids a reply granted.
    fn granted(&mut self, call: &Call, reply: &Value, base: u64) {
        let W::Lit(command) = &call[0] else { return };
        let id_of = |fields: &[Value]| match fields.get(5) {
            Some(Value::BulkString(id)) => Some(String::from_utf8_lossy(id).into_owned()),
            _ => None,
        };
        let Value::Array(fields) = reply else { return };
        let mut grants = Vec::new();
        if command == "RL.ACQUIRE" {
            if let (Some(id), W::Lit(key)) = (id_of(fields), &call[1]) {
                grants.push((key.clone(), id));
            }
        } else if command == "RL.ALL" {
            for (i, entry) in fields.iter().skip(5).enumerate() {
                if let (Value::Array(entry), Some(W::Lit(key))) = (entry, call.get(2 + i)) {
                    if let Some(id) = id_of(entry) {
                        grants.push((key.clone(), id));
                    }
                }
            }
        }
        for (key, id) in grants {
            let Some(k) = key.strip_prefix('k').and_then(|k| k.parse::<usize>().ok()) else {
                continue;
            };
            let held = &mut self.held[k];
            let id = id_word(&id, base);
            if !held.contains(&id) {
                held.push(id);
            }
            if held.len() > 16 {
                held.remove(0);
            }
        }
    }
}

/// `RL.ALL numkeys key... spec...`.
fn all(specs: &[(usize, Call)]) -> Call {
    let mut call = vec![lit("RL.ALL"), lit(specs.len().to_string())];
    call.extend(specs.iter().map(|(k, _)| lit(format!("k{k}"))));
    for (_, spec) in specs {
        call.extend(spec.iter().cloned());
    }
    call
}

/// Sends `call` and returns its reply, an error reply included; panics when the server
/// gives none (a dropped connection).
fn send(c: &mut Connection, call: &Call, base: u64, what: &str) -> Value {
    let words = render(call, base);
    let mut cmd = redis::cmd(&words[0]);
    for w in &words[1..] {
        cmd.arg(w);
    }
    c.req_command(&cmd)
        .unwrap_or_else(|e| panic!("{what}: {}: no reply: {e}", show(call)))
}

/// An error's kind: its text with numbers and key names blanked out.
fn error_kind(reply: &Value) -> Option<String> {
    let Value::ServerError(e) = reply else {
        return None;
    };
    if e.code() == "WRONGTYPE" {
        return Some("WRONGTYPE".to_string());
    }
    let details = e.details().unwrap_or("");
    let details = details.split(" (key '").next().unwrap_or(details);
    let kind = format!("{} {details}", e.code())
        .split(|ch: char| ch.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("#");
    Some(kind.chars().take(72).collect())
}

/// What must come back: the dataset's digest, and each key's digest and absolute expiry.
#[derive(Debug, PartialEq)]
struct State {
    digest: String,
    dbsize: i64,
    keys: BTreeMap<String, (String, i64)>,
}

fn state(c: &mut Connection) -> State {
    let names: Vec<String> = redis::cmd("KEYS").arg("*").query(c).expect("KEYS");
    let keys = names
        .into_iter()
        .map(|k| {
            let d: Vec<String> = redis::cmd("DEBUG")
                .arg("DIGEST-VALUE")
                .arg(&k)
                .query(c)
                .expect("DEBUG DIGEST-VALUE");
            let at: i64 = redis::cmd("PEXPIRETIME")
                .arg(&k)
                .query(c)
                .expect("PEXPIRETIME");
            (k, (d.concat(), at))
        })
        .collect();
    State {
        digest: text(c, &["DEBUG", "DIGEST"]),
        dbsize: redis::cmd("DBSIZE").query(c).expect("DBSIZE"),
        keys,
    }
}

/// What differs between two states: `None` when they are the same.
fn difference(want: &State, got: &State) -> Option<String> {
    if want == got {
        return None;
    }
    let mut out = format!(
        "DEBUG DIGEST {} -> {}, DBSIZE {} -> {}",
        want.digest, got.digest, want.dbsize, got.dbsize
    );
    for (k, w) in &want.keys {
        match got.keys.get(k) {
            None => out += &format!("\n  {k}: missing (was {w:?})"),
            Some(g) if g != w => out += &format!("\n  {k}: {w:?} -> {g:?}"),
            _ => {}
        }
    }
    for k in got.keys.keys().filter(|k| !want.keys.contains_key(*k)) {
        out += &format!("\n  {k}: new");
    }
    Some(out)
}

/// The calls that named a key among `keys`, the last `n` of them, as a report shows them.
fn calls_on(log: &[Call], keys: &[String], n: usize) -> String {
    let on: Vec<String> = log
        .iter()
        .enumerate()
        .filter(|(_, call)| {
            call.iter()
                .any(|w| matches!(w, W::Lit(s) if keys.contains(s)))
        })
        .map(|(i, call)| format!("  #{i}: {}", show(call)))
        .collect();
    on[on.len().saturating_sub(n)..].join("\n")
}

/// Checks that `got` equals `want` after `step`; on a difference, fails with it and the
/// last calls on the keys that differ.
fn check(step: &str, want: &State, got: &State, log: &[Call]) {
    if let Some(diff) = difference(want, got) {
        let keys: Vec<String> = want
            .keys
            .iter()
            .filter(|(k, v)| got.keys.get(*k) != Some(v))
            .map(|(k, _)| k.clone())
            .chain(
                got.keys
                    .keys()
                    .filter(|k| !want.keys.contains_key(*k))
                    .cloned(),
            )
            .collect();
        panic!(
            "{step}: the dataset differs: {diff}\nthe last calls on {keys:?} (T = the run's base time):\n{}",
            calls_on(log, &keys, 40)
        );
    }
}

/// Waits until `n` replicas have everything the primary sent.
fn wait_replicas(p: &mut Connection, n: i64) {
    let acked: i64 = redis::cmd("WAIT").arg(n).arg(5000).query(p).expect("WAIT");
    assert_eq!(
        acked, n,
        "WAIT {n} 5000: only {acked} replicas acknowledged"
    );
}

fn rewriting(c: &mut Connection) -> bool {
    let info = text(c, &["INFO", "persistence"]);
    !(info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0"))
}

fn server_ms(c: &mut Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(c).expect("TIME");
    secs * 1000 + micros / 1000
}

/// The calls made so far, and what they answered.
struct Run {
    gen: Gen,
    base: u64,
    log: Vec<Call>,
    /// Errors by command and kind.
    errors: BTreeMap<String, usize>,
    /// Replies by command: 1 (allowed), 0 (refused), and others (nil, errors).
    outcomes: BTreeMap<String, [usize; 3]>,
}

impl Run {
    /// Makes `n` calls on the primary, checking `replicas` after each quarter (not after the
    /// last: the caller checks then); the last tenth of them near the end of time when
    /// `to_the_end` says so.
    fn calls(
        &mut self,
        p: &mut Connection,
        n: usize,
        replicas: &mut [&mut Connection],
        to_the_end: bool,
    ) {
        for i in 0..n {
            if to_the_end && i == n - n / 10 {
                self.gen.jump_to_the_end_of_time();
            }
            let call = self.gen.call();
            let at = self.log.len();
            let reply = send(p, &call, self.base, &format!("call #{at}"));
            let first = match &reply {
                Value::Array(fields) => fields.first(),
                _ => None,
            };
            let command = show(&call[..1].to_vec());
            let counts = self.outcomes.entry(command.clone()).or_default();
            match first {
                Some(Value::Int(1)) => counts[0] += 1,
                Some(Value::Int(0)) => counts[1] += 1,
                _ => counts[2] += 1,
            }
            match error_kind(&reply) {
                Some(kind) => *self.errors.entry(format!("{command}: {kind}")).or_default() += 1,
                None => self.gen.granted(&call, &reply, self.base),
            }
            self.log.push(call);
            if (i + 1) % (n / 4).max(1) == 0 && i + 1 < n {
                wait_replicas(p, replicas.len() as i64);
                let want = state(p);
                for r in replicas.iter_mut() {
                    check(
                        &format!("a replica after call #{at}"),
                        &want,
                        &state(r),
                        &self.log,
                    );
                }
            }
        }
    }
}

#[test]
fn every_state_survives_every_way_back() {
    let started = Instant::now();
    let calls = env("ROUNDTRIP_CALLS", 3000) as usize;
    let mut primary = Server::start(&PRIMARY);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    // A day or more ahead, at a multiple of every window and resolution (124 days): a seed
    // makes the same calls, which get the same replies, in every run.
    let base = (server_ms(&mut p) + DAY as u64).next_multiple_of(4 * DAY31);
    let mut run_ = Run {
        gen: Gen {
            rng: Rng(env("ROUNDTRIP_SEED", 1).max(1)),
            t: 0,
            held: vec![Vec::new(); KEYS],
            tame: false,
            end: (MAX_TIMESTAMP - DAY31 - base) as i64,
        },
        base,
        log: Vec::with_capacity(calls),
        errors: BTreeMap::new(),
        outcomes: BTreeMap::new(),
    };
    run_.calls(&mut p, calls, &mut [&mut r], true);
    // The replica.
    wait_replicas(&mut p, 1);
    let want = state(&mut p);
    check("the replica at the end", &want, &state(&mut r), &run_.log);

    // An RDB saved and loaded.
    run(&mut p, &["DEBUG", "RELOAD"]).expect("DEBUG RELOAD answers OK");
    check("DEBUG RELOAD", &want, &state(&mut p), &run_.log);

    // The AOF rewritten, then loaded.
    wait_until("no AOF rewrite", 30, || !rewriting(&mut p));
    run(&mut p, &["BGREWRITEAOF"]).expect("BGREWRITEAOF");
    wait_until("the AOF rewrite", 30, || !rewriting(&mut p));
    let info = text(&mut p, &["INFO", "persistence"]);
    assert!(info.contains("aof_last_bgrewrite_status:ok"), "{info}");
    run(&mut p, &["DEBUG", "LOADAOF"]).expect("DEBUG LOADAOF answers OK");
    check(
        "BGREWRITEAOF and DEBUG LOADAOF",
        &want,
        &state(&mut p),
        &run_.log,
    );

    // DUMP and RESTORE (with the same absolute expiry), and COPY, of each key.
    for (key, (digest, at)) in &want.keys {
        let dump: Vec<u8> = redis::cmd("DUMP").arg(key).query(&mut p).expect("DUMP");
        let (restored, copied) = (format!("restored:{key}"), format!("copied:{key}"));
        let mut restore = redis::cmd("RESTORE");
        restore.arg(&restored).arg((*at).max(0)).arg(dump);
        if *at > 0 {
            restore.arg("ABSTTL");
        }
        restore
            .query::<()>(&mut p)
            .unwrap_or_else(|e| panic!("RESTORE of {key}'s DUMP: {e}"));
        let copy: i64 = redis::cmd("COPY")
            .arg(key)
            .arg(&copied)
            .query(&mut p)
            .expect("COPY");
        assert_eq!(copy, 1, "COPY {key} {copied}");
        let now = state(&mut p);
        for name in [&restored, &copied] {
            assert_eq!(
                now.keys.get(name),
                Some(&(digest.clone(), *at)),
                "{name}: DEBUG DIGEST-VALUE and PEXPIRETIME, against {key}'s; the last calls on {key}:\n{}",
                calls_on(&run_.log, std::slice::from_ref(key), 40)
            );
        }
        let deleted: i64 = redis::cmd("DEL")
            .arg(&restored)
            .arg(&copied)
            .query(&mut p)
            .expect("DEL");
        assert_eq!(deleted, 2);
    }
    check(
        "DUMP/RESTORE and COPY (deleted)",
        &want,
        &state(&mut p),
        &run_.log,
    );

    // A clean shutdown and a restart.
    primary.save_and_restart();
    let mut p = primary.conn();
    check(
        "SHUTDOWN SAVE and a restart",
        &want,
        &state(&mut p),
        &run_.log,
    );

    // The first replica follows the restarted primary; a second one syncs in full.
    let second = primary.replica();
    let mut s2 = second.conn();
    wait_until("the first replica's link", 30, || {
        text(&mut r, &["INFO", "replication"]).contains("master_link_status:up")
    });
    wait_replicas(&mut p, 2);
    check(
        "the first replica, after the restart",
        &want,
        &state(&mut r),
        &run_.log,
    );
    check(
        "a second replica (a full sync)",
        &want,
        &state(&mut s2),
        &run_.log,
    );

    // More calls, on keys that went through all of the above (their parameter sets
    // interned again, copied, released), and both replicas follow.
    run_.calls(&mut p, calls / 5, &mut [&mut r, &mut s2], false);
    wait_replicas(&mut p, 2);
    let want = state(&mut p);
    check(
        "the first replica, at the end",
        &want,
        &state(&mut r),
        &run_.log,
    );
    check(
        "the second replica, at the end",
        &want,
        &state(&mut s2),
        &run_.log,
    );
    // The parameter sets in use are those of the keys, on every server.
    let sets = |c: &mut Connection| info_field(c, "ratelimit_param_sets");
    let on_primary = sets(&mut p);
    wait_until("the replicas' parameter sets", 5, || {
        sets(&mut r) == on_primary && sets(&mut s2) == on_primary
    });
    assert_eq!(text(&mut p, &["PING"]), "PONG");
    let Run {
        log,
        errors,
        outcomes,
        ..
    } = run_;
    let errors_total: usize = errors.values().sum();
    eprintln!(
        "roundtrip: {} calls answering [1, 0, other] {outcomes:?}; {errors_total} errors {errors:?}; {} keys; {on_primary} parameter sets; {:.1} s",
        log.len(),
        want.dbsize,
        started.elapsed().as_secs_f64()
    );
}
