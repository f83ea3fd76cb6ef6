#!/usr/bin/env bash
# encrypted: yes
# Pruning while other instances work on the same repository: two daemons
# write run 'shared' (steps interleaved; their own retention keeps the last
# 3, daemon A also prunes every few seconds), a third instance restores the
# newest snapshot, and a fourth runs forget + prune --grace 0, all at once.
# Each round kills one of the four with kill -9 at a random moment and
# starts it again.  Afterwards: verify passes, every snapshot still listed
# restores bit for bit, the newest acknowledged ones are all there, and
# every restore that was not killed gave exactly a checkpoint's content.
# CKS_PC_ROUNDS (default 30, dir and s3).
# regions: dir s3
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
set_settle 1
cat >> "$CONF" <<'EOF'
[retention.shared]
keep_last = 3
[prune]
grace = 0
intent_ttl = 2m
clock_skew = 5s
lease = 30s
EOF
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"
ROUNDS=${CKS_PC_ROUNDS:-30}
T0=$SECONDS

inst A; inst B; inst R; inst P
sed -i 's/^\[prune\]$/[prune]\ninterval = 4s/' "$T/i-A.conf"   # A also prunes by itself
idaemon A; idaemon B
head -c $((256 << 10)) /dev/urandom > "$T/frozen.bin"
ACKED="$T/acked"; : > "$ACKED"

# make_ckpt DIR STEP: half of the time the model is that of step STEP-8,
# forgotten by now (keep_last 3): its chunks are prune's candidates, which
# the writers then reuse while prunes mark and sweep.
make_ckpt() {
  local old="$T/i-A/watch/shared/checkpoint-$(( $2 - 8 ))"
  [ -d "$old" ] || old="$T/i-B/watch/shared/checkpoint-$(( $2 - 8 ))"
  mkdir -p "$1"
  cp "$T/frozen.bin" "$1/frozen.bin"
  if [ $((RANDOM % 2)) = 0 ] && [ -f "$old/model.bin" ]; then
    cp "$old/model.bin" "$1/model.bin"
  else
    head -c $(( (256 + RANDOM % 512) << 10 )) /dev/urandom > "$1/model.bin"
  fi
  printf '{"step": %s}\n' "$2" > "$1/meta.json"
}

# The reader's restore must equal the checkpoint its root names.
check_restore() { # DIR
  local got
  got=$(ls -A "$1")
  [ "$(echo "$got" | wc -l)" = 1 ] || die "restore --latest gave several roots: $got"
  local step=${got#checkpoint-} src=
  for d in A B; do [ -d "$T/i-$d/watch/shared/$got" ] && src="$T/i-$d/watch/shared/$got"; done
  [ -n "$src" ] || die "restore --latest gave $got, which no daemon wrote"
  same_tree "$src" "$1/$got"
  echo "$step"
}

KILLED=(0 0 0 0); RESTORES=0; PRUNES=0; BUSY=0; DELETED=0; KEPT=0
names=(A B R P)
for k in $(seq 1 "$ROUNDS"); do
  declare -A S=([A]=$((2 * k)) [B]=$((2 * k + 1)))
  for d in A B; do make_ckpt "$T/i-$d/watch/shared/checkpoint-${S[$d]}" "${S[$d]}"; done
  v=$((RANDOM % 4)); victim=${names[$v]}
  declare -A CP=()
  for d in A B; do
    ( icks "$d" commit "$T/i-$d/watch/shared/checkpoint-${S[$d]}" --step "${S[$d]}" \
        --wait replicated --timeout 60 --json > "$T/c-$d.json" 2> "$T/c-$d.err" ) &
    CP[$d]=$!
  done
  rm -rf "$T/i-R/state" "$T/rd"
  ( exec "$CKPTSYNC" --config "$T/i-R.conf" restore --run shared --latest --to "$T/rd" -q > /dev/null 2> "$T/r.err" ) &
  IPID[R]=$!
  rm -f "$T/p.json"
  ( exec bash -c '"$0" --config "$1" forget --run shared --keep-last 3 -q && exec "$0" --config "$1" prune --grace 0 --json' \
      "$CKPTSYNC" "$T/i-P.conf" > "$T/p.json" 2> "$T/p.err" ) &
  IPID[P]=$!
  ( sleep "0.$(printf '%03d' $((RANDOM % 900)))"; ikill "$victim" ) 2> /dev/null &
  killer=$!
  declare -A RC=()
  for d in A B; do RC[$d]=0; { wait "${CP[$d]}" || RC[$d]=$?; } 2> /dev/null; done
  rr=0; { wait "${IPID[R]}" || rr=$?; } 2> /dev/null
  pr=0; { wait "${IPID[P]}" || pr=$?; } 2> /dev/null
  { wait $killer || true; ikill "$victim" || true; } 2> /dev/null
  KILLED[$v]=$((KILLED[v] + 1))
  case $victim in A|B) idaemon "$victim" ;; esac
  if [ "$victim" != R ]; then
    # (before anything was acknowledged there may be nothing to restore)
    [ $rr = 0 ] || [ ! -s "$ACKED" ] || { cat "$T/r.err" >&2; die "round $k: restore --latest (not killed) exited $rr"; }
    if [ $rr = 0 ] && [ -d "$T/rd" ]; then check_restore "$T/rd" > /dev/null; RESTORES=$((RESTORES + 1)); fi
  fi
  if [ "$victim" != P ] && [ $pr != 0 ] && grep -Eq "holds the lease|took the lease" "$T/p.err"; then
    BUSY=$((BUSY + 1))   # daemon A's scheduled prune held it (or took it the same instant,
                         # last writer wins where PUTs are not create-only): one prune at a time
  elif [ "$victim" != P ]; then
    [ $pr = 0 ] || { cat "$T/p.err" >&2; die "round $k: forget + prune (not killed) exited $pr"; }
    PRUNES=$((PRUNES + 1))
    read -r dl kp < <(json "$T/p.json" '"%d %d" % (sum(r["deleted"] for r in d["regions"]), sum(r["kept"] for r in d["regions"]))')
    DELETED=$((DELETED + dl)); KEPT=$((KEPT + kp))
  fi
  for d in A B; do
    src="$T/i-$d/watch/shared/checkpoint-${S[$d]}"
    if [ "${RC[$d]}" != 0 ]; then
      [ "$d" = "$victim" ] || { cat "$T/c-$d.err" >&2; tail -20 "$T/i-$d/daemon.log" >&2; die "round $k: commit by $d (not killed) exited ${RC[$d]}"; }
      icks "$d" commit "$src" --step "${S[$d]}" --wait replicated --timeout 60 --json \
        > "$T/c-$d.json" 2> "$T/c-$d.err" ||
        { cat "$T/c-$d.err" >&2; tail -20 "$T/i-$d/daemon.log" >&2; die "round $k: commit again by $d after its restart"; }
    fi
    echo "${S[$d]} $(json "$T/c-$d.json" 'd["id"]') $src" >> "$ACKED"
  done
