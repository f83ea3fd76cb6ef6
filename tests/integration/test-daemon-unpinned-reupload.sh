#!/usr/bin/env bash
# A file the daemon did not pin (daemon/ingest.c: unchanged since an
# earlier snapshot, every chunk in every region by the index's word) whose
# chunks another instance's prune deleted meanwhile is uploaded again, and
# the commit waiting for the snapshot ends durable:
#   1. instance A's daemon commits checkpoint-10 (f1, f2) and checkpoint-15,
#      replicated (the pins are gone; the index knows f1 and f2 by their
#      identity);
#   2. instance B (its own state directory, the same regions) forgets
#      checkpoint-10 (keep-last 1) and prunes with grace 0: f1's and f2's
#      chunks are deleted from every region; A's index still says every
#      region holds them;
#   3. on A, checkpoint-10 is renamed checkpoint-20 (a directory rename: f1
#      and f2 keep dev, inode, size, mtime and ctime) and a new file is
#      added; `ckptsync commit --wait durable` of checkpoint-20 takes f1 and
#      f2 from the index without a pin link, the region workers' confirmation
#      before the publish finds their chunks missing and queues them again;
#   4. the commit ends durable, with no retake; the regions list it and B
#      restores it bit for bit; fsck on A is clean (after a reindex).
# The order is sequential (B's prune ends before A sees checkpoint-20), so
# no hook is needed.  On main step 3's commit failed with "snapshot <id>:
# No such file or directory" (the worker found no pin link for f1: event
# retake reason=changed).
# regions: dir s3
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
set_settle 1
start_daemon
second_instance # B: $T/b.conf, `b`
c10="$T/watch/r1/checkpoint-10"
c20="$T/watch/r1/checkpoint-20"

# commit UNIT OUT: commit --wait durable --json into OUT (exit status kept)
commit() { cks commit "$1" --wait durable --timeout 60 --json > "$2" 2> "$T/c.err"; }

step "A: checkpoint-10 (f1, f2) and checkpoint-15 committed and replicated"
make_file "$c10/f1.bin" 2
make_file "$c10/f2.bin" 1
commit "$c10" "$T/c10.json" || { cat "$T/c.err"; die "commit of checkpoint-10 failed"; }
make_file "$T/watch/r1/checkpoint-15/g.bin" 1
commit "$T/watch/r1/checkpoint-15" "$T/c15.json" || { cat "$T/c.err"; die "commit of checkpoint-15"; }
cks flush --wait replicated --deadline 30 || die "flush on A failed"
[ -z "$(ls -A "$T/watch/.ckptsync-pins" 2>/dev/null)" ] || die "pins left after replication"
tree_sums "$c10" > "$T/sums10"

step "B: forgets checkpoint-10 and prunes it (grace 0)"
b forget --run r1 --keep-last 1 --json > "$T/f.json"
[ "$(json "$T/f.json" 'd["forgotten"]')" = 1 ] || { cat "$T/f.json"; die "B did not forget one snapshot"; }
b prune --grace 0 --json > "$T/p.json" 2> "$T/p.err" || { cat "$T/p.err"; die "B's prune failed"; }
[ "$(json "$T/p.json" 'sum(g["deleted"] for g in d["regions"])')" -ge 6 ] ||
  { cat "$T/p.json"; die "B's prune did not delete f1's and f2's chunks in every region"; }

step "A: checkpoint-10 renamed checkpoint-20 (identities kept), a file added, committed"
stat -c '%d %i %s %Y %Z' "$c10/f1.bin" "$c10/f2.bin" > "$T/id-before"
mv "$c10" "$c20"
stat -c '%d %i %s %Y %Z' "$c20/f1.bin" "$c20/f2.bin" > "$T/id-after"
cmp -s "$T/id-before" "$T/id-after" || die "the rename changed the files' identity (test premise)"
make_file "$c20/f3.bin" 1
rc=0
commit "$c20" "$T/c20.json" || rc=$?
[ "$rc" = 0 ] || { cat "$T/c.err" "$T/c20.json"; grep -E 'event=(retake|reupload)' "$T/daemon.log" >&2 || true
  die "commit of checkpoint-20 failed (exit $rc)"; }
id=$(json "$T/c20.json" 'd["id"]')
[ "$(json "$T/c20.json" 'd["durable"]')" = True ] || { cat "$T/c20.json"; die "not durable"; }
grep -q "event=reupload .*snapshot=$id" "$T/daemon.log" ||
  { tail -30 "$T/daemon.log"; die "the daemon found no chunk of $id missing (test premise: B's prune)"; }
! grep -q "event=retake" "$T/daemon.log" || { grep "event=retake" "$T/daemon.log"; die "a retake"; }

step "the regions list it; B restores it bit for bit; fsck on A"
cks flush --wait replicated --deadline 30 || die "flush on A failed"
b ls --remote --run r1 --json > "$T/ls.json"
[ "$(json "$T/ls.json" "[(s['id'], s['durable']) for s in d if s['step'] == 20]")" = "[('$id', True)]" ] ||
  { cat "$T/ls.json"; die "the regions do not list $id as durable"; }
b restore --run r1 --snapshot "$id" --to "$T/out" > /dev/null 2> "$T/r.err" ||
  { cat "$T/r.err"; die "restore of $id on B failed"; }
same_tree "$c20" "$T/out/checkpoint-20"
(cd "$T/out/checkpoint-20" && sha256sum -c --quiet "$T/sums10") || die "f1/f2 restored differ"
[ -z "$(ls -A "$T/watch/.ckptsync-pins" 2>/dev/null)" ] || die "pins left after replication"
stop_daemon
# A's index keeps the record of checkpoint-10's snapshot, which B forgot
# (as in test-commit-forgotten): reindex drops it, then fsck is clean
cks reindex > /dev/null 2> "$T/rx.err" || { cat "$T/rx.err"; die "reindex on A failed"; }
cks fsck > "$T/fsck.out" 2>&1 || { cat "$T/fsck.out"; die "fsck on A"; }
echo "daemon-unpinned-reupload: ok"
