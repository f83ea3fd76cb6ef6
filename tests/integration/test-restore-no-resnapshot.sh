#!/usr/bin/env bash
# A checkpoint restored into the watch root (migrate-in on a new instance)
# is the snapshot it came from: the new instance's daemon does not take it
# again (no second snapshot at the next generation in ls --remote); a
# change made to it afterwards is a new snapshot as usual.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
set_settle 1
start_daemon

step "the old instance: checkpoint-20 of r1, replicated"
make_file "$T/watch/r1/checkpoint-20/model.safetensors" 2
echo '{"global_step": 20}' > "$T/watch/r1/checkpoint-20/trainer_state.json"
cks flush --wait replicated --deadline 60 || die "flush failed"
stop_daemon

step "a new instance: its own state and watch root, same regions; migrate-in, then its daemon"
sed -e "s|^state = .*|state = $T/state2|" -e "s|^watch = .*|watch = $T/new|" "$CONF" > "$T/new.conf"
mkdir -p "$T/new"
CONF=$T/new.conf
path=$(cks migrate-in --run r1 --to "$T/new/r1")
[ "$path" = "$T/new/r1/checkpoint-20" ] || die "migrate-in printed '$path'"
start_daemon
cks flush --wait replicated --deadline 60 || die "flush on the new instance failed"
cks ls --remote --run r1 --json > "$T/ls.json"
n=$(json "$T/ls.json" "len([s for s in d if s['step'] == 20])")
[ "$n" = 1 ] || { cat "$T/ls.json"; die "the restored checkpoint-20 is listed $n times"; }

step "changed after the restore: a new snapshot"
echo '{"global_step": 20, "note": 1}' > "$T/new/r1/checkpoint-20/trainer_state.json"
cks commit "$T/new/r1/checkpoint-20" --wait durable --timeout 60 > /dev/null || die "commit failed"
cks ls --remote --run r1 --json > "$T/ls.json"
n=$(json "$T/ls.json" "len([s for s in d if s['step'] == 20])")
[ "$n" = 2 ] || { cat "$T/ls.json"; die "a changed restored checkpoint was not snapshotted ($n)"; }
stop_daemon
echo "restore-no-resnapshot: ok"
