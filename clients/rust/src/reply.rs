//! Typed replies: [`Decision`] for the five fields every limiter answers, and the shapes of
//! RL.ACQUIRE, RL.ALL, RL.HIT, RL.POLICY LIST, RL.TOP and CL.THROTTLE.
//!
//! Parsing is strict: a reply of another shape is an error, never a decision.

use std::fmt;

use redis::{FromRedisValue, ParsingError, RedisWrite, ToRedisArgs, ToSingleRedisArg, Value};

/// `retry_after_ms` of a request whose cost is above what the limiter can ever hold.
pub const NEVER: i64 = -1;

/// Milliseconds to whole seconds, rounded up (a wait of 0.7 s is 1 s, never 0).
pub fn ceil_s(ms: i64) -> i64 {
    (ms.max(0) + 999) / 1000
}

/// One reply of RL.SLIDE, RL.TOKEN, RL.LEAKY, RL.FIXED, RL.SUBWIN, RL.PEEK, RL.REFUND,
/// RL.CHARGE, RL.RELEASE or RL.EXTEND: `[allowed, limit, remaining, retry_after_ms,
/// reset_after_ms]` (docs/commands.md, "The reply").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Allowed, and recorded (unless the cost was 0).
    pub allowed: bool,
    /// The deciding window's limit, or the bucket's size (RL.LEAKY: bookings from idle).
    pub limit: u64,
    /// Units available now, in the tightest window, after this call.
    pub remaining: u64,
    /// Refused: the exact wait, or [`NEVER`]. Allowed: 0, or RL.LEAKY's delay.
    pub retry_after_ms: i64,
    /// Until the limiter is empty again (the key's PTTL).
    pub reset_after_ms: u64,
}

impl Decision {
    /// Refused for good: the cost is above what the limiter can ever hold, so waiting does
    /// not help and the caller must not retry.
    pub fn never(&self) -> bool {
        !self.allowed && self.retry_after_ms == NEVER
    }

    /// How long an allowed call must wait before acting (RL.LEAKY's booking; 0 for the other
    /// kinds, and 0 when refused).
    pub fn delay_ms(&self) -> u64 {
        if self.allowed {
            self.retry_after_ms.max(0) as u64
        } else {
            0
        }
    }

    /// `Retry-After` in whole seconds, rounded up and at least 1; `None` when allowed or
    /// [`never`](Self::never).
    pub fn retry_after_s(&self) -> Option<i64> {
        (!self.allowed && !self.never()).then(|| ceil_s(self.retry_after_ms).max(1))
    }

    fn from_fields(items: &[Value]) -> Result<Decision, ParsingError> {
        let int = |v: &Value| match v {
            Value::Int(n) => Ok(*n),
            other => Err(ParsingError::from(format!(
                "a limiter reply holds integers, not {other:?}"
            ))),
        };
        let allowed = int(&items[0])?;
        let (limit, remaining, retry, reset) = (
            int(&items[1])?,
            int(&items[2])?,
            int(&items[3])?,
            int(&items[4])?,
        );
        if !(allowed == 0 || allowed == 1) || limit < 0 || remaining < 0 || reset < 0 || retry < -1
        {
            return Err(format!("not a limiter reply: {items:?}").into());
        }
        Ok(Decision {
            allowed: allowed == 1,
            limit: limit as u64,
            remaining: remaining as u64,
            retry_after_ms: retry,
            reset_after_ms: reset as u64,
        })
    }
}

/// Five fields, or six with a lease id (RL.ACQUIRE's form): the decision and the id.
fn decision_and_lease(v: &Value) -> Result<(Decision, Option<LeaseId>), ParsingError> {
    match v {
        Value::Array(items) if items.len() == 5 => Ok((Decision::from_fields(items)?, None)),
        Value::Array(items) if items.len() == 6 => {
            let id = match &items[5] {
                Value::Nil => None,
                Value::BulkString(b) => Some(LeaseId(b.clone())),
                Value::SimpleString(s) => Some(LeaseId(s.clone().into_bytes())),
                other => return Err(format!("a lease id, not {other:?}").into()),
            };
            Ok((Decision::from_fields(&items[..5])?, id))
        }
        other => Err(format!(
            "a limiter reply is five integers (six with a lease id), not {other:?}"
        )
        .into()),
    }
}

impl FromRedisValue for Decision {
    /// Five integers, or RL.ACQUIRE's five and a lease id (the id is dropped: read a
    /// [`Lease`] to keep it). Nil is an error here: read `Option<Decision>` where a missing key
    /// answers nil (RL.PEEK, RL.REFUND, RL.CHARGE).
    fn from_redis_value(v: Value) -> Result<Decision, ParsingError> {
        decision_and_lease(&v).map(|(d, _)| d)
    }
}

