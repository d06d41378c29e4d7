//! Atomic slot migration (Valkey 9+, `CLUSTER MIGRATESLOTS`) of a slot holding keys of every
//! kind (a compact policy's family among them), under a steady write load and with callers
//! waiting for a lease: afterwards every limiter answers as a server that saw the same calls
//! without the move (a shadow), nothing is lost or counted twice (the target's AOF rebuilds
//! the same keys; the source's, none of the slot), no waiter hangs, and the source keeps
//! nothing of the slot.
//!
//! On a server without it, the test says so in cargo test's summary: ignored, with the
//! reason. (It finds out when it runs, so this file has a harness of its own, libtest-mimic:
//! `harness = false` in Cargo.toml. A `#[test]` here would never run: list each test in
//! `main`.)

#[path = "it/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{digest, free_port, run, text, unix_ms, wait_until, Server};
use libtest_mimic::{Arguments, Completion, Trial};
use redis::{Connection, Value};

fn main() {
    let test = Trial::ignorable_test(
        "a_slot_moves_atomically_under_load_with_every_kind_and_waiters",
        || {
            if !has_atomic_slot_migration() {
                return Ok(Completion::ignored_with(
                    "the redis-server on PATH is not Valkey 9 or later: put one first on \
                     PATH (make compat builds Valkey 9.1)",
                ));
            }
            a_slot_moves_atomically_under_load_with_every_kind_and_waiters();
            Ok(Completion::Completed)
        },
    );
    libtest_mimic::run(&Arguments::from_args(), vec![test]).exit();
}

/// The server on PATH: Valkey 9 or later?
fn has_atomic_slot_migration() -> bool {
    let s = Server::start(&[]);
    let info = text(&mut s.conn(), &["INFO", "server"]);
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("valkey_version:"))
        .and_then(|v| v.trim().split('.').next()?.parse::<u32>().ok());
    version.is_some_and(|major| major >= 9)
}

/// A cluster node, AOF on, and its bus port.
fn node() -> (Server, String) {
    let bus = free_port().to_string();
    let server = Server::start(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-port",
        &bus,
        "--appendonly",
        "yes",
    ]);
    (server, bus)
}

/// The slot every key of the test is in: the tag `{m}`'s.
const TAG: &str = "{m}";

/// The compact policy of the load's `RL.HIT` calls, set on every node and the shadow.
const POLICY: &str = "c";
const POLICY_DEF: [&str; 6] = ["COMPACT", "t", "TOKEN", "50", "600000", ""];

/// Every kind's call, the `i`th of the load, at `now`: the same words go to the cluster and
/// to the shadow. Lease ids are the caller's, so both make the same ones.
fn op(i: u64, now: u64) -> Vec<String> {
    let line = match i % 10 {
        0 => format!("RL.SLIDE {TAG}:slide 400 600000 NOW {now}"),
        1 => format!("RL.TOKEN {TAG}:token 300 600000 NOW {now}"),
        2 => format!("RL.LEAKY {TAG}:leaky 300 600000 NOW {now}"),
        3 => format!("RL.FIXED {TAG}:fixed 350 600000 NOW {now}"),
        4 => format!("RL.SUBWIN {TAG}:subwin 400 600000 60000 NOW {now}"),
        5 => format!("CL.THROTTLE {TAG}:cl 100 300 600 NOW {now}"),
        6 => format!("RL.ALL 2 {TAG}:a {TAG}:b SLIDE 200 600000 TOKEN 250 600000 COST 2 NOW {now}"),
        7 => format!("RL.ACQUIRE {TAG}:lease 5 600000 ID l{i} NOW {now}"),
        8 => format!("RL.RELEASE {TAG}:lease l{} NOW {now}", i.saturating_sub(11)),
        // A compact policy's subjects: their family is a key of the slot too.
        _ => format!("RL.HIT {POLICY} {TAG}:s{} NOW {now}", i % 7),
    };
    line.split(' ').map(str::to_string).collect()
}

