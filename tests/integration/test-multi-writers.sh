#!/usr/bin/env bash
# Many writers on one repository at once: instances with their own state
# and watch folders, sharing the three regions.
#  1. two CLI instances snapshot the same run at the same moment (steps 2i
#     and 2i+1, content shared between steps): both commit in every region,
#     the listing shows both with the higher step as the resume point, and a
#     fresh instance's `restore --latest` gives exactly the higher step;
#  2. three instances, each its own run, at once: each run resumes from its
#     own newest;
#  3. two daemons writing the same run, steps interleaved, one of them
#     killed -9 at a random moment while it uploads and started again: it
#     resumes its queue, and nothing `commit --wait replicated` acknowledged
#     is lost;
#  4. at the end one repository id in every region, every acknowledged
#     snapshot restores bit for bit on a fresh instance, `restore --latest`
#     gives each run's highest step, verify and every instance's fsck pass.
# CKS_MW_ROUNDS (default 20; lower under s3/ceph) scales every part: the
# pair rounds, the kill -9 rounds (2.5 x), the separate-runs rounds (/5).
# regions: dir s3 ceph
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"

# S3 servers here take longer per request (s3rver, Ceph RGW on a loaded
# 2-core machine): fewer rounds there (the dir variant makes the 20 pair
# rounds and 50 kill -9 rounds), to keep the suite within its budget.
case ${CKS_REGIONS:-dir} in
  dir) default_rounds=20 ;;
  *) default_rounds=6 ;;
esac
ROUNDS=${CKS_MW_ROUNDS:-$default_rounds}
KILL_ROUNDS=$(( ROUNDS * 5 / 2 ))
[ "$KILL_ROUNDS" -ge 1 ] || KILL_ROUNDS=1
RUN_ROUNDS=$(( ROUNDS / 5 ))
[ "$RUN_ROUNDS" -ge 2 ] || RUN_ROUNDS=2
T0=$SECONDS

# Every acknowledged snapshot: "run id step source-dir" (the source dir's
# base name is the snapshot's root).
ACKED="$T/acked"
: > "$ACKED"
ack() { echo "$1 $2 $3 $4" >> "$ACKED"; }

# Content that every checkpoint repeats (dedup across steps and instances,
# and the same chunks uploaded by several writers at the same moment).
head -c $((512 << 10)) /dev/urandom > "$T/shared.bin"

# rand_kib LO HI: a size in KiB in [LO, HI).
rand_kib() { echo $(( $1 + RANDOM % ($2 - $1) )); }

# make_ckpt DIR STEP LO_KIB HI_KIB: a checkpoint folder of a few files:
# new random content, the shared file, the previous checkpoint's
# optimizer state (so consecutive steps share chunks) and a small text file.
make_ckpt() {
  local d=$1 s=$2 lo=$3 hi=$4 prev=${5:-}
  mkdir -p "$d"
  head -c $(( $(rand_kib "$lo" "$hi") << 10 )) /dev/urandom > "$d/model.bin"
  cp "$T/shared.bin" "$d/frozen.bin"
  if [ -n "$prev" ] && [ -f "$prev/model.bin" ]; then
    head -c $((256 << 10)) "$prev/model.bin" > "$d/optim.bin"
  else
    head -c $((256 << 10)) /dev/urandom > "$d/optim.bin"
  fi
  printf '{"step": %s}\n' "$s" > "$d/meta.json"
}

# The checks of JSON output, in one Python process per call (starting
# Python takes longer than a snapshot here).
cat > "$T/mw.py" <<'PY'
import json, sys
def fail(msg):
    print(msg, file=sys.stderr)
    sys.exit(1)
cmd, args = sys.argv[1], sys.argv[2:]
if cmd in ("snapshot", "commit"):
    # [--dedup] FILE...: the snapshot is committed in all three regions (and
    # --dedup: not every chunk was new); print the ids
    dedup = args[:1] == ["--dedup"]
    ids = []
    for f in args[1:] if dedup else args:
        d = json.load(open(f))
        n = d["committed"] if cmd == "snapshot" else d["regions_committed"]
        if n != 3 or d["replicated"] is not True:
            fail("%s: exit 0, but committed in %s regions: %s" % (f, n, json.dumps(d)))
        if dedup and not d["new_chunks"] < d["chunks"]:
            fail("%s: no chunk deduplicated (%s of %s new)" % (f, d["new_chunks"], d["chunks"]))
        ids.append(d["id"])
    print(" ".join(ids))
