//! The async client against a server with the module, over MultiplexedConnection and
//! ConnectionManager.

use std::time::{Duration, Instant};

use redis_ratelimit_client::{AcquireOptions, AllEntry, AsyncRateLimit, Limit, PolicyLimiter};

use crate::support::{fresh, info_count, Server};

/// A connection of its own for BLOCK: a blocked command holds its connection (a multiplexed
/// one queues every later command behind it), and must outlast the response timeout (500 ms by
/// default in redis 1.x).
async fn blocking(server: &Server) -> AsyncRateLimit<redis::aio::MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let con = server
        .client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    AsyncRateLimit::new(con)
}

async fn exercise<C>(
    rl: AsyncRateLimit<C>,
    blocker: AsyncRateLimit<redis::aio::MultiplexedConnection>,
) where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let key = fresh("aslide");
    let slide = Limit::slide(3, 1000);
    let mut remaining = Vec::new();
    for _ in 0..4 {
        remaining.push(rl.decide(&key, &slide, 1).await.unwrap().remaining);
    }
    assert_eq!(remaining, [2, 1, 0, 0]);
    assert!(!rl.decide(&key, &slide, 1).await.unwrap().allowed);

    let tag = fresh("{aall}");
    let all = rl
        .all(&[
            AllEntry::new(format!("{tag}:a"), Limit::fixed(5, 60_000), 1),
            AllEntry::new(format!("{tag}:b"), Limit::token(10, 60_000), 4),
        ])
        .await
        .unwrap();
    assert!(all.overall.allowed && all.parts.len() == 2);
    assert_eq!(all.parts[1].decision.remaining, 6);

    let policy = fresh("apol").replace(':', "-");
    rl.policy_set(&policy, &[PolicyLimiter::new("m", Limit::slide(1, 60_000))])
        .await
        .unwrap();
    assert!(rl.hit(&policy, "s", 1).await.unwrap().overall.allowed);
    let refused = rl.hit(&policy, "s", 1).await.unwrap();
    assert_eq!(refused.refused_by.as_deref(), Some("m"));
    assert_eq!(rl.top(None, Some(&policy)).await.unwrap()[0].name, "s");
    assert!(rl
        .policy_list_all()
        .await
        .unwrap()
        .iter()
        .any(|p| p.name == policy));
    assert!(rl.policy_del(&policy).await.unwrap());

    assert_eq!(rl.peek(&key, None).await.unwrap().unwrap().remaining, 0);
    assert_eq!(rl.refund(&key, 1).await.unwrap().unwrap().remaining, 1);
    assert!(rl.charge(&key, 1).await.unwrap().is_some());
    assert!(
        !rl.throttle(&fresh("acell"), 1, 1, 60, 1)
            .await
            .unwrap()
            .limited
    );

    // BLOCK: a waiting acquisition is granted when the holder releases.
    let jobs = fresh("ajobs");
    let held = rl
        .acquire(&jobs, 1, 30_000, &AcquireOptions::default())
        .await
        .unwrap();
    let id = held.id.expect("a lease");
    let waiter = {
        let rl = blocker;
        let jobs = jobs.clone();
        tokio::spawn(async move {
            let opts = AcquireOptions {
                block_ms: Some(10_000),
                ..Default::default()
            };
            let started = Instant::now();
            let lease = rl.acquire(&jobs, 1, 30_000, &opts).await.unwrap();
            (lease, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(rl.release(&jobs, &id).await.unwrap().allowed);
    let (lease, waited) = waiter.await.unwrap();
    assert!(lease.decision.allowed && lease.id.is_some(), "{lease:?}");
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert!(
        rl.extend(&jobs, lease.id.as_ref().unwrap(), 1000)
            .await
            .unwrap()
            .allowed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_multiplexed_connection() {
    let server = Server::start();
    let con = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let rl = AsyncRateLimit::new(con);
    // Many first calls at once: every one is answered, and the check is kept.
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let rl = rl.clone();
            tokio::spawn(async move {
                rl.decide(&format!("first:{i}"), &Limit::slide(1, 1000), 1)
                    .await
            })
        })
        .collect();
    for c in calls {
        assert!(c.await.unwrap().unwrap().allowed);
    }
    exercise(rl, blocking(&server).await).await;
    let mut direct = server.client().get_connection().unwrap();
    let checks = info_count(&mut direct, "commandstats", "cmdstat_command|info:calls=");
    assert!(
        (2..=9).contains(&checks),
        "{checks}: up to 8 first calls at once, and the blocker's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_connection_manager() {
    let server = Server::start();
    let con = server.client().get_connection_manager().await.unwrap();
    exercise(AsyncRateLimit::new(con), blocking(&server).await).await;
    let mut direct = server.client().get_connection().unwrap();
    assert_eq!(
        info_count(&mut direct, "commandstats", "cmdstat_command|info:calls="),
        2,
        "once for the manager, once for the blocker"
    );
}
