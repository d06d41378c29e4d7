//! A tower [`Layer`] for axum (feature `axum`): each request is decided by one command in
//! Redis, so every process using the same Redis shares the limit.
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use axum::{routing::get, Router};
//! use redis_ratelimit_client::{layer::RateLimitLayer, AsyncRateLimit, Limit};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let con = redis::Client::open("redis://127.0.0.1/")?.get_connection_manager().await?;
//! let layer = RateLimitLayer::new(AsyncRateLimit::new(con), Limit::slide(100, 60_000)).name("api");
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(layer);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! // The default key is the peer's IP, which axum hands over as ConnectInfo:
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! What a request gets:
//! - allowed: the handler's response, with `RateLimit-Policy`, `RateLimit` and the
//!   `X-RateLimit-*` trio (an RL.LEAKY booking is waited before the handler runs);
//! - refused: `429 Too Many Requests` with those headers and `Retry-After` (none when the
//!   request can never fit: the body says so);
//! - Redis unreachable or answering an error: the handler's response without headers
//!   ([`FailMode::Open`], the default), or `503 Service Unavailable` ([`FailMode::Closed`]);
//! - no key: `500` when the key is the peer IP and the app was not served with
//!   `into_make_service_with_connect_info::<SocketAddr>()`, `400` when a header or the
//!   closure gives none.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{HeaderName, Request, Response, StatusCode};
use redis::aio::ConnectionLike;
use tower_layer::Layer;
use tower_service::Service;

use crate::headers::{headers, insert_headers, multi_headers, Header, DEFAULT_NAME};
use crate::limit::{parse_policy, Limit, PolicyLimiter};
use crate::reply::{Decision, Part};
use crate::AsyncRateLimit;

/// What happens to a request when Redis cannot decide (unreachable, timing out, answering an
/// error such as a missing module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailMode {
    /// Let the request through, without rate-limit headers: an outage of Redis does not take
    /// the service down, and nothing is limited meanwhile.
    #[default]
    Open,
    /// Answer `503 Service Unavailable`: nothing passes unlimited, and nothing passes at all
    /// while Redis is away.
    Closed,
}

/// A closure that reads a request's key.
pub type KeyFn = Arc<dyn Fn(&http::request::Parts) -> Option<String> + Send + Sync>;

/// Where a request's key comes from.
#[derive(Clone)]
pub enum KeyExtractor {
    /// The peer's IP address, from axum's `ConnectInfo<SocketAddr>` (serve the app with
    /// `into_make_service_with_connect_info::<SocketAddr>()`). Behind a proxy every request
    /// has the proxy's address: use a header the proxy sets instead.
    PeerIp,
    /// A request header's value (an API key, or `X-Forwarded-For` as your proxy sets it).
    Header(HeaderName),
    /// Your own: from the request's method, URI, headers and extensions.
    Func(KeyFn),
}

#[derive(Clone)]
enum Target {
    Limit { limit: Limit, name: String },
    Policy { name: String },
}

/// Refusals remembered per key until their `retry_after_ms` has passed, answered 429 again
/// without a round trip (docs/clients.md, "The local refusal cache"). Conservative: an
/// RL.REFUND elsewhere may free units earlier. Bounded.
struct RefusalCache {
    entries: HashMap<String, (Instant, Instant, Decision, Vec<Part>)>,
    max_keys: usize,
}

impl RefusalCache {
    fn check(&mut self, key: &str) -> Option<(Decision, Vec<Part>)> {
        let now = Instant::now();
        let (deadline, stored, d, parts) = self.entries.get(key)?;
        if now >= *deadline {
            self.entries.remove(key);
            return None;
        }
        let passed = now.duration_since(*stored).as_millis() as i64;
        let age = |d: &Decision| Decision {
            retry_after_ms: if d.allowed || d.never() {
                d.retry_after_ms
            } else {
                (d.retry_after_ms - passed).max(1)
            },
            reset_after_ms: (d.reset_after_ms as i64 - passed).max(0) as u64,
            ..*d
        };
        let parts = parts
            .iter()
            .map(|p| Part {
                decision: age(&p.decision),
                lease_id: None,
            })
            .collect();
        Some((age(d), parts))
    }

    fn remember(&mut self, key: &str, d: &Decision, parts: &[Part]) {
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
            .insert(key.to_string(), (deadline, now, *d, parts.to_vec()));
    }
}

struct Shared<C> {
    rl: AsyncRateLimit<C>,
    target: Target,
    key: KeyExtractor,
    prefix: String,
    fail: FailMode,
    cache: Option<Mutex<RefusalCache>>,
    policy_refresh: Duration,
    policy: Mutex<Option<(Instant, Arc<Vec<PolicyLimiter>>)>>,
}

