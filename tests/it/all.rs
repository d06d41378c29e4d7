//! RL.ALL: one all-or-nothing decision across several keys and kinds, on a real server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::common::{
    aof_commands, aof_raw_commands, dataset_digest, digest, err, int, rl, run, server, unix_ms,
    wait_until, Server,
};
use redis::{Connection, Value};
use rstest::rstest;

/// An RL.ALL reply: the combined five fields, then each limiter's five.
fn all(c: &mut Connection, line: &str) -> ([i64; 5], Vec<[i64; 5]>) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let v = run(c, &words).unwrap_or_else(|e| panic!("{line}: {e}"));
    let Value::Array(items) = v else {
        panic!("{line}: not an array: {v:?}");
    };
    let ints: Vec<i64> = items[..5]
        .iter()
        .map(|v| redis::from_redis_value(v).expect("integer"))
        .collect();
    let each = items[5..]
        .iter()
        .map(|v| {
            let e: Vec<i64> = redis::from_redis_value(v).expect("five integers");
            e.try_into().expect("five")
        })
        .collect();
    (ints.try_into().expect("five"), each)
}

#[rstest]
fn layers_decide_together(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    let call = |c: &mut Connection, at: u64| {
        all(
            c,
            &format!(
                "RL.ALL 2 {{user:42}}:rpm {{user:42}}:tpm SLIDE 2 60000 TOKEN 10000 60000 COST 3000 NOW {at}"
            ),
        )
    };
    let (d, each) = call(&mut c, t);
    assert_eq!(d, [1, 2, 1, 0, 60000]);
    assert_eq!(each, [[1, 2, 1, 0, 60000], [1, 10000, 7000, 0, 18000]]);
    let (d, _) = call(&mut c, t + 1);
    assert_eq!(d[..3], [1, 2, 0]);
    // The requests refuse; the tokens would allow, are not taken, and say what they hold.
    let (d, each) = call(&mut c, t + 2);
    assert_eq!(d, [0, 2, 0, 59998, 59999]);
    assert_eq!(each[1], [1, 10000, 4000, 0, 35998]);
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK {{user:42}}:tpm NOW {}", t + 2)),
        each[1] // 10000 - 6000: the refused call took nothing
    );
    // The same keys through their own commands see the same state.
    assert_eq!(
        rl(
            &mut c,
            &format!("RL.SLIDE {{user:42}}:rpm 2 60000 NOW {}", t + 3)
        )[0],
        0
    );
    // Expiry as the single-key commands set it.
    let pttl = int(&mut c, &["PTTL", "{user:42}:tpm"]);
    assert!(pttl > 0 && pttl <= 36_000, "{pttl}");
    // COST 0 everywhere reads and writes nothing.
    let before = dataset_digest(&mut c);
    let (d, each) = all(
        &mut c,
        &format!(
            "RL.ALL 3 {{user:42}}:rpm {{user:42}}:tpm fresh SLIDE 2 60000 COST 0 TOKEN 10000 60000 COST 0 FIXED 5 1000 COST 0 NOW {}",
            t + 4
        ),
    );
    assert_eq!(d[0], 1);
    assert_eq!(each[2], [1, 5, 5, 0, 0]);
    assert_eq!(dataset_digest(&mut c), before);
    assert_eq!(int(&mut c, &["EXISTS", "fresh"]), 0);
}

#[rstest]
fn every_kind_in_one_call(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    let (d, each) = all(
        &mut c,
        &format!(
            "RL.ALL 5 s t l f w SLIDE 5 1000 10 60000 TOKEN 5 1000 BURST 3 LEAKY 5 1000 MAXDELAY 500 \
             FIXED 5 1000 ALIGN SUBWIN 5 1000 100 COST 2 NOW {t}"
        ),
    );
    assert_eq!(d[0], 1);
    assert_eq!(each.len(), 5);
    // Each key is the kind its spec names: its own command takes it.
    for (key, line) in [
        ("s", "RL.SLIDE s 5 1000 10 60000"),
        ("t", "RL.TOKEN t 5 1000 BURST 3"),
        ("l", "RL.LEAKY l 5 1000 MAXDELAY 500"),
        ("f", "RL.FIXED f 5 1000 ALIGN"),
        ("w", "RL.SUBWIN w 5 1000 100"),
    ] {
        assert_eq!(int(&mut c, &["EXISTS", key]), 1);
        rl(&mut c, &format!("{line} NOW {t}"));
    }
    // A key of another kind: the single-key command's error, naming the key; nothing changes.
    let before = dataset_digest(&mut c);
    let e = err(
        &mut c,
        &[
            "RL.ALL", "2", "s", "t", "SLIDE", "5", "1000", "10", "60000", "FIXED", "5", "1000",
        ],
    );
    assert_eq!(
        e,
        "WRONGTYPE key holds a RL.TOKEN limiter, not RL.FIXED (key 't')"
    );
    assert_eq!(dataset_digest(&mut c), before);
    run(&mut c, &["SET", "str", "x"]).unwrap();
    let e = err(&mut c, &["RL.ALL", "1", "str", "TOKEN", "1", "1000"]);
    assert!(
        e.starts_with("WRONGTYPE") && e.ends_with("(key 'str')"),
        "{e}"
    );
}

