#!/usr/bin/env bash
# multinode-commit.sh — what committing a multi-node step costs, on three
# s3rver regions on loopback (tests/s3).
#
#   tests/bench/multinode-commit.sh [STEPS] [MIB] [BUILD_DIR]
#                                    default 100 steps, 64 MiB, build/
#
# 1. Commit latency: a job on four nodes (four daemons) writes STEPS DCP
#    steps (mnlayout.py: __K_0.distcp of 1..64 KiB on each node, .metadata
#    on node 0), one after another, every node committing at once.  Measured
#    from each region's point of view, from the servers' data directories:
#    the modification time of each object file (s3rver writes an object's
#    bytes into its file as the PUT arrives), so
#      per region:    commit record's time - the step's last part's time there
#      every region:  the last region's commit record - the last part to land
#                     in any region
#    p50 / p99 / max over the steps (goal: p99 <= 2 s).
# 2. Requests per commit per region: from the servers' request logs
#    (s3rver --verbose, one line per response), the requests that name the
#    step's parts, its merged snapshot or its commit record, and the
#    listings of its parts; the chunk and intent requests of the upload
#    are not counted.
# 3. Upload rate: MIB of incompressible data on one node of the job
#    (commit --wait replicated, nodes one at a time, then all four at
#    once) against a one-node daemon (nodes = 1) with MIB of other bytes of
#    the same kind.  All daemons and servers share this machine's cores, so
#    "all four at once" divides them four ways.
# Not a test: it never fails on time.
set -euo pipefail
steps=${1:-100}
mib=${2:-64}
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${3:-$top/build}
export CKPTSYNC=$build/ckptsync CKPTSYNCD=$build/ckptsyncd CKS_SOURCE_DIR=$top
[ -x "$CKPTSYNC" ] && [ -x "$CKPTSYNCD" ] || { echo "build first: deploy/build.sh" >&2; exit 1; }
"$top/tests/s3/setup.sh" --quiet > /dev/null
. "$top/tests/integration/lib.sh"
. "$top/tests/integration/s3lib.sh"
for r in a b c; do start_s3 "$r" --verbose; done
write_config_s3 512K 2M 8M
. "$top/tests/integration/mnrand.sh"
MN_N=4
for k in 0 1 2 3; do inst "n$k" nodes=4 node_rank=$k settle=3600; done
inst solo settle=3600
for k in 0 1 2 3; do idaemon "n$k"; done
idaemon solo
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- 1 and 2: STEPS small steps ---------------------------------------------
for i in $(seq 1 "$steps"); do
  s=$((i * 100))
  MN_UNIT[$s]=$(python3 "$top/tests/integration/mnlayout.py" dcp "$s" 4 "$T" "bench" 64)
  pids=()
  for k in 0 1 2 3; do mn_commit "$k" "$s" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || { cat "$T"/commit-*.out >&2; die "a commit of step $s failed"; }; done
  for _ in $(seq 1 600); do [ "$(mn_commits "$s")" = "1 1 1" ] && break; sleep 0.05; done
  [ "$(mn_commits "$s")" = "1 1 1" ] || die "step $s: commit records $(mn_commits "$s")"
  printf '\rstep %d of %d committed' "$i" "$steps" >&2
done
echo >&2
for _ in $(seq 1 100); do [ "$(mn_queued)" = 0 ] && break; sleep 0.1; done
python3 - "$T" "$steps" <<'PY' > "$T/commit.txt"
import os, re, sys, statistics
from urllib.parse import unquote
T, steps = sys.argv[1], int(sys.argv[2])
regions = "abc"
def objs(r, sub):
    d = os.path.join(T, "s3-" + r, "ckpt", "team1", sub, "job")
    out = []
    for n in os.listdir(d) if os.path.isdir(d) else []:
        if n.endswith("._S3rver_object"):
            out.append((n[:-len("._S3rver_object")], os.stat(os.path.join(d, n)).st_mtime_ns / 1e9))
    return out
last_part, commit, mid = {}, {}, {}
for r in regions:
    for name, t in objs(r, "parts"):
        s = int(re.match(r"s(\d+)\.", name).group(1))
        last_part[r, s] = max(last_part.get((r, s), 0), t)
    for name, t in objs(r, "commits"):
        m = re.match(r"g\d+\.s(\d+)\.(.+)$", name)
        s = int(m.group(1))
        commit[r, s] = min(commit.get((r, s), 1e30), t)
        mid[m.group(2)] = s
