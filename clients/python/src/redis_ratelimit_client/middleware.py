"""One limiter per request: a ``Limiter`` (a spec over a client, with an optional local
refusal cache), and WSGI and ASGI middlewares that answer 429 with the headers of
docs/clients.md and wait RL.LEAKY's delay before the request goes on.

    import redis
    from redis_ratelimit_client import Limiter, RefusalCache, Slide, WSGIRateLimit, keyed

    per_ip = Limiter(redis.Redis(), Slide(100, 60000, name="ip"), RefusalCache())
    app = WSGIRateLimit(app, per_ip, key=keyed("ip:"))
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .client import AsyncRateLimit, Key, RateLimit
from .decision import Decision
from .headers import Header, headers, headers_all, headers_plain
from .specs import Spec


class RefusalCache:
    """Refusals remembered per key until their ``retry_after_ms`` has passed, so that a
    refused caller is refused again locally, without a round trip: under abuse most
    requests are refused, and each would cost a round trip that only confirms the last one.
    The idea comes from the sub-interval limiter of senderista/sliding-window-rate-limiter,
    which reads Redis once per sub-interval (docs/clients.md, "The local refusal cache").

    - It never admits what Redis would refuse: it only refuses. A request of a smaller cost
      than the one refused asks Redis (it may fit).
    - Conservative: an RL.REFUND elsewhere may free units earlier; this process keeps
      refusing until the wait it was told has passed.
    - Per process and bounded: at most ``max_keys`` keys, expired entries swept first.
    - ``never`` and allowed replies are not remembered."""

    def __init__(self, max_keys: int = 100_000, clock: Callable[[], float] = time.monotonic):
        # key -> (deadline in clock seconds, cost refused, the refusal, when it was stored)
        self._until: Dict[Key, Tuple[float, int, Decision, float]] = {}
        self._max = max_keys
        self._clock = clock
        self._lock = threading.Lock()

    def check(self, key: Key, cost: int) -> Optional[Decision]:
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
            return None
        passed = int((now - stored) * 1000)
        return Decision(
            False,
            d.limit,
            d.remaining,
            max(1, d.retry_after_ms - passed),
            max(0, d.reset_after_ms - passed),
        )

    def remember(self, key: Key, cost: int, d: Decision) -> None:
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


def _cost_of(spec: Spec, cost: Optional[int]) -> int:
    if cost is not None:
        return cost
    return 1 if spec.spec_cost is None else spec.spec_cost


class Limiter:
    """One limiter (a spec: its kind, parameters and name) over a ``RateLimit``, or over a
    redis-py client, which it wraps in one."""

    def __init__(self, client: Any, spec: Spec, cache: Optional[RefusalCache] = None) -> None:
        self.rl = client if isinstance(client, RateLimit) else RateLimit(client)
        self.spec, self.cache = spec, cache

    @property
    def limit(self) -> Spec:
        """The spec (the name the examples of docs/clients.md use)."""
        return self.spec

    def hit(self, key: Key, cost: Optional[int] = None) -> Decision:
        """One decision for ``key``; from the refusal cache when it remembers a refusal."""
        units = _cost_of(self.spec, cost)
        if self.cache is not None:
            cached = self.cache.check(key, units)
            if cached is not None:
                return cached
        d = self.rl.decide(key, self.spec, cost=cost)
        if self.cache is not None:
            self.cache.remember(key, units, d)
        return d

    def headers(self, d: Decision) -> List[Header]:
        return headers(d, self.spec)

    def peek(self, key: Key, replica: bool = False) -> Optional[Decision]:
        return self.rl.peek(key, replica=replica)

    def refund(self, key: Key, cost: Optional[int] = None) -> Optional[Decision]:
        return self.rl.refund(key, cost=cost)

    def charge(self, key: Key, cost: int) -> Optional[Decision]:
        return self.rl.charge(key, cost)


class AsyncLimiter:
    """``Limiter`` over an ``AsyncRateLimit``, or over an asyncio redis-py client."""

    def __init__(self, client: Any, spec: Spec, cache: Optional[RefusalCache] = None) -> None:
        self.rl = client if isinstance(client, AsyncRateLimit) else AsyncRateLimit(client)
        self.spec, self.cache = spec, cache

    @property
    def limit(self) -> Spec:
        return self.spec

    async def hit(self, key: Key, cost: Optional[int] = None) -> Decision:
        units = _cost_of(self.spec, cost)
        if self.cache is not None:
            cached = self.cache.check(key, units)
            if cached is not None:
                return cached
        d = await self.rl.decide(key, self.spec, cost=cost)
        if self.cache is not None:
            self.cache.remember(key, units, d)
        return d

    def headers(self, d: Decision) -> List[Header]:
        return headers(d, self.spec)

    async def peek(self, key: Key, replica: bool = False) -> Optional[Decision]:
        return await self.rl.peek(key, replica=replica)

    async def refund(self, key: Key, cost: Optional[int] = None) -> Optional[Decision]:
        return await self.rl.refund(key, cost=cost)

    async def charge(self, key: Key, cost: int) -> Optional[Decision]:
        return await self.rl.charge(key, cost)


#: Where the middlewares log what a policy's shadow limiter would have refused (INFO).
log = logging.getLogger("redis_ratelimit_client")


def _tell(d: Decision, key: Key) -> None:
    """Logs a shadow limiter's refusal (RL.HIT under a policy with ``SHADOW``)."""
    if d.would_refuse is not None:
        log.info("shadow limiter %s would refuse %r", d.would_refuse, key)


