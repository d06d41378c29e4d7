//! RL.ACQUIRE, RL.RELEASE and RL.EXTEND against a real server: the contract, renewals by ID,
//! exact expiry under NOW, bad input, replication, persistence, many clients at once, and
//! BLOCK.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{aof_commands, digest, err, int, rl, run, text, unix_ms, wait_until, Server};
use redis::{Connection, Value};

/// `[allowed, limit, remaining, retry_after_ms, reset_after_ms]` and the lease id.
type Lease = ([i64; 5], Option<String>);

fn lease_reply(v: Value, what: &str) -> Lease {
    let Value::Array(fields) = v else {
        panic!("{what}: {v:?}");
    };
    assert_eq!(fields.len(), 6, "{what}: {fields:?}");
    let ints: Vec<i64> = fields[..5]
        .iter()
        .map(|f| redis::from_redis_value(f).unwrap_or_else(|e| panic!("{what}: {e}")))
        .collect();
    let id = match &fields[5] {
        Value::Nil => None,
        other => Some(redis::from_redis_value(other).unwrap_or_else(|e| panic!("{what}: {e}"))),
    };
    (ints.try_into().unwrap(), id)
}

/// `RL.ACQUIRE` given as one line of words.
fn acquire(c: &mut Connection, line: &str) -> Lease {
    let words: Vec<&str> = std::iter::once("RL.ACQUIRE")
        .chain(line.split_whitespace())
        .collect();
    lease_reply(
        run(c, &words).unwrap_or_else(|e| panic!("{line}: {e}")),
        line,
    )
}

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

/// Every lease granted as recorded in the AOF: `(id, start, end)` intervals.
fn aof_intervals(server: &Server, key: &str) -> Vec<(String, u64, u64)> {
    let mut open: HashMap<String, (u64, u64)> = HashMap::new();
    let mut done = Vec::new();
    // Effects read as the command lines they stand for: `RL.X key words... NOW t`.
    for e in aof_commands(server) {
        if e.len() < 2 || e[1] != key || !e[0].starts_with("RL.") {
            continue;
        }
        let now: u64 = e[e.len() - 1].parse().unwrap();
        match e[0].as_str() {
            "RL.ACQUIRE" => {
                let lease: u64 = e[3].parse().unwrap();
                let id = e[5].to_string();
                if let Some((start, _)) = open.remove(&id) {
                    done.push((id.clone(), start, now));
                }
                open.insert(id, (now, now + lease));
            }
            "RL.RELEASE" => {
                if let Some((start, end)) = open.remove(&e[2]) {
                    done.push((e[2].to_string(), start, end.min(now)));
                }
            }
            other => panic!("unexpected effect {other}"),
        }
    }
    done.extend(open.into_iter().map(|(id, (s, e))| (id, s, e)));
    done
}

/// The most leases held at once over `intervals`.
fn most_at_once(intervals: &[(String, u64, u64)]) -> usize {
    let mut events: Vec<(u64, i32)> = Vec::new();
    for (_, s, e) in intervals {
        events.push((*s, 1));
        events.push((*e, -1));
    }
    // A lease that ends at t is not held at t: ends before starts at equal times.
    events.sort();
    let (mut held, mut most) = (0i32, 0i32);
    for (_, d) in events {
        held += d;
        most = most.max(held);
    }
    most as usize
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

// ---------------------------------------------------------------------------------------
// BLOCK

fn blocked_clients(c: &mut Connection) -> i64 {
    let info = text(c, &["INFO", "clients"]);
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("blocked_clients")
}

/// Starts `RL.ACQUIRE line` on its own connection and thread; the reply and how long it
/// took come back through the handle.
fn acquire_later(server: &Server, line: &str) -> std::thread::JoinHandle<(Lease, Duration)> {
    let mut c = server.conn();
    let line = line.to_string();
    std::thread::spawn(move || {
        let t = Instant::now();
        let got = acquire(&mut c, &line);
        (got, t.elapsed())
    })
}

fn wait_blocked(c: &mut Connection, n: i64) {
    wait_until(&format!("{n} blocked clients"), 10, || {
        blocked_clients(c) == n
    });
}

#[test]
fn block_is_woken_by_a_release_and_by_a_lease_end() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    let (_, a) = acquire(&mut c, "b 1 60000");
    // BLOCK 0 waits without limit, until the release.
    let waiter = acquire_later(&server, "b 1 60000 ID second BLOCK 0");
    wait_blocked(&mut c, 1);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(blocked_clients(&mut c), 1);
    rl(&mut c, &format!("RL.RELEASE b {}", a.unwrap()));
    let ((d, id), _) = waiter.join().unwrap();
    assert_eq!((d[0], d[2], id.as_deref()), (1, 0, Some("second")));
    // A lease that ends frees its units at its end: the waiter is granted then.
    acquire(&mut c, "end 1 300");
    let waiter = acquire_later(&server, "end 1 1000 BLOCK 5000");
    let ((d, id), took) = waiter.join().unwrap();
    assert_eq!(d[0], 1, "{d:?}");
    assert!(id.is_some());
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(2000),
        "{took:?}"
    );
    let info = text(&mut c, &["INFO", "ratelimit"]);
    assert!(
        info.contains("ratelimit_acquire:calls=4,allowed=4"),
        "{info}"
    );
}

