# shellcheck shell=bash disable=SC2034 # (sets variables for the scripts that source it)
# What bench/bench.sh, bench/instr.sh and bench/memory.sh share, sourced by each after its
# `set -euo pipefail`: checking the settings, the temp dir and the exit trap, starting
# redis-server on a free loopback port and stopping it, talking to it, the report's end.
#
# A script sets TAG (the prefix of its messages) and may change the three defaults below.
# start_redis: up to 10 free random ports; `launch port` (the script's) starts the server in
# the background and sets pid_var; a server that exits because its port was taken in between
# is tried on another port; any other failure prints the tails of the logs (the first one is
# the server's) and dies. The trap of setup_tmp stops SERVER_PID and REPLICA_PID (INT exits
# 130, TERM 143, anything else keeps its status).

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
LOG_CLOCK=       # non-empty: log lines start with the time of day
RCLI_TIMEOUT=30  # seconds allowed for one rcli call
STOP_WAIT=5      # seconds a server has to exit after SIGTERM, before SIGKILL

# ---------------------------------------------------------------------------------------
# Messages and settings
# ---------------------------------------------------------------------------------------

# die message: "TAG: message" on stderr, exit 1.
die() {
  echo "$TAG: $*" >&2
  exit 1
}

# log message: "TAG: message" on stderr (after the time of day with LOG_CLOCK).
log() { echo "$TAG: ${LOG_CLOCK:+$(date +%T) }$*" >&2; }

# env_used VAR...: ENV_USED, those of the variables set in the environment ("VAR=value ").
env_used() {
  local v
  ENV_USED=
  for v in "$@"; do
    [[ -z ${!v+x} ]] || ENV_USED+="$v=${!v} "
  done
}

# need_tools hint tool...: dies naming the first tool not on PATH, with the hint.
need_tools() {
  local hint=$1 tool
  shift
  for tool in "$@"; do
    command -v "$tool" >/dev/null || die "$tool not found ($hint)"
  done
}

