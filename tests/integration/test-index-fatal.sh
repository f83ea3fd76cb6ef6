#!/usr/bin/env bash
# A failed index commit (the test hook CKPTSYNC_FAULT_INDEX_COMMIT=N makes
# the Nth write commit of a process fail with EIO) puts the index into a
# fatal state that stops new work: the daemon reports degraded with the
# reason, once in its log; commits fail at once with a clear message
# (a waiter too, rather than waiting forever); status and a CLI restore of
# an earlier snapshot keep working; a restart takes up the work again.
# The CLI commands that write exit 1 naming the index.
. "$(dirname "$0")/lib.sh"
write_config 32K 128K 512K
set_settle 1
IX="$STATE/index"

step "an earlier snapshot, replicated; a second one durable while region c is broken"
start_daemon
make_file "$T/watch/r1/step_100.pt" 1
cks commit "$T/watch/r1/step_100.pt" --wait replicated --timeout 60 --json > "$T/c1.json"
id1=$(json "$T/c1.json" 'd["id"]')
mv "$T/regions/c" "$T/regions/c.away"
echo "not a directory" > "$T/regions/c"
make_file "$T/watch/r1/step_200.pt" 2
cks commit "$T/watch/r1/step_200.pt" --wait durable --timeout 60 -q
stop_daemon

step "restarted with the fault set, region c back: its first commit fails"
# Nothing at start-up writes to an index that knows its regions and runs,
# and an unchanged unit is not written again, so write commit 1 of this
# process is region c's worker recording the first chunk it caught up.
export CKPTSYNC_FAULT_INDEX_COMMIT=1
start_daemon
unset CKPTSYNC_FAULT_INDEX_COMMIT
# A commit that waits for replication: it is told the daemon is degraded,
# as a parked waiter or at its request (whichever the failure comes
# before), never left waiting.
cks commit "$T/watch/r1/step_200.pt" --wait replicated --timeout 60 > "$T/c2.out" 2> "$T/c2.err" &
waiter=$!
rm "$T/regions/c"
mv "$T/regions/c.away" "$T/regions/c"
cks retry c
wait_for 30 sh -c "'$CKPTSYNC' --config '$CONF' status --json | grep -q '\"degraded\": *true'" \
  || { cks status; tail -20 "$T/daemon.log"; die "the daemon did not become degraded"; }
rc=0; wait "$waiter" || rc=$?
[ "$rc" = 1 ] && grep -qF "commit of index \"$IX\" failed" "$T/c2.err" && grep -q degraded "$T/c2.err" \
  || { cat "$T/c2.err"; die "the waiting commit exited $rc, not told the daemon is degraded"; }

step "status says degraded, with the reason and the time (exit 3)"
rc=0; cks status --json > "$T/st.json" || rc=$?
[ "$rc" = 3 ] || die "status --json exited $rc while degraded, not 3"
python3 - "$T/st.json" "$IX" <<'EOF2' || { cat "$T/st.json"; die "status --json (degraded)"; }
import json, sys, time
d = json.load(open(sys.argv[1])); ix = sys.argv[2]
assert d["degraded"] is True, d["degraded"]
assert d["degraded_reason"] == 'commit of index "%s" failed: Input/output error' % ix, d["degraded_reason"]
assert 0 < d["degraded_time"] <= time.time() + 1, d["degraded_time"]
assert d["runs"][0]["durable_latest"]["id"], d["runs"][0]
EOF2
rc=0; cks status > "$T/st.txt" || rc=$?
[ "$rc" = 3 ] || die "status (human) exited $rc while degraded, not 3"
grep -q "DEGRADED" "$T/st.txt" && grep -qF "$IX" "$T/st.txt" || { cat "$T/st.txt"; die "human status"; }

step "a new commit fails at once with a clear message"
make_file "$T/watch/r1/step_300.pt" 1
expect_fail 1 cks commit "$T/watch/r1/step_300.pt" --wait durable --timeout 60
grep -q "the daemon is degraded (commit of index \"$IX\" failed: Input/output error) and takes no new work" "$T/err" \
  || { cat "$T/err"; die "commit while degraded: unclear message"; }

step "a CLI restore of the earlier snapshot works meanwhile"
cks restore --run r1 --snapshot "$id1" --to "$T/restored" -q || die "restore while the daemon is degraded"
cmp "$T/watch/r1/step_100.pt" "$T/restored/step_100.pt" || die "restored content differs"
daemon_answers cks || die "status stopped answering"

step "the daemon log names the failure once"
[ "$(grep -c 'event=degraded' "$T/daemon.log")" = 1 ] || { grep 'event=degraded' "$T/daemon.log"; die "event=degraded not logged exactly once"; }
grep -qF "event=degraded reason=\"commit of index \\\"$IX\\\" failed: Input/output error\"" "$T/daemon.log" \
  || { grep degraded "$T/daemon.log"; die "event=degraded does not give the reason"; }
grep 'event=region_failed' "$T/daemon.log" | grep 'durable write' > /dev/null && die "the index's failure was blamed on a region"
stop_daemon

step "restarted, the daemon takes the work up again"
start_daemon
cks flush --wait replicated --deadline 60 || { cks status; die "the pending snapshot did not replicate after a restart"; }
cks status --json > "$T/st2.json"
[ "$(json "$T/st2.json" 'd["degraded"]')" = False ] || die "still degraded after a restart"
stop_daemon

step "CLI commands that write exit 1, naming the index"
CKPTSYNC_FAULT_INDEX_COMMIT=1 expect_fail 1 cks snapshot "$T/watch/r1/step_300.pt" --run r1
grep -qF "commit of index \"$IX\" failed: Input/output error" "$T/err" || { cat "$T/err"; die "snapshot: message"; }
CKPTSYNC_FAULT_INDEX_COMMIT=1 expect_fail 1 cks restore --run r1 --snapshot "$id1" --to "$T/restored2"
grep -qF "commit of index \"$IX\" failed" "$T/err" || { cat "$T/err"; die "restore: message"; }
cmp "$T/watch/r1/step_100.pt" "$T/restored2/step_100.pt" || die "restore placed no files before its bookkeeping"
CKPTSYNC_FAULT_INDEX_COMMIT=1 expect_fail 1 cks reindex --force
grep -qF "commit of index \"$IX\" failed" "$T/err" || { cat "$T/err"; die "reindex: message"; }
cks forget --run r1 --keep-last 1 -q
CKPTSYNC_FAULT_INDEX_COMMIT=1 expect_fail 1 cks prune --grace 0
grep -qF "commit of index \"$IX\" failed" "$T/err" || { cat "$T/err"; die "prune: message"; }
cks snapshot "$T/watch/r1/step_300.pt" --run r1 -q || die "a snapshot without the fault failed"
echo "index-fatal: ok"
