#!/usr/bin/env bash
# install.sh — install ckptsync on this machine (Debian 12, as root):
# packages, a release build, the binaries in /usr/local, the C client
# library (static and shared, headers, pkg-config file ckptsync-client.pc),
# an example configuration in /etc/ckptsync, and the state directory.
# (deploy/package.sh builds Debian packages of the same files instead.)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/deploy/deps.sh"
"$top/deploy/build.sh"
cmake --install "$top/build" --prefix /usr/local > /dev/null
# libckptsync-client.so.0 is new to the dynamic linker's cache.
ldconfig
install -d -m 0755 /etc/ckptsync
install -m 0644 "$top/deploy/ckptsync.conf.example" /etc/ckptsync/ckptsync.conf.example
install -d -m 0700 /var/lib/ckptsync
install -d -m 0755 /usr/local/share/doc/ckptsync
install -m 0644 "$top/README.md" /usr/local/share/doc/ckptsync/README.md
install -d -m 0755 /usr/local/share/doc/ckptsync/docs
install -m 0644 "$top"/docs/*.md /usr/local/share/doc/ckptsync/docs/
install -d -m 0755 /usr/local/share/ckptsync/examples /usr/local/share/ckptsync/hooks
install -m 0644 "$top"/deploy/examples/*.conf /usr/local/share/ckptsync/examples/
install -m 0755 "$top"/deploy/hooks/*.sh /usr/local/share/ckptsync/hooks/
install -m 0755 "$top/deploy/preempt-watch.sh" /usr/local/sbin/ckptsync-preempt-watch
# The Python module (standard library only) for Debian's python3.
pydir=$(/usr/bin/python3 -c 'import sys; print(next(p for p in sys.path if p.startswith("/usr/local/lib/python3") and p.endswith("dist-packages")))' 2>/dev/null || true)
if [ -n "$pydir" ]; then
  install -d -m 0755 "$pydir/ckptsync"
  install -m 0644 "$top/client/python/ckptsync/__init__.py" "$pydir/ckptsync/__init__.py"
fi
if [ -d /etc/systemd/system ]; then
  install -m 0644 "$top/deploy/ckptsyncd.service" /etc/systemd/system/ckptsyncd.service
  install -m 0644 "$top/deploy/ckptsync-preempt.service" /etc/systemd/system/ckptsync-preempt.service
  command -v systemctl > /dev/null && systemctl daemon-reload 2> /dev/null || true
fi
echo "installed: $(/usr/local/bin/ckptsync --version), $(/usr/local/sbin/ckptsyncd --version)," \
     "libckptsync-client $(pkg-config --modversion ckptsync-client 2> /dev/null || echo '(no pkg-config)')"
echo "start it:  systemctl enable --now ckptsyncd   (or run ckptsyncd in a terminal)"
