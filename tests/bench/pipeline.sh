#!/usr/bin/env bash
# pipeline.sh — snapshot and restore at the machine's speed: ckptsync (CLI
# and daemon) next to the tools a user would otherwise run, and next to the
# disk and CPU bounds, on one realistic PyTorch checkpoint, in one run.
# A benchmark, not a test: it prints tables and never fails on time.
#
#   tests/bench/pipeline.sh [SIZE_MIB]        default 2048
#
# Environment:
#   SIZE_MIB        checkpoint size when no argument is given
#   SCALE_MIB       checkpoint size of the tmpfs scaling runs (default 512)
#   BENCH_DIR       scratch directory parent (default /var/tmp); about
#                   10 x SIZE must be free there
#   PIPELINE_TOOLS  which peers to run (default "restic borg casync rclone")
#   PIPELINE_ENCRYPTED=0 skips the encrypted-repository runs (default 1)
#   WRITE_RESULTS=1 also writes the tables to tests/bench/RESULTS.md
#
# What it measures (every timed command starts from dropped page caches
# when the kernel allows it and ends with sync(1), so nobody is credited
# for writes left in the page cache):
# - Data: tests/bench/make_ckpt.py writes checkpoint-100 with Debian's
#   python3-torch (bf16 weights; fp32 master weights and fp32 Adam
#   moments in optimizer.pt) and checkpoint-200, a fine-tune successor
#   with one layer in ten changed.
# - Bounds: `cp -r` to three directories (the disk bound of three
#   replicas), `sha256sum` (one core hashing), `zstd -T0 -3` (every core
#   compressing).
# - ckptsync CLI: `snapshot` of v1 and v2 into three dir regions, the
#   unchanged v1 again, `restore --latest` on a fresh instance (no index).
# - ckptsync daemon: three dir regions; the checkpoint is renamed into the
#   watch folder (as trainers do) and `commit --wait durable`, then
#   `--wait replicated`, are timed; CPU and peak RSS are the daemon's own.
# - Encryption: the CLI and daemon runs again into an encrypted repository
#   (aes-256-gcm, key file); CPU ratios encrypted / plain.
# - restic (one local repository, compression auto), borg (zstd,3),
#   casync (zstd), rclone copy: back up v1, v2, restore v2.
# - Scaling: on tmpfs (CPU bound), snapshot and restore with `workers = 1`
#   and with one worker per CPU.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
SIZE_MIB=${1:-${SIZE_MIB:-2048}}
SCALE_MIB=${SCALE_MIB:-512}
TOOLS=${PIPELINE_TOOLS:-restic borg casync rclone}
case $SIZE_MIB in '' | *[!0-9]*) echo "usage: $0 [SIZE_MIB]" >&2; exit 2 ;; esac
[ "$SIZE_MIB" -ge 64 ] || { echo "pipeline.sh: SIZE_MIB must be at least 64" >&2; exit 2; }

S=$(mktemp -d "${BENCH_DIR:-/var/tmp}/cks-pipe.XXXXXX")
SHM=
DPID=
cleanup() {
  [ -n "$DPID" ] && kill "$DPID" 2> /dev/null || true
  rm -rf "$S"
  [ -n "$SHM" ] && rm -rf "$SHM"
  return 0
}
trap cleanup EXIT
RES=$S/results LOGS=$S/logs DATA=$S/data LOG=$S/logs/tools.log
mkdir -p "$RES" "$LOGS" "$DATA" "$S/repo" "$S/restore" "$S/cache"
export XDG_CACHE_HOME=$S/cache

say() { echo "pipeline: $*" >&2; }

declare -A SKIP=()
. "$top/tests/bench/benchlib.sh"

ensure_tool time /usr/bin/time time || { echo "pipeline.sh: needs GNU time" >&2; exit 1; }
ensure_tool zstd zstd zstd || true
# shellcheck disable=SC2086 # TOOLS is a list
ensure_peers pipeline.sh $TOOLS
if ! /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  say "installing python3-torch"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch > "$LOGS/apt-torch.log" 2>&1 ||
    { echo "pipeline.sh: python3-torch is needed for the data" >&2; exit 1; }
