#!/usr/bin/env bash
# Instructions per call: the server-side CPU cost of each command, counted by callgrind.
# Run by `make bench-instr` from the repo root.
#
# Throughput on a shared 2-core virtual machine moves by a third between runs; the number of
# instructions the server executes per call does not (it repeats within about 1%). This
# script starts redis-server with the module under `valgrind --tool=callgrind`, and for each
# case below:
#   1. FLUSHALL, then warms the keys the case needs, with callgrind's instrumentation off
#      (fast): the hot key called 200 times (a refusing key is then full), or 100,000 live
#      keys (k:000000000000 .. k:000000099999, the names redis-benchmark's -r 100000 uses);
#   2. switches instrumentation on, zeroes the counters, sends N requests with
#      redis-benchmark (-P 16 -c 50, as `make bench`), and dumps the counters;
#   3. reads the instructions (Ir) of that window from the dump, takes out the work that is
#      not per call (serverCron, the timer that runs 10 times a second whatever the traffic;
#      accepting and freeing redis-benchmark's 50 connections; its CONFIG GET), and divides
#      by N.
# Every case starts from an empty dataset (the new-key cases from the 100,000 live keys of
# the case before), so one case's keys do not weigh on another.
#
# Then the propagation cases: INCR and each RL.* hot allowed case again with `appendonly
# yes`, then with a replica attached (a plain redis-server with the module, not under
# valgrind), and the extra instructions each costs over the plain figure.
#
# Prints one table: instructions per call, as multiples of SET PX on 100,000 random live keys
# and of INCR, and of what each command's Lua twin (bench/*.lua) and CL.THROTTLE cost; then
# the propagation table, a repeatability check (two cases run a second time) and the
# targets of issue 10.
#
# Environment:
#   MODULE              the module to load (default: <repo>/target/release/libredis_ratelimit.so)
#   CELL_SO             redis-cell's libredis_cell.so: adds the CL.THROTTLE cases (build
#                       redis-cell yourself: cargo build --release in its checkout)
#   BENCH_INSTR_N       requests per case at 100% (default: 20000; the Lua cases run 25%)
#   BENCH_INSTR_CLIENTS redis-benchmark -c (default: 50)
#   BENCH_INSTR_PIPELINE redis-benchmark -P (default: 16)
#   BENCH_INSTR_REPEAT  cases run a second time to check the counts repeat
#                       (default: "set-px-live token-hot-allow")
#   BENCH_INSTR_ONLY    a regular expression: run only the cases whose name matches (the
#                       propagation cases and the repeat check are skipped when their cases
#                       do not run). The ratio columns need incr and set-px-live.
#   BENCH_TIMEOUT       seconds allowed for one redis-benchmark run (default: 300)
#   BENCH_INSTR_EXCLUDE a regular expression of functions whose instructions (inclusive) are
#                       left out too, e.g. dictFetchValue: the server's lookups of a command
#                       by name (the call's, and RL.APPLY's in RM_Replicate), whose cost
#                       depends on the hash seed and on how many commands the server has
#                       (see bench/ab.sh)
# shellcheck source-path=SCRIPTDIR disable=SC2119 # (lib.sh: functions with optional arguments)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
TAG=bench-instr LOG_CLOCK=1 RCLI_TIMEOUT=60
STOP_WAIT=10 # valgrind writes its last dump