class PolicyLimiter:
    """A policy the server keeps (``RL.HIT policy subject``), for the middlewares as a
    ``Limiter``: ``specs`` are its limiters in the policy's order, for the headers (one
    ``RateLimit`` item each); without them, the ``X-`` headers and ``Retry-After`` only."""

    def __init__(self, client: Any, policy: str, specs: Sequence[Spec] = ()) -> None:
        self.rl = client if isinstance(client, RateLimit) else RateLimit(client)
        self.policy, self.specs = policy, tuple(specs)

    def hit(self, key: Key, cost: Optional[int] = None) -> Decision:
        return self.rl.hit(self.policy, key, cost=cost)

    def headers(self, d: Decision) -> List[Header]:
        if self.specs:
            return headers_all(d, self.specs)
        return headers_plain(d)


def _refusal_body(d: Decision) -> bytes:
    if d.never:
        return b"request larger than the rate limit allows\n"
    return b"rate limited\n"


class WSGIRateLimit:
    """WSGI middleware: one limiter call per request, its headers on every response, 429
    when refused, RL.LEAKY's delay waited before the request goes on. The decision is in
    ``environ["ratelimit.decision"]``; a shadow limiter's refusal is logged (``log``)."""

    def __init__(
        self,
        app: Any,
        limiter: Limiter,
        key: Callable[[dict], Key],
        cost: Callable[[dict], Optional[int]] = lambda environ: None,
    ) -> None:
        self.app, self.limiter, self.key, self.cost = app, limiter, key, cost

    def __call__(self, environ: dict, start_response: Callable) -> Any:
        key = self.key(environ)
        d = self.limiter.hit(key, self.cost(environ))
        # The decision, for the application (its would_refuse, its parts), and its log.
        environ["ratelimit.decision"] = d
        _tell(d, key)
        hdrs = self.limiter.headers(d)
        if not d.allowed:
            start_response("429 Too Many Requests", [("Content-Type", "text/plain")] + hdrs)
            return [_refusal_body(d)]
        if d.delay_ms:
            time.sleep(d.delay_ms / 1000)

        def with_headers(status: str, response_headers: list, exc_info: Any = None) -> Any:
            return start_response(status, list(response_headers) + hdrs, exc_info)

        return self.app(environ, with_headers)


class ASGIRateLimit:
    """ASGI middleware (HTTP scopes): the same rules over an ``AsyncLimiter``."""

    def __init__(
        self,
        app: Any,
        limiter: AsyncLimiter,
        key: Callable[[dict], Key],
        cost: Callable[[dict], Optional[int]] = lambda scope: None,
    ) -> None:
        self.app, self.limiter, self.key, self.cost = app, limiter, key, cost

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        key = self.key(scope)
        d = await self.limiter.hit(key, self.cost(scope))
        # The decision, for the application (Starlette's request.state.ratelimit), and its log.
        scope.setdefault("state", {})["ratelimit"] = d
        _tell(d, key)
        hdrs = [(k.lower().encode(), v.encode()) for k, v in self.limiter.headers(d)]
        if not d.allowed:
            start = {
                "type": "http.response.start",
                "status": 429,
                "headers": [(b"content-type", b"text/plain")] + hdrs,
            }
            await send(start)
            await send({"type": "http.response.body", "body": _refusal_body(d)})
            return
        if d.delay_ms:
            await asyncio.sleep(d.delay_ms / 1000)

        async def with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = dict(message, headers=list(message.get("headers", [])) + hdrs)
            await send(message)

        await self.app(scope, receive, with_headers)


def keyed(prefix: str, header: Sequence[str] = ("REMOTE_ADDR",)) -> Callable[[dict], str]:
    """A key function for WSGI: ``prefix`` + the first of the environ entries present."""

    def key(environ: dict) -> str:
        for h in header:
            if environ.get(h):
                return f"{prefix}{environ[h]}"
        return f"{prefix}unknown"

    return key