fi

say "building ckptsync (Release, $top/build-bench)"
cmake -S "$top" -B "$top/build-bench" -DCMAKE_BUILD_TYPE=Release -DCKS_TESTS=OFF \
  > "$LOGS/build.log" 2>&1
cmake --build "$top/build-bench" -j"$(nproc)" >> "$LOGS/build.log" 2>&1 ||
  { tail -20 "$LOGS/build.log" >&2; exit 1; }
CKS=$top/build-bench/ckptsync CKSD=$top/build-bench/ckptsyncd

need=$((SIZE_MIB * 10))
avail=$(df -Pm "$S" | awk 'NR == 2 {print $4}')
[ "$avail" -ge "$need" ] ||
  { echo "pipeline.sh: $S has $avail MiB free, needs about $need MiB" >&2; exit 1; }

# ---- measuring ----------------------------------------------------------------

# measure KEY CMD...: from cold caches, CMD then sync; $RES/KEY gets
# "wall_s cpu_s peak_rss_kib" (CPU and RSS of CMD and its children).
measure() {
  local key=$1 t0 t1 u s m
  shift
  drop_caches
  t0=$(date +%s.%N)
  /usr/bin/time -f "%U %S %M" -o "$RES/$key.time" "$@" >> "$LOG" 2>&1
  sync
  t1=$(date +%s.%N)
  read -r u s m < <(tail -1 "$RES/$key.time")
  awk -v a="$t0" -v b="$t1" -v u="$u" -v s="$s" -v m="$m" \
    'BEGIN {printf "%.2f %.2f %d\n", b - a, u + s, m}' > "$RES/$key"
}

# cks_conf FILE BASE WORKERS [enc]: three dir regions under BASE; "enc":
# an encrypted repository (aes-256-gcm, a key file).
cks_conf() {
  mkdir -p "$2/a" "$2/b" "$2/c" "$2/state" "$2/watch/bench" "$2/stage"
  {
    if [ "${4:-}" = enc ]; then
      head -c 32 /dev/urandom > "$2.key"; chmod 600 "$2.key"
      printf '[repository]\nencryption = aes-256-gcm\nkey_file = %s\n' "$2.key"
    fi
    cat << EOF
[daemon]
watch = $2/watch
state = $2/state
socket = $2/sock
settle = 1
workers = $3
[region.a]
kind = dir
path = $2/a
[region.b]
kind = dir
path = $2/b
[region.c]
kind = dir
path = $2/c
EOF
  } > "$1"
}

proc_cpu() { awk '{printf "%.2f\n", ($14 + $15) / 100}' "/proc/$1/stat"; }

# daemon_commit KEY BASE CONF NAME: renames BASE/stage/NAME into the watch
# folder and times commit --wait durable, then flush --wait replicated
# (a second commit would take the unit again).
daemon_commit() {
  local key=$1 base=$2 conf=$3 name=$4 t0 t1 t2 c0 c1
  drop_caches
  c0=$(proc_cpu "$DPID")
  t0=$(date +%s.%N)
  mv "$base/stage/$name" "$base/watch/bench/$name"
  "$CKS" --config "$conf" commit "$base/watch/bench/$name" --wait durable --timeout 3600 >> "$LOG" 2>&1
  t1=$(date +%s.%N)
  "$CKS" --config "$conf" flush --wait replicated --deadline 3600 >> "$LOG" 2>&1
  sync
  t2=$(date +%s.%N)
  c1=$(proc_cpu "$DPID")
  awk -v a="$t0" -v b="$t1" -v c="$t2" -v u="$c0" -v v="$c1" -v m="$(awk '/VmHWM/ {print $2}' "/proc/$DPID/status")" \
    'BEGIN {printf "%.2f %.2f %d\n", c - a, v - u, m; printf "%.2f\n", b - a > "/dev/stderr"}' \
    > "$RES/$key" 2> "$RES/$key.durable"
}