# ---------------------------------------------------------------------------------------
# The cases. One line each, fields separated by '|':
#   name    unique label
#   shape   hot:    FLUSHALL, then the command 200 times (keys as written);
#           hot:<command>: the same, <command> first. INCR starts from a counter above
#                   10,000: below, each INCR replaces a shared integer object with a new
#                   one, and costs about 10% more;
#           live:   FLUSHALL, then the command once on each of the 100,000 keys that
#                   __rand_int__ stands for with -r 100000; the case runs with -r 100000;
#           new=<live case>: the keys of <live case> are in place (warmed again if that
#                   case did not just run), and the case runs with -r 1000000000 on another
#                   prefix: every call creates a key (about 0.2 collisions in 20,000);
#           spread:<ms>: as hot, each of the 200 calls with a NOW <ms> after the one before,
#                   the last a second before the window: a sliding log then holds 100
#                   records (1000), or one of 100 requests (0), whatever the warm-up's
#                   speed (a hot SLIDE's pipelined calls span a few milliseconds: a record
#                   each, how many depends on the machine's load);
#           none:   FLUSHALL only;
#           fill:<command>: FLUSHALL, then <command> once for each of the 100,000 numbers
#                   __rand_int__ stands for with -r 100000 (e.g. 100,000 leases in one key,
#                   ids 000000000000 .. 000000099999); the case runs with -r 100000.
#           A hot case whose command holds __rand_int__ (a lease id) is warmed with the
#           ids 000000000000 .. 000000000199 and runs with -r 1000000000 (new ids).
#   expect  first element of the reply of one more call after the window: 1 (allowed),
#           0 (refused), - (no check). CL.THROTTLE answers 0 when allowed.
#   target  which target of issue 10 the case is checked against: live (allowed, random
#           live keys: <= 1.2x set-px-live), new (allowed, new keys: <= 1.45x set-px-live),
#           refuse (<= 2x incr), - (none)
#   vs      cases this one is compared with: their cost as a multiple of this one's
#   n%      share of BENCH_INSTR_N this case runs
#   command the command; a word @name@ is replaced by the SHA1 of bench/name.lua
# Cases whose command starts with CL. run when the server has CL.THROTTLE: redis-cell's with
# CELL_SO (loaded first), else this module's; they are skipped with a module without it.
# Refused, random and new keys use limits per day: a token or leaky key expires when its
# bucket is full again (window / limit after one call), the keys must outlive the warm-up,
# and a refused key must not earn a token back during its window.
# ---------------------------------------------------------------------------------------
CASES=(
  # name             | shape                | exp | target | vs                        | n%  | command
  "incr              | hot:SET counter 1000000 | -   | -      |                           | 100 | INCR counter"
  # The same work with one more argument: what an argument costs the server by itself
  # (reading it, its string object, freeing it), before any command looks at it.
  "incrby            | hot:SET counter 1000000 | -   | -      |                           | 100 | INCRBY counter 1"
  "set-px-hot        | hot                  | -   | -      |                           | 100 | SET key v PX 60000"
  "set-px-live       | live                 | -   | -      |                           | 100 | SET k:__rand_int__ v PX 60000"
  "set-px-new        | new=set-px-live      | -   | -      |                           | 100 | SET n:__rand_int__ v PX 60000"
  # The module's dispatch floor: a command that finds no key.
  "peek-missing      | none                 | -   | -      |                           | 100 | RL.PEEK missing"

  "slide-hot-allow   | hot                  | 1   | -      | lua-slide-hot-allow       | 100 | RL.SLIDE hotall 4000000000 1000"
  "slide-hot-refuse  | hot                  | 0   | refuse | lua-slide-hot-refuse      | 100 | RL.SLIDE hot 100 86400000"
  "slide-live        | live                 | 1   | live   | lua-slide-live            | 100 | RL.SLIDE k:__rand_int__ 100 86400000"
  "slide-new         | new=slide-live       | 1   | new    | lua-slide-new             | 100 | RL.SLIDE n:__rand_int__ 100 86400000"
  "token-hot-allow   | hot                  | 1   | -      | lua-token-hot-allow cl-hot-allow   | 100 | RL.TOKEN tokall 2000000000 1000"
  "token-hot-refuse  | hot                  | 0   | refuse | lua-token-hot-refuse cl-hot-refuse | 100 | RL.TOKEN tok 100 86400000"
  "token-live        | live                 | 1   | live   | lua-token-live cl-live    | 100 | RL.TOKEN k:__rand_int__ 100 86400000"
  # Refused on random names (-r 1000000000), a cost above the bucket's size: RL.TOP's sketch meets a new name
  # on almost every call (its most work: the smallest of its counters found and replaced).
  "token-refuse-spread | hot                | 0   | refuse | token-hot-refuse          | 100 | RL.TOKEN r:__rand_int__ 1 86400000 COST 2"
  "token-new         | new=token-live       | 1   | new    | lua-token-new cl-new      | 100 | RL.TOKEN n:__rand_int__ 100 86400000"
  "leaky-hot-allow   | hot                  | 1   | -      | lua-leaky-hot-allow       | 100 | RL.LEAKY leakall 2000000000 1000"
  "leaky-hot-refuse  | hot                  | 0   | refuse | lua-leaky-hot-refuse      | 100 | RL.LEAKY leak 100 86400000"
  "leaky-live        | live                 | 1   | live   | lua-leaky-live            | 100 | RL.LEAKY k:__rand_int__ 100 86400000"
  "leaky-new         | new=leaky-live       | 1   | new    | lua-leaky-new             | 100 | RL.LEAKY n:__rand_int__ 100 86400000"
  "fixed-hot-allow   | hot                  | 1   | -      | lua-fixed-hot-allow       | 100 | RL.FIXED fixall 4000000000 60000"
  "fixed-hot-refuse  | hot                  | 0   | refuse | lua-fixed-hot-refuse      | 100 | RL.FIXED fix 100 86400000"
  "fixed-live        | live                 | 1   | live   | lua-fixed-live            | 100 | RL.FIXED k:__rand_int__ 100 86400000"
  "fixed-new         | new=fixed-live       | 1   | new    | lua-fixed-new             | 100 | RL.FIXED n:__rand_int__ 100 86400000"
  "subwin-hot-allow  | hot                  | 1   | -      | lua-subwin-hot-allow      | 100 | RL.SUBWIN swall 2000000000 60000 1000"
  "subwin-hot-refuse | hot                  | 0   | refuse | lua-subwin-hot-refuse     | 100 | RL.SUBWIN sw 100 86400000 1440000"
  "subwin-live       | live                 | 1   | live   | lua-subwin-live           | 100 | RL.SUBWIN k:__rand_int__ 100 86400000 1440000"
  "subwin-new        | new=subwin-live      | 1   | new    | lua-subwin-new            | 100 | RL.SUBWIN n:__rand_int__ 100 86400000 1440000"

  # RL.ALL over two buckets; `vs token-hot-allow`: one of the two single calls it replaces.
  "all-hot-allow     | hot                  | 1   | -      | lua-all-hot-allow token-hot-allow | 100 | RL.ALL 2 {u}:r {u}:t TOKEN 2000000000 1000 TOKEN 2000000000 1000 COST 4"
  "all-hot-refuse    | hot                  | 0   | -      | lua-all-hot-refuse token-hot-refuse | 100 | RL.ALL 2 {u}:rr {u}:tt TOKEN 100 86400000 TOKEN 2000000000 1000 COST 4"

  # RL.ACQUIRE + RL.RELEASE against the sorted-set semaphore (bench/semaphore.lua) and ZREM.
  # Allowed: a short lease (1 ms) under a limit never reached, so the key holds the leases of
  # the last millisecond or so, as a busy semaphore does; refused: 100 leases held for a day.
  # Release: 100,000 leases held in one key, each call releases a random one (-r 100000;
  # some ids come twice, and a second release finds nothing: the count is printed).
  "acquire-hot-allow  | hot                  | 1   | -      | lua-acquire-hot-allow     | 100 | RL.ACQUIRE semall 1000000000 1 ID __rand_int__"
  "acquire-hot-refuse | hot                  | 0   | refuse | lua-acquire-hot-refuse    | 100 | RL.ACQUIRE semfull 100 86400000 ID __rand_int__"
  "release-live       | fill:RL.ACQUIRE rel 1000000000 86400000 ID __rand_int__ | - | - | zrem-live | 50 | RL.RELEASE rel __rand_int__"

  # RL.HIT under policies of the same limiters as the plain cases (set once, see POLICIES);
  # `vs`: the plain command with its numbers, which a one-limiter policy must not exceed.
  "hit-token-hot-allow  | hot              | 1   | -      | token-hot-allow           | 100 | RL.HIT ptok u"
  "hit-token-hot-refuse | hot              | 0   | refuse | token-hot-refuse          | 100 | RL.HIT ptokr u"
  "hit-token-live       | live             | 1   | live   | token-live                | 100 | RL.HIT plive k:__rand_int__"
  "hit-slide-hot-allow  | hot              | 1   | -      | slide-hot-allow           | 100 | RL.HIT pslide u"
  "hit-all-hot-allow    | hot              | 1   | -      | all-hot-allow             | 100 | RL.HIT pall u COST 4"
  # Shadow limiters and a penalty box (issue 29): pall with its second limiter in shadow
  # (allowing, then refusing: its refusal told, its sketch updated, the call allowed); a
  # one-limiter policy with a penalty (each hit reads the ban key first), and a subject it
  # banned (each hit refused by the ban, the bucket asked without charge).
  "hit-shadow-hot-allow  | hot             | 1   | -      | hit-all-hot-allow         | 100 | RL.HIT pshadow u COST 4"
  "hit-shadow-hot-refuse | hot             | 1   | -      | hit-all-hot-allow         | 100 | RL.HIT pshadowr u"
  "hit-penalty-hot-allow | hot             | 1   | -      | hit-token-hot-allow       | 100 | RL.HIT ppen u"
  "hit-penalty-banned    | hot             | 0   | refuse | hit-token-hot-refuse      | 100 | RL.HIT pban u"
  # A keyed policy's new subject (its key made), and compact policies (issue 30): the same
  # limiters, the subjects in families; `vs` the keyed case, which each must not exceed.
  "hit-token-new         | new=hit-token-live | 1 | -    | token-new                 | 100 | RL.HIT plive n:__rand_int__"
  "chit-token-hot-allow  | hot             | 1   | -      | hit-token-hot-allow       | 100 | RL.HIT ctok u"
  "chit-token-hot-refuse | hot             | 0   | -      | hit-token-hot-refuse      | 100 | RL.HIT ctokr u"
  "chit-token-live       | live            | 1   | -      | hit-token-live            | 100 | RL.HIT clive k:__rand_int__"
  "chit-token-new        | new=chit-token-live | 1 | -    | hit-token-new             | 100 | RL.HIT clive n:__rand_int__"
  "chit-all-hot-allow    | hot             | 1   | -      | hit-all-hot-allow         | 100 | RL.HIT call u COST 4"
  # A SLIDE limiter of at most 100 requests, as a compact policy holds one: keyed and
  # compact, a log of 100 requests refused, logs of a few requests among 100,000 subjects,
  # a new subject's log of one.
  "hit-slide-hot-refuse  | spread:0        | 0   | -      | slide-hot-refuse          | 100 | RL.HIT pslr u"
  "hit-slide-live        | live            | 1   | -      | slide-live                | 100 | RL.HIT psll k:__rand_int__"
  "hit-slide-new         | new=hit-slide-live | 1 | -     | slide-new                 | 100 | RL.HIT psll n:__rand_int__"
  "chit-slide-hot-refuse | spread:0        | 0   | -      | hit-slide-hot-refuse      | 100 | RL.HIT cslr u"
  # Refused on a log of 100 records (one a second), as a full log is under real traffic.
  "hit-slide-full-refuse  | spread:1000     | 0   | -      | slide-hot-refuse          | 100 | RL.HIT pslr u"
  "chit-slide-full-refuse | spread:1000     | 0   | -      | hit-slide-full-refuse     | 100 | RL.HIT cslr u"
  # The same log beside a bucket (a policy of two limiters: limiters::decide over the
  # family's entry).
  "hit-mix-full-refuse    | spread:1000     | 0   | -      | hit-slide-full-refuse     | 100 | RL.HIT pmx u"
  "chit-mix-full-refuse   | spread:1000     | 0   | -      | hit-mix-full-refuse       | 100 | RL.HIT cmx u"
  "chit-slide-live       | live            | 1   | -      | hit-slide-live            | 100 | RL.HIT csll k:__rand_int__"
  "chit-slide-new        | new=chit-slide-live | 1 | -    | hit-slide-new             | 100 | RL.HIT csll n:__rand_int__"

  "lua-slide-hot-allow    | hot                   | 1 | - |  | 25 | EVALSHA @sliding_log@ 1 hotall 4000000000 1000"
  "lua-slide-hot-refuse   | hot                   | 0 | - |  | 25 | EVALSHA @sliding_log@ 1 hot 100 86400000"
  "lua-slide-live         | live                  | 1 | - |  | 25 | EVALSHA @sliding_log@ 1 k:__rand_int__ 100 86400000"
  "lua-slide-new          | new=lua-slide-live    | 1 | - |  | 25 | EVALSHA @sliding_log@ 1 n:__rand_int__ 100 86400000"
  "lua-token-hot-allow    | hot                   | 1 | - |  | 25 | EVALSHA @gcra@ 1 tokall 2000000000 1000 2000000000 0"
  "lua-token-hot-refuse   | hot                   | 0 | - |  | 25 | EVALSHA @gcra@ 1 tok 100 86400000 100 0"
  "lua-token-live         | live                  | 1 | - |  | 25 | EVALSHA @gcra@ 1 k:__rand_int__ 100 86400000 100 0"
  "lua-token-new          | new=lua-token-live    | 1 | - |  | 25 | EVALSHA @gcra@ 1 n:__rand_int__ 100 86400000 100 0"
  "lua-leaky-hot-allow    | hot                   | 1 | - |  | 25 | EVALSHA @gcra@ 1 leakall 2000000000 1000 1 1000"
  "lua-leaky-hot-refuse   | hot                   | 0 | - |  | 25 | EVALSHA @gcra@ 1 leak 100 86400000 1 86400000"
  "lua-leaky-live         | live                  | 1 | - |  | 25 | EVALSHA @gcra@ 1 k:__rand_int__ 100 86400000 1 86400000"
  "lua-leaky-new          | new=lua-leaky-live    | 1 | - |  | 25 | EVALSHA @gcra@ 1 n:__rand_int__ 100 86400000 1 86400000"
  "lua-fixed-hot-allow    | hot                   | 1 | - |  | 25 | EVALSHA @fixed_window@ 1 fixall 4000000000 60000"
  "lua-fixed-hot-refuse   | hot                   | 0 | - |  | 25 | EVALSHA @fixed_window@ 1 fix 100 86400000"
  "lua-fixed-live         | live                  | 1 | - |  | 25 | EVALSHA @fixed_window@ 1 k:__rand_int__ 100 86400000"
  "lua-fixed-new          | new=lua-fixed-live    | 1 | - |  | 25 | EVALSHA @fixed_window@ 1 n:__rand_int__ 100 86400000"
  "lua-subwin-hot-allow   | hot                   | 1 | - |  | 25 | EVALSHA @sub_intervals@ 1 swall 2000000000 60000 1000"
  "lua-subwin-hot-refuse  | hot                   | 0 | - |  | 25 | EVALSHA @sub_intervals@ 1 sw 100 86400000 1440000"
  "lua-subwin-live        | live                  | 1 | - |  | 25 | EVALSHA @sub_intervals@ 1 k:__rand_int__ 100 86400000 1440000"
  "lua-subwin-new         | new=lua-subwin-live   | 1 | - |  | 25 | EVALSHA @sub_intervals@ 1 n:__rand_int__ 100 86400000 1440000"

  "lua-all-hot-allow      | hot                   | 1 | - |  | 25 | EVALSHA @all_gcra@ 2 {u}:r {u}:t 2000000000 1000 2000000000 1000 4"
  "lua-all-hot-refuse     | hot                   | 0 | - |  | 25 | EVALSHA @all_gcra@ 2 {u}:rr {u}:tt 100 86400000 2000000000 1000 4"

  "lua-acquire-hot-allow  | hot                   | 1 | - |  | 25 | EVALSHA @semaphore@ 1 semall 1000000000 1 __rand_int__"
  "lua-acquire-hot-refuse | hot                   | 0 | - |  | 25 | EVALSHA @semaphore@ 1 semfull 100 86400000 __rand_int__"
  "zrem-live              | fill:EVALSHA @semaphore@ 1 rel 1000000000 86400000 __rand_int__ | - | - |  | 50 | ZREM rel __rand_int__"

  # redis-cell: CL.THROTTLE key max_burst count period_s; the bucket holds max_burst + 1.
  # Hot allowed: one per second with a bucket of two billion, so every call moves the
  # stored time (a faster rate leaves nothing to store).
  "cl-hot-allow      | hot                  | 0   | -      |                           | 100 | CL.THROTTLE clall 1999999999 1 1"
  "cl-hot-refuse     | hot                  | 1   | -      |                           | 100 | CL.THROTTLE cl 99 100 86400"
  "cl-live           | live                 | 0   | -      |                           | 100 | CL.THROTTLE k:__rand_int__ 99 100 86400"
  "cl-new            | new=cl-live          | 0   | -      |                           | 100 | CL.THROTTLE n:__rand_int__ 99 100 86400"
)

