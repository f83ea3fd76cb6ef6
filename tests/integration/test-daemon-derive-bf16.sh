#!/usr/bin/env bash
# regions: dir (s3: tests/soak/s3-variants.sh)
# encrypted: yes
# The daemon writes derived-bf16 recipes (issue 27, docs/deltas.md "The
# daemon writes recipes"): a torch.save checkpoint written by Debian's
# torch, holding bf16 weights that are master.to(torch.bfloat16) and the
# fp32 master, committed to ckptsyncd.  (1) The snapshot is published in
# every region as manifest version 6 with r lines, each recipe object is
# in every region, the bf16 chunks are not chunks/ objects, restore is bit
# for bit and verify is clean.  (2) Crash safety: with the recipe entries
# held in the queue (test hook CKPTSYNC_TEST_RECIPE_HOLD) the next
# checkpoint's ingest commits, its recipes are in the spool (the pin
# folder) and in no region, nothing is published; kill -9; the restarted
# daemon publishes that very snapshot, with its recipes, in every region,
# and it restores bit for bit.  (3) The same bytes committed as another
# unit: its recipes are queued again and every region answers that it
# holds them (HAS of the object's size, sealed or not): nothing is put.
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
set_settle 1
/usr/bin/python3 -c 'import torch' 2> /dev/null || skip "Debian's python3-torch is not installed"
ENC=${CKS_TEST_ENCRYPT:-0}
. "$CKS_SOURCE_DIR/tests/integration/recipelib.sh" # ckpt, keys_in, ckpt_restores

# recipes_in REGION: recipes/ objects in it
recipes_in() { keys_in "$1" recipes | grep -c . || true; }
# man_text REGION ID: the manifest of snapshot ID (plain text: not encrypted)
man_text() {
  if [ "${CKS_REGIONS:-dir}" = s3 ]; then
    aws_s3 "$1" s3 cp "s3://$S3_BUCKET/$S3_PREFIX/snapshots/r1/$2" - 2> /dev/null
  else
    cat "$T/regions/$1/snapshots/r1/$2"
  fi
}
# spooled NAME: the number of recipes phase B spooled for the unit (its log line)
spooled() {
  { grep -o "\"r1/$1\": derived bf16: .*" "$T/daemon.log" || true; } | tail -1 |
    sed -n 's/.*; \([0-9]*\) chunk(s) of.*/\1/p'
}
# published ID: snapshot ID's manifest in every region, version 6 with
# r lines, each recipe object present, no bf16 chunk under chunks/
published() {
  local id=$1 r man
  cks ls --remote --run r1 --json > "$T/ls.json" || die "ls"
  [ "$(json "$T/ls.json" "[x['regions'] for x in d if x['id'] == '$id']")" = "[3]" ] ||
    die "$id is not published in the 3 regions"
  [ "$ENC" = 1 ] && return 0 # sealed, keyed names: the readers check it (restore, verify)
  man_text a "$id" > "$T/man.txt" || die "reading the manifest of $id" # the same bytes everywhere
  [ "$(sed -n 1p "$T/man.txt")" = 'ckptsync-manifest 6' ] || die "$id is not version 6"
  awk '/^r /{print $2, $4}' "$T/man.txt" > "$T/rlines"
  [ "$(grep -c . "$T/rlines")" = "$2" ] || die "$id: r lines are not $2"
  for r in a b c; do
    keys_in $r recipes > "$T/rkeys"
    keys_in $r chunks > "$T/ckeys"
    while read -r cid sig; do
      grep -qx "recipes/${cid:0:2}/$cid.$sig" "$T/rkeys" || die "region $r lacks recipe $cid.$sig"
      grep -qx "chunks/${cid:0:2}/$cid" "$T/ckeys" && die "region $r holds chunk $cid plain"
    done < "$T/rlines"
  done
  return 0
}
step "a torch checkpoint committed to the daemon: version 6, recipes in every region"
ckpt "$T/src/checkpoint-1" 1
ckpt "$T/src/checkpoint-2" 2
start_daemon
mkdir -p "$T/watch/r1"
cp -r "$T/src/checkpoint-1" "$T/watch/r1/"
cks commit "$T/watch/r1/checkpoint-1" --wait replicated --timeout 60 --json > "$T/c1.json" ||
  { tail -30 "$T/daemon.log"; die "commit of checkpoint-1"; }
