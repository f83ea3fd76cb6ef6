#!/usr/bin/env bash
# A real Prometheus (Debian's package) scrapes ckptsyncd's /metrics every
# second on loopback; after a snapshot is replicated, queries of its HTTP
# API return what the snapshot reported (bytes ingested, new then dedup,
# bytes put per region, the durable time), and what restore --json
# reported after a restore the CLI told the daemon about (bytes, files,
# seconds, their rate; a failed restore counted apart), while a restore
# with no daemon, or one that never answers, is not held up.  Also: promtool lints the
# exposition, the histograms (commit to durable, region requests, restore)
# rise with le and end in _count, every number is the shortest that reads
# back, the process_* families are the daemon's, / is a page linking
# /metrics, other paths and methods are refused, counters and histograms
# survive a SIGHUP reload (Prometheus sees no reset), 40 idle connections
# held open do not lock scrapes out, and the node_exporter textfile is
# written whole.
. "$(dirname "$0")/lib.sh"
command -v prometheus > /dev/null || skip "prometheus is not installed (deploy/deps.sh --test installs Debian's package)"
command -v curl > /dev/null || skip "curl is not installed"
command -v promtool > /dev/null || skip "promtool is not installed (Debian's prometheus package has it)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
MP=$(free_port)
PP=$(free_port)
PROM_PID=
stop_prom() { [ -n "$PROM_PID" ] && kill "$PROM_PID" 2>/dev/null; wait "$PROM_PID" 2>/dev/null || true; }
CKS_CLEANUP_HOOKS+=(stop_prom)

write_config 64K 256K 1M
mkdir -p "$T/textfile"
sed -i "/^\[daemon\]/a metrics = 127.0.0.1:$MP\nmetrics_textfile = $T/textfile/ckptsync.prom" "$CONF"
set_settle 1
start_daemon
URL=http://127.0.0.1:$MP

step "/metrics answers in text format 0.0.4; promtool finds nothing to lint"
curl -sf -D "$T/h" "$URL/metrics" > "$T/m1.txt" || die "GET /metrics failed"
grep -qi '^content-type: text/plain; version=0.0.4' "$T/h" || { cat "$T/h"; die "wrong content type"; }
grep -q '^ckptsync_info{version="' "$T/m1.txt" || die "no ckptsync_info"
curl -sf -D "$T/h" "$URL/" > "$T/index.html" || die "GET / failed"
grep -qi '^content-type: text/html' "$T/h" || { cat "$T/h"; die "/ is not an HTML page"; }
grep -q '<a href="metrics">' "$T/index.html" || { cat "$T/index.html"; die "/ does not link /metrics"; }
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/nosuch")" = 404 ] || die "/nosuch is not 404"
for f in process_cpu_seconds_total process_resident_memory_bytes process_virtual_memory_bytes \
  process_open_fds process_max_fds process_start_time_seconds; do
  grep -q "^$f [0-9]" "$T/m1.txt" || die "no $f"
done
# process_start_time_seconds is this process's start, as ps tells it
python3 - "$T/m1.txt" "$DAEMON_PID" <<'EOF2' || die "process_start_time_seconds is not the daemon's start"
import os, sys
v = [float(l.split()[1]) for l in open(sys.argv[1]) if l.startswith("process_start_time_seconds ")][0]
ticks = int(open(f"/proc/{sys.argv[2]}/stat").read().rsplit(")", 1)[1].split()[19])
btime = [int(l.split()[1]) for l in open("/proc/stat") if l.startswith("btime ")][0]
want = btime + ticks / os.sysconf("SC_CLK_TCK")
sys.exit(abs(v - want) > 0.02)
EOF2
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/metrics")" = 405 ] || die "POST is not 405"
grep -q "serving Prometheus metrics on 127.0.0.1:$MP" "$T/daemon.log" || die "the endpoint is not logged"