elif cmd == "ls":
    # FILE RUN COUNT RESUME ID...: the run's listing (COUNT entries, "-" for
    # any), every ID in it, committed in 3 regions and durable; exactly one
    # resume point, RESUME, and it has the highest step listed
    f, run, count, resume, want = args[0], args[1], args[2], args[3], args[4:]
    d = json.load(open(f))
    why = []
    if count != "-" and len(d) != int(count):
        why.append("%d snapshots listed, expected %s" % (len(d), count))
    other = sorted(set(x["run"] for x in d) - {run})
    if other:
        why.append("other runs listed: %s" % other)
    by = {x["id"]: x for x in d}
    for i in want:
        if i not in by:
            why.append("snapshot %s is not listed" % i)
        elif by[i]["regions"] != 3 or by[i]["durable"] is not True:
            why.append("snapshot %s (step %s) is in %s regions" % (i, by[i]["step"], by[i]["regions"]))
    r = [x for x in d if x.get("resume") is True]
    top = max((x["step"] for x in d), default=None)
    if len(r) != 1:
        why.append("%d entries marked resume: %s" % (len(r), [(x["id"], x["step"]) for x in r]))
    else:
        if r[0]["id"] != resume:
            why.append("resume point is %s (step %s), expected %s" % (r[0]["id"], r[0]["step"], resume))
        if r[0]["step"] != top:
            why.append("resume point has step %s, the highest listed is %s" % (r[0]["step"], top))
    if why:
        fail("run %s: %s" % (run, "; ".join(why)))
elif cmd == "subset":
    # LOCAL REMOTE: every snapshot of the local index is in 3 regions
    mine = json.load(open(args[0]))
    remote = {x["id"]: x for x in json.load(open(args[1]))}
    bad = [(x["id"], x["step"], remote.get(x["id"], {}).get("regions")) for x in mine
           if remote.get(x["id"], {}).get("regions") != 3]
    if bad:
        fail("not in 3 regions (id, step, regions): %s" % bad)
PY
mw() { python3 "$T/mw.py" "$@"; }

# check_ls FILE RUN COUNT RESUME_ID ID...: see "ls" in mw.py.
check_ls() { mw ls "$@" || die "ls --remote --run $2"; }

# latest_is NAME RUN SRC: on a brand-new state of instance NAME, restore
# --latest of RUN gives exactly SRC (and nothing else).
latest_is() {
  local name=$1 run=$2 src=$3 dir
  dir="$T/latest/$run.$((++LATEST_NO))"
  rm -rf "$T/i-$name/state"
  icks "$name" restore --run "$run" --latest --to "$dir" -q 2> "$T/latest.err" ||
    { cat "$T/latest.err" >&2; die "restore --latest of $run failed"; }
  [ "$(ls -A "$dir")" = "$(basename "$src")" ] ||
    die "restore --latest of $run gave '$(ls -A "$dir" | tr '\n' ' ')', expected $(basename "$src")"
  same_tree "$src" "$dir/$(basename "$src")"
  rm -rf "$dir"
}
LATEST_NO=0

inst w1; inst w2; inst reader

# ---- 1. two instances, one run, the same moment ----------------------------
step "$ROUNDS rounds: two instances snapshot run 'pair' at once (steps 2i, 2i+1)"
for i in $(seq 1 "$ROUNDS"); do
  sa=$((2 * i)); sb=$((2 * i + 1))
  make_ckpt "$T/src/w1/checkpoint-$sa" "$sa" 1024 2048 "$T/src/w2/checkpoint-$((sa - 1))"
  make_ckpt "$T/src/w2/checkpoint-$sb" "$sb" 1024 2048 "$T/src/w1/checkpoint-$((sb - 3))"
  rm -f "$T/go"
  ( barrier_wait "$T/go"; exec "$CKPTSYNC" --config "$T/i-w1.conf" snapshot "$T/src/w1/checkpoint-$sa" \
      --run pair --step "$sa" --json > "$T/w1.json" 2> "$T/w1.err" ) &
  pa=$!
  ( barrier_wait "$T/go"; exec "$CKPTSYNC" --config "$T/i-w2.conf" snapshot "$T/src/w2/checkpoint-$sb" \
      --run pair --step "$sb" --json > "$T/w2.json" 2> "$T/w2.err" ) &
  pb=$!
  touch "$T/go"
  ra=0; rb=0
  wait $pa || ra=$?
  wait $pb || rb=$?
  [ $ra = 0 ] || { cat "$T/w1.err" >&2; die "round $i: snapshot of step $sa by w1 exited $ra"; }
  [ $rb = 0 ] || { cat "$T/w2.err" >&2; die "round $i: snapshot of step $sb by w2 exited $rb"; }
  dedup=; [ "$i" -gt 1 ] && dedup=--dedup   # the shared file is in the regions from round 2 on
  read -r ida idb < <(mw snapshot $dedup "$T/w1.json" "$T/w2.json" || echo FAIL)
  [ -n "$idb" ] || die "round $i: a snapshot is not committed in 3 regions, or not deduplicated"
  ack pair "$ida" "$sa" "$T/src/w1/checkpoint-$sa"
  ack pair "$idb" "$sb" "$T/src/w2/checkpoint-$sb"
  lister=w1; [ $((i % 2)) = 0 ] && lister=w2
  icks "$lister" ls --remote --run pair --json > "$T/ls.json"
  check_ls "$T/ls.json" pair $((2 * i)) "$idb" "$ida" "$idb"
  latest_is reader pair "$T/src/w2/checkpoint-$sb"
