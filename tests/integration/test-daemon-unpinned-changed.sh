#!/usr/bin/env bash
# The other side of test-daemon-unpinned-reupload: the file the daemon did
# not pin (unchanged since checkpoint-10, its chunks in every region by the
# index's word) whose chunks another instance pruned is CHANGED before the
# region worker's confirmation can pin it (daemon/latepin.h).  Its bytes
# are gone, so the snapshot cannot be completed: it is dropped, never
# published, and the waiting commit is told so by name (not "No such file
# or directory"); the daemon takes the unit again, and a second commit
# ends durable with the new bytes, restoring bit for bit.
#   1. A commits checkpoint-10 (f1, f2) and checkpoint-15, replicated;
#   2. B forgets checkpoint-10 and prunes it (grace 0);
#   3. checkpoint-10 is renamed checkpoint-20 (identities kept); A's daemon
#      runs with CKPTSYNC_TEST_LATEPIN_GATE: the first late pin waits at
#      the gate; the test rewrites f1 in place there (same size, new bytes)
#      and opens the gate;
#   4. the commit fails naming the dropped snapshot; no region lists it;
#   5. a second commit ends durable; B restores it bit for bit.
# regions: dir
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
set_settle 1
export CKPTSYNC_TEST_LATEPIN_GATE="$T/gate"
start_daemon
second_instance # B: $T/b.conf, `b`
c10="$T/watch/r1/checkpoint-10"
c20="$T/watch/r1/checkpoint-20"
commit() { cks commit "$1" --wait durable --timeout 60 --json > "$2" 2> "$T/c.err"; }

step "A: checkpoint-10 (f1, f2) and checkpoint-15 committed and replicated"
make_file "$c10/f1.bin" 2
make_file "$c10/f2.bin" 1
commit "$c10" "$T/c10.json" || { cat "$T/c.err"; die "commit of checkpoint-10 failed"; }
make_file "$T/watch/r1/checkpoint-15/g.bin" 1
commit "$T/watch/r1/checkpoint-15" "$T/c15.json" || { cat "$T/c.err"; die "commit of checkpoint-15"; }
cks flush --wait replicated --deadline 30 || die "flush on A failed"
[ ! -e "$T/gate.reached" ] || die "a late pin before any prune"

step "B: forgets checkpoint-10 and prunes it (grace 0)"
b forget --run r1 --keep-last 1 --json > "$T/f.json"
[ "$(json "$T/f.json" 'd["forgotten"]')" = 1 ] || { cat "$T/f.json"; die "B did not forget one snapshot"; }
b prune --grace 0 > /dev/null 2> "$T/p.err" || { cat "$T/p.err"; die "B's prune failed"; }

step "A: checkpoint-20 (renamed) committed; f1 rewritten at the late pin's gate"
mv "$c10" "$c20"
rc=0
( commit "$c20" "$T/c20.json" ) & cpid=$!
wait_for 60 test -e "$T/gate.reached" || { tail -20 "$T/daemon.log"; die "no late pin reached the gate"; }
python3 - "$c20/f1.bin" <<'PY'
import os, sys
n = os.path.getsize(sys.argv[1])
with open(sys.argv[1], "r+b") as f:
    f.write(os.urandom(n))
PY
touch "$T/gate"
wait "$cpid" || rc=$?
[ "$rc" != 0 ] || { cat "$T/c20.json"; die "the commit succeeded although f1's snapshotted bytes are gone"; }
grep -q "was dropped before it was committed in enough regions" "$T/c.err" ||
  { cat "$T/c.err"; die "the commit's error does not say the snapshot was dropped"; }
grep -q "event=retake .*unit=r1/checkpoint-20" "$T/daemon.log" || die "no retake of checkpoint-20"
grep -q "not pinned at ingest, and changed, gone or not linkable since" "$T/daemon.log" || die "no late-pin warning"
dropped=$(sed -n 's/.*snapshot \([^ ]*\) of "r1\/checkpoint-20" was dropped.*/\1/p' "$T/c.err")
[ -n "$dropped" ] || { cat "$T/c.err"; die "the error names no snapshot"; }
# (the daemon's own retake of checkpoint-20, with f1's new bytes, may be
# listed already: the dropped one must not be)
b ls --remote --run r1 --json > "$T/ls.json"
[ "$(json "$T/ls.json" "[s['id'] for s in d if s['id'] == '$dropped']")" = "[]" ] ||
  { cat "$T/ls.json"; die "a region lists the dropped snapshot $dropped (f1's old bytes)"; }

step "A: committed again: durable with the new bytes; B restores it bit for bit"
commit "$c20" "$T/c20b.json" || { cat "$T/c.err"; die "the second commit of checkpoint-20 failed"; }
id=$(json "$T/c20b.json" 'd["id"]')
[ "$(json "$T/c20b.json" 'd["durable"]')" = True ] || { cat "$T/c20b.json"; die "not durable"; }
cks flush --wait replicated --deadline 30 || die "flush on A failed"
b restore --run r1 --snapshot "$id" --to "$T/out" > /dev/null 2> "$T/r.err" ||
  { cat "$T/r.err"; die "restore of $id on B failed"; }
same_tree "$c20" "$T/out/checkpoint-20"
[ -z "$(ls -A "$T/watch/.ckptsync-pins" 2>/dev/null)" ] || die "pins left after replication"
stop_daemon
echo "daemon-unpinned-changed: ok"
