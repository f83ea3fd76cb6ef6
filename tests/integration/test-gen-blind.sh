#!/usr/bin/env bash
# A generation is never decided blind (issue 22, item 2).  X snapshots
# step 100 of run r; Y migrates in (generation 1); a fresh daemon Z takes
# checkpoint-300 while no region answers (dir: the region directories are
# gone, as an unmounted share; s3: the servers are stopped).  Z must not
# guess generation 0: the snapshot waits, queued, until a region can be
# listed, and is then published at Y's generation, so that `ls --remote`,
# `restore --latest` and `migrate-in` resume from step 300, not 100.
#   1. Z keeps running while the regions are away;
#   2. W is killed -9 while they are away and restarted after they are back.
# regions: dir s3
# encrypted: yes
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"

# ck NAME STEP: checkpoint-STEP of run r in instance NAME's watch dir.
ck() {
  make_file "$T/i-$1/watch/r/checkpoint-$2/model.bin" 1
  echo "step $2 by $1" > "$T/i-$1/watch/r/checkpoint-$2/trainer_state.txt"
}
regions_away() {
  local r
  for r in a b c; do
    if [ "$RK" = s3 ]; then stop_s3 "$r"; else mv "$T/regions/$r" "$T/regions/$r.away"; fi
  done
}
regions_back() {
  local r
  for r in a b c; do
    if [ "$RK" = s3 ]; then restart_s3 "$r"; else mv "$T/regions/$r.away" "$T/regions/$r"; fi
  done
}
# taken NAME STEP: the daemon of NAME has ingested (queued) checkpoint-STEP.
taken() { grep -q "event=snapshot run=r .*unit=r/checkpoint-$2 " "$T/i-$1/daemon.log"; }
# snap_id NAME STEP: the id of the snapshot the daemon of NAME took of checkpoint-STEP.
snap_id() {
  grep -o "event=snapshot run=r snapshot=[^ ]* unit=r/checkpoint-$2 " "$T/i-$1/daemon.log" |
    sed 's/.*snapshot=\([^ ]*\) .*/\1/' | tail -1
}
# check_latest STEP ID: ls --remote and restore --latest (fresh state) take
# ID, step STEP, at a generation newer than 0.
check_latest() {
  rm -rf "$T/i-x/state"
  icks x ls --remote --run r --json > "$T/ls.json" || die "ls --remote --run r"
  local gen resume
  gen=$(json "$T/ls.json" "[x['generation'] for x in d if x['id'] == '$2']")
  resume=$(json "$T/ls.json" "','.join(str(x['step']) for x in d if x['resume'])")
  [ "$gen" != "[]" ] || { cat "$T/ls.json" >&2; die "step $1 ($2) is not listed"; }
  [ "$gen" = "[1]" ] || { cat "$T/ls.json" >&2; die "step $1 is listed at generation $gen, not Y's 1"; }
  [ "$resume" = "$1" ] || { cat "$T/ls.json" >&2; die "the resume point is step $resume, not $1"; }
  rm -rf "$T/i-x/state" "$T/lat"
  icks x restore --run r --latest --to "$T/lat" --json > "$T/lat.json" 2> "$T/lat.err" ||
    { cat "$T/lat.err" >&2; die "restore --latest"; }
  [ "$(json "$T/lat.json" 'd["id"]')" = "$2" ] ||
    die "restore --latest gives $(json "$T/lat.json" 'd["root"]'), not checkpoint-$1"
}

inst x; inst y; inst z; inst w

step "X snapshots step 100; Y migrates in: generation 1"
ck x 100
icks x snapshot "$T/i-x/watch/r/checkpoint-100" --run r --step 100 -q || die "X: snapshot"
icks y migrate-in --run r --to "$T/i-y/watch/r" --json > "$T/mi.json" || die "Y: migrate-in"
[ "$(json "$T/mi.json" 'd["generation"]')" = 1 ] || die "Y: generation is not 1"

step "1. a fresh daemon Z takes checkpoint-300 while no region answers"
idaemon z
regions_away
ck z 300
icks z commit "$T/i-z/watch/r/checkpoint-300" --step 300 -q || die "Z: commit"
wait_for 60 taken z 300 || { tail -20 "$T/i-z/daemon.log" >&2; die "Z did not take checkpoint-300"; }
regions_back
# the next snapshot decides (ingest lists the regions), or a region worker
# does first: either way checkpoint-300 goes out at the decided generation
ck z 350
icks z commit "$T/i-z/watch/r/checkpoint-350" --step 350 -q || die "Z: commit 350"
for r in a b c; do icks z retry "$r" -q; done
icks z flush --wait replicated --deadline 90 -q || { tail -20 "$T/i-z/daemon.log" >&2; die "Z: flush"; }
id300=$(snap_id z 300)
check_latest 350 "$(snap_id z 350)"
[ "$(json "$T/ls.json" "[x['generation'] for x in d if x['id'] == '$id300']")" = "[1]" ] ||
  { cat "$T/ls.json" >&2; die "step 300 is not listed at generation 1"; }
grep -q "generation.*undecided\|undecided.*generation" "$T/i-z/daemon.log" ||
  { tail -20 "$T/i-z/daemon.log" >&2; die "Z does not say the generation of r waits for a region"; }
istop z

step "2. W takes checkpoint-400 while no region answers, is killed -9, restarts once they are back"
idaemon w
regions_away
ck w 400
icks w commit "$T/i-w/watch/r/checkpoint-400" --step 400 -q || die "W: commit"
wait_for 60 taken w 400 || { tail -20 "$T/i-w/daemon.log" >&2; die "W did not take checkpoint-400"; }
ikill w
regions_back
idaemon w
icks w flush --wait replicated --deadline 90 -q || { tail -20 "$T/i-w/daemon.log" >&2; die "W: flush"; }
check_latest 400 "$(snap_id w 400)"
same_tree "$T/i-w/watch/r/checkpoint-400" "$T/lat/checkpoint-400"
istop w

if [ "$RK" = dir ] && [ "${CKS_TEST_ENCRYPT:-0}" != 1 ]; then   # plain key names
  step "3. the CLI: no region can list the run (snapshots/ loops): snapshot fails, naming each region"
  inst v
  ck v 500
  for r in a b c; do mv "$T/regions/$r/snapshots" "$T/regions/$r/snapshots.away"; ln -s snapshots "$T/regions/$r/snapshots"; done
  expect_fail 1 icks v snapshot "$T/i-v/watch/r/checkpoint-500" --run r --step 500
  for r in a b c; do
    grep -q "region '$r': listing \"$T/regions/$r/snapshots/r/\"" "$T/err" ||
      { cat "$T/err" >&2; die "the error does not name region $r"; }
  done
  grep -q "generation of run 'r' cannot be decided" "$T/err" || { cat "$T/err" >&2; die "the error does not say why"; }
  for r in a b c; do rm "$T/regions/$r/snapshots"; mv "$T/regions/$r/snapshots.away" "$T/regions/$r/snapshots"; done
  icks v snapshot "$T/i-v/watch/r/checkpoint-500" --run r --step 500 --json > "$T/v.json" || die "V: snapshot"
  check_latest 500 "$(json "$T/v.json" 'd["id"]')"
fi
echo "gen-blind: ok"
