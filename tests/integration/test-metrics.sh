#!/usr/bin/env bash
# A real Prometheus (Debian's package) scrapes ckptsyncd's /metrics every
# second on loopback; after a snapshot is replicated, queries of its HTTP
# API return what the snapshot reported (bytes ingested, new then dedup,
# bytes put per region, the durable time), and what restore --json
# reported after a restore the CLI told the daemon about (bytes, files,
# seconds, their rate; a failed restore counted apart), while a restore
# with no daemon, or one that never answers, is not held up.  Also: promtool lints the
# exposition, other paths and methods are refused, 40 idle connections
# held open do not lock scrapes out, and the node_exporter textfile is
# written whole.
. "$(dirname "$0")/lib.sh"
command -v prometheus > /dev/null || skip "prometheus is not installed (deploy/deps.sh --test installs Debian's package)"
command -v curl > /dev/null || skip "curl is not installed"

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
if command -v promtool > /dev/null; then
  promtool check metrics < "$T/m1.txt" > "$T/lint" 2>&1 || { cat "$T/lint"; die "promtool check metrics"; }
fi
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/")" = 404 ] || die "/ is not 404"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/metrics")" = 405 ] || die "POST is not 405"
grep -q "serving Prometheus metrics on 127.0.0.1:$MP" "$T/daemon.log" || die "the endpoint is not logged"

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

step "the node_exporter textfile is written whole, and lints clean"
wait_for 15 grep -q '^ckptsync_ingest_bytes_total{result="dedup"} '"$bytes" "$T/textfile/ckptsync.prom" \
  || die "the textfile does not show the second snapshot"
[ "$(ls -A "$T/textfile")" = ckptsync.prom ] || die "temp files left: $(ls -A "$T/textfile")"
if command -v promtool > /dev/null; then
  promtool check metrics < "$T/textfile/ckptsync.prom" > "$T/lint" 2>&1 || { cat "$T/lint"; die "textfile lint"; }
fi

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
