#!/usr/bin/env bash
# regions: dir (s3: tests/soak/s3-variants.sh)
# encrypted: yes
# The writer of derived-bf16 recipes (issue 27, docs/deltas.md): torch.save
# checkpoints written by Debian's torch holding bf16 weights that are
# master.to(torch.bfloat16) and the fp32 master, (a) in one file and (b) in
# two, and (c) a bf16 file that is the master TRUNCATED (not the
# rounding), and (d) a bf16 tensor that is the rounding only where the
# writer samples (matched, refused by the full check).  `ckptsync
# snapshot` stores (a) and (b)'s bf16 chunks as recipes over the master's
# chunks of the same snapshot (manifest version 6, recipes/ objects in
# every region), (c) and (d) plain; the bytes stored are
# much smaller than with [compress] derive_bf16 = off (two repositories,
# figures printed); restore is bit for bit and verify is clean; a snapshot
# killed -9 in phase B (after its third recipe upload) leaves nothing
# published, and the rerun publishes a good snapshot; a second snapshot of
# the same files names the recipes the index recorded (confirmed in every
# region, nothing read, encoded or stored again); stats count the
# recipes/ objects per region, fsck counts the r lines and the index's
# recipe records and names a record that disagrees with its r line or is
# damaged; a bad derive_bf16 value is refused.
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
/usr/bin/python3 -c 'import torch' 2> /dev/null || skip "Debian's python3-torch is not installed"
SRC="$T/src/ckpt"
FILES="one.pt master.pt weights.pt trunc.pt noisy.pt"

step "torch.save: (a) one.pt, (b) master.pt + weights.pt, (c) trunc.pt, (d) noisy.pt"
/usr/bin/python3 - "$SRC" <<'PY'
import os, sys, torch
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
def master(seed):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 512))
    return {k: v.detach().clone() for k, v in m.state_dict().items()}
