# benchlib.sh — what the benchmarks under tests/bench/ share: installing a
# peer tool from Debian, dropping the page cache, describing the machine,
# a disk baseline.  Sourced after S (scratch dir), LOGS, SIZE_MIB and an
# associative array SKIP are set; machine() also reads LOAD_BEFORE and
# LOAD_AFTER.  Messages go through say().

apt_updated=0

# ensure_tool NAME COMMAND PACKAGE: installs PACKAGE if COMMAND is missing.
ensure_tool() {
  local name=$1 cmd=$2 pkg=$3 cand
  command -v "$cmd" > /dev/null && return 0
  if [ "$(id -u)" -ne 0 ]; then
    SKIP[$name]="$cmd not installed, and installing $pkg needs root"
    return 1
  fi
  cand=$(apt-cache policy "$pkg" 2> /dev/null | awk '/Candidate:/ {print $2}')
  if { [ -z "$cand" ] || [ "$cand" = "(none)" ]; } && [ $apt_updated -eq 0 ]; then
    apt-get update -qq > /dev/null 2>&1 || true
    apt_updated=1
    cand=$(apt-cache policy "$pkg" 2> /dev/null | awk '/Candidate:/ {print $2}')
  fi
  if [ -z "$cand" ] || [ "$cand" = "(none)" ]; then
    SKIP[$name]="no Debian package $pkg available here"
    return 1
  fi
  say "installing $pkg $cand"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" \
    > "$LOGS/apt-$pkg.log" 2>&1 || ! command -v "$cmd" > /dev/null; then
    SKIP[$name]="apt-get install $pkg failed: $(tail -1 "$LOGS/apt-$pkg.log")"
    return 1
  fi
}

CAN_DROP=0
sync
if (echo 3 > /proc/sys/vm/drop_caches) 2> /dev/null; then CAN_DROP=1; fi

drop_caches() {
  sync
  if [ $CAN_DROP -eq 1 ]; then echo 3 > /proc/sys/vm/drop_caches 2> /dev/null || true; fi
}

machine() {
  local src fstype dev rot="?"
  read -r src fstype < <(findmnt -no SOURCE,FSTYPE -T "$S" 2> /dev/null || echo "? ?")
  dev=$(basename "$src" 2> /dev/null || echo ?)
  [ -r "/sys/block/$dev/queue/rotational" ] && rot=$(cat "/sys/block/$dev/queue/rotational")
  echo "cpu: $(nproc) x $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)," \
    "kernel $(uname -r)"
  echo "disk: $src ($fstype, rotational=$rot), scratch $S, $avail MiB free"
  echo "load average (1/5/15 min): $LOAD_BEFORE before the tools ran, $LOAD_AFTER after" \
    "(other work on the machine slows every tool)"
}

# A rough ceiling for every tool: sequential write then read of 1 GiB
# (or SIZE) on the scratch disk.
disk_baseline() {
  local n=$((SIZE_MIB < 1024 ? SIZE_MIB : 1024)) t0 t1 t2
  drop_caches
  t0=$(date +%s.%N)
  dd if=/dev/zero of="$S/dd.tmp" bs=1M count=$n conv=fdatasync status=none
  t1=$(date +%s.%N)
  drop_caches
  dd if="$S/dd.tmp" of=/dev/null bs=1M status=none
  t2=$(date +%s.%N)
  rm -f "$S/dd.tmp"
  awk -v n=$n -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN {
    printf "disk baseline (dd, %d MiB): write %.0f MB/s (fdatasync), read %.0f MB/s (cold)\n",
      n, n * 1.048576 / (b - a), n * 1.048576 / (c - b) }'
}

bytes_of() { du -sb --apparent-size "$@" | awk '{s += $1} END {printf "%.0f\n", s}'; }

# verify KEY DIR: DIR must equal $DATA/checkpoint-200 ($RES/KEY.verify
# says ok or DIFFERS; the diff goes to $LOG).
verify() {
  if [ -d "$2" ] && diff -r "$DATA/checkpoint-200" "$2" >> "$LOG" 2>&1; then
    echo ok > "$RES/$1.verify"
  else
    echo DIFFERS > "$RES/$1.verify"
  fi
}

# ensure_peers WHO TOOL...: installs the peer tools named (restic, borg,
# casync, rclone); one that cannot be installed is left in SKIP with the
# reason; an unknown name stops WHO with status 2.
ensure_peers() {
  local who=$1 t
  shift
  for t in "$@"; do
    case $t in
      restic) ensure_tool restic restic restic || true ;;
      borg) ensure_tool borg borg borgbackup || true ;;
      casync) ensure_tool casync casync casync || true ;;
      rclone) ensure_tool rclone rclone rclone || true ;;
      *) echo "$who: unknown tool '$t'" >&2; exit 2 ;;
    esac
  done
}

