//! The axum layer on real ports, hit with real HTTP requests: the 429 at exactly the
//! (limit+1)-th request, the headers, a second server process sharing the limit, policies,
//! the refusal cache, and both failure modes.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::get;
use axum::Router;
use http::{HeaderMap, HeaderName, StatusCode};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use redis_ratelimit_client::layer::{FailMode, RateLimitLayer};
use redis_ratelimit_client::{AsyncRateLimit, Limit, PolicyLimiter, RateLimit};

use crate::support::{fresh, info_count, Server};

type Http = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

fn http() -> Http {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap()
    });
    addr
}

fn app(
    layer: RateLimitLayer<impl redis::aio::ConnectionLike + Clone + Send + Sync + 'static>,
) -> Router {
    Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(layer)
}

async fn get_(client: &Http, addr: SocketAddr, who: Option<&str>) -> (StatusCode, HeaderMap) {
    let mut req = http::Request::get(format!("http://{addr}/"));
    if let Some(w) = who {
        req = req.header("x-client", w);
    }
    let resp = client
        .request(req.body(Empty::new()).unwrap())
        .await
        .unwrap();
    (resp.status(), resp.headers().clone())
}

fn h<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

async fn rl(server: &Server) -> AsyncRateLimit<redis::aio::MultiplexedConnection> {
    AsyncRateLimit::new(
        server
            .client()
            .get_multiplexed_async_connection()
            .await
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_exactly_the_request_past_the_limit() {
    let server = Server::start();
    let layer = RateLimitLayer::new(rl(&server).await, Limit::slide(5, 60_000))
        .name("api")
        .key_prefix(fresh("rl:t1:"));
    let addr = serve(app(layer)).await;
    let client = http();
    for i in 0..5u64 {
        let (status, headers) = get_(&client, addr, None).await;
        assert_eq!(status, StatusCode::OK, "request {}", i + 1);
        assert_eq!(h(&headers, "ratelimit-policy"), Some("\"api\";q=5;w=60"));
        assert_eq!(
            h(&headers, "ratelimit"),
            Some(format!("\"api\";r={};t=60", 4 - i).as_str())
        );
        assert_eq!(h(&headers, "x-ratelimit-limit"), Some("5"));
        assert_eq!(
            h(&headers, "x-ratelimit-remaining"),
            Some((4 - i).to_string().as_str())
        );
        assert_eq!(h(&headers, "x-ratelimit-reset"), Some("60"));
        assert_eq!(h(&headers, "retry-after"), None);
    }
    let (status, headers) = get_(&client, addr, None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "the 6th request");
    let retry: u64 = h(&headers, "retry-after").unwrap().parse().unwrap();
    assert!((58..=60).contains(&retry), "{retry}");
    assert_eq!(h(&headers, "ratelimit"), Some("\"api\";r=0;t=60"));
    assert_eq!(h(&headers, "x-ratelimit-remaining"), Some("0"));
    // The key was the peer's IP, under the prefix.
    let mut direct = server.client().get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("rl:t1:*")
        .query(&mut direct)
        .unwrap();
    assert_eq!(keys.len(), 1);
    assert!(keys[0].ends_with("127.0.0.1"), "{keys:?}");
}

/// The example server in a process of its own, on a free port.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn example(name: &str) -> std::path::PathBuf {
    // target/<profile>/deps/<this test> -> target/<profile>/examples/<name>
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: cargo test --features axum builds it",
        path.display()
    );
    path
}

