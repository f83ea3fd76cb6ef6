#!/usr/bin/env bash
# Retention and pruning, one writer at a time (the concurrent case is
# test-prune-concurrent.sh):
#  1. forget's rules: keep-last, keep-every, keep-best (a Hugging Face
#     trainer_state.json), keep-within, the resume point, a claim's base;
#     --dry-run changes nothing; the configuration's per-run policy;
#  2. a long run (100 checkpoints, 60 against S3; some share most chunks) under
#     keep_last = 3, keep_every = 50, forget + prune --grace 0 as it goes:
#     stored bytes stay bounded by the kept snapshots, no garbage is left,
#     every kept snapshot restores bit for bit;
#  3. a prune stopped between its phases (grace not over), a snapshot
#     that reuses candidate chunks in between, then resumed: those chunks
#     stay; prune killed -9 mid-sweep, then run again: it takes over the
#     lease of the dead process and finishes; verify passes throughout.
# regions: dir s3
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
cat >> "$CONF" <<'EOF'
[retention.long]
keep_last = 3
keep_every = 50
[retention.cfg]
keep_last = 1
[prune]
grace = 0
EOF
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"
T0=$SECONDS
# S3 servers here take longer per request: against them the long run is
# 60 checkpoints (still past one keep_every boundary) checked every 20
# instead of 100 checked every 10, and prune is killed in 2 rounds, not 4.
case ${CKS_REGIONS:-dir} in dir) EVERY=10; KILLS=4; LONG0=100 ;; *) EVERY=20; KILLS=2; LONG0=60 ;; esac
LONG=${CKS_RETENTION_LONG:-$LONG0}

head -c $((256 << 10)) /dev/urandom > "$T/frozen.bin"

# ckpt DIR STEP [SIMILAR_TO]: frozen (shared by all), a model file (new,
# or SIMILAR_TO's with 4 KiB changed: it shares most chunks).
ckpt() {
  local d=$1 s=$2 like=${3:-}
  mkdir -p "$d"
  cp "$T/frozen.bin" "$d/frozen.bin"
  if [ -n "$like" ]; then
    cp "$like/model.bin" "$d/model.bin"
    head -c 4096 /dev/urandom | dd of="$d/model.bin" bs=4096 seek=5 conv=notrunc status=none
  else
    head -c $((192 << 10)) /dev/urandom > "$d/model.bin"
  fi
  printf '{"step": %s}\n' "$s" > "$d/meta.json"
}

snap() { # RUN DIR STEP -> prints the id
  cks snapshot "$2" --run "$1" --step "$3" --json > "$T/snap.json" 2> "$T/snap.err" ||
    { cat "$T/snap.err" >&2; die "snapshot of $2 (run $1, step $3)"; }
  json "$T/snap.json" 'd["id"]'
}

listed() { # RUN -> ids listed by ls --remote, one per line, sorted
  cks ls --remote --run "$1" --json > "$T/ls.json"
  python3 -c 'import json,sys; [print(x["id"]) for x in sorted(json.load(open(sys.argv[1])), key=lambda x: x["id"])]' "$T/ls.json"
}

restore_same() { # RUN ID SRC
  rm -rf "$T/i-fresh/state" "$T/rs"
  icks fresh restore --run "$1" --snapshot "$2" --to "$T/rs" -q 2> "$T/rs.err" ||
    { cat "$T/rs.err" >&2; die "snapshot $2 of run $1 cannot be restored"; }
  same_tree "$3" "$T/rs/$(basename "$3")"
}

prune_ok() { # [ARGS]: prune --json must succeed; the result in $T/prune.json
  cks prune --json "$@" > "$T/prune.json" 2> "$T/prune.err" ||
    { cat "$T/prune.err" "$T/prune.json" >&2; die "prune $*"; }
}

inst fresh

