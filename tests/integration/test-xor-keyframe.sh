#!/usr/bin/env bash
# regions: dir
# encrypted: yes
# The XOR-against-keyframe writer of `ckptsync snapshot` (issue 27,
# deliverable 3; docs/deltas.md): a run of four torch.save checkpoints
# written by Debian's torch (bf16 weights, fp32 master, AdamW state in one
# file; tests/integration/xor_train.py) with [compress] keyframe_every = 3:
#  - step 1 is a keyframe (no k lines), steps 2 and 3 are deltas against
#    it (k lines naming step 1's chunks, r lines), step 4 a keyframe
#    again; every snapshot restores bit for bit and verify is clean;
#  - the deltas store fewer bytes than the same run with keyframe_every =
#    1 (figures from the snapshots' JSON);
#  - with the keyframe's directory gone locally: keyframe_fetch = off
#    (the default) stores the snapshot without deltas, downloading
#    nothing, and it is the next one's keyframe (whose chunk changed in
#    the local copy is stored without the delta); keyframe_fetch = on
#    takes the bases from the regions, and the snapshot is the same
#    (stored bytes, r and k lines);
#  - a fine-tune (a frozen layer, small steps) round-trips as a delta;
#  - kill -9 in a delta's phase B (CKPTSYNC_TEST_DWRITE_STOP_AFTER):
#    nothing published, the rerun publishes and restores;
#  - a k chunk missing in one region at the confirmation is uploaded again
#    from the keyframe's bytes;
#  - the keyframe forgotten and pruned while a delta is kept: the delta's
#    k chunks stay, it restores, verify is clean; the index's recipe
#    records have a presence bit per region that holds the recipe (phase B
#    set them, prune cleared those of the recipes it deleted);
#  - keyframe_every outside 1..64 is refused naming the key.
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
. "$CKS_SOURCE_DIR/tests/integration/recipelib.sh" # recidx_matches (snap, restore_cmp: below)
/usr/bin/python3 -c 'import torch' 2> /dev/null || skip "Debian's python3-torch is not installed"
printf '[compress]\nkeyframe_every = 3\n' >> "$CONF"
SRC="$T/src"
ENC=${CKS_TEST_ENCRYPT:-0}

step "a training run: checkpoints of steps 1-4 (torch.save)"
/usr/bin/python3 "$CKS_SOURCE_DIR/tests/integration/xor_train.py" "$SRC" 1 2 3 4 ||
  die "xor_train.py"

step "keyframe_every outside 1..64 is refused, naming the key"
for v in 0 65; do
  sed "s/^keyframe_every = .*/keyframe_every = $v/" "$CONF" > "$T/bad.conf"
  if "$CKPTSYNC" --config "$T/bad.conf" snapshot "$SRC/step-1" --run r 2> "$T/bad.err"; then
    die "a snapshot ran with keyframe_every = $v"
  fi
  grep -q "keyframe_every" "$T/bad.err" || { cat "$T/bad.err"; die "no error naming keyframe_every"; }
done

man_text() { cat "$T"/regions/a/snapshots/r/"$1"; } # (plain text unless encrypted)
kf_line() { grep -o 'keyframe [0-9A-Za-z.-]*: [0-9].*' "$1" || true; }
snap() { # CONF STEP NAME: snapshot step-STEP, JSON in $T/NAME.json, log in $T/NAME.err
  "$CKPTSYNC" --config "$1" snapshot "$SRC/step-$2" --run r --step "$2" --json > "$T/$3.json" \
    2> "$T/$3.err" || { cat "$T/$3.err"; die "snapshot of step $2 ($3)"; }
  json "$T/$3.json" 'd["id"]'
}
restore_cmp() { # CONF ID STEP
  rm -rf "$T/rs"
  "$CKPTSYNC" --config "$1" restore --run r --snapshot "$2" --to "$T/rs" -q 2> "$T/rs.err" ||
    { cat "$T/rs.err"; die "restore of step $3"; }
  cmp "$SRC/step-$3/ckpt.pt" "$T/rs/step-$3/ckpt.pt" || die "step $3 restored differs"
}

