//! What the policy tests share: lines run as words, and `RL.HIT`'s answer read.

use redis::{Connection, Value};

use super::{run, text, wait_until};

/// Runs a line split on spaces.
pub fn line(c: &mut Connection, line: &str) -> redis::RedisResult<Value> {
    let words: Vec<&str> = line.split_whitespace().collect();
    run(c, &words)
}

pub fn ok(c: &mut Connection, l: &str) {
    assert_eq!(
        line(c, l).unwrap_or_else(|e| panic!("{l}: {e}")),
        Value::Okay,
        "{l}"
    );
}

/// An `RL.HIT` answer: the five fields, the refusing limiter, each limiter's fields, and,
/// under a policy with shadow limiters, the one that would have refused (`Some(None)`:
/// none would).
#[derive(Debug, PartialEq)]
pub struct Hit {
    pub fields: [i64; 5],
    pub refused_by: Option<String>,
    pub each: Vec<Vec<i64>>,
    pub would_refuse: Option<Option<String>>,
}

pub fn hit(c: &mut Connection, l: &str) -> Hit {
    let Ok(Value::Array(items)) = line(c, l) else {
        panic!("{l}: {:?}", line(c, l));
    };
    let int = |v: &Value| match v {
        Value::Int(i) => *i,
        other => panic!("{l}: {other:?}"),
    };
    let fields: Vec<i64> = items[..5].iter().map(int).collect();
    let name = |v: &Value| match v {
        Value::Nil => None,
        Value::BulkString(b) => Some(String::from_utf8(b.clone()).unwrap()),
        other => panic!("{l}: {other:?}"),
    };
    let refused_by = name(&items[5]);
    // Each limiter's five fields (an ACQUIRE limiter's lease id after them is left out),
    // then, with shadow limiters, a name or nil (not an array).
    let mut rest = &items[6..];
    let mut would_refuse = None;
    if let Some((last @ (Value::Nil | Value::BulkString(_)), before)) = rest.split_last() {
        would_refuse = Some(name(last));
        rest = before;
    }
    let each = rest
        .iter()
        .map(|v| match v {
            Value::Array(f) => f[..5].iter().map(int).collect(),
            other => panic!("{l}: {other:?}"),
        })
        .collect();
    Hit {
        fields: fields.try_into().unwrap(),
        refused_by,
        each,
        would_refuse,
    }
}

/// The `policy_<name>` line of `INFO ratelimit`.
pub fn info_line(c: &mut Connection, name: &str) -> String {
    let info = text(c, &["INFO", "ratelimit"]);
    let prefix = format!("ratelimit_policy_{name}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
        .unwrap_or_else(|| panic!("no {prefix} in {info}"))
}

/// Rewrites the AOF (`BGREWRITEAOF`), waiting for any rewrite under way first and for this
/// one to end.
pub fn rewrite_aof(c: &mut Connection) {
    let rewriting = |c: &mut Connection| {
        let info = text(c, &["INFO", "persistence"]);
        !(info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0"))
    };
    wait_until("no AOF rewrite", 30, || !rewriting(c));
    line(c, "BGREWRITEAOF").unwrap();
    wait_until("the AOF rewrite", 30, || !rewriting(c));
}

/// A thread that sets the lines `a` then `b` (each an `RL.POLICY SET`) again and again on the
/// server at `port` for `ms` milliseconds: joined, how many it set.
pub fn alternating(
    port: u16,
    a: &'static str,
    b: &'static str,
    ms: u64,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let mut c = client.get_connection().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(ms);
        let mut n = 0;
        while std::time::Instant::now() < deadline {
            ok(&mut c, a);
            ok(&mut c, b);
            n += 2;
        }
        n
    })
}
