#!/usr/bin/env bash
# encrypted: yes
# A real PyTorch run survives losing its instance, bit for bit: a small
# model trained on CPU with fixed seeds and deterministic algorithms
# (tests/integration/torch_train.py) saves checkpoint-10/20/30 under a
# ckptsyncd watch root, committing each through the Python module
# (ckptsync.commit(..., wait="durable")).  `ckptsync migrate-out` hands the
# run off; then the daemon is killed -9 and its watch and state directories
# are deleted — the instance is gone.  On a "new instance" (a second
# configuration: same regions, fresh watch and state, no daemon)
# `ckptsync migrate-in` restores the handoff and prints the one path to
# resume from; training resumes there.  The loss of every step 1..2K is
# identical (float.hex) to an uninterrupted reference run: the model,
# optimizer, scheduler and every RNG state came back exact.  A control run
# resumed without the RNG states diverges, so the comparison has teeth.
# Needs python3-torch for /usr/bin/python3 (deploy/deps.sh --test); skips
# without it.
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3
TRAIN="$CKS_SOURCE_DIR/tests/integration/torch_train.py"
K=30

[ -x "$PY" ] || skip "no $PY"
why=$("$PY" -c 'import torch' 2>&1 | tail -1) || skip "$PY cannot import torch (python3-torch): $why"

write_config 64K 256K 1M
set_settle 1
"$CKPTSYNC" migrate-in --help > /dev/null 2>&1 || die "ckptsync has no migrate-in command"

step "reference: $((2 * K)) steps uninterrupted"
"$PY" "$TRAIN" --steps $((2 * K)) --losses "$T/losses.ref"
[ "$(wc -l < "$T/losses.ref")" -eq $((2 * K)) ] || die "reference run wrote $(wc -l < "$T/losses.ref") losses"

step "instance 1: steps 1..$K under ckptsyncd, checkpoint + commit --wait durable every 10"
start_daemon
CKPTSYNC_SOCKET="$STATE/ckptsyncd.sock" PYTHONPATH="$CKS_SOURCE_DIR/client/python" \
  "$PY" "$TRAIN" --steps $K --ckpt-root "$T/watch/r1" --every 10 --commit --losses "$T/losses.run" \
  || { tail -20 "$T/daemon.log" >&2; die "training under the daemon failed"; }
tree_sums "$T/watch/r1/checkpoint-$K" > "$T/written.sums"

step "release the instance: migrate-out, kill -9, delete watch and state"
cks migrate-out --run r1 --deadline 60 || { tail -20 "$T/daemon.log" >&2; die "migrate-out failed"; }
kill9_daemon
rm -rf "$T/watch" "$STATE"

step "instance 2: fresh state, no daemon, migrate-in"
CONF2="$T/ckptsync2.conf"
sed -e "s|^watch = .*|watch = $T/watch2|" -e "s|^state = .*|state = $T/state2|" "$CONF" > "$CONF2"
mkdir -p "$T/watch2"
"$CKPTSYNC" --config "$CONF2" migrate-in --run r1 --to "$T/watch2/r1" > "$T/migrate-in.out" \
  || die "migrate-in failed"
[ "$(wc -l < "$T/migrate-in.out")" -eq 1 ] || { cat "$T/migrate-in.out" >&2; die "migrate-in printed not exactly one line"; }
resume=$(cat "$T/migrate-in.out")
[ "$resume" = "$T/watch2/r1/checkpoint-$K" ] || die "migrate-in says resume from '$resume', expected $T/watch2/r1/checkpoint-$K"
tree_sums "$resume" > "$T/restored.sums"
diff "$T/written.sums" "$T/restored.sums" >&2 || die "restored checkpoint-$K differs from what was written"

step "resume: steps $((K + 1))..$((2 * K)) from $resume"
"$PY" "$TRAIN" --steps $((2 * K)) --resume "$resume" --losses "$T/losses.run"
"$PY" "$TRAIN" --steps $((2 * K)) --resume "$resume" --no-rng --losses "$T/losses.control"

step "losses equal the reference bit for bit"
printf '%5s  %-24s %-24s %s\n' step reference migrated same
paste -d' ' "$T/losses.ref" "$T/losses.run" | awk -v k=$K '
  NR <= 2 || (NR >= k - 1 && NR <= k + 2) || NR >= 2 * k - 1 {
    printf "%5s  %-24s %-24s %s\n", $1, $2, $4, ($1 == $3 && $2 == $4 ? "=" : "DIFFERENT") }'
head -n $K "$T/losses.ref" | cmp -s - <(head -n $K "$T/losses.run") \
  || die "steps 1..$K under the daemon differ from the reference"
[ "$(wc -l < "$T/losses.run")" -eq $((2 * K)) ] || die "the runs wrote $(wc -l < "$T/losses.run") losses, not $((2 * K))"
tail -n $K "$T/losses.ref" | cmp -s - <(tail -n $K "$T/losses.run") \
  || die "steps $((K + 1))..$((2 * K)) after migrate-in differ from the reference"
tail -n $K "$T/losses.ref" | cmp -s - "$T/losses.control" \
  && die "control: resuming without the RNG states gave the same losses (the test cannot see a lost state)"
echo "control without RNG states diverges at step $(tail -n $K "$T/losses.ref" | paste -d' ' - "$T/losses.control" | awk '$2 != $4 { print $1; exit }')"
echo "torch-resume: ok"
