#!/usr/bin/env bash
# Start-up errors are clear and leave no partial state; signals behave;
# the CLI without a daemon says so in one line.
. "$(dirname "$0")/lib.sh"
write_config
set_settle 1

step "a bad configuration: exit 1, file:line and key named, no state created"
printf '[daemon]\nwatch = %s\nstate = %s\nquorum = 7\n[region.a]\npath = %s\n' "$T/watch" "$T/state-bad" "$T/regions/a" > "$T/bad.conf"
set +e; "$CKPTSYNCD" --config "$T/bad.conf" 2> "$T/err"; rc=$?; set -e
[ $rc = 1 ] || die "exit $rc for a bad configuration"
grep -q "bad.conf:4.*quorum" "$T/err" || { cat "$T/err"; die "message lacks file:line key"; }
[ ! -e "$T/state-bad" ] || die "state directory created for a bad configuration"

step "a watch root that does not exist"
set +e; "$CKPTSYNCD" --config "$CONF" --watch "$T/nope" --state "$T/state-nope" 2> "$T/err"; rc=$?; set -e
[ $rc = 1 ] || die "exit $rc"
grep -q "watch root \"$T/nope\"" "$T/err" || { cat "$T/err"; die "watch root not named"; }
[ ! -e "$T/state-nope" ] || die "state created"

step "a state directory on a read-only filesystem"
mkdir -p "$T/ro"
if try_mount -t tmpfs -o ro,size=1m tmpfs "$T/ro"; then
  set +e; "$CKPTSYNCD" --config "$CONF" --state "$T/ro/state" 2> "$T/err"; rc=$?; set -e
  [ $rc = 1 ] || die "exit $rc"
  grep -q "$T/ro/state.*Read-only" "$T/err" || { cat "$T/err"; die "read-only state not named"; }
else
  echo "(mounting a tmpfs is not permitted here: case skipped)"
fi

step "--check validates without starting"
"$CKPTSYNCD" --config "$CONF" --check | grep valid > /dev/null
[ ! -e "$STATE" ] || die "--check created state"
"$CKPTSYNCD" --config "$CONF" --check --connect > "$T/out" || { cat "$T/out"; die "--check --connect"; }
grep -q "^region a: repository: no repository yet (the first start creates it)$" "$T/out" || { cat "$T/out"; die "--check --connect: repo object"; }
[ -z "$(ls -A "$T/regions/a")" ] && [ ! -e "$STATE" ] || die "--check --connect changed something"
mv "$T/regions/b" "$T/regions/b.away"
expect_fail 1 "$CKPTSYNCD" --config "$CONF" --check --connect
grep -q "^region b: connection: FAILED: region 'b': directory \"$T/regions/b\" does not exist$" "$T/out" && grep -q "^region a: connection: reachable$" "$T/out" \
  || { cat "$T/out" "$T/err"; die "--check --connect: a missing region directory is not named"; }
mv "$T/regions/b.away" "$T/regions/b"
expect_fail 2 "$CKPTSYNCD" --config "$CONF" --connect

step "a file that names no region is refused by --check, the daemon and the CLI (not the embedded three)"
printf '[daemon]\nwatch = %s\nstate = %s\n' "$T/watch" "$T/state-nr" > "$T/noregion.conf"
mkdir -p "$T/watch/nr/checkpoint-1000"; echo w > "$T/watch/nr/checkpoint-1000/w.bin"
for f in "$T/noregion.conf" /dev/null; do
  set +e; "$CKPTSYNCD" --config "$f" --check > "$T/out" 2> "$T/err"; rc=$?; set -e
  [ $rc = 1 ] && grep -q "$f: no \[region.NAME\] section" "$T/err" || { cat "$T/out" "$T/err"; die "--check accepted $f"; }
  set +e; CKPTSYNC_CONFIG="$f" "$CKPTSYNCD" --watch "$T/watch" --state "$T/state-nr" 2> "$T/err"; rc=$?; set -e
  [ $rc = 1 ] && grep -q "$f: no \[region.NAME\] section" "$T/err" || { cat "$T/err"; die "daemon started on $f"; }
done
for cmd in "snapshot $T/watch/nr/checkpoint-1000 --run nr" "ls" "status"; do
  # shellcheck disable=SC2086
  expect_fail 1 "$CKPTSYNC" --config "$T/noregion.conf" $cmd
  grep -q "noregion.conf: no \[region.NAME\] section" "$T/err" || { cat "$T/err" "$T/out"; die "'$cmd' ran on a file with no region"; }
