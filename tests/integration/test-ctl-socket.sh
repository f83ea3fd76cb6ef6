#!/usr/bin/env bash
# The control socket under load (issue 13, item 4): idle clients cannot
# lock `ckptsync status` out, a burst of concurrent status calls is
# answered in full, a client that sends no request line is closed after
# [daemon] control_idle_timeout, a parked waiter is not, and a client that
# finds every slot held by waiters is answered busy, not reset.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
set_settle 1
sed -i "/^\[daemon\]/a control_idle_timeout = 2" "$CONF"

# clients.py MODE SOCKET ...: raw protocol clients (bash cannot open a unix
# socket).  Modes:
#   burst N        N clients at once, each as libckptsync does it (connect
#                  and close, then connect, send status, read the answer);
#                  prints how many answers were "OK"
#   hold N READY   N connections that send nothing; "READY" is written
#                  once all are connected; on stdin EOF, waits until the
#                  daemon closed each and prints "closed=K busy=B idle=I"
#   idle PARTIAL   one connection that sends PARTIAL (maybe "") and no
#                  newline; prints the daemon's answer once it closes
#   park N READY LINE  N connections that send LINE; 3 s later (longer
#                  than the idle timeout) writes to READY how many of them
#                  were answered or closed; closes them all on stdin EOF
cat > "$T/clients.py" <<'EOF2'
import select, socket, sys, time
mode, path = sys.argv[1], sys.argv[2]

def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s

def read_all(s, limit=30):
    s.settimeout(limit)
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            return data
        data += b

if mode == "burst":
    n = int(sys.argv[3])
    socks = []
    for _ in range(n):
        conn().close()
        s = conn()
        s.sendall(b"CKPTSYNC/1 status\n")
        socks.append(s)
    ok = 0
    for s in socks:
        try:
            ok += read_all(s).startswith(b"OK {")
        except OSError as e:
            print("client:", e, file=sys.stderr)
    print(ok)
elif mode == "hold":
    n, ready = int(sys.argv[3]), sys.argv[4]
    socks = [conn() for _ in range(n)]
    open(ready, "w").write("%d\n" % n)
    sys.stdin.read()
    busy = idle = closed = 0
    for s in socks:
        try:
            a = read_all(s)
        except OSError:
            continue
        closed += 1
        busy += a.startswith(b"ERR busy ")
        idle += a.startswith(b"ERR badrequest no%20complete%20request%20line")
    print("closed=%d busy=%d idle=%d" % (closed, busy, idle))
elif mode == "idle":
    s = conn()
    s.sendall(sys.argv[3].encode())
    sys.stdout.write(read_all(s).decode())
elif mode == "park":
    n, ready, line = int(sys.argv[3]), sys.argv[4], sys.argv[5]
    socks = []
    for _ in range(n):
        s = conn()
        s.sendall(line.encode() + b"\n")
        socks.append(s)
    time.sleep(3)
    r, _, _ = select.select(socks, [], [], 0)
    open(ready, "w").write("answered=%d\n" % len(r))
    sys.stdin.read()
EOF2
clients() { python3 "$T/clients.py" "$@"; }
sock() { json "$T/st.json" 'd["config"]["socket"]'; }

start_daemon
cks status --json > "$T/st.json"
SOCK=$(sock)
[ "$(json "$T/st.json" 'd["config"]["control_idle_timeout"]')" = 2 ] || die "status shows no control_idle_timeout"

step "200 concurrent ckptsync status calls all get an answer"
pids=()
for i in $(seq 1 200); do
  ( "$CKPTSYNC" --config "$CONF" status --json > /dev/null 2>> "$T/burst.err" || echo x >> "$T/burst.fail" ) &
  pids+=($!)
done
wait "${pids[@]}"
fails=0; [ ! -f "$T/burst.fail" ] || fails=$(wc -l < "$T/burst.fail")
[ "$fails" -eq 0 ] || { sort "$T/burst.err" | uniq -c >&2; die "$fails of 200 concurrent status calls failed"; }

step "600 raw clients at once (more than the old table of 256): all answered"
ok=$(clients burst "$SOCK" 600)
[ "$ok" = 600 ] || die "only $ok of 600 concurrent status requests were answered"
stop_daemon

# A daemon allowed 256 descriptors takes at most 128 control connections.
cat > "$T/ckptsyncd-256" <<EOF2
#!/bin/sh
ulimit -n 256
exec "$CKPTSYNCD" "\$@"
EOF2
chmod +x "$T/ckptsyncd-256"
CKPTSYNCD_REAL=$CKPTSYNCD CKPTSYNCD="$T/ckptsyncd-256"
start_daemon

step "300 idle connections (the table holds 128): status still answers"
coproc HOLD { python3 "$T/clients.py" hold "$SOCK" 300 "$T/hold.ready"; }
wait_for 30 test -s "$T/hold.ready" || die "could not open 300 connections"
cks status --json > /dev/null || die "status failed with 300 idle connections"
grep -q "closing the ones idle longest" "$T/daemon.log" || die "the daemon did not say it closed idle connections"

step "every idle connection is closed: busy when evicted, badrequest after the idle timeout"
exec {HOLD[1]}>&-
read -r -u "${HOLD[0]}" held || die "no result from the idle connections"
wait "$HOLD_PID" || true
echo "$held"
case $held in closed=300\ *) ;; *) die "idle connections left open: $held" ;; esac
busy=${held#*busy=}; busy=${busy%% *}; idle=${held##*idle=}
[ "$busy" -gt 0 ] && [ "$idle" -gt 0 ] && [ $((busy + idle)) -eq 300 ] || die "unexpected answers: $held"
a=$(clients idle "$SOCK" "")
case $a in "ERR badrequest no%20complete%20request%20line"*) ;; *) die "idle client got: $a" ;; esac
a=$(clients idle "$SOCK" "CKPTSYNC/1 sta")
case $a in "ERR badrequest no%20complete%20request%20line"*) ;; *) die "slow client got: $a" ;; esac

step "128 parked waiters: not idle, and a new client is answered busy"
mv "$T/regions/c" "$T/regions/c.away"
echo "not a directory" > "$T/regions/c"
make_file "$T/watch/r1/step_1.pt" 1
cks commit "$T/watch/r1/step_1.pt" --wait durable --timeout 60 > /dev/null
coproc PARK { python3 "$T/clients.py" park "$SOCK" 128 "$T/park.ready" \
  "CKPTSYNC/1 flush wait=replicated deadline=120"; }
wait_for 30 test -s "$T/park.ready" || die "could not park 128 waiters"
[ "$(cat "$T/park.ready")" = "answered=0" ] || die "parked waiters were answered or closed: $(cat "$T/park.ready")"
wait_for 20 sh -c "'$CKPTSYNC' --config '$CONF' status 2>&1 | grep -q 'daemon is busy'" \
  || { cks status || true; die "status with every slot waiting was not answered busy"; }
for _ in $(seq 1 50); do
  set +e; cks status > /dev/null 2> "$T/err"; rc=$?; set -e
  grep -q "daemon is busy" "$T/err" && break
  sleep 0.2
done
grep -q "daemon is busy" "$T/err" || { cat "$T/err" >&2; die "busy status: no clear message"; }
[ "$rc" -ne 0 ] || die "a busy status exited 0"
exec {PARK[1]}>&-
wait "$PARK_PID" || true
# region c is failing on purpose (the waiters never complete): status exits 4 then
wait_for 20 daemon_answers cks || die "status after the waiters left"
CKPTSYNCD=$CKPTSYNCD_REAL
stop_daemon
echo "PASS"
