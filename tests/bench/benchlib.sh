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
# title, or at the end when there is none; the other sections stay.
results_section() {
  /usr/bin/python3 - "$top/tests/bench/RESULTS.md" "$2" "$1" << 'PY'
import os, re, sys
path, report, title = sys.argv[1], open(sys.argv[2]).read().rstrip("\n") + "\n", sys.argv[3]
old = open(path).read() if os.path.exists(path) else ""
m = re.search(r"^## " + re.escape(title) + r".*?(?=^## |\Z)", old, flags=re.S | re.M)
if m:
    new = old[:m.start()] + report + ("\n" + old[m.end():] if old[m.end():] else "")
else:
    new = old.rstrip("\n") + ("\n\n" if old else "") + report
open(path, "w").write(new)
PY
}
