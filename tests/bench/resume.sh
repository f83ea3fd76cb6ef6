#!/usr/bin/env bash
# resume.sh — time to resume: restore a checkpoint from three S3 regions
# (the s3rver test servers) with ckptsync, against `aws s3 cp --recursive`
# and `rclone copy` of the same bytes from one region, in the same run.
#
#   tests/bench/resume.sh [MIB] [BUILD_DIR]       default 2048 MiB, build/
#
# The checkpoint is MIB of incompressible tensors in 4 shards.  The plain
# files are uploaded once as ordinary objects (for aws and rclone);
# ckptsync snapshots them into its three regions.  Each restore starts from
# an empty directory and (for ckptsync) an empty index, as on a fresh
# instance, and is checked with cmp.  Not a test: it never fails on time.
# The servers and the clients share this machine's cores.
set -euo pipefail
mib=${1:-2048}
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$top/build}
export CKPTSYNC=$build/ckptsync CKPTSYNCD=$build/ckptsyncd CKS_SOURCE_DIR=$top
[ -x "$CKPTSYNC" ] || { echo "build first: deploy/build.sh" >&2; exit 1; }
"$top/tests/s3/setup.sh" > /dev/null
. "$top/tests/integration/lib.sh"
. "$top/tests/integration/s3lib.sh"
command -v rclone > /dev/null || apt-get install -y -qq rclone > /dev/null 2>&1 || true
write_config_s3 512K 2M 8M
ck="$T/data/checkpoint-1000"
for i in 1 2 3 4; do make_file "$ck/model-0000$i-of-00004.safetensors" $((mib / 4)); done
echo '{"global_step": 1000}' > "$ck/trainer_state.json"
cks snapshot "$ck" --run r1 --step 1000 -q
aws_s3 a s3 cp --recursive --only-show-errors "$ck" s3://ckpt/plain/checkpoint-1000/
drop() { sync; echo 3 > /proc/sys/vm/drop_caches 2> /dev/null || true; }
timeit() { local t0; t0=$(date +%s.%N); "$@"; python3 -c "import time; print('%.2f' % (time.time() - $t0))"; }
same() { for f in "$ck"/*; do cmp -s "$f" "$1/$(basename "$f")" || { echo "MISMATCH $f" >&2; exit 1; }; done; }

drop; rm -rf "$STATE" "$T/r1"
t_cks=$(timeit cks restore --run r1 --latest --to "$T/r1" -q); same "$T/r1/checkpoint-1000"
drop
t_aws=$(timeit aws_s3 a s3 cp --recursive --only-show-errors s3://ckpt/plain/checkpoint-1000/ "$T/aws/"); same "$T/aws"
t_rcl=-
if command -v rclone > /dev/null; then
  drop
  rcl() (  # a subshell: AWS_CA_BUNDLE in the environment breaks rclone's plain-http transport
    unset AWS_CA_BUNDLE
    export RCLONE_CONFIG_S3A_TYPE=s3 RCLONE_CONFIG_S3A_PROVIDER=Other \
           RCLONE_CONFIG_S3A_ENDPOINT="$(s3_url a)" RCLONE_CONFIG_S3A_ACCESS_KEY_ID=$S3_ACCESS_KEY \
           RCLONE_CONFIG_S3A_SECRET_ACCESS_KEY=$S3_SECRET_KEY
    rclone copy --transfers 16 s3a:ckpt/plain/checkpoint-1000 "$T/rclone" 2> "$T/rclone.log"
  )
  t_rcl=$(timeit rcl)
  same "$T/rclone"
fi
mb() { python3 -c "print('%.0f' % ($mib * 1.048576 / $1))"; }
echo "data: $mib MiB in 4 shards; $(nproc) cores; three s3rver regions on loopback"
printf '%-34s %8s %8s %10s\n' tool seconds MB/s "x ckptsync"
printf '%-34s %8s %8s %10s\n' "ckptsync restore (3 regions)" "$t_cks" "$(mb "$t_cks")" 1.00
printf '%-34s %8s %8s %10s\n' "aws s3 cp --recursive (1 region)" "$t_aws" "$(mb "$t_aws")" \
  "$(python3 -c "print('%.2f' % ($t_aws / $t_cks))")"
[ "$t_rcl" = - ] || printf '%-34s %8s %8s %10s\n' "rclone copy (1 region)" "$t_rcl" "$(mb "$t_rcl")" \
  "$(python3 -c "print('%.2f' % ($t_rcl / $t_cks))")"
