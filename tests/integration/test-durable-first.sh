#!/usr/bin/env bash
# regions: dir
# Durable first (#10 item 4): with `[daemon] durable_first = on`, the
# regions past the first `quorum` regions that work hold back while a
# snapshot is not yet durable, so a shared uplink carries the newest
# snapshot to a quorum first.  Three dir regions, quorum 2: region c writes
# no chunk of the snapshot before a and b have both committed it (file
# times in the regions, an order, not a duration), and it catches up to
# hold every chunk.  With region a dead, c is next in line and the
# snapshot still becomes durable (b and c).  Status reports the setting.
. "$(dirname "$0")/lib.sh"
write_config 64K 128K 512K
sed -i "/^\[daemon\]/a durable_first = on" "$CONF"
set_settle 1

mk_ckpt() { # mk_ckpt DIR
  mkdir -p "$1"
  for i in 1 2 3; do head -c $((4 << 20)) /dev/urandom > "$1/part-$i.bin"; done
  printf '{"global_step": 1}\n' > "$1/trainer_state.json"
}
ck1="$T/watch/run1/checkpoint-1"
mk_ckpt "$ck1"

step "status reports durable_first"
start_daemon
cks status --json > "$T/st.json"
[ "$(json "$T/st.json" 'd["config"]["durable_first"]')" = on ] || { cat "$T/st.json"; die "status does not say durable_first = on"; }

step "region c writes nothing of the snapshot before a and b committed it"
cks commit "$ck1" --step 1 --wait replicated --timeout 120 > /dev/null || { tail -20 "$T/daemon.log"; die "commit failed"; }
python3 - "$T/regions" <<'PY' || die "region c uploaded before the snapshot was durable"
import os, sys
root = sys.argv[1]
def times(region, top):
    out = []
    for d, _, fs in os.walk(os.path.join(root, region, top)):
        out += [os.stat(os.path.join(d, f)).st_mtime_ns for f in fs]
    return out
durable = max(min(times("a", "commits")), min(times("b", "commits")))
c_chunks = times("c", "chunks")
a_chunks = times("a", "chunks")
print(f"{len(a_chunks)} chunks in a, {len(c_chunks)} in c; c's first {(min(c_chunks) - durable) / 1e6:.1f} ms after durable")
assert len(c_chunks) == len(a_chunks), "region c did not catch up"
assert min(c_chunks) >= durable, "a chunk reached c before a and b had committed"
PY
stop_daemon

step "a dead preferred region does not hold durability back: b and c"
mv "$T/regions/a" "$T/a.gone"
ck2="$T/watch/run1/checkpoint-2"
mk_ckpt "$ck2"
start_daemon
cks commit "$ck2" --step 2 --wait durable --timeout 60 > /dev/null ||
  { tail -20 "$T/daemon.log"; die "not durable with region a dead"; }
[ -n "$(find "$T/regions/c/commits" -name '*' -type f -newer "$ck2/part-1.bin")" ] || die "region c did not commit the snapshot"
stop_daemon
echo "ok"
