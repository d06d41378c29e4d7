//! A replica applies the primary's decisions: same digests, same expiry times, same answers,
//! whatever its own clock says, and RL.PEEK answers on the replica.

use crate::common::{
    dataset_digest, digest, effect_text, int, put_varint, rl, run, slide_in_multi_and_lua, text,
    unix_ms, wait_until, Server,
};
use redis::{Connection, Value};
use rstest::rstest;

/// Waits until the replica has processed everything the primary sent.
fn sync(primary: &mut Connection) {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(primary).unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge");
}

#[rstest]
fn replica_follows_a_burst_of_mixed_calls() {
    let primary = Server::start(&[]);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let t = unix_ms();
    for i in 0..300u64 {
        let key = format!("k{}", i % 7);
        let line = match i % 9 {
            // Server clock: the replica must not read its own.
            0 => format!("RL.SLIDE {key} 5 2000 20 60000"),
            6 => format!("RL.TOKEN tok{key} 5 2000 BURST 3"),
            7 => format!("RL.LEAKY leak{key} 5 2000 MAXDELAY 3000 NOW {}", t + i),
            // Windows that change keep history for the longer one (retentions).
            8 => format!(
                "RL.FIXED fix{key} 20 {} COST 2 ALIGN",
                [60000, 5000][i as usize % 2]
            ),
            5 => format!("RL.SUBWIN sw{key} 10 {} 100", [2000, 500][i as usize % 2]),
            1 => format!("RL.SLIDE {key} 5 2000 20 60000 COST 2 NOW {}", t + i),
            2 => format!("RL.SLIDE {key} 5 2000 20 60000 COST 0"),
            3 => format!("RL.SLIDE {key} 8 2000 NOW {}", t + i),
            4 if i % 4 == 0 => format!("RL.REFUND {key} COST 1"),
            _ => format!("RL.PEEK {key}"),
        };
        // PEEK and REFUND answer nil for a key that has nothing yet.
        run(&mut p, &line.split(' ').collect::<Vec<_>>()).unwrap();
    }
    // A transaction and a script replicate their effects too.
    slide_in_multi_and_lua(&mut p);
    sync(&mut p);
    assert_eq!(dataset_digest(&mut r), dataset_digest(&mut p));
    let keys = (0..7)
        .flat_map(|i| ["k", "tokk", "leakk", "fixk", "swk"].map(|prefix| format!("{prefix}{i}")));
    for key in keys {
        assert_eq!(digest(&mut r, &key), digest(&mut p, &key), "{key}");
        assert_eq!(
            int(&mut r, &["PEXPIRETIME", &key]),
            int(&mut p, &["PEXPIRETIME", &key]),
            "{key}"
        );
        let peek = format!("RL.PEEK {key} NOW {}", t + 400);
        assert_eq!(rl(&mut r, &peek), rl(&mut p, &peek), "{key}");
    }
}

