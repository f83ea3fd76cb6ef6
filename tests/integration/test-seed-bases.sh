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
#     resume in place);
#   - with --seed a directory the index knows whose base chunk changed on
#     disk behind its identity (a byte written through a shared mapping
#     whose page was already dirty: no new ctime or mtime, the same size;
#     what bit rot looks like to the index): the bases of files the index
#     knows are read unchecked, so the recipes built on the changed one
#     fail their ids; that base is fetched from the regions and they are
#     decoded again (local_bases_refetched), bit for bit.
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

step "a seed the index knows, a base changed behind its identity: fetched, decoded again"
cks restore --run r --snapshot "$pid" --to "$T/rot" -q 2> "$T/rot.err" ||
  { cat "$T/rot.err" >&2; die "restore of the parent"; }
# The chunk's first write through the mapping moves ctime (the kernel's
# write fault); a snapshot then records the file's identity and true
# chunks in the index; the second write, to the same dirty page, moves
# no time: the index still vouches for the file, its bytes differ.
python3 - "$pman" "$kid" "$T/rot" "$CKPTSYNC" "$CONF" <<'PY' || die "corrupting the seed behind its identity"
import mmap, os, subprocess, sys
man, kid, top, cks, conf = sys.argv[1:6]
path, off = None, 0
for line in open(man):
    w = line.split()
    if w[0] == "f":
        path, off = w[-1], 0
    elif w[0] == "c":
        if w[1] == kid:
            at = off + int(w[2]) // 2
            break
        off += int(w[2])
else:
    sys.exit("chunk %s not in the parent's manifest" % kid)
fn = os.path.join(top, path)
with open(fn, "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    m[at] = m[at]  # the write fault: ctime moves, the bytes do not
    subprocess.run([cks, "--config", conf, "snapshot", os.path.join(top, "ckpt"),
                    "--run", "rot", "--step", "1", "-q"], check=True)
    st0 = os.stat(fn)
    m[at] = m[at] ^ 0x40
    m.close()
st1 = os.stat(fn)
key = lambda s: (s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns)
if key(st0) != key(st1):
    sys.exit("the file's identity moved (%s -> %s): written back between the writes?" % (key(st0), key(st1)))
PY
sb_restore "$cid" "$T/r4" "$T/r4.json" --seed "$T/rot"
lb4=$(field "$T/r4.json" local_bases)
rf4=$(field "$T/r4.json" local_bases_refetched)
echo "    $lb4 bases from the seed, $rf4 found changed and fetched from the regions"
[ "$rf4" -ge 1 ] || die "no base refetched: the changed base was not read unchecked, or not used"
[ "$(field "$T/r4.json" local_bases_stale)" = 0 ] || die "a base was checked, not trusted"
[ "$lb4" -ge "$nk" ] || die "only $lb4 bases read from the seed the index knows ($nk k lines)"

echo "PASS"
