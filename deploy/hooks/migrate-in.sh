#!/usr/bin/env bash
# migrate-in.sh — the NEW instance's half of a migration: make sure ckptsyncd
# is installed and running, restore the handed-off checkpoint, and print the
# path to resume from (one line on stdout; everything else goes to stderr).
#
#   ckpt=$(deploy/hooks/migrate-in.sh --run r1)
#   python train.py --resume_from_checkpoint "$ckpt"
#
# Steps:
#   1. ckptsyncd missing from PATH: install it with deploy/install.sh (as
#      root, from this source tree), unless --no-install.
#   2. start ckptsyncd, unless --no-start or it already answers: systemctl
#      enable --now ckptsyncd where systemd runs, else in the background
#      (log in /var/log/ckptsyncd.log or --log FILE).  Started first so
#      that the first checkpoint the resumed job writes is replicated; the
#      daemon ignores restore's staging folder (.ckptsync-restore.*).
#   3. `ckptsync migrate-in --run NAME --to DIR`: restores the snapshot the
#      old instance's handoff names (or the newest), verified, into DIR and
#      prints DIR/<checkpoint>.  It needs no daemon.
#
# A job on several nodes (docs/multinode.md "Migration and preemption"):
# run it on every new node.  The node's identity is read as the daemon
# reads it: --node K --of M, else $CKPTSYNC_NODE_RANK / $CKPTSYNC_NODES,
# else the configuration's [daemon] node_rank / nodes, else Slurm's
# $SLURM_NODEID / $SLURM_NNODES; the job id from --job, else
# $CKPTSYNC_JOB_ID, else $SLURM_JOB_ID.  The first node claims the job's
# new generation, the others join it.
#
# The old instance's half is deploy/hooks/migrate-out.sh (or
# deploy/preempt-watch.sh on a preemption notice).
set -euo pipefail

PROG=migrate-in.sh
top=$(cd "$(dirname "$0")/../.." && pwd)

