//! CL.THROTTLE: redis-cell's command as a kind of this module. Its replies, errors,
//! replication and persistence here; side by side with redis-cell itself in
//! tests/redis_cell.rs.

use crate::common::{
    aof_commands, cl, digest, err, run, server, text, unix_ms, wait_until, Server,
};
use redis::Connection;
use rstest::rstest;

#[rstest]
fn answers_as_redis_cell(server: Server) {
    let mut c = server.conn();
    let t = unix_ms() + 10_000;
    // redis-cell's README: 15 burst, 30 per 60 s (one every 2 s).
    let call = |c: &mut Connection, q: &str, at: u64| {
        cl(c, &format!("CL.THROTTLE user123 15 30 60 {q} NOW {at}"))
    };
    assert_eq!(call(&mut c, "1", t), [0, 16, 15, -1, 2]);
    assert_eq!(call(&mut c, "", t), [0, 16, 14, -1, 4]);
    assert_eq!(call(&mut c, "14", t), [0, 16, 0, -1, 32]);
    assert_eq!(call(&mut c, "1", t), [1, 16, 0, 2, 32]);
    assert_eq!(call(&mut c, "1", t + 1500), [1, 16, 0, 1, 31]);
    assert_eq!(call(&mut c, "1", t + 2000), [0, 16, 0, -1, 32]);
    // More than the burst: never, -1.
    assert_eq!(call(&mut c, "17", t + 2000), [1, 16, 0, -1, 32]);
    // A quantity of 0 takes nothing.
    assert_eq!(call(&mut c, "0", t + 4000), [0, 16, 1, -1, 30]);
    // The key is the module's, and empties by itself: its expiry is when the bucket is full.
    assert_eq!(text(&mut c, &["TYPE", "user123"]), "ratelimit");
    let pttl: i64 = redis::cmd("PTTL").arg("user123").query(&mut c).unwrap();
    // Full again 32 s after the last change, at t + 2 s (t is 10 s ahead of the clock).
    assert!((30_000..=44_000).contains(&pttl), "{pttl}");
    // RL.PEEK reads it in the RL.* form, in milliseconds.
    let peek = cl(&mut c, &format!("RL.PEEK user123 NOW {}", t + 4000));
    assert_eq!(peek, [1, 16, 1, 0, 30_000]);
    // INFO counts its calls.
    let info = text(&mut c, &["INFO", "ratelimit"]);
    assert!(
        info.contains("ratelimit_throttle:calls=8,allowed=5,refused=3,errors=0"),
        "{info}"
    );
}

#[rstest]
fn refuses_what_it_cannot_take(server: Server) {
    let mut c = server.conn();
    for (words, want) in [
        (
            &["CL.THROTTLE", "k", "15", "30"][..],
            "wrong number of arguments",
        ),
        (&["CL.THROTTLE", "k", "-1", "30", "60"], "max_burst"),
        (&["CL.THROTTLE", "k", "15", "0", "60"], "count_per_period"),
        (&["CL.THROTTLE", "k", "15", "30", "0"], "period"),
        (&["CL.THROTTLE", "k", "15", "30", "2678401"], "period"),
        (&["CL.THROTTLE", "k", "15", "30", "60", "-2"], "quantity"),
        (
            &["CL.THROTTLE", "k", "15", "30", "60", "1", "2"],
            "unknown option",
        ),
    ] {
        let e = err(&mut c, words);
        assert!(e.contains(want), "{words:?}: {e}");
    }
    run(&mut c, &["SET", "s", "1"]).unwrap();
    assert!(err(&mut c, &["CL.THROTTLE", "s", "1", "1", "60"]).starts_with("WRONGTYPE"));
    cl(&mut c, "RL.TOKEN tok 5 1000");
    let e = err(&mut c, &["CL.THROTTLE", "tok", "1", "1", "60"]);
    assert!(e.contains("RL.TOKEN"), "{e}");
    // Its metadata: arity, key, flags.
    let info = run(&mut c, &["COMMAND", "INFO", "cl.throttle"]).unwrap();
    let shown = format!("{info:?}").to_lowercase();
    assert!(
        shown.contains("cl.throttle") && shown.contains("int(-5)"),
        "{shown}"
    );
}

/// Replicas and the AOF hold exactly the primary's state: the decision travels as its
/// effect, never recomputed with another clock.
#[test]
fn replicas_and_the_aof_hold_the_primarys_state() {
    // Every write in the AOF before its reply (a crash follows).
    let primary = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let t = unix_ms() + 10_000;
    for (i, q) in [1, 3, 0, 20, 2].into_iter().enumerate() {
        cl(
            &mut p,
            &format!("CL.THROTTLE job 4 10 60 {q} NOW {}", t + 100 * i as u64),
        );
    }
    run(&mut p, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(digest(&mut p, "job"), digest(&mut r, "job"));
    // The AOF holds each allowed call's effect (`RL.APPLY job <effect>`, spelled out).
    // One unit every 6 s, 5 at most: the first two calls are allowed, the others refused
    // (20 can never be; 2 more would need 36 s of 30).
    let applied = || -> Vec<String> {
        aof_commands(&primary)
            .into_iter()
            .filter(|w| w.first().is_some_and(|c| c == "CL.THROTTLE"))
            .map(|w| w.join(" "))
            .collect()
    };
    wait_until("the AOF's writes", 10, || applied().len() >= 2);
    assert_eq!(
        applied(),
        [
            format!("CL.THROTTLE job 4 10 60 NOW {t}"),
            format!("CL.THROTTLE job 4 10 60 3 NOW {}", t + 100),
        ]
    );
    // After a restart from the AOF the key answers as before.
    let before = cl(
        &mut p,
        &format!("CL.THROTTLE job 4 10 60 0 NOW {}", t + 500),
    );
    drop(p);
    let mut primary = primary;
    primary.crash_and_restart();
    let mut p = primary.conn();
    let after = cl(
        &mut p,
        &format!("CL.THROTTLE job 4 10 60 0 NOW {}", t + 500),
    );
    assert_eq!(before, after);
}
