"""A typed client for every command of redis-ratelimit, over redis-py: ``RateLimit`` (sync:
``redis.Redis``, ``redis.cluster.RedisCluster``) and ``AsyncRateLimit`` (``redis.asyncio.Redis``,
``redis.asyncio.cluster.RedisCluster``).

    import redis
    from redis_ratelimit_client import RateLimit

    rl = RateLimit(redis.Redis())
    d = rl.slide("user:42", 100, 60000)   # Decision(allowed=True, limit=100, remaining=99, ...)

Each method is one command, one round trip. The first call checks once that the module is
loaded (``COMMAND INFO RL.SLIDE``; on a cluster, on every primary) and raises
``ModuleNotLoaded`` when it is not; with ``fallback="lua"``, RL.FIXED, RL.SLIDE and RL.TOKEN
then run as the Lua twins (``EVALSHA``, loading the script on ``NOSCRIPT``) and every other
command raises ``FallbackUnsupported``. With the module loaded, the module always answers.

Redis Cluster: redis-py learns each RL.* command's key position from ``COMMAND`` and routes
it by its key (RL.HIT by its subject, RL.ALL by its keys, which must share a slot). The
asyncio cluster client is initialized at the first call, so that its first module command is
not sent to the default node. Server-wide commands go where they belong: RL.POLICY SET and
DEL to every primary, RL.TOP to every primary (merged), RL.POLICY GET and LIST to one node
(the default node, or ``node=``). ``peek(..., replica=True)`` reads on a replica of the
key's slot (the cluster client must be made with a ``load_balancing_strategy``, so that its
connections send ``READONLY``).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import (
    Any,
    AsyncIterator,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.exceptions import NoScriptError

from . import lua
from .decision import (
    Decision,
    Policy,
    Throttle,
    TopEntry,
    decision,
    ok,
    policy_page,
    policy_words,
    top_entries,
)
from .errors import FallbackUnsupported, ModuleNotLoaded
from .specs import Spec, Word

Key = Union[str, bytes]
LeaseId = Union[str, bytes]
Limiters = Union[Mapping[Key, Spec], Sequence[Tuple[Key, Spec]]]

__all__ = ["RateLimit", "AsyncRateLimit", "LeaseRefused"]


class LeaseRefused(Exception):
    """``lease()`` was refused: no unit was free (within ``block_ms`` when given)."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        super().__init__(
            "no unit free: retry after "
            + ("never" if decision.never else f"{decision.retry_after_ms} ms")
        )


@dataclass
class _Call:
    """One command: its words, how to read its reply, and where to send it."""

    name: str
    args: List[Any]
    parse: Callable[[Any], Any]
    lua: Optional[str] = None  # the Lua twin that can answer it (fallback="lua")
    options: Dict[str, Any] = field(default_factory=dict)


def _opt(name: str, value: Any) -> List[Word]:
    return [] if value is None else [name, value]


def _now(now: Optional[int]) -> List[Word]:
    return _opt("NOW", now)


def _limiter(
    kind: str, key: Key, params: List[Any], cost: Optional[int], now: Optional[int]
) -> _Call:
    command = "RL." + kind
    twin = kind.lower() if kind in ("FIXED", "SLIDE", "TOKEN") else None
    args = [command, key, *params, *_opt("COST", cost), *_now(now)]
    return _Call(command, args, decision, twin)


def _slide(key, limit, window_ms, more, cost, now) -> _Call:
    params = [limit, window_ms] + [w for pair in more for w in pair]
    return _limiter("SLIDE", key, params, cost, now)


def _token(key, limit, window_ms, burst, cost, now) -> _Call:
    return _limiter("TOKEN", key, [limit, window_ms, *_opt("BURST", burst)], cost, now)


def _leaky(key, limit, window_ms, maxdelay, burst, cost, now) -> _Call:
    params = [limit, window_ms, *_opt("MAXDELAY", maxdelay), *_opt("BURST", burst)]
    return _limiter("LEAKY", key, params, cost, now)


