#!/usr/bin/env bash
# What frameworks write while a save is in progress (Hugging Face Trainer's
# tmp-checkpoint-N, *.tmp, *.incomplete, Python tempfile names, Orbax's
# staging folder), hidden folders and hidden runs: the daemon never takes
# them as units, even after they sat quiet past the settle time; renamed
# to their final name they are taken as usual.  restore --all never
# brings such a name back, even one stored by hand (or an older version).
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
set_settle 1
start_daemon

step "staging folders, temporary files and hidden names, left quiet past settle"
w="$T/watch/r1"
mkdir -p "$w/tmp-checkpoint-100" "$w/.ipynb_checkpoints" "$w/5.orbax-checkpoint-tmp-1712345678" \
  "$T/watch/.hidden-run/checkpoint-1" "$T/watch/.cache/hub"
make_file "$w/tmp-checkpoint-100/model.safetensors" 1
echo '{"global_step": 100}' > "$w/tmp-checkpoint-100/trainer_state.json"
echo x > "$w/.ipynb_checkpoints/notes.ipynb"
echo x > "$w/5.orbax-checkpoint-tmp-1712345678/_METADATA"
make_file "$w/model.safetensors.incomplete" 1
make_file "$w/tmpab12cd34.pt" 1
make_file "$w/epoch=1-step=50.ckpt.tmp" 1
echo '{}' > "$T/watch/.hidden-run/checkpoint-1/trainer_state.json"
echo x > "$T/watch/.cache/hub/blob"
sleep 3   # three settle periods: a unit would have been taken by now
cks status --json > "$T/st.json"
[ "$(json "$T/st.json" 'd["units_pending"]')" = 0 ] || { cat "$T/st.json"; die "temporary names are pending units"; }
cks flush --wait replicated --deadline 30 -q || { tail "$T/daemon.log"; die "flush"; }
[ "$(cks ls --json | json /dev/stdin 'len(d)')" = 0 ] || { cks ls; die "a temporary or hidden name was snapshotted"; }

step "renamed to their final names: taken as checkpoints"
mv "$w/tmp-checkpoint-100" "$w/checkpoint-100"
mv "$w/epoch=1-step=50.ckpt.tmp" "$w/epoch=1-step=50.ckpt"
cks flush --wait replicated --deadline 30 -q || { tail "$T/daemon.log"; die "flush after the renames"; }
wait_for 20 sh -c "'$CKPTSYNC' --config '$CONF' ls --json | python3 -c 'import json,sys; sys.exit(len(json.load(sys.stdin)) != 2)'" \
  || { cks ls; tail "$T/daemon.log"; die "the renamed checkpoints were not both taken"; }
cks ls --json > "$T/ls.json"
[ "$(json "$T/ls.json" 'sorted((s["run"], s["step"]) for s in d)')" = "[('r1', 50), ('r1', 100)]" ] \
  || { cat "$T/ls.json"; die "not exactly checkpoint-100 and epoch=1-step=50.ckpt of run r1"; }
for id in $(json "$T/ls.json" '" ".join(s["id"] for s in d)'); do cks show "$id" --run r1 --json; done > "$T/show.json"
grep -c '"root":"checkpoint-100"\|"root":"epoch=1-step=50.ckpt"' "$T/show.json" | grep -x 2 > /dev/null \
  || { cat "$T/show.json"; die "roots are not the final names"; }

step "restore --all never brings back a temporary name, even one stored by hand"
mkdir -p "$w/tmp-checkpoint-7"; echo x > "$w/tmp-checkpoint-7/w.bin"
cks snapshot "$w/tmp-checkpoint-7" --run r1 -q
stop_daemon
cks restore --run r1 --all --to "$T/all" -q
[ "$(ls -A "$T/all" | sort | tr '\n' ' ')" = "checkpoint-100 epoch=1-step=50.ckpt " ] \
  || { ls -A "$T/all"; die "restore --all: not exactly the two checkpoints"; }
cmp "$w/epoch=1-step=50.ckpt" "$T/all/epoch=1-step=50.ckpt" || die "restored checkpoint differs"
echo "daemon-transient: ok"
