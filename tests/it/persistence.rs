//! Limiters survive DEBUG RELOAD, restarts from RDB and from AOF (before and after a
//! rewrite), COPY and DUMP/RESTORE, with the same answers, digests and expiry times.

use crate::common::{dataset_digest, digest, int, rl, run, server, unix_ms, Server};
use redis::{Connection, Value};
use rstest::rstest;

/// A few limiters with history, at times near the real clock so that they stay alive.
fn fill(c: &mut Connection, t: u64) {
    for i in 0..20 {
        rl(
            c,
            &format!("RL.SLIDE a 10 1000 100 60000 NOW {}", t + i * 7),
        );
    }
    rl(c, &format!("RL.SLIDE b 1000 3600000 COST 17 NOW {t}"));
    rl(c, &format!("RL.SLIDE b 1000 3600000 COST 3 NOW {}", t + 5));
    rl(c, &format!("RL.REFUND b COST 2 NOW {}", t + 6));
    rl(c, &format!("RL.SLIDE c 1 600000 NOW {t}"));
    for i in 0..7 {
        rl(c, &format!("RL.TOKEN tok 5 3000 BURST 4 NOW {}", t + i * 3));
        rl(
            c,
            &format!("RL.LEAKY leak 3 1000 MAXDELAY 2000 NOW {}", t + i * 5),
        );
    }
    rl(c, &format!("RL.REFUND leak NOW {}", t + 40));
    rl(c, &format!("RL.FIXED fix 10 60000 COST 3 NOW {t}"));
    rl(c, &format!("RL.FIXED fixa 10 60000 ALIGN NOW {}", t + 9));
    for i in 0..30 {
        rl(c, &format!("RL.SUBWIN sw 20 60000 1000 NOW {}", t + i * 37));
    }
    rl(c, &format!("RL.REFUND sw COST 4 NOW {}", t + 1200));
    rl(c, &format!("RL.SUBWIN swx 3 500 1 COST 2 NOW {t}"));
    // A shorter window after a longer one: retentions pending (encoding version 2), and a
    // fixed window kept open for the longer window that joined it.
    for i in 0..3 {
        rl(c, &format!("RL.SLIDE ra 3 10000 NOW {}", t + i * 100));
        rl(c, &format!("RL.SUBWIN rs 3 10000 1000 NOW {}", t + i * 100));
    }
    rl(c, &format!("RL.SLIDE ra 5 1000 NOW {}", t + 1250));
    rl(c, &format!("RL.SUBWIN rs 5 1000 100 NOW {}", t + 2500));
    rl(c, &format!("RL.FIXED rf 5 1000 NOW {t}"));
    rl(c, &format!("RL.FIXED rf 3 10000 NOW {}", t + 100));
}

/// The longer window of each key filled with a retention, and what it has left: nothing
/// (4 units in it) for the log and the ring, 1 (2 units) for the fixed window.
const LONGER: [(&str, &str, i64); 3] = [
    ("ra", "RL.SLIDE ra 3 10000", 0),
    ("rs", "RL.SUBWIN rs 3 10000 1000", 0),
    ("rf", "RL.FIXED rf 3 10000", 1),
];

/// Everything a client can see of the limiters filled by `fill`.
fn snapshot(c: &mut Connection, t: u64) -> Vec<String> {
    let keys = ["a", "b", "c", "tok", "leak", "fix", "fixa", "sw", "swx"];
    let mut all: Vec<String> = keys
        .iter()
        .chain(LONGER.iter().map(|(k, _, _)| k))
        .map(|k| {
            format!(
                "{k} {:?} {:?} {}",
                rl(c, &format!("RL.PEEK {k} NOW {}", t + 200)),
                digest(c, k),
                int(c, &["PEXPIRETIME", k])
            )
        })
        .collect();
    for (k, longer, left) in LONGER {
        let seen = rl(c, &format!("{longer} COST 0 NOW {}", t + 2600));
        // Every unit still counts for the longer window.
        assert_eq!(seen[2], left, "{k}: {seen:?}");
        all.push(format!("{k} longer {seen:?}"));
    }
    all
}

