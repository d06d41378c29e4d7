//! Fuzzing what a server loads: RESTORE of damaged DUMP output and RL.RESTORE of damaged
//! payloads, for every kind of limiter. Each damaged value is refused with an error and no
//! key, or loads as a sound limiter; the server never goes down. And what it applies:
//! RL.APPLY of damaged real effects, each refused with an error that changes nothing or
//! applied, in a dataset that reloads as it was.
//!
//! `make test` runs a short round (FUZZ_ITERATIONS, default 2000 per target, ten RL.APPLY
//! calls per iteration); `make fuzz` runs a long one.

use crate::common::{
    aof_raw_words, effect_text, info_field, put_varint, run, unix_ms, wait_until, Server,
};
use redis::{Connection, ConnectionLike, Value};

fn iterations() -> usize {
    std::env::var("FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// A small deterministic generator (xorshift64*), seeded by FUZZ_SEED (default 1).
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::env::var("FUZZ_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1u64);
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One to four random damages: flip a bit, overwrite, insert or delete a byte, cut the tail.
fn damage(rng: &mut Rng, good: &[u8]) -> Vec<u8> {
    let mut bytes = good.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = bytes.len();
        match rng.below(5) {
            0 if len > 0 => {
                let i = rng.below(len);
                bytes[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                bytes[i] = rng.next() as u8;
            }
            2 => {
                let i = rng.below(len + 1);
                bytes.insert(i, rng.next() as u8);
            }
            3 if len > 0 => {
                bytes.remove(rng.below(len));
            }
            _ => bytes.truncate(rng.below(len + 1)),
        }
    }
    bytes
}

/// A limiter of every kind with some history, at times near the real clock.
fn limiters(c: &mut Connection, t: u64) -> Vec<&'static str> {
    for (i, line) in [
        "RL.SLIDE f:slide 10 1000 100 60000 COST 2",
        "RL.SLIDE f:slide 10 1000 100 60000",
        "RL.SUBWIN f:subwin 100 60000 1000 COST 3",
        "RL.SUBWIN f:subwin 100 60000 1000",
        "RL.TOKEN f:token 10 1000 BURST 4 COST 2",
        "RL.LEAKY f:leaky 5 1000 MAXDELAY 2000",
        "RL.LEAKY f:leaky 5 1000 MAXDELAY 2000",
        "RL.FIXED f:fixed 10 60000 ALIGN COST 4",
        // A shorter window after a longer one: retentions pending (encoding version 2).
        "RL.SLIDE f:kept 3 10000 COST 2",
        "RL.SLIDE f:kept 5 1000",
        "RL.SUBWIN f:ring 3 10000 1000 COST 2",
        "RL.SUBWIN f:ring 5 1000 100",
    ]
    .iter()
    .enumerate()
    {
        let line = format!("{line} NOW {}", t + 300 * i as u64);
        run(c, &line.split(' ').collect::<Vec<_>>()).expect("a limiter");
    }
    vec![
        "f:slide", "f:subwin", "f:token", "f:leaky", "f:fixed", "f:kept", "f:ring",
    ]
}

/// The key loaded as a sound limiter: it answers five fields in range, dumps and digests.
fn assert_sound(c: &mut Connection, key: &str, t: u64, what: &str) {
    let peek: Value = redis::cmd("RL.PEEK")
        .arg(key)
        .arg("NOW")
        .arg(t)
        .query(c)
        .unwrap_or_else(|e| panic!("{what}: RL.PEEK failed: {e}"));
    match peek {
        // Loaded, but already expired at its own times: nothing to check.
        Value::Nil => {}
        Value::Array(f) => {
            let f: Vec<i64> = redis::from_redis_value(&Value::Array(f)).expect("integers");
            assert_eq!(f.len(), 5, "{what}: {f:?}");
            // A state over its limit (a lowered limit does that too) answers 0 even at COST 0.
            let allowed = f[0] == 1 || (f[0] == 0 && f[2] == 0 && f[3] > 0);
            assert!(
                allowed && f[1] >= 1 && f[2] >= 0 && f[4] >= 0,
                "{what}: {f:?}"
            );
        }
        other => panic!("{what}: RL.PEEK answered {other:?}"),
    }
    let _: Value = redis::cmd("DEBUG")
        .arg("DIGEST-VALUE")
        .arg(key)
        .query(c)
        .unwrap_or_else(|e| panic!("{what}: DEBUG DIGEST-VALUE failed: {e}"));
    let _: Value = redis::cmd("DUMP")
        .arg(key)
        .query(c)
        .unwrap_or_else(|e| panic!("{what}: DUMP failed: {e}"));
}

fn ping(c: &mut Connection) {
    let pong: String = redis::cmd("PING").query(c).expect("the server is up");
    assert_eq!(pong, "PONG");
}

#[test]
fn fuzz_restore_of_damaged_dump_payloads() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    // Reach the module's loader: Redis checks DUMP's CRC before it, which would refuse
    // almost every damaged payload on its own.
    run(&mut c, &["DEBUG", "SET-SKIP-CHECKSUM-VALIDATION", "1"]).unwrap();
    let t = unix_ms();
    let keys = limiters(&mut c, t);
    let dumps: Vec<Vec<u8>> = keys
        .iter()
        .map(|k| redis::cmd("DUMP").arg(k).query(&mut c).expect("DUMP"))
        .collect();
    let restore = |key: &str, payload: &[u8]| {
        let mut cmd = redis::cmd("RESTORE");
        cmd.arg(key).arg(0).arg(payload);
        cmd
    };
    let (loaded, refused) = fuzz_loads(&mut c, &dumps, restore, t + 1000, "");
    eprintln!("RESTORE fuzz: {loaded} damaged payloads accepted (limiters among them sound), {refused} refused");
}

/// Damages one of `seeds` at a time and loads it under a new key with `load`: each is
/// refused with an error reply and no key, or loads, as a sound limiter when it is one
/// (a damaged type byte can make a value of Redis's own types). A refusal's text contains
/// `refusal`. Returns (loaded, refused).
fn fuzz_loads(
    c: &mut Connection,
    seeds: &[Vec<u8>],
    load: impl Fn(&str, &[u8]) -> redis::Cmd,
    at: u64,
    refusal: &str,
) -> (usize, usize) {
    let mut rng = Rng::new();
    let (mut loaded, mut refused) = (0, 0);
    for i in 0..iterations() {
        let which = rng.below(seeds.len());
        let payload = damage(&mut rng, &seeds[which]);
        let key = format!("fz:{i}");
        let what = format!("iteration {i} (seed {which}): {payload:?}");
        let reply: redis::RedisResult<Value> = load(&key, &payload).query(c);
        let exists: i64 = redis::cmd("EXISTS").arg(&key).query(c).expect("EXISTS");
        match reply {
            Ok(_) => {
                loaded += 1;
                let kind: String = redis::cmd("TYPE").arg(&key).query(c).expect("TYPE");
                if exists == 1 && kind == "ratelimit" {
                    assert_sound(c, &key, at, &what);
                }
                let _: i64 = redis::cmd("DEL").arg(&key).query(c).expect("DEL");
            }
            Err(e) => {
                refused += 1;
                assert!(e.code().is_some(), "{what}: {e}");
                assert!(format!("{e}").contains(refusal), "{what}: {e}");
                assert_eq!(exists, 0, "{what}: a refused load left a key");
            }
        }
        if i % 250 == 0 {
            ping(c);
        }
    }
    ping(c);
    (loaded, refused)
}

/// Version 1 payloads of every kind, as committed in `src/value.rs`.
const PAYLOADS: [&[u8]; 5] = [
    &[
        1, 1, 173, 210, 149, 255, 188, 49, 2, 5, 232, 7, 100, 224, 212, 3, 4, 128, 208, 149, 255,
        188, 49, 2, 7, 1, 165, 2, 1, 1, 1,
    ],
    &[1, 2, 232, 7, 148, 35, 10, 232, 7, 5, 0],
    &[1, 3, 232, 7, 148, 35, 4, 232, 7, 1, 160, 6],
    &[1, 4, 232, 7, 200, 220, 3, 3, 10, 224, 212, 3, 1],
    &[1, 5, 232, 7, 10, 232, 7, 250, 1, 0, 2, 0, 0, 3],
];

#[test]
fn fuzz_rl_restore_of_damaged_payloads() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    for p in PAYLOADS {
        let reply: Value = redis::cmd("RL.RESTORE")
            .arg("good")
            .arg(p)
            .query(&mut c)
            .expect("a committed payload loads");
        assert_eq!(reply, Value::Okay);
    }
    let seeds: Vec<Vec<u8>> = PAYLOADS.iter().map(|p| p.to_vec()).collect();
    let restore = |key: &str, payload: &[u8]| {
        let mut cmd = redis::cmd("RL.RESTORE");
        cmd.arg(key).arg(payload);
        cmd
    };
    // Times in these payloads are near 1970: most load already expired.
    let (loaded, refused) = fuzz_loads(&mut c, &seeds, restore, 2000, "invalid limiter payload");
    eprintln!("RL.RESTORE fuzz: {loaded} damaged payloads accepted (limiters among them sound), {refused} refused");
}

