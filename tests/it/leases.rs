//! RL.ACQUIRE, RL.RELEASE and RL.EXTEND against a real server: the contract, renewals by ID,
//! exact expiry under NOW, bad input, replication, persistence, many clients at once, the
//! slowest call at 100,000 leases, and effects from a client. Waiting (`BLOCK`) is in
//! tests/it/leases_block.rs.

use crate::common::leases::{acquire, aof_intervals, most_at_once};
use crate::common::{digest, err, int, rl, run, text, unix_ms, wait_until, Server};
use redis::{Connection, Value};

const T: u64 = 4_102_444_800_000; // 2100-01-01: NOW far ahead of the server clock

#[test]
fn the_contract() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    let (d, a) = acquire(&mut c, &format!("jobs 2 1000 NOW {T}"));
    assert_eq!(d, [1, 2, 1, 0, 1000]);
    assert_eq!(a.as_deref(), Some(&*format!("{T}-0")));
    let (d, b) = acquire(&mut c, &format!("jobs 2 1000 NOW {}", T + 100));
    assert_eq!(
        (d, b.as_deref()),
        ([1, 2, 0, 0, 1000], Some(&*format!("{}-0", T + 100)))
    );
    // Full: the wait is until the first lease ends; the reset until the last.
    let refused = acquire(&mut c, &format!("jobs 2 1000 NOW {}", T + 200));
    assert_eq!(refused, ([0, 2, 0, 800, 900], None));
    // COST above the limit can never be granted.
    assert_eq!(
        acquire(&mut c, &format!("jobs 2 1000 COST 3 NOW {}", T + 200)).0[3],
        -1
    );
    // COST 0 asks without taking.
    assert_eq!(
        acquire(&mut c, &format!("jobs 2 1000 COST 0 NOW {}", T + 200)),
        ([1, 2, 0, 0, 900], None)
    );
    // Release: the first field says whether the lease was held.
    let a = a.unwrap();
    let released = rl(&mut c, &format!("RL.RELEASE jobs {a} NOW {}", T + 300));
    assert_eq!(released, [1, 2, 1, 0, 800]);
    assert_eq!(
        rl(&mut c, &format!("RL.RELEASE jobs {a} NOW {}", T + 300)),
        [0, 2, 1, 0, 800]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.RELEASE nokey x NOW {T}")),
        [0, 0, 0, 0, 0]
    );
    // Extend: the lease ends lease_ms from now.
    let b = b.unwrap();
    assert_eq!(
        rl(&mut c, &format!("RL.EXTEND jobs {b} 5000 NOW {}", T + 300)),
        [1, 2, 1, 0, 5000]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK jobs NOW {}", T + 300)),
        [1, 2, 1, 0, 5000]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.EXTEND jobs {b} 10 NOW {}", T + 5300)),
        [0, 2, 2, 0, 0]
    );
    // Keyspace of other kinds and types.
    assert!(err(&mut c, &["RL.REFUND", "jobs"]).contains("RL.RELEASE"));
    assert!(err(&mut c, &["RL.SLIDE", "jobs", "1", "1000"]).starts_with("WRONGTYPE"));
    run(&mut c, &["RL.SLIDE", "slide", "1", "1000"]).unwrap();
    assert!(err(&mut c, &["RL.ACQUIRE", "slide", "1", "1000"]).starts_with("WRONGTYPE"));
    assert!(err(&mut c, &["RL.RELEASE", "slide", "x"]).starts_with("WRONGTYPE"));
    run(&mut c, &["SET", "str", "x"]).unwrap();
    assert!(err(&mut c, &["RL.ACQUIRE", "str", "1", "1000"]).starts_with("WRONGTYPE"));
    let info = text(&mut c, &["INFO", "ratelimit"]);
    assert!(
        info.contains("ratelimit_acquire:calls=7,allowed=3,refused=2,errors=2"),
        "{info}"
    );
    assert!(info.contains("ratelimit_release:calls=4"), "{info}");
}

