#!/usr/bin/env bash
# cores.sh — restore and ingest at 1, 2, 4, ... workers (up to the
# machine's cores, at most 16) on tmpfs, and the projection to 32 cores
# (issue 24 item 6).  A benchmark, not a test: it prints a table and never
# fails on time.  Run it on the biggest machine you have; on the 2-core
# test VM it measures 1 and 2 only.
#
#   tests/bench/cores.sh [CKPTSYNC]      default build-release/ckptsync
#   SCALE_MIB  checkpoint size (default 2048), FILES (default 16)
#   MAXW       the largest worker count (default min(nproc, 16))
#   REPS       runs per count (default 3, the median is used)
#
# The projection fits Amdahl's law, T(n) = T(1) * (s + (1 - s) / n), to
# every measured count by least squares (s: the serial fraction), and
# gives T(32) and the rate it implies.  It says nothing about a memory
# bandwidth or disk limit the measured counts did not reach: the table
# shows each count's rate per core so a flattening is visible.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
CKS=${1:-$top/build-release/ckptsync}
[ -x "$CKS" ] || { echo "cores.sh: no ckptsync at $CKS (build-release first)" >&2; exit 2; }
cores=$(nproc)
MAXW=${MAXW:-$((cores < 16 ? cores : 16))}
export SCALE_MIB=${SCALE_MIB:-2048} FILES=${FILES:-16} REPS=${REPS:-3}
ws=1
n=2
while [ "$n" -le "$MAXW" ]; do ws="$ws $n"; n=$((n * 2)); done
export WORKERS=$ws
out=$(mktemp)
trap 'rm -f "$out"' EXIT

echo "cores.sh: $cores cores, workers: $ws, $SCALE_MIB MiB in $FILES files, median of $REPS" >&2
# restore-scaling prints "new  W  wall  MB/s  speedup  CPU"
"$top/tests/bench/restore-scaling.sh" "$CKS" 2> /dev/null |
  awk '$1 == "new" && $2 ~ /^[0-9]+$/ {print "restore", $2, $3}' >> "$out"
# ingest-scaling prints "| after | files | W | wall | GB/s | CPU |" per file set
"$top/tests/bench/ingest-scaling.sh" "$CKS" 2> /dev/null |
  awk -F'|' -v f="$FILES" '$2 ~ /after/ && $3 + 0 == f {gsub(/ /, ""); print "ingest", $4, $5}' >> "$out"

printf '\n| stage | workers | wall s | GB/s | GB/s per worker | speedup |\n|---|---|---|---|---|---|\n'
awk -v mib="$SCALE_MIB" '
  { t[$1, $2] = $3; if (!($1 in seen)) { seen[$1] = 1; order[++ns] = $1 } ws[$1] = ws[$1] == "" ? $2 : ws[$1] "," $2 }
  END {
    g = mib * 1048576 / 1e9
    for (i = 1; i <= ns; i++) {
      st = order[i]; split(ws[st], w, " "); t1 = t[st, 1]; num = 0; den = 0
      for (j = 1; j in w; j++) {
        n = w[j]; tn = t[st, n]
        printf "| %s | %d | %.2f | %.2f | %.2f | %.2fx |\n", st, n, tn, g / tn, g / tn / n, t1 / tn
        if (n > 1) { x = 1 - 1 / n; num += (tn / t1 - 1 / n) * x; den += x * x }
      }
      s = den > 0 ? num / den : 0
      if (s < 0) s = 0
      t32 = t1 * (s + (1 - s) / 32)
      proj[i] = sprintf("%s: serial fraction %.3f (least squares over %s workers); 32 cores: %.1f GB/s (%.1fx one worker)",
                        st, s, ws[st], g / t32, t1 / t32)
    }
    print ""
    for (i = 1; i <= ns; i++) print proj[i]
  }' "$out"
echo "(load: $(cut -d' ' -f1-3 /proc/loadavg); $cores cores; $(uname -r))"
