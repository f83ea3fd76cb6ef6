#!/usr/bin/env bash
# S3 regions on three real S3 servers (s3rver, which checks SigV4): both
# addressing styles and payload modes, multipart uploads, interop with the
# AWS CLI (a chunk it fetches decodes with the documented format), a wrong
# secret (a clear 403, not a silent retry), and a server killed during an
# upload (the other two complete; restarted, it catches up).
. "$(dirname "$0")/lib.sh"
. "$CKS_SOURCE_DIR/tests/integration/s3lib.sh"

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

roundtrip() {  # NAME MIB: snapshot a checkpoint, restore it, compare
  local ck="$T/data/$1"
  mkdir -p "$ck"
  head -c $(($2 << 20)) /dev/urandom > "$ck/weights.bin"
  printf '{"a": 1}\n' > "$ck/config.json"
  cks snapshot "$ck" --run r1 --json > "$T/$1.json" 2> "$T/snapshot.err" || { cat "$T/snapshot.err"; die "$1: snapshot"; }
  rm -rf "$T/restored"
  cks restore --run r1 --latest --to "$T/restored" -q || die "$1: restore"
  diff -r "$ck" "$T/restored/$1" > /dev/null || die "$1: restored copy differs"
}

step "virtual-hosted addressing, UNSIGNED-PAYLOAD"
S3_PREFIX=vhost write_config_s3 64K 256K 1M virtual unsigned
grep -q "endpoint = http://s3.localhost" "$CONF" || die "not a virtual-hosted config"
roundtrip ck-vhost 3
cks verify -q || die "verify (virtual, unsigned)"

step "path-style, signed payloads, chunks above the multipart threshold"
rm -rf "$STATE"
S3_PREFIX=team1 write_config_s3 4M 8M 16M path signed
export CKPTSYNC_S3_MULTIPART_MIN=$((6 << 20))
roundtrip ck-multipart 40
unset CKPTSYNC_S3_MULTIPART_MIN
[ "$(json "$T/ck-multipart.json" 'd["committed"]')" = 3 ] || die "multipart snapshot not in 3 regions"
grep -q "uploaded in [0-9]* parts" "$T/snapshot.err" || { cat "$T/snapshot.err"; die "no chunk went up in parts"; }
aws_s3 a s3 ls s3://ckpt/team1/chunks/ --recursive | awk '$3 >= 6291456' | grep . > /dev/null || die "no big chunk stored"
cks verify -q || die "verify (path, signed, multipart)"
cks verify --quick -q || die "verify --quick (ranged GETs)"
# listing in pages of 2 keys: continuation tokens
roundtrip ck-more 1
CKPTSYNC_S3_LIST_PAGE=2 cks ls --remote --run r1 --json > "$T/pages.json"
[ "$(json "$T/pages.json" 'len(d)')" = 2 ] || die "paged listing lost snapshots"
[ "$(json "$T/pages.json" 'min(x["regions"] for x in d)')" = 3 ] || die "paged listing: regions"
CKPTSYNC_S3_LIST_PAGE=2 cks verify -q || die "verify with paged listings"

step "interop: the AWS CLI lists and fetches what ckptsync wrote"
aws_s3 b s3 ls s3://ckpt/team1/ --recursive > "$T/ls.txt"
grep -q " team1/repo$" "$T/ls.txt" || die "no repo object"
grep -q " team1/commits/r1/g0\.s" "$T/ls.txt" || die "no commit record"
grep -q " team1/snapshots/r1/" "$T/ls.txt" || die "no manifest"
key=$(grep -o 'team1/chunks/../[0-9a-f]\{64\}' "$T/ls.txt" | sed -n 1p)
aws_s3 b s3 cp "s3://ckpt/$key" "$T/chunk.obj" --only-show-errors
python3 "$CKS_SOURCE_DIR/tests/integration/chunk_decode.py" "$T/chunk.obj" "${key##*/}" ||
  die "a fetched chunk does not decode with the documented format"
ckey=$(grep -o 'team1/commits/r1/g0\.s[^ ]*' "$T/ls.txt" | sed -n 1p)
aws_s3 c s3 cp "s3://ckpt/$ckey" - | grep "^ckptsync-commit 1$" > /dev/null || die "commit record unreadable"

