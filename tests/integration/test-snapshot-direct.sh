#!/usr/bin/env bash
# The CLI's snapshot writes its chunk objects like the daemon's (#24 item
# 5): from page-aligned buffers, so a dir region writes each object of
# 1 MiB or more around the page cache (O_DIRECT, base/fileio.c), its last
# partial block buffered.  Seen from outside: after a snapshot of 24 MiB
# of random data (2 MiB chunks), the regions' chunk objects are almost
# entirely absent from the page cache (fincore), where buffered writes
# leave every page of them cached.  Skipped where the scratch directory's
# file system takes no O_DIRECT (tmpfs before Linux 6.6, FUSE): then
# every write is buffered by design, or is on tmpfs.
. "$(dirname "$0")/lib.sh"
write_config 1M 2M 4M
command -v fincore > /dev/null || skip "needs fincore (util-linux)"
# tmpfs keeps every file in memory: its pages are resident whatever the writer did
[ "$(stat -f -c %T "$T")" != tmpfs ] || skip "the scratch directory is on tmpfs"
python3 - "$T" <<'PY' || skip "the scratch directory's file system takes no O_DIRECT"
import mmap, os, sys
fd = os.open(os.path.join(sys.argv[1], "probe"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
buf = mmap.mmap(-1, 4096)
os.write(fd, buf)
os.close(fd)
PY

src="$T/src/checkpoint-1"
mkdir -p "$src"
head -c $((24 << 20)) /dev/urandom > "$src/model.safetensors"
cks snapshot "$src" --run r1 --step 1 > /dev/null

# cached REGION: "cached-bytes total-bytes" of the region's chunk objects.
cached() {
  find "$T/regions/$1/chunks" -type f -size +1M -print0 |
    xargs -0 fincore -b -n -o RES,SIZE | awk '{ r += $1; s += $2 } END { print r + 0, s + 0 }'
}
for r in a b c; do
  step "region $r: the chunk objects are not in the page cache"
  read -r res size <<< "$(cached "$r")"
  echo "cached $res of $size bytes"
  [ "$size" -ge $((20 << 20)) ] || die "region $r holds only $size bytes of large chunk objects"
  # each object's last partial block (under 4 KiB) may stay cached
  [ "$res" -le $((size / 20)) ] || die "region $r: $res of $size bytes in the page cache (buffered writes)"
done
cks verify --run r1 > /dev/null || die "verify failed after the snapshot"
echo "ok"