#[rstest]
#[case(&["RL.ALL"], "ERR wrong number of arguments for 'RL.ALL' command")]
#[case(&["RL.ALL", "0", "a", "TOKEN", "1", "1000"], "ERR numkeys must be an integer from 1 to 16")]
#[case(&["RL.ALL", "17", "a", "TOKEN", "1", "1000"], "ERR numkeys must be an integer from 1 to 16")]
#[case(&["RL.ALL", "5", "a", "b", "TOKEN", "1"], "ERR wrong number of arguments for 'RL.ALL' command")]
#[case(&["RL.ALL", "2", "a", "b", "TOKEN", "1", "1000"], "ERR RL.ALL takes one limiter per key: 2 key(s), 1 limiter(s)")]
#[case(&["RL.ALL", "1", "a", "TOKEN", "1", "1000", "FIXED", "1", "1000"], "ERR RL.ALL takes one limiter per key: 1 key(s), 2 limiter(s)")]
#[case(&["RL.ALL", "2", "a", "a", "TOKEN", "1", "1000", "TOKEN", "1", "1000"], "ERR the same key is given twice (key 'a')")]
#[case(&["RL.ALL", "1", "a", "TOKEN", "1", "1000", "ALIGN"], "ERR unknown option 'ALIGN' (key 'a')")]
#[case(&["RL.ALL", "1", "a", "TOKEN", "0", "1000"], "ERR limit must be an integer from 1 to 2147483647 (key 'a')")]
#[case(&["RL.ALL", "1", "a", "HOURLY", "1", "1000"], "ERR expected a limiter kind (SLIDE, TOKEN, LEAKY, FIXED, SUBWIN, ACQUIRE, THROTTLE), got 'HOURLY'")]
#[case(&["RL.ALL", "1", "a", "TOKEN", "1", "1000", "NOW", "1", "2"], "ERR NOW comes once, after the last limiter; then nothing, got '2'")]
fn bad_input(#[case] words: &[&str], #[case] want: &str) {
    let server = Server::start(&[]);
    let mut c = server.conn();
    assert_eq!(err(&mut c, words), want);
    assert_eq!(int(&mut c, &["DBSIZE"]), 0);
}

#[rstest]
fn survives_restart_and_reaches_the_aof_in_one_apply() {
    let mut server = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = server.conn();
    // A NOW just ahead of the server clock: a NOW behind it would add a PEXPIREAT of each
    // key, and Redis would wrap those and the RL.APPLY in MULTI/EXEC.
    let t = unix_ms() + 200;
    let line = format!("RL.ALL 2 {{o}}:a {{o}}:b TOKEN 100 60000 FIXED 5 60000 COST 2 NOW {t}");
    all(&mut c, &line);
    let digests = (digest(&mut c, "{o}:a"), digest(&mut c, "{o}:b"));
    // The two effects, as the single-key commands write them, in one RL.APPLY (no MULTI).
    let mut commands = Vec::new();
    wait_until("the AOF to hold the call", 10, || {
        commands = aof_raw_commands(&server)
            .into_iter()
            .filter(|words| words[0] != "SELECT")
            .collect::<Vec<_>>();
        commands.iter().any(|c| c[0] == "RL.APPLY")
    });
    assert_eq!(
        commands,
        [[
            "RL.APPLY".to_string(),
            "{o}:a".into(),
            format!("RL.TOKEN 100 60000 NOW {t}"),
            "{o}:b".into(),
            format!("RL.FIXED 5 60000 COST 2 NOW {t}"),
        ]]
    );
    server.crash_and_restart();
    let mut c = server.conn();
    assert_eq!((digest(&mut c, "{o}:a"), digest(&mut c, "{o}:b")), digests);
    server.save_and_restart();
    let mut c = server.conn();
    assert_eq!((digest(&mut c, "{o}:a"), digest(&mut c, "{o}:b")), digests);
}

