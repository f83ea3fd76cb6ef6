#!/usr/bin/env bash
# recipe-restore.sh — restore of a version 6 snapshot whose bf16 weights
# are stored as recipes derived from the fp32 master (issue 27: "restore
# resolves chains in parallel"; issue 24: no serial stage), at 1 and 2
# workers, for one or two builds in the same run, beside the restore of
# the same checkpoint stored plain.  A benchmark, not a test: it prints a
# table and never fails on time.
#
#   tests/bench/recipe-restore.sh [NEW_BUILD [BASE_BUILD]]
#
# A build is a build directory holding ckptsync and tests/mkrecipes
# (NEW_BUILD defaults to build-release, configured with the tests);
# BASE_BUILD (e.g. a build of main) is run interleaved with NEW, rep by
# rep, so both see the same machine load.  Environment:
#   SIZE_MIB       checkpoint size (default 512): 2/3 master.bin (fp32),
#                  1/3 weights.bin (bf16, the master's rounding)
#   WORKERS        the worker counts to run (default "1 2")
#   REPS           runs per build and count (default 3); the median and
#                  the best (least disturbed by other work) show
#   SHM            the tmpfs parent (default /dev/shm): ~4 x SIZE free
#   KEEP=1         leaves the scratch directory (its path is printed)
#   NEW_NAME, BASE_NAME  what the report calls the builds (default: their
#                  directories)
#   WRITE_RESULTS=1  also puts the table in tests/bench/RESULTS.md as the
#                  section "## Recipe restore" (benchlib's results_section)
# Data: the master's values are a Gaussian's upper halves (a 1 Mi-value
# template, its 3 lowest bits varied at random so no chunk repeats) over
# random lower halves below 0x8000, so the bf16 round to nearest even is
# the upper half (the decoder computes the rounding all the same); cut by
# the default chunker.  NEW takes a snapshot and mkrecipes (NEW's) turns
# weights.bin's chunks into derived bf16 recipes over master.bin's, the
# plain objects deleted.  A run: `restore` of the snapshot from three dir
# regions on tmpfs into tmpfs, on a fresh instance, every chunk and file
# digest checked, files fsynced, compared with the source; "-w" rows
# restore weights.bin alone (every object through the recipe path, the
# master's chunks fetched as bases only).  "plain" is NEW
# restoring the same checkpoint stored without recipes (a keyframe) in
# three other regions on the same tmpfs.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
NEW=${1:-$top/build-release}
BASE=${2:-}
SIZE_MIB=${SIZE_MIB:-512}
WORKERS=${WORKERS:-1 2}
REPS=${REPS:-3}
for b in "$NEW" $BASE; do
  [ -x "$b/ckptsync" ] || { echo "recipe-restore.sh: no ckptsync in $b" >&2; exit 2; }
done
[ -x "$NEW/tests/mkrecipes" ] ||
  { echo "recipe-restore.sh: no $NEW/tests/mkrecipes (configure with the tests)" >&2; exit 2; }
. "$top/tests/bench/benchlib.sh"

S=$(mktemp -d "${SHM:-/dev/shm}/cks-rrecipe.XXXXXX")
echo "recipe-restore: scratch $S" >&2
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$S"' EXIT
say() { echo "recipe-restore: $*" >&2; }

conf() { # conf FILE WORKERS [REGIONS: "" the recipes', "p" the plain copy's]
  local p=${3:-}
  cat > "$1" << EOF
[daemon]
watch = $S/watch
state = $S/state$p
quorum = 2
workers = $2
[region.a]
kind = dir
path = $S/${p}a
[region.b]
kind = dir
path = $S/${p}b
[region.c]
kind = dir
path = $S/${p}c
EOF
}

mkdir -p "$S/a" "$S/b" "$S/c" "$S/pa" "$S/pb" "$S/pc" "$S/watch" "$S/p/ckpt"
say "writing a $SIZE_MIB MiB checkpoint (fp32 master + its bf16)"
/usr/bin/python3 - "$S/src/ckpt" "$SIZE_MIB" << 'PY'
import os, random, struct, sys
d, mib = sys.argv[1], int(sys.argv[2])
os.makedirs(d)
n = mib * 1048576 // 6  # values: master 4n bytes, weights 2n
r = random.Random(7)
t = struct.pack("<%df" % (1 << 20), *[r.gauss(0, 0.02) for _ in range(1 << 20)])
reps = n // (1 << 20) + 1
b2 = (t[2::4] * reps)[:n]
b3 = (t[3::4] * reps)[:n]
rnd = os.urandom(3 * n)
and7f = bytes(i & 0x7F for i in range(256))
and07 = bytes(i & 0x07 for i in range(256))
noise = rnd[2 * n:].translate(and07)
b2 = (int.from_bytes(b2, "little") ^ int.from_bytes(noise, "little")).to_bytes(n, "little")
m = bytearray(4 * n)
m[0::4] = rnd[:n]
m[1::4] = rnd[n:2 * n].translate(and7f)
m[2::4] = b2
m[3::4] = b3
w = bytearray(2 * n)
w[0::2] = b2
w[1::2] = b3
open(os.path.join(d, "master.bin"), "wb").write(m)
open(os.path.join(d, "weights.bin"), "wb").write(w)
PY
echo note > "$S/p/ckpt/notes.txt"
conf "$S/snap.conf" 2
conf "$S/psnap.conf" 2 p
"$NEW/ckptsync" --config "$S/snap.conf" snapshot "$S/p/ckpt" --run bench --step 10 --json \
  > "$S/psnap.json"
