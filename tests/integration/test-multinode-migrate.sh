#!/usr/bin/env bash
# Migration and preemption of a job on several nodes (docs/multinode.md
# "Migration and preemption"): real daemons, one per node (own state and
# watch dirs, shared regions), one run "job".
#   1. four nodes commit steps 1000 and 2000;
#   2. preemption notice on node 2 while step 3000 is incomplete (node 3
#      has not written its part), through deploy/preempt-watch.sh and a
#      fake metadata server: node 2's migrate-out makes its part
#      durable in every region and exits 8 naming node 3, writing no
#      handoff; node 2 is then killed -9; its part stays, and when node 3's
#      part lands the step commits without node 2;
#   3. migrate-out on all four nodes at once: exactly one handoff per
#      region, naming the job's newest committed step (3000), written once
#      per region (create-only: the other nodes found it);
#   4. migrate-in on two new nodes at once (--node K --of 2): one claim of
#      generation 1 per region, both nodes in generation 1, both restore
#      step 3000; their daemons (nodes = 2) continue the run: step 4000
#      commits at generation 1 as a 2-node job, and is what restore
#      --latest gives;
#   5. migrate-out on both, migrate-in on four new nodes one after another
#      through deploy/hooks/migrate-in.sh (identity from $SLURM_NODEID /
#      $SLURM_NNODES and $CKPTSYNC_NODE_RANK / $CKPTSYNC_NODES): one claim
#      of generation 2; the first node claims it, the other three join;
#   6. that 4-node job is abandoned with step 5000 incomplete (nodes 0-2's
#      parts in, at generation 2), and a new 4-node job takes over
#      (generation 3) and writes step 5000 again: the abandoned parts are
#      never merged with the new job's; the step commits once every new
#      node's part is in, holding the new job's files only.
# regions: dir
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"

for k in 0 1 2 3; do inst "n$k" nodes=4 node_rank=$k settle=3600; done
for k in 0 1; do inst "m$k" nodes=2 node_rank=$k settle=3600; done
for k in 0 1 2 3; do inst "p$k" settle=3600; done
for k in 0 1 2 3; do inst "q$k" nodes=4 node_rank=$k settle=3600; done
inst x

# commit NODE DIR STEP: the node's daemon commits DIR (its part), replicated.
commit() {
  icks "$1" commit "$T/i-$1/watch/job/$2" --step "$3" --wait replicated --timeout 120 \
    > /dev/null || die "node $1: commit job/$2 --wait replicated failed"
}
# keys R PATTERN: how many keys of region R match the extended regex.
top() { local p=${1#^}; echo "${p%%/*}/"; }   # the folder a pattern's keys are in
keys() { rg_keys "$1" "$(top "$2")" | grep -cE "$2" || true; }
per_region() { local r out=""; for r in a b c; do out="$out $(keys "$r" "$1")"; done; echo "${out# }"; }
# the one key (over all regions) that matches, or die
one_key() {
  local ks
  ks=$(for r in a b c; do rg_keys "$r" "$(top "$1")" | grep -E "$1" || true; done | sort -u)
  [ "$(printf '%s\n' "$ks" | grep -c .)" = 1 ] || die "keys matching $1: '$ks', expected one"
  echo "$ks"
}
latest() {
  rm -rf "$T/i-x/state" "$1"
  icks x restore --run job --latest --to "$1" --json > "$T/latest.json" 2> "$T/latest.err" ||
    { cat "$T/latest.err" >&2; die "restore --run job --latest on a fresh state"; }
}

for k in 0 1 2 3; do idaemon "n$k"; done

# ============================================================================
step "1. four nodes commit steps 1000 and 2000"
for s in 1000 2000; do
  for k in 0 1 2 3; do make_file "$T/i-n$k/watch/job/checkpoint-$s/__${k}_0.distcp" 1; done
  dcp_meta "$T/i-n0/watch/job/checkpoint-$s/.metadata" 4
  for k in 0 1 2 3; do commit "n$k" "checkpoint-$s" "$s"; done
  [ "$(per_region "^commits/job/g0\.s$s\.")" = "1 1 1" ] || die "step $s not committed once per region"
done

# ============================================================================
step "2. preemption notice on node 2 while node 3's part of step 3000 is missing"
for k in 0 1 2 3; do make_file "$T/i-n$k/watch/job/checkpoint-3000/__${k}_0.distcp" 1; done
dcp_meta "$T/i-n0/watch/job/checkpoint-3000/.metadata" 4
for k in 0 1; do commit "n$k" checkpoint-3000 3000; done
# The notice comes through deploy/preempt-watch.sh from a fake metadata
# server (generic: HTTP 200 is a notice); it runs migrate-out, whose flush
# takes node 2's checkpoint (never committed) and makes its part durable.
python3 - "$T/md.port" > /dev/null 2>&1 <<'PY' &
import http.server, os, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"preempted\n")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1] + ".tmp", "w").write(str(s.server_port)); os.rename(sys.argv[1] + ".tmp", sys.argv[1])
s.serve_forever()
PY
MD_PID=$!
_md_stop() { kill "$MD_PID" 2> /dev/null || true; }
CKS_CLEANUP_HOOKS+=(_md_stop)
for _ in $(seq 1 100); do [ -s "$T/md.port" ] && break; sleep 0.05; done
[ -s "$T/md.port" ] || die "the fake metadata server did not start"
if command -v curl > /dev/null; then   # (preempt-watch.sh polls with curl)
  expect_fail 8 env CKPTSYNC="$CKPTSYNC" "$CKS_SOURCE_DIR/deploy/preempt-watch.sh" --provider generic \
    --url "http://127.0.0.1:$(cat "$T/md.port")/notice" --once --deadline 4 --run job --config "$T/i-n2.conf"
  grep -F "this node's part is durable, but the job's newest step is not committed" "$T/err" > /dev/null ||
    { cat "$T/err" >&2; die "preempt-watch.sh on node 2 did not say what exit 8 means"; }
