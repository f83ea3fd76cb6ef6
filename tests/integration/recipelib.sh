# recipelib.sh — sourced by the recipe tests (test-recipes-*.sh) after
# lib.sh: checkpoints whose chunks tests/tools/mkrecipes can store as
# recipes, and their round trip.
#   gen DIR SEED PERTURB   master.bin (fp32), weights.bin (its bf16 round to
#                          nearest even), notes.bin; PERTURB 0: the base
#   snap DIR STEP          snapshot of run r; prints its id
#   restore_cmp ID SRC     restores ID and compares the three files with SRC
gen() { # DIR SEED PERTURB: master.bin (fp32), weights.bin (its bf16 RNE), notes.bin
  python3 - "$1" "$2" "$3" <<'PY'
import os, random, struct, sys
d, seed, perturb = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
os.makedirs(d, exist_ok=True)
r = random.Random(1234)
n = 256 * 1024
vals = [r.gauss(0, 0.02) for _ in range(n)]
if perturb:
    r2 = random.Random(seed)
    vals = [v + r2.gauss(0, perturb) * v if i % 3 == 0 else v for i, v in enumerate(vals)]
master = struct.pack("<%df" % n, *vals)
u = struct.unpack("<%dI" % n, master)
bf = [((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF for x in u]
open(os.path.join(d, "master.bin"), "wb").write(master)
open(os.path.join(d, "weights.bin"), "wb").write(struct.pack("<%dH" % n, *bf))
notes = bytearray(r.randbytes(300 * 1024))
if perturb:
    for i in range(0, len(notes), 97):
        notes[i] ^= seed & 0xFF
open(os.path.join(d, "notes.bin"), "wb").write(bytes(notes))
PY
}

snap() { # DIR STEP -> id
  cks snapshot "$1" --run r --step "$2" --json > "$T/snap.json" 2> "$T/snap.err" ||
    { cat "$T/snap.err" >&2; die "snapshot of $1"; }
  json "$T/snap.json" 'd["id"]'
}

restore_cmp() { # ID SRC
  rm -rf "$T/rs"
  cks restore --run r --snapshot "$1" --to "$T/rs" -q 2> "$T/rs.err" ||
    { cat "$T/rs.err" >&2; die "restore of $1"; }
  for f in master.bin weights.bin notes.bin; do
    cmp "$2/$f" "$T/rs/$(basename "$2")/$f" || die "restore of $1: $f differs"
  done
}

