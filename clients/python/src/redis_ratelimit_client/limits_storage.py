"""Storages for the ``limits`` library (and so for Flask-Limiter and SlowAPI) that decide
with the module's commands: each decision is one command, and exact.

    import redis_ratelimit_client          # registers the schemes below with limits
    Limiter(app, key_func=..., storage_uri="ratelimit://127.0.0.1:6379", strategy="moving-window")

Schemes: ``ratelimit://[user:password@]host:port[/db]`` and
``ratelimit+cluster://host:port[,host:port...]`` (``RateLimitStorage``), and for
``limits.aio``, following its ``async+`` convention, ``async+ratelimit://`` and
``async+ratelimit+cluster://`` (``AsyncRateLimitStorage``). ``?fallback=lua`` in the URI
(or ``fallback="lua"`` among the storage options) runs the Lua twins where the module cannot
be loaded. Other storage options go to the redis-py client (``socket_timeout``, ``ssl``, ...),
as with limits' own redis storage; ``key_prefix`` (default ``LIMITS-RL``) prefixes every key.

How each strategy maps (the numbers are limits' own: ``limit`` is the item's amount,
``expiry`` its window in seconds):

- **moving-window**: ``acquire_entry`` is ``RL.SLIDE key limit expiry*1000 COST amount``,
  the exact sliding log: allowed if and only if the units in the last ``expiry`` seconds plus
  ``amount`` fit, and only then recorded, as limits' own storages decide. ``get_moving_window``
  answers (start, count) with ``RL.PEEK key COST n``: the count comes from every such reply,
  and with ``n`` = remaining + 1 the reply's wait is exactly when the oldest record leaves,
  which is the start limits wants (its reset is start + expiry). The remaining count this
  context saw last on the key (after ``acquire_entry``, as Flask-Limiter and SlowAPI call it
  just before) is the guess for ``n``, checked against the reply: one call when the guess
  holds or the window is full or empty, a second when it does not.
- **fixed-window**: limits' ``FixedWindowRateLimiter`` counts every hit, refused ones too
  (``incr`` returns the count and the strategy compares it with the limit itself), so
  ``incr`` is ``RL.FIXED key 4294967295 expiry*1000 COST amount``, a counter the limit never
  stops, and returns 4294967295 - remaining: exactly limits' count, in a window that opens
  at the first hit and lasts ``expiry``, as limits' redis storage has it. ``get`` and
  ``get_expiry`` read one ``RL.PEEK``: the count and the window's stored end. limits asks
  them in two calls (``get_window_stats``); the first call's reply is kept for the second
  on the same key in the same context (thread or asyncio task), within a second, so that
  the stats come from one reply and one round trip.
- **sliding-window-counter**: not claimed (``SlidingWindowCounterSupport`` is not
  implemented; limits then refuses the strategy with this storage). The strategy is limits'
  formula over two counters: ``previous_count * previous_ttl / expiry + current_count``,
  floored, with the counters and their expiries read back from the storage
  (``get_sliding_window``), from which limits computes ``test`` and ``get_window_stats``
  itself. The module keeps no such pair to read: RL.SUBWIN with one sub-interval per window
  answers only its combined estimate, rounded up and aligned to the epoch, which differs
  from limits' floor by up to one unit, so ``hit`` and limits' own ``test`` and stats would
  disagree. Answering it from the exact log instead (previous count 0, current count the
  log's) would be consistent, but it would be the moving window under another name: after a
  full window of hits, limits' counter still weighs the previous window, while the log
  refuses or admits exactly, so the same traffic gets other answers than with any of
  limits' own storages. Use ``moving-window``: exact, one command per hit.

What limits' interface cannot carry (the module knows it; limits has no field for it):

- the exact retry time of a refusal: ``hit`` returns a bool, and the headers' reset is
  limits' (fixed window: the window's end, exact; moving window: when the oldest record
  leaves, exact, but from a second read after the hit);
- a refusal that counts nothing: in the fixed window limits counts refused hits, and this
  storage keeps that count to answer as limits does; RL.FIXED with the real limit would not
  count them;
- costs above what a window holds are refused for good (``retry_after_ms`` -1): limits
  cannot say "never";
- windows longer than 31 days (limits' ``year`` is 360 days) are beyond the module's range
  and raise ``ValueError``;
- ``get_moving_window`` is a read after the hit, not the hit's own reply: traffic between the
  two shows in the stats (as with limits' own storages).

With ``fallback="lua"`` on a server without the module, the twins decide exactly as the
module would (``RL.SLIDE``, ``RL.FIXED``); reads use the twin with ``COST 0``, which records
nothing. There is no ``RL.PEEK`` in Lua, so the moving window's start is its newest record
(the reset limits computes is then when the window is empty: later than the module's
answer, never earlier), and ``get``/``get_expiry`` read the fixed window's length from
limits' key (``.../<multiples>/<granularity>``), which the twin's call needs.
"""

