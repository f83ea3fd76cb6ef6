#!/usr/bin/env bash
# prune-cost.sh — what retention and pruning cost, next to restic's prune
# on the same data, in the same run.  A benchmark, not a test: it prints
# times, requests and ratios and never fails on time.
#
#   tests/bench/prune-cost.sh BUILD_DIR [CHUNKS...]     default CHUNKS: 10000 100000
#
# BUILD_DIR holds a release build (ckptsync, ckptsyncd):
#   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKS_TESTS=OFF
#   cmake --build build-rel -j2
#
# Environment:
#   BENCH_DIR       where the scratch directory goes (default /tmp); removed
#                   at the end.  Needs about 16 KiB per chunk of the largest N
#                   (each chunk is a file in three regions), 28 KiB with
#                   CKS_BENCH_PERF.
#   CKS_BENCH_S3=1  also run steps 1-2 on three s3rver test servers (tests/s3),
#                   for each N up to CKS_BENCH_S3_MAX (default 10000): slow,
#                   every chunk is a PUT to a node process on this machine
#                   (about 45 s of setup per 2000 chunks on 2 cores)
#   CKS_BENCH_PERF=1  record `perf record -g` of one more prune of the largest
#                   N (on a copy of the repository, after the timed ones, so
#                   the timings are not disturbed) and print the top symbols
#   BENCH_K         checkpoints committed to the daemon in step 3 (default 20)
#   BENCH_KEEP=1    keep the scratch directory (results/, logs/) for a look
#
# What it does:
# 1. For each N: ten snapshots ("bench", steps 1..10) of N/10 chunks each of
#    random bytes (two files per checkpoint), with a tiny chunker (min 256,
#    avg 1K, max 4K) so that N chunks are N KiB-ish, into three dir regions;
#    then `forget --run bench --keep-last 5`: half of the chunks are garbage.
#    The setup runs under eatmydata when it can be installed (it only makes
#    the setup's fsyncs free; nothing timed runs under it).  The same files
#    again with the embedded default chunker (512K/2M/8M): about as many
#    chunks as restic makes blobs, for a like-for-like ratio.
# 2. Timed, from cold page caches, under /usr/bin/time -v, each up to a
#    final sync: `prune --dry-run`, `prune --grace 0` (deletes the garbage),
#    `prune --grace 0` again (nothing to delete: the steady-state cost of a
#    scheduled prune).  From --json: chunks listed, marked, deleted and
#    requests per region.
# 3. ckptsyncd with [retention.bench2] keep_last = 3 (settle = 1) on a fresh
#    repository: K checkpoints (256 KiB shared + 192 KiB new + a json) moved
#    into the watch directory one after another, each `commit --wait
#    replicated`; the daemon's "retention of run 'bench2' after ID: forgot X
#    of Y snapshot(s) (T s)" lines give T per retention pass.  The same K
#    commits, same data, on a second fresh repository without a policy give
#    the commit time retention is compared with.
# 4. restic (one local repository): one `backup` per checkpoint folder of
#    step 1's data, `forget --keep-last 5 --group-by host`, then a timed
#    `restic prune`.  ckptsync's prune time is shown as a ratio to it.
set -euo pipefail

