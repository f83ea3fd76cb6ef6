#!/usr/bin/env bash
# regions: dir
# Restore rebuilds a version 6 snapshot's recipes in parallel
# (service/recipar, docs/deltas.md "Restore and verify"): a checkpoint of
# fp32 master weights and their bf16 rounding, the bf16 stored as ~50
# derived recipes by tests/tools/mkrecipes, restored with workers = 2 and
# a memory budget that holds a fraction of the bases (batches, evictions).
# With weights.bin alone restored (--exclude master.bin) every object comes
# through the recipe path: the restore is bit for bit, its objects come
# from every region (striped, counted per region), and with every recipe
# damaged in region a and missing in b and every base missing in a, all
# come from c (counted as failovers), --progressive too; a base missing
# everywhere
# fails the restore naming the snapshot, the file and the base, with
# nothing placed, --progressive too (at its end); back in c, the whole
# snapshot restores.  A grandchild stored as XOR against the child's
# recipes (a chain, rebuilt a level down per batch) restores bit for bit,
# and fails naming the child's recipe when that is gone everywhere.
. "$(dirname "$0")/lib.sh"
write_config 8K 16K 32K
sed -i "/^\[daemon\]/a workers = 2\nmemory = 4M" "$CONF"
MK="$CKS_BUILD_DIR/tests/mkrecipes"
[ -x "$MK" ] || skip "mkrecipes not built"
D="$T/regions"

