#!/usr/bin/env python3
"""Writes the wheel of redis-ratelimit-module: `make wheel`.

The wheel carries the release library as redis_ratelimit_module/lib/libredis_ratelimit.so,
next to the Python sources in packaging/wheel/src/ and a generated _version.py. Its name is
redis_ratelimit_module-<version>-py3-none-<platform>.whl, where

- the version is the top-level Cargo.toml's (the module's: MODULE LIST says it too), and
- the platform is read from the library itself: manylinux_<x>_<y>_<arch>, with x.y the
  newest GLIBC_x.y symbol version it needs (its ELF version-needs section, the list the
  dynamic loader checks) and arch its ELF machine. pip installs the wheel only where glibc is
  at least x.y, which is where the library loads.

The wheel is written here, with the standard library only (zipfile, hashlib): no build
backend to install or pin, and the same library gives the same wheel, byte for byte
(timestamps from SOURCE_DATE_EPOCH, 1980-01-01 by default). A library that needs a shared
library outside the manylinux set (the C library, libm, libgcc_s and the like), or a C
library other than glibc, is refused: it would not load everywhere the tag promises.

Usage:
  build_wheel.py [--so PATH] [--out DIR]   write the wheel, print its path
  build_wheel.py --glibc [--so PATH]       print the glibc the library needs (2.34)
  build_wheel.py --tag [--so PATH]         print the platform tag (manylinux_2_34_x86_64)
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import struct
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SRC = os.path.join(HERE, "src", "redis_ratelimit_module")

NAME = "redis-ratelimit-module"
PACKAGE = "redis_ratelimit_module"
LIBRARY = "libredis_ratelimit.so"
SUMMARY = (
    "The redis-ratelimit module (libredis_ratelimit.so) for redis-server --loadmodule: "
    "native rate limiting commands for Redis and Valkey"
)

# The libraries a manylinux wheel may leave to the system (PEP 600; auditwheel's policy,
# without its X11 and GL entries, which a Redis module has no use for), and the dynamic
# loaders of glibc, which every program on the machine already uses.
MANYLINUX_LIBS = {
    "libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0",
    "libresolv.so.2", "libutil.so.1", "libnsl.so.1", "libgcc_s.so.1", "libstdc++.so.6",
    "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "ld-linux.so.2", "ld-linux-armhf.so.3",
    "ld64.so.1", "ld64.so.2", "ld-linux-riscv64-lp64d.so.1",
}

# ELF e_machine -> the architecture of a manylinux platform tag (PPC64 and S390 are told apart
# by byte order and class below: manylinux has ppc64le and s390x only).
MACHINES = {3: "i686", 40: "armv7l", 62: "x86_64", 183: "aarch64", 243: "riscv64"}
EM_PPC64, EM_S390 = 21, 22

SHT_DYNAMIC, SHT_GNU_VERNEED = 6, 0x6FFFFFFE
DT_NEEDED = 1


class BuildError(Exception):
    """A wheel that cannot be written as asked: the message says why."""


def elf_needs(so_path: str) -> tuple[str, list[str], list[str]]:
    """The architecture, the shared libraries (DT_NEEDED) and the symbol versions (the
    version-needs section: GLIBC_2.34, GCC_3.0, ...) of the ELF shared library at so_path."""
    with open(so_path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        raise BuildError(f"{so_path} is not an ELF file (a wheel is built on Linux only)")
    bits = {1: 32, 2: 64}.get(data[4])
    order = {1: "<", 2: ">"}.get(data[5])
    if bits is None or order is None:
        raise BuildError(f"{so_path}: unknown ELF class or byte order")
    machine = struct.unpack_from(order + "H", data, 18)[0]
    if bits == 64:
        shoff, = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
        shdr = order + "IIQQQQIIQQ"
        dyn = order + "qQ"
    else:
        shoff, = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
        shdr = order + "IIIIIIIIII"
        dyn = order + "iI"
    if shoff == 0 or shnum == 0:
        raise BuildError(f"{so_path} has no section headers: cannot read what it needs")
    # (type, offset, size, link, info) of each section.
    sections = []
    for i in range(shnum):
        header = struct.unpack_from(shdr, data, shoff + i * shentsize)
        sections.append((header[1], header[4], header[5], header[6], header[7]))

    def string(table: int, at: int) -> str:
        start = sections[table][1] + at
        return data[start:data.index(b"\0", start)].decode()

    needed, versions = [], []
    for kind, offset, size, link, info in sections:
        if kind == SHT_DYNAMIC:
            step = struct.calcsize(dyn)
            for at in range(offset, offset + size, step):
                tag, value = struct.unpack_from(dyn, data, at)
                if tag == 0:
                    break
                if tag == DT_NEEDED:
                    needed.append(string(link, value))
        elif kind == SHT_GNU_VERNEED:
            at = offset
            for _ in range(info):
                _, count, _, aux, following = struct.unpack_from(order + "HHIII", data, at)
                a = at + aux
                for _ in range(count):
                    _, _, _, name, next_aux = struct.unpack_from(order + "IHHII", data, a)
                    versions.append(string(link, name))
                    a += next_aux
                at += following
    if machine == EM_PPC64 and order == "<":
        arch = "ppc64le"
    elif machine == EM_S390 and bits == 64:
        arch = "s390x"
    else:
        arch = MACHINES.get(machine)
    if arch is None:
        raise BuildError(f"{so_path}: no manylinux platform for ELF machine {machine}")
    return arch, needed, versions


def platform_tag(so_path: str) -> tuple[str, tuple[int, int]]:
    """manylinux_<x>_<y>_<arch> for the library, and (x, y): the newest glibc it needs."""
    arch, needed, versions = elf_needs(so_path)
    foreign = [lib for lib in needed if lib not in MANYLINUX_LIBS]
    if any(lib.startswith("libc.musl") for lib in foreign):
        raise BuildError(f"{so_path} is linked against musl, not glibc: no manylinux wheel")
    if foreign:
        raise BuildError(
            f"{so_path} needs {', '.join(foreign)}, which a manylinux system may lack: "
            "link it statically or leave it out"
        )
    glibc = [tuple(int(n) for n in m.groups()) for m in
             (re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", v) for v in versions) if m]
    if not glibc:
        raise BuildError(f"{so_path} needs no GLIBC_ symbol version: not a glibc build?")
    major, minor = max(glibc)
    return f"manylinux_{major}_{minor}_{arch}", (major, minor)


def cargo_version(cargo_toml: str) -> str:
    """The version of the [package] in cargo_toml (its first `version = "..."` line, as the
    Makefile reads it)."""
    with open(cargo_toml, encoding="utf-8") as f:
        for line in f:
            m = re.match(r'^version = "([^"]+)"', line)
            if m:
                return m.group(1)
    raise BuildError(f"no version line in {cargo_toml}")


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def metadata(version: str) -> str:
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    fields = [
        ("Metadata-Version", "2.1"),
        ("Name", NAME),
        ("Version", version),
        ("Summary", SUMMARY),
        ("License", "BSD-3-Clause"),
        ("Requires-Python", ">=3.8"),
        ("Keywords", "redis,valkey,rate-limiting,redis-module"),
        ("Classifier", "License :: OSI Approved :: BSD License"),
        ("Classifier", "Operating System :: POSIX :: Linux"),
        ("Classifier", "Programming Language :: Python :: 3"),
        ("Classifier", "Programming Language :: Rust"),
        ("Classifier", "Topic :: Database"),
        ("Description-Content-Type", "text/markdown"),
    ]
    head = "".join(f"{k}: {v}\n" for k, v in fields)
    return f"{head}\n{readme}"


def build(so_path: str, out_dir: str, cargo_toml: str) -> str:
    """Writes the wheel into out_dir and returns its path."""
    tag, _ = platform_tag(so_path)
    version = cargo_version(cargo_toml)
    dist_info = f"{PACKAGE}-{version}.dist-info"
    wheel_name = f"{PACKAGE}-{version}-py3-none-{tag}.whl"

    files = []  # (name in the wheel, bytes, mode)
    for name in sorted(os.listdir(SRC)):
        path = os.path.join(SRC, name)
        if os.path.isfile(path) and (name.endswith(".py") or name == "py.typed"):
            with open(path, "rb") as f:
                files.append((f"{PACKAGE}/{name}", f.read(), 0o644))
    files.append((
        f"{PACKAGE}/_version.py",
        (
            "# Written by packaging/wheel/build_wheel.py when the wheel was built.\n"
            f'__version__ = "{version}"\n'
            f'PLATFORM = "{tag}"\n'
        ).encode(),
        0o644,
    ))
    with open(so_path, "rb") as f:
        files.append((f"{PACKAGE}/lib/{LIBRARY}", f.read(), 0o755))
    with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
        files.append((f"{dist_info}/LICENSE", f.read(), 0o644))
    files.append((f"{dist_info}/METADATA", metadata(version).encode(), 0o644))
    files.append((
        f"{dist_info}/WHEEL",
        (
            "Wheel-Version: 1.0\n"
            "Generator: redis-ratelimit packaging/wheel/build_wheel.py\n"
            "Root-Is-Purelib: false\n"
            f"Tag: py3-none-{tag}\n"
        ).encode(),
        0o644,
    ))
    files.append((
        f"{dist_info}/entry_points.txt",
        f"[console_scripts]\n{NAME} = {PACKAGE}.__main__:main\n".encode(),
        0o644,
    ))
    files.append((f"{dist_info}/top_level.txt", f"{PACKAGE}\n".encode(), 0o644))
    record = "".join(record_line(n, d) + "\n" for n, d, _ in files)
    record += f"{dist_info}/RECORD,,\n"
    files.append((f"{dist_info}/RECORD", record.encode(), 0o644))

    epoch = max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)
    stamp = time.gmtime(epoch)[:6]
    os.makedirs(out_dir, exist_ok=True)
    wheel_path = os.path.join(out_dir, wheel_name)
    partial = wheel_path + ".part"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in files:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data, compresslevel=9)
    os.replace(partial, wheel_path)
    return wheel_path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--so", default=os.path.join(ROOT, "target", "release", LIBRARY),
                        help="the library (default: <repo>/target/release/libredis_ratelimit.so)")
    parser.add_argument("--out", default=os.path.join(ROOT, "dist"),
                        help="where the wheel goes (default: <repo>/dist)")
    parser.add_argument("--cargo-toml", default=os.path.join(ROOT, "Cargo.toml"),
                        help="where the version is read (default: <repo>/Cargo.toml)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--glibc", action="store_true",
                      help="print the glibc version the library needs, write nothing")
    what.add_argument("--tag", action="store_true",
                      help="print the wheel's platform tag, write nothing")
    args = parser.parse_args()
    try:
        if not os.path.isfile(args.so):
            raise BuildError(f"{args.so} not found (make build)")
        if args.glibc:
            print("%d.%d" % platform_tag(args.so)[1])
        elif args.tag:
            print(platform_tag(args.so)[0])
        else:
            print(build(args.so, args.out, args.cargo_toml))
    except BuildError as e:
        print(f"build_wheel.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