#[rstest]
fn replica_holds_the_same_limiters() {
    let primary = Server::start(&[]);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    for i in 0..200u64 {
        let line = format!(
            "RL.ALL 3 u{} org tok SLIDE 5 2000 FIXED 40 1000 TOKEN 1000 1000 COST {}",
            i % 4,
            i % 7
        );
        all(&mut p, &line);
    }
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut p).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(dataset_digest(&mut p), dataset_digest(&mut r));
    for key in ["u0", "u1", "org", "tok"] {
        assert_eq!(
            int(&mut p, &["PEXPIRETIME", key]),
            int(&mut r, &["PEXPIRETIME", key]),
            "{key}"
        );
    }
    // A replica refuses the write, as it does the single-key commands.
    let e = err(&mut r, &["RL.ALL", "1", "x", "TOKEN", "1", "1000"]);
    assert!(e.starts_with("READONLY"), "{e}");
}

#[rstest]
fn getkeys_and_keyspace_events(server: Server) {
    let mut c = server.conn();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("RL.ALL")
        .arg(2)
        .arg("a")
        .arg("b")
        .arg("TOKEN")
        .arg(1)
        .arg(1000)
        .arg("FIXED")
        .arg(1)
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["a", "b"]);
    // COMMAND DOCS shows each limiter RL.ALL takes, by its keyword, with its arguments.
    let docs = format!("{:?}", run(&mut c, &["COMMAND", "DOCS", "RL.ALL"]).unwrap());
    for keyword in [
        "SLIDE", "TOKEN", "LEAKY", "FIXED", "SUBWIN", "ACQUIRE", "THROTTLE", "BURST", "ALIGN", "ID",
    ] {
        assert!(
            docs.contains(&format!("\"{keyword}\"")),
            "{keyword}: {docs}"
        );
    }
    assert!(!docs.contains("\"BLOCK\""), "{docs}");
    run(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KEd"]).unwrap();
    let mut sub = server.conn();
    let mut pubsub = sub.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:*").unwrap();
    pubsub
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    all(&mut c, "RL.ALL 2 a b TOKEN 1 1000 FIXED 1 1000");
    let mut seen = Vec::new();
    for _ in 0..2 {
        let m = pubsub.get_message().unwrap();
        let payload: String = m.get_payload().unwrap();
        seen.push(format!("{} {payload}", m.get_channel_name()));
    }
    assert_eq!(
        seen,
        ["__keyspace@0__:a rl.token", "__keyspace@0__:b rl.fixed"]
    );
}

