#!/usr/bin/env bash
# fnlen-check.sh — no function in syncd/ or client/ is longer than 80 lines
# (STYLE.md: short functions).  The sources are clang-formatted with Linux
# braces, so a function body opens with "{" alone at column 0 and closes
# with "}" at column 0; nothing else in the tree does (initializers open
# with "= {" at the end of a line).  A function's length counts the lines
# from the first line of its signature to its closing brace, both included
# (the count issue 21 quotes: cmd_forget 140 lines).
# Prints "file:line: name N lines" for each function over the limit, longest
# first, and exits 1 if there is one.
# Usage: fnlen-check.sh [SOURCE_DIR] [LIMIT]   (LIMIT 0 lists every function)
set -euo pipefail
top=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
limit=${2:-80}
cd "$top"
out=$(find syncd client -name '*.[ch]' -print0 | sort -z | xargs -0 awk -v limit="$limit" '
FNR == 1 { inside = 0; sig = "" }
!inside && /^[A-Za-z_].*\(/ { sig = $0; sigline = FNR }
!inside && /^\{$/ {
    inside = 1
    name = sig; sub(/\(.*/, "", name); sub(/.*[ *]/, "", name)
    next
}
inside && /^\}/ {
    inside = 0; n = FNR - sigline + 1
    if (n > limit)
        printf "%d\t%s:%d: %s %d lines\n", n, FILENAME, sigline, name, n
}
' | sort -t$'\t' -k1,1nr | cut -f2-)
if [ -n "$out" ]; then
    echo "$out"
    [ "$limit" = 0 ] && exit 0
    echo "fnlen: $(echo "$out" | wc -l) function(s) longer than $limit lines"
    exit 1
fi
echo "fnlen: no function longer than $limit lines"
