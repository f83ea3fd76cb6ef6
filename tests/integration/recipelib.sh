# recipelib.sh — sourced by the recipe tests (test-recipes-*.sh, the
# daemon's derived-bf16 tests) after lib.sh and write_config: checkpoints
# whose chunks tests/tools/mkrecipes or the writers store as recipes, and
# their round trip.
#   gen DIR SEED PERTURB   master.bin (fp32), weights.bin (its bf16 round to
#                          nearest even), notes.bin; PERTURB 0: the base
#   snap DIR STEP          snapshot of run r; prints its id
#   restore_cmp ID SRC     restores ID and compares the three files with SRC
#   ckpt DIR SEED [KIND]   DIR/model.pt: a torch.save checkpoint (Debian's
#                          /usr/bin/python3 with torch) of one model, its
#                          bf16 weights (master.to(torch.bfloat16)) and
#                          their fp32 master; KIND bf16 or fp32: one of them
#   ckpt_restores RUN ID DIR   restores ID; its DIR/model.pt bit for bit
#   keys_in REGION TOP     the keys under TOP/ (chunks, recipes) in REGION
#                          (dir or s3 regions)
#   recidx_matches INDEX   every recipe record of the local index (an LMDB
#                          directory; mdb_dump) has as many presence bits
#                          as dir regions $T/regions/* hold its recipes/
#                          key (plain repositories); prints the counts
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

# ckpt DIR SEED [KIND]: a model's bf16 weights and their fp32 master; KIND
# both (the default): DIR/model.pt holds both; bf16: DIR/model.pt holds
# the weights alone; fp32: DIR/master.pt holds the master alone
ckpt() {
  /usr/bin/python3 - "$1" "$2" "${3:-both}" <<'PY'
import os, sys, torch
d, seed, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.makedirs(d, exist_ok=True)
torch.manual_seed(seed)
m = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 512))
a = {k: v.detach().clone() for k, v in m.state_dict().items()}
bf = {k: v.to(torch.bfloat16) for k, v in a.items()}
obj, name = {"both": ({"model": bf, "master": a}, "model.pt"), "bf16": ({"model": bf}, "model.pt"),
             "fp32": ({"master": a}, "master.pt")}[kind]
torch.save(obj, os.path.join(d, name))
PY
}

ckpt_restores() { # RUN ID DIR
  rm -rf "$T/rs"
  cks restore --run "$1" --snapshot "$2" --to "$T/rs" -q 2> "$T/rs.err" || { cat "$T/rs.err"; die "restore of $2"; }
  cmp "$3/model.pt" "$T/rs/$(basename "$3")/model.pt" || die "$2 restores other bytes than $3"
}

# keys_in REGION TOP: the keys under TOP/ (chunks, recipes) in the region
keys_in() {
  if [ "${CKS_REGIONS:-dir}" = s3 ]; then
    { aws_s3 "$1" s3 ls "s3://$S3_BUCKET/$S3_PREFIX/$2/" --recursive || true; } |
      awk '{print $4}' | sed "s|^$S3_PREFIX/||"
  else
    (cd "$T/regions/$1" && find "$2" -type f 2> /dev/null || true)
  fi
}

recidx_matches() { # INDEX: recipe records' presence bits against the dir regions
  mdb_dump -s recipes "$1" > "$T/recidx.dump" || die "mdb_dump of $1"
  python3 - "$T/recidx.dump" "$T/regions" <<'PY' || die "the index's recipes/ presence is not the regions'"
import os, sys
lines = open(sys.argv[1]).read().split("\n")
recs = lines[lines.index("HEADER=END") + 1:lines.index("DATA=END")]
regions = sorted(os.listdir(sys.argv[2]))
bad = held = 0
for k, v in zip(recs[0::2], recs[1::2]):
    k, v = k.strip(), bytes.fromhex(v.strip())
    key = f"recipes/{k[:2]}/{k[:64]}.{k[64:80]}"
    n = sum(os.path.exists(os.path.join(sys.argv[2], r, key)) for r in regions)
    bits = bin(int.from_bytes(v[12:16], "little")).count("1")
    held += n > 0
    if bits != n:
        bad += 1
        print(f"    {key}: {bits} presence bit(s), held by {n} region(s)")
print(f"    index: {len(recs) // 2} recipe record(s), {held} held by some region, {bad} wrong")
sys.exit(1 if bad or not recs else 0)
PY
}
