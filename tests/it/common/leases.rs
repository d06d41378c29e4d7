//! RL.ACQUIRE replies read into their fields, and the leases an AOF recorded, for
//! tests/it/leases.rs and tests/it/leases_block.rs.

use std::collections::HashMap;

use redis::{Connection, Value};

use super::{aof_commands, run, Server};

/// `[allowed, limit, remaining, retry_after_ms, reset_after_ms]` and the lease id.
pub type Lease = ([i64; 5], Option<String>);

pub fn lease_reply(v: Value, what: &str) -> Lease {
    let Value::Array(fields) = v else {
        panic!("{what}: {v:?}");
    };
    assert_eq!(fields.len(), 6, "{what}: {fields:?}");
    let ints: Vec<i64> = fields[..5]
        .iter()
        .map(|f| redis::from_redis_value(f).unwrap_or_else(|e| panic!("{what}: {e}")))
        .collect();
    let id = match &fields[5] {
        Value::Nil => None,
        other => Some(redis::from_redis_value(other).unwrap_or_else(|e| panic!("{what}: {e}"))),
    };
    (ints.try_into().unwrap(), id)
}

/// `RL.ACQUIRE` given as one line of words.
pub fn acquire(c: &mut Connection, line: &str) -> Lease {
    let words: Vec<&str> = std::iter::once("RL.ACQUIRE")
        .chain(line.split_whitespace())
        .collect();
    lease_reply(
        run(c, &words).unwrap_or_else(|e| panic!("{line}: {e}")),
        line,
    )
}

/// Every lease granted as recorded in the AOF: `(id, start, end)` intervals.
pub fn aof_intervals(server: &Server, key: &str) -> Vec<(String, u64, u64)> {
    let mut open: HashMap<String, (u64, u64)> = HashMap::new();
    let mut done = Vec::new();
    // Effects read as the command lines they stand for: `RL.X key words... NOW t`.
    for e in aof_commands(server) {
        if e.len() < 2 || e[1] != key || !e[0].starts_with("RL.") {
            continue;
        }
        let now: u64 = e[e.len() - 1].parse().unwrap();
        match e[0].as_str() {
            "RL.ACQUIRE" => {
                let lease: u64 = e[3].parse().unwrap();
                let id = e[5].to_string();
                if let Some((start, _)) = open.remove(&id) {
                    done.push((id.clone(), start, now));
                }
                open.insert(id, (now, now + lease));
            }
            "RL.RELEASE" => {
                if let Some((start, end)) = open.remove(&e[2]) {
                    done.push((e[2].to_string(), start, end.min(now)));
                }
            }
            other => panic!("unexpected effect {other}"),
        }
    }
    done.extend(open.into_iter().map(|(id, (s, e))| (id, s, e)));
    done
}

/// The most leases held at once over `intervals`.
pub fn most_at_once(intervals: &[(String, u64, u64)]) -> usize {
    let mut events: Vec<(u64, i32)> = Vec::new();
    for (_, s, e) in intervals {
        events.push((*s, 1));
        events.push((*e, -1));
    }
    // A lease that ends at t is not held at t: ends before starts at equal times.
    events.sort();
    let (mut held, mut most) = (0i32, 0i32);
    for (_, d) in events {
        held += d;
        most = most.max(held);
    }
    most as usize
}
