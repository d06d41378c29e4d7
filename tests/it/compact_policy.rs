//! Compact policies (`RL.POLICY SET name COMPACT ...`): a policy's subjects kept in one key
//! per hash slot (`name|~|{tag}`), tens of bytes each. They answer as keyed policies do, for
//! the same calls at the same `NOW` (a property over random calls, policy changes among
//! them); their families replicate as their effects, persist (RDB, AOF and its rewrite),
//! travel by DUMP/RESTORE and MIGRATE; a subject is read (`RL.POLICY SUBJECT`) and removed
//! (`RL.POLICY FORGET`) alone; subjects expire, swept a few at each hit, and a family key
//! expires with its last subject.

use crate::common::durability::Rng;
use crate::common::policy::{line, ok, rewrite_aof};
use crate::common::{dataset_digest, err, int, server, text, unix_ms, wait_until, Server};
use redis::{Connection, Value};
use rstest::rstest;

/// Limiters both forms take, with the parameters a change moves between.
const LIMITERS: [&str; 10] = [
    "a TOKEN 3 1000",
    "a TOKEN 5 2000 BURST 2",
    "b LEAKY 2 1000 MAXDELAY 500",
    "b LEAKY 4 1000",
    "c FIXED 3 1000",
    "c FIXED 2 700 ALIGN",
    "d THROTTLE 2 3 1",
    "d THROTTLE 4 2 1",
    "e SLIDE 4 1000",
    "e SLIDE 3 800 6 3000",
];

/// A definition of some of [`LIMITERS`] (each name at most once), picked by `rng`: the
/// names in `names` (a bit each), each with one of its two sets of numbers.
fn definition_of(rng: &mut Rng, names: u64) -> String {
    let mut words = Vec::new();
    for (i, pair) in LIMITERS.chunks(2).enumerate() {
        if names >> i & 1 == 1 {
            words.push(pair[rng.below(2) as usize].to_string());
        }
    }
    if rng.below(6) == 0 {
        // One of them a shadow limiter.
        let last = words.pop().unwrap_or_default();
        words.push(format!("{last} SHADOW"));
    }
    words.join(" ")
}

/// A definition of any of [`LIMITERS`] (one at least).
fn definition(rng: &mut Rng) -> String {
    let names = 1 + rng.below(31);
    definition_of(rng, names)
}

/// Sets the policies `k` (keyed) and `c` (compact) to the same definition.
fn set_both(c: &mut Connection, def: &str) {
    ok(c, &format!("RL.POLICY SET k {def}"));
    ok(c, &format!("RL.POLICY SET c COMPACT {def}"));
}

fn subject_of(n: u64) -> String {
    match n % 5 {
        0 => format!("{{t}}:user:{n}"),
        _ => format!("user:{n:06}"),
    }
}

#[rstest]
fn compact_and_keyed_policies_answer_alike(server: Server) {
    let mut c = server.conn();
    for seed in 1..=6u64 {
        let mut rng = Rng::new(seed);
        // The same limiters throughout, their numbers changing (a limiter removed from a
        // compact policy forgets its states, where a keyed one's keys stay until they
        // expire: see docs/commands.md).
        // Seed 5 with a SLIDE limiter among others, seed 6 a SLIDE limiter alone.
        let names = match seed {
            5 => (1 + rng.below(31)) | 16,
            6 => 16,
            _ => 1 + rng.below(31),
        };
        set_both(&mut c, &definition_of(&mut rng, names));
        let mut now = unix_ms() + seed * 10_000_000;
        for step in 0..600 {
            match rng.below(40) {
                0 => set_both(&mut c, &definition_of(&mut rng, names)),
                1 => now -= rng.below(3000),
                _ => now += rng.below(400),
            }
            let subject = subject_of(seed * 1000 + rng.below(12));
            let cost = match rng.below(8) {
                0 => " COST 0".to_string(),
                1 => " COST 2".to_string(),
                2 => " COST 9".to_string(),
                _ => String::new(),
            };
            let call = |p: &str| format!("RL.HIT {p} {subject}{cost} NOW {now}");
            let keyed = line(&mut c, &call("k"));
            let compact = line(&mut c, &call("c"));
            assert_eq!(
                format!("{keyed:?}"),
                format!("{compact:?}"),
                "seed {seed}, step {step}: {}",
                call("c")
            );
            if rng.below(10) == 0 {
                let mut peek = |p: &str| {
                    line(
                        &mut c,
                        &format!("RL.POLICY SUBJECT {p} {subject} NOW {now}"),
                    )
                };
                let (pk, pc) = (peek("k"), peek("c"));
                assert_eq!(
                    format!("{pk:?}"),
                    format!("{pc:?}"),
                    "seed {seed}, step {step}"
                );
            }
            if rng.below(60) == 0 {
                let mut f = |p: &str| line(&mut c, &format!("RL.POLICY FORGET {p} {subject}"));
                let (fk, fc) = (f("k"), f("c"));
                assert_eq!(
                    format!("{fk:?}"),
                    format!("{fc:?}"),
                    "seed {seed}, step {step}"
                );
            }
        }
    }
}

