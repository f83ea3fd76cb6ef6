#!/usr/bin/env bash
# A job on four nodes: four daemons (own state and watch dirs, shared
# regions), [daemon] nodes = 4 and node_rank = K (node 3 through
# $CKPTSYNC_NODES / $CKPTSYNC_NODE_RANK instead), one run "job".
#   1. DCP layout (__K_0.distcp on every node, .metadata on node 0 only):
#      while node 3 has not published its part, step 1000 is not committed
#      anywhere (no commit record, no snapshot listed, ls --remote shows it
#      incomplete with node 3 missing); node 3 is held just before its
#      publish (test hook) and killed -9 there; restarted, it publishes its
#      part and the step commits, once per region;
#   2. restore --latest on a fresh instance gives the whole tree, every
#      node's files, bit for bit;
#   3. Megatron layout (iter_0002000/mp_rank_0K/...): node 2 is slow; the
#      incomplete step 2000 never hides step 1000 (resume point, restore
#      --latest); when node 2's part lands, 2000 commits and is the latest;
#   4. two nodes whose parts name one path with different bytes: the step
#      is refused at commit (logged, naming the path), nothing committed;
#   5. all four nodes finish a step at once (several may merge it): one
#      snapshot and one commit record per region;
#   6. a garbage part under node 3's key: the step is refused at commit;
#   7. migrate-out on a node whose newest step cannot commit: exit 8.
# regions: dir s3 ceph
# encrypted: yes
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"

N=4
for k in 0 1 2; do inst "n$k" nodes=$N node_rank=$k settle=3600; done
inst n3 settle=3600
inst x

start_node() {
  if [ "$1" = 3 ]; then CKPTSYNC_NODES=$N CKPTSYNC_NODE_RANK=3 idaemon n3; else idaemon "n$1"; fi
}
# commit K DIR STEP: node K's daemon commits DIR (its part), replicated.
commit() {
  icks "n$1" commit "$T/i-n$1/watch/job/$2" --step "$3" --wait replicated --timeout 120 --json \
    > "$T/commit-$1.json" || die "node $1: commit job/$2 --wait replicated failed"
}
# commits STEP: how many commit records of step STEP each region holds ("a b c").
commits() {
  local r out=""
  # (commits/ holds run job only: this also counts under an encrypted
  # repository's keyed run name)
  for r in a b c; do out="$out $(rg_keys "$r" commits/ | grep -c "\.s$1\." || true)"; done
  echo "${out# }"
}
remote_ls() {
  rm -rf "$T/i-x/state"
  icks x ls --remote --run job --json > "$T/ls.json" || die "ls --remote --run job"
}
resume_step() { json "$T/ls.json" "[x['step'] for x in d if x.get('resume')]"; }
incomplete() { json "$T/ls.json" "[(x['step'], x['missing']) for x in d if x.get('incomplete')]"; }
latest() {
  rm -rf "$T/i-x/state" "$1"
  icks x restore --run job --latest --to "$1" --json > "$T/latest.json" 2> "$T/latest.err" ||
    { cat "$T/latest.err" >&2; die "restore --run job --latest on a fresh state"; }
}

for k in 0 1 2 3; do start_node "$k"; done
for k in 1 3; do   # node 1 from its file, node 3 from $CKPTSYNC_NODES / $CKPTSYNC_NODE_RANK
  icks "n$k" status --json > "$T/st.json"
  [ "$(json "$T/st.json" '(d["config"]["nodes"], d["config"]["node_rank"])')" = "(4, $k)" ] ||
    die "node $k: status says node $(json "$T/st.json" 'd["config"]["node_rank"]') of $(json "$T/st.json" 'd["config"]["nodes"]')"
done

# ============================================================================
step "1. DCP: nodes 0-2 publish their parts; node 3 held before its publish, then killed -9"
for k in 0 1 2 3; do
  d="$T/i-n$k/watch/job/checkpoint-1000"
  make_file "$d/__${k}_0.distcp" 1
done
python3 "$CKS_SOURCE_DIR/tests/integration/dcpmeta.py" "$T/i-n0/watch/job/checkpoint-1000/.metadata" \
  __0_0.distcp:0:1048576 __1_0.distcp:0:1048576 __2_0.distcp:0:1048576 __3_0.distcp:0:1048576 ||
  die "writing a DCP .metadata"   # (pickled by Python: read at commit, docs/multinode.md)
for k in 0 1 2; do commit "$k" checkpoint-1000 1000; done
for r in a b c; do
  n=$(rg_keys "$r" parts/ | grep -c '^parts/[^/]*/s1000\.[0-2]-of-4\.' || true)
  [ "$n" = 3 ] || die "region $r: $n parts of step 1000 from nodes 0-2, expected 3"
