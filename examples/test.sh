#!/usr/bin/env bash
# Runs every client example against real servers: `make test-examples` (part of `make test`).
#
# Starts one redis-server with the module and a 6-node cluster (cluster/cluster.sh), both on
# free ports in a temporary directory, runs the Python, Node and Rust examples' checks against
# them, and removes everything afterwards, also when a check fails.
#
# Environment:
#   MODULE     the module (default: <repo>/target/release/libredis_ratelimit.so)
#   PYTHON     the Python with redis-py installed (default: <repo>/.examples/venv/bin/python)
#   EXAMPLES   which to run (default: "python node rust")
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODULE=${MODULE:-$ROOT/target/release/libredis_ratelimit.so}
PYTHON=${PYTHON:-$ROOT/.examples/venv/bin/python}
EXAMPLES=${EXAMPLES:-python node rust}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rl-examples.XXXXXX")
SERVER_PID=

taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Seven ports that are free, and whose +10000 (cluster bus ports) are free too; all below
# 32768, where Linux picks the local ports of outgoing connections (ip_local_port_range).
PORTS=()
while [ ${#PORTS[@]} -lt 7 ]; do
  p=$((10000 + RANDOM % 12000))
  if ! taken "$p" && ! taken $((p + 10000)) && [[ " ${PORTS[*]} " != *" $p "* ]]; then
    PORTS+=("$p")
  fi
done
PORT=${PORTS[0]}
CLUSTER_PORTS="${PORTS[*]:1}"
export CLUSTER_PORTS CLUSTER_DIR="$WORK/cluster" MODULE CLUSTER_TIMEOUT=${CLUSTER_TIMEOUT:-30}

cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  "$ROOT/cluster/cluster.sh" stop >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

[ -f "$MODULE" ] || { echo "module not found: $MODULE (make build)" >&2; exit 1; }
mkdir -p "$WORK/server"
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$WORK/server" --save "" \
  --logfile redis.log --loadmodule "$MODULE" &
SERVER_PID=$!
"$ROOT/cluster/cluster.sh" start >"$WORK/cluster.log" 2>&1 || {
  cat "$WORK/cluster.log" >&2
  exit 1
}
# A fresh cluster leaves each replica out of CLUSTER SLOTS until it has replicated a write
# (CLUSTER SHARDS: "health loading"), so clients would see no replica: write once in each
# primary's slots ("b", "c" and "a" hash to the three ranges), then wait for them to show.
for k in a b c; do redis-cli -c -p "${PORTS[1]}" SET "$k" warm >/dev/null; done
for k in a b c; do redis-cli -c -p "${PORTS[1]}" DEL "$k" >/dev/null; done
replicas_listed() {
  local p
  for p in $CLUSTER_PORTS; do
    redis-cli -p "$p" CLUSTER SHARDS | grep -qx loading && return 1
  done
  return 0
}
for _ in $(seq 200); do replicas_listed && break; sleep 0.1; done
replicas_listed || { echo "the replicas never showed in CLUSTER SHARDS" >&2; exit 1; }
for _ in $(seq 100); do
  [ "$(redis-cli -p "$PORT" PING 2>/dev/null)" = PONG ] && break
  sleep 0.1
done

export RL_URL="redis://127.0.0.1:$PORT"
export RL_CLUSTER=$(echo "$CLUSTER_PORTS" | sed 's/\([0-9]*\)/127.0.0.1:\1/g; s/ /,/g')
echo "examples: server on port $PORT, cluster on ports $CLUSTER_PORTS"

for example in $EXAMPLES; do
  echo "--- $example"
  case "$example" in
    python) "$PYTHON" "$ROOT/examples/python/test_examples.py" ;;
    node)
      # One file at a time: the tests read server-wide counters.
      for f in "$ROOT"/examples/node/test/*.test.js; do node --test "$f"; done
      ;;
    rust) "$ROOT/target/release/examples/client" check ;;
    *) echo "unknown example: $example" >&2; exit 2 ;;
  esac
done
echo "examples: all passed"
