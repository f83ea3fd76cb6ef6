#!/usr/bin/env bash
# crypt-cost.sh — what client-side encryption costs: the same realistic
# PyTorch checkpoint (tests/bench/make_ckpt.py) snapshotted by the CLI into
# three regions on tmpfs (CPU bound: no disk in the way) and restored on a
# fresh instance, into an unencrypted and an encrypted repository, ROUNDS
# times alternating, in one run.  Reports CPU seconds (user + sys) and wall
# seconds per run, the median of each, and the ratio encrypted / plain.
# A benchmark, not a test: it prints a table and never fails on time.
#
#   tests/bench/crypt-cost.sh [SIZE_MIB]     default 512; ROUNDS (default 3)
#   WRITE_RESULTS=1 also writes the table into tests/bench/RESULTS.md
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
SIZE_MIB=${1:-512}
ROUNDS=${ROUNDS:-3}
say() { echo "crypt-cost: $*" >&2; }
. "$top/tests/bench/benchlib.sh"

T=$(mktemp -d /dev/shm/cks-crypt.XXXXXX)
trap 'rm -rf "$T"' EXIT
cmake -S "$top" -B "$top/build-bench" -DCMAKE_BUILD_TYPE=Release -DCKS_TESTS=OFF > "$T/build.log" 2>&1
cmake --build "$top/build-bench" -j"$(nproc)" >> "$T/build.log" 2>&1 || { tail -20 "$T/build.log"; exit 1; }
CKS=$top/build-bench/ckptsync
say "writing a ${SIZE_MIB} MiB checkpoint with python3-torch"
/usr/bin/python3 "$top/tests/bench/make_ckpt.py" "$T/ckpt/checkpoint-100" "$SIZE_MIB" > /dev/null
head -c 32 /dev/urandom > "$T/key"; chmod 600 "$T/key"

conf() { # conf NAME ENCRYPTED
  mkdir -p "$T/$1"/{a,b,c}
  {
    printf '[daemon]\nwatch = %s/watch\nstate = %s/%s/state\n' "$T" "$T" "$1"
    [ "$2" = 1 ] && printf '[repository]\nencryption = aes-256-gcm\nkey_file = %s/key\n' "$T"
    for r in a b c; do printf '[region.%s]\nkind = dir\npath = %s/%s/%s\n' "$r" "$T" "$1" "$r"; done
  } > "$T/$1.conf"
}
# cpu_of CMD...: "cpu wall" seconds of one command (its children included).
cpu_of() {
  /usr/bin/time -f '%U %S %e' -o "$T/time" "$@" > /dev/null 2>> "$T/cmd.log"
  awk '{printf "%.2f %.2f\n", $1 + $2, $3}' "$T/time"
}
declare -A CPU WALL
for k in $(seq 1 "$ROUNDS"); do
  for mode in plain enc; do
    name=$mode$k; conf "$name" "$([ $mode = enc ] && echo 1 || echo 0)"
    read -r c w < <(cpu_of "$CKS" --config "$T/$name.conf" snapshot "$T/ckpt/checkpoint-100" --run r -q)
    CPU[$mode,snap]+="$c "; WALL[$mode,snap]+="$w "
    rm -rf "$T/$name/state" "$T/out"
    read -r c w < <(cpu_of "$CKS" --config "$T/$name.conf" restore --run r --latest --to "$T/out" -q)
    CPU[$mode,rest]+="$c "; WALL[$mode,rest]+="$w "
    diff -r "$T/ckpt/checkpoint-100" "$T/out/checkpoint-100" > /dev/null || { say "$mode restore differs"; exit 1; }
    say "round $k $mode: snapshot ${CPU[$mode,snap]##* }... restore done"
    rm -rf "${T:?}/$name" "$T/out"
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
{
  echo "## Encryption cost ($(date -u +%Y-%m-%d), $(git -C "$top" rev-parse --short HEAD), ${SIZE_MIB} MiB torch checkpoint, 3 dir regions on tmpfs, $(nproc) CPUs, median of $ROUNDS)"
  echo
  echo "| operation | plain CPU s | encrypted CPU s | CPU ratio | plain wall s | encrypted wall s |"
  echo "|---|---|---|---|---|---|"
  for op in snap rest; do
    pc=$(echo "${CPU[plain,$op]}" | median); ec=$(echo "${CPU[enc,$op]}" | median)
    pw=$(echo "${WALL[plain,$op]}" | median); ew=$(echo "${WALL[enc,$op]}" | median)
    printf '| %s | %s | %s | %.3f | %s | %s |\n' "$([ $op = snap ] && echo "snapshot (3 regions)" || echo restore)" \
      "$pc" "$ec" "$(awk -v a="$ec" -v b="$pc" 'BEGIN {print a / b}')" "$pw" "$ew"
  done
  echo
  echo "Per run: plain snapshot CPU ${CPU[plain,snap]}; encrypted ${CPU[enc,snap]}; plain restore ${CPU[plain,rest]}; encrypted ${CPU[enc,rest]}."
} | tee "$T/table.md"
if [ "${WRITE_RESULTS:-0}" = 1 ]; then
  python3 - "$top/tests/bench/RESULTS.md" "$T/table.md" <<'PY'
import re, sys
path, table = sys.argv[1], open(sys.argv[2]).read()
text = open(path).read() if __import__('os').path.exists(path) else ""
text = re.sub(r"## Encryption cost.*?(?=\n## |\Z)", "", text, flags=re.S).rstrip() + "\n\n" + table
open(path, "w").write(text)
PY
fi
