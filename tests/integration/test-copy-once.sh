#!/usr/bin/env bash
# Upload once, then copy (issue 25), on s3rver: three regions in three
# buckets of one server can copy from each other, so the daemon sends each
# new chunk to the first region only and the others copy it server-side
# (the metrics say: bytes put = the new stored bytes, once; b and c copied
# them), every region holds every chunk (the AWS CLI lists them), and a
# fresh instance restores from any single region.  Three regions on three
# servers cannot copy (a server cannot read another's bucket): each gets
# the chunks from the instance as before.  A chunk deleted from the source
# region before its copy is detected (404 on the copy) and uploaded from
# the instance.  A kill -9 of the daemon during the fan-out loses nothing.
# (tests/integration/test-copy-ceph.sh runs the first case on Ceph RGW.)
# encrypted: yes
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

# conf_one_server [quorum]: regions a b c in three buckets of server "one".
conf_one_server() {
  write_s3_credentials
  {
    config_head 256K 1M 4M | sed "s/^quorum = .*/quorum = ${1:-2}/"
    for r in a b c; do
      cat <<EOF2
[region.$r]
kind = s3
endpoint = $(s3_url one)
bucket = ${BUCKET[$r]}
prefix = $S3_PREFIX
region = $S3_REGION
credentials = $S3_CREDENTIALS
EOF2
    done
  } > "$CONF"
  sed -i "/^\[daemon\]/a metrics = 127.0.0.1:$MP\nsettle = 1" "$CONF"
  mkdir -p "$T/watch"
  encrypt_if_asked
}

# in_region NAME KEY VALUE: sets KEY in [region.NAME] of $CONF (added when absent).
in_region() {
  python3 - "$CONF" "$1" "$2" "$3" <<'PY'
import sys
conf, name, key, value = sys.argv[1:]
out, sec, done = [], None, False
for line in open(conf).read().splitlines():
    if line.startswith("["):
        if sec == "region." + name and not done:
            out.append(f"{key} = {value}")
            done = True
        sec = line.strip("[]")
    if sec == "region." + name and line.split("=")[0].strip() == key:
        line = f"{key} = {value}"
        done = True
    out.append(line)
if sec == "region." + name and not done:
    out.append(f"{key} = {value}")
open(conf, "w").write("\n".join(out) + "\n")
PY
}

# metric NAME LABELS: the sample's value (0 when absent).
metric() {
  curl -sf "http://127.0.0.1:$MP/metrics" > "$T/m.txt" || die "GET /metrics"
  awk -v k="$1{$2}" '$1 == k { v = $2 } END { print v + 0 }' "$T/m.txt"
}
put_bytes() { metric ckptsync_region_bytes_total "region=\"$1\",operation=\"put\",result=\"ok\""; }
copied_bytes() { metric ckptsync_region_copied_bytes_total "region=\"$1\""; }
copies() { metric ckptsync_region_copies_total "region=\"$1\",result=\"$2\""; }

# chunks SERVER BUCKET OUT: "key size" of every chunk object, sorted (the AWS CLI).
chunks() {
  aws_s3 "$1" s3api list-objects-v2 --bucket "$2" --prefix "$S3_PREFIX/chunks/" > "$T/list.json"
  if [ -s "$T/list.json" ]; then
    json "$T/list.json" '"\n".join(o["Key"].split("/", 1)[1] + " " + str(o["Size"]) for o in d.get("Contents", []))'
  fi | sed '/^$/d' | sort > "${3/#-//dev/stdout}"
}
sum_sizes() { awk '{ s += $2 } END { print s + 0 }' "$1"; }

# checkpoint RUN STEP MIB: a new checkpoint file in the watched folder.
checkpoint() {
  mkdir -p "$T/watch/$1"
  head -c $(($3 << 20)) /dev/urandom > "$T/watch/$1/step_$2.pt"
  cp "$T/watch/$1/step_$2.pt" "$T/orig-$1-$2.pt"
}

# restore_from R RUN STEP: a fresh instance (new state) whose other
# regions point at a missing bucket (unhealthy) restores RUN from R alone.
restore_from() {
  local keep=$CONF keepstate=$STATE
  CONF="$T/restore-$1.conf" STATE="$T/state-restore-$1"
  cp "$keep" "$CONF"
  sed -i "s|^state = .*|state = $STATE|; /^metrics = /d" "$CONF"
  for o in a b c; do [ "$o" = "$1" ] || in_region "$o" bucket no-such-bucket; done
  rm -rf "$T/restored"
  cks restore --run "$2" --latest --to "$T/restored" -q 2> "$T/restore.err" ||
    { cat "$T/restore.err"; CONF=$keep STATE=$keepstate; die "restore from region $1 alone"; }
  cmp -s "$T/restored/step_$3.pt" "$T/orig-$2-$3.pt" || die "restored from region $1: content differs"
  CONF=$keep STATE=$keepstate
}

