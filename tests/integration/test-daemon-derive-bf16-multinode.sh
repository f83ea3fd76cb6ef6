#!/usr/bin/env bash
# The daemon derives bf16 for a node's part of a multi-node step (issue 27,
# docs/deltas.md "The daemon writes recipes"): two daemons ([daemon]
# nodes = 2), one run "job".
#  (1) step 100: each node's part holds a torch.save checkpoint (Debian's
#      torch) of its own model, bf16 weights = master.to(torch.bfloat16) and
#      the fp32 master, under mp_rank_0K/ (bound to node K: --node K gets
#      it alone); each node spools its recipes; the merged step is
#      manifest version 6 with both nodes' r lines in every region, each
#      recipe in every region and no bf16 chunk under chunks/; restore
#      --latest and --node K --of 2 (engine/rankbind + msubset: node K's
#      recipes, not the other's) are bit for bit, verify is clean.
#  (2) step 200: a pair is formed within one node's files only.  Each
#      daemon sees its own files: node 0's part holds a model's bf16
#      weights alone, node 1's that model's fp32 master (another file) and,
#      as the control, another model's bf16 weights and master in two
#      files of its own.  Node 0 derives nothing (its bf16 chunks are
#      plain, under chunks/ in every region); node 1 derives its own pair
#      across its two files; the step restores bit for bit.
# With the exclusion of a node's part (daemon/ingest.c ing_dwrite_match,
# multinode_wanted) step 100's merged manifest is version 5: this fails.
# regions: dir
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
/usr/bin/python3 -c 'import torch' 2> /dev/null || skip "Debian's python3-torch is not installed"
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"
. "$CKS_SOURCE_DIR/tests/integration/recipelib.sh" # ckpt, keys_in
D="$T/regions"

job_nodes 2 # n0, n1 (nodedir, node_commit) and x
# spooled K UNIT: the recipes node K's phase B spooled for UNIT (0: none)
spooled() {
  { grep -o "\"job/$2\": derived bf16: .*" "$T/i-n$1/daemon.log" || true; } | tail -1 |
    sed -n 's/.*; \([0-9]*\) chunk(s) of.*/\1/p' | grep . || echo 0
}
# marks MAN: "PATH CHUNKS MARKED" for each file of manifest MAN
marks() {
  awk '$1 == "f" { p = $NF; n[p] = 0; r[p] = 0; o[++k] = p }
       $1 == "c" && p != "" { n[p]++; if ($4 == "r") r[p]++ }
       $1 == "r" || $1 == "k" { p = "" }
       END { for (i = 1; i <= k; i++) print o[i], n[o[i]], r[o[i]] }' "$1"
}
# in_regions MAN: each r line's recipe in every region, its chunk in none
# under chunks/; every plain c line's chunk under chunks/ in every region
in_regions() {
  local rg
  for rg in a b c; do
    keys_in "$rg" recipes > "$T/rkeys"
    keys_in "$rg" chunks > "$T/ckeys"
    awk '$1 == "r" { print "recipes/" substr($2, 1, 2) "/" $2 "." $4 }
         $1 == "c" && $4 != "r" { print "chunks/" substr($2, 1, 2) "/" $2 }' "$1" | sort -u > "$T/want"
    comm -23 "$T/want" <(sort "$T/rkeys" "$T/ckeys") > "$T/lacks"
    [ ! -s "$T/lacks" ] || die "region $rg lacks $(wc -l < "$T/lacks") object(s): $(head -3 "$T/lacks")"
    awk '$1 == "r" { print "chunks/" substr($2, 1, 2) "/" $2 }' "$1" | sort > "$T/rplain"
    [ -z "$(comm -12 "$T/rplain" <(sort "$T/ckeys"))" ] || die "region $rg holds a recipe's chunk plain"
  done
}
# same_step STEP DIR: DIR/checkpoint-STEP is both nodes' files, bit for bit
same_step() {
  rm -rf "$T/want.d" && mkdir -p "$T/want.d"
  for k in 0 1; do cp -a "$(nodedir $k "checkpoint-$1")/." "$T/want.d/"; done
  diff <(tree_sums "$T/want.d") <(tree_sums "$2/checkpoint-$1") > "$T/diff" ||
    { cat "$T/diff" >&2; die "$2: step $1 differs from the nodes' files"; }
}
restore_x() { # DIR ARGS...: a restore on a fresh instance x
  local dir=$1
  shift
  rm -rf "$T/i-x/state" "$dir"
  icks x restore --run job --to "$dir" -q "$@" 2> "$T/rs.err" || { cat "$T/rs.err" >&2; die "restore $*"; }
}

