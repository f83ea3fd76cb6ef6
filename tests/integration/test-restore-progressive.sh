#!/usr/bin/env bash
# regions: dir s3
# encrypted: yes
# restore --progressive (#24 items 1, 2, 5): a torch-style checkpoint
# (metadata, model.safetensors, fp32 master weights, a large optimizer.pt)
# is restored with each file appearing at its final path only when whole
# and verified, group by group: metadata, weights, master, optimizer.
#   1. a watcher reads every file the moment it appears and compares its
#      SHA-256 with the source; the restore is held (test hook, SIGSTOP)
#      once the weights are placed: they are there and right, the master
#      weights and the optimizer state are not (though optimizer.pt, found
#      in --seed, was complete first); it then finishes
#   2. killed (-9) at that point: only whole verified files are left, and
#      the next restore into DIR removes them and restores the whole tree
#   3. a chunk of optimizer.pt damaged in every region: the restore places
#      every other file, then fails naming optimizer.pt; the weights stay
#      right, the optimizer file never appears (not in the -enc variant: the chunk
#      objects' names are keyed there)
#   4. bad input: an existing target without --force; --force replaces it
#   5. the Python module: ckptsync.restore(progressive=True), wait(), wait_all()
#   6. --exclude-optimizer, --exclude PATTERN; a pattern matching nothing
#      is an error
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"

src="$T/src/checkpoint-10"
mkdir -p "$src/sub"
printf '{"global_step": 10}\n' > "$src/trainer_state.json"
printf 'checkpoint-10\n' > "$src/latest"
head -c 14000 /dev/urandom > "$src/rng_state.pth"
head -c 1000 /dev/urandom > "$src/scheduler.pt"
printf '{"hidden": 64}\n' > "$src/sub/config.json"
head -c $((6 << 20)) /dev/urandom > "$src/model.safetensors"
head -c $((4 << 20)) /dev/urandom > "$src/fp32_master.pt"
head -c $((24 << 20)) /dev/urandom > "$src/optimizer.pt"
ln -s model.safetensors "$src/weights"
tree_sums "$src" > "$T/src.sums"

step "snapshot"
cks snapshot "$src" --run run1 --step 10 --json > "$T/s.json"
id=$(json "$T/s.json" 'd["id"]')

# sha_ok DIR REL: DIR/REL is the source's file, bit for bit.
sha_ok() { [ "$(sha256sum < "$1/$2" | cut -c1-64)" = "$(sha256sum < "$src/$2" | cut -c1-64)" ]; }
# stopped PID: waits (10 s at most) until PID is stopped (the hold).
stopped() {
  local i
  for i in $(seq 1 1000); do
    [ "$(awk '{print $3}' "/proc/$1/stat" 2> /dev/null)" = T ] && return 0
    kill -0 "$1" 2> /dev/null || return 1
    sleep 0.01
  done
  return 1
}
# fresh: a new instance's state (no index: nothing found locally).
fresh() { rm -rf "$STATE"; }
# json_last FILE EXPR: EXPR of the last JSON line of FILE (the result).
json_last() { tail -1 "$1" > "$1.last" && json "$1.last" "$2"; }

step "progressive: a watcher reads each file as it appears; held after the weights"
fresh
python3 - "$T/out1/checkpoint-10" "$T/src.sums" "$T/watch.json" <<'PY' &
import hashlib, json, os, sys, time
root, sums, out = sys.argv[1:4]
want = {}
for line in open(sums):
    h, p = line.split(None, 1)
    want[os.path.normpath(p.strip())] = h
seen, order, bad = {}, [], []
end = time.time() + 120
while len(seen) < len(want) and time.time() < end:
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if rel in seen or os.path.islink(p):
                continue
            with open(p, "rb") as f:
                h = hashlib.sha256(f.read()).hexdigest()
            seen[rel] = h
            order.append(rel)
            if want.get(rel) != h:
                bad.append(rel)
    time.sleep(0.002)
json.dump({"order": order, "bad": bad, "complete": len(seen) == len(want)}, open(out, "w"))
PY
wpid=$!
# optimizer.pt is in the seed: it is complete before any chunk is
# downloaded, and still waits for the weights and master weights
mkdir -p "$T/seed"
cp "$src/optimizer.pt" "$T/seed/"
CKPTSYNC_TEST_RESTORE_HOLD_AFTER=weights "$CKPTSYNC" --config "$CONF" restore --run run1 --latest --to "$T/out1" \
  --progressive --json --seed "$T/seed" > "$T/p1.out" 2> "$T/p1.err" &
rpid=$!
stopped "$rpid" || { cat "$T/p1.err"; die "the restore did not reach the hold after the weights"; }
for f in trainer_state.json latest rng_state.pth scheduler.pt sub/config.json model.safetensors; do
  sha_ok "$T/out1/checkpoint-10" "$f" || die "held after the weights: $f missing or wrong"
