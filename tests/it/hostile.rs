//! Hostile input: a corpus of malformed calls across every command, each answered with an
//! error or a valid reply, with the server up and every key still sound afterwards.

use crate::common::{run, unix_ms, Server};
use redis::{Connection, Value};

/// Values that try every edge of argument parsing: the integer bounds of 32 and 64 bits and
/// of the module's own ranges, signs, spaces, other notations, empty and non-ASCII strings,
/// keywords where numbers belong, and a very long number.
fn nasty_values() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = [
        "",
        " ",
        "0",
        "-0",
        "1",
        "-1",
        "+1",
        "00",
        "01",
        "1.0",
        "1e3",
        "0x10",
        " 1",
        "1 ",
        "2147483647",
        "2147483648",
        "4294967295",
        "4294967296",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "18446744073709551615",
        "18446744073709551616",
        "99999999999999999999999999999",
        "253402300799999",
        "253402300800000",
        "2678400000",
        "2678400001",
        "4096",
        "NaN",
        "inf",
        "ü",
        "日本",
        "Ā",
        "a\r\nb",
        "١٠",
        "COST",
        "NOW",
        "ALIGN",
        "BURST",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    v.push(vec![0]);
    v.push(vec![0xff, 0xfe, 0x80]);
    v.push(b"9".repeat(100_000));
    v
}

/// One valid call per command; each position from the limit on is replaced in turn.
const TEMPLATES: [&[&str]; 18] = [
    &["RL.SLIDE", "h:slide", "10", "1000", "COST", "1", "NOW", "T"],
    &["RL.SLIDE", "h:slide2", "10", "1000", "100", "60000"],
    &[
        "RL.SUBWIN",
        "h:subwin",
        "10",
        "1000",
        "100",
        "COST",
        "1",
        "NOW",
        "T",
    ],
    &[
        "RL.TOKEN", "h:token", "10", "1000", "BURST", "5", "COST", "1", "NOW", "T",
    ],
    &[
        "RL.LEAKY", "h:leaky", "10", "1000", "MAXDELAY", "500", "BURST", "2", "NOW", "T",
    ],
    &[
        "RL.FIXED", "h:fixed", "10", "1000", "ALIGN", "COST", "1", "NOW", "T",
    ],
    &["RL.PEEK", "h:slide", "NOW", "T"],
    &["RL.REFUND", "h:token", "COST", "1", "NOW", "T"],
    &["RL.REFUND", "h:subwin", "COST", "2"],
    &["RL.RESTORE", "h:restore", "payload"],
    &["RL.PEEK", "h:fixed"],
    &["RL.REFUND", "h:leaky"],
    &[
        "RL.APPLY",
        "h:apply",
        "RL.SLIDE 10 1000 COST 1 NOW 1700000000000",
    ],
    &[
        "RL.ALL", "2", "h:all1", "h:all2", "TOKEN", "10", "1000", "COST", "1", "SLIDE", "10",
        "1000", "NOW", "T",
    ],
    &[
        "RL.ACQUIRE",
        "h:lease",
        "5",
        "30000",
        "ID",
        "x",
        "COST",
        "1",
        "NOW",
        "T",
    ],
    &["RL.RELEASE", "h:lease", "x", "NOW", "T"],
    &["RL.EXTEND", "h:lease", "x", "1000", "NOW", "T"],
    &["RL.APPLY", "h:apply2", "RL.ACQUIRE 5 1000 ID 78 NOW T"],
];

