#!/usr/bin/env bash
# kill9-soak.sh — the crash test for as long as you like (not in CI).
#
#   tests/soak/kill9-soak.sh [MINUTES] [BUILD_DIR]      default 10, build/
#
# Loop: start ckptsyncd on three dir regions, write a checkpoint and
# `commit --wait durable` it (acknowledged), write another and commit it
# without waiting, kill -9 the daemon at a random moment.  Every 10 rounds
# and at the end: restart, drain, and check that every acknowledged
# snapshot restores bit-identical and that fsck finds no refcount error.
# Prints rounds, snapshots committed, and losses found (must be 0); exits 1
# on any loss.
set -euo pipefail
minutes=${1:-10}
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$top/build}
cli=$build/ckptsync; daemon=$build/ckptsyncd
[ -x "$cli" ] && [ -x "$daemon" ] || { echo "build first: deploy/build.sh" >&2; exit 1; }
T=$(mktemp -d /tmp/cks-soak.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$T"' EXIT
mkdir -p "$T/watch/r1" "$T/regions/a" "$T/regions/b" "$T/regions/c" "$T/sums" "$T/acked"
cat > "$T/conf" <<EOF2
[daemon]
watch = $T/watch
state = $T/state
settle = 1
[chunker]
min = 32K
avg = 128K
max = 512K
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
cks() { "$cli" --config "$T/conf" "$@"; }
start() {
  "$daemon" --config "$T/conf" >> "$T/daemon.log" 2>&1 & pid=$!
  for _ in $(seq 1 100); do cks status --json > /dev/null 2>&1 && return 0; sleep 0.1; done
  echo "daemon did not start" >&2; tail "$T/daemon.log" >&2; exit 1
}
ckpt() {
  local d="$T/watch/r1/$1"; mkdir -p "$d"
  head -c $(( (RANDOM % 16 + 1) << 20 )) /dev/urandom > "$d/model.bin"
  printf '%s\n' "$1" > "$d/trainer_state.json"
  (cd "$d" && sha256sum ./* | sort -k2) > "$T/sums/$1"
}
check() {
  start
  cks flush --wait replicated --deadline 600 > /dev/null
  kill -TERM "$pid"; wait "$pid" || true; pid=
  local lost=0
  for f in "$T"/acked/*; do
    [ -e "$f" ] || continue
    name=$(basename "$f"); rm -rf "$T/r"
    if ! cks restore --run r1 --snapshot "$(cat "$f")" --to "$T/r" -q 2> /dev/null ||
       ! (cd "$T/r/$name" && sha256sum ./* | sort -k2) | cmp -s - "$T/sums/$name"; then
      echo "LOSS: acknowledged $name ($(cat "$f"))"; lost=$((lost + 1))
    fi
  done
  cks fsck -q || { echo "LOSS: fsck found refcount errors"; lost=$((lost + 1)); }
  losses=$((losses + lost))
  # keep the disk bounded: drop checked checkpoints from the watch root
  rm -rf "$T"/watch/r1/checkpoint-*
}
end=$(( $(date +%s) + minutes * 60 )); round=0; losses=0
while [ "$(date +%s)" -lt "$end" ]; do
  round=$((round + 1))
  start
  ckpt "checkpoint-${round}0"
  id=$(cks commit "$T/watch/r1/checkpoint-${round}0" --wait durable --timeout 120 --json |
       python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  echo "$id" > "$T/acked/checkpoint-${round}0"
  ckpt "checkpoint-${round}5"
  cks commit "$T/watch/r1/checkpoint-${round}5" > /dev/null 2>&1 || true
  sleep "0.$(( RANDOM % 80 ))"
  kill -9 "$pid"; wait "$pid" 2> /dev/null || true; pid=
  [ $((round % 10)) = 0 ] && check
  printf '\rrounds %d, acknowledged %d, losses %d' "$round" "$(ls "$T/acked" | wc -l)" "$losses"
done
check
echo
echo "rounds: $round"
echo "snapshots committed: $(cks ls --remote --run r1 --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')"
echo "acknowledged: $(ls "$T/acked" | wc -l)"
echo "losses: $losses"
[ "$losses" = 0 ]
