#!/usr/bin/env bash
# The tensor codec end to end.  A checkpoint of real torch tensors (bf16
# weights in a safetensors file, fp32 master weights and Adam moments in a
# torch.save zip: tests/bench/make_ckpt.py) is snapshotted by the CLI and
# by the daemon: its float chunks are stored as byte planes (codec 2 in the
# chunk header), the repository holds fewer bytes than the same checkpoint
# in a repository with `[compress] tensor = off` (zstd), and restores bit
# for bit from a fresh state.  A version-1 object (what earlier writers
# wrote) is still read; a damaged plane object is named by verify and
# restore takes the chunk from another region.
# Needs python3-torch (deploy/deps.sh --test); skips without it.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "no $PY"
why=$("$PY" -c 'import torch' 2>&1 | tail -1) || skip "$PY cannot import torch (python3-torch): $why"
write_config 256K 1M 4M

# codecs DIR: "codec count stored raw" per codec of the chunk objects under DIR.
codecs() {
  python3 - "$1" <<'PY'
import os, struct, sys
acc = {}
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        b = open(os.path.join(root, f), 'rb').read()
        assert b[:4] == b'CKC1', f
        codec, raw = b[5], struct.unpack('<I', b[8:12])[0]
        a = acc.setdefault(codec, [0, 0, 0])
        a[0] += 1; a[1] += len(b); a[2] += raw
for c in sorted(acc):
    print(c, *acc[c])
PY
}
count_codec() { codecs "$1" | awk -v c="$2" '$1 == c { print $2 }' | sed -n 1p; }

ck="$T/watch/run1/checkpoint-100"
step "a checkpoint of real tensors: safetensors bf16 weights, torch.save optimizer state"
"$PY" "$CKS_SOURCE_DIR/tests/bench/make_ckpt.py" "$ck" 48 > /dev/null
"$PY" - "$ck/model.safetensors" <<'PY'
import json, struct, sys, torch
g = torch.Generator().manual_seed(7)
tensors = {"layers.%d.weight" % i: (torch.randn(256 * 1024, generator=g) * 0.02).to(torch.bfloat16)
           for i in range(8)}
tensors["norm.weight"] = torch.ones(4096, dtype=torch.float32)
header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
for name, t in tensors.items():
    b = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
    header[name] = {"dtype": "BF16" if t.dtype == torch.bfloat16 else "F32",
                    "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
    blobs.append(b); off += len(b)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h)
    for b in blobs: f.write(b)
PY
printf '{"global_step": 100}\n' > "$ck/trainer_state.json"
cp -a "$ck" "$T/orig"
ls -l "$ck"

step "CLI snapshot: float chunks are stored as byte planes"
cks snapshot "$ck" --run run1 --json > "$T/s1.json"
[ "$(json "$T/s1.json" 'd["committed"]')" = 3 ] || die "not committed in 3 regions"
codecs "$T/regions/a/chunks" | tee "$T/codecs.a"
planes=$(count_codec "$T/regions/a/chunks" 2)
[ -n "$planes" ] && [ "$planes" -gt 0 ] || die "no chunk stored as planes"
for r in b c; do
  [ "$(codecs "$T/regions/$r/chunks")" = "$(cat "$T/codecs.a")" ] || die "region $r holds other objects than a"
done
awk '$1 == 2 { r = $3 / $4; print "planes: stored/raw " r; if (r > 0.9) exit 1 }' "$T/codecs.a" \
  || die "planes objects are not smaller than 0.9 of their chunks"

step "plane objects decode with the reference decoder written from the format alone"
n=0
for obj in $(find "$T/regions/a/chunks" -type f | sort); do
  [ "$(od -An -tu1 -j5 -N1 "$obj" | tr -d ' ')" = 2 ] || continue
  python3 "$CKS_SOURCE_DIR/tests/integration/chunk_decode.py" "$obj" "$(basename "$obj")" ||
    die "the reference decoder disagrees with $(basename "$obj")"
  n=$((n + 1)); [ $n -lt 3 ] || break
done
[ $n -gt 0 ] || die "no plane object for the reference decoder"

