//! Examples of docs/commands.md (once the README's) not run elsewhere: the lease table,
//! RL.ALL's tables, and the recipes' command lines, exactly as written there (times
//! relative to T0 through NOW).

use crate::common::{rl, run, server, Server};
use redis::{Connection, Value};
use rstest::rstest;

/// The examples of docs/commands.md start at this time (ids the server makes carry it).
const T0: u64 = 1_700_000_000_000;

/// A reply as docs/commands.md writes it: integers, quoted ids, nil, and nested arrays in
/// brackets.
fn shown(v: &Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Nil => "nil".into(),
        Value::BulkString(b) => format!("\"{}\"", String::from_utf8_lossy(b)),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Array(_) => format!("[{}]", shown(i)),
                other => shown(other),
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => format!("{other:?}"),
    }
}

fn at(c: &mut Connection, t: u64, line: &str) -> String {
    let line = format!("{line} NOW {}", T0 + t);
    let words: Vec<&str> = line.split_whitespace().collect();
    shown(&run(c, &words).unwrap_or_else(|e| panic!("{line}: {e}")))
}

#[rstest]
fn the_lease_table(server: Server) {
    let mut c = server.conn();
    let acquire = "RL.ACQUIRE llm:user7 2 1000";
    assert_eq!(at(&mut c, 0, acquire), "1 2 1 0 1000 \"1700000000000-0\"");
    let job = "RL.ACQUIRE llm:user7 2 1000 ID job-9";
    assert_eq!(at(&mut c, 100, job), "1 2 0 0 1000 \"job-9\"");
    assert_eq!(at(&mut c, 200, acquire), "0 2 0 800 900 nil");
    assert_eq!(at(&mut c, 600, job), "1 2 0 0 1000 \"job-9\"");
    assert_eq!(at(&mut c, 700, "RL.RELEASE llm:user7 job-9"), "1 2 1 0 300");
    assert_eq!(at(&mut c, 999, "RL.PEEK llm:user7"), "1 2 1 0 1");
}

#[rstest]
fn the_rl_all_table(server: Server) {
    let mut c = server.conn();
    let call = "RL.ALL 2 {u:42}:rpm {u:42}:tpm SLIDE 2 60000 TOKEN 10000 60000 COST 3000";
    assert_eq!(
        at(&mut c, 0, call),
        "1 2 1 0 60000 [1 2 1 0 60000] [1 10000 7000 0 18000]"
    );
    assert_eq!(
        at(&mut c, 1, call),
        "1 2 0 0 60000 [1 2 0 0 60000] [1 10000 4000 0 35999]"
    );
    assert_eq!(
        at(&mut c, 2, call),
        "0 2 0 59998 59999 [0 2 0 59998 59999] [1 10000 4000 0 35998]"
    );
    // The tokens were not taken.
    assert_eq!(
        rl(&mut c, &format!("RL.PEEK {{u:42}}:tpm NOW {}", T0 + 2))[2],
        4000
    );
}

#[rstest]
fn the_rate_plus_concurrency_table(server: Server) {
    let mut c = server.conn();
    let call = "RL.ALL 2 {u:42}:rpm {u:42}:jobs SLIDE 60 60000 ACQUIRE 2 30000";
    assert_eq!(
        at(&mut c, 0, call),
        "1 2 1 0 60000 [1 60 59 0 60000] [1 2 1 0 30000 \"1700000000000-0\"]"
    );
    assert_eq!(
        at(&mut c, 1, call),
        "1 2 0 0 60000 [1 60 58 0 60000] [1 2 0 0 30000 \"1700000000001-0\"]"
    );
    assert_eq!(
        at(&mut c, 2, call),
        "0 2 0 29998 59999 [1 60 58 0 59999] [0 2 0 29998 29999 nil]"
    );
    assert!(at(&mut c, 3, "RL.RELEASE {u:42}:jobs 1700000000000-0").starts_with("1 2 1 "));
}

#[rstest]
fn the_layered_limits_recipe(server: Server) {
    let mut c = server.conn();
    let layered = "RL.ALL 3 {user:42}:rpm {user:42}:tpm {user:42}:org \
                   SLIDE 60 60000 TOKEN 100000 60000 COST 4000 FIXED 10000 86400000 ALIGN";
    assert!(at(&mut c, 0, layered).starts_with("1 "));
    assert!(at(
        &mut c,
        0,
        "RL.ALL 2 user:42 org:7 SLIDE 60 60000 TOKEN 1000 60000"
    )
    .starts_with("1 "));
    assert!(at(&mut c, 0, "RL.REFUND {user:42}:tpm COST 1000").starts_with("1 100000 97000 "));
}

/// The provider-concurrency recipe: acquire with BLOCK, release in a finally.
#[rstest]
fn the_provider_concurrency_recipe(server: Server) {
    let mut c = server.conn();
    let lease_ms = (30 + 5) * 1000;
    let acquire = [
        "RL.ACQUIRE",
        "provider:acme",
        "5",
        &lease_ms.to_string(),
        "BLOCK",
        "10000",
    ]
    .map(str::to_owned);
    let words: Vec<&str> = acquire.iter().map(String::as_str).collect();
    let mut leases = Vec::new();
    for _ in 0..5 {
        let Value::Array(reply) = run(&mut c, &words).unwrap() else {
            panic!("not an array")
        };
        assert_eq!(reply[0], Value::Int(1));
        let Value::BulkString(id) = &reply[5] else {
            panic!("no lease id")
        };
        leases.push(String::from_utf8_lossy(id).into_owned());
    }
    // A sixth waits; the first release (the `finally`) lets it in at once.
    let waiter = {
        let port = server.conn();
        std::thread::spawn(move || {
            let mut c = port;
            let reply = run(
                &mut c,
                &[
                    "RL.ACQUIRE",
                    "provider:acme",
                    "5",
                    "35000",
                    "BLOCK",
                    "10000",
                ],
            )
            .unwrap();
            shown(&reply)
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    let released = run(&mut c, &["RL.RELEASE", "provider:acme", &leases[0]]).unwrap();
    assert!(shown(&released).starts_with("1 5 "));
    let granted = waiter.join().unwrap();
    assert!(granted.starts_with("1 5 0 0 "), "{granted}");
}
