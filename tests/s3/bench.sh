#!/usr/bin/env bash
# bench.sh — how fast one loopback s3rver takes PUTs and serves GETs of
# 4 MiB objects, through the AWS CLI (aws s3 cp of a directory) and through
# curl (N parallel single-object requests, UNSIGNED-PAYLOAD, as libcurl does
# for the backend).  Not part of the test suite; figures go in README.md.
#   tests/s3/bench.sh [FILES [MiB [PARALLEL [ROUNDS]]]]     default 64 4 8 3
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
n=${1:-64} mib=${2:-4} par=${3:-8} rounds=${4:-3}
"$here/setup.sh" --quiet
aws=/usr/bin/aws; [ -x "$aws" ] || aws=$(command -v aws)

w=$(mktemp -d "${TMPDIR:-/tmp}/s3-bench.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
node "$here/s3rver.js" --port 0 --dir "$w/data" --bucket ckpt > "$w/out" 2> "$w/log" &
pid=$!
for _ in $(seq 1 100); do grep -q '^ready' "$w/out" && break; sleep 0.1; done
port=$(awk '/^ready/{print $2}' "$w/out")
[ -n "$port" ] || { cat "$w/log"; exit 1; }
url=http://127.0.0.1:$port

mkdir -p "$w/src"
for i in $(seq 1 "$n"); do head -c $((mib << 20)) /dev/urandom > "$w/src/f$i"; done
total=$((n * mib))

export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_DEFAULT_REGION=us-east-1
export AWS_CONFIG_FILE=$w/aws-config AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true
: > "$AWS_CONFIG_FILE"

cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }   # server's user+sys ticks
tick=$(getconf CLK_TCK)
# run LABEL cmd...: wall time, MiB/s, and how busy the server's one core was.
run() {
  local label=$1; shift
  local c0 t0 t1 c1
  c0=$(cpu); t0=$(date +%s.%N)
  "$@"
  t1=$(date +%s.%N); c1=$(cpu)
  awk -v l="$label" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" -v hz="$tick" -v mb="$total" \
    'BEGIN { s = t1 - t0; printf "%-34s %6.2f s  %7.1f MiB/s  server CPU %3.0f%%\n", l, s, mb / s, 100 * (c1 - c0) / hz / s }'
}

s3put() { curl -sS --fail -o /dev/null --aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER \
            -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -T "$w/src/$1" "$url/ckpt/curl/$1"; }
s3get() { curl -sS --fail -o "$w/cget/$1" --aws-sigv4 "aws:amz:us-east-1:s3" --user S3RVER:S3RVER \
            -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$url/ckpt/curl/$1"; }
export -f s3put s3get; export w url

echo "$n x $mib MiB = $total MiB; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); node $(node --version); $("$aws" --version 2>&1 | cut -d' ' -f1)"
for _ in $(seq 1 "$rounds"); do
  rm -rf "$w/back" "$w/cget"; mkdir -p "$w/cget"
  run "aws s3 cp --recursive PUT" "$aws" --endpoint-url "$url" s3 cp --recursive --only-show-errors "$w/src" s3://ckpt/aws/
  run "aws s3 cp --recursive GET" "$aws" --endpoint-url "$url" s3 cp --recursive --only-show-errors s3://ckpt/aws/ "$w/back"
  run "curl PUT x$par parallel" bash -c "ls '$w/src' | xargs -P $par -I{} bash -c 's3put {}'"
  run "curl GET x$par parallel" bash -c "ls '$w/src' | xargs -P $par -I{} bash -c 's3get {}'"
  diff -r "$w/src" "$w/back" > /dev/null && diff -r "$w/src" "$w/cget" > /dev/null || { echo "content differs"; exit 1; }
done