a, b = master(1), master(2)
bf16 = lambda sd: {k: v.to(torch.bfloat16) for k, v in sd.items()}
torch.save({"model": bf16(a), "master": a}, os.path.join(d, "one.pt"))
torch.save(b, os.path.join(d, "master.pt"))
torch.save(bf16(b), os.path.join(d, "weights.pt"))
# the upper half of each fp32: truncation, not the rounding
trunc = lambda t: (t.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16)
t = {k: trunc(v) for k, v in b.items()}
assert any(not torch.equal(t[k], v.to(torch.bfloat16)) for k, v in b.items())
torch.save(t, os.path.join(d, "trunc.pt"))
# (d) a bf16 tensor that is the rounding only at the 32 places the writer
# samples (service/dwrite.c, dw_fingerprint), its other elements one ulp
# off: matched, then refused by the full check, so stored plain
w = torch.randn(512, 512)
n = w.numel()
r = w.to(torch.bfloat16).view(torch.int16).flatten().clone()
keep = torch.zeros(n, dtype=torch.bool)
keep[[(n - 1) * j // 31 for j in range(32)]] = True
r[~keep] ^= 1
torch.save({"w": r.view(torch.bfloat16).view(512, 512), "master": w}, os.path.join(d, "noisy.pt"))
PY

step "a bad derive_bf16 value is refused, naming the setting"
cp "$CONF" "$T/bad.conf"
printf '[compress]\nderive_bf16 = maybe\n' >> "$T/bad.conf"
if "$CKPTSYNC" --config "$T/bad.conf" snapshot "$SRC" --run r 2> "$T/bad.err"; then
  die "a snapshot ran with derive_bf16 = maybe"
fi
grep -q "derive_bf16.*'maybe' is not on or off" "$T/bad.err" || { cat "$T/bad.err"; die "no clear error"; }

recipes_in() { # REGION -> number of recipes/ objects
  if [ "${CKS_REGIONS:-dir}" = s3 ]; then
    { aws_s3 "$1" s3 ls "s3://$S3_BUCKET/$S3_PREFIX/recipes/" --recursive || true; } | grep -c . || true
  else
    find "$T/regions/$1/recipes" -type f 2> /dev/null | grep -c . || true
  fi
}
dw_line() { grep -o 'derived bf16: .*' "$1" || true; }

step "kill -9 in phase B (stopped after its third recipe upload): nothing published"
CKPTSYNC_TEST_DWRITE_STOP_AFTER=3 "$CKPTSYNC" --config "$CONF" snapshot "$SRC" --run r --step 1 \
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
for r in a b c; do
  n=$(recipes_in $r)
  echo "    region $r: $n recipe object(s) when killed"
  [ "$n" -eq 3 ] || die "region $r holds $n recipes, not the 3 uploaded before the stop"
done
cks ls --run r --remote --json > "$T/ls.json" || die "ls"
[ "$(json "$T/ls.json" 'len(d)')" = 0 ] || die "a snapshot was published by the killed run"

step "rerun: a version 6 snapshot, recipes in every region"
cks snapshot "$SRC" --run r --step 1 --json > "$T/s1.json" 2> "$T/s1.err" ||
  { cat "$T/s1.err"; die "snapshot"; }
id=$(json "$T/s1.json" 'd["id"]')
line=$(dw_line "$T/s1.err")
echo "    $line"
pairs=$(echo "$line" | sed -n 's/.*: \([0-9]*\) tensor pair.*/\1/p')
nrec=$(echo "$line" | sed -n 's/.*; \([0-9]*\) chunk(s) of.*/\1/p')
# (noisy.pt went up plain in the killed run, and is unchanged: not read
# again, so its bf16 is no candidate now)
[ "$pairs" = 4 ] || die "expected the 4 weight matrices of one.pt and weights.pt paired, got '$pairs'"
[ "${nrec:-0}" -ge 10 ] || die "only '${nrec:-0}' chunks stored as recipes"
for r in a b c; do
  n=$(recipes_in $r)
  [ "$n" -eq "$nrec" ] || die "region $r holds $n recipe objects, the snapshot made $nrec"
done
man_text() { # the manifest of snapshot $1, when it is plain text
  if [ "${CKS_REGIONS:-dir}" = s3 ]; then
    aws_s3 a s3 cp "s3://$S3_BUCKET/$S3_PREFIX/snapshots/r/$1" - 2> /dev/null
  else
    cat "$T"/regions/a/snapshots/*/"$1"
  fi
}
if [ "${CKS_TEST_ENCRYPT:-0}" != 1 ]; then # sealed otherwise
  man_text "$id" > "$T/man.txt"
  [ "$(sed -n 1p "$T/man.txt")" = 'ckptsync-manifest 6' ] || die "the manifest is not version 6"
  [ "$(grep -c '^r ' "$T/man.txt")" = "$nrec" ] || die "the manifest's r lines are not $nrec"
  grep -q '^k ' "$T/man.txt" && die "k lines: the bases should be file chunks of the snapshot"
  awk '/^f /{f=$NF} /^c .* r$/{n[f]++} END{for (k in n) print k, n[k]}' "$T/man.txt" |
    sort > "$T/marks.txt"
  sed 's/^/    recipes of /' "$T/marks.txt"
  grep -q '^ckpt/one.pt ' "$T/marks.txt" || die "(a) one.pt has no recipe"
  grep -q '^ckpt/weights.pt ' "$T/marks.txt" || die "(b) weights.pt has no recipe"
  grep -Eq '^ckpt/(master|trunc|noisy).pt ' "$T/marks.txt" &&
    die "a chunk of master.pt, trunc.pt or noisy.pt is a recipe"
fi

step "restore bit for bit; verify clean"
cks restore --run r --snapshot "$id" --to "$T/rs" -q 2> "$T/rs.err" || { cat "$T/rs.err"; die "restore"; }
for f in $FILES; do cmp "$SRC/$f" "$T/rs/ckpt/$f" || die "$f differs"; done
cks ls --run r --remote --json > "$T/ls.json" || die "ls"
[ "$(json "$T/ls.json" 'len(d)')" = 1 ] || die "not exactly one snapshot after the rerun"
cks verify --run r > "$T/v.txt" 2>&1 || { cat "$T/v.txt"; die "verify failed"; }

step "a second snapshot of the same files: every recipe known from the index, nothing stored"
cks snapshot "$SRC" --run r --step 2 --json > "$T/s2.json" 2> "$T/s2.err" || { cat "$T/s2.err"; die "snapshot 2"; }
line=$(dw_line "$T/s2.err")
echo "    $line"
echo "$line" | grep "($nrec known from the index)" > /dev/null || die "the recipes were not taken from the index"
[ "$(json "$T/s2.json" 'd["stored_bytes"]')" = 0 ] || die "the second snapshot stored bytes again"
# (restore must not have recorded the recipe chunks as chunks/ objects in
# the index: the snapshot would then find them "gone" and upload them)
[ "$(json "$T/s2.json" 'sum(r["objects_put"] for r in d["regions"]) + d["reuploaded_chunks"]')" = 0 ] ||
  { cat "$T/s2.err"; die "the second snapshot uploaded objects"; }
id2=$(json "$T/s2.json" 'd["id"]')
cks restore --run r --snapshot "$id2" --to "$T/rs2" -q 2> "$T/rs2.err" || { cat "$T/rs2.err"; die "restore 2"; }
for f in $FILES; do cmp "$SRC/$f" "$T/rs2/ckpt/$f" || die "$f differs (snapshot 2)"; done

step "stats count the recipes/ objects; fsck checks the index's recipe records"
cks stats --json > "$T/stats.json" || die "stats"
for r in a b c; do
  got=$(json "$T/stats.json" "[x for x in d['regions'] if x['name'] == '$r'][0]['recipes']")
  [ "$got" = "$(recipes_in $r)" ] || die "stats: region $r has '$got' recipes, it holds $(recipes_in $r)"
done
[ "$(json "$T/stats.json" 'sum(x["garbage_recipes"] for x in d["regions"])')" = 0 ] ||
  die "stats count recipes two retained snapshots name as garbage"
cks fsck > "$T/fsck.txt" 2>&1 || { cat "$T/fsck.txt"; die "fsck"; }
grep -q " $((2 * nrec)) recipe references, $nrec recipe records, 0 problems" "$T/fsck.txt" ||
  { cat "$T/fsck.txt"; die "fsck did not count the recipes"; }
# one record's chunk length changed, another's cut short (mdb_dump/mdb_load:
# lmdb-utils), the index put back afterwards
cp -a "$STATE/index" "$T/index.bak"
mdb_dump -s recipes "$STATE/index" > "$T/rec.dump" || die "mdb_dump"
python3 - "$T/rec.dump" > "$T/rec.keys" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
d = lines.index("HEADER=END") + 1
k1, v1, k2, v2 = lines[d:d + 4]
v1 = v1[:9] + ("0" if v1[9] != "0" else "1") + v1[10:]  # the chunk's raw length (byte 4)
v2 = v2[:-2]                                           # one byte short
lines[d:d + 4] = [k1, v1, k2, v2]
open(sys.argv[1], "w").write("\n".join(lines))
for k in (k1, k2):
    k = k.strip()
    print(f"recipes/{k[:2]}/{k[:64]}.{k[64:80]}")
PY
mdb_load -s recipes -f "$T/rec.dump" "$STATE/index" 2> "$T/mdb.err" || { cat "$T/mdb.err"; die "mdb_load"; }
expect_fail 1 cks fsck
{ cat "$T/out" "$T/err"; } > "$T/fsck.txt"
k1=$(sed -n 1p "$T/rec.keys") k2=$(sed -n 2p "$T/rec.keys")
grep -q "recipe \"$k1\": the index's record disagrees with snapshot .* about the chunk's length" \
  "$T/fsck.txt" || { cat "$T/fsck.txt"; die "fsck did not name the recipe whose record disagrees"; }
grep -q "recipe \"$k2\": the index's record is damaged" "$T/fsck.txt" ||
  { cat "$T/fsck.txt"; die "fsck did not name the damaged recipe record"; }
# (the first record's two snapshots each disagree with it)
grep -q " 3 problems" "$T/fsck.txt" || { cat "$T/fsck.txt"; die "fsck: not exactly 3 problems"; }
rm -rf "$STATE/index" && mv "$T/index.bak" "$STATE/index"
cks fsck > "$T/fsck.txt" 2>&1 || { cat "$T/fsck.txt"; die "fsck with the index put back"; }

step "stored bytes, derive_bf16 on and off (two fresh one-region dir repositories)"
stored() { # on|off -> stored_bytes of a fresh repository's snapshot
  mkdir -p "$T/cmp-$1/reg"
  { config_head 16K 64K 256K | sed "s|^state = .*|state = $T/cmp-$1/state|; s|^quorum = .*|quorum = 1|"
    printf '[compress]\nderive_bf16 = %s\n[region.x]\nkind = dir\npath = %s\n' "$1" "$T/cmp-$1/reg"
  } > "$T/cmp-$1.conf"
  "$CKPTSYNC" --config "$T/cmp-$1.conf" snapshot "$SRC" --run r --json > "$T/cmp-$1.json" \
    2> "$T/cmp-$1.err" || { cat "$T/cmp-$1.err" >&2; die "snapshot with derive_bf16 = $1"; }
  json "$T/cmp-$1.json" 'd["stored_bytes"]'
}
raw=$(cat "$SRC"/*.pt | wc -c)
on=$(stored on)
off=$(stored off)
python3 - "$raw" "$on" "$off" <<'PY'
import sys
raw, on, off = map(int, sys.argv[1:])
print(f"    raw {raw} bytes; stored: derive_bf16 on {on} ({on / raw:.3f}), off {off} ({off / raw:.3f})")
PY
[ $((on * 100)) -lt $((off * 85)) ] || die "derive_bf16 on stored $on bytes, not well under off's $off"
grep -q "derived bf16" "$T/cmp-off.err" && die "derive_bf16 = off derived"
# (the killed run above stored noisy.pt's chunks plain before its stop: a
# fresh repository shows the check refusing them)
line=$(dw_line "$T/cmp-on.err")
echo "    fresh repository: $line"
nplain=$(echo "$line" | sed -n 's/.*, \([0-9]*\) stored plain.*/\1/p')
pairs=$(echo "$line" | sed -n 's/.*: \([0-9]*\) tensor pair.*/\1/p')
[ "$pairs" = 5 ] || die "expected one.pt's, weights.pt's and noisy.pt's weights paired, got '$pairs'"
[ "${nplain:-0}" -ge 3 ] || die "noisy.pt's chunks were not stored plain after the check ('$nplain')"
echo "PASS"