id1=$(json "$T/c1.json" 'd["id"]')
n1=$(spooled checkpoint-1)
echo "    $id1: ${n1:-0} recipe(s)"
[ "${n1:-0}" -ge 8 ] || { grep 'derived bf16' "$T/daemon.log"; die "only '${n1:-0}' chunks became recipes"; }
for r in a b c; do [ "$(recipes_in $r)" = "$n1" ] || die "region $r holds $(recipes_in $r) recipes, not $n1"; done
published "$id1" "$n1"
ckpt_restores r1 "$id1" "$T/src/checkpoint-1"
cks verify --run r1 > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify"; }
stop_daemon

step "crash safety: ingest committed, recipes only spooled, kill -9"
CKPTSYNC_TEST_RECIPE_HOLD=1 start_daemon
cp -r "$T/src/checkpoint-2" "$T/watch/r1/"
cks commit "$T/watch/r1/checkpoint-2" > /dev/null 2>&1 || true
wait_for 40 grep -q "event=snapshot run=r1 snapshot=.* unit=\"\?r1/checkpoint-2" "$T/daemon.log" ||
  { tail -30 "$T/daemon.log"; die "checkpoint-2 was not ingested"; }
id2=$(grep -o "event=snapshot run=r1 snapshot=[^ ]* unit=\"\?r1/checkpoint-2" "$T/daemon.log" |
  sed -n '1s/.*snapshot=\([^ ]*\) .*/\1/p')
n2=$(spooled checkpoint-2)
pin="$T/watch/.ckptsync-pins/$id2"
echo "    $id2: ${n2:-0} recipe(s) spooled in $pin"
[ "${n2:-0}" -ge 8 ] || die "only '${n2:-0}' chunks of checkpoint-2 became recipes"
[ "$(find "$pin" -name 'r.*' | grep -c .)" = "$n2" ] || die "the spool does not hold $n2 recipes"
for r in a b c; do
  [ "$(recipes_in $r)" = "$n1" ] || die "region $r got a recipe of $id2 while they were held"
done
cks ls --remote --run r1 --json > "$T/ls.json" || die "ls"
[ "$(json "$T/ls.json" "[x['id'] for x in d]")" = "['$id1']" ] || die "$id2 was published before its recipes"
kill9_daemon

step "restart: the same snapshot is published with its recipes and restores bit for bit"
start_daemon
cks flush --wait replicated --deadline 60 || { tail -30 "$T/daemon.log"; die "the queues did not drain"; }
for r in a b c; do
  [ "$(recipes_in $r)" = $((n1 + n2)) ] || die "region $r holds $(recipes_in $r) recipes, not $((n1 + n2))"
done
published "$id2" "$n2"
ckpt_restores r1 "$id2" "$T/src/checkpoint-2"
ckpt_restores r1 "$id1" "$T/src/checkpoint-1"
cks verify --run r1 > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify after the restart"; }
[ -e "$pin" ] && die "the pin folder (and spool) of $id2 was left behind"
grep -q 'retake\|dropping it' "$T/daemon.log" && die "a snapshot was dropped or retaken"

step "the same bytes as another unit: recipes found in every region (HAS), nothing put"
puts() { cks status --json > "$T/st.json"; json "$T/st.json" "[r['objects_put'] for r in d['regions']]"; }
before=$(puts)
cp -r "$T/src/checkpoint-1" "$T/watch/r1/checkpoint-3"
cp -r "$T/src/checkpoint-1" "$T/src/checkpoint-3"
cks commit "$T/watch/r1/checkpoint-3" --wait replicated --timeout 60 --json > "$T/c3.json" ||
  { tail -30 "$T/daemon.log"; die "commit of checkpoint-3"; }
id3=$(json "$T/c3.json" 'd["id"]')
n3=$(spooled checkpoint-3)
[ "${n3:-0}" = "$n1" ] || die "checkpoint-3 made '${n3:-0}' recipes, checkpoint-1 $n1"
[ "$(puts)" = "$before" ] || die "objects were put again: $before -> $(puts)"
for r in a b c; do
  [ "$(recipes_in $r)" = $((n1 + n2)) ] || die "region $r holds $(recipes_in $r) recipes, not $((n1 + n2))"
done
published "$id3" "$n3"
ckpt_restores r1 "$id3" "$T/src/checkpoint-3"
stop_daemon
echo "daemon-derive-bf16: ok"