def _fixed(key, limit, window_ms, align, cost, now) -> _Call:
    return _limiter("FIXED", key, [limit, window_ms] + (["ALIGN"] if align else []), cost, now)


def _subwin(key, limit, window_ms, resolution_ms, cost, now) -> _Call:
    return _limiter("SUBWIN", key, [limit, window_ms, resolution_ms], cost, now)


def _decide(key: Key, spec: Spec, cost: Optional[int], now: Optional[int]) -> _Call:
    if spec.KIND == "THROTTLE":
        raise ValueError("CL.THROTTLE answers in redis-cell's form: use throttle()")
    if spec.KIND == "ACQUIRE":
        return _Call("RL.ACQUIRE", [*spec.args(key, cost), *_now(now)], decision)
    return _limiter(spec.KIND, key, spec.params(), cost if cost is not None else spec.spec_cost, now)


def _acquire(key, limit, lease_ms, id, cost, block_ms, now) -> _Call:
    args = ["RL.ACQUIRE", key, limit, lease_ms, *_opt("ID", id), *_opt("COST", cost)]
    args += [*_opt("BLOCK", block_ms), *_now(now)]
    return _Call("RL.ACQUIRE", args, decision)


def _release(key, lease_id, now) -> _Call:
    return _Call("RL.RELEASE", ["RL.RELEASE", key, lease_id, *_now(now)], decision)


def _extend(key, lease_id, lease_ms, now) -> _Call:
    return _Call("RL.EXTEND", ["RL.EXTEND", key, lease_id, lease_ms, *_now(now)], decision)


def _peek(client: Any, key: Key, cost, now, replica: bool) -> _Call:
    call = _Call("RL.PEEK", ["RL.PEEK", key, *_opt("COST", cost), *_now(now)], Decision.from_reply)
    if replica and hasattr(client, "get_node_from_key"):
        node = client.get_node_from_key(key, replica=True)
        if node is not None:
            call.options["target_nodes"] = node
    return call


def _refund(key, cost, now) -> _Call:
    args = ["RL.REFUND", key, *_opt("COST", cost), *_now(now)]
    return _Call("RL.REFUND", args, Decision.from_reply)


def _charge(key, cost, now) -> _Call:
    args = ["RL.CHARGE", key, "COST", cost, *_now(now)]
    return _Call("RL.CHARGE", args, Decision.from_reply)


def _all(limiters: Limiters, now) -> _Call:
    pairs = list(limiters.items()) if isinstance(limiters, Mapping) else list(limiters)
    if not pairs:
        raise ValueError("RL.ALL needs at least one key and its limiter")
    words: List[Any] = ["RL.ALL", len(pairs), *(k for k, _ in pairs)]
    for _, spec in pairs:
        words += spec.words()
    return _Call("RL.ALL", words + _now(now), decision)


def _hit(policy, subject, cost, now) -> _Call:
    args = ["RL.HIT", policy, subject, *_opt("COST", cost), *_now(now)]
    return _Call("RL.HIT", args, decision)


def _throttle(key, max_burst, count_per_period, period_s, quantity, now) -> _Call:
    args = ["CL.THROTTLE", key, max_burst, count_per_period, period_s]
    args += ([] if quantity is None else [quantity]) + _now(now)
    return _Call("CL.THROTTLE", args, Throttle.from_reply)


def _policy_words(name: str, limiters: Sequence[Spec]) -> List[Any]:
    if not limiters:
        raise ValueError("a policy needs at least one limiter")
    names = [s.spec_name for s in limiters]
    if len(set(names)) != len(names):
        raise ValueError(f"the limiters of a policy need distinct names: {names}")
    words: List[Any] = ["RL.POLICY", "SET", name]
    for spec in limiters:
        words += [spec.spec_name, *spec.words()]
    return words


def _policy_list_args(cursor: str, count: Optional[int]) -> List[Any]:
    return ["RL.POLICY", "LIST", cursor, *_opt("COUNT", count)]


