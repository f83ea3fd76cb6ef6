#!/usr/bin/env bash
# A commit names its node (issue 23 item 1): `ckptsync commit --node K --of
# N`, the C library's cks_commit_node and the Python module's commit /
# CheckpointCallback carry the caller's node rank and count; the daemon
# compares them with its own ([daemon] nodes, node_rank).
#   1. a daemon of one node (nodes unset) given "node 1 of 2" refuses the
#      commit, naming both identities and what to set; nothing of it is
#      published (no snapshot, no part); the same commit without --node
#      is then taken as before (so the check above could see one);
#   2. a job on two nodes (nodes = 2, node_rank = K): a commit naming the
#      other rank, or another node count, is refused, and no part of that
#      step is published;
#   3. both nodes commit with their own identity (the CLI on node 0, Python
#      with explicit node_rank/nodes on node 1): the step commits, once per
#      region;
#   4. Python (Debian's python3 and the first other python3 on PATH) picks
#      the identity up from torchrun's GROUP_RANK / GROUP_WORLD_SIZE, and
#      from Slurm's SLURM_NODEID / SLURM_NNODES: the right node commits,
#      the wrong one is refused with Error code "wrongnode".
# regions: dir
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"

inst n0 nodes=2 node_rank=0 settle=3600
inst n1 nodes=2 node_rank=1 settle=3600
inst solo settle=3600
for n in solo n0 n1; do idaemon "$n"; done

# parts STEP: how many parts of step STEP each region holds ("a b c").
parts() {
  local r out=""
  for r in a b c; do out="$out $(rg_keys "$r" parts/ | grep -c "/s$1\." || true)"; done
  echo "${out# }"
}
# commits STEP: how many commit records of step STEP each region holds.
commits() {
  local r out=""
  for r in a b c; do out="$out $(rg_keys "$r" commits/ | grep -c "\.s$1\." || true)"; done
  echo "${out# }"
}
# snapshots RUN: the steps of RUN's snapshots in the regions (fresh state).
snapshots() {
  rm -rf "$T/i-x/state"
  icks x ls --remote --run "$1" --json > "$T/ls.json" 2> /dev/null || echo "[]" > "$T/ls.json"
  json "$T/ls.json" "sorted(x['step'] for x in d if not x.get('incomplete'))"
}
inst x
# committed STEP: wait (at most 60 s) until step STEP commits in every region.
committed() {
  for _ in $(seq 1 600); do
    [ "$(commits "$1")" = "1 1 1" ] && return 0
    sleep 0.1
  done
  die "step $1 did not commit once in every region: $(commits "$1")"
}
pys=(/usr/bin/python3)
other=$(command -v python3 || true)
[ -z "$other" ] || pys+=("$("$other" -c 'import sys; print(sys.executable)')")
# pycommit PY NODE PATH STEP [VAR=VALUE...]: Python's ckptsync.commit on
# node NODE's daemon, with the environment given (identity variables of
# the test's own environment removed first).
pycommit() {
  local py=$1 node=$2 path=$3 st=$4; shift 4
  env -u CKPTSYNC_NODES -u CKPTSYNC_NODE_RANK -u GROUP_RANK -u GROUP_WORLD_SIZE \
    -u SLURM_NODEID -u SLURM_NNODES "$@" PYTHONPATH="$CKS_SOURCE_DIR/client/python" \
    CKPTSYNC_SOCKET="$T/i-$node/state/ckptsyncd.sock" "$py" - "$path" "$st" <<'PY'
import ckptsync, os, sys
kw = {}
if "ARG_NODE" in os.environ:
    kw = {"node_rank": int(os.environ["ARG_NODE"]), "nodes": int(os.environ["ARG_OF"])}
try:
    ckptsync.commit(sys.argv[1], step=int(sys.argv[2]), wait="replicated", timeout=120, **kw)
except ckptsync.Error as e:
    print("%s: %s" % (e.code, e.message), file=sys.stderr)
    sys.exit(3 if e.code == "wrongnode" else 1)
PY
}

# ============================================================================
step "1. one-node daemon, commit says node 1 of 2: refused, nothing published"
make_file "$T/i-solo/watch/solo/checkpoint-1/model.bin" 1
if icks solo commit "$T/i-solo/watch/solo/checkpoint-1" --step 1 --node 1 --of 2 \
  --wait replicated --timeout 60 2> "$T/solo.err"; then
  die "a one-node daemon took a commit that says node 1 of 2"
fi
want="this daemon is node 0 of 1; the commit says node 1 of 2: set [daemon] nodes = 2 and node_rank = 1, or CKPTSYNC_NODES/CKPTSYNC_NODE_RANK, in the daemon's environment"
grep -qF "$want" "$T/solo.err" || { cat "$T/solo.err" >&2; die "the refusal does not say: $want"; }
[ "$(snapshots solo)" = "[]" ] || die "refused commit published a snapshot: $(snapshots solo)"
[ "$(parts 1)" = "0 0 0" ] || die "refused commit published a part: $(parts 1)"
icks solo status --json > "$T/st.json"
[ "$(json "$T/st.json" "[r['run'] for r in d['runs'] if r['run'] == 'solo']")" = "[]" ] ||
  die "the daemon took up run solo after refusing its commit"
