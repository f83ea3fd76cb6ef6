# mnrand.sh — randomized trials of a multi-node job with kill -9 (sourced
# by test-multinode-random.sh and tests/soak/multinode-soak.sh after
# lib.sh, not run).  Regions: three s3rver servers (s3lib.sh), so that a
# region server can be killed too.
#
#   CKS_MN_NODES    daemons (nodes of the job), default 4
#   CKS_MN_TRIALS   trials after the first (untouched) step, default 4
#   CKS_MN_MAXKIB   largest file, KiB, default 256
#   CKS_MN_KILL_MS  the victim dies 0 .. this many ms after the commits
#                   start (default 1500: the sanitizer build is slow)
#   CKS_MN_VERIFY   how many committed steps the end restores again (all
#                   of them up to this many; else the newest this many)
#   CKS_SEED        the seed of every choice (printed; replays a failure's
#                   choices — layout, sizes, victim, moment — though not the
#                   threads' interleaving)
#
# A trial: every node writes step S in a layout drawn from DCP, Megatron,
# DeepSpeed and Hugging Face (mnlayout.py) and commits it (all at once, in
# the background); after a random delay one victim is killed -9: a node
# (restarted, and its commit retried, as a launcher would) or a region
# server (restarted on the same port and data).  While the victim is down
# a fresh instance's restore --latest must give the previous step or S,
# whole.  Then, once every node's queue is empty: step S is committed once
# per region (one commit record, one snapshot), ls --remote shows no
# incomplete step and S as the resume point, S and the previous step
# restore bit for bit on a fresh instance.

. "$CKS_SOURCE_DIR/tests/integration/multilib.sh"