/// Near the largest time a call takes (9999-12-31), limiters of long windows empty after it:
/// a family keeps such an empty time as its last second (2106), and answers as keys do.
#[rstest]
fn compact_and_keyed_policies_answer_alike_at_the_end_of_time(server: Server) {
    const MAX_TIMESTAMP: u64 = 253_402_300_799_999;
    const DAY: u64 = 86_400_000;
    let mut c = server.conn();
    set_both(
        &mut c,
        "a TOKEN 1 2678400000 BURST 1 SHADOW b LEAKY 1 2678400000 BURST 2147483647 \
         c FIXED 2147483647 2678400000 d THROTTLE 1000000 1 86400 e SLIDE 3 2678400000",
    );
    let mut rng = Rng::new(7);
    let mut now = MAX_TIMESTAMP - 40 * DAY;
    for step in 0..300 {
        now = (now + rng.below(DAY / 4)).min(MAX_TIMESTAMP);
        let subject = subject_of(rng.below(6));
        let cost = [1, 2, 5, 1 << 20, 2_147_483_647][rng.below(5) as usize];
        let hit = format!("{subject} COST {cost} NOW {now}");
        both_answer_alike(&mut c, &hit, step);
    }
}

/// `RL.HIT k <rest>` and `RL.HIT c <rest>` answer the same, at `step`.
fn both_answer_alike(c: &mut Connection, rest: &str, step: usize) {
    let keyed = line(c, &format!("RL.HIT k {rest}"));
    let compact = line(c, &format!("RL.HIT c {rest}"));
    assert_eq!(
        format!("{keyed:?}"),
        format!("{compact:?}"),
        "step {step}: RL.HIT c {rest}"
    );
}

/// A subject refused again and again is read once (its log and its family's name kept
/// for the next hit, keyed by what they are made from): whatever happens between two
/// refusals (its family deleted, the policy set again with other numbers, deleted and set
/// again, the same subject refused under another policy between), a compact policy
/// answers as the keyed one.
#[rstest]
fn refusals_answer_alike_whatever_happens_between(server: Server) {
    let mut c = server.conn();
    let base = unix_ms();
    let defs = [
        ("s SLIDE 3 60000", "s SLIDE 4 60000"),
        (
            "s SLIDE 2 60000 t TOKEN 2 60000",
            "s SLIDE 4 60000 t TOKEN 3 60000",
        ),
    ];
    for (round, (def, other)) in defs.iter().enumerate() {
        set_both(&mut c, def);
        ok(&mut c, &format!("RL.POLICY SET o COMPACT {def}"));
        let mut now = base + 100_000 * round as u64;
        let mut step = 0;
        let mut hit = |c: &mut Connection, now: u64| {
            step += 1;
            both_answer_alike(c, &format!("user:1 NOW {now}"), step);
        };
        for _ in 0..5 {
            now += 10;
            hit(&mut c, now);
        }
        // The same log under another policy, in the same slot: its own family.
        for _ in 0..4 {
            let _ = line(&mut c, &format!("RL.HIT o user:1 NOW {now}"));
        }
        hit(&mut c, now + 1);
        // Its family deleted (keyed: its keys), then hit again.
        for pattern in ["c|~|*", "k|*"] {
            let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut c).unwrap();
            assert!(!keys.is_empty(), "{pattern}");
            let _: i64 = redis::cmd("DEL").arg(&keys).query(&mut c).unwrap();
        }
        for _ in 0..5 {
            now += 10;
            hit(&mut c, now);
        }
        // Set again with other numbers (the same limiters: one removed would forget its
        // states in a family, where a keyed one's keys stay), then deleted and set again as
        // it was.
        set_both(&mut c, other);
        hit(&mut c, now + 20);
        for p in ["k", "c"] {
            let gone: i64 = redis::cmd("RL.POLICY")
                .arg("DEL")
                .arg(p)
                .query(&mut c)
                .unwrap();
            assert_eq!(gone, 1, "RL.POLICY DEL {p}");
        }
        set_both(&mut c, def);
        for _ in 0..5 {
            now += 10;
            hit(&mut c, now);
        }
    }
}