usage() { echo "usage: $0 BUILD_DIR [CHUNKS...]   (default CHUNKS: 10000 100000)" >&2; exit 2; }
case ${1:-} in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;; esac
[ $# -ge 1 ] || usage
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" 2> /dev/null && pwd) || { echo "prune-cost.sh: no directory $1" >&2; exit 2; }
shift
CHUNKS=("$@")
[ ${#CHUNKS[@]} -gt 0 ] || CHUNKS=(10000 100000)
for n in "${CHUNKS[@]}"; do
  case $n in '' | *[!0-9]*) usage ;; esac
  [ "$n" -ge 100 ] || { echo "prune-cost.sh: CHUNKS must be at least 100" >&2; exit 2; }
done
K=${BENCH_K:-20}
case $K in '' | *[!0-9]*) echo "prune-cost.sh: BENCH_K must be a number" >&2; exit 2 ;; esac
[ "$K" -ge 4 ] || { echo "prune-cost.sh: BENCH_K must be at least 4" >&2; exit 2; }
export CKPTSYNC=$build/ckptsync CKPTSYNCD=$build/ckptsyncd CKS_SOURCE_DIR=$top
[ -x "$CKPTSYNC" ] && [ -x "$CKPTSYNCD" ] ||
  { echo "prune-cost.sh: no ckptsync/ckptsyncd in $build; build it first (see $0 --help)" >&2; exit 1; }
CMDLINE="${CKS_BENCH_S3:+CKS_BENCH_S3=1 }${CKS_BENCH_S3_MAX:+CKS_BENCH_S3_MAX=$CKS_BENCH_S3_MAX }${CKS_BENCH_PERF:+CKS_BENCH_PERF=1 }${BENCH_K:+BENCH_K=$K }"
CMDLINE+="tests/bench/prune-cost.sh $build ${CHUNKS[*]}"

S=$(mktemp -d "${BENCH_DIR:-/tmp}/cks-prune.XXXXXX")
if [ -n "${BENCH_KEEP:-}" ]; then trap 'echo "prune-cost: scratch kept: $S" >&2' EXIT; else trap 'rm -rf "$S"' EXIT; fi
RES=$S/results LOGS=$S/logs
mkdir -p "$RES" "$LOGS" "$S/cache"
export TMPDIR=$S XDG_CACHE_HOME=$S/cache   # lib.sh's scratch directories go under $S

say() { echo "prune-cost: $*" >&2; }

NMAX=$(printf '%s\n' "${CHUNKS[@]}" | sort -n | tail -1)
need=$((NMAX * ${CKS_BENCH_PERF:+28}${CKS_BENCH_PERF:-16} / 1024 + 64))
avail=$(df -Pm "$S" | awk 'NR == 2 {print $4}')
[ "$avail" -ge "$need" ] ||
  { echo "prune-cost.sh: $S has $avail MiB free, needs about $need MiB" >&2; exit 1; }

# ---- tools ----------------------------------------------------------------

apt_updated=0
# ensure_tool COMMAND PACKAGE: installs PACKAGE (as root, apt-get) if COMMAND
# is missing; returns 1 if it still is.
ensure_tool() {
  local cmd=$1 pkg=$2 cand
  command -v "$cmd" > /dev/null && return 0
  [ "$(id -u)" -eq 0 ] || { say "$cmd not installed, and installing $pkg needs root"; return 1; }
  cand=$(apt-cache policy "$pkg" 2> /dev/null | awk '/Candidate:/ {print $2}')
  if { [ -z "$cand" ] || [ "$cand" = "(none)" ]; } && [ $apt_updated -eq 0 ]; then
    apt-get update -qq > /dev/null 2>&1 || true
    apt_updated=1
    cand=$(apt-cache policy "$pkg" 2> /dev/null | awk '/Candidate:/ {print $2}')
  fi
  [ -n "$cand" ] && [ "$cand" != "(none)" ] || { say "no Debian package $pkg available here"; return 1; }
  say "installing $pkg $cand"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" \
    > "$LOGS/apt-$pkg.log" 2>&1 || { say "apt-get install $pkg failed: $(tail -1 "$LOGS/apt-$pkg.log")"; }
  command -v "$cmd" > /dev/null
}

TIMEV=
if ensure_tool /usr/bin/time time; then TIMEV=/usr/bin/time; else say "no /usr/bin/time: peak RSS not measured"; fi
HAVE_RESTIC=1
ensure_tool restic restic || { HAVE_RESTIC=0; say "restic missing: no ratio"; }
EMD=()
if ensure_tool eatmydata eatmydata; then EMD=(eatmydata); else say "no eatmydata: the setup fsyncs every object (slow)"; fi
if [ -n "${CKS_BENCH_PERF:-}" ]; then
  ensure_tool perf linux-perf || { say "no perf: CKS_BENCH_PERF ignored"; CKS_BENCH_PERF=; }
fi

# ---- the machine ----------------------------------------------------------

CAN_DROP=0
sync
if (echo 3 > /proc/sys/vm/drop_caches) 2> /dev/null; then CAN_DROP=1; fi
drop_caches() {
  sync
  if [ $CAN_DROP -eq 1 ]; then echo 3 > /proc/sys/vm/drop_caches 2> /dev/null || true; fi
}
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# timed KEY CMD...: from cold caches, CMD under /usr/bin/time -v; its stdout
# in $RES/KEY.out, stderr in $RES/KEY.err, time -v's report in $RES/KEY.time,
# and "seconds (up to a final sync)" in $RES/KEY.sec.  Returns CMD's status.
timed() {
  local key=$1 t0 t1 rc=0
  shift
  drop_caches
  t0=$(date +%s.%N)
  if [ -n "$TIMEV" ]; then
    "$TIMEV" -v -o "$RES/$key.time" "$@" > "$RES/$key.out" 2> "$RES/$key.err" || rc=$?
  else
    "$@" > "$RES/$key.out" 2> "$RES/$key.err" || rc=$?
  fi
  sync
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f\n", b - a}' > "$RES/$key.sec"
  [ $rc -eq 0 ] || { say "$key: exit $rc"; tail -5 "$RES/$key.err" >&2; }
  return $rc
}

# ---- data -----------------------------------------------------------------

AVG_CHUNK=1240   # mean chunk of random bytes with min 256, avg 1K, max 4K
# make_data DIR N: DIR/checkpoint-1..10, each about N/10 chunks of random bytes.
make_data() {
  local dir=$1 n=$2 s bytes
  bytes=$((n * AVG_CHUNK / 10))
  for s in $(seq 1 10); do
    mkdir -p "$dir/checkpoint-$s"
    head -c $((bytes * 2 / 3)) /dev/urandom > "$dir/checkpoint-$s/model.safetensors"
    head -c $((bytes - bytes * 2 / 3)) /dev/urandom > "$dir/checkpoint-$s/optimizer.pt"
    printf '{"global_step": %d}\n' "$s" > "$dir/checkpoint-$s/trainer_state.json"
  done
}

# ---- steps 1 and 2: ckptsync prune (runs in a subshell: lib.sh's scratch) ----

# prune_suite KEY KIND N DATA MIN AVG MAX: KIND dir or s3; the chunker.
prune_suite() {
  local key=$1 kind=$2 n=$3 data=$4 s do_perf=0
  export CKS_REGIONS=$kind
  . "$top/tests/integration/lib.sh"
  write_config "$5" "$6" "$7"
  say "$key: 10 snapshots, chunker $5/$6/$7 (setup${EMD[*]:+, under eatmydata})"
  local t0=$SECONDS
  for s in $(seq 1 10); do
    "${EMD[@]}" "$CKPTSYNC" --config "$CONF" snapshot "$data/checkpoint-$s" --run bench --step "$s" \
      -q >> "$LOGS/$key.setup.log" 2>&1 || { tail -5 "$LOGS/$key.setup.log" >&2; die "snapshot $s"; }
  done
  cks forget --run bench --keep-last 5 --json > "$RES/$key.forget.json" 2>> "$LOGS/$key.setup.log"
  echo $((SECONDS - t0)) > "$RES/$key.setup.sec"
  if [ -n "${CKS_BENCH_PERF:-}" ] && [ "$key" = "dir-$NMAX" ]; then
    do_perf=1 # a copy of the repository for the profiled prune, made before the timed ones
    "${EMD[@]}" cp -a "$T/regions" "$T/perf-regions"
    "${EMD[@]}" cp -a "$STATE" "$T/perf-state"
    sed -e "s|$T/regions/|$T/perf-regions/|" -e "s|^state = .*|state = $T/perf-state|" "$CONF" > "$T/perf.conf"
  fi
  say "$key: prune --dry-run, prune --grace 0, prune --grace 0 again"
  timed "$key.dry" "$CKPTSYNC" --config "$CONF" prune --dry-run --json
  timed "$key.prune" "$CKPTSYNC" --config "$CONF" prune --grace 0 --json
  timed "$key.again" "$CKPTSYNC" --config "$CONF" prune --grace 0 --json
  if [ $do_perf = 1 ]; then
    say "$key: perf record -g of one more prune --grace 0 (on a copy)"
    drop_caches
    perf record -g -o "$T/perf.data" -- "$CKPTSYNC" --config "$T/perf.conf" prune --grace 0 -q \
      > "$LOGS/perf-record.log" 2>&1 || say "perf record failed: $(tail -1 "$LOGS/perf-record.log")"
    perf report -i "$T/perf.data" --stdio --no-children -g none --percent-limit 0.5 2> /dev/null |
      grep -E '^ +[0-9.]+%' | sed -n 1,20p > "$RES/perf.flat" || true
    perf report -i "$T/perf.data" --stdio --no-children 2> /dev/null | sed -n 1,60p > "$RES/perf.txt" || true
  fi
}

# ---- step 3: the daemon's retention ---------------------------------------------

# make_ckpts DIR K: DIR/checkpoint-1..K: frozen.bin (the same in all), a
# new model.bin, a json.
make_ckpts() {
  local dir=$1 k=$2 s
  mkdir -p "$dir"
  head -c $((256 << 10)) /dev/urandom > "$dir/frozen.bin"
  for s in $(seq 1 "$k"); do
    mkdir -p "$dir/checkpoint-$s"
    cp "$dir/frozen.bin" "$dir/checkpoint-$s/frozen.bin"
    head -c $((192 << 10)) /dev/urandom > "$dir/checkpoint-$s/model.bin"
    printf '{"step": %d}\n' "$s" > "$dir/checkpoint-$s/meta.json"
  done
}

# retention_suite LABEL POLICY(0|1) CKPTS: K commits to a fresh daemon.  With
# the policy, each commit from the 4th on is followed by a wait for the
# retention pass after it (the daemon looks for work every 3 s), so that each
# pass is about one snapshot and never overlaps the next commit; without it,
# each commit is followed by the same pause the policy run had there, so that
# both runs go at the same pace.
retention_suite() {
  local label=$1 policy=$2 ckpts=$3 s t0 t1 t2 id='' w
  export CKS_REGIONS=dir
  . "$top/tests/integration/lib.sh"
  write_config 16K 64K 256K
  set_settle 1
  if [ "$policy" = 1 ]; then printf '[retention.bench2]\nkeep_last = 3\n' >> "$CONF"; fi
  start_daemon # (no extra arguments)
  mkdir -p "$T/watch/bench2"
  : > "$RES/ret-$label.commits"
  for s in $(seq 1 "$K"); do
    # copied beside the watch root (same file system), then renamed into
    # the run: the unit appears whole
    cp -a "$ckpts/checkpoint-$s" "$T/stage-$s"
    mv "$T/stage-$s" "$T/watch/bench2/checkpoint-$s"
    t0=$(date +%s.%N)
    cks commit "$T/watch/bench2/checkpoint-$s" --step "$s" --wait replicated --json \
      > "$T/commit.json" 2>> "$LOGS/ret-$label.err" || { cat "$T/commit.json" >&2; die "commit $s"; }
    t1=$(date +%s.%N)
    id=$(json "$T/commit.json" 'd.get("id") or d.get("snapshot") or "?"')
    if [ "$policy" = 1 ] && [ "$s" -gt 3 ]; then
      w=0
      while ! grep -q "retention of run 'bench2' after $id" "$T/daemon.log" && [ $w -lt 100 ]; do
        sleep 0.05
        w=$((w + 1))
      done
    elif [ "$policy" = 0 ] && [ -s "$RES/ret-policy.commits" ]; then
      sleep "$(awk -v s="$s" '$1 == s {d = $5 - $3; if (d < 0) d = 0; printf "%.3f", d}' "$RES/ret-policy.commits")"
    fi
    t2=$(date +%s.%N)
    echo "$s $t0 $t1 $id $t2" >> "$RES/ret-$label.commits"
  done
  stop_daemon
  cp "$T/daemon.log" "$RES/ret-$label.daemon.log"
  cks ls --remote --run bench2 --json > "$RES/ret-$label.ls.json" 2> /dev/null || echo '[]' > "$RES/ret-$label.ls.json"
  find "$T/regions" -path '*/forget/*' -type f | wc -l > "$RES/ret-$label.forget_records"
}

# ---- step 4: restic ---------------------------------------------------------------

restic_suite() {
  local n=$1 data=$2 R=$S/restic-$1 s
  export RESTIC_PASSWORD=ckptsync-bench RESTIC_CACHE_DIR=$S/cache/restic RESTIC_REPOSITORY=$R
  say "restic, $n-chunk data: init, 10 backups, forget --keep-last 5, prune"
  restic init -q > "$LOGS/restic-$n.log" 2>&1
  cd "$data"
  for s in $(seq 1 10); do restic backup -q "checkpoint-$s" >> "$LOGS/restic-$n.log" 2>&1; done
  restic list blobs 2>> "$LOGS/restic-$n.log" | wc -l > "$RES/restic-$n.blobs"
  restic list blobs 2>> "$LOGS/restic-$n.log" | awk '$1 == "data"' | wc -l > "$RES/restic-$n.datablobs"
  restic list packs 2>> "$LOGS/restic-$n.log" | wc -l > "$RES/restic-$n.packs"
  restic forget -q --keep-last 5 --group-by host >> "$LOGS/restic-$n.log" 2>&1
  timed "restic-$n.prune" restic prune
  restic list blobs 2>> "$LOGS/restic-$n.log" | wc -l > "$RES/restic-$n.blobs_after"
  restic list packs 2>> "$LOGS/restic-$n.log" | wc -l > "$RES/restic-$n.packs_after"
  rm -rf "$R"
}

# ---- the run ---------------------------------------------------------------------

# run_sub LABEL FUNCTION ARGS...: in a subshell with set -e (not under ||, where
# bash would ignore it); a failure is reported, not fatal.
run_sub() {
  local label=$1 rc
  shift
  set +e
  (
    set -e
    "$@"
  )
  rc=$?
  set -e
  case $rc in
    0) ;;
    77) say "$label: skipped"; echo "skipped" > "$RES/$label.failed" ;;
    *) say "$label: FAILED (exit $rc)"; echo "exit $rc" > "$RES/$label.failed" ;;
  esac
}

