#!/usr/bin/env bash
# keys-check.sh — one module spells the repository's keys (STYLE.md: "The
# repository's object keys are built and parsed in one place"):
# syncd/store/layout.c, from the CKS_KEY_* constants of
# include/ckptsync/format.h.  Every other C file of syncd/ and client/,
# comments left out, must not
#   - use a CKS_KEY_* constant,
#   - hold a string literal that starts with a key folder ("snapshots/",
#     "locks/prune/" ...: every CKS_KEY_* value followed by '/'), or names
#     one in quotes inside a message (\"snapshots/...), or
#   - (syncd/ only; the CLI has a `repo` command) the literal "repo".
# Prints each offence with file and line; exits 1 if there is one.
# Usage: keys-check.sh [SOURCE_DIR]
set -euo pipefail
top=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$top"
python3 - <<'PY'
import glob, re, sys
fmt = open("include/ckptsync/format.h", encoding="utf-8").read()
tops = sorted(set(re.findall(r'#define\s+CKS_KEY_\w+\s+"([^"]+)"', fmt)))
whole = re.findall(r'#define\s+CKS_KEY_REPO\s+"([^"]+)"', fmt)
if not tops or not whole:
    sys.exit("keys-check: no CKS_KEY_* constants found in format.h")
files = sorted(glob.glob("syncd/**/*.[ch]", recursive=True) + glob.glob("client/**/*.[ch]", recursive=True))
token = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|\bCKS_KEY_\w+', re.S)
bad = 0
for f in files:
    if f == "syncd/store/layout.c":
        continue
    src = open(f, encoding="utf-8", errors="replace").read()
    for m in token.finditer(src):
        t, line = m.group(0), src.count("\n", 0, m.start()) + 1
        why = None
        if t.startswith("CKS_KEY_"):
            why = "uses %s" % t
        elif t.startswith('"'):
            body = t[1:-1]
            for k in tops:
                if body.startswith(k + "/") or ('\\"' + k + "/") in body:
                    why = "spells the key folder \"%s/\" in %s" % (k, t)
                    break
            if why is None and f.startswith("syncd/") and body in whole:
                why = "spells the key %s" % t
        if why:
            print("%s:%d: %s; build or parse keys with store/layout.h" % (f, line, why))
            bad = 1
if not bad:
    print("keys: only syncd/store/layout.c spells a key (%d folders checked in %d files)" % (len(tops), len(files) - 1))
sys.exit(bad)
PY