from __future__ import annotations

import contextvars
import re
import time
import urllib.parse
from typing import Any, Generator, List, Optional, Tuple

import limits.aio.storage
import limits.storage
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from limits.limits import TIME_TYPES

from . import client as _client
from .client import AsyncRateLimit, RateLimit
from .decision import Decision

__all__ = ["RateLimitStorage", "AsyncRateLimitStorage", "COUNTER"]

#: RL.FIXED's largest limit: the fixed window counts up to it, so it never refuses.
COUNTER = 4294967295
#: The module's longest window.
MAX_WINDOW_S = 2678400
PREFIX = "LIMITS-RL"

# The last reply this context (a thread, or an asyncio task) read on a key:
# (what, prefixed key, value, time.monotonic() when read).
_memo: contextvars.ContextVar[Optional[Tuple[str, str, Any, float]]] = contextvars.ContextVar(
    "redis_ratelimit_client_limits_memo", default=None
)
_MEMO_S = 1.0

Plan = Generator[_client._Call, Any, Any]


def _window_ms(expiry: int) -> int:
    if not 1 <= expiry <= MAX_WINDOW_S:
        raise ValueError(
            f"a window of {expiry} s is outside the ratelimit module's range, 1 s to 31 days "
            f"({MAX_WINDOW_S} s)"
        )
    return int(expiry) * 1000


def _window_from_key(key: str) -> int:
    """The window of a key limits made (``.../<amount>/<multiples>/<granularity>``), in ms:
    what a Lua twin's read needs, having no RL.PEEK."""
    parts = key.rsplit("/", 2)
    if len(parts) != 3 or parts[2] not in TIME_TYPES or not parts[1].isdigit():
        raise ValueError(f"not a key of limits' form, with its window at the end: {key!r}")
    return _window_ms(int(parts[1]) * TIME_TYPES[parts[2]].seconds)


def _client_options(uri: str, options: dict) -> Tuple[str, bool, Optional[str], dict]:
    """Splits a storage URI into redis-py's: (uri for redis-py, cluster?, fallback, options)."""
    parsed = urllib.parse.urlsplit(uri)
    scheme = parsed.scheme.removeprefix("async+")
    if scheme not in ("ratelimit", "ratelimit+cluster"):
        raise ValueError(f"not a ratelimit storage URI: {uri!r}")
    query = urllib.parse.parse_qs(parsed.query)
    fallback = options.pop("fallback", None)
    if "fallback" in query:
        fallback = query.pop("fallback")[-1]
    rest = urllib.parse.urlencode(query, doseq=True)
    redis_uri = urllib.parse.urlunsplit(("redis", parsed.netloc, parsed.path, rest, ""))
    return redis_uri, scheme == "ratelimit+cluster", fallback, options


def _cluster_nodes(uri: str, node_class: Any) -> Tuple[list, dict]:
    parsed = urllib.parse.urlsplit(uri)
    auth = {}
    if parsed.username:
        auth["username"] = urllib.parse.unquote(parsed.username)
    if parsed.password:
        auth["password"] = urllib.parse.unquote(parsed.password)
    nodes = []
    for location in parsed.netloc.rpartition("@")[2].split(","):
        host, _, port = location.strip().rpartition(":")
        nodes.append(node_class(host or "localhost", int(port or 6379)))
    return nodes, auth


def _sync_client(uri: str, options: dict) -> Tuple[Any, Optional[str]]:
    redis_uri, cluster, fallback, options = _client_options(uri, options)
    if cluster:
        nodes, auth = _cluster_nodes(redis_uri, redis.cluster.ClusterNode)
        return redis.cluster.RedisCluster(startup_nodes=nodes, **auth, **options), fallback
    return redis.Redis.from_url(redis_uri, **options), fallback


def _async_client(uri: str, options: dict) -> Tuple[Any, Optional[str]]:
    redis_uri, cluster, fallback, options = _client_options(uri, options)
    if cluster:
        nodes, auth = _cluster_nodes(redis_uri, redis.asyncio.cluster.ClusterNode)
        client = redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, **auth, **options)
        return client, fallback
    return redis.asyncio.Redis.from_url(redis_uri, **options), fallback


