#!/usr/bin/env bash
# The daemon writes deltas against the keyframe for a node's part of a
# multi-node step (issue 27, docs/deltas.md "Deltas against the keyframe
# in the daemon", "Multi-node parts"): two daemons ([daemon] nodes = 2) of
# run "job", [compress] keyframe_every = 3, keyframe_fetch = on; each
# node's file a torch.save checkpoint of tests/integration/xor_train.py
# (bf16 weights, fp32 master, AdamW state; SEED: a model per node).
#  (1) step 1, a keyframe: node 0 holds mp_rank_00/ckpt.pt and
#      extra/ckpt.pt, node 1 mp_rank_01/ckpt.pt; both nodes log that no
#      keyframe precedes it; the merged step has no k line.
#  (2) step 2: node 0 holds mp_rank_00/ckpt.pt, node 1 mp_rank_01/ckpt.pt
#      and extra/ckpt.pt (the file moved to node 1: its keyframe file is
#      node 0's, not on node 1's disk, fetched from the regions).  A chunk
#      of step 1's extra/ckpt.pt is removed from region b first.  Each
#      node's part names the keyframe's chunks as k lines; the merged step
#      names every part's k and r lines (each part's k chunk a k line or a
#      plain file chunk of the step, each r line of a part in the merged
#      step), each object in every region: the chunk node 0 uploaded and
#      region b lost is uploaded again by node 1's confirmation
#      (rw_upload_bases) before its part is written there.  Both steps
#      restore bit for bit, whole and with --node K --of 2 (engine/msubset
#      keeps the k lines), and verify is clean.
#  (3) step 3 holds no tensor file: neither node looks a keyframe up (no
#      "keyframe: snapshot" nor "no keyframe for step 3" line), while
#      steps 1 and 2 logged theirs (kfxor_any_view).
# Without the ingest change (a part excluded from deltas) step 2 has no k
# line and this fails at (2); without kfxor_any_view it fails at (3).
# regions: dir
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
/usr/bin/python3 -c 'import torch' 2> /dev/null || skip "Debian's python3-torch is not installed"
printf '[compress]\nkeyframe_every = 3\nkeyframe_fetch = on\n' >> "$CONF"
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"
. "$CKS_SOURCE_DIR/tests/integration/recipelib.sh" # keys_in
D="$T/regions"
TRAIN="$CKS_SOURCE_DIR/tests/integration/xor_train.py"

step "training: three models (node 0, node 1, the file that moves), steps 1 and 2"
pids=()
for s in 0 1 2; do
  SEED=$((s + 1)) /usr/bin/python3 "$TRAIN" "$T/src$s" 1 2 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || die "xor_train.py"; done
for s in 0 1 2; do for k in 1 2; do [ -s "$T/src$s/step-$k/ckpt.pt" ] || die "no $T/src$s/step-$k"; done; done

job_nodes 2 # n0, n1 and x
put() { # NODE STEP SRC DIR: node NODE's checkpoint-STEP/DIR/ckpt.pt from model SRC
  mkdir -p "$(nodedir "$1" "checkpoint-$2")/$4"
  cp "$T/src$3/step-$2/ckpt.pt" "$(nodedir "$1" "checkpoint-$2")/$4/"
}
lookups() { grep -c 'keyframe: snapshot .* is the base\|no keyframe for step' "$T/i-n$1/daemon.log" || true; }
# part K STEP: node K's part of STEP in region a (its newest)
part() { ls "$D"/a/parts/job/s"$2".$1-of-2.* | sort | tail -1; }
# in_regions MAN: every object MAN names (plain c lines, k lines, r lines) in every region
in_regions() {
  local rg
  awk '$1 == "r" { print "recipes/" substr($2, 1, 2) "/" $2 "." $4 }
       ($1 == "c" && $4 != "r") || $1 == "k" { print "chunks/" substr($2, 1, 2) "/" $2 }' "$1" |
    sort -u > "$T/want"
  for rg in a b c; do
    comm -23 "$T/want" <({ keys_in $rg recipes; keys_in $rg chunks; } | sort) > "$T/lacks"
    [ ! -s "$T/lacks" ] || die "region $rg lacks $(wc -l < "$T/lacks") object(s): $(head -3 "$T/lacks")"
  done
}
# restore_cmp STEP ID DIR [ARGS]: a fresh restore of ID; each file restored
# is the node's source, bit for bit; $got: the files restored
restore_cmp() {
  local st=$1 id=$2 dir=$3 f k
  shift 3
  rm -rf "$T/i-x/state" "$dir"
  icks x restore --run job --snapshot "$id" --to "$dir" -q "$@" 2> "$T/rs.err" ||
    { cat "$T/rs.err" >&2; die "restore of step $st $*"; }
  (cd "$dir" && find . -type f | sort) > "$T/got"
  while read -r f; do
    for k in 0 1; do
      [ -f "$(nodedir $k "")/$f" ] && break
    done
    cmp "$(nodedir $k "")/$f" "$dir/$f" || die "step $st $*: $f differs from node $k's"
  done < "$T/got"
  got=$(tr '\n' ' ' < "$T/got")
  echo "    step $st${*:+ $*}: $got"
}

