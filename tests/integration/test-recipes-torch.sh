#!/usr/bin/env bash
# regions: dir
# Manifest version 6 with real torch checkpoints (issue 27): a small
# model trained with AdamW by Debian's torch (/usr/bin/python3), its fp32
# master weights and their bf16 cast saved with torch.save as two files
# of one checkpoint, and the checkpoint 10 steps later.  tests/tools/
# mkrecipes stores the later checkpoint's changed chunks as XOR against
# the earlier one's (the torch zip keeps each tensor at the same offset),
# deleting their plain objects; restore gives torch.save's bytes (cmp),
# torch.load of the restored files equals the trained tensors, verify
# passes.  (Derived bf16 from the master needs the tensor view to map a
# zip's offsets: test-recipes-read covers it on raw arrays.)
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
# mkrecipes rewrites snapshots stored plain: no derived bf16 nor deltas
# at snapshot time (test-derive-bf16 and test-xor-keyframe test those)
printf '[compress]\nderive_bf16 = off\nkeyframe_every = 1\n' >> "$CONF"
MK="$CKS_BUILD_DIR/tests/mkrecipes"
[ -x "$MK" ] || skip "mkrecipes not built"
/usr/bin/python3 -c 'import torch' 2> /dev/null || skip "Debian's python3-torch is not installed"

step "train: two checkpoints 10 AdamW steps apart (bf16 weights + fp32 master)"
/usr/bin/python3 - "$T/src" <<'PY'
import os, sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
def save(d):
    os.makedirs(d, exist_ok=True)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    torch.save(sd, os.path.join(d, "master.pt"))
    torch.save({k: v.to(torch.bfloat16) for k, v in sd.items()}, os.path.join(d, "weights.pt"))
def train(n):
    for _ in range(n):
        x = torch.randn(32, 256)
        loss = (model(x) - x).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
train(5); save(os.path.join(sys.argv[1], "p", "ckpt"))
train(10); save(os.path.join(sys.argv[1], "c", "ckpt"))
PY

snap() { # DIR STEP -> id
  cks snapshot "$1" --run r --step "$2" --json > "$T/snap.json" 2> "$T/snap.err" ||
    { cat "$T/snap.err" >&2; die "snapshot of $1"; }
  json "$T/snap.json" 'd["id"]'
}
pid=$(snap "$T/src/p/ckpt" 5)
cid=$(snap "$T/src/c/ckpt" 15)

step "mkrecipes: the later checkpoint as XOR against the earlier"
"$MK" "$CONF" r "$cid" "$pid" xor > "$T/recipes.txt" 2> "$T/mk.err" ||
  { cat "$T/mk.err" >&2; die "mkrecipes"; }
for f in master.pt weights.pt; do
  n=$(grep -cE "^recipe .* file [^ ]*$f " "$T/recipes.txt" || true)
  echo "    $f: $n recipes"
  [ "$n" -ge 1 ] || die "no chunk of $f paid as XOR against the parent"
done

step "restore: torch.save's bytes; torch.load gives the tensors; verify passes"
cks restore --run r --snapshot "$cid" --to "$T/rs" -q 2> "$T/rs.err" ||
  { cat "$T/rs.err" >&2; die "restore"; }
for f in master.pt weights.pt; do cmp "$T/src/c/ckpt/$f" "$T/rs/ckpt/$f" || die "$f differs"; done
/usr/bin/python3 - "$T/src/c/ckpt" "$T/rs/ckpt" <<'PY'
import sys, torch
for f in ("master.pt", "weights.pt"):
    a, b = torch.load(sys.argv[1] + "/" + f), torch.load(sys.argv[2] + "/" + f)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f
PY
cks verify --run r > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify failed"; }
echo "PASS"
