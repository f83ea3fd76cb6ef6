#!/usr/bin/env bash
# regions: dir
# encrypted: yes
# A prune deletes recipes a writer names (issue 27, docs/deltas.md;
# docs/retention.md, W1): snapshot A of a torch checkpoint (bf16 weights
# that are master.to(torch.bfloat16): recipes R) is forgotten; a prune
# (grace 0) marks A's objects and is stopped (test hook) after its sweep's
# first delete in region a; a writer then takes the same checkpoint again,
# naming R (still in the region: HAS/index, nothing uploaded), reaches its
# check against prune's marks in region a, finds that mark being swept and
# waits (its log says so); the prune is continued and deletes R there.
#  (1) `ckptsync snapshot`: region a is left out, the error naming the
#      recipes/ key the prune deleted (phase B's bytes are not kept), the
#      snapshot exits 1; no region holds a manifest naming an object it
#      lacks; the rerun publishes everywhere, restores bit for bit, verify
#      is clean.
#  (2) ckptsyncd: the region worker queues each deleted recipe again from
#      the snapshot's spool and publishes in every region; restore is bit
#      for bit, verify is clean.
# Encrypted (-enc: keyed names, sealed spool), what reads objects by their
# plain names (every manifest names only objects its region holds, which
# recipes were deleted) is left out; the regions each snapshot is
# published in, the errors, restore and verify are checked.
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
set_settle 1
/usr/bin/python3 -c 'import torch' 2> /dev/null || skip "Debian's python3-torch is not installed"
D="$T/regions"
ENC=${CKS_TEST_ENCRYPT:-0}
plain() { [ "$ENC" != 1 ]; } # objects and manifests under their plain names
. "$CKS_SOURCE_DIR/tests/integration/recipelib.sh" # ckpt, ckpt_restores

