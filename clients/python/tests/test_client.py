"""The sync client against a real server: every command, typed, with the replies of
docs/commands.md (time driven with NOW); the module check; the Lua fallback."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis
from conftest import calls

from redis_ratelimit_client import (
    MODULE_NOT_LOADED,
    Acquire,
    Decision,
    FallbackUnsupported,
    Fixed,
    LeaseRefused,
    ModuleNotLoaded,
    PolicyLimiter,
    RateLimit,
    Slide,
    Token,
    TopEntry,
    from_command,
    headers,
    headers_all,
    keyed,
    WSGIRateLimit,
)
from redis_ratelimit_client.decision import Throttle

D = Decision


def server_ms(client) -> int:
    sec, usec = client.time()
    return sec * 1000 + usec // 1000


def fresh(prefix: str = "py") -> str:
    return f"{prefix}:{uuid.uuid4().hex[:12]}"


@pytest.fixture
def rl(r):
    return RateLimit(r)


def test_slide_as_documented(rl, r, key):
    t = server_ms(r)
    got = [rl.slide(key, 3, 1000, now=t + dt) for dt in (0, 100, 200, 300, 1000)]
    assert got == [D(True, 3, 2, 0, 1000), D(True, 3, 1, 0, 1000), D(True, 3, 0, 0, 1000),
                   D(False, 3, 0, 700, 900), D(True, 3, 0, 0, 1000)]
    assert got[3].retry_after_s == 1 and got[0].retry_after_s is None


def test_slide_with_two_windows(rl, r, key):
    t = server_ms(r)
    assert all(rl.slide(key, 25, 5000, (300, 300000), now=t + i).allowed for i in range(25))
    assert rl.slide(key, 25, 5000, (300, 300000), now=t + 30) == D(False, 25, 0, 4970, 299994)
    assert rl.slide(key, 25, 5000, (300, 300000), now=t + 5030) == D(True, 25, 24, 0, 300000)


def test_cost_peek_refund_never(rl, r, key):
    t = server_ms(r)
    assert rl.slide(key, 10, 60000, cost=4, now=t) == D(True, 10, 6, 0, 60000)
    assert rl.slide(key, 10, 60000, cost=7, now=t + 10) == D(False, 10, 6, 59990, 59990)
    assert rl.peek(key, now=t + 10) == D(True, 10, 6, 0, 59990)
    assert rl.peek(key, cost=7, now=t + 10) == D(False, 10, 6, 59990, 59990)
    assert rl.refund(key, cost=3, now=t + 20) == D(True, 10, 9, 0, 59980)
    assert rl.refund(key, now=t + 20) == D(True, 10, 10, 0, 0)
    assert rl.peek(key) is None and rl.refund(key) is None and rl.charge(key, 3) is None
    big = rl.slide(fresh(), 10, 1000, cost=11)
    assert big == D(False, 10, 10, -1, 0)
    assert big.never and big.retry_after_s is None


def test_token_and_charge(rl, r, key):
    t = server_ms(r)
    assert rl.token(key, 120, 60000, now=t) == D(True, 120, 119, 0, 500)
    for _ in range(119):
        rl.token(key, 120, 60000, now=t)
    assert rl.token(key, 120, 60000, now=t) == D(False, 120, 0, 500, 60000)
    assert rl.token(key, 120, 60000, now=t + 500) == D(True, 120, 0, 0, 60000)
    assert rl.token(key, 120, 60000, now=t + 700) == D(False, 120, 0, 300, 59800)
    tpm = fresh("tpm")
    assert rl.token(tpm, 10000, 60000, cost=3000, now=t) == D(True, 10000, 7000, 0, 18000)
    assert rl.charge(tpm, 7700, now=t) == D(True, 10000, 0, 4206, 64200)
    assert rl.token(fresh(), 10, 1000, burst=2).limit == 2


def test_leaky_books_delays(rl, r, key):
    t = server_ms(r)
    got = [rl.leaky(key, 4, 1000, now=t) for _ in range(4)]
    assert got == [D(True, 5, 4, 0, 250), D(True, 5, 3, 250, 500), D(True, 5, 2, 500, 750),
                   D(True, 5, 1, 750, 1000)]
    assert [d.delay_ms for d in got] == [0, 250, 500, 750]
    assert rl.leaky(key, 4, 1000, maxdelay=500, now=t) == D(False, 3, 0, 500, 1000)
    assert rl.refund(key, now=t) == D(True, 5, 2, 0, 750)


def test_fixed_and_its_headers(rl, r, key):
    t = server_ms(r)
    got = [rl.fixed(key, 3, 60000, now=t + dt) for dt in (0, 1000, 2000, 3000)]
    assert got == [D(True, 3, 2, 0, 60000), D(True, 3, 1, 0, 59000), D(True, 3, 0, 0, 58000),
                   D(False, 3, 0, 57000, 57000)]
    h = dict(headers(got[3], Fixed(3, 60000, name="api")))
    assert h == {
        "X-RateLimit-Limit": "3",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": "57",
        "RateLimit-Policy": '"api";q=3;w=60',
        "RateLimit": '"api";r=0;t=57',
        "Retry-After": "57",
    }
    aligned = rl.fixed(fresh(), 10, 86400000, align=True, now=t)
    assert aligned.reset_after_ms == 86400000 - t % 86400000


def test_subwin_as_documented(rl, r, key):
    t = server_ms(r) // 1000 * 1000 + 1000  # a whole second, ahead
    assert rl.subwin(key, 4, 1000, 250, cost=2, now=t) == D(True, 4, 2, 0, 1249)
    assert rl.subwin(key, 4, 1000, 250, cost=2, now=t + 100) == D(True, 4, 0, 0, 1149)
    assert rl.subwin(key, 4, 1000, 250, now=t + 200) == D(False, 4, 0, 862, 1049)
    assert rl.subwin(key, 4, 1000, 250, cost=2, now=t + 1125) == D(True, 4, 0, 0, 1124)
    assert rl.subwin(key, 4, 1000, 250, now=t + 1249) == D(True, 4, 1, 0, 1000)


def test_decide_runs_a_spec(rl, key):
    assert rl.decide(key, Slide(2, 60000, cost=2)) == D(True, 2, 0, 0, 60000)
    assert not rl.decide(key, Slide(2, 60000)).allowed
    assert rl.decide(fresh(), from_command("RL.TOKEN", 10, 1000, "BURST", 4), cost=3).remaining == 1
    lease = rl.decide(fresh(), Acquire(1, 1000))
    assert lease.allowed and lease.lease_id


def test_throttle_as_redis_cell(rl, r, key):
    t = server_ms(r)
    assert rl.throttle(key, 15, 30, 60, now=t) == Throttle(False, 16, 15, -1, 2)
    assert rl.throttle(key, 15, 30, 60, now=t) == Throttle(False, 16, 14, -1, 4)
    assert rl.throttle(key, 15, 30, 60, 14, now=t) == Throttle(False, 16, 0, -1, 32)
    refused = rl.throttle(key, 15, 30, 60, now=t)
    assert refused == Throttle(True, 16, 0, 2, 32) and not refused.allowed
    assert rl.throttle(key, 15, 30, 60, now=t + 1500) == Throttle(True, 16, 0, 1, 31)
    assert rl.throttle(key, 15, 30, 60, now=t + 2000) == Throttle(False, 16, 0, -1, 32)
    never = rl.throttle(key, 15, 30, 60, 17, now=t + 2000)
    assert never == Throttle(True, 16, 0, -1, 32) and never.never


def test_leases_as_documented(rl, r, key):
    t = server_ms(r)
    first = rl.acquire(key, 2, 1000, now=t)
    assert first == D(True, 2, 1, 0, 1000, lease_id=f"{t}-0".encode())
    assert rl.acquire(key, 2, 1000, id="job-9", now=t + 100) == D(True, 2, 0, 0, 1000, lease_id=b"job-9")
    assert rl.acquire(key, 2, 1000, now=t + 200) == D(False, 2, 0, 800, 900)
    assert rl.acquire(key, 2, 1000, id="job-9", now=t + 600).lease_id == b"job-9"
    assert rl.release(key, "job-9", now=t + 700) == D(True, 2, 1, 0, 300)
    assert rl.peek(key, now=t + 999) == D(True, 2, 1, 0, 1)
    assert not rl.release(key, "job-9", now=t + 800).allowed  # already released
    assert rl.extend(key, first.lease_id, 5000, now=t + 900) == D(True, 2, 1, 0, 5000)


def test_block_waits_for_a_release(rl, server, key):
    holder = rl.acquire(key, 1, 10000)
    waiter = RateLimit(server.client())
    got = {}

    def wait():
        start = time.monotonic()
        got["d"] = waiter.acquire(key, 1, 10000, block_ms=5000)
        got["waited"] = time.monotonic() - start

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.3)
    assert "d" not in got
    rl.release(key, holder.lease_id)
    thread.join(10)
    assert got["d"].allowed and got["d"].lease_id
    assert 0.25 <= got["waited"] < 5
    refused = waiter.acquire(key, 1, 10000, block_ms=200)  # times out: the refusal then
    assert not refused.allowed and refused.lease_id is None


def test_lease_context_releases(rl, key):
    with rl.lease(key, 1, 10000) as d:
        assert d.allowed and rl.peek(key).remaining == 0
        with pytest.raises(LeaseRefused) as refused:
            with rl.lease(key, 1, 10000):
                pass
        assert refused.value.decision.retry_after_ms > 0
    # Released: the key expires with its last lease (or holds no unit).
    assert rl.peek(key) is None or rl.peek(key).remaining == 1
    with pytest.raises(ZeroDivisionError):
        with rl.lease(key, 1, 10000):
            1 / 0
    assert rl.peek(key) is None or rl.peek(key).remaining == 1  # released on the error too


def test_all_with_parts_and_leases(rl, r):
    tag = "{" + fresh("u") + "}"
    t = server_ms(r)
    limiters = [(f"{tag}:rpm", Slide(2, 60000)), (f"{tag}:tpm", Token(10000, 60000, cost=3000))]
    assert rl.all(limiters, now=t) == D(True, 2, 1, 0, 60000, parts=(
        D(True, 2, 1, 0, 60000), D(True, 10000, 7000, 0, 18000)))
    assert rl.all(limiters, now=t + 1).parts[1] == D(True, 10000, 4000, 0, 35999)
    assert rl.all(dict(limiters), now=t + 2) == D(False, 2, 0, 59998, 59999, parts=(
        D(False, 2, 0, 59998, 59999), D(True, 10000, 4000, 0, 35998)))
    jobs = {f"{tag}:r2": Slide(60, 60000), f"{tag}:jobs": Acquire(2, 30000)}
    one, two, three = (rl.all(jobs, now=t + dt) for dt in (0, 1, 2))
    assert one.parts == (D(True, 60, 59, 0, 60000), D(True, 2, 1, 0, 30000, lease_id=f"{t}-0".encode()))
    assert two.parts[1].lease_id == f"{t + 1}-0".encode()
    assert three == D(False, 2, 0, 29998, 59999, parts=(
        D(True, 60, 58, 0, 59999), D(False, 2, 0, 29998, 29999)))
    assert rl.release(f"{tag}:jobs", one.parts[1].lease_id, now=t + 3).allowed
    h = dict(headers_all(three, [Slide(60, 60000, name="rpm"), Acquire(2, 30000, name="jobs")]))
    assert h["RateLimit"] == '"rpm";r=58;t=60, "jobs";r=0;t=30'
    assert h["RateLimit-Policy"] == '"rpm";q=60;w=60, "jobs";q=2;w=30'
    assert h["Retry-After"] == "30"


def test_policies_and_hit(rl, r):
    name = fresh("py-api").replace(":", "-")
    rl.policy_set(name, Slide(100, 60000, name="minute"), Fixed(10000, 86400000, align=True, name="day"))
    assert rl.policy_get(name) == ("minute", "SLIDE", "100", "60000", "day", "FIXED", "10000",
                                   "86400000", "ALIGN")
    d = rl.hit(name, "user:42")
    assert (d.allowed, d.limit, d.remaining, d.refused_by) == (True, 100, 99, None)
    assert [(p.limit, p.remaining) for p in d.parts] == [(100, 99), (10000, 9999)]
    assert r.type(f"{name}|minute|slide|{{user:42}}") == b"ratelimit"
    llm = fresh("py-llm").replace(":", "-")
    rl.policy_set(llm, Slide(2, 60000, cost=1, name="rpm"), Token(100, 60000, name="tpm"))
    assert rl.hit(llm, "user:1", cost=30).parts[1].remaining == 70
    refused = rl.hit(llm, "user:1", cost=80)
    assert (refused.allowed, refused.refused_by) == (False, "tpm")
    assert rl.policy_delete(llm) and not rl.policy_delete(llm)
    assert rl.policy_get(llm) is None
    with pytest.raises(ValueError):
        rl.policy_set(llm, Slide(1, 1000), Token(1, 1000))  # two limiters named "default"
    assert rl.policy_delete(name)


def test_policy_list_pages_every_policy_once(rl):
    prefix = fresh("py-list").replace(":", "-")
    names = [f"{prefix}-{i}" for i in range(7)]
    for n in names:
        rl.policy_set(n, Slide(1, 1000, name="s"))
    cursor, page = rl.policy_list(count=2)
    assert cursor != "0" and len(page) <= 2
    seen = [p for p in rl.policies(count=2) if p.name.startswith(prefix)]
    assert sorted(p.name for p in seen) == names
    assert all(p.words == ("s", "SLIDE", "1", "1000") and len(p.digest) == 16 for p in seen)
    assert len({p.digest for p in seen}) == 1  # the same definition, the same digest
    for n in names:
        rl.policy_delete(n)


def test_top_counts_refusals(rl):
    k = fresh("py-top")
    rl.slide(k, 1, 60000)
    for _ in range(5):
        rl.slide(k, 1, 60000)
    entries = rl.top(count=128)
    mine = [e for e in entries if e.name == k.encode()]
    assert mine and mine[0].count >= 5 and isinstance(mine[0], TopEntry)
    name = fresh("py-toppol").replace(":", "-")
    rl.policy_set(name, Slide(1, 60000, name="m"))
    for _ in range(4):
        rl.hit(name, "alice")
    assert rl.top(policy=name) == [TopEntry(b"alice", 3, 0)]
    rl.policy_delete(name)


def test_hit_tells_a_shadow_refusal_and_a_ban(rl, r):
    shadow = fresh("py-shadow").replace(":", "-")
    r.execute_command("RL.POLICY", "SET", shadow, "m", "SLIDE", "5", "60000",
                      "b", "TOKEN", "1", "60000", "SHADOW")
    first, second = rl.hit(shadow, "alice"), rl.hit(shadow, "alice")
    assert first.shadowed and first.would_refuse is None and len(first.parts) == 2
    assert second.allowed and second.would_refuse == "b" and not second.parts[1].allowed
    box = fresh("py-box").replace(":", "-")
    r.execute_command("RL.POLICY", "SET", box, "PENALTY", "1", "60000", "60000",
                      "m", "SLIDE", "1", "60000")
    assert rl.hit(box, "bob").allowed
    banned = rl.hit(box, "bob")
    assert banned.banned and banned.refused_by == "PENALTY" and not banned.shadowed
    assert banned.retry_after_ms == 60000 and not rl.hit(box, "carol").banned
    for name in (shadow, box):
        rl.policy_delete(name)
    # The reply of a policy without shadow limiters reads as before.
    assert Decision.from_reply([1, 1, 0, 0, 5, None, [1, 1, 0, 0, 5]]).would_refuse is None


def test_the_middleware_gives_and_logs_a_shadow_refusal(rl, r, caplog):
    name = fresh("py-mw").replace(":", "-")
    r.execute_command("RL.POLICY", "SET", name, "b", "TOKEN", "1", "60000", "SHADOW")
    seen = []

    def app(environ, start_response):
        seen.append(environ["ratelimit.decision"])
        start_response("200 OK", [])
        return [b"ok"]

    mw = WSGIRateLimit(app, PolicyLimiter(rl, name, [Token(1, 60000, name="b")]), keyed("ip:"))
    statuses = []
    with caplog.at_level("INFO", logger="redis_ratelimit_client"):
        for _ in range(2):
            mw({"REMOTE_ADDR": "1.2.3.4"}, lambda status, hdrs, exc=None: statuses.append(status))
    assert statuses == ["200 OK", "200 OK"]
    assert [d.would_refuse for d in seen] == [None, "b"]
    assert "shadow limiter b would refuse 'ip:1.2.3.4'" in caplog.text
    rl.policy_delete(name)


def test_strict_parsing():
    for bad in ([1, 2, 3], [1, 2, 3, 4, [5]], ["0", [[b"p", b"d", []]]], [2, 1, 1, 0, 0]):
        with pytest.raises(ValueError):
            Decision.from_reply(bad)
    assert Decision.from_reply(None) is None
    with pytest.raises(ValueError):
        Throttle.from_reply([0, 1, 2])


def test_decode_responses(server, key):
    rl = RateLimit(server.client(decode_responses=True))
    d = rl.acquire(key, 1, 1000, id="w-1")
    assert d.lease_id == "w-1"
    assert rl.release(key, d.lease_id).allowed


def test_the_module_is_checked_once(server, r, key):
    before = calls(r, "command|info")
    rl = RateLimit(server.client())
    for _ in range(5):
        rl.slide(key, 100, 1000)
    assert rl.module_loaded()
    assert calls(r, "command|info") == before + 1


def test_a_missing_module_is_one_clear_error(plain, key):
    rl = RateLimit(plain)
    with pytest.raises(ModuleNotLoaded) as missing:
        rl.slide(key, 10, 1000)
    assert str(missing.value) == MODULE_NOT_LOADED
    assert isinstance(missing.value, RuntimeError)
    assert str(missing.value).startswith(
        "the ratelimit module is not loaded on this server (RL.SLIDE is unknown)")
    for call in (lambda: rl.peek(key), lambda: rl.hit("p", "s"), lambda: rl.policy_get("p")):
        with pytest.raises(ModuleNotLoaded):
            call()
    assert plain.exists(key) == 0


def test_lua_fallback_answers_as_the_module(rl, r, plain):
    lua = RateLimit(plain, fallback="lua")
    assert not lua.module_loaded()
    t = server_ms(r)
    before = calls(plain, "evalsha")

    def both(method, *args, **kw):
        k = f"twin:{uuid.uuid4().hex[:8]}"
        out = []
        for client in (rl, lua):
            out.append([getattr(client, method)(k, *args, now=t + dt, **kw) for dt in steps])
        assert out[0] == out[1], (method, args, kw)
        return out[1]

    steps = (0, 100, 200, 300, 1000)
    got = both("slide", 3, 1000)
    assert got[3] == D(False, 3, 0, 700, 900)
    both("slide", 2, 1000, (3, 5000), cost=1)
    both("slide", 10, 1000, cost=11)
    steps = (0, 1000, 2000, 3000, 60000)
    both("fixed", 3, 60000)
    both("fixed", 3, 60000, cost=2)
    both("fixed", 5, 60000, align=True)
    steps = (0, 0, 0, 250, 500, 700)
    both("token", 2, 1000)
    both("token", 120, 60000, cost=60)
    both("token", 10, 1000, burst=3, cost=2)
    assert calls(plain, "evalsha") > before
    with pytest.raises(FallbackUnsupported) as unsupported:
        lua.peek("k")
    assert "RL.PEEK" in str(unsupported.value) and isinstance(unsupported.value, ModuleNotLoaded)
    for call in (lambda: lua.leaky("k", 1, 1000), lambda: lua.hit("p", "s"),
                 lambda: lua.policy_set("p", Slide(1, 1000)), lambda: lua.top()):
        with pytest.raises(FallbackUnsupported):
            call()


def test_lua_fallback_loads_its_script_after_noscript(plain, key):
    lua = RateLimit(plain, fallback="lua")
    assert lua.slide(key, 5, 1000).remaining == 4
    plain.script_flush()
    evals = calls(plain, "eval")
    assert lua.slide(key, 5, 1000).remaining == 3  # NOSCRIPT, then EVAL (which caches it)
    assert calls(plain, "eval") == evals + 1
    assert lua.slide(key, 5, 1000).remaining == 2
    assert calls(plain, "eval") == evals + 1


def test_fallback_is_not_used_when_the_module_is_there(server, r, key):
    rl = RateLimit(server.client(), fallback="lua")
    before = calls(r, "evalsha")
    assert rl.slide(key, 2, 1000).allowed and rl.peek(key).remaining == 1
    assert calls(r, "evalsha") == before


def test_bad_option():
    with pytest.raises(ValueError):
        RateLimit(redis.Redis(), fallback="sql")
