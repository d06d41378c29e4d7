//! RL.CHARGE: units recorded after the fact on an existing limiter of any rate kind, even
//! beyond its limit, with exact waits afterwards; persisted and replicated like any change.

use crate::common::{digest, err, int, rl, run, server, unix_ms, Server};
use redis::{Connection, Value};
use rstest::rstest;

/// Waits until the replica has processed everything the primary sent.
fn sync(primary: &mut Connection) {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(primary).unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge");
}

#[rstest]
fn a_charge_beyond_the_limit_refuses_until_the_bucket_has_drained(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    // 10 per second: one unit drains every 100 ms.
    assert_eq!(
        rl(&mut c, &format!("RL.TOKEN b 10 1000 NOW {t}")),
        [1, 10, 9, 0, 100]
    );
    // 24 more happened: 25 owed, 15 beyond the bucket. One more unit fits once 16 have
    // drained.
    assert_eq!(
        rl(&mut c, &format!("RL.CHARGE b COST 24 NOW {t}")),
        [1, 10, 0, 1600, 2500]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.TOKEN b 10 1000 NOW {}", t + 1599)),
        [0, 10, 0, 1, 901]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.TOKEN b 10 1000 NOW {}", t + 1600)),
        [1, 10, 0, 0, 1000]
    );
    // The key lives until the bucket is empty again.
    let pexpiretime = int(&mut c, &["PEXPIRETIME", "b"]);
    assert_eq!(pexpiretime as u64, t + 2600);
}

#[rstest]
fn every_rate_kind_takes_a_charge_under_its_own_parameters(server: Server) {
    let mut c = server.conn();
    // On a whole second, so that RL.SUBWIN's sub-intervals start with the call.
    let t = unix_ms() / 1000 * 1000;
    let cases = [
        ("RL.SLIDE s 5 1000 8 60000", [1, 8, 0, 60000, 60000]),
        ("RL.TOKEN tb 5 1000", [1, 5, 0, 1000, 1800]),
        ("RL.LEAKY lb 5 1000", [1, 6, 0, 800, 1800]),
        ("RL.FIXED f 5 1000", [1, 5, 0, 1000, 1000]),
        ("RL.SUBWIN w 5 1000 100", [1, 5, 0, 1055, 1099]),
    ];
    for (first, want) in cases {
        let key = first.split(' ').nth(1).unwrap();
        rl(&mut c, &format!("{first} NOW {t}"));
        // 9 units: every kind is beyond its limit of 5 per second now.
        let got = rl(&mut c, &format!("RL.CHARGE {key} COST 8 NOW {t}"));
        assert_eq!(got, want, "{first}");
        // A request is refused until then, and RL.PEEK agrees.
        let peek = rl(&mut c, &format!("RL.PEEK {key} NOW {t}"));
        assert_eq!(peek[2], 0, "{first}");
        let again = format!("{first} NOW {}", t + 1);
        assert_eq!(rl(&mut c, &again)[0], 0, "{first}");
        // The key lives as long as the reply's reset says (give or take the ms passed).
        let pttl = int(&mut c, &["PTTL", key]);
        assert!(pttl.abs_diff(got[4]) <= 100, "{first}: PTTL {pttl}");
    }
}

#[rstest]
fn reserve_then_settle_with_refund_and_charge(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    // 10,000 tokens per minute; a call is estimated at 3,000.
    let take = format!("RL.TOKEN tpm:u1 10000 60000 COST 3000 NOW {t}");
    assert_eq!(rl(&mut c, &take)[..3], [1, 10000, 7000]);
    // It used 1,200: give back 1,800.
    assert_eq!(
        rl(&mut c, &format!("RL.REFUND tpm:u1 COST 1800 NOW {t}"))[..3],
        [1, 10000, 8800]
    );
    // The next was estimated at 3,000 and used 9,500: charge the 6,500 more.
    rl(&mut c, &take);
    let settled = rl(&mut c, &format!("RL.CHARGE tpm:u1 COST 6500 NOW {t}"));
    // 1,200 + 9,500 = 10,700 used: 700 beyond the minute's budget.
    assert_eq!(settled[..3], [1, 10000, 0]);
    // One token comes back every 6 ms: one more fits after 701 have drained.
    assert_eq!(settled[3], 4206);
    assert_eq!(
        rl(
            &mut c,
            &format!("RL.TOKEN tpm:u1 10000 60000 NOW {}", t + 4205)
        )[0],
        0
    );
    assert_eq!(
        rl(
            &mut c,
            &format!("RL.TOKEN tpm:u1 10000 60000 NOW {}", t + 4206)
        )[0],
        1
    );
}

