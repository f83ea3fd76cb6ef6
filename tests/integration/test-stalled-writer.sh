#!/usr/bin/env bash
# A writer stalled past intent_ttl between confirming its chunks and
# publishing (issue 22 item 1).  Run 'cli' is written by `ckptsync
# snapshot`, run 'dmn' by a daemon (`commit --wait replicated`): steps 1
# and 2 of each, `forget --keep-last 1` (step 1 goes), then step 3 with
# step 1's content, each writer held by the test hook
# CKPTSYNC_TEST_STOP_BEFORE_PUBLISH (SIGSTOP immediately before every
# publish, service/gc.h) after it confirmed that every region holds step
# 1's chunks.  A prune marks those chunks; once the writers' intents have
# expired (intent_ttl + clock_skew) a second prune sweeps them from every
# region.  Then the writers go on: whatever they acknowledge (rc 0) must
# pass verify (every chunk in every region that committed it) and restore
# bit for bit on a fresh instance.  Both
# writers are held at once, so the test waits for the expiry once.
# regions: dir s3
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
set_settle 1
# intent_ttl: the smallest the configuration takes (the wait dominates)
cat >> "$CONF" <<'EOF'
[prune]
grace = 0
intent_ttl = 60s
clock_skew = 2s
EOF
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"
T0=$SECONDS
inst C; inst D; inst P; inst R

# ckpt DIR: a checkpoint of a few files, random content
ckpt() {
  mkdir -p "$1"
  head -c $((384 << 10)) /dev/urandom > "$1/model.bin"
  head -c $((96 << 10)) /dev/urandom > "$1/optimizer.bin"
  printf '{"seed": %s}\n' "$RANDOM" > "$1/meta.json"
}
CW="$T/i-C/watch/cli" DW="$T/i-D/watch/dmn"

# wait_stopped PID WHAT: until PID is stopped at the hook, 60 s at most
wait_stopped() {
  for _ in $(seq 1 600); do proc_stopped "$1" && return 0; kill -0 "$1" 2> /dev/null || break; sleep 0.1; done
  die "$2 did not stop before its publish (the test hook)"
}
# release PID WAITER: continues PID every time the hook stops it, until
# the process WAITER is gone (180 s at most)
release() {
  for _ in $(seq 1 3600); do
    kill -0 "$2" 2> /dev/null || return 0
    if proc_stopped "$1"; then kill -CONT "$1"; STOPS=$((STOPS + 1)); fi
    sleep 0.05
  done
  kill -CONT "$1"; die "process $2 did not finish within 180 s of the release"
}

step "steps 1 and 2 of run 'cli' (ckptsync snapshot) and of run 'dmn' (the daemon); forget keeps the last"
for s in 1 2; do
  ckpt "$CW/checkpoint-$s"; ckpt "$DW/checkpoint-$s"
  icks C snapshot "$CW/checkpoint-$s" --run cli -q
done
idaemon D
for s in 1 2; do
  icks D commit "$DW/checkpoint-$s" --step "$s" --wait replicated --timeout 60 -q ||
    { tail -20 "$T/i-D/daemon.log" >&2; die "daemon: commit of step $s"; }
done
istop D
for run in cli dmn; do icks P forget --run "$run" --keep-last 1 -q; done

step "step 3 with step 1's content: each writer held just before its publish"
cp -a "$CW/checkpoint-1" "$CW/checkpoint-3"
cp -a "$DW/checkpoint-1" "$DW/checkpoint-3"
CKPTSYNC_TEST_STOP_BEFORE_PUBLISH=1 "$CKPTSYNC" --config "$T/i-C.conf" snapshot "$CW/checkpoint-3" --run cli --json \
  > "$T/cli.json" 2> "$T/cli.err" &
CLI=$!
_kill_cli() { kill -9 "$CLI" 2> /dev/null || true; }   # (a held process, on failure)
CKS_CLEANUP_HOOKS+=(_kill_cli)
CKPTSYNC_TEST_STOP_BEFORE_PUBLISH=1 idaemon D
icks D commit "$DW/checkpoint-3" --step 3 --wait replicated --timeout 300 --json \
  > "$T/dmn.json" 2> "$T/dmn.err" &
