#!/usr/bin/env bash
# Server-side copies that go wrong (issue 25): region b sits behind a
# fault-injecting proxy (copyfault.py) in front of the s3rver that holds
# all three buckets, with `copy_from = a` (configured, not probed), and
# region c has `copy_from = none`.  The proxy passes copies through, then
# answers them with a 200 whose body is an <Error>, AccessDenied,
# NotImplemented, InvalidRegion, a 503 storm, a dropped connection, or a
# 200 for a copy it never made.  Each time: the failure is logged naming
# the regions, counted (copies failed, fallen back), the chunk goes up from
# the instance instead, and region b ends up holding every chunk by the
# AWS CLI's listing — nothing is acknowledged that b lacks.  The same for
# `ckptsync snapshot` (the CLI's upload once).  And the daemon's probes run
# after it started serving: a probe the proxy holds neither delays the
# start nor the uploads (every region gets chunks from the instance until
# the map is built).
. "$(dirname "$0")/lib.sh"
. "$CKS_SOURCE_DIR/tests/integration/s3lib.sh"

# start_daemon_map: start_daemon, then wait until the copy map is built
# (the daemon probes on a thread of its own and serves at once; until the
# map is built every region uploads from the instance).
maps_logged() { grep -c "server-side copies:" "$T/daemon.log" 2>/dev/null || true; }
more_maps_than() { [ "$(maps_logged)" -gt "$1" ]; }
start_daemon_map() {
  local n
  n=$(maps_logged)
  start_daemon "$@"
  wait_for 60 more_maps_than "${n:-0}" || { grep -i cop "$T/daemon.log"; die "the copy map was not built within 60 s"; }
}
command -v curl > /dev/null || skip "curl is not installed"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
MP=$(free_port)
declare -A BUCKET=([a]=ckpt [b]=ckpt-b [c]=ckpt-c)
MODE="$T/proxy.mode"

metric() {
  curl -sf "http://127.0.0.1:$MP/metrics" > "$T/m.txt" || die "GET /metrics"
  awk -v k="$1{$2}" '$1 == k { v = $2 } END { print v + 0 }' "$T/m.txt"
}
put_bytes() { metric ckptsync_region_bytes_total "region=\"$1\",operation=\"put\",result=\"ok\""; }
copied_bytes() { metric ckptsync_region_copied_bytes_total "region=\"$1\""; }
copies() { metric ckptsync_region_copies_total "region=\"$1\",result=\"$2\""; }
chunks() {  # BUCKET OUT
  aws_s3 one s3api list-objects-v2 --bucket "$1" --prefix "$S3_PREFIX/chunks/" > "$T/list.json"
  if [ -s "$T/list.json" ]; then
    json "$T/list.json" '"\n".join(o["Key"].split("/", 1)[1] + " " + str(o["Size"]) for o in d.get("Contents", []))'
  fi | sed '/^$/d' | sort > "$2"
}
sum_sizes() { awk '{ s += $2 } END { print s + 0 }' "$1"; }

start_s3 one --bucket "${BUCKET[b]}" --bucket "${BUCKET[c]}"
echo pass > "$MODE"
start_proxy copyfault.py "${S3_PORT[one]}" "$MODE"

write_s3_credentials
{
  config_head 256K 1M 4M
  for r in a b c; do
    endpoint=$(s3_url one)
    [ "$r" = b ] && endpoint=http://127.0.0.1:$PROXY_PORT
    s3_region_section "$r" "$endpoint" "${BUCKET[$r]}"
    [ "$r" = b ] && echo "copy_from = a"
    [ "$r" = c ] && echo "copy_from = none"
  done
} > "$CONF"
sed -i "/^\[daemon\]/a metrics = 127.0.0.1:$MP\nsettle = 1" "$CONF"
mkdir -p "$T/watch"

# snapshot STEP MIB: a new checkpoint, replicated.
snapshot() {
  mkdir -p "$T/watch/r1"
  head -c $(($2 << 20)) /dev/urandom > "$T/watch/r1/step_$1.pt"
  cks commit "$T/watch/r1/step_$1.pt" --wait replicated --timeout 120 -q ||
    { tail -30 "$T/daemon.log"; die "step $1 not replicated"; }
}