# Propagation: these cases run again with AOF on, then with a replica attached.
PROP_CASES=(incr slide-hot-allow token-hot-allow leaky-hot-allow fixed-hot-allow subwin-hot-allow)

# Targets from issue 10 (instructions per call).
MAX_X_LIVE=1.2    # allowed RL.* on random live keys, x set-px-live
MAX_X_NEW=1.45    # allowed RL.* on new keys, x set-px-live
MAX_X_REFUSE=2    # refused RL.*, x incr
MAX_X_PROP=1.5    # extra cost of propagating an RL.* call, x INCR's extra cost
MAX_REPEAT_PCT=1  # a case run twice must agree within this %

WARM_HOT=200     # calls on a hot key before its window
LIVE_KEYS=100000 # live keys warmed for the live and new cases
NEW_RANGE=1000000000

env_used MODULE CELL_SO BENCH_INSTR_N BENCH_INSTR_CLIENTS BENCH_INSTR_PIPELINE BENCH_INSTR_REPEAT BENCH_INSTR_ONLY BENCH_TIMEOUT BENCH_INSTR_EXCLUDE
N=${BENCH_INSTR_N:-20000}
CLIENTS=${BENCH_INSTR_CLIENTS:-50}
PIPELINE=${BENCH_INSTR_PIPELINE:-16}
REPEAT=${BENCH_INSTR_REPEAT-set-px-live token-hot-allow}
ONLY=${BENCH_INSTR_ONLY:-}
CASE_TIMEOUT=${BENCH_TIMEOUT:-300}