# ---- 1. the rules ----------------------------------------------------------
step "forget's rules on run 'rules': keep-last, keep-every, keep-best, the resume point"
# eval_loss per step: the best two are steps 30 and 70; HF's
# best_model_checkpoint names checkpoint-30.
declare -A LOSS=([10]=0.9 [20]=0.8 [30]=0.1 [40]=0.7 [50]=0.6 [60]=0.65 [70]=0.2 [80]=0.5 [90]=0.55 [100]=0.45 [110]=0.4 [120]=0.35)
declare -A RID=()
hist=""
for s in 10 20 30 40 50 60 70 80 90 100 110 120; do
  d="$T/src/rules/checkpoint-$s"
  ckpt "$d" "$s"
  hist="$hist${hist:+, }{\"step\": $s, \"eval_loss\": ${LOSS[$s]}, \"epoch\": 1.0}, {\"step\": $s, \"loss\": 2.0}"
  printf '{"best_metric": 0.1, "best_model_checkpoint": "out/checkpoint-30", "global_step": %s, "log_history": [%s]}\n' \
    "$s" "$hist" > "$d/trainer_state.json"
  RID[$s]=$(snap rules "$d" "$s")
done
cks forget --run rules --keep-last 2 --keep-every 50 --keep-best 2 --dry-run --json > "$T/f.json"
python3 - "$T/f.json" <<'PY' || die "forget --dry-run decided wrongly"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["dry_run"] is True, d
run = d["runs"][0]
act = {x["step"]: (x["action"], x["why"]) for x in run["snapshots"]}
keep = sorted(s for s, (a, _) in act.items() if a == "keep")
assert keep == [30, 50, 70, 100, 110, 120], act
assert "resume point" in act[120][1], act[120]
assert act[110][1].startswith("keep-last 2"), act[110]
assert act[50][1].startswith("keep-every 50") and act[100][1].startswith("keep-every 50"), act
assert "best_model_checkpoint" in act[30][1], act[30]
assert act[70][1].startswith("keep-best 2"), act[70]
assert run["forget"] == 6 and d["forgotten"] == 6, d
PY
[ "$(listed rules | wc -l)" = 12 ] || die "--dry-run removed something"
cks forget --run rules --keep-last 2 --keep-every 50 --keep-best 2 -q
[ "$(listed rules | wc -l)" = 6 ] || die "forget did not remove 6 snapshots: $(listed rules | wc -l) listed"
for s in 10 20 40 60 80 90; do
  listed rules | grep -x "${RID[$s]}" > /dev/null && die "step $s is still listed"
  [ -n "$(rg_keys a forget/rules/ | grep "${RID[$s]}")" ] || die "no forget record for step $s in region a"
done
rm -rf "$T/i-fresh/state" "$T/lt"
icks fresh restore --run rules --latest --to "$T/lt" -q
[ -d "$T/lt/checkpoint-120" ] || die "restore --latest after forget: $(ls "$T/lt")"

step "keep-within keeps what is recent; a claim's base is kept after a migration"
cks forget --run rules --keep-last 1 --keep-within 1d --json > "$T/f.json"
[ "$(json "$T/f.json" 'd["forgotten"]')" = 0 ] || die "keep-within 1d forgot something"
icks fresh migrate-in --run rules --to "$T/mig" -q > /dev/null 2>&1 || die "migrate-in"
ckpt "$T/src/rules/checkpoint-130" 130
RID[130]=$(icks fresh snapshot "$T/src/rules/checkpoint-130" --run rules --step 130 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
cks forget --run rules --keep-last 1 --json > "$T/f.json"
python3 - "$T/f.json" "${RID[120]}" "${RID[130]}" <<'PY' || die "forget after a migration decided wrongly"
import json, sys
d = json.load(open(sys.argv[1])); base, new = sys.argv[2], sys.argv[3]
act = {x["id"]: (x["action"], x["why"]) for x in d["runs"][0]["snapshots"]}
assert act[new][0] == "keep" and "resume point" in act[new][1], act
assert act[base][0] == "keep" and "claim" in act[base][1], act
assert sorted(a for a, _ in act.values()).count("forget") == 5, act
PY

step "the configuration's policy: [retention.cfg] keep_last = 1; a run with none keeps everything"
for s in 1 2 3; do ckpt "$T/src/cfg/checkpoint-$s" "$s"; snap cfg "$T/src/cfg/checkpoint-$s" "$s" > /dev/null; done
for s in 1 2 3; do ckpt "$T/src/other/checkpoint-$s" "$s"; snap other "$T/src/other/checkpoint-$s" "$s" > /dev/null; done
cks forget --json > "$T/f.json"
python3 - "$T/f.json" <<'PY' || die "forget with the configured policies"
import json, sys
d = {r["run"]: r for r in json.load(open(sys.argv[1]))["runs"]}
assert d["cfg"]["forget"] == 2 and d["cfg"]["keep"] == 1, d["cfg"]
assert d["other"]["forget"] == 0 and sum("no retention policy" in x["why"] for x in d["other"]["snapshots"]) == 2, d["other"]
PY
expect_fail 2 cks forget --keep-within 3X
grep -q "not a duration" "$T/err" || die "bad --keep-within: $(cat "$T/err")"
expect_fail 2 cks prune --grace soon

step "prune --grace 0 deletes what only forgotten snapshots used; verify passes; kept ones restore"
prune_ok --grace 0
python3 - "$T/prune.json" <<'PY' || die "prune result"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] and d["forgotten_snapshots"] >= 12, d
for r in d["regions"]:
    assert r["state"] == "swept" and r["deleted"] > 0 and r["snapshots_deleted"] >= 12, r
