#!/usr/bin/env bash
# restore --node K --of M: a job on four nodes (four daemons, nodes = 4,
# node_rank = K, one run "job"), restored on fresh instances.
#   1. Megatron-like step 1000 (iter_0001000/mp_rank_0K/..., per-rank RNG
#      and dataloader state on every node, a config and tokenizer on node 0,
#      args.json written identically by all): the merged snapshot is a
#      version 5 manifest (version 4 with chunk-tree file digests, the
#      default [snapshot] file_digest), each file's "tree:" digest carried
#      through the merge; --node K --of 4 gives exactly node K's files and
#      the shared ones, bit for bit;
#   2. --of 2 refuses (exit 7) naming every rank-bound file of nodes 2 and 3
#      and the dropped ranks, writing nothing; --allow-reshard restores node
#      K's files and the shared ones, with a warning naming what is left;
#   3. DCP step 3000 (__K_0.distcp on every node, .metadata on node 0):
#      --of 2 brings every shard (DCP reads any file from any rank), --of 4
#      node K's shard and .metadata;
#   4. a single-node snapshot (an instance without nodes) is a version 5
#      manifest with "nodes 0" and restores as before; --node on it restores the whole
#      tree, with a note;
#   5. usage: --node without --of, --node K >= M.
# regions: dir
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"

N=4
for k in 0 1 2 3; do inst "n$k" nodes=$N node_rank=$k settle=3600; done
inst x
inst s settle=3600

commit() {
  icks "n$1" commit "$T/i-n$1/watch/job/$2" --step "$3" --wait replicated --timeout 120 \
    > /dev/null || die "node $1: commit job/$2 --wait replicated failed"
}
commits() {
  local r out=""
  for r in a b c; do out="$out $(rg_keys "$r" commits/ | grep -c "\.s$1\." || true)"; done
  echo "${out# }"
}
# restore_node DIR ARGS...: restore --latest of run job on a fresh instance x.
restore_node() {
  local dir=$1; shift
  rm -rf "$T/i-x/state" "$dir"
  icks x restore --run job --latest --to "$dir" "$@" > "$T/out" 2> "$T/err"
}
# merged_manifest STEP FILE: the merged snapshot of STEP from region a.
merged_manifest() {
  local k
  for k in $(rg_keys a snapshots/); do
    rg_get a "$k" "$2"
    grep -qx "step $1" "$2" && return 0
  done
  die "region a holds no snapshot of step $1"
}

for k in 0 1 2 3; do idaemon "n$k"; done

# ============================================================================
step "1. Megatron-like step 1000 on four nodes, restored per node on four"
for k in 0 1 2 3; do
  d="$T/i-n$k/watch/job/iter_0001000"
  make_file "$d/mp_rank_0$k/model_optim_rng.pt" 1
  head -c 3000 /dev/urandom > "$d/rng_state_$k.pth"
  head -c 2000 /dev/urandom > "$d/dataloader_rank_$k.pt"
  printf '{"tensor_model_parallel_size": 1, "world": 4}\n' > "$d/args.json"
done
d0="$T/i-n0/watch/job/iter_0001000"
printf 'model: gpt\nlayers: 2\n' > "$d0/config.yaml"
mkdir -p "$d0/tokenizer" && printf 'a\nb\n' > "$d0/tokenizer/vocab.txt"
for k in 0 1 2 3; do commit "$k" iter_0001000 1000; done
[ "$(commits 1000)" = "1 1 1" ] || die "step 1000 not committed once per region: $(commits 1000)"
merged_manifest 1000 "$T/m1000"
[ "$(sed -n 1p "$T/m1000")" = 'ckptsync-manifest 5' ] || die "merged step: $(sed -n 1p "$T/m1000"), want version 5"
grep -qx 'nodes 4' "$T/m1000" || die "merged step: no 'nodes 4' line"
grep -q ' 2 [0-9]* tree:[0-9a-f]* [0-9]* iter_0001000/rng_state_2.pth$' "$T/m1000" ||
  die "merged step: rng_state_2.pth not recorded as node 2's: $(grep rng_state_2 "$T/m1000")"
grep -q ' \* [0-9]* tree:[0-9a-f]* [0-9]* iter_0001000/args.json$' "$T/m1000" ||
  die "merged step: args.json (on every node) not recorded as several nodes'"

# want K DIR: node K's own files plus node 0's shared ones
want() {
  rm -rf "$2" && mkdir -p "$2"
  cp -a "$T/i-n$1/watch/job/iter_0001000" "$2/"
  cp -a "$d0/config.yaml" "$d0/tokenizer" "$2/iter_0001000/"
}
for k in 0 1 2 3; do
  restore_node "$T/r$k" --node "$k" --of 4 || { cat "$T/err" >&2; die "restore --node $k --of 4"; }
  want "$k" "$T/want$k"
  same_tree "$T/want$k" "$T/r$k"
done
echo "nodes 0-3 of 4: each its own files and the shared ones"

# ============================================================================
step "2. --of 2: refused, naming ranks 2 and 3's files; then --allow-reshard"
set +e; restore_node "$T/r02" --node 0 --of 2; rc=$?; set -e
[ "$rc" = 7 ] || { cat "$T/err" >&2; die "restore --node 0 --of 2 exited $rc, want 7"; }
for k in 2 3; do
  for f in "mp_rank_0$k/model_optim_rng.pt" "mp_rank_0$k" "rng_state_$k.pth" "dataloader_rank_$k.pt"; do
    grep -qF "\"iter_0001000/$f\" (node $k, " "$T/err" || { cat "$T/err" >&2; die "the refusal does not name iter_0001000/$f"; }
  done
