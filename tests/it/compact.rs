//! Buckets and fixed windows hold their parameters in a table that keys share (16 bytes a
//! key instead of 32): a key answers, saves, digests and expires exactly as the wide form
//! that a full table falls back to, and the table gives back a parameter set once no key
//! holds it (DEL, COPY, reshapes, FLUSHALL ASYNC in the lazy-free thread, DEBUG RELOAD).

use crate::common::{digest, info_field, int, rl, run, unix_ms, Server};
use redis::{Connection, Value};

/// The slots of the module's table (`ratelimit_param_slots`).
const SLOTS: u64 = 1 << 16;

fn param_sets(c: &mut Connection) -> i64 {
    info_field(c, "ratelimit_param_sets")
}

fn memory_usage(c: &mut Connection, key: &str) -> i64 {
    int(c, &["MEMORY", "USAGE", key, "SAMPLES", "0"])
}

/// Takes every free slot of the table with token buckets `f:<i>` of distinct limits (the
/// window of a day: other tests here use other windows).
fn fill_the_table(c: &mut Connection, t: u64) {
    let have = param_sets(c) as u64;
    let mut pipe = redis::pipe();
    for i in 0..SLOTS - have {
        pipe.cmd("RL.TOKEN")
            .arg(format!("f:{i}"))
            .arg(i + 1)
            .arg(86_400_000)
            .arg("NOW")
            .arg(t)
            .ignore();
    }
    let () = pipe.query(c).unwrap();
    assert_eq!(param_sets(c) as u64, SLOTS);
}

/// What a key looks like from outside: its encoding (DUMP), digest and absolute expiry.
fn outside(c: &mut Connection, key: &str) -> (Value, String, i64) {
    let dump = run(c, &["DUMP", key]).unwrap();
    let expiry = int(c, &["PEXPIRETIME", key]);
    (dump, digest(c, key), expiry)
}

/// The keys the scenario makes: three kinds, three parameter sets each.
fn scenario_keys() -> Vec<String> {
    let mut keys = Vec::new();
    for kind in ["token", "leaky", "fixed"] {
        for i in 0..12 {
            keys.push(format!("{kind}:{i}"));
        }
    }
    keys.push("token:copy".into());
    keys
}

/// The command for `key` with parameter set `j`, at `now`.
fn call(key: &str, j: u64, cost: u64, now: u64) -> String {
    let kind = key.split(':').next().unwrap_or_default();
    match kind {
        "token" => format!("RL.TOKEN {key} {} 60000 COST {cost} NOW {now}", 10 + j),
        "leaky" => format!(
            "RL.LEAKY {key} {} 1000 MAXDELAY 2000 COST {cost} NOW {now}",
            5 + j
        ),
        _ if j == 2 => format!("RL.FIXED {key} 12 60000 ALIGN COST {cost} NOW {now}"),
        _ => format!("RL.FIXED {key} {} 60000 COST {cost} NOW {now}", 10 + j),
    }
}