/// A compact effect's commands and keywords, coded `1 + index` (see `src/effect.rs`).
const EFFECT_COMMANDS: [&str; 7] = [
    "RL.SLIDE",
    "RL.TOKEN",
    "RL.LEAKY",
    "RL.FIXED",
    "RL.SUBWIN",
    "RL.REFUND",
    "RL.CHARGE",
];
const EFFECT_KEYWORDS: [&str; 5] = ["BURST", "MAXDELAY", "COST", "NOW", "ALIGN"];

/// The compact form of a textual effect, `None` when it has none (a lease's effect, a word
/// that is neither a keyword nor a canonical number).
fn compact(text: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(text).ok()?;
    let mut words = text.split(' ');
    let command = words.next()?;
    let code = EFFECT_COMMANDS.iter().position(|c| *c == command)? + 1;
    let mut out = vec![1, code as u8];
    for w in words {
        match EFFECT_KEYWORDS.iter().position(|k| *k == w) {
            Some(k) => out.push(k as u8 + 1),
            None => {
                let v: u64 = w.parse().ok().filter(|v: &u64| v.to_string() == w)?;
                out.push(0);
                put_varint(&mut out, v);
            }
        }
    }
    Some(out)
}

/// A textual effect with one of its number words replaced by an edge value; `None` when it
/// has no number word.
fn with_edge(rng: &mut Rng, text: &[u8], year_ahead: u64) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(text).ok()?;
    let mut words: Vec<String> = text.split(' ').map(str::to_owned).collect();
    let numbers: Vec<usize> = (0..words.len())
        .filter(|&i| !words[i].is_empty() && words[i].bytes().all(|b| b.is_ascii_digit()))
        .collect();
    if numbers.is_empty() {
        return None;
    }
    let at = numbers[rng.below(numbers.len())];
    let edges = [
        "0".to_string(),
        "1".to_string(),
        "4294967296".to_string(),
        u64::MAX.to_string(),
        i64::MAX.to_string(),
        year_ahead.to_string(),
    ];
    words[at] = edges[rng.below(edges.len())].clone();
    Some(words.join(" ").into_bytes())
}

