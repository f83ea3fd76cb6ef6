#!/usr/bin/env bash
# preempt-watch.sh — watch the cloud's preemption notice; when it comes, hand
# the checkpoints off with `ckptsync migrate-out` before the instance goes.
#
# Polls one metadata URL every --interval seconds (default 2):
#
#   aws      http://169.254.169.254/latest/meta-data/spot/instance-action
#            IMDSv2: a token from PUT /latest/api/token first, then GETs with
#            the token header.  404 = no notice; 200 with
#            {"action":"terminate","time":"2026-12-01T01:02:03Z"} = notice
#            (also "stop" and "hibernate").  AWS gives two minutes.
#   gcp      http://metadata.google.internal/computeMetadata/v1/instance/preempted
#            with "Metadata-Flavor: Google"; body TRUE = preempted.  GCP gives
#            30 seconds.
#   generic  any URL (--url); an HTTP 200 answer means "preempted".
#
# On a notice it runs, exactly once,
#     ckptsync [--config FILE] migrate-out --deadline D [--run NAME]
# which commits what is pending, waits until the newest snapshot of each run
# is durable and writes the handoff record; the watcher logs the outcome and
# exits with migrate-out's status.  D is --deadline, else the AWS notice's
# time minus --margin (at least 5 s), else 25 s.
#
# It sends traffic to the metadata URL only (no proxy, no redirects).  Logs
# go to stderr (the journal under systemd: deploy/ckptsync-preempt.service).
#
# Run it:   deploy/preempt-watch.sh --provider aws
#           deploy/preempt-watch.sh --provider gcp --run r1
# Tested by tests/integration/test-preempt.sh against a fake metadata server.
set -euo pipefail

PROG=ckptsync-preempt
AWS_URL=http://169.254.169.254/latest/meta-data/spot/instance-action
AWS_PATH=/latest/meta-data/spot/instance-action
GCP_URL=http://metadata.google.internal/computeMetadata/v1/instance/preempted
GCP_PATH=/computeMetadata/v1/instance/preempted
AWS_NOTICE_S=120        # an AWS spot notice comes two minutes ahead
TOKEN_TTL=21600         # IMDSv2 token lifetime asked for, seconds
MIN_DEADLINE=5