#[test]
fn block_times_out_with_the_refusal() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    acquire(&mut c, "t 2 60000 COST 2");
    let ((d, id), took) = acquire_later(&server, "t 2 60000 BLOCK 200")
        .join()
        .unwrap();
    assert_eq!((d[0], d[1], d[2], id), (0, 2, 0, None));
    assert!(d[3] > 59_000 && d[4] > 59_000, "{d:?}");
    assert!(
        took >= Duration::from_millis(190) && took < Duration::from_millis(2000),
        "{took:?}"
    );
    // CLIENT UNBLOCK cannot cut a wait short: only the module answers.
    let waiter = acquire_later(&server, "t 2 60000 BLOCK 300");
    wait_blocked(&mut c, 1);
    let clients = text(&mut c, &["CLIENT", "LIST"]);
    let id = clients
        .lines()
        .find(|l| l.to_lowercase().contains("cmd=rl.acquire"))
        .and_then(|l| l.split(' ').next())
        .and_then(|f| f.strip_prefix("id="))
        .unwrap()
        .to_string();
    assert_eq!(int(&mut c, &["CLIENT", "UNBLOCK", &id]), 0);
    assert_eq!(waiter.join().unwrap().0 .0[0], 0);
    // COST above the limit never waits.
    let ((d, _), took) = acquire_later(&server, "t 2 60000 COST 3 BLOCK 0")
        .join()
        .unwrap();
    assert_eq!(d[3], -1);
    assert!(took < Duration::from_millis(500));
}

#[test]
fn waiters_are_served_in_arrival_order() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    let (_, first) = acquire(&mut c, "fifo 1 60000");
    let mut waiters = Vec::new();
    for i in 0..6 {
        waiters.push(acquire_later(
            &server,
            &format!("fifo 1 60000 ID w{i} BLOCK 10000"),
        ));
        wait_blocked(&mut c, i + 1);
    }
    // A call without BLOCK does not queue; a BLOCK call queues behind the others.
    assert_eq!(acquire(&mut c, "fifo 1 60000").0[0], 0);
    let mut held = first.unwrap();
    for i in 0..6 {
        rl(&mut c, &format!("RL.RELEASE fifo {held}"));
        let ((d, id), _) = waiters.remove(0).join().unwrap();
        assert_eq!((d[0], id.as_deref()), (1, Some(&*format!("w{i}"))));
        held = format!("w{i}");
    }
}

#[test]
fn a_client_that_leaves_while_waiting_takes_no_slot() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    let (_, a) = acquire(&mut c, "dc 1 60000");
    let mut gone = server.conn();
    redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("gone")
        .query::<()>(&mut gone)
        .unwrap();
    let goner = std::thread::spawn(move || {
        let _ = run(
            &mut gone,
            &["RL.ACQUIRE", "dc", "1", "60000", "ID", "gone", "BLOCK", "0"],
        );
    });
    wait_blocked(&mut c, 1);
    let next = acquire_later(&server, "dc 1 60000 ID next BLOCK 10000");
    wait_blocked(&mut c, 2);
    let list = text(&mut c, &["CLIENT", "LIST"]);
    let id = list
        .lines()
        .find(|l| l.contains("name=gone"))
        .and_then(|l| l.split(' ').next())
        .and_then(|f| f.strip_prefix("id="))
        .unwrap()
        .to_string();
    run(&mut c, &["CLIENT", "KILL", "ID", &id]).unwrap();
    goner.join().unwrap();
    wait_blocked(&mut c, 1);
    rl(&mut c, &format!("RL.RELEASE dc {}", a.unwrap()));
    let ((d, id), _) = next.join().unwrap();
    assert_eq!((d[0], id.as_deref()), (1, Some("next")));
    assert_eq!(rl(&mut c, "RL.RELEASE dc gone")[0], 0);
    assert_eq!(rl(&mut c, "RL.PEEK dc")[2], 0);
}