done
[ ! -e "$T/state-nr" ] || die "state created for a file with no region"
rm -rf "$T/watch/nr"

step "the CLI without a daemon: one line, exit 1"
expect_fail 1 cks status
[ "$(wc -l < "$T/err")" = 1 ] && grep -q "no daemon is running" "$T/err" || { cat "$T/err"; die "no-daemon message"; }
expect_fail 1 cks commit "$T/watch"

step "a first start waiting create_settle: status says starting (exit 6), then answers (#26 item 8)"
mkdir -p "$T/rs/a" "$T/rs/b"
cat > "$T/settle.conf" <<EOF2
[daemon]
watch = $T/watch
state = $T/state-settle
create_settle = 4
[region.a]
path = $T/rs/a
preconditions = none
[region.b]
path = $T/rs/b
preconditions = none
EOF2
"$CKPTSYNCD" --config "$T/settle.conf" 2> "$T/settle.log" &
spid=$!
starting() { local rc=0; "$CKPTSYNC" --config "$T/settle.conf" status > "$T/out" 2> "$T/err" || rc=$?; [ $rc = 6 ]; }
wait_for 10 starting || { cat "$T/err" "$T/settle.log"; die "status during create_settle: not 'starting' (exit 6)"; }
grep -q "ckptsyncd (pid $spid) is starting" "$T/err" || { cat "$T/err"; die "status during create_settle: no pid, no 'starting'"; }
grep -q "no daemon is running" "$T/err" && die "status during create_settle says no daemon"
expect_fail 1 "$CKPTSYNC" --config "$T/settle.conf" flush
grep -q "is starting" "$T/err" || { cat "$T/err"; die "flush during create_settle: not 'starting'"; }
wait_for 20 "$CKPTSYNC" --config "$T/settle.conf" status --json || { cat "$T/settle.log"; die "no answer after create_settle"; }
kill -TERM "$spid"; wait "$spid" || true
expect_fail 1 "$CKPTSYNC" --config "$T/settle.conf" status
grep -q "no daemon is running" "$T/err" || { cat "$T/err"; die "a stopped daemon still 'starting'"; }

step "a second daemon on the same state is refused"
start_daemon
set +e; "$CKPTSYNCD" --config "$CONF" 2> "$T/err"; rc=$?; set -e
[ $rc = 1 ] && grep -q "another ckptsyncd" "$T/err" || { cat "$T/err"; die "second daemon not refused"; }

step "commit outside the watch root, or of something missing"
mkdir -p "$T/elsewhere/r1/checkpoint-1"
expect_fail 1 cks commit "$T/elsewhere/r1/checkpoint-1"
grep -q "not under the watch root" "$T/err" || { cat "$T/err"; die "outside root"; }
grep -q "Protocol error" "$T/err" && { cat "$T/err"; die "outside root: Protocol error"; }
expect_fail 1 cks commit "$T/watch"
grep -q "is the watch root itself" "$T/err" || { cat "$T/err"; die "the watch root itself: unclear"; }
expect_fail 1 cks commit "$T/watch/r1/missing"
grep -q "missing" "$T/err" || die "missing path not named"
# a run directory whose name cannot be a key: refused at once, with the reason
mkdir -p "$T/watch/my run/checkpoint-1"
echo x > "$T/watch/my run/checkpoint-1/w.bin"
expect_fail 1 timeout 20 "$CKPTSYNC" --config "$CONF" commit "$T/watch/my run/checkpoint-1" --wait durable --timeout 10
grep -q 'run directory name "my run" cannot be stored' "$T/err" || { cat "$T/err"; die "unstorable run name not refused"; }
rm -rf "$T/watch/my run"

step "SIGHUP with a broken file keeps the daemon running; a good file restarts it in place"
pid=$DAEMON_PID
cp "$CONF" "$T/good.conf"
printf 'oops\n' >> "$CONF"
kill -HUP "$pid"; sleep 0.5
kill -0 "$pid" || die "daemon died on a bad reload"
grep -q "configuration refused" "$T/daemon.log" || die "bad reload not reported"
cks status -q > /dev/null 2>&1 || true
cp "$T/good.conf" "$CONF"
sed -i 's/^settle = 1$/settle = 2/' "$CONF"
kill -HUP "$pid"
wait_for 10 sh -c "'$CKPTSYNC' --config '$CONF' status --json" || die "no answer after reload"
kill -0 "$pid" || die "reload changed the pid"
grep -q "restarting in place" "$T/daemon.log" || die "reload not logged"
# The reload re-executes /proc/self/exe: the process keeps its name, so
# pidof, pgrep and the migration hooks still find it.
wait_for 10 grep -qx ckptsyncd "/proc/$pid/comm" ||
  die "reload renamed the daemon to \"$(cat "/proc/$pid/comm")\""