step "1. step 100: each node's part a bf16 + fp32 master checkpoint; merged as version 6"
ckpt "$(nodedir 0 checkpoint-100)/mp_rank_00" 1
ckpt "$(nodedir 1 checkpoint-100)/mp_rank_01" 2
node_commit 0 checkpoint-100 100
node_commit 1 checkpoint-100 100
id100=$(merged 100)
n0=$(spooled 0 checkpoint-100) n1=$(spooled 1 checkpoint-100)
echo "    $id100; recipes spooled: node 0 $n0, node 1 $n1"
for rg in a b c; do
  man="$D/$rg/snapshots/job/$id100"
  [ "$(sed -n 1p "$man")" = 'ckptsync-manifest 6' ] || die "region $rg: step 100 is $(sed -n 1p "$man")"
  [ "$(grep -c '^r ' "$man")" = $((n0 + n1)) ] || die "region $rg: $(grep -c '^r ' "$man") r lines, not $((n0 + n1))"
done
[ "$n0" -ge 8 ] && [ "$n1" -ge 8 ] || die "a node derived too few recipes of its part (node 0 $n0, node 1 $n1)"
man="$D/a/snapshots/job/$id100"
marks "$man" > "$T/marks100"
for k in 0 1; do
  grep -q "^checkpoint-100/mp_rank_0$k/model.pt [0-9]* [1-9]" "$T/marks100" ||
    { cat "$T/marks100"; die "node $k's model.pt has no chunk stored as a recipe"; }
done
in_regions "$man"
restore_x "$T/all" --latest
same_step 100 "$T/all"
for k in 0 1; do
  restore_x "$T/node$k" --latest --node $k --of 2
  [ "$(cd "$T/node$k" && find . -type f)" = "./checkpoint-100/mp_rank_0$k/model.pt" ] ||
    die "--node $k --of 2 restored $(cd "$T/node$k" && find . -type f | tr '\n' ' ')"
  cmp "$(nodedir $k checkpoint-100)/mp_rank_0$k/model.pt" "$T/node$k/checkpoint-100/mp_rank_0$k/model.pt" ||
    die "--node $k --of 2: model.pt differs"
done
icks x verify --run job > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify of step 100"; }

step "2. step 200: node 0's bf16, node 1's master of it: no pair across parts"
ckpt "$(nodedir 0 checkpoint-200)/mp_rank_00" 3 bf16
ckpt "$(nodedir 1 checkpoint-200)/mp_rank_01" 3 fp32
ckpt "$(nodedir 1 checkpoint-200)/mp_rank_01/pair" 4 bf16 # the control: a pair across
ckpt "$(nodedir 1 checkpoint-200)/mp_rank_01/pair" 4 fp32 # two files of one node
node_commit 0 checkpoint-200 200
node_commit 1 checkpoint-200 200
n0=$(spooled 0 checkpoint-200) n1=$(spooled 1 checkpoint-200)
echo "    recipes spooled: node 0 $n0, node 1 $n1"
[ "$n0" = 0 ] || die "node 0 derived $n0 recipes, its part has no fp32 master"
[ "$n1" -ge 8 ] || die "node 1 derived $n1 recipes of its own pair across two files"
id200=$(merged 200)
man="$D/a/snapshots/job/$id200"
[ "$(sed -n 1p "$man")" = 'ckptsync-manifest 6' ] || die "step 200 is $(sed -n 1p "$man")"
[ "$(grep -c '^r ' "$man")" = "$n1" ] || die "step 200: $(grep -c '^r ' "$man") r lines, not $n1"
marks "$man" > "$T/marks200"
grep -q "^checkpoint-200/mp_rank_00/model.pt [1-9][0-9]* 0$" "$T/marks200" ||
  { cat "$T/marks200"; die "node 0's bf16 chunks are not all plain"; }
grep -q "^checkpoint-200/mp_rank_01/pair/model.pt [0-9]* [1-9]" "$T/marks200" ||
  { cat "$T/marks200"; die "node 1's pair was not derived"; }
[ "$(awk '$3 > 0' "$T/marks200" | wc -l)" = 1 ] || { cat "$T/marks200"; die "another file has recipes"; }
in_regions "$man"
restore_x "$T/all2" --latest
same_step 200 "$T/all2"
icks x verify --run job > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify of steps 100 and 200"; }
for k in 0 1; do istop "n$k"; done
echo "daemon-derive-bf16-multinode: ok"
