#!/usr/bin/env bash
# regions: dir
# Recipe objects as prune candidates (issue 27, docs/deltas.md,
# docs/retention.md): a recipes/<id>.<sig> key is deleted once no retained
# manifest and no writer's keep record names it, by the same mark, grace
# and sweep as chunks.
#  (a) a parent p, its children c and e stored as recipes (mkrecipes), a
#      grandchild g stored as XOR against c (a chain over c's recipes);
#      p, c and e forgotten and pruned: e's recipes, which nothing retained
#      names, are DELETED, every object g names (c's recipes among them)
#      stays, and g restores bit for bit.
#  (b) a writer and a prune at once: c2 (the same content as a forgotten
#      snapshot, so the same recipe keys) is republished as recipes by a
#      writer held (test hook) between its check against prune's marks and
#      its publish, after a mark (grace 1h) took c's recipes as candidates:
#      its keep record names them, the sweep (grace 0) keeps them, and c2
#      restores after the writer goes on.
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
MK="$CKS_BUILD_DIR/tests/mkrecipes"
[ -x "$MK" ] || skip "mkrecipes not built"
D="$T/regions"
. "$CKS_SOURCE_DIR/tests/integration/recipelib.sh"

mk() { # CHILD PARENT MODE OUT
  "$MK" "$CONF" r "$1" "$2" "$3" > "$4" 2> "$T/mk.err" || { cat "$T/mk.err" >&2; die "mkrecipes $1"; }
}
# the recipes/ keys of a manifest (plain text here: not encrypted)
man_recipes() { # ID
  local man
  man=$(ls "$D/a/snapshots/"*/"$1")
  awk '$1 == "r" { print "recipes/" substr($2, 1, 2) "/" $2 "." $4 }' "$man" | sort -u
}
prune_deleted() { json "$1" 'sum(x["deleted"] for x in d["regions"])'; }

step "(a) p; c and e as recipes against p; g as XOR against c (a chain)"
gen "$T/src/p/ckpt" 0 0
gen "$T/src/c/ckpt" 7 0.001
gen "$T/src/e/ckpt" 8 0.002
gen "$T/src/g/ckpt" 9 0.001
pid=$(snap "$T/src/p/ckpt" 10)
cid=$(snap "$T/src/c/ckpt" 25)
mk "$cid" "$pid" both "$T/rc.txt"
eid=$(snap "$T/src/e/ckpt" 27)
mk "$eid" "$pid" both "$T/re.txt"
gid=$(snap "$T/src/g/ckpt" 30)
mk "$gid" "$cid" xor "$T/rg.txt"
man_recipes "$cid" > "$T/c.keys"
man_recipes "$eid" > "$T/e.keys"
man_recipes "$gid" > "$T/g.keys"
comm -23 "$T/e.keys" "$T/g.keys" > "$T/gone.keys"   # e's recipes g does not name
comm -12 "$T/c.keys" "$T/g.keys" > "$T/chain.keys"  # c's recipes g names (its bases)
echo "    e: $(wc -l < "$T/e.keys") recipes, $(wc -l < "$T/gone.keys") not named by g;" \
  "g: $(wc -l < "$T/g.keys"), $(wc -l < "$T/chain.keys") of them c's"
[ -s "$T/gone.keys" ] || die "every recipe of e is named by g: nothing to show deleted"
[ -s "$T/chain.keys" ] || die "g names no recipe of c: no chain"
for key in $(cat "$T/gone.keys"); do [ -f "$D/a/$key" ] || die "$key was not uploaded"; done
# the index's refcounts count c lines, marked or not: nothing false on version 6
cks fsck > "$T/fsck.txt" 2>&1 || { cat "$T/fsck.txt"; die "fsck on a version 6 repository"; }

step "(a) forget p, c and e, prune: e's recipes go, g's closure stays, g restores"
cks forget --run r --keep-last 1 -q
cks prune --grace 0 --json > "$T/p1.json" 2> "$T/p1.err" || { cat "$T/p1.err" >&2; die "prune"; }
echo "    prune deleted $(prune_deleted "$T/p1.json") objects"
while read -r key; do
  for rg in a b c; do [ ! -e "$D/$rg/$key" ] || die "$key (named only by forgotten e) is still in region $rg"; done
done < "$T/gone.keys"
while read -r key; do
  for rg in a b c; do [ -f "$D/$rg/$key" ] || die "prune deleted $key, which g names, in region $rg"; done
