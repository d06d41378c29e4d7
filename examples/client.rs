//! redis-ratelimit from Rust with the `redis` crate: a typed reply, the HTTP headers, a limiter
//! that remembers refusals locally, and an HTTP middleware on std only. The recipe behind each
//! part is in docs/clients.md.
//!
//! ```sh
//! cargo run --release --example client -- serve 127.0.0.1:8080   # RL_URL, default redis://127.0.0.1:6379
//! curl -i http://127.0.0.1:8080/                                 # 200, then 429 after 5 in 10 s
//! cargo run --release --example client -- check                  # what `make test-examples` runs
//! ```
//!
//! `check` runs the examples' assertions against the servers named by `RL_URL` (standalone) and
//! `RL_CLUSTER` (`host:port,...`, a cluster with replicas), and fails on any mismatch.
//!
//! In Redis Cluster, `redis::cluster::ClusterConnection` routes a command it does not know by
//! its first argument, which is the key of every RL.* command: nothing to do. RL.PEEK reaches a
//! replica only when routed there by hand ([`peek_on_replica`]).
//!
//! For an application, the crate `redis-ratelimit-client` (`clients/rust`) packages all of this
//! (every command typed, sync and async, the module check, the Lua fallback, cluster routing for
//! RL.HIT and RL.ALL, and a tower layer for axum). This example stays standalone: the crate is on
//! `redis` 1.x, the module's tests on 0.27, so making it a dev-dependency here would build a second
//! `redis` crate into every `cargo test` of the module.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::cluster::{ClusterClient, ClusterConnection};
use redis::cluster_routing::{get_slot, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{ConnectionLike, FromRedisValue, RedisResult, Value};

/// `retry_after_ms` of a request whose cost is above what the limiter can ever hold.
pub const NEVER: i64 = -1;

/// Milliseconds to whole seconds, rounded up (a wait of 0.7 s is 1 s, never 0).
pub fn ceil_s(ms: i64) -> i64 {
    (ms.max(0) + 999) / 1000
}

/// One reply of RL.SLIDE, RL.TOKEN, RL.LEAKY, RL.FIXED, RL.SUBWIN, RL.PEEK, RL.REFUND or
/// RL.CHARGE: `[allowed, limit, remaining, retry_after_ms, reset_after_ms]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The deciding window's limit, or the bucket's size (RL.LEAKY: bookings from idle).
    pub limit: u64,
    /// Units available now, in the tightest window.
    pub remaining: u64,
    /// Refused: the exact wait, or [`NEVER`]. Allowed: 0, or RL.LEAKY's delay.
    pub retry_after_ms: i64,
    /// Until the limiter is empty again (the key's PTTL).
    pub reset_after_ms: u64,
}

impl Decision {
    /// Refused for good: the cost is above the limit, waiting does not help.
    pub fn never(&self) -> bool {
        !self.allowed && self.retry_after_ms == NEVER
    }

    /// How long an allowed call must wait before acting (RL.LEAKY; 0 for the others).
    pub fn delay_ms(&self) -> u64 {
        if self.allowed {
            self.retry_after_ms.max(0) as u64
        } else {
            0
        }
    }

    /// `Retry-After` in seconds, rounded up; `None` when allowed or never.
    pub fn retry_after_s(&self) -> Option<i64> {
        (!self.allowed && !self.never()).then(|| ceil_s(self.retry_after_ms).max(1))
    }
}

impl FromRedisValue for Decision {
    fn from_redis_value(v: &Value) -> RedisResult<Decision> {
        // RL.ACQUIRE (and its entry in RL.ALL) adds the lease id as a sixth field: read it
        // with `lease_id`.
        let five = match v {
            Value::Array(items) if items.len() == 6 => Value::Array(items[..5].to_vec()),
            other => other.clone(),
        };
        let (allowed, limit, remaining, retry_after_ms, reset_after_ms): (i64, u64, u64, i64, u64) =
            FromRedisValue::from_redis_value(&five)?;
        Ok(Decision {
            allowed: allowed == 1,
            limit,
            remaining,
            retry_after_ms,
            reset_after_ms,
        })
    }
}

