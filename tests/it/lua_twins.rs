//! The Lua twins of RL.FIXED, RL.SLIDE and RL.TOKEN (`clients/lua/*.lua`, what the client
//! packages run with `fallback="lua"`) side by side with the module: the same calls, on other
//! keys of one server, get the same replies, call by call, and leave the same expiry.
//!
//! The random sequences run with `NOW` far ahead of the server clock (the test servers do not
//! bound it), where the module and the twin set the key's expiry to the limiter's own empty
//! time, an absolute time that does not depend on when each call ran: `PEXPIRETIME` must then
//! be the same on both keys, to the millisecond, and equal `NOW + reset_after_ms` after every
//! call that changes the key. A lagging `NOW` and the server clock are compared apart, give or
//! take the time between the two calls.

use crate::common::{err, run, unix_ms, Server};
use redis::{Connection, Value};

const FIXED: &str = include_str!("../../clients/lua/fixed.lua");
const SLIDE: &str = include_str!("../../clients/lua/slide.lua");
const TOKEN: &str = include_str!("../../clients/lua/token.lua");

/// Year 2096: ahead of the server clock for as long as this test lives, so that the
/// expiries compared are exact.
const T0: u64 = 4_000_000_000_000;

/// A deterministic generator (xorshift64*), one seed per case.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// From 0 to `n - 1`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True `pct` times in a hundred.
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }

    fn pick<T: Copy>(&mut self, options: &[T]) -> T {
        options[self.below(options.len() as u64) as usize]
    }
}

/// A twin: the module's command and the script that answers as it does.
struct Twin {
    command: &'static str,
    sha: String,
}

impl Twin {
    fn load(c: &mut Connection, command: &'static str, script: &str) -> Twin {
        let sha = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script)
            .query(c)
            .unwrap_or_else(|e| panic!("{command}'s twin does not load: {e}"));
        Twin { command, sha }
    }

    /// The module's reply to `words` on `key`: five integers, or the error's text.
    fn module(&self, c: &mut Connection, key: &str, words: &[String]) -> Result<Vec<i64>, String> {
        let mut cmd = redis::cmd(self.command);
        cmd.arg(key).arg(words);
        answer(cmd.query(c))
    }

    /// The twin's reply to the same words on `key`.
    fn lua(&self, c: &mut Connection, key: &str, words: &[String]) -> Result<Vec<i64>, String> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.sha).arg(1).arg(key).arg(words);
        answer(cmd.query(c))
    }
}

fn answer(reply: redis::RedisResult<Value>) -> Result<Vec<i64>, String> {
    match reply {
        Ok(v) => Ok(redis::from_redis_value(&v).unwrap_or_else(|e| panic!("{v:?}: {e}"))),
        Err(e) => Err(format!(
            "{} {}",
            e.code().unwrap_or("?"),
            e.detail().unwrap_or("")
        )),
    }
}

fn pexpiretime(c: &mut Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME")
        .arg(key)
        .query(c)
        .expect("PEXPIRETIME")
}

fn del(c: &mut Connection, keys: &[&str]) {
    let _: i64 = redis::cmd("DEL").arg(keys).query(c).expect("DEL");
}

/// One call of a sequence: the words after the key, and its cost and NOW (for the checks).
struct Call {
    words: Vec<String>,
    cost: u64,
    now: u64,
}

/// What a kind's random sequences are made of: parameters, and calls under them.
trait Gen {
    type Params: Clone;
    fn params(&self, rng: &mut Rng) -> Self::Params;
    /// The words of the parameters.
    fn words(&self, p: &Self::Params) -> Vec<String>;
    /// A cost: 0, 1, around the limit, above it, huge.
    fn cost(&self, rng: &mut Rng, p: &Self::Params) -> u64;
    /// The time scale of a step: a window, a token's interval.
    fn scale(&self, rng: &mut Rng, p: &Self::Params) -> u64;
    /// Counts what the twin's key holds after a call, for the coverage.
    fn inspect(&self, _c: &mut Connection, _key: &str, _p: &Self::Params, _cov: &mut Coverage) {}
}

/// How many calls of a run met each case worth meeting.
type Coverage = std::collections::BTreeMap<&'static str, usize>;

