#!/usr/bin/env bash
# include-cycles.sh — the include graph's circles among the files of one
# directory (default syncd/service), STYLE.md: "Inside a layer, no two
# files call each other".  A node is a module (x.c and x.h together); an
# edge x -> y says x.c or x.h includes "<dir>/y.h".  Prints each strongly
# connected set of two or more modules (one line each, with the edges that
# close it) and exits 1 if there is one.
# Usage: include-cycles.sh [SOURCE_DIR [DIR]]
set -euo pipefail
top=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
dir=${2:-syncd/service}
cd "$top"
python3 - "$dir" <<'PY'
import os, re, sys
d = sys.argv[1]
layer = os.path.basename(d)
inc = re.compile(r'^\s*#\s*include\s*"' + re.escape(layer) + r'/([^"/]+)\.h"', re.M)
edges = {}
for f in sorted(os.listdir(d)):
    m, ext = os.path.splitext(f)
    if ext not in (".c", ".h"):
        continue
    with open(os.path.join(d, f), encoding="utf-8", errors="replace") as fh:
        for y in inc.findall(fh.read()):
            if y != m:
                edges.setdefault(m, set()).add(y)
            edges.setdefault(y, set())
    edges.setdefault(m, set())
# Tarjan's strongly connected components
index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]
def visit(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in sorted(edges[v]):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        c = []
        while True:
            w = stack.pop(); on.discard(w); c.append(w)
            if w == v:
                break
        if len(c) > 1:
            sccs.append(sorted(c))
sys.setrecursionlimit(10000)
for v in sorted(edges):
    if v not in index:
        visit(v)
for c in sccs:
    inner = ["%s -> %s" % (a, b) for a in c for b in sorted(edges[a]) if b in c]
    print("circle: %s   (%s)" % (" ".join(c), ", ".join(inner)))
print("%s: %d modules, %d include edges, %d circle(s)" %
      (d, len(edges), sum(len(v) for v in edges.values()), len(sccs)))
sys.exit(1 if sccs else 0)
PY