#[test]
fn bad_input() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    for (words, want) in [
        (&["RL.ACQUIRE", "k", "1", "1000", "ID", ""][..], "1 to 512"),
        (&["RL.RELEASE", "k", ""], "1 to 512"),
        (&["RL.ACQUIRE", "k", "0", "1000"], "limit"),
        (&["RL.ACQUIRE", "k", "1", "0"], "lease_ms"),
        (&["RL.ACQUIRE", "k", "1", "2678400001"], "lease_ms"),
        (&["RL.ACQUIRE", "k", "1", "1000", "COST", "-1"], "COST"),
        (
            &["RL.ACQUIRE", "k", "1", "1000", "ID", "a", "ID", "a"],
            "more than once",
        ),
        (&["RL.EXTEND", "k", "a"], "wrong number"),
        (&["RL.EXTEND", "k", "a", "0"], "lease_ms"),
        (
            &["RL.APPLY", "k", "RL.ACQUIRE 1 1000 ID xyz NOW 1"],
            "malformed",
        ),
        (&["RL.APPLY", "k", "RL.RELEASE 78 NOW"], "needs a value"),
    ] {
        let e = err(&mut c, words);
        assert!(e.contains(want), "{words:?}: {e}");
    }
    let huge = "x".repeat(64 * 1024);
    assert!(err(&mut c, &["RL.ACQUIRE", "k", "1", "1000", "ID", &huge]).contains("1 to 512"));
    let longest = "x".repeat(512);
    let (d, id) = acquire(&mut c, &format!("k 1 1000 ID {longest}"));
    assert_eq!((d[0], id.as_deref()), (1, Some(&*longest)));
    // An id holding spaces and any byte.
    let odd = b"a b\r\n\x00\xff".to_vec();
    // Without ID before it, an id is an unknown option.
    let v: redis::RedisResult<Value> = redis::cmd("RL.ACQUIRE")
        .arg("odd")
        .arg(1)
        .arg(1000)
        .arg(&odd[..])
        .query(&mut c);
    assert!(v.is_err());
    let got: Value = redis::cmd("RL.ACQUIRE")
        .arg("odd")
        .arg(1)
        .arg(1000)
        .arg("ID")
        .arg(&odd[..])
        .query(&mut c)
        .unwrap();
    let Value::Array(fields) = got else { panic!() };
    assert_eq!(fields[5], Value::BulkString(odd.clone()));
    let released: Vec<i64> = redis::cmd("RL.RELEASE")
        .arg("odd")
        .arg(&odd[..])
        .query(&mut c)
        .unwrap();
    assert_eq!(released[0], 1);
}

#[test]
fn the_same_id_renews_its_lease() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    assert_eq!(acquire(&mut c, &format!("r 1 1000 ID job NOW {T}")).0[0], 1);
    // A retry after a timeout: no second slot, the lease runs 1000 ms from the retry.
    let again = acquire(&mut c, &format!("r 1 1000 ID job NOW {}", T + 600));
    assert_eq!(again, ([1, 1, 0, 0, 1000], Some("job".into())));
    assert_eq!(
        acquire(&mut c, &format!("r 1 1000 ID other NOW {}", T + 1599)).0[0],
        0
    );
    assert_eq!(
        acquire(&mut c, &format!("r 1 1000 ID other NOW {}", T + 1600)).0[0],
        1
    );
    // Once ended, the same id takes a slot anew.
    assert_eq!(
        acquire(&mut c, &format!("r 1 1000 ID job NOW {}", T + 2600)).0[0],
        1
    );
}

#[test]
fn leases_end_exactly_and_the_key_with_the_last() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    let now = unix_ms();
    acquire(&mut c, &format!("e 3 1000 COST 2 NOW {now}"));
    acquire(&mut c, &format!("e 3 60000 NOW {now}"));
    assert_eq!(rl(&mut c, &format!("RL.PEEK e NOW {}", now + 999))[2], 0);
    assert_eq!(rl(&mut c, &format!("RL.PEEK e NOW {}", now + 1000))[2], 2);
    let pttl = int(&mut c, &["PTTL", "e"]);
    assert!((59_000..=60_000).contains(&pttl), "{pttl}");
    // Releasing the last lease deletes the key (a millisecond after the last id it made).
    let (_, id) = acquire(&mut c, &format!("gone 1 60000 ID mine NOW {now}"));
    rl(
        &mut c,
        &format!("RL.RELEASE gone {} NOW {now}", id.unwrap()),
    );
    assert_eq!(int(&mut c, &["EXISTS", "gone"]), 0);
    let (_, id) = acquire(&mut c, "made 1 60000");
    rl(&mut c, &format!("RL.RELEASE made {}", id.unwrap()));
    wait_until("the key to go", 5, || int(&mut c, &["EXISTS", "made"]) == 0);
}