/// A cost for a limiter that holds `most` units: mostly small, some at or past `most`.
fn cost_near(rng: &mut Rng, most: u64) -> u64 {
    match rng.below(20) {
        0..=1 => 0,
        2..=9 => 1,
        10..=14 => 1 + rng.below(most.min(1 << 40) + 2),
        15 => most,
        16 => most + 1,
        17 => rng.pick(&[2, 3, 5]),
        18 => most / 2 + 1,
        _ => rng.pick(&[u64::from(u32::MAX), 1 << 32, i64::MAX as u64, 1 << 53]),
    }
}

/// A window as a client may write it, chosen by `pick` (the limit: the same parameters
/// always give the same words): in milliseconds, with the largest unit that divides it
/// (`60s`, `1d`), or in `ms`, its case varied.
fn duration(ms: u64, pick: u64) -> String {
    let units: [(u64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
    ];
    match pick % 3 {
        0 => ms.to_string(),
        1 => match units.iter().find(|(per, _)| ms.is_multiple_of(*per)) {
            Some((per, unit)) if pick % 2 == 1 => format!("{}{unit}", ms / per),
            Some((per, unit)) => format!("{}{}", ms / per, unit.to_uppercase()),
            None => format!("{ms}ms"),
        },
        _ => format!("{ms}MS"),
    }
}

struct FixedGen;

impl Gen for FixedGen {
    type Params = (u64, u64, bool);

    fn params(&self, rng: &mut Rng) -> (u64, u64, bool) {
        let limit = rng.pick(&[1, 2, 3, 5, 10, 100, 4_294_967_295]);
        let window = rng.pick(&[
            1,
            2,
            7,
            10,
            100,
            250,
            1000,
            60_000,
            86_400_000,
            2_678_400_000,
        ]);
        (limit, window, rng.chance(30))
    }

    fn words(&self, &(limit, window, align): &(u64, u64, bool)) -> Vec<String> {
        let mut w = vec![limit.to_string(), duration(window, limit)];
        if align {
            w.push("ALIGN".into());
        }
        w
    }

    fn cost(&self, rng: &mut Rng, p: &(u64, u64, bool)) -> u64 {
        cost_near(rng, p.0)
    }

    fn scale(&self, _rng: &mut Rng, p: &(u64, u64, bool)) -> u64 {
        p.1
    }
}

struct TokenGen;

impl Gen for TokenGen {
    /// limit, window_ms, BURST (None: the default, the limit).
    type Params = (u64, u64, Option<u64>);

    fn params(&self, rng: &mut Rng) -> Self::Params {
        let limit = rng.pick(&[1, 2, 3, 7, 10, 120, 1000, 2_147_483_647]);
        let window = rng.pick(&[1, 3, 7, 100, 1000, 60_000, 86_400_000, 2_678_400_000]);
        let burst = match rng.below(3) {
            0 => Some(rng.pick(&[1, 2, 5, 16, limit, 2_147_483_647])),
            _ => None,
        };
        (limit, window, burst)
    }

    fn words(&self, &(limit, window, burst): &Self::Params) -> Vec<String> {
        let mut w = vec![limit.to_string(), duration(window, limit)];
        if let Some(b) = burst {
            w.extend(["BURST".into(), b.to_string()]);
        }
        w
    }

    fn cost(&self, rng: &mut Rng, p: &Self::Params) -> u64 {
        cost_near(rng, p.2.unwrap_or(p.0))
    }

    fn scale(&self, rng: &mut Rng, &(limit, window, _): &Self::Params) -> u64 {
        // A token's interval, or the whole window.
        match rng.below(2) {
            0 => (window / limit).max(1),
            _ => window,
        }
    }
}

struct SlideGen;

impl Gen for SlideGen {
    /// (limit, window_ms) pairs.
    type Params = Vec<(u64, u64)>;

    fn params(&self, rng: &mut Rng) -> Self::Params {
        let n = match rng.below(12) {
            0 => 2 + rng.below(7),
            1..=3 => 2,
            4 => 3,
            _ => 1,
        };
        // Now and then limits near 2^32, where what a key keeps for older windows must go.
        let huge = rng.chance(5);
        (0..n)
            .map(|_| {
                let limit = if huge {
                    rng.pick(&[4_294_967_295, 4_000_000_000, 3_000_000_000])
                } else {
                    rng.pick(&[1, 2, 3, 5, 10, 50])
                };
                let window = rng.pick(&[
                    1,
                    5,
                    10,
                    50,
                    100,
                    250,
                    1000,
                    1000,
                    5000,
                    60_000,
                    2_678_400_000,
                ]);
                (limit, window)
            })
            .collect()
    }

    fn words(&self, p: &Self::Params) -> Vec<String> {
        p.iter()
            .flat_map(|(l, w)| [l.to_string(), duration(*w, *l)])
            .collect()
    }

    fn cost(&self, rng: &mut Rng, p: &Self::Params) -> u64 {
        let most = p.iter().map(|w| w.0).min().unwrap_or(1);
        if most > 1 << 31 && rng.chance(50) {
            return 1_000_000_000 + rng.below(3_300_000_000);
        }
        cost_near(rng, most)
    }

    fn scale(&self, rng: &mut Rng, p: &Self::Params) -> u64 {
        rng.pick(p).1
    }

    fn inspect(&self, c: &mut Connection, key: &str, p: &Self::Params, cov: &mut Coverage) {
        if p.len() > 1 {
            *cov.entry("several windows").or_default() += 1;
        }
        // The header: "RL.SLIDE:1", the key's window and a (window_ms, last use) pair for
        // each older window kept, as doubles.
        let header: Vec<Vec<u8>> = redis::cmd("ZRANGE")
            .arg(key)
            .arg(-1)
            .arg(-1)
            .query(c)
            .expect("ZRANGE");
        let kept = header
            .first()
            .map_or(0, |h| h.len().saturating_sub(18) / 16);
        if kept > 0 {
            *cov.entry("older windows kept").or_default() += 1;
        }
        if kept == 3 {
            *cov.entry("three older windows kept").or_default() += 1;
        }
    }
}

/// Keys per case, each with the module's and the twin's.
const KEYS: usize = 3;

/// Runs `cases` random sequences of `calls` calls of `twin` under `gen`, on the module
/// and on the twin, and compares every reply and the keys' expiry after every call. Returns
/// what the calls met.
fn compare<G: Gen>(
    c: &mut Connection,
    twin: &Twin,
    gen: &G,
    seed: u64,
    cases: u64,
    calls: usize,
) -> Coverage {
    let mut cov = Coverage::new();
    for case in 0..cases {
        let mut rng = Rng::new(seed + case);
        let keys: Vec<(String, String)> = (0..KEYS)
            .map(|i| {
                (
                    format!("m:{}:{seed}:{case}:{i}", twin.command),
                    format!("l:{}:{seed}:{case}:{i}", twin.command),
                )
            })
            .collect();
        let mut params: Vec<G::Params> = (0..KEYS).map(|_| gen.params(&mut rng)).collect();
        // Each key's latest time (0: none), and whether its parameters changed since.
        let mut latest = [0u64; KEYS];
        let mut changed = [false; KEYS];
        let mut t = T0 + rng.below(1 << 20);
        let mut log: Vec<String> = Vec::new();
        for _ in 0..calls {
            let k = rng.below(KEYS as u64) as usize;
            let (mkey, lkey) = (&keys[k].0, &keys[k].1);
            if rng.chance(15) {
                params[k] = gen.params(&mut rng);
                changed[k] = true;
            }
            if rng.chance(2) {
                // A missing key answers as a new limiter.
                del(c, &[mkey, lkey]);
                log.push("DEL".into());
                latest[k] = 0;
            }
            let p = &params[k];
            // Forward by nothing, a little, about the scale, or much more; now and then
            // behind the time already reached.
            let scale = gen.scale(&mut rng, p);
            let step = match rng.below(10) {
                0..=2 => 0,
                3..=4 => rng.below(4),
                5..=7 => rng.below(scale + 1),
                8 => scale + rng.below(3),
                _ => rng.below(scale.saturating_mul(4).min(1 << 40) + 1),
            };
            t += step;
            let now = if rng.chance(10) {
                t - rng.below(scale.saturating_mul(2).min(t - T0) + 1)
            } else {
                t
            };
            let cost = gen.cost(&mut rng, p);
            let mut words = gen.words(p);
            if cost != 1 || rng.chance(20) {
                words.extend(["COST".into(), cost.to_string()]);
            }
            words.extend(["NOW".into(), now.to_string()]);
            // Options in any order.
            if rng.chance(20) && words[words.len() - 4] == "COST" {
                let n = words.len();
                words.swap(n - 4, n - 2);
                words.swap(n - 3, n - 1);
            }
            let call = Call { words, cost, now };
            let (reply, held) = check_call(c, twin, mkey, lkey, &call, &log);
            log.push(format!("{k}: {}", call.words.join(" ")));
            let mut met = |case: &'static str| *cov.entry(case).or_default() += 1;
            met("calls");
            match (reply[0], reply[3]) {
                (1, _) if cost == 0 => met("COST 0"),
                (1, _) => met("allowed"),
                (_, -1) => met("refused: never"),
                _ => met("refused: a wait"),
            }
            if !held {
                met("a missing key");
            } else if now < latest[k] {
                met("behind the key's latest time");
            }
            if held && changed[k] {
                met("new parameters on a held key");
            }
            if reply[0] == 1 && cost > 0 {
                latest[k] = latest[k].max(now);
                changed[k] = false;
            }
            gen.inspect(c, lkey, p, &mut cov);
        }
    }
    eprintln!("{}: {cov:?}", twin.command);
    cov
}

/// Checks that a run met every case it should, each `least` times at least.
fn covered(cov: &Coverage, cases: &[&str], least: usize) {
    for case in cases {
        let n = cov.get(case).copied().unwrap_or(0);
        assert!(n >= least, "only {n} calls met '{case}': {cov:?}");
    }
}

const EVERY_KIND: [&str; 7] = [
    "allowed",
    "COST 0",
    "refused: never",
    "refused: a wait",
    "a missing key",
    "behind the key's latest time",
    "new parameters on a held key",
];

/// Whether the twin's reply is the module's: the same integers, except that one past 2^53
/// is the nearest a Lua number holds (at most 2^63 - 1024).
fn same(module: &Result<Vec<i64>, String>, lua: &Result<Vec<i64>, String>) -> bool {
    let (Ok(m), Ok(l)) = (module, lua) else {
        return module == lua;
    };
    let nearest = |v: i64| -> i64 {
        if v.unsigned_abs() <= 1 << 53 {
            v
        } else {
            (v as f64).min(9_223_372_036_854_774_784.0) as i64
        }
    };
    m.len() == l.len() && m.iter().zip(l).all(|(&m, &l)| nearest(m) == l)
}

/// One call on both keys: the same reply, the same expiry, and the expiry is the reply's
/// reset after a change.
fn check_call(
    c: &mut Connection,
    twin: &Twin,
    mkey: &str,
    lkey: &str,
    call: &Call,
    log: &[String],
) -> (Vec<i64>, bool) {
    let before = pexpiretime(c, mkey);
    let module = twin.module(c, mkey, &call.words);
    let lua = twin.lua(c, lkey, &call.words);
    let what = || {
        let tail = log.len().saturating_sub(12);
        format!(
            "{} {mkey} {}\n  module {module:?}\n  lua    {lua:?}\n  after {} calls, the last: {:#?}",
            twin.command,
            call.words.join(" "),
            log.len(),
            &log[tail..]
        )
    };
    assert!(same(&module, &lua), "{}", what());
    let reply = match &module {
        Ok(reply) => reply.clone(),
        Err(e) => panic!("{e}: {}", what()),
    };
    let (m, l) = (pexpiretime(c, mkey), pexpiretime(c, lkey));
    assert_eq!(m, l, "PEXPIRETIME: {}", what());
    if reply[0] == 1 && call.cost > 0 {
        assert_eq!(
            m,
            call.now as i64 + reply[4],
            "a change sets the expiry at NOW + reset_after_ms: {}",
            what()
        );
    } else {
        assert_eq!(m, before, "a call that changes nothing: {}", what());
    }
    (reply, before != -2)
}

fn server_and_twins() -> (Server, Connection, [Twin; 3]) {
    let server = Server::start(&[]);
    let mut c = server.conn();
    let twins = [
        Twin::load(&mut c, "RL.FIXED", FIXED),
        Twin::load(&mut c, "RL.SLIDE", SLIDE),
        Twin::load(&mut c, "RL.TOKEN", TOKEN),
    ];
    (server, c, twins)
}

#[test]
fn fixed_twin_answers_as_the_module() {
    let (_server, mut c, [fixed, _, _]) = server_and_twins();
    let cov = compare(&mut c, &fixed, &FixedGen, 1000, 30, 150);
    assert_eq!(cov["calls"], 4500);
    covered(&cov, &EVERY_KIND, 50);
}

#[test]
fn slide_twin_answers_as_the_module() {
    let (_server, mut c, [_, slide, _]) = server_and_twins();
    let cov = compare(&mut c, &slide, &SlideGen, 2000, 30, 150);
    assert_eq!(cov["calls"], 4500);
    covered(&cov, &EVERY_KIND, 50);
    covered(&cov, &["several windows", "older windows kept"], 50);
    // (slide_twin_keeps_and_forgets_what_older_windows_count merges them on purpose.)
    covered(&cov, &["three older windows kept"], 5);
}

#[test]
fn token_twin_answers_as_the_module() {
    let (_server, mut c, [_, _, token]) = server_and_twins();
    let cov = compare(&mut c, &token, &TokenGen, 3000, 30, 150);
    assert_eq!(cov["calls"], 4500);
    covered(&cov, &EVERY_KIND, 50);
}

/// Runs `lines` (ms after T0, and the words after the key but NOW) on a module key and a
/// twin key, comparing every reply and expiry.
fn scenario(c: &mut Connection, twin: &Twin, name: &str, lines: &[(u64, &str)]) {
    let (mkey, lkey) = (format!("m:{name}"), format!("l:{name}"));
    let mut log = Vec::new();
    for &(at, line) in lines {
        let now = T0 + at;
        let mut words: Vec<String> = line.split_whitespace().map(String::from).collect();
        let cost = words
            .iter()
            .position(|w| w == "COST")
            .map_or(1, |i| words[i + 1].parse().unwrap());
        words.extend(["NOW".into(), now.to_string()]);
        check_call(c, twin, &mkey, &lkey, &Call { words, cost, now }, &log);
        log.push(line.to_string());
    }
}

#[test]
fn slide_twin_keeps_and_forgets_what_older_windows_count() {
    let (_server, mut c, [_, slide, _]) = server_and_twins();
    // docs/commands.md: three calls at 3 per 10 s, one at 5 per 1 s counts only its own
    // second, and the next 3 per 10 s call still counts all four.
    scenario(
        &mut c,
        &slide,
        "retention",
        &[
            (0, "3 10000"),
            (1, "3 10000"),
            (2, "3 10000"),
            (3000, "5 1000"),
            (3001, "3 10000"),
            (9000, "5 1000"),
            (10001, "3 10000"),
            (12000, "3 10000 COST 0"),
        ],
    );
    // Five windows alternating: the key keeps three longer ones, merging the two used last.
    let five: Vec<(u64, String)> = (0..40)
        .map(|i| {
            let w = [100_000, 50_000, 20_000, 10_000, 1000][i % 5];
            (i as u64 * 700, format!("100 {w}"))
        })
        .collect();
    let five: Vec<(u64, &str)> = five.iter().map(|(t, l)| (*t, l.as_str())).collect();
    scenario(&mut c, &slide, "five", &five);
    // The merge shows: a 30 s window used at 2 ms merged with the 10 s one used at 20 s
    // keeps the key until 50 s, past the 40 s window's end.
    scenario(
        &mut c,
        &slide,
        "merge",
        &[
            (0, "10 40000"),
            (1, "10 35000"),
            (2, "10 30000"),
            (20000, "10 10000"),
            (20001, "10 1000"),
            (45000, "10 30000 COST 0"),
            (45001, "10 30000"),
            (49000, "10 40000 COST 0"),
        ],
    );
    // An older window whose span ends at the very call is let go: what only it counted goes.
    scenario(
        &mut c,
        &slide,
        "ends",
        &[
            (0, "9 10000"),
            (5000, "9 1000"),
            (10000, "9 1000"),
            (10001, "9 10000 COST 0"),
        ],
    );
    // Past 2^32 - 1 units kept, a call keeps only what its own windows count: the 3e9 units
    // of a 10 s window go when a 1 s call records 3e9 more, and a 10 s call then counts only
    // those.
    scenario(
        &mut c,
        &slide,
        "full",
        &[
            (0, "4294967295 10000 COST 3000000000"),
            (2000, "4294967295 1000 COST 3000000000"),
            (2001, "4294967295 10000 COST 1000000000"),
            (2002, "4294967295 10000 COST 400000000"),
            (2003, "4294967295 10000 COST 0"),
        ],
    );
    // Which older window decides what is kept past 2^32 - 1 units: the longest. The 2e9
    // units at 0 only the 20 s window counts; with them the 2.3e9 at 15 s do not fit, and
    // the key forgets what only its older windows count.
    scenario(
        &mut c,
        &slide,
        "longest",
        &[
            (0, "4294967295 20000 COST 2000000000"),
            (6000, "4294967295 10000"),
            (14000, "4294967295 1000"),
            (15000, "4294967295 1000 COST 2300000000"),
            (15001, "4294967295 20000 COST 0"),
        ],
    );
    // A refusal whose wait is many records away (a bisection), in several windows.
    let mut busy: Vec<(u64, String)> = (0..200)
        .map(|i| (i * 3, "300 1000 1000 10000".to_string()))
        .collect();
    busy.push((700, "300 1000 1000 10000 COST 150".into()));
    busy.push((701, "300 1000 250 10000 COST 250".into()));
    busy.push((702, "300 1000 199 10000 COST 100".into()));
    let busy: Vec<(u64, &str)> = busy.iter().map(|(t, l)| (*t, l.as_str())).collect();
    scenario(&mut c, &slide, "busy", &busy);
}

#[test]
fn fixed_twin_moves_the_end_as_the_module() {
    let (_server, mut c, [fixed, _, _]) = server_and_twins();
    // T0 is a multiple of 2 s: a 2 s period that starts with the open 1 s window holds it.
    assert_eq!(T0 % 2000, 0);
    scenario(
        &mut c,
        &fixed,
        "aligned",
        &[
            (0, "5 1000 ALIGN"),
            (10, "5 2000 ALIGN"),
            (20, "5 2000 ALIGN COST 0"),
            (1500, "5 1000 ALIGN"),
            (2500, "5 1000 ALIGN"),
            (2600, "5 2000 ALIGN"),
            (2700, "5 500"),
            (2800, "5 5000"),
            (2900, "5 5000 COST 0"),
        ],
    );
}

#[test]
fn token_twin_retimes_what_is_owed() {
    let (_server, mut c, [_, _, token]) = server_and_twins();
    scenario(
        &mut c,
        &token,
        "retime",
        &[
            (0, "120 60000 COST 100"),
            (10, "120 7000"),
            (20, "120 60000 BURST 10"),
            (30, "3 2678400000 BURST 2147483647 COST 2147483647"),
            (40, "1 2678400000 BURST 2147483647 COST 1"),
            (50, "2147483647 1 COST 5"),
            (60, "7 3 COST 0"),
        ],
    );
}

/// A `NOW` behind the server clock, and no `NOW` at all: the replies of the module and the
/// twin, and the expiry they set from the server clock, the same give or take the time
/// between the two calls.
#[test]
fn twins_follow_the_server_clock_as_the_module() {
    let (_server, mut c, twins) = server_and_twins();
    // Slow enough that no unit comes back or leaves while the test runs.
    let specs: [(&Twin, &str); 4] = [
        (&twins[0], "5 60000"),
        (&twins[1], "5 60000 20 600000"),
        (&twins[2], "5 86400000 BURST 3"),
        // Past 2^52 ticks: the big-integer arithmetic.
        (&twins[2], "1 2678400000 BURST 2147483647"),
    ];
    let mut rng = Rng::new(7);
    for (n, (twin, spec)) in specs.into_iter().enumerate() {
        // Behind the server clock by about 5 s, moving forward, now and then back.
        let start = unix_ms() - 5000;
        for (clock, calls) in [("lag", 40), ("server", 20)] {
            let mkey = format!("m:{clock}:{n}:{}", twin.command);
            let lkey = format!("l:{clock}:{n}:{}", twin.command);
            // The two keys' records were made up to this far apart on the server clock.
            let mut apart = 0;
            for i in 0..calls {
                let mut words: Vec<String> = spec.split(' ').map(String::from).collect();
                if clock == "lag" {
                    words.extend(["NOW".into(), (start + i * 20 + rng.below(40)).to_string()]);
                }
                let t0 = unix_ms();
                let module = twin.module(&mut c, &mkey, &words).expect("module");
                let lua = twin.lua(&mut c, &lkey, &words).expect("lua");
                let (m, l) = (pexpiretime(&mut c, &mkey), pexpiretime(&mut c, &lkey));
                let pttl: i64 = redis::cmd("PTTL").arg(&lkey).query(&mut c).unwrap();
                let now_apart = (unix_ms() - t0 + 1) as i64;
                // Times read on the server clock differ by how far apart this call's two
                // halves ran, and by how far apart the records they count were made.
                let slack = apart + now_apart;
                apart = apart.max(now_apart);
                let what = format!("{} {}: {module:?} {lua:?}", twin.command, words.join(" "));
                if clock == "lag" {
                    // Decided at the same times.
                    assert_eq!(module, lua, "{what}");
                } else {
                    // The server clock moved between the calls, and the waits as much.
                    assert_eq!(module[..3], lua[..3], "{what}");
                    for f in 3..5 {
                        assert!((module[f] - lua[f]).abs() <= slack, "{what}");
                    }
                }
                assert!((m - l).abs() <= slack, "PEXPIRETIME {m} {l}: {what}");
                if lua[0] == 1 {
                    // Measured from the server clock: at most the reset, less at most how
                    // far the call was behind the key's latest time.
                    assert!(
                        pttl <= lua[4] && pttl >= lua[4] - slack - 60,
                        "PTTL {pttl}: {what}"
                    );
                }
            }
        }
    }
}

/// Calls at the start of Unix time (`NOW` below a window: every record is in it), far behind
/// the server clock: the same replies, and the same expiry give or take the time between the
/// two calls.
#[test]
fn twins_agree_at_the_start_of_time() {
    let (_server, mut c, [fixed, slide, token]) = server_and_twins();
    let lines: [(&Twin, &[(u64, &str)]); 3] = [
        (
            &fixed,
            &[
                (0, "3 1000"),
                (5, "3 1000 ALIGN COST 2"),
                (7, "3 1000"),
                (999, "3 1000"),
                (1000, "3 1000"),
            ],
        ),
        (
            &slide,
            &[
                (0, "3 1000"),
                (1, "3 1000 COST 2"),
                (2, "3 1000 5 100000"),
                (3, "2 50 3 1000"),
                (60, "2 50"),
                (61, "3 1000 COST 3"),
            ],
        ),
        (
            &token,
            &[
                (0, "3 1000"),
                (0, "3 1000 COST 2"),
                (1, "3 1000"),
                (400, "3 1000 BURST 1"),
                (401, "5 100 COST 5"),
            ],
        ),
    ];
    for (twin, lines) in lines {
        let (mkey, lkey) = (
            format!("m:epoch:{}", twin.command),
            format!("l:epoch:{}", twin.command),
        );
        let mut apart = 0;
        for &(now, line) in lines {
            let mut words: Vec<String> = line.split(' ').map(String::from).collect();
            words.extend(["NOW".into(), now.to_string()]);
            let t0 = unix_ms();
            let module = twin.module(&mut c, &mkey, &words);
            let lua = twin.lua(&mut c, &lkey, &words);
            let (m, l) = (pexpiretime(&mut c, &mkey), pexpiretime(&mut c, &lkey));
            let now_apart = (unix_ms() - t0 + 1) as i64;
            let what = format!("{} {line} NOW {now}: {module:?} {lua:?}", twin.command);
            assert_eq!(module, lua, "{what}");
            assert!(
                (m - l).abs() <= apart + now_apart,
                "PEXPIRETIME {m} {l}: {what}"
            );
            apart = apart.max(now_apart);
        }
    }
}

/// Bad input gets the module's error from the twin, word for word.
#[test]
fn twins_answer_bad_input_with_the_module_errors() {
    let (_server, mut c, [fixed, slide, token]) = server_and_twins();
    let common = [
        "",
        "1",
        "0 1000",
        "abc 1000",
        "-5 1000",
        "+10 1000",
        "007 1000",
        "1.5 1000",
        "4294967296 1000",
        "18446744073709551616 1000",
        "10 0",
        "10 2678400001",
        "10 abc",
        "10 0s",
        "10 32d",
        "10 60sec",
        "10 1w",
        "10 1.5s",
        "10 01s",
        "10 -1s",
        "10 s",
        "10 99999999999999999999d",
        "10 1000 COST",
        "10 1000 COST -1",
        "10 1000 COST x",
        "10 1000 COST 9223372036854775808",
        "10 1000 COST 99999999999999999999",
        "10 1000 COST 1 cost 2",
        "10 1000 NOW",
        "10 1000 NOW 253402300800000",
        "10 1000 NOW 1 now 2",
        "10 1000 NOW -0",
        "10 1000 COST 0.5",
        "10 1000 COST 1e2",
        "10 1000 COST 0x10",
        "10 1000 NOW 100000000000000000",
        "1e2 1000",
        "10 1000 FOO 1",
        "10 1000 COST 1 10 1000",
        "10 1000 héllo",
        "10 1000 \u{fffd}x",
        "10 1000 ABCDEFGHIJABCDEFGHIJABCDEFGHIJABCDEFGHIJABCDEFGHIJABCDEFGHIJABCDEFGHIJ",
    ];
    let cases: [(&Twin, &[&str]); 3] = [
        (
            &fixed,
            &[
                "10 1000 ALIGN ALIGN",
                "10 1000 BURST 2",
                "10 1000 ALIGN 5",
                "4294967296 1000 ALIGN",
            ],
        ),
        (
            &slide,
            &[
                "10",
                "10 1000 5",
                "10 1000 5 abc",
                "COST 1",
                "10 1000 ALIGN",
                "1 1 2 2 3 3 4 4 5 5 6 6 7 7 8 8 9 9",
                "10 1000 0 1000",
                "10 1000 5 0",
            ],
        ),
        (
            &token,
            &[
                "2147483648 1000",
                "10 1000 BURST 0",
                "10 1000 BURST 2147483648",
                "10 1000 BURST",
                "10 1000 BURST 2 BURST 3",
                "10 1000 ALIGN",
                "10 1000 MAXDELAY 5",
            ],
        ),
    ];
    let mut compared = 0;
    for (twin, own) in cases {
        for line in common.iter().chain(own.iter()) {
            let words: Vec<String> = line
                .split(' ')
                .filter(|w| !w.is_empty())
                .map(String::from)
                .collect();
            let module = twin.module(&mut c, "bad:m", &words);
            let lua = twin.lua(&mut c, "bad:l", &words);
            assert_eq!(module, lua, "{} {line}", twin.command);
            assert!(module.is_err(), "{} {line}: {module:?}", twin.command);
            compared += 1;
        }
    }
    assert!(compared > 40);
    // Bytes that are not UTF-8, quoted as the module quotes them.
    for word in [
        &b"\xff\xfe"[..],
        b"a\xe2\x82",
        b"\xe0\x80z",
        b"\xf0\x9f\x98\x80ok",
        b"\xed\xa0\x80",
    ] {
        for twin in [&fixed, &slide, &token] {
            let mut m = redis::cmd(twin.command);
            m.arg("bad:m").arg("10").arg("1000").arg(word);
            let mut l = redis::cmd("EVALSHA");
            l.arg(&twin.sha)
                .arg(1)
                .arg("bad:l")
                .arg("10")
                .arg("1000")
                .arg(word);
            assert_eq!(answer(m.query(&mut c)), answer(l.query(&mut c)), "{word:?}");
        }
    }
    // Nothing was written.
    assert_eq!(
        run(&mut c, &["EXISTS", "bad:m", "bad:l"]).unwrap(),
        Value::Int(0)
    );

    // A key of another type, and a key of another kind.
    run(&mut c, &["SET", "str", "x"]).unwrap();
    run(&mut c, &["ZADD", "zset", "1", "a"]).unwrap();
    let now = format!("{T0}");
    for twin in [&fixed, &slide, &token] {
        for key in ["str", "zset"] {
            let words: Vec<String> = ["10", "1000", "NOW", &now].map(String::from).to_vec();
            let module = twin.module(&mut c, key, &words);
            let lua = twin.lua(&mut c, key, &words);
            assert_eq!(module, lua, "{} on {key}", twin.command);
        }
    }
    for (a, b) in [
        (&fixed, &token),
        (&token, &slide),
        (&slide, &fixed),
        (&fixed, &slide),
    ] {
        let words: Vec<String> = ["10", "1000", "NOW", &now].map(String::from).to_vec();
        let (mkey, lkey) = (
            format!("kind:m:{}", a.command),
            format!("kind:l:{}", a.command),
        );
        a.module(&mut c, &mkey, &words).unwrap();
        a.lua(&mut c, &lkey, &words).unwrap();
        let module = b.module(&mut c, &mkey, &words);
        let lua = b.lua(&mut c, &lkey, &words);
        assert_eq!(module, lua, "{} on a {} key", b.command, a.command);
    }
    // The twin is called with its one key.
    assert_eq!(
        err(&mut c, &["EVALSHA", &fixed.sha, "0", "10", "1000"]),
        "ERR wrong number of arguments for 'RL.FIXED' command"
    );
}