# results_section TITLE REPORT: puts the file REPORT (a section starting
# "## TITLE") into tests/bench/RESULTS.md in place of the section of that
# title (the whole title, then the end of the line or " (..."), or at the
# end when there is none; the other sections stay.
results_section() {
  /usr/bin/python3 - "$top/tests/bench/RESULTS.md" "$2" "$1" << 'PY'
import os, re, sys
path, report, title = sys.argv[1], open(sys.argv[2]).read().rstrip("\n") + "\n", sys.argv[3]
old = open(path).read() if os.path.exists(path) else ""
# the title whole: "Delta restore" is not "Delta restore behind a link"
m = re.search(r"^## " + re.escape(title) + r"(?: \(.*?)?$.*?(?=^## |\Z)", old, flags=re.S | re.M)
if m:
    new = old[:m.start()] + report + ("\n" + old[m.end():] if old[m.end():] else "")
else:
    new = old.rstrip("\n") + ("\n\n" if old else "") + report
open(path, "w").write(new)
PY
}

# A capped link (restore-netns.sh, delta-restore-link.sh): the instance
# runs in a network namespace joined to the host by a veth pair, the
# regions listen on the host end.  Needs root (ip netns, tc).
#   link_up              namespace $NS, host end $HOST_IP, its end $NS_IP
#                        (a /30 of 10.231.x); the caller removes them at
#                        exit with link_down (lib.sh: CKS_CLEANUP_HOOKS)
#   link_shape RATE MS   RATE (tc syntax) on each end's egress, with netem
#                        MS ms one-way delay where the kernel has sch_netem
#                        (else tbf, no delay); sets LINK_DELAY (the delay
#                        applied) and LINK_BPS (link_rate_bps); again to
#                        change the cap on the same link
#   link_rate_bps RATE   the cap in bytes/s, as tc reports it on the host
#                        end (else parsed from RATE)
#   inns CMD...          CMD inside the namespace
# Each link gets its own names: two runs at once do not meet.
link_up() {
  NS=cksb$$ LINK_VH=cksh$$ LINK_VN=cksn$$ HOST_IP=10.231.$((RANDOM % 250)).1
  NS_IP=${HOST_IP%.1}.2
  ip netns add "$NS"
  ip link add "$LINK_VH" type veth peer name "$LINK_VN"
  ip link set "$LINK_VN" netns "$NS"
  ip addr add "$HOST_IP/30" dev "$LINK_VH"
  ip link set "$LINK_VH" up
  inns ip addr add "$NS_IP/30" dev "$LINK_VN"
  inns ip link set "$LINK_VN" up
  inns ip link set lo up
}

link_down() {
  ip netns del "$NS" 2> /dev/null || true
  ip link del "$LINK_VH" 2> /dev/null || true
}

inns() { ip netns exec "$NS" "$@"; }

# link_shape1 RATE MS DEV [PREFIX...]: the cap on DEV's egress (echoes
# the delay applied).
link_shape1() {
  local rate=$1 ms=$2 dev=$3
  shift 3
  if [ "$ms" != 0 ] && "$@" tc qdisc replace dev "$dev" root netem delay "${ms}ms" rate "$rate" \
    limit 100000 2> /dev/null; then
    echo "$ms"
  else
    "$@" tc qdisc replace dev "$dev" root tbf rate "$rate" burst 256kb latency 100ms
    echo 0
  fi
}

link_shape() {
  LINK_DELAY=$(link_shape1 "$1" "$2" "$LINK_VH")
  link_shape1 "$1" "$2" "$LINK_VN" inns > /dev/null
  LINK_BPS=$(link_rate_bps "$1")
}

link_rate_bps() {
  local bps
  bps=$(tc -j qdisc show dev "$LINK_VH" 2> /dev/null | python3 -c '
import json, sys
q = json.load(sys.stdin)[0]
print(int(q.get("options", {}).get("rate", 0)))' 2> /dev/null || echo 0)
  [ "$bps" -gt 0 ] || bps=$(python3 -c '
import re, sys
m = re.fullmatch(r"(\d+)([kmg]?)bit", sys.argv[1].lower())
print(int(m.group(1)) * {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}[m.group(2)] // 8)' "$1")
  echo "$bps"
}

# With s3lib.sh (tests/integration) sourced:
#   link_s3 NAME...       an s3rver region per NAME on the host end
#   link_s3_conf NAME...  their [region.NAME] sections (write_s3_credentials
#                         first)
#   s3_cpu_ticks NAME...  the CPU ticks those servers used so far
link_s3() {
  local r
  for r in "$@"; do start_s3 "$r" --address "$HOST_IP"; done
}

link_s3_conf() {
  local r
  for r in "$@"; do
    printf '[region.%s]\nkind = s3\nendpoint = http://%s:%s\nbucket = %s\nprefix = %s\n' \
      "$r" "$HOST_IP" "${S3_PORT[$r]}" "$S3_BUCKET" "$S3_PREFIX"
    printf 'region = %s\naddressing = path\ncredentials = %s\n' "$S3_REGION" "$S3_CREDENTIALS"
  done
}

s3_cpu_ticks() {
  local r t=0
  for r in "$@"; do t=$((t + $(awk '{ print $14 + $15 }' "/proc/${S3_PID[$r]}/stat"))); done
  echo "$t"
}
