#!/usr/bin/env bash
# Throughput and server-side cost of the RL.* commands against INCR, SET PX, the equivalent
# Lua scripts and (with CELL_SO) redis-cell's CL.THROTTLE, plus memory per recorded request.
# Run by `make bench` from the repo root. For the cost per call without the noise of a shared
# machine, see bench/instr.sh (`make bench-instr`); for memory per key, bench/memory.sh.
#
# Starts one redis-server (loopback, free port, no persistence, temp dir) with the module,
# runs every case below with redis-benchmark against it, and prints one table:
#   requests/s, as % of the baseline (the first case, INCR) and as a multiple of SET PX on
#   100,000 random keys (set-px-100k),
#   usec_per_call from INFO commandstats (reset before each case), as a multiple of INCR's,
#   and for cases that name comparison cases, their throughput as a multiple of each.
#
# Environment:
#   MODULE         the module to load   (default: <repo>/target/release/libredis_ratelimit.so)
#   CELL_SO        redis-cell's libredis_cell.so: adds the CL.THROTTLE cases (build
#                  redis-cell yourself: cargo build --release in its checkout)
#   BENCH_N        requests per case at 100%          (default: 1000000)
#   BENCH_ROUNDS   run the whole list this many times, keep each case's best (default: 1)
#   BENCH_CLIENTS  redis-benchmark -c                 (default: 50)
#   BENCH_PIPELINE redis-benchmark -P                 (default: 16)
#   BENCH_TIMEOUT  seconds allowed for one redis-benchmark run (default: 180)
#   BENCH_ONLY     a regular expression: run only the cases whose name matches (the first
#                  case, the baseline, always runs; comparisons with cases that do not run
#                  are dropped)
# shellcheck source-path=SCRIPTDIR disable=SC2119 # (lib.sh: functions with optional arguments)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
TAG=bench