/// A damaged version of an effect: bytes damaged, a number word at an edge (in the form it
/// came in), both, or none.
fn mutate(rng: &mut Rng, effect: &[u8], year_ahead: u64) -> Vec<u8> {
    let is_compact = effect.first() == Some(&1);
    let edged = |rng: &mut Rng| {
        let text = effect_text(effect);
        let edged = with_edge(rng, text.as_bytes(), year_ahead)?;
        if is_compact {
            // A number too large for a word stays a number in the compact form.
            compact(&edged).or(Some(edged))
        } else {
            Some(edged)
        }
    };
    match rng.below(10) {
        0..=3 => damage(rng, effect),
        4..=7 => edged(rng).unwrap_or_else(|| damage(rng, effect)),
        8 => effect.to_vec(),
        _ => {
            let edged = edged(rng).unwrap_or_else(|| effect.to_vec());
            damage(rng, &edged)
        }
    }
}

/// An effect as a report shows it: its text, and its bytes when compact.
fn show_effect(effect: &[u8]) -> String {
    let text: String = effect_text(effect).chars().take(160).collect();
    if effect.first() == Some(&1) {
        format!("{text:?} (compact: b\"{}\")", effect.escape_ascii())
    } else {
        format!(
            "b\"{}\"",
            effect
                .escape_ascii()
                .to_string()
                .chars()
                .take(200)
                .collect::<String>()
        )
    }
}

