"""redis-ratelimit from Python with redis-py: a typed reply, the HTTP headers, a limiter that
remembers refusals locally, and WSGI/ASGI middlewares. Sync and asyncio, standalone or cluster.

The recipe behind every function is in docs/clients.md; examples/python/test_examples.py runs
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

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple, Union

# The five-field reply: [allowed, limit, remaining, retry_after_ms, reset_after_ms].
NEVER = -1  # retry_after_ms of a request whose cost is above what the limiter can ever hold


def ceil_s(ms: int) -> int:
    """Milliseconds to whole seconds, rounded up (a client told to wait 0.7 s waits 1, not 0)."""
    return -(-ms // 1000)


@dataclass(frozen=True)
class Decision:
    """One reply of RL.SLIDE, RL.TOKEN, RL.LEAKY, RL.FIXED, RL.SUBWIN, RL.PEEK, RL.REFUND or
    RL.CHARGE (docs/commands.md, "The reply")."""

    allowed: bool
    limit: int  # the deciding window's limit, or the bucket's size (RL.LEAKY: bookings from idle)
    remaining: int  # units available now, in the tightest window
    retry_after_ms: int  # refused: exact wait, or NEVER; allowed: 0, or RL.LEAKY's delay
    reset_after_ms: int  # until the limiter is empty again (the key's PTTL)
    parts: Tuple["Decision", ...] = ()  # RL.ALL: each limiter's own five fields, in key order
    lease_id: Optional[bytes] = None  # RL.ACQUIRE, or its entry in RL.ALL: the lease, None if refused
    refused_by: Optional[bytes] = None  # RL.HIT: the policy's limiter that refused, None if allowed

    @classmethod
    def from_reply(cls, reply) -> Optional["Decision"]:
        """The typed reply; None for the nil of RL.PEEK/RL.REFUND/RL.CHARGE on a missing key.
        RL.ALL's reply (five fields, then one five-field array per key) fills `parts`."""
        if reply is None:
            return None
        if not isinstance(reply, (list, tuple)) or len(reply) < 5:
            raise ValueError(f"not a five-field rate limiter reply: {reply!r}")
        head, rest = reply[:5], reply[5:]
        if any(isinstance(x, (list, tuple)) for x in head):
            raise ValueError(f"not a five-field rate limiter reply: {reply!r}")
        refused_by = None
        if len(rest) >= 2 and not isinstance(rest[0], (list, tuple)):
            # RL.HIT: the refusing limiter's name (nil when allowed), then each limiter's fields.
            refused_by, rest = rest[0], rest[1:]
        lease_id = None
        if len(rest) == 1 and not isinstance(rest[0], (list, tuple)):
            # RL.ACQUIRE's sixth field: the lease id (nil when refused).
            lease_id, rest = rest[0], ()
        if any(not isinstance(x, (list, tuple)) or len(x) not in (5, 6) for x in rest):
            raise ValueError(f"not an RL.ALL reply: {reply!r}")
        allowed, limit, remaining, retry, reset = (int(x) for x in head)
        parts = tuple(cls.from_reply(x) for x in rest)
        return cls(allowed == 1, limit, remaining, retry, reset, parts, lease_id, refused_by)

    @property
    def never(self) -> bool:
        """Refused for good: the cost is above the limit, waiting does not help."""
        return not self.allowed and self.retry_after_ms == NEVER

    @property
    def delay_ms(self) -> int:
        """How long an allowed call must wait before acting (RL.LEAKY; 0 for the others)."""
        return self.retry_after_ms if self.allowed else 0

    @property
    def retry_after_s(self) -> Optional[int]:
        """Retry-After in seconds, rounded up; None when allowed or never."""
        if self.allowed or self.never:
            return None
        return max(1, ceil_s(self.retry_after_ms))


@dataclass(frozen=True)
class Limit:
    """A limiter's configuration: its command and the parameters after the key.

    Limit("RL.SLIDE", 10, 1000, 100, 60000, name="api") is RL.SLIDE key 10 1000 100 60000.
    """

    command: str
    params: Tuple[Union[int, str], ...]
    name: str = "default"

    def __init__(self, command: str, *params: Union[int, str], name: str = "default"):
        object.__setattr__(self, "command", command.upper())
        object.__setattr__(self, "params", tuple(params))
        object.__setattr__(self, "name", name)

    def args(self, key: str, cost: int = 1) -> list:
        words = [self.command, key, *self.params]
        if cost != 1:
            words += ["COST", cost]
        return words

    def windows(self) -> list:
        """The (quota, window_ms) pairs this call enforces, for RateLimit-Policy."""
        nums = []
        for p in self.params:
            if isinstance(p, str) and not p.lstrip("-").isdigit():
                break  # an option word (BURST, MAXDELAY, ALIGN, ...)
            nums.append(int(p))
        if self.command == "RL.SLIDE":
            return [(nums[i], nums[i + 1]) for i in range(0, len(nums) - 1, 2)]
        return [(nums[0], nums[1])]  # limit window_ms [...] for every other kind

    def window_name(self, window_ms: int) -> str:
        return self.name if len(self.windows()) == 1 else f"{self.name}-{window_ms}ms"


