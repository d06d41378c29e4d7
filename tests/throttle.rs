//! CL.THROTTLE: redis-cell's command as a kind of this module. Its replies, errors,
//! replication and persistence here, and side by side with redis-cell itself, built from
//! its source (never committed): `REDIS_CELL_MODULE=/path/libredis_cell.so`, or
//! `/tmp/redis-cell/target/release/libredis_cell.so` when it is there; the comparison is
//! skipped, saying so, when neither is.

mod common;

use std::path::PathBuf;
use std::thread::sleep;
use std::time::Duration;

use common::{aof_commands, digest, err, run, server, text, unix_ms, wait_until, Server};
use redis::{Connection, Value};
use rstest::rstest;

/// A call's five integers.
fn cl(c: &mut Connection, line: &str) -> Vec<i64> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match run(c, &words) {
        Ok(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::Int(i) => *i,
                other => panic!("{line}: {other:?}"),
            })
            .collect(),
        other => panic!("{line}: {other:?}"),
    }
}

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
    let primary = Server::start(&["--appendonly", "yes"]);
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

/// redis-cell, built from its source, if it is there.
fn redis_cell() -> Option<PathBuf> {
    let path = std::env::var_os("REDIS_CELL_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/redis-cell/target/release/libredis_cell.so"));
    path.exists().then_some(path)
}

/// The same calls, made on this module and on redis-cell, get the same replies. The rates
/// are whole seconds apart (periods of a minute or more), so that the few milliseconds
/// between the two servers' calls cannot move a reply across a second.
#[test]
fn side_by_side_with_redis_cell() {
    let Some(cell) = redis_cell() else {
        eprintln!(
            "side_by_side_with_redis_cell: skipped, no redis-cell module (build \
             brandur/redis-cell in /tmp/redis-cell, or set REDIS_CELL_MODULE)"
        );
        return;
    };
    let ours = Server::start(&[]);
    let theirs = Server::start_with_module(&cell);
    let (mut a, mut b) = (ours.conn(), theirs.conn());
    // (max_burst, count_per_period, period): one unit every 2 s, 1 s, 30 s, 60 s, 2 s.
    let rates = [
        (15, 30, 60),
        (0, 60, 60),
        (5, 4, 120),
        (100, 60, 3600),
        (2, 60, 120),
    ];
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut compared = 0;
    for round in 0..3 {
        for _ in 0..200 {
            let (i, (burst, count, period)) = {
                let i = next(rates.len() as u64) as usize;
                (i, rates[i])
            };
            let quantity = match next(8) {
                0 => 0,
                1 => 2,
                2 => burst + 1,
                3 => burst + 2,
                4 => next(5),
                _ => 1,
            };
            let line = format!("CL.THROTTLE key{i} {burst} {count} {period} {quantity}");
            let (x, y) = (cl(&mut a, &line), cl(&mut b, &line));
            assert_eq!(x, y, "round {round}: {line}");
            compared += 1;
        }
        // Time runs on a little between rounds: the buckets drain alike on both.
        if round < 2 {
            sleep(Duration::from_millis(1100));
        }
    }
    assert_eq!(compared, 600);
}

/// Loaded after redis-cell, the module leaves CL.THROTTLE to it, says so in the log, and
/// serves every other command.
#[test]
fn after_redis_cell_it_leaves_the_name_to_it() {
    let Some(cell) = redis_cell() else {
        eprintln!("after_redis_cell_it_leaves_the_name_to_it: skipped, no redis-cell module");
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let dir = std::env::temp_dir().join(format!("rl-cell-first-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = std::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .arg("--dir")
        .arg(&dir)
        .args(["--logfile", "redis.log"])
        .arg("--loadmodule")
        .arg(&cell)
        .arg("--loadmodule")
        .arg(common::module_path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("redis-server on PATH");
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut c = None;
    wait_until("the server", 20, || {
        c = client.get_connection().ok();
        c.is_some()
    });
    let mut c = c.unwrap();
    let modules = format!("{:?}", run(&mut c, &["MODULE", "LIST"]).unwrap());
    let token = cl(&mut c, "RL.TOKEN t 5 1000");
    // redis-cell answers: its key is a string.
    let throttle = cl(&mut c, "CL.THROTTLE x 15 30 60");
    let ty = text(&mut c, &["TYPE", "x"]);
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        modules.contains("ratelimit") && modules.contains("redis-cell"),
        "{modules}"
    );
    assert_eq!(token, [1, 5, 4, 0, 200]);
    assert_eq!(throttle, [0, 16, 15, -1, 2]);
    assert_eq!(ty, "string");
    assert!(
        log.contains("ratelimit: CL.THROTTLE is taken (by another module loaded before"),
        "{log}"
    );
}
