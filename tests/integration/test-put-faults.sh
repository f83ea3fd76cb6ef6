#!/usr/bin/env bash
# A store that answers one write of many with "500 InternalError, please
# try again" costs a command nothing (store/region.c region_put_retried).
# Region a sits behind putfault.py, in front of the s3rver that holds all
# three buckets; the proxy answers the first PUT and DELETE of every key
# with 500, and enforces "If-None-Match: *" the way RGW and AWS do:
#   1. fail: the store drops each first write.  `ckptsync snapshot` is
#      committed in all three regions, and region a holds every chunk b
#      holds (on the code before, the first 500 cost the snapshot region a:
#      "committed in 2 of 3 regions", exit 1 — CI saw it on s3rver);
#   2. lost: the store does each first write, and its answer is lost.  The
#      retry of a create-only put (the probe, the prune lease) finds the
#      key taken; the bytes there are its own, so it is not read as
#      another writer's: `ckptsync prune` takes the lease and deletes the
#      forgotten snapshot's chunks (before: "another prune holds the
#      lease", and the lease left behind blocked the next prune too);
#   3. every object is as the other regions have it: both snapshots and
#      the chunk sets agree, and the kept snapshot restores bit for bit.
. "$(dirname "$0")/lib.sh"
. "$CKS_SOURCE_DIR/tests/integration/s3lib.sh"

declare -A BUCKET=([a]=ckpt [b]=ckpt-b [c]=ckpt-c)
MODE="$T/proxy.mode"
start_s3 one --bucket "${BUCKET[b]}" --bucket "${BUCKET[c]}"
echo pass > "$MODE"
start_proxy putfault.py "${S3_PORT[one]}" "$MODE"
write_s3_credentials
{
  config_head 64K 256K 1M
  for r in a b c; do
    endpoint=$(s3_url one)
    [ "$r" = a ] && endpoint=http://127.0.0.1:$PROXY_PORT
    s3_region_section "$r" "$endpoint" "${BUCKET[$r]}"
    echo "copy_from = none"
  done
} > "$CONF"

# keys BUCKET PREFIX OUT: the keys under the repository's PREFIX, sorted.
keys() {
  aws_s3 one s3api list-objects-v2 --bucket "$1" --prefix "$S3_PREFIX/$2" > "$T/list.json"
  if [ -s "$T/list.json" ]; then
    json "$T/list.json" '"\n".join(o["Key"].split("/", 1)[1] + " " + str(o["Size"]) for o in d.get("Contents", []))'
  fi | sed '/^$/d' | sort > "$3"
}
injected() { grep -c "^$1 " "$MODE.log" 2> /dev/null || true; }
same_keys() {  # PREFIX: region a holds what b holds
  keys "${BUCKET[a]}" "$1" "$T/ka"
  keys "${BUCKET[b]}" "$1" "$T/kb"
  [ -s "$T/kb" ] || die "region b holds nothing under $1"
  cmp -s "$T/ka" "$T/kb" || { diff "$T/ka" "$T/kb" | head; die "region a does not hold what b holds under $1"; }
}

step "fail: each first write dropped with a 500; the snapshot is in all three regions"
make_file "$T/src/step-1/model.bin" 2
make_file "$T/src/step-1/optim.bin" 1
echo fail > "$MODE"
cks snapshot "$T/src/step-1" --run r1 --step 1 --json > "$T/s1.json" 2> "$T/s1.err" ||
  { cat "$T/s1.err"; die "the snapshot failed under dropped writes"; }
n=$(injected fail)
[ "$n" -ge 5 ] || die "the proxy dropped only $n writes: the test did not test"
[ "$(json "$T/s1.json" 'len(d["regions"])')" = 3 ] || { cat "$T/s1.json"; die "not committed in all three regions"; }
same_keys chunks/
echo "ok: $n writes dropped and retried"

step "lost: each first write done, its answer lost; snapshot, forget and prune succeed"
echo lost > "$MODE"
make_file "$T/src/step-2/model.bin" 2
cks snapshot "$T/src/step-2" --run r1 --step 2 --json > "$T/s2.json" 2> "$T/s2.err" ||
  { cat "$T/s2.err"; die "the snapshot failed under lost answers"; }
[ "$(json "$T/s2.json" 'len(d["regions"])')" = 3 ] || { cat "$T/s2.json"; die "not committed in all three regions"; }
cks forget --run r1 --keep-last 1 > /dev/null
cks prune --grace 0 --json > "$T/p.json" 2> "$T/p.err" || { cat "$T/p.err"; die "prune failed under lost answers"; }
n=$(injected lost)
[ "$n" -ge 5 ] || die "the proxy lost only $n answers: the test did not test"
grep -q "^lost PUT .*/locks/prune/" "$MODE.log" || { cat "$MODE.log"; die "no lease write was lost: the create-only retry was not tested"; }
grep -q "^412 .*/locks/prune/" "$MODE.log" || die "the lease retry was not refused as taken: the proxy does not enforce"
[ "$(json "$T/p.json" 'd["regions"][0]["deleted"]')" -gt 0 ] || { cat "$T/p.json"; die "prune deleted nothing"; }
echo "ok: $n answers lost, $(json "$T/p.json" 'd["regions"][0]["deleted"]') chunks pruned"

step "every region holds the same: snapshots and chunks; the kept snapshot restores"
echo pass > "$MODE"
same_keys chunks/
same_keys snapshots/
cks prune --grace 0 > /dev/null 2> "$T/p2.err" || { cat "$T/p2.err"; die "the next prune failed"; }
cks restore --run r1 --latest --to "$T/out" > /dev/null 2> "$T/r.err" || { cat "$T/r.err"; die "restore failed"; }
same_tree "$T/src/step-2" "$T/out/step-2"
echo ok