PY
cks stats --json > "$T/stats.json"
[ "$(json "$T/stats.json" 'sum(r["garbage_bytes"] for r in d["regions"])')" = 0 ] || die "garbage left after prune"
cks verify -q || { cks verify >&2 || true; die "verify after prune"; }
for s in 120 130; do restore_same rules "${RID[$s]}" "$T/src/rules/checkpoint-$s"; done
echo "    $((SECONDS - T0)) s so far"

# ---- 2. the long run -----------------------------------------------------------
step "$LONG checkpoints of run 'long' under keep_last 3 + keep_every 50, pruned as they come"
max_snap=0
prev=
: > "$T/long.ids"
for s in $(seq 1 "$LONG"); do
  d="$T/src/long/checkpoint-$s"
  if [ $((s % 3)) = 0 ] && [ -n "$prev" ]; then ckpt "$d" "$s" "$prev"; else ckpt "$d" "$s"; fi
  prev=$d
  id=$(snap long "$d" "$s")
  echo "$s $id $d" >> "$T/long.ids"
  if [ $((s % EVERY)) = 0 ] || [ "$s" = "$LONG" ]; then
    cks forget -q
    prune_ok
    cks stats --run long --json > "$T/stats.json"
    python3 - "$T/stats.json" "$s" <<'PY' || die "after step $s: stored bytes not bounded by the kept snapshots"
import json, sys
d = json.load(open(sys.argv[1])); s = int(sys.argv[2])
run = [r for r in d["runs"] if r["run"] == "long"][0]
steps = sorted(x["step"] for x in run["snapshot_list"])
want = sorted(set(range(max(1, s - 2), s + 1)) | {k for k in range(50, s + 1, 50)})
assert steps == want, (steps, want)
biggest = max(x["stored_bytes"] for x in run["snapshot_list"])
for r in d["regions"]:
    assert r["garbage_bytes"] == 0, r
    # every chunk stored is one a kept snapshot of some run uses; this run
    # can hold at most what its kept snapshots hold
assert run["stored_bytes"] <= len(steps) * biggest, (run["stored_bytes"], len(steps), biggest)
PY
  fi
done
cks stats --json > "$T/stats.json"
python3 - "$T/stats.json" <<'PY' || die "region bytes exceed what the kept snapshots use"
import json, sys
d = json.load(open(sys.argv[1]))
used = sum(r["stored_bytes"] for r in d["runs"])   # runs' distinct chunks (one region)
for r in d["regions"]:
    assert r["stored_bytes"] <= used, (r, used)
PY
if [ "${CKS_REGIONS:-dir}" = dir ]; then
  echo "    region a on disk: $(du -sk "$T/regions/a/chunks" | cut -f1) KiB for $(cks ls --remote --run long --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))') kept snapshots of 'long'"
