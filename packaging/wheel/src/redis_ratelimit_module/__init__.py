"""The redis-ratelimit module, libredis_ratelimit.so, installed by pip for redis-server.

    >>> import redis_ratelimit_module
    >>> redis_ratelimit_module.path()
    '/.../site-packages/redis_ratelimit_module/lib/libredis_ratelimit.so'

Give that path to redis-server (``--loadmodule``, a ``loadmodule`` line in redis.conf, or
``MODULE LOAD``); ``redis-ratelimit-module path`` prints it. The library needs the glibc the
wheel's platform tag names (``PLATFORM``, e.g. ``manylinux_2_34_x86_64``: glibc 2.34 or later),
which pip checked before installing it.
"""

from __future__ import annotations

import os

from ._version import PLATFORM, __version__

__all__ = ["path", "PLATFORM", "__version__"]

LIBRARY = "libredis_ratelimit.so"


def path() -> str:
    """The absolute path of the module's library in this package, symbolic links resolved.

    Raises FileNotFoundError when the file is missing (an install damaged since).
    """
    here = os.path.dirname(os.path.realpath(__file__))
    library = os.path.join(here, "lib", LIBRARY)
    if not os.path.isfile(library):
        raise FileNotFoundError(
            f"{library} is missing: reinstall with "
            "pip install --force-reinstall redis-ratelimit-module"
        )
    return library