done
echo "    kills: A ${KILLED[0]}, B ${KILLED[1]}, restorer ${KILLED[2]}, pruner ${KILLED[3]};" \
  "$RESTORES restores checked, $PRUNES prunes finished, $BUSY refused as daemon A's held the lease (by the pruner: $DELETED chunks deleted," \
  "$KEPT candidates kept because a writer reused them); $((SECONDS - T0)) s"
[ "$DELETED" -gt 0 ] || die "no prune deleted anything while the writers ran: the test proves nothing"

step "the daemons drain their queues; one last forget and prune"
for d in A B; do
  icks "$d" flush --wait replicated --deadline 120 -q ||
    { tail -30 "$T/i-$d/daemon.log" >&2; die "daemon $d: queues did not drain"; }
done
for d in A B; do istop "$d"; done
icks P forget --run shared --keep-last 3 -q
# A killed daemon's intents are removed by the next prune: its pid is
# free, or runs a process that started after the intent was written.
# What no prune can tell apart from a live writer's — a record that
# kill -9 cut short in s3rver (which writes an object in place), a pid
# given out again within clock_skew — waits for the intent to expire
# (intent_ttl 2m + clock_skew): prune until nothing waits and no intent is
# left, at most that long.
# (a dir region's ".<key>.tmp.<pid>.<hex>" is a put cut short by kill -9: not an object)
intents_left() { rg_keys a intents/ | grep -v '^intents/\.' || true; }
for try in $(seq 1 14); do
  icks P prune --grace 0 --json > "$T/prune.json" || die "the last prune"
  waits=$(json "$T/prune.json" '"; ".join(r["waiting"] for r in d["regions"] if r["state"] == "waiting")')
  left=$(intents_left)
  [ -n "$waits$left" ] || break
  echo "    a prune waits: ${waits:-intents left: $(echo "$left" | sed -n 1,3p | tr '\n' ' ')}"
  sleep 10
done
icks P prune --grace 0 --json > "$T/prune.json" || die "the last prune"
left=$(intents_left)
[ -z "$left" ] || die "intents left after every writer stopped: $(echo "$left" | sed -n 1,3p)"

step "verify passes; every snapshot still listed restores bit for bit; the newest are all there"
cks verify -q || { cks verify >&2 || true; die "verify after the concurrent prunes"; }
cks ls --remote --run shared --json > "$T/ls.json"
python3 -c 'import json,sys; [print(x["id"]) for x in json.load(open(sys.argv[1]))]' "$T/ls.json" > "$T/listed"
for s in $(sort -n "$ACKED" | tail -3 | awk '{print $2}'); do
  grep -qx "$s" "$T/listed" || die "acknowledged snapshot $s, among the newest 3, is not listed"
done
n=0
while read -r id; do
  src=$(awk -v i="$id" '$2 == i { print $3 }' "$ACKED")
  [ -n "$src" ] || continue   # a retake of a killed daemon's unit: not acknowledged
  n=$((n + 1))
  rm -rf "$T/i-R/state" "$T/final"
  icks R restore --run shared --snapshot "$id" --to "$T/final" -q 2> "$T/r.err" ||
    { cat "$T/r.err" >&2; die "retained snapshot $id cannot be restored"; }
  same_tree "$src" "$T/final/$(basename "$src")"
done < "$T/listed"
[ "$n" -ge 3 ] || die "only $n acknowledged snapshots are listed"
cks stats --json > "$T/stats.json"
[ "$(json "$T/stats.json" 'sum(r["garbage_bytes"] for r in d["regions"])')" = 0 ] ||
  die "garbage left after the last prunes: $(cat "$T/stats.json")"
# (the forget of the pruner races the daemons' own retention: a pass that
# found everything forgotten already says "forgot 0")
grep -h "retention of run 'shared'" "$T"/i-[AB]/daemon.log > "$T/ret.log" || true
sed -n 1,2p "$T/ret.log" | sed 's/^/    daemon: /'
[ -s "$T/ret.log" ] || die "the daemons never applied their retention policy"
echo "prune-concurrent: ok ($n retained snapshots restored; $((SECONDS - T0)) s)"
