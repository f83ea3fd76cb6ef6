#!/usr/bin/env bash
# Several files of a unit read, cut and hashed at once (#24 item 4, the
# ingest side: `[daemon] readers`, default `workers`).  The same
# checkpoint of many files of uneven sizes (a sharded checkpoint, a
# duplicate, an empty file, a symlink, nested directories) snapshotted
# into fresh repositories with readers = 1 and with several readers gives
# manifests whose file and chunk lines are the same, line for line, each
# time (the readers finish in whatever order their threads run); what the
# parallel one stored restores bit for bit.  `snapshot --json` says how
# many files were read at once.  The daemon's ingest of the same unit
# (readers = 4) gives the same lines.
. "$(dirname "$0")/lib.sh"
write_config 64K 256K 1M
sed -i '/^\[daemon\]/a workers = 4' "$CONF"

src="$T/data/checkpoint-7"
mkdir -p "$src/model" "$src/optim/deep"
for i in $(seq 0 9); do
  head -c $((200000 + i * 173531)) /dev/urandom > "$src/model/shard-$i.safetensors"
done
for i in 0 1 2; do head -c $((900000 - i * 300000)) /dev/urandom > "$src/optim/deep/rank-$i.pt"; done
cp "$src/model/shard-3.safetensors" "$src/optim/copy-of-3.bin" # the same chunks twice
: > "$src/optim/empty"
printf '{"global_step": 7}\n' > "$src/trainer_state.json"
ln -s model/shard-0.safetensors "$src/latest-shard"

# snap N: a snapshot with readers = N into repository N.M (fresh state and
# regions each time); its JSON in $T/s.N.M.json, its manifest's file and
# chunk lines in $T/lines.N.M.
snap() {
  local n=$1 m=$2 conf="$T/conf.$1.$2" d="$T/repo.$1.$2"
  mkdir -p "$d/a" "$d/b" "$d/c"
  sed -e "s#$T/regions/#$d/#" -e "s#^state = .*#state = $d/state#" \
    -e "/^\[daemon\]/a readers = $n" "$CONF" > "$conf"
  "$CKPTSYNC" --config "$conf" snapshot "$src" --run r1 --step 7 --json > "$T/s.$n.$m.json" \
    || die "snapshot with readers = $n"
  local id
  id=$(json "$T/s.$n.$m.json" 'd["id"]')
  grep -E '^[fdlhc] ' "$d/a/snapshots/r1/$id" > "$T/lines.$n.$m" || die "no manifest in $d/a"
}

step "readers = 1: the serial manifest"
snap 1 0
[ "$(json "$T/s.1.0.json" 'd["readers"]')" = 1 ] || die "readers = 1 did not read serially"
[ "$(grep -c '^f ' "$T/lines.1.0")" = 16 ] || die "the serial manifest has not 16 regular files"
[ "$(grep -c '^c ' "$T/lines.1.0")" -gt 30 ] || die "too few chunks to tell an order"

step "several readers, three times: the same file and chunk lines"
for m in 1 2 3; do
  snap 4 "$m"
  r=$(json "$T/s.4.$m.json" 'd["readers"]')
  [ "$r" -ge 2 ] || die "readers = 4 read $r file(s) at once"
  cmp -s "$T/lines.1.0" "$T/lines.4.$m" \
    || { diff "$T/lines.1.0" "$T/lines.4.$m" | head >&2; die "manifest differs with readers = 4 (try $m)"; }
done

step "the default (readers = workers) reads several files at once too"
sed -e "s#$T/regions/#$T/repo.d/#" -e "s#^state = .*#state = $T/repo.d/state#" "$CONF" > "$T/conf.d"
mkdir -p "$T/repo.d/a" "$T/repo.d/b" "$T/repo.d/c"
"$CKPTSYNC" --config "$T/conf.d" snapshot "$src" --run r1 --step 7 --json > "$T/s.d.json"
[ "$(json "$T/s.d.json" 'd["readers"]')" -ge 2 ] || die "the default read serially"

step "what the parallel snapshot stored restores bit for bit"
"$CKPTSYNC" --config "$T/conf.4.3" restore --run r1 --latest --to "$T/out" -q || die "restore"
same_tree "$src" "$T/out/checkpoint-7"
"$CKPTSYNC" --config "$T/conf.4.3" verify --run r1 > "$T/v.txt" || { cat "$T/v.txt"; die "verify"; }
step "the daemon's ingest (readers = 4, the same core) writes the serial manifest's lines too"
sed -i "/^\[daemon\]/a readers = 4" "$CONF"
set_settle 1
start_daemon
mkdir -p "$T/watch/r1"
cp -a "$src" "$T/staged"   # then renamed in whole: a copy in place could be
mv "$T/staged" "$T/watch/r1/checkpoint-7"   # taken half-done (settle = 1)
has_manifest() { [ -n "$(ls "$T/regions/a/snapshots/r1/" 2> /dev/null)" ]; }
wait_for 60 has_manifest || { tail "$T/daemon.log"; die "the daemon took no snapshot"; }
cks flush --wait replicated --deadline 60 || { tail "$T/daemon.log"; die "flush"; }
stop_daemon
m=$(ls "$T/regions/a/snapshots/r1/")
grep -E '^[fdlhc] ' "$T/regions/a/snapshots/r1/$m" > "$T/lines.daemon"
cmp -s "$T/lines.1.0" "$T/lines.daemon" \
  || { diff "$T/lines.1.0" "$T/lines.daemon" | head >&2; die "the daemon's manifest differs"; }
echo PASS