done
for f in fp32_master.pt optimizer.pt weights; do
  [ ! -e "$T/out1/checkpoint-10/$f" ] || die "held after the weights: $f is already there"
done
[ "$(grep -c '"placed"' "$T/p1.out")" = 6 ] || { cat "$T/p1.out"; die "not one line per placed file"; }
kill -CONT "$rpid"
wait "$rpid" || { cat "$T/p1.err"; die "the progressive restore failed"; }
wait "$wpid" || die "the watcher failed"
[ "$(json "$T/watch.json" 'd["complete"]')" = True ] || { cat "$T/watch.json"; die "the watcher did not see every file"; }
[ "$(json "$T/watch.json" 'len(d["bad"])')" = 0 ] || { cat "$T/watch.json"; die "a file appeared before it was whole"; }
same_tree "$src" "$T/out1/checkpoint-10"
[ "$(readlink "$T/out1/checkpoint-10/weights")" = model.safetensors ] || die "the symlink is missing"
python3 - "$T/p1.out" <<'PY' || die "files were not placed group by group"
import json, sys
rank = {"metadata": 0, "weights": 1, "master": 2, "optimizer": 3}
lines = [json.loads(l) for l in open(sys.argv[1]) if '"placed"' in l]
groups = [rank[l["group"]] for l in lines]
names = [l["placed"] for l in lines]
assert groups == sorted(groups), names
assert names.index("checkpoint-10/model.safetensors") < names.index("checkpoint-10/optimizer.pt"), names
assert {l["group"] for l in lines} == set(rank), lines
PY
[ "$(json_last "$T/p1.out" 'd["local_chunks"]')" -gt 0 ] || die "the seed was not used"
ls -a "$T/out1" | grep ckptsync-restore > /dev/null && die "the staging directory was left behind"

step "kill -9 after the weights, then the next restore into DIR finishes"
fresh
CKPTSYNC_TEST_RESTORE_HOLD_AFTER=weights "$CKPTSYNC" --config "$CONF" restore --run run1 --latest --to "$T/out2" \
  --progressive > /dev/null 2> "$T/p2.err" &
rpid=$!
stopped "$rpid" || { cat "$T/p2.err"; die "the restore did not reach the hold"; }
kill -9 "$rpid"
wait "$rpid" 2> /dev/null || true
n=0
while IFS= read -r -d '' f; do
  sha_ok "$T/out2/checkpoint-10" "${f#./}" || die "killed: ${f#./} is there but not whole"
  n=$((n + 1))
done < <(cd "$T/out2/checkpoint-10" && find . -type f -print0)
[ "$n" = 6 ] || die "killed after the weights: $n files placed, expected 6"
ls -a "$T/out2" | grep '^.ckptsync-restore\.' > /dev/null || die "killed: no staging directory left"
fresh
cks restore --run run1 --latest --to "$T/out2" --progressive > /dev/null 2> "$T/p2b.err" ||
  { cat "$T/p2b.err"; die "the restore after a killed one failed"; }
same_tree "$src" "$T/out2/checkpoint-10"
grep -q "did not finish" "$T/p2b.err" || { cat "$T/p2b.err"; die "the cleanup was not reported"; }
ls -a "$T/out2" | grep ckptsync-restore > /dev/null && die "the staging directories were left behind"

if [ "${CKS_TEST_ENCRYPT:-0}" != 1 ]; then
  step "a chunk of optimizer.pt damaged in every region: fails naming it, weights stay"
  rg_get a "snapshots/run1/$id" "$T/man"
  key=$(awk '$1 == "f" { path = $NF } $1 == "c" && path ~ /optimizer\.pt$/ {
    print "chunks/" substr($2, 1, 2) "/" $2 }' "$T/man" | tail -1)
  [ -n "$key" ] || die "no chunk of optimizer.pt in the manifest"
  for r in a b c; do
    rg_get "$r" "$key" "$T/obj.$r"
    cp "$T/obj.$r" "$T/good.$r"
    flip_byte "$T/obj.$r"
    rg_put "$r" "$T/obj.$r" "$key"
  done
  fresh
  expect_fail 1 cks restore --run run1 --latest --to "$T/out3" --progressive --json
  grep -q 'optimizer\.pt' "$T/err" || { cat "$T/err"; die "the failure does not name optimizer.pt"; }
  grep -q 'not available intact' "$T/err" || { cat "$T/err"; die "the failure does not say why"; }
  cat "$T/err"
  # a lost chunk does not stop the others: every file it does not touch
  # is placed, then the restore fails
  for f in trainer_state.json model.safetensors fp32_master.pt; do
    sha_ok "$T/out3/checkpoint-10" "$f" || die "after the failure: placed $f missing or wrong"
  done
  for f in $(cd "$T/out3/checkpoint-10" && find . -type f); do
    sha_ok "$T/out3/checkpoint-10" "${f#./}" || die "after the failure: ${f#./} is not whole"
  done
  [ ! -e "$T/out3/checkpoint-10/optimizer.pt" ] || die "optimizer.pt appeared though damaged"
  grep -q '"placed":"checkpoint-10/optimizer.pt"' "$T/out" && die "optimizer.pt reported placed"
  step "repaired: the next restore into DIR removes the partial tree and finishes"
  for r in a b c; do rg_put "$r" "$T/good.$r" "$key"; done
  fresh
  cks restore --run run1 --latest --to "$T/out3" --progressive > /dev/null 2> "$T/p3.err" ||
    { cat "$T/p3.err"; die "the restore after a failed one failed"; }
  same_tree "$src" "$T/out3/checkpoint-10"
