#!/usr/bin/env bash
# regions: dir s3
# `ckptsync reindex`: a fresh instance rebuilds its index from the regions
# and dedups against the repository.
#   1. instance A snapshots two runs; instance B (empty state) reindexes:
#      chunk, snapshot and run counts match what the regions hold; B's
#      snapshot of the same data uploads nothing; fsck passes on B;
#   2. a chunk deleted from one region behind the index's back: reindex
#      leaves that region's bit clear, and the next snapshot uploads it
#      there (only there); a chunk gone from every region is counted as
#      missing and uploaded everywhere again;
#   3. --region: the source region; an unknown name exits 1 naming it;
#   4. the daemon's pending work: reindex refuses, --force keeps the
#      pending snapshot and the daemon finishes it afterwards; fsck passes.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"

# chunk_keys R: the chunk objects region R holds.
chunk_keys() { rg_keys "$1" chunks; }
# man_chunks R RUN ID: the distinct chunk keys manifest ID names.
man_chunks() {
  rg_get "$1" "snapshots/$2/$3" "$T/man.tmp"
  awk '$1 == "c" { print "chunks/" substr($2, 1, 2) "/" $2 }' "$T/man.tmp" | sort -u
}
man_refs() { rg_get "$1" "snapshots/$2/$3" "$T/man.tmp"; awk '$1 == "c"' "$T/man.tmp" | wc -l; }
# puts FILE: objects the snapshot in FILE put, per region "a b c".
puts() { json "$1" '" ".join(str(r["objects_put"]) for r in d["regions"])'; }

inst A; inst B

# ============================================================================
step "1. A snapshots two runs"
make_file "$T/src/r1/ck/model.bin" 3
cp "$T/src/r1/ck/model.bin" "$T/src/r1/ck/copy.bin"    # references the same chunks twice
echo '{"step": 1}' > "$T/src/r1/ck/state.json"
make_file "$T/src/r2/ck/weights.bin" 2
icks A snapshot "$T/src/r1/ck" --run r1 --step 1 --json > "$T/a1.json" || die "A: snapshot r1"
icks A snapshot "$T/src/r2/ck" --run r2 --step 5 --json > "$T/a2.json" || die "A: snapshot r2"
id1=$(json "$T/a1.json" 'd["id"]'); id2=$(json "$T/a2.json" 'd["id"]')
nchunks=$(chunk_keys a | wc -l)
[ "$nchunks" -gt 10 ] || die "region a holds only $nchunks chunks"
refs=$(( $(man_refs a r1 "$id1") + $(man_refs a r2 "$id2") ))

step "B (empty state) reindexes"
icks B reindex --json > "$T/rx1.json" || die "B: reindex"
cat "$T/rx1.json"
[ "$(json "$T/rx1.json" 'd["source"]')" = a ] || die "source is not the first healthy region"
[ "$(json "$T/rx1.json" 'd["chunks"]')" = "$nchunks" ] || die "reindex counted $(json "$T/rx1.json" 'd["chunks"]') chunks, region a holds $nchunks"
[ "$(json "$T/rx1.json" 'd["snapshots"]')" = 2 ] || die "reindex: not 2 snapshots"
[ "$(json "$T/rx1.json" 'd["runs"]')" = 2 ] || die "reindex: not 2 runs"
[ "$(json "$T/rx1.json" 'd["references"]')" = "$refs" ] || die "reindex: references != $refs chunk lines"
[ "$(json "$T/rx1.json" 'd["missing_chunks"]')" = 0 ] || die "reindex: missing chunks"
[ "$(json "$T/rx1.json" 'd["unreferenced_chunks"]')" = 0 ] || die "reindex: unreferenced chunks"
[ "$(json "$T/rx1.json" '[r["chunks"] for r in d["regions"]] == [r["chunks"] for r in d["regions"]][:1] * 3')" = True ] ||
  die "regions' chunk counts differ"
[ "$(json "$T/rx1.json" 'all(r["listed"] and r["snapshots"] == 2 and r["error"] is None for r in d["regions"])')" = True ] ||
  die "a region was not listed or misses a snapshot"
[ "$(json "$T/rx1.json" 'd["bytes"] > 0 and d["seconds"] >= 0')" = True ] || die "bytes/seconds"
icks B ls --json > "$T/ls.json"
[ "$(json "$T/ls.json" 'sorted(x["id"] for x in d)')" = "$(python3 -c 'import sys; print(sorted(sys.argv[1:]))' "$id1" "$id2")" ] ||
  die "B's index does not list A's snapshots"
[ "$(json "$T/ls.json" 'all(x["regions"] == 3 for x in d)')" = True ] || die "records not committed in 3 regions"
icks B fsck || die "fsck on B after reindex"

step "B snapshots the same data: nothing new is uploaded"
icks B snapshot "$T/src/r1/ck" --run r1 --step 2 --json > "$T/b1.json" || die "B: snapshot"
[ "$(json "$T/b1.json" 'd["new_chunks"]')" = 0 ] || die "B stored new chunks: $(cat "$T/b1.json")"
[ "$(json "$T/b1.json" 'd["new_bytes"]')" = 0 ] || die "B stored new bytes"
[ "$(puts "$T/b1.json")" = "0 0 0" ] || die "B put objects: $(puts "$T/b1.json")"
[ "$(json "$T/b1.json" 'd["committed"]')" = 3 ] || die "B's snapshot not committed in 3 regions"
icks B fsck || die "fsck on B after its snapshot"