done
echo "    $(grep -c . "$ACKED") snapshots; dedup of the last: w1 $(json "$T/w1.json" 'd["dedup_ratio"]')," \
  "w2 $(json "$T/w2.json" 'd["dedup_ratio"]'); $((SECONDS - T0)) s so far"

# ---- 2. three instances, three runs, at once -------------------------------
step "$RUN_ROUNDS rounds: three instances, each its own run, at once"
inst p1; inst p2; inst p3
for k in $(seq 1 "$RUN_ROUNDS"); do
  rm -f "$T/go"
  pids=()
  for p in p1 p2 p3; do
    s=$((100 * k + RANDOM % 50))
    echo "$s" > "$T/$p.step"
    make_ckpt "$T/src/$p/step_$s" "$s" 512 1536 "$T/src/$p/$(cat "$T/$p.prev" 2>/dev/null || echo none)"
    echo "step_$s" > "$T/$p.prev"
    ( barrier_wait "$T/go"; exec "$CKPTSYNC" --config "$T/i-$p.conf" snapshot "$T/src/$p/step_$s" \
        --run "run-$p" --step "$s" --json > "$T/$p.json" 2> "$T/$p.err" ) &
    pids+=($!)
  done
  touch "$T/go"
  n=0
  for p in p1 p2 p3; do
    rc=0; wait "${pids[$n]}" || rc=$?; n=$((n + 1))
    [ $rc = 0 ] || { cat "$T/$p.err" >&2; die "round $k: snapshot by $p exited $rc"; }
    s=$(cat "$T/$p.step")
    id=$(mw snapshot "$T/$p.json") || die "round $k: the snapshot by $p is not committed in 3 regions"
    echo "$id" > "$T/$p.id"
    ack "run-$p" "$id" "$s" "$T/src/$p/step_$s"
  done
done
for p in p1 p2 p3; do
  s=$(cat "$T/$p.step")
  icks reader ls --remote --run "run-$p" --json > "$T/ls.json"
  # shellcheck disable=SC2046
  check_ls "$T/ls.json" "run-$p" "$RUN_ROUNDS" "$(cat "$T/$p.id")" $(awk -v r="run-$p" '$1 == r { print $2 }' "$ACKED")
  latest_is reader "run-$p" "$T/src/$p/step_$s"
done
echo "    $((SECONDS - T0)) s so far"

# ---- 3. two daemons, one run, kill -9 at random moments --------------------
step "$KILL_ROUNDS rounds: daemons A and B write run 'shared', one of them killed -9 while it uploads"
inst A; inst B
idaemon A; idaemon B
KILLS=0; CAUGHT=0
declare -A PREV=()
for k in $(seq 1 "$KILL_ROUNDS"); do
  declare -A S=([A]=$((2 * k)) [B]=$((2 * k + 1)))
  for d in A B; do
    make_ckpt "$T/i-$d/watch/shared/checkpoint-${S[$d]}" "${S[$d]}" 256 1024 "${PREV[$d]:-}"
    head -c $(( $(rand_kib 256 1024) << 10 )) /dev/urandom > "$T/i-$d/watch/shared/checkpoint-${S[$d]}/extra.bin"
    PREV[$d]="$T/i-$d/watch/shared/checkpoint-${S[$d]}"
  done
  victim=A; [ $((RANDOM % 2)) = 0 ] && victim=B
  declare -A CP=()
  for d in A B; do
    ( icks "$d" commit "$T/i-$d/watch/shared/checkpoint-${S[$d]}" --step "${S[$d]}" \
        --wait replicated --timeout 60 --json > "$T/c-$d.json" 2> "$T/c-$d.err" ) &
    CP[$d]=$!
  done
  ( sleep "0.$(printf '%03d' $((RANDOM % 400)))"; ikill "$victim" ) 2> /dev/null &
  killer=$!
  declare -A RC=()
  # (bash reaps the killed daemon while it waits: ikill's kill then fails;
  # stderr off: bash reports "Killed" for the background job)
  for d in A B; do RC[$d]=0; { wait "${CP[$d]}" || RC[$d]=$?; } 2> /dev/null; done
  { wait $killer || true; ikill "$victim" || true; } 2> /dev/null
  KILLS=$((KILLS + 1))
  idaemon "$victim"
  for d in A B; do
    src="$T/i-$d/watch/shared/checkpoint-${S[$d]}"
    if [ "${RC[$d]}" != 0 ]; then
      [ "$d" = "$victim" ] || { cat "$T/c-$d.err" >&2; die "round $k: commit by $d (not killed) exited ${RC[$d]}"; }
      CAUGHT=$((CAUGHT + 1))
      # The restarted daemon takes the checkpoint again (or finds it already
      # taken and in its queue) and must finish it.
      icks "$d" commit "$src" --step "${S[$d]}" --wait replicated --timeout 60 --json \
        > "$T/c-$d.json" 2> "$T/c-$d.err" ||
        { cat "$T/c-$d.err" >&2; tail -20 "$T/i-$d/daemon.log" >&2; die "round $k: commit again by $d after its restart failed"; }
    fi
  done
  read -r ida idb < <(mw commit "$T/c-A.json" "$T/c-B.json" || echo FAIL)
  [ -n "$idb" ] || die "round $k: a commit exited 0 but is not replicated"
  ack shared "$ida" "${S[A]}" "$T/i-A/watch/shared/checkpoint-${S[A]}"
  ack shared "$idb" "${S[B]}" "$T/i-B/watch/shared/checkpoint-${S[B]}"