/// The lease id of an RL.ACQUIRE reply, or of an ACQUIRE entry of RL.ALL: `None` when refused
/// or for the other commands.
pub fn lease_id(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::Array(items) if items.len() == 6 => match &items[5] {
            Value::BulkString(id) => Some(id.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// RL.ALL's reply: the decision of the whole call (the first five fields, readable as any
/// [`Decision`]), then each limiter's own five fields, in key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllDecision {
    pub overall: Decision,
    pub parts: Vec<Decision>,
}

impl FromRedisValue for AllDecision {
    fn from_redis_value(v: &Value) -> RedisResult<AllDecision> {
        let items = match v {
            Value::Array(items) if items.len() >= 5 => items,
            _ => return Err((redis::ErrorKind::TypeError, "not an RL.ALL reply").into()),
        };
        let overall = Decision::from_redis_value(&Value::Array(items[..5].to_vec()))?;
        let parts = items[5..]
            .iter()
            .map(Decision::from_redis_value)
            .collect::<RedisResult<Vec<_>>>()?;
        Ok(AllDecision { overall, parts })
    }
}

/// RL.HIT's reply: the whole call's decision, the limiter that refused (`None` when
/// allowed), then each limiter's own fields in the policy's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HitDecision {
    pub overall: Decision,
    pub refused_by: Option<String>,
    pub parts: Vec<Decision>,
}

impl FromRedisValue for HitDecision {
    fn from_redis_value(v: &Value) -> RedisResult<HitDecision> {
        let items = match v {
            Value::Array(items) if items.len() >= 7 => items,
            _ => return Err((redis::ErrorKind::TypeError, "not an RL.HIT reply").into()),
        };
        let overall = Decision::from_redis_value(&Value::Array(items[..5].to_vec()))?;
        let refused_by = Option::<String>::from_redis_value(&items[5])?;
        let parts = items[6..]
            .iter()
            .map(Decision::from_redis_value)
            .collect::<RedisResult<Vec<_>>>()?;
        Ok(HitDecision {
            overall,
            refused_by,
            parts,
        })
    }
}

/// RL.HIT: one decision under a policy the server keeps (`RL.POLICY SET`), on keys derived
/// from the subject. (redis-rs's cluster client routes a command it does not know by its
/// first argument, here the policy: in a cluster, route by the subject's slot yourself.)
pub fn hit(
    con: &mut impl ConnectionLike,
    policy: &str,
    subject: &str,
    cost: u64,
) -> RedisResult<HitDecision> {
    let mut cmd = redis::cmd("RL.HIT");
    cmd.arg(policy).arg(subject);
    if cost != 1 {
        cmd.arg("COST").arg(cost);
    }
    cmd.query(con)
}

/// A limiter's configuration: its command and the parameters after the key.
#[derive(Debug, Clone)]
pub struct Limit {
    pub command: String,
    pub params: Vec<String>,
    /// The policy's name in `RateLimit-Policy`.
    pub name: String,
}

impl Limit {
    pub fn new(command: &str, params: &[&str], name: &str) -> Limit {
        Limit {
            command: command.to_ascii_uppercase(),
            params: params.iter().map(|p| p.to_string()).collect(),
            name: name.to_string(),
        }
    }

    pub fn cmd(&self, key: &str, cost: u64) -> redis::Cmd {
        let mut c = redis::cmd(&self.command);
        c.arg(key).arg(&self.params);
        if cost != 1 {
            c.arg("COST").arg(cost);
        }
        c
    }

    /// The `(quota, window_ms)` pairs this call enforces, for `RateLimit-Policy`.
    pub fn windows(&self) -> Vec<(u64, u64)> {
        let nums: Vec<u64> = self.params.iter().map_while(|p| p.parse().ok()).collect();
        let pairs: Vec<(u64, u64)> = nums.chunks_exact(2).map(|p| (p[0], p[1])).collect();
        if self.command == "RL.SLIDE" {
            pairs
        } else {
            pairs.into_iter().take(1).collect()
        }
    }

    fn window_name(&self, window_ms: u64) -> String {
        if self.windows().len() == 1 {
            self.name.clone()
        } else {
            format!("{}-{window_ms}ms", self.name)
        }
    }
}

/// The response headers for one decision (docs/clients.md, "Headers").
pub fn headers(d: &Decision, limit: &Limit) -> Vec<(&'static str, String)> {
    let windows = limit.windows();
    // RL.SLIDE with several windows: the reply's limit is the deciding window's; ties go to the
    // longer window. RL.TOKEN/RL.LEAKY report a bucket size instead.
    let deciding = windows
        .iter()
        .filter(|w| w.0 == d.limit)
        .max_by_key(|w| w.1)
        .or(windows.first())
        .copied()
        .unwrap_or((d.limit, 0));
    let policy: Vec<String> = windows
        .iter()
        .map(|&(q, ms)| {
            let w = ceil_s(ms as i64);
            format!("\"{}\";q={q};w={w}", limit.window_name(ms))
        })
        .collect();
    let mut current = format!("\"{}\";r={}", limit.window_name(deciding.1), d.remaining);
    if !d.never() {
        current += &format!(";t={}", ceil_s(d.reset_after_ms as i64));
    }
    let mut out = vec![
        ("X-RateLimit-Limit", d.limit.to_string()),
        ("X-RateLimit-Remaining", d.remaining.to_string()),
        (
            "X-RateLimit-Reset",
            ceil_s(d.reset_after_ms as i64).to_string(),
        ),
        ("RateLimit-Policy", policy.join(", ")),
        ("RateLimit", current),
    ];
    if let Some(s) = d.retry_after_s() {
        out.push(("Retry-After", s.to_string()));
    }
    out
}

/// Refusals remembered per key until their `retry_after_ms` has passed, so that a refused caller
/// is refused again locally, without a round trip. Conservative: an RL.REFUND elsewhere may free
/// units earlier. Bounded: at most `max_keys` keys.
pub struct RefusalCache {
    entries: HashMap<String, (Instant, u64, Decision, Instant)>,
    max_keys: usize,
}

impl RefusalCache {
    pub fn new(max_keys: usize) -> RefusalCache {
        RefusalCache {
            entries: HashMap::new(),
            max_keys,
        }
    }

    pub fn check(&mut self, key: &str, cost: u64) -> Option<Decision> {
        let now = Instant::now();
        let &(deadline, refused_cost, d, stored) = self.entries.get(key)?;
        if now >= deadline {
            self.entries.remove(key);
            return None;
        }
        if cost < refused_cost {
            return None; // a smaller request may fit: ask Redis
        }
        let passed = now.duration_since(stored).as_millis() as i64;
        Some(Decision {
            retry_after_ms: (d.retry_after_ms - passed).max(1),
            reset_after_ms: (d.reset_after_ms as i64 - passed).max(0) as u64,
            ..d
        })
    }

    pub fn remember(&mut self, key: &str, cost: u64, d: &Decision) {
        if d.allowed || d.never() || d.retry_after_ms <= 0 {
            return;
        }
        let now = Instant::now();
        if self.entries.len() >= self.max_keys {
            self.entries.retain(|_, e| e.0 > now);
            if self.entries.len() >= self.max_keys {
                self.entries.clear(); // still full of live refusals: start over
            }
        }
        let deadline = now + Duration::from_millis(d.retry_after_ms as u64);
        self.entries
            .insert(key.to_string(), (deadline, cost, *d, now));
    }
}

/// A limiter: its configuration and, optionally, a local refusal cache.
pub struct Limiter {
    pub limit: Limit,
    pub cache: Option<Mutex<RefusalCache>>,
}

impl Limiter {
    pub fn hit(
        &self,
        con: &mut impl ConnectionLike,
        key: &str,
        cost: u64,
    ) -> RedisResult<Decision> {
        if let Some(cache) = &self.cache {
            if let Some(d) = lock(cache).check(key, cost) {
                return Ok(d);
            }
        }
        let d: Decision = self.limit.cmd(key, cost).query(con)?;
        if let Some(cache) = &self.cache {
            lock(cache).remember(key, cost, &d);
        }
        Ok(d)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// RL.PEEK on a replica of the key's slot. The cluster client keeps its own list of read-only
/// commands, without module commands: route it by hand. The client must be built with
/// `read_from_replicas()`, which sends READONLY to the replicas.
pub fn peek_on_replica(con: &mut ClusterConnection, key: &str) -> RedisResult<Option<Decision>> {
    let route = Route::new(get_slot(key.as_bytes()), SlotAddr::ReplicaRequired);
    let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
    let v = con.route_command(redis::cmd("RL.PEEK").arg(key), routing)?;
    FromRedisValue::from_redis_value(&v)
}

/// An HTTP response: status, headers, body.
pub type Response = (u16, Vec<(String, String)>, String);

/// The middleware: one limiter call per request, its headers on every response, 429 when
/// refused, RL.LEAKY's delay waited before the handler runs.
pub fn rate_limited(
    limiter: &Limiter,
    con: &mut impl ConnectionLike,
    key: &str,
    handler: impl FnOnce() -> Response,
) -> Response {
    let d = match limiter.hit(con, key, 1) {
        Ok(d) => d,
        // Redis unreachable or refusing writes: this example fails closed.
        Err(e) => return (503, vec![], format!("rate limiter unavailable: {e}\n")),
    };
    let hdrs: Vec<(String, String)> = headers(&d, &limiter.limit)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    if !d.allowed {
        let body = if d.never() {
            "request larger than the rate limit allows\n"
        } else {
            "rate limited\n"
        };
        return (429, hdrs, body.to_string());
    }
    thread::sleep(Duration::from_millis(d.delay_ms()));
    let (status, mut h, body) = handler();
    h.extend(hdrs);
    (status, h, body)
}

/// Reads one HTTP/1.x request head: (path, headers with lower-case names).
fn read_request(stream: &TcpStream) -> Option<(String, HashMap<String, String>)> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut hdrs = HashMap::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            hdrs.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    Some((path, hdrs))
}

fn write_response(mut stream: &TcpStream, (status, hdrs, body): Response) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        429 => "Too Many Requests",
        _ => "Service Unavailable",
    };
    let mut out = format!("HTTP/1.1 {status} {reason}\r\n");
    for (k, v) in &hdrs {
        out += &format!("{k}: {v}\r\n");
    }
    out += &format!(
        "Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(out.as_bytes())
}

/// Serves `listener` until `requests` have been answered (forever with `None`): one thread per
/// connection, each with its own Redis connection from `client`. The key is the `X-Client`
/// header, or the peer's address.
pub fn serve(
    listener: TcpListener,
    client: redis::Client,
    limiter: Arc<Limiter>,
    requests: Option<usize>,
) {
    let mut threads = Vec::new();
    for (n, stream) in listener.incoming().enumerate() {
        let Ok(stream) = stream else { continue };
        let (client, limiter) = (client.clone(), limiter.clone());
        threads.push(thread::spawn(move || {
            let Some((path, hdrs)) = read_request(&stream) else {
                return;
            };
            let key = match hdrs.get("x-client") {
                Some(c) => format!("http:{c}"),
                None => format!(
                    "http:{}",
                    stream
                        .peer_addr()
                        .map(|a| a.ip().to_string())
                        .unwrap_or_default()
                ),
            };
            let response = match client.get_connection() {
                Ok(mut con) => rate_limited(&limiter, &mut con, &key, || {
                    (200, vec![], format!("hello from {path}\n"))
                }),
                Err(e) => (503, vec![], format!("redis: {e}\n")),
            };
            let _ = write_response(&stream, response);
        }));
        if requests.is_some_and(|r| n + 1 >= r) {
            break;
        }
    }
    threads.into_iter().for_each(|t| {
        let _ = t.join();
    });
}

fn main() {
    let url = std::env::var("RL_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") => {
            let addr = args.get(1).map(String::as_str).unwrap_or("127.0.0.1:8080");
            let listener = TcpListener::bind(addr).expect("bind the HTTP address");
            let limiter = Arc::new(Limiter {
                limit: Limit::new("RL.SLIDE", &["5", "10000"], "demo"),
                cache: Some(Mutex::new(RefusalCache::new(100_000))),
            });
            println!("http://{addr}/ : 5 requests per 10 s per client, Redis at {url}");
            serve(
                listener,
                redis::Client::open(url).expect("RL_URL"),
                limiter,
                None,
            );
        }
        Some("check") => check::run(&url),
        _ => {
            eprintln!("usage: client serve [addr] | client check");
            std::process::exit(2);
        }
    }
}

