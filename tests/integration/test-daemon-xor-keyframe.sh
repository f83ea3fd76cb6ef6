#!/usr/bin/env bash
# regions: dir
# encrypted: yes
# The daemon writes deltas against the keyframe (issue 27, docs/deltas.md
# "Deltas against the keyframe in the daemon"): three torch.save
# checkpoints of a short AdamW run (tests/integration/xor_train.py: bf16
# weights, fp32 master, optimizer state in one file) committed to ckptsyncd
# with [compress] keyframe_every = 3:
#  - step 1 is a keyframe (no k lines); step 2 a delta against it: k
#    lines naming step 1's plain chunks, r lines, published in every
#    region with each k chunk and each recipe there, its bases read from
#    step 1's directory beside it; both restore bit for bit and verify is
#    clean;
#  - step 1's directory removed (a trainer's rotation): step 3's bases
#    come from the regions (keyframe_fetch = on here; the default, off,
#    is test-xor-keyframe's, through the same service/keyframe.c);
#  - crash safety: with the recipe entries held in the queue
#    (CKPTSYNC_TEST_RECIPE_HOLD) step 3's ingest commits a delta, nothing
#    is published, kill -9; the restarted daemon publishes that very
#    snapshot in every region and it restores bit for bit;
#  - a k chunk region b lost before step 3's publish is uploaded again
#    from another region at its confirmation (no retake);
#  - the index's recipe records have a presence bit per region that holds
#    the recipe (set by the region workers' uploads).
# Encrypted (-enc): the manifests and keys are sealed, so the k and r
# lines are counted from the daemon's log, and the lost k chunk is not
# staged; the rest is the same.
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
set_settle 1
/usr/bin/python3 -c 'import torch' 2> /dev/null || skip "Debian's python3-torch is not installed"
printf '[compress]\nkeyframe_every = 3\nkeyframe_fetch = on\n' >> "$CONF"
. "$CKS_SOURCE_DIR/tests/integration/recipelib.sh" # keys_in
SRC="$T/src"
ENC=${CKS_TEST_ENCRYPT:-0}

man_text() { cat "$T/regions/$1/snapshots/r1/$2"; }
restore_cmp() { # ID STEP
  rm -rf "$T/rs"
  cks restore --run r1 --snapshot "$1" --to "$T/rs" -q 2> "$T/rs.err" ||
    { cat "$T/rs.err"; die "restore of step $2 ($1)"; }
  cmp "$SRC/step-$2/ckpt.pt" "$T/rs/step-$2/ckpt.pt" || die "step $2 ($1) restores other bytes"
}
# in_regions ID: snapshot ID is listed in the 3 regions
in_regions() {
  cks ls --remote --run r1 --json > "$T/ls.json" || die "ls"
  [ "$(json "$T/ls.json" "[x['regions'] for x in d if x['id'] == '$1']")" = "[3]" ]
}
# delta ID: ID's manifest (the same in every region) is a delta against
# step 1: k lines, each one of step 1's plain chunks and in every region
# under chunks/, r lines, each recipe in every region
delta() {
  local id=$1 r
  [ "$ENC" = 1 ] && return 0 # sealed: the readers check it (restore, verify)
  man_text a "$id" > "$T/m.txt" || die "reading the manifest of $id"
  for r in b c; do man_text $r "$id" | cmp -s - "$T/m.txt" || die "region $r's manifest of $id differs"; done
  [ "$(sed -n 1p "$T/m.txt")" = 'ckptsync-manifest 6' ] || die "$id is not version 6"
  grep '^k ' "$T/m.txt" | awk '{print $2}' | sort -u > "$T/k.txt"
  awk '/^r /{print $2, $4}' "$T/m.txt" > "$T/r.txt"
  nk=$(grep -c . "$T/k.txt" || true)
  nr=$(grep -c . "$T/r.txt" || true)
  echo "    $id: $nk k line(s), $nr r line(s)"
  [ "$nk" -gt 0 ] && [ "$nr" -gt 0 ] || die "$id, a delta, lacks k or r lines ($nk, $nr)"
  [ -z "$(comm -23 "$T/k.txt" "$T/c1.txt")" ] || die "$id names as a base a chunk step 1 does not store plain"
  for r in a b c; do
    keys_in $r chunks > "$T/ckeys"
    keys_in $r recipes > "$T/rkeys"
    while read -r cid; do
      grep -qx "chunks/${cid:0:2}/$cid" "$T/ckeys" || die "region $r lacks k chunk $cid of $id"
    done < "$T/k.txt"
    while read -r cid sig; do
      grep -qx "recipes/${cid:0:2}/$cid.$sig" "$T/rkeys" || die "region $r lacks recipe $cid.$sig of $id"
    done < "$T/r.txt"
  done
}

step "a training run: checkpoints of steps 1-3 (torch.save)"
/usr/bin/python3 "$CKS_SOURCE_DIR/tests/integration/xor_train.py" "$SRC" 1 2 3 || die "xor_train.py"

