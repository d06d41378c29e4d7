#!/usr/bin/env bash
# Memory per key, and the time to save and load them: `make bench-memory` from the repo root.
#
# Starts one redis-server with the module (loopback, free port, no persistence, temp dir),
# and for each kind below: FLUSHALL, fills it with BENCH_MEMORY_KEYS keys (one call each,
# sent with redis-cli --pipe), and reads
#   - the growth of INFO's used_memory, per key (key name, value, expiry, dictionary
#     entries and tables: everything a key costs the server),
#   - MEMORY USAGE of one of the keys (SAMPLES 0),
#   - the time of DEBUG RELOAD (save the RDB, flush, load it back; best of
#     BENCH_MEMORY_RELOADS): wall-clock time, and the CPU time of the server's main thread
#     (INFO cpu), which other processes on a shared machine disturb much less; the target
#     is checked on the CPU time,
#   - the size of the RDB file per key,
# next to SET PX, and checks the memory targets of issue 10.
#
# Environment:
#   MODULE               the module to load (default: <repo>/target/release/libredis_ratelimit.so)
#   CELL_SO              redis-cell's libredis_cell.so: adds CL.THROTTLE keys
#   BENCH_MEMORY_KEYS    keys per kind (default: 1000000)
#   BENCH_MEMORY_RELOADS DEBUG RELOAD runs per kind, the best one counts (default: 3)
#   BENCH_MEMORY_SUBJECTS how many subjects of a policy, for the per-subject table (a list:
#                        "1000000 10000000"; default: 1000000)
#   BENCH_MEMORY_PART    keys, subjects, or all (default: all)
#   BENCH_MEMORY_SUBJECT_KINDS  only the per-subject rows whose name matches (a regex)
#
# The per-subject table (issue 30): for each count of subjects, FLUSHALL, then one RL.HIT of
# each subject (12 bytes: 000000000000 ...) under a policy of one limiter, keyed or compact
# (c-*: COMPACT, issue 30), and the growth of used_memory per subject; beside it SET PX of
# keys named as the subjects.
# shellcheck source-path=SCRIPTDIR disable=SC2119 # (lib.sh: functions with optional arguments)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
TAG=bench-memory RCLI_TIMEOUT=300

# Targets from issue 10.
MAX_X_BUCKET=1.2      # token, leaky, fixed: bytes per key, x set-px
MAX_SLIDE_ONE=240     # slide-1: bytes per key
MAX_X_RELOAD=1.5      # every RL.* kind: DEBUG RELOAD CPU time, x set-px's
# Target from issue 30.
MAX_COMPACT=48        # a compact policy's subject (one bucket, fixed window or throttle)
MAX_COMPACT_SLIDE=64  # a compact policy's subject holding a one-request log

env_used MODULE CELL_SO BENCH_MEMORY_KEYS BENCH_MEMORY_RELOADS BENCH_MEMORY_SUBJECTS BENCH_MEMORY_PART BENCH_MEMORY_SUBJECT_KINDS
KEYS=${BENCH_MEMORY_KEYS:-1000000}
RELOADS=${BENCH_MEMORY_RELOADS:-3}
SUBJECT_COUNTS=${BENCH_MEMORY_SUBJECTS:-1000000}
PART=${BENCH_MEMORY_PART:-all}
[[ $PART =~ ^(keys|subjects|all)$ ]] || die "BENCH_MEMORY_PART must be keys, subjects or all"

need_tools "make deps installs redis-server and redis-tools" redis-server redis-cli timeout awk
find_modules
module_args
need_positive KEYS RELOADS

# ---------------------------------------------------------------------------------------
# Server: one redis-server on a free loopback port, with DEBUG (for DEBUG RELOAD); the trap
# stops it and removes the temp dir whatever happens.
# ---------------------------------------------------------------------------------------
setup_tmp rl-memory

launch_server() { # port
  redis-server --port "$1" --bind 127.0.0.1 --dir "$TMP" "${MODULE_ARGS[@]}" \
    --save "" --appendonly no --enable-debug-command yes \
    --logfile "$TMP/redis.log" >/dev/null 2>&1 &
  SERVER_PID=$!
}

start_server 10 redis-server launch_server "$TMP/redis.log"
log "redis-server $SERVER_VERSION on 127.0.0.1:$PORT (pid $SERVER_PID), $KEYS keys per kind"

used_memory() { info_field memory used_memory; }
now_ms() { date +%s%3N; }
# CPU time of the server's main thread, in microseconds.
cpu_us() {
  rcli INFO cpu | tr -d '\r' | awk -F: '
    $1 == "used_cpu_user_main_thread" || $1 == "used_cpu_sys_main_thread" { t += $2 }
    END { printf "%.0f\n", t * 1000000 }'
}