/// Every reply of a pipeline, errors included; panics when the server gives none.
fn replies(c: &mut Connection, pipe: &redis::Pipeline, what: &str) -> Vec<Value> {
    let n = pipe.cmd_iter().count();
    c.req_packed_commands(&pipe.get_packed_pipeline(), 0, n)
        .unwrap_or_else(|e| panic!("{what}: no reply (is the server up?): {e}"))
}

/// The dataset: its digest and size, and each key's digest and absolute expiry.
#[derive(Debug, PartialEq)]
struct Dataset {
    digest: String,
    dbsize: i64,
    keys: std::collections::BTreeMap<Vec<u8>, (String, i64)>,
}

fn all_keys(c: &mut Connection) -> Vec<Vec<u8>> {
    // SCAN also removes the keys that have expired.
    let mut keys = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(c)
            .expect("SCAN");
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    keys
}

fn dataset(c: &mut Connection) -> Dataset {
    let names = all_keys(c);
    let mut pipe = redis::pipe();
    for k in &names {
        pipe.cmd("DEBUG").arg("DIGEST-VALUE").arg(k);
        pipe.cmd("PEXPIRETIME").arg(k);
    }
    pipe.cmd("DEBUG").arg("DIGEST");
    pipe.cmd("DBSIZE");
    let got = replies(c, &pipe, "the dataset");
    let mut keys = std::collections::BTreeMap::new();
    for (k, pair) in names.iter().zip(got.chunks_exact(2)) {
        let d: Vec<String> = redis::from_redis_value(&pair[0]).expect("DEBUG DIGEST-VALUE");
        let at: i64 = redis::from_redis_value(&pair[1]).expect("PEXPIRETIME");
        keys.insert(k.clone(), (d.concat(), at));
    }
    let n = got.len();
    Dataset {
        digest: redis::from_redis_value(&got[n - 2]).expect("DEBUG DIGEST"),
        dbsize: redis::from_redis_value(&got[n - 1]).expect("DBSIZE"),
        keys,
    }
}

/// Keys that would expire in real time within a minute (an effect with an old `NOW`) lose
/// their expiry, so that what a reload keeps does not depend on when it runs.
fn hold_expiring_keys(c: &mut Connection) {
    let keys = all_keys(c);
    let now = fuzz_server_ms(c);
    for k in keys {
        let at: i64 = redis::cmd("PEXPIRETIME")
            .arg(&k)
            .query(c)
            .expect("PEXPIRETIME");
        if at >= 0 && (at as u64) < now + 60_000 {
            let _: i64 = redis::cmd("PERSIST").arg(&k).query(c).expect("PERSIST");
        }
    }
}

fn fuzz_server_ms(c: &mut Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(c).expect("TIME");
    secs * 1000 + micros / 1000
}

