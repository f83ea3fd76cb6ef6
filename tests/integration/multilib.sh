# multilib.sh — several instances on one repository (sourced after lib.sh
# and write_config, not run).  Each instance has its own configuration,
# state directory and watch directory, and shares $CONF's regions.
#
#   inst NAME [key=value ...]   make instance NAME: $T/i-NAME.conf, state
#                               $T/i-NAME/state, watch $T/i-NAME/watch;
#                               extra [daemon] keys, or region keys with
#                               region.KEY=VALUE (set in every region)
#   icks NAME args...           the CLI as instance NAME
#   idaemon NAME                start ckptsyncd as NAME (pid in IPID[NAME])
#   ikill NAME                  kill -9 it
#   istop NAME                  SIGTERM it and wait for it
# ikill and istop signal IPID[NAME] alone, so it must be the daemon's own
# pid: a daemon started another way (a shifted clock) is started as
# `"$CKPTSYNCD" ... &` with libfaketime by LD_PRELOAD, never under the
# faketime program, which forks (its pid is not the daemon's, and the
# daemon outlives istop: test-multinode-life.sh, n1s).
#   barrier_wait FILE           spin until FILE exists (start together)
#   job_nodes N                 instances n0 .. n(N-1) of run "job" on N nodes
#                               (settle 3600: each ingests on commit), their
#                               daemons started, and x (no daemon) to read
#   nodedir K UNIT              node K's directory of unit job/UNIT
#   node_commit K UNIT STEP     node K commits it as its part of STEP,
#                               --wait replicated (the answer: $T/commit-K.json)
#   repo_ids                    the repo id each region holds, one per line
#   fresh_restore NAME RUN ID DIR   restore ID on a brand-new state, into DIR

declare -gA IPID=()

inst() {
  local name=$1; shift
  local conf="$T/i-$name.conf" kv k v
  mkdir -p "$T/i-$name/watch"
  sed -e "s|^state = .*|state = $T/i-$name/state|" -e "s|^watch = .*|watch = $T/i-$name/watch|" \
    "$CONF" > "$conf"
  for kv in "$@"; do
    k=${kv%%=*}; v=${kv#*=}
    case $k in
      region.*) sed -i "/^\[region\./a ${k#region.} = $v" "$conf" ;;
      *) sed -i "/^\[daemon\]/a $k = $v" "$conf" ;;
    esac
  done
}

icks() { local name=$1; shift; "$CKPTSYNC" --config "$T/i-$name.conf" "$@"; }

idaemon() {
  local name=$1
  "$CKPTSYNCD" --config "$T/i-$name.conf" >> "$T/i-$name/daemon.log" 2>&1 &
  IPID[$name]=$!
  for _ in $(seq 1 100); do
    daemon_answers icks "$name" && return 0
    kill -0 "${IPID[$name]}" 2>/dev/null || { tail -20 "$T/i-$name/daemon.log" >&2; die "ckptsyncd $name exited"; }
    sleep 0.1
  done
  die "ckptsyncd $name did not answer"
}

# (a daemon bash already reaped, in some other `wait`, is fine: nothing to kill)
ikill() {
  if [ -n "${IPID[$1]:-}" ]; then kill -9 "${IPID[$1]}" 2>/dev/null || true; fi
  wait "${IPID[$1]:-}" 2>/dev/null || true
  IPID[$1]=
}

istop() {
  [ -n "${IPID[$1]:-}" ] || return 0
  kill -TERM "${IPID[$1]}" 2>/dev/null || true
  wait "${IPID[$1]}" 2>/dev/null || true
  IPID[$1]=
}

_multi_cleanup() { local n; for n in "${!IPID[@]}"; do ikill "$n"; done; }
CKS_CLEANUP_HOOKS+=(_multi_cleanup)

barrier_wait() { while [ ! -e "$1" ]; do sleep 0.002; done; }

job_nodes() {
  local k
  for ((k = 0; k < $1; k++)); do inst "n$k" nodes="$1" node_rank=$k settle=3600; done
  inst x
  for ((k = 0; k < $1; k++)); do idaemon "n$k"; done
}
nodedir() { echo "$T/i-n$1/watch/job/$2"; }
node_commit() {
  icks "n$1" commit "$(nodedir "$1" "$2")" --step "$3" --wait replicated --timeout 120 --json \
    > "$T/commit-$1.json" ||
    { tail -20 "$T/i-n$1/daemon.log" >&2; die "node $1: commit job/$2 --wait replicated failed"; }
}

# merged STEP: waits (deadline 60 s) until every dir region under $D holds
# the merged snapshot of job's STEP (its manifest's text, so not for an
# encrypted repository); prints its id
merged() {
  local deadline=$((SECONDS + 60)) rg m id
  while :; do
    id=
    m=$(grep -lx "step $1" "$D"/a/snapshots/job/* 2> /dev/null | sed -n 1p) && id=$(basename "$m")
    if [ -n "$id" ]; then
      for rg in b c; do [ -f "$D/$rg/snapshots/job/$id" ] || id=; done
    fi
    [ -n "$id" ] && { echo "$id"; return 0; }
    [ $SECONDS -lt $deadline ] || { tail -20 "$T"/i-n*/daemon.log >&2; die "step $1 was not merged"; }
    sleep 0.2
  done
}

