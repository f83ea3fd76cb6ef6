#!/usr/bin/env bash
# confirm-cost.sh — what "presence belongs to the regions" costs a snapshot.
#
# Before a snapshot is committed in a region, every chunk it names that
# the snapshot did not itself upload or see there is confirmed with the
# region (HEADs, or one listing when cheaper).  This measures the second
# snapshot of a checkpoint of SIZE MiB whose content is unchanged but for
# one small file (the case where everything is reused, so everything is
# confirmed), on dir regions and on three s3rver test servers, and prints
# requests and seconds per snapshot next to the first (full upload).
#   tests/bench/confirm-cost.sh [BUILD_DIR] [SIZE_MIB]
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
size=${2:-512}
export CKPTSYNC=$build/ckptsync CKS_SOURCE_DIR=$top
[ -x "$CKPTSYNC" ] || { echo "build first: deploy/build.sh" >&2; exit 1; }

run_one() {
  local kind=$1
  ( export CKS_REGIONS=$kind
    . "$top/tests/integration/lib.sh"
    write_config
    mkdir -p "$T/src/ck"
    head -c $((size << 20)) /dev/urandom > "$T/src/ck/model.bin"
    t0=$(date +%s.%N); cks snapshot "$T/src/ck" --run r --step 1 --json > "$T/1.json"; t1=$(date +%s.%N)
    echo small > "$T/src/ck/extra.txt"
    t2=$(date +%s.%N); cks snapshot "$T/src/ck" --run r --step 2 --json > "$T/2.json"; t3=$(date +%s.%N)
    python3 - "$kind" "$T/1.json" "$T/2.json" "$t0" "$t1" "$t2" "$t3" <<'PY'
import json, sys
kind, a, b = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
t0, t1, t2, t3 = map(float, sys.argv[4:8])
print(f"| {kind:4} | {a['chunks']:6} | {t1 - t0:6.2f} s | {t3 - t2:6.2f} s | "
      f"{b['confirmed_chunks']:6} | {b['confirm_heads']:6} | {b['confirm_listed']:6} | {b['reuploaded_chunks']} |")
PY
  )
}

echo "checkpoint: $size MiB of random bytes, default chunker; snapshot 2 reuses every chunk"
echo "| regions | chunks | snapshot 1 (upload) | snapshot 2 (all reused) | confirmed (3 regions) | HEADs | keys listed | re-uploaded |"
echo "|---|---|---|---|---|---|---|---|"
run_one dir
run_one s3