fi
step "every kept snapshot of 'long' restores bit for bit on a fresh instance"
for id in $(listed long); do
  src=$(awk -v i="$id" '$2 == i { print $3 }' "$T/long.ids")
  restore_same long "$id" "$src"
done
cks verify -q || { cks verify >&2 || true; die "verify after the long run"; }
echo "    $((SECONDS - T0)) s so far"

# ---- 3. interrupted prunes -------------------------------------------------------
step "a prune stopped between its phases; a snapshot reuses candidate chunks; the prune resumes"
for s in 1 2 3 4; do ckpt "$T/src/phase/checkpoint-$s" "$s"; PH[$s]=$(snap phase "$T/src/phase/checkpoint-$s" "$s"); done
cks forget --run phase --keep-last 1 -q
before=$(rg_keys a chunks/ | wc -l)
prune_ok --grace 1h
python3 - "$T/prune.json" <<'PY' || die "prune --grace 1h should mark and wait"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["regions"]:
    assert r["state"] == "waiting" and r["marked"] > 0 and r["deleted"] == 0 and "grace" in r["waiting"], r
PY
[ "$(rg_keys a chunks/ | wc -l)" = "$before" ] || die "a prune in its grace period deleted chunks"
[ -n "$(rg_keys a gc/ | grep '/mark$')" ] || die "no mark written"
# a new checkpoint made of a forgotten one's model: its chunks are candidates
mkdir -p "$T/src/phase/checkpoint-5"
cp "$T/src/phase/checkpoint-2/model.bin" "$T/src/phase/checkpoint-5/model.bin"
echo five > "$T/src/phase/checkpoint-5/meta.json"
PH[5]=$(snap phase "$T/src/phase/checkpoint-5" 5)
[ -n "$(rg_keys a gc/ | grep '/keep\.')" ] || die "the writer left no keep record for the candidates it reuses"
prune_ok --grace 0
python3 - "$T/prune.json" <<'PY' || die "the resumed prune"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["regions"]:
    assert r["state"] in ("swept", "clean"), r
    assert r["kept"] > 0, r   # the reused candidates
PY
restore_same phase "${PH[5]}" "$T/src/phase/checkpoint-5"
restore_same phase "${PH[4]}" "$T/src/phase/checkpoint-4"
cks verify -q || { cks verify >&2 || true; die "verify after the resumed prune"; }

ROUNDS=${CKS_RETENTION_KILLS:-$KILLS}
step "$ROUNDS rounds: prune killed -9 mid-sweep, then run again"
for k in $(seq 1 "$ROUNDS"); do
  for s in 1 2 3; do
    d="$T/src/kill$k/checkpoint-$s"; mkdir -p "$d"
    head -c $((1536 << 10)) /dev/urandom > "$d/model.bin"
    KS[$s]=$(snap "kill$k" "$d" "$s")
  done
  cks forget --run "kill$k" --keep-last 1 -q
  ( exec "$CKPTSYNC" --config "$CONF" prune --grace 0 -q > /dev/null 2>&1 ) &
  pid=$!
  sleep "0.$(printf '%03d' $((RANDOM % 600)))"
  kill -9 "$pid" 2> /dev/null || true
  wait "$pid" 2> /dev/null || true
  cks verify -q || { cks verify >&2 || true; die "round $k: verify after prune was killed"; }
  prune_ok --grace 0
  prune_ok --grace 0   # whatever the first left (a mark, a sweep, a done mark) is finished
  cks stats --json > "$T/stats.json"
  [ "$(json "$T/stats.json" 'sum(r["garbage_bytes"] for r in d["regions"])')" = 0 ] ||
    die "round $k: garbage left after the prune that followed a kill -9"
  restore_same "kill$k" "${KS[3]}" "$T/src/kill$k/checkpoint-3"
done
[ -z "$(rg_keys a gc/)" ] || die "gc records left after the prunes finished: $(rg_keys a gc/ | sed -n 1,3p)"
cks verify -q || { cks verify >&2 || true; die "verify at the end"; }
echo "retention: ok ($((SECONDS - T0)) s)"