ss = sorted({s for (_, s) in commit})
per = [commit[r, s] - last_part[r, s] for s in ss for r in regions]
every = [max(commit[r, s] for r in regions) - max(last_part[r, s] for r in regions) for s in ss]
def pct(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
print("steps committed: %d (in every region)" % len(ss))
print("| latency (s) | p50 | p99 | max | n |")
print("|---|---|---|---|---|")
print("| per region: commit record - last part there | %.3f | %.3f | %.3f | %d |" % (pct(per, 50), pct(per, 99), max(per), len(per)))
print("| every region: last commit record - last part anywhere | %.3f | %.3f | %.3f | %d |" % (pct(every, 50), pct(every, 99), max(every), len(every)))
# requests, from s3rver --verbose: one line "<path> <status> <ms> <size>"
# per response (the method is cut off, and with it a character or more of
# the path for methods longer than GET), and a line 'Stored object "KEY"'
# per PUT; so a class's PUTs are its "Stored" lines, the rest its reads.
ansi = re.compile(r"\x1b\[[0-9;]*m")
cls = ["part", "list", "snapshot", "commit"]
resp, put = {}, {}
def step_of(kind, rest):
    if kind == "snapshot":
        return mid.get(rest)
    return int(rest)
for r in regions:
    for line in open(os.path.join(T, "s3-%s.log" % r), errors="replace"):
        line = unquote(ansi.sub("", line))
        m = re.search(r'Stored object "team1/(parts|commits|snapshots)/job/([^"]+)"', line)
        if m:
            kind, name = m.group(1), m.group(2)
            q = re.match(r"s(\d+)\.", name) if kind == "parts" else (
                re.match(r"g\d+\.s(\d+)\.", name) if kind == "commits" else None)
            s = int(q.group(1)) if q else mid.get(name)
            k = {"parts": "part", "commits": "commit", "snapshots": "snapshot"}[kind]
            if s in ss:
                put[r, k] = put.get((r, k), 0) + 1
            continue
        m = re.match(r"info: (\S+) \d{3} ", line)
        if not m:
            continue
        path, s, k = m.group(1), None, None
        if (q := re.search(r"prefix=team1/parts/job/s(\d+)\.", path)):
            s, k = int(q.group(1)), "list"
        elif (q := re.search(r"parts/job/s(\d+)\.", path)):
            s, k = int(q.group(1)), "part"
        elif (q := re.search(r"commits/job/g\d+\.s(\d+)\.", path)):
            s, k = int(q.group(1)), "commit"
        elif (q := re.search(r"snapshots/job/([^/?]+)$", path)):
            s, k = mid.get(q.group(1)), "snapshot"
        if s in ss:
            resp[r, k] = resp.get((r, k), 0) + 1
cols = [("PUT part", lambda r: put.get((r, "part"), 0)),
        ("GET/HEAD part", lambda r: resp.get((r, "part"), 0) - put.get((r, "part"), 0)),
        ("LIST parts", lambda r: resp.get((r, "list"), 0)),
        ("PUT snapshot", lambda r: put.get((r, "snapshot"), 0)),
        ("GET/HEAD snapshot", lambda r: resp.get((r, "snapshot"), 0) - put.get((r, "snapshot"), 0)),
        ("PUT commit", lambda r: put.get((r, "commit"), 0)),
        ("other on commit", lambda r: resp.get((r, "commit"), 0) - put.get((r, "commit"), 0))]
print()
print("| requests per commit per region | " + " | ".join(c for c, _ in cols) + " | total |")
print("|---" * (len(cols) + 2) + "|")
for r in regions:
    v = [f(r) / len(ss) for _, f in cols]
    print("| region %s | " % r + " | ".join("%.2f" % x for x in v) + " | %.2f |" % sum(v))
PY

# ---- 3: upload rate ----------------------------------------------------------
# up NAME UNIT [STEP]: seconds for NAME's daemon to take UNIT and have it in every region.
up() {
  local t0 t1 a=()
  [ -z "${3:-}" ] || a=(--step "$3")
  t0=$(date +%s.%N)
  icks "$1" commit "$2" "${a[@]}" --wait replicated --timeout 1200 -q || die "$1: commit $2"
  t1=$(date +%s.%N)
  python3 -c "print('%.2f' % ($t1 - $t0))"
}
rate() { python3 -c "print('%.1f' % ($mib * 1.048576 / $1))"; }
make_file "$T/i-solo/watch/solo/checkpoint-1/model.safetensors" "$mib"
t_solo=$(up solo "$T/i-solo/watch/solo/checkpoint-1")
declare -A t_one
for k in 0 1 2 3; do
  make_file "$T/i-n$k/watch/job/checkpoint-900000/__${k}_0.distcp" "$mib"
  t_one[$k]=$(up "n$k" "$T/i-n$k/watch/job/checkpoint-900000" 900000)
done
[ "$(mn_commits 900000)" = "1 1 1" ] || die "step 900000: commit records $(mn_commits 900000)"
for k in 0 1 2 3; do make_file "$T/i-n$k/watch/job/checkpoint-900100/__${k}_0.distcp" "$mib"; done
t0=$(date +%s.%N)
pids=()
for k in 0 1 2 3; do up "n$k" "$T/i-n$k/watch/job/checkpoint-900100" 900100 > "$T/t-all-$k" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done
for _ in $(seq 1 600); do [ "$(mn_commits 900100)" = "1 1 1" ] && break; sleep 0.05; done
t_all=$(python3 -c "import time; print('%.2f' % (time.time() - $t0))")
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

echo "Run $(date -u +%Y-%m-%dT%H:%MZ), ckptsync $(git -C "$top" rev-parse --short HEAD 2> /dev/null || echo '?')."
echo "- cpu: $(nproc) x $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo); three s3rver regions, four job daemons and a one-node daemon on this machine"
echo "- load average (1/5/15 min): $load_before before, $load_after after"
echo "- command: tests/bench/multinode-commit.sh $steps $mib $build"
echo
cat "$T/commit.txt"
echo
echo "| upload of $mib MiB (commit --wait replicated, 3 regions) | seconds | MB/s per node |"
echo "|---|---|---|"
echo "| one-node daemon (nodes = 1) | $t_solo | $(rate "$t_solo") |"
for k in 0 1 2 3; do
  echo "| job node $k alone (nodes = 4)$([ $k = 3 ] && echo ', its part completes the step') | ${t_one[$k]} | $(rate "${t_one[$k]}") |"
done
echo "| job, four nodes at once, until committed everywhere | $t_all | $(rate "$t_all") (x4: $(python3 -c "print('%.1f' % (4 * $mib * 1.048576 / $t_all))") aggregate) |"
