#!/usr/bin/env bash
# Restore asks for a priority group's chunks only once the group before is
# asked for, and across the boundary keeps no more than [restore] inflight
# bytes in flight (#24: the weights usable before the optimizer state has
# arrived).  Three s3rver buckets, all behind reqlog.py, a proxy that logs
# each request as it arrives and again just before its answer leaves, and
# holds each chunk GET 0.2 s (a link's latency).  Chunks are a fixed 256 KiB
# (min = avg = max), so the test knows every chunk's key (its SHA-256) and
# file: trainer_state.json (metadata, 1 chunk), model.safetensors
# (weights, 8 chunks), optimizer.pt (optimizer state, 16 chunks).
#   1. inflight = 0, --progressive: no weights chunk is asked for before
#      the metadata chunk's answer, no optimizer chunk before every
#      weights chunk's answer
#   2. inflight = 768K (3 chunks), the default restore: whenever a chunk
#      is asked for while one of an earlier group is unanswered, the
#      chunks unanswered (with it) are at most 768 KiB
# Both trees restored intact.  Before the gate (fetch.c), restore asked
# for as many chunks as its windows held (16 per region here) at once,
# whatever their group, and both steps failed.
. "$(dirname "$0")/lib.sh"
. "$CKS_SOURCE_DIR/tests/integration/s3lib.sh"

declare -A BUCKET=([a]=ckpt [b]=ckpt-b [c]=ckpt-c)
start_s3 one --bucket "${BUCKET[b]}" --bucket "${BUCKET[c]}"
start_proxy reqlog.py "${S3_PORT[one]}" "$T/req.log" 0.2

write_s3_credentials
{
  config_head 256K 256K 256K
  for r in a b c; do
    printf '[region.%s]\nkind = s3\nendpoint = http://127.0.0.1:%s\nbucket = %s\nprefix = %s\n' \
      "$r" "$PROXY_PORT" "${BUCKET[$r]}" "$S3_PREFIX"
    printf 'region = %s\naddressing = path\ncredentials = %s\n' "$S3_REGION" "$S3_CREDENTIALS"
  done
} > "$CONF"
mkdir -p "$T/watch"

src="$T/src/checkpoint-7"
mkdir -p "$src"
printf '{"global_step": 7}\n' > "$src/trainer_state.json"
head -c $((2 << 20)) /dev/urandom > "$src/model.safetensors"
head -c $((4 << 20)) /dev/urandom > "$src/optimizer.pt"
cks snapshot "$src" --run win --step 7 > /dev/null

# check LOG MODE CARRY: the chunk requests in LOG against the rule (see top).
check() {
  python3 - "$src" "$1" "$2" "$3" << 'PY'
import hashlib, os, re, sys
src, log, mode, carry = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
BLOCK = 256 << 10
group = {}  # key -> (group rank, bytes, file)
for rank, name in enumerate(["trainer_state.json", "model.safetensors", "optimizer.pt"]):
    data = open(os.path.join(src, name), "rb").read()
    for off in range(0, len(data), BLOCK):
        block = data[off:off + BLOCK]
        group[hashlib.sha256(block).hexdigest()] = (rank, len(block), name)
events = []
for line in open(log):
    what, method, path = line.split()
    m = re.search(r"/chunks/.*?([0-9a-f]{64})", path)
    if method == "GET" and m:
        if m.group(1) not in group:
            sys.exit("a chunk GET of no known file: %s" % path)
        events.append((what, m.group(1)))
asked = {k for w, k in events if w == "REQ"}
if asked != set(group):
    sys.exit("%d chunks asked for, %d expected" % (len(asked), len(group)))
open_ = {}  # key -> asked, not answered
seen = set()  # asked so far
for i, (what, key) in enumerate(events):
    rank, size, name = group[key]
    if what == "ANS":
        open_.pop(key, None)
        continue
    earlier = [k for k in open_ if group[k][0] < rank]
    if mode == "strict" and earlier:
        sys.exit("%s asked for (%s) while %d chunks of an earlier group were unanswered "
                 "(%s)" % (key[:12], name, len(earlier), group[earlier[0]][2]))
    unasked = [k for k in group if group[k][0] < rank and k not in seen]
    if mode == "strict" and unasked:
        sys.exit("%s asked for (%s) before %d chunks of an earlier group (%s)" %
                 (key[:12], name, len(unasked), group[unasked[0]][2]))
    seen.add(key)
    open_[key] = True
    held = sum(group[k][1] for k in open_)
    if earlier and held > carry:
        sys.exit("%s asked for (%s) with %d bytes unanswered, %d of an earlier group; "
                 "[restore] inflight = %d" % (key[:12], name, held,
                                              sum(group[k][1] for k in earlier), carry))
print("ok: %d chunk requests" % len(asked))
PY
}

step "inflight = 0, --progressive: a group is asked for only after the one before is answered"
printf '[restore]\ninflight = 0\n' >> "$CONF"
rm -rf "$STATE"
: > "$T/req.log"
cks restore --run win --latest --to "$T/out1" --progressive > /dev/null
same_tree "$src" "$T/out1/checkpoint-7"
check "$T/req.log" strict 0 || { cat "$T/req.log"; die "inflight = 0: a later group was asked for early"; }

step "inflight = 768K, the default restore: at most 768 KiB in flight across a boundary"
sed -i 's/^inflight = .*/inflight = 768K/' "$CONF"
rm -rf "$STATE"
: > "$T/req.log"
cks restore --run win --latest --to "$T/out2" > /dev/null
same_tree "$src" "$T/out2/checkpoint-7"
check "$T/req.log" carry $((768 << 10)) ||
  { cat "$T/req.log"; die "inflight = 768K: more in flight across a group boundary"; }
echo "ok"