def _remember(what: str, key: str, value: Any) -> None:
    _memo.set((what, key, value, time.monotonic()))


def _recall(what: str, key: str, max_age: Optional[float] = None) -> Any:
    memo = _memo.get()
    if memo is None or memo[0] != what or memo[1] != key:
        return None
    if max_age is not None and time.monotonic() - memo[3] > max_age:
        return None
    return memo[2]


class _Plans:
    """What each method sends and how it reads the replies, written once for the sync and
    the asyncio storage: a plan yields the calls it needs, one at a time, and returns the
    answer. ``module`` is False when the Lua twins answer (``fallback="lua"``)."""

    key_prefix: str

    def _key(self, key: str) -> str:
        return f"{self.key_prefix}:{key}"

    def _incr(self, key: str, expiry: int, amount: int) -> Plan:
        d: Decision = yield _client._fixed(self._key(key), COUNTER, _window_ms(expiry), False, amount, None)
        return COUNTER - d.remaining + (0 if d.allowed else amount)

    def _read_fixed(self, key: str, module: bool) -> Plan:
        """The count and the window's end (absolute seconds, or None for no window) of a
        fixed-window key, from one reply."""
        pk = self._key(key)
        if module:
            d = yield _client._peek(None, pk, None, None, False)
        else:
            d = yield _client._fixed(pk, COUNTER, _window_from_key(key), False, 0, None)
        if d is None or d.limit - d.remaining <= 0:
            return 0, None
        return d.limit - d.remaining, time.time() + d.reset_after_ms / 1000

    def _get(self, key: str, module: bool) -> Plan:
        count, end = yield from self._read_fixed(key, module)
        _remember("expiry", self._key(key), end)
        return count

    def _get_expiry(self, key: str, module: bool) -> Plan:
        pk = self._key(key)
        memo = _memo.get()
        if memo is not None and memo[:2] == ("expiry", pk) and time.monotonic() - memo[3] <= _MEMO_S:
            _memo.set(None)  # one reading, for the get_expiry that follows its get
            end = memo[2]
        else:
            _, end = yield from self._read_fixed(key, module)
        return time.time() if end is None else end

    def _acquire_entry(self, key: str, limit: int, expiry: int, amount: int) -> Plan:
        pk = self._key(key)
        d: Decision = yield _client._slide(pk, limit, _window_ms(expiry), (), amount, None)
        _remember("remaining", pk, d.remaining)
        return d.allowed

    def _get_moving_window(self, key: str, limit: int, expiry: int, module: bool) -> Plan:
        pk = self._key(key)
        window_ms = _window_ms(expiry)
        if not module:
            # No RL.PEEK in Lua: COST 0 reads the count; the start is the newest record's time.
            d = yield _client._slide(pk, limit, window_ms, (), 0, None)
            count = d.limit - d.remaining
            if count <= 0:
                return time.time(), 0
            return time.time() + d.reset_after_ms / 1000 - expiry, count
        guess = _recall("remaining", pk)
        n = guess + 1 if guess is not None and 0 <= guess < limit else 1
        d = None
        for _ in range(3):
            d = yield _client._peek(None, pk, n, None, False)
            if d is None:
                return time.time(), 0
            count = d.limit - d.remaining - (n if d.allowed else 0)
            _remember("remaining", pk, d.limit - count)
            if count <= 0:
                return time.time(), 0
            if not d.allowed and n == d.limit - count + 1:
                # n is one more than what is free: the wait is until the oldest record leaves.
                return time.time() + d.retry_after_ms / 1000 - expiry, count
            n = d.limit - count + 1
        # The window changed under every read: the newest record's time, a later reset.
        assert d is not None
        return time.time() + d.reset_after_ms / 1000 - expiry, count

    def _scan_pattern(self) -> str:
        return re.sub(r"([*?\[\]\\])", r"\\\1", self.key_prefix) + ":*"


def _sync_drive(rl: RateLimit, plan: Plan) -> Any:
    try:
        call = next(plan)
        while True:
            call = plan.send(rl._run(call))
    except StopIteration as done:
        return done.value


async def _async_drive(rl: AsyncRateLimit, plan: Plan) -> Any:
    try:
        call = next(plan)
        while True:
            call = plan.send(await rl._run(call))
    except StopIteration as done:
        return done.value


_BASE_EXCEPTIONS = (redis.RedisError, redis.exceptions.RedisClusterException)


