#!/usr/bin/env bash
# A commit is answered by the regions, not by a stale local record
# (service/snapheld.h):
#   1. instance A's daemon commits checkpoint-10, then checkpoint-20
#      (durable);
#   2. instance B (its own state directory, the same regions) forgets
#      checkpoint-10 (keep-last 1) and prunes it: its manifest is gone from
#      every region, and the chunks only it used;
#   3. on A, `ckptsync commit` of the unchanged checkpoint-10 takes it
#      again: a new snapshot, durable, listed by the regions, restoring bit
#      for bit on B; the forgotten id is not answered;
#   4. a commit of the unchanged unit after that is answered from the new
#      snapshot (still held): no third snapshot;
#   5. A forgets that snapshot itself: its index drops the record and its
#      references (ls no longer lists it, fsck finds the counts exact), and
#      after A's prune a commit stores checkpoint-10 again.
# On main step 3 answered the forgotten id as durable from A's index, and
# step 5's ls still listed the forgotten snapshot.
# regions: dir s3
# encrypted: yes
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
set_settle 1
start_daemon
A_CONF=$CONF
second_instance # B: $T/b.conf, `b`
unit="$T/watch/r1/checkpoint-10"

# commit_ok UNIT OUT: commit --wait durable --json into OUT
commit_ok() {
  cks commit "$1" --wait durable --timeout 30 --json > "$2" 2> "$T/c.err" ||
    { cat "$T/c.err" >&2; die "commit of $1 failed"; }
}

step "A: checkpoint-10 and checkpoint-20 committed, durable"
make_file "$unit/model.safetensors" 2
echo '{"global_step": 10}' > "$unit/trainer_state.json"
commit_ok "$unit" "$T/c10.json"
id10=$(json "$T/c10.json" 'd["id"]')
make_file "$T/watch/r1/checkpoint-20/model.safetensors" 1
echo '{"global_step": 20}' > "$T/watch/r1/checkpoint-20/trainer_state.json"
commit_ok "$T/watch/r1/checkpoint-20" "$T/c20.json"
cks flush --wait replicated --deadline 30 || die "flush on A failed"

step "B: forgets and prunes checkpoint-10 ($id10)"
b forget --run r1 --keep-last 1 --json > "$T/f.json"
[ "$(json "$T/f.json" 'd["forgotten"]')" = 1 ] || { cat "$T/f.json"; die "B did not forget one snapshot"; }
b prune --grace 0 --json > "$T/p.json" 2> "$T/p.err" || { cat "$T/p.err"; die "B's prune failed"; }
if [ "${CKS_REGIONS:-dir}" = dir ] && [ "${CKS_TEST_ENCRYPT:-0}" != 1 ]; then # plain names
  for r in a b c; do
    [ ! -e "$T/regions/$r/snapshots/r1/$id10" ] || die "the manifest of $id10 is still in region $r"
  done
fi
[ "$(json "$T/p.json" 'sum(g["deleted"] for g in d["regions"])')" -gt 0 ] ||
  { cat "$T/p.json"; die "B's prune deleted no chunk (checkpoint-10's are unused now)"; }
b ls --remote --run r1 --json > "$T/ls.json"
[ "$(json "$T/ls.json" "[s['step'] for s in d]")" = "[20]" ] ||
  { cat "$T/ls.json"; die "the regions still list more than checkpoint-20"; }

step "A: commit of the unchanged checkpoint-10 stores it again"
commit_ok "$unit" "$T/again.json"
id=$(json "$T/again.json" 'd["id"]')
[ "$id" != "$id10" ] || { cat "$T/again.json"; die "commit answered the forgotten snapshot $id10"; }
[ "$(json "$T/again.json" 'd["durable"]')" = True ] || { cat "$T/again.json"; die "not durable"; }
b ls --remote --run r1 --json > "$T/ls.json"
[ "$(json "$T/ls.json" "sorted((s['id'], s['step'], s['durable']) for s in d if s['step'] == 10)")" = \
  "[('$id', 10, True)]" ] || { cat "$T/ls.json"; die "the regions do not list the new snapshot $id"; }
b restore --run r1 --snapshot "$id" --to "$T/out" > /dev/null 2> "$T/r.err" ||
  { cat "$T/r.err"; die "restore of $id on B failed"; }
same_tree "$unit" "$T/out/checkpoint-10"
grep -q "its last snapshot $id10 of run 'r1' is no longer in region" "$T/daemon.log" ||
  { tail -20 "$T/daemon.log"; die "the daemon did not say why it took checkpoint-10 again"; }

step "A: committed again, unchanged: answered from the new snapshot, still held"
commit_ok "$unit" "$T/third.json"
[ "$(json "$T/third.json" 'd["id"]')" = "$id" ] || { cat "$T/third.json"; die "a third snapshot was taken"; }

step "A forgets it itself: its index lets go of the record (ls, fsck); prune; commit takes it again"
# the record of $id10, which B forgot and pruned, stays in A's index (no
# manifest tells its references any more): reindex drops it, and fsck
# agrees before A forgets anything
cks reindex > /dev/null 2> "$T/rx.err" || { cat "$T/rx.err"; die "reindex on A failed"; }
cks fsck > "$T/fsck.out" 2>&1 || { cat "$T/fsck.out"; die "fsck after reindex"; }
cks forget --run r1 --keep-last 1 --json > "$T/f.json"
[ "$(json "$T/f.json" 'd["forgotten"]')" = 1 ] || { cat "$T/f.json"; die "A did not forget one snapshot"; }
cks ls --run r1 --json > "$T/ls.json"
[ "$(json "$T/ls.json" "[s['step'] for s in d]")" = "[20]" ] ||
  { cat "$T/ls.json"; die "A's index still lists the snapshot it forgot"; }
cks fsck > "$T/fsck.out" 2>&1 || { cat "$T/fsck.out"; die "fsck: dropping the record left references wrong"; }
cks prune --grace 0 > /dev/null 2> "$T/p.err" || { cat "$T/p.err"; die "A's prune failed"; }
cks fsck > "$T/fsck.out" 2>&1 || { cat "$T/fsck.out"; die "fsck after A's prune"; }
commit_ok "$unit" "$T/fourth.json"
id4=$(json "$T/fourth.json" 'd["id"]')
[ "$id4" != "$id" ] && [ "$(json "$T/fourth.json" 'd["durable"]')" = True ] ||
  { cat "$T/fourth.json"; die "the commit after A's own forget did not store checkpoint-10 again"; }
b restore --run r1 --snapshot "$id4" --to "$T/out4" > /dev/null 2> "$T/r.err" ||
  { cat "$T/r.err"; die "restore of $id4 on B failed"; }
same_tree "$unit" "$T/out4/checkpoint-10"
stop_daemon
CONF=$A_CONF
echo "commit-forgotten: ok"
