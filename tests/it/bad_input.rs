//! Bad input gets an error that names the argument, leaves the key untouched and never
//! takes the server down.

use crate::common::{digest, rl, run, unix_ms, Server};
use rstest::rstest;

const LIMIT: &str = "ERR limit must be an integer from 1 to 4294967295";
const WINDOW: &str = "ERR window_ms must be a duration from 1 to 2678400000 ms: an integer of ms, or with a unit (250ms, 60s, 5m, 1h, 1d)";
const COST: &str = "ERR COST must be an integer from 0 to 9223372036854775807";
const NOW: &str = "ERR NOW must be an integer from 0 to 253402300799999";
const ARITY: &str = "ERR wrong number of arguments";
const RATE_LIMIT: &str = "ERR limit must be an integer from 1 to 2147483647";
const BURST: &str = "ERR BURST must be an integer from 1 to 2147483647";
const MAXDELAY: &str = "ERR MAXDELAY must be a duration from 0 to 2678400000 ms: an integer of ms, or with a unit (250ms, 60s, 5m, 1h, 1d)";

#[rstest]
#[case(&["RL.SLIDE"], ARITY)]
#[case(&["RL.SLIDE", "bad"], ARITY)]
#[case(&["RL.SLIDE", "bad", "10"], ARITY)]
#[case(&["RL.SLIDE", "bad", "10", "1000", "5"], ARITY)]
#[case(&["RL.SLIDE", "bad", "abc", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "0", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "-5", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "1.5", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", " 10", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "10 ", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "+10", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "0x10", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "1e3", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "007", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "4294967296", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "9223372036854775808", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "18446744073709551616", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "１０", "1000"], LIMIT)]
#[case(&["RL.SLIDE", "bad", "10", "0"], WINDOW)]
#[case(&["RL.SLIDE", "bad", "10", "-1"], WINDOW)]
#[case(&["RL.SLIDE", "bad", "10", "2678400001"], WINDOW)]
#[case(&["RL.SLIDE", "bad", "10", "1000", "COST"], "ERR option COST needs a value")]
#[case(&["RL.SLIDE", "bad", "10", "1000", "COST", "-1"], COST)]
#[case(&["RL.SLIDE", "bad", "10", "1000", "COST", "x"], COST)]
#[case(&["RL.SLIDE", "bad", "10", "1000", "COST", "9223372036854775808"], COST)]
#[case(&["RL.SLIDE", "bad", "10", "1000", "COST", "1", "cost", "1"], "ERR option COST given more than once")]
#[case(&["RL.SLIDE", "bad", "10", "1000", "NOW"], "ERR option NOW needs a value")]
#[case(&["RL.SLIDE", "bad", "10", "1000", "NOW", "-1"], NOW)]
#[case(&["RL.SLIDE", "bad", "10", "1000", "NOW", "253402300800000"], NOW)]
#[case(&["RL.SLIDE", "bad", "10", "1000", "NOW", "1", "NOW", "2"], "ERR option NOW given more than once")]
#[case(&["RL.SLIDE", "bad", "10", "1000", "FOO", "1"], "ERR unknown option 'FOO'")]
#[case(&["RL.SLIDE", "bad", "10", "1000", "COST", "1", "10", "1000"], "ERR unknown option '10'")]
#[case(&["RL.SLIDE", "bad", "1", "1", "2", "2", "3", "3", "4", "4", "5", "5", "6", "6", "7", "7", "8", "8", "9", "9"],
       "ERR at most 8 limit/window_ms pairs in one call")]