# ---- data ---------------------------------------------------------------------

say "writing a ${SIZE_MIB} MiB PyTorch checkpoint and its fine-tune successor"
/usr/bin/python3 "$top/tests/bench/make_ckpt.py" "$DATA/checkpoint-100" "$SIZE_MIB" >> "$LOG" 2>&1
/usr/bin/python3 "$top/tests/bench/make_ckpt.py" "$DATA/checkpoint-200" "$SIZE_MIB" \
  --successor "$DATA/checkpoint-100" >> "$LOG" 2>&1
V1=$DATA/checkpoint-100 V2=$DATA/checkpoint-200
BYTES=$(bytes_of "$V1")
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- bounds -------------------------------------------------------------------

say "bounds: cp -r x3, sha256sum, zstd -T0"
measure cp3 bash -c "for d in a b c; do cp -r '$V1' \"$S/repo/cp-\$d\"; done"
echo "$(bytes_of "$S/repo/cp-a") 3" > "$RES/cp3.stored"
rm -rf "$S"/repo/cp-*
measure sha256sum bash -c "sha256sum '$V1'/* > /dev/null"
if [ -z "${SKIP[zstd]:-}" ]; then
  measure zstd bash -c "zstd -q -T0 -3 -c '$V1'/* | wc -c > '$RES/zstd.out'"
  echo "$(cat "$RES/zstd.out") 1" > "$RES/zstd.stored"
fi

# ---- ckptsync CLI -----------------------------------------------------------------

# cli_bench KEY [enc]: snapshot v1, v1 again, v2, restore on a fresh state.
cli_bench() {
  local k=$1 CB=$S/repo/$1
  cks_conf "$CB.conf" "$CB" 0 "${2:-}"
  measure "$k.v1" "$CKS" --config "$CB.conf" snapshot "$V1" --run bench --step 100
  echo "$(bytes_of "$CB/a") 3" > "$RES/$k.v1.stored"
  measure "$k.unchanged" "$CKS" --config "$CB.conf" snapshot "$V1" --run bench --step 100
  before=$(bytes_of "$CB/a")
  measure "$k.v2" "$CKS" --config "$CB.conf" snapshot "$V2" --run bench --step 200
  after=$(bytes_of "$CB/a"); echo "$((after - before)) 3" > "$RES/$k.v2.stored"
  rm -rf "$CB/state"
  measure "$k.restore" "$CKS" --config "$CB.conf" restore --run bench --latest --to "$S/restore/$k"
  verify "$k.restore" "$S/restore/$k/checkpoint-200"
  rm -rf "$S/restore/$k" "$CB" "$CB.key"
}
say "ckptsync snapshot / restore"
cli_bench cli
if [ "${PIPELINE_ENCRYPTED:-1}" = 1 ]; then
  say "ckptsync snapshot / restore, encrypted repository"
  cli_bench cli-enc enc
fi

# ---- ckptsync daemon --------------------------------------------------------------

# daemon_bench KEY [enc]: v1 then v2 renamed into the watch folder.
daemon_bench() {
  local k=$1 DB=$S/repo/$1
  cks_conf "$DB.conf" "$DB" 0 "${2:-}"
  cp -r "$V1" "$DB/stage/checkpoint-100"
  cp -r "$V2" "$DB/stage/checkpoint-200"
  "$CKSD" --config "$DB.conf" >> "$LOGS/$k.log" 2>&1 &
  DPID=$!
  for _ in $(seq 100); do "$CKS" --config "$DB.conf" status > /dev/null 2>&1 && break; sleep 0.1; done
  daemon_commit "$k.v1" "$DB" "$DB.conf" checkpoint-100
  echo "$(bytes_of "$DB/a") 3" > "$RES/$k.v1.stored"
  before=$(bytes_of "$DB/a")
  daemon_commit "$k.v2" "$DB" "$DB.conf" checkpoint-200
  after=$(bytes_of "$DB/a"); echo "$((after - before)) 3" > "$RES/$k.v2.stored"
  kill "$DPID"; wait "$DPID" 2> /dev/null || true
  DPID=
  rm -rf "$DB" "$DB.key"
}
say "ckptsyncd: commit --wait durable / replicated"
daemon_bench daemon
if [ "${PIPELINE_ENCRYPTED:-1}" = 1 ]; then
  say "ckptsyncd, encrypted repository"
  daemon_bench daemon-enc enc