#[test]
fn block_in_multi_and_lua_answers_at_once() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    acquire(&mut c, "m 1 60000");
    let t = Instant::now();
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("RL.ACQUIRE")
        .arg("m")
        .arg(1)
        .arg(60000)
        .arg("BLOCK")
        .arg(0);
    let (got,): (Value,) = pipe.query(&mut c).unwrap();
    assert_eq!(lease_reply(got, "multi").0[0], 0);
    let lua: Value = redis::cmd("EVAL")
        .arg("return redis.call('RL.ACQUIRE', KEYS[1], 1, 60000, 'BLOCK', 0)")
        .arg(1)
        .arg("m")
        .query(&mut c)
        .unwrap();
    let Value::Array(fields) = lua else {
        panic!("{lua:?}")
    };
    assert_eq!(fields[0], Value::Int(0));
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(blocked_clients(&mut c), 0);
}

#[test]
fn many_waiters_timing_out_while_others_are_released() {
    let server = Server::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let port = server.port;
    let mut c = server.conn();
    let handles: Vec<_> = (0..60u64)
        .map(|i| {
            std::thread::spawn(move || {
                let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
                let mut c = client.get_connection().unwrap();
                c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let (mut granted, mut refused) = (0, 0);
                for j in 0..15u64 {
                    let timeout = 1 + (i * 7 + j * 13) % 40;
                    let (d, id) =
                        acquire(&mut c, &format!("storm 4 {} BLOCK {timeout}", 50 + i % 30));
                    match id {
                        Some(id) => {
                            granted += 1;
                            assert_eq!(d[0], 1);
                            if (i + j) % 3 != 0 {
                                rl(&mut c, &format!("RL.RELEASE storm {id}"));
                            }
                        }
                        None => {
                            refused += 1;
                            assert_eq!(d[0], 0);
                        }
                    }
                }
                (granted, refused)
            })
        })
        .collect();
    let (mut granted, mut refused) = (0, 0);
    for h in handles {
        let (g, r) = h.join().expect("every waiter is answered");
        granted += g;
        refused += r;
    }
    assert_eq!(granted + refused, 60 * 15);
    assert!(granted > 0 && refused > 0, "{granted} {refused}");
    assert_eq!(blocked_clients(&mut c), 0);
    let intervals = aof_intervals(&server, "storm");
    assert_eq!(intervals.len(), granted);
    assert!(most_at_once(&intervals) <= 4);
}

#[test]
fn grants_to_waiters_replicate() {
    let primary = Server::start(&[]);
    let replica = primary.replica();
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let (_, a) = acquire(&mut p, "rb 2 60000 COST 2");
    // One granted from another client's release, one from a lease's end (a timer).
    let by_release = acquire_later(&primary, "rb 2 60000 ID one BLOCK 10000");
    wait_blocked(&mut p, 1);
    acquire(&mut p, "short 1 200");
    let by_end = acquire_later(&primary, "short 1 60000 ID two BLOCK 10000");
    rl(&mut p, &format!("RL.RELEASE rb {}", a.unwrap()));
    assert_eq!(by_release.join().unwrap().0 .1.as_deref(), Some("one"));
    assert_eq!(by_end.join().unwrap().0 .1.as_deref(), Some("two"));
    run(&mut p, &["WAIT", "1", "5000"]).unwrap();
    for key in ["rb", "short"] {
        assert_eq!(digest(&mut p, key), digest(&mut r, key), "{key}");
    }
    assert_eq!(rl(&mut r, "RL.PEEK short")[2], 0);
}

#[test]
fn a_primary_demoted_unblocks_its_waiters() {
    let other = Server::start(&[]);
    let primary = Server::start(&[]);
    let mut p = primary.conn();
    acquire(&mut p, "d 1 60000");
    let waiter = {
        let mut c = primary.conn();
        std::thread::spawn(move || run(&mut c, &["RL.ACQUIRE", "d", "1", "60000", "BLOCK", "0"]))
    };
    wait_blocked(&mut p, 1);
    run(&mut p, &["REPLICAOF", "127.0.0.1", &other.port.to_string()]).unwrap();
    let got = waiter.join().unwrap();
    let e = got.expect_err("an error for the waiter");
    assert!(e.to_string().contains("UNBLOCKED"), "{e}");
    assert_eq!(blocked_clients(&mut p), 0);
}

