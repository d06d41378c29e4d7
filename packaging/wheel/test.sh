#!/usr/bin/env bash
# Tests the wheel as a user meets it: `make test-wheel`.
#
# Builds the wheel of MODULE (packaging/wheel/build_wheel.py) in a temporary directory,
# checks its tag against what the library needs (read again with readelf, independently of
# the builder), installs it with pip into a fresh virtual environment (no index: the wheel
# needs nothing else), asks the installed command for the path, starts redis-server on a free
# port with `--loadmodule <that path>`, and checks that the module answers. Everything is
# removed afterwards, also when a check fails. Needs no network.
#
# Environment:
#   MODULE   the library the wheel carries (default: <repo>/target/release/libredis_ratelimit.so)
#   WHEEL    test this wheel instead of building one (e.g. the one `make wheel` wrote)
#   PYTHON   the Python that makes the virtual environment (default: python3)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MODULE=${MODULE:-$ROOT/target/release/libredis_ratelimit.so}
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rl-wheel.XXXXXX")
SERVER_PID=

cleanup() {
  if [[ -n $SERVER_PID ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "test-wheel: FAIL: $*" >&2
  exit 1
}
ok() { echo "test-wheel: ok: $*"; }

# The wheel, and what its name says.
GIVEN=${WHEEL:-}
if [[ -n $GIVEN ]]; then
  [[ -f $WHEEL ]] || fail "no wheel at $WHEEL"
else
  [[ -f $MODULE ]] || fail "module not found: $MODULE (make build)"
  WHEEL=$("$PYTHON" "$ROOT/packaging/wheel/build_wheel.py" --so "$MODULE" --out "$WORK/dist")
fi
name=$(basename "$WHEEL")
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -n 1)
[[ $name =~ ^redis_ratelimit_module-([^-]+)-py3-none-(manylinux_([0-9]+)_([0-9]+)_([a-z0-9_]+))\.whl$ ]] ||
  fail "$name is not named redis_ratelimit_module-<version>-py3-none-manylinux_<x>_<y>_<arch>.whl"
tag=${BASH_REMATCH[2]} tag_glibc=${BASH_REMATCH[3]}.${BASH_REMATCH[4]} tag_arch=${BASH_REMATCH[5]}
[[ ${BASH_REMATCH[1]} == "$version" ]] || fail "$name: version ${BASH_REMATCH[1]}, Cargo.toml says $version"
ok "$name ($(stat -c %s "$WHEEL") bytes)"

# The tag against the library inside, read with binutils: the newest GLIBC_x.y among the
# versions it needs, and its machine.
mkdir -p "$WORK/unpacked"
"$PYTHON" -m zipfile -e "$WHEEL" "$WORK/unpacked"
so=$WORK/unpacked/redis_ratelimit_module/lib/libredis_ratelimit.so
[[ -f $so ]] || fail "$name holds no redis_ratelimit_module/lib/libredis_ratelimit.so"
command -v readelf >/dev/null || fail "readelf is missing (binutils: make build-deps installs it)"
needs=$(readelf --version-info -W "$so" | grep -oE 'Name: GLIBC_[0-9]+\.[0-9]+(\.[0-9]+)?' |
  sed 's/^Name: GLIBC_//' | sort -V | tail -n 1)
needs=$(cut -d. -f1-2 <<<"$needs")
[[ -n $needs ]] || fail "readelf finds no GLIBC_ version needed by the library"
machine=$(readelf -h "$so" | sed -n 's/^ *Machine: *//p')
case $machine in
  *X86-64*) arch=x86_64 ;;
  AArch64) arch=aarch64 ;;
  *) arch="($machine)" ;;
esac
[[ $needs == "$tag_glibc" ]] || fail "the tag says glibc $tag_glibc, the library needs GLIBC_$needs"
[[ $arch == "$tag_arch" ]] || fail "the tag says $tag_arch, the library is built for $arch"
grep -qx "Tag: py3-none-$tag" "$WORK/unpacked/redis_ratelimit_module-$version.dist-info/WHEEL" ||
  fail "the WHEEL file's Tag is not py3-none-$tag"
ok "tag $tag: the library needs GLIBC_$needs (readelf), machine $machine"