else
  expect_fail 8 icks n2 migrate-out --run job --deadline 4
fi
_md_stop
grep -E "node 2: its part of step 3000 is durable, but the step is NOT committed: node\(s\) 3 of 4 have no part in the regions; no handoff written: the job resumes from step 2000" "$T/err" > /dev/null ||
  { cat "$T/err" >&2; die "migrate-out on the preempted node 2 did not name node 3"; }
[ "$(per_region '^parts/job/s3000\.2-of-4\.')" = "1 1 1" ] || die "node 2's part of step 3000 is not in every region"
[ "$(per_region '^lineage/job/.*handoff')" = "0 0 0" ] || die "a handoff was written while step 3000 is incomplete"
ikill n2
icks x ls --remote --run job --json > "$T/ls.json"
[ "$(json "$T/ls.json" "[(x['step'], x['missing']) for x in d if x.get('incomplete')]")" = "[(3000, [3])]" ] ||
  die "ls --remote after node 2's preemption: $(cat "$T/ls.json")"
commit n3 checkpoint-3000 3000
[ "$(per_region '^commits/job/g0\.s3000\.')" = "1 1 1" ] || die "step 3000 did not commit with node 2 gone (its part was durable)"

# ============================================================================
step "3. migrate-out on all four nodes at once: one handoff of step 3000"
idaemon n2   # the node is back (its state kept) for the migration
pids=()
for k in 0 1 2 3; do
  icks "n$k" migrate-out --run job --deadline 60 --json > "$T/mo-$k.json" 2> "$T/mo-$k.err" &
  pids+=($!)
done
for k in 0 1 2 3; do
  wait "${pids[$k]}" || { cat "$T/mo-$k.err" >&2; die "migrate-out on node $k failed"; }
done
id3000=$(one_key '^commits/job/g0\.s3000\.' | sed 's/.*\.s3000\.//')
hk=$(one_key '^lineage/job/g0\.handoff\.')
[ "$hk" = "lineage/job/g0.handoff.s3000.$id3000" ] || die "the handoff is $hk, expected step 3000 ($id3000)"
[ "$(per_region '^lineage/job/g0\.handoff\.')" = "1 1 1" ] || die "handoffs per region: $(per_region '^lineage/job/g0\.handoff\.')"
written=0 found=0
for k in 0 1 2 3; do
  [ "$(json "$T/mo-$k.json" '[(r["handoff"], r["handoff_step"], r["committed"]) for r in d["runs"]]')" = "[('$id3000', 3000, True)]" ] ||
    die "node $k's migrate-out: $(cat "$T/mo-$k.json")"
  written=$((written + $(json "$T/mo-$k.json" 'd["runs"][0]["handoff_written"]')))
  found=$((found + $(json "$T/mo-$k.json" 'd["runs"][0]["handoff_found"]')))