/// What the load met while the slot moved.
#[derive(Default, Debug)]
struct Redirects {
    moved: u64,
    ask: u64,
    tryagain: u64,
}

/// Sends `words` to whichever node serves the slot, following MOVED, ASK and TRYAGAIN.
fn send(
    conns: &mut [(u16, Connection)],
    at: &mut usize,
    words: &[String],
    seen: &mut Redirects,
) -> Value {
    for _ in 0..200 {
        let res: redis::RedisResult<Value> = {
            let mut cmd = redis::cmd(&words[0]);
            for w in &words[1..] {
                cmd.arg(w);
            }
            cmd.query(&mut conns[*at].1)
        };
        match res {
            Ok(v) => return v,
            Err(e) => {
                let code = e.code().unwrap_or("");
                let detail = e.detail().unwrap_or("").to_string();
                let port = || -> Option<u16> { detail.rsplit(':').next()?.trim().parse().ok() };
                match code {
                    "MOVED" => {
                        seen.moved += 1;
                        if let Some(p) = port() {
                            *at = conns.iter().position(|(q, _)| *q == p).unwrap_or(*at);
                        }
                    }
                    "ASK" => {
                        seen.ask += 1;
                        let p = port().expect("ASK's node");
                        let i = conns.iter().position(|(q, _)| *q == p).expect("a node");
                        let _: Value = redis::cmd("ASKING").query(&mut conns[i].1).unwrap();
                        let mut cmd = redis::cmd(&words[0]);
                        for w in &words[1..] {
                            cmd.arg(w);
                        }
                        if let Ok(v) = cmd.query(&mut conns[i].1) {
                            return v;
                        }
                    }
                    "TRYAGAIN" => {
                        seen.tryagain += 1;
                        thread::sleep(Duration::from_millis(5));
                    }
                    _ => panic!("{words:?}: {e}"),
                }
            }
        }
    }
    panic!("{words:?}: no node took it");
}