# check_exposition FILE: promtool lints it; every histogram's buckets
# rise with le and never decrease, the last is +Inf and equals _count;
# every number is the shortest text that reads back (9.564, not
# 9.5640000000000001).
check_exposition() {
  promtool check metrics < "$1" > "$T/lint" 2>&1 || { cat "$T/lint"; die "promtool check metrics: $1"; }
  python3 - "$1" <<'EOF2' || die "the exposition $1 is wrong (above)"
import re, sys
series = {}
bad = []
def digits(text):  # the significant digits of a number's text
    return text.split("e")[0].replace("-", "").replace(".", "").strip("0")
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.strip():
        continue
    name_labels, value = line.rsplit(" ", 1)
    value = value.strip()
    if value not in ("+Inf", "-Inf", "NaN") and not re.fullmatch(r"-?[0-9]+", value) \
            and digits(value) != digits(repr(float(value))):
        # Python's repr is the shortest text that reads back
        bad.append(f"not the shortest: {line.strip()} (shortest: {float(value)!r})")
    m = re.match(r'(\w+)_bucket\{(.*)le="([^"]+)"\}$', name_labels)
    if m:
        series.setdefault((m.group(1), m.group(2)), []).append((float(m.group(3)), float(value)))
    elif name_labels.endswith("_count") or "_count{" in name_labels:
        base, _, labels = name_labels.partition("{")
        series.setdefault((base[:-6], labels.rstrip("}") + ("," if labels else "")), []).append(("count", float(value)))
hist = 0
for (name, labels), pts in series.items():
    buckets = [p for p in pts if p[0] != "count"]
    counts = [p[1] for p in pts if p[0] == "count"]
    if not buckets:
        continue
    hist += 1
    les = [b[0] for b in buckets]
    vals = [b[1] for b in buckets]
    if les != sorted(les) or len(set(les)) != len(les) or les[-1] != float("inf"):
        bad.append(f"{name}{{{labels}}}: le not ascending to +Inf: {les}")
    if any(b < a for a, b in zip(vals, vals[1:])):
        bad.append(f"{name}{{{labels}}}: buckets decrease: {vals}")
    if counts != [vals[-1]]:
        bad.append(f"{name}{{{labels}}}: _count {counts} is not the +Inf bucket {vals[-1]}")
if hist < 3:
    bad.append(f"only {hist} histogram series")
print("\n".join(bad))
sys.exit(bool(bad))
EOF2
}
# sample FILE SERIES: the value of SERIES (exactly as written) in FILE.
sample() { awk -v s="$2" '$1 == s { print $2 }' "$1"; }
check_exposition "$T/m1.txt"

step "another local user holds 40 idle connections: 5 scrapes all get through"
python3 - "$MP" > "$T/idle.log" 2>&1 <<'EOF2' &
import socket, sys, time
conns = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(40)]
print("holding", len(conns), flush=True)
time.sleep(600)   # sends nothing, reads nothing
EOF2
IDLE_PID=$!
stop_idle() { kill "$IDLE_PID" 2>/dev/null; wait "$IDLE_PID" 2>/dev/null || true; }
CKS_CLEANUP_HOOKS+=(stop_idle)
wait_for 10 grep -q "holding 40" "$T/idle.log" || { cat "$T/idle.log"; die "the idle connections were not made"; }
ok=0
for i in 1 2 3 4 5; do
  if curl -sSf --max-time 10 "$URL/metrics" > "$T/crowded.txt" 2> "$T/crowded.err" &&
    grep -q '^ckptsync_info{' "$T/crowded.txt"; then
    ok=$((ok + 1))
  else
    echo "    scrape $i: $(cat "$T/crowded.err")"
  fi
done
[ "$ok" = 5 ] || die "$ok of 5 scrapes got through 40 idle connections"
grep -q "metrics endpoint: 16 connections, the most it takes; closing the ones idle longest" "$T/daemon.log" ||
  die "the endpoint did not say it closed idle connections"
stop_idle

step "Prometheus scrapes the daemon every second"
cat > "$T/prom.yml" <<EOF2
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ckptsync
    static_configs:
      - targets: ['127.0.0.1:$MP']
EOF2
prometheus --config.file="$T/prom.yml" --storage.tsdb.path="$T/prom" \
  --web.listen-address="127.0.0.1:$PP" > "$T/prom.log" 2>&1 &
PROM_PID=$!
wait_for 40 curl -sf "http://127.0.0.1:$PP/-/ready" || { tail "$T/prom.log"; die "prometheus did not start"; }

