#!/usr/bin/env bash
# A job on four nodes whose parts are all in, but whose layout names a
# file that is not: the step is not committed (docs/multinode.md "When a
# step commits").  Four daemons ([daemon] nodes = 4, node_rank = K), one
# run "job"; layouts written as the frameworks write them, DCP `.metadata`
# pickled by Python from stand-in classes with DCP's module and class names
# (tests/integration/dcpmeta.py), by each Python 3 found (/usr/bin/python3
# and the first on PATH), at the default protocol and at protocol 2.
#   1. DCP: .metadata (node 0) names __3_0.distcp; node 3's part lacks it:
#      every part is in, nothing committed, logged naming the step, the
#      file and the .metadata;
#   2. node 3 commits the step again with the file: the step commits (once
#      per region) and restores whole;
#   3. .metadata naming a byte range past a file's end: not committed;
#   4. a truncated .metadata, and a hostile one (a relative_path leaving
#      the directory; a pickle calling os.system): an error naming the
#      node, the step and the file; nothing committed, nothing executed;
#   5. a Hugging Face index naming a shard no node has: not committed; a
#      truncated one: an error naming the node, the step and the file;
#   6. Megatron mp_rank_00, 01, 03 (02 missing): not committed;
#   7. a covered DCP step commits and is the resume point.
# regions: dir
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"

PYS=()
for p in /usr/bin/python3 "$(command -v python3 || true)"; do
  [ -n "$p" ] && [ -x "$p" ] || continue
  for q in "${PYS[@]}"; do [ "$(readlink -f "$q")" = "$(readlink -f "$p")" ] && continue 2; done
  PYS+=("$p")