done
echo "    $KILLS kill -9, $CAUGHT of them during the victim's commit;" \
  "restarts that resumed uploads: $(cat "$T"/i-[AB]/daemon.log | grep -c 'resuming' || true); $((SECONDS - T0)) s so far"

step "the restarted daemons drain their queues; every snapshot they took is in all regions"
for d in A B; do
  icks "$d" flush --wait replicated --deadline 120 -q ||
    { tail -30 "$T/i-$d/daemon.log" >&2; die "daemon $d: queues did not drain"; }
done
icks reader ls --remote --run shared --json > "$T/ls-shared.json"
for d in A B; do
  icks "$d" ls --run shared --json > "$T/ls-$d.json"
  mw subset "$T/ls-$d.json" "$T/ls-shared.json" || die "daemon $d: a snapshot it took is not in every region"
  [ -z "$(ls -A "$T/i-$d/watch/.ckptsync-pins" 2>/dev/null)" ] || die "daemon $d: pin folders left behind"
done
last_b=$(awk '$1 == "shared" && (top == "" || $3 > top) { top = $3; id = $2 } END { print id }' "$ACKED")
# shellcheck disable=SC2046
check_ls "$T/ls-shared.json" shared - "$last_b" $(awk '$1 == "shared" { print $2 }' "$ACKED")
for d in A B; do istop "$d"; done

# ---- 4. the end state --------------------------------------------------------
step "one repository id in every region"
ids=$(repo_ids | sort -u)
[ "$(echo "$ids" | wc -l)" = 1 ] && [ "$ids" != none ] ||
  { cat "$T/repo.json" >&2; die "regions hold repositories: $ids"; }
[ "$(repo_ids | wc -l)" = 3 ] || die "repo --json does not list 3 regions"

step "every acknowledged snapshot ($(grep -c . "$ACKED")) restores bit for bit on a fresh instance"
rm -rf "$T/i-reader/state"
n=0
while read -r run id s src; do
  n=$((n + 1))
  icks reader restore --run "$run" --snapshot "$id" --to "$T/final/$n" -q 2> "$T/r.err" ||
    { cat "$T/r.err" >&2; die "acknowledged snapshot $id (run $run, step $s) cannot be restored"; }
  same_tree "$src" "$T/final/$n/$(basename "$src")"
  rm -rf "$T/final/$n"
done < "$ACKED"

step "restore --latest on a fresh instance gives each run's highest step"
for run in pair run-p1 run-p2 run-p3 shared; do
  src=$(awk -v r="$run" '$1 == r && (top == "" || $3 > top) { top = $3; src = $4 } END { print src }' "$ACKED")
  latest_is reader "$run" "$src"
done

step "verify: every region complete and intact"
cks verify -q || { cks verify >&2 || true; die "verify"; }

step "fsck of every instance"
for name in w1 w2 p1 p2 p3 A B; do
  icks "$name" fsck > "$T/fsck.out" 2>&1 || { cat "$T/fsck.out" >&2; die "fsck of instance $name"; }
done
echo "multi-writers: ok ($((SECONDS - T0)) s)"