/// A SLIDE narrowed (a day's window made a minute's): a keyed log keeps the day's records
/// for the day (its retention, should the day's window come back); a family keeps a log of
/// at most 1 KB, so it keeps what the minute counts, and answers as the keyed policy does.
#[rstest]
fn a_narrowed_slide_answers_alike_past_what_an_entry_holds(server: Server) {
    let mut c = server.conn();
    set_both(&mut c, "s SLIDE 100 86400000");
    let mut now = unix_ms();
    for step in 0..600 {
        if step == 50 {
            set_both(&mut c, "s SLIDE 100 60000");
        }
        now += 1000;
        both_answer_alike(&mut c, &format!("user:1 NOW {now}"), step);
    }
}

#[rstest]
fn the_storage_of_a_policy_does_not_change_under_its_name(server: Server) {
    let mut c = server.conn();
    ok(&mut c, "RL.POLICY SET p per TOKEN 5 1000");
    let e = err(
        &mut c,
        &[
            "RL.POLICY",
            "SET",
            "p",
            "COMPACT",
            "per",
            "TOKEN",
            "5",
            "1000",
        ],
    );
    assert!(e.contains("does not change under its name"), "{e}");
    ok(&mut c, "RL.POLICY SET q COMPACT per TOKEN 5 1000");
    let e = err(
        &mut c,
        &["RL.POLICY", "SET", "q", "per", "TOKEN", "5", "1000"],
    );
    assert!(e.contains("does not change under its name"), "{e}");
    // Its numbers, and its limiters, change as a keyed policy's do.
    ok(
        &mut c,
        "RL.POLICY SET q COMPACT per TOKEN 7 1000 day FIXED 100 86400000",
    );
    line(&mut c, "RL.POLICY DEL p").unwrap();
    ok(&mut c, "RL.POLICY SET p COMPACT per TOKEN 5 1000");
    // Kinds whose state a family cannot hold are refused, naming the limiter; a SLIDE
    // limiter counting more than a family's entry keeps too.
    for (def, why) in [
        ("w SUBWIN 5 1000 100", "a compact policy holds TOKEN"),
        ("l ACQUIRE 5 1000", "a compact policy holds TOKEN"),
        ("log SLIDE 101 1000", "counts at most 100 requests a window"),
        (
            "log SLIDE 5 1000 101 60000",
            "counts at most 100 requests a window",
        ),
    ] {
        let words: Vec<&str> = ["RL.POLICY", "SET", "r", "COMPACT"]
            .into_iter()
            .chain(def.split(' '))
            .collect();
        let e = err(&mut c, &words);
        assert!(e.contains(why) && e.contains("limiter '"), "{def}: {e}");
    }
    ok(&mut c, "RL.POLICY SET r COMPACT log SLIDE 100 1000 5 10");
    // COMPACT is a word of the grammar (no limiter takes it as its name), once.
    let e = err(
        &mut c,
        &[
            "RL.POLICY",
            "SET",
            "r",
            "COMPACT",
            "COMPACT",
            "TOKEN",
            "1",
            "1",
        ],
    );
    assert!(!e.is_empty());
}