class RateLimitStorage(_Plans, limits.storage.Storage, limits.storage.MovingWindowSupport):
    """limits' storage on the module: fixed window and moving window, each decision one
    command (see the module's docstring for the mapping and the gaps)."""

    STORAGE_SCHEME = ["ratelimit", "ratelimit+cluster"]
    DEPENDENCIES: List[str] = []
    PREFIX = PREFIX

    def __init__(
        self,
        uri: str,
        wrap_exceptions: bool = False,
        key_prefix: str = PREFIX,
        **options: Any,
    ) -> None:
        """:param uri: ``ratelimit://host:port[/db][?fallback=lua]`` or
        ``ratelimit+cluster://host:port[,host:port...]``
        :param key_prefix: prefixes every key (``<prefix>:<limits' key>``)
        :param options: ``fallback="lua"``, and the rest to the redis-py client"""
        super().__init__(uri, wrap_exceptions=wrap_exceptions)
        self.key_prefix = key_prefix
        self.storage, fallback = _sync_client(uri, dict(options))
        self.rl = RateLimit(self.storage, fallback=fallback)

    @property
    def base_exceptions(self) -> Any:
        return _BASE_EXCEPTIONS

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        return _sync_drive(self.rl, self._incr(key, expiry, amount))

    def get(self, key: str) -> int:
        return _sync_drive(self.rl, self._get(key, self.rl.module_loaded()))

    def get_expiry(self, key: str) -> float:
        return _sync_drive(self.rl, self._get_expiry(key, self.rl.module_loaded()))

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return _sync_drive(self.rl, self._acquire_entry(key, limit, expiry, amount))

    def get_moving_window(self, key: str, limit: int, expiry: int) -> Tuple[float, int]:
        plan = self._get_moving_window(key, limit, expiry, self.rl.module_loaded())
        return _sync_drive(self.rl, plan)

    def check(self) -> bool:
        try:
            return bool(self.storage.ping())
        except Exception:
            return False

    def clear(self, key: str) -> None:
        self.storage.delete(self._key(key))

    def reset(self) -> Optional[int]:
        """Deletes every key under the prefix (SCAN, on every primary of a cluster)."""
        deleted = 0
        batch: List[Any] = []
        for key in self.storage.scan_iter(match=self._scan_pattern(), count=1000):
            batch.append(key)
            if len(batch) == 500:
                deleted += int(self.storage.delete(*batch))
                batch = []
        if batch:
            deleted += int(self.storage.delete(*batch))
        return deleted


class AsyncRateLimitStorage(
    _Plans, limits.aio.storage.Storage, limits.aio.storage.MovingWindowSupport
):
    """``RateLimitStorage`` for ``limits.aio``, over redis-py's asyncio clients."""

    STORAGE_SCHEME = ["async+ratelimit", "async+ratelimit+cluster"]
    DEPENDENCIES: List[str] = []
    PREFIX = PREFIX

    def __init__(
        self,
        uri: str,
        wrap_exceptions: bool = False,
        key_prefix: str = PREFIX,
        **options: Any,
    ) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions)
        self.key_prefix = key_prefix
        self.storage, fallback = _async_client(uri, dict(options))
        self.rl = AsyncRateLimit(self.storage, fallback=fallback)

    @property
    def base_exceptions(self) -> Any:
        return _BASE_EXCEPTIONS

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        return await _async_drive(self.rl, self._incr(key, expiry, amount))

    async def get(self, key: str) -> int:
        return await _async_drive(self.rl, self._get(key, await self.rl.module_loaded()))

    async def get_expiry(self, key: str) -> float:
        plan = self._get_expiry(key, await self.rl.module_loaded())
        return await _async_drive(self.rl, plan)

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return await _async_drive(self.rl, self._acquire_entry(key, limit, expiry, amount))

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> Tuple[float, int]:
        plan = self._get_moving_window(key, limit, expiry, await self.rl.module_loaded())
        return await _async_drive(self.rl, plan)

    async def check(self) -> bool:
        try:
            return bool(await self.storage.ping())
        except Exception:
            return False

    async def clear(self, key: str) -> None:
        await self.storage.delete(self._key(key))

    async def reset(self) -> Optional[int]:
        deleted = 0
        batch: List[Any] = []
        async for key in self.storage.scan_iter(match=self._scan_pattern(), count=1000):
            batch.append(key)
            if len(batch) == 500:
                deleted += int(await self.storage.delete(*batch))
                batch = []
        if batch:
            deleted += int(await self.storage.delete(*batch))
        return deleted
