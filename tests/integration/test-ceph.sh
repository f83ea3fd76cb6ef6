#!/usr/bin/env bash
# S3 regions on a real S3 implementation: Ceph RGW (Debian 12's Ceph 16.2,
# tests/ceph/ceph.sh; one cluster, a gateway and a bucket per region).  Both
# payload modes and addressing styles, multipart (forced with a low
# threshold, and a chunk of 64 MiB or more at the built-in one), paged
# listings, interop with the AWS CLI, a wrong secret (a clear 403, not a
# silent retry), a gateway killed during an upload, the cluster killed and
# restarted, and what RGW does with conditional PUTs (If-None-Match: *,
# If-Match).  Skipped (77) where Ceph is not installed or cannot start.
. "$(dirname "$0")/lib.sh"
. "$CKS_SOURCE_DIR/tests/integration/cephlib.sh"
start_ceph

# in_region NAME KEY VALUE: sets KEY in [region.NAME] of $CONF.
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

roundtrip() {  # NAME MIB: snapshot a checkpoint, restore it, compare bit for bit
  local ck="$T/data/$1"
  mkdir -p "$ck"
  head -c $(($2 << 20)) /dev/urandom > "$ck/weights.bin"
  printf '{"a": 1}\n' > "$ck/config.json"
  cks snapshot "$ck" --run r1 --json > "$T/$1.json" 2> "$T/snapshot.err" || { cat "$T/snapshot.err"; die "$1: snapshot"; }
  [ "$(json "$T/$1.json" 'd["committed"]')" = 3 ] || die "$1: not committed in 3 regions"
  rm -rf "$T/restored"
  cks restore --run r1 --latest --to "$T/restored" -q || die "$1: restore"
  same_tree "$ck" "$T/restored/$1"
}

# no_uploads_left: no multipart upload left open in any bucket.
no_uploads_left() {
  local b
  for b in ckpt-a ckpt-b ckpt-c; do
    aws_ceph s3api list-multipart-uploads --bucket "$b" --output json > "$T/mpu.json"
    [ ! -s "$T/mpu.json" ] || [ "$(json "$T/mpu.json" 'len(d.get("Uploads", []))')" = 0 ] ||
      { cat "$T/mpu.json"; die "multipart uploads left open in $b"; }
  done
}

step "path-style, signed payloads"
CEPH_PREFIX=path write_config_ceph 64K 256K 1M path signed
grep -q "endpoint = http://127.0.0.1:" "$CONF" || die "not a path-style config"
roundtrip ck-path 3
cks verify -q || die "verify (path, signed)"
for b in ckpt-a ckpt-b ckpt-c; do
  aws_ceph s3 ls "s3://$b/path/" --recursive > "$T/ls.txt"
  grep -q " path/snapshots/r1/" "$T/ls.txt" || { cat "$T/ls.txt"; die "no manifest in $b"; }
done

step "virtual-hosted addressing (Host: ckpt-a.localhost), UNSIGNED-PAYLOAD"
rm -rf "$STATE"
CEPH_PREFIX=vhost write_config_ceph 64K 256K 1M virtual unsigned
grep -q "endpoint = http://localhost:" "$CONF" || die "not a virtual-hosted config"
roundtrip ck-vhost 3
cks verify -q || die "verify (virtual, unsigned)"
# radosgw logs the path as sent: without the bucket when it came in the Host
grep -q '"PUT /vhost/chunks/' "$CEPH_DIR/log/client.rgw.0.log" || die "no virtual-hosted PUT in radosgw's log"
aws_ceph s3 ls s3://ckpt-b/vhost/ --recursive > "$T/ls.txt"
grep -q " vhost/snapshots/r1/" "$T/ls.txt" || { cat "$T/ls.txt"; die "virtual-hosted manifest not in ckpt-b"; }

step "path-style, signed payloads, chunks above a lowered multipart threshold (6 MiB)"
rm -rf "$STATE"
write_config_ceph 4M 8M 16M path signed
export CKPTSYNC_S3_MULTIPART_MIN=$((6 << 20))
roundtrip ck-multipart 40
unset CKPTSYNC_S3_MULTIPART_MIN
grep -q "uploaded in [0-9]* parts" "$T/snapshot.err" || { cat "$T/snapshot.err"; die "no chunk went up in parts"; }
aws_ceph s3 ls s3://ckpt-a/team1/chunks/ --recursive | awk '$3 >= 6291456' | grep . > /dev/null || die "no big chunk stored"
no_uploads_left
cks verify -q || die "verify (multipart)"
cks verify --quick -q || die "verify --quick (ranged GETs)"
roundtrip ck-more 1
CKPTSYNC_S3_LIST_PAGE=2 cks ls --remote --run r1 --json > "$T/pages.json"
[ "$(json "$T/pages.json" 'len(d)')" = 2 ] || die "paged listing lost snapshots"
[ "$(json "$T/pages.json" 'min(x["regions"] for x in d)')" = 3 ] || die "paged listing: regions"
CKPTSYNC_S3_LIST_PAGE=2 cks verify -q || die "verify with paged listings"

