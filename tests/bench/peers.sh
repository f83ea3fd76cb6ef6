#!/usr/bin/env bash
# peers.sh — ckptsync next to the tools a user would otherwise run
# (restic, borg, casync, rclone), on the same data, in the same run.
# A benchmark, not a test: it prints times, rates and ratios and never
# fails on time.
#
#   tests/bench/peers.sh [SIZE_MIB]          default 2048 (2 GiB)
#
# Environment:
#   SIZE_MIB     data size when no argument is given
#   BENCH_DIR    where the scratch directory goes (default /tmp); it is
#                removed at the end.  Needs about 7 x SIZE free.
#   PEERS_TOOLS  which tools to run (default "ckptsync restic borg casync rclone")
#   CKPTSYNC     a ckptsync binary to use instead of building build/ckptsync
#
# What it does:
# - Installs what it needs with apt-get (restic, borgbackup, casync, rclone;
#   as root); a tool that cannot be installed is skipped and says why.
#   Builds ckptsync (deploy/build.sh, release) unless CKPTSYNC is set.
# - Data: checkpoint-100/, safetensors shards of random tensors (random
#   bytes: trained weights do not compress) plus small json files; then
#   checkpoint-200/, the same with a quarter of the tensors rewritten
#   (partial fine-tuning) and trainer_state.json updated.
# - For each tool: back up v1, back up v2 (the incremental), measure what
#   v2 added to the repository, restore v2 into an empty directory and
#   compare it with `diff -r`.
#     ckptsync  three dir regions (its real job: three replicas), default
#               chunker; `snapshot`, then `restore --latest` with the local
#               index deleted first (a new instance has none).
#     restic    three repositories, one `backup` into each (x3, the same
#               three copies ckptsync makes), and the first alone (x1).
#     borg      one repository, `init -e none`, `create`, `extract`.
#     casync    one store, `make` to a .caidx, `extract`.
#     rclone    `copy` to a local directory (no dedup: the raw copy cost).
# - Page caches are dropped before every timed command when the kernel
#   lets us; every time includes a final sync(1), so that a tool leaving
#   its writes in the page cache is not credited for it.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
SIZE_MIB=${1:-${SIZE_MIB:-2048}}
TOOLS=${PEERS_TOOLS:-ckptsync restic borg casync rclone}
case $SIZE_MIB in '' | *[!0-9]*) echo "usage: $0 [SIZE_MIB]" >&2; exit 2 ;; esac
[ "$SIZE_MIB" -ge 64 ] || { echo "peers.sh: SIZE_MIB must be at least 64" >&2; exit 2; }

S=$(mktemp -d "${BENCH_DIR:-/tmp}/cks-peers.XXXXXX")
trap 'rm -rf "$S"' EXIT
RES=$S/results LOGS=$S/logs DATA=$S/data
mkdir -p "$RES" "$LOGS" "$DATA" "$S/repo" "$S/restore" "$S/cache"
export XDG_CACHE_HOME=$S/cache

say() { echo "peers: $*" >&2; }

# ---- tools ----------------------------------------------------------------

declare -A SKIP=()
. "$top/tests/bench/benchlib.sh"

peers=()
for t in $TOOLS; do [ "$t" = ckptsync ] || peers+=("$t"); done
ensure_peers peers.sh "${peers[@]}"

if [ -n "${CKPTSYNC:-}" ]; then
  CKS=$CKPTSYNC
else
  CKS=$top/build/ckptsync
  say "building ckptsync (deploy/build.sh)"
  if ! "$top/deploy/build.sh" > "$LOGS/build.log" 2>&1; then
    tail -20 "$LOGS/build.log" >&2
    [ -x "$CKS" ] || { echo "peers.sh: ckptsync does not build" >&2; exit 1; }
    say "WARNING: the build failed; using the existing $CKS, which may be stale"
  fi
fi
[ -x "$CKS" ] || { echo "peers.sh: no ckptsync binary at $CKS" >&2; exit 1; }

