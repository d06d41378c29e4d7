//! What no client can turn against the server: clocks that pin keys for decades, lease ids
//! that repeat, policies a replica cannot load, counters that lie or wrap, keys and INFO
//! fields that collide, calls that stall, and policies any application could rewrite.

use std::time::{Duration, Instant};

use crate::common::{digest, err, info_field, int, run, text, unix_ms, wait_until, Server};
use redis::{Connection, Value};

/// Runs a line split on spaces.
fn line(c: &mut Connection, line: &str) -> redis::RedisResult<Value> {
    let words: Vec<&str> = line.split_whitespace().collect();
    run(c, &words)
}

fn ok(c: &mut Connection, l: &str) {
    assert_eq!(
        line(c, l).unwrap_or_else(|e| panic!("{l}: {e}")),
        Value::Okay,
        "{l}"
    );
}

/// The first integer of a reply (an `RL.*` call's `allowed`, an `RL.HIT`'s).
fn first(c: &mut Connection, l: &str) -> i64 {
    match line(c, l).unwrap_or_else(|e| panic!("{l}: {e}")) {
        Value::Array(items) => match items.first() {
            Some(Value::Int(i)) => *i,
            other => panic!("{l}: {other:?}"),
        },
        other => panic!("{l}: {other:?}"),
    }
}

/// An administrator's connection that sets the server's settings for the test.
fn setting(c: &mut Connection, name: &str, value: &str) {
    run(c, &["CONFIG", "SET", name, value]).unwrap();
}

// ---------------------------------------------------------------------------------------
// Memory and data.

/// A lagging `NOW` on an existing key (or a new one) never keeps it longer than its
/// limiter's own span from the server clock, on every command that sets an expiry, with
/// the server's default settings; and a replica holds the same expiry.
#[test]
fn a_lagging_now_never_pins_a_key() {
    let primary = Server::start(&["--ratelimit.now-max-ahead-ms", "1000"]);
    let replica = primary.replica();
    let mut c = primary.conn();
    // Each command, first on the server clock, then with NOW 0 (57 years behind), and the
    // longest the key may live: its limiter's span.
    let cases: [(&str, &str, &str, i64); 10] = [
        ("s", "RL.SLIDE s 10 1000", "RL.SLIDE s 10 1000 NOW 0", 1000),
        ("t", "RL.TOKEN t 10 1000", "RL.TOKEN t 10 1000 NOW 0", 1000),
        ("l", "RL.LEAKY l 10 1000", "RL.LEAKY l 10 1000 NOW 0", 1000),
        ("f", "RL.FIXED f 10 1000", "RL.FIXED f 10 1000 NOW 0", 1000),
        (
            "w",
            "RL.SUBWIN w 10 1000 100",
            "RL.SUBWIN w 10 1000 100 NOW 0",
            1100,
        ),
        (
            "a",
            "RL.ACQUIRE a 10 1000",
            "RL.ACQUIRE a 10 1000 NOW 0",
            1000,
        ),
        (
            "cell",
            "CL.THROTTLE cell 10 10 1",
            "CL.THROTTLE cell 10 10 1 1 NOW 0",
            1100,
        ),
        ("r", "RL.SLIDE r 10 1000 COST 3", "RL.REFUND r NOW 0", 1000),
        ("g", "RL.SLIDE g 10 1000", "RL.CHARGE g COST 2 NOW 0", 1000),
        (
            "{x}1",
            "RL.ALL 2 {x}1 {x}2 SLIDE 10 1000 TOKEN 10 1000",
            "RL.ALL 2 {x}1 {x}2 SLIDE 10 1000 TOKEN 10 1000 NOW 0",
            1000,
        ),
    ];
    for (key, fresh, lagging) in cases.iter().map(|(k, f, l, _)| (k, f, l)) {
        line(&mut c, fresh).unwrap_or_else(|e| panic!("{fresh}: {e}"));
        line(&mut c, lagging).unwrap_or_else(|e| panic!("{lagging}: {e}"));
        let pttl = int(&mut c, &["PTTL", key]);
        let span = cases.iter().find(|(k, ..)| k == key).map_or(0, |c| c.3);
        assert!(
            (1..=span).contains(&pttl),
            "{lagging}: PTTL {pttl}, more than the limiter's {span} ms"
        );
    }
    // A new key made with a lagging NOW lives its span from the server clock too, and the
    // policies' keys likewise.
    line(&mut c, "RL.SLIDE new 10 1000 NOW 0").unwrap();
    assert!((1..=1000).contains(&int(&mut c, &["PTTL", "new"])));
    ok(&mut c, "RL.POLICY SET p m SLIDE 10 1000");
    line(&mut c, "RL.HIT p u").unwrap();
    line(&mut c, "RL.HIT p u NOW 0").unwrap();
    assert!((1..=1000).contains(&int(&mut c, &["PTTL", "p|m|slide|{u}"])));
    // The replica holds the expiry the primary set.
    run(&mut c, &["WAIT", "1", "5000"]).unwrap();
    let mut r = replica.conn();
    for (key, ..) in cases {
        let (p, q) = (
            int(&mut c, &["PEXPIRETIME", key]),
            int(&mut r, &["PEXPIRETIME", key]),
        );
        assert!(p > 0 && p == q, "{key}: primary {p}, replica {q}");
    }
}

