#!/usr/bin/env bash
# regions: dir s3
# encrypted: yes
# End to end: snapshot a checkpoint-like directory (~300 MB), change part of
# it, snapshot again (newly stored bytes ~ changed bytes), delete the data
# and the index, restore both snapshots and compare bit for bit.
. "$(dirname "$0")/lib.sh"
write_config 256K 1M 4M

ck="$T/watch/run1/checkpoint-100"
step "make a checkpoint directory"
make_file "$ck/model-00001-of-00002.safetensors" 160
make_file "$ck/model-00002-of-00002.safetensors" 96
make_file "$ck/optimizer.pt" 40
printf '{"global_step": 100}\n' > "$ck/trainer_state.json"
mkdir -p "$ck/tokenizer" "$ck/empty-dir"
printf 'vocab' > "$ck/tokenizer/vocab.txt"
: > "$ck/empty-file"
ln -s model-00001-of-00002.safetensors "$ck/model.safetensors"
chmod 0600 "$ck/optimizer.pt"; chmod 0750 "$ck/tokenizer"
cp -a "$ck" "$T/orig-100"

step "first snapshot: everything is new"
cks snapshot "$ck" --run run1 --step 100 --json > "$T/s1.json"
id1=$(json "$T/s1.json" 'd["id"]')
[ "$(json "$T/s1.json" 'd["committed"]')" = 3 ] || die "not committed in 3 regions"
[ "$(json "$T/s1.json" 'd["files"]')" = 6 ] || die "wrong file count"
total=$(json "$T/s1.json" 'd["bytes"]')
new1=$(json "$T/s1.json" 'd["new_bytes"]')
[ "$new1" -eq "$total" ] || die "first snapshot stored $new1 of $total bytes"

step "snapshot of unchanged data stores nothing and reads nothing"
cks snapshot "$ck" --run run1 --step 100 --json > "$T/s1b.json"
[ "$(json "$T/s1b.json" 'd["new_bytes"]')" = 0 ] || die "unchanged data stored again"
[ "$(json "$T/s1b.json" 'd["files_unchanged"]')" = 6 ] || die "unchanged files were read again"

step "change 16 MiB in the middle, append 8 MiB, add a 5 MiB file"
mv "$ck" "$T/watch/run1/checkpoint-200"; ck="$T/watch/run1/checkpoint-200"
head -c $((16 << 20)) /dev/urandom | dd of="$ck/model-00001-of-00002.safetensors" bs=1M seek=70 conv=notrunc status=none
head -c $((8 << 20)) /dev/urandom >> "$ck/optimizer.pt"
make_file "$ck/extra.bin" 5
printf '{"global_step": 200}\n' > "$ck/trainer_state.json"
changed=$(( (16 + 8 + 5) << 20 ))
cp -a "$ck" "$T/orig-200"

step "second snapshot stores about what changed"
cks snapshot "$ck" --run run1 --step 200 --json > "$T/s2.json"
id2=$(json "$T/s2.json" 'd["id"]')
new2=$(json "$T/s2.json" 'd["new_bytes"]')
echo "changed $changed bytes, newly stored $new2 bytes"
[ "$new2" -ge "$changed" ] || die "stored $new2 < changed $changed: a change was missed"
# Each edited region may also re-cut up to two neighbouring chunks (max 4 MiB each).
[ "$new2" -le $(( changed + 3 * 2 * (4 << 20) )) ] || die "stored $new2 for $changed changed bytes"

step "ls and show"
cks ls --run run1 --json > "$T/ls.json"
[ "$(json "$T/ls.json" 'len(d)')" = 3 ] || die "ls shows $(json "$T/ls.json" 'len(d)') snapshots"
cks show "$id2" --json > "$T/show.json"
[ "$(json "$T/show.json" 'd["step"]')" = 200 ] || die "show: wrong step"
cks ls --run run1 > /dev/null
cks show "$id1" > /dev/null

step "verify: every region complete"
cks verify --run run1 > "$T/verify.txt"
[ "$(grep -c ' complete:' "$T/verify.txt")" = 3 ] || { cat "$T/verify.txt"; die "verify"; }

step "release the instance: delete the data and the index"
rm -rf "$T/watch/run1" "$STATE"

