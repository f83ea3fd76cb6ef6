#!/usr/bin/env bash
# shell-check.sh — the test and deploy scripts run under `set -o pipefail`,
# where `producer | grep -q PATTERN` fails at random: grep -q exits at
# its first match, the producer's next write gets SIGPIPE, and the
# pipeline's status is 141 (seen in CI: test-package's `ldd | grep -q`,
# one run in ten here).  `producer | head -N` is the same race.  Such
# pipelines end in `grep PATTERN > /dev/null` or `sed -n 1,Np`, which
# read their whole input; this check finds any that do not.
# Lines inside `sh -c "..."` (no pipefail there) and comments are allowed.
#   shell-check.sh [SOURCE_DIR]
set -euo pipefail
top=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$top"
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.sh' .ci/run)
else
  mapfile -t files < <(find tests deploy .ci -name '*.sh' -o -name run | sort)
fi
bad=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  # `a | grep -q` or `a | head -N`, not `a || grep -q`, not within sh -c.
  if hits=$(grep -nE '(^|[^|])\|[[:space:]]*(grep[[:space:]]+-[[:alnum:]]*q|head[[:space:]]+-[0-9n])' "$f" | grep -v -e 'sh -c' -e '^[0-9]*:[[:space:]]*#'); then
    while IFS= read -r h; do echo "$f:$h: a reader that stops early ends a pipeline (SIGPIPE under pipefail; use grep ... > /dev/null or sed -n 1,Np)"; done <<< "$hits"
    bad=1
  fi
done
[ $bad = 0 ] && echo "shell: ${#files[@]} scripts, no early-stopping reader ending a pipeline"
exit $bad
