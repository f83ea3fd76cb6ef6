#!/usr/bin/env bash
# Create-only puts on real S3 servers: what each server really does with
# "If-None-Match: *" on PUT, found out with curl's SigV4 (not ckptsync),
# and the s3 backend's precondition probe and region_put_new checked
# against that (tests/unit/test-region-s3, whose server tests run with
# CKS_S3_TEST_*): the same answer, the signed header accepted, the second
# create refused exactly when the server refuses it, one winner of eight
# racing creates where it is enforced, no probe object left, three
# requests per probe.  Servers: s3rver (the pinned test server, which
# ignores the header), and Ceph RGW (tests/ceph/ceph.sh, which honours it)
# when Ceph is installed.
. "$(dirname "$0")/lib.sh"
. "$CKS_SOURCE_DIR/tests/integration/s3lib.sh"

BIN="$CKS_BUILD_DIR/tests/test-region-s3"
[ -x "$BIN" ] || die "no $BIN (build the unit tests: cmake --build \$CKS_BUILD_DIR)"
CEPH_SH="$CKS_SOURCE_DIR/tests/ceph/ceph.sh"

# The server under test: SRV_URL, SRV_AK, SRV_SK, SRV_CRED (a credentials file).
use_server() {
  SRV_URL=$1 SRV_AK=$2 SRV_SK=$3 SRV_CRED="$T/cred-$4"
  (umask 077; printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
    "$SRV_AK" "$SRV_SK" > "$SRV_CRED")
}

# curl as a second SigV4 client, UNSIGNED-PAYLOAD; prints the HTTP status.
s3curl() {
  curl -sS -o "$T/curl.body" -w '%{http_code}' --aws-sigv4 "aws:amz:$S3_REGION:s3" \
       --user "$SRV_AK:$SRV_SK" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"
}

# server_truth: two PUTs of one new key with If-None-Match: *; sets
# $second (the HTTP status of the second) and $enforces (1 if refused).
server_truth() {
  local url="$SRV_URL/$S3_BUCKET/curl/k-$RANDOM-$$" first stored
  echo one > "$T/one"; echo two > "$T/two"
  first=$(s3curl -H 'If-None-Match: *' -T "$T/one" "$url")
  [ "$first" = 200 ] || { cat "$T/curl.body"; die "first create: HTTP $first"; }
  second=$(s3curl -H 'If-None-Match: *' -T "$T/two" "$url")
  case $second in 412) enforces=1 ;; 200) enforces=0 ;;
    *) cat "$T/curl.body"; die "second create: HTTP $second" ;; esac
  [ "$(s3curl "$url")" = 200 ] || die "reading $url back"
  stored=$(cat "$T/curl.body")
  local want=two
  [ "$enforces" = 0 ] || want=one
  [ "$stored" = "$want" ] || die "HTTP $second, yet the object holds \"$stored\""
  s3curl -X DELETE "$url" > /dev/null
  echo "second PUT with If-None-Match: *: HTTP $second, object then \"$stored\" (enforces=$enforces)"
}

# region_s3 [env...]: the unit test's server tests against $SRV_URL.
region_s3() {
  env CKS_S3_TEST_ENDPOINT="$SRV_URL" CKS_S3_TEST_BUCKET="$S3_BUCKET" \
      CKS_S3_TEST_PREFIX=precond CKS_S3_TEST_CREDENTIALS="$SRV_CRED" \
      CKS_S3_TEST_ENFORCES="$enforces" CMOCKA_MESSAGE_OUTPUT=stdout "$@" "$BIN" \
      > "$T/unit.out" 2>&1 || { cat "$T/unit.out" >&2; die "test-region-s3 failed"; }
  grep -E '^(probe|race|refused):' "$T/unit.out" || true
  ! grep -q SKIPPED "$T/unit.out" || { cat "$T/unit.out"; die "test-region-s3 skipped its server tests"; }
  grep -qx "probe: enforced=$enforces" "$T/unit.out" || die "the probe disagrees with the server"
}

# no_probe_left: nothing under precond/probe/ (the AWS CLI prints nothing
# at all for an empty listing).
no_probe_left() {
  aws_s3 a s3api list-objects-v2 --bucket "$S3_BUCKET" --prefix precond/probe/ > "$T/left.json"
  [ ! -s "$T/left.json" ] || [ "$(json "$T/left.json" 'len(d.get("Contents", []))')" = 0 ] ||
    { cat "$T/left.json"; die "a probe object was left behind"; }
}

start_s3 a --verbose
use_server "$(s3_url a)" "$S3_ACCESS_KEY" "$S3_SECRET_KEY" s3rver
version=$(json "$CKS_S3_DIR/node_modules/@20minutes/s3rver/package.json" 'd["version"]')

step "what s3rver $version does with If-None-Match: * (curl)"
server_truth
# The pinned version ignores the header (tests/s3/README.md); a new pin
# that honours it must update that table, and this line.
[ "$version" != 5.0.0 ] || [ "$enforces" = 0 ] || die "s3rver 5.0.0 was expected to ignore If-None-Match"
s3rver_second=$second

step "s3rver: the probe says the same, and put_new behaves accordingly"
region_s3
no_probe_left

step "s3rver: one probe costs three requests (PUT, PUT, DELETE)"
: > "$T/s3-a.log"
region_s3 CKS_S3_TEST_ONLY=test_server_probe
n=$(grep -cE 'precond/probe/[0-9a-f]{16} [0-9]{3} ' "$T/s3-a.log" || true)
[ "$n" = 3 ] || { cat "$T/s3-a.log"; die "the probe made $n requests, expected 3"; }

step "Ceph RGW: the same checks, against a store that enforces the header"
ceph_note="Ceph not tried"
_ceph_stop() {
  if [ -s "$T/ceph/env" ]; then "$CEPH_SH" stop "$T/ceph" > /dev/null 2>&1 || true; fi
}
if [ ! -x "$CEPH_SH" ] || ! "$CEPH_SH" check 2> "$T/ceph-check.err"; then
  echo "skipped: $(cat "$T/ceph-check.err" 2> /dev/null || echo "no $CEPH_SH")"
else
  CKS_CLEANUP_HOOKS+=(_ceph_stop)
  set +e; "$CEPH_SH" start "$T/ceph" "$S3_BUCKET" > "$T/ceph.log" 2>&1; rc=$?; set -e
  if [ $rc = 77 ]; then
    echo "skipped: $(grep 'cannot start' "$T/ceph.log" | sed -n 1p)"
  else
    [ $rc = 0 ] || { cat "$T/ceph.log"; die "ceph.sh start failed"; }
    # shellcheck disable=SC1091
    . "$T/ceph/env"
    use_server "$CEPH_RGW_URL" "$CEPH_ACCESS_KEY" "$CEPH_SECRET_KEY" ceph
    server_truth
    region_s3
    ceph_note="Ceph RGW: HTTP $second, probe enforced=$enforces"
  fi
fi
echo "ok: s3rver $version: If-None-Match: * on PUT -> HTTP $s3rver_second, probe enforced=0; $ceph_note"
