#!/usr/bin/env bash
# copy-once.sh — upload once, then copy (issue 25): how many bytes leave
# the instance per new stored byte, and how long to durable and to
# replicated, against uploading to every region.
#
#   sudo tests/bench/copy-once.sh [MIB] [BUILD_DIR]     default 64 MiB, build-release/
#   RATE=100mbit sudo tests/bench/copy-once.sh ...      the instance's uplink (tc tbf)
#
# The instance (ckptsyncd) runs in a network namespace whose veth is capped
# with tc (egress, RATE); the S3 servers (s3rver, tests/s3) run outside, on
# the host side of the veth.  Server "one" holds three buckets (a region
# can copy from another of the same server); server "two" holds a bucket
# that no region on "one" can copy from (another endpoint).  Cases, each a
# fresh repository, state and daemon, one checkpoint of MIB incompressible
# MiB committed:
#
#   copy3   a, b, c on server one, copy_from = auto (three copy-capable regions)
#   none3   the same regions with copy_from = none (today's path)
#   mixed   a, b on server one (copy), c on server two (cannot copy)
#   none-mixed  the same with copy_from = none
#
# For each: bytes that left the instance (the veth's tx_bytes in the
# namespace: HTTP included), the new stored bytes (what each region got:
# status --json bytes_put + bytes_copied of the upload region), their
# ratio (goal <= 1.05 for copy3, <= 2.05 for mixed), the daemon's own
# figure (status --json latest.sent_ratio: chunk object bytes only), seconds
# from commit to durable (quorum 2) and to replicated.  s3rver stands in for Ceph RGW
# (tests/ceph/ is too heavy to start here; a copy on s3rver is a file copy
# on the host).  Needs root (ip netns, tc).  Not a test: it never fails on
# time; it exits 1 when a ratio misses its goal.
set -euo pipefail
mib=${1:-64}
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$top/build-release}
rate=${RATE:-200mbit}
[ "$(id -u)" = 0 ] || { echo "copy-once.sh: needs root (ip netns, tc)" >&2; exit 1; }
[ -x "$build/ckptsync" ] && [ -x "$build/ckptsyncd" ] || { echo "build first: $build" >&2; exit 1; }
ns=cksco$$ hv=cksh$$ iv=cksi$$ host_ip=10.231.$((RANDOM % 200)).1
inst_ip=${host_ip%.1}.2

# The instance's side runs through a wrapper: ckptsyncd inside the namespace.
wrap=$(mktemp -d /tmp/cks-copyonce-bin.XXXXXX)
printf '#!/bin/sh\nexec ip netns exec %s %s "$@"\n' "$ns" "$build/ckptsyncd" > "$wrap/ckptsyncd"
chmod +x "$wrap/ckptsyncd"
export CKPTSYNC=$build/ckptsync CKPTSYNCD=$wrap/ckptsyncd CKS_SOURCE_DIR=$top
"$top/tests/s3/setup.sh" > /dev/null
. "$top/tests/integration/lib.sh"
. "$top/tests/integration/s3lib.sh"

net_down() {
  ip netns del "$ns" 2> /dev/null || true
  ip link del "$hv" 2> /dev/null || true
  rm -rf "$wrap"
}
CKS_CLEANUP_HOOKS+=(net_down)
ip netns add "$ns"
ip link add "$hv" type veth peer name "$iv"
ip link set "$iv" netns "$ns"
ip addr add "$host_ip/24" dev "$hv"
ip link set "$hv" up
ip netns exec "$ns" ip addr add "$inst_ip/24" dev "$iv"
ip netns exec "$ns" ip link set "$iv" up
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" tc qdisc add dev "$iv" root tbf rate "$rate" burst 256kb latency 100ms
tx() { ip netns exec "$ns" cat "/sys/class/net/$iv/statistics/tx_bytes"; }

start_s3 one --address "$host_ip" --bucket ckpt-b --bucket ckpt-c
start_s3 two --address "$host_ip"
url() { echo "http://$host_ip:${S3_PORT[$1]}"; }
write_s3_credentials
make_file "$T/data/model.bin" "$mib"