def headers(d: Decision, limit: Limit) -> list:
    """The response headers for one decision (docs/clients.md, "Headers")."""
    windows = limit.windows()
    # RL.SLIDE with several windows: the reply's limit is the deciding window's; ties go to
    # the longer window, as the module breaks them.
    deciding = max((w for w in windows if w[0] == d.limit), key=lambda w: w[1], default=None)
    if deciding is None:  # RL.TOKEN/RL.LEAKY report a bucket size, not the policy's quota
        deciding = windows[0]
    policy = ", ".join(f'"{limit.window_name(ms)}";q={q};w={ceil_s(ms)}' for q, ms in windows)
    current = f'"{limit.window_name(deciding[1])}";r={d.remaining}'
    if not d.never:
        current += f";t={ceil_s(d.reset_after_ms)}"
    out = [
        ("X-RateLimit-Limit", str(d.limit)),
        ("X-RateLimit-Remaining", str(d.remaining)),
        ("X-RateLimit-Reset", str(ceil_s(d.reset_after_ms))),
        ("RateLimit-Policy", policy),
        ("RateLimit", current),
    ]
    if d.retry_after_s is not None:
        out.append(("Retry-After", str(d.retry_after_s)))
    return out


class RefusalCache:
    """Refusals remembered per key until their retry_after_ms has passed, so that a refused
    caller is refused again locally, without a round trip (the idea of the sub-interval
    limiter in ../shared/seeds/002: refused traffic, the heaviest under abuse, stays local).

    Conservative: an RL.REFUND elsewhere may free units earlier; this process keeps refusing
    until the wait it was told has passed. Bounded: at most `max_keys` keys."""

    def __init__(self, max_keys: int = 100_000, clock: Callable[[], float] = time.monotonic):
        self._until: dict = {}  # key -> (deadline in clock seconds, cost, Decision, time stored)
        self._max = max_keys
        self._clock = clock
        self._lock = threading.Lock()

    def check(self, key: str, cost: int) -> Optional[Decision]:
        """The remembered refusal, its waits shortened by the time passed, or None."""
        with self._lock:
            entry = self._until.get(key)
            if entry is None:
                return None
            deadline, refused_cost, d, stored = entry
            now = self._clock()
            if now >= deadline:
                del self._until[key]
                return None
        if cost < refused_cost:
            return None  # a smaller request may fit: ask Redis
        passed = int((now - stored) * 1000)
        return Decision(
            False,
            d.limit,
            d.remaining,
            max(1, d.retry_after_ms - passed),
            max(0, d.reset_after_ms - passed),
        )

    def remember(self, key: str, cost: int, d: Decision) -> None:
        if d.allowed or d.never or d.retry_after_ms <= 0:
            return
        now = self._clock()
        with self._lock:
            if len(self._until) >= self._max:
                for k in [k for k, e in self._until.items() if e[0] <= now]:
                    del self._until[k]
                while len(self._until) >= self._max:  # still full: drop the oldest
                    del self._until[next(iter(self._until))]
            self._until[key] = (now + d.retry_after_ms / 1000, cost, d, now)

    def __len__(self) -> int:
        return len(self._until)


def _is_cluster(client) -> bool:
    return hasattr(client, "get_node_from_key")


def _peek_args(client, key: str, replica: bool) -> Tuple[list, dict]:
    """RL.PEEK, sent to a replica of the key's slot when asked: redis-py keeps its own list of
    read-only commands, which has no module command, so route it by hand. The client must be
    made with a load_balancing_strategy (it then sends READONLY on every connection)."""
    if replica and _is_cluster(client):
        node = client.get_node_from_key(key, replica=True)
        if node is not None:
            return ["RL.PEEK", key], {"target_nodes": node}
    return ["RL.PEEK", key], {}


class Limiter:
    """A limiter over a redis.Redis or redis.cluster.RedisCluster client (sync)."""

    def __init__(self, client, limit: Limit, cache: Optional[RefusalCache] = None):
        self.client, self.limit, self.cache = client, limit, cache

    def hit(self, key: str, cost: int = 1) -> Decision:
        if self.cache is not None:
            cached = self.cache.check(key, cost)
            if cached is not None:
                return cached
        d = Decision.from_reply(self.client.execute_command(*self.limit.args(key, cost)))
        if self.cache is not None:
            self.cache.remember(key, cost, d)
        return d

    def peek(self, key: str, replica: bool = False) -> Optional[Decision]:
        args, opts = _peek_args(self.client, key, replica)
        return Decision.from_reply(self.client.execute_command(*args, **opts))

    def refund(self, key: str, cost: int = 1) -> Optional[Decision]:
        return Decision.from_reply(self.client.execute_command("RL.REFUND", key, "COST", cost))

    def charge(self, key: str, cost: int) -> Optional[Decision]:
        return Decision.from_reply(self.client.execute_command("RL.CHARGE", key, "COST", cost))