# ---------------------------------------------------------------------------
step "three buckets of one server: the probe finds that every pair can copy"
start_s3 one --bucket "${BUCKET[b]}" --bucket "${BUCKET[c]}"
conf_one_server

step "ckptsyncd --check lists the copy matrix: auto pairs unprobed; --connect probes them"
in_region c copy_from none
"$CKPTSYNCD" --config "$CONF" --check > "$T/check.out" || { cat "$T/check.out"; die "--check"; }
grep -q "^copy b <- a: auto (copy_from = auto: the daemon probes the pair at start; --connect probes it now)$" "$T/check.out" &&
  grep -q "^copy c <- a: no (configured (copy_from))$" "$T/check.out" || { cat "$T/check.out"; die "--check: the copy matrix"; }
"$CKPTSYNCD" --config "$CONF" --check --connect --json > "$T/check.json" || { cat "$T/check.json"; die "--check --connect --json"; }
[ "$(json "$T/check.json" '" ".join("%s<-%s:%s" % (p["to"], p["from"], p["copies"]) for p in d["copies"])')" = \
  "a<-b:True a<-c:True b<-a:True b<-c:True c<-a:False c<-b:False" ] || { cat "$T/check.json"; die "--check --connect: the probed matrix"; }
[ "$(json "$T/check.json" '[p["why"] for p in d["copies"] if p["to"] == "b" and p["from"] == "a"][0]')" = probed ] ||
  die "--check --connect: b <- a is not said to be probed"
in_region c copy_from auto

step "ckptsync snapshot (the CLI, no daemon): the new chunks go up once (to a); b and c copy them"
make_file "$T/cli/step_1.pt" 10
cks snapshot --run cli "$T/cli" --json > "$T/snap1.json" 2> "$T/snap1.err" ||
  { cat "$T/snap1.err"; die "ckptsync snapshot"; }
for r in a b c; do chunks one "${BUCKET[$r]}" "$T/cli.$r"; done
stored=$(sum_sizes "$T/cli.a")
[ "$stored" -gt 0 ] || die "the CLI stored nothing in region a"
cmp -s "$T/cli.a" "$T/cli.b" && cmp -s "$T/cli.a" "$T/cli.c" || die "the regions' chunks differ after the CLI snapshot"
# stored_bytes counts the encoded chunks; an encrypted repository stores each sealed (a few bytes more)
[ "$(json "$T/snap1.json" 'd["stored_bytes"]')" = "$stored" ] || [ "${CKS_TEST_ENCRYPT:-0}" = 1 ] ||
  die "stored_bytes is not what region a holds ($stored)"
[ "$(json "$T/snap1.json" '[r["bytes_put"] for r in d["regions"]]')" = "[$stored, 0, 0]" ] ||
  { cat "$T/snap1.json"; die "the CLI sent chunk bytes to b or c"; }
[ "$(json "$T/snap1.json" '[r["bytes_copied"] for r in d["regions"]]')" = "[0, $stored, $stored]" ] ||
  { cat "$T/snap1.json"; die "b and c did not copy every chunk"; }
[ "$(json "$T/snap1.json" 'd["bytes_sent"]')" = "$stored" ] || die "bytes_sent is not the stored bytes"
json "$T/snap1.json" 'd["sent_ratio"]' | python3 -c 'import sys; r = float(sys.stdin.read()); print("    CLI sent / new stored = %.3f" % r); sys.exit(0 if r <= 1.05 else 1)' ||
  die "the CLI sent more than 1.05x the new stored bytes"
grep -q "copying from region 'a' to region 'b' works (probed)" "$T/snap1.err" ||
  { cat "$T/snap1.err"; die "the CLI did not probe the pairs"; }

step "the CLI again: the probes are remembered (no probe); only the new chunks go up, once"
make_file "$T/cli/step_2.pt" 2
cks snapshot --run cli "$T/cli" --json > "$T/snap2.json" 2> "$T/snap2.err" || { cat "$T/snap2.err"; die "second CLI snapshot"; }
! grep -q "(probed)" "$T/snap2.err" || { cat "$T/snap2.err"; die "the probes were not remembered"; }
for r in a b c; do chunks one "${BUCKET[$r]}" "$T/cli2.$r"; done
new=$(( $(sum_sizes "$T/cli2.a") - stored ))
[ "$(json "$T/snap2.json" '[r["bytes_put"] for r in d["regions"]]')" = "[$new, 0, 0]" ] ||
  { cat "$T/snap2.json"; die "the second CLI snapshot sent to b or c, or not only its new chunks ($new bytes)"; }