"$NEW/ckptsync" --config "$S/psnap.conf" snapshot "$S/src/ckpt" --run plain --step 20 --json \
  > "$S/plain.json"
"$NEW/ckptsync" --config "$S/snap.conf" snapshot "$S/src/ckpt" --run bench --step 20 --json \
  > "$S/snap.json"
cid=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$S/snap.json")
kid=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$S/plain.json")
pid=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$S/psnap.json")
say "mkrecipes: weights.bin as derived bf16"
"$NEW/tests/mkrecipes" "$S/snap.conf" bench "$cid" "$pid" bf16 > "$S/recipes.txt" 2> "$S/mk.err" ||
  { cat "$S/mk.err" >&2; exit 1; }
NREC=$(grep -c '^recipe ' "$S/recipes.txt" || true)
say "$NREC recipes"

# one BIN RUN ID WORKERS REGIONS ["w": weights.bin alone]: "wall_s/cpu_s/fetched"
# of one restore
one() {
  conf "$S/r.conf" "$4" "$5"
  rm -rf "$S/state$5" "$S/out"
  local t0 t1 u s files="master.bin weights.bin" ex=()
  [ "${6:-}" = w ] && files=weights.bin ex=(--exclude master.bin)
  t0=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$S/time" \
    "$1" --config "$S/r.conf" restore --run "$2" --snapshot "$3" --to "$S/out" "${ex[@]}" \
    --json > "$S/r.json"
  t1=$(date +%s.%N)
  for f in $files; do
    cmp -s "$S/src/ckpt/$f" "$S/out/ckpt/$f" ||
      { echo "recipe-restore.sh: $1 restored a different $f" >&2; exit 1; }
  done
  read -r u s < <(tail -1 "$S/time")
  local fb
  fb=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["fetched_bytes"])' "$S/r.json")
  awk -v a="$t0" -v b="$t1" -v u="$u" -v s="$s" -v f="$fb" \
    'BEGIN {printf "%.3f/%.3f/%s\n", b - a, u + s, f}'
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
best() { sort -n | sed -n 1p; }

avail=$(df -m --output=avail "$S" | tail -1 | tr -d ' ')
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A T=() C=() F=()
builds="plain new new-w"
[ -n "$BASE" ] && builds="plain base new base-w new-w"
for w in $WORKERS; do
  for rep in $(seq 1 "$REPS"); do
    for b in $builds; do
      case $b in
        plain) r=$(one "$NEW/ckptsync" plain "$kid" "$w" p) ;;
        base) r=$(one "$BASE/ckptsync" bench "$cid" "$w" "") ;;
        new) r=$(one "$NEW/ckptsync" bench "$cid" "$w" "") ;;
        base-w) r=$(one "$BASE/ckptsync" bench "$cid" "$w" "" w) ;;
        new-w) r=$(one "$NEW/ckptsync" bench "$cid" "$w" "" w) ;;
      esac
      T[$b.$w]="${T[$b.$w]:-} ${r%%/*}"
      r=${r#*/}
      C[$b.$w]="${C[$b.$w]:-} ${r%/*}"
      F[$b.$w]=${r#*/}
    done
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

table() {
  echo "| build | workers | wall s | MB/s restored | vs 1 worker | best wall s | best vs 1 worker | CPU s | fetched MiB |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for b in $builds; do
    local w1= n1=
    for w in $WORKERS; do
      m=$(printf '%s\n' ${T[$b.$w]} | median)
      n=$(printf '%s\n' ${T[$b.$w]} | best)
      c=$(printf '%s\n' ${C[$b.$w]} | median)
      [ -n "$w1" ] || w1=$m n1=$n
      mib=$SIZE_MIB
      [ "${b%-w}" = "$b" ] || mib=$(awk -v m="$SIZE_MIB" 'BEGIN {print m / 3}')
      awk -v b="$b" -v w="$w" -v m="$m" -v mib="$mib" -v w1="$w1" -v n="$n" -v n1="$n1" \
        -v c="$c" -v f="${F[$b.$w]}" \
        'BEGIN {printf "| %s | %s | %.2f | %.0f | %.2fx | %.2f | %.2fx | %.2f | %.1f |\n", b, w, m,
                mib * 1.048576 / m, w1 / m, n, n1 / n, c, f / 1048576}'
    done
  done
}
{
  echo "## Recipe restore (tests/bench/recipe-restore.sh, issue 27 deliverable 4, issue 24)"
  echo
  echo "$SIZE_MIB MiB checkpoint: master.bin fp32 and weights.bin its bf16 rounding," \
    "weights.bin stored as $NREC derived recipes; three dir regions on tmpfs, restore into" \
    "tmpfs, median (and best) of $REPS.  plain: the same checkpoint stored without recipes (NEW);" \
    "base: ${BASE_NAME:-${BASE:-none}}; new: ${NEW_NAME:-$NEW}; -w: weights.bin alone (--exclude master.bin: every" \
    "object through the recipe path, the master's chunks as bases only)."
  echo
  table
  echo
  echo '```'
  machine
  echo '```'
} > "$S/report.md"
cat "$S/report.md"
[ "${WRITE_RESULTS:-0}" = 1 ] && results_section "Recipe restore" "$S/report.md"
exit 0
