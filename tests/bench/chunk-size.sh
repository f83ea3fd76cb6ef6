#!/usr/bin/env bash
# chunk-size.sh — how the FastCDC average size trades dedup for object count.
#
# Data: a 1 GiB safetensors-like file of tensors (1-64 MiB each, random
# bytes, as trained float weights are to a compressor).  Version 2 changes
# a quarter of the tensors (partial fine-tuning: frozen layers keep their
# bytes).  For each average size it prints the bytes stored for version 2
# against the bytes that really changed, the number of chunk objects (one
# PUT each on S3), the manifest size, and the ingest rate.
#   tests/bench/chunk-size.sh [BUILD_DIR]
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$top/build}/ckptsync
[ -x "$bin" ] || { echo "build first: deploy/build.sh" >&2; exit 1; }
T=$(mktemp -d /tmp/cks-bench.XXXXXX); trap 'rm -rf "$T"' EXIT

python3 - "$T" <<'PY'
import os, random, sys, json
t = sys.argv[1]; random.seed(7)
sizes = []; total = 0
while total < (1 << 30):
    s = random.randint(1, 64) << 20; sizes.append(s); total += s
changed = set(random.sample(range(len(sizes)), len(sizes) // 4))
os.makedirs(t + "/v1/ckpt"); os.makedirs(t + "/v2/ckpt")
with open(t + "/v1/ckpt/model.safetensors", "wb") as a, open(t + "/v2/ckpt/model.safetensors", "wb") as b:
    a.write(b"{\"header\":0}" + b" " * 500); b.write(b"{\"header\":0}" + b" " * 500)
    nchanged = 0
    for i, s in enumerate(sizes):
        d = os.urandom(s); a.write(d)
        if i in changed: d = os.urandom(s); nchanged += s
        b.write(d)
json.dump({"changed": nchanged, "total": total}, open(t + "/meta.json", "w"))
PY
changed=$(python3 -c "import json;print(json.load(open('$T/meta.json'))['changed'])")
printf '%-12s %12s %12s %8s %10s %9s %10s\n' "avg" "changed MiB" "stored MiB" "ratio" "objects" "manifest" "MB/s"
for avg in 512K 1M 2M 4M 8M; do
  case $avg in 512K) min=128K max=2M;; 1M) min=256K max=4M;; 2M) min=512K max=8M;;
               4M) min=1M max=16M;; 8M) min=2M max=32M;; esac
  rm -rf "$T/regions" "$T/state"; mkdir -p "$T/regions/a" "$T/regions/b" "$T/regions/c"
  cat > "$T/conf" <<EOF2
[daemon]
state = $T/state
[chunker]
min = $min
avg = $avg
max = $max
[region.a]
kind = dir
path = $T/regions/a
[region.b]
kind = dir
path = $T/regions/b
[region.c]
kind = dir
path = $T/regions/c
EOF2
  "$bin" --config "$T/conf" snapshot "$T/v1/ckpt" --run b --json > "$T/s1.json"
  t0=$(date +%s.%N)
  "$bin" --config "$T/conf" snapshot "$T/v2/ckpt" --run b --json > "$T/s2.json"
  t1=$(date +%s.%N)
  python3 - "$T" "$avg" "$changed" "$t0" "$t1" <<'PY'
import json, os, sys
t, avg, changed, t0, t1 = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
s1 = json.load(open(t + "/s1.json")); s2 = json.load(open(t + "/s2.json"))
man = os.path.getsize(os.path.join(t, "regions/a/snapshots/b", s2["id"]))
print("%-12s %12.1f %12.1f %8.3f %10d %8.0fK %10.0f" % (avg, changed / 2**20, s2["new_bytes"] / 2**20,
      s2["new_bytes"] / changed, s1["chunks"], man / 1024, s2["bytes"] / (t1 - t0) / 1e6))
PY
done