# pip follows the tag: it takes the wheel for a platform of that glibc and refuses it for one
# a minor version older.
older=manylinux_${tag_glibc%.*}_$((${tag_glibc#*.} - 1))_$tag_arch
pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
pick() {
  "$PYTHON" -m pip download -q --no-index --no-deps --only-binary=:all: \
    --find-links "$(dirname "$WHEEL")" --platform "$1" --python-version "$pyver" \
    -d "$WORK/picked-$1" redis-ratelimit-module >/dev/null 2>&1
}
pick "$tag" || fail "pip does not take the wheel for --platform $tag"
! pick "$older" || fail "pip takes the wheel for --platform $older"
ok "pip takes it for $tag, refuses it for $older"

# A fresh virtual environment, the wheel installed into it.
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --no-index --no-deps "$WHEEL" ||
  fail "pip install $name failed (this machine: $(ldd --version 2>&1 | head -n 1))"
ok "pip install into a fresh venv (this machine: $(ldd --version 2>&1 | head -n 1))"

path=$("$WORK/venv/bin/redis-ratelimit-module" path) || fail "redis-ratelimit-module path failed"
[[ $path == /* && -f $path ]] || fail "redis-ratelimit-module path printed '$path', not a file"
[[ $path == "$(cd "$WORK/venv" && pwd -P)"/* ]] || fail "$path is not inside the venv"
cmp -s "$path" "$so" || fail "the installed library differs from the wheel's"
[[ -n $GIVEN ]] || cmp -s "$path" "$MODULE" || fail "the installed library differs from $MODULE"
from_m=$("$WORK/venv/bin/python" -m redis_ratelimit_module path)
[[ $from_m == "$path" ]] || fail "python -m redis_ratelimit_module path printed '$from_m', not '$path'"
from_api=$("$WORK/venv/bin/python" -c 'import redis_ratelimit_module as m; print(m.path())')
[[ $from_api == "$path" ]] || fail "redis_ratelimit_module.path() returned '$from_api', not '$path'"
said=$("$WORK/venv/bin/redis-ratelimit-module" --version)
[[ $said == "redis-ratelimit-module $version ($tag)" ]] || fail "--version printed '$said'"
ok "redis-ratelimit-module path = python -m redis_ratelimit_module path = path() = $path"
ok "--version: $said"

# A server with the module from that path, on a free port (below 32768, where Linux picks
# the local ports of outgoing connections).
taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=
for _ in $(seq 20); do
  p=$((10000 + RANDOM % 20000))
  if ! taken "$p"; then port=$p && break; fi
done
[[ -n $port ]] || fail "no free port found"
mkdir -p "$WORK/server"
redis-server --port "$port" --bind 127.0.0.1 --dir "$WORK/server" --save "" \
  --logfile redis.log --loadmodule "$path" >/dev/null 2>&1 &
SERVER_PID=$!
cli() { redis-cli -p "$port" "$@"; }
deadline=$((SECONDS + 10))
until [[ $(cli PING 2>/dev/null) == PONG ]]; do
  kill -0 "$SERVER_PID" 2>/dev/null ||
    fail "redis-server exited: $(tail -n 5 "$WORK/server/redis.log" 2>/dev/null)"
  ((SECONDS < deadline)) || fail "redis-server did not answer PING within 10 s"
  sleep 0.05
done

reply=$(cli RL.SLIDE k 10 1000)
[[ $(wc -l <<<"$reply") == 5 ]] && ! grep -qvE '^-?[0-9]+$' <<<"$reply" ||
  fail "RL.SLIDE k 10 1000 answered: $reply"
[[ $(paste -sd' ' <<<"$reply") == "1 10 9 0 1000" ]] ||
  fail "RL.SLIDE k 10 1000 answered $(paste -sd' ' <<<"$reply"), not 1 10 9 0 1000"
ok "RL.SLIDE k 10 1000: $(paste -sd' ' <<<"$reply")"
modules=$(cli MODULE LIST)
grep -qx ratelimit <<<"$modules" || fail "MODULE LIST does not show ratelimit: $modules"
# Only this module's entry (Valkey 9 lists its built-in lua module too): from its name to
# the next name.
modules=$(awk 'prev == "name" { keep = ($0 == "ratelimit") } keep; { prev = $0 }' <<<"$modules")
IFS=. read -r major minor patch <<<"$version"
ver=$(grep -A1 -x ver <<<"$modules" | tail -n 1)
[[ $ver == $((major * 10000 + minor * 100 + patch)) ]] ||
  fail "MODULE LIST says version $ver, the wheel $version"
loaded=$(grep -A1 -x path <<<"$modules" | tail -n 1)
[[ -z $loaded || $loaded == "$path" ]] || fail "MODULE LIST says it loaded $loaded, not $path"
ok "MODULE LIST: ratelimit, ver $ver${loaded:+, from $loaded}"

cli SHUTDOWN NOSAVE >/dev/null 2>&1 || true
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=
echo "test-wheel: all passed"