need_tools "make bench-instr installs valgrind; make deps the rest" \
  valgrind callgrind_control callgrind_annotate redis-server redis-cli redis-benchmark timeout awk
find_modules
module_args
need_positive N CLIENTS PIPELINE CASE_TIMEOUT

# ---------------------------------------------------------------------------------------
# Servers: redis-server under callgrind on a free loopback port (pinned to CPU 0, the
# clients to CPU 1, when there are two), and later a plain replica. The trap stops both
# and removes the temp dir whatever happens.
# ---------------------------------------------------------------------------------------
setup_tmp rl-instr
pin_cpus

launch_primary() { # port
  mkdir -p "$TMP/primary"
  # --instr-atstart=no: instrumentation only during the windows (warm-ups run fast).
  "${PIN_SERVER[@]}" valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$TMP/callgrind.out.%p" --log-file="$TMP/valgrind.log" \
    redis-server --port "$1" --bind 127.0.0.1 --dir "$TMP/primary" \
    "${MODULE_ARGS[@]}" --save "" --appendonly no --repl-diskless-sync-delay 0 \
    --logfile "$TMP/redis.log" >/dev/null 2>&1 &
  SERVER_PID=$!
}

launch_replica() { # port
  mkdir -p "$TMP/replica"
  "${PIN_CLIENT[@]}" redis-server --port "$1" --bind 127.0.0.1 --dir "$TMP/replica" \
    "${MODULE_ARGS[@]}" --save "" --appendonly no --replicaof 127.0.0.1 "$PORT" \
    --logfile "$TMP/replica.log" >/dev/null 2>&1 &
  REPLICA_PID=$!
}