step "snapshots of steps 1-4 with keyframe_every = 3"
declare -A ID
for s in 1 2 3 4; do
  ID[$s]=$(snap "$CONF" $s s$s)
  echo "    step $s: ${ID[$s]} new $(json "$T/s$s.json" 'd["new_bytes"]') stored $(json "$T/s$s.json" 'd["stored_bytes"]'); $(kf_line "$T/s$s.err")"
done
for s in 1 4; do grep -q "^ckptsync: info: keyframe: " "$T/s$s.err" && die "step $s has a keyframe"; done
for s in 2 3; do
  grep -q "keyframe: snapshot ${ID[1]} (step 1)" "$T/s$s.err" || { cat "$T/s$s.err"; die "step $s is not a delta against step 1"; }
  n=$(kf_line "$T/s$s.err" | sed -n 's/.*; \([0-9]*\) of its chunks named as bases.*/\1/p')
  [ "${n:-0}" -gt 0 ] || die "step $s names no keyframe chunk as a base"
done
if [ "$ENC" != 1 ]; then
  man_text "${ID[1]}" > "$T/m1.txt"
  grep '^c ' "$T/m1.txt" | grep -v ' r$' | awk '{print $2}' | sort -u > "$T/c1.txt" # plain ones
  for s in 1 2 3 4; do
    man_text "${ID[$s]}" > "$T/m$s.txt"
    nk=$(grep -c '^k ' "$T/m$s.txt" || true)
    nr=$(grep -c '^r ' "$T/m$s.txt" || true)
    echo "    step $s manifest: $nk k line(s), $nr r line(s)"
    case $s in
      1 | 4) [ "$nk" = 0 ] || die "step $s, a keyframe, has k lines" ;;
      *)
        [ "$nk" -gt 0 ] && [ "$nr" -gt 0 ] || die "step $s, a delta, lacks k or r lines"
        grep '^k ' "$T/m$s.txt" | awk '{print $2}' | sort -u > "$T/k$s.txt"
        [ -z "$(comm -23 "$T/k$s.txt" "$T/c1.txt")" ] || die "step $s has a k line that is not step 1's chunk"
        ;;
    esac
  done
fi

step "every snapshot restores bit for bit; verify is clean"
for s in 1 2 3 4; do restore_cmp "$CONF" "${ID[$s]}" $s; done
cks verify --run r > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify"; }

# A second repository (same settings, its own regions and index) for the
# comparisons: CONF2 with keyframe_every = K.
repo2() { # NAME K -> config path
  mkdir -p "$T/$1/a" "$T/$1/b" "$T/$1/c"
  sed -e "s|$T/regions/|$T/$1/|" -e "s|^state = .*|state = $T/$1/state|" \
    -e "s/^keyframe_every = .*/keyframe_every = $2/" "$CONF" > "$T/$1.conf"
  echo "$T/$1.conf"
}

step "stored bytes of step 2 against keyframe_every = 1"
C1=$(repo2 kf1 1)
snap "$C1" 1 one1 > /dev/null
snap "$C1" 2 one2 > /dev/null
grep -q "^ckptsync: info: keyframe: " "$T/one2.err" && die "keyframe_every = 1 made a delta"
python3 - "$T/s2.json" "$T/one2.json" <<'PY'
import json, sys
x, y = (json.load(open(p)) for p in sys.argv[1:])
print(f"    step 2: new {x['new_bytes']} bytes; stored {x['stored_bytes']} with keyframe_every = 3, "
      f"{y['stored_bytes']} with 1 ({x['stored_bytes'] / y['stored_bytes']:.3f})")
