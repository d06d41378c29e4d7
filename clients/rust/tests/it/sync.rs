//! The blocking client against a server with the module.

use redis_ratelimit_client::{
    AcquireOptions, AllEntry, Decision, Error, Limit, PolicyLimiter, RateLimit,
};

use crate::support::{fresh, info_count, Server};

fn d(allowed: bool, limit: u64, remaining: u64, retry: i64, reset: u64) -> Decision {
    Decision {
        allowed,
        limit,
        remaining,
        retry_after_ms: retry,
        reset_after_ms: reset,
    }
}

#[test]
fn every_command_typed() {
    let server = Server::start();
    let mut rl = RateLimit::new(server.client().get_connection().unwrap());

    // RL.SLIDE: three allowed, the fourth refused with the exact wait.
    let key = fresh("slide");
    let slide = Limit::slide(3, 1000);
    let got: Vec<Decision> = (0..4)
        .map(|_| rl.decide(&key, &slide, 1).unwrap())
        .collect();
    assert_eq!(
        got.iter().map(|d| d.remaining).collect::<Vec<_>>(),
        [2, 1, 0, 0]
    );
    assert!(got[..3].iter().all(|d| d.allowed));
    let refused = got[3];
    assert!(!refused.allowed && refused.retry_after_ms > 0 && refused.retry_after_ms <= 1000);
    assert_eq!(refused.retry_after_s(), Some(1));

    // Never: the cost is above the limit.
    let never = rl
        .decide(&fresh("big"), &Limit::slide(10, 1000), 11)
        .unwrap();
    assert_eq!(never, d(false, 10, 10, -1, 0));
    assert!(never.never() && never.retry_after_s().is_none());

    // RL.FIXED, RL.TOKEN, RL.LEAKY, RL.SUBWIN.
    let fk = fresh("fixed");
    rl.decide(&fk, &Limit::fixed(1, 1500), 1).unwrap();
    let f = rl.decide(&fk, &Limit::fixed(1, 1500), 1).unwrap();
    assert!(!f.allowed && f.retry_after_ms > 1000, "{f:?}");
    assert_eq!(f.retry_after_s(), Some(2));
    let t = rl
        .decide(&fresh("token"), &Limit::token(120, 60_000), 1)
        .unwrap();
    assert_eq!(t, d(true, 120, 119, 0, 500));
    let lk = fresh("leaky");
    let a = rl.decide(&lk, &Limit::leaky(4, 1000), 1).unwrap();
    let b = rl.decide(&lk, &Limit::leaky(4, 1000), 1).unwrap();
    assert_eq!((a.delay_ms(), b.limit), (0, 5));
    assert!(
        b.allowed && b.delay_ms() > 0 && b.delay_ms() <= 250,
        "{b:?}"
    );
    let s = rl
        .decide(&fresh("subwin"), &Limit::subwin(4, 1000, 250), 2)
        .unwrap();
    assert!(s.allowed && s.remaining == 2, "{s:?}");

    // RL.PEEK, RL.REFUND, RL.CHARGE; nil for a missing key.
    let uk = fresh("upload");
    let slide10 = Limit::slide(10, 60_000);
    assert_eq!(rl.decide(&uk, &slide10, 4).unwrap().remaining, 6);
    assert_eq!(rl.peek(&uk, None).unwrap().unwrap().remaining, 6);
    assert!(!rl.peek(&uk, Some(7)).unwrap().unwrap().allowed);
    assert_eq!(rl.refund(&uk, 3).unwrap().unwrap().remaining, 9);
    assert_eq!(rl.charge(&uk, 9).unwrap().unwrap().remaining, 0);
    assert_eq!(rl.peek(&fresh("none"), None).unwrap(), None);
    assert_eq!(rl.refund(&fresh("none"), 1).unwrap(), None);
    assert_eq!(rl.charge(&fresh("none"), 1).unwrap(), None);

    // RL.ACQUIRE, RL.EXTEND, RL.RELEASE.
    let jobs = fresh("jobs");
    let first = rl
        .acquire(&jobs, 1, 30_000, &AcquireOptions::default())
        .unwrap();
    assert!(first.decision.allowed);
    let id = first.id.expect("a lease id");
    let second = rl
        .acquire(&jobs, 1, 30_000, &AcquireOptions::default())
        .unwrap();
    assert!(!second.decision.allowed && second.id.is_none());
    let mine = AcquireOptions {
        id: Some("job-9".into()),
        block_ms: Some(50),
        ..Default::default()
    };
    let blocked = rl.acquire(&jobs, 1, 30_000, &mine).unwrap();
    assert!(!blocked.decision.allowed, "waited 50 ms, then refused");
    assert!(rl.extend(&jobs, &id, 60_000).unwrap().allowed);
    assert!(rl.release(&jobs, &id).unwrap().allowed);
    assert!(!rl.release(&jobs, &id).unwrap().allowed, "released already");

    // RL.ALL: rate and tokens, then rate and concurrency with a lease id.
    let tag = fresh("{all}");
    let all = rl
        .all(&[
            AllEntry::new(format!("{tag}:rpm"), Limit::slide(2, 60_000), 1),
            AllEntry::new(format!("{tag}:tpm"), Limit::token(10, 60_000), 3),
        ])
        .unwrap();
    assert_eq!(
        (
            all.overall.allowed,
            all.overall.limit,
            all.overall.remaining
        ),
        (true, 2, 1)
    );
    let parts: Vec<(u64, u64)> = all
        .parts
        .iter()
        .map(|p| (p.decision.limit, p.decision.remaining))
        .collect();
    assert_eq!(parts, [(2, 1), (10, 7)]);
    let both = rl
        .all(&[
            AllEntry::new(format!("{tag}:rpm"), Limit::slide(2, 60_000), 1),
            AllEntry::new(format!("{tag}:jobs"), Limit::acquire(1, 30_000), 1),
        ])
        .unwrap();
    assert!(both.overall.allowed);
    assert_eq!(both.parts[0].lease_id, None);
    let lease = both.parts[1]
        .lease_id
        .clone()
        .expect("the ACQUIRE entry's lease id");
    assert!(rl.release(&format!("{tag}:jobs"), &lease).unwrap().allowed);

    // Policies: SET, GET, LIST in pages, HIT, TOP, DEL.
    let names: Vec<String> = (0..3)
        .map(|i| fresh(&format!("pol{i}")).replace(':', "-"))
        .collect();
    let llm = [
        PolicyLimiter::new("rpm", Limit::slide(2, 60_000)).cost(1),
        PolicyLimiter::new("tpm", Limit::token(100, 60_000)),
    ];
    for n in &names {
        rl.policy_set(n, &llm).unwrap();
    }
    let words = rl.policy_get(&names[0]).unwrap().expect("the definition");
    assert_eq!(
        words.join(" "),
        "rpm SLIDE 2 60000 COST 1 tpm TOKEN 100 60000"
    );
    assert_eq!(
        redis_ratelimit_client::parse_policy(&words).unwrap(),
        llm.to_vec()
    );
    assert_eq!(rl.policy_get("no-such-policy").unwrap(), None);
    let (mut cursor, mut seen, mut pages) = ("0".to_string(), Vec::new(), 0);
    loop {
        let page = rl.policy_list(&cursor, Some(1)).unwrap();
        pages += 1;
        seen.extend(
            page.policies
                .into_iter()
                .map(|p| (p.name, p.digest, p.words)),
        );
        if page.cursor == "0" {
            break;
        }
        cursor = page.cursor;
    }
    assert!(pages >= 3, "COUNT 1 gives one policy a page");
    for n in &names {
        assert_eq!(seen.iter().filter(|(name, _, _)| name == n).count(), 1);
    }
    assert_eq!(rl.policy_list_all().unwrap().len(), seen.len());
    let hit = rl.hit(&names[0], "user:1", 30).unwrap();
    assert!(hit.overall.allowed && hit.refused_by.is_none(), "{hit:?}");
    let parts: Vec<(u64, u64)> = hit
        .parts
        .iter()
        .map(|p| (p.decision.limit, p.decision.remaining))
        .collect();
    assert_eq!(parts, [(2, 1), (100, 70)]);
    let hit = rl.hit(&names[0], "user:1", 80).unwrap();
    assert_eq!(hit.refused_by.as_deref(), Some("tpm"));
    let top = rl.top(Some(5), Some(&names[0])).unwrap();
    assert_eq!(top.len(), 1);
    assert_eq!((top[0].name.as_str(), top[0].count), ("user:1", 1));
    assert!(rl.policy_del(&names[0]).unwrap());
    assert!(!rl.policy_del(&names[0]).unwrap());
    match rl.hit(&names[0], "user:1", 1) {
        Err(Error::Redis(e)) => assert!(e.to_string().contains("no policy named"), "{e}"),
        other => panic!("{other:?}"),
    }

    // CL.THROTTLE, in redis-cell's form.
    let cell = fresh("cell");
    let th = rl.throttle(&cell, 15, 30, 60, 1).unwrap();
    assert_eq!(
        (
            th.limited,
            th.limit,
            th.remaining,
            th.retry_after_s,
            th.reset_after_s
        ),
        (false, 16, 15, -1, 2)
    );
    let th = rl.throttle(&cell, 15, 30, 60, 17).unwrap();
    assert!(th.limited && th.retry_after_s == -1);

    // A bad argument is the server's error, named.
    let err = rl
        .decide(&fresh("bad"), &Limit::slide(0, 1000), 1)
        .unwrap_err();
    assert!(
        err.to_string().contains("limit must be an integer"),
        "{err}"
    );

    // The module check ran once, at the first call.
    let checks = info_count(
        rl.connection(),
        "commandstats",
        "cmdstat_command|info:calls=",
    );
    assert_eq!(checks, 1);
}
