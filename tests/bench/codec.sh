#!/usr/bin/env bash
# codec.sh — the tensor codec (syncd/engine/tcodec.c) against zstd and the
# byte-grouped zstd baseline, per core, in one run: stored/raw, compress
# and decompress MB/s, on the data a checkpoint is made of.
# A benchmark, not a test: it prints one table and never fails on time.
#
#   tests/bench/codec.sh [SIZE_MIB]        default 448
#
# Environment:
#   SIZE_MIB        checkpoint size when no argument is given: 1/7 of it
#                   is bf16 weights, 2/7 fp32 master weights, 4/7 fp32
#                   Adam moments (make_ckpt.py's split)
#   BENCH_DIR       scratch directory parent (default /var/tmp); about
#                   2 x SIZE must be free there
#   REPEAT          passes per codec, the best counts (default 3)
#   WRITE_RESULTS=1 also puts the table in tests/bench/RESULTS.md, as the
#                   section "## Tensor codec" (replaced if there; the rest
#                   of the file is kept)
#
# Data: tests/bench/make_ckpt.py writes a checkpoint with Debian's
# python3-torch; the tensors are then written out as three raw files (bf16
# weights, fp32 master weights, fp32 exp_avg + exp_avg_sq).  Text (a
# trainer's log and JSON), token ids as int32 and int64, zeros and random
# bytes, 32 MiB each, show what tcodec_pick leaves to zstd.  Published weights: the float32 ONNX models
# of the npm package @ricky0123/vad-web (Silero VAD) and the float16 TFLite
# model of @mediapipe/pose (skipped, with the reason, when npm cannot
# fetch them).  codec-bench cuts every file with the daemon's FastCDC
# (min 512 KiB, avg 2 MiB, max 8 MiB) and times each codec on one core.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/bench/benchlib.sh"
SIZE_MIB=${1:-${SIZE_MIB:-448}}
REPEAT=${REPEAT:-3}
build=$top/build-rel
S=$(mktemp -d "${BENCH_DIR:-/var/tmp}/cks-codec.XXXXXX")
trap 'rm -rf "$S"' EXIT
say() { echo "codec.sh: $*" >&2; }

if ! /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  say "installing python3-torch"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch > "$S/apt-torch.log" 2>&1 ||
    { echo "codec.sh: python3-torch is needed for the data" >&2; exit 1; }
fi