/// The assertions `make test-examples` runs.
mod check {
    use super::*;
    use std::io::Read;

    fn info_count(con: &mut impl ConnectionLike, section: &str, field: &str) -> u64 {
        let text: String = redis::cmd("INFO").arg(section).query(con).expect("INFO");
        text.lines()
            .filter_map(|l| l.strip_prefix(field))
            .filter_map(|rest| rest.split([',', '\r']).next())
            .filter_map(|n| n.parse::<u64>().ok())
            .sum()
    }

    fn fresh(prefix: &str) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        format!("{prefix}:{}:{nanos}", std::process::id())
    }

    fn http_get(addr: std::net::SocketAddr, client: &str) -> (u16, String) {
        let mut s = TcpStream::connect(addr).expect("connect to the example server");
        write!(s, "GET / HTTP/1.1\r\nHost: x\r\nX-Client: {client}\r\n\r\n").expect("send");
        let mut text = String::new();
        s.read_to_string(&mut text).expect("read the response");
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        (status, text)
    }

    fn header<'a>(response: &'a str, name: &str) -> Option<&'a str> {
        response.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    pub fn run(url: &str) {
        let client = redis::Client::open(url).expect("RL_URL");
        let mut con = client.get_connection().expect("a connection to RL_URL");
        reply_and_headers(&mut con);
        flood(&client, &mut con);
        match std::env::var("RL_CLUSTER") {
            Ok(nodes) if !nodes.is_empty() => cluster(&nodes),
            _ => println!("rust: RL_CLUSTER not set, cluster checks skipped"),
        }
        println!("rust: all checks passed");
    }

    fn reply_and_headers(con: &mut redis::Connection) {
        let limit = Limit::new("RL.SLIDE", &["3", "1000"], "default");
        let lim = Limiter {
            limit: limit.clone(),
            cache: None,
        };
        let key = fresh("rs:slide");
        let got: Vec<Decision> = (0..4)
            .map(|_| lim.hit(con, &key, 1).expect("RL.SLIDE"))
            .collect();
        assert_eq!(
            got.iter().map(|d| d.remaining).collect::<Vec<_>>(),
            [2, 1, 0, 0]
        );
        let refused = got[3];
        assert!(!refused.allowed && refused.retry_after_ms > 0 && refused.retry_after_ms <= 1000);
        let h: HashMap<_, _> = headers(&refused, &limit).into_iter().collect();
        assert_eq!(h["X-RateLimit-Limit"], "3");
        assert_eq!(h["X-RateLimit-Remaining"], "0");
        assert_eq!(h["Retry-After"], "1", "rounded up, never down");
        assert_eq!(h["RateLimit-Policy"], "\"default\";q=3;w=1");
        assert_eq!(h["RateLimit"], "\"default\";r=0;t=1");

        let fixed = Limiter {
            limit: Limit::new("RL.FIXED", &["1", "1500"], "f"),
            cache: None,
        };
        let fk = fresh("rs:fixed");
        fixed.hit(con, &fk, 1).expect("RL.FIXED");
        let f = fixed.hit(con, &fk, 1).expect("RL.FIXED");
        assert!(f.retry_after_ms > 1000, "{f:?}");
        assert_eq!(f.retry_after_s(), Some(2));

        let big = Limit::new("RL.SLIDE", &["10", "1000"], "default");
        let never = Limiter {
            limit: big.clone(),
            cache: None,
        }
        .hit(con, &fresh("rs:big"), 11)
        .expect("RL.SLIDE COST 11");
        assert_eq!(
            never,
            Decision {
                allowed: false,
                limit: 10,
                remaining: 10,
                retry_after_ms: -1,
                reset_after_ms: 0
            }
        );
        let nh: HashMap<_, _> = headers(&never, &big).into_iter().collect();
        assert!(!nh.contains_key("Retry-After"));
        assert_eq!(nh["RateLimit"], "\"default\";r=10");

        let two = Limit::new("RL.SLIDE", &["2", "1000", "5", "60000"], "api");
        let first = Limiter {
            limit: two.clone(),
            cache: None,
        }
        .hit(con, &fresh("rs:two"), 1)
        .expect("RL.SLIDE, two windows");
        let th: HashMap<_, _> = headers(&first, &two).into_iter().collect();
        assert_eq!(
            th["RateLimit-Policy"],
            "\"api-1000ms\";q=2;w=1, \"api-60000ms\";q=5;w=60"
        );
        assert_eq!(th["RateLimit"], "\"api-1000ms\";r=1;t=60");

        let leaky = Limiter {
            limit: Limit::new("RL.LEAKY", &["4", "1000"], "l"),
            cache: None,
        };
        let lk = fresh("rs:leaky");
        let (a, b) = (
            leaky.hit(con, &lk, 1).expect("RL.LEAKY"),
            leaky.hit(con, &lk, 1).expect("RL.LEAKY"),
        );
        assert_eq!(a.delay_ms(), 0);
        assert!(
            b.allowed && b.delay_ms() > 0 && b.delay_ms() <= 250,
            "{b:?}"
        );
        assert_eq!(b.limit, 5);

        let tag = fresh("{rs:all}");
        let all: AllDecision = redis::cmd("RL.ALL")
            .arg(2)
            .arg(format!("{tag}:rpm"))
            .arg(format!("{tag}:tpm"))
            .arg(&["SLIDE", "2", "60000", "TOKEN", "10", "60000", "COST", "3"])
            .query(con)
            .expect("RL.ALL");
        assert_eq!(
            (
                all.overall.allowed,
                all.overall.limit,
                all.overall.remaining
            ),
            (true, 2, 1)
        );
        let parts: Vec<(u64, u64)> = all.parts.iter().map(|p| (p.limit, p.remaining)).collect();
        assert_eq!(parts, [(2, 1), (10, 7)]);
        // Rate and concurrency: an ACQUIRE entry carries its lease id.
        let raw: Value = redis::cmd("RL.ALL")
            .arg(2)
            .arg(format!("{tag}:rpm"))
            .arg(format!("{tag}:jobs"))
            .arg(&["SLIDE", "2", "60000", "ACQUIRE", "1", "30000"])
            .query(con)
            .expect("RL.ALL");
        let both = AllDecision::from_redis_value(&raw).expect("typed");
        assert!(both.overall.allowed);
        let Value::Array(items) = &raw else {
            panic!("{raw:?}")
        };
        let lease = lease_id(&items[6]).expect("a lease id");
        assert_eq!(lease_id(&items[5]), None);
        let released: Decision = redis::cmd("RL.RELEASE")
            .arg(format!("{tag}:jobs"))
            .arg(lease)
            .query(con)
            .expect("RL.RELEASE");
        assert!(released.allowed);

        // A policy kept in the server: one request and the tokens, or nothing.
        let policy = fresh("rs-pol");
        let _: () = redis::cmd("RL.POLICY")
            .arg(&["SET", &policy, "rpm", "SLIDE", "2", "60000", "COST", "1"])
            .arg(&["tpm", "TOKEN", "100", "60000"])
            .query(con)
            .expect("RL.POLICY SET");
        let d = hit(con, &policy, "user:1", 30).expect("RL.HIT");
        assert!(d.overall.allowed && d.refused_by.is_none(), "{d:?}");
        let parts: Vec<(u64, u64)> = d.parts.iter().map(|p| (p.limit, p.remaining)).collect();
        assert_eq!(parts, [(2, 1), (100, 70)]);
        let d = hit(con, &policy, "user:1", 80).expect("RL.HIT");
        assert_eq!(d.refused_by.as_deref(), Some("tpm"));
        let _: i64 = redis::cmd("RL.POLICY")
            .arg(&["DEL", &policy])
            .query(con)
            .expect("RL.POLICY DEL");

        let missing: Option<Decision> = redis::cmd("RL.PEEK")
            .arg(fresh("rs:none"))
            .query(con)
            .expect("RL.PEEK");
        assert_eq!(missing, None);
        println!("rust: typed reply and headers ok");
    }

    /// A flood through the HTTP middleware: 300 requests from one client on a limit of 10.
    fn flood(client: &redis::Client, con: &mut redis::Connection) {
        const FLOOD: usize = 300;
        let mut counts = Vec::new();
        for cached in [false, true] {
            let limiter = Arc::new(Limiter {
                limit: Limit::new("RL.SLIDE", &["10", "60000"], "ip"),
                cache: cached.then(|| Mutex::new(RefusalCache::new(1000))),
            });
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = listener.local_addr().expect("address");
            let (c, l) = (client.clone(), limiter.clone());
            let server = thread::spawn(move || serve(listener, c, l, Some(FLOOD)));
            let who = fresh("flood");
            let before = info_count(con, "commandstats", "cmdstat_RL.SLIDE:calls=");
            let mut statuses = HashMap::new();
            let mut last = String::new();
            for _ in 0..FLOOD {
                let (status, text) = http_get(addr, &who);
                *statuses.entry(status).or_insert(0) += 1;
                last = text;
            }
            server.join().expect("the example server");
            assert_eq!(statuses.get(&200), Some(&10), "{statuses:?}");
            assert_eq!(statuses.get(&429), Some(&(FLOOD - 10)), "{statuses:?}");
            assert_eq!(header(&last, "Retry-After"), Some("60"));
            assert_eq!(header(&last, "RateLimit"), Some("\"ip\";r=0;t=60"));
            counts.push(info_count(con, "commandstats", "cmdstat_RL.SLIDE:calls=") - before);
        }
        println!(
            "rust: http middleware, {FLOOD} requests on a limit of 10: {} reached Redis without the refusal cache, {} with it",
            counts[0], counts[1]
        );
        assert_eq!(counts, [FLOOD as u64, 11]);
    }

    fn cluster(nodes: &str) {
        let urls: Vec<String> = nodes.split(',').map(|n| format!("redis://{n}/")).collect();
        let mut directs: Vec<redis::Connection> = urls
            .iter()
            .map(|u| {
                redis::Client::open(u.as_str())
                    .and_then(|c| c.get_connection())
                    .expect("a node")
            })
            .collect();
        let moved = |directs: &mut Vec<redis::Connection>| -> u64 {
            directs
                .iter_mut()
                .map(|c| info_count(c, "errorstats", "errorstat_MOVED:count="))
                .sum()
        };
        let client = ClusterClient::builder(urls.clone())
            .read_from_replicas()
            .build()
            .expect("cluster client");
        let mut con = client.get_connection().expect("a cluster connection");
        let lim = Limiter {
            limit: Limit::new("RL.SLIDE", &["5", "60000"], "c"),
            cache: None,
        };
        let prefix = fresh("rs:cluster");
        let before = moved(&mut directs);
        for i in 0..300 {
            let d = lim
                .hit(&mut con, &format!("{prefix}:{i}"), 1)
                .expect("RL.SLIDE in the cluster");
            assert!(d.allowed && d.remaining == 4);
        }
        let after = moved(&mut directs);
        assert_eq!(after - before, 0, "MOVED replies while routing RL.SLIDE");

        // RL.PEEK on a replica, by hand; WAIT first so that the replica has the key.
        let key = format!("{prefix}:0");
        let route = Route::new(get_slot(key.as_bytes()), SlotAddr::Master);
        let wait = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
        con.route_command(redis::cmd("WAIT").arg(1).arg(5000), wait)
            .expect("WAIT");
        let peeks_before: Vec<u64> = directs
            .iter_mut()
            .map(|c| info_count(c, "commandstats", "cmdstat_RL.PEEK:calls="))
            .collect();
        let d = peek_on_replica(&mut con, &key)
            .expect("RL.PEEK")
            .expect("the replica has the key");
        assert_eq!((d.limit, d.remaining), (5, 4));
        let peeks_after: Vec<u64> = directs
            .iter_mut()
            .map(|c| info_count(c, "commandstats", "cmdstat_RL.PEEK:calls="))
            .collect();
        let served: Vec<usize> = (0..directs.len())
            .filter(|&i| peeks_after[i] > peeks_before[i])
            .collect();
        assert_eq!(served.len(), 1);
        let role: Vec<Value> = redis::cmd("ROLE")
            .query(&mut directs[served[0]])
            .expect("ROLE");
        assert_eq!(role.first(), Some(&Value::BulkString(b"slave".to_vec())));
        println!("rust: cluster, 300 keys routed with 0 MOVED; RL.PEEK answered by a replica");
    }
}