/// An id the server makes is always new and loadable, or the call is refused: at the end
/// of time there is none left to make.
#[test]
fn server_made_lease_ids_never_repeat_at_the_end_of_time() {
    let primary = Server::start(&[]);
    let replica = primary.replica();
    let mut c = primary.conn();
    let end = "253402300799999";
    let id = format!("{end}-9223372036854775807");
    assert_eq!(
        first(
            &mut c,
            &format!("RL.ACQUIRE k 10 2678400000 ID {id} NOW {end}")
        ),
        1
    );
    for _ in 0..3 {
        let e = err(&mut c, &["RL.ACQUIRE", "k", "10", "2678400000", "NOW", end]);
        assert!(e.contains("no lease id is left to make"), "{e}");
    }
    // One lease, on both, and the key round-trips every way.
    let peek: Vec<i64> =
        redis::from_redis_value(&line(&mut c, &format!("RL.PEEK k NOW {end}")).unwrap()).unwrap();
    assert_eq!(peek[2], 9);
    run(&mut c, &["WAIT", "1", "5000"]).unwrap();
    let mut r = replica.conn();
    assert_eq!(digest(&mut r, "k"), digest(&mut c, "k"));
    let dump: Vec<u8> = redis::cmd("DUMP").arg("k").query(&mut c).unwrap();
    let restored: Value = redis::cmd("RESTORE")
        .arg("k2")
        .arg(0)
        .arg(dump)
        .query(&mut c)
        .unwrap();
    assert_eq!(restored, Value::Okay);
    line(&mut c, "DEBUG RELOAD").unwrap();
    assert_eq!(info_field(&mut c, "ratelimit_unreadable_keys"), 0);
    assert_eq!(digest(&mut c, "k"), digest(&mut r, "k"));
}