#[test]
fn deleting_or_flushing_a_key_frees_its_waiters_at_once() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    acquire(&mut c, "del 1 60000");
    let waiter = acquire_later(&server, "del 1 60000 ID after-del BLOCK 10000");
    wait_blocked(&mut c, 1);
    run(&mut c, &["DEL", "del"]).unwrap();
    let ((d, id), took) = waiter.join().unwrap();
    assert_eq!((d[0], id.as_deref()), (1, Some("after-del")));
    assert!(took < Duration::from_secs(2), "{took:?}");
    acquire(&mut c, "flush 1 60000");
    let waiter = acquire_later(&server, "flush 1 60000 ID after-flush BLOCK 10000");
    wait_blocked(&mut c, 1);
    run(&mut c, &["FLUSHALL"]).unwrap();
    let ((d, id), took) = waiter.join().unwrap();
    assert_eq!((d[0], id.as_deref()), (1, Some("after-flush")));
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(rl(&mut c, "RL.PEEK flush")[2], 0);
}

/// The id of the client named `name` (`CLIENT LIST`).
fn client_id(c: &mut Connection, name: &str) -> String {
    let list = text(c, &["CLIENT", "LIST"]);
    list.lines()
        .find(|l| l.split(' ').any(|f| f == format!("name={name}")))
        .and_then(|l| l.split(' ').next())
        .and_then(|f| f.strip_prefix("id="))
        .unwrap_or_else(|| panic!("no client {name} in {list}"))
        .to_string()
}

/// A command in RESP, for a bare socket.
fn resp(words: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        out.extend(format!("${}\r\n{w}\r\n", w.len()).into_bytes());
    }
    out
}

#[test]
fn no_slot_leaks_after_clients_are_killed_mid_lease() {
    use std::io::Write;
    const LEASE: u64 = 1500;
    let server = Server::start(&[]);
    let mut c = server.conn();
    let t0 = unix_ms();
    // Five holders of one unit each, leases ending at t0 + LEASE.
    let mut holders = Vec::new();
    for i in 0..5 {
        let mut h = server.conn();
        run(&mut h, &["CLIENT", "SETNAME", &format!("holder{i}")]).unwrap();
        let (d, id) = acquire(&mut h, &format!("pool 5 {LEASE} ID h{i} NOW {t0}"));
        assert_eq!((d[0], d[2], id), (1, 4 - i as i64, Some(format!("h{i}"))));
        holders.push(h);
    }
    // Holder 0 asks for a second unit and waits: it is killed while blocked. Two more
    // clients wait and are killed; two wait on bare sockets that close.
    let mut blocked = Vec::new();
    let h0 = holders.remove(0);
    for (name, mut conn) in [
        ("holder0", h0),
        ("waiter0", server.conn()),
        ("waiter1", server.conn()),
    ] {
        run(&mut conn, &["CLIENT", "SETNAME", name]).unwrap();
        blocked.push(std::thread::spawn(move || {
            run(
                &mut conn,
                &["RL.ACQUIRE", "pool", "5", &LEASE.to_string(), "BLOCK", "0"],
            )
        }));
    }
    let mut sockets = Vec::new();
    for _ in 0..2 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        s.write_all(&resp(&["RL.ACQUIRE", "pool", "5", "60000", "BLOCK", "0"]))
            .unwrap();
        sockets.push(s);
    }
    wait_blocked(&mut c, 5);
    // Holders 1 and 2 and the three blocked named clients are killed; holders 3 and 4 and
    // the two sockets just go away.
    for name in ["holder0", "holder1", "holder2", "waiter0", "waiter1"] {
        let id = client_id(&mut c, name);
        assert_eq!(int(&mut c, &["CLIENT", "KILL", "ID", &id]), 1, "{name}");
    }
    drop(holders);
    drop(sockets);
    for b in blocked {
        assert!(b.join().unwrap().is_err(), "a killed waiter got an answer");
    }
    wait_blocked(&mut c, 0);
    wait_until("only this client left", 10, || {
        text(&mut c, &["CLIENT", "LIST"]).lines().count() == 1
    });
    // The dead hold their units until their leases end, and not a millisecond longer.
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK pool NOW {}", t0 + LEASE - 1))[..3],
        [1, 5, 0]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK pool NOW {}", t0 + LEASE))[..3],
        [1, 5, 5]
    );
    // Once the leases have ended on the server's clock, nothing went to a dead waiter: the
    // key has gone with its last lease, and all five units are free.
    std::thread::sleep(Duration::from_millis(
        (t0 + LEASE + 300).saturating_sub(unix_ms()),
    ));
    assert_eq!(int(&mut c, &["EXISTS", "pool"]), 0);
    let info = text(&mut c, &["INFO", "ratelimit"]);
    assert!(
        info.contains("ratelimit_acquire:calls=5,allowed=5"),
        "{info}"
    );
    let (d, _) = acquire(&mut c, "pool 5 60000 COST 5");
    assert_eq!(d[..3], [1, 5, 0]);
}
