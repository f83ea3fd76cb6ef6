#!/usr/bin/env bash
# The index's chunk presence is a cache: chunks and manifests removed from
# the regions behind its back (a person, a lifecycle rule, a wiped bucket)
# must not let a snapshot be committed over a hole, and verify must name
# what is damaged where.
#   1. a chunk gone from every region, reused by the next CLI snapshot:
#      confirmed with the regions and uploaded again;
#   2. the same through the daemon: commit --wait replicated returns only
#      once the chunk is back everywhere;
#   3. a region wiped while the daemon runs: the next snapshot uploads what
#      it needs there and restores from that region alone; verify names the
#      region for the older snapshots it lost;
#   4. damaged manifests and a damaged commit record: verify names region
#      and key of each and exits 1; restore reads another region's copy.
# regions: dir ceph
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"

# ---- helpers ---------------------------------------------------------------
# chunks_of R RUN ID [FILE]: the chunk keys manifest ID names (read from
# region R), or those of its file FILE only.
chunks_of() {
  rg_get "$1" "snapshots/$2/$3" "$T/man.tmp"
  awk -v want="${4:-}" '$1 == "f" { path = $NF }
    $1 == "c" && (want == "" || path == want || substr(path, length(path) - length(want)) == "/" want) {
      print "chunks/" substr($2, 1, 2) "/" $2 }' "$T/man.tmp" | sort -u
}
in_all() { local r; for r in a b c; do rg_has "$r" "$1" || return 1; done; }
in_none() { local r; for r in a b c; do ! rg_has "$r" "$1" || return 1; done; }
# commit_ck PATH STEP: daemon d commits it, replicated; prints the id.
commit_ck() {
  icks d commit "$1" --step "$2" --wait replicated --timeout 120 --json > "$T/commit.json" ||
    { tail -20 "$T/i-d/daemon.log" >&2; die "commit $1 --wait replicated failed"; }
  [ "$(json "$T/commit.json" 'd["regions_committed"]')" = 3 ] || die "$1: not in 3 regions"
  json "$T/commit.json" 'd["id"]'
}

inst cli; inst d; inst x   # x: restores on a fresh state

# ============================================================================
step "1. a chunk gone from every region: the same CLI instance's next snapshot uploads it again"
make_file "$T/src/s1/model.bin" 2
echo "config 1" > "$T/src/s1/config.json"
icks cli snapshot "$T/src/s1" --run rp --step 1 --json > "$T/s1.json" || die "snapshot S1"
id1=$(json "$T/s1.json" 'd["id"]')
chunk=$(chunks_of a rp "$id1" model.bin | sed -n 1p)
[ -n "$chunk" ] || die "no chunk in S1's manifest"
for r in a b c; do rg_rm "$r" "$chunk"; done
in_none "$chunk" || die "$chunk still somewhere"
cp -a "$T/src/s1" "$T/src/s2"
echo "one more small file" > "$T/src/s2/extra.txt"
icks cli snapshot "$T/src/s2" --run rp --step 2 --json > "$T/s2.json" 2> "$T/s2.err" ||
  { cat "$T/s2.err" >&2; die "snapshot S2 (reusing a chunk gone from every region) failed"; }
id2=$(json "$T/s2.json" 'd["id"]')
[ "$(json "$T/s2.json" 'd["committed"]')" = 3 ] || die "S2 not committed in 3 regions"
[ "$(json "$T/s2.json" 'd["confirmed_chunks"] > 0')" = True ] || die "S2 confirmed no chunk with the regions"
[ "$(json "$T/s2.json" 'd["reuploaded_chunks"] >= 1')" = True ] || die "S2 uploaded nothing again: $(cat "$T/s2.json")"
in_all "$chunk" || die "$chunk is not back in every region"
fresh_restore x rp "$id2" "$T/restored/s2"
same_tree "$T/src/s2" "$T/restored/s2/s2"
fresh_restore x rp "$id1" "$T/restored/s1"   # S1 is complete again
same_tree "$T/src/s1" "$T/restored/s1/s1"
cks verify -q || die "verify after the chunk was uploaded again"

