"""Checks of examples/python against real servers, run by examples/test.sh (`make test-examples`).

RL_URL names a standalone redis-server with the module, RL_CLUSTER a cluster's nodes
("host:port,host:port,..."). Plain unittest: redis-py is the only dependency.
"""

import asyncio
import os
import sys
import threading
import unittest
import urllib.error
import urllib.request
import uuid
from wsgiref.simple_server import WSGIRequestHandler, make_server
from wsgiref.util import setup_testing_defaults

import redis
import redis.asyncio
import redis.asyncio.cluster
from redis.cluster import ClusterNode, LoadBalancingStrategy, RedisCluster

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ratelimit import (  # noqa: E402
    ASGIRateLimit,
    AsyncLimiter,
    Decision,
    Limit,
    Limiter,
    RefusalCache,
    WSGIRateLimit,
    headers,
    hit,
)

URL = os.environ.get("RL_URL", "redis://127.0.0.1:6379")
CLUSTER = [
    ClusterNode(*hp.rsplit(":", 1)) for hp in os.environ.get("RL_CLUSTER", "").split(",") if hp
]


def fresh(prefix: str) -> str:
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


def calls(client, command: str) -> int:
    """How many times `command` reached this server (INFO commandstats)."""
    stats = client.info("commandstats").get(f"cmdstat_{command.upper()}", {})
    return int(stats.get("calls", 0))


def moved(nodes) -> int:
    """MOVED replies sent by these servers (INFO errorstats)."""
    return sum(int(n.info("errorstats").get("errorstat_MOVED", {}).get("count", 0)) for n in nodes)


def ok_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello\n"]


def wsgi_get(app, remote="198.51.100.7"):
    """One GET through a WSGI app, called directly: (status, headers as a dict)."""
    environ = {"REMOTE_ADDR": remote}
    setup_testing_defaults(environ)
    seen = {}

    def start_response(status, hdrs, exc_info=None):
        seen["status"], seen["headers"] = status, dict(hdrs)

    b"".join(app(environ, start_response))
    return seen["status"], seen["headers"]