# ---- the machine ----------------------------------------------------------

need=$((SIZE_MIB * 7))
avail=$(df -Pm "$S" | awk 'NR == 2 {print $4}')
[ "$avail" -ge "$need" ] ||
  { echo "peers.sh: $S has $avail MiB free, needs about $need MiB" >&2; exit 1; }


# ---- data -------------------------------------------------------------------

say "writing ${SIZE_MIB} MiB of checkpoint data, twice"
python3 - "$DATA" "$SIZE_MIB" > "$RES/data" << 'PY'
import json, os, random, struct, sys

out, size_mib = sys.argv[1], int(sys.argv[2])
rnd = random.Random(20261201)
json_budget = 64 << 10
total = (size_mib << 20) - json_budget

# Tensors of 1-64 MiB (bf16, 4096 columns), cut to fill the size exactly.
tensors, left, i = [], total, 0
while left > (1 << 20):
    size = min(rnd.randint(1, 64) << 20, left - (left % 8192))
    rows = size // 8192
    tensors.append(("model.layers.%d.%s.weight" % (i // 4, ("self_attn.q_proj", "self_attn.o_proj",
                    "mlp.up_proj", "mlp.down_proj")[i % 4]), rows, rows * 8192))
    left -= rows * 8192
    i += 1
changed = set(rnd.sample(range(len(tensors)), max(1, len(tensors) // 4)))

# Shards of about 256 MiB, as a trainer's max_shard_size would cut them.
nshards = max(2, round(size_mib / 256))
per = max(1, -(-len(tensors) // nshards))
shards = [tensors[k:k + per] for k in range(0, len(tensors), per)]
nshards = len(shards)

def header(shard):
    h, off = {"__metadata__": {"format": "pt"}}, 0
    for name, rows, size in shard:
        h[name] = {"dtype": "BF16", "shape": [rows, 4096], "data_offsets": [off, off + size]}
        off += size
    b = json.dumps(h, separators=(",", ":")).encode()
    b += b" " * (-len(b) % 8)
    return struct.pack("<Q", len(b)) + b

v1, v2 = os.path.join(out, "checkpoint-100"), os.path.join(out, "checkpoint-200")
os.makedirs(v1)
os.makedirs(v2)
weight_map, changed_bytes, idx = {}, 0, 0
for s, shard in enumerate(shards):
    name = "model-%05d-of-%05d.safetensors" % (s + 1, nshards)
    with open(os.path.join(v1, name), "wb") as a, open(os.path.join(v2, name), "wb") as b:
        h = header(shard)
        a.write(h)
        b.write(h)
        for tname, rows, size in shard:
            weight_map[tname] = name
            d = os.urandom(size)
            a.write(d)
            if idx in changed:
                d = os.urandom(size)
                changed_bytes += size
            b.write(d)
            idx += 1

config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": idx // 4 + 1,
          "num_attention_heads": 32, "vocab_size": 128256, "torch_dtype": "bfloat16"}
small = {
    "config.json": config,
    "generation_config.json": {"bos_token_id": 1, "eos_token_id": 2, "do_sample": True},
    "model.safetensors.index.json": {"metadata": {"total_size": total - left},
                                     "weight_map": weight_map},
    "tokenizer_config.json": {"model_max_length": 8192, "padding_side": "right"},
    "special_tokens_map.json": {"bos_token": "<s>", "eos_token": "</s>"},
}
for step, d in ((100, v1), (200, v2)):
    for name, obj in small.items():
        with open(os.path.join(d, name), "w") as f:
            json.dump(obj, f, indent=2)
    hist = [{"step": s, "loss": round(2.5 / (1 + s / 50), 4), "learning_rate": 1e-4}
            for s in range(10, step + 1, 10)]
    with open(os.path.join(d, "trainer_state.json"), "w") as f:
        json.dump({"global_step": step, "epoch": step / 1000, "log_history": hist}, f, indent=2)

print(len(tensors), len(changed), changed_bytes, nshards, len(small) + 1)
PY
read -r ntensors nchanged changed_bytes nshards njson < "$RES/data"
DATA_BYTES=$(du -sb --apparent-size "$DATA/checkpoint-200" | cut -f1)


# timed KEY CMD...: runs CMD (output to the tool's log) from cold caches
# and writes the seconds it took, up to a final sync, to $RES/KEY.
timed() {
  local key=$1 t0 t1
  shift
  drop_caches
  t0=$(date +%s.%N)
  "$@" >> "$LOG" 2>&1
  sync
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f\n", b - a}' > "$RES/$key"
}


# ---- one function per tool (each runs in a subshell with set -e) ----------

tool_ckptsync() {
  local R=$S/repo/ckptsync conf
  conf=$R/ckptsync.conf
  mkdir -p "$R/a" "$R/b" "$R/c"
  cat > "$conf" << EOF
[daemon]
watch = $DATA
state = $R/state
[region.a]
kind = dir
path = $R/a
[region.b]
kind = dir
path = $R/b
[region.c]
kind = dir
path = $R/c
EOF
  timed ckptsync.v1 "$CKS" --config "$conf" snapshot "$DATA/checkpoint-100" --run bench --step 100
  local before
  before=$(bytes_of "$R/a" "$R/b" "$R/c")
  timed ckptsync.v2 "$CKS" --config "$conf" snapshot "$DATA/checkpoint-200" --run bench --step 200
  echo $(($(bytes_of "$R/a" "$R/b" "$R/c") - before)) > "$RES/ckptsync.added"
  echo 3 > "$RES/ckptsync.copies"
  rm -rf "$R/state"
  timed ckptsync.restore "$CKS" --config "$conf" restore --run bench --latest \
    --to "$S/restore/ckptsync"
  verify ckptsync "$S/restore/ckptsync/checkpoint-200"
}

tool_restic() {
  local R=$S/repo/restic i before
  export RESTIC_PASSWORD=ckptsync-bench RESTIC_CACHE_DIR=$S/cache/restic
  for i in 1 2 3; do restic init -q --repo "$R/r$i" >> "$LOG" 2>&1; done
  cd "$DATA"
  for i in 1 2 3; do timed "restic.v1.$i" restic -q --repo "$R/r$i" backup checkpoint-100; done
  before=$(bytes_of "$R/r1" "$R/r2" "$R/r3")
  for i in 1 2 3; do timed "restic.v2.$i" restic -q --repo "$R/r$i" backup checkpoint-200; done
  echo $(($(bytes_of "$R/r1" "$R/r2" "$R/r3") - before)) > "$RES/restic.added"
  echo 3 > "$RES/restic.copies"
  timed restic.restore restic -q --repo "$R/r1" restore latest --target "$S/restore/restic"
  verify restic "$(find "$S/restore/restic" -type d -name checkpoint-200 -print -quit)"
}

tool_borg() {
  local R=$S/repo/borg before
  export BORG_BASE_DIR=$S/cache/borg BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes
  export BORG_RELOCATED_REPO_ACCESS_IS_OK=yes
  mkdir -p "$R"
  borg init -e none "$R/repo" >> "$LOG" 2>&1
  cd "$DATA"
  timed borg.v1 borg create "$R/repo::v1" checkpoint-100
  before=$(bytes_of "$R/repo")
  timed borg.v2 borg create "$R/repo::v2" checkpoint-200
  echo $(($(bytes_of "$R/repo") - before)) > "$RES/borg.added"
  echo 1 > "$RES/borg.copies"
  mkdir -p "$S/restore/borg"
  cd "$S/restore/borg"
  timed borg.restore borg extract "$R/repo::v2"
  verify borg "$S/restore/borg/checkpoint-200"
}

tool_casync() {
  local R=$S/repo/casync before
  mkdir -p "$R/store"
  timed casync.v1 casync make --store="$R/store" "$R/v1.caidx" "$DATA/checkpoint-100"
  before=$(bytes_of "$R")
  timed casync.v2 casync make --store="$R/store" "$R/v2.caidx" "$DATA/checkpoint-200"
  echo $(($(bytes_of "$R") - before)) > "$RES/casync.added"
  echo 1 > "$RES/casync.copies"
  mkdir -p "$S/restore/casync"
  timed casync.restore casync extract --store="$R/store" "$R/v2.caidx" \
    "$S/restore/casync/checkpoint-200"
  verify casync "$S/restore/casync/checkpoint-200"
}

tool_rclone() {
  local R=$S/repo/rclone before
  mkdir -p "$R/dest"
  export RCLONE_CONFIG=$R/rclone.conf
  : > "$RCLONE_CONFIG"
  timed rclone.v1 rclone copy "$DATA/checkpoint-100" "$R/dest/checkpoint-100"
  before=$(bytes_of "$R/dest")
  timed rclone.v2 rclone copy "$DATA/checkpoint-200" "$R/dest/checkpoint-200"
  echo $(($(bytes_of "$R/dest") - before)) > "$RES/rclone.added"
  echo 1 > "$RES/rclone.copies"
  timed rclone.restore rclone copy "$R/dest/checkpoint-200" "$S/restore/rclone/checkpoint-200"
  verify rclone "$S/restore/rclone/checkpoint-200"
}

version_of() {
  case $1 in
    ckptsync) "$CKS" --version 2>&1 | sed -n 1p ;;
    restic) restic version | awk '{print $1, $2}' ;;
    borg) borg --version ;;
    casync) casync --version | sed -n 1p ;;
    rclone) rclone version | sed -n 1p ;;
  esac
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for t in $TOOLS; do
  if [ -n "${SKIP[$t]:-}" ]; then
    say "$t: skipped (${SKIP[$t]})"
    echo "${SKIP[$t]}" > "$RES/$t.skipped"
    continue
  fi
  version_of "$t" > "$RES/$t.version" 2>&1 || true
  say "$t: backup v1, backup v2, restore v2"
  LOG=$LOGS/$t.log
  set +e
  (
    set -e
    "tool_$t"
  )
  rc=$?
  set -e
  if [ $rc -ne 0 ]; then
    say "$t: FAILED (exit $rc); last lines of its log:"
    tail -15 "$LOG" >&2
    echo "exit $rc" > "$RES/$t.failed"
  fi
  rm -rf "${S:?}/repo/$t" "${S:?}/restore/$t" # free the space for the next tool