# ============================================================================
step "2. the same through the daemon: commit --wait replicated returns once the chunk is back"
idaemon d
W="$T/i-d/watch/rd"
make_file "$W/checkpoint-1/model.bin" 2
echo "state 1" > "$W/checkpoint-1/trainer_state.txt"
d1=$(commit_ck "$W/checkpoint-1" 1)
chunk=$(chunks_of b rd "$d1" model.bin | tail -1)
[ -n "$chunk" ] || die "no chunk of model.bin in checkpoint-1's manifest"
for r in a b c; do rg_rm "$r" "$chunk"; done
in_none "$chunk" || die "$chunk still somewhere"
cp -a "$W/checkpoint-1" "$W/checkpoint-2"
echo "state 2" > "$W/checkpoint-2/trainer_state.txt"
echo "extra" > "$W/checkpoint-2/extra.txt"
d2=$(commit_ck "$W/checkpoint-2" 2)
for r in a b c; do rg_has "$r" "$chunk" || die "commit --wait replicated returned, but region $r lacks $chunk"; done
chunks_of a rd "$d2" | grep -x "$chunk" > /dev/null || die "checkpoint-2 does not reuse $chunk (test setup)"
grep -q "were gone although the index recorded them" "$T/i-d/daemon.log" ||
  die "the daemon did not say it uploads the chunk again"
fresh_restore x rd "$d2" "$T/restored/d2"
same_tree "$W/checkpoint-2" "$T/restored/d2/checkpoint-2"
cks verify -q || die "verify after the daemon uploaded the chunk again"

# ============================================================================
step "3. region c wiped while the daemon runs: the next snapshot restores from c alone"
rg_wipe c
[ -z "$(rg_keys c "")" ] || die "region c not empty"
cp -a "$W/checkpoint-2" "$W/checkpoint-3"
echo "state 3" > "$W/checkpoint-3/trainer_state.txt"
d3=$(commit_ck "$W/checkpoint-3" 3)
chunks_of a rd "$d3" > "$T/need"
rg_keys c "" > "$T/have-c"
lacking=$(comm -23 "$T/need" "$T/have-c")
[ -z "$lacking" ] || die "region c lacks chunks of the newest snapshot: $lacking"
grep -qx "snapshots/rd/$d3" "$T/have-c" || die "region c lacks the newest manifest"
grep -qx "repo" "$T/have-c" || die "the daemon did not write the repo object back into region c"
# a configuration with region c only
awk '/^\[/ { keep = ($0 !~ /^\[region\.[ab]\]$/) } keep' "$CONF" |
  sed -e "s|^state = .*|state = $T/i-c/state|" -e "s|^quorum = .*|quorum = 1|" > "$T/c-only.conf"
if ! grep -q '^\[region\.c\]' "$T/c-only.conf" || grep '^\[region\.[ab]\]' > /dev/null "$T/c-only.conf"; then
  die "c-only.conf does not hold region c alone"
fi
"$CKPTSYNC" --config "$T/c-only.conf" restore --run rd --latest --to "$T/restored/c-only" --json \
  > "$T/c-only.json" 2> "$T/c-only.err" || { cat "$T/c-only.err" >&2; die "restore --latest from region c alone"; }
[ "$(json "$T/c-only.json" 'd["id"]')" = "$d3" ] || die "restore from c alone did not take the newest snapshot"
same_tree "$W/checkpoint-3" "$T/restored/c-only/checkpoint-3"
"$CKPTSYNC" --config "$T/c-only.conf" verify --run rd --snapshot "$d3" -q ||
  die "the newest snapshot is not complete in region c"
cks verify --run rd --snapshot "$d3" -q || die "the newest snapshot is not complete in every region"
# The older snapshots lost their manifests (and chunks) in c.
set +e; cks verify --json > "$T/v3.json" 2> "$T/v3.err"; rc=$?; set -e
[ $rc = 1 ] || { cat "$T/v3.err" >&2; die "verify exited $rc with region c wiped, expected 1"; }
for r in a b; do
  [ "$(json "$T/v3.json" "[g['state'] for g in d['regions'] if g['name'] == '$r'][0]")" = complete ] ||
    die "verify: region $r is not complete"
done
[ "$(json "$T/v3.json" "[g['state'] for g in d['regions'] if g['name'] == 'c'][0]")" = INCOMPLETE ] ||
  die "verify: region c is not INCOMPLETE"
