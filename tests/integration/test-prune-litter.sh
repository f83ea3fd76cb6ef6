#!/usr/bin/env bash
# Prune removes what interrupted writes leave in a dir region
# (store/dirtidy.h), and nothing else:
#   1. checkpoint-4 forgotten and pruned: the prune leaves its mark,
#      gc/<mark>/, done;
#   2. planted in region a: temporaries of puts killed before their rename
#      (".<name>.tmp.<pid>.<16 hex>", in chunks/ and snapshots/), a check's
#      probe and clock files, two days old; a fresh temporary (a live
#      writer's); dot files that only look alike, two days old;
#      an empty mark folder two days old, and a fresh one;
#   3. the next prune removes the old litter and the old empty folder,
#      keeps the fresh temporary, the fresh folder and the look-alikes, and
#      cleans the mark up: its folder goes with its last record (on main
#      gc/<mark>/ stayed, empty, after every prune, and the litter stayed
#      for good); every object is as it was (names and bytes);
#      checkpoint-5 restores bit for bit; a new snapshot is stored.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
A="$T/regions/a"

make_file "$T/src/checkpoint-4/model.bin" 1
cks snapshot "$T/src/checkpoint-4" --run r1 --step 4 > /dev/null
make_file "$T/src/checkpoint-5/model.bin" 2
echo '{"global_step": 5}' > "$T/src/checkpoint-5/trainer_state.json"
cks snapshot "$T/src/checkpoint-5" --run r1 --step 5 --json > "$T/s.json"
id=$(json "$T/s.json" 'd["id"]')

step "checkpoint-4 forgotten and pruned: a mark, done"
cks forget --run r1 --keep-last 1 > /dev/null
cks prune --grace 0 --json > "$T/p0.json" 2> "$T/p0.err" || { cat "$T/p0.err"; die "prune failed"; }
marks=$(cd "$A/gc" && ls)
[ -n "$marks" ] && [ -e "$A/gc/$marks/done" ] || die "the prune left no done mark in region a: $marks"

# objects: every file whose name does not start with '.', with its sum,
# outside the folders prune itself writes (gc/, intents/, locks/)
objects() {
  (cd "$A" && find . -type f ! -name '.*' ! -path './gc/*' ! -path './intents/*' \
     ! -path './locks/*' -print0 | sort -z | xargs -0 sha256sum)
}

step "litter planted in region a"
hex=0123456789abcdef
cdir=$(cd "$A/chunks" && ls | sed -n 1p)
old=(
  "$A/chunks/$cdir/.$(printf 'f%.0s' {1..64}).tmp.4242.$hex"
  "$A/snapshots/r1/.$id.tmp.77.$hex"
  "$A/.ckptsync-probe.31337"
  "$A/.ckptsync-clock.31337.0badf00d"
)
fresh="$A/chunks/$cdir/.$(printf 'e%.0s' {1..64}).tmp.4243.$hex"
alike=("$A/.keep" "$A/chunks/$cdir/.x.tmp.12" "$A/snapshots/r1/.tmp.1.$hex" "$A/.y.tmp.1.${hex}0")
for f in "${old[@]}" "${alike[@]}"; do
  echo litter > "$f"
  touch -d '2 days ago' "$f"
done
echo live > "$fresh"
# an empty mark folder an older version (or a crash) left, and one a
# writer has just made
mkdir "$A/gc/20261101T000000Z-00000000000000aa" "$A/gc/20261101T000000Z-00000000000000bb"
touch -d '2 days ago' "$A/gc/20261101T000000Z-00000000000000aa"
objects > "$T/objects.before"

step "prune: the old litter and the cleaned-up mark's folder go; nothing else"
cks prune --grace 0 --json > "$T/p1.json" 2> "$T/p1.err" || { cat "$T/p1.err"; die "prune failed"; }
for f in "${old[@]}"; do [ ! -e "$f" ] || die "prune left the stale temporary $f"; done
for f in "$fresh" "${alike[@]}"; do [ -e "$f" ] || die "prune removed $f"; done
# region a: 4 temporaries and the old empty folder (the cleaned-up mark's
# folder goes with its last record)
[ "$(json "$T/p1.json" '[g["litter_deleted"] for g in d["regions"]]')" = "[5, 0, 0]" ] ||
  { cat "$T/p1.json"; die "prune --json does not count the litter removed"; }
[ ! -e "$A/gc/20261101T000000Z-00000000000000aa" ] || die "prune left the old empty mark folder"
[ -d "$A/gc/20261101T000000Z-00000000000000bb" ] || die "prune removed a fresh mark folder"
rmdir "$A/gc/20261101T000000Z-00000000000000bb"
for r in a b c; do
  [ ! -e "$T/regions/$r/gc/$marks" ] || die "region $r: the cleaned-up mark folder gc/$marks is still there"
  empty=$(find "$T/regions/$r" -mindepth 1 -path "*/gc/*" -type d -empty)
  [ -z "$empty" ] || die "region $r: empty mark folders left: $empty"
done
objects > "$T/objects.after"
cmp -s "$T/objects.before" "$T/objects.after" ||
  { diff "$T/objects.before" "$T/objects.after" >&2; die "prune changed objects of region a"; }
cks restore --run r1 --snapshot "$id" --to "$T/out" > /dev/null 2> "$T/r.err" ||
  { cat "$T/r.err"; die "restore after the prunes failed"; }
same_tree "$T/src/checkpoint-5" "$T/out/checkpoint-5"
make_file "$T/src/checkpoint-6/model.bin" 1
cks snapshot "$T/src/checkpoint-6" --run r1 --step 6 > /dev/null || die "a snapshot after the prunes failed"
cks verify --run r1 > /dev/null 2> "$T/v.err" || { cat "$T/v.err"; die "verify after the prunes failed"; }
echo "prune-litter: ok"
