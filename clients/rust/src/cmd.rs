//! Each command as a `redis::Cmd`, for pipelines and for clients this crate does not wrap.
//! The typed clients ([`RateLimit`](crate::RateLimit), [`AsyncRateLimit`](crate::AsyncRateLimit))
//! send these, and add the module check, the Lua fallback and the cluster routing.
//!
//! `COST` is left out when it is 1, the default of every command.

use redis::Cmd;

use crate::limit::{Limit, PolicyLimiter};
use crate::reply::LeaseId;

fn cost_arg(c: &mut Cmd, cost: u64) {
    if cost != 1 {
        c.arg("COST").arg(cost);
    }
}

/// `COMMAND INFO RL.SLIDE`: the module check (a nil entry means the module is missing).
pub fn module_check() -> Cmd {
    let mut c = redis::cmd("COMMAND");
    c.arg("INFO").arg("RL.SLIDE");
    c
}

/// The limiter's own command on `key` for `cost` units: `RL.SLIDE key 100 60000 [COST n]`,
/// `RL.ACQUIRE key limit lease_ms [ID id] [COST n]`, or
/// `CL.THROTTLE key max_burst count period [quantity]` (the cost is the quantity).
pub fn decide(key: &str, limit: &Limit, cost: u64) -> Cmd {
    let mut c = redis::cmd(limit.command());
    c.arg(key).arg(limit.words());
    if let Limit::Throttle { .. } = limit {
        c.arg(cost);
    } else {
        cost_arg(&mut c, cost);
    }
    c
}

/// How an RL.ACQUIRE call asks: `ID`, `COST`, `BLOCK`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcquireOptions {
    /// `ID`: an id of the caller's own; a retry with it renews the lease instead of taking a
    /// second slot.
    pub id: Option<LeaseId>,
    /// `COST` (default 1).
    pub cost: Option<u64>,
    /// `BLOCK timeout_ms`: wait up to this long for free units (0: without limit).
    pub block_ms: Option<u64>,
}

/// `RL.ACQUIRE key limit lease_ms [ID id] [COST n] [BLOCK ms]`.
pub fn acquire(key: &str, limit: u64, lease_ms: u64, opts: &AcquireOptions) -> Cmd {
    let mut c = redis::cmd("RL.ACQUIRE");
    c.arg(key).arg(limit).arg(lease_ms);
    if let Some(id) = &opts.id {
        c.arg("ID").arg(id);
    }
    if let Some(cost) = opts.cost {
        c.arg("COST").arg(cost);
    }
    if let Some(ms) = opts.block_ms {
        c.arg("BLOCK").arg(ms);
    }
    c
}

/// `RL.RELEASE key lease-id`.
pub fn release(key: &str, id: &LeaseId) -> Cmd {
    let mut c = redis::cmd("RL.RELEASE");
    c.arg(key).arg(id);
    c
}

/// `RL.EXTEND key lease-id lease_ms`.
pub fn extend(key: &str, id: &LeaseId, lease_ms: u64) -> Cmd {
    let mut c = redis::cmd("RL.EXTEND");
    c.arg(key).arg(id).arg(lease_ms);
    c
}

/// `RL.PEEK key [COST n]`: the state without `cost`, or what `cost` units would get now.
pub fn peek(key: &str, cost: Option<u64>) -> Cmd {
    let mut c = redis::cmd("RL.PEEK");
    c.arg(key);
    if let Some(n) = cost {
        c.arg("COST").arg(n);
    }
    c
}

/// `RL.REFUND key [COST n]`.
pub fn refund(key: &str, cost: u64) -> Cmd {
    let mut c = redis::cmd("RL.REFUND");
    c.arg(key);
    cost_arg(&mut c, cost);
    c
}

/// `RL.CHARGE key COST n`.
pub fn charge(key: &str, cost: u64) -> Cmd {
    let mut c = redis::cmd("RL.CHARGE");
    c.arg(key).arg("COST").arg(cost);
    c
}

/// One key of an RL.ALL call: its limiter and its cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllEntry {
    /// The key (in Redis Cluster, every key of a call in one slot: give them a hash tag).
    pub key: String,
    /// Its limiter.
    pub limit: Limit,
    /// Its cost (`THROTTLE`: the quantity).
    pub cost: u64,
}

