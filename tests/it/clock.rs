//! Real clocks: a client's NOW behind or ahead of the server clock never turns a limiter off
//! or freezes it (`ratelimit.now-max-ahead-ms`), replies are measured from the caller's time,
//! and the key's TTL is always the limiter's, whatever PERSIST, EXPIRE or RESTORE did to it.

use crate::common::{digest, err, int, rl, run, text, unix_ms, wait_until, Server, NOW_MAX_AHEAD};
use redis::{Connection, Value};
use rstest::rstest;

/// One limiter of each kind, limit 3 per second, with nothing waiting.
const KINDS: [&str; 5] = [
    "RL.SLIDE {k} 3 1000",
    "RL.TOKEN {k} 3 1000",
    "RL.LEAKY {k} 3 1000 MAXDELAY 0 BURST 3",
    "RL.FIXED {k} 3 1000",
    "RL.SUBWIN {k} 3 1000 100",
];

fn call(spec: &str, key: &str, extra: &str) -> String {
    format!("{} {extra}", spec.replace("{k}", key))
}

/// A server with the module's default bound on NOW.
fn default_server() -> Server {
    Server::start(&[&format!("--{NOW_MAX_AHEAD}"), "1000"])
}

/// `CONFIG GET ratelimit.now-max-ahead-ms` as the server answers it.
fn now_max_ahead(c: &mut Connection) -> Vec<String> {
    redis::cmd("CONFIG")
        .arg("GET")
        .arg(NOW_MAX_AHEAD)
        .query(c)
        .unwrap()
}

/// The key's PTTL is the reply's reset_after_ms, give or take the time since the reply.
fn assert_ttl_is_reset(c: &mut Connection, key: &str, reply: [i64; 5], what: &str) {
    let pttl = int(c, &["PTTL", key]);
    let reset = reply[4];
    assert!(
        pttl <= reset && pttl >= reset - 100,
        "{what}: PTTL {pttl}, reset_after_ms {reset}"
    );
}

#[rstest]
#[case::lag_1500(1500)]
#[case::lag_600(600)]
fn a_lagging_now_never_turns_a_limiter_off(#[case] lag: u64) {
    let server = default_server();
    let mut c = server.conn();
    for spec in KINDS {
        let key = format!("lag:{lag}:{}", &spec[3..8]);
        let mut allowed = 0;
        let mut last = [0; 5];
        for _ in 0..10 {
            let now = unix_ms() - lag;
            last = rl(&mut c, &call(spec, &key, &format!("NOW {now}")));
            allowed += last[0];
            if last[0] == 1 {
                assert_ttl_is_reset(&mut c, &key, last, spec);
            }
        }
        assert_eq!(allowed, 3, "{spec} with NOW {lag} ms behind");
        // Refused: the wait is measured from the caller's (lagging) time.
        assert_eq!(last[0], 0, "{spec}");
        // (RL.SUBWIN may wait up to a window and one sub-interval.)
        assert!(last[3] > 0 && last[3] <= 1100, "{spec}: {last:?}");
        assert!(
            int(&mut c, &["PTTL", &key]) > 0,
            "{spec}: the key must live"
        );
    }
}

#[rstest]
fn a_now_far_ahead_is_refused_by_default_and_changes_nothing() {
    let server = default_server();
    let mut c = server.conn();
    let cfg = now_max_ahead(&mut c);
    assert_eq!(cfg, [NOW_MAX_AHEAD, "1000"]);
    let hour = unix_ms() + 3_600_000;
    for spec in KINDS {
        let key = format!("ahead:{}", &spec[3..8]);
        let e = err(
            &mut c,
            &call(spec, &key, &format!("NOW {hour}"))
                .split_whitespace()
                .collect::<Vec<_>>(),
        );
        assert!(
            e.starts_with("ERR NOW is") && e.contains(NOW_MAX_AHEAD),
            "{e}"
        );
        assert_eq!(int(&mut c, &["EXISTS", &key]), 0, "{spec} created the key");
        // On an existing key: nothing changes.
        rl(&mut c, &call(spec, &key, ""));
        let before = digest(&mut c, &key);
        let words = call(spec, &key, &format!("NOW {hour}"));
        err(&mut c, &words.split_whitespace().collect::<Vec<_>>());
        assert_eq!(digest(&mut c, &key), before, "{spec}");
        // Up to the bound is fine.
        let near = unix_ms() + 500;
        assert_eq!(rl(&mut c, &call(spec, &key, &format!("NOW {near}")))[0], 1);
    }
    for words in [
        vec!["RL.PEEK", "ahead:SLIDE"],
        vec!["RL.REFUND", "ahead:SLIDE", "COST", "1"],
    ] {
        let mut w = words.clone();
        let h = hour.to_string();
        w.extend(["NOW", &h]);
        assert!(err(&mut c, &w).starts_with("ERR NOW is"), "{words:?}");
    }
}

