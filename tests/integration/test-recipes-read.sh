#!/usr/bin/env bash
# regions: dir
# encrypted: yes
# Manifest version 6 read back (issue 27, docs/deltas.md): readers first.
# No writer stores recipes yet, so tests/tools/mkrecipes turns a published
# snapshot (a checkpoint of fp32 master weights, the bf16 weights that are
# their round to nearest even, and a file that changed a little since the
# parent checkpoint) into a version 6 one: derived bf16 against the
# master's chunks, XOR against the parent's chunks, the recipes uploaded
# to recipes/, the plain chunk objects they replace DELETED, the manifest
# republished.  Then: restore gives the source's bytes (cmp); verify
# passes; a base deleted in one region comes from another (restore) and
# verify names the region; a base deleted everywhere fails restore naming
# the snapshot, the file and the base, with nothing placed, and verify
# names it; a base damaged in every region (it fails its digest) fails
# restore naming the snapshot and the base; a grandchild XOR against the child's recipes (a chain); parent
# and child forgotten and pruned (a first prune killed -9 mid-way, then a
# rerun) while the grandchild is kept: every base it names stays, and it
# still restores.
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
MK="$CKS_BUILD_DIR/tests/mkrecipes"
[ -x "$MK" ] || skip "mkrecipes not built"
D="$T/regions"

. "$CKS_SOURCE_DIR/tests/integration/recipelib.sh"

step "a parent and a child checkpoint, published as usual"
gen "$T/src/p/ckpt" 0 0
gen "$T/src/c/ckpt" 7 0.001
pid=$(snap "$T/src/p/ckpt" 10)
cid=$(snap "$T/src/c/ckpt" 20)

step "mkrecipes: the child as version 6 (derived bf16 and XOR recipes)"
"$MK" "$CONF" r "$cid" "$pid" both > "$T/recipes.txt" 2> "$T/mk.err" ||
  { cat "$T/mk.err" >&2; die "mkrecipes"; }
nr=$(grep -c '^recipe ' "$T/recipes.txt" || true)
nk=$(grep -c '^k ' "$T/recipes.txt" || true)
echo "    $nr recipes, $nk base-only chunks"
[ "$nr" -ge 2 ] || die "mkrecipes made $nr recipes"
[ "$nk" -ge 1 ] || die "no recipe has a base outside the child (XOR against the parent)"
grep -E '^recipe .* file [^ ]*weights.bin' "$T/recipes.txt" > "$T/bf.txt" || die "no recipe for weights.bin (derived bf16)"
echo "    weights.bin: $(wc -l < "$T/bf.txt") recipes"
awk '$1 == "k" { print $2 }' "$T/recipes.txt" > "$T/kkeys"
grep -vFf "$T/kkeys" "$T/bf.txt" > "$T/derived.txt" || die "no weights.bin recipe is derived from the master (every one has a parent base)"
man=$(ls "$D/a/snapshots/"*/"$cid" 2> /dev/null | sed -n 1p)
if [ "${CKS_TEST_ENCRYPT:-0}" != 1 ]; then
  [ "$(sed -n 1p "$man")" = 'ckptsync-manifest 6' ] || die "the child's manifest is not version 6"
fi
while read -r kind key _ _ rest; do
  [ "$kind" = recipe ] || continue
  [ -f "$D/a/$key" ] || die "$key not uploaded"
  plain="chunks/${key#recipes/}"
  plain="${plain%.*}"
  [ ! -e "$D/a/$plain" ] && [ ! -e "$D/b/$plain" ] && [ ! -e "$D/c/$plain" ] ||
    die "$plain was not deleted: a restore could avoid the recipe"
done < "$T/recipes.txt"

