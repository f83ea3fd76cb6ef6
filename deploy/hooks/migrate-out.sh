#!/usr/bin/env bash
# migrate-out.sh — the OLD instance's half of a migration: make the newest
# checkpoint durable, record the handoff, then stop ckptsyncd.
#
# Run it after training has stopped (or saved its last checkpoint), when an
# instance is about to be released or swapped for another GPU type:
#
#   deploy/hooks/migrate-out.sh --run r1 --deadline 90
#
# It runs `ckptsync migrate-out --deadline S [--run NAME] [--quorum N]`,
# which commits everything pending, waits until the newest snapshot of each
# run (or of NAME) is in --quorum regions and writes the handoff record that
# `ckptsync migrate-in` (deploy/hooks/migrate-in.sh) reads on the new
# instance.  Only when that succeeded is ckptsyncd stopped (systemctl stop
# ckptsyncd, or SIGTERM to --pid): if the handoff is not durable yet, the
# daemon keeps uploading for as long as the instance lives, and this hook
# exits 1 saying so.
#
# For a preemption notice use deploy/preempt-watch.sh, which computes the
# deadline from the notice.
set -euo pipefail

PROG=migrate-out.sh

usage() {
  cat <<EOF
usage: migrate-out.sh [--run NAME] [--deadline S] [--quorum N] [--config FILE]
                      [--pid PID | --no-stop] [--stop-anyway]

The old instance's half of a migration: \`ckptsync migrate-out\`, then stop
ckptsyncd.

  --run NAME      hand off this run only (default: every run)
  --deadline S    seconds to wait for durability (default 90)
  --quorum N      regions that must hold the snapshot (default: the
                  configuration's quorum)
  --config FILE   the ckptsync configuration (default: ckptsync's own)
  --pid PID       stop ckptsyncd by sending SIGTERM to PID (default:
                  systemctl stop ckptsyncd)
  --no-stop       leave ckptsyncd running
  --stop-anyway   stop ckptsyncd even when migrate-out failed
  -h, --help      this text

Environment: CKPTSYNC names the ckptsync binary (default: ckptsync in PATH).

Exit status: 0 the handoff is durable and ckptsyncd stopped; 1 migrate-out
failed (its messages say what is and is not safe) or ckptsyncd could not be
stopped; 2 usage error; 8 a node of a job on several nodes: its part is
durable and ckptsyncd stopped, but the job's newest step is not committed
(other nodes' parts missing), so no handoff was written.
EOF
}

say() { echo "$PROG: $*" >&2; }
usage_error() { say "$*"; echo "try: $PROG --help" >&2; exit 2; }

run='' deadline=90 quorum='' config='' pid='' stop=1 stop_anyway=0
need_value() { [ "$#" -ge 2 ] || usage_error "$1 needs a value"; }
while [ "$#" -gt 0 ]; do
  case $1 in
    --*=*) opt=${1%%=*}; val=${1#*=}; shift; set -- "$opt" "$val" "$@"; continue;;
  esac
  case $1 in
    --run) need_value "$@"; run=$2; shift 2;;
    --deadline) need_value "$@"; deadline=$2; shift 2;;
    --quorum) need_value "$@"; quorum=$2; shift 2;;
    --config) need_value "$@"; config=$2; shift 2;;
    --pid) need_value "$@"; pid=$2; shift 2;;
    --no-stop) stop=0; shift;;
    --stop-anyway) stop_anyway=1; shift;;
    -h|--help) usage; exit 0;;
    *) usage_error "unknown argument '$1'";;
  esac
done
[[ $deadline =~ ^[0-9]+$ ]] && [ "$deadline" -ge 1 ] || usage_error "--deadline must be a whole number of seconds >= 1"
[ -z "$quorum" ] || [[ $quorum =~ ^[1-9][0-9]*$ ]] || usage_error "--quorum must be a number >= 1"
[ -z "$pid" ] || [[ $pid =~ ^[1-9][0-9]*$ ]] || usage_error "--pid must be a process id"

cks=("${CKPTSYNC:-ckptsync}")
command -v "${cks[0]}" > /dev/null || { say "'${cks[0]}' not found: install ckptsync (deploy/install.sh) or set CKPTSYNC"; exit 1; }
[ -z "$config" ] || cks+=(--config "$config")

args=(migrate-out --deadline "$deadline")
[ -z "$run" ] || args+=(--run "$run")
[ -z "$quorum" ] || args+=(--quorum "$quorum")
say "running: ${cks[*]} ${args[*]}"
rc=0
"${cks[@]}" "${args[@]}" >&2 || rc=$?
if [ "$rc" = 8 ]; then
  # A node of a job on several nodes (docs/multinode.md "Migration and
  # preemption"): its part is durable, other nodes' parts of its newest
  # step are missing, no handoff was written.  Nothing of this node is left
  # to upload, so ckptsyncd may stop.
  say "this node's part is durable, but the job's newest step is not committed (other nodes' parts missing, see above): no handoff written"
elif [ "$rc" != 0 ]; then
  say "migrate-out FAILED (exit $rc): the handoff is not durable (see above for what is safe)"
  if [ "$stop_anyway" = 0 ]; then
    say "ckptsyncd keeps running so that it can finish uploading; --stop-anyway stops it regardless"
    exit 1
  fi
fi
[ "$rc" != 0 ] || say "handoff durable${run:+ for run $run}"

[ "$stop" = 1 ] || { say "ckptsyncd left running (--no-stop)"; exit "$rc"; }

# ---- stop ckptsyncd ------------------------------------------------------------
if [ -n "$pid" ]; then
  kill -0 "$pid" 2> /dev/null || { say "no process $pid: was ckptsyncd already stopped?"; exit 1; }
  comm=$(cat "/proc/$pid/comm" 2> /dev/null || true)
  [ -z "$comm" ] || [ "$comm" = ckptsyncd ] || { say "process $pid is '$comm', not ckptsyncd: not stopping it"; exit 1; }
  kill -TERM "$pid"
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2> /dev/null || { say "ckptsyncd (pid $pid) stopped"; exit "$rc"; }
    # A zombie child of a caller counts as stopped.
    [ "$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$pid/status" 2> /dev/null)" != Z ] \
      || { say "ckptsyncd (pid $pid) stopped"; exit "$rc"; }
    sleep 0.1
  done
  say "ckptsyncd (pid $pid) did not stop within 30 s of SIGTERM"
  exit 1
fi
if command -v systemctl > /dev/null && [ -d /run/systemd/system ]; then
  if systemctl is-active --quiet ckptsyncd; then
    systemctl stop ckptsyncd || { say "systemctl stop ckptsyncd failed"; exit 1; }
    say "ckptsyncd stopped (systemctl stop ckptsyncd)"
  else
    say "ckptsyncd.service is not active: nothing to stop"
  fi
  exit "$rc"
fi
say "ckptsyncd does not run under systemd here: pass --pid PID to stop it, or --no-stop"
exit 1
