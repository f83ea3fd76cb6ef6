#!/usr/bin/env bash
# s3-fanout.sh — do the three regions' uploads overlap?
#
#   tests/bench/s3-fanout.sh [MIB] [BUILD_DIR]       default 2048 MiB, build/
#   BANDWIDTH=30M tests/bench/s3-fanout.sh ...       cap each region (bytes/s)
#
# Starts three S3 test servers (s3rver, tests/s3) and ckptsyncd, and ships
# the same checkpoint (MIB of incompressible data) four times, each into a
# fresh prefix: to region a alone, b alone, c alone, and to all three.  It
# prints the seconds from `commit` to `--wait replicated` for each, and the
# ratio of the three-region time to the slowest single region (the goal:
# about 1.2x or less).  Not a test: it never fails on time.  Note that the
# three servers, the daemon and this script share the machine's cores.
set -euo pipefail
mib=${1:-2048}
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$top/build}
export CKPTSYNC=$build/ckptsync CKPTSYNCD=$build/ckptsyncd CKS_SOURCE_DIR=$top
[ -x "$CKPTSYNC" ] && [ -x "$CKPTSYNCD" ] || { echo "build first: deploy/build.sh" >&2; exit 1; }
"$top/tests/s3/setup.sh" > /dev/null
. "$top/tests/integration/lib.sh"
. "$top/tests/integration/s3lib.sh"
for r in a b c; do start_s3 "$r"; done
make_file "$T/watch/run/checkpoint-1/model.safetensors" "$mib"

ship() {  # LABEL REGIONS...: fresh prefix and state, then time one commit
  local label=$1; shift
  S3_PREFIX="bench-$label" write_config_s3 512K 2M 8M
  # A per-region bandwidth cap models uploads limited by each region's
  # network path rather than by this machine's CPU (which the three test
  # servers and the daemon share).
  [ -z "${BANDWIDTH:-}" ] || sed -i "/^kind = s3/a bandwidth = $BANDWIDTH" "$CONF"
  python3 - "$CONF" "$@" <<'PY'
import sys
conf, keep = sys.argv[1], set(sys.argv[2:])
out, skip = [], False
for line in open(conf).read().splitlines():
    if line.startswith("[region."):
        skip = line.strip("[]").split(".", 1)[1] not in keep
    elif line.startswith("["):
        skip = False
    if line.startswith("quorum"):
        line = "quorum = 1"
    if not skip:
        out.append(line)
open(conf, "w").write("\n".join(out) + "\n")
PY
  rm -rf "$STATE" "$T/watch/.ckptsync-pins"
  sed -i "/^\[daemon\]/a settle = 3600" "$CONF"
  start_daemon
  local t0 t1
  t0=$(date +%s.%N)
  cks commit "$T/watch/run/checkpoint-1" --wait replicated -q
  t1=$(date +%s.%N)
  stop_daemon
  python3 -c "print('%.2f' % ($t1 - $t0))"
}

echo "data: $mib MiB, incompressible; per-region bandwidth cap: ${BANDWIDTH:-none}; $(nproc) cores"
printf '%-10s %9s %9s\n' regions seconds MB/s
declare -A secs
for r in a b c; do
  secs[$r]=$(ship "$r" "$r")
  printf '%-10s %9s %9.0f\n' "$r" "${secs[$r]}" "$(python3 -c "print($mib * 1.048576 / ${secs[$r]})")"
done
secs[abc]=$(ship abc a b c)
printf '%-10s %9s %9.0f   (x3 bytes: %.0f MB/s)\n' "a+b+c" "${secs[abc]}" \
  "$(python3 -c "print($mib * 1.048576 / ${secs[abc]})")" "$(python3 -c "print(3 * $mib * 1.048576 / ${secs[abc]})")"
python3 -c "
s = {'a': ${secs[a]}, 'b': ${secs[b]}, 'c': ${secs[c]}}
slow = max(s.values())
print('three regions / slowest single region: %.2fx  (goal: <= ~1.2x)' % (${secs[abc]} / slow))"
