# cephlib.sh — a real S3 implementation for the integration tests: Ceph
# RGW (Debian 12's Ceph 16.2) on loopback (sourced after lib.sh, not run).
#
# One cluster per test, under $T/ceph (tests/ceph/ceph.sh: one mon, one
# osd, no mgr; about 2 s to start): three radosgw processes on the one
# cluster, one per region a b c, each on its own loopback port, so that a
# region's server can be stopped or killed alone (kill_ceph_region) while
# the others serve on; buckets ckpt-a ckpt-b ckpt-c, one per region, same
# prefix team1; one S3 user with a random key pair.
#
#   start_ceph                          (write_config_ceph calls it)
#   write_config_ceph [min avg max] [path|virtual] [signed|unsigned]
#   aws_ceph args...                    e.g. aws_ceph s3 ls s3://ckpt-a/team1/ --recursive
#   ceph_url R                          http://127.0.0.1:PORT of region R's gateway
#   stop_ceph_region R | kill_ceph_region R | restart_ceph_region R
#                                       region R's radosgw: SIGTERM / SIGKILL /
#                                       start again (same port, same data)
#   stop_ceph                           the whole cluster (radosgw, osd, mon)
# The cluster still running at exit is stopped by lib.sh's cleanup.
# Without Ceph installed, or when it cannot start, the test is skipped
# (exit 77) with the reason; CKS_CEPH_REQUIRED=1 makes "cannot start" (but
# not "not installed") a failure.
[ -z "${CKS_CEPHLIB:-}" ] || return 0
CKS_CEPHLIB=1

CKS_CEPH_SH="$CKS_SOURCE_DIR/tests/ceph/ceph.sh"
CEPH_DIR="$T/ceph"
CEPH_PREFIX=team1
CEPH_S3_REGION=us-east-1
CEPH_CREDENTIALS="$T/credentials"
CEPH_AWS_CONFIG="$T/aws-config"
declare -gA CEPH_BUCKET=([a]=ckpt-a [b]=ckpt-b [c]=ckpt-c) CEPH_GATEWAY=([a]=0 [b]=1 [c]=2)
CEPH_PORTS=()
CEPH_STARTED=
if [ -z "${CEPH_AWS:-}" ]; then   # Debian's awscli 2.9 first (see s3lib.sh)
  if [ -x /usr/bin/aws ]; then CEPH_AWS=/usr/bin/aws; else CEPH_AWS=$(command -v aws || true); fi
fi

_ceph_env() {
  # shellcheck disable=SC1091
  . "$CEPH_DIR/env"
  read -r -a CEPH_PORTS <<< "$CEPH_RGW_PORTS"
}

start_ceph() {
  [ -z "$CEPH_STARTED" ] || return 0
  local rc=0
  "$CKS_CEPH_SH" start "$CEPH_DIR" --gateways 3 "${CEPH_BUCKET[a]}" "${CEPH_BUCKET[b]}" \
    "${CEPH_BUCKET[c]}" > "$T/ceph-start.log" 2>&1 || rc=$?
  CEPH_STARTED=1   # from here on cleanup stops what runs
  if [ $rc -ne 0 ]; then
    local why
    why=$(grep -A20 'cannot start:' "$T/ceph-start.log" | sed 's/^ceph.sh: cannot start: //') ||
      why=$(tail -20 "$T/ceph-start.log")
    if [ $rc -eq 77 ] && { [ "${CKS_CEPH_REQUIRED:-0}" != 1 ] || ! "$CKS_CEPH_SH" check 2> /dev/null; }; then
      skip "Ceph cannot start: $why"
    fi
    die "Ceph did not start (exit $rc): $why"
  fi
  _ceph_env
  echo "ceph: mon :$CEPH_MON_PORT, radosgw :${CEPH_PORTS[*]}, up in ${CEPH_START_SECONDS} s"
}

_ceph_cleanup() {
  [ -n "$CEPH_STARTED" ] && [ -s "$CEPH_DIR/env" ] || return 0
  "$CKS_CEPH_SH" stop "$CEPH_DIR" 2> /dev/null || "$CKS_CEPH_SH" kill "$CEPH_DIR" 2> /dev/null || true
}
CKS_CLEANUP_HOOKS+=(_ceph_cleanup)

_ceph_region() { [ -n "${CEPH_GATEWAY[$1]:-}" ] || die "no ceph region '$1' (a b c)"; }
ceph_url() { _ceph_region "$1"; echo "http://127.0.0.1:${CEPH_PORTS[${CEPH_GATEWAY[$1]}]:?ceph not started}"; }