cmp -s "$T/cli2.a" "$T/cli2.b" && cmp -s "$T/cli2.a" "$T/cli2.c" || die "the regions' chunks differ after the second CLI snapshot"

step "objects above the copy limit go in parts (UploadPartCopy; the limit lowered from 5 GiB to 1 MiB)"
make_file "$T/cli/step_3.pt" 6
CKPTSYNC_S3_COPY_MAX=1048576 cks snapshot --run cli "$T/cli" --json > "$T/snap3.json" 2> "$T/snap3.err" ||
  { cat "$T/snap3.err"; die "third CLI snapshot"; }
grep -q "region 'b': .* copied from region 'a' in [2-9] parts" "$T/snap3.err" ||
  { cat "$T/snap3.err"; die "no chunk was copied in parts"; }
[ "$(json "$T/snap3.json" '[r["bytes_put"] for r in d["regions"]][1:]')" = "[0, 0]" ] &&
  [ "$(json "$T/snap3.json" '[r["copies_failed"] for r in d["regions"]]')" = "[0, 0, 0]" ] ||
  { cat "$T/snap3.json"; die "a copy in parts failed or fell back"; }
for r in a b c; do chunks one "${BUCKET[$r]}" "$T/cli3.$r"; done
cmp -s "$T/cli3.a" "$T/cli3.b" && cmp -s "$T/cli3.a" "$T/cli3.c" || die "the regions' chunks differ after copies in parts"
CONF_KEEP=$CONF; STATE_KEEP=$STATE
for r in b c; do
  CONF="$T/restore-$r.conf" STATE="$T/state-restore-$r"
  cp "$CONF_KEEP" "$CONF"; sed -i "s|^state = .*|state = $STATE|; /^metrics = /d" "$CONF"
  for o in a b c; do [ "$o" = "$r" ] || in_region "$o" bucket no-such-bucket; done
  rm -rf "$T/restored"
  cks restore --run cli --latest --to "$T/restored" -q 2> "$T/restore.err" || { cat "$T/restore.err"; die "restore the CLI's snapshot from $r alone"; }
  cmp -s "$T/restored/cli/step_1.pt" "$T/cli/step_1.pt" && cmp -s "$T/restored/cli/step_3.pt" "$T/cli/step_3.pt" ||
    die "the CLI's snapshot restored from $r alone differs"
done
CONF=$CONF_KEEP; STATE=$STATE_KEEP

step "the daemon: the copy map, built after it started serving"
start_daemon_map
grep -q "server-side copies: a<-b,c; b<-a,c; c<-a,b (6 pairs)" "$T/daemon.log" ||
  { grep -i cop "$T/daemon.log"; die "the copy map is not the full one"; }

step "a snapshot: the instance sends the new chunks once (to a); b and c copy them"
checkpoint r1 10 12
cks commit "$T/watch/r1/step_10.pt" --wait replicated --timeout 120 --json > "$T/c1.json" ||
  { tail -30 "$T/daemon.log"; die "not replicated"; }
for r in a b c; do chunks one "${BUCKET[$r]}" "$T/chunks.$r"; done
comm -13 "$T/cli3.a" "$T/chunks.a" > "$T/daemon-new.a"   # the CLI's chunks were there before
stored=$(sum_sizes "$T/daemon-new.a")
n=$(wc -l < "$T/daemon-new.a")
[ "$n" -ge 3 ] || die "only $n chunks in region a"
pa=$(put_bytes a) pb=$(put_bytes b) pc=$(put_bytes c)
echo "    stored $stored bytes in $n chunks; put a=$pa b=$pb c=$pc; copied b=$(copied_bytes b) c=$(copied_bytes c)"
[ "$pa" = "$stored" ] || die "region a got $pa bytes from the instance, its chunks hold $stored"
[ "$pb" = 0 ] && [ "$pc" = 0 ] || die "b or c got chunk bytes from the instance (b=$pb c=$pc)"
sent=$((pa + pb + pc))
python3 -c "import sys; r = $sent / $stored; print('    sent / new stored = %.3f' % r); sys.exit(0 if r <= 1.05 else 1)" ||
  die "the instance sent more than 1.05x the new stored bytes"
[ "$(copied_bytes b)" = "$stored" ] && [ "$(copied_bytes c)" = "$stored" ] ||
  die "b and c did not copy every chunk (b=$(copied_bytes b) c=$(copied_bytes c) of $stored)"
