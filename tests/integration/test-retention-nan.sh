#!/usr/bin/env bash
# keep_best over trainer_state.json files as Hugging Face's Trainer writes
# them: Python's json.dumps, which writes NaN, Infinity and -Infinity (a
# NaN grad_norm is common).  Retention must fail safe:
#  1. a NaN grad_norm (and Infinity, -Infinity) elsewhere in the file does
#     not switch keep_best off: forget + prune keep the best checkpoint and
#     best_model_checkpoint; a NaN metric ranks last (min and max);
#  2. the newest checkpoint's file cannot be read (torn, over 64 MiB, or
#     missing while an older checkpoint has one): nothing is ranked from an
#     older checkpoint's file, every checkpoint is kept, and a warning names
#     the snapshot, the file and the reason; a run with no trainer_state.json
#     at all has nothing to rank (the other rules decide);
#  3. the daemon's own retention, after each durable snapshot, keeps the
#     best checkpoint of a run whose files carry NaN.
# regions: dir   (NaN parsing and the keep-when-unreadable rule are the same for every kind of region)
. "$(dirname "$0")/lib.sh"
write_config 16K 64K 256K
cat >> "$CONF" <<'EOF'
[retention.dnan]
keep_last = 1
keep_best = 1
best_metric = eval_loss
[prune]
grace = 0
EOF
set_settle 1
T0=$SECONDS

head -c $((128 << 10)) /dev/urandom > "$T/frozen.bin"

# ckpt DIR: a checkpoint's weights (shared part, new part), no trainer state.
ckpt() {
  mkdir -p "$1"
  cp "$T/frozen.bin" "$1/frozen.bin"
  head -c $((96 << 10)) /dev/urandom > "$1/model.safetensors"
}

# states ROOT STEPS LOSSES [ACCURACIES]: ROOT/checkpoint-S/trainer_state.json
# for each S of STEPS (comma-separated), written as the Trainer writes it
# (json.dumps, indent 2, sorted keys), log_history growing with each step:
# a train entry (grad_norm NaN at every third step, Infinity at the second,
# a -Infinity) and an eval entry with eval_loss (and eval_accuracy); "nan"
# is a NaN metric.  best_model_checkpoint is the step of the lowest loss.
states() {
  python3 - "$@" <<'PY'
import json, math, os, sys
root, steps = sys.argv[1], [int(s) for s in sys.argv[2].split(",")]
loss = [float(v) for v in sys.argv[3].split(",")]
acc = [float(v) for v in sys.argv[4].split(",")] if len(sys.argv) > 4 else None
hist, best = [], None
for i, s in enumerate(steps):
    hist.append({"epoch": s / 100, "grad_norm": math.nan if i % 3 == 0 else (math.inf if i == 1 else 1.25),
                 "learning_rate": 5e-05, "loss": 2.0 - i / 10, "min_logit": -math.inf, "step": s})
    ev = {"epoch": s / 100, "eval_loss": loss[i], "eval_runtime": 0.5, "step": s}
    if acc:
        ev["eval_accuracy"] = acc[i]
    hist.append(ev)
    if not math.isnan(loss[i]) and (best is None or loss[i] < loss[best]):
        best = i
    state = {"best_metric": loss[best], "best_model_checkpoint": f"out/checkpoint-{steps[best]}",
             "epoch": s / 100, "eval_steps": 10, "global_step": s, "is_hyper_param_search": False,
             "is_local_process_zero": True, "is_world_process_zero": True, "log_history": hist,
             "logging_steps": 10, "max_steps": 1000, "num_train_epochs": 10, "save_steps": 10,
             "total_flos": 1.5e12, "train_batch_size": 8, "trial_name": None, "trial_params": None}
    with open(os.path.join(root, f"checkpoint-{s}", "trainer_state.json"), "w") as f:
        f.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
PY
}

snap() { # RUN DIR STEP -> prints the id
  cks snapshot "$2" --run "$1" --step "$3" --json > "$T/snap.json" 2> "$T/snap.err" ||
    { cat "$T/snap.err" >&2; die "snapshot of $2 (run $1, step $3)"; }
  json "$T/snap.json" 'd["id"]'
}

listed_steps() { # RUN -> the steps ls --remote lists, sorted, space-separated
  cks ls --remote --run "$1" --json > "$T/ls.json"
  json "$T/ls.json" '" ".join(str(s) for s in sorted(x["step"] for x in d))'
}