export NMAX
S3_MAX=${CKS_BENCH_S3_MAX:-10000}
T_ALL=$SECONDS
for n in "${CHUNKS[@]}"; do
  say "writing ~$((n * AVG_CHUNK / 1024)) KiB of random checkpoints for $n chunks"
  make_data "$S/data-$n" "$n"
  du -sb --apparent-size "$S/data-$n" | cut -f1 > "$RES/data-$n.bytes"
  run_sub "dir-$n" prune_suite "dir-$n" dir "$n" "$S/data-$n" 256 1K 4K
  # the same files with the embedded default chunker: about as many chunks
  # as restic makes blobs, the like-for-like ratio
  run_sub "dirdef-$n" prune_suite "dirdef-$n" dir "$n" "$S/data-$n" 512K 2M 8M
  if [ -n "${CKS_BENCH_S3:-}" ]; then
    if [ "$n" -le "$S3_MAX" ]; then run_sub "s3-$n" prune_suite "s3-$n" s3 "$n" "$S/data-$n" 256 1K 4K
    else say "s3, $n chunks: skipped (more than CKS_BENCH_S3_MAX=$S3_MAX)"; echo "skipped: N > CKS_BENCH_S3_MAX" > "$RES/s3-$n.failed"; fi
  fi
  if [ $HAVE_RESTIC = 1 ]; then run_sub "restic-$n" restic_suite "$n" "$S/data-$n"; fi
  rm -rf "${S:?}/data-$n"
