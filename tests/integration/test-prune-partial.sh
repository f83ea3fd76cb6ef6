#!/usr/bin/env bash
# regions: dir
# A manifest left partial by a writer killed mid-PUT (a store whose PUTs
# are not atomic keeps the partial object), unreadable in every region and
# committed in none, is no reference: prune goes on (and says so), and
# every committed snapshot keeps its chunks.  A committed snapshot whose
# manifest is unreadable everywhere still stops prune: it cannot tell
# which chunks that snapshot needs.
. "$(dirname "$0")/lib.sh"
write_config 32K 128K 512K
cat >> "$CONF" <<'C'
[prune]
grace = 0
C

step "a committed snapshot, and a partial manifest nobody committed"
make_file "$T/src/checkpoint-1/weights.bin" 2
cks snapshot "$T/src/checkpoint-1" --run r -q
id=$(cks ls --remote --run r --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
printf 'ckptsync-manif' > "$T/regions/c/snapshots/r/20261201T000000.000000Z-deadbeef"

step "prune goes on past the partial manifest, and says so"
cks prune --grace 0 --json > "$T/p.json" 2> "$T/p.err" || { cat "$T/p.err"; die "prune stopped at a partial, uncommitted manifest"; }
[ "$(json "$T/p.json" 'd["uncommitted_manifests"]')" = 1 ] || { cat "$T/p.json"; die "uncommitted_manifests is not 1"; }
grep -q "no valid manifest and no commit record" "$T/p.err" || { cat "$T/p.err"; die "no warning naming the partial manifest"; }
cks restore --run r --latest --to "$T/rst" -q
cmp "$T/src/checkpoint-1/weights.bin" "$T/rst/checkpoint-1/weights.bin" || die "restore after prune"

step "a committed snapshot with no readable manifest anywhere still stops prune"
for rg in a b c; do printf 'ckptsync-manif' > "$T/regions/$rg/snapshots/r/$id"; done
expect_fail 1 cks prune --grace 0
grep -q "prune stops" "$T/err" || { cat "$T/err"; die "prune did not stop at a committed snapshot it cannot read"; }
echo ok
