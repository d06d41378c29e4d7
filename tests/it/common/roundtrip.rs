//! The random calls of tests/it/roundtrip.rs: every command, with edge values, made by a seeded
//! generator from its picks and the lease ids the server gave, their times relative to the
//! run's base time so that a report shows a call the same whenever it ran.

use redis::Value;

pub const DAY: i64 = 86_400_000;
pub const DAY31: u64 = 31 * 86_400_000;
pub const SEQ_END: u64 = (1 << 63) - 1;
pub const U32_MAX: u64 = u32::MAX as u64;
/// The largest time a call takes (9999-12-31).
pub const MAX_TIMESTAMP: u64 = 253_402_300_799_999;
pub const I32_MAX: u64 = i32::MAX as u64;
/// Keys the calls pick from, `k0` to `k15`; `kN` is of kind `N % 6`.
pub const KEYS: usize = 16;

pub fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator (xorshift64*), as in tests/it/fuzz.rs.
pub struct Rng(pub u64);

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
pub enum W {
    Lit(String),
    /// A time: base + offset.
    At(i64),
    /// A lease id of the server's form, `<base + offset>-<seq>`.
    Id(i64, u64),
}

pub type Call = Vec<W>;

pub fn lit(s: impl Into<String>) -> W {
    W::Lit(s.into())
}

