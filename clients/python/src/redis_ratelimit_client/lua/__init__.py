"""The Lua twins of RL.FIXED, RL.SLIDE and RL.TOKEN (``fallback="lua"``): copies of
``clients/lua/{fixed,slide,token}.lua`` of redis-ratelimit, byte for byte (a test checks).
Each is called as ``EVALSHA <sha> 1 key <the words of the module command after its key>``
and answers the command's five integers."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Dict


@dataclass(frozen=True)
class Script:
    name: str
    source: bytes
    #: the SHA-1 of the source, as SCRIPT LOAD answers it: what EVALSHA names
    sha: str


def _load(name: str) -> Script:
    source = resources.files(__name__).joinpath(f"{name}.lua").read_bytes()
    return Script(name, source, hashlib.sha1(source).hexdigest())


#: The twins by the lower-case name of their command's kind.
SCRIPTS: Dict[str, Script] = {name: _load(name) for name in ("fixed", "slide", "token")}
