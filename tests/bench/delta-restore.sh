#!/usr/bin/env bash
# delta-restore.sh — issue 27 deliverable 6: "restore of the end of a
# chain of keyframe_every <= 1.2x the restore of a keyframe".  In the same
# run: the restore of a keyframe (a checkpoint stored plain) against the
# restore of its successor stored as XOR recipes against it (the delta
# the writer stores: against the latest keyframe, so the end of any chain
# is one delta away), with the bases from the regions, and with the
# keyframe's files on the instance lending them (--seed, docs/deltas.md
# "hot resume").  A benchmark, not a test: it prints a table and never
# fails on time.
#
#   tests/bench/delta-restore.sh [BUILD]
#
# BUILD: a build directory holding ckptsync and tests/mkrecipes, without
# sanitizers (default build-bench; configure it with the tests).
# Environment:
#   DATA=DIR       checkpoints delta_train.py wrote into DIR (ckpt-K.bin,
#                  ckpt-C.bin, index.txt); else it trains (a few minutes)
#   KEY, CHILD     the keyframe's and the successor's steps (50, 60)
#   REPS           runs per case (default 5): median and best shown
#   SHM            the tmpfs parent (default /dev/shm): ~8 x the checkpoint
#   WORKERS        restore workers (default 2)
#   WRITE_RESULTS=1  also puts the table in tests/bench/RESULTS.md as the
#                  section "## Delta restore" (benchlib's results_section)
# Data: tests/bench/delta_train.py (Debian's python3-torch) trains a
# GPT-2-style model and saves steps KEY and CHILD as bf16 weights, fp32
# master and AdamW moments; each checkpoint is split into weights.bin,
# master.bin and adam.bin (index.txt's parts).  KEY is snapshot as usual
# (the keyframe); CHILD too, then mkrecipes (xor) stores each of its
# chunks that pays as XOR against KEY's chunks at the same offsets of the
# same file (k lines: KEY's chunks CHILD does not hold), its plain objects
# deleted.  A run: `restore` from three dir regions on tmpfs into tmpfs,
# every chunk and file digest checked, files fsynced, compared with the
# source, on a fresh instance (empty state) except:
#   delta, seed (index): the instance restored the keyframe into a
#     directory first (untimed; the index knows its files, as on the
#     instance that wrote it), then restores the delta with --seed there;
#   delta, seed (scan): --seed a copy of the keyframe the index does not
#     know: the seed's files are read and cut (a cold seed).
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-$top/build-bench}
KEY=${KEY:-50}
CHILD=${CHILD:-60}
REPS=${REPS:-5}
WORKERS=${WORKERS:-2}
[ -x "$B/ckptsync" ] && [ -x "$B/tests/mkrecipes" ] ||
  { echo "delta-restore.sh: no ckptsync or tests/mkrecipes in $B (configure with the tests)" >&2; exit 2; }
. "$top/tests/bench/benchlib.sh"
S=$(mktemp -d "${SHM:-/dev/shm}/cks-drestore.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$S"' EXIT
say() { echo "delta-restore: $*" >&2; }
jget() { /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }

if [ -n "${DATA:-}" ]; then
  D=$DATA
  train="earlier, DATA=$DATA"
else
  D=$S/raw
  mkdir -p "$D"
  say "training to step $CHILD (saving $KEY and $CHILD)"
  t0=$(date +%s)
  /usr/bin/python3 "$top/tests/bench/delta_train.py" "$D" "$KEY" "$CHILD" > "$D/train.log" 2>&1 ||
    { tail -20 "$D/train.log" >&2; exit 1; }
  train="$(($(date +%s) - t0)) s"
fi
params=$(head -1 "$D/train.log" 2> /dev/null || echo "params ?")

split() { # RAW INDEX DIR: the parts of a delta_train.py checkpoint as files
  /usr/bin/python3 - "$@" << 'PY'
import os, sys
raw, index, d = sys.argv[1:4]
os.makedirs(d, exist_ok=True)
spans = {}
for line in open(index):
    part, _, off, n = line.split()
    lo, hi = spans.get(part, (1 << 62, 0))
    spans[part] = (min(lo, int(off)), max(hi, int(off) + int(n)))
with open(raw, "rb") as f:
    for part, name in (("bf16", "weights.bin"), ("master", "master.bin"), ("adam", "adam.bin")):
        lo, hi = spans[part]
        f.seek(lo)
        open(os.path.join(d, name), "wb").write(f.read(hi - lo))
PY
}
split "$D/ckpt-$KEY.bin" "$D/index.txt" "$S/k/ckpt"
split "$D/ckpt-$CHILD.bin" "$D/index.txt" "$S/c/ckpt"
cp -a "$S/k" "$S/kcopy"
RAW_MIB=$(du -sm --apparent-size "$S/c/ckpt" | cut -f1)

conf() { # FILE: three dir regions, a state directory
  cat > "$1" << EOF
[daemon]
watch = $S/watch
state = $S/state
quorum = 2
workers = $WORKERS
[region.a]
kind = dir
path = $S/ra
[region.b]
kind = dir
path = $S/rb
[region.c]
kind = dir
path = $S/rc
EOF
}
mkdir -p "$S/ra" "$S/rb" "$S/rc" "$S/watch"
conf "$S/c.conf"
cks() { "$B/ckptsync" --config "$S/c.conf" "$@"; }
cks snapshot "$S/k/ckpt" --run bench --step "$KEY" --json > "$S/k.json"
cks snapshot "$S/c/ckpt" --run bench --step "$CHILD" --json > "$S/c.json"
kid=$(jget "$S/k.json" 'd["id"]')
cid=$(jget "$S/c.json" 'd["id"]')
say "mkrecipes: step $CHILD as XOR against step $KEY"
"$B/tests/mkrecipes" "$S/c.conf" bench "$cid" "$kid" xor > "$S/recipes.txt" 2> "$S/mk.err" ||
  { cat "$S/mk.err" >&2; exit 1; }
NREC=$(grep -c '^recipe ' "$S/recipes.txt" || true)
NK=$(grep -c '^k ' "$S/recipes.txt" || true)
NCH=$(jget "$S/c.json" 'd.get("chunks", "?")')
say "$NREC recipes, $NK k lines"

# one CASE: "wall_s cpu_s fetched_bytes objects local_bases" of one restore
one() {
  local id=$cid src=$S/c/ckpt ex=() t0 t1 u s
  rm -rf "$S/state" "$S/out" "$S/kf"
  case $1 in
    key) id=$kid src=$S/k/ckpt ;;
    seed-index)
      cks restore --run bench --snapshot "$kid" --to "$S/kf" -q
      ex=(--seed "$S/kf") ;;
    seed-scan) ex=(--seed "$S/kcopy") ;;
  esac
  t0=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$S/time" \
    "$B/ckptsync" --config "$S/c.conf" restore --run bench --snapshot "$id" --to "$S/out" \
    "${ex[@]}" --json > "$S/r.json"
  t1=$(date +%s.%N)
  for f in weights.bin master.bin adam.bin; do
    cmp -s "$src/$f" "$S/out/ckpt/$f" || { echo "delta-restore.sh: $1: $f differs" >&2; exit 1; }
  done
  read -r u s < <(tail -1 "$S/time")
  local r
  r=$(jget "$S/r.json" '"%d %d %d" % (d["fetched_bytes"], sum(d["regions"].values()), d.get("local_bases", 0))')
  awk -v a="$t0" -v b="$t1" -v u="$u" -v s="$s" -v r="$r" 'BEGIN {printf "%.3f %.3f %s\n", b - a, u + s, r}'
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
best() { sort -n | sed -n 1p; }

