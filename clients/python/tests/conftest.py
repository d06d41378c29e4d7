from __future__ import annotations

import uuid

import pytest
import redis

from servers import Cluster, Server


@pytest.fixture(scope="session")
def server():
    """A redis-server with the module (``now-max-ahead-ms -1``: tests drive time with NOW)."""
    s = Server(module=True)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def plain_server():
    """A redis-server without the module."""
    s = Server(module=False)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def cluster():
    c = Cluster()
    yield c
    c.stop()


@pytest.fixture
def r(server):
    client = server.client()
    yield client
    client.close()


@pytest.fixture
def plain(plain_server):
    client = plain_server.client()
    yield client
    client.close()


@pytest.fixture
def key():
    """A fresh key name for each test."""
    return f"py:{uuid.uuid4().hex[:12]}"


def calls(client: redis.Redis, command: str) -> int:
    """How many times ``command`` reached this server (INFO commandstats)."""
    wanted = f"cmdstat_{command}".lower()
    stats = client.info("commandstats")
    return sum(int(v.get("calls", 0)) for k, v in stats.items() if k.lower() == wanted)


def moved(nodes) -> int:
    """MOVED replies sent by these servers (INFO errorstats)."""
    return sum(int(n.info("errorstats").get("errorstat_MOVED", {}).get("count", 0)) for n in nodes)