/// A writable replica takes its policies from its primary only: a client's change is
/// refused there, so it never holds more than the cap, and it loads back what it holds.
#[test]
fn a_writable_replica_never_holds_more_policies_than_it_loads() {
    let primary = Server::start(&[]);
    let port = primary.port.to_string();
    let replica = Server::start(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--replica-read-only",
        "no",
    ]);
    let mut r = replica.conn();
    wait_until("the replica's link", 30, || {
        text(&mut r, &["INFO", "replication"]).contains("master_link_status:up")
    });
    let e = err(
        &mut r,
        &["RL.POLICY", "SET", "local", "x", "SLIDE", "1", "1000"],
    );
    assert!(e.starts_with("READONLY"), "{e}");
    let e = err(&mut r, &["RL.POLICY", "DEL", "local"]);
    assert!(e.starts_with("READONLY"), "{e}");
    // The primary fills the cap: the replica follows, and loads it back.
    let mut c = primary.conn();
    let mut pipe = redis::pipe();
    for i in 0..1024 {
        pipe.cmd("RL.POLICY")
            .arg("SET")
            .arg(format!("p{i}"))
            .arg("x")
            .arg("SLIDE")
            .arg(5)
            .arg(1000)
            .ignore();
    }
    let () = pipe.query(&mut c).unwrap();
    assert!(err(
        &mut c,
        &["RL.POLICY", "SET", "more", "x", "SLIDE", "1", "1000"]
    )
    .contains("the most it may"));
    run(&mut c, &["WAIT", "1", "5000"]).unwrap();
    wait_until("the replica's policies", 30, || {
        info_field(&mut r, "ratelimit_policies") == 1024
    });
    line(&mut r, "DEBUG RELOAD").unwrap();
    assert_eq!(info_field(&mut r, "ratelimit_policies"), 1024);
}

/// `RL.TOP`: refusals only, and a window changed between calls forgets as it says.
#[test]
fn rl_top_counts_refusals_and_forgets_after_the_window_grows() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    // Answers that are not refusals: a lease not held, an extension of none.
    line(&mut c, "RL.RELEASE ghost1 x").unwrap();
    line(&mut c, "RL.ACQUIRE held 1 60000 ID a").unwrap();
    line(&mut c, "RL.RELEASE held b").unwrap();
    line(&mut c, "RL.EXTEND held b 1000").unwrap();
    let top: Vec<Value> = redis::from_redis_value(&line(&mut c, "RL.TOP").unwrap()).unwrap();
    assert!(top.is_empty(), "{top:?}");
    // Refused 50 times under a 1 s window, then the window grows to 2 s.
    setting(&mut c, "ratelimit.top-window-ms", "1000");
    line(&mut c, "RL.SLIDE old 1 600000").unwrap();
    for _ in 0..50 {
        assert_eq!(first(&mut c, "RL.SLIDE old 1 600000"), 0);
    }
    let top: Vec<(String, i64, i64)> =
        redis::from_redis_value(&line(&mut c, "RL.TOP").unwrap()).unwrap();
    assert_eq!(top, [("old".to_string(), 50, 0)]);
    setting(&mut c, "ratelimit.top-window-ms", "2000");
    wait_until("RL.TOP forgets 'old'", 15, || {
        let top: Vec<Value> = redis::from_redis_value(&line(&mut c, "RL.TOP").unwrap()).unwrap();
        top.is_empty()
    });
}