#[rstest]
fn bad_and_edge_input(server: Server) {
    let mut c = server.conn();
    // Nothing to charge against.
    assert_eq!(
        run(&mut c, &["RL.CHARGE", "missing", "COST", "5"]).unwrap(),
        Value::Nil
    );
    assert!(run(&mut c, &["EXISTS", "missing"]).unwrap() == Value::Int(0));
    rl(&mut c, "RL.FIXED f 5 60000");
    // COST forgotten: the error says what the call lacks, however it was written.
    for words in [
        &["RL.CHARGE", "f", "NOW", "1"][..],
        &["RL.CHARGE", "f"],
        &["RL.CHARGE", "f", "5"],
    ] {
        assert_eq!(
            err(&mut c, words),
            "ERR RL.CHARGE needs COST n, the units to record: RL.CHARGE key COST n [NOW ms]",
            "{words:?}"
        );
    }
    assert!(err(&mut c, &["RL.CHARGE"]).contains("wrong number of arguments"));
    assert_eq!(
        err(&mut c, &["RL.CHARGE", "f", "COST", "-1"]),
        "ERR COST must be an integer from 0 to 9223372036854775807"
    );
    assert_eq!(
        err(&mut c, &["RL.CHARGE", "f", "COST", "1", "BURST", "2"]),
        "ERR unknown option 'BURST'"
    );
    run(&mut c, &["SET", "str", "v"]).unwrap();
    assert!(err(&mut c, &["RL.CHARGE", "str", "COST", "1"]).starts_with("WRONGTYPE"));
    // COST 0 reads and changes nothing.
    let before = digest(&mut c, "f");
    let read = rl(&mut c, "RL.CHARGE f COST 0");
    assert_eq!(read[..3], [1, 5, 4]);
    assert_eq!(digest(&mut c, "f"), before);
    // Units that do not fit the counters: an error, and nothing changed.
    assert_eq!(
        err(&mut c, &["RL.CHARGE", "f", "COST", "5000000000"]),
        "ERR the units do not fit the limiter's counters; nothing was recorded"
    );
    assert_eq!(digest(&mut c, "f"), before);
}

#[rstest]
fn charges_replicate_and_survive_a_restart() {
    // `always`: with `everysec` a busy disk may postpone the write of the last commands, and
    // a kill loses them (see docs/guarantees.md, Restarts).
    let mut primary = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let t = unix_ms();
    let keys = ["s", "tb", "lb", "f", "w"];
    for (key, first) in keys.iter().zip([
        "RL.SLIDE s 5 1000 8 60000",
        "RL.TOKEN tb 5 1000",
        "RL.LEAKY lb 5 1000",
        "RL.FIXED f 5 1000",
        "RL.SUBWIN w 5 1000 100",
    ]) {
        rl(&mut p, &format!("{first} NOW {t}"));
        rl(&mut p, &format!("RL.CHARGE {key} COST 7 NOW {}", t + 1));
        // On the server clock too: the replica applies the primary's time.
        rl(&mut p, &format!("RL.CHARGE {key} COST 2"));
    }
    sync(&mut p);
    let digests: Vec<String> = keys.iter().map(|k| digest(&mut p, k)).collect();
    for (key, d) in keys.iter().zip(&digests) {
        assert_eq!(&digest(&mut r, key), d, "{key} on the replica");
        assert_eq!(
            int(&mut r, &["PEXPIRETIME", key]),
            int(&mut p, &["PEXPIRETIME", key]),
            "{key}"
        );
    }
    // The AOF replays the charges as they were decided.
    primary.crash_and_restart();
    let mut p = primary.conn();
    for (key, d) in keys.iter().zip(&digests) {
        assert_eq!(&digest(&mut p, key), d, "{key} after the AOF");
    }
}

#[rstest]
fn the_readme_example(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    assert_eq!(
        rl(
            &mut c,
            &format!("RL.TOKEN tpm:user:42 10000 60000 COST 3000 NOW {t}")
        ),
        [1, 10000, 7000, 0, 18000]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.CHARGE tpm:user:42 COST 7700 NOW {t}")),
        [1, 10000, 0, 4206, 64200]
    );
}

#[rstest]
fn the_llm_token_budget_recipe(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    let take = format!(
        "RL.ALL 2 {{user:42}}:rpm {{user:42}}:tpm SLIDE 60 60000 TOKEN 100000 60000 COST 4000 NOW {t}"
    );
    let words: Vec<&str> = take.split(' ').collect();
    let all = |c: &mut Connection| -> Vec<redis::Value> {
        redis::from_redis_value(&run(c, &words).unwrap()).unwrap()
    };
    let first = |v: &[redis::Value]| match v.first() {
        Some(redis::Value::Int(i)) => *i,
        other => panic!("{other:?}"),
    };
    // A call estimated at 4,000 that used 5,250.
    assert_eq!(first(&all(&mut c)), 1);
    let charged = rl(
        &mut c,
        &format!("RL.CHARGE {{user:42}}:tpm COST 1250 NOW {t}"),
    );
    assert_eq!(charged[..3], [1, 100000, 94750]);
    // One estimated at 4,000 that used 2,700.
    assert_eq!(first(&all(&mut c)), 1);
    let refunded = rl(
        &mut c,
        &format!("RL.REFUND {{user:42}}:tpm COST 1300 NOW {t}"),
    );
    assert_eq!(refunded[..3], [1, 100000, 92050]);
    // The minute's token budget is spent by calls that used more than their estimates: the
    // next is refused, and takes no request either.
    rl(
        &mut c,
        &format!("RL.CHARGE {{user:42}}:tpm COST 92050 NOW {t}"),
    );
    assert_eq!(first(&all(&mut c)), 0);
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK {{user:42}}:rpm NOW {t}"))[2],
        58
    );
    // A call that failed gives its request back.
    assert_eq!(
        rl(&mut c, &format!("RL.REFUND {{user:42}}:rpm NOW {t}"))[..3],
        [1, 60, 59]
    );
}