# the same commit without --node: as before, a snapshot of the run
icks solo commit "$T/i-solo/watch/solo/checkpoint-1" --step 1 --wait replicated --timeout 60 \
  > /dev/null || die "a plain commit on a one-node daemon failed"
[ "$(snapshots solo)" = "[1]" ] || die "plain commit: snapshots of run solo $(snapshots solo)"
# ...and one that says node 0 of 1, its own identity
make_file "$T/i-solo/watch/solo/checkpoint-2/model.bin" 1
icks solo commit "$T/i-solo/watch/solo/checkpoint-2" --step 2 --node 0 --of 1 \
  --wait replicated --timeout 60 > /dev/null || die "commit --node 0 --of 1 on a one-node daemon"
[ "$(snapshots solo)" = "[1, 2]" ] || die "snapshots of run solo $(snapshots solo), expected [1, 2]"

# ============================================================================
step "2. node 1 of 2 given another rank, another node count: refused, no part"
for k in 0 1; do make_file "$T/i-n$k/watch/job/checkpoint-100/__${k}_0.distcp" 1; done
for bad in "0 2" "1 4" "3 4"; do
  set -- $bad
  if icks n1 commit "$T/i-n1/watch/job/checkpoint-100" --step 100 --node "$1" --of "$2" \
    2> "$T/n1.err"; then
    die "node 1 of 2 took a commit that says node $1 of $2"
  fi
  want="this daemon is node 1 of 2; the commit says node $1 of $2: set [daemon] nodes = $2 and node_rank = $1"
  grep -qF "$want" "$T/n1.err" || { cat "$T/n1.err" >&2; die "the refusal does not say: $want"; }
done
[ "$(parts 100)" = "0 0 0" ] || die "a refused commit published a part of step 100: $(parts 100)"
# usage errors never reach the daemon
icks n1 commit "$T/i-n1/watch/job/checkpoint-100" --node 1 2> /dev/null && die "--node without --of taken"
icks n1 commit "$T/i-n1/watch/job/checkpoint-100" --node 2 --of 2 2> /dev/null && die "--node 2 --of 2 taken"

# ============================================================================
step "3. both nodes commit with their own identity: the step commits once per region"
icks n0 commit "$T/i-n0/watch/job/checkpoint-100" --step 100 --node 0 --of 2 \
  --wait replicated --timeout 120 > /dev/null || die "node 0: commit --node 0 --of 2"
[ "$(commits 100)" = "0 0 0" ] || die "step 100 committed with node 1's part missing"
pycommit "${pys[0]}" n1 "$T/i-n1/watch/job/checkpoint-100" 100 ARG_NODE=1 ARG_OF=2 ||
  die "node 1: Python commit(node_rank=1, nodes=2) failed"
committed 100
[ "$(parts 100)" = "2 2 2" ] || die "parts of step 100: $(parts 100), expected 2 per region"

# ============================================================================
step "4. Python takes the identity from torchrun's and Slurm's variables"
s=200
for py in "${pys[@]}"; do
  [ -x "$py" ] || continue
  for vars in "GROUP_RANK GROUP_WORLD_SIZE" "SLURM_NODEID SLURM_NNODES"; do
    set -- $vars
    s=$((s + 100))
    for k in 0 1; do make_file "$T/i-n$k/watch/job/checkpoint-$s/__${k}_0.distcp" 1; done
    # node 1's variables given to node 0's daemon: refused, no part
    rc=0
    pycommit "$py" n0 "$T/i-n0/watch/job/checkpoint-$s" "$s" "$1=1" "$2=2" 2> "$T/py.err" || rc=$?
    [ "$rc" = 3 ] || { cat "$T/py.err" >&2; die "$py $1=1 $2=2 on node 0: exit $rc, expected the wrongnode refusal"; }
    grep -qF "this daemon is node 0 of 2; the commit says node 1 of 2" "$T/py.err" ||
      { cat "$T/py.err" >&2; die "$py: the refusal does not name both identities"; }
    [ "$(parts "$s")" = "0 0 0" ] || die "$py: a refused commit published a part of step $s"
    for k in 0 1; do
      pycommit "$py" "n$k" "$T/i-n$k/watch/job/checkpoint-$s" "$s" "$1=$k" "$2=2" 2> "$T/py.err" ||
        { cat "$T/py.err" >&2; die "$py: node $k with $1=$k $2=2 failed"; }
    done
    committed "$s"
  done
done
[ "$s" -gt 300 ] || die "no Python ran"
echo "PASS"
