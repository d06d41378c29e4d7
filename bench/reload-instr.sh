#!/usr/bin/env bash
# Instructions per key of DEBUG RELOAD (save the RDB, flush, load it back), counted by
# callgrind: `make bench-reload` from the repo root.
#
# `make bench-memory` times DEBUG RELOAD in CPU time, which moves by a tenth between runs on
# a shared machine; the instructions the server executes do not. This script starts
# redis-server with the module under `valgrind --tool=callgrind` (instrumentation off except
# around each reload), and for each kind below: FLUSHALL, fills it with BENCH_RELOAD_KEYS keys
# (one call each, sent with redis-cli --pipe), then switches instrumentation on, zeroes the
# counters, runs DEBUG RELOAD, dumps the counters and reads the instructions of that window
# (serverCron, which runs whatever the command, left out), divided by the keys. The kinds
# are bench/memory.sh's (KEY_KINDS in bench/lib.sh). It prints
# them beside SET PX's and checks the DEBUG RELOAD target of issue 10 (at most 1.5x SET PX).
#
# Environment:
#   MODULE             the module to load (default: <repo>/target/release/libredis_ratelimit.so)
#   CELL_SO            redis-cell's libredis_cell.so: adds CL.THROTTLE keys
#   BENCH_RELOAD_KEYS  keys per kind (default: 100000)
#   BENCH_TIMEOUT      seconds allowed for one fill or reload (default: 600)
# shellcheck source-path=SCRIPTDIR disable=SC2119 # (lib.sh: functions with optional arguments)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
TAG=bench-reload LOG_CLOCK=1 RCLI_TIMEOUT=600
STOP_WAIT=10 # valgrind writes its last dump

# Target from issue 10 (checked here on instructions, in bench/memory.sh on CPU time).
MAX_X_RELOAD=1.5

env_used MODULE CELL_SO BENCH_RELOAD_KEYS BENCH_TIMEOUT
KEYS=${BENCH_RELOAD_KEYS:-100000}
TIMEOUT=${BENCH_TIMEOUT:-600}

need_tools "make bench-reload installs valgrind; make deps the rest" \
  valgrind callgrind_control callgrind_annotate redis-server redis-cli timeout awk
find_modules
module_args
need_positive KEYS TIMEOUT

setup_tmp rl-reload

launch_server() { # port
  valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$TMP/callgrind.out.%p" --log-file="$TMP/valgrind.log" \
    redis-server --port "$1" --bind 127.0.0.1 --dir "$TMP" "${MODULE_ARGS[@]}" \
    --save "" --appendonly no --enable-debug-command yes \
    --logfile "$TMP/redis.log" >/dev/null 2>&1 &
  SERVER_PID=$!
}

start_server 120 "redis-server under valgrind" launch_server "$TMP/redis.log" "$TMP/valgrind.log"
log "redis-server $SERVER_VERSION under callgrind on 127.0.0.1:$PORT (pid $SERVER_PID), $KEYS keys per kind"

DUMPS=0
NAMES=() CMDS=() IRS=()
for line in "${KEY_KINDS[@]}"; do
  IFS='|' read -r name cmd <<<"$line"
  name=$(trim "$name") cmd=$(trim "$cmd")
  [[ -n $CL_BY || ! $cmd =~ ^CL\. ]] || continue
  fill_kind "$name" "$cmd" "$KEYS" "$TIMEOUT"
  cg -i on
  cg -z
  reply=$(rcli DEBUG RELOAD)
  cg -d
  cg -i off
  DUMPS=$((DUMPS + 1))
  [[ $reply == OK ]] || die "kind $name: DEBUG RELOAD answered: $reply"
  keys=$(rcli DBSIZE)
  ((keys == KEYS)) || die "kind $name: $keys keys after DEBUG RELOAD, $KEYS expected"
  dump=$TMP/callgrind.out.$SERVER_PID.$DUMPS
  [[ -s $dump ]] || die "kind $name: no callgrind dump $dump"
  read -r total excl <<<"$(dump_cost "$dump" serverCron)"
  NAMES+=("$name") CMDS+=("$cmd") IRS+=("$(awk -v a="$((total - excl))" -v n="$KEYS" 'BEGIN { printf "%.0f", a / n }')")
  log "$(printf '%-10s %8s instructions/key' "$name" "${IRS[-1]}")"
done
rcli FLUSHALL SYNC >/dev/null

echo
printf 'DEBUG RELOAD (save, flush, load) of %s keys under callgrind: instructions per key\n' "$KEYS"
echo
printf '%-10s %-38s %12s %9s\n' kind "command (k: m:000000000000 ...)" "Ir/key" "x set-px"
MISSES=()
for i in "${!NAMES[@]}"; do
  printf '%-10s %-38s %12s %9s\n' "${NAMES[i]}" "${CMDS[i]//__key__/k}" "${IRS[i]}" "$(ratio "${IRS[i]}" "${IRS[0]}")"
  [[ ${NAMES[i]} != set-px && ${NAMES[i]} != cl ]] || continue
  if awk -v a="${IRS[i]}" -v b="${IRS[0]}" -v m="$MAX_X_RELOAD" 'BEGIN { exit !(a > m * b) }'; then
    MISSES+=("${NAMES[i]}: DEBUG RELOAD costs $(ratio "${IRS[i]}" "${IRS[0]}") set-px's instructions, target <= ${MAX_X_RELOAD}x")
  fi
done
echo
print_targets "targets (DEBUG RELOAD of every RL.* kind <= ${MAX_X_RELOAD}x set-px's instructions)"
echo
print_produced reload-instr.sh bench-reload ", $(elapsed) s"
print_setup ", valgrind-$(valgrind --version | sed 's/^valgrind-//')"