done

# ---- report -----------------------------------------------------------------

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

{
  echo "ckptsync vs peers, $(date -u +%Y-%m-%dT%H:%MZ)"
  machine
  disk_baseline
  if [ $CAN_DROP -eq 1 ]; then
    echo "page caches: dropped before every timed command (echo 3 > /proc/sys/vm/drop_caches)"
  else
    echo "page caches: NOT dropped (drop_caches not permitted here): reads may be warm"
  fi
} > "$RES/header"
python3 - "$RES" "$TOOLS" "$DATA_BYTES" "$SIZE_MIB" "$ntensors" "$nchanged" "$changed_bytes" \
  "$nshards" "$njson" << 'PY'
import os, sys

res, tools = sys.argv[1], sys.argv[2].split()
data, size_mib, ntensors, nchanged, changed, nshards, njson = map(int, sys.argv[3:10])

def get(key):
    p = os.path.join(res, key)
    return open(p).read().strip() if os.path.exists(p) else None

def num(key):
    v = get(key)
    return float(v) if v is not None else None

print(get("header"))
print("data: %d MiB per version: %d safetensors shards (%d tensors of 1-64 MiB, random bytes)"
      " + %d json files" % (data >> 20, nshards, ntensors, njson))
print("v2: checkpoint-200, %d of %d tensors rewritten = %.0f MiB (%.0f%%) changed"
      % (nchanged, ntensors, changed / 2**20, 100.0 * changed / data))