usage() {
  cat <<EOF
usage: preempt-watch.sh [--provider aws|gcp|generic] [--url URL] [--interval S]
                        [--deadline S] [--margin S] [--run NAME] [--config FILE]
                        [--exec CMD] [--once]

Watches the instance metadata for a preemption notice; on one, runs
\`ckptsync migrate-out --deadline D [--run NAME]\` exactly once and exits with
its status.

  --provider P    aws (default), gcp or generic
  --url URL       the URL to poll.  aws/gcp: a URL without a path gets the
                  provider's path (so http://127.0.0.1:8080 works for a test
                  server); generic: required, a 200 answer means preempted
  --interval S    seconds between polls (default 2; fractions allowed)
  --deadline S    migrate-out's deadline in whole seconds (default: the AWS
                  notice's time minus --margin, at least $MIN_DEADLINE; else 25)
  --margin S      seconds kept in hand before the AWS termination time
                  (default 15)
  --run NAME      hand off this run only (default: every run)
  --config FILE   passed to ckptsync as --config FILE
  --exec CMD      the command to run instead of \`ckptsync migrate-out\`;
                  split on spaces, --deadline D [--run NAME] are appended
  --once          for tests and one-shot use: a URL that cannot be reached
                  or gives an unexpected answer is an error (exit 3) instead
                  of being logged and retried
  -h, --help      this text

Environment: CKPTSYNC names the ckptsync binary (default: ckptsync in PATH).

Exit status: migrate-out's status after a notice (0 = handed off, durable;
7 = a node of a job on several nodes: its part durable, the step not
committed, no handoff);
0 when stopped by SIGTERM/SIGINT before any notice; 2 usage error; 3 with
--once, the metadata URL failed.
EOF
}

log() { printf '%s %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$PROG" "$*" >&2; }
usage_error() { echo "$PROG: $*" >&2; echo "try: preempt-watch.sh --help" >&2; exit 2; }

# ---- options -----------------------------------------------------------------
provider=aws url='' interval=2 deadline='' margin=15 run='' config='' exec_cmd='' once=0
need_value() { [ "$#" -ge 2 ] || usage_error "$1 needs a value"; }
while [ "$#" -gt 0 ]; do
  case $1 in
    --*=*) opt=${1%%=*}; val=${1#*=}; shift; set -- "$opt" "$val" "$@"; continue;;
  esac
  case $1 in
    --provider) need_value "$@"; provider=$2; shift 2;;
    --url) need_value "$@"; url=$2; shift 2;;
    --interval) need_value "$@"; interval=$2; shift 2;;
    --deadline) need_value "$@"; deadline=$2; shift 2;;
    --margin) need_value "$@"; margin=$2; shift 2;;
    --run) need_value "$@"; run=$2; shift 2;;
    --config) need_value "$@"; config=$2; shift 2;;
    --exec) need_value "$@"; exec_cmd=$2; shift 2;;
    --once) once=1; shift;;
    -h|--help) usage; exit 0;;
    *) usage_error "unknown argument '$1'";;
  esac
done

case $provider in aws|gcp|generic) ;; *) usage_error "--provider must be aws, gcp or generic, not '$provider'";; esac
if [[ ! $interval =~ ^([0-9]+(\.[0-9]*)?|\.[0-9]+)$ ]] || [[ $interval =~ ^[0.]*$ ]]; then
  usage_error "--interval must be a positive number of seconds, not '$interval'"
fi
[ -z "$deadline" ] || { [[ $deadline =~ ^[0-9]+$ ]] && [ "$deadline" -ge 1 ]; } \
  || usage_error "--deadline must be a whole number of seconds >= 1, not '$deadline'"
[[ $margin =~ ^[0-9]+$ ]] || usage_error "--margin must be a whole number of seconds, not '$margin'"
[ -z "$run" ] || [[ $run =~ ^[^/[:space:][:cntrl:]]+$ ]] || usage_error "--run: '$run' is not a run name"
if [ -z "$url" ]; then
  case $provider in
    aws) url=$AWS_URL;; gcp) url=$GCP_URL;;
    generic) usage_error "--provider generic needs --url";;
  esac
fi
[[ $url =~ ^https?://[^/[:space:]]+(/[^[:space:]]*)?$ ]] || usage_error "--url '$url' is not an http:// or https:// URL"
origin=$(printf '%s' "$url" | sed -E 's#^(https?://[^/]+).*#\1#')
if [ "$url" = "$origin" ] || [ "$url" = "$origin/" ]; then
  case $provider in aws) url=$origin$AWS_PATH;; gcp) url=$origin$GCP_PATH;; esac
fi

# The command run on a notice.
if [ -n "$exec_cmd" ]; then
  read -r -a cmd <<< "$exec_cmd"
  [ "${#cmd[@]}" -gt 0 ] || usage_error "--exec is empty"
else
  cmd=("${CKPTSYNC:-ckptsync}")
  [ -z "$config" ] || cmd+=(--config "$config")
  cmd+=(migrate-out)
fi
[ -z "$config" ] || [ -z "$exec_cmd" ] || usage_error "--config applies to the default command only; put it in --exec"
command -v "${cmd[0]}" > /dev/null \
  || usage_error "'${cmd[0]}' not found (install ckptsync, set CKPTSYNC, or use --exec)"
command -v curl > /dev/null || { log "curl is not installed (apt-get install curl)"; exit 2; }

# ---- HTTP --------------------------------------------------------------------
body_file=$(mktemp "${TMPDIR:-/tmp}/ckptsync-preempt.XXXXXX")
trap 'rm -f "$body_file"' EXIT

# http METHOD URL [header...]: sets $code (000 when unreachable) and $body.
# Only the given URL is contacted: no proxy (whatever the environment says),
# no redirects, http/https only.
http() {
  local method=$1 u=$2 h args=()
  shift 2
  for h in "$@"; do args+=(-H "$h"); done
  : > "$body_file"
  curl_rc=0
  code=$(curl -sS --noproxy '*' --proto =http,https --max-redirs 0 \
              --connect-timeout 2 --max-time 5 -X "$method" "${args[@]}" \
              -o "$body_file" -w '%{http_code}' "$u" 2> "$body_file.err") || curl_rc=$?
  [ -n "$code" ] || code=000
  body=$(head -c 4096 "$body_file" | tr -d '\r')
  curl_err=$(head -c 300 "$body_file.err" 2> /dev/null | tr '\n' ' ')
  rm -f "$body_file.err"
}

token='' token_time=0 imds_v1=0
# aws_token: an IMDSv2 token, fetched again well before it expires.  Returns
# 1 when the metadata service cannot be reached.
aws_token() {
  local now
  now=$(date +%s)
  [ "$imds_v1" = 1 ] && return 0
  [ -n "$token" ] && [ $((now - token_time)) -lt $((TOKEN_TTL - 300)) ] && return 0
  http PUT "$origin/latest/api/token" "X-aws-ec2-metadata-token-ttl-seconds: $TOKEN_TTL"
  case $code in
    200) token=$body token_time=$now;;
    403|404|405) imds_v1=1; token=
                 log "IMDSv2 token refused (HTTP $code at $origin/latest/api/token); using IMDSv1 GETs";;
    *) why="token request $origin/latest/api/token: HTTP $code ${curl_err}"
       # A PUT that times out while GETs would work: the token's reply is
       # dropped after one network hop (a container on the instance).
       [ "$curl_rc" = 28 ] && why="$why(in a container, IMDSv2 needs a hop limit of 2)"
       return 1;;
  esac
}

# poll: 0 = notice (details in $notice), 1 = no notice, 2 = failure ($why).
poll() {
  why='' notice=''
  case $provider in
    aws)
      aws_token || return 2
      if [ -n "$token" ]; then http GET "$url" "X-aws-ec2-metadata-token: $token"; else http GET "$url"; fi
      case $code in
        200) notice=$body; return 0;;
        404) return 1;;
        401) token=; why="HTTP 401 (token expired); a new token is fetched"; return 2;;
      esac;;
    gcp)
      http GET "$url" "Metadata-Flavor: Google"
      if [ "$code" = 200 ]; then
        case $(printf '%s' "$body" | tr -d '[:space:]') in
          TRUE) notice=TRUE; return 0;;
          FALSE) return 1;;
        esac
        why="HTTP 200 with unexpected body '$(printf '%.60s' "$body")'"; return 2
      fi;;
    generic)
      http GET "$url"
      case $code in
        200) notice="HTTP 200"; return 0;;
        000) ;;
        *) return 1;;
      esac;;
  esac
  [ -n "$why" ] || why="HTTP $code ${curl_err}"
  return 2
}

# The deadline for migrate-out, from the option or the notice.
pick_deadline() {
  if [ -n "$deadline" ]; then echo "$deadline"; return; fi
  if [ "$provider" != aws ]; then echo 25; return; fi
  local t epoch now d
  t=$(printf '%s' "$notice" | sed -n 's/.*"time"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
  if [ -z "$t" ] || ! epoch=$(date -u -d "$t" +%s 2> /dev/null); then
    log "notice has no readable time; assuming AWS's two minutes from now"
    echo $((AWS_NOTICE_S - margin > MIN_DEADLINE ? AWS_NOTICE_S - margin : MIN_DEADLINE)); return
  fi
  now=$(date +%s)
  d=$((epoch - now - margin))
  if [ "$d" -gt "$AWS_NOTICE_S" ]; then
    log "termination time $t is $((epoch - now)) s away (clock skew?); using ${AWS_NOTICE_S} s"
    d=$AWS_NOTICE_S
  fi
  if [ "$d" -lt "$MIN_DEADLINE" ]; then
    log "termination time $t leaves $((epoch - now)) s; trying for $MIN_DEADLINE s anyway"
    d=$MIN_DEADLINE
  fi
  echo "$d"
}

# ---- the watch loop ----------------------------------------------------------
stop=0
trap 'stop=1' TERM INT
log "watching $url ($provider, every ${interval} s${run:+, run $run}); on a notice: ${cmd[*]}"
fails=0
while :; do
  [ "$stop" = 0 ] || { log "stopped before any notice"; exit 0; }
  rc=0; poll || rc=$?
  [ "$rc" = 0 ] && break
  if [ "$rc" = 2 ]; then
    fails=$((fails + 1))
    if [ "$once" = 1 ]; then log "cannot read $url: $why"; exit 3; fi
    # The first failure, then one line a minute or so: the notice may still come.
    [ "$fails" = 1 ] || [ $((fails % 30)) = 0 ] && log "cannot read $url ($fails failed polls): $why"
  elif [ "$fails" -gt 0 ]; then
    log "$url answers again"; fails=0
  fi
  sleep "$interval" & wait $! || true
done

# ---- the notice ----------------------------------------------------------------
d=$(pick_deadline)
log "preemption notice: $(printf '%.200s' "$notice" | tr '\n' ' ')"
full=("${cmd[@]}" --deadline "$d")
[ -z "$run" ] || full+=(--run "$run")
log "running: ${full[*]}"
# A SIGTERM now (the system shutting down) must not cut the handoff short:
# migrate-out runs to its own deadline; systemd's TimeoutStopSec bounds it.
trap 'log "signal received; letting migrate-out finish (deadline ${d} s)"' TERM INT
start=$(date +%s)
"${full[@]}" &
child=$!
status=0
while :; do
  status=0; wait "$child" || status=$?
  kill -0 "$child" 2> /dev/null || break
done
took=$(( $(date +%s) - start ))
if [ "$status" = 0 ]; then
  log "migrate-out succeeded in ${took} s: the handoff is durable; resume elsewhere with ckptsync migrate-in"
elif [ "$status" = 8 ]; then
  # a node of a job on several nodes (docs/multinode.md "Migration and preemption")
  log "migrate-out (exit 8 after ${took} s): this node's part is durable, but the job's newest step is not committed (other nodes' parts missing, named above): no handoff; the job resumes from its newest committed step"
else
  log "migrate-out FAILED (exit $status after ${took} s): see its messages above for what is and is not safe"
fi
exit "$status"