pub fn render(call: &Call, base: u64) -> Vec<String> {
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
pub fn show(call: &Call) -> String {
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
pub fn id_word(id: &str, base: u64) -> W {
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
pub struct Gen {
    pub rng: Rng,
    /// The time of the next call, relative to the base.
    pub t: i64,
    /// Lease ids granted on each key, newest last.
    pub held: Vec<Vec<W>>,
    /// Costs of 0 to 2 only: an `RL.ALL` over many keys that may be allowed.
    pub tame: bool,
    /// The latest time calls go to: 31 days before the largest time a call takes.
    pub end: i64,
    /// Each policy `pN` of [`POLICIES`]: compact (`Some(true)`), keyed, or none set.
    pub policies: [Option<bool>; POLICIES],
}

/// Policies the calls name, `p0` to `p2`: set (compact or keyed), set again with other
/// numbers and limiters, deleted.
pub const POLICIES: usize = 3;

/// The subjects of `RL.HIT`: a few, two with a hash tag of their own (in one family), the
/// longest a subject may be.
const SUBJECTS: [&str; 6] = ["s0", "s1", "s2", "{t}a", "{t}b", "LONG"];

/// Limiter names of the policies: a name may come back as another kind.
const LIMITER_NAMES: [&str; 4] = ["a", "b", "c", "d"];

pub const KINDS: [&str; 6] = ["SLIDE", "TOKEN", "LEAKY", "FIXED", "SUBWIN", "ACQUIRE"];

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
    pub fn jump_to_the_end_of_time(&mut self) {
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
    pub fn call(&mut self) -> Call {
        self.step();
        let key = self.key();
        let name = lit(format!("k{key}"));
        let call = match self.rng.below(15) {
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
            12..=14 => return self.policy_call(),
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

    /// A call on a policy: mostly `RL.HIT`; its definition (set again, as the other storage:
    /// refused, or deleted), a subject read, forgotten or unbanned.
    fn policy_call(&mut self) -> Call {
        let p = self.rng.below(POLICIES);
        let name = lit(format!("p{p}"));
        let subject = match self.rng.pick(&SUBJECTS) {
            "LONG" => lit("u".repeat(1024)),
            s => lit(s),
        };
        let call = match self.rng.below(40) {
            _ if self.policies[p].is_none() && self.rng.one_in(2) => return self.define(p),
            0..=27 => {
                let mut call = vec![lit("RL.HIT"), name, subject];
                let limit = self.rng.pick(&[1, 10, I32_MAX]);
                call.extend(self.cost(limit));
                call
            }
            28..=30 => return self.define(p),
            31..=33 => vec![lit("RL.POLICY"), lit("SUBJECT"), name, subject],
            34 | 35 => return vec![lit("RL.POLICY"), lit("FORGET"), name, subject],
            36 => return vec![lit("RL.POLICY"), lit("UNBAN"), name, subject],
            37 => return vec![lit("RL.POLICY"), lit("DEL"), name],
            _ => {
                // The other storage: refused while the policy is set.
                let mut call = self.define(p);
                match call.iter().position(|w| *w == lit("COMPACT")) {
                    Some(at) => {
                        call.remove(at);
                    }
                    None => call.insert(3, lit("COMPACT")),
                }
                return call;
            }
        };
        self.finish(call)
    }

    /// `RL.POLICY SET pN ...`: its storage as it is (compact for `p0` and `p2` when none is
    /// set, else at random), clauses now and then, one to three limiters, drawn.
    fn define(&mut self, p: usize) -> Call {
        let compact = self.policies[p].unwrap_or(p != 1 || self.rng.one_in(4));
        let mut call = vec![lit("RL.POLICY"), lit("SET"), lit(format!("p{p}"))];
        if compact {
            call.push(lit("COMPACT"));
        }
        if self.rng.one_in(10) {
            call.push(lit("SHADOW"));
        }
        if self.rng.one_in(5) {
            call.push(lit("PENALTY"));
            let refusals = self.rng.pick(&[1, 3]);
            let (window, ban) = self.rng.pick(&[(1000, 5000), (60_000, DAY31)]);
            call.extend([refusals, window, ban].map(|n| lit(n.to_string())));
            if self.rng.one_in(2) {
                call.extend([lit("MAX"), lit((4 * ban).min(DAY31).to_string())]);
            }
        }
        let mut names = LIMITER_NAMES;
        for i in 0..1 + self.rng.below(3) {
            let j = i + self.rng.below(names.len() - i);
            names.swap(i, j);
            call.push(lit(names[i]));
            call.extend(self.limiter(compact));
            if self.rng.one_in(8) {
                call.push(lit("SHADOW"));
            }
        }
        call
    }

    /// A policy's limiter, its kind's keyword first: of the kinds a compact policy holds
    /// (its `SLIDE` limits within a family's bound), or of any kind but `ACQUIRE` for a
    /// keyed one.
    fn limiter(&mut self, compact: bool) -> Call {
        let kinds: &[&str] = if compact {
            &["TOKEN", "LEAKY", "FIXED", "THROTTLE", "SLIDE"]
        } else {
            &["TOKEN", "LEAKY", "FIXED", "THROTTLE", "SLIDE", "SUBWIN"]
        };
        let kind = self.rng.pick(kinds);
        let r = &mut self.rng;
        let mut words = vec![lit(kind)];
        let mut push = |n: u64| words.push(lit(n.to_string()));
        match kind {
            "THROTTLE" => {
                push(r.pick(&[0, 15, 1_000_000]));
                push(r.pick(&[1, 30, 1_000_000]));
                push(r.pick(&[1, 60, 86_400]));
            }
            "SUBWIN" => {
                let (window, res) = r.pick(&[(1000, 10), (60_000, 60_000), (DAY31, DAY31 / 4000)]);
                push(r.pick(&[1, 10, I32_MAX]));
                push(window);
                push(res);
            }
            // A compact policy's SLIDE counts at most 100 requests a window.
            "SLIDE" if compact => {
                push(r.pick(&[1, 10, 100]));
                push(r.pick(&[1, 1000, DAY31]));
            }
            _ => {
                push(r.pick(&[1, 10, I32_MAX]));
                push(r.pick(&[1, 1000, DAY31]));
            }
        }
        match kind {
            "LEAKY" if r.one_in(2) => {
                words.extend([lit("MAXDELAY"), lit(r.pick(&[0, DAY31]).to_string())])
            }
            "FIXED" if r.one_in(2) => words.push(lit("ALIGN")),
            _ => {}
        }
        if matches!(kind, "TOKEN" | "LEAKY") && r.one_in(3) {
            words.extend([lit("BURST"), lit(r.pick(&[1, I32_MAX]).to_string())]);
        }
        if kind != "THROTTLE" && r.one_in(6) {
            words.extend([lit("COST"), lit(r.pick(&[0, 1, 2]).to_string())]);
        }
        words
    }

    /// The call at the current time.
    fn finish(&self, mut call: Call) -> Call {
        call.extend([lit("NOW"), W::At(self.t)]);
        call
    }

    /// Remembers the lease ids a reply granted.
    pub fn granted(&mut self, call: &Call, reply: &Value, base: u64) {
        let W::Lit(command) = &call[0] else { return };
        if command == "RL.POLICY" {
            let p = match call.get(2) {
                Some(W::Lit(name)) => name.strip_prefix('p').and_then(|p| p.parse::<usize>().ok()),
                _ => None,
            };
            match (call.get(1), p, reply) {
                (Some(W::Lit(op)), Some(p), Value::Okay) if op == "SET" && p < POLICIES => {
                    self.policies[p] = Some(call.contains(&lit("COMPACT")));
                }
                (Some(W::Lit(op)), Some(p), Value::Int(1)) if op == "DEL" && p < POLICIES => {
                    self.policies[p] = None;
                }
                _ => {}
            }
            return;
        }
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
pub fn all(specs: &[(usize, Call)]) -> Call {
    let mut call = vec![lit("RL.ALL"), lit(specs.len().to_string())];
    call.extend(specs.iter().map(|(k, _)| lit(format!("k{k}"))));
    for (_, spec) in specs {
        call.extend(spec.iter().cloned());
    }
    call
}
