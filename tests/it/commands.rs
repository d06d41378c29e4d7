//! The RL.SLIDE / RL.PEEK / RL.REFUND contract, the README's first call, and the examples of
//! docs/commands.md, against a real redis-server with the module loaded.

use crate::common::{
    digest, err, int, rl, run, server, slide_in_multi_and_lua, text, unix_ms, wait_until, Server,
};
use redis::{Connection, Value};
use rstest::rstest;

#[rstest]
fn readme_first_call(server: Server) {
    let mut c = server.conn();
    assert_eq!(
        rl(&mut c, "RL.SLIDE user:42 100 60000"),
        [1, 100, 99, 0, 60000]
    );
    // The README's first call, with the window's unit.
    assert_eq!(
        rl(&mut c, "RL.SLIDE user:43 100 60s"),
        [1, 100, 99, 0, 60000]
    );
}

#[rstest]
fn readme_three_per_second(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    let at = |ms: u64| format!("RL.SLIDE api:key 3 1000 NOW {}", t + ms);
    assert_eq!(rl(&mut c, &at(0)), [1, 3, 2, 0, 1000]);
    assert_eq!(rl(&mut c, &at(100)), [1, 3, 1, 0, 1000]);
    assert_eq!(rl(&mut c, &at(200)), [1, 3, 0, 0, 1000]);
    // Refused: the request at +0 leaves the window at +1000, 700 ms from now.
    assert_eq!(rl(&mut c, &at(300)), [0, 3, 0, 700, 900]);
    assert_eq!(rl(&mut c, &at(1000)), [1, 3, 0, 0, 1000]);
}

#[rstest]
fn readme_two_windows(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    let at = |ms: u64| format!("RL.SLIDE jobs:acme 25 5000 300 300000 NOW {}", t + ms);
    for i in 0..25 {
        assert_eq!(rl(&mut c, &at(i))[0], 1);
    }
    // The 5-second window refuses the 26th; the 5-minute window must not count it.
    assert_eq!(rl(&mut c, &at(30)), [0, 25, 0, 4970, 299_994]);
    // Once the burst has left the short window, only the long one still counts it.
    assert_eq!(rl(&mut c, &at(5030)), [1, 25, 24, 0, 300_000]);
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK jobs:acme NOW {}", t + 5030)),
        [1, 25, 24, 0, 300_000]
    );
}

#[rstest]
fn readme_cost_peek_refund(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    assert_eq!(
        rl(
            &mut c,
            &format!("RL.SLIDE upload:7 10 60000 COST 4 NOW {t}")
        ),
        [1, 10, 6, 0, 60000]
    );
    assert_eq!(
        rl(
            &mut c,
            &format!("RL.SLIDE upload:7 10 60000 COST 7 NOW {}", t + 10)
        ),
        [0, 10, 6, 59_990, 59_990]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK upload:7 NOW {}", t + 10)),
        [1, 10, 6, 0, 59_990]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.REFUND upload:7 COST 3 NOW {}", t + 20)),
        [1, 10, 9, 0, 59_980]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.REFUND upload:7 NOW {}", t + 20)),
        [1, 10, 10, 0, 0]
    );
    // Refunding everything leaves nothing to keep: the key is gone.
    assert_eq!(int(&mut c, &["EXISTS", "upload:7"]), 0);
}

#[rstest]
fn key_expires_when_empty_and_pttl_is_reset_after(server: Server) {
    let mut c = server.conn();
    let reply = rl(&mut c, "RL.SLIDE ttl:key 5 60000");
    let pttl = int(&mut c, &["PTTL", "ttl:key"]);
    assert!(
        pttl <= reply[4] && pttl > reply[4] - 1000,
        "pttl {pttl} vs {reply:?}"
    );
    // A refused call changes nothing, not even the expiry. (A NOW a little ahead of the
    // server clock: one behind it, by the millisecond that may tick before the call arrives,
    // would keep the key that much longer.)
    let t = unix_ms() + 100;
    rl(&mut c, &format!("RL.SLIDE short 1 150 NOW {t}"));
    let expire_at = int(&mut c, &["PEXPIRETIME", "short"]);
    assert_eq!(expire_at, (t + 150) as i64);
    assert_eq!(
        rl(&mut c, &format!("RL.SLIDE short 1 150 NOW {}", t + 10))[0],
        0
    );
    assert_eq!(int(&mut c, &["PEXPIRETIME", "short"]), expire_at);
    wait_until("the key to expire", 10, || {
        int(&mut c, &["EXISTS", "short"]) == 0
    });
}

