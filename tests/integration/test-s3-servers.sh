#!/usr/bin/env bash
# The S3 test servers themselves (tests/s3/, s3lib.sh), checked with
# independent clients — the AWS CLI and curl's SigV4 — before any ckptsync
# test relies on them: put/get, ListObjectsV2 continuation, Range GET,
# multipart upload, UNSIGNED-PAYLOAD, virtual-hosted requests, signature
# checking, and data surviving a SIGKILL and restart on the same port.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3lib.sh"

# s3api calls that must fail: exit status in $rc, stderr in $T/err.
try() { set +e; "$@" > "$T/out" 2> "$T/err"; rc=$?; set -e; }
# curl as a second SigV4 client (libcurl, like the backend), UNSIGNED-PAYLOAD.
s3curl() {
  curl -sS --fail-with-body --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" \
       -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$@"
}

step "three servers on three loopback ports"
start_s3 a; start_s3 b; start_s3 c
[ "${S3_PORT[a]}" != "${S3_PORT[b]}" ] && [ "${S3_PORT[b]}" != "${S3_PORT[c]}" ] &&
  [ "${S3_PORT[a]}" != "${S3_PORT[c]}" ] || die "ports not distinct: ${S3_PORT[*]}"
for s in a b c; do
  [ "$(aws_s3 $s s3api list-buckets --query 'Buckets[].Name' --output text)" = ckpt ] ||
    die "server $s has no bucket ckpt"
done
echo "ports: a=${S3_PORT[a]} b=${S3_PORT[b]} c=${S3_PORT[c]}"

step "put and get an object"
make_file "$T/obj" 3
aws_s3 a s3 cp --only-show-errors "$T/obj" s3://ckpt/team1/obj
aws_s3 a s3 cp --only-show-errors s3://ckpt/team1/obj "$T/obj.back"
cmp "$T/obj" "$T/obj.back" || die "object read back differs"
aws_s3 a s3api head-object --bucket ckpt --key team1/obj > "$T/head.json"
[ "$(json "$T/head.json" 'd["ContentLength"]')" = $((3 << 20)) ] || die "head-object: wrong length"
[ "$(json "$T/head.json" 'd["ETag"]')" = "\"$(md5sum < "$T/obj" | cut -d' ' -f1)\"" ] ||
  die "ETag is not the quoted MD5 of the content"
try aws_s3 b s3api head-object --bucket ckpt --key team1/obj
[ "$rc" -ne 0 ] || die "server b has server a's object"
aws_s3 a s3 rm --only-show-errors s3://ckpt/team1/obj.none   # DELETE of a missing key: fine
aws_s3 a s3 cp --only-show-errors s3://ckpt/team1/obj s3://ckpt/team1/obj.copy
aws_s3 a s3 rm --only-show-errors s3://ckpt/team1/obj.copy
try aws_s3 a s3api head-object --bucket ckpt --key team1/obj.copy
[ "$rc" -ne 0 ] || die "deleted object still there"

step "ListObjectsV2 with continuation tokens (25 keys, pages of 10)"
mkdir -p "$T/many"
for i in $(seq -w 1 25); do echo "$i" > "$T/many/k$i"; done
aws_s3 a s3 cp --only-show-errors --recursive "$T/many" s3://ckpt/team1/many/
aws_s3 a --debug s3api list-objects-v2 --bucket ckpt --prefix team1/many/ --page-size 10 \
  --query 'Contents[].Key' --output json > "$T/list.json" 2> "$T/list.debug"
[ "$(json "$T/list.json" 'len(d)')" = 25 ] || die "listed $(json "$T/list.json" 'len(d)') of 25 keys"
[ "$(json "$T/list.json" 'd == sorted(set(d))')" = True ] || die "keys repeated or out of order"
pages=$(grep -c 'Sending http request.*list-type=2' "$T/list.debug" || true)
tokens=$(grep -c 'Sending http request.*continuation-token=' "$T/list.debug" || true)
[ "$pages" = 3 ] && [ "$tokens" = 2 ] || die "expected 3 pages (2 with a token), saw $pages ($tokens)"

