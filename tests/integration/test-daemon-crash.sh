#!/usr/bin/env bash
# regions: dir s3
# kill -9 of ckptsyncd at random moments during uploads, ROUNDS times (20
# by default, 10 against S3; CKS_CRASH_ROUNDS to change).  After every restart nothing that
# `commit --wait durable` acknowledged is lost, the queues drain, every
# snapshot restores bit-identical, and no chunk is counted twice (fsck
# compares every refcount with the manifests).
. "$(dirname "$0")/lib.sh"
# against the S3 servers each round takes several times longer: 10 there
case ${CKS_REGIONS:-dir} in dir) ROUNDS0=20 ;; *) ROUNDS0=10 ;; esac
ROUNDS=${CKS_CRASH_ROUNDS:-$ROUNDS0}
write_config 32K 128K 512K
set_settle 1
mkdir -p "$T/watch/r1" "$T/acked"

# make_ckpt NAME: a checkpoint of a few files; part of it repeats earlier
# content (dedup), part is new.  Its sums go to $T/sums/NAME.
make_ckpt() {
  local d="$T/watch/r1/$1" mib=${2:-3}
  mkdir -p "$d" "$T/sums"
  head -c $((mib << 20)) /dev/urandom > "$d/model.bin"
  [ -f "$T/shared.bin" ] || head -c $((1 << 20)) /dev/urandom > "$T/shared.bin"
  cp "$T/shared.bin" "$d/frozen.bin"
  printf '{"step": "%s"}\n' "$1" > "$d/trainer_state.json"
  tree_sums "$d" > "$T/sums/$1.sums"
}

for round in $(seq 1 "$ROUNDS"); do
  start_daemon
  make_ckpt "checkpoint-${round}0"
  if cks commit "$T/watch/r1/checkpoint-${round}0" --wait durable --timeout 60 --json > "$T/c.json"; then
    json "$T/c.json" 'd["id"]' > "$T/acked/checkpoint-${round}0"
  else
    die "round $round: commit --wait durable failed"
  fi
  # A second checkpoint is in flight when the daemon dies.
  make_ckpt "checkpoint-${round}5" 24
  cks commit "$T/watch/r1/checkpoint-${round}5" > /dev/null 2>&1 || true
  sleep "0.$(( RANDOM % 60 ))"
  kill9_daemon
done
echo "$ROUNDS rounds of kill -9 done; restarts that resumed unfinished uploads:" \
  "$(grep -c 'resuming .* not yet in every region' "$T/daemon.log" || true)," \
  "that removed a half-made pin: $(grep -c 'stale pin folder' "$T/daemon.log" || true)"

step "restart: the queues drain"
start_daemon
cks flush --wait replicated --deadline 180 || { tail -30 "$T/daemon.log"; die "queues did not drain"; }
stop_daemon

step "nothing acknowledged is lost: every acked snapshot restores bit-identical"
for f in "$T"/acked/*; do
  name=$(basename "$f"); id=$(cat "$f")
  rm -rf "$T/restore"
  cks restore --run r1 --snapshot "$id" --to "$T/restore" -q || die "acknowledged $name ($id) cannot be restored"
  tree_sums "$T/restore/$name" | diff "$T/sums/$name.sums" - > /dev/null || die "acknowledged $name differs"
done

step "every snapshot in the regions is intact and in all three"
cks verify --run r1 > "$T/verify.txt" || { cat "$T/verify.txt"; die "verify"; }
cks ls --remote --run r1 --json > "$T/ls.json"
[ "$(json "$T/ls.json" 'min(x["regions"] for x in d)')" = 3 ] || die "a snapshot is not in all regions"
echo "$(json "$T/ls.json" 'len(d)') snapshots in the regions"

step "no chunk counted twice; no pin folder left"
cks fsck || die "fsck found refcount errors"
[ -z "$(ls -A "$T/watch/.ckptsync-pins" 2>/dev/null)" ] || die "pin folders left behind"
echo "daemon-crash: ok"
