#!/usr/bin/env bash
# setup.sh — installs the S3 test servers' npm packages (tests/s3/node_modules)
# exactly as tests/s3/package-lock.json pins them.  Idempotent and quick when
# nothing changed: `npm ci` runs only when node_modules is missing or was
# installed from another package-lock.json (its hash is kept in
# node_modules/.ckptsync-lock-hash).  Concurrent runs wait for each other.
#   tests/s3/setup.sh [--quiet]
# Exits 0 when tests/s3/s3rver.js can run, 1 (with the reason on stderr) when not.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
quiet=0
[ "${1:-}" = "--quiet" ] && quiet=1
say() { [ $quiet = 1 ] || echo "s3/setup.sh: $*"; }
fail() { echo "s3/setup.sh: $*" >&2; exit 1; }

command -v node > /dev/null 2>&1 ||
  fail "node not found: install Node.js >= 18 (deploy/deps.sh --test installs Debian's nodejs and npm when node is missing)"
command -v npm > /dev/null 2>&1 ||
  fail "npm not found: install npm (Debian package npm, or the one that comes with Node.js)"
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
[ "$major" -ge 18 ] 2>/dev/null ||
  fail "node $(node --version 2>/dev/null) is too old: the S3 test servers need Node.js >= 18 (20 is what they are tested with)"

lock="$here/package-lock.json"
[ -f "$lock" ] || fail "$lock is missing"
want=$(cat "$here/package.json" "$lock" | sha256sum | cut -d' ' -f1)
stamp="$here/node_modules/.ckptsync-lock-hash"

up_to_date() {
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
    [ -f "$here/node_modules/@20minutes/s3rver/lib/s3rver.js" ]
}
up_to_date && { say "node_modules up to date"; exit 0; }

# One installer at a time (ctest runs tests in parallel; each may call this).
exec 9> "$here/.setup.lock"
flock 9 2>/dev/null || true
up_to_date && { say "node_modules up to date"; exit 0; }

say "installing the npm packages pinned in package-lock.json (npm ci)"
log=$(mktemp "${TMPDIR:-/tmp}/s3-setup.XXXXXX")
trap 'rm -f "$log"' EXIT
# --loglevel=error: the package declares engines node >= 24 and npm warns
# (EBADENGINE) on Node 20; it runs there (see README.md).
if ! (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) > "$log" 2>&1; then
  tail -20 "$log" >&2
  fail "npm ci failed in $here (is the npm registry reachable?)"
fi
(cd "$here" && node -e 'require("@20minutes/s3rver")') > "$log" 2>&1 ||
  { cat "$log" >&2; fail "@20minutes/s3rver was installed but does not load with node $(node --version)"; }
echo "$want" > "$stamp"
say "installed @20minutes/s3rver $(node -p 'require(process.argv[1]).version' "$here/node_modules/@20minutes/s3rver/package.json")"
