"""redis-ratelimit from Python: a typed client for every command of the module (sync and
asyncio, standalone and Redis Cluster, over redis-py), HTTP headers and middlewares, and
storages for the ``limits`` library, so that Flask-Limiter and SlowAPI decide with the
module (``storage_uri="ratelimit://host:port"``).

    import redis
    from redis_ratelimit_client import RateLimit

    rl = RateLimit(redis.Redis())
    d = rl.slide("user:42", 100, 60000)
    d.allowed, d.remaining, d.retry_after_ms

Importing this package registers the ``ratelimit://``, ``ratelimit+cluster://``,
``async+ratelimit://`` and ``async+ratelimit+cluster://`` storage schemes with ``limits``
when ``limits`` is installed (``pip install "redis-ratelimit-client[limits]"``).
"""

from __future__ import annotations

from .client import AsyncRateLimit, LeaseRefused, RateLimit
from .decision import NEVER, Decision, Policy, Throttle, TopEntry, ceil_s
from .errors import MODULE_NOT_LOADED, FallbackUnsupported, ModuleNotLoaded
from .headers import headers, headers_all
from .middleware import (
    ASGIRateLimit,
    AsyncLimiter,
    Limiter,
    PolicyLimiter,
    RefusalCache,
    WSGIRateLimit,
    keyed,
)
from .specs import Acquire, Fixed, Leaky, Slide, Spec, Subwin, Token, from_command
from .specs import Throttle as ThrottleSpec

__version__ = "0.1.0"

try:
    import limits as _limits  # noqa: F401
except ImportError:  # limits is optional: the schemes are registered when it is there
    pass
else:
    from . import limits_storage  # noqa: F401  (defining the classes registers the schemes)

__all__ = [
    "ASGIRateLimit",
    "Acquire",
    "AsyncLimiter",
    "AsyncRateLimit",
    "Decision",
    "FallbackUnsupported",
    "Fixed",
    "Leaky",
    "LeaseRefused",
    "Limiter",
    "PolicyLimiter",
    "MODULE_NOT_LOADED",
    "ModuleNotLoaded",
    "NEVER",
    "Policy",
    "RateLimit",
    "RefusalCache",
    "Slide",
    "Spec",
    "Subwin",
    "Throttle",
    "ThrottleSpec",
    "Token",
    "TopEntry",
    "WSGIRateLimit",
    "__version__",
    "ceil_s",
    "from_command",
    "headers",
    "headers_all",
    "keyed",
]
