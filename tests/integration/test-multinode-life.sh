#!/usr/bin/env bash
# A multi-node job's steps that cannot commit, and what they leave
# (docs/multinode.md "Incomplete steps", "Bad input"; docs/retention.md):
# a job on two nodes (n0, n1: [daemon] nodes = 2), run "job", and nodes
# that misbehave (n1b: a second node configured as node 1; n1c: node 1 of
# 3; n1s: node 1 with its clock 10 minutes ahead, under faketime).
#   1. two nodes' .metadata differ: the merge is refused; each node that
#      tried writes its error into the regions (nodeerr/), and ls --remote
#      (text and --json) and the daemon's status --json show step 1000
#      with the nodes' last errors;
#   1b. node 1's region c is gone (its directory moved away): node 1's
#      error on its pending step 1500 is written into regions a and b, and
#      ls --remote shows it;
#   1c. node 1's unit of step 1600 holds a path longer than a manifest
#      may hold: the commit fails, and node 1's error on step 1600 is
#      written into every region and shown by ls --remote;
#   2. a part whose key says node 2 of 2: refused, naming it;
#   3. two nodes claiming node 1 (n1b on another host: its own UTS
#      namespace): refused, naming both snapshots and hosts (a node's own
#      retake of a step is not that: test-multinode-layout);
#   4. a node that says the job has 3 nodes: refused (node count changed
#      mid-step), naming the node;
#   5. a node whose clock runs ahead of the region's by more than
#      clock_skew: refused, naming the node;
#   nothing of steps 1000-5000 is committed anywhere;
#   6. step 6000 commits; step 7000 is incomplete: forget --keep-last 1
#      keeps 6000 as the newest committed step while 7000 is incomplete;
#   7. prune: a committed step's node errors go, its parts stay until it
#      is forgotten (then they go), an incomplete step's parts stay roots
#      until [daemon] part_expire, then prune removes them, their node
#      errors and the chunks only they named; the committed step restores
#      bit for bit and verify passes.
# regions: dir
. "$(dirname "$0")/lib.sh"
# libfaketime by LD_PRELOAD (not the faketime program, which forks: its
# pid would not be the daemon's), the threaded variant for the daemon
LIBFAKETIME=
for l in /usr/lib/*/faketime/libfaketimeMT.so.1 /usr/lib/faketime/libfaketimeMT.so.1; do
  [ -e "$l" ] && { LIBFAKETIME=$l; break; }
done
[ -n "$LIBFAKETIME" ] || skip "libfaketimeMT is not installed (deploy/deps.sh --test)"
write_config 16K 64K 256K
cat >> "$CONF" <<'EOF'
[prune]
clock_skew = 5s
grace = 0
EOF
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"

FAKE_ASAN="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}verify_asan_link_order=0"
t_real=$(date +%s)
t_fake=$(ASAN_OPTIONS="$FAKE_ASAN" LD_PRELOAD="$LIBFAKETIME" FAKETIME=+10m date +%s)
[ $((t_fake - t_real)) -ge 590 ] || skip "faketime does not shift the clock here"

inst n0 nodes=2 node_rank=0 settle=3600
inst n1 nodes=2 node_rank=1 settle=3600
inst n1b nodes=2 node_rank=1 settle=3600
inst n1c nodes=3 node_rank=1 settle=3600
inst n1s nodes=2 node_rank=1 settle=3600
inst x

# commit K STEP DIR: node K's daemon commits its DIR of the job (its part), replicated.
commit() {
  icks "$1" commit "$T/i-$1/watch/job/$3" --step "$2" --wait replicated --timeout 120 --json \
    > "$T/commit-$1.json" 2> "$T/commit-$1.err" ||
    { cat "$T/commit-$1.err" >&2; die "$1: commit job/$3 --wait replicated failed"; }
}
# commits STEP: how many commit records of step STEP each region holds ("a b c").
commits() {
  local r out=""
  for r in a b c; do out="$out $(rg_keys "$r" commits/ | grep -c "\.s$1\." || true)"; done
  echo "${out# }"
}
remote_ls() {
  rm -rf "$T/i-x/state"
  icks x ls --remote --run job --json > "$T/ls.json" || die "ls --remote --run job --json"
}
# step_errors STEP: the last errors ls --remote shows for STEP, "node: error" per line.
step_errors() {
  json "$T/ls.json" "'\\n'.join('%d: %s' % (e['node'], e['error']) for x in d if x.get('incomplete') and x['step'] == $1 for e in x.get('errors', []))"
}
# refused STEP TEXT: nothing of STEP committed, and ls --remote shows TEXT as a node's error.
refused() {
  [ "$(commits "$1")" = "0 0 0" ] || die "step $1 committed: $(commits "$1")"
  remote_ls
  step_errors "$1" > "$T/errors"
  grep -F -- "$2" "$T/errors" > /dev/null ||
    { cat "$T/errors" >&2; die "ls --remote: no node error of step $1 says: $2"; }
}

idaemon n0
idaemon n1

# ============================================================================
step "1. two nodes' .metadata differ: refused; the nodes' errors in the regions and in ls/status"
for k in 0 1; do make_file "$T/i-n$k/watch/job/checkpoint-1000/__${k}_0.distcp" 1; done
echo "node 0's" > "$T/i-n0/watch/job/checkpoint-1000/.metadata"
echo "node 1's" > "$T/i-n1/watch/job/checkpoint-1000/.metadata"
commit n0 1000 checkpoint-1000
commit n1 1000 checkpoint-1000
for r in a b c; do
  n=$(rg_keys "$r" nodeerr/ | grep -c '^nodeerr/job/s1000\.[01]-of-2\.' || true)
  [ "$n" -ge 1 ] || die "region $r: no node error of step 1000"
done
refused 1000 '"checkpoint-1000/.metadata" is held by node 0 and node 1 with different contents'
[ "$(json "$T/ls.json" "[x['missing'] for x in d if x.get('incomplete') and x['step'] == 1000]")" = "[[]]" ] ||
  die "ls --remote: step 1000's missing nodes: $(cat "$T/ls.json")"
rm -rf "$T/i-x/state"
icks x ls --remote --run job > "$T/ls.txt" || die "ls --remote (text)"
grep -E "node [01] \(.*\) last error at .*held by node 0 and node 1 with different contents" "$T/ls.txt" > /dev/null ||
  { cat "$T/ls.txt" >&2; die "ls --remote (text) does not show the nodes' last errors"; }
ok=
for _ in $(seq 1 200); do
  icks n0 status --json > "$T/st.json" || die "status --json on n0"
  if [ "$(json "$T/st.json" "[(x['step'], len(x['errors']) > 0) for x in d.get('incomplete', [])]")" = "[(1000, True)]" ]; then ok=1; break; fi
  sleep 0.1
done
[ -n "$ok" ] || { cat "$T/st.json" >&2; die "status --json on n0 does not show step 1000 incomplete with its errors"; }

# ============================================================================
step "1b. node 1 cannot upload to region c: its error on step 1500 is written into a and b"
mv "$T/regions/c" "$T/regions/c.away"   # (as an unmounted file system: the directory is gone)
make_file "$T/i-n1/watch/job/checkpoint-1500/__1_0.distcp" 1
icks n1 commit "$T/i-n1/watch/job/checkpoint-1500" --step 1500 --wait durable --timeout 120 \
  > /dev/null 2> "$T/commit.err" || { cat "$T/commit.err" >&2; die "n1: commit step 1500 --wait durable"; }
ok=
for _ in $(seq 1 300); do
  rm -rf "$T/i-x/state"
  rc=0; icks x ls --remote --run job --json > "$T/ls.json" 2> /dev/null || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 4 ] || die "ls --remote with region c gone: exit $rc"
  step_errors 1500 > "$T/errors"
  if grep -F "1: node 1 could not upload its part of step 1500 to region 'c'" "$T/errors" > /dev/null; then ok=1; break; fi
  sleep 0.1
done
[ -n "$ok" ] || { cat "$T/errors" >&2; die "ls --remote: no error of node 1 on step 1500 naming region c"; }
for r in a b; do
  n=$(rg_keys "$r" nodeerr/ | grep -c '^nodeerr/job/s1500\.1-of-2\.' || true)
  [ "$n" -ge 1 ] || die "region $r: node 1's error on step 1500 is not there"
done
mv "$T/regions/c.away" "$T/regions/c"
icks n1 retry c > /dev/null || die "n1: retry c"
icks n1 flush --wait replicated --deadline 120 > /dev/null 2>&1 || die "n1: flush --wait replicated after region c came back"

# ============================================================================
step "1c. node 1 cannot read its unit of step 1600 (a path too long): its error in every region"
make_file "$T/i-n0/watch/job/checkpoint-1600/__0_0.distcp" 1
commit n0 1600 checkpoint-1600
make_file "$T/i-n1/watch/job/checkpoint-1600/__1_0.distcp" 1
# a file whose path in the unit is longer than a manifest may hold (4096
# bytes): made one directory at a time, as a framework's nested state could be
python3 - "$T/i-n1/watch/job/checkpoint-1600" <<'PY'
import os, sys
os.chdir(sys.argv[1])
for i in range(30):
    n = ("d%02d" % i) * 50
    os.mkdir(n)
    os.chdir(n)
open("rng_state.pt", "w").write("x")
PY
rc=0
icks n1 commit "$T/i-n1/watch/job/checkpoint-1600" --step 1600 --wait durable --timeout 120 \
  > /dev/null 2> "$T/commit.err" || rc=$?
[ "$rc" != 0 ] || die "n1: the commit of a unit it cannot read succeeded"
ok=
for _ in $(seq 1 300); do
  remote_ls
  step_errors 1600 > "$T/errors"
  n=0
  for r in a b c; do rg_keys "$r" nodeerr/ | grep '^nodeerr/job/s1600\.1-of-2\.' > /dev/null && n=$((n + 1)); done
  if [ "$n" = 3 ] && grep -F "1: node 1 could not read its part of step 1600 (\"job/checkpoint-1600\")" "$T/errors" > /dev/null; then ok=1; break; fi
  sleep 0.1
done
[ -n "$ok" ] || { cat "$T/errors" "$T/commit.err" >&2; die "no error of node 1 on step 1600 saying it could not read its unit in every region and in ls --remote (in $n regions)"; }

# ============================================================================
step "2. a part whose key says node 2 of 2: refused, naming it"
for k in 0 1; do make_file "$T/i-n$k/watch/job/checkpoint-2000/__${k}_0.distcp" 1; done
commit n0 2000 checkpoint-2000
p0=$(rg_keys a parts/ | grep '^parts/job/s2000\.0-of-2\.' | sed -n 1p)
[ -n "$p0" ] || die "no part of node 0 for step 2000"
rg_get a "$p0" "$T/p0"
bad="parts/job/s2000.2-of-2.${p0#*-of-2.}"
for r in a b c; do rg_put "$r" "$T/p0" "$bad"; done
commit n1 2000 checkpoint-2000
refused 2000 "claims node 2 of 2: there is no such node"

# ============================================================================
step "3. two nodes claim node 1: refused, naming both"
# n1b runs on another host: its own UTS namespace, with another host name
# (unshare execs: the pid is the daemon's)
unshare --uts true 2> /dev/null || skip "cannot make a UTS namespace here (unshare --uts)"
unshare --uts sh -c 'hostname impostor-host && exec "$0" --config "$1"' "$CKPTSYNCD" "$T/i-n1b.conf" \
  >> "$T/i-n1b/daemon.log" 2>&1 &
IPID[n1b]=$!
for _ in $(seq 1 100); do daemon_answers icks n1b && break; sleep 0.1; done
daemon_answers icks n1b || { tail -20 "$T/i-n1b/daemon.log" >&2; die "n1b did not answer"; }
for k in n0 n1 n1b; do make_file "$T/i-$k/watch/job/checkpoint-3000/__$k.distcp" 1; done
commit n1 3000 checkpoint-3000
commit n1b 3000 checkpoint-3000
commit n0 3000 checkpoint-3000
refused 3000 "two nodes claim node 1 of step 3000: snapshot "
grep -F "(host impostor-host)" "$T/errors" > /dev/null ||
  { cat "$T/errors" >&2; die "step 3000: the error does not name the other host"; }
istop n1b

# ============================================================================
step "4. a node that says the job has 3 nodes: refused (the node count changed mid-step)"
idaemon n1c
for k in n0 n1c; do make_file "$T/i-$k/watch/job/checkpoint-4000/__$k.distcp" 1; done
commit n1c 4000 checkpoint-4000
commit n0 4000 checkpoint-4000
refused 4000 "node 1's part of step 4000"
grep -F "says the job has 3 nodes, node 0 says 2" "$T/errors" > /dev/null ||
  { cat "$T/errors" >&2; die "step 4000: the error does not name both node counts"; }
istop n1c

# ============================================================================
step "5. node 1's clock 10 minutes ahead of the region's: refused, naming node 1"
ASAN_OPTIONS="$FAKE_ASAN" NO_FAKE_STAT=1 LD_PRELOAD="$LIBFAKETIME" FAKETIME=+10m \
  "$CKPTSYNCD" --config "$T/i-n1s.conf" >> "$T/i-n1s/daemon.log" 2>&1 &
IPID[n1s]=$!
for _ in $(seq 1 100); do daemon_answers icks n1s && break; sleep 0.1; done
daemon_answers icks n1s || { tail -20 "$T/i-n1s/daemon.log" >&2; die "n1s did not answer"; }
for k in n0 n1s; do make_file "$T/i-$k/watch/job/checkpoint-5000/__$k.distcp" 1; done
commit n1s 5000 checkpoint-5000
commit n0 5000 checkpoint-5000
refused 5000 "node 1's part of step 5000"
grep -F "clock_skew (5 s): node 1's clock is wrong" "$T/errors" > /dev/null ||
  { cat "$T/errors" >&2; die "step 5000: the error does not say node 1's clock is ahead"; }
istop n1s

for s in 1000 2000 3000 4000 5000; do
  [ "$(commits $s)" = "0 0 0" ] || die "step $s committed: $(commits $s)"
done
[ "$(rg_keys a snapshots/ | wc -l)" = 0 ] || die "a snapshot of run job was published: $(rg_keys a snapshots/)"

# ============================================================================
step "6. step 6000 commits, 7000 is incomplete: retention keeps 6000"
for k in 0 1; do make_file "$T/i-n$k/watch/job/checkpoint-6000/__${k}_0.distcp" 1; done
commit n0 6000 checkpoint-6000
commit n1 6000 checkpoint-6000
[ "$(commits 6000)" = "1 1 1" ] || die "step 6000 not committed once per region: $(commits 6000)"
make_file "$T/i-n0/watch/job/checkpoint-7000/__0_0.distcp" 1
commit n0 7000 checkpoint-7000
cks forget --run job --keep-last 1 --dry-run --json > "$T/forget.json" || die "forget --dry-run"
why=$(json "$T/forget.json" "[s['why'] for r in (d['runs'] if isinstance(d, dict) else d) for s in r['snapshots'] if s['step'] == 6000]")
case $why in
  *"the newest committed step while step 7000 is incomplete"*) ;;
  *) cat "$T/forget.json" >&2; die "forget --keep-last 1: step 6000 kept because $why" ;;
esac

# ============================================================================
step "7. prune: node errors of a committed step go; parts of incomplete steps stay until part_expire"
for k in 0 1; do istop "n$k"; done
# step 6000's errors: none were written (it committed); plant one as
# node 0 would have written it before a retry succeeded
now=$(date +%s)
e6="nodeerr/job/s6000.0-of-2.$(date -u -d "@$now" +%Y%m%dT%H%M%SZ).0123456789abcdef"
printf 'ckptsync-nodeerr 1\nnode 0 2\nstep 6000\ntime %s\nhost h\nerror region a did not answer\n' \
  "$now" > "$T/e6"
mkdir -p "$T/regions/a/nodeerr/job"
rg_put a "$T/e6" "$e6"
cks prune --grace 0 --json > "$T/prune.json" 2> "$T/prune.err" || { cat "$T/prune.err" >&2; die "prune"; }
rg_has a "$e6" && die "prune kept step 6000's node error ($e6) after the step committed"
n=$(rg_keys a parts/ | grep -c '^parts/job/s6000\.' || true)
[ "$n" = 2 ] || die "region a: $n parts of the committed step 6000 after prune, expected 2 (kept until forgotten)"
n=$(rg_keys a parts/ | grep -c '^parts/job/s7000\.' || true)
[ "$n" = 1 ] || die "region a: step 7000's part deleted while it is a root"
# every chunk a part names is still in every region (node 1's failed reads
# of step 1600 left chunks no part names: those may go)
part_chunks_present() {
  python3 - "$T/regions" <<'PY'
import os, sys
root = sys.argv[1]
missing = []
for r in "abc":
    for dp, _, fs in os.walk(os.path.join(root, r, "parts")):
        for f in fs:
            for line in open(os.path.join(dp, f), errors="replace"):
                if line.startswith("c ") and len(line.split()) == 3:
                    c = line.split()[1]
                    if not os.path.exists(os.path.join(root, r, "chunks", c[:2], c)):
                        missing.append("%s: %s (%s)" % (r, c, f))
print("\n".join(missing[:5]))
PY
}
m=$(part_chunks_present)
[ -z "$m" ] || die "prune deleted chunks that parts of incomplete steps name: $m"

# part_expire: a prune whose configuration expires parts after 1 s
sed -e '/^\[daemon\]/a part_expire = 1s' "$CONF" > "$T/expire.conf"
sleep 2
"$CKPTSYNC" --config "$T/expire.conf" prune --grace 0 --json > "$T/prune.json" 2> "$T/prune.err" ||
  { cat "$T/prune.err" >&2; die "prune with part_expire = 1s"; }
# (node 1's part of step 5000 is stamped 10 minutes ahead: it expires
# 10 minutes later than the others)
for r in a b c; do
  left=$(rg_keys "$r" parts/ | grep -v -e '^parts/job/s6000\.' -e '^parts/job/s5000\.1-of-2\.' || true)
  [ -z "$left" ] || die "region $r: parts of uncommitted steps left after they expired: $left"
  left=$(rg_keys "$r" nodeerr/ || true)
  [ -z "$left" ] || die "region $r: node errors left after they expired: $left"
done
[ "$(json "$T/prune.json" 'sum(r["deleted"] for r in d["regions"])')" -gt 0 ] ||
  die "prune deleted no chunk of the expired parts: $(cat "$T/prune.json")"
mkdir -p "$T/want6000"
for k in 0 1; do cp -a "$T/i-n$k/watch/job/checkpoint-6000/." "$T/want6000/"; done
rm -rf "$T/i-x/state" "$T/got"
icks x restore --run job --latest --to "$T/got" --json > "$T/latest.json" || die "restore --latest"
[ "$(json "$T/latest.json" 'd["step"]')" = 6000 ] || die "restore --latest: step $(json "$T/latest.json" 'd["step"]')"
diff <(tree_sums "$T/want6000") <(tree_sums "$T/got/checkpoint-6000") > "$T/diff" ||
  { cat "$T/diff" >&2; die "restored step 6000 differs from the two nodes' files"; }
cks verify -q > "$T/verify.out" 2>&1 || { cat "$T/verify.out" >&2; die "verify"; }

# forgetting step 6000 (after a step 8000 commits): its parts go with it
idaemon n0
idaemon n1
for k in 0 1; do make_file "$T/i-n$k/watch/job/checkpoint-8000/__${k}_0.distcp" 1; done
commit n0 8000 checkpoint-8000
commit n1 8000 checkpoint-8000
[ "$(commits 8000)" = "1 1 1" ] || die "step 8000 not committed: $(commits 8000)"
cks forget --run job --keep-last 1 --json > "$T/forget.json" || die "forget --keep-last 1"
cks prune --grace 0 --json > "$T/prune.json" 2> "$T/prune.err" || { cat "$T/prune.err" >&2; die "prune"; }
for r in a b c; do
  n=$(rg_keys "$r" parts/ | grep -c '^parts/job/s6000\.' || true)
  [ "$n" = 0 ] || die "region $r: $n parts of the forgotten step 6000 left after prune"
done
[ "$(json "$T/prune.json" 'sum(r["parts_deleted"] for r in d["regions"])')" -ge 6 ] ||
  die "prune --json counts $(json "$T/prune.json" 'sum(r["parts_deleted"] for r in d["regions"])') parts deleted, expected 6"

for k in 0 1; do istop "n$k"; done
if grep -E 'AddressSanitizer|LeakSanitizer|runtime error' "$T"/i-n*/daemon.log > "$T/san.txt"; then
  cat "$T/san.txt" >&2; die "a daemon reported a sanitizer error"
fi
echo "ok"