MN_N=${CKS_MN_NODES:-4}
MN_TRIALS=${CKS_MN_TRIALS:-4}
MN_MAXKIB=${CKS_MN_MAXKIB:-256}
MN_VERIFY=${CKS_MN_VERIFY:-50}
MN_SEED=${CKS_SEED:-$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')}
MN_LAYOUTS=(dcp megatron deepspeed hf)
declare -gA MN_UNIT=() MN_ID=()
MN_STEPS=()
MN_KILLS_NODE=0 MN_KILLS_S3=0

mn_s3dir() { echo "$T/s3-$1/$S3_BUCKET/$S3_PREFIX"; }

# mn_count R DIR PATTERN: objects under region R's DIR whose name matches
# (read from the server's data directory: the region's own view).
mn_count() {
  local d
  d="$(mn_s3dir "$1")/$2"
  [ -d "$d" ] || { echo 0; return; }
  find "$d" -name "$3._S3rver_object" | wc -l
}
# mn_commits S: commit records of step S in each region ("a b c").
mn_commits() {
  echo "$(mn_count a commits "*.s$1.*") $(mn_count b commits "*.s$1.*") $(mn_count c commits "*.s$1.*")"
}

mn_start() { idaemon "n$1"; }

# mn_queued: snapshots (parts) still in the nodes' queues, summed.
mn_queued() {
  local k
  for k in $(seq 0 $((MN_N - 1))); do
    icks "n$k" status --json > "$T/st-$k.json" 2> /dev/null || true
  done
  python3 - "$T" "$MN_N" <<'PY'
import json, sys
t, n, total = sys.argv[1], int(sys.argv[2]), 0
for k in range(n):
    try:
        total += json.load(open("%s/st-%d.json" % (t, k)))["queue"]["snapshots"]
    except Exception:
        total += 1  # not answering (starting): count as busy
print(total)
PY
}

# mn_settled S: step S committed in every region and no node has work left.
mn_settled() {
  local deadline=$((SECONDS + ${CKS_MN_SETTLE:-90}))
  while [ $SECONDS -lt $deadline ]; do
    if [ "$(mn_commits "$1")" != "0 0 0" ] && [ "$(mn_queued)" = 0 ]; then return 0; fi
    sleep 0.2
  done
  echo "trial step $1: commits per region $(mn_commits "$1"), queued $(mn_queued)" >&2
  grep -h -E 'error|cannot' "$T"/i-n*/daemon.log | tail -20 >&2
  die "step $1 did not commit in every region within ${CKS_MN_SETTLE:-90} s (seed $MN_SEED)"
}

# mn_write S: every node writes step S in a drawn layout (into MN_LAYOUT);
# the sums of the tree it must restore to.  (Not in a subshell: $RANDOM.)
mn_write() {
  local s=$1
  MN_LAYOUT=${MN_LAYOUTS[$((RANDOM % 4))]}
  MN_UNIT[$s]=$(python3 "$CKS_SOURCE_DIR/tests/integration/mnlayout.py" \
    "$MN_LAYOUT" "$s" "$MN_N" "$T" "$MN_SEED" "$MN_MAXKIB" "$T/want") || die "mnlayout.py $MN_LAYOUT $s"
  tree_sums "$T/want" > "$T/sums-$s"
}

mn_commit() {   # K S: node K commits its part of step S
  icks "n$1" commit "$T/i-n$1/watch/job/${MN_UNIT[$2]}" --step "$2" > "$T/commit-$1.out" 2>&1
}

# mn_check_tree DIR S: DIR holds exactly step S's unit, bit for bit.
mn_check_tree() {
  local got
  got=$(cd "$1" && ls -A)
  [ "$got" = "${MN_UNIT[$2]}" ] || die "restore of step $2 gave [$got], expected ${MN_UNIT[$2]} (seed $MN_SEED)"
  diff "$T/sums-$2" <(tree_sums "$1/${MN_UNIT[$2]}") > "$T/diff" ||
    { head -20 "$T/diff" >&2; die "restored step $2 differs from the nodes' files (seed $MN_SEED)"; }
}

# mn_latest_is S PREV: a fresh instance's restore --latest is S or PREV, whole.
mn_latest_is() {
  rm -rf "$T/i-x/state" "$T/got"
  icks x restore --run job --latest --to "$T/got" --json > "$T/latest.json" 2> "$T/latest.err" ||
    { cat "$T/latest.err" >&2; die "restore --latest on a fresh instance (seed $MN_SEED)"; }
  local got
  got=$(json "$T/latest.json" 'd["step"]')
  [ "$got" = "$1" ] || [ "$got" = "$2" ] || die "restore --latest gave step $got, expected $2 or $1"
  mn_check_tree "$T/got" "$got"
  echo "$got"
}

mn_restore_id() {   # S: restore step S by its id on a fresh instance
  rm -rf "$T/i-x/state" "$T/got"
  icks x restore --run job --snapshot "${MN_ID[$1]}" --to "$T/got" -q 2> "$T/restore.err" ||
    { cat "$T/restore.err" >&2; die "restore of step $1 (${MN_ID[$1]}) on a fresh instance"; }
  mn_check_tree "$T/got" "$1"
}

# mn_remote S: ls --remote on a fresh instance: every step so far committed,
# none incomplete, S the resume point; the ids into MN_ID.
mn_remote() {
  rm -rf "$T/i-x/state"
  icks x ls --remote --run job --json > "$T/ls.json" 2> "$T/ls.err" || { cat "$T/ls.err" >&2; die "ls --remote --run job"; }
  local line
  while read -r line; do MN_ID[${line%% *}]=${line#* }; done < <(
    json "$T/ls.json" '"\n".join("%d %s" % (x["step"], x["id"]) for x in d if not x.get("incomplete"))')
  [ "$(json "$T/ls.json" '[x["step"] for x in d if x.get("incomplete")]')" = "[]" ] ||
    die "ls --remote: incomplete steps $(json "$T/ls.json" '[x["step"] for x in d if x.get("incomplete")]') after trial $1"
  [ "$(json "$T/ls.json" '[x["step"] for x in d if x.get("resume")]')" = "[$1]" ] ||
    die "ls --remote: resume point $(json "$T/ls.json" '[x["step"] for x in d if x.get("resume")]'), expected $1"
  local s n
  n=$(json "$T/ls.json" 'len([x for x in d if not x.get("incomplete")])')
  [ "$n" = "${#MN_STEPS[@]}" ] || die "ls --remote lists $n snapshots, ${#MN_STEPS[@]} steps were committed"
  for s in "${MN_STEPS[@]}"; do [ -n "${MN_ID[$s]:-}" ] || die "ls --remote: no snapshot of step $s"; done
}

# mn_once S: one commit record and one snapshot per committed step, per region.
mn_once() {
  local r n
  [ "$(mn_commits "$1")" = "1 1 1" ] || die "step $1: commit records per region $(mn_commits "$1"), expected 1 1 1 (seed $MN_SEED)"
  for r in a b c; do
    n=$(mn_count "$r" snapshots "*")
    [ "$n" = "${#MN_STEPS[@]}" ] || die "region $r: $n snapshots after ${#MN_STEPS[@]} committed steps (seed $MN_SEED)"
  done
}

# mn_trial I: one trial (I = 0: no kill).
mn_trial() {
  local i=$1 s=$((($1 + 1) * 1000)) prev=${MN_STEPS[*]: -1} victim delay k got pids=() rs=(a b c)
  mn_write "$s"
  if [ "$i" = 0 ]; then
    victim=none
  elif [ $((RANDOM % 3)) = 0 ]; then
    victim=s3-${rs[$((RANDOM % 3))]}
  else
    victim=n$((RANDOM % MN_N))
  fi
  delay=$((RANDOM % ${CKS_MN_KILL_MS:-1500}))
  echo "trial $i: step $s ($MN_LAYOUT), kill $victim after ${delay} ms"
  for k in $(seq 0 $((MN_N - 1))); do mn_commit "$k" "$s" & pids+=($!); done
  if [ "$victim" != none ]; then
    sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
    case $victim in
      s3-*) kill_s3 "${victim#s3-}"; MN_KILLS_S3=$((MN_KILLS_S3 + 1)) ;;
      *) ikill "$victim"; MN_KILLS_NODE=$((MN_KILLS_NODE + 1)) ;;
    esac
  fi
  for k in $(seq 0 $((MN_N - 1))); do
    wait "${pids[$k]}" || [ "$victim" = "n$k" ] ||
      { cat "$T/commit-$k.out" >&2; die "node $k: commit of step $s failed (victim $victim)"; }
  done
  if [ "$victim" != none ]; then
    if [ -n "$prev" ]; then
      got=$(mn_latest_is "$s" "$prev")
      echo "  while $victim is down: restore --latest gives step $got"
    fi
    case $victim in
      s3-*) restart_s3 "${victim#s3-}" ;;
      n*) mn_start "${victim#n}"; mn_commit "${victim#n}" "$s" ||
            { cat "$T/commit-${victim#n}.out" >&2; die "$victim: commit of step $s retried after restart"; } ;;
    esac
  fi
  mn_settled "$s"
  MN_STEPS+=("$s")
  mn_once "$s"
  mn_remote "$s"
  got=$(mn_latest_is "$s" "$s")
  [ -z "$prev" ] || mn_restore_id "$prev"
}

