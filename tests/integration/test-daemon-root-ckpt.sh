#!/usr/bin/env bash
# Checkpoints written directly under the watch root (Hugging Face with
# output_dir=/data/cloud_storage): each checkpoint-N folder is one unit of
# the run _root, not a run of its own whose files are units; the staging
# name tmp-checkpoint-N is ignored there as inside a run; the daemon says
# once what it did; restore --latest brings back the whole checkpoint,
# and without --run when the repository holds that one run.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
set_settle 1
start_daemon

step "a training run with output_dir = the watch root"
python3 "$CKS_SOURCE_DIR/tests/integration/hf_writer.py" "$T/watch" "$T/sums" \
  --checkpoints 3 --mib 1 --save-total-limit 3 --pause 0.3
# The Trainer's own staging: written as tmp-checkpoint-40, renamed when complete.
mkdir "$T/watch/tmp-checkpoint-40"
cp "$T/watch/checkpoint-30/"* "$T/watch/tmp-checkpoint-40/"
echo '{"global_step": 40}' > "$T/watch/tmp-checkpoint-40/trainer_state.json"
sleep 2.5   # more than settle: a staging folder taken for a unit or a run would be snapshotted now
mv "$T/watch/tmp-checkpoint-40" "$T/watch/checkpoint-40"
tree_sums "$T/watch/checkpoint-40" > "$T/sums/checkpoint-40.sums"
cks flush --wait replicated --deadline 120 || { cat "$T/daemon.log"; die "flush failed"; }

step "one run, _root; its units are the checkpoints and the log"
cks ls --remote --json > "$T/ls.json"
python3 - "$T/ls.json" <<'PY' || die "ls --remote: not the expected runs and units"
import json, sys
snaps = json.load(open(sys.argv[1]))
runs = {s["run"] for s in snaps}
assert runs == {"_root"}, runs
steps = sorted(s["step"] for s in snaps if s["step"] is not None and s["step"] >= 0)
assert {10, 20, 30, 40} <= set(steps), steps
PY
grep -c 'directly under the watch root: it is a unit of the run "_root"' "$T/daemon.log" > "$T/n"
[ "$(cat "$T/n")" = 1 ] || die "the daemon should say once what it does with root checkpoints ($(cat "$T/n") times)"
grep -q '"tmp-checkpoint-40" directly under the watch root has an in-progress name' "$T/daemon.log" ||
  die "the daemon did not say it ignores tmp-checkpoint-40"

step "restore --latest: the whole newest checkpoint"
cks restore --run _root --latest --to "$T/latest" -q
[ -d "$T/latest/checkpoint-40" ] || { ls -R "$T/latest"; die "restore --latest is not checkpoint-40"; }
tree_sums "$T/latest/checkpoint-40" | diff "$T/sums/checkpoint-40.sums" - > /dev/null ||
  die "checkpoint-40 restored is not what was written"

step "restore --latest without --run: the repository's one run"
cks restore --latest --to "$T/latest2" -q || die "restore --latest without --run failed with one run"
tree_sums "$T/latest2/checkpoint-40" | diff "$T/sums/checkpoint-40.sums" - > /dev/null ||
  die "restore --latest without --run is not checkpoint-40"
stop_daemon

step "with several runs, restore without --run names them"
mkdir -p "$T/other/step_5"; echo x > "$T/other/step_5/w.bin"
cks snapshot "$T/other/step_5" --run other -q
expect_fail 1 "$CKPTSYNC" --config "$CONF" restore --latest --to "$T/latest3"
grep -q 'several runs ("_root", "other")\|several runs ("other", "_root")' "$T/err" ||
  { cat "$T/err"; die "restore without --run does not name the runs"; }
echo "daemon-root-ckpt: ok"