class Reply(unittest.TestCase):
    """The typed reply and the header recipe, on a standalone server."""

    @classmethod
    def setUpClass(cls):
        cls.r = redis.Redis.from_url(URL)

    def test_slide_reply_and_headers(self):
        limit = Limit("RL.SLIDE", 3, 1000)
        lim, key = Limiter(self.r, limit), fresh("py:slide")
        got = [lim.hit(key) for _ in range(4)]
        self.assertEqual([d.allowed for d in got], [True, True, True, False])
        self.assertEqual([d.remaining for d in got], [2, 1, 0, 0])
        d = got[3]
        self.assertTrue(0 < d.retry_after_ms <= 1000, d)
        self.assertEqual(d.retry_after_s, 1)  # rounded up, never down
        h = dict(headers(d, limit))
        self.assertEqual(h["X-RateLimit-Limit"], "3")
        self.assertEqual(h["X-RateLimit-Remaining"], "0")
        self.assertEqual(h["X-RateLimit-Reset"], "1")
        self.assertEqual(h["Retry-After"], "1")
        self.assertEqual(h["RateLimit-Policy"], '"default";q=3;w=1')
        self.assertEqual(h["RateLimit"], '"default";r=0;t=1')
        self.assertNotIn("Retry-After", dict(headers(got[0], limit)))

    def test_retry_after_rounds_up(self):
        limit = Limit("RL.FIXED", 1, 1500)
        lim, key = Limiter(self.r, limit), fresh("py:fixed")
        self.assertTrue(lim.hit(key).allowed)
        d = lim.hit(key)
        self.assertFalse(d.allowed)
        self.assertTrue(1000 < d.retry_after_ms <= 1500, d)
        self.assertEqual(dict(headers(d, limit))["Retry-After"], "2")

    def test_never(self):
        limit = Limit("RL.SLIDE", 10, 1000)
        d = Limiter(self.r, limit).hit(fresh("py:big"), cost=11)
        self.assertEqual(d, Decision(False, 10, 10, -1, 0))
        self.assertTrue(d.never)
        h = dict(headers(d, limit))
        self.assertNotIn("Retry-After", h)
        self.assertEqual(h["RateLimit"], '"default";r=10')

    def test_several_windows_report_the_deciding_one(self):
        limit = Limit("RL.SLIDE", 2, 1000, 5, 60000, name="api")
        lim, key = Limiter(self.r, limit), fresh("py:two")
        first = lim.hit(key)
        h = dict(headers(first, limit))
        self.assertEqual(h["RateLimit-Policy"], '"api-1000ms";q=2;w=1, "api-60000ms";q=5;w=60')
        self.assertEqual(h["RateLimit"], '"api-1000ms";r=1;t=60')
        self.assertEqual(h["X-RateLimit-Limit"], "2")
        lim.hit(key)
        third = lim.hit(key)
        self.assertFalse(third.allowed)
        self.assertEqual(dict(headers(third, limit))["RateLimit"], '"api-1000ms";r=0;t=60')

    def test_leaky_delay(self):
        limit = Limit("RL.LEAKY", 4, 1000)
        lim, key = Limiter(self.r, limit), fresh("py:leaky")
        first, second = lim.hit(key), lim.hit(key)
        self.assertTrue(first.allowed and second.allowed)
        self.assertEqual(first.delay_ms, 0)
        self.assertTrue(0 < second.delay_ms <= 250, second)
        self.assertEqual(second.limit, 5)  # bookings that fit from idle: BURST 1 + MAXDELAY's 4
        self.assertNotIn("Retry-After", dict(headers(second, limit)))

    def test_rl_all_parts(self):
        tag = fresh("{py:all}")
        reply = self.r.execute_command(
            "RL.ALL", 2, f"{tag}:rpm", f"{tag}:tpm", "SLIDE", 2, 60000, "TOKEN", 10, 60000, "COST", 3
        )
        d = Decision.from_reply(reply)
        self.assertEqual((d.allowed, d.limit, d.remaining), (True, 2, 1))
        self.assertEqual([(p.limit, p.remaining) for p in d.parts], [(2, 1), (10, 7)])
        with self.assertRaises(ValueError):
            Decision.from_reply([1, 2, 3])
        # Rate and concurrency: an ACQUIRE entry carries its lease id.
        reply = self.r.execute_command(
            "RL.ALL", 2, f"{tag}:rpm", f"{tag}:jobs", "SLIDE", 2, 60000, "ACQUIRE", 1, 30000
        )
        d = Decision.from_reply(reply)
        self.assertTrue(d.allowed)
        self.assertIsNone(d.parts[0].lease_id)
        self.assertTrue(d.parts[1].lease_id)
        self.assertEqual(
            Decision.from_reply(self.r.execute_command("RL.RELEASE", f"{tag}:jobs", d.parts[1].lease_id)).allowed,
            True,
        )

    def test_hit_under_a_policy(self):
        name = fresh("py-pol")
        self.r.execute_command("RL.POLICY", "SET", name, "rpm", "SLIDE", 2, 60000, "COST", 1,
                               "tpm", "TOKEN", 100, 60000)
        d = hit(self.r, name, "user:1", cost=30)
        self.assertEqual((d.allowed, d.refused_by), (True, None))
        self.assertEqual([(p.limit, p.remaining) for p in d.parts], [(2, 1), (100, 70)])
        d = hit(self.r, name, "user:1", cost=80)
        self.assertEqual((d.allowed, d.refused_by), (False, "tpm"))
        self.assertEqual(self.r.type(f"{name}|tpm|token|{{user:1}}"), b"ratelimit")
        self.r.execute_command("RL.POLICY", "DEL", name)

    def test_peek_refund_charge(self):
        lim, key = Limiter(self.r, Limit("RL.TOKEN", 10, 60000)), fresh("py:token")
        self.assertIsNone(lim.peek(key))
        self.assertIsNone(lim.refund(key))
        lim.hit(key, cost=4)
        self.assertEqual(lim.peek(key).remaining, 6)
        self.assertEqual(lim.charge(key, 10).remaining, 0)
        self.assertEqual(lim.refund(key, 7).remaining, 3)  # 4 owed, 7 given back