step "interop: the AWS CLI lists and fetches what ckptsync wrote"
aws_ceph s3 ls s3://ckpt-b/team1/ --recursive > "$T/ls.txt"
grep -q " team1/repo$" "$T/ls.txt" || die "no repo object"
grep -q " team1/snapshots/r1/" "$T/ls.txt" || die "no manifest"
key=$(grep -o 'team1/chunks/../[0-9a-f]\{64\}' "$T/ls.txt" | sed -n 1p)
aws_ceph s3 cp "s3://ckpt-b/$key" "$T/chunk.obj" --only-show-errors
python3 "$CKS_SOURCE_DIR/tests/integration/chunk_decode.py" "$T/chunk.obj" "${key##*/}" ||
  die "a fetched chunk does not decode with the documented format"

step "a chunk of 64 MiB or more: a multipart upload at the built-in threshold"
rm -rf "$STATE"
CEPH_PREFIX=big write_config_ceph 32M 32M 128M path unsigned
sed -i '/^\[chunker\]/a normalization = 0' "$CONF"
# Each region's own multipart upload is what this step tests: no server-side
# copies (upload once would send the chunk to region a only).
sed -i '/^\[region\.[abc]\]/a copy_from = none' "$CONF"
# Incompressible content with a cut point past 64 MiB: seeded, so that the
# same file comes every time; the first seed that gives such a chunk.
mkdir -p "$T/data/ck-big"
found=
for seed in 1 2 3 4 5 6 7 8 9 10 11 12; do
  python3 -c 'import random, sys; sys.stdout.buffer.write(random.Random(int(sys.argv[1])).randbytes(150 << 20))' \
    "$seed" > "$T/data/ck-big/weights.bin"
  cks chunks "$T/data/ck-big/weights.bin" > "$T/cuts.txt"
  if awk '$2 >= 67108864 { f = 1 } END { exit !f }' "$T/cuts.txt"; then found=$seed; break; fi
done
[ -n "$found" ] || die "no seed gave a chunk of 64 MiB or more"
echo "seed $found: chunks $(awk '{ printf "%d ", $2 / 1048576 }' "$T/cuts.txt")(MiB)"
cks snapshot "$T/data/ck-big" --run big --json > "$T/big.json" 2> "$T/snapshot.err" || { cat "$T/snapshot.err"; die "big: snapshot"; }
[ "$(json "$T/big.json" 'd["committed"]')" = 3 ] || die "big: not committed in 3 regions"
[ "$(grep -c "uploaded in [0-9]* parts" "$T/snapshot.err")" -ge 3 ] ||
  { cat "$T/snapshot.err"; die "the big chunk did not go up in parts in every region"; }
aws_ceph s3 ls s3://ckpt-c/big/chunks/ --recursive | awk '$3 >= 67108864' | grep . > /dev/null || die "no chunk of 64 MiB or more stored"
no_uploads_left
rm -rf "$T/restored"
cks restore --run big --latest --to "$T/restored" -q || die "big: restore"
cmp "$T/data/ck-big/weights.bin" "$T/restored/ck-big/weights.bin" || die "big: restored copy differs"
cks verify --run big -q || die "verify (big)"
rm -rf "$T/data/ck-big" "$T/restored"

step "a wrong secret: a clear 403 in the CLI"
rm -rf "$STATE"
write_config_ceph 64K 256K 1M path signed
cp "$CONF" "$T/good.conf"
CEPH_SECRET_KEY=not-the-secret write_ceph_credentials "$T/bad-credentials"
for r in a b c; do in_region $r credentials "$T/bad-credentials"; done
mkdir -p "$T/data/ck-bad"; echo x > "$T/data/ck-bad/f"
expect_fail 1 cks snapshot "$T/data/ck-bad" --run r1
grep -q "HTTP 403 SignatureDoesNotMatch" "$T/err" || { cat "$T/err"; die "no 403 SignatureDoesNotMatch"; }
grep -q "region 'c'.*s3://ckpt-c/" "$T/err" || { cat "$T/err"; die "message does not name region and bucket"; }
CEPH_ACCESS_KEY=CKSNOSUCHKEY write_ceph_credentials "$T/unknown-credentials"
in_region a credentials "$T/unknown-credentials"
expect_fail 1 cks ls --remote
grep -q "HTTP 403 InvalidAccessKeyId" "$T/err" || { cat "$T/err"; die "no 403 InvalidAccessKeyId"; }
cp "$T/good.conf" "$CONF"

step "a wrong secret in one region: the daemon shows it failed, does not retry blindly"
in_region c credentials "$T/bad-credentials"
set_settle 1
start_daemon
mkdir -p "$T/watch/r2"
head -c $((2 << 20)) /dev/urandom > "$T/watch/r2/step_10.pt"
cks commit "$T/watch/r2/step_10.pt" --wait durable --timeout 60 -q || die "durable with two good regions"
wait_for 20 sh -c "'$CKPTSYNC' --config '$CONF' status --json | grep -q SignatureDoesNotMatch" \
  || { cks status; die "403 not in status"; }