fn spawn_serve(envs: &[(&str, &str)]) -> (Process, SocketAddr) {
    let mut child = Command::new(example("serve"))
        .arg("127.0.0.1:0")
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the serve example");
    let stdout = child.stdout.take().unwrap();
    let process = Process(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("listening on http://") {
                let _ = tx.send(addr.parse::<SocketAddr>().unwrap());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the serve example listening within 30 s");
    (process, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_shares_the_limit() {
    let server = Server::start();
    let prefix = fresh("rl:shared:");
    let (_other, other_addr) = spawn_serve(&[
        ("RL_URL", &server.url()),
        ("RL_LIMIT", "10"),
        ("RL_WINDOW_MS", "60000"),
        ("RL_PREFIX", &prefix),
        ("RL_KEY_HEADER", "x-client"),
    ]);
    let layer = RateLimitLayer::new(rl(&server).await, Limit::slide(10, 60_000))
        .name("demo")
        .key_prefix(&prefix)
        .key_header(HeaderName::from_static("x-client"));
    let here = serve(app(layer)).await;
    let client = http();
    let mut statuses = Vec::new();
    for i in 0..16 {
        let addr = if i % 2 == 0 { here } else { other_addr };
        let (status, headers) = get_(&client, addr, Some("alice")).await;
        if status == StatusCode::OK {
            assert_eq!(
                h(&headers, "x-ratelimit-remaining"),
                Some((9 - i).to_string().as_str())
            );
        }
        statuses.push(status);
    }
    let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert_eq!(ok, 10, "{statuses:?}");
    assert!(
        statuses[..10].iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert!(statuses[10..]
        .iter()
        .all(|s| *s == StatusCode::TOO_MANY_REQUESTS));
    // Another client has its own limit, in both processes.
    assert_eq!(
        get_(&client, other_addr, Some("bob")).await.0,
        StatusCode::OK
    );
    assert_eq!(get_(&client, here, Some("bob")).await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_policy_the_headers_name_each_limiter() {
    let server = Server::start();
    let policy = fresh("web").replace(':', "-");
    let mut admin = RateLimit::new(server.client().get_connection().unwrap());
    admin
        .policy_set(
            &policy,
            &[
                PolicyLimiter::new("second", Limit::slide(3, 1000)),
                PolicyLimiter::new("hour", Limit::fixed(100, 3_600_000)),
            ],
        )
        .unwrap();
    let layer = RateLimitLayer::policy(rl(&server).await, &policy)
        .key_header(HeaderName::from_static("x-client"));
    let addr = serve(app(layer)).await;
    let client = http();
    let (status, headers) = get_(&client, addr, Some("carol")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        h(&headers, "ratelimit-policy"),
        Some("\"second\";q=3;w=1, \"hour\";q=100;w=3600")
    );
    assert_eq!(
        h(&headers, "ratelimit"),
        Some("\"second\";r=2;t=1, \"hour\";r=99;t=3600")
    );
    get_(&client, addr, Some("carol")).await;
    get_(&client, addr, Some("carol")).await;
    let (status, headers) = get_(&client, addr, Some("carol")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(h(&headers, "retry-after"), Some("1"));
    assert!(h(&headers, "ratelimit")
        .unwrap()
        .starts_with("\"second\";r=0;t=1, \"hour\";r=97;"));
    // Without a key: 400.
    assert_eq!(get_(&client, addr, None).await.0, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_refusals_spare_round_trips() {
    let server = Server::start();
    let layer = RateLimitLayer::new(rl(&server).await, Limit::slide(2, 60_000))
        .key_prefix(fresh("rl:cache:"))
        .remember_refusals(1000);
    let addr = serve(app(layer)).await;
    let client = http();
    let mut direct = server.client().get_connection().unwrap();
    let before = info_count(&mut direct, "commandstats", "cmdstat_RL.SLIDE:calls=");
    let mut ok = 0;
    for _ in 0..20 {
        let (status, headers) = get_(&client, addr, None).await;
        if status == StatusCode::OK {
            ok += 1;
        } else {
            assert!(h(&headers, "retry-after").is_some());
        }
    }
    let calls = info_count(&mut direct, "commandstats", "cmdstat_RL.SLIDE:calls=") - before;
    assert_eq!(
        (ok, calls),
        (2, 3),
        "2 allowed, 1 refusal asked, 17 answered locally"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_open_or_closed_as_told() {
    // A server without the module: every decision is an error.
    let plain = Server::without_module();
    let open = RateLimitLayer::new(rl(&plain).await, Limit::slide(1, 1000));
    let closed =
        RateLimitLayer::new(rl(&plain).await, Limit::slide(1, 1000)).fail_mode(FailMode::Closed);
    let (open, closed) = (serve(app(open)).await, serve(app(closed)).await);
    let client = http();
    for _ in 0..3 {
        let (status, headers) = get_(&client, open, None).await;
        assert_eq!(status, StatusCode::OK);
        assert!(headers.get("ratelimit").is_none());
        assert_eq!(
            get_(&client, closed, None).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
    // Redis gone.
    let server = Server::start();
    let open = RateLimitLayer::new(rl(&server).await, Limit::slide(1, 1000));
    let closed =
        RateLimitLayer::new(rl(&server).await, Limit::slide(1, 1000)).fail_mode(FailMode::Closed);
    let (open, closed) = (serve(app(open)).await, serve(app(closed)).await);
    drop(server);
    assert_eq!(get_(&client, open, None).await.0, StatusCode::OK);
    assert_eq!(
        get_(&client, closed, None).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_with_a_shadow_limiter_tells_the_handler_and_keeps_its_headers() {
    use redis_ratelimit_client::layer::ShadowRefusal;
    let server = Server::start();
    let policy = fresh("shadow").replace(':', "-");
    let mut direct = server.client().get_connection().unwrap();
    let words = "PENALTY 3 60000 1000 m SLIDE 5 60000 b TOKEN 1 60000 SHADOW";
    let _: () = redis::cmd("RL.POLICY")
        .arg("SET")
        .arg(&policy)
        .arg(words.split(' ').collect::<Vec<_>>())
        .query(&mut direct)
        .unwrap();
    let layer = RateLimitLayer::policy(rl(&server).await, &policy);
    let router = Router::new()
        .route(
            "/",
            get(|req: axum::extract::Request| async move {
                match req.extensions().get::<ShadowRefusal>() {
                    Some(s) => format!("would refuse: {}\n", s.limiter),
                    None => "ok\n".to_string(),
                }
            }),
        )
        .layer(layer);
    let addr = serve(router).await;
    let client = http();
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let resp = client
            .request(
                http::Request::get(format!("http://{addr}/"))
                    .body(Empty::new())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        // The headers name both limiters (the policy's words read back, clauses and all).
        let policy_header = h(resp.headers(), "ratelimit-policy")
            .unwrap_or("")
            .to_string();
        assert!(
            policy_header.contains("\"m\"") && policy_header.contains("\"b\""),
            "{policy_header}"
        );
        use http_body_util::BodyExt;
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        bodies.push(String::from_utf8_lossy(&body).into_owned());
    }
    assert_eq!(bodies, ["ok\n", "would refuse: b\n"]);
}