# conf PREFIX COPY_FROM SERVER_OF_C: regions a, b on one; c on SERVER_OF_C.
conf() {
  local r server bucket
  {
    config_head 512K 2M 8M
    for r in a b c; do
      server=one bucket=ckpt
      [ "$r" = b ] && bucket=ckpt-b
      [ "$r" = c ] && { server=$3; [ "$3" = one ] && bucket=ckpt-c; }
      printf '[region.%s]\nkind = s3\nendpoint = %s\nbucket = %s\nprefix = %s\nregion = %s\ncredentials = %s\ncopy_from = %s\n' \
        "$r" "$(url "$server")" "$bucket" "$1" "$S3_REGION" "$S3_CREDENTIALS" "$2"
    done
  } > "$CONF"
  sed -i "/^\[daemon\]/a settle = 1" "$CONF"
}

maps() { grep -c "server-side copies:" "$T/daemon.log" 2> /dev/null || true; }
maps_over() { [ "$(maps)" -gt "$1" ]; }
now() { date +%s.%N; }

# run CASE COPY_FROM SERVER_OF_C: one checkpoint, timed and counted.
run() {
  local name=$1 n t0 t1 t2 tx0 tx1
  rm -rf "$STATE" "$T/watch"
  mkdir -p "$T/watch/run"
  conf "bench-$name-$$" "$2" "$3"
  n=$(maps)
  start_daemon
  wait_for 120 maps_over "${n:-0}" || die "$name: no copy map"
  cp "$T/data/model.bin" "$T/watch/run/step_1.pt"
  tx0=$(tx) t0=$(now)
  cks commit "$T/watch/run/step_1.pt" --wait durable --timeout 900 -q || die "$name: not durable"
  t1=$(now)
  cks flush --wait replicated --deadline 900 > /dev/null || die "$name: not replicated"
  t2=$(now) tx1=$(tx)
  cks status --json > "$T/st-$name.json"
  stop_daemon
  python3 - "$T/st-$name.json" "$name" "$((tx1 - tx0))" "$t0" "$t1" "$t2" "$(tail -1 <(grep "server-side copies:" "$T/daemon.log"))" <<'PY' | tee -a "$T/rows"
import json, sys
st, name, sent, t0, t1, t2, cmap = sys.argv[1:]
d = json.load(open(st))
got = [r["bytes_put"] + r["bytes_copied"] for r in d["regions"]]
stored = max(got)
put = ",".join(str(r["bytes_put"] >> 20) for r in d["regions"])
cop = ",".join(str(r["bytes_copied"] >> 20) for r in d["regions"])
own = d["runs"][0]["latest"].get("sent_ratio")
print("| %s | %s | %d | %d | %.3f | %s | %s | %s | %.2f | %.2f |" % (
    name, cmap.split("copies: ", 1)[1], int(sent) >> 20, stored >> 20, int(sent) / stored,
    "%.3f" % own if own is not None else "-", put, cop, float(t1) - float(t0), float(t2) - float(t0)))
PY
}

: > "$T/rows"
run copy3 auto one
run none3 none one
run mixed auto two
run none-mixed none two
echo
echo "ckptsync $(git -C "$top" describe --always --dirty 2> /dev/null || echo '?'), $mib MiB incompressible, uplink $rate (tc tbf in the instance's namespace), s3rver"
echo
echo "| case | copy map | MiB sent | MiB new stored | sent / stored | status sent_ratio | MiB put a,b,c | MiB copied a,b,c | s to durable | s to replicated |"
echo "|---|---|---|---|---|---|---|---|---|---|"
cat "$T/rows"
ok=0
awk -F'|' '$2 ~ /copy3/ && $6 + 0 > 1.05 { exit 1 }' "$T/rows" || { echo "copy3: ratio over 1.05" >&2; ok=1; }
awk -F'|' '$2 ~ /^ mixed/ && $6 + 0 > 2.05 { exit 1 }' "$T/rows" || { echo "mixed: ratio over 2.05" >&2; ok=1; }
exit $ok