#[rstest]
fn refused_calls_and_cost_zero_change_nothing(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    assert_eq!(
        rl(&mut c, &format!("RL.SLIDE z 1 1000 COST 0 NOW {t}")),
        [1, 1, 1, 0, 0]
    );
    assert_eq!(int(&mut c, &["EXISTS", "z"]), 0, "COST 0 creates nothing");
    rl(&mut c, &format!("RL.SLIDE z 1 1000 NOW {t}"));
    let before = digest(&mut c, "z");
    assert_eq!(
        rl(&mut c, &format!("RL.SLIDE z 1 1000 NOW {}", t + 1))[0],
        0
    );
    assert_eq!(
        rl(&mut c, &format!("RL.SLIDE z 1 1000 COST 0 NOW {}", t + 2)),
        [1, 1, 0, 0, 998]
    );
    assert_eq!(digest(&mut c, "z"), before);
}

#[rstest]
fn requests_in_the_same_millisecond_all_count(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    for remaining in (0..5).rev() {
        assert_eq!(
            rl(&mut c, &format!("RL.SLIDE same 5 1000 NOW {t}"))[2],
            remaining
        );
    }
    assert_eq!(
        rl(&mut c, &format!("RL.SLIDE same 5 1000 NOW {t}")),
        [0, 5, 0, 1000, 1000]
    );
}

#[rstest]
fn time_never_runs_backwards(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    rl(&mut c, &format!("RL.SLIDE back 2 1000 NOW {}", t + 500));
    // An earlier NOW counts as +500: the window still holds the first request. The reset
    // is measured from the caller's time, 500 ms before the limiter's.
    assert_eq!(
        rl(&mut c, &format!("RL.SLIDE back 2 1000 NOW {t}")),
        [1, 2, 0, 0, 1500]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK back NOW {t}")),
        [1, 2, 0, 0, 1500]
    );
}

#[rstest]
fn parameters_may_change_between_calls(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    rl(&mut c, &format!("RL.SLIDE cust 2 60000 NOW {t}"));
    rl(&mut c, &format!("RL.SLIDE cust 2 60000 NOW {t}"));
    assert_eq!(rl(&mut c, &format!("RL.SLIDE cust 2 60000 NOW {t}"))[0], 0);
    // Raising the limit applies to what was already recorded.
    assert_eq!(
        rl(&mut c, &format!("RL.SLIDE cust 5 60000 NOW {t}")),
        [1, 5, 2, 0, 60000]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK cust NOW {t}")),
        [1, 5, 2, 0, 60000]
    );
}

#[rstest]
fn cost_above_the_limit_can_never_be_allowed(server: Server) {
    let mut c = server.conn();
    assert_eq!(
        rl(&mut c, "RL.SLIDE big 10 1000 COST 11"),
        [0, 10, 10, -1, 0]
    );
    assert_eq!(int(&mut c, &["EXISTS", "big"]), 0);
}

#[rstest]
fn peek_reads_without_changing(server: Server) {
    let mut c = server.conn();
    assert_eq!(run(&mut c, &["RL.PEEK", "missing"]).unwrap(), Value::Nil);
    assert_eq!(int(&mut c, &["EXISTS", "missing"]), 0);
    let t = unix_ms();
    rl(&mut c, &format!("RL.SLIDE p 10 60000 NOW {t}"));
    let expire_at = int(&mut c, &["PEXPIRETIME", "p"]);
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK p NOW {}", t + 1000)),
        [1, 10, 9, 0, 59000]
    );
    assert_eq!(
        int(&mut c, &["PEXPIRETIME", "p"]),
        expire_at,
        "PEEK refreshes no expiry"
    );
}