impl AllEntry {
    /// `key` under `limit`, for `cost` units.
    pub fn new(key: impl Into<String>, limit: Limit, cost: u64) -> AllEntry {
        AllEntry {
            key: key.into(),
            limit,
            cost,
        }
    }
}

/// `RL.ALL numkeys key... KIND words [COST n]...`.
pub fn all(entries: &[AllEntry]) -> Cmd {
    let mut c = redis::cmd("RL.ALL");
    c.arg(entries.len());
    for e in entries {
        c.arg(&e.key);
    }
    for e in entries {
        c.arg(e.limit.keyword()).arg(e.limit.words());
        if let Limit::Throttle { .. } = e.limit {
            c.arg(e.cost);
        } else {
            cost_arg(&mut c, e.cost);
        }
    }
    c
}

/// `RL.POLICY SET name limiter...`.
pub fn policy_set(name: &str, limiters: &[PolicyLimiter]) -> Cmd {
    let mut c = redis::cmd("RL.POLICY");
    c.arg("SET").arg(name);
    for l in limiters {
        c.arg(l.words());
    }
    c
}

/// `RL.POLICY GET name`.
pub fn policy_get(name: &str) -> Cmd {
    let mut c = redis::cmd("RL.POLICY");
    c.arg("GET").arg(name);
    c
}

/// `RL.POLICY DEL name`.
pub fn policy_del(name: &str) -> Cmd {
    let mut c = redis::cmd("RL.POLICY");
    c.arg("DEL").arg(name);
    c
}

/// `RL.POLICY LIST cursor [COUNT n]`.
pub fn policy_list(cursor: &str, count: Option<u32>) -> Cmd {
    let mut c = redis::cmd("RL.POLICY");
    c.arg("LIST").arg(cursor);
    if let Some(n) = count {
        c.arg("COUNT").arg(n);
    }
    c
}

/// `RL.HIT policy subject [COST n]`.
pub fn hit(policy: &str, subject: &str, cost: u64) -> Cmd {
    let mut c = redis::cmd("RL.HIT");
    c.arg(policy).arg(subject);
    cost_arg(&mut c, cost);
    c
}

/// `RL.TOP [COUNT n] [POLICY name]`.
pub fn top(count: Option<u32>, policy: Option<&str>) -> Cmd {
    let mut c = redis::cmd("RL.TOP");
    if let Some(n) = count {
        c.arg("COUNT").arg(n);
    }
    if let Some(p) = policy {
        c.arg("POLICY").arg(p);
    }
    c
}

/// `CL.THROTTLE key max_burst count_per_period period_s [quantity]`.
pub fn throttle(
    key: &str,
    max_burst: u64,
    count_per_period: u64,
    period_s: u64,
    quantity: u64,
) -> Cmd {
    decide(
        key,
        &Limit::throttle(max_burst, count_per_period, period_s),
        quantity,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(c: &Cmd) -> String {
        c.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "<cursor>".into(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn words() {
        assert_eq!(
            text(&decide("k", &Limit::slide(3, 1000), 1)),
            "RL.SLIDE k 3 1000"
        );
        assert_eq!(
            text(&decide("k", &Limit::token(10, 1000).burst(20), 3)),
            "RL.TOKEN k 10 1000 BURST 20 COST 3"
        );
        assert_eq!(
            text(&throttle("u", 15, 30, 60, 1)),
            "CL.THROTTLE u 15 30 60 1"
        );
        let entries = [
            AllEntry::new("{u}:rpm", Limit::slide(60, 60_000), 1),
            AllEntry::new("{u}:tpm", Limit::token(100_000, 60_000), 4000),
        ];
        assert_eq!(
            text(&all(&entries)),
            "RL.ALL 2 {u}:rpm {u}:tpm SLIDE 60 60000 TOKEN 100000 60000 COST 4000"
        );
        let opts = AcquireOptions {
            id: Some("job-9".into()),
            block_ms: Some(100),
            ..Default::default()
        };
        assert_eq!(
            text(&acquire("p", 2, 1000, &opts)),
            "RL.ACQUIRE p 2 1000 ID job-9 BLOCK 100"
        );
        assert_eq!(text(&hit("api", "user:1", 30)), "RL.HIT api user:1 COST 30");
    }
}