python3 - "$T/src/c/ckpt" "$T/src/p/ckpt" <<'PY'
import os, random, struct, sys
r = random.Random(99)
n = 512 * 1024
master = struct.pack("<%df" % n, *[r.gauss(0, 0.02) for _ in range(n)])
u = struct.unpack("<%dI" % n, master)
bf = [((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF for x in u]
os.makedirs(sys.argv[1]); os.makedirs(sys.argv[2])
open(os.path.join(sys.argv[1], "master.bin"), "wb").write(master)
open(os.path.join(sys.argv[1], "weights.bin"), "wb").write(struct.pack("<%dH" % n, *bf))
open(os.path.join(sys.argv[2], "notes.bin"), "wb").write(r.randbytes(4096))
PY

snap() { # DIR STEP -> id
  cks snapshot "$1" --run r --step "$2" --json > "$T/snap.json" 2> "$T/snap.err" ||
    { cat "$T/snap.err" >&2; die "snapshot of $1"; }
  json "$T/snap.json" 'd["id"]'
}

restore_w() { # ID [ARGS...]: weights.bin alone, checked; the JSON in $T/r.json
  local id=$1; shift
  rm -rf "$T/rs"
  cks restore --run r --snapshot "$id" --to "$T/rs" --exclude master.bin --json "$@" \
    > "$T/r.json" 2> "$T/rs.err" || { cat "$T/rs.err" >&2; die "restore of $id $*"; }
  cmp "$T/src/c/ckpt/weights.bin" "$T/rs/ckpt/weights.bin" || die "restore $*: weights.bin differs"
  [ ! -e "$T/rs/ckpt/master.bin" ] || die "master.bin restored despite --exclude"
}

step "a checkpoint whose bf16 weights are stored as recipes derived from the master"
pid=$(snap "$T/src/p/ckpt" 10)
cid=$(snap "$T/src/c/ckpt" 20)
"$MK" "$CONF" r "$cid" "$pid" bf16 > "$T/recipes.txt" 2> "$T/mk.err" ||
  { cat "$T/mk.err" >&2; die "mkrecipes"; }
nr=$(grep -c '^recipe .* file [^ ]*weights.bin' "$T/recipes.txt" || true)
echo "    $nr recipes"
[ "$nr" -ge 48 ] || die "mkrecipes made only $nr recipes of weights.bin"

step "weights.bin alone, workers = 2: bit for bit, every region serves recipes and bases"
restore_w "$cid"
json "$T/r.json" 'd["regions"]'
for g in a b c; do
  n=$(json "$T/r.json" "d['regions']['$g']")
  [ "$n" -ge $((nr / 6)) ] || die "region $g served $n objects: the recipe path is not striped"
done
sum=$(json "$T/r.json" "sum(d['regions'].values())")
[ "$sum" -ge $((2 * nr)) ] || die "$sum objects counted for $nr recipes and their bases"

step "every recipe damaged in a and missing in b, every base missing in a: all from c"
awk '$1 == "recipe" && $4 ~ /weights.bin/ { print $2 }' "$T/recipes.txt" > "$T/rkeys"
awk '$1 == "recipe" && $4 ~ /weights.bin/ { for (i = 6; i <= NF; i += 2) print $i }' \
  "$T/recipes.txt" | sort -u > "$T/bkeys"
mkdir -p "$T/moved/b" "$T/moved/a"
while read -r k; do
  python3 -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,"rb").read()); b[len(b)//2]^=1; open(p,"wb").write(b)' "$D/a/$k"
  mv "$D/b/$k" "$T/moved/b/${k##*/}"
done < "$T/rkeys"
while read -r k; do mv "$D/a/$k" "$T/moved/a/${k##*/}"; done < "$T/bkeys"
restore_w "$cid"
f=$(json "$T/r.json" 'd["failovers"]')
echo "    $f failovers ($nr recipes, $(wc -l < "$T/bkeys") bases)"
[ "$f" -ge $((nr / 2)) ] || die "only $f failovers counted: damaged or missing objects were not asked of another region"
bkey=$(sed -n 9p "$T/bkeys")
restore_w "$cid" --progressive

step "the base missing everywhere: restore fails naming snapshot, file and base; nothing placed"
mv "$D/b/$bkey" "$T/bkey.b"
mv "$D/c/$bkey" "$T/bkey.c"
rm -rf "$T/rs"
expect_fail 1 cks restore --run r --snapshot "$cid" --to "$T/rs" --exclude master.bin
grep -q "$cid" "$T/err" || { cat "$T/err"; die "restore did not name the snapshot"; }
grep -q "${bkey##*/}" "$T/err" || { cat "$T/err"; die "restore did not name the base"; }
grep -q 'weights.bin' "$T/err" || { cat "$T/err"; die "restore did not name the file"; }
[ ! -e "$T/rs/ckpt/weights.bin" ] || die "a file was placed by a failed restore"
rm -rf "$T/rs"
expect_fail 1 cks restore --run r --snapshot "$cid" --to "$T/rs" --exclude master.bin --progressive
grep -q "${bkey##*/}" "$T/err" || { cat "$T/err"; die "progressive restore did not name the base"; }
[ ! -e "$T/rs/ckpt/weights.bin" ] || die "progressive: weights.bin placed without its recipes"
mv "$T/bkey.c" "$D/c/$bkey"
cks restore --run r --snapshot "$cid" --to "$T/rs2" -q || die "restore with the base back in c"
cmp "$T/src/c/ckpt/master.bin" "$T/rs2/ckpt/master.bin" || die "master.bin differs"
cmp "$T/src/c/ckpt/weights.bin" "$T/rs2/ckpt/weights.bin" || die "weights.bin differs"

step "a grandchild as XOR against the child: a chain over the child's recipes, rebuilt level by level"
python3 - "$T/src/c/ckpt" "$T/src/g/ckpt" <<'PY'
import os, struct, sys
n = 512 * 1024
u = list(struct.unpack("<%dI" % n, open(os.path.join(sys.argv[1], "master.bin"), "rb").read()))
for i in range(0, n, 7):
    u[i] ^= 1 << 16  # one bf16 ulp: the weights change too
bf = [((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF for x in u]
os.makedirs(sys.argv[2])
open(os.path.join(sys.argv[2], "master.bin"), "wb").write(struct.pack("<%dI" % n, *u))
open(os.path.join(sys.argv[2], "weights.bin"), "wb").write(struct.pack("<%dH" % n, *bf))
PY
gid=$(snap "$T/src/g/ckpt" 30)
"$MK" "$CONF" r "$gid" "$cid" xor > "$T/recipes2.txt" 2> "$T/mk.err" ||
  { cat "$T/mk.err" >&2; die "mkrecipes of the grandchild"; }
# the child's recipes that some grandchild recipe names as a base
awk '$1 == "recipe" { print $2 }' "$T/recipes.txt" | sort > "$T/rkeys.c"
grep -o 'base chunks/[0-9a-f/]*' "$T/recipes2.txt" | sed 's|base chunks/[0-9a-f]*/||' | sort -u > "$T/gbases"
sed 's|^recipes/[0-9a-f]*/||; s|\..*||' "$T/rkeys.c" | sort > "$T/rids.c"
chain=$(comm -12 "$T/rids.c" "$T/gbases" | wc -l)
echo "    $(grep -c '^recipe ' "$T/recipes2.txt") recipes, $chain child recipes among their bases"
[ "$chain" -ge 8 ] || die "only $chain grandchild bases are recipes of the child: no chain to rebuild"
rm -rf "$T/rs3"
cks restore --run r --snapshot "$gid" --to "$T/rs3" -q || die "restore of the grandchild"
cmp "$T/src/g/ckpt/master.bin" "$T/rs3/ckpt/master.bin" || die "grandchild: master.bin differs"
cmp "$T/src/g/ckpt/weights.bin" "$T/rs3/ckpt/weights.bin" || die "grandchild: weights.bin differs"
step "a child recipe the chain needs, gone everywhere: the grandchild's restore names it"
cid1=$(comm -12 "$T/rids.c" "$T/gbases" | sed -n 3p)
ckey=$(grep "/$cid1\." "$T/rkeys.c")
for g in a c; do mv "$D/$g/$ckey" "$T/ckey.$g"; done # b lost it in step 3
rm -rf "$T/rs3"
expect_fail 1 cks restore --run r --snapshot "$gid" --to "$T/rs3"
grep -q "$cid1" "$T/err" || { cat "$T/err"; die "restore did not name the child's recipe"; }
grep -q "$gid" "$T/err" || { cat "$T/err"; die "restore did not name the snapshot"; }
[ ! -e "$T/rs3/ckpt/weights.bin" ] || die "weights.bin placed without its chain"
echo "PASS"
