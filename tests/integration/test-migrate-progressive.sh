#!/usr/bin/env bash
# migrate-in --progressive (#24 item 2) into the watch root, with the
# daemon running (as deploy/hooks/migrate-in.sh starts it first):
#   1. held (test hook) once the weights are placed: trainer_state.json,
#      an HF completion marker, is already at its final path, so the
#      daemon finds the unit ready; it must not take the partial
#      checkpoint as a new snapshot ("event=snapshot_skipped
#      reason=restoring"), and the weights are there, whole; the index
#      already has the snapshot (recorded before the first file)
#   2. resumed: one JSON line per placed file, then the result with the
#      path; the tree is the source's; a commit of the unit answers with
#      the restored snapshot (unchanged), not a new one, durable at once
#      (the restore recorded it in the index, committed where its
#      manifest is), and ls lists it
#   3. the hook passes --progressive through
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
set_settle 1

src="$T/src/checkpoint-20"
mkdir -p "$src"
printf '{"global_step": 20}\n' > "$src/trainer_state.json"
head -c $((3 << 20)) /dev/urandom > "$src/model.safetensors"
head -c $((6 << 20)) /dev/urandom > "$src/optimizer.pt"
cks snapshot "$src" --run r1 --step 20 --json > "$T/s.json"
id=$(json "$T/s.json" 'd["id"]')
rm -rf "$STATE"
start_daemon

# stopped PID: waits (10 s at most) until PID is stopped (the hold).
stopped() {
  local i
  for i in $(seq 1 1000); do
    [ "$(awk '{print $3}' "/proc/$1/stat" 2> /dev/null)" = T ] && return 0
    kill -0 "$1" 2> /dev/null || return 1
    sleep 0.01
  done
  return 1
}
# taken: the daemon's log has a line about the unit, snapshot or skipped.
taken() { grep -E 'event=snapshot(_skipped)? .*unit=r1/checkpoint-20' "$T/daemon.log"; }

step "held after the weights: the daemon does not take the partial unit"
CKPTSYNC_TEST_RESTORE_HOLD_AFTER=weights "$CKPTSYNC" --config "$CONF" migrate-in --run r1 \
  --to "$T/watch/r1" --progressive --json > "$T/m.out" 2> "$T/m.err" &
mpid=$!
stopped "$mpid" || { cat "$T/m.err"; die "migrate-in did not reach the hold after the weights"; }
cmp "$src/model.safetensors" "$T/watch/r1/checkpoint-20/model.safetensors" ||
  die "held after the weights: model.safetensors missing or wrong"
[ ! -e "$T/watch/r1/checkpoint-20/optimizer.pt" ] || die "optimizer.pt placed before the hold"
wait_for 20 taken || { tail -20 "$T/daemon.log"; kill -9 "$mpid"; die "the daemon never looked at the unit"; }
taken | grep 'event=snapshot_skipped .*reason=restoring' > /dev/null ||
  { taken; kill -9 "$mpid"; die "the daemon took the partially restored unit as a snapshot"; }
# the restore records the snapshot before any file of it appears (so that
# a daemon never sees a restored tree it does not know: a plain migrate-in
# renames the whole tree in at once)
cks ls --run r1 --json > "$T/ls.json"
[ "$(json "$T/ls.json" '[(s["id"], s["regions"]) for s in d]')" = "[('$id', 3)]" ] ||
  { cat "$T/ls.json"; kill -9 "$mpid"; die "held: the snapshot is not in the index before its files"; }

step "resumed: placed lines, the path, the whole tree; the unit is the restored snapshot"
kill -CONT "$mpid"
wait "$mpid" || { cat "$T/m.err"; die "migrate-in --progressive failed"; }
[ "$(grep -c '"placed"' "$T/m.out")" = 3 ] || { cat "$T/m.out"; die "not one line per placed file"; }
tail -1 "$T/m.out" > "$T/m.last"
[ "$(json "$T/m.last" 'd["path"]')" = "$T/watch/r1/checkpoint-20" ] || { cat "$T/m.last"; die "wrong path"; }
[ "$(json "$T/m.last" 'd["id"]')" = "$id" ] || die "migrate-in restored another snapshot"
same_tree "$src" "$T/watch/r1/checkpoint-20"
# the daemon answers a commit of the unit with the restored snapshot, as
# the restore recorded it in the index: committed in the 3 regions that
# hold its manifest, durable at once (main answered "snapshot <id>: No
# such file or directory": the daemon's index did not know it)
cks commit "$T/watch/r1/checkpoint-20" --timeout 30 --json > "$T/c.json" 2> "$T/c.err" ||
  { cat "$T/c.err"; die "commit of the restored unit failed"; }
[ "$(json "$T/c.json" 'd["id"]')" = "$id" ] || { cat "$T/c.json"; die "the restored unit was taken as a new snapshot"; }
[ "$(json "$T/c.json" '(d["regions_committed"], d["durable"], d["replicated"])')" = "(3, True, True)" ] ||
  { cat "$T/c.json"; die "the restored snapshot is not answered as committed in its 3 regions"; }
cks commit "$T/watch/r1/checkpoint-20" --wait durable --timeout 30 > /dev/null 2> "$T/c.err" ||
  { cat "$T/c.err"; die "commit --wait durable of the restored unit failed"; }
cks ls --run r1 --json > "$T/ls.json"
[ "$(json "$T/ls.json" '[(s["id"], s["regions"]) for s in d]')" = "[('$id', 3)]" ] ||
  { cat "$T/ls.json"; die "ls does not show the restored snapshot in its 3 regions"; }
if grep -E "event=snapshot run=r1 .*unit=r1/checkpoint-20" "$T/daemon.log"; then
  die "the daemon snapshotted the restored unit"
fi

step "the hook passes --progressive through"
stop_daemon
CKPTSYNC="$CKPTSYNC" bash "$CKS_SOURCE_DIR/deploy/hooks/migrate-in.sh" --config "$CONF" --run r1 \
  --to "$T/elsewhere" --progressive --no-install --no-start > "$T/h.out" 2> "$T/h.err" ||
  { cat "$T/h.err"; die "the hook failed"; }
grep -q -- "migrate-in --to $T/elsewhere --run r1 --progressive" "$T/h.err" ||
  { cat "$T/h.err"; die "the hook did not pass --progressive"; }
[ "$(cat "$T/h.out")" = "$T/elsewhere/checkpoint-20" ] || { cat "$T/h.out"; die "the hook printed no path"; }
same_tree "$src" "$T/elsewhere/checkpoint-20"
echo "ok"