NAMES=() CMDS=() BYTES=() USAGE=() RELOAD_MS=() RELOAD_CPU=() RDB=()
[[ $PART == subjects ]] && KEY_KINDS=()
for line in "${KEY_KINDS[@]}"; do
  IFS='|' read -r name cmd <<<"$line"
  name=$(trim "$name") cmd=$(trim "$cmd")
  [[ -n $CL_BY || ! $cmd =~ ^CL\. ]] || continue
  rcli FLUSHALL SYNC >/dev/null
  before=$(used_memory)
  fill_kind "$name" "$cmd" "$KEYS" 900
  after=$(used_memory)
  usage=$(rcli MEMORY USAGE m:000000000001 SAMPLES 0)
  best='' best_cpu=''
  for _ in $(seq "$RELOADS"); do
    c0=$(cpu_us)
    t0=$(now_ms)
    reply=$(rcli DEBUG RELOAD)
    t1=$(now_ms)
    c1=$(cpu_us)
    [[ $reply == OK ]] || die "kind $name: DEBUG RELOAD answered: $reply"
    ((${best:-999999999} <= t1 - t0)) || best=$((t1 - t0))
    ((${best_cpu:-999999999999} <= c1 - c0)) || best_cpu=$((c1 - c0))
  done
  keys=$(rcli DBSIZE)
  ((keys == KEYS)) || die "kind $name: $keys keys after DEBUG RELOAD, $KEYS expected"
  rdb=$(stat -c %s "$TMP/dump.rdb")
  NAMES+=("$name") CMDS+=("$cmd") USAGE+=("$usage") RELOAD_MS+=("$best") RDB+=("$rdb")
  RELOAD_CPU+=("$((best_cpu / 1000))")
  BYTES+=("$(awk -v a="$after" -v b="$before" -v n="$KEYS" 'BEGIN { printf "%.1f", (a - b) / n }')")
  log "$(printf '%-10s %8s bytes/key  MEMORY USAGE %4s  DEBUG RELOAD %6d ms, %6d ms CPU' "$name" "${BYTES[-1]}" "$usage" "$best" "${RELOAD_CPU[-1]}")"
done
rcli FLUSHALL SYNC >/dev/null

# ---------------------------------------------------------------------------------------
# Subjects of a policy: bytes per subject (issue 30)
# ---------------------------------------------------------------------------------------
SUBJECT_KINDS=(
  "set-px      | SET __key__ v PX 86400000"
  "token       | RL.HIT ptoken __key__        | ptoken t TOKEN 100 86400000"
  "leaky       | RL.HIT pleaky __key__        | pleaky l LEAKY 100 86400000"
  "fixed       | RL.HIT pfixed __key__        | pfixed f FIXED 100 86400000"
  "throttle    | RL.HIT pthrottle __key__     | pthrottle c THROTTLE 99 100 86400"
  "slide-1     | RL.HIT pslide __key__        | pslide s SLIDE 100 86400000"
  "c-token     | RL.HIT ctoken __key__        | ctoken COMPACT t TOKEN 100 86400000"
  "c-leaky     | RL.HIT cleaky __key__        | cleaky COMPACT l LEAKY 100 86400000"
  "c-fixed     | RL.HIT cfixed __key__        | cfixed COMPACT f FIXED 100 86400000"
  "c-throttle  | RL.HIT cthrottle __key__     | cthrottle COMPACT c THROTTLE 99 100 86400"
  "c-slide-1   | RL.HIT cslide __key__        | cslide COMPACT s SLIDE 100 86400000"
)
# Only the kinds whose name matches this (an extended regex), when set.
SUBJECT_ONLY=${BENCH_MEMORY_SUBJECT_KINDS:-}
S_NAMES=() S_COUNT=() S_BYTES=()
if [[ $PART != keys ]] && rcli COMMAND INFO RL.HIT | grep -qi rl.hit; then
  for n in $SUBJECT_COUNTS; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "BENCH_MEMORY_SUBJECTS: '$n' is not a count"
    for line in "${SUBJECT_KINDS[@]}"; do
      IFS='|' read -r name cmd policy <<<"$line"
      name=$(trim "$name") cmd=$(trim "$cmd") policy=$(trim "${policy:-}")
      [[ -z $SUBJECT_ONLY || $name =~ $SUBJECT_ONLY ]] || continue
      if [[ -n $policy ]]; then
        # shellcheck disable=SC2086 # (the policy's words)
        [[ $(rcli RL.POLICY SET $policy) == OK ]] || die "RL.POLICY SET $policy failed"
      fi
      rcli FLUSHALL SYNC >/dev/null
      before=$(used_memory)
      # A compact policy's subjects are in one key per hash slot they fall in.
      want=$n
      [[ $policy != *COMPACT* ]] || want=$((n < 16384 ? -1 : 16384))
      fill_kind "$name" "$cmd" "$n" 1800 "%012d" "$want"
      after=$(used_memory)
      S_NAMES+=("$name") S_COUNT+=("$n")
      S_BYTES+=("$(awk -v a="$after" -v b="$before" -v n="$n" 'BEGIN { printf "%.1f", (a - b) / n }')")
      log "$(printf '%-10s %10d subjects: %8s bytes/subject' "$name" "$n" "${S_BYTES[-1]}")"
    done
  done
  rcli FLUSHALL SYNC >/dev/null
