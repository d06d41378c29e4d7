//! The async client, over any `redis::aio::ConnectionLike` that is `Clone` (MultiplexedConnection,
//! ConnectionManager, cluster_async::ClusterConnection).

use std::sync::{Arc, OnceLock};

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Value};

use crate::call::{self, backend_from_check, parse, Backend, Call, Combine, Fallback, Route};
use crate::cmd::{self, AcquireOptions, AllEntry};
use crate::error::{Error, Result};
use crate::limit::{Limit, PolicyLimiter};
use crate::reply::{
    AllDecision, Decision, HitDecision, Lease, LeaseId, PolicyInfo, PolicyPage, Throttle, TopEntry,
};

/// Typed RL.* commands on an async connection that is cheap to clone:
/// `redis::aio::MultiplexedConnection`, `redis::aio::ConnectionManager` (reconnects by
/// itself), `redis::cluster_async::ClusterConnection`. Each call clones it, so methods take
/// `&self` and the value is shared between tasks (clone it: the clones share the module
/// check).
///
/// The first call checks once that the module is loaded (`COMMAND INFO RL.SLIDE`) and keeps
/// the answer; [`recheck`](Self::recheck) forgets it. Without the module, every call answers
/// [`Error::ModuleNotLoaded`], unless built [`with_fallback(Fallback::Lua)`](Self::with_fallback).
///
/// In Redis Cluster, given a `cluster_async::ClusterConnection` itself (not behind a wrapper), it routes
/// RL.HIT by its subject and RL.ALL by its first key (the `redis` crate would route both by
/// their first argument: the policy's name, the key count), sends RL.POLICY SET and DEL to
/// every primary, merges RL.TOP from every primary, and reads RL.POLICY GET and LIST from one
/// node. Every other command has its key first and is routed by the `redis` crate.
#[derive(Clone)]
pub struct AsyncRateLimit<C> {
    con: C,
    fallback: Fallback,
    backend: Arc<OnceLock<std::result::Result<Backend, ()>>>,
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> AsyncRateLimit<C> {
    /// Wraps `con`; nothing is sent until the first call.
    pub fn new(con: C) -> AsyncRateLimit<C> {
        AsyncRateLimit {
            con,
            fallback: Fallback::None,
            backend: Arc::new(OnceLock::new()),
        }
    }

    /// What to do when the module is missing (default: [`Fallback::None`], an error).
    pub fn with_fallback(mut self, fallback: Fallback) -> AsyncRateLimit<C> {
        self.fallback = fallback;
        self.backend = Arc::new(OnceLock::new());
        self
    }

    /// A clone of the connection, for other commands.
    pub fn connection(&self) -> C {
        self.con.clone()
    }

    /// Forgets the module check's answer (for this value and the clones made after).
    pub fn recheck(&mut self) {
        self.backend = Arc::new(OnceLock::new());
    }

    /// What serves the calls: runs the module check the first time. (Tasks that make their
    /// first call at the same moment may each check; the first answer is kept.)
    pub async fn backend(&self) -> Result<Backend> {
        if let Some(b) = self.backend.get() {
            return b.map_err(|()| Error::ModuleNotLoaded);
        }
        let mut con = self.con.clone();
        let reply: Value = cmd::module_check().query_async(&mut con).await?;
        let b = backend_from_check(&reply, self.fallback);
        let _ = self.backend.set(b.as_ref().map(|b| *b).map_err(|_| ()));
        b
    }

    async fn send(&self, call: Call) -> Result<Value> {
        let mut con = self.con.clone();
        #[cfg(feature = "cluster-async")]
        if let Some(routing) = call.route.routing() {
            if let Some(cluster) = (&mut con as &mut dyn std::any::Any)
                .downcast_mut::<redis::cluster_async::ClusterConnection>()
            {
                return Ok(cluster.route_command(call.cmd, routing).await?);
            }
        }
        let _ = &call.route;
        Ok(call.cmd.query_async(&mut con).await?)
    }

    async fn module<T: FromRedisValue>(&self, what: &'static str, call: Call) -> Result<T> {
        match self.backend().await? {
            Backend::Module => parse(self.send(call).await?),
            Backend::Lua => Err(Error::NotInFallback { what }),
        }
    }

    /// The limiter's own command on `key` for `cost` units (`RL.SLIDE key 100 60000`, ...).
    /// With [`Fallback::Lua`] and no module, RL.FIXED, RL.SLIDE and RL.TOKEN run as their Lua
    /// twins. An `ACQUIRE` limit answers its five fields (its lease id: [`acquire`](Self::acquire));
    /// a `THROTTLE` one answers CL.THROTTLE's own reply, which is no [`Decision`]:
    /// use [`throttle`](Self::throttle).
    pub async fn decide(&self, key: &str, limit: &Limit, cost: u64) -> Result<Decision> {
        match self.backend().await? {
            Backend::Module => parse(self.send(Call::new(cmd::decide(key, limit, cost))).await?),
            Backend::Lua => {
                let script = call::script(limit)?;
                let mut inv = script.prepare_invoke();
                inv.key(key).arg(call::script_args(limit, cost));
                let mut con = self.con.clone();
                Ok(inv.invoke_async(&mut con).await?)
            }
        }
    }

    /// `RL.ACQUIRE key limit lease_ms [ID] [COST] [BLOCK]`: a lease on one of `limit` slots.
    pub async fn acquire(
        &self,
        key: &str,
        limit: u64,
        lease_ms: u64,
        opts: &AcquireOptions,
    ) -> Result<Lease> {
        self.module(
            "RL.ACQUIRE",
            Call::new(cmd::acquire(key, limit, lease_ms, opts)),
        )
        .await
    }

    /// `RL.RELEASE key lease-id`: `allowed` is false for a lease already ended.
    pub async fn release(&self, key: &str, id: &LeaseId) -> Result<Decision> {
        self.module("RL.RELEASE", Call::new(cmd::release(key, id)))
            .await
    }

    /// `RL.EXTEND key lease-id lease_ms`: the lease now ends `lease_ms` from now.
    pub async fn extend(&self, key: &str, id: &LeaseId, lease_ms: u64) -> Result<Decision> {
        self.module("RL.EXTEND", Call::new(cmd::extend(key, id, lease_ms)))
            .await
    }

    /// `RL.PEEK key [COST n]`; `None` for a missing key.
    pub async fn peek(&self, key: &str, cost: Option<u64>) -> Result<Option<Decision>> {
        self.module("RL.PEEK", Call::new(cmd::peek(key, cost)))
            .await
    }

    /// `RL.REFUND key [COST n]`; `None` for a missing key.
    pub async fn refund(&self, key: &str, cost: u64) -> Result<Option<Decision>> {
        self.module("RL.REFUND", Call::new(cmd::refund(key, cost)))
            .await
    }

    /// `RL.CHARGE key COST n`; `None` for a missing key.
    pub async fn charge(&self, key: &str, cost: u64) -> Result<Option<Decision>> {
        self.module("RL.CHARGE", Call::new(cmd::charge(key, cost)))
            .await
    }

    /// `RL.ALL`: one all-or-nothing decision across the entries' keys (one slot in a cluster).
    pub async fn all(&self, entries: &[AllEntry]) -> Result<AllDecision> {
        let route = Route::Key(
            entries
                .first()
                .map_or(Vec::new(), |e| e.key.clone().into_bytes()),
        );
        self.module("RL.ALL", Call::to(cmd::all(entries), route))
            .await
    }

    /// `RL.HIT policy subject [COST n]`: a decision under a policy the server keeps.
    pub async fn hit(&self, policy: &str, subject: &str, cost: u64) -> Result<HitDecision> {
        let route = Route::Key(subject.as_bytes().to_vec());
        self.module("RL.HIT", Call::to(cmd::hit(policy, subject, cost), route))
            .await
    }

    /// `RL.POLICY SET name limiter...` (on every primary of a cluster).
    pub async fn policy_set(&self, name: &str, limiters: &[PolicyLimiter]) -> Result<()> {
        let route = Route::AllPrimaries(Combine::AllSucceeded);
        let _: Value = self
            .module(
                "RL.POLICY",
                Call::to(cmd::policy_set(name, limiters), route),
            )
            .await?;
        Ok(())
    }

    /// `RL.POLICY GET name`: the definition's words, `None` when there is none.
    pub async fn policy_get(&self, name: &str) -> Result<Option<Vec<String>>> {
        self.module("RL.POLICY", Call::to(cmd::policy_get(name), Route::OneNode))
            .await
    }

    /// `RL.POLICY DEL name`: whether it existed (on any primary of a cluster).
    pub async fn policy_del(&self, name: &str) -> Result<bool> {
        let route = Route::AllPrimaries(Combine::Sum);
        let n: i64 = self
            .module("RL.POLICY", Call::to(cmd::policy_del(name), route))
            .await?;
        Ok(n > 0)
    }

    /// `RL.POLICY LIST cursor [COUNT n]`: one page; start with `"0"`, stop when the page's
    /// cursor is `"0"`.
    pub async fn policy_list(&self, cursor: &str, count: Option<u32>) -> Result<PolicyPage> {
        self.module(
            "RL.POLICY",
            Call::to(cmd::policy_list(cursor, count), Route::OneNode),
        )
        .await
    }

    /// Every policy, page by page.
    pub async fn policy_list_all(&self) -> Result<Vec<PolicyInfo>> {
        let mut out = Vec::new();
        let mut cursor = "0".to_string();
        loop {
            let page = self.policy_list(&cursor, Some(100)).await?;
            out.extend(page.policies);
            if page.cursor == "0" {
                return Ok(out);
            }
            cursor = page.cursor;
        }
    }

    /// `RL.TOP [COUNT n] [POLICY name]`: who is refused most (from every primary of a
    /// cluster, merged).
    pub async fn top(&self, count: Option<u32>, policy: Option<&str>) -> Result<Vec<TopEntry>> {
        let route = Route::AllPrimaries(Combine::Arrays);
        let entries = self
            .module("RL.TOP", Call::to(cmd::top(count, policy), route))
            .await?;
        Ok(call::merge_top(entries, count))
    }

    /// `CL.THROTTLE key max_burst count_per_period period_s quantity`, in redis-cell's form.
    pub async fn throttle(
        &self,
        key: &str,
        max_burst: u64,
        count_per_period: u64,
        period_s: u64,
        quantity: u64,
    ) -> Result<Throttle> {
        let c = cmd::throttle(key, max_burst, count_per_period, period_s, quantity);
        self.module("CL.THROTTLE", Call::new(c)).await
    }
}
