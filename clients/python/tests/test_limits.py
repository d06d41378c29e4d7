"""The limits storages through limits' own strategies: the same answers as limits' memory
storage for the same calls, exact reset times, one command per decision, and the round trips
of the window stats."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from conftest import calls
from limits import RateLimitItemPerMinute, RateLimitItemPerSecond, RateLimitItemPerYear
from limits.aio import strategies as aio_strategies
from limits.storage import MemoryStorage, storage_from_string
from limits.strategies import (
    FixedWindowRateLimiter,
    MovingWindowRateLimiter,
    SlidingWindowCounterRateLimiter,
)

from redis_ratelimit_client import MODULE_NOT_LOADED, ModuleNotLoaded
from redis_ratelimit_client.limits_storage import AsyncRateLimitStorage, RateLimitStorage
from servers import wait_until


def ident() -> str:
    return uuid.uuid4().hex[:10]


def timed(fn, *args, **kwargs):
    """(fn's result, time.time() before the call, after it)."""
    before = time.time()
    out = fn(*args, **kwargs)
    return out, before, time.time()


async def atimed(coro):
    before = time.time()
    out = await coro
    return out, before, time.time()


def between(value: float, low: float, high: float) -> bool:
    """low <= value <= high, give or take the millisecond the server counts in."""
    return low - 0.002 <= value <= high + 0.002


def commands(r) -> int:
    """Every command the server has run, this INFO excluded."""
    return sum(int(v["calls"]) for v in r.info("commandstats").values())


def test_schemes_are_registered(server, cluster):
    assert isinstance(storage_from_string(f"ratelimit://127.0.0.1:{server.port}"), RateLimitStorage)
    nodes = ",".join(f"127.0.0.1:{p}" for p in cluster.ports[:3])
    assert isinstance(storage_from_string(f"ratelimit+cluster://{nodes}"), RateLimitStorage)
    aio = storage_from_string(f"async+ratelimit://127.0.0.1:{server.port}/0?fallback=lua")
    assert isinstance(aio, AsyncRateLimitStorage) and aio.rl.fallback == "lua"
    assert isinstance(storage_from_string(f"async+ratelimit+cluster://{nodes}"), AsyncRateLimitStorage)


@pytest.fixture
def storage(server):
    return storage_from_string(f"ratelimit://127.0.0.1:{server.port}")


def side_by_side(limiter_class, storage, item, script):
    """Runs the same calls on this storage and on limits' memory storage: the answers agree."""
    ours, theirs = limiter_class(storage), limiter_class(MemoryStorage())
    ids = ident()
    out = []
    for call, cost in script:
        a = getattr(ours, call)(item, ids, cost=cost)
        b = getattr(theirs, call)(item, ids, cost=cost)
        assert a == b, (call, cost, len(out))
        out.append(a)
    sa, sb = ours.get_window_stats(item, ids), theirs.get_window_stats(item, ids)
    assert sa.remaining == sb.remaining
    return out, ids


SCRIPT = [("hit", 1), ("test", 1), ("hit", 2), ("test", 3), ("hit", 3), ("hit", 1), ("test", 1),
          ("hit", 1), ("test", 1), ("hit", 9), ("hit", 1), ("test", 0)]


def test_fixed_window_answers_as_limits(storage, r):
    item = RateLimitItemPerMinute(5)
    out, ids = side_by_side(FixedWindowRateLimiter, storage, item, SCRIPT)
    assert out == [True, True, True, False, False, False, False, False, False, False, False, False]
    key = item.key_for(ids)
    assert storage.get(key) == 1 + 2 + 3 + 1 + 1 + 9 + 1  # every hit, refused ones too, as limits counts


def test_fixed_window_stats_are_exact_and_one_round_trip(storage, r):
    limiter = FixedWindowRateLimiter(storage)
    item = RateLimitItemPerSecond(3, 2)
    ids = ident()
    limiter.hit(item, ident())  # connected, and the module checked
    before = commands(r)
    _, h0, h1 = timed(limiter.hit, item, ids)  # the window opens at this hit
    assert [limiter.hit(item, ids) for _ in range(3)] == [True, True, False]
    assert commands(r) == before + 4 + 1  # one RL.FIXED a hit (and the INFO above)
    before = commands(r)
    stats, t0, t1 = timed(limiter.get_window_stats, item, ids)
    assert commands(r) == before + 1 + 1  # one RL.PEEK for both the count and the reset
    assert stats.remaining == 0
    # The reset is the window's end as the server keeps it, read during the call.
    end = r.pexpiretime(f"LIMITS-RL:{item.key_for(ids)}") / 1000
    assert between(end, h0 + 2, h1 + 2)
    assert between(stats.reset_time - end, 0, t1 - t0)
    wait_until("the window's end", lambda: time.time() > stats.reset_time + 0.05, 5)
    assert limiter.get_window_stats(item, ids).remaining == 3
    assert limiter.hit(item, ids)
    empty, t0, t1 = timed(limiter.get_window_stats, item, ident())
    assert empty.remaining == 3 and between(empty.reset_time, t0, t1)


def test_moving_window_answers_as_limits(storage):
    out, _ = side_by_side(MovingWindowRateLimiter, storage, RateLimitItemPerMinute(5), SCRIPT)
    assert out == [True, True, True, False, False, True, True, True, False, False, False, True]


def test_moving_window_is_exact(storage, r):
    limiter = MovingWindowRateLimiter(storage)
    item = RateLimitItemPerSecond(3, 2)
    ids = ident()
    allowed, f0, f1 = timed(limiter.hit, item, ids)
    assert allowed
    time.sleep(0.2)
    assert limiter.hit(item, ids, cost=2)
    assert not limiter.hit(item, ids)
    before = calls(r, "rl.peek")
    stats, t0, t1 = timed(limiter.get_window_stats, item, ids)
    assert calls(r, "rl.peek") == before + 1
    # Full: the reset is when the first hit leaves the window, 2 s after it.
    assert stats.remaining == 0 and between(stats.reset_time, f0 + 2, f1 + 2 + (t1 - t0))
    wait_until("the first hit to leave", lambda: time.time() > stats.reset_time + 0.02, 5)
    assert limiter.test(item, ids) and not limiter.test(item, ids, cost=2)
    assert limiter.hit(item, ids)
    assert not limiter.hit(item, ids)


def test_moving_window_stats_after_a_hit_are_one_round_trip(storage, r):
    limiter = MovingWindowRateLimiter(storage)
    item = RateLimitItemPerMinute(10)
    ids = ident()
    _, f0, f1 = timed(limiter.hit, item, ids)
    time.sleep(0.05)
    limiter.hit(item, ids, cost=3)
    before = calls(r, "rl.peek")
    stats, t0, t1 = timed(limiter.get_window_stats, item, ids)  # the hit's remaining: the guess
    assert calls(r, "rl.peek") == before + 1
    assert stats.remaining == 6 and between(stats.reset_time, f0 + 60, f1 + 60 + (t1 - t0))
    # In another thread (no guess there) a partly full window takes a second read.
    got = {}
    before = calls(r, "rl.peek")
    thread = threading.Thread(target=lambda: got.update(s=timed(limiter.get_window_stats, item, ids)))
    thread.start()
    thread.join()
    other, t0, t1 = got["s"]
    assert other.remaining == 6 and between(other.reset_time, f0 + 60, f1 + 60 + (t1 - t0))
    assert calls(r, "rl.peek") == before + 2


def test_sliding_window_counter_is_not_claimed(storage):
    with pytest.raises(NotImplementedError):
        SlidingWindowCounterRateLimiter(storage)


def test_windows_beyond_the_modules_range(storage):
    with pytest.raises(ValueError, match="31 days"):
        FixedWindowRateLimiter(storage).hit(RateLimitItemPerYear(1), ident())


def test_clear_and_reset(storage, r):
    limiter = MovingWindowRateLimiter(storage)
    item = RateLimitItemPerMinute(1)
    ids = ident()
    assert limiter.hit(item, ids) and not limiter.hit(item, ids)
    limiter.clear(item, ids)
    assert limiter.hit(item, ids)
    r.set("not-ours", 1)
    assert storage.reset() >= 1
    assert r.get("not-ours") == b"1" and not r.keys("LIMITS-RL:*")
    assert storage.check()


async def test_async_strategies(server, r):
    storage = storage_from_string(f"async+ratelimit://127.0.0.1:{server.port}")
    item = RateLimitItemPerSecond(3, 2)
    fixed = aio_strategies.FixedWindowRateLimiter(storage)
    ids = ident()
    assert [await fixed.hit(item, ids) for _ in range(4)] == [True, True, True, False]
    before = calls(r, "rl.peek")
    stats = await fixed.get_window_stats(item, ids)
    assert stats.remaining == 0 and calls(r, "rl.peek") == before + 1
    moving = aio_strategies.MovingWindowRateLimiter(storage)
    ids = ident()  # (one key per limit and identifiers: a strategy of its own needs others)
    _, f0, f1 = await atimed(moving.hit(item, ids))
    assert [await moving.hit(item, ids, cost=c) for c in (1, 2)] == [True, False]
    assert await moving.test(item, ids) and not await moving.test(item, ids, cost=2)
    before = calls(r, "rl.peek")
    stats, t0, t1 = await atimed(moving.get_window_stats(item, ids))
    assert stats.remaining == 1 and between(stats.reset_time, f0 + 2, f1 + 2 + (t1 - t0))
    assert calls(r, "rl.peek") == before + 1
    with pytest.raises(NotImplementedError):
        aio_strategies.SlidingWindowCounterRateLimiter(storage)
    assert await storage.check()
    await moving.clear(item, ids)
    assert await storage.reset() >= 1


def test_cluster_storage(cluster):
    nodes = ",".join(f"127.0.0.1:{p}" for p in cluster.ports[:2])
    storage = storage_from_string(f"ratelimit+cluster://{nodes}")
    moving, fixed = MovingWindowRateLimiter(storage), FixedWindowRateLimiter(storage)
    item = RateLimitItemPerMinute(2)
    for i in range(30):
        ids, other = ident(), ident()
        assert [moving.hit(item, ids) for _ in range(3)] == [True, True, False]
        assert [fixed.hit(item, other) for _ in range(3)] == [True, True, False]
        assert fixed.get_window_stats(item, other).remaining == 0
        assert moving.get_window_stats(item, ids).remaining == 0
    assert storage.reset() == 60  # on every primary


async def test_async_cluster_storage(cluster):
    nodes = ",".join(f"127.0.0.1:{p}" for p in cluster.ports[:2])
    storage = storage_from_string(f"async+ratelimit+cluster://{nodes}")
    moving = aio_strategies.MovingWindowRateLimiter(storage)
    item = RateLimitItemPerMinute(2)
    for i in range(10):
        ids = ident()
        assert [await moving.hit(item, ids) for _ in range(3)] == [True, True, False]
    assert await storage.reset() == 10


def test_fallback_storage(plain_server, plain):
    storage = storage_from_string(f"ratelimit://127.0.0.1:{plain_server.port}?fallback=lua")
    out, ids = side_by_side(MovingWindowRateLimiter, storage, RateLimitItemPerMinute(5), SCRIPT)
    assert out == [True, True, True, False, False, True, True, True, False, False, False, True]
    out, ids = side_by_side(FixedWindowRateLimiter, storage, RateLimitItemPerMinute(5), SCRIPT)
    assert out == [True, True, True, False, False, False, False, False, False, False, False, False]
    item = RateLimitItemPerSecond(2, 2)
    fixed = FixedWindowRateLimiter(storage)
    ids = ident()
    _, f0, f1 = timed(fixed.hit, item, ids)
    assert [fixed.hit(item, ids) for _ in range(2)] == [True, False]
    stats, t0, t1 = timed(fixed.get_window_stats, item, ids)
    assert stats.remaining == 0 and between(stats.reset_time, f0 + 2, f1 + 2 + (t1 - t0))
    moving = MovingWindowRateLimiter(storage)
    ids = ident()
    moving.hit(item, ids)
    _, n0, n1 = timed(moving.hit, item, ids)
    assert not moving.hit(item, ids)
    # Without RL.PEEK the start is the newest record: the reset is when the window is empty.
    stats, t0, t1 = timed(moving.get_window_stats, item, ids)
    assert stats.remaining == 0 and between(stats.reset_time, n0 + 2, n1 + 2 + (t1 - t0))
    assert calls(plain, "evalsha") > 0 and storage.reset() >= 2


def test_no_module_no_fallback(plain_server):
    storage = storage_from_string(f"ratelimit://127.0.0.1:{plain_server.port}")
    with pytest.raises(ModuleNotLoaded) as missing:
        MovingWindowRateLimiter(storage).hit(RateLimitItemPerMinute(1), ident())
    assert str(missing.value) == MODULE_NOT_LOADED