def _top_args(count: Optional[int], policy: Optional[str]) -> List[Any]:
    return ["RL.TOP", *_opt("COUNT", count), *_opt("POLICY", policy)]


def _merge_top(per_node: List[List[TopEntry]], count: Optional[int]) -> List[TopEntry]:
    # Each key and subject lives in one slot, so the nodes count disjoint names.
    merged = sorted((e for entries in per_node for e in entries), key=lambda e: -e.count)
    return merged[: 10 if count is None else count]


def _command_known(reply: Any) -> bool:
    """COMMAND INFO RL.SLIDE as redis-py parsed it: a dict naming the command when the
    server knows it. (For an unknown command the server answers a nil entry, which redis-py
    8's COMMAND parser cannot read: the caller treats that TypeError as "unknown".)"""
    if isinstance(reply, dict):
        return any(str(k).lower() == "rl.slide" for k in reply)
    return bool(reply) and isinstance(reply, (list, tuple)) and reply[0] is not None


def _is_cluster(client: Any) -> bool:
    return isinstance(client, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster))


def _check_fallback(fallback: Optional[str]) -> None:
    if fallback not in (None, "lua"):
        raise ValueError(f'fallback must be None or "lua", not {fallback!r}')


def _eval_args(call: _Call, sha: bool) -> List[Any]:
    script = lua.SCRIPTS[call.lua]  # type: ignore[index]
    head = ["EVALSHA", script.sha] if sha else ["EVAL", script.source]
    return [*head, 1, call.args[1], *call.args[2:]]