# The id in each region's repo object ("none" where it has none).
repo_ids() {
  "$CKPTSYNC" --config "$CONF" repo --json > "$T/repo.json" 2> /dev/null || true
  python3 -c 'import json,sys
for r in json.load(open(sys.argv[1])): print(r["id"] or "none")' "$T/repo.json"
}

fresh_restore() {
  local name=$1 run=$2 id=$3 dir=$4
  rm -rf "$T/i-$name/state"
  icks "$name" restore --run "$run" --snapshot "$id" --to "$dir" -q
}

RK=${CKS_REGIONS:-dir}

# ---- the regions, looked at and tampered with from outside ----------------
# (as a person or a lifecycle rule would: find/cp on dir regions, the AWS CLI
# on s3rver and Ceph; keys relative to the region, both S3 prefixes team1)
#   rg_keys R PREFIX, rg_has R KEY, rg_rm R KEY, rg_rmtree R PREFIX,
#   rg_wipe R, rg_get R KEY FILE, rg_put R FILE KEY, flip_byte FILE
rg_bucket() { if [ "$RK" = s3 ]; then echo "$S3_BUCKET"; else echo "ckpt-$1"; fi; }
rg_url() { echo "s3://$(rg_bucket "$1")/team1"; }   # both prefixes are team1
rg_aws() { local r=$1; shift; if [ "$RK" = s3 ]; then aws_s3 "$r" "$@"; else aws_ceph "$@"; fi; }
# rg_keys R PREFIX: the keys (relative to the region) under PREFIX, sorted.
# In a dir region a name starting with '.' is no key: it is a put's temp
# file (".<name>.tmp.<pid>.<random>", base/fileio.c), which a writer killed
# -9 leaves behind, and the region's own list() skips it as these do.
rg_keys() {
  if [ "$RK" = dir ]; then
    [ -e "$T/regions/$1/$2" ] || return 0
    (cd "$T/regions/$1" && find "./$2" -type f ! -name '.*' | sed 's|^\./||' | sort)
  else
    { rg_aws "$1" s3 ls "$(rg_url "$1")/$2" --recursive 2> /dev/null || true; } |
      awk '{print $4}' | sed 's|^team1/||' | sort
  fi
}
rg_has() {
  if [ "$RK" = dir ]; then [ -f "$T/regions/$1/$2" ]
  else rg_aws "$1" s3api head-object --bucket "$(rg_bucket "$1")" --key "team1/$2" > /dev/null 2>&1; fi
}
rg_rm() {
  if [ "$RK" = dir ]; then rm -f "$T/regions/$1/$2"
  else rg_aws "$1" s3 rm "$(rg_url "$1")/$2" --only-show-errors; fi
}
# rg_wipe R: every object of region R (a dir region keeps its directory).
rg_wipe() {
  if [ "$RK" = dir ]; then find "$T/regions/$1" -mindepth 1 -delete
  else rg_aws "$1" s3 rm "$(rg_url "$1")/" --recursive --only-show-errors; fi
}
rg_get() {
  if [ "$RK" = dir ]; then cp "$T/regions/$1/$2" "$3"
  else rg_aws "$1" s3 cp "$(rg_url "$1")/$2" "$3" --only-show-errors; fi
}
rg_put() {
  if [ "$RK" = dir ]; then cat "$2" > "$T/regions/$1/$3"   # in place, as damage would be
  else rg_aws "$1" s3 cp "$2" "$(rg_url "$1")/$3" --only-show-errors; fi
}
# flip_byte FILE: one byte in the middle changed (xor 1).
flip_byte() {
  python3 - "$1" <<'PY'
import sys
p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 1; open(p, "wb").write(b)
PY
}
# rg_rmtree R PREFIX: removes every object under PREFIX.
rg_rmtree() {
  if [ "$RK" = dir ]; then rm -rf "${T:?}/regions/$1/$2"
  else rg_aws "$1" s3 rm "$(rg_url "$1")/$2" --recursive --only-show-errors; fi
}

# dcp_meta FILE N: a DCP .metadata (pickled as DCP writes it; read at
# commit, docs/multinode.md "Coverage") naming __0_0.distcp .. __N-1_0.distcp.
dcp_meta() {
  local k specs=()
  for ((k = 0; k < $2; k++)); do specs+=("__${k}_0.distcp:0:1"); done
  python3 "$CKS_SOURCE_DIR/tests/integration/dcpmeta.py" "$1" "${specs[@]}" ||
    die "writing a DCP .metadata at $1"
}