sys.exit(0 if x["stored_bytes"] < y["stored_bytes"] else 1)
PY
[ $? = 0 ] || die "the delta stored no fewer bytes than a keyframe"
if [ "$ENC" != 1 ]; then
  # phase B keeps a delta only when smaller than the chunk stored plain,
  # a size it computes without coding the chunk (chunkobj_size): each of
  # step 2's recipes whose chunk keyframe_every = 1 stored plain is smaller
  # than that object
  python3 - "$T/m2.txt" "$T/regions/a" "$T/kf1/a" <<'PY' || die "a delta recipe is not smaller than its chunk stored plain"
import os, sys
man, delta, plain = sys.argv[1:]
n = 0
for l in open(man):
    f = l.split()
    if f[0] != "r":
        continue
    p = os.path.join(plain, "chunks", f[1][:2], f[1])
    if not os.path.exists(p):
        continue  # a derived bf16 chunk: a recipe there too
    r = os.path.getsize(os.path.join(delta, "recipes", f[1][:2], f[1] + "." + f[3]))
    if r >= os.path.getsize(p):
        sys.exit(f"recipe of {f[1]}: {r} bytes, stored plain in {os.path.getsize(p)}")
    n += 1
print(f"    step 2: {n} delta recipe(s), each smaller than its chunk stored plain")
sys.exit(0 if n else 1)
PY
fi

step "a fine-tune (first layer frozen, small steps): the delta restores bit for bit"
FT="$T/ft"
FINETUNE=1 /usr/bin/python3 "$CKS_SOURCE_DIR/tests/integration/xor_train.py" "$FT" 1 2 || die "xor_train.py (fine-tune)"
CF=$(repo2 kff 3)
for s in 1 2; do
  "$CKPTSYNC" --config "$CF" snapshot "$FT/step-$s" --run ft --step $s --json > "$T/f$s.json" 2> "$T/f$s.err" ||
    { cat "$T/f$s.err"; die "snapshot of fine-tune step $s"; }
done
grep -q "keyframe: snapshot $(json "$T/f1.json" 'd["id"]') (step 1)" "$T/f2.err" ||
  { cat "$T/f2.err"; die "fine-tune step 2 is not a delta against step 1"; }
rm -rf "$T/rs"
"$CKPTSYNC" --config "$CF" restore --run ft --snapshot "$(json "$T/f2.json" 'd["id"]')" --to "$T/rs" -q ||
  die "restore of fine-tune step 2"
cmp "$FT/step-2/ckpt.pt" "$T/rs/step-2/ckpt.pt" || die "fine-tune step 2 restored differs"
echo "    fine-tune step 2: stored $(json "$T/f2.json" 'd["stored_bytes"]') of $(json "$T/f2.json" 'd["bytes"]') bytes; $(kf_line "$T/f2.err")"

step "the keyframe's directory gone locally, keyframe_fetch = off (the default): no delta, no download"
C3=$(repo2 kfo 3)
snap "$C3" 1 o1 > /dev/null
mv "$SRC/step-1" "$T/step-1.away"
oid=$(snap "$C3" 2 o2)
mv "$T/step-1.away" "$SRC/step-1"
grep -q 'no local copy of "step-1/ckpt.pt" beside the snapshot (keyframe_fetch = off)' "$T/o2.err" ||
  { cat "$T/o2.err"; die "no message that the keyframe's file is not local"; }
kf_line "$T/o2.err" | grep ' [1-9][0-9]* from the regions' > /dev/null && die "bases were downloaded with keyframe_fetch = off"
if [ "$ENC" != 1 ]; then
  grep -q '^k ' "$T"/kfo/a/snapshots/r/"$oid" && die "step 2 names keyframe chunks without their bytes"
