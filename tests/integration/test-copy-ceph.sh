#!/usr/bin/env bash
# Upload once, then copy (issue 25) on Ceph RGW: three gateways and three
# buckets of one cluster copy from each other, so the daemon sends each new
# chunk once (to a) and b and c copy it server-side: the bytes the
# instance sent equal the new stored bytes (metrics), every region holds
# every chunk (the AWS CLI lists them), and a fresh instance restores from
# any single region.  Then a mixed configuration: region c on s3rver, which
# cannot copy from Ceph nor Ceph from it: a and b copy, c gets the chunks
# from the instance.  Starts its own cluster (cephlib.sh); skipped where
# Ceph is not installed.
. "$(dirname "$0")/lib.sh"
. "$CKS_SOURCE_DIR/tests/integration/cephlib.sh"
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

in_region() {
  python3 - "$CONF" "$1" "$2" "$3" <<'PY'
import sys
conf, name, key, value = sys.argv[1:]
out, sec = [], None
for line in open(conf).read().splitlines():
    if line.startswith("["):
        sec = line.strip("[]")
    if sec == "region." + name and line.split("=")[0].strip() == key:
        line = f"{key} = {value}"
    out.append(line)
open(conf, "w").write("\n".join(out) + "\n")
PY
}
metric() {
  curl -sf "http://127.0.0.1:$MP/metrics" > "$T/m.txt" || die "GET /metrics"
  awk -v k="$1{$2}" '$1 == k { v = $2 } END { print v + 0 }' "$T/m.txt"
}
put_bytes() { metric ckptsync_region_bytes_total "region=\"$1\",operation=\"put\",result=\"ok\""; }
copied_bytes() { metric ckptsync_region_copied_bytes_total "region=\"$1\""; }
# ceph_chunks BUCKET OUT: "key size" of every chunk object, sorted.
ceph_chunks() {
  aws_ceph s3api list-objects-v2 --bucket "$1" --prefix "$CEPH_PREFIX/chunks/" > "$T/list.json"
  if [ -s "$T/list.json" ]; then
    json "$T/list.json" '"\n".join(o["Key"].split("/", 1)[1] + " " + str(o["Size"]) for o in d.get("Contents", []))'
  fi | sed '/^$/d' | sort > "$2"
}
sum_sizes() { awk '{ s += $2 } END { print s + 0 }' "$1"; }
checkpoint() {
  mkdir -p "$T/watch/$1"
  head -c $(($3 << 20)) /dev/urandom > "$T/watch/$1/step_$2.pt"
  cp "$T/watch/$1/step_$2.pt" "$T/orig-$1-$2.pt"
}
restore_from() {  # R RUN STEP: a fresh instance, the other regions unhealthy
  local keep=$CONF
  CONF="$T/restore-$1.conf"
  cp "$keep" "$CONF"
  sed -i "s|^state = .*|state = $T/state-restore-$1|; /^metrics = /d" "$CONF"
  for o in a b c; do [ "$o" = "$1" ] || in_region "$o" bucket no-such-bucket; done
  rm -rf "$T/restored"
  cks restore --run "$2" --latest --to "$T/restored" -q 2> "$T/restore.err" ||
    { cat "$T/restore.err"; CONF=$keep; die "restore from region $1 alone"; }
  cmp -s "$T/restored/step_$3.pt" "$T/orig-$2-$3.pt" || die "restored from region $1: content differs"
  CONF=$keep
}

step "three buckets of one Ceph cluster: every pair can copy (probed)"
write_config_ceph 256K 1M 4M
sed -i "/^\[daemon\]/a metrics = 127.0.0.1:$MP\nsettle = 1" "$CONF"
start_daemon_map
grep -q "server-side copies: a<-b,c; b<-a,c; c<-a,b (6 pairs)" "$T/daemon.log" ||
  { grep -i cop "$T/daemon.log"; die "the copy map is not the full one"; }

step "a snapshot: the instance sends the new chunks once; b and c copy them"
checkpoint r1 10 12
cks commit "$T/watch/r1/step_10.pt" --wait replicated --timeout 120 -q ||
  { tail -30 "$T/daemon.log"; die "not replicated"; }
for r in a b c; do ceph_chunks "${CEPH_BUCKET[$r]}" "$T/chunks.$r"; done
stored=$(sum_sizes "$T/chunks.a")
pa=$(put_bytes a) pb=$(put_bytes b) pc=$(put_bytes c)
echo "    stored $stored bytes; put a=$pa b=$pb c=$pc; copied b=$(copied_bytes b) c=$(copied_bytes c)"
python3 -c "import sys; r = ($pa + $pb + $pc) / $stored; print('    sent / new stored = %.3f' % r); sys.exit(0 if r <= 1.05 else 1)" ||
  die "the instance sent more than 1.05x the new stored bytes"
[ "$(copied_bytes b)" = "$stored" ] && [ "$(copied_bytes c)" = "$stored" ] || die "b and c did not copy every chunk"
cmp -s "$T/chunks.a" "$T/chunks.b" && cmp -s "$T/chunks.a" "$T/chunks.c" || die "the regions' chunks differ"

step "a fresh instance restores from any single region"
for r in a b c; do restore_from "$r" r1 10; done
stop_daemon

step "mixed: region c on s3rver; a and b copy, c gets the chunks from the instance"
start_s3 c
write_s3_credentials "$T/s3-credentials"   # $S3_CREDENTIALS is $CEPH_CREDENTIALS
in_region c endpoint "$(s3_url c)"
in_region c bucket "$S3_BUCKET"
in_region c credentials "$T/s3-credentials"
rm -rf "$STATE" "$T/watch"; mkdir -p "$T/watch"
aws_ceph s3 rm "s3://${CEPH_BUCKET[a]}/$CEPH_PREFIX" --recursive > /dev/null
aws_ceph s3 rm "s3://${CEPH_BUCKET[b]}/$CEPH_PREFIX" --recursive > /dev/null
start_daemon_map
grep -q "server-side copies: a<-b; b<-a (2 pairs)" "$T/daemon.log" ||
  { grep -i cop "$T/daemon.log"; die "the mixed copy map"; }
checkpoint r2 20 6
cks commit "$T/watch/r2/step_20.pt" --wait replicated --timeout 120 -q || die "r2 not replicated"
ceph_chunks "${CEPH_BUCKET[a]}" "$T/chunks2.a"
stored=$(sum_sizes "$T/chunks2.a")
[ "$(put_bytes a)" = "$stored" ] && [ "$(put_bytes b)" = 0 ] && [ "$(put_bytes c)" = "$stored" ] ||
  die "mixed: put a=$(put_bytes a) b=$(put_bytes b) c=$(put_bytes c), stored $stored"
[ "$(copied_bytes b)" = "$stored" ] && [ "$(copied_bytes c)" = 0 ] || die "mixed: copies"
restore_from c r2 20
stop_daemon
echo "PASS"