class Middleware(unittest.TestCase):
    """The WSGI and ASGI middlewares: 429 with the headers, and the local refusal cache."""

    FLOOD = 300
    LIMIT = 10

    @classmethod
    def setUpClass(cls):
        cls.r = redis.Redis.from_url(URL)

    def test_wsgi_answers_429_with_headers_over_http(self):
        limit = Limit("RL.SLIDE", 2, 60000, name="ip")
        prefix = fresh("py:http") + ":"
        app = WSGIRateLimit(ok_app, Limiter(self.r, limit), key=lambda env: prefix + "client")

        class Quiet(WSGIRequestHandler):
            def log_message(self, *args):
                pass

        server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_port}/"
        try:
            for remaining in ("1", "0"):
                with urllib.request.urlopen(url) as resp:
                    self.assertEqual(resp.status, 200)
                    self.assertEqual(resp.headers["X-RateLimit-Remaining"], remaining)
                    self.assertEqual(resp.headers["RateLimit-Policy"], '"ip";q=2;w=60')
            with self.assertRaises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url)
            self.assertEqual(refused.exception.code, 429)
            self.assertEqual(refused.exception.headers["Retry-After"], "60")
            self.assertEqual(refused.exception.headers["RateLimit"], '"ip";r=0;t=60')
        finally:
            server.shutdown()
            server.server_close()

    def flood_wsgi(self, cache):
        limit = Limit("RL.SLIDE", self.LIMIT, 60000)
        app = WSGIRateLimit(ok_app, Limiter(self.r, limit, cache), key=lambda env: key)
        key = fresh("py:flood")
        before = calls(self.r, "rl.slide")
        statuses = [wsgi_get(app)[0][:3] for _ in range(self.FLOOD)]
        self.assertEqual(statuses.count("200"), self.LIMIT)
        self.assertEqual(statuses.count("429"), self.FLOOD - self.LIMIT)
        return calls(self.r, "rl.slide") - before

    def test_wsgi_flood_with_and_without_the_refusal_cache(self):
        without, with_cache = self.flood_wsgi(None), self.flood_wsgi(RefusalCache())
        print(
            f"\n  python WSGI, {self.FLOOD} requests on a limit of {self.LIMIT}: "
            f"{without} reached Redis without the refusal cache, {with_cache} with it",
            file=sys.stderr,
        )
        self.assertEqual(without, self.FLOOD)
        self.assertEqual(with_cache, self.LIMIT + 1)

    def test_refusal_cache_expires(self):
        lim = Limiter(self.r, Limit("RL.SLIDE", 1, 300), RefusalCache())
        key = fresh("py:expire")
        self.assertTrue(lim.hit(key).allowed)
        refused = lim.hit(key)
        self.assertFalse(refused.allowed)
        cached = lim.hit(key)  # from the cache: its wait is no longer than Redis's
        self.assertFalse(cached.allowed)
        self.assertLessEqual(cached.retry_after_ms, refused.retry_after_ms)
        asyncio.run(asyncio.sleep(refused.retry_after_ms / 1000 + 0.05))
        self.assertTrue(lim.hit(key).allowed)  # the wait has passed: asked Redis again

    def test_asgi_flood_with_and_without_the_refusal_cache(self):
        async def app(scope, receive, send):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"hello\n"})

        async def flood(cache):
            client = redis.asyncio.Redis.from_url(URL)
            key = fresh("py:asgi")
            limit = Limit("RL.TOKEN", self.LIMIT, 60000)
            mw = ASGIRateLimit(app, AsyncLimiter(client, limit, cache), key=lambda s: key)
            before = calls(self.r, "rl.token")
            statuses, last = [], {}

            async def one():
                async def receive():
                    return {"type": "http.request", "body": b""}

                async def send(message):
                    if message["type"] == "http.response.start":
                        statuses.append(message["status"])
                        last.update(dict(message["headers"]))

                await mw({"type": "http", "method": "GET", "path": "/"}, receive, send)

            for _ in range(self.FLOOD):
                await one()
            await client.aclose()
            self.assertEqual(statuses.count(200), self.LIMIT)
            self.assertEqual(last[b"retry-after"], b"6")  # a token every 6 s
            return calls(self.r, "rl.token") - before

        without, with_cache = asyncio.run(flood(None)), asyncio.run(flood(RefusalCache()))
        print(
            f"\n  python ASGI, {self.FLOOD} requests: {without} reached Redis without the "
            f"refusal cache, {with_cache} with it",
            file=sys.stderr,
        )
        self.assertEqual(without, self.FLOOD)
        self.assertEqual(with_cache, self.LIMIT + 1)