say "building codec-bench (Release) in $build"
cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=Release > "$S/cmake.log" 2>&1 ||
  { tail -20 "$S/cmake.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target codec-bench > "$S/build.log" 2>&1 ||
  { tail -20 "$S/build.log"; exit 1; }
bench=$build/tests/codec-bench

say "writing a ${SIZE_MIB} MiB checkpoint"
/usr/bin/python3 "$top/tests/bench/make_ckpt.py" "$S/ckpt" "$SIZE_MIB" > "$S/make_ckpt.log" 2>&1
/usr/bin/python3 - "$S/ckpt" "$S" <<'PY'
import sys, torch
src, out = sys.argv[1], sys.argv[2]
model = torch.load(src + "/pytorch_model.bin")
opt = torch.load(src + "/optimizer.pt")
def put(f, t):
    t = t.contiguous()
    f.write((t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes())
with open(out + "/bf16-weights.raw", "wb") as f:
    for t in model.values():
        put(f, t)
with open(out + "/fp32-weights.raw", "wb") as f:
    for t in opt["master"].values():
        put(f, t)
with open(out + "/fp32-adam.raw", "wb") as f:
    for k in opt["exp_avg"]:
        put(f, opt["exp_avg"][k])
        put(f, opt["exp_avg_sq"][k])
PY

/usr/bin/python3 - "$S" <<'PY'
import json, os, random, sys
out = sys.argv[1]
n = 32 << 20
rnd = random.Random(11)
with open(out + "/text.raw", "w") as f:
    size = 0
    step = 0
    while size < n:
        step += 1
        if step % 50 == 0:
            s = json.dumps({"global_step": step, "epoch": step / 1000.0,
                            "log_history": [{"loss": rnd.random(), "learning_rate": 1e-4 * rnd.random(),
                                             "grad_norm": rnd.gauss(1, 0.2)}]}) + "\n"
        else:
            s = "step %d loss %.4f lr %.3e grad_norm %.3f tokens/s %d layer.%d.attn.%s\n" % (
                step, rnd.random() * 3, 1e-4 * rnd.random(), rnd.gauss(1, 0.2),
                rnd.randint(1000, 90000), rnd.randint(0, 39), rnd.choice(["q_proj", "k_proj", "v_proj", "o_proj"]))
        f.write(s)
        size += len(s)
    f.truncate(n)
import numpy
g = numpy.random.default_rng(5)
g.integers(0, 50257, n // 4, dtype=numpy.int32).tofile(out + "/tokens32.raw")
g.integers(0, 50257, n // 8, dtype=numpy.int64).tofile(out + "/tokens64.raw")
with open(out + "/zeros.raw", "wb") as f:
    f.write(bytes(n))
with open(out + "/random.raw", "wb") as f:
    f.write(os.urandom(n))
PY

# Published weights from npm packages (real, not generated).
npm_dir=$S/npm
mkdir -p "$npm_dir"
vad="" pose="" npm_skip=""
if command -v npm > /dev/null; then
  if (cd "$npm_dir" && timeout 300 npm pack --silent @ricky0123/vad-web@0.0.31 > pack1.log 2>&1 &&
    tar xzf ricky0123-vad-web-0.0.31.tgz package/dist); then
    vad=$(ls "$npm_dir"/package/dist/*.onnx)
  else
    npm_skip="npm pack @ricky0123/vad-web failed: $(tail -1 "$npm_dir/pack1.log")"
  fi
  if (cd "$npm_dir" && timeout 300 npm pack --silent @mediapipe/pose@0.5.1675469404 > pack2.log 2>&1 &&
    tar xzf mediapipe-pose-0.5.1675469404.tgz package/pose_landmark_heavy.tflite); then
    pose=$npm_dir/package/pose_landmark_heavy.tflite
  else
    npm_skip="npm pack @mediapipe/pose failed: $(tail -1 "$npm_dir/pack2.log")"
  fi
else
  npm_skip="npm not installed"
fi

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
say "running codec-bench (REPEAT=$REPEAT)"
rows=$S/rows.md
"$bench" -H -r "$REPEAT" -w 2 -l "bf16 weights" "$S/bf16-weights.raw" > "$rows"
"$bench" -r "$REPEAT" -w 4 -l "fp32 master weights" "$S/fp32-weights.raw" >> "$rows"
"$bench" -r "$REPEAT" -w 4 -l "fp32 Adam exp_avg + exp_avg_sq" "$S/fp32-adam.raw" >> "$rows"
if [ -n "$vad" ]; then
  # shellcheck disable=SC2086 # three file names
  "$bench" -r "$REPEAT" -w 4 -l "npm @ricky0123/vad-web 0.0.31: 3 Silero VAD .onnx (fp32)" \
    $vad >> "$rows"
fi
if [ -n "$pose" ]; then
  "$bench" -r "$REPEAT" -w 2 -l "npm @mediapipe/pose: pose_landmark_heavy.tflite (fp16)" \
    "$pose" >> "$rows"
fi
"$bench" -r "$REPEAT" -w 4 -l "text (trainer log, JSON)" "$S/text.raw" >> "$rows"
"$bench" -r "$REPEAT" -w 4 -l "int32 token ids (< 50257)" "$S/tokens32.raw" >> "$rows"
"$bench" -r "$REPEAT" -w 4 -l "int64 token ids (< 50257)" "$S/tokens64.raw" >> "$rows"
"$bench" -r "$REPEAT" -w 4 -l "zeros" "$S/zeros.raw" >> "$rows"
"$bench" -r "$REPEAT" -w 4 -l "random bytes" "$S/random.raw" >> "$rows"
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

report=$S/report.md
{
  echo "## Tensor codec (tests/bench/codec.sh $SIZE_MIB)"
  echo
  echo "Run $(date -u +%Y-%m-%dT%H:%MZ), ckptsync $(git -C "$top" rev-parse --short HEAD 2> /dev/null || echo '?')."
  echo "- cpu: $(nproc) x $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo); one core used"
  echo "- load average (1/5/15 min): $LOAD_BEFORE before, $LOAD_AFTER after (other work on the machine slows every codec; times are the thread's CPU time, best of $REPEAT passes)"
  echo "- data: tests/bench/make_ckpt.py with python3-torch, tensors written out raw by kind; each file cut by FastCDC (min 512 KiB, avg 2 MiB, max 8 MiB); MB/s are of raw bytes"
  echo "- byte-grouped zstd -3: planes of the width in the data (2 for bf16/fp16, else 4), one zstd -3 frame each; tcodec: tcodec_pick per chunk, tcodec where it says a width, zstd -3 where it says 0 (the daemon without a hint); tcodec at the width: every chunk coded as planes of that width (as with a width from the file's metadata)"
  if [ -n "$npm_skip" ]; then echo "- published weights: skipped ($npm_skip)"; fi
  echo
  cat "$rows"
} > "$report"
cat "$report"

if [ "${WRITE_RESULTS:-0}" = 1 ]; then
  results_section "Tensor codec" "$report"
  say "wrote the Tensor codec section of tests/bench/RESULTS.md"
fi