#[rstest]
fn without_a_bound_a_now_ahead_is_measured_from_the_callers_time() {
    let server = default_server();
    let mut c = server.conn();
    run(&mut c, &["CONFIG", "SET", NOW_MAX_AHEAD, "-1"]).unwrap();
    let hour = unix_ms() + 3_600_000;
    for spec in KINDS {
        let key = format!("frozen:{}", &spec[3..8]);
        for _ in 0..3 {
            rl(&mut c, &call(spec, &key, &format!("NOW {hour}")));
        }
        // A call on the server clock: the limiter is an hour ahead, so the wait and the
        // reset are an hour long from here, and the TTL says the same.
        let r = rl(&mut c, &call(spec, &key, ""));
        assert_eq!(r[0], 0, "{spec}: {r:?}");
        assert!(r[3] > 3_500_000, "{spec}: {r:?}");
        assert_ttl_is_reset(&mut c, &key, r, spec);
    }
    // Bad values are refused.
    for bad in ["-2", "x"] {
        assert!(run(&mut c, &["CONFIG", "SET", NOW_MAX_AHEAD, bad]).is_err());
    }
}

#[rstest]
fn the_bound_is_set_on_the_loadmodule_line() {
    // Words after the module path are the module's arguments.
    let server = Server::start(&["now-max-ahead-ms", "5"]);
    let mut c = server.conn();
    let cfg = now_max_ahead(&mut c);
    assert_eq!(cfg, [NOW_MAX_AHEAD, "5"]);
    let e = err(
        &mut c,
        &[
            "RL.SLIDE",
            "k",
            "3",
            "1000",
            "NOW",
            &(unix_ms() + 1000).to_string(),
        ],
    );
    assert!(e.contains("allows 5"), "{e}");
}

/// Waits until the replica has processed everything the primary sent.
fn sync(primary: &mut Connection) {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(primary).unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge");
}

#[rstest]
fn replicas_and_the_aof_are_never_refused_for_now_and_keep_the_primarys_expiry() {
    // The primary has no bound; its replica and its own AOF reload have the default one.
    let primary = Server::start(&["--appendonly", "yes"]);
    let port = primary.port.to_string();
    let replica = Server::start(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        &format!("--{NOW_MAX_AHEAD}"),
        "1000",
    ]);
    let (mut p, mut r) = (primary.conn(), replica.conn());
    wait_until("the replica's link", 30, || {
        text(&mut r, &["INFO", "replication"]).contains("master_link_status:up")
    });
    let t = unix_ms();
    for spec in KINDS {
        let ahead = format!("repl:ahead:{}", &spec[3..8]);
        let behind = format!("repl:behind:{}", &spec[3..8]);
        rl(&mut p, &call(spec, &ahead, &format!("NOW {}", t + 600_000)));
        rl(&mut p, &call(spec, &behind, &format!("NOW {}", t - 1500)));
    }
    // A refund with a lagging NOW moves the expiry too.
    rl(
        &mut p,
        &format!("RL.SLIDE repl:behind:SLIDE 3 1000 NOW {}", t - 1500),
    );
    rl(
        &mut p,
        &format!("RL.REFUND repl:behind:SLIDE COST 1 NOW {}", t - 1500),
    );
    sync(&mut p);
    let keys: Vec<String> = redis::cmd("KEYS").arg("repl:*").query(&mut p).unwrap();
    assert_eq!(keys.len(), 10);
    let expiries = |c: &mut Connection| -> Vec<(String, String, i64)> {
        let mut v: Vec<_> = keys
            .iter()
            .map(|k| {
                (
                    k.clone(),
                    digest(c, k),
                    int(c, &["PEXPIRETIME", k.as_str()]),
                )
            })
            .collect();
        v.sort();
        v
    };
    let on_primary = expiries(&mut p);
    assert_eq!(expiries(&mut r), on_primary);
    for (k, _, at) in &on_primary {
        // Every key outlives the call that made it, on the server's clock.
        assert!(*at > t as i64 + 300, "{k} expires at {at}, called at {t}");
    }
    // Reloading the AOF with the default bound applies every command as it was decided.
    run(&mut p, &["CONFIG", "SET", NOW_MAX_AHEAD, "1000"]).unwrap();
    run(&mut p, &["DEBUG", "LOADAOF"]).unwrap();
    assert_eq!(expiries(&mut p), on_primary);
}

