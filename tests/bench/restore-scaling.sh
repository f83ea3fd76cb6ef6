#!/usr/bin/env bash
# restore-scaling.sh — restore at 1 and 2 (or more) workers on tmpfs, where
# the CPU is the bound, for one or two builds in the same run (issue 24:
# no serial stage in restore).  A benchmark, not a test: it prints a table
# and never fails on time.
#
#   tests/bench/restore-scaling.sh [NEW_CKPTSYNC [BASE_CKPTSYNC]]
#
# NEW_CKPTSYNC defaults to build-release/ckptsync; BASE_CKPTSYNC (e.g. a
# build of main) is run interleaved with it, rep by rep, so both see the
# same machine load.  Environment:
#   SCALE_MIB  checkpoint size (default 512), cut into FILES files (default
#              8: a sharded checkpoint; FILES=1 is one huge file)
#   WORKERS    the worker counts to run (default "1 2")
#   REPS       runs per build and count (default 3); the median is shown
#   PERF=1     also profiles each build at the largest worker count with
#              perf (task-clock): the busiest thread's CPU seconds against
#              the wall time, and the top symbols
#   SHM        the tmpfs parent (default /dev/shm)
#   SHA256=1   also runs NEW on a snapshot taken with [snapshot]
#              file_digest = sha256 (build "new-sha": the whole-file SHA-256
#              path of this build, beside its default chunk tree)
# What a run is: `restore --latest` of the checkpoint from three dir
# regions on tmpfs into tmpfs, on a fresh instance (no index), each chunk
# verified and each file's digest checked, files fsynced.  Each build
# restores a snapshot it took itself (run bench, bench-base, bench-sha:
# the same chunks, so the regions hold them once), so a base that reads
# no version 5 manifest restores its own version 3 one.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
NEW=${1:-$top/build-release/ckptsync}
BASE=${2:-}
SCALE_MIB=${SCALE_MIB:-512}
FILES=${FILES:-8}
WORKERS=${WORKERS:-1 2}
REPS=${REPS:-3}
[ -x "$NEW" ] || { echo "restore-scaling.sh: no ckptsync at $NEW (build-release first)" >&2; exit 2; }
[ -z "$BASE" ] || [ -x "$BASE" ] || { echo "restore-scaling.sh: no ckptsync at $BASE" >&2; exit 2; }

S=$(mktemp -d "${SHM:-/dev/shm}/cks-rscale.XXXXXX")
trap 'rm -rf "$S"' EXIT
say() { echo "restore-scaling: $*" >&2; }

conf() { # conf FILE WORKERS [FILE_DIGEST]
  cat > "$1" << EOF
${3:+[snapshot]
file_digest = $3
}[daemon]
watch = $S/watch
state = $S/state
quorum = 2
workers = $2
[region.a]
kind = dir
path = $S/a
[region.b]
kind = dir
path = $S/b
[region.c]
kind = dir
path = $S/c
EOF
}

mkdir -p "$S/a" "$S/b" "$S/c" "$S/watch" "$S/ck/checkpoint-100"
per=$((SCALE_MIB / FILES))
for i in $(seq 1 "$FILES"); do
  head -c $((per << 20)) /dev/urandom > "$S/ck/checkpoint-100/shard-$i.bin"
done
echo '{"global_step": 100}' > "$S/ck/checkpoint-100/trainer_state.json"
conf "$S/snap.conf" 2
say "snapshot of $SCALE_MIB MiB in $FILES files"
"$NEW" --config "$S/snap.conf" snapshot "$S/ck/checkpoint-100" --run bench --step 100 > /dev/null
if [ -n "$BASE" ]; then
  "$BASE" --config "$S/snap.conf" snapshot "$S/ck/checkpoint-100" --run bench-base --step 100 > /dev/null
fi
if [ "${SHA256:-0}" = 1 ]; then
  conf "$S/snap.conf" 2 sha256
  "$NEW" --config "$S/snap.conf" snapshot "$S/ck/checkpoint-100" --run bench-sha --step 100 > /dev/null