fi

# ---- peers --------------------------------------------------------------------------

for t in $TOOLS; do
  if [ -n "${SKIP[$t]:-}" ]; then say "skipping $t: ${SKIP[$t]}"; continue; fi
  say "$t"
  R=$S/repo/$t
  case $t in
    restic)
      export RESTIC_PASSWORD=ckptsync-bench RESTIC_CACHE_DIR=$S/cache/restic
      restic init -q --repository-version 2 --repo "$R" >> "$LOG" 2>&1
      (cd "$DATA" && measure restic.v1 restic -q --repo "$R" backup --compression auto checkpoint-100)
      echo "$(bytes_of "$R") 1" > "$RES/restic.v1.stored"
      before=$(bytes_of "$R")
      (cd "$DATA" && measure restic.v2 restic -q --repo "$R" backup --compression auto checkpoint-200)
      after=$(bytes_of "$R"); echo "$((after - before)) 1" > "$RES/restic.v2.stored"
      measure restic.restore restic -q --repo "$R" restore latest --target "$S/restore/restic"
      verify restic.restore "$S/restore/restic/checkpoint-200"
      ;;
    borg)
      export BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes BORG_BASE_DIR=$S/cache/borg
      borg init -e none "$R" >> "$LOG" 2>&1
      (cd "$DATA" && measure borg.v1 borg create --compression zstd,3 "$R::v1" checkpoint-100)
      echo "$(bytes_of "$R") 1" > "$RES/borg.v1.stored"
      before=$(bytes_of "$R")
      (cd "$DATA" && measure borg.v2 borg create --compression zstd,3 "$R::v2" checkpoint-200)
      after=$(bytes_of "$R"); echo "$((after - before)) 1" > "$RES/borg.v2.stored"
      mkdir -p "$S/restore/borg"
      (cd "$S/restore/borg" && measure borg.restore borg extract "$R::v2")
      verify borg.restore "$S/restore/borg/checkpoint-200"
      ;;
    casync)
      mkdir -p "$R"
      measure casync.v1 casync make --compression=zstd --store="$R/store" "$R/v1.caidx" "$V1"
      echo "$(bytes_of "$R") 1" > "$RES/casync.v1.stored"
      before=$(bytes_of "$R")
      measure casync.v2 casync make --compression=zstd --store="$R/store" "$R/v2.caidx" "$V2"
      after=$(bytes_of "$R"); echo "$((after - before)) 1" > "$RES/casync.v2.stored"
      measure casync.restore casync extract --store="$R/store" "$R/v2.caidx" "$S/restore/casync"
      verify casync.restore "$S/restore/casync"
      ;;
    rclone)
      measure rclone.v1 rclone copy "$V1" "$R/checkpoint-100"
      echo "$(bytes_of "$R") 1" > "$RES/rclone.v1.stored"
      measure rclone.restore rclone copy "$V2" "$S/restore/rclone"
      verify rclone.restore "$S/restore/rclone"
      ;;
  esac
  rm -rf "$R" "$S/restore/$t"
done

# ---- scaling on tmpfs -----------------------------------------------------------------