DUMPS=0
# The work in a dump that is not per call (see dump_cost).
EXCLUDED='serverCron|acceptTcpHandler|freeClient|configGetCommand'${BENCH_INSTR_EXCLUDE:+|$BENCH_INSTR_EXCLUDE}

start_server 120 "redis-server under valgrind" launch_primary "$TMP/redis.log" "$TMP/valgrind.log"
log "redis-server $SERVER_VERSION under callgrind on 127.0.0.1:$PORT (pid $SERVER_PID)"

# The policies of the RL.HIT cases (which run when the module has RL.HIT), each the limiters
# of the plain case it is compared with.
POLICIES=(
  "ptok t TOKEN 2000000000 1000"
  "ptokr t TOKEN 100 86400000"
  "plive t TOKEN 100 86400000"
  "pslide s SLIDE 4000000000 1000"
  "pall r TOKEN 2000000000 1000 COST 1 t TOKEN 2000000000 1000"
  "pshadow r TOKEN 2000000000 1000 COST 1 t TOKEN 2000000000 1000 SHADOW"
  "pshadowr r TOKEN 2000000000 1000 COST 1 t TOKEN 100 86400000 SHADOW"
  "ppen PENALTY 5 60000 60000 t TOKEN 2000000000 1000"
  "pban PENALTY 1 86400000 86400000 t TOKEN 1 86400000"
  "ctok COMPACT t TOKEN 2000000000 1000"
  "ctokr COMPACT t TOKEN 100 86400000"
  "clive COMPACT t TOKEN 100 86400000"
  "call COMPACT r TOKEN 2000000000 1000 COST 1 t TOKEN 2000000000 1000"
  "pslr s SLIDE 100 86400000"
  "psll s SLIDE 100 86400000"
  "cslr COMPACT s SLIDE 100 86400000"
  "csll COMPACT s SLIDE 100 86400000"
  "pmx s SLIDE 100 86400000 t TOKEN 1000000 1000"
  "cmx COMPACT s SLIDE 100 86400000 t TOKEN 1000000 1000"
)
HIT=
# Policies a build before issue 29 or 30 cannot hold (SHADOW, PENALTY, COMPACT): their cases
# are skipped.
declare -A NO_POLICY=()
if rcli COMMAND INFO RL.HIT | grep -qi rl.hit; then
  HIT=1
  for p in "${POLICIES[@]}"; do
    # shellcheck disable=SC2086 # (the policy's words)
    reply=$(rcli RL.POLICY SET $p)
    [[ $reply == OK ]] && continue
    [[ $p =~ (SHADOW|PENALTY|COMPACT) ]] || die "RL.POLICY SET $p failed: $reply"
    NO_POLICY[${p%% *}]=1
    log "policy ${p%% *} skipped: this build answers $reply"
  done
fi