# ---------------------------------------------------------------------------------------
# The cases. One line each, fields separated by '|':
#   name    unique label, used in the table and by the 'vs' field of other cases
#   stat    command whose usec_per_call is read from INFO commandstats (case-insensitive;
#           Redis prints module commands as registered, e.g. cmdstat_RL.SLIDE)
#   vs      names of the cases this one's throughput is compared with (empty: none)
#   n%      share of BENCH_N this case runs (slow cases run fewer requests, same seconds;
#           but cases on __rand_int__ keys that are compared run the same count, so that
#           the same share of their calls create a key)
#   opts    extra redis-benchmark options (e.g. -r 100000 for __rand_int__ keys)
#   command the command; a word @name@ is replaced by the SHA1 of bench/name.lua,
#           loaded with SCRIPT LOAD
# The first case is the baseline. Later limiters add a line for each shape (and a Lua
# script in bench/ for comparison), e.g.
#   "token-refuse | rl.token | lua-token-refuse | 100 | | RL.TOKEN tok 100 60000"
# Cases whose command starts with CL. run when the server has CL.THROTTLE: redis-cell's with
# CELL_SO (loaded first), else this module's; they are skipped with a module without it.
# On 100,000 random keys, RL.TOKEN and RL.LEAKY use 100 per hour: their key expires when the
# bucket is full again (36 s after a call), so the keys stay live through the run, as SET
# PX's do (with 100 per minute they would expire 600 ms after each call, and most calls
# would create a key).
# ---------------------------------------------------------------------------------------
CASES=(
  # name              | stat     | vs                | n%  | opts      | command
  "incr               | incr     |                   | 100 |           | INCR counter"
  # Reference only: INCR creating keys too, for the random-key cases below.
  "incr-100k-keys     | incr     |                   | 100 | -r 100000 | INCR c:__rand_int__"
  # The reference of the random-key targets: a string with an expiry, on 100,000 keys.
  "set-px             | set      |                   | 100 |           | SET key v PX 60000"
  "set-px-100k        | set      |                   | 100 | -r 100000 | SET s:__rand_int__ v PX 60000"
  # Reference only: the module's dispatch floor, a command that finds no key.
  "peek-missing       | rl.peek  |                   | 100 |           | RL.PEEK missing"
  "slide-hot-refuse   | rl.slide | lua-hot-refuse    | 100 |           | RL.SLIDE hot 100 60000"
  "slide-hot-allow    | rl.slide | lua-hot-allow     | 100 |           | RL.SLIDE hotall 4000000000 1000"
  "slide-100k-keys    | rl.slide | lua-100k-keys     | 100 | -r 100000 | RL.SLIDE k:__rand_int__ 100 60000"
  "token-hot-refuse   | rl.token | lua-gcra-refuse cl-hot-refuse | 100 | | RL.TOKEN tok 100 60000"
  "token-hot-allow    | rl.token | lua-gcra-allow cl-hot-allow   | 100 | | RL.TOKEN tokall 2000000000 1000"
  "token-100k-keys    | rl.token | lua-gcra-100k cl-100k-keys    | 100 | -r 100000 | RL.TOKEN t:__rand_int__ 100 3600000"
  "leaky-hot-refuse   | rl.leaky | lua-leaky-refuse  | 100 |           | RL.LEAKY leak 100 60000"
  "leaky-hot-book     | rl.leaky | lua-leaky-book    | 100 |           | RL.LEAKY leakall 2000000000 1000"
  "leaky-100k-keys    | rl.leaky | lua-leaky-100k    | 100 | -r 100000 | RL.LEAKY l:__rand_int__ 100 3600000"
  "fixed-hot-refuse   | rl.fixed | lua-fixed-refuse  | 100 |           | RL.FIXED fix 100 60000"
  "fixed-hot-allow    | rl.fixed | lua-fixed-allow   | 100 |           | RL.FIXED fixall 4000000000 60000"
  "fixed-100k-keys    | rl.fixed | lua-fixed-100k    | 100 | -r 100000 | RL.FIXED f:__rand_int__ 100 60000"
  "subwin-hot-refuse  | rl.subwin | lua-subwin-refuse | 100 |          | RL.SUBWIN sw 100 60000 1000"
  "subwin-hot-allow   | rl.subwin | lua-subwin-allow  | 100 |          | RL.SUBWIN swall 2000000000 60000 1000"
  "subwin-100k-keys   | rl.subwin | lua-subwin-100k   | 100 | -r 100000 | RL.SUBWIN s:__rand_int__ 100 60000 1000"
  # RL.ALL over two buckets (requests and LLM tokens of one user), against the same two
  # decided by a Lua script; against the two single calls, see the line after the table.
  "all-hot-allow      | rl.all   | lua-all-allow     | 100 |           | RL.ALL 2 {u}:r {u}:t TOKEN 2000000000 1000 TOKEN 2000000000 1000 COST 4"
  "all-hot-refuse     | rl.all   | lua-all-refuse    | 100 |           | RL.ALL 2 {u}:rr {u}:tt TOKEN 100 60000 TOKEN 2000000000 1000 COST 4"
  "lua-all-allow      | evalsha  |                   | 25  |           | EVALSHA @all_gcra@ 2 lua:{u}:r lua:{u}:t 2000000000 1000 2000000000 1000 4"
  "lua-all-refuse     | evalsha  |                   | 25  |           | EVALSHA @all_gcra@ 2 lua:{u}:rr lua:{u}:tt 100 60000 2000000000 1000 4"
  "lua-hot-refuse     | evalsha  |                   | 25  |           | EVALSHA @sliding_log@ 1 lua:hot 100 60000"
  "lua-hot-allow      | evalsha  |                   | 25  |           | EVALSHA @sliding_log@ 1 lua:hotall 4000000000 1000"
  "lua-100k-keys      | evalsha  |                   | 100 | -r 100000 | EVALSHA @sliding_log@ 1 lua:k:__rand_int__ 100 60000"
  "lua-gcra-refuse    | evalsha  |                   | 25  |           | EVALSHA @gcra@ 1 lua:tok 100 60000 100 0"
  "lua-gcra-allow     | evalsha  |                   | 25  |           | EVALSHA @gcra@ 1 lua:tokall 2000000000 1000 2000000000 0"
  "lua-gcra-100k      | evalsha  |                   | 100 | -r 100000 | EVALSHA @gcra@ 1 lua:t:__rand_int__ 100 3600000 100 0"
  "lua-leaky-refuse   | evalsha  |                   | 25  |           | EVALSHA @gcra@ 1 lua:leak 100 60000 1 60000"
  "lua-leaky-book     | evalsha  |                   | 25  |           | EVALSHA @gcra@ 1 lua:leakall 2000000000 1000 1 1000"
  "lua-leaky-100k     | evalsha  |                   | 100 | -r 100000 | EVALSHA @gcra@ 1 lua:l:__rand_int__ 100 3600000 1 3600000"
  "lua-fixed-refuse   | evalsha  |                   | 25  |           | EVALSHA @fixed_window@ 1 lua:fix 100 60000"
  "lua-fixed-allow    | evalsha  |                   | 25  |           | EVALSHA @fixed_window@ 1 lua:fixall 4000000000 60000"
  "lua-fixed-100k     | evalsha  |                   | 100 | -r 100000 | EVALSHA @fixed_window@ 1 lua:f:__rand_int__ 100 60000"
  "lua-subwin-refuse  | evalsha  |                   | 25  |           | EVALSHA @sub_intervals@ 1 lua:sw 100 60000 1000"
  "lua-subwin-allow   | evalsha  |                   | 25  |           | EVALSHA @sub_intervals@ 1 lua:swall 2000000000 60000 1000"
  "lua-subwin-100k    | evalsha  |                   | 100 | -r 100000 | EVALSHA @sub_intervals@ 1 lua:s:__rand_int__ 100 60000 1000"
  # RL.ACQUIRE + RL.RELEASE against the sorted-set semaphore (bench/semaphore.lua) and a
  # plain ZREM to release, with client-made ids (-r: a new id on each call). Allowed: a
  # 1 ms lease under a limit never reached, so the key holds the leases of the last
  # millisecond or so, as a busy semaphore does; refused: 100 leases held for an hour.
  # Release: 100,000 leases held in one key (FILL below), each call releases a random one;
  # 20,000 calls, so about 90% find their lease (an id drawn twice finds nothing the second
  # time), the same share for both. The pair's throughput is the line after the table.
  "acquire-hot-allow  | rl.acquire | lua-acquire-allow | 100 | -r 1000000000 | RL.ACQUIRE semall 1000000000 1 ID __rand_int__"
  "acquire-hot-refuse | rl.acquire | lua-acquire-refuse | 100 | -r 1000000000 | RL.ACQUIRE semfull 100 3600000 ID __rand_int__"
  "release-100k       | rl.release | zrem-100k         | 2   | -r 100000 | RL.RELEASE rel __rand_int__"
  "lua-acquire-allow  | evalsha  |                   | 25  | -r 1000000000 | EVALSHA @semaphore@ 1 lua:semall 1000000000 1 __rand_int__"
  "lua-acquire-refuse | evalsha  |                   | 25  | -r 1000000000 | EVALSHA @semaphore@ 1 lua:semfull 100 3600000 __rand_int__"
  "zrem-100k          | zrem     |                   | 2   | -r 100000 | ZREM lua:rel __rand_int__"
  # redis-cell, the peer of RL.TOKEN: CL.THROTTLE key max_burst count period_s (a bucket of
  # max_burst + 1). Hot allowed: one per second into a bucket of two billion, so that every
  # call moves the stored time (with a faster rate there is nothing to store).
  "cl-hot-refuse      | cl.throttle |                | 100 |           | CL.THROTTLE cl:tok 99 100 60"
  "cl-hot-allow       | cl.throttle |                | 100 |           | CL.THROTTLE cl:tokall 1999999999 1 1"
  "cl-100k-keys       | cl.throttle |                | 100 | -r 100000 | CL.THROTTLE cl:t:__rand_int__ 99 100 3600"
  # RL.HIT under a keyed policy and a compact one of the same bucket (POLICIES below), hot,
  # refused, on 100,000 subjects, and on new subjects each call (-r 1000000000).
  "hit-hot-allow      | rl.hit   |                   | 100 |           | RL.HIT ptok u"
  "hit-hot-refuse     | rl.hit   |                   | 100 |           | RL.HIT ptokr u"
  "hit-100k           | rl.hit   |                   | 100 | -r 100000 | RL.HIT plive k:__rand_int__"
  "hit-new            | rl.hit   |                   | 100 | -r 1000000000 | RL.HIT plive n:__rand_int__"
  "chit-hot-allow     | rl.hit   | hit-hot-allow     | 100 |           | RL.HIT ctok u"
  "chit-hot-refuse    | rl.hit   | hit-hot-refuse    | 100 |           | RL.HIT ctokr u"
  "chit-100k          | rl.hit   | hit-100k          | 100 | -r 100000 | RL.HIT clive k:__rand_int__"
  "chit-new           | rl.hit   | hit-new           | 100 | -r 1000000000 | RL.HIT clive n:__rand_int__"
  # The same of a SLIDE of 100 requests a day (a compact policy holds its logs in its
  # subjects' entries): refused (a log of 100), on 100,000 subjects, new subjects.
  "hits-hot-refuse    | rl.hit   |                   | 100 |           | RL.HIT pslr u"
  "hits-100k          | rl.hit   |                   | 100 | -r 100000 | RL.HIT psll k:__rand_int__"
  "hits-new           | rl.hit   |                   | 100 | -r 1000000000 | RL.HIT psll n:__rand_int__"
  "chits-hot-refuse   | rl.hit   | hits-hot-refuse   | 100 |           | RL.HIT cslr u"
  "chits-100k         | rl.hit   | hits-100k         | 100 | -r 100000 | RL.HIT csll k:__rand_int__"
  "chits-new          | rl.hit   | hits-new          | 100 | -r 1000000000 | RL.HIT csll n:__rand_int__"
)