fn a_slot_moves_atomically_under_load_with_every_kind_and_waiters() {
    let ((source, source_bus), (target, _)) = (node(), node());
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(TAG)
        .query(&mut source.conn())
        .unwrap();
    let _: Value = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query(&mut source.conn())
        .unwrap();
    run(
        &mut target.conn(),
        &[
            "CLUSTER",
            "MEET",
            "127.0.0.1",
            &source.port.to_string(),
            &source_bus,
        ],
    )
    .unwrap();
    for n in [&source, &target] {
        let mut c = n.conn();
        wait_until("the cluster", 30, || {
            text(&mut c, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
                && text(&mut c, &["CLUSTER", "NODES"]).lines().count() == 2
        });
    }
    let shadow = Server::start(&[]);
    let mut sh = shadow.conn();
    for n in [&source, &target, &shadow] {
        let mut words = vec!["RL.POLICY", "SET", POLICY];
        words.extend(POLICY_DEF.iter().filter(|w| !w.is_empty()));
        run(&mut n.conn(), &words).unwrap();
    }
    let mut conns = vec![(source.port, source.conn()), (target.port, target.conn())];
    let mut at = 0;
    let mut seen = Redirects::default();

    // Callers waiting for a lease of a key that is full: served, or told where the slot went.
    let wait_key = format!("{TAG}:wait");
    run(
        &mut conns[0].1,
        &["RL.ACQUIRE", &wait_key, "1", "600000", "ID", "held"],
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let (port, key) = (source.port, wait_key.clone());
            thread::spawn(move || {
                let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
                let mut c = client.get_connection().unwrap();
                let started = Instant::now();
                let res: redis::RedisResult<Value> = redis::cmd("RL.ACQUIRE")
                    .arg(&key)
                    .arg(1)
                    .arg(600000)
                    .arg("BLOCK")
                    .arg(4000)
                    .query(&mut c);
                (
                    started.elapsed(),
                    res.map_err(|e| e.code().unwrap_or("?").to_string()),
                )
            })
        })
        .collect();

    // The load: every kind, one call after another, on the cluster and on the shadow.
    let t = unix_ms();
    let mut i = 0u64;
    let mut calls_during = 0u64;
    let mut step = |conns: &mut Vec<(u16, Connection)>, at: &mut usize, seen: &mut Redirects| {
        let words = op(i, t + i);
        let got = send(conns, at, &words, seen);
        let mut cmd = redis::cmd(&words[0]);
        for w in &words[1..] {
            cmd.arg(w);
        }
        let want: Value = cmd.query(&mut sh).unwrap();
        assert_eq!(got, want, "call {i}: {words:?}");
        i += 1;
    };
    for _ in 0..300 {
        step(&mut conns, &mut at, &mut seen);
    }
    let target_id = text(&mut target.conn(), &["CLUSTER", "MYID"]);
    let mut s = source.conn();
    let _: Value = redis::cmd("CLUSTER")
        .arg("MIGRATESLOTS")
        .arg("SLOTSRANGE")
        .arg(slot)
        .arg(slot)
        .arg("NODE")
        .arg(&target_id)
        .query(&mut s)
        .unwrap();
    let started = Instant::now();
    let done = |s: &mut Connection| {
        let v = format!("{:?}", run(s, &["CLUSTER", "GETSLOTMIGRATIONS"]).unwrap());
        assert!(!v.contains("failed") && !v.contains("cancelled"), "{v}");
        v.contains("success")
    };
    while !done(&mut s) {
        step(&mut conns, &mut at, &mut seen);
        calls_during += 1;
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the migration did not end"
        );
    }
    // On after the move: the calls now go to the target.
    for _ in 0..300 {
        step(&mut conns, &mut at, &mut seen);
    }
    stop.store(true, Ordering::Relaxed);
    let mut outcomes = Vec::new();
    for w in waiters {
        let (took, res) = w.join().unwrap();
        assert!(took < Duration::from_secs(6), "a waiter hung: {took:?}");
        outcomes.push(res);
    }
    for res in &outcomes {
        match res {
            Ok(_) => {}
            Err(code) => assert!(code == "MOVED" || code == "TRYAGAIN", "{code}"),
        }
    }
    eprintln!(
        "atomic slot migration: {i} calls, {calls_during} during the move ({} ms), \
         {seen:?}; waiters: {outcomes:?}",
        started.elapsed().as_millis()
    );

    // Every key is on the target, as on the shadow; none is left on the source.
    let family: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{POLICY}|~|*"))
        .query(&mut sh)
        .unwrap();
    assert_eq!(family.len(), 1, "{family:?}");
    let keys: Vec<String> = [
        "slide", "token", "leaky", "fixed", "subwin", "cl", "a", "b", "lease",
    ]
    .map(|k| format!("{TAG}:{k}"))
    .into_iter()
    .chain(family)
    .collect();
    let mut tc = target.conn();
    for k in &keys {
        assert_eq!(digest(&mut tc, k), digest(&mut sh, k), "{k}");
    }
    let left: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut s)
        .unwrap();
    assert_eq!(left, 0);
    // Nor does the source's AOF: rebuilt from it, the source holds none of the slot (every
    // key of the test is in it, so none at all; COUNTKEYSINSLOT answers 0 for a slot the
    // node does not serve, whatever it holds).
    drop(s);
    let mut source = source;
    source.crash_and_restart();
    let held: i64 = redis::cmd("DBSIZE").query(&mut source.conn()).unwrap();
    assert_eq!(held, 0, "the source's AOF brought keys of the slot back");
    // The target's AOF holds each decision once: rebuilt from it, the keys are the same.
    let mut target = target;
    let before: Vec<String> = keys.iter().map(|k| digest(&mut tc, k)).collect();
    drop(tc);
    target.crash_and_restart();
    let mut tc = target.conn();
    wait_until("the target's AOF to load", 30, || {
        run(&mut tc, &["PING"]).is_ok()
    });
    let after: Vec<String> = keys.iter().map(|k| digest(&mut tc, k)).collect();
    assert_eq!(after, before);
}
