#!/usr/bin/env bash
# A chunk that several files of one snapshot hold, read at once by
# several readers, is uploaded once (snapshot.c, sworker.claim; before
# it, commit 3825778^, two pool threads could look the same chunk id up,
# both find it absent, and both upload it: the CI rehearsal counted 2
# puts).  Deterministic through the test hook CKPTSYNC_TEST_SNAP_MEET=MS
# (base/testmeet.h): the first job that finds its chunk absent from the
# index and the region waits, just before its upload, up to MS for a
# second job of the same id to come to that point.  Without the claim the
# second comes and both upload; with it the second waits for the first
# and finds the chunk in the index.  One s3rver region behind reqlog.py,
# which logs every request: each chunk key must be PUT exactly once.
# Four identical files of two fixed 64 KiB chunks each, read by 4 readers
# on 4 workers; two rounds, new content each.
. "$(dirname "$0")/lib.sh"
. "$CKS_SOURCE_DIR/tests/integration/s3lib.sh"

start_s3 one
start_proxy reqlog.py "${S3_PORT[one]}" "$T/req.log" 0

write_s3_credentials
{
  config_head 64K 64K 64K | sed 's/^quorum = .*/quorum = 1\nworkers = 4\nreaders = 4\ncreate_settle = 1/'
  printf '[region.a]\nkind = s3\nendpoint = http://127.0.0.1:%s\nbucket = %s\nprefix = %s\n' \
    "$PROXY_PORT" "$S3_BUCKET" "$S3_PREFIX"
  printf 'region = %s\naddressing = path\ncredentials = %s\n' "$S3_REGION" "$S3_CREDENTIALS"
} > "$CONF"
mkdir -p "$T/watch"

for round in 1 2; do
  step "round $round: 4 identical files, 2 chunks each: each chunk PUT once"
  src="$T/src/checkpoint-$round"
  mkdir -p "$src"
  head -c $((128 << 10)) /dev/urandom > "$T/content"
  for f in 0 1 2 3; do cp "$T/content" "$src/shard-$f.bin"; done
  : > "$T/req.log"
  CKPTSYNC_TEST_SNAP_MEET=3000 "$CKPTSYNC" --config "$CONF" snapshot "$src" --run claim \
    --step "$round" --json > "$T/s.json" 2> "$T/s.err" || { cat "$T/s.err"; die "snapshot failed"; }
  grep -q "test hook CKPTSYNC_TEST_SNAP_MEET: " "$T/s.err" ||
    { cat "$T/s.err"; die "the test hook was not armed: no chunk waited before its upload"; }
  python3 - "$T/content" "$T/req.log" << 'PY' || { cat "$T/s.err" "$T/req.log"; die "round $round: a chunk was uploaded twice"; }
import collections, hashlib, re, sys
data = open(sys.argv[1], "rb").read()
want = {hashlib.sha256(data[o:o + 65536]).hexdigest() for o in range(0, len(data), 65536)}
puts = collections.Counter()
for line in open(sys.argv[2]):
    what, method, path = line.split()
    m = re.search(r"/chunks/.*?([0-9a-f]{64})", path)
    if what == "REQ" and method == "PUT" and m:
        puts[m.group(1)] += 1
twice = {k[:12]: n for k, n in puts.items() if n != 1}
if twice:
    sys.exit("PUT more than once: %s" % twice)
if set(puts) != want:
    sys.exit("%d chunks PUT, %d expected" % (len(puts), len(want)))
print("ok: %d chunks, one PUT each" % len(puts))
PY
  [ "$(json "$T/s.json" 'd["regions"][0]["objects_put"]')" = 2 ] ||
    { cat "$T/s.json"; die "round $round: the snapshot counts other than 2 objects put"; }
done
echo "snapshot-claim: ok"