done
say "daemon: $K commits with [retention.bench2] keep_last = 3, then the same without a policy"
make_ckpts "$S/ckpts" "$K"
run_sub ret-policy retention_suite policy 1 "$S/ckpts"
run_sub ret-none retention_suite none 0 "$S/ckpts"
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report ----------------------------------------------------------------------

{
  echo "ckptsync prune cost, $(date -u +%Y-%m-%dT%H:%MZ), $("$CKPTSYNC" --version 2>&1 | sed -n 1p)"
  echo "cpu: $(nproc) x $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)," \
    "memory $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), kernel $(uname -r)"
  read -r src fstype < <(findmnt -no SOURCE,FSTYPE -T "$S" 2> /dev/null || echo "? ?")
  echo "disk: $src ($fstype), scratch $S"
  echo "load average (1/5/15 min): $LOAD_BEFORE before, $LOAD_AFTER after (other work on the machine slows every step)"
  if [ $CAN_DROP -eq 1 ]; then echo "page caches: dropped before every timed command"
  else echo "page caches: NOT dropped (not permitted here): listings may be warm"; fi
  [ $HAVE_RESTIC = 1 ] && echo "restic: $(restic version | awk '{print $1, $2}')"
  echo "total run time: $((SECONDS - T_ALL)) s"
} > "$RES/header"