stop_ceph_region() { _ceph_region "$1"; "$CKS_CEPH_SH" stop-rgw "$CEPH_DIR" "${CEPH_GATEWAY[$1]}" || die "stop radosgw of region $1"; _ceph_env; }
kill_ceph_region() { _ceph_region "$1"; "$CKS_CEPH_SH" kill-rgw "$CEPH_DIR" "${CEPH_GATEWAY[$1]}" || die "kill radosgw of region $1"; _ceph_env; }
restart_ceph_region() {
  _ceph_region "$1"
  "$CKS_CEPH_SH" stop-rgw "$CEPH_DIR" "${CEPH_GATEWAY[$1]}" || true
  "$CKS_CEPH_SH" start-rgw "$CEPH_DIR" "${CEPH_GATEWAY[$1]}" > "$T/ceph-rgw.log" 2>&1 ||
    { cat "$T/ceph-rgw.log" >&2; die "radosgw of region $1 did not start again"; }
  _ceph_env
}
stop_ceph() { "$CKS_CEPH_SH" stop "$CEPH_DIR" || die "ceph did not stop cleanly"; }

# write_ceph_credentials [FILE]: the AWS CLI's INI format, mode 0600, with
# $CEPH_ACCESS_KEY / $CEPH_SECRET_KEY (CEPH_SECRET_KEY=wrong write_ceph_credentials F).
write_ceph_credentials() { write_credentials "${1:-$CEPH_CREDENTIALS}" "$CEPH_ACCESS_KEY" "$CEPH_SECRET_KEY"; }

# write_config_ceph [min avg max] [path|virtual] [signed|unsigned]: like
# write_config (and write_config_s3), with three s3 regions a b c, one per
# gateway and bucket.  Virtual-hosted addressing uses the endpoint
# http://localhost:PORT, so requests go to ckpt-a.localhost:PORT (libcurl
# resolves *.localhost to loopback itself; "rgw dns name = localhost" makes
# radosgw take the bucket from such a Host).
write_config_ceph() {
  local min=${1:-256K} avg=${2:-1M} max=${3:-4M} addressing=${4:-path} payload=${5:-signed}
  local r host
  case $addressing in path) host=127.0.0.1 ;; virtual) host=localhost ;;
    *) die "write_config_ceph: addressing '$addressing'" ;; esac
  case $payload in signed|unsigned) ;; *) die "write_config_ceph: payload '$payload'" ;; esac
  start_ceph
  mkdir -p "$T/watch"
  write_ceph_credentials "$CEPH_CREDENTIALS"
  {
    config_head "$min" "$avg" "$max"
    for r in a b c; do
      cat <<EOF2
[region.$r]
kind = s3
endpoint = http://$host:${CEPH_PORTS[${CEPH_GATEWAY[$r]}]}
bucket = ${CEPH_BUCKET[$r]}
prefix = $CEPH_PREFIX
region = $CEPH_S3_REGION
addressing = $addressing
payload = $payload
credentials = $CEPH_CREDENTIALS
EOF2
    done
  } > "$CONF"
}

# aws_ceph args...: the AWS CLI against gateway 0 (every gateway serves
# every bucket), with the cluster's key pair (another for one call:
# CEPH_SECRET_KEY=wrong aws_ceph ...), none of the caller's AWS settings,
# and its own config file $CEPH_AWS_CONFIG.
aws_ceph() {
  [ -n "$CEPH_AWS" ] || skip "the AWS CLI is not installed (Debian package awscli)"
  [ -n "${CEPH_PORTS[0]:-}" ] || die "aws_ceph: ceph not started"
  [ -e "$CEPH_AWS_CONFIG" ] || : > "$CEPH_AWS_CONFIG"
  env -u AWS_PROFILE -u AWS_SESSION_TOKEN -u AWS_ENDPOINT_URL -u AWS_CA_BUNDLE \
    AWS_ACCESS_KEY_ID="$CEPH_ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$CEPH_SECRET_KEY" \
    AWS_DEFAULT_REGION="$CEPH_S3_REGION" AWS_CONFIG_FILE="$CEPH_AWS_CONFIG" \
    AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true AWS_PAGER= \
    "$CEPH_AWS" --endpoint-url "http://127.0.0.1:${CEPH_PORTS[0]}" --no-cli-pager "$@"
}