/// The policies at their caps: 1,024 policies of 16 limiters (one in shadow), a penalty
/// and 255 words, the longest names, each refused once (by its shadow limiter too, and
/// banning the subject). Memory stays within the documented bound (`MAX_BYTES` in
/// src/engine/policy/mod.rs and docs/commands.md: 48 MB), and no call of
/// `RL.POLICY LIST`, `INFO ratelimit`, `RL.POLICY GET`, `RL.TOP` takes a millisecond.
#[test]
fn policies_at_the_caps_stay_within_their_bounds() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let before = info_field(&mut c, "used_memory");
    // A penalty, then 16 limiters: a 64-byte name, SLIDE, 7 pairs of the largest numbers (31
    // days the longest window); the last, of 4 pairs, a shadow limiter.
    let definition = |p: usize| -> Vec<String> {
        let mut words: Vec<String> = ["PENALTY", "1", "2678400000", "2678400000"]
            .map(String::from)
            .to_vec();
        for l in 0..16 {
            words.push(format!("l{l:02}{p:04}{}", "x".repeat(57)));
            words.push("SLIDE".to_string());
            for w in 0..if l < 15 { 7u64 } else { 4 } {
                words.push("4294967295".to_string());
                words.push((2_678_400_000 - w).to_string());
            }
        }
        words.push("SHADOW".to_string());
        assert_eq!(words.len(), 255);
        words
    };
    for chunk in (0..1024).collect::<Vec<_>>().chunks(64) {
        let mut pipe = redis::pipe();
        for &p in chunk {
            let name = format!("p{p:04}{}", "y".repeat(59));
            pipe.cmd("RL.POLICY")
                .arg("SET")
                .arg(name)
                .arg(definition(p))
                .ignore();
        }
        let () = pipe.query(&mut c).unwrap();
    }
    // Each refused once (its first limiter allows 4294967295 a window: COST above it is
    // never allowed), its shadow limiter refusing too, and the refusal banning the subject:
    // each makes its three sketches for RL.TOP (refused, SHADOW, BANNED).
    let mut pipe = redis::pipe();
    for p in 0..1024 {
        let name = format!("p{p:04}{}", "y".repeat(59));
        pipe.cmd("RL.HIT")
            .arg(name)
            .arg(format!("subject-{p}-{}", "z".repeat(40)))
            .arg("COST")
            .arg("9223372036854775807")
            .ignore();
    }
    let () = pipe.query(&mut c).unwrap();
    assert_eq!(info_field(&mut c, "ratelimit_policies"), 1024);
    let grown = info_field(&mut c, "used_memory") - before;
    println!("1,024 policies at their caps, each refused once: used_memory grew {grown} bytes");
    assert!(
        grown <= 48 * 1024 * 1024,
        "{grown} bytes, above the documented 48 MB"
    );
    // No call over a millisecond: what SLOWLOG holds after each (a machine that stalls the
    // server for its own reasons gets a few tries).
    setting(&mut c, "slowlog-log-slower-than", "1000");
    let slow = |c: &mut Connection, words: &[&str]| -> Option<i64> {
        for _ in 0..5 {
            run(c, &["SLOWLOG", "RESET"]).unwrap();
            run(c, words).unwrap();
            let log: Vec<Value> =
                redis::from_redis_value(&run(c, &["SLOWLOG", "GET"]).unwrap()).unwrap();
            let ours = log.iter().find_map(|entry| match entry {
                Value::Array(fields) => match (fields.get(2), fields.get(3)) {
                    (Some(Value::Int(us)), Some(Value::Array(args))) => {
                        let name: String = redis::from_redis_value(&args[0]).unwrap();
                        (name.eq_ignore_ascii_case(words[0])).then_some(*us)
                    }
                    _ => None,
                },
                _ => None,
            });
            match ours {
                None => return None,
                Some(us) => println!("{words:?} took {us} us; trying again"),
            }
        }
        Some(1000)
    };
    let mut cursor = "0".to_string();
    let mut listed = 0;
    let started = Instant::now();
    loop {
        assert_eq!(
            slow(&mut c, &["RL.POLICY", "LIST", &cursor, "COUNT", "100"]),
            None
        );
        let (next, page): (String, Vec<Value>) = redis::from_redis_value(
            &run(&mut c, &["RL.POLICY", "LIST", &cursor, "COUNT", "100"]).unwrap(),
        )
        .unwrap();
        listed += page.len();
        if next == "0" {
            break;
        }
        cursor = next;
        assert!(started.elapsed() < Duration::from_secs(60));
    }
    assert_eq!(listed, 1024);
    assert_eq!(slow(&mut c, &["INFO", "ratelimit"]), None);
    assert_eq!(slow(&mut c, &["INFO", "everything"]), None);
    let name = format!("p0007{}", "y".repeat(59));
    assert_eq!(slow(&mut c, &["RL.POLICY", "GET", &name]), None);
    assert_eq!(slow(&mut c, &["RL.TOP", "POLICY", &name]), None);
}

// ---------------------------------------------------------------------------------------
// Policies: one subject, one key; one policy, one figure.