cks status --json > "$T/st.json" || [ $? = 5 ]
[ "$(json "$T/st.json" '[r["state"] for r in d["regions"] if r["name"]=="c"][0]')" = failed ] || die "c not failed"
n1=$(json "$T/st.json" '[r["failures"] for r in d["regions"] if r["name"]=="c"][0]')
sleep 3
cks status --json > "$T/st2.json" || [ $? = 5 ]
n2=$(json "$T/st2.json" '[r["failures"] for r in d["regions"] if r["name"]=="c"][0]')
[ "$n1" = "$n2" ] || die "a 403 was retried silently ($n1 -> $n2 failures)"
stop_daemon

step "region c's gateway killed during an upload: durable; restarted, the region catches up"
cp "$T/good.conf" "$CONF"
set_settle 1
# region c uploads at 8 MB/s, so the 48 MiB are still in flight there when
# its gateway dies (ingest and the other regions finish in well under a second)
sed -i "/^\[region.c\]/a bandwidth = 8000000" "$CONF"
start_daemon
cks retry c -q 2> /dev/null || true
head -c $((48 << 20)) /dev/urandom > "$T/watch/r2/step_20.pt"
cks commit "$T/watch/r2/step_20.pt" -q
sleep 0.3
kill_ceph_region c
cks commit "$T/watch/r2/step_20.pt" --wait durable --timeout 120 --json > "$T/c.json" \
  || { tail -20 "$T/daemon.log"; die "not durable with one gateway dead"; }
wait_for 30 sh -c "'$CKPTSYNC' --config '$CONF' status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if [r for r in d[\"regions\"] if r[\"name\"]==\"c\" and r[\"state\"]==\"backoff\"] else 1)'" \
  || { cks status; die "region c not in backoff"; }
restart_ceph_region c
cks retry c -q
cks flush --wait replicated --deadline 180 || { cks status; die "region c did not catch up"; }
stop_daemon
cks verify --run r2 > "$T/v.txt" || { cat "$T/v.txt"; die "verify after the outage"; }
[ "$(grep -c ' complete:' "$T/v.txt")" = 3 ] || die "not all three regions complete"

step "the whole cluster killed (SIGKILL) and started again: everything still there"
"$CKS_CEPH_SH" kill "$CEPH_DIR"
"$CKS_CEPH_SH" restart "$CEPH_DIR" > "$T/ceph-restart.log" 2>&1 || { cat "$T/ceph-restart.log"; die "ceph restart"; }
_ceph_env
echo "restarted in $CEPH_START_SECONDS s"
cks verify > "$T/v.txt" || { cat "$T/v.txt"; die "verify after the cluster restart"; }
rm -rf "$T/restored"
cks restore --run r2 --latest --to "$T/restored" -q || die "restore after the cluster restart"
cmp "$T/watch/r2/step_20.pt" "$T/restored/step_20.pt" || die "restored step_20.pt differs"

step "conditional PUTs on RGW (what a create-only ref could rely on)"
# put KEY HEADER...: a signed PUT of $T/cond.body; prints "STATUS CODE".
put() {
  local key=$1; shift
  local h=() x
  for x in "$@"; do h+=(-H "$x"); done
  curl -sS -o "$T/put.out" -w '%{http_code}' --aws-sigv4 "aws:amz:$CEPH_S3_REGION:s3" \
    --user "$CEPH_ACCESS_KEY:$CEPH_SECRET_KEY" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
    "${h[@]}" -T "$T/cond.body" "$(ceph_url a)/ckpt-a/cond/$key"
  echo " $(sed -n 's/.*<Code>\([^<]*\)<\/Code>.*/\1/p' "$T/put.out")"
}
echo one > "$T/cond.body"
r=$(put k 'If-None-Match: *'); [ "$r" = "200 " ] || die "If-None-Match: * on a new key: $r"
etag=$(aws_ceph s3api head-object --bucket ckpt-a --key cond/k --query ETag --output text)
echo two > "$T/cond.body"
r=$(put k 'If-None-Match: *'); [ "$r" = "412 PreconditionFailed" ] || die "If-None-Match: * on an existing key: $r"
aws_ceph s3 cp s3://ckpt-a/cond/k - | grep -x one > /dev/null || die "a refused conditional PUT replaced the object"
r=$(put k 'If-Match: "0123456789abcdef0123456789abcdef"'); [ "$r" = "412 PreconditionFailed" ] || die "If-Match (wrong ETag): $r"
r=$(put absent 'If-Match: *'); [ "$r" = "412 PreconditionFailed" ] || die "If-Match: * on a missing key: $r"
# Observed on 16.2.15, not asserted: RGW compares If-Match with the ETag
# unquoted, so the quoted ETag (as HEAD returns it, as S3 wants it) is 412.
echo "If-Match: $etag (quoted, right) -> $(put k "If-Match: $etag")"
echo "If-Match: ${etag//\"/} (unquoted, right) -> $(put k "If-Match: ${etag//\"/}")"
echo "ceph: ok"