/// 50 clients, each its own user, all under one organisation: no user and not the
/// organisation ever goes past its limit, and the organisation's limit is reached.
#[rstest]
fn fifty_clients_on_two_layers_never_exceed_either(server: Server) {
    const USER_LIMIT: u64 = 7;
    const ORG_LIMIT: u64 = 120;
    let allowed = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..50)
        .map(|u| {
            let mut c = server.conn();
            let allowed = Arc::clone(&allowed);
            std::thread::spawn(move || {
                let mut mine = 0;
                for _ in 0..20 {
                    let (d, each) = all(
                        &mut c,
                        &format!(
                            "RL.ALL 2 {{org}}:u{u} {{org}} SLIDE {USER_LIMIT} 600000 TOKEN {ORG_LIMIT} 600000"
                        ),
                    );
                    if d[0] == 1 {
                        mine += 1;
                        assert!(each.iter().all(|e| e[0] == 1));
                    }
                }
                assert!(mine <= USER_LIMIT, "user {u}: {mine} allowed");
                allowed.fetch_add(mine, Ordering::Relaxed);
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    // 50 users could take 350; the organisation stops them at 120 (plus what its bucket
    // refilled while the test ran: at most a few per second).
    let total = allowed.load(Ordering::Relaxed);
    assert!((ORG_LIMIT..=ORG_LIMIT + 5).contains(&total), "{total}");
    let mut c = server.conn();
    let users: i64 = (0..50)
        .map(
            |u| match run(&mut c, &["RL.PEEK", &format!("{{org}}:u{u}")]).unwrap() {
                Value::Nil => 0,
                v => {
                    let v: Vec<i64> = redis::from_redis_value(&v).unwrap();
                    v[1] - v[2]
                }
            },
        )
        .sum();
    assert_eq!(users as u64, total);
}

/// An RL.ALL reply as its combined five fields, then each limiter's fields: five integers,
/// and for an ACQUIRE limiter the lease id (`Some(None)`: nil).
type Entry = (Vec<i64>, Option<Option<String>>);

fn all_with_leases(c: &mut Connection, line: &str) -> Vec<Entry> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let v = run(c, &words).unwrap_or_else(|e| panic!("{line}: {e}"));
    let Value::Array(items) = v else {
        panic!("{line}: {v:?}")
    };
    let ints = |vs: &[Value]| -> Vec<i64> {
        vs.iter()
            .map(|v| redis::from_redis_value(v).expect("an integer"))
            .collect()
    };
    let mut out = vec![(ints(&items[..5]), None)];
    for item in &items[5..] {
        let Value::Array(f) = item else {
            panic!("{line}: {item:?}")
        };
        let lease = (f.len() == 6).then(|| match &f[5] {
            Value::Nil => None,
            id => Some(redis::from_redis_value(id).expect("an id")),
        });
        out.push((ints(&f[..5]), lease));
    }
    out
}

/// The layered-limits recipe's rate plus concurrency: three requests a minute and two jobs at
/// once for a user, decided together; the lease's id comes back in its limiter's entry (six
/// fields, as RL.ACQUIRE answers), the grant replicates and reaches the AOF as RL.ACQUIRE's
/// own effect, in the call's one RL.APPLY.
#[rstest]
fn rate_and_concurrency_layers() {
    let primary = Server::start(&["--appendonly", "yes"]);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let t = unix_ms();
    let line = |at: u64, opts: &str| {
        format!("RL.ALL 2 {{u}}:rpm {{u}}:jobs SLIDE 3 60000 ACQUIRE 2 30000{opts} NOW {at}")
    };
    let got = all_with_leases(&mut p, &line(t, " ID a"));
    assert_eq!(got[0], (vec![1, 2, 1, 0, 60000], None));
    assert_eq!(got[1], (vec![1, 3, 2, 0, 60000], None));
    assert_eq!(got[2], (vec![1, 2, 1, 0, 30000], Some(Some("a".into()))));
    let got = all_with_leases(&mut p, &line(t + 1, ""));
    assert_eq!(got[0].0[..3], [1, 2, 0]);
    let made = got[2].1.clone().flatten().expect("a server-made id");
    // Both units held: refused, and the request is not taken from the rate layer.
    let got = all_with_leases(&mut p, &line(t + 2, " ID c"));
    assert_eq!(got[0].0, [0, 2, 0, 29998, 59999]);
    assert_eq!(got[1].0[..3], [1, 3, 1]);
    assert_eq!(got[2], (vec![0, 2, 0, 29998, 29999], Some(None)));
    assert_eq!(
        rl(&mut p, &format!("RL.PEEK {{u}}:rpm NOW {}", t + 2))[2],
        1
    );
    // Released: the next one is granted; then the rate layer refuses.
    assert_eq!(
        rl(&mut p, &format!("RL.RELEASE {{u}}:jobs a NOW {}", t + 3))[0],
        1
    );
    let got = all_with_leases(&mut p, &line(t + 4, " ID c COST 1"));
    assert_eq!(got[2].1, Some(Some("c".into())));
    let got = all_with_leases(&mut p, &line(t + 5, " ID d"));
    assert_eq!(got[0].0[..2], [0, 3]);
    assert_eq!(
        rl(
            &mut p,
            &format!("RL.RELEASE {{u}}:jobs {made} NOW {}", t + 6)
        )[2],
        1
    );
    // BLOCK has no place in RL.ALL; a lease key under another spec names its key.
    let e = err(
        &mut p,
        &["RL.ALL", "1", "x", "ACQUIRE", "1", "1000", "BLOCK", "0"],
    );
    assert!(e.contains("BLOCK is not allowed inside RL.ALL"), "{e}");
    let e = err(&mut p, &["RL.ALL", "1", "{u}:jobs", "TOKEN", "1", "1000"]);
    assert!(e.contains("{u}:jobs"), "{e}");

    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut p).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(dataset_digest(&mut p), dataset_digest(&mut r));
    let mut commands = Vec::new();
    wait_until("the AOF to hold the grants", 10, || {
        commands = aof_commands(&primary)
            .into_iter()
            .map(|words| words.join(" "))
            .collect::<Vec<_>>();
        commands.iter().filter(|c| c.contains("RL.ACQUIRE")).count() == 3
    });
    let at = |what: &str| commands.iter().position(|c| c.contains(what));
    let first = at(&format!("{{u}}:jobs 2 30000 ID 61 NOW {t}")).expect("the grant");
    let slide = at(&format!("RL.SLIDE {{u}}:rpm 3 60000 NOW {t}")).expect("the request");
    // Both changes of the call in one RL.APPLY: side by side once split.
    assert_eq!(slide + 1, first, "{commands:?}");
    assert!(
        !commands.iter().any(|c| c.contains("RL.ALL")),
        "{commands:?}"
    );
}

/// The changes of one call travel as one `RL.APPLY key effect [key effect ...]`: a replica
/// applies them all and passes the command on once, so a replica of that replica holds the
/// same limiters (a sliding log recorded twice would differ).
#[rstest]
fn one_apply_reaches_a_chain_of_replicas_once() {
    let primary = Server::start(&[]);
    let replica = primary.replica();
    let chained = replica.replica();
    let (mut p, mut r, mut s) = (primary.conn(), replica.conn(), chained.conn());
    // Valkey 8.0 streams to a replica synced over a socket only once it has acknowledged:
    // its link may be up before its own replica counts it online.
    wait_until("the chained replica to be online", 60, || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut r)
            .unwrap_or_default();
        info.contains("state=online")
    });
    // Every key outlives the test: a bucket of 1,000 per second was full again (and its key
    // gone) some 80 ms after the last call, and a 1 s window's key after a second. A replica
    // reads a key past its expiry as missing, so the digests taken on the primary were met
    // on the replicas only when they caught up within that time (one run in five did not).
    for i in 0..50u64 {
        let line = format!(
            "RL.ALL 3 {{c}}:a{} {{c}}:b {{c}}:t SLIDE 100 60000 FIXED 400 60000 TOKEN 1000 86400000 COST {}",
            i % 3,
            1 + i % 2
        );
        all(&mut p, &line);
    }
    // Six keys: more changes than are passed as buffers.
    all(
        &mut p,
        "RL.ALL 6 {c}:a0 {c}:a1 {c}:a2 {c}:b {c}:t {c}:f SLIDE 100 60000 SLIDE 100 60000 \
         SLIDE 100 60000 FIXED 400 60000 TOKEN 1000 86400000 FIXED 9 86400000 COST 2",
    );
    let digests = |c: &mut Connection| {
        ["{c}:a0", "{c}:a1", "{c}:a2", "{c}:b", "{c}:t", "{c}:f"].map(|k| digest(c, k))
    };
    let want = digests(&mut p);
    wait_until("the chained replica to catch up", 60, || {
        digests(&mut r) == want && digests(&mut s) == want
    });
    // 51 requests on {c}:b (each COST is its own spec's).
    assert_eq!(rl(&mut s, "RL.PEEK {c}:b")[2], 400 - 51);
}