done
[ "$(commits 1000)" = "0 0 0" ] || die "step 1000 committed with node 3's part missing: $(commits 1000)"
remote_ls
[ "$(incomplete)" = "[(1000, [3])]" ] || die "ls --remote: incomplete steps $(incomplete), expected [(1000, [3])]"
[ "$(json "$T/ls.json" "len([x for x in d if not x.get('incomplete') and x['step'] == 1000])")" = 0 ] ||
  die "ls --remote lists a snapshot of step 1000 before node 3's part is in"

istop n3
CKPTSYNC_TEST_STOP_BEFORE_PUBLISH=1 start_node 3
icks n3 commit "$T/i-n3/watch/job/checkpoint-1000" --step 1000 > /dev/null ||
  die "node 3: commit request refused"
for _ in $(seq 1 300); do
  [ "$(ps -o stat= -p "${IPID[n3]}" | cut -c1)" = T ] && break
  sleep 0.1
done
[ "$(ps -o stat= -p "${IPID[n3]}" | cut -c1)" = T ] || die "node 3 did not reach its publish"
ikill n3
[ "$(commits 1000)" = "0 0 0" ] || die "step 1000 committed after node 3 died before its part: $(commits 1000)"

step "node 3 restarts: its queue publishes the part, and step 1000 commits once per region"
start_node 3
ok=
for _ in $(seq 1 600); do
  [ "$(commits 1000)" = "1 1 1" ] && { ok=1; break; }
  sleep 0.1
done
[ -n "$ok" ] || die "step 1000 did not commit in every region after node 3 came back: $(commits 1000)"
for r in a b c; do
  n=$(rg_keys "$r" snapshots/ | wc -l)
  [ "$n" = 1 ] || die "region $r: $n snapshots of run job, expected the merged one"
done

# ============================================================================
step "2. restore --latest on a fresh instance: the whole tree, bit for bit"
mkdir -p "$T/want1000"
for k in 0 1 2 3; do cp -a "$T/i-n$k/watch/job/checkpoint-1000/." "$T/want1000/"; done
latest "$T/got"
[ "$(json "$T/latest.json" 'd["step"]')" = 1000 ] || die "restore --latest: step $(json "$T/latest.json" 'd["step"]')"
diff <(tree_sums "$T/want1000") <(tree_sums "$T/got/checkpoint-1000") > "$T/diff" ||
  { cat "$T/diff" >&2; die "restored step 1000 differs from the four nodes' files"; }

# ============================================================================
step "3. Megatron, node 2 slow: the incomplete step 2000 never hides step 1000"
for k in 0 1 2 3; do
  make_file "$T/i-n$k/watch/job/iter_0002000/mp_rank_0$k/model_optim_rng.pt" 1
done
for k in 0 1 3; do commit "$k" iter_0002000 2000; done
[ "$(commits 2000)" = "0 0 0" ] || die "step 2000 committed without node 2: $(commits 2000)"
remote_ls
[ "$(incomplete)" = "[(2000, [2])]" ] || die "ls --remote: incomplete $(incomplete), expected [(2000, [2])]"
[ "$(resume_step)" = "[1000]" ] || die "resume point with step 2000 incomplete: step $(resume_step)"
latest "$T/got"
[ "$(json "$T/latest.json" 'd["step"]')" = 1000 ] || die "restore --latest took an incomplete step"
# A prune meanwhile: the parts of the incomplete step are roots, so none
# of their chunks is even marked (the daemons' intents could only delay a
# sweep, never a mark).
cks prune --grace 0 --json > "$T/prune.json" 2> "$T/prune.err" || { cat "$T/prune.err" >&2; die "prune"; }
marked=$(json "$T/prune.json" 'sum(r["marked"] + r["deleted"] for r in d["regions"])')
[ "$marked" = 0 ] || die "prune marked or deleted $marked chunks while step 2000 is incomplete: $(cat "$T/prune.json")"
commit 2 iter_0002000 2000
[ "$(commits 2000)" = "1 1 1" ] || die "step 2000 not committed once per region: $(commits 2000)"
remote_ls
[ "$(incomplete)" = "[]" ] || die "ls --remote: still incomplete: $(incomplete)"
[ "$(resume_step)" = "[2000]" ] || die "resume point after node 2's part: step $(resume_step)"
mkdir -p "$T/want2000"
for k in 0 1 2 3; do cp -a "$T/i-n$k/watch/job/iter_0002000/." "$T/want2000/"; done
latest "$T/got2"
diff <(tree_sums "$T/want2000") <(tree_sums "$T/got2/iter_0002000") > "$T/diff" ||
  { cat "$T/diff" >&2; die "restored step 2000 differs from the four nodes' files"; }

