#!/usr/bin/env bash
# regions: dir s3 ceph
# encrypted: yes
# ckptsyncd against a Hugging Face-style training run: checkpoints written
# with trainer_state.json last and rotated away (save_total_limit); every
# committed snapshot restores bit-identical to what was written, the log
# file outside the checkpoints is captured by quiescence, and restarting
# the daemon on unchanged data takes no new snapshot.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
set_settle 1
start_daemon

step "a training run writes 6 checkpoints, keeping 2"
python3 "$CKS_SOURCE_DIR/tests/integration/hf_writer.py" "$T/watch/r1" "$T/sums" \
  --checkpoints 6 --mib 4 --save-total-limit 2 --pause 0.3

step "flush: everything replicated"
cks flush --wait replicated --deadline 120 || { cat "$T/daemon.log"; die "flush failed"; }
cks status > "$T/status.txt"; cat "$T/status.txt"
grep -q "r1 .*checkpoint\|r1 " "$T/status.txt" || die "status does not show run r1"

step "every committed snapshot restores bit-identical"
cks ls --remote --run r1 --json > "$T/ls.json"
python3 - "$T/ls.json" > "$T/ids.txt" <<'PY'
import json, sys
for s in json.load(open(sys.argv[1])):
    print(s["id"], s["regions"])
PY
n=0; seen=""
while read -r id regions; do
  [ "$regions" = 3 ] || die "snapshot $id is in $regions regions after flush --wait replicated"
  rm -rf "$T/restore"
  cks restore --run r1 --snapshot "$id" --to "$T/restore" -q
  root=$(ls "$T/restore")
  case $root in
    checkpoint-*)
      tree_sums "$T/restore/$root" > "$T/got.sums"
      diff "$T/sums/$root.sums" "$T/got.sums" > /dev/null || die "snapshot $id of $root is not what was written"
      n=$((n + 1)); seen="$seen $root";;
    train.log) [ -s "$T/restore/train.log" ] || die "empty log";;
  esac
done < "$T/ids.txt"
echo "verified $n checkpoint snapshots:$seen"
[ "$n" -ge 3 ] || die "only $n of 6 checkpoints were captured"
echo "$seen" | grep "checkpoint-60" > /dev/null || die "the last checkpoint was not captured"
grep -q "train.log" <(cks ls --remote --run r1 --json | python3 -c 'import json,sys; [print(s["id"]) for s in json.load(sys.stdin)]' | while read -r id; do cks show "$id" --run r1 --json; done) \
  || die "train.log (outside checkpoints) was not captured"

step "latest is the newest checkpoint, not the log written after it"
rm -rf "$T/latest"
cks restore --run r1 --latest --to "$T/latest" -q
[ -d "$T/latest/checkpoint-60" ] || { ls "$T/latest"; die "restore --latest is not checkpoint-60"; }
[ -s "$T/latest/train.log" ] || { ls "$T/latest"; die "restore --latest left out the run's log file"; }
[ "$(ls "$T/latest" | wc -l)" = 2 ] || { ls "$T/latest"; die "restore --latest restored more than checkpoint + log"; }
cks restore --run r1 --all --to "$T/all" -q
# Every unit captured (a checkpoint rotated away before the daemon read it
# may be missing when the machine is loaded: at least 3, see above), and
# the log.
units=$(echo "$seen" | tr ' ' '\n' | grep -c . || true)
[ "$(ls "$T/all" | wc -l)" = $((units + 1)) ] || { ls "$T/all"; die "restore --all: expected $units checkpoints and the log"; }
for c in $seen; do
  tree_sums "$T/all/$c" | diff "$T/sums/$c.sums" - > /dev/null || die "--all: $c differs"
done
cks status --json > "$T/st.json"
[ "$(json "$T/st.json" 'd["runs"][0]["latest"]["step"]')" = 60 ] || die "status latest is not step 60"

step "restart on unchanged data takes no new snapshot"
before=$(cks ls --remote --run r1 --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
stop_daemon
start_daemon
sleep 3
cks flush --wait replicated --deadline 60
after=$(cks ls --remote --run r1 --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
[ "$before" = "$after" ] || die "restart took new snapshots of unchanged data ($before -> $after)"
ls "$T/watch/.ckptsync-pins" 2>/dev/null | grep . > /dev/null && die "pin folders left after replication"
stop_daemon
cks verify --run r1 -q || die "verify after the run"
echo "daemon-hf: ok"
