//! The blocking client, over any `redis::ConnectionLike`.

use redis::{ConnectionLike, FromRedisValue, Value};

use crate::call::{self, backend_from_check, parse, Backend, Call, Combine, Fallback, Route};
use crate::cmd::{self, AcquireOptions, AllEntry};
use crate::error::{Error, Result};
use crate::limit::{Limit, PolicyLimiter};
use crate::reply::{
    AllDecision, Decision, HitDecision, Lease, LeaseId, PolicyInfo, PolicyPage, Throttle, TopEntry,
};

/// Typed RL.* commands on one blocking connection: a `redis::Connection`, a
/// `redis::cluster::ClusterConnection`, or anything else that is `redis::ConnectionLike`
/// (a pooled connection that dereferences to one).
///
/// The first call checks once that the module is loaded (`COMMAND INFO RL.SLIDE`) and keeps
/// the answer; [`recheck`](Self::recheck) forgets it. Without the module, every call answers
/// [`Error::ModuleNotLoaded`], unless built [`with_fallback(Fallback::Lua)`](Self::with_fallback).
///
/// In Redis Cluster, given a `ClusterConnection` itself (not behind a wrapper), it routes
/// RL.HIT by its subject and RL.ALL by its first key (the `redis` crate would route both by
/// their first argument: the policy's name, the key count), sends RL.POLICY SET and DEL to
/// every primary, merges RL.TOP from every primary, and reads RL.POLICY GET and LIST from one
/// node. Every other command has its key first and is routed by the `redis` crate.
pub struct RateLimit<C> {
    con: C,
    fallback: Fallback,
    backend: Option<std::result::Result<Backend, ()>>,
}

