#!/usr/bin/env bash
# restore-netns.sh — restore and ingest behind a capped link (#24 item 6):
# the instance (ckptsync) runs in a network namespace whose veth link to
# the host is capped with tc (tbf, RATE each way; plus netem DELAY_MS each
# way where the kernel has sch_netem; benchlib.sh's link_up, link_shape),
# in front of three s3rver regions on the host side.  A torch-style
# checkpoint (trainer_state.json, WEIGHTS_MIB of model.safetensors, 3 x
# that of optimizer.pt, random bytes: nothing to compress) is snapshotted
# through the link, then restored --progressive on a fresh instance (with
# each binary and setting asked for, on the same snapshot).  Prints, in
# one run:
#   restore throughput / link rate         (goal >= 0.9)
#   time until model.safetensors is placed / (weights bytes / link rate)
#                                          (goal <= 1.1, plus at most 1 s)
#   CPU s per GB restored and ingested
# A benchmark, not a test: it never fails on a figure.  Needs root (ip
# netns, tc), node with tests/s3's packages, GNU time.
#
#   tests/bench/restore-netns.sh [CKPTSYNC]   default build-release/ckptsync
#   RATE         link rate, tc syntax (default 1gbit)
#   DELAY_MS     one-way delay each direction (default 5: RTT 10 ms; needs
#                sch_netem, else reported as 0)
#   WEIGHTS_MIB  default 128 (optimizer state 3 x, total 4 x)
#   WORKERS      [daemon] workers (default 0: one per CPU)
#   BEFORE       another ckptsync binary (e.g. main's build) restored too,
#                on the same snapshot, for a before/after in one run
#   INFLIGHT     [restore] inflight values, one restore each (e.g.
#                "0 16M 64M"); default: one restore with the default
#   PERF=1       perf record -g each restore, print its threads' and top
#                symbols' shares (is restore's CPU the bound?); the s3rver
#                regions' CPU s per GB is printed in every run
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
export CKPTSYNC=${1:-$top/build-release/ckptsync}
export CKS_SOURCE_DIR=$top
RATE=${RATE:-1gbit}
DELAY_MS=${DELAY_MS:-5}
WEIGHTS_MIB=${WEIGHTS_MIB:-128}
WORKERS=${WORKERS:-0}
BEFORE=${BEFORE:-}
INFLIGHT=${INFLIGHT:-}
[ "$(id -u)" = 0 ] || { echo "restore-netns: needs root (ip netns, tc)" >&2; exit 1; }
[ -x "$CKPTSYNC" ] || { echo "restore-netns: no $CKPTSYNC (build it: cmake --build build-release)" >&2; exit 1; }
. "$top/tests/integration/lib.sh"
. "$top/tests/integration/s3lib.sh"

S=$T
. "$top/tests/bench/benchlib.sh"
link_up
CKS_CLEANUP_HOOKS+=(link_down)
link_shape "$RATE" "$DELAY_MS"
delay=$LINK_DELAY rate_bps=$LINK_BPS

# three s3rver regions on the host side of the link
link_s3 a b c
write_s3_credentials
mkdir -p "$T/watch"
{
  config_head 512K 2M 8M
  link_s3_conf a b c
} > "$CONF"
sed -i "/^\[daemon\]/a workers = $WORKERS" "$CONF"

src="$T/src/checkpoint-100"
mkdir -p "$src"
printf '{"global_step": 100}\n' > "$src/trainer_state.json"
head -c $((WEIGHTS_MIB << 20)) /dev/urandom > "$src/model.safetensors"
head -c $((3 * WEIGHTS_MIB << 20)) /dev/urandom > "$src/optimizer.pt"
total=$(du -sb "$src" | cut -f1)
wbytes=$(stat -c %s "$src/model.safetensors")

inns /usr/bin/time -f '%e %U %S' -o "$T/ingest.t" "$CKPTSYNC" --config "$CONF" snapshot "$src" \
  --run bench --step 100 > /dev/null 2> "$T/ingest.err" || { cat "$T/ingest.err" >&2; exit 1; }