# ---------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------
NAMES=() SHAPES=() EXPECT=() TARGET=() VS=() SHARE=() CMDS=()
declare -A INDEX=()
for line in "${CASES[@]}"; do
  IFS='|' read -r name shape expect target vs share cmd <<<"$line"
  name=$(trim "$name") shape=$(trim "$shape") expect=$(trim "$expect") target=$(trim "$target")
  vs=$(trim "$vs") share=$(trim "$share") cmd=$(trim "$cmd")
  [[ -n $name && -n $shape && -n $cmd ]] || die "bad case line: $line"
  [[ $share =~ ^[1-9][0-9]*$ ]] || die "bad n% in case $name: '$share'"
  [[ -z ${INDEX[$name]:-} ]] || die "duplicate case name $name"
  [[ -n $CL_BY || ! $cmd =~ ^CL\. ]] || continue
  [[ -n $HIT || ! $cmd =~ ^RL\.HIT ]] || continue
  [[ ! $cmd =~ ^RL\.HIT\ ([^ ]+) || -z ${NO_POLICY[${BASH_REMATCH[1]}]:-} ]] || continue
  [[ -z $ONLY || $name =~ $ONLY ]] || continue
  INDEX[$name]=${#NAMES[@]}
  NAMES+=("$name") SHAPES+=("$shape") EXPECT+=("$expect") TARGET+=("$target")
  VS+=("$vs") SHARE+=("$share") CMDS+=("$cmd")
done
((${#NAMES[@]} > 0)) || die "no case matches BENCH_INSTR_ONLY='$ONLY'"
for i in "${!NAMES[@]}"; do
  if [[ ${SHAPES[i]} == new=* && -z ${INDEX[${SHAPES[i]#new=}]:-} ]]; then
    # The new-key case needs its live case's command to warm the keys.
    die "case ${NAMES[i]} needs case ${SHAPES[i]#new=} (BENCH_INSTR_ONLY)"
  fi
done

# pipe_in: sends stdin (one inline command per line) with redis-cli --pipe; dies on errors.
pipe_in() {
  local out
  out=$(timeout 900 redis-cli -h 127.0.0.1 -p "$PORT" --pipe --pipe-timeout 600 2>&1) || die "warm-up failed: $out"
  grep -q "errors: 0," <<<"$out" || die "warm-up had errors: $(tail -n 3 <<<"$out")"
}

# warm index: the keys the case needs, instrumentation off.
LAST_LIVE=
warm() {
  local i=$1 shape=${SHAPES[$1]} live setup
  case $shape in
    spread:*)
      # The hot key's calls <ms> apart by their NOW (the last <ms> before the window, all
      # at that time for 0): what a sliding log holds does not depend on how many
      # milliseconds the pipelined warm-up took.
      rcli FLUSHALL SYNC >/dev/null
      command_words "${CMDS[i]}"
      live="${WORDS[*]}"
      local now_ms step=${shape#spread:}
      # (Milliseconds past 2^31: %.0f, where mawk's %d stops.)
      now_ms=$(rcli TIME | awk 'NR == 1 { s = $1 } NR == 2 { printf "%.0f", s * 1000 + int($1 / 1000) }')
      awk -v cmd="$live" -v now="$now_ms" -v n="$WARM_HOT" -v step="$step" \
        'BEGIN { for (k = n; k > 0; k--) printf "%s NOW %.0f\n", cmd, now - 1000 - step * (k - 1) }' | pipe_in
      # The log holds what the case says: its key (or subject) refuses, 100 requests used.
      [[ $(rcli "${WORDS[@]}" | head -n 1) == 0 ]] || die "case ${NAMES[i]}: the warm-up left a call allowed"
      LAST_LIVE=
      ;;
    hot | hot:*)
      rcli FLUSHALL SYNC >/dev/null
      if [[ $shape == hot:* ]]; then
        read -r -a setup <<<"${shape#hot:}"
        rcli "${setup[@]}" >/dev/null
      fi
      command_words "${CMDS[i]}"
      live="${WORDS[*]}"
      if [[ $live == *__rand_int__* ]]; then
        awk -v pre="${live%%__rand_int__*}" -v post="${live#*__rand_int__}" -v n="$WARM_HOT" \
          'BEGIN { for (k = 0; k < n; k++) printf "%s%012d%s\n", pre, k, post }' | pipe_in
      else
        for _ in $(seq "$WARM_HOT"); do echo "$live"; done | pipe_in
      fi
      LAST_LIVE=
      ;;
    fill:*)
      rcli FLUSHALL SYNC >/dev/null
      command_words "${shape#fill:}"
      live="${WORDS[*]}"
      [[ $live == *__rand_int__* ]] || die "case ${NAMES[i]}: a fill command needs __rand_int__"
      awk -v pre="${live%%__rand_int__*}" -v post="${live#*__rand_int__}" -v n="$LIVE_KEYS" \
        'BEGIN { for (k = 0; k < n; k++) printf "%s%012d%s\n", pre, k, post }' | pipe_in
      LAST_LIVE=
      ;;
    live)
      rcli FLUSHALL SYNC >/dev/null
      command_words "${CMDS[i]}"
      live="${WORDS[*]}"
      [[ $live == *__rand_int__* ]] || die "case ${NAMES[i]}: a live case needs __rand_int__ in its key"
      awk -v pre="${live%%__rand_int__*}" -v post="${live#*__rand_int__}" -v n="$LIVE_KEYS" \
        'BEGIN { for (k = 0; k < n; k++) printf "%s%012d%s\n", pre, k, post }' | pipe_in
      LAST_LIVE=${NAMES[i]}
      ;;
    new=*)
      live=${shape#new=}
      [[ $LAST_LIVE == "$live" ]] || warm "${INDEX[$live]}"
      LAST_LIVE=
      ;;
    none)
      rcli FLUSHALL SYNC >/dev/null
      LAST_LIVE=
      ;;
    *) die "case ${NAMES[i]}: unknown shape $shape" ;;
  esac
}

# measure index -> sets IR (instructions per call, 1 decimal); dies when the case went wrong.
measure() {
  local i=$1 n opts=() out rc=0 dump total excl calls errs keys reply t0
  n=$((N * SHARE[i] / 100))
  ((n >= 1000)) || n=1000
  command_words "${CMDS[i]}"
  case ${SHAPES[i]} in
    live | fill:*) opts=(-r "$LIVE_KEYS") ;;
    new=*) opts=(-r "$NEW_RANGE") ;;
    hot*) [[ ${CMDS[i]} != *__rand_int__* ]] || opts=(-r "$NEW_RANGE") ;;
  esac
  rcli CONFIG RESETSTAT >/dev/null
  keys=$(rcli DBSIZE)
  t0=$(date +%s.%N)
  cg --instr=on
  cg --zero
  out=$(timeout "$CASE_TIMEOUT" "${PIN_CLIENT[@]}" redis-benchmark -h 127.0.0.1 -p "$PORT" \
    -P "$PIPELINE" -c "$CLIENTS" -n "$n" -q "${opts[@]}" "${WORDS[@]}" 2>&1) || rc=$?
  cg --dump
  DUMPS=$((DUMPS + 1))
  cg --instr=off
  ((rc != 124)) || die "case ${NAMES[i]}: redis-benchmark did not finish in ${CASE_TIMEOUT}s (BENCH_TIMEOUT)"
  ((rc == 0)) || die "case ${NAMES[i]}: redis-benchmark failed (exit $rc): $out"
  dump=$TMP/callgrind.out.$SERVER_PID.$DUMPS
  [[ -f $dump ]] || die "no callgrind dump $dump"
  read -r total excl <<<"$(dump_cost "$dump" "$EXCLUDED")"
  rm -f "$dump"
  ((total > 0)) || die "case ${NAMES[i]}: no instructions in the dump"
  IR=$(awk -v t="$total" -v e="$excl" -v n="$n" 'BEGIN { printf "%.1f", (t - e) / n }')
  # Checks: every call ran without error, the keys were what the case says, and one more
  # call gives the expected decision.
  read -r calls _ errs <<<"$(read_stat "${WORDS[0]}")"
  ((calls >= n && errs == 0)) || die "case ${NAMES[i]}: cmdstat_${WORDS[0]} has calls=$calls (sent $n), errors=$errs; one call gives: $(rcli "${WORDS[@]//__rand_int__/000000000001}" 2>&1 | tr '\n' ' ')"
  case ${SHAPES[i]} in
    live)
      # A compact policy's subjects are in one key per hash slot (at most 16,384).
      if [[ ${NAMES[i]} == chit-* ]]; then
        (($(rcli DBSIZE) <= 16384)) || die "case ${NAMES[i]}: $(rcli DBSIZE) keys after the window"
      else
        (($(rcli DBSIZE) == LIVE_KEYS)) || die "case ${NAMES[i]}: $(rcli DBSIZE) keys after the window, $LIVE_KEYS expected (did keys expire?)"
      fi
      ;;
    new=*)
      local made=$(($(rcli DBSIZE) - keys))
      if [[ ${NAMES[i]} == chit-* ]]; then
        # Subjects, not keys: the hits all allowed (checked above) made them.
        made=$n
      fi
      ((made * 100 >= n * 99)) || die "case ${NAMES[i]}: $made keys created by $n calls"
      ;;
    fill:*)
      # How many calls found their lease: the leases gone from the key.
      local held
      if [[ ${WORDS[0]} == RL.* ]]; then
        held=$(rcli RL.PEEK "${WORDS[1]}" | sed -n '1,3p' | tr '\n' ' ' |
          awk '{ print $2 - $3 }')
      else
        held=$(rcli ZCARD "${WORDS[1]}")
      fi
      FOUND[i]=$((LIVE_KEYS - held))
      ;;
  esac
  if [[ ${EXPECT[i]} != - ]]; then
    local key=000000000001
    [[ ${SHAPES[i]} != new=* && ${SHAPES[i]} != hot* ]] || key=999999999999
    reply=$(rcli "${WORDS[@]//__rand_int__/$key}" 2>&1 | head -n 1)
    [[ $reply == "${EXPECT[i]}" ]] || die "case ${NAMES[i]}: one more call answers '$reply' first, expected ${EXPECT[i]}"
  fi
  log "$(printf '%-22s %7d calls %12s instructions/call  (%.1f s)' "${NAMES[i]}" "$n" "$IR" \
    "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')")"
}

