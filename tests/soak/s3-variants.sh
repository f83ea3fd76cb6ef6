#!/usr/bin/env bash
# s3-variants.sh — the S3 runs of integration tests that CI runs on dir
# regions only (not in CI: they test nothing the dir run does not, and
# each costs ~1 minute of CI's 40 on 2 cores).
#
#   tests/soak/s3-variants.sh [BUILD_DIR] [TEST...]
#
# BUILD_DIR (default build/) holds ckptsync and ckptsyncd; TESTs are
# names under tests/integration/ without .sh (default: every script whose
# "# regions:" line says "(s3: tests/soak/s3-variants.sh)").  Each runs with
# CKS_REGIONS=s3 (three s3rver regions, tests/s3/setup.sh must have run);
# prints PASS/FAIL per test and exits 1 when any failed.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$top/build}
shift || true
[ -x "$build/ckptsync" ] && [ -x "$build/ckptsyncd" ] || { echo "build first: deploy/build.sh" >&2; exit 1; }
build=$(cd "$build" && pwd)
tests=("$@")
if [ ${#tests[@]} = 0 ]; then
  for f in "$top"/tests/integration/test-*.sh; do
    grep -q '^# regions:.*(s3: tests/soak/s3-variants.sh)' "$f" && tests+=("$(basename "$f" .sh)")
  done
fi
failed=0
for t in "${tests[@]}"; do
  log=$(mktemp "/tmp/cks-s3v.$t.XXXXXX")
  if CKPTSYNC=$build/ckptsync CKPTSYNCD=$build/ckptsyncd CKS_BUILD_DIR=$build CKS_SOURCE_DIR=$top \
     CKS_REGIONS=s3 bash "$top/tests/integration/$t.sh" > "$log" 2>&1; then
    echo "PASS $t"; rm -f "$log"
  else
    echo "FAIL $t (log: $log)"; failed=1
  fi
done
exit $failed