fi

step "bad input: an existing target needs --force; --all is not progressive"
fresh
expect_fail 1 cks restore --run run1 --latest --to "$T/out1" --progressive
grep -q "already exists" "$T/err" || { cat "$T/err"; die "an existing target: no clear error"; }
same_tree "$src" "$T/out1/checkpoint-10"
echo stale > "$T/out1/checkpoint-10/extra"
cks restore --run run1 --latest --to "$T/out1" --progressive --force > /dev/null 2> "$T/p4.err" ||
  { cat "$T/p4.err"; die "--progressive --force failed"; }
same_tree "$src" "$T/out1/checkpoint-10"
[ ! -e "$T/out1/checkpoint-10/extra" ] || die "--force kept a file of the old tree"
expect_fail 2 cks restore --run run1 --all --to "$T/out4" --progressive

step "Python: ckptsync.restore(progressive=True), wait() for the weights, then wait_all()"
fresh
PYTHONPATH="$CKS_SOURCE_DIR/client/python" python3 - "$CKPTSYNC" "$CONF" "$T/out8" "$src" <<'PY' ||
import hashlib, os, sys
import ckptsync
binary, conf, to, src = sys.argv[1:5]
def sha(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest()
h = ckptsync.restore("run1", to, progressive=True, config=conf, binary=binary)
w = h.wait("model.safetensors", timeout=120)
assert sha(w) == sha(os.path.join(src, "model.safetensors")), "weights differ"
o = h.wait("checkpoint-10/optimizer.pt", timeout=120)
assert sha(o) == sha(os.path.join(src, "optimizer.pt")), "optimizer differs"
res = h.wait_all(timeout=120)
assert res["files"] == 8, res
try:
    h.wait("no-such-file", timeout=5)
    raise AssertionError("a file not in the snapshot was waited for")
except ckptsync.Error as e:
    assert e.code == "notfound", e
# a failing restore raises from wait_all
bad = ckptsync.restore("no-such-run", to + "-bad", config=conf, binary=binary)
try:
    bad.wait_all(timeout=60)
    raise AssertionError("a failed restore did not raise")
except ckptsync.Error as e:
    assert e.code == "restore" and "no-such-run" in e.message, e
PY
  die "the Python progressive restore failed"
same_tree "$src" "$T/out8/checkpoint-10"

step "--exclude-optimizer, --exclude PATTERN; a pattern that matches nothing fails"
fresh
cks restore --run run1 --latest --to "$T/out5" --progressive --exclude-optimizer --json > "$T/p5.out"
[ ! -e "$T/out5/checkpoint-10/optimizer.pt" ] || die "--exclude-optimizer restored optimizer.pt"
for f in trainer_state.json model.safetensors fp32_master.pt sub/config.json; do
  sha_ok "$T/out5/checkpoint-10" "$f" || die "--exclude-optimizer: $f missing or wrong"
done
[ "$(json_last "$T/p5.out" 'd["excluded"]')" = 1 ] || { cat "$T/p5.out"; die "excluded is not 1"; }
fresh
cks restore --run run1 --latest --to "$T/out6" --exclude 'fp32*' --exclude 'sub/*.json' > /dev/null
[ ! -e "$T/out6/checkpoint-10/fp32_master.pt" ] || die "--exclude 'fp32*' restored fp32_master.pt"
[ ! -e "$T/out6/checkpoint-10/sub/config.json" ] || die "--exclude 'sub/*.json' restored it"
sha_ok "$T/out6/checkpoint-10" optimizer.pt || die "--exclude: optimizer.pt missing or wrong"
fresh
expect_fail 1 cks restore --run run1 --latest --to "$T/out7" --exclude 'nothing-*' --exclude 'fp32*'
grep -q "exclude 'nothing-\*' matches no file" "$T/err" || { cat "$T/err"; die "no clear error for a pattern matching nothing"; }
[ ! -e "$T/out7/checkpoint-10" ] || die "a failed --exclude left a tree"
echo "ok"
