#!/usr/bin/env bash
# A local Redis Cluster with the module, for trying it by hand. Run by `make cluster` and
# `make cluster-stop` from the repo root.
#
#   cluster/cluster.sh start    6 nodes on 127.0.0.1: ports 7000-7005 (cluster bus 17000-17005),
#                               3 primaries + 3 replicas, each with the module loaded; waits
#                               for cluster_state:ok on every node
#   cluster/cluster.sh stop     stops the nodes and removes everything start created
#   cluster/cluster.sh status   CLUSTER NODES of a running cluster
#
# Everything lives in .cluster/ (gitignored): one directory per node with its nodes.conf,
# redis.log and pid file. The ports are fixed: a start fails if another program holds one.
#
# Environment:
#   MODULE          the module to load (default: <repo>/target/release/libredis_ratelimit.so)
#   CLUSTER_TIMEOUT seconds allowed for each wait (default: 60)
#   CLUSTER_PORTS   six ports, primaries first (default: "7000 7001 7002 7003 7004 7005");
#                   each port + 10000 is its cluster bus port
#   CLUSTER_DIR     where the nodes live (default: <repo>/.cluster)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${CLUSTER_DIR:-$ROOT/.cluster}
MODULE=${MODULE:-$ROOT/target/release/libredis_ratelimit.so}
TIMEOUT=${CLUSTER_TIMEOUT:-60}
read -r -a PORTS <<<"${CLUSTER_PORTS:-7000 7001 7002 7003 7004 7005}"

# The pid of the node on $1 if it runs (the pid file names a live redis-server), else nothing.
node_pid() {
  local pidfile="$STATE/$1/redis.pid" pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] &&
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -Eq "redis-server.*:$1( |\$)"; then
    echo "$pid"
  fi
}

running() {
  local port
  for port in "${PORTS[@]}"; do
    [ -n "$(node_pid "$port")" ] && echo "$port"
  done
  return 0
}

# Waits until "$@" succeeds, failing after $TIMEOUT seconds with message $what.
wait_for() {
  local what=$1 deadline=$((SECONDS + TIMEOUT))
  shift
  until "$@"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "timed out after ${TIMEOUT}s waiting for $what (logs: $STATE/<port>/redis.log)" >&2
      return 1
    fi
    sleep 0.2
  done
}

# Our node on $1 is up: its pid file names a live redis-server, and it answers.
node_up() { [ -n "$(node_pid "$1")" ] && [ "$(redis-cli -p "$1" PING 2>/dev/null)" = PONG ]; }

# The node on $1 is up, or has written its pid file and exited: waiting longer is useless.
node_settled() { node_up "$1" || { [ -f "$STATE/$1/redis.pid" ] && [ -z "$(node_pid "$1")" ]; }; }

# Something accepts connections on 127.0.0.1:$1.
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Every node says cluster_state:ok and knows the 3 replicas, and every replica is in sync.
all_ok() {
  local port info
  for port in "${PORTS[@]}"; do
    redis-cli -p "$port" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok' || return 1
    [ "$(redis-cli -p "$port" CLUSTER NODES 2>/dev/null | awk '$3 ~ /slave/' | wc -l)" = 3 ] ||
      return 1
    info=$(redis-cli -p "$port" INFO replication 2>/dev/null)
    if grep -q '^role:slave' <<<"$info"; then
      grep -q '^master_link_status:up' <<<"$info" || return 1
    fi
  done
}

start() {
  local up
  up=$(running | xargs)
  if [ -n "$up" ]; then
    echo "a cluster is already running (ports: $up); 'make cluster-stop' stops it"
    return 0
  fi
  if [ ! -f "$MODULE" ]; then
    echo "module not found: $MODULE (make build)" >&2
    return 1
  fi
  local port dir p
  for port in "${PORTS[@]}"; do
    for p in "$port" $((port + 10000)); do
      if port_taken "$p"; then
        echo "port $p is taken by another program; the cluster needs ports ${PORTS[*]} and each + 10000" >&2
        return 1
      fi
    done
  done
  # Nothing of ours runs: whatever an earlier run left behind is stale.
  rm -rf "$STATE"
  for port in "${PORTS[@]}"; do
    dir="$STATE/$port"
    mkdir -p "$dir"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" \
      --daemonize yes --pidfile "$dir/redis.pid" --logfile redis.log \
      --save "" --appendonly no --repl-diskless-sync-delay 0 \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
      --loadmodule "$MODULE"
  done
  for port in "${PORTS[@]}"; do
    if ! wait_for "the node on port $port" node_settled "$port" || ! node_up "$port"; then
      echo "the node on port $port did not start; the end of its redis.log:" >&2
      tail -n 20 "$STATE/$port/redis.log" >&2 || true
      stop >/dev/null
      return 1
    fi
  done
  local nodes=()
  for port in "${PORTS[@]}"; do nodes+=("127.0.0.1:$port"); done
  if ! timeout "$TIMEOUT" redis-cli --cluster create "${nodes[@]}" \
    --cluster-replicas 1 --cluster-yes >"$STATE/create.log" 2>&1; then
    cat "$STATE/create.log" >&2
    stop >/dev/null
    return 1
  fi
  if ! wait_for "cluster_state:ok and the replicas on every node" all_ok; then
    stop >/dev/null
    return 1
  fi
  redis-cli -p "${PORTS[0]}" CLUSTER NODES | awk '
    { split($2, a, /[:@]/); port[$1] = a[2]; flags[$1] = $3; of[$1] = $4; slots[$1] = $9 }
    END {
      for (id in port) {
        if (flags[id] ~ /master/) print "  " port[id] " primary, slots " slots[id]
        else print "  " port[id] " replica of " port[of[id]]
      }
    }' | sort
  echo "cluster up on 127.0.0.1:${PORTS[0]}-${PORTS[5]}; try: redis-cli -c -p ${PORTS[0]} RL.SLIDE user:42 100 60000"
}

stop() {
  local port pid entry stopped=()
  for port in "${PORTS[@]}"; do
    pid=$(node_pid "$port")
    [ -n "$pid" ] || continue
    kill "$pid" 2>/dev/null || true
    stopped+=("$port:$pid")
  done
  for entry in "${stopped[@]}"; do
    port=${entry%%:*}
    pid=${entry#*:}
    if ! wait_for "the node on port $port to exit" bash -c "! kill -0 $pid 2>/dev/null"; then
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$STATE"
  if [ ${#stopped[@]} -eq 0 ]; then
    echo "no cluster running"
  else
    echo "stopped ${#stopped[@]} nodes; removed $STATE"
  fi
}

status() {
  local up
  up=$(running | xargs)
  if [ -z "$up" ]; then
    echo "no cluster running"
    return 0
  fi
  redis-cli -p "${up%% *}" CLUSTER NODES
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