/// An `RL.HIT`'s `allowed`.
fn hit(c: &mut Connection, policy: &str, subject: &str) -> i64 {
    let v = run(c, &["RL.HIT", policy, subject]).unwrap();
    let items: Vec<Value> = redis::from_redis_value(&v).unwrap();
    redis::from_redis_value(&items[0]).unwrap()
}

#[test]
fn distinct_policies_limiters_and_subjects_never_share_a_key() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    // One request a minute each: a shared key would refuse the second of a pair.
    for def in [
        "RL.POLICY SET api m SLIDE 1 60000",
        "RL.POLICY SET a b:c SLIDE 1 60000",
        "RL.POLICY SET a:b c SLIDE 1 60000",
        "RL.POLICY SET q l SLIDE 1 60000 l:x SLIDE 1 60000",
        "RL.POLICY SET solo l SLIDE 1 60000",
        "RL.POLICY SET solo:x l SLIDE 1 60000",
    ] {
        ok(&mut c, def);
    }
    // (policy, subject) pairs that shared a key when keys were `policy:limiter:{subject}`.
    type Hit<'a> = (&'a str, &'a str);
    let pairs: [(Hit, Hit); 4] = [
        (("api", "alice"), ("api", "{alice}")),
        (("a", "u"), ("a:b", "u")),
        (("solo", "x:{y}"), ("solo:x", "{y}")),
        (("q", "x:{y}"), ("q", "{y}")),
    ];
    for ((p1, s1), (p2, s2)) in pairs {
        assert_eq!(hit(&mut c, p1, s1), 1, "{p1} {s1}");
        assert_eq!(hit(&mut c, p2, s2), 1, "{p2} {s2} shares {p1} {s1}'s key");
        assert_eq!(hit(&mut c, p1, s1), 0);
    }
    // Every key in its subject's slot.
    let keys: Vec<String> = redis::from_redis_value(&line(&mut c, "KEYS *").unwrap()).unwrap();
    assert_eq!(keys.len(), 10, "{keys:?}");
    for key in keys {
        let subject = match key.split_once("|{") {
            Some((_, wrapped)) => wrapped.trim_end_matches('}').to_string(),
            None => key.split_once("|=").map(|(_, s)| s.to_string()).unwrap(),
        };
        assert_eq!(slot(&key), slot(&subject), "{key}");
    }
}

/// A key's Redis Cluster slot, as the cluster computes it (CRC16-XMODEM of its hash tag).
fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &b in tagged.unwrap_or(bytes) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc & 0x3fff
}

/// A policy's figures in INFO: each policy its own field, units as each limiter took them,
/// never wrapping.
#[test]
fn each_policy_has_its_own_figures_and_units_do_not_wrap() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    ok(&mut c, "RL.POLICY SET a:b x SLIDE 5 60000");
    ok(&mut c, "RL.POLICY SET a_b x SLIDE 5 60000");
    hit(&mut c, "a:b", "u");
    let info = text(&mut c, &["INFO", "ratelimit"]);
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("ratelimit_policy_{name}:")))
            .unwrap_or_else(|| panic!("no field for {name} in {info}"))
            .to_string()
    };
    assert!(field("a|b").contains("calls=1,"), "{}", field("a|b"));
    assert!(field("a_b").contains("calls=0,"), "{}", field("a_b"));
    // A limiter with its own COST takes it, whatever each hit's; two hits of the largest
    // COST neither wrap nor count what no limiter took.
    ok(&mut c, "RL.POLICY SET fixedcost l SLIDE 1000 60000 COST 1");
    for _ in 0..2 {
        let v = run(
            &mut c,
            &["RL.HIT", "fixedcost", "u", "COST", "9223372036854775807"],
        )
        .unwrap();
        let items: Vec<Value> = redis::from_redis_value(&v).unwrap();
        assert_eq!(items[0], Value::Int(1));
    }
    ok(
        &mut c,
        "RL.POLICY SET two a SLIDE 5 60000 COST 2 b TOKEN 10000 60000",
    );
    for _ in 0..2 {
        run(&mut c, &["RL.HIT", "two", "u", "COST", "100"]).unwrap();
    }
    let info = text(&mut c, &["INFO", "ratelimit"]);
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("ratelimit_policy_{name}:")))
            .unwrap_or_else(|| panic!("no field for {name} in {info}"))
            .to_string()
    };
    assert!(
        field("fixedcost").ends_with(",units=2"),
        "{}",
        field("fixedcost")
    );
    assert!(field("two").ends_with(",units=4/200"), "{}", field("two"));
}