step "the same checkpoint with [compress] tensor = off stores more (zstd)"
OFF="$T/off.conf"
sed -e "s|$T/regions/|$T/off-regions/|" -e "s|^state = .*|state = $T/off-state|" "$CONF" > "$OFF"
printf '[compress]\ntensor = off\n' >> "$OFF"
mkdir -p "$T/off-regions/a" "$T/off-regions/b" "$T/off-regions/c"
"$CKPTSYNC" --config "$OFF" snapshot "$ck" --run run1 --json > "$T/off.json"
[ -z "$(count_codec "$T/off-regions/a/chunks" 2)" ] || die "tensor = off stored planes"
on_bytes=$(du -sb "$T/regions/a/chunks" | cut -f1)
off_bytes=$(du -sb "$T/off-regions/a/chunks" | cut -f1)
echo "stored: planes $on_bytes bytes, zstd only $off_bytes bytes"
[ "$on_bytes" -lt $(( off_bytes * 95 / 100 )) ] || die "planes did not save 5 % over zstd"
"$CKPTSYNC" --config "$OFF" status --json > /dev/null 2>&1 || true
"$CKPTSYNCD" --config "$OFF" --check > /dev/null || die "--check refused tensor = off"
sed -i 's/^tensor = off/tensor = maybe/' "$OFF"
expect_fail 1 "$CKPTSYNCD" --config "$OFF" --check
grep "tensor" "$T/err" | grep "auto or off" > /dev/null || { cat "$T/err"; die "no clear error for tensor = maybe"; }

step "restore from a fresh state: bit for bit"
rm -rf "$STATE"
cks restore --run run1 --latest --to "$T/r1" > /dev/null
diff -r "$T/orig" "$T/r1/checkpoint-100" > /dev/null || die "restored tree differs"

step "a version-1 chunk object (zstd) is still read"
v1=$(python3 - "$T/regions" <<'PY'
import os, sys
objs = {}
for r in "abc":
    d = os.path.join(sys.argv[1], r, "chunks")
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            b = bytearray(open(p, 'rb').read())
            if b[5] == 1:
                b[4] = 1
                open(p, 'wb').write(b)
                objs[f] = 1
print(len(objs))
PY
)
[ "$v1" -gt 0 ] || die "no zstd object to turn into version 1"
rm -rf "$STATE" "$T/r1"
cks restore --run run1 --latest --to "$T/r1" > /dev/null
diff -r "$T/orig" "$T/r1/checkpoint-100" > /dev/null || die "restore with version-1 objects differs"

step "a damaged plane object: verify names it, restore takes the chunk from another region"
bad=$(python3 - "$T/regions/a/chunks" <<'PY'
import os, sys
for root, _, files in sorted(os.walk(sys.argv[1])):
    for f in sorted(files):
        p = os.path.join(root, f)
        b = bytearray(open(p, 'rb').read())
        if b[5] == 2:
            b[len(b) // 2] ^= 0x40
            open(p, 'wb').write(b)
            print(f); sys.exit(0)
PY
)
[ -n "$bad" ] || die "no plane object to damage"
expect_fail 1 cks verify --run run1
grep "$bad" "$T/out" "$T/err" > /dev/null || { cat "$T/out" "$T/err"; die "verify did not name chunk $bad"; }
rm -rf "$STATE" "$T/r1"
cks restore --run run1 --latest --to "$T/r1" > /dev/null 2> "$T/restore.err"
diff -r "$T/orig" "$T/r1/checkpoint-100" > /dev/null || die "restore with a damaged object differs"
cks verify --run run1 --repair > /dev/null 2>&1 || true
cks verify --run run1 > /dev/null || die "verify --repair did not mend region a"

step "the daemon stores a successor's new float chunks as planes too"
ck2="$T/watch/run1/checkpoint-200"
"$PY" "$CKS_SOURCE_DIR/tests/bench/make_ckpt.py" "$ck2" 48 --successor "$ck" > /dev/null
cp -a "$ck2" "$T/orig2"
before=$(count_codec "$T/regions/b/chunks" 2)
# plain chunks, not deltas: with keyframe_every > 1 the daemon stores the
# successor's float tensors as XOR recipes against checkpoint-100
# (test-daemon-xor-keyframe)
printf '[compress]\nkeyframe_every = 1\n' >> "$CONF"
start_daemon
cks commit "$ck2" --wait replicated --timeout 120 > /dev/null || { tail -20 "$T/daemon.log"; die "commit failed"; }
stop_daemon
after=$(count_codec "$T/regions/b/chunks" 2)
echo "plane objects in region b: $before before the successor, $after after"
[ "$after" -gt "$before" ] || die "the daemon stored no new plane objects"
rm -rf "$STATE" "$T/r2"
cks restore --run run1 --latest --to "$T/r2" > /dev/null
diff -r "$T/orig2" "$T/r2/checkpoint-200" > /dev/null || die "restored successor differs"
echo "ok"
