# s3lib.sh — S3-compatible test servers for the integration tests (sourced
# after lib.sh, not run).
#
# Each server is one @20minutes/s3rver process (tests/s3/s3rver.js) on a
# loopback port, with its data under $T/s3-NAME and a bucket "ckpt"; it
# checks SigV4 signatures against the key pair S3RVER / S3RVER.  The AWS
# CLI (aws_s3) is the independent client to look at or tamper with what a
# server holds.  See tests/s3/README.md for what the servers do and don't.
#
#   start_s3 NAME [--tls] [s3rver.js args...]
#                                       start (port picked by the kernel);
#                                       --tls: HTTPS, certificate $S3_TLS_CERT
#   stop_s3 NAME | kill_s3 NAME         SIGTERM / SIGKILL, and reap
#   restart_s3 NAME                     same port, same data, same args
#   write_config_s3 [min avg max] [path|virtual] [signed|unsigned]
#   aws_s3 NAME args...                 e.g. aws_s3 a s3 ls s3://ckpt/team1/ --recursive
#   s3_url NAME                         http://127.0.0.1:PORT (https:// with --tls)
# Servers still running at exit are stopped by lib.sh's cleanup.
# Without node, the npm packages (tests/s3/setup.sh) or the AWS CLI, the
# test is skipped (exit 77).

CKS_S3_DIR="$CKS_SOURCE_DIR/tests/s3"
S3_BUCKET=ckpt
S3_PREFIX=team1
S3_REGION=us-east-1
S3_ACCESS_KEY=S3RVER
S3_SECRET_KEY=S3RVER
S3_CREDENTIALS="$T/credentials"
S3_TLS_CERT="$T/s3-tls.crt"
S3_TLS_KEY="$T/s3-tls.key"
declare -gA S3_PID=() S3_PORT=() S3_ARGS=() S3_SCHEME=()

# The test servers need node and the pinned npm packages; setup.sh installs
# them if needed (quick when done; concurrent tests wait for each other).
command -v node > /dev/null 2>&1 || skip "node is not installed (deploy/deps.sh --test)"
"$CKS_S3_DIR/setup.sh" --quiet > "$T/s3-setup.log" 2>&1 ||
  skip "S3 test servers not installed: $(tail -1 "$T/s3-setup.log")"
# The Debian AWS CLI (/usr/bin/aws, awscli 2.9) first: a pip one earlier in
# PATH (pyenv) may be another major version.
if [ -z "${S3_AWS:-}" ]; then
  if [ -x /usr/bin/aws ]; then S3_AWS=/usr/bin/aws; else S3_AWS=$(command -v aws || true); fi
fi

_s3_gone() { [ ! -e "/proc/$1" ] || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]; }

_s3_launch() {
  local name=$1 port=$2 word p _
  local out="$T/s3-$name.out" log="$T/s3-$name.log"
  : > "$out"
  # S3_ARGS[name]: the extra arguments of start_s3, quoted with printf %q.
  eval "set -- ${S3_ARGS[$name]}"
  node "$CKS_S3_DIR/s3rver.js" --port "$port" --dir "$T/s3-$name" --bucket "$S3_BUCKET" \
       --access-key "$S3_ACCESS_KEY" --secret-key "$S3_SECRET_KEY" "$@" > "$out" 2>> "$log" &
  S3_PID[$name]=$!
  for _ in $(seq 1 200); do
    if read -r word p < "$out" 2> /dev/null && [ "${word:-}" = ready ]; then
      S3_PORT[$name]=$p
      return 0
    fi
    if _s3_gone "${S3_PID[$name]}"; then
      wait "${S3_PID[$name]}" 2>/dev/null || true
      S3_PID[$name]=
      tail -20 "$log" >&2; die "s3 server $name exited at start"
    fi
    sleep 0.05
  done
  tail -20 "$log" >&2; die "s3 server $name not ready within 10 s"
}