# q EXPR: the value of an instant query's single result ("none" without one).
q() {
  curl -sf --get "http://127.0.0.1:$PP/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if len(r) == 1 else "none")'
}
# near A B: A and B agree to 1e-5 (relative, or absolute near 0).
near() { python3 -c 'import sys; a,b=map(float,sys.argv[1:]); sys.exit(abs(a-b) > 1e-5*max(1,abs(b)))' "$1" "$2"; }
# expect_q_near EXPR VALUE: like expect_q, for a float (seconds, a rate).
expect_q_near() {
  local got
  for _ in $(seq 1 60); do
    got=$(q "$1") && [ "$got" != none ] && near "$got" "$2" && return 0
    sleep 0.5
  done
  die "query '$1' returned '$got', expected about '$2'"
}
# expect_q EXPR VALUE: waits (a few scrapes) until the query returns VALUE.
expect_q() {
  local got
  for _ in $(seq 1 60); do
    got=$(q "$1") && [ "$got" = "$2" ] && return 0
    sleep 0.5
  done
  die "query '$1' returned '$got', expected '$2'"
}
expect_q 'up{job="ckptsync"}' 1

step "a snapshot, replicated: Prometheus reports what it reported"
make_file "$T/watch/r1/step_100.pt" 3
cks commit "$T/watch/r1/step_100.pt" --wait replicated --timeout 60 --json > "$T/c.json"
cks status --json > "$T/st.json"
id=$(json "$T/c.json" 'd["id"]')
bytes=$(json "$T/st.json" 'd["runs"][0]["latest"]["bytes"]')
[ "$bytes" = 3145728 ] || die "status says $bytes bytes"
put_a=$(json "$T/st.json" '[r["bytes_put"] for r in d["regions"] if r["name"] == "a"][0]')
when=$(json "$T/st.json" 'd["runs"][0]["latest"]["time"]')
expect_q 'sum(ckptsync_ingest_bytes_total)' "$bytes"
expect_q 'ckptsync_ingest_bytes_total{result="new"}' "$bytes"
expect_q 'ckptsync_snapshots_total{result="taken"}' 1
expect_q 'ckptsync_region_bytes_total{region="a",operation="put",result="ok"}' "$put_a"
expect_q 'ckptsync_region_requests_total{region="b",operation="publish",result="ok"}' 1
expect_q 'ckptsync_snapshot_durable_timestamp_seconds{run="r1"}' "$when"
expect_q 'ckptsync_snapshot_latest_step{run="r1"}' 100
expect_q 'sum(ckptsync_queue_chunks)' 0
expect_q 'max(ckptsync_replication_lag_seconds)' 0
expect_q 'ckptsync_degraded' 0
expect_q "ckptsync_info{version=\"$(json "$T/st.json" 'd["version"]')\"}" 1
echo "    snapshot $id: $bytes bytes, region a got $put_a bytes; Prometheus agrees"

step "the same bytes again: counted as dedup, nothing more put"
cp "$T/watch/r1/step_100.pt" "$T/watch/r1/step_200.pt"
cks commit "$T/watch/r1/step_200.pt" --wait replicated --timeout 60 -q
expect_q 'ckptsync_ingest_bytes_total{result="dedup"}' "$bytes"
expect_q 'ckptsync_ingest_bytes_total{result="new"}' "$bytes"
expect_q 'ckptsync_region_bytes_total{region="a",operation="put",result="ok"}' "$put_a"
expect_q 'ckptsync_snapshot_latest_step{run="r1"}' 200