# The policies of the RL.HIT cases, set when the module has RL.HIT (a compact one when it
# takes COMPACT): keyed and compact, the same bucket.
POLICIES=(
  "ptok t TOKEN 2000000000 1000"
  "ptokr t TOKEN 100 86400000"
  "plive t TOKEN 100 86400000"
  "ctok COMPACT t TOKEN 2000000000 1000"
  "ctokr COMPACT t TOKEN 100 86400000"
  "clive COMPACT t TOKEN 100 86400000"
  "pslr s SLIDE 100 86400000"
  "psll s SLIDE 100 86400000"
  "cslr COMPACT s SLIDE 100 86400000"
  "csll COMPACT s SLIDE 100 86400000"
)

# Keys a case needs before it runs: the command, run once for each of the 100,000 numbers
# __rand_int__ stands for with -r 100000 (000000000000 .. 000000099999).
declare -A FILL=(
  [release-100k]="RL.ACQUIRE rel 1000000000 3600000 ID __rand_int__"
  [zrem-100k]="EVALSHA @semaphore@ 1 lua:rel 1000000000 3600000 __rand_int__"
)
FILL_N=100000

# Targets from issue 10, on throughput:
MIN_X_SET=0.85     # every RL.* case on 100,000 random keys, x set-px-100k
MIN_X_LUA=5        # every RL.* case, x its Lua twin (a 'vs' case named lua-*)
MIN_X_CELL=2       # every RL.* case with a CL.THROTTLE peer (a 'vs' case named cl-*)
MIN_X_REFUSE=0.9   # every RL.* case refusing on a hot key (*-hot-refuse), x incr
SET_CASE=set-px-100k
MAX_BYTES_PER_REQ=10   # memory per recorded request (memory section)
SUBWIN_SHAPE="1000000 3600000 60000" # a million per hour in 60 sub-intervals
SUBWIN_N=60

