#!/usr/bin/env bash
# run.sh — build the libFuzzer targets with clang (ASan+UBSan) and fuzz each
# parser for SECONDS (default 20), starting from its committed corpus.
#   tests/fuzz/run.sh [SECONDS] [PARSER...]
# A crash fails the script and leaves the input in build-fuzz/artifacts/.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
secs=${1:-20}; shift || true
build=${CKS_FUZZ_BUILD:-$top/build-fuzz}
command -v clang > /dev/null || { echo "fuzz: clang not installed; skipped"; exit 0; }
CC=clang cmake -S "$top" -B "$build" -DCKS_FUZZ=ON -DCKS_SANITIZE=ON -DCKS_TESTS=ON > /dev/null
parsers=("$@")
if [ ${#parsers[@]} -eq 0 ]; then
  for f in "$top"/tests/fuzz/fuzz-*.c; do p=$(basename "$f" .c); parsers+=("${p#fuzz-}"); done
fi
targets=(); for p in "${parsers[@]}"; do targets+=("fuzz-$p"); done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" > /dev/null
mkdir -p "$build/artifacts"
for p in "${parsers[@]}"; do
  work=$(mktemp -d); cp "$top/tests/fuzz/corpus/$p"/* "$work/"
  echo "fuzz: $p for ${secs}s"
  "$build/tests/fuzz-$p" -max_total_time="$secs" -print_final_stats=0 \
      -artifact_prefix="$build/artifacts/$p-" "$work" 2> "$build/fuzz-$p.log" \
    || { tail -40 "$build/fuzz-$p.log"; rm -rf "$work"; echo "fuzz: $p FAILED"; exit 1; }
  grep -E '^#[0-9]+ *DONE' "$build/fuzz-$p.log" | tail -1 || true
  rm -rf "$work"
done
echo "fuzz: ${#parsers[@]} parsers, no crash"