fi

# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------
if ((${#S_NAMES[@]} > 0)); then
  echo
  echo "Memory per subject of a policy of one limiter (growth of used_memory; 12-byte subjects 000000000000 ...; set-px: keys named as the subjects)"
  echo
  printf '%-10s %-12s %14s\n' kind subjects bytes/subject
  for i in "${!S_NAMES[@]}"; do
    printf '%-10s %-12s %14s\n' "${S_NAMES[i]}" "${S_COUNT[i]}" "${S_BYTES[i]}"
  done
  for line in "${SUBJECT_KINDS[@]}"; do
    IFS='|' read -r name _ policy <<<"$line"
    name=$(trim "$name")
    [[ -z $SUBJECT_ONLY || $name =~ $SUBJECT_ONLY ]] || continue
    [[ -z ${policy// /} ]] || echo "  $name: RL.POLICY SET $(trim "$policy")"
  done
  echo "Anchors (cited by issue 30, not measured here): nginx limit_req 64 bytes a state;"
  echo "throttlecrab about 100; a Redis string key with a TTL about 55 of overhead alone."
  echo "Targets (issue 30): c-token, c-leaky, c-fixed, c-throttle <= $MAX_COMPACT bytes a subject;"
  echo "c-slide-1 (a log of one request) <= $MAX_COMPACT_SLIDE."
  for i in "${!S_NAMES[@]}"; do
    case ${S_NAMES[i]} in
      c-slide*) max=$MAX_COMPACT_SLIDE ;;
      c-*) max=$MAX_COMPACT ;;
      *) continue ;;
    esac
    awk -v b="${S_BYTES[i]}" -v m="$max" 'BEGIN { exit !(b > m) }' &&
      echo "  MISSED: ${S_NAMES[i]} at ${S_COUNT[i]} subjects: ${S_BYTES[i]} bytes (target <= $max)"
  done
fi
if ((${#NAMES[@]} == 0)); then
  echo
  print_produced memory.sh bench-memory ", $(elapsed) s"
  print_setup
  exit 0
fi
echo
printf 'Memory per key over %s keys (growth of used_memory), and DEBUG RELOAD of them (best of %s; x set-px: of the CPU time)\n' "$KEYS" "$RELOADS"
echo
printf '%-10s %-38s %10s %9s %13s %10s %14s %9s %10s\n' kind "command (k: m:000000000000 ...)" bytes/key "x set-px" "MEMORY USAGE" "reload ms" "reload CPU ms" "x set-px" "rdb b/key"
MISSES=()
for i in "${!NAMES[@]}"; do
  printf '%-10s %-38s %10s %9s %13s %10s %14s %9s %10s\n' "${NAMES[i]}" "${CMDS[i]//__key__/k}" "${BYTES[i]}" \
    "$(ratio "${BYTES[i]}" "${BYTES[0]}")" "${USAGE[i]}" "${RELOAD_MS[i]}" "${RELOAD_CPU[i]}" \
    "$(ratio "${RELOAD_CPU[i]}" "${RELOAD_CPU[0]}")" "$(awk -v a="${RDB[i]}" -v n="$KEYS" 'BEGIN { printf "%.1f", a / n }')"
  case ${NAMES[i]} in
    token | leaky | fixed)
      if awk -v a="${BYTES[i]}" -v b="${BYTES[0]}" -v m="$MAX_X_BUCKET" 'BEGIN { exit !(a > m * b) }'; then
        MISSES+=("${NAMES[i]}: $(ratio "${BYTES[i]}" "${BYTES[0]}") set-px's bytes per key, target <= ${MAX_X_BUCKET}x")
      fi
      ;;
    slide-1)
      if awk -v a="${BYTES[i]}" -v m="$MAX_SLIDE_ONE" 'BEGIN { exit !(a > m) }'; then
        MISSES+=("slide-1: ${BYTES[i]} bytes per key, target <= $MAX_SLIDE_ONE")
      fi
      ;;
  esac
  case ${CMDS[i]} in
    RL.*)
      if awk -v a="${RELOAD_CPU[i]}" -v b="${RELOAD_CPU[0]}" -v m="$MAX_X_RELOAD" 'BEGIN { exit !(a > m * b) }'; then
        MISSES+=("${NAMES[i]}: DEBUG RELOAD takes $(ratio "${RELOAD_CPU[i]}" "${RELOAD_CPU[0]}") set-px's CPU time, target <= ${MAX_X_RELOAD}x")
      fi
      ;;
  esac
done
echo
targets="targets (token, leaky, fixed <= ${MAX_X_BUCKET}x set-px bytes/key; slide-1 <= $MAX_SLIDE_ONE bytes/key; DEBUG RELOAD CPU time of every RL.* kind <= ${MAX_X_RELOAD}x set-px's)"
print_targets "$targets"
echo
print_produced memory.sh bench-memory ", $(elapsed) s"
print_setup