# The settings given in the environment, to print how the figures were produced.
env_used MODULE CELL_SO BENCH_N BENCH_ROUNDS BENCH_CLIENTS BENCH_PIPELINE BENCH_TIMEOUT BENCH_ONLY
ONLY=${BENCH_ONLY:-}
N=${BENCH_N:-1000000}
ROUNDS=${BENCH_ROUNDS:-1}
CLIENTS=${BENCH_CLIENTS:-50}
PIPELINE=${BENCH_PIPELINE:-16}
CASE_TIMEOUT=${BENCH_TIMEOUT:-180}

need_tools "make deps installs redis-server and redis-tools" redis-server redis-cli redis-benchmark timeout awk
find_modules
# The memory cases drive time ahead of the clock through NOW: no bound on how far.
module_args --ratelimit.now-max-ahead-ms -1
need_positive N ROUNDS CLIENTS PIPELINE CASE_TIMEOUT

# ---------------------------------------------------------------------------------------
# Server: one redis-server on a free loopback port; the trap stops it and removes the temp
# dir whatever happens. With two or more CPUs, the server and redis-benchmark are pinned to
# different ones (taskset), so they do not take turns on the same core.
# ---------------------------------------------------------------------------------------
setup_tmp rl-bench
pin_cpus

launch_server() { # port
  "${PIN_SERVER[@]}" redis-server --port "$1" --bind 127.0.0.1 --dir "$TMP" \
    "${MODULE_ARGS[@]}" --save "" --appendonly no \
    --logfile "$TMP/redis.log" >/dev/null 2>&1 &
  SERVER_PID=$!
}

