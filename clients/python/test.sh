#!/usr/bin/env bash
# Installs what the Python client's tests need and runs them: `clients/python/test.sh`.
#
# Makes a virtualenv in clients/python/.venv (gitignored) with every dependency pinned in
# requirements-test.txt, installs the package from this clone into it (not editable: the
# installed package, Lua twins included, is what the tests import), then runs pytest. The
# tests start their own servers: a redis-server with the module, one without it, and a
# 6-node cluster (cluster/cluster.sh), on free ports, removed afterwards.
#
# Environment:
#   MODULE   the module (default: <repo>/target/release/libredis_ratelimit.so)
#   PYTHON   the Python that makes the virtualenv (default: python3)
# Arguments are passed to pytest (test.sh -k limits -x).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export MODULE=${MODULE:-$ROOT/target/release/libredis_ratelimit.so}
VENV=$HERE/.venv

[ -f "$MODULE" ] || { echo "module not found: $MODULE (cargo build --release)" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server not found on PATH" >&2; exit 1; }

# (Re)install the pinned dependencies when the venv is missing or the pins changed.
STAMP=$VENV/.requirements
if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$HERE/requirements-test.txt" "$STAMP"; then
  rm -rf "$VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check pip==25.3
  "$VENV/bin/python" -m pip install -q -r "$HERE/requirements-test.txt"
  cp "$HERE/requirements-test.txt" "$STAMP"
fi
# The package itself, every run (its dependencies are the pinned ones above).
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
  --no-build-isolation --force-reinstall "$HERE"
rm -rf "$HERE/build"

cd "$HERE"
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