IRS=() FOUND=()
for i in "${!NAMES[@]}"; do
  warm "$i"
  measure "$i"
  IRS[i]=$IR
done

# ---------------------------------------------------------------------------------------
# Repeatability: some cases again, from the same starting state (before the propagation
# cases: once a replica has attached, the server keeps feeding its replication backlog).
# ---------------------------------------------------------------------------------------
REP_LINES=() REP_BAD=()
for c in $REPEAT; do
  [[ -n ${INDEX[$c]:-} ]] || continue
  i=${INDEX[$c]}
  warm "$i"
  measure "$i"
  pct=$(awk -v a="${IRS[i]}" -v b="$IR" 'BEGIN { printf "%+.2f", (a > 0 ? 100 * (b - a) / a : 0) }')
  REP_LINES+=("$(printf '%-22s %12s then %12s  (%s%%)' "$c" "${IRS[i]}" "$IR" "$pct")")
  if awk -v p="$pct" -v m="$MAX_REPEAT_PCT" 'BEGIN { exit !(p > m || -p > m) }'; then REP_BAD+=("$c"); fi
done

# ---------------------------------------------------------------------------------------
# Propagation: the same hot allowed cases with AOF on, then with a replica attached.
# ---------------------------------------------------------------------------------------
PROP=()
for c in "${PROP_CASES[@]}"; do [[ -z ${INDEX[$c]:-} ]] || PROP+=("$c"); done
declare -A IR_AOF=() IR_REPL=()
if ((${#PROP[@]} > 0)); then
  log "propagation: appendonly yes"
  rcli FLUSHALL SYNC >/dev/null
  rcli CONFIG SET appendonly yes >/dev/null
  for _ in $(seq 600); do # the initial rewrite (a fork, also under valgrind): up to 60 s
    [[ $(info_field persistence aof_rewrite_in_progress) == 0 &&
      $(info_field persistence aof_rewrite_scheduled) == 0 &&
      $(info_field persistence aof_enabled) == 1 ]] && break
    sleep 0.1
  done
  [[ $(info_field persistence aof_enabled) == 1 ]] || die "appendonly did not turn on"
  for c in "${PROP[@]}"; do
    warm "${INDEX[$c]}"
    measure "${INDEX[$c]}"
    IR_AOF[$c]=$IR
  done
  rcli CONFIG SET appendonly no >/dev/null

  log "propagation: a replica attached"
  rcli FLUSHALL SYNC >/dev/null
  start_redis REPLICA_PORT REPLICA_PID 20 replica launch_replica "$TMP/replica.log"
  for _ in $(seq 600); do # the full sync: up to 60 s
    [[ $(info_field replication connected_slaves) == 1 ]] &&
      rcli INFO replication | grep -q 'slave0:.*state=online' &&
      [[ $(timeout 2 redis-cli -h 127.0.0.1 -p "$REPLICA_PORT" INFO replication | tr -d '\r' |
        awk -F: '$1 == "master_link_status" { print $2 }') == up ]] && break
    sleep 0.1
  done
  rcli INFO replication | grep -q 'slave0:.*state=online' || die "the replica did not come online (see $TMP/replica.log)"
  for c in "${PROP[@]}"; do
    warm "${INDEX[$c]}"
    measure "${INDEX[$c]}"
    IR_REPL[$c]=$IR
  done
  # The replica applied every call: it holds the same keys.
  [[ $(rcli WAIT 1 10000) == 1 ]] || die "the replica did not acknowledge the writes"
  [[ $(timeout 10 redis-cli -h 127.0.0.1 -p "$REPLICA_PORT" DBSIZE) == $(rcli DBSIZE) ]] ||
    die "the replica's keys differ from the primary's (see $TMP/replica.log)"
  stop_pid "$REPLICA_PID"
  REPLICA_PID=
fi

# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------
fmt_int() { # thousands separators
  awk -v x="$1" 'BEGIN {
    s = sprintf("%.0f", (x < 0 ? -x : x)); o = ""
    while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) }
    print (x <= -0.5 ? "-" : "") s o
  }'
}
display_cmd() {
  local i=$1 c=${CMDS[$1]}
  c=$(script_names "$c")
  case ${SHAPES[i]} in
    live | fill:*) c="[-r $LIVE_KEYS] $c" ;;
    new=*) c="[-r $NEW_RANGE] $c" ;;
    hot*) [[ $c != *__rand_int__* ]] || c="[-r $NEW_RANGE] $c" ;;
  esac
  printf '%s' "$c"
}

SET_IR=0 INCR_IR=0
[[ -z ${INDEX[set-px-live]:-} ]] || SET_IR=${IRS[${INDEX[set-px-live]}]}
[[ -z ${INDEX[incr]:-} ]] || INCR_IR=${IRS[${INDEX[incr]}]}