#[rstest]
#[case::persist(&["PERSIST", "{k}"])]
#[case::expire(&["PEXPIRE", "{k}", "50"])]
#[case::long_expire(&["EXPIRE", "{k}", "100000"])]
fn the_ttl_is_always_the_limiters(#[case] tamper: &[&str]) {
    let server = default_server();
    let mut c = server.conn();
    for spec in KINDS {
        let spec = spec.replace("3 1000", "100 60000");
        let key = format!("ttl:{}", &spec[3..8]);
        rl(&mut c, &call(&spec, &key, ""));
        let words: Vec<String> = tamper.iter().map(|w| w.replace("{k}", &key)).collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        run(&mut c, &words).unwrap();
        // The next call of the same window, in the same millisecond or not.
        let r = rl(&mut c, &call(&spec, &key, ""));
        assert_ttl_is_reset(&mut c, &key, r, &format!("{spec} after {tamper:?}"));
        run(&mut c, &words).unwrap();
        let r = rl(&mut c, &format!("RL.REFUND {key} COST 1"));
        assert_ttl_is_reset(&mut c, &key, r, &format!("refund after {tamper:?}"));
    }
}

#[rstest]
fn the_ttl_is_the_limiters_after_a_restore_without_ttl() {
    let server = default_server();
    let mut c = server.conn();
    for spec in KINDS {
        let spec = spec.replace("3 1000", "100 60000");
        let key = format!("copy:{}", &spec[3..8]);
        rl(&mut c, &call(&spec, &key, ""));
        let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query(&mut c).unwrap();
        let copy = format!("{key}:copy");
        // What copy tools do: RESTORE with TTL 0, which leaves the key without expiry.
        let ok: Value = redis::cmd("RESTORE")
            .arg(&copy)
            .arg(0)
            .arg(dump)
            .query(&mut c)
            .unwrap();
        assert_eq!(ok, Value::Okay);
        assert_eq!(int(&mut c, &["PTTL", &copy]), -1);
        let r = rl(&mut c, &call(&spec, &copy, ""));
        assert_ttl_is_reset(&mut c, &copy, r, &spec);
    }
}

#[rstest]
fn a_fixed_windows_absolute_reset_is_its_pexpiretime() {
    // docs/commands.md's header recipe (RL.FIXED): X-RateLimit-Reset as a Unix time, from the
    // server alone.
    let server = default_server();
    let mut c = server.conn();
    let mut ends = Vec::new();
    for _ in 0..3 {
        let mut pipe = redis::pipe();
        pipe.cmd("RL.FIXED").arg("hdr").arg(3).arg(60000);
        pipe.cmd("PEXPIRETIME").arg("hdr");
        pipe.cmd("TIME");
        let (reply, end, time): ([i64; 5], i64, (String, String)) = pipe.query(&mut c).unwrap();
        let server_ms =
            time.0.parse::<i64>().unwrap() * 1000 + time.1.parse::<i64>().unwrap() / 1000;
        assert!(
            (server_ms + reply[4] - end).abs() <= 5,
            "{reply:?} {end} {server_ms}"
        );
        ends.push(end);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(ends.windows(2).all(|w| w[0] == w[1]), "{ends:?}");
}

#[rstest]
fn an_effect_from_a_client_is_bounded_like_any_now() {
    let server = default_server();
    let mut c = server.conn();
    let apply = |c: &mut Connection, effect: String| -> redis::RedisResult<Value> {
        redis::cmd("RL.APPLY").arg("fx").arg(effect).query(c)
    };
    let hour = unix_ms() + 3_600_000;
    let e = apply(&mut c, format!("RL.SLIDE 3 1000 NOW {hour}")).unwrap_err();
    assert!(e.to_string().contains("NOW is"), "{e}");
    assert_eq!(int(&mut c, &["EXISTS", "fx"]), 0);
    // Behind the clock: an effect's key expires when its limiter is back to empty at the
    // effect's own time, as it does on replicas and from the AOF (a client's own RL.SLIDE
    // keeps its key that much longer instead).
    let behind = unix_ms() - 400;
    apply(&mut c, format!("RL.SLIDE 3 1000 NOW {behind}")).unwrap();
    let at = int(&mut c, &["PEXPIRETIME", "fx"]);
    assert_eq!(at, behind as i64 + 1000, "PEXPIRETIME");
    let behind = unix_ms() - 1500;
    let gone: Value = redis::cmd("RL.APPLY")
        .arg("fy")
        .arg(format!("RL.SLIDE 3 1000 NOW {behind}"))
        .query(&mut c)
        .unwrap();
    assert!(matches!(gone, Value::Array(_)), "{gone:?}");
    assert_eq!(int(&mut c, &["EXISTS", "fy"]), 0);
}
