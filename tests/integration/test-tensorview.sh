#!/usr/bin/env bash
# Widths from the torch.save zip's own metadata (engine/tensorview.h): a
# checkpoint saved by torch.save holding only bf16 tensors whose values
# alternate in magnitude (even columns small, odd ones large) — data on
# which the codec's estimate takes 4-byte planes — is stored with every
# byte-plane chunk coded at width 2, the dtype's; then an fp32 master
# saved the same way gets width 4.  Both restore bit for bit.  Before the
# view was wired into the scan, the bf16 chunks were coded at width 4.
# Needs python3-torch (deploy/deps.sh --test); skips without it.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "no $PY"
why=$("$PY" -c 'import torch' 2>&1 | tail -1) || skip "$PY cannot import torch (python3-torch): $why"
write_config 256K 1M 4M

# widths DIR [SEEN]: "width count" of the plane objects (codec 2) under
# DIR, but those named in the file SEEN; the width is the payload's first
# byte (engine/tcodec.h).
widths() {
  python3 - "$1" "${2:-/dev/null}" <<'PY'
import collections, os, sys
acc, seen = collections.Counter(), set(open(sys.argv[2]).read().split())
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        if f in seen:
            continue
        b = open(os.path.join(root, f), 'rb').read(13)
        if b[:4] == b'CKC1' and b[5] == 2:
            acc[b[12]] += 1
for w in sorted(acc):
    print(w, acc[w])
PY
}

save() { # DIR DTYPE: a torch.save checkpoint of 4 M values of DTYPE
  "$PY" - "$1" "$2" <<'PY'
import os, sys, torch
out, dtype = sys.argv[1], getattr(torch, sys.argv[2])
os.makedirs(out, exist_ok=True)
g = torch.Generator().manual_seed(11)
w = torch.randn(2048, 2048, generator=g) * 0.02
w[:, 1::2] *= 50000.0  # odd columns: another exponent range
torch.save({"model": {"layers.0.weight": w.to(dtype)}, "step": 100}, os.path.join(out, "model.pt"))
PY
}

step "a torch.save checkpoint of bf16 weights"
save "$T/watch/run1/checkpoint-100" bfloat16
cp -a "$T/watch/run1/checkpoint-100" "$T/orig100"
cks snapshot "$T/watch/run1/checkpoint-100" --run run1 --json > "$T/s1.json"
widths "$T/regions/a/chunks" | tee "$T/w1"
[ "$(awk '$1 == 2 { n = $2 } END { print n + 0 }' "$T/w1")" -ge 3 ] || die "fewer than 3 bf16 chunks coded as 2-byte planes"
[ -z "$(awk '$1 != 2' "$T/w1")" ] || die "a bf16 chunk was coded at another width than 2"

step "an fp32 master saved the same way: 4-byte planes"
save "$T/watch/run1/checkpoint-200" float32
cp -a "$T/watch/run1/checkpoint-200" "$T/orig200"
find "$T/regions/a/chunks" -type f -printf '%f\n' > "$T/seen"
cks snapshot "$T/watch/run1/checkpoint-200" --run run1 --json > "$T/s2.json"
widths "$T/regions/a/chunks" "$T/seen" | tee "$T/w2"
[ "$(awk '$1 == 4 { n = $2 } END { print n + 0 }' "$T/w2")" -ge 6 ] || die "fewer than 6 fp32 chunks coded as 4-byte planes"
[ -z "$(awk '$1 != 4' "$T/w2")" ] || die "an fp32 chunk was coded at another width than 4"

step "both restore bit for bit"
cks restore --run run1 --all --to "$T/r" > /dev/null
cmp "$T/orig100/model.pt" "$T/r/checkpoint-100/model.pt" || die "step 100 differs"
cmp "$T/orig200/model.pt" "$T/r/checkpoint-200/model.pt" || die "step 200 differs"
echo "PASS"
