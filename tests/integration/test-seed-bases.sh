#!/usr/bin/env bash
# regions: dir
# Hot resume of a delta snapshot (issue 27, docs/deltas.md "What is
# built": hot resume): restore's seed lends a recipe's bases, not only the
# file chunks.  A child checkpoint is stored as XOR recipes against its
# parent's chunks (tests/tools/mkrecipes xor: k lines for the parent's
# chunks the child does not hold; the child's plain chunk objects are
# DELETED, so a reader must go through the recipes).  Restored:
#   - without a seed: every base comes from the regions (the baseline);
#   - with --seed the parent's directory: bit for bit, local_bases > 0,
#     fewer objects and bytes fetched than the baseline;
#   - with a seed whose master.bin has one byte flipped: that base comes
#     from the regions, still bit for bit, fewer local bases;
#   - with no --seed, over a target that holds the parent as restored
#     (the index knows its files): the target lends the bases (a hot
#     resume in place).
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
# two workers read a batch's bases from the seed at once; a small budget
# cuts the recipes into several batches
sed -i "/^\[daemon\]/a workers = 2\nmemory = 4M" "$CONF"
MK="$CKS_BUILD_DIR/tests/mkrecipes"
[ -x "$MK" ] || skip "mkrecipes not built"

. "$CKS_SOURCE_DIR/tests/integration/recipelib.sh"

# ID TARGET JSON [restore args...]: restores ID to TARGET, its --json in
# JSON, and compares the three files with the child's source.
sb_restore() {
  local id=$1 to=$2 out=$3
  shift 3
  cks restore --run r --snapshot "$id" --to "$to" --json "$@" > "$out" 2> "$T/sb.err" ||
    { cat "$T/sb.err" >&2; die "restore of $id to $to $*"; }
  for f in master.bin weights.bin notes.bin; do
    cmp "$T/src/c/ckpt/$f" "$to/ckpt/$f" || die "restore $* of $id: $f differs"
  done
}
objects() { json "$1" 'sum(d["regions"].values())'; }
field() { json "$1" "d.get('$2', 0)"; }

step "a parent and a child checkpoint; the child as XOR recipes against the parent"
gen "$T/src/p/ckpt" 0 0
gen "$T/src/c/ckpt" 7 0.001
pid=$(snap "$T/src/p/ckpt" 10)
cid=$(snap "$T/src/c/ckpt" 20)
"$MK" "$CONF" r "$cid" "$pid" xor > "$T/recipes.txt" 2> "$T/mk.err" ||
  { cat "$T/mk.err" >&2; die "mkrecipes"; }
nr=$(grep -c '^recipe ' "$T/recipes.txt" || true)
nk=$(grep -c '^k ' "$T/recipes.txt" || true)
echo "    $nr recipes, $nk base-only chunks (k lines)"
[ "$nr" -ge 4 ] && [ "$nk" -ge 4 ] || die "mkrecipes made $nr recipes, $nk k lines"

step "restore without a seed: every base from the regions"
sb_restore "$cid" "$T/r0" "$T/r0.json"
o0=$(objects "$T/r0.json")
b0=$(field "$T/r0.json" fetched_bytes)
[ "$(field "$T/r0.json" local_bases)" = 0 ] || die "local bases without a seed"
echo "    $o0 objects, $b0 bytes fetched"

step "restore --seed the parent's directory: the bases read from it"
sb_restore "$cid" "$T/r1" "$T/r1.json" --seed "$T/src/p"
o1=$(objects "$T/r1.json")
b1=$(field "$T/r1.json" fetched_bytes)
lb1=$(field "$T/r1.json" local_bases)
echo "    $o1 objects, $b1 bytes fetched; $lb1 bases from the seed"
[ "$lb1" -ge "$nk" ] || die "only $lb1 bases read from the seed ($nk k lines)"
[ "$o1" -le $((o0 - nk)) ] || die "$o1 objects fetched with the seed, $o0 without ($nk k lines)"
[ "$b1" -lt "$b0" ] || die "$b1 bytes fetched with the seed, $b0 without"
[ "$(field "$T/r1.json" local_bases_stale)" = 0 ] || die "stale bases in an intact seed"
cks restore --run r --snapshot "$cid" --to "$T/r1h" --seed "$T/src/p" > "$T/r1h.txt" 2>&1 ||
  { cat "$T/r1h.txt" >&2; die "restore (human summary)"; }
grep -q "$lb1 recipe bases read from the seed" "$T/r1h.txt" ||
  { cat "$T/r1h.txt" >&2; die "the summary does not count the bases read from the seed"; }

step "a seed with one byte flipped inside a k line's chunk: that base from the regions"
cp -a "$T/src/p" "$T/seed2"
kid=$(awk '$1 == "k" { sub(".*/", "", $2); print $2; exit }' "$T/recipes.txt")
pman=$(ls "$T/regions/a/snapshots/r/$pid")
# the parent's file and offset of chunk kid (its c lines, in file order),
# and one byte in its middle flipped in the seed's copy
python3 - "$pman" "$kid" "$T/seed2" <<'PY' || die "chunk $kid not in the parent's manifest"
import sys
path, off = None, 0
for line in open(sys.argv[1]):
    w = line.split()
    if w[0] == "f":
        path, off = w[-1], 0
    elif w[0] == "c":
        if w[1] == sys.argv[2]:
            with open(sys.argv[3] + "/" + path, "r+b") as f:
                f.seek(off + int(w[2]) // 2)
                b = f.read(1)
                f.seek(off + int(w[2]) // 2)
                f.write(bytes([b[0] ^ 0x40]))
            sys.exit(0)
        off += int(w[2])
sys.exit(1)
PY
sb_restore "$cid" "$T/r2" "$T/r2.json" --seed "$T/seed2"
o2=$(objects "$T/r2.json")
lb2=$(field "$T/r2.json" local_bases)
echo "    $o2 objects fetched; $lb2 bases from the seed"
[ "$lb2" -ge 1 ] && [ "$lb2" -lt "$lb1" ] || die "$lb2 bases from the altered seed, $lb1 from the intact one"
[ "$o2" -gt "$o1" ] || die "$o2 objects fetched with the altered seed, $o1 with the intact one"

step "no --seed, over a target holding the parent as restored: a hot resume in place"
cks restore --run r --snapshot "$pid" --to "$T/hot" -q 2> "$T/hot.err" ||
  { cat "$T/hot.err" >&2; die "restore of the parent"; }
sb_restore "$cid" "$T/hot" "$T/r3.json" --force
lb3=$(field "$T/r3.json" local_bases)
o3=$(objects "$T/r3.json")
echo "    $o3 objects fetched; $lb3 bases from the target's files the index knows"
[ "$lb3" -ge "$nk" ] || die "only $lb3 bases read from the target ($nk k lines)"
[ "$o3" -lt "$o0" ] || die "$o3 objects fetched in place, $o0 without a seed"

echo "PASS"