KINDS="dir dirdef${CKS_BENCH_S3:+ s3}"
python3 - "$RES" "$KINDS" "$K" "$CMDLINE" "${CHUNKS[@]}" << 'PY'
import json, os, re, statistics, sys

res, kinds, K, cmdline = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4]
chunks = [int(x) for x in sys.argv[5:]]

def path(k): return os.path.join(res, k)
def get(k):
    return open(path(k)).read().strip() if os.path.exists(path(k)) else None
def num(k):
    v = get(k)
    try: return float(v) if v is not None else None
    except ValueError: return None
def js(k):
    try: return json.loads(get(k) or "null")
    except ValueError: return None
def rss_mib(k):
    t = get(k + ".time") or ""
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", t)
    return int(m.group(1)) / 1024 if m else None
def cpu_s(k):
    t = get(k + ".time") or ""
    u = re.search(r"User time \(seconds\): ([\d.]+)", t)
    s = re.search(r"System time \(seconds\): ([\d.]+)", t)
    return float(u.group(1)) + float(s.group(1)) if u and s else None
def f(v, fmt):
    return "-" if v is None else fmt % v

print(get("header"))
print()
print("## Prune (steps 1-2): 10 snapshots (run bench, steps 1..10) of N/10 chunks each of random"
      " bytes (N counted with the 256/1K/4K chunker), `forget --keep-last 5`, then:")