fi
restore_cmp "$C3" "$oid" 2
# step 2, stored without deltas, is the keyframe of step 3, whose bases
# are local; one of them changed in the local copy (a trainer rewriting
# it) is not fetched: its chunks are stored without the delta
cp -p "$SRC/step-2/ckpt.pt" "$T/ckpt2.orig"
python3 - "$SRC/step-2/ckpt.pt" <<'PY'
import os, sys
n = os.path.getsize(sys.argv[1])
with open(sys.argv[1], "r+b") as f:  # tensor bytes only: the zip's head and tail stay
    for off in range(n // 4, 3 * n // 4, 128 << 10):
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0xFF]))
PY
o3=$(snap "$C3" 3 o3)
cp -p "$T/ckpt2.orig" "$SRC/step-2/ckpt.pt"
grep -q "keyframe: snapshot $oid (step 2)" "$T/o3.err" || { cat "$T/o3.err"; die "step 3 is not a delta against step 2"; }
grep -q 'not in its local copy (changed since; keyframe_fetch = off)' "$T/o3.err" ||
  { cat "$T/o3.err"; die "no message that a base changed in the local copy"; }
kf_line "$T/o3.err" | grep ' [1-9][0-9]* base chunk(s) read from local files, 0 from the regions' > /dev/null ||
  { kf_line "$T/o3.err"; die "step 3: not its other bases from the local copy, or a download"; }
restore_cmp "$C3" "$o3" 3
if [ "$ENC" != 1 ]; then
  # the chunks stored without the delta are coded as the read codes them
  # (byte planes of the tensor's width): each of step 3's plain chunks is
  # the very object keyframe_every = 1 stores for it
  snap "$C1" 3 one3 > /dev/null
  python3 - "$T"/kfo/a/snapshots/r/"$o3" "$T/kfo/a" "$T/kf1/a" <<'PY' || die "a chunk phase B kept plain is not coded as the read codes it"
import os, sys
man, delta, plain = sys.argv[1:]
n = bad = 0
for l in open(man):
    f = l.split()
    if f[0] != "c" or f[-1] == "r":
        continue
    a, b = (os.path.join(d, "chunks", f[1][:2], f[1]) for d in (delta, plain))
    if os.path.exists(a) and os.path.exists(b):
        n += 1
        bad += os.path.getsize(a) != os.path.getsize(b)
print(f"    step 3: {n} plain chunk objects compared with keyframe_every = 1's, {bad} differ")
sys.exit(1 if bad or n == 0 else 0)
PY
fi

step "the keyframe's directory gone locally, keyframe_fetch = on: bases from the regions, the same snapshot"
C2=$(repo2 kfr 3)
sed -i '/^keyframe_every/a keyframe_fetch = on' "$C2"
snap "$C2" 1 r1 > /dev/null
mv "$SRC/step-1" "$T/step-1.away"
rid=$(snap "$C2" 2 r2)
mv "$T/step-1.away" "$SRC/step-1"
echo "    $(kf_line "$T/r2.err")"
kf_line "$T/r2.err" | grep ' 0 base chunk(s) read from local files, [1-9][0-9]* from the regions' > /dev/null ||
  die "the bases did not come from the regions"
kf_line "$T/s2.err" | grep ' 0 from the regions' > /dev/null || die "with the local copy, bases came from the regions"
# (an encrypted repository keys its chunker: another repository cuts
# the same files elsewhere, so the comparison is of plain ones)
if [ "$ENC" != 1 ]; then
  [ "$(json "$T/r2.json" 'd["stored_bytes"]')" = "$(json "$T/s2.json" 'd["stored_bytes"]')" ] ||
    die "stored bytes differ: $(json "$T/r2.json" 'd["stored_bytes"]') from the regions, $(json "$T/s2.json" 'd["stored_bytes"]') locally"
  cat "$T"/kfr/a/snapshots/r/"$rid" | grep '^[rk] ' > "$T/r2.lines"
  grep '^[rk] ' "$T/m2.txt" | cmp - "$T/r2.lines" || die "the r and k lines differ"
fi
restore_cmp "$C2" "$rid" 2

step "kill -9 in a delta's phase B: nothing published; the rerun publishes"
CKPTSYNC_TEST_DWRITE_STOP_AFTER=3 "$CKPTSYNC" --config "$C2" snapshot "$SRC/step-3" --run r --step 3 \
  > /dev/null 2> "$T/k.err" &