#[case(&["RL.TOKEN", "bad"], ARITY)]
#[case(&["RL.TOKEN", "bad", "10"], ARITY)]
#[case(&["RL.TOKEN", "bad", "0", "1000"], RATE_LIMIT)]
#[case(&["RL.TOKEN", "bad", "2147483648", "1000"], RATE_LIMIT)]
#[case(&["RL.TOKEN", "bad", "10", "0"], WINDOW)]
#[case(&["RL.TOKEN", "bad", "10", "1000", "BURST", "0"], BURST)]
#[case(&["RL.TOKEN", "bad", "10", "1000", "BURST", "2147483648"], BURST)]
#[case(&["RL.TOKEN", "bad", "10", "1000", "BURST", "1", "BURST", "1"], "ERR option BURST given more than once")]
#[case(&["RL.TOKEN", "bad", "10", "1000", "MAXDELAY", "5"], "ERR unknown option 'MAXDELAY'")]
#[case(&["RL.TOKEN", "bad", "10", "1000", "COST"], "ERR option COST needs a value")]
#[case(&["RL.TOKEN", "bad", "10", "1000", "10", "1000"], "ERR unknown option '10'")]
#[case(&["RL.LEAKY", "bad", "10"], ARITY)]
#[case(&["RL.LEAKY", "bad", "x", "1000"], RATE_LIMIT)]
#[case(&["RL.LEAKY", "bad", "10", "1000", "MAXDELAY", "-1"], MAXDELAY)]
#[case(&["RL.LEAKY", "bad", "10", "1000", "MAXDELAY", "2678400001"], MAXDELAY)]
#[case(&["RL.LEAKY", "bad", "10", "1000", "MAXDELAY"], "ERR option MAXDELAY needs a value")]
#[case(&["RL.LEAKY", "bad", "10", "1000", "NOW", "x"], NOW)]
#[case(&["RL.LEAKY", "bad", "10", "1000", "COST", "1", "cost", "2"], "ERR option COST given more than once")]
#[case(&["RL.FIXED", "bad", "10"], ARITY)]
#[case(&["RL.FIXED", "bad", "0", "1000"], LIMIT)]
#[case(&["RL.FIXED", "bad", "4294967296", "1000"], LIMIT)]
#[case(&["RL.FIXED", "bad", "10", "2678400001"], WINDOW)]
#[case(&["RL.FIXED", "bad", "10", "1000", "ALIGN", "1"], "ERR unknown option '1'")]
#[case(&["RL.FIXED", "bad", "10", "1000", "ALIGN", "align"], "ERR option ALIGN given more than once")]
#[case(&["RL.FIXED", "bad", "10", "1000", "BURST", "1"], "ERR unknown option 'BURST'")]
#[case(&["RL.SUBWIN", "bad", "10", "1000"], ARITY)]
#[case(&["RL.SUBWIN", "bad", "0", "1000", "100"], RATE_LIMIT)]
#[case(&["RL.SUBWIN", "bad", "2147483648", "1000", "100"], RATE_LIMIT)]
#[case(&["RL.SUBWIN", "bad", "10", "2678400001", "100"], WINDOW)]
#[case(&["RL.SUBWIN", "bad", "10", "1000", "0"], "ERR resolution_ms must be a duration from 1 to 1000 ms: an integer of ms, or with a unit (250ms, 60s, 5m, 1h, 1d)")]
#[case(&["RL.SUBWIN", "bad", "10", "1000", "1001"], "ERR resolution_ms must be a duration from 1 to 1000 ms: an integer of ms, or with a unit (250ms, 60s, 5m, 1h, 1d)")]
#[case(&["RL.SLIDE", "bad", "10", "60sec"], WINDOW)]
#[case(&["RL.SLIDE", "bad", "10", "32d"], WINDOW)]
#[case(&["RL.SUBWIN", "bad", "10", "1000", "300"], "ERR window_ms must be a multiple of resolution_ms")]
#[case(&["RL.SUBWIN", "bad", "10", "8194", "2"], "ERR window_ms / resolution_ms must be at most 4096 sub-intervals")]
#[case(&["RL.SUBWIN", "bad", "10", "1000", "100", "ALIGN"], "ERR unknown option 'ALIGN'")]
#[case(&["RL.SUBWIN", "bad", "10", "1000", "100", "COST"], "ERR option COST needs a value")]
#[case(&["RL.SUBWIN", "bad", "10", "1000", "100", "NOW", "1", "NOW", "1"], "ERR option NOW given more than once")]
#[case(&["RL.SUBWIN", "bad", "10", "60000", "1000"], "WRONGTYPE key holds a RL.SLIDE limiter, not RL.SUBWIN")]
#[case(&["RL.PEEK"], ARITY)]
#[case(&["RL.PEEK", "bad", "BURST", "1"], "ERR unknown option 'BURST'")]
#[case(&["RL.PEEK", "bad", "NOW"], "ERR option NOW needs a value")]
#[case(&["RL.PEEK", "bad", "NOW", "soon"], NOW)]
#[case(&["RL.REFUND"], ARITY)]
#[case(&["RL.REFUND", "bad", "COST", "-1"], COST)]
#[case(&["RL.REFUND", "bad", "COST", "1", "COST", "1"], "ERR option COST given more than once")]
#[case(&["RL.REFUND", "bad", "BURST", "1"], "ERR unknown option 'BURST'")]
#[case(&["RL.RESTORE", "bad"], ARITY)]
#[case(&["RL.RESTORE", "bad", "payload", "extra"], ARITY)]
#[case(&["RL.RESTORE", "bad", "garbage"], "ERR invalid limiter payload")]
#[case(&["RL.RESTORE", "bad", ""], "ERR invalid limiter payload")]
fn bad_input_is_refused_and_changes_nothing(#[case] words: &[&str], #[case] want: &str) {
    let server = Server::start(&[]);
    let mut c = server.conn();
    rl(&mut c, &format!("RL.SLIDE bad 10 60000 NOW {}", unix_ms()));
    let before = digest(&mut c, "bad");
    let ttl_before: i64 = redis::cmd("PEXPIRETIME").arg("bad").query(&mut c).unwrap();
    let got = match run(&mut c, words) {
        Ok(v) => panic!("{words:?} answered {v:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
    };
    assert!(
        got.starts_with(want),
        "{words:?}: got {got:?}, want {want:?}"
    );
    assert_eq!(digest(&mut c, "bad"), before, "{words:?} changed the key");
    let ttl_after: i64 = redis::cmd("PEXPIRETIME").arg("bad").query(&mut c).unwrap();
    assert_eq!(ttl_after, ttl_before);
    assert_eq!(redis::cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
}

#[rstest]
fn huge_argument_counts_are_refused() {
    let server = Server::start(&[]);
    let mut c = server.conn();
    let mut cmd = redis::cmd("RL.SLIDE");
    cmd.arg("huge");
    for _ in 0..50_000 {
        cmd.arg(1).arg(1000);
    }
    let e = cmd.query::<redis::Value>(&mut c).unwrap_err();
    assert_eq!(e.code(), Some("ERR"));
    assert_eq!(
        run(&mut c, &["EXISTS", "huge"]).unwrap(),
        redis::Value::Int(0)
    );
}
