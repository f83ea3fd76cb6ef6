#!/usr/bin/env bash
# Randomized trials of a job on four nodes, with kill -9 of a node or of a
# region server at a random moment (tests/integration/mnrand.sh says what
# a trial does and checks).  Invariants, checked from a fresh instance
# after each trial: no false commit (every committed step restores with
# every node's files, bit for bit), no torn restore (restore --latest is
# one whole step, also while the victim is down), the previous committed
# step always restorable, a step retried after its node returns committed
# once per region (one commit record, one snapshot).  CI runs a few
# trials (CKS_MN_TRIALS, default 3 here: 35-50 s on two loaded cores with
# the sanitizers); tests/soak/multinode-soak.sh runs
# many on more nodes.  The seed is printed: CKS_SEED=... replays the
# choices.  Regions: three s3rver servers (a region server is a victim too).
. "$(dirname "$0")/lib.sh"
CKS_REGIONS=s3
: "${CKS_MN_TRIALS:=3}"
write_config 16K 64K 256K
. "$CKS_SOURCE_DIR/tests/integration/mnrand.sh"
mn_run
echo "ok"