/// `RL.HIT ... COST 0` asks every limiter without taking, one with its own COST too.
#[test]
fn cost_0_asks_without_taking() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    ok(
        &mut c,
        "RL.POLICY SET llm rpm SLIDE 3 60000 COST 1 tpm TOKEN 1000 60000",
    );
    ok(&mut c, "RL.POLICY SET solo rpm SLIDE 3 60000 COST 1");
    let t = unix_ms();
    for policy in ["llm", "solo"] {
        for _ in 0..5 {
            let v = run(
                &mut c,
                &["RL.HIT", policy, "u", "COST", "0", "NOW", &t.to_string()],
            )
            .unwrap();
            let items: Vec<Value> = redis::from_redis_value(&v).unwrap();
            let rpm: Vec<i64> = redis::from_redis_value(&items[6]).unwrap();
            assert_eq!(rpm[..3], [1, 3, 3], "{policy}");
        }
        // Nothing was taken: three calls are allowed.
        for _ in 0..3 {
            assert_eq!(hit(&mut c, policy, "u"), 1);
        }
        assert_eq!(hit(&mut c, policy, "u"), 0);
    }
}

/// A limiter set again as another kind works from the next call for every subject with a
/// live key; a key of another type under a derived name is an error that names it.
#[test]
fn a_limiter_that_changes_kind_works_from_the_next_call() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    for (one, two) in [
        ("m FIXED 10 86400000", "m TOKEN 10 86400000"),
        (
            "m FIXED 10 86400000 n SLIDE 5 60000",
            "m TOKEN 10 86400000 n SLIDE 5 60000",
        ),
    ] {
        ok(&mut c, &format!("RL.POLICY SET p {one}"));
        assert_eq!(hit(&mut c, "p", "u"), 1);
        ok(&mut c, &format!("RL.POLICY SET p {two}"));
        assert_eq!(hit(&mut c, "p", "u"), 1, "{one} -> {two}");
    }
    ok(&mut c, "RL.POLICY SET solo m FIXED 10 60000");
    run(&mut c, &["SET", "solo|m|fixed|{v}", "a string"]).unwrap();
    let e = err(&mut c, &["RL.HIT", "solo", "v"]);
    assert!(
        e.starts_with("WRONGTYPE") && e.contains("solo|m|fixed|{v}"),
        "{e}"
    );
}