/// Runs the same calls on any server and returns every reply and every key's outside, in
/// order, at times from `t` (ahead of the server clock, so expiries do not depend on it).
fn scenario(c: &mut Connection, t: u64) -> Vec<String> {
    let mut seen = Vec::new();
    let keys = scenario_keys();
    let snapshot = |c: &mut Connection, seen: &mut Vec<String>| {
        for key in &keys {
            seen.push(format!("{key}: {:?}", outside(c, key)));
        }
    };
    for round in 0..3u64 {
        for (i, key) in keys.iter().take(36).enumerate() {
            let i = i as u64;
            let line = call(key, i % 3, 1 + (i + round) % 3, t + round * 10 + i);
            seen.push(format!("{line}: {:?}", rl(c, &line)));
        }
    }
    // A copy shares its original's parameters; then both go on alone.
    assert_eq!(int(c, &["COPY", "token:0", "token:copy"]), 1);
    for key in ["token:0", "token:copy"] {
        let line = format!("RL.TOKEN {key} 10 60000 COST 2 NOW {}", t + 100);
        seen.push(format!("{line}: {:?}", rl(c, &line)));
    }
    // Peeks, refunds, charges.
    for key in ["token:1", "leaky:1", "fixed:1"] {
        for line in [
            format!("RL.PEEK {key} NOW {}", t + 101),
            format!("RL.PEEK {key} COST 3 NOW {}", t + 101),
            format!("RL.REFUND {key} COST 1 NOW {}", t + 102),
            format!("RL.CHARGE {key} COST 4 NOW {}", t + 103),
        ] {
            seen.push(format!("{line}: {:?}", rl(c, &line)));
        }
    }
    snapshot(c, &mut seen);
    // Reshapes: the same keys called with new parameters (a longer fixed window joins the
    // open one), and back.
    for (i, key) in ["token:3", "leaky:3", "fixed:3", "fixed:4"]
        .iter()
        .enumerate()
    {
        let line = match i {
            0 => format!("RL.TOKEN {key} 99 30000 BURST 7 NOW {}", t + 200),
            1 => format!("RL.LEAKY {key} 3 500 NOW {}", t + 200),
            2 => format!("RL.FIXED {key} 7 120000 NOW {}", t + 200),
            _ => format!("RL.FIXED {key} 30 600000 ALIGN NOW {}", t + 200),
        };
        seen.push(format!("{line}: {:?}", rl(c, &line)));
        let back = call(key, 0, 1, t + 201);
        seen.push(format!("{back}: {:?}", rl(c, &back)));
    }
    // RL.ALL over three kinds, one with new parameters.
    let all = format!(
        "RL.ALL 3 token:5 leaky:5 fixed:5 TOKEN 12 60000 LEAKY 6 1000 MAXDELAY 2000 \
         FIXED 11 90000 NOW {}",
        t + 300
    );
    seen.push(format!(
        "{all}: {:?}",
        run(c, &all.split(' ').collect::<Vec<_>>())
    ));
    snapshot(c, &mut seen);
    // Saved and loaded back.
    run(c, &["DEBUG", "RELOAD"]).unwrap();
    snapshot(c, &mut seen);
    for (i, key) in keys.iter().enumerate() {
        let line = call(key, i as u64 % 3, 1, t + 400);
        seen.push(format!("{line}: {:?}", rl(c, &line)));
    }
    // A fixed window long after its end, then refunded: the key goes.
    let line = format!("RL.REFUND fixed:6 COST 100 NOW {}", t + 400 + 61_000);
    seen.push(format!("{line}: {:?}", rl(c, &line)));
    seen.push(format!("{}", int(c, &["EXISTS", "fixed:6"])));
    // A month later, when the window ended too long ago for the compact form.
    let line = format!("RL.REFUND fixed:7 COST 1 NOW {}", t + 30 * 86_400_000);
    seen.push(format!("{line}: {:?}", rl(c, &line)));
    seen.push(format!("{}", int(c, &["EXISTS", "fixed:7"])));
    snapshot(c, &mut seen);
    seen
}

/// Every key of the scenario answers, saves, digests and expires alike whether it holds the
/// compact form (a table with room) or the wide one (a full table): compared on two servers.
#[test]
fn compact_and_wide_keys_answer_alike() {
    let t = unix_ms() + 3_600_000;
    let compact = Server::start(&[]);
    let wide = Server::start(&[]);
    let (mut a, mut b) = (compact.conn(), wide.conn());
    fill_the_table(&mut b, t);
    // The first call of the scenario: a compact key costs 16 bytes less.
    let first = call("token:0", 0, 1, t);
    assert_eq!(rl(&mut a, &first), rl(&mut b, &first));
    assert_eq!(
        memory_usage(&mut a, "token:0") + 16,
        memory_usage(&mut b, "token:0")
    );
    run(&mut a, &["DEL", "token:0"]).unwrap();
    run(&mut b, &["DEL", "token:0"]).unwrap();
    let on_compact = scenario(&mut a, t);
    let on_wide = scenario(&mut b, t);
    assert_eq!(on_compact.len(), on_wide.len());
    if std::env::var_os("COMPACT_SHOW").is_some() {
        eprintln!("{}", on_compact.join("\n"));
    }
    for (x, y) in on_compact.iter().zip(&on_wide) {
        assert_eq!(x, y);
    }
    // The sets the compact server still holds: the scenario's, nothing more.
    let sets = param_sets(&mut a);
    assert!((9..=20).contains(&sets), "{sets} parameter sets");
    run(&mut a, &["FLUSHALL", "SYNC"]).unwrap();
    assert_eq!(param_sets(&mut a), 0);
}

