//! What the axum layer costs per request, beside the closest stock alternatives, in one run:
//!
//! ```sh
//! cargo run --release --features axum --example bench   # 3 rounds of 5 s per variant, 32 clients
//! BENCH_SECONDS=10 BENCH_CLIENTS=64 BENCH_ROUNDS=5 cargo run --release --features axum --example bench
//! ```
//!
//! It starts its own redis-server with the module (`MODULE`, default
//! `<repo>/target/release/libredis_ratelimit.so`) on a free port, then serves one axum app per
//! variant on 127.0.0.1 and drives it with keep-alive HTTP/1.1 clients from the same process
//! (the machine's cores are shared by the load, the app and Redis: compare the rows, not the
//! absolute numbers). Every request is allowed (the limits are far above the load), so each row
//! measures the path every request takes. The variants:
//!
//! - `no limiter`: the app alone, the ceiling.
//! - `tower_governor`: the stock in-process limiter (GCRA per peer IP in a local map): no
//!   Redis, and so no shared limit: N processes admit N times the limit.
//! - `INCR+PEXPIRE`: the hand-written fixed window most apps use with a shared store,
//!   `INCR key` and `PEXPIRE key window NX` in one pipeline: one round trip, two commands, a
//!   fixed window only, and no retry time without a third command (PTTL).
//! - `layer RL.FIXED` / `layer RL.SLIDE`: this crate's layer, one command per request, with
//!   the headers and the exact retry time from its reply.
//!
//! Round trips are counted on the client side (a wrapper around the connection counts each
//! command or pipeline sent); commands per request come from `INFO commandstats` deltas.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use redis_ratelimit_client::layer::RateLimitLayer;
use redis_ratelimit_client::{AsyncRateLimit, Limit};

/// A connection that counts what it sends: one round trip per command or pipeline.
#[derive(Clone)]
struct Counted {
    con: MultiplexedConnection,
    trips: Arc<AtomicU64>,
}

impl ConnectionLike for Counted {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.trips.fetch_add(1, Ordering::Relaxed);
        self.con.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.trips.fetch_add(1, Ordering::Relaxed);
        self.con.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.con.get_db()
    }
}

