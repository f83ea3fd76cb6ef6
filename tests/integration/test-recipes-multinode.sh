#!/usr/bin/env bash
# A multi-node step with a part of manifest version 6 (issue 27,
# docs/deltas.md): two daemons ([daemon] nodes = 2); node 0's part of
# step 200 is rewritten by tests/tools/mkrecipes as version 6 (its
# weights.bin stored as derived bf16 recipes over its master.bin) before
# node 1's part lands.  The merged snapshot must carry the part's marks
# and recipe lines (version 6, closed), restore bit for bit, and pass
# verify; a prune keeps the recipes it names.
# regions: dir
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
MK="$CKS_BUILD_DIR/tests/mkrecipes"
[ -x "$MK" ] || skip "mkrecipes not built"
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"
. "$CKS_SOURCE_DIR/tests/integration/recipelib.sh"
D="$T/regions"

job_nodes 2 # n0, n1 (nodedir, node_commit) and x

step "step 100 on both nodes: a plain merged snapshot"
gen "$(nodedir 0 checkpoint-100)" 0 0
mkdir -p "$(nodedir 1 checkpoint-100)"; head -c 200000 /dev/urandom > "$(nodedir 1 checkpoint-100)/rank1.bin"
node_commit 0 checkpoint-100 100
node_commit 1 checkpoint-100 100
icks x ls --remote --run job --json > "$T/ls.json" || die "ls --remote"
p100=$(json "$T/ls.json" '[s["id"] for s in d if s["step"] == 100][0]')

step "step 200: node 0's part lands, and is rewritten as version 6 before node 1's"
gen "$(nodedir 0 checkpoint-200)" 7 0.001
mkdir -p "$(nodedir 1 checkpoint-200)"; head -c 200000 /dev/urandom > "$(nodedir 1 checkpoint-200)/rank1.bin"
node_commit 0 checkpoint-200 200
part=$(rg_keys a parts/job/ | grep '/s200\.0-of-2\.' | sed -n 1p)
[ -n "$part" ] || die "node 0's part of step 200 is not in region a"
"$MK" "$T/i-x.conf" job "$part" "$p100" bf16 > "$T/recipes.txt" 2> "$T/mk.err" ||
  { cat "$T/mk.err" >&2; die "mkrecipes of the part"; }
nr=$(grep -c '^recipe ' "$T/recipes.txt" || true)
echo "    node 0's part: $nr recipes"
[ "$nr" -ge 1 ] || die "mkrecipes made no recipe of node 0's part"
grep -q "^ckptsync-manifest 6" "$D/a/$part" || die "the part is not version 6"

step "node 1's part lands: the merged snapshot is version 6, restores bit for bit"
node_commit 1 checkpoint-200 200
deadline=$((SECONDS + 60))
until man=$(ls "$D/a/snapshots/job/"* 2> /dev/null | xargs -r grep -l '^step 200$' | sed -n 1p) && [ -n "$man" ]; do
  [ $SECONDS -lt $deadline ] || { tail -20 "$T"/i-n1/daemon.log >&2; die "step 200 was not merged"; }
  sleep 0.2
done
[ "$(sed -n 1p "$man")" = 'ckptsync-manifest 6' ] || die "the merged manifest is not version 6: $(sed -n 1p "$man")"
nm=$(grep -c '^r ' "$man" || true)
[ "$nm" = "$nr" ] || die "the merged manifest has $nm recipe lines, node 0's part $nr"
while read -r kind key _; do
  [ "$kind" = recipe ] || continue
  for rg in a b c; do [ -f "$D/$rg/$key" ] || die "$key missing in region $rg"; done
done < "$T/recipes.txt"
mkdir -p "$T/want"
for k in 0 1; do cp -a "$(nodedir $k checkpoint-200)/." "$T/want/"; done
rm -rf "$T/i-x/state" "$T/got"
icks x restore --run job --latest --to "$T/got" -q 2> "$T/rs.err" || { cat "$T/rs.err" >&2; die "restore --latest"; }
diff <(tree_sums "$T/want") <(tree_sums "$T/got/checkpoint-200") > "$T/diff" ||
  { cat "$T/diff" >&2; die "restored step 200 differs from the nodes' files"; }
icks x verify --run job > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify of the merged steps"; }

step "prune keeps the merged snapshot's recipes"
icks x prune --grace 0 -q 2> "$T/p.err" || { cat "$T/p.err" >&2; die "prune"; }
while read -r kind key _; do
  [ "$kind" = recipe ] || continue
  for rg in a b c; do [ -f "$D/$rg/$key" ] || die "prune deleted $key in region $rg"; done
done < "$T/recipes.txt"
rm -rf "$T/i-x/state" "$T/got"
icks x restore --run job --latest --to "$T/got" -q || die "restore after prune"
diff <(tree_sums "$T/want") <(tree_sums "$T/got/checkpoint-200") > /dev/null || die "restore after prune differs"
echo "PASS"