# s3_tls_cert: a self-signed certificate for 127.0.0.1, localhost, s3.localhost
# and *.s3.localhost in $S3_TLS_CERT / $S3_TLS_KEY (made once per test).
s3_tls_cert() {
  [ -s "$S3_TLS_CERT" ] && return 0
  command -v openssl > /dev/null 2>&1 || skip "no openssl to make a TLS certificate"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=ckptsync-s3-test \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:s3.localhost,DNS:*.s3.localhost" \
    -keyout "$S3_TLS_KEY" -out "$S3_TLS_CERT" > "$T/s3-tls.log" 2>&1 ||
    { cat "$T/s3-tls.log" >&2; die "openssl could not make a certificate"; }
}

# start_s3 NAME [--tls] [args...]: a new server (data in $T/s3-NAME), bucket ckpt.
start_s3() {
  local name=$1; shift
  [ -z "${S3_PID[$name]:-}" ] || die "s3 server $name is already running"
  S3_SCHEME[$name]=http
  if [ "${1:-}" = --tls ]; then
    shift; s3_tls_cert; S3_SCHEME[$name]=https
    set -- --tls-cert "$S3_TLS_CERT" --tls-key "$S3_TLS_KEY" "$@"
  fi
  local a q=
  for a in "$@"; do q+=" $(printf '%q' "$a")"; done
  S3_ARGS[$name]=$q
  # Port 0: the kernel picks a free one, the server says which ("ready P"),
  # so there is no window between choosing a port and binding it.
  _s3_launch "$name" "${S3_PORT[$name]:-0}"
}

_s3_reap() {
  local name=$1 sig=$2 pid=${S3_PID[$1]:-} _ gone=0
  [ -n "$pid" ] || return 0
  # stderr off: bash would report "Killed" for the background job.
  {
    kill "-$sig" "$pid" || true
    for _ in $(seq 1 100); do _s3_gone "$pid" && { gone=1; break; }; sleep 0.1; done
    [ $gone = 1 ] || kill -KILL "$pid" || true
    wait "$pid" || true
  } 2> /dev/null
  S3_PID[$name]=
  [ $gone = 1 ] || die "s3 server $name did not stop within 10 s of SIG$sig"
}

# stop_s3 NAME: SIGTERM, gone within 10 s.   kill_s3 NAME: SIGKILL.
stop_s3() { _s3_reap "$1" TERM; }
kill_s3() { _s3_reap "$1" KILL; }

# restart_s3 NAME: (stops it if running and) starts it again on the same
# port and data directory, with the arguments start_s3 was given.
restart_s3() {
  local name=$1
  [ -n "${S3_PORT[$name]:-}" ] || die "restart_s3 $name: never started"
  stop_s3 "$name"
  _s3_launch "$name" "${S3_PORT[$name]}"
}

_s3_cleanup() {
  local name _
  {
    for name in "${!S3_PID[@]}"; do
      [ -n "${S3_PID[$name]}" ] && kill -TERM "${S3_PID[$name]}" || true
    done
    for name in "${!S3_PID[@]}"; do
      [ -n "${S3_PID[$name]}" ] || continue
      for _ in $(seq 1 30); do _s3_gone "${S3_PID[$name]}" && break; sleep 0.1; done
      kill -KILL "${S3_PID[$name]}" || true
      wait "${S3_PID[$name]}" || true
      S3_PID[$name]=
    done
  } 2> /dev/null
}
CKS_CLEANUP_HOOKS+=(_s3_cleanup)

# start_proxy SCRIPT ARG...: runs the test proxy tests/integration/SCRIPT
# (reqlog.py, copyfault.py: s3relay.py's servers) with ARGs, waits for its
# "ready <port>" and sets PROXY_PID and PROXY_PORT; it is stopped at
# cleanup.  Its output: $T/proxy.out, $T/proxy.err.
start_proxy() {
  local script=$1
  shift
  python3 "$CKS_SOURCE_DIR/tests/integration/$script" "$@" > "$T/proxy.out" 2> "$T/proxy.err" &
  PROXY_PID=$!
  CKS_CLEANUP_HOOKS+=(stop_proxy)
  wait_for 10 grep -q '^ready ' "$T/proxy.out" || { cat "$T/proxy.err"; die "the proxy ($script) did not start"; }
  PROXY_PORT=$(awk '/^ready/ { print $2 }' "$T/proxy.out")
}
stop_proxy() { kill "$PROXY_PID" 2> /dev/null; wait "$PROXY_PID" 2> /dev/null || true; }

