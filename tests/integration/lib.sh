# lib.sh — helpers shared by the integration tests (sourced, not run).
#
# Each test gets a scratch directory (removed on success, kept on failure
# for a look), a configuration with three dir regions inside it, and
# `cks` to run the CLI against that configuration.
set -euo pipefail

: "${CKPTSYNC:?CKPTSYNC must name the ckptsync binary (ctest sets it)}"
: "${CKS_SOURCE_DIR:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"

T=$(mktemp -d "${TMPDIR:-/tmp}/cks-test.XXXXXX")
CONF="$T/ckptsync.conf"
STATE="$T/state"
STEP_NO=0

cleanup() {
  local rc=$?
  for m in "${CKS_MOUNTS[@]:-}"; do [ -n "$m" ] && umount -l "$m" 2>/dev/null || true; done
  if [ $rc -eq 0 ] || [ $rc -eq 77 ]; then rm -rf "$T"; else echo "scratch kept: $T" >&2; fi
}
trap cleanup EXIT
CKS_MOUNTS=()

step() { STEP_NO=$((STEP_NO + 1)); echo "--- [$STEP_NO] $*"; }
die() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "skipped: $*"; exit 77; }

# write_config [chunker min avg max]: three dir regions a b c under $T.
write_config() {
  local min=${1:-256K} avg=${2:-1M} max=${3:-4M}
  mkdir -p "$T/regions/a" "$T/regions/b" "$T/regions/c" "$T/watch"
  cat > "$CONF" <<EOF2
[daemon]
watch = $T/watch
state = $STATE
quorum = 2
[chunker]
min = $min
avg = $avg
max = $max
[region.a]
kind = dir
path = $T/regions/a
[region.b]
kind = dir
path = $T/regions/b
[region.c]
kind = dir
path = $T/regions/c
EOF2
}

cks() { "$CKPTSYNC" --config "$CONF" "$@"; }

# expect_fail CODE cmd...: runs cmd, requires exit CODE; stderr in $T/err.
expect_fail() {
  local want=$1; shift
  set +e; "$@" > "$T/out" 2> "$T/err"; local rc=$?; set -e
  [ "$rc" -eq "$want" ] || { cat "$T/err" >&2; die "'$*' exited $rc, expected $want"; }
}

# json FILE EXPR: evaluates a Python expression over the JSON document d.
json() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# make_file PATH MiB: random content.
make_file() { mkdir -p "$(dirname "$1")"; head -c "$(( $2 * 1048576 ))" /dev/urandom > "$1"; }

# same_tree A B: identical content, modes and symlinks.
same_tree() {
  diff -r --no-dereference "$1" "$2" > /dev/null || die "trees differ: $1 $2"
  (cd "$1" && find . -printf '%p %m %y %l\n' | sort) > "$T/tree.a"
  (cd "$2" && find . -printf '%p %m %y %l\n' | sort) > "$T/tree.b"
  cmp -s "$T/tree.a" "$T/tree.b" || { diff "$T/tree.a" "$T/tree.b" >&2; die "metadata differs: $1 $2"; }
}

# try_mount ARGS...: mount for this test, or return 1 (not permitted here).
try_mount() {
  local dir=${*: -1}
  mount "$@" 2>/dev/null || return 1
  CKS_MOUNTS+=("$dir")
}