start_server 10 redis-server launch_server "$TMP/redis.log"
log "redis-server $SERVER_VERSION on 127.0.0.1:$PORT (pid $SERVER_PID) with $MODULE"
# Policies (a build without RL.HIT or COMPACT skips the cases that need them).
declare -A NO_POLICY=()
for p in "${POLICIES[@]}"; do
  # shellcheck disable=SC2086 # (the policy's words)
  [[ $(rcli RL.POLICY SET $p 2>&1) == OK ]] || NO_POLICY[${p%% *}]=1
done

# ---------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------
# Parsed case fields of the cases that run (CL.* only with CELL_SO), in order.
NAMES=() STATS=() VS=() SHARE=() OPTS=() CMDS=()
declare -A INDEX=() KNOWN=()
for i in "${!CASES[@]}"; do
  IFS='|' read -r name stat vs share opts cmd <<<"${CASES[$i]}"
  name=$(trim "$name") stat=$(trim "$stat") vs=$(trim "$vs")
  share=$(trim "$share") opts=$(trim "$opts") cmd=$(trim "$cmd")
  [[ -n $name && -n $stat && -n $cmd ]] || die "bad case line: ${CASES[$i]}"
  [[ $share =~ ^[1-9][0-9]*$ ]] || die "bad n% in case $name: '$share'"
  [[ -z ${KNOWN[$name]:-} ]] || die "duplicate case name $name"
  KNOWN[$name]=1
  [[ -n $CL_BY || ! $cmd =~ ^CL\. ]] || continue
  [[ ! $cmd =~ ^RL\.HIT\ ([^ ]+) || -z ${NO_POLICY[${BASH_REMATCH[1]}]:-} ]] || continue
  [[ -z $ONLY || $i == 0 || $name =~ $ONLY ]] || continue
  INDEX[$name]=${#NAMES[@]}
  NAMES+=("$name") STATS+=("$stat") VS+=("$vs") SHARE+=("$share") OPTS+=("$opts") CMDS+=("$cmd")
done
# Comparisons with cases that do not run (CL.* without CELL_SO) are dropped.
for i in "${!NAMES[@]}"; do
  kept=
  for v in ${VS[i]}; do
    [[ -n ${KNOWN[$v]:-} ]] || die "case ${NAMES[i]} compares with unknown case $v"
    [[ -z ${INDEX[$v]:-} ]] || kept+="${kept:+ }$v"
  done
  VS[i]=$kept
done

BEST_RPS=() BEST_USEC=() ERRORS=()
for i in "${!NAMES[@]}"; do BEST_RPS[i]=0 BEST_USEC[i]=0 ERRORS[i]=0; done

run_case() { # index
  local i=$1 n opts=() out rc=0 rps calls usec errs
  n=$((N * SHARE[i] / 100))
  ((n > 0)) || n=1
  command_words "${CMDS[i]}"
  read -r -a opts <<<"${OPTS[i]}"
  # Every case starts from an empty dataset, so earlier cases' keys (and their expiry)
  # do not weigh on it.
  rcli FLUSHALL SYNC >/dev/null
  if [[ -n ${FILL[${NAMES[i]}]:-} ]]; then
    local fill
    command_words "${FILL[${NAMES[i]}]}"
    fill="${WORDS[*]}"
    awk -v pre="${fill%%__rand_int__*}" -v post="${fill#*__rand_int__}" -v n="$FILL_N" \
      'BEGIN { for (k = 0; k < n; k++) printf "%s%012d%s\n", pre, k, post }' |
      timeout 300 redis-cli -h 127.0.0.1 -p "$PORT" --pipe >/dev/null 2>&1 ||
      die "case ${NAMES[i]}: filling its keys failed"
    command_words "${CMDS[i]}"
  fi
  rcli CONFIG RESETSTAT >/dev/null
  out=$(timeout "$CASE_TIMEOUT" "${PIN_CLIENT[@]}" redis-benchmark -h 127.0.0.1 -p "$PORT" \
    -P "$PIPELINE" -c "$CLIENTS" -n "$n" --csv "${opts[@]}" "${WORDS[@]}" 2>&1) || rc=$?
  ((rc != 124)) || die "case ${NAMES[i]}: redis-benchmark did not finish in ${CASE_TIMEOUT}s (BENCH_TIMEOUT)"
  ((rc == 0)) || die "case ${NAMES[i]}: redis-benchmark failed (exit $rc): $out"
  # --csv: a header line "test","rps",... then one line per test; rps is the 2nd field.
  rps=$(printf '%s\n' "$out" | tr -d '\r' |
    awk -F'","' '/^"/ && $1 != "\"test" { gsub(/"/, "", $2); if ($2 ~ /^[0-9.]+$/) r = $2 } END { print r }')
  [[ -n $rps ]] || die "case ${NAMES[i]}: no requests/s in redis-benchmark output: $out"
  read -r calls usec errs <<<"$(read_stat "${STATS[i]}")"
  if ((errs > 0)) || ((calls < n)); then
    log "WARNING: case ${NAMES[i]}: cmdstat_${STATS[i]} has calls=$calls (sent $n), errors=$errs"
    ERRORS[i]=1
    log "  one call gives: $(rcli "${WORDS[@]//__rand_int__/1}" 2>&1 | tr '\n' ' ')"
  fi
  log "$(printf '%-18s %9d requests %12.1f requests/s %7.3f usec/call' "${NAMES[i]}" "$n" "$rps" "$usec")"
  if awk -v a="$rps" -v b="${BEST_RPS[i]}" 'BEGIN { exit !(a > b) }'; then BEST_RPS[i]=$rps; fi
  if [[ ${BEST_USEC[i]} == 0 ]] || awk -v a="$usec" -v b="${BEST_USEC[i]}" 'BEGIN { exit !(a < b) }'; then
    BEST_USEC[i]=$usec
  fi
}

for round in $(seq "$ROUNDS"); do
  ((ROUNDS == 1)) || log "round $round of $ROUNDS"
  for i in "${!NAMES[@]}"; do run_case "$i"; done
done

# ---------------------------------------------------------------------------------------
# Memory: 1,000 requests in distinct milliseconds in one RL.SLIDE key, and the same 1,000
# in a sorted-set log written the way bench/sliding_log.lua writes it.
# ---------------------------------------------------------------------------------------
MEM_REQS=1000
base=$(date +%s%3N)
allowed=$(for ((j = 0; j < MEM_REQS; j++)); do
  echo "RL.SLIDE mem 100000 3600000 NOW $((base + j))"
done | timeout 60 redis-cli -h 127.0.0.1 -p "$PORT" | awk 'NR % 5 == 1 && $0 == "1" { c++ } END { print c + 0 }')
((allowed == MEM_REQS)) || die "memory: $allowed of $MEM_REQS RL.SLIDE requests were allowed"
zadded=$(for ((j = 0; j < MEM_REQS; j++)); do
  ms=$((base + j))
  # Same member shape as the script: TIME seconds .. microseconds .. ':' .. random(1e9)
  echo "ZADD zmem $ms $((ms / 1000))$((ms % 1000 * 1000 + RANDOM % 1000)):$(((RANDOM * 32768 + RANDOM) % 1000000000 + 1))"
done | timeout 60 redis-cli -h 127.0.0.1 -p "$PORT" | awk '$0 == "1" { c++ } END { print c + 0 }')
((zadded == MEM_REQS)) || die "memory: $zadded of $MEM_REQS ZADDs added a member"
rcli PEXPIRE zmem 3600000 >/dev/null
MEM_RL=$(rcli MEMORY USAGE mem SAMPLES 0)
rcli RL.SLIDE mem:one 100 60000 >/dev/null
MEM_ONE=$(rcli MEMORY USAGE mem:one SAMPLES 0)
# One bucket of each kind, and the Lua GCRA's string key, under keys of the same length.
rcli RL.TOKEN mem:tok 100 60000 >/dev/null
rcli RL.LEAKY mem:lea 100 60000 >/dev/null
rcli RL.FIXED mem:fix 100 60000 >/dev/null
rcli EVALSHA "$(script_sha gcra)" 1 mem:lua 100 60000 100 0 >/dev/null
# A sub-interval window that has seen traffic in every sub-interval, and the Lua hash
# holding the same counts (one field per sub-interval).
sub_base=$(( ($(date +%s%3N) / 60000 + 1) * 60000 ))
for ((j = 0; j < SUBWIN_N; j++)); do
  echo "RL.SUBWIN mem:sub $SUBWIN_SHAPE COST 1000 NOW $((sub_base + j * 60000))"
  echo "HSET mem:luas $((sub_base / 60000 + j)) 1000"
done | timeout 60 redis-cli -h 127.0.0.1 -p "$PORT" >/dev/null
rcli PEXPIRE mem:luas 3600000 >/dev/null
MEM_SUBWIN=$(rcli MEMORY USAGE mem:sub SAMPLES 0)
MEM_LUA_SUB=$(rcli MEMORY USAGE mem:luas SAMPLES 0)
MEM_TOKEN=$(rcli MEMORY USAGE mem:tok SAMPLES 0)
MEM_LEAKY=$(rcli MEMORY USAGE mem:lea SAMPLES 0)
MEM_FIXED=$(rcli MEMORY USAGE mem:fix SAMPLES 0)
MEM_LUA_GCRA=$(rcli MEMORY USAGE mem:lua SAMPLES 0)
MEM_Z=$(rcli MEMORY USAGE zmem SAMPLES 0)
ZENC=$(rcli OBJECT ENCODING zmem)

# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------
display_cmd() { # index -> command as shown, scripts by file name
  local c=${CMDS[$1]}
  c=$(script_names "$c")
  [[ -z ${OPTS[$1]} ]] || c="[${OPTS[$1]}] $c"
  printf '%s' "$c"
}

BASE_RPS=${BEST_RPS[0]} BASE_USEC=${BEST_USEC[0]} BASE=${NAMES[0]}
SET_RPS=0
[[ -z ${INDEX[$SET_CASE]:-} ]] || SET_RPS=${BEST_RPS[${INDEX[$SET_CASE]}]}
MISSES=()
# below name value min what: records a miss when value < min.
below() {
  if awk -v v="$2" -v m="$3" 'BEGIN { exit !(v < m) }'; then MISSES+=("$1: $2x $4, target >= $3x"); fi
}
echo
printf 'redis-benchmark -P %s -c %s, %s requests at 100%%%s; usec/call from INFO commandstats\n' \
  "$PIPELINE" "$CLIENTS" "$N" "$( ((ROUNDS == 1)) || echo ", best of $ROUNDS rounds")"
echo
printf '%-17s %-72s %10s %8s %8s %9s %8s  %s\n' case command requests/s "% $BASE" "x $SET_CASE" usec/call "x $BASE" "throughput vs"
for i in "${!NAMES[@]}"; do
  vs=
  for v in ${VS[i]}; do
    j=${INDEX[$v]}
    x=$(awk -v a="${BEST_RPS[i]}" -v b="${BEST_RPS[j]}" 'BEGIN { printf "%.1f", (b > 0 ? a / b : 0) }')
    vs+="${vs:+, }${x}x $v"
    case $v in
      lua-*) below "${NAMES[i]}" "$x" "$MIN_X_LUA" "$v" ;;
      cl-*) below "${NAMES[i]}" "$x" "$MIN_X_CELL" "$v" ;;
    esac
  done
  xset=$(awk -v a="${BEST_RPS[i]}" -v b="$SET_RPS" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "-" }')
  if [[ ${STATS[i]} == rl.* ]]; then
    [[ ${NAMES[i]} != *-100k-keys || $xset == - ]] || below "${NAMES[i]}" "$xset" "$MIN_X_SET" "$SET_CASE"
    if [[ ${NAMES[i]} == *-hot-refuse ]]; then
      below "${NAMES[i]}" "$(awk -v a="${BEST_RPS[i]}" -v b="$BASE_RPS" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')" "$MIN_X_REFUSE" "$BASE"
    fi
  fi
  flag=
  ((ERRORS[i] == 0)) || flag=" (ERRORS, see above)"
  awk -v name="${NAMES[i]}" -v cmd="$(display_cmd "$i")" -v rps="${BEST_RPS[i]}" -v usec="${BEST_USEC[i]}" \
    -v brps="$BASE_RPS" -v busec="$BASE_USEC" -v xset="$xset" -v vs="${vs:--}$flag" 'BEGIN {
      printf "%-17s %-72s %10.0f %7.1f%% %8s%s %9.3f %7.2fx  %s\n", name, cmd, rps,
        (brps > 0 ? 100 * rps / brps : 0), xset, (xset == "-" ? " " : "x"), usec,
        (busec > 0 ? usec / busec : 0), vs
    }'
