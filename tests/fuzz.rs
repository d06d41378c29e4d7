//! Fuzzing what a server loads: RESTORE of damaged DUMP output and RL.RESTORE of damaged
//! payloads, for every kind of limiter. Each damaged value is refused with an error and no
//! key, or loads as a sound limiter; the server never goes down.
//!
//! `make test` runs a short round (FUZZ_ITERATIONS, default 2000 per target); `make fuzz`
//! runs a long one.

mod common;

use common::{run, unix_ms, Server};
use redis::{Connection, Value};

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
