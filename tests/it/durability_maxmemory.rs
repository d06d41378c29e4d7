//! At the memory limit (`maxmemory`): with `noeviction` the limiter commands are refused
//! with OOM and leave the keys as they were, `RL.PEEK` and `RL.REFUND` still work; with
//! `allkeys-lru` an evicted limiter starts empty. Under load and across crashes:
//! tests/it/durability.rs and tests/it/durability_restarts.rs.

use crate::common::durability::{info_field, key_of};
use crate::common::{digest, int, rl, run, text, unix_ms, Server};
use redis::Connection;
use rstest::rstest;

/// One limiter of each kind, with history, at `t`; all stay well clear of their limits.
fn limiters_at(t: u64) -> Vec<String> {
    [
        "RL.SLIDE m:slide 10 600000",
        "RL.SUBWIN m:subwin 10 600000 1000",
        "RL.TOKEN m:token 10 600000",
        "RL.LEAKY m:leaky 10 600000 MAXDELAY 600000",
        "RL.FIXED m:fixed 10 600000",
    ]
    .iter()
    .map(|l| format!("{l} COST 3 NOW {t}"))
    .collect()
}

/// Writes values of `size` bytes under new keys until a write is refused or `stop` says so;
/// returns the refusal, if any, and the keys written.
fn fill(
    c: &mut Connection,
    size: usize,
    max_keys: usize,
    mut stop: impl FnMut(&mut Connection, usize) -> bool,
) -> (Option<redis::RedisError>, usize) {
    let junk = vec![b'x'; size];
    for i in 0..max_keys {
        if stop(c, i) {
            return (None, i);
        }
        let res: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("junk:{i}"))
            .arg(&junk)
            .query(c);
        if let Err(e) = res {
            return (Some(e), i);
        }
    }
    panic!("{max_keys} keys written and still no end");
}

#[rstest]
fn noeviction_refuses_limiter_writes_and_keeps_the_keys() {
    let server = Server::start(&["--maxmemory", "8mb", "--maxmemory-policy", "noeviction"]);
    let mut c = server.conn();
    let t = unix_ms();
    let lines = limiters_at(t);
    for line in &lines {
        assert_eq!(rl(&mut c, line)[0], 1, "{line}");
    }
    let keys: Vec<String> = lines.iter().map(|l| key_of(l).to_owned()).collect();
    let snapshot = |c: &mut Connection| -> Vec<(String, [i64; 5])> {
        keys.iter()
            .map(|k| (digest(c, k), rl(c, &format!("RL.PEEK {k} NOW {}", t + 1))))
            .collect()
    };
    let before = snapshot(&mut c);

    let (refused, written) = fill(&mut c, 10_000, 10_000, |_, _| false);
    let refused = refused.expect("a refused write");
    assert_eq!(refused.code(), Some("OOM"), "{refused}");
    // A margin beyond the limit (DEBUG is not refused on OOM), so that buffers shrinking a
    // little do not bring the server back under it during the checks.
    run(&mut c, &["DEBUG", "POPULATE", "100", "ballast", "10000"]).unwrap();
    let used: u64 = info_field(&mut c, "memory", "used_memory").parse().unwrap();
    println!("noeviction: {written} junk keys of 10 kB, then OOM; used_memory {used}");
    assert!(used > 8 << 20);

    // Every call that could add data is refused before the module sees it: on existing
    // keys, on new keys, even with COST 0 (the whole command is deny-oom; RL.PEEK reads).
    let mut attempts: Vec<String> = lines.iter().map(|l| l.replace(" COST 3", "")).collect();
    attempts.extend(lines.iter().map(|l| l.replace("m:", "new:")));
    attempts.extend(lines.iter().map(|l| l.replace(" COST 3", " COST 0")));
    for line in &attempts {
        let words: Vec<&str> = line.split_whitespace().collect();
        let e = run(&mut c, &words).expect_err(line);
        assert_eq!(e.code(), Some("OOM"), "{line}: {e}");
    }
    let e = run(&mut c, &["RL.RESTORE", "m:slide", "\x01"]).expect_err("RL.RESTORE");
    assert_eq!(e.code(), Some("OOM"), "RL.RESTORE: {e}");
    for line in &attempts {
        assert_eq!(
            int(&mut c, &["EXISTS", key_of(line)]),
            line.contains("m:") as i64
        );
    }
    assert_eq!(snapshot(&mut c), before, "a refused call changed a limiter");

    // RL.REFUND frees memory, so it is not refused: it gives back, and can delete a key.
    for (k, (digest_before, _)) in keys.iter().zip(&before) {
        let reply = rl(&mut c, &format!("RL.REFUND {k} NOW {}", t + 1));
        assert_eq!(reply[0], 1, "{k}: {reply:?}");
        assert_ne!(
            &digest(&mut c, k),
            digest_before,
            "{k}: the refund changed nothing"
        );
    }
    rl(&mut c, &format!("RL.REFUND m:slide COST 5 NOW {}", t + 1));
    assert_eq!(
        int(&mut c, &["EXISTS", "m:slide"]),
        0,
        "refunded to empty: deleted"
    );
    for k in &keys[1..] {
        // 3 units recorded, 1 refunded.
        let peek = rl(&mut c, &format!("RL.PEEK {k} NOW {}", t + 1));
        assert_eq!(peek[1] - peek[2], 2, "{k}: {peek:?}");
    }
    assert_eq!(text(&mut c, &["PING"]), "PONG");
}

#[rstest]
fn allkeys_lru_evicts_limiters_to_empty() {
    let server = Server::start(&["--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru"]);
    let mut c = server.conn();
    let t = unix_ms();
    let lines = limiters_at(t);
    for line in &lines {
        assert_eq!(rl(&mut c, line)[0], 1, "{line}");
    }
    // Fill until every one of them is evicted, with limiter calls on other keys in between
    // (created, then evicted while in use).
    let (refused, written) = fill(&mut c, 10_000, 20_000, |c, i| {
        if i % 10 == 0 {
            let line = match i / 10 % 4 {
                0 => format!("RL.SLIDE churn:{i} 5 600000 COST 2"),
                1 => format!("RL.TOKEN churn:{i} 5 600000"),
                2 => format!("RL.SUBWIN churn:{i} 5 600000 1000"),
                _ => format!("RL.FIXED churn:{i} 5 600000"),
            };
            assert_eq!(rl(c, &line)[0], 1, "{line}");
        }
        i % 50 == 0 && lines.iter().all(|l| int(c, &["EXISTS", key_of(l)]) == 0)
    });
    assert!(
        refused.is_none(),
        "allkeys-lru refused a write: {refused:?}"
    );
    let evicted = info_field(&mut c, "stats", "evicted_keys");
    println!("allkeys-lru: {written} junk keys of 10 kB written, {evicted} keys evicted");

    // An evicted limiter answers like one that never existed.
    for line in &lines {
        let again = line
            .replace(" COST 3", "")
            .replace(&t.to_string(), &(t + 1).to_string());
        let fresh = again.replace("m:", "never:");
        assert_eq!(rl(&mut c, &again), rl(&mut c, &fresh), "{again}");
    }
    assert_eq!(text(&mut c, &["PING"]), "PONG");
    assert!(
        !server.log().contains("crashed"),
        "the server log reports a crash"
    );
}