struct RedisServer(Child, u16);

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis() -> RedisServer {
    let module = std::env::var_os("MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/release/libredis_ratelimit.so")
        });
    assert!(module.exists(), "module not found: {}", module.display());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args([
            "--appendonly",
            "no",
            "--dir",
            &std::env::temp_dir().to_string_lossy(),
        ])
        .arg("--loadmodule")
        .arg(&module)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server");
    let server = RedisServer(child, port);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let up = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok();
        if up {
            return server;
        }
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every command's calls in `INFO commandstats`, without INFO's own.
fn commands(con: &mut redis::Connection) -> u64 {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO");
    text.lines()
        .filter(|l| !l.starts_with("cmdstat_info:"))
        .filter_map(|l| {
            l.split_once(":calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

async fn hello() -> &'static str {
    "hello\n"
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

/// `clients` keep-alive clients, each sending GET / in a loop for `seconds`: requests answered
/// 200, and the elapsed time.
async fn load(addr: SocketAddr, clients: usize, seconds: u64) -> (u64, Duration) {
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let done = done.clone();
            tokio::spawn(async move {
                let client: Client<_, Empty<Bytes>> =
                    Client::builder(TokioExecutor::new()).build_http();
                let uri: http::Uri = format!("http://{addr}/").parse().unwrap();
                while Instant::now() < deadline {
                    let resp = client.get(uri.clone()).await.expect("a response");
                    assert_eq!(resp.status(), 200, "every request is allowed here");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (done.load(Ordering::Relaxed), started.elapsed())
}

/// The hand-written fixed window: INCR and PEXPIRE NX in one pipeline.
async fn incr_window(State(con): State<Counted>, req: Request, next: Next) -> Response {
    let ip = req
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_default();
    let key = format!("incr:{ip}");
    let mut con = con.clone();
    let (count,): (u64,) = redis::pipe()
        .cmd("INCR")
        .arg(&key)
        .cmd("PEXPIRE")
        .arg(&key)
        .arg(60_000)
        .arg("NX")
        .ignore()
        .query_async(&mut con)
        .await
        .expect("INCR+PEXPIRE");
    if count > 1_000_000_000 {
        let mut r = Response::new(Body::from("rate limited\n"));
        *r.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
        return r;
    }
    next.run(req).await
}

#[tokio::main]
async fn main() {
    let seconds: u64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let clients: usize = std::env::var("BENCH_CLIENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32);
    let redis_server = start_redis();
    let client = redis::Client::open(format!("redis://127.0.0.1:{}/", redis_server.1)).unwrap();
    let mut stats = client.get_connection().unwrap();
    let trips = Arc::new(AtomicU64::new(0));
    let counted = Counted {
        con: client.get_multiplexed_async_connection().await.unwrap(),
        trips: trips.clone(),
    };
    let huge = 1_000_000_000;

    let governor = Arc::new(
        tower_governor::governor::GovernorConfigBuilder::default()
            .per_nanosecond(1)
            .burst_size(u32::MAX)
            .finish()
            .unwrap(),
    );
    let variants: Vec<(&str, Router)> = vec![
        ("no limiter", Router::new().route("/", get(hello))),
        (
            "tower_governor (in-process)",
            Router::new()
                .route("/", get(hello))
                .layer(tower_governor::GovernorLayer::new(governor)),
        ),
        (
            "INCR+PEXPIRE pipeline",
            Router::new()
                .route("/", get(hello))
                .layer(middleware::from_fn_with_state(counted.clone(), incr_window)),
        ),
        (
            "layer RL.FIXED",
            Router::new().route("/", get(hello)).layer(
                RateLimitLayer::new(
                    AsyncRateLimit::new(counted.clone()),
                    Limit::fixed(huge, 60_000),
                )
                .key_prefix("bench:fixed:"),
            ),
        ),
        (
            "layer RL.SLIDE",
            Router::new().route("/", get(hello)).layer(
                RateLimitLayer::new(
                    AsyncRateLimit::new(counted.clone()),
                    Limit::slide(huge, 60_000),
                )
                .key_prefix("bench:slide:"),
            ),
        ),
    ];
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut servers = Vec::new();
    for (name, app) in variants {
        let addr = serve(app).await;
        // Warm up: connections, the module check.
        load(addr, clients, 1).await;
        servers.push((name, addr, Vec::new(), 0u64, 0u64, 0u64));
    }
    // The variants take turns, round after round, so that what else runs on the machine
    // weighs on each alike; the median round is reported.
    for _ in 0..rounds {
        for (_, addr, rates, requests, round_trips, cmds) in servers.iter_mut() {
            let (trips0, cmds0) = (trips.load(Ordering::Relaxed), commands(&mut stats));
            let (n, elapsed) = load(*addr, clients, seconds).await;
            *round_trips += trips.load(Ordering::Relaxed) - trips0;
            *cmds += commands(&mut stats) - cmds0;
            *requests += n;
            rates.push(n as f64 / elapsed.as_secs_f64());
        }
    }
    println!(
        "{clients} keep-alive clients, {rounds} rounds of {seconds} s per variant (median round), \
         app, load and Redis on this machine ({} cores)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!(
        "| variant | requests/s | round trips/request | Redis commands/request | shared across processes |"
    );
    println!("|---|---|---|---|---|");
    for (name, _, mut rates, requests, round_trips, cmds) in servers {
        rates.sort_by(|a, b| a.total_cmp(b));
        let per = |x: u64| x as f64 / requests.max(1) as f64;
        println!(
            "| {name} | {:.0} | {:.2} | {:.2} | {} |",
            rates[rates.len() / 2],
            per(round_trips),
            per(cmds),
            if name.starts_with("no") || name.starts_with("tower") {
                "no"
            } else {
                "yes"
            },
        );
    }
}
