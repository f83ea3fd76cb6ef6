#!/usr/bin/env bash
# regions: dir
# encrypted: yes
# A file rewritten in place keeping its size and modification time (a
# tool that restores mtime, os.utime after a save) is taken for what it
# holds now, not for the bytes of its last snapshot: by `ckptsync
# snapshot` and by the daemon, whose identity (index_file_key_of) is the
# same, ctime included (#13 item 5).
. "$(dirname "$0")/lib.sh"
write_config 32K 128K 512K
set_settle 1

# rewrite FILE: new random bytes of the same size, the old atime and mtime back.
rewrite() {
  python3 - "$1" <<'PY'
import os, sys
p = sys.argv[1]
st = os.stat(p)
with open(p, "r+b") as f:
    f.write(os.urandom(st.st_size))
os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
st2 = os.stat(p)
assert (st2.st_size, st2.st_mtime_ns, st2.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
PY
}

step "ckptsync snapshot: the rewritten file's new bytes are stored"
make_file "$T/src/checkpoint-1/weights.bin" 2
cks snapshot "$T/src/checkpoint-1" --run cli -q
rewrite "$T/src/checkpoint-1/weights.bin"
cks snapshot "$T/src/checkpoint-1" --run cli -q
cks restore --run cli --latest --to "$T/out-cli" -q
cmp "$T/src/checkpoint-1/weights.bin" "$T/out-cli/checkpoint-1/weights.bin" ||
  die "snapshot restored the old bytes of a file rewritten in place"

step "the daemon: an unchanged unit committed again after its pin is gone is not read again"
start_daemon
ck="$T/watch/r1/checkpoint-2"
make_file "$ck/weights.bin" 16
cks commit "$ck" --wait replicated --timeout 60 -q
pid=$DAEMON_PID
r0=$(awk '/^rchar/ {print $2}' "/proc/$pid/io")
cks commit "$ck" --wait replicated --timeout 60 -q
r1=$(awk '/^rchar/ {print $2}' "/proc/$pid/io")
echo "    bytes the daemon read for the second commit: $((r1 - r0))"
[ $((r1 - r0)) -lt $((8 << 20)) ] || die "the daemon read the unchanged 16 MiB file again ($((r1 - r0)) bytes)"

step "the daemon: commit --wait replicated after an in-place rewrite acknowledges the new bytes"
rewrite "$ck/weights.bin"
cks commit "$ck" --wait replicated --timeout 60 -q
stop_daemon
cks restore --run r1 --latest --to "$T/out-daemon" -q
cmp "$ck/weights.bin" "$T/out-daemon/checkpoint-2/weights.bin" ||
  die "the daemon acknowledged the old bytes of a file rewritten in place"
echo ok
