#!/usr/bin/env bash
# layers-check.sh — includes point one way (STYLE.md "Layout shows the
# architecture"): base <- engine <- store <- service <- {daemon, client},
# and the public headers (include/ckptsync) include nothing of the daemon's.
# The daemon wing (syncd/daemon: the loop, control server, ingest, region
# workers, detection, watcher...) and the CLI (client/) are two front ends
# over the shared service layer: neither includes the other, and nothing
# below them includes the wing.
#   base     includes base only
#   engine   base, engine
#   store    base, engine, store
#   service  base, engine, store, service
#   daemon   base, engine, store, service, daemon
#   client   base, engine, store, service (never daemon/)
# Every layer may include the public headers (ckptsync/*.h: the protocol
# and format constants).
# Prints every include that points up a layer, naming file and line, and
# exits 1 if there is one.  Usage: layers-check.sh [SOURCE_DIR]
set -euo pipefail
top=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$top"
bad=0
check() { # check DIR ALLOWED_REGEX
  local dir=$1 allowed=$2 f line
  for f in $dir/*.c $dir/*.h; do
    [ -e "$f" ] || continue
    while IFS= read -r line; do
      local n=${line%%:*} inc=${line#*:}
      inc=${inc#*\"}
      inc=${inc%%\"*}
      case $inc in */*) ;; *) continue ;; esac  # same-folder or system headers
      if ! [[ $inc =~ ^($allowed)/ ]]; then
        echo "$f:$n: includes \"$inc\", a layer above ${dir##*/}"
        bad=1
      fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" || true)
  done
}
check syncd/base 'ckptsync|base'
check syncd/engine 'ckptsync|base|engine'
check syncd/store 'ckptsync|base|engine|store'
check syncd/service 'ckptsync|base|engine|store|service'
check syncd/daemon 'ckptsync|base|engine|store|service|daemon'
check client 'ckptsync|base|engine|store|service|client'
check include/ckptsync 'ckptsync'
[ $bad = 0 ] && echo "layers: every include points down"
exit $bad
