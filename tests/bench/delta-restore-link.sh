#!/usr/bin/env bash
# delta-restore-link.sh — issue 27 deliverable 6 ("restore of the end of a
# chain of keyframe_every <= 1.2x the restore of a keyframe") behind a
# capped link, as restores come from object stores in real use.
# delta-restore.sh measures it on tmpfs with dir regions, where a restore
# is bound by CPU; here the instance runs in a network namespace whose
# veth link to the host is capped with tc (RATE each way, DELAY_MS one
# way: benchlib.sh's link_up / link_shape, as restore-netns.sh), in front
# of three s3rver regions on the host side.  In one run, on the same
# snapshots, each case on a fresh instance (empty state) in the
# namespace, the cases interleaved, REPS each:
#   keyframe   restore of step KF, stored plain (the keyframe)
#   delta      restore of step KF+10, stored by `ckptsync snapshot` with
#              keyframe_every = 8 as deltas against KF; the bases come
#              from the regions (cold)
#   hot        hot resume: the instance restored KF into a directory
#              first (untimed; its index knows those files), then
#              restores KF+10 with --seed there (docs/deltas.md "Hot
#              resume")
# Prints one table per rate: wall s, CPU s (user+sys) and bytes fetched
# (restore --json), medians, each against the keyframe's.  A benchmark,
# not a test: it never fails on a figure.  Needs root (ip netns, tc), node
# with tests/s3's packages, GNU time.
#
#   tests/bench/delta-restore-link.sh [BUILD]    default build-bench
#
# BUILD: a build directory holding ckptsync (no sanitizers).
# Environment:
#   DATA=DIR      checkpoints as tests/bench/delta-store.sh lays them out
#                 (DIR/run/step-KF/ and DIR/run/step-KF+10/, model.pt,
#                 master.pt, exp_avg.pt, exp_avg_sq.pt; DIR/train.log);
#                 make them once with `DATA=DIR tests/bench/delta-store.sh KF`
#   KF            the keyframe's step (default 60; the successor is KF+10)
#   RATES         link rates, tc syntax, one table each (default 200mbit)
#   DELAY_MS      one-way delay each direction (default 5; needs sch_netem)
#   REPS          restores per case and rate (default 3): medians
#   WRITE_RESULTS=1  also puts the tables in tests/bench/RESULTS.md as the
#                 section "## Delta restore behind a link"
# The snapshots run on the host side (the host reaches the regions
# without the cap); the snapshot of KF+10 must name KF as its keyframe
# (its log line "keyframe: snapshot ... is the base of this one's
# deltas"), else the run stops.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-$top/build-bench}
export CKPTSYNC=$B/ckptsync
export CKS_SOURCE_DIR=$top
KF=${KF:-60}
NEXT=$((KF + 10))
RATES=${RATES:-200mbit}
DELAY_MS=${DELAY_MS:-5}
REPS=${REPS:-3}
say() { echo "delta-restore-link: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "needs root (ip netns, tc)"; exit 1; }
[ -x "$CKPTSYNC" ] || { say "no $CKPTSYNC (cmake --build $B)"; exit 2; }
D=${DATA:-}
if [ -z "$D" ] || [ ! -f "$D/run/step-$NEXT/exp_avg_sq.pt" ] || [ ! -d "$D/run/step-$KF" ]; then
  say "DATA must hold run/step-$KF and run/step-$NEXT (make them: DATA=DIR tests/bench/delta-store.sh $KF)"
  exit 2
fi
. "$top/tests/integration/lib.sh"
. "$top/tests/integration/s3lib.sh"
S=$T
. "$top/tests/bench/benchlib.sh"

link_up
CKS_CLEANUP_HOOKS+=(link_down)
link_s3 a b c
write_s3_credentials
mkdir -p "$T/watch"
{
  printf '[daemon]\nwatch = %s\nstate = %s\nquorum = 2\n' "$T/watch" "$STATE"
  printf '[compress]\nkeyframe_every = 8\n'
  link_s3_conf a b c
} > "$CONF"
sed "s|^state = .*|state = $T/wstate|" "$CONF" > "$T/writer.conf"

# The writer, on the host side: KF (a keyframe: the run has none), then
# KF+10 (deltas against KF, whose files are its sibling directory).
snap() { # STEP: the snapshot's id
  "$CKPTSYNC" --config "$T/writer.conf" snapshot "$D/run/step-$1" --run bench --step "$1" \
    --json > "$T/snap-$1.json" 2> "$T/snap-$1.err" || { cat "$T/snap-$1.err" >&2; exit 1; }
  jq -r .id "$T/snap-$1.json"
}
say "snapshot of steps $KF and $NEXT (host side)"
kid=$(snap "$KF")
cid=$(snap "$NEXT")
grep "keyframe: snapshot $kid" "$T/snap-$NEXT.err" > "$T/keyframe.line" ||
  { cat "$T/snap-$NEXT.err" >&2; say "step $NEXT is not stored as deltas against $kid"; exit 1; }
params=$(head -1 "$D/train.log" 2> /dev/null || echo "params ?")
RAW=$(bytes_of "$D/run/step-$NEXT")

# one CASE: "wall_s cpu_s fetched_bytes objects local_bases s3rver_cpu_s"
# of one restore on a fresh instance in the namespace.
one() {
  local id=$cid src=$D/run/step-$NEXT ex=() t0 t1 n0 n1 u s f
  rm -rf "$STATE" "$T/out" "$T/kf"
  case $1 in
    keyframe) id=$kid src=$D/run/step-$KF ;;
    hot)
      inns "$CKPTSYNC" --config "$CONF" restore --run bench --snapshot "$kid" --to "$T/kf" -q
      ex=(--seed "$T/kf") ;;
  esac
  n0=$(s3_cpu_ticks a b c)
  t0=$(date +%s.%N)
  inns /usr/bin/time -f "%U %S" -o "$T/time" "$CKPTSYNC" --config "$CONF" restore --run bench \
    --snapshot "$id" --to "$T/out" "${ex[@]}" --json > "$T/r.json" 2> "$T/r.err" ||
    { cat "$T/r.err" >&2; exit 1; }
  t1=$(date +%s.%N)
  n1=$(s3_cpu_ticks a b c)
  for f in model.pt master.pt exp_avg.pt exp_avg_sq.pt; do
    cmp -s "$src/$f" "$T/out/${src##*/}/$f" || { say "$1: $f differs from the source"; exit 1; }
  done
  read -r u s < <(tail -1 "$T/time")
  jq -r --arg w "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}' < /dev/null)" \
    --arg c "$(awk -v u="$u" -v s="$s" 'BEGIN {printf "%.3f", u + s}' < /dev/null)" \
    --arg n "$(awk -v t=$((n1 - n0)) -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", t / hz}' < /dev/null)" \
    '"\($w) \($c) \(.fetched_bytes) \([.regions[]] | add) \(.local_bases) \($n)"' "$T/r.json"
}
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
span() { sort -n | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%.2f-%.2f", lo, hi}'; }
col() { # CASE N [span]: the median (or the range) of field N of that case's lines
  awk -v c="$1" -v n="$2" '$1 == c {print $(n + 1)}' "$T/runs.$rate" | "${3:-median}"
}

# table RATE: one markdown table of that rate's runs
table() {
  local c name w kw cpu kc fb kfb
  kw=$(col keyframe 1)
  kc=$(col keyframe 2)
  kfb=$(col keyframe 3)
  echo "| restore (link $1 each way) | wall s | vs keyframe | wall s min-max | CPU s | CPU vs keyframe | fetched MiB | fetched vs keyframe | fetched / link rate s | objects fetched | bases from the seed | s3rver regions' CPU s |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for c in keyframe delta hot; do
    case $c in
      keyframe) name="keyframe (step $KF, plain)" ;;
      delta) name="delta (step $NEXT), bases from the regions (cold)" ;;
      hot) name="delta, --seed the keyframe's restored files (hot resume)" ;;
    esac
    w=$(col "$c" 1)
    cpu=$(col "$c" 2)
    fb=$(col "$c" 3)
    awk -v c="$name" -v w="$w" -v kw="$kw" -v cpu="$cpu" -v kc="$kc" -v f="$fb" -v kf="$kfb" \
      -v bps="$LINK_BPS" -v r="$(col "$c" 1 span)" -v o="$(col "$c" 4)" -v l="$(col "$c" 5)" \
      -v n="$(col "$c" 6)" \
      'BEGIN {printf "| %s | %.2f | %.2fx | %s | %.2f | %.2fx | %.1f | %.2fx | %.2f | %d | %d | %.2f |\n",
        c, w, w / kw, r, cpu, cpu / kc, f / 1048576, f / kf, f / bps, o, l, n}' < /dev/null
  done
}

