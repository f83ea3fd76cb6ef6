#!/usr/bin/env bash
# Lineage across instances: who resumes from what when instances hand a
# run off, die, come back, or keep uploading after someone else adopted
# the run.  Each instance has its own state and watch dirs (multilib.sh);
# the regions are shared.
#   1. a stale handoff (generation 0) is outranked by what the adopter
#      committed after it (generation 1), even when the adopter died
#      without a migrate-out;
#   2. the old owner keeps uploading after the handoff: its late snapshots
#      stay at generation 0, are listed and restorable, never the resume point;
#   3. an instance presumed dead (no handoff) wakes up on its old state and
#      writes at its old generation: the adopter's work stays the resume point;
#   4. with commits/ and refs/ lost in every region, the resume points are
#      found again from the manifests (version 2 carries the generation).
# regions: dir ceph
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"

# ---- helpers ---------------------------------------------------------------
# ck NAME RUN STEP: a checkpoint dir (2 MiB model + a small state file) in
# instance NAME's watch dir.
ck() {
  local d="$T/i-$1/watch/$2/checkpoint-$3"
  make_file "$d/model.bin" 2
  echo "step $3 of $2 by $1" > "$d/trainer_state.txt"
}
# commit NAME RUN STEP: the daemon of NAME commits it, replicated to every region.
commit() {
  icks "$1" commit "$T/i-$1/watch/$2/checkpoint-$3" --step "$3" --wait replicated --timeout 120 --json \
    > "$T/commit.json" || die "$1: commit $2/checkpoint-$3 --wait replicated failed"
  [ "$(json "$T/commit.json" 'd["regions_committed"]')" = 3 ] || die "$1: $2/checkpoint-$3 not in 3 regions"
  json "$T/commit.json" 'd["id"]'
}
# remote_ls RUN: ls --remote --run RUN --json (fresh state) into $T/ls-RUN.json.
remote_ls() {
  rm -rf "$T/i-x/state"
  icks x ls --remote --run "$1" --json > "$T/ls-$1.json" || die "ls --remote --run $1"
}
# ls_field RUN ID FIELD: a field of snapshot ID in $T/ls-RUN.json.
ls_field() { json "$T/ls-$1.json" "[x['$3'] for x in d if x['id'] == '$2']"; }
# resume_of RUN: the id ls --remote marks as the resume point.
resume_of() { json "$T/ls-$1.json" "','.join(x['id'] for x in d if x['resume'])"; }
# latest RUN DIR: restore --latest on a fresh state into DIR; prints the id.
latest() {
  rm -rf "$T/i-x/state" "$2"
  icks x restore --run "$1" --latest --to "$2" --json > "$T/latest.json" 2> "$T/latest.err" ||
    { cat "$T/latest.err" >&2; die "restore --run $1 --latest on a fresh state"; }
  json "$T/latest.json" 'd["id"]'
}
verify_all() { cks verify -q > "$T/verify.out" 2>&1 || { cat "$T/verify.out" >&2; die "verify after $1"; }; }

inst x   # restores, listings: always on a fresh state

# ============================================================================
step "1. a stale handoff: O hands off step 100, N adopts, commits 200 and 300, dies; M resumes from 300"
inst o1; inst n1; inst m1
idaemon o1
ck o1 r1 100
id100=$(commit o1 r1 100)
icks o1 migrate-out --run r1 --deadline 60 --json > "$T/mo1.json" || die "migrate-out of O"
[ "$(json "$T/mo1.json" 'd["runs"][0]["handoff"]')" = "$id100" ] || die "the handoff does not name step 100"
[ "$(json "$T/mo1.json" 'd["runs"][0]["handoff_regions"]')" = 3 ] || die "handoff not in 3 regions"
for r in a b c; do
  rg_keys "$r" lineage/r1/ | grep -x "lineage/r1/g0\.handoff\.s100\.$id100" > /dev/null ||
    die "region $r: no handoff record g0.handoff.s100.$id100"
done
istop o1

icks n1 migrate-in --run r1 --to "$T/i-n1/watch/r1" --json > "$T/mi-n1.json" 2> "$T/mi-n1.err" ||
  { cat "$T/mi-n1.err" >&2; die "migrate-in of N"; }