for t in tools:
    v = get(t + ".version")
    if v:
        print("  %-9s %s" % (t, v))
print()

rows = []  # name, copies, v1, v2, added per copy, restore, verify, note
for t in tools:
    if get(t + ".skipped"):
        rows.append((t, None, None, None, None, None, "skipped: " + get(t + ".skipped"), None))
        continue
    if get(t + ".failed"):
        rows.append((t, None, None, None, None, None, "FAILED (" + get(t + ".failed") + ")", None))
        continue
    copies = int(get(t + ".copies") or 1)
    added = num(t + ".added")
    added = added / copies if added is not None else None
    ver = get(t + ".verify") or "?"
    if t == "restic":
        v1 = [num("restic.v1.%d" % i) for i in (1, 2, 3)]
        v2 = [num("restic.v2.%d" % i) for i in (1, 2, 3)]
        r = num("restic.restore")
        rows.append(("restic x3", 3, sum(v1), sum(v2), added, r, ver, "3 repos, one backup each"))
        rows.append(("restic x1", 1, v1[0], v2[0], added, r, ver, "1 repo"))
    else:
        rows.append((t, copies, num(t + ".v1"), num(t + ".v2"), added, num(t + ".restore"), ver,
                     None))

ref = next((r for r in rows if r[0] == "ckptsync" and r[2] is not None), None)

