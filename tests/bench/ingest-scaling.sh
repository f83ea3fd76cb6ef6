#!/usr/bin/env bash
# ingest-scaling.sh — `ckptsync snapshot` (the reading core the daemon's
# ingest shares: service/ingcore.c) at 1 and 2 workers on tmpfs, where the
# CPU is the bound, for a sharded checkpoint (FILES files) and for one
# huge file (#24 item 4: what one huge file costs, and whether the reading
# and cutting thread is the serial stage).  A benchmark, not a test.
#
#   tests/bench/ingest-scaling.sh [CKPTSYNC]   default build-release/ckptsync
#   BEFORE     another ckptsync (e.g. main's build) measured in the same
#              run, its reps interleaved with CKPTSYNC's ("build" column)
#   SCALE_MIB  checkpoint size (default 512); FILES (default 8) and 1
#   WORKERS    default "1 2";  REPS  default 3 (median shown)
#   PIN=1      run each worker count W on W cores only (taskset -c
#              0..W-1): the speedup then is what W cores give, not what
#              W pool threads give beside the reader on every core
#   PERF=1     also `perf record -g` the largest worker count: CPU share
#              per thread (the busiest thread's share of the run's CPU
#              and of its wall time) and the top symbols
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
CKS=${1:-$top/build-release/ckptsync}
SCALE_MIB=${SCALE_MIB:-512}
FILES=${FILES:-8}
WORKERS=${WORKERS:-1 2}
REPS=${REPS:-3}
S=$(mktemp -d "${SHM:-/dev/shm}/cks-iscale.XXXXXX")
trap 'rm -rf "$S"' EXIT

conf() { # conf WORKERS
  printf '[daemon]\nwatch = %s/watch\nstate = %s/state\nquorum = 2\nworkers = %s\n' "$S" "$S" "$1"
  for r in a b c; do printf '[region.%s]\nkind = dir\npath = %s/%s\n' "$r" "$S" "$r"; done
}
mk() { # mk DIR NFILES
  local per=$((SCALE_MIB / $2)) i
  mkdir -p "$1"
  for i in $(seq 1 "$2"); do head -c $((per << 20)) /dev/urandom > "$1/shard-$i.bin"; done
}
mk "$S/many/checkpoint-1" "$FILES"
mk "$S/one/checkpoint-1" 1
one() { # one DIR WORKERS [BIN] -> "wall cpu"
  local bin=${3:-$CKS}
  conf "$2" > "$S/conf"
  rm -rf "$S/state" "$S/a" "$S/b" "$S/c"
  mkdir -p "$S/a" "$S/b" "$S/c" "$S/watch"
  local pin=()
  [ "${PIN:-0}" != 1 ] || pin=(taskset -c "0-$(($2 - 1))")
  /usr/bin/time -f '%e %U %S' -o "$S/t" "${pin[@]}" "$bin" --config "$S/conf" --quiet snapshot "$1" --run b \
    --step 1 > /dev/null
  awk '{ print $1, $2 + $3 }' "$S/t"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
builds="after"
[ -z "${BEFORE:-}" ] || builds="before after"
printf '| build | files | workers | wall s (median of %s) | GB/s | CPU s/GB |\n|---|---|---|---|---|---|\n' "$REPS"
for set in many one; do
  n=$FILES
  [ "$set" = many ] || n=1
  for w in $WORKERS; do
    for b in $builds; do : > "$S/walls.$b"; : > "$S/cpus.$b"; done
    for _ in $(seq 1 "$REPS"); do
      for b in $builds; do
        bin=$CKS
        [ "$b" = after ] || bin=$BEFORE
        read -r wall cpu <<< "$(one "$S/$set/checkpoint-1" "$w" "$bin")"
        echo "$wall" >> "$S/walls.$b"
        echo "$cpu" >> "$S/cpus.$b"
      done
    done
    for b in $builds; do
      wall=$(median < "$S/walls.$b") cpu=$(median < "$S/cpus.$b")
      awk -v b="$b" -v n="$n" -v w="$w" -v t="$wall" -v c="$cpu" -v m="$SCALE_MIB" 'BEGIN {
        g = m * 1048576 / 1e9; printf "| %s | %d | %d | %.2f | %.2f | %.2f |\n", b, n, w, t, g / t, c / g }'
    done
  done
done
if [ "${PERF:-0}" = 1 ]; then
  w=$(echo "$WORKERS" | tr ' ' '\n' | sort -n | tail -1)
  for set in many one; do
    conf "$w" > "$S/conf"
    rm -rf "$S/state" "$S/a" "$S/b" "$S/c"
    mkdir -p "$S/a" "$S/b" "$S/c"
    t0=$(date +%s.%N)
    perf record -q -g -o "$S/perf.data" -- "$CKS" --config "$S/conf" --quiet snapshot \
      "$S/$set/checkpoint-1" --run b --step 1 > /dev/null 2>&1
    t1=$(date +%s.%N)
    echo
    echo "perf, $set file(s), workers $w, wall $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s:"
    echo "CPU share per thread (samples):"
    perf report -i "$S/perf.data" --no-children --sort pid --stdio -g none 2> /dev/null |
      sed -n '/^ *[0-9]/p' | sed -n 1,6p
    echo "top symbols:"
    perf report -i "$S/perf.data" --no-children --sort sym --stdio -g none 2> /dev/null |
      sed -n '/^ *[0-9]/p' | sed -n 1,8p
  done
fi
echo "(load: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $(uname -r))"
