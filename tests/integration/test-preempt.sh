#!/usr/bin/env bash
# The preemption path end to end: deploy/preempt-watch.sh polls a fake
# instance-metadata server on 127.0.0.1 (AWS IMDSv2, then GCP), runs
# `ckptsync migrate-out` exactly once on the notice, the handoff record
# lands in every region, and `ckptsync migrate-in` on a "new instance"
# prints a path holding exactly the checkpoint that was written.  Also: the
# example configurations in deploy/examples/ pass `ckptsyncd --check`, the
# hooks in deploy/hooks/ hand off and stop the daemon, migrate-out's failure
# is the watcher's exit status, an unreachable URL with --once is exit 3.
#
# Run: ctest -R preempt (ctest sets CKPTSYNC), or by hand:
#   CKPTSYNC=/tmp/build/ckptsync bash tests/integration/test-preempt.sh
. "$(dirname "$0")/lib.sh"

WATCH_SH=$CKS_SOURCE_DIR/deploy/preempt-watch.sh
HOOK_OUT=$CKS_SOURCE_DIR/deploy/hooks/migrate-out.sh
HOOK_IN=$CKS_SOURCE_DIR/deploy/hooks/migrate-in.sh
command -v curl > /dev/null || skip "curl is not installed"

step "every example configuration passes ckptsyncd --check"
umask 077
printf '[default]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = x\n' > "$T/credentials"
printf 'not a real CA\n' > "$T/ca.pem"
n=0
for f in "$CKS_SOURCE_DIR"/deploy/examples/*.conf; do
  # The examples name /etc/ckptsync/...; point them at files that exist here.
  sed -e "s#/etc/ckptsync/credentials#$T/credentials#" -e "s#/etc/ckptsync/[a-z-]*\.pem#$T/ca.pem#" \
      "$f" > "$T/example.conf"
  grep -q "$T/credentials" "$T/example.conf" || die "$f names no credentials file /etc/ckptsync/credentials"
  awk -v f="$f" 'length > 196 { print f ":" NR ": line longer than 196 characters"; bad = 1 } END { exit bad }' "$f" \
    || die "$f has lines the parser refuses"
  "$CKPTSYNCD" --config "$T/example.conf" --check --watch /tmp > "$T/out" 2> "$T/err" \
    || { cat "$T/err" >&2; die "$f does not pass ckptsyncd --check"; }
  grep -q "is valid" "$T/out" || die "$f: --check did not say valid"
  n=$((n + 1))
done
[ "$n" -ge 3 ] || die "only $n example configurations in deploy/examples"
umask 022

step "the scripts: --help, usage errors"
for s in "$WATCH_SH" "$HOOK_OUT" "$HOOK_IN"; do
  [ -x "$s" ] || die "$s is not executable"
  "$s" --help > "$T/out" || die "$s --help failed"
  grep -q "usage" "$T/out" || die "$s --help prints no usage"
  expect_fail 2 "$s" --no-such-option
  grep -q "no-such-option" "$T/err" || die "$s does not name the bad option"
done
expect_fail 2 "$WATCH_SH" --provider azure
expect_fail 2 "$WATCH_SH" --provider generic
expect_fail 2 "$WATCH_SH" --interval 0

"$CKPTSYNC" migrate-out --help > /dev/null 2>&1 || skip "ckptsync has no migrate-out command yet"

# ---- the fake metadata server ------------------------------------------------
cat > "$T/fake-md.py" <<'PY'
# fake-md.py MODE PORTFILE LOG: a metadata server on 127.0.0.1 (port 0 =
# any free one, written to PORTFILE).  MODE aws: IMDSv2 token on PUT
# /latest/api/token; GET .../spot/instance-action needs the token, answers
# 404 three times, then the notice (termination 60 s from now).  MODE gcp:
# GET .../instance/preempted needs Metadata-Flavor: Google, answers FALSE
# three times, then TRUE.  MODE generic: GET /preempt 404 once, then 200.
# Every request is logged, one line each.
import http.server, json, sys, time
mode, portfile, logfile = sys.argv[1:4]
TOKEN = "tok-1234567890"
polls = 0

class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def answer(self, code, body=b"", ctype="text/plain"):
        with open(logfile, "a") as f:
            f.write("%s %s %d\n" % (self.command, self.path, code))
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self):
        if mode == "aws" and self.path == "/latest/api/token":
            if not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return self.answer(400)
            return self.answer(200, TOKEN.encode())
        self.answer(404)

    def do_GET(self):
        global polls
        if mode == "aws" and self.path == "/latest/meta-data/spot/instance-action":
            if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
                return self.answer(401)
            polls += 1
            if polls <= 3:
                return self.answer(404, b"Not Found")
            t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
            return self.answer(200, json.dumps({"action": "terminate", "time": t}).encode(),
                               "application/json")
        if mode == "gcp" and self.path == "/computeMetadata/v1/instance/preempted":
            if self.headers.get("Metadata-Flavor") != "Google":
                return self.answer(403)
            polls += 1
            return self.answer(200, b"FALSE" if polls <= 3 else b"TRUE")
        if mode == "generic" and self.path == "/preempt":
            polls += 1
            return self.answer(404 if polls <= 1 else 200, b"")
        self.answer(404)

srv = http.server.HTTPServer(("127.0.0.1", 0), H)
with open(portfile + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(portfile + ".tmp", portfile)
srv.serve_forever()
PY

MD_PID=
stop_md() {
  [ -n "$MD_PID" ] || return 0
  kill "$MD_PID" 2>/dev/null || true
  wait "$MD_PID" 2>/dev/null || true
  MD_PID=
}
CKS_CLEANUP_HOOKS+=(stop_md)
# start_md MODE: a fresh fake server; its port in $PORT, its log $T/md.log.
start_md() {
  stop_md
  rm -f "$T/md.port" "$T/md.log"; : > "$T/md.log"
  python3 "$T/fake-md.py" "$1" "$T/md.port" "$T/md.log" 2> "$T/md.err" &
  MD_PID=$!
  wait_for 10 test -s "$T/md.port" || { cat "$T/md.err" >&2; die "fake metadata server did not start"; }
  PORT=$(cat "$T/md.port")
}

# A ckptsync that records each invocation, then runs the real one.
mkdir -p "$T/bin"
cat > "$T/bin/ckptsync" <<EOF
#!/usr/bin/env bash
printf '%s\n' "\$*" >> "$T/calls"
exec "$CKPTSYNC" "\$@"
EOF
chmod +x "$T/bin/ckptsync"

# check_handoff CHECKPOINT-DIR NEW-DIR: the handoff of run r1 is in every
# region and migrate-in restores CHECKPOINT-DIR's content into NEW-DIR.
check_handoff() {
  local src=$1 new=$2 r
  for r in a b c; do
    ls "$T/regions/$r/lineage/r1/"g*.handoff.* > /dev/null 2>&1 ||
      die "no handoff record under $T/regions/$r/lineage/r1/"
  done
  "$CKPTSYNC" --config "$CONF" migrate-in --run r1 --to "$new" > "$T/in.out" 2> "$T/in.err" \
    || { cat "$T/in.err" >&2; die "migrate-in failed"; }
  [ "$(wc -l < "$T/in.out")" = 1 ] || { cat "$T/in.out" >&2; die "migrate-in printed more than one line"; }
  local path; path=$(cat "$T/in.out")
  [ "$path" = "$new/$(basename "$src")" ] || die "migrate-in printed '$path', expected $new/$(basename "$src")"
  tree_sums "$src" > "$T/want.sums"
  tree_sums "$path" > "$T/got.sums"
  diff "$T/want.sums" "$T/got.sums" > /dev/null || die "$path is not what was written to $src"
}

write_config 64K 256K 1M
set_settle 30        # no quiescence snapshot during the test: migrate-out commits
start_daemon

# The watcher must reach 127.0.0.1 only: a proxy in the environment points
# nowhere, and the watcher must not use it.
export http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9

step "AWS: IMDSv2 notice after 3 polls -> migrate-out once -> handoff in every region"
make_file "$T/watch/r1/checkpoint-100/model.safetensors" 3
make_file "$T/watch/r1/checkpoint-100/optimizer.pt" 1
echo '{"global_step": 100}' > "$T/watch/r1/checkpoint-100/trainer_state.json"
start_md aws
: > "$T/calls"
t0=$(date +%s)
set +e
CKPTSYNC=$T/bin/ckptsync timeout 60 "$WATCH_SH" --provider aws --url "http://127.0.0.1:$PORT" \
  --interval 0.2 --once --run r1 --config "$CONF" > "$T/watch.out" 2> "$T/watch.err"
rc=$?
set -e
cat "$T/watch.err"
[ "$rc" = 0 ] || { tail -20 "$T/daemon.log" >&2; die "preempt-watch.sh (aws) exited $rc"; }
[ "$(grep -c migrate-out "$T/calls")" = 1 ] || { cat "$T/calls" >&2; die "migrate-out did not run exactly once"; }
read -r -a args < "$T/calls"
[ "${args[0]} ${args[1]} ${args[2]}" = "--config $CONF migrate-out" ] || die "unexpected command: ${args[*]}"
grep -q -- "--run r1" "$T/calls" || die "--run r1 not passed to migrate-out"
d=$(sed -n 's/.*--deadline \([0-9]*\).*/\1/p' "$T/calls")
[ -n "$d" ] && [ "$d" -ge 40 ] && [ "$d" -le 46 ] || die "deadline '$d' is not the notice's 60 s minus the 15 s margin"
[ "$(grep -c '^PUT /latest/api/token 200' "$T/md.log")" -ge 1 ] || die "no IMDSv2 token was requested"
grep -q ' 401$' "$T/md.log" && die "a GET went out without the token"
[ "$(grep -c '^GET .*instance-action 404' "$T/md.log")" = 3 ] || { cat "$T/md.log" >&2; die "expected 3 polls answered 404"; }
grep -q "preemption notice" "$T/watch.err" || die "the notice was not logged"
grep -q "succeeded" "$T/watch.err" || die "the outcome was not logged"
check_handoff "$T/watch/r1/checkpoint-100" "$T/new"
echo "aws: handled in $(( $(date +%s) - t0 )) s, deadline $d s"