usage() {
  cat <<EOF
usage: migrate-in.sh [--run NAME] [--to DIR] [--force] [--progressive] [--config FILE]
                     [--no-install] [--no-start] [--log FILE]
                     [--node K --of M] [--allow-reshard] [--job ID]

The new instance's half of a migration: install and start ckptsyncd,
\`ckptsync migrate-in\`, print the path to resume from on stdout.

  --run NAME      the run to bring back (default: the handoff's)
  --to DIR        where to restore (default WATCH/NAME, WATCH being the
                  configured watch root, so that the resumed run's new
                  checkpoints are replicated; required without --run)
  --force         replace DIR/<checkpoint> if it exists already
  --progressive   each file at its final path once whole and verified, by
                  priority (ckptsync migrate-in --progressive); the path is
                  still printed when every file is placed
  --config FILE   the ckptsync configuration (default: ckptsync's own)
  --no-install    fail instead of running deploy/install.sh when ckptsyncd
                  is not installed
  --no-start      do not start ckptsyncd
  --log FILE      ckptsyncd's log when started without systemd
                  (default /var/log/ckptsyncd.log)
  --node K --of M this is node K (0-based) of a job on M nodes (default:
                  \$CKPTSYNC_NODE_RANK / \$CKPTSYNC_NODES, the configuration,
                  then Slurm's \$SLURM_NODEID / \$SLURM_NNODES)
  --allow-reshard restore onto another node count than the step's even
                  where files are bound to a rank
  --job ID        the new job's id (default \$CKPTSYNC_JOB_ID, \$SLURM_JOB_ID)
  -h, --help      this text

Environment: CKPTSYNC and CKPTSYNCD name the binaries (default: in PATH);
CKPTSYNC_NODE_RANK, CKPTSYNC_NODES, SLURM_NODEID, SLURM_NNODES,
CKPTSYNC_JOB_ID, SLURM_JOB_ID as above.

Exit status: 0 restored (the path is on stdout); 1 failure; 2 usage error.
EOF
}

say() { echo "$PROG: $*" >&2; }
die() { say "$*"; exit 1; }
usage_error() { say "$*"; echo "try: $PROG --help" >&2; exit 2; }

run='' to='' force=0 progressive=0 config='' install=1 start=1 log=/var/log/ckptsyncd.log
node='' of='' reshard=0 job=
need_value() { [ "$#" -ge 2 ] || usage_error "$1 needs a value"; }
while [ "$#" -gt 0 ]; do
  case $1 in
    --*=*) opt=${1%%=*}; val=${1#*=}; shift; set -- "$opt" "$val" "$@"; continue;;
  esac
  case $1 in
    --run) need_value "$@"; run=$2; shift 2;;
    --to) need_value "$@"; to=$2; shift 2;;
    --force) force=1; shift;;
    --progressive) progressive=1; shift;;
    --config) need_value "$@"; config=$2; shift 2;;
    --no-install) install=0; shift;;
    --no-start) start=0; shift;;
    --log) need_value "$@"; log=$2; shift 2;;
    --node) need_value "$@"; node=$2; shift 2;;
    --of) need_value "$@"; of=$2; shift 2;;
    --allow-reshard) reshard=1; shift;;
    --job) need_value "$@"; job=$2; shift 2;;
    -h|--help) usage; exit 0;;
    *) usage_error "unknown argument '$1'";;
  esac
done
[ -z "$run" ] || [[ $run =~ ^[^/[:space:][:cntrl:]]+$ ]] || usage_error "--run: '$run' is not a run name"
[ -n "$to" ] || [ -n "$run" ] || usage_error "--to DIR is required without --run"
{ [ -z "$node" ] && [ -z "$of" ]; } || { [[ $node =~ ^(0|[1-9][0-9]*)$ ]] && [[ $of =~ ^[1-9][0-9]*$ ]] && [ "$node" -lt "$of" ]; } ||
  usage_error "--node K --of M go together, K a number below M"
# The node's identity as the daemon reads it (syncd/base/config.c
# config_nodes_env): the environment's CKPTSYNC_* over the configuration
# file; Slurm's only where the file sets no nodes, which `ckptsync
# migrate-in` decides (it reads the same variables the same way).
if [ -z "$of" ] && [ -n "${CKPTSYNC_NODES:-}" ]; then
  of=$CKPTSYNC_NODES node=${CKPTSYNC_NODE_RANK:-0}
  say "node identity from \$CKPTSYNC_NODE_RANK/\$CKPTSYNC_NODES: node $node of $of"
elif [ -z "$of" ] && [ -n "${SLURM_NNODES:-}" ]; then
  say "node identity: \$SLURM_NODEID=${SLURM_NODEID:-} of \$SLURM_NNODES=$SLURM_NNODES, unless the configuration sets [daemon] nodes"
fi

cli=${CKPTSYNC:-ckptsync}
daemon=${CKPTSYNCD:-ckptsyncd}
cks=("$cli")
[ -z "$config" ] || cks+=(--config "$config")

# ---- 1. install ----------------------------------------------------------------
if ! command -v "$cli" > /dev/null || { [ "$start" = 1 ] && ! command -v "$daemon" > /dev/null; }; then
  [ "$install" = 1 ] || die "ckptsync is not installed ('$cli' or '$daemon' not found); run deploy/install.sh"
  [ -x "$top/deploy/install.sh" ] || die "ckptsync is not installed and $top/deploy/install.sh is missing"
  [ "$(id -u)" = 0 ] || die "ckptsync is not installed; deploy/install.sh needs root (sudo $0 ...)"
  say "installing ckptsync ($top/deploy/install.sh)"
  "$top/deploy/install.sh" >&2 || die "deploy/install.sh failed"
  hash -r
  command -v "$cli" > /dev/null || die "'$cli' still not found after deploy/install.sh (is /usr/local/bin in PATH?)"
fi

# ---- the watch root: the default target ------------------------------------------
# What the daemon watches, from the configuration it will run with
# (ckptsyncd --check --json prints it even when the folder does not exist
# yet); /data/cloud_storage when ckptsyncd is not there to ask.
watch_root() {
  local dargs=() out
  [ -z "$config" ] || dargs+=(--config "$config")
  command -v "$daemon" > /dev/null || { echo /data/cloud_storage; return; }
  out=$("$daemon" "${dargs[@]}" --check --json 2> /dev/null) || true
  [ -n "$out" ] || die "ckptsyncd ${dargs[*]} --check --json printed nothing: is the configuration readable?"
  python3 -c 'import json,sys; print(json.loads(sys.argv[1])["watch"])' "$out" 2> /dev/null ||
    printf '%s\n' "$out" | sed -n 's/.*"watch":"\([^"]*\)".*/\1/p'
}
if [ -z "$to" ]; then
  root=$(watch_root)
  [ -n "$root" ] || die "could not read the watch root from ckptsyncd --check --json"
  mkdir -p "$root" || die "cannot create the watch root '$root'"
  to=$root/$run
  say "restoring into the watch root: $to"
fi

# ---- 2. start ckptsyncd --------------------------------------------------------
if [ "$start" = 1 ]; then
  if "${cks[@]}" status > /dev/null 2>&1; then
    say "ckptsyncd already runs"
  elif command -v systemctl > /dev/null && [ -d /run/systemd/system ] && [ -z "$config" ] \
       && systemctl cat ckptsyncd.service > /dev/null 2>&1; then
    say "starting ckptsyncd (systemctl enable --now ckptsyncd)"
    systemctl enable --now ckptsyncd >&2 || die "systemctl enable --now ckptsyncd failed (journalctl -u ckptsyncd)"
  else
    command -v "$daemon" > /dev/null || die "'$daemon' not found; set CKPTSYNCD or run deploy/install.sh"
    dargs=()
    [ -z "$config" ] || dargs+=(--config "$config")
    "$daemon" "${dargs[@]}" --check > /dev/null || die "the configuration does not pass ckptsyncd --check (see above)"
    mkdir -p "$(dirname "$log")"
    setsid "$daemon" "${dargs[@]}" < /dev/null >> "$log" 2>&1 &
    dpid=$!
    say "started ckptsyncd in the background (pid $dpid, log $log)"
  fi
  for _ in $(seq 1 300); do
    "${cks[@]}" status > /dev/null 2>&1 && break
    if [ -n "${dpid:-}" ] && ! kill -0 "$dpid" 2> /dev/null; then
      tail -5 "$log" >&2 || true
      die "ckptsyncd exited at start (log $log)"
    fi
    sleep 0.1
  done
  "${cks[@]}" status > /dev/null 2>&1 || die "ckptsyncd does not answer after 30 s"
fi

# ---- 3. restore ------------------------------------------------------------------
args=(migrate-in --to "$to")
[ -z "$run" ] || args+=(--run "$run")
[ "$force" = 0 ] || args+=(--force)
[ -z "$of" ] || args+=(--node "$node" --of "$of")
[ "$reshard" = 0 ] || args+=(--allow-reshard)
[ -z "$job" ] || args+=(--job "$job")
[ "$progressive" = 0 ] || args+=(--progressive)
say "running: ${cks[*]} ${args[*]}"
out=$("${cks[@]}" "${args[@]}") || die "migrate-in failed (exit $?): nothing to resume from${run:+ for run $run}"
path=$(printf '%s\n' "$out" | tail -n 1)
[ -n "$path" ] && [ -e "$path" ] || die "migrate-in printed '$out', which is not a restored path"
say "resume from $path"
printf '%s\n' "$path"
