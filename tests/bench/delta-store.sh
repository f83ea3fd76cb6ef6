#!/usr/bin/env bash
# delta-store.sh — issue 27's writer measured end to end on a pre-training
# successor: the bytes the real `ckptsync snapshot` stores for the
# checkpoint of step KF+10 after the one of step KF was stored, with
#   keyframe_every = 1, derive_bf16 = off   (the codec alone)
#   keyframe_every = 1, derive_bf16 = on    (derived bf16)
#   keyframe_every = 8, derive_bf16 = on    (derived bf16 + XOR against
#                                            the keyframe, step KF)
# each in a fresh one-region dir repository, with each part's ratio and
# the snapshot's CPU throughput.  A benchmark, not a test: it prints one
# table and never fails on a figure.
#
#   tests/bench/delta-store.sh [KF]        default 60
#
# Environment:
#   CKPTSYNC        the binary (default build-release/ckptsync, built
#                   RelWithDebInfo without tests when missing)
#   BENCH_DIR       scratch directory parent (default /var/tmp)
#   D LAYERS HEADS VOCAB CTX BATCH LR WARMUP SEED THREADS
#                   the model and run (tests/bench/delta_train.py)
#   WRITE_RESULTS=1 also puts the table in tests/bench/RESULTS.md, as the
#                   section "## Deltas against the keyframe in ckptsync snapshot"
#   DATA            keep the trained checkpoints there (reused when present)
#   REPS            snapshots of step KF+10 per row (default 1; each into a
#                   fresh repository after KF's); the row gives the median
#                   CPU s and the min and max
#   BASELINE        a second binary (e.g. a build of main): each row is run
#                   with it too, in the same run, interleaved, its rows
#                   marked "base"
#
# Data: tests/bench/delta_train.py trains its GPT-2-style model with
# Debian's python3-torch to KF + 10; the raw checkpoints of KF and KF + 10
# are saved again with torch.save, one file per part, as step-N/model.pt
# (bf16 weights), master.pt (fp32 master), exp_avg.pt and exp_avg_sq.pt
# (AdamW).  A part's stored bytes: the objects the snapshot of KF + 10
# added to the region (chunks/ and recipes/ files that were not there
# after KF's), each counted once, for the first file of the manifest
# that names it.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
KF=${1:-60}
NEXT=$((KF + 10))
S=$(mktemp -d "${BENCH_DIR:-/var/tmp}/cks-dstore.XXXXXX")
trap 'rm -rf "$S"' EXIT
REPS=${REPS:-1}
D_DIR=${DATA:-$S}
say() { echo "delta-store.sh: $*" >&2; }
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

if [ ! -f "$D_DIR/run/step-$NEXT/exp_avg_sq.pt" ]; then
say "training to step $NEXT"
rm -rf "$D_DIR/raw" "$D_DIR/run"
mkdir -p "$D_DIR"
/usr/bin/python3 "$top/tests/bench/delta_train.py" "$D_DIR/raw" "$KF" "$NEXT" > "$D_DIR/train.log" 2>&1 ||
  { tail -20 "$D_DIR/train.log"; exit 1; }