step "a restore reports to the daemon: Prometheus shows what restore --json reported"
expect_q 'ckptsync_restores_total{result="ok"}' 0
cks restore --run r1 --snapshot "$id" --to "$T/restored" --json > "$T/r.json"
r_bytes=$(json "$T/r.json" 'd["bytes"]')
r_files=$(json "$T/r.json" 'd["files"]')
r_secs=$(json "$T/r.json" 'repr(d["seconds"])')
[ "$r_bytes" = "$bytes" ] || die "restore --json says $r_bytes bytes, the snapshot has $bytes"
cmp -s "$T/restored/step_100.pt" "$T/watch/r1/step_100.pt" || die "the restored file differs"
expect_q 'ckptsync_restores_total{result="ok"}' 1
expect_q 'ckptsync_restores_total{result="failed"}' 0
expect_q 'ckptsync_restore_bytes_total' "$r_bytes"
expect_q 'ckptsync_restore_files_total' "$r_files"
expect_q_near 'ckptsync_restore_seconds_total' "$r_secs"
# the report carries whole microseconds: the rate is of the rounded time
rate=$(python3 -c 'import sys; print(int(sys.argv[1]) / (round(float(sys.argv[2]) * 1e6) / 1e6))' "$r_bytes" "$r_secs")
expect_q_near 'ckptsync_restore_bytes_total / ckptsync_restore_seconds_total' "$rate"
echo "    restore of $id: $r_bytes bytes, $r_files file(s) in ${r_secs}s; Prometheus agrees"

step "a failed restore counts as failed, and adds no bytes or time"
expect_fail 1 cks restore --run r1 --snapshot "$id" --to "$T/restored" --json
grep -q 'already exists' "$T/err" || { cat "$T/err"; die "the second restore did not fail as expected"; }
expect_q 'ckptsync_restores_total{result="failed"}' 1
expect_q 'ckptsync_restores_total{result="ok"}' 1
expect_q 'ckptsync_restore_bytes_total' "$r_bytes"
expect_q_near 'ckptsync_restore_seconds_total' "$r_secs"
grep -qi 'report' "$T/err" && { cat "$T/err"; die "the report to the daemon was complained about"; }

step "the histograms saw the two snapshots, their requests and the restore; floats are shortest"
curl -sf "$URL/metrics" > "$T/m2.txt" || die "GET /metrics failed"
check_exposition "$T/m2.txt"
[ "$(sample "$T/m2.txt" ckptsync_commit_to_durable_seconds_count)" = 2 ] ||
  die "commit_to_durable_seconds_count is $(sample "$T/m2.txt" ckptsync_commit_to_durable_seconds_count), not 2"
[ "$(sample "$T/m2.txt" ckptsync_restore_duration_seconds_count)" = 1 ] || die "restore_duration_seconds_count is not 1"
near "$(sample "$T/m2.txt" ckptsync_restore_duration_seconds_sum)" "$r_secs" || die "restore_duration_seconds_sum is not $r_secs"
puts=$(sample "$T/m2.txt" 'ckptsync_region_request_duration_seconds_count{region="a",operation="put"}')
put_ok=$(sample "$T/m2.txt" 'ckptsync_region_requests_total{region="a",operation="put",result="ok"}')
put_err=$(sample "$T/m2.txt" 'ckptsync_region_requests_total{region="a",operation="put",result="error"}')
[ -n "$puts" ] && [ "$puts" -gt 0 ] && [ "$puts" = $((put_ok + put_err)) ] ||
  die "region a: $puts timed puts, $put_ok + $put_err counted"
expect_q 'ckptsync_commit_to_durable_seconds_count' 2
echo "    2 snapshots durable, $puts puts to region a timed, 1 restore of ${r_secs}s"

step "SIGHUP reloads the configuration: the counters and histograms carry on from where they were"
grep -v '^process_\|^#' "$T/m2.txt" | grep '_total\|_bucket\|_count \|_count{\|_sum' > "$T/before.txt"
start_before=$(sample "$T/m2.txt" process_start_time_seconds)
kill -HUP "$DAEMON_PID"
wait_for 20 grep -q "counters carried over the reload" "$T/daemon.log" ||
  { tail "$T/daemon.log"; die "the reload carried no counters"; }
wait_for 20 curl -sf "$URL/metrics" -o "$T/m3.txt" || die "no /metrics after the reload"
kill -0 "$DAEMON_PID" || die "the reload changed the pid"
check_exposition "$T/m3.txt"
grep -v '^process_\|^#' "$T/m3.txt" | grep '_total\|_bucket\|_count \|_count{\|_sum' > "$T/after.txt"
# the rescan after the restart may count the unchanged units (and ask the
# regions about them) again: nothing may go down, the rest must be equal
python3 - "$T/before.txt" "$T/after.txt" <<'EOF2' || die "counters lost on reload (above)"
import sys
def load(f):
    return {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1]) for l in open(f)}
