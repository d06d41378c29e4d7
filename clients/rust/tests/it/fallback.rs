//! A server without the module: the one clear error by default, the Lua twins with
//! `Fallback::Lua`.

use redis_ratelimit_client::{
    AsyncRateLimit, Backend, Error, Fallback, Limit, RateLimit, MODULE_NOT_LOADED,
};

use crate::support::{fresh, Server};

#[test]
fn without_the_option_the_error_says_what_to_do() {
    let server = Server::without_module();
    let mut rl = RateLimit::new(server.client().get_connection().unwrap());
    let err = rl.decide("k", &Limit::slide(1, 1000), 1).unwrap_err();
    assert!(matches!(err, Error::ModuleNotLoaded), "{err:?}");
    assert_eq!(err.to_string(), MODULE_NOT_LOADED);
    assert!(MODULE_NOT_LOADED.contains("pass Fallback::Lua"));
    // Every command, not only the limiters; and nothing was written.
    assert!(matches!(rl.hit("p", "s", 1), Err(Error::ModuleNotLoaded)));
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(rl.connection()).unwrap();
    assert!(keys.is_empty());
}

#[test]
fn the_lua_twins_limit_as_the_module_does() {
    let server = Server::without_module();
    let mut rl =
        RateLimit::new(server.client().get_connection().unwrap()).with_fallback(Fallback::Lua);
    assert_eq!(rl.backend().unwrap(), Backend::Lua);
    for limit in [
        Limit::slide(3, 60_000),
        Limit::fixed(3, 60_000),
        Limit::token(3, 60_000),
    ] {
        let key = fresh(limit.keyword());
        let got: Vec<_> = (0..4)
            .map(|_| rl.decide(&key, &limit, 1).unwrap())
            .collect();
        assert_eq!(
            got.iter()
                .map(|d| (d.allowed, d.limit, d.remaining))
                .collect::<Vec<_>>(),
            [(true, 3, 2), (true, 3, 1), (true, 3, 0), (false, 3, 0)],
            "{limit:?}"
        );
        assert!(
            got[3].retry_after_ms > 0 && got[3].retry_after_s().is_some(),
            "{:?}",
            got[3]
        );
        let never = rl.decide(&fresh("never"), &limit, 4).unwrap();
        assert!(never.never(), "{limit:?}: {never:?}");
    }
    // NOSCRIPT: the script cache flushed, the next call loads it again.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(rl.connection())
        .unwrap();
    assert!(
        rl.decide(&fresh("again"), &Limit::slide(1, 1000), 1)
            .unwrap()
            .allowed
    );
    // What the twins do not cover says so.
    for err in [
        rl.decide("k", &Limit::leaky(1, 1000), 1).unwrap_err(),
        rl.hit("p", "s", 1).unwrap_err(),
        rl.peek("k", None).unwrap_err(),
    ] {
        assert!(matches!(err, Error::NotInFallback { .. }), "{err:?}");
        assert!(err.to_string().contains("Lua fallback has only"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_client_falls_back_too() {
    let server = Server::without_module();
    let con = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let plain = AsyncRateLimit::new(con.clone());
    assert!(matches!(
        plain.decide("k", &Limit::token(1, 1000), 1).await,
        Err(Error::ModuleNotLoaded)
    ));
    let rl = AsyncRateLimit::new(con).with_fallback(Fallback::Lua);
    let key = fresh("atoken");
    assert!(
        rl.decide(&key, &Limit::token(1, 60_000), 1)
            .await
            .unwrap()
            .allowed
    );
    let refused = rl.decide(&key, &Limit::token(1, 60_000), 1).await.unwrap();
    assert!(
        !refused.allowed && refused.retry_after_ms > 59_000,
        "{refused:?}"
    );
}
