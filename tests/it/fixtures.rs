//! Files written by an earlier build load and answer as they did: an RDB and AOFs holding
//! a key of every kind, made at commit 703f60d (the module before its reshaping into one
//! unit per kind), with `cargo test --release --test it fixtures::make_fixtures -- --ignored`
//! (which writes them again: only when the formats are meant to change).
//!
//! The keys are made at times in 2100, so that the files never expire; each test loads a
//! file and checks every key's `RL.PEEK`, `PEXPIRETIME` and `DEBUG DIGEST-VALUE` against
//! what the build that wrote it answered (the table below), then a call on each.

use crate::common::{digest, int, run, text, Server};
use redis::{Connection, Value};

/// 2100-01-01T00:00:00Z.
const T: u64 = 4_102_444_800_000;

/// The calls that make the keys, each at `T` plus its offset.
const CALLS: &[(u64, &str)] = &[
    (0, "RL.SLIDE fx:slide 5 1000 100 60000 COST 2"),
    (250, "RL.SLIDE fx:slide 5 1000 100 60000 COST 3"),
    (0, "RL.SLIDE fx:slide-kept 3 10000"),
    (10, "RL.SLIDE fx:slide-kept 3 10000"),
    (20, "RL.SLIDE fx:slide-kept 100 1000"),
    (30, "RL.SLIDE fx:slide-kept 100 1000"),
    (40, "RL.SLIDE fx:slide-kept 100 1000"),
    (50, "RL.SLIDE fx:slide-kept 100 1000"),
    (60, "RL.SLIDE fx:slide-kept 100 1000"),
    (70, "RL.SLIDE fx:slide-kept 100 1000"),
    (80, "RL.SLIDE fx:slide-kept 100 1000"),
    (90, "RL.SLIDE fx:slide-kept 100 1000"),
    (0, "RL.TOKEN fx:token 10 1000 BURST 5 COST 3"),
    (50, "RL.TOKEN fx:token 10 1000 BURST 5 COST 2"),
    (0, "RL.LEAKY fx:leaky 4 1000 MAXDELAY 800"),
    (0, "RL.LEAKY fx:leaky 4 1000 MAXDELAY 800"),
    (0, "RL.FIXED fx:fixed 10 60000 ALIGN COST 4"),
    (100, "RL.FIXED fx:fixed 10 60000 ALIGN"),
    (0, "RL.SUBWIN fx:subwin 100 60000 1000 COST 3"),
    (1500, "RL.SUBWIN fx:subwin 100 60000 1000"),
    (2000, "RL.SUBWIN fx:subwin 10 6000 100 COST 2"),
    (0, "RL.ACQUIRE fx:lease 5 60000"),
    (1, "RL.ACQUIRE fx:lease 5 30000 ID job-1 COST 2"),
    (2, "RL.ACQUIRE fx:lease 5 90000"),
    (3, "RL.RELEASE fx:lease 4102444800000-0"),
    (4, "RL.CHARGE fx:token COST 4"),
    (5, "RL.REFUND fx:slide COST 1"),
    (
        6,
        "RL.ALL 2 {fx}:a {fx}:b SLIDE 10 60000 TOKEN 100 60000 COST 7",
    ),
];

/// Each key after the calls, as the build that wrote the files answered: `RL.PEEK` at
/// `T + 3000`, `PEXPIRETIME` and `DEBUG DIGEST-VALUE`.
const KEYS: &[(&str, [i64; 5], i64, &str)] = &[
    (
        "fx:slide",
        [1, 5, 5, 0, 57250],
        4102444860250,
        "e859e3a7ff3085921cc663f9294402611e1322cd",
    ),
    (
        "fx:slide-kept",
        [1, 100, 100, 0, 7010],
        4102444810010,
        "01a2e1a3fea88a5733c783266ffc45d78051f941",
    ),
    (
        "fx:token",
        [1, 5, 5, 0, 0],
        4102444800900,
        "2fa70487d07e6d7612e3eee825ac8291fff1765f",
    ),
    (
        "fx:leaky",
        [1, 4, 4, 0, 0],
        4102444800500,
        "2b40b580e1858a6cbbb16ab93e88d311e474aaa4",
    ),
    (
        "fx:fixed",
        [1, 10, 5, 0, 57000],
        4102444860000,
        "74376d90e14aab3936664a4d56155c5857a6f6a3",
    ),
    (
        "fx:subwin",
        [1, 10, 4, 0, 58999],
        4102444861999,
        "544f6d5897ac3d2456e64a5a72450f072134c896",
    ),
    (
        "fx:lease",
        [1, 5, 2, 0, 87002],
        4102444890002,
        "f4f4a72fbc3643d689ca608592f1f0471a8c2156",
    ),
    (
        "{fx}:a",
        [1, 10, 9, 0, 57006],
        4102444860006,
        "5e964871bfebe7c3777ad8364f0b38c886112bc4",
    ),
    (
        "{fx}:b",
        [1, 100, 97, 0, 1206],
        4102444804206,
        "b34ae3751dbd6bd48bc493eee773aad6a83c1850",
    ),
];