pgrep -x ckptsyncd > "$T/pgrep" || true
grep -qx "$pid" "$T/pgrep" || die "pgrep -x ckptsyncd does not find the reloaded daemon"

step "SIGTERM stops it within seconds"
stop_daemon
[ ! -e "$STATE/ckptsyncd.sock" ] || die "socket left behind"
step "tls_verify = false: one warning naming the region from --check, the daemon and each CLI command; status shows it"
mkdir -p "$T/ri/a" "$T/ri/b"
cat > "$T/insecure.conf" <<EOF2
[daemon]
watch = $T/watch
state = $T/state-insecure
[region.a]
path = $T/ri/a
[region.b]
path = $T/ri/b
[region.insecure]
kind = s3
endpoint = https://127.0.0.1:1
bucket = b
tls_verify = false
EOF2
warned_once() { [ "$(grep -c "warning: region insecure: tls_verify = false" "$1")" = 1 ] || { cat "$1" >&2; die "$2: no single tls_verify warning"; }; }
AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s "$CKPTSYNCD" --config "$T/insecure.conf" --check > /dev/null 2> "$T/err"
warned_once "$T/err" "--check"
AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s "$CKPTSYNCD" --config "$T/insecure.conf" 2> "$T/insecure.log" &
ipid=$!
wait_for 10 daemon_answers "$CKPTSYNC" --config "$T/insecure.conf" || { cat "$T/insecure.log"; die "daemon with an insecure region"; }
warned_once "$T/insecure.log" "the daemon"
"$CKPTSYNC" --config "$T/insecure.conf" status > "$T/out" 2> "$T/err" || [ $? = 4 ]
warned_once "$T/err" "ckptsync status"
grep -q "^region insecure: tls_verify = false" "$T/out" || { cat "$T/out"; die "status does not show tls_verify = false"; }
"$CKPTSYNC" --config "$T/insecure.conf" status --json > "$T/st.json" 2> /dev/null || [ $? = 4 ]
[ "$(json "$T/st.json" '[r["tls_verify"] for r in d["config"]["regions"] if r["name"] == "insecure"]')" = "[False]" ] \
  || die "status --json config.regions: tls_verify is not false"
[ "$(json "$T/st.json" '[r.get("tls_verify") for r in d["regions"] if r["name"] == "insecure"]')" = "[False]" ] \
  || die "status --json regions[]: tls_verify is not false"
kill -TERM "$ipid"; wait "$ipid" || true
AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s "$CKPTSYNC" --config "$T/insecure.conf" ls > /dev/null 2> "$T/err" || true
warned_once "$T/err" "ckptsync ls"
grep -q "tls_verify" "$T/daemon.log" && die "a warning for a configuration with tls_verify on"

step "the embedded default: no configuration file, its regions created under the state directory"
if [ -e /etc/ckptsync/ckptsync.conf ]; then
  echo "(/etc/ckptsync/ckptsync.conf exists on this machine: the no-file case is skipped)"
else
  mkdir -p "$T/w2/run1/checkpoint-1"
  echo data > "$T/w2/run1/checkpoint-1/model.bin"
  (unset CKPTSYNC_CONFIG; exec "$CKPTSYNCD" --watch "$T/w2" --state "$T/s2") 2>> "$T/default.log" &
  dpid=$!
  nofile() { (unset CKPTSYNC_CONFIG; exec "$CKPTSYNC" --state "$T/s2" "$@"); }
  wait_for 10 nofile status || { cat "$T/default.log"; die "default daemon"; }
  nofile commit "$T/w2/run1/checkpoint-1" --wait replicated --timeout 30 -q \
    || { cat "$T/default.log"; die "commit on the embedded default"; }
  kill -TERM "$dpid"; wait "$dpid" || true
  grep -q "no configuration file: using the embedded default regions.*do NOT survive the instance" "$T/default.log" \
    || die "no warning about the embedded default"
  for r in a b c; do ls "$T/s2/regions/$r/commits/run1/"g0.s* > /dev/null 2>&1 || die "default region $r has no commit record"; done
fi
echo "daemon-config: ok"