step "copies pass: b copies from a; c (copy_from = none) gets the bytes from the instance"
start_daemon_map
grep -q "server-side copies: a<-b,c; b<-a (3 pairs)" "$T/daemon.log" || { grep -i cop "$T/daemon.log"; die "copy map"; }
snapshot 1 8
chunks "${BUCKET[a]}" "$T/chunks.a"
stored=$(sum_sizes "$T/chunks.a")
[ "$(put_bytes a)" = "$stored" ] && [ "$(put_bytes b)" = 0 ] && [ "$(put_bytes c)" = "$stored" ] ||
  die "put a=$(put_bytes a) b=$(put_bytes b) c=$(put_bytes c), stored $stored"
[ "$(copied_bytes b)" = "$stored" ] || die "b copied $(copied_bytes b) of $stored"
grep -q "^pass " "$MODE.log" || die "no copy went through the proxy"
stop_daemon

n=1
for mode in error200 denied notimpl invalidregion storm drop lie; do
  n=$((n + 1))
  step "copies answered '$mode': logged, counted, uploaded from the instance; b holds every chunk"
  echo "$mode" > "$MODE"
  : > "$MODE.log"
  start_daemon_map
  snapshot "$n" 3
  grep -q "^$mode " "$MODE.log" || die "no copy reached the proxy in mode $mode"
  failed=$(copies b failed) fallback=$(copies b fallback)
  echo "    copies failed $failed, fallen back $fallback, put to b $(put_bytes b) bytes"
  [ "$failed" -ge 1 ] && [ "$fallback" -ge 1 ] && [ "$(put_bytes b)" -gt 0 ] || die "mode $mode: not counted"
  [ "$(copied_bytes b)" = 0 ] || die "mode $mode: a copy counted as made"
  case $mode in
    error200) want="copying into region 'b' from region 'a' failed (.*HTTP 200 with error InternalError" ;;
    denied) want="region 'b' cannot copy from region 'a' (.*HTTP 403 AccessDenied" ;;
    notimpl) want="region 'b' cannot copy from region 'a' (.*HTTP 501 NotImplemented" ;;
    invalidregion) want="region 'b' cannot copy from region 'a' (.*HTTP 400 InvalidRegion" ;;
    storm) want="copying into region 'b' from region 'a' failed (.*HTTP 503 SlowDown" ;;
    drop) want="copying into region 'b' from region 'a' failed (" ;;
    lie) want="region 'b': a copy from region 'a' was answered as done, but the region does not hold the chunk" ;;
  esac
  grep -q "$want" "$T/daemon.log" || { grep -i cop "$T/daemon.log" | tail -5; die "mode $mode: not logged as expected"; }
  cks status --json > "$T/st.json"
  stopped=$(json "$T/st.json" '[r["copies_from"] for r in d["regions"] if r["name"] == "b"][0]')
  case $mode in denied|notimpl|invalidregion) [ "$stopped" = "[]" ] || die "mode $mode: b still copies from $stopped" ;;
    *) [ "$stopped" = "['a']" ] || die "mode $mode: b no longer copies from a ($stopped)" ;; esac
  chunks "${BUCKET[a]}" "$T/chunks.a"
  chunks "${BUCKET[b]}" "$T/chunks.b"
  cmp -s "$T/chunks.a" "$T/chunks.b" || { diff "$T/chunks.a" "$T/chunks.b"; die "mode $mode: b lacks chunks"; }
  stop_daemon
done

# cli_snapshot NAME MIB: ckptsync snapshot (no daemon) of a new file; --json in $T/NAME.json.
cli_snapshot() {
  make_file "$T/cli/$1.pt" "$2"
  cks snapshot --run cli "$T/cli/$1.pt" --json > "$T/$1.json" 2> "$T/$1.err" ||
    { cat "$T/$1.err"; die "ckptsync snapshot $1"; }
}
region_field() { json "$T/$1.json" "[r[\"$3\"] for r in d[\"regions\"] if r[\"name\"] == \"$2\"][0]"; }