pid=$!
deadline=$((SECONDS + 60))
until [ "$(awk '{print $3}' "/proc/$pid/stat" 2> /dev/null)" = T ]; do
  [ -e "/proc/$pid" ] || { cat "$T/k.err"; die "the snapshot ended before its third recipe"; }
  [ $SECONDS -lt $deadline ] || die "the snapshot never reached phase B's third recipe"
  sleep 0.1
done
kill -9 "$pid"
wait "$pid" 2> /dev/null || true
"$CKPTSYNC" --config "$C2" ls --run r --remote --json > "$T/ls.json" || die "ls"
[ "$(json "$T/ls.json" 'len(d)')" = 2 ] || die "the killed snapshot was published"
rid3=$(snap "$C2" 3 r3)
grep -q "keyframe: snapshot" "$T/r3.err" || die "the rerun is not a delta"
restore_cmp "$C2" "$rid3" 3
"$CKPTSYNC" --config "$C2" verify --run r > "$T/v2.txt" 2>&1 || { cat "$T/v2.txt"; die "verify (kfr)"; }

step "a k chunk gone from one region is uploaded again from the keyframe's bytes"
if [ "$ENC" != 1 ]; then
  k1=$(grep -m1 '^k ' "$T/m3.txt" | awk '{print $2}')
  f=$(find "$T/regions/b/chunks" -name "$k1*")
  [ -n "$f" ] || die "k chunk $k1 is not in region b"
  rm "$f"
  touch "$SRC/step-3/ckpt.pt" # read again: its chunks confirmed again
  id3b=$(snap "$CONF" 3 s3b)
  [ "$(json "$T/s3b.json" 'd["committed"]')" = 3 ] || { cat "$T/s3b.err"; die "not committed in every region"; }
  [ -n "$(find "$T/regions/b/chunks" -name "$k1*")" ] || die "the k chunk was not uploaded again to region b"
  cks verify --run r > "$T/v3.txt" 2>&1 || { cat "$T/v3.txt"; die "verify after the re-upload"; }
fi

step "the keyframe forgotten and pruned, its delta (step 2) kept: the delta restores"
cks forget --run r --keep-every 2 -q || die "forget"
cks ls --run r --remote --json > "$T/ls.json" || die "ls"
[ "$(json "$T/ls.json" '1 in [s["step"] for s in d]')" = False ] || die "step 1 was not forgotten"
cks prune --grace 0 --json > "$T/p.json" 2> "$T/p.err" || { cat "$T/p.err"; die "prune"; }
echo "    prune deleted $(json "$T/p.json" 'sum(x["deleted"] for x in d["regions"])') objects"
[ "$(json "$T/p.json" 'sum(x["deleted"] for x in d["regions"])')" -gt 0 ] || die "prune deleted nothing"
if [ "$ENC" != 1 ]; then
  for k in $(grep '^k ' "$T/m2.txt" | awk '{print $2}'); do
    for rg in a b c; do
      [ -f "$T/regions/$rg/chunks/${k:0:2}/$k" ] || die "prune deleted step 2's base $k in region $rg"
    done
  done
  gone=$(comm -23 "$T/c1.txt" <(grep '^k ' "$T/m2.txt" "$T/m4.txt" | awk '{print $2}' | sort -u) |
    while read -r c; do [ -f "$T/regions/a/chunks/${c:0:2}/$c" ] || echo "$c"; done | wc -l)
  echo "    step 1's plain chunks: $(wc -l < "$T/c1.txt"), deleted by prune: $gone; step 2's $(wc -l < "$T/k2.txt") bases kept"
fi
restore_cmp "$CONF" "${ID[2]}" 2
restore_cmp "$CONF" "${ID[4]}" 4
cks verify --run r > "$T/v4.txt" 2>&1 || { cat "$T/v4.txt"; die "verify after prune"; }
# the index's recipes/ presence: phase B set it, prune cleared the deleted
if [ "$ENC" != 1 ]; then
  [ -n "$(keys_in a recipes)" ] || die "prune left no recipe in region a"
  recidx_matches "$STATE/index"
fi
echo PASS
