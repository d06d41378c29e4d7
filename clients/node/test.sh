#!/usr/bin/env bash
# Installs the Node client's pinned dependencies (npm ci from package-lock.json) and runs its
# whole suite (node:test, test/*.test.*): the client on ioredis and node-redis against a
# server and a 6-node cluster, the Lua fallback on a server without the module, express-rate-
# limit over HTTP (two app processes), rate-limiter-flexible beside RateLimiterRedis, the ES
# module entries and the TypeScript declarations. Every test file starts the servers it needs
# on free ports (redis-server; cluster/cluster.sh for the cluster) and stops them; exits
# non-zero when a test fails.
#
# Environment:
#   MODULE   the module (default: <repo>/target/release/libredis_ratelimit.so)
#   TESTS    which test files to run (default: every test/*.test.js and test/*.test.mjs)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export MODULE=${MODULE:-$ROOT/target/release/libredis_ratelimit.so}

command -v node >/dev/null && command -v npm >/dev/null ||
  { echo "Node.js 18 or later with npm is needed" >&2; exit 1; }
command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
  { echo "redis-server and redis-cli are needed" >&2; exit 1; }
[ -f "$MODULE" ] || { echo "module not found: $MODULE (cargo build --release)" >&2; exit 1; }

cd "$HERE"
npm ci --no-audit --no-fund --loglevel=error
# One file at a time: some read server-wide counters, and the machine may be small.
if [ -n "${TESTS:-}" ]; then
  read -r -a files <<<"$TESTS"
else
  files=(test/*.test.js test/*.test.mjs)
fi
node --test --test-concurrency=1 "${files[@]}"