done
[ "$written/$found" = "3/9" ] || die "handoff written $written times and found $found times, expected once per region (3/9)"
for k in 0 1 2 3; do istop "n$k"; done

# ============================================================================
step "4. migrate-in on two new nodes at once: one generation for the job, both join it"
pids=()
for k in 0 1; do
  icks "m$k" migrate-in --run job --to "$T/i-m$k/watch/job" --node "$k" --of 2 --json \
    > "$T/mi-$k.json" 2> "$T/mi-$k.err" &
  pids+=($!)
done
for k in 0 1; do wait "${pids[$k]}" || { cat "$T/mi-$k.err" >&2; die "migrate-in on new node $k failed"; }; done
[ "$(per_region '^lineage/job/g[0-9]+\.claim\.')" = "1 1 1" ] ||
  die "claims per region after two new nodes: $(per_region '^lineage/job/g[0-9]+\.claim\.'), expected one for the job"
one_key '^lineage/job/g1\.claim\.' > /dev/null
for k in 0 1; do
  [ "$(json "$T/mi-$k.json" '(d["generation"], d["step"], d["id"], d["handoff"], d["node_rank"], d["nodes"])')" = "(1, 3000, '$id3000', True, $k, 2)" ] ||
    die "new node $k's migrate-in: $(cat "$T/mi-$k.json")"
done
[ -f "$T/i-m0/watch/job/checkpoint-3000/.metadata" ] || die "new node 0 did not restore step 3000"

step "the two new nodes' daemons continue the run: step 4000 commits at generation 1 as a 2-node job"
for k in 0 1; do idaemon "m$k"; done
for k in 0 1; do make_file "$T/i-m$k/watch/job/checkpoint-4000/__${k}_0.distcp" 1; done
dcp_meta "$T/i-m0/watch/job/checkpoint-4000/.metadata" 2
for k in 0 1; do commit "m$k" checkpoint-4000 4000; done
[ "$(per_region '^parts/job/s4000\.[01]-of-2\.')" = "2 2 2" ] || die "the parts of step 4000 are not the 2-node job's"
[ "$(per_region '^commits/job/g1\.s4000\.')" = "1 1 1" ] || die "step 4000 is not committed at generation 1 in every region"
[ "$(per_region '^parts/job/s3000\.[01]-of-2\.')" = "0 0 0" ] || die "a new node uploaded the restored step 3000 again"
mkdir -p "$T/want4000"
for k in 0 1; do cp -a "$T/i-m$k/watch/job/checkpoint-4000/." "$T/want4000/"; done
latest "$T/got"
[ "$(json "$T/latest.json" 'd["step"]')" = 4000 ] || die "restore --latest after the migration: step $(json "$T/latest.json" 'd["step"]')"
diff <(tree_sums "$T/want4000") <(tree_sums "$T/got/checkpoint-4000") > "$T/diff" ||
  { cat "$T/diff" >&2; die "restored step 4000 differs from the two nodes' files"; }