def _hit_args(policy: str, subject: str, cost: int) -> list:
    return ["RL.HIT", policy, subject] + (["COST", cost] if cost != 1 else [])


def hit(client, policy: str, subject: str, cost: int = 1) -> Decision:
    """RL.HIT: one decision under a policy the server keeps (RL.POLICY SET), on keys derived
    from the subject. `refused_by` names the limiter that refused; `parts` holds each limiter's
    fields (an ACQUIRE limiter's with its lease id). In Redis Cluster, redis-py routes it by the
    subject, the key RL.HIT declares; set the policy on every primary first
    (`execute_command("RL.POLICY", "SET", ..., target_nodes=client.get_primaries())`: a
    keyless module command with the PRIMARIES flag is not dispatched by redis-py 6)."""
    return Decision.from_reply(client.execute_command(*_hit_args(policy, subject, cost)))


async def hit_async(client, policy: str, subject: str, cost: int = 1) -> Decision:
    """`hit` over redis.asyncio clients."""
    return Decision.from_reply(await client.execute_command(*_hit_args(policy, subject, cost)))


class AsyncLimiter:
    """The same over redis.asyncio.Redis or redis.asyncio.cluster.RedisCluster."""

    def __init__(self, client, limit: Limit, cache: Optional[RefusalCache] = None):
        self.client, self.limit, self.cache = client, limit, cache

    async def hit(self, key: str, cost: int = 1) -> Decision:
        if self.cache is not None:
            cached = self.cache.check(key, cost)
            if cached is not None:
                return cached
        d = Decision.from_reply(await self.client.execute_command(*self.limit.args(key, cost)))
        if self.cache is not None:
            self.cache.remember(key, cost, d)
        return d

    async def peek(self, key: str, replica: bool = False) -> Optional[Decision]:
        args, opts = _peek_args(self.client, key, replica)
        return Decision.from_reply(await self.client.execute_command(*args, **opts))

    async def refund(self, key: str, cost: int = 1) -> Optional[Decision]:
        reply = await self.client.execute_command("RL.REFUND", key, "COST", cost)
        return Decision.from_reply(reply)


def _refusal_body(d: Decision) -> bytes:
    if d.never:
        return b"request larger than the rate limit allows\n"
    return b"rate limited\n"


class WSGIRateLimit:
    """WSGI middleware: one limiter call per request, its headers on every response, 429 when
    refused, RL.LEAKY's delay waited before the request goes on."""

    def __init__(self, app, limiter: Limiter, key: Callable[[dict], str], cost=lambda env: 1):
        self.app, self.limiter, self.key, self.cost = app, limiter, key, cost

    def __call__(self, environ, start_response):
        d = self.limiter.hit(self.key(environ), self.cost(environ))
        hdrs = headers(d, self.limiter.limit)
        if not d.allowed:
            start_response("429 Too Many Requests", [("Content-Type", "text/plain")] + hdrs)
            return [_refusal_body(d)]
        if d.delay_ms:
            time.sleep(d.delay_ms / 1000)

        def with_headers(status, response_headers, exc_info=None):
            return start_response(status, list(response_headers) + hdrs, exc_info)

        return self.app(environ, with_headers)


class ASGIRateLimit:
    """ASGI middleware (HTTP scopes), the same rules over an AsyncLimiter."""

    def __init__(self, app, limiter: AsyncLimiter, key: Callable[[dict], str], cost=lambda s: 1):
        self.app, self.limiter, self.key, self.cost = app, limiter, key, cost

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        d = await self.limiter.hit(self.key(scope), self.cost(scope))
        hdrs = [(k.lower().encode(), v.encode()) for k, v in headers(d, self.limiter.limit)]
        if not d.allowed:
            await send(
                {
                    "type": "http.response.start",
                    "status": 429,
                    "headers": [(b"content-type", b"text/plain")] + hdrs,
                }
            )
            await send({"type": "http.response.body", "body": _refusal_body(d)})
            return
        if d.delay_ms:
            await asyncio.sleep(d.delay_ms / 1000)

        async def with_headers(message):
            if message["type"] == "http.response.start":
                message = dict(message, headers=list(message.get("headers", [])) + hdrs)
            await send(message)

        await self.app(scope, receive, with_headers)


def keyed(prefix: str, header: Sequence[str] = ("REMOTE_ADDR",)) -> Callable[[dict], str]:
    """A key function for WSGI: prefix + the first of the environ entries present."""

    def key(environ: dict) -> str:
        for h in header:
            if environ.get(h):
                return f"{prefix}{environ[h]}"
        return f"{prefix}unknown"

    return key