#[rstest]
fn refund_of_missing_key_and_cost_zero(server: Server) {
    let mut c = server.conn();
    assert_eq!(run(&mut c, &["RL.REFUND", "nothing"]).unwrap(), Value::Nil);
    assert_eq!(int(&mut c, &["EXISTS", "nothing"]), 0);
    let t = unix_ms();
    rl(&mut c, &format!("RL.SLIDE r 3 1000 COST 2 NOW {t}"));
    let before = digest(&mut c, "r");
    assert_eq!(
        rl(&mut c, &format!("RL.REFUND r COST 0 NOW {t}")),
        [1, 3, 1, 0, 1000]
    );
    assert_eq!(digest(&mut c, "r"), before);
    // Never below empty.
    assert_eq!(
        rl(&mut c, &format!("RL.REFUND r COST 100 NOW {t}")),
        [1, 3, 3, 0, 0]
    );
}

#[rstest]
fn wrong_type_is_refused_and_untouched(server: Server) {
    let mut c = server.conn();
    run(&mut c, &["SET", "s", "v"]).unwrap();
    for words in [
        &["RL.SLIDE", "s", "1", "1000"][..],
        &["RL.PEEK", "s"][..],
        &["RL.REFUND", "s"][..],
    ] {
        assert!(err(&mut c, words).starts_with("WRONGTYPE"), "{words:?}");
    }
    assert_eq!(text(&mut c, &["GET", "s"]), "v");
}

#[rstest]
fn works_in_transactions_and_scripts(server: Server) {
    let mut c = server.conn();
    let (multi, lua) = slide_in_multi_and_lua(&mut c);
    assert_eq!(multi[0][0], 1);
    assert_eq!(multi[1][0], 0);
    assert_eq!(lua, vec![1, 3, 2, 0, 60000]);
}

#[rstest]
fn memory_follows_what_was_recorded(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.cmd("RL.SLIDE")
            .arg("mem")
            .arg(100_000)
            .arg(3_600_000)
            .arg("NOW")
            .arg(t + i)
            .ignore();
    }
    pipe.query::<()>(&mut c).unwrap();
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK mem NOW {}", t + 999))[2],
        99_000
    );
    let bytes = int(&mut c, &["MEMORY", "USAGE", "mem", "SAMPLES", "0"]);
    assert!(bytes <= 10 * 1000, "{bytes} bytes for 1000 requests");
}

#[rstest]
fn info_counts_each_command(server: Server) {
    let mut c = server.conn();
    rl(&mut c, "RL.SLIDE i 1 60000");
    rl(&mut c, "RL.SLIDE i 1 60000");
    let _ = run(&mut c, &["RL.SLIDE", "i", "x", "60000"]);
    rl(&mut c, "RL.PEEK i");
    rl(&mut c, "RL.SUBWIN w 1 1000 10");
    let info = text(&mut c, &["INFO", "ratelimit"]);
    assert!(
        info.contains("ratelimit_slide:calls=3,allowed=1,refused=1,errors=1"),
        "{info}"
    );
    assert!(
        info.contains("ratelimit_peek:calls=1,allowed=1,refused=0,errors=0"),
        "{info}"
    );
    assert!(
        info.contains("ratelimit_subwin:calls=1,allowed=1,refused=0,errors=0"),
        "{info}"
    );
}