done < "$T/g.keys"
restore_cmp "$gid" "$T/src/g/ckpt"
cks verify --run r > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify after prune"; }
cks prune --grace 0 --json > "$T/p2.json" || die "a second prune"
[ "$(prune_deleted "$T/p2.json")" = 0 ] || die "a second prune deleted more: $(cat "$T/p2.json")"
# stats count g's k lines (plain chunks it needs only as bases) as used, not garbage
cks stats --json > "$T/stats.json" || die "stats"
[ "$(json "$T/stats.json" 'sum(r["garbage_bytes"] for r in d["regions"])')" = 0 ] ||
  die "stats report garbage after a full prune: $(cat "$T/stats.json")"

step "(b) a mark (grace 1h) takes a forgotten snapshot's recipes as candidates"
gen "$T/src/q/ckpt" 0 0
gen "$T/src/d/ckpt" 5 0.001
qid=$(snap "$T/src/q/ckpt" 40)
did=$(snap "$T/src/d/ckpt" 45)
mk "$did" "$qid" both "$T/rd.txt"
man_recipes "$did" > "$T/d.keys"
[ -s "$T/d.keys" ] || die "d has no recipes"
snap "$T/src/q/ckpt" 50 > /dev/null   # the newest is always kept: d is not
cks forget --run r --keep-every 10 -q   # keeps steps 30, 40 and 50, forgets d (45)
cks prune --grace 1h --json > "$T/p3.json" || die "the marking prune"
mark=$(json "$T/p3.json" '[x["mark"] for x in d["regions"] if x["name"] == "a"][0]')
[ "$(json "$T/p3.json" '[x["state"] for x in d["regions"] if x["name"] == "a"][0]')" = waiting ] ||
  die "the prune did not leave a mark waiting: $(cat "$T/p3.json")"
first=$(sed -n 1p "$T/d.keys"); first=${first##*/}
grep -q "^r ${first} " "$D/a/gc/$mark/mark" || die "the mark does not name d's recipe $first"
[ "$(sed -n 1p "$D/a/gc/$mark/mark")" = "ckptsync-gc 2" ] || die "a mark with recipes is not version 2"

step "(b) a writer names those recipes again and is held before its publish"
d2=$(snap "$T/src/d/ckpt" 47)   # d's content again: the same chunks, the same recipes
CKPTSYNC_TEST_STOP_BEFORE_PUBLISH=1 "$MK" "$CONF" r "$d2" "$qid" both > "$T/rd2.txt" 2> "$T/mk2.err" &
wpid=$!
kill_writer() { kill -9 "$wpid" 2> /dev/null || true; }
CKS_CLEANUP_HOOKS+=(kill_writer)
wstate() { awk '{ print $3 }' "/proc/$wpid/stat" 2> /dev/null; }
deadline=$((SECONDS + 60))
until [ "$(wstate)" = T ]; do
  kill -0 "$wpid" 2> /dev/null || { cat "$T/mk2.err" >&2; die "the writer ended before its publish"; }
  [ $SECONDS -lt $deadline ] || die "the writer did not reach its publish"
  sleep 0.05
done
man_recipes_of() { grep '^recipe ' "$1" | awk '{ print $2 }' | sort -u; }
man_recipes_of "$T/rd2.txt" > "$T/d2.keys" 2> /dev/null || true
cmp -s "$T/d.keys" <(man_recipes_of "$T/rd.txt") || die "mkrecipes listed other recipes than d's manifest"
ls "$D/a/gc/$mark/" | grep '^keep\.' > /dev/null || die "the held writer wrote no keep record in mark $mark"
grep -q "^r ${first} " "$D/a/gc/$mark/"keep.* || die "no keep record names recipe $first"

step "(b) a prune sweeps meanwhile (grace 0): the keep record protects the recipes"
cks prune --grace 0 --json > "$T/p4.json" 2> "$T/p4.err" || { cat "$T/p4.err" >&2; die "the sweeping prune"; }
[ "$(json "$T/p4.json" '[x["state"] for x in d["regions"] if x["name"] == "a"][0]')" = swept ] ||
  die "the mark was not swept: $(cat "$T/p4.json")"
while read -r key; do
  for rg in a b c; do [ -f "$D/$rg/$key" ] || die "the sweep deleted $key in region $rg, which the held writer's keep names"; done
done < "$T/d.keys"
# the hook stops it before each region's publish: continue it until it ends
deadline=$((SECONDS + 60))
while st=$(wstate) && [ -n "$st" ] && [ "$st" != Z ]; do
  [ "$st" = T ] && kill -CONT "$wpid"
  [ $SECONDS -lt $deadline ] || die "the writer did not finish"
  sleep 0.05
done
wait "$wpid" || { cat "$T/mk2.err" >&2; die "the writer failed after the sweep"; }
cmp -s "$T/d.keys" <(man_recipes "$d2") || die "d2's manifest names other recipes than d's"
restore_cmp "$d2" "$T/src/d/ckpt"
cks verify --run r > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify after the sweep"; }
echo "PASS"
