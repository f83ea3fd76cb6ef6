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
  local rc=$? h
  for h in "${CKS_CLEANUP_HOOKS[@]:-}"; do [ -n "$h" ] && "$h" || true; done
  [ -n "${DAEMON_PID:-}" ] && kill -9 "$DAEMON_PID" 2>/dev/null || true
  for m in "${CKS_MOUNTS[@]:-}"; do [ -n "$m" ] && umount -l "$m" 2>/dev/null || true; done
  if [ $rc -eq 0 ] || [ $rc -eq 77 ]; then rm -rf "$T"; else echo "scratch kept: $T" >&2; fi
}
CKS_CLEANUP_HOOKS=()   # functions cleanup() runs first (e.g. s3lib.sh stops its servers)
trap cleanup EXIT
CKS_MOUNTS=()

step() { STEP_NO=$((STEP_NO + 1)); echo "--- [$STEP_NO] $*"; }
die() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "skipped: $*"; exit 77; }

# config_head MIN AVG MAX: the [daemon] and [chunker] sections every test
# configuration starts with (the regions follow).
config_head() {
  cat <<EOF2
[daemon]
watch = $T/watch
state = $STATE
quorum = 2
[chunker]
min = $1
avg = $2
max = $3
EOF2
}

# write_credentials FILE KEY SECRET: the AWS CLI's INI format, mode 0600.
write_credentials() {
  (umask 077; printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$2" "$3" > "$1")
  chmod 0600 "$1"
}

# write_config [chunker min avg max]: three regions a b c: dir regions
# under $T, or, with CKS_REGIONS=s3 (ctest's "-s3" variants of the tests
# marked "# regions: dir s3"), three S3 servers on loopback, or, with
# CKS_REGIONS=ceph (the "-ceph" variants, marker "# regions: ... ceph"),
# three buckets on a Ceph RGW on loopback (cephlib.sh).
write_config() {
  if [ "${CKS_REGIONS:-dir}" = s3 ]; then
    . "$CKS_SOURCE_DIR/tests/integration/s3lib.sh"
    write_config_s3 "$@"
    encrypt_if_asked
    return
  fi
  if [ "${CKS_REGIONS:-dir}" = ceph ]; then
    . "$CKS_SOURCE_DIR/tests/integration/cephlib.sh"
    write_config_ceph "$@"
    encrypt_if_asked
    return
  fi
  write_config_dir "$@"
  encrypt_if_asked
}

# CKS_TEST_ENCRYPT=1: every repository a test configures is encrypted (a
# key file under $T), to run the suite's workflows through the sealing and
# keyed names of the region layer: ctest's "-enc" variants of the tests
# marked "# encrypted: yes".  Tests that read or damage objects by their
# plain names or SHA-256 ids themselves cannot run that way.
encrypt_if_asked() {
  [ "${CKS_TEST_ENCRYPT:-0}" = 1 ] || return 0
  [ -f "$T/suite.key" ] || { head -c 32 /dev/urandom > "$T/suite.key"; chmod 600 "$T/suite.key"; }
  grep '^\[repository\]' "$CONF" > /dev/null && return 0
  sed -i "/^\[daemon\]/i [repository]\nencryption = aes-256-gcm\nkey_file = $T/suite.key" "$CONF"
}

write_config_dir() {
  local min=${1:-256K} avg=${2:-1M} max=${3:-4M}
  mkdir -p "$T/regions/a" "$T/regions/b" "$T/regions/c" "$T/watch"
  config_head "$min" "$avg" "$max" > "$CONF"
  cat >> "$CONF" <<EOF2
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
# proc_stopped PID: is the process stopped (state T in /proc/PID/stat;
# the name before it may hold spaces)?
proc_stopped() { [ "$(sed 's/^.*) //' "/proc/$1/stat" 2> /dev/null | cut -d' ' -f1)" = T ]; }
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

# ---- the daemon -------------------------------------------------------------

# daemon_answers CLI...: `CLI status --json` got the daemon's answer: exit
# 0, or 3/4/5 (degraded, a region failing, a region refusing the
# credentials: README, "Exit status"); not 1 (none) or 6 (starting).
daemon_answers() {
  local rc=0
  "$@" status --json > /dev/null 2>&1 || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 3 ] || [ "$rc" = 4 ] || [ "$rc" = 5 ]
}
: "${CKPTSYNCD:=$(dirname "$CKPTSYNC")/ckptsyncd}"
DAEMON_PID=

# start_daemon [args...]: runs ckptsyncd on $CONF in the background (log in
# $T/daemon.log) and waits until it answers on its socket.
start_daemon() {
  "$CKPTSYNCD" --config "$CONF" "$@" >> "$T/daemon.log" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 1 100); do
    daemon_answers cks && return 0
    kill -0 "$DAEMON_PID" 2>/dev/null || { tail -20 "$T/daemon.log" >&2; die "ckptsyncd exited at start"; }
    sleep 0.1
  done
  tail -20 "$T/daemon.log" >&2; die "ckptsyncd did not answer within 10 s"
}

# stop_daemon: SIGTERM, and it must be gone within 10 s.
stop_daemon() {
  [ -n "$DAEMON_PID" ] || return 0
  kill -TERM "$DAEMON_PID" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$DAEMON_PID" 2>/dev/null || { wait "$DAEMON_PID" 2>/dev/null || true; DAEMON_PID=; return 0; }
    sleep 0.1
  done
  die "ckptsyncd did not stop within 10 s of SIGTERM"
}

kill9_daemon() {
  [ -n "$DAEMON_PID" ] || return 0
  kill -9 "$DAEMON_PID" 2>/dev/null || true
  wait "$DAEMON_PID" 2>/dev/null || true
  DAEMON_PID=
}

# wait_for SECONDS CMD...: polls CMD until it succeeds.
wait_for() {
  local secs=$1; shift
  for _ in $(seq 1 $((secs * 10))); do "$@" > /dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

# set_settle SECONDS: the daemon's quiescence delay in $CONF.
set_settle() { sed -i "/^\[daemon\]/a settle = $1" "$CONF"; }

# second_instance: another instance on $CONF's regions, with its own state
# directory ($T/state-b) and watch directory ($T/watch-b), in $T/b.conf;
# defines `b ARGS...`, the CLI as that instance.
second_instance() {
  sed -e "s|^state = .*|state = $T/state-b|" -e "s|^watch = .*|watch = $T/watch-b|" "$CONF" > "$T/b.conf"
  mkdir -p "$T/watch-b"
  b() { "$CKPTSYNC" --config "$T/b.conf" "$@"; }
}

# tree_sums DIR: "sha256  relpath" of every file, sorted.
tree_sums() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum); }