# restore_one LABEL BINARY [INFLIGHT]: restore --progressive on a fresh
# instance, each placed line timestamped as it arrives.
restore_one() {
  local label=$1 bin=$2 conf=$CONF
  if [ -n "${3:-}" ]; then
    conf="$T/conf.$label"
    { cat "$CONF"; printf '[restore]\ninflight = %s\n' "$3"; } > "$conf"
  fi
  rm -rf "$STATE" "$T/out"
  local perf=() n0
  [ "${PERF:-0}" = 1 ] && perf=(perf record -g -F 499 -o "$T/perf.$label.data" --)
  n0=$(s3_cpu_ticks a b c)
  inns /usr/bin/time -f '%e %U %S' -o "$T/restore.$label.t" "${perf[@]}" "$bin" --config "$conf" restore \
    --run bench --latest --to "$T/out" --progressive --json 2> "$T/restore.err" |
    python3 -c '
import sys, time
t0 = time.monotonic()
for line in sys.stdin:
    print("%.3f %s" % (time.monotonic() - t0, line.strip()), flush=True)' > "$T/restore.$label.lines" ||
    { cat "$T/restore.err" >&2; exit 1; }
  echo $(($(s3_cpu_ticks a b c) - n0)) > "$T/node.$label.ticks"
  if [ "${PERF:-0}" = 1 ]; then
    echo "== perf record -g of restore $label: threads, then symbols" >> "$T/perf.txt"
    perf report -i "$T/perf.$label.data" --no-children --sort pid --stdio -g none 2> /dev/null |
      grep -E '^ +[0-9]' | sed -n 1,6p >> "$T/perf.txt" || true
    perf report -i "$T/perf.$label.data" --no-children --sort sym --stdio -g none 2> /dev/null |
      grep -E '^ +[0-9]' | sed -n 1,10p >> "$T/perf.txt" || true
  fi
  same_tree "$src" "$T/out/checkpoint-100"
}
labels=()
if [ -n "$BEFORE" ]; then
  restore_one before "$BEFORE"
  labels+=(before)
fi
for v in $INFLIGHT; do
  restore_one "inflight=$v" "$CKPTSYNC" "$v"
  labels+=("inflight=$v")
done
if [ -z "$INFLIGHT" ]; then
  restore_one after "$CKPTSYNC"
  labels+=(after)
fi

python3 - "$T" "$total" "$wbytes" "$rate_bps" "$RATE" "$delay" "$WORKERS" "$CKPTSYNC" "${labels[@]}" << 'PY'
import json, os, sys
T, total, wbytes, rate, rate_s, delay, workers, cks = sys.argv[1:9]
labels = sys.argv[9:]
total, wbytes, rate = int(total), int(wbytes), int(rate)
def times(name):
    wall, user, sys_ = map(float, open(os.path.join(T, name)).read().split()[-3:])
    return wall, user + sys_
def placed(label):
    for line in open(os.path.join(T, "restore.%s.lines" % label)):
        t, js = line.split(" ", 1)
        if json.loads(js).get("placed", "").endswith("/model.safetensors"):
            return float(t)
    return None
iw, ic = times("ingest.t")
gb = total / 1e9
wire = total / rate
print("restore-netns: link %s each way (%.0f MB/s), one-way delay %s ms, workers %s, %s" %
      (rate_s, rate / 1e6, delay, workers, os.path.basename(cks)))
print("checkpoint: %.0f MB (weights %.0f MB, optimizer %.0f MB), 3 s3rver regions behind the link" %
      (total / 1e6, wbytes / 1e6, (total - wbytes) / 1e6))
print()
print("| measure | " + " | ".join(labels) + " | goal |")
print("|---|" + "---|" * len(labels) + "---|")
rows = {"restore wall s (link alone: %.2f s)" % wire: [], "restore throughput / link rate": [],
        "weights placed at s (weights / link: %.2f s)" % (wbytes / rate): [],
        "weights placed / (weights bytes / link rate)": [],
        "(weights placed - 1 s) / (weights bytes / link rate)": [], "restore CPU s/GB": [],
        "s3rver regions' CPU s/GB (during the restore)": []}
goals = ["", ">= 0.9", "", "", "<= 1.1", "", ""]
hz = os.sysconf("SC_CLK_TCK")
for label in labels:
    rw, rc = times("restore.%s.t" % label)
    p = placed(label)
    node = int(open(os.path.join(T, "node.%s.ticks" % label)).read()) / hz
    vals = [rw, wire / rw, p or -1, (p or 0) / (wbytes / rate),
            ((p or 0) - 1) / (wbytes / rate), rc / gb, node / gb]
    for (k, v) in zip(rows, vals):
        rows[k].append("%.2f" % v)
for (k, v), g in zip(rows.items(), goals):
    print("| %s | %s | %s |" % (k, " | ".join(v), g))
print("| ingest (snapshot through the link, 3 copies) wall s | %.2f | |" % iw)
print("| ingest CPU s/GB | %.2f | |" % (ic / gb))
PY
[ ! -e "$T/perf.txt" ] || cat "$T/perf.txt"
echo "(load: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores)"
