#!/usr/bin/env bash
# regions: dir
# Sparse files come back sparse (#13 item 10), as with tar -S or rsync -S:
# restore creates each file at its full size and does not write chunks
# that are all zeros, so holes stay holes.  A 64 MiB file holding 1 MiB of
# data (and a 3 MiB run of written zeros) allocates well under 64 MiB
# when restored, with the same bytes; from the CLI's snapshot and the
# daemon's.
. "$(dirname "$0")/lib.sh"
write_config 256K 1M 4M

ck="$T/watch/run1/ckpt"
mkdir -p "$ck"
truncate -s 64M "$ck/sparse.bin"
head -c $((1 << 20)) /dev/urandom | dd of="$ck/sparse.bin" bs=1M seek=10 conv=notrunc status=none
head -c $((3 << 20)) /dev/zero | dd of="$ck/sparse.bin" bs=1M seek=30 conv=notrunc status=none
head -c 12345 /dev/urandom > "$ck/tail-data.bin"
truncate -s 20M "$ck/hole-only.bin"

step "snapshot and restore"
cks snapshot "$ck" --run run1 --step 1 -q
cks restore --run run1 --latest --to "$T/r" -q
cmp "$ck/sparse.bin" "$T/r/ckpt/sparse.bin" || die "sparse.bin differs"
cmp "$ck/tail-data.bin" "$T/r/ckpt/tail-data.bin" || die "tail-data.bin differs"
cmp "$ck/hole-only.bin" "$T/r/ckpt/hole-only.bin" || die "hole-only.bin differs"
[ "$(stat -c %s "$T/r/ckpt/sparse.bin")" = $((64 << 20)) ] || die "wrong size"

step "holes stay holes"
alloc=$(( $(stat -c '%b * %B' "$T/r/ckpt/sparse.bin") ))
echo "restored sparse.bin allocates $alloc bytes of $((64 << 20))"
# the 1 MiB of data plus the chunks it shares with zeros (max 4 MiB each side)
[ "$alloc" -le $(( (1 + 2 * 4 + 1) << 20 )) ] || die "restored sparse.bin allocates $alloc bytes: holes were written"
alloc=$(( $(stat -c '%b * %B' "$T/r/ckpt/hole-only.bin") ))
[ "$alloc" -le $((1 << 20)) ] || die "restored hole-only.bin allocates $alloc bytes"

step "through the daemon's snapshot of a unit"
set_settle 1
start_daemon
ck2="$T/watch/run2/ckpt"
mkdir -p "$ck2"
cp --sparse=always "$ck/sparse.bin" "$ck2/sparse.bin"
cks commit "$ck2" --wait durable --timeout 60 -q || { tail -20 "$T/daemon.log"; die "commit"; }
stop_daemon
cks restore --run run2 --latest --to "$T/r2" -q
cmp "$ck/sparse.bin" "$T/r2/ckpt/sparse.bin" || die "daemon: sparse.bin differs"
alloc=$(( $(stat -c '%b * %B' "$T/r2/ckpt/sparse.bin") ))
[ "$alloc" -le $(( (1 + 2 * 4 + 1) << 20 )) ] || die "daemon: restored sparse.bin allocates $alloc bytes"
echo "restore-sparse: ok"