[ "$(json "$T/mi-n1.json" 'd["id"]')" = "$id100" ] || die "N did not get the handed-off snapshot"
[ "$(json "$T/mi-n1.json" 'd["root"]')" = checkpoint-100 ] || die "N: root"
[ "$(json "$T/mi-n1.json" 'd["step"]')" = 100 ] || die "N: step"
[ "$(json "$T/mi-n1.json" 'd["handoff"]')" = True ] || die "N: not reported as the handed-off snapshot"
[ "$(json "$T/mi-n1.json" 'd["generation"]')" = 1 ] || die "N: generation is not 1"
same_tree "$T/i-o1/watch/r1/checkpoint-100" "$T/i-n1/watch/r1/checkpoint-100"
rg_keys a lineage/r1/ | grep '^lineage/r1/g1\.claim\.[0-9a-f]\{16\}$' > /dev/null || die "no claim of generation 1"

idaemon n1
ck n1 r1 200
id200=$(commit n1 r1 200)
ck n1 r1 300
id300=$(commit n1 r1 300)
ikill n1   # no migrate-out

out=$(icks m1 migrate-in --run r1 --to "$T/i-m1/watch/r1" 2> "$T/mi-m1.err") ||
  { cat "$T/mi-m1.err" >&2; die "migrate-in of M"; }
[ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || die "migrate-in printed more than one line: $out"
[ "$out" = "$T/i-m1/watch/r1/checkpoint-300" ] ||
  { cat "$T/mi-m1.err" >&2; die "M resumes from '$out', not checkpoint-300 (the stale handoff won?)"; }
same_tree "$T/i-n1/watch/r1/checkpoint-300" "$T/i-m1/watch/r1/checkpoint-300"
[ ! -e "$T/i-m1/watch/r1/checkpoint-100" ] || die "M restored the stale checkpoint-100 too"
rg_keys a lineage/r1/ | grep '^lineage/r1/g2\.claim\.[0-9a-f]\{16\}$' > /dev/null || die "M did not claim generation 2"
remote_ls r1
[ "$(resume_of r1)" = "$id300" ] || die "ls --remote: resume point of r1 is $(resume_of r1), not step 300"
[ "$(ls_field r1 "$id100" generation)" = "[0]" ] || die "step 100 is not generation 0"
[ "$(ls_field r1 "$id300" generation)" = "[1]" ] || die "step 300 is not generation 1"
[ "$(latest r1 "$T/lat/r1")" = "$id300" ] || die "restore --latest of r1 does not take step 300"
verify_all "part 1"

# ============================================================================
step "2. the old owner keeps uploading after its handoff (12, 20, 30 at gen 0): N' resumes from 10, then wins with 25"
inst o2; inst n2
idaemon o2
ck o2 r2 10
id10=$(commit o2 r2 10)
icks o2 migrate-out --run r2 --deadline 60 -q || die "migrate-out of O'"
# O' is not stopped, and uploads step 12 before N' migrates in: the
# handoff, not O''s newest, is what N' resumes from.
ck o2 r2 12;  id12=$(commit o2 r2 12)
path=$(icks n2 migrate-in --run r2 --to "$T/i-n2/watch/r2" 2> "$T/mi-n2.err") ||
  { cat "$T/mi-n2.err" >&2; die "migrate-in of N'"; }
[ "$path" = "$T/i-n2/watch/r2/checkpoint-10" ] ||
  { cat "$T/mi-n2.err" >&2; die "N' resumes from '$path', not the handed-off checkpoint-10"; }
grep -q "handed-off snapshot $id10" "$T/mi-n2.err" || { cat "$T/mi-n2.err" >&2; die "N' does not say it took the handoff"; }
idaemon n2
ck n2 r2 15;  id15=$(commit n2 r2 15)
ck o2 r2 20;  id20=$(commit o2 r2 20)
ck n2 r2 25;  id25=$(commit n2 r2 25)
ck o2 r2 30;  id30=$(commit o2 r2 30)

remote_ls r2
for id in "$id10" "$id12" "$id20" "$id30"; do
  [ "$(ls_field r2 "$id" generation)" = "[0]" ] || die "ls --remote: $id of O' is not listed at generation 0"
done
for id in "$id15" "$id25"; do
  [ "$(ls_field r2 "$id" generation)" = "[1]" ] || die "ls --remote: $id of N' is not listed at generation 1"
done
[ "$(ls_field r2 "$id30" step)" = "[30]" ] || die "ls --remote: step 30 not listed"
[ "$(resume_of r2)" = "$id25" ] || die "ls --remote: resume point of r2 is $(resume_of r2), not N's step 25"
[ "$(latest r2 "$T/lat/r2")" = "$id25" ] ||
  { cat "$T/latest.err" >&2; die "restore --latest of r2 takes $(json "$T/latest.json" 'd["root"]'), not checkpoint-25"; }
same_tree "$T/i-n2/watch/r2/checkpoint-25" "$T/lat/r2/checkpoint-25"
for s in 20 30; do
  id=$(json "$T/ls-r2.json" "[x['id'] for x in d if x['step'] == $s][0]")
  fresh_restore x r2 "$id" "$T/snap/r2-$s"
  same_tree "$T/i-o2/watch/r2/checkpoint-$s" "$T/snap/r2-$s/checkpoint-$s"
done
rm -rf "$T/i-x/state"
icks x migrate-in --run r2 --to "$T/mi/r2" --json > "$T/mi-x2.json" || die "a later migrate-in of r2"
[ "$(json "$T/mi-x2.json" 'd["id"]')" = "$id25" ] || die "a later migrate-in of r2 took $(json "$T/mi-x2.json" 'd["root"]')"
[ "$(json "$T/mi-x2.json" 'd["handoff"]')" = False ] || die "the later migrate-in says it took a handoff"
[ "$(json "$T/mi-x2.json" 'd["generation"]')" = 2 ] || die "the later migrate-in: generation"
# claimed, nothing committed since: the claim's base is still the resume point
[ "$(latest r2 "$T/lat/r2b")" = "$id25" ] || die "after a claim of gen 2, restore --latest moved off step 25"
istop o2; istop n2
verify_all "part 2"

# ============================================================================
step "3. an instance presumed dead comes back: its step 99 (gen 0) never outranks the adopter's step 6"
inst o3; inst n3
idaemon o3
ck o3 r3 5
id5=$(commit o3 r3 5)
istop o3   # "dies": no migrate-out, its state stays
icks n3 migrate-in --run r3 --to "$T/i-n3/watch/r3" --json > "$T/mi-n3.json" || die "migrate-in of N''"
[ "$(json "$T/mi-n3.json" 'd["id"]')" = "$id5" ] || die "N'' did not resume from step 5"
[ "$(json "$T/mi-n3.json" 'd["handoff"]')" = False ] || die "N'': there was no handoff"
[ "$(json "$T/mi-n3.json" 'd["generation"]')" = 1 ] || die "N'': generation"
idaemon n3
ck n3 r3 6
id6=$(commit n3 r3 6)
idaemon o3   # wakes up on its old state
ck o3 r3 99
id99=$(commit o3 r3 99)
remote_ls r3
[ "$(ls_field r3 "$id99" generation)" = "[0]" ] || die "O''s step 99 is not at generation 0 (its index should remember)"
[ "$(ls_field r3 "$id6" generation)" = "[1]" ] || die "N''s step 6 is not at generation 1"
[ "$(resume_of r3)" = "$id6" ] || die "ls --remote: resume point of r3 is $(resume_of r3), not step 6"
[ "$(latest r3 "$T/lat/r3")" = "$id6" ] || die "restore --latest of r3 does not take step 6"
same_tree "$T/i-n3/watch/r3/checkpoint-6" "$T/lat/r3/checkpoint-6"
fresh_restore x r3 "$id99" "$T/snap/r3-99"
same_tree "$T/i-o3/watch/r3/checkpoint-99" "$T/snap/r3-99/checkpoint-99"
istop o3; istop n3
verify_all "part 3"

# ============================================================================
step "4. commits/ and refs/ lost in every region: resume points come from the manifests"
for run in r1 r2 r3; do remote_ls "$run"; cp "$T/ls-$run.json" "$T/before-$run.json"; done
for r in a b c; do
  rg_rmtree "$r" commits/
  rg_rmtree "$r" refs/
  [ -z "$(rg_keys "$r" commits/)" ] || die "region $r: commits/ not removed"
done
for run in r1 r2 r3; do
  remote_ls "$run"
  python3 - "$T/before-$run.json" "$T/ls-$run.json" <<'PY' || die "ls --remote --run $run changed after commits/ was lost"
import json, sys
key = lambda x: (x["id"], x["step"], x["generation"], x["regions"], x["resume"])
a, b = (sorted(map(key, json.load(open(f)))) for f in sys.argv[1:3])
if a != b:
    print("before:", a, "\nafter: ", b, file=sys.stderr)
    sys.exit(1)
PY
done
[ "$(latest r1 "$T/lat4/r1")" = "$id300" ] || die "without commits/: restore --latest of r1 is not step 300"
[ "$(latest r2 "$T/lat4/r2")" = "$id25" ] || die "without commits/: restore --latest of r2 is not step 25"
[ "$(latest r3 "$T/lat4/r3")" = "$id6" ] || die "without commits/: restore --latest of r3 is not step 6"
same_tree "$T/i-n3/watch/r3/checkpoint-6" "$T/lat4/r3/checkpoint-6"
rm -rf "$T/i-x/state"
icks x migrate-in --run r3 --to "$T/mi4/r3" --json > "$T/mi4.json" || die "migrate-in of r3 without commits/"
[ "$(json "$T/mi4.json" 'd["id"]')" = "$id6" ] || die "without commits/: migrate-in of r3 took $(json "$T/mi4.json" 'd["root"]')"
[ "$(json "$T/mi4.json" 'd["generation"]')" = 2 ] || die "without commits/: migrate-in of r3: generation"
same_tree "$T/i-n3/watch/r3/checkpoint-6" "$T/mi4/r3/checkpoint-6"
rm -rf "$T/i-x/state"
icks x migrate-in --run r1 --to "$T/mi4/r1" --json > "$T/mi4.json" || die "migrate-in of r1 without commits/"
[ "$(json "$T/mi4.json" 'd["id"]')" = "$id300" ] || die "without commits/: migrate-in of r1 took $(json "$T/mi4.json" 'd["root"]')"
[ "$(json "$T/mi4.json" 'd["generation"]')" = 3 ] || die "without commits/: migrate-in of r1: generation"
verify_all "part 4"

# ============================================================================
step "5. files outside checkpoints follow the lineage too: a stale instance's late config loses"
inst o5; inst n5
idaemon o5
ck o5 r5 5
echo "o5 g0" > "$T/i-o5/watch/r5/config.json"
commit o5 r5 5 > /dev/null
icks o5 commit "$T/i-o5/watch/r5/config.json" --wait replicated --timeout 120 -q || die "o5: commit config.json"
istop o5
icks n5 migrate-in --run r5 --to "$T/i-n5/watch/r5" > /dev/null || die "n5: migrate-in r5"
[ "$(cat "$T/i-n5/watch/r5/config.json")" = "o5 g0" ] || die "migrate-in did not bring the run's config.json"
idaemon n5
ck n5 r5 6
echo "n5 g1" > "$T/i-n5/watch/r5/config.json"
commit n5 r5 6 > /dev/null
icks n5 commit "$T/i-n5/watch/r5/config.json" --wait replicated --timeout 120 -q || die "n5: commit config.json"
idaemon o5   # the abandoned instance wakes up and writes its config again, later
echo "o5 late g0" > "$T/i-o5/watch/r5/config.json"
icks o5 commit "$T/i-o5/watch/r5/config.json" --wait replicated --timeout 120 -q || die "o5: late config.json"
rm -rf "$T/lat5"
latest r5 "$T/lat5" > /dev/null
[ -d "$T/lat5/checkpoint-6" ] || { ls "$T/lat5"; die "restore --latest of r5 is not checkpoint-6"; }
[ "$(cat "$T/lat5/config.json")" = "n5 g1" ] ||
  die "restore --latest took config.json '$(cat "$T/lat5/config.json")', not the adopter's 'n5 g1'"
istop o5; istop n5
verify_all "part 5"
echo "multi-lineage: ok"