@unittest.skipUnless(CLUSTER, "RL_CLUSTER not set")
class Cluster(unittest.TestCase):
    """redis-py in Redis Cluster: routes RL.* by the key position COMMAND gives; RL.PEEK goes
    to a replica only when sent there."""

    @classmethod
    def setUpClass(cls):
        # A load-balancing strategy makes redis-py send READONLY on its connections, which a
        # replica needs to answer RL.PEEK. Writes (every other RL.*) still go to primaries.
        cls.rc = RedisCluster(
            startup_nodes=CLUSTER,
            load_balancing_strategy=LoadBalancingStrategy.ROUND_ROBIN_REPLICAS,
        )
        cls.nodes = [n.redis_connection for n in cls.rc.get_nodes()]

    @classmethod
    def tearDownClass(cls):
        cls.rc.close()

    def test_routes_every_key_to_its_primary(self):
        lim = Limiter(self.rc, Limit("RL.SLIDE", 5, 60000))
        prefix = fresh("py:route")
        before = moved(self.nodes)
        got = [lim.hit(f"{prefix}:{i}") for i in range(300)]
        self.assertTrue(all(d.allowed and d.remaining == 4 for d in got))
        self.assertEqual(moved(self.nodes), before)
        key = f"{prefix}:0"
        primary = self.rc.get_node_from_key(key).redis_connection
        self.assertEqual(primary.type(key), b"ratelimit")

    def test_pipeline_across_slots(self):
        prefix = fresh("py:pipe")
        pipe = self.rc.pipeline()
        for i in range(50):
            pipe.execute_command("RL.TOKEN", f"{prefix}:{i}", 10, 1000)
        got = [Decision.from_reply(x) for x in pipe.execute()]
        self.assertEqual([d.remaining for d in got], [9] * 50)

    def test_policies_route_by_subject(self):
        name = fresh("py-pol")
        self.rc.execute_command(
            "RL.POLICY", "SET", name, "rpm", "SLIDE", 5, 60000, "COST", 1, "tpm", "TOKEN", 1000, 60000,
            target_nodes=self.rc.get_primaries(),
        )
        before = moved(self.nodes)
        got = [hit(self.rc, name, f"user:{i}", cost=10) for i in range(100)]
        self.assertTrue(all(d.allowed and d.parts[1].remaining == 990 for d in got))
        self.assertEqual(moved(self.nodes), before)
        key = f"{name}|tpm|token|{{user:7}}"
        self.assertEqual(self.rc.get_node_from_key(key).redis_connection.type(key), b"ratelimit")
        self.rc.execute_command("RL.POLICY", "DEL", name, target_nodes=self.rc.get_primaries())

    def test_peek_on_a_replica(self):
        lim, key = Limiter(self.rc, Limit("RL.FIXED", 10, 60000)), fresh("py:peek")
        lim.hit(key, cost=3)
        primary = self.rc.get_node_from_key(key)
        self.rc.execute_command("WAIT", 1, 5000, target_nodes=primary)
        replica = self.rc.get_node_from_key(key, replica=True).redis_connection
        before = calls(replica, "rl.peek")
        d = lim.peek(key, replica=True)
        self.assertEqual((d.allowed, d.limit, d.remaining), (True, 10, 7))
        self.assertEqual(calls(replica, "rl.peek"), before + 1)

    def test_asyncio_cluster(self):
        nodes = [redis.asyncio.cluster.ClusterNode(n.host, n.port) for n in CLUSTER]

        async def run(initialize):
            rc = redis.asyncio.cluster.RedisCluster(startup_nodes=nodes)
            if initialize:
                # The recipe: before initialize(), redis-py's asyncio cluster client sends a
                # command it has no policy for (every module command) to its default node.
                await rc.initialize()
            lim = AsyncLimiter(rc, Limit("RL.SUBWIN", 4, 1000, 250))
            prefix = fresh("py:aio")
            got = [await lim.hit(f"{prefix}:{i}", cost=2) for i in range(100)]
            await rc.aclose()
            return got

        for initialize in (False, True):
            before = moved(self.nodes)
            got = asyncio.run(run(initialize))
            self.assertTrue(all(d.allowed and d.remaining == 2 for d in got))
            if initialize:
                self.assertEqual(moved(self.nodes), before)
            else:
                # The first call lands on the default node (a MOVED unless it owns the slot);
                # the client follows the redirect and routes every later call.
                self.assertLessEqual(moved(self.nodes) - before, 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
