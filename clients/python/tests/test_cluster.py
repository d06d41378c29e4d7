"""The client on a 3-primary Redis Cluster (cluster/cluster.sh), sync and asyncio: every
command routed to its key's primary with no MOVED, RL.HIT by its subject, RL.ALL by its keys,
server-wide commands on every primary."""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio.cluster
from conftest import calls, moved
from redis.cluster import ClusterNode, LoadBalancingStrategy, RedisCluster

from redis_ratelimit_client import Acquire, AsyncRateLimit, RateLimit, Slide, Token


def fresh(prefix: str = "pyc") -> str:
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def rc(cluster):
    client = RedisCluster(
        startup_nodes=[ClusterNode("127.0.0.1", p) for p in cluster.ports],
        load_balancing_strategy=LoadBalancingStrategy.ROUND_ROBIN_REPLICAS,
    )
    yield client
    client.close()


@pytest.fixture(scope="module")
def nodes(cluster):
    return cluster.nodes()


def primary_of(rc, key):
    return rc.get_node_from_key(key).redis_connection


def test_commands_go_to_their_keys_primary(rc, nodes):
    rl = RateLimit(rc)
    assert rl.module_loaded()
    prefix = fresh()
    before = moved(nodes)
    got = [rl.slide(f"{prefix}:{i}", 5, 60000) for i in range(300)]
    assert all(d.allowed and d.remaining == 4 for d in got)
    assert all(rl.token(f"{prefix}:t{i}", 5, 60000).remaining == 4 for i in range(50))
    lease = rl.acquire(f"{prefix}:lease", 2, 10000)
    assert rl.release(f"{prefix}:lease", lease.lease_id).allowed
    assert rl.peek(f"{prefix}:0").remaining == 4
    assert rl.throttle(f"{prefix}:thr", 15, 30, 60).remaining == 15
    assert moved(nodes) == before
    assert primary_of(rc, f"{prefix}:0").type(f"{prefix}:0") == b"ratelimit"


def test_all_routes_by_its_keys(rc, nodes):
    rl = RateLimit(rc)
    before = moved(nodes)
    for i in range(50):
        tag = "{" + fresh("user") + "}"
        d = rl.all({f"{tag}:rpm": Slide(2, 60000), f"{tag}:jobs": Acquire(1, 30000)})
        assert d.allowed and d.parts[1].lease_id
    assert moved(nodes) == before
    with pytest.raises(Exception):  # keys of two slots: refused before it is sent
        rl.all({"{a}:x": Slide(1, 1000), "{b}:y": Slide(1, 1000)})


def test_policies_everywhere_hit_by_subject(rc, nodes):
    rl = RateLimit(rc)
    name = fresh("pyc-pol").replace(":", "-")
    rl.policy_set(name, Slide(5, 60000, cost=1, name="rpm"), Token(1000, 60000, name="tpm"))
    digests = set()
    for node in rc.get_primaries():
        assert rl.policy_get(name, node=node) == ("rpm", "SLIDE", "5", "60000", "COST", "1",
                                                  "tpm", "TOKEN", "1000", "60000")
        digests |= {p.digest for p in rl.policies(node=node) if p.name == name}
    assert len(digests) == 1  # the same definition on every primary
    before = moved(nodes)
    got = [rl.hit(name, f"user:{i}", cost=10) for i in range(100)]
    assert all(d.allowed and d.parts[1].remaining == 990 for d in got)
    assert moved(nodes) == before
    key = f"{name}|tpm|token|{{user:7}}"
    assert primary_of(rc, key).type(key) == b"ratelimit"
    for _ in range(5):
        rl.hit(name, "user:7")
    assert [e.name for e in rl.top(policy=name)] == [b"user:7"]
    assert rl.policy_delete(name)
    assert all(rl.policy_get(name, node=n) is None for n in rc.get_primaries())


def test_a_penalty_and_a_shadow_limiter_stay_in_the_subjects_slot(rc, nodes):
    rl = RateLimit(rc)
    name = fresh("pyc-box").replace(":", "-")
    words = ["PENALTY", "1", "60000", "60000", "m", "SLIDE", "1", "60000",
             "s", "TOKEN", "1", "60000", "SHADOW"]
    for node in rc.get_primaries():
        rc.execute_command("RL.POLICY", "SET", name, *words, target_nodes=node)
    before = moved(nodes)
    first = [rl.hit(name, f"user:{i}") for i in range(50)]
    banned = [rl.hit(name, f"user:{i}") for i in range(50)]
    assert all(d.allowed and d.shadowed and d.would_refuse is None for d in first)
    assert all(d.banned and d.retry_after_ms == 60000 for d in banned)
    assert moved(nodes) == before
    key = f"{name}||penalty|{{user:7}}"
    assert primary_of(rc, key).type(key) == b"ratelimit"
    assert rl.policy_delete(name)


def test_top_merges_every_primary(rc):
    rl = RateLimit(rc)
    prefix = fresh("pyc-top")
    keys = [f"{prefix}:{i}" for i in range(6)]  # several slots, so several nodes
    for n, k in enumerate(keys):
        for _ in range(n + 2):
            rl.slide(k, 1, 60000)
    top = {e.name: e.count for e in rl.top(count=128) if e.name.startswith(prefix.encode())}
    assert top == {k.encode(): n + 1 for n, k in enumerate(keys)}
    assert len({rc.keyslot(k) for k in keys}) > 1


def test_peek_on_a_replica(rc):
    rl = RateLimit(rc)
    key = fresh("pyc-peek")
    rl.fixed(key, 10, 60000, cost=3)
    rc.execute_command("WAIT", 1, 5000, target_nodes=rc.get_node_from_key(key))
    replica = rc.get_node_from_key(key, replica=True).redis_connection
    before = calls(replica, "rl.peek")
    d = rl.peek(key, replica=True)
    assert (d.allowed, d.limit, d.remaining) == (True, 10, 7)
    assert calls(replica, "rl.peek") == before + 1


async def test_asyncio_cluster_routes_from_the_first_call(cluster, nodes):
    startup = [redis.asyncio.cluster.ClusterNode("127.0.0.1", p) for p in cluster.ports]
    # No initialize(): the client's module check does it, so that the first module command
    # is routed by its key rather than sent to the default node.
    arc = redis.asyncio.cluster.RedisCluster(startup_nodes=startup)
    arl = AsyncRateLimit(arc)
    prefix = fresh("pyc-aio")
    before = moved(nodes)
    got = [await arl.subwin(f"{prefix}:{i}", 4, 1000, 250, cost=2) for i in range(100)]
    assert all(d.allowed and d.remaining == 2 for d in got)
    tag = "{" + fresh("u") + "}"
    assert (await arl.all([(f"{tag}:a", Slide(1, 1000)), (f"{tag}:b", Token(1, 1000))])).allowed
    name = fresh("pyc-apol").replace(":", "-")
    await arl.policy_set(name, Slide(3, 60000, name="m"))
    assert all([(await arl.hit(name, f"s{i}")).allowed for i in range(30)])
    assert moved(nodes) == before
    assert await arl.policy_delete(name)
    await arc.aclose()