# ============================================================================
step "5. migrate-out on both, migrate-in on four new nodes through the hook: one claim of generation 2"
for k in 0 1; do icks "m$k" migrate-out --run job --deadline 60 -q || die "migrate-out on new node $k"; done
id4000=$(one_key '^commits/job/g1\.s4000\.' | sed 's/.*\.s4000\.//')
[ "$(one_key '^lineage/job/g1\.handoff\.')" = "lineage/job/g1.handoff.s4000.$id4000" ] || die "the 2-node job's handoff"
for k in 0 1; do istop "m$k"; done
for k in 0 1 2 3; do
  if [ "$k" -lt 2 ]; then idvars=(SLURM_NNODES=4 "SLURM_NODEID=$k" SLURM_JOB_ID=77)
  else idvars=(CKPTSYNC_NODES=4 "CKPTSYNC_NODE_RANK=$k" CKPTSYNC_JOB_ID=77); fi
  env "${idvars[@]}" CKPTSYNC="$CKPTSYNC" "$CKS_SOURCE_DIR/deploy/hooks/migrate-in.sh" --run job \
    --to "$T/i-p$k/watch/job" --config "$T/i-p$k.conf" --no-start > "$T/pi-$k.out" 2> "$T/pi-$k.err" ||
    { cat "$T/pi-$k.err" >&2; die "migrate-in.sh on node $k of 4"; }
  [ "$(cat "$T/pi-$k.out")" = "$T/i-p$k/watch/job/checkpoint-4000" ] || die "migrate-in.sh on node $k printed '$(cat "$T/pi-$k.out")'"
  if [ "$k" = 0 ]; then want="generation 2 claimed for the job"; else want="generation 2 was claimed for the job by another node: joined it"; fi
  grep -F "migrate-in: node $k of 4: $want" "$T/pi-$k.err" > /dev/null ||
    { cat "$T/pi-$k.err" >&2; die "node $k of 4: expected '$want'"; }
done
[ "$(per_region '^lineage/job/g2\.claim\.')" = "1 1 1" ] || die "claims of generation 2 per region: $(per_region '^lineage/job/g2\.claim\.')"
[ "$(per_region '^lineage/job/g3\.')" = "0 0 0" ] || die "a node claimed a generation of its own"

# ============================================================================
step "6. an abandoned 4-node job's incomplete step 5000, then a new 4-node job's step 5000"
for k in 0 1 2; do
  sed -i "/^\[daemon\]/a nodes = 4\nnode_rank = $k" "$T/i-p$k.conf"
  idaemon "p$k"
  make_file "$T/i-p$k/watch/job/checkpoint-5000/__${k}_0.distcp" 1
  commit "p$k" checkpoint-5000 5000
  istop "p$k"
done
[ "$(per_region '^parts/job/s5000\.[0-2]-of-4\.')" = "3 3 3" ] || die "the abandoned job's parts of step 5000"
[ "$(per_region '^commits/job/g[0-9]+\.s5000\.')" = "0 0 0" ] || die "step 5000 committed without node 3"
for k in 0 1 2 3; do
  icks "q$k" migrate-in --run job --to "$T/i-q$k/watch/job" --job 78 -q > /dev/null || die "migrate-in on q$k"
done
[ "$(per_region '^lineage/job/g3\.claim\.')" = "1 1 1" ] || die "the new job's claim of generation 3"
for k in 0 1 2 3; do idaemon "q$k"; done
for k in 0 1 2 3; do make_file "$T/i-q$k/watch/job/checkpoint-5000/__${k}_0.distcp" 1; done
# (node 3's is the last part: with the abandoned parts of nodes 0-2 taken,
# its listing would find four ranks and merge the two jobs' files)
for k in 0 1 2 3; do commit "q$k" checkpoint-5000 5000; done
[ "$(per_region '^commits/job/g3\.s5000\.')" = "1 1 1" ] || die "step 5000 is not committed at generation 3 once per region"
[ "$(per_region '^commits/job/g[0-9]+\.s5000\.')" = "1 1 1" ] || die "step 5000 committed more than once"
rm -rf "$T/want5000"; mkdir -p "$T/want5000"
for k in 0 1 2 3; do cp -a "$T/i-q$k/watch/job/checkpoint-5000/." "$T/want5000/"; done
latest "$T/got5"
[ "$(json "$T/latest.json" 'd["step"]')" = 5000 ] || die "restore --latest: step $(json "$T/latest.json" 'd["step"]')"
diff <(tree_sums "$T/want5000") <(tree_sums "$T/got5/checkpoint-5000") > "$T/diff" ||
  { cat "$T/diff" >&2; die "step 5000 holds other files than the new job's four nodes wrote"; }
for k in 0 1 2 3; do istop "q$k"; done

if grep -E 'AddressSanitizer|LeakSanitizer|runtime error' "$T"/i-*/daemon.log "$T"/*.err > "$T/san.txt" 2>/dev/null; then
  cat "$T/san.txt" >&2; die "a sanitizer error"
fi
echo "ok"