[ "$(copies b fallback)" = 0 ] && [ "$(copies c fallback)" = 0 ] || die "a copy fell back"
cks status --json > "$T/st1.json"
latest() { json "$T/st1.json" "[r[\"latest\"][\"$1\"] for r in d[\"runs\"] if r[\"run\"] == \"r1\"][0]"; }
echo "    status: bytes_sent $(latest bytes_sent) bytes_copied $(latest bytes_copied) stored_bytes $(latest stored_bytes) sent_ratio $(latest sent_ratio)"
[ "$(latest bytes_sent)" = "$pa" ] || { cat "$T/st1.json"; die "status --json: the snapshot's bytes_sent is not what a got ($pa)"; }
[ "$(latest bytes_copied)" = $((2 * pa)) ] || die "status --json: the snapshot's bytes_copied is not b's and c's copies"
[ "$(latest stored_bytes)" -gt 0 ] && python3 -c "import sys; sys.exit(0 if 0.99 <= $(latest sent_ratio) <= 1.05 else 1)" ||
  die "status --json: sent_ratio $(latest sent_ratio) is not about 1"
cks status > "$T/st1.txt" || true
grep -q "sent .* from this instance for .* new stored (1.0[0-5]x)" "$T/st1.txt" || { cat "$T/st1.txt"; die "status: no sent line"; }

step "every region holds every chunk, by the AWS CLI's listing"
cmp -s "$T/chunks.a" "$T/chunks.b" || die "region b's chunks differ from a's"
cmp -s "$T/chunks.a" "$T/chunks.c" || die "region c's chunks differ from a's"
cks status --json > "$T/st.json"
[ "$(json "$T/st.json" '[r["bytes_copied"] for r in d["regions"]]')" = "[0, $stored, $stored]" ] ||
  { cat "$T/st.json"; die "status --json does not show the copies"; }
[ "$(json "$T/st.json" '[r["copies_from"] for r in d["regions"]]')" = "[['b', 'c'], ['a', 'c'], ['a', 'b']]" ] ||
  { cat "$T/st.json"; die "status --json does not show the copy matrix"; }

step "a fresh instance restores from any single region"
for r in a b c; do restore_from "$r" r1 10; done

step "a chunk deleted from the source before its copy: 404, uploaded from the instance"
stop_daemon
# b and c unreachable (a missing bucket) while a takes a snapshot alone
conf_one_server 1
in_region b bucket no-such-b
in_region c bucket no-such-c
start_daemon_map
checkpoint r2 20 6
cks commit "$T/watch/r2/step_20.pt" --wait durable --timeout 60 -q || die "r2 not durable in a"
stop_daemon
chunks one "${BUCKET[a]}" "$T/chunks.a2"
comm -13 "$T/chunks.a" "$T/chunks.a2" > "$T/new.a2"
[ -s "$T/new.a2" ] || die "r2 brought no new chunk"
gone=$(head -1 "$T/new.a2" | cut -d' ' -f1)
aws_s3 one s3api delete-object --bucket "${BUCKET[a]}" --key "$S3_PREFIX/$gone" > /dev/null
conf_one_server 1
start_daemon_map
cks flush --wait replicated --deadline 120 || { tail -30 "$T/daemon.log"; die "b and c did not catch up"; }
for r in b c; do
  chunks one "${BUCKET[$r]}" "$T/chunks2.$r"
  comm -23 "$T/chunks.a2" "$T/chunks2.$r" > "$T/lacking.$r"
  [ ! -s "$T/lacking.$r" ] || { cat "$T/lacking.$r"; die "region $r lacks chunks"; }
  [ "$(copies "$r" failed)" -ge 1 ] && [ "$(copies "$r" fallback)" -ge 1 ] ||
    die "region $r: the failed copy was not counted (failed=$(copies "$r" failed) fallback=$(copies "$r" fallback))"
  [ "$(put_bytes "$r")" -gt 0 ] || die "region $r: nothing uploaded from the instance"
  [ "$(copied_bytes "$r")" -gt 0 ] || die "region $r: nothing copied"
done
grep -q "copying into region 'b' from region 'a' failed (.*not found" "$T/daemon.log" ||
  { grep -i copy "$T/daemon.log"; die "the missing source is not logged"; }
restore_from b r2 20