done
# RL.ALL over two keys against the two single-key calls it replaces (pipelined as every
# case is): two RL.TOKEN calls per decision.
if [[ -n ${INDEX[all-hot-allow]:-} && -n ${INDEX[token-hot-allow]:-} ]]; then
  awk -v a="${BEST_RPS[${INDEX[all-hot-allow]}]}" -v t="${BEST_RPS[${INDEX[token-hot-allow]}]}" 'BEGIN {
    printf "all-hot-allow: %.0f decisions/s over two keys; two RL.TOKEN calls (token-hot-allow): %.0f decisions/s; %.2fx\n",
      a, t / 2, (t > 0 ? a / (t / 2) : 0)
  }'
fi
# A lease's whole life, acquired then released: one pair takes an acquisition and a
# release, so pairs/s = 1 / (1 / acquisitions/s + 1 / releases/s), for each side.
if [[ -n ${INDEX[acquire-hot-allow]:-} && -n ${INDEX[release-100k]:-} &&
  -n ${INDEX[lua-acquire-allow]:-} && -n ${INDEX[zrem-100k]:-} ]]; then
  pair() { awk -v a="${BEST_RPS[${INDEX[$1]}]}" -v r="${BEST_RPS[${INDEX[$2]}]}" \
    'BEGIN { printf "%.0f", (a > 0 && r > 0 ? 1 / (1 / a + 1 / r) : 0) }'; }
  rl_pairs=$(pair acquire-hot-allow release-100k)
  lua_pairs=$(pair lua-acquire-allow zrem-100k)
  x=$(awk -v a="$rl_pairs" -v b="$lua_pairs" 'BEGIN { printf "%.1f", (b > 0 ? a / b : 0) }')
  printf 'acquire+release pairs: RL.ACQUIRE + RL.RELEASE %s pairs/s; semaphore.lua + ZREM %s pairs/s; %sx\n' \
    "$rl_pairs" "$lua_pairs" "$x"
  below "acquire+release pairs" "$x" "$MIN_X_LUA" "semaphore.lua + ZREM"
