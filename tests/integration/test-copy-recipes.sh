#!/usr/bin/env bash
# Upload once for phase B's objects (issues 25 and 27): `ckptsync snapshot`
# of a delta (XOR recipes against the keyframe, derived bf16) on three
# buckets of one s3rver, which can copy from each other.  The recipes
# are most of a delta's stored bytes; region a gets them from the
# instance and regions b and c copy them server-side (the snapshot's
# JSON: b and c put no recipe bytes, copied at least what a put in phase
# B; sent_ratio about 1), every region lists every recipe object (the
# AWS CLI), and the delta restores bit for bit from region c alone.
# The daemon the same: a delta committed to it (step 3) sends its recipes
# to region a, and b and c copy them once a confirmed them (the index's
# recipe presence; the metrics: b and c put a tenth of a's bytes at most).
. "$(dirname "$0")/lib.sh"
. "$CKS_SOURCE_DIR/tests/integration/s3lib.sh"
/usr/bin/python3 -c 'import torch' 2> /dev/null || skip "Debian's python3-torch is not installed"
command -v curl > /dev/null || skip "curl is not installed"
MP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
declare -A BUCKET=([a]=ckpt [b]=ckpt-b [c]=ckpt-c)
SRC="$T/src"

start_s3 one --bucket "${BUCKET[b]}" --bucket "${BUCKET[c]}"
write_s3_credentials
{
  config_head 16K 64K 256K
  printf '[compress]\nkeyframe_every = 3\nkeyframe_fetch = on\n'
  for r in a b c; do s3_region_section "$r" "$(s3_url one)" "${BUCKET[$r]}"; done
} > "$CONF"
sed -i "/^\[daemon\]/a metrics = 127.0.0.1:$MP\nsettle = 1" "$CONF"
mkdir -p "$T/watch"
encrypt_if_asked

# recipes BUCKET: the recipe objects' keys in BUCKET, sorted (the AWS CLI).
recipes() {
  aws_s3 one s3api list-objects-v2 --bucket "$1" --prefix "$S3_PREFIX/recipes/" > "$T/list.json"
  if [ -s "$T/list.json" ]; then
    json "$T/list.json" '"\n".join(o["Key"] for o in d.get("Contents", []))'
  fi | sed '/^$/d' | sort
}
region_field() { json "$1" "[g[\"$3\"] for g in d[\"regions\"] if g[\"name\"] == \"$2\"][0]"; }

step "a keyframe (step 1) and a delta against it (step 2)"
/usr/bin/python3 "$CKS_SOURCE_DIR/tests/integration/xor_train.py" "$SRC" 1 2 3 || die "xor_train.py"
for s in 1 2; do
  cks snapshot "$SRC/step-$s" --run r --step $s --json > "$T/s$s.json" 2> "$T/s$s.err" ||
    { cat "$T/s$s.err"; die "snapshot of step $s"; }
done
grep -q "keyframe: snapshot" "$T/s2.err" || { cat "$T/s2.err"; die "step 2 is not a delta"; }
id2=$(json "$T/s2.json" 'd["id"]')

step "the delta's recipes went up once: regions b and c copied them"
for r in a b c; do
  echo "    region $r: put $(region_field "$T/s2.json" $r bytes_put) B," \
    "copied $(region_field "$T/s2.json" $r objects_copied) objects" \
    "($(region_field "$T/s2.json" $r bytes_copied) B)"
done
put_a=$(region_field "$T/s2.json" a bytes_put)
for r in b c; do
  put=$(region_field "$T/s2.json" $r bytes_put)
  copied=$(region_field "$T/s2.json" $r bytes_copied)
  [ "$(region_field "$T/s2.json" $r copies_failed)" = 0 ] || die "region $r: a copy failed"
  # what b and c still put is the manifest and the like, not the recipes
  [ $((put * 10)) -lt "$put_a" ] || die "region $r put $put B of region a's $put_a B: the recipes were uploaded, not copied"
  [ $((copied * 2)) -gt "$put_a" ] || die "region $r copied only $copied B of region a's $put_a B"
