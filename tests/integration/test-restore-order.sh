#!/usr/bin/env bash
# [restore] order (#24 item 1): GROUP:PATTERN items in the configuration
# override the built-in group rules, first match first.  A DCP-style
# checkpoint (.metadata, __0_0.distcp, __1_0.distcp, extra_state.bin):
#   1. without the key, the built-in rules: both shards and extra_state.bin
#      are weights, .metadata is metadata
#   2. order = optimizer:__1_*.distcp metadata:extra_*: __1_0.distcp is
#      optimizer state (placed last, left out by --exclude-optimizer),
#      extra_state.bin metadata (placed before the weights)
#   3. a malformed item is a configuration error naming the key
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M

src="$T/src/checkpoint-5"
mkdir -p "$src"
printf '{"state_dict_metadata": {}}\n' > "$src/.metadata"
head -c $((2 << 20)) /dev/urandom > "$src/__0_0.distcp"
head -c $((3 << 20)) /dev/urandom > "$src/__1_0.distcp"
head -c $((2 << 20)) /dev/urandom > "$src/extra_state.bin"
cks snapshot "$src" --run dcp --step 5 > /dev/null

# groups FILE: "path=group" of each placed line, in the order placed.
groups() {
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if "placed" in d: print(d["placed"].split("/", 1)[1] + "=" + d["group"])' "$1"
}

step "built-in rules"
cks restore --run dcp --latest --to "$T/out1" --progressive --json > "$T/p1.out"
groups "$T/p1.out" > "$T/g1"
for want in .metadata=metadata __0_0.distcp=weights __1_0.distcp=weights extra_state.bin=weights; do
  grep -qx -- "$want" "$T/g1" || { cat "$T/g1"; die "built-in rules: expected $want"; }
done
same_tree "$src" "$T/out1/checkpoint-5"

step "[restore] order overrides them"
printf '[restore]\norder = optimizer:__1_*.distcp metadata:extra_* weights:*.distcp\n' >> "$CONF"
rm -rf "$STATE"
cks restore --run dcp --latest --to "$T/out2" --progressive --json > "$T/p2.out"
groups "$T/p2.out" > "$T/g2"
printf '%s\n' .metadata=metadata extra_state.bin=metadata __0_0.distcp=weights \
  __1_0.distcp=optimizer > "$T/g2.want"
# metadata files in either order, then the weights, then the optimizer state
[ "$(sort "$T/g2" | tr '\n' ' ')" = "$(sort "$T/g2.want" | tr '\n' ' ')" ] ||
  { cat "$T/g2"; die "[restore] order: wrong groups"; }
[ "$(tail -2 "$T/g2" | tr '\n' ' ')" = "__0_0.distcp=weights __1_0.distcp=optimizer " ] ||
  { cat "$T/g2"; die "[restore] order: not placed group by group"; }
same_tree "$src" "$T/out2/checkpoint-5"
rm -rf "$STATE"
cks restore --run dcp --latest --to "$T/out3" --exclude-optimizer --json > "$T/p3.out"
[ ! -e "$T/out3/checkpoint-5/__1_0.distcp" ] || die "--exclude-optimizer kept __1_0.distcp"
cmp "$src/__0_0.distcp" "$T/out3/checkpoint-5/__0_0.distcp" || die "__0_0.distcp differs"

step "a malformed item is a configuration error"
sed -i 's/^order = .*/order = optimizer:*.pt model:*.bin/' "$CONF"
set +e
cks restore --run dcp --latest --to "$T/out4" > /dev/null 2> "$T/err"
rc=$?
set -e
[ "$rc" != 0 ] || die "a malformed [restore] order was accepted"
grep -q "\[restore\] order: 'model:\*.bin' is not GROUP:PATTERN" "$T/err" ||
  { cat "$T/err"; die "the error does not name the key and the item"; }
[ ! -e "$T/out4" ] || die "a configuration error left a target"
echo "ok"