step "step 1 committed to the daemon: a keyframe"
start_daemon
mkdir -p "$T/watch/r1"
commit() { # STEP -> id, once replicated
  cp -r "$SRC/step-$1" "$T/watch/r1/"
  cks commit "$T/watch/r1/step-$1" --wait replicated --timeout 60 --json > "$T/c$1.json" ||
    { tail -30 "$T/daemon.log"; die "commit of step $1"; }
  json "$T/c$1.json" 'd["id"]'
}
id1=$(commit 1)
in_regions "$id1" || die "$id1 is not published in the 3 regions"
if [ "$ENC" != 1 ]; then
  man_text a "$id1" > "$T/m1.txt"
  grep -q '^k ' "$T/m1.txt" && die "step 1, a keyframe, has k lines"
  grep '^c ' "$T/m1.txt" | grep -v ' r$' | awk '{print $2}' | sort -u > "$T/c1.txt"
fi
grep -q 'keyframe: snapshot' "$T/daemon.log" && die "step 1 was stored against a keyframe"

step "step 2: a delta against step 1 (k and r lines), in every region"
id2=$(commit 2)
grep -q "keyframe: snapshot $id1 (step 1) is the base" "$T/daemon.log" ||
  { grep -i keyframe "$T/daemon.log"; die "step 2 is not a delta against step 1"; }
kline=$(grep -o '"r1/step-2": keyframe .*' "$T/daemon.log" || true)
echo "    $kline"
nk=$(sed -n 's/.*; \([0-9]*\) of its chunks named as bases.*/\1/p' <<< "$kline")
[ "${nk:-0}" -gt 0 ] || die "step 2 names no keyframe chunk as a base"
grep -q ' read from local files, 0 from the regions$' <<< "$kline" || die "step 2's bases were not all local"
in_regions "$id2" || die "$id2 is not published in the 3 regions"
delta "$id2"
restore_cmp "$id2" 2
restore_cmp "$id1" 1
cks verify --run r1 > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify"; }
stop_daemon

step "crash safety: step 3's delta ingested (step 1 rotated away), its recipes only spooled, kill -9"
rm -rf "$T/watch/r1/step-1"
CKPTSYNC_TEST_RECIPE_HOLD=1 start_daemon
cp -r "$SRC/step-3" "$T/watch/r1/"
cks commit "$T/watch/r1/step-3" > /dev/null 2>&1 || true
wait_for 40 grep -q "event=snapshot run=r1 snapshot=.* unit=\"\?r1/step-3" "$T/daemon.log" ||
  { tail -30 "$T/daemon.log"; die "step 3 was not ingested"; }
id3=$(grep -o "event=snapshot run=r1 snapshot=[^ ]* unit=\"\?r1/step-3" "$T/daemon.log" |
  sed -n '1s/.*snapshot=\([^ ]*\) .*/\1/p')
[ "$(grep -c "keyframe: snapshot $id1 (step 1) is the base" "$T/daemon.log")" = 2 ] ||
  die "step 3 is not a delta against step 1"
kline=$(grep -o '"r1/step-3": keyframe .*' "$T/daemon.log" || true)
echo "    $kline"
grep -q '; 0 base chunk(s) read from local files, [1-9][0-9]* from the regions$' <<< "$kline" ||
  die "step 3's bases did not all come from the regions"
pin="$T/watch/.ckptsync-pins/$id3"
[ "$(find "$pin" -name 'r.*' | grep -c .)" -gt 0 ] || die "no recipe of $id3 is spooled in $pin"
cks ls --remote --run r1 --json > "$T/ls.json" || die "ls"
[ "$(json "$T/ls.json" "sorted(x['id'] for x in d) == sorted(['$id1', '$id2'])")" = True ] ||
  die "$id3 was published before its recipes"
kill9_daemon
if [ "$ENC" != 1 ]; then
  lost=$(sed -n 1p "$T/k.txt") # a keyframe chunk step 2 names, and step 3 (the same tensors)
  rm "$T/regions/b/chunks/${lost:0:2}/$lost" || die "region b has no chunk $lost"
fi

step "restart: the same snapshot is published (a lost k chunk uploaded again), bit for bit"
start_daemon
cks flush --wait replicated --deadline 60 || { tail -30 "$T/daemon.log"; die "the queues did not drain"; }
in_regions "$id3" || die "$id3 is not published in the 3 regions after the restart"
delta "$id3"
if [ "$ENC" != 1 ]; then
  grep -qx "$lost" "$T/k.txt" || die "step 3 does not name $lost (the chunk removed from region b)"
  grep -q "\"chunks/${lost:0:2}/$lost\", a keyframe chunk snapshot $id3 names as a base, was missing" \
    "$T/daemon.log" || die "no upload of the lost k chunk was logged"
fi
restore_cmp "$id3" 3
cks verify --run r1 > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify after the restart"; }
grep -q 'retake\|dropping it' "$T/daemon.log" && die "a snapshot was dropped or retaken"
stop_daemon
# the region workers recorded each recipe's presence in the index
[ "$ENC" = 1 ] || recidx_matches "$STATE/index"
echo "daemon-xor-keyframe: ok"
