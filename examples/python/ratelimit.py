"""redis-ratelimit from Python with redis-py: a typed reply, the HTTP headers, a limiter that
remembers refusals locally, and WSGI/ASGI middlewares. Sync and asyncio, standalone or cluster.

All of it is the package redis-ratelimit-client (clients/python, `pip install ./clients/python`
from a clone); this file is a thin use of it, keeping the spelling of docs/clients.md: a limit
is written as its command and the words after the key. examples/python/test_examples.py runs
it all against real servers (`make test-examples`).

    import redis
    from ratelimit import Limit, Limiter, headers

    r = redis.Redis()
    per_ip = Limiter(r, Limit("RL.SLIDE", 100, 60000, name="ip"))
    d = per_ip.hit("ip:203.0.113.9")      # Decision(allowed=True, limit=100, remaining=99, ...)
    headers(d, per_ip.limit)              # [("X-RateLimit-Limit", "100"), ...]

In Redis Cluster, use redis.cluster.RedisCluster (or redis.asyncio.cluster.RedisCluster) as the
client: redis-py learns each RL.* command's key position from COMMAND and routes it. To read
with RL.PEEK from a replica, see `peek(..., replica=True)`.
"""

from __future__ import annotations

import weakref
from typing import Any, Union

from redis_ratelimit_client import (  # noqa: F401  (the names this example has always had)
    NEVER,
    ASGIRateLimit,
    AsyncLimiter,
    AsyncRateLimit,
    Decision,
    Limiter,
    PolicyLimiter,
    RateLimit,
    RefusalCache,
    Spec,
    WSGIRateLimit,
    ceil_s,
    from_command,
    headers,
    keyed,
)


def Limit(command: str, *params: Union[int, str], name: str = "default") -> Spec:
    """A limiter's configuration: its command and the parameters after the key.

    Limit("RL.SLIDE", 10, 1000, 100, 60000, name="api") is RL.SLIDE key 10 1000 100 60000."""
    return from_command(command, *params, name=name)


# One RateLimit per redis client, so that the module is checked once per client.
_sync: "weakref.WeakKeyDictionary[Any, RateLimit]" = weakref.WeakKeyDictionary()
_async: "weakref.WeakKeyDictionary[Any, AsyncRateLimit]" = weakref.WeakKeyDictionary()


def hit(client: Any, policy: str, subject: str, cost: int = 1) -> Decision:
    """RL.HIT: one decision under a policy the server keeps (RL.POLICY SET), on keys derived
    from the subject. `refused_by` names the limiter that refused; `parts` holds each
    limiter's fields (an ACQUIRE limiter's with its lease id). In Redis Cluster, redis-py
    routes it by the subject, the key RL.HIT declares; set the policy on every primary first
    (RateLimit(client).policy_set(...) does)."""
    rl = _sync.setdefault(client, RateLimit(client))
    return rl.hit(policy, subject, cost=None if cost == 1 else cost)


async def hit_async(client: Any, policy: str, subject: str, cost: int = 1) -> Decision:
    """`hit` over redis.asyncio clients."""
    rl = _async.setdefault(client, AsyncRateLimit(client))
    return await rl.hit(policy, subject, cost=None if cost == 1 else cost)