fi
echo
awk -v rl="$MEM_RL" -v z="$MEM_Z" -v n="$MEM_REQS" -v enc="$ZENC" -v one="$MEM_ONE" 'BEGIN {
  printf "memory, %d requests in distinct ms (MEMORY USAGE key SAMPLES 0):\n", n
  printf "  %-30s %8d bytes %8.2f bytes/request\n", "RL.SLIDE key", rl, rl / n
  printf "  %-30s %8d bytes %8.2f bytes/request  (%.1fx RL.SLIDE)\n", "sorted-set log (" enc ")", z, z / n, (rl > 0 ? z / rl : 0)
  printf "  %-30s %8d bytes (key, value and one record)\n", "RL.SLIDE key, 1 request", one
}'
printf '  %-30s %8d bytes\n' "RL.TOKEN key (mem:tok)" "$MEM_TOKEN" "RL.LEAKY key (mem:lea)" "$MEM_LEAKY" \
  "RL.FIXED key (mem:fix)" "$MEM_FIXED" \
  "Lua GCRA string key (mem:lua)" "$MEM_LUA_GCRA" \
  "RL.SUBWIN $SUBWIN_SHAPE" "$MEM_SUBWIN" \
  "Lua hash, $SUBWIN_N sub-intervals" "$MEM_LUA_SUB"