#[rstest]
fn command_info_and_docs_describe_each_command(server: Server) {
    let mut c = server.conn();
    let info = run(
        &mut c,
        &["COMMAND", "INFO", "RL.SLIDE", "RL.PEEK", "RL.REFUND"],
    )
    .unwrap();
    let Value::Array(commands) = info else {
        panic!("{info:?}")
    };
    let expect = [
        ("rl.slide", -4, "write"),
        ("rl.peek", -2, "readonly"),
        ("rl.refund", -2, "write"),
    ];
    for (cmd, (name, arity, flag)) in commands.iter().zip(expect) {
        let Value::Array(fields) = cmd else {
            panic!("{cmd:?}")
        };
        let got_name: String = redis::from_redis_value(&fields[0]).unwrap();
        assert_eq!(got_name.to_lowercase(), name);
        assert_eq!(fields[1], Value::Int(arity));
        let flags: Vec<String> = redis::from_redis_value(&fields[2]).unwrap();
        assert!(flags.contains(&flag.to_string()), "{name}: {flags:?}");
        assert_eq!(
            &fields[3..6],
            &[Value::Int(1), Value::Int(1), Value::Int(1)]
        );
        let specs = format!("{:?}", fields[8]);
        let key_flag = if flag == "readonly" { "RO" } else { "RW" };
        assert!(specs.contains(key_flag), "{name}: {specs}");
    }
    let docs = format!(
        "{:?}",
        run(&mut c, &["COMMAND", "DOCS", "RL.SLIDE"]).unwrap()
    );
    assert!(docs.contains("Exact sliding-window rate limit"), "{docs}");
    assert!(docs.contains("COST"), "{docs}");
}