class RateLimit:
    """Every command of the module over a sync redis-py client (``redis.Redis`` or
    ``redis.cluster.RedisCluster``). Thread-safe as the client is."""

    def __init__(self, client: Any, *, fallback: Optional[str] = None) -> None:
        _check_fallback(fallback)
        self.client = client
        self.fallback = fallback
        self._cluster = _is_cluster(client)
        self._module: Optional[bool] = None
        self._lock = threading.Lock()

    # -- the module check and the fallback ------------------------------------------------

    def module_loaded(self) -> bool:
        """Whether the module is loaded (on a cluster: on every primary). Asked once, at the
        first call, with ``COMMAND INFO RL.SLIDE``; a positive answer is kept for the
        client's life. A negative one is kept with ``fallback="lua"`` (the Lua twins answer
        from then on) and asked again at the next call without it, so that a module loaded
        later is found."""
        if self._module is None:
            with self._lock:
                if self._module is None:
                    loaded = self._ask_module()
                    if loaded or self.fallback == "lua":
                        self._module = loaded
                    return loaded
        return bool(self._module)

    def _ask_module(self) -> bool:
        targets = self.client.get_primaries() if self._cluster else [None]
        for node in targets:
            options = {} if node is None else {"target_nodes": node}
            try:
                reply = self.client.execute_command("COMMAND", "INFO", "RL.SLIDE", **options)
            except TypeError:
                return False
            if not _command_known(reply):
                return False
        return True

    def _run(self, call: _Call) -> Any:
        if self.module_loaded():
            return call.parse(self.client.execute_command(*call.args, **call.options))
        if self.fallback != "lua":
            raise ModuleNotLoaded()
        if call.lua is None:
            raise FallbackUnsupported(call.name)
        try:
            reply = self.client.execute_command(*_eval_args(call, sha=True))
        except NoScriptError:
            reply = self.client.execute_command(*_eval_args(call, sha=False))
        return call.parse(reply)

    def _everywhere(self, args: List[Any]) -> List[Any]:
        """A server-wide command: on every primary of a cluster, else on the server."""
        self._require_module(args[0])
        if not self._cluster:
            return [self.client.execute_command(*args)]
        return [self.client.execute_command(*args, target_nodes=n) for n in self.client.get_primaries()]

    def _one_node(self, args: List[Any], node: Any = None) -> Any:
        self._require_module(args[0])
        if not self._cluster:
            return self.client.execute_command(*args)
        return self.client.execute_command(*args, target_nodes=node or self.client.get_default_node())

    def _require_module(self, command: str) -> None:
        if not self.module_loaded():
            raise FallbackUnsupported(command) if self.fallback == "lua" else ModuleNotLoaded()

    # -- rates ----------------------------------------------------------------------------

    def slide(
        self,
        key: Key,
        limit: int,
        window_ms: int,
        *more: Tuple[int, int],
        cost: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        """RL.SLIDE: at most ``limit`` in any ``window_ms``, exactly; ``more`` adds
        (limit, window_ms) pairs checked in the same call (up to 8 in all)."""
        return self._run(_slide(key, limit, window_ms, more, cost, now))

    def token(
        self,
        key: Key,
        limit: int,
        window_ms: int,
        *,
        burst: Optional[int] = None,
        cost: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        """RL.TOKEN: a token bucket (GCRA); the reply's ``limit`` is the bucket size."""
        return self._run(_token(key, limit, window_ms, burst, cost, now))

    def leaky(
        self,
        key: Key,
        limit: int,
        window_ms: int,
        *,
        maxdelay: Optional[int] = None,
        burst: Optional[int] = None,
        cost: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        """RL.LEAKY: books the next free slot; act only after ``Decision.delay_ms``."""
        return self._run(_leaky(key, limit, window_ms, maxdelay, burst, cost, now))

    def fixed(
        self,
        key: Key,
        limit: int,
        window_ms: int,
        *,
        align: bool = False,
        cost: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        """RL.FIXED: a fixed window whose reset is the same for every call in it."""
        return self._run(_fixed(key, limit, window_ms, align, cost, now))

    def subwin(
        self,
        key: Key,
        limit: int,
        window_ms: int,
        resolution_ms: int,
        *,
        cost: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        """RL.SUBWIN: a rolling window from sub-interval counters."""
        return self._run(_subwin(key, limit, window_ms, resolution_ms, cost, now))

    def decide(
        self, key: Key, spec: Spec, *, cost: Optional[int] = None, now: Optional[int] = None
    ) -> Decision:
        """The command of ``spec``'s kind on ``key`` (``Slide(100, 60000)`` runs RL.SLIDE);
        ``cost`` when given, else the spec's own."""
        return self._run(_decide(key, spec, cost, now))

    # -- work in flight -------------------------------------------------------------------

    def acquire(
        self,
        key: Key,
        limit: int,
        lease_ms: int,
        *,
        id: Optional[LeaseId] = None,
        cost: Optional[int] = None,
        block_ms: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        """RL.ACQUIRE: ``cost`` units under a lease of ``lease_ms``; ``Decision.lease_id``
        is the lease (None when refused). ``block_ms`` waits for a unit (0: without limit),
        first come first served; the connection is held while it waits."""
        return self._run(_acquire(key, limit, lease_ms, id, cost, block_ms, now))

    def release(self, key: Key, lease_id: LeaseId, *, now: Optional[int] = None) -> Decision:
        """RL.RELEASE: frees a lease; ``allowed`` is False for one already ended."""
        return self._run(_release(key, lease_id, now))

    def extend(
        self, key: Key, lease_id: LeaseId, lease_ms: int, *, now: Optional[int] = None
    ) -> Decision:
        """RL.EXTEND: the lease now ends ``lease_ms`` from now."""
        return self._run(_extend(key, lease_id, lease_ms, now))

    @contextlib.contextmanager
    def lease(
        self,
        key: Key,
        limit: int,
        lease_ms: int,
        *,
        cost: Optional[int] = None,
        block_ms: Optional[int] = None,
    ) -> Iterator[Decision]:
        """Holds a unit for the ``with`` block and releases it after, also on an error;
        raises ``LeaseRefused`` when none is free (within ``block_ms``). Make ``lease_ms``
        longer than the work's own timeout, so that a crashed worker's unit comes back."""
        d = self.acquire(key, limit, lease_ms, cost=cost, block_ms=block_ms)
        if not d.allowed or d.lease_id is None:
            raise LeaseRefused(d)
        try:
            yield d
        finally:
            self.release(key, d.lease_id)

    # -- on any limiter -------------------------------------------------------------------

    def peek(
        self,
        key: Key,
        *,
        cost: Optional[int] = None,
        now: Optional[int] = None,
        replica: bool = False,
    ) -> Optional[Decision]:
        """RL.PEEK: the state (``cost`` None), or exactly what the limiter would answer for
        ``cost`` units now, recording nothing; None for a missing key. ``replica=True`` reads
        on a replica of the key's slot in a cluster."""
        return self._run(_peek(self.client, key, cost, now, replica))

    def refund(
        self, key: Key, *, cost: Optional[int] = None, now: Optional[int] = None
    ) -> Optional[Decision]:
        """RL.REFUND: gives back ``cost`` units (default 1); None for a missing key."""
        return self._run(_refund(key, cost, now))

    def charge(self, key: Key, cost: int, *, now: Optional[int] = None) -> Optional[Decision]:
        """RL.CHARGE: records ``cost`` units even beyond the limit; None for a missing key."""
        return self._run(_charge(key, cost, now))

    # -- across keys and policies ---------------------------------------------------------

    def all(self, limiters: Limiters, *, now: Optional[int] = None) -> Decision:
        """RL.ALL: one all-or-nothing decision, a limiter per key (a mapping or (key, spec)
        pairs, in order); ``parts`` holds each limiter's entry, an ACQUIRE entry with its
        ``lease_id``. In a cluster the keys must share a slot (a hash tag)."""
        return self._run(_all(limiters, now))

    def hit(
        self,
        policy: str,
        subject: Key,
        *,
        cost: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        """RL.HIT: a decision under a policy the server keeps; ``refused_by`` names the
        limiter that refused, ``parts`` holds each limiter's entry in the policy's order."""
        return self._run(_hit(policy, subject, cost, now))

    def throttle(
        self,
        key: Key,
        max_burst: int,
        count_per_period: int,
        period_s: int,
        quantity: Optional[int] = None,
        *,
        now: Optional[int] = None,
    ) -> Throttle:
        """CL.THROTTLE, redis-cell's command and reply (whole seconds)."""
        return self._run(_throttle(key, max_burst, count_per_period, period_s, quantity, now))

    def policy_set(self, name: str, *limiters: Spec) -> None:
        """RL.POLICY SET: each spec's ``name`` names its limiter in the policy. On a cluster,
        on every primary. Needs the right to run CONFIG SET (an administrator's command)."""
        replies = self._everywhere(_policy_words(name, limiters))
        if not all(ok(r) for r in replies):
            raise redis.ResponseError(f"RL.POLICY SET answered {replies!r}")

    def policy_get(self, name: str, *, node: Any = None) -> Optional[Tuple[str, ...]]:
        """RL.POLICY GET: the definition's words, None when there is no such policy."""
        return policy_words(self._one_node(["RL.POLICY", "GET", name], node))

    def policy_delete(self, name: str) -> bool:
        """RL.POLICY DEL (on a cluster, on every primary): whether a policy was deleted."""
        return any(int(r) for r in self._everywhere(["RL.POLICY", "DEL", name]))

    def policy_list(
        self, cursor: str = "0", *, count: Optional[int] = None, node: Any = None
    ) -> Tuple[str, List[Policy]]:
        """One page of RL.POLICY LIST: (next cursor, policies); the cursor is "0" to start
        and once the last page is given."""
        return policy_page(self._one_node(_policy_list_args(cursor, count), node))

    def policies(self, *, count: Optional[int] = None, node: Any = None) -> Iterator[Policy]:
        """Every policy, by name, page after page (``count`` a page)."""
        cursor = "0"
        while True:
            cursor, page = self.policy_list(cursor, count=count, node=node)
            yield from page
            if cursor == "0":
                return

    def top(self, *, count: Optional[int] = None, policy: Optional[str] = None) -> List[TopEntry]:
        """RL.TOP: who is refused most, most first (on a cluster: every primary's answer,
        merged; each name lives on one node)."""
        replies = self._everywhere(_top_args(count, policy))
        return _merge_top([top_entries(r) for r in replies], count)


class AsyncRateLimit:
    """Every command of the module over an asyncio redis-py client (``redis.asyncio.Redis``
    or ``redis.asyncio.cluster.RedisCluster``): the methods of ``RateLimit``, awaited."""

    def __init__(self, client: Any, *, fallback: Optional[str] = None) -> None:
        _check_fallback(fallback)
        self.client = client
        self.fallback = fallback
        self._cluster = _is_cluster(client)
        self._module: Optional[bool] = None

    async def module_loaded(self) -> bool:
        """As ``RateLimit.module_loaded``. On a cluster, the first call also initializes the
        client (its slot map), so that no module command goes to the default node first."""
        if self._module is not None:
            return self._module
        if self._cluster:
            await self.client.initialize()
        loaded = await self._ask_module()
        if loaded or self.fallback == "lua":
            self._module = loaded
        return loaded

    async def _ask_module(self) -> bool:
        targets = self.client.get_primaries() if self._cluster else [None]
        for node in targets:
            options = {} if node is None else {"target_nodes": node}
            try:
                reply = await self.client.execute_command("COMMAND", "INFO", "RL.SLIDE", **options)
            except TypeError:
                return False
            if not _command_known(reply):
                return False
        return True

    async def _run(self, call: _Call) -> Any:
        if await self.module_loaded():
            return call.parse(await self.client.execute_command(*call.args, **call.options))
        if self.fallback != "lua":
            raise ModuleNotLoaded()
        if call.lua is None:
            raise FallbackUnsupported(call.name)
        try:
            reply = await self.client.execute_command(*_eval_args(call, sha=True))
        except NoScriptError:
            reply = await self.client.execute_command(*_eval_args(call, sha=False))
        return call.parse(reply)

    async def _require_module(self, command: str) -> None:
        if not await self.module_loaded():
            raise FallbackUnsupported(command) if self.fallback == "lua" else ModuleNotLoaded()

    async def _everywhere(self, args: List[Any]) -> List[Any]:
        await self._require_module(args[0])
        if not self._cluster:
            return [await self.client.execute_command(*args)]
        return [
            await self.client.execute_command(*args, target_nodes=n)
            for n in self.client.get_primaries()
        ]

    async def _one_node(self, args: List[Any], node: Any = None) -> Any:
        await self._require_module(args[0])
        if not self._cluster:
            return await self.client.execute_command(*args)
        target = node or self.client.get_default_node()
        return await self.client.execute_command(*args, target_nodes=target)

    async def slide(
        self,
        key: Key,
        limit: int,
        window_ms: int,
        *more: Tuple[int, int],
        cost: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        return await self._run(_slide(key, limit, window_ms, more, cost, now))

    async def token(
        self,
        key: Key,
        limit: int,
        window_ms: int,
        *,
        burst: Optional[int] = None,
        cost: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        return await self._run(_token(key, limit, window_ms, burst, cost, now))

    async def leaky(
        self,
        key: Key,
        limit: int,
        window_ms: int,
        *,
        maxdelay: Optional[int] = None,
        burst: Optional[int] = None,
        cost: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        return await self._run(_leaky(key, limit, window_ms, maxdelay, burst, cost, now))

    async def fixed(
        self,
        key: Key,
        limit: int,
        window_ms: int,
        *,
        align: bool = False,
        cost: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        return await self._run(_fixed(key, limit, window_ms, align, cost, now))

    async def subwin(
        self,
        key: Key,
        limit: int,
        window_ms: int,
        resolution_ms: int,
        *,
        cost: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        return await self._run(_subwin(key, limit, window_ms, resolution_ms, cost, now))

    async def decide(
        self, key: Key, spec: Spec, *, cost: Optional[int] = None, now: Optional[int] = None
    ) -> Decision:
        return await self._run(_decide(key, spec, cost, now))

    async def acquire(
        self,
        key: Key,
        limit: int,
        lease_ms: int,
        *,
        id: Optional[LeaseId] = None,
        cost: Optional[int] = None,
        block_ms: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        return await self._run(_acquire(key, limit, lease_ms, id, cost, block_ms, now))

    async def release(
        self, key: Key, lease_id: LeaseId, *, now: Optional[int] = None
    ) -> Decision:
        return await self._run(_release(key, lease_id, now))

    async def extend(
        self, key: Key, lease_id: LeaseId, lease_ms: int, *, now: Optional[int] = None
    ) -> Decision:
        return await self._run(_extend(key, lease_id, lease_ms, now))

    @contextlib.asynccontextmanager
    async def lease(
        self,
        key: Key,
        limit: int,
        lease_ms: int,
        *,
        cost: Optional[int] = None,
        block_ms: Optional[int] = None,
    ) -> AsyncIterator[Decision]:
        d = await self.acquire(key, limit, lease_ms, cost=cost, block_ms=block_ms)
        if not d.allowed or d.lease_id is None:
            raise LeaseRefused(d)
        try:
            yield d
        finally:
            await self.release(key, d.lease_id)

    async def peek(
        self,
        key: Key,
        *,
        cost: Optional[int] = None,
        now: Optional[int] = None,
        replica: bool = False,
    ) -> Optional[Decision]:
        return await self._run(_peek(self.client, key, cost, now, replica))

    async def refund(
        self, key: Key, *, cost: Optional[int] = None, now: Optional[int] = None
    ) -> Optional[Decision]:
        return await self._run(_refund(key, cost, now))

    async def charge(
        self, key: Key, cost: int, *, now: Optional[int] = None
    ) -> Optional[Decision]:
        return await self._run(_charge(key, cost, now))

    async def all(self, limiters: Limiters, *, now: Optional[int] = None) -> Decision:
        return await self._run(_all(limiters, now))

    async def hit(
        self,
        policy: str,
        subject: Key,
        *,
        cost: Optional[int] = None,
        now: Optional[int] = None,
    ) -> Decision:
        return await self._run(_hit(policy, subject, cost, now))

    async def throttle(
        self,
        key: Key,
        max_burst: int,
        count_per_period: int,
        period_s: int,
        quantity: Optional[int] = None,
        *,
        now: Optional[int] = None,
    ) -> Throttle:
        return await self._run(
            _throttle(key, max_burst, count_per_period, period_s, quantity, now)
        )

    async def policy_set(self, name: str, *limiters: Spec) -> None:
        replies = await self._everywhere(_policy_words(name, limiters))
        if not all(ok(r) for r in replies):
            raise redis.ResponseError(f"RL.POLICY SET answered {replies!r}")

    async def policy_get(self, name: str, *, node: Any = None) -> Optional[Tuple[str, ...]]:
        return policy_words(await self._one_node(["RL.POLICY", "GET", name], node))

    async def policy_delete(self, name: str) -> bool:
        return any(int(r) for r in await self._everywhere(["RL.POLICY", "DEL", name]))

    async def policy_list(
        self, cursor: str = "0", *, count: Optional[int] = None, node: Any = None
    ) -> Tuple[str, List[Policy]]:
        return policy_page(await self._one_node(_policy_list_args(cursor, count), node))

    async def policies(
        self, *, count: Optional[int] = None, node: Any = None
    ) -> AsyncIterator[Policy]:
        cursor = "0"
        while True:
            cursor, page = await self.policy_list(cursor, count=count, node=node)
            for policy in page:
                yield policy
            if cursor == "0":
                return

    async def top(
        self, *, count: Optional[int] = None, policy: Optional[str] = None
    ) -> List[TopEntry]:
        replies = await self._everywhere(_top_args(count, policy))
        return _merge_top([top_entries(r) for r in replies], count)
