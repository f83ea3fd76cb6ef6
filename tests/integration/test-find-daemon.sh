#!/usr/bin/env bash
# One way to find the daemon: the CLI, the Python module (Debian's python3
# and the first other python3 on PATH) and the C library
# (tests/unit/test-libclient.c) take the socket from $CKPTSYNC_SOCKET,
# else the configuration ($CKPTSYNC_CONFIG or --config) and its state
# directory (--state, $CKPTSYNC_STATE), in the order include/ckptsync/protocol.h
# states; a relative --state is taken from the current directory.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
start_daemon
sock="$STATE/ckptsyncd.sock"
# A configuration whose state directory is elsewhere: only an override finds the daemon.
sed "s|^state = .*|state = $T/elsewhere|" "$CONF" > "$T/other.conf"
grep -q "^state = $T/elsewhere" "$T/other.conf" || die "test setup: no state line in the configuration"
mkdir -p "$T/elsewhere"
cli() { env -u CKPTSYNC_SOCKET -u CKPTSYNC_STATE -u CKPTSYNC_CONFIG "$@"; }

step "the CLI"
cli CKPTSYNC_CONFIG="$CONF" "$CKPTSYNC" status -q > /dev/null || die "CLI: \$CKPTSYNC_CONFIG not used"
expect_fail 1 cli "$CKPTSYNC" --config "$T/other.conf" status
cli CKPTSYNC_SOCKET="$sock" "$CKPTSYNC" --config "$T/other.conf" status -q > /dev/null ||
  die "CLI: \$CKPTSYNC_SOCKET not used"
cli CKPTSYNC_STATE="$STATE" "$CKPTSYNC" --config "$T/other.conf" status -q > /dev/null ||
  die "CLI: \$CKPTSYNC_STATE not used"
(cd "$(dirname "$STATE")" && cli "$CKPTSYNC" --config "$T/other.conf" --state "$(basename "$STATE")" status -q) \
  > /dev/null || die "CLI: a relative --state is not taken from the current directory"

step "the Python module"
pys=(/usr/bin/python3)
other=$(command -v python3 || true)
[ -z "$other" ] || pys+=("$("$other" -c 'import sys; print(sys.executable)')")
for py in "${pys[@]}"; do
  [ -x "$py" ] || continue
  # each with a configuration that does not say where the daemon is, but the one tried
  for how in "CKPTSYNC_CONFIG=$CONF" "CKPTSYNC_SOCKET=$sock" "CKPTSYNC_STATE=$STATE"; do
    cli CKPTSYNC_CONFIG="$T/other.conf" "$how" PYTHONPATH="$CKS_SOURCE_DIR/client/python" \
      "$py" -c 'import ckptsync, sys; ckptsync.ping()' 2> "$T/py.err" ||
      { cat "$T/py.err"; die "$py: the module does not find the daemon with $how"; }
  done
  cli CKPTSYNC_CONFIG="$T/other.conf" PYTHONPATH="$CKS_SOURCE_DIR/client/python" "$py" - "$T/elsewhere" <<'PY' ||
import ckptsync, sys
assert ckptsync.find_socket() == sys.argv[1] + "/ckptsyncd.sock", ckptsync.find_socket()
try:
    ckptsync.ping()
    raise SystemExit("ping found a daemon in the wrong place")
except ckptsync.DaemonNotRunning:
    pass
PY
    die "$py: the configuration's state directory is not where the module looks"
done

step "the daemon takes \$CKPTSYNC_STATE and a relative --state too"
stop_daemon
(cd "$(dirname "$STATE")" && CKPTSYNC_STATE="$(basename "$STATE")" "$CKPTSYNCD" --config "$T/other.conf" \
  --check --json) > "$T/check.json" || { cat "$T/check.json"; die "ckptsyncd --check --json failed"; }
[ "$(json "$T/check.json" 'd["socket"]')" = "$sock" ] || { cat "$T/check.json"; die "daemon: \$CKPTSYNC_STATE not used"; }
echo "find-daemon: ok"