/usr/bin/python3 - "$D_DIR/raw" "$D_DIR/run" "$KF" "$NEXT" <<'PY'
import os, sys, torch
raw, out = sys.argv[1], sys.argv[2]
for step in sys.argv[3:]:
    data = open(os.path.join(raw, "ckpt-%s.bin" % step), "rb").read()
    parts = {"model": {}, "master": {}, "exp_avg": {}, "exp_avg_sq": {}}
    for line in open(os.path.join(raw, "index.txt")):
        part, name, off, n = line.split()
        off, n = int(off), int(n)
        if part == "bf16":
            part = "model"
            t = torch.frombuffer(bytearray(data[off:off + n]), dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(bytearray(data[off:off + n]), dtype=torch.float32)
        if part == "adam":
            part = "exp_avg_sq" if name.endswith(".exp_avg_sq") else "exp_avg"
            name = name.rsplit(".", 1)[0]
        parts[part][name] = t
    d = os.path.join(out, "step-%s" % step)
    os.makedirs(d)
    for p, sd in parts.items():
        torch.save(sd, os.path.join(d, p + ".pt"))
PY
fi
params=$(head -1 "$D_DIR/train.log")
mkdir -p "$S/run"
cp -r "$D_DIR/run/step-$KF" "$D_DIR/run/step-$NEXT" "$S/run/"
raw_bytes=$(cat "$S/run/step-$NEXT/"*.pt | wc -c)

objects() { (cd "$1" && find chunks recipes -type f -printf '%p %s\n' 2> /dev/null | sort) || true; }
snap1() { # NAME BIN: a fresh repository, step KF, then NEXT timed (appended to NAME.cpu)
  local n=$1
  rm -rf "$S/$n"
  mkdir -p "$S/$n/reg"
  sed "s|@D@|$S/$n|" "$S/$n.conf.in" > "$S/$n.conf"
  "$2" --config "$S/$n.conf" snapshot "$S/run/step-$KF" --run bench --step "$KF" \
    > /dev/null 2> "$S/$n.kf.err" || { cat "$S/$n.kf.err" >&2; exit 1; }
  objects "$S/$n/reg" > "$S/$n.before"
  /usr/bin/python3 - "$2" "$S/$n.conf" "$S/run/step-$NEXT" "$NEXT" "$S/$n.json" \
    "$S/$n.err" "$S/$n.cpu" <<'PY'
import resource, subprocess, sys, time
b, conf, path, step, js, err, cpu = sys.argv[1:]
t0 = time.time()
with open(js, "w") as o, open(err, "w") as e:
    subprocess.run([b, "--config", conf, "snapshot", path, "--run", "bench", "--step", step,
                    "--json"], stdout=o, stderr=e, check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(cpu, "a").write("%.3f %.3f\n" % (r.ru_utime + r.ru_stime, time.time() - t0))
PY
}
conf_in() { # NAME KEYFRAME_EVERY DERIVE
  cat > "$S/$1.conf.in" <<EOF
[daemon]
state = @D@/state
quorum = 1
[compress]
derive_bf16 = $3
keyframe_every = $2
[region.x]
kind = dir
path = @D@/reg
EOF
}
runs() { # KEYFRAME_EVERY DERIVE NAME...: REPS rounds, the builds interleaved
  local r n
  for n in "${@:3}"; do conf_in "$n" "$1" "$2"; rm -f "$S/$n.cpu"; done
  for r in $(seq "$REPS"); do
    for n in "${@:3}"; do
      case $n in base-*) snap1 "$n" "$BASELINE" ;; *) snap1 "$n" "$CKPTSYNC" ;; esac
    done
  done
  for n in "${@:3}"; do row "$n" "$1" "$2"; done
}
row() { # NAME KEYFRAME_EVERY DERIVE -> $S/NAME.row (the last round's bytes)
  local n=$1
  objects "$S/$n/reg" > "$S/$n.after"
  /usr/bin/python3 - "$S/$n" "$S/$n.json" "$S/$n.before" "$S/$n.after" "$S/$n.cpu" \
    "$raw_bytes" "$2" "$3" "$S/run/step-$NEXT" > "$S/$n.row" <<'PY'
import json, os, sys
base, js, before, after, cpu, raw, kfe, derive, src = sys.argv[1:]
raw = int(raw)
old = {l.split()[0] for l in open(before)}
new = {}
for l in open(after):
    p, s = l.split()
    if p not in old:
        new[os.path.basename(p)] = int(s)
snap = json.load(open(js))
man = open(os.path.join(base, "reg", "snapshots", "bench", snap["id"])).read().splitlines()
sig = {}
for l in man:
    if l.startswith("r "):
        f = l.split()
        sig[f[1]] = f[3]
part, stored, seen = None, {}, set()
for l in man:
    f = l.split()
    if l.startswith("f "):
        part = os.path.basename(f[-1])[:-3]
        stored.setdefault(part, 0)
    elif l.startswith("c ") and part:
        key = f[1] + "." + sig[f[1]] if len(f) > 3 and f[3] == "r" else f[1]
        if key not in seen:
            seen.add(key)
            stored[part] += new.get(key, 0)
size = {p: os.path.getsize(os.path.join(src, p + ".pt")) for p in stored}
runs = sorted(tuple(map(float, l.split())) for l in open(cpu))
c, wall = runs[len(runs) // 2]
spread = " (%.2f-%.2f)" % (runs[0][0], runs[-1][0]) if len(runs) > 1 else ""
cells = " | ".join("%.3f" % (stored[p] / size[p]) for p in ("model", "master", "exp_avg", "exp_avg_sq"))
who = "base | " if os.path.basename(base).startswith("base-") else ("this | " if os.environ.get("BASELINE") else "")
print("| %s%s | %s | %.1f | %.1f | %.3f | %s | %.2f%s | %.2f | %.0f |" % (
    who, kfe, derive, raw / 1e6, snap["stored_bytes"] / 1e6, snap["stored_bytes"] / raw, cells,
    c, spread, wall, raw / 1e6 / c))
PY
}
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
if [ -n "${BASELINE:-}" ]; then
  export BASELINE
  runs 1 off base-codec codec
  runs 1 on base-derive derive
  runs 8 on base-xor xor
else
  runs 1 off codec
  runs 1 on derive
  runs 8 on xor
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
kfline=$(grep -o 'keyframe [0-9A-Za-z.-]*: [0-9].*' "$S/xor.err" || echo "no keyframe")
dline=$(grep -o 'derived bf16: .*' "$S/xor.err" || echo "none")

report=$S/report.md
{
  echo "## Deltas against the keyframe in ckptsync snapshot (tests/bench/delta-store.sh $KF, issue 27)"
  echo
  echo "Run $(date -u +%Y-%m-%dT%H:%MZ), ckptsync $(git -C "$top" rev-parse --short HEAD 2> /dev/null || echo '?')."
  echo "- cpu: $(nproc) x $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo); load average $LOAD_BEFORE before, $LOAD_AFTER after"
  echo "- data: tests/bench/delta_train.py with Debian's python3-torch ($params; D=${D:-256} LAYERS=${LAYERS:-4} VOCAB=${VOCAB:-16384}), steps $KF and $NEXT, saved with torch.save one file per part: model.pt (bf16 weights), master.pt, exp_avg.pt, exp_avg_sq.pt"
  echo "- the real \`ckptsync snapshot\` ($(basename "$(dirname "$CKPTSYNC")")) of step $KF, then of step $NEXT (the row), into a fresh one-region dir repository per row, default chunker and codec; stored = step $NEXT's stored_bytes; a part's ratio = the objects step $NEXT added for that file / its raw bytes; CPU s = the snapshot process's user + system time; MB/s per core = raw MB / CPU s"
  echo
  if [ -n "${BASELINE:-}" ]; then
    echo "- builds: \"base\" $BASELINE, \"this\" $CKPTSYNC; $REPS round(s), the builds interleaved; CPU s: the median (min-max)"
    echo
    echo "| build | keyframe_every | derive_bf16 | raw MB | stored MB | stored / raw | bf16 | master | exp_avg | exp_avg_sq | CPU s | wall s | MB/s per core |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    cat "$S/base-codec.row" "$S/codec.row" "$S/base-derive.row" "$S/derive.row" "$S/base-xor.row" "$S/xor.row"
  else
    [ "$REPS" = 1 ] || echo "- $REPS round(s); CPU s: the median (min-max)"
    echo
    echo "| keyframe_every | derive_bf16 | raw MB | stored MB | stored / raw | bf16 | master | exp_avg | exp_avg_sq | CPU s | wall s | MB/s per core |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    cat "$S/codec.row" "$S/derive.row" "$S/xor.row"
  fi
  echo
  echo "keyframe_every = 8: $dline; $kfline."
} > "$report"
cat "$report"

if [ "${WRITE_RESULTS:-0}" = 1 ]; then
  . "$top/tests/bench/benchlib.sh"
  results_section "Deltas against the keyframe in ckptsync snapshot" "$report"
  say "wrote its section of tests/bench/RESULTS.md"
fi
