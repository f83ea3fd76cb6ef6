#!/usr/bin/env bash
# delta-ratio.sh — issue 27's figures: bytes stored for a pre-training
# successor checkpoint / its raw bytes, per part (bf16 weights, fp32
# master, AdamW moments) and in total, with today's codec, with bf16
# derived from the master, with XOR (or SUB) against the parent + byte
# planes, and both; against parents 10, 20, 40 and 80 steps back (for keyframe_every);
# and the single-core speed of the transforms and of encode/decode.
# A benchmark, not a test: it prints one table and never fails on time.
#
#   tests/bench/delta-ratio.sh [FINAL_STEP]        default 160
#
# Environment:
#   BENCH_DIR       scratch directory parent (default /var/tmp); 6 x the
#                   checkpoint (about 100 MB each by default) must be free
#   D LAYERS HEADS VOCAB CTX BATCH LR WARMUP SEED THREADS
#                   the model and run (tests/bench/delta_train.py)
#   DATA=DIR        use the checkpoints delta_train.py wrote into DIR
#                   before (same FINAL_STEP and model), instead of training
#   WRITE_RESULTS=1 also puts the table in tests/bench/RESULTS.md, as the
#                   section "## Delta codec" (replaced if there)
#
# Data: tests/bench/delta_train.py trains a GPT-2-style model with Debian's
# python3-torch and saves the steps FINAL-80, -40, -20, -10 and FINAL, each
# as bf16 weights + fp32 master + AdamW exp_avg/exp_avg_sq (raw, with an
# index of the tensors).  bench-delta-ratio (tests/bench/delta-ratio.c)
# cuts each part with the daemon's FastCDC and stores every chunk of the
# FINAL checkpoint by each method.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/bench/benchlib.sh"
FINAL=${1:-160}
build=$top/build-rel
S=$(mktemp -d "${BENCH_DIR:-/var/tmp}/cks-delta.XXXXXX")
trap 'rm -rf "$S"' EXIT
say() { echo "delta-ratio.sh: $*" >&2; }

if ! /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  echo "delta-ratio.sh: python3-torch (Debian) is needed for the data" >&2
  exit 1
fi
[ "$FINAL" -gt 80 ] || { echo "delta-ratio.sh: FINAL_STEP must be above 80" >&2; exit 2; }

say "building bench-delta-ratio (Release) in $build"
cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=Release > "$S/cmake.log" 2>&1 ||
  { tail -20 "$S/cmake.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target bench-delta-ratio > "$S/build.log" 2>&1 ||
  { tail -20 "$S/build.log"; exit 1; }
bench=$build/tests/bench-delta-ratio

if [ -n "${DATA:-}" ]; then
  say "using the checkpoints in $DATA"
  for s in $((FINAL - 80)) $((FINAL - 40)) $((FINAL - 20)) $((FINAL - 10)) "$FINAL"; do
    ln -s "$DATA/ckpt-$s.bin" "$S/ckpt-$s.bin"
  done
  cp "$DATA/index.txt" "$S/index.txt"
  train_s="earlier, DATA=$DATA"
  params=$(head -1 "$DATA/train.log" 2> /dev/null || echo "params ?")
else
  say "training to step $FINAL (saving $((FINAL - 80)), $((FINAL - 40)), $((FINAL - 20)), $((FINAL - 10)), $FINAL)"
  t0=$(date +%s)
  /usr/bin/python3 "$top/tests/bench/delta_train.py" "$S" \
    $((FINAL - 80)) $((FINAL - 40)) $((FINAL - 20)) $((FINAL - 10)) "$FINAL" > "$S/train.log" 2>&1 ||
    { tail -20 "$S/train.log"; exit 1; }
  train_s="$(($(date +%s) - t0)) s"
  params=$(head -1 "$S/train.log")
fi

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
rows=$S/rows.md speed=$S/speed.txt
: > "$speed"
"$bench" -H "$S/index.txt" "$S/ckpt-$FINAL.bin" "$S/ckpt-$((FINAL - 10)).bin" "10 steps" \
  > "$rows" 2>> "$speed"
"$bench" -x "$S/index.txt" "$S/ckpt-$FINAL.bin" "$S/ckpt-$((FINAL - 10)).bin" "10 steps, exact" \
  >> "$rows" 2>> "$speed"
for d in 20 40 80; do
  "$bench" "$S/index.txt" "$S/ckpt-$FINAL.bin" "$S/ckpt-$((FINAL - d)).bin" "$d steps" \
    >> "$rows" 2>> "$speed"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

report=$S/report.md
{
  echo "## Delta codec (tests/bench/delta-ratio.sh $FINAL, issue 27)"
  echo
  echo "Run $(date -u +%Y-%m-%dT%H:%MZ), ckptsync $(git -C "$top" rev-parse --short HEAD 2> /dev/null || echo '?')."
  echo "- cpu: $(nproc) x $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo); one core used; load average $LOAD_BEFORE before, $LOAD_AFTER after (times are the thread's CPU time)"
  echo "- data: tests/bench/delta_train.py with Debian's python3-torch ($params; D=${D:-256} LAYERS=${LAYERS:-4} VOCAB=${VOCAB:-16384} CTX=${CTX:-64} BATCH=${BATCH:-4}, AdamW lr ${LR:-6e-4} after ${WARMUP:-50} warmup steps; trained: ${train_s}); the successor is step $FINAL, the parent the step the first column says"
  echo "- each part cut by FastCDC (min 512 KiB, avg 2 MiB, max 8 MiB) as a file of its own; stored/raw per chunk-min of the method and today's object; every recipe decoded and compared"
  echo "- today: chunkobj_encode (planes at the part's width, else zstd -3); derived bf16: BF16 segments on the same checkpoint's master chunks; XOR vs parent: XOR segments on the parent's chunks (same offsets), the residual coded as today, per segment the smaller of XOR and literal; XOR or SUB: the same, SUB (zigzag difference of the bit patterns) also a candidate; the choice by tcodec_pick's estimate on a sample ('exact': by coding each candidate); combined: derived bf16 + XOR or SUB for master and Adam"
  echo
  cat "$rows"
  echo
  echo '```'
  cat "$speed"
  echo '```'
} > "$report"
cat "$report"

if [ "${WRITE_RESULTS:-0}" = 1 ]; then
  results_section "Delta codec" "$report"
  say "wrote the Delta codec section of tests/bench/RESULTS.md"
fi
