//! Reproductions of ways a client, a primary or an RL.APPLY can leave a key that no longer
//! loads, copies that disagree, or a call that stalls the server. Each test states what must
//! hold once the module is fixed, and fails on the code it was written against.

use crate::common::{
    aof_raw_commands, dataset_digest, digest, int, run, server, slide_payload, text, wait_until,
    Server,
};
use redis::{Connection, ConnectionLike, Value};
use rstest::rstest;

/// The most leases a key may hold.
const MAX_LEASES: usize = 100_000;
/// The longest lease: 31 days.
const MONTH_MS: &str = "2678400000";
/// A primary's arguments for a replica to sync at once (not after the default 5 s).
const NO_SYNC_DELAY: [&str; 2] = ["--repl-diskless-sync-delay", "0"];

/// The server's clock in milliseconds (`TIME`).
fn server_ms(c: &mut Connection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(c).expect("TIME");
    secs * 1000 + micros / 1000
}

/// Every reply of a pipeline, errors included (`query` stops at the first error).
fn replies(c: &mut Connection, pipe: &redis::Pipeline) -> Vec<Value> {
    let n = pipe.cmd_iter().count();
    c.req_packed_commands(&pipe.get_packed_pipeline(), 0, n)
        .expect("the pipeline's replies (is the server up?)")
}

/// The text (`CODE message`) of an error reply, `None` for any other reply.
fn error_text(v: &Value) -> Option<String> {
    match v {
        Value::ServerError(e) => Some(format!("{} {}", e.code(), e.details().unwrap_or(""))),
        _ => None,
    }
}

/// An `RL.ACQUIRE` reply: its first field (1 when allowed) and the lease id.
fn lease(v: &Value) -> (i64, Option<String>) {
    let Value::Array(fields) = v else {
        panic!("not an RL.ACQUIRE reply: {v:?}");
    };
    assert_eq!(fields.len(), 6, "{fields:?}");
    let allowed = redis::from_redis_value(&fields[0]).expect("an integer");
    let id = match &fields[5] {
        Value::Nil => None,
        other => Some(redis::from_redis_value(other).expect("a lease id")),
    };
    (allowed, id)
}

