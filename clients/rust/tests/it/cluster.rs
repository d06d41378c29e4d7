//! A real 3-primary cluster (cluster/cluster.sh): RL.HIT routed by its subject and RL.ALL by
//! its keys (no MOVED), policies on every primary, RL.TOP from every primary; sync and async.

use redis::cluster::ClusterClient;
use redis_ratelimit_client::{AllEntry, AsyncRateLimit, Limit, PolicyLimiter, RateLimit};

use crate::support::{fresh, Cluster};

const MOVED: &str = "errorstat_MOVED:count=";

#[test]
fn routed_without_a_redirect() {
    let cluster = Cluster::start();
    let client = ClusterClient::new(cluster.urls()).unwrap();
    let mut rl = RateLimit::new(client.get_connection().unwrap());
    let policy = fresh("cpol").replace(':', "-");
    let before = cluster.count("errorstats", MOVED);

    // On every primary: each one answers GET with the definition.
    rl.policy_set(&policy, &[PolicyLimiter::new("m", Limit::slide(1, 60_000))])
        .unwrap();
    let mut primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3);
    for p in primaries.iter_mut() {
        let words: Option<Vec<String>> = redis::cmd("RL.POLICY")
            .arg("GET")
            .arg(&policy)
            .query(p)
            .unwrap();
        assert_eq!(words.unwrap().join(" "), "m SLIDE 1 60000");
    }

    // 100 subjects over every slot range: allowed, then refused; RL.TOP from every primary.
    let prefix = fresh("subject");
    for i in 0..100 {
        assert!(
            rl.hit(&policy, &format!("{prefix}:{i}"), 1)
                .unwrap()
                .overall
                .allowed
        );
    }
    for i in 0..20 {
        let refused = rl.hit(&policy, &format!("{prefix}:{i}"), 1).unwrap();
        assert_eq!(refused.refused_by.as_deref(), Some("m"));
    }
    let top = rl.top(Some(50), Some(&policy)).unwrap();
    assert_eq!(top.len(), 20, "every primary's refusals, merged");

    // RL.ALL on 50 hash tags, and single-key commands on 100 keys.
    for i in 0..50 {
        let tag = format!("{{{prefix}:{i}}}");
        let all = rl
            .all(&[
                AllEntry::new(format!("{tag}:a"), Limit::slide(5, 60_000), 1),
                AllEntry::new(format!("{tag}:b"), Limit::token(5, 60_000), 1),
            ])
            .unwrap();
        assert!(all.overall.allowed);
    }
    for i in 0..100 {
        assert!(
            rl.decide(&format!("{prefix}:k{i}"), &Limit::fixed(5, 60_000), 1)
                .unwrap()
                .allowed
        );
    }
    assert!(rl
        .policy_list_all()
        .unwrap()
        .iter()
        .any(|p| p.name == policy));
    assert_eq!(
        cluster.count("errorstats", MOVED) - before,
        0,
        "MOVED replies"
    );

    // What the redis crate does with RL.HIT on its own: by the policy's slot, redirected.
    let mut raw = client.get_connection().unwrap();
    for i in 0..30 {
        let _: redis::Value = redis::cmd("RL.HIT")
            .arg(&policy)
            .arg(format!("{prefix}:raw{i}"))
            .query(&mut raw)
            .unwrap();
    }
    let raw_moved = cluster.count("errorstats", MOVED) - before;
    assert!(raw_moved > 0, "the crate's own routing redirects RL.HIT");
    println!("cluster: 30 RL.HIT sent as raw commands came back MOVED {raw_moved} times; 0 through the client");

    assert!(rl.policy_del(&policy).unwrap());
    for p in primaries.iter_mut() {
        let words: Option<Vec<String>> = redis::cmd("RL.POLICY")
            .arg("GET")
            .arg(&policy)
            .query(p)
            .unwrap();
        assert_eq!(words, None);
    }

    // The async cluster connection, routed the same way.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let con = client.get_async_connection().await.unwrap();
        let rl = AsyncRateLimit::new(con);
        let policy = fresh("capol").replace(':', "-");
        rl.policy_set(&policy, &[PolicyLimiter::new("m", Limit::token(2, 60_000))])
            .await
            .unwrap();
        let before = cluster.count("errorstats", MOVED);
        for i in 0..100 {
            let hit = rl.hit(&policy, &format!("{prefix}:a{i}"), 1).await.unwrap();
            assert!(hit.overall.allowed);
            let tag = format!("{{{prefix}:a{i}}}");
            let all = rl
                .all(&[
                    AllEntry::new(format!("{tag}:x"), Limit::slide(1, 60_000), 1),
                    AllEntry::new(format!("{tag}:y"), Limit::slide(1, 60_000), 1),
                ])
                .await
                .unwrap();
            assert!(all.overall.allowed);
        }
        assert_eq!(
            cluster.count("errorstats", MOVED) - before,
            0,
            "MOVED replies (async)"
        );
        assert!(rl.policy_del(&policy).await.unwrap());
    });
}