step "a credentials file readable by others is refused"
cp "$S3_CREDENTIALS" "$T/open-credentials"; chmod 0644 "$T/open-credentials"
cp "$CONF" "$T/good.conf"
in_region b credentials "$T/open-credentials"
expect_fail 1 cks ls --remote
grep -q "open-credentials\" is readable by group or others" "$T/err" || { cat "$T/err"; die "open credentials accepted"; }
# ckptsyncd --check reads the credentials files the daemon will need (#26 item 9)
expect_fail 1 "$CKPTSYNCD" --config "$CONF" --check
grep -q "region b: configuration: FAILED: .*open-credentials\" is readable by group or others" "$T/out" \
  || { cat "$T/out" "$T/err"; die "--check accepted credentials readable by others"; }
in_region b credentials "$T/no-such-credentials"
expect_fail 1 "$CKPTSYNCD" --config "$CONF" --check --json
[ "$(json "$T/out" '[r["credentials"]["state"] for r in d["preflight"]]')" = "['ok', 'failed', 'ok']" ] || { cat "$T/out"; die "--check --json preflight"; }
json "$T/out" 'd["preflight"][1]["credentials"]["text"]' | grep "no-such-credentials\": No such file" > /dev/null \
  || { cat "$T/out"; die "--check: a missing credentials file is not named"; }
cp "$T/good.conf" "$CONF"
"$CKPTSYNCD" --config "$CONF" --check --connect > "$T/out" || { cat "$T/out"; die "--check --connect on good regions"; }
for r in a b c; do
  grep -q "^region $r: connection: reachable$" "$T/out" && grep -q "^region $r: repository: repository [0-9a-f]*, chunker .*, not encrypted$" "$T/out" \
    || { cat "$T/out"; die "--check --connect: region $r"; }
done

step "a wrong secret: a clear 403 in the CLI"
S3_SECRET_KEY=not-the-secret write_s3_credentials "$T/bad-credentials"
cp "$CONF" "$T/good.conf"
in_region c credentials "$T/bad-credentials"
in_region a credentials "$T/bad-credentials"
in_region b credentials "$T/bad-credentials"
mkdir -p "$T/data/ck-bad"; echo x > "$T/data/ck-bad/f"
expect_fail 1 cks snapshot "$T/data/ck-bad" --run r1
grep -q "HTTP 403 SignatureDoesNotMatch" "$T/err" || { cat "$T/err"; die "no 403 SignatureDoesNotMatch"; }
grep -q "region 'c'.*s3://ckpt/" "$T/err" || { cat "$T/err"; die "message does not name region and bucket"; }

step "one region refusing the credentials: access denied with the store's whole message; ls --remote exits 5, restore warns"
cp "$T/good.conf" "$CONF"
in_region c credentials "$T/bad-credentials"
"$CKPTSYNCD" --config "$CONF" --check > /dev/null || die "--check contacts a region without --connect"
expect_fail 1 "$CKPTSYNCD" --config "$CONF" --check --connect
grep -q "^region c: connection: FAILED: .*access denied (HTTP 403 SignatureDoesNotMatch)" "$T/out" && grep -q "^region a: connection: reachable$" "$T/out" \
  || { cat "$T/out" "$T/err"; die "--check --connect: the refusing region is not named"; }
expect_fail 5 cks ls --remote
grep -q "warning: .*region 'c'.*access denied (HTTP 403 SignatureDoesNotMatch): The request signature we calculated does not match the signature you provided. Check your key and signing method.$" "$T/err" \
  || { cat "$T/err"; die "ls --remote: no access denied warning with the whole message"; }
grep -q "error:" "$T/err" && { cat "$T/err"; die "ls --remote: an error line though the listing succeeded"; }
grep -q "unreachable" "$T/err" && { cat "$T/err"; die "ls --remote: a 403 called unreachable"; }
grep -q "^r1 " "$T/out" || { cat "$T/out"; die "ls --remote lists nothing from the other regions"; }
cks repo > "$T/repo.txt" 2> /dev/null || true
grep -q "^region c .*access denied" "$T/repo.txt" || { cat "$T/repo.txt"; die "repo: region c not access denied"; }
rm -rf "$T/restored"
cks restore --run r1 --latest --to "$T/restored" > /dev/null 2> "$T/err" || { cat "$T/err"; die "restore with one region refusing"; }
grep -q "warning: .*region 'c'.*access denied" "$T/err" && ! grep -q "error:" "$T/err" \
  || { cat "$T/err"; die "restore with a region down: not a warning"; }

