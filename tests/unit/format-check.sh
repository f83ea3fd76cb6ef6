#!/usr/bin/env bash
# format-check.sh — every C source and header is formatted as the
# project's .clang-format says (clang-format --dry-run -Werror), so a
# change that is not formatted fails the test command.  Exits 77 (skip)
# where clang-format is not installed; deploy/deps.sh --test installs it.
#   format-check.sh [SOURCE_DIR]
set -euo pipefail
top=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$top"
command -v clang-format > /dev/null || { echo "skipped: clang-format is not installed"; exit 77; }
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h')
else
  mapfile -t files < <(find syncd client include tests -name '*.[ch]' | sort)
fi
bad=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! clang-format --dry-run -Werror "$f" > /dev/null 2>&1; then
    echo "$f: not formatted (clang-format -i $f)"
    bad=1
  fi
done
[ $bad = 0 ] && echo "format: ${#files[@]} files as .clang-format says"
exit $bad