step "restore: bit for bit from the recipes; verify passes"
restore_cmp "$cid" "$T/src/c/ckpt"
restore_cmp "$pid" "$T/src/p/ckpt"
if [ "${CKS_TEST_ENCRYPT:-0}" != 1 ]; then # the manifest is plain text here
  need=$(python3 - "$D/a" "$man" <<'PY'
import os, sys
d, tot, seen = sys.argv[1], 0, set()
for l in open(sys.argv[2]):
    t = l.split()
    if t[0] in ("c", "k") and len(t) == 3 and t[1] not in seen:
        seen.add(t[1]); tot += os.path.getsize(f"{d}/chunks/{t[1][:2]}/{t[1]}")
    elif t[0] == "r":
        tot += os.path.getsize(f"{d}/recipes/{t[1][:2]}/{t[1]}.{t[3]}")
print(tot)
PY
)
  rm -rf "$T/rs"
  cks restore --run r --snapshot "$cid" --to "$T/rs" --json > "$T/r.json"
  got=$(json "$T/r.json" 'd["fetched_bytes"]')
  echo "    restore downloaded $got bytes; the objects it needs, once each: $need"
  [ "$got" = "$need" ] || die "restore downloaded $got bytes, not each object once ($need)"
fi
cks verify --run r > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify failed"; }