# ============================================================================
step "4. two nodes name one path with different bytes: refused at commit"
for k in 0 1 2 3; do make_file "$T/i-n$k/watch/job/checkpoint-3000/__${k}_0.distcp" 1; done
echo "node 0's" > "$T/i-n0/watch/job/checkpoint-3000/.metadata"
echo "node 1's" > "$T/i-n1/watch/job/checkpoint-3000/.metadata"
for k in 0 1 2 3; do commit "$k" checkpoint-3000 3000; done
[ "$(commits 3000)" = "0 0 0" ] || die "step 3000 committed with two different .metadata: $(commits 3000)"
grep '"checkpoint-3000/.metadata" is held by node 0 and node 1 with different contents' "$T"/i-n*/daemon.log > /dev/null ||
  die "no node reported the conflicting .metadata"
remote_ls
[ "$(incomplete)" = "[(3000, [])]" ] || die "ls --remote: incomplete $(incomplete), expected [(3000, [])]"
[ "$(resume_step)" = "[2000]" ] || die "resume point after the refused step 3000: step $(resume_step)"

# ============================================================================
step "5. all four nodes finish step 4000 at once: one snapshot, one commit record per region"
for k in 0 1 2 3; do make_file "$T/i-n$k/watch/job/checkpoint-4000/__${k}_0.distcp" 1; done
pids=()
for k in 0 1 2 3; do commit "$k" checkpoint-4000 4000 & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || die "a node's commit of step 4000 failed"; done
[ "$(commits 4000)" = "1 1 1" ] || die "step 4000: commit records per region $(commits 4000), expected 1 1 1"
for r in a b c; do
  n=$(rg_keys "$r" snapshots/ | wc -l)
  [ "$n" = 3 ] || die "region $r: $n snapshots after step 4000, expected 3 (steps 1000, 2000, 4000)"
done
echo "nodes that merged step 4000: $(cat "$T"/i-n*/daemon.log | grep -c 'event=step_committed run=job step=4000') (region commits)"
remote_ls
[ "$(resume_step)" = "[4000]" ] || die "resume point after step 4000: step $(resume_step)"

# ============================================================================
if [ "${CKS_TEST_ENCRYPT:-0}" != 1 ]; then   # (the part is planted by its plain key)
  step "6. a hostile part (garbage under node 3's key): refused at commit, naming it"
  printf 'ckptsync-part 1\nnode 3 4\nnot a manifest\n' > "$T/bad.part"
  for r in a b c; do rg_put "$r" "$T/bad.part" "parts/job/s5000.3-of-4.20261204T000000.000000Z-deadbeef"; done
  for k in 0 1 2; do make_file "$T/i-n$k/watch/job/checkpoint-5000/__${k}_0.distcp" 1; done
  for k in 0 1 2; do commit "$k" checkpoint-5000 5000; done
  [ "$(commits 5000)" = "0 0 0" ] || die "step 5000 committed with a garbage part: $(commits 5000)"
  grep "step 5000: the parts of 4 nodes in region '.' cannot be one snapshot: part \"parts/job/s5000.3-of-4.20261204T000000.000000Z-deadbeef\" (node 3 of 4): manifest line 1" \
    "$T"/i-n*/daemon.log > /dev/null ||
    die "no node reported the garbage part of step 5000"
  remote_ls
  [ "$(resume_step)" = "[4000]" ] || die "resume point with a garbage part of step 5000: step $(resume_step)"
fi

step "7. migrate-out on a node whose newest step cannot commit: its part durable, no handoff"
# (test-multinode-migrate covers handing a job off; here node 1's newest
# step is 5000, which step 6's garbage part keeps from committing)
if [ "${CKS_TEST_ENCRYPT:-0}" != 1 ]; then
  expect_fail 8 icks n1 migrate-out --run job --deadline 2
  grep "node 1: its part of step 5000 is durable, but the step is NOT committed: every node's part is in, but no region committed it" "$T/err" > /dev/null ||
    { cat "$T/err" >&2; die "migrate-out on node 1"; }
  for r in a b c; do
    n=$(rg_keys "$r" lineage/ | grep -c handoff || true)
    [ "$n" = 0 ] || die "region $r: migrate-out on node 1 wrote $n handoff records"
  done
fi

for k in 0 1 2 3; do istop "n$k"; done
if grep -E 'AddressSanitizer|LeakSanitizer|runtime error' "$T"/i-n*/daemon.log > "$T/san.txt"; then
  cat "$T/san.txt" >&2; die "a daemon reported a sanitizer error"
fi
cks verify -q > "$T/verify.out" 2>&1 || { cat "$T/verify.out" >&2; die "verify"; }
for k in 0 3; do   # a node's own state: its parts are not snapshots it expects in the regions
  icks "n$k" verify -q > "$T/verify.out" 2>&1 || { cat "$T/verify.out" >&2; die "verify on node $k"; }
  icks "n$k" fsck > "$T/fsck.out" 2>&1 || { cat "$T/fsck.out" >&2; die "fsck on node $k"; }
done
echo "ok"