def rate(sec):
    return "%7.0f" % (data / 1e6 / sec) if sec else "      -"

def ratio(sec, i):
    if not ref or not sec or not ref[i]:
        return "     -"
    return "%5.2fx" % (sec / ref[i])

hdr = ("%-10s %6s | %8s %7s | %8s %7s | %9s | %8s %7s %7s | %6s %6s %6s"
       % ("tool", "copies", "v1 s", "MB/s", "v2 s", "MB/s", "+v2 MiB", "rest. s", "MB/s", "diff",
          "v1", "v2", "rest."))
print("%-17s | %-16s | %-16s | %-9s | %-24s | %s" % ("", "backup v1", "backup v2 (incr)",
      "repo +v2", "restore v2", "time / ckptsync time"))
print(hdr)
print("-" * len(hdr))
for name, copies, v1, v2, added, rs, ver, note in rows:
    if copies is None:
        print("%-10s %s" % (name, ver))
        continue
    print("%-10s %6d | %8.2f %s | %8.2f %s | %9.1f | %8.2f %s %7s | %s %s %s"
          % (name, copies, v1, rate(v1), v2, rate(v2), added / 2**20 if added is not None else -1,
             rs, rate(rs), ver, ratio(v1, 2), ratio(v2, 3), ratio(rs, 5)))
print()
print("MB/s: logical checkpoint bytes (%d MB) per second, 1 MB = 10^6 bytes; v2 rates count"
      " the whole v2 tree." % (data // 10**6))
print("+v2 MiB: bytes the v2 backup added to ONE copy of the repository (ckptsync and restic x3"
      " store three copies: x3 on disk).")
print("ratio: the tool's time divided by ckptsync's for the same step; above 1x ckptsync is"
      " faster.")
print("ckptsync: 3 dir regions on this one disk, default chunker (512K/2M/8M), zstd; restore"
      " with the local index deleted (a new instance).")
print("restic x3 backs up three times (three repos, like ckptsync's three replicas); restic x1"
      " is the first of them alone.  borg, casync and rclone make one copy.")
print("All copies are on the same disk; times include a final sync.")
for name, copies, v1, v2, added, rs, ver, note in rows:
    if ref and copies is not None and name != "ckptsync":
        print("  %s/ckptsync: backup v1 %.1fx, backup v2 %.1fx, restore %.1fx"
              % (name, v1 / ref[2], v2 / ref[3], rs / ref[5]))
PY