avail=$(df -m --output=avail "$T" | tail -1 | tr -d ' ')
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
tables=""
for rate in $RATES; do
  link_shape "$rate" "$DELAY_MS"
  say "link $rate ($LINK_BPS B/s), delay $LINK_DELAY ms: $REPS x keyframe, delta, hot"
  : > "$T/runs.$rate"
  for _ in $(seq 1 "$REPS"); do
    for c in keyframe delta hot; do # interleaved: every case sees the same load
      r=$(one "$c")
      echo "$c $r" >> "$T/runs.$rate"
    done
  done
  tables+="$(table "$rate")"$'\n\n'
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
shaper="netem, $LINK_DELAY ms one way"
[ "$LINK_DELAY" != 0 ] || shaper="tbf, no delay: no sch_netem in this kernel"

{
  echo "## Delta restore behind a link (tests/bench/delta-restore-link.sh, issue 27 deliverable 6)"
  echo
  echo "Run $(date -u +%Y-%m-%dT%H:%MZ), ckptsync $(git -C "$top" rev-parse --short HEAD 2> /dev/null || echo '?'), build $B." \
    "Command: \`${CMD:-DATA=$D RATES=\"$RATES\" tests/bench/delta-restore-link.sh${*:+ $*}}\` (REPS=$REPS, DELAY_MS=$DELAY_MS)."
  echo "Data: tests/bench/delta_train.py ($params), steps $KF and $NEXT as delta-store.sh lays them out" \
    "(model.pt bf16, master.pt fp32, exp_avg.pt, exp_avg_sq.pt: $((RAW >> 20)) MiB), stored by" \
    "\`ckptsync snapshot\` on the host side with keyframe_every = 8: step $NEXT as deltas against" \
    "step $KF (\"$(sed 's/^.*keyframe: //' "$T/keyframe.line")\")." \
    "Three s3rver regions on the host end of a veth link capped with tc each way ($shaper);" \
    "every restore by a fresh instance (empty state) in the network namespace, every chunk and file digest checked," \
    "compared with the source; medians of $REPS, the cases interleaved.  CPU s: the restore's user +" \
    "sys (GNU time); fetched: restore --json fetched_bytes; fetched / link rate: the least time those" \
    "bytes take on the link.  Goal: the delta's restore <= 1.2x the keyframe's."
  echo
  printf '%s' "$tables"
  echo '```'
  machine
  echo '```'
} > "$T/report.md"
cat "$T/report.md"
if [ "${WRITE_RESULTS:-0}" = 1 ]; then results_section "Delta restore behind a link" "$T/report.md"; fi
exit 0