impl<C: Clone> Clone for Shared<C> {
    /// A copy of the configuration, with empty caches (the builder's copy-on-write).
    fn clone(&self) -> Self {
        Shared {
            rl: self.rl.clone(),
            target: self.target.clone(),
            key: self.key.clone(),
            prefix: self.prefix.clone(),
            fail: self.fail,
            cache: self.cache.as_ref().map(|c| {
                Mutex::new(RefusalCache {
                    entries: HashMap::new(),
                    max_keys: lock(c).max_keys,
                })
            }),
            policy_refresh: self.policy_refresh,
            policy: Mutex::new(None),
        }
    }
}

/// The layer: configure it once, with its limiter, and add it to a `Router` (`.layer(...)`,
/// or `.route_layer(...)` to limit matched routes only). Clones share everything, including
/// the refusal cache.
pub struct RateLimitLayer<C> {
    shared: Arc<Shared<C>>,
}

impl<C> Clone for RateLimitLayer<C> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: self.shared.clone(),
        }
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RateLimitLayer<C> {
    /// Requests limited by `limit`, on the key `rl:http:<key>` (see [`key_prefix`](Self::key_prefix)).
    /// Its `RateLimit-Policy` name is `"default"` (see [`name`](Self::name)).
    pub fn new(rl: AsyncRateLimit<C>, limit: Limit) -> RateLimitLayer<C> {
        Self::with_target(
            rl,
            Target::Limit {
                limit,
                name: DEFAULT_NAME.to_string(),
            },
            "rl:http:",
        )
    }

    /// Requests decided by `RL.HIT policy <key>` under a policy the server keeps
    /// (`RL.POLICY SET`); the key is the subject, without a prefix unless one is given. The
    /// headers name the policy's limiters, read with `RL.POLICY GET` at the first request and
    /// again every [`policy_refresh`](Self::policy_refresh) (one command more, once a minute
    /// by default).
    pub fn policy(rl: AsyncRateLimit<C>, policy: impl Into<String>) -> RateLimitLayer<C> {
        Self::with_target(
            rl,
            Target::Policy {
                name: policy.into(),
            },
            "",
        )
    }

    fn with_target(rl: AsyncRateLimit<C>, target: Target, prefix: &str) -> RateLimitLayer<C> {
        RateLimitLayer {
            shared: Arc::new(Shared {
                rl,
                target,
                key: KeyExtractor::PeerIp,
                prefix: prefix.to_string(),
                fail: FailMode::Open,
                cache: None,
                policy_refresh: Duration::from_secs(60),
                policy: Mutex::new(None),
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Shared<C>)) -> Self {
        f(Arc::make_mut(&mut self.shared));
        self
    }

    /// The name in `RateLimit-Policy` and `RateLimit` (a [`new`](Self::new) layer; a policy's
    /// headers name its limiters).
    pub fn name(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.edit(|s| {
            if let Target::Limit { name: n, .. } = &mut s.target {
                *n = name;
            }
        })
    }

    /// What goes before the extracted key: `rl:http:` by default for a limit, nothing for a
    /// policy. Two layers with different limits need different prefixes.
    pub fn key_prefix(self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        self.edit(|s| s.prefix = prefix)
    }

    /// Where the key comes from (default: [`KeyExtractor::PeerIp`]).
    pub fn key(self, key: KeyExtractor) -> Self {
        self.edit(|s| s.key = key)
    }

    /// The key is this header's value.
    pub fn key_header(self, header: HeaderName) -> Self {
        self.key(KeyExtractor::Header(header))
    }

    /// The key is what `f` makes of the request.
    pub fn key_fn(
        self,
        f: impl Fn(&http::request::Parts) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.key(KeyExtractor::Func(Arc::new(f)))
    }

    /// What happens when Redis cannot decide (default: [`FailMode::Open`]).
    pub fn fail_mode(self, fail: FailMode) -> Self {
        self.edit(|s| s.fail = fail)
    }

    /// Remember up to `max_keys` refusals locally and answer them again without a round trip
    /// until their `Retry-After` has passed (off by default). It never admits what Redis would
    /// refuse; it may refuse a little longer than needed after an RL.REFUND elsewhere.
    pub fn remember_refusals(self, max_keys: usize) -> Self {
        self.edit(|s| {
            s.cache = Some(Mutex::new(RefusalCache {
                entries: HashMap::new(),
                max_keys: max_keys.max(1),
            }))
        })
    }

    /// How often a policy layer reads the policy's definition again, for its headers
    /// (default 60 s).
    pub fn policy_refresh(self, every: Duration) -> Self {
        self.edit(|s| s.policy_refresh = every)
    }
}

impl<S, C> Layer<S> for RateLimitLayer<C> {
    type Service = RateLimitService<S, C>;

    fn layer(&self, inner: S) -> RateLimitService<S, C> {
        RateLimitService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service the layer wraps around a handler.
pub struct RateLimitService<S, C> {
    inner: S,
    shared: Arc<Shared<C>>,
}

impl<S: Clone, C> Clone for RateLimitService<S, C> {
    fn clone(&self) -> Self {
        RateLimitService {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

enum Key {
    Found(String),
    Missing(StatusCode, &'static str),
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Shared<C> {
    fn key_of(&self, parts: &http::request::Parts) -> Key {
        let found = match &self.key {
            KeyExtractor::PeerIp => match parts.extensions.get::<ConnectInfo<SocketAddr>>() {
                Some(ConnectInfo(addr)) => addr.ip().to_string(),
                None => {
                    return Key::Missing(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "rate limit: no peer address: serve the app with \
                         into_make_service_with_connect_info::<SocketAddr>()\n",
                    )
                }
            },
            KeyExtractor::Header(name) => match parts.headers.get(name).map(|v| v.to_str()) {
                Some(Ok(v)) if !v.is_empty() => v.to_string(),
                _ => {
                    return Key::Missing(
                        StatusCode::BAD_REQUEST,
                        "rate limit: the request has no key\n",
                    )
                }
            },
            KeyExtractor::Func(f) => match f(parts) {
                Some(k) => k,
                None => {
                    return Key::Missing(
                        StatusCode::BAD_REQUEST,
                        "rate limit: the request has no key\n",
                    )
                }
            },
        };
        Key::Found(format!("{}{found}", self.prefix))
    }

    async fn policy_limiters(&self, policy: &str) -> Arc<Vec<PolicyLimiter>> {
        let cached = lock(&self.policy).clone();
        if let Some((at, limiters)) = &cached {
            if at.elapsed() < self.policy_refresh {
                return limiters.clone();
            }
        }
        let fresh = match self.rl.policy_get(policy).await {
            Ok(Some(words)) => parse_policy(&words).unwrap_or_default(),
            Ok(None) => Vec::new(),
            // Keep what was read before, and try again at the next refresh.
            Err(_) => cached.map(|c| c.1.to_vec()).unwrap_or_default(),
        };
        let fresh = Arc::new(fresh);
        *lock(&self.policy) = Some((Instant::now(), fresh.clone()));
        fresh
    }

    /// The decision for `key`, its headers, and the policy's shadow limiter that would have
    /// refused (if any): from the refusal cache, or one command.
    async fn decide(&self, key: &str) -> crate::Result<(Decision, Vec<Header>, Option<String>)> {
        let remembered = self.cache.as_ref().and_then(|c| lock(c).check(key));
        let mut would_refuse = None;
        let (overall, parts) = match remembered {
            Some(r) => r,
            None => {
                let (d, parts) = match &self.target {
                    Target::Limit { limit, .. } => (self.rl.decide(key, limit, 1).await?, vec![]),
                    Target::Policy { name } => {
                        let hit = self.rl.hit(name, key, 1).await?;
                        would_refuse = hit.would_refuse;
                        (hit.overall, hit.parts)
                    }
                };
                if let Some(c) = &self.cache {
                    lock(c).remember(key, &d, &parts);
                }
                (d, parts)
            }
        };
        let hdrs = match &self.target {
            Target::Limit { limit, name } => headers(&overall, limit, name),
            Target::Policy { name } => {
                let limiters = self.policy_limiters(name).await;
                multi_headers(&overall, &parts, &limiters)
            }
        };
        Ok((overall, hdrs, would_refuse))
    }
}

/// In an allowed request's extensions, under a policy with shadow limiters: the one that
/// would have refused it, and the request's key (its subject).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowRefusal {
    /// The shadow limiter's name in the policy.
    pub limiter: String,
    /// The request's key: the policy's subject.
    pub key: String,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn plain(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

impl<S, C, B> Service<Request<B>> for RateLimitService<S, C>
where
    S: Service<Request<B>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The clone is ready only by luck: take the one poll_ready readied.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let key = match shared.key_of(&parts) {
                Key::Found(k) => k,
                Key::Missing(status, why) => return Ok(plain(status, why)),
            };
            let mut req = Request::from_parts(parts, body);
            let (d, hdrs, would_refuse) = match shared.decide(&key).await {
                Ok(ok) => ok,
                Err(_) => {
                    return match shared.fail {
                        FailMode::Open => inner.call(req).await,
                        FailMode::Closed => Ok(plain(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "rate limiter unavailable\n",
                        )),
                    }
                }
            };
            if !d.allowed {
                let body = if d.never() {
                    "request larger than the rate limit allows\n"
                } else {
                    "rate limited\n"
                };
                let mut r = plain(StatusCode::TOO_MANY_REQUESTS, body);
                insert_headers(r.headers_mut(), &hdrs);
                return Ok(r);
            }
            if d.delay_ms() > 0 {
                tokio::time::sleep(Duration::from_millis(d.delay_ms())).await;
            }
            // Under a policy with shadow limiters: which one would have refused, for the
            // handler to log (`req.extensions().get::<ShadowRefusal>()`).
            if let Some(limiter) = would_refuse {
                req.extensions_mut().insert(ShadowRefusal { limiter, key });
            }
            let mut r = inner.call(req).await?;
            insert_headers(r.headers_mut(), &hdrs);
            Ok(r)
        })
    }
}
