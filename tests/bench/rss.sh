#!/usr/bin/env bash
# rss.sh — memory stays bounded whatever the checkpoint size (#10 item 6):
# peak RSS of `ckptsync snapshot`, of `ckptsync restore` and of ckptsyncd
# taking a checkpoint of SIZE_GIB GiB into three dir regions, and the wall
# time of re-snapshotting the unchanged tree.  The checkpoint is a sharded
# one: SIZE_GIB / 2 shards, each written by tests/bench/make_ckpt.py with
# python3-torch (2 GiB of bf16 weights, fp32 master weights and Adam
# moments, a different seed each).  A benchmark, not a test: it prints a
# table and never fails on a figure.
#
#   tests/bench/rss.sh [SIZE_GIB]     default 10 (needs ~4.5 x SIZE free)
#   BENCH_DIR       scratch parent (default /var/tmp)
#   WRITE_RESULTS=1 also writes the table into tests/bench/RESULTS.md
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
SIZE_GIB=${1:-10}
case $SIZE_GIB in '' | *[!0-9]*) echo "usage: $0 [SIZE_GIB]" >&2; exit 2 ;; esac
[ "$SIZE_GIB" -ge 2 ] || { echo "rss.sh: SIZE_GIB must be at least 2" >&2; exit 2; }
SIZE_MIB=$((SIZE_GIB * 1024))
S=$(mktemp -d "${BENCH_DIR:-/var/tmp}/cks-rss.XXXXXX")
R=$S/results
mkdir -p "$R"
DPID=
cleanup() {
  [ -n "$DPID" ] && kill "$DPID" 2> /dev/null || true
  rm -rf "$S"
}
trap cleanup EXIT
say() { echo "rss: $*" >&2; }
declare -A SKIP=()
. "$top/tests/bench/benchlib.sh"
ensure_tool time /usr/bin/time time || { echo "rss.sh: needs GNU time" >&2; exit 1; }
avail=$(df -Pm "$S" | awk 'NR == 2 {print $4}')
[ "$avail" -ge $((SIZE_MIB * 9 / 2)) ] ||
  { echo "rss.sh: $S has $avail MiB free, needs about $((SIZE_MIB * 9 / 2)) MiB" >&2; exit 1; }
cmake -S "$top" -B "$top/build-bench" -DCMAKE_BUILD_TYPE=Release -DCKS_TESTS=OFF > "$S/build.log" 2>&1
cmake --build "$top/build-bench" -j"$(nproc)" >> "$S/build.log" 2>&1 || { tail -20 "$S/build.log"; exit 1; }
CKS=$top/build-bench/ckptsync CKSD=$top/build-bench/ckptsyncd
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

say "writing a ${SIZE_GIB} GiB sharded checkpoint with python3-torch"
CK=$S/stage/checkpoint-1
for k in $(seq 1 $((SIZE_GIB / 2))); do
  /usr/bin/python3 "$top/tests/bench/make_ckpt.py" "$CK/shard-$k" 2048 --seed "$k" > /dev/null
done
BYTES=$(bytes_of "$CK")

conf() { # conf NAME: three dir regions, default memory budget and workers
  mkdir -p "$S/$1"/{a,b,c,state,watch/run}
  {
    printf '[daemon]\nwatch = %s/watch\nstate = %s/state\nsocket = %s/sock\nsettle = 1\n' \
      "$S/$1" "$S/$1" "$S/$1"
    for r in a b c; do printf '[region.%s]\nkind = dir\npath = %s/%s/%s\n' "$r" "$S" "$1" "$r"; done
  } > "$S/$1.conf"
}
timed() { # timed KEY CMD...: "wall cpu peak_kib" of CMD into $S/KEY
  local k=$1; shift
  drop_caches
  /usr/bin/time -f '%e %U %S %M' -o "$R/$k.t" "$@" >> "$S/cmd.log" 2>&1
  awk '{printf "%.2f %.2f %d\n", $1, $2 + $3, $4}' "$R/$k.t" > "$R/$k"
}

