//! RL.ACQUIRE with BLOCK against a real server: a waiter is granted when a lease is released
//! or ends, and gets the refusal when its timeout comes first (CLIENT UNBLOCK cannot cut it
//! short); waiters are served in arrival order, also with many timing out under load; a
//! client that leaves or is killed while waiting or holding takes no slot; BLOCK in MULTI or
//! Lua answers at once; grants to waiters replicate; demoting the primary, DEL or FLUSHALL
//! frees the waiters at once. The leases without waiting are in tests/it/leases.rs.

use std::time::{Duration, Instant};

use crate::common::leases::{acquire, aof_intervals, lease_reply, most_at_once, Lease};
use crate::common::{digest, int, rl, run, text, unix_ms, wait_until, Server};
use redis::{Connection, Value};

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
    // A lease that ends frees its units at its end: the waiter is granted then, not before
    // (measured from before the lease was taken: a loaded machine may start the waiter late).
    // The server's clock counts whole milliseconds: a lease taken at 0.9 ms into one ends
    // 299.1 ms later.
    let taken = Instant::now();
    acquire(&mut c, "end 1 300");
    let waiter = acquire_later(&server, "end 1 1000 BLOCK 5000");
    let ((d, id), _) = waiter.join().unwrap();
    let granted = taken.elapsed();
    assert_eq!(d[0], 1, "{d:?}");
    assert!(id.is_some());
    assert!(
        granted >= Duration::from_millis(299) && granted < Duration::from_millis(2500),
        "{granted:?}"
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