# find_modules: MODULE (default: the release build) and CELL_SO made absolute; dies if missing.
find_modules() {
  MODULE=${MODULE:-$ROOT/target/release/libredis_ratelimit.so}
  CELL_SO=${CELL_SO:-}
  case $MODULE in /*) ;; *) MODULE=$PWD/$MODULE ;; esac
  [[ -f $MODULE ]] || die "module not found: $MODULE (run make build)"
  if [[ -n $CELL_SO ]]; then
    case $CELL_SO in /*) ;; *) CELL_SO=$PWD/$CELL_SO ;; esac
    [[ -f $CELL_SO ]] || die "CELL_SO not found: $CELL_SO"
  fi
}

# module_args [option...]: MODULE_ARGS, loading CELL_SO first (redis-cell then serves
# CL.THROTTLE: the module, loaded after it, leaves the name to it), then the module (then
# these options).
module_args() {
  MODULE_ARGS=()
  [[ -z $CELL_SO ]] || MODULE_ARGS+=(--loadmodule "$CELL_SO")
  MODULE_ARGS+=(--loadmodule "$MODULE" "$@")
}

# need_positive VAR...: dies unless each variable holds a positive integer.
need_positive() {
  local v
  for v in "$@"; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
  done
}

# ---------------------------------------------------------------------------------------
# Temp dir, servers
# ---------------------------------------------------------------------------------------

# setup_tmp prefix: TMP, a new temp dir; the exit trap stops the servers and removes it.
setup_tmp() {
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  SERVER_PID='' PORT='' REPLICA_PID='' REPLICA_PORT=''
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# cleanup: the exit trap; stops REPLICA_PID and SERVER_PID, removes TMP, keeps the status.
cleanup() {
  local rc=$?
  stop_pid "$REPLICA_PID"
  stop_pid "$SERVER_PID"
  rm -rf "$TMP"
  exit "$rc"
}

# stop_pid pid: SIGTERM, STOP_WAIT seconds to exit, then SIGKILL; nothing if empty or gone.
stop_pid() {
  local pid=$1
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq $((STOP_WAIT * 10))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# pin_cpus: PIN_SERVER, PIN_CLIENT: taskset on CPUs 0 and 1 when there are two (else empty).
pin_cpus() {
  PIN_SERVER=() PIN_CLIENT=()
  if command -v taskset >/dev/null && (($(nproc) >= 2)); then
    PIN_SERVER=(taskset -c 0) PIN_CLIENT=(taskset -c 1)
  fi
}

# port_free port: true when nothing accepts connections on 127.0.0.1:port.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# random_port: a port from 20000 to 59999.
random_port() { echo $((20000 + (RANDOM * 32768 + RANDOM) % 40000)); }

# wait_ping port pid seconds: true once the server answers PING, false if it exits first.
wait_ping() {
  for _ in $(seq $(($3 * 10))); do
    kill -0 "$2" 2>/dev/null || return 1
    [[ $(timeout 2 redis-cli -h 127.0.0.1 -p "$1" PING 2>/dev/null) == PONG ]] && return 0
    sleep 0.1
  done
  return 1
}

# start_redis port_var pid_var seconds what launch log...: `launch port` until one answers PING.
start_redis() {
  local -n port_ref=$1 pid_ref=$2
  local seconds=$3 what=$4 launch=$5
  shift 5
  for _ in $(seq 10); do
    port_ref=$(random_port)
    port_free "$port_ref" || continue
    "$launch" "$port_ref"
    wait_ping "$port_ref" "$pid_ref" "$seconds" && return 0
    stop_pid "$pid_ref"
    pid_ref=
    if ! grep -q "Address already in use" "$1" 2>/dev/null; then
      tail -n 5 "$@" >&2 2>/dev/null || true
      die "$what did not start on port $port_ref"
    fi
    log "port $port_ref taken, trying another one"
    : >"$1"
  done
  die "could not start $what"
}

# start_server seconds what launch log...: start_redis PORT SERVER_PID ..., check_server.
start_server() {
  LOAD_BEFORE=$(loadavg)
  STARTED=$(date +%s)
  start_redis PORT SERVER_PID "$@"
  check_server
}

# rcli arg...: redis-cli to the server on PORT, at most RCLI_TIMEOUT seconds.
rcli() { timeout "$RCLI_TIMEOUT" redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }

# info_field section field: the field's value in INFO section.
info_field() { rcli INFO "$1" | tr -d '\r' | awk -F: -v k="$2" '$1 == k { print $2 }'; }

# check_server: SERVER_VERSION, and CL_BY (who serves CL.THROTTLE: redis-cell with CELL_SO,
# else the module when it has it, else nobody and the CL.* cases are skipped); dies unless
# the module (and redis-cell with CELL_SO) loaded.
check_server() {
  SERVER_VERSION=$(info_field server redis_version)
  rcli MODULE LIST | grep -qi ratelimit || die "module not loaded (see $TMP/redis.log)"
  CL_BY=
  if [[ -n $CELL_SO ]]; then
    rcli MODULE LIST | grep -qi redis-cell || die "redis-cell not loaded from $CELL_SO (see $TMP/redis.log)"
    CL_BY=redis-cell
  elif rcli COMMAND INFO CL.THROTTLE | grep -qi throttle; then
    CL_BY="this module"
  fi
}

# read_stat command: "calls usec_per_call errors" from INFO commandstats ("0 0 0": not run).
read_stat() {
  rcli INFO commandstats | tr -d '\r' | awk -v want="cmdstat_$1" '
    BEGIN { want = tolower(want) }
    {
      split($0, kv, ":")
      if (tolower(kv[1]) != want) next
      n = split(kv[2], fields, ",")
      for (j = 1; j <= n; j++) { split(fields[j], p, "="); v[p[1]] = p[2] }
      print v["calls"] + 0, v["usec_per_call"] + 0, v["rejected_calls"] + v["failed_calls"]
      found = 1
    }
    END { if (!found) print "0 0 0" }'
}

# ---------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------

# trim string: the string without leading and trailing blanks.
trim() {
  local s=$1
  s=${s#"${s%%[![:space:]]*}"}
  s=${s%"${s##*[![:space:]]}"}
  printf '%s' "$s"
}

declare -A SHA=()
# script_sha name: the SHA1 of bench/name.lua, loaded with SCRIPT LOAD the first time.
script_sha() {
  local name=$1 file=$BENCH_DIR/$1.lua sha
  if [[ -z ${SHA[$name]:-} ]]; then
    [[ -f $file ]] || die "no script $file"
    sha=$(rcli SCRIPT LOAD "$(cat "$file")")
    [[ $sha =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD $file failed: $sha"
    SHA[$name]=$sha
  fi
  printf '%s' "${SHA[$name]}"
}

# command_words command: WORDS, the command's words, each @name@ replaced by script_sha name.
command_words() {
  local w
  read -r -a WORDS <<<"$1"
  for w in "${!WORDS[@]}"; do
    if [[ ${WORDS[w]} =~ ^@([A-Za-z0-9_.-]+)@$ ]]; then WORDS[w]=$(script_sha "${BASH_REMATCH[1]}"); fi
  done
}

# script_names command: the command as shown, a word @name@ as <name.lua>.
script_names() { sed -E 's/@([A-Za-z0-9_.-]+)@/<\1.lua>/g' <<<"$1"; }

# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------

# ratio a b: a / b as "1.23x", "-" when b is not positive.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else printf "-" }'; }

# loadavg: the 1, 5 and 15 minute load averages.
loadavg() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown; }

# elapsed: whole seconds since start_server.
elapsed() { echo $(($(date +%s) - STARTED)); }

# print_targets text: "text: all met", or "text: missed" and then each of MISSES.
print_targets() {
  if ((${#MISSES[@]} == 0)); then
    echo "$1: all met"
  else
    echo "$1: missed"
    printf '  %s\n' "${MISSES[@]}"
  fi
}

# print_produced script make-target [tail]: the footer's first line, with ENV_USED.
print_produced() { echo "produced by: ${ENV_USED}bench/$1   (make $2)${3:-}"; }

# print_setup [server-tail] [machine-tail]: the footer's server, module, machine, load lines.
print_setup() {
  local commit
  commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD 2>/dev/null || commit+=" (modified)"
  echo "server:      redis-server $SERVER_VERSION ($(redis-server --version | sed -E 's/^Redis server //'))${1:-}"
  echo "module:      $MODULE, commit $commit"
  [[ -z $CELL_SO ]] || echo "redis-cell:  $CELL_SO"
  [[ -z ${CL_BY:-} ]] || echo "CL.THROTTLE: served by $CL_BY"
  echo "machine:     $(nproc) CPUs, $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || uname -m), $(uname -sr)${2:-}"
  echo "load avg:    $LOAD_BEFORE before, $(loadavg) after (1, 5, 15 min)"
}

# ---------------------------------------------------------------------------------------
# Under callgrind (bench/instr.sh, bench/reload-instr.sh)
# ---------------------------------------------------------------------------------------

# cg arg...: callgrind_control arg... on SERVER_PID; it exits 0 even when it reaches no
# process, so its "OK" is looked for.
cg() {
  local out
  out=$(timeout 120 callgrind_control "$@" "$SERVER_PID" 2>&1) || die "callgrind_control $* failed: $out"
  grep -q "OK" <<<"$out" || die "callgrind_control $* failed: $out"
}

# dump_cost dump excluded: the instructions of a callgrind dump, and those of the functions
# whose name matches the regular expression `excluded`. Prints "total excluded".
dump_cost() {
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null | awk -v ex="^($2)\$" '
    /PROGRAM TOTALS/ { gsub(",", "", $1); total = $1 }
    # "   1,234 (12.34%)  file:function [object]"; the percentage may hold a space
    $1 ~ /^[0-9,]+$/ {
      fn = ($NF ~ /^\[/) ? $(NF - 1) : $NF
      sub(/^.*:/, "", fn)
      if (fn ~ ex) { gsub(",", "", $1); excl += $1 }
    }
    END { printf "%d %d\n", total, excl }'
}

# ---------------------------------------------------------------------------------------
# Keys of each kind (bench/memory.sh, bench/reload-instr.sh)
# ---------------------------------------------------------------------------------------

# The kinds: name | command, __key__ standing for the key (m:000000000000, m:000000000001,
# ..., names of the length redis-benchmark's __rand_int__ gives). Windows are long enough
# that no key expires during a run (a token or leaky key expires when its bucket is full
# again: window / limit after one call). The first kind is the baseline; CL.THROTTLE only
# with CELL_SO.
KEY_KINDS=(
  "set-px    | SET __key__ v PX 86400000"
  "token     | RL.TOKEN __key__ 100 86400000"
  "leaky     | RL.LEAKY __key__ 100 86400000"
  "fixed     | RL.FIXED __key__ 100 86400000"
  "slide-1   | RL.SLIDE __key__ 100 86400000"
  "subwin-60 | RL.SUBWIN __key__ 100 3600000 60000"
  "cl        | CL.THROTTLE __key__ 99 100 86400"
)

# fill_kind name command keys seconds [format]: FLUSHALL, then `keys` keys made by `command`
# (one call each through redis-cli --pipe, __key__ the number written with `format`, default
# m:%012d), checked to be all there.
fill_kind() {
  local name=$1 cmd=$2 n=$3 out keys fmt=${5:-m:%012d}
  [[ $cmd == *__key__* ]] || die "kind $name: no __key__ in '$cmd'"
  rcli FLUSHALL SYNC >/dev/null
  out=$(awk -v pre="${cmd%%__key__*}" -v post="${cmd#*__key__}" -v n="$n" -v fmt="$fmt" \
    'BEGIN { for (k = 0; k < n; k++) printf "%s" fmt "%s\n", pre, k, post }' |
    timeout "$4" redis-cli -h 127.0.0.1 -p "$PORT" --pipe 2>&1) || die "kind $name: filling failed: $out"
  grep -q "errors: 0," <<<"$out" || die "kind $name: errors while filling: $(tail -n 3 <<<"$out")"
  keys=$(rcli DBSIZE)
  ((keys == ${6:-n})) || die "kind $name: $keys keys after filling, ${6:-$n} expected (did some expire?)"
}