/// Checks that `after` is `before`; on a difference, fails naming the keys that differ and
/// the effects applied to them.
fn same_dataset(
    what: &str,
    before: &Dataset,
    after: &Dataset,
    history: &std::collections::HashMap<Vec<u8>, Vec<String>>,
) {
    if before == after {
        return;
    }
    let mut report = format!(
        "{what}: DEBUG DIGEST {} -> {}, DBSIZE {} -> {}",
        before.digest, after.digest, before.dbsize, after.dbsize
    );
    let names: std::collections::BTreeSet<&Vec<u8>> =
        before.keys.keys().chain(after.keys.keys()).collect();
    for k in names {
        let (b, a) = (before.keys.get(k), after.keys.get(k));
        if b != a {
            let applied = history.get(k).map(Vec::as_slice).unwrap_or_default();
            report += &format!(
                "\n  {}: {b:?} -> {a:?}; the effects applied to it (the last 20 of {}):\n    {}",
                k.escape_ascii(),
                applied.len(),
                applied[applied.len().saturating_sub(20)..].join("\n    ")
            );
        }
    }
    panic!("{report}");
}

/// `DEBUG RELOAD` answers OK and gives the same dataset back.
fn reload_keeps_the_dataset(
    c: &mut Connection,
    history: &std::collections::HashMap<Vec<u8>, Vec<String>>,
    at: usize,
) {
    hold_expiring_keys(c);
    let before = dataset(c);
    let sets_before = info_field(c, "ratelimit_param_sets");
    let reload = run(c, &["DEBUG", "RELOAD"]);
    assert!(
        reload.is_ok(),
        "DEBUG RELOAD after {at} applies: {reload:?}"
    );
    same_dataset(
        &format!("DEBUG RELOAD after {at} applies"),
        &before,
        &dataset(c),
        history,
    );
    // The parameter sets in use are the keys' own: a reload, which frees every value and
    // loads them again, finds as many (none was leaked by a refused apply).
    let sets_after = info_field(c, "ratelimit_param_sets");
    assert_eq!(
        sets_after, sets_before,
        "ratelimit_param_sets after DEBUG RELOAD after {at} applies (before it: {sets_before})"
    );
}

/// Applies per `FUZZ_ITERATIONS`: an apply is a round trip, cheaper than a load.
const APPLIES_PER_ITERATION: usize = 10;

