#!/usr/bin/env bash
# derive-bf16.sh — issue 27's writer measured end to end: the bytes the
# real `ckptsync snapshot` stores for a mixed-precision checkpoint with
# [compress] derive_bf16 = on and = off (same run, same data, two fresh
# one-region dir repositories).  A benchmark, not a test: it prints one
# table and never fails on a figure.
#
#   tests/bench/derive-bf16.sh [STEP]        default 60
#
# Environment:
#   CKPTSYNC        the binary (default build-release/ckptsync, built
#                   RelWithDebInfo without tests when missing)
#   BENCH_DIR       scratch directory parent (default /var/tmp)
#   D LAYERS HEADS VOCAB CTX BATCH LR WARMUP SEED THREADS
#                   the model and run (tests/bench/delta_train.py)
#   WRITE_RESULTS=1 also puts the table in tests/bench/RESULTS.md, as the
#                   section "## Derived bf16 in ckptsync snapshot"
#
# Data: tests/bench/delta_train.py trains its GPT-2-style model with
# Debian's python3-torch to STEP; its raw checkpoint is saved again with
# torch.save as a trainer does: model.pt (the bf16 weights, a state dict)
# and optim.pt (the fp32 master weights and AdamW's exp_avg, exp_avg_sq).
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/bench/benchlib.sh"
STEP=${1:-60}
S=$(mktemp -d "${BENCH_DIR:-/var/tmp}/cks-derive.XXXXXX")
trap 'rm -rf "$S"' EXIT
say() { echo "derive-bf16.sh: $*" >&2; }
/usr/bin/python3 -c 'import torch' 2> /dev/null ||
  { say "python3-torch (Debian) is needed for the data"; exit 1; }

CKPTSYNC=${CKPTSYNC:-$top/build-release/ckptsync}
if [ ! -x "$CKPTSYNC" ]; then
  say "building $CKPTSYNC"
  cmake -S "$top" -B "$top/build-release" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKS_TESTS=OFF \
    > "$S/cmake.log" 2>&1 || { tail -20 "$S/cmake.log"; exit 1; }
  cmake --build "$top/build-release" -j"$(nproc)" --target ckptsync > "$S/build.log" 2>&1 ||
    { tail -20 "$S/build.log"; exit 1; }
fi

say "training to step $STEP"
/usr/bin/python3 "$top/tests/bench/delta_train.py" "$S/raw" "$STEP" > "$S/train.log" 2>&1 ||
  { tail -20 "$S/train.log"; exit 1; }
params=$(head -1 "$S/train.log")
/usr/bin/python3 - "$S/raw" "$STEP" "$S/ckpt" <<'PY'
import os, sys, torch
raw, step, out = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(os.path.join(raw, "ckpt-%s.bin" % step), "rb").read()
parts = {"bf16": {}, "master": {}, "exp_avg": {}, "exp_avg_sq": {}}
for line in open(os.path.join(raw, "index.txt")):
    part, name, off, n = line.split()
    off, n = int(off), int(n)
    if part == "bf16":
        t = torch.frombuffer(bytearray(data[off:off + n]), dtype=torch.int16).view(torch.bfloat16)
    else:
        t = torch.frombuffer(bytearray(data[off:off + n]), dtype=torch.float32)
    if part == "adam":
        part = "exp_avg_sq" if name.endswith(".exp_avg_sq") else "exp_avg"
        name = name.rsplit(".", 1)[0]
    parts[part][name] = t
assert all(torch.equal(parts["bf16"][k], v.to(torch.bfloat16)) for k, v in parts["master"].items())
os.makedirs(out)
torch.save(parts["bf16"], os.path.join(out, "model.pt"))
torch.save({"master": parts["master"], "exp_avg": parts["exp_avg"],
            "exp_avg_sq": parts["exp_avg_sq"]}, os.path.join(out, "optim.pt"))
PY
raw_bytes=$(cat "$S/ckpt/"*.pt | wc -c)
model_bytes=$(wc -c < "$S/ckpt/model.pt")

run() { # on|off -> "stored seconds derived-line"
  mkdir -p "$S/$1/reg"
  cat > "$S/$1.conf" <<EOF
[daemon]
state = $S/$1/state
quorum = 1
[compress]
derive_bf16 = $1
[region.x]
kind = dir
path = $S/$1/reg
EOF
  local t0 t1
  t0=$(date +%s.%N)
  "$CKPTSYNC" --config "$S/$1.conf" snapshot "$S/ckpt" --run bench --json > "$S/$1.json" \
    2> "$S/$1.err" || { cat "$S/$1.err" >&2; exit 1; }
  t1=$(date +%s.%N)
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stored_bytes"])' "$S/$1.json"
  echo "$t0 $t1" > "$S/$1.time"
}
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
off=$(run off)
on=$(run on)
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
line=$(grep -o 'derived bf16: .*' "$S/on.err" || echo "derived bf16: none")
secs() { awk '{printf "%.2f", $2 - $1}' "$S/$1.time"; }

report=$S/report.md
{
  echo "## Derived bf16 in ckptsync snapshot (tests/bench/derive-bf16.sh $STEP, issue 27)"
  echo
  echo "Run $(date -u +%Y-%m-%dT%H:%MZ), ckptsync $(git -C "$top" rev-parse --short HEAD 2> /dev/null || echo '?')."
  echo "- cpu: $(nproc) x $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo); load average $LOAD_BEFORE before, $LOAD_AFTER after"
  echo "- data: tests/bench/delta_train.py with Debian's python3-torch ($params; D=${D:-256} LAYERS=${LAYERS:-4} VOCAB=${VOCAB:-16384}), step $STEP, saved with torch.save as model.pt (bf16 weights, $model_bytes bytes) and optim.pt (fp32 master + AdamW exp_avg, exp_avg_sq)"
  echo "- the real \`ckptsync snapshot\` ($(basename "$(dirname "$CKPTSYNC")")) into a fresh one-region dir repository per row, default chunker (512 KiB / 2 MiB / 8 MiB) and codec; stored = the snapshot's stored_bytes (objects' bytes, once)"
  echo
  echo "| derive_bf16 | raw MB | stored MB | stored / raw | snapshot s |"
  echo "|---|---|---|---|---|"
  for m in off on; do
    s=$([ $m = on ] && echo "$on" || echo "$off")
    awk -v m=$m -v r="$raw_bytes" -v s="$s" -v t="$(secs $m)" \
      'BEGIN {printf "| %s | %.1f | %.1f | %.3f | %s |\n", m, r / 1e6, s / 1e6, s / r, t}'
  done
  echo
  echo "With derive_bf16 on: $line."
} > "$report"
cat "$report"

if [ "${WRITE_RESULTS:-0}" = 1 ]; then
  results_section "Derived bf16 in ckptsync snapshot" "$report"
  say "wrote its section of tests/bench/RESULTS.md"
fi