echo
printf 'Instructions per call (callgrind Ir), redis-benchmark -P %s -c %s, %s calls per case at 100%%\n' "$PIPELINE" "$CLIENTS" "$N"
echo
W=7 # width of the command column: the longest command shown
for i in "${!NAMES[@]}"; do
  c=$(display_cmd "$i")
  ((${#c} <= W)) || W=${#c}
done
printf "%-22s %-${W}s %10s %11s %8s  %s\n" case command Ir/call "x set-px-live" "x incr" "others cost (x this)"
MISSES=()
for i in "${!NAMES[@]}"; do
  others=
  for v in ${VS[i]}; do
    [[ -n ${INDEX[$v]:-} ]] || continue
    others+="${v%%-*} $(ratio "${IRS[${INDEX[$v]}]}" "${IRS[i]}")  "
  done
  printf "%-22s %-${W}s %10s %11s %8s  %s\n" "${NAMES[i]}" "$(display_cmd "$i")" "$(fmt_int "${IRS[i]}")" \
    "$(ratio "${IRS[i]}" "$SET_IR")" "$(ratio "${IRS[i]}" "$INCR_IR")" "$others"
  case ${TARGET[i]} in
    live) base=$SET_IR max=$MAX_X_LIVE what="set-px-live" ;;
    new) base=$SET_IR max=$MAX_X_NEW what="set-px-live" ;;
    refuse) base=$INCR_IR max=$MAX_X_REFUSE what="incr" ;;
    *) continue ;;
  esac
  awk -v a="${IRS[i]}" -v b="$base" 'BEGIN { exit !(b > 0) }' || continue
  x=$(awk -v a="${IRS[i]}" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
  if awk -v x="$x" -v m="$max" 'BEGIN { exit !(x > m) }'; then
    MISSES+=("${NAMES[i]}: ${x}x $what, target <= ${max}x")
  fi
done

# A lease's whole life, acquired then released, against the script and ZREM.
PAIR=(acquire-hot-allow release-live lua-acquire-hot-allow zrem-live)
have_pair=1
for c in "${PAIR[@]}"; do [[ -n ${INDEX[$c]:-} ]] || have_pair=0; done
if ((have_pair)); then
  ir() { echo "${IRS[${INDEX[$1]}]}"; }
  found() { echo "${FOUND[${INDEX[$1]}]:-0} of $((N * SHARE[${INDEX[$1]}] / 100))"; }
  rl_pair=$(awk -v a="$(ir acquire-hot-allow)" -v b="$(ir release-live)" 'BEGIN { print a + b }')
  lua_pair=$(awk -v a="$(ir lua-acquire-hot-allow)" -v b="$(ir zrem-live)" 'BEGIN { print a + b }')
  echo
  printf 'acquire+release pair: RL.ACQUIRE + RL.RELEASE %s, semaphore.lua + ZREM %s instructions: the script costs %s\n' \
    "$(fmt_int "$rl_pair")" "$(fmt_int "$lua_pair")" "$(ratio "$lua_pair" "$rl_pair")"
  printf '  (releases that found their lease: RL.RELEASE %s, ZREM %s)\n' "$(found release-live)" "$(found zrem-live)"
  x=$(awk -v a="$lua_pair" -v b="$rl_pair" 'BEGIN { printf "%.2f", a / b }')
  if awk -v x="$x" 'BEGIN { exit !(x < 5) }'; then MISSES+=("acquire+release pair: the script costs ${x}x, target >= 5x"); fi
fi

if ((${#PROP[@]} > 0)); then
  echo
  echo "Propagation: extra instructions per call with appendonly yes (everysec), and with one replica attached"
  echo
  printf '%-22s %10s %10s %10s %10s %10s %10s %10s\n' case plain aof "+aof" "x incr's" replica "+replica" "x incr's"
  inc_aof=0 inc_repl=0
  if [[ -n ${IR_AOF[incr]:-} ]]; then
    inc_aof=$(awk -v a="${IR_AOF[incr]}" -v b="$INCR_IR" 'BEGIN { print a - b }')
    inc_repl=$(awk -v a="${IR_REPL[incr]}" -v b="$INCR_IR" 'BEGIN { print a - b }')
  fi
  for c in "${PROP[@]}"; do
    i=${INDEX[$c]}
    ea=$(awk -v a="${IR_AOF[$c]}" -v b="${IRS[i]}" 'BEGIN { print a - b }')
    er=$(awk -v a="${IR_REPL[$c]}" -v b="${IRS[i]}" 'BEGIN { print a - b }')
    printf '%-22s %10s %10s %10s %10s %10s %10s %10s\n' "$c" "$(fmt_int "${IRS[i]}")" \
      "$(fmt_int "${IR_AOF[$c]}")" "$(fmt_int "$ea")" "$(ratio "$ea" "$inc_aof")" \
      "$(fmt_int "${IR_REPL[$c]}")" "$(fmt_int "$er")" "$(ratio "$er" "$inc_repl")"
    [[ $c != incr ]] || continue
    for pair in "aof:$ea:$inc_aof" "replica:$er:$inc_repl"; do
      IFS=: read -r what e b <<<"$pair"
      awk -v b="$b" 'BEGIN { exit !(b > 0) }' || continue
      x=$(awk -v a="$e" -v b="$b" 'BEGIN { printf "%.2f", a / b }')
      if awk -v x="$x" -v m="$MAX_X_PROP" 'BEGIN { exit !(x > m) }'; then
        MISSES+=("$c: propagating with $what costs ${x}x INCR's extra, target <= ${MAX_X_PROP}x")
      fi
    done
  done
fi

if ((${#REP_LINES[@]} > 0)); then
  echo
  echo "Repeatability (the same case again, from the same starting state; within ${MAX_REPEAT_PCT}% expected):"
  printf '  %s\n' "${REP_LINES[@]}"
  ((${#REP_BAD[@]} == 0)) || echo "  NOT REPEATABLE: ${REP_BAD[*]}: compare figures with care"
fi

echo
targets="targets (allowed RL.* on live keys <= ${MAX_X_LIVE}x set-px-live, on new keys <= ${MAX_X_NEW}x, refused <= ${MAX_X_REFUSE}x incr, propagation <= ${MAX_X_PROP}x INCR's)"
print_targets "$targets"
echo
print_produced instr.sh bench-instr ", $(elapsed) s"
echo "counted:     every instruction of the server process in each window, minus serverCron,"
echo "             accepting and freeing the clients, and CONFIG GET (not per call)"
print_setup ", $(valgrind --version)"
