#!/usr/bin/env bash
# multinode-soak.sh — randomized trials of a multi-node job for as long as
# you like (not in CI): the trial loop of test-multinode-random.sh
# (tests/integration/mnrand.sh) with more trials and more daemons.
#
#   tests/soak/multinode-soak.sh [TRIALS] [NODES] [BUILD_DIR]
#                                 default 1000, 8, build/ (NODES: 8 to 16)
#   CKS_SEED=N ...                replay a run's choices (printed first)
#   CKS_MN_MAXKIB=K ...           largest file (default 128 KiB)
#   CKS_MN_KILL_MS=MS ...         the victim dies 0 .. MS after the commits
#                                 start (default 700: most steps are still
#                                 uploading then, on a release build)
#
# Each trial: every node writes a step (DCP, Megatron, DeepSpeed or
# Hugging Face layout, random sizes, some files identical on every node),
# commits it, and one victim is killed -9 at a random moment (a node,
# restarted and its commit retried, or one of the three s3rver region
# servers, restarted on the same port and data).  After each: no false
# commit, no torn restore, the previous step restorable, one commit record
# per region (mnrand.sh).  Prints one line per trial and a summary; exits
# non-zero at the first violation (the scratch directory is kept).
# Disk: the three servers keep every step (about NODES x MAXKIB/2 x 3 per
# trial); a node's units stay in its watch root.
set -euo pipefail
trials=${1:-1000}
nodes=${2:-8}
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${3:-$top/build}
[ -x "$build/ckptsync" ] && [ -x "$build/ckptsyncd" ] || { echo "build first: deploy/build.sh" >&2; exit 1; }
[ "$nodes" -ge 2 ] || { echo "NODES must be 2 or more" >&2; exit 2; }
"$top/tests/s3/setup.sh" --quiet > /dev/null
start=$(date +%s)
rc=0
CKPTSYNC=$build/ckptsync CKPTSYNCD=$build/ckptsyncd CKS_SOURCE_DIR=$top \
  CKS_MN_NODES=$nodes CKS_MN_TRIALS=$trials CKS_MN_MAXKIB=${CKS_MN_MAXKIB:-128} \
  CKS_MN_VERIFY=${CKS_MN_VERIFY:-100} CKS_MN_KILL_MS=${CKS_MN_KILL_MS:-700} \
  bash "$top/tests/integration/test-multinode-random.sh" || rc=$?
echo "soak: $trials trials, $nodes nodes, $(( $(date +%s) - start )) s, exit $rc"
exit $rc