/// `RL.ACQUIRE` given as words after the command name: its reply as [`lease`] reads it.
fn acquire(c: &mut Connection, words: &[&str]) -> (i64, Option<String>) {
    let words: Vec<&str> = std::iter::once("RL.ACQUIRE")
        .chain(words.iter().copied())
        .collect();
    lease(&run(c, &words).unwrap_or_else(|e| panic!("{words:?}: {e}")))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Waits until the replica has processed everything the primary sent.
fn sync(primary: &mut Connection) {
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query(primary)
        .expect("WAIT");
    assert_eq!(acked, 1, "the replica did not acknowledge within 2 s");
}

/// The `SLOWLOG` entries of `command`, as `(microseconds, words)`.
fn slow_calls(c: &mut Connection, command: &str) -> Vec<(i64, String)> {
    crate::common::slowlog(c)
        .into_iter()
        .filter(|(_, words)| {
            words
                .first()
                .is_some_and(|w| w.eq_ignore_ascii_case(command))
        })
        .map(|(us, words)| (us, words.join(" ").chars().take(100).collect()))
        .collect()
}

/// 100,001 pipelined `RL.APPLY key "RL.ACQUIRE 1000 <month> ID <hex of id-i> NOW <now>"`,
/// distinct ids: their replies.
fn grant_by_apply(c: &mut Connection, key: &str) -> Vec<Value> {
    let now = server_ms(c);
    let mut pipe = redis::pipe();
    for i in 0..=MAX_LEASES {
        let id = hex(format!("id-{i}").as_bytes());
        pipe.cmd("RL.APPLY")
            .arg(key)
            .arg(format!("RL.ACQUIRE 1000 {MONTH_MS} ID {id} NOW {now}"));
    }
    replies(c, &pipe)
}

/// A client id at the top of the sequences, then a server-made id, must leave a key that
/// reloads from the RDB, restarts and replicates, and a dataset that keeps its other keys.
#[rstest]
fn three_plain_calls_leave_a_loadable_rdb() {
    let mut server = Server::start(&NO_SYNC_DELAY);
    let mut c = server.conn();
    let t = server_ms(&mut c) - 10_000;
    let top = format!("{t}-9223372036854775807");
    let below = format!("{t}-9223372036854775806");
    let (before, at) = ((t - 1).to_string(), t.to_string());
    for words in [
        &["k", "10", MONTH_MS, "ID", &top, "NOW", &before][..],
        &["k", "10", MONTH_MS, "ID", &below, "NOW", &at],
        &["k", "10", MONTH_MS, "NOW", &at],
    ] {
        // An error is an acceptable answer; a server that stops answering is not.
        let words: Vec<&str> = std::iter::once("RL.ACQUIRE")
            .chain(words.iter().copied())
            .collect();
        let _ = run(&mut c, &words);
    }
    assert_eq!(text(&mut c, &["PING"]), "PONG");
    run(&mut c, &["SET", "important", "value"]).unwrap();
    let before = dataset_digest(&mut c);
    let reload = run(&mut c, &["DEBUG", "RELOAD"]);
    let dbsize = int(&mut c, &["DBSIZE"]);
    assert!(
        reload.is_ok(),
        "DEBUG RELOAD: {reload:?}, then DBSIZE {dbsize}"
    );
    assert_eq!(int(&mut c, &["DBSIZE"]), 2);
    assert_eq!(text(&mut c, &["GET", "important"]), "value");
    assert_eq!(dataset_digest(&mut c), before);
    server.save_and_restart();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &["EXISTS", "k", "important"]), 2);
    let replica = server.replica();
    let mut r = replica.conn();
    assert_eq!(int(&mut r, &["EXISTS", "k", "important"]), 2);
    assert_eq!(digest(&mut r, "k"), digest(&mut c, "k"));
}

/// RL.APPLY grants no lease beyond the 100,000 a key may hold (the most an RDB load
/// accepts), so the key still reloads.
#[rstest]
fn apply_keeps_the_lease_cap(server: Server) {
    let mut c = server.conn();
    let got = grant_by_apply(&mut c, "lk");
    if let Some(i) = got[..MAX_LEASES]
        .iter()
        .position(|v| error_text(v).is_some())
    {
        panic!("grant {i} was refused: {:?}", got[i]);
    }
    let last = error_text(&got[MAX_LEASES]);
    assert!(
        last.as_deref().is_some_and(|e| e.contains("100000")),
        "the grant beyond the most leases answered {:?}",
        got[MAX_LEASES]
    );
    let dbsize = int(&mut c, &["DBSIZE"]);
    let reload = run(&mut c, &["DEBUG", "RELOAD"]);
    assert!(reload.is_ok(), "DEBUG RELOAD: {reload:?}");
    assert_eq!(int(&mut c, &["DBSIZE"]), dbsize);
}

