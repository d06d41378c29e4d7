//! An axum app behind the rate-limit layer, for trying it by hand and for the tests' second
//! process:
//!
//! ```sh
//! cargo run --features axum --example serve -- 127.0.0.1:8080
//! curl -i http://127.0.0.1:8080/      # 200 with RateLimit headers, then 429 after 5 in 10 s
//! ```
//!
//! Environment: `RL_URL` (default `redis://127.0.0.1:6379`), `RL_LIMIT` and `RL_WINDOW_MS`
//! (RL.SLIDE, default 5 per 10000 ms), `RL_POLICY` (a policy's name: RL.HIT instead of the
//! limit), `RL_PREFIX` (the key's prefix), `RL_KEY_HEADER` (the key from this header instead
//! of the peer's IP). It prints `listening on http://<addr>` once it accepts connections
//! (`127.0.0.1:0` picks a free port).

use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use redis_ratelimit_client::layer::RateLimitLayer;
use redis_ratelimit_client::{AsyncRateLimit, Limit};

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let url = env_or("RL_URL", "redis://127.0.0.1:6379");
    let con = redis::Client::open(url.as_str())?
        .get_connection_manager()
        .await?;
    let rl = AsyncRateLimit::new(con);
    let mut layer = match std::env::var("RL_POLICY") {
        Ok(policy) => RateLimitLayer::policy(rl, policy),
        Err(_) => {
            let limit: u64 = env_or("RL_LIMIT", "5").parse()?;
            let window_ms: u64 = env_or("RL_WINDOW_MS", "10000").parse()?;
            RateLimitLayer::new(rl, Limit::slide(limit, window_ms))
                .name("demo")
                .key_prefix(env_or("RL_PREFIX", "rl:http:"))
        }
    };
    if let Ok(h) = std::env::var("RL_KEY_HEADER") {
        layer = layer.key_header(h.parse()?);
    }
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