done
grep -q 'ranks that would be dropped: 2, 3$' "$T/err" || { cat "$T/err" >&2; die "the refusal does not name ranks 2 and 3"; }
grep -q -- '--allow-reshard' "$T/err" || die "the refusal does not say how to go on"
if grep -E 'rng_state_[01]|mp_rank_0[01]|args.json|config.yaml' "$T/err"; then die "the refusal names files node 0 or 1 keeps"; fi
[ -z "$(ls -A "$T/r02" 2> /dev/null)" ] || die "a refused restore wrote into its target: $(ls -A "$T/r02")"
for k in 0 1; do
  restore_node "$T/r$k-of2" --node "$k" --of 2 --allow-reshard ||
    { cat "$T/err" >&2; die "restore --node $k --of 2 --allow-reshard"; }
  grep -q 'ranks that would be dropped: 2, 3' "$T/err" || { cat "$T/err" >&2; die "--allow-reshard: no warning naming what is left out"; }
  same_tree "$T/want$k" "$T/r$k-of2"
done

# ============================================================================
step "3. DCP step 3000: every shard on another node count"
for k in 0 1 2 3; do make_file "$T/i-n$k/watch/job/checkpoint-3000/__${k}_0.distcp" 1; done
python3 "$CKS_SOURCE_DIR/tests/integration/dcpmeta.py" "$T/i-n0/watch/job/checkpoint-3000/.metadata" \
  __0_0.distcp:0:1048576 __1_0.distcp:0:1048576 __2_0.distcp:0:1048576 __3_0.distcp:0:1048576 ||
  die "writing a DCP .metadata"
for k in 0 1 2 3; do commit "$k" checkpoint-3000 3000; done
[ "$(commits 3000)" = "1 1 1" ] || die "step 3000 not committed once per region: $(commits 3000)"
mkdir -p "$T/wantdcp"
for k in 0 1 2 3; do cp -a "$T/i-n$k/watch/job/checkpoint-3000/." "$T/wantdcp/"; done
restore_node "$T/dcp1of2" --node 1 --of 2 || { cat "$T/err" >&2; die "DCP: restore --node 1 --of 2"; }
same_tree "$T/wantdcp" "$T/dcp1of2/checkpoint-3000"
restore_node "$T/dcp1of4" --node 1 --of 4 || { cat "$T/err" >&2; die "DCP: restore --node 1 --of 4"; }
[ "$(cd "$T/dcp1of4/checkpoint-3000" && find . -type f | sort | tr '\n' ' ')" = "./.metadata ./__1_0.distcp " ] ||
  die "DCP node 1 of 4: $(cd "$T/dcp1of4" && find . -type f | sort | tr '\n' ' ')"
cmp "$T/wantdcp/__1_0.distcp" "$T/dcp1of4/checkpoint-3000/__1_0.distcp" || die "DCP node 1 of 4: shard differs"
for k in 0 1 2 3; do istop "n$k"; done

# ============================================================================
step "4. a single-node snapshot: version 5 (nodes 0), restored whole, --node says so"
make_file "$T/i-s/watch/solo/checkpoint-10/model.pt" 1
head -c 100 /dev/urandom > "$T/i-s/watch/solo/checkpoint-10/rng_state_3.pth"
icks s snapshot "$T/i-s/watch/solo/checkpoint-10" --run solo --step 10 > /dev/null || die "snapshot of run solo"
k=$(rg_keys a snapshots/solo/)
[ "$(echo "$k" | wc -l)" = 1 ] || die "region a: snapshots of run solo: $k"
rg_get a "$k" "$T/msolo"
[ "$(sed -n 1p "$T/msolo")" = 'ckptsync-manifest 5' ] || die "single-node snapshot: $(sed -n 1p "$T/msolo"), want version 5"
grep -qx 'nodes 0' "$T/msolo" || die "single-node snapshot: no 'nodes 0' line"
rm -rf "$T/i-x/state"
icks x restore --run solo --latest --to "$T/solo" > /dev/null 2> "$T/err" || { cat "$T/err" >&2; die "restore of run solo"; }
same_tree "$T/i-s/watch/solo/checkpoint-10" "$T/solo/checkpoint-10"
rm -rf "$T/i-x/state"
icks x restore --run solo --latest --to "$T/solo1" --node 1 --of 2 --json > "$T/solo.json" 2> "$T/err" ||
  { cat "$T/err" >&2; die "restore --node 1 --of 2 of a single-node snapshot"; }
grep -q "written by one node.*restored the whole tree" "$T/err" || { cat "$T/err" >&2; die "no note that --node restored the whole tree"; }
[ "$(json "$T/solo.json" '(d["nodes"], d["node_whole"])')" = "(0, True)" ] || die "restore --json: $(cat "$T/solo.json")"
same_tree "$T/i-s/watch/solo/checkpoint-10" "$T/solo1/checkpoint-10"

# ============================================================================
step "5. usage errors"
expect_fail 2 icks x restore --run job --latest --to "$T/u" --node 1
grep -q -- "--node needs --of" "$T/err" || { cat "$T/err" >&2; die "--node without --of"; }
expect_fail 2 icks x restore --run job --latest --to "$T/u" --node 2 --of 2
grep -q -- "--node K must be below --of M" "$T/err" || { cat "$T/err" >&2; die "--node 2 --of 2"; }
expect_fail 2 icks x restore --run job --latest --to "$T/u" --allow-reshard
[ ! -e "$T/u" ] || die "a usage error wrote its target"

if grep -E 'AddressSanitizer|LeakSanitizer|runtime error' "$T"/i-n*/daemon.log > "$T/san.txt"; then
  cat "$T/san.txt" >&2; die "a daemon reported a sanitizer error"
fi
echo "ok"
