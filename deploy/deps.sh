#!/usr/bin/env bash
# deps.sh — install the Debian 12 packages ckptsync needs.
#   deploy/deps.sh          build and run (compiler, cmake, the five libraries)
#   deploy/deps.sh --test   also what the test suite needs (cmocka, clang for
#                           the fuzzers, clang-format for the format check,
#                           python3 and coreutils for the scripts,
#                           python3-torch for the PyTorch resume test, the AWS
#                           CLI and Node.js for the S3 tests: tests/s3/, Ceph
#                           (mon, osd, radosgw) for the "-ceph" tests on a real
#                           S3 implementation: tests/ceph/; dpkg-dev, venv,
#                           setuptools and wheel for the package tests:
#                           test-package.sh, test-python-pip.sh; lintian and
#                           man-db for test-package.sh (the packages linted,
#                           the man pages rendered); Prometheus and
#                           curl for test-metrics.sh, where a real Prometheus
#                           scrapes the daemon; faketime and gdb for
#                           test-prune-skew.sh: a pruner with a wrong clock,
#                           a writer held before its publish)
# Runs apt-get update only when something is missing, so a second run is quick.
set -euo pipefail

pkgs=(build-essential cmake pkg-config libzstd-dev libssl-dev libcurl4-openssl-dev
      liburing-dev liblmdb-dev libinih-dev libexpat1-dev)
if [ "${1:-}" = "--test" ]; then
  pkgs+=(libcmocka-dev clang clang-format libclang-rt-14-dev python3 lmdb-utils zstd util-linux awscli
        python3-torch ceph-mon ceph-osd radosgw ceph-common
        dpkg-dev lintian man-db python3-venv python3-setuptools python3-wheel prometheus curl faketime gdb)
  # Node.js runs the S3 test servers; these machines come with Node 20, so
  # Debian's nodejs (18) and npm only where there is no node at all.
  command -v node > /dev/null 2>&1 || pkgs+=(nodejs npm)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" > /dev/null || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "deps.sh: missing packages: ${missing[*]} (run as root, or install them)" >&2
  exit 1
fi
echo "deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
