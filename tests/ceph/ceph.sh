#!/usr/bin/env bash
# ceph.sh — a one-node Ceph cluster (Debian 12's Ceph 16.2 "pacific") on
# loopback, a real S3 implementation for the tests: one ceph-mon, one
# ceph-osd (bluestore on a sparse file, pools of size 1, no ceph-mgr),
# radosgw (beast) on loopback ports, and an S3 user.  Everything lives
# under DIR; nothing in /etc/ceph or /var/lib/ceph is read or written
# (every command gets -c DIR/ceph.conf).  See tests/ceph/README.md.
#
#   ceph.sh start DIR [--gateways N] [BUCKET...]
#         a new cluster in DIR (created; an old one there is wiped) with N
#         radosgw processes (default 1) on one pool set, each on its own
#         port; makes the buckets; writes DIR/env and prints it
#   ceph.sh restart DIR          the daemons again on the same data and ports
#   ceph.sh stop DIR             every radosgw, then the osd, then the mon
#                                (SIGTERM; SIGKILL after 10 s, exit 1)
#   ceph.sh kill DIR             SIGKILL everything
#   ceph.sh stop-rgw DIR I | kill-rgw DIR I | start-rgw DIR I
#                                one gateway (0..N-1), same port on start
#   ceph.sh buckets DIR BUCKET...  more buckets (via gateway 0)
#   ceph.sh check                exit 0 if Ceph is installed, else 77
#
# DIR/env (shell assignments, mode 0600, rewritten when a daemon starts):
#   CEPH_CONF CEPH_MON_PORT CEPH_RGW_PORT (gateway 0) CEPH_RGW_PORTS (all,
#   in order) CEPH_RGW_URL CEPH_ACCESS_KEY CEPH_SECRET_KEY CEPH_PIDS
#   (running daemons) CEPH_START_SECONDS (the last start or restart)
# Exit status: 0 done; 77 with "ceph.sh: cannot start: REASON" on stderr
# when Ceph is not installed or a daemon does not come up (the end of its
# log follows; what was started is killed); 1 other errors; 2 usage.
set -euo pipefail