/// A lease id: the client's `ID`, or one the server made (`<ms>-<seq>`). Any bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub Vec<u8>);

impl LeaseId {
    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl From<&str> for LeaseId {
    fn from(s: &str) -> LeaseId {
        LeaseId(s.as_bytes().to_vec())
    }
}

impl From<String> for LeaseId {
    fn from(s: String) -> LeaseId {
        LeaseId(s.into_bytes())
    }
}

impl ToRedisArgs for LeaseId {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        out.write_arg(&self.0)
    }
}

impl ToSingleRedisArg for LeaseId {}

/// RL.ACQUIRE's reply: the five fields and the lease id, `None` when refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The five fields.
    pub decision: Decision,
    /// The lease to give to RL.RELEASE / RL.EXTEND; `None` when refused.
    pub id: Option<LeaseId>,
}

impl FromRedisValue for Lease {
    fn from_redis_value(v: Value) -> Result<Lease, ParsingError> {
        match &v {
            Value::Array(items) if items.len() == 6 => {
                let (decision, id) = decision_and_lease(&v)?;
                Ok(Lease { decision, id })
            }
            other => Err(format!("RL.ACQUIRE answers six fields, not {other:?}").into()),
        }
    }
}

/// One limiter's entry in an RL.ALL or RL.HIT reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Its five fields: whether it would have allowed, and its state.
    pub decision: Decision,
    /// An `ACQUIRE` limiter's lease id (`None` when no lease was granted, and for the other
    /// kinds).
    pub lease_id: Option<LeaseId>,
}

fn parts(items: &[Value]) -> Result<Vec<Part>, ParsingError> {
    items
        .iter()
        .map(|v| decision_and_lease(v).map(|(decision, lease_id)| Part { decision, lease_id }))
        .collect()
}

/// RL.ALL's reply: the whole call's five fields, then each limiter's entry in key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllDecision {
    /// The call's decision (refused: the refusing limiter needing the longest wait; allowed:
    /// the limiter with the least remaining, and the longest delay).
    pub overall: Decision,
    /// Each limiter, in key order.
    pub parts: Vec<Part>,
}

impl FromRedisValue for AllDecision {
    fn from_redis_value(v: Value) -> Result<AllDecision, ParsingError> {
        match &v {
            Value::Array(items) if items.len() >= 6 => Ok(AllDecision {
                overall: Decision::from_fields(&items[..5])?,
                parts: parts(&items[5..])?,
            }),
            other => Err(format!("not an RL.ALL reply: {other:?}").into()),
        }
    }
}

/// RL.HIT's reply: the call's five fields, the limiter that refused, then each limiter's
/// entry in the policy's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HitDecision {
    /// The call's decision, as [`AllDecision::overall`].
    pub overall: Decision,
    /// The name of the limiter whose fields `overall` answers when refused; `None` when
    /// allowed.
    pub refused_by: Option<String>,
    /// Each limiter, in the policy's order (an `ACQUIRE` limiter's with its lease id).
    pub parts: Vec<Part>,
    /// Under a policy with shadow limiters (`shadowed`), the one that would have refused:
    /// `None` when none would. Log it while a new limit is tried.
    pub would_refuse: Option<String>,
    /// The policy has shadow limiters: its reply ends with `would_refuse`.
    pub shadowed: bool,
}

impl HitDecision {
    /// Refused by the policy's penalty box: banned for `retry_after_ms` more.
    pub fn banned(&self) -> bool {
        !self.overall.allowed && self.refused_by.as_deref() == Some("PENALTY")
    }
}

/// A limiter's name in an RL.HIT reply, or nil.
fn name_or_nil(v: &Value) -> Result<Option<String>, ParsingError> {
    match v {
        Value::Nil => Ok(None),
        Value::BulkString(b) => Ok(Some(String::from_utf8_lossy(b).into_owned())),
        Value::SimpleString(s) => Ok(Some(s.clone())),
        other => Err(format!("a limiter's name, not {other:?}").into()),
    }
}

impl FromRedisValue for HitDecision {
    fn from_redis_value(v: Value) -> Result<HitDecision, ParsingError> {
        match &v {
            Value::Array(items) if items.len() >= 7 => {
                let refused_by = name_or_nil(&items[5])?;
                // Under shadow limiters, a name or nil ends the reply (the entries are arrays).
                let mut entries = &items[6..];
                let mut would_refuse = None;
                let mut shadowed = false;
                if let [rest @ .., last] = entries {
                    if !matches!(last, Value::Array(_)) && !rest.is_empty() {
                        would_refuse = name_or_nil(last)?;
                        shadowed = true;
                        entries = rest;
                    }
                }
                Ok(HitDecision {
                    overall: Decision::from_fields(&items[..5])?,
                    refused_by,
                    parts: parts(entries)?,
                    would_refuse,
                    shadowed,
                })
            }
            other => Err(format!("not an RL.HIT reply: {other:?}").into()),
        }
    }
}

