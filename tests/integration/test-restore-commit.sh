#!/usr/bin/env bash
# A commit of a unit that migrate-in restored into the watch root is
# answered from what the regions held at the restore, not assumed: the
# restore records the snapshot in the local index, committed in the
# regions whose listing has its manifest (service/snaprec.h).
#   1. the manifest is gone from 2 of the 3 regions (quorum 2): the
#      restore (from the third) records it in 1; a commit answers the
#      restored id, committed 1, not durable; --wait durable times out
#      saying "NOT durable yet"; ls says 1 region; fsck finds the
#      references it counted consistent; the daemon takes no new snapshot
#   2. restored again once the manifest is back in region b: the record
#      gains b (2 regions), and the commit answers durable
# On main the commit failed with "snapshot <id>: No such file or
# directory" (the index did not know a restored snapshot).
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
set_settle 1

src="$T/src/checkpoint-20"
make_file "$src/model.safetensors" 2
printf '{"global_step": 20}\n' > "$src/trainer_state.json"
cks snapshot "$src" --run r1 --step 20 --json > "$T/s.json"
id=$(json "$T/s.json" 'd["id"]')
rm -rf "$STATE"
for r in b c; do
  [ -f "$T/regions/$r/snapshots/r1/$id" ] || die "no manifest of $id in region $r"
  mv "$T/regions/$r/snapshots/r1/$id" "$T/$r.manifest"
done
start_daemon
unit="$T/watch/r1/checkpoint-20"

step "held by region a alone: the commit names the restored snapshot, not durable"
cks migrate-in --run r1 --to "$T/watch/r1" > "$T/m.out" 2> "$T/m.err" || { cat "$T/m.err"; die "migrate-in failed"; }
[ "$(cat "$T/m.out")" = "$unit" ] || { cat "$T/m.out"; die "migrate-in printed another path"; }
cks commit "$unit" --timeout 30 --json > "$T/c.json" 2> "$T/c.err" ||
  { cat "$T/c.err"; die "commit of the restored unit failed"; }
[ "$(json "$T/c.json" '(d["id"], d["regions_committed"], d["durable"])')" = "('$id', 1, False)" ] ||
  { cat "$T/c.json"; die "the commit does not answer the restored snapshot as committed in region a only"; }
expect_fail 1 cks commit "$unit" --wait durable --timeout 2
grep -q "snapshot $id is committed in 1 of 3 regions: NOT durable yet" "$T/err" ||
  { cat "$T/err"; die "commit --wait durable did not say the restored snapshot is not durable"; }
cks ls --run r1 --json > "$T/ls.json"
[ "$(json "$T/ls.json" '[(s["id"], s["regions"], s["durable"]) for s in d]')" = "[('$id', 1, False)]" ] ||
  { cat "$T/ls.json"; die "ls does not show the restored snapshot in region a only"; }
cks fsck > "$T/fsck.out" 2>&1 || { cat "$T/fsck.out"; die "fsck: the restore's references are not consistent"; }

step "restored again with the manifest back in region b: durable"
mv "$T/b.manifest" "$T/regions/b/snapshots/r1/$id"
cks restore --run r1 --snapshot "$id" --to "$T/watch/r1" --force > /dev/null 2> "$T/r.err" ||
  { cat "$T/r.err"; die "restore --force failed"; }
cks commit "$unit" --wait durable --timeout 30 --json > "$T/c.json" 2> "$T/c.err" ||
  { cat "$T/c.err"; die "commit --wait durable after the second restore failed"; }
[ "$(json "$T/c.json" '(d["id"], d["regions_committed"], d["durable"])')" = "('$id', 2, True)" ] ||
  { cat "$T/c.json"; die "the second restore did not add region b"; }
cks fsck > "$T/fsck.out" 2>&1 || { cat "$T/fsck.out"; die "fsck: a second restore counted the references again"; }
if grep -E "event=snapshot run=r1 .*unit=r1/checkpoint-20" "$T/daemon.log"; then
  die "the daemon snapshotted the restored unit"
fi
stop_daemon
echo "restore-commit: ok"