# decided FILE: "kept K... | forgot F..." (steps) of forget --json's first run.
decided() {
  python3 - "$1" <<'PY'
import json, sys
snaps = json.load(open(sys.argv[1]))["runs"][0]["snapshots"]
k = sorted(x["step"] for x in snaps if x["action"] == "keep")
f = sorted(x["step"] for x in snaps if x["action"] != "keep")
print("kept", *k, "| forgot", *f)
PY
}

# expect_decision WANT forget-args...: a dry run decides WANT; stderr in $T/f.err.
expect_decision() {
  local want=$1 got; shift
  cks forget --dry-run --json "$@" > "$T/f.json" 2> "$T/f.err" ||
    { cat "$T/f.err" >&2; die "forget --dry-run $*"; }
  got=$(decided "$T/f.json")
  [ "$got" = "$want" ] || { cat "$T/f.err" >&2; die "forget $*: $got, expected $want"; }
}

# ---- 1. NaN, Infinity, -Infinity in the file ----------------------------------
step "run 'nan': 6 checkpoints, trainer_state.json by json.dumps with NaN, Infinity, -Infinity"
# eval_loss: best 20, then 30; step 40's loss is NaN.  eval_accuracy: best
# 30, step 40's NaN.
declare -A NID=()
for s in 10 20 30 40 50 60; do ckpt "$T/src/nan/checkpoint-$s"; done
states "$T/src/nan" 10,20,30,40,50,60 0.9,0.1,0.5,nan,0.7,0.8 0.3,0.6,0.9,nan,0.2,0.1
f60="$T/src/nan/checkpoint-60/trainer_state.json"
for tok in '"grad_norm": NaN' '"grad_norm": Infinity' '"min_logit": -Infinity' '"eval_loss": NaN' \
  '"best_model_checkpoint": "out/checkpoint-20"'; do
  grep -qF "$tok" "$f60" || die "json.dumps did not write $tok"
done
for s in 10 20 30 40 50 60; do NID[$s]=$(snap nan "$T/src/nan/checkpoint-$s" "$s"); done

step "forget ranks by the file: best_model_checkpoint and the best kept, a NaN metric last"
expect_decision "kept 20 30 60 | forgot 10 40 50" --run nan --keep-last 1 --keep-best 2
python3 - "$T/f.json" <<'PY' || die "the reasons, or forget --json is not strict JSON"
import json, sys
def strict(tok):
    raise ValueError(f"forget --json wrote {tok}")
snaps = json.load(open(sys.argv[1]), parse_constant=strict)["runs"][0]["snapshots"]
act = {x["step"]: x["why"] for x in snaps}
assert "best_model_checkpoint" in act[20], act
assert act[30].startswith("keep-best 2: eval_loss = 0.5"), act
assert [x.get("metric", "absent") for x in snaps if x["step"] == 40] == [None], snaps
PY
grep -q "has no trainer_state.json\|keeps nothing" "$T/f.err" && { cat "$T/f.err"; die "keep_best warned on a readable file"; }
# all but one ranked: the NaN is the one left out
expect_decision "kept 10 20 30 50 60 | forgot 40" --run nan --keep-best 5
# max mode: the NaN accuracy is not the "largest"
expect_decision "kept 20 30 60 | forgot 10 40 50" --run nan --keep-best 1 --best-metric eval_accuracy --best-mode max
expect_decision "kept 10 20 30 50 60 | forgot 40" --run nan --keep-best 5 --best-metric eval_accuracy --best-mode max

step "forget + prune --grace 0 in every region: the best checkpoint stays and restores"
cks forget --run nan --keep-last 1 --keep-best 2 -q
cks prune --grace 0 -q
[ "$(listed_steps nan)" = "20 30 60" ] || die "after forget + prune, run 'nan' lists $(listed_steps nan)"
cks ls --remote --run nan --json > "$T/ls.json"
[ "$(json "$T/ls.json" '[x["regions"] for x in d if x["step"] == 20][0]')" = 3 ] ||
  die "step 20 is not in all 3 regions after prune"
rm -rf "$T/rs"
cks restore --run nan --snapshot "${NID[20]}" --to "$T/rs" -q
same_tree "$T/src/nan/checkpoint-20" "$T/rs/checkpoint-20"