/// CL.THROTTLE's reply, in redis-cell's form (seconds; `limited` is the opposite of
/// `allowed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    /// Refused, and nothing taken.
    pub limited: bool,
    /// `max_burst + 1`, what the bucket holds.
    pub limit: u64,
    /// Whole units left in the bucket.
    pub remaining: u64,
    /// Refused: the wait in whole seconds, rounded up; -1 when allowed, and when it can never
    /// be allowed.
    pub retry_after_s: i64,
    /// Seconds until the bucket is full again.
    pub reset_after_s: i64,
}

impl FromRedisValue for Throttle {
    fn from_redis_value(v: Value) -> Result<Throttle, ParsingError> {
        let (limited, limit, remaining, retry_after_s, reset_after_s): (i64, u64, u64, i64, i64) =
            FromRedisValue::from_redis_value(v)?;
        Ok(Throttle {
            limited: limited == 1,
            limit,
            remaining,
            retry_after_s,
            reset_after_s,
        })
    }
}

/// One entry of RL.TOP: a subject (or key) and its refusals, between `count - error` and
/// `count`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopEntry {
    /// The subject (`POLICY name`) or the key, cut to 64 bytes by the server.
    pub name: String,
    /// At most this many refusals over the last one to two windows.
    pub count: u64,
    /// The count's overestimate at most.
    pub error: u64,
}

impl FromRedisValue for TopEntry {
    fn from_redis_value(v: Value) -> Result<TopEntry, ParsingError> {
        let (name, count, error): (Vec<u8>, u64, u64) = FromRedisValue::from_redis_value(v)?;
        Ok(TopEntry {
            name: String::from_utf8_lossy(&name).into_owned(),
            count,
            error,
        })
    }
}

/// One policy in an RL.POLICY LIST page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyInfo {
    /// The policy's name.
    pub name: String,
    /// 64-bit FNV-1a of the definition's words, in hex: equal across nodes for the same
    /// definition.
    pub digest: String,
    /// The definition's words, as `RL.POLICY GET` answers them.
    pub words: Vec<String>,
}

/// One page of RL.POLICY LIST: the cursor to ask for next (`"0"` when done) and the policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyPage {
    /// `"0"` when this was the last page.
    pub cursor: String,
    /// The policies of this page, by name.
    pub policies: Vec<PolicyInfo>,
}

impl FromRedisValue for PolicyPage {
    fn from_redis_value(v: Value) -> Result<PolicyPage, ParsingError> {
        let (cursor, entries): (String, Vec<(String, String, Vec<String>)>) =
            FromRedisValue::from_redis_value(v)?;
        Ok(PolicyPage {
            cursor,
            policies: entries
                .into_iter()
                .map(|(name, digest, words)| PolicyInfo {
                    name,
                    digest,
                    words,
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|&n| Value::Int(n)).collect())
    }

    #[test]
    fn derived_readings() {
        let refused = Decision::from_redis_value(ints(&[0, 3, 0, 700, 900])).unwrap();
        assert_eq!(refused.retry_after_s(), Some(1));
        assert_eq!(refused.delay_ms(), 0);
        let short = Decision {
            retry_after_ms: 1,
            ..refused
        };
        assert_eq!(short.retry_after_s(), Some(1), "never 0");
        let never = Decision::from_redis_value(ints(&[0, 10, 10, -1, 0])).unwrap();
        assert!(never.never());
        assert_eq!(never.retry_after_s(), None);
        let booked = Decision::from_redis_value(ints(&[1, 5, 3, 250, 500])).unwrap();
        assert_eq!((booked.delay_ms(), booked.retry_after_s()), (250, None));
    }

    #[test]
    fn strict_shapes() {
        assert!(Decision::from_redis_value(ints(&[1, 2, 3])).is_err());
        assert!(Decision::from_redis_value(ints(&[2, 2, 3, 0, 0])).is_err());
        assert!(Decision::from_redis_value(Value::Nil).is_err());
        assert_eq!(
            Option::<Decision>::from_redis_value(Value::Nil).unwrap(),
            None
        );
        assert!(Lease::from_redis_value(ints(&[1, 2, 1, 0, 1000])).is_err());
        let mut six = vec![Value::Int(1), Value::Int(2), Value::Int(1)];
        six.extend([
            Value::Int(0),
            Value::Int(1000),
            Value::BulkString(b"7-0".to_vec()),
        ]);
        let lease = Lease::from_redis_value(Value::Array(six)).unwrap();
        assert_eq!(lease.id, Some(LeaseId::from("7-0")));
    }
}