b, a = load(sys.argv[1]), load(sys.argv[2])
moving = ('result="unchanged"', 'operation="has"', "ckptsync_retries_total")
bad = [f"{k}: {v} before, {a.get(k)} after" for k, v in b.items()
       if a.get(k) is None or a[k] < v or (a[k] != v and not any(m in k for m in moving))]
print("\n".join(bad) or f"    {len(b)} series carried over the reload")
sys.exit(bool(bad))
EOF2
[ "$(sample "$T/m3.txt" process_start_time_seconds)" = "$start_before" ] ||
  die "process_start_time_seconds changed over the reload (the same process)"
[ "$(sample "$T/m3.txt" 'ckptsync_restores_total{result="ok"}')" = 1 ] || die "restores_total{ok} was reset"
expect_q 'ckptsync_restores_total{result="failed"}' 1
expect_q 'resets(ckptsync_ingest_bytes_total{result="new"}[1h])' 0

step "the node_exporter textfile is written whole, and lints clean"
wait_for 15 grep -q '^ckptsync_ingest_bytes_total{result="dedup"} '"$bytes" "$T/textfile/ckptsync.prom" \
  || die "the textfile does not show the second snapshot"
[ "$(ls -A "$T/textfile")" = ckptsync.prom ] || die "temp files left: $(ls -A "$T/textfile")"
check_exposition "$T/textfile/ckptsync.prom"

stop_prom
stop_daemon

# wall CMD...: runs CMD (stdout in $T/out, stderr in $T/err), prints its seconds.
wall() {
  local t0; t0=$(date +%s.%N)
  "$@" > "$T/out" 2> "$T/err" || { cat "$T/err" >&2; die "'$*' failed"; }
  python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$t0" "$(date +%s.%N)"
}
# slower_by WALL JSON SECONDS: how much longer the command took than its restore.
slower_by() { python3 -c 'import json,sys; print(float(sys.argv[1]) - json.load(open(sys.argv[2]))["seconds"])' "$1" "$2"; }

step "no daemon: the restore sends nothing, says nothing about it, and is not delayed"
SOCK=$STATE/ckptsyncd.sock   # [daemon] socket's default
expect_fail 1 cks status
grep -qF "nothing listens on \"$SOCK\"" "$T/err" || { cat "$T/err"; die "the socket is not $SOCK"; }
t=$(wall cks restore --run r1 --snapshot "$id" --to "$T/restored-nd" --json)
[ ! -s "$T/err" ] || { cat "$T/err"; die "a restore without a daemon wrote to stderr"; }
cp "$T/out" "$T/nd.json"
extra=$(slower_by "$t" "$T/nd.json")
python3 -c 'import sys; sys.exit(float(sys.argv[1]) > 1.5)' "$extra" || die "the command took ${extra}s longer than its restore"
echo "    ${extra}s beyond the restore itself"

step "a daemon that never answers: the report gives up after 2 s, the restore succeeds"
python3 - "$SOCK" > "$T/hang.log" 2>&1 <<'EOF2' &
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX)
try: os.unlink(sys.argv[1])
except FileNotFoundError: pass
s.bind(sys.argv[1]); s.listen(4)
print("listening", flush=True)
conns = []
while True:
    c, _ = s.accept(); conns.append(c)   # read nothing, answer nothing
EOF2
HANG_PID=$!
stop_hang() { kill "$HANG_PID" 2>/dev/null; wait "$HANG_PID" 2>/dev/null || true; }
CKS_CLEANUP_HOOKS+=(stop_hang)
wait_for 10 grep -q listening "$T/hang.log" || die "the silent listener did not start"
t=$(wall cks restore --run r1 --snapshot "$id" --to "$T/restored-hang" --json)
extra=$(slower_by "$t" "$T/out")
python3 -c 'import sys; sys.exit(not 1.5 <= float(sys.argv[1]) <= 5)' "$extra" \
  || die "the command took ${extra}s longer than its restore (expected about 2 s)"
[ ! -s "$T/err" ] || { cat "$T/err"; die "the unanswered report wrote to stderr"; }
echo "    ${extra}s beyond the restore itself"
stop_hang
echo "metrics: ok"
