#!/usr/bin/env bash
# regions: dir s3 ceph
# A file rewritten in place while ckptsyncd reads or uploads it never
# yields a committed torn snapshot: every committed snapshot restores to
# exactly one of the versions that were written, never a mix.
. "$(dirname "$0")/lib.sh"
write_config 32K 128K 512K
set_settle 1
ck="$T/watch/r1/checkpoint-1"
mkdir -p "$ck" "$T/versions"
for v in $(seq 0 7); do head -c $((6 << 20)) /dev/urandom > "$T/versions/$v"; done
(cd "$T/versions" && sha256sum ./* | awk '{print $1}') > "$T/version.sums"
cp "$T/versions/0" "$ck/weights.bin"
start_daemon

# The writer commits only after a version is complete (what a framework
# does); the next rewrite then runs while that snapshot is read and uploaded.
step "rewrite the file in place, slowly, committing after each version"
python3 - "$ck/weights.bin" "$T/versions" "$CKPTSYNC" "$CONF" <<'PY'
import os, random, subprocess, sys, time
path, versions, cli, conf = sys.argv[1:]
random.seed(5)
for v in range(1, 8):
    data = open(os.path.join(versions, str(v)), "rb").read()
    with open(path, "r+b") as f:                 # same inode: the pin sees it too
        for off in range(0, len(data), 256 << 10):
            f.write(data[off:off + (256 << 10)])
            f.flush()
            time.sleep(random.uniform(0, 0.01))
    subprocess.Popen([cli, "--config", conf, "commit", os.path.dirname(path)],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(random.uniform(0, 0.05))
PY
cks flush --wait replicated --deadline 120 || { tail -30 "$T/daemon.log"; die "flush"; }
stop_daemon
echo "read again after a change: $(grep -c 'changed while it was read' "$T/daemon.log" || true)," \
     "dropped after a change on upload: $(grep -c 'changed after it was read' "$T/daemon.log" || true)"

step "every committed snapshot is one whole version"
cks ls --remote --run r1 --json > "$T/ls.json"
n=0
for id in $(json "$T/ls.json" '" ".join(x["id"] for x in d)'); do
  rm -rf "$T/r"
  cks restore --run r1 --snapshot "$id" --to "$T/r" -q || die "snapshot $id does not restore"
  sum=$(sha256sum "$T/r/checkpoint-1/weights.bin" | awk '{print $1}')
  grep -qx "$sum" "$T/version.sums" || die "snapshot $id is torn: its weights.bin is no version ever written"
  n=$((n + 1))
done
[ "$n" -ge 1 ] || die "no snapshot was committed"
last=$(sha256sum "$T/versions/7" | awk '{print $1}')
rm -rf "$T/r"; cks restore --run r1 --latest --to "$T/r" -q
[ "$(sha256sum "$T/r/checkpoint-1/weights.bin" | awk '{print $1}')" = "$last" ] \
  || die "latest is not the final version"
cks fsck -q || die "fsck"
echo "daemon-torn: ok ($n snapshots, each one whole version)"