step "kill -9 during the fan-out: restarted, every region gets every chunk"
# quorum 1 and durable first: b and c start copying once a has committed
checkpoint r3 30 24
cks commit "$T/watch/r3/step_30.pt" --wait durable --timeout 120 -q || die "r3 not durable"
kill9_daemon
start_daemon_map
cks flush --wait replicated --deadline 120 || { tail -30 "$T/daemon.log"; die "not replicated after kill -9"; }
after=$(( $(copies b ok) + $(copies c ok) ))
echo "    copies made after the restart: $after"
[ "$after" -gt 0 ] || die "nothing left to copy after the kill: it did not land during the fan-out"
# a lacks only the chunk deleted above (its index still says present there)
for r in a b c; do chunks one "${BUCKET[$r]}" - | grep -v "^$gone " > "$T/chunks3.$r"; done
cmp -s "$T/chunks3.a" "$T/chunks3.b" && cmp -s "$T/chunks3.a" "$T/chunks3.c" ||
  die "after kill -9 the regions' chunks differ"
restore_from c r3 30
stop_daemon

step "the daemon copies objects above the copy limit in parts too (UploadPartCopy, limit 1 MiB)"
export CKPTSYNC_S3_COPY_MAX=1048576   # read by the daemon at start
start_daemon_map
unset CKPTSYNC_S3_COPY_MAX
checkpoint r6 60 6
cks commit "$T/watch/r6/step_60.pt" --wait replicated --timeout 120 -q || { tail -20 "$T/daemon.log"; die "r6 not replicated"; }
grep -q "region '[bc]': .* copied from region 'a' in [2-9] parts" "$T/daemon.log" ||
  { grep -i cop "$T/daemon.log" | tail -5; die "the daemon copied no chunk in parts"; }
for r in a b c; do chunks one "${BUCKET[$r]}" - | grep -v "^$gone " > "$T/chunks6.$r"; done
cmp -s "$T/chunks6.a" "$T/chunks6.b" && cmp -s "$T/chunks6.a" "$T/chunks6.c" || die "after copies in parts the regions' chunks differ"
restore_from b r6 60
stop_daemon

step "three servers: no region can copy from another; each gets the chunks from the instance"
rm -rf "$STATE" "$T/watch"   # a new repository: only r4 to replicate
write_config_s3 256K 1M 4M
encrypt_if_asked
sed -i "/^\[daemon\]/a metrics = 127.0.0.1:$MP\nsettle = 1" "$CONF"
start_daemon_map
grep -q "server-side copies: none (0 pairs)" "$T/daemon.log" || { grep -i cop "$T/daemon.log"; die "a copy pair across servers"; }
"$CKPTSYNCD" --config "$CONF" --check --connect > "$T/check3.out" || { cat "$T/check3.out"; die "--check --connect, three servers"; }
grep -q "^copy b <- a: no (probed: the copy was refused or came out wrong)$" "$T/check3.out" ||
  { cat "$T/check3.out"; die "--check --connect: a pair across servers is not a probed no"; }
checkpoint r4 40 6
cks commit "$T/watch/r4/step_40.pt" --wait replicated --timeout 120 -q || die "r4 not replicated"
chunks a "$S3_BUCKET" "$T/chunks4.a"
stored=$(sum_sizes "$T/chunks4.a")
for r in a b c; do
  [ "$(put_bytes "$r")" = "$stored" ] || die "region $r: put $(put_bytes "$r") bytes, expected $stored"
  [ "$(copied_bytes "$r")" = 0 ] || die "region $r copied across servers"
done
cks status --json > "$T/st4.json"
[ "$(json "$T/st4.json" '[r["latest"]["bytes_sent"] for r in d["runs"] if r["run"] == "r4"][0]')" = $((3 * stored)) ] ||
  { cat "$T/st4.json"; die "status --json: r4 did not send its chunks three times"; }
stop_daemon

step "a copy source in another store (copy_from = a, configured, across servers): not found there, named, then the upload"
in_region b copy_from a
checkpoint r5 50 3
cks snapshot --run r5 "$T/watch/r5/step_50.pt" --json > "$T/snap5.json" 2> "$T/snap5.err" ||
  { cat "$T/snap5.err"; die "CLI snapshot with a copy source in another store"; }
# the three servers all have a bucket "ckpt": b's server looks for a's object in its own
grep -q "copying into region 'b' from region 'a' failed (.*not found): the source object is not where region 'b''s store looks" "$T/snap5.err" ||
  { cat "$T/snap5.err"; die "the failed copy does not name the regions and the cause"; }
[ "$(json "$T/snap5.json" '[r["copies_failed"] > 0 and r["bytes_put"] > 0 and r["bytes_copied"] == 0 for r in d["regions"]][1]')" = True ] &&
  [ "$(json "$T/snap5.json" 'd["committed"]')" = 3 ] || { cat "$T/snap5.json"; die "b did not fall back to the upload"; }
echo "PASS"