done
[ "${#PYS[@]}" -gt 0 ] || skip "no python3 to pickle a DCP .metadata"
echo "pickling with: ${PYS[*]}"
# dcpmeta PYINDEX OUT [--protocol N] FILE:OFF:LEN ...
dcpmeta() {
  local py=${PYS[$(( $1 % ${#PYS[@]} ))]}; shift
  "$py" "$CKS_SOURCE_DIR/tests/integration/dcpmeta.py" "$@" || die "$py dcpmeta.py $*"
}

N=4
for k in 0 1 2 3; do inst "n$k" nodes=$N node_rank=$k settle=3600; done
inst x
for k in 0 1 2 3; do idaemon "n$k"; done

W() { echo "$T/i-n$1/watch/job/$2"; }   # node K's directory of unit D
small() { mkdir -p "$(dirname "$1")"; head -c "$2" /dev/urandom > "$1"; }
size() { stat -c %s "$1"; }
commit() {
  icks "n$1" commit "$(W "$1" "$2")" --step "$3" --wait replicated --timeout 120 --json \
    > "$T/commit-$1.json" || die "node $1: commit job/$2 --wait replicated failed"
}
commit_all() { local k; for k in 0 1 2 3; do commit "$k" "$1" "$2"; done; }
commits() {
  local r out=""
  for r in a b c; do out="$out $(rg_keys "$r" commits/ | grep -c "\.s$1\." || true)"; done
  echo "${out# }"
}
logs() { cat "$T"/i-n*/daemon.log; }
# logged TEXT STEP: some node logged TEXT (as is, or with its quotes
# escaped: an event's msg="..." field).
logged() {
  local esc=${1//\"/\\\"}
  logs | grep -F -e "$1" -e "$esc" > /dev/null || { logs | grep "step $2" >&2; die "no node logged: $1"; }
}
remote_ls() {
  rm -rf "$T/i-x/state"
  icks x ls --remote --run job --json > "$T/ls.json" || die "ls --remote --run job"
}
resume_step() { json "$T/ls.json" "[x['step'] for x in d if x.get('resume')]"; }
incomplete() { json "$T/ls.json" "[(x['step'], x['missing']) for x in d if x.get('incomplete')]"; }

# ============================================================================
step "1. DCP: every part in, but .metadata names __3_0.distcp that no node has"
D=checkpoint-1000
for k in 0 1 2 3; do small "$(W $k $D)/__${k}_0.distcp" $(( 40000 + 1000 * k )); done
mv "$(W 3 $D)/__3_0.distcp" "$T/later.distcp"
small "$(W 3 $D)/rng_state_3.pth" 100   # node 3's part exists, without its shard
specs=()
for k in 0 1 2; do specs+=("__${k}_0.distcp:0:$(size "$(W $k $D)/__${k}_0.distcp")"); done
specs+=("__3_0.distcp:0:$(size "$T/later.distcp")")
dcpmeta 0 "$(W 0 $D)/.metadata" "${specs[@]}"
commit_all $D 1000
[ "$(commits 1000)" = "0 0 0" ] || die "step 1000 committed without __3_0.distcp: $(commits 1000)"
logged "event=step_uncovered run=job step=1000" 1000
logged "run 'job' step 1000: every node's part is in region 'a', but its layout names files the step lacks: \"$D/__3_0.distcp\" (named by the DCP metadata \"$D/.metadata\")" 1000
remote_ls
[ "$(incomplete)" = "[(1000, [])]" ] || die "ls --remote: incomplete $(incomplete), expected [(1000, [])]"
[ "$(resume_step)" = "[]" ] || die "resume point with step 1000 uncovered: $(resume_step)"

step "2. node 3 commits the step again with __3_0.distcp: it commits, once per region"
mv "$T/later.distcp" "$(W 3 $D)/__3_0.distcp"
commit 3 $D 1000
[ "$(commits 1000)" = "1 1 1" ] || die "step 1000 not committed once per region after the file came: $(commits 1000)"
for r in a b c; do
  n=$(rg_keys "$r" snapshots/ | wc -l)
  [ "$n" = 1 ] || die "region $r: $n snapshots of run job, expected the merged one"
done
mkdir -p "$T/want"
for k in 0 1 2 3; do cp -a "$(W $k $D)/." "$T/want/"; done
rm -rf "$T/i-x/state" "$T/got"
icks x restore --run job --latest --to "$T/got" -q || die "restore --latest"
diff <(tree_sums "$T/want") <(tree_sums "$T/got/$D") > "$T/diff" ||
  { cat "$T/diff" >&2; die "restored step 1000 differs from the four nodes' files"; }

# ============================================================================
step "3. .metadata names a byte range past the end of __1_0.distcp: not committed"
D=checkpoint-2000
for k in 0 1 2 3; do small "$(W $k $D)/__${k}_0.distcp" 30000; done
dcpmeta 1 "$(W 0 $D)/.metadata" --protocol 2 __0_0.distcp:0:30000 __1_0.distcp:0:20000 \
  __1_0.distcp:20000:10001 __2_0.distcp:0:30000 __3_0.distcp:0:30000
commit_all $D 2000
[ "$(commits 2000)" = "0 0 0" ] || die "step 2000 committed with __1_0.distcp short: $(commits 2000)"
logged "\"$D/__1_0.distcp\" is 30000 bytes, but the layout names bytes up to 30001 (named by the DCP metadata \"$D/.metadata\")" 2000

# ============================================================================
step "4. a truncated .metadata, a hostile one: an error naming node, step and file"
D=checkpoint-3000
for k in 0 1 2 3; do small "$(W $k $D)/__${k}_0.distcp" 1000; done
dcpmeta 0 "$T/full.metadata" __0_0.distcp:0:1000 __1_0.distcp:0:1000 __2_0.distcp:0:1000 __3_0.distcp:0:1000
head -c $(( $(size "$T/full.metadata") - 7 )) "$T/full.metadata" > "$(W 1 $D)/.metadata"   # on node 1
commit_all $D 3000
[ "$(commits 3000)" = "0 0 0" ] || die "step 3000 committed with a truncated .metadata: $(commits 3000)"
logged "run 'job' step 3000: node 1's DCP metadata \"$D/.metadata\": not a readable pickle: offset" 3000
logged "; the step is not committed in region 'a'" 3000

D=checkpoint-3500
for k in 0 1 2 3; do small "$(W $k $D)/__${k}_0.distcp" 1000; done
dcpmeta 1 "$(W 2 $D)/.metadata" __0_0.distcp:0:1000 ../../../i-n0/watch/job/checkpoint-1000/__0_0.distcp:0:10
commit_all $D 3500
[ "$(commits 3500)" = "0 0 0" ] || die "step 3500 committed with a hostile .metadata: $(commits 3500)"
logged "run 'job' step 3500: node 2's DCP metadata \"$D/.metadata\": storage_data[\"layers.1.weight\"]: relative_path \"../../../i-n0/watch/job/checkpoint-1000/__0_0.distcp\" leaves the directory" 3500

D=checkpoint-3600
for k in 0 1 2 3; do small "$(W $k $D)/__${k}_0.distcp" 1000; done
"${PYS[0]}" - "$(W 0 $D)/.metadata" "$T/pwned" <<'PY'
import struct, sys
cmd = ("touch " + sys.argv[2]).encode()
open(sys.argv[1], "wb").write(b"\x80\x02cos\nsystem\nX" + struct.pack("<I", len(cmd)) + cmd + b"\x85R.")
PY
commit_all $D 3600
[ "$(commits 3600)" = "0 0 0" ] || die "step 3600 committed with an os.system pickle: $(commits 3600)"
[ ! -e "$T/pwned" ] || die "reading the .metadata executed it"
logged "run 'job' step 3600: node 0's DCP metadata \"$D/.metadata\": not a DCP Metadata: the pickle's value is an object of class os.system" 3600

# ============================================================================
step "5. a Hugging Face index names a shard no node has, or is truncated: not committed"
D=checkpoint-4000
for k in 0 1 3; do small "$(W $k $D)/model-0000$(( k + 1 ))-of-00004.safetensors" 5000; done
small "$(W 2 $D)/trainer_state_2.json" 10
cat > "$(W 0 $D)/model.safetensors.index.json" <<'JSON'
{"metadata": {"total_size": 16000},
 "weight_map": {"embed.weight": "model-00001-of-00004.safetensors",
                "layers.0.weight": "model-00002-of-00004.safetensors",
                "layers.1.weight": "model-00003-of-00004.safetensors",
                "lm_head.weight": "model-00004-of-00004.safetensors"}}
JSON
commit_all $D 4000
[ "$(commits 4000)" = "0 0 0" ] || die "step 4000 committed without shard 3: $(commits 4000)"
logged "\"$D/model-00003-of-00004.safetensors\" (named by the Hugging Face index \"$D/model.safetensors.index.json\")" 4000

D=checkpoint-4500
for k in 0 1 2 3; do small "$(W $k $D)/model-0000$(( k + 1 ))-of-00004.safetensors" 500; done
printf '{"weight_map": {"embed.weight": "model-00001-of-00004.safetensors", ' > "$(W 3 $D)/model.safetensors.index.json"
commit_all $D 4500
[ "$(commits 4500)" = "0 0 0" ] || die "step 4500 committed with a truncated index: $(commits 4500)"
logged "run 'job' step 4500: node 3's Hugging Face index \"$D/model.safetensors.index.json\": not JSON: offset" 4500

# ============================================================================
step "6. Megatron: mp_rank_00, 01 and 03 in, 02 missing: not committed"
D=iter_0005000
for k in 0 1 3; do small "$(W $k $D)/mp_rank_0$k/model_optim_rng.pt" 3000; done
small "$(W 2 $D)/common.pt" 10
commit_all $D 5000
[ "$(commits 5000)" = "0 0 0" ] || die "step 5000 committed without mp_rank_02: $(commits 5000)"
logged "\"$D/mp_rank_02\" (named by the rank sequence of the names in \"$D\")" 5000

# ============================================================================
step "7. a covered DCP step commits and is the resume point"
D=checkpoint-6000
specs=()
for k in 0 1 2 3; do
  small "$(W $k $D)/__${k}_0.distcp" 20000
  specs+=("__${k}_0.distcp:0:12000" "__${k}_0.distcp:12000:8000")
done
dcpmeta 1 "$(W 0 $D)/.metadata" "${specs[@]}"
commit_all $D 6000
[ "$(commits 6000)" = "1 1 1" ] || die "covered step 6000 not committed once per region: $(commits 6000)"
remote_ls
[ "$(resume_step)" = "[6000]" ] || die "resume point: step $(resume_step), expected 6000"
[ "$(incomplete)" = "[(2000, []), (3000, []), (3500, []), (3600, []), (4000, []), (4500, []), (5000, [])]" ] ||
  die "ls --remote: incomplete $(incomplete)"

for k in 0 1 2 3; do istop "n$k"; done
if grep -E 'AddressSanitizer|LeakSanitizer|runtime error' "$T"/i-n*/daemon.log > "$T/san.txt"; then
  cat "$T/san.txt" >&2; die "a daemon reported a sanitizer error"
fi
cks verify -q > "$T/verify.out" 2>&1 || { cat "$T/verify.out" >&2; die "verify"; }
echo "ok"