s3_url() { echo "${S3_SCHEME[$1]:-http}://127.0.0.1:${S3_PORT[$1]:?s3 server $1 not started}"; }

# write_s3_credentials [FILE]: the AWS CLI's INI format, mode 0600.
write_s3_credentials() { write_credentials "${1:-$S3_CREDENTIALS}" "$S3_ACCESS_KEY" "$S3_SECRET_KEY"; }

# write_config_s3 [min avg max] [path|virtual] [signed|unsigned]: like
# write_config, with three s3 regions a b c on three servers (started here
# unless running; start them with --tls first for HTTPS endpoints, which get
# ca_file = $S3_TLS_CERT).  Virtual-hosted addressing uses the endpoint
# http://s3.localhost:PORT, so requests go to ckpt.s3.localhost:PORT (libcurl
# resolves *.localhost to loopback itself; s3rver.js takes the bucket from
# such a Host).
write_config_s3() {
  local min=${1:-256K} avg=${2:-1M} max=${3:-4M} addressing=${4:-path} payload=${5:-signed}
  local r host
  case $addressing in path) host=127.0.0.1 ;; virtual) host=s3.localhost ;;
    *) die "write_config_s3: addressing '$addressing'" ;; esac
  mkdir -p "$T/watch"
  write_s3_credentials
  for r in a b c; do [ -n "${S3_PID[$r]:-}" ] || start_s3 "$r"; done
  {
    config_head "$min" "$avg" "$max"
    for r in a b c; do
      cat <<EOF2
[region.$r]
kind = s3
endpoint = ${S3_SCHEME[$r]}://$host:${S3_PORT[$r]}
bucket = $S3_BUCKET
prefix = $S3_PREFIX
region = $S3_REGION
addressing = $addressing
payload = $payload
credentials = $S3_CREDENTIALS
EOF2
      [ "${S3_SCHEME[$r]}" = http ] || echo "ca_file = $S3_TLS_CERT"
    done
  } > "$CONF"
}

# s3_region_section NAME ENDPOINT BUCKET: a [region.NAME] of kind s3 on the
# test's prefix, region and credentials (for configs written by hand: one
# server's buckets as three regions, one behind a test proxy).
s3_region_section() {
  printf '[region.%s]\nkind = s3\nendpoint = %s\nbucket = %s\nprefix = %s\nregion = %s\ncredentials = %s\n' \
    "$1" "$2" "$3" "$S3_PREFIX" "$S3_REGION" "$S3_CREDENTIALS"
}

# aws_s3 NAME args...: the AWS CLI against server NAME, with the test's key
# pair (another for one call: S3_SECRET_KEY=wrong aws_s3 a ...), none of the
# caller's AWS settings, and its own config file $S3_AWS_CONFIG (settings:
# aws_s3 a configure set default.s3.multipart_threshold 8MB).
S3_AWS_CONFIG="$T/aws-config"
aws_s3() {
  local name=$1; shift
  [ -n "$S3_AWS" ] || skip "the AWS CLI is not installed (Debian package awscli)"
  [ -e "$S3_AWS_CONFIG" ] || : > "$S3_AWS_CONFIG"
  local tls=()
  [ "${S3_SCHEME[$name]:-http}" = http ] || tls=(--ca-bundle "$S3_TLS_CERT")
  env -u AWS_PROFILE -u AWS_SESSION_TOKEN -u AWS_ENDPOINT_URL -u AWS_CA_BUNDLE \
    AWS_ACCESS_KEY_ID="$S3_ACCESS_KEY" AWS_SECRET_ACCESS_KEY="$S3_SECRET_KEY" \
    AWS_DEFAULT_REGION="$S3_REGION" AWS_CONFIG_FILE="$S3_AWS_CONFIG" \
    AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true AWS_PAGER= \
    "$S3_AWS" --endpoint-url "$(s3_url "$name")" --no-cli-pager "${tls[@]}" "$@"
}