#[rstest]
fn refused_calls_replicate_nothing() {
    let primary = Server::start(&[]);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    rl(&mut p, "RL.SLIDE once 1 60000");
    sync(&mut p);
    let offset = |c: &mut Connection| -> i64 {
        let info = text(c, &["INFO", "replication"]);
        info.lines()
            .find_map(|l| l.strip_prefix("master_repl_offset:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    rl(&mut p, "RL.TOKEN tonce 1 60000");
    rl(&mut p, "RL.LEAKY lonce 1 60000 MAXDELAY 0");
    sync(&mut p);
    let before = offset(&mut p);
    for _ in 0..50 {
        assert_eq!(rl(&mut p, "RL.SLIDE once 1 60000")[0], 0);
        assert_eq!(rl(&mut p, "RL.TOKEN tonce 1 60000")[0], 0);
        assert_eq!(rl(&mut p, "RL.LEAKY lonce 1 60000 MAXDELAY 0")[0], 0);
        rl(&mut p, "RL.SLIDE once 1 60000 COST 0");
        rl(&mut p, "RL.TOKEN tonce 1 60000 COST 0");
        for key in ["once", "tonce", "lonce"] {
            rl(&mut p, &format!("RL.PEEK {key}"));
            rl(&mut p, &format!("RL.REFUND {key} COST 0"));
        }
    }
    assert_eq!(
        offset(&mut p),
        before,
        "refused and read-only calls were propagated"
    );
    sync(&mut p);
    assert_eq!(digest(&mut r, "once"), digest(&mut p, "once"));
}

#[rstest]
fn replica_answers_peek_and_refuses_writes() {
    let primary = Server::start(&[]);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let t = unix_ms();
    rl(&mut p, &format!("RL.SLIDE pk 10 60000 COST 4 NOW {t}"));
    sync(&mut p);
    assert_eq!(
        rl(&mut r, &format!("RL.PEEK pk NOW {}", t + 100)),
        [1, 10, 6, 0, 59900]
    );
    assert_eq!(run(&mut r, &["RL.PEEK", "nothing"]).unwrap(), Value::Nil);
    let e = run(&mut r, &["RL.SLIDE", "pk", "10", "60000"]).unwrap_err();
    assert_eq!(e.code(), Some("READONLY"));
}

#[rstest]
fn replica_keeps_the_primarys_expiry_and_deletion() {
    let primary = Server::start(&[]);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    rl(&mut p, "RL.SLIDE brief 1 200");
    rl(&mut p, "RL.SLIDE gone 5 60000 COST 2");
    rl(&mut p, "RL.REFUND gone COST 2");
    sync(&mut p);
    assert_eq!(
        int(&mut r, &["EXISTS", "gone"]),
        0,
        "a fully refunded key is deleted everywhere"
    );
    assert_eq!(
        int(&mut r, &["PEXPIRETIME", "brief"]),
        int(&mut p, &["PEXPIRETIME", "brief"])
    );
    wait_until("the primary to expire the key", 10, || {
        int(&mut p, &["EXISTS", "brief"]) == 0
    });
    sync(&mut p);
    wait_until("the replica to drop the key", 10, || {
        int(&mut r, &["EXISTS", "brief"]) == 0
    });
}

#[rstest]
fn rl_apply_records_an_effect_without_deciding_again() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    let t = unix_ms();
    let apply = |c: &mut Connection, key: &str, effect: String| -> redis::RedisResult<Value> {
        redis::cmd("RL.APPLY").arg(key).arg(effect).query(c)
    };
    // Three effects against a limit of 1: all recorded, as a replica must.
    for i in 0..3 {
        apply(
            &mut c,
            "fx",
            format!("RL.SLIDE 1 60000 COST 1 NOW {}", t + i),
        )
        .unwrap();
    }
    let peek = format!("RL.PEEK fx NOW {}", t + 2);
    assert_eq!(rl(&mut c, &peek)[2], 0);
    apply(&mut c, "fx", format!("RL.REFUND COST 2 NOW {}", t + 3)).unwrap();
    apply(&mut c, "fx", format!("RL.REFUND COST 1 NOW {}", t + 3)).unwrap();
    assert_eq!(
        int(&mut c, &["EXISTS", "fx"]),
        0,
        "refunded to empty: deleted"
    );
    for (effect, why) in [
        ("RL.SLIDE 1 60000 COST 1".to_string(), "needs NOW"),
        (format!("RL.SLIDE  1 60000 NOW {t}"), "malformed"),
        (format!("SET 1 NOW {t}"), "starts with a limiter command"),
        (format!("RL.SLIDE 0 60000 NOW {t}"), "limit must be"),
        (String::new(), "malformed"),
    ] {
        let e = apply(&mut c, "bad", effect.clone()).unwrap_err();
        assert!(e.to_string().contains(why), "{effect:?}: {e}");
    }
    assert_eq!(int(&mut c, &["EXISTS", "bad"]), 0);
    run(&mut c, &["SET", "str", "x"]).unwrap();
    let e = apply(
        &mut c,
        "str",
        format!("RL.TOKEN 1 1000 BURST 1 COST 1 NOW {t}"),
    );
    assert!(e.unwrap_err().to_string().contains("WRONGTYPE"));
}

#[rstest]
fn decisions_reach_the_aof_as_one_effect_argument() {
    let server = Server::start(&["--appendonly", "yes"]);
    let mut c = server.conn();
    let t = unix_ms();
    rl(&mut c, &format!("RL.TOKEN tok 100 60000 NOW {t}"));
    rl(&mut c, &format!("RL.FIXED fix 5 1000 ALIGN COST 2 NOW {t}"));
    rl(
        &mut c,
        &format!("RL.LEAKY lk 10 1000 BURST 1 MAXDELAY 500 NOW {t}"),
    );
    let path = server.path("appendonlydir/appendonly.aof.1.incr.aof");
    // Redis may hold the write back for a moment (appendfsync everysec): wait for the last.
    let mut aof = Vec::new();
    wait_until("the AOF to hold the calls", 10, || {
        aof = std::fs::read(&path).unwrap_or_default();
        aof.windows(3).filter(|w| w == b"lk\r").count() > 0
    });
    let holds = |needle: &[u8]| aof.windows(needle.len()).any(|w| w == needle);
    for effect in [
        // Options at their defaults (COST 1, BURST = limit, a leaky bucket's BURST 1) are
        // left out; the others are resolved.
        format!("RL.TOKEN 100 60000 NOW {t}"),
        format!("RL.FIXED 5 1000 ALIGN COST 2 NOW {t}"),
        format!("RL.LEAKY 10 1000 MAXDELAY 500 NOW {t}"),
    ] {
        // Written in the compact form: the command's code, then each word tagged.
        let mut words = effect.split(' ');
        let commands = ["RL.SLIDE", "RL.TOKEN", "RL.LEAKY", "RL.FIXED"];
        let command = words.next().unwrap();
        let code = commands.iter().position(|c| *c == command).unwrap();
        let mut compact = vec![1, code as u8 + 1];
        for w in words {
            match ["BURST", "MAXDELAY", "COST", "NOW", "ALIGN"]
                .iter()
                .position(|k| *k == w)
            {
                Some(k) => compact.push(k as u8 + 1),
                None => {
                    compact.push(0);
                    put_varint(&mut compact, w.parse().unwrap());
                }
            }
        }
        assert_eq!(effect_text(&compact), effect);
        let mut bulk = format!("${}\r\n", compact.len()).into_bytes();
        bulk.extend_from_slice(&compact);
        bulk.extend_from_slice(b"\r\n");
        assert!(holds(b"$8\r\nRL.APPLY\r\n$3\r\n"), "{aof:?}");
        assert!(holds(&bulk), "{effect} ({compact:?}) not in {aof:?}");
    }
}
