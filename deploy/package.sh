#!/usr/bin/env bash
# package.sh — build the Debian package: ckptsync_<version>_<arch>.deb.
#
#   deploy/package.sh [--build DIR] [--out DIR]
#
# Builds (incrementally) a release tree for prefix /usr in DIR (default
# $CKS_PACKAGE_BUILD, else build-package/; tests/run.sh's build-release/
# will do: it is reconfigured for prefix /usr, nothing is recompiled),
# installs it into a staging root with `cmake --install --strip`, adds
# what the CMake install does not know about, and writes the package with
# dpkg-deb into --out (default: the build directory).  Prints its path.
# Needs no root: the files are owned by root in the package
# (--root-owner-group), not on disk.
#
# The package holds:
#   /usr/bin/ckptsync, /usr/sbin/ckptsyncd, /usr/sbin/ckptsync-preempt-watch
#   /lib/systemd/system/ckptsyncd.service, ckptsync-preempt.service
#                       (not enabled: systemctl enable --now ckptsyncd)
#   /etc/ckptsync/ckptsync.conf.example (a conffile; the daemon reads
#                       /etc/ckptsync/ckptsync.conf, else its embedded default)
#   /usr/share/ckptsync/examples/*.conf, /usr/share/ckptsync/hooks/*.sh
#   /usr/lib/python3/dist-packages/ckptsync/ (the Python module)
#   /usr/include/ckptsync/*.h, /usr/lib/<multiarch>/libckptsync-client.{so.*,so,a},
#                       .../pkgconfig/ckptsync-client.pc
#   /usr/share/doc/ckptsync/README.md, copyright
# Depends: the shared libraries the binaries need, as dpkg-shlibdeps finds
# them (libc6, libzstd1, libssl3, libcurl4, liburing2, liblmdb0, libinih1,
# libexpat1), with their minimum versions.
#
# One package, not Debian's split into ckptsync, libckptsync-client0,
# libckptsync-client-dev and python3-ckptsync: this is for images that
# want the whole thing, from one file.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${CKS_PACKAGE_BUILD:-$top/build-package}
out=
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2;;
    --out) out=$2; shift 2;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0;;
    *) echo "package.sh: unknown argument '$1' (see --help)" >&2; exit 2;;
  esac
done
build=$(mkdir -p "$build" && cd "$build" && pwd)
out=${out:-$build}
mkdir -p "$out"
die() { echo "package.sh: $*" >&2; exit 1; }
for tool in cmake dpkg-deb dpkg-shlibdeps; do
  command -v "$tool" > /dev/null || die "'$tool' not found (deploy/deps.sh installs it)"
done

# The package is a release build: sanitizer runtimes have no place in it.
if [ -f "$build/CMakeCache.txt" ] && grep -Eq '^CKS_(SANITIZE|TSAN|FUZZ):BOOL=ON' "$build/CMakeCache.txt"; then
  die "$build is a sanitizer or fuzzing build; give a release build (--build DIR)"
fi
cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKS_TESTS=OFF -DCKS_WERROR=ON \
      -DCMAKE_INSTALL_PREFIX=/usr > /dev/null
cmake --build "$build" -j"$(nproc)" > "$build/package-build.log" 2>&1 \
  || { tail -30 "$build/package-build.log" >&2; die "the build failed (log: $build/package-build.log)"; }

version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
[ -n "$version" ] || die "no project version in $build/CMakeCache.txt"
arch=$(dpkg --print-architecture)
deb="$out/ckptsync_${version}_${arch}.deb"

# The staging root lives in the build tree (dpkg-deb wants 0755
# directories, which a mktemp -d is not).
root="$build/package-root"
rm -rf "$root"
install -d -m 0755 "$root" "$root/DEBIAN"
DESTDIR="$root" cmake --install "$build" --prefix /usr --strip > /dev/null