CEPH_S3_REGION=${CEPH_S3_REGION:-us-east-1}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
cannot() { echo "ceph.sh: cannot start: $*" >&2; exit 77; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
mark() { echo "$(elapsed "$T0") $*" >> "$D/log/timing"; }

check_installed() {
  local b
  for b in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool curl; do
    command -v "$b" > /dev/null 2>&1 ||
      cannot "$b is not installed (deploy/deps.sh --test, or apt-get install --no-install-recommends ceph-mon ceph-osd radosgw ceph-common)"
  done
}

# free_ports N: N distinct free TCP ports on 127.0.0.1, picked by the
# kernel (released before the daemons bind them: a race is possible, rare).
free_ports() {
  "$PY" - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# log_tail NAME: the end of a daemon's log (or of its stderr), for the reason.
log_tail() {
  local f="$D/log/$1.log"
  [ -s "$f" ] || f="$D/log/$1.out"
  [ -s "$f" ] || { echo "(nothing in $D/log/$1.log)"; return 0; }
  grep -v '^\s*$' "$f" | tail -n "${2:-12}" || true
}

alive() { [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2> /dev/null)" != Z ]; }

# launch NAME CMD...: a daemon in the foreground (-f) of a background job,
# so that its pid is known at once; its stderr in DIR/log/NAME.out, its pid
# in DIR/run/NAME.pid.  It stays in the caller's process group, so a test
# runner that kills the group on a timeout takes it along.
launch() {
  local name=$1; shift
  "$@" > "$D/log/$name.out" 2>&1 < /dev/null &
  echo $! > "$D/run/$name.pid"
  disown
}

pid_of() { cat "$D/run/$1.pid" 2> /dev/null || true; }

# daemon names: mon.a osd.0 client.rgw.0 ... (the same as their log files)
rgw_names() { local i; for ((i = 0; i < NGW; i++)); do echo "client.rgw.$i"; done; }

ceph_cli() { timeout 15 ceph -c "$CONF" --connect-timeout 5 "$@"; }

write_conf() {
  local fsid=$1 i
  cat > "$CONF" <<EOF
; made by tests/ceph/ceph.sh — a throwaway one-node cluster for tests
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$MON_PORT
mon initial members = a
public network = 127.0.0.0/8
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
; with auth none, msgr2's default "secure" mode for mon clients fails:
; radosgw never gets past the mon
ms mon client mode = crc
ms mon cluster mode = crc
ms mon service mode = crc
ms cluster mode = crc
ms service mode = crc
ms client mode = crc
keyring = /dev/null
admin socket = $D/run/\$name.asok
log file = $D/log/\$name.log
log to stderr = false
err to stderr = true
log to syslog = false
mon cluster log file = $D/log/cluster.log
crash dir = $D/crash
run dir = $D/run
debug rocksdb = 0/5
; one osd, no redundancy, no mgr
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
osd crush chooseleaf type = 0
; a port taken: one try, fail at once (ceph.sh picks others), not after
; 3 tries 5 s apart
ms bind retry count = 1
; pool creation is a series of paxos proposals: 1 s apart by default
paxos propose interval = 0.01
paxos min wait = 0.01
mon osd report timeout = 600

[mon]
mon data = $D/mon/\$cluster-\$id

[osd]
osd data = $D/osd/\$cluster-\$id
osd objectstore = bluestore
; a sparse file, no loop device: small, and it survives kill -9
bluestore block path = $D/osd/\$cluster-\$id.block
bluestore block create = true
bluestore block size = $((4 << 30))
bluestore block db create = false
bluestore block wal create = false
bluestore fsck on mkfs = false
bluestore fsck on mount = false
; the aio thread polls every 250 ms by default and each close of the
; device waits for it: mkfs took 2.2 s instead of 0.3 s
bdev aio poll ms = 5
bluestore cache autotune = false
bluestore cache size = $((128 << 20))
osd memory target = $((1 << 30))
osd max object name len = 460
osd max object namespace len = 64
osd op num shards = 2
osd op num threads per shard = 2
; without it a stopped osd may lose what it acknowledged last
osd fast shutdown = false
osd heartbeat grace = 600

[client]
; virtual-hosted buckets: Host: BUCKET.localhost[:port]
rgw dns name = localhost
rgw data = $D/rgw
rgw thread pool size = 64
rgw enable usage log = false
rgw enable ops log = false
rgw init timeout = 60
EOF
  for ((i = 0; i < NGW; i++)); do
    printf '\n[client.rgw.%d]\nrgw frontends = beast endpoint=127.0.0.1:%s\n' "$i" "${RGW_PORTS[$i]}" >> "$CONF"
  done
}

# wait_until SECONDS NAME CMD...: polls CMD every 0.05 s while daemon NAME
# lives; "cannot start" with its log when it dies or the time is up.
wait_until() {
  local secs=$1 name=$2 pid i; shift 2
  pid=$(pid_of "$name")
  for ((i = 0; i < secs * 20; i++)); do
    if [ -n "$pid" ] && ! alive "$pid"; then
      kill_all
      cannot "$name exited at start:
$(log_tail "$name")"
    fi
    "$@" > /dev/null 2>&1 && return 0
    sleep 0.05
  done
  kill_all
  cannot "$name not ready within $secs s:
$(log_tail "$name")"
}

osd_up() { ceph_cli osd dump 2> /dev/null | grep '^osd\.0 up' > /dev/null; }
# rgw_up I: the gateway answers an anonymous GET / with 200.
rgw_up() { curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:${RGW_PORTS[$1]}/"; }
tcp_open() { (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }

# s3_put_bucket NAME: PUT /NAME signed with the user's keys (curl's SigV4);
# a bucket that exists already is fine.
s3_put_bucket() {
  local b=$1 code
  code=$(curl -sS -o "$D/log/mb.out" -w '%{http_code}' --max-time 20 -X PUT \
    --aws-sigv4 "aws:amz:$CEPH_S3_REGION:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
    "http://127.0.0.1:${RGW_PORTS[0]}/$b") || code=000
  case $code in
    200) ;;
    409) grep -q BucketAlreadyOwnedByYou "$D/log/mb.out" ||
         { echo "ceph.sh: PUT bucket $b: HTTP 409 $(cat "$D/log/mb.out")" >&2; return 1; } ;;
    *) echo "ceph.sh: PUT bucket $b: HTTP $code $(cat "$D/log/mb.out" 2> /dev/null)" >&2; return 1 ;;
  esac
}

write_env() {
  local n p pids=()
  for n in $(rgw_names) osd.0 mon.a; do
    p=$(pid_of "$n")
    [ -n "$p" ] && alive "$p" && pids+=("$p")
  done
  (umask 077; cat > "$D/env.new" <<EOF
CEPH_CONF=$CONF
CEPH_MON_PORT=$MON_PORT
CEPH_RGW_PORT=${RGW_PORTS[0]}
CEPH_RGW_PORTS="${RGW_PORTS[*]}"
CEPH_RGW_URL=http://127.0.0.1:${RGW_PORTS[0]}
CEPH_ACCESS_KEY=$ACCESS_KEY
CEPH_SECRET_KEY=$SECRET_KEY
CEPH_PIDS="${pids[*]}"
CEPH_START_SECONDS=${START_SECONDS:-}
EOF
  )
  mv -f "$D/env.new" "$D/env"
}

load_env() {
  [ -s "$D/env" ] || { echo "ceph.sh: no cluster in $D (no $D/env)" >&2; exit 1; }
  D=$(cd "$D" && pwd)
  CONF="$D/ceph.conf"
  # shellcheck disable=SC2034  # all of DIR/env, some of it unused here
  local CEPH_CONF CEPH_MON_PORT CEPH_RGW_PORT CEPH_RGW_PORTS CEPH_RGW_URL CEPH_ACCESS_KEY \
    CEPH_SECRET_KEY CEPH_PIDS CEPH_START_SECONDS
  # shellcheck disable=SC1091
  . "$D/env"
  MON_PORT=$CEPH_MON_PORT ACCESS_KEY=$CEPH_ACCESS_KEY SECRET_KEY=$CEPH_SECRET_KEY
  START_SECONDS=$CEPH_START_SECONDS
  read -r -a RGW_PORTS <<< "${CEPH_RGW_PORTS:-$CEPH_RGW_PORT}"
  NGW=${#RGW_PORTS[@]}
}

kill_all() {
  local n p
  for n in $(rgw_names) osd.0 mon.a; do
    p=$(pid_of "$n"); [ -z "$p" ] || kill -KILL "$p" 2> /dev/null || true
  done
  for n in $(rgw_names) osd.0 mon.a; do
    p=$(pid_of "$n"); [ -n "$p" ] || continue
    for _ in $(seq 1 100); do alive "$p" || break; sleep 0.05; done
    rm -f "$D/run/$n.pid"
  done
}

# signal_one NAME SIG: sends SIG; waits until it is gone (SIGKILL after 10 s:
# returns 1 then).
signal_one() {
  local n=$1 sig=$2 p i
  p=$(pid_of "$n")
  [ -n "$p" ] || return 0
  kill "-$sig" "$p" 2> /dev/null || true
  for ((i = 0; i < 200; i++)); do
    alive "$p" || { rm -f "$D/run/$n.pid"; return 0; }
    sleep 0.05
  done
  kill -KILL "$p" 2> /dev/null || true
  for ((i = 0; i < 100; i++)); do alive "$p" || break; sleep 0.05; done
  rm -f "$D/run/$n.pid"
  echo "ceph.sh: $n did not stop within 10 s of SIG$sig (killed)" >&2
  return 1
}

start_mon() {
  launch mon.a ceph-mon -c "$CONF" -i a -f
  wait_until 30 mon.a tcp_open "$MON_PORT"
  wait_until 30 mon.a ceph_cli mon stat
  mark "mon up"
}
start_osd() { launch osd.0 ceph-osd -c "$CONF" -i 0 -f; }
start_rgw() { launch "client.rgw.$1" radosgw -c "$CONF" -n "client.rgw.$1" -f; }
# start_gateways: gateway 0 first (the first start makes the pools and the
# default zone: two at once would race), then the others together.
start_gateways() {
  local i
  start_rgw 0
  wait_until 60 client.rgw.0 rgw_up 0
  mark "rgw 0 up"
  for ((i = 1; i < NGW; i++)); do start_rgw "$i"; done
}
wait_gateways() {
  local i
  for ((i = 1; i < NGW; i++)); do wait_until 60 "client.rgw.$i" rgw_up "$i"; done
  mark "rgw up ($NGW)"
}

# do_start ARGS: start_once in a fresh process (so that set -e holds in
# it), again with other ports when one was taken between choosing and
# binding it.
do_start() {
  local attempt rc
  for attempt in 1 2 3; do
    rc=0
    bash "${BASH_SOURCE[0]}" __start_once "$D" "$@" || rc=$?
    [ $rc -eq 0 ] && return 0
    [ $rc -eq 77 ] && [ $attempt -lt 3 ] &&
      grep -qs "Address already in use" "$D"/log/*.log "$D"/log/*.out || exit $rc
    echo "ceph.sh: a port was taken meanwhile; once more with others" >&2
  done
}

start_once() {
  NGW=1
  while [ $# -gt 0 ]; do
    case $1 in
      --gateways) [ $# -ge 2 ] || usage; NGW=$2; shift 2 ;;
      --gateways=*) NGW=${1#*=}; shift ;;
      --) shift; break ;;
      -*) usage ;;
      *) break ;;
    esac
  done
  [[ $NGW =~ ^[1-9][0-9]?$ ]] || usage
  check_installed
  mkdir -p "$D"
  D=$(cd "$D" && pwd)
  CONF="$D/ceph.conf"
  if [ -d "$D/run" ]; then   # what an earlier start left running here
    for p in "$D"/run/*.pid; do [ ! -e "$p" ] || kill -KILL "$(cat "$p")" 2> /dev/null || true; done
  fi
  rm -rf "$D/mon" "$D/osd" "$D/rgw" "$D/run" "$D/log" "$D/crash" "$D/env" "$D/monmap"
  mkdir -p "$D/mon/ceph-a" "$D/osd/ceph-0" "$D/rgw" "$D/run" "$D/log" "$D/crash"
  T0=$EPOCHREALTIME
  local fsid osd_uuid ports id
  fsid=$(cat /proc/sys/kernel/random/uuid)
  osd_uuid=$(cat /proc/sys/kernel/random/uuid)
  read -r -a ports <<< "$(free_ports $((NGW + 1)))"
  MON_PORT=${ports[0]}
  RGW_PORTS=("${ports[@]:1}")
  write_conf "$fsid"

  # the osd's bluestore needs no monitor (--no-mon-config): made meanwhile
  ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" --no-mon-config \
    > "$D/log/osd-mkfs.out" 2>&1 &
  local mkfs_pid=$!
  monmaptool --create --clobber --fsid "$fsid" --addv a "[v2:127.0.0.1:$MON_PORT]" \
    "$D/monmap" > "$D/log/monmaptool.out" 2>&1 ||
    cannot "monmaptool: $(tail -3 "$D/log/monmaptool.out")"
  ceph-mon -c "$CONF" --mkfs -i a --monmap "$D/monmap" > "$D/log/mon-mkfs.out" 2>&1 ||
    cannot "ceph-mon --mkfs: $(tail -5 "$D/log/mon-mkfs.out")"
  start_mon
  wait "$mkfs_pid" || { kill_all; cannot "ceph-osd --mkfs: $(grep -v '^\s*$' "$D/log/osd-mkfs.out" | tail -5)"; }
  mark "osd mkfs"
  id=$(ceph_cli osd new "$osd_uuid" 2> "$D/log/osd-new.out") ||
    { kill_all; cannot "ceph osd new: $(tail -3 "$D/log/osd-new.out")"; }
  [ "$id" = 0 ] || { kill_all; cannot "ceph osd new gave id '$id', not 0"; }
  mark "osd new"
  start_osd
  wait_until 60 osd.0 osd_up
  mark "osd up"
  start_gateways

  # the S3 user (meanwhile the other gateways start)
  ACCESS_KEY=CKS$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F)
  SECRET_KEY=$(head -c 30 /dev/urandom | base64 | tr -d '/+=\n')
  timeout 60 radosgw-admin -c "$CONF" user create --uid=ckptsync \
    --display-name=ckptsync --access-key="$ACCESS_KEY" --secret-key="$SECRET_KEY" \
    > "$D/log/user.out" 2>&1 || { kill_all; cannot "radosgw-admin user create: $(tail -5 "$D/log/user.out")"; }
  mark "user"
  local b
  for b in "$@"; do s3_put_bucket "$b" || { kill_all; cannot "could not make bucket $b"; }; done
  wait_gateways
  START_SECONDS=$(elapsed "$T0")
  write_env
  cat "$D/env"
}

do_restart() {
  load_env
  local n p
  for n in $(rgw_names) osd.0 mon.a; do
    p=$(pid_of "$n"); [ -z "$p" ] || ! alive "$p" || { echo "ceph.sh: $n still runs (stop first)" >&2; exit 1; }
  done
  T0=$EPOCHREALTIME
  start_mon
  # an osd that was killed is still "up" in the map: its clients would try
  # the old address first (radosgw then takes 10 s to start)
  ceph_cli osd down 0 > /dev/null 2>&1 || true
  start_osd
  wait_until 60 osd.0 osd_up
  mark "osd up"
  start_gateways
  wait_gateways
  START_SECONDS=$(elapsed "$T0")
  write_env
  cat "$D/env"
}

do_stop() {
  [ -s "$D/env" ] || return 0
  load_env
  local rc=0 n p
  # every gateway first (an osd that goes first leaves radosgw hanging in
  # its stop), together
  for n in $(rgw_names); do p=$(pid_of "$n"); [ -z "$p" ] || kill -TERM "$p" 2> /dev/null || true; done
  for n in $(rgw_names); do signal_one "$n" TERM || rc=1; done
  signal_one osd.0 TERM || rc=1
  signal_one mon.a TERM || rc=1
  write_env
  return $rc
}

gateway_arg() {
  if [[ ${1:-} =~ ^[0-9]+$ ]] && [ "$1" -lt "$NGW" ]; then return 0; fi
  echo "ceph.sh: no gateway '${1:-}' (0..$((NGW - 1)))" >&2
  exit 2
}

cmd=${1:-}; [ $# -ge 1 ] && shift
case $cmd in
  check) check_installed ;;
  start) [ $# -ge 1 ] || usage; D=$1; shift; do_start "$@" ;;
  __start_once) D=$1; shift; start_once "$@" ;;
  restart) [ $# -eq 1 ] || usage; D=$1; do_restart ;;
  stop) [ $# -eq 1 ] || usage; D=$1; do_stop ;;
  kill) [ $# -eq 1 ] || usage; D=$1; [ ! -s "$D/env" ] || { load_env; kill_all; write_env; } ;;
  stop-rgw|kill-rgw)
    [ $# -eq 2 ] || usage; D=$1; load_env; gateway_arg "$2"
    if [ "$cmd" = stop-rgw ]; then signal_one "client.rgw.$2" TERM; else signal_one "client.rgw.$2" KILL; fi
    write_env ;;
  start-rgw)
    [ $# -eq 2 ] || usage; D=$1; load_env; gateway_arg "$2"
    p=$(pid_of "client.rgw.$2"); [ -z "$p" ] || ! alive "$p" || { echo "ceph.sh: gateway $2 runs" >&2; exit 1; }
    T0=$EPOCHREALTIME
    start_rgw "$2"; wait_until 60 "client.rgw.$2" rgw_up "$2"; write_env ;;
  buckets)
    [ $# -ge 1 ] || usage; D=$1; shift; load_env
    for b in "$@"; do s3_put_bucket "$b" || exit 1; done ;;
  *) usage ;;
esac
