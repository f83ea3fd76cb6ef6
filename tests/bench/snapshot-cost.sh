#!/usr/bin/env bash
# snapshot-cost.sh — the CLI's `ckptsync snapshot` cost per GB at several
# sizes (#24 item 5: it should stay flat with size), into three dir
# regions on one disk, for one or two builds interleaved run by run.  A
# benchmark, not a test: it prints a table and never fails on time.
#
#   tests/bench/snapshot-cost.sh [NEW_CKPTSYNC [BASE_CKPTSYNC]]
#   SIZES_MIB   checkpoint sizes (default "512 4096"); random data, one
#               file per 512 MiB (a sharded checkpoint)
#   REPS        runs per build and size (default 1)
#   BENCH_DIR   scratch parent, on the disk measured (default /var/tmp);
#               needs about 4.5 x the largest size free
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
NEW=${1:-$top/build-release/ckptsync}
BASE=${2:-}
SIZES_MIB=${SIZES_MIB:-512 4096}
REPS=${REPS:-1}
S=$(mktemp -d "${BENCH_DIR:-/var/tmp}/cks-snapcost.XXXXXX")
trap 'rm -rf "$S"' EXIT
max=0
for m in $SIZES_MIB; do [ "$m" -gt "$max" ] && max=$m; done
avail=$(df -Pm "$S" | awk 'NR == 2 {print $4}')
[ "$avail" -ge $((max * 9 / 2)) ] || { echo "snapshot-cost: $S has $avail MiB free, needs $((max * 9 / 2))" >&2; exit 1; }

conf() {
  cat > "$S/conf" << EOF
[daemon]
watch = $S/watch
state = $S/state
quorum = 2
[region.a]
path = $S/regions/a
[region.b]
path = $S/regions/b
[region.c]
path = $S/regions/c
EOF
}
conf
mkdir -p "$S/watch"
# one run: fresh regions and state; prints "wall_s cpu_s"
run() {
  rm -rf "$S/regions" "$S/state"
  mkdir -p "$S/regions/a" "$S/regions/b" "$S/regions/c"
  sync
  /usr/bin/time -f '%e %U %S' -o "$S/t" "$1" --config "$S/conf" snapshot "$2" --run bench --step 1 \
    > /dev/null 2> "$S/err" || { cat "$S/err" >&2; exit 1; }
  awk '{ print $1, $2 + $3 }' "$S/t"
}
printf '| build | size | wall s | s/GB (wall) | CPU s/GB |\n|---|---|---|---|---|\n'
for m in $SIZES_MIB; do
  rm -rf "$S/src"
  mkdir -p "$S/src/ckpt"
  left=$m i=0
  while [ "$left" -gt 0 ]; do
    n=$((left > 512 ? 512 : left))
    head -c $((n << 20)) /dev/urandom > "$S/src/ckpt/shard-$i.bin"
    left=$((left - n)) i=$((i + 1))
  done
  gb=$(awk -v m="$m" 'BEGIN { print m / 1024 }')
  for rep in $(seq 1 "$REPS"); do
    for b in "$NEW" ${BASE:+"$BASE"}; do
      read -r wall cpu <<< "$(run "$b" "$S/src/ckpt")"
      name=new
      [ "$b" = "$NEW" ] || name=base
      awk -v n="$name" -v g="$gb" -v w="$wall" -v c="$cpu" \
        'BEGIN { printf "| %s | %.1f GB | %.1f | %.2f | %.2f |\n", n, g, w, w / g, c / g }'
    done
  done
done
echo "(load before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $S on $(df -P "$S" | awk 'NR == 2 {print $1}'))"