/// RL.APPLY by hand: several changes answer OK; a count of words that does not pair keys with
/// effects is an arity error; the changes before a bad one stay applied; the keys are every
/// other word.
#[rstest]
fn apply_takes_several_changes() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    let t = unix_ms();
    let (a, b) = (
        format!("RL.FIXED 5 60000 NOW {t}"),
        format!("RL.TOKEN 10 60000 COST 3 NOW {t}"),
    );
    assert_eq!(
        run(&mut c, &["RL.APPLY", "x", &a, "y", &b]).unwrap(),
        Value::Okay
    );
    assert_eq!(rl(&mut c, &format!("RL.PEEK x NOW {t}"))[2], 4);
    assert_eq!(rl(&mut c, &format!("RL.PEEK y NOW {t}"))[2], 7);
    let e = err(&mut c, &["RL.APPLY", "x", &a, "y"]);
    assert!(e.contains("wrong number of arguments"), "{e}");
    // All or nothing: a change that cannot be applied leaves every key as it was.
    let e = err(&mut c, &["RL.APPLY", "z", &a, "y", "RL.NOPE 1"]);
    assert!(
        e.contains("RL.APPLY effect") && e.contains("(key 'y')"),
        "{e}"
    );
    assert_eq!(int(&mut c, &["EXISTS", "z"]), 0);
    let e = err(&mut c, &["RL.APPLY", "z", &a, "z", &b]);
    assert!(e.contains("the same key is given twice"), "{e}");
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg(&["RL.APPLY", "x", &a, "y", &b][..])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["x", "y"]);
}