/// A compact key whose new parameters find no free slot moves to its wide form at once,
/// keeping its state and its expiry; once slots are free again, new keys are compact.
#[test]
fn a_full_table_moves_a_reshaped_key_to_its_wide_form() {
    let t = unix_ms() + 3_600_000;
    let full = Server::start(&[]);
    let reference = Server::start(&[]);
    let (mut c, mut r) = (full.conn(), reference.conn());
    // x2, y2 and z2 keep the first parameter sets taken once x, y and z move on.
    let lines = [
        format!("RL.TOKEN x 10 60000 COST 3 NOW {t}"),
        format!("RL.LEAKY y 10 60000 COST 2 NOW {t}"),
        format!("RL.FIXED z 10 60000 COST 4 NOW {t}"),
        format!("RL.TOKEN x2 10 60000 NOW {t}"),
        format!("RL.LEAKY y2 10 60000 NOW {t}"),
        format!("RL.FIXED z2 10 60000 NOW {t}"),
    ];
    for line in &lines {
        assert_eq!(rl(&mut c, line), rl(&mut r, line));
    }
    let compact = memory_usage(&mut c, "x");
    fill_the_table(&mut c, t);
    let reshapes = [
        format!("RL.TOKEN x 20 60000 NOW {}", t + 5),
        format!("RL.LEAKY y 10 30000 NOW {}", t + 5),
        // A longer window joins the open one: the window's length is a new parameter.
        format!("RL.FIXED z 10 120000 NOW {}", t + 5),
    ];
    for (line, key) in reshapes.iter().zip(["x", "y", "z"]) {
        assert_eq!(rl(&mut c, line), rl(&mut r, line), "{line}");
        assert_eq!(outside(&mut c, key), outside(&mut r, key), "{key}");
        assert_eq!(memory_usage(&mut c, key), compact + 16, "{key}");
        // And on from there, in its wide box.
        let again = line.replace(&format!("NOW {}", t + 5), &format!("NOW {}", t + 6));
        assert_eq!(rl(&mut c, &again), rl(&mut r, &again), "{again}");
        assert_eq!(outside(&mut c, key), outside(&mut r, key), "{key}");
    }
    // A new key finds no slot: wide.
    let new = format!("RL.TOKEN n 3 1000 NOW {t}");
    rl(&mut c, &new);
    assert_eq!(memory_usage(&mut c, "n"), compact + 16);
    // Slots given back by deleted keys are taken again. A DEL may leave the values to the
    // lazy-free thread (Valkey 8 and later do by default): the sets go once it has run.
    run(&mut c, &["DEL", "f:0", "f:1", "f:2"]).unwrap();
    crate::common::wait_until("the sets given back", 10, || {
        param_sets(&mut c) as u64 == SLOTS - 3
    });
    run(&mut c, &["DEL", "n"]).unwrap();
    rl(&mut c, &new);
    assert_eq!(memory_usage(&mut c, "n"), compact);
}

/// The table counts each parameter set once, whatever the number of keys, and gives a set
/// back when its last key goes: deleted, reshaped, flushed in the lazy-free thread, or
/// expired; a reload makes the same sets again.
#[test]
fn parameter_sets_are_given_back() {
    let server = Server::start(&["--lazyfree-lazy-user-del", "yes"]);
    let mut c = server.conn();
    let t = unix_ms() + 3_600_000;
    assert_eq!(param_sets(&mut c), 0);
    let mut pipe = redis::pipe();
    for i in 0..3000u64 {
        let key = format!("k:{i}");
        let j = i % 4;
        match i % 3 {
            0 => pipe.cmd("RL.TOKEN").arg(&key).arg(10 + j).arg(60_000),
            1 => pipe.cmd("RL.LEAKY").arg(&key).arg(10 + j).arg(60_000),
            _ => pipe.cmd("RL.FIXED").arg(&key).arg(10 + j).arg(60_000),
        };
        pipe.arg("NOW").arg(t).ignore();
    }
    let () = pipe.query(&mut c).unwrap();
    // Four limits on each of three kinds.
    assert_eq!(param_sets(&mut c), 12);
    assert_eq!(int(&mut c, &["COPY", "k:0", "copy"]), 1);
    run(&mut c, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(param_sets(&mut c), 12);
    assert_eq!(int(&mut c, &["DBSIZE"]), 3001);
    // Every token key of limit 10 (i % 12 == 0) moves to a new limit; the copy holds the
    // old set until it goes too.
    for i in (0..3000).step_by(12) {
        rl(&mut c, &format!("RL.TOKEN k:{i} 50 60000 NOW {}", t + 1));
    }
    assert_eq!(param_sets(&mut c), 13);
    // Deleted (UNLINK in the lazy-free thread for a DEL, here): the copy's set goes once
    // that thread has freed the copy, then the moved keys' set once it has freed them.
    run(&mut c, &["DEL", "copy"]).unwrap();
    crate::common::wait_until("the copy's set given back", 10, || param_sets(&mut c) == 12);
    let keys: Vec<String> = (0..3000).step_by(12).map(|i| format!("k:{i}")).collect();
    let mut del = redis::cmd("DEL");
    del.arg(&keys);
    let _: i64 = del.query(&mut c).unwrap();
    crate::common::wait_until("the set given back", 10, || param_sets(&mut c) == 11);
    // Expired: a bucket refills in 100 ms.
    rl(&mut c, "RL.TOKEN short 10 1000");
    assert_eq!(param_sets(&mut c), 12);
    crate::common::wait_until("the short key expired", 10, || {
        int(&mut c, &["EXISTS", "short"]) == 0 && param_sets(&mut c) == 11
    });
    // Flushed by the lazy-free thread while commands run on the main thread.
    run(&mut c, &["FLUSHALL", "ASYNC"]).unwrap();
    for i in 0..2000 {
        rl(
            &mut c,
            &format!("RL.FIXED after:{} {} 60000", i % 50, 100 + i % 5),
        );
    }
    crate::common::wait_until("the flushed sets given back", 10, || {
        param_sets(&mut c) == 5
    });
    run(&mut c, &["FLUSHALL", "ASYNC"]).unwrap();
    crate::common::wait_until("every set given back", 10, || param_sets(&mut c) == 0);
}