# ---- 2. a newest file that cannot be read ---------------------------------------
# Each run: steps 10 20 30; what steps 10 and 20 wrote ranks 10 best (so
# ranking from step 20's file would forget 20); step 30's file is broken.
# Every checkpoint must be kept, with a warning naming it.
unreadable() { # RUN HOW WHY-PATTERN
  local run=$1 how=$2 why=$3
  step "run '$run': the newest trainer_state.json $how: every checkpoint kept, with a warning"
  for s in 10 20 30; do ckpt "$T/src/$run/checkpoint-$s"; done
  states "$T/src/$run" 10,20,30 0.5,0.9,0.1
  case $how in
    torn) head -c 200 "$T/src/$run/checkpoint-30/trainer_state.json" > "$T/torn" &&
          mv "$T/torn" "$T/src/$run/checkpoint-30/trainer_state.json" ;;
    "over 64 MiB")
      python3 - "$T/src/$run/checkpoint-30/trainer_state.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["padding"] = " " * (65 << 20)
open(sys.argv[1], "w").write(json.dumps(d, indent=2, sort_keys=True) + "\n")
PY
      ;;
    missing) rm "$T/src/$run/checkpoint-30/trainer_state.json" ;;
  esac
  for s in 10 20 30; do RUNID[$run.$s]=$(snap "$run" "$T/src/$run/checkpoint-$s" "$s"); done
  expect_decision "kept 10 20 30 | forgot" --run "$run" --keep-last 1 --keep-best 1
  grep -q "trainer_state.json" "$T/f.err" && grep -q "${RUNID[$run.30]}" "$T/f.err" &&
    grep -qi "$why" "$T/f.err" || { cat "$T/f.err"; die "no warning naming the file, snapshot and reason ($why)"; }
  [ "$(json "$T/f.json" 'sum("trainer_state.json" in x["why"] for x in d["runs"][0]["snapshots"])')" -ge 2 ] ||
    die "the kept snapshots do not say why: $(cat "$T/f.json")"
  cks forget --run "$run" --keep-last 1 --keep-best 1 -q 2> /dev/null
  cks prune --grace 0 -q
  [ "$(listed_steps "$run")" = "10 20 30" ] || die "run '$run' lists $(listed_steps "$run") after forget + prune"
}
declare -A RUNID=()
unreadable torn torn "offset"
unreadable big "over 64 MiB" "too large\|larger than"
unreadable gone missing "has none\|has no\|missing"

step "a run with no trainer_state.json anywhere: keep_best has nothing to rank, the others decide"
for s in 10 20 30; do ckpt "$T/src/plain/checkpoint-$s"; snap plain "$T/src/plain/checkpoint-$s" "$s" > /dev/null; done
expect_decision "kept 30 | forgot 10 20" --run plain --keep-last 1 --keep-best 1
grep -q "trainer_state.json" "$T/f.err" || { cat "$T/f.err"; die "no warning that keep_best found nothing to rank"; }
echo "    $((SECONDS - T0)) s so far"

# ---- 3. the daemon ---------------------------------------------------------------
step "the daemon's retention ([retention.dnan] keep_last 1, keep_best 1) keeps the best of NaN files"
start_daemon
# eval_loss: 20 best; every file has NaN grad_norms
# (made whole outside the watched tree, then renamed in)
for s in 10 20 30 40; do ckpt "$T/stage/checkpoint-$s"; done
states "$T/stage" 10,20,30,40 0.6,0.1,0.4,0.5
grep -qF '"grad_norm": NaN' "$T/stage/checkpoint-40/trainer_state.json" || die "no NaN written"
mkdir -p "$T/watch/dnan"
for s in 10 20 30 40; do
  mv "$T/stage/checkpoint-$s" "$T/watch/dnan/checkpoint-$s"
  cks commit "$T/watch/dnan/checkpoint-$s" --wait durable --timeout 60 --json > "$T/c.json" ||
    { tail "$T/daemon.log"; die "commit of checkpoint-$s"; }
  DID[$s]=$(json "$T/c.json" 'd["id"]')
done
# after step 40 the policy forgets step 30 (10 went after step 20): the
# pass that follows the last durable snapshot logs it
wait_for 60 grep -q "retention of run 'dnan' after ${DID[40]}" "$T/daemon.log" ||
  { tail -20 "$T/daemon.log"; die "the daemon did not apply retention after step 40"; }
[ "$(listed_steps dnan)" = "20 40" ] || { grep -i "keep_best\|retention" "$T/daemon.log" | tail; die "the daemon's retention left $(listed_steps dnan)"; }
grep -q "keep_best.*trainer_state" "$T/daemon.log" && { grep "keep_best" "$T/daemon.log"; die "the daemon warned about a readable file"; }
stop_daemon
echo "retention-nan: ok ($((SECONDS - T0)) s)"