#[rstest]
fn the_module_is_listed_with_its_type(server: Server) {
    let mut c = server.conn();
    let modules = format!("{:?}", run(&mut c, &["MODULE", "LIST"]).unwrap());
    assert!(modules.contains("ratelimit"), "{modules}");
    // One version everywhere: Cargo.toml's, as major·10000 + minor·100 + patch, and as
    // COMMAND DOCS's `since`.
    let part = |s: &str| s.parse::<i64>().unwrap();
    let version = part(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
        + part(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + part(env!("CARGO_PKG_VERSION_PATCH"));
    assert!(
        modules.contains(&format!("int({version})")),
        "{modules}: version {version}"
    );
    let docs = format!(
        "{:?}",
        run(&mut c, &["COMMAND", "DOCS", "RL.TOKEN"]).unwrap()
    );
    assert!(
        docs.contains(&format!("\"{}\"", env!("CARGO_PKG_VERSION"))),
        "{docs}"
    );
    rl(&mut c, "RL.SLIDE t 1 60000");
    assert_eq!(text(&mut c, &["TYPE", "t"]), "ratelimit");
}

#[rstest]
fn readme_token_bucket(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    let at = |ms: u64| format!("RL.TOKEN api:user:7 120 60000 NOW {}", t + ms);
    assert_eq!(rl(&mut c, &at(0)), [1, 120, 119, 0, 500]);
    for _ in 1..120 {
        assert_eq!(rl(&mut c, &at(0))[0], 1);
    }
    // The burst is spent: one token every 500 ms from now on, 2 per second.
    assert_eq!(rl(&mut c, &at(0)), [0, 120, 0, 500, 60000]);
    assert_eq!(rl(&mut c, &at(500)), [1, 120, 0, 0, 60000]);
    assert_eq!(rl(&mut c, &at(700)), [0, 120, 0, 300, 59800]);
    let pttl = int(&mut c, &["PTTL", "api:user:7"]);
    assert!(pttl > 55_000 && pttl <= 60_500, "{pttl}");
    // A smaller burst: 10 at once, then the same 2 per second.
    let b = |ms: u64| format!("RL.TOKEN api:user:8 120 60000 BURST 10 NOW {}", t + ms);
    for left in (0..10).rev() {
        assert_eq!(rl(&mut c, &b(0))[2], left);
    }
    assert_eq!(rl(&mut c, &b(0)), [0, 10, 0, 500, 5000]);
}

#[rstest]
fn readme_leaky_bucket(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    let at = |extra: &str| format!("RL.LEAKY carrier:5 4 1000 {extra} NOW {t}");
    assert_eq!(rl(&mut c, &at("")), [1, 5, 4, 0, 250]);
    assert_eq!(rl(&mut c, &at("")), [1, 5, 3, 250, 500]);
    assert_eq!(rl(&mut c, &at("")), [1, 5, 2, 500, 750]);
    assert_eq!(rl(&mut c, &at("")), [1, 5, 1, 750, 1000]);
    // A fifth that may wait at most 500 ms would wait 1000: refused, nothing booked.
    assert_eq!(rl(&mut c, &at("MAXDELAY 500")), [0, 3, 0, 500, 1000]);
    // A job cancelled before it ran gives its slot back.
    assert_eq!(
        rl(&mut c, &format!("RL.REFUND carrier:5 NOW {t}")),
        [1, 5, 2, 0, 750]
    );
    assert_eq!(rl(&mut c, &at("")), [1, 5, 1, 750, 1000]);
}

#[rstest]
fn each_key_keeps_its_algorithm(server: Server) {
    let mut c = server.conn();
    rl(&mut c, "RL.SLIDE s 10 1000");
    rl(&mut c, "RL.TOKEN t 10 1000");
    rl(&mut c, "RL.LEAKY l 10 1000");
    rl(&mut c, "RL.SUBWIN w 10 1000 100");
    let cases = [
        (
            ["RL.TOKEN", "s", "10", "1000"],
            "WRONGTYPE key holds a RL.SLIDE limiter, not RL.TOKEN",
        ),
        (
            ["RL.LEAKY", "t", "10", "1000"],
            "WRONGTYPE key holds a RL.TOKEN limiter, not RL.LEAKY",
        ),
        (
            ["RL.SLIDE", "l", "10", "1000"],
            "WRONGTYPE key holds a RL.LEAKY limiter, not RL.SLIDE",
        ),
        (
            ["RL.FIXED", "w", "10", "1000"],
            "WRONGTYPE key holds a RL.SUBWIN limiter, not RL.FIXED",
        ),
    ];
    for (words, want) in cases {
        assert_eq!(err(&mut c, &words), want);
    }
    // PEEK and REFUND work on every kind. A scheduler's limit counts what fits within
    // MAXDELAY (by default the window): 1 at once plus 10 delayed.
    for (key, limit) in [("s", 10), ("t", 10), ("l", 11), ("w", 10)] {
        assert_eq!(rl(&mut c, &format!("RL.PEEK {key}"))[1], limit);
        assert_eq!(rl(&mut c, &format!("RL.REFUND {key}"))[2], limit);
    }
}

/// `MEMORY USAGE` tells what a key costs: over 20,000 keys, `used_memory` grows per key by
/// what `MEMORY USAGE` says of one, plus what Redis leaves out for every type (the expiry's
/// entry, the tables' slots), measured the same way for `SET k v PX`.
#[rstest]
fn memory_usage_is_what_a_key_costs(server: Server) {
    let mut c = server.conn();
    const N: u64 = 20_000;
    let per_key = |c: &mut Connection, template: &str| -> (f64, f64) {
        run(c, &["FLUSHALL", "SYNC"]).unwrap(); // Valkey 8 flushes lazily by default
        let before = info_used_memory(c);
        let mut pipe = redis::pipe();
        for i in 0..N {
            let line = template.replace("{}", &format!("{i:06}"));
            let words: Vec<&str> = line.split_whitespace().collect();
            let cmd = pipe.cmd(words[0]);
            for w in &words[1..] {
                cmd.arg(*w);
            }
            cmd.ignore();
        }
        let () = pipe.query(c).unwrap();
        let grown = (info_used_memory(c) - before) as f64 / N as f64;
        let usage = int(c, &["MEMORY", "USAGE", "k:000001", "SAMPLES", "0"]) as f64;
        (grown, usage)
    };
    let (set_grown, set_usage) = per_key(&mut c, "SET k:{} v PX 600000");
    let unseen = set_grown - set_usage;
    for template in [
        "RL.TOKEN k:{} 100 600000",
        "RL.LEAKY k:{} 100 600000",
        "RL.FIXED k:{} 100 600000",
        "RL.SLIDE k:{} 100 600000",
        "RL.SUBWIN k:{} 100 600000 10000",
    ] {
        let (grown, usage) = per_key(&mut c, template);
        assert!(
            (grown - usage - unseen).abs() <= 16.0,
            "{template}: used_memory grows {grown:.1} per key, MEMORY USAGE says {usage} \
             (SET PX: {set_grown:.1} and {set_usage})"
        );
    }
}

fn info_used_memory(c: &mut Connection) -> i64 {
    let info = text(c, &["INFO", "memory"]);
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory")
}

#[rstest]
fn rate_extremes(server: Server) {
    let mut c = server.conn();
    // The million-per-second bucket is empty again 1 ms after NOW: a clock ahead of the real
    // one keeps the key from expiring between calls.
    let t = unix_ms() + 3_600_000;
    // One per day, and a million per second (a thousand per millisecond).
    assert_eq!(
        rl(&mut c, &format!("RL.TOKEN day 1 86400000 NOW {t}")),
        [1, 1, 0, 0, 86_400_000]
    );
    assert_eq!(
        rl(&mut c, &format!("RL.TOKEN day 1 86400000 NOW {}", t + 1))[3],
        86_399_999
    );
    let fast = |ms: u64, cost: u64| {
        format!(
            "RL.TOKEN fast 1000000 1000 BURST 1000 COST {cost} NOW {}",
            t + ms
        )
    };
    assert_eq!(rl(&mut c, &fast(0, 1000)), [1, 1000, 0, 0, 1]);
    assert_eq!(rl(&mut c, &fast(0, 1)), [0, 1000, 0, 1, 1]);
    assert_eq!(rl(&mut c, &fast(1, 1000)), [1, 1000, 0, 0, 1]);
}

/// Every limiter command: `COST 0` on a missing key creates nothing; a refused call and a
/// `COST 0` call change nothing (same digest, same expiry); a cost beyond what the limiter
/// can ever hold answers -1.
#[rstest]
#[case("RL.SLIDE {} 2 60000")]
#[case("RL.TOKEN {} 2 60000")]
#[case("RL.LEAKY {} 2 60000 MAXDELAY 0 BURST 2")]
#[case("RL.FIXED {} 2 60000")]
#[case("RL.FIXED {} 2 60000 ALIGN")]
#[case("RL.SUBWIN {} 2 60000 1000")]
#[case("RL.SUBWIN {} 2 4000 1")]
fn every_limiter_follows_the_contract(server: Server, #[case] template: &str) {
    let mut c = server.conn();
    let t = unix_ms();
    let call = |key: &str, extra: &str| format!("{} {extra} NOW {t}", template.replace("{}", key));
    assert_eq!(rl(&mut c, &call("fresh", "COST 0"))[0], 1);
    assert_eq!(int(&mut c, &["EXISTS", "fresh"]), 0, "COST 0 created a key");
    assert_eq!(rl(&mut c, &call("big", "COST 3"))[3], -1);
    assert_eq!(
        int(&mut c, &["EXISTS", "big"]),
        0,
        "a refused call created a key"
    );
    assert_eq!(rl(&mut c, &call("k", "COST 2"))[0], 1);
    let (before, expiry) = (digest(&mut c, "k"), int(&mut c, &["PEXPIRETIME", "k"]));
    let refused = rl(&mut c, &call("k", ""));
    assert_eq!(refused[0], 0, "{refused:?}");
    assert!(refused[3] > 0, "{refused:?}");
    rl(&mut c, &call("k", "COST 0"));
    assert_eq!(digest(&mut c, "k"), before);
    assert_eq!(int(&mut c, &["PEXPIRETIME", "k"]), expiry);
    // The key's PTTL is the reply's reset_after_ms.
    let pttl = int(&mut c, &["PTTL", "k"]);
    assert!(
        pttl <= refused[4] && pttl > refused[4] - 2000,
        "{pttl} vs {refused:?}"
    );
}

#[rstest]
fn readme_fixed_window_and_headers(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    let at = |ms: u64| format!("RL.FIXED api:acme 3 60000 NOW {}", t + ms);
    assert_eq!(rl(&mut c, &at(0)), [1, 3, 2, 0, 60000]);
    assert_eq!(rl(&mut c, &at(1000)), [1, 3, 1, 0, 59000]);
    assert_eq!(rl(&mut c, &at(2000)), [1, 3, 0, 0, 58000]);
    let refused = rl(&mut c, &at(3000));
    assert_eq!(refused, [0, 3, 0, 57000, 57000]);
    // Every call in the window reports the same absolute reset, and the key expires then.
    assert_eq!(
        int(&mut c, &["PEXPIRETIME", "api:acme"]),
        (t + 60000) as i64
    );
    // The response headers, from that one reply.
    let [_, limit, remaining, retry, reset] = refused;
    let secs = |ms: i64| (ms + 999) / 1000;
    assert_eq!((limit, remaining, secs(reset), secs(retry)), (3, 0, 57, 57));
    // The window ends exactly at +60000: a new one opens there.
    assert_eq!(rl(&mut c, &at(60000)), [1, 3, 2, 0, 60000]);
}

#[rstest]
fn fixed_window_align(server: Server) {
    let mut c = server.conn();
    // Just ahead of the server clock: a NOW behind it keeps the key that much longer.
    let t = unix_ms() + 200;
    let day = 86_400_000;
    let end_of_day = (t / day + 1) * day;
    let reply = rl(
        &mut c,
        &format!("RL.FIXED quota:acme 1000 86400000 ALIGN NOW {t}"),
    );
    assert_eq!(reply, [1, 1000, 999, 0, (end_of_day - t) as i64]);
    assert_eq!(
        int(&mut c, &["PEXPIRETIME", "quota:acme"]),
        end_of_day as i64
    );
}

/// docs/commands.md's RL.SUBWIN example: 4 per second in sub-intervals of 250 ms.
#[rstest]
fn readme_sub_interval_window(server: Server) {
    let mut c = server.conn();
    let t = unix_ms() / 1000 * 1000 + 1000;
    let at =
        |ms: u64, cost: u64| format!("RL.SUBWIN api:acme 4 1000 250 COST {cost} NOW {}", t + ms);
    assert_eq!(rl(&mut c, &at(0, 2)), [1, 4, 2, 0, 1249]);
    assert_eq!(rl(&mut c, &at(100, 2)), [1, 4, 0, 0, 1149]);
    assert_eq!(rl(&mut c, &at(200, 1)), [0, 4, 0, 862, 1049]);
    // Sub-interval 0 now trails; at +1125 it weighs ceil(4 * 124/250) = 2, so 2 more fit.
    assert_eq!(rl(&mut c, &at(1125, 2)), [1, 4, 0, 0, 1124]);
    assert_eq!(int(&mut c, &["PEXPIRETIME", "api:acme"]), (t + 2249) as i64);
    assert_eq!(rl(&mut c, &at(1249, 1)), [1, 4, 1, 0, 1000]);
}

#[rstest]
fn sub_interval_window_changes_shape_and_keeps_its_units(server: Server) {
    let mut c = server.conn();
    let t = unix_ms() / 1000 * 1000 + 1000;
    let at = |res: u64, cost: u64, ms: u64| {
        format!("RL.SUBWIN shape 10 60000 {res} COST {cost} NOW {}", t + ms)
    };
    rl(&mut c, &at(1000, 6, 0));
    // A finer resolution keeps the 6 units: 4 more fit, not 10.
    let reply = rl(&mut c, &at(100, 4, 10));
    assert_eq!(reply[..3], [1, 10, 0]);
    assert_eq!(rl(&mut c, &at(100, 1, 20))[0], 0);
    // The new value got its expiry back.
    assert_eq!(
        int(&mut c, &["PEXPIRETIME", "shape"]),
        (t + 10) as i64 + reply[4]
    );
    // The block of 20 + 4 * 601 bytes in its size class (2,560) where a bucket's key of a
    // name as long keeps 16 bytes: what the server adds around either is the same (it
    // differs between servers, see operations.md).
    run(&mut c, &["RL.TOKEN", "token", "5", "60000"]).unwrap();
    assert_eq!(
        int(&mut c, &["MEMORY", "USAGE", "shape", "SAMPLES", "0"])
            - int(&mut c, &["MEMORY", "USAGE", "token", "SAMPLES", "0"]),
        2560 - 16
    );
}

/// `RL.PEEK key COST n` answers what the limiter command with `COST n` would, and changes
/// nothing; without COST it reads the state (`allowed` always 1).
#[rstest]
fn peek_with_cost_answers_as_the_command_would_and_changes_nothing(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    for first in [
        "RL.SLIDE s 5 1000 8 60000",
        "RL.TOKEN tb 5 1000",
        "RL.LEAKY lb 5 1000 MAXDELAY 500",
        "RL.FIXED f 5 1000",
        "RL.SUBWIN w 5 1000 100",
    ] {
        let key = first.split(' ').nth(1).unwrap();
        rl(&mut c, &format!("{first} COST 3 NOW {t}"));
        for (cost, dt) in [(1, 10), (2, 20), (3, 30), (9, 40), (2, 700)] {
            let at = t + dt;
            let before = digest(&mut c, key);
            let peek = rl(&mut c, &format!("RL.PEEK {key} COST {cost} NOW {at}"));
            assert_eq!(digest(&mut c, key), before, "{first}: PEEK changed the key");
            let call = rl(&mut c, &format!("{first} COST {cost} NOW {at}"));
            assert_eq!(peek, call, "{first} COST {cost} at +{dt}");
        }
    }
    // Without COST: the state, allowed or not.
    assert_eq!(rl(&mut c, &format!("RL.PEEK f NOW {}", t + 50))[0], 1);
    assert_eq!(
        run(&mut c, &["RL.PEEK", "nothing", "COST", "1"]).unwrap(),
        Value::Nil
    );
}

/// Durations take units wherever a duration is taken (`250ms`, `60s`, `5m`, `1h`, `1d`): the
/// same call with the unit and in milliseconds answers alike; a bare integer stays ms.
#[rstest]
fn durations_take_units(server: Server) {
    let mut c = server.conn();
    let t = unix_ms();
    for (with_unit, in_ms) in [
        ("RL.SLIDE a{1} 2 60s", "RL.SLIDE b{1} 2 60000"),
        (
            "RL.SLIDE a{2} 2 1m 10 1h",
            "RL.SLIDE b{2} 2 60000 10 3600000",
        ),
        ("RL.TOKEN a{3} 10 1m", "RL.TOKEN b{3} 10 60000"),
        (
            "RL.LEAKY a{4} 10 1s MAXDELAY 500ms",
            "RL.LEAKY b{4} 10 1000 MAXDELAY 500",
        ),
        ("RL.FIXED a{5} 10 1d", "RL.FIXED b{5} 10 86400000"),
        ("RL.SUBWIN a{6} 10 1m 1s", "RL.SUBWIN b{6} 10 60000 1000"),
        (
            "RL.ACQUIRE a{7} 3 30s BLOCK 1s",
            "RL.ACQUIRE b{7} 3 30000 BLOCK 1000",
        ),
    ] {
        for _ in 0..3 {
            let (x, y) = (
                run(
                    &mut c,
                    &format!("{with_unit} NOW {t}")
                        .split(' ')
                        .collect::<Vec<_>>(),
                ),
                run(
                    &mut c,
                    &format!("{in_ms} NOW {t}").split(' ').collect::<Vec<_>>(),
                ),
            );
            let (x, y) = (x.unwrap(), y.unwrap());
            // A lease's id differs by its key only in nothing: compare the five fields.
            let five = |v: Value| -> Vec<Value> {
                let Value::Array(items) = v else {
                    panic!("{v:?}")
                };
                items.into_iter().take(5).collect()
            };
            assert_eq!(five(x), five(y), "{with_unit} vs {in_ms}");
        }
    }
    // RL.EXTEND and a policy take them too.
    run(&mut c, &["RL.ACQUIRE", "l", "2", "10s", "ID", "x"]).unwrap();
    run(&mut c, &["RL.EXTEND", "l", "x", "2m"]).unwrap();
    assert!(int(&mut c, &["PTTL", "l"]) > 100_000);
    run(
        &mut c,
        &["RL.POLICY", "SET", "p", "m", "SLIDE", "100", "1m"],
    )
    .unwrap();
    let v: Vec<Value> =
        redis::from_redis_value(&run(&mut c, &["RL.HIT", "p", "u"]).unwrap()).unwrap();
    assert_eq!(v[4], Value::Int(60_000));
    // A window typed in seconds without its unit is milliseconds, as it always was.
    assert_eq!(rl(&mut c, "RL.SLIDE s 2 60")[4], 60);
}