fn peek(c: &mut Connection, key: &str) -> [i64; 5] {
    let v: Vec<i64> = redis::cmd("RL.PEEK")
        .arg(key)
        .arg("NOW")
        .arg(T + 3000)
        .query(c)
        .unwrap_or_else(|e| panic!("RL.PEEK {key}: {e}"));
    v.try_into().expect("five fields")
}

/// What every key answers now: its peek, expiry and digest.
fn answers(c: &mut Connection) -> Vec<(String, [i64; 5], i64, String)> {
    KEYS.iter()
        .map(|(key, ..)| {
            (
                key.to_string(),
                peek(c, key),
                int(c, &["PEXPIRETIME", key]),
                digest(c, key),
            )
        })
        .collect()
}

/// The table above, as the build that wrote the files printed it.
fn expected() -> Vec<(String, [i64; 5], i64, String)> {
    KEYS.iter()
        .map(|(k, p, e, d)| (k.to_string(), *p, *e, d.to_string()))
        .collect()
}

fn assert_answers(c: &mut Connection, what: &str) {
    assert_eq!(answers(c), expected(), "{what}");
    // And each key takes a call of its kind (a zero-cost one changes nothing).
    for line in [
        "RL.SLIDE fx:slide 5 1000 100 60000 COST 0",
        "RL.TOKEN fx:token 10 1000 BURST 5 COST 0",
        "RL.ACQUIRE fx:lease 5 60000 COST 0",
    ] {
        let words: Vec<String> = line
            .split(' ')
            .map(String::from)
            .chain(["NOW".to_string(), (T + 3000).to_string()])
            .collect();
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        let reply = run(c, &w).unwrap_or_else(|e| panic!("{what}: {line}: {e}"));
        assert!(
            matches!(reply, Value::Array(_)),
            "{what}: {line}: {reply:?}"
        );
    }
}

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn loads_the_rdb_of_every_kind() {
    let server = Server::start_with_files(
        &[(&fixture("every-kind.rdb"), "fixture.rdb")],
        &["--dbfilename", "fixture.rdb"],
    );
    assert_answers(&mut server.conn(), "every-kind.rdb");
}

#[test]
fn loads_the_aof_of_every_kind() {
    for name in ["every-kind-effects.aof", "every-kind-rewritten.aof"] {
        let server = Server::start_with_files(
            &[(&fixture(name), "fixture.aof")],
            &["--appendonly", "yes", "--appendfilename", "fixture.aof"],
        );
        assert_answers(&mut server.conn(), name);
    }
}

/// Writes the fixtures again (with the build under test) and prints the table of answers:
/// `cargo test --release --test it fixtures::make_fixtures -- --ignored --nocapture`.
#[test]
#[ignore]
fn make_fixtures() {
    let server = Server::start(&["--appendonly", "yes", "--aof-use-rdb-preamble", "no"]);
    let mut c = server.conn();
    for (dt, line) in CALLS {
        let words: Vec<String> = line
            .split(' ')
            .map(String::from)
            .chain(["NOW".to_string(), (T + dt).to_string()])
            .collect();
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        run(&mut c, &w).unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    for (key, peek, expiry, digest) in answers(&mut c) {
        println!("    (\"{key}\", {peek:?}, {expiry}, \"{digest}\"),");
    }
    run(&mut c, &["SAVE"]).unwrap();
    std::fs::copy(server.path("dump.rdb"), fixture("every-kind.rdb")).unwrap();
    let dir = server.path("appendonlydir");
    let manifest = std::fs::read_to_string(dir.join("appendonly.aof.manifest")).unwrap();
    let file = |kind: &str| {
        manifest
            .lines()
            .find(|l| l.ends_with(&format!("type {kind}")))
            .and_then(|l| l.split_whitespace().nth(1))
            .map(|f| dir.join(f))
            .expect("an AOF file")
    };
    std::fs::copy(file("i"), fixture("every-kind-effects.aof")).unwrap();
    run(&mut c, &["BGREWRITEAOF"]).unwrap();
    crate::common::wait_until("the AOF rewrite", 30, || {
        let info = text(&mut c, &["INFO", "persistence"]);
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
    });
    let manifest = std::fs::read_to_string(dir.join("appendonly.aof.manifest")).unwrap();
    let base = manifest
        .lines()
        .find(|l| l.ends_with("type b"))
        .and_then(|l| l.split_whitespace().nth(1))
        .map(|f| dir.join(f))
        .expect("a base AOF");
    std::fs::copy(base, fixture("every-kind-rewritten.aof")).unwrap();
}