step "1. step 1: a keyframe (no k line)"
put 0 1 0 mp_rank_00
put 0 1 2 extra
put 1 1 1 mp_rank_01
node_commit 0 checkpoint-1 1
node_commit 1 checkpoint-1 1
id1=$(merged 1)
man1="$D/a/snapshots/job/$id1"
grep -q '^k ' "$man1" && die "step 1, a keyframe, has k lines"
awk '$1 == "c" && $4 != "r" { print $2 }' "$man1" | sort -u > "$T/c1"
# a plain chunk from the middle of step 1's extra/ckpt.pt (fp32 state: a base
# of step 2's deltas), removed from region b below
lost=$(awk '$1 == "f" { p = $NF } $1 != "f" && $1 != "c" { p = "" }
            $1 == "c" && p == "checkpoint-1/extra/ckpt.pt" && $4 != "r" { print $2 }' "$man1" |
  awk '{ v[NR] = $0 } END { print v[int(NR / 2) + 1] }')
[ -n "$lost" ] || die "step 1's extra/ckpt.pt has no plain chunk"

step "2. step 2: each node's part stored as deltas against step 1 (k lines), merged"
rm "$D/b/chunks/${lost:0:2}/$lost" || die "region b has no chunk $lost"
put 0 2 0 mp_rank_00
put 1 2 1 mp_rank_01
put 1 2 2 extra
node_commit 0 checkpoint-2 2
node_commit 1 checkpoint-2 2
id2=$(merged 2)
man2="$D/a/snapshots/job/$id2"
[ "$(sed -n 1p "$man2")" = 'ckptsync-manifest 6' ] || die "step 2 is $(sed -n 1p "$man2")"
for rg in b c; do cmp -s "$man2" "$D/$rg/snapshots/job/$id2" || die "region $rg's step 2 differs"; done
awk '$1 == "k" { print $2 }' "$man2" | sort -u > "$T/k2"
nk=$(grep -c . "$T/k2" || true)
nr=$(grep -c '^r ' "$man2" || true)
awk '$1 == "c" && $4 != "r" { print $2 }' "$man2" | sort -u > "$T/c2"
echo "    merged step 2 ($id2): $nk k line(s), $nr r line(s)"
[ "$nk" -gt 0 ] && [ "$nr" -gt 0 ] || die "step 2 lacks k or r lines ($nk, $nr)"
[ -z "$(comm -23 "$T/k2" "$T/c1")" ] || die "step 2 names as a base a chunk step 1 does not store plain"
for k in 0 1; do
  grep -q "keyframe: snapshot $id1 (step 1) is the base" "$T/i-n$k/daemon.log" ||
    { grep -i keyframe "$T/i-n$k/daemon.log" || true; die "node $k's part of step 2 is not a delta against step 1"; }
  kline=$(grep -o '"job/checkpoint-2": keyframe .*' "$T/i-n$k/daemon.log" || true)
  echo "    node $k: $kline"
  nk=$(sed -n 's/.*; \([0-9]*\) of its chunks named as bases.*/\1/p' <<< "$kline")
  [ "${nk:-0}" -gt 0 ] || die "node $k's part names no keyframe chunk as a base"