COMMIT=$!
wait_stopped "$CLI" "ckptsync snapshot"
wait_stopped "${IPID[D]}" "the daemon"
HELD=$SECONDS
for r in a b c; do
  n=$(rg_keys "$r" "snapshots/cli/" | wc -l)
  [ "$n" = 2 ] || die "region $r: run 'cli' has $n manifests while the writer is held (2 expected)"
  n=$(rg_keys "$r" "snapshots/dmn/" | wc -l)
  [ "$n" = 2 ] || die "region $r: run 'dmn' has $n manifests while the daemon is held (2 expected)"
done

step "prune marks step 1's chunks (the held writers' intents keep them)"
icks P prune --json > "$T/prune1.json" || die "the first prune"
marked=$(json "$T/prune1.json" 'sum(r["marked"] for r in d["regions"])')
deleted=$(json "$T/prune1.json" 'sum(r["deleted"] for r in d["regions"])')
[ "$marked" -gt 0 ] || die "the first prune marked nothing: $(cat "$T/prune1.json")"
[ "$deleted" = 0 ] || die "the first prune deleted $deleted chunks under live intents"

step "once the intents expire (intent_ttl 60 s + clock_skew 2 s), prune sweeps them"
# The intents were written before the writers stopped; expiry is by the
# wall clock, so this wait is the protocol's, not a synchronisation.
left=$((HELD + 63 - SECONDS))
[ "$left" -le 0 ] || sleep "$left"
for try in 1 2 3 4 5; do
  icks P prune --json > "$T/prune2.json" || die "the second prune"
  deleted=$(json "$T/prune2.json" 'sum(r["deleted"] for r in d["regions"])')
  [ "$deleted" -gt 0 ] && break
  sleep 2
done
[ "$deleted" -gt 0 ] || die "the second prune swept nothing: $(cat "$T/prune2.json")"
echo "    $marked chunks marked, $deleted deleted from the regions"

step "the writers go on"
STOPS=0
release "$CLI" "$CLI"
rc_cli=0; wait "$CLI" || rc_cli=$?
release "${IPID[D]}" "$COMMIT"
rc_dmn=0; wait "$COMMIT" || rc_dmn=$?
echo "    snapshot rc $rc_cli, commit rc $rc_dmn, $STOPS stops at the hook; $((SECONDS - T0)) s"
sed 's/^/    cli: /' "$T/cli.err" | grep -i 'intent' | sed -n 1,2p || true
grep -i 'intent' "$T/i-D/daemon.log" | sed 's/^/    daemon: /' | sed -n 1,2p || true

step "what a writer acknowledged is whole in every region and restores bit for bit"
# check_run RUN RC JSON ERR SRC: prints what is wrong, if anything
check_run() {
  local run=$1 rc=$2 id
  if [ "$rc" != 0 ]; then
    # This implementation uploads what the sweep took again, so it must
    # succeed; failing would at least have to be said, never rc 0 with a
    # broken snapshot.
    echo "run '$run': the writer failed (rc $rc): $(tail -3 "$4")"
    return 0
  fi
  id=$(json "$3" 'd["id"]')
  [ "$(json "$3" 'd["replicated"]')" = True ] || echo "run '$run': rc 0 without replicated: true"
  # every region that committed it holds every chunk it names
  icks R verify --run "$run" > "$T/verify-$run.out" 2> "$T/verify-$run.err" ||
    { echo "run '$run': verify fails after the writer acknowledged $id:"; cat "$T/verify-$run.out"; }
  if fresh_restore R "$run" "$id" "$T/restore-$run" 2> "$T/restore-$run.err"; then
    same_tree "$5" "$T/restore-$run/checkpoint-3"
  else
    echo "run '$run': acknowledged snapshot $id cannot be restored: $(tail -1 "$T/restore-$run.err")"
  fi
}
check_run cli "$rc_cli" "$T/cli.json" "$T/cli.err" "$CW/checkpoint-3" > "$T/wrong"
check_run dmn "$rc_dmn" "$T/dmn.json" "$T/dmn.err" "$DW/checkpoint-3" >> "$T/wrong"
[ ! -s "$T/wrong" ] || { tail -20 "$T/i-D/daemon.log" >&2; cat "$T/wrong" >&2; die "a stalled writer lost its snapshot"; }
kill -CONT "${IPID[D]}" 2> /dev/null || true
istop D
echo "stalled-writer: ok ($((SECONDS - T0)) s)"