# man_objects REGION RUN ID: the recipes/ and chunks/ keys the manifest names
# (a "c ID SIZE r" line is a chunk stored as the recipe its r line names)
man_objects() {
  awk '$1 == "r" { print "recipes/" substr($2, 1, 2) "/" $2 "." $4 }
       ($1 == "c" && $4 != "r") || $1 == "k" { print "chunks/" substr($2, 1, 2) "/" $2 }' \
    "$D/$1/snapshots/$2/$3" | sort -u
}
# sound RUN: in every region, each manifest of RUN names only objects the region holds
sound() {
  local rg m key
  for rg in a b c; do
    for m in "$D/$rg/snapshots/$1"/*; do
      [ -f "$m" ] || continue
      while read -r key; do
        [ -f "$D/$rg/$key" ] || die "region $rg: snapshot $(basename "$m") names $key, which the region lacks"
      done < <(man_objects "$rg" "$1" "$(basename "$m")")
    done
  done
}
pstate() { awk '{ print $3 }' "/proc/$1/stat" 2> /dev/null; }
# until_stopped PID ERRFILE WHAT: polls (deadline 60 s) until PID is stopped
until_stopped() {
  local deadline=$((SECONDS + 60))
  until [ "$(pstate "$1")" = T ]; do
    kill -0 "$1" 2> /dev/null || { cat "$2" >&2; die "$3 ended before its stop"; }
    [ $SECONDS -lt $deadline ] || die "$3 did not stop"
    sleep 0.05
  done
}
PPID_= bpid= cpid=
# (a failure leaves no prune, snapshot or commit of this test running)
kill_ours() { for p in $PPID_ $bpid $cpid; do kill -9 "$p" 2> /dev/null || true; done; }
CKS_CLEANUP_HOOKS+=(kill_ours)
# held_prune RUN: forget all but RUN's newest, start prune --grace 0 stopped
# after its sweep's first delete (region a, the first swept); sets PPID_
held_prune() {
  cks forget --run "$1" --keep-last 1 -q || die "forget"
  CKPTSYNC_TEST_PRUNE_STOP_AFTER=1 "$CKPTSYNC" --config "$CONF" prune --grace 0 --json \
    > "$T/prune.json" 2> "$T/prune.err" &
  PPID_=$!
  until_stopped "$PPID_" "$T/prune.err" "the prune"
}
# finish_prune: continue it; it must end well having swept region a
finish_prune() {
  kill -CONT "$PPID_"
  wait "$PPID_" || { cat "$T/prune.err" >&2; die "the prune failed"; }
  PPID_=
  [ "$(json "$T/prune.json" '[x["state"] for x in d["regions"] if x["name"] == "a"][0]')" = swept ] ||
    die "region a's mark was not swept: $(cat "$T/prune.json")"
}
# nregions RUN ID: the number of regions that list snapshot ID
nregions() {
  cks ls --remote --run "$1" --json > "$T/ls.json" || die "ls --remote"
  json "$T/ls.json" "sum(x['regions'] for x in d if x['id'] == '$2')"
}
# gone LIST: the keys of LIST region a lacks now (the prune deleted them)
gone() { while read -r key; do [ -f "$D/a/$key" ] || echo "$key"; done < "$1"; }

step "(1) snapshot A of a torch checkpoint (recipes), a newer one, forget A"
ckpt "$T/src/ckpt" 1
ckpt "$T/src/other" 2
cks snapshot "$T/src/ckpt" --run r --step 1 --json > "$T/a.json" 2> "$T/a.err" || { cat "$T/a.err"; die "snapshot A"; }
aid=$(json "$T/a.json" 'd["id"]')
if plain; then
  man_objects a r "$aid" | grep '^recipes/' > "$T/a.recipes" || die "A has no recipes"
  echo "    A $aid: $(wc -l < "$T/a.recipes") recipes"
fi
cks snapshot "$T/src/other" --run r --step 2 -q 2> "$T/o.err" || { cat "$T/o.err"; die "snapshot of other"; }

step "(1) a prune (grace 0) stopped after its first delete in region a"
held_prune r
! plain || [ -z "$(gone "$T/a.recipes" | sed -n 2p)" ] || die "the prune deleted more than one object before its stop"

step "(1) snapshot B of the same checkpoint waits for the sweep at its check"
"$CKPTSYNC" --config "$CONF" snapshot "$T/src/ckpt" --run r --step 3 --json > "$T/b.json" 2> "$T/b.err" &
bpid=$!
wait_for 60 grep -q "region 'a': a prune is deleting chunks this snapshot uses" "$T/b.err" ||
  { cat "$T/b.err"; die "snapshot B did not wait for the sweep"; }
finish_prune
brc=0; wait "$bpid" || brc=$?
bpid=
bid=$(json "$T/b.json" 'd["id"]')
echo "    B $bid exited $brc"
{ grep -o 'derived bf16: .*' "$T/b.err" || true; } | sed 's/^/    B: /'
if plain; then
  man_objects b r "$bid" | grep '^recipes/' > "$T/b.recipes" || die "B names no recipes"
  gone "$T/b.recipes" > "$T/b.gone"
  echo "    the prune deleted $(wc -l < "$T/b.gone") of its $(wc -l < "$T/b.recipes") recipes in region a after B's check"
  [ -s "$T/b.gone" ] || die "the prune deleted none of B's recipes in region a: nothing was raced"
  sound r
fi
[ "$(nregions r "$bid")" = 2 ] || die "B is listed in $(nregions r "$bid") regions, not b and c only"
[ "$brc" = 1 ] || { cat "$T/b.err"; die "snapshot B left region a out but exited $brc"; }
grep -q "a prune deleted \"recipes/" "$T/b.err" || { cat "$T/b.err"; die "B's error does not name the recipes/ key"; }
grep -o "region 'a': a prune deleted \"[^\"]*\"" "$T/b.err" | sed -n 1p | sed 's/^/    /'

step "(1) the rerun publishes everywhere; restore bit for bit; verify clean"
cks snapshot "$T/src/ckpt" --run r --step 3 --json > "$T/b2.json" 2> "$T/b2.err" ||
  { cat "$T/b2.err"; die "the rerun of snapshot B"; }
b2=$(json "$T/b2.json" 'd["id"]')
[ "$(nregions r "$b2")" = 3 ] || die "the rerun is not published in every region"
! plain || [ -z "$(gone "$T/b.recipes")" ] || die "the rerun did not upload B's recipes to region a again"
! plain || sound r
ckpt_restores r "$b2" "$T/src/ckpt"
ckpt_restores r "$bid" "$T/src/ckpt"
cks verify --run r --snapshot "$b2" > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify of the rerun"; }
# B itself is in regions b and c only: repair copies its manifest to a,
# whose objects the rerun uploaded again
cks verify --run r --repair > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify --repair"; }
! plain || sound r
cks verify --run r > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify after the repair"; }

step "(2) the daemon writes snapshot A (recipes) and a newer one; A is forgotten"
start_daemon
mkdir -p "$T/watch/d"
ckpt "$T/watch/d/checkpoint-1" 3
ckpt "$T/watch/d/checkpoint-2" 4
for n in 1 2; do
  cks commit "$T/watch/d/checkpoint-$n" --wait replicated --timeout 60 --json > "$T/c$n.json" ||
    { tail -30 "$T/daemon.log"; die "commit of checkpoint-$n"; }
done
did=$(json "$T/c1.json" 'd["id"]')
if plain; then
  man_objects a d "$did" | grep '^recipes/' > "$T/da.recipes" || die "the daemon's A has no recipes"
  echo "    A $did: $(wc -l < "$T/da.recipes") recipes"
fi

step "(2) a prune stopped after its first delete; the same bytes committed again"
held_prune d
mkdir -p "$T/src"
cp -r "$T/watch/d/checkpoint-1" "$T/src/checkpoint-3"
cp -r "$T/src/checkpoint-3" "$T/watch/d/"
cks commit "$T/watch/d/checkpoint-3" --wait replicated --timeout 60 --json > "$T/c3.json" 2> "$T/c3.err" &
cpid=$!
wait_for 60 grep -q "region 'a': a prune is deleting chunks snapshot .* uses" "$T/daemon.log" ||
  { tail -30 "$T/daemon.log"; die "the daemon did not wait for the sweep"; }
finish_prune
crc=0; wait "$cpid" || crc=$?
cpid=
[ "$crc" = 0 ] || { cat "$T/c3.err"; tail -30 "$T/daemon.log"; cks status || true; die "commit of checkpoint-3 exited $crc"; }
id3=$(json "$T/c3.json" 'd["id"]')
n=$(json "$T/prune.json" '[x["deleted"] for x in d["regions"] if x["name"] == "a"][0]')
echo "    $id3: the prune deleted $n objects in region a (all but one after the daemon's check)"
if plain; then
  man_objects b d "$id3" | grep '^recipes/' > "$T/d3.recipes" || die "checkpoint-3's snapshot names no recipes"
  cmp -s "$T/d3.recipes" "$T/da.recipes" || die "checkpoint-3 names other recipes than A"
  # (a recipe the sweep deleted and the daemon put again is newer than the
  # prune's result, written after its last delete)
  again=$(while read -r key; do [ "$D/a/$key" -nt "$T/prune.json" ] && echo "$key"; done < "$T/d3.recipes" | grep -c . || true)
  echo "    $again of its $(wc -l < "$T/d3.recipes") recipes were put there again after it"
  [ "$again" -ge 1 ] || die "no recipe was put again in region a: nothing was raced"
fi
grep -q "event=reupload region=a run=d snapshot=$id3" "$T/daemon.log" || die "no reupload event in region a"

step "(2) published in every region, sound; restore bit for bit; verify clean"
[ "$(nregions d "$id3")" = 3 ] || die "$id3 is not published in every region"
! plain || sound d
ckpt_restores d "$id3" "$T/src/checkpoint-3"
cks verify --run d > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify of run d"; }
stop_daemon
echo PASS