fi

# one BIN WORKERS RUN: "wall_s cpu_s" of one restore (fresh state and target)
one() {
  conf "$S/r.conf" "$2"
  rm -rf "$S/state" "$S/out"
  local t0 t1 u s
  t0=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$S/time" \
    "$1" --config "$S/r.conf" --quiet restore --run "$3" --latest --to "$S/out" > /dev/null
  t1=$(date +%s.%N)
  cmp -s "$S/ck/checkpoint-100/shard-1.bin" "$S/out/checkpoint-100/shard-1.bin" ||
    { echo "restore-scaling.sh: $1 restored a different tree" >&2; exit 1; }
  read -r u s < <(tail -1 "$S/time")
  awk -v a="$t0" -v b="$t1" -v u="$u" -v s="$s" 'BEGIN {printf "%.3f/%.3f\n", b - a, u + s}'
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A T=() C=()
builds="new"
[ -n "$BASE" ] && builds="base new"
[ "${SHA256:-0}" = 1 ] && builds="$builds new-sha"
run_of() { case $1 in base) echo bench-base ;; new-sha) echo bench-sha ;; *) echo bench ;; esac; }
for w in $WORKERS; do
  for rep in $(seq 1 "$REPS"); do
    for b in $builds; do
      bin=$NEW
      [ "$b" = base ] && bin=$BASE
      r=$(one "$bin" "$w" "$(run_of "$b")")
      T[$b.$w]="${T[$b.$w]:-} ${r%/*}"
      C[$b.$w]="${C[$b.$w]:-} ${r#*/}"
    done
  done
done

printf '\n%-7s %8s %10s %10s %12s %10s\n' build workers "wall s" "MB/s" "vs 1 worker" "CPU s/GB"
for b in $builds; do
  w1=
  for w in $WORKERS; do
    m=$(printf '%s\n' ${T[$b.$w]} | median)
    c=$(printf '%s\n' ${C[$b.$w]} | median)
    [ -n "$w1" ] || w1=$m
    awk -v b="$b" -v w="$w" -v m="$m" -v mib="$SCALE_MIB" -v w1="$w1" -v c="$c" \
      'BEGIN {printf "%-7s %8s %10.2f %10.0f %11.2fx %10.2f\n", b, w, m, mib * 1.048576 / m, w1 / m,
              c / (mib / 1024)}'
  done
done
echo "(median of $REPS; each run: $SCALE_MIB MiB in $FILES files + 1, three dir regions, tmpfs;" \
  "load average before: $LOAD0, after: $(cut -d' ' -f1-3 /proc/loadavg))"

[ "${PERF:-0}" = 1 ] || exit 0
command -v perf > /dev/null || { say "no perf: no profile"; exit 0; }
wmax=$(printf '%s\n' $WORKERS | sort -n | tail -1)
for b in $builds; do
  bin=$NEW
  [ "$b" = base ] && bin=$BASE
  conf "$S/r.conf" "$wmax"
  rm -rf "$S/state" "$S/out"
  t0=$(date +%s.%N)
  perf record -q -F 999 -e task-clock -g -o "$S/perf.$b" -- \
    "$bin" --config "$S/r.conf" --quiet restore --run "$(run_of "$b")" --latest --to "$S/out" > /dev/null 2>&1
  t1=$(date +%s.%N)
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
  echo
  echo "== $b, workers = $wmax: wall ${wall}s; CPU seconds per thread (perf task-clock)"
  perf report -i "$S/perf.$b" --no-children --sort pid -g none --stdio 2> /dev/null |
    awk '/^# Event count/ {ns = $NF}
         /^ *[0-9.]+%/ {pct = $1; sub("%", "", pct); printf "  thread %-22s %6.2fs\n", $2, pct / 100 * ns / 1e9}' |
    sed -n 1,8p
  echo "  top symbols:"
  perf report -i "$S/perf.$b" --no-children --sort sym --stdio 2> /dev/null |
    grep -E '^ +[0-9.]+%' | sed -n 1,8p | sed "s/^/  /"
done