#[test]
fn fifty_clients_never_hold_more_than_the_limit() {
    let server = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let port = server.port;
    let granted: Vec<usize> = (0..50)
        .map(|i| {
            std::thread::spawn(move || {
                let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
                let mut c = client.get_connection().unwrap();
                let mut n = 0;
                for j in 0..40 {
                    let (d, id) = acquire(&mut c, "pool 5 2000");
                    if let Some(id) = id {
                        n += 1;
                        // Some clients forget to release: their leases end by themselves.
                        if (i + j) % 7 != 0 {
                            rl(&mut c, &format!("RL.RELEASE pool {id}"));
                        }
                    } else {
                        assert!(d[3] > 0, "{d:?}");
                    }
                }
                n
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let total: usize = granted.iter().sum();
    let intervals = aof_intervals(&server, "pool");
    assert_eq!(intervals.len(), total);
    assert!(total > 5);
    assert!(
        most_at_once(&intervals) <= 5,
        "{}",
        most_at_once(&intervals)
    );
}

#[test]
fn replicas_follow_and_a_promoted_replica_makes_new_ids() {
    let primary = Server::start(&[]);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let now = unix_ms();
    let mut ids = Vec::new();
    for i in 0..20 {
        let (d, id) = acquire(
            &mut p,
            &format!("rep 30 {} COST {} NOW {now}", 60_000 + i, 1 + i % 2),
        );
        assert_eq!(d[0], 1);
        ids.push(id.unwrap());
    }
    acquire(&mut p, &format!("rep 30 60000 ID mine NOW {now}"));
    rl(
        &mut p,
        &format!("RL.RELEASE rep {} NOW {}", ids[0], now + 1),
    );
    rl(
        &mut p,
        &format!("RL.EXTEND rep {} 120000 NOW {}", ids[1], now + 2),
    );
    run(&mut p, &["WAIT", "1", "5000"]).unwrap();
    assert_eq!(digest(&mut p, "rep"), digest(&mut r, "rep"));
    let (pp, rp) = (int(&mut p, &["PTTL", "rep"]), int(&mut r, &["PTTL", "rep"]));
    assert!(pp.abs_diff(rp) < 50, "{pp} {rp}");
    // Failover: the replica goes on with ids the primary never made.
    run(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap();
    let (d, id) = acquire(&mut r, &format!("rep 30 60000 NOW {now}"));
    assert_eq!(d[0], 1);
    let id = id.unwrap();
    assert!(!ids.contains(&id), "{id} made twice");
    // At the key's latest time (the extension's): a new millisecond, sequence 0.
    assert_eq!(id, format!("{}-0", now + 2));
}

#[test]
fn persistence_rdb_and_aof() {
    let mut server = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = server.conn();
    let now = unix_ms();
    for i in 0..30 {
        acquire(
            &mut c,
            &format!(
                "p 100 {} ID id{i} COST {} NOW {now}",
                60_000 + i * 10,
                i % 3 + 1
            ),
        );
    }
    acquire(&mut c, &format!("p 100 60000 NOW {now}"));
    rl(&mut c, &format!("RL.RELEASE p id3 NOW {}", now + 5));
    rl(&mut c, &format!("RL.EXTEND p id4 90000 NOW {}", now + 5));
    let before = digest(&mut c, "p");
    // The AOF replays the effects.
    server.crash_and_restart();
    let mut c = server.conn();
    assert_eq!(digest(&mut c, "p"), before);
    // An AOF rewrite writes RL.RESTORE.
    run(&mut c, &["BGREWRITEAOF"]).unwrap();
    wait_until("the rewrite", 10, || {
        !text(&mut c, &["INFO", "persistence"]).contains("aof_rewrite_in_progress:1")
    });
    server.crash_and_restart();
    let mut c = server.conn();
    assert_eq!(digest(&mut c, "p"), before);
    // An RDB.
    run(&mut c, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(digest(&mut c, "p"), before);
    let (_, id) = acquire(&mut c, &format!("p 100 60000 NOW {}", now + 6));
    assert_eq!(id.as_deref(), Some(&*format!("{}-0", now + 6)));
    assert_eq!(
        rl(&mut c, &format!("RL.RELEASE p id4 NOW {}", now + 6))[0],
        1
    );
}

/// The slowest call on a key at the most leases it may hold, from SLOWLOG: filling it,
/// refusals that walk the whole end order, releases from the middle, extensions, and all
/// the leases ending at once.
#[test]
fn the_worst_call_at_100k_leases() {
    let server = Server::start(&[
        "--slowlog-log-slower-than",
        "0",
        "--slowlog-max-len",
        "2000",
    ]);
    let mut c = server.conn();
    let now = unix_ms();
    let mut worst = (0i64, String::new());
    let mut all: Vec<i64> = Vec::new();
    let mut note = |c: &mut Connection| {
        let log: Value = run(c, &["SLOWLOG", "GET", "2000"]).unwrap();
        let Value::Array(entries) = log else { return };
        for entry in entries {
            if let Value::Array(e) = entry {
                let us: i64 = redis::from_redis_value(&e[2]).unwrap();
                let args: Vec<String> = redis::from_redis_value(&e[3]).unwrap();
                if args[0].to_uppercase().starts_with("RL.") {
                    all.push(us);
                }
                if us > worst.0 {
                    let args: Vec<String> = redis::from_redis_value(&e[3]).unwrap();
                    worst = (us, args.join(" "));
                }
            }
        }
        run(c, &["SLOWLOG", "RESET"]).unwrap();
    };
    let mut pipe = redis::pipe();
    for i in 0..100_000u64 {
        // Ends spread over 10 s, out of order.
        let lease = 20_000 + (i * 7919) % 10_000;
        pipe.cmd("RL.ACQUIRE")
            .arg("big")
            .arg(100_000)
            .arg(lease)
            .arg("NOW")
            .arg(now)
            .ignore();
        if i % 1000 == 999 {
            pipe.query::<()>(&mut c).unwrap();
            pipe = redis::pipe();
            note(&mut c);
        }
    }
    let mem = int(&mut c, &["MEMORY", "USAGE", "big"]);
    eprintln!(
        "MEMORY USAGE at 100k leases: {mem} bytes, {} a lease",
        mem / 100_000
    );
    for _ in 0..20 {
        acquire(&mut c, &format!("big 100000 1000 COST 100000 NOW {now}"));
        note(&mut c);
        acquire(&mut c, &format!("big 200000 1000 COST 150000 NOW {now}"));
        note(&mut c);
        run(&mut c, &["RL.PEEK", "big", "NOW", &now.to_string()]).unwrap();
        note(&mut c);
    }
    assert!(err(
        &mut c,
        &[
            "RL.ACQUIRE",
            "big",
            "200000",
            "1000",
            "NOW",
            &now.to_string()
        ]
    )
    .contains("100000 leases"));
    note(&mut c);
    for i in (0..100_000u64).step_by(997) {
        rl(
            &mut c,
            &format!("RL.EXTEND big {}-{} 500 NOW {}", now, i, now + 1),
        );
        note(&mut c);
    }
    // Everything ends at once: each call after drops at most 64 and counts the rest exact.
    let later = now + 40_000;
    for _ in 0..50 {
        let (d, _) = acquire(&mut c, &format!("big 100000 1000 NOW {later}"));
        assert_eq!(d[0], 1);
        note(&mut c);
    }
    all.sort_unstable();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    eprintln!(
        "{} calls: median {} us, 99.9th percentile {} us, the 10 slowest {:?}; slowest: {}",
        all.len(),
        at(0.5),
        at(0.999),
        &all[all.len() - 10..],
        &worst.1[..worst.1.len().min(60)]
    );
    // Wall time, on a shared machine: a stall would be every call of a kind (refusals
    // walking the order, the leases ending at once), not one preempted call.
    assert!(at(0.999) < 2_000, "{:?}", &all[all.len() - 200..]);
}

#[test]
fn hostile_effects_and_keys() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    // Effects from a client are bounded like any call, and apply as decided.
    let now = unix_ms();
    run(
        &mut c,
        &[
            "RL.APPLY",
            "ap",
            &format!("RL.ACQUIRE 1 60000 ID 6a6f62 NOW {now}"),
        ],
    )
    .unwrap();
    run(
        &mut c,
        &[
            "RL.APPLY",
            "ap",
            &format!("RL.ACQUIRE 1 60000 ID 6a6f6232 NOW {now}"),
        ],
    )
    .unwrap();
    // Recorded beyond the limit: the primary decided it.
    assert_eq!(rl(&mut c, &format!("RL.PEEK ap NOW {now}"))[2], 0);
    run(
        &mut c,
        &["RL.APPLY", "ap", &format!("RL.RELEASE 6a6f62 NOW {now}")],
    )
    .unwrap();
    assert_eq!(rl(&mut c, &format!("RL.RELEASE ap job2 NOW {now}"))[0], 1);
}