/// Real effects, from the AOF of a server that ran calls of every kind, damaged, with a
/// number at an edge, or paired, applied with `RL.APPLY`: each is refused with an error
/// that changes nothing, or applied; the dataset reloads (`DEBUG RELOAD`, the rewritten
/// AOF) as it was, and the server never goes down.
#[test]
fn fuzz_apply_of_mutated_effects() {
    let server = Server::start(&["--appendonly", "yes"]);
    let mut c = server.conn();
    // The calls in 2100 (a fixed time, so that the effects are the same in every run), so
    // that their keys do not expire in real time.
    let base = 4_102_444_800_000;
    let year_ahead = base + 365 * 86_400_000;
    let long_id = "x".repeat(512);
    let mut made = String::new();
    let lines = [
        "RL.SLIDE s:slide 10 1000 COST 2",
        "RL.SLIDE s:slide 10 1000 100 60000 1000 2678400000",
        "RL.SLIDE s:slide1 1 1",
        "RL.TOKEN s:token 10 1000 BURST 4 COST 2",
        "RL.TOKEN s:token 2147483647 2678400000",
        "RL.LEAKY s:leaky 5 1000 MAXDELAY 2000 BURST 2",
        "RL.LEAKY s:leaky 5 1000 MAXDELAY 0",
        "RL.FIXED s:fixed 10 60000 ALIGN COST 4",
        "RL.FIXED s:fixed2 4294967295 1",
        "RL.SUBWIN s:subwin 100 60000 1000 COST 3",
        "RL.SUBWIN s:subwin 100 4096 1",
        "RL.REFUND s:slide",
        "RL.REFUND s:token COST 1",
        "RL.REFUND s:leaky",
        "RL.REFUND s:fixed COST 2",
        "RL.REFUND s:subwin",
        "RL.CHARGE s:slide COST 5",
        "RL.CHARGE s:token COST 7",
        "RL.CHARGE s:leaky COST 1",
        "RL.CHARGE s:fixed COST 100",
        "RL.CHARGE s:subwin COST 2",
        "RL.ACQUIRE s:lease 10 60000",
        "RL.ACQUIRE s:lease 10 60000 ID a COST 2",
        "RL.ACQUIRE s:lease 1000000000 2678400000 ID LONG",
        "RL.EXTEND s:lease a 120000",
        "RL.RELEASE s:lease MADE",
        "RL.ALL 3 s:a1 s:a2 s:a3 SLIDE 5 1000 TOKEN 10 1000 COST 2 ACQUIRE 2 30000",
        "RL.ALL 3 s:a4 s:a5 s:a6 FIXED 3 1000 ALIGN SUBWIN 10 1000 100 ACQUIRE 2 30000 ID b",
        "RL.ALL 2 s:a7 s:a8 LEAKY 4 1000 MAXDELAY 3000 BURST 2 COST 3 SLIDE 4294967295 2678400000",
        // Compact policies (set below): families of packed states and of logs, their
        // effects RL.FAMILY's bytes (a layout, entries of fixed and of their own lengths,
        // a new parameter set).
        "RL.HIT fz u1",
        "RL.HIT fz u2 COST 2",
        "RL.HIT fz u1",
        "RL.HIT fy u1",
        "RL.HIT fy {t}a COST 2",
        "RL.HIT fy u1",
    ];
    for (name, limiters) in [
        ("fz", "t TOKEN 10 1000 s SLIDE 5 1000"),
        ("fy", "s SLIDE 3 1000"),
    ] {
        let mut words = vec!["RL.POLICY", "SET", name, "COMPACT"];
        words.extend(limiters.split(' '));
        run(&mut c, &words).expect("a compact policy");
    }
    for (i, line) in lines.iter().enumerate() {
        let line = line.replace("LONG", &long_id).replace("MADE", &made);
        let mut words: Vec<&str> = line.split(' ').collect();
        let now = (base + 7 * i as u64).to_string();
        words.extend(["NOW", &now]);
        let reply = run(&mut c, &words).unwrap_or_else(|e| panic!("{line}: {e}"));
        if line == "RL.ACQUIRE s:lease 10 60000" {
            // The id the server made, released below.
            let fields: Vec<Value> = redis::from_redis_value(&reply).expect("a reply");
            made = redis::from_redis_value(&fields[5]).expect("a made id");
        }
    }
    // The seeds: each change of an RL.APPLY, as the AOF has it, and compact ones as text too.
    let mut seeds: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for words in aof_raw_words(&server) {
        if words[0] != b"RL.APPLY" {
            continue;
        }
        for change in words[1..].chunks_exact(2) {
            seeds.push((change[0].clone(), change[1].clone()));
            if change[1].first() == Some(&1) {
                seeds.push((change[0].clone(), effect_text(&change[1]).into_bytes()));
            }
        }
    }
    let compact_seeds = seeds.iter().filter(|(_, e)| e.first() == Some(&1)).count();
    assert!(
        compact_seeds >= 10 && seeds.len() >= 2 * compact_seeds + 5,
        "seeds of every kind in both forms: {seeds:?}"
    );
    let mut pool: Vec<Vec<u8>> = seeds.iter().map(|(k, _)| k.clone()).collect();
    pool.sort();
    pool.dedup();
    pool.extend((0..32).map(|i| format!("fz:{i}").into_bytes()));

    let mut rng = Rng::new();
    let total = iterations() * APPLIES_PER_ITERATION;
    let every = (total / 10).max(1);
    let mut history: std::collections::HashMap<Vec<u8>, Vec<String>> = Default::default();
    let (mut applied, mut errors) = (0, std::collections::BTreeMap::<String, usize>::new());
    for i in 0..total {
        let mut changes: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for n in 0..1 + usize::from(rng.below(3) == 0) {
            let (own, effect) = &seeds[rng.below(seeds.len())];
            let key = match rng.below(16) {
                // The same key twice (an error).
                0 if n == 1 => changes[0].0.clone(),
                0..=9 => own.clone(),
                _ => pool[rng.below(pool.len())].clone(),
            };
            changes.push((key, mutate(&mut rng, effect, year_ahead)));
        }
        let keys: Vec<&Vec<u8>> = changes.iter().map(|(k, _)| k).collect();
        let mut pipe = redis::pipe();
        // The expiries first: reading one removes a key already expired, which DEBUG
        // DIGEST-VALUE would still see.
        let look = |pipe: &mut redis::Pipeline| {
            for k in &keys {
                pipe.cmd("PEXPIRETIME").arg(k);
            }
            pipe.cmd("DEBUG").arg("DIGEST-VALUE").arg(&keys);
        };
        pipe.cmd("TIME");
        look(&mut pipe);
        let apply = pipe.cmd("RL.APPLY");
        for (k, e) in &changes {
            apply.arg(k).arg(e);
        }
        look(&mut pipe);
        let what = format!(
            "apply {i}: RL.APPLY {}",
            changes
                .iter()
                .map(|(k, e)| format!("{} {}", k.escape_ascii(), show_effect(e)))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let got = replies(&mut c, &pipe, &what);
        let n = 1 + keys.len();
        let (time, before, reply, after) = (&got[0], &got[1..1 + n], &got[1 + n], &got[2 + n..]);
        let (secs, micros): (u64, u64) = redis::from_redis_value(time).expect("TIME");
        let now = secs * 1000 + micros / 1000;
        match reply {
            Value::ServerError(e) => {
                let detail = e.details().unwrap_or("");
                let kind: String = if e.code() == "WRONGTYPE" { "" } else { detail }
                    .split(|ch: char| ch.is_ascii_digit() || ch == '\'' || ch == '(')
                    .next()
                    .unwrap_or(detail)
                    .chars()
                    .take(60)
                    .collect();
                let kind = format!("{} {kind}", e.code()).trim_end().to_string();
                *errors.entry(kind).or_default() += 1;
                // Nothing changed, unless a key was about to expire by itself.
                let expiring = before[..keys.len()].iter().any(|at| {
                    let at: i64 = redis::from_redis_value(at).expect("PEXPIRETIME");
                    at >= 0 && (at as u64) < now + 1000
                });
                assert!(
                    expiring || before == after,
                    "{what}: answered {reply:?} and changed the keys: {before:?} -> {after:?}"
                );
            }
            _ => {
                applied += 1;
                for (k, e) in &changes {
                    history
                        .entry(k.clone())
                        .or_default()
                        .push(format!("#{i}: {}", show_effect(e)));
                }
            }
        }
        if (i + 1) % every == 0 {
            reload_keeps_the_dataset(&mut c, &history, i + 1);
        }
    }
    reload_keeps_the_dataset(&mut c, &history, total);
    // The AOF rewritten, then loaded.
    let rewriting = |c: &mut Connection| {
        let info: String = redis::cmd("INFO")
            .arg("persistence")
            .query(c)
            .expect("INFO");
        !(info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0"))
    };
    hold_expiring_keys(&mut c);
    let before = dataset(&mut c);
    wait_until("no AOF rewrite", 30, || !rewriting(&mut c));
    run(&mut c, &["BGREWRITEAOF"]).expect("BGREWRITEAOF");
    wait_until("the AOF rewrite", 30, || !rewriting(&mut c));
    let info: String = redis::cmd("INFO")
        .arg("persistence")
        .query(&mut c)
        .expect("INFO");
    assert!(info.contains("aof_last_bgrewrite_status:ok"), "{info}");
    let load = run(&mut c, &["DEBUG", "LOADAOF"]);
    assert!(load.is_ok(), "DEBUG LOADAOF: {load:?}");
    same_dataset(
        "BGREWRITEAOF and DEBUG LOADAOF",
        &before,
        &dataset(&mut c),
        &history,
    );
    ping(&mut c);
    let refused: usize = errors.values().sum();
    eprintln!(
        "RL.APPLY fuzz: {total} applies of {} seeds ({compact_seeds} compact): {applied} applied, {refused} refused {errors:?}; {} keys",
        seeds.len(),
        before.dbsize
    );
}