#[rstest]
fn a_family_is_one_key_in_its_subjects_slot(server: Server) {
    let mut c = server.conn();
    ok(&mut c, "RL.POLICY SET api COMPACT per TOKEN 10 1000");
    let t = unix_ms();
    for n in 0..200 {
        line(&mut c, &format!("RL.HIT api {{acme}}:user:{n} NOW {t}")).unwrap();
    }
    // One family: the subjects' common hash tag places it.
    let keys: Vec<String> = redis::from_redis_value(&line(&mut c, "KEYS *").unwrap()).unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let family = &keys[0];
    assert!(family.starts_with("api|~|{"), "{family}");
    assert_eq!(text(&mut c, &["TYPE", family]), "ratelimit");
    let e = err(&mut c, &["RL.PEEK", family]);
    assert!(e.contains("RL.POLICY SUBJECT"), "{e}");
    // A subject alone: read, and removed.
    let subject_7 = |c: &mut Connection| -> String {
        let state = line(c, &format!("RL.POLICY SUBJECT api {{acme}}:user:7 NOW {t}")).unwrap();
        format!("{state:?}")
    };
    let per = |fields: Value| {
        format!(
            "{:?}",
            Value::Array(vec![Value::Array(vec![
                Value::BulkString(b"per".to_vec()),
                fields
            ])])
        )
    };
    assert_eq!(
        subject_7(&mut c),
        per(Value::Array([1, 10, 9, 0, 100].map(Value::Int).to_vec()))
    );
    assert_eq!(
        int(&mut c, &["RL.POLICY", "FORGET", "api", "{acme}:user:7"]),
        1
    );
    assert_eq!(
        int(&mut c, &["RL.POLICY", "FORGET", "api", "{acme}:user:7"]),
        0
    );
    assert_eq!(subject_7(&mut c), per(Value::Nil));
    // The whole family is an ordinary key.
    assert!(int(&mut c, &["MEMORY", "USAGE", family]) > 199 * 12);
    assert_eq!(int(&mut c, &["DEL", family]), 1);
    let h = line(&mut c, &format!("RL.HIT api {{acme}}:user:8 NOW {t}")).unwrap();
    assert!(
        format!("{h:?}").starts_with("array([int(1), int(10), int(9),"),
        "{h:?}"
    );
}

/// Hits on a compact policy and a few changes of it, from a seed.
fn workload(c: &mut Connection, seed: u64, calls: u64) {
    let mut rng = Rng::new(seed);
    let t = unix_ms();
    for i in 0..calls {
        let s = subject_of(rng.below(300));
        let now = t + i * 3;
        line(c, &format!("RL.HIT c {s} NOW {now}")).unwrap();
        if rng.below(200) == 0 {
            // Each subject lives ten minutes (no key expires while a test compares).
            let def = definition(&mut rng);
            ok(
                c,
                &format!("RL.POLICY SET c COMPACT {def} z FIXED 100 600000"),
            );
        }
        if rng.below(100) == 0 {
            line(c, &format!("RL.POLICY FORGET c {s}")).unwrap();
        }
    }
}

fn synced(primary: &mut Connection, replica: &mut Connection) {
    let offset = |c: &mut Connection, field: &str| -> i64 {
        let info = text(c, &["INFO", "replication"]);
        info.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(-1)
    };
    let target = offset(primary, "master_repl_offset:");
    wait_until("the replica's offset", 30, || {
        offset(replica, "slave_repl_offset:") >= target
    });
}

/// Each key's digest and whether it expires.
fn key_digests(c: &mut Connection) -> std::collections::BTreeMap<String, (String, bool)> {
    let keys: Vec<String> = redis::from_redis_value(&line(c, "KEYS *").unwrap()).unwrap();
    keys.into_iter()
        .map(|k| {
            let d = crate::common::digest(c, &k);
            let expires = int(c, &["PTTL", &k]) >= 0;
            (k, (d, expires))
        })
        .collect()
}

/// Every key of `a` is in `b`, with the same value.
fn same_keys(a: &mut Connection, b: &mut Connection) {
    let keys: Vec<String> = redis::from_redis_value(&line(a, "KEYS *").unwrap()).unwrap();
    for k in keys {
        let (ta, tb) = (int(a, &["PTTL", &k]), int(b, &["PTTL", &k]));
        assert_eq!((ta < 0, ta == -2), (tb < 0, tb == -2), "{k}: {ta} / {tb}");
        let (da, db) = (crate::common::digest(a, &k), crate::common::digest(b, &k));
        if da != db {
            let dump = |c: &mut Connection| -> Option<Vec<u8>> {
                redis::cmd("DUMP").arg(&k).query(c).ok()
            };
            panic!("{k}: {:?} / {:?}", dump(a), dump(b));
        }
    }
}

#[rstest]
fn families_replicate_and_persist_as_they_are(server: Server) {
    let mut c = server.conn();
    ok(
        &mut c,
        "RL.POLICY SET c COMPACT a TOKEN 3 1000 b FIXED 5 60000 e SLIDE 4 1000",
    );
    let replica = server.replica();
    let mut r = replica.conn();
    workload(&mut c, 7, 1500);
    synced(&mut c, &mut r);
    let digest = dataset_digest(&mut c);
    assert_eq!(dataset_digest(&mut r), digest, "a replica by its effects");
    // A replica by a full sync (the RDB) holds the same.
    let fresh = server.replica();
    same_keys(&mut c, &mut fresh.conn());
    assert_eq!(
        dataset_digest(&mut fresh.conn()),
        digest,
        "a replica by a full sync"
    );
    // RDB: a reload.
    line(&mut c, "DEBUG RELOAD").unwrap();
    assert_eq!(dataset_digest(&mut c), digest, "DEBUG RELOAD");
}