# Per-key memory is `make bench-memory`'s (used_memory over a million keys): MEMORY USAGE
# counts the value's object and size classes now, so the old MEMORY USAGE limits are gone.
if awk -v rl="$MEM_RL" -v n="$MEM_REQS" -v m="$MAX_BYTES_PER_REQ" 'BEGIN { exit !(rl / n > m) }'; then
  MISSES+=("memory: $(awk -v rl="$MEM_RL" -v n="$MEM_REQS" 'BEGIN { printf "%.2f", rl / n }') bytes/request, target <= $MAX_BYTES_PER_REQ")
fi
echo
targets="targets (RL.* on 100k keys >= ${MIN_X_SET}x $SET_CASE, >= ${MIN_X_LUA}x Lua, >= ${MIN_X_CELL}x CL.THROTTLE, hot refused >= ${MIN_X_REFUSE}x $BASE; <= ${MAX_BYTES_PER_REQ} bytes/request)"
print_targets "$targets"
echo
print_produced bench.sh bench
print_setup "" "; client and server on the same host${PIN_CLIENT:+, pinned to CPUs 1 and 0}"

any_error=0
for i in "${!NAMES[@]}"; do ((ERRORS[i] == 0)) || any_error=1; done
((any_error == 0)) || die "some cases had errors: their figures are not valid"