/// The same RL.APPLY grants, then an AOF rewrite: the rewritten AOF loads (`DEBUG LOADAOF`)
/// and the server lives on.
#[rstest]
fn apply_keeps_the_lease_cap_through_an_aof_rewrite() {
    let server = Server::start(&["--appendonly", "yes"]);
    let mut c = server.conn();
    let rewriting = |c: &mut Connection| {
        let info = text(c, &["INFO", "persistence"]);
        !(info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0"))
    };
    grant_by_apply(&mut c, "lk");
    let dbsize = int(&mut c, &["DBSIZE"]);
    wait_until("no AOF rewrite", 60, || !rewriting(&mut c));
    run(&mut c, &["BGREWRITEAOF"]).expect("BGREWRITEAOF");
    wait_until("the AOF rewrite", 60, || !rewriting(&mut c));
    let info = text(&mut c, &["INFO", "persistence"]);
    assert!(info.contains("aof_last_bgrewrite_status:ok"), "{info}");
    let load = run(&mut c, &["DEBUG", "LOADAOF"]);
    assert!(load.is_ok(), "DEBUG LOADAOF: {load:?}");
    let mut c = server.conn();
    assert_eq!(text(&mut c, &["PING"]), "PONG");
    assert_eq!(int(&mut c, &["DBSIZE"]), dbsize);
}

/// An RL.APPLY of several changes whose second one is refused changes no key, and
/// propagates nothing to the replica or the AOF.
#[rstest]
fn a_multi_key_apply_that_fails_changes_nothing() {
    let primary = Server::start(&[
        "--appendonly",
        "yes",
        "--ratelimit.now-max-ahead-ms",
        "1000",
        NO_SYNC_DELAY[0],
        NO_SYNC_DELAY[1],
    ]);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let now = server_ms(&mut p);
    let got = redis::cmd("RL.APPLY")
        .arg("dummy")
        .arg(format!("RL.SLIDE 10 60000 NOW {now}"))
        .arg("victim")
        .arg("RL.SLIDE 5 60000 COST 5 NOW 4102444800000")
        .query::<Value>(&mut p);
    let aof = aof_raw_commands(&primary);
    let mut wrong = Vec::new();
    if let Ok(v) = got {
        wrong.push(format!("RL.APPLY answered {v:?}"));
    }
    let exists = |c: &mut Connection| ["dummy", "victim"].map(|key| int(c, &["EXISTS", key]));
    let on_primary = exists(&mut p);
    sync(&mut p);
    let on_replica = exists(&mut r);
    if on_primary != [0, 0] || on_replica != [0, 0] {
        wrong.push(format!(
            "EXISTS dummy, victim: {on_primary:?} on the primary, {on_replica:?} on the replica"
        ));
    }
    let applies: Vec<_> = aof.iter().filter(|w| w[0] == "RL.APPLY").collect();
    if !applies.is_empty() {
        wrong.push(format!("in the AOF: {applies:?}"));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// RL.APPLY and RL.RESTORE (which write whatever state they are given) are refused to
/// application users, whatever rules they were granted; the default user may run them.
#[rstest]
fn application_users_cannot_run_the_internal_commands(server: Server) {
    let mut admin = server.conn();
    let now = server_ms(&mut admin);
    let users: [(&str, &[&str]); 3] = [
        ("app1", &["+@all", "-@dangerous", "~user:*"]),
        ("app2", &["+@write", "+@read", "~*"]),
        (
            "app3",
            &[
                "~*",
                "+rl.slide",
                "+rl.token",
                "+rl.leaky",
                "+rl.fixed",
                "+rl.subwin",
                "+rl.acquire",
                "+rl.release",
                "+rl.extend",
                "+rl.all",
                "+rl.peek",
                "+rl.refund",
                "+rl.charge",
            ],
        ),
    ];
    let mut names = Vec::new();
    for (name, rules) in users {
        let mut words = vec!["ACL", "SETUSER", name, "on", "nopass"];
        words.extend_from_slice(rules);
        run(&mut admin, &words).unwrap_or_else(|e| panic!("ACL SETUSER {name}: {e}"));
        names.push(name);
    }
    // @ratelimit exists from Redis 7.4 and Valkey 8.0.
    let app4 = [
        "ACL",
        "SETUSER",
        "app4",
        "on",
        "nopass",
        "~*",
        "+@ratelimit",
    ];
    if run(&mut admin, &app4).is_ok() {
        names.push("app4");
    }
    let effect = format!("RL.SLIDE 10 60000 NOW {now}");
    let payload = slide_payload(now, &[(10, 60000)], [(now, 1)].into_iter());
    let apply = |c: &mut Connection| {
        redis::cmd("RL.APPLY")
            .arg("user:a")
            .arg(&effect)
            .query::<Value>(c)
    };
    let restore = |c: &mut Connection| {
        redis::cmd("RL.RESTORE")
            .arg("user:b")
            .arg(&payload[..])
            .query::<Value>(c)
    };
    let mut wrong = Vec::new();
    for name in names {
        let mut c = server.conn();
        run(&mut c, &["AUTH", name, "any"]).unwrap_or_else(|e| panic!("AUTH {name}: {e}"));
        if let Ok(v) = apply(&mut c) {
            wrong.push(format!("{name} ran RL.APPLY: {v:?}"));
        }
        if let Ok(v) = restore(&mut c) {
            wrong.push(format!("{name} ran RL.RESTORE: {v:?}"));
        }
        if int(&mut admin, &["EXISTS", "user:a", "user:b"]) != 0 {
            wrong.push(format!("{name} made user:a or user:b"));
            run(&mut admin, &["DEL", "user:a", "user:b"]).unwrap();
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    apply(&mut admin).expect("the default user's RL.APPLY");
    restore(&mut admin).expect("the default user's RL.RESTORE");
    assert_eq!(int(&mut admin, &["EXISTS", "user:a", "user:b"]), 2);
}

/// A server-made id never walks the ids a key holds one by one: with 99,999 client ids
/// `<F>-<i>` asked for, the next made id takes under a millisecond. A shared machine can
/// hold any command that long now and then: a slow call is tried again on a fresh key, up
/// to three times.
#[rstest]
fn a_server_made_id_never_stalls_the_server(server: Server) {
    let mut c = server.conn();
    let f = server_ms(&mut c);
    run(
        &mut c,
        &["CONFIG", "SET", "slowlog-log-slower-than", "1000"],
    )
    .unwrap();
    // The leases are asked for at F-1: a client id of the server's form for a later time
    // is refused now (it used to be granted, not counted as made, so that at F the server
    // met every one of them). Asked for at F, they count as made: the next id follows them.
    for (at, granted_all) in [(f - 1, false), (f, true)] {
        let mut tries = Vec::new();
        for attempt in 0..3 {
            let key = format!("k{at}-{attempt}");
            let mut pipe = redis::pipe();
            for i in 0..MAX_LEASES - 1 {
                pipe.cmd("RL.ACQUIRE")
                    .arg(&key)
                    .arg(1_000_000_000)
                    .arg(MONTH_MS)
                    .arg("ID")
                    .arg(format!("{f}-{i}"))
                    .arg("NOW")
                    .arg(at);
            }
            // Each is granted, or refused with an error (an id of the server's form ahead
            // of NOW).
            let mut held = std::collections::HashSet::new();
            for (i, v) in replies(&mut c, &pipe).iter().enumerate() {
                let granted = error_text(v).is_none() && lease(v).0 == 1;
                assert!(
                    granted || (error_text(v).is_some() && !granted_all),
                    "fill call {i} answered {v:?}"
                );
                if granted {
                    held.insert(format!("{f}-{i}"));
                }
            }
            run(&mut c, &["SLOWLOG", "RESET"]).unwrap();
            let (allowed, id) = acquire(
                &mut c,
                &[&key, "1000000000", MONTH_MS, "NOW", &f.to_string()],
            );
            let slow = slow_calls(&mut c, "RL.ACQUIRE");
            assert_eq!(allowed, 1);
            let id = id.expect("a lease id");
            assert!(!held.contains(&id), "made {id}, an id a lease holds");
            if granted_all {
                assert_eq!(id, format!("{f}-{}", MAX_LEASES - 1));
            }
            if slow.is_empty() {
                break;
            }
            tries.push(slow);
            assert!(
                tries.len() < 3,
                "slower than 1 ms three times (us, call): {tries:?}"
            );
        }
    }
}

/// An RL.APPLY from a client with a NOW behind the server clock expires its key at the same
/// time on the primary, on the replica and after the AOF is loaded, as RL.SLIDE does.
#[rstest]
fn a_lagging_now_gives_every_copy_the_same_expiry() {
    let primary = Server::start(&["--appendonly", "yes", NO_SYNC_DELAY[0], NO_SYNC_DELAY[1]]);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let behind = server_ms(&mut p) - 30_000;
    run(
        &mut p,
        &["RL.APPLY", "a1", &format!("RL.SLIDE 10 60000 NOW {behind}")],
    )
    .expect("RL.APPLY");
    let behind = behind.to_string();
    run(&mut p, &["RL.SLIDE", "a2", "10", "60000", "NOW", &behind]).expect("RL.SLIDE");
    sync(&mut p);
    let expiry = |c: &mut Connection| ["a1", "a2"].map(|key| int(c, &["PEXPIRETIME", key]));
    let on_primary = expiry(&mut p);
    let on_replica = expiry(&mut r);
    run(&mut p, &["DEBUG", "LOADAOF"]).expect("DEBUG LOADAOF");
    let reloaded = expiry(&mut p);
    assert_eq!(
        (on_replica, reloaded),
        (on_primary, on_primary),
        "PEXPIRETIME a1, a2: (on the replica, after DEBUG LOADAOF) and on the primary"
    );
}

/// DEL of a key holding 100,000 leases of 512-byte ids does not hold the server for a
/// millisecond, even when the server frees values at once (lazyfree-lazy-user-del no). A
/// shared machine can hold any command that long now and then (a `SLOWLOG RESET` was seen
/// at 4 ms): a slow `DEL` is tried again, on a key filled again, up to three times.
#[rstest]
fn deleting_a_big_key_does_not_block(server: Server) {
    let mut c = server.conn();
    run(&mut c, &["CONFIG", "SET", "lazyfree-lazy-user-del", "no"]).unwrap();
    let now = server_ms(&mut c);
    let mut tries = Vec::new();
    for _ in 0..3 {
        for batch in 0..MAX_LEASES / 5000 {
            let mut pipe = redis::pipe();
            for i in batch * 5000..(batch + 1) * 5000 {
                pipe.cmd("RL.ACQUIRE")
                    .arg("big")
                    .arg(1_000_000_000)
                    .arg(MONTH_MS)
                    .arg("ID")
                    .arg(format!("{i:0>512}"))
                    .arg("NOW")
                    .arg(now)
                    .ignore();
            }
            pipe.query::<()>(&mut c).expect("the leases");
        }
        run(
            &mut c,
            &["CONFIG", "SET", "slowlog-log-slower-than", "1000"],
        )
        .unwrap();
        run(&mut c, &["SLOWLOG", "RESET"]).unwrap();
        assert_eq!(int(&mut c, &["DEL", "big"]), 1);
        let slow = slow_calls(&mut c, "DEL");
        if slow.is_empty() {
            return;
        }
        tries.push(slow);
    }
    panic!("slower than 1 ms three times (us, call): {tries:?}");
}

/// A renewal with any COST the primary accepts is applied alike on the replica.
#[rstest]
fn a_renewal_is_applied_alike_on_the_replica() {
    let primary = Server::start(&NO_SYNC_DELAY);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    acquire(&mut p, &["k", "10", "60000", "ID", "a"]);
    // Whatever it answers, the replica must end where the primary does.
    let _ = run(
        &mut p,
        &[
            "RL.ACQUIRE",
            "k",
            "1000000000",
            "1000",
            "ID",
            "a",
            "COST",
            "9223372036854775807",
        ],
    );
    sync(&mut p);
    let state = |c: &mut Connection| (digest(c, "k"), int(c, &["PEXPIRETIME", "k"]));
    assert_eq!(
        state(&mut r),
        state(&mut p),
        "DEBUG DIGEST-VALUE k and PEXPIRETIME k: on the replica (left), on the primary"
    );
}

/// A replica knows every id its primary made: promoted, it never makes one of them again.
#[rstest]
fn a_promoted_replica_never_makes_an_id_again() {
    let primary = Server::start(&NO_SYNC_DELAY);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let t = server_ms(&mut p);
    let (at, next) = (t.to_string(), (t + 1).to_string());
    let top = format!("{t}-9223372036854775807");
    acquire(&mut p, &["k", "10", "60000", "ID", &top, "NOW", &at]);
    let (allowed, made) = acquire(&mut p, &["k", "10", "60000", "NOW", &at]);
    assert_eq!(allowed, 1);
    let made = made.expect("a server-made id");
    run(&mut p, &["RL.RELEASE", "k", &made, "NOW", &at]).expect("RL.RELEASE");
    sync(&mut p);
    run(&mut r, &["REPLICAOF", "NO", "ONE"]).expect("REPLICAOF NO ONE");
    let (allowed, again) = acquire(&mut r, &["k", "10", "60000", "NOW", &next]);
    assert_eq!(allowed, 1);
    let again = again.expect("a server-made id");
    assert_ne!(
        again, made,
        "the promoted replica made the primary's id again"
    );
    assert_ne!(again, top);
}

/// RL.ALL refuses a call that one limiter cannot record before changing any key, and a
/// single RL.SUBWIN refuses rather than allowing a call it does not record.
#[rstest]
fn rl_all_refuses_before_anything_changes(server: Server) {
    let mut c = server.conn();
    // An hour ahead of the server clock: the keys live in real time until the test is done
    // (at t0 itself, s, made at t0-5 with a 2 ms window, would expire within milliseconds).
    let t0 = server_ms(&mut c) + 3_600_000;
    let at = |dt: u64| (t0 + dt).to_string();
    let max = "2147483647";
    // 2^31-1 units in a 4096 ms window, then 2^31-1 more in a 1 ms one: the counters'
    // 32-bit total is full.
    for (window, now) in [("4096", at(0)), ("1", at(1))] {
        let words = [
            "RL.SUBWIN",
            "sw",
            max,
            window,
            "1",
            "COST",
            max,
            "NOW",
            &now,
        ];
        let v = run(&mut c, &words).unwrap_or_else(|e| panic!("{words:?}: {e}"));
        let fields: Vec<i64> = redis::from_redis_value(&v).unwrap();
        assert_eq!(fields[0], 1, "{words:?}: {fields:?}");
    }
    let made = (t0 - 5).to_string();
    run(&mut c, &["RL.SLIDE", "s", "1", "2", "NOW", &made]).expect("RL.SLIDE");
    let (s, sw) = (digest(&mut c, "s"), digest(&mut c, "sw"));
    let all = [
        "RL.ALL",
        "2",
        "s",
        "sw",
        "SLIDE",
        "1",
        "2",
        "SUBWIN",
        max,
        "1",
        "1",
        "COST",
        "2",
        "NOW",
        &at(2),
    ];
    let mut wrong = Vec::new();
    match run(&mut c, &all) {
        Ok(v) => wrong.push(format!("RL.ALL answered {v:?}")),
        Err(e) if e.to_string().contains("internal error") => wrong.push(format!("RL.ALL: {e}")),
        Err(_) => {}
    }
    for (key, was) in [("s", &s), ("sw", &sw)] {
        if digest(&mut c, key) != *was {
            wrong.push(format!("RL.ALL changed {key}"));
        }
    }
    let single = ["RL.SUBWIN", "sw", max, "1", "1", "COST", "2", "NOW", &at(2)];
    if let Ok(v) = run(&mut c, &single) {
        wrong.push(format!("RL.SUBWIN answered {v:?}"));
    }
    if digest(&mut c, "sw") != sw {
        wrong.push("RL.SUBWIN changed sw".to_string());
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