step "ls --remote finds the snapshots with an empty index"
cks ls --remote --run run1 --json > "$T/lsr.json"
[ "$(json "$T/lsr.json" 'len(d)')" = 3 ] || die "ls --remote"
[ "$(json "$T/lsr.json" 'min(x["regions"] for x in d)')" = 3 ] || die "ls --remote regions"

step "restore both snapshots and compare bit for bit"
cks restore --run run1 --snapshot "$id1" --to "$T/r1" --json > "$T/r1.json"
same_tree "$T/orig-100" "$T/r1/checkpoint-100"
cks restore --run run1 --latest --to "$T/r2" --json > "$T/r2.json"
[ "$(json "$T/r2.json" 'd["id"]')" = "$id2" ] || die "--latest did not pick the newest snapshot"
same_tree "$T/orig-200" "$T/r2/checkpoint-200"
[ "$(json "$T/r2.json" 'min(d["regions"].values())')" -gt 0 ] || die "restore was not striped over all regions"
ls -A "$T/r2" | grep ckptsync-restore > /dev/null && die "staging directory left behind"

step "seeded restore: chunks of the older checkpoint are copied, only the change is downloaded"
cks restore --run run1 --snapshot "$id2" --to "$T/r2s" --seed "$T/r1/checkpoint-100" --json > "$T/r2s.json"
same_tree "$T/orig-200" "$T/r2s/checkpoint-200"
local_b=$(json "$T/r2s.json" 'd["local_bytes"]'); fetched=$(json "$T/r2s.json" 'd["fetched_bytes"]')
echo "copied from the seed: $local_b bytes; downloaded: $fetched bytes"
[ "$local_b" -gt $(( total - changed - 3 * 2 * (4 << 20) )) ] || die "seed used for only $local_b bytes"
[ "$fetched" -le $(( changed + 3 * 2 * (4 << 20) + 1048576 )) ] || die "downloaded $fetched bytes despite the seed"

step "without --seed, files already in the target that the index knows lend their chunks"
cks restore --run run1 --snapshot "$id1" --to "$T/r2s" --json > "$T/r1s.json"
same_tree "$T/orig-100" "$T/r2s/checkpoint-100"
[ "$(json "$T/r1s.json" 'd["local_bytes"]')" -gt $(( total - changed - 3 * 2 * (4 << 20) )) ] \
  || die "the restored checkpoint-200 next to it was not used as a seed"

step "restoring over an existing checkpoint needs --force"
expect_fail 1 cks restore --run run1 --latest --to "$T/r2"
grep -q 'already exists' "$T/err" || die "no 'already exists' message"
cks restore --run run1 --latest --to "$T/r2" --force -q
same_tree "$T/orig-200" "$T/r2/checkpoint-200"

step "restored files are in the index: a snapshot of them reads nothing"
cks snapshot "$T/r2/checkpoint-200" --run run1 --step 200 --json > "$T/s3.json"
[ "$(json "$T/s3.json" 'd["new_bytes"]')" = 0 ] || die "restored data uploaded again"
[ "$(json "$T/s3.json" 'd["files_unchanged"]')" = 7 ] || die "restored files were read again"

step "a single-file checkpoint; without --step the step comes from the name, as the daemon takes it"
make_file "$T/watch/run2/step_300.pt" 3
cks snapshot "$T/watch/run2/step_300.pt" --run run2 -q
mkdir -p "$T/watch/run3/checkpoint-1000" "$T/watch/run3/notes"
echo w > "$T/watch/run3/checkpoint-1000/w.bin"; echo n > "$T/watch/run3/notes/n.txt"
cks snapshot "$T/watch/run3/checkpoint-1000/" --run run3 -q   # trailing '/' as a shell completes it
cks snapshot "$T/watch/run3/checkpoint-1000" --run run3 --step 7 -q   # --step wins
cks snapshot "$T/watch/run3/notes" --run run3 -q
cks ls --json > "$T/ls3.json"
[ "$(json "$T/ls3.json" 'sorted((s["run"], s["step"]) for s in d if s["run"] != "run1")')" = \
  "[('run2', 300), ('run3', -1), ('run3', 7), ('run3', 1000)]" ] || { cat "$T/ls3.json"; die "steps from names"; }
cks restore --run run2 --latest --to "$T/r3" -q
cmp "$T/watch/run2/step_300.pt" "$T/r3/step_300.pt" || die "single file differs"
step "fsck: refcounts match the snapshots"
cks fsck
echo "e2e: ok"