NCPU=$(nproc)
SHM=$(mktemp -d /dev/shm/cks-pipe.XXXXXX)
shm_free=$(df -Pm "$SHM" | awk 'NR == 2 {print $4}')
if [ "$shm_free" -ge $((SCALE_MIB * 6)) ]; then
  say "scaling on tmpfs (${SCALE_MIB} MiB): workers 1 and $NCPU"
  /usr/bin/python3 "$top/tests/bench/make_ckpt.py" "$SHM/checkpoint-1" "$SCALE_MIB" >> "$LOG" 2>&1
  SCALE_BYTES=$(bytes_of "$SHM/checkpoint-1")
  for w in 1 "$NCPU"; do
    B=$SHM/w$w
    cks_conf "$B.conf" "$B" "$w"
    measure "scale.snapshot.$w" "$CKS" --config "$B.conf" snapshot "$SHM/checkpoint-1" --run bench
    rm -rf "$B/state"
    measure "scale.restore.$w" "$CKS" --config "$B.conf" restore --run bench --latest --to "$B/out"
    rm -rf "$B"
  done
else
  say "skipping the tmpfs scaling runs: $SHM has $shm_free MiB free"
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report ---------------------------------------------------------------------------

gb=$(awk -v b="$BYTES" 'BEGIN {printf "%.3f", b / 1e9}')
row() { # row LABEL KEY [STORED_KEY]
  local f=$RES/$2 st=${3:-$2}
  [ -f "$f" ] || return 0
  read -r wall cpu rss < "$f"
  local stored="" copies="" extra=""
  [ -f "$RES/$st.stored" ] && read -r stored copies < "$RES/$st.stored"
  [ -f "$RES/$2.durable" ] && extra=" (durable $(cat "$RES/$2.durable") s)"
  [ -f "$RES/$2.verify" ] && extra="$extra, restored tree $(cat "$RES/$2.verify")"
  awk -v l="$1" -v w="$wall" -v c="$cpu" -v r="$rss" -v g="$gb" -v s="$stored" -v n="$copies" -v x="$extra" \
    'BEGIN {printf "| %s | %.2f%s | %.2f | %.2f | %.0f | %s |\n", l, w, x, c, c / g, r / 1024,
            s == "" ? "" : sprintf("%.0f MiB x %d", s / 1048576, n)}'
}
ratio() { # ratio LABEL KEY_A FIELD_A KEY_B FIELD_B TARGET
  [ -f "$RES/$2" ] && [ -f "$RES/$4" ] || return 0
  local a b
  a=$(awk -v f="$3" '{print $f}' "$RES/$2")
  b=$(awk -v f="$5" '{print $f}' "$RES/$4")
  awk -v l="$1" -v a="$a" -v b="$b" -v t="$6" \
    'BEGIN {r = b > 0 ? a / b : 0; printf "| %s | %.2f | %s | %s |\n", l, r, t, r <= t ? "met" : "missed"}'
}
report() {
  echo "## Pipeline benchmark (tests/bench/pipeline.sh $SIZE_MIB)"
  echo
  echo "Run $(date -u +%Y-%m-%dT%H:%MZ), ckptsync $(git -C "$top" describe --always --dirty 2> /dev/null || echo ?)."
  machine | sed 's/^/- /'
  echo "- data: checkpoint-100 written by tests/bench/make_ckpt.py with python3-torch" \
    "($(awk -v b="$BYTES" 'BEGIN {printf "%.2f GB", b / 1e9}'): bf16 weights, fp32 master weights," \
    "fp32 Adam moments), checkpoint-200 its fine-tune successor (1 layer in 10 changed)"
  echo
  echo "| step | wall s | CPU s | CPU s/GB | peak RSS MiB | stored |"
  echo "|---|---|---|---|---|---|"
  row "cp -r to 3 dirs + sync (disk bound)" cp3
  row "sha256sum (1 core)" sha256sum
  row "zstd -T0 -3 (all cores)" zstd
  row "ckptsync snapshot v1, 3 regions" cli.v1
  row "ckptsync snapshot v1 again (unchanged)" cli.unchanged
  row "ckptsync snapshot v2 (successor)" cli.v2
  row "ckptsyncd v1 to replicated, 3 regions" daemon.v1
  row "ckptsyncd v2 to replicated" daemon.v2
  row "restic backup v1 (1 copy)" restic.v1
  row "restic backup v2" restic.v2
  row "borg create v1 (1 copy)" borg.v1
  row "borg create v2" borg.v2
  row "casync make v1 (1 copy)" casync.v1
  row "casync make v2" casync.v2
  row "rclone copy v1 (1 copy)" rclone.v1
  row "ckptsync restore v2 (fresh instance)" cli.restore
  row "restic restore v2" restic.restore
  row "borg extract v2" borg.restore
  row "casync extract v2" casync.restore
  row "rclone copy v2" rclone.restore
  row "ckptsync snapshot v1, encrypted" cli-enc.v1
  row "ckptsync snapshot v2, encrypted" cli-enc.v2
  row "ckptsyncd v1 to replicated, encrypted" daemon-enc.v1
  row "ckptsync restore v2, encrypted" cli-enc.restore
  echo
  echo "| ratio (same run) | value | target | |"
  echo "|---|---|---|---|"
  ratio "ckptsyncd time to replicated / cp -r x3 + sync" daemon.v1 1 cp3 1 1.25
  ratio "ckptsyncd CPU s (3 regions) / restic CPU s (1 copy)" daemon.v1 2 restic.v1 2 1.0
  ratio "ckptsync snapshot CPU s (3 regions) / restic CPU s (1 copy)" cli.v1 2 restic.v1 2 1.0
  ratio "ckptsync restore / restic restore" cli.restore 1 restic.restore 1 0.8
  ratio "ckptsync restore / rclone copy" cli.restore 1 rclone.restore 1 1.0
  ratio "encrypted / plain: ckptsync snapshot v1 CPU s" cli-enc.v1 2 cli.v1 2 1.10
  ratio "encrypted / plain: ckptsyncd v1 CPU s" daemon-enc.v1 2 daemon.v1 2 1.10
  ratio "encrypted / plain: ckptsync restore CPU s" cli-enc.restore 2 cli.restore 2 1.10
  [ -f "$RES/cli.unchanged" ] && awk -v w="$(cut -d' ' -f1 "$RES/cli.unchanged")" \
    'BEGIN {printf "| ckptsync snapshot of the unchanged tree, wall s (not a ratio) | %.2f | < 1 s | %s |\n", w, w < 1 ? "met" : "missed"}'
  if [ -f "$RES/scale.snapshot.1" ]; then
    echo
    echo "Scaling on tmpfs ($(awk -v b="$SCALE_BYTES" 'BEGIN {printf "%.2f GB", b / 1e9}'), CPU bound):"
    echo
    echo "| step | workers = 1, wall s | workers = $NCPU, wall s | speed-up | target |"
    echo "|---|---|---|---|---|"
    for k in snapshot restore; do
      awk -v k="$k" -v n="$NCPU" -v a="$(cut -d' ' -f1 "$RES/scale.$k.1")" \
        -v b="$(cut -d' ' -f1 "$RES/scale.$k.$NCPU")" \
        'BEGIN {printf "| %s | %.2f | %.2f | %.2fx | >= 1.7x (2 cores) |\n", k, a, b, (b > 0 ? a / b : 0)}'
    done
  fi
}
report | tee "$RES/report.md"
if [ "${WRITE_RESULTS:-0}" = 1 ]; then
  # Only the pipeline's own section is replaced: other benchmarks
  # (codec.sh, crypt-cost.sh) keep theirs.
  python3 - "$top/tests/bench/RESULTS.md" "$RES/report.md" <<'PY'
import os, re, sys
path, report = sys.argv[1], open(sys.argv[2]).read().rstrip() + "\n"
text = open(path).read() if os.path.exists(path) else ""
rest = re.sub(r"\A## Pipeline benchmark.*?(?=^## |\Z)", "", text, flags=re.S | re.M).strip()
open(path, "w").write(report + ("\n" + rest + "\n" if rest else ""))
PY
  say "wrote tests/bench/RESULTS.md"
fi