avail=$(df -m --output=avail "$S" | tail -1 | tr -d ' ')
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
cases="key delta seed-index seed-scan"
declare -A T=() C=() R=()
for rep in $(seq 1 "$REPS"); do
  for c in $cases; do # interleaved: every case sees the same load
    read -r w cpu rest < <(one "$c")
    T[$c]="${T[$c]:-} $w"
    C[$c]="${C[$c]:-} $cpu"
    R[$c]=$rest
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

kmed=$(printf '%s\n' ${T[key]} | median)
kbest=$(printf '%s\n' ${T[key]} | best)
kfetched=${R[key]%% *}
table() {
  echo "| restore | wall s (median) | vs keyframe | best wall s | best vs keyframe | CPU s | fetched MiB | fetched vs keyframe | objects fetched | bases from the seed |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for c in $cases; do
    local m n cpu name
    m=$(printf '%s\n' ${T[$c]} | median)
    n=$(printf '%s\n' ${T[$c]} | best)
    cpu=$(printf '%s\n' ${C[$c]} | median)
    case $c in
      key) name="keyframe (step $KEY, plain)" ;;
      delta) name="delta (step $CHILD), bases from the regions" ;;
      seed-index) name="delta, --seed the keyframe's files (index knows them: hot resume)" ;;
      seed-scan) name="delta, --seed a copy the index does not know (cut)" ;;
    esac
    set -- ${R[$c]}
    awk -v c="$name" -v m="$m" -v n="$n" -v km="$kmed" -v kb="$kbest" -v cpu="$cpu" \
      -v f="$1" -v kf="$kfetched" -v o="$2" -v l="$3" \
      'BEGIN {printf "| %s | %.2f | %.2fx | %.2f | %.2fx | %.2f | %.1f | %.2fx | %d | %d |\n", c, m, m / km, n, n / kb, cpu, f / 1048576, f / kf, o, l}'
  done
}
{
  echo "## Delta restore (tests/bench/delta-restore.sh, issue 27 deliverable 6)"
  echo
  echo "Run $(date -u +%Y-%m-%dT%H:%MZ), ckptsync $(git -C "$top" rev-parse --short HEAD 2> /dev/null || echo '?'), build $B." \
    "Command: \`${CMD:-tests/bench/delta-restore.sh $*}\` (REPS=$REPS WORKERS=$WORKERS)."
  echo "Data: tests/bench/delta_train.py with Debian's python3-torch ($params; trained: $train)," \
    "steps $KEY (the keyframe) and $CHILD, each as weights.bin (bf16), master.bin (fp32) and adam.bin" \
    "(AdamW moments), $RAW_MIB MiB; step $CHILD: $NCH chunks, $NREC stored as XOR recipes against" \
    "step $KEY's chunks ($NK k lines; tests/tools/mkrecipes xor).  Three dir regions on tmpfs, restore" \
    "into tmpfs with $WORKERS workers, every chunk and file digest checked, compared with the source;" \
    "median and best of $REPS, the cases interleaved.  Goal: the delta's restore <= 1.2x the keyframe's." \
    "On tmpfs a restore is bound by CPU, not by the bytes it fetches; behind a link it is bound by" \
    "the bytes (tests/bench/restore-netns.sh: 0.89 of the link), which 'fetched vs keyframe' compares."
  echo
  table
  echo
  echo '```'
  machine
  echo '```'
} > "$S/report.md"
cat "$S/report.md"
[ "${WRITE_RESULTS:-0}" = 1 ] && results_section "Delta restore" "$S/report.md"
exit 0
