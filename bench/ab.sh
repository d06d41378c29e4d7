#!/usr/bin/env bash
# Instructions per call of two builds side by side, in one run: `make bench-ab A=<old .so>
# B=<new .so>` (or bench/ab.sh A.so B.so). Run from the repo root.
#
# Each start of redis-server draws a new seed for its hash tables (the command table and
# the keyspace). The seed decides which names share a bucket, and so what a lookup of a
# command name (the call's own, and RL.APPLY's in RM_Replicate) or of a key costs: between
# two starts of the same build, one case moves by up to about 1.5% (SET PX too, with no
# module code in it). One start per build therefore cannot tell a 1% change. This script
# runs bench/instr.sh STARTS times for each build, alternating (A, B, A, B, ...), each on a
# fresh server, and takes each case's lowest count over the starts: the count with the
# fewest collisions, the same floor for both builds. The table shows the spread too
# (highest minus lowest, over the starts).
#
# The floor is not the same when the two builds register a different number of commands:
# Redis 7.0's command table doubles past 256 commands, and the commands registered before
# it grew may then come after a server command of their bucket (one more name compared on
# each lookup, in about half of the starts). BENCH_INSTR_EXCLUDE=dictFetchValue leaves the
# server's lookups of commands by name out of every count, for a comparison of the rest.
#
# Environment:
#   BENCH_AB_STARTS   starts per build (default: 3)
#   BENCH_INSTR_ONLY  the cases (bench/instr.sh's; default: INCR, SET PX on live keys and
#                     every rate limiter's allowed cases, and a refused RL.TOKEN)
#   BENCH_INSTR_N     requests per case (default: 30000)
#   BENCH_AB_OUT      where each start's output is kept (default: a new directory in /tmp)
#   BENCH_INSTR_EXCLUDE functions left out of the counts (bench/instr.sh), e.g. dictFetchValue
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -eq 2 && -f $1 && -f $2 ]] || {
  echo "usage: bench/ab.sh A.so B.so   (make bench-ab A=... B=...)" >&2
  exit 2
}
A=$(realpath "$1")
B=$(realpath "$2")
STARTS=${BENCH_AB_STARTS:-3}
KINDS='slide|token|leaky|fixed|subwin'
ONLY=${BENCH_INSTR_ONLY:-"^(incr|set-px-live|($KINDS)-(hot-allow|live|new)|token-hot-refuse)\$"}
N=${BENCH_INSTR_N:-30000}
OUT=${BENCH_AB_OUT:-$(mktemp -d /tmp/bench-ab.XXXXXX)}
mkdir -p "$OUT"
started=$(date +%s)
echo "bench-ab: A=$A"
echo "bench-ab: B=$B"
echo "bench-ab: $STARTS starts each, $N calls a case, outputs in $OUT"
for i in $(seq 1 "$STARTS"); do
  for side in A B; do
    so=$A
    [[ $side == B ]] && so=$B
    echo "bench-ab: $(date +%T) start $i of $side"
    MODULE=$so BENCH_INSTR_N=$N BENCH_INSTR_REPEAT='' BENCH_INSTR_ONLY=$ONLY \
      bench/instr.sh >"$OUT/$side-$i.txt" 2>&1 || {
      echo "bench-ab: bench/instr.sh failed, see $OUT/$side-$i.txt" >&2
      exit 1
    }
  done
done
# bench/instr.sh logs "bench-instr: <time> <case> <n> calls <count> instructions/call".
awk '
  # The first count of a case in a start (the propagation cases run it again, with
  # appendonly and with a replica).
  /instructions\/call/ && $1 == "bench-instr:" && !((FILENAME, $3) in done) {
    done[FILENAME, $3] = 1
    side = FILENAME
    sub(/^.*\//, "", side)
    side = substr(side, 1, 1)
    c = $3; v = $6 + 0
    if (!(c in seen)) { order[++n] = c; seen[c] = 1 }
    k = side SUBSEP c
    if (!(k in lo) || v < lo[k]) lo[k] = v
    if (!(k in hi) || v > hi[k]) hi[k] = v
  }
  END {
    printf "%-20s %10s %10s %9s %10s %10s\n", "case", "A (min)", "B (min)", "change", "A spread", "B spread"
    for (i = 1; i <= n; i++) {
      c = order[i]; a = lo["A" SUBSEP c]; b = lo["B" SUBSEP c]
      printf "%-20s %10.0f %10.0f %+8.2f%% %10.0f %10.0f\n", c, a, b, (b - a) * 100 / a,
        hi["A" SUBSEP c] - a, hi["B" SUBSEP c] - b
    }
  }' "$OUT"/A-*.txt "$OUT"/B-*.txt
echo
echo "produced by: BENCH_AB_STARTS=$STARTS BENCH_INSTR_N=$N${BENCH_INSTR_EXCLUDE:+ BENCH_INSTR_EXCLUDE=$BENCH_INSTR_EXCLUDE} bench/ab.sh $A $B, $(($(date +%s) - started)) s"
grep -m1 '^server:' "$OUT/A-1.txt" || true
echo "A: $(grep -m1 '^module:' "$OUT/A-1.txt" | sed 's/^module: *//')"
echo "B: $(grep -m1 '^module:' "$OUT/B-1.txt" | sed 's/^module: *//')"