rkey=$(awk '$1 == "recipe" { print $2; exit }' "$T/recipes.txt")
step "a recipe damaged in region a and missing in b: restore (and --progressive) use c"
cp "$D/a/$rkey" "$T/rkey.a"
python3 -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,"rb").read()); b[len(b)//2]^=1; open(p,"wb").write(b)' "$D/a/$rkey"
mv "$D/b/$rkey" "$T/rkey.b"
restore_cmp "$cid" "$T/src/c/ckpt"
rm -rf "$T/rs"
cks restore --run r --snapshot "$cid" --to "$T/rs" --progressive -q 2> "$T/rs.err" ||
  { cat "$T/rs.err" >&2; die "progressive restore"; }
cmp "$T/src/c/ckpt/weights.bin" "$T/rs/ckpt/weights.bin" || die "progressive: weights.bin differs"
expect_fail 1 cks verify --run r
grep -q "region 'b'.*${rkey##*/}.*missing" "$T/err" || { cat "$T/err"; die "verify did not name the missing recipe"; }
grep -q "region 'a'.*${rkey##*/}" "$T/err" || { cat "$T/err"; die "verify did not name the damaged recipe"; }
step "verify --repair copies the recipe from c to a and b"
cks verify --run r --repair > "$T/v.txt" 2>&1 || true
cks verify --run r > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify after --repair"; }
[ -f "$D/b/$rkey" ] || die "verify --repair did not put the recipe back in b"
if [ "${CKS_TEST_ENCRYPT:-0}" != 1 ]; then # sealed again: a new nonce
  cmp "$D/c/$rkey" "$D/b/$rkey" || die "the repaired copy in b differs"
fi

kbase=$(awk '$1 == "k" { print $2; exit }' "$T/recipes.txt")
step "a base missing in region a: restore takes it from b; verify names region a"
mv "$D/a/$kbase" "$T/kbase.a"
restore_cmp "$cid" "$T/src/c/ckpt"
expect_fail 1 cks verify --run r
grep -q "region 'a'" "$T/err" "$T/out" || { cat "$T/err"; die "verify did not name region a"; }

step "a base missing everywhere: restore fails naming snapshot, file and base; nothing placed"
mv "$D/b/$kbase" "$T/kbase.b"
mv "$D/c/$kbase" "$T/kbase.c"
rm -rf "$T/rs"
expect_fail 1 cks restore --run r --snapshot "$cid" --to "$T/rs"
grep -q "$cid" "$T/err" || { cat "$T/err"; die "restore did not name the snapshot"; }
grep -q "${kbase##*/}" "$T/err" || { cat "$T/err"; die "restore did not name the base"; }
grep -Eq 'weights.bin|notes.bin|master.bin' "$T/err" || { cat "$T/err"; die "restore did not name the file"; }
[ ! -e "$T/rs/ckpt/notes.bin" ] && [ ! -e "$T/rs/ckpt/weights.bin" ] ||
  die "a file was placed by a failed restore"
expect_fail 1 cks verify --run r
grep -q "${kbase##*/}" "$T/err" "$T/out" || { cat "$T/err"; die "verify did not name the base"; }

step "a base that fails its digest everywhere: restore fails naming snapshot and base"
for r in a b c; do
  cp "$T/kbase.$r" "$D/$r/$kbase" 2> /dev/null || cp "$T/kbase.a" "$D/$r/$kbase"
  python3 -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,"rb").read()); b[len(b)//2]^=1; open(p,"wb").write(b)' "$D/$r/$kbase"
done
rm -rf "$T/rs"
expect_fail 1 cks restore --run r --snapshot "$cid" --to "$T/rs"
grep -q "$cid" "$T/err" || { cat "$T/err"; die "restore did not name the snapshot (damaged base)"; }
grep -q "${kbase##*/}" "$T/err" || { cat "$T/err"; die "restore did not name the damaged base"; }
[ ! -e "$T/rs/ckpt/notes.bin" ] && [ ! -e "$T/rs/ckpt/weights.bin" ] ||
  die "a file was placed by a restore whose base is damaged"
mv "$T/kbase.a" "$D/a/$kbase"
mv "$T/kbase.b" "$D/b/$kbase"
mv "$T/kbase.c" "$D/c/$kbase"
cks verify --run r > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify after putting the base back"; }

step "a grandchild as XOR against the child: a chain (the child's recipes as bases)"
gen "$T/src/g/ckpt" 9 0.001
gid=$(snap "$T/src/g/ckpt" 30)
"$MK" "$CONF" r "$gid" "$cid" xor > "$T/recipes2.txt" 2> "$T/mk.err" ||
  { cat "$T/mk.err" >&2; die "mkrecipes of the grandchild"; }
awk '$1 == "recipe" { sub(/^recipes\//, "", $2); sub(/\..*/, "", $2); print $2 }' "$T/recipes.txt" | sort > "$T/rids"
grep -o 'base chunks/[0-9a-f/]*' "$T/recipes2.txt" | sed 's|base chunks/||' | sort -u > "$T/gbases"
chain=$(comm -12 "$T/rids" "$T/gbases" | wc -l)
echo "    $(grep -c '^recipe ' "$T/recipes2.txt") recipes, $chain of them over a recipe of the child"
[ "$chain" -ge 1 ] || die "no chain: no grandchild recipe has a child recipe as its base"
restore_cmp "$gid" "$T/src/g/ckpt"

step "parent and child forgotten and pruned, the grandchild kept: every base stays, it restores"
cks forget --run r --keep-last 1 -q
# a first prune killed -9 after its third deletion (the test hook stops it there)
CKPTSYNC_TEST_PRUNE_STOP_AFTER=3 "$CKPTSYNC" --config "$CONF" prune --grace 0 -q \
  > /dev/null 2> "$T/prune1.err" &
ppid=$!
deadline=$((SECONDS + 60))
until [ "$(awk '{ print $3 }' "/proc/$ppid/stat" 2> /dev/null)" = T ]; do
  kill -0 "$ppid" 2> /dev/null || { cat "$T/prune1.err" >&2; die "prune ended before its third deletion"; }
  [ $SECONDS -lt $deadline ] || die "prune did not reach its third deletion"
  sleep 0.05
done
kill -9 "$ppid"
wait "$ppid" 2> /dev/null || true
echo "    a prune killed -9 after 3 deletions"
restore_cmp "$gid" "$T/src/g/ckpt"
cks prune --grace 0 --json > "$T/prune.json" 2> "$T/prune.err" ||
  { cat "$T/prune.err" >&2; die "prune"; }
deleted=$(json "$T/prune.json" 'sum(x["deleted"] for x in d["regions"])')
echo "    prune deleted $deleted chunk objects"
[ "$deleted" -gt 0 ] || die "prune deleted nothing: the forgotten snapshots' own chunks should go"
for list in "$T/recipes.txt" "$T/recipes2.txt"; do
  while read -r kind key; do
    [ "$kind" = k ] || continue
    if [ "$list" = "$T/recipes2.txt" ] || grep -q "${key##*/}" "$T/recipes2.txt"; then
      for rg in a b c; do [ -f "$D/$rg/$key" ] || die "prune deleted the base $key in region $rg"; done
    fi
  done < "$list"
done
restore_cmp "$gid" "$T/src/g/ckpt"
cks verify --run r > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify after prune"; }
echo "PASS"