# S1, S2, checkpoint-1, checkpoint-2: four manifests gone from c
[ "$(json "$T/v3.json" "[g['manifests_missing'] for g in d['regions'] if g['name'] == 'c'][0]")" = 4 ] ||
  die "verify: region c should miss 4 manifests: $(cat "$T/v3.json")"
grep -q "region 'c': manifest \"snapshots/rd/$d1\" is missing" "$T/v3.err" ||
  { cat "$T/v3.err" >&2; die "verify does not name checkpoint-1's manifest missing in region c"; }
# verify --repair copies what c lost from the regions whose copies check out
cks verify --repair --json > "$T/v3r.json" 2> "$T/v3r.err" || { cat "$T/v3r.err" >&2; die "verify --repair"; }
[ "$(json "$T/v3r.json" "[g['repaired'] for g in d['regions'] if g['name'] == 'c'][0]")" -gt 4 ] ||
  die "verify --repair repaired too little in c: $(cat "$T/v3r.json")"
cks verify -q || die "verify after verify --repair"
"$CKPTSYNC" --config "$T/c-only.conf" verify -q || die "region c alone is not complete after the repair"
istop d

# ============================================================================
step "4. damaged manifests and a damaged commit record are named by verify; restore reads another copy"
make_file "$T/src/v1/model.bin" 1
make_file "$T/src/v2/model.bin" 1
icks cli snapshot "$T/src/v1" --run rv --step 1 --json > "$T/v1.json" || die "snapshot V1"
icks cli snapshot "$T/src/v2" --run rv --step 2 --json > "$T/v2.json" || die "snapshot V2"
v1=$(json "$T/v1.json" 'd["id"]'); v2=$(json "$T/v2.json" 'd["id"]')
cks verify --run rv -q || die "verify --run rv before any damage"
# region a's copy of V1 truncated to 100 bytes; a byte of region b's copy of V2 flipped
rg_get a "snapshots/rv/$v1" "$T/m1"; truncate -s 100 "$T/m1"; rg_put a "$T/m1" "snapshots/rv/$v1"
rg_get b "snapshots/rv/$v2" "$T/m2"; flip_byte "$T/m2"; rg_put b "$T/m2" "snapshots/rv/$v2"
expect_fail 1 cks verify --run rv
grep -q "region 'a': manifest \"snapshots/rv/$v1\"" "$T/err" ||
  { cat "$T/err" >&2; die "verify does not name region a's damaged manifest of V1"; }
grep -q "region 'b': manifest \"snapshots/rv/$v2\"" "$T/err" ||
  { cat "$T/err" >&2; die "verify does not name region b's damaged manifest of V2"; }
cks verify --run rv --json > "$T/v4.json" 2> /dev/null || true
for r in a b; do
  [ "$(json "$T/v4.json" "[g['manifests_damaged'] for g in d['regions'] if g['name'] == '$r'][0]")" = 1 ] ||
    die "verify --json: region $r should have 1 damaged manifest"
done
fresh_restore x rv "$v1" "$T/restored/v1"
same_tree "$T/src/v1" "$T/restored/v1/v1"
fresh_restore x rv "$v2" "$T/restored/v2"
same_tree "$T/src/v2" "$T/restored/v2/v2"
# a commit record of V1 in region c, one byte flipped
rec=$(rg_keys c commits/rv/ | grep "\.$v1\$" || true)
[ -n "$rec" ] || die "region c has no commit record of V1"
rg_get c "$rec" "$T/rec"; flip_byte "$T/rec"; rg_put c "$T/rec" "$rec"
expect_fail 1 cks verify --run rv
grep -q "region 'c': record \"$rec\" is damaged" "$T/err" ||
  { cat "$T/err" >&2; die "verify does not name the damaged commit record"; }
cks verify --run rv --json > "$T/v4.json" 2> /dev/null || true
[ "$(json "$T/v4.json" "[g['records_damaged'] for g in d['regions'] if g['name'] == 'c'][0]")" = 1 ] ||
  die "verify --json: region c should have 1 damaged record"
[ "$(json "$T/v4.json" "[g['state'] for g in d['regions'] if g['name'] == 'c'][0]")" = INCOMPLETE ] ||
  die "verify --json: region c with a damaged record should not be complete"
cks verify --repair -q || die "verify --repair of the damaged manifests and record"
cks verify -q || die "verify after repairing the damaged manifests and record"
echo "multi-presence: ok"
