"""The package as installed: its version is the module's, it carries the Lua twins exactly
as clients/lua has them, and importing it registers the storage schemes with limits."""

from __future__ import annotations

import re
from importlib import metadata, resources

import limits.storage

import redis_ratelimit_client
from redis_ratelimit_client.lua import SCRIPTS
from servers import PACKAGE, ROOT


def test_the_version_is_the_modules():
    cargo = (ROOT / "Cargo.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', cargo, re.M).group(1)
    assert redis_ratelimit_client.__version__ == version
    assert metadata.version("redis-ratelimit-client") == version


def test_the_lua_twins_are_the_canonical_ones():
    for name in ("fixed", "slide", "token"):
        canonical = (ROOT / "clients" / "lua" / f"{name}.lua").read_bytes()
        installed = resources.files("redis_ratelimit_client.lua").joinpath(f"{name}.lua")
        assert installed.read_bytes() == canonical, f"{name}.lua differs from clients/lua"
        assert SCRIPTS[name].source == canonical


def test_the_license_is_the_repos():
    assert (PACKAGE / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()


def test_typed():
    assert resources.files("redis_ratelimit_client").joinpath("py.typed").is_file()


def test_the_schemes_are_registered():
    from limits._storage_scheme import SCHEMES

    for scheme in ("ratelimit", "ratelimit+cluster", "async+ratelimit", "async+ratelimit+cluster"):
        assert SCHEMES[scheme].__module__ == "redis_ratelimit_client.limits_storage"
    assert limits.storage.storage_from_string  # (the registry limits reads)