step "Range GET"
aws_s3 a s3 cp --only-show-errors "$T/obj" s3://ckpt/team1/obj
aws_s3 a s3api get-object --bucket ckpt --key team1/obj --range bytes=1000000-1999999 \
  "$T/range" > "$T/range.json"
[ "$(json "$T/range.json" 'd["ContentRange"]')" = "bytes 1000000-1999999/$((3 << 20))" ] ||
  die "Content-Range: $(json "$T/range.json" 'd["ContentRange"]')"
cmp "$T/range" <(tail -c +1000001 "$T/obj" | head -c 1000000) || die "range content differs"
aws_s3 a s3api get-object --bucket ckpt --key team1/obj --range bytes=3145000- "$T/tail" > /dev/null
cmp "$T/tail" <(tail -c +3145001 "$T/obj") || die "open-ended range differs"

step "multipart upload (20 MiB, 8 MB parts)"
aws_s3 a configure set default.s3.multipart_threshold 8MB
aws_s3 a configure set default.s3.multipart_chunksize 8MB
make_file "$T/big" 20
aws_s3 a --debug s3 cp --only-show-errors "$T/big" s3://ckpt/team1/big 2> "$T/mp.debug"
grep -q 'Sending http request.*?uploads' "$T/mp.debug" || die "no CreateMultipartUpload"
parts=$(grep -c 'Sending http request.*partNumber=' "$T/mp.debug" || true)
[ "$parts" = 3 ] || die "expected 3 UploadPart requests, saw $parts"
grep -q 'Sending http request.*method=POST.*uploadId=' "$T/mp.debug" || die "no CompleteMultipartUpload"
aws_s3 a s3 cp --only-show-errors s3://ckpt/team1/big "$T/big.back"
cmp "$T/big" "$T/big.back" || die "multipart object differs"

step "UNSIGNED-PAYLOAD and virtual-hosted requests (curl's SigV4)"
if command -v curl > /dev/null 2>&1; then
  make_file "$T/u" 1
  s3curl -T "$T/u" "$(s3_url c)/ckpt/team1/unsigned" > /dev/null || die "unsigned PUT refused"
  s3curl -o "$T/u.back" "$(s3_url c)/ckpt/team1/unsigned" || die "unsigned GET refused"
  cmp "$T/u" "$T/u.back" || die "unsigned object differs"
  # Host: ckpt.s3.localhost:PORT, path /team1/... (curl resolves *.localhost itself).
  vh="http://ckpt.s3.localhost:${S3_PORT[c]}"
  s3curl -T "$T/u" "$vh/team1/vhost" > /dev/null || die "virtual-hosted PUT refused"
  s3curl -o "$T/vh.back" "$vh/team1/vhost" || die "virtual-hosted GET refused"
  cmp "$T/u" "$T/vh.back" || die "virtual-hosted object differs"
  # %2F: curl 7.88 signs the query string as written, SigV4 wants '/' encoded.
  s3curl -o "$T/vh.list" "$vh/?list-type=2&prefix=team1%2F" || die "virtual-hosted list refused"
  grep -q '<Key>team1/vhost</Key>' "$T/vh.list" || die "virtual-hosted list lacks the object"
  aws_s3 c s3api head-object --bucket ckpt --key team1/vhost > /dev/null
else
  echo "no curl: skipped this step"
fi

step "HTTPS (start_s3 --tls): verified with the test CA, refused without it"
start_s3 d --tls
[ "$(s3_url d)" = "https://127.0.0.1:${S3_PORT[d]}" ] || die "s3_url d: $(s3_url d)"
aws_s3 d s3 cp --only-show-errors "$T/obj" s3://ckpt/team1/tls
aws_s3 d s3 cp --only-show-errors s3://ckpt/team1/tls "$T/tls.back"
cmp "$T/obj" "$T/tls.back" || die "object over HTTPS differs"
if command -v curl > /dev/null 2>&1; then
  s3curl --cacert "$S3_TLS_CERT" -o "$T/tls.vh" "https://ckpt.s3.localhost:${S3_PORT[d]}/team1/tls" ||
    die "virtual-hosted GET over HTTPS refused"
  cmp "$T/obj" "$T/tls.vh" || die "virtual-hosted object over HTTPS differs"
  try s3curl -o /dev/null "$(s3_url d)/ckpt/team1/tls"
  [ "$rc" -ne 0 ] || die "self-signed certificate accepted without the CA"
