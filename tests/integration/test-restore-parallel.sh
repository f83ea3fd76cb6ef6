#!/usr/bin/env bash
# regions: dir
# encrypted: yes
# Restore on every core (#10 item 3): fetch's parts decode and verify on
# their own threads and hand chunks to restore concurrently, which writes
# them and computes each file's digest in chunk order (early chunks kept
# in memory, or read back when the memory budget is small).  The same
# snapshot (one large file, several small ones, a file of zeros, an empty
# file) is restored with 1, 2 and 5 workers, with a tiny memory budget
# (windows of one request, early chunks read back), and with every chunk
# of one region damaged (failover while other parts run): bit for bit every time.  The
# suite runs this under ThreadSanitizer too (tests/run.sh).
. "$(dirname "$0")/lib.sh"
write_config 64K 128K 512K

ck="$T/watch/run1/ckpt"
mkdir -p "$ck/sub"
head -c $((24 << 20)) /dev/urandom > "$ck/optimizer.pt"
for i in 1 2 3 4 5; do head -c $((i * 300000)) /dev/urandom > "$ck/sub/shard-$i.bin"; done
head -c $((2 << 20)) /dev/zero > "$ck/zeros.bin"
: > "$ck/empty"
printf '{"global_step": 3}\n' > "$ck/trainer_state.json"

step "snapshot"
cks snapshot "$ck" --run run1 --step 3 --json > "$T/s.json"
chunks=$(json "$T/s.json" 'd["chunks"]')
echo "$chunks chunks"
[ "$chunks" -ge 150 ] || die "only $chunks chunks: too few for several parts"

# restore_with NAME WORKERS [MEMORY]: a fresh instance restores with these
# settings; the tree must be bit for bit.
restore_with() {
  sed -e "/^\[daemon\]/a workers = $2" "$CONF" > "$T/$1.conf"
  [ -n "${3:-}" ] && sed -i "/^\[daemon\]/a memory = $3" "$T/$1.conf"
  rm -rf "$STATE" "$T/r-$1"
  "$CKPTSYNC" --config "$T/$1.conf" restore --run run1 --latest --to "$T/r-$1" --json > "$T/$1.json" 2> "$T/$1.err" ||
    { cat "$T/$1.err"; die "restore ($1) failed"; }
  diff -r "$ck" "$T/r-$1/ckpt" > /dev/null || die "restore ($1) differs"
}

step "1, 2 and 5 workers: bit for bit"
restore_with w1 1
restore_with w2 2
restore_with w5 5

step "a tiny memory budget: one request per window, early chunks read back"
restore_with small 5 2M

step "a damaged region while the parts run: failover, bit for bit"
n=0
for f in $(find "$T/regions/a/chunks" -type f); do
  printf 'XXXX' | dd of="$f" bs=1 seek=40 conv=notrunc status=none; n=$((n + 1))
done
echo "damaged $n chunk objects in region a"
restore_with damaged 5
[ "$(json "$T/damaged.json" 'd["regions"]["a"]')" = 0 ] || { cat "$T/damaged.json"; die "a damaged chunk of region a was used"; }
[ "$(json "$T/damaged.json" 'd["failovers"]')" -ge $((chunks / 4)) ] || { cat "$T/damaged.json"; die "too few failovers for a region that is all damaged"; }
echo "ok"