/// A reply a client may see: an error, nil, OK, or the five fields in their ranges.
fn check_reply(words: &[Vec<u8>], reply: &redis::RedisResult<Value>) {
    let shown = || {
        words
            .iter()
            .map(|w| String::from_utf8_lossy(&w[..w.len().min(40)]).into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    };
    match reply {
        Err(e) => assert!(
            e.code().is_some(),
            "{}: not an error reply but {e:?}",
            shown()
        ),
        Ok(Value::Nil) | Ok(Value::Okay) => {}
        Ok(Value::SimpleString(s)) if s == "OK" => {}
        // RL.ALL: the five fields, then each limiter's five (as arrays).
        Ok(Value::Array(fields))
            if fields.len() > 5 && fields[5..].iter().all(|f| matches!(f, Value::Array(_))) =>
        {
            check_reply(words, &Ok(Value::Array(fields[..5].to_vec())));
            for each in &fields[5..] {
                check_reply(words, &Ok(each.clone()));
            }
        }
        Ok(Value::Array(fields)) => {
            // RL.ACQUIRE adds the lease id: a string, or nil when none is held.
            let fields = match fields.split_last() {
                Some((Value::BulkString(id), rest)) if fields.len() == 6 => {
                    assert!(!id.is_empty() && id.len() <= 512, "{}", shown());
                    rest
                }
                Some((Value::Nil, rest)) if fields.len() == 6 => rest,
                _ => &fields[..],
            };
            let ints: Vec<i64> = fields
                .iter()
                .map(|f| match f {
                    Value::Int(i) => *i,
                    other => panic!("{}: field {other:?}", shown()),
                })
                .collect();
            let [allowed, limit, remaining, retry, reset] = ints[..] else {
                panic!("{}: {} fields", shown(), ints.len());
            };
            assert!(allowed == 0 || allowed == 1, "{}: {ints:?}", shown());
            // RL.RELEASE and RL.EXTEND of a missing key know no limit: all zeros.
            let nothing = ints == [0, 0, 0, 0, 0];
            assert!(
                (limit >= 1 || nothing) && remaining >= 0,
                "{}: {ints:?}",
                shown()
            );
            assert!(retry >= -1 && reset >= 0, "{}: {ints:?}", shown());
            assert!(allowed == 0 || retry >= 0, "{}: {ints:?}", shown());
        }
        Ok(other) => panic!("{}: unexpected reply {other:?}", shown()),
    }
}

fn send(c: &mut Connection, words: &[Vec<u8>]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(std::str::from_utf8(&words[0]).unwrap_or("RL.PEEK"));
    for w in &words[1..] {
        cmd.arg(&w[..]);
    }
    cmd.query(c)
}

/// The calls of the corpus: every template with each position from the third word on
/// replaced by each nasty value, plus calls whose shape is wrong as a whole.
fn corpus(t: u64) -> Vec<Vec<Vec<u8>>> {
    let values = nasty_values();
    let mut calls = Vec::new();
    for template in TEMPLATES {
        let base: Vec<Vec<u8>> = template
            .iter()
            .map(|w| {
                if *w == "T" {
                    t.to_string().into_bytes()
                } else {
                    w.as_bytes().to_vec()
                }
            })
            .collect();
        for pos in 2..base.len() {
            for v in &values {
                let mut call = base.clone();
                call[pos] = v.clone();
                calls.push(call);
            }
        }
    }
    let words = |line: &str| -> Vec<Vec<u8>> {
        line.split(' ')
            .map(|w| {
                if w == "T" {
                    t.to_string()
                } else {
                    w.to_string()
                }
                .into_bytes()
            })
            .collect()
    };
    // Keys: empty, binary, huge; the same key under every algorithm in turn.
    for key in [&b""[..], &[0, 0xff, b'\n'][..], &b"k".repeat(1 << 20)[..]] {
        for line in [
            "RL.SLIDE K 1 1000",
            "RL.SUBWIN K 1 1000 10",
            "RL.PEEK K",
            "RL.REFUND K",
            "RL.CHARGE K COST 1",
        ] {
            let mut call = words(line);
            call[1] = key.to_vec();
            calls.push(call);
        }
    }
    for line in [
        // NOW at both ends of time, and time going backwards by years.
        "RL.SLIDE h:time 5 1000 NOW 0",
        "RL.SLIDE h:time 5 1000 NOW 253402300799999",
        "RL.SLIDE h:time 5 1000 NOW T",
        "RL.SUBWIN h:time2 5 1000 10 NOW 253402300799999",
        "RL.SUBWIN h:time2 5 1000 10 NOW 0",
        "RL.TOKEN h:time3 2147483647 1 NOW 253402300799999",
        "RL.LEAKY h:time4 1 2678400000 NOW 253402300799999",
        "RL.FIXED h:time5 4294967295 2678400000 ALIGN NOW 253402300799999",
        // Costs beyond every limit, and refunds beyond everything recorded.
        "RL.SLIDE h:cost 10 1000 COST 9223372036854775807 NOW T",
        "RL.SUBWIN h:cost2 2147483647 2678400000 1 COST 9223372036854775807 NOW T",
        "RL.TOKEN h:cost3 2147483647 1 BURST 2147483647 COST 2147483647 NOW T",
        "RL.TOKEN h:cost3 2147483647 1 BURST 2147483647 COST 2147483648 NOW T",
        "RL.LEAKY h:cost4 2147483647 2678400000 MAXDELAY 2678400000 BURST 2147483647 COST 9223372036854775807 NOW T",
        "RL.FIXED h:cost5 4294967295 1 COST 4294967295 NOW T",
        "RL.FIXED h:cost5 4294967295 1 COST 4294967295 NOW T",
        "RL.REFUND h:cost3 COST 9223372036854775807 NOW T",
        "RL.REFUND h:cost5 COST 9223372036854775807",
        // Charges beyond every counter, at both ends of time.
        "RL.CHARGE h:cost3 COST 9223372036854775807 NOW T",
        "RL.CHARGE h:time3 COST 9223372036854775807",
        "RL.CHARGE h:time3 COST 4611686018427387904 NOW 253402300799999",
        "RL.CHARGE h:time4 COST 9223372036854775807 NOW 253402300799999",
        "RL.CHARGE h:time4 COST 1 NOW 0",
        "RL.CHARGE h:cost2 COST 9223372036854775807",
        "RL.CHARGE h:cost5 COST 4294967295",
        "RL.CHARGE h:time COST 4294967295 NOW 253402300799999",
        "RL.CHARGE h:time2 COST 2147483647",
        // Every limiter at its widest shape.
        "RL.SLIDE h:wide 4294967295 2678400000 1 1 2 2 3 3 4 4 5 5 6 6 7 7",
        "RL.SUBWIN h:wide2 2147483647 4096 1 COST 2147483647",
        "RL.SUBWIN h:wide2 2147483647 2678400000 2678400000 COST 2147483647",
        "RL.SUBWIN h:wide2 1 2678400000 653906 COST 1",
        // Options repeated, out of place, without values, in odd case.
        "RL.SLIDE h:opt 10 1000 cost 1 Cost 1",
        "RL.SLIDE h:opt 10 1000 NOW",
        "RL.SLIDE h:opt NOW 1 10 1000",
        "RL.TOKEN h:opt2 10 1000 BURST 1 BURST 2",
        "RL.FIXED h:opt3 10 1000 ALIGN ALIGN",
        "RL.FIXED h:opt3 10 1000 align COST",
        "RL.LEAKY h:opt4 10 1000 MAXDELAY MAXDELAY 1",
        "RL.SUBWIN h:opt5 10 1000 100 100",
        "RL.PEEK h:slide NOW 1 NOW 2",
        "RL.REFUND h:slide COST 1 NOW",
        "RL.CHARGE h:slide COST",
        "RL.CHARGE h:slide NOW 1",
        "RL.CHARGE h:slide COST 1 COST 1",
        // Wrong arity everywhere.
        "RL.SLIDE",
        "RL.SUBWIN h:x",
        "RL.SUBWIN h:x 1",
        "RL.SUBWIN h:x 1 1000",
        "RL.TOKEN h:x 1",
        "RL.LEAKY h:x",
        "RL.FIXED h:x 1",
        "RL.PEEK",
        "RL.REFUND",
        "RL.CHARGE",
        "RL.CHARGE h:x",
        "RL.RESTORE h:x",
        "RL.RESTORE h:x a b",
        // RL.ALL: kinds against keys of other kinds, counts that do not match, NOW misplaced.
        "RL.ALL 2 h:slide h:token SLIDE 10 1000 TOKEN 10 1000 NOW T",
        "RL.ALL 2 h:slide h:token TOKEN 10 1000 SLIDE 10 1000",
        "RL.ALL 2 h:a h:a TOKEN 1 1 TOKEN 1 1",
        "RL.ALL 1 h:a NOW T TOKEN 1 1",
        "RL.ALL 1 h:a TOKEN 1 1 NOW T NOW T",
        "RL.ALL 1 h:a SLIDE COST 1",
        "RL.ALL 1 h:a SLIDE 1 1 2 2 3 3 4 4 5 5 6 6 7 7 8 8 9 9",
        "RL.ALL 1 h:a SUBWIN 1 2678400000 1",
        "RL.ALL 2 h:a",
        "RL.ALL -1 h:a TOKEN 1 1",
        "RL.ALL 9223372036854775807 h:a TOKEN 1 1",
        "RL.ALL 16 a b c d e f g h i j k l m n o p FIXED 1 1 FIXED 1 1 FIXED 1 1 FIXED 1 1 \
         FIXED 1 1 FIXED 1 1 FIXED 1 1 FIXED 1 1 FIXED 1 1 FIXED 1 1 FIXED 1 1 FIXED 1 1 \
         FIXED 1 1 FIXED 1 1 FIXED 1 1 SUBWIN 2147483647 2678400000 653906 COST 9223372036854775807",
        "RL.ACQUIRE h:x 1",
        "RL.RELEASE h:x",
        "RL.EXTEND h:x a",
        "RL.ACQUIRE h:lease2 1000000000 2678400000 COST 1000000000 NOW 253402300799999",
        "RL.ACQUIRE h:lease2 1000000000 2678400000 COST 1000000001 NOW T",
        "RL.EXTEND h:lease2 x 2678400000 NOW 253402300799999",
        "RL.REFUND h:lease2",
    ] {
        calls.push(words(line));
    }
    // Huge argument counts: many windows, many options.
    let mut many = words("RL.SLIDE h:many");
    many.extend((0..100_000).map(|i| (i % 1000 + 1).to_string().into_bytes()));
    calls.push(many);
    let mut opts = words("RL.SUBWIN h:many2 10 1000 100");
    for _ in 0..50_000 {
        opts.extend(words("COST 1"));
    }
    calls.push(opts);
    let mut all = words("RL.ALL 1 h:many3");
    for _ in 0..50_000 {
        all.extend(words("TOKEN 1 1"));
    }
    calls.push(all);
    calls
}

#[test]
fn a_corpus_of_malformed_calls_never_takes_the_server_down() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    let t = unix_ms();
    let calls = corpus(t);
    assert!(calls.len() >= 300, "only {} calls", calls.len());
    for (i, call) in calls.iter().enumerate() {
        let reply = send(&mut c, call);
        check_reply(call, &reply);
        if i % 100 == 0 {
            let pong: String = redis::cmd("PING").query(&mut c).expect("server up");
            assert_eq!(pong, "PONG");
        }
    }
    // Every key left behind is a sound limiter: it answers, persists and reloads the same.
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    for key in &keys {
        let peek = redis::cmd("RL.PEEK")
            .arg(&key[..])
            .arg("NOW")
            .arg(t)
            .query(&mut c);
        check_reply(&[b"RL.PEEK".to_vec(), key.clone()], &peek);
    }
    // Keys that live a while yet (a key expiring during the reload is dropped by it): each
    // reloads with the same value and expiry.
    let lasting = |c: &mut Connection| -> Vec<(Vec<u8>, Value, i64)> {
        let now = unix_ms() as i64;
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(c).unwrap();
        let mut v: Vec<(Vec<u8>, Value, i64)> = keys
            .into_iter()
            .filter_map(|k| {
                let at: i64 = redis::cmd("PEXPIRETIME").arg(&k[..]).query(c).ok()?;
                let digest: Value = redis::cmd("DEBUG")
                    .arg("DIGEST-VALUE")
                    .arg(&k[..])
                    .query(c)
                    .ok()?;
                (at == -1 || at > now + 10_000).then_some((k, digest, at))
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let before = lasting(&mut c);
    assert!(!before.is_empty());
    run(&mut c, &["DEBUG", "RELOAD"]).expect("DEBUG RELOAD");
    let after = lasting(&mut c);
    assert_eq!(after.len(), before.len());
    assert!(after == before, "a key changed through DEBUG RELOAD");
    eprintln!(
        "{} malformed calls, {} keys left, server up",
        calls.len(),
        keys.len()
    );
}