#[test]
fn families_come_back_from_the_aof_and_its_rewrite() {
    // Every write in the AOF before its reply (a crash follows).
    let mut server = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = server.conn();
    ok(
        &mut c,
        "RL.POLICY SET c COMPACT a TOKEN 3 1000 b FIXED 5 600000 e SLIDE 4 1000",
    );
    workload(&mut c, 9, 600);
    // The effects, then the rewrite (its RDB preamble) and effects after it.
    for rewrite in [false, true] {
        if rewrite {
            rewrite_aof(&mut c);
            workload(&mut c, 10, 300);
        }
        let digest = dataset_digest(&mut c);
        let keys = key_digests(&mut c);
        server.crash_and_restart();
        c = server.conn();
        assert_eq!(key_digests(&mut c), keys, "rewritten: {rewrite}");
        assert_eq!(dataset_digest(&mut c), digest, "rewritten: {rewrite}");
    }
}

#[rstest]
fn families_travel_by_dump_restore_and_migrate(server: Server) {
    let mut c = server.conn();
    ok(
        &mut c,
        "RL.POLICY SET c COMPACT a TOKEN 3 1000 d THROTTLE 2 3 1 e SLIDE 4 1000",
    );
    workload(&mut c, 3, 600);
    let keys: Vec<String> = redis::from_redis_value(&line(&mut c, "KEYS c|~|*").unwrap()).unwrap();
    assert!(keys.len() > 10, "{keys:?}");
    let other = Server::start(&[]);
    let mut o = other.conn();
    ok(
        &mut o,
        "RL.POLICY SET c COMPACT a TOKEN 3 1000 d THROTTLE 2 3 1 e SLIDE 4 1000",
    );
    for k in &keys {
        let before = crate::common::digest(&mut c, k);
        let dump: Vec<u8> = redis::cmd("DUMP").arg(k).query(&mut c).unwrap();
        let pttl = int(&mut c, &["PTTL", k]);
        let _: () = redis::cmd("RESTORE")
            .arg(k)
            .arg(pttl)
            .arg(&dump)
            .arg("REPLACE")
            .query(&mut c)
            .unwrap();
        assert_eq!(crate::common::digest(&mut c, k), before, "{k}");
        let _: Value = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(other.port)
            .arg(k)
            .arg(0)
            .arg(5000)
            .query(&mut c)
            .unwrap();
        assert_eq!(crate::common::digest(&mut o, k), before, "{k}");
    }
    // The subjects answer there as they would have here.
    let t = unix_ms();
    let a = line(
        &mut o,
        &format!("RL.POLICY SUBJECT c {} NOW {t}", subject_of(3)),
    )
    .unwrap();
    assert!(matches!(a, Value::Array(_)), "{a:?}");
}

#[rstest]
fn subjects_expire_and_families_with_them(server: Server) {
    let mut c = server.conn();
    // Empty again a second after a hit: a bucket and a log (entries of their own lengths).
    ok(
        &mut c,
        "RL.POLICY SET c COMPACT a TOKEN 1 1000 s SLIDE 1 1000",
    );
    for n in 0..400 {
        line(&mut c, &format!("RL.HIT c {{f}}:{n}")).unwrap();
    }
    let family = {
        let keys: Vec<String> = redis::from_redis_value(&line(&mut c, "KEYS *").unwrap()).unwrap();
        assert_eq!(keys.len(), 1);
        keys[0].clone()
    };
    let full = int(&mut c, &["MEMORY", "USAGE", &family]);
    let pttl = int(&mut c, &["PTTL", &family]);
    assert!((1..=3000).contains(&pttl), "{pttl}");
    // Hits of one subject sweep the others once they are empty: memory comes back.
    wait_until("the family swept", 30, || {
        line(&mut c, "RL.HIT c {f}:live").unwrap();
        int(&mut c, &["MEMORY", "USAGE", &family]) < full / 4
    });
    // Left alone, the family key goes with its last subject.
    wait_until("the family expired", 30, || {
        int(&mut c, &["EXISTS", &family]) == 0
    });
}