echo pass > "$MODE"
cli_snapshot pass 4
[ "$(region_field pass b bytes_put)" = 0 ] && [ "$(region_field pass b bytes_copied)" -gt 0 ] ||
  { cat "$T/pass.json"; die "ckptsync snapshot: b did not copy from a"; }
for mode in error200 denied drop lie; do
  step "ckptsync snapshot, copies answered '$mode': logged naming the regions, counted, uploaded from the instance"
  echo "$mode" > "$MODE"
  : > "$MODE.log"
  cli_snapshot "cli-$mode" 3
  grep -q "^$mode " "$MODE.log" || die "no copy of the CLI reached the proxy in mode $mode"
  failed=$(region_field "cli-$mode" b copies_failed) put=$(region_field "cli-$mode" b bytes_put)
  echo "    copies failed $failed, put to b $put bytes"
  [ "$failed" -ge 1 ] && [ "$put" -gt 0 ] && [ "$(region_field "cli-$mode" b bytes_copied)" = 0 ] ||
    { cat "$T/cli-$mode.json"; die "ckptsync snapshot, mode $mode: not counted or not uploaded"; }
  [ "$(json "$T/cli-$mode.json" 'd["committed"]')" = 3 ] || die "ckptsync snapshot, mode $mode: not committed everywhere"
  case $mode in
    error200) want="copying into region 'b' from region 'a' failed (.*HTTP 200 with error InternalError" ;;
    denied) want="region 'b' cannot copy from region 'a' (.*HTTP 403 AccessDenied" ;;
    drop) want="copying into region 'b' from region 'a' failed (" ;;
    lie) want="region 'b': a copy from region 'a' was answered as done, but the region does not hold the chunk" ;;
  esac
  grep -q "$want" "$T/cli-$mode.err" || { cat "$T/cli-$mode.err"; die "ckptsync snapshot, mode $mode: not logged as expected"; }
  chunks "${BUCKET[a]}" "$T/chunks.a"
  chunks "${BUCKET[b]}" "$T/chunks.b"
  cmp -s "$T/chunks.a" "$T/chunks.b" || { diff "$T/chunks.a" "$T/chunks.b"; die "ckptsync snapshot, mode $mode: b lacks chunks"; }
done

step "the daemon serves while a copy probe hangs; until the map is built it uploads to every region"
# a new repository where b probes (copy_from = auto) through the proxy, which holds the copy
rm -rf "$STATE" "$T/watch"; mkdir -p "$T/watch"
sed -i '/^copy_from = a$/d' "$CONF"
for r in a b c; do aws_s3 one s3 rm --recursive --quiet "s3://${BUCKET[$r]}/$S3_PREFIX/"; done
echo hold > "$MODE"
: > "$MODE.log"
: > "$T/daemon.log"
start_daemon   # answers within 10 s, or it fails: the probes must not hold the start
wait_for 30 grep -q "^hold " "$MODE.log" || die "the probe of b <- a never reached the proxy"
! grep -q "server-side copies:" "$T/daemon.log" || die "the copy map was built although a probe is held"
snapshot 20 3
[ "$(put_bytes b)" -gt 0 ] && [ "$(copied_bytes b)" = 0 ] ||
  die "with the map not built yet, b got put $(put_bytes b), copied $(copied_bytes b)"
echo pass > "$MODE"
wait_for 60 grep -q "server-side copies: a<-b,c; b<-a,c (4 pairs)" "$T/daemon.log" ||
  { grep -i cop "$T/daemon.log"; die "the map was not built once the probe was answered"; }
before=$(put_bytes b)
snapshot 21 3
[ "$(put_bytes b)" = "$before" ] && [ "$(copied_bytes b)" -gt 0 ] ||
  die "with the map built, b did not copy (put $(put_bytes b), was $before; copied $(copied_bytes b))"
stop_daemon
echo "PASS"