step "reindex again: the same index (its own snapshot included)"
icks B reindex --json > "$T/rx2.json" || die "B: second reindex"
[ "$(json "$T/rx2.json" 'd["snapshots"]')" = 3 ] || die "second reindex: not 3 snapshots"
[ "$(json "$T/rx2.json" 'd["dropped_chunks"] + d["dropped_snapshots"]')" = 0 ] || die "second reindex dropped records"
icks B fsck || die "fsck after the second reindex"

# ============================================================================
step "2. a chunk deleted from region a: its bit stays clear, the next snapshot puts it there"
victim=$(man_chunks a r1 "$id1" | sed -n 1p)
rg_rm a "$victim"
icks B reindex --json > "$T/rx3.json" || die "reindex after the deletion"
[ "$(json "$T/rx3.json" '[r["chunks"] for r in d["regions"]]')" = "[$((nchunks - 1)), $nchunks, $nchunks]" ] ||
  die "per-region chunks: $(json "$T/rx3.json" '[r["chunks"] for r in d["regions"]]')"
[ "$(json "$T/rx3.json" 'd["missing_chunks"]')" = 0 ] || die "a chunk still in b and c counted missing"
icks B snapshot "$T/src/r1/ck" --run r1 --step 3 --json > "$T/b2.json" || die "snapshot after the deletion"
[ "$(puts "$T/b2.json")" = "1 0 0" ] || die "expected one put to region a only, got $(puts "$T/b2.json")"
[ "$(json "$T/b2.json" 'd["new_chunks"]')" = 0 ] || die "the chunk counted as new"
rg_has a "$victim" || die "$victim is not back in region a"
icks B fsck || die "fsck after the re-upload"

step "a chunk gone from every region: missing, then uploaded everywhere"
victim=$(man_chunks a r2 "$id2" | sed -n 1p)
for r in a b c; do rg_rm "$r" "$victim"; done
icks B reindex --json > "$T/rx4.json" || die "reindex with a chunk gone everywhere"
[ "$(json "$T/rx4.json" 'd["missing_chunks"]')" = 1 ] || die "missing_chunks is not 1"
[ "$(json "$T/rx4.json" 'd["dropped_chunks"]')" = 1 ] || die "dropped_chunks is not 1"
icks B fsck || die "fsck with a missing chunk"
icks B snapshot "$T/src/r2/ck" --run r2 --step 6 --json > "$T/b3.json" || die "snapshot r2 again"
[ "$(puts "$T/b3.json")" = "1 1 1" ] || die "expected one put per region, got $(puts "$T/b3.json")"
for r in a b c; do rg_has "$r" "$victim" || die "$victim not back in region $r"; done

# ============================================================================
step "3. --region: the source; an unknown name exits 1 naming it"
icks B reindex --region b --json > "$T/rx5.json" || die "reindex --region b"
[ "$(json "$T/rx5.json" 'd["source"]')" = b ] || die "--region b: source $(json "$T/rx5.json" 'd["source"]')"
expect_fail 1 icks B reindex --region nosuchregion
grep -q "nosuchregion" "$T/err" || { cat "$T/err"; die "the message does not name the region"; }
expect_fail 2 icks B reindex --bogus
icks B reindex --help | grep "usage: ckptsync reindex" > /dev/null || die "reindex --help"
icks B reindex > "$T/rx.txt" || die "human output"
grep -q "snapshots in 2 runs" "$T/rx.txt" || { cat "$T/rx.txt"; die "human summary"; }

# ============================================================================
step "4. the daemon's pending work: refused, --force keeps it"
if [ "$RK" = s3 ]; then stop_s3 c; else mv "$T/regions/c" "$T/regions/c.away"; fi
inst P settle=1
mkdir -p "$T/i-P/watch/r3/checkpoint-7"
make_file "$T/i-P/watch/r3/checkpoint-7/model.bin" 2
idaemon P
icks P commit "$T/i-P/watch/r3/checkpoint-7" --step 7 --wait durable --timeout 60 --json > "$T/c.json" ||
  { tail -20 "$T/i-P/daemon.log" >&2; die "commit --wait durable with region c down"; }
istop P
if [ "$RK" = s3 ]; then restart_s3 c; else mv "$T/regions/c.away" "$T/regions/c"; fi
expect_fail 1 icks P reindex
grep -q "pending work" "$T/err" || { cat "$T/err"; die "refusal does not say why"; }
icks P fsck || die "fsck on P before the forced reindex"
icks P reindex --force --json > "$T/rx6.json" || die "reindex --force"
[ "$(json "$T/rx6.json" '[r["snapshots"] for r in d["regions"]][2] < [r["snapshots"] for r in d["regions"]][0]')" = True ] ||
  die "region c counted the pending snapshot as committed"
icks P fsck || die "fsck on P after reindex --force"
idaemon P
icks P flush --wait replicated --deadline 60 || { tail -20 "$T/i-P/daemon.log" >&2; die "P did not finish after reindex --force"; }
istop P
icks P fsck || die "fsck on P after the daemon finished"
icks P reindex --json > "$T/rx7.json" || die "reindex once the queue is empty"
[ "$(json "$T/rx7.json" 'len(set(r["snapshots"] for r in d["regions"]))')" = 1 ] || die "regions still differ"
icks P fsck || die "final fsck"
echo "reindex: ok"