/// The retentions of `ra{suffix}` and `rs{suffix}` still hold: another call with the
/// shorter window leaves the longer one every unit (it changes the keys).
fn still_retained(c: &mut Connection, t: u64, suffix: &str) {
    for (command, key, short, longer) in [
        ("RL.SLIDE", "ra", "5 1000", "3 10000"),
        ("RL.SUBWIN", "rs", "5 1000 100", "3 10000 1000"),
    ] {
        let at = t + 3000;
        let short = format!("{command} {key}{suffix} {short} NOW {at}");
        assert_eq!(rl(c, &short)[0], 1, "{short}");
        let longer = format!("{command} {key}{suffix} {longer} COST 0 NOW {at}");
        let seen = rl(c, &longer);
        assert_eq!(seen[2], 0, "{longer}: {seen:?}");
    }
}

#[rstest]
fn debug_reload_keeps_everything(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    fill(&mut c, t);
    let before = snapshot(&mut c, t);
    let dataset = dataset_digest(&mut c);
    run(&mut c, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(snapshot(&mut c, t), before);
    assert_eq!(dataset_digest(&mut c), dataset);
    still_retained(&mut c, t, "");
}

#[rstest]
fn restart_from_rdb() {
    let mut server = Server::start(&[]);
    let mut c = server.conn();
    let t = unix_ms();
    fill(&mut c, t);
    let before = snapshot(&mut c, t);
    server.save_and_restart();
    let mut c = server.conn();
    assert_eq!(snapshot(&mut c, t), before);
    still_retained(&mut c, t, "");
}

#[rstest]
#[case::before_rewrite(false)]
#[case::after_rewrite(true)]
fn restart_from_aof(#[case] rewrite: bool) {
    let mut server = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = server.conn();
    let t = unix_ms();
    fill(&mut c, t);
    // Calls without NOW: the AOF must hold the time each was decided at.
    for _ in 0..5 {
        rl(&mut c, "RL.SLIDE live 3 600000");
    }
    if rewrite {
        run(&mut c, &["BGREWRITEAOF"]).unwrap();
        crate::common::wait_until("the AOF rewrite", 30, || {
            let info: String = redis::cmd("INFO").arg("persistence").query(&mut c).unwrap();
            info.contains("aof_rewrite_in_progress:0")
                && info.contains("aof_last_bgrewrite_status:ok")
        });
        // More history after the rewrite lands in the new incremental file.
        rl(
            &mut c,
            &format!("RL.SLIDE a 10 1000 100 60000 NOW {}", t + 150),
        );
    }
    let before = snapshot(&mut c, t);
    let live = (
        rl(&mut c, "RL.PEEK live")[2],
        digest(&mut c, "live"),
        int(&mut c, &["PEXPIRETIME", "live"]),
    );
    let dataset = dataset_digest(&mut c);
    server.crash_and_restart();
    let mut c = server.conn();
    assert_eq!(snapshot(&mut c, t), before);
    assert_eq!(
        (
            rl(&mut c, "RL.PEEK live")[2],
            digest(&mut c, "live"),
            int(&mut c, &["PEXPIRETIME", "live"])
        ),
        live
    );
    assert_eq!(dataset_digest(&mut c), dataset);
    still_retained(&mut c, t, "");
}

#[rstest]
fn copy_and_dump_restore(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    fill(&mut c, t);
    assert_eq!(int(&mut c, &["COPY", "a", "a2"]), 1);
    assert_eq!(digest(&mut c, "a2"), digest(&mut c, "a"));
    // The copy is independent of the original.
    rl(
        &mut c,
        &format!("RL.SLIDE a2 10 1000 100 60000 NOW {}", t + 5000),
    );
    assert_ne!(digest(&mut c, "a2"), digest(&mut c, "a"));

    for k in ["b", "ra", "rs", "rf"] {
        let dump: Vec<u8> = redis::cmd("DUMP").arg(k).query(&mut c).unwrap();
        let pttl = int(&mut c, &["PTTL", k]);
        let copy = format!("{k}2");
        run(&mut c, &["DEL", &copy]).unwrap();
        let _: () = redis::cmd("RESTORE")
            .arg(&copy)
            .arg(pttl)
            .arg(&dump)
            .query(&mut c)
            .unwrap();
        assert_eq!(digest(&mut c, &copy), digest(&mut c, k));
        assert_eq!(
            rl(&mut c, &format!("RL.PEEK {copy} NOW {t}")),
            rl(&mut c, &format!("RL.PEEK {k} NOW {t}"))
        );
    }
    // The retention came along: the longer window still counts every unit.
    for (k, longer, left) in LONGER {
        let copy = longer.replacen(k, &format!("{k}2"), 1);
        let seen = rl(&mut c, &format!("{copy} COST 0 NOW {}", t + 2600));
        assert_eq!(seen[2], left, "{copy}: {seen:?}");
    }
    still_retained(&mut c, t, "2");
}

#[rstest]
fn damaged_dumps_are_refused_without_a_key(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    fill(&mut c, t);
    let dump: Vec<u8> = redis::cmd("DUMP").arg("a").query(&mut c).unwrap();
    // Flip every byte of the value in turn (the trailing version and CRC64 are left alone
    // but the payload check is skipped where the server lets it be, so the module's own
    // checks are what refuses). Valkey 9 has no such setting: payloads are always checked.
    let sanitize: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("sanitize-dump-payload")
        .query(&mut c)
        .unwrap();
    if !sanitize.is_empty() {
        run(&mut c, &["CONFIG", "SET", "sanitize-dump-payload", "no"]).unwrap();
    }
    let mut refused = 0;
    for i in 0..dump.len().saturating_sub(10) {
        let mut bad = dump.clone();
        bad[i] ^= 0x5a;
        let res: redis::RedisResult<Value> = redis::cmd("RESTORE")
            .arg("x")
            .arg(0)
            .arg(&bad)
            .arg("REPLACE")
            .query(&mut c);
        if res.is_err() {
            refused += 1;
            assert_eq!(
                int(&mut c, &["EXISTS", "x"]),
                0,
                "byte {i}: a refused RESTORE left a key"
            );
        }
        run(&mut c, &["DEL", "x"]).unwrap();
        assert_eq!(redis::cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
    }
    assert!(refused > 0);
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[rstest]
fn restore_command_takes_the_documented_encoding(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    // Version 1, sliding log: latest, one window (3 per 1000 ms), one record of 2 units at t.
    let mut payload = vec![1u8, 1];
    for v in [t, 1, 3, 1000, 1, t, 2] {
        varint(&mut payload, v);
    }
    let ok: String = redis::cmd("RL.RESTORE")
        .arg("r")
        .arg(&payload)
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK r NOW {t}")),
        [1, 3, 1, 0, 1000]
    );
    assert_eq!(int(&mut c, &["PEXPIRETIME", "r"]), (t + 1000) as i64);
    // A truncated payload is refused and leaves the key as it was.
    let before = digest(&mut c, "r");
    let e = redis::cmd("RL.RESTORE")
        .arg("r")
        .arg(&payload[..payload.len() - 1])
        .query::<Value>(&mut c)
        .unwrap_err();
    assert_eq!(e.code(), Some("ERR"));
    assert_eq!(digest(&mut c, "r"), before);
    run(&mut c, &["SET", "str", "v"]).unwrap();
    let e = redis::cmd("RL.RESTORE")
        .arg("str")
        .arg(&payload)
        .query::<Value>(&mut c)
        .unwrap_err();
    assert_eq!(e.code(), Some("WRONGTYPE"));
}

#[rstest]
fn loads_the_committed_version_1_rdb() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/slide-v1.rdb");
    let server = Server::start_with_files(
        &[(fixture, "fixture.rdb")],
        &["--dbfilename", "fixture.rdb"],
    );
    let mut c = server.conn();
    // Written by encoding version 1 at 2100-01-01T00:00:00Z (4102444800000): 2 units at T,
    // 3 at T+250, windows 5/1s and 100/60s.
    assert_eq!(
        rl(&mut c, "RL.PEEK fixture:slide NOW 4102444800500"),
        [1, 5, 0, 0, 59750]
    );
    assert_eq!(
        rl(&mut c, "RL.PEEK fixture:slide NOW 4102444801250"),
        [1, 5, 5, 0, 59000]
    );
    assert_eq!(
        int(&mut c, &["PEXPIRETIME", "fixture:slide"]),
        4102444860250
    );
    assert_eq!(
        rl(
            &mut c,
            "RL.SLIDE fixture:slide 5 1000 100 60000 NOW 4102444800600"
        ),
        [0, 5, 0, 400, 59650]
    );
}

/// An AOF holds decisions already taken: loading it applies every recorded call, even where
/// deciding again (here: three requests against a limit of 1) would refuse some, and even
/// with a NOW an hour ahead of the clock under the default `ratelimit.now-max-ahead-ms`.
/// (The calls are of the form earlier versions propagated.)
#[rstest]
fn aof_loading_applies_decisions_without_deciding_again() {
    let t = unix_ms() + 3_600_000;
    let mut aof = Vec::new();
    for _ in 0..3 {
        let now = t.to_string();
        let words = [
            "RL.SLIDE",
            "k",
            "1",
            "60000",
            "COST",
            "1",
            "NOW",
            now.as_str(),
        ];
        aof.extend(format!("*{}\r\n", words.len()).bytes());
        for w in words {
            aof.extend(format!("${}\r\n{w}\r\n", w.len()).bytes());
        }
    }
    let dir = std::env::temp_dir().join(format!("rl-aof-{}-{t}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("appendonly.aof");
    std::fs::write(&file, aof).unwrap();
    // A legacy single-file AOF is loaded (and upgraded) at start.
    let server = Server::start_with_files(
        &[(file.to_str().unwrap(), "appendonly.aof")],
        &[
            "--appendonly",
            "yes",
            "--ratelimit.now-max-ahead-ms",
            "1000",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    let mut c = server.conn();
    run(
        &mut c,
        &["CONFIG", "SET", "ratelimit.now-max-ahead-ms", "-1"],
    )
    .unwrap();
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK k NOW {t}")),
        [0, 1, 0, 60000, 60000]
    );
    assert_eq!(int(&mut c, &["PEXPIRETIME", "k"]), (t + 60000) as i64);
}

#[rstest]
fn loads_the_committed_version_1_buckets() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/buckets-v1.rdb");
    let server = Server::start_with_files(
        &[(fixture, "fixture.rdb")],
        &["--dbfilename", "fixture.rdb"],
    );
    let mut c = server.conn();
    // Written by encoding version 1 at 2100-01-01T00:00:00Z (T = 4102444800000):
    // RL.TOKEN 10/1s BURST 5, COST 3 at T and COST 2 at T+50;
    // RL.LEAKY 4/1s MAXDELAY 800, three bookings at T.
    assert_eq!(
        rl(&mut c, "RL.PEEK fixture:token NOW 4102444800100"),
        [1, 5, 1, 0, 400]
    );
    assert_eq!(
        rl(&mut c, "RL.PEEK fixture:leaky NOW 4102444800100"),
        [1, 4, 1, 0, 650]
    );
    assert_eq!(
        int(&mut c, &["PEXPIRETIME", "fixture:token"]),
        4102444800500
    );
    assert_eq!(
        int(&mut c, &["PEXPIRETIME", "fixture:leaky"]),
        4102444800750
    );
    assert_eq!(
        rl(
            &mut c,
            "RL.LEAKY fixture:leaky 4 1000 MAXDELAY 800 NOW 4102444800100"
        ),
        [1, 4, 0, 650, 900]
    );
}