step "GCP: preempted TRUE after 3 FALSE -> migrate-out once (--exec) -> newer checkpoint handed off"
make_file "$T/watch/r1/checkpoint-200/model.safetensors" 2
echo '{"global_step": 200}' > "$T/watch/r1/checkpoint-200/trainer_state.json"
start_md gcp
: > "$T/calls"
set +e
timeout 60 "$WATCH_SH" --provider gcp --url "http://127.0.0.1:$PORT/" --interval 0.2 --once \
  --exec "$T/bin/ckptsync --config $CONF migrate-out" > "$T/watch.out" 2> "$T/watch.err"
rc=$?
set -e
cat "$T/watch.err"
[ "$rc" = 0 ] || { tail -20 "$T/daemon.log" >&2; die "preempt-watch.sh (gcp) exited $rc"; }
[ "$(grep -c migrate-out "$T/calls")" = 1 ] || { cat "$T/calls" >&2; die "migrate-out did not run exactly once"; }
grep -q -- "--deadline 25" "$T/calls" || die "GCP default deadline is not 25 s: $(cat "$T/calls")"
grep -q -- "--run" "$T/calls" && die "--run passed without being asked"
[ "$(grep -c '^GET /computeMetadata/v1/instance/preempted 200' "$T/md.log")" = 4 ] \
  || { cat "$T/md.log" >&2; die "expected 3 FALSE polls, then TRUE"; }
