"""The asyncio client against a real server: every method once, the module check, the
fallback."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis.asyncio
from conftest import calls

from redis_ratelimit_client import (
    MODULE_NOT_LOADED,
    Acquire,
    AsyncRateLimit,
    Decision,
    FallbackUnsupported,
    LeaseRefused,
    ModuleNotLoaded,
    Slide,
    Token,
)
from redis_ratelimit_client.decision import Throttle

D = Decision


def fresh(prefix: str = "pya") -> str:
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def arl(server):
    client = redis.asyncio.Redis(port=server.port)
    yield AsyncRateLimit(client)
    await client.aclose()


async def server_ms(arl) -> int:
    sec, usec = await arl.client.time()
    return sec * 1000 + usec // 1000


async def test_every_limiter(arl):
    t = await server_ms(arl)
    k = fresh()
    got = [await arl.slide(k, 3, 1000, now=t + dt) for dt in (0, 100, 200, 300)]
    assert got[3] == D(False, 3, 0, 700, 900)
    assert await arl.slide(fresh(), 2, 1000, (5, 60000)) == D(True, 2, 1, 0, 60000)
    assert await arl.token(fresh(), 120, 60000, now=t) == D(True, 120, 119, 0, 500)
    assert await arl.leaky(fresh(), 4, 1000, burst=2, now=t) == D(True, 6, 5, 0, 250)
    assert await arl.fixed(fresh(), 3, 60000, now=t) == D(True, 3, 2, 0, 60000)
    assert (await arl.subwin(fresh(), 4, 1000, 250, cost=2)).remaining == 2
    assert (await arl.decide(fresh(), Token(10, 1000, burst=4), cost=3)).remaining == 1
    assert await arl.throttle(fresh(), 15, 30, 60, now=t) == Throttle(False, 16, 15, -1, 2)


async def test_peek_refund_charge(arl):
    t = await server_ms(arl)
    k = fresh()
    assert await arl.peek(k) is None
    await arl.slide(k, 10, 60000, cost=4, now=t)
    assert await arl.peek(k, cost=7, now=t + 10) == D(False, 10, 6, 59990, 59990)
    assert await arl.refund(k, cost=3, now=t + 20) == D(True, 10, 9, 0, 59980)
    assert (await arl.charge(k, 20, now=t + 20)).remaining == 0


async def test_leases_and_block(arl, server):
    k = fresh()
    holder = await arl.acquire(k, 1, 10000)
    other = redis.asyncio.Redis(port=server.port)
    waiter = AsyncRateLimit(other)

    async def release_soon():
        await asyncio.sleep(0.3)
        await arl.release(k, holder.lease_id)

    start = time.monotonic()
    got, _ = await asyncio.gather(waiter.acquire(k, 1, 10000, block_ms=5000), release_soon())
    assert got.allowed and got.lease_id and 0.25 <= time.monotonic() - start < 5
    assert (await arl.extend(k, got.lease_id, 20000)).reset_after_ms == 20000
    with pytest.raises(LeaseRefused):
        async with arl.lease(k, 1, 1000):
            pass
    assert (await arl.release(k, got.lease_id)).allowed
    async with arl.lease(k, 1, 1000) as d:
        assert d.allowed
    await other.aclose()


async def test_all_hit_policies_top(arl):
    tag = "{" + fresh("u") + "}"
    d = await arl.all([(f"{tag}:a", Slide(2, 60000)), (f"{tag}:b", Acquire(1, 30000))])
    assert d.allowed and d.parts[1].lease_id and d.parts[0] == D(True, 2, 1, 0, 60000)
    name = fresh("pya-pol").replace(":", "-")
    await arl.policy_set(name, Slide(1, 60000, name="m"), Token(100, 60000, name="t"))
    assert (await arl.policy_get(name))[:2] == ("m", "SLIDE")
    assert (await arl.hit(name, "bob")).allowed
    refused = await arl.hit(name, "bob")
    assert refused.refused_by == "m" and not refused.allowed
    listed = [p async for p in arl.policies(count=1) if p.name == name]
    assert len(listed) == 1 and listed[0].words[:2] == ("m", "SLIDE")
    top = await arl.top(policy=name)
    assert [(e.name, e.count) for e in top] == [(b"bob", 1)]
    assert await arl.policy_delete(name)


async def test_module_checked_once(arl, r):
    before = calls(r, "command|info")
    for _ in range(3):
        await arl.slide(fresh(), 5, 1000)
    assert calls(r, "command|info") == before + 1


async def test_missing_module_and_fallback(plain_server):
    client = redis.asyncio.Redis(port=plain_server.port)
    with pytest.raises(ModuleNotLoaded) as missing:
        await AsyncRateLimit(client).slide("k", 1, 1000)
    assert str(missing.value) == MODULE_NOT_LOADED
    lua = AsyncRateLimit(client, fallback="lua")
    k = fresh()
    assert [await lua.slide(k, 2, 60000) for _ in range(3)][2].retry_after_ms > 59000
    assert (await lua.fixed(fresh(), 3, 60000)).remaining == 2
    assert (await lua.token(fresh(), 10, 1000, cost=4)).remaining == 6
    await client.script_flush()
    assert (await lua.fixed(fresh(), 3, 60000)).remaining == 2  # NOSCRIPT, then EVAL
    with pytest.raises(FallbackUnsupported):
        await lua.acquire("k", 1, 1000)
    await client.aclose()