print()
print("| regions | N | data MiB | chunks / region | command | seconds | cpu s | requests (all regions) "
      "| requests / 1k chunks | peak RSS MiB | marked | deleted (all regions) | vs restic prune |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
notes = []
for n in chunks:
    data = num("data-%d.bytes" % n)
    rsec = num("restic-%d.prune.sec" % n)
    for kind in kinds:
        key = "%s-%d" % (kind, n)
        kind = {"dir": "dir, chunker 256/1K/4K", "dirdef": "dir, chunker 512K/2M/8M (default)",
                "s3": "s3rver, chunker 256/1K/4K"}[kind]
        if get(key + ".failed"):
            why = get(key + ".failed")
            print("| %s | %d | | | %s | | | | | | | | |" % (
                kind, n, why if why.startswith("skipped") else "FAILED (%s)" % why))
            continue
        for step, label in (("dry", "prune --dry-run"), ("prune", "prune --grace 0"),
                            ("again", "prune --grace 0, again (nothing to delete)")):
            d = js("%s.%s.out" % (key, step))
            sec = num("%s.%s.sec" % (key, step))
            if not d:
                print("| %s | %d | | | %s: no result | | | | | | | | |" % (kind, n, label))
                continue
            regs = d["regions"]
            listed = [r["chunks"] for r in regs]
            lst = str(listed[0]) if len(set(listed)) == 1 else "/".join(map(str, listed))
            req = sum(r["requests"] for r in regs)
            per_k = req / (sum(listed) / 1000) if sum(listed) else None
            ratio = "%.2fx" % (sec / rsec) if (step == "prune" and rsec) else ""
            print("| %s | %d | %.1f | %s | `%s` | %s | %s | %d | %s | %s | %d | %d | %s |" % (
                kind, n, (data or 0) / 2**20, lst, label, f(sec, "%.2f"),
                f(cpu_s("%s.%s" % (key, step)), "%.2f"), req, f(per_k, "%.0f"),
                f(rss_mib("%s.%s" % (key, step)), "%.1f"), sum(r["marked"] for r in regs),
                sum(r["deleted"] for r in regs), ratio))
            bad = [r for r in regs if r.get("error")]
            if bad or not d.get("ok"):
                notes.append("%s %s: %s" % (key, label, "; ".join(r["name"] + ": " + r["error"] for r in bad) or "not ok"))
        fj = js(key + ".forget.json")
        if fj is not None:
            notes.append("%s: setup %s s, forget removed %s snapshot(s)" % (key, get(key + ".setup.sec"), fj.get("forgotten")))
    if rsec is not None:
        blobs, dblobs = num("restic-%d.blobs" % n), num("restic-%d.datablobs" % n)
        packs, packs2 = num("restic-%d.packs" % n), num("restic-%d.packs_after" % n)
        blobs2 = num("restic-%d.blobs_after" % n)
        print("| restic, 1 repo | %d | %.1f | %d blobs (%d data), %d packs | `restic prune` | %.2f | %s | - | - | %s | - "
              "| %d blobs, %d packs | 1x |" % (
                  n, (data or 0) / 2**20, blobs or 0, dblobs or 0, packs or 0, rsec,
                  f(cpu_s("restic-%d.prune" % n), "%.2f"), f(rss_mib("restic-%d.prune" % n), "%.1f"),
                  (blobs or 0) - (blobs2 or 0), (packs or 0) - (packs2 or 0)))
    elif get("restic-%d.failed" % n):
        print("| restic, 1 repo | %d | | | FAILED (%s) | | | | | | | | |" % (n, get("restic-%d.failed" % n)))
print()
print("seconds: wall clock, cold page caches, up to a final sync; cpu s: user + system (time -v);"
      " requests: the regions' own count (--json `requests`: a listing counts its pages, each delete one).")
print("vs restic prune: ckptsync's `prune --grace 0` seconds / restic's `prune` seconds on the same"
      " files, same run (above 1x restic is faster).  Not like for like: ckptsync prunes three"
      " regions (three copies), restic one repository; and restic's chunker (512 KiB-8 MiB) cuts"
      " these files into far fewer blobs than the 256 B-4 KiB test chunker makes chunks (both counts"
      " above): the default-chunker rows, with chunk counts near restic's blob counts, are the"
      " closer comparison.")
for x in notes:
    print("  " + x)

# ---- step 3 ----
print()
print("## Daemon retention (step 3): %d checkpoints (256 KiB shared + 192 KiB new + json), each "
      "`commit --wait replicated`, 3 dir regions, chunker 16K/64K/256K" % K)
print()
rows = {}
for label in ("policy", "none"):
    if get("ret-%s.failed" % label) or not get("ret-%s.commits" % label):
        rows[label] = None
        continue
    c = [l.split() for l in get("ret-%s.commits" % label).splitlines()]
    secs = [float(x[2]) - float(x[1]) for x in c]
    total = float(c[-1][4]) - float(c[0][1])
    log = get("ret-%s.daemon.log" % label) or ""
    passes = [(m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(4))) for m in
              re.finditer(r"retention of run 'bench2' after (\S+): forgot (\d+) of (\d+) snapshot\(s\) \(([\d.]+)s\)", log)]
    ls = js("ret-%s.ls.json" % label) or []
    rows[label] = dict(secs=secs, ids=[x[3] for x in c], total=total, passes=passes, kept=len(ls),
                       records=int(num("ret-%s.forget_records" % label) or 0))