/// The grammar: HELP, unknown options and words named as RL.ALL names them, names that
/// would make the words ambiguous, long words, BLOCK.
#[test]
fn the_policy_grammar_says_what_is_wrong_and_changes_nothing() {
    let s = Server::start(&[]);
    let mut c = s.conn();
    let help: Vec<String> =
        redis::from_redis_value(&line(&mut c, "RL.POLICY HELP").unwrap()).unwrap();
    assert!(help[0].starts_with("RL.POLICY <subcommand>"), "{help:?}");
    assert!(help.iter().any(|l| l.starts_with("LIST")), "{help:?}");
    let long = "9".repeat(65);
    let cases: [(Vec<&str>, &str); 8] = [
        (
            vec!["m", "SLIDE", "3", "1000", "BURST", "3"],
            "ERR unknown option 'BURST' (limiter 'm')",
        ),
        (
            vec!["SLIDE", "SLIDE", "3", "1000"],
            "a limiter's name may not be a keyword",
        ),
        (
            vec!["m", "SLIDE", "3", "1000", "COST", "SLIDE", "3", "1000"],
            "ERR COST must be an integer",
        ),
        (
            vec!["ALIGN", "FIXED", "3", "1000"],
            "a limiter's name may not be a keyword",
        ),
        (
            vec!["m", "SLIDE", "3", "1000", "cost", "TOKEN", "5", "10"],
            "ERR COST must be",
        ),
        (
            vec!["1m", "SLIDE", "3", "1000"],
            "a limiter's name starts with a letter",
        ),
        (
            vec!["m", "SLIDE", "3", &long],
            "a policy's words are at most 64 bytes",
        ),
        (
            vec!["m", "ACQUIRE", "3", "1000", "BLOCK", "10"],
            "BLOCK is not allowed in a policy",
        ),
    ];
    for (words, expected) in cases {
        let mut call = vec!["RL.POLICY", "SET", "p"];
        call.extend(words.iter());
        let e = err(&mut c, &call);
        assert!(e.contains(expected), "{words:?}: {e}");
        if expected.contains("64 bytes") {
            assert!(e.contains("(limiter 'm')"), "{e}");
        }
        let none: Value = line(&mut c, "RL.POLICY GET p").unwrap();
        assert_eq!(none, Value::Nil, "{words:?} made a policy");
    }
}

/// Who may change policies: an administrator (a user allowed CONFIG SET), whatever other
/// rules a user has; applications run RL.HIT, GET and LIST.
#[test]
fn only_an_administrator_changes_policies() {
    let s = Server::start(&[]);
    let mut admin = s.conn();
    ok(&mut admin, "RL.POLICY SET api m SLIDE 5 60000");
    let user = |name: &str, rules: &[&str]| -> Connection {
        let mut words = vec!["ACL", "SETUSER", name, "reset", "on", "nopass", "~*"];
        words.extend_from_slice(rules);
        run(&mut admin_conn(&s), &words).unwrap();
        let mut c = s.conn();
        run(&mut c, &["AUTH", name, "any"]).unwrap();
        c
    };
    // What an application is given (by name: Redis 7.0 has no categories for module
    // commands), beside rules that would reach further.
    let app_rules = ["+rl.hit", "+rl.policy|get", "+rl.policy|list"];
    for rules in [
        &["+@all", "-@dangerous"][..],
        &["+@write", "+@read"],
        &["+@all", "-config"],
        &["+rl.policy"],
    ] {
        let rules: Vec<&str> = rules.iter().chain(&app_rules).copied().collect();
        let mut app = user("app", &rules);
        for words in [
            &["RL.POLICY", "SET", "api", "m", "SLIDE", "1", "1000"][..],
            &["RL.POLICY", "DEL", "api"],
        ] {
            let e = err(&mut app, words);
            assert!(e.starts_with("NOPERM"), "{rules:?} ran {words:?}: {e}");
        }
        let def: Vec<String> =
            redis::from_redis_value(&line(&mut app, "RL.POLICY GET api").unwrap()).unwrap();
        assert_eq!(def, ["m", "SLIDE", "5", "60000"], "{rules:?}");
        let page: (String, Vec<Value>) =
            redis::from_redis_value(&line(&mut app, "RL.POLICY LIST").unwrap()).unwrap();
        assert_eq!(page.1.len(), 1);
        assert_eq!(hit(&mut app, "api", "u"), 1, "{rules:?}");
    }
    let mut operator = user("operator", &["+rl.policy", "+config|set"]);
    ok(&mut operator, "RL.POLICY SET api m SLIDE 6 60000");
    assert_eq!(int(&mut operator, &["RL.POLICY", "DEL", "api"]), 1);
}

fn admin_conn(s: &Server) -> Connection {
    s.conn()
}
