#!/usr/bin/env bash
# install.sh — install ckptsync on this machine (Debian 12, as root):
# packages, a release build, the binaries in /usr/local, an example
# configuration in /etc/ckptsync, and the state directory.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/deploy/deps.sh"
"$top/deploy/build.sh"
cmake --install "$top/build" --prefix /usr/local > /dev/null
install -d -m 0755 /etc/ckptsync
install -m 0644 "$top/deploy/ckptsync.conf.example" /etc/ckptsync/ckptsync.conf.example
install -d -m 0700 /var/lib/ckptsync
echo "installed: $(/usr/local/bin/ckptsync --version)"