print("| repository | commit s, mean | median | max | retention passes | snapshots forgotten "
      "| retention s / pass, mean | max | commit + retention s, mean | snapshots left | forget records (3 regions) | all %d, s |" % K)
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for label, name in (("policy", "`[retention.bench2] keep_last = 3`"), ("none", "no retention policy")):
    r = rows[label]
    if r is None:
        print("| %s | FAILED (%s) | | | | | | | | | | |" % (name, get("ret-%s.failed" % label)))
        continue
    p = r["passes"]
    ts = [x[3] for x in p]
    after = {x[0]: x[3] for x in p}
    both = [sec + after.get(i, 0.0) for sec, i in zip(r["secs"], r["ids"])]
    r["both"] = both
    print("| %s | %.3f | %.3f | %.3f | %d | %d | %s | %s | %.3f | %d | %d | %.1f |" % (
        name, statistics.mean(r["secs"]), statistics.median(r["secs"]), max(r["secs"]),
        len(p), sum(x[1] for x in p),
        f(statistics.mean(ts) if ts else None, "%.3f"), f(max(ts) if ts else None, "%.3f"),
        statistics.mean(both), r["kept"], r["records"], r["total"]))
if rows.get("policy") and rows.get("none"):
    a, b = rows["policy"], rows["none"]
    print()
    print("commit time with retention / without (same data, same pace): %.2fx mean, %.2fx median;"
          " (commit + its retention pass) / commit without: %.2fx mean." % (
              statistics.mean(a["secs"]) / statistics.mean(b["secs"]),
              statistics.median(a["secs"]) / statistics.median(b["secs"]),
              statistics.mean(a["both"]) / statistics.mean(b["secs"])))
    print("Retention runs on the daemon's own thread after a snapshot becomes durable (it looks every"
          " 3 s; the run waits for each pass before the next commit, the run without a policy pauses"
          " as long).  The daemon does not count its retention requests: the forget records (one per"
          " forgotten snapshot per region) are its PUTs, besides the listings and reads of each pass.")

perf = get("perf.txt")
if perf:
    print()
    print("## perf record -g, one more `prune --grace 0` of N = %d (on a copy of the repository made"
          " before the timed prunes)" % max(chunks))
    print()
    print("Top symbols (`perf report --stdio --no-children -g none`; on-CPU samples only: time spent"
          " waiting for fsync or the disk is not sampled):")
    print("```")
    flat = open(path("perf.flat")).read().rstrip("\n") if os.path.exists(path("perf.flat")) else ""
    print(flat or "(none)")
    print("```")
    print("`perf report --stdio --no-children | sed -n 1,60p`:")
    print("```")
    print(perf)
    print("```")
print()
print("command: `%s`" % cmdline)
PY
