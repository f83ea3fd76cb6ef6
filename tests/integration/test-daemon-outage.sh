#!/usr/bin/env bash
# One region made unwritable does not hold back the other two: snapshots
# stay durable, status shows the region's error and lag, and the region
# catches up once writable again.
. "$(dirname "$0")/lib.sh"
write_config 32K 128K 512K
set_settle 1
try_mount -t tmpfs -o size=256m tmpfs "$T/regions/c" || skip "mounting a tmpfs is not permitted here (needed to make a region read-only)"
start_daemon
mkdir -p "$T/watch/r1"

step "all regions healthy: a commit is replicated"
head -c $((2 << 20)) /dev/urandom > "$T/watch/r1/step_100.pt"
cks commit "$T/watch/r1/step_100.pt" --wait replicated --timeout 60 -q

step "region c becomes read-only"
mount -o remount,ro "$T/regions/c"
head -c $((4 << 20)) /dev/urandom > "$T/watch/r1/step_200.pt"
cks commit "$T/watch/r1/step_200.pt" --wait durable --timeout 60 --json > "$T/c.json" \
  || { tail "$T/daemon.log"; die "commit --wait durable failed with one region down"; }
[ "$(json "$T/c.json" 'd["regions_committed"]')" = 2 ] || die "expected 2 regions committed"
ctime=$(stat -c %Z.%z "$T/watch/r1/step_200.pt")
expect_fail 1 cks commit "$T/watch/r1/step_200.pt" --wait replicated --timeout 3
grep -q "2 of 3 regions" "$T/err" || { cat "$T/err"; die "timeout message does not say 2 of 3"; }

step "the same unit committed again while c lags: its snapshot, not read or pinned again"
cks commit "$T/watch/r1/step_200.pt" --wait durable --timeout 30 --json > "$T/c2.json"
[ "$(json "$T/c2.json" 'd["id"]')" = "$(json "$T/c.json" 'd["id"]')" ] || die "a second snapshot of an unchanged unit"
# a second pin link (a second read) would have moved the file's ctime
[ "$(stat -c %Z.%z "$T/watch/r1/step_200.pt")" = "$ctime" ] || die "the unchanged unit was pinned again"
[ "$(grep -c 'event=snapshot .*unit=r1/step_200.pt' "$T/daemon.log")" = 1 ] || die "step_200 taken twice"

step "status shows the failing region, its error and its pending work"
wait_for 20 sh -c "'$CKPTSYNC' --config '$CONF' status --json | grep -q 'Read-only'" || { cks status; die "no error in status"; }
rc=0; cks status --json > "$T/st.json" || rc=$?
[ "$rc" = 4 ] || die "status exited $rc with region c failing, not 4"
cks status || [ $? = 4 ]
[ "$(json "$T/st.json" '[r["state"] for r in d["regions"] if r["name"]=="c"][0]')" = backoff ] || die "region c not in backoff"
[ "$(json "$T/st.json" '[r["pending_chunks"] for r in d["regions"] if r["name"]=="c"][0]')" -gt 0 ] || die "no pending chunks for c"
[ "$(json "$T/st.json" '[r["pending_chunks"] for r in d["regions"] if r["name"]=="a"][0]')" = 0 ] || die "region a is held back"
[ "$(json "$T/st.json" 'd["runs"][0]["latest"]["state"]')" = durable ] || die "latest should be durable"
# two of three regions have all of it: the upload is two thirds done
[ "$(json "$T/st.json" '60 < d["runs"][0]["latest"]["uploaded_percent"] < 70')" = True ] \
  || die "uploaded_percent $(json "$T/st.json" 'd["runs"][0]["latest"]["uploaded_percent"]') is not ~67"

step "region c writable again: it catches up"
mount -o remount,rw "$T/regions/c"
cks retry c
cks flush --wait replicated --deadline 60 || die "region c did not catch up"
cks status --json > "$T/st2.json"
[ "$(json "$T/st2.json" '[r["state"] for r in d["regions"] if r["name"]=="c"][0]')" = ok ] || die "c not ok"
stop_daemon
cks verify --run r1 > "$T/v.txt" || { cat "$T/v.txt"; die "verify"; }
[ "$(grep -c ' complete:' "$T/v.txt")" = 3 ] || die "not all regions complete"
echo "daemon-outage: ok"