say "ckptsync snapshot, unchanged again, restore"
conf cli
timed snap "$CKS" --config "$S/cli.conf" snapshot "$CK" --run run --step 1
timed again "$CKS" --config "$S/cli.conf" snapshot "$CK" --run run --step 1
rm -rf "$S/cli/state"
timed restore "$CKS" --config "$S/cli.conf" restore --run run --latest --to "$S/out"
RESTORED=ok
diff -rq "$CK" "$S/out/checkpoint-1" >> "$S/cmd.log" 2>&1 || RESTORED=DIFFERS
rm -rf "$S/out" "$S/cli"

say "ckptsyncd: rename into the watch folder, commit --wait replicated"
conf daemon
"$CKSD" --config "$S/daemon.conf" >> "$S/daemon.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do "$CKS" --config "$S/daemon.conf" status > /dev/null 2>&1 && break; sleep 0.1; done
drop_caches
t0=$(date +%s.%N)
mv "$CK" "$S/daemon/watch/run/checkpoint-1"
"$CKS" --config "$S/daemon.conf" commit "$S/daemon/watch/run/checkpoint-1" --wait replicated --timeout 3600 >> "$S/cmd.log" 2>&1
t1=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" -v c="$(awk '{printf "%.2f", ($14 + $15) / 100}' "/proc/$DPID/stat")" \
  -v m="$(awk '/VmHWM/ {print $2}' "/proc/$DPID/status")" 'BEGIN {printf "%.2f %.2f %d\n", b - a, c, m}' > "$R/daemon"
"$CKS" --config "$S/daemon.conf" status --json > "$S/status.json"
kill "$DPID"; wait "$DPID" 2> /dev/null || true
DPID=
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

row() { # row LABEL KEY
  read -r w c m < "$R/$2"
  awk -v l="$1" -v w="$w" -v c="$c" -v m="$m" \
    'BEGIN {printf "| %s | %.2f | %.2f | %.0f | %s |\n", l, w, c, m / 1024, m / 1024 <= 256 ? "met" : "missed"}'
}
{
  echo "## Peak memory (tests/bench/rss.sh $SIZE_GIB)"
  echo
  echo "Run $(date -u +%Y-%m-%dT%H:%MZ), ckptsync $(git -C "$top" describe --always --dirty 2> /dev/null || echo ?)."
  machine | sed 's/^/- /'
  echo "- data: a sharded checkpoint of $(awk -v b="$BYTES" 'BEGIN {printf "%.2f GB", b / 1e9}') ($((SIZE_GIB / 2)) shards by tests/bench/make_ckpt.py), three dir regions, default memory budget (1G) and workers"
  echo
  echo "| step | wall s | CPU s | peak RSS MiB | ≤ 256 MiB |"
  echo "|---|---|---|---|---|"
  row "ckptsync snapshot" snap
  row "ckptsync restore (fresh instance), tree $RESTORED" restore
  row "ckptsyncd to replicated (the daemon's own RSS)" daemon
  awk '{printf "| ckptsync snapshot of the unchanged tree | %.2f | %.2f | %.0f | wall %s 1 s |\n", $1, $2, $3 / 1024, $1 < 1 ? "<" : "NOT <"}' "$R/again"
  python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["object_buffer"]; print("\nDaemon object buffer: %d puts, %d evicted (read back from the pin and encoded again), %d waits." % (b["puts"], b["evicted"], b["waits"]))' "$S/status.json"
} | tee "$S/table.md"
if [ "${WRITE_RESULTS:-0}" = 1 ]; then
  python3 - "$top/tests/bench/RESULTS.md" "$S/table.md" <<'PY'
import os, re, sys
path, table = sys.argv[1], open(sys.argv[2]).read()
text = open(path).read() if os.path.exists(path) else ""
text = re.sub(r"## Peak memory.*?(?=\n## |\Z)", "", text, flags=re.S).rstrip() + "\n\n" + table
open(path, "w").write(text)
PY
fi
