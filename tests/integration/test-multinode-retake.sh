#!/usr/bin/env bash
# A node that takes its part of a step twice: node 0's daemon took
# checkpoint-1000 before DCP's coordinator had written .metadata (a settle
# that fired during the gather, or a commit too early), then again once
# .metadata was in: two parts of rank 0 for step 1000.  The step must be
# merged from each rank's newest part — the node's files as they are,
# as a retaken unit supersedes its earlier snapshot on one node — never
# from the earlier part, which lacks .metadata (a committed DCP step
# without its .metadata cannot be loaded).  With every node's part in
# after the retake: one commit record per region, and a fresh instance
# restores every node's files, .metadata included, bit for bit.
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"
for k in 0 1 2 3; do inst "n$k" nodes=4 node_rank=$k settle=3600; done
inst x
for k in 0 1 2 3; do idaemon "n$k"; done
commit() {
  icks "n$1" commit "$T/i-n$1/watch/job/checkpoint-1000" --step 1000 --wait replicated --timeout 120 -q ||
    die "node $1: commit --wait replicated"
}
commits() {
  local r out=""
  for r in a b c; do out="$out $(rg_keys "$r" commits/ | grep -c '\.s1000\.' || true)"; done
  echo "${out# }"
}
for k in 0 1 2 3; do make_file "$T/i-n$k/watch/job/checkpoint-1000/__${k}_0.distcp" 1; done

step "node 0 takes its part before .metadata is written, then again after"
commit 0
dcp_meta "$T/i-n0/watch/job/checkpoint-1000/.metadata" 4
commit 0
for r in a b c; do
  n=$(rg_keys "$r" parts/ | grep -c '/s1000\.0-of-4\.' || true)
  [ "$n" = 2 ] || die "region $r: $n parts of rank 0, expected 2 (the retake did not publish a part)"
done

step "nodes 1-3 publish theirs: step 1000 is merged from node 0's newest part"
for k in 1 2 3; do commit "$k"; done
[ "$(commits)" = "1 1 1" ] || die "step 1000: commit records $(commits), expected 1 1 1"
mkdir -p "$T/want"
for k in 0 1 2 3; do cp -a "$T/i-n$k/watch/job/checkpoint-1000/." "$T/want/"; done
rm -rf "$T/i-x/state"
icks x restore --run job --latest --to "$T/got" -q || die "restore --latest on a fresh instance"
diff <(tree_sums "$T/want") <(tree_sums "$T/got/checkpoint-1000") > "$T/diff" ||
  { cat "$T/diff" >&2; die "step 1000 restores without node 0's newest files"; }

step "node 1 retakes the committed step (its file rewritten): the step is merged again, newest parts"
make_file "$T/i-n1/watch/job/checkpoint-1000/__1_0.distcp" 1
commit 1
[ "$(commits)" = "2 2 2" ] || die "step 1000 after node 1's retake: commit records $(commits), expected 2 2 2"
cp -a "$T/i-n1/watch/job/checkpoint-1000/." "$T/want/"
rm -rf "$T/i-x/state" "$T/got"
icks x restore --run job --latest --to "$T/got" -q || die "restore --latest on a fresh instance"
diff <(tree_sums "$T/want") <(tree_sums "$T/got/checkpoint-1000") > "$T/diff" ||
  { cat "$T/diff" >&2; die "step 1000 restores without node 1's retaken file"; }
for k in 0 1 2 3; do istop "n$k"; done
echo "ok"