done
kline=$(grep -o '"job/checkpoint-2": keyframe .*' "$T/i-n1/daemon.log")
grep -q ' [1-9][0-9]* from the regions$' <<< "$kline" || die "node 1 read no base from the regions"
for k in 0 1; do
  p=$(part $k 2)
  pk=$(grep -c '^k ' "$p" || true)
  echo "    node $k's part: $pk k line(s), $(grep -c '^r ' "$p" || true) r line(s)"
  [ "$pk" -gt 0 ] || die "node $k's part of step 2 has no k line"
  # every k chunk of the part is a k line or a plain file chunk of the merged step
  awk '$1 == "k" { print $2 }' "$p" | sort -u | comm -23 - <(sort -u "$T/k2" "$T/c2") > "$T/lacks"
  [ ! -s "$T/lacks" ] || die "the merged step drops node $k's base $(head -1 "$T/lacks")"
  # every r line of the part is in the merged step, unless its chunk became plain
  awk '$1 == "r"' "$p" | while read -r _ cid rest; do
    grep -q "^r $cid $rest\$" "$man2" || grep -qx "$cid" "$T/c2" || die "the merged step drops node $k's recipe $cid"
  done
done
grep -qx "$lost" "$T/k2" || die "step 2 does not name $lost (the chunk removed from region b) as a base"
grep -q "\"chunks/${lost:0:2}/$lost\", a keyframe chunk snapshot [^ ]* names as a base, was missing; uploaded it again" \
  "$T/i-n1/daemon.log" || die "node 1 did not upload the lost k chunk again"
in_regions "$man2"

step "restores: both steps bit for bit, whole and --node K --of 2; verify"
restore_cmp 1 "$id1" "$T/r1"
[ "$(wc -l < "$T/got")" = 3 ] || die "step 1 restored $(wc -l < "$T/got") files, not 3"
restore_cmp 2 "$id2" "$T/r2"
[ "$(wc -l < "$T/got")" = 3 ] || die "step 2 restored $(wc -l < "$T/got") files, not 3"
restore_cmp 2 "$id2" "$T/r20" --node 0 --of 2
[ "$got" = "./checkpoint-2/mp_rank_00/ckpt.pt " ] || die "step 2 --node 0 --of 2 restored $got"
restore_cmp 2 "$id2" "$T/r21" --node 1 --of 2
[ "$got" = "./checkpoint-2/extra/ckpt.pt ./checkpoint-2/mp_rank_01/ckpt.pt " ] ||
  die "step 2 --node 1 --of 2 restored $got"
restore_cmp 1 "$id1" "$T/r11" --node 1 --of 2
# (node 0's unbound extra/ckpt.pt is shared with every node, docs/multinode.md)
[ "$got" = "./checkpoint-1/extra/ckpt.pt ./checkpoint-1/mp_rank_01/ckpt.pt " ] ||
  die "step 1 --node 1 --of 2 restored $got"
icks x verify --run job > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify of steps 1 and 2"; }

step "3. step 3 holds no tensor file: no keyframe looked up"
for k in 0 1; do # steps 1 and 2 looked theirs up
  grep -q "no keyframe for step 1 of run job" "$T/i-n$k/daemon.log" ||
    { grep -i keyframe "$T/i-n$k/daemon.log" || true; die "node $k did not look step 1's keyframe up"; }
done
l0=$(lookups 0) l1=$(lookups 1)
mkdir -p "$(nodedir 0 checkpoint-3)" "$(nodedir 1 checkpoint-3)"
echo "step 3 notes" > "$(nodedir 0 checkpoint-3)/notes.txt"
printf '{"step": 3, "loss": 0.5}\n' > "$(nodedir 1 checkpoint-3)/trainer_state.json"
node_commit 0 checkpoint-3 3
node_commit 1 checkpoint-3 3
merged 3 > /dev/null
[ "$(lookups 0)" = "$l0" ] && [ "$(lookups 1)" = "$l1" ] ||
  { grep -i keyframe "$T"/i-n*/daemon.log | tail -4 || true; die "a node looked a keyframe up for step 3 (no tensor file)"; }
for k in 0 1; do istop "n$k"; done
echo "daemon-xor-multinode: ok"