check_handoff "$T/watch/r1/checkpoint-200" "$T/new2"

step "generic URL; migrate-out's failure is the watcher's exit status"
start_md generic
printf '#!/bin/sh\necho "deadline passed: not durable" >&2\nexit 1\n' > "$T/bin/fail"
chmod +x "$T/bin/fail"
expect_fail 1 timeout 30 "$WATCH_SH" --provider generic --url "http://127.0.0.1:$PORT/preempt" \
  --interval 0.2 --once --deadline 7 --exec "$T/bin/fail"
grep -q "FAILED (exit 1" "$T/err" || { cat "$T/err" >&2; die "failure not logged"; }
grep -q "not durable" "$T/err" || die "migrate-out's own message was not passed through"

step "--once and an unreachable URL: exit 3, naming it"
stop_md
expect_fail 3 timeout 30 "$WATCH_SH" --provider gcp --url "http://127.0.0.1:$PORT" --interval 0.2 --once \
  --exec "$T/bin/fail"
grep -q "127.0.0.1:$PORT" "$T/err" || { cat "$T/err" >&2; die "the URL is not named"; }

step "hooks: migrate-out.sh hands off and stops the daemon; migrate-in.sh prints the resume path"
make_file "$T/watch/r1/checkpoint-300/model.safetensors" 1
echo '{"global_step": 300}' > "$T/watch/r1/checkpoint-300/trainer_state.json"
CKPTSYNC=$CKPTSYNC "$HOOK_OUT" --config "$CONF" --run r1 --deadline 30 --pid "$DAEMON_PID" 2> "$T/hook.err" \
  || { cat "$T/hook.err" >&2; die "hooks/migrate-out.sh failed"; }
kill -0 "$DAEMON_PID" 2>/dev/null && die "hooks/migrate-out.sh left ckptsyncd running"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
CKPTSYNC=$CKPTSYNC "$HOOK_IN" --config "$CONF" --run r1 --to "$T/new3" --no-install --no-start \
  > "$T/hook.out" 2> "$T/hook.err" || { cat "$T/hook.err" >&2; die "hooks/migrate-in.sh failed"; }
[ "$(cat "$T/hook.out")" = "$T/new3/checkpoint-300" ] || die "hooks/migrate-in.sh printed '$(cat "$T/hook.out")'"
tree_sums "$T/watch/r1/checkpoint-300" > "$T/want.sums"
tree_sums "$T/new3/checkpoint-300" > "$T/got.sums"
diff "$T/want.sums" "$T/got.sums" > /dev/null || die "hooks/migrate-in.sh restored something else"

step "hooks: migrate-in.sh --config F without --to restores under F's watch root"
sed "s|^watch = .*|watch = $T/watch2|" "$CONF" > "$T/conf2"
CKPTSYNC=$CKPTSYNC CKPTSYNCD=$CKPTSYNCD "$HOOK_IN" --config "$T/conf2" --run r1 --no-install --no-start \
  > "$T/hook.out" 2> "$T/hook.err" || { cat "$T/hook.err" >&2; die "hooks/migrate-in.sh failed"; }
[ "$(cat "$T/hook.out")" = "$T/watch2/r1/checkpoint-300" ] ||
  die "hooks/migrate-in.sh --config restored to '$(cat "$T/hook.out")', not under the configured watch root"
tree_sums "$T/watch2/r1/checkpoint-300" > "$T/got.sums"
diff "$T/want.sums" "$T/got.sums" > /dev/null || die "hooks/migrate-in.sh restored something else"
echo "preempt: ok"