done
ratio=$(json "$T/s2.json" 'd["sent_ratio"]')
echo "    sent_ratio $ratio"
json "$T/s2.json" 'd["sent_ratio"] <= 1.05 or sys.exit(1)' > /dev/null ||
  die "sent_ratio $ratio: the delta's objects left the instance more than once"
recipes "${BUCKET[a]}" > "$T/ra.txt"
[ -s "$T/ra.txt" ] || die "region a holds no recipe object"
echo "    $(wc -l < "$T/ra.txt") recipe objects in region a"
for r in b c; do
  recipes "${BUCKET[$r]}" | cmp -s - "$T/ra.txt" || die "region $r does not list the recipes region a does"
done

step "region c alone restores the delta bit for bit"
cp "$CONF" "$T/c.conf"
sed -i "s|^state = .*|state = $T/state-c|" "$T/c.conf"
python3 - "$T/c.conf" <<'PY'
import sys
p = sys.argv[1]
out, sec = [], None
for line in open(p).read().splitlines():
    if line.startswith("["):
        sec = line.strip("[]")
    if sec in ("region.a", "region.b") and line.startswith("bucket ="):
        line = "bucket = no-such-bucket"
    out.append(line)
open(p, "w").write("\n".join(out) + "\n")
PY
"$CKPTSYNC" --config "$T/c.conf" restore --run r --snapshot "$id2" --to "$T/rs" -q 2> "$T/rs.err" ||
  { cat "$T/rs.err"; die "restore from region c alone"; }
cmp "$SRC/step-2/ckpt.pt" "$T/rs/step-2/ckpt.pt" || die "step 2 restored from region c differs"

step "the daemon: step 3, a delta, committed; b and c copy its recipes from a"
put_bytes() { # REGION: bytes the daemon put there (its metrics)
  curl -sf "http://127.0.0.1:$MP/metrics" > "$T/m.txt" || die "GET /metrics"
  awk -v k="ckptsync_region_bytes_total{region=\"$1\",operation=\"put\",result=\"ok\"}" \
    '$1 == k { v = $2 } END { print v + 0 }' "$T/m.txt"
}
map_built() { grep -q "server-side copies:" "$T/daemon.log" 2> /dev/null; }
start_daemon
wait_for 60 map_built || { grep -i cop "$T/daemon.log"; die "the copy map was not built within 60 s"; }
mkdir -p "$T/watch/r"
cp -r "$SRC/step-3" "$T/watch/r/"
cks commit "$T/watch/r/step-3" --wait replicated --timeout 90 --json > "$T/c3.json" ||
  { tail -30 "$T/daemon.log"; die "commit of step 3"; }
grep -q "keyframe: snapshot" "$T/daemon.log" || die "the daemon did not store step 3 as a delta"
for r in a b c; do echo "    region $r: put $(put_bytes $r) B"; done
put_a=$(put_bytes a)
[ "$put_a" -gt 0 ] || die "the daemon put nothing in region a"
for r in b c; do
  [ $(($(put_bytes $r) * 10)) -lt "$put_a" ] || die "region $r: the daemon uploaded the recipes to it, not copied"
done
recipes "${BUCKET[a]}" > "$T/ra.txt"
for r in b c; do
  recipes "${BUCKET[$r]}" | cmp -s - "$T/ra.txt" || die "region $r does not list the recipes region a does"
done
stop_daemon
id3=$(json "$T/c3.json" 'd["id"]')
rm -rf "$T/rs"
"$CKPTSYNC" --config "$T/c.conf" restore --run r --snapshot "$id3" --to "$T/rs" -q 2> "$T/rs.err" ||
  { cat "$T/rs.err"; die "restore of step 3 from region c alone"; }
cmp "$SRC/step-3/ckpt.pt" "$T/rs/step-3/ckpt.pt" || die "step 3 restored from region c differs"