fi
stop_s3 d

step "a wrong secret gets SignatureDoesNotMatch, an unknown key InvalidAccessKeyId"
S3_SECRET_KEY=not-the-secret try aws_s3 a s3 ls s3://ckpt/team1/
[ "$rc" -ne 0 ] || die "wrong secret accepted"
grep -q SignatureDoesNotMatch "$T/err" || { cat "$T/err" >&2; die "no SignatureDoesNotMatch"; }
S3_SECRET_KEY=not-the-secret try aws_s3 a s3 cp "$T/u" s3://ckpt/team1/forged
[ "$rc" -ne 0 ] || die "PUT with a wrong secret accepted"
try aws_s3 a s3api head-object --bucket ckpt --key team1/forged
[ "$rc" -ne 0 ] || die "PUT with a wrong secret stored an object"
S3_ACCESS_KEY=NOBODY try aws_s3 a s3 ls s3://ckpt/team1/
[ "$rc" -ne 0 ] && grep -q InvalidAccessKeyId "$T/err" || { cat "$T/err" >&2; die "unknown key accepted"; }

step "SIGKILL a server, restart it on the same port and data"
aws_s3 b s3 cp --only-show-errors "$T/obj" s3://ckpt/team1/persist
port_b=${S3_PORT[b]}
kill_s3 b
AWS_MAX_ATTEMPTS=1 try aws_s3 b s3api head-object --bucket ckpt --key team1/persist
[ "$rc" -ne 0 ] || die "killed server still answers"
restart_s3 b
[ "${S3_PORT[b]}" = "$port_b" ] || die "restarted on port ${S3_PORT[b]}, not $port_b"
aws_s3 b s3 cp --only-show-errors s3://ckpt/team1/persist "$T/persist.back"
cmp "$T/obj" "$T/persist.back" || die "object lost or changed across kill -9 and restart"

step "SIGTERM stops a server; restart_s3 brings it back"
aws_s3 c s3 cp --only-show-errors "$T/obj" s3://ckpt/team1/persist
pid_c=${S3_PID[c]}
stop_s3 c
[ ! -e "/proc/$pid_c" ] || die "server c still running after stop_s3"
restart_s3 c
aws_s3 c s3 cp --only-show-errors s3://ckpt/team1/persist "$T/persist.c"
cmp "$T/obj" "$T/persist.c" || die "server c lost its data across SIGTERM and restart"
step "write_config_s3: three s3 regions on the three servers"
write_config_s3 256K 1M 4M virtual unsigned
[ "$(grep -c '^kind = s3$' "$CONF")" = 3 ] || die "not three s3 regions"
for s in a b c; do
  grep -qx "endpoint = http://s3.localhost:${S3_PORT[$s]}" "$CONF" || die "no endpoint for $s"
done
grep -qx 'addressing = virtual' "$CONF" && grep -qx 'payload = unsigned' "$CONF" || die "options"
[ "$(stat -c %a "$S3_CREDENTIALS")" = 600 ] || die "credentials file is not 0600"
grep -qx 'aws_secret_access_key = S3RVER' "$S3_CREDENTIALS" || die "credentials content"
write_config_s3
grep -qx "endpoint = http://127.0.0.1:${S3_PORT[a]}" "$CONF" && grep -qx 'addressing = path' "$CONF" ||
  die "default config is not path-style on 127.0.0.1"

stop_s3 a; stop_s3 b; stop_s3 c
echo "s3-servers: ok"