step "a bucket that does not exist: NoSuchBucket said once on stderr, and in the region's line"
cp "$T/good.conf" "$CONF"
in_region c bucket no-such-bucket
mkdir -p "$T/data/ck-nsb"; echo x > "$T/data/ck-nsb/f"
expect_fail 1 cks snapshot "$T/data/ck-nsb" --run r1
[ "$(grep -c "NoSuchBucket" "$T/err")" = 1 ] || { cat "$T/err"; die "NoSuchBucket not said exactly once on stderr"; }
grep -q "region 'c'.*s3://no-such-bucket/.*HTTP 404 NoSuchBucket" "$T/err" || { cat "$T/err"; die "NoSuchBucket message"; }
grep -q "region c .*FAILED: .*NoSuchBucket" "$T/out" || { cat "$T/out"; die "region c's line does not say NoSuchBucket"; }

step "a wrong secret in one region: the daemon shows it failed, does not retry blindly"
cp "$T/good.conf" "$CONF"
in_region c credentials "$T/bad-credentials"
set_settle 1
start_daemon
mkdir -p "$T/watch/r2"
head -c $((2 << 20)) /dev/urandom > "$T/watch/r2/step_10.pt"
cks commit "$T/watch/r2/step_10.pt" --wait durable --timeout 60 -q || die "durable with two good regions"
wait_for 20 sh -c "'$CKPTSYNC' --config '$CONF' status --json | grep -q SignatureDoesNotMatch" \
  || { cks status; die "403 not in status"; }
rc=0; cks status --json > "$T/st.json" || rc=$?
[ "$rc" = 5 ] || die "status exited $rc with region c refusing the credentials, not 5"
[ "$(json "$T/st.json" '[r["state"] for r in d["regions"] if r["name"]=="c"][0]')" = failed ] || die "c not failed"
[ "$(json "$T/st.json" '[r["access_denied"] for r in d["regions"]]')" = "[False, False, True]" ] || die "access_denied"
json "$T/st.json" '[r["last_error"] for r in d["regions"] if r["name"]=="c"][0]' | grep "access denied (HTTP 403 SignatureDoesNotMatch): .*Check your key and signing method.$" > /dev/null \
  || { cat "$T/st.json"; die "status: the 403 is not access denied with the whole message"; }
cks status > "$T/st.txt" || [ $? = 5 ]
grep -q "^c  *denied " "$T/st.txt" || { cat "$T/st.txt"; die "human status: region c not denied"; }
n1=$(json "$T/st.json" '[r["failures"] for r in d["regions"] if r["name"]=="c"][0]')
sleep 3
cks status --json > "$T/st2.json" || [ $? = 5 ]
n2=$(json "$T/st2.json" '[r["failures"] for r in d["regions"] if r["name"]=="c"][0]')
[ "$n1" = "$n2" ] || die "a 403 was retried silently ($n1 -> $n2 failures)"
stop_daemon

step "a server killed during an upload: the snapshot is durable; restarted, the region catches up"
cp "$T/good.conf" "$CONF"
set_settle 1
# region c uploads at 8 MB/s, so the 48 MiB are still in flight there when
# its server dies (ingest and the other regions finish in about a second)
sed -i "/^\[region.c\]/a bandwidth = 8000000" "$CONF"
start_daemon
cks retry c -q 2> /dev/null || true
head -c $((48 << 20)) /dev/urandom > "$T/watch/r2/step_20.pt"
cks commit "$T/watch/r2/step_20.pt" -q
sleep 0.3
kill_s3 c
cks commit "$T/watch/r2/step_20.pt" --wait durable --timeout 120 --json > "$T/c.json" \
  || { tail -20 "$T/daemon.log"; die "not durable with one server dead"; }
wait_for 30 sh -c "'$CKPTSYNC' --config '$CONF' status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if [r for r in d[\"regions\"] if r[\"name\"]==\"c\" and r[\"state\"]==\"backoff\"] else 1)'" \
  || { cks status; die "region c not in backoff"; }
restart_s3 c
cks retry c -q
cks flush --wait replicated --deadline 180 || { cks status; die "region c did not catch up"; }
stop_daemon
cks verify --run r2 > "$T/v.txt" || { cat "$T/v.txt"; die "verify after the outage"; }
[ "$(grep -c ' complete:' "$T/v.txt")" = 3 ] || die "not all three regions complete"
echo "s3: ok"