mn_run() {
  local k i
  echo "seed $MN_SEED: replay with CKS_SEED=$MN_SEED CKS_MN_NODES=$MN_N CKS_MN_TRIALS=$MN_TRIALS CKS_MN_MAXKIB=$MN_MAXKIB CKS_MN_KILL_MS=${CKS_MN_KILL_MS:-1500}"
  RANDOM=$MN_SEED
  for k in $(seq 0 $((MN_N - 1))); do inst "n$k" nodes="$MN_N" node_rank="$k" settle=3600; done
  inst x
  for k in $(seq 0 $((MN_N - 1))); do mn_start "$k"; done
  for i in $(seq 0 "$MN_TRIALS"); do mn_trial "$i"; done
  mn_final
}

# mn_final: every step still committed once per region; the newest
# MN_VERIFY restore again, bit for bit; no sanitizer report.
mn_final() {
  local s n=0 k
  for s in "${MN_STEPS[@]}"; do
    [ "$(mn_commits "$s")" = "1 1 1" ] || die "at the end, step $s has commit records $(mn_commits "$s") (seed $MN_SEED)"
  done
  for ((k = ${#MN_STEPS[@]} - 1; k >= 0 && n < MN_VERIFY; k--, n++)); do mn_restore_id "${MN_STEPS[$k]}"; done
  for k in $(seq 0 $((MN_N - 1))); do istop "n$k"; done
  if grep -E 'AddressSanitizer|LeakSanitizer|runtime error' "$T"/i-n*/daemon.log > "$T/san.txt"; then
    cat "$T/san.txt" >&2; die "a daemon reported a sanitizer error"
  fi
  echo "trials: $MN_TRIALS (+1 untouched), nodes $MN_N, steps committed ${#MN_STEPS[@]}, each once per region;" \
    "kills: $MN_KILLS_NODE nodes, $MN_KILLS_S3 region servers; $n steps restored again at the end (seed $MN_SEED)"
}
