"""Per-request cost of the limits storage on the module (``ratelimit://``) beside limits' stock
redis storage (``redis://``), on the same server, in one run.

For each strategy limits' redis storage and this one share (fixed-window, moving-window):

- a Flask app with Flask-Limiter (headers on, so each request is a hit and the window stats
  for the headers), driven through Flask's test client (WSGI, in process: what is measured is
  Flask-Limiter, limits, the storage and Redis, not an HTTP stack);
- limits directly: ``hit`` alone, one decision.

Traffic: CLIENTS addresses in turn, each over its limit by a sixth (LIMIT per minute,
LIMIT * 7 / 6 requests each), so that allowed and refused requests mix. Round trips are
the commands redis-py sends (counted in its connection; nothing here is pipelined, so one
command is one round trip), per request, with each command's share; what the server ran
(INFO commandstats), the commands a Lua script calls included; and the server's time per
request (commandstats' usec for the commands sent: a script's includes its calls'). The rate
and the server's time are the medians of ROUNDS runs, the configurations taking turns in
each (the machine may be shared). The rate is mostly Python's (Flask, limits, redis-py: some
50 us of client CPU a command); the round trips are exact.

    clients/python/.venv/bin/python clients/python/bench.py            # starts its own server
    clients/python/.venv/bin/python clients/python/bench.py --url redis://127.0.0.1:6379
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Tuple

import redis
from flask import Flask
from flask_limiter import Limiter
from limits import RateLimitItemPerMinute
from limits.storage import storage_from_string
from limits.strategies import STRATEGIES

import redis_ratelimit_client  # noqa: F401  (registers ratelimit://)

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 100
LIMIT = 30
ROUNDS = 3
N = CLIENTS * LIMIT * 7 // 6

# Every command redis-py sends, by name: the round trips.
SENT: Dict[str, int] = {}
_send = redis.connection.AbstractConnection.send_command


def _counting_send(self, *args, **kwargs):
    name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
    SENT[name.upper()] = SENT.get(name.upper(), 0) + 1
    return _send(self, *args, **kwargs)


redis.connection.AbstractConnection.send_command = _counting_send


def stats(r: redis.Redis) -> Dict[str, int]:
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()}


def usec(r: redis.Redis) -> Dict[str, int]:
    """Microseconds the server spent per command (a script's time includes its calls')."""
    return {k.removeprefix("cmdstat_").upper(): int(v["usec"])
            for k, v in r.info("commandstats").items()}


def delta(before: Dict[str, int], after: Dict[str, int]) -> Dict[str, int]:
    out = {k.upper(): after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    out.pop("INFO", None)  # the measuring
    out.pop("CLIENT|SETINFO", None)  # a new connection's (the measuring client's)
    return {k: v for k, v in out.items() if v}


class Counts:
    """The round trips and the server's commands of one run."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r

    def __enter__(self) -> "Counts":
        self.server_before = stats(self.r)
        self.usec_before = usec(self.r)
        SENT.clear()
        return self

    def __exit__(self, *exc) -> None:
        self.sent = dict(SENT)
        self.server = delta(self.server_before, stats(self.r))
        after = usec(self.r)
        # The server's time for the commands sent (a script's includes what it calls).
        self.server_usec = sum(after.get(k, 0) - self.usec_before.get(k, 0) for k in self.sent)


def flask_app(storage_uri: str, strategy: str, prefix: str) -> Flask:
    app = Flask(__name__)
    limiter = Limiter(lambda: _client(), app=app, storage_uri=storage_uri, strategy=strategy,
                      headers_enabled=True, key_prefix=prefix)

    @app.route("/")
    @limiter.limit(f"{LIMIT}/minute")
    def index():
        return "hello\n"

    return app


_current = ["0"]


def _client() -> str:
    return _current[0]


def run_flask(r, uri: str, strategy: str) -> Tuple[float, Counts, Dict[int, int]]:
    app = flask_app(uri, strategy, f"bench{time.monotonic_ns()}")
    client = app.test_client()
    _current[0] = "warm"
    client.get("/")  # connect, load scripts, check the module
    statuses: Dict[int, int] = {}
    with Counts(r) as counts:
        start = time.perf_counter()
        for i in range(N):
            _current[0] = f"10.0.{i % CLIENTS // 256}.{i % CLIENTS % 256}"
            status = client.get("/").status_code
            statuses[status] = statuses.get(status, 0) + 1
        elapsed = time.perf_counter() - start
    return N / elapsed, counts, statuses


def run_direct(r, uri: str, strategy: str) -> Tuple[float, Counts, Dict[int, int]]:
    limiter = STRATEGIES[strategy](storage_from_string(uri))
    item = RateLimitItemPerMinute(LIMIT)
    tag = f"direct{time.monotonic_ns()}"
    limiter.hit(item, tag, "warm")
    allowed = 0
    with Counts(r) as counts:
        start = time.perf_counter()
        for i in range(N):
            allowed += limiter.hit(item, tag, str(i % CLIENTS))
        elapsed = time.perf_counter() - start
    return N / elapsed, counts, {200: allowed, 429: N - allowed}


def share(counts: Dict[str, int]) -> str:
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{k} {v / N:.2f}" for k, v in ordered)


def start_server() -> Tuple[subprocess.Popen, str, str]:
    module = os.environ.get("MODULE") or str(ROOT / "target/release/libredis_ratelimit.so")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = tempfile.mkdtemp(prefix="rl-bench.")
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--dir", work, "--loadmodule", module],
                            stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            if redis.Redis(port=port).ping():
                break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
    return proc, f"127.0.0.1:{port}", work


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a redis-server with the module (default: start one)")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    proc = work = None
    if args.url:
        address = args.url.removeprefix("redis://").rstrip("/")
    else:
        proc, address, work = start_server()
    r = redis.Redis.from_url(f"redis://{address}")
    runs = [(what, strategy, scheme)
            for strategy in ("fixed-window", "moving-window")
            for what in ("Flask-Limiter", "limits hit")
            for scheme in ("ratelimit", "redis")]
    rates: Dict[tuple, list] = {run: [] for run in runs}
    server_us: Dict[tuple, list] = {run: [] for run in runs}
    last: Dict[tuple, tuple] = {}
    try:
        server = r.info("server")
        print(f"redis {server['redis_version']} at {address}; Python {sys.version.split()[0]}; "
              f"{CLIENTS} clients x {N // CLIENTS} requests on {LIMIT}/minute each "
              f"({N} a run); rate: median of {args.rounds} rounds\n")
        for _ in range(args.rounds):
            for run in runs:
                what, strategy, scheme = run
                go = run_flask if what == "Flask-Limiter" else run_direct
                rate, counts, statuses = go(r, f"{scheme}://{address}", strategy)
                rates[run].append(rate)
                server_us[run].append(counts.server_usec / N)
                last[run] = (counts, statuses)
        print(f"{'':42} {'per s':>7} {'server us':>9} {'round trips':>11}  "
              "sent per request; [run by the server]")
        for run in runs:
            what, strategy, scheme = run
            counts, statuses = last[run]
            label = f"{what} {strategy} {scheme}://"
            print(f"{label:42} {statistics.median(rates[run]):7.0f} "
                  f"{statistics.median(server_us[run]):9.1f} "
                  f"{sum(counts.sent.values()) / N:11.2f}  {share(counts.sent)}; "
                  f"[{share(counts.server)}]  (allowed {statuses.get(200, 0)}, "
                  f"refused {statuses.get(429, 0)})")
    finally:
        r.close()
        if proc is not None:
            proc.terminate()
            proc.wait(10)
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