impl<C: ConnectionLike + 'static> RateLimit<C> {
    /// Wraps `con`; nothing is sent until the first call.
    pub fn new(con: C) -> RateLimit<C> {
        RateLimit {
            con,
            fallback: Fallback::None,
            backend: None,
        }
    }

    /// What to do when the module is missing (default: [`Fallback::None`], an error).
    pub fn with_fallback(mut self, fallback: Fallback) -> RateLimit<C> {
        self.fallback = fallback;
        self.backend = None;
        self
    }

    /// The connection, for other commands.
    pub fn connection(&mut self) -> &mut C {
        &mut self.con
    }

    /// Gives the connection back.
    pub fn into_inner(self) -> C {
        self.con
    }

    /// Forgets the module check's answer: the next call checks again.
    pub fn recheck(&mut self) {
        self.backend = None;
    }

    /// What serves the calls: runs the module check the first time.
    pub fn backend(&mut self) -> Result<Backend> {
        match self.backend {
            Some(Ok(b)) => return Ok(b),
            Some(Err(())) => return Err(Error::ModuleNotLoaded),
            None => {}
        }
        let reply: Value = cmd::module_check().query(&mut self.con)?;
        let b = backend_from_check(&reply, self.fallback);
        self.backend = Some(b.as_ref().map(|b| *b).map_err(|_| ()));
        b
    }

    fn send(&mut self, call: Call) -> Result<Value> {
        #[cfg(feature = "cluster")]
        if let Some(routing) = call.route.routing() {
            if let Some(cluster) = (&mut self.con as &mut dyn std::any::Any)
                .downcast_mut::<redis::cluster::ClusterConnection>()
            {
                return Ok(cluster.route_command(&call.cmd, routing)?);
            }
        }
        let _ = &call.route;
        Ok(call.cmd.query(&mut self.con)?)
    }

    fn module<T: FromRedisValue>(&mut self, what: &'static str, call: Call) -> Result<T> {
        match self.backend()? {
            Backend::Module => parse(self.send(call)?),
            Backend::Lua => Err(Error::NotInFallback { what }),
        }
    }

    /// The limiter's own command on `key` for `cost` units (`RL.SLIDE key 100 60000`, ...).
    /// With [`Fallback::Lua`] and no module, RL.FIXED, RL.SLIDE and RL.TOKEN run as their Lua
    /// twins. An `ACQUIRE` limit answers its five fields (its lease id: [`acquire`](Self::acquire));
    /// a `THROTTLE` one answers CL.THROTTLE's own reply, which is no [`Decision`]:
    /// use [`throttle`](Self::throttle).
    pub fn decide(&mut self, key: &str, limit: &Limit, cost: u64) -> Result<Decision> {
        match self.backend()? {
            Backend::Module => parse(self.send(Call::new(cmd::decide(key, limit, cost)))?),
            Backend::Lua => {
                let script = call::script(limit)?;
                let mut inv = script.prepare_invoke();
                inv.key(key).arg(call::script_args(limit, cost));
                Ok(inv.invoke(&mut self.con)?)
            }
        }
    }

    /// `RL.ACQUIRE key limit lease_ms [ID] [COST] [BLOCK]`: a lease on one of `limit` slots.
    pub fn acquire(
        &mut self,
        key: &str,
        limit: u64,
        lease_ms: u64,
        opts: &AcquireOptions,
    ) -> Result<Lease> {
        self.module(
            "RL.ACQUIRE",
            Call::new(cmd::acquire(key, limit, lease_ms, opts)),
        )
    }

    /// `RL.RELEASE key lease-id`: `allowed` is false for a lease already ended.
    pub fn release(&mut self, key: &str, id: &LeaseId) -> Result<Decision> {
        self.module("RL.RELEASE", Call::new(cmd::release(key, id)))
    }

    /// `RL.EXTEND key lease-id lease_ms`: the lease now ends `lease_ms` from now.
    pub fn extend(&mut self, key: &str, id: &LeaseId, lease_ms: u64) -> Result<Decision> {
        self.module("RL.EXTEND", Call::new(cmd::extend(key, id, lease_ms)))
    }

    /// `RL.PEEK key [COST n]`; `None` for a missing key.
    pub fn peek(&mut self, key: &str, cost: Option<u64>) -> Result<Option<Decision>> {
        self.module("RL.PEEK", Call::new(cmd::peek(key, cost)))
    }

    /// `RL.REFUND key [COST n]`; `None` for a missing key.
    pub fn refund(&mut self, key: &str, cost: u64) -> Result<Option<Decision>> {
        self.module("RL.REFUND", Call::new(cmd::refund(key, cost)))
    }

    /// `RL.CHARGE key COST n`; `None` for a missing key.
    pub fn charge(&mut self, key: &str, cost: u64) -> Result<Option<Decision>> {
        self.module("RL.CHARGE", Call::new(cmd::charge(key, cost)))
    }

    /// `RL.ALL`: one all-or-nothing decision across the entries' keys (one slot in a cluster).
    pub fn all(&mut self, entries: &[AllEntry]) -> Result<AllDecision> {
        let route = Route::Key(
            entries
                .first()
                .map_or(Vec::new(), |e| e.key.clone().into_bytes()),
        );
        self.module("RL.ALL", Call::to(cmd::all(entries), route))
    }

    /// `RL.HIT policy subject [COST n]`: a decision under a policy the server keeps.
    pub fn hit(&mut self, policy: &str, subject: &str, cost: u64) -> Result<HitDecision> {
        let route = Route::Key(subject.as_bytes().to_vec());
        self.module("RL.HIT", Call::to(cmd::hit(policy, subject, cost), route))
    }

    /// `RL.POLICY SET name limiter...` (on every primary of a cluster).
    pub fn policy_set(&mut self, name: &str, limiters: &[PolicyLimiter]) -> Result<()> {
        let route = Route::AllPrimaries(Combine::AllSucceeded);
        let _: Value = self.module(
            "RL.POLICY",
            Call::to(cmd::policy_set(name, limiters), route),
        )?;
        Ok(())
    }

    /// `RL.POLICY GET name`: the definition's words, `None` when there is none.
    pub fn policy_get(&mut self, name: &str) -> Result<Option<Vec<String>>> {
        self.module("RL.POLICY", Call::to(cmd::policy_get(name), Route::OneNode))
    }

    /// `RL.POLICY DEL name`: whether it existed (on any primary of a cluster).
    pub fn policy_del(&mut self, name: &str) -> Result<bool> {
        let route = Route::AllPrimaries(Combine::Sum);
        let n: i64 = self.module("RL.POLICY", Call::to(cmd::policy_del(name), route))?;
        Ok(n > 0)
    }

    /// `RL.POLICY LIST cursor [COUNT n]`: one page; start with `"0"`, stop when the page's
    /// cursor is `"0"`.
    pub fn policy_list(&mut self, cursor: &str, count: Option<u32>) -> Result<PolicyPage> {
        self.module(
            "RL.POLICY",
            Call::to(cmd::policy_list(cursor, count), Route::OneNode),
        )
    }

    /// Every policy, page by page.
    pub fn policy_list_all(&mut self) -> Result<Vec<PolicyInfo>> {
        let mut out = Vec::new();
        let mut cursor = "0".to_string();
        loop {
            let page = self.policy_list(&cursor, Some(100))?;
            out.extend(page.policies);
            if page.cursor == "0" {
                return Ok(out);
            }
            cursor = page.cursor;
        }
    }

    /// `RL.TOP [COUNT n] [POLICY name]`: who is refused most (from every primary of a
    /// cluster, merged).
    pub fn top(&mut self, count: Option<u32>, policy: Option<&str>) -> Result<Vec<TopEntry>> {
        let route = Route::AllPrimaries(Combine::Arrays);
        let entries = self.module("RL.TOP", Call::to(cmd::top(count, policy), route))?;
        Ok(call::merge_top(entries, count))
    }

    /// `CL.THROTTLE key max_burst count_per_period period_s quantity`, in redis-cell's form.
    pub fn throttle(
        &mut self,
        key: &str,
        max_burst: u64,
        count_per_period: u64,
        period_s: u64,
        quantity: u64,
    ) -> Result<Throttle> {
        let c = cmd::throttle(key, max_burst, count_per_period, period_s, quantity);
        self.module("CL.THROTTLE", Call::new(c))
    }
}
