#!/usr/bin/env bash
# build.sh — configure and build ckptsync (release) into build/.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKS_TESTS=OFF > /dev/null
cmake --build "$top/build" -j"$(nproc)"
