"""The errors of the client: a server without the module, and a command the Lua fallback
cannot run."""

from __future__ import annotations

#: The one text every client of redis-ratelimit raises when the module is missing
#: (the Node and Rust clients raise the same, with their own spelling of the option).
MODULE_NOT_LOADED = (
    "the ratelimit module is not loaded on this server (RL.SLIDE is unknown): load it with "
    "MODULE LOAD /path/to/libredis_ratelimit.so or a loadmodule line in redis.conf "
    "(pip install redis-ratelimit-module, then redis-ratelimit-module path, prints it); "
    'where MODULE LOAD is not allowed, pass fallback="lua" (fixed window, sliding log and '
    "token bucket only). See docs/clients.md of redis-ratelimit."
)


class ModuleNotLoaded(RuntimeError):
    """The server does not know RL.SLIDE (``COMMAND INFO RL.SLIDE`` answered nil), and the
    client was not made with ``fallback="lua"``. Raised at the first call, once per client;
    the check is not repeated while the client lives."""

    def __init__(self, message: str = MODULE_NOT_LOADED) -> None:
        super().__init__(message)


class FallbackUnsupported(ModuleNotLoaded):
    """The module is missing and the client runs on the Lua twins (``fallback="lua"``),
    which cover RL.FIXED, RL.SLIDE and RL.TOKEN only: any other command raises this."""

    def __init__(self, command: str) -> None:
        self.command = command
        super().__init__(
            f"{command} needs the ratelimit module, which is not loaded on this server "
            '(RL.SLIDE is unknown): with fallback="lua" only RL.FIXED, RL.SLIDE and RL.TOKEN '
            "run, as Lua scripts. Load the module (MODULE LOAD /path/to/libredis_ratelimit.so "
            "or a loadmodule line in redis.conf) for the others. See docs/clients.md of "
            "redis-ratelimit."
        )
