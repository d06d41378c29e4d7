"""Flask-Limiter (Flask on werkzeug) and SlowAPI (FastAPI on uvicorn) with
``storage_uri="ratelimit://..."``: real servers in processes of their own, real HTTP requests.
The 429 comes at exactly the (limit+1)-th request, the headers are what each library emits
from limits' window stats, two processes share one limit, and the Lua fallback and the
missing module behave as documented."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid

import pytest

from redis_ratelimit_client import MODULE_NOT_LOADED
from servers import App

LIMIT = 5


def get(url: str):
    """(status, headers, time just before the request was sent)."""
    sent = time.time()
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.headers, sent
    except urllib.error.HTTPError as err:
        return err.code, err.headers, sent


def prefix() -> str:
    return f"p{uuid.uuid4().hex[:10]}"


@pytest.fixture
def apps():
    started = []

    def start(framework: str, uri: str, strategy: str = "fixed-window", key_prefix: str = ""):
        app = App(f"{framework}_app", uri, strategy, key_prefix or prefix(), f"{LIMIT}/minute")
        started.append(app)
        return app

    yield start
    for app in started:
        app.stop()


def the_key(r, key_prefix: str) -> str:
    keys = r.keys(f"LIMITS-RL:LIMITER/{key_prefix}/*")
    assert len(keys) == 1, keys
    return keys[0].decode()


def check_headers(framework, headers, remaining, reset, received):
    """The headers each library writes from limits' window stats (``reset`` is the stats'
    reset time): Flask-Limiter ``int(reset + 1)``, SlowAPI ``1 + reset``; both a
    Retry-After of the seconds until then. (Within a second, or half of one: the request's
    own time on a busy machine; test_limits.py checks the stats to the millisecond.)"""
    assert headers["X-RateLimit-Limit"] == str(LIMIT)
    assert headers["X-RateLimit-Remaining"] == str(remaining)
    if framework == "flask":
        assert abs(int(headers["X-RateLimit-Reset"]) - int(reset + 1)) <= 1
        expected_retry = int(int(reset + 1) - received)
    else:
        assert abs(float(headers["X-RateLimit-Reset"]) - (reset + 1)) < 0.5
        expected_retry = int(reset + 1 - received)
    # Both write Retry-After on every response, from the same reset.
    assert abs(int(headers["Retry-After"]) - expected_retry) <= 1


@pytest.mark.parametrize("framework", ["flask", "fastapi"])
@pytest.mark.parametrize("strategy", ["fixed-window", "moving-window"])
def test_limit_and_headers(framework, strategy, server, r, apps):
    p = prefix()
    app = apps(framework, f"ratelimit://127.0.0.1:{server.port}", strategy, p)
    first = None
    for n in range(1, LIMIT + 2):
        status, headers, sent = get(app.url + "/")
        first = first or sent
        assert status == (200 if n <= LIMIT else 429), (n, status)
        key = the_key(r, p)
        if strategy == "fixed-window":
            reset = r.pexpiretime(key) / 1000  # the window's end, kept by the server
        else:
            reset = first + 60  # when the first request leaves the window
        check_headers(framework, headers, max(0, LIMIT - n), reset, time.time())
    assert r.type(key) == b"ratelimit"


@pytest.mark.parametrize("framework", ["flask", "fastapi"])
def test_two_processes_share_the_limit(framework, server, apps):
    p = prefix()
    uri = f"ratelimit://127.0.0.1:{server.port}"
    a, b = apps(framework, uri, "moving-window", p), apps(framework, uri, "moving-window", p)
    assert a.port != b.port
    statuses = [get(a.url + "/")[0] for _ in range(3)]
    status, headers, _ = get(b.url + "/")
    assert headers["X-RateLimit-Remaining"] == "1"  # the 3 of the other process count
    statuses += [status, get(b.url + "/")[0], get(b.url + "/")[0], get(a.url + "/")[0]]
    assert statuses == [200] * LIMIT + [429, 429]


@pytest.mark.parametrize("framework", ["flask", "fastapi"])
def test_lua_fallback_without_the_module(framework, plain_server, plain, apps):
    p = prefix()
    app = apps(framework, f"ratelimit://127.0.0.1:{plain_server.port}?fallback=lua", "fixed-window", p)
    statuses = []
    for n in range(1, LIMIT + 2):
        status, headers, _ = get(app.url + "/")
        statuses.append(status)
        reset = plain.pexpiretime(the_key(plain, p)) / 1000
        check_headers(framework, headers, max(0, LIMIT - n), reset, time.time())
    assert statuses == [200] * LIMIT + [429]
    # The Lua twin's state: a plain Redis value (RL.FIXED's twin keeps a string).
    assert plain.type(the_key(plain, p)) == b"string"


@pytest.mark.parametrize("framework", ["flask", "fastapi"])
def test_a_missing_module_is_a_clear_error(framework, plain_server, apps):
    app = apps(framework, f"ratelimit://127.0.0.1:{plain_server.port}")
    status, _, _ = get(app.url + "/")
    assert status == 500
    deadline = time.monotonic() + 10
    while MODULE_NOT_LOADED not in app.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "ModuleNotLoaded: " + MODULE_NOT_LOADED in app.output()