# What the source tree adds: the same files deploy/install.sh installs,
# under /usr instead of /usr/local.
install -D -m 0755 "$top/deploy/preempt-watch.sh" "$root/usr/sbin/ckptsync-preempt-watch"
install -D -m 0644 "$top/deploy/ckptsync.conf.example" "$root/etc/ckptsync/ckptsync.conf.example"
install -d -m 0755 "$root/usr/share/ckptsync/examples" "$root/usr/share/ckptsync/hooks"
install -m 0644 "$top"/deploy/examples/*.conf "$root/usr/share/ckptsync/examples/"
install -m 0755 "$top"/deploy/hooks/*.sh "$root/usr/share/ckptsync/hooks/"
install -D -m 0644 "$top/client/python/ckptsync/__init__.py" \
        "$root/usr/lib/python3/dist-packages/ckptsync/__init__.py"
install -D -m 0644 "$top/README.md" "$root/usr/share/doc/ckptsync/README.md"
cat > "$root/usr/share/doc/ckptsync/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: ckptsync
Comment: The source tree this package was built from states no license.
EOF
chmod 0644 "$root/usr/share/doc/ckptsync/copyright"
# The units name the /usr/local paths deploy/install.sh uses.
install -d -m 0755 "$root/lib/systemd/system"
for unit in ckptsyncd.service ckptsync-preempt.service; do
  sed -e 's|/usr/local/sbin/|/usr/sbin/|g' -e 's|/usr/local/bin/|/usr/bin/|g' \
      -e 's|/usr/local/share/|/usr/share/|g' \
      -e 's|Installed by deploy/install.sh as|Installed by the Debian package (deploy/package.sh) as|' \
      -e 's|/etc/systemd/system/ckptsyncd.service|/lib/systemd/system/ckptsyncd.service|' \
      "$top/deploy/$unit" > "$root/lib/systemd/system/$unit"
  chmod 0644 "$root/lib/systemd/system/$unit"
done
if grep -rq /usr/local "$root/lib/systemd/system"; then
  die "a systemd unit still names /usr/local: $(grep -rl /usr/local "$root/lib/systemd/system")"
fi

# Maintainer scripts: reload systemd and keep the units disabled (the
# administrator enables what they want); stop the services on removal.
cat > "$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  install -d -m 0700 /var/lib/ckptsync
  if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
fi
exit 0
EOF
cat > "$root/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
  systemctl stop ckptsync-preempt.service ckptsyncd.service || true
fi
exit 0
EOF
cat > "$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
exit 0
EOF
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"
echo "activate-noawait ldconfig" > "$root/DEBIAN/triggers"
echo "/etc/ckptsync/ckptsync.conf.example" > "$root/DEBIAN/conffiles"

# Depends, from the ELF files' NEEDED entries and the installed libraries'
# symbols files (dpkg-shlibdeps wants a debian/control to read).
shl="$build/package-shlibdeps"
rm -rf "$shl"
mkdir -p "$shl/debian"
printf 'Source: ckptsync\n\nPackage: ckptsync\nArchitecture: any\n' > "$shl/debian/control"
mapfile -t elves < <(find "$root/usr" -type f \( -perm -0100 -o -name '*.so*' \) \
                       -exec sh -c 'head -c 4 "$1" | grep -q ELF' _ {} \; -print | sort)
[ ${#elves[@]} -ge 3 ] || die "expected the two programs and the library in $root, found: ${elves[*]}"
depends=$(cd "$shl" && dpkg-shlibdeps -O -l"$root/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)" \
            "${elves[@]}" 2> "$shl/warnings" | sed -n 's/^shlibs:Depends=//p') \
  || { cat "$shl/warnings" >&2; die "dpkg-shlibdeps failed"; }
[ -n "$depends" ] || { cat "$shl/warnings" >&2; die "dpkg-shlibdeps found no dependencies"; }

find "$root" -path "$root/DEBIAN" -prune -o -type f -printf '%P\0' | sort -z \
  | (cd "$root" && xargs -0 md5sum) > "$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums" "$root/DEBIAN/triggers" "$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<EOF
Package: ckptsync
Version: $version
Architecture: $arch
Maintainer: ${DEBFULLNAME:-ckptsync developers} <${DEBEMAIL:-ckptsync@localhost}>
Installed-Size: $size
Depends: $depends
Recommends: curl, python3
Section: admin
Priority: optional
Description: replicate training checkpoints to three regions, restore them anywhere
 ckptsyncd watches the directory training writes checkpoints to, cuts what
 it writes into content-defined chunks (FastCDC), stores each distinct
 chunk once, compressed (zstd), and replicates it to three regions (S3 or
 mounted directories), so that a new instance, of any GPU type, restores
 the newest checkpoint verified and resumes training.
 .
 This package holds the daemon and its systemd units (not enabled), the
 ckptsync command, the preemption watcher and migration hooks, the Python
 module, and the C client library with its headers and pkg-config file.
EOF
chmod 0644 "$root/DEBIAN/control"

dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" > /dev/null
echo "$deb"
